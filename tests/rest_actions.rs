//! The REST edge a bot acts through (issue 13): messages, reactions and
//! typing committed by the chat service and seen coming back as events; the
//! rate-limit headers and the 429 contract of REST.md, field by field; the
//! documented errors for bad input. Black-box: a real node, raw HTTP.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use support::bot::{self, Session};
use support::http::{json_request, json_request_from, request_with_body, Resp};
use support::node::Node;
use support::registry::Registry;
use support::rest::{assert_error, Fixture, SIX};

const INTENTS: u64 = support::BOT_INTENTS
    | proto::intents::GUILD_MESSAGE_REACTIONS
    | proto::intents::GUILD_MESSAGE_TYPING;

fn fixture(extra: &[&str]) -> Fixture {
    Fixture::start(extra, INTENTS)
}

fn snowflake_of(v: &Value) -> u64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not a string id: {v}"));
    assert!((17..=20).contains(&s.len()), "a 17-20 digit snowflake: {s}");
    s.parse().unwrap()
}

/// Repeat `request` every 100 ms, for up to 10 s, until it is answered
/// `status` (a registry change reaching the node's views).
fn eventually(status: u16, mut request: impl FnMut() -> Resp) -> bool {
    support::wait_until(Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(100));
        request().status == status
    })
    .is_some()
}

