//! The egress (ADR-11) as a separate process, against real local HTTP
//! servers this test runs: what it refuses (private addresses by default,
//! names resolving to them, redirects into them), what it bounds (a hanging
//! endpoint, a huge answer), what it relays (a 500), and the endpoint check
//! of ADR-12 against an endpoint verifying signatures with PyNaCl.
//!
//! The PyNaCl test is `#[ignore]`d like the other library tests: run it
//! with a venv from tests/py/requirements.txt,
//! `GATEWAYD_PYTHON=/var/cache/gatewayd-ci/venv/bin/python cargo test --test egress -- --include-ignored`.

mod support;

use support::python::NaclEndpoint;
use support::registry::kv;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gatewayd::egress::child::EgressChild;
use gatewayd::egress::client::{Addr, Defaults};
use gatewayd::egress::{EgressClient, Reason};

/// A `gatewayd egress` child on a Unix socket, and a client of it.
struct Egress {
    _dir: tempfile::TempDir,
    _child: EgressChild,
    client: EgressClient,
}

fn egress(allow: &[&str]) -> Egress {
    let dir = tempfile::tempdir().unwrap();
    let addr = Addr::Unix(dir.path().join("egress.sock"));
    let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
    let child = EgressChild::spawn(
        &PathBuf::from(env!("CARGO_BIN_EXE_gatewayd")),
        &addr,
        &allow,
        64,
    )
    .unwrap();
    Egress {
        _dir: dir,
        _child: child,
        client: EgressClient::new(addr, Defaults::default()),
    }
}

/// A local HTTP server: each path is a behaviour. Counts connections.
struct Endpoint {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

fn endpoint() -> Endpoint {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || serve(s));
        }
    });
    Endpoint { addr, accepted }
}

fn serve(mut s: TcpStream) {
    let Some((path, body)) = support::http::read_request(&s) else {
        return;
    };
    let reply = |s: &mut TcpStream, head: &str, body: &[u8]| {
        let _ = s.write_all(
            format!(
                "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        );
        let _ = s.write_all(body);
    };
    match path.as_str() {
        "/ok" => reply(
            &mut s,
            "200 OK\r\nContent-Type: application/json",
            b"{\"ok\":true}",
        ),
        "/echo" => reply(&mut s, "200 OK", &body),
        "/500" => reply(&mut s, "500 Internal Server Error", b"{\"boom\":1}"),
        "/redirect" => reply(
            &mut s,
            "302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/",
            b"",
        ),
        "/hang" => std::thread::sleep(Duration::from_secs(10)),
        "/huge-length" => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10737418240\r\n\r\n");
            let _ = s.write_all(&[b'x'; 4096]);
        }
        "/huge-stream" => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let chunk = [b'x'; 16384];
            for _ in 0..(1 << 16) {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        }
        "/huge-chunked" => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            for _ in 0..(1 << 16) {
                if s.write_all(b"4000\r\n").is_err()
                    || s.write_all(&[b'y'; 0x4000]).is_err()
                    || s.write_all(b"\r\n").is_err()
                {
                    break;
                }
            }
        }
        "/chunked" => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n");
        }
        "/garbage" => {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n");
        }
        // Accepts anything: the endpoint check must refuse it.
        "/accept-anything" => reply(
            &mut s,
            "200 OK\r\nContent-Type: application/json",
            b"{\"type\":1}",
        ),
        _ => reply(&mut s, "404 Not Found", b""),
    }
}

fn soon() -> Instant {
    Instant::now() + Duration::from_millis(2_500)
}

fn url(e: &Endpoint, path: &str) -> String {
    format!("http://{}{path}", e.addr)
}

fn refused(r: Result<impl std::fmt::Debug, gatewayd::egress::EgressError>) -> (Reason, String) {
    match r {
        Ok(v) => panic!("expected a refusal, got {v:?}"),
        Err(e) => (e.reason, e.detail),
    }
}

