//! The interaction benchmark (docs/bench/interactions.md), run by hand:
//!
//! ```sh
//! cargo test --release --test interactions_bench -- --ignored --nocapture
//! ```
//!
//! One release node, one bot session, one keep-alive callback connection.
//! 10,000 interactions are opened and deferred first (each holds its token
//! for 15 minutes: the table is 10,000 deep), then interaction records are
//! written to the ingest listener at `RATE`/s for `SECS` s, each answered
//! with a type 4 callback as soon as its INTERACTION_CREATE arrives. Per
//! interaction: the platform's share of the 3 s = (INTERACTION_CREATE at
//! the bot - record written) + (callback answered - callback sent), and the
//! answer's MESSAGE_CREATE at the bot. Node CPU from /proc over the measured
//! phase. Then the cost of one Ed25519 signature (an HTTP delivery's).

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot;
use support::http::json_request;
use support::intent;
use support::node::Node;
use support::registry::Registry;

const PREFILL: usize = 10_000;
/// Interactions per second and seconds of the measured flow
/// (`IX_RATE`, `IX_SECS`).
fn rate_and_secs() -> (u64, u64) {
    let get = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    (get("IX_RATE", 1_000), get("IX_SECS", 10))
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

/// One keep-alive HTTP/1.1 connection for callbacks.
struct Http(TcpStream, Vec<u8>);

impl Http {
    fn post(&mut self, path: &str, body: &[u8]) -> u16 {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: n\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        // One write (no Nagle stall between head and body).
        let mut req = head.into_bytes();
        req.extend_from_slice(body);
        self.0.write_all(&req).unwrap();
        let mut tmp = [0u8; 4096];
        loop {
            if let Some(end) = support::http::head_end(&self.1) {
                let h = String::from_utf8_lossy(&self.1[..end]).to_string();
                let len: usize = support::http::header(&h, "content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if self.1.len() >= end + len {
                    let status = support::http::status_of(&h);
                    if status >= 300 {
                        eprintln!(
                            "callback answered {h}{}",
                            String::from_utf8_lossy(&self.1[end..end + len])
                        );
                    }
                    self.1.drain(..end + len);
                    return status;
                }
            }
            let n = self.0.read(&mut tmp).unwrap();
            assert!(n > 0, "callback connection closed");
            self.1.extend_from_slice(&tmp[..n]);
        }
    }
}

fn record(app: u64, server: u64, channel: u64, person: u64, id: u64) -> Vec<u8> {
    let d = json!({"id": id.to_string(), "type": 2, "user": {"id": person.to_string()},
                   "data": {"name": "ping", "type": 1}});
    let mut f = Vec::new();
    ingest::encode_parts(
        "INTERACTION_CREATE",
        server,
        channel,
        0,
        0,
        1,
        ingest::FLAG_INTERACTION,
        &[app],
        &serde_json::to_vec(&d).unwrap(),
        &mut f,
    );
    f
}

#[test]
#[ignore = "a measurement, run by hand: cargo test --release --test interactions_bench -- --ignored --nocapture"]
fn interaction_figures() {
    let node = Node::start(&["--no-demo-traffic"]);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("bench-bot", 0);
    let (server, general) = reg.add_server("bench");
    reg.install(app.id, server, None);
    let person = reg.add_member(server, "alice", &[]);
    let r = json_request(
        node.gateway,
        "PUT",
        &format!("/api/v10/applications/{}/commands", app.id),
        Some(&format!("Bot {}", app.token)),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let mut session = bot::identify(
        node.gateway,
        "bench",
        &app.token,
        intent::GUILDS | intent::GUILD_MESSAGES,
        None,
    )
    .expect("identify");
    session
        .ws
        .get_mut()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // The bot's reader: INTERACTION_CREATE (id, token) and MESSAGE_CREATE
    // (the interaction it answers), each with its arrival time.
    let (tx, rx) = mpsc::channel::<(bool, u64, String, Instant)>();
    std::thread::spawn(move || loop {
        match bot::read_next(&mut session.ws, Duration::from_secs(30)) {
            bot::Next::Json(v) if v["t"] == "INTERACTION_CREATE" => {
                let id = v["d"]["id"].as_str().unwrap().parse().unwrap();
                let token = v["d"]["token"].as_str().unwrap().to_string();
                if tx.send((true, id, token, Instant::now())).is_err() {
                    return;
                }
            }
            bot::Next::Json(v) if v["t"] == "MESSAGE_CREATE" => {
                let id = v["d"]["interaction_metadata"]["id"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                if tx.send((false, id, String::new(), Instant::now())).is_err() {
                    return;
                }
            }
            bot::Next::Json(_) => {}
            _ => return,
        }
    });
    let ingest = TcpStream::connect(node.ingest).unwrap();
    let mut http = Http(TcpStream::connect(node.gateway).unwrap(), Vec::new());
    http.0.set_nodelay(true).unwrap();
    let base = 1_200_000_000_000_000_000u64;
    let defer = br#"{"type":5}"#;
    // Prefill: 10,000 deferred interactions hold their tokens (written by a
    // thread while this one defers each as it arrives, inside its 3 s).
    let prefill = {
        let (app, mut ingest) = (app.id, ingest.try_clone().unwrap());
        std::thread::spawn(move || {
            for i in 0..PREFILL as u64 {
                ingest
                    .write_all(&record(app, server, general, person, base + i))
                    .unwrap();
                if i % 200 == 199 {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        })
    };
    let mut deferred = 0;
    while deferred < PREFILL {
        let (is_ix, id, token, _) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("prefill delivery");
        if is_ix {
            let st = http.post(
                &format!("/api/v10/interactions/{id}/{token}/callback"),
                defer,
            );
            if st != 204 {
                let b = support::http::http_get(node.admin, &format!("/interactions/{id}"))
                    .unwrap()
                    .1;
                panic!("defer of {id} (#{}): {st}; the person sees {b}", id - base);
            }
            deferred += 1;
        }
    }
    prefill.join().unwrap();
    while rx.recv_timeout(Duration::from_millis(500)).is_ok() {} // the loading messages
                                                                 // The measured flow.
    let pid = node.child.id();
    let (t0, cpu0) = (Instant::now(), cpu_ticks(pid));
    let (rate, secs) = rate_and_secs();
    let total = rate * secs;
    let sent_at: std::sync::Arc<std::sync::Mutex<HashMap<u64, Instant>>> = Default::default();
    let producer = {
        let sent_at = sent_at.clone();
        let (app, mut ingest) = (app.id, ingest.try_clone().unwrap());
        std::thread::spawn(move || {
            for i in 0..total {
                let due = t0 + Duration::from_micros(i * 1_000_000 / rate);
                if let Some(w) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(w);
                }
                let id = base + PREFILL as u64 + i;
                let f = record(app, server, general, person, id);
                sent_at.lock().unwrap().insert(id, Instant::now());
                ingest.write_all(&f).unwrap();
            }
        })
    };
    let answer = br#"{"type":4,"data":{"content":"pong"}}"#;
    let (mut share, mut to_event) = (Vec::new(), Vec::new());
    let mut answered_at: HashMap<u64, Instant> = HashMap::new();
    let mut events = 0;
    while events < total as usize {
        let Ok((is_ix, id, token, at)) = rx.recv_timeout(Duration::from_secs(10)) else {
            break;
        };
        if is_ix {
            let t_send = Instant::now();
            assert_eq!(
                http.post(
                    &format!("/api/v10/interactions/{id}/{token}/callback"),
                    answer
                ),
                204
            );
            let t_done = Instant::now();
            let written = sent_at.lock().unwrap()[&id];
            share.push(((at - written) + (t_done - t_send)).as_secs_f64() * 1000.0);
            answered_at.insert(id, t_send);
        } else if let Some(t) = answered_at.get(&id) {
            to_event.push((at - *t).as_secs_f64() * 1000.0);
            events += 1;
        }
    }
    producer.join().unwrap();
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu_s = (cpu_ticks(pid) - cpu0) as f64 / 100.0;
    let n = share.len();
    let seen: Value = serde_json::from_str(
        &support::http::http_get(
            node.admin,
            &format!("/applications/{}/interactions", app.id),
        )
        .unwrap()
        .1,
    )
    .unwrap();
    // Signing: one Ed25519 signature over a 1 KiB body.
    let seed = [7u8; 32];
    let body = vec![b'x'; 1024];
    let t = Instant::now();
    for _ in 0..10_000 {
        std::hint::black_box(gatewayd::egress::sign::sign(&seed, "1800000000", &body));
    }
    let sign_us = t.elapsed().as_secs_f64() * 1e6 / 10_000.0;
    println!(
        "INTERACTIONS prefill={PREFILL} rate={rate}/s secs={secs} answered={n} events={events} \
         throughput={:.0}/s platform_share_ms p50={:.2} p99={:.2} max={:.2} \
         callback_to_message_event_ms p50={:.2} p99={:.2} node_cpu_s={cpu_s:.2} \
         cpu_us_per_interaction={:.1} sign_us={sign_us:.1} misses={}",
        n as f64 / elapsed,
        pct(&mut share.clone(), 0.5),
        pct(&mut share.clone(), 0.99),
        pct(&mut share, 1.0),
        pct(&mut to_event.clone(), 0.5),
        pct(&mut to_event, 0.99),
        cpu_s * 1e6 / n as f64,
        seen["misses"],
    );
    assert_eq!(n as u64, total, "every interaction answered");
}
