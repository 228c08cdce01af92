//! An unmodified twilight bot answering slash commands and a button
//! against a real node: twilight-http 0.18 registers the commands
//! (`InteractionClient::create_global_command`) and answers
//! (`InteractionClient::create_response`, which sends no Authorization
//! header), twilight-gateway 0.18 receives `Event::InteractionCreate` (its
//! model must parse the node's INTERACTION_CREATE, the component
//! interaction's `message` included). A person uses the commands with
//! `gatewayd interact`; the test asserts what the person sees.
//!
//! The only settings that differ from Discord: `ClientBuilder::proxy(node,
//! true)` and `ConfigBuilder::proxy_url(ws://node)`.

mod support;

use std::time::{Duration, Instant};

use support::interact::{click, Click};
use support::node::Node;
use twilight_gateway::{ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt};
use twilight_http::Client;
use twilight_model::application::command::CommandType;
use twilight_model::application::interaction::{Interaction, InteractionData, InteractionType};
use twilight_model::channel::message::component::{ActionRow, Button, ButtonStyle};
use twilight_model::channel::message::Component;
use twilight_model::http::interaction::{
    InteractionResponse, InteractionResponseData, InteractionResponseType,
};
use twilight_model::id::Id;

const LIMIT: Duration = Duration::from_secs(30);

