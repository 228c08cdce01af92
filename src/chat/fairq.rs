//! Per-application fairness in front of the HTTP interaction deliverer
//! (`endpoint.rs`): which queued job is called next when a call may
//! start. Sans-IO: no clock, no lock, no thread; the caller holds it under
//! one mutex.
//!
//! - Each application with work has a FIFO of its queued jobs.
//! - `take` serves the applications round-robin, one job per turn, and
//!   skips an application with `per_app_in_flight` jobs taken and not yet
//!   `done` (a hanging endpoint holds at most that many calls).
//! - `push` refuses (hands the job back) when the application already has
//!   `per_app_queued` jobs queued or `total_queued` are queued in all: the
//!   caller shows the person the failure at once.
//!
//! Bounds and invariants (checked by `check`, after every step in the
//! tests; `new` asserts the limits):
//! - `queued <= total_queued`; per application `queued <= per_app_queued`;
//! - `in_flight <= max_in_flight` (the calls in flight: `take` gives no more)
//!   and per application `in_flight <= per_app_in_flight`;
//! - an application is tracked (has a slot) exactly while it has a job
//!   queued or in flight, so at most `total_queued + max_in_flight` slots;
//! - `ready` holds each application that has a job queued and is under its
//!   in-flight cap, once, in round-robin order; no other.
//!
//! Storage: the job cells (`total_queued`), the slots, the free lists and
//! the ready ring are allocated in `new` and never grow. The index from
//! application id to slot is a `HashMap` made with room for every slot;
//! it never holds more entries than that (it may rehash under churn).

use std::collections::{HashMap, VecDeque};

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Jobs queued (not yet taken) for one application.
    pub per_app_queued: usize,
    /// Jobs queued in all.
    pub total_queued: usize,
    /// Jobs of one application taken and not yet done.
    pub per_app_in_flight: usize,
    /// Jobs taken and not yet done in all (the calls in flight at once).
    pub max_in_flight: usize,
}

/// Why `push` handed a job back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// This application already has `per_app_queued` jobs queued.
    AppFull,
    /// `total_queued` jobs are queued.
    Full,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    app: u64,
    /// Oldest and newest queued cell (`NIL` when none).
    head: u32,
    tail: u32,
    queued: u32,
    in_flight: u32,
    /// In `ready`.
    ready: bool,
}

const EMPTY: Slot = Slot {
    app: 0,
    head: NIL,
    tail: NIL,
    queued: 0,
    in_flight: 0,
    ready: false,
};

pub struct FairQ<T> {
    lim: Limits,
    /// Job cells; `next` links a slot's queued cells oldest first.
    cells: Box<[Option<T>]>,
    next: Box<[u32]>,
    free_cells: Vec<u32>,
    slots: Box<[Slot]>,
    free_slots: Vec<u32>,
    index: HashMap<u64, u32>,
    ready: VecDeque<u32>,
    queued: usize,
    in_flight: usize,
}

impl<T> FairQ<T> {
    pub fn new(lim: Limits) -> FairQ<T> {
        assert!(lim.per_app_queued >= 1 && lim.per_app_queued <= lim.total_queued);
        assert!(lim.per_app_in_flight >= 1 && lim.per_app_in_flight <= lim.max_in_flight);
        let n_slots = lim.total_queued + lim.max_in_flight;
        assert!(n_slots < NIL as usize, "cell and slot numbers fit in u32");
        FairQ {
            lim,
            cells: (0..lim.total_queued).map(|_| None).collect(),
            next: vec![NIL; lim.total_queued].into_boxed_slice(),
            free_cells: (0..lim.total_queued as u32).rev().collect(),
            slots: vec![EMPTY; n_slots].into_boxed_slice(),
            free_slots: (0..n_slots as u32).rev().collect(),
            index: HashMap::with_capacity(n_slots),
            ready: VecDeque::with_capacity(n_slots),
            queued: 0,
            in_flight: 0,
        }
    }

    /// Jobs queued, not yet taken.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Jobs taken, not yet done.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Applications with a job queued or in flight.
    #[cfg(test)]
    pub fn apps(&self) -> usize {
        self.index.len()
    }

