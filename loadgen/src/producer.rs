//! The open-loop producer: MESSAGE_CREATE records to every node's ingest
//! port on a fixed schedule that the system under test cannot slow down.
//!
//! Each event's `d` starts with `"lg":[scheduled_ns, event, server, channel]`
//! (scheduled time on the process clock, indices into the world), which is
//! what the fleet checks and measures latency from. With fixed `targets`
//! (servers loadgen did not generate, e.g. the side-by-side benchmark's,
//! taken round-robin) it starts with `"ts_ns":scheduled_ns` instead: the fleet takes the latency
//! from it and nothing else, and a node that keeps only the fields it knows
//! (bench/conventional) keeps it first. Latency is taken from the
//! *scheduled* commit time, not from when the write happened: if the producer
//! or a node falls behind, the delay shows up in the latency of every event
//! it held up instead of being silently omitted (coordinated-omission
//! correction for an open-loop schedule). Writes are non-blocking with a
//! bounded backlog per node; a backlog past the bound drops that node's
//! connection (counted), it never stalls the schedule for the others.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::{now_ns, unix_ns};
use crate::world::{Rng, World, GUILD_MESSAGES, PRIVATE, PUBLIC};

#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    Uniform,
    /// Zipf with this exponent over servers (server 0 the most popular).
    Zipf(f64),
}

