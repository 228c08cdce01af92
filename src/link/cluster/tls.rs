//! Mutual TLS on the link (docs/cluster.md, "Mutual TLS on the link").
//! With `cluster.tls_cert`/`tls_key`/`tls_ca` set, the listener accepts
//! only connections whose client certificate chains to the cluster CA (with
//! the clientAuth EKU), and every dial presents this node's certificate and
//! checks the peer's against the same CA, with the peer's advertised IP
//! address as the name (an IP SAN, serverAuth EKU). A node is a holder of a
//! certificate of the cluster CA naming its advertised link address.
//!
//! The configs are re-read (SIGHUP, or the files' modification times on a
//! timer): each new connection takes the current pair; connections open
//! keep theirs. A reload that fails keeps the old pair.
//!
//! Each handshake is under the caller's deadline (the hand-off's).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Instant, SystemTime};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, RootCertStore, ServerConfig,
    ServerConnection, SideData, StreamOwned,
};

/// Why a connection to our link was refused at the handshake, as counted
/// (`gatewayd_cluster_link_refused_total{reason}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A TLS client that presented no certificate.
    NoClientCert,
    /// A certificate that does not verify: another CA, expired, wrong EKU.
    BadCert,
    /// Not TLS at all (plaintext to a TLS link).
    NotTls,
    /// No whole handshake within the hand-off deadline.
    HandshakeTimeout,
    /// Anything else (closed mid-handshake, a protocol error).
    Other,
}

impl Refusal {
    pub const ALL: [Refusal; 5] = [
        Refusal::NoClientCert,
        Refusal::BadCert,
        Refusal::NotTls,
        Refusal::HandshakeTimeout,
        Refusal::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoClientCert => "no_client_cert",
            Refusal::BadCert => "bad_cert",
            Refusal::NotTls => "not_tls",
            Refusal::HandshakeTimeout => "handshake_timeout",
            Refusal::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    fn of(e: &io::Error) -> Refusal {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            return Refusal::HandshakeTimeout;
        }
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(rustls::Error::NoCertificatesPresented) => Refusal::NoClientCert,
            Some(rustls::Error::InvalidCertificate(_)) => Refusal::BadCert,
            Some(rustls::Error::InvalidMessage(_)) => Refusal::NotTls,
            _ => Refusal::Other,
        }
    }
}

/// One link connection, plain or TLS, either side: the serving and dialing
/// code reads and writes it the same way.
pub enum Link {
    Plain(TcpStream),
    Server(Box<StreamOwned<ServerConnection, TcpStream>>),
    Client(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Link {
    /// The socket (for its timeouts).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Link::Plain(s) => s,
            Link::Server(s) => s.get_ref(),
            Link::Client(s) => s.get_ref(),
        }
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.read(buf),
            Link::Server(s) => s.read(buf),
            Link::Client(s) => s.read(buf),
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write(buf),
            Link::Server(s) => s.write(buf),
            Link::Client(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Link::Plain(s) => s.flush(),
            Link::Server(s) => s.flush(),
            Link::Client(s) => s.flush(),
        }
    }
}

/// The PEM files of the link's TLS.
#[derive(Clone, Debug)]
pub struct Paths {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

struct Configs {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
}

/// The link's current TLS configs (re-read by `reload`).
pub struct LinkTls {
    paths: Paths,
    configs: RwLock<Arc<Configs>>,
    /// The files' (modification time, length) when last loaded.
    stamps: Mutex<Vec<Option<(SystemTime, u64)>>>,
}

/// The link's TLS, if configured.
pub type Tls = Option<Arc<LinkTls>>;

impl LinkTls {
    pub fn load(paths: Paths) -> Result<LinkTls, String> {
        let stamps = stamps(&paths);
        let configs = build(&paths)?;
        Ok(LinkTls {
            paths,
            configs: RwLock::new(Arc::new(configs)),
            stamps: Mutex::new(stamps),
        })
    }

    fn current(&self) -> Arc<Configs> {
        self.configs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Re-read the files (all three; none half). On failure the old configs
    /// stay.
    pub fn reload(&self) -> Result<(), String> {
        let now = stamps(&self.paths);
        let configs = build(&self.paths)?;
        *self.configs.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(configs);
        *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) = now;
        Ok(())
    }

    /// Re-read the files if any changed since the last load (Ok(false): none did).
    pub fn reload_if_changed(&self) -> Result<bool, String> {
        let now = stamps(&self.paths);
        if *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) == now {
            return Ok(false);
        }
        match self.reload() {
            Ok(()) => Ok(true),
            Err(e) => {
                // Not again until a file changes once more.
                *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) = now;
                Err(e)
            }
        }
    }
}

