//! "Figures of application X" on the node-to-node link (docs/portal.md,
//! "Several nodes"): the developer portal of one node asks every other
//! live node for what it counts of the signed-in application, so the page
//! shows the cluster's sessions by node and shard.
//!
//! The link carries the figures as opaque bytes: what they hold is the
//! portal's (`portal::figures`, handed to `start` as a `Provider`). Here:
//! the request, its answer's framing and bounds, and both ends.
//!
//! - The request names up to `MAX_APPS` applications (every application
//!   whose page is open on the asking node, so one request a second serves
//!   them all). Its head is `REQUEST_LEN` bytes, the size of a hand-off's
//!   `Take`, with a magic of its own (`GWF1`), the count and the deadline;
//!   the application ids follow. A node that does not know it reads the
//!   head, refuses it as a malformed hand-off and closes, so the asker
//!   learns at once (not at its deadline) that the node does not answer.
//! - The answer is a 4-byte little-endian length, then at most
//!   `MAX_ANSWER` bytes: per application asked, in order, its id, a 4-byte
//!   length and its figures. A longer length prefix is refused before
//!   anything is read or allocated; every entry's length is checked
//!   against the bytes left.
//! - The asker gives one deadline for connect, request and answer; the
//!   request carries it as Unix ms, and a node that reads it later (it was
//!   frozen) does not answer.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::tls::{self, Link, LinkTls};

use crate::delivery::moved::TAKE_LEN;

pub const MAGIC: &[u8; 4] = b"GWF1";
/// The request's head (the ids follow it).
pub const REQUEST_LEN: usize = TAKE_LEN;
/// Applications one request may name.
pub const MAX_APPS: usize = 256;
/// Largest answer asked for or sent (an application's figures on one node
/// are a few hundred bytes; one application on a node of 32 workers with 8
/// shards each, about 5 KiB).
pub const MAX_ANSWER: usize = 4 << 20;

/// What a node answers for an application: its figures' bytes into the
/// buffer (cleared first). Called on a link thread, never on a worker.
pub type Provider = Arc<dyn Fn(u64, &mut Vec<u8>) + Send + Sync>;

/// "Your figures of these applications, before `deadline_unix_ms`".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ask {
    pub apps: Vec<u64>,
    pub deadline_unix_ms: u64,
}

impl Ask {
    pub fn encode(&self) -> Vec<u8> {
        let apps = &self.apps[..self.apps.len().min(MAX_APPS)];
        let mut out = vec![0u8; REQUEST_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4..8].copy_from_slice(&(apps.len() as u32).to_le_bytes());
        out[8..16].copy_from_slice(&self.deadline_unix_ms.to_le_bytes());
        for a in apps {
            out.extend_from_slice(&a.to_le_bytes());
        }
        out
    }

    /// The head: (applications that follow, deadline). None: not a
    /// figures request, or a broken one (padding not zero, no or too many
    /// applications).
    pub fn decode_head(b: &[u8]) -> Option<(usize, u64)> {
        if b.len() != REQUEST_LEN || &b[..4] != MAGIC || b[16..].iter().any(|&x| x != 0) {
            return None;
        }
        let n = u32::from_le_bytes(b[4..8].try_into().ok()?) as usize;
        let deadline = u64::from_le_bytes(b[8..16].try_into().ok()?);
        (1..=MAX_APPS).contains(&n).then_some((n, deadline))
    }

    /// The whole request (head and ids).
    pub fn decode(b: &[u8]) -> Option<Ask> {
        let (n, deadline_unix_ms) = Self::decode_head(b.get(..REQUEST_LEN)?)?;
        let ids = &b[REQUEST_LEN..];
        if ids.len() != n * 8 {
            return None;
        }
        let apps: Vec<u64> = ids
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .collect();
        (!apps.contains(&0)).then_some(Ask {
            apps,
            deadline_unix_ms,
        })
    }
}

