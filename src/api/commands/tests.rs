//! The command routes' unit tests: validation of command bodies, and their
//! routes and buckets.

use super::*;
use crate::api::limit::Bucket;
use crate::api::route::{route, ApiRoute, RouteError, ROUTE_NAMES};

#[test]
fn command_routes() {
    use ApiRoute::*;
    let a = "/api/v10/applications/7";
    assert_eq!(
        route("GET", &format!("{a}/commands")),
        Ok(ListCommands { app: 7, guild: 0 })
    );
    assert_eq!(
        route("PUT", &format!("{a}/guilds/9/commands/")),
        Ok(PutCommands { app: 7, guild: 9 })
    );
    assert_eq!(
        route("PATCH", "/api/v9/applications/7/commands/5"),
        Ok(EditCommand {
            app: 7,
            guild: 0,
            command: 5
        })
    );
    assert_eq!(
        route("DELETE", &format!("{a}/guilds/9/commands/5")),
        Ok(DeleteCommand {
            app: 7,
            guild: 9,
            command: 5
        })
    );
    assert_eq!(
        route("PATCH", &format!("{a}/commands")),
        Err(RouteError::MethodNotAllowed)
    );
    assert_eq!(
        route("POST", &format!("{a}/commands/5")),
        Err(RouteError::MethodNotAllowed)
    );
    for p in [
        "/api/v10/applications/@me/commands",
        "/api/v10/applications/7/guilds/0/commands",
        "/api/v10/applications/7/commands/x",
    ] {
        assert_eq!(route("GET", p), Err(RouteError::NotFound), "{p}");
    }
    let r = route("POST", &format!("{a}/guilds/9/commands")).unwrap();
    assert_eq!(r.bucket(), Some((Bucket::CommandWrite, 9)));
    assert_eq!(r.name(), "POST /applications/{id}/guilds/{id}/commands");
    assert_eq!(r.class(), 5);
    assert!(r.takes_body());
    let g = route("GET", &format!("{a}/commands/3")).unwrap();
    assert_eq!(g.bucket(), Some((Bucket::CommandRead, 0)));
    assert_eq!(
        ROUTE_NAMES[g.index()],
        "GET /applications/{id}/commands/{id}"
    );
}

/// The `errors` tree's path to its first `_errors` and that code.
fn error_at(e: &ApiError) -> (String, String) {
    assert_eq!(
        (e.status, e.body["code"].as_u64()),
        (400, Some(50035)),
        "{e:?}"
    );
    let mut path = Vec::new();
    let mut v = &e.body["errors"];
    while v.get("_errors").is_none() {
        let (k, next) = v.as_object().and_then(|m| m.iter().next()).expect("a tree");
        path.push(k.clone());
        v = next;
    }
    (
        path.join("."),
        v["_errors"][0]["code"].as_str().unwrap().to_owned(),
    )
}

fn bad(v: Value) -> (String, String) {
    error_at(&new_command(&v, "").unwrap_err())
}

fn opt(t: u64, name: &str) -> Value {
    json!({"type": t, "name": name, "description": "d"})
}

#[test]
fn a_full_command_is_normalised() {
    let c = new_command(
        &json!({
            "name": "roll",
            "description": "Roll dice",
            "unknown_field": {"ignored": true},
            "dm_permission": false,
            "default_member_permissions": "8",
            "nsfw": true,
            "options": [
                {"type": 4, "name": "sides", "description": "how many", "required": true,
                 "min_value": 2, "max_value": 100, "name_localizations": null},
                {"type": 3, "name": "label", "description": "a label",
                 "choices": [{"name": "A", "value": "a"}], "required": false},
                {"type": 3, "name": "search", "description": "s", "autocomplete": true},
                {"type": 7, "name": "where", "description": "w", "channel_types": [0, 5]},
            ]
        }),
        "",
    )
    .unwrap();
    assert_eq!((c.kind, c.name.as_str()), (1, "roll"));
    assert_eq!(c.default_member_permissions, Some(8));
    assert!(c.nsfw);
    let o: Value = serde_json::from_str(&c.options_json).unwrap();
    assert_eq!(o[0]["required"], true);
    assert_eq!(o[0]["max_value"], 100);
    assert!(
        o[0].get("name_localizations").is_none(),
        "only what is kept"
    );
    assert!(o[1].get("required").is_none(), "false is left out");
    assert_eq!(o[1]["choices"][0]["value"], "a");
    assert_eq!(o[2]["autocomplete"], true);
    assert_eq!(o[3]["channel_types"], json!([0, 5]));
    let user = new_command(&json!({"name": "Show Profile", "type": 2}), "").unwrap();
    assert_eq!(
        (
            user.kind,
            user.description.as_str(),
            user.options_json.as_str()
        ),
        (2, "", "[]")
    );
}

