//! One WebSocket connection as its own tokio task: Hello, Identify (token
//! checked against the bots, or any token accepted), READY and the one
//! GUILD_CREATE, then a loop answering heartbeats and sending each event of
//! the bot's server that its intents and channel permissions let through,
//! serialised per session (its own `s`), with MESSAGE_CONTENT redaction.
//! A session missing heartbeats for 1.5 intervals is closed (4009); an
//! unauthenticated one after 30 s (4003). Lagging receivers lose events,
//! which are counted, as `tokio::sync::broadcast` does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio::sync::broadcast;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::state::{
    channels, server_of, Bot, BoxErr, Event, Payload, State, GUILDS, MESSAGE_CONTENT,
    SEND_MESSAGES, VIEW_CHANNEL,
};

type Ws = WebSocketStream<TcpStream>;

#[derive(Serialize)]
struct Dispatch<'a, T: Serialize> {
    op: u8,
    t: &'a str,
    s: u64,
    d: &'a T,
}

async fn send_json(ws: &mut Ws, v: &impl Serialize) -> Result<(), BoxErr> {
    let text = serde_json::to_string(v)?;
    ws.send(Message::text(text)).await?;
    Ok(())
}

async fn close(ws: &mut Ws, code: u16, reason: &str) {
    let _ = ws
        .close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.to_string().into(),
        }))
        .await;
}

struct Session {
    bot_user_id: u64,
    intents: u64,
    /// Effective permissions per channel of the bot's server.
    channel_perms: HashMap<u64, u64>,
    guild_id: u64,
    seq: u64,
}

impl Session {
    fn wants(&self, ev: &Event) -> bool {
        if ev.guild_id != self.guild_id || self.intents & ev.intent != ev.intent {
            return false;
        }
        if ev.channel_id != 0 {
            let p = self.channel_perms.get(&ev.channel_id).copied().unwrap_or(0);
            let need = VIEW_CHANNEL | ev.permissions;
            if p & need != need {
                return false;
            }
        }
        true
    }
}

/// Empties the MESSAGE_CONTENT fields of a message (what a bot without the
/// intent sees), unless the bot is mentioned.
fn redact(d: &Payload) -> Payload {
    match d {
        Payload::Message(m) => {
            let mut m = m.clone();
            m.content.clear();
            m.embeds.clear();
            m.attachments.clear();
            m.components.clear();
            Payload::Message(m)
        }
        Payload::Other(v) => {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("content".into(), json!(""));
                o.insert("embeds".into(), json!([]));
                o.insert("attachments".into(), json!([]));
                o.insert("components".into(), json!([]));
                o.remove("poll");
            }
            Payload::Other(v)
        }
    }
}

