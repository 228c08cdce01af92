//! Building framed records.

use std::cell::RefCell;

use rkyv::rancor::Failure;
use rkyv::ser::allocator::Arena;
use rkyv::ser::{Positional, Writer};

use crate::framing::{BODY_ALIGN, HEADER_LEN};
use crate::record::{Record, RecordRef, VERSION};

/// An rkyv writer appending to a `Vec<u8>`, with positions counted from
/// `base` (the first body byte), so rkyv's alignment padding is relative to
/// the body start whatever `out` already holds.
struct BodyWriter<'a> {
    out: &'a mut Vec<u8>,
    base: usize,
}

impl Positional for BodyWriter<'_> {
    #[inline]
    fn pos(&self) -> usize {
        self.out.len() - self.base
    }
}

impl<E> Writer<E> for BodyWriter<'_> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) -> Result<(), E> {
        self.out.extend_from_slice(bytes);
        Ok(())
    }
}

/// A reusable record encoder: keeps rkyv's scratch arena between calls, so
/// encoding allocates nothing beyond the growth of `out` (`tests/no_alloc.rs`
/// holds it to that). One per producer thread.
pub struct Encoder {
    arena: Arena,
}

impl Default for Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder").finish_non_exhaustive()
    }
}

impl Encoder {
    pub fn new() -> Self {
        Encoder {
            arena: Arena::new(),
        }
    }

    /// Appends one framed record to `out` and returns the frame's length
    /// (header included). The record is not checked (see
    /// [`RecordRef::check`]); the header's version is `record.version`.
    ///
    /// # Panics
    /// If a field cannot be represented (a string or vector of 2 GiB or
    /// more, or a body over `u32::MAX` bytes). Records over the decoder's
    /// limit ([`crate::MAX_RECORD_LEN`] by default) encode fine but kill the
    /// connection at the node: keep them under it.
    pub fn encode(&mut self, record: &RecordRef<'_>, out: &mut Vec<u8>) -> usize {
        let frame_start = out.len();
        out.reserve(
            HEADER_LEN + 96 + record.event_type.len() + 8 * record.mentions.len() + record.d.len(),
        );
        out.extend_from_slice(&[0u8; HEADER_LEN]);
        let base = out.len();
        let writer = BodyWriter { out, base };
        if rkyv::api::low::to_bytes_in_with_alloc::<_, _, Failure>(
            record,
            writer,
            self.arena.acquire(),
        )
        .is_err()
        {
            out.truncate(frame_start);
            panic!("ingest: record cannot be represented by the archive format");
        }
        let body_len = out.len() - base;
        debug_assert_eq!(
            body_len % BODY_ALIGN,
            0,
            "rkyv body not a multiple of the alignment"
        );
        let Ok(len32) = u32::try_from(body_len) else {
            out.truncate(frame_start);
            panic!("ingest: record body of {body_len} bytes exceeds u32");
        };
        let h = &mut out[frame_start..base];
        h[0..4].copy_from_slice(&len32.to_le_bytes());
        h[4..6].copy_from_slice(&record.version.to_le_bytes());
        h[6..8].copy_from_slice(&0u16.to_le_bytes());
        HEADER_LEN + body_len
    }

    /// [`encode`](Self::encode) of an owned [`Record`].
    pub fn encode_record(&mut self, record: &Record, out: &mut Vec<u8>) -> usize {
        self.encode(&RecordRef::from(record), out)
    }
}

thread_local! {
    static ENCODER: RefCell<Encoder> = RefCell::new(Encoder::new());
}

/// Appends one framed `record` to `out` (through a thread-local
/// [`Encoder`]); returns the frame length. See [`Encoder::encode`].
pub fn encode(record: &Record, out: &mut Vec<u8>) -> usize {
    encode_ref(&RecordRef::from(record), out)
}

/// Appends one framed borrowed record to `out` (through a thread-local
/// [`Encoder`]); returns the frame length. See [`Encoder::encode`].
pub fn encode_ref(record: &RecordRef<'_>, out: &mut Vec<u8>) -> usize {
    ENCODER.with(|e| e.borrow_mut().encode(record, out))
}

/// Appends one framed version-[`VERSION`] record built from its parts,
/// without building a [`Record`] (through a thread-local [`Encoder`]; no
/// allocation beyond `out`'s growth after the first call on a thread).
/// Returns the frame length. See [`Encoder::encode`].
#[allow(clippy::too_many_arguments)]
pub fn encode_parts(
    event_type: &str,
    server_id: u64,
    channel_id: u64,
    intent: u64,
    permissions: u64,
    commit_unix_ns: u64,
    flags: u32,
    mentions: &[u64],
    d: &[u8],
    out: &mut Vec<u8>,
) -> usize {
    encode_ref(
        &RecordRef {
            version: VERSION,
            event_type,
            server_id,
            channel_id,
            intent,
            permissions,
            commit_unix_ns,
            flags,
            mentions,
            d,
        },
        out,
    )
}