/// The next INTERACTION_CREATE the shard yields, as twilight parsed it.
async fn next_interaction(shard: &mut Shard) -> Interaction {
    let deadline = Instant::now() + LIMIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, shard.next_event(EventTypeFlags::all())).await {
            Err(_) => panic!("no INTERACTION_CREATE within {LIMIT:?}"),
            Ok(None) => panic!("the shard's stream ended ({:?})", shard.state()),
            Ok(Some(Err(e))) => panic!("twilight-gateway could not handle a message: {e}\n{e:?}"),
            Ok(Some(Ok(Event::InteractionCreate(i)))) => return i.0,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// What `gatewayd interact` printed, waited for off the runtime's thread.
async fn seen(c: Click) -> (i32, std::collections::BTreeMap<String, String>) {
    tokio::task::spawn_blocking(move || c.wait()).await.unwrap()
}

fn message(content: &str, components: Option<Vec<Component>>) -> InteractionResponseData {
    InteractionResponseData {
        content: Some(content.to_owned()),
        components,
        ..Default::default()
    }
}

#[test]
fn twilight_answers_a_slash_command_and_a_button() {
    let node = Node::start(&["--no-demo-traffic"]);
    let (app, at) = support::interact::installed(&node, "twilight-bot");
    let (server, general) = (at.server, at.channel);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The ratelimiter spawns its task on the runtime the client is built in.
    let _guard = rt.enter();
    let http = Client::builder()
        .token(format!("Bot {}", app.token))
        .proxy(node.gateway.to_string(), true)
        .timeout(Duration::from_secs(10))
        .build();
    let config = ConfigBuilder::new(app.token.clone(), Intents::GUILDS)
        .proxy_url(node.ws_url())
        .build();
    let mut shard = Shard::with_config(ShardId::ONE, config);

    rt.block_on(async {
        let ix = http.interaction(Id::new(app.id));
        for (name, what) in [("ping", "Replies with pong"), ("menu", "A button")] {
            let c = ix
                .create_global_command()
                .chat_input(name, what)
                .await
                .expect("register")
                .model()
                .await
                .expect("a twilight Command");
            assert_eq!((c.name.as_str(), c.kind), (name, CommandType::ChatInput));
        }
        // Connected before the person acts: wait for the server's GUILD_CREATE.
        let deadline = Instant::now() + LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, shard.next_event(EventTypeFlags::all())).await {
                Ok(Some(Ok(Event::GuildCreate(g)))) if g.id().get() == server => break,
                Ok(Some(Ok(_))) => {}
                other => panic!("no GUILD_CREATE for the server: {other:?}"),
            }
        }

        // /ping, answered with type 4.
        let person = click(&node, at, &["--command", "ping"]);
        let i = next_interaction(&mut shard).await;
        assert_eq!(i.kind, InteractionType::ApplicationCommand);
        assert_eq!(i.application_id.get(), app.id);
        assert_eq!(i.guild_id.map(Id::get), Some(server));
        assert_eq!(i.channel.as_ref().map(|c| c.id.get()), Some(general));
        let member = i.member.as_ref().expect("member");
        assert_eq!(member.user.as_ref().map(|u| u.name.as_str()), Some("alice"));
        assert!(member.permissions.is_some(), "member.permissions");
        assert!(i.app_permissions.is_some());
        let Some(InteractionData::ApplicationCommand(data)) = &i.data else {
            panic!("not command data: {:?}", i.data);
        };
        assert_eq!(data.name, "ping");
        assert_eq!(data.kind, CommandType::ChatInput);
        assert_eq!(data.guild_id, None, "a global command");
        let answer = InteractionResponse {
            kind: InteractionResponseType::ChannelMessageWithSource,
            data: Some(message("pong", None)),
        };
        ix.create_response(i.id, &i.token, &answer)
            .await
            .expect("callback");
        let (status, saw) = seen(person).await;
        assert_eq!(status, 0, "{saw:?}");
        assert_eq!(saw["state"], "answered", "{saw:?}");
        assert_eq!(saw["content"], "pong", "what the person sees");

        // /menu: a message with a button (with_response: twilight parses the callback's answer).
        let person = click(&node, at, &["--command", "menu"]);
        let i = next_interaction(&mut shard).await;
        let row = Component::ActionRow(ActionRow {
            id: None,
            components: vec![Component::Button(Button {
                custom_id: Some("menu:click".to_owned()),
                disabled: false,
                emoji: None,
                id: None,
                label: Some("Click me".to_owned()),
                sku_id: None,
                style: ButtonStyle::Primary,
                url: None,
            })],
        });
        let answer = InteractionResponse {
            kind: InteractionResponseType::ChannelMessageWithSource,
            data: Some(message("Pick one", Some(vec![row]))),
        };
        let cb = ix
            .create_response(i.id, &i.token, &answer)
            .with_response()
            .await
            .expect("callback")
            .model()
            .await
            .expect("a twilight InteractionCallbackResponse");
        assert_eq!(cb.interaction.id, i.id);
        let sent = cb
            .resource
            .and_then(|r| r.message)
            .expect("resource.message");
        assert_eq!(sent.content, "Pick one");
        assert_eq!(sent.components.len(), 1);
        let (_, saw) = seen(person).await;
        assert_eq!(saw["content"], "Pick one", "{saw:?}");
        let mid = saw["message_id"].clone();
        assert_eq!(mid, sent.id.to_string());

        // The person clicks it: type 3 with the message; answered with type 7.
        let person = click(&node, at, &["--button", "menu:click", "--message", &mid]);
        let b = next_interaction(&mut shard).await;
        assert_eq!(b.kind, InteractionType::MessageComponent);
        let Some(InteractionData::MessageComponent(data)) = &b.data else {
            panic!("not component data: {:?}", b.data);
        };
        assert_eq!(data.custom_id, "menu:click");
        let on = b.message.as_ref().expect("the message the button is on");
        assert_eq!(on.id, sent.id);
        assert_eq!(on.content, "Pick one");
        let answer = InteractionResponse {
            kind: InteractionResponseType::UpdateMessage,
            data: Some(message("clicked", None)),
        };
        ix.create_response(b.id, &b.token, &answer)
            .await
            .expect("callback");
        let (status, saw) = seen(person).await;
        assert_eq!(status, 0, "{saw:?}");
        assert_eq!(saw["content"], "clicked", "{saw:?}");
        assert_eq!(saw["message_id"], mid, "the same message, updated");
    });
}
