//! Fault drills against real servers the test owns (tests/support/services.rs):
//! PostgreSQL (the registry) and Tansu (the Kafka-protocol broker), each
//! frozen with SIGSTOP and thawed with SIGCONT, and killed with kill -9 and
//! restarted, while a real node serves a bot session and events flow.
//!
//! What each drill holds the node to (README, "The registry link" and
//! "Kafka-protocol ingest"):
//! - registry away (frozen or dead): the node declares brownout within
//!   `registry.timeout_ms` (plus the revocation poll that notices it), the
//!   existing session keeps receiving (the listener's events), a new
//!   identify gets op 9 (never a hang), and once the registry is back
//!   identifies get READY again;
//! - broker away: the existing session keeps receiving the listener's
//!   events, new identifies get READY (the registry is fine), and once the
//!   broker is back every event the broker acknowledged is delivered (at
//!   least once: after a restart some may come twice, as documented).
//!
//! Every drill prints one `DRILL` line with its figures (docs/reliability.md
//! collects them). The drills run one at a time: their timings are theirs.
//! Bounds carry slack for a busy machine; the figures say what really
//! happened.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::producer::Producer as _;
use serde_json::{json, Value};
use support::bot::{Next, Session};
use support::events::{frame_message_with_id, Producer};
use support::kafka::{create_topic, unique, Kafka};
use support::metrics::metric;
use support::node::Node;
use support::registry::Registry;
use support::services::{PgServer, Server as _, TansuServer};
use support::{intent, wait_until};

static SERIAL: Mutex<()> = Mutex::new(());

const INTENTS: u64 = intent::GUILDS | intent::GUILD_MESSAGES;
/// The node's `registry.timeout_ms` in the registry drills.
const TIMEOUT: Duration = Duration::from_millis(1000);
/// What a busy machine may add to a bound (scheduling, the poll that
/// notices a change, a scrape).
const SLACK: Duration = Duration::from_millis(1500);
/// How long each outage lasts.
const OUTAGE: Duration = Duration::from_secs(5);
/// Hello's interval in the drills: longer than any drill, so a reader that
/// never heartbeats is not a zombie.
const HEARTBEAT_MS: &str = "600000";
/// Ids of the events the listener feed sends, and of the Kafka feed's.
const LISTENER_IDS: u64 = 1_000_000;
const KAFKA_IDS: u64 = 2_000_000;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// A drill's figures, straight to stderr (the harness captures `println!`
/// of passing tests; these belong in the test command's output).
fn report(line: String) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

// ------------------------------------------------------------------ identify

#[derive(Debug)]
enum Outcome {
    /// READY, with its session id.
    Ready(String),
    /// op 9 with its `d`.
    InvalidSession(Value),
    /// Anything else (shown in the failure message).
    #[allow(dead_code)]
    Other(String),
}

/// One Identify on a new connection: READY (then its GUILD_CREATEs), op 9,
/// or whatever came instead; never waits more than 30 s.
fn try_identify(gateway: SocketAddr, token: &str) -> Outcome {
    let mut ws = support::bot::connect(gateway);
    match support::bot::read_next(&mut ws, Duration::from_secs(10)) {
        Next::Json(v) if v["op"] == 10 => {}
        other => return Outcome::Other(format!("no Hello: {other:?}")),
    }
    support::bot::send_json(
        &mut ws,
        &support::bot::identify_payload(&format!("Bot {token}"), INTENTS, None),
    );
    match support::bot::read_next(&mut ws, Duration::from_secs(30)) {
        Next::Json(v) if v["op"] == 9 => Outcome::InvalidSession(v["d"].clone()),
        Next::Json(v) if v["t"] == "READY" => {
            Outcome::Ready(v["d"]["session_id"].as_str().unwrap_or("").into())
        }
        other => Outcome::Other(format!("{other:?}")),
    }
}

// ------------------------------------------------------------------ traffic

