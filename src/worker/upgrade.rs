//! An HTTP request on a fresh connection that is not REST (REST requests,
//! `/api/...`, go to `rest_edge.rs`): the WebSocket upgrade (query checks,
//! compression, Hello), or a 426/400, or 503 when compression was asked
//! for and the node's cap on compressed sessions is reached.

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
        // Transport compression, if asked for: served, or (at the node-wide
        // cap) the upgrade refused with 503 before any WebSocket exists.
        // Never plain text instead: hikari fails on a text frame where it
        // asked for zlib-stream, and Eris hangs (issue 40). Every library
        // checked retries a refused upgrade with its reconnect backoff
        // (docs/libraries.md, "Compression at the cap").
        let compressor = match compress::Kind::from_query(http::query_param(
            &head.query,
            "compress",
        )) {
            None => None,
            Some(kind) => match self
                .shared
                .compress_budget
                .try_take()
                .map(|permit| Compressor::new(kind, Some(permit)))
            {
                Some(Ok(c)) => Some(Box::new(c)),
                refused => {
                    if let Some(Err(e)) = refused {
                        tracing::warn!(error = %e, "compression stream not created: upgrade refused");
                    }
                    WorkerMetrics::inc(&self.shared.metrics[worker].compression_refused);
                    let conn = self.conn(key).expect("live");
                    http::write_response(
                        503,
                        rest::JSON,
                        rest::COMPRESSION_CAP,
                        false,
                        &[("Retry-After", rest::COMPRESSION_RETRY_AFTER_S)],
                        &mut conn.out,
                    );
                    self.close_after_flush(key);
                    return;
                }
            },
        };
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
