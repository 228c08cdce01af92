//! The message family of a chat service: send, read, edit, delete, bulk
//! delete, typing. Each handler checks against the window (`history.rs`),
//! then ends in the one `Chat::commit` of its event, then updates the
//! window: a refused commit (503) leaves the window as it was.

use super::*;

impl Chat {
    /// `POST /channels/{id}/messages`: the message JSON is written directly
    /// (`objects::write_message`), once, and spliced into its event.
    pub(super) fn create(&mut self, a: &Act, draft: crate::api::body::MessageDraft) -> Answer {
        let author = a.acting()?;
        let (server, channel) = (a.server, a.channel);
        let content = draft.content.as_deref().unwrap_or("");
        let mentions = objects::allowed_users(content, draft.allowed_mentions.as_ref());
        let id = draft.id.unwrap_or_else(|| self.ids.next_id());
        // A reply to a message this service did not commit (a person's,
        // from another producer) or that left the window is still a reply:
        // `referenced_message` is then null, as for a deleted one.
        let mut body = Vec::with_capacity(768);
        {
            let reply_to = match draft.reference {
                Some((mid, ch)) if ch.is_none_or(|c| c == channel) => {
                    Some((mid, self.history.get(channel, mid).map(Stored::json)))
                }
                Some(_) => {
                    return Err(ApiError::form(
                        "message_reference",
                        "REPLIES_CANNOT_REFERENCE_OTHER_CHANNEL",
                        "Cannot reply to a message in another channel",
                    ))
                }
                None => None,
            };
            objects::write_message(
                &objects::NewMessage {
                    id,
                    channel,
                    author: author.public_json(),
                    draft: &draft,
                    now_ms: a.now,
                    mentions: &mentions,
                    reply_to: reply_to
                        .as_ref()
                        .map(|(i, v)| (*i, v.as_deref().unwrap_or(b"null"))),
                    guild: server,
                },
                &mut body,
            );
        }
        let mut d = std::mem::take(&mut self.event);
        objects::write_message_event(&body, server, a.now, &mut d);
        // The author sees its own message's content (as on the platform),
        // like those it mentions.
        let mut full = mentions;
        full.push(a.me);
        let done = self.commit(
            "MESSAGE_CREATE",
            a.t,
            intents::GUILD_MESSAGES,
            true,
            &full,
            &d,
        );
        self.event = d;
        done?;
        // A message with components is what a person's component
        // interaction acts on, on the chat thread: it learns it (`tap.rs`).
        if self.worker.is_some() && draft.components.as_ref().is_some_and(|c| !c.is_empty()) {
            self.sink.tap_this();
        }
        self.history.push(
            channel,
            Stored {
                id,
                author_id: a.me,
                bytes: body.len(),
                message: Value::Null,
                raw: Some(body.clone().into_boxed_slice()),
                reactions: Vec::new(),
            },
        );
        Ok((200, body))
    }

    /// `GET /channels/{id}/messages`, from the window.
    pub(super) fn list(
        &mut self,
        a: &Act,
        limit: usize,
        before: Option<u64>,
        after: Option<u64>,
        around: Option<u64>,
    ) -> Answer {
        let list: Vec<Value> = self
            .history
            .list(a.channel, limit, before, after, around)
            .into_iter()
            .map(|s| objects::with_reactions(&s.value(), &s.reactions, a.me))
            .collect();
        Ok((200, serde_json::to_vec(&list).expect("json")))
    }

    /// `GET /channels/{id}/messages/{id}`, from the window.
    pub(super) fn get(&mut self, a: &Act, mid: u64) -> Answer {
        let s = self
            .history
            .get(a.channel, mid)
            .ok_or_else(unknown_message)?;
        let m = objects::with_reactions(&s.value(), &s.reactions, a.me);
        Ok((200, serde_json::to_vec(&m).expect("json")))
    }

