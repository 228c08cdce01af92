//! A connection as the worker holds it: the socket slot's state, its
//! buffers, TLS and compression streams, and the gateway session it
//! serves. Moves between workers whole (see `Handover`).

use net::tls::TlsSession;
use net::ws;

use crate::protocol::compress::Compressor;
use crate::protocol::session::{Action, Session};
use crate::protocol::Close;
use proto::SessionIdx;

pub(super) enum ConnState {
    /// Reading an HTTP request head (REST, or the WebSocket upgrade).
    Http,
    /// With the fan-out session it serves after READY or RESUMED, kept
    /// here rather than in `WsConn` so a send finds it in the connection's
    /// own cache lines.
    WebSocket(Box<WsConn>, Option<SessionIdx>),
    /// Our FIN is sent (or about to be); waiting for the peer's until `deadline`.
    Closing,
}

pub(super) struct WsConn {
    pub(super) decoder: ws::Decoder,
    pub(super) session: Session,
    /// Set when the session must not be kept for Resume after this connection.
    pub(super) end_session: bool,
    /// The token of a Resume under way, until it is answered: a refusal
    /// is attributed to its application (`Worker::attribute`).
    pub(super) resume_token: Option<Box<str>>,
}

/// The connection's send, one at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SendState {
    /// Nothing in flight: a flush may send.
    Idle,
    /// A send is in flight: `wire` is immutable until its completion. With
    /// the send-pool slot of a plain-text `sendmsg` (None: a send of `wire`,
    /// i.e. TLS ciphertext or compressed frames).
    InFlight(Option<u16>),
    /// A send came back short or refused: wait for POLLOUT before the next.
    WaitingWritable,
}

impl SendState {
    pub(super) fn in_flight(self) -> bool {
        matches!(self, SendState::InFlight(_))
    }
}

/// How far a connection has come towards closing; it only moves forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Lifecycle {
    Open,
    /// Shut down writing once `out` and `wire` are flushed.
    ShutAfterFlush,
    /// Our FIN (SHUT_WR) is submitted; waiting for the peer's.
    WriteShut,
    /// The Close op has been submitted; the slot is being freed.
    Closed,
}

impl Lifecycle {
    pub(super) fn closed(self) -> bool {
        self == Lifecycle::Closed
    }

    /// Writing ends once what is queued is flushed (or has ended already).
    pub(super) fn shutting(self) -> bool {
        self >= Lifecycle::ShutAfterFlush
    }

    /// Ask for the shutdown after the flush (no step back from later stages).
    pub(super) fn shut_after_flush(&mut self) {
        if *self == Lifecycle::Open {
            *self = Lifecycle::ShutAfterFlush;
        }
    }

    /// The flush is done: true once, when our FIN is due.
    pub(super) fn take_write_shut(&mut self) -> bool {
        let due = *self == Lifecycle::ShutAfterFlush;
        if due {
            *self = Lifecycle::WriteShut;
        }
        due
    }
}

/// A close `begin_close` was asked for while a send was in flight: with a
/// close frame, or only our FIN.
pub(super) enum DeferredClose {
    Frame(Close),
    Silent,
}

impl DeferredClose {
    pub(super) fn new(close: Option<Close>) -> DeferredClose {
        close.map_or(DeferredClose::Silent, DeferredClose::Frame)
    }

    pub(super) fn into_close(self) -> Option<Close> {
        match self {
            DeferredClose::Frame(c) => Some(c),
            DeferredClose::Silent => None,
        }
    }
}

/// Housekeeping ticks a connection's buffers must stay empty before they go
/// back (four ticks: a second).
const QUIET_TICKS: u8 = 4;
/// A buffer this small is kept when idle: a heartbeat (~30 B in) and its
/// ACK (11 B out) fit, so a quiet session's heartbeats do not allocate.
const KEEP_IDLE: usize = 64;

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
    /// Bytes handed to the kernel (ciphertext under TLS); immutable while a send is in flight.
    pub(super) wire: Vec<u8>,
    pub(super) wire_off: usize,
    /// At most one send in flight per connection.
    pub(super) send: SendState,
    /// Bytes of the first unsent ring entry's frame a short write already sent.
    pub(super) partial: usize,
    /// In the worker's flush queue.
    pub(super) queued: bool,
    /// How far closing has come.
    pub(super) life: Lifecycle,
    /// Handshake deadline (Http) or linger deadline (Closing), in ms.
    pub(super) deadline_ms: u64,
    /// What a connection serving HTTP requests keeps between them; given
    /// back when it becomes a WebSocket (see `rest`).
    pub(super) rest_state: Option<Box<RestConn>>,
    pub(super) keep_alive: bool,
    /// Set while this connection is being moved to its session's worker.
    pub(super) handover: Option<Box<Handover>>,
    /// A close asked for while a send was in flight (see `begin_close`).
    pub(super) close_pending: Option<DeferredClose>,
    /// Transport compression (`compress=zlib-stream`/`zstd-stream`): the
    /// connection's stream, held until the connection is gone (a close frame
    /// after the session ended still follows compressed messages). Its
    /// messages are built into `wire` and sent from there, like TLS.
    pub(super) compress: Option<Box<Compressor>>,
    /// With `compress`: bytes at the front of `out` already in wire form
    /// (the 101 response); the frames after them are compressed at flush.
    pub(super) out_raw: usize,
    /// Housekeeping ticks in a row that found the buffers empty and nothing
    /// in flight (see `release_idle_buffers`).
    pub(super) quiet_ticks: u8,
    /// Timed frames in `wire` (TLS, compression) and when it was submitted
    /// (Unix ns): their `submit_to_sent` is counted when all of it has gone
    /// (delivery/latency.rs).
    pub(super) wire_timed: u32,
    pub(super) wire_submit_ns: u64,
}

