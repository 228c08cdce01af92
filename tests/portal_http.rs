//! The developer portal over plain HTTP (issue 16, docs/portal.md): sign-in
//! and its cookie, CSRF, forged and expired sessions, the sign-in flood, one
//! application never seeing another's data, names escaped, and the test
//! tools end to end against a real node and bot. The browser's view of the
//! same is tests/portal_browser.rs.

mod support;

use std::time::Duration;

use serde_json::json;
use support::bot;
use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::portal::{self, enc, request, sign_in};
use support::registry::Registry;
use support::{wait_until, BOT_INTENTS};

fn live(s: &portal::Signed) -> u64 {
    s.health()["sessions"]["live"].as_u64().unwrap()
}

#[test]
fn sign_in_gives_a_strict_cookie_and_one_application_sees_only_its_own() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    assert_ne!(addr, node.admin, "never on the admin port");
    // A second application, installed in a server whose name is markup.
    let reg = Registry::new(node.dir.path());
    let other = reg.add_app("<img src=x onerror=alert(1)>", 0);
    let (server, _) = reg.add_server("<script>alert(1)</script>");
    reg.install(other.id, server, None);

    // The cookie as signed in: HttpOnly, SameSite=Strict, not Secure (no TLS).
    let page = request(addr, "GET", "/", &[], "");
    let pre = page.set_cookie("gw_pre").unwrap();
    let a = request(
        addr,
        "POST",
        "/signin",
        &[format!("Cookie: gw_pre={pre}")],
        &format!("csrf={pre}&token={}", enc(&node.token)),
    );
    assert_eq!(a.status, 303, "{a:?}");
    let line = a.cookie_line("gw_portal").expect("a session cookie");
    assert!(
        line.contains("HttpOnly") && line.contains("SameSite=Strict"),
        "{line}"
    );
    assert!(!line.contains("Secure"), "{line}");

    let demo = sign_in(addr, &node.token).unwrap();
    let mine = sign_in(addr, &other.token).unwrap();
    let demo_id = demo.health()["application_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(mine.health()["application_id"], other.id.to_string());
    assert_ne!(demo_id, other.id.to_string());

    // The demo bot connects: its count moves, the other application's does not.
    let s = bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None).unwrap();
    assert!(wait_until(Duration::from_secs(5), || live(&demo) == 1).is_some());
    assert_eq!(live(&mine), 0);
    assert_eq!(mine.health()["identifies"], 0);
    // Sessions by shard: a second one on shard [1, 2].
    let s2 = bot::identify(
        node.gateway,
        "demo-1",
        &node.token,
        BOT_INTENTS,
        Some((1, 2)),
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(5), || live(&demo) == 2).is_some());
    let shards = || demo.health()["sessions"]["by_shard"].clone();
    assert!(
        wait_until(Duration::from_secs(5), || shards()
            .as_array()
            .is_some_and(|a| a.len() == 2))
        .is_some(),
        "{}",
        shards()
    );
    assert_eq!(
        shards(),
        json!([{"shard": [0, 1], "live": 1, "degraded": 0}, {"shard": [1, 2], "live": 1, "degraded": 0}])
    );
    assert_eq!(mine.health()["sessions"]["by_shard"], json!([]));
    s2.close_politely();
    assert!(wait_until(Duration::from_secs(5), || live(&demo) == 1).is_some());

    // Names are text, in the page and everywhere.
    let page = mine.get("/").body;
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page:.2000}"
    );
    assert!(!page.contains("<script>alert(1)"));
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;") && !page.contains("<img"));

    // The demo application's click is not the other's to read.
    let general = bot::server_and_general(&s.guild_creates[0]).1;
    let put = support::http::json_request(
        node.gateway,
        "PUT",
        &format!("/api/v10/applications/{demo_id}/commands"),
        Some(&format!("Bot {}", node.token)),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(put.status, 200, "{}", put.body);
    let c = demo.post("/api/click", &format!("command=ping&channel={general}"));
    assert_eq!(c.status, 200, "{c:?}");
    let id = c.json()["interaction_id"].as_str().unwrap().to_string();
    assert_eq!(demo.get(&format!("/api/interactions/{id}")).status, 200);
    assert_eq!(mine.get(&format!("/api/interactions/{id}")).status, 404);
    // Nor can it send into the demo's channel.
    let t = mine.post("/api/test-message", &format!("channel={general}"));
    assert_eq!(t.status, 403, "{t:?}");
}

#[test]
fn csrf_forged_and_expired_sessions_are_refused_and_counted() {
    let node = Node::start(&["--no-demo-traffic", "--portal-session-idle-s", "2"]);
    let addr = portal::addr(&node);
    let s = sign_in(addr, &node.token).unwrap();
    let cookie = format!("Cookie: gw_portal={}", s.cookie);
    // No token, a wrong one, a foreign origin with the right one.
    let none = request(
        addr,
        "POST",
        "/api/reset-token",
        std::slice::from_ref(&cookie),
        "",
    );
    assert_eq!(none.status, 403, "{none:?}");
    let wrong = request(
        addr,
        "POST",
        "/api/reset-token",
        &[cookie.clone(), "X-CSRF-Token: 00".into()],
        "",
    );
    assert_eq!(wrong.status, 403);
    let foreign = request(
        addr,
        "POST",
        "/api/reset-token",
        &[
            cookie.clone(),
            format!("X-CSRF-Token: {}", s.csrf),
            "Origin: http://evil.example".into(),
        ],
        "",
    );
    assert_eq!(foreign.status, 403);
    // The sign-in form without its own token.
    let bare = request(
        addr,
        "POST",
        "/signin",
        &[],
        &format!("token={}", enc(&node.token)),
    );
    assert_eq!(bare.status, 403);
    assert!(bare.set_cookie("gw_portal").is_none());
    // A forged cookie is nobody.
    let forged = request(
        addr,
        "GET",
        "/api/health",
        &[format!("Cookie: gw_portal={}", "ab".repeat(32))],
        "",
    );
    assert_eq!(forged.status, 401);
    let page = request(addr, "GET", "/", &["Cookie: gw_portal=<script>".into()], "");
    assert!(page.body.contains("Sign in") && !page.body.contains("<script>"));
    // The token still works (the CSRF refusals changed nothing) ...
    assert!(s.health()["application_id"]
        .as_str()
        .is_some_and(|a| !a.is_empty()));
    // ... until the session has been idle longer than its life.
    std::thread::sleep(Duration::from_millis(2_300));
    assert_eq!(s.get("/api/health").status, 401, "expired");
    let m = metrics(node.admin);
    assert!(metric_sum(&m, "gatewayd_portal_csrf_refused_total", &[]) >= 4.0);
    assert!(metric_sum(&m, "gatewayd_portal_bad_sessions_total", &[]) >= 3.0);
}

