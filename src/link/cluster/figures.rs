//! "Figures of application X" on the node-to-node link (docs/portal.md,
//! "Several nodes"): the developer portal of one node asks every other
//! live node for what it counts of the signed-in application, so the page
//! shows the cluster's sessions by node and shard.
//!
//! The link carries the figures as opaque bytes: what they hold is the
//! portal's (`portal::figures`, handed to `start` as a `Provider`). Here:
//! the request, its answer's framing and bounds, and both ends.
//!
//! - The request is `REQUEST_LEN` bytes, the size of a hand-off's `Take`,
//!   with a magic of its own (`GWF1`): a node that does not know it reads
//!   it whole, refuses it as a malformed hand-off and closes, so the asker
//!   learns at once (not at its deadline) that the node does not answer.
//! - The answer is a 4-byte little-endian length, then at most
//!   `MAX_ANSWER` bytes; a longer length prefix is refused before anything
//!   is read or allocated.
//! - The asker gives one deadline for connect, request and answer; the
//!   request carries it as Unix ms, and a node that reads it later (it was
//!   frozen) does not answer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::delivery::moved::TAKE_LEN;

pub const MAGIC: &[u8; 4] = b"GWF1";
pub const REQUEST_LEN: usize = TAKE_LEN;
/// Largest answer asked for or sent (an application's figures on one node
/// are a few hundred bytes; 256 workers with 8 shards each fit).
pub const MAX_ANSWER: usize = 64 << 10;

/// What a node answers for an application: its figures' bytes into the
/// buffer (cleared first). Called on a link thread, never on a worker.
pub type Provider = Arc<dyn Fn(u64, &mut Vec<u8>) + Send + Sync>;

/// "Your figures of `app`, before `deadline_unix_ms`".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask {
    pub app: u64,
    pub deadline_unix_ms: u64,
}

impl Ask {
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut out = [0u8; REQUEST_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4..12].copy_from_slice(&self.app.to_le_bytes());
        out[12..20].copy_from_slice(&self.deadline_unix_ms.to_le_bytes());
        out
    }

    /// None: not a figures request (or a broken one: the padding is zero).
    pub fn decode(b: &[u8]) -> Option<Ask> {
        if b.len() != REQUEST_LEN || &b[..4] != MAGIC || b[20..].iter().any(|&x| x != 0) {
            return None;
        }
        let app = u64::from_le_bytes(b[4..12].try_into().ok()?);
        let deadline_unix_ms = u64::from_le_bytes(b[12..20].try_into().ok()?);
        (app != 0).then_some(Ask {
            app,
            deadline_unix_ms,
        })
    }
}

/// Why a node gave no figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Silence {
    /// No connection (refused, or none within the deadline).
    Connect,
    /// Connected, but no whole answer before the deadline (frozen, busy).
    Timeout,
    /// Closed without an answer (an older node, or too many requests).
    Closed,
    /// An answer longer than `MAX_ANSWER` (refused unread).
    TooLong,
}

impl Silence {
    pub fn as_str(self) -> &'static str {
        match self {
            Silence::Connect => "no connection",
            Silence::Timeout => "no answer in time",
            Silence::Closed => "closed without an answer",
            Silence::TooLong => "answer too long",
        }
    }
}

/// Serve one figures request (the link thread read `req`, whose magic is
/// ours). Returns whether an answer was written.
pub(super) fn serve(stream: &mut TcpStream, req: &[u8], provider: &Provider) -> bool {
    let Some(ask) = Ask::decode(req) else {
        return false;
    };
    if registry::snowflake::unix_ms_now() >= ask.deadline_unix_ms {
        return false; // the asker has stopped waiting
    }
    let mut body = Vec::with_capacity(1024);
    provider(ask.app, &mut body);
    if body.len() > MAX_ANSWER {
        return false;
    }
    let len = (body.len() as u32).to_le_bytes();
    stream
        .write_all(&len)
        .and_then(|_| stream.write_all(&body))
        .is_ok()
}

/// Ask the node at `addr` for its figures of `app`; everything before
/// `deadline`. The answer's bytes, or why there are none.
pub fn ask(addr: SocketAddr, app: u64, deadline: Instant) -> Result<Vec<u8>, Silence> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let unix_deadline =
        registry::snowflake::unix_ms_now() + left().map_or(0, |d| d.as_millis() as u64);
    let req = Ask {
        app,
        deadline_unix_ms: unix_deadline,
    }
    .encode();
    let mut s = TcpStream::connect_timeout(&addr, left().ok_or(Silence::Connect)?)
        .map_err(|_| Silence::Connect)?;
    let _ = s.set_nodelay(true);
    s.set_write_timeout(Some(left().ok_or(Silence::Timeout)?))
        .map_err(|_| Silence::Timeout)?;
    s.write_all(&req).map_err(|_| Silence::Closed)?;
    let mut len = [0u8; 4];
    read_by(&mut s, &mut len, &left)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_ANSWER {
        return Err(Silence::TooLong);
    }
    let mut buf = vec![0u8; len];
    read_by(&mut s, &mut buf, &left)?;
    Ok(buf)
}

/// Fill `buf`, re-arming the read timeout to what is left of the deadline.
fn read_by(
    s: &mut TcpStream,
    buf: &mut [u8],
    left: &impl Fn() -> Option<Duration>,
) -> Result<(), Silence> {
    let mut got = 0;
    while got < buf.len() {
        s.set_read_timeout(Some(left().ok_or(Silence::Timeout)?))
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
    fn a_request_is_a_take_sized_frame_of_its_own() {
        let a = Ask {
            app: 42,
            deadline_unix_ms: 1_000,
        };
        let b = a.encode();
        assert_eq!(Ask::decode(&b), Some(a));
        // Not a hand-off: a node that only knows `Take` refuses it.
        assert!(crate::delivery::moved::Take::decode(&b).is_none());
        let mut bad = b;
        bad[50] = 1;
        assert_eq!(Ask::decode(&bad), None, "padding must be zero");
        assert_eq!(Ask::decode(&b[..20]), None);
        let zero = Ask {
            app: 0,
            deadline_unix_ms: 1,
        };
        assert_eq!(Ask::decode(&zero.encode()), None, "no application 0");
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
            let mut req = [0u8; REQUEST_LEN];
            s2.read_exact(&mut req).unwrap();
            s2.write_all(&u32::MAX.to_le_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            drop(s1);
        });
        let start = Instant::now();
        let r = ask(addr, 7, Instant::now() + Duration::from_millis(150));
        assert_eq!(r, Err(Silence::Timeout));
        assert!(start.elapsed() < Duration::from_millis(400));
        let r = ask(addr, 7, Instant::now() + Duration::from_millis(150));
        assert_eq!(r, Err(Silence::TooLong));
        t.join().unwrap();
    }
}
