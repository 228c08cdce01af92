//! The chat service's upstream option (docs/chat-upstream.md): with
//! `--chat-upstream-url`, a validated, permitted REST action is POSTed to
//! that chat service as the documented envelope and its answer is relayed;
//! the upstream commits (here: it writes the event to the node's ingest
//! listener, and the bot sees it over its gateway session). The upstream is
//! a small real HTTP/1.1 server in this file (std TcpListener + httparse);
//! the node is a real `gatewayd` process.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::http::Resp;
use support::metrics::{metric_sum, metrics};
use support::rest::{assert_error, Fixture, SIX};

/// One call as the upstream received it.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    path: String,
    content_type: String,
    envelope: Value,
}

/// What the upstream does with a call: the raw HTTP answer to write, or
/// None to never answer (it holds the connection until the node drops it).
type Answer = dyn Fn(&Value) -> Option<Vec<u8>> + Send + Sync;

/// A small real HTTP/1.1 server: keep-alive connections, one thread each,
/// requests parsed with httparse, every call recorded.
struct Upstream {
    addr: SocketAddr,
    calls: Arc<Mutex<Vec<Call>>>,
    connections: Arc<AtomicUsize>,
}

impl Upstream {
    fn start(answer: impl Fn(&Value) -> Option<Vec<u8>> + Send + Sync + 'static) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let answer: Arc<Answer> = Arc::new(answer);
        let (c, n) = (calls.clone(), connections.clone());
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { continue };
                n.fetch_add(1, Ordering::SeqCst);
                let (c, answer) = (c.clone(), answer.clone());
                std::thread::spawn(move || serve(s, &c, &*answer));
            }
        });
        Upstream {
            addr,
            calls,
            connections,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/chat/v1", self.addr)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }
}

fn serve(mut s: TcpStream, calls: &Mutex<Vec<Call>>, answer: &Answer) {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    loop {
        // One request: the head, then its Content-Length body.
        let (head_len, method, path, content_type, length) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            if let Ok(httparse::Status::Complete(n)) = req.parse(&buf) {
                let header = |name: &str| {
                    req.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .map(|h| String::from_utf8_lossy(h.value).to_string())
                        .unwrap_or_default()
                };
                let length: usize = header("content-length").parse().unwrap_or(0);
                break (
                    n,
                    req.method.unwrap_or("").to_string(),
                    req.path.unwrap_or("").to_string(),
                    header("content-type"),
                    length,
                );
            }
            match s.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        while buf.len() < head_len + length {
            match s.read(&mut tmp) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        }
        let envelope: Value =
            serde_json::from_slice(&buf[head_len..head_len + length]).unwrap_or(Value::Null);
        buf.drain(..head_len + length);
        calls.lock().unwrap().push(Call {
            method,
            path,
            content_type,
            envelope: envelope.clone(),
        });
        match answer(&envelope) {
            Some(bytes) => {
                if s.write_all(&bytes).is_err() {
                    return;
                }
            }
            None => {
                // Never answer: wait for the node to give up and close.
                while matches!(s.read(&mut tmp), Ok(n) if n > 0) {}
                return;
            }
        }
    }
}

/// An HTTP/1.1 answer with a JSON body (keep-alive).
fn http(status: u16, body: &Value) -> Vec<u8> {
    let b = body.to_string();
    format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    )
    .into_bytes()
}

const INTENTS: u64 = support::BOT_INTENTS;

fn fixture(upstream_url: &str, extra: &[&str]) -> Fixture {
    let mut args = vec![
        "--rest-limit-scale",
        "100",
        "--chat-upstream-url",
        upstream_url,
    ];
    args.extend_from_slice(extra);
    Fixture::start(&args, INTENTS)
}

impl Fixture {
    fn failures(&self, reason: &str) -> f64 {
        metric_sum(
            &metrics(self.node.admin),
            "gatewayd_chat_upstream_failures_total",
            &[("reason", reason)],
        )
    }
}

const MESSAGE_ID: u64 = 1_180_000_000_000_900_001;

