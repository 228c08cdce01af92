//! sendpath-bench: what does it cost the sending thread, in CPU, to send one
//! small WebSocket frame to each of N loopback TCP sockets, per way of
//! sending it? See docs/bench/sendpath.md.
//!
//! One event is fanned out to N connections per round. Per connection a frame
//! is a per-connection header (WebSocket header + `{"op":0,..,"d":`), a
//! payload shared by all connections, and `}`. The sender (this thread, the
//! accepting side, as in the node) sends one round, then waits until a
//! receiver thread on the other core has read all of it, so every round
//! starts on quiet sockets. Only the round's send + completion work is timed,
//! with CLOCK_THREAD_CPUTIME_ID, which also counts kernel work done in the
//! sender's context (the loopback receive softirq included; softirq work the
//! kernel defers to ksoftirqd is reported beside it). Variants run
//! interleaved (each round runs every variant once, in random order), so
//! machine noise hits all of them alike.
//!
//! Files: `opts.rs` (command line), `variant.rs` (what is compared),
//! `frames.rs` (the bytes sent), `round.rs` (one timed round),
//! `receiver.rs` (the draining thread), `setup.rs` (CPU, limits, sockets,
//! /proc), `report.rs` (the table); this file runs them.

mod frames;
mod opts;
mod receiver;
mod report;
mod round;
mod setup;
mod variant;

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use io_uring::IoUring;

use frames::Frames;
use opts::parse_opts;
use receiver::{receive, wait_drained, Shared};
use report::report;
use round::{round, Round};
use setup::{connect_pairs, ksoftirqd_pids, loadavg, pin, raise_nofile, schedstat_ns, XorShift};
use variant::{variants, ALL_FLAGS};

fn main() {
    let o = parse_opts();
    raise_nofile();
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    if o.pin {
        pin(0);
    }
    let (servers, clients) = connect_pairs(o.conns).expect("connecting loopback pairs");
    let fds: Vec<RawFd> = servers.iter().map(|s| s.as_raw_fd()).collect();

    // Rings are built on this thread, the one that submits (SINGLE_ISSUER).
    let sq = (o.conns as u32).next_power_of_two().max(8);
    let mut rings: Vec<IoUring> = ALL_FLAGS
        .iter()
        .map(|f| {
            let r = f
                .build(sq)
                .unwrap_or_else(|e| panic!("ring {}: {e}", f.name()));
            r.submitter()
                .register_files(&fds)
                .unwrap_or_else(|e| panic!("register_files: {e}"));
            r
        })
        .collect();

    let sh = Arc::new(Shared {
        received: AtomicU64::new(0),
        target: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let receiver = {
        let (sh, me) = (sh.clone(), thread::current());
        let cpu = (o.pin && cpus > 1).then_some(1);
        thread::spawn(move || receive(clients, sh, me, cpu))
    };

    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    // Loopback receive work is softirq work on the sending CPU: inline in the
    // sender's send calls, unless the kernel defers it to ksoftirqd there.
    let softirqd = ksoftirqd_pids();
    let soft_sender = if o.pin {
        softirqd.first().copied().unwrap_or(0)
    } else {
        0
    };
    let mut sent = vec![0u64; o.conns];
    let mut total = 0u64;
    println!(
        "# sendpath-bench: N = {} connections, {} rounds per variant (+{} warm-up), interleaved; {}; {} CPUs; load average at start: {}\n",
        o.conns,
        o.rounds,
        o.warmup,
        if o.pace_ms > 0 { format!("a variant's round starts at most every {} ms", o.pace_ms) } else { "rounds back to back".to_string() },
        cpus,
        loadavg()
    );
    for &p in &o.sizes {
        let kmax = *o.frames.iter().max().unwrap();
        let mut f = Frames::new(o.conns, p, kmax, o.max_send_bytes, &o.frames);
        let vs = variants(&o, f.frame_len);
        let mut rounds: Vec<Vec<Round>> = vec![Vec::with_capacity(o.rounds); vs.len()];
        let load_start = loadavg();
        let t0 = Instant::now();
        let soft_start: Vec<u64> = softirqd.iter().map(|&p| schedstat_ns(p)).collect();
        let mut order: Vec<usize> = (0..vs.len()).collect();
        for r in 0..o.warmup + o.rounds {
            // Every variant once per round, in a fresh random order, so no
            // variant always runs first or after the same one.
            for j in (1..order.len()).rev() {
                order.swap(j, (rng.next() % (j as u64 + 1)) as usize);
            }
            for &vi in &order {
                let soft0 = schedstat_ns(soft_sender);
                let started = Instant::now();
                let mut out = round(vs[vi], &mut f, &mut rings, &fds, &mut sent);
                total += out.bytes;
                wait_drained(&sh, total);
                // Includes softirq work left over after the round's sends.
                out.softirqd_ns = schedstat_ns(soft_sender) - soft0;
                let pace = std::time::Duration::from_millis(o.pace_ms);
                if let Some(rest) = pace.checked_sub(started.elapsed()) {
                    std::thread::sleep(rest);
                }
                if r >= o.warmup {
                    rounds[vi].push(out);
                } else if out.eagain + out.short > 0 {
                    eprintln!(
                        "warm-up: {} had {} EAGAIN, {} short sends",
                        vs[vi].label(),
                        out.eagain,
                        out.short
                    );
                }
            }
        }
        println!(
            "## P = {p} B payload: frame {} B (header {} B + payload + 1), N = {}\n",
            f.frame_len, f.hdr_len, o.conns
        );
        println!(
            "{} rounds x {} variants in {:.1} s wall; load average {} at start, {} at end. Sender-thread CPU, medians over rounds; ratio = median over rounds of (variant / baseline `sendmsg-batch` default k=1 in the same pass), per frame; +ksoftirqd adds what ksoftirqd on the sender's CPU ran from the round's start until the receiver had it all.\n",
            o.rounds,
            vs.len(),
            t0.elapsed().as_secs_f64(),
            load_start,
            loadavg()
        );
        report(&vs, &rounds, o.conns);
        let sender_ms = rounds.iter().flatten().map(|r| r.cpu_ns).sum::<u64>() / 1_000_000;
        let soft: Vec<String> = softirqd
            .iter()
            .zip(&soft_start)
            .enumerate()
            .map(|(cpu, (&p, &s0))| {
                format!("ksoftirqd/{cpu} {} ms", (schedstat_ns(p) - s0) / 1_000_000)
            })
            .collect();
        println!(
            "\nCPU check: timed sender CPU {sender_ms} ms in total (measured rounds); during the whole table (warm-up and waits included): {}.",
            soft.join(", ")
        );
        println!();
    }

    sh.stop.store(true, Ordering::Release);
    let got = receiver.join().expect("receiver thread");
    let bad: Vec<usize> = (0..o.conns).filter(|&i| got[i] != sent[i]).collect();
    assert!(
        bad.is_empty(),
        "byte counts differ on {} connections (first: #{} sent {} received {})",
        bad.len(),
        bad[0],
        sent[bad[0]],
        got[bad[0]]
    );
    println!(
        "Checked: the receiver read exactly the {total} bytes sent, on every one of the {} connections.",
        o.conns
    );
    drop(servers);
}
