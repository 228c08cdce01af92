//! The worker's event path allocates nothing, end to end: a real node runs
//! in this process (so this test's counting allocator sees its threads),
//! real WebSocket sessions receive a stream of events from the ingest port,
//! and the worker threads' allocations are counted while the events go from
//! inbox to entitlement filter, ring append, send and completion.
//! `src/no_alloc.rs` proves the pieces; this proves the worker that drives
//! them (its flush once allocated per turn, unseen by the pieces' test).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::bot::Next;
use support::events::Producer;
use support::registry::Registry;
use support::{intent, BOT_INTENTS};

/// Allocation counts per thread, found by kernel thread id: all of them,
/// and those made inside a worker's turn (`gatewayd::worker::in_turn`). A
/// fixed table: the allocator itself must not allocate.
const SLOTS: usize = 1024;
static TIDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];
static COUNTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static IN_TURN: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn count_one() {
    let _ = SLOT.try_with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            // Threads past the table share its last slot (tid -1): never a worker,
            // which starts long before the test's client threads.
            i = NEXT.fetch_add(1, Relaxed).min(SLOTS - 1);
            let tid = if i == SLOTS - 1 {
                -1
            } else {
                // SAFETY: gettid has no arguments and cannot fail.
                unsafe { libc::syscall(libc::SYS_gettid) as i32 }
            };
            TIDS[i].store(tid, Relaxed);
            s.set(i);
        }
        COUNTS[i].fetch_add(1, Relaxed);
        if gatewayd::worker::in_turn() {
            IN_TURN[i].fetch_add(1, Relaxed);
        }
    });
}

struct Counting;

// SAFETY: every method forwards to the system allocator unchanged (counting
// on the side allocates nothing), so its guarantees are the system's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// (thread name, allocations so far, of them inside a turn) of every worker
/// thread of this process.
/// The worker threads of this process (an earlier test's node runs on).
fn worker_tids() -> std::collections::BTreeSet<i32> {
    let mut out = std::collections::BTreeSet::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let e = e.unwrap();
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if name.trim().starts_with("worker-") {
            out.insert(e.file_name().to_str().unwrap().parse().unwrap());
        }
    }
    out
}

fn worker_allocations(not: &std::collections::BTreeSet<i32>) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let e = e.unwrap();
        let tid: i32 = e.file_name().to_str().unwrap().parse().unwrap();
        let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        let name = name.trim();
        if !name.starts_with("worker-") || not.contains(&tid) {
            continue;
        }
        let n = NEXT.load(Relaxed).min(SLOTS);
        let slot = (0..n).find(|&i| TIDS[i].load(Relaxed) == tid);
        let all = slot.map(|i| COUNTS[i].load(Relaxed)).unwrap_or(0);
        let in_turn = slot.map(|i| IN_TURN[i].load(Relaxed)).unwrap_or(0);
        out.push((format!("{name} (tid {tid})"), all, in_turn));
    }
    out.sort();
    out
}

/// What the node under count runs with.
enum Setup {
    /// Embedded registry, the ingest listener.
    Alone,
    /// A shared PostgreSQL registry: in a cluster.
    Clustered { registry_url: String },
    /// Clustered, Kafka ingest, crash recovery's journal, checkpoints and
    /// summaries written to Redis (docs/cluster.md, "Crash recovery").
    Recovering {
        registry_url: String,
        brokers: String,
        topic: String,
        redis_url: String,
    },
}

impl Setup {
    fn registry_url(&self) -> Option<&str> {
        match self {
            Setup::Alone => None,
            Setup::Clustered { registry_url } | Setup::Recovering { registry_url, .. } => {
                Some(registry_url)
            }
        }
    }
}

