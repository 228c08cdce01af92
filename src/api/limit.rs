//! Rate limits of the REST edge (ADR-09, REST.md "Rate-limit headers",
//! "429"): where a REST request is limited.
//!
//! ```text
//!   request (app, bucket, major) ──► banned? ──► restricted? ──► global window ──► bucket window ──► allowed
//!                                     429 user    429 user        429 global        429 user
//! ```
//!
//! - A window is fixed: it opens at the first request, holds `limit`
//!   requests, and closes `per_ms` later (what `X-RateLimit-Reset` names).
//!   With counters shared between nodes (`api::shared`, Redis) it opens
//!   at `now - now % per_ms` instead, so every node counts the same window,
//!   and the other nodes' count of it (`others`) counts as used; while
//!   Redis is unreachable each limit is the node's fallback share.
//!   Windows are keyed by (application, bucket, top-level resource); the
//!   global window by application (one bot token = one application).
//! - Invalid requests (401, 403, 429 other than scope `shared`) are counted
//!   per application over 10 minutes; past `invalid_limit` the application
//!   is restricted until the 10 minutes end. A token that keeps sending
//!   while limited (`ban_after` 429s within 10 s) is banned for `ban_secs`.
//!   Both answer 429 scope `user` with the time left: never a 401, which
//!   makes discord.js and twilight drop the token for good.
//! - Bounds: at most `MAX_WINDOWS` bucket windows and `MAX_APPS` per-app
//!   records per worker, allocated at start. A closed window carries no
//!   state, so a full table first forgets closed ones; if every one is open
//!   the request gets 429 scope `shared` for 1 s (not counted as invalid).
//!
//! Invariant: `remaining == limit - used` in every header we send, and
//! `used <= limit` there (`used` = ours + others', capped at the limit:
//! the others' count may pass it, see docs/rate-limits.md for the bound).

use std::collections::HashMap;

use super::shared::{self, Answer, Delta, Key, Link, Sharing};

pub use super::buckets::{Bucket, BucketDef};
pub use super::headers::{body_429, render, RateHeaders, Scope};

pub const MAX_WINDOWS: usize = 1 << 16;
pub const MAX_APPS: usize = 1 << 14;
const INVALID_WINDOW_MS: u64 = 10 * 60 * 1000;
/// A request that finds its application's global window full within this
/// long of its close is counted in the next window instead of refused.
/// A library keeps its own count of the global limit (discord.js: 50 per
/// second from when it *sends* a window's first request) and learns
/// nothing of ours from a 200, while our window opens when that request
/// is *decided*, after its trip and its lookups: the library's window
/// leads ours by that much, and it starts its next window's requests
/// (discord.js waits 50 ms more) while ours is still open. Windows still
/// tile without overlap, so no application passes the limit per window
/// or on average (docs/rate-limits.md).
const GLOBAL_LEAD_MS: u64 = 250;
const HAMMER_WINDOW_MS: u64 = 10_000;

/// Limits a node applies; `docs/configuration.md` documents the flags.
#[derive(Clone, Copy, Debug)]
pub struct LimitConfig {
    /// Multiplies every bucket's `limit` (1 = the published table; a load
    /// test of the edge itself raises it). At least 1.
    pub scale: u32,
    /// Requests per second per application across all routes.
    pub global_per_s: u32,
    /// Invalid requests per application per 10 minutes before a restriction.
    pub invalid_limit: u32,
    /// 429s within 10 s before a token is banned.
    pub ban_after: u32,
    pub ban_secs: u64,
}

