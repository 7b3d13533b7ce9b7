//! A connection served the asynchronous way (httpd 2.4's contract for MPMs that answer
//! `AP_MPMQ_IS_ASYNC`): it owns its transaction pool, where the core keeps the
//! `conn_rec`, its `conn_state_t` and everything the connection's modules allocated, and
//! lives across requests. Between requests the MPM parks it (keep-alive, waiting for
//! I/O, lingering close) without a thread; a worker resumes it when its socket is ready.
//! The value moves between threads (worker → listener → worker); whoever holds it is
//! the only thread touching the connection.

use std::ffi::c_void;
use std::os::raw::{c_int, c_long};
use std::os::unix::io::RawFd;
use std::ptr::{self, NonNull};
use std::time::Duration;

use crate::ffi::conn::create_conn_rec;
use crate::ffi::head_buffer::{self, HeadBuffer, HeadRead, Transport};
use crate::ffi::pool::Pool;
use crate::ffi::socket::ClientSocket;
use crate::ffi::thread::CurrentThread;
use crate::ffi::tls::{self, Handshake, Shook};
use crate::ffi::vhost;
use crate::sys;

/// What the connection's process_connection hooks asked for, normalised as event does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Asked {
    /// Flush what the filters hold, then wait for the next request (keep-alive).
    WriteCompletion,
    /// Wait until the socket is readable (`read`) or writable, then run the hooks again.
    WaitIo { read: bool },
    /// A module took the connection over (`CONN_STATE_SUSPENDED`).
    Suspended,
    /// Close, with lingering.
    Linger,
}

/// The outcome of a non-blocking flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Nothing left in the output filters.
    Done,
    /// Data is left: wait until the socket is writable (`read`: readable, for TLS) and
    /// flush again.
    Pending { read: bool },
    /// The write failed: close.
    Failed,
}

/// An asynchronous connection (see the module doc).
#[derive(Debug)]
pub struct AsyncConn {
    c: NonNull<sys::conn_rec>,
    cs: NonNull<sys::conn_state_t>,
    sbh: *mut sys::ap_sb_handle_t,
    sock: ClientSocket,
    ptrans: Pool,
    /// The lingering close has begun (shutdown of our side done).
    lingering: bool,
    /// The socket is registered in the listener's epoll set (a re-park modifies the
    /// registration instead of adding it).
    registered: bool,
    /// Where its request heads are read (`head_buffer`).
    heads: Heads,
    /// The head being read.
    head: Head,
    /// A brigade for peeking at heads, in ptrans (made at the first peek).
    peek_bb: *mut sys::apr_bucket_brigade,
}

/// Who reads a connection's request heads.
#[derive(Debug)]
enum Heads {
    /// Not decided yet (before its first request).
    Undecided,
    /// The core, blocking (another protocol, a handshake mod_ssl ran:
    /// `head_buffer::eligible`).
    Core,
    /// The MPM runs the connection's TLS handshake without blocking (`tls`), then reads its
    /// heads. (Boxed: a parked connection moves between threads by value, and few are in
    /// a handshake.)
    Handshake(Box<Handshake>),
    /// The MPM, without blocking; no head of it has needed a buffer yet.
    Peeked(Transport),
    /// The MPM, into this buffer (it lives in the connection's pool).
    Buffered(NonNull<HeadBuffer>),
}

/// Where the head being read is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// None is being read.
    None,
    /// One began at this time and has not been looked at yet.
    Began(u64),
    /// It is being read into the buffer.
    Buffering,
}

impl Heads {
    /// Whether the heads come through mod_ssl (after a handshake the MPM ran).
    fn is_tls(&self) -> bool {
        match self {
            Heads::Peeked(t) => t.is_tls(),
            // SAFETY: the buffer lives in the pool of the connection whose value holds this.
            Heads::Buffered(b) => unsafe { b.as_ref() }.is_tls(),
            Heads::Undecided | Heads::Core | Heads::Handshake(_) => false,
        }
    }
}

// SAFETY: the conn_rec and everything it points to live in `ptrans`, which moves with
// the value (Pool is Send); the value is not Sync or Copy, so one thread at a time
// touches the connection, and the queues that move it order the hand-offs.
unsafe impl Send for AsyncConn {}

