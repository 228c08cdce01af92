//! A bounded little-endian reader for the node's own binary frames: the
//! hand-off (`moved.rs`), crash recovery's blobs (`recovery.rs`) and the
//! portal's figures on the node-to-node link. Every read checks the bytes
//! left (`None` when they are too few, never a panic), and a count is
//! accepted only if the bytes left could hold that many items of their
//! smallest size, so a forged count allocates nothing big.

pub struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }

    pub fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }

    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }

    /// A u16 count of items of at least `min` bytes each.
    pub fn count16(&mut self, min: usize) -> Option<usize> {
        let n = usize::from(self.u16()?);
        (n.checked_mul(min)? <= self.0.len()).then_some(n)
    }

    /// A u32 count of items of at least `min` bytes each.
    pub fn count32(&mut self, min: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n.checked_mul(min)? <= self.0.len()).then_some(n)
    }

    /// A u32 count of items of at least `each` bytes, and at most `max`.
    pub fn count_at_most(&mut self, max: usize, each: usize) -> Option<usize> {
        self.count32(each).filter(|&n| n <= max)
    }

    /// A u32 length, then that many bytes.
    pub fn sized(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_input_and_forged_counts_are_none() {
        let mut r = Reader(&[1, 0, 2]);
        assert_eq!(r.u16(), Some(1));
        assert_eq!(r.u16(), None, "one byte left");
        assert_eq!(Reader(&[0xff, 0xff, 0xff, 0xff]).count32(1), None);
        assert_eq!(Reader(&[2, 0, 0, 0, 9, 9]).count32(1), Some(2));
        assert_eq!(Reader(&[2, 0, 0, 0, 9, 9]).count_at_most(1, 1), None);
        assert_eq!(Reader(&[3, 0, 0, 0, 9, 9]).sized(), None);
        assert_eq!(Reader(&[2, 0, 9, 9]).count16(2), None);
    }
}
