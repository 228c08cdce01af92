//! Reading framed records from a byte stream.

use crate::error::DecodeError;
use crate::framing::{BODY_ALIGN, HEADER_LEN, MAX_RECORD_LEN};
use crate::record::{check_fields, ArchivedRecord, VERSION};
use rkyv::rancor::Failure;
use rkyv::util::AlignedVec;

/// Counters kept by a [`FrameReader`] (cumulative; see
/// [`FrameReader::take_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Records delivered.
    pub records: u64,
    /// Bytes of complete frames consumed (headers included), delivered or
    /// skipped.
    pub bytes: u64,
    /// Errors by [`DecodeError::index`] (a fatal error is counted once).
    pub errors: [u64; DecodeError::COUNT],
}

impl DecodeStats {
    /// `(reason, count)` for every reason, zeros included.
    pub fn errors_by_reason(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        DecodeError::REASONS
            .iter()
            .copied()
            .zip(self.errors.iter().copied())
    }

    /// All errors, skipped and fatal.
    pub fn total_errors(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// Reads framed records out of an accumulating byte buffer, one connection
/// per reader.
///
/// Feed whatever the socket gave with [`push`](Self::push), then call
/// [`next`](Self::next) until it returns `None` (a partial frame waits for
/// more bytes). Records are validated and handed out zero-copy as
/// `&ArchivedRecord` borrowed from the reader's buffer, valid until the next
/// `push`/`next`. A skipped record yields `Some(Err(e))` with
/// `!e.is_fatal()`: keep going. A fatal error is returned by every later
/// `next` too, and `push` then ignores its input: close the connection (or
/// [`reset`](Self::reset) the reader for a new one).
///
/// Memory: the buffer is an rkyv `AlignedVec` (16-byte aligned) that grows
/// to the largest `partial frame + pushed chunk` seen and is then reused:
/// consumed bytes are dropped by moving the unread tail to the front in
/// place (only when the chunk would not fit otherwise). Frames written by
/// [`crate::Encoder`] are multiples of 8 bytes, so bodies stay 8-aligned in
/// the buffer and are validated in place; a body that is not (a foreign
/// producer) is first copied into a reusable aligned scratch. In the steady
/// state neither `push` nor `next` allocates.
pub struct FrameReader {
    buf: AlignedVec<16>,
    start: usize,
    max_record_len: u32,
    scratch: AlignedVec<16>,
    fatal: Option<DecodeError>,
    stats: DecodeStats,
    /// Where the last accepted body lies in `buf` (None: in `scratch`).
    last_body: Option<(usize, usize)>,
}

impl Default for FrameReader {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FrameReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameReader")
            .field("buffered", &self.buffered())
            .field("max_record_len", &self.max_record_len)
            .field("fatal", &self.fatal)
            .field("stats", &self.stats)
            .finish()
    }
}

impl FrameReader {
    /// Initial buffer capacity of [`new`](Self::new).
    pub const DEFAULT_CAPACITY: usize = 64 * 1024;

    /// A reader accepting bodies up to [`MAX_RECORD_LEN`].
    pub fn new() -> Self {
        Self::with_limits(Self::DEFAULT_CAPACITY, MAX_RECORD_LEN)
    }

    /// A reader accepting bodies up to `max_record_len` bytes (clamped to
    /// `u32::MAX`).
    pub fn with_max_record_len(max_record_len: usize) -> Self {
        Self::with_limits(Self::DEFAULT_CAPACITY, max_record_len)
    }

    /// A reader with `capacity` bytes preallocated and bodies up to
    /// `max_record_len`.
    pub fn with_limits(capacity: usize, max_record_len: usize) -> Self {
        FrameReader {
            buf: AlignedVec::with_capacity(capacity),
            start: 0,
            max_record_len: u32::try_from(max_record_len).unwrap_or(u32::MAX),
            scratch: AlignedVec::new(),
            fatal: None,
            stats: DecodeStats::default(),
            last_body: None,
        }
    }

    /// The largest accepted body length.
    pub fn max_record_len(&self) -> usize {
        self.max_record_len as usize
    }

