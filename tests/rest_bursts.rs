//! Real libraries burst concurrent sends through the REST edge with the
//! real rate limits on (issue 27): discord.py 2.x (tests/py/burst_bot.py)
//! and discord.js 14 (tests/js/burst_bot.js), each sending every message
//! of the burst at once, 30 on one channel and 100 across 10 channels.
//! The limits (5 sends per 5 s per channel, 50 requests per second per
//! bot; docs/rate-limits.md) are never lifted here: the libraries must
//! pace themselves from our headers alone, so
//!
//! - no request of theirs gets a 429, by their own reporting (discord.py:
//!   its "We are being rate limited" warning, its DEBUG log of each
//!   response's status, its aiohttp trace; discord.js: the REST manager's
//!   `response` events and its "unexpected 429" debug line), and the
//!   node's `gatewayd_rest_limited_total` stays 0;
//! - every send succeeds;
//! - every message the REST answers named reaches the bot's own gateway
//!   session exactly once (as the library dispatched it) and a second
//!   bot's raw session exactly once, with nothing else.
//!
//! The node runs `--workers 2`. The bot's token is served by one worker
//! (`api::owner_of`), the observer's by the other; the servers are picked
//! by the worker that commits them (`api::commit_worker`, see
//! tests/rest_workers.rs): one server committed on the other worker than
//! the bot's (every send hops), or two servers committed on different
//! workers. discord.py comes from `GATEWAYD_PYTHON`, discord.js from
//! `GATEWAYD_NODE_MODULES` (scripts/test-all.sh installs both):
//!
//! ```sh
//! GATEWAYD_PYTHON=/var/cache/gatewayd-ci/venv/bin/python \
//! GATEWAYD_NODE_MODULES=/var/cache/gatewayd-ci/js/node_modules \
//!     cargo test --test rest_bursts -- --include-ignored
//! ```

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot::{self, Next, Session};
use support::node::Node;
use support::perm::*;
use support::placement::{self, id_of};
use support::python::BotRun;
use support::registry::{App, Registry};

const WORKERS: usize = 2;
const GRANT: u64 = VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY;

fn owner(app: u64) -> usize {
    placement::owner(app, WORKERS)
}

fn commit_worker(server: u64) -> usize {
    placement::commit_worker(server, WORKERS)
}

#[derive(Clone, Copy, Debug)]
enum Lib {
    DiscordPy,
    DiscordJs,
}

/// Where a server is committed, seen from the bot's token.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Commit {
    /// On the worker serving the bot's token.
    Local,
    /// On the other worker: every send crosses to it and back.
    Hop,
}

/// A two-worker node; the bot and an observer served on different
/// workers, both installed in `servers` (placed as asked), each with
/// `channels` channels.
struct Place {
    node: Node,
    bot: App,
    observer: App,
    /// Per server: (server id, its channels).
    servers: Vec<(u64, Vec<u64>)>,
}

fn place(servers: &[(Commit, usize)]) -> Place {
    let node = Node::start(&["--no-demo-traffic", "--workers", "2"]);
    let reg = Registry::new(node.dir.path());
    let bot = reg.add_app("burst-bot", support::intent::MESSAGE_CONTENT);
    let observer = (0..32)
        .map(|i| reg.add_app(&format!("observer-{i}"), support::intent::MESSAGE_CONTENT))
        .find(|a| owner(a.id) != owner(bot.id))
        .expect("32 applications cover both workers");
    let mut placed = Vec::new();
    for (k, &(commit, channels)) in servers.iter().enumerate() {
        let want = match commit {
            Commit::Local => owner(bot.id),
            Commit::Hop => 1 - owner(bot.id),
        };
        let (server, general) = (0..32)
            .map(|i| reg.add_server(&format!("srv-{k}-{i}")))
            .find(|(s, _)| commit_worker(*s) == want)
            .expect("32 servers cover both workers");
        let mut ids = vec![general];
        for c in 1..channels {
            ids.push(reg.add_channel(server, &format!("burst-{c}")));
        }
        for app in [&bot, &observer] {
            reg.install(app.id, server, Some(GRANT));
        }
        placed.push((server, ids));
    }
    Place {
        node,
        bot,
        observer,
        servers: placed,
    }
}

/// A raw session reading in a thread until stopped: every MESSAGE_CREATE
/// of `author` as (message id, channel id), heartbeating meanwhile (the
/// slowest burst lasts longer than a heartbeat interval).
struct Observer {
    stop: Arc<AtomicBool>,
    seen: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
    thread: std::thread::JoinHandle<Result<(), String>>,
}

