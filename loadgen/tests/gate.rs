//! The fleet's identify gate against a real coordinator: grants for one
//! application's bucket are spaced, different applications ("key") do not
//! wait for each other.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use loadgen::gate::Gate;

fn coordinator(spacing_ms: u64) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let cfg = loadgen::Config {
        max_concurrency: 1,
        identify_spacing: Duration::from_millis(spacing_ms),
        ..loadgen::Config::default()
    };
    std::thread::spawn(move || loadgen::serve(l, cfg));
    addr
}

fn wait_grants(g: &Gate, n: usize, within: Duration) -> Vec<(usize, u32)> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(g.grants[0].lock().unwrap().drain(..));
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}

#[test]
fn one_application_is_spaced_others_are_not() {
    let addr = coordinator(400);
    let g = Gate::start(addr, 4, 1).unwrap();
    let t = Instant::now();
    // Two shards of application 7 share bucket 0 (max_concurrency 1) ...
    assert!(g.request((0, 1, 0, 7, 0)));
    assert!(g.request((0, 2, 0, 7, 1)));
    // ... application 8 has its own.
    assert!(g.request((0, 3, 0, 8, 0)));
    let first = wait_grants(&g, 2, Duration::from_secs(2));
    assert_eq!(
        first.len(),
        2,
        "app 7's first shard and app 8 at once: {first:?}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
    let second = wait_grants(&g, 1, Duration::from_secs(3));
    assert_eq!(second.len(), 1);
    assert!(
        t.elapsed() >= Duration::from_millis(400),
        "spaced: {:?}",
        t.elapsed()
    );
    let mut slots: Vec<usize> = first.iter().chain(&second).map(|g| g.0).collect();
    slots.sort();
    assert_eq!(slots, vec![1, 2, 3]);
    g.stop();
}

#[test]
fn an_unreachable_coordinator_is_a_clear_error() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    let e = Gate::start(addr, 1, 1).err().expect("refused");
    assert!(e.to_string().contains("coordinator"), "{e}");
}
