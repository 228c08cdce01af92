//! `gatewayd interact`: click as a person would. Writes one interaction
//! record (`ingest::FLAG_INTERACTION`) to the node's ingest listener, as the
//! chat service would when a person uses a slash command or a button, then
//! polls the node's admin port (`GET /interactions/{id}`) until the person
//! would see something, and prints it:
//!
//! ```text
//! interaction_id=1234...
//! state=answered
//! latency_ms=12
//! content=pong
//! ```
//!
//! or `state=failed failure=The application did not respond` (after 3 s).
//! Exit status 0 when the person saw a response, 2 on a failure.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use registry::{Registry, SqliteRegistry};
use serde_json::{json, Value};

#[derive(Args)]
pub struct InteractArgs {
    /// The node's ingest listener (`events.ingest_addr`); default: the
    /// `ingest=` line of `<data-dir>/gatewayd.addrs`, else 127.0.0.1:8081.
    #[arg(long)]
    ingest: Option<SocketAddr>,
    /// The node's admin address (`admin_addr`); default: the `admin=` line
    /// of `<data-dir>/gatewayd.addrs`, else 127.0.0.1:9090.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// The admin token, if the node has one.
    #[arg(long, env = "GATEWAYD_ADMIN_TOKEN")]
    admin_token: Option<String>,
    /// Data directory of the node: its registry (to find a person to act
    /// as) and the addresses it wrote (`gatewayd.addrs`).
    #[arg(long, default_value = "./gatewayd-data")]
    data_dir: PathBuf,
    /// The application (its bot) the interaction is for.
    #[arg(long)]
    app: u64,
    #[arg(long)]
    server: u64,
    #[arg(long)]
    channel: u64,
    /// A slash command's name.
    #[arg(long, conflicts_with = "button")]
    command: Option<String>,
    /// `name=value` options of the command (strings).
    #[arg(long = "option")]
    options: Vec<String>,
    /// With --command: ask for autocomplete choices (the last option is
    /// the focused one) instead of running the command.
    #[arg(long, requires = "command")]
    autocomplete: bool,
    /// Click the button with this custom_id on message `--message`.
    #[arg(long, requires = "message", conflicts_with = "modal")]
    button: Option<String>,
    /// Submit the modal with this custom_id, its text inputs as `--field id=value`.
    #[arg(long)]
    modal: Option<String>,
    #[arg(long = "field")]
    fields: Vec<String>,
    #[arg(long)]
    message: Option<u64>,
    /// The person (default: the server's first member in the registry).
    #[arg(long)]
    user: Option<u64>,
    /// How long to wait for what the person would see.
    #[arg(long, default_value_t = 5_000)]
    wait_ms: u64,
}

/// Where the node listens: what was given, else what the node wrote to
/// `<data_dir>/gatewayd.addrs`, else the defaults.
struct Node {
    ingest: SocketAddr,
    admin: SocketAddr,
}

impl Node {
    fn of(a: &InteractArgs) -> Result<Node, String> {
        let path = a.data_dir.join("gatewayd.addrs");
        let written = std::fs::read_to_string(&path).unwrap_or_default();
        let pick =
            |given: Option<SocketAddr>, name: &str, default: &str| -> Result<SocketAddr, String> {
                if let Some(g) = given {
                    return Ok(g);
                }
                match written
                    .lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                {
                    Some(v) => v
                        .trim()
                        .parse()
                        .map_err(|e| format!("{}: {name}={v}: {e}", path.display())),
                    None => Ok(default.parse().expect("a default address")),
                }
            };
        Ok(Node {
            ingest: pick(a.ingest, "ingest", "127.0.0.1:8081")?,
            admin: pick(a.admin, "admin", "127.0.0.1:9090")?,
        })
    }
}

