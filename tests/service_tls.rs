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

use std::path::Path;
use std::time::{Duration, Instant};

use support::cli::{check, line, refused};
use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::pki::Pki;
use support::services::{PgServer, RedisServer};

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
