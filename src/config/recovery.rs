//! `[recovery]`: a dead node's sessions resumed on a survivor, from Redis
//! (journal, checkpoints, summaries) and the Kafka topic (docs/cluster.md,
//! "Crash recovery"). Off by default.

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Recovery {
    /// On: needs `redis_url`, a PostgreSQL registry (a cluster) and Kafka ingest.
    pub enabled: bool,
    /// `redis://[[user]:password@]host[:port][/db]`: the session store.
    pub redis_url: String,
    /// A file holding redis_url (its password with it): config/secrets.rs.
    pub redis_url_file: std::path::PathBuf,
    /// How often each worker checkpoints its sessions (at a batch boundary).
    pub checkpoint_ms: u64,
    /// Deadline of one journal append (the batch goes on without it past this).
    pub journal_timeout_ms: u64,
    /// Deadline of every other Redis round (checkpoints, summaries, reads).
    pub timeout_ms: u64,
    /// Journal entries kept per node (older ones are trimmed).
    pub journal_max: u32,
    /// How long journal, checkpoints and claims live in Redis after the
    /// last write (a dead node's records are gone after this).
    pub ttl_ms: u64,
    /// How long a session's summary lives (rewritten when it changes).
    pub summary_ttl_ms: u64,
    /// A survivor's budget for one recovery: waiting for the dead node's
    /// claim to lapse, Redis, the topic (the bot waits for RESUMED).
    pub resume_timeout_ms: u64,
    /// Bytes of topic records one dead node's replay may fetch.
    pub max_fetch_bytes: u64,
}

impl Default for Recovery {
    fn default() -> Self {
        Recovery {
            enabled: false,
            redis_url: String::new(),
            redis_url_file: std::path::PathBuf::new(),
            checkpoint_ms: 1_000,
            journal_timeout_ms: 30,
            timeout_ms: 200,
            journal_max: 8_192,
            ttl_ms: 120_000,
            summary_ttl_ms: 24 * 3600 * 1000,
            resume_timeout_ms: 12_000,
            max_fetch_bytes: 64 << 20,
        }
    }
}

impl Recovery {
    /// Checks that need the rest of the config: clustered, Kafka in.
    pub fn validate(
        &self,
        registry_url: &str,
        cluster: bool,
        kafka: bool,
        lease_ttl_ms: u64,
        node_ttl_ms: u64,
    ) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if !(self.redis_url.starts_with("redis://") || self.redis_url.starts_with("rediss://")) {
            return Err(
                "recovery.redis_url: expected redis://[:password@]host[:port][/db] or rediss://... (TLS)"
                    .into(),
            );
        }
        if !(registry_url.starts_with("postgres://") || registry_url.starts_with("postgresql://"))
            || !cluster
        {
            return Err(
                "[recovery] needs a cluster: a PostgreSQL registry_url and [cluster] enabled"
                    .into(),
            );
        }
        if !kafka {
            return Err(
                "[recovery] needs Kafka ingest (events.kafka_brokers): survivors replay the topic"
                    .into(),
            );
        }
        if !(100..=60_000).contains(&self.checkpoint_ms) {
            return Err("recovery.checkpoint_ms must be 100..=60000".into());
        }
        if !(1..=1_000).contains(&self.journal_timeout_ms)
            || !(1..=5_000).contains(&self.timeout_ms)
        {
            return Err(
                "recovery.journal_timeout_ms must be 1..=1000 and recovery.timeout_ms 1..=5000"
                    .into(),
            );
        }
        if self.journal_max < 64 || self.ttl_ms < 10_000 || self.summary_ttl_ms < 60_000 {
            return Err(
                "recovery: journal_max >= 64, ttl_ms >= 10000, summary_ttl_ms >= 60000".into(),
            );
        }
        // A replay treats the dead node's leases as valid: a lease renewed
        // before the last checkpoint must outlive anything the dead node can
        // still have delivered (it fences itself node_ttl_ms after its last
        // renewal).
        if lease_ttl_ms * 2 / 3 < node_ttl_ms + self.checkpoint_ms {
            return Err(format!(
                "[recovery]: registry.lease_ttl_ms * 2/3 ({}) must cover cluster.node_ttl_ms + \
                 recovery.checkpoint_ms ({})",
                lease_ttl_ms * 2 / 3,
                node_ttl_ms + self.checkpoint_ms
            ));
        }
        if self.resume_timeout_ms <= node_ttl_ms {
            return Err("recovery.resume_timeout_ms must exceed cluster.node_ttl_ms (a survivor waits for the dead node's claim to lapse)".into());
        }
        Ok(())
    }
}
