//! The counters thread: one per node, the only place that speaks to Redis
//! for the REST rate limits (`api::shared` has the arithmetic, and the
//! picture). Workers hand it one `Delta` per admission through a bounded
//! queue and never wait for it; it answers each with
//! `ToWorker::RestCounters` after a round.
//!
//! - A round every `redis_sync_ms / 2`: drain the queue into the tracker,
//!   then ONE pipelined exchange with Redis: this node's heartbeat (a
//!   sorted set of node ids scored by Unix ms; N = the ids seen within
//!   `NODE_TTL_MS`), then per tracked window `INCRBY key delta` +
//!   `PEXPIREAT key (end + KEY_GRACE_MS)` if it has new admissions, `GET
//!   key` if not. Windows this node never touched are not read.
//! - Deadline: a connect, and a whole round, each within
//!   `redis_timeout_ms`. A failure (refused, reset, a Redis error reply,
//!   the deadline) drops the connection, puts the node in fallback (counted
//!   once per outage in `fallbacks`, every failed attempt in `errors`), and
//!   keeps the round's deltas for a later round; reconnects back off from
//!   one round to 1 s.
//! - Fallback: `Sharing::Fallback { nodes }`, N = `rest.nodes` if set, else
//!   the last heartbeat count read (0 = never read: the full limit).
//! - Bounds: `api::shared::{OUTBOX, MAX_TRACKED, MAX_SYNC_KEYS}`; answers
//!   go through the workers' bounded inboxes (a full inbox drops one, the
//!   next round sends the state again).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::resp::{command, Conn, Reply, Target};
use crate::api::shared::{Answer, Delta, Push, Sharing, Tracker, MAX_SYNC_KEYS, OUTBOX};
use crate::worker::mail::{ToWorker, WorkerHandle};

/// The sorted set of live nodes.
const NODES_KEY: &str = "gatewayd:nodes";
/// A node whose heartbeat is older than this is not counted in N.
pub const NODE_TTL_MS: u64 = 3_000;
/// A window's key outlives the window by this (clock skew between nodes).
pub const KEY_GRACE_MS: u64 = 10_000;
/// The longest wait between reconnect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What the counters thread did, for /metrics (all zero with Redis off).
#[derive(Default)]
pub struct RedisStats {
    /// 1 while the last round succeeded.
    pub up: AtomicU64,
    /// Nodes sharing the limits, as last known (heartbeats or rest.nodes).
    pub nodes: AtomicU64,
    pub rounds: AtomicU64,
    /// Connects and rounds that failed or passed their deadline.
    pub errors: AtomicU64,
    /// Times the node fell back to local limits (one per outage).
    pub fallbacks: AtomicU64,
    /// Admissions not shared: the workers' queue was full (`Outbox`), or
    /// the tracker held `MAX_TRACKED` windows.
    pub unshared: Arc<AtomicU64>,
    pub untracked: AtomicU64,
}

#[derive(Clone, Debug)]
pub struct CountersConfig {
    pub url: String,
    pub sync_ms: u64,
    pub timeout_ms: u64,
    /// `rest.nodes` (0: learn N from the heartbeats).
    pub nodes: u32,
    /// This node's id in the heartbeat set.
    pub node_id: String,
}

pub fn start(
    cfg: CountersConfig,
    deltas: Receiver<Delta>,
    workers: Arc<[WorkerHandle]>,
    stats: Arc<RedisStats>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let target = Target::parse(&cfg.url)?;
    std::thread::Builder::new()
        .name("counters".into())
        .spawn(move || Counters::new(cfg, target, workers, stats).run(&deltas, &stop))
        .map_err(|e| format!("starting the counters thread: {e}"))
}

struct Counters {
    cfg: CountersConfig,
    target: Target,
    workers: Arc<[WorkerHandle]>,
    stats: Arc<RedisStats>,
    tracker: Tracker,
    conn: Option<Conn>,
    sharing: Sharing,
    /// What each worker was last sent, and rounds since (a resend now and then).
    sent: Vec<Option<Sharing>>,
    rounds: u64,
    retry_at: Instant,
    backoff: Duration,
    heard_nodes: u32,
}

fn unix_ms() -> u64 {
    registry::snowflake::unix_ms_now()
}

impl Counters {
    fn new(
        cfg: CountersConfig,
        target: Target,
        workers: Arc<[WorkerHandle]>,
        stats: Arc<RedisStats>,
    ) -> Counters {
        Counters {
            sent: vec![None; workers.len()],
            cfg,
            target,
            workers,
            stats,
            tracker: Tracker::default(),
            conn: None,
            sharing: Sharing::Shared,
            rounds: 0,
            retry_at: Instant::now(),
            backoff: Duration::ZERO,
            heard_nodes: 0,
        }
    }

    fn tick(&self) -> Duration {
        Duration::from_millis((self.cfg.sync_ms / 2).max(1))
    }

