//! Helpers for the event-delivery tests (entitlement, slow consumers): the
//! registry CLI, an ingest producer, a raw gateway client (tungstenite) and
//! a `/metrics` reader. Everything here talks to a real `gatewayd` the way
//! an operator, the chat service or a bot would.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

pub mod kafka;
pub mod services;

// ------------------------------------------------------------------ bits

pub use proto::intents as intent;

pub mod perm {
    pub use proto::permissions::*;
    /// What `install` grants without `--permissions`.
    pub const INSTALL_DEFAULT: u64 = EVERYONE_DEFAULT;
}

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

// ------------------------------------------------------------------ registry CLI

/// `gatewayd registry --data-dir DIR ...`, run while the node is up.
pub struct Registry {
    bin: PathBuf,
    dir: PathBuf,
    /// A shared PostgreSQL registry instead of the node's file.
    url: Option<String>,
}

/// A fresh database on the test PostgreSQL server: (admin URL, its URL).
/// The tests that call this are `#[ignore]`d (plain `cargo test` lists
/// them, with the reason); with `--include-ignored` they fail without a
/// server.
pub fn pg_database() -> (String, String) {
    let admin = match std::env::var("GATEWAYD_TEST_DATABASE_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        _ => panic!(
            "GATEWAYD_TEST_DATABASE_URL is not set: this test needs a PostgreSQL server. \
             scripts/test-all.sh starts one; by hand: eval \"$(scripts/pg-test-server.sh start)\""
        ),
    };
    let name = format!(
        "gatewayd_it_{}_{:08x}",
        std::process::id(),
        getrandom::u32().unwrap()
    );
    let mut client =
        postgres::Client::connect(&admin, postgres::NoTls).expect("connect to the test server");
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let (scheme, rest) = admin.split_once("://").expect("a postgres:// URL");
    let authority = rest.split('/').next().unwrap();
    (admin.clone(), format!("{scheme}://{authority}/{name}"))
}

#[derive(Clone, Debug)]
pub struct App {
    pub name: String,
    pub id: u64,
    pub token: String,
}

impl Registry {
    pub fn new(data_dir: &Path) -> Registry {
        Registry {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_gatewayd")),
            dir: data_dir.to_path_buf(),
            url: None,
        }
    }

    /// The CLI against a shared PostgreSQL registry.
    pub fn with_url(data_dir: &Path, url: Option<&str>) -> Registry {
        Registry {
            url: url.map(str::to_string),
            ..Registry::new(data_dir)
        }
    }

    /// Run one registry command; returns its `key=value` output lines.
    pub fn run(&self, args: &[&str]) -> BTreeMap<String, String> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("registry").arg("--data-dir").arg(&self.dir);
        if let Some(url) = &self.url {
            cmd.arg("--registry-url").arg(url);
        }
        let out = cmd.args(args).output().expect("run gatewayd registry");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "gatewayd registry {args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .flat_map(|l| l.split_whitespace())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn id(out: &BTreeMap<String, String>, key: &str) -> u64 {
        out.get(key)
            .unwrap_or_else(|| panic!("no {key}= in registry output {out:?}"))
            .parse()
            .unwrap()
    }

    pub fn add_app(&self, name: &str, privileged_intents: u64) -> App {
        self.add_app_with(name, privileged_intents, 1)
    }

    pub fn add_app_with(&self, name: &str, privileged_intents: u64, max_concurrency: u32) -> App {
        let out = self.run(&[
            "add-app",
            "--name",
            name,
            "--privileged-intents",
            &privileged_intents.to_string(),
            "--max-concurrency",
            &max_concurrency.to_string(),
        ]);
        App {
            name: name.to_string(),
            id: Self::id(&out, "application_id"),
            token: out["token"].clone(),
        }
    }

    /// A server with its `#general`: (server id, general channel id).
    pub fn add_server(&self, name: &str) -> (u64, u64) {
        let out = self.run(&["add-server", "--name", name]);
        (Self::id(&out, "server_id"), Self::id(&out, "channel_id"))
    }

    pub fn add_channel(&self, server: u64, name: &str) -> u64 {
        let out = self.run(&[
            "add-channel",
            "--server",
            &server.to_string(),
            "--name",
            name,
        ]);
        Self::id(&out, "channel_id")
    }

    pub fn add_role(&self, server: u64, name: &str, permissions: u64) -> u64 {
        let out = self.run(&[
            "add-role",
            "--server",
            &server.to_string(),
            "--name",
            name,
            "--permissions",
            &permissions.to_string(),
        ]);
        Self::id(&out, "role_id")
    }

    /// `kind` is "role" or "member".
    pub fn set_overwrite(&self, channel: u64, target: u64, kind: &str, allow: u64, deny: u64) {
        self.run(&[
            "set-overwrite",
            "--channel",
            &channel.to_string(),
            "--target",
            &target.to_string(),
            "--kind",
            kind,
            "--allow",
            &allow.to_string(),
            "--deny",
            &deny.to_string(),
        ]);
    }

    /// Install with a granted bitset (`None`: the CLI default).
    pub fn install(&self, app: u64, server: u64, permissions: Option<u64>) {
        let (a, s) = (app.to_string(), server.to_string());
        let p = permissions.map(|p| p.to_string());
        let mut args = vec!["install", "--app", &a, "--server", &s];
        if let Some(p) = &p {
            args.extend(["--permissions", p.as_str()]);
        }
        self.run(&args);
    }

    pub fn uninstall(&self, app: u64, server: u64) {
        self.run(&[
            "uninstall",
            "--app",
            &app.to_string(),
            "--server",
            &server.to_string(),
        ]);
    }
}

