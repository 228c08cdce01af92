//! The router's tests: paths, methods, ids, buckets and names.

use super::*;

#[test]
fn connect_time_routes() {
    assert_eq!(route("GET", "/api/v10/gateway"), Ok(ApiRoute::Gateway));
    assert_eq!(route("GET", "/api/v9/gateway/"), Ok(ApiRoute::Gateway));
    assert_eq!(route("GET", "/api/gateway"), Ok(ApiRoute::Gateway));
    assert_eq!(
        route("GET", "/api/v10/gateway/bot"),
        Ok(ApiRoute::GatewayBot)
    );
    assert_eq!(route("HEAD", "/api/v10/users/@me"), Ok(ApiRoute::UsersMe));
    assert_eq!(
        route("GET", "/api/v10/oauth2/applications/@me"),
        Ok(ApiRoute::ApplicationsMe)
    );
    assert_eq!(
        route("POST", "/api/v10/gateway"),
        Err(RouteError::MethodNotAllowed)
    );
    assert_eq!(route("GET", "/api/v"), Err(RouteError::NotFound));
}

#[test]
fn action_routes_with_ids() {
    let c = 1_180_000_000_000_000_100u64;
    let p = format!("/api/v10/channels/{c}/messages");
    assert_eq!(
        route("POST", &p),
        Ok(ApiRoute::CreateMessage { channel: c })
    );
    assert_eq!(route("GET", &p), Ok(ApiRoute::ListMessages { channel: c }));
    assert_eq!(route("PUT", &p), Err(RouteError::MethodNotAllowed));
    assert_eq!(
        route("PATCH", &format!("{p}/42")),
        Ok(ApiRoute::EditMessage {
            channel: c,
            message: 42
        })
    );
    assert_eq!(
        route("PUT", &format!("{p}/42/reactions/%F0%9F%91%8D/@me")),
        Ok(ApiRoute::AddReaction {
            channel: c,
            message: 42,
            emoji: "\u{1F44D}".into()
        })
    );
    assert_eq!(
        route("DELETE", &format!("{p}/42/reactions/blob:123/@me")),
        Ok(ApiRoute::RemoveOwnReaction {
            channel: c,
            message: 42,
            emoji: "blob:123".into()
        })
    );
    assert_eq!(
        route("POST", &format!("{p}/bulk-delete")),
        Ok(ApiRoute::BulkDelete { channel: c })
    );
    assert_eq!(
        route("DELETE", "/api/v9/guilds/5/members/6"),
        Ok(ApiRoute::Kick { guild: 5, user: 6 })
    );
    assert_eq!(
        route("PUT", "/api/v10/guilds/5/members/6/roles/7"),
        Ok(ApiRoute::AddMemberRole {
            guild: 5,
            user: 6,
            role: 7
        })
    );
    assert_eq!(
        route("POST", "/api/v10/users/@me/channels"),
        Ok(ApiRoute::CreateDm)
    );
}

#[test]
fn not_snowflakes_are_404() {
    for p in [
        "/api/v10/channels/abc/messages",
        "/api/v10/channels/-1/messages",
        "/api/v10/channels/99999999999999999999/messages",
        "/api/v10/channels/123456789012345678901/messages",
        "/api/v10/channels//messages",
        "/api/v10/channels/1/messages/1/reactions/%ZZ/@me",
        "/api/v10/channels/1/messages/1/reactions/%FF/@me",
        "/api/v10/a/b/c/d/e/f/g/h/i",
    ] {
        assert_eq!(route("GET", p), Err(RouteError::NotFound), "{p}");
    }
    let long = format!(
        "/api/v10/channels/1/messages/1/reactions/{}/@me",
        "a".repeat(101)
    );
    assert_eq!(route("PUT", &long), Err(RouteError::NotFound));
}

#[test]
fn every_route_name_is_listed_once() {
    for (i, n) in ROUTE_NAMES.iter().enumerate() {
        assert!(!ROUTE_NAMES[..i].contains(n), "{n} twice");
    }
}

#[test]
fn buckets_split_by_top_level_resource() {
    let a = route("POST", "/api/v10/channels/1/messages").unwrap();
    let b = route("POST", "/api/v10/channels/2/messages").unwrap();
    assert_eq!(a.bucket(), Some((Bucket::MessageCreate, 1)));
    assert_eq!(b.bucket(), Some((Bucket::MessageCreate, 2)));
    assert_eq!(ApiRoute::Gateway.bucket(), None);
}

#[test]
fn an_encoded_at_is_the_at() {
    // discord.js sends `%40original`; `@me` may come encoded too.
    let want = ApiRoute::WebhookMessage {
        app: 1_200_000_000_000_000_001,
        token: "abc".into(),
        message: 0,
        method: WebhookMethod::Patch,
    };
    for p in ["@original", "%40original", "%40Original"] {
        let path = format!("/api/v10/webhooks/1200000000000000001/abc/messages/{p}");
        let got = route("PATCH", &path);
        if p == "%40Original" {
            assert!(got.is_err(), "the name itself is case-sensitive");
        } else {
            assert_eq!(got.unwrap(), want, "{p}");
        }
    }
    assert_eq!(
        route("GET", "/api/v10/users/%40me").unwrap(),
        ApiRoute::UsersMe
    );
}
