//! An egress failure in words for a bot's author (the portal's endpoint
//! check, `gatewayd registry set-endpoint`): which failure, and its detail
//! without what only a programmer reads (reason codes, OS error numbers)
//! and without any address a name resolved to: the egress's resolver is
//! not an oracle for strangers ("localhost is 127.0.0.1" told a developer
//! what any host name resolves to from inside, issue 41). The operator
//! still reads the whole detail in the egress's log.

use super::client::EgressError;
use super::reason::Reason;

impl EgressError {
    /// What happened, in words for a bot's author (the portal, `registry
    /// set-endpoint`): no reason codes, no raw OS errors ("os error 11").
    pub fn in_words(&self) -> String {
        let what = match self.reason {
            Reason::BadUrl => "the URL is not one the platform calls",
            // No detail at all: it names the address the host resolved to.
            Reason::RefusedAddress => {
                return "refused: private address (the platform calls only public addresses)"
                    .to_string()
            }
            Reason::DnsFailed => "its host name did not resolve",
            Reason::Timeout => "no answer in time",
            Reason::TooLarge => "the answer was too large",
            Reason::ConnectFailed => "the connection could not be made",
            Reason::TlsFailed => "the TLS handshake failed",
            Reason::MalformedResponse => "the answer was not HTTP/1.1",
            Reason::Busy => "the platform's outbound calls are all in use: try again",
            Reason::Unavailable => "the platform's outbound service is not running: try again",
        };
        match plain_detail(&self.detail) {
            Some(d) => format!("{what} ({d})"),
            None => what.to_string(),
        }
    }
}

/// An error's detail without what only a programmer reads: the OS error
/// number, the words of EAGAIN (a socket timeout), empty details.
fn plain_detail(detail: &str) -> Option<String> {
    let mut d = detail.trim();
    // "connect to 203.0.113.9:443: ...": the address is the resolver's.
    if let Some(rest) = d.strip_prefix("connect to ") {
        d = rest.split_once(": ").map_or("", |(_, why)| why);
    }
    if let Some(i) = d.find(" (os error") {
        d = d[..i].trim_end();
    }
    if d.starts_with("os error") || d.is_empty() {
        return None;
    }
    let d = match d {
        "Resource temporarily unavailable" => "timed out",
        "Connection refused" => "refused",
        other => other,
    };
    Some(d.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::client::err;

    #[test]
    fn an_egress_error_in_words_has_no_os_error_numbers() {
        let e = |reason, detail: &str| err(reason, detail).in_words();
        assert_eq!(
            e(Reason::ConnectFailed, "Connection refused (os error 111)"),
            "the connection could not be made (refused)"
        );
        assert_eq!(
            e(
                Reason::Timeout,
                "Resource temporarily unavailable (os error 11)"
            ),
            "no answer in time (timed out)"
        );
        assert_eq!(e(Reason::Timeout, "os error 11"), "no answer in time");
        // Never the address a name resolved to.
        assert_eq!(
            e(
                Reason::RefusedAddress,
                "localhost is 127.0.0.1 (in 127.0.0.0/8, refused)"
            ),
            "refused: private address (the platform calls only public addresses)"
        );
        assert_eq!(
            e(
                Reason::ConnectFailed,
                "connect to 203.0.113.9:443: Connection refused (os error 111)"
            ),
            "the connection could not be made (refused)"
        );
        assert_eq!(
            e(
                Reason::Timeout,
                "connect to [2001:db8::1]:443: deadline passed"
            ),
            "no answer in time (deadline passed)"
        );
        for r in Reason::ALL {
            let w = e(r, "x (os error 1)");
            assert!(!w.contains("os error") && !w.contains(r.as_str()), "{w}");
        }
    }
}
