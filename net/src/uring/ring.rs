//! [`Ring`]: one io_uring with a sparse fixed file table (sockets live there
//! as direct descriptors, never in the process fd table) and a provided-buffer
//! ring for multishot receives, sized once by [`RingConfig`] and never grown.
//!
//! Every method pushes submission entries tagged with the caller's `u64`;
//! [`Ring::drain`] copies the finished ones out as [`Completion`]s. A full
//! submission queue is submitted and retried, never dropped. This is the
//! workers' per-event path: moved here unchanged from `uring.rs`, and the
//! buffer ring stays in this file so its calls stay next to their callers.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::{BufRingEntry, CancelBuilder, Fd, Fixed, Timespec};
use io_uring::{cqueue, opcode, squeue, IoUring};

/// Sizes of one ring. Everything is allocated when the ring is built.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Submission queue entries (power of two).
    pub sq_entries: u32,
    /// Completion queue entries; keep it well above the SQ so bursts of
    /// multishot completions (an accept storm) do not overflow.
    pub cq_entries: u32,
    /// Slots in the fixed file table: the most sockets this ring can hold.
    pub fixed_files: u32,
    /// Provided receive buffers (power of two, at most 32768).
    pub recv_buffers: u16,
    /// Bytes per provided receive buffer.
    pub recv_buffer_size: u32,
    /// IORING_SETUP_COOP_TASKRUN: a completion that needs this thread's task
    /// work (a multishot receive's data, an accept) does not interrupt the
    /// thread with an inter-processor interrupt while it runs; the work runs
    /// at its next system call (every turn submits), and a thread asleep (in
    /// `io_uring_enter` or a blocking `read` of an eventfd) is still woken.
    /// Without it the SENDER of the data pays that IPI: on loopback, the
    /// peer's send wakes us in its own softirq (a VM exit on KVM). Only for a
    /// ring used by one thread, which every ring here is.
    pub coop_taskrun: bool,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            sq_entries: 4096,
            cq_entries: 16384,
            fixed_files: 16384,
            recv_buffers: 1024,
            recv_buffer_size: 4096,
            coop_taskrun: true,
        }
    }
}

/// One finished operation, copied out of the completion queue.
#[derive(Clone, Copy, Debug)]
pub struct Completion {
    pub user_data: u64,
    pub result: i32,
    pub flags: u32,
}

impl Completion {
    /// A multishot operation is still armed and will post again.
    pub fn more(&self) -> bool {
        cqueue::more(self.flags)
    }
    /// The provided buffer a receive landed in, if any.
    pub fn buffer_id(&self) -> Option<u16> {
        cqueue::buffer_select(self.flags)
    }
    /// The `-errno` of a failed operation as an `io::Error`.
    pub fn error(&self) -> Option<io::Error> {
        (self.result < 0).then(|| io::Error::from_raw_os_error(-self.result))
    }
}

const BUF_GROUP: u16 = 0;

/// The provided-buffer ring: the kernel picks a free buffer for each receive,
/// the owner hands it back with [`Ring::recycle`] once the bytes are consumed.
struct BufRing {
    entries: *mut BufRingEntry,
    entries_len: usize,
    mask: u16,
    tail: u16,
    data: *mut u8,
    data_len: usize,
    buf_size: u32,
}

// SAFETY: the mappings are owned by this value alone; moving it to another
// thread (a worker built on the main thread) moves sole ownership with it.
unsafe impl Send for BufRing {}

