//! Invalid requests counted per source address (REST.md: 401, 403 and 429
//! other than scope `shared`, 10,000 per 10 minutes per address, then a
//! temporary restriction): where an ADDRESS is limited, across every token
//! it uses and every worker its connections reach.
//!
//! ```text
//!   slot (one AtomicU64):  63        48 47        32 31                 0
//!                         +------------+------------+--------------------+
//!                         |  tag (16)  | window (16)|     count (32)     |
//!                         +------------+------------+--------------------+
//!   address ─hash─► two candidate slots; the one whose tag matches counts it
//! ```
//!
//! - One table per node, shared by the workers (lock-free: a CAS per
//!   invalid request, a load per request), allocated at start:
//!   `SLOTS` slots. Windows are fixed, `WINDOW_MS` long, numbered by wall
//!   clock, so a restriction ends when its window does.
//! - Bounds and what they cost: an address takes one of its two candidate
//!   slots; if both hold other addresses counted in this window, the one
//!   with the lower count is taken over (that address starts again from 0).
//!   A 16-bit tag means two addresses sharing a slot and a tag (1 in 65,536
//!   per collision) share a count: an innocent address can be restricted
//!   only together with one that earned it. Both are documented in
//!   docs/rate-limits.md.
//!
//! Invariant: a slot's count is never above `limit + workers` (each worker
//! stops counting an address it sees restricted; a few may race past).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub const SLOTS: usize = 1 << 14;
pub const WINDOW_MS: u64 = 10 * 60 * 1000;

pub struct AddressTable {
    slots: Box<[AtomicU64]>,
    limit: u32,
}

