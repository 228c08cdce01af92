//! Proves the per-event operations allocate nothing once the structures are
//! built: a global allocator counts allocations made by this thread only
//! (the harness's other threads may allocate at any time).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ringbuf::{Arena, ArenaConfig, Entry, RingConfig, RingSlab, SessionRing};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to the system allocator unchanged (counting
// on the side allocates nothing), so its guarantees are the system's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwards to the system allocator with the caller's arguments, under the contract GlobalAlloc gives us.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn steady_state_allocates_nothing() {
    let mut arena = Arena::new(ArenaConfig::new(1 << 16)).unwrap();
    let mut slab = RingSlab::new(256);
    let cfg = RingConfig {
        max_unsent: 500,
        max_held: 1000,
        max_unsent_bytes: u64::MAX,
    };
    let mut rings: Vec<SessionRing> = (0..8).map(|_| SessionRing::new(&cfg, 1)).collect();
    let header = [b'h'; 24];
    let payload = [b'p'; 300];

    // The counter works.
    let probe = allocs();
    drop(std::hint::black_box(Box::new(1u64)));
    assert_eq!(allocs(), probe + 1);

    let before = allocs();
    let mut now = 0u64;
    let mut checksum = 0u64;
    // Enough events to wrap the arena many times and cycle every ring's
    // chunks through the slab.
    for i in 0..20_000u64 {
        now += 3;
        let len = 1 + (i as usize * 37) % payload.len();
        let r = arena.append(&[&header, &payload[..len]]).unwrap();
        checksum += arena.get(r).unwrap().len() as u64;
        for ring in rings.iter_mut() {
            let seq = ring.next_seq();
            ring.push(
                &mut slab,
                Entry {
                    record: r,
                    seq,
                    at_ms: now,
                },
            )
            .unwrap();
        }
        if i % 7 == 0 {
            for ring in rings.iter_mut() {
                let batch: u64 = ring.unsent(&slab).take(16).map(|e| e.seq).sum();
                checksum += batch;
                let n = ring.len_unsent().min(16);
                ring.mark_sent(&slab, n);
                while ring.len_unsent() > 0 {
                    let n = ring.len_unsent().min(64);
                    ring.mark_sent(&slab, n);
                }
                ring.expire(&mut slab, now, 120);
            }
        }
        if i % 1000 == 999 {
            let ring = &mut rings[(i / 1000) as usize % 8];
            let seq = ring.first_held_seq() + 3;
            let first = ring.get(&slab, seq + 1).unwrap();
            checksum += arena.get(first.record).map_or(0, |b| b.len() as u64);
            ring.rewind_for_resume(&mut slab, seq).unwrap();
            ring.ack(&mut slab, seq);
        }
    }
    for ring in rings.iter_mut() {
        ring.clear(&mut slab);
    }
    let after = allocs();

    assert!(checksum > 0);
    assert!(arena.stats().wraps > 10, "{:?}", arena.stats());
    assert_eq!(slab.free_count(), 256);
    assert_eq!(after - before, 0, "the per-event path allocated");
}
