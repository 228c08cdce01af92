//! The REST edge per worker (issue 27): a message action is committed by
//! the chat service of the worker that commits for its server
//! (`api::commit_worker`), which may not be the worker serving the bot's
//! token. What that split could break, checked on a real two-worker node:
//! ids unique across workers, each event seen exactly once, one order of a
//! server's events for every session, a message acted on from both workers,
//! a person's message learnt by the server's worker.

mod support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use proto::intents as intent;
use serde_json::{json, Value};
use support::bot::{self, Next, Session};
use support::http::json_request;
use support::node::Node;
use support::perm::*;
use support::placement::{self, id_of};
use support::registry::{App, Registry};

const WORKERS: usize = 2;
const INTENTS: u64 = intent::GUILDS
    | intent::GUILD_MESSAGES
    | intent::GUILD_MESSAGE_REACTIONS
    | intent::MESSAGE_CONTENT;
const GRANT: u64 =
    VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY | ADD_REACTIONS | MANAGE_MESSAGES;

fn owner(app: u64) -> usize {
    placement::owner(app, WORKERS)
}

fn commit_worker(server: u64) -> usize {
    placement::commit_worker(server, WORKERS)
}

struct Place {
    node: Node,
    reg: Registry,
    /// One application served by each worker: apps[w] is owned by worker w.
    apps: Vec<App>,
    /// One server committed by each worker: (server, #general).
    servers: Vec<(u64, u64)>,
}

/// A two-worker node with an application served on each worker and a
/// server committed on each, every application installed everywhere.
fn place() -> Place {
    let node = Node::start(&[
        "--no-demo-traffic",
        "--workers",
        "2",
        "--rest-limit-scale",
        "1000",
    ]);
    let reg = Registry::new(node.dir.path());
    let mut apps: Vec<Option<App>> = vec![None, None];
    for i in 0..32 {
        if apps.iter().all(Option::is_some) {
            break;
        }
        let a = reg.add_app(&format!("bot-{i}"), intent::MESSAGE_CONTENT);
        let w = owner(a.id);
        if apps[w].is_none() {
            apps[w] = Some(a);
        }
    }
    let apps: Vec<App> = apps
        .into_iter()
        .map(|a| a.expect("32 applications cover both workers"))
        .collect();
    let mut servers: Vec<Option<(u64, u64)>> = vec![None, None];
    for i in 0..32 {
        if servers.iter().all(Option::is_some) {
            break;
        }
        let s = reg.add_server(&format!("srv-{i}"));
        let w = commit_worker(s.0);
        if servers[w].is_none() {
            servers[w] = Some(s);
        }
    }
    let servers: Vec<(u64, u64)> = servers
        .into_iter()
        .map(|s| s.expect("32 servers cover both workers"))
        .collect();
    for a in &apps {
        for (s, _) in &servers {
            reg.install(a.id, *s, Some(GRANT));
        }
    }
    Place {
        node,
        reg,
        apps,
        servers,
    }
}

fn call(
    p: &Place,
    app: &App,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> support::http::Resp {
    json_request(
        p.node.gateway,
        method,
        &format!("/api/v10{path}"),
        Some(&format!("Bot {}", app.token)),
        body.as_ref(),
    )
}

fn session(p: &Place, app: &App) -> Session {
    let s = bot::identify(p.node.gateway, &app.name, &app.token, INTENTS, None).expect("identify");
    assert_eq!(
        s.guild_creates.len(),
        WORKERS,
        "{} is in both servers",
        app.name
    );
    s
}

/// MESSAGE_CREATEs on `s` until `want` of them or 30 s: (channel, id, content).
fn creates(s: &mut Session, want: usize) -> Vec<(u64, u64, String)> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < want {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match bot::read_next(&mut s.ws, left) {
            Next::Json(v) if v["t"] == "MESSAGE_CREATE" => got.push((
                id_of(&v["d"]["channel_id"]),
                id_of(&v["d"]["id"]),
                v["d"]["content"].as_str().unwrap_or("").to_string(),
            )),
            Next::Json(_) => {}
            Next::Timeout => break,
            other => panic!("{}: session ended: {other:?}", s.name),
        }
    }
    got
}

