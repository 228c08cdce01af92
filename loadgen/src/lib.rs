//! `loadgen`: the gatewayd load tester.
//!
//! For now this crate holds the fleet coordinator (`loadgen coordinator`), a
//! JSON Lines over TCP service that lets several loadgen processes or
//! machines share identify concurrency, REST rate limits and cooldowns.
//! See `loadgen/README.md` for the wire protocol.

pub mod coordinator;

pub use coordinator::{serve, Config};