impl AsyncConn {
    /// Creates the connection for `sock` in `ptrans` on `thread`, scored in (`slot`,
    /// `t`), and runs its pre_connection hooks. Err gives the pool back when a
    /// create_connection hook refused the connection (the core closed the socket).
    pub fn create(
        thread: &CurrentThread,
        sock: ClientSocket,
        ptrans: Pool,
        slot: c_int,
        t: c_int,
        id: c_long,
    ) -> Result<AsyncConn, Pool> {
        let p = ptrans.as_ptr();
        // SAFETY: ptrans and sock are ours alone (sock was accepted into ptrans) and the
        // value owns ptrans for the connection's life; the core's hooks take them as
        // event's process_socket passes them; cs lives in ptrans too.
        unsafe {
            let Some((c, sbh)) = create_conn_rec(p, &sock, slot, t, id) else {
                return Err(ptrans);
            };
            let Some(cs) = new_conn_state(p) else {
                return Err(ptrans);
            };
            let cp = c.as_ptr();
            (*cp).current_thread = thread.as_ptr();
            (*cp).cs = cs.as_ptr();
            sys::ap_update_vhost_given_ip(cp);
            let rc = sys::ap_pre_connection(cp, sock.as_ptr() as *mut c_void);
            if rc != sys::OK as c_int && rc != sys::DONE {
                (*cp).aborted = 1;
            }
            Ok(AsyncConn {
                c,
                cs,
                sbh,
                sock,
                ptrans,
                lingering: false,
                registered: false,
                heads: Heads::Undecided,
                head: Head::None,
                peek_bb: ptr::null_mut(),
            })
        }
    }

    fn c(&self) -> *mut sys::conn_rec {
        self.c.as_ptr()
    }

    /// Takes the connection back on `thread`, scored in (`slot`, `t`) with id `id`:
    /// re-targets its scoreboard handle, restores `c->sbh`, runs the resume_connection
    /// hooks (event's `notify_resume`).
    pub fn resume(&mut self, thread: &CurrentThread, slot: c_int, t: c_int, id: c_long) {
        let c = self.c();
        // SAFETY: the connection is ours (we hold the value); sbh lives in ptrans.
        unsafe {
            sys::ap_update_sb_handle(self.sbh, slot, t);
            (*c).sbh = self.sbh as *mut c_void;
            sys::ap_run_resume_connection(c, ptr::null_mut());
            (*c).current_thread = thread.as_ptr();
            (*c).id = id;
        }
    }

    /// Before parking: runs the suspend_connection hooks and clears `c->sbh`, so no
    /// module touches the scoreboard while no thread serves the connection.
    pub fn suspend(&mut self) {
        let c = self.c();
        // SAFETY: the connection is ours.
        unsafe {
            sys::ap_run_suspend_connection(c, ptr::null_mut());
            (*c).sbh = ptr::null_mut();
        }
    }

    /// Runs the connection's protocol once (`ap_run_process_connection`: one request for
    /// HTTP/1, until idle for h2) and returns what it asked for, normalised: a state the
    /// MPM does not handle, an error, or an aborted connection all mean lingering close.
    pub fn process(&mut self) -> Asked {
        let (c, cs) = (self.c(), self.cs.as_ptr());
        // SAFETY: the connection is ours; cs lives in ptrans.
        unsafe {
            if (*c).aborted != 0 {
                return Asked::Linger;
            }
            (*cs).state = sys::conn_state_e_CONN_STATE_PROCESSING;
            let mut rc = sys::ap_run_process_connection(c);
            if rc == sys::DONE {
                rc = sys::OK as c_int;
            }
            let mut state = (*cs).state;
            if rc == sys::OK as c_int {
                if state == sys::conn_state_e_CONN_STATE_PROCESSING {
                    state = sys::conn_state_e_CONN_STATE_LINGER;
                } else if state == sys::conn_state_e_CONN_STATE_KEEPALIVE {
                    state = sys::conn_state_e_CONN_STATE_WRITE_COMPLETION;
                }
            }
            if rc != sys::OK as c_int || (*c).aborted != 0 {
                return Asked::Linger;
            }
            match state {
                sys::conn_state_e_CONN_STATE_WRITE_COMPLETION => Asked::WriteCompletion,
                // 2.4.63's; before, mod_http2 comes back in write completion instead.
                #[cfg(httpd_waitio)]
                sys::conn_state_e_CONN_STATE_ASYNC_WAITIO => {
                    let read = (*cs).sense != sys::conn_sense_e_CONN_SENSE_WANT_WRITE;
                    (*cs).sense = sys::conn_sense_e_CONN_SENSE_DEFAULT;
                    Asked::WaitIo { read }
                }
                sys::conn_state_e_CONN_STATE_SUSPENDED => Asked::Suspended,
                _ => Asked::Linger,
            }
        }
    }

