//! The configuration's tests: file, flags, defaults and refusals.

use super::*;

#[test]
fn file_then_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(
        &path,
        "workers = 3\n[limits]\nheartbeat_interval_ms = 5000\n[demo]\ninterval_ms = 250\n",
    )
    .unwrap();
    let args = RunArgs {
        config: Some(path),
        heartbeat_interval_ms: Some(2000),
        ..Default::default()
    };
    let cfg = Config::load(&args).unwrap();
    assert_eq!(cfg.workers, 3);
    assert_eq!(cfg.limits.heartbeat_interval_ms, 2000, "flag wins");
    assert_eq!(cfg.demo.interval_ms, 250);
    assert_eq!(cfg.limits.inbound_message_bytes, 4096);
}

#[test]
fn a_non_loopback_admin_port_needs_a_token() {
    let load = |addr: &str, token: Option<&str>| {
        Config::load(&RunArgs {
            admin_addr: Some(addr.parse().unwrap()),
            admin_token: token.map(str::to_string),
            ..Default::default()
        })
    };
    let err = load("0.0.0.0:9090", None).unwrap_err();
    assert!(err.contains("admin_token"), "{err}");
    assert!(load("10.1.2.3:9090", None).is_err());
    assert!(load("[::]:9090", None).is_err());
    assert!(load("0.0.0.0:9090", Some("short"))
        .unwrap_err()
        .contains("16"));
    assert!(load("0.0.0.0:9090", Some("has a space in it!!")).is_err());
    let cfg = load("0.0.0.0:9090", Some("0123456789abcdef")).unwrap();
    assert_eq!(cfg.admin_token, "0123456789abcdef");
    // Loopback needs none (but may have one).
    assert!(load("127.0.0.1:9090", None).is_ok());
    assert!(load("[::1]:9090", None).is_ok());
}

#[test]
fn the_chat_upstream_from_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    let write = |t: &str| std::fs::write(&path, t).unwrap();
    let load = |timeout| {
        Config::load(&RunArgs {
            config: Some(path.clone()),
            chat_upstream_timeout_ms: timeout,
            ..Default::default()
        })
    };
    write("[chat]\nupstream_url = \"http://127.0.0.1:9/c\"\nupstream_connections = 2\n");
    let c = load(Some(500)).unwrap().chat;
    let got = (
        c.upstream_url.as_str(),
        c.upstream_connections,
        c.upstream_timeout_ms,
    );
    assert_eq!(got, ("http://127.0.0.1:9/c", 2, 500), "the flag wins");
    assert!(load(Some(0)).is_err());
    write("[chat]\nupstream_connections = 0\n");
    assert!(load(None).unwrap_err().contains("upstream_connections"));
}

#[test]
fn unknown_keys_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(&path, "wrokers = 3\n").unwrap();
    let err = Config::load(&RunArgs {
        config: Some(path),
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("wrokers"), "{err}");
}

#[test]
fn the_egress_section_from_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    std::fs::write(
        &path,
        "[egress]\naddr = \"/run/gatewayd/egress.sock\"\ntotal_timeout_ms = 2000\nallow_private_cidrs = [\"10.0.0.0/8\"]\n",
    )
    .unwrap();
    let args = RunArgs {
        config: Some(path.clone()),
        egress_allow_private_cidrs: Some(vec!["127.0.0.0/8".into()]),
        ..Default::default()
    };
    let cfg = Config::load(&args).unwrap();
    assert_eq!(cfg.egress.addr, "/run/gatewayd/egress.sock");
    assert_eq!(cfg.egress.total_timeout_ms, 2000);
    assert_eq!(cfg.egress.connect_timeout_ms, 1000);
    assert_eq!(cfg.egress.max_response_bytes, 64 << 10);
    assert_eq!(cfg.egress.allow_private_cidrs, ["127.0.0.0/8"], "flag wins");
    // A remote egress enforces its own allow list, not this node's.
    let remote = RunArgs {
        config: Some(path),
        egress_remote: Some("10.200.0.2:7070".into()),
        ..Default::default()
    };
    assert!(Config::load(&remote)
        .unwrap_err()
        .contains("allow_private_cidrs"));
    let mut cfg = Config::default();
    cfg.egress.connect_timeout_ms = 5_000;
    assert!(cfg.validate().unwrap_err().contains("connect_timeout_ms"));
}

