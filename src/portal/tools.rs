//! The test tools, each through the path the node already has:
//! - a test MESSAGE_CREATE and a click of a slash command go in as event
//!   records on the ingest listener, exactly as `gatewayd interact` (and
//!   any producer) writes them;
//! - what the person sees of the click is the interaction board the admin
//!   port's `GET /interactions/{id}` reads (only the session's own clicks);
//! - the endpoint re-check is `EgressClient::verify_endpoint`, the check
//!   `gatewayd registry set-endpoint` makes (signed PING, bad signature);
//! - the token reset is the registry's, as `gatewayd registry reset-token`:
//!   its revocation closes the bot's live sessions with 4004.

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use registry::Application;
use serde_json::{json, Value};

use super::ctx::{lock, now_ms, Ctx};
use super::http::{Request, Response};
use super::installs;
use super::sessions::Session;

const INGEST_DEADLINE: Duration = Duration::from_secs(2);
/// Each of the two endpoint checks has this long to answer.
const VERIFY_EACH: Duration = Duration::from_secs(2);
const MAX_CONTENT: usize = 2000;

fn error(status: u16, why: &str) -> Response {
    Response::json(status, &json!({"error": why}))
}

fn application(ctx: &Ctx, s: &Session) -> Result<Application, Response> {
    match ctx.registry().application(s.app) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err(error(404, "the application no longer exists")),
        Err(_) => Err(error(503, "the registry is unavailable")),
    }
}

/// The channel the form names, if the bot can see it; and its server.
fn channel(ctx: &Ctx, app: &Application, req: &Request) -> Result<(u64, u64), Response> {
    let channel = req
        .field("channel")
        .and_then(|c| c.trim().parse::<u64>().ok())
        .ok_or_else(|| error(400, "choose a channel"))?;
    match installs::visible(ctx, app, channel) {
        Ok(Some(server)) => Ok((server, channel)),
        Ok(None) => Err(error(403, "the bot cannot see that channel")),
        Err(_) => Err(error(503, "the registry is unavailable")),
    }
}

/// The person acting: the server's first member (as the CLI picks).
fn person(ctx: &Ctx, server: u64) -> Result<Value, Response> {
    let m = ctx
        .registry()
        .list_members(server, 0, 1)
        .map_err(|_| error(503, "the registry is unavailable"))?;
    m.into_iter()
        .next()
        .map(|m| crate::protocol::guild::person(&m.user))
        .ok_or_else(|| error(409, "the server has no members to act as"))
}

/// Writes one record to the ingest listener (a producer connection).
fn ingest(ctx: &Ctx, frame: &[u8]) -> Result<(), Response> {
    let mut s = TcpStream::connect_timeout(&ctx.v.ingest_addr, INGEST_DEADLINE)
        .map_err(|_| error(503, "the ingest listener is not reachable"))?;
    let _ = s.set_write_timeout(Some(INGEST_DEADLINE));
    s.write_all(frame)
        .map_err(|_| error(503, "the ingest listener did not take the event"))
}

fn iso8601_now() -> String {
    let ms = now_ms();
    let (days, rem) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    let (h, mi, s) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60);
    format!(
        "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}+00:00",
        rem % 1000
    )
}

/// `POST /api/test-message`: a MESSAGE_CREATE from a member, in a channel
/// the bot can see, mentioning the bot (so it sees the content).
pub fn test_message(ctx: &Ctx, s: &Session, req: &Request) -> Response {
    let app = match application(ctx, s) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let (server, channel) = match channel(ctx, &app, req) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let author = match person(ctx, server) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut content = req
        .field("content")
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "test message from the developer portal".into());
    if content.chars().count() > MAX_CONTENT {
        content = content.chars().take(MAX_CONTENT).collect();
    }
    let id = registry::snowflake::global().next_id();
    let now = iso8601_now();
    let bot = json!({"id": app.bot_user_id.to_string(), "username": app.bot_username, "discriminator": "0",
                     "global_name": null, "avatar": null, "bot": true});
    let d = json!({
        "id": id.to_string(), "type": 0, "channel_id": channel.to_string(), "guild_id": server.to_string(),
        "author": author,
        "member": {"roles": [], "joined_at": now, "deaf": false, "mute": false, "flags": 0, "pending": false,
                   "premium_since": null, "nick": null, "avatar": null, "communication_disabled_until": null},
        "content": format!("<@{}> {content}", app.bot_user_id), "timestamp": now, "edited_timestamp": null,
        "tts": false, "mention_everyone": false, "mentions": [bot], "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "flags": 0, "components": [],
    });
    let d = serde_json::to_vec(&d).unwrap_or_default();
    let mut frame = Vec::new();
    ingest::encode_parts(
        "MESSAGE_CREATE",
        server,
        channel,
        proto::intents::GUILD_MESSAGES,
        0,
        now_ms() * 1_000_000,
        ingest::FLAG_HAS_CONTENT,
        &[app.bot_user_id],
        &d,
        &mut frame,
    );
    match ingest(ctx, &frame) {
        Ok(()) => Response::json(
            200,
            &json!({"message_id": id.to_string(), "channel_id": channel.to_string(),
                    "server_id": server.to_string(), "sent": true}),
        ),
        Err(r) => r,
    }
}

