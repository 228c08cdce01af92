//! Crash recovery's records (docs/cluster.md, "Crash recovery"), as bytes
//! in Redis: the node's **journal** of the order its workers took the
//! stream in (one entry per batch, written before the batch is handed
//! out), each worker's **checkpoint** (the last journal entry it had taken
//! and every session's seq then), and each session's **summary** (its
//! identity, as the hand-off codec writes it). Sans-IO: no sockets here.
//! Every decoder checks each count against the bytes left before
//! allocating, and refuses trailing bytes; every cut of a valid blob is
//! refused without a panic (tests below).

use std::time::Instant;

use shards::SessionId;

use crate::delivery::batch::{Batch, StreamPos};
use crate::delivery::moved::{self, Moved, MAX_PARTITIONS};
use crate::delivery::resume::ResumeRefusal;
use crate::delivery::wire::Reader;
use crate::delivery::ConnKey;
use crate::protocol::session::Identity;

const JOURNAL_MAGIC: &[u8; 4] = b"GWJ1";
const CHECKPOINT_MAGIC: &[u8; 4] = b"GWC1";
const SUMMARY_MAGIC: &[u8; 4] = b"GWS1";
/// A journal entry names at most this many runs (a batch holds at most
/// `ingest::pipeline::BATCH_RECORDS` records, so at most that many runs).
pub const MAX_RUNS: usize = 4096;
/// Drops of earlier entries one entry may report.
pub const MAX_DROPS: usize = 64;
/// A session's checkpoint version with this bit set: not recoverable (it
/// received a dispatch that did not come from the topic).
pub const TAINTED: u32 = 1 << 31;
/// A node instance's length (defined where the link's answers carry it).
pub use crate::delivery::moved::INSTANCE_LEN;
/// Flags of a journal entry.
pub const STATE_BEFORE: u8 = 1;
pub const FOREIGN: u8 = 2;

/// One journal entry: a batch as the pipeline handed it to every worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Consecutive per node instance, from 1.
    pub number: u64,
    pub unix_ms: u64,
    /// `STATE_BEFORE`: a server change was applied just before this batch.
    /// `FOREIGN`: its records are not in the topic (the ingest listener).
    pub flags: u8,
    /// Earlier entries some workers did not get (their inbox stayed full):
    /// (entry number, bit per worker; worker 63 and above share bit 63).
    pub drops: Vec<(u64, u64)>,
    /// The records, in order, as runs within one partition: (partition,
    /// position of the first, how many consecutive records of that
    /// partition follow from there).
    pub runs: Vec<(u16, u64, u16)>,
}

