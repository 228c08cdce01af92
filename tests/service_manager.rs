//! A node a service manager can run (issue 28): sd_notify messages on a
//! socket the test listens on as NOTIFY_SOCKET (READY=1 only once the
//! listeners are bound, WATCHDOG=1 while the workers turn, STOPPING=1 on a
//! drain), the exit statuses (0 after SIGTERM, 75 after POST /drain, 78 for
//! a bad configuration), and `gatewayd run --check` for a good
//! configuration and for each service that cannot be reached.
//!
//! The checks against a real PostgreSQL and Redis need
//! GATEWAYD_TEST_DATABASE_URL and GATEWAYD_TEST_REDIS_URL
//! (scripts/test-all.sh starts both): ignored by plain `cargo test`, they
//! fail (not pass) under `--include-ignored` without them.

mod support;

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use support::cli::{check, gatewayd, line};
use support::node::{free_port, Node};

/// The next sd_notify datagram, within `wait`.
fn next(sock: &UnixDatagram, wait: Duration) -> Option<String> {
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    match sock.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(_) => None,
    }
}

/// Datagrams until one equals `want` (returned with those before it), within `wait`.
fn until(sock: &UnixDatagram, want: &str, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match next(sock, left) {
            Some(m) => {
                let done = m == want;
                seen.push(m);
                if done {
                    return seen;
                }
            }
            None => break,
        }
    }
    panic!("no {want:?} within {wait:?}; got {seen:?}");
}

#[test]
fn ready_after_the_listeners_watchdog_while_workers_turn_stopping_on_drain_and_exit_75() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    let mut node = Node::start_with_env(
        &[
            "--no-demo",
            "--workers",
            "2",
            "--drain-spread-ms",
            "200",
            "--shutdown-grace-ms",
            "200",
        ],
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    // Node::start returned once /readyz answered 200; READY=1 was sent by
    // then or is on its way, and it is the first message.
    let first = next(&sock, Duration::from_secs(30)).expect("READY=1");
    assert_eq!(first, "READY=1");
    // The listeners it announces were bound before READY=1.
    assert!(node.dir.path().join("gatewayd.addrs").exists());
    assert!(std::net::TcpStream::connect(node.gateway).is_ok());
    // The watchdog: every half second while both workers turn.
    for _ in 0..3 {
        until(&sock, "WATCHDOG=1", Duration::from_secs(10));
    }
    let (status, _) = support::http::http_request(node.admin, "POST", "/drain", &[]).unwrap();
    assert_eq!(status, 202);
    until(&sock, "STOPPING=1", Duration::from_secs(10));
    let status = node.child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(75),
        "a drain asked for on the admin port exits 75 (restart me): {status}"
    );
}

#[test]
fn no_notify_socket_changes_nothing_and_sigterm_exits_0() {
    let mut node = Node::start(&[
        "--no-demo",
        "--drain-spread-ms",
        "100",
        "--shutdown-grace-ms",
        "100",
    ]);
    let status = node.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn a_bad_configuration_exits_78_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let out = gatewayd(&[
        "run",
        "--data-dir",
        dir.path().to_str().unwrap(),
        "--workers",
        "999",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("workers"), "{err}");
}

#[test]
fn check_passes_a_good_configuration_one_line_per_check() {
    let (code, text) = check(&[]);
    assert_eq!(code, 0, "{text}");
    assert!(line(&text, "config").starts_with("ok"), "{text}");
    assert!(line(&text, "data_dir").starts_with("ok"), "{text}");
    assert!(line(&text, "registry").starts_with("ok"), "{text}");
    for unset in [
        "tls",
        "cluster.tls",
        "rest.redis",
        "recovery.redis",
        "kafka",
        "chat.upstream",
        "egress.remote",
    ] {
        assert!(line(&text, unset).starts_with("skip"), "{text}");
    }
    assert!(text.contains("every check passed"), "{text}");
}

#[test]
fn check_fails_each_service_it_cannot_reach_and_says_which() {
    let dead = |scheme: &str| format!("{scheme}127.0.0.1:{}", free_port());
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--workers".into(), "999".into()], "config"),
        (
            vec![
                "--tls-cert".into(),
                "/nonexistent/cert.pem".into(),
                "--tls-key".into(),
                "/nonexistent/key.pem".into(),
            ],
            "tls",
        ),
        (
            vec![
                "--cluster-tls-cert".into(),
                "/nonexistent/node.pem".into(),
                "--cluster-tls-key".into(),
                "/nonexistent/node.key".into(),
                "--cluster-tls-ca".into(),
                "/nonexistent/ca.pem".into(),
            ],
            "cluster.tls",
        ),
        (
            vec![
                "--registry-url".into(),
                format!("postgres://gw:s3cret@127.0.0.1:{}/reg", free_port()),
            ],
            "registry",
        ),
        (
            vec![
                "--rest-redis-url".into(),
                format!("redis://:s3cret@127.0.0.1:{}", free_port()),
            ],
            "rest.redis",
        ),
        (vec!["--kafka-brokers".into(), dead("")], "kafka"),
        (
            vec![
                "--chat-upstream-url".into(),
                format!("{}/chat", dead("http://")),
            ],
            "chat.upstream",
        ),
        (vec!["--egress-remote".into(), dead("")], "egress.remote"),
    ];
    for (args, name) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, text) = check(&args);
        assert_eq!(code, 1, "{args:?}:\n{text}");
        assert!(line(&text, name).starts_with("FAIL"), "{args:?}:\n{text}");
        assert!(!text.contains("s3cret"), "a password printed:\n{text}");
        assert!(
            text.contains("1 failed"),
            "{args:?}: only {name} fails:\n{text}"
        );
    }
}

#[test]
#[ignore = "needs PostgreSQL and Redis: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL and GATEWAYD_TEST_REDIS_URL"]
fn check_reaches_a_real_postgresql_registry_and_redis() {
    let (_admin, db) = support::registry::pg_database();
    let redis = std::env::var("GATEWAYD_TEST_REDIS_URL")
        .expect("GATEWAYD_TEST_REDIS_URL is not set: scripts/test-all.sh starts Redis");
    let (code, text) = check(&["--registry-url", &db, "--rest-redis-url", &redis]);
    assert_eq!(code, 0, "{text}");
    assert!(line(&text, "registry").contains("answered"), "{text}");
    assert!(line(&text, "rest.redis").contains("PING"), "{text}");
}

#[test]
fn secrets_come_from_files_and_never_from_the_process_list() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "a-token-from-a-file-0123456789\n").unwrap();
    let mut perm = std::fs::metadata(&token).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o400);
    std::fs::set_permissions(&token, perm).unwrap();
    let node = Node::start(&["--no-demo", "--admin-token-file", token.to_str().unwrap()]);
    // The drain needs the token read from the file.
    let (status, _) = support::http::http_request(node.admin, "POST", "/drain", &[]).unwrap();
    assert_eq!(status, 401);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", node.child.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains("a-token-from-a-file"));
    let auth = [("Authorization", "Bearer a-token-from-a-file-0123456789")];
    let (status, _) =
        support::http::http_request(node.admin, "POST", "/fault/registry?down=0", &auth).unwrap();
    assert_ne!(status, 401, "the token from the file is the admin token");
    // Given both ways: a configuration error.
    let (code, text) = check(&[
        "--admin-token",
        "another-token-0123456789",
        "--admin-token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{text}");
    assert!(
        line(&text, "config").contains("--admin-token-file"),
        "{text}"
    );
}
