//! A session on its way from one node to another (docs/cluster.md): what
//! the node taking it asks (`Take`), what the holder answers (`Moved`:
//! identity, the client's seq, the events still held after it, and where
//! the holder's stream stood), and their bytes on the node-to-node link.
//! Sans-IO: no sockets here. Every length read from the wire is checked
//! against what is left of the frame before anything is allocated, so a
//! broken or hostile peer costs at most one frame (`MAX_FRAME`).

use proto::{AppId, ChannelId, ServerId};
use shards::SessionId;

use crate::delivery::resume::ResumeRefusal;
use crate::delivery::wire::Reader;
use crate::protocol::session::{GuildAccess, Identity};

/// Largest answer a node accepts (a ring's worth of events is far below:
/// `events.max_unsent_bytes` is 16 MiB by default, plus framing).
pub const MAX_FRAME: usize = 64 << 20;
/// Digests of the holder's last records sent for lining the streams up.
pub const TAIL: usize = 64;
/// Partitions a stream cut can name (Kafka partition ids below this).
pub const MAX_PARTITIONS: usize = 1024;
/// The request's size on the wire.
pub const TAKE_LEN: usize = 4 + 32 + 32 + 8 + 4 + 8 + 8;
/// The holder lets go only this long before the taker's deadline (the
/// answer must still reach it; node clocks are assumed within this).
pub const DEADLINE_MARGIN_MS: u64 = 100;
const MAGIC: &[u8; 4] = b"GWT1";
const MAX_USER_JSON: usize = 64 << 10;

/// "Give me this session": sent by the node a Resume reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Take {
    pub session_id: SessionId,
    /// SHA-256 of the token the client resumed with (never the token).
    pub token_digest: [u8; 32],
    /// The client's seq: it has everything up to here.
    pub seq: u64,
    /// What the taker can hold: the holder refuses (and keeps the
    /// session) if the events after `seq` are more.
    pub max_entries: u32,
    pub max_bytes: u64,
    /// Unix ms after which the taker no longer waits: a holder that gets
    /// the request later (it was frozen, the link slow) keeps the session.
    pub deadline_unix_ms: u64,
}

impl Take {
    /// Whether the holder may still let go at `now_unix_ms`.
    pub fn in_time(&self, now_unix_ms: u64) -> bool {
        now_unix_ms.saturating_add(DEADLINE_MARGIN_MS) < self.deadline_unix_ms
    }
}

/// A session as it leaves its holder.
#[derive(Debug)]
pub struct Moved {
    pub identity: Identity,
    /// The client's seq; `events[i]` is dispatch `seq + 1 + i`.
    pub seq: u64,
    /// (t, d) of each dispatch after `seq`, in order.
    pub events: Vec<(String, Vec<u8>)>,
    /// Digests (`digest`) of the last records the holder's worker had
    /// taken from the stream when it let go, oldest first (at most `TAIL`).
    pub tail: Vec<u64>,
    /// For a partitioned stream (Kafka): the last position the holder's
    /// worker had taken in each partition it had seen (`StreamPos::at`),
    /// sorted by partition. Empty: the stream has no positions.
    pub cut: Vec<(i32, u64)>,
}

