//! PEM files, read in one place for every TLS user of the workspace: the
//! gateway's certificate and key (`tls::load_server_config`), the
//! registry's `sslrootcert`, the Redis `ca=` file and the cluster link's
//! certificate, key and CA.
//!
//! Each function reads the whole file (a chain, a key or a few roots: small)
//! and each error names the file, as the caller's user knows it (`what`:
//! "TLS certificate file", "sslrootcert", "CA file", ...), its path, and
//! what was wrong: unreadable, not PEM, no certificate or no key in it, or
//! a certificate rustls refuses as a root. Nothing is cached: a caller that
//! re-reads picks up a replaced file.

use std::io;
use std::path::{Path, PathBuf};

use rustls::RootCertStore;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// What was wrong with a PEM file; each names the file (`what`, `path`).
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    /// The file could not be read.
    #[error("cannot read {what} {}: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file is not valid PEM.
    #[error("{what} {} is not valid PEM: {source}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    /// The file holds no `CERTIFICATE` section.
    #[error("{what} {} contains no PEM CERTIFICATE section", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    /// The file holds no private key section.
    #[error(
        "{what} {} contains no private key (expected a PEM PRIVATE KEY, \
         RSA PRIVATE KEY or EC PRIVATE KEY section)",
        path.display()
    )]
    NoPrivateKey { what: &'static str, path: PathBuf },
    /// A certificate of a CA file that rustls refuses as a root.
    #[error("{what} {}: {source}", path.display())]
    Root {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
}

impl PemError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            PemError::Read { path, .. }
            | PemError::Pem { path, .. }
            | PemError::NoCertificate { path, .. }
            | PemError::NoPrivateKey { path, .. }
            | PemError::Root { path, .. } => path,
        }
    }
}

/// The certificates of the PEM file `path` (at least one), in file order.
pub fn certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, PemError> {
    let pem = read(what, path)?;
    let list = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| PemError::Pem {
            what,
            path: path.to_owned(),
            source,
        })?;
    if list.is_empty() {
        return Err(PemError::NoCertificate {
            what,
            path: path.to_owned(),
        });
    }
    Ok(list)
}

/// The first private key (PKCS#8, PKCS#1 or SEC1) of the PEM file `path`.
pub fn private_key(what: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, PemError> {
    let pem = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|source| match source {
        pem::Error::NoItemsFound => PemError::NoPrivateKey {
            what,
            path: path.to_owned(),
        },
        source => PemError::Pem {
            what,
            path: path.to_owned(),
            source,
        },
    })
}

/// A root store of the certificates of the PEM file `path` (at least one;
/// each must be one rustls takes as a root).
pub fn root_store(what: &'static str, path: &Path) -> Result<RootCertStore, PemError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(what, path)? {
        store.add(cert).map_err(|source| PemError::Root {
            what,
            path: path.to_owned(),
            source,
        })?;
    }
    Ok(store)
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, PemError> {
    std::fs::read(path).map_err(|source| PemError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use crate::pem::*;

    fn temp_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "net-pem-test-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    fn pem_files_are_read_and_their_faults_named() {
        let dir = temp_dir();
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();

        assert_eq!(certificates("CA file", &cert).unwrap().len(), 1);
        assert_eq!(root_store("CA file", &cert).unwrap().len(), 1);
        assert!(private_key("key file", &key).is_ok());

        let missing = dir.join("missing.pem");
        let e = root_store("CA file", &missing).unwrap_err();
        assert!(matches!(e, PemError::Read { .. }), "{e}");
        assert_eq!(e.path(), missing);
        assert!(
            e.to_string()
                .starts_with(&format!("cannot read CA file {}: ", missing.display())),
            "{e}"
        );

        let e = root_store("CA file", &key).unwrap_err();
        assert!(matches!(e, PemError::NoCertificate { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            format!(
                "CA file {} contains no PEM CERTIFICATE section",
                key.display()
            )
        );
        let e = private_key("key file", &cert).unwrap_err();
        assert!(matches!(e, PemError::NoPrivateKey { .. }), "{e}");

        let broken = dir.join("broken.pem");
        std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\nnot base64!!\n").unwrap();
        let e = certificates("CA file", &broken).unwrap_err();
        assert!(matches!(e, PemError::Pem { .. }), "{e}");
        assert!(e.to_string().contains("broken.pem is not valid PEM"), "{e}");

        let _ = std::fs::remove_dir_all(&dir);
    }
}