/// `POST /api/click`: a person uses one of the application's slash
/// commands in a channel; the answer is the interaction's id to poll.
pub fn click(ctx: &Ctx, cookie: &str, s: &Session, req: &Request) -> Response {
    let app = match application(ctx, s) {
        Ok(a) => a,
        Err(r) => return r,
    };
    let (server, channel) = match channel(ctx, &app, req) {
        Ok(c) => c,
        Err(r) => return r,
    };
    let name = req.field("command").unwrap_or_default();
    let known = {
        let reg = ctx.registry();
        let global = reg.commands(app.id, None).unwrap_or_default();
        let local = reg.commands(app.id, Some(server)).unwrap_or_default();
        global.iter().chain(local.iter()).any(|c| c.name == name)
    };
    if !known {
        return error(404, "the application has no such command here");
    }
    let user = match person(ctx, server) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let id = registry::snowflake::global().next_id();
    let d = json!({"id": id.to_string(), "type": 2, "user": user,
                   "data": {"name": name, "type": 1, "options": []}, "locale": "en-US"});
    let d = serde_json::to_vec(&d).unwrap_or_default();
    let mut frame = Vec::new();
    ingest::encode_parts(
        "INTERACTION_CREATE",
        server,
        channel,
        0,
        0,
        now_ms() * 1_000_000,
        ingest::FLAG_INTERACTION,
        &[app.id],
        &d,
        &mut frame,
    );
    if let Some(s) = lock(&ctx.sessions).get(cookie, std::time::Instant::now()) {
        s.own(id);
    }
    match ingest(ctx, &frame) {
        Ok(()) => Response::json(200, &json!({"interaction_id": id.to_string()})),
        Err(r) => r,
    }
}

/// `GET /api/interactions/{id}`: what the person sees (the session's own
/// clicks only).
pub fn interaction(ctx: &Ctx, s: &Session, id: &str) -> Response {
    let Some(id) = id
        .parse::<u64>()
        .ok()
        .filter(|i| s.interactions.contains(i))
    else {
        return error(404, "not one of your interactions");
    };
    let seen = ctx
        .v
        .board
        .get(id)
        .unwrap_or_else(|| json!({"state": "pending"}));
    Response::json(200, &seen)
}

/// `POST /api/verify-endpoint`: the set-endpoint check, on the URL given
/// or the one set; the failure is shown exactly.
pub fn verify_endpoint(ctx: &Ctx, s: &Session, req: &Request) -> Response {
    let given = req.field("url").filter(|u| !u.trim().is_empty());
    let (url, seed) = {
        let reg = ctx.registry();
        let url = match given {
            Some(u) => Some(u.trim().to_string()),
            None => match reg.interactions_endpoint(s.app) {
                Ok(u) => u,
                Err(_) => return error(503, "the registry is unavailable"),
            },
        };
        let Some(url) = url else {
            return error(400, "no interactions endpoint is set: give a URL");
        };
        match reg.signing_seed(s.app) {
            Ok(seed) => (url, seed),
            Err(_) => return error(503, "the registry is unavailable"),
        }
    };
    if url.len() > registry::MAX_ENDPOINT_URL {
        return error(400, "the URL is too long");
    }
    match ctx.v.egress.verify_endpoint(&url, &seed, VERIFY_EACH) {
        Ok(()) => Response::json(
            200,
            &json!({"url": url, "ok": true, "result": "signed PING answered, bad signature refused"}),
        ),
        Err(why) => Response::json(200, &json!({"url": url, "ok": false, "result": why})),
    }
}

/// `POST /api/endpoint`: verify `url` as `verify_endpoint` does and save
/// it only if both checks pass; an empty `url` removes the endpoint.
pub fn save_endpoint(ctx: &Ctx, s: &Session, req: &Request) -> Response {
    let url = req
        .field("url")
        .map(|u| u.trim().to_string())
        .unwrap_or_default();
    if url.is_empty() {
        return match ctx.registry().set_interactions_endpoint(s.app, None) {
            Ok(()) => Response::json(
                200,
                &json!({"ok": true, "url": null, "result": "removed: interactions reach the bot over the gateway"}),
            ),
            Err(_) => error(503, "the registry is unavailable"),
        };
    }
    if url.len() > registry::MAX_ENDPOINT_URL {
        return error(400, "the URL is too long");
    }
    let seed = match ctx.registry().signing_seed(s.app) {
        Ok(seed) => seed,
        Err(_) => return error(503, "the registry is unavailable"),
    };
    if let Err(why) = ctx.v.egress.verify_endpoint(&url, &seed, VERIFY_EACH) {
        return Response::json(
            200,
            &json!({"ok": false, "url": url, "result": format!("not saved: {why}")}),
        );
    }
    match ctx.registry().set_interactions_endpoint(s.app, Some(&url)) {
        Ok(()) => Response::json(
            200,
            &json!({"ok": true, "url": url, "result": "verified and saved: signed PING answered, bad signature refused"}),
        ),
        Err(_) => error(503, "the registry is unavailable"),
    }
}

/// `POST /api/reset-token`: a new token, shown once; the old one stops
/// working (live sessions close with 4004; other portal sessions end).
pub fn reset_token(ctx: &Ctx, cookie: &str, s: &Session) -> Response {
    let token = match ctx.registry().reset_token(s.app) {
        Ok(t) => t,
        Err(_) => return error(503, "the registry is unavailable"),
    };
    lock(&ctx.sessions).end_app(s.app, cookie);
    Response::json(
        200,
        &json!({"token": token, "note": "Shown once: store it now. Sessions using the old token are closed with 4004."}),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_iso8601() {
        let t = super::iso8601_now();
        assert_eq!(t.len(), "2024-01-01T00:00:00.000+00:00".len());
        assert!(t.starts_with("20") && t.ends_with("+00:00"));
    }
}
