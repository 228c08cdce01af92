//! `loadgen`: the gatewayd load tester.
//!
//! - `world`: applications, servers, grants generated into the registry, and
//!   the truth every received event is checked against;
//! - `session` + `fleet`: bot sessions (sans-IO protocol + io_uring driver);
//! - `producer`: the open-loop event producer;
//! - `nodes`: gatewayd processes and their metrics;
//! - `lb`: the io_uring TCP load balancer in front of several nodes;
//! - `scenario`: steady, storm, slow-consumer, revocation;
//! - `measure`: idle, fanout and hold-sessions against a node loadgen did
//!   not provision (the side-by-side benchmark, the 40,000-session test);
//! - `servers`: the many-servers workload of `measure fanout --servers`;
//! - `coordinator`: the fleet coordinator (JSON Lines over TCP, see README);
//! - `uring_ud`: the io_uring user data and socket address both drivers use.

pub mod clock;
pub mod coordinator;
pub mod fleet;
pub mod gate;
pub mod lb;
pub mod measure;
pub mod nodes;
pub mod producer;
pub mod proxy;
pub mod report;
pub mod scenario;
pub mod series;
pub mod servers;
pub mod services;
pub mod session;
pub mod uring_ud;
pub mod world;

pub use coordinator::{serve, Config};
