//! Application commands through the REST edge, against a real node: the
//! registration routes (global and server-scoped), the platform's
//! validation with its `errors` tree, the limits (100 of a kind, 200
//! creates a day), another application's commands refused, and an
//! unmodified twilight-http client registering and reading them.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use support::registry::Registry;
use support::rest::{assert_error, Fixture, SIX};

/// The bot's node, its bucket limits raised (the tests register in bursts).
fn fixture() -> (Fixture, u64) {
    let f = Fixture::start(&["--rest-limit-scale", "100"], support::BOT_INTENTS);
    let me = f.call("GET", "/applications/@me", None);
    assert_eq!(me.status, 200, "{}", me.body);
    let app = me.json()["id"].as_str().unwrap().parse().unwrap();
    (f, app)
}

fn chat(name: &str) -> Value {
    json!({"name": name, "description": format!("{name} things"), "type": 1})
}

/// The `errors` tree's path to its first `_errors`, and that code.
fn error_path(v: &Value) -> (String, String) {
    assert_eq!(v["code"], 50035, "{v}");
    let mut path = Vec::new();
    let mut at = &v["errors"];
    while at.get("_errors").is_none() {
        let (k, next) = at
            .as_object()
            .and_then(|m| m.iter().next())
            .expect("a tree");
        path.push(k.clone());
        at = next;
    }
    (
        path.join("."),
        at["_errors"][0]["code"].as_str().unwrap().into(),
    )
}

fn assert_command(c: &Value, app: u64) {
    for k in ["id", "application_id", "version"] {
        let s = c[k].as_str().unwrap_or_else(|| panic!("{k} a string: {c}"));
        assert!((17..=20).contains(&s.len()), "{k} a snowflake: {c}");
    }
    assert_eq!(c["application_id"], app.to_string(), "{c}");
    assert!(c["name"].is_string() && c["description"].is_string() && c["type"].is_u64());
}

