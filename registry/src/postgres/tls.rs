//! TLS to PostgreSQL: libpq's `sslmode` and `sslrootcert`, over rustls
//! (ring), as a small [`MakeTlsConnect`] for tokio-postgres.
//!
//! tokio-postgres parses `sslmode` itself but knows only `disable`,
//! `prefer` and `require`; [`split_url`] takes `sslmode` and `sslrootcert`
//! out of the URL (or `key=value` string) first and hands the rest on.
//!
//! | sslmode       | encrypted            | certificate checked                       |
//! |---------------|----------------------|-------------------------------------------|
//! | `disable`     | no                   | —                                         |
//! | `prefer` (default) | if the server offers TLS | no                               |
//! | `require`     | yes (else refused)   | no (with `sslrootcert`: as `verify-ca`, like libpq) |
//! | `verify-ca`   | yes                  | chains to the roots                        |
//! | `verify-full` | yes                  | chains to the roots and names the URL host |
//!
//! Roots: the PEM file `sslrootcert` names, else the Mozilla roots compiled
//! in (webpki-roots), never the system store.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::Socket;

use crate::{error::RegistryError, error::Result};

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(s: &str) -> Result<SslMode> {
        Ok(match s {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            // libpq's `allow` (plaintext first) is not offered.
            other => {
                return Err(RegistryError::Invalid(format!(
                    "database url: sslmode {other:?} (expected disable, prefer, require, verify-ca or verify-full)"
                )))
            }
        })
    }

    /// What tokio-postgres is told: it only decides whether to ask for TLS.
    pub(crate) fn for_driver(self) -> PgSslMode {
        match self {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            _ => PgSslMode::Require,
        }
    }

    pub fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// The TLS settings of a registry URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub root_cert: Option<PathBuf>,
}

/// Takes `sslmode` and `sslrootcert` out of `url` (a `postgres://` URL or a
/// `key=value` string) and returns the rest, for tokio-postgres, and them.
/// Without `sslmode` the mode is libpq's default, `prefer`.
pub fn split_url(url: &str) -> Result<(String, TlsSettings)> {
    let mut mode = None;
    let mut root = None;
    let mut take = |k: &str, v: String| -> Result<bool> {
        match k {
            "sslmode" => mode = Some(SslMode::parse(&v)?),
            "sslrootcert" => root = Some(PathBuf::from(v)),
            _ => return Ok(false),
        }
        Ok(true)
    };
    let rest = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        match url.split_once('?') {
            None => url.to_string(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    if !take(k, percent_decode(v))? {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        // key=value form: plain (unquoted) values only for these two keys.
        let mut kept = Vec::new();
        for tok in url.split_whitespace() {
            let taken = match tok.split_once('=') {
                Some((k, v)) if !v.starts_with('\'') => take(k.trim(), v.to_string())?,
                _ => false,
            };
            if !taken {
                kept.push(tok);
            }
        }
        kept.join(" ")
    };
    let mode = mode.unwrap_or(SslMode::Prefer);
    Ok((
        rest,
        TlsSettings {
            mode,
            root_cert: root,
        },
    ))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The roots: the PEM file's certificates, or webpki-roots.
fn roots(file: Option<&PathBuf>) -> Result<RootCertStore> {
    let Some(path) = file else {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    };
    net::pem::root_store("sslrootcert", path)
        .map_err(|e| RegistryError::Invalid(format!("database url: {e}")))
}

/// The rustls configuration for `settings` (None for `disable`). Read at
/// each (re)connection's start, so a replaced `sslrootcert` is picked up.
pub(crate) fn client_config(settings: &TlsSettings) -> Result<Option<Arc<ClientConfig>>> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| RegistryError::Invalid(format!("TLS: {e}")))?;
    let verifier: Arc<dyn ServerCertVerifier> = match settings.mode {
        SslMode::Disable => return Ok(None),
        SslMode::Prefer | SslMode::Require if settings.root_cert.is_none() => Arc::new(Lenient {
            provider,
            chain: None,
        }),
        mode => {
            let store = roots(settings.root_cert.as_ref())?;
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
                    .build()
                    .map_err(|e| RegistryError::Invalid(format!("TLS roots: {e}")))?;
            if mode == SslMode::VerifyFull {
                webpki
            } else {
                Arc::new(Lenient {
                    provider,
                    chain: Some(webpki),
                })
            }
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(Arc::new(config)))
}

/// The modes that check less than webpki: `require` / `prefer` without
/// `sslrootcert` (`chain` None: encrypted, the certificate not checked) and
/// `verify-ca` (the chain checked, the host name not: webpki checks the name
/// only once the chain verified). The handshake signature is always checked,
/// with the key the certificate presents (as webpki's verifier does, with the
/// same provider's algorithms).
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let Some(webpki) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            r => r,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// tokio-postgres's TLS hook: `None` only with `sslmode=disable`, when the
/// driver never asks for TLS.
#[derive(Clone)]
pub(crate) struct MakeRustls(pub(crate) Option<Arc<ClientConfig>>);

/// One connection's TLS: the server name to check, and the configuration.
pub(crate) struct RustlsConnect {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnect> {
        let config = self.0.clone().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "TLS asked for with sslmode=disable",
            )
        })?;
        // A Unix socket has no host name (and the server offers no TLS on
        // one): any valid name will do.
        let domain = if domain.is_empty() {
            "localhost"
        } else {
            domain
        };
        let name = ServerName::try_from(domain.to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{domain:?}: {e}")))?;
        Ok(RustlsConnect { config, name })
    }
}

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let s = tokio_rustls::TlsConnector::from(self.config)
                .connect(self.name, stream)
                .await
                .map_err(verify_failed)?;
            Ok(RustlsStream(Box::new(s)))
        })
    }
}

