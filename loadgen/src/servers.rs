//! The many-servers workload of `loadgen measure fanout --servers S`
//! (issue 30): the sessions' tokens belong to applications each installed
//! in its own server, so one event fans out to the sessions of one server
//! only. What the fleet learns from the GUILD_CREATEs it reads (which
//! servers exist, their `#general`, how many reading sessions are in each)
//! is kept here, bounded; the producer sends round-robin over the chosen
//! servers, and the expected deliveries follow from both.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Distinct servers a [`ServerSet`] keeps; GUILD_CREATEs of servers past
/// it are only counted (`overflow`). `--servers` is capped by it.
pub const MAX_SERVERS: usize = 16_384;

/// One server as the sessions saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// Its `#general` channel.
    pub channel: u64,
    /// Sessions that read its GUILD_CREATE and read every event (stalled
    /// and paced readers are left out: they are not counted as received).
    pub readers: u64,
    /// Every session that read its GUILD_CREATE (a stalled session may
    /// not: it stops reading at READY).
    pub sessions: u64,
}

/// A server picked as a target: (server id, `#general`, readers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub server: u64,
    pub channel: u64,
    pub readers: u64,
}

/// The servers seen in GUILD_CREATEs, at most `cap` of them.
#[derive(Debug)]
pub struct ServerSet {
    map: HashMap<u64, Seen>,
    cap: usize,
    /// GUILD_CREATEs of servers not kept (the set was full).
    pub overflow: u64,
}

impl Default for ServerSet {
    fn default() -> Self {
        ServerSet::with_cap(MAX_SERVERS)
    }
}

impl ServerSet {
    pub fn with_cap(cap: usize) -> ServerSet {
        ServerSet {
            map: HashMap::new(),
            cap,
            overflow: 0,
        }
    }

