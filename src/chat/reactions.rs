//! The reaction family of a chat service: react, unreact, list who
//! reacted. Bounded as the platform is: at most `MAX_REACTIONS` emoji per
//! message and `MAX_REACTORS` users per emoji (30010 past either).

use super::*;

impl Chat {
    /// `PUT .../reactions/{emoji}/@me`: MESSAGE_REACTION_ADD, once per bot.
    pub(super) fn react(&mut self, a: &Act, mid: u64, emoji: String) -> Answer {
        let (channel, me) = (a.channel, a.me);
        let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
        let author = s.author_id;
        match s.reactions.iter().find(|r| r.emoji == emoji) {
            Some(r) if r.users.contains(&me) => return Ok((204, Vec::new())),
            Some(r) if r.users.len() >= MAX_REACTORS => {
                return Err(ApiError::new(
                    400,
                    30010,
                    "Maximum number of reactions reached (1000)",
                ))
            }
            None if s.reactions.len() >= MAX_REACTIONS => {
                return Err(ApiError::new(
                    400,
                    30010,
                    "Maximum number of reactions reached (20)",
                ))
            }
            _ => {}
        }
        self.commit_reaction(a, mid, &emoji, Some(author))?;
        let s = self.history.get_mut(channel, mid).expect("checked");
        match s.reactions.iter_mut().find(|r| r.emoji == emoji) {
            Some(r) => r.users.push(me),
            None => s.reactions.push(Reaction {
                emoji,
                users: vec![me],
            }),
        }
        Ok((204, Vec::new()))
    }

    /// `DELETE .../reactions/{emoji}/@me`: MESSAGE_REACTION_REMOVE if the
    /// bot had reacted; 204 either way.
    pub(super) fn unreact(&mut self, a: &Act, mid: u64, emoji: String) -> Answer {
        let (channel, me) = (a.channel, a.me);
        let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
        let had = s
            .reactions
            .iter()
            .any(|r| r.emoji == emoji && r.users.contains(&me));
        if had {
            self.commit_reaction(a, mid, &emoji, None)?;
            let s = self.history.get_mut(channel, mid).expect("checked");
            if let Some(r) = s.reactions.iter_mut().find(|r| r.emoji == emoji) {
                r.users.retain(|&u| u != me);
            }
            s.reactions.retain(|r| !r.users.is_empty());
        }
        Ok((204, Vec::new()))
    }

    /// The acting bot's reaction to message `mid` as its event: added (the
    /// message's author given: MESSAGE_REACTION_ADD names it) or removed.
    fn commit_reaction(
        &mut self,
        a: &Act,
        mid: u64,
        emoji: &str,
        added_to: Option<u64>,
    ) -> Result<(), ApiError> {
        let add = added_to.is_some();
        let d = objects::reaction_event(
            a.me,
            a.acting()?.public_value(),
            a.channel,
            mid,
            a.server,
            emoji,
            added_to,
            add,
            a.now,
        );
        let t = if add {
            "MESSAGE_REACTION_ADD"
        } else {
            "MESSAGE_REACTION_REMOVE"
        };
        self.commit(
            t,
            a.t,
            intents::GUILD_MESSAGE_REACTIONS,
            false,
            &[],
            &json_bytes(&d),
        )
    }

    /// `GET .../reactions/{emoji}`: the users who reacted, by id, paged.
    pub(super) fn reactions(
        &mut self,
        a: &Act,
        message: u64,
        emoji: &str,
        limit: usize,
        after: Option<u64>,
    ) -> Answer {
        let s = self
            .history
            .get(a.channel, message)
            .ok_or_else(unknown_message)?;
        let Some(r) = s.reactions.iter().find(|r| r.emoji == emoji) else {
            return Err(ApiError::new(404, codes::UNKNOWN_EMOJI, "Unknown Emoji"));
        };
        let mut users: Vec<u64> = r
            .users
            .iter()
            .copied()
            .filter(|&u| after.is_none_or(|a| u > a))
            .collect();
        users.sort_unstable();
        let list: Vec<Value> = users
            .into_iter()
            .take(limit)
            .map(|u| match &a.bot {
                Some(b) if u == a.me => b.public_value().clone(),
                _ => objects::user_stub(u),
            })
            .collect();
        Ok((200, serde_json::to_vec(&list).expect("json")))
    }
}
