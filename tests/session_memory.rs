//! What an idle session costs the node's heap: a real node runs in this
//! process, a counting allocator keeps the bytes live, and sessions that
//! have identified and sit idle are added in a step; the growth divided by
//! the step is one session's heap (its connection, gateway session, identity,
//! buffers). The budget below is what `docs/bench/scaling.md` ("What an idle
//! session holds") accounts for; with the per-session rows allocated at start
//! (fan-out slot, session board row, lookup tables), whose pages an idle
//! session touches, it is the marginal RSS of issue 30's 2 KiB target.
//!
//! The clients are raw sockets: after READY each keeps only its
//! `TcpStream` (in a vector allocated before the count), so the client side
//! adds nothing to the count.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::TcpStream;
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::time::Duration;

use support::raw::Ws;
use support::registry::Registry;
use support::{intent, BOT_INTENTS};

/// Bytes asked for, live.
static LIVE: AtomicI64 = AtomicI64::new(0);
/// Bytes the system allocator (glibc) hands out for them, live: each
/// request plus its 8-byte header, rounded up to 16, at least 32.
static CHUNKS: AtomicI64 = AtomicI64::new(0);

/// Live allocations by requested size (16-byte classes; the last holds all larger).
static BY_SIZE: [AtomicI64; 513] = [const { AtomicI64::new(0) }; 513];

fn class(size: usize) -> usize {
    (size.div_ceil(16)).min(512)
}

fn chunk(size: usize) -> i64 {
    (((size + 8 + 15) & !15).max(32)) as i64
}

struct Counting;

// SAFETY: every method forwards to the system allocator unchanged (counting
// on the side allocates nothing), so its guarantees are the system's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BY_SIZE[class(layout.size())].fetch_add(1, Relaxed);
        LIVE.fetch_add(layout.size() as i64, Relaxed);
        CHUNKS.fetch_add(chunk(layout.size()), Relaxed);
        // SAFETY: forwards to the system allocator with the caller's arguments.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        BY_SIZE[class(layout.size())].fetch_add(1, Relaxed);
        LIVE.fetch_add(layout.size() as i64, Relaxed);
        CHUNKS.fetch_add(chunk(layout.size()), Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BY_SIZE[class(layout.size())].fetch_sub(1, Relaxed);
        LIVE.fetch_sub(layout.size() as i64, Relaxed);
        CHUNKS.fetch_sub(chunk(layout.size()), Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BY_SIZE[class(layout.size())].fetch_sub(1, Relaxed);
        BY_SIZE[class(new_size)].fetch_add(1, Relaxed);
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
        CHUNKS.fetch_add(chunk(new_size) - chunk(layout.size()), Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One idle session's heap, in allocator chunks (what RSS sees of it), as
/// measured when this test was written (issue 30): 613 B. The `Conn` (208:
/// its REST state went into a box a WebSocket gives back), its `WsConn`
/// (128), the `Identity` (144) with its one server (48) and that server's
/// channel permissions (32), and a share of the per-server and per-bot
/// session lists; no buffer (housekeeping gives idle ones back) and no bot
/// user object (one copy per application). Before: 1,943 B. See
/// docs/bench/scaling.md, "What an idle session holds".
const BUDGET: i64 = 768;

/// The least of a few readings taken apart in time: background threads
/// (metrics, the registry sidecar's renewals) hold a little while they work.
fn quiet_reading() -> (i64, i64, Vec<i64>) {
    // Housekeeping gives idle buffers back after a second (4 ticks of 250 ms).
    std::thread::sleep(Duration::from_millis(1500));
    let mut best = (i64::MAX, i64::MAX, Vec::new());
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(200));
        let r = (LIVE.load(Relaxed), CHUNKS.load(Relaxed));
        if r.1 < best.1 {
            let sizes = BY_SIZE.iter().map(|c| c.load(Relaxed)).collect();
            best = (r.0, r.1, sizes);
        }
    }
    best
}

#[test]
fn an_idle_session_holds_at_most_its_budget_of_heap() {
    const APPS: usize = 4;
    const WARM: usize = 64;
    const STEP: usize = 512;
    let dir = tempfile::tempdir().unwrap();
    let (gateway, _admin, _ingest) = support::node::in_process(dir.path(), |cfg| {
        cfg.limits.max_sessions_per_worker = 1024;
    });
    let reg = Registry::new(dir.path());
    let (server, _channel) = reg.add_server("Idle Server");
    let apps: Vec<_> = (0..APPS)
        .map(|i| {
            let app = reg.add_app(&format!("idle{i}"), intent::MESSAGE_CONTENT);
            reg.install(app.id, server, None);
            app
        })
        .collect();

    let mut held: Vec<TcpStream> = Vec::with_capacity(WARM + STEP);
    let open = |n: usize, held: &mut Vec<TcpStream>| {
        for i in 0..n {
            let mut ws = Ws::connect(gateway, "/?v=10&encoding=json");
            let ready = ws.login(&apps[i % APPS].token, BOT_INTENTS);
            assert_eq!(ready["t"], "READY", "{ready}");
            held.push(ws.stream);
        }
    };
    // The first sessions of each application and worker warm what is made
    // once (caches, per-application rows): not a session's own cost.
    open(WARM, &mut held);
    let before = quiet_reading();
    open(STEP, &mut held);
    // The lowest reading within a deadline: on a busy machine the
    // housekeeping ticks that give idle buffers back may come late, so the
    // test waits for them (up to 30 s) rather than for a fixed time.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut after = quiet_reading();
    while (after.1 - before.1) / STEP as i64 > BUDGET && std::time::Instant::now() < deadline {
        let again = quiet_reading();
        if again.1 < after.1 {
            after = again;
        }
    }
    let per_live = (after.0 - before.0) / STEP as i64;
    let per_chunk = (after.1 - before.1) / STEP as i64;
    // Which sizes grew, for the account in docs/bench/scaling.md.
    for (i, (a, b)) in after.2.iter().zip(&before.2).enumerate() {
        if (a - b).abs() >= STEP as i64 / 4 {
            eprintln!(
                "  {:>5}..{:<5} B: {:+} allocations ({:+.2} per session)",
                i.saturating_sub(1) * 16 + 1,
                i * 16,
                a - b,
                (a - b) as f64 / STEP as f64
            );
        }
    }
    eprintln!(
        "idle session heap: {per_live} B asked for, {per_chunk} B in allocator chunks \
         ({STEP} sessions after {WARM})"
    );
    assert!(
        per_chunk <= BUDGET,
        "an idle session holds {per_chunk} B of heap (asked {per_live} B), over its budget of {BUDGET} B"
    );
    drop(held);
}