#[test]
fn private_addresses_are_refused_by_default_before_connecting() {
    let eg = egress(&[]);
    let ep = endpoint();
    for u in [
        url(&ep, "/ok"),
        format!("http://localhost:{}/ok", ep.addr.port()),
        format!("http://[::ffff:127.0.0.1]:{}/ok", ep.addr.port()),
        format!("http://[::1]:{}/ok", ep.addr.port()),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/".to_string(),
    ] {
        let (reason, why) = refused(eg.client.request("GET", &u, &[], b"", soon()));
        assert_eq!(reason, Reason::RefusedAddress, "{u}: {why}");
    }
    assert_eq!(ep.accepted.load(Ordering::SeqCst), 0, "nothing may connect");
    let (reason, _) = refused(eg.client.request("GET", "gopher://x/", &[], b"", soon()));
    assert_eq!(reason, Reason::BadUrl);
    let counted: u64 = eg
        .client
        .stats
        .outcomes()
        .iter()
        .filter(|(o, _)| *o == "refused_address")
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(counted, 6);
}

#[test]
fn the_allow_list_lets_exactly_its_ranges_through() {
    let eg = egress(&["127.0.0.0/8"]);
    let ep = endpoint();
    let r = eg
        .client
        .request("GET", &url(&ep, "/ok"), &[], b"", soon())
        .unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"{\"ok\":true}"[..]));
    // `localhost` resolves into the allowed range too.
    let r = eg
        .client
        .request(
            "POST",
            &format!("http://localhost:{}/echo", ep.addr.port()),
            &[],
            b"abc",
            soon(),
        )
        .unwrap();
    assert_eq!(r.body, b"abc");
    let r = eg
        .client
        .request("GET", &url(&ep, "/chunked"), &[], b"", soon())
        .unwrap();
    assert_eq!(r.body, b"hello world");
    // Not named: still refused.
    for u in [
        "http://10.0.0.1/",
        "http://169.254.169.254/",
        "http://192.168.1.1/",
    ] {
        assert_eq!(
            refused(eg.client.request("GET", u, &[], b"", soon())).0,
            Reason::RefusedAddress,
            "{u}"
        );
    }
}

#[test]
fn a_redirect_is_returned_not_followed() {
    let eg = egress(&["127.0.0.0/8"]);
    let ep = endpoint();
    let r = eg
        .client
        .request("GET", &url(&ep, "/redirect"), &[], b"", soon())
        .unwrap();
    assert_eq!(r.status, 302);
    let loc = r
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("location"));
    assert_eq!(
        loc.map(|(_, v)| v.as_str()),
        Some("http://169.254.169.254/latest/meta-data/")
    );
    // Following it by hand, as a caller that re-validates would, is refused.
    assert_eq!(
        refused(eg.client.request("GET", &loc.unwrap().1, &[], b"", soon())).0,
        Reason::RefusedAddress
    );
}

#[test]
fn a_hanging_endpoint_times_out_within_its_bound_and_slows_no_other_call() {
    let eg = Arc::new(egress(&["127.0.0.0/8"]));
    let ep = endpoint();
    let hang = url(&ep, "/hang");
    let e2 = eg.clone();
    let t = std::thread::spawn(move || {
        let start = Instant::now();
        let r = e2
            .client
            .deliver(&hang, &[1; 32], b"{}", start + Duration::from_millis(1_500));
        (r, start.elapsed())
    });
    // Beside it, a fast endpoint answers at once.
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let fast = eg
        .client
        .deliver(&url(&ep, "/ok"), &[1; 32], b"{}", soon())
        .unwrap();
    assert_eq!(fast.0, 200);
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "fast call took {:?}",
        start.elapsed()
    );
    let (r, took) = t.join().unwrap();
    assert_eq!(refused(r).0, Reason::Timeout);
    assert!(
        took >= Duration::from_millis(1_400) && took < Duration::from_millis(2_000),
        "{took:?}"
    );
    println!("hanging endpoint: timeout after {took:?} (deadline 1.5 s)");
}

