#![recursion_limit = "256"]
//! gatewayd as a library: every module of the node, so that the binary
//! (src/main.rs) and the micro benchmarks (bench/) share one copy. The
//! binary is the product; this API is not stable. New modules are declared
//! here, not in main.rs.
//!
//! The rooms, from the top floor down; an arrow only ever points down a
//! floor (tests/layout.rs checks it):
//!
//! ```text
//!   main, fuzzing, no_alloc   the binary; the fuzz targets' and the allocation test's hooks
//!   node, registry_cli, interact_cli, cert_cli   wire the threads; the CLI
//!   ops                        admin port, metrics text, `gatewayd stats`
//!   portal                     the developer portal (its own listener)
//!   chat                       the chat service that commits REST actions
//!   ingest, link               the event stream in; the registry sidecar, the Redis counters
//!   worker                     the run loop, connections, the inbox types
//!   api                        the REST edge's steps: route, limit, permit, bodies
//!   delivery                   entitlement, fan-out, arena records, sends
//!   protocol, egress           Gateway v10 as a state machine; payloads; outbound calls, signing
//!   config, histogram          leaves
//! ```

pub mod api;
pub mod cert_cli;
pub mod chat;
pub mod config;
pub mod delivery;
pub mod egress;
#[doc(hidden)]
pub mod fuzzing;
pub mod histogram;
pub mod ingest;
pub mod interact_cli;
pub mod link;
pub mod node;
pub mod ops;
pub mod portal;
pub mod protocol;
pub mod registry_cli;
pub mod worker;