pub fn run(a: InteractArgs) -> Result<i32, String> {
    let node = Node::of(&a)?;
    let user = match a.user {
        Some(u) => {
            json!({"id": u.to_string(), "username": "person", "discriminator": "0", "avatar": null, "global_name": null})
        }
        None => first_member(&a.data_dir, a.server)?,
    };
    let id = registry::snowflake::global().next_id();
    let pairs = |list: &[String]| -> Vec<(String, String)> {
        list.iter()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    };
    // The interaction's type: 2 command, 3 component, 4 autocomplete, 5 modal submit.
    let (kind, data) = match (&a.command, &a.button, &a.modal) {
        (Some(name), _, _) => {
            let n = a.options.len();
            let options: Vec<Value> = pairs(&a.options)
                .into_iter()
                .enumerate()
                .map(|(i, (k, v))| {
                    let mut o = json!({"name": k, "type": 3, "value": v});
                    if a.autocomplete && i + 1 == n {
                        o["focused"] = true.into();
                    }
                    o
                })
                .collect();
            let kind = if a.autocomplete { 4 } else { 2 };
            (kind, json!({"name": name, "type": 1, "options": options}))
        }
        (None, Some(custom_id), _) => (3, json!({"custom_id": custom_id, "component_type": 2})),
        (None, None, Some(custom_id)) => {
            let rows: Vec<Value> = pairs(&a.fields)
                .into_iter()
                .map(|(k, v)| json!({"type": 1, "components": [{"type": 4, "custom_id": k, "value": v}]}))
                .collect();
            (5, json!({"custom_id": custom_id, "components": rows}))
        }
        _ => {
            return Err(
                "give --command NAME, --button CUSTOM_ID --message ID, or --modal CUSTOM_ID".into(),
            )
        }
    };
    let mut d =
        json!({"id": id.to_string(), "type": kind, "user": user, "data": data, "locale": "en-US"});
    if let Some(m) = a.message {
        d["message"] = json!({"id": m.to_string(), "channel_id": a.channel.to_string()});
    }
    let mut frame = Vec::new();
    let d = serde_json::to_vec(&d).expect("json");
    ingest::encode_parts(
        "INTERACTION_CREATE",
        a.server,
        a.channel,
        0,
        0,
        now_ns(),
        ingest::FLAG_INTERACTION,
        &[a.app],
        &d,
        &mut frame,
    );
    let mut s = TcpStream::connect_timeout(&node.ingest, Duration::from_secs(2))
        .map_err(|e| format!("ingest listener {}: {e}", node.ingest))?;
    s.write_all(&frame).map_err(|e| format!("ingest: {e}"))?;
    drop(s);
    println!("interaction_id={id}");
    let until = Instant::now() + Duration::from_millis(a.wait_ms);
    loop {
        let seen = poll(&a, node.admin, id)?;
        let state = seen["state"].as_str().unwrap_or("unknown").to_owned();
        let done = matches!(state.as_str(), "answered" | "failed")
            || (state == "deferred" && seen.get("followups").is_some());
        if done || Instant::now() >= until {
            print_seen(&seen);
            return Ok(if state == "failed" { 2 } else { 0 });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn print_seen(seen: &Value) {
    let state = seen["state"].as_str().unwrap_or("unknown");
    println!("state={state}");
    if let Some(ms) = seen["latency_ms"].as_u64() {
        println!("latency_ms={ms}");
    }
    if let Some(f) = seen["failure"].as_str() {
        println!("failure={f}");
    }
    if let Some(c) = seen.get("choices") {
        println!("choices={c}");
    }
    if let Some(m) = seen.get("modal") {
        println!("modal_title={}", m["title"].as_str().unwrap_or(""));
    }
    let shown = seen
        .get("followups")
        .and_then(|f| f.as_array()?.last().cloned())
        .or_else(|| seen.get("message").cloned());
    if let Some(m) = shown {
        println!("content={}", m["content"].as_str().unwrap_or(""));
        println!("message_id={}", m["id"].as_str().unwrap_or(""));
    }
    println!("seen={seen}");
}

fn poll(a: &InteractArgs, admin: SocketAddr, id: u64) -> Result<Value, String> {
    let mut s = TcpStream::connect_timeout(&admin, Duration::from_secs(2))
        .map_err(|e| format!("admin {admin}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok();
    let auth = a
        .admin_token
        .as_ref()
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET /interactions/{id} HTTP/1.1\r\nHost: admin\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| format!("admin: {e}"))?;
    let mut buf = Vec::new();
    s.take(1 << 20)
        .read_to_end(&mut buf)
        .map_err(|e| format!("admin: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    if text.starts_with("HTTP/1.1 401") {
        return Err("admin port: unauthorized (give --admin-token)".into());
    }
    Ok(serde_json::from_str(body).unwrap_or(json!({"state": "unknown"})))
}

fn first_member(dir: &std::path::Path, server: u64) -> Result<Value, String> {
    let reg = SqliteRegistry::open(&dir.join("registry.sqlite")).map_err(|e| e.to_string())?;
    let m = reg
        .list_members(server, 0, 1)
        .map_err(|e| e.to_string())?
        .into_iter()
        .next()
        .ok_or_else(|| format!("server {server} has no members: give --user ID"))?;
    Ok(crate::protocol::guild::person(&m.user))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
