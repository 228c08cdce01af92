//! The rate-limit headers and the 429 body of REST.md ("Rate-limit
//! headers", "429"), as the limiter decides them and as they are written.
//! Kept apart from `limit.rs` (which decides) so that what a client reads
//! is in one place: the six headers on every response of a limited route,
//! and on a 429 `Retry-After` (an integer), `Via`, and
//! `X-RateLimit-Global: true` only for the global limit (never `false`).

/// `X-RateLimit-Scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    User,
    Global,
    Shared,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Global => "global",
            Scope::Shared => "shared",
        }
    }
}

/// The six headers of a limited route's response, before rendering.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateHeaders {
    pub limit: u32,
    pub remaining: u32,
    /// When the window closes (Unix ms).
    pub reset_ms: u64,
    pub reset_after_ms: u64,
    pub bucket: &'static str,
    pub scope: Scope,
}

/// A response's extra headers: at most `HeaderList::MAX` (name, value)
/// pairs, every value in one buffer (one allocation per list, where a
/// `String` per value was nine).
#[derive(Clone, Debug, Default)]
pub struct HeaderList {
    names: [&'static str; HeaderList::MAX],
    /// Where each value ends in `buf`.
    ends: [u16; HeaderList::MAX],
    n: usize,
    buf: String,
}

impl HeaderList {
    /// The most a response carries: the six, `Retry-After`, `Via`,
    /// `X-RateLimit-Global`.
    pub const MAX: usize = 9;

    pub const fn new() -> HeaderList {
        HeaderList {
            names: [""; HeaderList::MAX],
            ends: [0; HeaderList::MAX],
            n: 0,
            buf: String::new(),
        }
    }

    /// Add a header; past `MAX` it is dropped (a bug: debug builds panic).
    pub fn push(&mut self, name: &'static str, value: impl std::fmt::Display) {
        use std::fmt::Write;
        debug_assert!(self.n < Self::MAX, "more than {} headers", Self::MAX);
        if self.n == Self::MAX {
            return;
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve(192);
        }
        let _ = write!(self.buf, "{value}");
        self.names[self.n] = name;
        self.ends[self.n] = self.buf.len() as u16;
        self.n += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The pairs, in the order pushed.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &str)> + '_ {
        (0..self.n).map(move |i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
            (self.names[i], &self.buf[start..self.ends[i] as usize])
        })
    }

    /// The value of header `name`, if present.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// Milliseconds as seconds with three decimals (`1.250`).
struct Secs(u64);

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// Render the six headers (and, on a 429, `Retry-After`, `Via` and, only
/// for the global limit, `X-RateLimit-Global: true`).
pub fn render(h: &RateHeaders, retry_after_ms: Option<u64>) -> HeaderList {
    let mut v = HeaderList::new();
    v.push("X-RateLimit-Limit", h.limit);
    v.push("X-RateLimit-Remaining", h.remaining);
    v.push("X-RateLimit-Reset", Secs(h.reset_ms));
    v.push("X-RateLimit-Reset-After", Secs(h.reset_after_ms));
    v.push("X-RateLimit-Bucket", h.bucket);
    v.push("X-RateLimit-Scope", h.scope.as_str());
    if let Some(ms) = retry_after_ms {
        // An integer, rounded up: twilight cannot parse a fraction.
        v.push("Retry-After", ms.div_ceil(1000).max(1));
        v.push("Via", "1.1 gatewayd");
        if h.scope == Scope::Global {
            v.push("X-RateLimit-Global", "true");
        }
    }
    v
}

/// The body of a 429 (REST.md): `retry_after` in float seconds.
pub fn body_429(retry_after_ms: u64, global: bool) -> Vec<u8> {
    format!(
        r#"{{"message":"You are being rate limited.","retry_after":{}.{:03},"global":{}}}"#,
        retry_after_ms / 1000,
        retry_after_ms % 1000,
        global
    )
    .into_bytes()
}

/// A 429 answered after a hand-off (the registry's limits, e.g. the 200
/// daily command creates) carries what REST.md asks of every 429 beside
/// its JSON body: an integer `Retry-After` (from the body's `retry_after`)
/// and `Via`. Other answers are left as they are.
pub fn handoff_429(status: u16, body: &[u8], headers: &mut HeaderList) {
    if status != 429 || headers.get("Retry-After").is_some() {
        return;
    }
    let secs = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["retry_after"].as_f64())
        .unwrap_or(1.0);
    let secs = if secs.is_finite() {
        secs.ceil().max(1.0)
    } else {
        1.0
    };
    headers.push("Retry-After", secs as u64);
    headers.push("Via", "1.1 gatewayd");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_off_429_gets_retry_after_and_via() {
        let mut h = HeaderList::new();
        h.push("X-RateLimit-Scope", "user");
        handoff_429(429, br#"{"retry_after": 3600.2, "code": 30034}"#, &mut h);
        assert_eq!(h.get("Retry-After"), Some("3601"));
        assert_eq!(h.get("X-RateLimit-Scope"), Some("user"));
        assert!(h.get("Via").is_some());
        let mut ok = HeaderList::new();
        handoff_429(200, b"{}", &mut ok);
        assert!(ok.is_empty());
        let mut odd = HeaderList::new();
        handoff_429(429, b"not json", &mut odd);
        assert_eq!(odd.get("Retry-After"), Some("1"));
    }

    #[test]
    fn rendered_headers_follow_rest_md() {
        let h = RateHeaders {
            limit: 5,
            remaining: 0,
            reset_ms: 1_700_000_001_250,
            reset_after_ms: 1_250,
            bucket: "b",
            scope: Scope::User,
        };
        let v = render(&h, None);
        let names: Vec<_> = v.iter().map(|p| p.0).collect();
        assert_eq!(
            names,
            [
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset",
                "X-RateLimit-Reset-After",
                "X-RateLimit-Bucket",
                "X-RateLimit-Scope"
            ]
        );
        assert_eq!(v.get("X-RateLimit-Limit"), Some("5"));
        assert_eq!(v.get("X-RateLimit-Remaining"), Some("0"));
        assert_eq!(v.get("X-RateLimit-Reset"), Some("1700000001.250"));
        assert_eq!(v.get("X-RateLimit-Reset-After"), Some("1.250"));
        assert_eq!(v.get("X-RateLimit-Bucket"), Some("b"));
        let v = render(&h, Some(1_250));
        assert_eq!(v.get("Retry-After"), Some("2"), "an integer, rounded up");
        assert_eq!(v.get("Via"), Some("1.1 gatewayd"));
        assert!(
            !v.iter().any(|p| p.0 == "X-RateLimit-Global"),
            "never false, only absent"
        );
        let g = render(
            &RateHeaders {
                scope: Scope::Global,
                ..h
            },
            Some(10),
        );
        assert_eq!(g.get("X-RateLimit-Global"), Some("true"));
        assert_eq!(g.get("Retry-After"), Some("1"));
        let b: serde_json::Value = serde_json::from_slice(&body_429(1_234, false)).unwrap();
        assert_eq!(b["retry_after"], 1.234);
        assert_eq!(b["global"], false);
        assert_eq!(b["message"], "You are being rate limited.");
    }
}
