//! TLS to the Kafka-protocol broker (issue 28, "TLS to every outside
//! service"): librdkafka's own TLS client (rdkafka-sys `ssl`) against a real
//! broker. Tansu 0.6 accepts `--cert`/`--key` but serves plaintext (its
//! acceptor is built and never used), so the broker here is Tansu behind a
//! TLS front of the test's own (support::tls_front, rustls) that asks for a
//! client certificate, and Tansu advertises the front's address, so every
//! connection a client makes, bootstrap and per-broker, is TLS.
//!
//! - the node consumes events from the topic over TLS, verifying the
//!   broker's chain against `--kafka-tls-ca` and its name (`localhost`),
//!   offering `--kafka-tls-cert`/`--kafka-tls-key`; a REST send commits
//!   through the node's producer over TLS and comes back to the bot;
//!   `--check` says ok, "(TLS)";
//! - a CA that did not sign the broker's certificate: `--check` FAILs with
//!   OpenSSL's reason and the node refuses to start (exit 1) naming kafka;
//!   no client certificate, or plaintext to the TLS port: `--check` FAILs.
//!
//! Needs GATEWAYD_TEST_TANSU (scripts/test-all.sh sets it): ignored by
//! plain `cargo test`; under `--include-ignored` they fail without it.

mod support;

use std::time::Duration;

use serde_json::json;
use support::cli::{check, line, refused};
use support::events::frame_message;
use support::kafka::{create_topic_with, unique, Kafka};
use support::pki::Pki;
use support::rest::Fixture;
use support::services::TansuServer;
use support::tls_front::{self, TlsFront};
use support::BOT_INTENTS;

/// The first event waits for the consumer to join its group.
const FIRST_EVENT: Duration = Duration::from_secs(40);

struct TlsBroker {
    pki: Pki,
    /// `localhost:<front port>`: the name the broker's certificate carries.
    bootstrap: String,
    _front: TlsFront,
    _broker: TansuServer,
}

impl TlsBroker {
    fn start() -> TlsBroker {
        let pki = Pki::new(&["localhost"]);
        let listener = tls_front::bind();
        let bootstrap = format!("localhost:{}", listener.local_addr().unwrap().port());
        let broker = TansuServer::start_advertising("memory://tansu/", Some(&bootstrap));
        let front = TlsFront::start(
            listener,
            &pki.path("server.crt"),
            &pki.path("server.key"),
            Some(&pki.path("ca.pem")),
            format!("127.0.0.1:{}", broker.port).parse().unwrap(),
        );
        TlsBroker {
            pki,
            bootstrap,
            _front: front,
            _broker: broker,
        }
    }

    fn path(&self, name: &str) -> String {
        self.pki.path(name).to_str().unwrap().to_string()
    }

    /// librdkafka settings of a client that trusts the CA and has a certificate.
    fn client_settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("security.protocol", "ssl".into()),
            ("ssl.ca.location", self.path("ca.pem")),
            ("ssl.certificate.location", self.path("client.crt")),
            ("ssl.key.location", self.path("client.key")),
        ]
    }

    /// The node's flags for this broker: `ca` as its roots, with or
    /// without the client certificate.
    fn node_flags(&self, topic: &str, ca: &str, client_cert: bool) -> Vec<String> {
        let mut f = vec![
            "--kafka-brokers".to_string(),
            self.bootstrap.clone(),
            "--kafka-topic".into(),
            topic.into(),
            "--kafka-tls-ca".into(),
            self.path(ca),
        ];
        if client_cert {
            f.extend([
                "--kafka-tls-cert".into(),
                self.path("client.crt"),
                "--kafka-tls-key".into(),
                self.path("client.key"),
            ]);
        }
        f
    }
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
#[ignore = "needs a Tansu binary (GATEWAYD_TEST_TANSU): run scripts/test-all.sh"]
fn the_node_consumes_and_commits_through_a_broker_over_tls_with_a_client_certificate() {
    let b = TlsBroker::start();
    let settings = b.client_settings();
    let extra: Vec<(&str, &str)> = settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let topic = create_topic_with(&b.bootstrap, &extra);

    let mut flags = b.node_flags(&topic, "ca.pem", true);
    flags.extend([
        "--kafka-group".into(),
        unique("tls"),
        "--kafka-session-timeout-ms".into(),
        "6000".into(),
    ]);
    let (code, text) = check(&strs(&flags));
    assert_eq!(code, 0, "{text}");
    let l = line(&text, "kafka");
    assert!(l.starts_with("ok") && l.contains("(TLS)"), "{text}");

    let mut f = Fixture::start(&strs(&flags), BOT_INTENTS);
    let kafka = Kafka::with(&b.bootstrap, &topic, &extra);
    kafka.send(f.server, &frame_message(f.server, f.general, "over tls"));
    kafka.flush();
    let got = f.session.next_dispatch(FIRST_EVENT);
    assert_eq!(got["t"], "MESSAGE_CREATE", "{got}");
    assert_eq!(got["d"]["content"], "over tls");

    // A REST send: the node's producer commits it to the topic over TLS,
    // its consumer brings it back.
    let r = f.call(
        "POST",
        &format!("/channels/{}/messages", f.general),
        Some(json!({"content": "through the producer"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let d = f.expect_event("MESSAGE_CREATE");
    assert_eq!(d["content"], "through the producer", "{d}");
}

#[test]
#[ignore = "needs a Tansu binary (GATEWAYD_TEST_TANSU): run scripts/test-all.sh"]
fn a_broker_certificate_that_does_not_verify_is_refused_naming_kafka() {
    let b = TlsBroker::start();
    let topic = "gatewayd-events";

    // Roots that did not sign the broker's certificate.
    let wrong = b.node_flags(topic, "other_ca.pem", true);
    let (code, text) = check(&strs(&wrong));
    assert_eq!(code, 1, "{text}");
    let l = line(&text, "kafka");
    assert!(
        l.starts_with("FAIL") && l.contains("certificate verify failed"),
        "{text}"
    );
    let (code, err) = refused(&strs(&wrong));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("kafka") && err.contains("certificate verify failed"),
        "{err}"
    );

    // The right roots but no client certificate: the broker refuses us.
    let (code, text) = check(&strs(&b.node_flags(topic, "ca.pem", false)));
    assert_eq!(code, 1, "{text}");
    assert!(line(&text, "kafka").starts_with("FAIL"), "{text}");

    // Plaintext to the TLS port.
    let (code, text) = check(&["--kafka-brokers", &b.bootstrap]);
    assert_eq!(code, 1, "{text}");
    assert!(line(&text, "kafka").starts_with("FAIL"), "{text}");
}
