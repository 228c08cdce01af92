//! What a worker needs before it runs, built on the main thread so setup
//! errors (bind, ring limits, the arena) are reported before the node says
//! it is ready: its rings and their listeners, its wake eventfd, its
//! fan-out (sessions, rings, the event arena), all allocated here.

use std::net::TcpListener;
use std::os::fd::RawFd;

use net::uring::{Ring, RingConfig};

use crate::delivery::fanout::{FanOut, FanOutConfig};

/// Ring entries beyond `max_unsent` a session may hold (see FanOutConfig).
const RING_HEADROOM: u32 = 64;

/// Everything a worker needs, built on the main thread so setup errors
/// (bind, ring limits) are reported before the node says it is ready.
pub struct WorkerSetup {
    pub rings: Vec<(Ring, TcpListener)>,
    pub wake_fd: RawFd,
    pub fan: FanOut,
}

impl WorkerSetup {
    pub fn new(
        shared_cfg: &crate::config::Config,
        rings: usize,
        slots_per_ring: u32,
    ) -> std::io::Result<WorkerSetup> {
        // SAFETY: a plain eventfd; blocking on purpose (glommio reads it).
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if wake_fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut out = Vec::new();
        for _ in 0..rings {
            let ring = Ring::new(&RingConfig {
                sq_entries: shared_cfg.ring.sq_entries,
                cq_entries: shared_cfg.ring.cq_entries,
                fixed_files: slots_per_ring,
                recv_buffers: shared_cfg.ring.recv_buffers,
                recv_buffer_size: shared_cfg.ring.recv_buffer_size,
                coop_taskrun: true,
            })?;
            ring.register_eventfd(wake_fd)?;
            let listener = net::uring::listen_reuseport(shared_cfg.gateway_addr, 4096)?;
            if shared_cfg.limits.socket_send_buffer_bytes > 0 {
                net::uring::set_send_buffer(&listener, shared_cfg.limits.socket_send_buffer_bytes)?;
            }
            out.push((ring, listener));
        }
        let ev = &shared_cfg.events;
        let fan = FanOut::new(
            FanOutConfig {
                arena_bytes: ev.arena_bytes,
                // Auto: every session may hold two chunks (its READY and
                // recent history) plus room for backlogs.
                ring_chunks: if ev.ring_chunks > 0 {
                    ev.ring_chunks
                } else {
                    shared_cfg
                        .limits
                        .max_sessions_per_worker
                        .saturating_mul(2)
                        .saturating_add(16_384)
                },
                ring: ringbuf::RingConfig {
                    max_unsent: ev.max_unsent,
                    // Headroom past the unsent bound for the event that finds
                    // it reached and for RESUMED after a full replay.
                    max_held: ev.max_held.max(ev.max_unsent + RING_HEADROOM),
                    max_unsent_bytes: ev.max_unsent_bytes,
                },
                resume_window_ms: shared_cfg.limits.resume_window_ms,
            },
            shared_cfg.limits.max_sessions_per_worker as usize,
        )
        .map_err(std::io::Error::other)?;
        Ok(WorkerSetup {
            rings: out,
            wake_fd,
            fan,
        })
    }
}