#[test]
fn two_workers_commit_their_servers_with_unique_ids_each_event_once_in_one_order() {
    const PER: usize = 25;
    let p = place();
    let mut sessions: Vec<Session> = p.apps.iter().map(|a| session(&p, a)).collect();
    // Every application sends PER messages into each server, all four
    // streams at once: two of them committed on the token's own worker,
    // two one hop away.
    let answered: Vec<(usize, u64, Vec<u64>)> = std::thread::scope(|sc| {
        let mut hs = Vec::new();
        for (ai, app) in p.apps.iter().enumerate() {
            for &(_, general) in &p.servers {
                let p = &p;
                hs.push(sc.spawn(move || {
                    let ids: Vec<u64> = (0..PER)
                        .map(|i| {
                            let r = call(
                                p,
                                app,
                                "POST",
                                &format!("/channels/{general}/messages"),
                                Some(json!({"content": format!("{ai}:{general}:{i}")})),
                            );
                            assert_eq!(r.status, 200, "{}: {}", app.name, r.body);
                            let v = r.json();
                            assert_eq!(v["content"], format!("{ai}:{general}:{i}"));
                            assert_eq!(id_of(&v["author"]["id"]), app.id, "its author: {}", r.body);
                            id_of(&v["id"])
                        })
                        .collect();
                    (ai, general, ids)
                }));
            }
        }
        hs.into_iter().map(|h| h.join().expect("sender")).collect()
    });
    let all: Vec<u64> = answered
        .iter()
        .flat_map(|(_, _, ids)| ids.iter().copied())
        .collect();
    let total = all.len();
    assert_eq!(total, p.apps.len() * p.servers.len() * PER);
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(
        unique.len(),
        total,
        "ids are unique across the workers' generators"
    );

    let mut orders: Vec<HashMap<u64, Vec<u64>>> = Vec::new();
    for s in &mut sessions {
        let got = creates(s, total);
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for (_, id, _) in &got {
            *seen.entry(*id).or_default() += 1;
        }
        for id in &all {
            assert_eq!(
                seen.get(id),
                Some(&1),
                "{}: message {id} seen exactly once",
                s.name
            );
        }
        assert_eq!(got.len(), total, "{}: no other MESSAGE_CREATE", s.name);
        let mut per_channel: HashMap<u64, Vec<u64>> = HashMap::new();
        for (ch, id, _) in got {
            per_channel.entry(ch).or_default().push(id);
        }
        for (ch, ids) in &per_channel {
            // One worker commits a server: one generator, so its ids
            // increase in the order its events reach every session.
            assert!(
                ids.windows(2).all(|w| w[0] < w[1]),
                "{}: channel {ch}: events in commit order",
                s.name
            );
        }
        orders.push(per_channel);
    }
    for (_, general) in &p.servers {
        assert_eq!(
            orders[0][general], orders[1][general],
            "both sessions (one per worker) see channel {general}'s events in one order"
        );
    }
    // Each bot's own messages arrive in the order it was answered.
    for (_, general, ids) in &answered {
        let seen: Vec<u64> = orders[0][general]
            .iter()
            .copied()
            .filter(|i| ids.contains(i))
            .collect();
        assert_eq!(&seen, ids, "a sender's messages in its answers' order");
    }
}

#[test]
fn a_message_is_acted_on_from_both_workers_and_a_persons_message_reaches_the_servers_worker() {
    let p = place();
    // `x` is served on worker 0 and `y` on worker 1; the server is
    // committed on y's worker, so x's requests are committed one hop away.
    let (x, y) = (&p.apps[0], &p.apps[1]);
    let (server, general) = p.servers[1];
    assert_ne!(owner(x.id), commit_worker(server));
    assert_eq!(owner(y.id), commit_worker(server));
    let mut ys = session(&p, y);

    let r = call(
        &p,
        x,
        "POST",
        &format!("/channels/{general}/messages"),
        Some(json!({"content": "from x"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let mid = id_of(&r.json()["id"]);
    let seen = creates(&mut ys, 1);
    assert_eq!(
        seen.first().map(|c| c.1),
        Some(mid),
        "y's session sees x's message"
    );

    let path = format!("/channels/{general}/messages/{mid}");
    let r = call(
        &p,
        y,
        "PUT",
        &format!("{path}/reactions/%F0%9F%91%8D/@me"),
        None,
    );
    assert_eq!(r.status, 204, "y reacts to x's message: {}", r.body);
    let r = call(&p, x, "GET", &path, None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["reactions"][0]["count"],
        1,
        "x reads y's reaction: {}",
        r.body
    );
    assert_eq!(r.json()["reactions"][0]["me"], false, "{}", r.body);
    let r = call(
        &p,
        x,
        "PATCH",
        &path,
        Some(json!({"content": "edited by x"})),
    );
    assert_eq!(
        r.status, 200,
        "x edits its message one hop away: {}",
        r.body
    );
    assert_eq!(r.json()["content"], "edited by x");
    assert_eq!(
        r.json()["reactions"][0]["count"],
        1,
        "the edit keeps the reaction: {}",
        r.body
    );
    let r = call(&p, y, "PATCH", &path, Some(json!({"content": "y"})));
    assert_eq!(r.status, 403, "y may not edit x's message: {}", r.body);
    let r = call(&p, y, "DELETE", &path, None);
    assert_eq!(r.status, 204, "y (MANAGE_MESSAGES) deletes it: {}", r.body);
    let r = call(&p, x, "GET", &path, None);
    assert_eq!(r.status, 404, "gone for x too: {}", r.body);
    assert_eq!(r.json()["code"], 10008);

    // A person's message from a producer: learnt by the chat thread and
    // handed to the server's worker, where x's reply is committed.
    let person = 1_180_000_000_000_500_001u64;
    support::events::Producer::connect(p.node.ingest).send(&support::events::message_event(
        person,
        server,
        general,
        "a person speaks",
        &[],
    ));
    let learnt = support::wait_until(Duration::from_secs(10), || {
        call(
            &p,
            x,
            "GET",
            &format!("/channels/{general}/messages/{person}"),
            None,
        )
        .status
            == 200
    });
    assert!(
        learnt.is_some(),
        "the server's worker learnt the person's message"
    );
    let r = call(
        &p,
        x,
        "POST",
        &format!("/channels/{general}/messages"),
        Some(json!({"content": "hi", "message_reference": {"message_id": person.to_string()}})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.json()["referenced_message"]["content"],
        "a person speaks",
        "{}",
        r.body
    );
    let _ = &p.reg;
}
