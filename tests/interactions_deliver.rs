//! The interaction deliverer (src/chat/endpoint.rs) on its one thread,
//! against a real `gatewayd egress` child and real HTTP endpoints on
//! loopback run by this test (no signature check: the node's own signing
//! is tests/interactions_http.rs's and tests/egress.rs's). What the move
//! from 64 blocking threads to one that never waits could break: calls in
//! flight together (more applications answering slowly at once than there
//! were threads), the per-application cap, a hanging endpoint beside a
//! fast one, and a deadline that passes while a call is in flight (its
//! failure recorded, its late answer ignored).

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use gatewayd::chat::board::{Board, FAILURE_REASONS};
use gatewayd::chat::endpoint::{self, Deliveries, EndpointStats, Job};
use gatewayd::egress::child::EgressChild;
use gatewayd::egress::client::{Addr, Defaults};
use gatewayd::egress::EgressClient;
use gatewayd::worker::mail::{ChatAction, ChatRequest};

/// The endpoint's share of the 3-second window (interactions.rs: 3,000 ms
/// less `ENDPOINT_MARGIN_MS`).
const WINDOW: Duration = Duration::from_millis(2_700);

/// What the endpoints saw: calls in flight now and at most, per
/// application and in all, and calls received.
#[derive(Default)]
struct Seen {
    now: HashMap<u64, usize>,
    most: HashMap<u64, usize>,
    total_now: usize,
    total_most: usize,
}

/// A local HTTP server: `/APP/ok`, `/APP/slow/MS` (answers after MS),
/// `/APP/hang` (never answers); every answer is 200 with a message
/// response.
struct Endpoint {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
    calls: Arc<AtomicUsize>,
}

impl Endpoint {
    fn start() -> Endpoint {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let calls = Arc::new(AtomicUsize::new(0));
        let (s2, c2) = (seen.clone(), calls.clone());
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                let (seen, calls) = (s2.clone(), c2.clone());
                std::thread::spawn(move || serve(s, &seen, &calls));
            }
        });
        Endpoint { addr, seen, calls }
    }

    fn url(&self, app: u64, path: &str) -> String {
        format!("http://{}/{app}/{path}", self.addr)
    }

    fn most(&self, app: u64) -> usize {
        self.seen
            .lock()
            .unwrap()
            .most
            .get(&app)
            .copied()
            .unwrap_or(0)
    }
}

fn serve(mut s: TcpStream, seen: &Mutex<Seen>, calls: &AtomicUsize) {
    let Some((path, _body)) = support::http::read_request(&s) else {
        return;
    };
    calls.fetch_add(1, SeqCst);
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let app: u64 = parts[0].parse().unwrap_or(0);
    {
        let mut g = seen.lock().unwrap();
        let n = {
            let n = g.now.entry(app).or_default();
            *n += 1;
            *n
        };
        let m = g.most.entry(app).or_default();
        *m = (*m).max(n);
        g.total_now += 1;
        g.total_most = g.total_most.max(g.total_now);
    }
    match parts.get(1).copied() {
        Some("slow") => {
            let ms = parts.get(2).and_then(|m| m.parse().ok()).unwrap_or(0);
            std::thread::sleep(Duration::from_millis(ms));
        }
        Some("hang") => std::thread::sleep(Duration::from_secs(10)),
        _ => {}
    }
    {
        let mut g = seen.lock().unwrap();
        *g.now.entry(app).or_default() -= 1;
        g.total_now -= 1;
    }
    let answer = br#"{"type":4,"data":{"content":"pong"}}"#;
    let _ = s.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            answer.len()
        )
        .as_bytes(),
    );
    let _ = s.write_all(answer);
}

/// A `gatewayd egress` child allowing loopback, and the deliverer in front
/// of it with what it reports to.
struct Rig {
    _dir: tempfile::TempDir,
    egress_child: EgressChild,
    egress: Arc<EgressClient>,
    board: Arc<Board>,
    stats: Arc<EndpointStats>,
    chat: Receiver<ChatRequest>,
    deliveries: Deliveries,
}

