//! Gateway close codes: the facts live in the `proto` crate.

pub use proto::close::{Close, CloseCode};