/// Calls started from one thread without waiting (`EgressClient::start`,
/// as the interaction deliverer makes them): their outcomes come as their
/// answers do, not in the order started; a hanging one is given up at its
/// deadline without holding the others; each outcome is counted once.
#[test]
fn started_calls_finish_as_their_answers_come() {
    let eg = egress(&["127.0.0.0/8"]);
    let ep = endpoint();
    let c = &eg.client;
    let mut calls = c.calls();
    let start = Instant::now();
    let hang_by = start + Duration::from_millis(800);
    c.start_delivery(&mut calls, 1, &url(&ep, "/hang"), &[1; 32], b"{}", hang_by)
        .unwrap();
    c.start(&mut calls, 2, "GET", &url(&ep, "/ok"), &[], b"", soon())
        .unwrap();
    c.start(&mut calls, 3, "GET", &url(&ep, "/500"), &[], b"", soon())
        .unwrap();
    assert_eq!(calls.len(), 3);
    let mut done = Vec::new();
    while !calls.is_empty() {
        let due = calls.next_due().unwrap();
        let o = match calls.receiver().recv_deadline(due) {
            Ok(a) => calls.finish(a),
            Err(_) => calls.expire(Instant::now()),
        };
        if let Some((tag, r)) = o {
            done.push((tag, r.map(|rep| rep.status), start.elapsed()));
        }
    }
    let tags: Vec<u64> = done.iter().map(|d| d.0).collect();
    assert_eq!(tags[2], 1, "the hanging call last: {done:?}");
    assert!(
        done[..2].iter().all(|d| d.2 < Duration::from_millis(700)),
        "the others answered while it hung: {done:?}"
    );
    let statuses: Vec<_> = done[..2].iter().map(|d| (d.0, d.1.clone())).collect();
    assert!(statuses.contains(&(2, Ok(200))) && statuses.contains(&(3, Ok(500))));
    assert_eq!(refused(done[2].1.clone()).0, Reason::Timeout);
    let took = done[2].2;
    assert!(
        took >= Duration::from_millis(750) && took < Duration::from_millis(2_000),
        "given up by its deadline and grace: {took:?}"
    );
    let count = |o: &str| c.stats.outcomes().into_iter().find(|x| x.0 == o).unwrap().1;
    assert_eq!(
        (count("status_2xx"), count("status_5xx"), count("timeout")),
        (1, 1, 1)
    );
}

#[test]
fn huge_answers_are_cut_with_too_large() {
    let eg = egress(&["127.0.0.0/8"]);
    let ep = endpoint();
    for p in ["/huge-length", "/huge-stream", "/huge-chunked"] {
        let start = Instant::now();
        let (reason, why) = refused(eg.client.request("GET", &url(&ep, p), &[], b"", soon()));
        assert_eq!(reason, Reason::TooLarge, "{p}: {why}");
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{p}: {:?}",
            start.elapsed()
        );
    }
    let (reason, _) = refused(
        eg.client
            .request("GET", &url(&ep, "/garbage"), &[], b"", soon()),
    );
    assert_eq!(reason, Reason::MalformedResponse);
}

#[test]
fn a_500_is_reported_as_such() {
    let eg = egress(&["127.0.0.0/8"]);
    let ep = endpoint();
    let (status, body) = eg
        .client
        .deliver(&url(&ep, "/500"), &[2; 32], b"{}", soon())
        .unwrap();
    assert_eq!((status, body.as_slice()), (500, &b"{\"boom\":1}"[..]));
    let five: u64 = eg
        .client
        .stats
        .outcomes()
        .iter()
        .filter(|(o, _)| *o == "status_5xx")
        .map(|(_, n)| *n)
        .sum();
    assert_eq!(five, 1);
}

#[test]
fn nothing_listening_is_connect_failed() {
    let eg = egress(&["127.0.0.0/8"]);
    let port = support::node::free_port();
    let (reason, _) = refused(eg.client.request(
        "GET",
        &format!("http://127.0.0.1:{port}/"),
        &[],
        b"",
        soon(),
    ));
    assert_eq!(reason, Reason::ConnectFailed);
}