/// One rig at a time in this process: each test counts the deliverer's
/// threads (the test harness runs tests on threads of one process).
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn rig() -> Rig {
    let until = Instant::now() + Duration::from_secs(2);
    while threads_named("deliver").0 > 0 && Instant::now() < until {
        // The last test's deliverer, on its way out.
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(threads_named("deliver").0, 0);
    let dir = tempfile::tempdir().unwrap();
    let addr = Addr::Unix(dir.path().join("egress.sock"));
    let child = EgressChild::spawn(
        &PathBuf::from(env!("CARGO_BIN_EXE_gatewayd")),
        &addr,
        &["127.0.0.0/8".to_string()],
        256,
    )
    .unwrap();
    let egress = Arc::new(EgressClient::new(addr, Defaults::default()));
    let (board, stats) = (
        Arc::new(Board::default()),
        Arc::new(EndpointStats::default()),
    );
    // The chat service's own queue bound.
    let (tx, rx) = crossbeam_channel::bounded(4096);
    let deliveries = endpoint::start(egress.clone(), tx, board.clone(), stats.clone());
    Rig {
        _dir: dir,
        egress_child: child,
        egress,
        board,
        stats,
        chat: rx,
        deliveries,
    }
}

fn job(app: u64, id: u64, url: String, window: Duration) -> Job {
    Job {
        app,
        id,
        token: format!("token-{id}"),
        url,
        seed: [7; 32],
        body: format!(r#"{{"type":2,"id":"{id}","data":{{"name":"ping"}}}}"#).into_bytes(),
        deadline: Instant::now() + window,
    }
}

/// The interaction ids of the callbacks the chat thread was handed by
/// `until`, with when each came.
fn callbacks(chat: &Receiver<ChatRequest>, want: usize, until: Instant) -> Vec<(u64, Instant)> {
    let mut got = Vec::new();
    while got.len() < want {
        let Ok(req) = chat.recv_deadline(until) else {
            break;
        };
        match req.action {
            ChatAction::Callback { id, body, .. } => {
                assert_eq!(body, br#"{"type":4,"data":{"content":"pong"}}"#);
                got.push((id, Instant::now()));
            }
            _ => panic!("the deliverer hands the chat thread only callbacks"),
        }
    }
    got
}

fn reason(name: &str) -> usize {
    FAILURE_REASONS.iter().position(|r| *r == name).unwrap()
}

fn failures(board: &Board, app: u64, name: &str) -> u64 {
    board.app(app).map_or(0, |a| a.failures[reason(name)])
}

/// This process's threads named `name`, and their CPU time in clock ticks.
fn threads_named(name: &str) -> (usize, u64) {
    let (mut n, mut ticks) = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            n += 1;
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
            // After the command's closing parenthesis: state is field 3,
            // utime and stime are fields 14 and 15.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
                + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    (n, ticks)
}

/// 80 applications (more than the 64 deliverer threads of before) whose
/// endpoints each take 300 ms, 3 interactions each, and one more with 12:
/// 252 calls at once through one thread. Every one is answered inline
/// within its window, never more than 64 calls in flight nor 4 of one
/// application, and many at once (so no call held the thread).
#[test]
fn more_slow_applications_than_the_old_threads_are_all_delivered_in_their_windows() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let r = rig();
    let ep = Endpoint::start();
    let mut deadlines = HashMap::new();
    let mut id = 0;
    let mut push = |app: u64, n: usize| {
        for _ in 0..n {
            id += 1;
            let j = job(app, id, ep.url(app, "slow/300"), WINDOW);
            deadlines.insert(id, j.deadline);
            r.deliveries.try_send(j).unwrap();
        }
    };
    for app in 1..=80 {
        push(app, 3);
    }
    push(1000, 12);
    let want = deadlines.len();
    let got = callbacks(&r.chat, want, Instant::now() + Duration::from_secs(5));
    let (threads, ticks) = threads_named("deliver");
    let most = ep.seen.lock().unwrap().total_most;
    // The CPU of the path's parts, in clock ticks (10 ms): the deliverer,
    // the egress client's reader, the egress process.
    let egress_ticks = std::fs::read_to_string(format!("/proc/{}/stat", r.egress_child.id()))
        .ok()
        .and_then(|s| {
            let f: Vec<u64> = s
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(f.iter().sum::<u64>())
        })
        .unwrap_or(0);
    eprintln!(
        "{} of {want} answered inline; at most {most} calls in flight at once, {} of the 12-job application; CPU ticks: deliverer ({threads} thread) {ticks}, egress-client reader {}, egress process {egress_ticks}",
        got.len(),
        ep.most(1000),
        threads_named("egress-client").1,
    );
    assert_eq!(got.len(), want, "every interaction answered inline");
    for (id, at) in &got {
        assert!(
            *at <= deadlines[id],
            "interaction {id} answered after its window"
        );
    }
    assert_eq!(r.stats.inline.load(SeqCst), want as u64);
    for c in [&r.stats.failed, &r.stats.expired, &r.stats.retries] {
        assert_eq!(c.load(SeqCst), 0);
    }
    let seen = ep.seen.lock().unwrap();
    assert!(
        seen.most
            .values()
            .all(|&m| m <= endpoint::PER_APP_IN_FLIGHT),
        "no application had more than 4 calls in flight: {:?}",
        seen.most
    );
    assert!(
        seen.total_most <= endpoint::MAX_IN_FLIGHT,
        "{}",
        seen.total_most
    );
    assert!(
        seen.total_most > 16,
        "calls were in flight together: {}",
        seen.total_most
    );
    assert_eq!(threads, endpoint::DELIVERERS, "the deliveries' threads");
}

/// One application whose endpoint never answers, with 8 interactions,
/// beside one whose endpoint answers at once: the fast one's are answered
/// at once while the hanging one holds its 4 calls; the hanging one's fail
/// with their reasons (4 calls timed out at the deadline, 4 never called
/// because their window passed behind the cap).
#[test]
fn a_hanging_endpoint_holds_only_its_share_and_delays_no_other_application() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let r = rig();
    let ep = Endpoint::start();
    let (hanging, fast) = (1, 2);
    for id in 1..=8 {
        r.deliveries
            .try_send(job(hanging, id, ep.url(hanging, "hang"), WINDOW))
            .unwrap();
    }
    let t0 = Instant::now();
    while ep.most(hanging) < endpoint::PER_APP_IN_FLIGHT && t0.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(5));
    }
    for id in 101..=105 {
        let pushed = Instant::now();
        r.deliveries
            .try_send(job(fast, id, ep.url(fast, "ok"), WINDOW))
            .unwrap();
        let got = callbacks(&r.chat, 1, pushed + WINDOW);
        assert_eq!(got.len(), 1, "the fast application's interaction {id}");
        let took = got[0].1 - pushed;
        assert!(
            took < Duration::from_millis(1_500),
            "the fast application waited {took:?} beside the hanging one"
        );
    }
    assert_eq!(r.stats.inline.load(SeqCst), 5);
    // The hanging application's 8: settled by the end of their window.
    let until = Instant::now() + Duration::from_secs(5);
    while r.stats.failed.load(SeqCst) + r.stats.expired.load(SeqCst) < 8 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let settled_at = t0.elapsed();
    eprintln!(
        "hanging: {} failed, {} expired after {settled_at:?}; fast: 5 inline",
        r.stats.failed.load(SeqCst),
        r.stats.expired.load(SeqCst)
    );
    assert_eq!(ep.most(hanging), endpoint::PER_APP_IN_FLIGHT);
    assert_eq!(failures(&r.board, hanging, "timeout"), 4);
    assert_eq!(failures(&r.board, hanging, "not_called_in_time"), 4);
    assert_eq!(r.stats.failed.load(SeqCst), 4);
    assert_eq!(r.stats.expired.load(SeqCst), 4);
    assert_eq!(
        r.stats.retries.load(SeqCst),
        0,
        "no window left to retry in"
    );
    assert!(
        settled_at < WINDOW + Duration::from_millis(1_000),
        "{settled_at:?}"
    );
    assert!(r.board.app(fast).is_none(), "the fast one failed nothing");
    assert_eq!(threads_named("deliver").0, endpoint::DELIVERERS);
}

