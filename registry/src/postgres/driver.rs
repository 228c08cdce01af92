//! How a call reaches the server: a current-thread tokio runtime on the
//! calling thread, and [`drive`], which polls one request, the connection
//! beside it and the call's deadline together, so a request never waits
//! past its deadline (a frozen server costs the deadline, not a hang).

use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Instant;

use tokio::runtime::Runtime;
use tokio_postgres::{Client, Config, Connection, Socket};

use super::fault::deadline_passed;
use super::tls::{self, MakeRustls, RustlsStream, TlsSettings};
use crate::{error::RegistryError, error::Result};

/// The tokio-postgres connection half: the socket, polled while a statement
/// waits. Dropping it closes the socket.
pub(super) type PgConnection = Connection<Socket, RustlsStream>;

/// Why a statement did not complete.
pub(super) enum Stop {
    /// The server answered with an error, or the request failed.
    Pg(tokio_postgres::Error),
    /// The connection ended (closed by the server, an I/O error).
    Ended(Option<tokio_postgres::Error>),
    /// The call's deadline passed first.
    Deadline,
}

/// Runs `fut` (a request on `connection`'s client) on `rt`, polling the
/// connection beside it, until it completes, the connection ends, or
/// `deadline` passes, whichever is first.
pub(super) fn drive<T>(
    rt: &Runtime,
    connection: &mut PgConnection,
    deadline: Instant,
    fut: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> std::result::Result<T, Stop> {
    rt.block_on(async {
        let mut fut = pin!(fut);
        let mut sleep = pin!(tokio::time::sleep_until(deadline.into()));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                return Poll::Ready(r.map_err(Stop::Pg));
            }
            if let Poll::Ready(r) = Pin::new(&mut *connection).poll(cx) {
                return Poll::Ready(Err(Stop::Ended(r.err())));
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(Stop::Deadline));
            }
            Poll::Pending
        })
        .await
    })
}

/// Connects within `deadline` (TCP, startup, authentication).
pub(super) fn connect_by(
    rt: &Runtime,
    config: &Config,
    tls: &TlsSettings,
    deadline: Instant,
) -> Result<(Client, PgConnection)> {
    // Read at every (re)connection: a replaced `sslrootcert` is picked up.
    let make = MakeRustls(tls::client_config(tls)?);
    // The timer is made inside the runtime (it needs its time driver).
    let attempt =
        rt.block_on(async { tokio::time::timeout_at(deadline.into(), config.connect(make)).await });
    match attempt {
        Ok(r) => Ok(r?),
        Err(_) => Err(deadline_passed("connecting")),
    }
}

/// A current-thread runtime for one registry or listener: it runs only
/// inside our `block_on` calls, on the calling thread.
pub(super) fn runtime() -> Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(RegistryError::Io)
}
