//! What a REST request asks, decoded (sans-IO): route + query + content
//! type + body -> a typed action (`Next`), or the error the bot gets.
//!
//! ```text
//!   interaction route (callback, follow-up)  -> interaction() -> ChatAction (its token is the credential)
//!   any other route, its token known         -> decode()      -> Next::Chat(ChatAction) | Me | Connect
//!                                                                 | Members | Dm | Read | Commands
//! ```
//!
//! Nothing here owns a socket, a thread or a window: the worker's REST edge
//! (`worker::rest_edge`) only sequences route, token, limit, permit, this,
//! and the hand-off; the chat service (`crate::chat`) commits a `ChatAction`.
//! Bounds: a body is at most `body::MAX_BODY` (checked by the edge before
//! decoding); every list a query asks for is capped by `query_limit`.

use proto::AppId;

use crate::api::body::{self, ApiError, MessageDraft};
use crate::api::permit::Target;
use crate::api::query::{query_flag, query_id, query_limit};
use crate::api::route::{ApiRoute, WebhookMethod};
use crate::api::Pending;
use crate::delivery::ConnKey;
use crate::protocol::bot_user::BotUser;
use crate::protocol::rest::{GuildsPage, RestRoute, MAX_GUILDS_PAGE};

/// What a bot asks the chat service to do in `target.channel`.
#[derive(Debug)]
pub enum ChatAction {
    Create(MessageDraft),
    List {
        limit: usize,
        before: Option<u64>,
        after: Option<u64>,
        around: Option<u64>,
    },
    Get(u64),
    Edit(u64, MessageDraft),
    Delete(u64),
    BulkDelete(Vec<u64>),
    React(u64, String),
    Unreact(u64, String),
    Reactions {
        message: u64,
        emoji: String,
        limit: usize,
        after: Option<u64>,
    },
    Typing,
    /// Open a person's interaction (from `link::interactions`): deliver its
    /// INTERACTION_CREATE and start its 3-second timer. No answer.
    Interaction(Box<NewInteraction>),
    /// `POST /interactions/{id}/{token}/callback` (no bot token: the
    /// interaction's token is the credential).
    Callback {
        id: u64,
        token: String,
        with_response: bool,
        body: Vec<u8>,
        content_type: Option<String>,
    },
    /// `/webhooks/{app}/{token}[/messages/{id|@original}]`: follow-ups
    /// with an interaction's token. `message`: None for `POST` (a new
    /// follow-up), `Some(0)` for `@original`.
    Webhook {
        app: u64,
        token: String,
        method: WebhookMethod,
        message: Option<u64>,
        body: Vec<u8>,
        content_type: Option<String>,
    },
    /// Events a change made elsewhere (the registry, by the member route
    /// `route`) results in, as (name, intent, `d`), committed in order;
    /// then 204.
    Commit {
        route: ApiRoute,
        events: Vec<(&'static str, u64, Vec<u8>)>,
    },
}

impl ChatAction {
    /// The message family (sends, edits, deletes, reactions, reads,
    /// typing): committed by the chat service of the server's worker
    /// (`api::commit_worker`). Interactions and member routes' events go to
    /// the chat thread, which holds the open interactions.
    pub fn commits_on_worker(&self) -> bool {
        !matches!(
            self,
            ChatAction::Interaction(_)
                | ChatAction::Callback { .. }
                | ChatAction::Webhook { .. }
                | ChatAction::Commit { .. }
        )
    }

