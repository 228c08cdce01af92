//! The developer portal (issue 16, docs/portal.md): a web page where a
//! bot's author signs in with the bot token and sees, for that one
//! application, what the node sees, and tests the bot. On its own listener
//! (`portal.addr`), never the admin port; plain HTML, CSS and one small
//! script compiled into the binary (`assets/`), no build step.
//!
//! - `http`: one request read under a deadline, one answer with the
//!   security headers every page carries;
//! - `sessions`: the server-side sessions (cookie id, CSRF token, expiry);
//! - `developers`: a person's sign-in (name, password) and the
//!   applications they own;
//! - `limit`: the sign-in flood guard;
//! - `pages`: the HTML (every value escaped); `assets`: its style sheet,
//!   script and icon, at hashed names, cached and gzip-compressed;
//! - `health`: the application's figures as JSON (the page polls it);
//! - `cluster`, `figures`: the same from the cluster's other nodes, asked
//!   on the node-to-node link, and the bytes of one node's figures;
//! - `session_table`: the sessions one by one, paged, and their last
//!   lifecycle events, from every node;
//! - `intents`: privileged intents requested, approved, and the
//!   operator's page that decides;
//! - `tools`: test event, click a command, re-check the endpoint, reset
//!   the token;
//! - `names`: permission bits, intents and close codes in words.
//!
//! Threads: one polls every connection (`net::front`: a request is read
//! whole under `http::DEADLINE`, answers are written without blocking, and
//! idle or trickling clients cost a descriptor, never a handler: 8 idle
//! connections used to delay every page by 6 s and 200 gave everyone 503,
//! issue 41), `HANDLERS` answer whole requests (a bounded queue between;
//! a full one answers 503 at once), one samples the sessions history. Every
//! registry call is under the registry's deadline; every egress call under
//! its own.

mod assets;
mod cluster;
mod cluster_state;
mod ctx;
mod developers;
pub mod figures;
mod health;
mod history;
mod html;
pub mod http;
mod installs;
mod intents;
pub mod limit;
pub mod names;
mod pages;
mod session_table;
pub mod sessions;
mod tools;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use net::front::{Front, FrontStats, Handled, Reply, Request as FrontRequest};
use registry::Registry;
use serde_json::json;

use crate::config::Portal as PortalConfig;
use crate::worker::shared::Shared;
use ctx::{ip_key, lock, now_ms, Ctx};
pub use ctx::{PortalStats, Views};
use http::{Request, Response};
use sessions::{Sessions, COOKIE};

/// Threads answering requests, and connections waiting for one.
const HANDLERS: usize = 4;
const QUEUE: usize = 64;
/// The pre-sign-in cookie (CSRF of the sign-in form).
const PRE_COOKIE: &str = "gw_pre";

pub struct Portal {
    pub addr: SocketAddr,
}

/// What this node answers when another node's portal asks the cluster
/// link for an application's figures (`figures::NodeFigures`).
pub fn figures_provider(
    shared: Arc<Shared>,
    board: Arc<crate::chat::board::Board>,
) -> crate::link::cluster::figures::Provider {
    Arc::new(move |app, out| {
        let now = now_ms();
        let snap = shared.apps.snapshot(app, now).unwrap_or_default();
        let ix = board.app(app).unwrap_or_default();
        let mut f = figures::NodeFigures::of(shared.node(), now, &snap, &ix);
        shared.apps.timeline(app, &mut f.timeline);
        let page = shared.sessions.page(app, None, figures::MAX_ROWS);
        f.sessions = page.rows;
        f.sessions_total = page.total as u32;
        f.encode(out);
    })
}