/// The identity of a stream record, equal on every node that received the
/// same bytes (FNV-1a, 64 bits, over the record body).
pub fn digest(body: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in body {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Take {
    pub fn encode(&self) -> [u8; TAKE_LEN] {
        let mut out = [0u8; TAKE_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4..36].copy_from_slice(self.session_id.as_str().as_bytes());
        out[36..68].copy_from_slice(&self.token_digest);
        out[68..76].copy_from_slice(&self.seq.to_le_bytes());
        out[76..80].copy_from_slice(&self.max_entries.to_le_bytes());
        out[80..88].copy_from_slice(&self.max_bytes.to_le_bytes());
        out[88..96].copy_from_slice(&self.deadline_unix_ms.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8]) -> Option<Take> {
        if b.len() != TAKE_LEN || &b[..4] != MAGIC {
            return None;
        }
        let mut r = Reader(&b[4..]);
        let session_id = SessionId::parse(std::str::from_utf8(r.bytes(32)?).ok()?)?;
        Some(Take {
            session_id,
            token_digest: r.bytes(32)?.try_into().ok()?,
            seq: r.u64()?,
            max_entries: r.u32()?,
            max_bytes: r.u64()?,
            deadline_unix_ms: r.u64()?,
        })
    }
}

/// A node instance is 32 lowercase hex characters (random per process).
pub const INSTANCE_LEN: usize = 32;

/// A node's "I do not hold it" (`UnknownSession`), signed with the
/// answering process's instance (`INSTANCE_LEN` hex characters): a
/// survivor whose summary names that very process knows the session ended
/// there, without waiting for the process to die (it is alive: it
/// answered). Nodes before this answered the status byte alone, and take
/// this form for a malformed answer (node_unreachable, then recovery: the
/// same op 9 or recovery a bot saw before, later). Any other answer, and
/// an `instance` that is not one, are left as they are.
pub fn sign_unknown(instance: &str, answer: &mut Vec<u8>) {
    if answer[..] == [UNKNOWN] && is_instance(instance.as_bytes()) {
        answer.extend_from_slice(instance.as_bytes());
    }
}

/// The instance an `UnknownSession` answer is signed with, if any.
pub fn answering_instance(b: &[u8]) -> Option<&str> {
    match b.split_first()? {
        (&UNKNOWN, rest) if is_instance(rest) => std::str::from_utf8(rest).ok(),
        _ => None,
    }
}

/// The status byte of an `UnknownSession` answer.
const UNKNOWN: u8 = 1 + ResumeRefusal::UnknownSession.index() as u8;

fn is_instance(b: &[u8]) -> bool {
    b.len() == INSTANCE_LEN && b.iter().all(u8::is_ascii_hexdigit)
}

/// The holder's answer: a status byte (0: the session follows), then the
/// session. `Err` carries why it stays (or is gone).
pub fn encode_answer(answer: &Result<Moved, ResumeRefusal>, out: &mut Vec<u8>) {
    out.clear();
    let m = match answer {
        Err(why) => {
            out.push(1 + why.index() as u8);
            return;
        }
        Ok(m) => m,
    };
    out.push(0);
    let id = &m.identity;
    out.extend_from_slice(id.session_id.as_str().as_bytes());
    for v in [id.application_id.0, id.bot_user_id, id.intents, m.seq] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for v in id.shard {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&id.token_digest);
    put_bytes(out, id.user_json.as_bytes());
    put_u32(out, id.guilds.len());
    for g in &id.guilds {
        out.extend_from_slice(&g.id.0.to_le_bytes());
        out.extend_from_slice(&g.lease_until_ms.to_le_bytes());
        put_u32(out, g.channels.len());
        for (c, p) in &g.channels {
            out.extend_from_slice(&c.0.to_le_bytes());
            out.extend_from_slice(&p.to_le_bytes());
        }
    }
    put_u32(out, m.events.len());
    for (t, d) in &m.events {
        put_bytes(out, t.as_bytes());
        put_bytes(out, d);
    }
    put_u32(out, m.tail.len());
    for d in &m.tail {
        out.extend_from_slice(&d.to_le_bytes());
    }
    put_u32(out, m.cut.len());
    for (p, at) in &m.cut {
        out.extend_from_slice(&p.to_le_bytes());
        out.extend_from_slice(&at.to_le_bytes());
    }
}

/// Reads an answer; `None` if it is malformed (treated as no answer).
pub fn decode_answer(b: &[u8]) -> Option<Result<Moved, ResumeRefusal>> {
    let (&status, rest) = b.split_first()?;
    if status != 0 {
        let why = ResumeRefusal::from_index(usize::from(status) - 1)?;
        return (rest.is_empty() || answering_instance(b).is_some()).then_some(Err(why));
    }
    let mut r = Reader(rest);
    let session_id = SessionId::parse(std::str::from_utf8(r.bytes(32)?).ok()?)?;
    let (app, bot, intents, seq) = (r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let shard = [r.u32()?, r.u32()?];
    if shard[1] == 0 || shard[0] >= shard[1] {
        return None;
    }
    let token_digest: [u8; 32] = r.bytes(32)?.try_into().ok()?;
    let user = r.sized()?;
    if user.len() > MAX_USER_JSON {
        return None;
    }
    let user_json: std::sync::Arc<str> = std::str::from_utf8(user).ok()?.into();
    let n = r.count32(16 + 4)?;
    let mut guilds = Vec::with_capacity(n);
    for _ in 0..n {
        let (id, lease_until_ms) = (r.u64()?, r.u64()?);
        let k = r.count32(16)?;
        let mut channels = Vec::with_capacity(k);
        for _ in 0..k {
            channels.push((ChannelId(r.u64()?), r.u64()?));
        }
        // The receiver looks channels and servers up by binary search.
        if !channels.windows(2).all(|w| w[0].0 < w[1].0) {
            return None;
        }
        guilds.push(GuildAccess {
            id: ServerId(id),
            channels,
            lease_until_ms,
        });
    }
    if !guilds.windows(2).all(|w| w[0].id < w[1].id) {
        return None;
    }
    let n = r.count32(8)?;
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        let t = std::str::from_utf8(r.sized()?).ok()?;
        if t.len() > crate::delivery::record::MAX_T {
            return None;
        }
        events.push((t.to_owned(), r.sized()?.to_vec()));
    }
    let n = r.count32(8)?;
    if n > TAIL {
        return None;
    }
    let tail = (0..n).map(|_| r.u64()).collect::<Option<Vec<u64>>>()?;
    let n = r.count32(12)?;
    if n > MAX_PARTITIONS {
        return None;
    }
    let cut = (0..n)
        .map(|_| Some((r.u32()? as i32, r.u64()?)))
        .collect::<Option<Vec<(i32, u64)>>>()?;
    let partitions_ok = cut
        .iter()
        .all(|(p, _)| (0..MAX_PARTITIONS as i32).contains(p));
    if !partitions_ok || !cut.windows(2).all(|w| w[0].0 < w[1].0) || !r.0.is_empty() {
        return None;
    }
    Some(Ok(Moved {
        identity: Identity {
            session_id,
            application_id: AppId(app),
            bot_user_id: bot,
            intents,
            shard,
            token_digest,
            guilds,
            user_json,
        },
        seq,
        events,
        tail,
        cut,
    }))
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len());
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Moved {
        Moved {
            identity: Identity {
                session_id: SessionId::on_node(3, 1, 99),
                application_id: AppId(7),
                bot_user_id: 8,
                intents: 1 << 9,
                shard: [1, 4],
                token_digest: [5; 32],
                guilds: vec![GuildAccess {
                    id: ServerId(10),
                    channels: vec![(ChannelId(11), 1024), (ChannelId(12), 0)],
                    lease_until_ms: 1234,
                }],
                user_json: r#"{"id":"8"}"#.into(),
            },
            seq: 41,
            events: vec![
                ("MESSAGE_CREATE".into(), br#"{"a":1}"#.to_vec()),
                ("TYPING_START".into(), b"{}".to_vec()),
            ],
            tail: vec![1, 2, 3],
            cut: vec![(0, 7 << 16), (2, 9 << 16 | 1)],
        }
    }

    #[test]
    fn an_unknown_answer_is_signed_with_the_answering_instance() {
        let inst = "0123456789abcdef0123456789abcdef";
        let mut out = Vec::new();
        encode_answer(&Err(ResumeRefusal::UnknownSession), &mut out);
        sign_unknown(inst, &mut out);
        assert!(matches!(
            decode_answer(&out),
            Some(Err(ResumeRefusal::UnknownSession))
        ));
        assert_eq!(answering_instance(&out), Some(inst));
        // Unsigned (a node before this), and other refusals: no instance.
        encode_answer(&Err(ResumeRefusal::UnknownSession), &mut out);
        assert_eq!(answering_instance(&out), None);
        assert!(matches!(
            decode_answer(&out),
            Some(Err(ResumeRefusal::UnknownSession))
        ));
        let mut other = Vec::new();
        encode_answer(&Err(ResumeRefusal::NoRoom), &mut other);
        other.extend_from_slice(inst.as_bytes());
        assert_eq!(answering_instance(&other), None);
        assert!(
            decode_answer(&other).is_none(),
            "only unknown_session is signed"
        );
        // A bad signature is a malformed answer, never a proof.
        encode_answer(&Err(ResumeRefusal::UnknownSession), &mut out);
        sign_unknown(inst, &mut out);
        let last = out.len() - 1;
        out[last] = b'g';
        assert_eq!(answering_instance(&out), None);
        assert!(decode_answer(&out).is_none());
        out.truncate(last);
        assert!(decode_answer(&out).is_none());
        // An instance that is not one is not sent; other answers are not signed.
        encode_answer(&Err(ResumeRefusal::UnknownSession), &mut out);
        sign_unknown("not-an-instance", &mut out);
        assert_eq!(out.len(), 1);
        encode_answer(&Err(ResumeRefusal::NoRoom), &mut out);
        sign_unknown(inst, &mut out);
        assert_eq!(out.len(), 1);
    }

    #[test]
    fn take_round_trips_and_rejects_garbage() {
        let t = Take {
            session_id: SessionId::on_node(2, 0, 5),
            token_digest: [9; 32],
            seq: 17,
            max_entries: 5000,
            max_bytes: 1 << 24,
            deadline_unix_ms: 1_700_000_000_000,
        };
        assert!(t.in_time(1_700_000_000_000 - 101));
        assert!(!t.in_time(1_700_000_000_000 - 100));
        assert_eq!(Take::decode(&t.encode()), Some(t.clone()));
        let mut bad = t.encode();
        bad[0] = b'X';
        assert_eq!(Take::decode(&bad), None);
        assert_eq!(Take::decode(&t.encode()[..TAKE_LEN - 1]), None);
        let mut bad = t.encode();
        bad[4] = b'Z'; // not a session id
        assert_eq!(Take::decode(&bad), None);
    }

    #[test]
    fn answer_round_trips() {
        let mut out = Vec::new();
        encode_answer(&Ok(sample()), &mut out);
        let back = decode_answer(&out).unwrap().unwrap();
        let want = sample();
        assert_eq!(back.identity.session_id, want.identity.session_id);
        assert_eq!(
            back.identity.guilds[0].channels,
            want.identity.guilds[0].channels
        );
        assert_eq!(&*back.identity.user_json, &*want.identity.user_json);
        assert_eq!(
            (back.seq, back.events, back.tail),
            (41, want.events, want.tail)
        );
        assert_eq!(back.cut, want.cut);
        for why in ResumeRefusal::ALL {
            encode_answer(&Err(why), &mut out);
            assert_eq!(decode_answer(&out).unwrap().unwrap_err(), why);
        }
    }

    #[test]
    fn every_cut_of_an_answer_is_refused_without_panic() {
        let mut out = Vec::new();
        encode_answer(&Ok(sample()), &mut out);
        for n in 0..out.len() {
            assert!(
                decode_answer(&out[..n]).is_none_or(|r| r.is_err()),
                "cut at {n}"
            );
        }
        // A forged huge count is refused before anything is allocated.
        let mut forged = out.clone();
        let at = 1 + 32 + 32 + 32 + 4 + 10; // the guild count after user_json
        forged[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_answer(&forged).is_none());
        assert!(decode_answer(&[200]).is_none());
        assert!(decode_answer(&[1, 0]).is_none());
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_the_decoders_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = decode_answer(&b);
            let _ = Take::decode(&b);
        }

        #[test]
        fn a_damaged_answer_is_refused_or_read_without_panic(at in 0usize..200, byte in proptest::prelude::any::<u8>()) {
            let mut out = Vec::new();
            encode_answer(&Ok(sample()), &mut out);
            let i = at % out.len();
            out[i] = byte;
            let _ = decode_answer(&out);
        }
    }

    #[test]
    fn digest_is_fnv1a() {
        assert_eq!(digest(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(digest(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
