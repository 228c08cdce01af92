//! `[egress]`: where the node's outbound calls to bot-supplied URLs go
//! (ADR-11, docs/egress.md).

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Egress {
    /// Where the node's own child egress listens: a Unix socket path
    /// (containing `/`) or host:port. Empty: `<data_dir>/egress.sock`.
    pub addr: String,
    /// host:port of a remote egress (e.g. in its own network namespace)
    /// to use instead of starting a child.
    pub remote: String,
    /// Private or loopback ranges the child egress may reach anyway
    /// (development and tests; it logs a loud warning at start).
    pub allow_private_cidrs: Vec<String>,
    /// Connect deadline of each call.
    pub connect_timeout_ms: u64,
    /// Whole-call deadline of each call (inside the 3 s interaction window).
    pub total_timeout_ms: u64,
    /// Largest answer body; beyond it the call fails `too_large`.
    pub max_response_bytes: usize,
    /// Calls the child egress runs at once.
    pub max_in_flight: usize,
    /// The `gatewayd` executable the child egress runs (`gatewayd egress`).
    /// Empty: this process's own executable (the node embedded in another
    /// program, e.g. a test, names gatewayd here).
    pub program: String,
}

impl Default for Egress {
    fn default() -> Self {
        Egress {
            addr: String::new(),
            remote: String::new(),
            allow_private_cidrs: Vec::new(),
            connect_timeout_ms: 1_000,
            total_timeout_ms: 2_500,
            max_response_bytes: 64 << 10,
            max_in_flight: 256,
            program: String::new(),
        }
    }
}

impl Egress {
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(1..=10_000).contains(&self.total_timeout_ms) {
            return Err("egress.total_timeout_ms must be 1-10000".into());
        }
        if !(1..=self.total_timeout_ms).contains(&self.connect_timeout_ms) {
            return Err("egress.connect_timeout_ms must be 1..=egress.total_timeout_ms".into());
        }
        if !(1..=1 << 20).contains(&self.max_response_bytes) {
            return Err("egress.max_response_bytes must be 1..=1048576".into());
        }
        if !(1..=4096).contains(&self.max_in_flight) {
            return Err("egress.max_in_flight must be 1-4096".into());
        }
        if !self.remote.is_empty() && !self.allow_private_cidrs.is_empty() {
            return Err("egress.allow_private_cidrs applies to the node's own egress; set it on the remote one (`gatewayd egress --allow-private-cidrs`)".into());
        }
        Ok(())
    }
}
