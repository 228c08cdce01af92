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
//! - `client`: the node's side ([`client::EgressClient`]), and the child
//!   process the node starts by default;
//! - `sign`: Ed25519 interaction signing (ADR-12) and endpoint verification.

pub mod client;
pub mod fetch;
pub mod guard;
pub mod server;
pub mod sign;
pub mod wire;
mod words;

pub use client::{EgressClient, EgressError, EgressStats};

/// Why an outbound call gave no HTTP answer. The names are the wire's and
/// the `outcome` label of `gatewayd_egress_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The URL (or a request header) is not acceptable.
    BadUrl,
    /// An address the host names (or the literal) is in a refused range.
    RefusedAddress,
    DnsFailed,
    /// The lookup, connect or total deadline passed.
    Timeout,
    /// The answer is larger than the request's `max_response_bytes`.
    TooLarge,
    ConnectFailed,
    TlsFailed,
    /// The endpoint's answer is not HTTP/1.x as expected.
    MalformedResponse,
    /// The egress has as many calls in flight as it serves.
    Busy,
    /// The egress process could not be reached (node side only).
    Unavailable,
}

impl Reason {
    pub const ALL: [Reason; 10] = [
        Reason::BadUrl,
        Reason::RefusedAddress,
        Reason::DnsFailed,
        Reason::Timeout,
        Reason::TooLarge,
        Reason::ConnectFailed,
        Reason::TlsFailed,
        Reason::MalformedResponse,
        Reason::Busy,
        Reason::Unavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::BadUrl => "bad_url",
            Reason::RefusedAddress => "refused_address",
            Reason::DnsFailed => "dns_failed",
            Reason::Timeout => "timeout",
            Reason::TooLarge => "too_large",
            Reason::ConnectFailed => "connect_failed",
            Reason::TlsFailed => "tls_failed",
            Reason::MalformedResponse => "malformed_response",
            Reason::Busy => "busy",
            Reason::Unavailable => "egress_unavailable",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == s)
    }

    fn index(self) -> usize {
        Reason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
