//! A Discord-Gateway-style node built the way most teams would build one:
//! the baseline of the side-by-side benchmark (issue 6, `docs/bench/side-by-side.md`).
//!
//! - tokio multi-thread runtime (one worker thread per core by default);
//! - tokio-tungstenite, one task per WebSocket connection, `SinkExt::send`
//!   per outgoing message;
//! - one `tokio::sync::broadcast` channel per server (made at start), each
//!   carrying that server's events to the tasks of its sessions;
//! - serde_json: each ingest record's `d` is parsed into a `serde_json::Value`
//!   once, and every recipient task serialises its own
//!   `{"op":0,"t":..,"s":..,"d":..}` (the `s` differs per session).
//!
//! The protocol subset is what `loadgen measure` and ordinary bots use:
//! HTTP upgrade on any path, op 10 Hello, op 2 Identify (token checked
//! against `--tokens-file` or, without it, any token accepted; intents),
//! READY (`s` = 1) and one GUILD_CREATE (`s` = 2) for the bot's server
//! (channels `general`, `random`, `announcements`), op 1
//! Heartbeat -> op 11, MESSAGE_CREATE and any other dispatch from the ingest
//! port with a per-session `s`, filtered by intents, server membership and
//! channel permissions, with MESSAGE_CONTENT redaction. No resume, no
//! sharding beyond `[0, 1]`, no rate limits: a baseline, not a product.
//!
//! Servers: `--servers S` (default 1) serves S servers, ids `--server-id` +
//! 16·j (j < S; channels are the server id + 1, 2, 3, so they are distinct);
//! the bot of token line i (0-based) is in server j = i % S alone (without
//! `--tokens-file`, a made-up bot's server is a hash of its token mod S).
//! An ingest record for a server the node does not serve is counted and
//! dropped.
//!
//! Events come in on `--ingest-addr` in the same record format as gatewayd's
//! ingest port (the `ingest` crate's `FrameReader` decodes them).
//! `--admin-addr` serves `GET /metrics` (Prometheus text): deliveries,
//! sessions, events in, events skipped by lagging receivers. The deliveries
//! counter is also exported as `gatewayd_deliveries_total` so that
//! `loadgen measure fanout --admin` reports the same node-side figures for both nodes.
//!
//! ```text
//! conventional-gateway [--gateway-addr 127.0.0.1:28080] [--ingest-addr 127.0.0.1:28081]
//!     [--admin-addr 127.0.0.1:29090] [--tokens-file F] [--server-id ID] [--servers 1]
//!     [--heartbeat-interval-ms 41250] [--broadcast-capacity 4096 (per server)] [--workers N]
//! ```

#![recursion_limit = "256"]

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

const GUILDS: u64 = 1 << 0;
const MESSAGE_CONTENT: u64 = 1 << 15;
const VIEW_CHANNEL: u64 = 1 << 10;
const SEND_MESSAGES: u64 = 1 << 11;

// ---------------------------------------------------------------- config

struct Config {
    gateway_addr: String,
    ingest_addr: String,
    admin_addr: Option<String>,
    tokens_file: Option<String>,
    server_id: u64,
    servers: u64,
    heartbeat_ms: u64,
    broadcast_capacity: usize,
    workers: Option<usize>,
}

