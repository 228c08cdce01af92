//! The developer portal in a real browser (issue 16): Debian's chromium
//! driven by chromedriver over W3C WebDriver (tests/support/webdriver.rs)
//! against a real node. Sign in with the demo token, watch the live
//! session count move when a bot connects, send a test event and see the
//! bot get it, click a command and see the response, see a slow consumer
//! as degraded, sign out; a second application sees none of it; a server
//! named `<script>` is text. Screenshots of the main views go to
//! docs/portal/ when GATEWAYD_PORTAL_SCREENSHOTS is set.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::bot;
use support::node::Node;
use support::registry::Registry;
use support::webdriver::Browser;
use support::BOT_INTENTS;

const WAIT: Duration = Duration::from_secs(15);

fn shot(b: &Browser, name: &str) {
    if std::env::var_os("GATEWAYD_PORTAL_SCREENSHOTS").is_some() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/portal");
        std::fs::create_dir_all(&dir).unwrap();
        b.screenshot(&dir.join(name));
    }
}

/// axe-core's accessibility rules on the page as it is now: the
/// violations, as (rule, impact, nodes, the first node's selector).
fn axe_violations(b: &Browser) -> Vec<Value> {
    let axe = support::js::axe_core_js();
    b.run(&format!("{axe}\n;return 1;"));
    let v = b.run(
        "return axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => \
         [v.id, v.impact, v.nodes.length, v.nodes[0].target.join(' '), v.help]));",
    );
    v.as_array()
        .unwrap_or_else(|| panic!("axe-core did not run: {v}"))
        .clone()
}

fn sign_in(b: &Browser, base: &str, token: &str) {
    b.goto(&format!("{base}/"));
    b.type_into("#token", token);
    b.click("#signin-button");
    b.wait_for("#signout", WAIT);
}

