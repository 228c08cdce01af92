//! What a worker knows of the applications whose REST requests it serves:
//! which token is which application (a cache, so a bad token costs one
//! registry round trip per `BAD_TOKEN_MS`, not one per request), and each
//! application's leased view of its servers: the same `GuildAccess`
//! (per-channel permission bits from `entitlement::channel_permissions`)
//! that its gateway sessions filter events with, updated by the same inbox
//! messages at the same moment, and rebuilt every `REFRESH_MS` (new
//! installations have no message of their own).
//!
//! Bounds: `MAX_TOKENS` cached tokens and `MAX_VIEWS` views per worker
//! (the least recently used known token, or any bad one, is forgotten
//! first); at most `MAX_WAITERS` connections wait on one token's lookup,
//! the rest get 503.

use std::collections::HashMap;

use proto::{AppId, ChannelId, ServerId};

use crate::delivery::ConnKey;
use crate::protocol::bot_user::BotUser;
use crate::protocol::session::GuildAccess;

pub const MAX_TOKENS: usize = 4096;
pub const MAX_VIEWS: usize = 4096;
pub const MAX_WAITERS: usize = 256;
/// A token the registry refused is refused from the cache for this long.
pub const BAD_TOKEN_MS: u64 = 10_000;
/// A view is rebuilt from the registry this often by default
/// (`rest.view_refresh_ms`), so an installation made since (a new server)
/// becomes visible to the application's REST requests.
pub const REFRESH_MS: u64 = 60_000;
/// Refreshes a worker asks for per housekeeping tick, at most.
pub const REFRESHES_PER_TICK: usize = 16;
/// A lookup the registry has not answered in this long is given up (its
/// waiters get 503) so a new request can ask again.
pub const LOOKUP_TIMEOUT_MS: u64 = 10_000;

/// One application's view, as the registry leased it.
#[derive(Clone, Debug)]
pub struct AppView {
    pub app: AppId,
    /// The bot user, from the registry: the author of what it posts.
    pub bot: BotUser,
    pub approved_intents: u64,
    /// Sorted by server id.
    pub guilds: Vec<GuildAccess>,
    /// (channel, index into `guilds`), sorted by channel.
    channels: Vec<(ChannelId, u32)>,
    /// When a refresh was last asked for (Unix ms).
    pub refresh_asked_ms: u64,
    /// The bot's direct-message channels and the person in each, sorted by
    /// channel, at most `MAX_DMS` (the registry's, as of the last refresh,
    /// plus those opened through this worker since).
    dms: Vec<(ChannelId, u64)>,
}

/// DM channels a view holds; past it the oldest-id channels are forgotten
/// (a bot reopens them with `POST /users/@me/channels`).
pub const MAX_DMS: usize = 10_000;

impl AppView {
    pub fn new(
        app: AppId,
        bot: BotUser,
        approved_intents: u64,
        mut guilds: Vec<GuildAccess>,
    ) -> AppView {
        guilds.sort_by_key(|g| g.id);
        let mut v = AppView {
            app,
            bot,
            approved_intents,
            guilds,
            channels: Vec::new(),
            refresh_asked_ms: 0,
            dms: Vec::new(),
        };
        v.reindex();
        v
    }

    fn reindex(&mut self) {
        self.channels.clear();
        for (i, g) in self.guilds.iter().enumerate() {
            self.channels
                .extend(g.channels.iter().map(|&(c, _)| (c, i as u32)));
        }
        self.channels.sort_unstable();
    }

    /// The server a channel belongs to, if the bot is installed there and
    /// its lease holds at `now_ms`.
    pub fn guild_of_channel(&self, channel: ChannelId, now_ms: u64) -> Option<&GuildAccess> {
        let i = self.channels.binary_search_by_key(&channel, |c| c.0).ok()?;
        let g = &self.guilds[self.channels[i].1 as usize];
        (g.lease_until_ms >= now_ms).then_some(g)
    }

    pub fn guild(&self, id: ServerId, now_ms: u64) -> Option<&GuildAccess> {
        let i = self.guilds.binary_search_by_key(&id, |g| g.id).ok()?;
        let g = &self.guilds[i];
        (g.lease_until_ms >= now_ms).then_some(g)
    }

    /// The person at the other end of a DM channel of the bot.
    pub fn dm_peer(&self, channel: ChannelId) -> Option<u64> {
        let i = self.dms.binary_search_by_key(&channel, |d| d.0).ok()?;
        Some(self.dms[i].1)
    }

