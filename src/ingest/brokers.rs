//! How every Kafka client of the node reaches the brokers: the bootstrap
//! list and, when configured, TLS. One place, so the ingest consumer, the
//! chat service's producer, crash recovery's replay reader and
//! `gatewayd run --check` cannot disagree on it.
//!
//! # TLS (issue 28)
//!
//! librdkafka's own OpenSSL client (rdkafka-sys feature `ssl`, the system's
//! libssl): `security.protocol=ssl`, the broker's chain verified against
//! `events.kafka_tls_ca` (PEM; without it, OpenSSL's default store, i.e.
//! the system's CA certificates) and its name checked against the host it
//! was reached at (`ssl.endpoint.identification.algorithm=https`: the
//! bootstrap host, then each broker's advertised host). A client
//! certificate (`kafka_tls_cert` + `kafka_tls_key`, PEM, unencrypted key) is
//! offered when set, for brokers that require one (`ssl.client.auth`).
//!
//! # Failure outcomes
//!
//! librdkafka connects in the background and retries forever, so a broker
//! that is down is not an error at start: the node runs from the listener
//! and consumes once the broker answers (docs/reliability.md). A
//! certificate that does not verify does not heal by waiting, so with TLS
//! on the node probes the brokers at start (`probe`, deadline
//! `registry.timeout_ms`) and refuses to start on a TLS failure, naming the
//! broker and OpenSSL's reason; `--check` prints the same line.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::config::Events;

#[derive(Clone, Debug)]
struct Tls {
    ca: Option<PathBuf>,
    cert: Option<(PathBuf, PathBuf)>,
}

/// The brokers and how to reach them.
#[derive(Clone, Debug)]
pub struct Brokers {
    /// The bootstrap list, as configured (for logs and errors).
    pub list: String,
    tls: Option<Tls>,
}

impl Brokers {
    pub fn new(e: &Events) -> Brokers {
        let tls = e.kafka_tls_on().then(|| Tls {
            ca: e.kafka_tls_ca.clone(),
            cert: e.kafka_tls_cert.clone().zip(e.kafka_tls_key.clone()),
        });
        Brokers {
            list: e.kafka_brokers.clone(),
            tls,
        }
    }

    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A client configuration holding the bootstrap list and the security
    /// settings; the caller adds its role's own settings.
    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.list);
        if let Some(tls) = &self.tls {
            c.set("security.protocol", "ssl")
                .set("enable.ssl.certificate.verification", "true")
                .set("ssl.endpoint.identification.algorithm", "https");
            if let Some(ca) = &tls.ca {
                c.set("ssl.ca.location", ca.to_string_lossy());
            }
            if let Some((cert, key)) = &tls.cert {
                c.set("ssl.certificate.location", cert.to_string_lossy())
                    .set("ssl.key.location", key.to_string_lossy());
            }
        }
        c
    }

    /// One metadata round trip for `topic` within `timeout`: the topic's
    /// partition count, or why not. TLS failures are told apart from a
    /// broker that is merely unreachable.
    pub fn probe(&self, topic: &str, timeout: Duration) -> Result<Probe, ProbeError> {
        let seen = Seen::default();
        let consumer: BaseConsumer<Seen> = self
            .client()
            .set("client.id", "gatewayd-probe")
            .set("group.id", "gatewayd-probe")
            .set("enable.auto.commit", "false")
            // One try per broker within the deadline, not a storm of them.
            .set("reconnect.backoff.ms", "200")
            .create_with_context(seen.clone())
            .map_err(|e| ProbeError::Config(e.to_string()))?;
        let t = Instant::now();
        let md = consumer.fetch_metadata(Some(topic), timeout);
        // An SSL failure queued as an error event names no reason; the log
        // line did (above). Either tells a TLS failure from an absent broker.
        let mut ssl_code = false;
        if md.is_err() {
            while let Some(polled) = consumer.poll(Duration::ZERO) {
                if let Err(e) = polled {
                    ssl_code |= e.rdkafka_error_code() == Some(RDKafkaErrorCode::SSL);
                }
            }
        }
        let mut tls_failure = seen.0.lock().map(|s| s.clone()).unwrap_or_default();
        if tls_failure.is_none() && ssl_code {
            tls_failure = Some("SSL handshake failed (librdkafka gave no reason)".into());
        }
        drop(consumer);
        let md = match md {
            Ok(md) => md,
            Err(e) => {
                return Err(match tls_failure {
                    Some(reason) => ProbeError::Tls(reason),
                    None => ProbeError::Unreachable(format!("{e} (deadline {timeout:?})")),
                })
            }
        };
        let partitions = md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.partitions().len())
            .sum();
        Ok(Probe {
            partitions,
            took: t.elapsed(),
        })
    }
}

pub struct Probe {
    pub partitions: usize,
    pub took: Duration,
}

#[derive(Debug)]
pub enum ProbeError {
    /// librdkafka refused the settings (e.g. a CA file it cannot read).
    Config(String),
    /// The TLS handshake failed: OpenSSL's reason, as librdkafka gave it.
    Tls(String),
    /// No answer within the deadline (down, refused, a wrong address).
    Unreachable(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Config(e) => write!(f, "client settings refused: {e}"),
            ProbeError::Tls(e) => write!(f, "TLS: {e}"),
            ProbeError::Unreachable(e) => write!(f, "{e}"),
        }
    }
}

/// Remembers the first TLS failure librdkafka reports while probing. A
/// consumer's errors reach poll() as bare codes; the reason (OpenSSL's) is
/// in the log line librdkafka writes when it fails the broker connection,
/// which its log callback hands us directly from its own threads.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Option<String>>>);

impl Seen {
    fn note(&self, reason: &str) {
        if let Ok(mut s) = self.0.lock() {
            s.get_or_insert_with(|| reason.trim().to_string());
        }
    }
}

impl ClientContext for Seen {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if (level as i32) <= RDKafkaLogLevel::Warning as i32 && log_message.contains("SSL") {
            self.note(log_message);
        } else {
            tracing::debug!(fac, log_message, "kafka probe");
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::SSL) {
            self.note(reason);
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Seen {}
