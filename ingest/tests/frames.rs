mod common;

use common::{frame, framed, message, message_d, small};
use ingest::{
    encode, encode_parts, encode_ref, ArchivedRecord, DecodeError, Encoder, FrameReader, Record,
    RecordRef, FLAG_GUILD_STATE, FLAG_HAS_CONTENT, HEADER_LEN, MAX_RECORD_LEN, VERSION,
};
use proptest::prelude::*;

/// Drains a reader: the records (owned) and the errors, in order.
fn drain(r: &mut FrameReader) -> Vec<Result<Record, DecodeError>> {
    let mut out = Vec::new();
    while let Some(x) = r.next() {
        let fatal = matches!(x, Err(e) if e.is_fatal());
        out.push(x.map(ArchivedRecord::to_record));
        if fatal {
            break;
        }
    }
    out
}

fn decode_all(bytes: &[u8]) -> Vec<Result<Record, DecodeError>> {
    let mut r = FrameReader::new();
    r.push(bytes);
    drain(&mut r)
}

#[test]
fn round_trip() {
    let recs: Vec<Record> = (0..20)
        .map(message)
        .chain([small("GUILD_UPDATE"), small("A")])
        .collect();
    let mut wire = Vec::new();
    for r in &recs {
        let n = encode(r, &mut wire);
        assert_eq!(n % 8, 0);
    }
    let mut reader = FrameReader::new();
    reader.push(&wire);
    for want in &recs {
        let got = reader.next().unwrap().unwrap();
        assert_eq!(got, want);
        assert_eq!(got.version(), VERSION);
        assert_eq!(got.event_type(), want.event_type);
        assert_eq!(got.server_id(), want.server_id);
        assert_eq!(got.channel_id(), want.channel_id);
        assert_eq!(got.intent(), want.intent);
        assert_eq!(got.permissions(), want.permissions);
        assert_eq!(got.commit_unix_ns(), want.commit_unix_ns);
        assert_eq!(got.flags(), want.flags);
        assert_eq!(got.has_content(), want.flags & FLAG_HAS_CONTENT != 0);
        assert!(!got.is_guild_state());
        assert_eq!(
            got.mentions()
                .iter()
                .map(|m| m.to_native())
                .collect::<Vec<_>>(),
            want.mentions
        );
        for &m in &want.mentions {
            assert!(got.mentions_user(m));
        }
        assert!(!got.mentions_user(u64::MAX));
        assert_eq!(got.d(), &want.d[..]);
        assert_eq!(&got.to_record(), want);
    }
    assert!(reader.next().is_none());
    assert_eq!(reader.stats().records, recs.len() as u64);
    assert_eq!(reader.stats().bytes, wire.len() as u64);
    assert_eq!(reader.stats().total_errors(), 0);
    assert_eq!(reader.buffered(), 0);
}

#[test]
fn all_encoders_write_the_same_bytes() {
    let mut r = message(3);
    r.flags |= FLAG_GUILD_STATE;
    let owned = framed(&r);
    let mut by_ref = Vec::new();
    encode_ref(&RecordRef::from(&r), &mut by_ref);
    let mut by_parts = Vec::new();
    encode_parts(
        &r.event_type,
        r.server_id,
        r.channel_id,
        r.intent,
        r.permissions,
        r.commit_unix_ns,
        r.flags,
        &r.mentions,
        &r.d,
        &mut by_parts,
    );
    let mut enc = Encoder::new();
    let mut by_encoder = b"xyz".to_vec(); // an unaligned prefix in `out` changes nothing
    enc.encode_record(&r, &mut by_encoder);
    // rkyv's own serialisation of the owned Record, framed by hand.
    let rk = rkyv::to_bytes::<rkyv::rancor::Error>(&r).unwrap();
    let mut by_rkyv = Vec::new();
    frame(&rk, &mut by_rkyv);
    assert_eq!(owned, by_ref);
    assert_eq!(owned, by_parts);
    assert_eq!(owned, &by_encoder[3..]);
    assert_eq!(owned, by_rkyv);
    let got = decode_all(&owned);
    assert_eq!(got, vec![Ok(r)]);
}

