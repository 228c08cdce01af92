//! Unit tests of [`SessionRing`]: sizes, bounds (unsent count, bytes, held
//! history, slab exhaustion) and a property test that runs random
//! operations on three rings sharing one slab against a plain model (a deque
//! of held entries plus the unsent cursor), checking the invariants stated
//! at the top of `ring.rs` after every step.

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

fn rec(seq: u64, len: u32) -> RecordRef {
    RecordRef { pos: seq * 8, len }
}

fn entry(seq: u64, at_ms: u64, len: u32) -> Entry {
    Entry {
        record: rec(seq, len),
        seq,
        at_ms,
    }
}

#[test]
fn sizes() {
    assert_eq!(std::mem::size_of::<RecordRef>(), 16);
    assert_eq!(std::mem::size_of::<Entry>(), 32);
    assert_eq!(std::mem::size_of::<Slot>(), 24);
    assert_eq!(std::mem::size_of::<SessionRing>(), 64);
}

#[test]
fn idle_ring_holds_no_chunks() {
    let mut slab = RingSlab::new(4);
    let cfg = RingConfig::default();
    let mut r = SessionRing::new(&cfg, 1);
    assert_eq!(r.chunks_held(), 0);
    r.push(&mut slab, entry(2, 0, 10)).unwrap();
    assert_eq!(r.chunks_held(), 1);
    r.mark_sent(&slab, 1);
    r.expire(&mut slab, 200_000, 120_000);
    assert_eq!(r.chunks_held(), 0);
    assert_eq!(slab.free_count(), 4);
    assert_eq!(r.next_seq(), 3);
}

#[test]
fn full_at_max_unsent_and_history_drops_oldest_sent() {
    let mut slab = RingSlab::new(200);
    let cfg = RingConfig {
        max_unsent: 100,
        max_held: 150,
        max_unsent_bytes: u64::MAX,
    };
    let mut r = SessionRing::new(&cfg, 0);
    for s in 1..=100 {
        r.push(&mut slab, entry(s, s, 1)).unwrap();
    }
    assert_eq!(r.push(&mut slab, entry(101, 0, 1)), Err(PushError::Full));
    assert_eq!(r.fill_ratio(), 1.0);
    r.mark_sent(&slab, 100);
    for s in 101..=200 {
        r.push(&mut slab, entry(s, s, 1)).unwrap();
    }
    assert_eq!(r.len_held(), 150);
    assert_eq!(r.first_held_seq(), 51);
    assert_eq!(
        r.check_resume(49),
        Err(ReplayError::NotHeld {
            seq: 49,
            oldest_resumable: 50,
            last: 200
        })
    );
    r.rewind_for_resume(&mut slab, 50).unwrap();
    let seqs: Vec<u64> = r.unsent(&slab).map(|e| e.seq).collect();
    assert_eq!(seqs, (51..=200).collect::<Vec<_>>());
    // Rewinding may put more than max_unsent back in the queue; the
    // next push reports Full.
    assert_eq!(r.push(&mut slab, entry(201, 0, 1)), Err(PushError::Full));
    r.clear(&mut slab);
    assert_eq!(slab.free_count(), 200);
}

#[test]
fn byte_budget() {
    let mut slab = RingSlab::new(4);
    let cfg = RingConfig {
        max_unsent_bytes: 100,
        ..RingConfig::default()
    };
    let mut r = SessionRing::new(&cfg, 0);
    r.push(&mut slab, entry(1, 0, 60)).unwrap();
    assert_eq!(r.push(&mut slab, entry(2, 0, 41)), Err(PushError::Full));
    r.push(&mut slab, entry(2, 0, 40)).unwrap();
    assert_eq!(r.unsent_bytes(), 100);
    r.mark_sent(&slab, 1);
    assert_eq!(r.unsent_bytes(), 40);
    r.clear(&mut slab);
}