fn parse_args() -> Config {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut map: HashMap<String, String> = HashMap::new();
    let mut i = 0;
    while i < argv.len() {
        if argv[i] == "-h" || argv[i] == "--help" {
            println!("{}", USAGE);
            std::process::exit(0);
        }
        let Some(k) = argv[i].strip_prefix("--") else {
            die(&format!("unexpected argument {}", argv[i]));
        };
        let Some(v) = argv.get(i + 1) else {
            die(&format!("--{k} needs a value"));
        };
        map.insert(k.to_string(), v.clone());
        i += 2;
    }
    let num = |k: &str, d: u64| -> u64 {
        map.get(k)
            .map(|v| v.parse().unwrap_or_else(|_| die(&format!("bad --{k}"))))
            .unwrap_or(d)
    };
    Config {
        gateway_addr: map
            .get("gateway-addr")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:28080".into()),
        ingest_addr: map
            .get("ingest-addr")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:28081".into()),
        admin_addr: map.get("admin-addr").cloned(),
        tokens_file: map.get("tokens-file").cloned(),
        // A snowflake-shaped id (shard 0 of 1 like every id).
        server_id: num("server-id", 1_170_000_000_000_000_001),
        servers: num("servers", 1).max(1),
        heartbeat_ms: num("heartbeat-interval-ms", 41_250),
        broadcast_capacity: num("broadcast-capacity", 4096) as usize,
        workers: map
            .get("workers")
            .map(|v| v.parse().unwrap_or_else(|_| die("bad --workers"))),
    }
}

const USAGE: &str =
    "usage: conventional-gateway [--gateway-addr A] [--ingest-addr A] [--admin-addr A]
       [--tokens-file F] [--server-id ID] [--servers 1] [--heartbeat-interval-ms 41250]
       [--broadcast-capacity 4096] [--workers N]
  --servers S: S servers, ids server-id + 16*j; token line i is a bot in server i % S
  --broadcast-capacity: of each server's broadcast channel";

fn die(msg: &str) -> ! {
    eprintln!("conventional-gateway: {msg}\n{USAGE}");
    std::process::exit(2)
}

// ---------------------------------------------------------------- state

struct Bot {
    application_id: u64,
    user_id: u64,
    username: String,
    /// The one server it is installed in.
    server: u64,
}

struct Channel {
    id: u64,
    name: &'static str,
    position: u32,
}

/// One event from the ingest port, parsed once, shared by every receiver.
struct Event {
    t: String,
    guild_id: u64,
    channel_id: u64,
    intent: u64,
    permissions: u64,
    has_content: bool,
    mentions: Vec<u64>,
    d: Payload,
}

/// An event's `d`: MESSAGE_CREATE / MESSAGE_UPDATE into a typed struct (as
/// Rust Discord libraries model them), everything else as a `Value`.
enum Payload {
    Message(Box<MessageData>),
    Other(Value),
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Message(m) => m.serialize(s),
            Payload::Other(v) => v.serialize(s),
        }
    }
}

/// A message as the gateway sends it. Field order is the struct's (a
/// `serde_json::Value` would sort the keys). `ts_ns` is the benchmark's
/// timestamp (`loadgen measure fanout` expects it first); unknown fields are
/// dropped, as typed clients do.
#[derive(Serialize, Deserialize, Clone)]
struct MessageData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ts_ns: Option<u64>,
    id: String,
    #[serde(rename = "type", default)]
    kind: u8,
    channel_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guild_id: Option<String>,
    author: User,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member: Option<Value>,
    #[serde(default)]
    content: String,
    timestamp: String,
    #[serde(default)]
    edited_timestamp: Option<String>,
    #[serde(default)]
    tts: bool,
    #[serde(default)]
    mention_everyone: bool,
    #[serde(default)]
    mentions: Vec<Value>,
    #[serde(default)]
    mention_roles: Vec<String>,
    #[serde(default)]
    attachments: Vec<Value>,
    #[serde(default)]
    embeds: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    components: Vec<Value>,
    #[serde(default)]
    pinned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nonce: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flags: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    referenced_message: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone)]
struct User {
    id: String,
    username: String,
    #[serde(default)]
    discriminator: String,
    #[serde(default)]
    global_name: Option<String>,
    #[serde(default)]
    avatar: Option<String>,
    #[serde(default)]
    bot: bool,
}

#[derive(Default)]
struct Metrics {
    deliveries: AtomicU64,
    events_in: AtomicU64,
    lagged_events: AtomicU64,
    identifies: AtomicU64,
    sessions: AtomicI64,
    connections: AtomicI64,
    ingest_errors: AtomicU64,
    /// Ingest records for a server this node does not serve.
    unknown_server_events: AtomicU64,
}

