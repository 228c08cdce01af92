//! An unmodified `twilight-gateway` 0.18 shard against a real `gatewayd`.
//!
//! The only configuration is the one a bot author would write to point the
//! library at our node instead of Discord:
//!
//! ```ignore
//! ConfigBuilder::new(token, intents).proxy_url(node.ws_url()).build()
//! ```
//!
//! twilight appends `/?v=10&encoding=json&compress=zlib-stream` to the proxy
//! URL itself (the dev-dependency is built with its `zlib` feature, so every
//! test here also runs over transport compression) and reconnects to READY's
//! `resume_gateway_url` when it resumes.
//!
//! Every message the library cannot deserialize fails the test with the raw
//! frame (twilight's `ReceiveMessageError` carries it), so a failure here
//! points at the exact payload the server got wrong.

mod support;

use std::time::{Duration, Instant};
use support::node::Node;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt as _,
};

/// Upper bound for each scenario; the node is configured so that everything
/// asserted here happens within a few seconds.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(30);

fn shard_for(node: &Node, token: String, intents: Intents) -> Shard {
    let config = ConfigBuilder::new(token, intents)
        .proxy_url(node.ws_url())
        .build();
    Shard::with_config(ShardId::ONE, config)
}

/// The next event of any type, or a panic naming what we were waiting for.
async fn next_event(
    shard: &mut Shard,
    deadline: Instant,
    waiting_for: &dyn std::fmt::Debug,
) -> Event {
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, shard.next_event(EventTypeFlags::all())).await {
        Err(_) => panic!("timed out after {SCENARIO_TIMEOUT:?}; progress so far: {waiting_for:#?}"),
        Ok(None) => panic!(
            "twilight shard stream ended (state {:?}); progress so far: {waiting_for:#?}",
            shard.state()
        ),
        Ok(Some(Err(e))) => panic!(
            "twilight-gateway failed to handle a gateway message: {e}\n{e:?}\nprogress so far: {waiting_for:#?}"
        ),
        Ok(Some(Ok(event))) => event,
    }
}

/// Opcode-level events: everything else the shard yields is a dispatch (op 0)
/// and so carries a sequence number.
fn is_dispatch(event: &Event) -> bool {
    !matches!(
        event,
        Event::GatewayClose(_)
            | Event::GatewayHeartbeat
            | Event::GatewayHeartbeatAck
            | Event::GatewayHello(_)
            | Event::GatewayInvalidateSession(_)
            | Event::GatewayReconnect
    )
}

/// The id the bot token belongs to, from `GET /api/v10/users/@me`.
fn rest_bot_user_id(node: &Node) -> String {
    let auth = format!("Bot {}", node.token);
    let (status, body) = support::http::http_request(
        node.gateway,
        "GET",
        "/api/v10/users/@me",
        &[("Authorization", &auth)],
    )
    .unwrap();
    assert_eq!(status, 200, "GET /api/v10/users/@me: {body}");
    let user: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("users/@me body {body:?}: {e}"));
    user["id"]
        .as_str()
        .unwrap_or_else(|| panic!("users/@me without a string id: {body}"))
        .to_string()
}

#[derive(Debug, Default)]
struct Progress {
    hellos: u32,
    ready: bool,
    session_id: Option<String>,
    ready_guild_ids: Vec<u64>,
    last_seq: Option<u64>,
    demo_guild_id: Option<u64>,
    general_channel_id: Option<u64>,
    /// (sequence, content) of each demo MESSAGE_CREATE.
    messages: Vec<(u64, String)>,
    heartbeat_acks: u32,
    /// We asked twilight to close with 4000 and expect the gateway's close echo.
    closing: bool,
    /// Index into `messages` of the first one after the close was requested.
    closed_at_message: Option<usize>,
    resumed: bool,
    /// Sequence number of RESUMED.
    resumed_seq: Option<u64>,
}

impl Progress {
    fn done(&self, want_messages: usize) -> bool {
        self.ready
            && self.general_channel_id.is_some()
            && self.messages.len() >= want_messages
            && self.heartbeat_acks >= 1
    }