impl Entry {
    /// The entry for `batch` (runs of its positions; FOREIGN if it has
    /// records without one).
    pub fn of(number: u64, unix_ms: u64, flags: u8, batch: &Batch) -> Entry {
        let mut e = Entry {
            number,
            unix_ms,
            flags,
            drops: Vec::new(),
            runs: Vec::new(),
        };
        for (_, pos) in batch.records() {
            let p = u16::try_from(pos.partition)
                .ok()
                .filter(|p| usize::from(*p) < MAX_PARTITIONS);
            let Some(p) = p.filter(|_| pos.is_some()) else {
                e.flags |= FOREIGN;
                e.runs.clear();
                return e;
            };
            match e.runs.last_mut() {
                Some((lp, _, n)) if *lp == p && *n < u16::MAX => *n += 1,
                _ => e.runs.push((p, pos.at, 1)),
            }
        }
        e
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(JOURNAL_MAGIC);
        out.extend_from_slice(&self.number.to_le_bytes());
        out.extend_from_slice(&self.unix_ms.to_le_bytes());
        out.push(self.flags);
        put_u16(out, self.drops.len().min(MAX_DROPS));
        for (n, mask) in self.drops.iter().take(MAX_DROPS) {
            out.extend_from_slice(&n.to_le_bytes());
            out.extend_from_slice(&mask.to_le_bytes());
        }
        put_u16(out, self.runs.len().min(MAX_RUNS));
        for (p, at, n) in self.runs.iter().take(MAX_RUNS) {
            out.extend_from_slice(&p.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    pub fn decode(b: &[u8]) -> Option<Entry> {
        let mut r = Reader(b);
        if r.bytes(4)? != JOURNAL_MAGIC {
            return None;
        }
        let (number, unix_ms, flags) = (r.u64()?, r.u64()?, r.u8()?);
        let n = r.count16(16)?;
        if n > MAX_DROPS {
            return None;
        }
        let drops = (0..n)
            .map(|_| Some((r.u64()?, r.u64()?)))
            .collect::<Option<Vec<_>>>()?;
        let n = r.count16(12)?;
        let runs = (0..n)
            .map(|_| Some((r.u16()?, r.u64()?, r.u16()?)))
            .collect::<Option<Vec<_>>>()?;
        let sane = runs
            .iter()
            .all(|(p, _, n)| usize::from(*p) < MAX_PARTITIONS && *n > 0);
        (sane && r.0.is_empty() && number > 0).then_some(Entry {
            number,
            unix_ms,
            flags,
            drops,
            runs,
        })
    }

    /// Whether worker `w` did not get entry `number` (reported here).
    pub fn dropped_for(&self, number: u64, w: usize) -> bool {
        let bit = 1u64 << w.min(63);
        self.drops
            .iter()
            .any(|(n, mask)| *n == number && mask & bit != 0)
    }
}

/// The topic, as a survivor reads it (`ingest::replay`).
pub trait TopicReader: Send + Sync {
    /// (partition, low, high watermark) of every partition of the topic.
    fn partitions(&self, deadline: Instant) -> Result<Vec<(i32, i64, i64)>, ResumeRefusal>;
    /// For each (partition, from offset, to offset exclusive): its records
    /// in order, validated as the ingest thread does, with the positions
    /// the ingest thread gives them; at most `max_bytes` in all.
    fn read(
        &self,
        ranges: &[(i32, i64, i64)],
        deadline: Instant,
        max_bytes: u64,
    ) -> Result<Vec<Batch>, ResumeRefusal>;
}

/// Where the journal goes (Redis, in `link::recovery`): one entry, by a
/// short deadline. False: not written (the survivor will see the hole).
pub trait JournalStore: Send {
    fn append(&mut self, entry: &[u8]) -> bool;
}

/// The node's journal: entry numbers, drops to report, the store. One
/// lock for every ingest source, held from numbering a batch until it is
/// in every worker's inbox, so every worker takes the entries in number
/// order.
pub struct Journal {
    inner: std::sync::Mutex<JournalState>,
}

pub struct JournalState {
    next: u64,
    drops: Vec<(u64, u64)>,
    store: Box<dyn JournalStore>,
    buf: Vec<u8>,
}

impl Journal {
    pub fn new(store: Box<dyn JournalStore>) -> Journal {
        Journal {
            inner: std::sync::Mutex::new(JournalState {
                next: 1,
                drops: Vec::new(),
                store,
                buf: Vec::with_capacity(64 << 10),
            }),
        }
    }

    pub fn lock(&self) -> std::sync::MutexGuard<'_, JournalState> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl JournalState {
    /// Number `batch` and append its entry, before it is handed out (the
    /// batch goes out whatever the store says). `flags`: `STATE_BEFORE`.
    pub fn write(&mut self, batch: &mut Batch, flags: u8, unix_ms: u64) -> bool {
        let number = self.next;
        self.next += 1;
        batch.number = number;
        let mut e = Entry::of(number, unix_ms, flags, batch);
        e.drops = std::mem::take(&mut self.drops);
        // Drops are reported by the entry after the one dropped (one batch
        // goes out per entry, under the lock): at most one here.
        e.encode(&mut self.buf);
        self.store.append(&self.buf)
    }

    /// Entry `number` did not reach the workers in `mask` (reported in the
    /// next entry).
    pub fn dropped(&mut self, number: u64, mask: u64) {
        if mask != 0 {
            self.drops.push((number, mask));
        }
    }
}

/// What a dead worker's records say after one of its checkpoints, as a
/// survivor rebuilt it once for every session recovered from that
/// checkpoint (shared: the records are read, proven and copied once per
/// checkpoint, not once per session): the records that worker took after
/// the checkpoint in its order (as far as the journal proves), the records
/// after those in partition order, and where they end (the cut the
/// survivor's own stream joins at).
pub struct Replay {
    pub proven: Batch,
    pub tail: Batch,
    /// Last position per partition of everything above, by partition.
    pub cut: Vec<(i32, u64)>,
    /// The checkpoint's time: a permission change this node applied since
    /// (less a margin) may have reached the dead node in the replayed span.
    pub since_unix_ms: u64,
}

/// One session to recover from a `Replay`: who it is, its seq at the dead
/// worker's checkpoint, and the client's seq (it has everything up to
/// there), for the connection whose Resume asked.
pub struct Recovering {
    pub conn: ConnKey,
    pub identity: Identity,
    pub checkpoint_seq: u64,
    pub client_seq: u64,
}

/// One worker's checkpoint: at a batch boundary, the last journal entry it
/// had taken, where its stream stood, and every session it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    pub worker: u16,
    /// The last journal entry this worker had taken (0: none yet).
    pub number: u64,
    pub unix_ms: u64,
    /// The last position taken per partition, by partition (as `cut`).
    pub cut: Vec<(u16, u64)>,
    /// (session id, last seq, version), sorted by session id.
    pub sessions: Vec<(SessionId, u64, u32)>,
}

/// The bytes of one session in a checkpoint.
pub const SESSION_BYTES: usize = 16 + 8 + 4;

/// Writes checkpoints into a buffer allocated once (the worker's event
/// path allocates nothing): `begin`, one `session` per session in id order,
/// `finish`.
pub struct CheckpointWriter;

impl CheckpointWriter {
    /// The header; `cut` is (partition, last position) by partition.
    pub fn begin(
        out: &mut Vec<u8>,
        worker: u16,
        number: u64,
        unix_ms: u64,
        cut: impl Iterator<Item = (u16, u64)>,
    ) {
        out.clear();
        out.extend_from_slice(CHECKPOINT_MAGIC);
        out.extend_from_slice(&worker.to_le_bytes());
        out.extend_from_slice(&number.to_le_bytes());
        out.extend_from_slice(&unix_ms.to_le_bytes());
        let at = out.len();
        out.extend_from_slice(&[0, 0]);
        let mut n = 0u16;
        for (p, pos) in cut.take(MAX_PARTITIONS) {
            out.extend_from_slice(&p.to_le_bytes());
            out.extend_from_slice(&pos.to_le_bytes());
            n += 1;
        }
        out[at..at + 2].copy_from_slice(&n.to_le_bytes());
        out.extend_from_slice(&[0; 4]); // the session count, set by `finish`
    }

    /// One session; false (nothing written) if `out` has no room left.
    pub fn session(out: &mut Vec<u8>, id: &SessionId, seq: u64, version: u32) -> bool {
        if out.capacity() - out.len() < SESSION_BYTES {
            return false;
        }
        out.extend_from_slice(&id_bytes(id));
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&version.to_le_bytes());
        true
    }

    /// Set the session count (`sessions_at` is `out.len()` after `begin`).
    pub fn finish(out: &mut [u8], sessions_at: usize, count: u32) {
        out[sessions_at - 4..sessions_at].copy_from_slice(&count.to_le_bytes());
    }
}

impl Checkpoint {
    pub fn decode(b: &[u8]) -> Option<Checkpoint> {
        let mut r = Reader(b);
        if r.bytes(4)? != CHECKPOINT_MAGIC {
            return None;
        }
        let (worker, number, unix_ms) = (r.u16()?, r.u64()?, r.u64()?);
        let n = r.count16(10)?;
        if n > MAX_PARTITIONS {
            return None;
        }
        let cut = (0..n)
            .map(|_| Some((r.u16()?, r.u64()?)))
            .collect::<Option<Vec<_>>>()?;
        if !cut.windows(2).all(|w| w[0].0 < w[1].0)
            || cut.iter().any(|(p, _)| usize::from(*p) >= MAX_PARTITIONS)
        {
            return None;
        }
        let n = r.count32(SESSION_BYTES)?;
        let mut sessions = Vec::with_capacity(n);
        for _ in 0..n {
            let id = id_from(r.bytes(16)?.try_into().ok()?);
            sessions.push((id, r.u64()?, r.u32()?));
        }
        // Written in the worker's slot order (no sort on the worker).
        sessions.sort_unstable_by_key(|s| s.0);
        if !sessions.windows(2).all(|w| w[0].0 < w[1].0) || !r.0.is_empty() {
            return None;
        }
        Some(Checkpoint {
            worker,
            number,
            unix_ms,
            cut,
            sessions,
        })
    }

