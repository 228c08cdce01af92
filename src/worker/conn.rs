//! A connection as the worker holds it: the socket slot's state, its
//! buffers, TLS and compression streams, and the gateway session it
//! serves. Moves between workers whole (see `Handover`).

use net::tls::TlsSession;
use net::ws;

use crate::protocol::compress::Compressor;
use crate::protocol::session::{Action, Session};
use crate::protocol::Close;

pub(super) enum ConnState {
    /// Reading an HTTP request head (REST, or the WebSocket upgrade).
    Http,
    /// With the fan-out session it serves after READY or RESUMED, kept
    /// here rather than in `WsConn` so a send finds it in the connection's
    /// own cache lines.
    WebSocket(Box<WsConn>, Option<u32>),
    /// Our FIN is sent (or about to be); waiting for the peer's until `deadline`.
    Closing,
}

pub(super) struct WsConn {
    pub(super) decoder: ws::Decoder,
    pub(super) session: Session,
    /// Set when the session must not be kept for Resume after this connection.
    pub(super) end_session: bool,
}

/// A connection: its socket slot's state, buffers, TLS and gateway session.
/// Moves between workers whole (see `Handover`).
pub struct Conn {
    pub(super) gen: u16,
    pub(super) state: ConnState,
    pub(super) tls: Option<Box<TlsSession>>,
    /// Received plaintext not yet parsed.
    pub(super) inbuf: Vec<u8>,
    /// Plaintext queued for the socket; every frame of one batch coalesces here.
    pub(super) out: Vec<u8>,
    /// Bytes handed to the kernel (ciphertext under TLS); immutable while `sending`.
    pub(super) wire: Vec<u8>,
    pub(super) wire_off: usize,
    pub(super) sending: bool,
    /// The send slot of the plain-text send in flight.
    pub(super) send_slot: Option<u16>,
    /// Bytes of the first unsent ring entry's frame a short write already sent.
    pub(super) partial: usize,
    /// A send came back short or refused: wait for POLLOUT before the next.
    pub(super) waiting_writable: bool,
    pub(super) queued: bool,
    /// Shut down writing once `out` and `wire` are flushed.
    pub(super) close_after_flush: bool,
    pub(super) write_shut: bool,
    /// Handshake deadline (Http) or linger deadline (Closing), in ms.
    pub(super) deadline_ms: u64,
    /// A REST answer is awaited from the sidecar; later requests wait.
    pub(super) rest_pending: bool,
    pub(super) keep_alive: bool,
    /// The Close op has been submitted; the slot is being freed.
    pub(super) closed: bool,
    /// Set while this connection is being moved to its session's worker.
    pub(super) handover: Option<Box<Handover>>,
    /// A close that waits for the send in flight (see `begin_close`).
    pub(super) close_pending: Option<Option<Close>>,
    /// Transport compression (`compress=zlib-stream`/`zstd-stream`): the
    /// connection's stream, held until the connection is gone (a close frame
    /// after the session ended still follows compressed messages). Its
    /// messages are built into `wire` and sent from there, like TLS.
    pub(super) compress: Option<Box<Compressor>>,
    /// With `compress`: bytes at the front of `out` already in wire form
    /// (the 101 response); the frames after them are compressed at flush.
    pub(super) out_raw: usize,
}

/// Moving a connection to the worker that owns its session (a Resume) or
/// its `(application, shard)` placement (an Identify): stop receiving here,
/// pass the socket with MSG_RING, send the state by message.
pub(super) struct Handover {
    pub(super) to: usize,
    pub(super) action: Option<Action>,
    pub(super) recv_done: bool,
    pub(super) passed: bool,
    /// Pairs our message with the socket's arrival on the new owner's ring.
    pub(super) token: u64,
}

/// The two halves of an incoming handover, which arrive in either order.
#[derive(Default)]
pub(super) struct Adoption {
    pub(super) slot: Option<(usize, Result<u32, i32>)>,
    pub(super) conn: Option<(Box<Conn>, Action)>,
    pub(super) since_ms: u64,
}

impl Conn {
    pub(super) fn new(gen: u16, tls: Option<Box<TlsSession>>, deadline_ms: u64) -> Conn {
        Conn {
            gen,
            state: ConnState::Http,
            tls,
            inbuf: Vec::new(),
            out: Vec::new(),
            wire: Vec::new(),
            wire_off: 0,
            sending: false,
            send_slot: None,
            partial: 0,
            waiting_writable: false,
            queued: false,
            close_after_flush: false,
            write_shut: false,
            deadline_ms,
            rest_pending: false,
            keep_alive: true,
            closed: false,
            handover: None,
            close_pending: None,
            compress: None,
            out_raw: 0,
        }
    }
}
