//! A TLS-terminating front for a plaintext TCP server, for the tests of a
//! client's TLS against a server that cannot serve TLS itself (Tansu 0.6
//! accepts `--cert`/`--key` and serves plaintext: tests/kafka_tls.rs). Real
//! TLS (rustls), one runtime thread, each accepted connection relayed to
//! `target` once its handshake is done. With `client_ca`, a client must
//! present a certificate chaining to it (as a broker with
//! `ssl.client.auth=required` does).

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct TlsFront {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A loopback listener bound now, so its port can be advertised before the
/// server behind it starts.
pub fn bind() -> TcpListener {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

impl TlsFront {
    /// Serve TLS on `listener` with `cert`/`key` (PEM), relaying to `target`.
    pub fn start(
        listener: TcpListener,
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        target: SocketAddr,
    ) -> TlsFront {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = match client_ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in CertificateDer::pem_file_iter(ca).unwrap() {
                    roots.add(c.unwrap()).unwrap();
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.into(),
                    provider,
                )
                .build()
                .unwrap();
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = Arc::new(builder.with_single_cert(chain, key).unwrap());
        let addr = listener.local_addr().unwrap();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let acceptor = tokio_rustls::TlsAcceptor::from(config);
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let (tcp, _) = tokio::select! {
                        got = listener.accept() => match got {
                            Ok(c) => c,
                            Err(_) => continue,
                        },
                        _ = &mut rx => return,
                    };
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        // A refused handshake just ends the connection.
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let Ok(mut back) = tokio::net::TcpStream::connect(target).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut back).await;
                    });
                }
            });
        });
        TlsFront {
            addr,
            stop: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
