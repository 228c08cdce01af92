//! The bytes one payload size sends, built once outside the timing: per
//! connection k WebSocket headers with the dispatch prefix (7-digit
//! sequence numbers, so every frame has the same length), one payload
//! shared by all connections, the closing `}`, prebuilt msghdrs/iovecs per
//! k, and the flat buffers a copying send gathers into. Memory is bounded
//! by `--conns` x the largest k x frame length.

static SUFFIX: [u8; 1] = *b"}";

/// What one payload size sends: headers, the shared payload, per-connection
/// flat buffers, and prebuilt msghdrs/iovecs per k (built once, outside the
/// timing: the node builds them per send too, identically for every
/// variant, and the bench crate measures that build).
pub struct Frames {
    pub n: usize,
    pub frame_len: usize,
    pub hdr_len: usize,
    /// Most frames per send for this size (headers exist for this many).
    kmax: usize,
    payload: Vec<u8>,
    /// n * kmax headers of hdr_len bytes.
    hdrs: Vec<u8>,
    /// n flat buffers of `flat_stride` bytes.
    flat: Vec<u8>,
    flat_stride: usize,
    msgs: Vec<Msgs>,
}

pub struct Msgs {
    k: usize,
    /// Pointed to by `msg`; never touched after the msghdrs are built.
    _iov: Vec<libc::iovec>,
    pub msg: Vec<libc::msghdr>,
}

const PREFIX_A: &[u8] = br#"{"op":0,"t":"MESSAGE_CREATE","s":"#;
const PREFIX_B: &[u8] = br#","d":"#;
/// Sequence numbers are 7 digits so every frame has the same length.
const SEQ_DIGITS: usize = 7;

impl Frames {
    pub fn new(n: usize, p: usize, kmax_wanted: usize, max_send: usize, ks: &[usize]) -> Frames {
        // A JSON object of exactly p bytes: {"c":"aaa..."}
        let mut payload = Vec::with_capacity(p);
        payload.extend_from_slice(br#"{"c":""#);
        payload.resize(p - 2, b'a');
        payload.extend_from_slice(br#""}"#);
        let body = PREFIX_A.len() + SEQ_DIGITS + PREFIX_B.len() + p + SUFFIX.len();
        let ws = match body {
            0..=125 => 2,
            126..=65535 => 4,
            _ => 10,
        };
        let hdr_len = ws + PREFIX_A.len() + SEQ_DIGITS + PREFIX_B.len();
        let frame_len = hdr_len + p + SUFFIX.len();
        let ks: Vec<usize> = ks
            .iter()
            .copied()
            .filter(|&k| k == 1 || (k <= kmax_wanted && k * frame_len <= max_send))
            .collect();
        let kmax = *ks.iter().max().unwrap();
        let mut hdrs = vec![0u8; n * kmax * hdr_len];
        for (idx, h) in hdrs.chunks_mut(hdr_len).enumerate() {
            let mut at = 0;
            let mut put = |b: &[u8]| {
                h[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            };
            // Server frames are unmasked: FIN|text, then the length.
            match ws {
                2 => put(&[0x81, body as u8]),
                4 => put(&[0x81, 126, (body >> 8) as u8, body as u8]),
                _ => {
                    put(&[0x81, 127]);
                    put(&(body as u64).to_be_bytes());
                }
            }
            put(PREFIX_A);
            put(format!("{:07}", 1_000_000 + idx % 9_000_000).as_bytes());
            put(PREFIX_B);
            debug_assert_eq!(at, hdr_len);
        }
        let flat_stride = kmax * frame_len;
        let flat = vec![0u8; n * flat_stride];
        let mut f = Frames {
            n,
            frame_len,
            hdr_len,
            kmax,
            payload,
            hdrs,
            flat,
            flat_stride,
            msgs: Vec::new(),
        };
        for k in ks {
            let mut iov = Vec::with_capacity(n * 3 * k);
            for i in 0..n {
                for j in 0..k {
                    let h = f.hdr(i, j);
                    for (ptr, len) in [
                        (h.as_ptr(), h.len()),
                        (f.payload.as_ptr(), f.payload.len()),
                        (SUFFIX.as_ptr(), SUFFIX.len()),
                    ] {
                        iov.push(libc::iovec {
                            iov_base: ptr as *mut _,
                            iov_len: len,
                        });
                    }
                }
            }
            let msg = (0..n)
                .map(|i| {
                    // SAFETY: an all-zero msghdr is a valid empty header.
                    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                    m.msg_iov = iov[i * 3 * k..].as_ptr() as *mut _;
                    m.msg_iovlen = 3 * k;
                    m
                })
                .collect();
            f.msgs.push(Msgs { k, _iov: iov, msg });
        }
        f
    }

    fn hdr(&self, conn: usize, frame: usize) -> &[u8] {
        let at = (conn * self.kmax + frame) * self.hdr_len;
        &self.hdrs[at..at + self.hdr_len]
    }

    pub fn msgs(&self, k: usize) -> &Msgs {
        self.msgs.iter().find(|m| m.k == k).expect("msghdrs for k")
    }

    /// Gather k frames for `conn` into its flat buffer (the memcpy a flat
    /// send pays); returns the buffer.
    pub fn flatten(&mut self, conn: usize, k: usize) -> (*const u8, usize) {
        let len = k * self.frame_len;
        let base = conn * self.flat_stride;
        let (hl, fl) = (self.hdr_len, self.frame_len);
        for j in 0..k {
            let at = base + j * fl;
            let h = (conn * self.kmax + j) * hl;
            self.flat[at..at + hl].copy_from_slice(&self.hdrs[h..h + hl]);
            self.flat[at + hl..at + fl - 1].copy_from_slice(&self.payload);
            self.flat[at + fl - 1] = SUFFIX[0];
        }
        (self.flat[base..].as_ptr(), len)
    }
}
