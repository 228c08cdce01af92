//! Sessions one by one, for the portal's session table (issue 29,
//! docs/portal.md "Sessions one by one"): once a second each worker
//! writes a row per session it holds into its own board, and a reader
//! (a portal thread, or the link thread answering another node's figures
//! request) picks an application's rows out of every board.
//!
//! Bounds: a board holds at most `limits.max_sessions_per_worker` rows,
//! allocated at start (64 bytes a row: 1.6 MiB per worker at the default
//! 25,000); a worker never waits for a reader: it takes its board with
//! `try_lock` and, if a reader holds it, publishes at the next second
//! instead (the rows are then a second older, which a person reading the
//! table cannot tell). Readers copy out only the rows of one application
//! and only a page of them (`page`), so a reader holds a board for one
//! scan of it.

use std::sync::{Mutex, TryLockError};

use crate::protocol::compress::Kind as Z;
use shards::session_id::SessionId;

/// One session as its worker last saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub app: u64,
    /// `timeline::session_bits` of its id (worker and node in the top bits).
    pub session: u128,
    /// `[shard_id, num_shards]` of its Identify.
    pub shard: [u32; 2],
    /// On this node since (Unix ms): its Identify, or its arrival.
    pub since_ms: u64,
    /// Its connection attached at (Unix ms; 0 while detached).
    pub attached_ms: u64,
    /// The bot's last heartbeat (Unix ms; 0: none yet, or detached).
    pub heartbeat_ms: u64,
    /// Resumes of it on this node.
    pub resumes: u32,
    /// Its send queue (the session's ring) filled, in percent.
    pub queue_pct: u8,
    /// 0 none, 1 zlib-stream, 2 zstd-stream; 3 and 4 the same streams
    /// served stored (past the node's cap: nothing compressed).
    pub compression: u8,
    pub worker: u8,
}

impl Row {
    pub fn session_id(&self) -> SessionId {
        crate::worker::timeline::session_of(self.session)
    }

    /// The `compress` query value it was served with, or "none".
    pub fn compression_name(&self) -> &'static str {
        match self.compression {
            1 => Z::Zlib.name(),
            2 => Z::Zstd.name(),
            3 => "zlib-stream (stored: past the cap)",
            4 => "zstd-stream (stored: past the cap)",
            _ => "none",
        }
    }
}

/// `Row::compression` of a connection's compressor.
pub fn compression_byte(c: Option<&crate::protocol::compress::Compressor>) -> u8 {
    let Some(c) = c else { return 0 };
    let stored = if c.compresses() { 0 } else { 2 };
    match c.kind() {
        Z::Zlib => 1 + stored,
        Z::Zstd => 2 + stored,
    }
}

struct Board {
    rows: Vec<Row>,
    /// Unix ms of the last publication.
    at_ms: u64,
}

pub struct SessionBoard {
    boards: Box<[Mutex<Board>]>,
    cap: usize,
}

/// One page of an application's rows (`SessionBoard::page`).
#[derive(Debug, Default)]
pub struct Page {
    /// Sorted by session id, all past the cursor, at most the limit.
    pub rows: Vec<Row>,
    /// The application's rows in every board, the page's and the others.
    pub total: usize,
    /// The oldest publication read (Unix ms).
    pub as_of_ms: u64,
}

impl SessionBoard {
    /// `workers` boards of `cap` rows each, allocated now.
    pub fn new(workers: usize, cap: usize) -> SessionBoard {
        SessionBoard {
            boards: (0..workers.max(1))
                .map(|_| {
                    Mutex::new(Board {
                        rows: Vec::with_capacity(cap),
                        at_ms: 0,
                    })
                })
                .collect(),
            cap,
        }
    }

    /// `worker` publishes its sessions: `fill` pushes them (rows past the
    /// board's size are dropped, never allocated). False: a reader held
    /// the board, nothing was written (try again at the next second).
    pub fn publish(
        &self,
        worker: usize,
        now_ms: u64,
        fill: impl FnOnce(&mut dyn FnMut(Row)),
    ) -> bool {
        let Some(b) = self.boards.get(worker) else {
            return false;
        };
        let mut b = match b.try_lock() {
            Ok(b) => b,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        let cap = self.cap;
        b.rows.clear();
        let rows = &mut b.rows;
        fill(&mut |r| {
            if rows.len() < cap {
                rows.push(r);
            }
        });
        debug_assert!(b.rows.capacity() <= cap.max(1), "a board never grows");
        b.at_ms = now_ms;
        true
    }

    /// Up to `limit` rows of `app` whose session id sorts after `after`
    /// (None: from the first), sorted by session id, with the count of
    /// all its rows.
    pub fn page(&self, app: u64, after: Option<u128>, limit: usize) -> Page {
        let mut page = Page {
            as_of_ms: u64::MAX,
            ..Page::default()
        };
        let mut rows: Vec<Row> = Vec::with_capacity(limit.min(4096) + 1);
        for b in self.boards.iter() {
            let b = b.lock().unwrap_or_else(|p| p.into_inner());
            page.as_of_ms = page.as_of_ms.min(b.at_ms);
            for r in b.rows.iter().filter(|r| r.app == app) {
                page.total += 1;
                if after.is_some_and(|a| r.session <= a) || limit == 0 {
                    continue;
                }
                // Keep the `limit` smallest ids: insert in order, drop the
                // largest when over.
                if rows.len() == limit && rows.last().is_some_and(|l| l.session <= r.session) {
                    continue;
                }
                let at = rows.partition_point(|x| x.session < r.session);
                rows.insert(at, *r);
                rows.truncate(limit);
            }
        }
        if page.as_of_ms == u64::MAX {
            page.as_of_ms = 0;
        }
        page.rows = rows;
        page
    }
}

#[cfg(test)]
mod tests {
    use crate::worker::session_board::*;

    fn row(app: u64, session: u128) -> Row {
        Row {
            app,
            session,
            ..Row::default()
        }
    }

    #[test]
    fn pages_walk_every_row_of_one_application_in_order() {
        let b = SessionBoard::new(2, 1000);
        assert!(b.publish(0, 5, |push| {
            for i in (0..700u128).rev() {
                push(row(1, i * 2));
                push(row(2, i * 2));
            }
        }));
        assert!(b.publish(1, 7, |push| {
            for i in 0..600u128 {
                push(row(1, i * 2 + 1));
            }
        }));
        let mut seen = Vec::new();
        let mut after = None;
        loop {
            let p = b.page(1, after, 100);
            assert_eq!(p.total, 500 + 600, "the first board is full at 1000 rows");
            assert_eq!(p.as_of_ms, 5);
            if p.rows.is_empty() {
                break;
            }
            assert!(p.rows.len() <= 100);
            assert!(p.rows.iter().all(|r| r.app == 1));
            after = p.rows.last().map(|r| r.session);
            seen.extend(p.rows.iter().map(|r| r.session));
        }
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(seen, sorted, "in order, each once");
        // Board 0 kept its first 1000 pushes: 500 rows of app 1 (ids 1398 down to 400).
        assert_eq!(seen.len(), 500 + 600);
    }

    #[test]
    fn a_held_board_is_skipped_not_waited_for() {
        let b = SessionBoard::new(1, 10);
        let held = b.boards[0].lock().unwrap();
        assert!(!b.publish(0, 1, |push| push(row(1, 1))));
        drop(held);
        assert!(b.publish(0, 2, |push| push(row(1, 1))));
        assert_eq!(b.page(1, None, 10).rows.len(), 1);
        assert!(!b.publish(5, 2, |_| {}), "no such worker");
    }
}
