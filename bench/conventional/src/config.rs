//! The command line: [`Config`], its parser (`--key value` pairs, with the
//! defaults in the crate docs) and [`die`], which prints the usage and
//! exits with status 2 on anything it cannot parse. A leaf.

use std::collections::HashMap;

pub struct Config {
    pub gateway_addr: String,
    pub ingest_addr: String,
    pub admin_addr: Option<String>,
    pub tokens_file: Option<String>,
    pub server_id: u64,
    pub servers: u64,
    pub heartbeat_ms: u64,
    pub broadcast_capacity: usize,
    pub workers: Option<usize>,
}

pub fn parse_args() -> Config {
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

pub fn die(msg: &str) -> ! {
    eprintln!("conventional-gateway: {msg}\n{USAGE}");
    std::process::exit(2)
}