/// Says "certificate verify failed" for a certificate rustls rejected.
fn verify_failed(e: io::Error) -> io::Error {
    let is_cert = e
        .get_ref()
        .and_then(|i| i.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
            )
        });
    if is_cert {
        io::Error::new(e.kind(), format!("certificate verify failed: {e}"))
    } else {
        e
    }
}

/// The encrypted stream.
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssl_parameters_are_taken_out_of_the_url() {
        let (rest, s) = split_url(
            "postgres://u:p@db:5432/reg?sslmode=verify-full&sslrootcert=/etc/ca%20x.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/reg?connect_timeout=3");
        assert_eq!(s.mode, SslMode::VerifyFull);
        assert_eq!(s.root_cert, Some(PathBuf::from("/etc/ca x.pem")));
        let (rest, s) = split_url("postgres://db/reg?sslmode=verify-ca").unwrap();
        assert_eq!(
            (rest.as_str(), s.mode),
            ("postgres://db/reg", SslMode::VerifyCa)
        );
        let (rest, s) = split_url("postgres://db/reg").unwrap();
        assert_eq!(
            (rest.as_str(), s.mode),
            ("postgres://db/reg", SslMode::Prefer)
        );
        let (rest, s) = split_url("host=db user=u sslmode=require dbname=reg").unwrap();
        assert_eq!(
            (rest.as_str(), s.mode),
            ("host=db user=u dbname=reg", SslMode::Require)
        );
        assert!(split_url("postgres://db/reg?sslmode=allow").is_err());
        assert!(split_url("postgres://db/reg?sslmode=bogus").is_err());
    }

    #[test]
    fn a_missing_or_empty_root_file_is_invalid() {
        let s = TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some("/nonexistent/ca.pem".into()),
        };
        let e = client_config(&s).unwrap_err().to_string();
        assert!(e.contains("sslrootcert /nonexistent/ca.pem"), "{e}");
        let none = TlsSettings {
            mode: SslMode::Disable,
            root_cert: None,
        };
        assert!(client_config(&none).unwrap().is_none());
    }
}
