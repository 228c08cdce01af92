//! The socket under the RESP client (`link::resp`): plain TCP for
//! `redis://`, rustls (ring) for `rediss://`. Verification is always on
//! for `rediss://`: the chain to the `ca=` PEM file of the URL (else the
//! Mozilla roots compiled in, webpki-roots) and the URL's host (a DNS
//! name, or an IP address the certificate lists as an IP SAN).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Stream {
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => &s.sock,
        }
    }

    /// Bounds the next socket operations by `deadline` (both directions:
    /// a TLS read may write, and a write may read).
    pub(crate) fn bound(&self, deadline: Instant) -> io::Result<()> {
        let d = left(deadline)?;
        self.tcp().set_read_timeout(Some(d))?;
        self.tcp().set_write_timeout(Some(d))
    }

    /// Makes the TLS session on `tcp` with `host`, by `deadline`.
    pub(crate) fn tls(
        tcp: TcpStream,
        host: &str,
        ca: Option<&Path>,
        deadline: Instant,
    ) -> io::Result<Stream> {
        let invalid = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| invalid(format!("redis: TLS server name {host:?}: {e}")))?;
        let mut conn = ClientConnection::new(config(ca)?, name)
            .map_err(|e| invalid(format!("redis: TLS: {e}")))?;
        let mut tcp = tcp;
        while conn.is_handshaking() {
            let d = left(deadline)?;
            tcp.set_read_timeout(Some(d))?;
            tcp.set_write_timeout(Some(d))?;
            if let Err(e) = conn.complete_io(&mut tcp) {
                return Err(handshake_failed(e));
            }
        }
        Ok(Stream::Tls(Box::new(StreamOwned::new(conn, tcp))))
    }
}

/// Names a certificate rustls rejected "certificate verify failed".
fn handshake_failed(e: io::Error) -> io::Error {
    let cert = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        });
    let e = timed_out(e);
    if cert {
        io::Error::new(
            e.kind(),
            VerifyFailed(format!("redis: TLS certificate verify failed: {e}")),
        )
    } else {
        io::Error::new(e.kind(), format!("redis: TLS handshake failed: {e}"))
    }
}

/// The server's certificate did not verify (a configuration fault, not an
/// outage: see [`is_verify_failure`]).
#[derive(Debug)]
struct VerifyFailed(String);

impl std::fmt::Display for VerifyFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for VerifyFailed {}

/// Whether `e` (from `Conn::connect`) says the server's certificate did
/// not verify.
pub fn is_verify_failure(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<VerifyFailed>())
}

/// The client configuration: read at each connection (a replaced CA file
/// is picked up at the next reconnect).
fn config(ca: Option<&Path>) -> io::Result<Arc<ClientConfig>> {
    let roots = match ca {
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
        Some(path) => net::pem::root_store("CA file", path)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("redis: {e}")))?,
    };
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| io::Error::other(format!("redis: TLS: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

pub(super) fn left(deadline: Instant) -> io::Result<Duration> {
    let d = deadline.saturating_duration_since(Instant::now());
    if d.is_zero() {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "redis: deadline passed",
        ));
    }
    Ok(d)
}

/// A socket timeout reads as WouldBlock on Linux: say what it is.
pub(super) fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "redis: deadline passed")
    } else {
        e
    }
}