#[test]
fn no_chunks_leaves_ring_untouched() {
    let mut slab = RingSlab::new(1);
    let cfg = RingConfig::default();
    let mut r = SessionRing::new(&cfg, 0);
    // Seqs 1..CHUNK-1 fill the first chunk; seq CHUNK needs a second.
    let full = CHUNK_U64 - 1;
    for s in 1..=full {
        r.push(&mut slab, entry(s, 0, 1)).unwrap();
    }
    assert_eq!(
        r.push(&mut slab, entry(full + 1, 0, 1)),
        Err(PushError::NoChunks)
    );
    assert_eq!(r.last_seq(), full);
    r.check_invariants(&slab);
    r.clear(&mut slab);
}

/// The specification: a deque of held entries plus the unsent cursor.
#[derive(Debug)]
struct Model {
    held: VecDeque<Entry>,
    unsent: u64,
    last: u64,
    cfg: RingConfig,
}

impl Model {
    fn first(&self) -> u64 {
        self.held.front().map_or(self.last + 1, |e| e.seq)
    }
    fn unsent_entries(&self) -> Vec<Entry> {
        self.held
            .iter()
            .filter(|e| e.seq >= self.unsent)
            .copied()
            .collect()
    }
    fn chunks(&self) -> u32 {
        if self.held.is_empty() {
            0
        } else {
            (self.last / CHUNK_U64 - self.first() / CHUNK_U64 + 1) as u32
        }
    }
    fn chunks_after_push(&self, seq: u64) -> u32 {
        let first = if self.held.len() as u32 == self.cfg.max_held {
            self.held.get(1).map_or(seq, |e| e.seq)
        } else {
            self.held.front().map_or(seq, |e| e.seq)
        };
        (seq / CHUNK_U64 - first / CHUNK_U64 + 1) as u32
    }
}