    /// Learn a DM channel (idempotent; bounded by `MAX_DMS`).
    pub fn add_dm(&mut self, channel: ChannelId, peer: u64) {
        if let Err(i) = self.dms.binary_search_by_key(&channel, |d| d.0) {
            self.dms.insert(i, (channel, peer));
            if self.dms.len() > MAX_DMS {
                self.dms.remove(0);
            }
        }
    }

    /// The earliest lease among the view's servers (u64::MAX: none).
    pub fn earliest_lease(&self) -> u64 {
        self.guilds
            .iter()
            .map(|g| g.lease_until_ms)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// New permissions for one server (a GUILD_STATE change or a changed
    /// grant); the lease stays as it was.
    pub fn set_access(&mut self, access: &GuildAccess) {
        if let Ok(i) = self.guilds.binary_search_by_key(&access.id, |g| g.id) {
            let lease = self.guilds[i].lease_until_ms;
            self.guilds[i] = access.clone();
            self.guilds[i].lease_until_ms = lease;
            self.reindex();
        }
    }

    pub fn revoke_server(&mut self, id: ServerId) {
        if let Ok(i) = self.guilds.binary_search_by_key(&id, |g| g.id) {
            self.guilds.remove(i);
            self.reindex();
        }
    }

    pub fn renew(&mut self, pairs: &[(AppId, ServerId)], until_ms: u64) {
        for g in &mut self.guilds {
            if pairs.binary_search(&(self.app, g.id)).is_ok() {
                g.lease_until_ms = g.lease_until_ms.max(until_ms);
            }
        }
    }
}

/// A token's standing in the cache.
#[derive(Debug)]
pub enum Auth {
    /// Asked the registry at `since_ms`; these connections wait.
    Pending {
        since_ms: u64,
        waiters: Vec<ConnKey>,
    },
    Known {
        app: AppId,
        used_ms: u64,
    },
    Bad {
        until_ms: u64,
    },
}

/// What a request's token is, as far as the cache knows.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Known(AppId),
    Bad,
    /// Ask the registry (this connection is the first waiter).
    Ask,
    /// A lookup is under way: this connection waits for it.
    Wait,
    /// Too many waiting (or the cache is full of lookups): 503.
    Busy,
}

pub struct Views {
    tokens: HashMap<[u8; 32], Auth>,
    pub apps: HashMap<AppId, AppView>,
    refresh_ms: u64,
}

impl Default for Views {
    fn default() -> Self {
        Views::new()
    }
}

impl Views {
    pub fn new() -> Views {
        Views::with_refresh(REFRESH_MS)
    }

    pub fn with_refresh(refresh_ms: u64) -> Views {
        Views {
            tokens: HashMap::with_capacity(MAX_TOKENS),
            apps: HashMap::with_capacity(MAX_VIEWS),
            refresh_ms: refresh_ms.max(1),
        }
    }

    pub fn lookup(&mut self, digest: &[u8; 32], conn: ConnKey, now_ms: u64) -> Lookup {
        match self.tokens.get_mut(digest) {
            Some(Auth::Known { app, used_ms }) if self.apps.contains_key(app) => {
                *used_ms = now_ms;
                return Lookup::Known(*app);
            }
            Some(Auth::Bad { until_ms }) if *until_ms > now_ms => return Lookup::Bad,
            Some(Auth::Pending { since_ms, waiters }) if now_ms < *since_ms + LOOKUP_TIMEOUT_MS => {
                if waiters.len() >= MAX_WAITERS {
                    return Lookup::Busy;
                }
                waiters.push(conn);
                return Lookup::Wait;
            }
            _ => {}
        }
        if !self.tokens.contains_key(digest)
            && self.tokens.len() >= MAX_TOKENS
            && !self.evict(now_ms)
        {
            return Lookup::Busy;
        }
        self.tokens.insert(
            *digest,
            Auth::Pending {
                since_ms: now_ms,
                waiters: vec![conn],
            },
        );
        Lookup::Ask
    }

    /// Forget one entry to make room: a bad or stale one, else the least
    /// recently used known token. False if every entry is a live lookup.
    fn evict(&mut self, now_ms: u64) -> bool {
        let victim = self
            .tokens
            .iter()
            .filter_map(|(d, a)| match a {
                Auth::Bad { .. } => Some((0, *d)),
                Auth::Known { used_ms, .. } => Some((*used_ms, *d)),
                Auth::Pending { since_ms, .. } if now_ms >= since_ms + LOOKUP_TIMEOUT_MS => {
                    Some((0, *d))
                }
                Auth::Pending { .. } => None,
            })
            .min_by_key(|v| v.0)
            .map(|v| v.1);
        match victim {
            Some(d) => {
                if let Some(Auth::Known { app, .. }) = self.tokens.remove(&d) {
                    if !self
                        .tokens
                        .values()
                        .any(|a| matches!(a, Auth::Known { app: x, .. } if *x == app))
                    {
                        self.apps.remove(&app);
                    }
                }
                true
            }
            None => false,
        }
    }