struct State {
    cfg: Config,
    /// `None`: any token is accepted (one bot per distinct token, made up).
    bots: Option<HashMap<String, Bot>>,
    /// Each server's broadcast channel: its events reach only its sessions.
    servers: HashMap<u64, broadcast::Sender<Arc<Event>>>,
    metrics: Metrics,
    gateway_url: String,
}

/// Server `j` of `cfg` (j < servers).
fn server_of(cfg: &Config, j: u64) -> u64 {
    cfg.server_id + (j % cfg.servers) * 16
}

/// A server's channels: ids the server id + 1, 2, 3.
fn channels(server: u64) -> [Channel; 3] {
    [
        Channel {
            id: server + 1,
            name: "general",
            position: 0,
        },
        Channel {
            id: server + 2,
            name: "random",
            position: 1,
        },
        Channel {
            id: server + 3,
            name: "announcements",
            position: 2,
        },
    ]
}

fn load_bots(path: &str, cfg: &Config) -> HashMap<String, Bot> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| die(&format!("reading {path}: {e}")));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, t)| {
            let id = 1_170_000_000_100_000_000 + i as u64;
            (
                t.to_string(),
                Bot {
                    application_id: id,
                    user_id: id,
                    username: format!("bot{}", i + 1),
                    server: server_of(cfg, i as u64),
                },
            )
        })
        .collect()
}

// ---------------------------------------------------------------- main

fn main() {
    let cfg = parse_args();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = cfg.workers {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build().expect("tokio runtime");
    rt.block_on(run(cfg));
}

async fn run(cfg: Config) {
    let bots = cfg.tokens_file.as_deref().map(|p| load_bots(p, &cfg));
    let servers = (0..cfg.servers)
        .map(|j| {
            let (tx, _) = broadcast::channel(cfg.broadcast_capacity.max(1));
            (server_of(&cfg, j), tx)
        })
        .collect();
    let gw = TcpListener::bind(&cfg.gateway_addr)
        .await
        .unwrap_or_else(|e| die(&format!("gateway listener {}: {e}", cfg.gateway_addr)));
    let ing = TcpListener::bind(&cfg.ingest_addr)
        .await
        .unwrap_or_else(|e| die(&format!("ingest listener {}: {e}", cfg.ingest_addr)));
    let gateway_url = format!("ws://{}", gw.local_addr().unwrap());
    let admin = match &cfg.admin_addr {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .unwrap_or_else(|e| die(&format!("admin listener {a}: {e}"))),
        ),
        None => None,
    };
    eprintln!(
        "conventional-gateway: gateway={} ingest={} admin={} tokens={} server={} servers={}",
        gw.local_addr().unwrap(),
        ing.local_addr().unwrap(),
        admin
            .as_ref()
            .map(|a| a.local_addr().unwrap().to_string())
            .unwrap_or_else(|| "-".into()),
        bots.as_ref()
            .map(|b| b.len().to_string())
            .unwrap_or_else(|| "any".into()),
        cfg.server_id,
        cfg.servers
    );
    let state = Arc::new(State {
        cfg,
        bots,
        servers,
        metrics: Metrics::default(),
        gateway_url,
    });
    tokio::spawn(ingest_accept(ing, state.clone()));
    if let Some(a) = admin {
        tokio::spawn(admin_accept(a, state.clone()));
    }
    loop {
        match gw.accept().await {
            Ok((sock, _)) => {
                let st = state.clone();
                tokio::spawn(async move {
                    st.metrics.connections.fetch_add(1, Relaxed);
                    let _ = connection(sock, &st).await;
                    st.metrics.connections.fetch_sub(1, Relaxed);
                });
            }
            Err(e) => {
                eprintln!("conventional-gateway: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

// ---------------------------------------------------------------- gateway

type Ws = WebSocketStream<TcpStream>;
type BoxErr = Box<dyn std::error::Error + Send + Sync>;

#[derive(Serialize)]
struct Dispatch<'a, T: Serialize> {
    op: u8,
    t: &'a str,
    s: u64,
    d: &'a T,
}

async fn send_json(ws: &mut Ws, v: &impl Serialize) -> Result<(), BoxErr> {
    let text = serde_json::to_string(v)?;
    ws.send(Message::text(text)).await?;
    Ok(())
}

async fn close(ws: &mut Ws, code: u16, reason: &str) {
    let _ = ws
        .close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.to_string().into(),
        }))
        .await;
}

struct Session {
    bot_user_id: u64,
    intents: u64,
    /// Effective permissions per channel of the bot's server.
    channel_perms: HashMap<u64, u64>,
    guild_id: u64,
    seq: u64,
}

impl Session {
    fn wants(&self, ev: &Event) -> bool {
        if ev.guild_id != self.guild_id || self.intents & ev.intent != ev.intent {
            return false;
        }
        if ev.channel_id != 0 {
            let p = self.channel_perms.get(&ev.channel_id).copied().unwrap_or(0);
            let need = VIEW_CHANNEL | ev.permissions;
            if p & need != need {
                return false;
            }
        }
        true
    }
}

/// Empties the MESSAGE_CONTENT fields of a message (what a bot without the
/// intent sees), unless the bot is mentioned.
fn redact(d: &Payload) -> Payload {
    match d {
        Payload::Message(m) => {
            let mut m = m.clone();
            m.content.clear();
            m.embeds.clear();
            m.attachments.clear();
            m.components.clear();
            Payload::Message(m)
        }
        Payload::Other(v) => {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("content".into(), json!(""));
                o.insert("embeds".into(), json!([]));
                o.insert("attachments".into(), json!([]));
                o.insert("components".into(), json!([]));
                o.remove("poll");
            }
            Payload::Other(v)
        }
    }
}

