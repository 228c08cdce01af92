//! A REST request on a worker: the order of the steps in `crate::api`
//! (route, token, limit, permit, decode: `api::action`) and the hand-off to the registry
//! sidecar (connect-time routes, server reads) or the chat service
//! (actions), whose answer comes back as `ToWorker::RestReply`.
//!
//! A token's requests are served by the worker `api::owner_of` names (the
//! one owning its application): the connection is handed over there before
//! the request is looked at, so that application's limiter windows and view
//! live on one worker (shared nothing). If the handover is refused, this
//! worker serves it anyway (its own windows: at worst a second allowance).

use super::local_chat::Takes;
use super::*;
use crate::api::action::{self, Next};
use crate::api::body::{self, codes, ApiError};
use crate::api::headers::HeaderList;
use crate::api::limit::{self, Decision};
use crate::api::permit;
use crate::api::route::{self as api_route, ApiRoute, RouteError};
use crate::api::view::Lookup;
use crate::api::Pending as Parked;

/// An answer without rate-limit headers.
const NO_HEADERS: HeaderList = HeaderList::new();

/// A keep-alive REST connection may sit idle this long between requests.
pub(super) const REST_IDLE_MS: u64 = 60_000;

pub(super) use super::conn::ApiRequest;

impl Worker {
    /// The worker a request's token belongs on, if it is not this one.
    pub(super) fn rest_owner_elsewhere(&self, head: &RequestHead) -> Option<usize> {
        let n = self.shared.workers.len();
        if n <= 1 {
            return None;
        }
        let token = rest::bearer(head.authorization.as_deref())?;
        let owner = crate::api::owner_of(token, n)?;
        (owner != self.id).then_some(owner)
    }

