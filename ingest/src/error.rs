//! Why a frame was not delivered ([`DecodeError`]): the reasons a reader
//! skips one record and the fatal ones that end a connection, with their
//! metric labels. A leaf: the reader (`frame`) and the record checks
//! (`record`) both return it.

use thiserror::Error;

/// Why a frame was not delivered.
///
/// Most reasons are per record: the record is skipped, the length prefix
/// says where the next one starts and the stream stays usable. The fatal
/// ones ([`is_fatal`](Self::is_fatal)) mean the framing itself can no longer
/// be trusted: the caller closes that connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// FATAL: the length prefix exceeds the reader's maximum body length.
    #[error("frame body of {len} bytes exceeds the maximum of {max}")]
    TooLarge { len: u32, max: u32 },
    /// FATAL: the header's reserved half-word is not 0, so this is not a
    /// frame header: the stream is out of sync.
    #[error("frame header reserved field is {0:#06x}, not 0: stream out of sync")]
    BadHeader(u16),
    /// The body fails rkyv/bytecheck validation (out-of-bounds or misaligned
    /// pointers, bad lengths, non-UTF-8 `event_type`, ...).
    #[error("record fails archive validation")]
    Malformed,
    /// The header's or the record's version is not [`VERSION`](crate::VERSION).
    #[error("unsupported record version {0}")]
    UnsupportedVersion(u16),
    /// Reserved `flags` bits are set.
    #[error("reserved flag bits set in {0:#x}")]
    ReservedFlags(u32),
    /// `event_type` is empty, longer than 64 bytes, or not `[A-Z_]+`.
    #[error("event_type is not 1 to 64 bytes of [A-Z_]")]
    BadEventType,
    /// `d` is not UTF-8 JSON whose top-level value is an object.
    #[error("d is not a UTF-8 JSON object")]
    BadD,
}

impl DecodeError {
    /// Number of distinct reasons (length of [`REASONS`](Self::REASONS)).
    pub const COUNT: usize = 7;
    /// Every reason label, indexed by [`index`](Self::index).
    pub const REASONS: [&'static str; Self::COUNT] = [
        "too_large",
        "bad_header",
        "malformed",
        "unsupported_version",
        "reserved_flags",
        "bad_event_type",
        "bad_d",
    ];

    /// A stable, low-cardinality label for metrics
    /// (`ingest_errors_total{reason="..."}`).
    pub fn reason(&self) -> &'static str {
        Self::REASONS[self.index()]
    }

    /// Position of this reason in [`REASONS`](Self::REASONS).
    pub fn index(&self) -> usize {
        match self {
            DecodeError::TooLarge { .. } => 0,
            DecodeError::BadHeader(_) => 1,
            DecodeError::Malformed => 2,
            DecodeError::UnsupportedVersion(_) => 3,
            DecodeError::ReservedFlags(_) => 4,
            DecodeError::BadEventType => 5,
            DecodeError::BadD => 6,
        }
    }

    /// True when the stream cannot be resynchronised: close the connection.
    /// False when only this record was skipped.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            DecodeError::TooLarge { .. } | DecodeError::BadHeader(_)
        )
    }
}
