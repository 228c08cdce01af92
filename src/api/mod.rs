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
//!   commands.rs application command bodies (validated, normalised) and answers
//! ```
//!
//! and then it is COMMITTED by the chat service (`crate::chat`), whose
//! result comes back to every entitled bot as an event. Nothing here owns a
//! socket or a thread: the worker that owns the token runs these steps.

pub mod addr;
pub mod body;
pub mod buckets;
pub mod commands;
pub mod headers;
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
    Some((app % workers.max(1) as u64) as usize)
}

/// A routed request with its body, while its token is looked up.
pub struct Pending {
    pub route: route::ApiRoute,
    pub query: String,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
    pub digest: [u8; 32],
}
