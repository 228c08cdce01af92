#![recursion_limit = "256"]
//! gatewayd as a library: every module of the node, so that the binary
//! (src/main.rs) and the micro benchmarks (bench/) share one copy. The
//! binary is the product; this API is not stable. New modules are declared
//! here, not in main.rs.

pub mod admin;
pub mod config;
pub mod demo;
pub mod entitlement;
pub mod fanout;
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod histogram;
pub mod ingest_listener;
pub mod kafka_ingest;
pub mod messages;
pub mod metrics;
pub mod node;
pub mod registry_cli;
pub mod rest;
pub mod sendpath;
pub mod sidecar;
pub mod state;
pub mod stats;
pub mod worker;
