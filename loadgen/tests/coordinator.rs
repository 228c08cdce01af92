//! The coordinator over real TCP: in-process server on 127.0.0.1:0, real
//! clients. Timing assertions only where timing is the behaviour, measured
//! so that scheduling delay can only make them pass later, never falsely.

use loadgen::{serve, Config};
use serde_json::Value;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

fn start(cfg: Config) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || serve(l, cfg));
    addr
}

fn cfg() -> Config {
    Config {
        identify_spacing: Duration::from_millis(200),
        ..Config::default()
    }
}

struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let w = TcpStream::connect(addr).unwrap();
        w.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        w.set_nodelay(true).unwrap();
        Client {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }

    fn send(&mut self, line: &str) {
        // One write per request (with TCP_NODELAY): split writes would meet
        // Nagle + delayed ACK and add ~40 ms per call.
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.w.write_all(&buf).unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut s = String::new();
        let n = self.r.read_line(&mut s).unwrap();
        assert!(n > 0, "connection closed, expected a response");
        assert!(s.ends_with('\n'));
        serde_json::from_str(&s).unwrap()
    }

    fn call(&mut self, line: &str) -> Value {
        self.send(line);
        self.recv()
    }

    /// True if no response arrives within `d`.
    fn silent_for(&mut self, d: Duration) -> bool {
        self.w.set_read_timeout(Some(d)).unwrap();
        let mut s = String::new();
        let r = self.r.read_line(&mut s);
        self.w
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        match r {
            Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
            Ok(_) => panic!("unexpected response {s:?}"),
        }
    }

    fn assert_eof(&mut self) {
        let mut rest = Vec::new();
        let n = self.r.read_to_end(&mut rest).unwrap_or(0);
        assert_eq!(
            n,
            0,
            "expected EOF, got {:?}",
            String::from_utf8_lossy(&rest)
        );
    }
}

fn is_ok(v: &Value) -> bool {
    v["ok"] == Value::Bool(true)
}

fn is_err(v: &Value) -> bool {
    v["ok"] == Value::Bool(false) && v["error"].is_string()
}