async fn connection(sock: TcpStream, st: &State) -> Result<(), BoxErr> {
    sock.set_nodelay(true)?;
    let mut ws = tokio_tungstenite::accept_async(sock).await?;
    let hb = Duration::from_millis(st.cfg.heartbeat_ms);
    send_json(
        &mut ws,
        &json!({"op": 10, "d": {"heartbeat_interval": st.cfg.heartbeat_ms}}),
    )
    .await?;

    // Until Identify: heartbeats are answered, anything else is refused.
    let identify: Value = loop {
        let msg = match timeout(Duration::from_secs(30), ws.next()).await {
            Err(_) => {
                close(&mut ws, 4003, "not authenticated in time").await;
                return Ok(());
            }
            Ok(None) => return Ok(()),
            Ok(Some(m)) => m?,
        };
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(_) => return Ok(()),
            Message::Binary(_) => {
                close(&mut ws, 4002, "decode error").await;
                return Ok(());
            }
            _ => continue,
        };
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => {
                close(&mut ws, 4002, "decode error").await;
                return Ok(());
            }
        };
        match v["op"].as_u64() {
            Some(1) => send_json(&mut ws, &json!({"op": 11})).await?,
            Some(2) => break v,
            _ => {
                close(&mut ws, 4003, "not authenticated").await;
                return Ok(());
            }
        }
    };
    let d = &identify["d"];
    let token = d["token"].as_str().unwrap_or("");
    let token = token.strip_prefix("Bot ").unwrap_or(token);
    let Some(intents) = d["intents"].as_u64() else {
        close(&mut ws, 4013, "invalid intents").await;
        return Ok(());
    };
    let made_up;
    let bot = match &st.bots {
        Some(bots) => match bots.get(token) {
            Some(b) => b,
            None => {
                close(&mut ws, 4004, "authentication failed").await;
                return Ok(());
            }
        },
        None => {
            let id = 1_170_000_000_200_000_000 + (fnv(token.as_bytes()) % 1_000_000);
            made_up = Bot {
                application_id: id,
                user_id: id,
                username: format!("bot{id}"),
                server: server_of(&st.cfg, fnv(token.as_bytes()) % st.cfg.servers),
            };
            &made_up
        }
    };

    // Subscribe before READY so that nothing committed after it is missed.
    let guild_id = bot.server;
    let mut rx = st.servers[&guild_id].subscribe();
    let perms = VIEW_CHANNEL | SEND_MESSAGES;
    let mut session = Session {
        bot_user_id: bot.user_id,
        intents,
        channel_perms: channels(guild_id).iter().map(|c| (c.id, perms)).collect(),
        guild_id,
        seq: 0,
    };
    let user = json!({
        "id": bot.user_id.to_string(), "username": bot.username, "discriminator": "0",
        "global_name": null, "avatar": null, "bot": true, "system": false,
        "mfa_enabled": false, "verified": true, "email": null, "flags": 0,
        "public_flags": 0, "banner": null, "accent_color": null,
    });
    let session_id = new_session_id();
    session.seq += 1;
    let ready = json!({
        "v": 10,
        "user": user,
        "guilds": [{"id": guild_id.to_string(), "unavailable": true}],
        "session_id": session_id,
        "session_type": "normal",
        "resume_gateway_url": st.gateway_url,
        "shard": [0, 1],
        "application": {"id": bot.application_id.to_string(), "flags": 0},
        "private_channels": [], "relationships": [], "presences": [],
        "guild_join_requests": [], "geo_ordered_rtc_regions": [],
        "user_settings": {}, "auth": {}, "_trace": ["conventional-gateway"],
    });
    send_json(
        &mut ws,
        &Dispatch {
            op: 0,
            t: "READY",
            s: session.seq,
            d: &ready,
        },
    )
    .await?;
    if intents & GUILDS != 0 {
        session.seq += 1;
        let gc = guild_create(bot, &user);
        send_json(
            &mut ws,
            &Dispatch {
                op: 0,
                t: "GUILD_CREATE",
                s: session.seq,
                d: &gc,
            },
        )
        .await?;
    }
    st.metrics.identifies.fetch_add(1, Relaxed);
    st.metrics.sessions.fetch_add(1, Relaxed);
    let r = session_loop(&mut ws, st, &mut session, &mut rx, hb).await;
    st.metrics.sessions.fetch_sub(1, Relaxed);
    r
}