impl std::str::FromStr for Dist {
    type Err = String;
    fn from_str(s: &str) -> Result<Dist, String> {
        match s.split_once(':') {
            None if s == "uniform" => Ok(Dist::Uniform),
            None if s == "zipf" => Ok(Dist::Zipf(1.0)),
            Some(("zipf", e)) => e
                .parse()
                .map(Dist::Zipf)
                .map_err(|_| format!("bad Zipf exponent {e:?}")),
            _ => Err(format!(
                "unknown distribution {s:?}: uniform, zipf or zipf:EXPONENT"
            )),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ProducerConfig {
    pub ingest: Vec<SocketAddr>,
    /// Background events per second over all servers.
    pub rate: f64,
    pub dist: Dist,
    /// One hot server at its own rate (events/s), on top of the background.
    pub hot: Option<(u32, f64)>,
    /// Approximate size of `d` in bytes.
    pub payload: usize,
    /// Share of events in the private channel.
    pub private_share: f64,
    /// Bound on unsent bytes per node before its connection is dropped.
    pub max_backlog: usize,
    /// Non-empty: every event to one of these (server id, channel id),
    /// round-robin (event k to `targets[k % len]`, so each gets `rate /
    /// len` events/s), stamped `"ts_ns"`, instead of the world's servers
    /// (`dist`, `hot`, `private_share` unused).
    pub targets: Vec<(u64, u64)>,
    /// With `targets`: events in bursts of this many, back to back (one
    /// scheduled time) to one target, then the next; the rate is unchanged.
    pub burst: u64,
    /// Stop after this many events (then `ProducerStats::done` is set once
    /// they are all handed to the sockets).
    pub limit: Option<u64>,
    /// Also (or only, with `ingest` empty) produce every record to this
    /// Kafka-protocol topic: (bootstrap servers, topic). Each message value
    /// is one framed record, keyed by its server id (the node's format).
    pub kafka: Option<(String, String)>,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            ingest: Vec::new(),
            rate: 100.0,
            dist: Dist::Uniform,
            hot: None,
            payload: 600,
            private_share: 0.2,
            max_backlog: 64 << 20,
            targets: Vec::new(),
            burst: 1,
            limit: None,
            kafka: None,
        }
    }
}

#[derive(Default)]
pub struct ProducerStats {
    pub events: AtomicU64,
    /// Sum of entitled recipients of every event produced (what a perfect
    /// run delivers).
    pub expected_deliveries: AtomicU64,
    pub hot_events: AtomicU64,
    /// Largest delay between an event's scheduled time and its write.
    pub max_lag_ns: AtomicU64,
    pub bytes: AtomicU64,
    pub node_disconnects: AtomicU64,
    pub dropped_bytes: AtomicU64,
    /// Records handed to the Kafka client, and those it could not queue or
    /// the broker did not acknowledge.
    pub kafka_sent: AtomicU64,
    pub kafka_failed: AtomicU64,
    /// Events in server `watch_server` after `watch_from_ns`.
    pub watch_server: AtomicU64,
    pub watch_from_ns: AtomicU64,
    pub watch_events: AtomicU64,
    /// Scheduled time of the last event in the watched server.
    pub watch_last_sched_ns: AtomicU64,
    /// Bytes of the last event's `d`.
    pub d_bytes: AtomicU64,
    /// `limit` events produced and handed to the sockets.
    pub done: AtomicBool,
}

pub struct Producer {
    pub stats: Arc<ProducerStats>,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    /// New ingest addresses (a node restarted on new ports), taken by the
    /// producer thread before its next batch.
    retarget: Arc<Mutex<Option<Vec<SocketAddr>>>>,
    handle: Option<JoinHandle<()>>,
    pub errors: Arc<Mutex<Vec<String>>>,
}

struct Conn {
    addr: SocketAddr,
    sock: Option<TcpStream>,
    backlog: Vec<u8>,
    retry_at: u64,
}

impl Producer {
    pub fn start(world: Arc<World>, cfg: ProducerConfig) -> Producer {
        let stats = Arc::new(ProducerStats {
            watch_server: AtomicU64::new(u64::MAX),
            ..Default::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let retarget = Arc::new(Mutex::new(None));
        let (st, sp, pa, er, rt) = (
            stats.clone(),
            stop.clone(),
            paused.clone(),
            errors.clone(),
            retarget.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("producer".into())
            .spawn(move || run(world, cfg, st, sp, pa, er, rt))
            .expect("spawn producer");
        Producer {
            stats,
            stop,
            paused,
            retarget,
            handle: Some(handle),
            errors,
        }
    }

    /// Paused: the schedule moves on but nothing is produced (no catch-up).
    pub fn pause(&self, on: bool) {
        self.paused.store(on, Relaxed);
    }

    /// Waits until `limit` events are out (true) or `timeout` (false).
    pub fn wait_done(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while !self.stats.done.load(Relaxed) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    /// Write to these ingest addresses from the next batch on (same
    /// order as at start; a changed address gets a new connection, the
    /// others keep theirs, so every node keeps receiving the same records
    /// in the same order).
    pub fn set_ingest(&self, ingest: Vec<SocketAddr>) {
        *self.retarget.lock().unwrap() = Some(ingest);
    }

    pub fn watch(&self, server: u32) {
        self.stats.watch_events.store(0, Relaxed);
        self.stats.watch_from_ns.store(now_ns(), Relaxed);
        self.stats.watch_server.store(server as u64, Relaxed);
    }

    pub fn stop(mut self) -> Arc<ProducerStats> {
        self.stop.store(true, Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.stats.clone()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn zipf_cdf(n: usize, s: f64) -> Vec<f64> {
    let mut c = Vec::with_capacity(n);
    let mut acc = 0.0;
    for k in 1..=n {
        acc += 1.0 / (k as f64).powf(s);
        c.push(acc);
    }
    for v in &mut c {
        *v /= acc;
    }
    c
}

fn run(
    world: Arc<World>,
    cfg: ProducerConfig,
    st: Arc<ProducerStats>,
    stop: Arc<AtomicBool>,
    paused: Arc<AtomicBool>,
    errors: Arc<Mutex<Vec<String>>>,
    retarget: Arc<Mutex<Option<Vec<SocketAddr>>>>,
) {
    let mut conns: Vec<Conn> = cfg
        .ingest
        .iter()
        .map(|&addr| Conn {
            addr,
            sock: None,
            backlog: Vec::new(),
            retry_at: 0,
        })
        .collect();
    // Connect before the schedule starts, so the first events are not lost.
    for c in &mut conns {
        if let Ok(s) = TcpStream::connect_timeout(&c.addr, Duration::from_secs(2)) {
            let _ = s.set_nodelay(true);
            let _ = s.set_nonblocking(true);
            c.sock = Some(s);
        }
    }
    let cdf = match cfg.dist {
        Dist::Zipf(s) => Some(zipf_cdf(world.servers.len(), s)),
        Dist::Uniform => None,
    };
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let start = now_ns();
    let bg_period = if cfg.rate > 0.0 {
        1e9 / cfg.rate
    } else {
        f64::INFINITY
    };
    let hot_period = cfg.hot.map(|(_, r)| 1e9 / r).unwrap_or(f64::INFINITY);
    let (mut bg_n, mut hot_n) = (0u64, 0u64);
    let mut d = Vec::with_capacity(cfg.payload + 512);
    let mut batch = Vec::with_capacity(1 << 20);
    let mut event = 0u64;
    let pad: String = "x".repeat(cfg.payload);
    let limit = cfg.limit.unwrap_or(u64::MAX);
    let kafka =
        cfg.kafka
            .as_ref()
            .and_then(|(brokers, topic)| match KafkaSink::new(brokers, topic) {
                Ok(k) => Some(k),
                Err(e) => {
                    errors.lock().unwrap().push(e);
                    None
                }
            });
    while !stop.load(Relaxed) {
        if let Some(to) = retarget.try_lock().ok().and_then(|mut g| g.take()) {
            retarget_conns(&mut conns, to);
        }
        let now = now_ns();
        batch.clear();
        while bg_n + hot_n < limit {
            // A burst's events share its first event's scheduled time.
            let burst = if cfg.targets.is_empty() {
                1
            } else {
                cfg.burst.max(1)
            };
            let next_bg = start as f64 + (bg_n / burst * burst) as f64 * bg_period;
            let next_hot = start as f64 + hot_n as f64 * hot_period;
            let (sched, hot) = if next_hot <= next_bg {
                (next_hot, true)
            } else {
                (next_bg, false)
            };
            if sched > now as f64 {
                break;
            }
            if hot {
                hot_n += 1;
            } else {
                bg_n += 1;
            }
            if paused.load(Relaxed) {
                continue;
            }
            let sched = sched as u64;
            event += 1;
            if !cfg.targets.is_empty() {
                let (server_id, channel_id) =
                    cfg.targets[((event - 1) / burst % cfg.targets.len() as u64) as usize];
                d.clear();
                let _ = write!(d, r#"{{"ts_ns":{sched},"#);
                message_fields(&mut d, event, server_id, channel_id, cfg.payload, &pad);
                st.d_bytes.store(d.len() as u64, Relaxed);
                ingest::encode_parts(
                    "MESSAGE_CREATE",
                    server_id,
                    channel_id,
                    GUILD_MESSAGES,
                    0,
                    unix_ns(),
                    ingest::FLAG_HAS_CONTENT,
                    &[],
                    &d,
                    &mut batch,
                );
                st.events.fetch_add(1, Relaxed);
                st.max_lag_ns.fetch_max(now.saturating_sub(sched), Relaxed);
                continue;
            }
            let server = match (hot, cfg.hot, &cdf) {
                (true, Some((s, _)), _) => s,
                (_, _, Some(c)) => {
                    let u = rng.unit();
                    c.partition_point(|&x| x < u).min(c.len() - 1) as u32
                }
                _ => rng.below(world.servers.len() as u64) as u32,
            };
            let chan = if rng.unit() < cfg.private_share {
                PRIVATE
            } else {
                PUBLIC
            };
            let srv = &world.servers[server as usize];
            d.clear();
            let _ = write!(d, r#"{{"lg":[{sched},{event},{server},{chan}],"#);
            message_fields(
                &mut d,
                event,
                srv.id,
                srv.channels[chan as usize],
                cfg.payload,
                &pad,
            );
            st.d_bytes.store(d.len() as u64, Relaxed);
            let at = batch.len();
            let len = ingest::encode_parts(
                "MESSAGE_CREATE",
                srv.id,
                srv.channels[chan as usize],
                GUILD_MESSAGES,
                0,
                unix_ns(),
                ingest::FLAG_HAS_CONTENT,
                &[],
                &d,
                &mut batch,
            );
            let _ = len;
            if let Some(k) = &kafka {
                k.send(srv.id, &batch[at..], &st);
            }
            st.events.fetch_add(1, Relaxed);
            st.expected_deliveries.fetch_add(
                world.recipients[server as usize][chan as usize] as u64,
                Relaxed,
            );
            if hot {
                st.hot_events.fetch_add(1, Relaxed);
            }
            if st.watch_server.load(Relaxed) == server as u64 {
                st.watch_events.fetch_add(1, Relaxed);
                st.watch_last_sched_ns.store(sched, Relaxed);
            }
            st.max_lag_ns.fetch_max(now.saturating_sub(sched), Relaxed);
        }
        if !batch.is_empty() {
            st.bytes.fetch_add(batch.len() as u64, Relaxed);
        }
        for c in &mut conns {
            pump(c, &batch, &cfg, &st, &errors, now);
        }
        if stop.load(Relaxed) {
            break;
        }
        if bg_n + hot_n >= limit
            && !st.done.load(Relaxed)
            && conns
                .iter()
                .all(|c| c.sock.is_none() || c.backlog.is_empty())
        {
            st.done.store(true, Relaxed);
        }
        if bg_n + hot_n >= limit {
            // Nothing more to schedule: only backlogs to drain.
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // Sleep to the next scheduled event, at most 1 ms (so backlogs drain).
        let next = (start as f64 + (bg_n as f64 * bg_period).min(hot_n as f64 * hot_period)) as u64;
        let now = now_ns();
        if next > now {
            std::thread::sleep(Duration::from_nanos((next - now).min(1_000_000)));
        }
    }
    if let Some(k) = &kafka {
        k.flush(&st);
    }
    // Hand over what is still queued (bounded wait), so the last events of
    // a run are not lost in the close.
    for c in &mut conns {
        if let Some(s) = c.sock.as_mut() {
            let _ = s.set_nonblocking(false);
            let _ = s.set_write_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(&c.backlog);
            let _ = s.flush();
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
}

/// The Kafka side of the producer: librdkafka's producer, acks from the
/// leader, records in the order given (one in flight per connection, so a
/// retry cannot reorder them).
struct KafkaSink {
    p: rdkafka::producer::BaseProducer,
    topic: String,
}

impl KafkaSink {
    fn new(brokers: &str, topic: &str) -> Result<KafkaSink, String> {
        let p = rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("linger.ms", "1")
            .set("enable.idempotence", "false")
            .set("max.in.flight.requests.per.connection", "1")
            .set("queue.buffering.max.messages", "1000000")
            .create()
            .map_err(|e| format!("Kafka producer for {brokers}: {e}"))?;
        Ok(KafkaSink {
            p,
            topic: topic.to_string(),
        })
    }

    fn send(&self, server: u64, value: &[u8], st: &ProducerStats) {
        use rdkafka::producer::BaseRecord;
        let key = server.to_string();
        let mut rec = BaseRecord::to(&self.topic).key(&key).payload(value);
        for _ in 0..100 {
            match self.p.send(rec) {
                Ok(()) => {
                    st.kafka_sent.fetch_add(1, Relaxed);
                    self.p.poll(Duration::ZERO);
                    return;
                }
                Err((_, r)) => {
                    // Queue full: let the client deliver, then retry.
                    rec = r;
                    self.p.poll(Duration::from_millis(10));
                }
            }
        }
        st.kafka_failed.fetch_add(1, Relaxed);
    }

    fn flush(&self, st: &ProducerStats) {
        use rdkafka::producer::Producer as _;
        if self.p.flush(Duration::from_secs(10)).is_err() {
            st.kafka_failed
                .fetch_add(self.p.in_flight_count().max(0) as u64, Relaxed);
        }
    }
}

fn retarget_conns(conns: &mut Vec<Conn>, to: Vec<SocketAddr>) {
    conns.truncate(to.len());
    for (k, addr) in to.into_iter().enumerate() {
        match conns.get_mut(k) {
            Some(c) if c.addr == addr => {}
            Some(c) => {
                *c = Conn {
                    addr,
                    sock: None,
                    backlog: Vec::new(),
                    retry_at: 0,
                }
            }
            None => conns.push(Conn {
                addr,
                sock: None,
                backlog: Vec::new(),
                retry_at: 0,
            }),
        }
    }
}

/// The rest of a MESSAGE_CREATE's `d` after its stamp: `content` padded
/// with `x` so that `d` is about `payload` bytes.
fn message_fields(
    d: &mut Vec<u8>,
    event: u64,
    server: u64,
    channel: u64,
    payload: usize,
    pad: &str,
) {
    let _ = write!(
        d,
        r#""id":"{event}","type":0,"channel_id":"{channel}","guild_id":"{server}","author":{{"id":"5","username":"loadgen","discriminator":"0","avatar":null,"bot":false}},"timestamp":"2026-11-30T00:00:00.000000+00:00","tts":false,"mention_everyone":false,"mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false,"content":""#
    );
    let room = payload.saturating_sub(d.len() + 2).max(1);
    d.extend_from_slice(&pad.as_bytes()[..room.min(pad.len())]);
    d.extend_from_slice(b"\"}");
}

fn pump(
    c: &mut Conn,
    batch: &[u8],
    cfg: &ProducerConfig,
    st: &ProducerStats,
    errors: &Mutex<Vec<String>>,
    now: u64,
) {
    if c.sock.is_none() {
        if !batch.is_empty() {
            // A node that is down misses these events (as it would miss them
            // from the chat service's stream while dead).
            st.dropped_bytes.fetch_add(batch.len() as u64, Relaxed);
        }
        if now < c.retry_at {
            return;
        }
        match TcpStream::connect_timeout(&c.addr, Duration::from_millis(200)) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_nonblocking(true);
                c.sock = Some(s);
                c.backlog.clear();
            }
            Err(_) => {
                c.retry_at = now + 1_000_000_000;
            }
        }
        return;
    }
    c.backlog.extend_from_slice(batch);
    let sock = c.sock.as_mut().unwrap();
    let mut off = 0;
    while off < c.backlog.len() {
        match sock.write(&c.backlog[off..]) {
            Ok(0) => break,
            Ok(n) => off += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let mut er = errors.lock().unwrap();
                if er.len() < 10 {
                    er.push(format!("ingest {}: {e}", c.addr));
                }
                st.node_disconnects.fetch_add(1, Relaxed);
                c.sock = None;
                c.retry_at = now + 1_000_000_000;
                c.backlog.clear();
                return;
            }
        }
    }
    c.backlog.drain(..off);
    if c.backlog.len() > cfg.max_backlog {
        st.node_disconnects.fetch_add(1, Relaxed);
        st.dropped_bytes.fetch_add(c.backlog.len() as u64, Relaxed);
        c.sock = None;
        c.backlog.clear();
        c.retry_at = now + 1_000_000_000;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_is_a_cdf_with_a_head() {
        let c = zipf_cdf(100, 1.0);
        assert!((c[99] - 1.0).abs() < 1e-9);
        assert!(c.windows(2).all(|w| w[0] <= w[1]));
        assert!(c[0] > 0.15, "server 0 is the most popular: {}", c[0]);
    }

    /// Runs a producer with `cfg` against a listener of its own until it has
    /// sent `cfg.limit` events; the events it sent and the bytes written.
    fn produce(cfg: ProducerConfig) -> (u64, u64, String) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut s, &mut buf).unwrap();
            buf
        });
        let p = Producer::start(
            Arc::new(World::default()),
            ProducerConfig {
                ingest: vec![addr],
                ..cfg
            },
        );
        assert!(p.wait_done(Duration::from_secs(10)));
        let st = p.stop();
        let (events, d) = (st.events.load(Relaxed), st.d_bytes.load(Relaxed));
        let buf = reader.join().unwrap();
        (events, d, String::from_utf8_lossy(&buf).into_owned())
    }

    /// The servers the events went to, in order (two-digit ids).
    fn guild_order(text: &str) -> Vec<&str> {
        text.match_indices(r#""guild_id":""#)
            .map(|(i, m)| &text[i + m.len()..i + m.len() + 2])
            .collect()
    }

    #[test]
    fn a_fixed_target_stamps_ts_ns_and_stops_at_the_limit() {
        let (events, d, text) = produce(ProducerConfig {
            rate: 2000.0,
            payload: 400,
            targets: vec![(77, 6)],
            limit: Some(20),
            ..ProducerConfig::default()
        });
        assert_eq!(events, 20);
        assert!((395..=405).contains(&d), "d is {d} bytes");
        assert_eq!(text.matches(r#"{"ts_ns":"#).count(), 20);
        assert_eq!(text.matches(r#""guild_id":"77""#).count(), 20);
    }

    #[test]
    fn fixed_targets_are_taken_round_robin() {
        let (events, _, text) = produce(ProducerConfig {
            rate: 3000.0,
            payload: 100,
            targets: vec![(10, 11), (20, 21), (30, 31)],
            limit: Some(7),
            ..ProducerConfig::default()
        });
        assert_eq!(events, 7);
        assert_eq!(
            guild_order(&text),
            ["10", "20", "30", "10", "20", "30", "10"]
        );
        assert_eq!(text.matches(r#""channel_id":"21""#).count(), 2);
    }

    #[test]
    fn bursts_go_to_one_target_at_one_scheduled_time() {
        let (events, _, text) = produce(ProducerConfig {
            rate: 3000.0,
            payload: 100,
            targets: vec![(10, 11), (20, 21)],
            burst: 3,
            limit: Some(8),
            ..ProducerConfig::default()
        });
        assert_eq!(events, 8);
        assert_eq!(
            guild_order(&text),
            ["10", "10", "10", "20", "20", "20", "10", "10"]
        );
        // The events of a burst share its first event's scheduled time.
        let ts: Vec<&str> = text
            .match_indices(r#"{"ts_ns":"#)
            .map(|(i, m)| {
                let rest = &text[i + m.len()..];
                &rest[..rest.find(',').unwrap()]
            })
            .collect();
        assert_eq!(ts.len(), 8);
        assert!(ts[0] == ts[1] && ts[1] == ts[2], "{ts:?}");
        assert!(ts[3] == ts[4] && ts[4] == ts[5], "{ts:?}");
        assert_ne!(ts[2], ts[3], "{ts:?}");
    }

    #[test]
    fn dist_parses() {
        assert_eq!("uniform".parse::<Dist>().unwrap(), Dist::Uniform);
        assert_eq!("zipf:1.2".parse::<Dist>().unwrap(), Dist::Zipf(1.2));
        assert!("pareto".parse::<Dist>().is_err());
    }
}
