//! [`RevocationListener`]: follows the revocation outbox's pushes
//! (`LISTEN` on [`REVOCATION_CHANNEL`]) on a connection of its own. The
//! outbox rows are written, and notified at their commit, by
//! `crate::postgres::outbox`.

use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio_postgres::{AsyncMessage, Client, Config};

use super::driver::{connect_by, drive, runtime, PgConnection, Stop};
use super::fault::deadline_passed;
use super::tls::TlsSettings;
use crate::{error::RegistryError, error::Result};

/// The LISTEN/NOTIFY channel; the payload is the outbox id in decimal.
pub const REVOCATION_CHANNEL: &str = "gatewayd_revocations";

/// Follows [`REVOCATION_CHANNEL`] on its own connection (`LISTEN`).
///
/// Pushes are a latency optimisation, not the record: the outbox is. A node
/// starts with `LISTEN` (open the listener), then reads
/// [`Registry::last_revocation_id`](crate::api::Registry::last_revocation_id)
/// or catches up with
/// [`Registry::revocations_since`](crate::api::Registry::revocations_since),
/// then applies each pushed id by reading the outbox from its last applied
/// id. Pushes sent while the listener is disconnected are lost: after
/// [`wait`](Self::wait) returns an error, the next `wait` reconnects (and
/// re-`LISTEN`s) before waiting, and the first `Ok` after an error is the
/// moment to catch up from the outbox.
pub struct RevocationListener {
    config: Config,
    tls: TlsSettings,
    /// Bounds a (re)connection: TCP, startup and `LISTEN`.
    connect_timeout: Duration,
    rt: Runtime,
    link: Option<(Client, PgConnection)>,
}

impl std::fmt::Debug for RevocationListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevocationListener")
            .field("connected", &self.link.is_some())
            .finish()
    }
}

impl RevocationListener {
    pub(super) fn open(
        config: Config,
        tls: TlsSettings,
        connect_timeout: Duration,
    ) -> Result<Self> {
        let mut l = Self {
            config,
            tls,
            connect_timeout,
            rt: runtime()?,
            link: None,
        };
        l.connect()?;
        Ok(l)
    }

    fn connect(&mut self) -> Result<&mut (Client, PgConnection)> {
        let deadline = Instant::now() + self.connect_timeout;
        let (client, mut connection) = connect_by(&self.rt, &self.config, &self.tls, deadline)?;
        let listen = format!("LISTEN {REVOCATION_CHANNEL}");
        match drive(
            &self.rt,
            &mut connection,
            deadline,
            client.batch_execute(&listen),
        ) {
            Ok(()) => Ok(self.link.insert((client, connection))),
            Err(Stop::Pg(e)) | Err(Stop::Ended(Some(e))) => Err(e.into()),
            Err(Stop::Ended(None)) => Err(RegistryError::Unavailable(
                "revocation listener: connection closed during LISTEN".into(),
            )),
            Err(Stop::Deadline) => Err(deadline_passed("LISTEN")),
        }
    }

    /// The next pushed outbox id, or None when `timeout` passes without one.
    /// Ids already pushed are returned at once, in commit order. An error
    /// means the connection broke (see the type's docs). A (re)connection
    /// first is bounded by the listener's connect timeout, so a call never
    /// blocks longer than that plus `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<u64>> {
        let deadline = Instant::now() + timeout;
        if self.link.as_ref().is_some_and(|(c, _)| c.is_closed()) {
            self.link = None;
        }
        if self.link.is_none() {
            self.connect()?;
        }
        let (_, connection) = self.link.as_mut().expect("connected above");
        loop {
            let next = self.rt.block_on(async {
                let message = std::future::poll_fn(|cx| connection.poll_message(cx));
                tokio::time::timeout_at(deadline.into(), message).await
            });
            match next {
                Err(_) => return Ok(None),
                Ok(Some(Ok(AsyncMessage::Notification(n)))) => {
                    if n.channel() != REVOCATION_CHANNEL {
                        continue;
                    }
                    match n.payload().parse::<u64>() {
                        Ok(id) => return Ok(Some(id)),
                        // Not ours (someone NOTIFYs by hand): keep waiting.
                        Err(_) => continue,
                    }
                }
                // Notices and anything newer: not for us.
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(e))) => {
                    self.link = None;
                    return Err(e.into());
                }
                Ok(None) => {
                    self.link = None;
                    return Err(RegistryError::Unavailable(
                        "revocation listener: connection closed".into(),
                    ));
                }
            }
        }
    }
}