/// Starts the portal on `cfg.addr` with its own registry connection;
/// `secure`: the cookie is marked Secure (TLS in front).
pub fn start(
    cfg: PortalConfig,
    secure: bool,
    v: Views,
    registry: Box<dyn Registry>,
) -> std::io::Result<Portal> {
    let listener = TcpListener::bind(cfg.addr)?;
    let addr = listener.local_addr()?;
    let front = Front::new(&listener)?;
    let (tx, rx) = crossbeam_channel::bounded::<(FrontRequest, Reply)>(QUEUE);
    let ctx = Arc::new(Ctx {
        registry: Mutex::new(registry),
        sessions: Mutex::new(Sessions::new(
            cfg.max_sessions,
            Duration::from_secs(cfg.session_idle_s),
            Duration::from_secs(cfg.session_max_s),
        )),
        guard: Mutex::new(limit::SigninGuard::new(
            cfg.signin_failures_per_address,
            cfg.signin_failures_global,
        )),
        history: Mutex::new(history::History::default()),
        cluster: cluster_state::State::default(),
        cfg,
        secure,
        v,
    });
    for i in 0..HANDLERS {
        let (rx, ctx) = (rx.clone(), ctx.clone());
        std::thread::Builder::new()
            .name(format!("portal-{i}"))
            .spawn(move || {
                for (req, reply) in rx {
                    reply.send(serve(&ctx, &req).to_bytes());
                }
            })?;
    }
    {
        let ctx = ctx.clone();
        std::thread::Builder::new()
            .name("portal-sample".into())
            .spawn(move || loop {
                health::sample(&ctx);
                std::thread::sleep(health::SAMPLE_EVERY);
            })?;
    }
    let stats = ctx.v.stats.clone();
    std::thread::Builder::new()
        .name("portal".into())
        .spawn(move || {
            let (front_stats, stop) = (FrontStats::default(), AtomicBool::new(false));
            front.run(
                listener,
                http::LIMITS,
                &front_stats,
                &stop,
                |req, reply| match tx.try_send((req, reply)) {
                    Ok(()) => Handled::Later,
                    Err(_) => {
                        stats.busy.fetch_add(1, Relaxed);
                        Handled::Answer(
                            Response::new(503, "text/plain", "busy: try again\n").to_bytes(),
                        )
                    }
                },
            );
        })?;
    Ok(Portal { addr })
}

fn serve(ctx: &Ctx, req: &FrontRequest) -> Response {
    ctx.v.stats.requests.fetch_add(1, Relaxed);
    match http::parse(req) {
        Ok(parsed) => route(ctx, &parsed, req.peer.ip()),
        Err(status) => Response::new(status, "text/plain", "bad request\n"),
    }
}

fn route(ctx: &Ctx, req: &Request, ip: IpAddr) -> Response {
    let (m, p) = (req.method.as_str(), req.path.as_str());
    match (m, p) {
        ("GET", p) if p.starts_with("/static/") || p == "/favicon.ico" => {
            assets::serve(p, req.accepts_gzip)
                .unwrap_or_else(|| Response::new(404, "text/plain", "not found\n"))
        }
        ("GET", "/healthz") => Response::new(200, "text/plain", "ok\n"),
        ("POST", "/signin") => signin(ctx, req, ip),
        _ if p == "/"
            || p == "/signin"
            || p == "/signout"
            || p == "/switch"
            || p == "/operator/intents"
            || p.starts_with("/api/") =>
        {
            signed_in(ctx, req)
        }
        _ => Response::new(404, "text/plain", "not found\n"),
    }
}