// ------------------------------------------------------------------ ingest producer

/// One event as the chat service commits it.
#[derive(Clone, Debug)]
pub struct Event {
    pub t: String,
    pub server_id: u64,
    /// 0: server-wide.
    pub channel_id: u64,
    pub intent: u64,
    /// Channel permissions needed beyond VIEW_CHANNEL.
    pub permissions: u64,
    pub flags: u32,
    pub mentions: Vec<u64>,
    pub commit_ns: u64,
    pub d: Value,
}

/// A producer connection to the node's ingest listener. Records written on
/// one connection reach every worker in the order written.
pub struct Producer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Producer {
    pub fn connect(ingest: SocketAddr) -> Producer {
        let stream = TcpStream::connect(ingest).expect("connect to the ingest listener");
        stream.set_nodelay(true).unwrap();
        Producer {
            stream,
            buf: Vec::with_capacity(128 * 1024),
        }
    }

    pub fn send(&mut self, ev: &Event) {
        let d = serde_json::to_vec(&ev.d).unwrap();
        self.send_raw(ev, &d);
    }

    /// Like `send`, with `d` already serialised (it wins over `ev.d`).
    pub fn send_raw(&mut self, ev: &Event, d: &[u8]) {
        self.buf.clear();
        ingest::encode_parts(
            &ev.t,
            ev.server_id,
            ev.channel_id,
            ev.intent,
            ev.permissions,
            ev.commit_ns,
            ev.flags,
            &ev.mentions,
            d,
            &mut self.buf,
        );
        self.stream
            .write_all(&self.buf)
            .expect("write to the ingest listener");
    }
}

/// The user who posts the test messages (not a bot).
pub const AUTHOR_ID: u64 = 1_180_000_000_000_000_777;