/// A connection's REST state between its requests. Held in its own box so
/// that a connection that became a WebSocket, most of them, does not carry
/// it (issue 30: an idle session's memory).
pub(super) struct RestConn {
    /// A REST answer is awaited from the sidecar; later requests wait.
    pub(super) pending: bool,
    /// The rate-limit headers the awaited REST answer will carry.
    pub(super) headers: crate::api::headers::HeaderList,
    /// The request's `api::route::ROUTE_NAMES` index, for its metrics.
    pub(super) route: u8,
    /// The application of the request's token, once known (0: not yet).
    pub(super) app: u64,
    /// The request's latency class and when it was read (µs since the worker started).
    pub(super) class: u8,
    /// The token's worker refused this connection (its table was full): its
    /// REST requests are served here from now on, not handed over again.
    pub(super) here: bool,
    pub(super) started_us: u64,
    /// The source address, for invalid requests counted per address.
    pub(super) peer: Peer,
    /// The first REST request, waiting for `peer`.
    pub(super) peer_wait: Option<Box<ApiRequest>>,
    /// A REST request waiting for its token's lookup (see `worker/rest.rs`).
    pub(super) api_wait: Option<Box<crate::api::Pending>>,
}

impl Default for RestConn {
    fn default() -> RestConn {
        RestConn {
            pending: false,
            headers: crate::api::headers::HeaderList::new(),
            route: 0,
            app: 0,
            class: 0,
            here: false,
            started_us: 0,
            peer: Peer::Unknown,
            peer_wait: None,
            api_wait: None,
        }
    }
}

/// A REST request read off a connection: its head and body.
pub(super) struct ApiRequest {
    pub(super) head: net::http::RequestHead,
    pub(super) body: Vec<u8>,
}

/// What a connection knows of its source address (looked up on its first
/// REST request: a direct descriptor comes with no address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Peer {
    Unknown,
    /// Looked up; the invalid requests answered meanwhile.
    Pending(u32),
    Known(u128),
    /// The kernel could not say (not counted per address).
    Failed,
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
    /// The connection's REST state; made again if a WebSocket connection
    /// (which gave it back) is asked for it, so no path can find it missing.
    pub(super) fn rest(&mut self) -> &mut RestConn {
        self.rest_state.get_or_insert_with(Box::default)
    }

    /// Called by every housekeeping tick (250 ms): once the connection's
    /// buffers have been empty with nothing in flight for `QUIET_TICKS` ticks
    /// in a row, those larger than `KEEP_IDLE` bytes go back to the
    /// allocator. An idle session then holds no buffer: its upgrade request,
    /// Identify, 101 response and Hello left ~800 B behind (issue 30). A
    /// plain-text session's events never pass through these buffers (they
    /// are sent from the event arena), so its event path still allocates
    /// nothing; a TLS or compressed one builds its frames in `wire` and may
    /// allocate it again at most once per `QUIET_TICKS` ticks.
    pub(super) fn release_idle_buffers(&mut self) {
        let quiet = self.send == SendState::Idle
            && !self.queued
            && self.inbuf.is_empty()
            && self.out.is_empty()
            && self.wire.is_empty();
        if !quiet {
            self.quiet_ticks = 0;
            return;
        }
        self.quiet_ticks = self.quiet_ticks.saturating_add(1);
        if self.quiet_ticks < QUIET_TICKS {
            return;
        }
        for buf in [&mut self.inbuf, &mut self.out, &mut self.wire] {
            if buf.capacity() > KEEP_IDLE {
                *buf = Vec::new();
            }
        }
    }

    /// A REST answer is awaited (never, on a WebSocket connection).
    pub(super) fn rest_pending(&self) -> bool {
        self.rest_state.as_ref().is_some_and(|r| r.pending)
    }

    pub(super) fn new(gen: u16, tls: Option<Box<TlsSession>>, deadline_ms: u64) -> Conn {
        Conn {
            gen,
            state: ConnState::Http,
            tls,
            inbuf: Vec::new(),
            out: Vec::new(),
            wire: Vec::new(),
            wire_off: 0,
            send: SendState::Idle,
            partial: 0,
            queued: false,
            life: Lifecycle::Open,
            deadline_ms,
            rest_state: Some(Box::default()),
            keep_alive: true,
            handover: None,
            close_pending: None,
            compress: None,
            out_raw: 0,
            quiet_ticks: 0,
            wire_timed: 0,
            wire_submit_ns: 0,
        }
    }
}