fn stamps(p: &Paths) -> Vec<Option<(SystemTime, u64)>> {
    [&p.cert, &p.key, &p.ca]
        .iter()
        .map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

fn read(what: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cluster TLS {what} {}: {e}", path.display()))
}

fn certs(what: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(what, path)?;
    let list = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cluster TLS {what} {}: {e}", path.display()))?;
    if list.is_empty() {
        return Err(format!(
            "cluster TLS {what} {}: no PEM CERTIFICATE in it",
            path.display()
        ));
    }
    Ok(list)
}

fn build(p: &Paths) -> Result<Configs, String> {
    let chain = certs("certificate", &p.cert)?;
    let key_pem = read("key", &p.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("cluster TLS key {}: {e}", p.key.display()))?;
    let mut roots = RootCertStore::empty();
    for ca in certs("CA", &p.ca)? {
        roots
            .add(ca)
            .map_err(|e| format!("cluster TLS CA {}: {e}", p.ca.display()))?;
    }
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone())
        .build()
        .map_err(|e| format!("cluster TLS CA {}: {e}", p.ca.display()))?;
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(|e| format!("cluster TLS certificate and key: {e}"))?;
    // One request per connection: no resumption tickets to send.
    server.send_tls13_tickets = 0;
    let client = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| format!("cluster TLS certificate and key: {e}"))?;
    Ok(Configs {
        server: Arc::new(server),
        client: Arc::new(client),
    })
}

/// Drive `conn`'s handshake on `sock`, every read and write before `deadline`.
fn handshake<S: SideData>(
    conn: &mut ConnectionCommon<S>,
    sock: &mut TcpStream,
    deadline: Instant,
) -> io::Result<()> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(io::Error::from(io::ErrorKind::TimedOut))
    };
    while conn.is_handshaking() {
        let d = left()?;
        sock.set_read_timeout(Some(d))?;
        sock.set_write_timeout(Some(d))?;
        conn.complete_io(sock)?;
    }
    while conn.wants_write() {
        sock.set_write_timeout(Some(left()?))?;
        conn.write_tls(sock)?;
    }
    Ok(())
}

/// A connection to our listener: with TLS on, its handshake (before
/// `deadline`); anything refused is closed here, having touched nothing.
pub fn accept(
    tls: Option<&LinkTls>,
    mut sock: TcpStream,
    deadline: Instant,
) -> Result<Link, Refusal> {
    let Some(tls) = tls else {
        return Ok(Link::Plain(sock));
    };
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(Refusal::HandshakeTimeout)?;
    let _ = sock.set_read_timeout(Some(left));
    // A TLS connection opens with a handshake record (content type 22).
    let mut first = [0u8; 1];
    match sock.peek(&mut first) {
        Ok(0) => return Err(Refusal::Other),
        Ok(_) if first[0] != 0x16 => return Err(Refusal::NotTls),
        Ok(_) => {}
        Err(e) => return Err(Refusal::of(&e)),
    }
    let mut conn = ServerConnection::new(tls.current().server.clone()).map_err(|e| {
        tracing::warn!(error = %e, "cluster link: TLS session");
        Refusal::Other
    })?;
    handshake(&mut conn, &mut sock, deadline).map_err(|e| Refusal::of(&e))?;
    Ok(Link::Server(Box::new(StreamOwned::new(conn, sock))))
}

/// Dial the node at `addr` (its advertised link address, which its
/// certificate must name as an IP SAN), connect and handshake before
/// `deadline`.
pub fn dial(tls: Option<&LinkTls>, addr: SocketAddr, deadline: Instant) -> io::Result<Link> {
    let left = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(io::Error::from(io::ErrorKind::TimedOut))?;
    let mut sock = TcpStream::connect_timeout(&addr, left)?;
    let _ = sock.set_nodelay(true);
    let Some(tls) = tls else {
        return Ok(Link::Plain(sock));
    };
    let name = ServerName::IpAddress(addr.ip().into());
    let mut conn =
        ClientConnection::new(tls.current().client.clone(), name).map_err(io::Error::other)?;
    handshake(&mut conn, &mut sock, deadline)?;
    Ok(Link::Client(Box::new(StreamOwned::new(conn, sock))))
}

/// Whether a dial failed at the TLS handshake rather than at connect.
pub fn is_handshake_error(e: &io::Error) -> bool {
    e.get_ref()
        .is_some_and(|i| i.downcast_ref::<rustls::Error>().is_some())
}

/// The "cluster-tls" thread: re-read the certificates on SIGHUP (`hup`) and
/// when their files change (looked at every `every`), until `stop`.
pub(super) fn reloader(
    tls: &LinkTls,
    hup: &std::sync::atomic::AtomicBool,
    every: std::time::Duration,
    stats: &super::ClusterStats,
    stop: &std::sync::atomic::AtomicBool,
) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut last = Instant::now();
    while !stop.load(Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let forced = hup.swap(false, Relaxed);
        if !forced && last.elapsed() < every {
            continue;
        }
        last = Instant::now();
        let outcome = if forced {
            tls.reload().map(|()| true)
        } else {
            tls.reload_if_changed()
        };
        match outcome {
            Ok(false) => {}
            Ok(true) => {
                stats.tls_reloads.fetch_add(1, Relaxed);
                tracing::info!(sighup = forced, "cluster link: certificates reloaded");
            }
            Err(e) => {
                stats.tls_reload_failures.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "cluster link: reloading the certificates failed; the old ones stay");
            }
        }
    }
}
