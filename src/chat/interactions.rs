//! Interactions in the chat service: where a person's slash command,
//! button, autocomplete or modal submit is OPENED (its INTERACTION_CREATE
//! delivered to the one bot it is for), held to the 3-second rule, answered
//! (the callback), and followed up (the interaction's webhook) — REST.md,
//! "Interactions"; docs/interactions.md.
//!
//! ```text
//!  record (FLAG_INTERACTION) ─► link::interactions (checked, completed) ─► open: token, INTERACTION_CREATE (FLAG_ADDRESSED)
//!      Waiting ──callback 4/7/8/9──► Answered           ──3.0 s──► Failed (the person sees the failure; 10062 after)
//!              ──callback 5/6─────► Deferred ─► follow-ups with the token for `token_ttl_ms` (15 min), then 50027
//! ```
//!
//! - One table on the chat thread: at most `MAX_OPEN` interactions held
//!   (from their opening until their token expires); a full table refuses
//!   new ones (the person sees the failure at once, counted). With 15-minute
//!   tokens that is ~290 interactions/s sustained per node; an entry is
//!   ~0.5 KiB, so a full table is ~140 MiB. What the person saw is kept
//!   `SHOWN_MS` (at most `MAX_SHOWN` entries). Deadlines are
//!   FIFO queues (every interaction has the same 3 s and the same token
//!   life), so a timer is a `VecDeque` push and the tick pops the front.
//! - The timer's precision: the chat thread wakes at the earliest deadline
//!   (and at least every 100 ms), so a miss is declared within a few ms of
//!   3.0 s after the interaction was opened; a callback answered before the
//!   tick saw the deadline still counts if it arrived before 3.0 s.
//! - Tokens: 32 random bytes as 64 hex characters (URL-safe), kept only as
//!   their SHA-256; compared by digest lookup.
//! - What the person sees is published to `Board` (read by the admin port,
//!   `GET /admin/interactions/{id}`, which the `gatewayd interact` CLI polls).
//!
//! - The table is a cache: each interaction is also a row in the registry
//!   (`store.rs`), so a callback or a follow-up may reach any node sharing
//!   it, and a restart keeps the token, the state and the 3-second timer.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::*;
use crate::api::body;
use crate::worker::mail::NewInteraction;

/// The first response must come within this of the interaction's opening.
pub const RESPONSE_MS: u64 = 3_000;
/// What an HTTP endpoint's calls leave of the window, for the answer to
/// reach the chat thread and the failure to be recorded before 3.0 s.
pub const ENDPOINT_MARGIN_MS: u64 = 300;
/// Interactions held at once (open, or answered within their token's life).
pub const MAX_OPEN: usize = 262_144;
/// What a person saw of an interaction is kept this long (for the CLI and
/// the admin port), for at most `MAX_SHOWN` interactions (the oldest go
/// first).
pub const SHOWN_MS: u64 = 120_000;
pub const MAX_SHOWN: usize = 65_536;
/// Follow-ups per interaction remembered for `/messages/{id}`.
pub(super) const MAX_FOLLOWUPS: usize = 32;
pub(super) const EPHEMERAL: u64 = 1 << 6;
pub(super) const LOADING: u64 = 1 << 7;

pub(super) use super::board::Count;
pub use super::board::{AppStats, Board};
pub(super) use super::open::{Open, State};
pub use super::table::{InteractionStats, Interactions};

impl Interactions {
    pub fn new(token_ttl_ms: u64, board: Arc<Board>, stats: Arc<InteractionStats>) -> Interactions {
        Interactions {
            open: HashMap::new(),
            by_digest: HashMap::new(),
            deadlines: VecDeque::new(),
            expiries: VecDeque::new(),
            shown: VecDeque::new(),
            token_ttl_ms,
            board,
            stats,
            deliver: None,
            store: super::store::Store::none(),
        }
    }

    pub(super) fn token_ttl_ms(&self) -> u64 {
        self.token_ttl_ms.max(RESPONSE_MS)
    }

    /// Takes an interaction from its row into the table (opened elsewhere,
    /// or before a restart): its id, or None if the table is full or the
    /// row unreadable.
    pub(super) fn adopt(&mut self, p: &registry::PendingInteraction, now: u64) -> Option<u64> {
        if let Some(o) = self.open.get_mut(&p.id) {
            // Another node may have answered it or added follow-ups.
            if o.state == State::Waiting {
                o.state = super::store::state(p.state);
            }
            o.original = p.original_id.or(o.original);
            if p.followups.len() >= o.followups.len() {
                o.followups.clone_from(&p.followups);
            }
            return Some(p.id);
        }
        if self.open.len() >= MAX_OPEN {
            return None;
        }
        let o = super::store::open_of(p)?;
        self.by_digest.insert(o.digest, p.id);
        self.open.insert(p.id, o);
        self.expiries.push_back((p.expires_at_ms.max(now), p.id));
        Some(p.id)
    }

