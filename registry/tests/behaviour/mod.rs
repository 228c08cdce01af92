//! The registry behaviour suite, shared by every backend: `sqlite.rs` runs
//! it against the embedded SQLite registry, `postgres.rs` against a real
//! PostgreSQL server. Each function is one behaviour; `behaviour_tests!`
//! turns the list into `#[test]`s for a backend.
//!
//! A function taking `&dyn Backend` gets a fresh, empty registry; one taking
//! `&dyn Store` gets a fresh, empty store it may open several handles on
//! (another process, another node).
#![allow(dead_code)]

use registry::permissions::*;
use registry::*;

mod commands;
mod developers;
mod nodes;
mod people;
mod storage;
pub use commands::*;
pub use developers::*;
pub use nodes::*;
pub use people::*;
pub use storage::*;

/// What the suite needs beyond the trait.
pub trait Backend: Registry {
    fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server>;
}

impl Backend for SqliteRegistry {
    fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server> {
        SqliteRegistry::create_server_with_id(self, id, name, owner_id)
    }
}

impl Backend for PostgresRegistry {
    fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server> {
        PostgresRegistry::create_server_with_id(self, id, name, owner_id)
    }
}

/// One empty database that several handles can be opened on.
pub trait Store {
    fn open(&self) -> Box<dyn Backend>;
    /// Everything the store holds, as bytes a secret could hide in (SQLite:
    /// every file's bytes; PostgreSQL: every row as text, and every BYTEA
    /// value raw).
    fn stored_bytes(&self) -> Vec<u8>;
}

