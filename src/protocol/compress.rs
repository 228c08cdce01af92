//! Transport compression (`compress=zlib-stream` / `compress=zstd-stream` in
//! the gateway URL): one compression stream per connection; every server
//! message becomes one binary WebSocket frame holding that message's
//! compressed bytes, flushed so the client can decode it at once (zlib: a
//! sync flush, ending `00 00 ff ff`; zstd: one flushed block per message in
//! one endless frame).
//!
//! The streams are stateful (each message refers back into what the stream
//! sent before), so nothing can be compressed once per event and shared by
//! the recipients: every compressed session compresses its own copy.
//!
//! Memory is bounded twice: each stream is configured small (see `ZLIB_*`
//! and `ZSTD_*`; docs/measurements.md has the bytes per session), and a
//! node-wide `Budget` (`limits.max_compressed_sessions`) caps how many
//! connections compress at once. Beyond it a connection is served the
//! stream it asked for with nothing compressed (`Compressor::stored`,
//! `stored.rs`: stored deflate blocks, raw zstd blocks; no state): never
//! plain text frames, which hikari and Eris cannot read where they asked
//! for a stream, and never a refusal, which discord.py and discord.js do
//! not survive at their first connect.
//!
//! All state is allocated when the connection upgrades (`Compressor::new`
//! allocates the zlib window; the first message, Hello, sizes zstd's
//! workspace). Per message, compression writes into the caller's buffer,
//! whose capacity is reused: after warm-up nothing is allocated.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use net::ws::{self, OpCode};

use super::stored::{Framing, Stored};
use zstd::zstd_safe::{self, CCtx, CParameter, InBuffer, OutBuffer};

/// zlib: a 4 KiB window (window_bits 12) and mem_level 3. Clients inflate
/// with the default 32 KiB window, which decodes any smaller one. zlib-rs's
/// hash head table is a fixed 128 KiB; the rest scales with these.
pub const ZLIB_WINDOW_BITS: i32 = 12;
pub const ZLIB_MEM_LEVEL: i32 = 3;
pub const ZLIB_LEVEL: i32 = 6;
/// zstd: level 3 limited to a 4 KiB window (clients accept windows up to
/// 8 MiB by default) and small match tables; the window also sets zstd's
/// block size and so its buffers (ZSTD_sizeof_CCtx: 86 KB at 2^12, 169 KB
/// at 2^14, 944 KB at 2^17 for 1.06x better ratio).
pub const ZSTD_LEVEL: i32 = 3;
pub const ZSTD_WINDOW_LOG: u32 = 12;
pub const ZSTD_HASH_LOG: u32 = 12;
pub const ZSTD_CHAIN_LOG: u32 = 12;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Zlib,
    Zstd,
}

impl Kind {
    /// The `compress` query parameter: `zlib-stream`, `zstd-stream`, or
    /// anything else (absent, empty, unknown): no compression.
    pub fn from_query(q: Option<&str>) -> Option<Kind> {
        match q? {
            "zlib-stream" => Some(Kind::Zlib),
            "zstd-stream" => Some(Kind::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Zlib => "zlib-stream",
            Kind::Zstd => "zstd-stream",
        }
    }
}

/// The node-wide cap on compressing connections.
#[derive(Debug)]
pub struct Budget {
    cap: usize,
    used: AtomicUsize,
}

impl Budget {
    pub fn new(cap: usize) -> Arc<Budget> {
        Arc::new(Budget {
            cap,
            used: AtomicUsize::new(0),
        })
    }

    /// One compressing connection, if the cap allows; released on drop.
    pub fn try_take(self: &Arc<Self>) -> Option<Permit> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.cap).then_some(n + 1)
            })
            .ok()?;
        Some(Permit(self.clone()))
    }

    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// A place under the budget, held for the life of a compressing connection.
#[derive(Debug)]
pub struct Permit(Arc<Budget>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug)]
pub struct CompressError(&'static str);

impl std::fmt::Display for CompressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "compression failed: {}", self.0)
    }
}