/// Why a node gave no figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Silence {
    /// No connection (refused, or none within the deadline).
    Connect,
    /// The TLS handshake failed (a certificate that does not verify).
    Handshake,
    /// Connected, but no whole answer before the deadline (frozen, busy).
    Timeout,
    /// Closed without an answer (an older node, or too many requests).
    Closed,
    /// An answer longer than `MAX_ANSWER` (refused unread).
    TooLong,
    /// An answer that is not one entry per application asked, in order.
    Malformed,
}

impl Silence {
    pub fn as_str(self) -> &'static str {
        match self {
            Silence::Connect => "no connection",
            Silence::Handshake => "TLS handshake failed",
            Silence::Timeout => "no answer in time",
            Silence::Closed => "closed without an answer",
            Silence::TooLong => "answer too long",
            Silence::Malformed => "a malformed answer",
        }
    }
}

/// Serve one figures request (the link thread read its head, whose magic
/// is ours, with the stream's read timeout set). Returns whether an answer
/// was written.
pub(super) fn serve(stream: &mut Link, head: &[u8], provider: &Provider) -> bool {
    let Some((n, deadline)) = Ask::decode_head(head) else {
        return false;
    };
    let mut req = head.to_vec();
    req.resize(REQUEST_LEN + n * 8, 0);
    if stream.read_exact(&mut req[REQUEST_LEN..]).is_err() {
        return false;
    }
    let Some(ask) = Ask::decode(&req) else {
        return false;
    };
    let mut body = Vec::with_capacity(1024 * n);
    let mut one = Vec::with_capacity(1024);
    for &app in &ask.apps {
        if registry::snowflake::unix_ms_now() >= deadline {
            return false; // the asker has stopped waiting
        }
        provider(app, &mut one);
        body.extend_from_slice(&app.to_le_bytes());
        body.extend_from_slice(&(one.len() as u32).to_le_bytes());
        body.extend_from_slice(&one);
        if body.len() > MAX_ANSWER {
            return false;
        }
    }
    let len = (body.len() as u32).to_le_bytes();
    stream
        .write_all(&len)
        .and_then(|_| stream.write_all(&body))
        .and_then(|_| stream.flush())
        .is_ok()
}

/// Ask the node at `addr` for its figures of `apps` (at most `MAX_APPS`);
/// everything before `deadline`. Each application's figures' bytes, in the
/// order asked, or why there are none.
pub fn ask(
    tls: Option<&LinkTls>,
    addr: SocketAddr,
    apps: &[u64],
    deadline: Instant,
) -> Result<Vec<Vec<u8>>, Silence> {
    let apps = &apps[..apps.len().min(MAX_APPS)];
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let unix_deadline =
        registry::snowflake::unix_ms_now() + left().map_or(0, |d| d.as_millis() as u64);
    let req = Ask {
        apps: apps.to_vec(),
        deadline_unix_ms: unix_deadline,
    }
    .encode();
    let mut s = tls::dial(tls, addr, deadline).map_err(|e| {
        if tls::is_handshake_error(&e) {
            Silence::Handshake
        } else {
            Silence::Connect
        }
    })?;
    s.tcp()
        .set_write_timeout(Some(left().ok_or(Silence::Timeout)?))
        .map_err(|_| Silence::Timeout)?;
    s.write_all(&req)
        .and_then(|_| s.flush())
        .map_err(|_| Silence::Closed)?;
    let mut len = [0u8; 4];
    read_by(&mut s, &mut len, &left)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_ANSWER {
        return Err(Silence::TooLong);
    }
    let mut buf = vec![0u8; len];
    read_by(&mut s, &mut buf, &left)?;
    split_answer(&buf, apps).ok_or(Silence::Malformed)
}

/// One entry per application asked, in order, with checked lengths.
fn split_answer(mut b: &[u8], apps: &[u64]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::with_capacity(apps.len());
    for &app in apps {
        let (id, rest) = b.split_at_checked(8)?;
        let (len, rest) = rest.split_at_checked(4)?;
        let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
        let (one, rest) = rest.split_at_checked(len)?;
        if u64::from_le_bytes(id.try_into().ok()?) != app {
            return None;
        }
        out.push(one.to_vec());
        b = rest;
    }
    b.is_empty().then_some(out)
}