#[test]
fn archived_layout_is_as_documented() {
    use std::mem::{align_of, offset_of, size_of};
    assert_eq!(size_of::<ArchivedRecord>(), 80);
    assert_eq!(align_of::<ArchivedRecord>(), 8);
    assert_eq!(offset_of!(ArchivedRecord, version), 0);
    assert_eq!(offset_of!(ArchivedRecord, event_type), 4);
    assert_eq!(offset_of!(ArchivedRecord, server_id), 16);
    assert_eq!(offset_of!(ArchivedRecord, channel_id), 24);
    assert_eq!(offset_of!(ArchivedRecord, intent), 32);
    assert_eq!(offset_of!(ArchivedRecord, permissions), 40);
    assert_eq!(offset_of!(ArchivedRecord, commit_unix_ns), 48);
    assert_eq!(offset_of!(ArchivedRecord, flags), 56);
    assert_eq!(offset_of!(ArchivedRecord, mentions), 60);
    assert_eq!(offset_of!(ArchivedRecord, d), 68);
}

#[test]
fn typical_message_create_size() {
    let r = message(1);
    let f = framed(&r);
    println!(
        "typical MESSAGE_CREATE: d {} bytes, {} mentions, framed {} bytes (overhead {})",
        r.d.len(),
        r.mentions.len(),
        f.len(),
        f.len() - r.d.len()
    );
    assert!((550..700).contains(&r.d.len()), "d is {} bytes", r.d.len());
    // header 8 + event_type 14 (+2 pad) + mentions 16 + d + pad to 8 + root 80
    assert!(f.len() - r.d.len() <= 8 + 16 + 16 + 7 + 80);
    assert_eq!(
        u32::from_le_bytes(f[0..4].try_into().unwrap()) as usize,
        f.len() - HEADER_LEN
    );
}

/// A valid record after a bad one must decode: the stream stays in sync.
fn expect_skip(bad: &[u8], want: DecodeError) {
    let good = message(7);
    let mut wire = framed(&good);
    wire.extend_from_slice(bad);
    wire.extend_from_slice(&framed(&good));
    let got = decode_all(&wire);
    assert_eq!(
        got,
        vec![Ok(good.clone()), Err(want), Ok(good)],
        "{}",
        want.reason()
    );
    assert!(!want.is_fatal());
}

#[test]
fn unsupported_version() {
    let mut r = small("READY_X");
    r.version = 2;
    expect_skip(&framed(&r), DecodeError::UnsupportedVersion(2));
    // Header says 1, record says 2.
    let mut f = framed(&r);
    f[4..6].copy_from_slice(&1u16.to_le_bytes());
    expect_skip(&f, DecodeError::UnsupportedVersion(2));
    // Header says 7, body is a valid v1 record: decided on the header alone.
    let mut f = framed(&small("X"));
    f[4..6].copy_from_slice(&7u16.to_le_bytes());
    expect_skip(&f, DecodeError::UnsupportedVersion(7));
    assert_eq!(
        DecodeError::UnsupportedVersion(7).reason(),
        "unsupported_version"
    );
}

#[test]
fn reserved_flags() {
    for flags in [1 << 4, 1 << 31, FLAG_HAS_CONTENT | 1 << 7] {
        let mut r = small("MESSAGE_CREATE");
        r.flags = flags;
        assert_eq!(r.check(), Err(DecodeError::ReservedFlags(flags)));
        expect_skip(&framed(&r), DecodeError::ReservedFlags(flags));
    }
    let mut r = small("GUILD_UPDATE");
    r.flags = FLAG_HAS_CONTENT | FLAG_GUILD_STATE;
    assert_eq!(decode_all(&framed(&r)), vec![Ok(r)]);
}