/// `fresh`: an expression giving `impl Deref<Target = impl Backend>`;
/// `store`: the same for `impl Store`; then any attributes every test gets
/// (e.g. `#[ignore = "needs PostgreSQL: ..."]` for a backend that needs a
/// server).
macro_rules! behaviour_tests {
    (fresh: $fresh:expr, store: $store:expr $(, #[$m:meta])* $(,)?) => {
        behaviour_tests!(@store [$(#[$m])*] $store;
            token_round_trip_and_rejections,
            seed_demo_idempotent_and_reopen_keeps_data,
            two_handles_on_one_store,
            cluster_nodes_claim_renew_lapse_and_find,
            secrets_are_never_stored,
        );
        behaviour_tests!(@fresh [$(#[$m])*] $fresh;
            reset_token_invalidates_old,
            application_settings_and_delete,
            install_uninstall,
            snapshot_contents_and_overwrite_order,
            servers_for_shard_known_vector,
            session_start_limit_window,
            state_changes_from_the_event_stream_update_the_snapshot,
            revocations_are_written_to_the_outbox_with_the_change,
            members_roles_and_their_rules,
            bans_end_membership_and_block_rejoining,
            member_pages_and_dm_channels,
            demo_server_has_people_ranked_around_the_bot,
            find_demo_reads_only_and_the_demo_stays_until_deleted,
            an_interaction_is_claimed_once,
            an_open_interaction_is_settled_once,
            signing_seed_and_interactions_endpoint,
            commands_bulk_overwrite_keeps_ids,
            commands_scopes_upsert_edit_delete,
            commands_rules_and_kind_limits,
            commands_daily_create_limit_per_scope,
            developer_sign_in_good_and_bad,
            developer_names_and_passwords_are_checked,
            developers_see_only_their_own_applications,
            intent_requests_pending_until_approved_or_denied,
            installed_checks_a_large_batch_in_order,
            u64_ids_keep_their_bits,
        );
    };
    // One test per name, recursively (the attributes repeat per test).
    (@store [$($a:tt)*] $store:expr; $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($a)*
        fn $name() {
            let store = $store;
            behaviour::$name(&store);
        }
        behaviour_tests!(@store [$($a)*] $store; $($rest),*);
    };
    (@store [$($a:tt)*] $store:expr;) => {};
    (@fresh [$($a:tt)*] $fresh:expr; $name:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($a)*
        fn $name() {
            let reg = $fresh;
            behaviour::$name(&*reg);
        }
        behaviour_tests!(@fresh [$($a)*] $fresh; $($rest),*);
    };
    (@fresh [$($a:tt)*] $fresh:expr;) => {};
}

pub fn token_round_trip_and_rejections(store: &dyn Store) {
    let reg = store.open();
    let (app, token) = reg
        .create_application("bot-a", intents::MESSAGE_CONTENT, 1)
        .unwrap();
    let (other, other_token) = reg.create_application("bot-b", 0, 16).unwrap();
    assert_eq!(app.bot_user_id, app.id);
    assert_eq!(app.bot_username, "bot-a");
    assert_eq!(app.session_start_total, 1000);
    assert_eq!(app.flags, app_flags::GATEWAY_MESSAGE_CONTENT);
    assert_eq!(other.max_concurrency, 16);

    assert_eq!(reg.authenticate(&token).unwrap(), Some(app.clone()));
    assert_eq!(
        reg.authenticate(&format!("Bot {token}")).unwrap(),
        Some(app.clone())
    );
    assert_eq!(
        reg.authenticate(&other_token).unwrap().unwrap().id,
        other.id
    );

    // Same id segment, wrong secret; other app's secret under this app's id.
    let parts: Vec<&str> = token.split('.').collect();
    let oparts: Vec<&str> = other_token.split('.').collect();
    let mut flipped = parts[2].to_string().into_bytes();
    flipped[0] = if flipped[0] == b'A' { b'B' } else { b'A' };
    let flipped = String::from_utf8(flipped).unwrap();
    let bad = vec![
        String::new(),
        " ".into(),
        "Bot ".into(),
        "Bot".into(),
        format!("{} ", token),
        format!(" {}", token),
        format!("bot {}", token),
        format!("{}.{}.{}", parts[0], parts[1], flipped),
        format!("{}.{}.{}", parts[0], oparts[1], oparts[2]),
        format!("{}.{}", parts[0], parts[1]),
        format!("{token}.x"),
        token[..token.len() - 1].to_string(),
        "....".into(),
        "ñ.ü.ö".into(),
        "🦀.🦀.🦀".into(),
        "\0\0\0".into(),
        "x".repeat(100_000),
        format!("{}.{}", parts[0], "a.".repeat(1000)),
        "MTIz.YWJj.ZGVm".into(), // well formed, unknown id 123
    ];
    for b in &bad {
        assert_eq!(reg.authenticate(b).unwrap(), None, "{b:?}");
    }
    // Arbitrary bytes, lossily made text: never a panic, never a match.
    let mut buf = [0u8; 97];
    for _ in 0..500 {
        getrandom::fill(&mut buf).unwrap();
        let s = String::from_utf8_lossy(&buf);
        assert_eq!(reg.authenticate(&s).unwrap(), None);
        let dotted = format!("{}.{}", parts[0], s);
        assert_eq!(reg.authenticate(&dotted).unwrap(), None);
    }
}

pub fn reset_token_invalidates_old(reg: &dyn Backend) {
    let (app, old) = reg.create_application("bot", 0, 1).unwrap();
    let new = reg.reset_token(app.id).unwrap();
    assert_ne!(old, new);
    assert_eq!(reg.authenticate(&old).unwrap(), None);
    assert_eq!(reg.authenticate(&new).unwrap().unwrap().id, app.id);
    assert!(matches!(
        reg.reset_token(12345),
        Err(RegistryError::NotFound { .. })
    ));
}

/// ADR-12: one seed per application, created on first use and stable;
/// the endpoint URL set, cleared, checked, and gone with the application.
pub fn signing_seed_and_interactions_endpoint(reg: &dyn Backend) {
    let (a, _) = reg.create_application("signer", 0, 1).unwrap();
    let (b, _) = reg.create_application("other", 0, 1).unwrap();
    let seed = reg.signing_seed(a.id).unwrap();
    assert_eq!(reg.signing_seed(a.id).unwrap(), seed, "stable once made");
    assert_ne!(reg.signing_seed(b.id).unwrap(), seed, "one per application");
    assert_ne!(seed, [0u8; 32]);
    assert_eq!(reg.interactions_endpoint(a.id).unwrap(), None);
    reg.set_interactions_endpoint(a.id, Some("https://bot.example.com/i"))
        .unwrap();
    assert_eq!(
        reg.interactions_endpoint(a.id).unwrap().as_deref(),
        Some("https://bot.example.com/i")
    );
    assert_eq!(
        reg.signing_seed(a.id).unwrap(),
        seed,
        "setting a URL keeps the key"
    );
    assert_eq!(reg.interactions_endpoint(b.id).unwrap(), None);
    reg.set_interactions_endpoint(a.id, None).unwrap();
    assert_eq!(reg.interactions_endpoint(a.id).unwrap(), None);
    // A URL set before any seed existed makes the seed too.
    let (c, _) = reg.create_application("fresh", 0, 1).unwrap();
    reg.set_interactions_endpoint(c.id, Some("http://h/"))
        .unwrap();
    assert_eq!(reg.signing_seed(c.id).unwrap().len(), 32);
    for bad in [
        "ftp://x/",
        "no-scheme",
        "http://a b/",
        &format!("http://h/{}", "a".repeat(3000)),
    ] {
        assert!(
            matches!(
                reg.set_interactions_endpoint(a.id, Some(bad)),
                Err(RegistryError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
    for missing in [
        reg.signing_seed(12345).map(|_| ()),
        reg.set_interactions_endpoint(12345, Some("http://h/")),
        reg.interactions_endpoint(12345).map(|_| ()),
    ] {
        assert!(
            matches!(missing, Err(RegistryError::NotFound { .. })),
            "{missing:?}"
        );
    }
    assert!(reg.delete_application(a.id).unwrap());
    assert!(matches!(
        reg.signing_seed(a.id),
        Err(RegistryError::NotFound { .. })
    ));
}

pub fn application_settings_and_delete(reg: &dyn Backend) {
    assert!(matches!(
        reg.create_application("x", intents::PRIVILEGED | 1, 1),
        Err(RegistryError::Invalid(_))
    ));
    assert!(matches!(
        reg.create_application("x", 0, 0),
        Err(RegistryError::Invalid(_))
    ));
    assert!(matches!(
        reg.create_application("", 0, 1),
        Err(RegistryError::Invalid(_))
    ));
    let (app, token) = reg.create_application("bot", 0, 1).unwrap();
    let app2 = reg
        .set_approved_intents(app.id, intents::GUILD_MEMBERS | intents::GUILD_PRESENCES)
        .unwrap();
    assert_eq!(
        app2.flags,
        app_flags::GATEWAY_GUILD_MEMBERS | app_flags::GATEWAY_PRESENCE
    );
    assert_eq!(
        reg.set_max_concurrency(app.id, 16).unwrap().max_concurrency,
        16
    );
    assert_eq!(
        reg.set_session_start_total(app.id, 5)
            .unwrap()
            .session_start_total,
        5
    );
    assert_eq!(reg.list_applications().unwrap().len(), 1);

    let s = reg.create_server("S", 1).unwrap();
    let inst = reg.install(app.id, s.id, VIEW_CHANNEL).unwrap();
    assert!(reg.delete_application(app.id).unwrap());
    assert!(!reg.delete_application(app.id).unwrap());
    assert_eq!(reg.authenticate(&token).unwrap(), None);
    assert_eq!(reg.application(app.id).unwrap(), None);
    let snap = reg.server_snapshot(s.id).unwrap().unwrap();
    assert!(snap
        .roles
        .iter()
        .all(|r| Some(r.id) != inst.managed_role_id));
}

pub fn install_uninstall(reg: &dyn Backend) {
    let (app, _) = reg.create_application("bot", 0, 1).unwrap();
    let s = reg.create_server("S", 42).unwrap();
    let rev0 = reg.revision().unwrap();

    let inst = reg.install(app.id, s.id, VIEW_CHANNEL).unwrap();
    assert!(reg.revision().unwrap() > rev0);
    let managed = inst.managed_role_id.unwrap();
    assert_eq!(inst.role_ids, vec![managed]);
    assert_eq!(inst.permissions, VIEW_CHANNEL);
    let role = |id| {
        reg.server_snapshot(s.id)
            .unwrap()
            .unwrap()
            .roles
            .into_iter()
            .find(|r| r.id == id)
    };
    let r = role(managed).unwrap();
    assert!(r.managed);
    assert_eq!(r.name, "bot");
    assert_eq!(r.permissions, VIEW_CHANNEL);

    // Idempotent: same managed role, updated grant.
    let again = reg
        .install(app.id, s.id, VIEW_CHANNEL | SEND_MESSAGES)
        .unwrap();
    assert_eq!(again.managed_role_id, Some(managed));
    assert_eq!(again.permissions, VIEW_CHANNEL | SEND_MESSAGES);
    assert_eq!(
        role(managed).unwrap().permissions,
        VIEW_CHANNEL | SEND_MESSAGES
    );
    assert_eq!(
        reg.installations_of_app(app.id).unwrap(),
        vec![again.clone()]
    );
    assert_eq!(reg.installation(app.id, s.id).unwrap(), Some(again));

    // Extra roles for the bot member.
    let mods = reg.create_role(s.id, "mods", ADMINISTRATOR).unwrap();
    reg.add_installation_role(app.id, s.id, mods.id).unwrap();
    assert!(matches!(
        reg.add_installation_role(app.id, s.id, s.id),
        Err(RegistryError::Invalid(_))
    ));
    let mut want = vec![managed, mods.id];
    want.sort();
    assert_eq!(
        reg.installation(app.id, s.id).unwrap().unwrap().role_ids,
        want
    );
    assert!(reg.remove_installation_role(app.id, s.id, mods.id).unwrap());

    // Overwrites that target the managed role disappear with it.
    let ch = reg
        .create_channel(s.id, "c", channel_kind::TEXT, None)
        .unwrap();
    reg.set_overwrite(ch.id, managed, OverwriteKind::Role, VIEW_CHANNEL, 0)
        .unwrap();
    reg.set_overwrite(
        ch.id,
        app.bot_user_id,
        OverwriteKind::Member,
        0,
        SEND_MESSAGES,
    )
    .unwrap();

    assert!(reg.uninstall(app.id, s.id).unwrap());
    assert!(!reg.uninstall(app.id, s.id).unwrap());
    assert_eq!(reg.installation(app.id, s.id).unwrap(), None);
    assert!(reg.installations_of_app(app.id).unwrap().is_empty());
    assert!(role(managed).is_none());
    assert!(role(mods.id).is_some());
    let snap = reg.server_snapshot(s.id).unwrap().unwrap();
    assert!(snap.channels[0].overwrites.is_empty());

    assert!(matches!(
        reg.install(app.id, 999, 0),
        Err(RegistryError::NotFound { what: "server", .. })
    ));
    assert!(matches!(
        reg.install(999, s.id, 0),
        Err(RegistryError::NotFound {
            what: "application",
            ..
        })
    ));
}

pub fn snapshot_contents_and_overwrite_order(reg: &dyn Backend) {
    let s = reg.create_server("Guild", 7).unwrap();
    assert_eq!(s.owner_id, 7);
    let cat = reg
        .create_channel(s.id, "Text", channel_kind::CATEGORY, None)
        .unwrap();
    let general = reg
        .create_channel(s.id, "general", channel_kind::TEXT, Some(cat.id))
        .unwrap();
    let voice = reg
        .create_channel(s.id, "voice", channel_kind::VOICE, None)
        .unwrap();
    let role_a = reg.create_role(s.id, "a", SEND_MESSAGES).unwrap();
    let role_b = reg.create_role(s.id, "b", 0).unwrap();
    assert!(role_b.position > role_a.position);

    // Bad parents / targets.
    assert!(matches!(
        reg.create_channel(s.id, "x", channel_kind::TEXT, Some(general.id)),
        Err(RegistryError::Invalid(_))
    ));
    let other = reg.create_server("Other", 7).unwrap();
    assert!(matches!(
        reg.create_channel(other.id, "x", channel_kind::TEXT, Some(cat.id)),
        Err(RegistryError::Invalid(_))
    ));
    assert!(reg
        .set_overwrite(general.id, other.id, OverwriteKind::Role, 0, 0)
        .is_err());

    // Order is insertion order; an update keeps its place.
    reg.set_overwrite(general.id, role_b.id, OverwriteKind::Role, 1, 2)
        .unwrap();
    reg.set_overwrite(general.id, s.id, OverwriteKind::Role, 0, VIEW_CHANNEL)
        .unwrap();
    reg.set_overwrite(general.id, 555, OverwriteKind::Member, VIEW_CHANNEL, 0)
        .unwrap();
    reg.set_overwrite(general.id, role_a.id, OverwriteKind::Role, 8, 0)
        .unwrap();
    reg.set_overwrite(general.id, role_b.id, OverwriteKind::Role, 3, 4)
        .unwrap();
    reg.set_overwrite(voice.id, role_a.id, OverwriteKind::Role, 0, VIEW_CHANNEL)
        .unwrap();
    assert!(reg.delete_overwrite(general.id, role_a.id).unwrap());
    reg.set_overwrite(general.id, role_a.id, OverwriteKind::Role, 9, 0)
        .unwrap();

    let snap = reg.server_snapshot(s.id).unwrap().unwrap();
    assert_eq!(snap.server, s);
    let names: Vec<&str> = snap.roles.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["@everyone", "a", "b"]);
    let everyone = &snap.roles[0];
    assert_eq!(everyone.id, s.id);
    assert_eq!(everyone.permissions, (1 << 10) | (1 << 11) | (1 << 16));
    assert!(!everyone.managed);

    let chans: Vec<(&str, u8, Option<u64>)> = snap
        .channels
        .iter()
        .map(|c| (c.channel.name.as_str(), c.channel.kind, c.channel.parent_id))
        .collect();
    assert_eq!(
        chans,
        [
            ("Text", 4, None),
            ("general", 0, Some(cat.id)),
            ("voice", 2, None)
        ]
    );
    let ow: Vec<(u64, OverwriteKind, u64, u64)> = snap.channels[1]
        .overwrites
        .iter()
        .map(|o| (o.target_id, o.kind, o.allow, o.deny))
        .collect();
    assert_eq!(
        ow,
        [
            (role_b.id, OverwriteKind::Role, 3, 4),
            (s.id, OverwriteKind::Role, 0, VIEW_CHANNEL),
            (555, OverwriteKind::Member, VIEW_CHANNEL, 0),
            (role_a.id, OverwriteKind::Role, 9, 0),
        ]
    );
    assert_eq!(snap.channels[2].overwrites.len(), 1);
    assert!(snap.channels[0].overwrites.is_empty());

    assert_eq!(reg.server_snapshot(12345).unwrap(), None);
    assert_eq!(reg.list_servers().unwrap().len(), 2);
    assert!(reg.delete_server(other.id).unwrap());
    assert_eq!(reg.list_servers().unwrap(), vec![s]);
}

pub fn servers_for_shard_known_vector(reg: &dyn Backend) {
    // Discord's documented example snowflake.
    const ID: u64 = 175_928_847_299_117_063;
    assert_eq!(ID >> 22, 41_944_705_796);
    assert_eq!((ID >> 22) % 2, 0);
    assert_eq!(snowflake::timestamp_ms(ID), 1_462_015_105_796);

    let (app, _) = reg.create_application("bot", 0, 1).unwrap();
    let s = reg.create_server_with_id(ID, "Known", 1).unwrap();
    let odd = reg.create_server_with_id(ID + (1 << 22), "Odd", 1).unwrap();
    let not_installed = reg.create_server_with_id(ID + (2 << 22), "N", 1).unwrap();
    assert!(reg.create_server_with_id(ID, "dup", 1).is_err());
    reg.install(app.id, s.id, VIEW_CHANNEL).unwrap();
    reg.install(app.id, odd.id, VIEW_CHANNEL).unwrap();

    assert_eq!(reg.servers_for_shard(app.id, 0, 2).unwrap(), vec![ID]);
    assert_eq!(reg.servers_for_shard(app.id, 1, 2).unwrap(), vec![odd.id]);
    assert_eq!(
        reg.servers_for_shard(app.id, 0, 1).unwrap(),
        vec![ID, odd.id]
    );
    assert!(!reg
        .servers_for_shard(app.id, 0, 1)
        .unwrap()
        .contains(&not_installed.id));
    assert!(reg.servers_for_shard(app.id, 2, 2).is_err());
    assert!(reg.servers_for_shard(app.id, 0, 0).is_err());

    // Bulk-created servers never share a millisecond (so they are not all
    // on one shard); exact round-robin is unit-tested in `snowflake`.
    let (bulk, _) = reg.create_application("bulk", 0, 1).unwrap();
    let mut ms = std::collections::HashSet::new();
    for i in 0..64 {
        let s = reg.create_server(&format!("s{i}"), 1).unwrap();
        assert!(ms.insert(s.id >> 22));
        reg.install(bulk.id, s.id, 0).unwrap();
    }
    let total: usize = (0..4)
        .map(|shard| reg.servers_for_shard(bulk.id, shard, 4).unwrap().len())
        .sum();
    assert_eq!(total, 64);
}

pub fn session_start_limit_window(reg: &dyn Backend) {
    const DAY: u64 = 24 * 60 * 60 * 1000;
    let (app, _) = reg.create_application("bot", 0, 4).unwrap();
    reg.set_session_start_total(app.id, 3).unwrap();
    // Identifies are counted per minute; a minute leaves the window 24 h
    // after it ends (never earlier than exact, at most a minute later).
    const MIN: u64 = 60_000;
    let t0 = 1_700_000_040_000; // the start of a minute
    assert_eq!(t0 % MIN, 0);

    let l = reg.session_start_remaining(app.id, t0).unwrap();
    assert_eq!(
        l,
        SessionStartLimit {
            total: 3,
            remaining: 3,
            reset_after_ms: 0,
            max_concurrency: 4
        }
    );
    assert_eq!(reg.record_session_start(app.id, t0).unwrap().remaining, 2);
    reg.record_session_start(app.id, t0 + 1000).unwrap();
    let l = reg.record_session_start(app.id, t0 + 2000).unwrap();
    assert_eq!(l.remaining, 0);
    assert_eq!(l.reset_after_ms, DAY + MIN - 2000);
    // Over the limit: still recorded, remaining saturates at 0.
    assert_eq!(
        reg.record_session_start(app.id, t0 + 3000)
            .unwrap()
            .remaining,
        0
    );
    // A later minute is counted on its own.
    reg.record_session_start(app.id, t0 + MIN + 5).unwrap();

    // The first minute leaves the window 24 h after it ends.
    let l = reg
        .session_start_remaining(app.id, t0 + DAY + MIN - 1)
        .unwrap();
    assert_eq!((l.remaining, l.reset_after_ms), (0, 1));
    let l = reg.session_start_remaining(app.id, t0 + DAY + MIN).unwrap();
    assert_eq!((l.remaining, l.reset_after_ms), (2, MIN)); // only the second minute counts
    let l = reg
        .session_start_remaining(app.id, t0 + DAY + 2 * MIN)
        .unwrap();
    assert_eq!((l.remaining, l.reset_after_ms), (3, 0));
    let l = reg.session_start_remaining(app.id, t0 + 2 * DAY).unwrap();
    assert_eq!((l.remaining, l.reset_after_ms), (3, 0));

    // Per application.
    let (other, _) = reg.create_application("other", 0, 1).unwrap();
    assert_eq!(
        reg.session_start_remaining(other.id, t0).unwrap().remaining,
        1000
    );
    assert!(matches!(
        reg.record_session_start(999, t0),
        Err(RegistryError::NotFound { .. })
    ));
}

pub fn state_changes_from_the_event_stream_update_the_snapshot(reg: &dyn Backend) {
    use registry::{Channel, Overwrite, OverwriteKind, Role, StateChange};
    let seed = reg.seed_demo().unwrap().unwrap();
    let sid = seed.server_id;
    let ch = Channel {
        id: sid + 100,
        server_id: sid,
        name: "news".into(),
        kind: 0,
        position: 9,
        parent_id: None,
        topic: Some("t".into()),
    };
    let role = Role {
        id: sid + 200,
        server_id: sid,
        name: "mods".into(),
        permissions: 1 << 10,
        position: 3,
        color: 0,
        hoist: false,
        mentionable: false,
        managed: false,
    };
    reg.apply_state(&StateChange::UpsertRole { role: role.clone() })
        .unwrap();
    let ow = Overwrite {
        target_id: sid,
        kind: OverwriteKind::Role,
        allow: 0,
        deny: 1 << 10,
    };
    reg.apply_state(&StateChange::UpsertChannel {
        channel: ch.clone(),
        overwrites: vec![ow],
    })
    .unwrap();
    reg.apply_state(&StateChange::ServerName {
        server_id: sid,
        name: "Renamed".into(),
    })
    .unwrap();
    let snap = reg.server_snapshot(sid).unwrap().unwrap();
    assert_eq!(snap.server.name, "Renamed");
    let news = snap
        .channels
        .iter()
        .find(|c| c.channel.id == ch.id)
        .unwrap();
    assert_eq!(news.overwrites.len(), 1);
    assert!(snap
        .roles
        .iter()
        .any(|r| r.id == role.id && r.permissions == 1 << 10));
    // An update replaces the overwrites; a delete removes the channel.
    reg.apply_state(&StateChange::UpsertChannel {
        channel: Channel {
            name: "news2".into(),
            ..ch.clone()
        },
        overwrites: vec![],
    })
    .unwrap();
    let snap = reg.server_snapshot(sid).unwrap().unwrap();
    let news = snap
        .channels
        .iter()
        .find(|c| c.channel.id == ch.id)
        .unwrap();
    assert_eq!(
        (news.channel.name.as_str(), news.overwrites.len()),
        ("news2", 0)
    );
    reg.apply_state(&StateChange::DeleteChannel { channel_id: ch.id })
        .unwrap();
    reg.apply_state(&StateChange::DeleteRole {
        server_id: sid,
        role_id: role.id,
    })
    .unwrap();
    let snap = reg.server_snapshot(sid).unwrap().unwrap();
    assert!(snap.channels.iter().all(|c| c.channel.id != ch.id));
    assert!(snap.roles.iter().all(|r| r.id != role.id));
    assert_eq!(reg.installations_in_server(sid).unwrap().len(), 1);
}

pub fn revocations_are_written_to_the_outbox_with_the_change(reg: &dyn Backend) {
    use registry::Revocation;
    let seed = reg.seed_demo().unwrap().unwrap();
    let (app, sid) = (seed.app.id, seed.server_id);
    let start = reg.last_revocation_id().unwrap();
    assert_eq!(
        reg.installed(&[(app, sid), (app, sid + 1)]).unwrap(),
        vec![true, false]
    );
    reg.install(app, sid, 1 << 10).unwrap(); // narrower grant
    reg.install(app, sid, 1 << 10).unwrap(); // unchanged: nothing written
    reg.reset_token(app).unwrap();
    reg.set_approved_intents(app, 0).unwrap();
    assert!(reg.uninstall(app, sid).unwrap());
    assert!(!reg.uninstall(app, sid).unwrap()); // nothing left to revoke
    let got: Vec<Revocation> = reg
        .revocations_since(start, 100)
        .unwrap()
        .iter()
        .map(|r| r.revocation)
        .collect();
    assert_eq!(
        got,
        vec![
            Revocation::PermissionsChanged {
                application_id: app,
                server_id: sid
            },
            Revocation::TokenReset {
                application_id: app
            },
            Revocation::IntentsChanged {
                application_id: app
            },
            Revocation::Uninstalled {
                application_id: app,
                server_id: sid
            },
        ]
    );
    let all = reg.revocations_since(start, 100).unwrap();
    assert!(all
        .windows(2)
        .all(|w| w[0].id < w[1].id && w[0].at_ms <= w[1].at_ms));
    assert_eq!(
        reg.revocations_since(all[1].id, 1).unwrap()[0].revocation,
        got[2],
        "paging by id"
    );
    assert_eq!(reg.installed(&[(app, sid)]).unwrap(), vec![false]);
}

pub fn seed_demo_idempotent_and_reopen_keeps_data(store: &dyn Store) {
    let first = {
        let reg = store.open();
        let seed = reg.seed_demo().unwrap().unwrap();
        let token = seed.token.clone().unwrap();
        assert_eq!(reg.authenticate(&token).unwrap().unwrap(), seed.app);
        assert_eq!(
            seed.app.approved_intents,
            intents::MESSAGE_CONTENT | intents::GUILD_MEMBERS
        );
        let inst = reg
            .installation(seed.app.id, seed.server_id)
            .unwrap()
            .unwrap();
        assert_eq!(
            inst.permissions,
            VIEW_CHANNEL
                | SEND_MESSAGES
                | READ_MESSAGE_HISTORY
                | EMBED_LINKS
                | ADD_REACTIONS
                | MANAGE_ROLES
                | KICK_MEMBERS
                | BAN_MEMBERS
        );
        let snap = reg.server_snapshot(seed.server_id).unwrap().unwrap();
        assert_eq!(snap.server.name, "Demo Server");
        let general = snap
            .channels
            .iter()
            .find(|c| c.channel.id == seed.general_channel_id)
            .unwrap();
        assert_eq!(general.channel.name, "general");
        assert_eq!(general.channel.kind, channel_kind::TEXT);
        assert!(snap
            .channels
            .iter()
            .any(|c| c.channel.kind == channel_kind::CATEGORY));

        let rev = reg.revision().unwrap();
        let again = reg.seed_demo().unwrap().unwrap();
        assert_eq!(again.token, None);
        assert_eq!(
            (again.app.id, again.server_id, again.general_channel_id),
            (seed.app.id, seed.server_id, seed.general_channel_id)
        );
        assert_eq!(reg.revision().unwrap(), rev, "no-op seed changes nothing");
        (seed, token, rev)
    };
    let (seed, token, rev) = first;

    let reg = store.open();
    assert_eq!(reg.revision().unwrap(), rev);
    assert_eq!(reg.authenticate(&token).unwrap().unwrap().id, seed.app.id);
    assert_eq!(reg.list_applications().unwrap().len(), 1);
    assert_eq!(reg.list_servers().unwrap().len(), 1);
    let again = reg.seed_demo().unwrap().unwrap();
    assert_eq!(again.token, None);
    assert_eq!(again.server_id, seed.server_id);
    assert_eq!(
        reg.servers_for_shard(seed.app.id, 0, 1).unwrap(),
        vec![seed.server_id]
    );

    // Demo server gone: nothing to report, nothing recreated.
    reg.delete_server(seed.server_id).unwrap();
    assert_eq!(reg.seed_demo().unwrap(), None);
}

/// A node with the demo off only looks: finding the demo writes nothing,
/// and the demo application stays until it is deleted (then a node with
/// the demo on seeds a new one).
pub fn find_demo_reads_only_and_the_demo_stays_until_deleted(reg: &dyn Backend) {
    let rev = reg.revision().unwrap();
    assert_eq!(reg.find_demo().unwrap(), None);
    assert!(reg.list_applications().unwrap().is_empty());
    assert!(reg.list_servers().unwrap().is_empty());
    assert_eq!(reg.revision().unwrap(), rev, "looking wrote nothing");

    let seed = reg.seed_demo().unwrap().unwrap();
    let found = reg.find_demo().unwrap().unwrap();
    assert_eq!(found.app, seed.app);
    assert_eq!(found.server_id, Some(seed.server_id));
    let rev = reg.revision().unwrap();
    assert_eq!(reg.find_demo().unwrap(), Some(found.clone()));
    assert_eq!(reg.revision().unwrap(), rev);

    // delete-app removes the demo application and nothing else.
    let (other, _) = reg.create_application("other", 0, 1).unwrap();
    assert!(reg.delete_application(seed.app.id).unwrap());
    assert_eq!(reg.find_demo().unwrap(), None, "deleted: gone");
    assert_eq!(
        reg.list_applications().unwrap(),
        vec![other],
        "only the demo application was deleted"
    );
    // The demo on again: a new demo application and server.
    let again = reg.seed_demo().unwrap().unwrap();
    assert_ne!(again.app.id, seed.app.id);
    assert!(again.token.is_some());
    // Its server removed: the application is still found.
    reg.delete_server(again.server_id).unwrap();
    let found = reg.find_demo().unwrap().unwrap();
    assert_eq!((found.app.id, found.server_id), (again.app.id, None));
}

pub fn two_handles_on_one_store(store: &dyn Store) {
    // The CLI writes while the node's registry stays open.
    let node = store.open();
    let cli = store.open();
    let rev = node.revision().unwrap();
    let (app, token) = cli.create_application("from-cli", 0, 1).unwrap();
    assert!(node.revision().unwrap() > rev);
    assert_eq!(node.authenticate(&token).unwrap().unwrap().id, app.id);
    let s = node.create_server("S", 1).unwrap();
    cli.install(app.id, s.id, VIEW_CHANNEL).unwrap();
    assert!(node.installation(app.id, s.id).unwrap().is_some());
}
