//! An unmodified `twilight-http` 0.18 client, with its own default
//! ratelimiter (twilight-http-ratelimiting), acting through a real node's
//! REST edge. The only setting that differs from talking to Discord is
//! `ClientBuilder::proxy(node address, use_http = true)`, which makes every
//! request `http://NODE/api/v10/...`.
//!
//! twilight returns a 429 to the caller as an error (it does not retry), so
//! 30 `create_message` calls in a row that all succeed prove its ratelimiter
//! read our headers (`X-RateLimit-Scope`, `Bucket`, `Limit`, `Remaining`,
//! `Reset-After`) and waited out each 5-per-5-s window: no 429 reached it.

mod support;

use std::time::{Duration, Instant};

use support::bot;
use support::node::Node;
use twilight_http::request::channel::reaction::RequestReactionType;
use twilight_http::Client;
use twilight_model::id::Id;

const INTENTS: u64 = support::BOT_INTENTS | (1 << 10);

#[test]
fn twilight_http_sends_replies_edits_reacts_deletes_and_bursts_without_a_429() {
    // The demo on, as `cargo run --release` runs it; the bot (the demo bot)
    // acts once the demo's `/ping` has been refused twice (issue 26: from
    // then on its messages came back with `"author": {}`, which twilight's
    // model refuses).
    // (A long heartbeat interval: the watcher below reads only at the end.)
    let node = Node::start(&["--heartbeat-interval-ms", "120000"]);
    support::interact::refused_first(&node, None);
    let mut session =
        bot::identify(node.gateway, "watcher", &node.token, INTENTS, None).expect("identify");
    let (_, general) = bot::server_and_general(&session.guild_creates[0]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The ratelimiter spawns its task on the runtime the client is built in.
    let _guard = rt.enter();
    let client = Client::builder()
        .token(format!("Bot {}", node.token))
        .proxy(node.gateway.to_string(), true)
        .timeout(Duration::from_secs(10))
        .build();
    let channel = Id::new(general);

    let (pong, reply, burst_elapsed) = rt.block_on(async {
        let pong = client
            .create_message(channel)
            .content("pong")
            .await
            .expect("create")
            .model()
            .await
            .expect("model");
        assert_eq!(pong.content, "pong");
        let reply = client
            .create_message(channel)
            .content("a reply")
            .reply(pong.id)
            .await
            .expect("reply")
            .model()
            .await
            .expect("model");
        assert_eq!(
            reply.referenced_message.as_ref().map(|m| m.id),
            Some(pong.id)
        );
        let edited = client
            .update_message(channel, pong.id)
            .content(Some("pong (edited)"))
            .await
            .expect("edit")
            .model()
            .await
            .expect("model");
        assert_eq!(edited.content, "pong (edited)");
        assert!(edited.edited_timestamp.is_some());
        client
            .create_reaction(
                channel,
                pong.id,
                &RequestReactionType::Unicode { name: "\u{1F44D}" },
            )
            .await
            .expect("react");
        client
            .delete_message(channel, reply.id)
            .await
            .expect("delete");
        let fetched = client
            .message(channel, pong.id)
            .await
            .expect("get")
            .model()
            .await
            .expect("model");
        assert_eq!(
            fetched.reactions.len(),
            1,
            "the reaction shows on the message"
        );
        // The burst: twilight's ratelimiter must pace it through the channel's window.
        let t0 = Instant::now();
        for i in 0..30 {
            let r = client
                .create_message(channel)
                .content(&format!("burst {i}"))
                .await;
            if let Err(e) = &r {
                panic!("burst message {i}: twilight saw an error (a 429 would be one): {e:?}");
            }
        }
        (pong, reply, t0.elapsed())
    });
    // 30 messages at 5 per 5 s: the 6 windows after the first take ~25 s.
    assert!(
        burst_elapsed > Duration::from_secs(15),
        "twilight waited on the headers: {burst_elapsed:?}"
    );

    // Each action came back over the gateway.
    let (pong_id, reply_id) = (pong.id.get().to_string(), reply.id.get().to_string());
    let mut seen = std::collections::BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until && seen.len() < 5 + 30 {
        let v = session.next_dispatch(Duration::from_secs(10));
        let d = &v["d"];
        let key = match v["t"].as_str().unwrap_or("") {
            // The bot's own (the demo's messages are alice's).
            "MESSAGE_CREATE" if d["author"]["bot"] == true => {
                assert_eq!(
                    d["author"]["id"].as_str(),
                    Some(pong.author.id.get().to_string().as_str()),
                    "the bot's own message's author: {d}"
                );
                format!("create {}", d["content"].as_str().unwrap_or(""))
            }
            "MESSAGE_UPDATE" if d["id"] == pong_id.as_str() => "update".to_string(),
            "MESSAGE_REACTION_ADD" if d["message_id"] == pong_id.as_str() => "react".to_string(),
            "MESSAGE_DELETE" if d["id"] == reply_id.as_str() => "delete".to_string(),
            _ => continue,
        };
        seen.insert(key);
    }
    for k in [
        "create pong",
        "create a reply",
        "update",
        "react",
        "delete",
        "create burst 0",
        "create burst 29",
    ] {
        assert!(
            seen.contains(k),
            "{k} never came back as an event; saw {seen:?}"
        );
    }
}