#[test]
fn bad_event_type() {
    let long = "A".repeat(65);
    for t in [
        "",
        "message_create",
        "MESSAGE-CREATE",
        "MESSAGE CREATE",
        "MESSAGE1",
        "É",
        &long,
    ] {
        let r = small(t);
        assert_eq!(r.check(), Err(DecodeError::BadEventType), "{t:?}");
        expect_skip(&framed(&r), DecodeError::BadEventType);
    }
    let ok = small(&"A_".repeat(32));
    assert_eq!(decode_all(&framed(&ok)), vec![Ok(ok)]);
}

/// Finds `needle` in `hay` (the test's way to patch a field in a body).
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("needle")
}

#[test]
fn non_utf8_event_type_is_malformed() {
    // Out of line (longer than 8 bytes) and inline (8 bytes or fewer).
    for t in ["MESSAGE_REACTION_ADD", "TYPING"] {
        let mut f = framed(&small(t));
        let at = find(&f, t.as_bytes());
        f[at + 1] = 0x80; // a lone continuation byte (0xFF would end an inline string)
        expect_skip(&f, DecodeError::Malformed);
    }
}

#[test]
fn bad_d() {
    let bads: [&[u8]; 9] = [
        b"",
        b"[]",
        b"\"x\"",
        b"{",
        b"{\"a\":1",
        b"{\"a\":\"\xff\"}",
        br#"{}, "op": 7, "x": {}"#,
        br#"{"a":1}}"#,
        b"null",
    ];
    for d in bads {
        let mut r = small("MESSAGE_CREATE");
        r.d = d.to_vec();
        assert_eq!(
            r.check(),
            Err(DecodeError::BadD),
            "{:?}",
            String::from_utf8_lossy(d)
        );
        expect_skip(&framed(&r), DecodeError::BadD);
    }
    let mut r = small("MESSAGE_CREATE");
    r.d = b" \n{ \"a\" : [1, 2.5e3, null, true, {\"b\": \"\\u00e9\"}] }\n".to_vec();
    assert_eq!(decode_all(&framed(&r)), vec![Ok(r)]);
}

#[test]
fn malformed_bodies() {
    let mut garbage = Vec::new();
    frame(&[0xAB; 100], &mut garbage);
    expect_skip(&garbage, DecodeError::Malformed);
    let mut empty = Vec::new();
    frame(&[], &mut empty);
    expect_skip(&empty, DecodeError::Malformed);
    let mut zeros = Vec::new();
    frame(&[0; 80], &mut zeros); // the root's size, all zero
    expect_skip(&zeros, DecodeError::Malformed);
    // A valid body with its first bytes cut: relative pointers now point
    // outside the body.
    let f = framed(&message(1));
    let body = &f[HEADER_LEN..];
    let mut cut = Vec::new();
    frame(&body[16..], &mut cut);
    expect_skip(&cut, DecodeError::Malformed);
    // The d length patched to exceed the body.
    let mut f = framed(&message(1));
    let root = f.len() - 80;
    let d_len_at = root + 68 + 4;
    f[d_len_at..d_len_at + 4].copy_from_slice(&100_000u32.to_le_bytes());
    expect_skip(&f, DecodeError::Malformed);
}

#[test]
fn too_large_is_fatal() {
    let good = message(1);
    let mut wire = framed(&good);
    wire.extend_from_slice(&((MAX_RECORD_LEN + 1) as u32).to_le_bytes());
    wire.extend_from_slice(&[1, 0, 0, 0]);
    wire.extend_from_slice(&framed(&good));
    let mut r = FrameReader::new();
    r.push(&wire);
    assert!(r.next().unwrap().is_ok());
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(
        e,
        DecodeError::TooLarge {
            len: MAX_RECORD_LEN as u32 + 1,
            max: MAX_RECORD_LEN as u32
        }
    );
    assert!(e.is_fatal());
    assert_eq!(e.reason(), "too_large");
    // It stays failed; pushes are ignored.
    assert_eq!(r.next().unwrap().unwrap_err(), e);
    r.push(&framed(&good));
    assert_eq!(r.next().unwrap().unwrap_err(), e);
    assert_eq!(r.fatal(), Some(e));
    assert_eq!(r.stats().errors[e.index()], 1);
    // Detected from the 4 length bytes alone.
    let mut r = FrameReader::with_max_record_len(100);
    r.push(&200u32.to_le_bytes());
    assert_eq!(
        r.next().unwrap().unwrap_err(),
        DecodeError::TooLarge { len: 200, max: 100 }
    );
    // Reset for a new connection.
    r.reset();
    r.push(&framed(&small("X")));
    assert!(r.next().unwrap().is_ok());
    // The limit is on the body: exactly max passes.
    let f = framed(&good);
    let mut r = FrameReader::with_max_record_len(f.len() - HEADER_LEN);
    r.push(&f);
    assert!(r.next().unwrap().is_ok());
    let mut r = FrameReader::with_max_record_len(f.len() - HEADER_LEN - 1);
    r.push(&f);
    assert!(r.next().unwrap().unwrap_err().is_fatal());
}

