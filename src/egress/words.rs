//! An egress failure in words for a bot's author (the portal's endpoint
//! check, `gatewayd registry set-endpoint`): which failure, and its detail
//! without what only a programmer reads (reason codes, OS error numbers).

use super::client::EgressError;
use super::reason::Reason;

impl EgressError {
    /// What happened, in words for a bot's author (the portal, `registry
    /// set-endpoint`): no reason codes, no raw OS errors ("os error 11").
    pub fn in_words(&self) -> String {
        let what = match self.reason {
            Reason::BadUrl => "the URL is not one the platform calls",
            Reason::RefusedAddress => {
                "its address is private, loopback or reserved: the platform calls only public addresses"
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
        assert!(e(Reason::RefusedAddress, "").starts_with("its address is private"));
        for r in Reason::ALL {
            let w = e(r, "x (os error 1)");
            assert!(!w.contains("os error") && !w.contains(r.as_str()), "{w}");
        }
    }
}