impl From<&crate::config::Rest> for LimitConfig {
    fn from(r: &crate::config::Rest) -> Self {
        LimitConfig {
            scale: r.limit_scale,
            global_per_s: r.global_per_second,
            invalid_limit: r.invalid_per_10_minutes,
            ban_after: r.ban_after_429s,
            ban_secs: r.ban_seconds,
        }
    }
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig::from(&crate::config::Rest::default())
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Decision {
    Allow(RateHeaders),
    /// 429: wait `retry_after_ms`.
    Limited {
        headers: RateHeaders,
        retry_after_ms: u64,
    },
}

#[derive(Clone, Copy, Debug, Default)]
struct Window {
    start_ms: u64,
    per_ms: u64,
    used: u32,
    /// The other nodes' count (shared counters; 0 otherwise).
    others: u32,
}

impl Window {
    /// A fresh window holding `now`: opening now, or on the shared grid.
    fn fresh(now: u64, per_ms: u64, aligned: bool) -> Window {
        let start_ms = if aligned {
            shared::aligned_start(now, per_ms)
        } else {
            now
        };
        Window {
            start_ms,
            per_ms,
            ..Window::default()
        }
    }
    fn open(&self, now: u64) -> bool {
        now < self.start_ms + self.per_ms
    }
    fn count(&self) -> u32 {
        self.used.saturating_add(self.others)
    }
    fn reset_ms(&self) -> u64 {
        self.start_ms + self.per_ms
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct AppState {
    global: Window,
    invalid: Window,
    hammer: Window,
    banned_until_ms: u64,
}

/// What the limiter counted (read into the node's metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitCounts {
    pub limited_user: u64,
    pub limited_global: u64,
    pub limited_shared: u64,
    pub restrictions: u64,
    pub bans: u64,
}

pub struct Limiter {
    cfg: LimitConfig,
    windows: HashMap<(u64, Bucket, u64), Window>,
    apps: HashMap<u64, AppState>,
    pub counts: LimitCounts,
    /// Counters shared with other nodes (None: this node's alone).
    link: Option<Link>,
}

impl Limiter {
    pub fn new(cfg: LimitConfig) -> Limiter {
        Limiter {
            cfg: LimitConfig {
                scale: cfg.scale.max(1),
                global_per_s: cfg.global_per_s.max(1),
                ..cfg
            },
            windows: HashMap::with_capacity(MAX_WINDOWS),
            apps: HashMap::with_capacity(MAX_APPS),
            counts: LimitCounts::default(),
            link: None,
        }
    }

    /// Share this limiter's windows with other nodes through `link`.
    pub fn with_link(self, link: Option<Link>) -> Limiter {
        Limiter { link, ..self }
    }

    /// How this node counts now (None: not shared).
    pub fn sharing(&self) -> Option<Sharing> {
        self.link.as_ref().map(|l| l.sharing)
    }

    /// A round of the counters thread: the node's mode, and the other
    /// nodes' counts of windows we hold (a window that closed or reopened
    /// since is not touched). Falling back forgets every `others`.
    pub fn apply(&mut self, a: &Answer) {
        let Some(link) = self.link.as_mut() else {
            return;
        };
        if a.sharing != Sharing::Shared {
            if link.sharing == Sharing::Shared {
                self.windows.values_mut().for_each(|w| w.others = 0);
                self.apps.values_mut().for_each(|s| s.global.others = 0);
            }
            link.sharing = a.sharing;
            return;
        }
        link.sharing = Sharing::Shared;
        for r in &a.remote {
            let k = r.key;
            let w = match k.bucket {
                Some(b) => self.windows.get_mut(&(k.app, b, k.major)),
                None => self.apps.get_mut(&k.app).map(|s| &mut s.global),
            };
            if let Some(w) = w.filter(|w| w.start_ms == k.start_ms) {
                w.others = r.others;
            }
        }
    }

    /// Tell the counters thread of an admission into `w`.
    fn note(&self, app: u64, bucket: Option<Bucket>, major: u64, w: &Window) {
        if let Some(l) = &self.link {
            let key = Key {
                app,
                bucket,
                major,
                start_ms: w.start_ms,
            };
            l.outbox.note(Delta {
                worker: l.worker,
                key,
                end_ms: w.reset_ms(),
            });
        }
    }

    pub fn config(&self) -> LimitConfig {
        self.cfg
    }

    /// Bucket `b`'s limit on this node (the fallback share while Redis
    /// is unreachable) and its period.
    fn limit_of(&self, b: Bucket) -> (u32, u64) {
        let d = b.def();
        (self.share(d.limit.saturating_mul(self.cfg.scale)), d.per_ms)
    }

    fn share(&self, limit: u32) -> u32 {
        shared::share(limit, self.sharing().unwrap_or_default())
    }

