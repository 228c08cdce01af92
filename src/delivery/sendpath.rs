//! Where an event is sent: one vectored send per connection carrying its
//! pending control frames and a batch of ring entries. Per entry, only the
//! frame header and `{"op":0,"t":..,"s":N,"d":` are written per session (into
//! a preallocated send slot); the payload is sent straight from the arena.
//!
//! Slots live in a pool allocated at start; a slot is held only while its
//! send is in the kernel (sends use MSG_DONTWAIT, so that is one turn).

use net::ws::{self, OpCode};
use ringbuf::{Arena, RingSlab, SessionRing};

use crate::delivery::latency::Stamp;
use crate::delivery::record;

/// Ring entries per send.
pub const MAX_BATCH: usize = 32;
/// Frame header (10) + `{"op":0,"t":"` (13) + t (<= 64) + `","s":` (6) + seq (20) + `,"d":` (5).
pub const HDR_MAX: usize = 10 + 13 + 64 + 6 + 20 + 5;
const SUFFIX: &[u8] = b"}";

pub struct SendSlot {
    iov: [libc::iovec; 1 + 3 * MAX_BATCH],
    hdr: [u8; MAX_BATCH * HDR_MAX],
    pub msg: libc::msghdr,
    /// Frame length of each entry in this batch.
    frame_len: [u32; MAX_BATCH],
    pub entries: u32,
    /// Bytes of `wire` (control frames) at the front of this send.
    pub control: usize,
    /// Lowest arena position this send reads: if the arena passes it before
    /// the send completes, what went out may be torn.
    pub min_pos: u64,
    /// Each entry's stamp and seq, and when the send was submitted (Unix
    /// ns, set by the worker): what delivery/latency.rs times it by.
    pub stamps: [Stamp; MAX_BATCH],
    pub seqs: [u64; MAX_BATCH],
    pub submit_ns: u64,
}

// SAFETY: the raw pointers in `iov`/`msg` point into buffers owned by the
// worker that owns the pool; the pool never leaves that worker's thread
// after it starts (it is only moved there once, unused).
unsafe impl Send for SendSlot {}

pub struct SendPool {
    slots: Box<[SendSlot]>,
    free: Vec<u16>,
}

impl SendPool {
    pub fn new(n: u16) -> SendPool {
        let slots = (0..n)
            .map(|_| SendSlot {
                iov: [libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                }; 1 + 3 * MAX_BATCH],
                hdr: [0; MAX_BATCH * HDR_MAX],
                // SAFETY: an all-zero msghdr is a valid empty message header.
                msg: unsafe { std::mem::zeroed() },
                frame_len: [0; MAX_BATCH],
                entries: 0,
                control: 0,
                min_pos: u64::MAX,
                stamps: [Stamp::NONE; MAX_BATCH],
                seqs: [0; MAX_BATCH],
                submit_ns: 0,
            })
            .collect();
        SendPool {
            slots,
            free: (0..n).rev().collect(),
        }
    }

    pub fn take(&mut self) -> Option<u16> {
        self.free.pop()
    }

    pub fn put(&mut self, id: u16) {
        debug_assert!(!self.free.contains(&id), "send slot freed twice");
        self.free.push(id);
    }

    pub fn slot(&mut self, id: u16) -> &mut SendSlot {
        &mut self.slots[id as usize]
    }
}

/// An unsent entry's record is gone from the arena: the session cannot be
/// served gap-free and its connection must close (it may Resume).
#[derive(Debug)]
pub struct Lost;

/// Fill `slot` with `control` (already-encoded frames) followed by up to
/// MAX_BATCH unsent entries of `ring`, skipping the first `partial` bytes of
/// the first entry's frame (sent by an earlier short write). Returns the
/// total bytes to send (0: nothing to send).
pub fn build(
    slot: &mut SendSlot,
    control: &[u8],
    ring: Option<(&SessionRing, &RingSlab)>,
    arena: &Arena,
    mut partial: usize,
) -> Result<usize, Lost> {
    let mut n_iov = 0;
    let mut total = 0;
    if !control.is_empty() {
        slot.iov[0] = libc::iovec {
            iov_base: control.as_ptr() as *mut _,
            iov_len: control.len(),
        };
        n_iov = 1;
        total = control.len();
    }
    slot.control = control.len();
    slot.entries = 0;
    slot.min_pos = u64::MAX;
    let hdr_base = slot.hdr.as_mut_ptr();
    if let Some((ring, rs)) = ring {
        for (i, e) in ring.unsent(rs).take(MAX_BATCH).enumerate() {
            let record = arena.get(e.record).ok_or(Lost)?;
            let (t, d) = record::parts(record);
            let hdr = &mut slot.hdr[i * HDR_MAX..(i + 1) * HDR_MAX];
            let h = dispatch_header(hdr, t, e.seq, d.len());
            let frame = h + d.len() + SUFFIX.len();
            slot.frame_len[i] = frame as u32;
            slot.stamps[i] = record::stamp(record);
            slot.seqs[i] = e.seq;
            slot.min_pos = slot.min_pos.min(e.record.pos);
            slot.entries += 1;
            // SAFETY: offsets stay inside `hdr`; the slot outlives the send.
            let parts: [(*const u8, usize); 3] = [
                (unsafe { hdr_base.add(i * HDR_MAX) }, h),
                (d.as_ptr(), d.len()),
                (SUFFIX.as_ptr(), SUFFIX.len()),
            ];
            for (ptr, len) in parts {
                // A short write earlier already sent the front of this frame.
                let skip = partial.min(len);
                partial -= skip;
                if len > skip {
                    slot.iov[n_iov] = libc::iovec {
                        // SAFETY: `skip < len`, the length of the slice `ptr` starts: the result points inside it.
                        iov_base: unsafe { ptr.add(skip) } as *mut _,
                        iov_len: len - skip,
                    };
                    n_iov += 1;
                    total += len - skip;
                }
            }
        }
    }
    slot.msg.msg_iov = slot.iov.as_mut_ptr();
    slot.msg.msg_iovlen = n_iov as _;
    Ok(total)
}

