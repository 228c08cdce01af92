//! Proof that the steady-state event path allocates nothing: ingest decode,
//! entitlement filter, arena and ring append, frame header build and send
//! submission (and, for a quarter of the sessions, zlib-stream / zstd-stream
//! compression into a reused buffer), run many times under a counting
//! allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts allocations made by the current thread only, so other tests
/// running in parallel do not disturb the count.
pub struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator unchanged (counting
// on the side allocates nothing), so its guarantees are the system's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(|a| a.get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::fanout::{EventIn, FanOut, FanOutConfig, Stamp};
    use crate::delivery::latency::{self, DeliveryLatency};
    use crate::delivery::sendpath::{self, SendPool};
    use crate::protocol::intents::{self, perm};
    use crate::protocol::session::{GuildAccess, Identity};
    use crate::worker::mail::ConnKey;
    use net::uring::{Ring, RingConfig};
    use shards::SessionId;

    const SERVER: u64 = 175928847299117063;
    const CHANNEL: u64 = 42;

    #[test]
    fn steady_state_event_path_allocates_nothing() {
        let sessions = 200u32;
        let mut fan = FanOut::new(
            FanOutConfig {
                arena_bytes: 256 << 10,
                ring_chunks: 4096,
                ring: ringbuf::RingConfig::default(),
                resume_window_ms: 120_000,
            },
            sessions as usize,
        )
        .unwrap();
        for i in 0..sessions {
            // Half with MESSAGE_CONTENT, half without (the redacted variant).
            let content = if i % 2 == 0 {
                intents::MESSAGE_CONTENT
            } else {
                0
            };
            let id = Identity {
                session_id: SessionId::new(0, i as u128 + 1),
                application_id: proto::AppId(i as u64),
                bot_user_id: 1000 + i as u64,
                intents: intents::GUILDS | intents::GUILD_MESSAGES | content,
                shard: [0, 1],
                token_digest: [0; 32],
                guilds: vec![GuildAccess {
                    id: proto::ServerId(SERVER),
                    channels: vec![(proto::ChannelId(CHANNEL), perm::VIEW_CHANNEL)],
                    lease_until_ms: u64::MAX,
                }],
                user_json: "{}".into(),
            };
            fan.create(
                Box::new(id),
                ConnKey {
                    ring: 0,
                    gen: 1,
                    slot: i,
                },
            );
        }
        let mut ring = Ring::new(&RingConfig {
            sq_entries: 256,
            cq_entries: 1024,
            fixed_files: 16,
            recv_buffers: 8,
            recv_buffer_size: 64,
            coop_taskrun: true,
        })
        .unwrap();
        let mut pool = SendPool::new(sessions as u16);
        let mut reader = ingest::FrameReader::new();
        let mut frames = Vec::new();
        let d = br#"{"id":"1","channel_id":"42","content":"hello there","embeds":[],"attachments":[],"author":{"id":"9","username":"u"}}"#;
        // Fewer than a send batch per round, so every ring drains each round.
        for _ in 0..20 {
            ingest::encode_parts(
                "MESSAGE_CREATE",
                SERVER,
                CHANNEL,
                intents::GUILD_MESSAGES,
                0,
                1,
                ingest::FLAG_HAS_CONTENT,
                &[7],
                d,
                &mut frames,
            );
        }
        let mut queued: Vec<ConnKey> = Vec::with_capacity(sessions as usize);
        // The delivery latency histograms, as a worker keeps them.
        let timing = DeliveryLatency::default();
        let mut mentions: Vec<u64> = Vec::with_capacity(128);
        let mut completions = Vec::with_capacity(4096);
        // Every fourth session uses transport compression (alternating zlib
        // and zstd): its stream and output buffer are made at session start.
        use crate::protocol::compress::{Compressor, Kind};
        let mut compressed: Vec<(Compressor, Vec<u8>)> = (0..sessions.div_ceil(4))
            .map(|i| {
                let kind = if i % 2 == 0 { Kind::Zlib } else { Kind::Zstd };
                (Compressor::new(kind, None).unwrap(), Vec::new())
            })
            .collect();
        let mut round = |fan: &mut FanOut, pool: &mut SendPool, ring: &mut Ring| {
            reader.push(&frames);
            while let Some(rec) = reader.next() {
                let rec = rec.unwrap();
                mentions.clear();
                mentions.extend(rec.mentions().iter().map(|m| m.to_native()));
                let ev = EventIn {
                    t: rec.event_type(),
                    server_id: proto::ServerId(rec.server_id()),
                    channel_id: proto::ChannelId(rec.channel_id()),
                    intent: rec.intent(),
                    permissions: rec.permissions(),
                    has_content: rec.has_content(),
                    addressed: rec.is_addressed(),
                    mentions: &mentions,
                    d: rec.d(),
                    stamp: Stamp {
                        commit_ns: rec.commit_unix_ns(),
                        take_ns: 0,
                    },
                }
                .taken_at(latency::unix_ns());
                queued.clear();
                let out = fan.deliver(
                    &ev,
                    0,
                    0,
                    |k| queued.push(k),
                    |_, _| panic!("no overflow expected"),
                );
                assert_eq!(out.recipients, sessions);
                timing.fanned_out(ev.stamp, latency::unix_ns(), u64::from(out.recipients));
            }
            // One vectored send per recipient, submitted to a real ring.
            for (i, k) in queued.iter().enumerate() {
                if k.slot % 4 == 0 {
                    let (c, out) = &mut compressed[k.slot as usize / 4];
                    out.clear();
                    let s = fan.get(proto::SessionIdx(k.slot)).unwrap();
                    let done =
                        sendpath::build_compressed(c, &s.ring, &fan.slab, &fan.arena, out).unwrap();
                    assert!(done.entries > 0 && !done.lost);
                    let now = latency::unix_ns();
                    let e = done.entries as usize;
                    let s = fan.get_mut(proto::SessionIdx(k.slot)).unwrap();
                    let n = timing.frames_done(
                        &done.stamps[..e],
                        &done.seqs[..e],
                        &mut s.timed_seq,
                        now,
                        now,
                    );
                    timing.sent(n, now, now);
                    // SAFETY: `out` lives in `compressed`, which outlives the submission and its completion; this test counts allocations, not the bytes that reach the socket.
                    unsafe { ring.send(0, out.as_ptr(), out.len() as u32, i as u64) };
                    fan.mark_sent(proto::SessionIdx(k.slot), done.entries);
                    continue;
                }
                let id = pool.take().unwrap();
                let slot = pool.slot(id);
                let s = fan.get(proto::SessionIdx(k.slot)).unwrap();
                let n =
                    sendpath::build(slot, &[], Some((&s.ring, &fan.slab)), &fan.arena, 0).unwrap();
                assert!(n > 0);
                let entries = slot.entries;
                slot.submit_ns = latency::unix_ns();
                // SAFETY: `slot.msg` and the buffers it points to live in the pool and the fan-out's arena, which outlive the submission and its completion (the slot may be rebuilt for the next recipient before the kernel reads it: this test counts allocations, not the bytes sent).
                unsafe { ring.sendmsg_nowait(0, &slot.msg, i as u64) };
                let e = entries as usize;
                let now = latency::unix_ns();
                let s = fan.get_mut(proto::SessionIdx(k.slot)).unwrap();
                let n = timing.frames_done(
                    &slot.stamps[..e],
                    &slot.seqs[..e],
                    &mut s.timed_seq,
                    slot.submit_ns,
                    now,
                );
                timing.sent(n, slot.submit_ns, now);
                pool.put(id);
                fan.mark_sent(proto::SessionIdx(k.slot), entries);
            }
            ring.submit().unwrap();
            completions.clear();
            ring.drain(&mut completions);
            for k in &queued {
                fan.ack(proto::SessionIdx(k.slot), u64::MAX);
            }
        };
        // Warm up: buffers reach their steady sizes, the arena wraps once.
        for _ in 0..40 {
            round(&mut fan, &mut pool, &mut ring);
        }
        let probe = allocations();
        std::hint::black_box(vec![0u8; 16]);
        assert!(
            allocations() > probe,
            "the counter sees this thread's allocations"
        );
        let before = allocations();
        for _ in 0..100 {
            round(&mut fan, &mut pool, &mut ring);
        }
        let after = allocations();
        assert_eq!(
            after - before,
            0,
            "allocations on the steady-state event path"
        );
        assert!(
            fan.arena.stats().wraps > 0,
            "the arena wrapped during the test"
        );
        // Every delivery timed once, in every stage.
        let deliveries = 140 * 20 * u64::from(sessions);
        for s in &timing.stages {
            assert_eq!(s.count(), deliveries);
        }
        assert_eq!(timing.end_to_end.count(), deliveries);
    }
}
