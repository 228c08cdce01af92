//! The REST API edge: how a bot acts (ADR-01, 06, 09, 10; REST.md). One
//! file per step a request takes, in order:
//!
//! ```text
//!   route.rs   METHOD /api/vN/... -> ApiRoute (ids, bucket, top-level resource)
//!   view.rs    token -> application (cached), its leased view of its servers
//!   buckets.rs the route buckets and their published limits
//!   limit.rs   where a request is LIMITED: bucket and global windows, 429s, bans
//!   headers.rs what a client reads of it: the six headers, Retry-After, the 429 body
//!   permit.rs  where it is PERMITTED: entitlement::channel_allows, the event filter's check
//!   shared.rs  the windows' counts shared between nodes (Redis: link::counters)
//!   body.rs    JSON / multipart bodies, validated; error bodies (50035 trees)
//!   embed.rs   one embed's limits (each part's, and its share of the 6,000)
//!   action.rs  route + query + body -> what the request asks (ChatAction, Next)
//!   ids.rs     which snowflake generator each chat service commits with
//!   commands.rs application command bodies (validated, normalised) and answers
//! ```
//!
//! and then it is COMMITTED by the chat service (`crate::chat`), whose
//! result comes back to every entitled bot as an event. Nothing here owns a
//! socket or a thread: the worker that owns the token runs these steps.

pub mod action;
pub mod addr;
pub mod body;
pub mod buckets;
pub mod commands;
pub mod embed;
pub mod headers;
pub mod ids;
pub mod limit;
pub mod permit;
pub mod query;
pub mod route;
pub mod shared;
pub mod view;

/// Which worker serves a token's REST requests (its limiter windows and
/// view live there): the one that owns the application the token names
/// (its first part), so any worker can tell without asking the registry.
/// A token that names none is served where it arrived (and refused there).
pub fn owner_of(token: &str, workers: usize) -> Option<usize> {
    let app = registry::token::parse_app_id(token)?;
    // Mixed first: snowflake ids made by one process have even low bits
    // (worker << 12 | increment 0), so `app % 2` put every application on
    // worker 0.
    Some(((app.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % workers.max(1) as u64) as usize)
}

/// The worker whose chat service commits the actions of `target`: the
/// server's (a DM channel's, for server 0). One worker per server means one
/// order of that server's commits for every session, and one window
/// (`chat::history`) per server, shared with nobody. Ids are mixed first:
/// servers made in a burst differ in their timestamp bits only.
pub fn commit_worker(server: u64, channel: u64, workers: usize) -> usize {
    let key = if server == 0 { channel } else { server };
    ((key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % workers.max(1) as u64) as usize
}

/// A routed request with its body, while its token is looked up.
pub struct Pending {
    pub route: route::ApiRoute,
    pub query: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub digest: [u8; 32],
}