    /// (seq, version) of session `id` at this checkpoint.
    pub fn session(&self, id: &SessionId) -> Option<(u64, u32)> {
        let i = self.sessions.binary_search_by(|s| s.0.cmp(id)).ok()?;
        Some((self.sessions[i].1, self.sessions[i].2))
    }
}

/// A session as a survivor needs it: where it lived and who it is.
#[derive(Debug)]
pub struct Summary {
    /// The node process that held it (`INSTANCE_LEN` hex characters).
    pub instance: String,
    pub worker: u16,
    /// The holder's advertised link address when it wrote this (for a
    /// reader of the store; death is proven by `instance`'s claim).
    pub link: String,
    /// Bumped whenever its entitlement inputs changed (a checkpoint names
    /// the version it was taken at; a survivor needs both to agree).
    pub version: u32,
    pub identity: Identity,
}

impl Summary {
    pub fn encode(
        instance: &str,
        worker: u16,
        link: &str,
        version: u32,
        identity: &Identity,
        out: &mut Vec<u8>,
    ) {
        let mut moved_bytes = Vec::new();
        let m = Moved {
            identity: identity.clone(),
            seq: 0,
            events: Vec::new(),
            tail: Vec::new(),
            cut: Vec::new(),
        };
        moved::encode_answer(&Ok(m), &mut moved_bytes);
        out.clear();
        out.extend_from_slice(SUMMARY_MAGIC);
        let mut inst = [b'0'; INSTANCE_LEN];
        let n = instance.len().min(INSTANCE_LEN);
        inst[..n].copy_from_slice(&instance.as_bytes()[..n]);
        out.extend_from_slice(&inst);
        out.extend_from_slice(&worker.to_le_bytes());
        put_u16(out, link.len().min(255));
        out.extend_from_slice(&link.as_bytes()[..link.len().min(255)]);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&moved_bytes);
    }

