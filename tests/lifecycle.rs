//! Session lifecycle against a real node: resume, drain on SIGTERM, wss://.

mod support;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot::{connect, login, recv};
use support::node::Node;
use support::BOT_INTENTS;
use tungstenite::{Message, WebSocket};

fn send<S: std::io::Read + std::io::Write>(ws: &mut WebSocket<S>, v: Value) {
    support::bot::send_json(ws, &v);
}

/// Hello, Identify, READY and the demo server's GUILD_CREATE; returns
/// (session_id, last seq seen).
fn identify<S: std::io::Read + std::io::Write>(
    ws: &mut WebSocket<S>,
    token: &str,
) -> (String, u64) {
    let (ready, guild_creates) = login(ws, token, BOT_INTENTS);
    assert_eq!(guild_creates.len(), 1, "the demo bot is on one server");
    (ready["d"]["session_id"].as_str().unwrap().to_string(), 2)
}

#[test]
fn resume_after_a_dropped_connection_keeps_the_session() {
    // Four workers: the kernel spreads the reconnects over them, so most
    // resumes land on a worker that is not the session's and are handed over.
    let node = Node::start(&["--workers", "4", "--no-demo-traffic"]);
    let mut ws = connect(node.gateway);
    let (session_id, mut seq) = identify(&mut ws, &node.token);
    for round in 0..8 {
        // Drop the TCP connection without a close frame (a network failure).
        drop(ws);
        std::thread::sleep(Duration::from_millis(100));
        ws = connect(node.gateway);
        assert_eq!(recv(&mut ws)["op"], 10);
        send(
            &mut ws,
            json!({"op": 6, "d": {"token": format!("Bot {}", node.token), "session_id": session_id, "seq": seq}}),
        );
        let resumed = recv(&mut ws);
        assert_eq!(resumed["t"], "RESUMED", "round {round}: {resumed}");
        assert_eq!(resumed["s"], seq + 1, "the sequence continues");
        seq += 1;
        // The resumed connection is fully alive where it now lives.
        send(&mut ws, json!({"op": 1, "d": seq}));
        assert_eq!(recv(&mut ws)["op"], 11);
    }
    drop(ws);

    // A wrong token cannot take the session over, and an unknown id gets op 9 false.
    let mut other = connect(node.gateway);
    assert_eq!(recv(&mut other)["op"], 10);
    send(
        &mut other,
        json!({"op": 6, "d": {"token": "nope", "session_id": "00ffffffffffffffffffffffffffffff", "seq": 1}}),
    );
    let inv = recv(&mut other);
    assert_eq!(
        (inv["op"].clone(), inv["d"].clone()),
        (json!(9), json!(false))
    );
}

#[test]
fn client_close_1000_ends_the_session() {
    let node = Node::start(&["--no-demo-traffic"]);
    let mut ws = connect(node.gateway);
    let (session_id, seq) = identify(&mut ws, &node.token);
    ws.close(None).unwrap();
    // The server answers the close handshake.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match ws.read() {
            Ok(Message::Close(_)) | Err(_) => break,
            Ok(_) => assert!(Instant::now() < deadline),
        }
    }
    let mut ws = connect(node.gateway);
    assert_eq!(recv(&mut ws)["op"], 10);
    send(
        &mut ws,
        json!({"op": 6, "d": {"token": node.token, "session_id": session_id, "seq": seq}}),
    );
    let inv = recv(&mut ws);
    assert_eq!(
        (inv["op"].clone(), inv["d"].clone()),
        (json!(9), json!(false)),
        "a 1000 close is not resumable"
    );
}