    /// Check one event from the shard against the protocol and record it.
    fn observe(&mut self, shard: &Shard, event: Event, intents: Intents, bot_user_id: &str) {
        let p = self;
        if is_dispatch(&event) {
            let seq = shard
                .session()
                .unwrap_or_else(|| {
                    panic!("dispatch {:?} before READY created a session", event.kind())
                })
                .sequence();
            match p.last_seq {
                None => assert_eq!(seq, 1, "first dispatch {:?} must have s = 1", event.kind()),
                Some(last) => assert_eq!(
                    seq,
                    last + 1,
                    "dispatch {:?}: s jumped from {last} to {seq} (the server skipped or repeated a sequence \
                     number, or sent a dispatch type twilight 0.18 does not know)",
                    event.kind()
                ),
            }
            p.last_seq = Some(seq);
        }

        match event {
            Event::GatewayHello(hello) => {
                assert_eq!(
                    hello.heartbeat_interval, 1000,
                    "Hello must carry --heartbeat-interval-ms"
                );
                assert!(
                    !p.closing,
                    "Hello on a new connection before the old one's close echo"
                );
                p.hellos += 1;
            }
            Event::Ready(ready) => {
                assert!(!p.ready, "second READY: twilight had a session to resume, the server made it identify anew");
                assert!(p.hellos == 1, "READY before Hello");
                assert_eq!(ready.version, 10, "READY v");
                assert!(ready.user.bot, "READY user must be a bot: {:?}", ready.user);
                assert_eq!(
                    ready.user.id.get().to_string(),
                    bot_user_id,
                    "READY user vs GET /users/@me"
                );
                assert!(!ready.session_id.is_empty(), "READY session_id empty");
                assert!(
                    ready.resume_gateway_url.starts_with("ws://")
                        || ready.resume_gateway_url.starts_with("wss://"),
                    "READY resume_gateway_url {:?}",
                    ready.resume_gateway_url
                );
                assert_eq!(ready.shard, Some(ShardId::ONE), "READY shard");
                assert!(
                    !ready.guilds.is_empty(),
                    "READY lists no guilds; the demo bot is installed in Demo Server"
                );
                for g in &ready.guilds {
                    assert!(
                        g.unavailable,
                        "READY guild {} must be unavailable: true",
                        g.id
                    );
                }
                // twilight keeps the session it will resume with: it must be ours.
                let session = shard
                    .session()
                    .expect("twilight stored no session after READY");
                assert_eq!(
                    session.id(),
                    ready.session_id,
                    "twilight session id vs READY session_id"
                );
                assert_eq!(
                    shard.resume_url(),
                    Some(ready.resume_gateway_url.as_str()),
                    "twilight resume url vs READY resume_gateway_url"
                );
                p.ready = true;
                p.session_id = Some(ready.session_id.clone());
                p.ready_guild_ids = ready.guilds.iter().map(|g| g.id.get()).collect();
            }
            Event::GuildCreate(gc) => {
                assert!(p.ready, "GUILD_CREATE before READY");
                let id = gc.id().get();
                assert!(
                    p.ready_guild_ids.contains(&id),
                    "GUILD_CREATE for {id}, not listed in READY {:?}",
                    p.ready_guild_ids
                );
                // `GuildCreate` is an untagged enum (available guild or
                // `{id, unavailable}`); look at it as JSON so the test needs no
                // direct twilight-model dependency.
                let guild = serde_json::to_value(&*gc).unwrap();
                assert_ne!(
                    guild["unavailable"],
                    serde_json::json!(true),
                    "GUILD_CREATE is an unavailable stub: {guild}"
                );
                if guild["name"] == "Demo Server" {
                    assert!(
                        p.demo_guild_id.is_none(),
                        "two GUILD_CREATE for Demo Server"
                    );
                    let channels = guild["channels"].as_array().expect("GUILD_CREATE channels");
                    let general = channels
                        .iter()
                        .find(|c| c["name"] == "general")
                        .unwrap_or_else(|| {
                            panic!("Demo Server GUILD_CREATE has no #general: {channels:?}")
                        });
                    assert_eq!(
                        general["type"], 0,
                        "#general must be a GUILD_TEXT channel: {general}"
                    );
                    assert!(
                        !guild["roles"]
                            .as_array()
                            .expect("GUILD_CREATE roles")
                            .is_empty(),
                        "no roles (@everyone)"
                    );
                    p.demo_guild_id = Some(id);
                    p.general_channel_id = Some(general["id"].as_str().unwrap().parse().unwrap());
                }
            }
            Event::MessageCreate(msg) => {
                let content = msg.content.clone();
                if msg.author.name != "alice" {
                    return;
                }
                assert!(
                    p.general_channel_id.is_some(),
                    "demo MESSAGE_CREATE before the Demo Server GUILD_CREATE (libraries drop it): {msg:?}"
                );
                assert_eq!(
                    msg.guild_id.map(|g| g.get()),
                    p.demo_guild_id,
                    "MESSAGE_CREATE guild_id"
                );
                assert_eq!(
                    Some(msg.channel_id.get()),
                    p.general_channel_id,
                    "MESSAGE_CREATE channel_id"
                );
                assert!(!msg.author.bot, "the demo author (alice) must not be a bot");
                if intents.contains(Intents::MESSAGE_CONTENT) {
                    let n = demo_number(&content);
                    if let Some((_, prev)) = p.messages.last() {
                        assert!(
                            n > demo_number(prev),
                            "demo messages out of order: {prev:?} then {content:?}"
                        );
                    }
                } else {
                    assert_eq!(
                        content, "",
                        "without MESSAGE_CONTENT the content must be empty"
                    );
                    assert!(
                        msg.embeds.is_empty(),
                        "without MESSAGE_CONTENT embeds must be empty"
                    );
                    assert!(
                        msg.attachments.is_empty(),
                        "without MESSAGE_CONTENT attachments must be empty"
                    );
                    assert!(
                        msg.components.is_empty(),
                        "without MESSAGE_CONTENT components must be empty"
                    );
                    assert!(
                        msg.poll.is_none(),
                        "without MESSAGE_CONTENT poll must be absent"
                    );
                }
                p.messages.push((p.last_seq.unwrap(), content));
            }
            Event::GatewayHeartbeatAck => {
                p.heartbeat_acks += 1;
            }
            Event::GatewayClose(frame) if p.closing => {
                // The gateway echoes the 4000 close twilight sent.
                p.closing = false;
                if let Some(f) = &frame {
                    assert!(
                        f.code == 4000 || f.code == 1000 || f.code == 1005,
                        "close echo with code {} (twilight sent 4000)",
                        f.code
                    );
                }
            }
            Event::Resumed => {
                assert!(p.closed_at_message.is_some(), "RESUMED without a resume");
                assert!(!p.closing, "RESUMED before the old connection closed");
                assert_eq!(
                    p.hellos, 2,
                    "RESUMED must follow the new connection's Hello"
                );
                assert!(!p.resumed, "two RESUMED");
                assert_eq!(
                    shard.session().map(|s| s.id()),
                    p.session_id.as_deref(),
                    "session id changed by resume"
                );
                p.resumed = true;
                p.resumed_seq = p.last_seq;
            }
            Event::GatewayClose(frame) => {
                panic!("gateway closed the connection: {frame:?}; progress: {p:#?}")
            }
            Event::GatewayInvalidateSession(resumable) => {
                panic!("unexpected op 9 Invalid Session (resumable: {resumable}); progress: {p:#?}")
            }
            Event::GatewayReconnect => panic!("unexpected op 7 Reconnect; progress: {p:#?}"),
            _ => {}
        }
    }
}