fn registry(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .arg("registry")
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs PyNaCl: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn set_endpoint_accepts_a_verifying_endpoint_and_refuses_one_that_accepts_anything() {
    let dir = tempfile::tempdir().unwrap();
    let out = registry(dir.path(), &["add-app", "--name", "http-bot"]);
    let app = kv(&out, "application_id").unwrap();
    let show = registry(dir.path(), &["show-app", "--app", &app]);
    let key = kv(&show, "verify_key").unwrap();
    assert_eq!(key.len(), 64);

    let ep = NaclEndpoint::start(&key, "pong");
    let good = ep.url.clone();
    let allow = ["--egress-allow-private-cidrs", "127.0.0.0/8"];

    // Without the allow list the check cannot even reach it.
    let out = registry(dir.path(), &["set-endpoint", "--app", &app, "--url", &good]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refused_address"),
        "{out:?}"
    );

    let out = registry(
        dir.path(),
        &[&["set-endpoint", "--app", &app, "--url", &good][..], &allow].concat(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        kv(&out, "interactions_endpoint_url").as_deref(),
        Some(good.as_str())
    );
    let show = registry(dir.path(), &["show-app", "--app", &app]);
    assert_eq!(
        kv(&show, "interactions_endpoint_url").as_deref(),
        Some(good.as_str())
    );
    assert_eq!(
        kv(&show, "verify_key"),
        Some(key.clone()),
        "the key is stable"
    );

    // An endpoint that answers the PING but checks no signature.
    let ep = endpoint();
    let lax = url(&ep, "/accept-anything");
    let out = registry(
        dir.path(),
        &[&["set-endpoint", "--app", &app, "--url", &lax][..], &allow].concat(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad signature") && err.contains("expected 401"),
        "{err}"
    );
    // One that does not answer the PING.
    let out = registry(
        dir.path(),
        &[
            &["set-endpoint", "--app", &app, "--url", &url(&ep, "/500")][..],
            &allow,
        ]
        .concat(),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("signed PING"),
        "{out:?}"
    );
    // Neither replaced the verified URL.
    let show = registry(dir.path(), &["show-app", "--app", &app]);
    assert_eq!(
        kv(&show, "interactions_endpoint_url").as_deref(),
        Some(good.as_str())
    );
    drop(ep);
}

#[test]
fn the_node_starts_its_egress_and_shows_the_verify_key() {
    let node = support::node::Node::start(&[]);
    assert!(
        node.dir.path().join("egress.sock").exists(),
        "the child egress listens"
    );
    let r = support::http::json_request(
        node.gateway,
        "GET",
        "/api/v10/applications/@me",
        Some(&format!("Bot {}", node.token)),
        None,
    );
    let me = r.json();
    let key = me["verify_key"].as_str().unwrap().to_string();
    assert_eq!(key.len(), 64);
    let show = registry(
        node.dir.path(),
        &["show-app", "--app", me["id"].as_str().unwrap()],
    );
    assert_eq!(kv(&show, "verify_key"), Some(key));
    let m = support::metrics::metrics(node.admin);
    assert_eq!(
        support::metrics::metric_sum(
            &m,
            "gatewayd_egress_requests_total",
            &[("outcome", "refused_address")]
        ),
        0.0
    );
    let (_, text) = support::http::http_get(node.admin, "/metrics").unwrap();
    assert!(text.contains("gatewayd_egress_requests_total{outcome=\"timeout\"} 0"));
}

/// `--egress-addr 127.0.0.1:0` (every listener of a node under test on
/// port 0): the node learns the port its egress child chose, talks to it
/// there and writes it to gatewayd.addrs (the node used to poll port 0 and
/// exit after 10 s, issue 40). The same for a bare `gatewayd egress`.
#[test]
fn an_egress_on_tcp_port_0_is_found_where_it_listens() {
    let node = support::node::Node::start(&["--egress-addr", "127.0.0.1:0"]);
    let addrs = std::fs::read_to_string(node.dir.path().join("gatewayd.addrs")).unwrap();
    let egress: SocketAddr = addrs
        .lines()
        .find_map(|l| l.strip_prefix("egress="))
        .unwrap_or_else(|| panic!("no egress= line in gatewayd.addrs:\n{addrs}"))
        .parse()
        .unwrap();
    assert!(egress.ip().is_loopback() && egress.port() != 0, "{egress}");
    // The egress answers there: a call refused by its guard is an answer
    // from it, not a connection failure.
    let client = EgressClient::new(Addr::Tcp(egress.to_string()), Defaults::default());
    let (reason, why) = refused(client.request("GET", "http://10.0.0.1/", &[], b"", soon()));
    assert_eq!(reason, Reason::RefusedAddress, "{why}");
    // The node is whole: its REST edge answers as ever.
    let r = support::http::json_request(
        node.gateway,
        "GET",
        "/api/v10/applications/@me",
        Some(&format!("Bot {}", node.token)),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);

    // A child of the tests' own on TCP port 0.
    let child = EgressChild::spawn(
        &PathBuf::from(env!("CARGO_BIN_EXE_gatewayd")),
        &Addr::Tcp("127.0.0.1:0".into()),
        &[],
        64,
    )
    .unwrap();
    let Addr::Tcp(bound) = &child.addr else {
        panic!("a TCP egress listens on TCP: {:?}", child.addr)
    };
    let bound: SocketAddr = bound.parse().unwrap();
    assert_ne!(bound.port(), 0);
    let client = EgressClient::new(child.addr.clone(), Defaults::default());
    let (reason, _) = refused(client.request("GET", "http://10.0.0.1/", &[], b"", soon()));
    assert_eq!(reason, Reason::RefusedAddress);
}
