//! The demo data a node seeds at start-up (`--demo`), written once for both
//! backends over the store traits: app "demo-bot", server "Demo Server"
//! with a category and `#general`, the bot installed, and four people
//! ranked around the bot. The names are `crate::rules`' (the same on either
//! backend, so each finds the other's demo). A start-up concern only: the
//! operations it uses (`crate::ops`, `crate::members`) know nothing of it.

use crate::apps::create_application;
use crate::error::Result;
use crate::members::{add_member, create_user, set_member_roles, MemberStore};
use crate::model::*;
use crate::ops::{create_channel, create_role, create_server, install, InstallStore};
use crate::outbox::OutboxStore;
use crate::rules::{
    DEMO_APP, DEMO_CATEGORY, DEMO_CHANNEL, DEMO_GRANT, DEMO_MEMBER_ROLE, DEMO_MODERATOR_ROLE,
    DEMO_SERVER,
};

/// The demo application and its server, by the names [`seed_demo`] gives
/// them; nothing is written.
pub(crate) fn find_demo<S: InstallStore>(s: &mut S) -> Result<Option<DemoFound>> {
    let Some(app) = s.application_by_name(DEMO_APP)? else {
        return Ok(None);
    };
    let server_id = s.installed_server_named(app.id, DEMO_SERVER)?;
    Ok(Some(DemoFound { app, server_id }))
}

/// The same names on either backend, so each finds the other's demo.
pub(crate) fn seed_demo<S: InstallStore + MemberStore + OutboxStore>(
    s: &mut S,
) -> Result<Option<DemoSeed>> {
    if let Some(app) = s.application_by_name(DEMO_APP)? {
        let Some(server_id) = s.installed_server_named(app.id, DEMO_SERVER)? else {
            return Ok(None);
        };
        let general = s.find_channel(server_id, DEMO_CHANNEL, channel_kind::TEXT)?;
        return Ok(general.map(|general_channel_id| DemoSeed {
            app,
            token: None,
            server_id,
            general_channel_id,
        }));
    }
    let (app, token) = create_application(
        s,
        DEMO_APP,
        intents::MESSAGE_CONTENT | intents::GUILD_MEMBERS,
        DEFAULT_MAX_CONCURRENCY,
    )?;
    // People to act on: the owner (alice, above everyone), a moderator
    // ranked above the bot (carol) and two members ranked below it (bob,
    // dave), so moderation and the role hierarchy have cases to show.
    let alice = create_user(s, "alice")?;
    let server = create_server(s, DEMO_SERVER, alice.id)?;
    let category = create_channel(s, server.id, DEMO_CATEGORY, channel_kind::CATEGORY, None)?;
    let general = create_channel(
        s,
        server.id,
        DEMO_CHANNEL,
        channel_kind::TEXT,
        Some(category.id),
    )?;
    use permissions::*;
    let member_role = create_role(s, server.id, DEMO_MEMBER_ROLE, 0, false)?;
    install(
        s, app.id, server.id,
        // What a chat-and-moderation bot's invite asks for: read, write,
        // embed, react, and manage roles, kick and ban (below its rank).
        DEMO_GRANT,
    )?;
    let moderator = create_role(
        s,
        server.id,
        DEMO_MODERATOR_ROLE,
        KICK_MEMBERS | BAN_MEMBERS | MANAGE_MESSAGES | MANAGE_ROLES,
        false,
    )?;
    for (name, role) in [
        ("alice", None),
        ("bob", Some(member_role.id)),
        ("carol", Some(moderator.id)),
        ("dave", Some(member_role.id)),
    ] {
        let user = if name == "alice" {
            alice.clone()
        } else {
            create_user(s, name)?
        };
        add_member(s, server.id, user.id)?;
        if let Some(r) = role {
            set_member_roles(s, server.id, user.id, &[r])?;
        }
    }
    Ok(Some(DemoSeed {
        app,
        token: Some(token),
        server_id: server.id,
        general_channel_id: general.id,
    }))
}
