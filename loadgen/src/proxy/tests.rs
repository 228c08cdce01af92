//! Tests of the proxy: through its handle (pass-through, latency, stall
//! and its bounded buffer, drop, the connection limit, an upstream that
//! is down, scripts, stop) and of the fault-script parser (script.rs).

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::pump::CHUNK;
use super::*;

fn any() -> SocketAddr {
    (Ipv4Addr::LOCALHOST, 0).into()
}

/// An echo server; returns its address.
fn echo_server() -> SocketAddr {
    let l = TcpListener::bind(any()).unwrap();
    let addr = l.local_addr().unwrap();
    thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            thread::spawn(move || {
                let mut r = match s.try_clone() {
                    Ok(r) => r,
                    Err(_) => return,
                };
                let _ = io::copy(&mut r, &mut s);
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    addr
}

fn client(p: &Proxy) -> TcpStream {
    let s = TcpStream::connect(p.local_addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).unwrap();
    let mut got = vec![0u8; msg.len()];
    s.read_exact(&mut got).unwrap();
    got
}

/// True if the read returns EOF or an error (closed) within the timeout.
fn closed_within(s: &mut TcpStream, t: Duration) -> bool {
    s.set_read_timeout(Some(t)).unwrap();
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

fn wait_for(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    false
}

#[test]
fn pass_through_echo() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    assert_ne!(p.local_addr().port(), 0);
    let mut c = client(&p);
    assert_eq!(round_trip(&mut c, b"hello"), b"hello");
    // A larger transfer, written and read concurrently.
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut w = c.try_clone().unwrap();
    let d2 = data.clone();
    let t = thread::spawn(move || w.write_all(&d2).unwrap());
    let mut got = vec![0u8; data.len()];
    c.read_exact(&mut got).unwrap();
    t.join().unwrap();
    assert!(got == data);
    // Half-close propagates: EOF comes back after the echo.
    c.shutdown(Shutdown::Write).unwrap();
    assert!(closed_within(&mut c, Duration::from_secs(5)));
    let st = p.stats();
    assert_eq!(st.accepted, 1);
    assert_eq!(st.bytes_up, 5 + 3_000_000);
    assert_eq!(st.bytes_down, 5 + 3_000_000);
    assert!(wait_for(|| p.stats().open == 0), "{:?}", p.stats());
    assert_eq!(p.stats().pending, 0);
    p.stop();
}

#[test]
fn latency_adds_at_least_the_delay() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    let mut c = client(&p);
    round_trip(&mut c, b"warm");
    p.set(Fault::Latency(Duration::from_millis(150)));
    assert_eq!(p.fault(), Fault::Latency(Duration::from_millis(150)));
    let t = Instant::now();
    assert_eq!(round_trip(&mut c, b"x"), b"x");
    // Delayed in both directions.
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    // Order is kept across several chunks.
    for i in 0..20u8 {
        c.write_all(&[i]).unwrap();
        thread::sleep(Duration::from_millis(2));
    }
    let mut got = [0u8; 20];
    c.read_exact(&mut got).unwrap();
    assert_eq!(got.to_vec(), (0..20u8).collect::<Vec<_>>());
    p.set(Fault::Pass);
    let t = Instant::now();
    round_trip(&mut c, b"y");
    assert!(
        t.elapsed() < Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn stall_forwards_nothing_then_resumes() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    let mut c = client(&p);
    round_trip(&mut c, b"before");
    p.set(Fault::Stall);
    c.write_all(b"during").unwrap();
    // A new connection during the stall is accepted but gets nothing.
    let mut c2 = client(&p);
    c2.write_all(b"new").unwrap();
    for s in [&mut c, &mut c2] {
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 16];
        match s.read(&mut b) {
            Err(e) => assert!(matches!(
                e.kind(),
                ErrorKind::WouldBlock | ErrorKind::TimedOut
            )),
            Ok(n) => panic!("stalled proxy forwarded {n} bytes"),
        }
    }
    let before = p.stats();
    assert_eq!(before.bytes_up, 6);
    assert_eq!(before.open, 2);
    p.set(Fault::Pass);
    for (s, msg) in [(&mut c, &b"during"[..]), (&mut c2, &b"new"[..])] {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, msg);
    }
    assert_eq!(round_trip(&mut c, b"after"), b"after");
}

#[test]
fn stall_buffers_a_bounded_amount() {
    let max = 64 * 1024;
    let p = Proxy::start_with_limits(any(), echo_server(), 8, max).unwrap();
    let mut c = client(&p);
    round_trip(&mut c, b"x");
    p.set(Fault::Stall);
    let total = 8 << 20;
    let mut w = c.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let data = vec![7u8; total];
        w.write_all(&data).unwrap();
    });
    thread::sleep(Duration::from_millis(500));
    let st = p.stats();
    assert!(st.pending as usize <= max + CHUNK, "pending {}", st.pending);
    assert!(st.pending > 0);
    assert_eq!(st.bytes_up, 1);
    // Resume: everything arrives.
    p.set(Fault::Pass);
    let mut got = vec![0u8; total];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.read_exact(&mut got).unwrap();
    writer.join().unwrap();
    assert!(got.iter().all(|b| *b == 7));
}