    /// A request head begins at `now` (a new connection's first, or the next one once
    /// bytes of it have arrived): true when this thread reads it without blocking
    /// (`read_head`; a new TLS connection's handshake first), false when the core is to
    /// read it as it always does.
    pub fn begin_head(&mut self, now: u64) -> bool {
        let c = self.c();
        self.heads = match self.take_heads() {
            // SAFETY: the connection is ours, before its first process_connection hooks.
            Heads::Undecided if unsafe { tls::handshake_due(c) } => {
                // SAFETY: as above; the handshake lives in ptrans, which this value owns,
                // no longer than it.
                unsafe { self.start_handshake(now) }
            }
            // SAFETY: as above.
            Heads::Undecided if unsafe { head_buffer::eligible(c, false) } => {
                Heads::Peeked(Transport::Plain)
            }
            Heads::Undecided => Heads::Core,
            // A protocol took the connection over (h2 after an Upgrade, TLS after an RFC
            // 2817 upgrade): its own reads from now on.
            // SAFETY: the connection is ours, between requests.
            h @ (Heads::Peeked(_) | Heads::Buffered(_))
                if !unsafe { head_buffer::speaks_http1(c, h.is_tls()) } =>
            {
                Heads::Core
            }
            h => h,
        };
        match &mut self.heads {
            Heads::Core => {
                self.head = Head::None;
                return false;
            }
            Heads::Handshake(_) => {
                self.head = Head::None;
                return true;
            }
            Heads::Peeked(t) => t.mark(),
            // SAFETY: the buffer lives in ptrans, which this value owns.
            Heads::Buffered(b) => unsafe { b.as_mut() }.mark_wire(),
            Heads::Undecided => {}
        }
        self.head = Head::Began(now);
        true
    }

    /// Reads what has arrived of the head begun with `begin_head` (or of a new TLS
    /// connection's handshake, then of its first head), without blocking. A head that is
    /// there whole (the common case) is only looked at, in the core's own buffer or in
    /// mod_ssl's (`head_buffer::peek_ready`); one that is not is read into the connection's
    /// buffer, made at its first such head.
    pub fn read_head(&mut self, now: u64) -> HeadRead {
        if let Heads::Handshake(h) = &mut self.heads {
            match h.step(now) {
                Shook::More => return HeadRead::More,
                // The stock path answers what mod_ssl made of it.
                Shook::Failed => {
                    self.heads = Heads::Core;
                    return HeadRead::Ready;
                }
                Shook::Done => {}
            }
            let Heads::Handshake(h) = self.take_heads() else {
                return HeadRead::Ready;
            };
            let mut wire = h.finish();
            // SAFETY: the connection is ours, before its first request.
            if !unsafe { head_buffer::eligible(self.c(), true) } {
                return HeadRead::Ready; // h2 by ALPN, Protocols without http/1.1: the core
            }
            // Its first head begins now, as under event once mod_ssl's handshake returns.
            wire.mark();
            self.head = Head::Began(now);
            self.heads = Heads::Peeked(Transport::Tls(wire));
        }
        if let Head::Began(at) = self.head {
            let leftover = self.head_buffer().is_some_and(|b| b.has_pending());
            if !leftover && self.peek_ready() {
                self.head = Head::None;
                return HeadRead::Ready;
            }
            self.heads = match self.take_heads() {
                // SAFETY: the connection is ours, between requests, and the transport its
                // own.
                Heads::Peeked(t) => match unsafe { HeadBuffer::attach(self.c(), at, t) } {
                    Some(b) => Heads::Buffered(b),
                    None => Heads::Core,
                },
                h => h,
            };
            let per_read = self.socket_timeout();
            match self.head_buffer() {
                Some(b) => b.begin(at, per_read),
                None => {
                    self.head = Head::None;
                    return HeadRead::Ready; // the core reads it
                }
            }
            self.head = Head::Buffering;
        }
        self.head_buffer().map_or(HeadRead::Ready, |b| b.read(now))
    }