    /// At start: the interactions this node opened that are still waiting
    /// get their timers back (those already past 3 s fail at the next tick).
    pub fn restore(&mut self, now: u64) {
        let rows = self.store.waiting();
        for p in &rows {
            if let Some(id) = self.adopt(p, now) {
                let o = self.open.get_mut(&id).expect("adopted");
                o.here = true;
                self.deadlines.push_back((p.opened_at_ms + RESPONSE_MS, id));
                self.shown.push_back((now + SHOWN_MS, id));
                self.board
                    .set(id, json!({"state": "waiting", "opened_ms": p.opened_at_ms}));
            }
        }
        if !rows.is_empty() {
            tracing::info!(
                waiting = rows.len(),
                "interactions restored from the shared state"
            );
        }
    }

    /// When the chat thread must next wake for a deadline (Unix ms).
    pub fn next_deadline(&self) -> Option<u64> {
        let a = self.deadlines.front().map(|d| d.0);
        let b = self.expiries.front().map(|d| d.0);
        let c = self.shown.front().map(|d| d.0);
        a.into_iter().chain(b).chain(c).min()
    }

    /// Declare the misses (3 s passed without a response) and forget the
    /// interactions whose token expired.
    pub fn tick(&mut self, now: u64) {
        while let Some(&(at, id)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            if let Some(o) = self.open.get_mut(&id) {
                if o.state == State::Waiting {
                    use super::store::Settled;
                    if let Settled::Lost(now_state) = self.store.settle(id, State::Failed, 0, None)
                    {
                        // Answered on another node: not a miss.
                        o.state = now_state.unwrap_or(State::Failed);
                        note_answered_elsewhere(&self.stats, &self.board, id);
                        continue;
                    }
                    o.state = State::Failed;
                    self.stats.missed.fetch_add(1, Relaxed);
                    self.board.count(o.app, Count::Miss);
                    self.board.merge(id, |m| {
                        let why = match m.get("endpoint_failure").and_then(Value::as_str) {
                            Some(e) => format!("The application did not respond ({e})"),
                            None => "The application did not respond".into(),
                        };
                        m.insert("state".into(), "failed".into());
                        m.insert("failure".into(), why.into());
                        m.insert(
                            "failed_after_ms".into(),
                            now.saturating_sub(o.opened_ms).into(),
                        );
                    });
                }
            }
        }
        while let Some(&(at, id)) = self.expiries.front() {
            if at > now {
                break;
            }
            self.expiries.pop_front();
            if let Some(o) = self.open.remove(&id) {
                self.by_digest.remove(&o.digest);
            }
        }
        while let Some(&(at, id)) = self.shown.front() {
            if at > now {
                break;
            }
            self.shown.pop_front();
            self.board.remove(id);
        }
    }

    /// Show the person a new interaction's state (kept `SHOWN_MS`).
    fn show(&mut self, id: u64, v: Value, now: u64) {
        if self.shown.len() >= MAX_SHOWN {
            if let Some((_, old)) = self.shown.pop_front() {
                self.board.remove(old);
            }
        }
        self.shown.push_back((now + SHOWN_MS, id));
        self.board.set(id, v);
    }
}

/// What the opener shows when another node took the first response.
pub(super) fn note_answered_elsewhere(stats: &InteractionStats, board: &Board, id: u64) {
    stats.answered_elsewhere.fetch_add(1, Relaxed);
    board.merge(id, |m| {
        m.insert("state".into(), "answered".into());
        m.insert("answered_by".into(), "another node".into());
    });
}

pub(super) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn new_token() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn unknown_interaction() -> ApiError {
    ApiError::new(404, 10062, "Unknown interaction")
}

pub(super) fn bad_webhook_token() -> ApiError {
    ApiError::new(401, 50027, "Invalid Webhook Token")
}

