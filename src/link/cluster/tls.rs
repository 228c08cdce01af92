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
//! Each connection is under ONE deadline, its caller's (the hand-off's):
//! every socket read and write under it, the handshake's included, waits
//! at most what is left of it (`Timed`). Re-arming a per-read timeout was
//! not enough: a ClientHello sent a byte every 0.3 s kept its connection
//! past 60 s, since rustls reads until a handshake message is whole
//! (issue 41).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Instant, SystemTime};

use net::pem;
use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, ClientConnection, ConnectionCommon, ServerConfig, ServerConnection, SideData,
    StreamOwned,
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
    /// Not let in: as many connections as the link takes are between
    /// accept and a whole request, in all or from its source address.
    Crowded,
}

impl Refusal {
    pub const ALL: [Refusal; 6] = [
        Refusal::NoClientCert,
        Refusal::BadCert,
        Refusal::NotTls,
        Refusal::HandshakeTimeout,
        Refusal::Other,
        Refusal::Crowded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::NoClientCert => "no_client_cert",
            Refusal::BadCert => "bad_cert",
            Refusal::NotTls => "not_tls",
            Refusal::HandshakeTimeout => "handshake_timeout",
            Refusal::Other => "other",
            Refusal::Crowded => "crowded",
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

/// A socket whose every read and write ends by one deadline: each waits
/// at most what is left, and none starts once it has passed (TimedOut).
pub struct Timed {
    sock: TcpStream,
    deadline: Instant,
}

impl Timed {
    pub fn new(sock: TcpStream, deadline: Instant) -> Timed {
        Timed { sock, deadline }
    }

    fn left(&self) -> io::Result<std::time::Duration> {
        self.deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or(io::Error::from(io::ErrorKind::TimedOut))
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.sock.set_read_timeout(Some(self.left()?))?;
        self.sock.read(buf)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sock.set_write_timeout(Some(self.left()?))?;
        self.sock.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// One link connection, plain or TLS, either side: the serving and dialing
/// code reads and writes it the same way, all of it by one deadline.
pub enum Link {
    Plain(Timed),
    Server(Box<StreamOwned<ServerConnection, Timed>>),
    Client(Box<StreamOwned<ClientConnection, Timed>>),
}

impl Link {
    fn timed(&self) -> &Timed {
        match self {
            Link::Plain(s) => s,
            Link::Server(s) => s.get_ref(),
            Link::Client(s) => s.get_ref(),
        }
    }

    /// The socket (for its timeouts).
    pub fn tcp(&self) -> &TcpStream {
        &self.timed().sock
    }

    /// The deadline every read and write ends by.
    pub fn deadline(&self) -> Instant {
        self.timed().deadline
    }

    /// Moves the deadline (earlier or later) for what follows.
    pub fn set_deadline(&mut self, deadline: Instant) {
        match self {
            Link::Plain(s) => s.deadline = deadline,
            Link::Server(s) => s.get_mut().deadline = deadline,
            Link::Client(s) => s.get_mut().deadline = deadline,
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

fn build(p: &Paths) -> Result<Configs, String> {
    let chain = pem::certificates("cluster TLS certificate", &p.cert).map_err(|e| e.to_string())?;
    let key = pem::private_key("cluster TLS key", &p.key).map_err(|e| e.to_string())?;
    let roots = Arc::new(pem::root_store("cluster TLS CA", &p.ca).map_err(|e| e.to_string())?);
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

/// Drive `conn`'s handshake on `sock` to its end, by `sock`'s deadline
/// (every read and write it makes is `Timed`).
fn handshake<S: SideData>(conn: &mut ConnectionCommon<S>, sock: &mut Timed) -> io::Result<()> {
    while conn.is_handshaking() {
        conn.complete_io(sock)?;
    }
    while conn.wants_write() {
        conn.write_tls(sock)?;
    }
    Ok(())
}

/// A connection to our listener: with TLS on, its handshake (before
/// `deadline`); anything refused is closed here, having touched nothing.
pub fn accept(tls: Option<&LinkTls>, sock: TcpStream, deadline: Instant) -> Result<Link, Refusal> {
    let Some(tls) = tls else {
        return Ok(Link::Plain(Timed::new(sock, deadline)));
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
    let mut sock = Timed::new(sock, deadline);
    handshake(&mut conn, &mut sock).map_err(|e| Refusal::of(&e))?;
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
    let sock = TcpStream::connect_timeout(&addr, left)?;
    let _ = sock.set_nodelay(true);
    let mut sock = Timed::new(sock, deadline);
    let Some(tls) = tls else {
        return Ok(Link::Plain(sock));
    };
    let name = ServerName::IpAddress(addr.ip().into());
    let mut conn =
        ClientConnection::new(tls.current().client.clone(), name).map_err(io::Error::other)?;
    handshake(&mut conn, &mut sock)?;
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
    stats: &super::stats::ClusterStats,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::path::Path;
    use std::time::Duration;

    /// A CA and a node certificate for 127.0.0.1 (serverAuth+clientAuth)
    /// in `dir`, as `gatewayd cert` makes them.
    fn certs(dir: &Path) -> Paths {
        use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa};
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.subject_alt_names = vec![rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap())];
        p.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
        let cert = p.signed_by(&key, &ca, &ca_key).unwrap();
        let paths = Paths {
            cert: dir.join("node.pem"),
            key: dir.join("node.key"),
            ca: dir.join("ca.pem"),
        };
        std::fs::write(&paths.cert, cert.pem()).unwrap();
        std::fs::write(&paths.key, key.serialize_pem()).unwrap();
        std::fs::write(&paths.ca, ca.pem()).unwrap();
        paths
    }

    /// Serve `n` connections: handshake, then echo one byte.
    fn echo(tls: Tls, n: usize) -> (SocketAddr, std::thread::JoinHandle<Vec<Option<Refusal>>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            (0..n)
                .map(|_| {
                    let (s, _) = l.accept().unwrap();
                    let deadline = Instant::now() + Duration::from_millis(500);
                    match accept(tls.as_deref(), s, deadline) {
                        Ok(mut link) => {
                            let mut b = [0u8; 1];
                            if link.read_exact(&mut b).is_ok() {
                                let _ = link.write_all(&b).and_then(|_| link.flush());
                            }
                            None
                        }
                        Err(why) => Some(why),
                    }
                })
                .collect()
        });
        (addr, t)
    }

    fn round(tls: Option<&LinkTls>, addr: SocketAddr) -> io::Result<Duration> {
        let start = Instant::now();
        let mut s = dial(tls, addr, Instant::now() + Duration::from_secs(2))?;
        s.write_all(b"x")?;
        s.flush()?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b)?;
        Ok(start.elapsed())
    }

    /// Connect, handshake and one round trip, plain and TLS, on loopback
    /// (`cargo test --lib link::cluster::tls -- --nocapture` prints the
    /// medians: docs/cluster.md's figure for a hand-off's added latency).
    #[test]
    fn a_tls_round_trip_and_what_the_handshake_costs() {
        let dir = tempfile::tempdir().unwrap();
        let tls = Arc::new(LinkTls::load(certs(dir.path())).unwrap());
        const N: usize = 100;
        let times = |tls: Tls| {
            let (addr, t) = echo(tls.clone(), N);
            let mut d: Vec<Duration> = (0..N)
                .map(|_| round(tls.as_deref(), addr).unwrap())
                .collect();
            assert!(t.join().unwrap().iter().all(Option::is_none));
            d.sort();
            (d[N / 2], d[N * 99 / 100])
        };
        let plain = times(None);
        let with_tls = times(Some(tls.clone()));
        println!("connect + round trip, median / p99: plain {plain:?}, mutual TLS {with_tls:?}");
        assert!(with_tls.0 < Duration::from_millis(500));
    }

    #[test]
    fn plaintext_and_silence_are_refused_and_a_reload_keeps_serving() {
        let dir = tempfile::tempdir().unwrap();
        let paths = certs(dir.path());
        let tls = Arc::new(LinkTls::load(paths.clone()).unwrap());
        let (addr, t) = echo(Some(tls.clone()), 3);
        // Plaintext.
        assert!(round(None, addr).is_err());
        // Silence past the deadline.
        let silent = TcpStream::connect(addr).unwrap();
        std::thread::sleep(Duration::from_millis(700));
        drop(silent);
        // Unchanged files: nothing reloaded; a broken file: refused, the
        // old configs serve on.
        assert_eq!(tls.reload_if_changed(), Ok(false));
        std::fs::write(&paths.cert, "junk, and longer than before: a change").unwrap();
        assert!(tls.reload_if_changed().is_err());
        assert_eq!(
            tls.reload_if_changed(),
            Ok(false),
            "not retried until it changes"
        );
        round(Some(&tls), addr).unwrap();
        assert_eq!(
            t.join().unwrap(),
            [Some(Refusal::NotTls), Some(Refusal::HandshakeTimeout), None]
        );
    }

    /// The dialer checks the address it dials against the certificate's IP
    /// SAN: a node answering at 127.0.0.2 with 127.0.0.1's certificate is
    /// refused by the dialer.
    #[test]
    fn a_certificate_for_another_address_is_refused_by_the_dialer() {
        let dir = tempfile::tempdir().unwrap();
        let tls = Arc::new(LinkTls::load(certs(dir.path())).unwrap());
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = tls.clone();
        let t = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            accept(Some(&server), s, Instant::now() + Duration::from_secs(1)).err()
        });
        let e = round(Some(&tls), addr).unwrap_err();
        assert!(is_handshake_error(&e), "{e}");
        assert!(e.to_string().contains("not valid for name"), "{e}");
        assert_eq!(
            t.join().unwrap(),
            Some(Refusal::Other),
            "the dialer's alert"
        );
    }
}