#[derive(Debug, Clone)]
enum Op {
    Push {
        ring: usize,
        dt: u64,
        len: u32,
    },
    MarkSent {
        ring: usize,
        frac: u8,
    },
    Rewind {
        ring: usize,
        back: u64,
    },
    Ack {
        ring: usize,
        back: u64,
    },
    Expire {
        ring: usize,
        window: u64,
    },
    Clear {
        ring: usize,
    },
    /// Many pushes at once so chunks fill and the slab runs dry.
    Burst {
        ring: usize,
        n: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let ring = 0..3usize;
    prop_oneof![
        6 => (ring.clone(), 0..50u64, 0..40u32).prop_map(|(ring, dt, len)| Op::Push { ring, dt, len }),
        3 => (ring.clone(), any::<u8>()).prop_map(|(ring, frac)| Op::MarkSent { ring, frac }),
        1 => (ring.clone(), 0..300u64).prop_map(|(ring, back)| Op::Rewind { ring, back }),
        1 => (ring.clone(), 0..300u64).prop_map(|(ring, back)| Op::Ack { ring, back }),
        2 => (ring.clone(), 0..2000u64).prop_map(|(ring, window)| Op::Expire { ring, window }),
        1 => ring.clone().prop_map(|ring| Op::Clear { ring }),
        2 => (ring, 1..200u16).prop_map(|(ring, n)| Op::Burst { ring, n }),
    ]
}

fn model_push(m: &mut Model, free: u32, e: Entry) -> Result<(), PushError> {
    let unsent = m.unsent_entries();
    let bytes: u64 = unsent.iter().map(|e| u64::from(e.record.len)).sum();
    if unsent.len() as u32 >= m.cfg.max_unsent
        || bytes + u64::from(e.record.len) > m.cfg.max_unsent_bytes
    {
        return Err(PushError::Full);
    }
    if m.chunks_after_push(e.seq) > m.chunks() + free {
        return Err(PushError::NoChunks);
    }
    if m.held.len() as u32 == m.cfg.max_held {
        let dropped = m.held.pop_front().unwrap();
        assert!(dropped.seq < m.unsent);
    }
    m.held.push_back(e);
    m.last = e.seq;
    Ok(())
}

fn check(r: &SessionRing, m: &Model, slab: &RingSlab) {
    r.check_invariants(slab);
    assert_eq!(r.last_seq(), m.last);
    assert_eq!(r.first_held_seq(), m.first());
    assert_eq!(r.len_held() as usize, m.held.len());
    assert_eq!(
        r.held(slab).collect::<Vec<_>>(),
        m.held.iter().copied().collect::<Vec<_>>()
    );
    assert_eq!(r.unsent(slab).collect::<Vec<_>>(), m.unsent_entries());
    assert_eq!(r.len_unsent() as usize, m.unsent_entries().len());
    assert_eq!(r.chunks_held(), m.chunks());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ring_matches_model(
        ops in prop::collection::vec(op(), 1..200),
        slab_chunks in 1..12u32,
        max_held in 1..300u32,
        unsent_frac in 1..=100u32,
        byte_budget in prop_oneof![Just(u64::MAX), 40..3000u64],
        start in prop_oneof![Just(0u64), 0..1000u64],
    ) {
        let max_unsent = (max_held * unsent_frac / 100).max(1);
        let cfg = RingConfig { max_unsent, max_held, max_unsent_bytes: byte_budget };
        let mut slab = RingSlab::new(slab_chunks);
        let mut rings: Vec<SessionRing> = (0..3).map(|i| SessionRing::new(&cfg, start + i * 37)).collect();
        let mut models: Vec<Model> = (0..3).map(|i| Model {
            held: VecDeque::new(),
            unsent: start + i * 37 + 1,
            last: start + i * 37,
            cfg,
        }).collect();
        let mut now = 0u64;
        for op in ops {
            let free_model = |models: &Vec<Model>| slab_chunks - models.iter().map(|m| m.chunks()).sum::<u32>();
            match op {
                Op::Push { ring, dt, len } => {
                    now += dt;
                    let e = entry(rings[ring].next_seq(), now, len);
                    let free = free_model(&models);
                    let want = model_push(&mut models[ring], free, e);
                    prop_assert_eq!(rings[ring].push(&mut slab, e), want);
                }
                Op::Burst { ring, n } => {
                    for _ in 0..n {
                        now += 1;
                        let e = entry(rings[ring].next_seq(), now, 3);
                        let free = free_model(&models);
                        let want = model_push(&mut models[ring], free, e);
                        prop_assert_eq!(rings[ring].push(&mut slab, e), want);
                        if want.is_err() { break; }
                    }
                }
                Op::MarkSent { ring, frac } => {
                    let m = &mut models[ring];
                    let n = (m.unsent_entries().len() as u64 * u64::from(frac) / 255) as u32;
                    m.unsent += u64::from(n);
                    rings[ring].mark_sent(&slab, n);
                }
                Op::Rewind { ring, back } => {
                    let m = &mut models[ring];
                    let seq = m.last.saturating_sub(back);
                    let ok = seq + 1 >= m.first() && seq <= m.last;
                    let got = rings[ring].rewind_for_resume(&mut slab, seq);
                    prop_assert_eq!(got.is_ok(), ok);
                    if ok {
                        m.held.retain(|e| e.seq > seq);
                        m.unsent = seq + 1;
                    }
                }
                Op::Ack { ring, back } => {
                    let m = &mut models[ring];
                    let seq = m.last.saturating_sub(back);
                    let unsent = m.unsent;
                    m.held.retain(|e| e.seq > seq || e.seq >= unsent);
                    rings[ring].ack(&mut slab, seq);
                }
                Op::Expire { ring, window } => {
                    let m = &mut models[ring];
                    while let Some(e) = m.held.front() {
                        if e.seq < m.unsent && now.saturating_sub(e.at_ms) > window {
                            m.held.pop_front();
                        } else {
                            break;
                        }
                    }
                    rings[ring].expire(&mut slab, now, window);
                }
                Op::Clear { ring } => {
                    let m = &mut models[ring];
                    m.held.clear();
                    m.unsent = m.last + 1;
                    rings[ring].clear(&mut slab);
                }
            }
            for (r, m) in rings.iter().zip(&models) {
                check(r, m, &slab);
            }
            prop_assert_eq!(slab.free_count(), free_model(&models));
        }
        for r in &mut rings {
            r.clear(&mut slab);
            prop_assert_eq!(r.chunks_held(), 0);
        }
        prop_assert_eq!(slab.free_count(), slab_chunks);
    }
}
