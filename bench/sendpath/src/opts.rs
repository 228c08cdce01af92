//! The command line: [`Opts`] and its parser. Bounds checked here: at most
//! 16,384 connections (one submit holds a whole round), payloads of at
//! least 8 bytes, and frames-per-send always includes 1 (the baseline).

pub struct Opts {
    pub conns: usize,
    pub rounds: usize,
    pub warmup: usize,
    pub sizes: Vec<usize>,
    pub frames: Vec<usize>,
    /// k-frame variants are skipped where k frames exceed this (bounds the
    /// bytes per round and the flat buffers' memory).
    pub max_send_bytes: usize,
    /// Only run variants whose label contains one of these (the baseline
    /// always runs).
    pub only: Vec<String>,
    pub pin: bool,
    /// A round starts at most every this many ms (sleeping after one that
    /// finished early): the same sends at a workload's pace, e.g. 50 for
    /// 20 events/s, instead of back to back with every socket hot in cache.
    pub pace_ms: u64,
}

fn usage() -> ! {
    eprintln!(
        "usage: sendpath-bench [--conns N (1000)] [--rounds R (200)] [--warmup W (10)]\n\
         \x20      [--sizes 600,4096,16384,65536] [--frames 1,4,16]\n\
         \x20      [--max-send-bytes 262144] [--only LABEL,..] [--no-pin]\n\
         \x20      [--pace-ms MS (0: rounds back to back)]"
    );
    std::process::exit(2)
}

pub fn parse_opts() -> Opts {
    let mut o = Opts {
        conns: 1000,
        rounds: 200,
        warmup: 10,
        sizes: vec![600, 4096, 16384, 65536],
        frames: vec![1, 4, 16],
        max_send_bytes: 256 * 1024,
        only: Vec::new(),
        pin: true,
        pace_ms: 0,
    };
    let mut args = std::env::args().skip(1);
    let list = |s: Option<String>| -> Vec<usize> {
        s.unwrap_or_else(|| usage())
            .split(',')
            .map(|x| x.trim().parse().unwrap_or_else(|_| usage()))
            .collect()
    };
    let num =
        |s: Option<String>| -> usize { s.and_then(|x| x.parse().ok()).unwrap_or_else(|| usage()) };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--conns" => o.conns = num(args.next()),
            "--rounds" => o.rounds = num(args.next()),
            "--warmup" => o.warmup = num(args.next()),
            "--sizes" => o.sizes = list(args.next()),
            "--frames" => o.frames = list(args.next()),
            "--max-send-bytes" => o.max_send_bytes = num(args.next()),
            "--only" => {
                o.only = args
                    .next()
                    .unwrap_or_else(|| usage())
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            "--no-pin" => o.pin = false,
            "--pace-ms" => o.pace_ms = num(args.next()) as u64,
            _ => usage(),
        }
    }
    // One submit must hold a whole round (the SQ is at most 32768 entries).
    if o.conns == 0 || o.conns > 16384 || o.rounds == 0 || o.sizes.iter().any(|&p| p < 8) {
        usage();
    }
    if !o.frames.contains(&1) {
        o.frames.insert(0, 1);
    }
    o
}