    /// Answer a REST request now (status, JSON body, headers).
    fn rest_answer(&mut self, key: ConnKey, status: u16, body: &[u8], headers: &HeaderList) {
        let idle_until = self.now_ms() + REST_IDLE_MS;
        let scope = headers.get("X-RateLimit-Scope");
        let invalid = matches!(status, 401 | 403) || (status == 429 && scope != Some("shared"));
        if invalid {
            self.count_invalid(key);
        }
        let Some(conn) = self.conn(key) else { return };
        let keep = conn.keep_alive;
        let mut hv = [("", ""); HeaderList::MAX];
        let mut n = 0;
        for (slot, h) in hv.iter_mut().zip(headers.iter()) {
            *slot = h;
            n += 1;
        }
        let ct = if body.is_empty() { "" } else { rest::JSON };
        http::write_response(status, ct, body, keep, &hv[..n], &mut conn.out);
        let route = std::mem::take(&mut conn.rest().route);
        let app = std::mem::take(&mut conn.rest().app);
        let (class, started) = (
            conn.rest().class,
            std::mem::take(&mut conn.rest().started_us),
        );
        conn.deadline_ms = idle_until;
        self.metrics().rest_response(route as usize, status);
        self.shared
            .apps
            .answered(app, route as usize, status, scope);
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
        match conn.rest().peer {
            Peer::Known(ip) => {
                if self.shared.rest_addrs.invalid(ip, now) {
                    WorkerMetrics::inc(&self.metrics().rest_address_restrictions);
                }
            }
            Peer::Pending(n) => conn.rest().peer = Peer::Pending(n.saturating_add(1)),
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
        conn.rest().peer = Peer::Pending(0);
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
        let Peer::Pending(n) = conn.rest().peer else {
            return;
        };
        conn.rest().peer = ip.map_or(Peer::Failed, Peer::Known);
        let waiting = conn.rest().peer_wait.take();
        if let Some(ip) = ip {
            for _ in 0..n {
                if self.shared.rest_addrs.invalid(ip, now) {
                    WorkerMetrics::inc(&self.metrics().rest_address_restrictions);
                }
            }
        }
        if let Some(req) = waiting {
            if let Some(conn) = self.conn(key) {
                conn.rest().pending = false;
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
            if conn.rest().peer == Peer::Unknown {
                conn.rest().peer_wait = Some(Box::new(req));
                conn.rest().pending = true;
                return self.lookup_peer(key);
            }
        }
        WorkerMetrics::inc(&self.metrics().rest_requests);
        let now = self.unix_ms;
        let peer = self.conn(key).map(|c| c.rest().peer);
        if let Some(Peer::Known(ip)) = peer {
            if let Some(until) = self.shared.rest_addrs.restricted_until(ip, now) {
                WorkerMetrics::inc(&self.metrics().rest_address_refused);
                let retry_ms = until.saturating_sub(now).max(1);
                let body = limit::body_429(retry_ms, false);
                let mut headers = HeaderList::new();
                headers.push("Retry-After", retry_ms.div_ceil(1000));
                headers.push("X-RateLimit-Scope", "user");
                headers.push("Via", "1.1 gatewayd");
                return self.rest_answer(key, 429, &body, &headers);
            }
        }
        let head = req.head;
        let route = match api_route::route(&head.method, &head.path) {
            Ok(r) => r,
            Err(RouteError::NotFound) => {
                return self.rest_answer(key, 404, rest::NOT_FOUND, &NO_HEADERS)
            }
            Err(RouteError::MethodNotAllowed) => {
                return self.rest_answer(key, 405, rest::METHOD_NOT_ALLOWED, &NO_HEADERS)
            }
        };
        let started_us = (self.started.elapsed().as_micros() as u64).max(1);
        if let Some(conn) = self.conn(key) {
            conn.rest().route = route.index() as u8;
            conn.rest().class = route.class() as u8;
            conn.rest().started_us = started_us;
        }
        if route == ApiRoute::Gateway {
            let body = rest::gateway_body(&self.shared.gateway_url);
            return self.rest_answer(key, 200, &body, &NO_HEADERS);
        }
        let token = rest::bearer(head.authorization.as_deref());
        if let Some(action) =
            action::interaction(&route, &head.query, head.content_type.as_deref(), &req.body)
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
            if req.action.too_large() {
                let e = ApiError::new(413, codes::REQUEST_TOO_LARGE, "Request entity too large");
                return self.rest_answer(key, 413, &e.to_bytes(), &NO_HEADERS);
            }
            return self.hand_to_chat(key, req, HeaderList::new());
        }
        let Some(token) = token else {
            return self.rest_answer(
                key,
                401,
                br#"{"message": "401: Unauthorized", "code": 0}"#,
                &NO_HEADERS,
            );
        };
        if req.body.len() > body::MAX_BODY {
            let e = ApiError::new(413, codes::REQUEST_TOO_LARGE, "Request entity too large");
            return self.rest_answer(key, 413, &e.to_bytes(), &NO_HEADERS);
        }
        let parked = Box::new(Parked {
            route,
            query: head.query,
            content_type: head.content_type,
            body: req.body,
            digest: identify::token_digest(token),
        });
        let now = self.unix_ms;
        match self.api.views.lookup(&parked.digest, key, now) {
            Lookup::Known(app) => self.api_continue(key, app, *parked),
            Lookup::Bad => self.rest_answer(
                key,
                401,
                br#"{"message": "401: Unauthorized", "code": 0}"#,
                &NO_HEADERS,
            ),
            Lookup::Busy => self.rest_answer(
                key,
                503,
                br#"{"message": "busy: try again", "code": 0}"#,
                &NO_HEADERS,
            ),
            Lookup::Wait => self.park(key, parked),
            Lookup::Ask => {
                let digest = parked.digest;
                self.park(key, parked);
                let ask = SidecarRequest::ApiAuth {
                    worker: self.id,
                    digest,
                    token: token.to_string(),
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
            conn.rest().pending = true;
            conn.rest().api_wait = Some(p);
        }
    }

    fn unpark_unavailable(&mut self, key: ConnKey) {
        let Some(conn) = self.conn(key) else { return };
        conn.rest().pending = false;
        conn.rest().api_wait = None;
        self.rest_answer(
            key,
            503,
            br#"{"message": "registry unavailable", "code": 0}"#,
            &NO_HEADERS,
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
            let Some(p) = conn.rest().api_wait.take() else {
                continue;
            };
            conn.rest().pending = false;
            match self.api.views.lookup(&digest, k, now) {
                Lookup::Known(app) => self.api_continue(k, app, *p),
                _ => self.rest_answer(
                    k,
                    401,
                    br#"{"message": "401: Unauthorized", "code": 0}"#,
                    &NO_HEADERS,
                ),
            }
            self.process_input(k);
        }
    }

    /// Limit, permit, validate, hand off: the request's token is `app`.
    fn api_continue(&mut self, key: ConnKey, app: AppId, p: Parked) {
        let now = self.unix_ms;
        let _ = self.conn(key).map(|c| c.rest().app = app.0);
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
        let next = match action::decode(&p) {
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
            Next::Me => return self.rest_answer(key, 200, bot.own_json().as_bytes(), &hv),
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

    /// The commit step: on this worker's chat service or the one of the
    /// worker that commits for the target's server (`api::commit_worker`),
    /// or the chat thread's (interactions, Kafka); with an upstream chat
    /// service, every action from this worker's own connections.
    fn hand_to_chat(&mut self, key: ConnKey, req: ChatRequest, hv: HeaderList) {
        let takes = self.chat.as_ref().map(|c| c.takes());
        if takes == Some(Takes::Everything) {
            // The upstream option: forwarded from this worker's own pool.
            if let Some(conn) = self.conn(key) {
                conn.rest().pending = true;
                conn.rest().headers = hv;
            }
            return self.commit_here(req);
        }
        if takes.is_some() && req.action.commits_on_worker() {
            let n = self.shared.workers.len();
            let w = crate::api::commit_worker(req.target.server.0, req.target.channel.0, n);
            if w == self.id {
                if let Some(conn) = self.conn(key) {
                    conn.rest().pending = true;
                    conn.rest().headers = hv;
                }
                return self.commit_here(req);
            }
            // Woken once for all of this pass's requests (`end_chat_turn`).
            let msg = ToWorker::Chat(Box::new(req));
            if self.wakes.push(w, &self.shared.workers, msg).is_err() {
                return self.rest_answer(
                    key,
                    503,
                    br#"{"message": "the chat service is busy: try again", "code": 0}"#,
                    &hv,
                );
            }
            if let Some(conn) = self.conn(key) {
                conn.rest().pending = true;
                conn.rest().headers = hv;
            }
            return;
        }
        if self.shared.chat.try_send(req).is_err() {
            return self.rest_answer(
                key,
                503,
                br#"{"message": "the chat service is busy: try again", "code": 0}"#,
                &hv,
            );
        }
        if let Some(conn) = self.conn(key) {
            conn.rest().pending = true;
            conn.rest().headers = hv;
        }
    }

    /// A message action for a server this worker commits for: handled now,
    /// answered at the end of the turn (`Worker::end_chat_turn`).
    pub(super) fn commit_here(&mut self, req: ChatRequest) {
        match self.chat.as_mut() {
            Some(chat) => chat.take(req),
            // Not configured here (cannot happen: every worker or none).
            None => {
                let _ = self.shared.chat.try_send(req);
            }
        }
    }

    fn publish_limiter_counts(&self) {
        let c = self.api.limiter.counts;
        self.metrics().rest_bans.store(c.bans, Ordering::Relaxed);
        self.metrics()
            .rest_restrictions
            .store(c.restrictions, Ordering::Relaxed);
    }

    fn hand_to_sidecar(&mut self, key: ConnKey, req: SidecarRequest, headers: HeaderList) {
        if self.shared.sidecar.try_send(req).is_err() {
            return self.rest_answer(key, 503, br#"{"message": "busy", "code": 0}"#, &headers);
        }
        if let Some(conn) = self.conn(key) {
            conn.rest().pending = true;
            conn.rest().headers = headers;
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
        conn.rest().pending = false;
        let mut headers = std::mem::take(&mut conn.rest().headers);
        crate::api::headers::handoff_429(status, &body, &mut headers);
        self.rest_answer(key, status, &body, &headers);
        self.process_input(key);
    }
}
