//! Delivery: from a validated event to bytes on a socket. Who may see an
//! event (`entitlement`), which sessions get it and the ring append
//! (`fanout`), the arena record an event is stored as (`record`), and the
//! send path with its fixed pool, TLS and compression (`sendpath`). Nothing
//! here owns a socket: the worker hands in buffers and completions.

pub mod entitlement;
pub mod fanout;
pub mod sendpath;
