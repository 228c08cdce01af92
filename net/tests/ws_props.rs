//! Property tests for `net::ws::Decoder`. Frames are built by a naive encoder
//! written here, independent of the crate's own, so both sides are checked.

use net::ws::OwnedMessage as Owned;
use net::ws::{self, Decoder, OpCode, WsError};
use proptest::prelude::*;

const MAX: usize = 1 << 20;

/// Tiny deterministic PRNG (splitmix64) for masks and chunk sizes.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Naive RFC 6455 client frame encoder.
fn naive_frame(op: u8, fin: bool, mask: [u8; 4], payload: &[u8], out: &mut Vec<u8>) {
    out.push(if fin { 0x80 } else { 0 } | op);
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if len < 65536 {
        out.push(0x80 | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
}

#[derive(Debug, Clone)]
enum Ctrl {
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<(u16, String)>),
}

impl Ctrl {
    fn encode(&self, rng: &mut Rng, out: &mut Vec<u8>) -> Owned {
        let mask = rng.next().to_le_bytes()[..4].try_into().unwrap();
        match self {
            Ctrl::Ping(p) => {
                naive_frame(0x9, true, mask, p, out);
                Owned::Ping(p.clone())
            }
            Ctrl::Pong(p) => {
                naive_frame(0xA, true, mask, p, out);
                Owned::Pong(p.clone())
            }
            Ctrl::Close(None) => {
                naive_frame(0x8, true, mask, &[], out);
                Owned::Close(None, String::new())
            }
            Ctrl::Close(Some((code, reason))) => {
                let mut p = code.to_be_bytes().to_vec();
                p.extend_from_slice(reason.as_bytes());
                naive_frame(0x8, true, mask, &p, out);
                Owned::Close(Some(*code), reason.clone())
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Item {
    Ctrl(Ctrl),
    /// A data message split at `cuts` (byte offsets, possibly inside a UTF-8
    /// sequence or repeated for empty fragments), with control frames
    /// interleaved after the given fragment index.
    Data {
        text: bool,
        payload: Vec<u8>,
        cuts: Vec<usize>,
        interleave: Vec<(usize, Ctrl)>,
    },
}

fn ctrl() -> impl Strategy<Value = Ctrl> {
    let small = prop::collection::vec(any::<u8>(), 0..=125);
    let code = prop_oneof![1000u16..=1003, 1007u16..=1011, 3000u16..=4999];
    // Reasons of up to 30 chars of up to 4 bytes each fit in 123 bytes.
    let reason = prop::collection::vec(any::<char>(), 0..=30).prop_map(|c| c.into_iter().collect());
    prop_oneof![
        small.clone().prop_map(Ctrl::Ping),
        small.prop_map(Ctrl::Pong),
        Just(Ctrl::Close(None)),
        (code, reason).prop_map(|(c, r)| Ctrl::Close(Some((c, r)))),
    ]
}

fn payload_len() -> impl Strategy<Value = usize> {
    // Exercise 7-bit, 16-bit and 64-bit length encodings.
    prop_oneof![8 => 0usize..300, 2 => 300usize..70_000, 1 => 65_536usize..140_000]
}

fn item() -> impl Strategy<Value = Item> {
    let data = (any::<bool>(), payload_len()).prop_flat_map(|(text, len)| {
        let payload = if text {
            prop::collection::vec(any::<char>(), len / 4..=len / 4 + 1)
                .prop_map(|c| c.into_iter().collect::<String>().into_bytes())
                .boxed()
        } else {
            prop::collection::vec(any::<u8>(), len..=len).boxed()
        };
        payload.prop_flat_map(move |payload| {
            let n = payload.len();
            (
                Just(payload),
                prop::collection::vec(0..=n, 0..5),
                prop::collection::vec((0usize..6, ctrl()), 0..3),
            )
                .prop_map(move |(payload, mut cuts, interleave)| {
                    cuts.sort_unstable();
                    Item::Data {
                        text,
                        payload,
                        cuts,
                        interleave,
                    }
                })
        })
    });
    prop_oneof![1 => ctrl().prop_map(Item::Ctrl), 3 => data]
}

/// Encodes items into a client byte stream and the messages it must decode to.
fn encode_items(items: &[Item], rng: &mut Rng) -> (Vec<u8>, Vec<Owned>) {
    let mut out = Vec::new();
    let mut expected = Vec::new();
    for item in items {
        match item {
            Item::Ctrl(c) => expected.push(c.encode(rng, &mut out)),
            Item::Data {
                text,
                payload,
                cuts,
                interleave,
            } => {
                let mut bounds = vec![0];
                bounds.extend(cuts.iter().copied());
                bounds.push(payload.len());
                let frags = bounds.len() - 1;
                for i in 0..frags {
                    let op = match (i, text) {
                        (0, true) => 0x1,
                        (0, false) => 0x2,
                        _ => 0x0,
                    };
                    let mask = rng.next().to_le_bytes()[..4].try_into().unwrap();
                    let last = i + 1 == frags;
                    naive_frame(op, last, mask, &payload[bounds[i]..bounds[i + 1]], &mut out);
                    if !last {
                        for (_, c) in interleave.iter().filter(|(at, _)| *at == i) {
                            expected.push(c.encode(rng, &mut out));
                        }
                    }
                }
                expected.push(if *text {
                    Owned::Text(String::from_utf8(payload.clone()).unwrap())
                } else {
                    Owned::Binary(payload.clone())
                });
            }
        }
    }
    (out, expected)
}

/// Feeds `stream` in random chunks, decoding until each chunk is exhausted.
/// Returns the messages and the first error, checking the API contract on the way.
fn feed(
    dec: &mut Decoder,
    stream: &[u8],
    rng: &mut Rng,
    max_chunk: usize,
) -> (Vec<Owned>, Option<WsError>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut got = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let n = 1 + rng.below(max_chunk);
        let end = stream.len().min(pos + n);
        buf.extend_from_slice(&stream[pos..end]);
        pos = end;
        loop {
            // Snapshot only small buffers: cloning large ones per byte is quadratic.
            let snapshot = (buf.len() <= 512).then(|| buf.clone());
            let len = buf.len();
            match dec.decode(&mut buf) {
                Err(e) => return (got, Some(e)),
                Ok(None) => {
                    if let Some(s) = snapshot {
                        assert_eq!(buf, s, "Ok(None) modified the buffer");
                    }
                    break;
                }
                Ok(Some((used, msg))) => {
                    assert!(used <= len, "consumed {used} of {len}");
                    assert!(used >= 6, "a client frame is at least 6 bytes");
                    if let Some(m) = msg {
                        got.push(Owned::from(m));
                    }
                    buf.drain(..used);
                }
            }
        }
    }
    (got, None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(
        items in prop::collection::vec(item(), 0..6),
        seed in any::<u64>(),
        max_chunk in prop_oneof![1usize..8, 8usize..5000, Just(usize::MAX / 2)],
    ) {
        let mut rng = Rng(seed);
        let (stream, expected) = encode_items(&items, &mut rng);
        let mut dec = Decoder::new(MAX);
        let (got, err) = feed(&mut dec, &stream, &mut rng, max_chunk);
        prop_assert_eq!(err, None);
        prop_assert_eq!(got, expected);
        prop_assert!(!dec.is_mid_message());
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..4096),
        seed in any::<u64>(),
        max_chunk in 1usize..600,
        limit in prop_oneof![Just(0usize), Just(4096usize), 0usize..200_000],
    ) {
        let mut rng = Rng(seed);
        let _ = feed(&mut Decoder::new(limit), &bytes, &mut rng, max_chunk);
    }

    /// Mostly-valid streams with a few corrupted bytes reach deeper states
    /// than uniform noise, which almost always fails on the mask bit.
    #[test]
    fn corrupted_streams_never_panic(
        items in prop::collection::vec(item(), 1..4),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        seed in any::<u64>(),
        max_chunk in 1usize..3000,
        limit in prop_oneof![Just(4096usize), Just(MAX)],
    ) {
        let mut rng = Rng(seed);
        let (mut stream, _) = encode_items(&items, &mut rng);
        if !stream.is_empty() {
            for (at, x) in flips {
                let i = at.index(stream.len());
                stream[i] ^= x;
            }
        }
        let _ = feed(&mut Decoder::new(limit), &stream, &mut rng, max_chunk);
    }

    #[test]
    fn crate_client_encoder_matches_naive(
        op in prop::sample::select(vec![
            OpCode::Continuation, OpCode::Text, OpCode::Binary,
            OpCode::Close, OpCode::Ping, OpCode::Pong,
        ]),
        fin in any::<bool>(),
        mask in any::<[u8; 4]>(),
        len in payload_len(),
    ) {
        let payload: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let mut a = Vec::new();
        ws::encode_client_frame(op, fin, mask, &payload, &mut a);
        let mut b = Vec::new();
        naive_frame(op.as_u8(), fin, mask, &payload, &mut b);
        prop_assert_eq!(a, b);
    }

    #[test]
    fn server_header_matches_naive(op_fin in 0u8..16, len in prop_oneof![0usize..70_000, any::<usize>()]) {
        let op = OpCode::from_u8(op_fin & 0x0F).unwrap_or(OpCode::Text);
        let fin = op_fin & 1 == 1;
        let mut h = [0u8; ws::MAX_SERVER_HEADER];
        let n = ws::encode_header(op, fin, len, &mut h);
        let mut naive = vec![if fin { 0x80 } else { 0 } | op.as_u8()];
        if len < 126 {
            naive.push(len as u8);
        } else if len < 65536 {
            naive.push(126);
            naive.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            naive.push(127);
            naive.extend_from_slice(&(len as u64).to_be_bytes());
        }
        prop_assert_eq!(&h[..n], &naive[..]);
    }
}
