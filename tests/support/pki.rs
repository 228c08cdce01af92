//! A throwaway certificate authority for the TLS tests (rcgen): a CA, a
//! server certificate it signed, a client certificate it signed, and an
//! unrelated CA, as PEM files in a temp dir.

use std::path::PathBuf;

pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// `ca.pem`; `server.crt`/`server.key` for `names` (DNS names, or IP
    /// addresses as IP SANs); `client.crt`/`client.key` (CN "test
    /// client"); `other_ca.pem`, a CA that signed none of them.
    pub fn new(names: &[&str]) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let ca = |cn: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let cert = p.self_signed(&key).unwrap();
            (cert, key)
        };
        let (ca_cert, ca_key) = ca("gatewayd test CA");
        let (other, _) = ca("gatewayd other CA");
        let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).unwrap();
        let leaf = |names: Vec<String>, cn: &str, file: &str| {
            let mut p = CertificateParams::new(names).unwrap();
            p.distinguished_name.push(DnType::CommonName, cn);
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
            write(&format!("{file}.crt"), cert.pem());
            write(&format!("{file}.key"), key.serialize_pem());
        };
        leaf(
            names.iter().map(|n| n.to_string()).collect(),
            "test server",
            "server",
        );
        leaf(vec!["test-client".into()], "test client", "client");
        write("ca.pem", ca_cert.pem());
        write("other_ca.pem", other.pem());
        Pki { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}
