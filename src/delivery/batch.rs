//! A batch: record bodies the ingest pipeline validated, in stream order,
//! each 8-aligned in one buffer so a worker reads them in place (rkyv
//! access without validating again). Shared by every worker through an
//! `Arc`; the pipeline recycles it once every worker has let go.

use rkyv::util::AlignedVec;

pub struct Batch {
    buf: AlignedVec<16>,
    spans: Vec<(u32, u32)>,
    /// Where each record is in its stream (Kafka: partition and offset);
    /// `StreamPos::NONE` for sources without positions (the listener).
    pos: Vec<StreamPos>,
    /// When the ingest thread read each record (Unix ns: the end of
    /// `commit_to_read`, delivery/latency.rs).
    reads: Vec<u64>,
    /// Its number in the node's recovery journal (0: not journaled).
    pub number: u64,
    /// Which source filled it: `ORIGIN_OTHER`, or `origin_of_worker(w)`
    /// for worker `w`'s chat service (it knows its own commits, so it skips
    /// them when it learns from the stream). Set once by its pipeline.
    pub origin: u32,
}

/// A batch of a producer, Kafka or the chat thread.
pub const ORIGIN_OTHER: u32 = 0;

/// The origin of worker `w`'s chat service's batches.
pub fn origin_of_worker(w: usize) -> u32 {
    w as u32 + 1
}

/// A record's place in a partitioned stream, equal on every node that
/// consumes it: the partition, and `(offset << 16) | frame` (the frame's
/// index inside its message), which grows with the stream in a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamPos {
    pub partition: i32,
    pub at: u64,
}

impl StreamPos {
    pub const NONE: StreamPos = StreamPos {
        partition: -1,
        at: 0,
    };

    /// Frame `frame` of the message at `offset` in `partition`.
    pub fn kafka(partition: i32, offset: i64, frame: u16) -> StreamPos {
        StreamPos {
            partition,
            at: (u64::try_from(offset).unwrap_or(0) << 16) | u64::from(frame),
        }
    }

    pub fn is_some(&self) -> bool {
        self.partition >= 0
    }
}

impl Batch {
    /// Room for `records` bodies of `bytes` in total without growing.
    pub fn with_capacity(records: usize, bytes: usize) -> Batch {
        Batch {
            buf: AlignedVec::with_capacity(bytes),
            spans: Vec::with_capacity(records),
            pos: Vec::with_capacity(records),
            reads: Vec::with_capacity(records),
            number: 0,
            origin: ORIGIN_OTHER,
        }
    }

    pub fn push(&mut self, body: &[u8]) {
        self.push_at(body, StreamPos::NONE);
    }

    /// A record with its place in the stream.
    pub fn push_at(&mut self, body: &[u8], at: StreamPos) {
        self.pos.push(at);
        self.reads.push(crate::delivery::latency::unix_ns());
        let pad = self.buf.len().next_multiple_of(ingest::BODY_ALIGN) - self.buf.len();
        self.buf.extend_from_slice(&[0u8; 8][..pad]);
        let start = self.buf.len();
        self.buf.extend_from_slice(body);
        self.spans.push((start as u32, body.len() as u32));
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Bytes held, alignment padding included.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Empty, keeping the capacity (for reuse).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.spans.clear();
        self.pos.clear();
        self.reads.clear();
        self.number = 0;
    }

    pub fn bodies(&self) -> impl Iterator<Item = &[u8]> {
        self.spans
            .iter()
            .map(|&(s, l)| &self.buf.as_slice()[s as usize..(s + l) as usize])
    }

    /// The bodies with the times they were read (Unix ns).
    pub fn bodies_read(&self) -> impl Iterator<Item = (&[u8], u64)> {
        self.bodies().zip(self.reads.iter().copied())
    }

    /// The bodies with their places in the stream.
    pub fn records(&self) -> impl Iterator<Item = (&[u8], StreamPos)> {
        self.bodies().zip(self.pos.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ingest::FrameReader;

    #[test]
    fn batch_bodies_are_aligned_and_intact() {
        let mut b = Batch::with_capacity(8, 4096);
        let mut frame = Vec::new();
        for i in 0..5u64 {
            frame.clear();
            ingest::encode_parts(
                "MESSAGE_CREATE",
                i,
                1,
                proto::intents::GUILD_MESSAGES,
                0,
                0,
                ingest::FLAG_HAS_CONTENT,
                &[],
                br#"{"content":"x"}"#,
                &mut frame,
            );
            let mut r = FrameReader::new();
            r.push(&frame);
            assert!(matches!(r.next(), Some(Ok(_))));
            b.push(r.last_body());
        }
        for (i, body) in b.bodies().enumerate() {
            assert_eq!(body.as_ptr() as usize % ingest::BODY_ALIGN, 0);
            // SAFETY: each body was accepted by FrameReader (which validated it with `access`) and is 8-byte aligned (asserted above).
            let rec = unsafe { ingest::access_trusted(body) };
            assert_eq!(rec.server_id(), i as u64);
        }
    }
}
