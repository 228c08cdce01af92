//! A REST request on a worker: the order of the steps in `crate::api`
//! (route, token, limit, permit, body) and the hand-off to the registry
//! sidecar (connect-time routes, server reads) or the chat service
//! (actions), whose answer comes back as `ToWorker::RestReply`.
//!
//! A token's requests are served by the worker `api::owner_of` names (the
//! one owning its application): the connection is handed over there before
//! the request is looked at, so that application's limiter windows and view
//! live on one worker (shared nothing). If the handover is refused, this
//! worker serves it anyway (its own windows: at worst a second allowance).

use super::*;
use crate::api::body::{self, codes, ApiError};
use crate::api::limit::{self, Decision, Limiter};
use crate::api::permit;
use crate::api::query::{query_flag, query_id, query_limit};
use crate::api::route::{self as api_route, ApiRoute, RouteError};
use crate::api::view::{Lookup, Views};
use crate::api::Pending as Parked;
use crate::protocol::rest::{GuildsPage, MAX_GUILDS_PAGE};

/// A keep-alive REST connection may sit idle this long between requests.
pub(super) const REST_IDLE_MS: u64 = 60_000;

/// The REST edge's state on one worker.
pub(super) struct ApiState {
    pub(super) views: Views,
    pub(super) limiter: Limiter,
}

impl ApiState {
    /// With `shared.counters` (Redis configured), the limiter's windows are
    /// shared with the other nodes (`api::shared`).
    pub(super) fn new(shared: &Shared, worker: usize) -> ApiState {
        let rest = &shared.cfg.rest;
        let link = shared
            .counters
            .clone()
            .map(|outbox| crate::api::shared::Link {
                outbox,
                worker: worker as u16,
                sharing: Default::default(),
            });
        ApiState {
            views: Views::with_refresh(rest.view_refresh_ms),
            limiter: Limiter::new(rest.into()).with_link(link),
        }
    }
}

pub(super) use super::conn::ApiRequest;

impl Worker {
    /// The worker a request's token belongs on, if it is not this one.
    pub(super) fn rest_owner_elsewhere(&self, head: &RequestHead) -> Option<usize> {
        let n = self.shared.workers.len();
        if n <= 1 {
            return None;
        }
        let token = rest::bearer(head.authorization.as_deref())?;
        let owner = crate::api::owner_of(&token, n)?;
        (owner != self.id).then_some(owner)
    }