async fn session_loop(
    ws: &mut Ws,
    st: &State,
    session: &mut Session,
    rx: &mut broadcast::Receiver<Arc<Event>>,
    hb: Duration,
) -> Result<(), BoxErr> {
    // A session that misses heartbeats for 1.5 intervals is a zombie.
    let zombie_after = hb + hb / 2;
    let deadline = sleep_until(Instant::now() + zombie_after);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            msg = ws.next() => {
                let msg = match msg {
                    None => return Ok(()),
                    Some(m) => m?,
                };
                match msg {
                    Message::Text(text) => {
                        let v: Value = match serde_json::from_str(&text) {
                            Ok(v) => v,
                            Err(_) => {
                                close(ws, 4002, "decode error").await;
                                return Ok(());
                            }
                        };
                        match v["op"].as_u64() {
                            Some(1) => {
                                deadline.as_mut().reset(Instant::now() + zombie_after);
                                send_json(ws, &json!({"op": 11})).await?;
                            }
                            Some(2) => {
                                close(ws, 4005, "already authenticated").await;
                                return Ok(());
                            }
                            Some(_) => {}
                            None => {
                                close(ws, 4002, "decode error").await;
                                return Ok(());
                            }
                        }
                    }
                    Message::Close(_) => return Ok(()),
                    // Pings are answered by tungstenite itself.
                    _ => {}
                }
            }
            ev = rx.recv() => {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        // This task fell more than the channel's capacity behind:
                        // those events are gone for this session.
                        st.metrics.lagged_events.fetch_add(n, Relaxed);
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                };
                if !session.wants(&ev) {
                    continue;
                }
                session.seq += 1;
                let needs_redaction = ev.has_content
                    && session.intents & MESSAGE_CONTENT == 0
                    && !ev.mentions.contains(&session.bot_user_id);
                if needs_redaction {
                    let d = redact(&ev.d);
                    send_json(ws, &Dispatch { op: 0, t: &ev.t, s: session.seq, d: &d }).await?;
                } else {
                    send_json(ws, &Dispatch { op: 0, t: &ev.t, s: session.seq, d: &ev.d }).await?;
                }
                st.metrics.deliveries.fetch_add(1, Relaxed);
            }
            _ = &mut deadline => {
                close(ws, 4009, "session timed out").await;
                return Ok(());
            }
        }
    }
}