    /// A new TLS connection's handshake, run by this thread (on an HTTP listener), else by
    /// mod_ssl as always.
    ///
    /// # Safety
    /// The connection is ours, before its first process_connection hooks.
    unsafe fn start_handshake(&mut self, now: u64) -> Heads {
        let per_read = self.socket_timeout();
        // SAFETY: the caller's contract; the handshake lives in ptrans, which this value
        // owns, no longer than it.
        unsafe {
            if !head_buffer::serves_http(self.c()) {
                return Heads::Core;
            }
            Handshake::start(self.c, now, per_read)
                .map_or(Heads::Core, |h| Heads::Handshake(Box::new(h)))
        }
    }

    /// The heads' reader, taken out (`Core` left in its place).
    fn take_heads(&mut self) -> Heads {
        std::mem::replace(&mut self.heads, Heads::Core)
    }

    /// `head_buffer::peek_ready` with the connection's brigade.
    fn peek_ready(&mut self) -> bool {
        let c = self.c();
        let tls = self.heads.is_tls();
        // SAFETY: the connection is ours; the brigade lives in its pool (ptrans) and is
        // emptied after each peek.
        unsafe {
            if self.peek_bb.is_null() {
                self.peek_bb = sys::apr_brigade_create((*c).pool, (*c).bucket_alloc);
            }
            head_buffer::peek_ready(c, self.peek_bb, tls)
        }
    }

    /// When the head (or handshake) being read is due (None: the core reads this
    /// connection's heads).
    pub fn head_deadline(&mut self) -> Option<u64> {
        match &self.heads {
            Heads::Handshake(h) => Some(h.deadline()),
            _ => self.head_buffer().map(|b| b.deadline()),
        }
    }

    /// The head (or handshake) is past its deadline: the core reads what came (mod_ssl
    /// runs the handshake), then meets the timeout.
    pub fn expire_head(&mut self) {
        match self.take_heads() {
            Heads::Handshake(h) => h.expire(),
            h => {
                self.heads = h;
                if let Some(b) = self.head_buffer() {
                    b.expire();
                }
            }
        }
    }

    fn head_buffer(&mut self) -> Option<&mut HeadBuffer> {
        match self.heads {
            // SAFETY: the buffer lives in ptrans, which this value owns; the core reads it
            // only inside process(), which takes &mut self as this borrow does.
            Heads::Buffered(mut b) => Some(unsafe { b.as_mut() }),
            Heads::Undecided | Heads::Core | Heads::Handshake(_) | Heads::Peeked(_) => None,
        }
    }

    /// The socket's timeout (the vhost's `Timeout` the core set): what its next blocking
    /// read would wait for bytes.
    fn socket_timeout(&self) -> Duration {
        let mut t: sys::apr_interval_time_t = 0;
        // SAFETY: the socket is ours.
        unsafe { sys::apr_socket_timeout_get(self.sock.as_ptr(), &mut t) };
        Duration::from_micros(t.max(0) as u64)
    }