/// A MESSAGE_CREATE `d` with every MESSAGE_CONTENT-governed field populated
/// (content, an embed, an attachment, a button row and a poll), so that
/// redaction is visible in each of them. `mentions` are bot user ids.
pub fn message_d(id: u64, server: u64, channel: u64, content: &str, mentions: &[u64]) -> Value {
    let ts = "2025-01-01T00:00:00.000000+00:00";
    json!({
        "id": id.to_string(),
        "type": 0,
        "channel_id": channel.to_string(),
        "guild_id": server.to_string(),
        "author": {"id": AUTHOR_ID.to_string(), "username": "test-user", "discriminator": "0",
                   "global_name": "Test User", "avatar": null, "public_flags": 0, "flags": 0},
        "member": {"roles": [], "joined_at": ts, "deaf": false, "mute": false, "flags": 0,
                   "pending": false, "premium_since": null, "nick": null, "avatar": null,
                   "communication_disabled_until": null},
        "content": content,
        "timestamp": ts,
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": mentions.iter().map(|m| json!({
            "id": m.to_string(), "username": format!("bot-{m}"), "discriminator": "0",
            "global_name": null, "avatar": null, "bot": true, "public_flags": 0, "flags": 0
        })).collect::<Vec<_>>(),
        "mention_roles": [],
        "attachments": [{"id": (id + 1).to_string(), "filename": "notes.txt", "size": 12,
                         "url": "https://cdn.example/notes.txt", "proxy_url": "https://media.example/notes.txt",
                         "content_type": "text/plain"}],
        "embeds": [{"type": "rich", "title": "embed title", "description": format!("embed of {content}")}],
        "components": [{"type": 1, "components": [{"type": 2, "style": 1, "label": "Press", "custom_id": "press"}]}],
        "poll": {"question": {"text": "which?"},
                 "answers": [{"answer_id": 1, "poll_media": {"text": "this"}},
                             {"answer_id": 2, "poll_media": {"text": "that"}}],
                 "expiry": "2030-01-01T00:00:00.000000+00:00",
                 "allow_multiselect": false, "layout_type": 1},
        "pinned": false,
        "flags": 0,
        "nonce": null,
    })
}

/// What a bot without MESSAGE_CONTENT must see of `d` (PROTOCOL.md): content,
/// embeds, attachments, components emptied, poll removed, the rest intact.
pub fn redacted(d: &Value) -> Value {
    let mut r = d.clone();
    let o = r.as_object_mut().unwrap();
    o.insert("content".into(), json!(""));
    o.insert("embeds".into(), json!([]));
    o.insert("attachments".into(), json!([]));
    o.insert("components".into(), json!([]));
    o.remove("poll");
    r
}

/// A MESSAGE_CREATE record for `message_d`.
pub fn message_event(id: u64, server: u64, channel: u64, content: &str, mentions: &[u64]) -> Event {
    Event {
        t: "MESSAGE_CREATE".into(),
        server_id: server,
        channel_id: channel,
        intent: intent::GUILD_MESSAGES,
        permissions: 0,
        flags: ingest::FLAG_HAS_CONTENT,
        mentions: mentions.to_vec(),
        commit_ns: now_ns(),
        d: message_d(id, server, channel, content, mentions),
    }
}

// ------------------------------------------------------------------ raw gateway client

pub type Ws = WebSocket<TcpStream>;

/// What the next read produced.
#[derive(Debug)]
pub enum Next {
    Json(Value),
    /// A close frame (code, reason), or `None` for a close without payload.
    Close(Option<(u16, String)>),
    /// The connection ended without a close frame, or failed.
    Ended(String),
    Timeout,
}

pub fn connect(gateway: SocketAddr) -> Ws {
    let stream = TcpStream::connect(gateway).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (ws, _) = tungstenite::client(format!("ws://{gateway}/?v=10&encoding=json"), stream)
        .expect("websocket handshake");
    ws
}

pub fn send_json(ws: &mut Ws, v: &Value) {
    ws.send(Message::text(v.to_string())).expect("send");
}

/// The next text message (as JSON), close, end or timeout.
pub fn read_next(ws: &mut Ws, timeout: Duration) -> Next {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Next::Timeout;
        }
        ws.get_ref().set_read_timeout(Some(left)).unwrap();
        match ws.read() {
            Ok(Message::Text(t)) => {
                return Next::Json(
                    serde_json::from_str(&t)
                        .unwrap_or_else(|e| panic!("server sent non-JSON text ({e}): {t:.300}")),
                )
            }
            Ok(Message::Close(c)) => {
                return Next::Close(c.map(|f| (u16::from(f.code), f.reason.to_string())))
            }
            Ok(Message::Binary(b)) => panic!("unexpected binary frame ({} bytes)", b.len()),
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Next::Ended(e.to_string()),
        }
    }
}

