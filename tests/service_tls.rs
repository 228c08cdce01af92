//! TLS to the outside services (issue 28, "TLS to every outside service"),
//! against real servers with TLS on, with a throwaway CA made here (rcgen):
//!
//! - the registry on a PostgreSQL that refuses plaintext to its database,
//!   reached with `sslmode=verify-full&sslrootcert=ca.pem`: a node starts,
//!   a bot identifies through it, and `gatewayd run --check` says ok;
//! - the same server with another CA in `sslrootcert`: the node refuses to
//!   start naming PostgreSQL and the reason, `--check` prints FAIL with it;
//! - shared REST limits through a Redis over TLS (`rediss://...?ca=`): the
//!   counters' rounds succeed, `--check` says ok;
//! - that Redis with a CA that does not sign its certificate: `--check`
//!   FAIL with the reason, and the node refuses to start naming
//!   `rest.redis_url` (docs/reliability.md).
//!
//! Needs GATEWAYD_TEST_PG_BIN and GATEWAYD_TEST_REDIS_SERVER
//! (scripts/test-all.sh sets both): ignored by plain `cargo test`, they
//! fail (not pass) under `--include-ignored` without them.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::services::{PgServer, RedisServer};

/// A CA and a server certificate it signed, as PEM files in a temp dir.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA, a server certificate for `names` (DNS names, or IP addresses
    /// as IP SANs) signed by it, and an unrelated CA (`other_ca.pem`).
    fn new(names: &[&str]) -> Pki {
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
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut p = CertificateParams::new(names).unwrap();
        p.distinguished_name.push(DnType::CommonName, "test server");
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca_cert, &ca_key).unwrap();
        let write = |name: &str, pem: String| std::fs::write(dir.path().join(name), pem).unwrap();
        write("ca.pem", ca_cert.pem());
        write("other_ca.pem", other.pem());
        write("server.crt", cert.pem());
        write("server.key", key.serialize_pem());
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A PostgreSQL with `ssl = on` and the certificate of `pki`, whose
/// database `reg` refuses plaintext (`hostnossl ... reject`); returns the
/// server and the URL of `reg` without TLS parameters.
fn pg_with_tls(pki: &Pki) -> (PgServer, String) {
    let pg = PgServer::start_with(|data: &Path| {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        // The server reads them as its own user, the key private to it.
        let owner = std::fs::metadata(data).unwrap();
        for f in ["server.crt", "server.key"] {
            let to = data.join(f);
            std::fs::copy(pki.path(f), &to).unwrap();
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::chown(&to, Some(owner.uid()), Some(owner.gid())).unwrap();
        }
        let conf = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).unwrap();
        text.push_str("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        std::fs::write(&conf, text).unwrap();
        let hba = data.join("pg_hba.conf");
        let text = std::fs::read_to_string(&hba).unwrap();
        std::fs::write(
            &hba,
            format!("hostnossl reg all 127.0.0.1/32 reject\n{text}"),
        )
        .unwrap();
    });
    let url = pg.create_db("reg");
    (pg, url)
}

