//! What the chat service learns from the event stream's other sources
//! (the tap of `ingest::pipeline`): the messages a person or another
//! producer committed, so bots can act on them.

use super::*;

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
            match t {
                "MESSAGE_DELETE" => {
                    self.history.remove(channel, id);
                }
                _ => {
                    let author_id = h.author.and_then(|a| a.id.parse().ok()).unwrap_or(0);
                    let raw: Box<[u8]> = rec.d().into();
                    let newest = self.history.is_newest(channel, id);
                    match self.history.get_mut(channel, id) {
                        Some(s) if t == "MESSAGE_UPDATE" => {
                            let old = s.bytes;
                            s.bytes = raw.len();
                            s.message = Value::Null;
                            s.raw = Some(raw);
                            let new = s.bytes;
                            self.history.resize(old, new);
                        }
                        Some(_) => {} // ours, already kept
                        None if t == "MESSAGE_CREATE" && newest => {
                            self.history.push(
                                channel,
                                Stored {
                                    id,
                                    author_id,
                                    bytes: raw.len(),
                                    message: Value::Null,
                                    raw: Some(raw),
                                    reactions: Vec::new(),
                                },
                            );
                        }
                        None => {}
                    }
                }
            }
        }
        self.publish_stats();
    }
}