#[test]
fn a_flood_of_bad_sign_ins_is_refused_and_counted() {
    let node = Node::start(&[
        "--no-demo-traffic",
        "--portal-signin-failures-per-address",
        "3",
    ]);
    let addr = portal::addr(&node);
    for i in 0..3 {
        let e = sign_in(addr, &format!("not-a-token-{i}")).unwrap_err();
        assert_eq!(e.status, 401, "{e:?}");
        assert!(e.body.contains("not valid"));
    }
    // Refused before the token is looked at: even the right one, this minute.
    let e = sign_in(addr, &node.token).unwrap_err();
    assert_eq!(e.status, 429, "{e:?}");
    let m = metrics(node.admin);
    assert_eq!(
        metric_sum(
            &m,
            "gatewayd_portal_signins_total",
            &[("outcome", "bad_token")]
        ),
        3.0
    );
    assert!(
        metric_sum(
            &m,
            "gatewayd_portal_signins_total",
            &[("outcome", "refused")]
        ) >= 1.0
    );
}

#[test]
fn the_tools_send_an_event_click_a_command_check_the_endpoint_and_reset_the_token() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let s = sign_in(addr, &node.token).unwrap();
    let mut bot = bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None).unwrap();
    let app = bot.app_id();
    let general = bot::server_and_general(&bot.guild_creates[0]).1;

    // A test MESSAGE_CREATE reaches the bot.
    let t = s.post(
        "/api/test-message",
        &format!("channel={general}&content=hello+portal"),
    );
    assert_eq!(t.status, 200, "{t:?}");
    let got = (0..20)
        .map(|_| bot.next_dispatch(Duration::from_secs(10)))
        .find(|v| v["t"] == "MESSAGE_CREATE" && v["d"]["id"] == t.json()["message_id"])
        .expect("the test message");
    assert!(got["d"]["content"]
        .as_str()
        .unwrap()
        .contains("hello portal"));

    // A click: the bot answers, the page shows what the person sees.
    let put = support::http::json_request(
        node.gateway,
        "PUT",
        &format!("/api/v10/applications/{app}/commands"),
        Some(&format!("Bot {}", node.token)),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(put.status, 200, "{}", put.body);
    let c = s.post("/api/click", &format!("command=ping&channel={general}"));
    assert_eq!(c.status, 200, "{c:?}");
    let id = c.json()["interaction_id"].as_str().unwrap().to_string();
    let ix = (0..50)
        .map(|_| bot.next_dispatch(Duration::from_secs(10)))
        .find(|v| v["t"] == "INTERACTION_CREATE")
        .expect("the interaction")["d"]
        .clone();
    assert_eq!(ix["id"], id);
    let cb = support::http::request_with_body(
        node.gateway,
        "POST",
        &format!(
            "/api/v10/interactions/{id}/{}/callback",
            ix["token"].as_str().unwrap()
        ),
        &[("Content-Type", "application/json")],
        Some(br#"{"type": 4, "data": {"content": "pong"}}"#),
    )
    .unwrap();
    assert_eq!(cb.status, 204, "{}", cb.body);
    let seen = wait_until(Duration::from_secs(5), || {
        s.get(&format!("/api/interactions/{id}")).json()["state"] == "answered"
    });
    assert!(seen.is_some());
    let v = s.get(&format!("/api/interactions/{id}")).json();
    assert_eq!(v["message"]["content"], "pong", "{v}");
    let h = s.health();
    assert_eq!(h["interactions"]["acks"], 1, "{h}");
    assert!(h["interactions"]["ack_latency_ms"]["p99"].as_u64().unwrap() <= 3000);
    // The page shows estimates inside the bucket, with the bucket's range.
    let est = &h["interactions"]["ack_latency_estimate_ms"]["p99"];
    let (v, lo, hi) = (
        est["ms"].as_u64().unwrap(),
        est["bucket_ms"][0].as_u64().unwrap(),
        est["bucket_ms"][1].as_u64().unwrap(),
    );
    assert!(lo <= v && v <= hi && hi <= 3000, "{est}");
    assert_eq!(h["ack_minutes"].as_array().unwrap().len(), 1);
    assert!(
        h["rest"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["status"] == 200),
        "{h}"
    );

    // The endpoint check: none set, then one that refuses to answer.
    let v = s.post("/api/verify-endpoint", "");
    assert_eq!(v.status, 400, "{v:?}");
    let dead = format!("http://127.0.0.1:{}/i", support::node::free_port());
    let v = s
        .post("/api/verify-endpoint", &format!("url={}", enc(&dead)))
        .json();
    assert_eq!(v["ok"], false, "{v}");
    let result = v["result"].as_str().unwrap();
    assert!(result.contains("signed PING"), "{v}");
    // In words: no reason codes, no raw OS errors.
    assert!(
        !result.contains("os error") && !result.contains("connect_failed"),
        "{v}"
    );

    // Reset: a new token shown once; the bot's session closes with 4004.
    let r = s.post("/api/reset-token", "");
    assert_eq!(r.status, 200, "{r:?}");
    let token = r.json()["token"].as_str().unwrap().to_string();
    assert_ne!(token, node.token);
    let closed =
        (0..200).find_map(
            |_| match bot::read_next(&mut bot.ws, Duration::from_secs(10)) {
                bot::Next::Close(c) => Some(c.map_or(0, |c| c.0)),
                bot::Next::Json(_) => None,
                other => panic!("{other:?}"),
            },
        );
    assert_eq!(closed, Some(4004));
    assert!(sign_in(addr, &node.token).is_err(), "the old token is gone");
    let again = sign_in(addr, &token).unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        again.health()["closes_hour"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["code"] == 4004)
    })
    .is_some());
}