    /// Queue `job` for `app` (behind its earlier ones), or hand it back.
    pub fn push(&mut self, app: u64, job: T) -> Result<(), (Refused, T)> {
        let existing = self.index.get(&app).copied();
        if existing
            .is_some_and(|s| self.slots[s as usize].queued as usize >= self.lim.per_app_queued)
        {
            return Err((Refused::AppFull, job));
        }
        let Some(cell) = self.free_cells.pop() else {
            return Err((Refused::Full, job));
        };
        let s = match existing {
            Some(s) => s,
            None => {
                // Slots outnumber what can be tracked (see the bounds).
                let s = self.free_slots.pop().expect("a free slot");
                self.slots[s as usize] = Slot { app, ..EMPTY };
                self.index.insert(app, s);
                s
            }
        };
        self.cells[cell as usize] = Some(job);
        self.next[cell as usize] = NIL;
        let slot = &mut self.slots[s as usize];
        if slot.tail == NIL {
            slot.head = cell;
        } else {
            self.next[slot.tail as usize] = cell;
        }
        slot.tail = cell;
        slot.queued += 1;
        self.queued += 1;
        self.make_ready(s);
        Ok(())
    }

    /// The next job, round-robin over the applications that may have one
    /// more in flight; `None` when there is none (or `max_in_flight` are).
    pub fn take(&mut self) -> Option<(u64, T)> {
        if self.in_flight >= self.lim.max_in_flight {
            return None;
        }
        let s = self.ready.pop_front()?;
        let slot = &mut self.slots[s as usize];
        let cell = slot.head;
        debug_assert!(
            cell != NIL && slot.queued > 0,
            "a ready slot has a queued job"
        );
        slot.head = self.next[cell as usize];
        if slot.head == NIL {
            slot.tail = NIL;
        }
        slot.queued -= 1;
        slot.in_flight += 1;
        slot.ready = false;
        let app = slot.app;
        self.queued -= 1;
        self.in_flight += 1;
        let job = self.cells[cell as usize]
            .take()
            .expect("a queued cell holds its job");
        self.free_cells.push(cell);
        // Behind every other application with work.
        self.make_ready(s);
        Some((app, job))
    }

    /// A job of `app` that `take` gave is finished (delivered, failed or
    /// dropped). True if a job may now be taken that could not before.
    pub fn done(&mut self, app: u64) -> bool {
        let s = *self
            .index
            .get(&app)
            .expect("done for an application with a job in flight");
        let slot = &mut self.slots[s as usize];
        assert!(slot.in_flight > 0, "done without a job in flight");
        slot.in_flight -= 1;
        let was_full = self.in_flight >= self.lim.max_in_flight;
        self.in_flight -= 1;
        if slot.queued == 0 && slot.in_flight == 0 {
            self.index.remove(&app);
            self.slots[s as usize] = EMPTY;
            self.free_slots.push(s);
            return was_full && !self.ready.is_empty();
        }
        let newly = self.make_ready(s);
        newly || (was_full && !self.ready.is_empty())
    }

    /// Removes the queued jobs `expired` says are, into `out`: each
    /// application's jobs from its oldest, up to its first one that is not
    /// (jobs queued in push order expire in that order). O(applications);
    /// allocates nothing if `out` has room.
    pub fn drop_expired(&mut self, mut expired: impl FnMut(&T) -> bool, out: &mut Vec<T>) {
        let before = out.len();
        for &s in self.index.values() {
            let slot = &mut self.slots[s as usize];
            while slot.head != NIL {
                let cell = slot.head as usize;
                if !expired(
                    self.cells[cell]
                        .as_ref()
                        .expect("a queued cell holds its job"),
                ) {
                    break;
                }
                out.push(self.cells[cell].take().expect("checked"));
                slot.head = self.next[cell];
                slot.queued -= 1;
                self.free_cells.push(cell as u32);
            }
            if slot.head == NIL {
                slot.tail = NIL;
            }
        }
        if out.len() == before {
            return;
        }
        self.queued -= out.len() - before;
        let slots = &mut self.slots;
        self.ready.retain(|&s| {
            let slot = &mut slots[s as usize];
            slot.ready = slot.queued > 0;
            slot.ready
        });
        let free = &mut self.free_slots;
        self.index.retain(|_, &mut s| {
            let keep = slots[s as usize].queued > 0 || slots[s as usize].in_flight > 0;
            if !keep {
                slots[s as usize] = EMPTY;
                free.push(s);
            }
            keep
        });
    }

    /// Puts slot `s` at the back of `ready` if it belongs there and is not
    /// in it; true if it was put.
    fn make_ready(&mut self, s: u32) -> bool {
        let slot = &mut self.slots[s as usize];
        if slot.ready || slot.queued == 0 || slot.in_flight as usize >= self.lim.per_app_in_flight {
            return false;
        }
        slot.ready = true;
        self.ready.push_back(s);
        true
    }