enum Engine {
    Zlib(Box<zlib_rs::Deflate>),
    Zstd(CCtx<'static>),
    /// The stream's framing, nothing compressed (past the cap).
    Stored(Stored),
}

/// One connection's compression stream.
pub struct Compressor {
    engine: Engine,
    kind: Kind,
    window_log: u32,
    _permit: Option<Permit>,
}

// Room kept free in the output buffer per call into the compressor.
const MIN_SPARE: usize = 256;

fn ensure_spare(out: &mut Vec<u8>, want: usize) {
    if out.capacity() - out.len() < want {
        out.reserve(want);
    }
}

impl Compressor {
    /// A new stream (allocates its state now). `permit` is the place under
    /// the node's budget this stream holds until it is dropped.
    pub fn new(kind: Kind, permit: Option<Permit>) -> Result<Compressor, CompressError> {
        let window = match kind {
            Kind::Zlib => ZLIB_WINDOW_BITS as u32,
            Kind::Zstd => ZSTD_WINDOW_LOG,
        };
        Compressor::with_window(kind, window, permit)
    }

    /// `new` with another window (log2 bytes): for measuring the trade-off.
    fn with_window(
        kind: Kind,
        window_log: u32,
        permit: Option<Permit>,
    ) -> Result<Compressor, CompressError> {
        let engine = match kind {
            Kind::Zlib => Engine::Zlib(Box::new(zlib_rs::Deflate::new_with_config(
                zlib_rs::DeflateConfig {
                    level: ZLIB_LEVEL,
                    method: zlib_rs::Method::Deflated,
                    window_bits: window_log as i32, // positive: zlib header, as discord sends
                    mem_level: ZLIB_MEM_LEVEL,
                    strategy: zlib_rs::Strategy::Default,
                },
            ))),
            Kind::Zstd => {
                let mut c = CCtx::try_create().ok_or(CompressError("zstd context"))?;
                for p in [
                    CParameter::CompressionLevel(ZSTD_LEVEL),
                    CParameter::WindowLog(window_log),
                    CParameter::HashLog(ZSTD_HASH_LOG.min(window_log)),
                    CParameter::ChainLog(ZSTD_CHAIN_LOG.min(window_log)),
                    CParameter::ChecksumFlag(false),
                ] {
                    c.set_parameter(p)
                        .map_err(|_| CompressError("zstd parameter"))?;
                }
                Engine::Zstd(c)
            }
        };
        Ok(Compressor {
            engine,
            kind,
            window_log,
            _permit: permit,
        })
    }