    /// An interaction route's body over the limit (`body::MAX_BODY`).
    pub fn too_large(&self) -> bool {
        match self {
            ChatAction::Callback { body, .. } | ChatAction::Webhook { body, .. } => {
                body.len() > body::MAX_BODY
            }
            _ => false,
        }
    }
}

/// A person's interaction, completed from the registry (`d` is the
/// INTERACTION_CREATE without its token), or refused (the person is shown
/// the failure at once).
#[derive(Debug)]
pub struct NewInteraction {
    pub id: u64,
    pub d: serde_json::Value,
    pub refused: Option<&'static str>,
    /// The application's interactions endpoint and signing seed: delivered
    /// there by HTTP instead of the gateway.
    pub endpoint: Option<(String, [u8; 32])>,
}

/// The commit step of a permitted REST request, for a chat service.
pub struct ChatRequest {
    pub worker: usize,
    pub conn: ConnKey,
    /// The acting bot's application (the upstream chat service is told it).
    pub app: AppId,
    /// The acting bot's user, from the registry (`BotUser::of`); `None`
    /// where the request names no bot of its own (an interaction token's
    /// callback or follow-up: the open interaction knows its bot; a
    /// refused interaction).
    pub bot: Option<BotUser>,
    pub target: Target,
    pub action: ChatAction,
}

impl ChatRequest {
    /// A request the node makes itself (an interaction opened, an
    /// endpoint's inline answer, a response acting as the bot): no worker
    /// waits for its answer.
    pub fn internal(
        app: AppId,
        bot: Option<BotUser>,
        target: Target,
        action: ChatAction,
    ) -> ChatRequest {
        ChatRequest {
            worker: usize::MAX,
            conn: ConnKey::NONE,
            app,
            bot,
            target,
            action,
        }
    }
}

/// Where a bot-token request goes once limited and permitted.
// Transient (one per request, on the stack): boxing `Chat` would cost an
// allocation per request for no saving.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Next {
    /// `GET /users/@me`, answered from the view.
    Me,
    /// `GET /gateway/bot`, `/users/@me/guilds`, `/oauth2/applications/@me`:
    /// answered by the registry sidecar.
    Connect(RestRoute),
    /// A member route, with `GET .../members`'s (limit, after).
    Members((u32, u64)),
    /// `POST /users/@me/channels` to this person.
    Dm(u64),
    /// An action for the chat service.
    Chat(ChatAction),
    /// A read of server data, answered by the registry sidecar.
    Read,
    /// An application command route, answered by the registry sidecar.
    Commands(crate::api::commands::CommandCall),
}

/// What a bot-token route asks, its body and query validated.
pub fn decode(p: &Pending) -> Result<Next, ApiError> {
    use ApiRoute::*;
    let json = || body::parse(p.content_type.as_deref(), &p.body);
    Ok(Next::Chat(match &p.route {
        CreateMessage { .. } => ChatAction::Create(body::message(&json()?, true)?),
        EditMessage { message, .. } => ChatAction::Edit(*message, body::message(&json()?, false)?),
        ListMessages { .. } => ChatAction::List {
            limit: query_limit(&p.query, 50, 100)?,
            before: query_id(&p.query, "before")?,
            after: query_id(&p.query, "after")?,
            around: query_id(&p.query, "around")?,
        },
        GetMessage { message, .. } => ChatAction::Get(*message),
        DeleteMessage { message, .. } => ChatAction::Delete(*message),
        BulkDelete { .. } => ChatAction::BulkDelete(body::bulk_delete(&json()?)?),
        AddReaction { message, emoji, .. } => ChatAction::React(*message, emoji.clone()),
        RemoveOwnReaction { message, emoji, .. } => ChatAction::Unreact(*message, emoji.clone()),
        ListReactions { message, emoji, .. } => ChatAction::Reactions {
            message: *message,
            emoji: emoji.clone(),
            limit: query_limit(&p.query, 25, 100)?,
            after: query_id(&p.query, "after")?,
        },
        Typing { .. } => ChatAction::Typing,
        GetChannel { .. } | GetGuild { .. } | GuildChannels { .. } | GuildRoles { .. } => {
            return Ok(Next::Read)
        }
        ListMembers { .. } => {
            let limit = query_limit(&p.query, 1, registry::MAX_MEMBERS_PAGE as usize)?;
            let after = query_id(&p.query, "after")?.unwrap_or(0);
            return Ok(Next::Members((limit as u32, after)));
        }
        Ban { .. } => {
            if !p.body.is_empty() {
                body::ban(&json()?)?;
            }
            return Ok(Next::Members((0, 0)));
        }
        GetMember { .. }
        | AddMemberRole { .. }
        | RemoveMemberRole { .. }
        | Kick { .. }
        | Unban { .. } => return Ok(Next::Members((0, 0))),
        CreateDm => return Ok(Next::Dm(body::create_dm(&json()?)?)),
        InteractionCallback { .. } | WebhookExecute { .. } | WebhookMessage { .. } => {
            return Err(ApiError::new(
                500,
                0,
                "an interaction route reached the bot-token path",
            ))
        }
        ListCommands { .. }
        | PutCommands { .. }
        | CreateCommand { .. }
        | GetCommand { .. }
        | EditCommand { .. }
        | DeleteCommand { .. } => {
            let call = crate::api::commands::call(&p.route, p.content_type.as_deref(), &p.body)?;
            return Ok(Next::Commands(call));
        }
        UsersMe => return Ok(Next::Me),
        GatewayBot => return Ok(Next::Connect(RestRoute::GatewayBot)),
        ApplicationsMe => return Ok(Next::Connect(RestRoute::ApplicationsMe)),
        MyGuilds => {
            let page = GuildsPage {
                before: query_id(&p.query, "before")?,
                after: query_id(&p.query, "after")?,
                limit: query_limit(&p.query, MAX_GUILDS_PAGE, MAX_GUILDS_PAGE)? as u32,
                with_counts: query_flag(&p.query, "with_counts"),
            };
            return Ok(Next::Connect(RestRoute::MyGuilds(page)));
        }
        Gateway => return Err(ApiError::new(500, 0, "GET /gateway reached the token path")),
    }))
}