fn demo_number(content: &str) -> u64 {
    content
        .strip_prefix("demo message ")
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("content {content:?} is not `demo message N`"))
}

/// Drive a shard until READY, the demo server's GUILD_CREATE, `want_messages`
/// demo MESSAGE_CREATEs in #general and one heartbeat ACK were all seen,
/// checking every event on the way.
async fn drive(node: &Node, intents: Intents, want_messages: usize) -> (Shard, Progress) {
    let bot_user_id = rest_bot_user_id(node);
    let mut shard = shard_for(node, node.token.clone(), intents);
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    let mut p = Progress::default();
    while !p.done(want_messages) {
        let event = next_event(&mut shard, deadline, &p).await;
        p.observe(&shard, event, intents, &bot_user_id);
    }
    // The ACK was a reply to twilight's own heartbeat, so it measured latency.
    assert!(
        shard.latency().periods() >= 1,
        "twilight recorded no heartbeat round trip: {:?}",
        shard.latency()
    );
    (shard, p)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_receives_ready_guild_messages_and_heartbeat_acks() {
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--heartbeat-interval-ms",
        "1000",
    ]);
    let intents = Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::MESSAGE_CONTENT;
    let (_shard, p) = drive(&node, intents, 2).await;
    assert!(p.demo_guild_id.is_some());
    for (_, content) in &p.messages {
        assert!(content.starts_with("demo message "), "{content:?}");
    }
    eprintln!("twilight saw: {p:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_without_message_content_gets_empty_content() {
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--heartbeat-interval-ms",
        "1000",
    ]);
    let intents = Intents::GUILDS | Intents::GUILD_MESSAGES;
    let (_shard, p) = drive(&node, intents, 2).await;
    assert!(p.messages.iter().all(|(_, c)| c.is_empty()), "{p:#?}");
}