/// A thread sending one MESSAGE_CREATE every `every` (ids from `first`).
struct Feed {
    stop: Arc<AtomicBool>,
    /// (id, when sent)
    sent: Arc<Mutex<Vec<(u64, Instant)>>>,
    thread: Option<JoinHandle<()>>,
}

impl Feed {
    fn spawn(mut send: impl FnMut(u64) + Send + 'static, first: u64, every: Duration) -> Feed {
        let stop = Arc::new(AtomicBool::new(false));
        let sent: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
        let (st, se) = (stop.clone(), sent.clone());
        let thread = std::thread::spawn(move || {
            let mut id = first;
            while !st.load(Ordering::SeqCst) {
                send(id);
                se.lock().unwrap().push((id, Instant::now()));
                id += 1;
                std::thread::sleep(every);
            }
        });
        Feed {
            stop,
            sent,
            thread: Some(thread),
        }
    }

    /// Events to the node's ingest listener.
    fn listener(ingest: SocketAddr, server: u64, channel: u64) -> Feed {
        let mut p = Producer::connect(ingest);
        Feed::spawn(
            move |id| {
                p.send(&support::events::message_event(
                    id,
                    server,
                    channel,
                    "drill",
                    &[],
                ))
            },
            LISTENER_IDS,
            Duration::from_millis(20),
        )
    }

    fn sent_between(&self, from: Instant, to: Instant) -> Vec<u64> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, t)| *t >= from && *t <= to)
            .map(|(id, _)| *id)
            .collect()
    }

    fn stop(&mut self) -> Vec<u64> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.sent
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| *id)
            .collect()
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A thread reading one session's dispatches: (message id, s, when).
struct Reader {
    stop: Arc<AtomicBool>,
    got: Arc<Mutex<Vec<(u64, u64, Instant)>>>,
    /// Set if the session ended or sent something unexpected.
    failure: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl Reader {
    fn spawn(mut s: Session) -> Reader {
        let stop = Arc::new(AtomicBool::new(false));
        let got: Arc<Mutex<Vec<(u64, u64, Instant)>>> = Arc::default();
        let failure: Arc<Mutex<Option<String>>> = Arc::default();
        let (st, g, f) = (stop.clone(), got.clone(), failure.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                match support::bot::read_next(&mut s.ws, Duration::from_millis(200)) {
                    Next::Json(v) if v["op"] == 0 && v["t"] == "MESSAGE_CREATE" => {
                        let id = v["d"]["id"].as_str().and_then(|i| i.parse().ok());
                        let seq = v["s"].as_u64().unwrap_or(0);
                        g.lock()
                            .unwrap()
                            .push((id.unwrap_or(0), seq, Instant::now()));
                    }
                    Next::Json(v) if v["op"] == 0 || v["op"] == 11 || v["op"] == 1 => {}
                    Next::Timeout => {}
                    other => {
                        *f.lock().unwrap() = Some(format!("{other:?}"));
                        return;
                    }
                }
            }
        });
        Reader {
            stop,
            got,
            failure,
            thread: Some(thread),
        }
    }

    fn ids(&self) -> Vec<u64> {
        self.got.lock().unwrap().iter().map(|g| g.0).collect()
    }

    fn received_before(&self, t: Instant) -> HashSet<u64> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.2 <= t)
            .map(|g| g.0)
            .collect()
    }

    /// When `id` first arrived.
    fn arrival(&self, id: u64) -> Option<Instant> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .find(|g| g.0 == id)
            .map(|g| g.2)
    }

    /// The first arrival after `t` of an id in `range`.
    fn first_after(&self, t: Instant, range: std::ops::Range<u64>) -> Option<Instant> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .find(|g| g.2 > t && range.contains(&g.0))
            .map(|g| g.2)
    }

    fn healthy(&self) {
        if let Some(f) = self.failure.lock().unwrap().as_ref() {
            panic!("the existing session broke: {f}");
        }
    }

    fn stop(&mut self) -> Vec<(u64, u64, Instant)> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.healthy();
        self.got.lock().unwrap().clone()
    }
}

