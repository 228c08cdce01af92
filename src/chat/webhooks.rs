//! Follow-ups with an interaction's token: `/webhooks/{app}/{token}` and
//! its `messages/@original|{id}` (REST.md "Interactions"; the token works
//! for `chat.interaction_token_ttl_ms` after the interaction opened).

use serde_json::{json, Value};

use super::interactions::{digest, unknown_interaction, Count, State, LOADING, MAX_FOLLOWUPS};
use super::*;
use crate::api::body;
use crate::worker::mail::WebhookMethod;

impl Chat {
    /// `/webhooks/{app}/{token}...`: follow-ups and the original response.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn webhook(
        &mut self,
        app: u64,
        token: &str,
        method: WebhookMethod,
        message: Option<u64>,
        raw: &[u8],
        content_type: Option<&str>,
        now: u64,
    ) -> Answer {
        let id = self.webhook_interaction(app, &digest(token), now)?;
        let o = &self.ix.open[&id];
        if o.state == State::Failed || o.state == State::Waiting && method != WebhookMethod::Post {
            // Nothing to follow up: the interaction was never answered.
            return Err(unknown_interaction());
        }
        let mid = match message {
            Some(0) => o.original,
            other => other,
        };
        match method {
            WebhookMethod::Post => {
                let mut draft = body::message(&body::parse(content_type, raw)?, true)?;
                // The first follow-up of a deferral replaces its "thinking"
                // message, as on the platform.
                let thinking = o.followups.is_empty()
                    && o.original.is_some_and(|m| {
                        self.history.get(o.target.channel.0, m).is_some_and(|s| {
                            s.value()["flags"].as_u64().unwrap_or(0) & LOADING != 0
                        })
                    });
                let msg = if thinking {
                    let mid = o.original.expect("checked");
                    let req = self.as_bot(id, ChatAction::Edit(mid, draft));
                    let (_, b) = self.handle(req)?;
                    let msg: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    let o = self.ix.open.get_mut(&id).expect("open");
                    o.followups.push(mid);
                    self.ix.store.save_messages(id, o);
                    msg
                } else {
                    draft.interaction = Some((self.metadata(id), app));
                    self.respond(id, draft, now)?
                };
                self.ix.stats.followups.fetch_add(1, Relaxed);
                self.ix.board.count(app, Count::Followup);
                self.ix.board.merge(id, |m| {
                    let list = m.entry("followups").or_insert_with(|| json!([]));
                    if let Some(a) = list.as_array_mut() {
                        if a.len() < MAX_FOLLOWUPS {
                            a.push(msg.clone());
                        }
                    }
                });
                Ok((200, json_bytes(&msg)))
            }
            _ => {
                let Some(mid) = mid.filter(|m| o.original == Some(*m) || o.followups.contains(m))
                else {
                    return Err(unknown_message());
                };
                if let Some(e) = o.ephemeral.get(&mid).cloned() {
                    return self.ephemeral_op(id, mid, e, method, raw, content_type);
                }
                let action = match method {
                    WebhookMethod::Get => ChatAction::Get(mid),
                    WebhookMethod::Delete => ChatAction::Delete(mid),
                    _ => ChatAction::Edit(
                        mid,
                        body::message(&body::parse(content_type, raw)?, false)?,
                    ),
                };
                let req = self.as_bot(id, action);
                let (status, b) = self.handle(req)?;
                if method == WebhookMethod::Patch && Some(mid) == self.ix.open[&id].original {
                    let msg: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    self.ix.board.merge(id, |m| {
                        m.insert("message".into(), msg);
                        m.insert("state".into(), "answered".into());
                    });
                }
                Ok((status, b))
            }
        }
    }

    /// GET/PATCH/DELETE of an ephemeral message (the person's copy only).
    fn ephemeral_op(
        &mut self,
        id: u64,
        mid: u64,
        mut msg: Value,
        method: WebhookMethod,
        raw: &[u8],
        content_type: Option<&str>,
    ) -> Answer {
        let o = self.ix.open.get_mut(&id).expect("open");
        match method {
            WebhookMethod::Delete => {
                o.ephemeral.remove(&mid);
                Ok((204, Vec::new()))
            }
            WebhookMethod::Patch => {
                let d = body::message(&body::parse(content_type, raw)?, false)?;
                if let Some(c) = d.content {
                    msg["content"] = c.into();
                }
                if let Some(e) = d.embeds {
                    msg["embeds"] = e.into();
                }
                if let Some(c) = d.components {
                    msg["components"] = c.into();
                }
                msg["edited_timestamp"] = crate::protocol::payload::iso8601(now_ms()).into();
                o.ephemeral.insert(mid, msg.clone());
                if o.original == Some(mid) {
                    let shown = msg.clone();
                    self.ix.board.merge(id, |m| {
                        m.insert("message".into(), shown);
                        m.insert("state".into(), "answered".into());
                    });
                }
                Ok((200, json_bytes(&msg)))
            }
            _ => Ok((200, json_bytes(&msg))),
        }
    }
}
