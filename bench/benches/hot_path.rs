//! Micro benchmarks of gatewayd's per-event hot path. See bench/README.md
//! for what each one measures and the results on this machine.
//!
//! Run: `cargo bench -p gatewayd-bench` (short defaults are set below; the
//! usual criterion flags such as `--measurement-time` override them).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use gatewayd::delivery::entitlement::{decide, Variant};
use gatewayd::delivery::record;
use gatewayd::delivery::sendpath::{self, SendPool, HDR_MAX};
use gatewayd::protocol::intents;
use gatewayd_bench::*;
use net::ws;
use ringbuf::{Arena, ArenaConfig, Entry, RingConfig, RingSlab, SessionRing};

/// (1) The per-session dispatch prefix and WebSocket frame header.
fn frame_header(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame_header");
    g.throughput(Throughput::Elements(1));
    // Payloads of 64 B, 600 B and 70 kB: WebSocket headers of 2, 4 and 10 bytes.
    for d_len in [64usize, 600, 70_000] {
        let mut buf = [0u8; HDR_MAX];
        let mut seq = 1_234_567u64;
        g.bench_function(format!("dispatch_header/d{d_len}"), |b| {
            b.iter(|| {
                seq += 1;
                black_box(sendpath::dispatch_header(
                    black_box(&mut buf),
                    black_box(EVENT_TYPE),
                    seq,
                    black_box(d_len),
                ))
            })
        });
    }
    // The whole send build: per ring entry, arena lookup + header + 3 iovecs.
    for n in [1u32, 32] {
        let l = loaded(n, 0, 500);
        let mut pool = SendPool::new(1);
        let id = pool.take().unwrap();
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_function(format!("sendpath_build/batch{n}"), |b| {
            b.iter(|| {
                let slot = pool.slot(id);
                let total =
                    sendpath::build(slot, &[], Some((&l.ring, &l.slab)), &l.arena, 0).unwrap();
                black_box(total)
            })
        });
    }
    g.finish();
}

