//! Intent and permission bits: the facts live in the `proto` crate (one
//! table for gatewayd, the registry, loadgen and the tests).

pub use proto::intents::*;
pub use proto::permissions as perm;