#[test]
fn each_rule_names_its_field() {
    let base = |extra: Value| {
        let mut v = json!({"name": "cmd", "description": "d"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"description": "d"}), "name", "BASE_TYPE_REQUIRED"),
        (
            base(json!({"name": "Caps"})),
            "name",
            "APPLICATION_COMMAND_INVALID_NAME",
        ),
        (
            base(json!({"name": "a b"})),
            "name",
            "APPLICATION_COMMAND_INVALID_NAME",
        ),
        (
            base(json!({"name": "x".repeat(33)})),
            "name",
            "BASE_TYPE_BAD_LENGTH",
        ),
        (base(json!({"name": 5})), "name", "BASE_TYPE_STRING"),
        (json!({"name": "cmd"}), "description", "BASE_TYPE_REQUIRED"),
        (
            base(json!({"description": ""})),
            "description",
            "BASE_TYPE_BAD_LENGTH",
        ),
        (base(json!({"type": 9})), "type", "BASE_TYPE_CHOICES"),
        (
            json!({"name": "Quote", "type": 3, "description": "x"}),
            "description",
            "BASE_TYPE_MAX_LENGTH",
        ),
        (
            json!({"name": "Quote", "type": 3, "options": [opt(3, "a")]}),
            "options",
            "APPLICATION_COMMAND_OPTIONS_NOT_ALLOWED",
        ),
        (base(json!({"nsfw": "yes"})), "nsfw", "BASE_TYPE_BOOLEAN"),
        (
            base(json!({"default_member_permissions": "x"})),
            "default_member_permissions",
            "NUMBER_TYPE_COERCE",
        ),
        (base(json!({"options": {}})), "options", "LIST_TYPE_CONVERT"),
        (
            base(json!({"options": [opt(12, "a")]})),
            "options.0.type",
            "NUMBER_TYPE_COERCE",
        ),
        (
            base(json!({"options": [opt(3, "A")]})),
            "options.0.name",
            "APPLICATION_COMMAND_INVALID_NAME",
        ),
        (
            base(json!({"options": [{"type": 3, "name": "a"}]})),
            "options.0.description",
            "BASE_TYPE_REQUIRED",
        ),
        (
            base(json!({"options": [opt(3, "a"), opt(3, "a")]})),
            "options.1.name",
            "APPLICATION_COMMAND_OPTIONS_DUPLICATE_NAME",
        ),
        (
            base(json!({"options": (0..26).map(|i| opt(3, &format!("o{i}"))).collect::<Vec<_>>()})),
            "options",
            "BASE_TYPE_MAX_LENGTH",
        ),
        (
            base(json!({"options": [opt(1, "sub"), opt(3, "a")]})),
            "options",
            "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID",
        ),
        (
            base(
                json!({"options": [{"type": 1, "name": "s", "description": "d", "options": [opt(1, "t")]}]}),
            ),
            "options.0.options.0.type",
            "APPLICATION_COMMAND_OPTION_TYPE_INVALID",
        ),
        (
            base(
                json!({"options": [{"type": 2, "name": "g", "description": "d", "options": [opt(3, "t")]}]}),
            ),
            "options.0.options.0.type",
            "APPLICATION_COMMAND_OPTION_TYPE_INVALID",
        ),
        (
            base(
                json!({"options": [{"type": 2, "name": "g", "description": "d", "options": [
                {"type": 1, "name": "s", "description": "d", "options": [opt(2, "deeper")]}]}]}),
            ),
            "options.0.options.0.options.0.type",
            "APPLICATION_COMMAND_OPTION_TYPE_INVALID",
        ),
        (
            base(
                json!({"options": [opt(3, "a"), {"type": 3, "name": "b", "description": "d", "required": true}]}),
            ),
            "options.1.required",
            "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID",
        ),
        (
            base(
                json!({"options": [{"type": 5, "name": "b", "description": "d", "choices": [{"name": "x", "value": "x"}]}]}),
            ),
            "options.0.choices",
            "APPLICATION_COMMAND_OPTION_CHOICES_INVALID",
        ),
        (
            base(
                json!({"options": [{"type": 3, "name": "b", "description": "d", "autocomplete": true,
                "choices": [{"name": "x", "value": "x"}]}]}),
            ),
            "options.0.autocomplete",
            "APPLICATION_COMMAND_AUTOCOMPLETE_AND_CHOICES",
        ),
        (
            base(
                json!({"options": [{"type": 3, "name": "b", "description": "d",
                "choices": (0..26).map(|i| json!({"name": "n", "value": i.to_string()})).collect::<Vec<_>>()}]}),
            ),
            "options.0.choices",
            "BASE_TYPE_MAX_LENGTH",
        ),
        (
            base(
                json!({"options": [{"type": 4, "name": "b", "description": "d",
                "choices": [{"name": "x", "value": "one"}]}]}),
            ),
            "options.0.choices.0.value",
            "NUMBER_TYPE_COERCE",
        ),
        (
            base(
                json!({"options": [{"type": 4, "name": "b", "description": "d", "min_value": 5, "max_value": 1}]}),
            ),
            "options.0.min_value",
            "NUMBER_TYPE_MAX",
        ),
    ];
    for (body, path, code) in cases {
        assert_eq!(
            bad(body.clone()),
            (path.to_owned(), code.to_owned()),
            "{body}"
        );
    }
}