    /// The registry answered a lookup: install the view (or mark the token
    /// bad) and hand back the connections that waited.
    pub fn resolved(
        &mut self,
        digest: &[u8; 32],
        view: Option<AppView>,
        now_ms: u64,
    ) -> Vec<ConnKey> {
        let waiters = match self.tokens.remove(digest) {
            Some(Auth::Pending { waiters, .. }) => waiters,
            _ => Vec::new(),
        };
        match view {
            Some(v) => {
                let app = v.app;
                if self.apps.len() >= MAX_VIEWS && !self.apps.contains_key(&app) {
                    // Make room: the view no cached token names, else any.
                    let drop = self.apps.keys().next().copied();
                    if let Some(d) = drop {
                        self.apps.remove(&d);
                        self.tokens
                            .retain(|_, a| !matches!(a, Auth::Known { app, .. } if *app == d));
                    }
                }
                self.apps.insert(app, v);
                self.tokens.insert(
                    *digest,
                    Auth::Known {
                        app,
                        used_ms: now_ms,
                    },
                );
            }
            None => {
                self.tokens.insert(
                    *digest,
                    Auth::Bad {
                        until_ms: now_ms + BAD_TOKEN_MS,
                    },
                );
            }
        }
        waiters
    }

    /// The registry could not answer (unavailable): the waiters get 503 and
    /// the next request asks again.
    pub fn failed(&mut self, digest: &[u8; 32]) -> Vec<ConnKey> {
        match self.tokens.remove(digest) {
            Some(Auth::Pending { waiters, .. }) => waiters,
            _ => Vec::new(),
        }
    }

    /// A token was reset: forget the application and every token naming it.
    pub fn forget_app(&mut self, app: AppId) {
        self.apps.remove(&app);
        self.tokens
            .retain(|_, a| !matches!(a, Auth::Known { app: x, .. } if *x == app));
    }

    /// Append every (application, server) pair the views hold a lease for,
    /// keeping `out` sorted and without duplicates.
    pub fn lease_pairs(&self, out: &mut Vec<(AppId, ServerId)>) {
        for v in self.apps.values() {
            out.extend(v.guilds.iter().map(|g| (v.app, g.id)));
        }
        out.sort_unstable();
        out.dedup();
    }

    pub fn renew(&mut self, pairs: &[(AppId, ServerId)], until_ms: u64) {
        for v in self.apps.values_mut() {
            v.renew(pairs, until_ms);
        }
    }

    /// New permissions of the bots installed in a server (sorted by app).
    pub fn update_access(&mut self, server: ServerId, by_app: &[(AppId, GuildAccess)]) {
        for (app, access) in by_app {
            if let Some(v) = self.apps.get_mut(app) {
                debug_assert_eq!(access.id, server);
                v.set_access(access);
            }
        }
    }

    pub fn set_access(&mut self, app: AppId, access: &GuildAccess) {
        if let Some(v) = self.apps.get_mut(&app) {
            v.set_access(access);
        }
    }

    pub fn revoke_server(&mut self, app: AppId, server: ServerId) {
        if let Some(v) = self.apps.get_mut(&app) {
            v.revoke_server(server);
        }
    }

    /// A refreshed view replaces the old one (tokens keep pointing at it).
    pub fn refreshed(&mut self, mut view: AppView) {
        if let Some(v) = self.apps.get_mut(&view.app) {
            view.refresh_asked_ms = v.refresh_asked_ms;
            *v = view;
        }
    }

