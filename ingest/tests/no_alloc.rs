//! The steady-state paths allocate nothing: `FrameReader::push` + `next`
//! (valid, skipped and misaligned records, in uneven chunks), the
//! `Encoder`, and `redact_message_content` into a reserved buffer.
//!
//! A counting global allocator counts allocations made by the current thread
//! while counting is switched on (thread-local, so the test harness's other
//! threads do not disturb the count).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{frame, message, small};
use ingest::{encode, redact_message_content, Encoder, FrameReader, RecordRef};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: every method forwards to the system allocator unchanged (counting
// on the side allocates nothing), so its guarantees are the system's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by `f` on this thread.
fn count<R>(f: impl FnOnce() -> R) -> (u64, R) {
    COUNT.with(|c| c.set(0));
    ON.with(|on| on.set(true));
    let r = f();
    ON.with(|on| on.set(false));
    (COUNT.with(|c| c.get()), r)
}

#[test]
fn counting_allocator_counts() {
    let (n, v) = count(|| vec![1u8; 10]);
    assert_eq!(n, 1);
    drop(v);
}

/// A stream mixing valid records, skipped ones and a 5-byte garbage frame
/// that misaligns everything after it (exercising the aligned scratch).
fn stream(records: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    let mut bad = small("bad-type");
    bad.d = b"[]".to_vec();
    for i in 0..records {
        encode(&message(i as u64), &mut wire);
        if i % 50 == 10 {
            encode(&bad, &mut wire);
        }
        if i % 100 == 30 {
            frame(&[0xEE; 5], &mut wire);
        }
        if i % 100 == 60 {
            frame(&[0xEE; 3], &mut wire); // back to 8-aligned
        }
    }
    wire
}

fn run(reader: &mut FrameReader, wire: &[u8], chunks: &[usize]) -> (u64, u64) {
    let (mut ok, mut skipped) = (0u64, 0u64);
    let mut pos = 0;
    let mut k = 0;
    while pos < wire.len() {
        let take = chunks[k % chunks.len()].min(wire.len() - pos);
        k += 1;
        reader.push(&wire[pos..pos + take]);
        pos += take;
        while let Some(r) = reader.next() {
            match r {
                Ok(rec) => {
                    ok += 1;
                    assert!(rec.d().len() > 500);
                }
                Err(e) => {
                    assert!(!e.is_fatal());
                    skipped += 1;
                }
            }
        }
    }
    (ok, skipped)
}

#[test]
fn frame_reader_steady_state_does_not_allocate() {
    let wire = stream(2000);
    let chunks = [1usize, 700, 4096, 13, 65536, 1500, 9000, 3];
    let mut reader = FrameReader::new();
    // Warm-up: buffers (the reader's and the scratch) reach their sizes.
    let warm = run(&mut reader, &wire, &chunks);
    let (allocs, counted) = count(|| {
        let mut total = (0, 0);
        for _ in 0..5 {
            let (a, b) = run(&mut reader, &wire, &chunks);
            total.0 += a;
            total.1 += b;
        }
        total
    });
    assert_eq!(counted, (warm.0 * 5, warm.1 * 5));
    assert_eq!(warm.0, 2000);
    assert!(warm.1 > 0);
    assert_eq!(
        allocs, 0,
        "FrameReader allocated {allocs} times in the steady state"
    );
}

#[test]
fn encoder_steady_state_does_not_allocate() {
    let recs: Vec<_> = (0..100).map(message).collect();
    let mut enc = Encoder::new();
    let mut out = Vec::with_capacity(1 << 20);
    for r in &recs {
        enc.encode(&RecordRef::from(r), &mut out);
    }
    let (allocs, _) = count(|| {
        for _ in 0..20 {
            out.clear();
            for r in &recs {
                enc.encode(&RecordRef::from(r), &mut out);
            }
        }
    });
    assert_eq!(allocs, 0, "Encoder allocated {allocs} times");
    // The thread-local path too, after its first use on this thread.
    let r = &recs[0];
    ingest::encode_parts(&r.event_type, 1, 2, 3, 4, 5, 1, &r.mentions, &r.d, &mut out);
    let (allocs, _) = count(|| {
        for _ in 0..100 {
            out.clear();
            ingest::encode_parts(&r.event_type, 1, 2, 3, 4, 5, 1, &r.mentions, &r.d, &mut out);
        }
    });
    assert_eq!(allocs, 0, "encode_parts allocated {allocs} times");
}

#[test]
fn redaction_into_reserved_buffer_does_not_allocate() {
    let recs: Vec<_> = (0..50).map(message).collect();
    let mut out = Vec::with_capacity(4096);
    let (allocs, _) = count(|| {
        for r in &recs {
            out.clear();
            redact_message_content(&r.d, &mut out).unwrap();
            ingest::validate_json_object(&r.d).unwrap();
        }
    });
    assert_eq!(allocs, 0, "redaction allocated {allocs} times");
}