#[test]
fn subcommands_nest_two_deep() {
    let c = new_command(
        &json!({"name": "admin", "description": "d", "options": [
            {"type": 2, "name": "user", "description": "d", "options": [
                {"type": 1, "name": "ban", "description": "d", "options": [
                    {"type": 6, "name": "who", "description": "d", "required": true}]}]},
            {"type": 1, "name": "status", "description": "d"}]}),
        "",
    )
    .unwrap();
    let o: Value = serde_json::from_str(&c.options_json).unwrap();
    assert_eq!(o[0]["options"][0]["options"][0]["name"], "who");
    assert_eq!(o[1]["options"], json!([]));
}

#[test]
fn bulk_bodies() {
    assert_eq!(bulk(&json!([])).unwrap(), vec![]);
    let e = bulk(&json!({"name": "x"})).unwrap_err();
    assert_eq!(error_at(&e), ("_body".into(), "LIST_TYPE_CONVERT".into()));
    let e = bulk(&json!([{"name": "a", "description": "d"}, {"name": "B", "description": "d"}]))
        .unwrap_err();
    assert_eq!(
        error_at(&e),
        ("1.name".into(), "APPLICATION_COMMAND_INVALID_NAME".into())
    );
    let e = bulk(&json!([{"name": "a", "description": "d"}, {"name": "a", "description": "e"}]))
        .unwrap_err();
    assert_eq!(
        error_at(&e),
        (
            "1.name".into(),
            "APPLICATION_COMMANDS_DUPLICATE_NAME".into()
        )
    );
    let two = bulk(&json!([{"name": "a", "description": "d"}, {"name": "a", "type": 2}])).unwrap();
    assert_eq!(two.len(), 2, "one name, two types");
    let many: Vec<Value> = (0..111)
        .map(|i| json!({"name": format!("c{i}"), "description": "d"}))
        .collect();
    assert_eq!(
        error_at(&bulk(&Value::Array(many)).unwrap_err()).1,
        "BASE_TYPE_MAX_LENGTH"
    );
}

#[test]
fn patches_follow_the_commands_type() {
    let m = |v: Value| v.as_object().unwrap().clone();
    let p = patch(
        &m(json!({"name": "Report It", "default_member_permissions": null})),
        2,
    )
    .unwrap();
    assert_eq!(p.name.as_deref(), Some("Report It"));
    assert_eq!(p.default_member_permissions, Some(None));
    assert_eq!(p.description, None);
    let e = patch(&m(json!({"name": "Report It"})), 1).unwrap_err();
    assert_eq!(error_at(&e).0, "name");
    let p = patch(&m(json!({"options": null, "nsfw": true})), 1).unwrap();
    assert_eq!(
        (p.options_json.as_deref(), p.nsfw),
        (Some("[]"), Some(true))
    );
    assert_eq!(patch(&m(json!({})), 1).unwrap(), CommandPatch::default());
}

#[test]
fn answers_carry_what_libraries_read() {
    let c = Command {
        id: 1_200_000_000_000_000_001,
        application_id: 1_200_000_000_000_000_000,
        guild_id: Some(1_200_000_000_000_000_009),
        name: "ping".into(),
        description: "p".into(),
        kind: 1,
        options_json: "[]".into(),
        default_member_permissions: Some(32),
        nsfw: false,
        version: 1_200_000_000_000_000_002,
    };
    let v = command_json(&c);
    for k in ["id", "application_id", "version", "guild_id"] {
        assert!(v[k].is_string(), "{k}: {v}");
    }
    assert_eq!(v["default_member_permissions"], "32");
    assert_eq!(v["type"], 1);
    assert!(v.get("options").is_none(), "no options: left out");
    assert!(v["dm_permission"].is_null() && v["name_localizations"].is_null());
    assert_eq!(v["integration_types"], json!([0]));
    let global = command_json(&Command {
        guild_id: None,
        default_member_permissions: None,
        ..c
    });
    assert!(global.get("guild_id").is_none());
    assert!(global["default_member_permissions"].is_null());
}

#[test]
fn calls_from_routes() {
    let r = ApiRoute::PutCommands { app: 7, guild: 0 };
    let call = call(
        &r,
        Some("application/json"),
        br#"[{"name":"a","description":"d"}]"#,
    )
    .unwrap();
    assert_eq!((call.app, call.guild), (7, None));
    assert!(matches!(call.op, CommandOp::Put(ref v) if v.len() == 1));
    let r = ApiRoute::DeleteCommand {
        app: 7,
        guild: 9,
        command: 3,
    };
    assert_eq!(super::call(&r, None, b"").unwrap().guild, Some(9));
    let r = ApiRoute::CreateCommand { app: 7, guild: 0 };
    let e = super::call(&r, Some("application/json"), b"{not json").unwrap_err();
    assert_eq!((e.status, e.body["code"].as_u64()), (400, Some(50035)));
    let e = super::call(&r, Some("text/plain"), b"{}").unwrap_err();
    assert_eq!(error_at(&e).0, "_body");
}
