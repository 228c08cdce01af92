//! Byte helpers of the session's parsers: a decimal number at the start
//! of a slice, a substring search, and `write!` into a byte vector.

/// `write!` into a Vec<u8>.
pub(super) struct Bytes<'a>(pub(super) &'a mut Vec<u8>);
impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

pub fn parse_u64(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_digit() && i < 20 {
        v = v.wrapping_mul(10).wrapping_add((b[i] - b'0') as u64);
        i += 1;
    }
    (v, i)
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
