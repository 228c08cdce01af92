//! The egress (ADR-11): outbound HTTP(S) calls to bot-supplied URLs, in a
//! process of their own (`gatewayd egress`) that holds no registry
//! credentials and can be placed in an isolated network zone
//! (docs/egress.md). The node (and the registry CLI) talk to it over a
//! local socket with length-prefixed JSON frames (`wire`).
//!
//! - `guard`: the SSRF guard: URL parsing, resolution under a deadline,
//!   the deny list and the operator's allow list;
//! - `fetch`: one bounded HTTP/1.1 exchange to exactly a validated address;
//! - `wire`: the frames between the node and the egress;
//! - `server`: the `gatewayd egress` process;
//! - `client`: the node's side ([`client::EgressClient`]);
//! - `child`: the child process the node starts by default;
//! - `sign`: Ed25519 interaction signing (ADR-12) and endpoint verification.

pub mod child;
pub mod client;
pub mod fetch;
pub mod guard;
mod reason;
pub mod server;
pub mod sign;
pub mod wire;
mod words;

pub use client::{EgressClient, EgressError, EgressStats};
pub use reason::Reason;