    /// Writes what the output filters set aside, without blocking: calls the last
    /// output filter (the core's) with no data, as event does in write completion.
    pub fn flush(&mut self) -> Flush {
        let (c, cs) = (self.c(), self.cs.as_ptr());
        // SAFETY: the connection is ours; the filter chain is the core's, its last
        // filter is the core output filter, which accepts a NULL brigade.
        unsafe {
            let mut f = (*c).output_filters;
            if f.is_null() {
                return Flush::Failed;
            }
            while !(*f).next.is_null() {
                f = (*f).next;
            }
            let Some(out) = (*(*f).frec).filter_func.out_func else {
                return Flush::Failed;
            };
            if out(f, ptr::null_mut()) != 0 {
                return Flush::Failed;
            }
            let want_read = (*cs).sense == sys::conn_sense_e_CONN_SENSE_WANT_READ;
            if (*c).data_in_output_filters != 0 || want_read {
                (*cs).sense = sys::conn_sense_e_CONN_SENSE_DEFAULT;
                Flush::Pending { read: want_read }
            } else {
                Flush::Done
            }
        }
    }

    /// The client asked to keep the connection open, and it is not aborted.
    pub fn keeps_alive(&self) -> bool {
        let c = self.c();
        // SAFETY: the connection is ours.
        unsafe { (*c).keepalive == sys::ap_conn_keepalive_e_AP_CONN_KEEPALIVE && (*c).aborted == 0 }
    }

    /// The input filters hold data already (a pipelined request, TLS records read ahead):
    /// run the hooks again at once instead of waiting for the socket.
    pub fn input_pending(&self) -> bool {
        // SAFETY: the connection is ours.
        unsafe { (*self.c()).data_in_input_filters != 0 }
    }

    /// Sets the connection's scoreboard entry to `status` (`ap_update_child_status`).
    pub fn set_status(&mut self, status: c_int) {
        // SAFETY: the connection is ours; sbh lives in ptrans.
        unsafe { sys::ap_update_child_status(self.sbh, status, ptr::null_mut()) };
    }

    /// The KeepAliveTimeout the connection waits under between requests: its last
    /// request's vhost's where that vhost sets one (see `vhost`).
    pub fn keep_alive_timeout(&self) -> Duration {
        // SAFETY: the connection is ours.
        unsafe { vhost::keep_alive_timeout(self.c()) }
    }

    /// The Timeout the connection waits under in write completion or a module's I/O wait
    /// (the same vhost's).
    pub fn timeout(&self) -> Duration {
        // SAFETY: the connection is ours.
        unsafe { vhost::timeout(self.c()) }
    }

    /// The socket's descriptor.
    pub fn fd(&self) -> RawFd {
        self.sock.os_fd()
    }

    /// Whether the socket is registered in the listener's epoll set.
    pub fn is_registered(&self) -> bool {
        self.registered
    }

    /// Records that the socket is registered in the listener's epoll set.
    pub fn set_registered(&mut self) {
        self.registered = true;
    }

    /// Whether the lingering close has begun.
    pub fn is_lingering(&self) -> bool {
        self.lingering
    }

    /// Begins the lingering close (`ap_start_lingering_close`: the pre_close_connection
    /// hooks — h2's GOAWAY, TLS close_notify —, a flush, shutdown of our side) and makes
    /// the socket non-blocking for draining. Returns false when the core closed the
    /// socket already (nothing to linger for).
    pub fn start_lingering_close(&mut self) -> bool {
        let c = self.c();
        self.lingering = true;
        // SAFETY: the connection is ours; the socket belongs to it.
        unsafe {
            sys::apr_socket_timeout_set(self.sock.as_ptr(), 2_000_000);
            if sys::ap_start_lingering_close(c) != 0 {
                return false;
            }
            sys::apr_socket_timeout_set(self.sock.as_ptr(), 0);
            sys::apr_socket_opt_set(self.sock.as_ptr(), sys::APR_INCOMPLETE_READ as i32, 0);
        }
        true
    }

    /// A module asked for a short lingering close (`short-lingering-close` note).
    pub fn short_linger(&self) -> bool {
        // SAFETY: the connection is ours; notes is its table.
        unsafe {
            !sys::apr_table_get((*self.c()).notes, c"short-lingering-close".as_ptr()).is_null()
        }
    }

    /// Marks the connection for a short lingering close (expiry, graceful stop).
    pub fn set_short_linger(&mut self) {
        // SAFETY: the connection is ours; the strings are 'static literals.
        unsafe {
            sys::apr_table_setn(
                (*self.c()).notes,
                c"short-lingering-close".as_ptr(),
                c"1".as_ptr(),
            )
        };
    }