    /// Answer a REST request now (status, JSON body, headers).
    fn rest_answer(
        &mut self,
        key: ConnKey,
        status: u16,
        body: &[u8],
        headers: &[(&'static str, String)],
    ) {
        let idle_until = self.now_ms() + REST_IDLE_MS;
        let invalid = matches!(status, 401 | 403)
            || (status == 429
                && !headers
                    .iter()
                    .any(|(k, v)| *k == "X-RateLimit-Scope" && v == "shared"));
        if invalid {
            self.count_invalid(key);
        }
        let Some(conn) = self.conn(key) else { return };
        let keep = conn.keep_alive;
        let hv: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let ct = if body.is_empty() { "" } else { rest::JSON };
        http::write_response(status, ct, body, keep, &hv, &mut conn.out);
        let route = std::mem::take(&mut conn.rest_route);
        let app = std::mem::take(&mut conn.rest_app);
        let (class, started) = (conn.rest_class, std::mem::take(&mut conn.rest_started_us));
        conn.deadline_ms = idle_until;
        self.metrics().rest_response(route as usize, status);
        self.shared
            .apps
            .answered(app, route as usize, status, headers);
        if started > 0 {
            let us = (self.started.elapsed().as_micros() as u64).saturating_sub(started);
            self.metrics().rest_latency[class as usize].record_us(us);
        }
        self.queue_flush(key);
        if !keep {
            self.close_after_flush(key);
        }
    }

    /// An invalid request (401, 403, 429 not `shared`) from the
    /// connection's address: counted once the address is known.
    fn count_invalid(&mut self, key: ConnKey) {
        let now = self.unix_ms;
        let Some(conn) = self.conn(key) else { return };
        match conn.peer {
            Peer::Known(ip) => {
                if self.shared.rest_addrs.invalid(ip, now) {
                    WorkerMetrics::inc(&self.metrics().rest_address_restrictions);
                }
            }
            Peer::Pending(n) => conn.peer = Peer::Pending(n.saturating_add(1)),
            Peer::Unknown | Peer::Failed => {}
        }
    }

    /// Ask the kernel for a REST connection's source address (a direct
    /// descriptor has none of its own): `getsockopt(SO_PEERNAME)` into the
    /// slot's buffer, once per connection.
    fn lookup_peer(&mut self, key: ConnKey) {
        let r = key.ring as usize;
        let v4 = self.rings[r]
            .listener
            .local_addr()
            .map_or(true, |a| a.is_ipv4());
        let Some(conn) = self.conn(key) else { return };
        conn.peer = Peer::Pending(0);
        let rs = &mut self.rings[r];
        let buf = rs.peer_bufs[key.slot as usize].as_mut_ptr();
        // The kernel refuses a length above the address's (SO_PEERNAME).
        let len = if v4 { 16 } else { 28 };
        // SAFETY: `peer_bufs` is allocated with the ring's table and never
        // resized or freed while the ring runs, so the 28-byte buffer of
        // this slot outlives the operation; a late completion for a closed
        // connection only rewrites that slot's buffer (read only on a
        // completion whose generation matches).
        unsafe {
            rs.ring.getsockopt(
                key.slot,
                libc::SOL_SOCKET,
                libc::SO_PEERNAME,
                buf,
                len,
                ud(Op::PeerName, key.ring, key.gen, key.slot),
            )
        };
    }

    /// The kernel answered `lookup_peer`.
    pub(super) fn on_peer_name(&mut self, r: usize, key: ConnKey, c: Completion) {
        let now = self.unix_ms;
        let ip = (c.result > 0)
            .then(|| {
                crate::api::addr::from_sockaddr(
                    &self.rings[r].peer_bufs[key.slot as usize],
                    c.result as usize,
                )
            })
            .flatten();
        let Some(conn) = self.conn(key) else { return };
        let Peer::Pending(n) = conn.peer else { return };
        conn.peer = ip.map_or(Peer::Failed, Peer::Known);
        let waiting = conn.peer_wait.take();
        if let Some(ip) = ip {
            for _ in 0..n {
                if self.shared.rest_addrs.invalid(ip, now) {
                    WorkerMetrics::inc(&self.metrics().rest_address_restrictions);
                }
            }
        }
        if let Some(req) = waiting {
            if let Some(conn) = self.conn(key) {
                conn.rest_pending = false;
            }
            self.on_api_request(key, *req);
            self.process_input(key);
        }
    }

    pub(super) fn on_api_request(&mut self, key: ConnKey, req: ApiRequest) {
        // A connection's first request waits for its address (one ring
        // round trip), so a restricted address is refused from its first
        // request on.
        if let Some(conn) = self.conn(key) {
            if conn.peer == Peer::Unknown {
                conn.peer_wait = Some(Box::new(req));
                conn.rest_pending = true;
                return self.lookup_peer(key);
            }
        }
        WorkerMetrics::inc(&self.metrics().rest_requests);
        let now = self.unix_ms;
        let peer = self.conn(key).map(|c| c.peer);
        if let Some(Peer::Known(ip)) = peer {
            if let Some(until) = self.shared.rest_addrs.restricted_until(ip, now) {
                WorkerMetrics::inc(&self.metrics().rest_address_refused);
                let retry_ms = until.saturating_sub(now).max(1);
                let body = limit::body_429(retry_ms, false);
                let headers = [
                    ("Retry-After", retry_ms.div_ceil(1000).to_string()),
                    ("X-RateLimit-Scope", "user".to_string()),
                    ("Via", "1.1 gatewayd".to_string()),
                ];
                return self.rest_answer(key, 429, &body, &headers);
            }
        }
        let head = req.head;
        let route = match api_route::route(&head.method, &head.path) {
            Ok(r) => r,
            Err(RouteError::NotFound) => return self.rest_answer(key, 404, rest::NOT_FOUND, &[]),
            Err(RouteError::MethodNotAllowed) => {
                return self.rest_answer(key, 405, rest::METHOD_NOT_ALLOWED, &[])
            }
        };
        let started_us = (self.started.elapsed().as_micros() as u64).max(1);
        if let Some(conn) = self.conn(key) {
            conn.rest_route = route.index() as u8;
            conn.rest_class = route.class() as u8;
            conn.rest_started_us = started_us;
        }
        if route == ApiRoute::Gateway {
            let body = rest::gateway_body(&self.shared.gateway_url);
            return self.rest_answer(key, 200, &body, &[]);
        }
        let token = rest::bearer(head.authorization.as_deref());
        if let Some(action) =
            interaction_action(&route, &head.query, head.content_type.as_deref(), &req.body)
        {
            // The interaction's token is the credential: straight to the chat
            // service, which holds the interaction.
            let req = ChatRequest {
                worker: self.id,
                conn: key,
                app: AppId(0),
                bot: None,
                target: permit::Target::NONE,
                action,
            };
            if req_too_large(&req) {
                let e = ApiError::new(413, codes::REQUEST_TOO_LARGE, "Request entity too large");
                return self.rest_answer(key, 413, &e.to_bytes(), &[]);
            }
            return self.hand_to_chat(key, req, Vec::new());
        }
        let Some(token) = token else {
            return self.rest_answer(
                key,
                401,
                br#"{"message": "401: Unauthorized", "code": 0}"#,
                &[],
            );
        };
        if req.body.len() > body::MAX_BODY {
            let e = ApiError::new(413, codes::REQUEST_TOO_LARGE, "Request entity too large");
            return self.rest_answer(key, 413, &e.to_bytes(), &[]);
        }
        let parked = Box::new(Parked {
            route,
            query: head.query,
            content_type: head.content_type,
            body: req.body,
            digest: identify::token_digest(&token),
        });
        let now = self.unix_ms;
        match self.api.views.lookup(&parked.digest, key, now) {
            Lookup::Known(app) => self.api_continue(key, app, *parked),
            Lookup::Bad => self.rest_answer(
                key,
                401,
                br#"{"message": "401: Unauthorized", "code": 0}"#,
                &[],
            ),
            Lookup::Busy => self.rest_answer(
                key,
                503,
                br#"{"message": "busy: try again", "code": 0}"#,
                &[],
            ),
            Lookup::Wait => self.park(key, parked),
            Lookup::Ask => {
                let digest = parked.digest;
                self.park(key, parked);
                let ask = SidecarRequest::ApiAuth {
                    worker: self.id,
                    digest,
                    token,
                };
                if self.shared.sidecar.try_send(ask).is_err() {
                    for k in self.api.views.failed(&digest) {
                        self.unpark_unavailable(k);
                    }
                }
            }
        }
    }

    fn park(&mut self, key: ConnKey, p: Box<Parked>) {
        if let Some(conn) = self.conn(key) {
            conn.rest_pending = true;
            conn.api_wait = Some(p);
        }
    }

    fn unpark_unavailable(&mut self, key: ConnKey) {
        let Some(conn) = self.conn(key) else { return };
        conn.rest_pending = false;
        conn.api_wait = None;
        self.rest_answer(
            key,
            503,
            br#"{"message": "registry unavailable", "code": 0}"#,
            &[],
        );
        self.process_input(key);
    }

    /// The registry answered a token lookup: continue every waiting request.
    pub(super) fn on_api_authed(
        &mut self,
        digest: [u8; 32],
        view: Result<Option<Box<crate::api::view::AppView>>, ()>,
    ) {
        let now = self.unix_ms;
        let waiters = match view {
            Err(()) => {
                for k in self.api.views.failed(&digest) {
                    self.unpark_unavailable(k);
                }
                return;
            }
            Ok(v) => self.api.views.resolved(&digest, v.map(|b| *b), now),
        };
        for k in waiters {
            let Some(conn) = self.conn(k) else { continue };
            let Some(p) = conn.api_wait.take() else {
                continue;
            };
            conn.rest_pending = false;
            match self.api.views.lookup(&digest, k, now) {
                Lookup::Known(app) => self.api_continue(k, app, *p),
                _ => self.rest_answer(
                    k,
                    401,
                    br#"{"message": "401: Unauthorized", "code": 0}"#,
                    &[],
                ),
            }
            self.process_input(k);
        }
    }

    /// Limit, permit, validate, hand off: the request's token is `app`.
    fn api_continue(&mut self, key: ConnKey, app: AppId, p: Parked) {
        let now = self.unix_ms;
        let _ = self.conn(key).map(|c| c.rest_app = app.0);
        let (bucket, major) = p.route.bucket().expect("action routes have a bucket");
        let headers = match self.api.limiter.check(app.0, bucket, major, now) {
            Decision::Allow(h) => h,
            Decision::Limited {
                headers,
                retry_after_ms,
            } => {
                if headers.scope != limit::Scope::Shared {
                    self.api.limiter.invalid(app.0, now);
                }
                self.metrics().rest_limited(headers.scope);
                self.publish_limiter_counts();
                let body = limit::body_429(retry_after_ms, headers.scope == limit::Scope::Global);
                let hv = limit::render(&headers, Some(retry_after_ms));
                return self.rest_answer(key, 429, &body, &hv);
            }
        };
        let hv = limit::render(&headers, None);
        self.publish_limiter_counts();
        let next = match chat_action(&p) {
            Ok(n) => n,
            Err(e) => return self.rest_answer(key, e.status, &e.to_bytes(), &hv),
        };
        let view = self
            .api
            .views
            .apps
            .get(&app)
            .expect("a known token has a view");
        let target = match permit::permit(view, &p.route, now) {
            Ok(t) => t,
            Err(e) => {
                if e.status == 403 {
                    self.api.limiter.invalid(app.0, now);
                }
                return self.rest_answer(key, e.status, &e.to_bytes(), &hv);
            }
        };
        let bot = view.bot.clone();
        let action = match next {
            Next::Chat(a) => a,
            // The bot's own user object: the view holds it (`BotUser`).
            Next::Me => return self.rest_answer(key, 200, bot.json().as_bytes(), &hv),
            Next::Connect(route) => {
                let req = SidecarRequest::Rest {
                    worker: self.id,
                    conn: key,
                    app,
                    route,
                };
                return self.hand_to_sidecar(key, req, hv);
            }
            Next::Members(page) => {
                let req = SidecarRequest::ApiMember(Box::new(MemberRequest {
                    worker: self.id,
                    conn: key,
                    app,
                    bot,
                    route: p.route,
                    target,
                    page,
                }));
                return self.hand_to_sidecar(key, req, hv);
            }
            Next::Dm(recipient) => {
                let req = SidecarRequest::ApiDm {
                    worker: self.id,
                    conn: key,
                    app,
                    bot_user_id: bot.id(),
                    recipient,
                };
                return self.hand_to_sidecar(key, req, hv);
            }
            Next::Commands(call) => {
                let call = Box::new(CommandsRequest {
                    worker: self.id,
                    conn: key,
                    call,
                });
                return self.hand_to_sidecar(key, SidecarRequest::ApiCommands(call), hv);
            }
            Next::Read => {
                let req = SidecarRequest::ApiRead {
                    worker: self.id,
                    conn: key,
                    app,
                    route: p.route,
                    target,
                };
                return self.hand_to_sidecar(key, req, hv);
            }
        };
        let req = ChatRequest {
            worker: self.id,
            conn: key,
            app,
            bot: Some(bot),
            target,
            action,
        };
        self.hand_to_chat(key, req, hv);
    }

    fn hand_to_chat(&mut self, key: ConnKey, req: ChatRequest, hv: Vec<(&'static str, String)>) {
        if self.shared.chat.try_send(req).is_err() {
            return self.rest_answer(
                key,
                503,
                br#"{"message": "the chat service is busy: try again", "code": 0}"#,
                &hv,
            );
        }
        if let Some(conn) = self.conn(key) {
            conn.rest_pending = true;
            conn.rest_headers = hv;
        }
    }

    fn publish_limiter_counts(&self) {
        let c = self.api.limiter.counts;
        self.metrics().rest_bans.store(c.bans, Ordering::Relaxed);
        self.metrics()
            .rest_restrictions
            .store(c.restrictions, Ordering::Relaxed);
    }

    fn hand_to_sidecar(
        &mut self,
        key: ConnKey,
        req: SidecarRequest,
        headers: Vec<(&'static str, String)>,
    ) {
        if self.shared.sidecar.try_send(req).is_err() {
            return self.rest_answer(key, 503, br#"{"message": "busy", "code": 0}"#, &headers);
        }
        if let Some(conn) = self.conn(key) {
            conn.rest_pending = true;
            conn.rest_headers = headers;
        }
    }

    /// A DM channel was opened: the view learns it before the bot, so the
    /// bot's next request can send there.
    pub(super) fn on_dm_opened(&mut self, key: ConnKey, app: AppId, opened: DmOpened) {
        if let (Some((channel, peer)), Some(view)) =
            (opened.channel, self.api.views.apps.get_mut(&app))
        {
            view.add_dm(channel, peer);
        }
        self.on_rest_reply(key, opened.status, opened.body);
    }

    /// The answer to a request handed off (sidecar or chat service).
    pub(super) fn on_rest_reply(&mut self, key: ConnKey, status: u16, body: Vec<u8>) {
        let Some(conn) = self.conn(key) else { return };
        conn.rest_pending = false;
        let mut headers = std::mem::take(&mut conn.rest_headers);
        crate::api::headers::handoff_429(status, &body, &mut headers);
        self.rest_answer(key, status, &body, &headers);
        self.process_input(key);
    }
}

// Transient (one per request, on the stack): boxing `Chat` would cost an
// allocation per request for no saving.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// `GET /users/@me`, answered from the view.
    Me,
    /// `GET /gateway/bot`, `/users/@me/guilds`, `/oauth2/applications/@me`:
    /// answered by the registry sidecar.
    Connect(RestRoute),
    /// A member route, with `GET .../members`'s (limit, after).
    Members((u32, u64)),
    /// `POST /users/@me/channels` to this person.
    Dm(u64),
    Chat(ChatAction),
    /// A read of server data, answered by the registry sidecar.
    Read,
    /// An application command route, answered by the registry sidecar.
    Commands(crate::api::commands::CommandCall),
}

/// What the route asks of the chat service, its body and query validated.
fn chat_action(p: &Parked) -> Result<Next, ApiError> {
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

/// The chat service's action for an interaction route (None: not one).
fn interaction_action(
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
        ApiRoute::InteractionCallback { id, token } => ChatAction::Callback {
            id: *id,
            token: token.clone(),
            // discord.py sends `with_response=1`, others `true`.
            with_response: query_flag(query, "with_response"),
            body,
            content_type,
        },
        ApiRoute::WebhookExecute { app, token } => ChatAction::Webhook {
            app: *app,
            token: token.clone(),
            method: crate::api::route::WebhookMethod::Post,
            message: None,
            body,
            content_type,
        },
        ApiRoute::WebhookMessage {
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

/// An interaction route's body over the limit (`body::MAX_BODY`).
fn req_too_large(req: &ChatRequest) -> bool {
    match &req.action {
        ChatAction::Callback { body, .. } | ChatAction::Webhook { body, .. } => {
            body.len() > body::MAX_BODY
        }
        _ => false,
    }
}