/// After a send of `sent` bytes built by `build` (with `partial` skipped):
/// how many control bytes went, how many whole entries went, and how many
/// bytes of the next entry's frame.
pub fn account(slot: &SendSlot, mut sent: usize, partial: usize) -> (usize, u32, usize) {
    let control = sent.min(slot.control);
    sent -= control;
    let mut offset = partial + sent; // bytes into the batch's frames, counting the skipped front
    let mut whole = 0;
    for i in 0..slot.entries as usize {
        let len = slot.frame_len[i] as usize;
        if offset >= len {
            offset -= len;
            whole += 1;
        } else {
            break;
        }
    }
    let rest = if whole == slot.entries { 0 } else { offset };
    (control, whole, rest)
}

/// Append what a short write left unsent of the first unsent entry's frame
/// (from byte `partial`), so a connection can end on a frame boundary.
/// Returns false if there is no such entry or its record is gone.
pub fn finish_frame(
    ring: &SessionRing,
    slab: &RingSlab,
    arena: &Arena,
    partial: usize,
    out: &mut Vec<u8>,
) -> bool {
    let Some(e) = ring.unsent(slab).next() else {
        return false;
    };
    let Some(record) = arena.get(e.record) else {
        return false;
    };
    let (t, d) = record::parts(record);
    let mut hdr = [0u8; HDR_MAX];
    let h = dispatch_header(&mut hdr, t, e.seq, d.len());
    let mut skip = partial;
    for part in [&hdr[..h], d, SUFFIX] {
        let k = skip.min(part.len());
        skip -= k;
        out.extend_from_slice(&part[k..]);
    }
    true
}

/// What `build_compressed` did.
#[derive(Clone, Copy, Debug)]
pub struct Compressed {
    /// Ring entries compressed (all of them count as sent).
    pub entries: u32,
    /// Message bytes in, compressed bytes out.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// The next unsent entry's record is gone from the arena (see `Lost`).
    pub lost: bool,
    /// The compressed entries' stamps and seqs (the first `entries`).
    pub stamps: [Stamp; MAX_BATCH],
    pub seqs: [u64; MAX_BATCH],
}

impl Default for Compressed {
    fn default() -> Self {
        Compressed {
            entries: 0,
            bytes_in: 0,
            bytes_out: 0,
            lost: false,
            stamps: [Stamp::NONE; MAX_BATCH],
            seqs: [0; MAX_BATCH],
        }
    }
}

/// A compressed connection's send: up to MAX_BATCH unsent entries of
/// `ring`, each compressed on the connection's stream into one binary frame
/// appended to `out` (the connection's reused output buffer). Compression
/// consumes the stream, so what is built here is sent from `out`, never
/// rebuilt: the entries count as sent at once (as under TLS).
pub fn build_compressed(
    c: &mut crate::protocol::compress::Compressor,
    ring: &SessionRing,
    slab: &RingSlab,
    arena: &Arena,
    out: &mut Vec<u8>,
) -> Result<Compressed, crate::protocol::compress::CompressError> {
    let mut done = Compressed::default();
    let mut hdr = [0u8; HDR_MAX];
    for e in ring.unsent(slab).take(MAX_BATCH) {
        let Some(record) = arena.get(e.record) else {
            done.lost = true;
            break;
        };
        let (t, d) = record::parts(record);
        let h = dispatch_prefix(&mut hdr, t, e.seq);
        let n = c.frame(&[&hdr[..h], d, SUFFIX], out)?;
        done.stamps[done.entries as usize] = record::stamp(record);
        done.seqs[done.entries as usize] = e.seq;
        done.entries += 1;
        done.bytes_in += (h + d.len() + SUFFIX.len()) as u64;
        done.bytes_out += n as u64;
    }
    Ok(done)
}