    /// Headers for a response of bucket `b` that was not counted (e.g. a
    /// refusal before the limiter): the window as it stands.
    pub fn peek(&self, app: u64, b: Bucket, major: u64, now: u64) -> RateHeaders {
        let (limit, per_ms) = self.limit_of(b);
        let w = self
            .windows
            .get(&(app, b, major))
            .copied()
            .filter(|w| w.open(now))
            .unwrap_or(Window::fresh(now, per_ms, self.link.is_some()));
        headers(b, limit, &w, now, Scope::User)
    }

    /// Count one request of `app` on bucket `b` for resource `major`.
    pub fn check(&mut self, app: u64, b: Bucket, major: u64, now: u64) -> Decision {
        let (limit, per_ms) = self.limit_of(b);
        let (invalid_limit, global_per_s) =
            (self.cfg.invalid_limit, self.share(self.cfg.global_per_s));
        let aligned = self.link.is_some();
        let Some(st) = self.app_state(app, now) else {
            return self.shared(b, limit, now);
        };
        if st.banned_until_ms > now {
            let until = st.banned_until_ms;
            return self.user_limited(b, limit, until, now);
        }
        if st.invalid.used >= invalid_limit && st.invalid.open(now) {
            let until = st.invalid.reset_ms();
            return self.user_limited(b, limit, until, now);
        }
        // The global window: `global_per_s` per second per application.
        let g = &mut st.global;
        if !g.open(now) {
            *g = Window::fresh(now, 1_000, aligned);
        }
        if g.count() >= global_per_s && g.reset_ms() - now <= GLOBAL_LEAD_MS {
            // Full, and about to close: the request counts in the next
            // window, which opens where this one closes (GLOBAL_LEAD_MS).
            *g = Window {
                start_ms: g.reset_ms(),
                per_ms: 1_000,
                ..Window::default()
            };
        }
        if g.count() >= global_per_s {
            let until = g.reset_ms();
            self.counts.limited_global += 1;
            let w = self
                .windows
                .get(&(app, b, major))
                .copied()
                .filter(|w| w.open(now));
            let w = w.unwrap_or(Window::fresh(now, per_ms, aligned));
            self.hammered(app, now);
            return Decision::Limited {
                headers: headers(b, limit, &w, now, Scope::Global),
                retry_after_ms: until - now,
            };
        }
        // The bucket window.
        let key = (app, b, major);
        if !self.windows.contains_key(&key) && self.windows.len() >= MAX_WINDOWS {
            self.windows.retain(|_, w| w.open(now));
            if self.windows.len() >= MAX_WINDOWS {
                return self.shared(b, limit, now);
            }
        }
        let w = self.windows.entry(key).or_default();
        if !w.open(now) {
            *w = Window::fresh(now, per_ms, aligned);
        }
        if w.count() >= limit {
            let h = headers(b, limit, w, now, Scope::User);
            self.counts.limited_user += 1;
            self.hammered(app, now);
            return Decision::Limited {
                headers: h,
                retry_after_ms: h.reset_after_ms.max(1),
            };
        }
        w.used += 1;
        let (h, w) = (headers(b, limit, w, now, Scope::User), *w);
        let g = &mut self.apps.get_mut(&app).expect("present").global;
        g.used += 1;
        let g = *g;
        self.note(app, Some(b), major, &w);
        self.note(app, None, 0, &g);
        Decision::Allow(h)
    }

    /// Count an invalid request (a 401, 403 or a 429 of scope user/global).
    pub fn invalid(&mut self, app: u64, now: u64) {
        let limit = self.cfg.invalid_limit;
        let Some(st) = self.app_state(app, now) else {
            return;
        };
        if !st.invalid.open(now) {
            st.invalid = Window::fresh(now, INVALID_WINDOW_MS, false);
        }
        st.invalid.used = st.invalid.used.saturating_add(1);
        if st.invalid.used == limit {
            self.counts.restrictions += 1;
        }
    }

    /// The application is banned until (Unix ms), if it is.
    pub fn banned_until(&self, app: u64, now: u64) -> Option<u64> {
        self.apps
            .get(&app)
            .map(|s| s.banned_until_ms)
            .filter(|&u| u > now)
    }