    /// The views due for a refresh at `now_ms` (every `refresh_ms`; at most
    /// `REFRESHES_PER_TICK`),
    /// marked as asked.
    pub fn due_for_refresh(&mut self, now_ms: u64, out: &mut Vec<AppId>) {
        out.clear();
        for v in self.apps.values_mut() {
            if out.len() == REFRESHES_PER_TICK {
                break;
            }
            if v.refresh_asked_ms == 0 {
                v.refresh_asked_ms = now_ms; // fetched just now
            } else if now_ms >= v.refresh_asked_ms + self.refresh_ms {
                v.refresh_asked_ms = now_ms;
                out.push(v.app);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(slot: u32) -> ConnKey {
        ConnKey {
            ring: 0,
            gen: 1,
            slot,
        }
    }

    fn view(app: u64) -> AppView {
        AppView::new(
            AppId(app),
            BotUser::new(50, "bot"),
            0,
            vec![GuildAccess {
                id: ServerId(1),
                channels: vec![(ChannelId(10), 1), (ChannelId(11), 2)],
                lease_until_ms: 1_000,
            }],
        )
    }

    #[test]
    fn one_lookup_per_token_then_cached() {
        let mut v = Views::new();
        let d = [7u8; 32];
        assert_eq!(v.lookup(&d, key(1), 0), Lookup::Ask);
        assert_eq!(v.lookup(&d, key(2), 1), Lookup::Wait);
        let w = v.resolved(&d, Some(view(9)), 2);
        assert_eq!(w, vec![key(1), key(2)]);
        assert_eq!(v.lookup(&d, key(3), 3), Lookup::Known(AppId(9)));
        let bad = [8u8; 32];
        assert_eq!(v.lookup(&bad, key(4), 0), Lookup::Ask);
        v.resolved(&bad, None, 0);
        assert_eq!(
            v.lookup(&bad, key(4), BAD_TOKEN_MS - 1),
            Lookup::Bad,
            "no second round trip"
        );
        assert_eq!(
            v.lookup(&bad, key(4), BAD_TOKEN_MS),
            Lookup::Ask,
            "asked again after the period"
        );
        v.forget_app(AppId(9));
        assert_eq!(
            v.lookup(&d, key(5), 10),
            Lookup::Ask,
            "a reset token is looked up again"
        );
    }

    #[test]
    fn channels_and_leases() {
        let mut a = view(9);
        assert_eq!(
            a.guild_of_channel(ChannelId(11), 1_000).map(|g| g.id),
            Some(ServerId(1))
        );
        assert!(a.guild_of_channel(ChannelId(12), 0).is_none());
        assert!(
            a.guild_of_channel(ChannelId(11), 1_001).is_none(),
            "a lapsed lease sees nothing"
        );
        a.renew(&[(AppId(9), ServerId(1))], 5_000);
        assert!(a.guild_of_channel(ChannelId(11), 1_001).is_some());
        a.revoke_server(ServerId(1));
        assert!(a.guild_of_channel(ChannelId(10), 0).is_none());
    }

    #[test]
    fn views_are_refreshed_every_refresh_ms() {
        let mut v = Views::new();
        let d = [1u8; 32];
        v.lookup(&d, key(1), 0);
        v.resolved(&d, Some(view(9)), 0);
        let mut due = Vec::new();
        v.due_for_refresh(1_000, &mut due);
        assert!(due.is_empty(), "just fetched");
        v.due_for_refresh(1_000 + REFRESH_MS - 1, &mut due);
        assert!(due.is_empty());
        v.due_for_refresh(1_000 + REFRESH_MS, &mut due);
        assert_eq!(due, vec![AppId(9)]);
        v.due_for_refresh(1_000 + REFRESH_MS + 1, &mut due);
        assert!(due.is_empty(), "asked once per period");
        let mut wider = view(9);
        wider.guilds.push(GuildAccess {
            id: ServerId(2),
            channels: vec![(ChannelId(20), 1)],
            lease_until_ms: 5_000,
        });
        let wider = AppView::new(wider.app, BotUser::new(50, "bot"), 0, wider.guilds);
        v.refreshed(wider);
        assert!(
            v.apps[&AppId(9)]
                .guild_of_channel(ChannelId(20), 0)
                .is_some(),
            "a new server is visible"
        );
    }

    #[test]
    fn the_token_cache_is_bounded() {
        let mut v = Views::new();
        for i in 0..MAX_TOKENS as u32 {
            let mut d = [0u8; 32];
            d[..4].copy_from_slice(&i.to_le_bytes());
            assert_eq!(v.lookup(&d, key(i), 0), Lookup::Ask);
        }
        assert_eq!(
            v.lookup(&[0xff; 32], key(0), 1),
            Lookup::Busy,
            "all live lookups: refuse"
        );
        assert_eq!(
            v.lookup(&[0xff; 32], key(0), LOOKUP_TIMEOUT_MS),
            Lookup::Ask,
            "stale lookups give way"
        );
        assert!(v.tokens.len() <= MAX_TOKENS);
    }
}