#[test]
fn bad_header_is_fatal() {
    let mut f = framed(&small("X"));
    f[6] = 1;
    let mut r = FrameReader::new();
    r.push(&f);
    let e = r.next().unwrap().unwrap_err();
    assert_eq!(e, DecodeError::BadHeader(1));
    assert!(e.is_fatal());
    assert_eq!(e.reason(), "bad_header");
}

#[test]
fn reasons_are_distinct_and_indexed() {
    let all = [
        DecodeError::TooLarge { len: 0, max: 0 },
        DecodeError::BadHeader(1),
        DecodeError::Malformed,
        DecodeError::UnsupportedVersion(0),
        DecodeError::ReservedFlags(4),
        DecodeError::BadEventType,
        DecodeError::BadD,
    ];
    assert_eq!(all.len(), DecodeError::COUNT);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.index(), i);
        assert_eq!(e.reason(), DecodeError::REASONS[i]);
        assert_eq!(e.is_fatal(), i < 2);
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn truncated_input_byte_by_byte() {
    let recs: Vec<Record> = (0..4).map(message).chain([small("X")]).collect();
    let mut wire = Vec::new();
    let mut ends = Vec::new();
    for r in &recs {
        encode(r, &mut wire);
        ends.push(wire.len());
    }
    let mut reader = FrameReader::with_limits(16, MAX_RECORD_LEN);
    let mut got = Vec::new();
    for (i, b) in wire.iter().enumerate() {
        reader.push(std::slice::from_ref(b));
        while let Some(x) = reader.next() {
            got.push(x.unwrap().to_record());
            assert_eq!(
                ends[got.len() - 1],
                i + 1,
                "a record is delivered exactly when its last byte arrives"
            );
        }
    }
    assert_eq!(got, recs);
    assert_eq!(reader.buffered(), 0);
    assert_eq!(reader.stats().total_errors(), 0);
}

#[test]
fn garbage_bodies_between_records_resync_by_length() {
    let good = message(2);
    let mut wire = Vec::new();
    let mut want = Vec::new();
    encode(&good, &mut wire);
    want.push(Ok(good.clone()));
    // Valid lengths, garbage bodies; odd lengths misalign what follows, which
    // then goes through the aligned scratch.
    for (n, len) in [(1u8, 3usize), (2, 100), (3, 7), (4, 1), (5, 80), (6, 600)] {
        let body: Vec<u8> = (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(n))
            .collect();
        frame(&body, &mut wire);
        want.push(Err(DecodeError::Malformed));
        encode(&good, &mut wire);
        want.push(Ok(good.clone()));
    }
    assert_eq!(decode_all(&wire), want);
    // Same, in awkward chunks.
    for chunk in [1, 5, 64, 333, 4096] {
        let mut r = FrameReader::with_limits(chunk, MAX_RECORD_LEN);
        let mut got = Vec::new();
        for c in wire.chunks(chunk) {
            r.push(c);
            got.extend(drain(&mut r));
        }
        assert_eq!(got, want, "chunk {chunk}");
    }
}

