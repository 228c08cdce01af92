//! Why an outbound call gave no HTTP answer ([`Reason`]): the wire's names
//! and the `outcome` label of `gatewayd_egress_requests_total`. A leaf:
//! the client, the server, the fetch and the guard all name it.

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

    pub(super) fn index(self) -> usize {
        Reason::ALL.iter().position(|r| *r == self).unwrap_or(0)
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
