//! The frame layout's sizes, shared by the encoder (`encode.rs`) and the
//! reader (`frame.rs`): header length, body alignment, default body limit.
//! A leaf. The table of the layout is in the crate docs (`lib.rs`).

/// Frame header length: `u32` body length, `u16` version, `u16` reserved.
pub const HEADER_LEN: usize = 8;

/// Alignment of a body in the stream (and of [`ArchivedRecord`](crate::ArchivedRecord)).
pub const BODY_ALIGN: usize = 8;

/// Default maximum body length accepted by a [`FrameReader`](crate::FrameReader) (1 MiB).
pub const MAX_RECORD_LEN: usize = 1 << 20;
