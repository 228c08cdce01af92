//! [`Shared`]: what the fleet's threads share with its handle: the world,
//! per-thread gauges (streaming, handshaking, stopped), the counter totals
//! (added in by each thread's tick, [`add_counters`]), the histogram
//! hand-in, the watch on one (bot, server), first violation, guilds and
//! servers read, and the close-everything request. Plain data.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

use crate::series::{PerSecond, SessionRow};
use crate::servers::ServerSet;
use crate::session::Counters;
use crate::world::World;

/// What all threads share.
pub struct Shared {
    pub world: Arc<World>,
    pub stop: AtomicBool,
    pub measuring: AtomicBool,
    /// Per thread: sessions streaming / in a handshake / idle, last tick.
    pub streaming: Vec<AtomicU64>,
    pub handshaking: Vec<AtomicU64>,
    pub stopped: Vec<AtomicU64>,
    pub(super) totals: Mutex<Counters>,
    /// Histogram hand-in: bump `collect`, each thread adds its histograms
    /// into `collected` and bumps `collected_n`.
    pub(super) collect: AtomicU64,
    pub(super) collected_n: AtomicU64,
    pub(super) collected: Mutex<(Histogram<u64>, Histogram<u64>)>,
    /// Non-zero: record latency by second and by session too, from this
    /// start (clock::now_ns); handed in with the histograms.
    pub(super) series_start_ns: AtomicU64,
    pub(super) collected_series: Mutex<(Option<PerSecond>, Vec<SessionRow>)>,
    pub watch: Mutex<Option<(u32, u32)>>,
    pub watch_last_ns: AtomicU64,
    pub watch_count: AtomicU64,
    pub latency_exclude_bot: Mutex<Option<u32>>,
    pub latency_only_bots: Mutex<Option<Arc<Vec<bool>>>>,
    pub first_violation: Mutex<Option<String>>,
    /// First time (process clock, ns) a paced reader lost its connection,
    /// and the close code it had read by then (0: none; the close frame was
    /// still behind unread data).
    pub slow_lost_ns: AtomicU64,
    pub slow_lost_code: AtomicU64,
    /// The first GUILD_CREATE's (server id, `#general` channel id).
    pub guild: Mutex<Option<(u64, u64)>>,
    /// With `FleetConfig::collect_servers`: every server seen in a
    /// GUILD_CREATE, its `#general` and its reading sessions (bounded).
    pub servers: Mutex<ServerSet>,
    /// Non-zero: every thread sends a Close with this code on each open
    /// session and retires it; `closed_n` counts the threads done.
    pub(super) close_code: AtomicU64,
    pub(super) closed_n: AtomicU64,
    pub sessions: usize,
    pub threads: usize,
}

pub fn add_counters(t: &mut Counters, c: &Counters) {
    macro_rules! add {
        ($($f:ident),*) => { $( t.$f += c.$f; )* };
    }
    add!(
        connects,
        connect_errors,
        identifies,
        readies,
        resumes_sent,
        resumed,
        invalid_resumable,
        invalid_new_session,
        deliveries,
        other_dispatches,
        duplicates,
        gaps,
        entitlement_violations,
        content_violations,
        hb_acks,
        zombies,
        reconnects_asked,
        fatal,
        protocol_errors,
        bytes_in,
        upgrades,
        lost,
        failed,
        paced_deliveries,
        handshake_bytes,
        guild_creates,
        event_repeats
    );
    for k in 0..t.closes.len() {
        t.closes[k] += c.closes[k];
    }
}