    /// One session read the GUILD_CREATE of `server` (whose `#general` is
    /// `channel`); `reader`: it reads every event.
    pub fn add(&mut self, server: u64, channel: u64, reader: bool) {
        if !self.map.contains_key(&server) && self.map.len() >= self.cap {
            self.overflow += 1;
            return;
        }
        let e = self.map.entry(server).or_default();
        e.channel = channel;
        e.sessions += 1;
        e.readers += reader as u64;
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Reading sessions over all servers (a session in two servers counts twice).
    pub fn readers(&self) -> u64 {
        self.map.values().map(|s| s.readers).sum()
    }

    /// The `n` servers with the most readers (ties: the lower id first),
    /// in id order.
    pub fn pick(&self, n: usize) -> Vec<Target> {
        let mut v: Vec<Target> = self
            .map
            .iter()
            .map(|(&server, s)| Target {
                server,
                channel: s.channel,
                readers: s.readers,
            })
            .collect();
        v.sort_by(|a, b| b.readers.cmp(&a.readers).then(a.server.cmp(&b.server)));
        v.truncate(n);
        v.sort_by_key(|t| t.server);
        v
    }
}

/// Takes the targets' readers from `set` again (the same servers).
pub fn recount(set: &Mutex<ServerSet>, targets: &mut [Target]) {
    let s = set.lock().unwrap();
    for t in targets {
        if let Some(seen) = s.map.get(&t.server) {
            t.readers = seen.readers;
        }
    }
}

/// Events that target `i` of `n` received when the producer sent `sent`
/// round-robin in bursts of `burst` (event k to target (k / burst) % n).
pub fn round_robin_share(sent: u64, burst: u64, n: usize, i: usize) -> u64 {
    if n == 0 || i >= n {
        return 0;
    }
    let (n, i, b) = (n as u64, i as u64, burst.max(1));
    let round = n * b;
    let whole = sent / round * b;
    // The last, partial round: target i's burst spans [i*b, (i+1)*b).
    let left = sent % round;
    whole + left.saturating_sub(i * b).min(b)
}

/// Deliveries a perfect run makes: each target's events times its readers.
pub fn expected_deliveries(sent: u64, burst: u64, targets: &[Target]) -> u64 {
    targets
        .iter()
        .enumerate()
        .map(|(i, t)| round_robin_share(sent, burst, targets.len(), i) * t.readers)
        .sum()
}

/// Waits (up to `timeout`) until `want` distinct servers are in `set` and
/// their GUILD_CREATEs reached at least `readers` reading sessions (the
/// GUILD_CREATE follows READY, so the last ones may still be on their
/// way); returns the `want` servers with the most readers, or why not.
pub fn wait_for(
    set: &Mutex<ServerSet>,
    want: usize,
    readers: u64,
    timeout: Duration,
) -> Result<Vec<Target>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let (n, r, over) = {
            let s = set.lock().unwrap();
            (s.len(), s.readers(), s.overflow)
        };
        if n >= want && r >= readers {
            break;
        }
        if Instant::now() >= deadline {
            if n < want {
                return Err(format!(
                    "--servers {want}: the sessions' GUILD_CREATEs named {n} distinct servers \
                     (with #general) in {:.0} s{}; give tokens of applications each installed in \
                     its own server, at least {want} of them, and at least {want} sessions \
                     (scripts/side-by-side.sh SERVERS={want} provisions them)",
                    timeout.as_secs_f64(),
                    if over > 0 {
                        format!(", {over} past the bound of {MAX_SERVERS}")
                    } else {
                        String::new()
                    }
                ));
            }
            eprintln!(
                "loadgen measure: GUILD_CREATEs of {r} reading sessions seen, {readers} READY; \
                 counting the {r}"
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(set.lock().unwrap().pick(want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_counts_readers_and_stays_bounded() {
        let mut s = ServerSet::with_cap(2);
        s.add(10, 11, true);
        s.add(10, 11, true);
        s.add(10, 11, false);
        s.add(20, 21, true);
        s.add(30, 31, true); // full: not kept
        s.add(20, 21, true);
        assert_eq!(s.len(), 2);
        assert_eq!(s.overflow, 1);
        assert_eq!(s.readers(), 4);
        assert_eq!(
            s.pick(5),
            vec![
                Target {
                    server: 10,
                    channel: 11,
                    readers: 2
                },
                Target {
                    server: 20,
                    channel: 21,
                    readers: 2
                }
            ]
        );
        assert_eq!(s.map[&10].sessions, 3);
    }

    #[test]
    fn pick_takes_the_most_read_servers_in_id_order() {
        let mut s = ServerSet::default();
        for (server, readers) in [(5, 1), (3, 4), (9, 4), (1, 2)] {
            for _ in 0..readers {
                s.add(server, server + 100, true);
            }
        }
        let ids: Vec<u64> = s.pick(3).iter().map(|t| t.server).collect();
        assert_eq!(ids, vec![1, 3, 9]);
        assert_eq!(s.pick(0), vec![]);
    }

    #[test]
    fn wait_for_fails_clearly_with_too_few_servers() {
        let set = Mutex::new(ServerSet::default());
        set.lock().unwrap().add(1, 2, true);
        let e = wait_for(&set, 2, 1, Duration::from_millis(50)).unwrap_err();
        assert!(e.contains("1 distinct servers"), "{e}");
        set.lock().unwrap().add(3, 4, true);
        let t = wait_for(&set, 2, 2, Duration::from_millis(50)).unwrap();
        assert_eq!(t.len(), 2);
        // Fewer readers than READY sessions: counted as seen, after the wait.
        let mut t = wait_for(&set, 2, 5, Duration::from_millis(30)).unwrap();
        assert_eq!(t.len(), 2);
        set.lock().unwrap().add(3, 4, true);
        recount(&set, &mut t);
        assert_eq!(t.iter().map(|t| t.readers).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn round_robin_shares_add_up() {
        assert_eq!(round_robin_share(10, 1, 4, 0), 3);
        assert_eq!(round_robin_share(10, 1, 4, 1), 3);
        assert_eq!(round_robin_share(10, 1, 4, 2), 2);
        assert_eq!(round_robin_share(10, 1, 4, 3), 2);
        assert_eq!(round_robin_share(10, 1, 4, 4), 0);
        assert_eq!(round_robin_share(10, 1, 0, 0), 0);
        // Bursts of 3 over 2 targets: 0 0 0 1 1 1 0 0 0 1 | 1 ...
        assert_eq!(round_robin_share(10, 3, 2, 0), 6);
        assert_eq!(round_robin_share(10, 3, 2, 1), 4);
        for burst in [1, 2, 5, 7] {
            for (sent, n) in [(0, 3), (7, 1), (1_000_003, 200), (11, 4)] {
                let sum: u64 = (0..n).map(|i| round_robin_share(sent, burst, n, i)).sum();
                assert_eq!(sum, sent, "burst {burst} sent {sent} n {n}");
            }
        }
    }

    #[test]
    fn expected_is_events_times_readers_per_server() {
        let t = |server, readers| Target {
            server,
            channel: server + 1,
            readers,
        };
        // 7 events over 3 servers: 3, 2, 2.
        assert_eq!(
            expected_deliveries(7, 1, &[t(1, 50), t(2, 49), t(3, 50)]),
            150 + 98 + 100
        );
        assert_eq!(expected_deliveries(9, 1, &[t(1, 10)]), 90);
        assert_eq!(expected_deliveries(9, 1, &[]), 0);
    }
}
