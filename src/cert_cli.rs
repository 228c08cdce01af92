//! `gatewayd cert`: the cluster link's certificates (docs/cluster.md,
//! "Mutual TLS on the link"), with rcgen, so a fresh machine needs no
//! openssl.
//!
//! - `gatewayd cert ca --out DIR`: a cluster CA, `DIR/ca.pem` and
//!   `DIR/ca.key` (keep the key off the nodes).
//! - `gatewayd cert node --ip A.B.C.D --ca DIR --out DIR`: a node's
//!   certificate, `DIR/node.pem` and `DIR/node.key`: signed by the CA in
//!   `--ca`, its only name the IP SAN `A.B.C.D` (the node's advertised
//!   link address), EKUs serverAuth and clientAuth.
//!
//! The CA's subject is fixed (`CN=gatewayd cluster CA`): `node` rebuilds
//! the issuer from `ca.key` and that name (rcgen 0.13 cannot parse a
//! certificate without x509-parser), so it signs only with a CA this
//! command made; a CA of your own works with openssl-made node
//! certificates just the same.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

const CA_NAME: &str = "gatewayd cluster CA";

#[derive(Args, Debug)]
pub struct CertArgs {
    #[command(subcommand)]
    pub command: CertCommand,
}

#[derive(Subcommand, Debug)]
pub enum CertCommand {
    /// Make a cluster CA: OUT/ca.pem (give it to every node: cluster.tls_ca)
    /// and OUT/ca.key (keep it off the nodes).
    Ca {
        /// Directory to write ca.pem and ca.key into (made if missing).
        #[arg(long)]
        out: PathBuf,
        /// Days the CA is valid.
        #[arg(long, default_value_t = 3650)]
        days: u32,
    },
    /// Make a node's certificate, signed by the CA in --ca: OUT/node.pem
    /// (cluster.tls_cert) and OUT/node.key (cluster.tls_key).
    Node {
        /// The node's advertised link address (its IP SAN; the dialer checks it).
        #[arg(long)]
        ip: IpAddr,
        /// Directory holding ca.pem and ca.key (`gatewayd cert ca`).
        #[arg(long)]
        ca: PathBuf,
        /// Directory to write node.pem and node.key into (made if missing).
        #[arg(long)]
        out: PathBuf,
        /// Days the certificate is valid.
        #[arg(long, default_value_t = 365)]
        days: u32,
    },
}

/// A certificate and its private key, PEM.
pub struct Pem {
    pub cert: String,
    pub key: String,
}

fn validity(p: &mut CertificateParams, from_days: i64, days: i64) {
    let day = |d: i64| std::time::Duration::from_secs(d.unsigned_abs() * 86_400);
    let now = rcgen::date_time_ymd(1970, 1, 1)
        + std::time::Duration::from_secs(registry::snowflake::unix_ms_now() / 1000);
    let at = |d: i64| if d < 0 { now - day(d) } else { now + day(d) };
    p.not_before = at(from_days);
    p.not_after = at(from_days + days);
}

fn ca_params(from_days: i64, days: i64) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_NAME);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut p, from_days, days);
    p
}

/// A new cluster CA valid for `days` from now.
pub fn new_ca(days: i64) -> Result<Pem, String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = ca_params(-1, days)
        .self_signed(&key)
        .map_err(|e| e.to_string())?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A node certificate for `ip` signed by the CA whose key is `ca_key`
/// (PEM; a CA from `new_ca`), valid from `from_days` (negative: in the
/// past) for `days`.
pub fn new_node(ca_key: &str, ip: IpAddr, from_days: i64, days: i64) -> Result<Pem, String> {
    let ca_key = KeyPair::from_pem(ca_key).map_err(|e| format!("the CA key: {e}"))?;
    let issuer = ca_params(-1, 1)
        .self_signed(&ca_key)
        .map_err(|e| e.to_string())?;
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("gatewayd node {ip}"));
    p.distinguished_name = dn;
    p.subject_alt_names = vec![SanType::IpAddress(ip)];
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    validity(&mut p, from_days, days);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = p
        .signed_by(&key, &issuer, &ca_key)
        .map_err(|e| e.to_string())?;
    Ok(Pem {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn write(dir: &Path, name: &str, text: &str, secret: bool) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.flush().map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

pub fn run(args: CertArgs) -> Result<(), String> {
    match args.command {
        CertCommand::Ca { out, days } => {
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let ca = new_ca(i64::from(days))?;
            write(&out, "ca.pem", &ca.cert, false)?;
            write(&out, "ca.key", &ca.key, true)
        }
        CertCommand::Node { ip, ca, out, days } => {
            let key_path = ca.join("ca.key");
            let ca_key = std::fs::read_to_string(&key_path)
                .map_err(|e| format!("{}: {e}", key_path.display()))?;
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let node = new_node(&ca_key, ip, -1, i64::from(days))?;
            write(&out, "node.pem", &node.cert, false)?;
            write(&out, "node.key", &node.key, true)
        }
    }
}