/// Fill `buf`, re-arming the read timeout to what is left of the deadline.
fn read_by(
    s: &mut Link,
    buf: &mut [u8],
    left: &impl Fn() -> Option<Duration>,
) -> Result<(), Silence> {
    let mut got = 0;
    while got < buf.len() {
        s.tcp()
            .set_read_timeout(Some(left().ok_or(Silence::Timeout)?))
            .map_err(|_| Silence::Timeout)?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(Silence::Closed),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Silence::Timeout)
            }
            Err(_) => return Err(Silence::Closed),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_take_sized_head_of_its_own_then_the_ids() {
        let a = Ask {
            apps: vec![42, 43],
            deadline_unix_ms: 1_000,
        };
        let b = a.encode();
        assert_eq!(b.len(), REQUEST_LEN + 16);
        assert_eq!(Ask::decode(&b), Some(a));
        // Not a hand-off: a node that only knows `Take` refuses its head.
        assert!(crate::delivery::moved::Take::decode(&b[..REQUEST_LEN]).is_none());
        let mut bad = b.clone();
        bad[50] = 1;
        assert_eq!(Ask::decode(&bad), None, "padding must be zero");
        for cut in 0..b.len() {
            assert_eq!(Ask::decode(&b[..cut]), None, "cut at {cut}");
        }
        let zero = Ask {
            apps: vec![0],
            deadline_unix_ms: 1,
        };
        assert_eq!(Ask::decode(&zero.encode()), None, "no application 0");
        let none = Ask {
            apps: vec![],
            deadline_unix_ms: 1,
        };
        assert_eq!(Ask::decode_head(&none.encode()), None, "none asked");
        let mut many = none.encode();
        many[4..8].copy_from_slice(&(MAX_APPS as u32 + 1).to_le_bytes());
        assert_eq!(Ask::decode_head(&many), None, "too many asked");
    }

    #[test]
    fn an_answer_is_one_entry_per_application_in_order() {
        let mut b = Vec::new();
        for (app, body) in [(7u64, &b"xy"[..]), (9, &b""[..])] {
            b.extend_from_slice(&app.to_le_bytes());
            b.extend_from_slice(&(body.len() as u32).to_le_bytes());
            b.extend_from_slice(body);
        }
        assert_eq!(
            split_answer(&b, &[7, 9]),
            Some(vec![b"xy".to_vec(), vec![]])
        );
        assert_eq!(split_answer(&b, &[9, 7]), None, "order");
        assert_eq!(split_answer(&b, &[7]), None, "an entry not asked for");
        for cut in 0..b.len() {
            assert_eq!(split_answer(&b[..cut], &[7, 9]), None, "cut at {cut}");
        }
        let mut forged = b.clone();
        forged[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(split_answer(&forged, &[7, 9]), None, "a forged length");
    }

    #[test]
    fn a_silent_or_lying_peer_costs_one_deadline_and_no_allocation() {
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            // First: accept and say nothing. Second: a huge length.
            let (s1, _) = l.accept().unwrap();
            let (mut s2, _) = l.accept().unwrap();
            let mut req = [0u8; REQUEST_LEN + 8];
            s2.read_exact(&mut req).unwrap();
            s2.write_all(&u32::MAX.to_le_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(s1);
        });
        let start = Instant::now();
        let r = ask(
            None,
            addr,
            &[7],
            Instant::now() + Duration::from_millis(150),
        );
        assert_eq!(r, Err(Silence::Timeout));
        assert!(start.elapsed() < Duration::from_millis(400));
        let r = ask(
            None,
            addr,
            &[7],
            Instant::now() + Duration::from_millis(150),
        );
        assert_eq!(r, Err(Silence::TooLong));
        t.join().unwrap();
    }
}