fn guild_create(bot: &Bot, user: &Value) -> Value {
    let gid = bot.server;
    let channels: Vec<Value> = channels(gid)
        .iter()
        .map(|c| {
            json!({
                "id": c.id.to_string(), "type": 0, "guild_id": gid.to_string(),
                "name": c.name, "position": c.position, "parent_id": null, "topic": null,
                "nsfw": false, "rate_limit_per_user": 0, "last_message_id": null,
                "permission_overwrites": [], "flags": 0,
            })
        })
        .collect();
    let role_id = gid + 100;
    json!({
        "id": gid.to_string(), "name": "bench server", "icon": null, "icon_hash": null,
        "splash": null, "discovery_splash": null, "banner": null, "description": null,
        "owner_id": gid.to_string(), "afk_channel_id": null, "afk_timeout": 300,
        "widget_enabled": false, "verification_level": 0, "default_message_notifications": 0,
        "explicit_content_filter": 0, "mfa_level": 0, "nsfw_level": 0, "premium_tier": 0,
        "premium_subscription_count": 0, "premium_progress_bar_enabled": false,
        "preferred_locale": "en-US", "system_channel_id": null, "system_channel_flags": 0,
        "rules_channel_id": null, "public_updates_channel_id": null,
        "safety_alerts_channel_id": null, "vanity_url_code": null, "application_id": null,
        "max_members": 500000, "max_video_channel_users": 25, "features": [], "emojis": [],
        "stickers": [],
        "roles": [
            {"id": gid.to_string(), "name": "@everyone", "permissions": "0", "position": 0,
             "color": 0, "hoist": false, "managed": false, "mentionable": false, "icon": null,
             "unicode_emoji": null, "flags": 0, "tags": {}},
            {"id": role_id.to_string(), "name": bot.username, "permissions": (VIEW_CHANNEL | SEND_MESSAGES).to_string(),
             "position": 1, "color": 0, "hoist": false, "managed": true, "mentionable": false,
             "icon": null, "unicode_emoji": null, "flags": 0,
             "tags": {"bot_id": bot.user_id.to_string()}},
        ],
        "channels": channels, "threads": [],
        "members": [{
            "user": user, "nick": null, "avatar": null, "roles": [role_id.to_string()],
            "joined_at": "2026-01-01T00:00:00.000000+00:00", "premium_since": null,
            "deaf": false, "mute": false, "pending": false, "flags": 0,
            "communication_disabled_until": null,
        }],
        "member_count": 2, "presences": [], "voice_states": [], "stage_instances": [],
        "guild_scheduled_events": [], "soundboard_sounds": [], "large": false,
        "unavailable": false, "joined_at": "2026-01-01T00:00:00.000000+00:00",
    })
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let s = std::collections::hash_map::RandomState::new();
    let mut h = s.build_hasher();
    h.write_u64(N.fetch_add(1, Relaxed));
    let a = h.finish();
    h.write_u64(a);
    format!("{:016x}{:016x}", a, h.finish())
}

// ---------------------------------------------------------------- ingest

