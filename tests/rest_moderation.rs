//! Members, moderation and DMs through the REST edge, against a real node:
//! the role hierarchy decides, the registry records, and the result comes
//! back as an event (GUILD_MEMBER_UPDATE / REMOVE, GUILD_BAN_ADD / REMOVE,
//! MESSAGE_CREATE in a DM) to the bots entitled to it.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot::{self, Session};
use support::http::{json_request, Resp};
use support::intent;
use support::node::Node;
use support::perm::*;
use support::registry::Registry;

/// A server with people ranked around the bot (positions in brackets):
/// `@everyone` [0], member [1], helper [2], the bot's role [3],
/// moderator [4], muted [5]. bob and dave are members, carol a moderator.
struct Server {
    node: Node,
    reg: Registry,
    app: support::registry::App,
    id: u64,
    general: u64,
    helper: u64,
    muted: u64,
    member_role: u64,
    bob: u64,
    carol: u64,
    dave: u64,
    /// Another bot in the server, subscribed to members and moderation.
    watcher: Session,
}

const GRANT: u64 =
    VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY | MANAGE_ROLES | KICK_MEMBERS | BAN_MEMBERS;

fn server() -> Server {
    // The probes below poll limited routes: raise the limits so they see 403, not 429.
    let node = Node::start(&["--no-demo-traffic", "--rest-limit-scale", "100"]);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("mod-bot", intent::GUILD_MEMBERS);
    let watcher_app = reg.add_app("watcher", intent::GUILD_MEMBERS);
    let (id, general) = reg.add_server("mod-server");
    let member_role = reg.add_role(id, "member", 0);
    let helper = reg.add_role(id, "helper", 0);
    reg.install(app.id, id, Some(GRANT));
    let moderator = reg.add_role(id, "moderator", KICK_MEMBERS | BAN_MEMBERS);
    let muted = reg.add_role(id, "muted", 0);
    reg.install(watcher_app.id, id, Some(VIEW_CHANNEL));
    let bob = reg.add_member(id, "bob", &[member_role]);
    let carol = reg.add_member(id, "carol", &[moderator]);
    let dave = reg.add_member(id, "dave", &[]);
    let watcher = bot::identify(
        node.gateway,
        "watcher",
        &watcher_app.token,
        intent::GUILDS | intent::GUILD_MEMBERS | intent::GUILD_MODERATION,
        None,
    )
    .expect("identify the watcher");
    Server {
        node,
        reg,
        app,
        id,
        general,
        helper,
        muted,
        member_role,
        bob,
        carol,
        dave,
        watcher,
    }
}

impl Server {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        json_request(
            self.node.gateway,
            method,
            &format!("/api/v10{path}"),
            Some(&format!("Bot {}", self.app.token)),
            body.as_ref(),
        )
    }

    /// The next member or moderation event the watcher gets, within `within`.
    fn next_member_event(&mut self, within: Duration) -> Option<(String, Value)> {
        let until = Instant::now() + within;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match bot::read_next(&mut self.watcher.ws, left) {
                bot::Next::Json(v) => {
                    let t = v["t"].as_str().unwrap_or("");
                    if t.starts_with("GUILD_MEMBER") || t.starts_with("GUILD_BAN") {
                        return Some((t.to_string(), v["d"].clone()));
                    }
                }
                bot::Next::Timeout => return None,
                other => panic!("watcher session ended: {other:?}"),
            }
        }
        None
    }

    /// The next member event: must be `t` about `user`.
    fn expect(&mut self, t: &str, user: u64) -> Value {
        let (got, d) = self
            .next_member_event(Duration::from_secs(10))
            .unwrap_or_else(|| panic!("no {t} within 10 s"));
        assert_eq!(got, t, "{d}");
        assert_eq!(d["user"]["id"], user.to_string(), "{t}: {d}");
        assert_eq!(d["guild_id"], self.id.to_string(), "{t}: {d}");
        d
    }
}

/// (case, method, path, REST answer, the event it makes: (type, user)).
type Case<'a> = (&'a str, &'a str, String, (u16, u64), Option<(&'a str, u64)>);

fn status_code(r: &Resp) -> (u16, u64) {
    let code = if r.status < 300 {
        0
    } else {
        r.json()["code"].as_u64().unwrap_or(u64::MAX)
    };
    (r.status, code)
}

