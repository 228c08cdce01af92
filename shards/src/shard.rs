//! Which shard a server belongs to, and validation of an Identify's `shard`.

use std::fmt;

/// Largest shard count accepted in an Identify.
pub const MAX_SHARD_COUNT: u32 = 65_535;

/// Shard of a server: `(server_id >> 22) % shard_count` (public API, never change).
///
/// A `shard_count` of 0 is treated as 1 (everything on shard 0) instead of
/// panicking; [`validate_shard`] rejects a count of 0 at Identify time.
#[inline]
pub fn shard_for(server_id: u64, shard_count: u32) -> u32 {
    let count = u64::from(shard_count.max(1));
    // The remainder is < count <= u32::MAX, so the cast is lossless.
    ((server_id >> 22) % count) as u32
}

/// Why an Identify's `shard: [id, count]` is invalid (close code 4010).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardError {
    /// `count` was 0.
    ZeroCount,
    /// `count` exceeded [`MAX_SHARD_COUNT`].
    CountTooLarge { count: u32 },
    /// `id >= count`.
    IdOutOfRange { id: u32, count: u32 },
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ShardError::ZeroCount => f.write_str("shard count must be at least 1"),
            ShardError::CountTooLarge { count } => {
                write!(
                    f,
                    "shard count {count} exceeds the maximum of {MAX_SHARD_COUNT}"
                )
            }
            ShardError::IdOutOfRange { id, count } => {
                write!(f, "shard id {id} is not below shard count {count}")
            }
        }
    }
}

impl std::error::Error for ShardError {}

/// Checks `1 <= count <= MAX_SHARD_COUNT` and `id < count`.
pub fn validate_shard(id: u32, count: u32) -> Result<(), ShardError> {
    if count == 0 {
        return Err(ShardError::ZeroCount);
    }
    if count > MAX_SHARD_COUNT {
        return Err(ShardError::CountTooLarge { count });
    }
    if id >= count {
        return Err(ShardError::IdOutOfRange { id, count });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // 175928847299117063 >> 22 == 41944705796
        assert_eq!(shard_for(175928847299117063, 1), 0);
        assert_eq!(shard_for(175928847299117063, 2), 0);
        assert_eq!(shard_for(175928847299117063, 3), 2);
        // 81384788765712384 >> 22 == 19403645698
        assert_eq!(shard_for(81384788765712384, 3), 1);
        assert_eq!(shard_for(81384788765712384, 16), 2);
        // 613425648685547541 >> 22 == 146252071544
        assert_eq!(shard_for(613425648685547541, 3), 2);
        assert_eq!(shard_for(613425648685547541, 16), 8);
        // 41771983423143937 >> 22 == 9959216934
        assert_eq!(shard_for(41771983423143937, 16), 6);
    }

    #[test]
    fn zero_count_is_one() {
        assert_eq!(shard_for(u64::MAX, 0), 0);
        assert_eq!(shard_for(613425648685547541, 0), 0);
    }

    #[test]
    fn always_in_range() {
        for count in [1u32, 2, 7, 1000, u32::MAX] {
            assert!(shard_for(u64::MAX, count) < count);
        }
    }

    #[test]
    fn validation() {
        assert_eq!(validate_shard(0, 1), Ok(()));
        assert_eq!(validate_shard(15, 16), Ok(()));
        assert_eq!(validate_shard(0, MAX_SHARD_COUNT), Ok(()));
        assert_eq!(validate_shard(0, 0), Err(ShardError::ZeroCount));
        assert_eq!(
            validate_shard(16, 16),
            Err(ShardError::IdOutOfRange { id: 16, count: 16 })
        );
        assert_eq!(
            validate_shard(0, MAX_SHARD_COUNT + 1),
            Err(ShardError::CountTooLarge {
                count: MAX_SHARD_COUNT + 1
            })
        );
        assert!(!ShardError::ZeroCount.to_string().is_empty());
    }
}
