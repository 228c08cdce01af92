//! A well-behaved bot over tungstenite: an independent WebSocket
//! implementation, so what it accepts is not judged by our own framer
//! (the raw client in `raw.rs` is for what a library would never send).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

pub type Ws = WebSocket<TcpStream>;

/// The Identify (op 2) every test client sends; `token` as given (with or
/// without `Bot `), `shard` as `[id, count]`.
pub fn identify_payload(token: &str, intents: u64, shard: Option<[u64; 2]>) -> Value {
    let mut d = json!({
        "token": token,
        "intents": intents,
        "properties": {"os": "linux", "browser": "gatewayd-tests", "device": "gatewayd-tests"},
        "large_threshold": 50,
    });
    if let Some(s) = shard {
        d["shard"] = json!(s);
    }
    json!({"op": 2, "d": d})
}

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

/// A plain `ws://` connection to `/?v=10&encoding=json` (10 s read timeout).
pub fn connect(gateway: SocketAddr) -> Ws {
    connect_path(gateway, "/?v=10&encoding=json")
}

pub fn connect_path(gateway: SocketAddr, path: &str) -> Ws {
    let stream = TcpStream::connect(gateway).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (ws, _) =
        tungstenite::client(format!("ws://{gateway}{path}"), stream).expect("websocket handshake");
    ws
}

pub fn send_json<S: Read + Write>(ws: &mut WebSocket<S>, v: &Value) {
    ws.send(Message::text(v.to_string())).expect("send");
}

/// The next text message as JSON, blocking (up to the stream's read
/// timeout); panics on a close, an error or non-JSON text.
pub fn recv<S: Read + Write>(ws: &mut WebSocket<S>) -> Value {
    loop {
        match ws.read().expect("read") {
            Message::Text(t) => {
                return serde_json::from_str(&t)
                    .unwrap_or_else(|e| panic!("server sent non-JSON text ({e}): {t:.300}"))
            }
            Message::Close(c) => panic!("closed: {c:?}"),
            _ => {}
        }
    }
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
            // A signal that interrupted the read (EINTR) says nothing about
            // the session: read again, as the timeout allows.
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Next::Ended(e.to_string()),
        }
    }
}

/// Hello, Identify, READY (`s` = 1) and one GUILD_CREATE per READY guild
/// (`s` +1 each), over any stream (e.g. TLS); panics on anything else.
/// Returns (READY, the GUILD_CREATE `d`s).
pub fn login<S: Read + Write>(
    ws: &mut WebSocket<S>,
    token: &str,
    intents: u64,
) -> (Value, Vec<Value>) {
    let hello = recv(ws);
    assert_eq!(hello["op"], 10, "Hello first: {hello}");
    send_json(ws, &identify_payload(token, intents, None));
    let ready = recv(ws);
    assert_eq!(
        (ready["t"].as_str(), ready["s"].as_u64()),
        (Some("READY"), Some(1)),
        "{ready:.500}"
    );
    let n = ready["d"]["guilds"].as_array().map_or(0, |g| g.len());
    let mut guild_creates = Vec::new();
    for i in 0..n {
        let gc = recv(ws);
        assert_eq!(
            (gc["t"].as_str(), gc["s"].as_u64()),
            (Some("GUILD_CREATE"), Some(2 + i as u64)),
            "{gc:.500}"
        );
        guild_creates.push(gc["d"].clone());
    }
    (ready, guild_creates)
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
    let shard = shard.map(|(id, count)| [u64::from(id), u64::from(count)]);
    send_json(
        &mut ws,
        &identify_payload(&format!("Bot {token}"), intents, shard),
    );
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

/// With identify limits on: shard [0, 2] starts, and shard [1, 2] right
/// after it (the same concurrency bucket at max_concurrency 1, within its
/// spacing) is refused with op 9. The started session and what the second
/// got instead.
pub fn concurrency_refusal(gateway: SocketAddr, token: &str) -> (Session, String) {
    let guilds = 1; // GUILDS
    let first = identify(gateway, "a", token, guilds, Some((0, 2)))
        .unwrap_or_else(|e| panic!("the first Identify of the bucket: {e}"));
    let second = identify(gateway, "b", token, guilds, Some((1, 2)))
        .err()
        .expect("a second Identify in the bucket within its spacing started");
    (first, second)
}

fn id_of(v: &Value) -> u64 {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string id: {v}"))
        .parse()
        .unwrap()
}

impl Session {
    /// The application id READY names.
    pub fn app_id(&self) -> u64 {
        id_of(&self.ready["d"]["application"]["id"])
    }

    /// The first GUILD_CREATE's server id.
    pub fn first_server(&self) -> u64 {
        id_of(&self.guild_creates[0]["id"])
    }

    /// The next dispatch (op 0), keeping `seq`; other messages are skipped.
    pub fn next_dispatch(&mut self, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match read_next(&mut self.ws, left) {
                Next::Json(v) if v["op"] == 0 => {
                    self.seq = v["s"].as_u64().unwrap();
                    return v;
                }
                Next::Json(_) => {}
                other => panic!("{}: expected a dispatch, got {other:?}", self.name),
            }
        }
    }

    /// Reads until `until`: the instants at which MESSAGE_CREATEs arrived.
    pub fn messages_until(&mut self, until: Instant) -> Vec<Instant> {
        let mut at = Vec::new();
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match read_next(&mut self.ws, left) {
                Next::Json(v) if v["t"] == "MESSAGE_CREATE" => at.push(Instant::now()),
                Next::Json(_) => {}
                Next::Timeout => break,
                other => panic!("{}: session ended: {other:?}", self.name),
            }
        }
        at
    }

    /// Close (1000) and read until the server's reply or 3 s.
    pub fn close_politely(mut self) {
        let _ = self.ws.close(None);
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match read_next(&mut self.ws, Duration::from_millis(500)) {
                Next::Json(_) | Next::Timeout => {}
                _ => break,
            }
        }
    }
}

/// A GUILD_CREATE `d`'s server id and the id of its `#general` channel.
pub fn server_and_general(guild_create: &Value) -> (u64, u64) {
    let general = guild_create["channels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "general")
        .expect("a #general channel");
    (id_of(&guild_create["id"]), id_of(&general["id"]))
}

pub fn ready_guild_ids(s: &Session) -> Vec<u64> {
    let mut v: Vec<u64> = s.ready["d"]["guilds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| id_of(&g["id"]))
        .collect();
    v.sort_unstable();
    v
}