    fn run(mut self, deltas: &Receiver<Delta>, stop: &AtomicBool) {
        let mut next = Instant::now();
        while !stop.load(Relaxed) {
            for d in deltas.try_iter().take(OUTBOX) {
                self.tracker.add(d);
            }
            self.round();
            next += self.tick();
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now; // a late round: the next one a full tick later
            }
        }
        // Leave the heartbeat set at once, so the others' N drops now.
        let deadline = Instant::now() + self.timeout();
        if let Some(c) = self.conn.as_mut() {
            let mut cmd = Vec::new();
            command(
                &mut cmd,
                &[b"ZREM", NODES_KEY.as_bytes(), self.cfg.node_id.as_bytes()],
            );
            let _ = c.pipeline(&cmd, 1, deadline);
        }
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.cfg.timeout_ms)
    }

    fn round(&mut self) {
        let now_ms = unix_ms();
        let plan = self.tracker.round(now_ms, MAX_SYNC_KEYS);
        self.stats.untracked.store(self.tracker.untracked, Relaxed);
        let result = if self.conn.is_none() && Instant::now() < self.retry_at {
            None // backing off: still in fallback
        } else {
            Some(self.exchange(&plan, now_ms))
        };
        let mut answers: Vec<Answer> = (0..self.workers.len()).map(|_| Answer::default()).collect();
        match result {
            Some(Ok((live, totals))) => {
                self.stats.rounds.fetch_add(1, Relaxed);
                self.backoff = Duration::ZERO;
                self.heard_nodes = live;
                if self.sharing != Sharing::Shared {
                    tracing::info!(
                        nodes = live,
                        "redis answers again: rate-limit counters shared"
                    );
                }
                self.sharing = Sharing::Shared;
                self.stats.up.store(1, Relaxed);
                for (p, total) in plan.iter().zip(totals) {
                    if let Some((w, r)) = self.tracker.settled(&p.key, total) {
                        if let Some(a) = answers.get_mut(w as usize) {
                            a.remote.push(r);
                        }
                    }
                }
            }
            Some(Err(e)) => {
                self.conn = None;
                self.tracker.failed();
                self.stats.errors.fetch_add(1, Relaxed);
                self.backoff = (self.backoff * 2).clamp(self.tick(), MAX_BACKOFF);
                self.retry_at = Instant::now() + self.backoff;
                if self.sharing == Sharing::Shared {
                    self.stats.fallbacks.fetch_add(1, Relaxed);
                    tracing::warn!(error = %e, nodes = self.nodes(), "redis unreachable: rate limits fall back to this node's share");
                }
                self.sharing = Sharing::Fallback {
                    nodes: self.nodes(),
                };
                self.stats.up.store(0, Relaxed);
            }
            None => self.tracker.failed(),
        }
        self.stats.nodes.store(self.nodes() as u64, Relaxed);
        self.rounds += 1;
        for (w, a) in answers.into_iter().enumerate() {
            let changed = self.sent[w] != Some(self.sharing);
            if a.remote.is_empty() && !changed && !self.rounds.is_multiple_of(20) {
                continue;
            }
            let a = Answer {
                sharing: self.sharing,
                ..a
            };
            if self.workers[w].send(ToWorker::RestCounters(Box::new(a))) {
                self.sent[w] = Some(self.sharing);
            }
        }
    }

    /// N for the fallback share: configured, else last heard (0: unknown).
    fn nodes(&self) -> u32 {
        if self.cfg.nodes > 0 {
            self.cfg.nodes
        } else {
            self.heard_nodes
        }
    }

    /// One round with Redis: (live nodes, the total of each key of `plan`).
    fn exchange(&mut self, plan: &[Push], now_ms: u64) -> std::io::Result<(u32, Vec<u64>)> {
        let deadline = Instant::now() + self.timeout();
        if self.conn.is_none() {
            self.conn = Some(Conn::connect(&self.target, deadline)?);
        }
        let mut cmds = Vec::with_capacity(64 + plan.len() * 96);
        let id = self.cfg.node_id.as_bytes();
        let nodes = NODES_KEY.as_bytes();
        command(
            &mut cmds,
            &[b"ZADD", nodes, now_ms.to_string().as_bytes(), id],
        );
        let stale = format!("({}", now_ms.saturating_sub(NODE_TTL_MS));
        command(
            &mut cmds,
            &[b"ZREMRANGEBYSCORE", nodes, b"-inf", stale.as_bytes()],
        );
        command(
            &mut cmds,
            &[b"PEXPIRE", nodes, (NODE_TTL_MS * 10).to_string().as_bytes()],
        );
        command(&mut cmds, &[b"ZCARD", nodes]);
        let mut count = 4;
        for p in plan {
            let key = p.key.redis_key();
            if p.delta > 0 {
                command(
                    &mut cmds,
                    &[b"INCRBY", key.as_bytes(), p.delta.to_string().as_bytes()],
                );
                let at = (p.end_ms + KEY_GRACE_MS).to_string();
                command(&mut cmds, &[b"PEXPIREAT", key.as_bytes(), at.as_bytes()]);
                count += 2;
            } else {
                command(&mut cmds, &[b"GET", key.as_bytes()]);
                count += 1;
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        let replies = conn.pipeline(&cmds, count, deadline)?;
        let bad = |r: &Reply| std::io::Error::other(format!("redis answered {r:?}"));
        let mut it = replies.iter();
        let mut next = || {
            it.next()
                .ok_or_else(|| std::io::Error::other("redis: a reply short"))
        };
        for _ in 0..3 {
            let r = next()?;
            if let Reply::Error(_) = r {
                return Err(bad(r));
            }
        }
        let r = next()?;
        let live = r.as_count().ok_or_else(|| bad(r))?;
        let mut totals = Vec::with_capacity(plan.len());
        for p in plan {
            let r = next()?;
            totals.push(r.as_count().ok_or_else(|| bad(r))?);
            if p.delta > 0 {
                let r = next()?;
                r.as_count().ok_or_else(|| bad(r))?;
            }
        }
        Ok((live.min(u32::MAX as u64) as u32, totals))
    }
}
