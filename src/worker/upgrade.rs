//! An HTTP request on a fresh connection that is not REST (REST requests,
//! `/api/...`, go to `rest_edge.rs`): the WebSocket upgrade (query checks,
//! compression, Hello), or a 426/400.

use super::*;

impl Worker {
    pub(super) fn on_http_request(&mut self, key: ConnKey, head: RequestHead, now: u64) {
        let worker = self.id;
        let max_message = self.shared.cfg.limits.inbound_message_bytes;
        let limits = self.limits;
        let Some(conn) = self.conn(key) else { return };
        conn.keep_alive = head.keep_alive;
        if !head.is_websocket_upgrade || head.websocket_key.is_none() {
            let status = if head.is_websocket_upgrade
                || !head.websocket_version_ok && head.websocket_key.is_some()
            {
                400
            } else {
                426
            };
            http::write_response(
                status,
                rest::JSON,
                rest::UPGRADE_REQUIRED,
                false,
                &[("Upgrade", "websocket")],
                &mut conn.out,
            );
            self.close_after_flush(key);
            return;
        }
        // Transport compression, if asked for: a compressing stream while
        // the node-wide cap allows, else the same stream's framing with
        // nothing compressed (`Compressor::stored`): never plain text where
        // a stream was asked for (hikari and Eris fail on it), never a
        // refusal (discord.py and discord.js fail at their first connect:
        // docs/libraries.md, "Compression at the cap").
        let compressor = compress::Kind::from_query(http::query_param(
            &head.query,
            "compress",
        ))
        .map(|kind| {
            let compressing = self
                .shared
                .compress_budget
                .try_take()
                .map(|permit| Compressor::new(kind, Some(permit)));
            Box::new(match compressing {
                Some(Ok(c)) => c,
                refused => {
                    if let Some(Err(e)) = refused {
                        tracing::warn!(error = %e, "compression stream not created: serving stored blocks");
                    }
                    WorkerMetrics::inc(&self.shared.metrics[worker].compression_stored);
                    Compressor::stored(kind)
                }
            })
        });
        let conn = self.conn(key).expect("live");
        http::write_upgrade_response(
            head.websocket_key.as_deref().expect("checked"),
            &mut conn.out,
        );
        if compressor.is_some() {
            conn.out_raw = conn.out.len();
            conn.compress = compressor;
        }
        let mut wsc = Box::new(WsConn {
            decoder: ws::Decoder::new(max_message),
            session: Session::new(limits, now, &mut conn.out),
            end_session: false,
            resume_token: None,
        });
        let refusal = upgrade_refusal(&head.query);
        wsc.end_session = refusal.is_some();
        conn.state = ConnState::WebSocket(wsc, None);
        // A WebSocket has no REST state: its box goes back (an idle
        // session's memory, docs/bench/scaling.md).
        conn.rest_state = None;
        conn.deadline_ms = u64::MAX;
        self.queue_flush(key);
        if let Some(close) = refusal {
            self.begin_close(key, Some(close));
        }
    }
}