    pub fn decode(b: &[u8]) -> Option<Summary> {
        let mut r = Reader(b);
        if r.bytes(4)? != SUMMARY_MAGIC {
            return None;
        }
        let instance = std::str::from_utf8(r.bytes(INSTANCE_LEN)?).ok()?.to_owned();
        let worker = r.u16()?;
        let n = usize::from(r.u16()?);
        if n > 255 {
            return None;
        }
        let link = std::str::from_utf8(r.bytes(n)?).ok()?.to_owned();
        let version = r.u32()?;
        let Some(Ok(m)) = moved::decode_answer(r.0) else {
            return None;
        };
        Some(Summary {
            instance,
            worker,
            link,
            version,
            identity: m.identity,
        })
    }
}

/// A session id's 128 bits (the id is 32 lowercase hex characters).
pub fn id_bytes(id: &SessionId) -> [u8; 16] {
    let mut out = [0u8; 16];
    let s = id.as_str().as_bytes();
    for (i, o) in out.iter_mut().enumerate() {
        *o = (nibble(s[2 * i]) << 4) | nibble(s[2 * i + 1]);
    }
    out
}

fn id_from(b: [u8; 16]) -> SessionId {
    let v = u128::from_be_bytes(b);
    SessionId::on_node((v >> 104) as u16, (v >> 120) as u8, v)
}

fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => 0,
    }
}

fn put_u16(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
}

