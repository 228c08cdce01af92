//! The topic as a survivor reads it for crash recovery (docs/cluster.md):
//! a consumer of its own per read (no group commits: `assign` and a start
//! offset per partition), every value validated frame by frame exactly as
//! the ingest thread does (`kafka::read_value`; interaction records are
//! not fanned out there, so not here either), each record with the
//! position the ingest thread gives it. Every call has a deadline and a
//! byte bound.

use std::time::{Duration, Instant};

use ingest::FrameReader;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use crate::delivery::batch::{Batch, StreamPos};
use crate::delivery::resume::ResumeRefusal;
use crate::ingest::kafka::{read_value, ValueItem};

pub struct TopicReplay {
    pub brokers: crate::ingest::brokers::Brokers,
    pub topic: String,
}

fn left(deadline: Instant) -> Result<Duration, ResumeRefusal> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(ResumeRefusal::RecoveryStoreDown)
}

impl TopicReplay {
    fn consumer(&self) -> Result<BaseConsumer, ResumeRefusal> {
        let mut random = [0u8; 8];
        let _ = getrandom::fill(&mut random);
        self.brokers
            .client()
            .set(
                "group.id",
                format!("gatewayd-recovery-{}", u64::from_le_bytes(random)),
            )
            .set("client.id", "gatewayd-recovery")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "error")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "50")
            .create()
            .map_err(|e| {
                tracing::warn!(error = %e, "recovery: creating the replay consumer");
                ResumeRefusal::RecoveryStoreDown
            })
    }
}

impl crate::delivery::recovery::TopicReader for TopicReplay {
    fn partitions(&self, deadline: Instant) -> Result<Vec<(i32, i64, i64)>, ResumeRefusal> {
        let c = self.consumer()?;
        let md = c
            .fetch_metadata(Some(&self.topic), left(deadline)?)
            .map_err(|_| ResumeRefusal::RecoveryStoreDown)?;
        let parts: Vec<i32> = md
            .topics()
            .iter()
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let (low, high) = c
                .fetch_watermarks(&self.topic, p, left(deadline)?)
                .map_err(|_| ResumeRefusal::RecoveryStoreDown)?;
            out.push((p, low, high));
        }
        out.sort_unstable();
        Ok(out)
    }

    fn read(
        &self,
        ranges: &[(i32, i64, i64)],
        deadline: Instant,
        max_bytes: u64,
    ) -> Result<Vec<Batch>, ResumeRefusal> {
        let mut out: Vec<Batch> = ranges
            .iter()
            .map(|_| Batch::with_capacity(64, 1 << 16))
            .collect();
        let todo: Vec<(i32, i64, i64)> = ranges.iter().copied().filter(|r| r.1 < r.2).collect();
        if todo.is_empty() {
            return Ok(out);
        }
        let c = self.consumer()?;
        let mut tpl = TopicPartitionList::new();
        for &(p, from, _) in &todo {
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(from))
                .map_err(|_| ResumeRefusal::RecoveryStoreDown)?;
        }
        c.assign(&tpl)
            .map_err(|_| ResumeRefusal::RecoveryStoreDown)?;
        // Next offset still wanted per range (done once it reaches `to`).
        let mut next: Vec<i64> = ranges.iter().map(|r| r.1).collect();
        let mut bytes = 0u64;
        let mut reader = FrameReader::new();
        while ranges.iter().zip(&next).any(|(r, n)| *n < r.2) {
            let Some(msg) = c.poll(left(deadline)?.min(Duration::from_millis(100))) else {
                continue;
            };
            let msg = match msg {
                Ok(m) => m,
                Err(rdkafka::error::KafkaError::PartitionEOF(_)) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "recovery: reading the topic");
                    let text = e.to_string();
                    return Err(
                        if text.contains("out of range") || text.contains("OutOfRange") {
                            ResumeRefusal::RecoveryRetention
                        } else {
                            ResumeRefusal::RecoveryStoreDown
                        },
                    );
                }
            };
            let (p, offset) = (msg.partition(), msg.offset());
            let Some(i) = ranges.iter().position(|r| r.0 == p) else {
                continue;
            };
            if offset < next[i] || offset >= ranges[i].2 {
                continue;
            }
            next[i] = offset + 1;
            let value = msg.payload().unwrap_or(&[]);
            bytes += value.len() as u64;
            if bytes > max_bytes {
                return Err(ResumeRefusal::RecoveryRetention);
            }
            // The same steps as the ingest thread (`kafka::Link::take`).
            let mut frame: u16 = 0;
            let mut taken = false;
            let batch = &mut out[i];
            read_value(&mut reader, value, |item| match item {
                ValueItem::Record(rec) => taken = rec.is_interaction(),
                ValueItem::Body(_) if taken => {}
                ValueItem::Body(body) => {
                    batch.push_at(body, StreamPos::kafka(p, offset, frame));
                    frame = frame.saturating_add(1);
                }
                ValueItem::Rejected(_) => {}
            });
        }
        Ok(out)
    }
}