fn start_node(dir: &std::path::Path, setup: &Setup) -> (SocketAddr, SocketAddr, SocketAddr) {
    let mut cfg = gatewayd::config::Config {
        data_dir: dir.to_path_buf(),
        gateway_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        registry_url: setup.registry_url().unwrap_or_default().to_string(),
        ..Default::default()
    };
    if let Setup::Recovering {
        brokers,
        topic,
        redis_url,
        ..
    } = setup
    {
        cfg.events.kafka_brokers = brokers.clone();
        cfg.events.kafka_topic = topic.clone();
        cfg.events.kafka_group = support::kafka::unique("no-alloc");
        cfg.events.kafka_session_timeout_ms = 6000;
        cfg.recovery.enabled = true;
        cfg.recovery.redis_url = redis_url.clone();
        // Checkpoints several times over the counted 2,000 events.
        cfg.recovery.checkpoint_ms = 100;
    }
    cfg.events.ingest_addr = "127.0.0.1:0".parse().unwrap();
    cfg.portal.addr = "127.0.0.1:0".parse().unwrap();
    cfg.demo.enabled = false;
    // The node runs inside this test binary: its egress child is gatewayd.
    cfg.egress.program = env!("CARGO_BIN_EXE_gatewayd").into();
    cfg.registry.identify_limits = false;
    cfg.registry.admission_per_second = 0;
    cfg.workers = 2;
    // Small sizes: this test holds a few sessions, not 25,000 per worker.
    cfg.limits.max_sessions_per_worker = 256;
    cfg.events.arena_bytes = 8 << 20;
    // The node runs until the test process ends.
    std::thread::Builder::new()
        .name("node".into())
        .spawn(move || {
            if let Err(e) = gatewayd::node::run(cfg) {
                panic!("gatewayd: {e}");
            }
        })
        .unwrap();
    support::node::wait_for_addrs(dir, || {})
}

/// Where the counted events come from.
enum Source {
    Listener(Producer),
    Kafka(support::kafka::Kafka),
}

/// The tests share the counting tables: one node at a time is counted.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn worker_event_path_allocates_nothing() {
    event_path_allocates_nothing(Setup::Alone);
}

/// With a shared registry the node is in a cluster: its workers also copy
/// every record into their recent-stream log (docs/cluster.md).
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn clustered_worker_event_path_allocates_nothing() {
    let (_admin, url) = support::registry::pg_database();
    event_path_allocates_nothing(Setup::Clustered { registry_url: url });
}

/// With crash recovery on, the workers also checkpoint their sessions'
/// seqs (every 100 ms here) into buffers the writer thread hands back, and
/// the events come from a Kafka topic whose batch order is journaled.
#[test]
#[ignore = "needs PostgreSQL, a Kafka-protocol broker and redis-server: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL, GATEWAYD_TEST_KAFKA_BROKERS and GATEWAYD_TEST_REDIS_SERVER"]
fn recovering_worker_event_path_allocates_nothing() {
    let (_admin, url) = support::registry::pg_database();
    let brokers = support::kafka::brokers();
    let topic = support::kafka::create_topic(&brokers);
    let redis = support::services::RedisServer::start();
    event_path_allocates_nothing(Setup::Recovering {
        registry_url: url,
        brokers,
        topic,
        redis_url: redis.url(),
    });
    let checkpoints = support::metrics::metric_sum(
        &support::metrics::metrics(*RECOVERING_ADMIN.lock().unwrap()),
        "gatewayd_recovery_checkpoints_total",
        &[],
    );
    assert!(checkpoints > 0.0, "the workers checkpointed while counted");
}

/// The admin address of the last node counted (for the recovery case's
/// own check after the count).
static RECOVERING_ADMIN: std::sync::Mutex<SocketAddr> = std::sync::Mutex::new(SocketAddr::V4(
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
));