impl Chat {
    /// Open a person's interaction: its token, its INTERACTION_CREATE to
    /// the one bot, its timer.
    pub(super) fn open_interaction(
        &mut self,
        app: proto::AppId,
        bot: Option<BotUser>,
        target: Target,
        n: NewInteraction,
        now: u64,
    ) -> Answer {
        let ix = &mut self.ix;
        if let Some(reason) = n.refused {
            ix.stats.refused.fetch_add(1, Relaxed);
            ix.board.count(app.0, Count::Refused);
            ix.show(
                n.id,
                json!({"state": "failed", "failure": format!("refused: {reason}")}),
                now,
            );
            return Ok((204, Vec::new()));
        }
        if ix.open.len() >= MAX_OPEN || ix.open.contains_key(&n.id) {
            ix.stats.refused.fetch_add(1, Relaxed);
            ix.show(
                n.id,
                json!({"state": "failed", "failure": "refused: busy or duplicate"}),
                now,
            );
            return Ok((204, Vec::new()));
        }
        // An interaction the sidecar completed names its bot (`BotUser::of`
        // the registry's application); only a refused one has none.
        let bot = bot.ok_or_else(no_bot)?;
        let bot_id = bot.id();
        let token = new_token();
        let mut d = n.d;
        d["token"] = token.clone().into();
        let kind = d["type"].as_u64().unwrap_or(2) as u8;
        let name = d["data"]["name"]
            .as_str()
            .or_else(|| d["data"]["custom_id"].as_str())
            .unwrap_or("")
            .to_owned();
        let message: Option<u64> = d["message"]["id"].as_str().and_then(|s| s.parse().ok());
        // The message a component is on, whole, as the platform sends it
        // (discord.py finds the View by it; twilight's model requires it).
        if let Some(s) = message.and_then(|mid| self.history.get(target.channel.0, mid)) {
            d["message"] = s.value();
        }
        let user = d["member"]["user"].clone();
        let bytes = serde_json::to_vec(&d).expect("json");
        let dg = digest(&token);
        let o = Open {
            app: app.0,
            bot,
            target,
            kind,
            name,
            user,
            opened_ms: now,
            state: State::Waiting,
            digest: dg,
            message,
            original: None,
            ephemeral: HashMap::new(),
            followups: Vec::new(),
            here: true,
        };
        // The shared state first: a callback may reach any node (store.rs).
        let expires = now + self.ix.token_ttl_ms();
        if !self.ix.store.put(n.id, &o, expires, now) {
            self.ix.stats.refused.fetch_add(1, Relaxed);
            self.ix.board.count(app.0, Count::Refused);
            self.ix.show(
                n.id,
                json!({"state": "failed", "failure": "refused: registry"}),
                now,
            );
            return Ok((204, Vec::new()));
        }
        if let Some((url, seed)) = n.endpoint {
            // An HTTP application: one signed POST (endpoint.rs), never the gateway.
            let job = super::endpoint::Job {
                app: app.0,
                id: n.id,
                token: token.clone(),
                url,
                seed,
                body: bytes,
                // The endpoint's share of the window: its failure is known
                // (and shown) before the 3.0 s tick.
                deadline: std::time::Instant::now()
                    + std::time::Duration::from_millis(RESPONSE_MS - ENDPOINT_MARGIN_MS),
            };
            let queued = self
                .ix
                .deliver
                .as_ref()
                .is_some_and(|q| q.try_send(job).is_ok());
            if !queued {
                self.ix.stats.refused.fetch_add(1, Relaxed);
                let _ = self.ix.store.settle(n.id, State::Failed, 0, None);
                self.ix.show(
                    n.id,
                    json!({"state": "failed", "failure": "refused: the endpoint deliverers are busy"}),
                    now,
                );
                return Ok((204, Vec::new()));
            }
        } else {
            self.addressed = true;
            let sent = self.commit("INTERACTION_CREATE", target, 0, false, &[bot_id], &bytes);
            self.addressed = false;
            if let Err(e) = sent {
                let _ = self.ix.store.settle(n.id, State::Failed, 0, None);
                return Err(e);
            }
        }
        let ix = &mut self.ix;
        ix.by_digest.insert(dg, n.id);
        ix.open.insert(n.id, o);
        ix.deadlines.push_back((now + RESPONSE_MS, n.id));
        ix.expiries.push_back((expires, n.id));
        ix.stats.opened.fetch_add(1, Relaxed);
        ix.board.count(app.0, Count::Opened);
        ix.show(n.id, json!({"state": "waiting", "opened_ms": now}), now);
        Ok((204, Vec::new()))
    }