fn hash(ip: u128) -> u64 {
    // splitmix64 over both halves: addresses differ in their low bits.
    let mut x = (ip as u64) ^ ((ip >> 64) as u64).rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn pack(tag: u16, window: u16, count: u32) -> u64 {
    (tag as u64) << 48 | (window as u64) << 32 | count as u64
}

fn unpack(v: u64) -> (u16, u16, u32) {
    ((v >> 48) as u16, (v >> 32) as u16, v as u32)
}

impl AddressTable {
    /// `limit` invalid requests per window (0: never restrict).
    pub fn new(limit: u32) -> AddressTable {
        AddressTable {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            limit,
        }
    }

    fn window(now_ms: u64) -> u16 {
        // 0 marks an empty slot; a window number is never 0.
        ((now_ms / WINDOW_MS) % 65_535 + 1) as u16
    }

    /// The address's two candidate slots and its tag.
    fn place(ip: u128) -> ([usize; 2], u16) {
        let h = hash(ip);
        let a = (h as usize) % SLOTS;
        (
            [a, (a + 1 + (h >> 32) as usize % (SLOTS - 1)) % SLOTS],
            (h >> 48) as u16,
        )
    }

    /// The address's count in this window.
    pub fn count(&self, ip: u128, now_ms: u64) -> u32 {
        let (slots, tag) = Self::place(ip);
        let w = Self::window(now_ms);
        slots
            .iter()
            .map(|&i| unpack(self.slots[i].load(Relaxed)))
            .find(|&(t, sw, _)| t == tag && sw == w)
            .map_or(0, |(_, _, c)| c)
    }

    /// Until when (Unix ms) the address is restricted, if it is.
    pub fn restricted_until(&self, ip: u128, now_ms: u64) -> Option<u64> {
        (self.limit > 0 && self.count(ip, now_ms) >= self.limit)
            .then(|| (now_ms / WINDOW_MS + 1) * WINDOW_MS)
    }

    /// Count one invalid request from the address; true if this one made it
    /// restricted.
    pub fn invalid(&self, ip: u128, now_ms: u64) -> bool {
        if self.limit == 0 {
            return false;
        }
        let (slots, tag) = Self::place(ip);
        let w = Self::window(now_ms);
        loop {
            let vals = slots.map(|i| self.slots[i].load(Relaxed));
            // Ours (this window), else a free or stale one, else the lower count.
            let pick = (0..2)
                .find(|&k| matches!(unpack(vals[k]), (t, sw, _) if t == tag && sw == w))
                .or_else(|| (0..2).find(|&k| unpack(vals[k]).1 != w))
                .unwrap_or(if unpack(vals[0]).2 <= unpack(vals[1]).2 {
                    0
                } else {
                    1
                });
            let (t, sw, c) = unpack(vals[pick]);
            let count = if t == tag && sw == w { c } else { 0 };
            if count >= self.limit {
                return false; // already restricted: not counted further
            }
            let new = pack(tag, w, count + 1);
            if self.slots[slots[pick]]
                .compare_exchange(vals[pick], new, Relaxed, Relaxed)
                .is_ok()
            {
                return count + 1 == self.limit;
            }
        }
    }
}

/// An address as a u128 (IPv4 as its IPv4-mapped IPv6 form), from the
/// `sockaddr` the kernel wrote (`getsockopt(SO_PEERNAME)`).
pub fn from_sockaddr(buf: &[u8], len: usize) -> Option<u128> {
    let len = len.min(buf.len());
    let family = u16::from_ne_bytes([*buf.first()?, *buf.get(1)?]);
    match family as i32 {
        libc::AF_INET if len >= 8 => {
            let v4 = std::net::Ipv4Addr::new(buf[4], buf[5], buf[6], buf[7]);
            Some(u128::from(v4.to_ipv6_mapped()))
        }
        libc::AF_INET6 if len >= 24 => {
            let mut a = [0u8; 16];
            a.copy_from_slice(&buf[8..24]);
            Some(u128::from_be_bytes(a))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_800_000_000_000;

    fn v4(a: u8, b: u8, c: u8, d: u8) -> u128 {
        u128::from(std::net::Ipv4Addr::new(a, b, c, d).to_ipv6_mapped())
    }

    #[test]
    fn an_address_is_restricted_at_the_limit_until_its_window_ends() {
        let t = AddressTable::new(3);
        let (a, b) = (v4(127, 0, 0, 1), v4(127, 0, 0, 2));
        assert!(!t.invalid(a, T));
        assert!(!t.invalid(a, T));
        assert_eq!(t.restricted_until(a, T), None);
        assert!(t.invalid(a, T), "the third makes it restricted");
        let until = t.restricted_until(a, T).unwrap();
        assert!(until > T && until <= T + WINDOW_MS && until.is_multiple_of(WINDOW_MS));
        assert!(!t.invalid(a, T), "a restricted address is not counted on");
        assert_eq!(t.count(a, T), 3);
        assert_eq!(t.restricted_until(b, T), None, "another address is not");
        assert_eq!(
            t.restricted_until(a, until),
            None,
            "the next window starts clean"
        );
        assert!(!t.invalid(a, until));
        assert_eq!(t.count(a, until), 1);
    }

    #[test]
    fn a_full_table_takes_over_the_lower_count_and_never_panics() {
        let t = AddressTable::new(1_000);
        for i in 0..(SLOTS as u32 * 3) {
            t.invalid(u128::from(i), T);
        }
        // A heavy address keeps its count while light ones churn around it.
        let heavy = v4(10, 0, 0, 1);
        for _ in 0..500 {
            t.invalid(heavy, T);
        }
        for i in 0..(SLOTS as u32) {
            t.invalid(u128::from(i) << 40, T);
        }
        assert!(t.count(heavy, T) >= 499, "{}", t.count(heavy, T));
        assert!(
            !AddressTable::new(0).invalid(heavy, T),
            "limit 0 never restricts"
        );
    }

    #[test]
    fn sockaddrs() {
        let mut b = [0u8; 28];
        b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        b[4..8].copy_from_slice(&[127, 0, 0, 2]);
        assert_eq!(from_sockaddr(&b, 16), Some(v4(127, 0, 0, 2)));
        b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        b[8..24].copy_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        assert_eq!(from_sockaddr(&b, 28), Some(1));
        assert_eq!(from_sockaddr(&b, 10), None, "too short");
        assert_eq!(from_sockaddr(&[], 0), None);
        b[..2].copy_from_slice(&7u16.to_ne_bytes());
        assert_eq!(from_sockaddr(&b, 28), None, "another family");
    }
}
