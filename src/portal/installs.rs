//! Where the application is installed, read from the registry: each
//! server with the granted permission bits, and the channels the bot can
//! see there (its effective permissions, computed as the gateway does:
//! `delivery::entitlement::guild_access`). At most `MAX_SERVERS` servers
//! are shown (the total is told).

use proto::permissions::{ADMINISTRATOR, VIEW_CHANNEL};
use registry::Application;

use super::ctx::Ctx;
use crate::delivery::entitlement::guild_access;

pub const MAX_SERVERS: usize = 100;
/// Channels shown per server.
pub const MAX_CHANNELS: usize = 50;

pub struct Install {
    pub server_id: u64,
    pub name: String,
    pub granted: u64,
    /// (channel id, name, the bot's permissions) of the channels it sees.
    pub channels: Vec<(u64, String, u64)>,
}

/// The installations (at most `MAX_SERVERS`) and how many there are.
pub fn of_app(ctx: &Ctx, app: &Application) -> Result<(Vec<Install>, usize), String> {
    let reg = ctx.registry();
    let all = reg
        .installations_of_app(app.id)
        .map_err(|e| e.to_string())?;
    let total = all.len();
    let mut out = Vec::new();
    for inst in all.iter().take(MAX_SERVERS) {
        let Some(snap) = reg
            .server_snapshot(inst.server_id)
            .map_err(|e| e.to_string())?
        else {
            continue;
        };
        let access = guild_access(&snap, inst, app.bot_user_id);
        let channels = snap
            .channels
            .iter()
            // Categories (kind 4) hold no messages.
            .filter(|c| c.channel.kind != 4)
            .filter_map(|c| {
                let p = access.channel_permissions(proto::ChannelId(c.channel.id))?;
                (p & (VIEW_CHANNEL | ADMINISTRATOR) != 0)
                    .then(|| (c.channel.id, c.channel.name.clone(), p))
            })
            .take(MAX_CHANNELS)
            .collect();
        out.push(Install {
            server_id: inst.server_id,
            name: snap.server.name.clone(),
            granted: inst.permissions,
            channels,
        });
    }
    Ok((out, total))
}

/// The server of `channel` if the application's bot can see it there.
pub fn visible(ctx: &Ctx, app: &Application, channel: u64) -> Result<Option<u64>, String> {
    let (installs, _) = of_app(ctx, app)?;
    Ok(installs
        .iter()
        .find(|i| i.channels.iter().any(|c| c.0 == channel))
        .map(|i| i.server_id))
}