/// A request that needs a session (the sign-in page otherwise).
fn signed_in(ctx: &Ctx, req: &Request) -> Response {
    let id = req.cookie(COOKIE).map(str::to_string);
    let session = id
        .as_deref()
        .and_then(|id| lock(&ctx.sessions).get(id, Instant::now()).cloned());
    let Some((id, mut session)) = id.zip(session) else {
        // A session a token reset ended says so (a forged or expired one
        // gets the plain answer).
        let reset = req
            .cookie(COOKIE)
            .is_some_and(|c| lock(&ctx.sessions).ended_by_reset(c, Instant::now()));
        if req.cookie(COOKIE).is_some() {
            ctx.v.stats.bad_sessions.fetch_add(1, Relaxed);
        }
        return if req.path.starts_with("/api/") {
            let why = if reset {
                sessions::TOKEN_RESET
            } else {
                "not signed in (or the session expired)"
            };
            Response::json(401, &json!({"error": why}))
        } else {
            let mut page = signin_page(ctx, reset.then_some(sessions::TOKEN_RESET), 200);
            if reset {
                // Said once: a reload is a plain sign-in page.
                page.cookies.push(clear_cookie(ctx, COOKIE));
            }
            page
        };
    };
    if req.method == "POST" {
        let given = req.csrf_header.clone().or_else(|| req.field("csrf"));
        let origin_ok = req.origin.as_deref().is_none_or(|o| same_origin(o, req));
        if !origin_ok || !given.is_some_and(|g| sessions::same(&g, &session.csrf)) {
            ctx.v.stats.csrf_refused.fetch_add(1, Relaxed);
            return Response::json(403, &json!({"error": "CSRF check failed: reload the page"}));
        }
    }
    if let Err(refused) = developers::check(ctx, &id, &mut session) {
        return refused;
    }
    if session.app == 0 && req.path.starts_with("/api/") {
        return Response::json(
            409,
            &json!({"error": "no application chosen: open one of yours first"}),
        );
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") if session.operator => Response::html(200, pages::operator(ctx, &session)),
        ("GET", "/") => Response::html(200, pages::dashboard(ctx, &session)),
        ("POST", "/operator/intents") => intents::decide(ctx, &session, req),
        ("POST", "/switch") => developers::switch(ctx, &id, &session, req),
        ("POST", "/api/request-intents") => intents::request(ctx, &session, req),
        ("POST", "/signout") => {
            lock(&ctx.sessions).remove(&id);
            let mut r = Response::see_other("/");
            r.cookies.push(clear_cookie(ctx, COOKIE));
            r
        }
        ("GET", "/api/health") => Response::json(200, &health::json(ctx, session.app)),
        ("GET", "/api/sessions") => session_table::json(ctx, session.app, req),
        ("GET", p) if p.starts_with("/api/interactions/") => {
            tools::interaction(ctx, &session, &p["/api/interactions/".len()..])
        }
        ("POST", "/api/test-message") => tools::test_message(ctx, &session, req),
        ("POST", "/api/click") => tools::click(ctx, &id, &session, req),
        ("POST", "/api/verify-endpoint") => tools::verify_endpoint(ctx, &session, req),
        ("POST", "/api/endpoint") => tools::save_endpoint(ctx, &session, req),
        ("POST", "/api/reset-token") => tools::reset_token(ctx, &id, &session),
        ("GET", p) if p.starts_with("/api/") => Response::json(
            404,
            &json!({"error": format!("no such API route: GET {p}")}),
        ),
        ("GET", _) => Response::see_other("/"),
        _ => Response::json(405, &json!({"error": "method not allowed"})),
    }
}

fn same_origin(origin: &str, req: &Request) -> bool {
    let host = req.host.as_deref().unwrap_or("");
    origin
        .split_once("://")
        .is_some_and(|(_, rest)| !host.is_empty() && rest == host)
}

fn cookie(ctx: &Ctx, name: &str, value: &str, max_age_s: u64) -> String {
    let secure = if ctx.secure { "; Secure" } else { "" };
    format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age_s}{secure}")
}

fn clear_cookie(ctx: &Ctx, name: &str) -> String {
    cookie(ctx, name, "", 0)
}

fn signin_page(ctx: &Ctx, error: Option<&str>, status: u16) -> Response {
    let Some(pre) = sessions::random_hex() else {
        return Response::new(503, "text/plain", "no randomness available\n");
    };
    let mut r = Response::html(status, pages::signin(&pre, error));
    r.cookies.push(cookie(ctx, PRE_COOKIE, &pre, 3600));
    r
}