    /// `PATCH /channels/{id}/messages/{id}`: the bot's own message only.
    pub(super) fn edit(
        &mut self,
        a: &Act,
        mid: u64,
        draft: crate::api::body::MessageDraft,
    ) -> Answer {
        let (server, channel, me) = (a.server, a.channel, a.me);
        let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
        if s.author_id != me {
            return Err(ApiError::new(
                403,
                codes::CANNOT_EDIT_OTHERS,
                "Cannot edit a message authored by another user",
            ));
        }
        let mut m = s.value();
        if let Some(c) = &draft.content {
            m["content"] = c.clone().into();
        }
        if let Some(e) = &draft.embeds {
            m["embeds"] = e.clone().into();
        }
        if let Some(c) = &draft.components {
            m["components"] = c.clone().into();
        }
        // An edit answers a deferral: the message is no longer loading.
        if let Some(f) = m["flags"].as_u64().filter(|f| f & LOADING != 0) {
            m["flags"] = (f & !LOADING).into();
        }
        m["edited_timestamp"] = crate::protocol::payload::iso8601(a.now).into();
        let empty = m["content"].as_str().is_none_or(str::is_empty)
            && m["embeds"].as_array().is_none_or(Vec::is_empty)
            && m["components"].as_array().is_none_or(Vec::is_empty);
        if empty {
            return Err(ApiError::new(
                400,
                codes::EMPTY_MESSAGE,
                "Cannot send an empty message",
            ));
        }
        let content = m["content"].as_str().unwrap_or("").to_string();
        let mentions = objects::allowed_users(&content, draft.allowed_mentions.as_ref());
        let body = serde_json::to_vec(&m).expect("json");
        let d = objects::message_event(&body, server, a.now);
        self.commit(
            "MESSAGE_UPDATE",
            a.t,
            intents::GUILD_MESSAGES,
            true,
            &mentions,
            &d,
        )?;
        let s = self.history.get_mut(channel, mid).expect("checked");
        let old = s.bytes;
        s.message = m;
        s.raw = None;
        s.bytes = body.len();
        let reactions = s.reactions.clone();
        self.history.resize(old, body.len());
        let out = objects::with_reactions(
            &serde_json::from_slice(&body).expect("json"),
            &reactions,
            me,
        );
        Ok((200, serde_json::to_vec(&out).expect("json")))
    }

    /// `DELETE /channels/{id}/messages/{id}`: the bot's own, or any with
    /// MANAGE_MESSAGES (`permit::may_delete`).
    pub(super) fn delete(&mut self, a: &Act, mid: u64) -> Answer {
        let (server, channel) = (a.server, a.channel);
        let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
        may_delete(a.t.perms, s.author_id == a.me)?;
        let d = json!({"id": mid.to_string(), "channel_id": channel.to_string(), "guild_id": server.to_string()});
        self.commit(
            "MESSAGE_DELETE",
            a.t,
            intents::GUILD_MESSAGES,
            false,
            &[],
            &json_bytes(&d),
        )?;
        self.history.remove(channel, mid);
        Ok((204, Vec::new()))
    }

    /// `POST /channels/{id}/messages/bulk-delete`: messages under 14 days
    /// old; those not in the window are skipped, as the platform does.
    pub(super) fn bulk_delete(&mut self, a: &Act, ids: Vec<u64>) -> Answer {
        let (server, channel) = (a.server, a.channel);
        let oldest = a.now.saturating_sub(BULK_MAX_AGE_MS);
        if ids
            .iter()
            .any(|&id| registry::snowflake::timestamp_ms(id) < oldest)
        {
            return Err(ApiError::new(
                400,
                codes::BULK_DELETE_TOO_OLD,
                "You can only bulk delete messages that are under 14 days old.",
            ));
        }
        let found: Vec<u64> = ids
            .into_iter()
            .filter(|&id| self.history.get(channel, id).is_some())
            .collect();
        if !found.is_empty() {
            let d = json!({"ids": found.iter().map(u64::to_string).collect::<Vec<_>>(), "channel_id": channel.to_string(), "guild_id": server.to_string()});
            self.commit(
                "MESSAGE_DELETE_BULK",
                a.t,
                intents::GUILD_MESSAGES,
                false,
                &[],
                &json_bytes(&d),
            )?;
            for id in found {
                self.history.remove(channel, id);
            }
        }
        Ok((204, Vec::new()))
    }

    /// `POST /channels/{id}/typing`: TYPING_START, nothing kept.
    pub(super) fn typing(&mut self, a: &Act) -> Answer {
        let d = objects::typing_event(a.me, a.acting()?.public_value(), a.channel, a.server, a.now);
        self.commit(
            "TYPING_START",
            a.t,
            intents::GUILD_MESSAGE_TYPING,
            false,
            &[],
            &json_bytes(&d),
        )?;
        Ok((204, Vec::new()))
    }
}
