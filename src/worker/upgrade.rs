//! An HTTP request on a fresh connection: a connect-time REST route
//! (answered by the registry sidecar) or the WebSocket upgrade (query
//! checks, compression, Hello).

use super::*;

impl Worker {
    pub(super) fn on_http_request(&mut self, key: ConnKey, head: RequestHead, now: u64) {
        let gateway_url = self.shared.gateway_url.clone();
        let worker = self.id;
        let max_message = self.shared.cfg.limits.inbound_message_bytes;
        let limits = self.limits;
        let Some(conn) = self.conn(key) else { return };
        conn.keep_alive = head.keep_alive;
        if rest::is_api(&head.path) {
            WorkerMetrics::inc(&self.shared.metrics[worker].rest_requests);
            let conn = self.conn(key).expect("live");
            match rest::route(&head.method, &head.path) {
                rest::Route::Gateway => http::write_response(
                    200,
                    rest::JSON,
                    &rest::gateway_body(&gateway_url),
                    head.keep_alive,
                    &[],
                    &mut conn.out,
                ),
                rest::Route::NotFound => http::write_response(
                    404,
                    rest::JSON,
                    rest::NOT_FOUND,
                    head.keep_alive,
                    &[],
                    &mut conn.out,
                ),
                rest::Route::MethodNotAllowed => http::write_response(
                    405,
                    rest::JSON,
                    rest::METHOD_NOT_ALLOWED,
                    head.keep_alive,
                    &[],
                    &mut conn.out,
                ),
                rest::Route::Authed(route) => {
                    conn.rest_pending = true;
                    let token = rest::bearer(head.authorization.as_deref());
                    let req = SidecarRequest::Rest {
                        worker,
                        conn: key,
                        route,
                        token,
                    };
                    if self.shared.sidecar.try_send(req).is_err() {
                        let conn = self.conn(key).expect("live");
                        conn.rest_pending = false;
                        http::write_response(
                            503,
                            rest::JSON,
                            br#"{"message": "busy", "code": 0}"#,
                            false,
                            &[],
                            &mut conn.out,
                        );
                        self.close_after_flush(key);
                        return;
                    }
                }
            }
            if head.content_length > 0 {
                // We serve no request bodies; rather than skip one, end the connection.
                self.close_after_flush(key);
            } else if !head.keep_alive {
                let pending = self.conn(key).map(|c| c.rest_pending).unwrap_or(false);
                if !pending {
                    self.close_after_flush(key);
                }
            }
            return;
        }
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
        // Transport compression, if asked for and the node-wide cap allows;
        // beyond it the connection gets plain text frames.
        let compressor = match compress::Kind::from_query(http::query_param(
            &head.query,
            "compress",
        )) {
            None => None,
            Some(kind) => match self.shared.compress_budget.try_take() {
                Some(permit) => match Compressor::new(kind, Some(permit)) {
                    Ok(c) => Some(Box::new(c)),
                    Err(e) => {
                        tracing::warn!(error = %e, "compression stream not created: serving plain text");
                        None
                    }
                },
                None => {
                    WorkerMetrics::inc(&self.shared.metrics[worker].compression_refused);
                    None
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
        });
        let refusal = upgrade_refusal(&head.query);
        wsc.end_session = refusal.is_some();
        conn.state = ConnState::WebSocket(wsc, None);
        conn.deadline_ms = u64::MAX;
        self.queue_flush(key);
        if let Some(close) = refusal {
            self.begin_close(key, Some(close));
        }
    }
}
