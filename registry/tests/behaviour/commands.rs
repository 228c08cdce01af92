//! Application commands: scopes, bulk overwrite, upsert, edit, delete and
//! the platform's limits.

use super::Backend;
use registry::*;

fn chat(name: &str) -> NewCommand {
    NewCommand {
        name: name.to_owned(),
        description: format!("{name} things"),
        kind: command_kind::CHAT_INPUT,
        options_json: "[]".to_owned(),
        default_member_permissions: None,
        nsfw: false,
    }
}

fn menu(kind: u8, name: &str) -> NewCommand {
    NewCommand {
        description: String::new(),
        kind,
        ..chat(name)
    }
}

pub fn commands_bulk_overwrite_keeps_ids(reg: &dyn Backend) {
    let (app, _) = reg.create_application("cmd-bot", 0, 1).unwrap();
    assert!(reg.commands(app.id, None).unwrap().is_empty());
    let first = reg
        .put_commands(app.id, None, &[chat("ping"), chat("echo")])
        .unwrap();
    assert_eq!(first.len(), 2);
    assert_eq!(
        (first[0].name.as_str(), first[1].name.as_str()),
        ("ping", "echo")
    );
    assert!(first
        .iter()
        .all(|c| c.application_id == app.id && c.guild_id.is_none()));
    let mut listed = reg.commands(app.id, None).unwrap();
    listed.sort_by_key(|c| c.name.clone());
    assert_eq!(listed.len(), 2);

    // ping kept (same content: same version), echo changed (same id, new
    // version), stats new, and nothing else left.
    let mut echo = chat("echo");
    echo.description = "says it back".into();
    echo.options_json = r#"[{"description":"what","name":"text","required":true,"type":3}]"#.into();
    let second = reg
        .put_commands(app.id, None, &[echo, chat("ping"), chat("stats")])
        .unwrap();
    assert_eq!(second[0].id, first[1].id, "echo keeps its id");
    assert_ne!(
        second[0].version, first[1].version,
        "an edit is a new version"
    );
    assert_eq!(second[0].description, "says it back");
    assert_eq!(second[1], first[0], "ping unchanged");
    assert!(second[2].id != first[0].id && second[2].id != first[1].id);
    assert_eq!(reg.commands(app.id, None).unwrap().len(), 3);

    let third = reg.put_commands(app.id, None, &[chat("stats")]).unwrap();
    assert_eq!(third[0].id, second[2].id);
    assert_eq!(
        reg.commands(app.id, None).unwrap(),
        third,
        "the others deleted"
    );
    assert_eq!(reg.command(app.id, None, first[0].id).unwrap(), None);

    // Same name, different kinds: two commands; twice in one list: refused.
    let both = reg
        .put_commands(
            app.id,
            None,
            &[chat("ping"), menu(command_kind::USER, "ping")],
        )
        .unwrap();
    assert_ne!(both[0].id, both[1].id);
    assert!(matches!(
        reg.put_commands(app.id, None, &[chat("ping"), chat("ping")]),
        Err(RegistryError::Invalid(_))
    ));
    assert_eq!(
        reg.commands(app.id, None).unwrap().len(),
        2,
        "nothing written"
    );
    assert!(reg.put_commands(app.id, None, &[]).unwrap().is_empty());
    assert!(reg.commands(app.id, None).unwrap().is_empty());
}

