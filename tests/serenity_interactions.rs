//! An unmodified serenity 0.12 slash-command bot against a real node: the
//! `Client` with an `EventHandler` (gateway READY, INTERACTION_CREATE as
//! serenity's model parses it), `GuildId::set_commands`,
//! `CommandInteraction::create_response` (which succeeds only on exactly
//! 204), `defer` + `edit_response` + `create_followup`, and a button
//! answered with `ComponentInteraction::create_response(UpdateMessage)`.
//! A person uses the commands with `gatewayd interact`; the test asserts
//! what the person sees.
//!
//! The only settings that differ from Discord: `HttpBuilder::proxy(node)`
//! with `ratelimiter_disabled(true)` (docs/libraries.md, serenity); the
//! gateway URL comes from `GET /gateway`, as for Discord.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serenity::all::{
    ButtonStyle, CommandInteraction, ComponentInteraction, Context, CreateActionRow, CreateButton,
    CreateCommand, CreateInteractionResponse, CreateInteractionResponseFollowup,
    CreateInteractionResponseMessage, EditInteractionResponse, EventHandler, GatewayIntents,
    GuildId, HttpBuilder, Interaction, Ready,
};
use serenity::async_trait;
use support::node::Node;

/// What the handler saw and did, for the test's asserts.
#[derive(Default)]
struct Log {
    synced: Vec<String>,
    ready: bool,
    handled: Vec<(String, String)>,
    errors: Vec<String>,
}

struct Handler {
    guild: GuildId,
    log: Arc<Mutex<Log>>,
}

impl Handler {
    fn note(&self, what: &str, detail: String) {
        self.log.lock().unwrap().handled.push((what.into(), detail));
    }
    fn fail(&self, what: &str, e: impl std::fmt::Display) {
        self.log.lock().unwrap().errors.push(format!("{what}: {e}"));
    }

    async fn command(&self, ctx: &Context, c: &CommandInteraction) -> serenity::Result<()> {
        let who = format!(
            "user={} member={} guild={:?} channel={}",
            c.user.name,
            c.member
                .as_ref()
                .map(|m| m.user.name.clone())
                .unwrap_or_default(),
            c.guild_id.map(|g| g.get()),
            c.channel_id.get()
        );
        match c.data.name.as_str() {
            "ping" => {
                let msg = CreateInteractionResponseMessage::new().content("pong");
                c.create_response(&ctx.http, CreateInteractionResponse::Message(msg))
                    .await?;
                // `say` and `reply` parse the message the REST edge answers
                // (issue 26: "missing field `id`" on `"author": {}`).
                let said = c.channel_id.say(&ctx.http, "said").await?;
                let replied = said.reply(&ctx.http, "replied").await?;
                self.note(
                    "said",
                    format!(
                        "{}|{}|{}|{:?}",
                        said.content,
                        said.author.id.get(),
                        replied.author.id.get(),
                        replied.referenced_message.as_ref().map(|m| m.id == said.id)
                    ),
                );
            }
            "slow" => {
                c.defer(&ctx.http).await?;
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let edited = c
                    .edit_response(&ctx.http, EditInteractionResponse::new().content("done"))
                    .await?;
                let more = c
                    .create_followup(
                        &ctx.http,
                        CreateInteractionResponseFollowup::new().content("and more"),
                    )
                    .await?;
                self.note(
                    "slow-messages",
                    format!("{}|{}", edited.content, more.content),
                );
            }
            "menu" => {
                let row = CreateActionRow::Buttons(vec![CreateButton::new("menu:click")
                    .label("Click me")
                    .style(ButtonStyle::Primary)]);
                let msg = CreateInteractionResponseMessage::new()
                    .content("Pick one")
                    .components(vec![row]);
                c.create_response(&ctx.http, CreateInteractionResponse::Message(msg))
                    .await?;
            }
            other => self.fail("unknown command", other),
        }
        self.note(&c.data.name, who);
        Ok(())
    }