    /// The stream `kind` with nothing compressed: its framing around
    /// stored (zlib) or raw (zstd) blocks. No state and no place under the
    /// budget: what a connection past the cap is served.
    pub fn stored(kind: Kind) -> Compressor {
        let framing = match kind {
            Kind::Zlib => Framing::Zlib,
            Kind::Zstd => Framing::Zstd,
        };
        Compressor {
            engine: Engine::Stored(Stored::new(framing)),
            kind,
            window_log: 0,
            _permit: None,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Whether it really compresses (false: `stored`).
    pub fn compresses(&self) -> bool {
        !matches!(self.engine, Engine::Stored(_))
    }

    /// Compress one message (the concatenation of `parts`) and append it to
    /// `out` as one binary WebSocket frame. Returns the compressed length.
    pub fn frame(&mut self, parts: &[&[u8]], out: &mut Vec<u8>) -> Result<usize, CompressError> {
        let start = out.len();
        let in_len: usize = parts.iter().map(|p| p.len()).sum();
        ensure_spare(out, ws::MAX_SERVER_HEADER + in_len + in_len / 8 + MIN_SPARE);
        // Room for the longest header; moved down once the length is known.
        out.extend_from_slice(&[0u8; ws::MAX_SERVER_HEADER]);
        let body = start + ws::MAX_SERVER_HEADER;
        let r = self.compress(parts, out);
        if let Err(e) = r {
            out.truncate(start);
            return Err(e);
        }
        let n = out.len() - body;
        let mut h = [0u8; ws::MAX_SERVER_HEADER];
        let hn = ws::encode_header(OpCode::Binary, true, n, &mut h);
        out.copy_within(body.., start + hn);
        out.truncate(start + hn + n);
        out[start..start + hn].copy_from_slice(&h[..hn]);
        Ok(n)
    }

    fn compress(&mut self, parts: &[&[u8]], out: &mut Vec<u8>) -> Result<(), CompressError> {
        match &mut self.engine {
            Engine::Stored(s) => {
                s.message(parts, out);
                Ok(())
            }
            Engine::Zlib(d) => {
                use zlib_rs::DeflateFlush;
                for part in parts {
                    let mut input: &[u8] = part;
                    while !input.is_empty() {
                        ensure_spare(out, MIN_SPARE + input.len() / 4);
                        let (i0, o0) = (d.total_in(), d.total_out());
                        d.compress_uninit(input, out.spare_capacity_mut(), DeflateFlush::NoFlush)
                            .map_err(|_| CompressError("deflate"))?;
                        let used = (d.total_in() - i0) as usize;
                        // SAFETY: deflate initialised this many bytes of the spare capacity.
                        unsafe { out.set_len(out.len() + (d.total_out() - o0) as usize) };
                        input = &input[used..];
                    }
                }
                loop {
                    ensure_spare(out, MIN_SPARE);
                    let spare = out.capacity() - out.len();
                    let o0 = d.total_out();
                    d.compress_uninit(&[], out.spare_capacity_mut(), DeflateFlush::SyncFlush)
                        .map_err(|_| CompressError("deflate flush"))?;
                    let produced = (d.total_out() - o0) as usize;
                    // SAFETY: as above.
                    unsafe { out.set_len(out.len() + produced) };
                    if produced < spare {
                        return Ok(()); // output space left over: the flush is complete
                    }
                }
            }
            Engine::Zstd(c) => {
                for part in parts {
                    let mut input = InBuffer::around(part);
                    while input.pos() < part.len() {
                        ensure_spare(out, MIN_SPARE + (part.len() - input.pos()) / 4);
                        let pos = out.len();
                        let mut o = OutBuffer::around_pos(out, pos);
                        c.compress_stream2(
                            &mut o,
                            &mut input,
                            zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_continue,
                        )
                        .map_err(|_| CompressError("zstd"))?;
                    }
                }
                loop {
                    ensure_spare(out, MIN_SPARE);
                    let pos = out.len();
                    let mut o = OutBuffer::around_pos(out, pos);
                    let left = c
                        .compress_stream2(
                            &mut o,
                            &mut InBuffer::around(&[][..]),
                            zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush,
                        )
                        .map_err(|_| CompressError("zstd flush"))?;
                    if left == 0 {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Bytes this stream holds (zstd reports its own; zlib's allocation is
    /// computed as zlib-rs lays it out).
    pub fn state_bytes(&self) -> usize {
        match &self.engine {
            Engine::Stored(_) => std::mem::size_of::<Stored>(),
            Engine::Zstd(c) => c.sizeof(),
            Engine::Zlib(_) => {
                let w = 1usize << self.window_log;
                let lit = 1usize << (ZLIB_MEM_LEVEL + 6);
                // window (2w) + prev (2w) + head (64 Ki x u16) + pending (4 lit) + symbols (3 lit) + state (~2 KiB)
                4 * w + 128 * 1024 + 7 * lit + 2048
            }
        }
    }
}

/// Turn the server frames in `frames` (whole, unmasked frames as the
/// session writes them) into their compressed form appended to `out`: text
/// frames become compressed binary frames; control frames (close, ping,
/// pong) pass unchanged, as the protocol wants. Returns (bytes before, bytes
/// after) compression of the text frames.
pub fn reframe(
    c: &mut Compressor,
    mut frames: &[u8],
    out: &mut Vec<u8>,
) -> Result<(u64, u64), CompressError> {
    let (mut before, mut after) = (0u64, 0u64);
    while frames.len() >= 2 {
        let op = frames[0] & 0x0f;
        let (len, off) = match frames[1] & 0x7f {
            126 if frames.len() >= 4 => (u16::from_be_bytes([frames[2], frames[3]]) as usize, 4),
            127 if frames.len() >= 10 => (
                u64::from_be_bytes(frames[2..10].try_into().expect("8 bytes")) as usize,
                10,
            ),
            n if n < 126 => (n as usize, 2),
            _ => return Err(CompressError("truncated frame")),
        };
        let Some(whole) = frames.get(..off + len) else {
            return Err(CompressError("truncated frame"));
        };
        if op == OpCode::Text as u8 {
            let n = c.frame(&[&whole[off..]], out)?;
            before += len as u64;
            after += n as u64;
        } else {
            out.extend_from_slice(whole);
        }
        frames = &frames[off + len..];
    }
    if frames.is_empty() {
        Ok((before, after))
    } else {
        Err(CompressError("truncated frame"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Split server frames into (opcode, payload).
    fn frames(mut b: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let (len, off) = match b[1] & 0x7f {
                126 => (u16::from_be_bytes([b[2], b[3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n as usize, 2),
            };
            v.push((b[0] & 0x0f, b[off..off + len].to_vec()));
            b = &b[off + len..];
        }
        v
    }

    fn inflate_all(msgs: &[Vec<u8>]) -> Vec<String> {
        // zlib-rs's inflater with the default 15-bit window, fed message by message.
        let mut inf = zlib_rs::Inflate::new(true, 15);
        msgs.iter()
            .map(|m| {
                assert!(m.ends_with(&[0, 0, 0xff, 0xff]), "sync flush");
                let mut out = vec![0u8; 1 << 20];
                let o0 = inf.total_out();
                inf.decompress(m, &mut out, zlib_rs::InflateFlush::SyncFlush)
                    .unwrap();
                let n = (inf.total_out() - o0) as usize;
                String::from_utf8(out[..n].to_vec()).unwrap()
            })
            .collect()
    }

    fn unzstd_all(msgs: &[Vec<u8>]) -> Vec<String> {
        let mut d = zstd_safe::DCtx::create();
        msgs.iter()
            .map(|m| {
                let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
                let mut input = InBuffer::around(m);
                let mut o = OutBuffer::around(&mut out);
                while input.pos() < m.len() {
                    d.decompress_stream(&mut o, &mut input).unwrap();
                }
                String::from_utf8(out).unwrap()
            })
            .collect()
    }

    fn message(i: usize) -> String {
        format!(
            r#"{{"op":0,"t":"MESSAGE_CREATE","s":{i},"d":{{"id":"{}","channel_id":"1203","guild_id":"1201","author":{{"id":"5001","username":"demo-user","global_name":"Demo User","avatar":null,"discriminator":"0","bot":false}},"content":"message number {i} with some text","timestamp":"2026-01-01T00:00:00.000000+00:00","edited_timestamp":null,"tts":false,"mention_everyone":false,"mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false,"type":0,"flags":0,"nonce":"{}"}}}}"#,
            1_000_000_000_000u64 + i as u64,
            i * 7
        )
    }

    #[test]
    fn each_message_decodes_on_its_own_stream() {
        let each = [Kind::Zlib, Kind::Zstd]
            .into_iter()
            .flat_map(|k| [Compressor::new(k, None).unwrap(), Compressor::stored(k)]);
        for mut c in each {
            let kind = c.kind();
            let mut out = Vec::new();
            let want: Vec<String> = (0..50).map(message).collect();
            for (i, m) in want.iter().enumerate() {
                // Split parts unevenly, as the send path does.
                let b = m.as_bytes();
                let k = i % b.len();
                c.frame(&[&b[..k], &b[k..]], &mut out).unwrap();
            }
            let msgs: Vec<Vec<u8>> = frames(&out)
                .into_iter()
                .map(|(op, p)| {
                    assert_eq!(op, OpCode::Binary as u8);
                    p
                })
                .collect();
            let got = match kind {
                Kind::Zlib => inflate_all(&msgs),
                Kind::Zstd => unzstd_all(&msgs),
            };
            assert_eq!(got, want, "{kind:?}");
        }
    }

    #[test]
    fn large_messages_and_control_frames() {
        let big: String = (0..2000).map(message).collect::<Vec<_>>().join(",");
        let mut src = Vec::new();
        ws::encode_frame(
            OpCode::Text,
            br#"{"op":10,"d":{"heartbeat_interval":41250}}"#,
            &mut src,
        );
        ws::encode_frame(OpCode::Pong, b"p", &mut src);
        ws::encode_frame(OpCode::Text, big.as_bytes(), &mut src);
        ws::encode_close(4000, "bye", &mut src);
        for kind in [Kind::Zlib, Kind::Zstd] {
            let mut c = Compressor::new(kind, None).unwrap();
            let mut out = Vec::new();
            let (before, after) = reframe(&mut c, &src, &mut out).unwrap();
            assert!(after < before / 4, "{kind:?}: {before} -> {after}");
            let f = frames(&out);
            let ops: Vec<u8> = f.iter().map(|x| x.0).collect();
            assert_eq!(ops, [2, 10, 2, 8]);
            let msgs = vec![f[0].1.clone(), f[2].1.clone()];
            let got = match kind {
                Kind::Zlib => inflate_all(&msgs),
                Kind::Zstd => unzstd_all(&msgs),
            };
            assert_eq!(got[1], big);
            assert!(got[0].contains("heartbeat_interval"));
        }
        // flate2 (miniz_oxide) reads a zlib stream of a reduced window, too.
        let mut c = Compressor::new(Kind::Zlib, None).unwrap();
        let mut out = Vec::new();
        c.frame(&[big.as_bytes()], &mut out).unwrap();
        let mut s = String::new();
        let payload = &frames(&out)[0].1;
        let _ = flate2::read::ZlibDecoder::new(&payload[..]).read_to_string(&mut s);
        assert_eq!(s, big);
    }

    #[test]
    fn budget_caps_and_releases() {
        let b = Budget::new(2);
        let p1 = b.try_take().unwrap();
        let _p2 = b.try_take().unwrap();
        assert!(b.try_take().is_none());
        drop(p1);
        assert_eq!(b.in_use(), 1);
        assert!(b.try_take().is_some());
    }

    #[test]
    fn no_allocation_after_warm_up() {
        for kind in [Kind::Zlib, Kind::Zstd] {
            let mut c = Compressor::new(kind, None).unwrap();
            let mut out = Vec::with_capacity(64 * 1024);
            for i in 0..20 {
                c.frame(&[message(i).as_bytes()], &mut out).unwrap();
            }
            let cap = out.capacity();
            let ptr = out.as_ptr();
            for _ in 0..5 {
                out.clear();
                for i in 0..20 {
                    c.frame(&[message(i).as_bytes()], &mut out).unwrap();
                }
            }
            assert_eq!(
                (out.capacity(), out.as_ptr()),
                (cap, ptr),
                "{kind:?}: the output buffer is reused"
            );
        }
    }

    /// A MESSAGE_CREATE dispatch of about 600 bytes whose content, ids and
    /// author vary from message to message (so a warm stream cannot just
    /// repeat the previous message).
    fn realistic(i: u64) -> String {
        const WORDS: [&str; 24] = [
            "deploy", "the", "build", "is", "green", "again", "after", "lunch", "can", "someone",
            "review", "my", "pull", "request", "thanks", "for", "fixing", "latency", "graphs",
            "look", "better", "today", "ship", "it",
        ];
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut content = String::new();
        for _ in 0..(6 + i % 10) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            content.push_str(WORDS[(x % 24) as usize]);
            content.push(' ');
        }
        let author = 1_180_000_000_000_000_000u64 + (x % 7);
        format!(
            r#"{{"op":0,"t":"MESSAGE_CREATE","s":{},"d":{{"type":0,"tts":false,"timestamp":"2026-11-30T11:{:02}:{:02}.{:06}+00:00","pinned":false,"nonce":"{}","mentions":[],"mention_roles":[],"mention_everyone":false,"member":{{"roles":[],"pending":false,"nick":null,"mute":false,"joined_at":"2025-06-01T00:00:00.000000+00:00","flags":0,"deaf":false}},"id":"{}","flags":0,"embeds":[],"edited_timestamp":null,"content":"{}","components":[],"channel_id":"1180000000000000201","author":{{"username":"user{}","public_flags":0,"id":"{}","global_name":"User {}","discriminator":"0","avatar":null}},"attachments":[],"guild_id":"1180000000000000200"}}}}"#,
            i + 2,
            i / 60 % 60,
            i % 60,
            x % 1_000_000,
            x % 100_000_000_000,
            1_300_000_000_000_000_000u64 + i * 4_194_304 + (x % 4096),
            content.trim_end(),
            author % 1000,
            author,
            author % 1000,
        )
    }

    /// Figures for docs/measurements.md:
    /// `cargo test --release --lib compression_figures -- --ignored --nocapture`
    #[test]
    #[ignore = "measurement for docs/measurements.md, run by hand (see the comment above)"]
    fn compression_figures() {
        fn rss_kib() -> usize {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        }
        let sizes: Vec<usize> = (0..200).map(|i| realistic(i).len()).collect();
        println!(
            "MESSAGE_CREATE dispatch JSON: {}..{} bytes, mean {}",
            sizes.iter().min().unwrap(),
            sizes.iter().max().unwrap(),
            sizes.iter().sum::<usize>() / sizes.len()
        );
        let mut kept = Vec::new();
        for (kind, windows) in [
            (Kind::Zlib, &[9u32, 12, 15][..]),
            (Kind::Zstd, &[10, 12, 13, 14, 17][..]),
        ] {
            for &window in windows {
                // Ratio: the first message alone, then 200 messages in a row.
                let mut c = Compressor::with_window(kind, window, None).unwrap();
                let mut out = Vec::new();
                let first = c.frame(&[realistic(0).as_bytes()], &mut out).unwrap();
                let (mut raw, mut packed) = (0, 0);
                for i in 1..=200 {
                    out.clear();
                    let m = realistic(i);
                    raw += m.len();
                    packed += c.frame(&[m.as_bytes()], &mut out).unwrap();
                }
                // CPU: 5,000 more messages on the warm stream (inputs made first).
                let msgs: Vec<String> = (201..5201).map(realistic).collect();
                let t = std::time::Instant::now();
                for m in &msgs {
                    out.clear();
                    c.frame(&[m.as_bytes()], &mut out).unwrap();
                }
                let per_msg_us = t.elapsed().as_secs_f64() * 1e6 / msgs.len() as f64;
                let default = window
                    == match kind {
                        Kind::Zlib => ZLIB_WINDOW_BITS as u32,
                        Kind::Zstd => ZSTD_WINDOW_LOG,
                    };
                // Memory (defaults only, in a process that has freed nothing
                // large yet): N streams, each past its window (64 messages),
                // RSS delta; the streams are kept so nothing is reused.
                const N: usize = 2000;
                let mut rss = String::from("-");
                if default {
                    let before = rss_kib();
                    for i in 0..N {
                        let mut c = Compressor::with_window(kind, window, None).unwrap();
                        let mut o = Vec::with_capacity(64 * 1024);
                        for j in 0..64 {
                            o.clear();
                            c.frame(&[realistic((i * 64 + j) as u64).as_bytes()], &mut o)
                                .unwrap();
                        }
                        kept.push(c);
                    }
                    rss = format!("{:.1}", (rss_kib() - before) as f64 / N as f64);
                }
                println!(
                    "{:11} window 2^{window:2}{}: first message {} -> {first} B ({:.2}x); 200 in a row {raw} -> {packed} B ({:.2}x, {:.1} us/msg); \
RSS +{rss} KiB/stream over {N} warm streams (state {} B{})",
                    kind.name(),
                    if default { " (default)" } else { "" },
                    realistic(0).len(),
                    realistic(0).len() as f64 / first as f64,
                    raw as f64 / packed as f64,
                    per_msg_us,
                    c.state_bytes(),
                    match kind {
                        Kind::Zstd => ", ZSTD_sizeof_CCtx",
                        Kind::Zlib => ", computed",
                    },
                );
            }
        }
    }
}