fn gatewayd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// `gatewayd run --check` with a fresh data dir and `extra`.
fn check(extra: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut args = vec![
        "run",
        "--check",
        "--data-dir",
        data.to_str().unwrap(),
        "--gateway-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--ingest-addr",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let out = gatewayd(&args);
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
}

/// A node started with `extra` that must exit by itself (refusing to
/// start): its exit code and stderr.
fn refused(extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .arg("run")
        .arg("--data-dir")
        .arg(dir.path())
        .args(["--gateway-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .args(["--ingest-addr", "127.0.0.1:0"])
        .args(["--portal-addr", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the node did not refuse to start {extra:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[ignore = "needs PostgreSQL binaries: run scripts/test-all.sh, or set GATEWAYD_TEST_PG_BIN"]
fn the_registry_on_postgresql_with_verify_full_and_a_wrong_ca_refused() {
    // The server's certificate names localhost only (not 127.0.0.1).
    let pki = Pki::new(&["localhost"]);
    let (pg, url) = pg_with_tls(&pki);
    let ca = pki.path("ca.pem");
    let by_name = url.replace("127.0.0.1", "localhost");
    let good = format!("{by_name}?sslmode=verify-full&sslrootcert={}", ca.display());

    // The server really refuses plaintext to `reg`.
    let (code, text) = check(&["--registry-url", &format!("{url}?sslmode=disable")]);
    assert_eq!(code, 1, "{text}");
    assert!(line(&text, "registry").starts_with("FAIL"), "{text}");

    // verify-full with the right CA: --check, then a node that serves.
    let (code, text) = check(&["--registry-url", &good]);
    assert_eq!(code, 0, "{text}\n{}", pg.log());
    assert!(line(&text, "registry").contains("answered"), "{text}");
    let node = Node::start(&["--registry-url", &good]);
    assert!(!node.token.is_empty(), "the node seeded the demo bot");
    let s = support::bot::identify(node.gateway, "bot", &node.token, support::BOT_INTENTS, None)
        .expect("identify through the TLS registry");
    assert!(!s.guild_creates.is_empty());
    drop(s);
    drop(node);
    // verify-ca (the chain only) and require (encrypted, unverified) too.
    for mode in ["verify-ca", "require"] {
        let u = format!("{url}?sslmode={mode}&sslrootcert={}", ca.display());
        let (code, text) = check(&["--registry-url", &u]);
        assert_eq!(code, 0, "{mode}: {text}");
    }
    // verify-full by address: the certificate does not name 127.0.0.1.
    let (code, text) = check(&[
        "--registry-url",
        &format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display()),
    ]);
    assert_eq!(code, 1, "{text}");
    let l = line(&text, "registry");
    assert!(
        l.contains("certificate verify failed") && l.contains("not valid for name"),
        "{text}"
    );

    // Another CA: refused at the handshake, said so.
    let other = pki.path("other_ca.pem");
    let bad = format!(
        "{by_name}?sslmode=verify-full&sslrootcert={}",
        other.display()
    );
    let (code, text) = check(&["--registry-url", &bad]);
    assert_eq!(code, 1, "{text}");
    let l = line(&text, "registry");
    assert!(l.starts_with("FAIL"), "{text}");
    assert!(l.contains("certificate verify failed"), "{text}");
    assert!(l.contains("UnknownIssuer"), "{text}");
    let (code, err) = refused(&["--registry-url", &bad]);
    eprintln!("--check:\n{text}\nthe node ({code:?}):\n{err}");
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("PostgreSQL"), "names the service: {err}");
    assert!(
        err.contains("certificate verify failed") && err.contains("UnknownIssuer"),
        "names the reason: {err}"
    );
    // No sslrootcert: the compiled-in public roots do not know our CA.
    let (code, text) = check(&["--registry-url", &format!("{by_name}?sslmode=verify-full")]);
    assert_eq!(code, 1, "{text}");
    assert!(line(&text, "registry").contains("UnknownIssuer"), "{text}");
}

#[test]
#[ignore = "needs redis-server: run scripts/test-all.sh, or set GATEWAYD_TEST_REDIS_SERVER"]
fn shared_rest_limits_through_redis_over_tls_and_an_untrusted_certificate_refused() {
    // An IP SAN: verified by address.
    let pki = Pki::new(&["127.0.0.1"]);
    let redis = RedisServer::start_tls(
        &pki.path("server.crt"),
        &pki.path("server.key"),
        &pki.path("ca.pem"),
    );
    let port = redis.tls_port.unwrap();
    let good = format!(
        "rediss://127.0.0.1:{port}/0?ca={}",
        pki.path("ca.pem").display()
    );

    let (code, text) = check(&["--rest-redis-url", &good]);
    assert_eq!(code, 0, "{text}\n{}", redis.log());
    assert!(line(&text, "rest.redis").contains("PING"), "{text}");

    // A node sharing its REST limits through it: rounds succeed.
    let node = Node::start(&["--rest-redis-url", &good, "--rest-redis-sync-ms", "50"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let m = metrics(node.admin);
        let rounds = metric_sum(&m, "gatewayd_rest_redis_rounds_total", &[]);
        let up = metric_sum(&m, "gatewayd_rest_redis_up", &[]);
        if rounds >= 3.0 && up == 1.0 {
            assert_eq!(metric_sum(&m, "gatewayd_rest_redis_errors_total", &[]), 0.0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no rounds with Redis over TLS: rounds {rounds}, up {up}\n{}",
            redis.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(node);

    // Plaintext to the TLS port, and a CA that did not sign it: refused.
    let plain = format!("redis://127.0.0.1:{port}/0");
    let (code, text) = check(&[
        "--rest-redis-url",
        &plain,
        "--rest-redis-timeout-ms",
        "1000",
    ]);
    assert_eq!(code, 1, "{text}");
    for bad in [
        format!(
            "rediss://127.0.0.1:{port}/0?ca={}",
            pki.path("other_ca.pem").display()
        ),
        format!("rediss://127.0.0.1:{port}/0"),
    ] {
        // Deadlines with room for a busy machine (the default is 50 ms).
        let (code, text) = check(&["--rest-redis-url", &bad, "--rest-redis-timeout-ms", "2000"]);
        assert_eq!(code, 1, "{text}");
        let l = line(&text, "rest.redis");
        assert!(l.starts_with("FAIL"), "{text}");
        assert!(
            l.contains("certificate verify failed") && l.contains("UnknownIssuer"),
            "{text}"
        );
        let (code, err) = refused(&["--rest-redis-url", &bad, "--rest-redis-timeout-ms", "2000"]);
        eprintln!("--check:\n{text}\nthe node ({code:?}):\n{err}");
        assert_ne!(code, Some(0), "{err}");
        assert!(
            err.contains("Redis (rest.redis_url)") && err.contains("UnknownIssuer"),
            "names the service and the reason: {err}"
        );
    }
}