#[test]
fn recovery_is_off_by_default_and_refused_without_a_cluster_and_kafka() {
    assert!(!Config::load(&RunArgs::default()).unwrap().recovery.enabled);
    let load = |registry: Option<&str>, kafka: Option<&str>| {
        Config::load(&RunArgs {
            recovery_redis_url: Some("redis://127.0.0.1:6379".into()),
            registry_url: registry.map(str::to_string),
            kafka_brokers: kafka.map(str::to_string),
            ..Default::default()
        })
    };
    let err = load(None, Some("127.0.0.1:9092")).unwrap_err();
    assert!(err.contains("needs a cluster"), "{err}");
    let err = load(Some("postgres://x@127.0.0.1/db"), None).unwrap_err();
    assert!(err.contains("Kafka"), "{err}");
    let cfg = load(Some("postgres://x@127.0.0.1/db"), Some("127.0.0.1:9092")).unwrap();
    assert!(cfg.recovery.enabled);
    // Leases must outlive what a fenced node can still deliver.
    let err = Config::load(&RunArgs {
        recovery_redis_url: Some("redis://127.0.0.1:6379".into()),
        registry_url: Some("postgres://x@127.0.0.1/db".into()),
        kafka_brokers: Some("127.0.0.1:9092".into()),
        lease_ttl_ms: Some(3_000),
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("lease_ttl_ms"), "{err}");
}

#[test]
fn the_demo_and_its_traffic_from_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("g.toml");
    let load = |text: Option<&str>, no_demo, no_demo_traffic| {
        if let Some(t) = text {
            std::fs::write(&path, t).unwrap();
        }
        let cfg = Config::load(&RunArgs {
            config: text.map(|_| path.clone()),
            no_demo,
            no_demo_traffic,
            ..Default::default()
        })
        .unwrap();
        (cfg.demo.enabled, cfg.demo.traffic)
    };
    // Default: the demo data and its traffic.
    assert_eq!(load(None, false, false), (true, true));
    assert_eq!(load(None, true, false), (false, true), "--no-demo");
    assert_eq!(load(None, false, true), (true, false), "--no-demo-traffic");
    assert_eq!(
        load(Some("[demo]\nenabled = false\n"), false, false),
        (false, true)
    );
    assert_eq!(
        load(Some("[demo]\ntraffic = false\n"), false, false),
        (true, false)
    );
    assert_eq!(
        load(
            Some("[demo]\nenabled = true\ntraffic = true\n"),
            true,
            false
        ),
        (false, true),
        "the flag wins"
    );
}

#[test]
fn a_link_off_loopback_needs_tls_or_allow_plaintext_link() {
    let load = |link: &str, tls: bool, allow: bool, registry: bool| {
        let s = |v: &str| tls.then(|| v.to_string());
        Config::load(&RunArgs {
            registry_url: registry.then(|| "postgres://x@127.0.0.1/db".into()),
            cluster_link_addr: Some(link.parse().unwrap()),
            cluster_tls_cert: s("node.pem"),
            cluster_tls_key: s("node.key"),
            cluster_tls_ca: s("ca.pem"),
            cluster_allow_plaintext_link: allow,
            ..Default::default()
        })
    };
    let err = load("0.0.0.0:7070", false, false, true).unwrap_err();
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(err.contains("allow_plaintext_link"), "{err}");
    let err = load("10.0.0.5:7070", false, false, true).unwrap_err();
    assert!(err.contains("tls_cert"), "{err}");
    assert!(load("10.0.0.5:7070", true, false, true).is_ok());
    assert!(
        load("10.0.0.5:7070", false, true, true)
            .unwrap()
            .cluster
            .allow_plaintext_link
    );
    assert!(
        load("127.0.0.1:0", false, false, true).is_ok(),
        "loopback may stay plaintext"
    );
    assert!(
        load("0.0.0.0:7070", false, false, false).is_ok(),
        "no cluster, no link"
    );
    // All three files or none.
    let err = Config::load(&RunArgs {
        cluster_tls_cert: Some("node.pem".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.contains("all of tls_cert"), "{err}");
}