#[test]
fn a_slow_consumer_shows_as_degraded() {
    let node = Node::start(&["--no-demo-traffic", "--max-unsent", "300"]);
    let addr = portal::addr(&node);
    let s = sign_in(addr, &node.token).unwrap();
    // The bot identifies, then never reads again.
    let bot = bot::identify(node.gateway, "slow", &node.token, BOT_INTENTS, None).unwrap();
    let (server, channel) = bot::server_and_general(&bot.guild_creates[0]);
    let mut p = support::events::Producer::connect(node.ingest);
    let pad = "x".repeat(16 << 10);
    let mut sent = 0u64;
    let mut degraded = None;
    // Fast until the socket buffers are surely full, then a few at a time.
    for n in 0..600u64 {
        let mut ev = support::events::message_event(
            1_600_000_000_000_000_000 + n,
            server,
            channel,
            "big",
            &[],
        );
        ev.d["x_pad"] = json!(pad);
        p.send(&ev);
        sent += 1;
        if n >= 200 && n % 5 == 0 {
            let h = s.health();
            if h["sessions"]["degraded"].as_u64().unwrap() > 0 {
                degraded = Some(h);
                break;
            }
            std::thread::sleep(Duration::from_millis(400));
        }
    }
    let h = degraded.unwrap_or_else(|| panic!("no degraded session after {sent} events"));
    assert_eq!(h["sessions"]["live"], 1, "{h}");
    // The same tally counts it on its shard.
    assert_eq!(
        h["sessions"]["by_shard"],
        json!([{"shard": [0, 1], "live": 1, "degraded": 1}]),
        "{h}"
    );
    drop(bot);
}

/// (CPU seconds used, RSS KiB) of a process, from /proc.
fn cpu_and_rss(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = stat.rsplit(')').next().unwrap();
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are 12 and 13 after the command.
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    let hz = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    (ticks as f64 / hz, rss)
}

/// The portal's cost, for docs/portal.md: 100 applications, each with a
/// live bot session and a signed-in portal page polling /api/health every
/// 2 s (what the page's script does), against the same node idle.
#[test]
#[ignore = "measurement for docs/portal.md, run by hand: cargo test --release --test portal_http portal_cost -- --ignored --nocapture"]
fn portal_cost_figures() {
    const APPS: usize = 100;
    const SECS: u64 = 30;
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let (server, _) = reg.add_server("cost");
    let mut pages = Vec::new();
    let mut bots = Vec::new();
    for i in 0..APPS {
        let app = reg.add_app(&format!("cost-{i}"), 0);
        reg.install(app.id, server, None);
        bots.push(bot::identify(node.gateway, "cost", &app.token, 1 | (1 << 9), None).unwrap());
        pages.push(sign_in(addr, &app.token).unwrap());
    }
    let pid = node.child.id();
    let window = |poll: bool| {
        let (c0, _) = cpu_and_rss(pid);
        let t0 = std::time::Instant::now();
        let mut polls = 0;
        while t0.elapsed() < Duration::from_secs(SECS) {
            let round = std::time::Instant::now();
            if poll {
                for p in &pages {
                    assert_eq!(p.get("/api/health").status, 200);
                    polls += 1;
                }
            }
            std::thread::sleep(Duration::from_secs(2).saturating_sub(round.elapsed()));
        }
        let (c1, rss) = cpu_and_rss(pid);
        ((c1 - c0) / t0.elapsed().as_secs_f64() * 100.0, rss, polls)
    };
    let (idle_cpu, idle_rss, _) = window(false);
    let (poll_cpu, poll_rss, polls) = window(true);
    println!(
        "portal cost: {APPS} apps, {APPS} sessions, {SECS} s windows\n  \
         idle:    node CPU {idle_cpu:.2} % of a core, RSS {idle_rss} KiB\n  \
         polled:  node CPU {poll_cpu:.2} % of a core, RSS {poll_rss} KiB \
         ({polls} GET /api/health, {:.0}/s)",
        polls as f64 / SECS as f64
    );
    drop(bots);
}

/// One GET with `extra` header lines: the head and the raw body bytes.
fn get_raw(addr: std::net::SocketAddr, path: &str, extra: &str) -> (String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}\r\n").unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    (
        String::from_utf8_lossy(&buf[..end]).into_owned(),
        buf[end..].to_vec(),
    )
}

/// The `attr="..."` value that starts with `prefix` in `page`.
fn link<'a>(page: &'a str, prefix: &str) -> &'a str {
    let at = page
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix} in {page:.600}"));
    let rest = &page[at..];
    &rest[..rest.find('"').unwrap()]
}

