//! The REST facts the gateway half shares with the REST edge (`crate::api`
//! routes every request): the connect-time routes the registry sidecar
//! answers, the token header, and the fixed JSON bodies.

/// The connect-time routes the registry sidecar answers for a bot
/// (`GET /users/@me` is answered by the worker, from the bot's view).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestRoute {
    GatewayBot,
    ApplicationsMe,
    /// `GET /users/@me/guilds`.
    MyGuilds(GuildsPage),
}

/// The most servers `GET /users/@me/guilds` answers at once (the platform's
/// 200; also its default).
pub const MAX_GUILDS_PAGE: usize = 200;

/// A page of `GET /users/@me/guilds` (`GuildsPage::of`), ascending by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuildsPage {
    pub before: Option<u64>,
    pub after: Option<u64>,
    pub limit: u32,
    /// `approximate_member_count` and `approximate_presence_count`.
    pub with_counts: bool,
}

impl GuildsPage {
    /// The page of `ids` (ascending) this asks for: those between `after`
    /// and `before` (either may be absent), the first `limit` of them, or
    /// with `before` the last `limit` (the ones closest to it).
    pub fn of<'a, T>(&self, ids: &'a [T], id: impl Fn(&T) -> u64) -> &'a [T] {
        let limit = self.limit as usize;
        let start = self
            .after
            .map_or(0, |a| ids.partition_point(|t| id(t) <= a));
        let end = self
            .before
            .map_or(ids.len(), |b| ids.partition_point(|t| id(t) < b))
            .max(start);
        if self.before.is_some() {
            &ids[end.saturating_sub(limit).max(start)..end]
        } else {
            &ids[start..(start + limit).min(end)]
        }
    }
}

pub const JSON: &str = "application/json";

/// Is this path REST (`/api` or below)?
pub fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// The token from an `Authorization: Bot <token>` header (prefix optional).
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let h = header?.trim_start();
    let t = h.strip_prefix("Bot ").unwrap_or(h).trim();
    (!t.is_empty()).then_some(t)
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
    fn a_guilds_page_is_after_or_before_ascending() {
        let ids = [10u64, 20, 30, 40, 50];
        let page = |before, after, limit| {
            GuildsPage {
                before,
                after,
                limit,
                with_counts: false,
            }
            .of(&ids, |&i| i)
            .to_vec()
        };
        assert_eq!(page(None, None, 200), ids);
        assert_eq!(page(None, None, 2), [10, 20]);
        assert_eq!(page(None, Some(20), 2), [30, 40]);
        assert_eq!(page(None, Some(25), 200), [30, 40, 50]);
        assert_eq!(page(None, Some(50), 200), [] as [u64; 0]);
        assert_eq!(page(Some(40), None, 2), [20, 30]);
        assert_eq!(page(Some(15), None, 2), [10]);
        assert_eq!(page(Some(10), None, 2), [] as [u64; 0]);
        // Both: between them.
        assert_eq!(page(Some(40), Some(10), 200), [20, 30]);
        assert_eq!(page(Some(40), Some(10), 1), [30]);
        assert_eq!(page(Some(10), Some(40), 200), [] as [u64; 0]);
    }

    #[test]
    fn api_paths_and_tokens() {
        assert!(is_api("/api/v10/gateway") && is_api("/api") && !is_api("/apix") && !is_api("/"));
        assert_eq!(bearer(Some("Bot abc")), Some("abc"));
        assert_eq!(bearer(Some("abc")), Some("abc"));
        assert_eq!(bearer(Some("Bot ")), None);
        assert_eq!(bearer(None), None);
    }
}