fn signin(ctx: &Ctx, req: &Request, ip: IpAddr) -> Response {
    let stats = &ctx.v.stats;
    let now = now_ms();
    let pre_ok = match (req.cookie(PRE_COOKIE), req.field("csrf")) {
        (Some(c), Some(f)) => sessions::same(c, &f),
        _ => false,
    };
    let origin_ok = req.origin.as_deref().is_none_or(|o| same_origin(o, req));
    if !pre_ok || !origin_ok {
        stats.csrf_refused.fetch_add(1, Relaxed);
        return signin_page(ctx, Some("The form expired: try again."), 403);
    }
    let key = ip_key(ip);
    let restricted = ctx.v.shared.rest_addrs.restricted_until(key, now).is_some();
    if restricted || !lock(&ctx.guard).allowed(ip, now) {
        stats.signins_refused.fetch_add(1, Relaxed);
        return signin_page(ctx, Some("Too many failed sign-ins: wait a minute."), 429);
    }
    if let Some(given) = req.field("admin_token") {
        return operator_signin(ctx, &given, ip, now);
    }
    // (application shown, its name, the developer) of a good sign-in.
    type SignedIn = (u64, String, Option<(u64, String)>);
    let developer_form = developers::credentials(req);
    let as_developer = developer_form.is_some();
    let who: registry::Result<Option<SignedIn>> = match developer_form {
        Some((name, password)) if developers::plausible(&name, &password) => {
            let dev = ctx.registry().developer_sign_in(&name, &password);
            dev.and_then(|d| {
                let Some(d) = d else { return Ok(None) };
                // The first application they own is shown (none: the list).
                let apps = ctx.registry().applications_of_developer(d.id)?;
                let (app, app_name) = apps
                    .first()
                    .map_or((0, String::new()), |a| (a.id, a.name.clone()));
                Ok(Some((app, app_name, Some((d.id, d.name)))))
            })
        }
        Some(_) => Ok(None),
        None => {
            let token = req.field("token").unwrap_or_default();
            let token = token.trim().trim_start_matches("Bot ").trim();
            if token.is_empty() || token.len() > 200 {
                Ok(None)
            } else {
                let app = ctx.registry().authenticate(token);
                app.map(|a| a.map(|a| (a.id, a.name, None)))
            }
        }
    };
    match who {
        Ok(Some((app, app_name, developer))) => {
            let made = lock(&ctx.sessions).create_as(app, &app_name, developer, Instant::now());
            session_made(ctx, made)
        }
        Ok(None) => {
            let why = if as_developer {
                "That name and password do not match."
            } else {
                "That token is not valid."
            };
            signin_failed(ctx, ip, now, why)
        }
        Err(e) => {
            tracing::warn!(error = %e, "portal sign-in: registry unavailable");
            signin_page(
                ctx,
                Some("The registry is unavailable: try again soon."),
                503,
            )
        }
    }
}

/// A sign-in with the node's admin token: the operator's page.
fn operator_signin(ctx: &Ctx, given: &str, ip: IpAddr, now: u64) -> Response {
    if !intents::operator_token(ctx, given) {
        let why = if ctx.v.shared.cfg.admin_token.is_empty() {
            "Operator sign-in is off: this node has no admin_token."
        } else {
            "That admin token is not valid."
        };
        return signin_failed(ctx, ip, now, why);
    }
    let made = lock(&ctx.sessions).create_operator(Instant::now());
    session_made(ctx, made)
}

/// A good sign-in of any kind: counted, its cookie set, to the page.
fn session_made(ctx: &Ctx, made: Option<(String, String)>) -> Response {
    let Some((id, _csrf)) = made else {
        return Response::new(503, "text/plain", "no randomness available\n");
    };
    let stats = &ctx.v.stats;
    stats.signins.fetch_add(1, Relaxed);
    stats
        .sessions
        .store(lock(&ctx.sessions).len() as u64, Relaxed);
    let mut r = Response::see_other("/");
    r.cookies
        .push(cookie(ctx, COOKIE, &id, ctx.cfg.session_max_s));
    r.cookies.push(clear_cookie(ctx, PRE_COOKIE));
    r
}

/// A failed sign-in of any kind: counted, and against the flood guard and
/// the REST edge's per-address limit on invalid requests.
fn signin_failed(ctx: &Ctx, ip: IpAddr, now: u64, why: &str) -> Response {
    ctx.v.stats.signins_failed.fetch_add(1, Relaxed);
    lock(&ctx.guard).failed(ip, now);
    ctx.v.shared.rest_addrs.invalid(ip_key(ip), now);
    signin_page(ctx, Some(why), 401)
}