    /// `POST /interactions/{id}/{token}/callback`.
    pub(super) fn callback(
        &mut self,
        id: u64,
        token: &str,
        with_response: bool,
        raw: &[u8],
        content_type: Option<&str>,
        now: u64,
    ) -> Answer {
        let dg = digest(token);
        if self.ix.open.get(&id).is_none_or(|o| o.digest != dg) {
            // Opened on another node, or before a restart (store.rs).
            self.adopt_by_id(id, &dg, now)?;
        }
        let ix = &mut self.ix;
        let o = &ix.open[&id];
        match o.state {
            State::Failed => {
                ix.stats.late.fetch_add(1, Relaxed);
                ix.board.count(o.app, Count::Late);
                return Err(unknown_interaction());
            }
            State::Answered | State::Deferred => {
                ix.stats.double.fetch_add(1, Relaxed);
                ix.board.count(o.app, Count::Double);
                return Err(ApiError::new(
                    400,
                    40060,
                    "Interaction has already been acknowledged.",
                ));
            }
            State::Waiting => {}
        }
        // Late by the clock even if the tick has not run yet.
        if now >= o.opened_ms + RESPONSE_MS {
            ix.stats.late.fetch_add(1, Relaxed);
            ix.board.count(o.app, Count::Late);
            return Err(unknown_interaction());
        }
        let m = body::parse(content_type, raw)?;
        let rtype = match m.get("type").and_then(Value::as_u64) {
            Some(t @ (4..=9)) => t as u8,
            _ => {
                return Err(ApiError::form(
                    "type",
                    "BASE_TYPE_CHOICES",
                    "Value must be one of {4, 5, 6, 7, 8, 9}.",
                ))
            }
        };
        let (kind, opened) = (o.kind, o.opened_ms);
        let valid = match rtype {
            4 | 5 => kind != 4,
            6 | 7 => kind == 3 || kind == 5,
            8 => kind == 4,
            9 => kind != 4 && kind != 5,
            _ => false,
        };
        if !valid {
            return Err(ApiError::new(
                400,
                50035,
                "Interaction response type is not valid for this interaction type",
            ));
        }
        let empty = Map::new();
        let data = m.get("data").and_then(Value::as_object).unwrap_or(&empty);
        // Checked before the settle: a bad body does not use up the response.
        let mut draft4 = if rtype == 4 {
            Some(body::message(data, true)?)
        } else {
            None
        };
        if rtype == 7 {
            if self.ix.open[&id].message.is_none() {
                return Err(unknown_message());
            }
            body::message(data, false)?;
        }
        let to = if matches!(rtype, 5 | 6) {
            State::Deferred
        } else {
            State::Answered
        };
        // A message answers it (4, 5): its id is reserved now and recorded
        // by the settle itself (one write; `respond` makes the message).
        let original = matches!(rtype, 4 | 5).then(|| self.ids.next_id());
        self.settle_first_response(id, to, original, now)?;
        let mut seen = json!({"state": "answered", "response_type": rtype});
        let mut resource = json!({"type": rtype});
        let (mut message_id, mut loading, mut ephemeral) = (None, false, false);
        match rtype {
            4 | 5 => {
                let mut draft = if let Some(d) = draft4.take() {
                    d
                } else {
                    body::MessageDraft {
                        flags: data.get("flags").and_then(Value::as_u64).unwrap_or(0) & EPHEMERAL
                            | LOADING,
                        ..Default::default()
                    }
                };
                ephemeral = draft.flags & EPHEMERAL != 0;
                loading = rtype == 5;
                draft.id = original;
                draft.interaction = Some((self.metadata(id), self.ix.open[&id].app));
                let msg = self.respond(id, draft, now)?;
                message_id = msg["id"].as_str().map(str::to_owned);
                if rtype == 4 {
                    seen["message"] = msg.clone();
                }
                resource["message"] = msg;
            }
            7 => {
                let msg = self.update_component_message(id, data, now)?;
                seen["message"] = msg.clone();
                message_id = msg["id"].as_str().map(str::to_owned);
                resource["message"] = msg;
            }
            8 => seen["choices"] = data.get("choices").cloned().unwrap_or(json!([])),
            9 => seen["modal"] = Value::Object(data.clone()),
            _ => {} // 6: nothing changes yet
        }
        let o = self.ix.open.get_mut(&id).expect("checked");
        o.state = to;
        let app = o.app;
        let ix = &self.ix;
        ix.stats.acked.fetch_add(1, Relaxed);
        ix.board.count(app, Count::Ack(now.saturating_sub(opened)));
        if matches!(rtype, 5 | 6) {
            ix.stats.deferred.fetch_add(1, Relaxed);
            ix.board.count(app, Count::Deferral);
            seen["state"] = "deferred".into();
        }
        ix.stats
            .ack_latency
            .record_us(now.saturating_sub(opened) * 1000);
        seen["latency_ms"] = now.saturating_sub(opened).into();
        ix.board.set(id, seen);
        if !with_response {
            return Ok((204, Vec::new()));
        }
        let body = json!({
            "interaction": {
                "id": id.to_string(),
                "type": kind,
                "activity_instance_id": null,
                "response_message_id": message_id,
                "response_message_loading": loading,
                "response_message_ephemeral": ephemeral,
            },
            "resource": resource,
        });
        Ok((200, json_bytes(&body)))
    }