    /// Every invariant of the module comment (O(size): tests only).
    #[cfg(test)]
    pub fn check(&self) {
        let lim = self.lim;
        assert!(self.queued <= lim.total_queued);
        assert!(self.in_flight <= lim.max_in_flight);
        assert_eq!(self.free_cells.len() + self.queued, lim.total_queued);
        assert_eq!(self.free_slots.len() + self.index.len(), self.slots.len());
        assert!(self.index.len() <= self.slots.len());
        assert!(self.index.capacity() >= self.slots.len());
        let (mut queued, mut in_flight) = (0, 0);
        for (&app, &s) in &self.index {
            let slot = &self.slots[s as usize];
            assert_eq!(slot.app, app);
            assert!(
                slot.queued > 0 || slot.in_flight > 0,
                "a tracked app has work"
            );
            assert!(slot.queued as usize <= lim.per_app_queued);
            assert!(slot.in_flight as usize <= lim.per_app_in_flight);
            let (mut n, mut c, mut last) = (0, slot.head, NIL);
            while c != NIL {
                assert!(self.cells[c as usize].is_some());
                n += 1;
                last = c;
                c = self.next[c as usize];
            }
            assert_eq!(n, slot.queued);
            assert_eq!(last, slot.tail);
            let belongs = slot.queued > 0 && (slot.in_flight as usize) < lim.per_app_in_flight;
            assert_eq!(slot.ready, belongs);
            assert_eq!(
                self.ready.iter().filter(|&&r| r == s).count(),
                belongs as usize
            );
            queued += slot.queued as usize;
            in_flight += slot.in_flight as usize;
        }
        assert_eq!(queued, self.queued);
        assert_eq!(in_flight, self.in_flight);
        assert!(self.ready.iter().all(|r| self.slots[*r as usize].ready));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: Limits = Limits {
        per_app_queued: 3,
        total_queued: 8,
        per_app_in_flight: 2,
        max_in_flight: 4,
    };

    fn take(q: &mut FairQ<(u64, u32)>) -> Option<(u64, u32)> {
        let r = q.take().map(|(app, (a, n))| {
            assert_eq!(app, a, "a job comes out under its own application");
            (app, n)
        });
        q.check();
        r
    }

    fn push(q: &mut FairQ<(u64, u32)>, app: u64, n: u32) -> Result<(), Refused> {
        let r = q.push(app, (app, n)).map_err(|(why, job)| {
            assert_eq!(job, (app, n), "a refused job is handed back");
            why
        });
        q.check();
        r
    }

    #[test]
    fn applications_take_turns_and_each_keeps_its_order() {
        let mut q = FairQ::new(Limits {
            max_in_flight: 100,
            per_app_in_flight: 100,
            total_queued: 100,
            per_app_queued: 10,
        });
        for n in 0..3 {
            push(&mut q, 1, n).unwrap();
        }
        push(&mut q, 2, 0).unwrap();
        push(&mut q, 3, 0).unwrap();
        push(&mut q, 3, 1).unwrap();
        let order: Vec<_> = std::iter::from_fn(|| take(&mut q)).collect();
        assert_eq!(order, [(1, 0), (2, 0), (3, 0), (1, 1), (3, 1), (1, 2)]);
    }

    #[test]
    fn one_application_holds_at_most_its_cap_and_others_pass_it() {
        let mut q = FairQ::new(LIM);
        for n in 0..3 {
            push(&mut q, 7, n).unwrap();
        }
        assert_eq!(take(&mut q), Some((7, 0)));
        assert_eq!(take(&mut q), Some((7, 1)));
        // 7 is at its cap of 2: its third job waits though takers are free.
        assert_eq!(take(&mut q), None);
        push(&mut q, 8, 0).unwrap();
        assert_eq!(
            take(&mut q),
            Some((8, 0)),
            "another application passes the capped one"
        );
        assert!(q.done(7), "a job of 7 may be taken again");
        q.check();
        assert_eq!(take(&mut q), Some((7, 2)));
        assert_eq!(q.in_flight(), 3);
    }

    #[test]
    fn takers_are_never_more_than_max_in_flight() {
        let mut q = FairQ::new(LIM);
        for app in 0..3 {
            for n in 0..2 {
                push(&mut q, app, n).unwrap();
            }
        }
        for _ in 0..4 {
            assert!(take(&mut q).is_some());
        }
        assert_eq!(take(&mut q), None, "all 4 takers busy");
        assert!(q.done(0), "a taker is free and 1 and 2 have work");
        q.check();
        // Taken so far: 0, 1, 2, 0; 1 is next in turn.
        assert_eq!(take(&mut q).map(|t| t.0), Some(1));
        assert_eq!(take(&mut q), None);
    }

    #[test]
    fn a_full_application_or_a_full_queue_refuses_at_once() {
        let mut q = FairQ::new(LIM);
        for n in 0..3 {
            push(&mut q, 1, n).unwrap();
        }
        assert_eq!(push(&mut q, 1, 3), Err(Refused::AppFull));
        // Others still have room: 3 + 3 + 2 = 8 = total.
        for n in 0..3 {
            push(&mut q, 2, n).unwrap();
        }
        push(&mut q, 3, 0).unwrap();
        push(&mut q, 4, 0).unwrap();
        assert_eq!(push(&mut q, 5, 0), Err(Refused::Full));
        assert_eq!(q.queued(), 8);
        // Taking frees queue room (in flight is not queued).
        let (app, _) = take(&mut q).unwrap();
        assert_eq!(app, 1);
        push(&mut q, 5, 0).unwrap();
        push(&mut q, 1, 3).map(|_| ()).unwrap_err();
    }

    #[test]
    fn an_application_is_forgotten_when_it_has_no_work() {
        let mut q = FairQ::new(LIM);
        push(&mut q, 9, 0).unwrap();
        assert_eq!(q.apps(), 1);
        take(&mut q).unwrap();
        assert_eq!(q.apps(), 1, "in flight keeps it tracked");
        assert!(!q.done(9));
        q.check();
        assert_eq!((q.apps(), q.queued(), q.in_flight()), (0, 0, 0));
    }

    #[test]
    fn expired_jobs_are_dropped_from_every_queue_oldest_first() {
        let mut q = FairQ::new(LIM);
        // n is the push time; "expired" is n < 2.
        for n in 0..3 {
            push(&mut q, 1, n).unwrap();
        }
        push(&mut q, 2, 0).unwrap();
        push(&mut q, 3, 5).unwrap();
        assert_eq!(take(&mut q), Some((1, 0)), "1 has one in flight");
        let mut out = Vec::with_capacity(8);
        q.drop_expired(|&(_, n)| n < 2, &mut out);
        q.check();
        out.sort();
        assert_eq!(out, [(1, 1), (2, 0)]);
        assert_eq!(
            q.apps(),
            2,
            "2 is forgotten; 1 has a job in flight and one queued"
        );
        assert_eq!(take(&mut q), Some((3, 5)));
        assert_eq!(take(&mut q), Some((1, 2)));
        assert_eq!(take(&mut q), None);
        q.drop_expired(|_| true, &mut out);
        q.check();
        assert_eq!(out.len(), 2, "nothing queued is left to drop");
    }

    #[test]
    #[should_panic(expected = "done for an application with a job in flight")]
    fn done_without_a_take_is_a_bug() {
        let mut q: FairQ<u8> = FairQ::new(LIM);
        q.done(1);
    }

    /// Random pushes, takes and dones against the bounds, with many
    /// applications churning through the slots.
    #[test]
    fn the_bounds_hold_under_churn() {
        let mut q = FairQ::new(LIM);
        let mut taken: Vec<u64> = Vec::new();
        let mut next = [0u32; 16];
        let mut took = [0u32; 16];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let app = (x >> 8) % 16;
            if x.is_multiple_of(97) {
                let mut out = Vec::new();
                let cut = (x >> 20) as u32 % 64;
                q.drop_expired(|&(_, n)| n < cut, &mut out);
                q.check();
                for (a, n) in out {
                    assert_eq!(n, took[a as usize], "dropped in order, like taken");
                    took[a as usize] += 1;
                }
            }
            match x % 3 {
                0 => {
                    let n = next[app as usize];
                    if push(&mut q, app, n).is_ok() {
                        next[app as usize] += 1;
                    }
                }
                1 => {
                    if let Some((a, n)) = take(&mut q) {
                        assert_eq!(n, took[a as usize], "each application's jobs in order");
                        took[a as usize] += 1;
                        taken.push(a);
                    }
                }
                _ => {
                    if !taken.is_empty() {
                        let a = taken.swap_remove((x as usize >> 3) % taken.len());
                        q.done(a);
                        q.check();
                    }
                }
            }
            assert_eq!(q.in_flight(), taken.len());
        }
    }
}
