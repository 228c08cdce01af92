//! The Redis keys of crash recovery (the parent's head lists them) and
//! `Store`, one Redis connection with a deadline per round and, after a
//! failure, `BACKOFF` before it is tried again. A leaf: the writer and
//! journal (`mod.rs`) and the survivor threads (`rebuild.rs`) both use it.

use std::io;
use std::time::{Duration, Instant};

use crate::link::resp::{Conn, Reply, Target};

/// After a failed round, the store is not tried again for this long.
const BACKOFF: Duration = Duration::from_secs(1);
/// Largest blob read back (a checkpoint of 100,000 sessions is 2.8 MB).
const MAX_BLOB: usize = 32 << 20;

pub fn journal_key(instance: &str) -> String {
    format!("gwr:j:{instance}")
}
pub fn checkpoint_key(instance: &str, worker: usize, slot: u8) -> String {
    format!("gwr:c:{instance}:{worker}:{slot}")
}
pub fn summary_key(sid: &shards::SessionId) -> String {
    format!("gwr:s:{}", sid.as_str())
}
pub fn owner_key(sid: &shards::SessionId, dead: &str) -> String {
    format!("gwr:o:{}:{dead}", sid.as_str())
}

/// One Redis connection with a deadline per round and a back-off.
pub(crate) struct Store {
    target: Target,
    conn: Option<Conn>,
    timeout: Duration,
    down_until: Option<Instant>,
}

impl Store {
    pub(crate) fn new(url: &str, timeout_ms: u64) -> Result<Store, String> {
        Ok(Store {
            target: Target::parse(url)?,
            conn: None,
            timeout: Duration::from_millis(timeout_ms.max(1)),
            down_until: None,
        })
    }

    /// Send `n` encoded commands, read their replies, by the deadline. A
    /// Redis error reply is an error here too.
    pub(crate) fn round(&mut self, cmds: &[u8], n: usize) -> io::Result<Vec<Reply>> {
        if self.down_until.is_some_and(|t| Instant::now() < t) {
            return Err(io::Error::other("redis: backing off after a failure"));
        }
        let deadline = Instant::now() + self.timeout;
        let r = (|| {
            if self.conn.is_none() {
                let mut c = Conn::connect(&self.target, deadline)?;
                c.allow_large(MAX_BLOB);
                self.conn = Some(c);
            }
            let replies = self
                .conn
                .as_mut()
                .expect("connected above")
                .pipeline(cmds, n, deadline)?;
            if let Some(Reply::Error(e)) = replies.iter().find(|r| matches!(r, Reply::Error(_))) {
                return Err(io::Error::other(format!("redis: {e}")));
            }
            Ok(replies)
        })();
        if r.is_err() {
            self.conn = None;
            self.down_until = Some(Instant::now() + BACKOFF);
        } else {
            self.down_until = None;
        }
        r
    }
}