/// The message object the upstream answers a create with.
fn message(e: &Value, id: u64) -> Value {
    json!({"id": id.to_string(), "type": 0, "channel_id": e["channel_id"], "guild_id": e["guild_id"],
           "author": e["bot_user"], "content": e["body"]["content"], "nonce": e["body"]["nonce"],
           "timestamp": "2025-01-01T00:00:00.000000+00:00", "edited_timestamp": null, "tts": false,
           "mention_everyone": false, "mentions": [], "mention_roles": [], "attachments": [],
           "embeds": [], "pinned": false, "flags": 0})
}

#[test]
fn an_action_reaches_the_upstream_as_the_envelope_and_its_answer_is_relayed() {
    // The upstream commits a create by writing MESSAGE_CREATE to the node's
    // ingest listener (its address is known once the node is up), then answers.
    let ingest: Arc<OnceLock<SocketAddr>> = Arc::new(OnceLock::new());
    let at = ingest.clone();
    let upstream = Upstream::start(move |e| {
        let route = e["route"].as_str().unwrap_or("");
        Some(match route {
            "POST /channels/{id}/messages" => {
                let m = message(e, MESSAGE_ID);
                let (server, channel) = (
                    e["guild_id"].as_str().unwrap().parse().unwrap(),
                    e["channel_id"].as_str().unwrap().parse().unwrap(),
                );
                let mut d = m.clone();
                d["member"] = json!({"roles": [], "joined_at": "2025-01-01T00:00:00.000000+00:00",
                                     "deaf": false, "mute": false, "flags": 0});
                support::events::Producer::connect(*at.get().unwrap()).send(
                    &support::events::Event {
                        t: "MESSAGE_CREATE".into(),
                        server_id: server,
                        channel_id: channel,
                        intent: support::intent::GUILD_MESSAGES,
                        permissions: 0,
                        flags: ingest::FLAG_HAS_CONTENT,
                        mentions: vec![],
                        commit_ns: support::events::now_ns(),
                        d,
                    },
                );
                http(200, &m)
            }
            "GET /channels/{id}/messages/{id}" => http(200, &message(e, MESSAGE_ID)),
            "DELETE /channels/{id}/messages/{id}" => {
                http(404, &json!({"message": "Unknown Message", "code": 10008}))
            }
            // Not JSON: the node must not relay it.
            "POST /channels/{id}/typing" => {
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello".to_vec()
            }
            _ => http(500, &json!({"message": "unexpected", "code": 0})),
        })
    });
    let mut f = fixture(&upstream.url(), &[]);
    ingest.set(f.node.ingest).unwrap();
    let ch = f.general;
    let bot_id = f.session.ready["d"]["user"]["id"].clone();

    // (1) A create: the envelope as documented, the answer relayed with the
    // node's own headers, and the event the upstream produced.
    let r = f.call(
        "POST",
        &format!("/channels/{ch}/messages"),
        Some(json!({"content": "hello upstream", "nonce": "n-7", "unknown_field": 1})),
    );
    assert_eq!(r.status, 200, "{}\n{}", r.head, r.body);
    r.assert_json_type("a relayed answer");
    for h in SIX {
        assert!(r.header(h).is_some(), "{h} is the node's:\n{}", r.head);
    }
    let sent = message(&upstream.calls()[0].envelope, MESSAGE_ID);
    assert_eq!(r.json(), sent, "the upstream's body, unchanged");
    let calls = upstream.calls();
    assert_eq!(calls.len(), 1, "ONE call per action");
    let c = &calls[0];
    assert_eq!((c.method.as_str(), c.path.as_str()), ("POST", "/chat/v1"));
    assert_eq!(c.content_type, "application/json");
    let e = &c.envelope;
    assert_eq!(e["version"], 1);
    assert_eq!(e["route"], "POST /channels/{id}/messages");
    assert_eq!(e["method"], "POST");
    assert_eq!(e["guild_id"], f.server.to_string());
    assert_eq!(e["channel_id"], ch.to_string());
    assert_eq!(e["bot_user_id"], bot_id);
    assert_eq!(e["bot_user"]["id"], bot_id);
    assert_eq!(
        e["application_id"],
        f.session.ready["d"]["application"]["id"]
    );
    let perms: u64 = e["permissions"].as_str().unwrap().parse().unwrap();
    assert_ne!(
        perms & proto::permissions::SEND_MESSAGES,
        0,
        "SEND_MESSAGES, as permitted: {e}"
    );
    assert_eq!(
        e["body"],
        json!({"content": "hello upstream", "nonce": "n-7", "flags": 0}),
        "the validated body (unknown fields dropped)"
    );
    assert!(e.get("message_id").is_none() && e.get("query").is_none());
    let ev = loop {
        let v = f.session.next_dispatch(Duration::from_secs(10));
        if v["t"] == "MESSAGE_CREATE" {
            break v["d"].clone();
        }
    };
    assert_eq!(ev["id"], MESSAGE_ID.to_string(), "the upstream's commit");
    assert_eq!(ev["content"], "hello upstream");

    // Refused by the node itself: never reaches the upstream.
    assert_error(
        &f.call(
            "POST",
            &format!("/channels/{ch}/messages/bulk-delete"),
            Some(json!({"messages": [MESSAGE_ID.to_string(), (MESSAGE_ID + 1).to_string()]})),
        ),
        403,
        50013,
        "no MANAGE_MESSAGES",
    );
    assert_error(
        &f.call(
            "POST",
            &format!("/channels/{ch}/messages"),
            Some(json!({"content": "x".repeat(2001)})),
        ),
        400,
        50035,
        "content over 2,000 characters",
    );
    assert_error(
        &f.call(
            "POST",
            "/channels/1180000000000999999/messages",
            Some(json!({"content": "x"})),
        ),
        404,
        10003,
        "a channel the bot cannot know",
    );
    assert_eq!(
        upstream.calls().len(),
        1,
        "refused requests are not forwarded"
    );

    // (2) A 404 with a body: relayed as it came.
    let r = f.call(
        "DELETE",
        &format!("/channels/{ch}/messages/{MESSAGE_ID}"),
        None,
    );
    assert_error(&r, 404, 10008, "the upstream's 404");
    assert_eq!(r.json()["message"], "Unknown Message");
    let e = &upstream.calls()[1].envelope;
    assert_eq!(
        (
            e["route"].as_str(),
            e["method"].as_str(),
            e["message_id"].as_str()
        ),
        (
            Some("DELETE /channels/{id}/messages/{id}"),
            Some("DELETE"),
            Some(MESSAGE_ID.to_string().as_str())
        )
    );

    // Keep-alive: ten calls in a row ride at most the configured 4 connections.
    for _ in 0..10 {
        let r = f.call(
            "GET",
            &format!("/channels/{ch}/messages/{MESSAGE_ID}"),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let opened = upstream.connections.load(Ordering::SeqCst);
    assert!(
        (1..=4).contains(&opened),
        "{opened} connections for 12 calls"
    );

    // A malformed answer (a body that is not JSON): 502, counted.
    let r = f.call("POST", &format!("/channels/{ch}/typing"), None);
    assert_error(&r, 502, 0, "a malformed answer");
    assert_eq!(f.failures("malformed"), 1.0);
    assert_eq!(
        metric_sum(
            &metrics(f.node.admin),
            "gatewayd_chat_upstream_relayed_total",
            &[]
        ),
        12.0
    );
    // The embedded service committed nothing.
    assert_eq!(
        metric_sum(&metrics(f.node.admin), "gatewayd_chat_commits_total", &[]),
        0.0
    );
}

#[test]
fn an_unreachable_upstream_is_503_with_the_documented_body_and_counted() {
    let port = support::node::free_port();
    let f = fixture(&format!("http://127.0.0.1:{port}/chat"), &[]);
    let ch = f.general;
    let r = f.call(
        "POST",
        &format!("/channels/{ch}/messages"),
        Some(json!({"content": "anyone?"})),
    );
    assert_error(&r, 503, 0, "upstream down");
    assert_eq!(
        r.json(),
        json!({"message": "the chat service is unreachable; try again", "code": 0})
    );
    for h in SIX {
        assert!(r.header(h).is_some(), "{h} on a 503 too:\n{}", r.head);
    }
    assert_eq!(f.failures("unreachable"), 1.0);
    assert_eq!(f.failures("timeout"), 0.0);
}

#[test]
fn an_upstream_that_never_answers_is_503_after_the_deadline() {
    let upstream = Upstream::start(|_| None);
    let f = fixture(&upstream.url(), &[]);
    let ch = f.general;
    // More requests at once than connections (4): none waits past the deadline
    // for a connection; each is 503 once its deadline (2 s) has passed.
    let started = Instant::now();
    let answers: Vec<(Resp, Duration)> = std::thread::scope(|s| {
        let f = &f;
        let hs: Vec<_> = (0..6)
            .map(|i| {
                s.spawn(move || {
                    let t = Instant::now();
                    let r = f.call(
                        "POST",
                        &format!("/channels/{ch}/messages"),
                        Some(json!({"content": format!("hello {i}")})),
                    );
                    (r, t.elapsed())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (r, took) in &answers {
        assert_error(r, 503, 0, "no answer in time");
        assert_eq!(
            r.json()["message"],
            "the chat service did not answer in time; try again"
        );
        assert!(*took < Duration::from_secs(10), "answered after {took:?}");
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(f.failures("timeout"), 6.0);
}

/// Each worker forwards its bots' actions from its own connections (issue
/// 27): with one connection per pool, a call the upstream holds for a bot
/// served on one worker does not hold a bot served on the other worker.
/// (Through one shared pool, the second call waited behind the first until
/// its deadline: 503.)
#[test]
fn a_held_call_of_one_workers_bot_does_not_hold_the_other_workers() {
    let release: Arc<(Mutex<bool>, std::sync::Condvar)> = Arc::default();
    let held = release.clone();
    let upstream = Upstream::start(move |e| {
        if e["body"]["content"] == "hold" {
            let (lock, cvar) = &*held;
            let mut go = lock.lock().unwrap();
            while !*go {
                go = cvar.wait(go).unwrap();
            }
        }
        Some(http(200, &message(e, MESSAGE_ID)))
    });
    let f = fixture(
        &upstream.url(),
        &[
            "--workers",
            "2",
            "--chat-upstream-connections",
            "1",
            // Room for the held call: the test releases it well before.
            "--chat-upstream-timeout-ms",
            "20000",
        ],
    );
    let reg = support::registry::Registry::new(f.node.dir.path());
    let home = gatewayd::api::owner_of(&f.node.token, 2).unwrap();
    let other = (0..32)
        .map(|i| reg.add_app(&format!("other-{i}"), 0))
        .find(|a| gatewayd::api::owner_of(&a.token, 2) != Some(home))
        .expect("an application served by the other worker");
    reg.install(
        other.id,
        f.server,
        Some(support::perm::VIEW_CHANNEL | support::perm::SEND_MESSAGES),
    );
    let path = format!("/api/v10/channels/{}/messages", f.general);
    let held_call = {
        let (gateway, auth, path) = (f.node.gateway, f.auth.clone(), path.clone());
        std::thread::spawn(move || {
            support::http::json_request(
                gateway,
                "POST",
                &path,
                Some(&auth),
                Some(&json!({"content": "hold"})),
            )
        })
    };
    // The held call has reached the upstream before the other is sent.
    assert!(
        support::wait_until(Duration::from_secs(30), || upstream.calls().len() == 1).is_some(),
        "the first call reached the upstream"
    );
    let r = support::http::json_request(
        f.node.gateway,
        "POST",
        &path,
        Some(&format!("Bot {}", other.token)),
        Some(&json!({"content": "pass"})),
    );
    assert_eq!(
        r.status, 200,
        "answered while the other call is held: {}",
        r.body
    );
    let (lock, cvar) = &*release;
    *lock.lock().unwrap() = true;
    cvar.notify_all();
    let r = held_call.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        upstream.connections.load(Ordering::SeqCst),
        2,
        "one per worker's pool"
    );
}