    fn hammered(&mut self, app: u64, now: u64) {
        let (after, secs) = (self.cfg.ban_after, self.cfg.ban_secs);
        let Some(st) = self.apps.get_mut(&app) else {
            return;
        };
        if !st.hammer.open(now) {
            st.hammer = Window::fresh(now, HAMMER_WINDOW_MS, false);
        }
        st.hammer.used += 1;
        if st.hammer.used >= after && st.banned_until_ms <= now {
            st.banned_until_ms = now + secs * 1000;
            st.hammer.used = 0;
            self.counts.bans += 1;
        }
    }

    fn app_state(&mut self, app: u64, now: u64) -> Option<&mut AppState> {
        if !self.apps.contains_key(&app) && self.apps.len() >= MAX_APPS {
            self.apps.retain(|_, s| {
                s.banned_until_ms > now || s.invalid.open(now) || s.global.open(now)
            });
            if self.apps.len() >= MAX_APPS {
                return None;
            }
        }
        Some(self.apps.entry(app).or_default())
    }

    /// A 429 of scope user until `until` (a ban or a restriction): the
    /// window shown is the time left, with nothing remaining.
    fn user_limited(&mut self, b: Bucket, limit: u32, until: u64, now: u64) -> Decision {
        self.counts.limited_user += 1;
        let w = Window {
            start_ms: now,
            per_ms: until - now,
            used: limit,
            others: 0,
        };
        Decision::Limited {
            headers: headers(b, limit, &w, now, Scope::User),
            retry_after_ms: until - now,
        }
    }