#[test]
fn drop_closes_existing_and_new_connections() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    let mut a = client(&p);
    let mut b = client(&p);
    round_trip(&mut a, b"a");
    round_trip(&mut b, b"b");
    let t = Instant::now();
    p.set(Fault::Drop);
    assert!(closed_within(&mut a, Duration::from_secs(2)));
    assert!(closed_within(&mut b, Duration::from_secs(2)));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // New connections are closed at once (the connect itself may succeed).
    if let Ok(mut n) = TcpStream::connect(p.local_addr()) {
        assert!(closed_within(&mut n, Duration::from_secs(2)));
    }
    assert!(wait_for(|| p.stats().open == 0));
    let st = p.stats();
    assert!(st.dropped >= 3, "{st:?}");
    // Back to pass: works again.
    p.set(Fault::Pass);
    let mut c = client(&p);
    assert_eq!(round_trip(&mut c, b"again"), b"again");
}

#[test]
fn drop_during_stall_closes_waiting_connections() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    p.set(Fault::Stall);
    let mut c = client(&p);
    assert!(wait_for(|| p.stats().open == 1));
    p.set(Fault::Drop);
    assert!(closed_within(&mut c, Duration::from_secs(2)));
    assert!(wait_for(|| p.stats().open == 0));
}

#[test]
fn connection_limit() {
    let p = Proxy::start_with_limits(any(), echo_server(), 2, MAX_PENDING).unwrap();
    let mut a = client(&p);
    let mut b = client(&p);
    round_trip(&mut a, b"a");
    round_trip(&mut b, b"b");
    let mut c = client(&p);
    assert!(closed_within(&mut c, Duration::from_secs(2)));
    assert_eq!(p.stats().refused, 1);
    drop(a);
    assert!(wait_for(|| p.stats().open == 1));
    let mut d = client(&p);
    assert_eq!(round_trip(&mut d, b"d"), b"d");
}

#[test]
fn upstream_down_closes_client() {
    // A port nobody listens on.
    let dead = TcpListener::bind(any()).unwrap().local_addr().unwrap();
    let p = Proxy::start(any(), dead).unwrap();
    let mut c = client(&p);
    assert!(closed_within(&mut c, Duration::from_secs(6)));
    assert!(wait_for(|| p.stats().upstream_failures == 1));
    assert!(wait_for(|| p.stats().open == 0));
}

#[test]
fn script_runs_in_order() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    let steps = parse_script("0ms:latency=50ms, 100ms:stall, 200ms:pass").unwrap();
    let h = p.run_script(steps);
    assert!(wait_for(
        || p.fault() == Fault::Latency(Duration::from_millis(50))
    ));
    assert!(wait_for(|| p.fault() == Fault::Stall));
    h.join().unwrap();
    assert_eq!(p.fault(), Fault::Pass);
    // Stopping ends a script that is still waiting.
    let h = p.run_script(parse_script("60s:drop").unwrap());
    let t = Instant::now();
    p.stop();
    h.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn stop_closes_connections() {
    let p = Proxy::start(any(), echo_server()).unwrap();
    let mut c = client(&p);
    round_trip(&mut c, b"x");
    let addr = p.local_addr();
    p.stop();
    assert!(closed_within(&mut c, Duration::from_secs(2)));
    // The listener is gone.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
}

#[test]
fn script_parses() {
    let s = parse_script("0s:pass,5s:latency=200ms,10s:stall,20s:drop,25s:pass").unwrap();
    assert_eq!(
        s,
        vec![
            Step {
                at: Duration::ZERO,
                fault: Fault::Pass
            },
            Step {
                at: Duration::from_secs(5),
                fault: Fault::Latency(Duration::from_millis(200))
            },
            Step {
                at: Duration::from_secs(10),
                fault: Fault::Stall
            },
            Step {
                at: Duration::from_secs(20),
                fault: Fault::Drop
            },
            Step {
                at: Duration::from_secs(25),
                fault: Fault::Pass
            },
        ]
    );
    let s = parse_script(" 1.5s : latency = 0.5s , 1500ms:PASS ").unwrap();
    assert_eq!(s[0].at, Duration::from_millis(1500));
    assert_eq!(s[0].fault, Fault::Latency(Duration::from_millis(500)));
    assert_eq!(s[1].fault, Fault::Pass);
    assert_eq!(
        Fault::Latency(Duration::from_millis(200)).to_string(),
        "latency=200ms"
    );
    assert_eq!(
        Fault::Latency(Duration::from_secs(2)).to_string(),
        "latency=2s"
    );
}

#[test]
fn script_errors_are_clear() {
    let cases = [
        ("", "empty fault script"),
        ("5s:pass,", "step 2"),
        ("5s:pass,,6s:stall", "empty step"),
        ("5:pass", "needs a unit: ms or s"),
        ("5m:pass", "needs a unit"),
        ("5s", "expected TIME:FAULT"),
        ("0s:pass,5s:latncy=200ms", "unknown fault \"latncy=200ms\""),
        ("0s:latency", "latency needs a delay"),
        ("0s:latency=fast", "bad latency"),
        ("-1s:pass", "bad time"),
        ("10s:pass,5s:stall", "before the previous step"),
    ];
    for (input, want) in cases {
        let e = parse_script(input).unwrap_err();
        assert!(e.contains(want), "{input:?}: {e:?} lacks {want:?}");
    }
    let e = parse_script("0s:pass,5s:latncy=200ms").unwrap_err();
    assert!(
        e.starts_with("fault script step 2 (\"5s:latncy=200ms\")"),
        "{e}"
    );
    assert!(
        e.contains("expected pass, latency=DURATION, stall or drop"),
        "{e}"
    );
}