#[test]
fn bulk_overwrite_read_back_edit_and_delete() {
    let (f, app) = fixture();
    let base = format!("/applications/{app}/commands");
    let r = f.call("GET", &base, None);
    assert_eq!((r.status, r.json()), (200, json!([])));
    for h in SIX {
        assert!(r.header(h).is_some(), "{h} on a command route: {}", r.head);
    }

    let echo = json!({"name": "echo", "description": "says it back", "options": [
        {"type": 3, "name": "text", "description": "what", "required": true, "max_length": 200},
        {"type": 5, "name": "loud", "description": "shout it"}
    ], "default_member_permissions": "8", "dm_permission": false, "unknown": 1});
    let menu = json!({"name": "Show Profile", "type": 2});
    let put = f.call("PUT", &base, Some(json!([chat("ping"), echo, menu])));
    assert_eq!(put.status, 200, "{}", put.body);
    put.assert_json_type("PUT commands");
    let list = put.json();
    assert_eq!(list.as_array().unwrap().len(), 3);
    for c in list.as_array().unwrap() {
        assert_command(c, app);
        assert!(
            c.get("guild_id").is_none(),
            "a global command has no guild_id: {c}"
        );
    }
    assert!(list[0].get("options").is_none(), "no options: left out");
    assert_eq!(list[1]["options"][0]["required"], true);
    assert_eq!(list[1]["options"][0]["max_length"], 200);
    assert!(list[1]["options"][1].get("required").is_none());
    assert_eq!(list[1]["default_member_permissions"], "8");
    assert!(list[0]["default_member_permissions"].is_null());
    assert_eq!(
        (list[2]["type"].as_u64(), list[2]["description"].as_str()),
        (Some(2), Some(""))
    );
    let mut got = f
        .call("GET", &base, None)
        .json()
        .as_array()
        .unwrap()
        .clone();
    got.sort_by_key(|c| c["id"].as_str().unwrap().to_string());
    let mut want = list.as_array().unwrap().clone();
    want.sort_by_key(|c| c["id"].as_str().unwrap().to_string());
    assert_eq!(got, want, "GET answers what PUT stored");

    // A second overwrite keeps ids by (name, type) and drops the missing.
    let ping_id = list[0]["id"].as_str().unwrap().to_string();
    let again = f.call("PUT", &base, Some(json!([chat("stats"), chat("ping")])));
    assert_eq!(again.status, 200, "{}", again.body);
    let again = again.json();
    assert_eq!(again[1]["id"], ping_id.as_str());
    assert_eq!(
        again[1]["version"], list[0]["version"],
        "unchanged: same version"
    );
    assert_eq!(
        f.call("GET", &base, None).json().as_array().unwrap().len(),
        2
    );
    let gone = list[1]["id"].as_str().unwrap();
    let r = f.call("GET", &format!("{base}/{gone}"), None);
    assert_error(&r, 404, 10063, "a dropped command");

    // One command: GET, PATCH (a new version), POST upserts, DELETE.
    let one = f.call("GET", &format!("{base}/{ping_id}"), None);
    assert_eq!(
        (one.status, one.json()["name"].clone()),
        (200, json!("ping"))
    );
    let edited = f.call(
        "PATCH",
        &format!("{base}/{ping_id}"),
        Some(json!({"description": "pong!", "nsfw": true})),
    );
    assert_eq!(edited.status, 200, "{}", edited.body);
    let edited = edited.json();
    assert_eq!(
        (edited["description"].clone(), edited["nsfw"].clone()),
        (json!("pong!"), json!(true))
    );
    assert_ne!(edited["version"], again[1]["version"]);
    let bad = f.call(
        "PATCH",
        &format!("{base}/{ping_id}"),
        Some(json!({"name": "Ping"})),
    );
    assert_eq!(bad.status, 400);
    assert_eq!(error_path(&bad.json()).0, "name");
    let created = f.call("POST", &base, Some(chat("new")));
    assert_eq!(created.status, 201, "{}", created.body);
    assert_command(&created.json(), app);
    let upsert = f.call(
        "POST",
        &base,
        Some(json!({"name": "new", "description": "changed"})),
    );
    assert_eq!(upsert.status, 200, "an existing name and type: an update");
    assert_eq!(upsert.json()["id"], created.json()["id"]);
    let del = f.call("DELETE", &format!("{base}/{ping_id}"), None);
    assert_eq!((del.status, del.body.as_str()), (204, ""));
    assert_error(
        &f.call("DELETE", &format!("{base}/{ping_id}"), None),
        404,
        10063,
        "deleted twice",
    );
    assert_error(
        &f.call("PATCH", &format!("{base}/{ping_id}"), Some(json!({}))),
        404,
        10063,
        "edit",
    );

    // The registry CLI lists them.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["registry", "--data-dir"])
        .arg(f.node.dir.path())
        .args(["commands", "--app", &app.to_string()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("name=\"stats\" type=1 scope=global"),
        "{text}"
    );
}

#[test]
fn bodies_are_refused_field_by_field() {
    let (f, app) = fixture();
    let base = format!("/applications/{app}/commands");
    let opt = |t: u64, name: &str| json!({"type": t, "name": name, "description": "d"});
    let cases = [
        (json!({"description": "d"}), "name", "BASE_TYPE_REQUIRED"),
        (
            json!({"name": "Ping", "description": "d"}),
            "name",
            "APPLICATION_COMMAND_INVALID_NAME",
        ),
        (json!({"name": "ping"}), "description", "BASE_TYPE_REQUIRED"),
        (
            json!({"name": "ping", "description": "d", "type": 7}),
            "type",
            "BASE_TYPE_CHOICES",
        ),
        (
            json!({"name": "ping", "description": "d", "options": [opt(1, "sub"), opt(3, "text")]}),
            "options",
            "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID",
        ),
        (
            json!({"name": "ping", "description": "d", "options": [opt(3, "a"), opt(3, "a")]}),
            "options.1.name",
            "APPLICATION_COMMAND_OPTIONS_DUPLICATE_NAME",
        ),
        (
            json!({"name": "ping", "description": "d", "options": [
                {"type": 3, "name": "a", "description": "d", "autocomplete": true,
                 "choices": [{"name": "x", "value": "x"}]}]}),
            "options.0.autocomplete",
            "APPLICATION_COMMAND_AUTOCOMPLETE_AND_CHOICES",
        ),
    ];
    for (body, path, code) in cases {
        let r = f.call("POST", &base, Some(body.clone()));
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        r.assert_json_type("a 400");
        assert_eq!(
            error_path(&r.json()),
            (path.to_string(), code.to_string()),
            "{body}"
        );
    }
    // In a bulk overwrite the tree starts at the command's index.
    let r = f.call(
        "PUT",
        &base,
        Some(json!([chat("ok"), {"name": "bad name", "description": "d"}])),
    );
    assert_eq!(r.status, 400);
    assert_eq!(error_path(&r.json()).0, "1.name");
    let r = f.call("PUT", &base, Some(json!({"name": "x"})));
    assert_eq!(error_path(&r.json()).0, "_body");
    assert_eq!(
        f.call("GET", &base, None).json(),
        json!([]),
        "nothing was stored"
    );
}

#[test]
fn scopes_other_applications_and_the_limits() {
    let (f, app) = fixture();
    let reg = Registry::new(f.node.dir.path());
    let other = reg.add_app("other-bot", 0);
    let (elsewhere, _) = reg.add_server("not-installed");

    // Another application's commands: 403 50001, whatever the route.
    for (m, p) in [
        ("GET", format!("/applications/{}/commands", other.id)),
        ("PUT", format!("/applications/{}/commands", other.id)),
        (
            "GET",
            format!("/applications/{}/guilds/{}/commands", other.id, f.server),
        ),
    ] {
        let body = (m == "PUT").then(|| json!([]));
        assert_error(&f.call(m, &p, body), 403, 50001, &p);
    }
    // A server the bot is not installed in: 404 10004.
    let p = format!("/applications/{app}/guilds/{elsewhere}/commands");
    assert_error(
        &f.call("PUT", &p, Some(json!([chat("x")]))),
        404,
        10004,
        "not installed",
    );

    // Server-scoped commands carry guild_id and are apart from the global ones.
    let local = format!("/applications/{app}/guilds/{}/commands", f.server);
    let r = f.call("PUT", &local, Some(json!([chat("local")])));
    assert_eq!(r.status, 200, "{}", r.body);
    let cmd = r.json()[0].clone();
    assert_eq!(cmd["guild_id"], f.server.to_string());
    let id = cmd["id"].as_str().unwrap();
    assert_eq!(f.call("GET", &format!("{local}/{id}"), None).json(), cmd);
    let global = format!("/applications/{app}/commands");
    assert_error(
        &f.call("GET", &format!("{global}/{id}"), None),
        404,
        10063,
        "not global",
    );
    assert_eq!(f.call("GET", &global, None).json(), json!([]));

    // 100 CHAT_INPUT commands per scope: the 101st is 400 30032.
    let hundred: Vec<Value> = (0..100).map(|i| chat(&format!("c{i}"))).collect();
    let r = f.call("PUT", &global, Some(Value::Array(hundred.clone())));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_error(
        &f.call("POST", &global, Some(chat("c100"))),
        400,
        30032,
        "the 101st",
    );
    let mut over = hundred;
    over.push(chat("c100"));
    assert_error(
        &f.call("PUT", &global, Some(Value::Array(over))),
        400,
        30032,
        "101 in a PUT",
    );
    let r = f.call(
        "POST",
        &global,
        Some(json!({"name": "c5", "description": "an update"})),
    );
    assert_eq!(r.status, 200, "an update at the limit: {}", r.body);
    assert_eq!(
        f.call("POST", &global, Some(json!({"name": "Menu", "type": 3})))
            .status,
        201
    );

    // 200 creates per scope per day: 101 so far globally (100 + Menu).
    assert_eq!(f.call("PUT", &global, Some(json!([]))).status, 200);
    let more: Vec<Value> = (0..99).map(|i| chat(&format!("d{i}"))).collect();
    assert_eq!(f.call("PUT", &global, Some(Value::Array(more))).status, 200);
    let r = f.call("POST", &global, Some(chat("one-too-many")));
    assert_error(&r, 429, 30034, "the 201st create today");
    let retry: u64 = r
        .header("Retry-After")
        .expect("Retry-After")
        .parse()
        .expect("an integer");
    assert!(
        (1..=86_400).contains(&retry),
        "until the next UTC day: {retry}"
    );
    assert!(r.header("Via").is_some(), "a 429 carries Via: {}", r.head);
    assert!(r.json()["retry_after"].as_f64().unwrap() > 0.0);
    // The server's scope counts its own.
    assert_eq!(
        f.call("POST", &local, Some(chat("one-too-many"))).status,
        201
    );
}

#[test]
fn twilight_http_registers_and_reads_commands() {
    use twilight_http::Client;
    use twilight_model::application::command::CommandType;
    use twilight_model::id::Id;

    let (f, app) = fixture();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let client = Client::builder()
        .token(f.auth.clone())
        .proxy(f.node.gateway.to_string(), true)
        .timeout(Duration::from_secs(10))
        .build();
    let server = f.server;
    rt.block_on(async {
        let http = client.interaction(Id::new(app));
        let ping = http
            .create_global_command()
            .chat_input("ping", "Replies with pong")
            .await
            .expect("create")
            .model()
            .await
            .expect("a twilight Command");
        assert_eq!(
            (ping.name.as_str(), ping.kind),
            ("ping", CommandType::ChatInput)
        );
        assert_eq!(ping.application_id, Some(Id::new(app)));
        let listed = http
            .global_commands()
            .await
            .expect("list")
            .models()
            .await
            .expect("twilight Commands");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, ping.id);
        let user = http
            .create_guild_command(Id::new(server))
            .user("Profile")
            .await
            .expect("guild create")
            .model()
            .await
            .expect("a twilight Command");
        assert_eq!(user.guild_id, Some(Id::new(server)));
        assert_eq!(user.kind, CommandType::User);
        let set = http
            .set_guild_commands(Id::new(server), &[])
            .await
            .expect("overwrite")
            .models()
            .await
            .expect("models");
        assert!(set.is_empty());
    });
}