impl Observer {
    fn start(mut s: Session, author: u64) -> Observer {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stop2, seen2) = (stop.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            let mut beat = Instant::now();
            while !stop2.load(Ordering::Relaxed) {
                if beat.elapsed() > Duration::from_secs(5) {
                    bot::send_json(&mut s.ws, &json!({"op": 1, "d": s.seq}));
                    beat = Instant::now();
                }
                match bot::read_next(&mut s.ws, Duration::from_millis(250)) {
                    Next::Json(v) => {
                        if let Some(seq) = v["s"].as_u64() {
                            s.seq = seq;
                        }
                        if v["t"] == "MESSAGE_CREATE" && id_of(&v["d"]["author"]["id"]) == author {
                            let d = &v["d"];
                            seen2
                                .lock()
                                .unwrap()
                                .push((id_of(&d["id"]), id_of(&d["channel_id"])));
                        }
                    }
                    Next::Timeout => {}
                    other => return Err(format!("{}: session ended: {other:?}", s.name)),
                }
            }
            s.close_politely();
            Ok(())
        });
        Observer { stop, seen, thread }
    }

    /// Once it has seen every one of `ids` (or 30 s), a second more for a
    /// late duplicate; then what it saw.
    fn finish(self, ids: &HashSet<u64>) -> Vec<(u64, u64)> {
        let all = || {
            let seen = self.seen.lock().unwrap();
            let got: HashSet<u64> = seen.iter().map(|p| p.0).collect();
            ids.is_subset(&got)
        };
        if support::wait_until(Duration::from_secs(30), all).is_some() {
            std::thread::sleep(Duration::from_secs(1));
        }
        self.stop.store(true, Ordering::Relaxed);
        let ended = self.thread.join().expect("observer thread");
        if let Err(e) = ended {
            panic!("the observer's session ended during the burst: {e}");
        }
        let seen = self.seen.lock().unwrap();
        seen.clone()
    }
}

fn run_lib(lib: Lib, p: &Place, channels: &[u64], per: usize) -> BotRun {
    let addr = p.node.gateway.to_string();
    let list: Vec<String> = channels.iter().map(u64::to_string).collect();
    let list = list.join(",");
    let per = per.to_string();
    let args = [
        "--addr",
        &addr,
        "--channels",
        &list,
        "--per",
        &per,
        "--timeout",
        "100",
    ];
    let script = match lib {
        Lib::DiscordPy => support::python::Script::spawn_as(
            &support::python::discord_py_python(),
            &p.node,
            &p.bot.token,
            "burst_bot.py",
            "burst-py",
            &args,
        ),
        Lib::DiscordJs => support::js::spawn(
            &support::js::discord_js_modules(),
            &p.node,
            &p.bot.token,
            "burst_bot.js",
            "burst-js",
            &args,
        ),
    };
    script.wait()
}

/// What a library reported as a 429 (it must be nothing).
fn reported_429s(lib: Lib, s: &Value) -> Vec<String> {
    let keys: &[&str] = match lib {
        Lib::DiscordPy => &["rate_limited_logged", "responses_429_logged"],
        Lib::DiscordJs => &["responses_429", "debug_429"],
    };
    let mut out: Vec<String> = keys
        .iter()
        .flat_map(|k| s[*k].as_array().cloned().unwrap_or_default())
        .map(|v| v.to_string())
        .collect();
    if let Some(n) = s["statuses"]["429"].as_u64().filter(|&n| n > 0) {
        out.push(format!(
            "{n} responses of status 429 seen by the HTTP client"
        ));
    }
    out
}

