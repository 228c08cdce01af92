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

/// Render the six headers (and, on a 429, `Retry-After`, `Via` and, only
/// for the global limit, `X-RateLimit-Global: true`) as `(name, value)`
/// pairs.
pub fn render(h: &RateHeaders, retry_after_ms: Option<u64>) -> Vec<(&'static str, String)> {
    let mut v = Vec::with_capacity(9);
    v.push(("X-RateLimit-Limit", h.limit.to_string()));
    v.push(("X-RateLimit-Remaining", h.remaining.to_string()));
    v.push((
        "X-RateLimit-Reset",
        format!("{}.{:03}", h.reset_ms / 1000, h.reset_ms % 1000),
    ));
    v.push((
        "X-RateLimit-Reset-After",
        format!("{}.{:03}", h.reset_after_ms / 1000, h.reset_after_ms % 1000),
    ));
    v.push(("X-RateLimit-Bucket", h.bucket.to_string()));
    v.push(("X-RateLimit-Scope", h.scope.as_str().to_string()));
    if let Some(ms) = retry_after_ms {
        // An integer, rounded up: twilight cannot parse a fraction.
        v.push(("Retry-After", ms.div_ceil(1000).max(1).to_string()));
        v.push(("Via", "1.1 gatewayd".to_string()));
        if h.scope == Scope::Global {
            v.push(("X-RateLimit-Global", "true".to_string()));
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
pub fn handoff_429(status: u16, body: &[u8], headers: &mut Vec<(&'static str, String)>) {
    if status != 429 || headers.iter().any(|(k, _)| *k == "Retry-After") {
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
    headers.push(("Retry-After", (secs as u64).to_string()));
    headers.push(("Via", "1.1 gatewayd".to_string()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_off_429_gets_retry_after_and_via() {
        let mut h = vec![("X-RateLimit-Scope", "user".to_string())];
        handoff_429(429, br#"{"retry_after": 3600.2, "code": 30034}"#, &mut h);
        assert!(h.contains(&("Retry-After", "3601".to_string())));
        assert!(h.iter().any(|p| p.0 == "Via"));
        let mut ok = Vec::new();
        handoff_429(200, b"{}", &mut ok);
        assert!(ok.is_empty());
        let mut odd = Vec::new();
        handoff_429(429, b"not json", &mut odd);
        assert!(odd.contains(&("Retry-After", "1".to_string())));
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
        assert_eq!(v[2].1, "1700000001.250");
        assert_eq!(v[3].1, "1.250");
        let v = render(&h, Some(1_250));
        assert!(
            v.contains(&("Retry-After", "2".to_string())),
            "an integer, rounded up"
        );
        assert!(v.iter().any(|p| p.0 == "Via"));
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
        assert!(g.contains(&("X-RateLimit-Global", "true".to_string())));
        assert!(g.contains(&("Retry-After", "1".to_string())));
        let b: serde_json::Value = serde_json::from_slice(&body_429(1_234, false)).unwrap();
        assert_eq!(b["retry_after"], 1.234);
        assert_eq!(b["global"], false);
        assert_eq!(b["message"], "You are being rate limited.");
    }
}