    /// Reads and discards what the client still sends, without blocking: true when the
    /// client is done (end of stream or an error), false when it would block.
    pub fn drain(&mut self) -> bool {
        let mut buf = [0u8; 512];
        loop {
            let mut n: sys::apr_size_t = buf.len() as _;
            // SAFETY: a non-blocking socket of ours (start_lingering_close) and a local
            // buffer of n bytes.
            let rv = unsafe {
                sys::apr_socket_recv(self.sock.as_ptr(), buf.as_mut_ptr() as *mut _, &mut n)
            };
            if rv == 0 {
                continue;
            }
            return rv != libc::EAGAIN;
        }
    }

    /// Closes the socket and gives back the pool (for clearing and recycling), telling
    /// modules that the connection resumed first if it is parked (event's pre-cleanup).
    pub fn close(self, parked: bool) -> Pool {
        let c = self.c();
        // SAFETY: the connection is ours; nothing uses it after this (consumed).
        unsafe {
            if parked {
                (*c).sbh = ptr::null_mut();
                sys::ap_run_resume_connection(c, ptr::null_mut());
            }
        }
        self.sock.close();
        self.ptrans
    }

    /// Blocks until the socket is readable (`read`) or writable, up to `timeout`; false
    /// on timeout or error. For the worker's short waits (the next request of a busy
    /// client, a FIN that is on its way). A signal does not end the wait: a stop's
    /// re-signal can land on a worker that has just left its idle wait for this one. An
    /// immediate stop still ends it at once, by shutting the socket down under it.
    pub fn wait_ready(&self, read: bool, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let mut p = libc::pollfd {
                fd: self.fd(),
                events: if read { libc::POLLIN } else { libc::POLLOUT },
                revents: 0,
            };
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = left.as_millis().min(i32::MAX as u128) as c_int;
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, ms) };
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return n > 0 && p.revents & (libc::POLLERR | libc::POLLNVAL) == 0;
        }
    }
}

/// A connection state in `pool`: PROCESSING, default sense.
///
/// # Safety
/// `pool` is a live pool that the calling thread holds and that outlives the connection.
unsafe fn new_conn_state(pool: *mut sys::apr_pool_t) -> Option<NonNull<sys::conn_state_t>> {
    let size = std::mem::size_of::<sys::conn_state_t>();
    // SAFETY: the caller's contract; the memory is written in full before use.
    unsafe {
        let cs = NonNull::new(sys::apr_palloc(pool, size as _) as *mut sys::conn_state_t)?;
        ptr::write_bytes(cs.as_ptr() as *mut u8, 0, size);
        (*cs.as_ptr()).state = sys::conn_state_e_CONN_STATE_PROCESSING;
        (*cs.as_ptr()).sense = sys::conn_sense_e_CONN_SENSE_DEFAULT;
        Some(cs)
    }
}

/// A secondary connection (an h2 stream's `conn_rec`, `c->master` set) starts as a copy
/// of its primary, `c->cs` included, so a worker serving the stream would write the
/// primary's state while the primary is parked. Give it a state of its own, as event's
/// pre_connection hook does.
unsafe extern "C" fn secondary_state(c: *mut sys::conn_rec, _csd: *mut c_void) -> c_int {
    let _place = crate::ffi::panic::enter("pre_connection hook (secondary connection state)");
    // SAFETY: httpd passes the connection being set up, used by this thread alone; a new
    // conn_state_t in its pool lives as long as the connection.
    unsafe {
        let m = (*c).master;
        if !m.is_null() && ((*c).cs.is_null() || (*c).cs == (*m).cs) {
            if let Some(cs) = new_conn_state((*c).pool) {
                (*c).cs = cs.as_ptr();
            }
        }
    }
    sys::OK as c_int
}

/// Registers [`secondary_state`] as a pre_connection hook, run before every other.
pub fn register_secondary_state_hook() {
    // SAFETY: called from register_hooks; the function lives in this DSO (never unmapped).
    unsafe {
        sys::ap_hook_pre_connection(
            Some(secondary_state),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_REALLY_FIRST,
        )
    };
}