#[test]
fn resume_replays_the_events_missed_while_away_in_order() {
    let node = Node::start(&["--demo-interval-ms", "50"]);
    let mut ws = connect(node.gateway);
    let (session_id, mut seq) = identify(&mut ws, &node.token);
    let first = recv(&mut ws);
    assert_eq!(
        (first["t"].clone(), first["s"].clone()),
        (json!("MESSAGE_CREATE"), json!(seq + 1))
    );
    seq += 1;
    let mut last_content = first["d"]["content"].as_str().unwrap().to_string();
    drop(ws);
    std::thread::sleep(Duration::from_millis(600)); // about a dozen events are due meanwhile
    let mut ws = connect(node.gateway);
    assert_eq!(recv(&mut ws)["op"], 10);
    send(
        &mut ws,
        json!({"op": 6, "d": {"token": node.token, "session_id": session_id, "seq": seq}}),
    );
    let mut replayed = 0;
    loop {
        let v = recv(&mut ws);
        assert_eq!(v["s"], seq + 1, "no gap, no duplicate: {v}");
        seq += 1;
        if v["t"] == "RESUMED" {
            break;
        }
        assert_eq!(v["t"], "MESSAGE_CREATE");
        let n = |c: &str| c.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
        let content = v["d"]["content"].as_str().unwrap().to_string();
        assert_eq!(
            n(&content),
            n(&last_content) + 1,
            "replayed in stream order"
        );
        last_content = content;
        replayed += 1;
    }
    assert!(
        replayed >= 5,
        "events that arrived while away were replayed ({replayed})"
    );
    // And the stream goes on after RESUMED.
    let next = recv(&mut ws);
    assert_eq!(
        (next["t"].clone(), next["s"].clone()),
        (json!("MESSAGE_CREATE"), json!(seq + 1))
    );
}

#[test]
fn resume_is_refused_when_the_session_lost_events_at_its_bound() {
    // A queue of 3: events beyond it while away cannot be kept, so a resume
    // would leave a gap. It must say op 9 instead.
    let node = Node::start(&["--demo-interval-ms", "30", "--max-unsent", "3"]);
    let mut ws = connect(node.gateway);
    let (session_id, seq) = identify(&mut ws, &node.token);
    drop(ws);
    std::thread::sleep(Duration::from_millis(500));
    let mut ws = connect(node.gateway);
    assert_eq!(recv(&mut ws)["op"], 10);
    send(
        &mut ws,
        json!({"op": 6, "d": {"token": node.token, "session_id": session_id, "seq": seq}}),
    );
    let inv = recv(&mut ws);
    assert_eq!(
        (inv["op"].clone(), inv["d"].clone()),
        (json!(9), json!(false)),
        "{inv}"
    );
}