/// A record's place, as runs name it.
pub fn pos(partition: u16, at: u64) -> StreamPos {
    StreamPos {
        partition: i32::from(partition),
        at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::session::GuildAccess;
    use proto::{AppId, ChannelId, ServerId};

    fn entry() -> Entry {
        Entry {
            number: 7,
            unix_ms: 1_700_000_000_000,
            flags: STATE_BEFORE,
            drops: vec![(6, 0b10)],
            runs: vec![(0, 5 << 16, 3), (2, 9 << 16 | 1, 1)],
        }
    }

    fn checkpoint_bytes() -> Vec<u8> {
        let mut ids: Vec<SessionId> = (0..3u128)
            .map(|i| SessionId::on_node(4, 1, 1000 + i))
            .collect();
        ids.sort();
        let mut out = Vec::with_capacity(1024);
        CheckpointWriter::begin(&mut out, 1, 42, 5, [(0u16, 7u64 << 16), (3, 2)].into_iter());
        let at = out.len();
        for (i, id) in ids.iter().enumerate() {
            assert!(CheckpointWriter::session(&mut out, id, 10 + i as u64, 2));
        }
        CheckpointWriter::finish(&mut out, at, ids.len() as u32);
        out
    }

    fn identity() -> Identity {
        Identity {
            session_id: SessionId::on_node(4, 1, 77),
            application_id: AppId(9),
            bot_user_id: 10,
            intents: 513,
            shard: [0, 1],
            token_digest: [3; 32],
            guilds: vec![GuildAccess {
                id: ServerId(5),
                channels: vec![(ChannelId(6), 1024)],
                lease_until_ms: 99,
            }],
            user_json: r#"{"id":"10"}"#.into(),
        }
    }

    #[test]
    fn entries_round_trip_and_runs_follow_partitions() {
        let mut out = Vec::new();
        entry().encode(&mut out);
        assert_eq!(Entry::decode(&out), Some(entry()));
        assert!(entry().dropped_for(6, 1));
        assert!(!entry().dropped_for(6, 0));
        let mut b = Batch::with_capacity(8, 1024);
        for (p, o) in [(0, 1), (0, 2), (1, 1), (0, 3)] {
            b.push_at(b"x", StreamPos::kafka(p, o, 0));
        }
        let e = Entry::of(1, 0, 0, &b);
        assert_eq!(
            e.runs,
            vec![(0, 1 << 16, 2), (1, 1 << 16, 1), (0, 3 << 16, 1)]
        );
        b.push(b"y");
        let e = Entry::of(1, 0, 0, &b);
        assert_eq!((e.flags & FOREIGN, e.runs.len()), (FOREIGN, 0));
    }

    #[test]
    fn checkpoints_round_trip_and_find_sessions() {
        let c = Checkpoint::decode(&checkpoint_bytes()).unwrap();
        assert_eq!((c.worker, c.number, c.unix_ms), (1, 42, 5));
        assert_eq!(c.cut, vec![(0, 7 << 16), (3, 2)]);
        let id = c.sessions[1].0;
        assert_eq!(c.session(&id), Some((11, 2)));
        assert_eq!(c.session(&SessionId::on_node(4, 1, 5)), None);
        // A full buffer refuses a session instead of growing.
        let mut small = Vec::with_capacity(SESSION_BYTES - 1);
        assert!(!CheckpointWriter::session(&mut small, &id, 1, 1));
    }

    #[test]
    fn session_ids_survive_their_bytes() {
        let id = SessionId::on_node(65535, 255, u128::MAX);
        assert_eq!(id_from(id_bytes(&id)), id);
        let id = SessionId::on_node(3, 0, 12345);
        assert_eq!(id_from(id_bytes(&id)), id);
    }

    #[test]
    fn summaries_round_trip() {
        let mut out = Vec::new();
        Summary::encode(
            "ab".repeat(16).as_str(),
            3,
            "127.0.0.1:9",
            4,
            &identity(),
            &mut out,
        );
        let s = Summary::decode(&out).unwrap();
        assert_eq!(
            (s.worker, s.version, s.link.as_str()),
            (3, 4, "127.0.0.1:9")
        );
        assert_eq!(s.instance, "ab".repeat(16));
        assert_eq!(s.identity.session_id, identity().session_id);
        assert_eq!(s.identity.guilds[0].channels, identity().guilds[0].channels);
    }

    #[test]
    fn every_cut_of_every_blob_is_refused_without_panic() {
        let mut e = Vec::new();
        entry().encode(&mut e);
        let c = checkpoint_bytes();
        let mut s = Vec::new();
        Summary::encode(&"0".repeat(32), 0, "x", 1, &identity(), &mut s);
        for n in 0..e.len() {
            assert!(Entry::decode(&e[..n]).is_none(), "entry cut at {n}");
        }
        for n in 0..c.len() {
            assert!(
                Checkpoint::decode(&c[..n]).is_none(),
                "checkpoint cut at {n}"
            );
        }
        for n in 0..s.len() {
            assert!(Summary::decode(&s[..n]).is_none(), "summary cut at {n}");
        }
        // Trailing bytes too.
        e.push(0);
        assert!(Entry::decode(&e).is_none());
        // A forged session count allocates nothing.
        let mut forged = c.clone();
        let at = 4 + 2 + 8 + 8 + 2 + 2 * 10;
        forged[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Checkpoint::decode(&forged).is_none());
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_the_decoders_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = Entry::decode(&b);
            let _ = Checkpoint::decode(&b);
            let _ = Summary::decode(&b);
        }

        #[test]
        fn a_damaged_checkpoint_is_refused_or_read_without_panic(at in 0usize..200, byte in proptest::prelude::any::<u8>()) {
            let mut c = checkpoint_bytes();
            let i = at % c.len();
            c[i] = byte;
            let _ = Checkpoint::decode(&c);
        }
    }
}
