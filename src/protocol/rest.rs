//! The REST calls client libraries make before connecting (PROTOCOL.md,
//! "REST surface"). Routing only; answers that need the registry come from
//! the sidecar.

/// The connect-time routes that need the bot's token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestRoute {
    GatewayBot,
    UsersMe,
    ApplicationsMe,
}

pub const JSON: &str = "application/json";

#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /gateway`: needs no token.
    Gateway,
    Authed(RestRoute),
    NotFound,
    MethodNotAllowed,
}

/// Is this path REST (`/api` or below)?
pub fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// Route `/api[/vN]/...`, tolerant of a trailing slash.
pub fn route(method: &str, path: &str) -> Route {
    let rest = path.strip_prefix("/api").unwrap_or(path);
    let rest = match rest.strip_prefix("/v") {
        Some(v) => match v.find('/') {
            Some(i) if v[..i].bytes().all(|b| b.is_ascii_digit()) && i > 0 => &v[i..],
            _ => rest,
        },
        None => rest,
    };
    let rest = rest.trim_end_matches('/');
    let route = match rest {
        "/gateway" => Route::Gateway,
        "/gateway/bot" => Route::Authed(RestRoute::GatewayBot),
        "/users/@me" => Route::Authed(RestRoute::UsersMe),
        "/oauth2/applications/@me" | "/applications/@me" => {
            Route::Authed(RestRoute::ApplicationsMe)
        }
        _ => return Route::NotFound,
    };
    if method != "GET" && method != "HEAD" {
        return Route::MethodNotAllowed;
    }
    route
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
    fn routes() {
        assert_eq!(route("GET", "/api/v10/gateway"), Route::Gateway);
        assert_eq!(route("GET", "/api/v9/gateway/"), Route::Gateway);
        assert_eq!(route("GET", "/api/gateway"), Route::Gateway);
        assert_eq!(
            route("GET", "/api/v10/gateway/bot"),
            Route::Authed(RestRoute::GatewayBot)
        );
        assert_eq!(
            route("GET", "/api/v10/users/@me"),
            Route::Authed(RestRoute::UsersMe)
        );
        assert_eq!(
            route("GET", "/api/v10/oauth2/applications/@me"),
            Route::Authed(RestRoute::ApplicationsMe)
        );
        assert_eq!(route("POST", "/api/v10/gateway"), Route::MethodNotAllowed);
        assert_eq!(
            route("GET", "/api/v10/channels/1/messages"),
            Route::NotFound
        );
        assert_eq!(route("GET", "/api/v"), Route::NotFound);
        assert!(is_api("/api/v10/gateway") && !is_api("/apix") && !is_api("/"));
        assert_eq!(bearer(Some("Bot abc")), Some("abc".into()));
        assert_eq!(bearer(Some("abc")), Some("abc".into()));
        assert_eq!(bearer(Some("Bot ")), None);
    }
}
