//! Strangers holding the listeners beside the gateway (issue 41): 1,000
//! connections on the admin port and on the portal, half silent and half
//! trickling a request a byte every 0.3 s, each from loopback source
//! addresses of their own. A health check still gets `/readyz`, a signed-in
//! developer still gets a page, and every stranger is closed at its
//! request's deadline (2 s admin, 3 s portal), not held for as long as it
//! cares to trickle. The old admin port read one request at a time (10 idle
//! connections held `/readyz` for 20 s); the portal's 4 handlers read their
//! own requests (8 idle connections delayed pages by 6 s).
//!
//! The latencies are printed (run with `--nocapture`); docs/bench/issue41.md
//! has the figures. The assertions only bound them loosely (5 s), so a
//! busy machine does not fail them: what they rule out is the old queueing.
//! The same for the cluster link: tests/cluster.rs
//! `strangers_trickling_and_silent_on_the_link_do_not_stop_a_hand_off`.

mod support;

use std::time::{Duration, Instant};

use support::flood::{stranger, Flood};
use support::http::http_get;
use support::node::Node;
use support::portal;
use support::registry::Registry;

const STRANGERS: usize = 1000;
const EVERY: Duration = Duration::from_millis(300);

/// Half silent, half trickling a request head, from four source addresses.
fn flood(to: std::net::SocketAddr, first: &[u8]) -> Vec<Flood> {
    let per = STRANGERS / 4;
    vec![
        Flood::silent(stranger(0), to, per),
        Flood::silent(stranger(1), to, per),
        Flood::trickle(stranger(2), to, per, first, b"X-Slow: yes\r\n", EVERY),
        Flood::trickle(stranger(3), to, per, first, b"X-Slow: yes\r\n", EVERY),
    ]
}

/// (p50, max) of `n` timings of `f`, which must hold each time.
fn timed(n: usize, mut f: impl FnMut() -> bool) -> (Duration, Duration) {
    let mut t: Vec<Duration> = (0..n)
        .map(|i| {
            let t0 = Instant::now();
            assert!(f(), "request {i} failed");
            t0.elapsed()
        })
        .collect();
    t.sort();
    (t[n / 2], t[n - 1])
}

/// Waits until every stranger of `floods` was closed by the listener.
fn all_closed(floods: &[Flood], within: Duration) -> Duration {
    let t0 = Instant::now();
    loop {
        let ended: usize = floods
            .iter()
            .map(|f| f.ended.load(std::sync::atomic::Ordering::Relaxed) + f.silent_ended())
            .sum();
        let opened: usize = floods.iter().map(|f| f.opened).sum();
        if ended >= opened {
            return t0.elapsed();
        }
        assert!(
            t0.elapsed() < within,
            "{ended} of {opened} strangers closed after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_thousand_strangers_on_the_admin_port_delay_no_health_check() {
    let node = Node::start(&["--no-demo-traffic"]);
    let floods = flood(node.admin, b"GET /readyz HTTP/1.1\r\n");
    let opened: usize = floods.iter().map(|f| f.opened).sum();
    assert!(
        opened >= STRANGERS * 9 / 10,
        "only {opened} strangers connected"
    );
    let (p50, max) = timed(
        20,
        || matches!(http_get(node.admin, "/readyz"), Ok((200, b)) if b == "ready\n"),
    );
    eprintln!("admin /readyz with {opened} strangers held: p50 {p50:?}, max {max:?} (20 requests)");
    assert!(max < Duration::from_secs(5), "/readyz took {max:?}");
    // The metrics page too (the biggest answer the port gives).
    let (p50, max) = timed(5, || {
        matches!(http_get(node.admin, "/metrics"), Ok((200, _)))
    });
    eprintln!("admin /metrics with {opened} strangers held: p50 {p50:?}, max {max:?} (5 requests)");
    // Every stranger closed by its request's deadline (2 s), not when it
    // stops trickling.
    let closed = all_closed(&floods, Duration::from_secs(15));
    eprintln!("admin: every stranger closed {closed:?} after the checks");
}

#[test]
fn a_thousand_strangers_on_the_portal_delay_no_page() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let app = Registry::new(node.dir.path()).add_app("strangers-bot", 0);
    let me = portal::sign_in(addr, &app.token).unwrap();
    let floods = flood(addr, b"GET / HTTP/1.1\r\n");
    let opened: usize = floods.iter().map(|f| f.opened).sum();
    assert!(
        opened >= STRANGERS * 9 / 10,
        "only {opened} strangers connected"
    );
    let (p50, max) = timed(20, || {
        let page = me.get("/");
        page.status == 200 && page.body.contains("strangers-bot")
    });
    eprintln!("portal signed-in page with {opened} strangers held: p50 {p50:?}, max {max:?} (20 requests)");
    assert!(max < Duration::from_secs(5), "the page took {max:?}");
    let (p50, max) = timed(20, || me.get("/api/health").status == 200);
    eprintln!(
        "portal /api/health with {opened} strangers held: p50 {p50:?}, max {max:?} (20 requests)"
    );
    let closed = all_closed(&floods, Duration::from_secs(15));
    eprintln!("portal: every stranger closed {closed:?} after the checks");
}