/// Stops the egress (SIGSTOP) while a call is in flight: the call is given
/// up at its deadline and grace, its failure recorded (`timeout`, no
/// retry with no window left); when the egress goes on (SIGCONT) it makes
/// the call and its answer comes, late: ignored (no callback, not counted
/// inline). The connection serves the next call as before.
#[test]
fn a_deadline_passing_in_flight_is_recorded_and_the_late_answer_ignored() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let r = rig();
    let ep = Endpoint::start();
    let app = 3;
    // The connection up first (the egress accepted it before it stops).
    r.deliveries
        .try_send(job(app, 1, ep.url(app, "ok"), WINDOW))
        .unwrap();
    assert_eq!(
        callbacks(&r.chat, 1, Instant::now() + WINDOW).len(),
        1,
        "a first call, before the egress stops"
    );
    let pid = r.egress_child.id() as libc::pid_t;
    struct Cont(libc::pid_t);
    impl Drop for Cont {
        fn drop(&mut self) {
            // SAFETY: signalling the test's own child process.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let cont = Cont(pid);
    let pushed = Instant::now();
    r.deliveries
        .try_send(job(app, 2, ep.url(app, "ok"), Duration::from_millis(800)))
        .unwrap();
    while r.stats.failed.load(SeqCst) == 0 && pushed.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let failed_after = pushed.elapsed();
    assert_eq!(r.stats.failed.load(SeqCst), 1, "given up at its deadline");
    assert!(
        failed_after >= Duration::from_millis(800) && failed_after < Duration::from_millis(2_000),
        "given up at its deadline and grace (800 + 100 ms): {failed_after:?}"
    );
    assert_eq!(failures(&r.board, app, "timeout"), 1);
    assert_eq!(r.stats.retries.load(SeqCst), 0);
    let timeouts = || {
        r.egress
            .stats
            .outcomes()
            .into_iter()
            .find(|(o, _)| *o == "timeout")
            .unwrap()
            .1
    };
    assert_eq!(timeouts(), 1);
    // The egress goes on: it makes the call, and its answer is late.
    drop(cont);
    let until = Instant::now() + Duration::from_secs(3);
    while ep.calls.load(SeqCst) < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(ep.calls.load(SeqCst), 2, "the egress made the call late");
    std::thread::sleep(Duration::from_millis(300));
    assert!(r.chat.try_recv().is_err(), "the late answer was ignored");
    assert_eq!(r.stats.inline.load(SeqCst), 1);
    assert_eq!(r.stats.failed.load(SeqCst), 1);
    assert_eq!(timeouts(), 1, "counted once");
    // The next call is answered as usual, on the same connection.
    r.deliveries
        .try_send(job(app, 3, ep.url(app, "ok"), WINDOW))
        .unwrap();
    let got = callbacks(&r.chat, 1, Instant::now() + WINDOW);
    assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), [3]);
    // Its turn is given back just after the callback is handed on.
    let until = Instant::now() + Duration::from_secs(1);
    while r.stats.in_flight.load(SeqCst) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(r.stats.in_flight.load(SeqCst), 0);
    assert_eq!(r.stats.queued.load(SeqCst), 0);
}
