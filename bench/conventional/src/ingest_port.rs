//! The ingest port: accepts producer connections and reads their framed
//! records (the `ingest` crate's `FrameReader`), parses each record's `d`
//! once into an [`Event`] and broadcasts it on its server's channel. A
//! fatal framing error ends that connection; a bad record is counted and
//! skipped; a record for a server not served is counted and dropped.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

use crate::state::{BoxErr, Event, Payload, State};

pub async fn ingest_accept(l: TcpListener, st: Arc<State>) {
    loop {
        match l.accept().await {
            Ok((sock, peer)) => {
                let st = st.clone();
                tokio::spawn(async move {
                    if let Err(e) = ingest_conn(sock, &st).await {
                        eprintln!("conventional-gateway: ingest {peer}: {e}");
                    }
                });
            }
            Err(e) => {
                eprintln!("conventional-gateway: ingest accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

async fn ingest_conn(mut sock: TcpStream, st: &State) -> Result<(), BoxErr> {
    let mut reader = ingest::FrameReader::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = sock.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        reader.push(&buf[..n]);
        while let Some(r) = reader.next() {
            let rec = match r {
                Ok(rec) => rec,
                Err(e) if e.is_fatal() => {
                    return Err(format!("fatal record: {}", e.reason()).into())
                }
                Err(_) => {
                    st.metrics.ingest_errors.fetch_add(1, Relaxed);
                    continue;
                }
            };
            let t = rec.event_type();
            let d = if t == "MESSAGE_CREATE" || t == "MESSAGE_UPDATE" {
                serde_json::from_slice(rec.d()).map(|m| Payload::Message(Box::new(m)))
            } else {
                serde_json::from_slice(rec.d()).map(Payload::Other)
            };
            let d = match d {
                Ok(d) => d,
                Err(_) => {
                    st.metrics.ingest_errors.fetch_add(1, Relaxed);
                    continue;
                }
            };
            let ev = Event {
                t: rec.event_type().to_string(),
                guild_id: rec.server_id(),
                channel_id: rec.channel_id(),
                intent: rec.intent(),
                permissions: rec.permissions(),
                has_content: rec.has_content(),
                mentions: rec.mentions().iter().map(|m| m.to_native()).collect(),
                d,
            };
            st.metrics.events_in.fetch_add(1, Relaxed);
            let Some(tx) = st.servers.get(&ev.guild_id) else {
                st.metrics.unknown_server_events.fetch_add(1, Relaxed);
                continue;
            };
            // Err only when no session is subscribed: nobody to deliver to.
            let _ = tx.send(Arc::new(ev));
        }
    }
}
