//! The event stream into the node: one pipeline (batching, fan-out to the
//! workers, GUILD_STATE applied through the registry link before the events
//! after it) fed by two sources, the TCP listener and Kafka.

pub mod brokers;
pub mod demo;
pub mod gather;
pub mod kafka;
pub mod listener;
pub mod pipeline;
pub mod replay;
pub mod state;