#[test]
fn misaligned_valid_bodies_decode_through_scratch() {
    // A foreign producer's odd-length frame (here a 5-byte garbage body)
    // leaves every later body misaligned in the buffer: they are copied into
    // the aligned scratch and decode all the same.
    let good = message(4);
    let mut wire = Vec::new();
    frame(&[0u8; 5], &mut wire);
    for _ in 0..3 {
        encode(&good, &mut wire);
    }
    let got = decode_all(&wire);
    assert_eq!(got[0], Err(DecodeError::Malformed));
    assert_eq!(&got[1..], &[Ok(good.clone()), Ok(good.clone()), Ok(good)]);
}

#[test]
fn many_records_random_chunks_with_compaction() {
    let recs: Vec<Record> = (0..500).map(message).collect();
    let mut wire = Vec::new();
    for r in &recs {
        encode(r, &mut wire);
    }
    let mut r = FrameReader::with_limits(2048, MAX_RECORD_LEN);
    let mut n = 0usize;
    let mut pos = 0usize;
    let mut seed = 12345u64;
    while pos < wire.len() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let take = ((seed >> 33) as usize % 1500 + 1).min(wire.len() - pos);
        r.push(&wire[pos..pos + take]);
        pos += take;
        while let Some(x) = r.next() {
            assert_eq!(x.unwrap(), &recs[n]);
            n += 1;
        }
    }
    assert_eq!(n, recs.len());
}

#[test]
fn big_record_up_to_the_limit() {
    let mut r = message(1);
    let filler = "x".repeat(MAX_RECORD_LEN - 4096);
    r.d = format!("{{\"content\":\"{filler}\"}}").into_bytes();
    let f = framed(&r);
    assert!(f.len() - HEADER_LEN <= MAX_RECORD_LEN);
    assert_eq!(decode_all(&f), vec![Ok(r)]);
}

#[test]
fn redacted_variant_of_a_decoded_message() {
    let f = framed(&message(1));
    let mut reader = FrameReader::new();
    reader.push(&f);
    let rec = reader.next().unwrap().unwrap();
    let mut out = Vec::with_capacity(rec.d().len());
    ingest::redact_message_content(rec.d(), &mut out).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["content"], "");
    assert_eq!(
        out.len(),
        rec.d().len() - "hello world, message number 1".len()
    );
    let orig: serde_json::Value = serde_json::from_slice(&message_d("")).unwrap();
    assert_eq!(v, orig);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// Arbitrary bytes, arbitrarily chunked, never panic the reader.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048),
                                   chunk in 1usize..300,
                                   max in prop_oneof![Just(MAX_RECORD_LEN), 0usize..4096]) {
        let mut r = FrameReader::with_limits(64, max);
        for c in bytes.chunks(chunk) {
            r.push(c);
            for _ in 0..bytes.len() + 1 {
                match r.next() {
                    None => break,
                    Some(Err(e)) if e.is_fatal() => break,
                    Some(_) => {}
                }
            }
        }
    }

    /// Arbitrary bodies behind valid headers exercise bytecheck; the next
    /// valid record still decodes.
    #[test]
    fn arbitrary_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let good = small("GUILD_CREATE");
        let mut wire = Vec::new();
        frame(&body, &mut wire);
        encode(&good, &mut wire);
        let got = decode_all(&wire);
        prop_assert_eq!(got.len(), 2);
        prop_assert_eq!(&got[1], &Ok(good));
    }

    /// Valid records with bytes of the body flipped: never a panic, never a
    /// record that fails the semantic checks, and the stream stays in sync.
    #[test]
    fn mutated_bodies_never_panic(n in 0u64..1000,
                                  flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..8)) {
        let rec = message(n);
        let mut f = framed(&rec);
        let body_len = f.len() - HEADER_LEN;
        for (i, x) in &flips {
            f[HEADER_LEN + i.index(body_len)] ^= x;
        }
        f.extend_from_slice(&framed(&rec));
        let mut r = FrameReader::new();
        r.push(&f);
        if let Ok(a) = r.next().unwrap() {
            prop_assert!(a.to_record().check().is_ok());
        }
        prop_assert_eq!(r.next().unwrap().unwrap(), &rec);
        prop_assert!(r.next().is_none());
    }
}