async fn ingest_accept(l: TcpListener, st: Arc<State>) {
    loop {
        match l.accept().await {
            Ok((sock, peer)) => {
                let st = st.clone();
                tokio::spawn(async move {
                    if let Err(e) = ingest_conn(sock, &st).await {
                        eprintln!("conventional-gateway: ingest {peer}: {e}");
                    }
                });
            }
            Err(e) => {
                eprintln!("conventional-gateway: ingest accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn ingest_conn(mut sock: TcpStream, st: &State) -> Result<(), BoxErr> {
    let mut reader = ingest::FrameReader::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = sock.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        reader.push(&buf[..n]);
        while let Some(r) = reader.next() {
            let rec = match r {
                Ok(rec) => rec,
                Err(e) if e.is_fatal() => {
                    return Err(format!("fatal record: {}", e.reason()).into())
                }
                Err(_) => {
                    st.metrics.ingest_errors.fetch_add(1, Relaxed);
                    continue;
                }
            };
            let t = rec.event_type();
            let d = if t == "MESSAGE_CREATE" || t == "MESSAGE_UPDATE" {
                serde_json::from_slice(rec.d()).map(|m| Payload::Message(Box::new(m)))
            } else {
                serde_json::from_slice(rec.d()).map(Payload::Other)
            };
            let d = match d {
                Ok(d) => d,
                Err(_) => {
                    st.metrics.ingest_errors.fetch_add(1, Relaxed);
                    continue;
                }
            };
            let ev = Event {
                t: rec.event_type().to_string(),
                guild_id: rec.server_id(),
                channel_id: rec.channel_id(),
                intent: rec.intent(),
                permissions: rec.permissions(),
                has_content: rec.has_content(),
                mentions: rec.mentions().iter().map(|m| m.to_native()).collect(),
                d,
            };
            st.metrics.events_in.fetch_add(1, Relaxed);
            let Some(tx) = st.servers.get(&ev.guild_id) else {
                st.metrics.unknown_server_events.fetch_add(1, Relaxed);
                continue;
            };
            // Err only when no session is subscribed: nobody to deliver to.
            let _ = tx.send(Arc::new(ev));
        }
    }
}

// ---------------------------------------------------------------- admin

async fn admin_accept(l: TcpListener, st: Arc<State>) {
    loop {
        let Ok((mut sock, _)) = l.accept().await else {
            continue;
        };
        let st = st.clone();
        tokio::spawn(async move {
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let (status, body) = if req.starts_with(b"GET /metrics") {
                ("200 OK", metrics_text(&st))
            } else if req.starts_with(b"GET /healthz") || req.starts_with(b"GET /readyz") {
                ("200 OK", "ok\n".to_string())
            } else {
                ("404 Not Found", "not found\n".to_string())
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

fn metrics_text(st: &State) -> String {
    let m = &st.metrics;
    let d = m.deliveries.load(Relaxed);
    format!(
        "# TYPE conventional_deliveries_total counter\nconventional_deliveries_total {d}\n\
         # HELP gatewayd_deliveries_total alias of conventional_deliveries_total, read by loadgen measure fanout\n\
         # TYPE gatewayd_deliveries_total counter\ngatewayd_deliveries_total {d}\n\
         # TYPE conventional_events_in_total counter\nconventional_events_in_total {}\n\
         # TYPE conventional_lagged_events_total counter\nconventional_lagged_events_total {}\n\
         # TYPE conventional_identifies_total counter\nconventional_identifies_total {}\n\
         # TYPE conventional_ingest_errors_total counter\nconventional_ingest_errors_total {}\n\
         # TYPE conventional_unknown_server_events_total counter\nconventional_unknown_server_events_total {}\n\
         # TYPE conventional_sessions gauge\nconventional_sessions {}\n\
         # TYPE conventional_connections gauge\nconventional_connections {}\n",
        m.events_in.load(Relaxed),
        m.lagged_events.load(Relaxed),
        m.identifies.load(Relaxed),
        m.ingest_errors.load(Relaxed),
        m.unknown_server_events.load(Relaxed),
        m.sessions.load(Relaxed),
        m.connections.load(Relaxed),
    )
}