fn ids(v: &Value) -> Vec<String> {
    let mut v: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// One table of cases, each run through REST and watched on the gateway:
/// a permitted change answers 204 and its event reaches the entitled bot;
/// a refused one answers 403 and nothing reaches the stream (the next
/// event the watcher sees is the next permitted change's).
#[test]
fn moderation_follows_the_role_hierarchy_and_is_seen_as_events() {
    let mut s = server();
    let (g, bob, carol, dave) = (s.id, s.bob, s.carol, s.dave);

    // Reads.
    let r = s.call("GET", &format!("/guilds/{g}/members/{bob}"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let m = r.json();
    assert_eq!(m["user"]["username"], "bob");
    assert_eq!(m["user"]["bot"], false);
    assert_eq!(ids(&m["roles"]), vec![s.member_role.to_string()]);
    assert!(m["joined_at"].as_str().unwrap().ends_with("+00:00"), "{m}");
    let r = s.call("GET", &format!("/guilds/{g}/members/{}", s.app.id), None);
    assert_eq!(
        r.status, 200,
        "the bot is a member through its installation: {}",
        r.body
    );
    assert_eq!(r.json()["user"]["bot"], true);
    let r = s.call("GET", &format!("/guilds/{g}/members?limit=2"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    let page = r.json();
    assert_eq!(page.as_array().unwrap().len(), 2, "limit=2: {page}");
    let last = page[1]["user"]["id"].as_str().unwrap().to_string();
    let r = s.call(
        "GET",
        &format!("/guilds/{g}/members?limit=1000&after={last}"),
        None,
    );
    assert_eq!(
        r.json().as_array().unwrap().len(),
        1,
        "the third person after the page"
    );
    assert_eq!(
        status_code(&s.call(
            "GET",
            &format!("/guilds/{g}/members/1180000000000000001"),
            None
        )),
        (404, 10007)
    );
    assert_eq!(
        status_code(&s.call(
            "GET",
            &format!("/guilds/1180000000000000001/members/{bob}"),
            None
        )),
        (404, 10004),
        "a server the bot is not in"
    );

    let helper = s.helper;
    let muted = s.muted;
    let cases: Vec<Case> = vec![
        (
            "denied by hierarchy: a role above the bot's",
            "PUT",
            format!("/guilds/{g}/members/{bob}/roles/{muted}"),
            (403, 50013),
            None,
        ),
        (
            "allowed: a role below the bot's",
            "PUT",
            format!("/guilds/{g}/members/{bob}/roles/{helper}"),
            (204, 0),
            Some(("GUILD_MEMBER_UPDATE", bob)),
        ),
        (
            "allowed twice: nothing changes, no event",
            "PUT",
            format!("/guilds/{g}/members/{bob}/roles/{helper}"),
            (204, 0),
            None,
        ),
        (
            "denied by hierarchy: kicking a member ranked above the bot",
            "DELETE",
            format!("/guilds/{g}/members/{carol}"),
            (403, 50013),
            None,
        ),
        (
            "denied by hierarchy: banning a member ranked above the bot",
            "PUT",
            format!("/guilds/{g}/bans/{carol}"),
            (403, 50013),
            None,
        ),
        (
            "allowed: taking a role below the bot's",
            "DELETE",
            format!("/guilds/{g}/members/{bob}/roles/{helper}"),
            (204, 0),
            Some(("GUILD_MEMBER_UPDATE", bob)),
        ),
        (
            "unknown role",
            "PUT",
            format!("/guilds/{g}/members/{bob}/roles/1180000000000000001"),
            (404, 10011),
            None,
        ),
        (
            "allowed: kicking a member ranked below the bot",
            "DELETE",
            format!("/guilds/{g}/members/{dave}"),
            (204, 0),
            Some(("GUILD_MEMBER_REMOVE", dave)),
        ),
        (
            "kicking who is no longer a member",
            "DELETE",
            format!("/guilds/{g}/members/{dave}"),
            (404, 10007),
            None,
        ),
        (
            "allowed: banning a member ranked below the bot",
            "PUT",
            format!("/guilds/{g}/bans/{bob}"),
            (204, 0),
            Some(("GUILD_BAN_ADD", bob)),
        ),
    ];
    for (case, method, path, want, event) in cases {
        let r = s.call(method, &path, None);
        assert_eq!(status_code(&r), want, "{case}: {}", r.body);
        if let Some((t, user)) = event {
            let d = s.expect(t, user);
            if t == "GUILD_MEMBER_UPDATE" {
                let want_roles = if method == "PUT" {
                    let mut v = vec![s.member_role.to_string(), helper.to_string()];
                    v.sort();
                    v
                } else {
                    vec![s.member_role.to_string()]
                };
                assert_eq!(ids(&d["roles"]), want_roles, "{case}: {d}");
            }
        }
    }
    // The ban also ended bob's membership.
    s.expect("GUILD_MEMBER_REMOVE", bob);
    assert_eq!(
        status_code(&s.call("GET", &format!("/guilds/{g}/members/{bob}"), None)),
        (404, 10007)
    );
    assert_eq!(
        status_code(&s.call("DELETE", &format!("/guilds/{g}/bans/{bob}"), None)),
        (204, 0)
    );
    s.expect("GUILD_BAN_REMOVE", bob);
    assert_eq!(
        status_code(&s.call("DELETE", &format!("/guilds/{g}/bans/{bob}"), None)),
        (404, 10026)
    );
    assert_eq!(
        status_code(&s.call(
            "PUT",
            &format!("/guilds/{g}/bans/{carol}"),
            Some(json!({"delete_message_seconds": 1_000_000}))
        )),
        (400, 50035),
        "a body out of range is a form error before any check"
    );

    // A narrowed grant (no KICK_MEMBERS): the next kick is refused at once
    // (moderation is decided on the registry's current state) and commits
    // nothing.
    s.reg.install(s.app.id, g, Some(GRANT & !KICK_MEMBERS));
    let again = s.reg.add_member(g, "erin", &[]);
    assert_eq!(
        status_code(&s.call("DELETE", &format!("/guilds/{g}/members/{again}"), None)),
        (403, 50013),
        "after a narrowed grant"
    );
    assert_eq!(s.next_member_event(Duration::from_millis(1500)), None);
    let _ = s.general;
}

#[test]
fn a_bot_opens_a_dm_and_its_message_comes_back_as_a_dm_event() {
    let node = Node::start(&["--no-demo-traffic"]);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("dm-bot", 0);
    let (server, _) = reg.add_server("dm-server");
    reg.install(app.id, server, None);
    let alice = reg.add_member(server, "alice", &[]);
    let auth = format!("Bot {}", app.token);
    let call = |method: &str, path: &str, body: Option<Value>| {
        json_request(
            node.gateway,
            method,
            &format!("/api/v10{path}"),
            Some(&auth),
            body.as_ref(),
        )
    };
    let mut session = bot::identify(
        node.gateway,
        "dm-bot",
        &app.token,
        intent::GUILDS | intent::DIRECT_MESSAGES,
        None,
    )
    .expect("identify");

    let r = call(
        "POST",
        "/users/@me/channels",
        Some(json!({"recipient_id": alice.to_string()})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let dm = r.json();
    assert_eq!(dm["type"], 1);
    assert_eq!(dm["recipients"][0]["id"], alice.to_string());
    assert_eq!(dm["recipients"][0]["username"], "alice");
    let channel = dm["id"].as_str().unwrap().to_string();
    let r = call(
        "POST",
        "/users/@me/channels",
        Some(json!({"recipient_id": alice})),
    );
    assert_eq!(r.json()["id"], channel.as_str(), "one channel per pair");

    let r = call(
        "POST",
        &format!("/channels/{channel}/messages"),
        Some(json!({"content": "hello in private"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = r.json();
    assert_eq!(sent["channel_id"], channel.as_str());
    let d = loop {
        let v = session.next_dispatch(Duration::from_secs(10));
        if v["t"] == "MESSAGE_CREATE" {
            break v["d"].clone();
        }
    };
    assert_eq!(d["id"], sent["id"]);
    assert_eq!(d["content"], "hello in private");
    assert!(d.get("guild_id").is_none(), "a DM has no guild_id: {d}");
    let r = call("GET", &format!("/channels/{channel}/messages"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()[0]["id"], sent["id"]);
    assert_eq!(
        status_code(&call(
            "POST",
            &format!("/channels/{channel}/messages/bulk-delete"),
            Some(json!({"messages": ["1180000000000000001", "1180000000000000002"]}))
        )),
        (403, 50013),
        "no MANAGE_MESSAGES in a DM"
    );

    assert_eq!(
        status_code(&call(
            "POST",
            "/users/@me/channels",
            Some(json!({"recipient_id": "1180000000000000001"}))
        )),
        (404, 10013)
    );
    assert_eq!(
        status_code(&call(
            "POST",
            "/users/@me/channels",
            Some(json!({"recipient_id": "me"}))
        )),
        (400, 50035)
    );
}