    async fn component(&self, ctx: &Context, b: &ComponentInteraction) -> serenity::Result<()> {
        let msg = CreateInteractionResponseMessage::new()
            .content("clicked")
            .components(vec![]);
        b.create_response(&ctx.http, CreateInteractionResponse::UpdateMessage(msg))
            .await?;
        self.note(
            "click",
            format!(
                "custom_id={} message={}",
                b.data.custom_id,
                b.message.id.get()
            ),
        );
        Ok(())
    }
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, _ready: Ready) {
        let cmds = vec![
            CreateCommand::new("ping").description("Ping"),
            CreateCommand::new("slow").description("Answers slowly"),
            CreateCommand::new("menu").description("A button"),
        ];
        match self.guild.set_commands(&ctx.http, cmds).await {
            Ok(cs) => {
                let mut log = self.log.lock().unwrap();
                log.synced = cs.iter().map(|c| c.name.clone()).collect();
                log.ready = true;
            }
            Err(e) => self.fail("set_commands", e),
        }
    }

    async fn interaction_create(&self, ctx: Context, i: Interaction) {
        let r = match &i {
            Interaction::Command(c) => self.command(&ctx, c).await,
            Interaction::Component(b) => self.component(&ctx, b).await,
            _ => Ok(()),
        };
        if let Err(e) = r {
            self.fail("interaction", e);
        }
    }
}

#[test]
fn serenity_answers_slash_commands_a_deferral_and_a_button() {
    // The demo on: the tour starts once the demo's `/ping` and two
    // commands this bot never registered have been refused (issue 26).
    let node = Node::start(&[]);
    let (app, at) = support::interact::installed(&node, "serenity-bot");
    let log = Arc::new(Mutex::new(Log::default()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let handler = Handler {
        guild: GuildId::new(at.server),
        log: log.clone(),
    };
    let token = app.token.clone();
    let proxy = format!("http://{}", node.gateway);
    let bot = rt.spawn(async move {
        let http = HttpBuilder::new(&token)
            .proxy(proxy)
            .ratelimiter_disabled(true)
            .build();
        let mut client = serenity::all::ClientBuilder::new_with_http(http, GatewayIntents::GUILDS)
            .event_handler(handler)
            .await
            .expect("serenity client");
        client.start().await
    });
    let ready = support::wait_until(Duration::from_secs(30), || log.lock().unwrap().ready);
    let errors = || log.lock().unwrap().errors.join("\n");
    assert!(
        ready.is_some(),
        "serenity never registered its commands: {}",
        errors()
    );
    let mut synced = log.lock().unwrap().synced.clone();
    synced.sort();
    assert_eq!(synced, ["menu", "ping", "slow"]);

    let some = |v: &str| Some(v.to_string());
    support::interact::refused_first(&node, Some(at));
    let t = support::interact::tour(&node, at);
    let mid = t.menu_message.clone();
    assert_eq!(
        t.ping,
        (0, some("answered"), some("pong")),
        "/ping: {}",
        errors()
    );
    assert_eq!(t.slow.0, 0, "/slow: {:?} {}", t.slow, errors());
    assert_eq!(
        t.slow_seen["response_type"], 5,
        "deferred first: {}",
        t.slow_seen
    );
    assert_eq!(t.menu, (0, some("Pick one")), "{}", errors());
    assert_eq!(
        t.button,
        (0, some("answered"), some("clicked"), Some(mid.clone())),
        "the button's update edits the /menu message: {}",
        errors()
    );
    let done = support::wait_until(Duration::from_secs(10), || {
        let log = log.lock().unwrap();
        ["slow-messages", "said"]
            .iter()
            .all(|k| log.handled.iter().any(|(w, _)| w == k))
    });
    assert!(
        done.is_some(),
        "/slow's edit and follow-up, /ping's say and reply: {}",
        errors()
    );

    let log = log.lock().unwrap();
    assert!(
        log.errors.is_empty(),
        "serenity reported: {}",
        log.errors.join("\n")
    );
    let detail = |w: &str| {
        log.handled
            .iter()
            .find(|(k, _)| k == w)
            .map(|(_, d)| d.clone())
            .unwrap_or_default()
    };
    let who = format!(
        "user=alice member=alice guild=Some({}) channel={}",
        at.server, at.channel
    );
    for name in ["ping", "slow", "menu"] {
        assert_eq!(detail(name), who, "what serenity parsed of /{name}");
    }
    assert_eq!(detail("slow-messages"), "done|and more");
    assert_eq!(
        detail("said"),
        format!("said|{}|{}|Some(true)", app.id, app.id),
        "say and reply, authored by the bot (its user id is its application's)"
    );
    assert_eq!(
        detail("click"),
        format!("custom_id=menu:click message={mid}")
    );
    bot.abort();
}
