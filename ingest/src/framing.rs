//! The frame header's constants (the crate's head, "Framing"): its
//! length, the alignment every body keeps in the stream, and the largest
//! body a reader accepts by default. A leaf: the encoder and the reader
//! both use them.

/// Frame header length: `u32` body length, `u16` version, `u16` reserved.
pub const HEADER_LEN: usize = 8;

/// Alignment of a body in the stream (and of [`ArchivedRecord`](crate::ArchivedRecord)).
pub const BODY_ALIGN: usize = 8;

/// Default maximum body length accepted by a [`FrameReader`](crate::FrameReader) (1 MiB).
pub const MAX_RECORD_LEN: usize = 1 << 20;