/// twilight closes with 4000 (resumable), reconnects to READY's
/// `resume_gateway_url`, sends Resume and must get every event it missed, in
/// order and without gaps, then RESUMED, then live events again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_resumes_after_a_4000_close_without_losing_events() {
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--heartbeat-interval-ms",
        "1000",
    ]);
    let intents = Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::MESSAGE_CONTENT;
    let bot_user_id = rest_bot_user_id(&node);
    let (mut shard, mut p) = drive(&node, intents, 1).await;

    shard.close(CloseFrame::RESUME);
    p.closing = true;
    p.closed_at_message = Some(p.messages.len());
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    // Two live messages after RESUMED, so the replay and the live stream join.
    let live_after_resume = |p: &Progress| {
        p.resumed_seq
            .map_or(0, |r| p.messages.iter().filter(|(seq, _)| *seq > r).count())
    };
    while live_after_resume(&p) < 2 {
        let event = next_event(&mut shard, deadline, &p).await;
        let was_closing = p.closing;
        p.observe(&shard, event, intents, &bot_user_id);
        if was_closing && !p.closing {
            // Old connection gone. twilight only reconnects when polled: stay
            // away for 1 s (about 5 demo messages) so the resume must replay.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let replayed = p.messages.len() - p.closed_at_message.unwrap() - live_after_resume(&p);
    assert!(replayed >= 2, "the resume replayed {replayed} demo messages, expected the ~5 posted while disconnected: {p:#?}");
    // No demo message was lost or duplicated across the reconnect.
    let numbers: Vec<u64> = p.messages.iter().map(|(_, c)| demo_number(c)).collect();
    for w in numbers.windows(2) {
        assert_eq!(
            w[1],
            w[0] + 1,
            "demo messages not contiguous across the resume: {numbers:?}\n{p:#?}"
        );
    }
    assert_eq!(shard.session().map(|s| s.id()), p.session_id.as_deref());
    eprintln!("twilight resume: {p:#?}");
}

/// The same close-and-resume with nothing to replay (no demo traffic): the
/// resumed session continues with RESUMED at the next sequence number and
/// keeps heartbeating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_resumes_an_idle_session() {
    let node = Node::start(&["--no-demo-traffic", "--heartbeat-interval-ms", "1000"]);
    let intents = Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::MESSAGE_CONTENT;
    let bot_user_id = rest_bot_user_id(&node);
    let mut shard = shard_for(&node, node.token.clone(), intents);
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    let mut p = Progress::default();
    while !p.done(0) {
        let event = next_event(&mut shard, deadline, &p).await;
        p.observe(&shard, event, intents, &bot_user_id);
    }
    let seq_before = p.last_seq.unwrap();
    shard.close(CloseFrame::RESUME);
    p.closing = true;
    p.closed_at_message = Some(0);
    p.heartbeat_acks = 0;
    while !(p.resumed && p.heartbeat_acks >= 1) {
        let event = next_event(&mut shard, deadline, &p).await;
        p.observe(&shard, event, intents, &bot_user_id);
    }
    assert_eq!(
        p.resumed_seq,
        Some(seq_before + 1),
        "RESUMED must take the next sequence number"
    );
}

#[derive(Debug, Default)]
struct ShardSeen {
    ready_at: Option<Instant>,
    ready_guilds: Vec<u64>,
    guild_creates: Vec<u64>,
    /// Guild id of each demo MESSAGE_CREATE.
    demo_messages: Vec<Option<u64>>,
}