pub async fn connection(sock: TcpStream, st: &State) -> Result<(), BoxErr> {
    sock.set_nodelay(true)?;
    let mut ws = tokio_tungstenite::accept_async(sock).await?;
    let hb = Duration::from_millis(st.cfg.heartbeat_ms);
    send_json(
        &mut ws,
        &json!({"op": 10, "d": {"heartbeat_interval": st.cfg.heartbeat_ms}}),
    )
    .await?;

    // Until Identify: heartbeats are answered, anything else is refused.
    let identify: Value = loop {
        let msg = match timeout(Duration::from_secs(30), ws.next()).await {
            Err(_) => {
                close(&mut ws, 4003, "not authenticated in time").await;
                return Ok(());
            }
            Ok(None) => return Ok(()),
            Ok(Some(m)) => m?,
        };
        let text = match msg {
            Message::Text(t) => t,
            Message::Close(_) => return Ok(()),
            Message::Binary(_) => {
                close(&mut ws, 4002, "decode error").await;
                return Ok(());
            }
            _ => continue,
        };
        let v: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(_) => {
                close(&mut ws, 4002, "decode error").await;
                return Ok(());
            }
        };
        match v["op"].as_u64() {
            Some(1) => send_json(&mut ws, &json!({"op": 11})).await?,
            Some(2) => break v,
            _ => {
                close(&mut ws, 4003, "not authenticated").await;
                return Ok(());
            }
        }
    };
    let d = &identify["d"];
    let token = d["token"].as_str().unwrap_or("");
    let token = token.strip_prefix("Bot ").unwrap_or(token);
    let Some(intents) = d["intents"].as_u64() else {
        close(&mut ws, 4013, "invalid intents").await;
        return Ok(());
    };
    let made_up;
    let bot = match &st.bots {
        Some(bots) => match bots.get(token) {
            Some(b) => b,
            None => {
                close(&mut ws, 4004, "authentication failed").await;
                return Ok(());
            }
        },
        None => {
            let id = 1_170_000_000_200_000_000 + (fnv(token.as_bytes()) % 1_000_000);
            made_up = Bot {
                application_id: id,
                user_id: id,
                username: format!("bot{id}"),
                server: server_of(&st.cfg, fnv(token.as_bytes()) % st.cfg.servers),
            };
            &made_up
        }
    };

    // Subscribe before READY so that nothing committed after it is missed.
    let guild_id = bot.server;
    let mut rx = st.servers[&guild_id].subscribe();
    let perms = VIEW_CHANNEL | SEND_MESSAGES;
    let mut session = Session {
        bot_user_id: bot.user_id,
        intents,
        channel_perms: channels(guild_id).iter().map(|c| (c.id, perms)).collect(),
        guild_id,
        seq: 0,
    };
    let user = json!({
        "id": bot.user_id.to_string(), "username": bot.username, "discriminator": "0",
        "global_name": null, "avatar": null, "bot": true, "system": false,
        "mfa_enabled": false, "verified": true, "email": null, "flags": 0,
        "public_flags": 0, "banner": null, "accent_color": null,
    });
    let session_id = new_session_id();
    session.seq += 1;
    let ready = json!({
        "v": 10,
        "user": user,
        "guilds": [{"id": guild_id.to_string(), "unavailable": true}],
        "session_id": session_id,
        "session_type": "normal",
        "resume_gateway_url": st.gateway_url,
        "shard": [0, 1],
        "application": {"id": bot.application_id.to_string(), "flags": 0},
        "private_channels": [], "relationships": [], "presences": [],
        "guild_join_requests": [], "geo_ordered_rtc_regions": [],
        "user_settings": {}, "auth": {}, "_trace": ["conventional-gateway"],
    });
    send_json(
        &mut ws,
        &Dispatch {
            op: 0,
            t: "READY",
            s: session.seq,
            d: &ready,
        },
    )
    .await?;
    if intents & GUILDS != 0 {
        session.seq += 1;
        let gc = guild_create(bot, &user);
        send_json(
            &mut ws,
            &Dispatch {
                op: 0,
                t: "GUILD_CREATE",
                s: session.seq,
                d: &gc,
            },
        )
        .await?;
    }
    st.metrics.identifies.fetch_add(1, Relaxed);
    st.metrics.sessions.fetch_add(1, Relaxed);
    let r = session_loop(&mut ws, st, &mut session, &mut rx, hb).await;
    st.metrics.sessions.fetch_sub(1, Relaxed);
    r
}

async fn session_loop(
    ws: &mut Ws,
    st: &State,
    session: &mut Session,
    rx: &mut broadcast::Receiver<Arc<Event>>,
    hb: Duration,
) -> Result<(), BoxErr> {
    // A session that misses heartbeats for 1.5 intervals is a zombie.
    let zombie_after = hb + hb / 2;
    let deadline = sleep_until(Instant::now() + zombie_after);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            msg = ws.next() => {
                let msg = match msg {
                    None => return Ok(()),
                    Some(m) => m?,
                };
                match msg {
                    Message::Text(text) => {
                        let v: Value = match serde_json::from_str(&text) {
                            Ok(v) => v,
                            Err(_) => {
                                close(ws, 4002, "decode error").await;
                                return Ok(());
                            }
                        };
                        match v["op"].as_u64() {
                            Some(1) => {
                                deadline.as_mut().reset(Instant::now() + zombie_after);
                                send_json(ws, &json!({"op": 11})).await?;
                            }
                            Some(2) => {
                                close(ws, 4005, "already authenticated").await;
                                return Ok(());
                            }
                            Some(_) => {}
                            None => {
                                close(ws, 4002, "decode error").await;
                                return Ok(());
                            }
                        }
                    }
                    Message::Close(_) => return Ok(()),
                    // Pings are answered by tungstenite itself.
                    _ => {}
                }
            }
            ev = rx.recv() => {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        // This task fell more than the channel's capacity behind:
                        // those events are gone for this session.
                        st.metrics.lagged_events.fetch_add(n, Relaxed);
                        continue;
                    }
                    Err(broadcast::error::RecvError::Closed) => return Ok(()),
                };
                if !session.wants(&ev) {
                    continue;
                }
                session.seq += 1;
                let needs_redaction = ev.has_content
                    && session.intents & MESSAGE_CONTENT == 0
                    && !ev.mentions.contains(&session.bot_user_id);
                if needs_redaction {
                    let d = redact(&ev.d);
                    send_json(ws, &Dispatch { op: 0, t: &ev.t, s: session.seq, d: &d }).await?;
                } else {
                    send_json(ws, &Dispatch { op: 0, t: &ev.t, s: session.seq, d: &ev.d }).await?;
                }
                st.metrics.deliveries.fetch_add(1, Relaxed);
            }
            _ = &mut deadline => {
                close(ws, 4009, "session timed out").await;
                return Ok(());
            }
        }
    }
}

