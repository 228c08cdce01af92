//! Which snowflake generator (the ten "worker" bits of an id,
//! `registry::snowflake`) each chat service uses, so message ids are unique
//! across a node's workers and across a cluster's nodes.
//!
//! ```text
//!   node n (its cluster number; 0 alone), W workers:
//!     worker w's chat service  n * (W + 1) + w
//!     the chat thread          n * (W + 1) + W
//!   the demo source            1023 (DEMO)
//! ```
//!
//! A generator never repeats an id (strictly increasing per generator), so
//! distinct generators give distinct ids whatever the clocks. Ten bits hold
//! 1,023 chat services: a node whose block does not fit (`n * (W + 1) + W`
//! past 1,022) refuses to start rather than commit ids another node may
//! also commit (a cluster of 2-worker nodes holds 340 nodes; of 64-worker
//! nodes, 15). Before issue 27 every node's chat thread was generator 1023,
//! and two nodes answering sends in one millisecond could give two messages
//! one id (tests/cluster_kafka.rs).

/// The demo source's generator (`ingest::demo`).
pub const DEMO: u16 = 1023;

/// Chat services' generators are below this.
pub const LIMIT: u16 = DEMO;

/// The generator of chat service `t` (`0..workers`: worker `t`'s;
/// `workers`: the chat thread) of node `node` with `workers` workers.
pub fn generator(node: u16, workers: usize, t: usize) -> Result<u16, String> {
    assert!(t <= workers, "chat service {t} of {workers} workers");
    let first = usize::from(node) * (workers + 1);
    let last = first + workers;
    if last >= usize::from(LIMIT) {
        return Err(format!(
            "cluster node {node} with {workers} workers would use snowflake generators \
             {first}..={last}, past {}: message ids could repeat another node's; run fewer \
             workers per node (--workers) or fewer nodes",
            LIMIT - 1
        ));
    }
    Ok((first + t) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chat_service_of_every_node_has_its_own_generator() {
        for workers in [1usize, 2, 8, 64] {
            let mut seen = std::collections::HashSet::new();
            let mut node = 0u16;
            while let Ok(g) = generator(node, workers, workers) {
                for t in 0..=workers {
                    let g = generator(node, workers, t).unwrap();
                    assert!(g < LIMIT && seen.insert(g), "node {node} service {t}: {g}");
                }
                assert!(seen.contains(&g));
                node += 1;
            }
            assert!(node >= 15, "{workers} workers: only {node} nodes fit");
            assert!(
                generator(node, workers, 0).is_err(),
                "past the bits: refused"
            );
        }
        assert_eq!(
            generator(0, 2, 2),
            Ok(2),
            "a node alone: the chat thread after its workers"
        );
    }
}
