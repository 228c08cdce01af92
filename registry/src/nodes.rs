//! Cluster membership: which node numbers are held, by which process, and
//! where each one's node-to-node link listens (migration 10). The rules live
//! here once; the statements per backend (`NodeStore`).
//!
//! A node claims the lowest number that is free (never held, or its claim
//! lapsed), then renews its claim on every heartbeat. A claim that lapsed
//! (the node was stopped or frozen past its deadline) may be taken by the
//! next node to start: session ids naming that number then reach the new
//! holder, which does not know them and answers "no such session". That is
//! harmless by design: the id is a routing hint, the token is checked by
//! whoever holds the session.

use crate::{error::RegistryError, error::Result};

/// Node numbers a cluster may use (0 means "no cluster" in a session id).
pub const MAX_NODE: u16 = u16::MAX;

/// How often a claim is retried when another node took the number first.
const CLAIM_ATTEMPTS: usize = 16;

pub(crate) trait NodeStore {
    /// Numbers whose claim has not lapsed at `now_ms`, ascending.
    fn live_nodes(&mut self, now_ms: u64) -> Result<Vec<u16>>;
    /// Take or renew `node` for `instance` until `until_ms`: succeeds if the
    /// row is absent, lapsed at `now_ms`, or already this instance's.
    fn claim(
        &mut self,
        node: u16,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<bool>;
    /// (number, link address) of every node whose claim holds at `now_ms`.
    fn live_links(&mut self, now_ms: u64) -> Result<Vec<(u16, String)>>;
    /// The link address of `node` if its claim holds at `now_ms`.
    fn link_of(&mut self, node: u16, now_ms: u64) -> Result<Option<String>>;
    /// Whether `instance` holds a number whose claim holds at `now_ms`.
    fn instance_live(&mut self, instance: &str, now_ms: u64) -> Result<bool>;
    /// Give `node` up (only if `instance` holds it).
    fn leave(&mut self, node: u16, instance: &str) -> Result<()>;
}

/// The lowest number not in `live` (sorted), if any is left.
pub(crate) fn lowest_free(live: &[u16]) -> Option<u16> {
    let mut want = 1u16;
    for &n in live {
        if n > want {
            break;
        }
        if n == want {
            want = want.checked_add(1)?;
        }
    }
    Some(want)
}

/// Claim a node number for `instance` (see the module docs).
pub(crate) fn register(
    store: &mut impl NodeStore,
    instance: &str,
    link_addr: &str,
    now_ms: u64,
    ttl_ms: u64,
) -> Result<u16> {
    check(instance, link_addr)?;
    for _ in 0..CLAIM_ATTEMPTS {
        let live = store.live_nodes(now_ms)?;
        let Some(n) = lowest_free(&live) else {
            return Err(RegistryError::LimitReached {
                what: "cluster nodes",
                max: u32::from(MAX_NODE),
            });
        };
        if store.claim(
            n,
            instance,
            link_addr,
            now_ms,
            now_ms.saturating_add(ttl_ms),
        )? {
            return Ok(n);
        }
    }
    Err(RegistryError::Unavailable(
        "cluster node numbers contended: no claim landed".into(),
    ))
}

pub(crate) fn check(instance: &str, link_addr: &str) -> Result<()> {
    if instance.is_empty() || instance.len() > 64 || link_addr.is_empty() || link_addr.len() > 256 {
        return Err(RegistryError::Invalid(
            "node instance (1..=64 bytes) and link address (1..=256 bytes)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_free_fills_holes_first() {
        assert_eq!(lowest_free(&[]), Some(1));
        assert_eq!(lowest_free(&[1, 2, 3]), Some(4));
        assert_eq!(lowest_free(&[1, 3]), Some(2));
        assert_eq!(lowest_free(&[2, 3]), Some(1));
        let all: Vec<u16> = (1..=u16::MAX).collect();
        assert_eq!(lowest_free(&all), None);
    }
}