/// (2) Parse and unmask one masked client frame (the decoder also checks
/// the text is UTF-8). Each iteration gets a fresh masked copy; the copy is
/// not timed.
fn ws_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("ws_decode");
    for len in [100usize, 4096] {
        let frame = client_text_frame(len);
        let mut dec = ws::Decoder::new(1 << 20);
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(format!("text/{len}B"), |b| {
            b.iter_batched_ref(
                || frame.clone(),
                |buf| {
                    let (n, msg) = dec.decode(buf).unwrap().unwrap();
                    black_box(msg);
                    n
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// (3) Ring append (arena copy + SessionRing push) and replay (iterate
/// held entries from a seq, each resolved in the arena).
fn ring(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    let d = message_d(500);

    // Arena append alone: one 515-byte record (`[t_len][t][d]`), wrapping.
    {
        let mut arena = Arena::new(ArenaConfig::new(16 << 20)).unwrap();
        g.bench_function("arena_append/515B", |b| {
            b.iter(|| black_box(append_event(&mut arena, black_box(&d))))
        });
    }

    // A session ring at its resume-history bound (5000 held, all sent): each
    // push drops the oldest sent entry; mark_sent keeps it in steady state.
    let cfg = RingConfig::default();
    let steady = |arena: &mut Arena| {
        let mut slab = RingSlab::new(4096);
        let mut ring = SessionRing::new(&cfg, 0);
        let record = append_event(arena, &d);
        for seq in 1..=u64::from(cfg.max_held) {
            let e = Entry {
                record,
                seq,
                at_ms: 0,
            };
            ring.push(&mut slab, e).unwrap();
            ring.mark_sent(&slab, 1);
        }
        (slab, ring, record)
    };
    {
        let mut arena = Arena::new(ArenaConfig::new(16 << 20)).unwrap();
        let (mut slab, mut ring, record) = steady(&mut arena);
        g.bench_function("ring_push_mark_sent", |b| {
            b.iter(|| {
                let seq = ring.last_seq() + 1;
                let e = Entry {
                    record,
                    seq,
                    at_ms: seq,
                };
                ring.push(&mut slab, black_box(e)).unwrap();
                ring.mark_sent(&slab, 1);
            })
        });
    }
    {
        let mut arena = Arena::new(ArenaConfig::new(16 << 20)).unwrap();
        let (mut slab, mut ring, _) = steady(&mut arena);
        g.bench_function("append_and_push/515B", |b| {
            b.iter(|| {
                let record = append_event(&mut arena, black_box(&d));
                let seq = ring.last_seq() + 1;
                let e = Entry {
                    record,
                    seq,
                    at_ms: seq,
                };
                ring.push(&mut slab, e).unwrap();
                ring.mark_sent(&slab, 1);
            })
        });
    }

    // Replay: a Resume from the oldest resumable seq walks every held entry
    // in order and resolves its record (what the send path then frames).
    for n in [32u32, 256] {
        let l = loaded(n, n, 500);
        g.throughput(Throughput::Elements(u64::from(n)));
        g.bench_function(format!("replay/{n}"), |b| {
            b.iter(|| {
                let from = l.ring.first_held_seq() - 1;
                black_box(l.ring.check_resume(from)).unwrap();
                let mut bytes = 0usize;
                for e in l.ring.held(&l.slab) {
                    let (t, d) = record::parts(l.arena.get(e.record).unwrap());
                    bytes += t.len() + d.len();
                }
                black_box(bytes)
            })
        });
    }
    g.finish();
}

/// (4) The per-event, per-recipient entitlement decision.
fn entitlement(c: &mut Criterion) {
    let mut g = c.benchmark_group("entitlement");
    g.throughput(Throughput::Elements(1));
    let gm = intents::GUILDS | intents::GUILD_MESSAGES;
    let mentions = [BOT, 80_351_110_224_678_912];
    let req = message_requirement(&mentions);
    let cases = [
        ("decide/1guild_mentioned_full", identity(BOT, gm, 1, 1)),
        (
            "decide/100guilds_50ch_redacted",
            identity(BOT + 1, gm, 100, 50),
        ),
        (
            "decide/no_intent_rejected",
            identity(BOT + 2, intents::GUILDS, 1, 1),
        ),
    ];
    for (name, id) in &cases {
        g.bench_function(*name, |b| {
            b.iter(|| black_box(decide(black_box(id), black_box(&req))))
        });
    }
    // One event against 1000 recipients as a worker holds them: 1 to 20
    // servers of 10 channels each; every tenth lacks GUILD_MESSAGES
    // (rejected), some have MESSAGE_CONTENT (full), the rest get the
    // redacted variant.
    let recipients: Vec<_> = (0..1000u64)
        .map(|i| {
            let intents_ = match i % 10 {
                0 => intents::GUILDS,
                n if n % 3 == 0 => gm | intents::MESSAGE_CONTENT,
                _ => gm,
            };
            identity(BOT + 10 + i, intents_, 1 + i % 20, 10)
        })
        .collect();
    g.throughput(Throughput::Elements(recipients.len() as u64));
    g.bench_function("decide/1000_recipients", |b| {
        b.iter(|| {
            let (mut full, mut redacted) = (0u32, 0u32);
            for id in &recipients {
                match decide(id, black_box(&req)) {
                    Some(Variant::Full) => full += 1,
                    Some(Variant::Redacted) => redacted += 1,
                    None => {}
                }
            }
            black_box((full, redacted))
        })
    });
    g.finish();
}

/// (5) Ingest record decode: framing, rkyv bytecheck and field checks
/// (including the JSON validation of `d`) of a ~600-byte record.
fn ingest_decode(c: &mut Criterion) {
    let mut g = c.benchmark_group("ingest");
    let frame = ingest_frame(500);
    let label = format!("{}B", frame.len());
    g.throughput(Throughput::Elements(1));
    {
        let mut reader = ingest::FrameReader::new();
        g.bench_function(format!("decode/{label}"), |b| {
            b.iter(|| {
                reader.push(black_box(&frame));
                let rec = reader.next().unwrap().unwrap();
                black_box(rec.d().len())
            })
        });
    }
    // 64 frames arriving in one read, decoded one after another.
    {
        let batch: Vec<u8> = (0..64).flat_map(|_| frame.iter().copied()).collect();
        let mut reader = ingest::FrameReader::new();
        g.throughput(Throughput::Elements(64));
        g.bench_function(format!("decode_batch64/{label}"), |b| {
            b.iter(|| {
                reader.push(black_box(&batch));
                let mut n = 0usize;
                while let Some(rec) = reader.next() {
                    n += rec.unwrap().d().len();
                }
                black_box(n)
            })
        });
    }
    // Of which: the JSON object validation of `d` alone.
    let d = message_d(500);
    g.throughput(Throughput::Elements(1));
    g.bench_function("validate_json_d/500B", |b| {
        b.iter(|| black_box(ingest::validate_json_object(black_box(&d))).unwrap())
    });
    g.finish();
}

/// (6) Delivery timing (src/delivery/latency.rs, issue 42): what a send's
/// completion adds per frame (`frames_done` over a full batch of 32 stamped
/// frames, then `sent`), and an event's first two stages at fan-out
/// (`fanned_out`, once per event whatever its recipients). Compare with
/// `sendpath_build/batch32` per element and the node's CPU per delivery.
fn delivery_timing(c: &mut Criterion) {
    use gatewayd::delivery::latency::{DeliveryLatency, Stamp};
    let mut g = c.benchmark_group("delivery_timing");
    let h = DeliveryLatency::default();
    let base = 1_700_000_000_000_000_000u64;
    let stamps: Vec<Stamp> = (0..32)
        .map(|i| Stamp {
            commit_ns: base + i * 1_000,
            take_ns: base + 2_000_000 + i * 1_000,
        })
        .collect();
    let mut next = 0u64;
    let mut seqs = [0u64; 32];
    g.throughput(Throughput::Elements(32));
    g.bench_function("frames_done/batch32", |b| {
        b.iter(|| {
            let mut timed = next;
            for (k, s) in seqs.iter_mut().enumerate() {
                *s = next + 1 + k as u64;
            }
            next += 32;
            let n = h.frames_done(
                black_box(&stamps),
                black_box(&seqs),
                &mut timed,
                base + 3_000_000,
                base + 3_050_000,
            );
            h.sent(n, base + 3_000_000, base + 3_050_000);
            black_box(n)
        })
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function("fanned_out/event", |b| {
        b.iter(|| h.fanned_out(black_box(stamps[0]), black_box(base + 1_000_000), 50))
    });
    g.bench_function("unix_ns/clock_read", |b| {
        b.iter(|| black_box(gatewayd::delivery::latency::unix_ns()))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50)
}

criterion_group! {
    name = benches;
    config = config();
    targets = frame_header, ws_decode, ring, entitlement, ingest_decode, delivery_timing
}
criterion_main!(benches);