/// `s` is contiguous (no gap, no repeat) over every dispatch received.
fn assert_contiguous(got: &[(u64, u64, Instant)]) {
    for w in got.windows(2) {
        assert_eq!(
            w[1].1,
            w[0].1 + 1,
            "sequence gap or repeat: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

/// The listener's events were all delivered exactly once, in order.
fn assert_listener_exact(got: &[(u64, u64, Instant)], sent: &[u64]) {
    let listener: Vec<u64> = got
        .iter()
        .map(|g| g.0)
        .filter(|id| (LISTENER_IDS..KAFKA_IDS).contains(id))
        .collect();
    assert_eq!(
        listener.len(),
        sent.len(),
        "listener events: sent {}, received {}",
        sent.len(),
        listener.len()
    );
    assert_eq!(listener, sent, "listener events out of order or altered");
}

/// While the outage lasted, the session received every listener event sent
/// during it (but the last half second's, which may still be in flight).
fn assert_kept_receiving(feed: &Feed, reader: &Reader, from: Instant, until: Instant) -> usize {
    let during = feed.sent_between(from, until - Duration::from_millis(500));
    assert!(
        during.len() >= 100,
        "the feed sent too little during the outage to tell ({})",
        during.len()
    );
    let got = reader.received_before(until);
    let missing: Vec<u64> = during
        .iter()
        .copied()
        .filter(|id| !got.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "the existing session stopped receiving during the outage: {} of {} events sent \
         then had not arrived when it ended (first: {:?})",
        missing.len(),
        during.len(),
        missing.first()
    );
    during.len()
}

// ------------------------------------------------------------------ registry drills

/// A node on a PostgreSQL registry of its own, a bot installed in a server
/// with one session reading, and the listener feed running.
struct RegistryRig {
    pg: PgServer,
    node: Node,
    token: String,
    reader: Reader,
    feed: Feed,
}

fn registry_rig() -> RegistryRig {
    let pg = PgServer::start();
    let url = pg.create_db("drill");
    let node = Node::start(&[
        "--no-demo-traffic",
        "--registry-url",
        &url,
        "--registry-timeout-ms",
        &TIMEOUT.as_millis().to_string(),
        "--heartbeat-interval-ms",
        HEARTBEAT_MS,
    ]);
    let reg = Registry::with_url(node.dir.path(), Some(&url));
    let app = reg.add_app("drill-bot", 0);
    let (server, channel) = reg.add_server("drill");
    reg.install(app.id, server, None);
    let s =
        support::bot::identify(node.gateway, "drill", &app.token, INTENTS, None).expect("identify");
    let reader = Reader::spawn(s);
    let feed = Feed::listener(node.ingest, server, channel);
    assert!(
        wait_until(Duration::from_secs(10), || !reader.ids().is_empty()).is_some(),
        "no event reached the session before the drill"
    );
    assert_eq!(metric(&node, "gatewayd_registry_brownout"), 0.0);
    RegistryRig {
        pg,
        node,
        token: app.token,
        reader,
        feed,
    }
}

impl RegistryRig {
    /// What the node must do once the registry went away at `since`:
    /// declare brownout within `timeout_ms` and answer a new identify with
    /// op 9 at once. Returns how long each took.
    fn registry_is_away(&self, since: Instant) -> (Duration, Duration) {
        let brownout = self.brownout_after(since);
        assert!(
            brownout <= TIMEOUT + SLACK,
            "brownout took {brownout:?} (timeout_ms {TIMEOUT:?})"
        );
        let refused = self.identify_refused();
        assert!(refused <= TIMEOUT + SLACK, "op 9 took {refused:?}");
        (brownout, refused)
    }

    /// Brownout declared: how long after `since`.
    fn brownout_after(&self, since: Instant) -> Duration {
        wait_until(TIMEOUT + SLACK + Duration::from_secs(10), || {
            metric(&self.node, "gatewayd_registry_brownout") == 1.0
        })
        .unwrap_or_else(|| panic!("no brownout declared within {:?}", TIMEOUT + SLACK));
        since.elapsed()
    }

    /// A new identify now: op 9 (d: false), and how long it took.
    fn identify_refused(&self) -> Duration {
        let t = Instant::now();
        match try_identify(self.node.gateway, &self.token) {
            Outcome::InvalidSession(d) => assert_eq!(d, json!(false)),
            other => panic!("identify while the registry is away: expected op 9, got {other:?}"),
        }
        t.elapsed()
    }

    /// Until an identify gets READY again (and brownout is over): how long.
    fn recovered_after(&self, since: Instant) -> Duration {
        let limit = Duration::from_secs(60);
        let mut last = None;
        loop {
            if metric(&self.node, "gatewayd_registry_brownout") == 0.0 {
                match try_identify(self.node.gateway, &self.token) {
                    Outcome::Ready(id) => {
                        assert!(!id.is_empty(), "READY without a session id");
                        return since.elapsed();
                    }
                    other => last = Some(other),
                }
            }
            assert!(
                since.elapsed() < limit,
                "identifies still refused {limit:?} after the registry came back (the last \
                 identify: {last:?}; brownout gauge {}); the server's log: {}",
                metric(&self.node, "gatewayd_registry_brownout"),
                self.pg.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stop the traffic, then every listener event must have arrived once.
    fn finish(mut self) -> usize {
        let sent = self.feed.stop();
        let last = *sent.last().unwrap();
        wait_until(Duration::from_secs(20), || {
            self.reader.arrival(last).is_some()
        })
        .expect("the last event never arrived");
        let got = self.reader.stop();
        assert_contiguous(&got);
        assert_listener_exact(&got, &sent);
        sent.len()
    }
}

/// The issue's own case: every PostgreSQL process SIGSTOPped.
#[test]
#[ignore = "needs PostgreSQL (GATEWAYD_TEST_PG_BIN): run scripts/test-all.sh"]
fn drill_postgres_sigstop_then_sigcont() {
    let _serial = serial();
    let mut rig = registry_rig();
    let procs = rig.pg.processes().len();
    let t0 = Instant::now();
    rig.pg.freeze();
    let (brownout, refused) = rig.registry_is_away(t0);
    std::thread::sleep(OUTAGE.saturating_sub(t0.elapsed()));
    let t_thaw = Instant::now();
    let during = assert_kept_receiving(&rig.feed, &rig.reader, t0, t_thaw);
    rig.reader.healthy();
    rig.pg.thaw();
    let recovered = rig.recovered_after(t_thaw);
    let calls_failed = metric(&rig.node, "gatewayd_registry_calls_failed_total");
    let total = rig.finish();
    report(format!(
        "DRILL postgres SIGSTOP {}s ({procs} processes): brownout after {} ms (timeout_ms {}); \
         new identify op 9 in {} ms; {during} events delivered while frozen; identify READY {} ms \
         after SIGCONT; {calls_failed} registry calls failed; {total} of {total} events, in order",
        OUTAGE.as_secs(),
        ms(brownout),
        ms(TIMEOUT),
        ms(refused),
        ms(recovered)
    ));
}

#[test]
#[ignore = "needs PostgreSQL (GATEWAYD_TEST_PG_BIN): run scripts/test-all.sh"]
fn drill_postgres_kill9_then_restart() {
    let _serial = serial();
    let mut rig = registry_rig();
    let t0 = Instant::now();
    rig.pg.kill9();
    let (brownout, refused) = rig.registry_is_away(t0);
    std::thread::sleep(OUTAGE.saturating_sub(t0.elapsed()));
    let t_restart = Instant::now();
    let during = assert_kept_receiving(&rig.feed, &rig.reader, t0, t_restart);
    rig.pg.restart();
    let up = t_restart.elapsed();
    let recovered = rig.recovered_after(t_restart);
    let total = rig.finish();
    report(format!(
        "DRILL postgres kill -9, restart after {}s: brownout after {} ms; new identify op 9 in \
         {} ms; {during} events delivered while down; server accepting {} ms after restart; \
         identify READY {} ms after restart; {total} of {total} events, in order",
        OUTAGE.as_secs(),
        ms(brownout),
        ms(refused),
        ms(up),
        ms(recovered)
    ));
}

// ------------------------------------------------------------------ broker drills

/// A node consuming from a topic on a broker of its own (and its ingest
/// listener), the demo bot's session reading, both feeds running.
struct BrokerRig {
    broker: TansuServer,
    node: Node,
    reader: Reader,
    listener_feed: Feed,
    kafka_feed: Feed,
    kafka: Arc<Kafka>,
}

fn broker_rig(storage: &str) -> BrokerRig {
    let broker = TansuServer::start(storage);
    let brokers = broker.brokers();
    let topic = create_topic(&brokers);
    let group = unique("drill");
    let node = Node::start(&[
        "--no-demo-traffic",
        "--kafka-brokers",
        &brokers,
        "--kafka-topic",
        &topic,
        "--kafka-group",
        &group,
        "--kafka-session-timeout-ms",
        "6000",
        "--heartbeat-interval-ms",
        HEARTBEAT_MS,
    ]);
    let s = support::bot::identify(node.gateway, "drill", &node.token, INTENTS, None)
        .expect("identify");
    let (server, channel) = support::bot::server_and_general(&s.guild_creates[0]);
    let reader = Reader::spawn(s);
    // The producer retries for as long as a drill lasts (and more).
    let kafka = Arc::new(Kafka::with(
        &brokers,
        &topic,
        &[
            ("message.timeout.ms", "120000"),
            ("retry.backoff.max.ms", "500"),
        ],
    ));
    let k = kafka.clone();
    let kafka_feed = Feed::spawn(
        move |id| {
            k.send_tracked(server, &frame_message_with_id(id, server, channel, "k"), id);
            k.producer.poll(Duration::ZERO);
        },
        KAFKA_IDS,
        Duration::from_millis(20),
    );
    let listener_feed = Feed::listener(node.ingest, server, channel);
    // The consumer joins its group first (seconds).
    assert!(
        wait_until(Duration::from_secs(60), || {
            reader.ids().iter().any(|id| *id >= KAFKA_IDS)
        })
        .is_some(),
        "no event from the topic reached the session before the drill"
    );
    BrokerRig {
        broker,
        node,
        reader,
        listener_feed,
        kafka_feed,
        kafka,
    }
}

impl BrokerRig {
    /// A new identify now gets READY (the registry is not the broker).
    fn identify_accepted(&self) {
        match try_identify(self.node.gateway, &self.node.token) {
            Outcome::Ready(id) => assert!(!id.is_empty(), "READY without a session id"),
            other => panic!("identify while the broker is away: expected READY, got {other:?}"),
        }
    }

    /// Stop the traffic; every event the broker acknowledged must arrive
    /// (at least once) and every listener event exactly once. Returns
    /// (acknowledged, delivered twice, time until the last arrived after
    /// `since`).
    fn finish(mut self, since: Instant) -> (usize, usize, Duration) {
        let listener_sent = self.listener_feed.stop();
        let kafka_sent = self.kafka_feed.stop();
        self.kafka
            .producer
            .flush(Duration::from_secs(120))
            .expect("the producer's backlog reached the broker");
        let acked: Vec<u64> = self.kafka.ctx.0.acked.lock().unwrap().clone();
        assert_eq!(
            acked.len(),
            kafka_sent.len(),
            "every record produced was acknowledged in the end (failed: {})",
            self.kafka.ctx.0.failed.load(Ordering::Relaxed)
        );
        let want: HashSet<u64> = acked.iter().copied().collect();
        let all = wait_until(Duration::from_secs(90), || {
            let have: HashSet<u64> = self.reader.ids().into_iter().collect();
            want.is_subset(&have)
        });
        let got = self.reader.stop();
        let have: HashSet<u64> = got.iter().map(|g| g.0).collect();
        let lost: Vec<u64> = want.difference(&have).copied().collect();
        assert!(
            all.is_some() && lost.is_empty(),
            "{} of {} acknowledged events never arrived (first: {:?}); broker log:\n{}",
            lost.len(),
            want.len(),
            lost.iter().min(),
            self.broker.log()
        );
        assert_contiguous(&got);
        assert_listener_exact(&got, &listener_sent);
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        for g in got.iter().filter(|g| g.0 >= KAFKA_IDS) {
            *seen.entry(g.0).or_default() += 1;
        }
        let twice = seen.values().filter(|n| **n > 1).count();
        let last = got.iter().map(|g| g.2).max().unwrap();
        (acked.len(), twice, last.saturating_duration_since(since))
    }
}

#[test]
#[ignore = "needs a Tansu binary (GATEWAYD_TEST_TANSU): run scripts/test-all.sh"]
fn drill_broker_sigstop_then_sigcont() {
    let _serial = serial();
    let mut rig = broker_rig("memory://tansu/");
    let t0 = Instant::now();
    rig.broker.freeze();
    rig.identify_accepted();
    std::thread::sleep(OUTAGE.saturating_sub(t0.elapsed()));
    let t_thaw = Instant::now();
    let during = assert_kept_receiving(&rig.listener_feed, &rig.reader, t0, t_thaw);
    rig.reader.healthy();
    rig.broker.thaw();
    let first = wait_until(Duration::from_secs(60), || {
        rig.reader
            .first_after(t_thaw, KAFKA_IDS..u64::MAX)
            .is_some()
    })
    .expect("no event from the topic after the broker came back");
    let (acked, twice, caught_up) = rig.finish(t_thaw);
    report(format!(
        "DRILL broker SIGSTOP {}s: {during} listener events delivered while frozen; identify \
         READY while frozen; first topic event {} ms after SIGCONT; all {acked} acknowledged \
         topic events delivered ({twice} twice), the last {} ms after SIGCONT",
        OUTAGE.as_secs(),
        ms(first),
        ms(caught_up)
    ));
}

#[test]
#[ignore = "needs a Tansu binary (GATEWAYD_TEST_TANSU): run scripts/test-all.sh"]
fn drill_broker_kill9_then_restart() {
    let _serial = serial();
    // Durable storage: a killed broker keeps what it acknowledged.
    let mut rig = broker_rig("sqlite://tansu.db");
    let t0 = Instant::now();
    rig.broker.kill9();
    rig.identify_accepted();
    std::thread::sleep(OUTAGE.saturating_sub(t0.elapsed()));
    let t_restart = Instant::now();
    let during = assert_kept_receiving(&rig.listener_feed, &rig.reader, t0, t_restart);
    rig.broker.restart();
    let up = t_restart.elapsed();
    let first = wait_until(Duration::from_secs(90), || {
        rig.reader
            .first_after(t_restart, KAFKA_IDS..u64::MAX)
            .is_some()
    })
    .unwrap_or_else(|| {
        panic!(
            "no event from the topic after the broker restarted; broker log:\n{}",
            rig.broker.log()
        )
    });
    let (acked, twice, caught_up) = rig.finish(t_restart);
    report(format!(
        "DRILL broker kill -9, restart after {}s: {during} listener events delivered while down; \
         identify READY while down; broker answering {} ms after restart; first topic event {} ms \
         after restart; all {acked} acknowledged topic events delivered ({twice} twice: \
         at-least-once), the last {} ms after restart",
        OUTAGE.as_secs(),
        ms(up),
        ms(first),
        ms(caught_up)
    ));
}