/// Write `{"op":0,"t":"..","s":N,"d":` (no frame header); returns its length.
fn dispatch_prefix(buf: &mut [u8], t: &str, seq: u64) -> usize {
    let t = record::clip_t(t);
    let mut num = itoa::Buffer::new();
    let s = num.format(seq).as_bytes();
    let mut at = 0;
    for part in [
        br#"{"op":0,"t":""#.as_slice(),
        t,
        br#"","s":"#,
        s,
        br#","d":"#,
    ] {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    at
}

/// The bytes of `slot`'s send, gathered (for TLS, which encrypts a copy).
pub fn gather(slot: &SendSlot, out: &mut Vec<u8>) {
    for iov in &slot.iov[..slot.msg.msg_iovlen] {
        // SAFETY: every iovec was built from live slices in `build`.
        out.extend_from_slice(unsafe {
            std::slice::from_raw_parts(iov.iov_base as *const u8, iov.iov_len)
        });
    }
}

/// Write a text frame header and the dispatch prefix for a payload `d` of
/// `d_len` bytes; returns the bytes written.
pub fn dispatch_header(buf: &mut [u8], t: &str, seq: u64, d_len: usize) -> usize {
    let t = record::clip_t(t);
    let mut num = itoa::Buffer::new();
    let s = num.format(seq).as_bytes();
    let prefix_len = 13 + t.len() + 6 + s.len() + 5;
    let payload = prefix_len + d_len + SUFFIX.len();
    let mut h = [0u8; ws::MAX_SERVER_HEADER];
    let hn = ws::encode_header(OpCode::Text, true, payload, &mut h);
    let mut at = 0;
    for part in [
        &h[..hn],
        br#"{"op":0,"t":""#,
        t,
        br#"","s":"#,
        s,
        br#","d":"#,
    ] {
        buf[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringbuf::{ArenaConfig, Entry, RingConfig};

    fn setup(events: &[&str]) -> (Arena, RingSlab, SessionRing) {
        let mut arena = Arena::new(ArenaConfig::new(1 << 16)).unwrap();
        let mut slab = RingSlab::new(8);
        let mut ring = SessionRing::new(&RingConfig::default(), 0);
        for (i, d) in events.iter().enumerate() {
            let r =
                record::append(&mut arena, Stamp::NONE, "MESSAGE_CREATE", d.as_bytes()).unwrap();
            ring.push(
                &mut slab,
                Entry {
                    record: r,
                    seq: i as u64 + 1,
                    at_ms: 0,
                },
            )
            .unwrap();
        }
        (arena, slab, ring)
    }

    /// Decode server frames back into JSON values.
    fn frames(mut bytes: &[u8]) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let (len, off) = match bytes[1] & 0x7f {
                126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n as usize, 2),
            };
            out.push(serde_json::from_slice(&bytes[off..off + len]).unwrap());
            bytes = &bytes[off + len..];
        }
        out
    }

    #[test]
    fn batch_is_control_then_dispatches_in_seq_order() {
        let (arena, slab, ring) = setup(&[r#"{"a":1}"#, r#"{"b":"x"}"#]);
        let mut pool = SendPool::new(1);
        let id = pool.take().unwrap();
        let mut control = Vec::new();
        ws::encode_frame(OpCode::Text, br#"{"op":11}"#, &mut control);
        let slot = pool.slot(id);
        let total = build(slot, &control, Some((&ring, &slab)), &arena, 0).unwrap();
        let mut bytes = Vec::new();
        gather(slot, &mut bytes);
        assert_eq!(bytes.len(), total);
        let v = frames(&bytes);
        assert_eq!(v[0]["op"], 11);
        assert_eq!(
            (v[1]["s"].clone(), v[1]["d"]["a"].clone()),
            (1.into(), 1.into())
        );
        assert_eq!(
            (v[2]["s"].clone(), v[2]["t"].clone()),
            (2.into(), "MESSAGE_CREATE".into())
        );
    }

    #[test]
    fn short_writes_resume_mid_frame() {
        let (arena, slab, mut ring) = setup(&[r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#]);
        let mut pool = SendPool::new(1);
        let id = pool.take().unwrap();
        let mut whole = Vec::new();
        build(pool.slot(id), &[], Some((&ring, &slab)), &arena, 0).unwrap();
        gather(pool.slot(id), &mut whole);
        // Deliver the stream in short writes of every size and reassemble.
        for step in 1..whole.len() {
            let (arena2, slab2, mut ring2) = setup(&[r#"{"a":1}"#, r#"{"b":2}"#, r#"{"c":3}"#]);
            let mut got = Vec::new();
            let mut partial = 0;
            while ring2.len_unsent() > 0 {
                let slot = pool.slot(id);
                let total = build(slot, &[], Some((&ring2, &slab2)), &arena2, partial).unwrap();
                let mut bytes = Vec::new();
                gather(slot, &mut bytes);
                let sent = step.min(total);
                got.extend_from_slice(&bytes[..sent]);
                let (_, n, rest) = account(slot, sent, partial);
                ring2.mark_sent(&slab2, n);
                partial = rest;
            }
            assert_eq!(got, whole, "step {step}");
        }
        ring.mark_sent(&slab, 3);
    }
}