pub fn commands_scopes_upsert_edit_delete(reg: &dyn Backend) {
    let (app, _) = reg.create_application("cmd-bot", 0, 1).unwrap();
    let (other, _) = reg.create_application("other-bot", 0, 1).unwrap();
    let s = reg.create_server("Cmds", 1).unwrap();
    let (global, created) = reg.create_command(app.id, None, &chat("ping")).unwrap();
    assert!(created);
    let (local, created) = reg
        .create_command(app.id, Some(s.id), &chat("ping"))
        .unwrap();
    assert!(created, "a server scope is its own");
    assert_eq!(local.guild_id, Some(s.id));
    assert_ne!(local.id, global.id);
    assert_eq!(
        reg.commands(app.id, Some(s.id)).unwrap(),
        vec![local.clone()]
    );
    assert!(reg.commands(other.id, None).unwrap().is_empty());
    // A command is found only in its own scope and application.
    assert_eq!(reg.command(app.id, None, local.id).unwrap(), None);
    assert_eq!(reg.command(other.id, None, global.id).unwrap(), None);
    assert_eq!(
        reg.command(app.id, None, global.id).unwrap(),
        Some(global.clone())
    );

    // POST of an existing name and kind is an update: same id, new version.
    let mut again = chat("ping");
    again.description = "pong".into();
    again.nsfw = true;
    again.default_member_permissions = Some(8);
    let (updated, created) = reg.create_command(app.id, None, &again).unwrap();
    assert!(!created);
    assert_eq!(updated.id, global.id);
    assert_ne!(updated.version, global.version);
    assert_eq!(
        (updated.nsfw, updated.default_member_permissions),
        (true, Some(8))
    );
    let (same, created) = reg.create_command(app.id, None, &again).unwrap();
    assert!(!created);
    assert_eq!(same, updated, "an identical POST changes nothing");

    // Edit: a new version; None fields kept; Some(None) clears.
    let patch = CommandPatch {
        name: Some("pong".into()),
        default_member_permissions: Some(None),
        ..Default::default()
    };
    let edited = reg.edit_command(app.id, None, global.id, &patch).unwrap();
    assert_eq!((edited.id, edited.name.as_str()), (global.id, "pong"));
    assert_eq!(edited.description, "pong");
    assert_eq!(edited.default_member_permissions, None);
    assert!(edited.nsfw);
    assert_ne!(edited.version, updated.version);
    assert_eq!(
        reg.command(app.id, None, global.id).unwrap(),
        Some(edited.clone())
    );
    // Renaming onto another command of the kind is refused; bad names too.
    reg.create_command(app.id, None, &chat("echo")).unwrap();
    let onto = CommandPatch {
        name: Some("echo".into()),
        ..Default::default()
    };
    assert!(matches!(
        reg.edit_command(app.id, None, global.id, &onto),
        Err(RegistryError::Invalid(_))
    ));
    let upper = CommandPatch {
        name: Some("Pong".into()),
        ..Default::default()
    };
    assert!(matches!(
        reg.edit_command(app.id, None, global.id, &upper),
        Err(RegistryError::Invalid(_))
    ));
    assert!(matches!(
        reg.edit_command(app.id, Some(s.id), global.id, &patch),
        Err(RegistryError::NotFound {
            what: "command",
            ..
        })
    ));

    // Delete: only in its own scope.
    assert!(!reg.delete_command(app.id, Some(s.id), global.id).unwrap());
    assert!(!reg.delete_command(other.id, None, global.id).unwrap());
    assert!(reg.delete_command(app.id, None, global.id).unwrap());
    assert!(!reg.delete_command(app.id, None, global.id).unwrap());
    assert_eq!(reg.command(app.id, None, global.id).unwrap(), None);

    // Unknown scopes; a deleted server takes its commands along.
    assert!(matches!(
        reg.create_command(app.id, Some(12345), &chat("x")),
        Err(RegistryError::NotFound { what: "server", .. })
    ));
    assert!(matches!(
        reg.create_command(999, None, &chat("x")),
        Err(RegistryError::NotFound {
            what: "application",
            ..
        })
    ));
    assert!(reg.delete_server(s.id).unwrap());
    assert!(reg.commands(app.id, Some(s.id)).unwrap().is_empty());
    assert_eq!(reg.command(app.id, Some(s.id), local.id).unwrap(), None);
    assert!(reg.delete_application(app.id).unwrap());
    assert!(reg.commands(app.id, None).unwrap().is_empty());
}