/// The burst: `per` sends at once to each channel of `servers` (placed as
/// asked) by `lib`'s bot, and everything the module doc promises.
fn burst(lib: Lib, servers: &[(Commit, usize)], per: usize) {
    let p = place(servers);
    let channels: Vec<u64> = p.servers.iter().flat_map(|s| s.1.clone()).collect();
    let total = channels.len() * per;
    let observer = bot::identify(
        p.node.gateway,
        "observer",
        &p.observer.token,
        support::BOT_INTENTS,
        None,
    )
    .expect("the observer identifies");
    assert_eq!(observer.guild_creates.len(), servers.len());
    let observer = Observer::start(observer, p.bot.id);

    let run = run_lib(lib, &p, &channels, per);
    let explain = run.explain();
    let s = &run.summary;
    let failures = s["send_failures"].as_array().cloned().unwrap_or_default();
    assert!(
        failures.is_empty(),
        "every send succeeds: {failures:#?}\n{explain}"
    );
    let limited = reported_429s(lib, s);
    assert!(
        limited.is_empty(),
        "{lib:?} reported a 429 with the real limits on: {limited:#?}\n{explain}"
    );
    assert!(run.status.success() && s["ok"] == true, "{explain}");

    // The REST answers: one per send, unique ids, in the channel asked.
    let sent = s["sent"].as_array().unwrap();
    assert_eq!(sent.len(), total, "{explain}");
    let mut ids = HashSet::new();
    let mut channel_of = HashMap::new();
    for m in sent {
        let (id, ch) = (id_of(&m["id"]), id_of(&m["channel"]));
        assert!(ids.insert(id), "message id {id} answered twice: {explain}");
        assert!(channels.contains(&ch), "{m}");
        assert!(
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with(&format!("burst {ch} "))),
            "{m}"
        );
        channel_of.insert(id, ch);
    }
    let per_channel = channels
        .iter()
        .map(|c| channel_of.values().filter(|x| *x == c).count())
        .collect::<Vec<_>>();
    assert!(per_channel.iter().all(|&n| n == per), "{per_channel:?}");

    // The bot's own session (the library's dispatch), exactly once each.
    let missing = s["missing"].as_array().unwrap();
    let duplicated = s["duplicated"].as_array().unwrap();
    assert!(
        missing.is_empty() && duplicated.is_empty(),
        "the bot's session: missing {missing:?}, duplicated {duplicated:?}\n{explain}"
    );
    let own = s["created"].as_array().unwrap();
    assert_eq!(
        own.len(),
        total,
        "no other MESSAGE_CREATE of the bot: {explain}"
    );

    // The observer's raw session (served by the other worker).
    let seen = observer.finish(&ids);
    let mut count: HashMap<u64, usize> = HashMap::new();
    for (id, ch) in &seen {
        *count.entry(*id).or_default() += 1;
        assert_eq!(
            channel_of.get(id),
            Some(ch),
            "the observer saw message {id} in channel {ch}, which no REST answer named"
        );
    }
    let missing: Vec<u64> = ids
        .iter()
        .copied()
        .filter(|i| !count.contains_key(i))
        .collect();
    let twice: Vec<(u64, usize)> = count.into_iter().filter(|(_, n)| *n > 1).collect();
    assert!(
        missing.is_empty() && twice.is_empty(),
        "the observer's session: missing {missing:?}, more than once {twice:?}"
    );
    assert_eq!(seen.len(), total);

    let limited = support::metrics::metric(&p.node, "gatewayd_rest_limited_total");
    assert_eq!(limited, 0.0, "the node answered no 429");
    // How the library paced itself (not asserted: a busy machine only
    // makes it slower): when its sends on the first channel returned.
    // discord.py sleeps out a spent window inside the request that spent
    // it (`Ratelimit.__aexit__`), so that one send returns a window late.
    let mut first: Vec<f64> = sent
        .iter()
        .filter(|m| id_of(&m["channel"]) == channels[0])
        .filter_map(|m| m["at_s"].as_f64())
        .collect();
    first.sort_by(f64::total_cmp);
    eprintln!(
        "{lib:?}: {total} sends on {} channels in {} server(s), burst {} s, paced {}, statuses {}, \
         sends on channel 1 returned at {first:?} s",
        channels.len(),
        servers.len(),
        s["burst_s"],
        match lib {
            Lib::DiscordPy => s["preemptive_waits"].to_string(),
            Lib::DiscordJs => format!("{} ({} global)", s["paced"], s["paced_global"]),
        },
        s["statuses"]
    );
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_burst_of_30_sends_on_one_channel_meets_no_429() {
    burst(Lib::DiscordPy, &[(Commit::Hop, 1)], 30);
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_burst_of_100_sends_across_10_channels_of_one_server_meets_no_429() {
    burst(Lib::DiscordPy, &[(Commit::Hop, 10)], 10);
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_burst_of_100_sends_across_two_servers_of_different_workers_meets_no_429() {
    burst(Lib::DiscordPy, &[(Commit::Local, 5), (Commit::Hop, 5)], 10);
}

#[test]
#[ignore = "needs discord.js 14: run scripts/test-all.sh, or set GATEWAYD_NODE_MODULES (npm ci in tests/js)"]
fn discord_js_burst_of_30_sends_on_one_channel_meets_no_429() {
    burst(Lib::DiscordJs, &[(Commit::Hop, 1)], 30);
}

#[test]
#[ignore = "needs discord.js 14: run scripts/test-all.sh, or set GATEWAYD_NODE_MODULES (npm ci in tests/js)"]
fn discord_js_burst_of_100_sends_across_10_channels_of_one_server_meets_no_429() {
    burst(Lib::DiscordJs, &[(Commit::Hop, 10)], 10);
}

#[test]
#[ignore = "needs discord.js 14: run scripts/test-all.sh, or set GATEWAYD_NODE_MODULES (npm ci in tests/js)"]
fn discord_js_burst_of_100_sends_across_two_servers_of_different_workers_meets_no_429() {
    burst(Lib::DiscordJs, &[(Commit::Local, 5), (Commit::Hop, 5)], 10);
}