/// A raw bot session after READY and its GUILD_CREATEs.
pub struct Session {
    pub name: String,
    pub ws: Ws,
    pub session_id: String,
    /// The last dispatch `s` received.
    pub seq: u64,
    pub ready: Value,
    pub guild_creates: Vec<Value>,
}

/// Hello, Identify, READY (`s` = 1) and one GUILD_CREATE per READY guild
/// (`s` +1 each). `Err` carries what came instead (e.g. a close code).
pub fn identify(
    gateway: SocketAddr,
    name: &str,
    token: &str,
    intents: u64,
    shard: Option<(u32, u32)>,
) -> Result<Session, String> {
    let mut ws = connect(gateway);
    let hello = match read_next(&mut ws, Duration::from_secs(10)) {
        Next::Json(v) => v,
        other => return Err(format!("{name}: no Hello: {other:?}")),
    };
    if hello["op"] != 10 {
        return Err(format!("{name}: first message is not Hello: {hello}"));
    }
    let mut d = json!({"token": format!("Bot {token}"), "intents": intents,
                       "properties": {"os": "linux", "browser": "gatewayd-tests", "device": "gatewayd-tests"}});
    if let Some((id, count)) = shard {
        d["shard"] = json!([id, count]);
    }
    send_json(&mut ws, &json!({"op": 2, "d": d}));
    let ready = match read_next(&mut ws, Duration::from_secs(10)) {
        Next::Json(v) => v,
        other => return Err(format!("{name}: no READY: {other:?}")),
    };
    if ready["t"] != "READY" || ready["s"] != 1 {
        return Err(format!(
            "{name}: expected READY with s = 1, got {ready:.500}"
        ));
    }
    let n = ready["d"]["guilds"].as_array().map_or(0, |g| g.len());
    let mut guild_creates = Vec::new();
    let mut seq = 1;
    for _ in 0..n {
        match read_next(&mut ws, Duration::from_secs(10)) {
            Next::Json(v) if v["t"] == "GUILD_CREATE" && v["s"] == seq + 1 => {
                seq += 1;
                guild_creates.push(v["d"].clone());
            }
            other => {
                return Err(format!(
                    "{name}: expected GUILD_CREATE with s = {}, got {other:?}",
                    seq + 1
                ))
            }
        }
    }
    Ok(Session {
        name: name.to_string(),
        ws,
        session_id: ready["d"]["session_id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        seq,
        ready,
        guild_creates,
    })
}

/// A GUILD_CREATE `d`'s server id and the id of its `#general` channel.
pub fn server_and_general(guild_create: &Value) -> (u64, u64) {
    let id = |v: &Value| -> u64 { v["id"].as_str().unwrap().parse().unwrap() };
    let general = guild_create["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "general")
        .expect("a #general channel");
    (id(guild_create), id(general))
}

pub fn ready_guild_ids(s: &Session) -> Vec<u64> {
    let mut v: Vec<u64> = s.ready["d"]["guilds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap().parse().unwrap())
        .collect();
    v.sort_unstable();
    v
}

// ------------------------------------------------------------------ metrics

/// `GET /metrics` as (name, labels, value) samples.
pub fn metrics(admin: SocketAddr) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let (status, body) = crate::common::http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "GET /metrics: {body}");
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (head, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => {
                    let rest = rest.trim_end_matches('}');
                    let labels = rest
                        .split(',')
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
                        .collect();
                    (n.to_string(), labels)
                }
                None => (head.to_string(), BTreeMap::new()),
            };
            Some((name, labels, value))
        })
        .collect()
}

/// Sum of a metric over the samples whose labels include all of `with`.
pub fn metric_sum(
    samples: &[(String, BTreeMap<String, String>, f64)],
    name: &str,
    with: &[(&str, &str)],
) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

/// A metric per `worker` label.
pub fn metric_by_worker(
    samples: &[(String, BTreeMap<String, String>, f64)],
    name: &str,
) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (n, l, v) in samples {
        if n == name {
            if let Some(w) = l.get("worker") {
                *m.entry(w.clone()).or_insert(0.0) += v;
            }
        }
    }
    m
}

/// Percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