fn event_path_allocates_nothing(setup: Setup) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let earlier = worker_tids();
    // Eight applications (placed on workers by application id), three
    // sessions each, all installed on one server: every session receives
    // every event.
    const APPS: usize = 8;
    const PER_APP: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let (gateway, admin, ingest) = start_node(dir.path(), &setup);
    *RECOVERING_ADMIN.lock().unwrap() = admin;
    let registry_url = setup.registry_url().map(str::to_string);
    let reg = Registry::with_url(dir.path(), registry_url.as_deref());
    let (server, channel) = reg.add_server("Quiet Server");
    // Application ids are random and a session's worker is a hash of its
    // (application, shard): keep creating applications until each of the
    // two workers has half of them, so both are counted (eight random ids
    // all on one worker, 1 in 128, once made this test fail).
    let mut apps = Vec::new();
    let mut on = [0usize; 2];
    for i in 0.. {
        assert!(i < 64, "64 applications and still not {APPS} split evenly");
        let app = reg.add_app(&format!("counted{i}"), intent::MESSAGE_CONTENT);
        let w = shards::worker_for(app.id, 0, 2) as usize;
        if on[w] == APPS / 2 {
            continue;
        }
        on[w] += 1;
        reg.install(app.id, server, None);
        apps.push(app);
        if apps.len() == APPS {
            break;
        }
    }

    // Each session is read by its own thread, which counts MESSAGE_CREATEs.
    let received = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for i in 0..APPS * PER_APP {
        let token = &apps[i % APPS].token;
        let mut s = support::bot::identify(gateway, &format!("s{i}"), token, BOT_INTENTS, None)
            .unwrap_or_else(|e| panic!("{e}"));
        let (received, stop) = (received.clone(), stop.clone());
        readers.push(std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                match support::bot::read_next(&mut s.ws, Duration::from_millis(200)) {
                    Next::Json(v) if v["t"] == "MESSAGE_CREATE" => {
                        received.fetch_add(1, Relaxed);
                    }
                    Next::Json(_) | Next::Timeout => {}
                    other => panic!("session s{i} ended: {other:?}"),
                }
            }
        }));
    }
    let recipients = (APPS * PER_APP) as u64;

    let mut producer = match &setup {
        Setup::Recovering { brokers, topic, .. } => {
            Source::Kafka(support::kafka::Kafka::new(brokers, topic))
        }
        _ => Source::Listener(Producer::connect(ingest)),
    };
    let mut sent = 0u64;
    let mut send = |producer: &mut Source, n: u64| {
        for _ in 0..n {
            sent += 1;
            let id = 1 << 40 | sent;
            match producer {
                Source::Listener(p) => p.send(&support::events::message_event(
                    id,
                    server,
                    channel,
                    "counted",
                    &[],
                )),
                Source::Kafka(k) => k.send(
                    server,
                    &support::events::frame_message_with_id(id, server, channel, "counted"),
                ),
            }
        }
        if let Source::Kafka(k) = producer {
            k.flush();
        }
        sent
    };
    let wait_for = |total: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while received.load(Relaxed) < total * recipients {
            assert!(
                Instant::now() < deadline,
                "received {} of {}",
                received.load(Relaxed),
                total * recipients
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    // Warm up: buffers and queues reach their steady sizes.
    for _ in 0..10 {
        let total = send(&mut producer, 200);
        wait_for(total);
    }
    let by_worker = support::metrics::metric_by_worker(
        &support::metrics::metrics(admin),
        "gatewayd_deliveries_total",
    );
    assert!(
        by_worker.len() == 2 && by_worker.values().all(|&d| d > 0.0),
        "both workers deliver: {by_worker:?}"
    );
    let node = support::metrics::metric_sum(
        &support::metrics::metrics(admin),
        "gatewayd_cluster_node",
        &[],
    );
    assert_eq!(
        node > 0.0,
        registry_url.is_some(),
        "in a cluster iff the registry is shared"
    );
    if let Setup::Recovering { .. } = setup {
        let appends = support::metrics::metric_sum(
            &support::metrics::metrics(admin),
            "gatewayd_recovery_journal_appends_total",
            &[],
        );
        assert!(appends > 0.0, "the batches' order is journaled in Redis");
    }
    // Each worker is a thread named worker-<id>-<core> (glommio's helper
    // threads inherit the name; they are counted too).
    let before = worker_allocations(&earlier);
    let names: std::collections::BTreeSet<_> = before
        .iter()
        .map(|(n, ..)| n.split(' ').next().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "two workers: {before:?}");
    let total = send(&mut producer, 2_000);
    wait_for(total);
    let after = worker_allocations(&earlier);
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    // Parking in glommio between turns allocates (its timers and sources,
    // and the worker's eventfd read and park bound, a few per wake-up), and
    // so does the 250 ms housekeeping tick (the lease renewal list it sends
    // the sidecar every few seconds): reported, not asserted. The event
    // path, everything else a turn does: nothing.
    for (b, a) in before.iter().zip(&after) {
        println!(
            "{}: {} allocations while parked or in the tick, {} on the event path, over 2,000 events",
            b.0,
            (a.1 - a.2) - (b.1 - b.2),
            a.2 - b.2
        );
    }
    let grew: Vec<String> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| a.2 > b.2)
        .map(|(b, a)| format!("{}: {} allocations", b.0, a.2 - b.2))
        .collect();
    assert!(
        grew.is_empty(),
        "the worker's turns allocated while delivering 2,000 events to {recipients} sessions: {grew:?}"
    );
}