    /// Appends bytes read from the stream. Ignored after a fatal error.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.fatal.is_some() {
            return;
        }
        let len = self.buf.len();
        if self.start == len {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 0 && self.buf.capacity() - len < bytes.len() {
            // Compact in place: the unread tail moves to the front.
            self.buf.as_mut_slice().copy_within(self.start..len, 0);
            self.buf.resize(len - self.start, 0);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next record, a skipped record's error, or `None` when no complete
    /// frame is buffered. See the type docs.
    #[allow(clippy::should_implement_trait)] // a lending iterator: items borrow the reader
    pub fn next(&mut self) -> Option<Result<&ArchivedRecord, DecodeError>> {
        if let Some(e) = self.fatal {
            return Some(Err(e));
        }
        let avail = &self.buf.as_slice()[self.start..];
        if avail.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]);
        if len > self.max_record_len {
            return Some(Err(self.fail_fatal(DecodeError::TooLarge {
                len,
                max: self.max_record_len,
            })));
        }
        if avail.len() < HEADER_LEN {
            return None;
        }
        let version = u16::from_le_bytes([avail[4], avail[5]]);
        let reserved = u16::from_le_bytes([avail[6], avail[7]]);
        if reserved != 0 {
            return Some(Err(self.fail_fatal(DecodeError::BadHeader(reserved))));
        }
        let frame_len = HEADER_LEN + len as usize;
        if avail.len() < frame_len {
            return None;
        }
        let body_start = self.start + HEADER_LEN;
        let body_end = self.start + frame_len;
        self.start = body_end;
        self.stats.bytes += frame_len as u64;
        if version != VERSION {
            let e = DecodeError::UnsupportedVersion(version);
            self.stats.errors[e.index()] += 1;
            return Some(Err(e));
        }
        let aligned = (self.buf.as_ptr() as usize + body_start).is_multiple_of(BODY_ALIGN);
        self.last_body = if aligned {
            Some((body_start, body_end))
        } else {
            None
        };
        let body: &[u8] = if aligned {
            &self.buf.as_slice()[body_start..body_end]
        } else {
            self.scratch.clear();
            self.scratch
                .extend_from_slice(&self.buf.as_slice()[body_start..body_end]);
            self.scratch.as_slice()
        };
        let result = match rkyv::api::low::access::<ArchivedRecord, Failure>(body) {
            Err(_) => Err(DecodeError::Malformed),
            Ok(rec) => check_fields(
                rec.version(),
                rec.event_type().as_bytes(),
                rec.flags(),
                rec.d(),
            )
            .map(|()| rec),
        };
        match &result {
            Ok(_) => self.stats.records += 1,
            Err(e) => self.stats.errors[e.index()] += 1,
        }
        Some(result)
    }

    fn fail_fatal(&mut self, e: DecodeError) -> DecodeError {
        self.fatal = Some(e);
        self.stats.errors[e.index()] += 1;
        e
    }

    /// The body bytes of the record `next` returned last (valid until the
    /// next `push` or `next`), for copying an accepted record elsewhere.
    pub fn last_body(&self) -> &[u8] {
        match self.last_body {
            Some((a, b)) => &self.buf.as_slice()[a..b],
            None => self.scratch.as_slice(),
        }
    }

    /// The fatal error this reader stopped on, if any.
    pub fn fatal(&self) -> Option<DecodeError> {
        self.fatal
    }

    /// Bytes pushed but not yet consumed as complete frames (a partial frame
    /// at connection close means the producer's last record was cut).
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Counters since creation or the last [`take_stats`](Self::take_stats).
    pub fn stats(&self) -> &DecodeStats {
        &self.stats
    }

    /// Returns the counters and zeroes them.
    pub fn take_stats(&mut self) -> DecodeStats {
        std::mem::take(&mut self.stats)
    }

    /// Forgets buffered bytes and any fatal error (for reuse on a new
    /// connection), keeping the buffers' capacity and the counters.
    pub fn reset(&mut self) {
        self.buf.clear();
        self.start = 0;
        self.fatal = None;
    }
}
