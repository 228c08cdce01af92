//! When a producer's records go to the workers: the listener's gathering
//! rule, without I/O (src/ingest/listener.rs reads and waits; this decides).
//!
//! ```text
//!   records in ──► batch full? ──yes──► send now
//!                     │ no
//!                     ▼
//!            already gathering? ──yes──► wait until first + window
//!                     │ no
//!                     ▼
//!   last batch sent < window ago? ──yes──► start gathering (first = now)
//!                     │ no (quiet spell)
//!                     ▼
//!                  send now
//! ```
//!
//! Why: each batch costs every worker with an interested session a
//! wake-up, tens of µs of scheduler work on a VM, so at 2,000 events/s to
//! 200 servers a wake-up per event was most of the node's cost per event.
//! Bounds: no record waits longer than `window` after the first record of
//! its batch; an event after a quiet spell (nothing sent for `window`) is
//! sent at once; a window of zero sends every read's records at once.

use std::time::{Duration, Instant};

/// What the listener does after a read's records are in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Send the batch now.
    Send,
    /// Read more if any arrives before this instant; send at it otherwise.
    WaitUntil(Instant),
    /// Nothing is waiting to be sent.
    Read,
}

/// The gathering state of one producer connection.
#[derive(Debug)]
pub struct Gather {
    window: Duration,
    last_sent: Option<Instant>,
    /// When the first record of the batch being gathered arrived.
    first: Option<Instant>,
}

impl Gather {
    pub fn new(window: Duration) -> Gather {
        Gather {
            window,
            last_sent: None,
            first: None,
        }
    }

    /// A read's records were added; `pending`: the batch is not empty,
    /// `full`: it is at its bound.
    pub fn after_read(&mut self, now: Instant, pending: bool, full: bool) -> Next {
        if !pending {
            return Next::Read;
        }
        if full {
            return Next::Send;
        }
        if let Some(first) = self.first {
            return Next::WaitUntil(first + self.window);
        }
        let busy = self
            .last_sent
            .is_some_and(|t| now.saturating_duration_since(t) < self.window);
        if busy {
            self.first = Some(now);
            Next::WaitUntil(now + self.window)
        } else {
            Next::Send
        }
    }

    /// The batch went to the workers at `now`.
    pub fn sent(&mut self, now: Instant) {
        self.last_sent = Some(now);
        self.first = None;
    }

    /// The instant a batch being gathered must be sent by, if one is.
    pub fn deadline(&self) -> Option<Instant> {
        self.first.map(|f| f + self.window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_first_record_and_one_after_a_quiet_spell_go_at_once() {
        let t0 = Instant::now();
        let mut g = Gather::new(MS);
        assert_eq!(g.after_read(t0, true, false), Next::Send);
        g.sent(t0);
        // 2 ms later the stream was quiet for longer than the window.
        let t1 = t0 + 2 * MS;
        assert_eq!(g.after_read(t1, true, false), Next::Send);
        assert_eq!(g.deadline(), None);
    }

    #[test]
    fn a_busy_stream_gathers_for_at_most_the_window_after_the_first_record() {
        let t0 = Instant::now();
        let mut g = Gather::new(MS);
        g.sent(t0);
        let t1 = t0 + Duration::from_micros(300);
        assert_eq!(g.after_read(t1, true, false), Next::WaitUntil(t1 + MS));
        // More records later in the window do not move the deadline.
        let t2 = t1 + Duration::from_micros(900);
        assert_eq!(g.after_read(t2, true, false), Next::WaitUntil(t1 + MS));
        assert_eq!(g.deadline(), Some(t1 + MS));
        g.sent(t1 + MS);
        assert_eq!(g.deadline(), None);
    }

    #[test]
    fn a_full_batch_goes_at_once_and_an_empty_one_waits_for_nothing() {
        let t0 = Instant::now();
        let mut g = Gather::new(MS);
        g.sent(t0);
        assert_eq!(g.after_read(t0, false, false), Next::Read);
        assert_eq!(g.after_read(t0, true, true), Next::Send);
    }

    #[test]
    fn a_zero_window_never_gathers() {
        let t0 = Instant::now();
        let mut g = Gather::new(Duration::ZERO);
        g.sent(t0);
        assert_eq!(g.after_read(t0, true, false), Next::Send);
    }
}
