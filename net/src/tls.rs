//! Sans-IO TLS server transport over rustls.
//!
//! The socket layer hands received ciphertext to [`TlsSession::receive`] and
//! sends whatever [`TlsSession::take_ciphertext`] produces; no I/O happens here.
//!
//! Every error from a [`TlsSession`] is fatal to the connection: call
//! [`TlsSession::take_ciphertext`] once more to flush any alert rustls queued,
//! send it, then close the socket.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;

use rustls::server::NoServerSessionStorage;
use rustls::{ServerConfig, ServerConnection};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::pem::{self, PemError};

/// ALPN protocols offered by the server.
pub const ALPN_PROTOCOLS: &[&[u8]] = &[b"http/1.1"];

/// Errors of TLS configuration (`File`, `Config`) and of a TLS session
/// (`Protocol`, `Transport`, `TooMuchData`).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read, is not PEM, or holds
    /// no certificate / no private key (the error names the file).
    #[error(transparent)]
    File(#[from] PemError),
    /// rustls refused the certificate chain / key (unsupported key type,
    /// key not matching the certificate, ...).
    #[error("invalid TLS configuration ({context}): {source}")]
    Config {
        context: String,
        #[source]
        source: rustls::Error,
    },
    /// The peer violated the TLS protocol or sent a fatal alert.
    #[error("TLS protocol error: {0}")]
    Protocol(#[source] rustls::Error),
    /// rustls refused to buffer more input or output (backpressure).
    #[error("TLS buffering error: {0}")]
    Transport(#[source] io::Error),
    /// Decrypted data would exceed the caller's `max_plaintext`.
    #[error("received plaintext exceeds the limit of {limit} bytes")]
    TooMuchData { limit: usize },
}

impl TlsError {
    /// `true` for errors of configuration (certificate/key loading), `false`
    /// for errors of a session.
    pub fn is_config(&self) -> bool {
        matches!(self, TlsError::File(_) | TlsError::Config { .. })
    }
}

/// Loads a PEM certificate chain and private key (they may share a file) and
/// builds a server config: ring provider, TLS 1.2 + 1.3, ALPN `http/1.1`.
pub fn load_server_config(
    cert_pem_path: &Path,
    key_pem_path: &Path,
) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = pem::certificates("TLS certificate file", cert_pem_path)?;
    let key = pem::private_key("TLS key file", key_pem_path)?;
    build_config(chain, key).map_err(|source| TlsError::Config {
        context: format!(
            "certificate {}, key {}",
            cert_pem_path.display(),
            key_pem_path.display()
        ),
        source,
    })
}

/// Builds the server config from DER (same settings as [`load_server_config`]).
pub fn server_config_from_der(
    cert_chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, TlsError> {
    build_config(cert_chain, key).map_err(|source| TlsError::Config {
        context: "DER certificate and key".to_owned(),
        source,
    })
}

fn build_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut config =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
    config.alpn_protocols = ALPN_PROTOCOLS.iter().map(|p| p.to_vec()).collect();
    // Share nothing mutable between workers: the default TLS 1.2 session-id
    // cache is a mutex shared by every connection of the config, and TLS 1.3
    // tickets would be stored in it. Resumption is disabled instead.
    config.session_storage = Arc::new(NoServerSessionStorage {});
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// One server-side TLS connection, driven by bytes in and bytes out.
pub struct TlsSession {
    conn: ServerConnection,
    peer_closed: bool,
}

impl TlsSession {
    /// Starts a server handshake.
    ///
    /// rustls's own output buffer limit is lifted so [`Self::write_plaintext`]
    /// never writes partially: the caller bounds memory by draining
    /// [`Self::take_ciphertext`] after each write.
    pub fn new(config: Arc<ServerConfig>) -> Result<Self, TlsError> {
        let mut conn = ServerConnection::new(config).map_err(TlsError::Protocol)?;
        conn.set_buffer_limit(None);
        Ok(TlsSession {
            conn,
            peer_closed: false,
        })
    }

    /// Feeds all of `ciphertext` and appends the decrypted data to
    /// `plaintext_out`, which is never grown beyond `max_plaintext` bytes
    /// (error [`TlsError::TooMuchData`] instead). Bytes after the peer's
    /// close_notify are ignored. Afterwards check [`Self::wants_write`]:
    /// handshake records may be waiting.
    pub fn receive(
        &mut self,
        ciphertext: &[u8],
        plaintext_out: &mut Vec<u8>,
        max_plaintext: usize,
    ) -> Result<(), TlsError> {
        let mut rest = ciphertext;
        loop {
            // Never call read_tls with an empty reader: rustls takes Ok(0) as EOF.
            if !rest.is_empty() {
                match self.conn.read_tls(&mut rest) {
                    // close_notify already received: the rest is ignored.
                    Ok(0) => rest = &[],
                    Ok(_) => {}
                    Err(e) => return Err(TlsError::Transport(e)),
                }
            }
            let state = self
                .conn
                .process_new_packets()
                .map_err(TlsError::Protocol)?;
            self.peer_closed |= state.peer_has_closed();
            let available = state.plaintext_bytes_to_read();
            if available > 0 {
                let start = plaintext_out.len();
                if available > max_plaintext.saturating_sub(start) {
                    return Err(TlsError::TooMuchData {
                        limit: max_plaintext,
                    });
                }
                plaintext_out.resize(start + available, 0);
                if let Err(e) = self.conn.reader().read_exact(&mut plaintext_out[start..]) {
                    plaintext_out.truncate(start);
                    return Err(TlsError::Transport(e));
                }
            }
            if rest.is_empty() && available == 0 {
                return Ok(());
            }
        }
    }

    /// Queues application data (encrypted now, or once the handshake is done).
    pub fn write_plaintext(&mut self, parts: &[&[u8]]) -> Result<(), TlsError> {
        let mut writer = self.conn.writer();
        for part in parts {
            writer.write_all(part).map_err(TlsError::Transport)?;
        }
        Ok(())
    }

    /// Appends every pending TLS record (handshake, alerts, encrypted data) to `out`.
    pub fn take_ciphertext(&mut self, out: &mut Vec<u8>) {
        while self.conn.wants_write() {
            // Writing into a Vec cannot fail.
            match self.conn.write_tls(out) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    /// Whether [`Self::take_ciphertext`] has something to return.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Whether the handshake is still in progress.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Queues a close_notify alert; flush it with [`Self::take_ciphertext`].
    pub fn send_close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// Whether the peer sent close_notify (clean end of its stream).
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Negotiated ALPN protocol, if any.
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// SNI host name sent by the client, if any.
    pub fn server_name(&self) -> Option<&str> {
        self.conn.server_name()
    }
}

impl std::fmt::Debug for TlsSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSession")
            .field("handshaking", &self.conn.is_handshaking())
            .field("wants_write", &self.conn.wants_write())
            .field("peer_closed", &self.peer_closed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;
    use rustls::{ClientConfig, ClientConnection, RootCertStore};
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU32, Ordering};

    const LIMIT: usize = 4 << 20;

    struct Fixture {
        server: Arc<ServerConfig>,
        cert_der: CertificateDer<'static>,
        cert_pem: String,
        key_pem: String,
    }

    fn fixture() -> Fixture {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let cert_der = ck.cert.der().clone();
        let key = PrivateKeyDer::try_from(ck.key_pair.serialize_der()).unwrap();
        let server = server_config_from_der(vec![cert_der.clone()], key).unwrap();
        Fixture {
            server,
            cert_der,
            cert_pem: ck.cert.pem(),
            key_pem: ck.key_pair.serialize_pem(),
        }
    }

    fn client_config(
        cert: &CertificateDer<'static>,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(cert.clone()).unwrap();
        let mut config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_protocol_versions(versions)
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    }

    fn client(f: &Fixture) -> ClientConnection {
        let name = ServerName::try_from("localhost").unwrap();
        ClientConnection::new(client_config(&f.cert_der, rustls::DEFAULT_VERSIONS), name).unwrap()
    }

    /// Feeds `bytes` to the client, returning the plaintext it decrypted.
    fn client_receive(client: &mut ClientConnection, bytes: &[u8]) -> Vec<u8> {
        let mut rest = bytes;
        let mut out = Vec::new();
        loop {
            if !rest.is_empty() {
                client.read_tls(&mut rest).unwrap();
            }
            let st = client.process_new_packets().unwrap();
            let n = st.plaintext_bytes_to_read();
            let start = out.len();
            out.resize(start + n, 0);
            client.reader().read_exact(&mut out[start..]).unwrap();
            if rest.is_empty() && n == 0 {
                return out;
            }
        }
    }

    fn client_take(client: &mut ClientConnection) -> Vec<u8> {
        let mut out = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut out).unwrap();
        }
        out
    }

    /// Pumps both directions until neither side has anything to send,
    /// delivering client bytes in `chunk`-sized pieces.
    fn pump(client: &mut ClientConnection, server: &mut TlsSession, chunk: usize) -> Vec<u8> {
        let mut server_plain = Vec::new();
        for _ in 0..100 {
            let c2s = client_take(client);
            for piece in c2s.chunks(chunk) {
                server.receive(piece, &mut server_plain, LIMIT).unwrap();
            }
            let mut s2c = Vec::new();
            server.take_ciphertext(&mut s2c);
            assert!(client_receive(client, &s2c).is_empty());
            if c2s.is_empty() && s2c.is_empty() {
                return server_plain;
            }
        }
        panic!("handshake did not settle");
    }

    #[test]
    fn tls_handshake_and_data_both_ways() {
        let f = fixture();
        let mut client = client(&f);
        let mut server = TlsSession::new(f.server.clone()).unwrap();
        assert!(server.is_handshaking());
        assert!(pump(&mut client, &mut server, usize::MAX).is_empty());
        assert!(!server.is_handshaking());
        assert!(!client.is_handshaking());
        assert_eq!(server.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(client.alpn_protocol(), Some(&b"http/1.1"[..]));
        assert_eq!(server.server_name(), Some("localhost"));
        assert_eq!(
            client.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_3)
        );

        // client -> server
        client
            .writer()
            .write_all(b"GET / HTTP/1.1\r\n\r\n")
            .unwrap();
        let c2s = client_take(&mut client);
        let mut plain = b"prefix:".to_vec();
        server.receive(&c2s, &mut plain, LIMIT).unwrap();
        assert_eq!(plain, b"prefix:GET / HTTP/1.1\r\n\r\n");

        // server -> client, several parts in one call
        server
            .write_plaintext(&[b"HTTP/1.1 101 ", b"Switching Protocols\r\n\r\n"])
            .unwrap();
        assert!(server.wants_write());
        let mut s2c = Vec::new();
        server.take_ciphertext(&mut s2c);
        assert!(!server.wants_write());
        assert_eq!(
            client_receive(&mut client, &s2c),
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
        );
    }

    #[test]
    fn tls_large_payload_in_pieces() {
        let f = fixture();
        let mut client = client(&f);
        let mut server = TlsSession::new(f.server.clone()).unwrap();
        pump(&mut client, &mut server, usize::MAX);

        let payload: Vec<u8> = (0..(1usize << 20))
            .map(|i| (i.wrapping_mul(31) ^ (i >> 8)) as u8)
            .collect();
        let mut received = Vec::new();
        // Write in uneven pieces, sometimes two parts per call, and deliver
        // the ciphertext to the client in 1000-byte slices (records split).
        let mut pos = 0;
        let mut step = 1;
        while pos < payload.len() {
            let end = (pos + step * 7919).min(payload.len());
            let mid = (pos + end) / 2;
            server
                .write_plaintext(&[&payload[pos..mid], &payload[mid..end]])
                .unwrap();
            pos = end;
            step += 1;
            if step % 3 == 0 || pos == payload.len() {
                let mut s2c = Vec::new();
                server.take_ciphertext(&mut s2c);
                for piece in s2c.chunks(1000) {
                    received.extend(client_receive(&mut client, piece));
                }
            }
        }
        assert_eq!(received.len(), payload.len());
        assert!(received == payload);

        // And 1 MiB client -> server, delivered in 4 KiB slices.
        client.set_buffer_limit(None);
        client.writer().write_all(&payload).unwrap();
        let c2s = client_take(&mut client);
        let mut plain = Vec::new();
        for piece in c2s.chunks(4096) {
            server.receive(piece, &mut plain, LIMIT).unwrap();
        }
        assert!(plain == payload);
    }

    #[test]
    fn tls_byte_by_byte_handshake_and_tls12() {
        let f = fixture();
        let name = ServerName::try_from("localhost").unwrap();
        let config = client_config(&f.cert_der, &[&rustls::version::TLS12]);
        let mut client = ClientConnection::new(config, name).unwrap();
        let mut server = TlsSession::new(f.server.clone()).unwrap();
        pump(&mut client, &mut server, 1);
        assert!(!server.is_handshaking());
        assert_eq!(
            client.protocol_version(),
            Some(rustls::ProtocolVersion::TLSv1_2)
        );
        client.writer().write_all(b"hello over 1.2").unwrap();
        let mut plain = Vec::new();
        for b in client_take(&mut client).chunks(1) {
            server.receive(b, &mut plain, LIMIT).unwrap();
        }
        assert_eq!(plain, b"hello over 1.2");
    }

    #[test]
    fn tls_plaintext_limit() {
        let f = fixture();
        let mut client = client(&f);
        let mut server = TlsSession::new(f.server.clone()).unwrap();
        pump(&mut client, &mut server, usize::MAX);
        client.writer().write_all(&[7u8; 100]).unwrap();
        let c2s = client_take(&mut client);
        let mut plain = vec![0u8; 10];
        let err = server.receive(&c2s, &mut plain, 50).unwrap_err();
        assert!(matches!(err, TlsError::TooMuchData { limit: 50 }), "{err}");
        assert!(!err.is_config());
        assert_eq!(plain.len(), 10, "output not grown on error");
    }

    #[test]
    fn tls_close_notify_both_ways() {
        let f = fixture();
        let mut client = client(&f);
        let mut server = TlsSession::new(f.server.clone()).unwrap();
        pump(&mut client, &mut server, usize::MAX);

        client.writer().write_all(b"last words").unwrap();
        client.send_close_notify();
        let mut c2s = client_take(&mut client);
        c2s.extend_from_slice(b"trailing junk after close_notify is ignored");
        let mut plain = Vec::new();
        assert!(!server.peer_closed());
        server.receive(&c2s, &mut plain, LIMIT).unwrap();
        assert_eq!(plain, b"last words");
        assert!(server.peer_closed());

        server.send_close_notify();
        let mut s2c = Vec::new();
        server.take_ciphertext(&mut s2c);
        assert!(!s2c.is_empty());
        let mut rest = &s2c[..];
        client.read_tls(&mut rest).unwrap();
        assert!(client.process_new_packets().unwrap().peer_has_closed());
    }

    #[test]
    fn tls_garbage_client_hello_is_an_error() {
        let f = fixture();
        let garbage: [&[u8]; 4] = [
            b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
            // handshake record with a bogus ClientHello body
            &[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0xff],
            // record claiming an oversized length
            &[0x16, 0x03, 0x03, 0xff, 0xff, 0x00],
            &[0xff; 64],
        ];
        for bytes in garbage {
            let mut server = TlsSession::new(f.server.clone()).unwrap();
            let mut plain = Vec::new();
            let err = server.receive(bytes, &mut plain, LIMIT).unwrap_err();
            assert!(matches!(err, TlsError::Protocol(_)), "{err}");
            assert!(!err.is_config());
            assert!(plain.is_empty());
            // Flushing the queued alert must not panic either.
            let mut out = Vec::new();
            server.take_ciphertext(&mut out);
            // Further input keeps failing instead of panicking.
            assert!(server.receive(b"more", &mut plain, LIMIT).is_err());
        }
    }

    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static N: AtomicU32 = AtomicU32::new(0);
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let dir = std::env::temp_dir().join(format!(
                "net-tls-test-{}-{}-{}",
                std::process::id(),
                nanos,
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn tls_load_server_config_from_pem_files() {
        let f = fixture();
        let dir = TempDir::new();
        let cert = dir.0.join("cert.pem");
        let key = dir.0.join("key.pem");
        let both = dir.0.join("both.pem");
        std::fs::write(&cert, &f.cert_pem).unwrap();
        std::fs::write(&key, &f.key_pem).unwrap();
        std::fs::write(&both, format!("{}{}", f.cert_pem, f.key_pem)).unwrap();

        for (c, k) in [(&cert, &key), (&both, &both)] {
            let config = load_server_config(c, k).unwrap();
            assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
            let mut server = TlsSession::new(config).unwrap();
            let mut client = client(&f);
            pump(&mut client, &mut server, usize::MAX);
            assert!(!server.is_handshaking());
        }

        // Missing file: names the file.
        let missing = dir.0.join("missing.pem");
        let err = load_server_config(&missing, &key).unwrap_err();
        assert!(matches!(
            err,
            TlsError::File(PemError::Read {
                what: "TLS certificate file",
                ..
            })
        ));
        assert!(err.is_config());
        let msg = err.to_string();
        assert!(
            msg.contains("missing.pem") && msg.contains("certificate"),
            "{msg}"
        );
        let err = load_server_config(&cert, &missing).unwrap_err();
        assert!(
            matches!(
                err,
                TlsError::File(PemError::Read {
                    what: "TLS key file",
                    ..
                })
            ),
            "{err}"
        );

        // Key file without a key.
        let err = load_server_config(&cert, &cert).unwrap_err();
        assert!(
            matches!(err, TlsError::File(PemError::NoPrivateKey { .. })),
            "{err}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("cert.pem") && msg.contains("no private key"),
            "{msg}"
        );

        // Certificate file without a certificate.
        let err = load_server_config(&key, &key).unwrap_err();
        assert!(
            matches!(err, TlsError::File(PemError::NoCertificate { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("key.pem"));

        // Broken PEM.
        let broken = dir.0.join("broken.pem");
        std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\nnot base64!!\n").unwrap();
        let err = load_server_config(&broken, &key).unwrap_err();
        assert!(matches!(err, TlsError::File(PemError::Pem { .. })), "{err}");
        assert!(err.to_string().contains("broken.pem"));

        // Key that does not match the certificate.
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let other_key = dir.0.join("other-key.pem");
        std::fs::write(&other_key, other.key_pair.serialize_pem()).unwrap();
        let err = load_server_config(&cert, &other_key).unwrap_err();
        assert!(matches!(err, TlsError::Config { .. }), "{err}");
        assert!(err.to_string().contains("other-key.pem"));
    }
}