#[test]
#[ignore = "needs chromium and chromedriver (Debian's chromium, chromium-driver): run scripts/test-all.sh, or install them"]
fn the_portal_in_a_browser() {
    let node = Node::start(&["--no-demo-traffic", "--max-unsent", "300"]);
    let base = format!("http://{}", support::portal::addr(&node));
    let reg = Registry::new(node.dir.path());
    let other = reg.add_app("other-bot", 0);
    let (evil, _) = reg.add_server("<script>document.title='owned'</script>");
    reg.install(other.id, evil, None);
    let b = Browser::start();

    // A wrong token: refused, with the reason, on the sign-in page.
    b.goto(&format!("{base}/"));
    shot(&b, "signin.png");
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on the sign-in page: {v:#?}");
    // The check itself: an image without a text alternative is found.
    b.run("const i = document.createElement('img'); i.id = 'axe-probe'; i.src = '/favicon.ico'; document.body.appendChild(i); return 1;");
    let v = axe_violations(&b);
    assert!(
        v.iter().any(|x| x[0] == "image-alt"),
        "axe-core missed an image without alt: {v:?}"
    );
    b.run("document.getElementById('axe-probe').remove(); return 1;");
    b.type_into("#token", "not-a-token");
    b.click("#signin-button");
    let e = b.text("#signin-error");
    assert!(e.contains("not valid"), "{e:?}");

    sign_in(&b, &base, &node.token);
    b.wait_text("#live", WAIT, |t| t == "0")
        .expect("live 0 before the bot");
    // "Why won't my bot start?": a 4014 at Identify shows on the next poll,
    // with what to do and which privileged intent it asked for.
    let refused = bot::identify(
        node.gateway,
        "greedy",
        &node.token,
        BOT_INTENTS | support::intent::GUILD_PRESENCES,
        None,
    )
    .err();
    assert!(
        refused.as_deref().is_some_and(|e| e.contains("4014")),
        "{refused:?}"
    );
    b.wait_text("#start-refusals", WAIT, |t| {
        t.contains("4014") && t.contains("set-intents")
    })
    .expect("the refused start, with its advice");
    let recent = b.text("#start-recent");
    assert!(
        recent.contains("s ago") && recent.contains("GUILD_PRESENCES"),
        "{recent}"
    );
    let mut bot = bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None).unwrap();
    b.wait_text("#live", WAIT, |t| t == "1")
        .expect("the live count follows the bot");
    let app = bot.app_id();
    let put = support::http::json_request(
        node.gateway,
        "PUT",
        &format!("/api/v10/applications/{app}/commands"),
        Some(&format!("Bot {}", node.token)),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(put.status, 200);
    b.goto(&format!("{base}/")); // the command list is drawn with the page
    let cmds = b.text("#commands");
    assert!(cmds.contains("/ping") && cmds.contains("global"), "{cmds}");
    assert!(b
        .text("#commands-hint")
        .contains(&format!("/api/v10/applications/{app}/commands")));
    // The install link: the default three permissions, then ADD_REACTIONS (bit 6).
    use proto::permissions::{ADD_REACTIONS, READ_MESSAGE_HISTORY, SEND_MESSAGES, VIEW_CHANNEL};
    let want = VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY;
    assert!(b
        .text("#install-link")
        .ends_with(&format!("permissions={want}")));
    b.click("#install-perms input[value='6']");
    let link = b.text("#install-link");
    assert_eq!(
        link,
        format!(
            "/oauth2/authorize?client_id={app}&scope=bot%20applications.commands&permissions={}",
            want | ADD_REACTIONS
        )
    );
    assert!(b
        .text("#install-cli")
        .ends_with(&format!("--permissions {}", want + 64)));

    // A test event, seen by the bot.
    b.click("#test-message button");
    let sent = b
        .wait_text("#test-message-result", WAIT, |t| t.starts_with("sent"))
        .unwrap();
    let id = sent.rsplit(' ').next().unwrap().to_string();
    let got = (0..30)
        .map(|_| bot.next_dispatch(Duration::from_secs(10)))
        .find(|v| v["t"] == "MESSAGE_CREATE" && v["d"]["id"] == id.as_str());
    assert!(got.is_some(), "the bot got the test message {id}");

    // A click; the bot answers; the page shows what the person sees.
    b.click("#click button");
    let ix = (0..50)
        .map(|_| bot.next_dispatch(Duration::from_secs(10)))
        .find(|v| v["t"] == "INTERACTION_CREATE")
        .expect("the interaction")["d"]
        .clone();
    let cb = support::http::request_with_body(
        node.gateway,
        "POST",
        &format!(
            "/api/v10/interactions/{}/{}/callback",
            ix["id"].as_str().unwrap(),
            ix["token"].as_str().unwrap()
        ),
        &[("Content-Type", "application/json")],
        Some(br#"{"type": 4, "data": {"content": "pong from the bot"}}"#),
    )
    .unwrap();
    assert_eq!(cb.status, 204);
    b.wait_text("#click-result", WAIT, |t| t.contains("pong from the bot"))
        .expect("the person's view of the response");
    b.wait_text("#ack-rate", WAIT, |t| t == "100.0 %")
        .expect("ack rate");
    shot(&b, "health.png");

    // A slow consumer: the bot stops reading; the page says degraded.
    let (server, channel) = bot::server_and_general(&bot.guild_creates[0]);
    let mut p = support::events::Producer::connect(node.ingest);
    let pad = "x".repeat(16 << 10);
    let mut seen = false;
    for n in 0..600u64 {
        let mut ev = support::events::message_event(
            1_700_000_000_000_000_000 + n,
            server,
            channel,
            "big",
            &[],
        );
        ev.d["x_pad"] = json!(pad);
        p.send(&ev);
        if n >= 200 && n % 5 == 0 {
            std::thread::sleep(Duration::from_millis(400));
            if b.text("#degraded").parse::<u64>().unwrap_or(0) > 0 {
                seen = true;
                break;
            }
        }
    }
    assert!(seen, "the slow consumer shown as degraded");
    assert!(b.text("#degraded-note").contains("80 %"));
    b.run("document.getElementById('h-sessions').scrollIntoView(); return 1;");
    shot(&b, "degraded.png");
    b.run("document.getElementById('h-tools').scrollIntoView(); return 1;");
    shot(&b, "tools.png");
    drop(bot);

    // The tables, filled (closes, REST, refused starts, workers): on a
    // desktop a short value sits on one line; on a 375 px phone each row is
    // a stack of "column: value" lines, no cell narrower than its column's
    // name (they broke letter by letter: "C/o/d/e").
    let cells = "return [...document.querySelectorAll('main table td')]\
        .filter(c => c.offsetParent !== null && c.textContent.trim())\
        .map(c => { const r = document.createRange(); r.selectNodeContents(c);\
                    const lh = parseFloat(getComputedStyle(c).lineHeight);\
                    return [c.textContent, c.getBoundingClientRect().width,\
                            Math.round(r.getBoundingClientRect().height / lh),\
                            c.colSpan > 1 ? '(the whole row)' : (c.dataset.label || ''), c.closest('table').getBoundingClientRect().width]; });";
    type Cell = (String, f64, f64, String, f64);
    let desktop: Vec<Cell> = serde_json::from_value(b.run(cells)).unwrap();
    assert!(desktop.len() >= 10, "{desktop:?}");
    for (text, _, lines, _, _) in &desktop {
        if text.len() <= 5 {
            assert_eq!(*lines, 1.0, "{text:?} wraps at 1280 px");
        }
    }
    b.set_window(375, 2400);
    std::thread::sleep(Duration::from_millis(300));
    let phone: Vec<Cell> = serde_json::from_value(b.run(cells)).unwrap();
    assert!(phone.len() >= 10, "{phone:?}");
    let no_overflow =
        b.run("return document.documentElement.scrollWidth <= window.innerWidth + 1;");
    assert_eq!(
        no_overflow,
        json!(true),
        "the page scrolls sideways at 375 px"
    );
    for (text, w, _, label, table) in &phone {
        assert!(
            !label.is_empty(),
            "a cell without its column's name: {text:?}"
        );
        assert!(
            *w >= table * 0.9,
            "{label}: {text:?} is {w} px of a {table} px table at 375 px"
        );
    }
    shot(&b, "phone.png");
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on the page at 375 px: {v:#?}");
    b.set_window(1280, 2400);
    std::thread::sleep(Duration::from_millis(300));
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on the page at 1280 px: {v:#?}");

    // Sign out: back to the sign-in form; the old page's data is gone.
    b.click("#signout");
    b.wait_for("#signin-button", WAIT);

    // The other application: its own figures, and the script-named server as text.
    sign_in(&b, &base, &other.token);
    assert_eq!(b.text("#app-id"), other.id.to_string());
    b.wait_text("#live", WAIT, |t| t == "0")
        .expect("none of the demo's sessions");
    assert_eq!(b.text("#opened"), "0");
    let cell = b.text("#installs .server-name");
    assert!(
        cell.contains("<script>document.title='owned'</script>"),
        "{cell}"
    );
    assert_ne!(b.run("return document.title;"), json!("owned"));
    b.run("document.getElementById('h-inst').scrollIntoView(); return 1;");
    shot(&b, "installations.png");
}

/// Two nodes on one PostgreSQL registry, a bot on each: node A's page
/// shows both in its table of sessions by node and shard, and names node
/// B once it is frozen (docs/portal.md, "Several nodes").
#[test]
#[ignore = "needs chromium, chromedriver and PostgreSQL: run scripts/test-all.sh, or install them and set GATEWAYD_TEST_DATABASE_URL"]
fn the_cluster_view_in_a_browser() {
    let (admin_url, url) = support::registry::pg_database();
    let flags = ["--registry-url", url.as_str(), "--no-demo-traffic"];
    let a = Node::start(&flags);
    let mut b_node = Node::start(&flags);
    let _on_a = bot::identify(a.gateway, "a", &a.token, BOT_INTENTS, Some((0, 2))).unwrap();
    let _on_b = bot::identify(b_node.gateway, "b", &a.token, BOT_INTENTS, Some((1, 2))).unwrap();
    let base = format!("http://{}", support::portal::addr(&a));
    let b = Browser::start();
    sign_in(&b, &base, &a.token);
    b.wait_text("#c-live", WAIT, |t| t == "2")
        .expect("both nodes' sessions in the totals");
    let rows = b.run(
        "return [...document.querySelectorAll('#by-node-shard tr')].map(r => \
         [...r.cells].map(c => c.textContent).join(' '));",
    );
    let rows: Vec<String> = serde_json::from_value(rows).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    // Node, shard, live, degraded: no link address (the operator's, not the author's).
    assert!(
        rows.iter()
            .all(|r| r.split(' ').count() == 5 && !r.contains("127.0.0.1")),
        "{rows:?}"
    );
    assert!(
        rows[0].ends_with("[0, 2] 1 0") && rows[1].ends_with("[1, 2] 1 0"),
        "{rows:?}"
    );
    assert_eq!(b.text("#c-nodes"), "2 of 2");
    b.run("document.getElementById('h-cluster').scrollIntoView(); return 1;");
    shot(&b, "cluster.png");
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on the cluster view: {v:#?}");
    // SAFETY: kill(2) of our own child, continued below.
    unsafe { libc::kill(b_node.child.id() as i32, libc::SIGSTOP) };
    let note = b.wait_text("#cluster-silent", WAIT, |t| t.contains("no answer in time"));
    // SAFETY: as above.
    unsafe { libc::kill(b_node.child.id() as i32, libc::SIGCONT) };
    assert!(note.is_ok(), "the frozen node is named: {note:?}");
    assert_eq!(b.text("#c-live"), "1");
    let _ = b_node.child.kill();
    let _ = b_node.child.wait();
    drop(a);
    if let Ok(mut c) = postgres::Client::connect(&admin_url, postgres::NoTls) {
        let db = url.rsplit('/').next().unwrap_or_default();
        let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    }
}

/// Identify limits on: a second Identify in one concurrency bucket shows on
/// the page with the bucket arithmetic; then the interactions endpoint is
/// verified and saved from the Settings form (a PyNaCl endpoint holding the
/// key the page shows), and one that does not answer is refused in words.
#[test]
#[ignore = "needs chromium, chromedriver and PyNaCl: run scripts/test-all.sh, or install them and set GATEWAYD_PYTHON"]
fn a_concurrency_refusal_and_the_endpoint_settings_in_a_browser() {
    let node = Node::start(&[
        "--no-demo-traffic",
        "--identify-limits",
        "on",
        "--egress-allow-private-cidrs",
        "127.0.0.0/8",
    ]);
    let base = format!("http://{}", support::portal::addr(&node));
    let b = Browser::start();
    sign_in(&b, &base, &node.token);
    let (first, _) = bot::concurrency_refusal(node.gateway, &node.token);
    b.wait_text("#start-refusals", WAIT, |t| {
        t.contains("concurrency bucket") && t.contains("max_concurrency is 1")
    })
    .expect("the op 9, with the bucket arithmetic");
    assert!(b.text("#start-recent").contains("op9 concurrency"));

    let key = b.text("#verify-key");
    assert_eq!(key.len(), 64, "{key}");
    let ep = support::python::NaclEndpoint::start(&key, "pong");
    b.type_into("#ep-url", &ep.url);
    b.click("#endpoint button");
    let r = b
        .wait_text("#endpoint-result", WAIT, |t| {
            t.starts_with("OK") || t.starts_with("FAILED")
        })
        .unwrap();
    assert!(r.starts_with("OK: verified and saved"), "{r}");
    assert_eq!(b.text("#endpoint-url"), ep.url);
    // Each refusal in words, and the saved URL stays: one that does not
    // answer, one that accepts a bad signature, a private address.
    let try_url = |url: &str| -> String {
        b.run("document.getElementById('ep-url').value = ''; document.getElementById('endpoint-result').textContent = ''; return 1;");
        b.type_into("#ep-url", url);
        b.click("#endpoint button");
        b.wait_text("#endpoint-result", WAIT, |t| t.starts_with("FAILED"))
            .unwrap_or_else(|t| panic!("{url}: {t}"))
    };
    let dead = format!("http://127.0.0.1:{}/i", support::node::free_port());
    let r = try_url(&dead);
    assert!(r.contains("not saved") && !r.contains("os error"), "{r}");
    let r = try_url(&support::portal::lax_endpoint());
    assert!(r.contains("not saved") && r.contains("expected 401"), "{r}");
    let r = try_url("http://10.1.2.3/interactions");
    assert!(r.contains("private"), "{r}");
    assert_eq!(b.text("#endpoint-url"), ep.url, "the saved URL stays");
    drop(first);
}

/// Sessions one by one: 1,100 sessions of one bot, paged 50 at a time
/// from the first to the last and back, each exactly once and in session
/// id order; the timeline of the last 100 lifecycle events with a close
/// and its code; the table's cells at 375 px; axe-core; and what the page
/// weighs and when it is interactive with the table full (printed for
/// docs/portal.md).
#[test]
#[ignore = "needs chromium and chromedriver (Debian's chromium, chromium-driver): run scripts/test-all.sh, or install them"]
fn the_session_table_pages_over_a_thousand_sessions_in_a_browser() {
    const N: usize = 1100;
    let node = Node::start(&[
        "--no-demo-traffic",
        "--identify-limits",
        "off",
        "--admission-per-second",
        "0",
        // The walk below outlasts the default 41 s without a heartbeat.
        "--heartbeat-interval-ms",
        "600000",
    ]);
    let base = format!("http://{}", support::portal::addr(&node));
    let guilds = support::intent::GUILDS;
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let (gateway, token) = (node.gateway, node.token.clone());
            std::thread::spawn(move || {
                (0..N / 8 + usize::from(t < N % 8))
                    .map(|i| {
                        bot::identify(gateway, &format!("s{t}-{i}"), &token, guilds, None)
                            .unwrap_or_else(|e| panic!("session {t}-{i}: {e}"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut bots: Vec<bot::Session> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(bots.len(), N);
    let mut ids: Vec<String> = bots.iter().map(|s| s.session_id.clone()).collect();
    ids.sort();

    let b = Browser::start();
    sign_in(&b, &base, &node.token);
    let total = format!("of {N}");
    b.wait_text("#sessions-range", WAIT, |t| {
        t == format!("1\u{2013}50 {total}")
    })
    .expect("the first page of all the sessions");
    let page_ids = "return [...document.querySelectorAll('#session-list tr')]\
        .map(tr => tr.cells[0].textContent);";
    let mut seen: Vec<String> = Vec::new();
    for page in 0..N.div_ceil(50) {
        let from = page * 50 + 1;
        let to = (from + 49).min(N);
        b.wait_text("#sessions-range", WAIT, |t| {
            t == format!("{from}\u{2013}{to} {total}")
        })
        .unwrap_or_else(|t| panic!("page {page}: {t}"));
        let ids: Vec<String> = serde_json::from_value(b.run(page_ids)).unwrap();
        assert_eq!(ids.len(), to - from + 1, "page {page}");
        seen.extend(ids);
        if to < N {
            b.click("#sessions-next");
        }
    }
    assert_eq!(seen, ids, "every session once, in session id order");
    assert_eq!(
        b.run("return document.getElementById('sessions-next').disabled;"),
        json!(true),
        "no page after the last"
    );
    b.click("#sessions-prev");
    b.wait_text("#sessions-range", WAIT, |t| {
        t == format!("1001\u{2013}1050 {total}")
    })
    .expect("Previous returns to the page before the last");
    let back: Vec<String> = serde_json::from_value(b.run(page_ids)).unwrap();
    assert_eq!(back, ids[1000..1050], "the same rows as on the way there");
    let row = b.run(
        "return [...document.querySelector('#session-list tr').cells].map(c => c.textContent);",
    );
    let row: Vec<String> = serde_json::from_value(row).unwrap();
    // Session, node, worker, shard, since, heartbeat, queue, compression, resumes.
    assert_eq!(row[0].len(), 32, "{row:?}");
    assert_eq!(row[3], "0 / 1", "{row:?}");
    assert!(
        row[5].ends_with("s ago") || row[5].ends_with("min ago"),
        "{row:?}"
    );
    assert!(
        row[6].ends_with(" %") && row[7] == "none" && row[8] == "0",
        "{row:?}"
    );

    // A close with its code reaches the timeline (the newest first).
    let mut bad = bots.pop().unwrap();
    bad.ws
        .send(tungstenite::Message::Text("not json".into()))
        .unwrap();
    let sid = bad.session_id.clone();
    b.wait_text("#timeline", WAIT, |t| {
        t.contains("4002") && t.contains(&sid)
    })
    .expect("the 4002 close in the timeline");
    let events = b.run("return document.querySelectorAll('#timeline tr').length;");
    assert_eq!(events, json!(100), "the last 100 events");
    assert!(b.text("#timeline").contains("identify"));

    // Page weight and time to interactive with the table full, from the
    // browser's own timings (a fresh load).
    b.goto(&format!("{base}/"));
    b.wait_text("#sessions-range", WAIT, |t| t.ends_with(&total))
        .unwrap();
    let cost = b.run(
        "const n = performance.getEntriesByType('navigation')[0];\
         const rs = performance.getEntriesByType('resource');\
         const api = rs.filter(r => r.name.includes('/api/sessions'));\
         const st = rs.filter(r => r.name.includes('/static/'));\
         return {document: n.transferSize, interactive_ms: n.domInteractive, \
                 dom_content_loaded_ms: n.domContentLoadedEventEnd, \
                 static_gzip: st.reduce((s, r) => s + r.encodedBodySize, 0), \
                 static_transferred: st.reduce((s, r) => s + r.transferSize, 0), \
                 sessions_api: api.length ? api[0].transferSize : -1, \
                 table_data_at_ms: api.length ? api[0].responseEnd : -1};",
    );
    println!("page weight and time to interactive, {N} sessions: {cost}");
    let bytes = |k: &str| cost[k].as_f64().unwrap_or(-1.0);
    assert!(
        bytes("document") > 0.0 && bytes("sessions_api") > 0.0,
        "{cost}"
    );
    assert!(bytes("static_gzip") > 0.0, "{cost}");
    // A page of 50 rows, not the whole table: the weight does not grow with it.
    assert!(
        bytes("document") + bytes("static_gzip") + bytes("sessions_api") < 150_000.0,
        "the page weighs {cost}"
    );
    shot(&b, "sessions.png");
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core with the session table: {v:#?}");
    b.set_window(375, 2400);
    std::thread::sleep(Duration::from_millis(300));
    let narrow = b.run(
        "return [...document.querySelectorAll('#session-list td, #timeline td')]\
         .filter(c => c.textContent.trim())\
         .filter(c => c.getBoundingClientRect().width < c.closest('table').getBoundingClientRect().width * 0.9)\
         .map(c => c.dataset.label + ': ' + c.textContent);",
    );
    assert_eq!(narrow, json!([]), "cells narrower than their row at 375 px");
    assert_eq!(
        b.run("return document.documentElement.scrollWidth <= window.innerWidth + 1;"),
        json!(true),
        "the page scrolls sideways at 375 px"
    );
    b.run("document.getElementById('session-list-section').scrollIntoView(); return 1;");
    shot(&b, "sessions-phone.png");
    drop(bots);
}

/// A developer signs in with a name and password in the browser and sees
/// exactly their own applications; opening another one of theirs works,
/// another developer's is refused; axe-core on the sign-in page with both
/// forms and on the developer's list.
#[test]
#[ignore = "needs chromium and chromedriver (Debian's chromium, chromium-driver): run scripts/test-all.sh, or install them"]
fn a_developer_signs_in_and_sees_exactly_their_applications_in_a_browser() {
    let node = Node::start(&["--no-demo-traffic"]);
    let base = format!("http://{}", support::portal::addr(&node));
    let reg = Registry::new(node.dir.path());
    let alpha = reg.add_app("alpha-bot", 0);
    let beta = reg.add_app("beta-bot", 0);
    let gamma = reg.add_app("gamma-bot", 0);
    reg.add_developer("ada", "correct horse battery");
    reg.add_developer("bob", "staple staple staple");
    reg.own("ada", alpha.id);
    reg.own("ada", gamma.id);
    reg.own("bob", beta.id);
    let b = Browser::start();
    b.goto(&format!("{base}/"));
    let v = axe_violations(&b);
    assert!(
        v.is_empty(),
        "axe-core on the sign-in page with both forms: {v:#?}"
    );
    let dev_sign_in = |name: &str, pw: &str| {
        b.goto(&format!("{base}/"));
        b.type_into("#dev-name", name);
        b.type_into("#dev-password", pw);
        b.click("#dev-signin-button");
    };
    dev_sign_in("ada", "not her password");
    let e = b.text("#signin-error");
    assert!(e.contains("do not match"), "{e:?}");
    dev_sign_in("ada", "correct horse battery");
    b.wait_for("#signout", WAIT);
    let listed = || -> Vec<String> {
        serde_json::from_value(b.run(
            "return [...document.querySelectorAll('#app-list button')].map(x => x.textContent);",
        ))
        .unwrap()
    };
    assert_eq!(listed(), ["alpha-bot", "gamma-bot"], "exactly ada's");
    assert_eq!(b.text("#developer-name"), "ada");
    assert_eq!(b.text("h1"), "alpha-bot", "the first one is open");
    b.click(&format!("#app-list button[data-app='{}']", gamma.id));
    b.wait_text("h1", WAIT, |t| t == "gamma-bot")
        .expect("gamma opens");
    b.wait_text("#live", WAIT, |t| t == "0")
        .expect("its figures poll");
    b.run("document.getElementById('apps').scrollIntoView(); return 1;");
    shot(&b, "developer.png");
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on a developer's page: {v:#?}");
    // A forged switch to bob's application, with a valid CSRF token: 403.
    let status = b.run(&format!(
        "const csrf = document.querySelector('meta[name=csrf]').content;\
         return fetch('/switch', {{method: 'POST', credentials: 'same-origin', redirect: 'manual',\
           body: new URLSearchParams({{csrf: csrf, app: '{}'}})}}).then(r => r.status);",
        beta.id
    ));
    assert_eq!(status, json!(403));
    b.goto(&format!("{base}/"));
    assert_eq!(b.text("h1"), "gamma-bot", "still ada's own");
    assert!(!b
        .run("return document.body.textContent;")
        .to_string()
        .contains("beta-bot"));
    b.click("#signout");
    // The sign-out must be done before the next sign-in loads the page.
    b.wait_for("#signin-button", WAIT);
    dev_sign_in("bob", "staple staple staple");
    b.wait_for("#signout", WAIT);
    assert_eq!(listed(), ["beta-bot"], "exactly bob's");
    assert_eq!(b.text("h1"), "beta-bot");
    // Disowned: the list says how to get one; axe-core on it, and the
    // developer's views at 375 px.
    reg.disown("bob", beta.id);
    b.goto(&format!("{base}/"));
    b.wait_for("#no-apps", WAIT);
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on an empty list: {v:#?}");
    b.set_window(375, 900);
    std::thread::sleep(Duration::from_millis(300));
    shot(&b, "developer-empty-phone.png");
    b.click("#signout");
    b.wait_for("#signin-button", WAIT);
    shot(&b, "signin-phone.png");
    let v = axe_violations(&b);
    assert!(
        v.is_empty(),
        "axe-core on the sign-in page at 375 px: {v:#?}"
    );
    dev_sign_in("ada", "correct horse battery");
    b.wait_for("#signout", WAIT);
    assert_eq!(
        b.run("return document.documentElement.scrollWidth <= window.innerWidth + 1;"),
        json!(true),
        "a developer's page scrolls sideways at 375 px"
    );
    shot(&b, "developer-phone.png");
}

/// The intents flow in a browser: the author asks for GUILD_PRESENCES in
/// Settings, the operator (the admin token, behind "Operator" on the
/// sign-in page) sees it pending and approves it, and the author's page
/// then shows it approved; axe-core on the operator's page.
#[test]
#[ignore = "needs chromium and chromedriver (Debian's chromium, chromium-driver): run scripts/test-all.sh, or install them"]
fn an_intents_request_and_the_operators_approval_in_a_browser() {
    const ADMIN: &str = "op-token-0123456789";
    let node = Node::start(&["--no-demo-traffic", "--admin-token", ADMIN]);
    let base = format!("http://{}", support::portal::addr(&node));
    let b = Browser::start();
    sign_in(&b, &base, &node.token);
    let app = b.text("#app-id");
    assert_eq!(b.text("#intents-pending"), "none");
    b.run("document.querySelector('#intents input[name=GUILD_PRESENCES]').click(); return 1;");
    b.click("#intents button");
    b.wait_text("#intents-result", WAIT, |t| t.contains("pending"))
        .expect("the request's outcome");
    assert_eq!(b.text("#intents-pending"), "GUILD_PRESENCES");
    b.click("#signout");
    b.wait_for("#signin-button", WAIT);
    b.click("details summary");
    b.type_into("#admin-token", ADMIN);
    b.click("#op-signin-button");
    b.wait_for("#signout", WAIT);
    let row = b.text("#requests");
    assert!(
        row.contains("demo-bot") && row.contains("GUILD_PRESENCES"),
        "{row}"
    );
    shot(&b, "operator.png");
    let v = axe_violations(&b);
    assert!(v.is_empty(), "axe-core on the operator's page: {v:#?}");
    b.set_window(375, 900);
    std::thread::sleep(Duration::from_millis(300));
    let narrow = b.run(
        "return [...document.querySelectorAll('#requests td')]\
         .filter(c => c.getBoundingClientRect().width < c.closest('table').getBoundingClientRect().width * 0.9)\
         .map(c => c.dataset.label + ': ' + c.textContent);",
    );
    assert_eq!(narrow, json!([]), "cells narrower than their row at 375 px");
    shot(&b, "operator-phone.png");
    let v = axe_violations(&b);
    assert!(
        v.is_empty(),
        "axe-core on the operator's page at 375 px: {v:#?}"
    );
    b.set_window(1280, 2400);
    std::thread::sleep(Duration::from_millis(300));
    b.click(&format!("#approve-{app}"));
    b.wait_for("#no-requests", WAIT);
    b.click("#signout");
    // The sign-out must be done before the next sign-in loads the page.
    b.wait_for("#signin-button", WAIT);
    sign_in(&b, &base, &node.token);
    assert!(b.text("#intents-approved").contains("GUILD_PRESENCES"));
    assert_eq!(b.text("#intents-pending"), "none");
}
