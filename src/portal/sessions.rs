//! Signed-in sessions: a random 256-bit id in an HttpOnly cookie, the
//! application it was signed in for, and its CSRF token. Held in memory
//! only (a restart signs everyone out), at most `max` at once (the least
//! recently used is dropped), each ending after `idle` unused or `max_age`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

pub const COOKIE: &str = "gw_portal";
/// Interactions a session started and may look at (a ring).
const OWN_INTERACTIONS: usize = 32;

#[derive(Clone, Debug)]
pub struct Session {
    /// The application shown (0: a developer who has not chosen one).
    pub app: u64,
    pub app_name: String,
    /// Signed in as a developer (id, name): may switch between the
    /// applications they own; None: signed in with one bot's token.
    pub developer: Option<(u64, String)>,
    /// Signed in with the node's admin token: the operator's page only.
    pub operator: bool,
    pub csrf: String,
    created: Instant,
    used: Instant,
    /// Interactions this session clicked (only these may be read back).
    pub interactions: Vec<u64>,
}

impl Session {
    pub fn own(&mut self, id: u64) {
        if self.interactions.len() >= OWN_INTERACTIONS {
            self.interactions.remove(0);
        }
        self.interactions.push(id);
    }
}

pub struct Sessions {
    by_id: HashMap<String, Session>,
    max: usize,
    idle: Duration,
    max_age: Duration,
    /// Sessions ended by a token reset elsewhere, so their page can say why
    /// it is signed out: (cookie id, when), oldest first, at most `ENDED`.
    ended: std::collections::VecDeque<(String, Instant)>,
}

/// Ended sessions remembered (for the reason), and for how long.
const ENDED: usize = 256;
const ENDED_KEPT: Duration = Duration::from_secs(3600);

/// Why a session no longer exists, as its page is told.
pub const TOKEN_RESET: &str =
    "signed out: the bot's token was reset (in another tab or by the operator); sign in with the new token";

/// 32 random bytes as hex; None if the system has no randomness to give.
pub fn random_hex() -> Option<String> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).ok()?;
    Some(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Constant-time equality of two secrets.
pub fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Sessions {
    pub fn new(max: usize, idle: Duration, max_age: Duration) -> Sessions {
        Sessions {
            by_id: HashMap::with_capacity(max.min(4096)),
            max: max.max(1),
            idle,
            max_age,
            ended: std::collections::VecDeque::with_capacity(ENDED),
        }
    }

    fn live(&self, s: &Session, now: Instant) -> bool {
        now.duration_since(s.used) < self.idle && now.duration_since(s.created) < self.max_age
    }

    /// A new session for `app`: (cookie id, CSRF token).
    pub fn create(&mut self, app: u64, app_name: &str, now: Instant) -> Option<(String, String)> {
        self.create_as(app, app_name, None, now)
    }

    /// A new session, of a developer if `developer` (id, name).
    pub fn create_as(
        &mut self,
        app: u64,
        app_name: &str,
        developer: Option<(u64, String)>,
        now: Instant,
    ) -> Option<(String, String)> {
        self.by_id.retain(|_, s| {
            now.duration_since(s.used) < self.idle && now.duration_since(s.created) < self.max_age
        });
        while self.by_id.len() >= self.max {
            let oldest = self
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.used)
                .map(|(k, _)| k.clone())?;
            self.by_id.remove(&oldest);
        }
        let (id, csrf) = (random_hex()?, random_hex()?);
        self.by_id.insert(
            id.clone(),
            Session {
                app,
                app_name: app_name.to_string(),
                developer,
                operator: false,
                csrf: csrf.clone(),
                created: now,
                used: now,
                interactions: Vec::new(),
            },
        );
        Some((id, csrf))
    }

    /// A new operator's session (no application shown).
    pub fn create_operator(&mut self, now: Instant) -> Option<(String, String)> {
        let (id, csrf) = self.create_as(0, "", None, now)?;
        self.by_id.get_mut(&id)?.operator = true;
        Some((id, csrf))
    }

    /// The live session of a cookie id (its use time renewed).
    pub fn get(&mut self, id: &str, now: Instant) -> Option<&mut Session> {
        if id.len() != 64 {
            return None;
        }
        let live = self.by_id.get(id).is_some_and(|s| self.live(s, now));
        if !live {
            self.by_id.remove(id);
            return None;
        }
        let s = self.by_id.get_mut(id)?;
        s.used = now;
        Some(s)
    }

    pub fn remove(&mut self, id: &str) {
        self.by_id.remove(id);
    }

    /// Ends every bot-token session of `app` but `keep` (after a token
    /// reset), remembering them (`ended_by_reset`); a developer's session
    /// stays (their password, not the token, signed them in).
    pub fn end_app(&mut self, app: u64, keep: &str) {
        let now = Instant::now();
        let ended = &mut self.ended;
        self.by_id.retain(|k, s| {
            let stays = s.app != app || k == keep || s.developer.is_some();
            if !stays {
                if ended.len() == ENDED {
                    ended.pop_front();
                }
                ended.push_back((k.clone(), now));
            }
            stays
        });
    }

    /// Whether the session `id` was ended by a token reset within the hour.
    pub fn ended_by_reset(&self, id: &str, now: Instant) -> bool {
        self.ended
            .iter()
            .any(|(k, at)| now.duration_since(*at) < ENDED_KEPT && same(k, id))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_are_bounded_and_end_with_their_token() {
        let t0 = Instant::now();
        let mut s = Sessions::new(2, Duration::from_secs(10), Duration::from_secs(100));
        let (a, csrf) = s.create(1, "one", t0).unwrap();
        assert_eq!(s.get(&a, t0).unwrap().csrf, csrf);
        assert!(s.get(&a, t0 + Duration::from_secs(11)).is_none(), "idle");
        let (b, _) = s.create(1, "one", t0).unwrap();
        let (c, _) = s.create(2, "two", t0 + Duration::from_secs(1)).unwrap();
        let (d, _) = s.create(2, "two", t0 + Duration::from_secs(2)).unwrap();
        assert_eq!(s.len(), 2);
        assert!(
            s.get(&b, t0 + Duration::from_secs(2)).is_none(),
            "oldest dropped"
        );
        s.end_app(2, &d);
        assert!(s.get(&c, t0 + Duration::from_secs(2)).is_none());
        assert!(s.ended_by_reset(&c, Instant::now()) && !s.ended_by_reset(&d, Instant::now()));
        assert!(s.get(&d, t0 + Duration::from_secs(2)).is_some());
        assert!(s.get("forged", t0).is_none());
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("a", "ab"));
    }
}
