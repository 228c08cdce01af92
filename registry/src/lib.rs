//! The registry: applications (hashed tokens, approved intents, identify
//! limits), servers with roles/channels/overwrites, and installations.
//!
//! [`Registry`] is the backend-neutral interface (blocking; called from the
//! node's sidecar thread and from the CLI). [`SqliteRegistry`] is the
//! embedded backend; [`PostgresRegistry`] is the scale-out one (several
//! nodes on one database, revocations pushed with LISTEN/NOTIFY).
//!
//! One registry over two backends: a backend only runs statements
//! (`backend::Backend`) and speaks its SQL (the store traits, one per
//! concept); the rules are written once over them, by concept (`apps`,
//! `ops` for servers and installations, `members`, `developers`,
//! `commands`, `signing`, `nodes`, `interactions`, `outbox`, `seed` for the
//! demo data), and `generic` holds the one `impl Registry` for every
//! backend.

mod api;
mod apps;
mod backend;
pub mod commands;
mod developers;
mod error;
mod generic;
mod interactions;
mod members;
pub mod model;
mod nodes;
mod ops;
mod outbox;
pub mod postgres;
mod revocation;
mod rows;
mod rules;
mod schema;
mod seed;
mod signing;
pub mod snowflake;
mod sqlite;
pub mod token;
mod validate;

pub use self::postgres::{PostgresRegistry, RevocationListener};
pub use api::Registry;
pub use error::{RegistryError, Result};
pub use interactions::{CLAIM_KEEP_MS, CLAIM_PRUNE_EVERY};
pub use model::*;
pub use nodes::MAX_NODE;
pub use revocation::{Revocation, RevocationRecord, StateChange};
pub use signing::MAX_ENDPOINT_URL;
pub use sqlite::{SqliteRegistry, BUSY_TIMEOUT};
pub use validate::{MAX_DEVELOPER_NAME, MAX_PASSWORD_BYTES, MIN_PASSWORD_CHARS};