/// The chat service's action for an interaction route (None: not one). Its
/// body is taken as it is: the open interaction's callback parses it.
pub fn interaction(
    route: &ApiRoute,
    query: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Option<ChatAction> {
    use ApiRoute::*;
    if !matches!(
        route,
        InteractionCallback { .. } | WebhookExecute { .. } | WebhookMessage { .. }
    ) {
        return None;
    }
    let content_type = content_type.map(str::to_owned);
    let body = body.to_vec();
    Some(match route {
        InteractionCallback { id, token } => ChatAction::Callback {
            id: *id,
            token: token.clone(),
            // discord.py sends `with_response=1`, others `true`.
            with_response: query_flag(query, "with_response"),
            body,
            content_type,
        },
        WebhookExecute { app, token } => ChatAction::Webhook {
            app: *app,
            token: token.clone(),
            method: WebhookMethod::Post,
            message: None,
            body,
            content_type,
        },
        WebhookMessage {
            app,
            token,
            message,
            method,
        } => ChatAction::Webhook {
            app: *app,
            token: token.clone(),
            method: *method,
            message: Some(*message),
            body,
            content_type,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(method: &str, path: &str, query: &str, body: &str) -> Pending {
        Pending {
            route: crate::api::route::route(method, path).expect("a route"),
            query: query.into(),
            content_type: Some("application/json".into()),
            body: body.as_bytes().to_vec(),
            digest: [0; 32],
        }
    }

    #[test]
    fn a_send_decodes_to_a_create_committed_on_a_worker() {
        let p = pending(
            "POST",
            "/api/v10/channels/5/messages",
            "",
            r#"{"content":"hi"}"#,
        );
        let Ok(Next::Chat(a)) = decode(&p) else {
            panic!("a send is a chat action")
        };
        assert!(matches!(&a, ChatAction::Create(d) if d.content.as_deref() == Some("hi")));
        assert!(a.commits_on_worker());
    }

    #[test]
    fn a_bad_query_or_body_is_the_bots_error_not_a_panic() {
        let p = pending("GET", "/api/v10/channels/5/messages", "limit=1000", "");
        assert_eq!(decode(&p).unwrap_err().status, 400);
        let p = pending("POST", "/api/v10/channels/5/messages", "", "{not json");
        assert_eq!(decode(&p).unwrap_err().status, 400);
        let p = pending("POST", "/api/v10/channels/5/messages", "", "{}");
        assert_eq!(decode(&p).unwrap_err().status, 400, "an empty message");
    }

    #[test]
    fn interaction_routes_carry_their_token_and_go_to_the_chat_thread() {
        let r = crate::api::route::route("POST", "/api/v10/interactions/7/tok/callback").unwrap();
        let a = interaction(&r, "with_response=1", None, b"{}").expect("a callback");
        assert!(
            matches!(&a, ChatAction::Callback { id: 7, token, with_response: true, .. } if token == "tok")
        );
        assert!(!a.commits_on_worker());
        let r = crate::api::route::route("POST", "/api/v10/channels/5/messages").unwrap();
        assert!(interaction(&r, "", None, b"{}").is_none());
    }
}
