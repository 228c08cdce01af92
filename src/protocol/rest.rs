//! The REST facts the gateway half shares with the REST edge (`crate::api`
//! routes every request): the connect-time routes the registry sidecar
//! answers, the token header, and the fixed JSON bodies.

/// The connect-time routes that need the bot's token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestRoute {
    GatewayBot,
    UsersMe,
    ApplicationsMe,
}

pub const JSON: &str = "application/json";

/// Is this path REST (`/api` or below)?
pub fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// The token from an `Authorization: Bot <token>` header (prefix optional).
pub fn bearer(header: Option<&str>) -> Option<String> {
    let h = header?.trim_start();
    let t = h.strip_prefix("Bot ").unwrap_or(h).trim();
    (!t.is_empty()).then(|| t.to_string())
}

pub fn gateway_body(url: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "url": url })).expect("json")
}

pub const NOT_FOUND: &[u8] = br#"{"message": "404: Not Found", "code": 0}"#;
pub const METHOD_NOT_ALLOWED: &[u8] = br#"{"message": "405: Method Not Allowed", "code": 0}"#;
pub const UPGRADE_REQUIRED: &[u8] =
    br#"{"message": "this is a WebSocket gateway: send an Upgrade request, or use /api/v10/... for REST", "code": 0}"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths_and_tokens() {
        assert!(is_api("/api/v10/gateway") && is_api("/api") && !is_api("/apix") && !is_api("/"));
        assert_eq!(bearer(Some("Bot abc")), Some("abc".into()));
        assert_eq!(bearer(Some("abc")), Some("abc".into()));
        assert_eq!(bearer(Some("Bot ")), None);
        assert_eq!(bearer(None), None);
    }
}