#[test]
fn ping() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    assert_eq!(c.call(r#"{"op":"ping"}"#), serde_json::json!({"ok": true}));
    // CRLF line endings and a final ping on the same connection.
    c.w.write_all(b"{\"op\":\"ping\"}\r\n").unwrap();
    assert!(is_ok(&c.recv()));
}

#[test]
fn identify_spacing_per_bucket() {
    let addr = start(Config {
        max_concurrency: 2,
        ..cfg()
    });
    let start_t = Instant::now();
    let mut a = Client::connect(addr);
    assert!(is_ok(&a.call(r#"{"op":"identify_acquire","shard_id":0}"#)));

    // Shard 2 is bucket 0 again: must wait for the spacing.
    let waiter = thread::spawn(move || {
        let mut b = Client::connect(addr);
        let v = b.call(r#"{"op":"identify_acquire","shard_id":"2"}"#);
        (v, start_t.elapsed())
    });
    // Shard 1 is bucket 1: not delayed by bucket 0.
    let mut c = Client::connect(addr);
    let t = Instant::now();
    assert!(is_ok(&c.call(r#"{"op":"identify_acquire","shard_id":1}"#)));
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "{:?}",
        t.elapsed()
    );

    let (v, elapsed) = waiter.join().unwrap();
    assert!(is_ok(&v));
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");

    // Third in bucket 0 waits another full spacing after the second.
    let t = Instant::now();
    assert!(is_ok(&a.call(r#"{"op":"identify_acquire","shard_id":4}"#)));
    assert!(start_t.elapsed() >= Duration::from_millis(400));
    assert!(t.elapsed() > Duration::from_millis(50));
}

#[test]
fn identify_fifo_and_disconnected_waiter_leaves_queue() {
    let addr = start(Config {
        identify_spacing: Duration::from_millis(500),
        ..cfg()
    });
    let start_t = Instant::now();
    let mut a = Client::connect(addr);
    assert!(is_ok(&a.call(r#"{"op":"identify_acquire","shard_id":0}"#)));
    // B queues, then leaves before its turn.
    let mut b = Client::connect(addr);
    b.send(r#"{"op":"identify_acquire","shard_id":0}"#);
    thread::sleep(Duration::from_millis(50));
    drop(b);
    // C queues behind B; it must get B's slot, not wait two spacings.
    let mut c = Client::connect(addr);
    assert!(is_ok(&c.call(r#"{"op":"identify_acquire","shard_id":0}"#)));
    let e = start_t.elapsed();
    assert!(e >= Duration::from_millis(500), "{e:?}");
    assert!(e < Duration::from_millis(950), "{e:?}");
}

#[test]
fn cooldown_acquire_refuse_expire() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    let v = c.call(r#"{"op":"cooldown_acquire","key":"k","window_ms":"300"}"#);
    assert_eq!(v, serde_json::json!({"ok": true, "retry_after_ms": "0"}));

    let v = c.call(r#"{"op":"cooldown_acquire","key":"k","window_ms":300}"#);
    assert_eq!(v["ok"], Value::Bool(false));
    assert!(v.get("error").is_none());
    let left: i64 = v["retry_after_ms"].as_str().unwrap().parse().unwrap();
    assert!((1..=300).contains(&left), "{left}");

    // Another key is independent.
    let v = c.call(r#"{"op":"cooldown_acquire","key":"other","window_ms":300}"#);
    assert!(is_ok(&v));

    thread::sleep(Duration::from_millis(left as u64 + 20));
    let v = c.call(r#"{"op":"cooldown_acquire","key":"k","window_ms":"300"}"#);
    assert_eq!(v, serde_json::json!({"ok": true, "retry_after_ms": "0"}));

    // Int64-safe: the largest window round-trips as a decimal string.
    let v = c.call(r#"{"op":"cooldown_acquire","key":"big","window_ms":"9223372036854775807"}"#);
    assert!(is_ok(&v));
    let v = c.call(r#"{"op":"cooldown_acquire","key":"big","window_ms":"1"}"#);
    let left: i64 = v["retry_after_ms"].as_str().unwrap().parse().unwrap();
    assert!(left > i64::MAX - 10_000, "{left}");

    // Bad windows are errors, not acquisitions.
    for bad in [
        r#"{"op":"cooldown_acquire","key":"x","window_ms":-1}"#,
        r#"{"op":"cooldown_acquire","key":"x","window_ms":"1.5"}"#,
        r#"{"op":"cooldown_acquire","key":"x","window_ms":"9223372036854775808"}"#,
        r#"{"op":"cooldown_acquire","key":"x"}"#,
        r#"{"op":"cooldown_acquire","window_ms":1}"#,
    ] {
        assert!(is_err(&c.call(bad)), "{bad}");
    }
    assert!(is_ok(
        &c.call(r#"{"op":"cooldown_acquire","key":"x","window_ms":1}"#)
    ));
}

#[test]
fn cooldown_keys_bounded_and_expired_keys_dropped() {
    let addr = start(Config {
        max_cooldown_keys: 3,
        ..cfg()
    });
    let mut c = Client::connect(addr);
    for k in ["a", "b", "c"] {
        let req = format!(r#"{{"op":"cooldown_acquire","key":"{k}","window_ms":400}}"#);
        assert!(is_ok(&c.call(&req)));
    }
    let v = c.call(r#"{"op":"cooldown_acquire","key":"d","window_ms":100}"#);
    assert!(is_err(&v), "{v}");
    thread::sleep(Duration::from_millis(450));
    assert!(is_ok(
        &c.call(r#"{"op":"cooldown_acquire","key":"d","window_ms":100}"#)
    ));
}

#[test]
fn http_global_limit() {
    let addr = start(Config {
        global_per_second: 5,
        ..cfg()
    });
    let mut c = Client::connect(addr);
    let start_t = Instant::now();
    for i in 0..5 {
        let b = format!("route-{i}");
        let v = c.call(&format!(
            r#"{{"op":"http_acquire","bucket":"{b}","global_exempt":false}}"#
        ));
        assert!(is_ok(&v));
        let v = c.call(&format!(
            r#"{{"op":"http_release","bucket":"{b}","status":200,"headers":{{}}}}"#
        ));
        assert!(is_ok(&v));
    }
    assert!(start_t.elapsed() < Duration::from_millis(500));
    // Exempt requests are not held back by the global limit.
    let t = Instant::now();
    assert!(is_ok(&c.call(
        r#"{"op":"http_acquire","bucket":"interactions","global_exempt":true}"#
    )));
    assert!(t.elapsed() < Duration::from_millis(300));
    // The 6th non-exempt acquire within the second waits for the window.
    assert!(is_ok(
        &c.call(r#"{"op":"http_acquire","bucket":"route-5"}"#)
    ));
    assert!(
        start_t.elapsed() >= Duration::from_secs(1),
        "{:?}",
        start_t.elapsed()
    );
}

#[test]
fn http_global_429_pauses_global() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"a"}"#)));
    let t = Instant::now();
    let v = c.call(
        r#"{"op":"http_release","bucket":"a","status":429,"headers":{"x-ratelimit-global":"true","retry-after":"0.3"}}"#,
    );
    assert!(is_ok(&v));
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"b"}"#)));
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn http_bucket_learned_from_release_headers() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    assert!(is_ok(
        &c.call(r#"{"op":"http_acquire","bucket":"GET /channels/1"}"#)
    ));
    let t = Instant::now();
    let v = c.call(
        r#"{"op":"http_release","bucket":"GET /channels/1","status":200,"headers":{"x-ratelimit-remaining":"0","x-ratelimit-reset-after":"0.300","x-ratelimit-bucket":"abc"}}"#,
    );
    assert!(is_ok(&v));
    // Another bucket is not affected.
    let mut d = Client::connect(addr);
    let t2 = Instant::now();
    assert!(is_ok(
        &d.call(r#"{"op":"http_acquire","bucket":"GET /guilds/1"}"#)
    ));
    assert!(t2.elapsed() < Duration::from_millis(200));
    // The exhausted one blocks until reset.
    assert!(is_ok(
        &c.call(r#"{"op":"http_acquire","bucket":"GET /channels/1"}"#)
    ));
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    // A release with remaining > 0 lets the next one through at once.
    let v = c.call(
        r#"{"op":"http_release","bucket":"GET /channels/1","status":200,"headers":{"x-ratelimit-remaining":4,"x-ratelimit-reset-after":"5"}}"#,
    );
    assert!(is_ok(&v));
    let t = Instant::now();
    assert!(is_ok(
        &c.call(r#"{"op":"http_acquire","bucket":"GET /channels/1"}"#)
    ));
    assert!(t.elapsed() < Duration::from_millis(200));
}

#[test]
fn http_bucket_hash_shared_between_routes() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    // Learn that route r2 is in hash bucket "h".
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"r2"}"#)));
    let v = c.call(
        r#"{"op":"http_release","bucket":"r2","status":200,"headers":{"x-ratelimit-bucket":"h","x-ratelimit-remaining":"3","x-ratelimit-reset-after":"1"}}"#,
    );
    assert!(is_ok(&v));
    // r1 reports the same hash exhausted: r2 must now wait too.
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"r1"}"#)));
    let t = Instant::now();
    let v = c.call(
        r#"{"op":"http_release","bucket":"r1","status":200,"headers":{"X-RateLimit-Bucket":"h","x-ratelimit-remaining":"0","x-ratelimit-reset-after":"0.25"}}"#,
    );
    assert!(is_ok(&v));
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"r2"}"#)));
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn http_bucket_429_uses_retry_after() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"x"}"#)));
    let t = Instant::now();
    let v = c.call(
        r#"{"op":"http_release","bucket":"x","status":"429","headers":{"retry-after":"0.2","x-ratelimit-scope":"user"}}"#,
    );
    assert!(is_ok(&v));
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"x"}"#)));
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn http_hold_release_rules() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    assert!(is_err(
        &c.call(r#"{"op":"http_release","bucket":"nope","status":200}"#)
    ));
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"x"}"#)));
    // Acquiring a bucket this connection already holds would deadlock: error.
    assert!(is_err(&c.call(r#"{"op":"http_acquire","bucket":"x"}"#)));
    // Another connection cannot release it.
    let mut d = Client::connect(addr);
    assert!(is_err(
        &d.call(r#"{"op":"http_release","bucket":"x","status":200}"#)
    ));
    // Status and headers are optional (e.g. a network failure).
    assert!(is_ok(&c.call(r#"{"op":"http_release","bucket":"x"}"#)));
    assert!(is_ok(&d.call(r#"{"op":"http_acquire","bucket":"x"}"#)));
}

#[test]
fn disconnect_releases_held_bucket() {
    let addr = start(cfg());
    let mut a = Client::connect(addr);
    assert!(is_ok(&a.call(r#"{"op":"http_acquire","bucket":"shared"}"#)));
    assert!(is_ok(&a.call(r#"{"op":"http_acquire","bucket":"other"}"#)));
    let mut b = Client::connect(addr);
    b.send(r#"{"op":"http_acquire","bucket":"shared"}"#);
    assert!(
        b.silent_for(Duration::from_millis(300)),
        "granted while held"
    );
    drop(a);
    let t = Instant::now();
    assert!(is_ok(&b.recv()));
    assert!(t.elapsed() < Duration::from_secs(2));
    let mut c = Client::connect(addr);
    assert!(is_ok(&c.call(r#"{"op":"http_acquire","bucket":"other"}"#)));
}

#[test]
fn malformed_requests_keep_connection_open() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    for bad in [
        "not json",
        "",
        "[1,2]",
        r#"{"op":42}"#,
        r#"{"nop":"ping"}"#,
        r#"{"op":"launch_missiles"}"#,
        r#"{"op":"identify_acquire"}"#,
        r#"{"op":"identify_acquire","shard_id":-3}"#,
        r#"{"op":"identify_acquire","shard_id":"abc"}"#,
        r#"{"op":"http_acquire"}"#,
        r#"{"op":"http_acquire","bucket":7}"#,
        r#"{"op":"http_acquire","bucket":"b","global_exempt":"yes"}"#,
        r#"{"op":"http_release","bucket":"b","headers":[]}"#,
        r#"{"op":"cooldown_acquire","key":"","window_ms":1}"#,
    ] {
        let v = c.call(bad);
        assert!(is_err(&v), "{bad:?} -> {v}");
    }
    c.w.write_all(&[0xff, 0xfe, b'\n']).unwrap();
    assert!(is_err(&c.recv()));
    assert!(is_ok(&c.call(r#"{"op":"ping"}"#)));
}

#[test]
fn overlong_line_is_refused_and_closed() {
    let addr = start(cfg());
    let mut c = Client::connect(addr);
    let big = format!(r#"{{"op":"ping","pad":"{}"}}"#, "x".repeat(70 * 1024));
    // The server may close before reading it all; ignore write errors.
    let _ = c.w.write_all(big.as_bytes());
    let _ = c.w.write_all(b"\n");
    let v = c.recv();
    assert!(is_err(&v), "{v}");
    assert!(v["error"].as_str().unwrap().contains("line"));
    // A line exactly at the limit is still accepted on a new connection.
    let mut d = Client::connect(addr);
    let pad = 64 * 1024 - r#"{"op":"ping","pad":""}"#.len();
    let at_limit = format!(r#"{{"op":"ping","pad":"{}"}}"#, "x".repeat(pad));
    assert_eq!(at_limit.len(), 64 * 1024);
    assert!(is_ok(&d.call(&at_limit)));
}

#[test]
fn too_many_connections_refused() {
    let addr = start(Config {
        max_connections: 2,
        ..cfg()
    });
    let mut a = Client::connect(addr);
    let mut b = Client::connect(addr);
    assert!(is_ok(&a.call(r#"{"op":"ping"}"#)));
    assert!(is_ok(&b.call(r#"{"op":"ping"}"#)));
    let mut c = Client::connect(addr);
    let v = c.recv();
    assert_eq!(
        v,
        serde_json::json!({"ok": false, "error": "too many connections"})
    );
    c.assert_eof();
    // Once a slot frees up, new connections are served again.
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut d = TcpStream::connect(addr).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = d.write_all(b"{\"op\":\"ping\"}\n");
        let mut s = String::new();
        let _ = BufReader::new(d).read_line(&mut s);
        if s == "{\"ok\":true}\n" {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        thread::sleep(Duration::from_millis(20));
    }
}