#[test]
fn static_files_have_hashed_names_cached_and_compressed_an_icon_and_unknown_api_routes_are_json_404s(
) {
    use std::io::Read;
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let page = request(addr, "GET", "/", &[], "").body;
    let css = link(&page, "/static/portal.").to_string();
    assert!(
        css.ends_with(".css") && css.len() > "/static/portal..css".len() + 8,
        "{css}"
    );
    let js = link(&page[page.find("<script").unwrap()..], "/static/portal.").to_string();
    assert!(js.ends_with(".js"), "{js}");
    let icon = link(&page, "/static/favicon.").to_string();
    assert!(page.contains("rel=\"icon\""), "{page:.600}");

    let file = |name: &str| {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/portal/assets")
                .join(name),
        )
        .unwrap()
    };
    for (path, name, ctype) in [
        (&css, "portal.css", "text/css"),
        (&js, "portal.js", "text/javascript"),
        (&icon, "favicon.svg", "image/svg+xml"),
    ] {
        // Plain: the file's bytes, cached for a year under its hashed name.
        let (head, body) = get_raw(addr, path, "");
        assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
        assert!(head.contains(&format!("Content-Type: {ctype}")), "{head}");
        assert!(
            head.contains("Cache-Control: public, max-age=31536000, immutable"),
            "{head}"
        );
        assert!(!head.contains("Content-Encoding"), "{head}");
        assert_eq!(body, file(name), "{path}");
        // Asked for gzip: gzip, smaller, the same bytes once inflated.
        let (head, gz) = get_raw(addr, path, "Accept-Encoding: gzip, deflate, br\r\n");
        assert!(head.contains("Content-Encoding: gzip"), "{head}");
        assert!(head.contains("Vary: Accept-Encoding"), "{head}");
        assert!(
            gz.len() < body.len(),
            "{path}: {} >= {}",
            gz.len(),
            body.len()
        );
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut inflated)
            .unwrap();
        assert_eq!(inflated, body, "{path}");
    }
    // The plain names answer too, revalidated; /favicon.ico is the icon.
    let (head, body) = get_raw(addr, "/favicon.ico", "");
    assert!(
        head.starts_with("HTTP/1.1 200") && head.contains("image/svg+xml"),
        "{head}"
    );
    assert!(head.contains("Cache-Control: no-cache"), "{head}");
    assert_eq!(body, file("favicon.svg"));
    let (head, _) = get_raw(addr, "/static/portal.css", "");
    assert!(head.contains("Cache-Control: no-cache"), "{head}");
    assert_eq!(
        request(addr, "GET", "/static/portal.0000000000000000.css", &[], "").status,
        404
    );
    // Pages and the API stay uncacheable.
    assert!(request(addr, "GET", "/", &[], "")
        .head
        .contains("Cache-Control: no-store"));

    // An unknown API route: a JSON 404 signed in, a JSON 401 not.
    let me = sign_in(addr, &node.token).unwrap();
    let a = me.get("/api/no-such-thing");
    assert_eq!(a.status, 404, "{a:?}");
    assert!(a.head.contains("application/json"), "{}", a.head);
    assert!(a.json()["error"]
        .as_str()
        .unwrap()
        .contains("/api/no-such-thing"));
    assert!(me
        .get("/api/health")
        .head
        .contains("Cache-Control: no-store"));
    let a = request(addr, "GET", "/api/no-such-thing", &[], "");
    assert_eq!(a.status, 401, "{a:?}");
    assert!(a.json()["error"].is_string());
}