    /// `interaction_metadata` of the messages answering interaction `id`.
    pub(super) fn metadata(&self, id: u64) -> Value {
        let o = &self.ix.open[&id];
        let server = o.target.server.0.to_string();
        let user = o.user.clone();
        json!({
            "interaction_metadata": {
                "id": id.to_string(), "type": o.kind, "user": user,
                "authorizing_integration_owners": {"0": server}, "name": o.name,
            },
            "interaction": {"id": id.to_string(), "type": o.kind, "name": o.name, "user": o.user},
        })
    }

    /// A message answering interaction `id` (the original or a follow-up):
    /// committed like any message, or, if ephemeral, held for the person
    /// alone (no bot sees it).
    pub(super) fn respond(
        &mut self,
        id: u64,
        draft: body::MessageDraft,
        now: u64,
    ) -> Result<Value, ApiError> {
        let o = &self.ix.open[&id];
        let (t, bot) = (o.target, o.bot.clone());
        let first = o.original.is_none();
        // The first response's id was reserved and recorded by its settle.
        let recorded = first && draft.id.is_some();
        let msg = if draft.flags & EPHEMERAL != 0 {
            let mid = draft.id.unwrap_or_else(|| self.ids.next_id());
            let m = objects::message(&objects::NewMessage {
                id: mid,
                channel: t.channel.0,
                author: bot.public_json(),
                draft: &draft,
                now_ms: now,
                mentions: &[],
                reply_to: None,
                guild: t.server.0,
            });
            self.ix
                .open
                .get_mut(&id)
                .expect("open")
                .ephemeral
                .insert(mid, m.clone());
            m
        } else {
            let req = self.as_bot(id, ChatAction::Create(draft));
            let (_, b) = self.handle(req)?;
            serde_json::from_slice(&b).unwrap_or(Value::Null)
        };
        let mid: u64 = msg["id"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        let o = self.ix.open.get_mut(&id).expect("open");
        if first {
            o.original = Some(mid);
        } else if o.followups.len() < MAX_FOLLOWUPS {
            o.followups.push(mid);
        }
        if !recorded {
            self.ix.store.save_messages(id, o);
        }
        Ok(msg)
    }

    /// A request acting as interaction `id`'s bot.
    pub(super) fn as_bot(&self, id: u64, action: ChatAction) -> ChatRequest {
        let o = &self.ix.open[&id];
        ChatRequest::internal(proto::AppId(o.app), Some(o.bot.clone()), o.target, action)
    }

    /// Response 7: edit the message the component is on.
    fn update_component_message(
        &mut self,
        id: u64,
        data: &Map<String, Value>,
        _now: u64,
    ) -> Result<Value, ApiError> {
        let Some(mid) = self.ix.open[&id].message else {
            return Err(unknown_message());
        };
        let draft = body::message(data, false)?;
        let req = self.as_bot(id, ChatAction::Edit(mid, draft));
        let (_, b) = self.handle(req)?;
        Ok(serde_json::from_slice(&b).unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_person_saw_is_forgotten_after_shown_ms_and_beyond_the_bound() {
        let mut ix = Interactions::new(15 * 60 * 1000, Arc::default(), Arc::default());
        let t = 1_800_000_000_000;
        ix.show(1, json!({"state": "failed"}), t);
        assert!(ix.board.get(1).is_some());
        assert_eq!(ix.next_deadline(), Some(t + SHOWN_MS));
        ix.tick(t + SHOWN_MS - 1);
        assert!(ix.board.get(1).is_some());
        ix.tick(t + SHOWN_MS);
        assert!(ix.board.get(1).is_none(), "forgotten after SHOWN_MS");
        for id in 0..(MAX_SHOWN as u64 + 10) {
            ix.show(id + 10, json!({}), t);
        }
        assert!(
            ix.board.get(10).is_none(),
            "the oldest go first past the bound"
        );
        assert!(ix.board.get(MAX_SHOWN as u64 + 19).is_some());
        assert_eq!(ix.shown.len(), MAX_SHOWN);
    }
}
