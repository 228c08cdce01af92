//! The framing of a compression stream with nothing compressed: what a
//! session that asked for `compress=zlib-stream` / `zstd-stream` is served
//! past the node's cap on compressing sessions (`compress::Compressor::stored`).
//!
//! Why not refuse or fall back to text (issue 40, measured against every
//! library's own code, docs/libraries.md "Compression at the cap"): hikari
//! fails on a text frame where it asked for a stream and Eris hangs; a 503
//! to the upgrade crashes discord.py's `Client` and fails discord.js's
//! `login()`; a close after Hello is a hot reconnect loop in discord.py.
//! The stream's own format with stored blocks is what every inflater
//! reads, and it costs no state: a few bytes of framing per message and a
//! copy, no window, no hash table.
//!
//! - zlib (RFC 1950/1951): the header `78 01` once, then per message its
//!   bytes in stored blocks (`00`, LEN, NLEN, at most 65,535 bytes each;
//!   not final), then the empty stored block of a sync flush,
//!   `00 00 00 ff ff`: every message ends in `00 00 ff ff`, as the
//!   libraries look for. The Adler-32 of a stream that never ends is never
//!   written, as with a real compressor.
//! - zstd (RFC 8878): one frame that never ends, its header once
//!   (`28 b5 2f fd`, descriptor `00`: no size, no checksum, no dictionary;
//!   window `38`: 128 KiB), then per message raw blocks of at most 128 KiB
//!   (a 3-byte header, `size << 3`, never the last block): a streaming
//!   decoder gives out each message when its frame arrives.

/// zlib's two header bytes: deflate, 32 KiB window, FLEVEL 0 (fastest),
/// no dictionary; `0x7801 % 31 == 0`.
pub const ZLIB_HEADER: [u8; 2] = [0x78, 0x01];
/// The largest stored deflate block.
pub const ZLIB_BLOCK: usize = 65_535;
/// A sync flush: an empty, non-final stored block.
pub const ZLIB_SYNC: [u8; 5] = [0x00, 0x00, 0x00, 0xff, 0xff];

/// The zstd frame header: magic, descriptor 0, window 2^17.
pub const ZSTD_HEADER: [u8; 6] = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
/// The largest block of a frame with a 128 KiB window.
pub const ZSTD_BLOCK: usize = 128 * 1024;

/// Which stream's framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    Zlib,
    Zstd,
}

/// One stream's framing state: only whether its header went out.
#[derive(Debug)]
pub struct Stored {
    framing: Framing,
    started: bool,
}

impl Stored {
    pub fn new(framing: Framing) -> Stored {
        Stored {
            framing,
            started: false,
        }
    }

    /// The bytes of one message (the concatenation of `parts`), framed,
    /// appended to `out`: the stream's header first if this is its first
    /// message.
    pub fn message(&mut self, parts: &[&[u8]], out: &mut Vec<u8>) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let (block, per_block) = match self.framing {
            Framing::Zlib => (ZLIB_BLOCK, 5),
            Framing::Zstd => (ZSTD_BLOCK, 3),
        };
        out.reserve(
            ZSTD_HEADER.len() + total + total.div_ceil(block) * per_block + ZLIB_SYNC.len(),
        );
        if !self.started {
            self.started = true;
            out.extend_from_slice(match self.framing {
                Framing::Zlib => &ZLIB_HEADER,
                Framing::Zstd => &ZSTD_HEADER,
            });
        }
        let mut left = total;
        let mut parts = parts.iter().map(|p| &p[..]).filter(|p| !p.is_empty());
        let mut part: &[u8] = parts.next().unwrap_or(&[]);
        while left > 0 {
            let n = left.min(block);
            match self.framing {
                Framing::Zlib => {
                    let len = n as u16;
                    out.push(0x00);
                    out.extend_from_slice(&len.to_le_bytes());
                    out.extend_from_slice(&(!len).to_le_bytes());
                }
                Framing::Zstd => {
                    let h = (n as u32) << 3; // raw block, not the last
                    out.extend_from_slice(&h.to_le_bytes()[..3]);
                }
            }
            // The block's bytes, across parts.
            let mut want = n;
            while want > 0 {
                if part.is_empty() {
                    part = parts.next().expect("the parts hold `total` bytes");
                }
                let k = want.min(part.len());
                out.extend_from_slice(&part[..k]);
                part = &part[k..];
                want -= k;
            }
            left -= n;
        }
        if self.framing == Framing::Zlib {
            out.extend_from_slice(&ZLIB_SYNC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(sizes: &[usize]) -> Vec<Vec<u8>> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|j| b'a' + ((i * 7 + j) % 26) as u8).collect())
            .collect()
    }

    /// Framed messages, split into parts unevenly as the send path does.
    fn framed(framing: Framing, msgs: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut s = Stored::new(framing);
        msgs.iter()
            .enumerate()
            .map(|(i, m)| {
                let k = if m.is_empty() { 0 } else { i % m.len() };
                let mut out = Vec::new();
                s.message(&[&m[..k], &[], &m[k..]], &mut out);
                out
            })
            .collect()
    }

    const SIZES: [usize; 7] = [1, 700, 65_535, 65_536, 131_072, 131_073, 300_000];

    #[test]
    fn zlib_stored_blocks_inflate_message_by_message_and_end_in_a_sync_flush() {
        let msgs = messages(&SIZES);
        let mut inf = zlib_rs::Inflate::new(true, 15);
        for (m, f) in msgs.iter().zip(framed(Framing::Zlib, &msgs)) {
            assert!(f.ends_with(&[0, 0, 0xff, 0xff]), "sync flush");
            let mut out = vec![0u8; m.len() + 16];
            let o0 = inf.total_out();
            inf.decompress(&f, &mut out, zlib_rs::InflateFlush::SyncFlush)
                .unwrap();
            let n = (inf.total_out() - o0) as usize;
            assert_eq!(&out[..n], &m[..]);
        }
    }

    #[test]
    fn zlib_stored_blocks_inflate_with_flate2_as_one_stream() {
        let msgs = messages(&SIZES);
        let mut d = flate2::Decompress::new(true);
        for (m, f) in msgs.iter().zip(framed(Framing::Zlib, &msgs)) {
            let mut out = Vec::with_capacity(m.len() + 16);
            d.decompress_vec(&f, &mut out, flate2::FlushDecompress::Sync)
                .unwrap();
            assert_eq!(out, *m);
        }
    }

    #[test]
    fn zstd_raw_blocks_decode_message_by_message() {
        let msgs = messages(&SIZES);
        let mut d = zstd::zstd_safe::DCtx::create();
        for (m, f) in msgs.iter().zip(framed(Framing::Zstd, &msgs)) {
            let mut out: Vec<u8> = Vec::with_capacity(m.len() + 16);
            let mut input = zstd::zstd_safe::InBuffer::around(&f);
            let mut o = zstd::zstd_safe::OutBuffer::around(&mut out);
            while input.pos() < f.len() {
                d.decompress_stream(&mut o, &mut input).unwrap();
            }
            assert_eq!(out, *m);
        }
    }

    #[test]
    fn the_framing_costs_a_few_bytes_per_block() {
        let msgs = messages(&[700, 300_000]);
        let z = framed(Framing::Zlib, &msgs);
        assert_eq!(z[0].len(), 2 + 5 + 700 + 5);
        assert_eq!(z[1].len(), 5 * 5 + 300_000 + 5);
        let s = framed(Framing::Zstd, &msgs);
        assert_eq!(s[0].len(), 6 + 3 + 700);
        assert_eq!(s[1].len(), 3 * 3 + 300_000);
    }
}
