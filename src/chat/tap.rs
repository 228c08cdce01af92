//! What the chat service learns from the event stream's other sources
//! (the tap of `ingest::pipeline`): the messages a person or another
//! producer committed, so bots can act on them.
//!
//! The chat thread learns every tapped batch. With per-worker chat services
//! it also hands what it learnt from sources other than the workers (people,
//! producers, its own interaction responses) to the worker that commits for
//! that server (`api::commit_worker`), as `ToWorker::Learn`: the copies are
//! made here, on the chat thread, so a worker's event path allocates
//! nothing (tests/no_alloc_worker.rs). A worker's own commits are in its
//! window already.
//!
//! Of a worker's commits, the chat thread is offered only what its
//! interactions act on: messages with components (a person's click opens an
//! interaction on one; response 7 edits it), and every edit and delete (a
//! message edited to have components is kept whole from its edit). A plain
//! send, a reaction or typing never wakes the chat thread: that was a
//! wakeup and a JSON head parse per request on the send path (issue 27).

use super::*;

pub use crate::worker::mail::Learnt;

/// At most this many changes go to a worker in one `ToWorker::Learn`.
const LEARN_BATCH: usize = 256;

impl History {
    /// Apply a change learnt from the stream.
    pub fn apply(&mut self, l: Learnt) {
        match l {
            Learnt::Forget { channel, id } => {
                self.remove(channel, id);
            }
            Learnt::Update { channel, id, raw } => {
                if let Some(s) = self.get_mut(channel, id) {
                    let old = s.bytes;
                    s.bytes = raw.len();
                    s.message = Value::Null;
                    s.raw = Some(raw);
                    let new = s.bytes;
                    self.resize(old, new);
                }
            }
            Learnt::Keep {
                channel,
                id,
                author_id,
                raw,
            } => {
                if self.get(channel, id).is_none() {
                    let stored = Stored {
                        id,
                        author_id,
                        bytes: raw.len(),
                        message: Value::Null,
                        raw: Some(raw),
                        reactions: Vec::new(),
                    };
                    self.push(channel, stored);
                }
            }
        }
    }
}

impl Chat {
    /// Keep the messages another source committed (a person's, say), so
    /// bots can reply to, react to and read them. Only MESSAGE_CREATE,
    /// MESSAGE_UPDATE and MESSAGE_DELETE matter; the JSON is kept as bytes
    /// and parsed when a request needs it.
    pub(super) fn learn(&mut self, batch: &Batch) {
        #[derive(serde::Deserialize)]
        struct Author {
            id: String,
        }
        #[derive(serde::Deserialize)]
        struct Head {
            id: String,
            author: Option<Author>,
        }
        // A worker's batch is in its window already: learn it here only.
        let forward =
            self.forward.is_some() && batch.origin == crate::delivery::batch::ORIGIN_OTHER;
        for body in batch.bodies() {
            // SAFETY: the ingest pipeline accepted exactly these bytes.
            let rec = unsafe { ingest::access_trusted(body) };
            let t = rec.event_type();
            if !matches!(t, "MESSAGE_CREATE" | "MESSAGE_UPDATE" | "MESSAGE_DELETE") {
                continue;
            }
            let Ok(h) = serde_json::from_slice::<Head>(rec.d()) else {
                continue;
            };
            let Ok(id) = h.id.parse::<u64>() else {
                continue;
            };
            let channel = rec.channel_id();
            let l = match t {
                "MESSAGE_DELETE" => Learnt::Forget { channel, id },
                // A message this window lacks (a worker's, sent without
                // components: not tapped) is kept whole from its edit.
                "MESSAGE_UPDATE" if self.history.get(channel, id).is_some() => Learnt::Update {
                    channel,
                    id,
                    raw: rec.d().into(),
                },
                _ => Learnt::Keep {
                    channel,
                    id,
                    author_id: h.author.and_then(|a| a.id.parse().ok()).unwrap_or(0),
                    raw: rec.d().into(),
                },
            };
            if forward {
                let copy = l.clone();
                self.hand_to_worker(rec.server_id(), channel, copy);
            }
            self.history.apply(l);
        }
        self.send_learnt();
        self.publish_stats();
    }

    fn hand_to_worker(&mut self, server: u64, channel: u64, l: Learnt) {
        let Some(f) = self.forward.as_mut() else {
            return;
        };
        let w = crate::api::commit_worker(server, channel, f.workers.len());
        f.pending[w].push(l);
        if f.pending[w].len() >= LEARN_BATCH {
            self.send_learnt();
        }
    }

    /// Hand each worker what it should learn. A full inbox drops it
    /// (`gatewayd_chat_learn_dropped_total`): that worker's bots then get
    /// 404 for those messages, as for messages out of the window.
    fn send_learnt(&mut self) {
        let Some(f) = self.forward.as_mut() else {
            return;
        };
        for (w, pending) in f.pending.iter_mut().enumerate() {
            if pending.is_empty() {
                continue;
            }
            let n = pending.len() as u64;
            let msg = ToWorker::Learn(std::mem::take(pending).into_boxed_slice());
            if f.workers[w].try_send(msg).is_err() {
                self.stats.learn_dropped.fetch_add(n, Relaxed);
            }
        }
    }
}