impl BufRing {
    fn new(count: u16, buf_size: u32) -> io::Result<Self> {
        assert!(
            count.is_power_of_two() && count <= 32768,
            "recv_buffers must be a power of two <= 32768"
        );
        assert!(buf_size > 0);
        let entries_len = count as usize * std::mem::size_of::<BufRingEntry>();
        let data_len = count as usize * buf_size as usize;
        let entries = mmap_anon(entries_len)? as *mut BufRingEntry;
        let data = match mmap_anon(data_len) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: unmaps the region mapped just above, with its length; nothing points into it yet.
                unsafe { libc::munmap(entries.cast(), entries_len) };
                return Err(e);
            }
        };
        let mut ring = BufRing {
            entries,
            entries_len,
            mask: count - 1,
            tail: 0,
            data,
            data_len,
            buf_size,
        };
        for bid in 0..count {
            ring.push(bid);
        }
        ring.publish();
        Ok(ring)
    }

    fn push(&mut self, bid: u16) {
        debug_assert!((bid as usize) * (self.buf_size as usize) < self.data_len);
        let idx = (self.tail & self.mask) as usize;
        // SAFETY: idx <= mask < entries; the region is ours until unregistered.
        let entry = unsafe { &mut *self.entries.add(idx) };
        entry.set_addr(self.data as u64 + bid as u64 * self.buf_size as u64);
        entry.set_len(self.buf_size);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&self) {
        // SAFETY: the tail lives in entry 0's reserved field, shared with the
        // kernel; it must be published with release ordering after the entries.
        unsafe {
            let tail = BufRingEntry::tail(self.entries) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn slice(&mut self, bid: u16, len: usize) -> &mut [u8] {
        let len = len.min(self.buf_size as usize);
        let off = bid as usize * self.buf_size as usize;
        assert!(off + len <= self.data_len, "buffer id out of range");
        // SAFETY: in bounds; the kernel does not write a buffer we have not recycled.
        unsafe { std::slice::from_raw_parts_mut(self.data.add(off), len) }
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: the two regions this ring mapped in `new`, with their lengths; the kernel registration ended with the ring that owned them, and no buffer borrowed from them outlives `self`.
        unsafe {
            libc::munmap(self.entries.cast(), self.entries_len);
            libc::munmap(self.data.cast(), self.data_len);
        }
    }
}

fn mmap_anon(len: usize) -> io::Result<*mut u8> {
    // SAFETY: a fresh private anonymous mapping; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// A ring with a sparse fixed file table and a provided-buffer ring.
pub struct Ring {
    ring: IoUring,
    bufs: BufRing,
    fixed_files: u32,
    /// Entries pushed since the last submit.
    unsubmitted: usize,
    timeout_spec: Box<Timespec>,
}

impl Ring {
    pub fn new(cfg: &RingConfig) -> io::Result<Ring> {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(cfg.cq_entries).setup_submit_all();
        if cfg.coop_taskrun {
            builder.setup_coop_taskrun();
        }
        let ring = builder.build(cfg.sq_entries)?;
        ring.submitter()
            .register_files_sparse(cfg.fixed_files)
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "registering a fixed file table of {} slots failed ({e}); \
                     each table is limited by RLIMIT_NOFILE",
                        cfg.fixed_files
                    ),
                )
            })?;
        let bufs = BufRing::new(cfg.recv_buffers, cfg.recv_buffer_size)?;
        // SAFETY: the entries stay mapped for the life of the ring (BufRing is
        // dropped after the IoUring: field order in `Ring`).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufs.entries as u64,
                cfg.recv_buffers,
                BUF_GROUP,
                0,
            )?;
        }
        Ok(Ring {
            ring,
            bufs,
            fixed_files: cfg.fixed_files,
            unsubmitted: 0,
            timeout_spec: Box::new(Timespec::new()),
        })
    }

    /// Slots in the fixed file table.
    pub fn fixed_files(&self) -> u32 {
        self.fixed_files
    }

    /// Have every completion also signal `eventfd`, so another reactor can
    /// wait for this ring (and other threads can wake it by writing to it).
    pub fn register_eventfd(&self, eventfd: RawFd) -> io::Result<()> {
        self.ring.submitter().register_eventfd(eventfd)
    }

    fn push(&mut self, entry: squeue::Entry) {
        loop {
            // SAFETY: callers guarantee every pointer in `entry` stays valid
            // until its completion (documented on each method).
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                self.unsubmitted += 1;
                return;
            }
            // Queue full: hand what we have to the kernel and retry.
            if let Err(e) = self.ring.submit() {
                // EBUSY means the CQ is backed up; the caller drains it soon.
                if e.raw_os_error() != Some(libc::EBUSY) {
                    panic!("io_uring submit failed: {e}");
                }
            }
            self.unsubmitted = 0;
        }
    }

    /// Multishot accept on an ordinary listening socket; each connection is
    /// installed in a free slot of the fixed table and the slot number is the
    /// completion's result.
    pub fn accept_multi(&mut self, listener: RawFd, user_data: u64) {
        let e = opcode::AcceptMulti::new(Fd(listener))
            .allocate_file_index(true)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Multishot receive into provided buffers. A completion without
    /// `more()` means the receive ended (EOF, error or no free buffer) and
    /// must be re-armed if the socket is still wanted.
    pub fn recv_multi(&mut self, slot: u32, user_data: u64) {
        let e = opcode::RecvMulti::new(Fixed(slot), BUF_GROUP)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Send `len` bytes at `buf` on a fixed socket.
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid and unchanged until the completion.
    pub unsafe fn send(&mut self, slot: u32, buf: *const u8, len: u32, user_data: u64) {
        let e = opcode::Send::new(Fixed(slot), buf, len)
            .flags(libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Vectored send on a fixed socket.
    ///
    /// # Safety
    /// `msg`, its iovec array and every buffer it points to must stay valid
    /// until the completion.
    pub unsafe fn sendmsg(&mut self, slot: u32, msg: *const libc::msghdr, user_data: u64) {
        let e = opcode::SendMsg::new(Fixed(slot), msg)
            .flags(libc::MSG_NOSIGNAL as u32)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Vectored send that never waits for socket space: it copies what fits
    /// now and completes (short, or -EAGAIN). The kernel has finished reading
    /// the buffers by the time the completion is posted, so a caller can
    /// bound how long they must stay valid.
    ///
    /// # Safety
    /// As for [`Ring::sendmsg`].
    pub unsafe fn sendmsg_nowait(&mut self, slot: u32, msg: *const libc::msghdr, user_data: u64) {
        let e = opcode::SendMsg::new(Fixed(slot), msg)
            .flags((libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) as u32)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// One-shot wait until a fixed socket is writable (or errors).
    pub fn poll_writable(&mut self, slot: u32, user_data: u64) {
        let e = opcode::PollAdd::new(Fixed(slot), libc::POLLOUT as u32)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// `shutdown(2)` on a fixed socket: wakes a pending receive with EOF.
    pub fn shutdown(&mut self, slot: u32, how: i32, user_data: u64) {
        let e = opcode::Shutdown::new(Fixed(slot), how)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Cancel every operation pending on a fixed socket.
    pub fn cancel_slot(&mut self, slot: u32, user_data: u64) {
        let e = opcode::AsyncCancel2::new(CancelBuilder::fd(Fixed(slot)).all())
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Cancel the operation tagged `target` (e.g. a multishot accept).
    pub fn cancel_user_data(&mut self, target: u64, user_data: u64) {
        let e = opcode::AsyncCancel::new(target)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Shut a fixed socket down both ways (which ends its pending receive)
    /// and then close its slot. Hard-linked so the close runs even when the
    /// shutdown fails (a peer that already reset the connection).
    pub fn shutdown_and_close(&mut self, slot: u32, shutdown_data: u64, close_data: u64) {
        self.reserve(2);
        let a = opcode::Shutdown::new(Fixed(slot), libc::SHUT_RDWR)
            .build()
            .flags(squeue::Flags::IO_HARDLINK)
            .user_data(shutdown_data);
        let b = opcode::Close::new(Fixed(slot))
            .build()
            .user_data(close_data);
        self.push(a);
        self.push(b);
    }

    /// Make room for `n` entries so a linked chain is not split by a submit.
    fn reserve(&mut self, n: usize) {
        let free = {
            let sq = self.ring.submission();
            sq.capacity() - sq.len()
        };
        if free < n {
            let _ = self.ring.submit();
            self.unsubmitted = 0;
        }
    }

    /// Pass the socket in `slot` to another ring's fixed table (a free slot
    /// there is allocated; its completion there carries `target_data` and the
    /// new slot as result), then close it here. Linked: if the pass fails
    /// (the target's table is full) the close is cancelled (-ECANCELED) and
    /// the socket stays in `slot`.
    pub fn pass_and_close(
        &mut self,
        slot: u32,
        target_ring: RawFd,
        target_data: u64,
        own_data: u64,
        close_data: u64,
    ) {
        self.reserve(2);
        let a = opcode::MsgRingSendFd::new(
            Fd(target_ring),
            Fixed(slot),
            io_uring::types::DestinationSlot::auto_target(),
            target_data,
        )
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(own_data);
        let b = opcode::Close::new(Fixed(slot))
            .build()
            .user_data(close_data);
        self.push(a);
        self.push(b);
    }

    /// Create a TCP/IPv4 socket directly in fixed slot `slot` (never in the
    /// fd table), optionally bind it to `bind`, and connect it to `connect`:
    /// one linked chain. A failed step cancels the rest (-ECANCELED); the
    /// connect's completion says whether the socket is usable.
    ///
    /// # Safety
    /// `bind` and `connect` must stay valid until the connect's completion.
    pub unsafe fn socket_connect(
        &mut self,
        slot: u32,
        bind: Option<*const libc::sockaddr_in>,
        connect: *const libc::sockaddr_in,
        user_data: [u64; 3],
    ) {
        // SAFETY: the caller's guarantee, passed on.
        unsafe {
            self.socket_connect_with(
                slot,
                bind,
                None,
                connect,
                [user_data[0], user_data[1], 0, user_data[2]],
            )
        }
    }

    /// [`Ring::socket_connect`] that also sets SO_RCVBUF to `*rcvbuf` before
    /// binding and connecting (so TCP picks its window scale for it; kernel
    /// 6.7+ for the setsockopt). `user_data`: socket, bind, setsockopt, connect.
    ///
    /// # Safety
    /// `bind`, `rcvbuf` and `connect` must stay valid until the connect's completion.
    pub unsafe fn socket_connect_with(
        &mut self,
        slot: u32,
        bind: Option<*const libc::sockaddr_in>,
        rcvbuf: Option<*const i32>,
        connect: *const libc::sockaddr_in,
        user_data: [u64; 4],
    ) {
        self.reserve(4);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let dest = io_uring::types::DestinationSlot::try_from_slot_target(slot)
            .expect("slot fits the fixed table");
        let a = opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0)
            .file_index(Some(dest))
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(user_data[0]);
        self.push(a);
        if let Some(v) = rcvbuf {
            let e = opcode::SetSockOpt::new(
                Fixed(slot),
                libc::SOL_SOCKET as u32,
                libc::SO_RCVBUF as u32,
                v.cast(),
                4,
            )
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(user_data[2]);
            self.push(e);
        }
        if let Some(b) = bind {
            let e = opcode::Bind::new(Fixed(slot), b.cast(), len)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(user_data[1]);
            self.push(e);
        }
        let c = opcode::Connect::new(Fixed(slot), connect.cast(), len)
            .build()
            .user_data(user_data[3]);
        self.push(c);
    }

    /// Create a TCP/IPv4 socket in a free slot of the fixed table chosen by
    /// the kernel (as [`Ring::accept_multi`] does): the completion's result
    /// is the slot. For owners that also accept into the same table, where
    /// a slot they picked themselves could collide with an accepted one.
    pub fn socket_alloc(&mut self, user_data: u64) {
        let e = opcode::Socket::new(libc::AF_INET, libc::SOCK_STREAM, 0)
            .file_index(Some(io_uring::types::DestinationSlot::auto_target()))
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Bind the fixed socket in `slot` to `bind` (if given) and connect it
    /// to `connect`: one linked chain (a failed bind cancels the connect).
    /// `user_data`: bind, connect.
    ///
    /// # Safety
    /// `bind` and `connect` must stay valid until the connect's completion.
    pub unsafe fn bind_connect(
        &mut self,
        slot: u32,
        bind: Option<*const libc::sockaddr_in>,
        connect: *const libc::sockaddr_in,
        user_data: [u64; 2],
    ) {
        self.reserve(2);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if let Some(b) = bind {
            let e = opcode::Bind::new(Fixed(slot), b.cast(), len)
                .build()
                .flags(squeue::Flags::IO_LINK)
                .user_data(user_data[0]);
            self.push(e);
        }
        let c = opcode::Connect::new(Fixed(slot), connect.cast(), len)
            .build()
            .user_data(user_data[1]);
        self.push(c);
    }

    /// One receive into a caller's buffer (for readers that pace themselves
    /// instead of taking whatever arrives).
    ///
    /// # Safety
    /// `buf..buf+len` must stay valid until the completion.
    pub unsafe fn recv(&mut self, slot: u32, buf: *mut u8, len: u32, user_data: u64) {
        let e = opcode::Recv::new(Fixed(slot), buf, len)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// One plain accept into an ordinary descriptor (not the fixed table):
    /// for turning connections away when the table is full.
    pub fn accept_plain(&mut self, listener: RawFd, user_data: u64) {
        let e = opcode::Accept::new(Fd(listener), std::ptr::null_mut(), std::ptr::null_mut())
            .flags(libc::SOCK_CLOEXEC)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// The ring's own descriptor, the address other rings pass sockets to.
    pub fn ring_fd(&self) -> RawFd {
        use std::os::fd::AsRawFd;
        self.ring.as_raw_fd()
    }

    /// Close the socket in `slot` and free the slot.
    pub fn close(&mut self, slot: u32, user_data: u64) {
        let e = opcode::Close::new(Fixed(slot)).build().user_data(user_data);
        self.push(e);
    }

    /// Set an integer socket option on a fixed socket (kernel 6.7+).
    ///
    /// # Safety
    /// `value` must stay valid until the completion.
    pub unsafe fn setsockopt_int(
        &mut self,
        slot: u32,
        level: i32,
        name: i32,
        value: *const i32,
        user_data: u64,
    ) {
        let e = opcode::SetSockOpt::new(Fixed(slot), level as u32, name as u32, value.cast(), 4)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Read a socket option of a fixed socket into `value` (`len` bytes;
    /// kernel 6.7+, level SOL_SOCKET only); the completion's result is the
    /// length written, or -errno.
    ///
    /// # Safety
    /// `value` must stay valid for `len` bytes until the completion.
    pub unsafe fn getsockopt(
        &mut self,
        slot: u32,
        level: i32,
        name: i32,
        value: *mut u8,
        len: u32,
        user_data: u64,
    ) {
        let e = opcode::GetSockOpt::new(Fixed(slot), level as u32, name as u32, value.cast(), len)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// A timeout that fires every `every`, forever (multishot), so the owner
    /// gets a tick through the same completion queue as its sockets.
    pub fn tick(&mut self, every: std::time::Duration, user_data: u64) {
        *self.timeout_spec = Timespec::new()
            .sec(every.as_secs())
            .nsec(every.subsec_nanos());
        let e = opcode::Timeout::new(&*self.timeout_spec as *const Timespec)
            .count(0)
            .flags(io_uring::types::TimeoutFlags::MULTISHOT)
            .build()
            .user_data(user_data);
        self.push(e);
    }

    /// Hand pushed entries to the kernel without waiting.
    pub fn submit(&mut self) -> io::Result<usize> {
        if self.unsubmitted == 0 {
            return Ok(0);
        }
        match self.ring.submit() {
            Ok(n) => {
                self.unsubmitted = 0;
                Ok(n)
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Submit and block until at least `want` completions are available.
    /// For owners that do not wait through an eventfd (tests, tools).
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        let n = self.ring.submit_and_wait(want)?;
        self.unsubmitted = 0;
        Ok(n)
    }

    /// Move up to `out.capacity() - out.len()` completions into `out`.
    /// Copying them out frees the queue before the owner reacts, so the
    /// owner may push new operations while handling them.
    pub fn drain(&mut self, out: &mut Vec<Completion>) -> usize {
        let room = out.capacity() - out.len();
        let mut n = 0;
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            out.push(Completion {
                user_data: cqe.user_data(),
                result: cqe.result(),
                flags: cqe.flags(),
            });
            n += 1;
            if n == room {
                break;
            }
        }
        n
    }

    /// The bytes a receive put in provided buffer `bid`.
    pub fn buffer(&mut self, bid: u16, len: usize) -> &mut [u8] {
        self.bufs.slice(bid, len)
    }

    /// Give a provided buffer back to the kernel.
    pub fn recycle(&mut self, bid: u16) {
        self.bufs.push(bid);
        self.bufs.publish();
    }
}