fn guild_create(bot: &Bot, user: &Value) -> Value {
    let gid = bot.server;
    let channels: Vec<Value> = channels(gid)
        .iter()
        .map(|c| {
            json!({
                "id": c.id.to_string(), "type": 0, "guild_id": gid.to_string(),
                "name": c.name, "position": c.position, "parent_id": null, "topic": null,
                "nsfw": false, "rate_limit_per_user": 0, "last_message_id": null,
                "permission_overwrites": [], "flags": 0,
            })
        })
        .collect();
    let role_id = gid + 100;
    json!({
        "id": gid.to_string(), "name": "bench server", "icon": null, "icon_hash": null,
        "splash": null, "discovery_splash": null, "banner": null, "description": null,
        "owner_id": gid.to_string(), "afk_channel_id": null, "afk_timeout": 300,
        "widget_enabled": false, "verification_level": 0, "default_message_notifications": 0,
        "explicit_content_filter": 0, "mfa_level": 0, "nsfw_level": 0, "premium_tier": 0,
        "premium_subscription_count": 0, "premium_progress_bar_enabled": false,
        "preferred_locale": "en-US", "system_channel_id": null, "system_channel_flags": 0,
        "rules_channel_id": null, "public_updates_channel_id": null,
        "safety_alerts_channel_id": null, "vanity_url_code": null, "application_id": null,
        "max_members": 500000, "max_video_channel_users": 25, "features": [], "emojis": [],
        "stickers": [],
        "roles": [
            {"id": gid.to_string(), "name": "@everyone", "permissions": "0", "position": 0,
             "color": 0, "hoist": false, "managed": false, "mentionable": false, "icon": null,
             "unicode_emoji": null, "flags": 0, "tags": {}},
            {"id": role_id.to_string(), "name": bot.username, "permissions": (VIEW_CHANNEL | SEND_MESSAGES).to_string(),
             "position": 1, "color": 0, "hoist": false, "managed": true, "mentionable": false,
             "icon": null, "unicode_emoji": null, "flags": 0,
             "tags": {"bot_id": bot.user_id.to_string()}},
        ],
        "channels": channels, "threads": [],
        "members": [{
            "user": user, "nick": null, "avatar": null, "roles": [role_id.to_string()],
            "joined_at": "2026-01-01T00:00:00.000000+00:00", "premium_since": null,
            "deaf": false, "mute": false, "pending": false, "flags": 0,
            "communication_disabled_until": null,
        }],
        "member_count": 2, "presences": [], "voice_states": [], "stage_instances": [],
        "guild_scheduled_events": [], "soundboard_sounds": [], "large": false,
        "unavailable": false, "joined_at": "2026-01-01T00:00:00.000000+00:00",
    })
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    static N: AtomicU64 = AtomicU64::new(0);
    let s = std::collections::hash_map::RandomState::new();
    let mut h = s.build_hasher();
    h.write_u64(N.fetch_add(1, Relaxed));
    let a = h.finish();
    h.write_u64(a);
    format!("{:016x}{:016x}", a, h.finish())
}
