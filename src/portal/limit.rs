//! The sign-in flood guard: failed sign-ins counted per source address
//! and in all, per minute. An address over `per_address`, or everyone once
//! `global` failures came in a minute, is refused (429) without the token
//! being looked at. Bounded: at most `MAX_ADDRESSES` addresses are tracked
//! in a minute; failures from more go to the global count only.

use std::collections::HashMap;
use std::net::IpAddr;

pub const MAX_ADDRESSES: usize = 4096;

pub struct SigninGuard {
    per_address: u32,
    global: u32,
    minute: u64,
    by_address: HashMap<IpAddr, u32>,
    all: u32,
}

impl SigninGuard {
    pub fn new(per_address: u32, global: u32) -> SigninGuard {
        SigninGuard {
            per_address,
            global,
            minute: 0,
            by_address: HashMap::new(),
            all: 0,
        }
    }

    fn roll(&mut self, now_ms: u64) {
        let m = now_ms / 60_000;
        if m != self.minute {
            self.minute = m;
            self.by_address.clear();
            self.all = 0;
        }
    }

    /// Whether a sign-in from `ip` may be tried now.
    pub fn allowed(&mut self, ip: IpAddr, now_ms: u64) -> bool {
        self.roll(now_ms);
        self.all < self.global && self.by_address.get(&ip).copied().unwrap_or(0) < self.per_address
    }

    /// A failed sign-in from `ip`.
    pub fn failed(&mut self, ip: IpAddr, now_ms: u64) {
        self.roll(now_ms);
        self.all = self.all.saturating_add(1);
        if let Some(n) = self.by_address.get_mut(&ip) {
            *n = n.saturating_add(1);
        } else if self.by_address.len() < MAX_ADDRESSES {
            self.by_address.insert(ip, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_then_everyone_is_refused_until_the_minute_ends() {
        let mut g = SigninGuard::new(3, 5);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            assert!(g.allowed(a, 0));
            g.failed(a, 0);
        }
        assert!(!g.allowed(a, 1));
        assert!(g.allowed(b, 1));
        g.failed(b, 1);
        g.failed(b, 1);
        assert!(!g.allowed("10.0.0.3".parse().unwrap(), 2), "global");
        assert!(g.allowed(a, 60_000), "a new minute");
    }
}