/// Identify `n` sessions, trigger a drain with `trigger`, and return when
/// each session saw its op 7 (ms after the trigger); each must then be closed.
fn drain_and_time(node: &mut Node, n: usize, trigger: impl FnOnce(&mut Node)) -> Vec<u128> {
    let mut sessions: Vec<_> = (0..n).map(|_| connect(node.gateway)).collect();
    for ws in &mut sessions {
        identify(ws, &node.token);
    }
    let start = std::time::Instant::now();
    trigger(node);
    let mut at = Vec::new();
    for ws in &mut sessions {
        let v = recv(ws);
        assert_eq!(v["op"], 7, "op 7 Reconnect first: {v}");
        at.push(start.elapsed().as_millis());
        // Then the node closes the connection (resumable code) or the socket ends.
        loop {
            match ws.read() {
                Ok(Message::Close(Some(frame))) => {
                    let code: u16 = frame.code.into();
                    assert!(
                        (4000..=4009).contains(&code) && code != 4004,
                        "resumable close, got {code}"
                    );
                    break;
                }
                Ok(Message::Close(None)) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    at
}

#[test]
fn sigterm_sends_reconnect_to_every_session_spread_over_the_window_then_exits() {
    let mut node = Node::start(&[
        "--no-demo-traffic",
        "--shutdown-grace-ms",
        "500",
        "--drain-spread-ms",
        "1500",
    ]);
    let at = drain_and_time(&mut node, 20, |n| n.sigterm());
    let (min, max) = (at.iter().min().unwrap(), at.iter().max().unwrap());
    assert!(
        max - min > 300,
        "op 7s are spread over the window, not sent at once: {at:?}"
    );
    assert!(
        *max < 1500 + 2000,
        "every op 7 within the window (plus slack): {at:?}"
    );
    let status = node.child.wait().unwrap();
    assert!(status.success(), "clean exit after drain: {status}");
}

#[test]
fn post_drain_on_the_admin_port_drains_like_sigterm() {
    let mut node = Node::start(&[
        "--no-demo-traffic",
        "--shutdown-grace-ms",
        "300",
        "--drain-spread-ms",
        "300",
    ]);
    let at = drain_and_time(&mut node, 4, |n| {
        let (status, _) = support::http::http_request(n.admin, "POST", "/drain", &[]).unwrap();
        assert_eq!(status, 202);
    });
    assert_eq!(at.len(), 4);
    // Drained on request: the status that asks the service manager to
    // start it again (node/notify.rs), not 0 (stopped) nor 1 (failed).
    assert_eq!(node.child.wait().unwrap().code(), Some(75));
}

#[test]
fn wss_with_a_rustls_certificate() {
    use std::sync::Arc;
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let node = Node::start(&[
        "--no-demo-traffic",
        "--tls-cert",
        cert_path.to_str().unwrap(),
        "--tls-key",
        key_path.to_str().unwrap(),
        "--public-url",
        "wss://localhost",
    ]);
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(node.gateway).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let tls = rustls::StreamOwned::new(conn, tcp);
    let (mut ws, _) = tungstenite::client("wss://localhost/?v=10&encoding=json", tls).unwrap();
    let (_, _) = identify(&mut ws, &node.token);
    send(&mut ws, json!({"op": 1, "d": 2}));
    assert_eq!(recv(&mut ws)["op"], 11);

    // REST over https on the same port.
    let tcp = TcpStream::connect(node.gateway).unwrap();
    let conn = rustls::ClientConnection::new(
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates({
                let mut r = rustls::RootCertStore::empty();
                r.add(cert.cert.der().clone()).unwrap();
                r
            })
            .with_no_client_auth(),
        ),
        "localhost".try_into().unwrap(),
    )
    .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    use std::io::{Read, Write};
    tls.write_all(b"GET /api/v10/gateway HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = Vec::new();
    let _ = tls.read_to_end(&mut body);
    let text = String::from_utf8_lossy(&body);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(r#"{"url":"wss://localhost"}"#), "{text}");

    // A bot acts over https too: a message with a body, through TLS (and
    // the handover to the token's worker, TLS state and all).
    let general = {
        let tcp = TcpStream::connect(node.gateway).unwrap();
        let conn = rustls::ClientConnection::new(
            Arc::new(config_for(&cert)),
            "localhost".try_into().unwrap(),
        )
        .unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        let (mut ws, _) =
            tungstenite::client("wss://localhost/?v=10&encoding=json", &mut tls).unwrap();
        let (_, guilds) = login(&mut ws, &node.token, BOT_INTENTS);
        guilds[0]["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "general")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let tcp = TcpStream::connect(node.gateway).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let conn =
        rustls::ClientConnection::new(Arc::new(config_for(&cert)), "localhost".try_into().unwrap())
            .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let body = r#"{"content":"over https"}"#;
    let req = format!(
        "POST /api/v10/channels/{general}/messages HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bot {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        node.token,
        body.len()
    );
    tls.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains(r#""content":"over https""#), "{text}");
    assert!(text.contains("X-RateLimit-Bucket:"), "{text}");
}

fn config_for(cert: &rcgen::CertifiedKey) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth()
}

#[test]
fn sessions_of_one_application_shard_live_on_its_placed_worker() {
    let node = Node::start(&["--workers", "4", "--no-demo-traffic"]);
    let mut sessions: Vec<_> = (0..12).map(|_| connect(node.gateway)).collect();
    for ws in &mut sessions {
        identify(ws, &node.token);
    }
    let per_worker: Vec<f64> = support::metrics::metric_by_worker(
        &support::metrics::metrics(node.admin),
        "gatewayd_sessions",
    )
    .into_values()
    .collect();
    assert_eq!(per_worker.len(), 4);
    assert_eq!(per_worker.iter().sum::<f64>(), 12.0);
    assert_eq!(
        per_worker.iter().filter(|n| **n > 0.0).count(),
        1,
        "one (application, shard) lives on one worker: {per_worker:?}"
    );
}