/// Two shards of one bot, started the way twilight starts a cluster (one
/// shared identify queue): every server is delivered to exactly the shard
/// `(server_id >> 22) % 2`, with READY, GUILD_CREATE and its messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_two_shards_split_servers_by_id() {
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--heartbeat-interval-ms",
        "1000",
    ]);
    let intents = Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::MESSAGE_CONTENT;
    let config = ConfigBuilder::new(node.token.clone(), intents)
        .proxy_url(node.ws_url())
        .build();
    // Clones of one config share its identify queue, as in a twilight cluster.
    let mut shards: Vec<Shard> = twilight_gateway::bucket(0, 1, 2)
        .map(|id| Shard::with_config(id, config.clone()))
        .collect();
    let mut seen = [ShardSeen::default(), ShardSeen::default()];
    // twilight's default queue spaces identifies 5 s apart (max_concurrency 1).
    let deadline = Instant::now() + SCENARIO_TIMEOUT + Duration::from_secs(10);
    let demo_guild = |seen: &[ShardSeen; 2]| {
        seen.iter()
            .flat_map(|s| s.ready_guilds.iter().copied())
            .next()
    };

    loop {
        if let Some(g) = demo_guild(&seen) {
            let owner = ((g >> 22) % 2) as usize;
            let other = 1 - owner;
            let other_quiet_for = seen[other].ready_at.map(|t| t.elapsed());
            if seen[owner].demo_messages.len() >= 2
                && other_quiet_for.is_some_and(|d| d >= Duration::from_secs(1))
            {
                break;
            }
        }
        let progress = format!("{seen:#?}");
        let (a, b) = shards.split_at_mut(1);
        let (i, shard, event) = tokio::select! {
            e = next_event(&mut a[0], deadline, &progress) => (0usize, &a[0], e),
            e = next_event(&mut b[0], deadline, &progress) => (1usize, &b[0], e),
        };
        let s = &mut seen[i];
        match event {
            Event::Ready(ready) => {
                assert!(s.ready_at.is_none(), "shard {i}: second READY");
                assert_eq!(
                    ready.shard,
                    Some(ShardId::new(i as u32, 2)),
                    "shard {i}: READY shard"
                );
                assert_eq!(
                    shard.session().map(|s| s.sequence()),
                    Some(1),
                    "shard {i}: READY must be s = 1"
                );
                s.ready_at = Some(Instant::now());
                s.ready_guilds = ready.guilds.iter().map(|g| g.id.get()).collect();
            }
            Event::GuildCreate(gc) => s.guild_creates.push(gc.id().get()),
            Event::MessageCreate(msg) if msg.author.name == "alice" => {
                s.demo_messages.push(msg.guild_id.map(|g| g.get()));
            }
            Event::GatewayClose(frame) => panic!("shard {i}: gateway closed: {frame:?}\n{seen:#?}"),
            Event::GatewayInvalidateSession(r) => {
                panic!("shard {i}: op 9 (resumable {r})\n{seen:#?}")
            }
            Event::GatewayReconnect => panic!("shard {i}: op 7\n{seen:#?}"),
            _ => {}
        }
    }

    let g = demo_guild(&seen).unwrap();
    let owner = ((g >> 22) % 2) as usize;
    let other = 1 - owner;
    for (i, s) in seen.iter().enumerate() {
        for id in &s.ready_guilds {
            assert_eq!(
                ((id >> 22) % 2) as usize,
                i,
                "shard {i} READY lists server {id} of another shard: {seen:#?}"
            );
        }
        assert_eq!(
            s.guild_creates, s.ready_guilds,
            "shard {i}: one GUILD_CREATE per READY server: {seen:#?}"
        );
    }
    assert!(seen[owner].ready_guilds.contains(&g), "{seen:#?}");
    assert!(
        seen[owner].demo_messages.iter().all(|m| *m == Some(g)),
        "{seen:#?}"
    );
    assert!(
        seen[other].demo_messages.is_empty(),
        "shard {other} got Demo Server messages although the server belongs to shard {owner}: {seen:#?}"
    );
}

/// Read until the gateway closes the connection; returns the close code.
async fn close_code(shard: &mut Shard) -> u16 {
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let event = next_event(shard, deadline, &seen).await;
        match event {
            Event::GatewayClose(Some(frame)) => return frame.code,
            Event::GatewayClose(None) => {
                panic!("gateway closed without a close code; before it: {seen:?}")
            }
            Event::Ready(_) => {
                panic!("READY although the identify must be refused; before it: {seen:?}")
            }
            other => seen.push(other.kind()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_unapproved_privileged_intent_is_closed_4014_and_not_retried() {
    let node = Node::start(&["--no-demo-traffic"]);
    // demo-bot has MESSAGE_CONTENT and GUILD_MEMBERS approved, not GUILD_PRESENCES.
    let mut shard = shard_for(
        &node,
        node.token.clone(),
        Intents::GUILDS | Intents::GUILD_PRESENCES,
    );
    assert_eq!(close_code(&mut shard).await, 4014);
    // 4014 is fatal for twilight: the stream ends instead of reconnecting.
    let end = tokio::time::timeout(
        Duration::from_secs(10),
        shard.next_event(EventTypeFlags::all()),
    )
    .await;
    assert!(
        matches!(end, Ok(None)),
        "twilight kept going after 4014: {end:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_bad_token_is_closed_4004() {
    let node = Node::start(&["--no-demo-traffic"]);
    let bad = format!("{}x", node.token);
    let mut shard = shard_for(&node, bad, Intents::GUILDS);
    assert_eq!(close_code(&mut shard).await, 4004);
    let end = tokio::time::timeout(
        Duration::from_secs(10),
        shard.next_event(EventTypeFlags::all()),
    )
    .await;
    assert!(
        matches!(end, Ok(None)),
        "twilight kept going after 4004: {end:?}"
    );
}
