//! `ingest`: the versioned wire format of committed chat events that a
//! producer (the chat service, `loadgen`, the node's demo source) sends to a
//! gateway node's ingest listener, and the code to build, frame and validate
//! records. No sockets, no sessions.
//!
//! # Framing (version 1)
//!
//! A stream is a sequence of frames, each:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | `len`: body length in bytes, `u32` little-endian |
//! | 4 | 2 | `version`: `u16` LE, [`VERSION`] (= 1); equals the record's `version` |
//! | 6 | 2 | reserved, `u16`, must be 0 |
//! | 8 | `len` | body: the rkyv 0.8 archive of one [`Record`] |
//!
//! The 8-byte header keeps the body 8-aligned, which the archived `u64`
//! fields need for in-place access: the encoder emits bodies whose length is
//! a multiple of 8 (rkyv pads in front of the root; the root is 8-aligned
//! and its size a multiple of 8), so in a stream of such frames every body
//! starts 8-aligned relative to the stream start. Readers that find a body
//! misaligned anyway copy it into an aligned scratch first.
//!
//! A `len` over the reader's limit ([`MAX_RECORD_LEN`] = 1 MiB by default)
//! or a non-zero reserved field is fatal ([`DecodeError::is_fatal`]): the
//! framing cannot be trusted, close the connection. Anything else wrong with
//! a frame (unknown version, bytecheck failure, reserved flags, bad
//! `event_type`, `d` not a JSON object) skips that one record; the length
//! prefix says where the next begins.
//!
//! # Body (version 1)
//!
//! The archive of [`Record`] in rkyv 0.8's default format (little-endian,
//! aligned primitives, 32-bit relative pointers): out-of-line data first
//! (`event_type` bytes if longer than 8, then `mentions` as `u64` LE, then
//! `d`), padding, and the 80-byte `#[repr(C)]` root [`ArchivedRecord`] at the
//! end of the body:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | `version: u16` |
//! | 2 | 2 | padding (0) |
//! | 4 | 8 | `event_type`: `ArchivedString` (inline if <= 8 bytes, else len + relptr) |
//! | 12 | 4 | padding (0) |
//! | 16 | 8 | `server_id: u64` |
//! | 24 | 8 | `channel_id: u64` (0: server-wide) |
//! | 32 | 8 | `intent: u64` |
//! | 40 | 8 | `permissions: u64` |
//! | 48 | 8 | `commit_unix_ns: u64` |
//! | 56 | 4 | `flags: u32` ([`FLAG_HAS_CONTENT`], [`FLAG_GUILD_STATE`], [`FLAG_INTERACTION`], [`FLAG_ADDRESSED`]) |
//! | 60 | 8 | `mentions`: `ArchivedVec<u64>` (relptr + len) |
//! | 68 | 8 | `d`: `ArchivedVec<u8>` (relptr + len) |
//! | 76 | 4 | padding (0) |
//!
//! Evolving the format: bump [`VERSION`]; a reader dispatches on the header
//! version before touching the body, so old and new layouts can coexist
//! during a rollout (upgrade readers first).
//!
//! # Use
//!
//! ```
//! use ingest::{encode_parts, FrameReader, FLAG_HAS_CONTENT};
//!
//! let mut wire = Vec::new();
//! let d = br#"{"id":"1","channel_id":"7","content":"hi"}"#;
//! encode_parts("MESSAGE_CREATE", 42, 7, 1 << 9, 0, 1, FLAG_HAS_CONTENT, &[99], d, &mut wire);
//!
//! let mut reader = FrameReader::new();
//! reader.push(&wire);
//! while let Some(r) = reader.next() {
//!     match r {
//!         Ok(rec) => assert_eq!(rec.event_type(), "MESSAGE_CREATE"),
//!         Err(e) if e.is_fatal() => break, // close the connection
//!         Err(e) => eprintln!("skipped: {}", e.reason()),
//!     }
//! }
//! ```

mod encode;
mod error;
mod frame;
mod framing;
#[doc(hidden)]
pub mod fuzzing;
mod json;
mod record;

pub use encode::{encode, encode_parts, encode_ref, Encoder};
pub use error::DecodeError;
pub use frame::{DecodeStats, FrameReader};
pub use framing::{BODY_ALIGN, HEADER_LEN, MAX_RECORD_LEN};
pub use json::{
    redact_message_content, validate_json_object, RedactError, MAX_DEPTH, MAX_REDACT_NESTING,
};
pub use record::{
    check_fields, ArchivedRecord, Record, RecordRef, RecordRefResolver, FLAG_ADDRESSED,
    FLAG_GUILD_STATE, FLAG_HAS_CONTENT, FLAG_INTERACTION, KNOWN_FLAGS, MAX_EVENT_TYPE_LEN, VERSION,
};

const _: () = assert!(core::mem::align_of::<ArchivedRecord>() <= BODY_ALIGN);
const _: () = assert!(core::mem::size_of::<ArchivedRecord>().is_multiple_of(BODY_ALIGN));

/// Access a record body that a [`FrameReader`] already accepted, without
/// validating it again (a node validates once, on its ingest thread, and
/// its workers read the same bytes).
///
/// # Safety
/// `body` must be byte-identical to a body `FrameReader::next` returned
/// `Ok` for, and 8-byte aligned.
pub unsafe fn access_trusted(body: &[u8]) -> &ArchivedRecord {
    debug_assert!((body.as_ptr() as usize).is_multiple_of(BODY_ALIGN));
    // SAFETY: this function's contract: the caller passes a body `access` accepted, so the unchecked read finds a well-formed archive.
    unsafe { rkyv::access_unchecked::<ArchivedRecord>(body) }
}