#[test]
fn refused_starts_are_counted_for_their_application_with_advice_and_times() {
    // Identify limits on (the test default is off): one Identify per
    // concurrency bucket per 5 s.
    let node = Node::start(&["--no-demo-traffic", "--identify-limits", "on"]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("strict-bot", 0); // no privileged intent approved
    let (server, _) = reg.add_server("strict");
    reg.install(app.id, server, None);
    let me = sign_in(addr, &app.token).unwrap();
    let other = sign_in(addr, &node.token).unwrap();
    assert_eq!(
        me.health()["start_refusals"],
        json!({"counts": [], "recent": []})
    );

    // 4014: MESSAGE_CONTENT asked for, not approved.
    let e = bot::identify(node.gateway, "strict", &app.token, BOT_INTENTS, None).err();
    assert!(e.as_deref().is_some_and(|e| e.contains("4014")), "{e:?}");
    // Op 9: the first Identify of bucket 0 starts, the next one within 5 s does not.
    let (first, _) = bot::concurrency_refusal(node.gateway, &app.token);

    let h = me.health();
    let sr = &h["start_refusals"];
    let count = |why: &str| {
        sr["counts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["why"] == why)
            .map(|c| {
                (
                    c["count"].as_u64().unwrap(),
                    c["advice"].as_str().unwrap().to_string(),
                )
            })
    };
    let (n, advice) = count("close_4014").unwrap_or_else(|| panic!("{sr:#}"));
    assert_eq!(n, 1, "{sr:#}");
    assert!(
        advice.contains("privileged intent") && advice.contains("set-intents"),
        "{advice}"
    );
    let (n, advice) = count("op9_concurrency").unwrap_or_else(|| panic!("{sr:#}"));
    assert_eq!(n, 1, "{sr:#}");
    assert!(
        advice.contains("max_concurrency is 1") && advice.contains("5 s"),
        "{advice}"
    );
    // Newest first, with their times and what a 4014 asked for.
    let recent = sr["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 2, "{sr:#}");
    assert_eq!(recent[0]["why"], "op9_concurrency");
    assert_eq!(recent[1]["why"], "close_4014");
    assert_eq!(
        recent[1]["privileged_intents_asked"],
        json!(["MESSAGE_CONTENT"])
    );
    assert!(
        recent
            .iter()
            .all(|r| r["ago_ms"].as_u64().unwrap() < 60_000),
        "{sr:#}"
    );
    // Another application sees none of it.
    assert_eq!(other.health()["start_refusals"]["counts"], json!([]));
    // A bad token names no application: counted nowhere here.
    let bad = bot::identify(
        node.gateway,
        "bad",
        "not-a-token",
        support::intent::GUILDS,
        None,
    )
    .err();
    assert!(
        bad.as_deref().is_some_and(|e| e.contains("4004")),
        "{bad:?}"
    );
    assert_eq!(
        me.health()["start_refusals"]["recent"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    drop(first);
}

/// An HTTP endpoint that answers every request 200 `{"type":1}`: it checks
/// no signature (the platform must refuse to save it).

#[test]
#[ignore = "needs PyNaCl: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn settings_show_the_public_key_and_save_an_endpoint_only_once_it_verifies() {
    let node = Node::start(&[
        "--no-demo-traffic",
        "--egress-allow-private-cidrs",
        "127.0.0.0/8",
    ]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("http-bot", 0);
    let me = sign_in(addr, &app.token).unwrap();
    let page = me.get("/").body;
    let at = page.find("id=\"verify-key\">").expect("the public key") + "id=\"verify-key\">".len();
    let key = page[at..].split('<').next().unwrap().to_string();
    assert_eq!(key.len(), 64, "{key}");
    assert!(page.contains("none: interactions reach the bot over the gateway"));

    let save = |url: &str| {
        me.post("/api/endpoint", &format!("url={}", enc(url)))
            .json()
    };
    let shown = || me.get("/").body;

    // A verifying endpoint (PyNaCl, with the key the page shows): saved.
    let ep = support::python::NaclEndpoint::start(&key, "pong");
    let v = save(&ep.url);
    assert_eq!(v["ok"], true, "{v}");
    assert!(
        v["result"]
            .as_str()
            .unwrap()
            .starts_with("verified and saved"),
        "{v}"
    );
    assert!(shown().contains(&ep.url));

    // One that accepts any signature: refused, and the saved one stays.
    let v = save(&portal::lax_endpoint());
    assert_eq!(v["ok"], false, "{v}");
    let why = v["result"].as_str().unwrap();
    assert!(
        why.starts_with("not saved") && why.contains("expected 401"),
        "{v}"
    );
    assert!(shown().contains(&ep.url));

    // Unreachable: in words, no OS error.
    let dead = format!("http://127.0.0.1:{}/i", support::node::free_port());
    let v = save(&dead);
    assert_eq!(v["ok"], false, "{v}");
    let why = v["result"].as_str().unwrap();
    assert!(
        why.contains("signed PING") && !why.contains("os error"),
        "{v}"
    );

    // A private address the egress does not call.
    let v = save("http://10.1.2.3/interactions");
    assert_eq!(v["ok"], false, "{v}");
    assert!(v["result"].as_str().unwrap().contains("private"), "{v}");
    assert!(shown().contains(&ep.url));

    // Empty: removed.
    let v = save("");
    assert_eq!(v["ok"], true, "{v}");
    assert!(shown().contains("none: interactions reach the bot over the gateway"));
}

#[test]
fn a_page_signed_out_by_a_token_reset_elsewhere_says_so() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("reset-bot", 0);
    let here = sign_in(addr, &app.token).unwrap();
    let there = sign_in(addr, &app.token).unwrap();
    let r = here.post("/api/reset-token", "");
    assert_eq!(r.status, 200, "{r:?}");
    // The other tab's next poll, then its page: why, in words.
    let a = there.get("/api/health");
    assert_eq!(a.status, 401, "{a:?}");
    assert!(
        a.json()["error"]
            .as_str()
            .unwrap()
            .contains("token was reset"),
        "{a:?}"
    );
    let page = there.get("/");
    assert!(page.body.contains("token was reset"), "{:.600}", page.body);
    assert!(page
        .cookie_line("gw_portal")
        .is_some_and(|l| l.contains("Max-Age=0")));
    // A forged cookie gets the plain answer.
    let forged = request(
        addr,
        "GET",
        "/api/health",
        &["Cookie: gw_portal=0000".into()],
        "",
    );
    assert!(forged.json()["error"]
        .as_str()
        .unwrap()
        .contains("not signed in"));
    // The tab that reset stays signed in.
    assert_eq!(here.get("/api/health").status, 200);
}

#[test]
fn every_rest_route_the_bot_calls_is_in_its_rest_table() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let me = sign_in(addr, &node.token).unwrap();
    let s = bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None).unwrap();
    let app = s.app_id();
    let auth = format!("Bot {}", node.token);
    for path in ["/users/@me", "/gateway/bot", "/applications/@me"] {
        let r = support::http::json_request(
            node.gateway,
            "GET",
            &format!("/api/v10{path}"),
            Some(&auth),
            None,
        );
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let put = support::http::json_request(
        node.gateway,
        "PUT",
        &format!("/api/v10/applications/{app}/commands"),
        Some(&auth),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(put.status, 200, "{}", put.body);
    let h = me.health();
    let routes: Vec<String> = h["rest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["route"].as_str().unwrap().to_string())
        .collect();
    for want in [
        "GET /users/@me",
        "GET /gateway/bot",
        "GET /applications/@me",
    ] {
        assert!(routes.iter().any(|r| r == want), "{want} not in {routes:?}");
    }
    assert!(
        h["rest_window"]
            .as_str()
            .is_some_and(|w| w.contains("since")),
        "{h}"
    );
}

/// `/api/sessions`: each application sees its own sessions and events
/// only; the cursor pages without repeats; bad parameters are 400s in
/// words; a resume and a close with its code are in the timeline.
#[test]
fn the_session_list_is_per_application_paged_by_cursor_and_has_the_timeline() {
    let node = Node::start(&["--no-demo-traffic", "--identify-limits", "off"]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let other = reg.add_app("other-bot", 0);
    let guilds = support::intent::GUILDS;
    let mut mine: Vec<bot::Session> = (0..5)
        .map(|i| {
            bot::identify(
                node.gateway,
                &format!("m{i}"),
                &node.token,
                guilds,
                Some((i, 5)),
            )
            .unwrap()
        })
        .collect();
    let theirs = bot::identify(node.gateway, "o", &other.token, guilds, None).unwrap();
    let a = sign_in(addr, &node.token).unwrap();
    let b = sign_in(addr, &other.token).unwrap();
    // The workers republish once a second.
    assert!(
        wait_until(Duration::from_secs(10), || a.get("/api/sessions").json()
            ["total"]
            == 5)
        .is_some()
    );
    let all = a.get("/api/sessions").json();
    let ids: Vec<&str> = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    let mut want: Vec<&str> = mine.iter().map(|s| s.session_id.as_str()).collect();
    want.sort();
    assert_eq!(ids, want, "its own five, by session id");
    let first = &all["sessions"][0];
    assert_eq!(first["compression"], "none");
    assert_eq!(first["attached"], true);
    assert!(first["heartbeat_age_ms"].as_u64().is_some(), "{first}");
    assert!(
        first["since_ms"].as_u64().unwrap() > 1_600_000_000_000,
        "{first}"
    );
    assert!(all["next"].is_null(), "one page holds them");
    let theirs_seen = b.get("/api/sessions").json();
    assert!(
        wait_until(Duration::from_secs(10), || b.get("/api/sessions").json()
            ["total"]
            == 1)
        .is_some()
    );
    assert!(!theirs_seen.to_string().contains(&mine[0].session_id));
    assert!(!a
        .get("/api/sessions")
        .json()
        .to_string()
        .contains(&theirs.session_id));

    // Two at a time: three pages, each session once.
    let mut seen = Vec::new();
    let mut after = String::new();
    for _ in 0..3 {
        let p = a
            .get(&format!("/api/sessions?limit=2&after={after}"))
            .json();
        for s in p["sessions"].as_array().unwrap() {
            seen.push(s["session_id"].as_str().unwrap().to_string());
        }
        match p["next"].as_str() {
            Some(n) => after = n.to_string(),
            None => break,
        }
    }
    assert_eq!(seen, want);
    for bad in [
        "?limit=0",
        "?limit=201",
        "?limit=x",
        "?after=zz",
        "?after=../../etc",
    ] {
        let r = a.get(&format!("/api/sessions{bad}"));
        assert_eq!(r.status, 400, "{bad}: {r:?}");
        assert!(r.json()["error"].as_str().is_some(), "{bad}");
    }

    // A close with its code, newest first in the timeline; the other
    // application's timeline has none of it.
    let gone = mine.pop().unwrap();
    let gone_id = gone.session_id.clone();
    let mut ws = gone.ws;
    ws.send(tungstenite::Message::Text("{".into())).unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let t = a.get("/api/sessions").json()["timeline"].clone();
        t[0]["event"] == "close" && t[0]["code"] == 4002 && t[0]["session_id"] == gone_id.as_str()
    })
    .is_some());
    let t = a.get("/api/sessions").json()["timeline"].clone();
    let identifies = t
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "identify")
        .count();
    assert_eq!(identifies, 5, "{t}");
    let bt = b.get("/api/sessions").json()["timeline"].clone();
    assert_eq!(bt.as_array().unwrap().len(), 1, "{bt}");
    assert!(!bt.to_string().contains(&gone_id));
    // 4002 may be resumed: the session stays, detached.
    assert!(wait_until(Duration::from_secs(10), || {
        let p = a.get("/api/sessions").json();
        p["total"] == 5
            && p["sessions"].as_array().unwrap().iter().any(|s| {
                s["session_id"] == gone_id.as_str()
                    && s["attached"] == false
                    && s["heartbeat_age_ms"].is_null()
            })
    })
    .is_some());
    drop((mine, theirs));
}

/// Developer accounts: a person signs in with a name and password and
/// sees exactly the applications they own; a switch to another's is
/// refused whatever the form says; a disowned application is gone at the
/// next request; a wrong password is refused like a wrong token (and
/// counted); a token reset does not sign the developer out.
#[test]
fn a_developer_sees_exactly_their_own_applications() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let alpha = reg.add_app("alpha-bot", 0);
    let beta = reg.add_app("beta-bot", 0);
    let demo_id = sign_in(addr, &node.token).unwrap().health()["application_id"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    reg.add_developer("ada", "correct horse battery");
    reg.add_developer("bob", "staple staple staple");
    reg.add_developer("cy", "nothing owned here");
    reg.own("ada", demo_id);
    reg.own("ada", alpha.id);
    reg.own("bob", beta.id);

    let ada = portal::sign_in_developer(addr, "ada", "correct horse battery").unwrap();
    let page = ada.get("/").body;
    assert!(
        page.contains("Signed in as <strong id=\"developer-name\">ada</strong>"),
        "{page:.2000}"
    );
    assert!(
        page.contains("alpha-bot") && page.contains("demo-bot"),
        "{page:.2000}"
    );
    assert!(!page.contains("beta-bot") && !page.contains(&beta.id.to_string()));
    // The first application they own is shown.
    assert_eq!(ada.health()["application_id"], demo_id.to_string());
    // Another's application: refused, and the page stays on theirs.
    let forged = ada.post("/switch", &format!("app={}", beta.id));
    assert_eq!(forged.status, 403, "{forged:?}");
    assert_eq!(ada.health()["application_id"], demo_id.to_string());
    let moved = ada.post("/switch", &format!("app={}", alpha.id));
    assert_eq!(moved.status, 303, "{moved:?}");
    assert_eq!(ada.health()["application_id"], alpha.id.to_string());

    let bob = portal::sign_in_developer(addr, "bob", "staple staple staple").unwrap();
    let page = bob.get("/").body;
    assert!(page.contains("beta-bot"), "{page:.2000}");
    assert!(!page.contains("alpha-bot") && !page.contains("demo-bot"));
    assert_eq!(bob.health()["application_id"], beta.id.to_string());
    // A bot-token session cannot switch at all.
    let token_session = sign_in(addr, &alpha.token).unwrap();
    assert_eq!(
        token_session
            .post("/switch", &format!("app={}", beta.id))
            .status,
        403
    );

    // Disowned while the page is open: gone at the next request.
    reg.disown("bob", beta.id);
    let r = bob.get("/api/health");
    assert_eq!(r.status, 409, "{r:?}");
    let page = bob.get("/").body;
    assert!(
        page.contains("id=\"no-apps\"") && !page.contains("beta-bot"),
        "{page:.2000}"
    );

    // Owning nothing: the list says how to get one.
    let cy = portal::sign_in_developer(addr, "cy", "nothing owned here").unwrap();
    let page = cy.get("/").body;
    assert!(
        page.contains("gatewayd registry developer own cy"),
        "{page:.2000}"
    );
    assert_eq!(cy.get("/api/health").status, 409);

    // A wrong password, an unknown name: refused alike, and counted.
    let before = metric_sum(
        &metrics(node.admin),
        "gatewayd_portal_signins_total",
        &[("outcome", "bad_token")],
    );
    for (name, pw) in [
        ("ada", "wrong password!!"),
        ("nobody", "correct horse battery"),
    ] {
        let r = portal::sign_in_developer(addr, name, pw).unwrap_err();
        assert_eq!(r.status, 401, "{name}");
        assert!(r.body.contains("do not match"), "{}", r.body);
    }
    let after = metric_sum(
        &metrics(node.admin),
        "gatewayd_portal_signins_total",
        &[("outcome", "bad_token")],
    );
    assert_eq!(after - before, 2.0);

    // A token reset of alpha (from ada's page) ends alpha's token
    // sessions, not ada's.
    let reset = ada.post("/api/reset-token", "");
    assert_eq!(reset.status, 200, "{reset:?}");
    assert_eq!(token_session.get("/api/health").status, 401);
    assert_eq!(ada.health()["application_id"], alpha.id.to_string());
}

/// Privileged intents: the author requests in Settings, the operator
/// (signed in with the admin token) sees it pending and approves or
/// denies; an Identify asking for an approved intent then starts; an
/// author cannot decide, and operator sign-in is off without a token.
#[test]
fn an_intents_request_is_approved_or_denied_by_the_operator() {
    const ADMIN: &str = "op-token-0123456789";
    let node = Node::start(&["--no-demo-traffic", "--admin-token", ADMIN]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let quiet = reg.add_app("quiet-bot", 0);
    let author = sign_in(addr, &node.token).unwrap();
    let page = author.get("/").body;
    assert!(
        page.contains("id=\"intents-pending\">none<"),
        "{page:.3000}"
    );
    let r = author.post(
        "/api/request-intents",
        "MESSAGE_CONTENT=on&GUILD_PRESENCES=on",
    );
    assert_eq!(r.status, 200, "{r:?}");
    let v = r.json();
    assert!(v["pending"] == "GUILD_PRESENCES", "{v}");
    let other = sign_in(addr, &quiet.token).unwrap();
    assert_eq!(
        other
            .post("/api/request-intents", "GUILD_MEMBERS=on")
            .status,
        200
    );
    // Not the author's to decide.
    let app_id: u64 = author.health()["application_id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let forged = author.post("/operator/intents", &format!("app={app_id}&action=approve"));
    assert_eq!(forged.status, 403, "{forged:?}");

    // The operator: a wrong token refused, the right one sees both requests.
    let bad = portal::sign_in_with_fields(addr, "admin_token=nope").unwrap_err();
    assert_eq!(bad.status, 401);
    let op = portal::sign_in_with_fields(addr, &format!("admin_token={ADMIN}")).unwrap();
    let page = op.get("/").body;
    assert!(page.contains("Privileged intent requests"), "{page:.3000}");
    assert!(
        page.contains(&format!("approve-{app_id}")) && page.contains(&format!("deny-{}", quiet.id))
    );
    assert_eq!(
        op.get("/api/health").status,
        409,
        "no application on the operator's page"
    );
    assert_eq!(
        op.post("/operator/intents", &format!("app={app_id}&action=approve"))
            .status,
        303
    );
    assert_eq!(
        op.post(
            "/operator/intents",
            &format!("app={}&action=deny", quiet.id)
        )
        .status,
        303
    );
    assert_eq!(
        op.post("/operator/intents", "app=1&action=approve").status,
        404
    );
    let page = op.get("/").body;
    assert!(page.contains("id=\"no-requests\""), "{page:.3000}");
    let page = author.get("/").body;
    assert!(
        page.contains("id=\"intents-approved\">GUILD_MEMBERS, GUILD_PRESENCES, MESSAGE_CONTENT<")
            && page.contains("id=\"intents-pending\">none<"),
        "{}",
        &page[page.find("h-intents").unwrap_or(0)..][..600]
    );
    // What was approved now starts.
    let presences = support::intent::GUILD_PRESENCES | support::intent::MESSAGE_CONTENT;
    let ok = bot::identify(
        node.gateway,
        "p",
        &node.token,
        BOT_INTENTS | presences,
        None,
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
    let denied = bot::identify(
        node.gateway,
        "q",
        &quiet.token,
        support::intent::GUILDS | support::intent::GUILD_MEMBERS,
        None,
    );
    assert!(denied.err().is_some_and(|e| e.contains("4014")));
    let page = other.get("/").body;
    assert!(
        page.contains("id=\"intents-pending\">none<"),
        "denied: nothing pending"
    );

    // A node without an admin token: operator sign-in is off.
    let plain = Node::start(&["--no-demo-traffic"]);
    let r = portal::sign_in_with_fields(portal::addr(&plain), "admin_token=").unwrap_err();
    assert!(r.body.contains("no admin_token"), "{}", r.body);
}

/// Starts refused while the Identify was read (4010, 4013) and Resumes
/// answered with op 9 are counted for the application whose token they
/// carried, with the Resume's reason; a token that is nobody's counts for
/// nobody; another application sees none of them.
#[test]
fn parse_refusals_and_refused_resumes_are_attributed_to_their_application() {
    use bot::Next;
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let reg = Registry::new(node.dir.path());
    let other = reg.add_app("other-bot", 0);
    let me = sign_in(addr, &node.token).unwrap();
    let them = sign_in(addr, &other.token).unwrap();
    // One payload on a fresh connection; what the gateway answered.
    let send = |d: serde_json::Value| -> Next {
        let mut ws = bot::connect(node.gateway);
        assert_eq!(bot::recv(&mut ws)["op"], 10);
        bot::send_json(&mut ws, &d);
        bot::read_next(&mut ws, Duration::from_secs(10))
    };
    let code = |n: Next| match n {
        Next::Close(Some((c, _))) => c,
        other => panic!("no close: {other:?}"),
    };
    let token = format!("Bot {}", node.token);
    let ident = |token: &str, intents: serde_json::Value, shard: serde_json::Value| {
        json!({"op": 2, "d": {"token": token, "intents": intents, "shard": shard,
               "properties": {"os": "linux", "browser": "t", "device": "t"}}})
    };
    assert_eq!(code(send(ident(&token, json!(513), json!([5, 2])))), 4010);
    assert_eq!(
        code(send(ident(&token, json!("lots"), json!([0, 1])))),
        4013
    );
    // The same refusals with a token that is nobody's, and with none.
    let forged = format!("Bot {}.AAAA.BBBB", node.token.split('.').next().unwrap());
    assert_eq!(code(send(ident(&forged, json!(513), json!([5, 2])))), 4010);
    assert_eq!(
        code(send(json!({"op": 2, "d": {"intents": 1, "shard": [9, 1]}}))),
        4002
    );
    let counts = |s: &portal::Signed| -> Vec<(String, u64)> {
        let h = s.health();
        let mut v: Vec<(String, u64)> = h["start_refusals"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["why"].as_str().unwrap().to_string(),
                    c["count"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    // The Resumes come after those two are counted: the refusals are
    // attributed on the worker each landed on, and two workers' records in
    // the same millisecond have no order ("newest first" is by time).
    let two = vec![("close_4010".to_string(), 1), ("close_4013".to_string(), 1)];
    let seen = wait_until(Duration::from_secs(10), || counts(&me) == two);
    assert!(seen.is_some(), "{:?}", counts(&me));
    std::thread::sleep(Duration::from_millis(5));
    // A Resume of a session that does not exist, with the application's token.
    let resume = |token: &str| json!({"op": 6, "d": {"token": token, "session_id": "0000000000aaaaaaaaaaaaaaaaaaaaaa", "seq": 3}});
    match send(resume(&token)) {
        Next::Json(v) => assert_eq!(v["op"], 9, "{v}"),
        other => panic!("no op 9: {other:?}"),
    }
    match send(resume(&format!("Bot {}", other.token))) {
        Next::Json(v) => assert_eq!(v["op"], 9, "{v}"),
        other => panic!("no op 9: {other:?}"),
    }
    let want = vec![
        ("close_4010".to_string(), 1),
        ("close_4013".to_string(), 1),
        ("op9_resume".to_string(), 1),
    ];
    // Attributed through the registry sidecar: within a poll or two.
    let seen = wait_until(Duration::from_secs(10), || counts(&me) == want);
    assert!(seen.is_some(), "{:?}", counts(&me));
    let h = me.health();
    let recent = h["start_refusals"]["recent"].as_array().unwrap().clone();
    assert_eq!(recent.len(), 3, "{recent:?}");
    assert_eq!(recent[0]["why"], "op9_resume");
    assert_eq!(recent[0]["resume_refusal"], "unknown_session");
    assert_eq!(recent[0]["detail"], "unknown session");
    let advice = h["start_refusals"]["counts"].to_string();
    assert!(
        advice.contains("[shard_id, num_shards]") && advice.contains("120 s window"),
        "{advice}"
    );
    // The other application's Resume may be attributed a poll later than
    // ours (another worker, another round trip to the sidecar).
    let theirs = vec![("op9_resume".to_string(), 1)];
    let seen = wait_until(Duration::from_secs(10), || counts(&them) == theirs);
    assert!(seen.is_some(), "{:?}", counts(&them));
    assert_eq!(
        metric_sum(
            &metrics(node.admin),
            "gatewayd_start_refusals_unattributed_total",
            &[]
        ),
        0.0
    );
}

/// The endpoint check never says what a name resolved to: "localhost"
/// (and any name an egress's resolver knows) is refused as a private
/// address without its address, so the portal is no oracle for the names
/// of the egress's network (issue 41: it answered "localhost is
/// 127.0.0.1").
#[test]
fn the_endpoint_check_refuses_a_private_name_without_its_address() {
    let node = Node::start(&["--no-demo-traffic"]);
    let addr = portal::addr(&node);
    let app = Registry::new(node.dir.path()).add_app("names-bot", 0);
    let me = sign_in(addr, &app.token).unwrap();
    for url in [
        "http://localhost:9/interactions",
        "http://vm/interactions",
        "http://10.1.2.3/interactions",
    ] {
        for path in ["/api/verify-endpoint", "/api/endpoint"] {
            let v = me.post(path, &format!("url={}", enc(url))).json();
            assert_eq!(v["ok"], false, "{url} {path}: {v}");
            let why = v["result"].as_str().unwrap();
            assert!(
                why.contains("refused: private address"),
                "{url} {path}: {v}"
            );
            for leak in ["127.0.0.1", "10.1.2.3 is", "(in ", "/8"] {
                assert!(!why.contains(leak), "{url} {path}: {leak:?} in {v}");
            }
        }
    }
}
