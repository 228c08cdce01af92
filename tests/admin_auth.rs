//! The admin port's controls: a node whose admin port is not on loopback
//! refuses to start without a token; with one, `POST /drain` and
//! `POST /fault/registry` need `Authorization: Bearer <token>`, metrics stay
//! readable unless `admin_metrics_auth` says otherwise, and health never
//! needs it.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::http::{http_get, http_request};
use support::node::Node;

const TOKEN: &str = "s3cret-admin-token-0123";

#[test]
fn a_non_loopback_admin_port_without_a_token_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["run", "--no-demo", "--data-dir"])
        .arg(dir.path())
        .args([
            "--gateway-addr",
            "127.0.0.1:0",
            "--ingest-addr",
            "127.0.0.1:0",
            "--admin-addr",
            "0.0.0.0:0",
        ])
        .env_remove("GATEWAYD_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run gatewayd");
    assert!(!out.status.success(), "started without an admin token");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("admin_token") && stderr.contains("not a loopback address"),
        "the error must say what to set: {stderr}"
    );
    assert!(
        !dir.path().join("gatewayd.addrs").exists(),
        "it must not have started listening"
    );
}

#[test]
fn with_a_token_the_controls_need_it_and_metrics_and_health_do_not() {
    let mut node = Node::start(&[
        "--no-demo",
        "--admin-addr",
        "0.0.0.0:0",
        "--admin-token",
        TOKEN,
        "--fault-injection",
    ]);
    let admin = node.admin;
    let bearer = format!("Bearer {TOKEN}");
    for (method, path) in [("POST", "/drain"), ("POST", "/fault/registry")] {
        for headers in [
            vec![],
            vec![("Authorization", "Bearer wrong-token-0123456789")],
            vec![("Authorization", TOKEN)],
            vec![("Authorization", "Basic czNjcmV0")],
        ] {
            let (status, body) = http_request(admin, method, path, &headers).unwrap();
            assert_eq!(status, 401, "{method} {path} {headers:?}: {body}");
        }
    }
    // Nothing happened: still ready, no registry fault.
    assert_eq!(http_get(admin, "/readyz").unwrap().0, 200);
    let (status, metrics) = http_get(admin, "/metrics").unwrap();
    assert_eq!(status, 200, "metrics stay readable without the token");
    assert!(
        metrics.contains("gatewayd_registry_brownout 0"),
        "{metrics:.2000}"
    );
    assert!(metrics.contains("gatewayd_admin_unauthorized_total 8"));
    assert_eq!(http_get(admin, "/healthz").unwrap().0, 200);

    // With the token: the fault drill switches on and off, then drain works.
    let auth = [("Authorization", bearer.as_str())];
    let (status, body) = http_request(admin, "POST", "/fault/registry", &auth).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_request(admin, "POST", "/fault/registry?down=0", &auth).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = http_request(admin, "POST", "/drain", &auth).unwrap();
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if node.child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no exit after an authorized drain"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn admin_metrics_auth_protects_metrics_too() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("gatewayd.toml");
    std::fs::write(
        &cfg,
        format!("admin_token = \"{TOKEN}\"\nadmin_metrics_auth = true\n"),
    )
    .unwrap();
    let node = Node::start(&["--no-demo", "--config", cfg.to_str().unwrap()]);
    assert_eq!(http_get(node.admin, "/metrics").unwrap().0, 401);
    let bearer = format!("Bearer {TOKEN}");
    let (status, body) =
        http_request(node.admin, "GET", "/metrics", &[("Authorization", &bearer)]).unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("gatewayd_sessions"));
    assert_eq!(http_get(node.admin, "/readyz").unwrap().0, 200);
}