pub fn commands_rules_and_kind_limits(reg: &dyn Backend) {
    let (app, _) = reg.create_application("cmd-bot", 0, 1).unwrap();
    let bad = [
        NewCommand {
            name: "Ping".into(),
            ..chat("x")
        },
        NewCommand {
            description: String::new(),
            ..chat("x")
        },
        NewCommand {
            kind: 4,
            ..chat("x")
        },
        NewCommand {
            description: "not empty".into(),
            ..menu(command_kind::MESSAGE, "Quote")
        },
        NewCommand {
            options_json: r#"[{"type":3}]"#.into(),
            ..menu(command_kind::USER, "Profile")
        },
        NewCommand {
            options_json: "{}".into(),
            ..chat("x")
        },
    ];
    for c in &bad {
        assert!(
            matches!(
                reg.create_command(app.id, None, c),
                Err(RegistryError::Invalid(_))
            ),
            "{c:?}"
        );
        assert!(matches!(
            reg.put_commands(app.id, None, std::slice::from_ref(c)),
            Err(RegistryError::Invalid(_))
        ));
    }
    assert!(reg.commands(app.id, None).unwrap().is_empty());
    reg.create_command(app.id, None, &menu(command_kind::USER, "Report User"))
        .unwrap();

    // 100 CHAT_INPUT, 5 USER, 5 MESSAGE per scope.
    let hundred: Vec<NewCommand> = (0..100).map(|i| chat(&format!("c{i}"))).collect();
    let mut all = hundred.clone();
    all.extend((0..5).map(|i| menu(command_kind::USER, &format!("U {i}"))));
    all.extend((0..5).map(|i| menu(command_kind::MESSAGE, &format!("M {i}"))));
    assert_eq!(reg.put_commands(app.id, None, &all).unwrap().len(), 110);
    assert!(matches!(
        reg.create_command(app.id, None, &chat("one-more")),
        Err(RegistryError::LimitReached { max: 100, .. })
    ));
    assert!(matches!(
        reg.create_command(app.id, None, &menu(command_kind::MESSAGE, "M 5")),
        Err(RegistryError::LimitReached { max: 5, .. })
    ));
    // An upsert of an existing one is no create: allowed at the limit.
    let (_, created) = reg.create_command(app.id, None, &chat("c7")).unwrap();
    assert!(!created);
    let mut over = hundred;
    over.push(chat("c100"));
    assert!(matches!(
        reg.put_commands(app.id, None, &over),
        Err(RegistryError::LimitReached { max: 100, .. })
    ));
    assert_eq!(
        reg.commands(app.id, None).unwrap().len(),
        110,
        "nothing written"
    );
}

pub fn commands_daily_create_limit_per_scope(reg: &dyn Backend) {
    let (app, _) = reg.create_application("cmd-bot", 0, 1).unwrap();
    let s = reg.create_server("Daily", 1).unwrap();
    // 100 created by a bulk overwrite, all deleted, 99 more one by one.
    let batch: Vec<NewCommand> = (0..100).map(|i| chat(&format!("a{i}"))).collect();
    reg.put_commands(app.id, None, &batch).unwrap();
    reg.put_commands(app.id, None, &[]).unwrap();
    for i in 0..99 {
        assert!(
            reg.create_command(app.id, None, &chat(&format!("b{i}")))
                .unwrap()
                .1
        );
    }
    // Updates are no creates.
    let mut changed = chat("b0");
    changed.description = "changed".into();
    assert!(!reg.create_command(app.id, None, &changed).unwrap().1);
    // A bulk overwrite that would create two more is refused whole.
    let two = [chat("b0"), chat("n1"), chat("n2")];
    assert!(matches!(
        reg.put_commands(app.id, None, &two),
        Err(RegistryError::LimitReached { max: 200, .. })
    ));
    assert_eq!(
        reg.commands(app.id, None).unwrap().len(),
        99,
        "nothing written"
    );
    assert!(reg.create_command(app.id, None, &chat("last")).unwrap().1);
    // The 200th create filled the scope (100): make room, then the day's
    // limit is what refuses (deleting gives no creates back).
    let id = reg.commands(app.id, None).unwrap()[0].id;
    assert!(reg.delete_command(app.id, None, id).unwrap());
    assert!(matches!(
        reg.create_command(app.id, None, &chat("too-many")),
        Err(RegistryError::LimitReached { max: 200, .. })
    ));
    // A bulk overwrite that creates nothing still works.
    assert_eq!(
        reg.put_commands(app.id, None, &[chat("last")])
            .unwrap()
            .len(),
        1
    );
    // Other scopes and applications count their own.
    assert!(
        reg.create_command(app.id, Some(s.id), &chat("too-many"))
            .unwrap()
            .1
    );
    let (other, _) = reg.create_application("other-bot", 0, 1).unwrap();
    assert!(
        reg.create_command(other.id, None, &chat("too-many"))
            .unwrap()
            .1
    );
}