    fn shared(&mut self, b: Bucket, limit: u32, now: u64) -> Decision {
        self.counts.limited_shared += 1;
        let w = Window {
            start_ms: now,
            per_ms: 1_000,
            used: limit,
            others: 0,
        };
        Decision::Limited {
            headers: headers(b, limit, &w, now, Scope::Shared),
            retry_after_ms: 1_000,
        }
    }
}

fn headers(b: Bucket, limit: u32, w: &Window, now: u64, scope: Scope) -> RateHeaders {
    // Ours never pass the limit; with the others' they may (the bound of
    // docs/rate-limits.md), and a fallback share may be below what we
    // already counted: what we send is capped.
    let used = w.count().min(limit);
    RateHeaders {
        limit,
        remaining: limit - used,
        reset_ms: w.reset_ms(),
        reset_after_ms: w.reset_ms().saturating_sub(now),
        bucket: b.def().id,
        scope,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const APP: u64 = 9;

    fn allow(d: Decision) -> RateHeaders {
        match d {
            Decision::Allow(h) => h,
            other => panic!("expected Allow, got {other:?}"),
        }
    }

    #[test]
    fn a_window_counts_down_then_limits_until_reset() {
        let mut l = Limiter::new(LimitConfig::default());
        let t = 1_000_000;
        for i in 0..5 {
            let h = allow(l.check(APP, Bucket::MessageCreate, 1, t + i));
            assert_eq!((h.limit, h.remaining), (5, 4 - i as u32));
            assert_eq!(
                h.reset_ms,
                t + 5_000,
                "the window opened at the first request"
            );
            assert_eq!(h.scope, Scope::User);
        }
        match l.check(APP, Bucket::MessageCreate, 1, t + 1_000) {
            Decision::Limited {
                headers,
                retry_after_ms,
            } => {
                assert_eq!(headers.remaining, 0);
                assert_eq!(retry_after_ms, 4_000);
                assert_eq!(headers.scope, Scope::User);
            }
            d => panic!("{d:?}"),
        }
        // Another channel is another window under the same bucket id.
        let h = allow(l.check(APP, Bucket::MessageCreate, 2, t + 1_000));
        assert_eq!(h.remaining, 4);
        assert_eq!(h.bucket, Bucket::MessageCreate.def().id);
        // After the reset, a fresh window.
        let h = allow(l.check(APP, Bucket::MessageCreate, 1, t + 5_000));
        assert_eq!((h.remaining, h.reset_ms), (4, t + 10_000));
        assert_eq!(l.counts.limited_user, 1);
    }

    #[test]
    fn the_global_limit_is_per_application() {
        let mut l = Limiter::new(LimitConfig {
            scale: 1000,
            ..LimitConfig::default()
        });
        let t = 5_000_000;
        for i in 0..50 {
            allow(l.check(APP, Bucket::MessageCreate, i, t));
        }
        match l.check(APP, Bucket::MessageCreate, 99, t + 10) {
            Decision::Limited {
                headers,
                retry_after_ms,
            } => {
                assert_eq!(headers.scope, Scope::Global);
                assert_eq!(retry_after_ms, 990);
            }
            d => panic!("{d:?}"),
        }
        allow(l.check(APP + 1, Bucket::MessageCreate, 1, t + 10));
        allow(l.check(APP, Bucket::MessageCreate, 1, t + 1_000));
        assert_eq!(l.counts.limited_global, 1);
    }

    #[test]
    fn a_full_global_window_about_to_close_counts_a_request_in_the_next() {
        let mut l = Limiter::new(LimitConfig {
            scale: 1000,
            ..LimitConfig::default()
        });
        let t = 7_000_000;
        for i in 0..50 {
            allow(l.check(APP, Bucket::MessageCreate, i, t));
        }
        // Full and 251 ms from its close: refused until the close.
        let early = t + 1_000 - GLOBAL_LEAD_MS - 1;
        match l.check(APP, Bucket::MessageCreate, 99, early) {
            Decision::Limited { retry_after_ms, .. } => {
                assert_eq!(retry_after_ms, GLOBAL_LEAD_MS + 1)
            }
            d => panic!("{d:?}"),
        }
        // Within GLOBAL_LEAD_MS of it: the next window [t + 1000, t + 2000)
        // takes it, and holds 50 in all.
        let late = t + 1_000 - GLOBAL_LEAD_MS;
        for i in 0..50 {
            allow(l.check(APP, Bucket::MessageCreate, 100 + i, late));
        }
        match l.check(APP, Bucket::MessageCreate, 200, t + 1_500) {
            Decision::Limited {
                headers,
                retry_after_ms,
            } => {
                assert_eq!(headers.scope, Scope::Global);
                assert_eq!(retry_after_ms, 500, "until the next window closes");
            }
            d => panic!("{d:?}"),
        }
        // That window is not taken early again: 251 ms before its close, refused.
        let d = l.check(
            APP,
            Bucket::MessageCreate,
            201,
            t + 2_000 - GLOBAL_LEAD_MS - 1,
        );
        assert!(matches!(d, Decision::Limited { .. }), "{d:?}");
        allow(l.check(APP, Bucket::MessageCreate, 202, t + 2_000 - GLOBAL_LEAD_MS));
        assert_eq!(l.counts.limited_global, 3);
    }

    #[test]
    fn hammering_after_429s_is_a_timed_ban_not_a_401() {
        let mut l = Limiter::new(LimitConfig {
            ban_after: 10,
            ban_secs: 30,
            ..LimitConfig::default()
        });
        let t = 9_000_000;
        allow(l.check(APP, Bucket::BulkDelete, 1, t));
        for _ in 0..10 {
            assert!(matches!(
                l.check(APP, Bucket::BulkDelete, 1, t + 1),
                Decision::Limited { .. }
            ));
        }
        assert_eq!(l.counts.bans, 1);
        assert_eq!(l.banned_until(APP, t + 1), Some(t + 1 + 30_000));
        // Banned: even another bucket is refused, with the time left.
        match l.check(APP, Bucket::GuildRead, 5, t + 10_001) {
            Decision::Limited {
                headers,
                retry_after_ms,
            } => {
                assert_eq!(headers.scope, Scope::User);
                assert_eq!(retry_after_ms, 20_000);
            }
            d => panic!("{d:?}"),
        }
        allow(l.check(APP, Bucket::GuildRead, 5, t + 30_001));
    }

    #[test]
    fn invalid_requests_restrict_for_the_rest_of_ten_minutes() {
        let mut l = Limiter::new(LimitConfig {
            invalid_limit: 3,
            ..LimitConfig::default()
        });
        let t = 1_000;
        for _ in 0..3 {
            l.invalid(APP, t);
        }
        assert_eq!(l.counts.restrictions, 1);
        assert!(matches!(
            l.check(APP, Bucket::GuildRead, 1, t + 60_000),
            Decision::Limited { retry_after_ms, .. } if retry_after_ms == INVALID_WINDOW_MS - 60_000
        ));
        allow(l.check(APP, Bucket::GuildRead, 1, t + INVALID_WINDOW_MS));
    }

    #[test]
    fn shared_windows_line_up_count_the_others_and_fall_back_to_a_share() {
        use crate::api::shared::{Outbox, Remote};
        let (outbox, rx) = Outbox::new(16);
        let link = Link {
            outbox: outbox.clone(),
            worker: 3,
            sharing: Sharing::Shared,
        };
        let mut l = Limiter::new(LimitConfig::default()).with_link(Some(link));
        let (t, b) = (1_002_345, Bucket::MessageCreate);
        let h = allow(l.check(APP, b, 1, t));
        assert_eq!((h.remaining, h.reset_ms), (4, 1_005_000), "on the 5 s grid");
        let sent: Vec<Delta> = rx.try_iter().collect();
        assert_eq!(sent.len(), 2, "the bucket window and the global one");
        assert_eq!((sent[0].worker, sent[0].end_ms), (3, 1_005_000));
        let key = sent[0].key;
        assert_eq!((key.bucket, key.start_ms), (Some(b), 1_000_000));
        assert_eq!(
            (sent[1].key.bucket, sent[1].key.start_ms),
            (None, 1_002_000)
        );
        // The others counted 3 of this window (and 9 of one that closed).
        let remote = |key, others| Remote { key, others };
        let old = Key {
            start_ms: 995_000,
            ..key
        };
        l.apply(&Answer {
            sharing: Sharing::Shared,
            remote: vec![remote(key, 3), remote(old, 9)],
        });
        let h = allow(l.check(APP, b, 1, t + 1));
        assert_eq!((h.limit, h.remaining), (5, 0), "1 + 1 ours, 3 theirs");
        assert!(matches!(
            l.check(APP, b, 1, t + 2),
            Decision::Limited { .. }
        ));
        // Theirs may pass the limit: what we send stays within it.
        l.apply(&Answer {
            sharing: Sharing::Shared,
            remote: vec![remote(key, 40)],
        });
        match l.check(APP, b, 1, t + 3) {
            Decision::Limited { headers, .. } => {
                assert_eq!((headers.limit, headers.remaining), (5, 0))
            }
            d => panic!("{d:?}"),
        }
        // Redis unreachable, two nodes known: a share of ceil(5 / 2) = 3,
        // theirs forgotten; ours (2) count.
        l.apply(&Answer {
            sharing: Sharing::Fallback { nodes: 2 },
            remote: vec![],
        });
        let h = allow(l.check(APP, b, 1, t + 4));
        assert_eq!((h.limit, h.remaining), (3, 0));
        assert!(matches!(
            l.check(APP, b, 1, t + 5),
            Decision::Limited { .. }
        ));
        // N unknown: the full limit.
        l.apply(&Answer {
            sharing: Sharing::Fallback { nodes: 0 },
            remote: vec![],
        });
        assert_eq!(allow(l.check(APP, b, 1, t + 6)).remaining, 1);
        // A full queue never blocks the worker: the delta is dropped, counted.
        while outbox.unshared.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            allow(l.check(APP, Bucket::GuildRead, 2, t + 7));
            l.windows.clear();
        }
        // Without a link nothing lines up: the window opens at the first request.
        let mut solo = Limiter::new(LimitConfig::default());
        assert_eq!(allow(solo.check(APP, b, 1, t)).reset_ms, t + 5_000);
        assert_eq!(solo.sharing(), None);
    }

    #[test]
    fn a_full_table_forgets_closed_windows_then_answers_shared() {
        let mut l = Limiter::new(LimitConfig {
            scale: 1000,
            global_per_s: u32::MAX,
            ..LimitConfig::default()
        });
        for i in 0..MAX_WINDOWS as u64 {
            allow(l.check(APP, Bucket::GuildRead, i, 0));
        }
        assert!(matches!(
            l.check(APP, Bucket::GuildRead, u64::MAX, 10),
            Decision::Limited { headers, .. } if headers.scope == Scope::Shared
        ));
        // Once those windows closed, there is room again.
        allow(l.check(APP, Bucket::GuildRead, u64::MAX, 1_000));
        assert!(l.windows.len() <= MAX_WINDOWS);
    }
}