#[test]
fn a_bot_sends_edits_reacts_replies_and_deletes_and_sees_each_as_an_event() {
    let mut f = fixture(&[]);
    let ch = f.general;
    let bot_id = f.session.ready["d"]["user"]["id"].clone();

    // Send: 200 with the message object; it comes back as MESSAGE_CREATE.
    let r = f.call(
        "POST",
        &format!("/channels/{ch}/messages"),
        Some(json!({"content": "pong", "nonce": "n-1"})),
    );
    assert_eq!(r.status, 200, "{}\n{}", r.head, r.body);
    r.assert_json_type("create");
    for h in SIX {
        assert!(
            r.header(h).is_some(),
            "{h} on every response of a limited route:\n{}",
            r.head
        );
    }
    assert_eq!(r.header("X-RateLimit-Scope").as_deref(), Some("user"));
    assert!(
        r.header("X-RateLimit-Global").is_none(),
        "never on an ordinary response"
    );
    let m = r.json();
    let id = snowflake_of(&m["id"]);
    assert_eq!(m["content"], "pong");
    assert_eq!(m["channel_id"], ch.to_string());
    assert_eq!(m["author"]["id"], bot_id);
    assert_eq!(m["author"]["bot"], true);
    assert_eq!(m["nonce"], "n-1");
    let ev = f.expect_event("MESSAGE_CREATE");
    assert_eq!(ev["id"], m["id"], "the author bot sees its own message");
    assert_eq!(ev["content"], "pong");
    assert_eq!(ev["guild_id"], f.server.to_string());
    assert!(ev["member"].is_object());

    // Read it back; list the channel.
    let r = f.call("GET", &format!("/channels/{ch}/messages/{id}"), None);
    assert_eq!(
        (r.status, r.json()["content"].clone()),
        (200, json!("pong")),
        "{}",
        r.body
    );
    let r = f.call("GET", &format!("/channels/{ch}/messages?limit=10"), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()[0]["id"], m["id"]);

    // Edit: MESSAGE_UPDATE with the new content and an edited_timestamp.
    let r = f.call(
        "PATCH",
        &format!("/channels/{ch}/messages/{id}"),
        Some(json!({"content": "pong (edited)"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["edited_timestamp"].is_string());
    let ev = f.expect_event("MESSAGE_UPDATE");
    assert_eq!(
        (ev["id"].clone(), ev["content"].clone()),
        (m["id"].clone(), json!("pong (edited)"))
    );

    // React (percent-encoded unicode emoji): 204, MESSAGE_REACTION_ADD, and the message shows it.
    let r = f.call(
        "PUT",
        &format!("/channels/{ch}/messages/{id}/reactions/%F0%9F%91%8D/@me"),
        None,
    );
    assert_eq!(r.status, 204, "{}\n{}", r.head, r.body);
    let ev = f.expect_event("MESSAGE_REACTION_ADD");
    assert_eq!(ev["emoji"]["name"], "\u{1F44D}");
    assert_eq!(ev["message_id"], m["id"]);
    assert_eq!(ev["user_id"], bot_id);
    let r = f.call("GET", &format!("/channels/{ch}/messages/{id}"), None);
    assert_eq!(r.json()["reactions"][0]["count"], 1, "{}", r.body);
    assert_eq!(r.json()["reactions"][0]["me"], true);
    let r = f.call(
        "GET",
        &format!("/channels/{ch}/messages/{id}/reactions/%F0%9F%91%8D"),
        None,
    );
    assert_eq!(r.json()[0]["id"], bot_id, "{}", r.body);

    // Reply: type 19 with the referenced message.
    let r = f.call(
        "POST",
        &format!("/channels/{ch}/messages"),
        Some(json!({"content": "a reply", "message_reference": {"message_id": id.to_string()}})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let reply = r.json();
    assert_eq!(reply["type"], 19);
    assert_eq!(reply["referenced_message"]["id"], m["id"]);
    assert_eq!(f.expect_event("MESSAGE_CREATE")["id"], reply["id"]);

    // Typing.
    let r = f.call("POST", &format!("/channels/{ch}/typing"), None);
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(f.expect_event("TYPING_START")["user_id"], bot_id);

    // Delete: 204, MESSAGE_DELETE, then 10008.
    let r = f.call("DELETE", &format!("/channels/{ch}/messages/{id}"), None);
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(f.expect_event("MESSAGE_DELETE")["id"], m["id"]);
    assert_error(
        &f.call("GET", &format!("/channels/{ch}/messages/{id}"), None),
        404,
        10008,
        "deleted",
    );

    // Server reads.
    let r = f.call("GET", &format!("/channels/{ch}"), None);
    assert_eq!(
        (r.status, r.json()["name"].clone()),
        (200, json!("general")),
        "{}",
        r.body
    );
    let r = f.call("GET", &format!("/guilds/{}", f.server), None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["id"], f.server.to_string());
    let r = f.call("GET", &format!("/guilds/{}/roles", f.server), None);
    assert!(
        r.json().as_array().is_some_and(|a| !a.is_empty()),
        "{}",
        r.body
    );
    let r = f.call("GET", &format!("/guilds/{}/channels", f.server), None);
    assert!(
        r.json()
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c["name"] == "general")),
        "{}",
        r.body
    );
}

#[test]
fn the_429_contract_of_rest_md_field_by_field() {
    let f = fixture(&[]);
    let path = format!("/channels/{}/messages", f.general);
    let mut resets = Vec::new();
    for i in 0..5u32 {
        let r = f.call(
            "POST",
            &path,
            Some(json!({"content": format!("burst {i}")})),
        );
        assert_eq!(r.status, 200, "request {i}: {}", r.body);
        assert_eq!(r.header("X-RateLimit-Limit").as_deref(), Some("5"));
        assert_eq!(r.header("X-RateLimit-Remaining"), Some((4 - i).to_string()));
        let reset: f64 = r
            .header("X-RateLimit-Reset")
            .unwrap()
            .parse()
            .expect("epoch seconds");
        let after: f64 = r
            .header("X-RateLimit-Reset-After")
            .unwrap()
            .parse()
            .expect("seconds");
        assert!(after > 0.0 && after <= 5.0, "{after}");
        resets.push(reset);
    }
    assert!(
        resets.windows(2).all(|w| w[0] == w[1]),
        "one window: {resets:?}"
    );
    let r = f.call("POST", &path, Some(json!({"content": "one too many"})));
    assert_eq!(r.status, 429, "{}\n{}", r.head, r.body);
    assert_eq!(
        r.header("Content-Type").as_deref(),
        Some("application/json"),
        "exactly (discord.py compares the string)"
    );
    assert!(
        r.header("Via").is_some(),
        "discord.py takes a 429 without Via for a Cloudflare ban"
    );
    let retry = r.header("Retry-After").expect("Retry-After");
    let retry_int: u64 = retry
        .parse()
        .unwrap_or_else(|_| panic!("an integer Retry-After (twilight): {retry:?}"));
    assert!((1..=5).contains(&retry_int), "{retry_int}");
    assert_eq!(r.header("X-RateLimit-Scope").as_deref(), Some("user"));
    assert!(
        r.header("X-RateLimit-Global").is_none(),
        "only for the global limit"
    );
    for h in SIX {
        assert!(r.header(h).is_some(), "{h} on the 429 too");
    }
    assert_eq!(r.header("X-RateLimit-Remaining").as_deref(), Some("0"));
    let b = r.json();
    assert_eq!(b["message"], "You are being rate limited.");
    assert_eq!(b["global"], false);
    let ra = b["retry_after"].as_f64().expect("a float retry_after");
    assert!(ra > 0.0 && ra <= 5.0, "{ra}");
    assert!(b["retry_after"].is_f64(), "a float, not an integer: {b}");

    // The same route on another channel is another window under the same bucket id.
    let (_, other) = (
        0,
        f.call("GET", &format!("/guilds/{}/channels", f.server), None)
            .json(),
    );
    let second = other
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .find(|id| *id != f.general.to_string());
    if let Some(second) = second {
        let r2 = f.call(
            "POST",
            &format!("/channels/{second}/messages"),
            Some(json!({"content": "x"})),
        );
        if r2.status == 200 {
            assert_eq!(r2.header("X-RateLimit-Remaining").as_deref(), Some("4"));
            assert_eq!(
                r2.header("X-RateLimit-Bucket"),
                r.header("X-RateLimit-Bucket")
            );
        }
    }

    // Waiting out Reset-After opens a fresh window.
    std::thread::sleep(Duration::from_secs_f64(ra + 0.05));
    let r = f.call("POST", &path, Some(json!({"content": "after the reset"})));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.header("X-RateLimit-Remaining").as_deref(), Some("4"));
}

#[test]
fn the_global_limit_says_so_and_hammering_is_a_timed_ban_not_a_401() {
    let f = fixture(&[
        "--rest-limit-scale",
        "1000",
        "--rest-global-per-second",
        "3",
        "--rest-ban-after-429s",
        "5",
        "--rest-ban-seconds",
        "30",
    ]);
    let path = format!("/channels/{}/messages", f.general);
    let mut global = None;
    for _ in 0..6 {
        let r = f.call("GET", &path, None);
        if r.status == 429 {
            global = Some(r);
            break;
        }
    }
    let g = global.expect("a global 429 within 6 requests at 3/s");
    assert_eq!(
        g.header("X-RateLimit-Global").as_deref(),
        Some("true"),
        "{}",
        g.head
    );
    assert_eq!(g.header("X-RateLimit-Scope").as_deref(), Some("global"));
    assert_eq!(g.json()["global"], true);
    // Keep hammering: banned, still a 429 (scope user) with a long retry_after, never a 401.
    let mut last = g;
    for _ in 0..10 {
        last = f.call("GET", &path, None);
        assert_eq!(last.status, 429, "{}", last.body);
    }
    let ra = last.json()["retry_after"].as_f64().unwrap();
    assert!(ra > 20.0, "the ban's time left: {ra}");
    assert_eq!(last.header("X-RateLimit-Scope").as_deref(), Some("user"));
    let m = support::metrics::metrics(f.node.admin);
    assert!(
        support::metrics::metric_sum(&m, "gatewayd_rest_limited_total", &[("scope", "global")])
            >= 1.0
    );
    assert!(support::metrics::metric_sum(&m, "gatewayd_rest_bans_total", &[]) >= 1.0);
}

fn raw(addr: SocketAddr, req: &[u8]) -> Resp {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(req).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let end = text.find("\r\n\r\n").map(|i| i + 4).unwrap_or(text.len());
    Resp {
        status: support::http::status_of(&text[..end]),
        head: text[..end].to_string(),
        body: text[end..].to_string(),
    }
}

#[test]
fn bad_input_gets_the_documented_error() {
    // Invalid requests count against the limits too: raise them, this test is about the errors.
    let f = fixture(&["--rest-limit-scale", "100"]);
    let g = f.node.gateway;
    let ch = f.general;
    let msgs = format!("/channels/{ch}/messages");
    // A POST to the channel's messages with this Content-Type and raw body.
    let post_raw = |content_type: &str, body: &[u8]| {
        request_with_body(
            g,
            "POST",
            &format!("/api/v10{msgs}"),
            &[("Authorization", &f.auth), ("Content-Type", content_type)],
            Some(body),
        )
        .unwrap()
    };
    assert_error(
        &f.call("GET", "/nope/at/all", None),
        404,
        0,
        "unknown route",
    );
    assert_error(&f.call("PUT", &msgs, None), 405, 0, "wrong method");
    assert_error(
        &f.call("GET", "/channels/not-a-snowflake/messages", None),
        404,
        0,
        "not a snowflake",
    );
    let no_token = json_request(
        g,
        "POST",
        &format!("/api/v10{msgs}"),
        None,
        Some(&json!({"content": "x"})),
    );
    assert_error(&no_token, 401, 0, "no token");
    let forged = json_request(
        g,
        "POST",
        &format!("/api/v10{msgs}"),
        Some("Bot MTIz.forged.token"),
        Some(&json!({"content": "x"})),
    );
    assert_error(&forged, 401, 0, "forged token");
    let r = f.call("POST", &msgs, Some(json!({"content": "x".repeat(2001)})));
    assert_error(&r, 400, 50035, "content too long");
    assert!(
        r.json()["errors"]["content"]["_errors"].is_array(),
        "an errors tree naming the field: {}",
        r.body
    );
    assert_error(
        &f.call("POST", &msgs, Some(json!({}))),
        400,
        50006,
        "empty message",
    );
    assert_error(
        &f.call(
            "POST",
            &msgs,
            Some(json!({"embeds": vec![json!({"title": "t"}); 11]})),
        ),
        400,
        50035,
        "11 embeds",
    );
    // Each embed part's own limit (Discord's), by its path; and at each
    // limit the message is taken.
    let x = |n: usize| "x".repeat(n);
    let field = |n: usize, v: usize| json!({"name": x(n), "value": x(v)});
    for (embed, path, what) in [
        (
            json!({"title": x(257)}),
            vec!["title"],
            "a 257-character title",
        ),
        (
            json!({"description": x(4097)}),
            vec!["description"],
            "a 4,097-character description",
        ),
        (
            json!({"fields": vec![field(1, 1); 26]}),
            vec!["fields"],
            "26 fields",
        ),
        (
            json!({"fields": [field(257, 1)]}),
            vec!["fields", "0", "name"],
            "a 257-character field name",
        ),
        (
            json!({"fields": [field(1, 1025)]}),
            vec!["fields", "0", "value"],
            "a 1,025-character field value",
        ),
        (
            json!({"footer": {"text": x(2049)}}),
            vec!["footer", "text"],
            "a 2,049-character footer",
        ),
        (
            json!({"author": {"name": x(257)}}),
            vec!["author", "name"],
            "a 257-character author name",
        ),
    ] {
        let r = f.call("POST", &msgs, Some(json!({"embeds": [embed]})));
        assert_error(&r, 400, 50035, what);
        let mut at = &r.json()["errors"]["embeds"]["0"];
        for p in &path {
            at = &at[*p];
        }
        assert_eq!(
            at["_errors"][0]["code"],
            "BASE_TYPE_MAX_LENGTH",
            "{what}: the error names embeds.0.{}: {}",
            path.join("."),
            r.body
        );
    }
    let whole = json!({"title": x(256), "description": x(1000), "fields": vec![field(10, 10); 25],
                       "footer": {"text": x(1000)}, "author": {"name": x(256)}});
    let r = f.call("POST", &msgs, Some(json!({"embeds": [whole]})));
    assert_eq!(r.status, 200, "an embed at its limits is taken: {}", r.body);
    let bad_json = post_raw("application/json", b"{nope");
    assert_error(&bad_json, 400, 50035, "malformed JSON");
    let text = post_raw("text/plain", b"hi");
    assert_error(&text, 400, 50035, "wrong content type");
    let file = b"--b\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\r\n{\"content\":\"x\"}\r\n--b\r\nContent-Disposition: form-data; name=\"files[0]\"; filename=\"a.txt\"\r\n\r\nhello\r\n--b--\r\n";
    let r = post_raw("multipart/form-data; boundary=b", file);
    assert_error(&r, 400, 50035, "an attachment");
    assert!(
        r.json()["errors"]["files[0]"].is_object(),
        "names the field: {}",
        r.body
    );
    let mp = b"--b\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\r\n{\"content\":\"via multipart\"}\r\n--b--\r\n";
    let r = post_raw("multipart/form-data; boundary=b", mp);
    assert_eq!(
        (r.status, r.json()["content"].clone()),
        (200, json!("via multipart")),
        "{}",
        r.body
    );
    let big = format!(
        "POST /api/v10{msgs} HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        f.auth,
        10 << 20
    );
    assert_error(&raw(g, big.as_bytes()), 413, 40005, "oversized body");
    assert_error(
        &f.call(
            "POST",
            "/channels/1180000000000000999/messages",
            Some(json!({"content": "x"})),
        ),
        404,
        10003,
        "unknown channel",
    );
    assert_error(
        &f.call("GET", &format!("{msgs}/1180000000000000999"), None),
        404,
        10008,
        "unknown message",
    );
    assert_error(
        &f.call("GET", &format!("{msgs}?limit=500"), None),
        400,
        50035,
        "limit out of range",
    );
    assert_error(
        &f.call("GET", "/guilds/1180000000000000999", None),
        404,
        10004,
        "unknown server",
    );
    let m = support::metrics::metrics(f.node.admin);
    assert!(
        support::metrics::metric_sum(&m, "gatewayd_rest_responses_total", &[("status", "401")])
            >= 2.0
    );
    assert!(
        support::metrics::metric_sum(
            &m,
            "gatewayd_rest_responses_total",
            &[("route", "POST /channels/{id}/messages"), ("status", "400")]
        ) >= 3.0
    );
}

/// Did a MESSAGE_CREATE with this id arrive within `within`?
fn saw(s: &mut Session, id: u64, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
        match bot::read_next(&mut s.ws, left) {
            bot::Next::Json(v)
                if v["t"] == "MESSAGE_CREATE"
                    && v["d"]["id"].as_str() == Some(id.to_string().as_str()) =>
            {
                return true
            }
            bot::Next::Json(_) => {}
            bot::Next::Timeout => return false,
            other => panic!("session ended: {other:?}"),
        }
    }
    false
}

/// One table of cases, run through both halves: may the bot send here
/// (REST), and does it get a person's message from here (the event filter)?
/// Both are decided by `entitlement::channel_allows` on the same leased view.
#[test]
fn permissions_bite_rest_as_they_bite_events() {
    use proto::permissions::{
        READ_MESSAGE_HISTORY as HISTORY, SEND_MESSAGES as SEND, VIEW_CHANNEL as VIEW,
    };
    use support::events::{message_event, Producer};
    // The probes below poll a limited route: raise the limits so they see 403, not 429.
    let node = Node::start(&["--no-demo-traffic", "--rest-limit-scale", "100"]);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("perm-bot", 1 << 15);
    let (server, general) = reg.add_server("perm-server");
    let hidden = reg.add_channel(server, "hidden");
    let read_only = reg.add_channel(server, "read-only");
    let role_denied = reg.add_channel(server, "role-denied");
    reg.set_overwrite(hidden, server, "role", 0, VIEW);
    reg.set_overwrite(read_only, server, "role", 0, SEND);
    reg.install(app.id, server, Some(VIEW | SEND | HISTORY));
    let auth = format!("Bot {}", app.token);
    // The bot's own role (its installation's managed role, read through
    // another bot so perm-bot's view is first built after the change) is
    // denied VIEW_CHANNEL in #role-denied: denied by role, not @everyone.
    let other = reg.add_app("role-reader", 0);
    reg.install(other.id, server, None);
    let roles = json_request(
        node.gateway,
        "GET",
        &format!("/api/v10/guilds/{server}/roles"),
        Some(&format!("Bot {}", other.token)),
        None,
    )
    .json();
    let bot_role: u64 = roles
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tags"]["bot_id"].as_str().and_then(|s| s.parse().ok()) == Some(app.id))
        .unwrap_or_else(|| panic!("no managed role of perm-bot: {roles}"))["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    reg.set_overwrite(role_denied, bot_role, "role", 0, VIEW);
    // A request to #general's messages as the bot.
    let rest = |method: &str, body: Option<Value>| {
        json_request(
            node.gateway,
            method,
            &format!("/api/v10/channels/{general}/messages"),
            Some(&auth),
            body.as_ref(),
        )
    };
    let mut s = bot::identify(
        node.gateway,
        "perm-bot",
        &app.token,
        support::BOT_INTENTS,
        None,
    )
    .expect("identify");
    let mut producer = Producer::connect(node.ingest);
    let mut next_id = 1_180_000_000_000_100_000u64;

    // (case, channel, REST status and code for a send, event delivered?)
    let mut check = |case: &str, channel: u64, rest: (u16, u64), event: bool, s: &mut Session| {
        let r = json_request(
            node.gateway,
            "POST",
            &format!("/api/v10/channels/{channel}/messages"),
            Some(&auth),
            Some(&json!({"content": case})),
        );
        let code = if r.status == 200 {
            0
        } else {
            r.json()["code"].as_u64().unwrap_or(u64::MAX)
        };
        assert_eq!((r.status, code), rest, "{case}: REST: {}", r.body);
        next_id += 1;
        producer.send(&message_event(next_id, server, channel, case, &[]));
        let got = saw(
            s,
            next_id,
            if event {
                Duration::from_secs(10)
            } else {
                Duration::from_millis(1500)
            },
        );
        assert_eq!(got, event, "{case}: event delivered?");
    };
    check("allowed", general, (200, 0), true, &mut s);
    check(
        "denied by overwrite: no VIEW_CHANNEL",
        hidden,
        (403, 50001),
        false,
        &mut s,
    );
    check(
        "denied by role: the bot's role may not view",
        role_denied,
        (403, 50001),
        false,
        &mut s,
    );
    check(
        "denied by overwrite: no SEND_MESSAGES",
        read_only,
        (403, 50013),
        true,
        &mut s,
    );

    // A narrowed grant (VIEW_CHANNEL only) bites both at the same moment.
    reg.install(app.id, server, Some(VIEW | HISTORY));
    let send = || rest("POST", Some(json!({"content": "probe"})));
    assert!(
        eventually(403, send),
        "a narrowed grant must stop REST sends"
    );
    check(
        "after a narrowed grant",
        general,
        (403, 50013),
        true,
        &mut s,
    );
    // Withdrawn VIEW_CHANNEL: neither half sees the channel.
    reg.install(app.id, server, Some(SEND));
    assert!(
        eventually(403, || rest("GET", None)),
        "a grant without VIEW_CHANNEL hides the channel from REST"
    );
    check(
        "after VIEW_CHANNEL was withdrawn",
        general,
        (403, 50001),
        false,
        &mut s,
    );
    // Uninstalled: REST does not know the channel; no events.
    reg.uninstall(app.id, server);
    assert!(
        eventually(404, || rest("GET", None)),
        "an uninstall must stop REST reads"
    );
}

/// A person's message reached the node from another producer: the chat
/// service read it from the stream, so a bot can read, react to, reply to
/// and delete it (with MANAGE_MESSAGES only: it is not the bot's).
#[test]
fn a_persons_message_from_another_producer_can_be_acted_on() {
    use support::events::{message_event, Producer};
    let mut f = fixture(&[]);
    let id = 1_180_000_000_000_400_001u64;
    Producer::connect(f.node.ingest).send(&message_event(
        id,
        f.server,
        f.general,
        "hello bots",
        &[],
    ));
    assert_eq!(f.expect_event("MESSAGE_CREATE")["id"], id.to_string());
    let ch = f.general;
    let got = support::wait_until(Duration::from_secs(5), || {
        f.call("GET", &format!("/channels/{ch}/messages/{id}"), None)
            .status
            == 200
    });
    assert!(
        got.is_some(),
        "the chat service learnt the person's message"
    );
    let r = f.call("GET", &format!("/channels/{ch}/messages/{id}"), None);
    assert_eq!(r.json()["content"], "hello bots", "{}", r.body);
    let r = f.call(
        "PUT",
        &format!("/channels/{ch}/messages/{id}/reactions/%E2%9C%85/@me"),
        None,
    );
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        f.expect_event("MESSAGE_REACTION_ADD")["message_author_id"]
            .as_str()
            .map(str::to_string),
        Some(support::events::AUTHOR_ID.to_string())
    );
    let r = f.call(
        "POST",
        &format!("/channels/{ch}/messages"),
        Some(json!({"content": "hi!", "message_reference": {"message_id": id.to_string()}})),
    );
    assert_eq!(
        r.json()["referenced_message"]["content"],
        "hello bots",
        "{}",
        r.body
    );
    // Not the bot's message, and the demo bot has no MANAGE_MESSAGES.
    assert_error(
        &f.call("DELETE", &format!("/channels/{ch}/messages/{id}"), None),
        403,
        50013,
        "another's message",
    );
    assert_error(
        &f.call(
            "PATCH",
            &format!("/channels/{ch}/messages/{id}"),
            Some(json!({"content": "x"})),
        ),
        403,
        50005,
        "editing another's message",
    );
}

/// One token floods (ignoring every 429) from several connections; another
/// bot's requests in the meantime are all served, none refused, and the
/// flooder is banned, never answered 401. The bystander runs on another
/// host (source address 127.0.0.2): the flooder's own address is soon
/// restricted too, across its tokens, as REST.md says (10,000 invalid
/// requests per 10 minutes per address).
#[test]
fn a_flood_from_one_token_hurts_nobody_else() {
    let f = fixture(&[]);
    let reg = Registry::new(f.node.dir.path());
    let other = reg.add_app("bystander", 0);
    reg.install(other.id, f.server, None);
    let g = f.node.gateway;
    let flood_path = format!("/api/v10/channels/{}/messages", f.general);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let statuses = std::sync::Arc::new(std::sync::Mutex::new(
        std::collections::BTreeMap::<u16, u64>::new(),
    ));
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            let (stop, statuses, auth, path) = (
                stop.clone(),
                statuses.clone(),
                f.auth.clone(),
                flood_path.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = json_request(
                        g,
                        "POST",
                        &path,
                        Some(&auth),
                        Some(&json!({"content": "flood"})),
                    );
                    *statuses.lock().unwrap().entry(r.status).or_default() += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let auth_b = format!("Bot {}", other.token);
    let mut served = 0;
    for i in 0..20 {
        let r = json_request_from(
            std::net::Ipv4Addr::new(127, 0, 0, 2),
            g,
            "GET",
            &format!("/api/v10/channels/{}/messages?limit=1", f.general),
            Some(&auth_b),
        );
        assert_eq!(
            r.status, 200,
            "the bystander's request {i} during the flood: {}\n{}",
            r.head, r.body
        );
        served += 1;
        std::thread::sleep(Duration::from_millis(120)); // 10 per second: its own limit, unhurried
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in flooders {
        t.join().unwrap();
    }
    let st = statuses.lock().unwrap().clone();
    assert_eq!(served, 20);
    assert!(
        st.get(&429).copied().unwrap_or(0) > 0,
        "the flooder was limited: {st:?}"
    );
    assert!(
        !st.contains_key(&401),
        "a flood is never answered 401: {st:?}"
    );
    let m = support::metrics::metrics(f.node.admin);
    assert!(
        support::metrics::metric_sum(&m, "gatewayd_rest_bans_total", &[]) >= 1.0,
        "the flooder was banned: {st:?}"
    );
}

/// Read one HTTP response (head and Content-Length body) from a stream.
fn read_response(s: &mut impl std::io::Read, buf: &mut Vec<u8>) -> Resp {
    let mut tmp = [0u8; 8192];
    loop {
        if let Some(end) = support::http::head_end(buf) {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len: usize = support::http::header(&head, "content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + len {
                let body = String::from_utf8_lossy(&buf[end..end + len]).into_owned();
                buf.drain(..end + len);
                return Resp {
                    status: support::http::status_of(&head),
                    head,
                    body,
                };
            }
        }
        let n = s.read(&mut tmp).expect("read");
        assert!(
            n > 0,
            "EOF before a whole response: {:?}",
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// Keep-alive and pipelining on one connection, on a node with 4 workers
/// (so the connection is usually handed to its token's worker first, with
/// both requests still unread in its buffer): answered in order.
#[test]
fn pipelined_requests_on_one_keep_alive_connection_are_answered_in_order() {
    use std::io::Write;
    let f = fixture(&["--workers", "4"]);
    for round in 0..3 {
        let mut s = std::net::TcpStream::connect(f.node.gateway).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let body = format!(r#"{{"content":"pipelined {round}"}}"#);
        let mut req = String::new();
        req.push_str(&format!(
            "POST /api/v10/channels/{}/messages HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            f.general,
            f.auth,
            body.len()
        ));
        req.push_str(&format!(
            "GET /api/v10/channels/{}/messages?limit=1 HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
            f.general, f.auth
        ));
        req.push_str("GET /api/v10/gateway HTTP/1.1\r\nHost: x\r\n\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let created = read_response(&mut s, &mut buf);
        assert_eq!(created.status, 200, "{}\n{}", created.head, created.body);
        assert!(
            created.head.contains("Connection: keep-alive"),
            "{}",
            created.head
        );
        let listed = read_response(&mut s, &mut buf);
        assert_eq!(listed.status, 200, "{}", listed.body);
        assert_eq!(
            listed.json()[0]["id"],
            created.json()["id"],
            "the read saw the write before it"
        );
        let gw = read_response(&mut s, &mut buf);
        assert_eq!(gw.status, 200, "{}", gw.body);
        assert!(gw.json()["url"].is_string());
    }
}

/// A server the bot is installed in after its first request becomes
/// visible to its REST requests when its view is next rebuilt
/// (`--rest-view-refresh-ms`).
#[test]
fn a_new_installation_becomes_visible_to_rest() {
    let f = fixture(&["--rest-view-refresh-ms", "300"]);
    let reg = Registry::new(f.node.dir.path());
    let (server, channel) = reg.add_server("later");
    let path = format!("/channels/{channel}/messages");
    assert_error(
        &f.call("GET", &path, None),
        404,
        10003,
        "not installed there yet",
    );
    let app = f.session.ready["d"]["application"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    reg.install(app, server, None);
    assert!(
        eventually(200, || f.call("GET", &path, None)),
        "the new installation never became visible to REST"
    );
}

/// Invalid requests are counted per source address across tokens
/// (REST.md: 10,000 per 10 minutes, here 20): past the limit the address is
/// refused with the 429 contract, even with a good token, while another
/// address with the same token is served.
#[test]
fn invalid_requests_restrict_their_source_address_and_only_it() {
    use std::net::Ipv4Addr;
    let f = fixture(&["--rest-invalid-per-address", "20"]);
    let path = format!("/api/v10/channels/{}/messages", f.general);
    let (a, b) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    for i in 0..20 {
        let bad = format!("Bot {}.forged.{i}", 1_180_000_000_000_000_000u64 + i);
        let r = json_request_from(a, f.node.gateway, "GET", &path, Some(&bad));
        assert_eq!(r.status, 401, "{}", r.body);
    }
    // The last ones may still be on their way into the count (an address
    // is looked up once per connection): poll with the good token.
    let mut refused = None;
    for _ in 0..50 {
        let r = json_request_from(a, f.node.gateway, "GET", &path, Some(&f.auth));
        if r.status == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body);
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = refused.expect("the address must be restricted after 20 invalid requests");
    r.assert_json_type("address 429");
    let v = r.json();
    assert!(v["retry_after"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(v["global"], false);
    let retry: u64 = r
        .header("Retry-After")
        .unwrap()
        .parse()
        .expect("an integer Retry-After");
    assert!((1..=600).contains(&retry), "{retry}");
    assert!(r.header("Via").is_some(), "a 429 carries Via");
    assert_eq!(r.header("X-RateLimit-Scope").as_deref(), Some("user"));
    assert!(r.header("X-RateLimit-Global").is_none());
    // The same token from another address is served.
    let r = json_request_from(b, f.node.gateway, "GET", &path, Some(&f.auth));
    assert_eq!(r.status, 200, "another address: {}", r.body);
    let m = support::http::http_get(f.node.admin, "/metrics").unwrap().1;
    let value = |name: &str| -> u64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    };
    assert_eq!(value("gatewayd_rest_address_restrictions_total "), 1);
    assert!(value("gatewayd_rest_address_refused_total ") >= 1);
}
