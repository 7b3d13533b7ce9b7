//! The generation's listening side, built by `open_logs` in pconf: listeners split into
//! buckets (`ap_duplicate_listeners`, ListenCoresBucketsRatio), one pipe of death per
//! bucket, and one cross-process accept mutex per bucket with several listeners (Linux
//! accepts a single listener unserialised: SINGLE_LISTEN_UNSERIALIZED_ACCEPT).

use std::ffi::CString;
use std::os::raw::c_int;
use std::os::unix::io::RawFd;
use std::ptr::{self, NonNull};

use crate::ffi::httpd::{ServerRec, SingleThreaded};
use crate::ffi::pool::{ConfigPool, Pool};
use crate::ffi::signal;
use crate::ffi::socket::ClientSocket;
use crate::sys;

/// How the parent asks children to stop through a pipe of death.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodMessage {
    /// Nothing (the read was interrupted, or the pipe had nothing for us).
    None,
    /// Stop accepting, finish in-flight connections, exit.
    Graceful,
    /// Exit now.
    Restart,
}

impl PodMessage {
    fn to_raw(self) -> sys::ap_podx_restart_t {
        match self {
            PodMessage::None => sys::ap_podx_restart_t_AP_MPM_PODX_NORESTART,
            PodMessage::Graceful => sys::ap_podx_restart_t_AP_MPM_PODX_GRACEFUL,
            PodMessage::Restart => sys::ap_podx_restart_t_AP_MPM_PODX_RESTART,
        }
    }
}

/// Which step of [`ListenBuckets::open`] failed, with the APR status.
#[derive(Clone, Copy, Debug)]
pub enum OpenError {
    /// `ap_duplicate_listeners`.
    Duplicate(i32),
    /// A pipe of death.
    Pod(i32),
    /// An accept mutex.
    AcceptMutex(i32),
}

/// The generation's buckets. Everything lives in pconf, which httpd owns and which
/// outlives every use (parent: the generation; child: until exit), so the handle is
/// `Copy` and destroys nothing.
#[derive(Clone, Copy, Debug)]
pub struct ListenBuckets {
    buckets: NonNull<*mut sys::ap_listen_rec>,
    num: usize,
    pods: NonNull<*mut sys::ap_pod_t>,
    mutexes: NonNull<*mut sys::apr_proc_mutex_t>,
    use_accept_mutex: bool,
}

// SAFETY: after `open` the arrays are only read; the objects they point to are used by
// one thread of a child each (its listener) or by the single-threaded parent.
unsafe impl Send for ListenBuckets {}
// SAFETY: as for Send.
unsafe impl Sync for ListenBuckets {}

/// Sets up the server's listening sockets (`ap_setup_listeners`); returns how many.
pub fn setup_listeners(_: SingleThreaded, s: ServerRec) -> c_int {
    // SAFETY: the parent's configuration phase (token) with the live server record.
    unsafe { sys::ap_setup_listeners(s.as_ptr()) }
}

/// Closes the parent's copies of every listener (graceful stop).
pub fn close_all_listeners() {
    // SAFETY: closes httpd's global listener list; the parent no longer uses it.
    unsafe { sys::ap_close_listeners() };
}

impl ListenBuckets {
    /// Splits the listeners into buckets (`num_buckets`: 0 = let httpd compute, else
    /// keep that many), opens a pipe of death per bucket and, when some bucket has
    /// several listeners, an accept mutex per bucket. Call after [`setup_listeners`]
    /// found at least one listener.
    pub fn open(
        _: SingleThreaded,
        pconf: ConfigPool,
        s: ServerRec,
        num_buckets: c_int,
    ) -> Result<ListenBuckets, OpenError> {
        let s = s.as_ptr();
        let mut buckets = ptr::null_mut();
        let mut num = num_buckets;
        // SAFETY: configuration phase (token); pconf and s are live; out-pointers valid.
        let rv = unsafe { sys::ap_duplicate_listeners(pconf.as_ptr(), s, &mut buckets, &mut num) };
        if rv != 0 {
            return Err(OpenError::Duplicate(rv));
        }
        let num = num.max(1) as usize;
        let pods =
            pconf.alloc(std::mem::size_of::<*mut sys::ap_pod_t>() * num) as *mut *mut sys::ap_pod_t;
        let mutexes = pconf.alloc(std::mem::size_of::<*mut sys::apr_proc_mutex_t>() * num)
            as *mut *mut sys::apr_proc_mutex_t;
        // One listener per bucket may be accepted without a lock on Linux.
        // SAFETY: ap_listeners is the global list set up by setup_listeners.
        let use_accept_mutex = unsafe {
            let first = sys::ap_listeners;
            !first.is_null() && !(*first).next.is_null()
        };
        for b in 0..num {
            // SAFETY: pods and mutexes have num entries in pconf (allocated above).
            unsafe {
                *mutexes.add(b) = ptr::null_mut();
                let rv = sys::ap_mpm_podx_open(pconf.as_ptr(), pods.add(b));
                if rv != 0 {
                    return Err(OpenError::Pod(rv));
                }
                if use_accept_mutex {
                    let id = CString::new(b.to_string()).unwrap_or_default();
                    let id = sys::apr_pstrdup(pconf.as_ptr(), id.as_ptr());
                    let rv = sys::ap_proc_mutex_create(
                        mutexes.add(b),
                        ptr::null_mut(),
                        c"mpm-accept".as_ptr(),
                        id,
                        s,
                        pconf.as_ptr(),
                        0,
                    );
                    if rv != 0 {
                        return Err(OpenError::AcceptMutex(rv));
                    }
                }
            }
        }
        let nn = |p| NonNull::new(p).ok_or(OpenError::Duplicate(sys::APR_ENOMEM as i32));
        Ok(ListenBuckets {
            buckets: nn(buckets as *mut _)?,
            num,
            pods: NonNull::new(pods).ok_or(OpenError::Pod(sys::APR_ENOMEM as i32))?,
            mutexes: NonNull::new(mutexes).ok_or(OpenError::AcceptMutex(sys::APR_ENOMEM as i32))?,
            use_accept_mutex,
        })
    }

    /// Number of buckets (>= 1).
    pub fn num_buckets(&self) -> usize {
        self.num
    }

    /// Whether children serialise accept with a mutex.
    pub fn use_accept_mutex(&self) -> bool {
        self.use_accept_mutex
    }

    fn check(&self, bucket: usize) {
        assert!(
            bucket < self.num,
            "rworker: bucket {bucket} of {}",
            self.num
        );
    }

    /// `bucket`'s pipe of death.
    pub fn pod(&self, bucket: usize) -> Pod {
        self.check(bucket);
        // SAFETY: in-bounds entry (checked) of the array filled by open.
        Pod(unsafe { *self.pods.as_ptr().add(bucket) })
    }

    /// Writes `how` to every bucket's pipe of death, once per child slot up to `slots`
    /// (`ap_mpm_podx_killpg`).
    pub fn signal_all(&self, slots: c_int, how: PodMessage) {
        for b in 0..self.num {
            // SAFETY: every pod was opened by open; the call only writes to the pipe.
            unsafe { sys::ap_mpm_podx_killpg(self.pod(b).0, slots, how.to_raw()) };
        }
    }

    /// The parent's own copies of every bucket's pipe-of-death write end (close-on-exec
    /// duplicates, which the next configuration pass does not close), for
    /// [`signal_kept_pods`]; None if one could not be made (the others are closed).
    pub fn keep_pod_writers(&self) -> Option<Vec<RawFd>> {
        let mut fds = Vec::with_capacity(self.num);
        for b in 0..self.num {
            let mut fd: sys::apr_os_file_t = -1;
            // SAFETY: an open pod of this generation; pod_out is its write end, and
            // F_DUPFD_CLOEXEC only duplicates the descriptor.
            let dup = unsafe {
                sys::apr_os_file_get(&mut fd, (*self.pod(b).0).pod_out);
                libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0)
            };
            if dup < 0 {
                close_fds(&fds);
                return None;
            }
            fds.push(dup);
        }
        Some(fds)
    }

    /// In a fresh child serving `keep`: closes every other bucket's listeners and pipe
    /// of death (the child's copies only).
    pub fn close_other_buckets(&self, keep: usize) {
        for b in (0..self.num).filter(|&b| b != keep) {
            // SAFETY: in-bounds entries of open's arrays; closing this process's copies.
            unsafe {
                sys::ap_close_listeners_ex(*self.buckets.as_ptr().add(b));
                sys::ap_mpm_podx_close(*self.pods.as_ptr().add(b));
            }
        }
    }

    /// `bucket`'s listening sockets, each set to accept with `ap_unixd_accept`.
    pub fn listeners(&self, bucket: usize) -> Vec<Listener> {
        self.check(bucket);
        let mut out = Vec::new();
        // SAFETY: the bucket's list was built by ap_duplicate_listeners in pconf; a child
        // sets accept_func before its listener thread exists.
        unsafe {
            let mut lr = *self.buckets.as_ptr().add(bucket);
            while let Some(l) = NonNull::new(lr) {
                (*lr).accept_func = Some(sys::ap_unixd_accept);
                out.push(Listener(l));
                lr = (*lr).next;
            }
        }
        out
    }

    /// `bucket`'s accept mutex as the parent created it (None without one). A child must
    /// re-attach it with [`AcceptMutex::child_init`] before use.
    pub fn accept_mutex(&self, bucket: usize) -> Option<ParentAcceptMutex> {
        self.check(bucket);
        // SAFETY: in-bounds entry of open's array.
        NonNull::new(unsafe { *self.mutexes.as_ptr().add(bucket) }).map(ParentAcceptMutex)
    }
}

/// Writes `how` `slots` times into each write end that
/// [`ListenBuckets::keep_pod_writers`] kept (`ap_mpm_podx_killpg`'s bytes), then closes
/// them.
pub fn signal_kept_pods(fds: &[RawFd], slots: c_int, how: PodMessage) {
    let byte = match how {
        PodMessage::Graceful => sys::AP_MPM_PODX_GRACEFUL_CHAR,
        PodMessage::Restart => sys::AP_MPM_PODX_RESTART_CHAR,
        PodMessage::None => {
            close_fds(fds);
            return;
        }
    };
    let bytes = vec![byte; slots.max(1) as usize];
    for &fd in fds {
        let mut sent = 0;
        while sent < bytes.len() {
            // SAFETY: fd is a pipe write end this process owns; the buffer is live.
            let n = unsafe { libc::write(fd, bytes[sent..].as_ptr().cast(), bytes.len() - sent) };
            if n > 0 {
                sent += n as usize;
            } else if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            } else {
                break;
            }
        }
    }
    close_fds(fds);
}

/// Closes descriptors this process owns (a fork's inherited copies, or its own).
pub fn close_fds(fds: &[RawFd]) {
    for &fd in fds {
        // SAFETY: the caller owns fd and nothing uses it afterwards.
        unsafe { libc::close(fd) };
    }
}

/// A pipe of death (lives in pconf).
#[derive(Clone, Copy, Debug)]
pub struct Pod(*mut sys::ap_pod_t);

impl Pod {
    /// Reads one message from the pipe (`None` for an empty one; see [`Pod::wait`]).
    pub fn check(self) -> PodMessage {
        // SAFETY: an open pod of this generation.
        let rv = unsafe { sys::ap_mpm_podx_check(self.0) } as u32;
        match rv {
            sys::ap_podx_restart_t_AP_MPM_PODX_GRACEFUL => PodMessage::Graceful,
            sys::ap_podx_restart_t_AP_MPM_PODX_RESTART => PodMessage::Restart,
            _ => PodMessage::None,
        }
    }

    /// Waits until the pipe or `bell` (a descriptor the caller clears) is readable, or
    /// `sig` interrupts (unblocked for the wait only: [`signal::poll_unblocking`]); reads
    /// the pipe, if readable, as [`Pod::check`] does. `None` when the bell rang or `sig`
    /// came, or when a sibling read the message first (the read end is non-blocking in
    /// the children: [`Pod::read_without_blocking`]).
    pub fn wait(self, bell: RawFd, sig: c_int) -> Option<PodMessage> {
        let mut fd: sys::apr_os_file_t = -1;
        // SAFETY: an open pod of this generation; pod_in is its live read end.
        unsafe { sys::apr_os_file_get(&mut fd, (*self.0).pod_in) };
        let mut fds = [fd, bell].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        signal::poll_unblocking(sig, &mut fds, None);
        let pipe = fds[0].revents;
        if pipe & libc::POLLIN == 0 && pipe & libc::POLLHUP != 0 {
            // Every write end is closed: the parent exited without telling this
            // generation to stop (a configuration pass failed during a graceful
            // restart, see `keep_pod_writers`). Stop as gracefully as if told.
            return Some(PodMessage::Graceful);
        }
        (pipe & libc::POLLIN != 0).then(|| self.check())
    }

    /// In a child: makes the read end non-blocking. Every child of the bucket polls the
    /// same pipe and one message wakes them all; those that lose the race for the byte
    /// find the pipe empty and go back to their wait, instead of sleeping in `read` until
    /// the next message, deaf to their own threads' requests (the main bell). The flag
    /// belongs to the pipe, which only this generation's children read.
    pub fn read_without_blocking(self) {
        let mut fd: sys::apr_os_file_t = -1;
        // SAFETY: an open pod of this generation; pod_in is its live read end, and
        // F_SETFL only changes its file status flags.
        unsafe {
            sys::apr_os_file_get(&mut fd, (*self.0).pod_in);
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
        }
    }

    /// In a child: closes its inherited copy of the write end (a child only reads its
    /// pipe of death), so that the parent's exit reads as end-of-file.
    pub fn close_write_end(self) {
        // SAFETY: an open pod of this generation; the child never writes to it, and
        // nothing reads pod_out after this.
        unsafe { sys::apr_file_close((*self.0).pod_out) };
    }

    /// Asks one child of the bucket to stop (the first to read it).
    pub fn signal(self, how: PodMessage) {
        // SAFETY: an open pod of this generation; the call only writes to the pipe.
        unsafe { sys::ap_mpm_podx_signal(self.0, how.to_raw()) };
    }
}

/// One listening socket of a child's bucket, used by its listener thread only.
#[derive(Debug)]
pub struct Listener(NonNull<sys::ap_listen_rec>);

// SAFETY: moved to the listener thread, which alone uses it (not Sync, not Copy).
unsafe impl Send for Listener {}

/// A child's only listening socket, on which every idle worker blocks in accept
/// (`RWorkerAccept workers`): the kernel gives each connection to one of them.
#[derive(Debug)]
pub struct SharedListener(NonNull<sys::ap_listen_rec>);

// SAFETY: made only by `Listener::into_shared`, for a socket whose accept_func is
// ap_unixd_accept (`Listener::accepts_concurrently`), which only reads the listen record and its listening
// apr_socket_t: apr_socket_accept writes nothing but the new socket, allocated in the
// caller's own ptrans, and the kernel serialises accept(2) calls on one socket. The record
// lives in pconf, which outlives the child's threads.
unsafe impl Send for SharedListener {}
// SAFETY: as for Send.
unsafe impl Sync for SharedListener {}

impl SharedListener {
    /// Accepts one connection into `ptrans`, blocking until a client connects or a signal
    /// interrupts the wait (then `Accepted::Nothing`).
    pub fn accept(&self, ptrans: &mut Pool) -> Accepted {
        // SAFETY: a live listen record whose accept is safe to call concurrently (see the
        // Sync impl); ptrans is ours alone.
        unsafe { accept_on(self.0, ptrans) }
    }

    /// Closes the child's copy of the listening socket (other processes keep theirs), so
    /// that once every process has closed it the kernel refuses new connections.
    ///
    /// # Safety
    /// No thread is blocked in [`SharedListener::accept`] or will call it again.
    pub unsafe fn close(&self) {
        // SAFETY: a live listen record nobody accepts on any more (the caller's contract).
        unsafe { sys::ap_close_listeners_ex(self.0.as_ptr()) };
    }
}

/// A listening socket of a parking child (`RWorkerKeepAlive park`), in the event set that
/// all its workers wait on: whichever worker its event wakes accepts, so several may call
/// accept at once. That is safe for httpd's own `ap_unixd_accept`; a module's replacement
/// may keep state, so callers serialise accept where [`PolledListener::accepts_concurrently`]
/// is false (`crate::mpm::parking`'s gate does).
#[derive(Debug)]
pub struct PolledListener {
    lr: NonNull<sys::ap_listen_rec>,
    concurrent: bool,
}

// SAFETY: the record lives in pconf, which outlives the child's threads; `accept` is unsafe
// and states when concurrent calls are allowed; `close` is unsafe and states that no accept
// runs or follows; the descriptor reads are reads of fields written before threads start.
unsafe impl Send for PolledListener {}
// SAFETY: as for Send.
unsafe impl Sync for PolledListener {}

impl PolledListener {
    /// The listening descriptor, for the event set.
    pub fn os_fd(&self) -> RawFd {
        let mut fd: sys::apr_os_sock_t = -1;
        // SAFETY: lr->sd is the listener's live APR socket.
        unsafe { sys::apr_os_sock_get(&mut fd, (*self.lr.as_ptr()).sd) };
        fd
    }

    /// Whether several threads may accept on this socket at once (its `accept_func` is
    /// httpd's own `ap_unixd_accept`).
    pub fn accepts_concurrently(&self) -> bool {
        self.concurrent
    }

    /// Accepts one connection into `ptrans` without blocking (`Accepted::Empty` when none
    /// is waiting).
    ///
    /// # Safety
    /// No other thread is in `accept` on this socket unless [`accepts_concurrently`], and
    /// [`PolledListener::close`] has not been called.
    ///
    /// [`accepts_concurrently`]: PolledListener::accepts_concurrently
    pub unsafe fn accept(&self, ptrans: &mut Pool) -> Accepted {
        // SAFETY: the caller's contract is accept_on's.
        unsafe { accept_on(self.lr, ptrans) }
    }

    /// Whether connections wait in the accept queue now (a poll that does not block).
    ///
    /// # Safety
    /// [`PolledListener::close`] has not been called.
    pub unsafe fn has_queued(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.os_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours, on the listener's descriptor, open by the contract.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        n == 1 && p.revents & libc::POLLIN != 0
    }

    /// Closes the child's copy of this one listening socket (other processes keep theirs).
    ///
    /// # Safety
    /// No thread is in [`PolledListener::accept`] or will call it again, and the socket is
    /// out of every epoll set of this process (an open description shared with other
    /// processes stays registered after our close, and could not be removed any more).
    pub unsafe fn close(&self) {
        // SAFETY: the caller's contract; closes the record's own socket, as
        // ap_close_listeners_ex does for each record of a list.
        unsafe {
            let lr = self.lr.as_ptr();
            sys::apr_socket_close((*lr).sd);
            (*lr).active = 0;
        }
    }
}

/// Accepts one connection on `lr` into `ptrans` with the record's `accept_func`.
///
/// # Safety
/// `lr` is a live listen record of this child, and no other thread calls its
/// `accept_func` at the same time unless that function is `ap_unixd_accept`.
unsafe fn accept_on(lr: NonNull<sys::ap_listen_rec>, ptrans: &mut Pool) -> Accepted {
    let mut sock: *mut std::ffi::c_void = ptr::null_mut();
    // SAFETY: the caller's contract; accept_func allocates the client socket in ptrans,
    // which we hold exclusively.
    let rv = unsafe {
        let lr = lr.as_ptr();
        ((*lr).accept_func.unwrap_or(sys::ap_unixd_accept))(&mut sock, lr, ptrans.as_ptr())
    };
    if rv == sys::APR_EGENERAL as sys::apr_status_t {
        // ap_unixd_accept logged AH02179 and gives no cause; errno may still hold it, and
        // where logging overwrote it, a descriptor we cannot get says the same.
        let errno = std::io::Error::last_os_error().raw_os_error();
        return accept_failure(errno, probe_descriptor);
    }
    // SAFETY: on success the socket is open, ours alone, and lives in ptrans.
    match unsafe { ClientSocket::from_raw(sock as *mut sys::apr_socket_t) } {
        Some(s) => Accepted::Socket(s),
        // ap_unixd_accept passes a benign failure's status on; EAGAIN on a non-blocking
        // socket: the queue is empty.
        None if rv == libc::EAGAIN || rv == libc::EWOULDBLOCK => Accepted::Empty,
        None => Accepted::Nothing,
    }
}

/// What an accept that `ap_unixd_accept` found fatal means, from the `errno` it left
/// (`probe`: the errno of taking a descriptor now, for when logging overwrote it). Only
/// EMFILE is the process's own limit, which a close lifts; ENFILE (the system's file table
/// is full), ENOMEM and the rest are a shortage outside the child: it retires sick, as
/// event's does, and the parent's spawn rate drops for it.
fn accept_failure(errno: Option<i32>, probe: impl FnOnce() -> Option<i32>) -> Accepted {
    let own_limit = |e: Option<i32>| e == Some(libc::EMFILE);
    if own_limit(errno) || (errno != Some(libc::ENFILE) && own_limit(probe())) {
        Accepted::OutOfFiles
    } else {
        Accepted::Broken
    }
}

/// Takes a new descriptor and gives it back: None when one could be had, else the errno.
fn probe_descriptor() -> Option<i32> {
    // SAFETY: eventfd(2) creates a descriptor of ours, which only this function closes.
    unsafe {
        let fd = libc::eventfd(0, libc::EFD_CLOEXEC);
        if fd < 0 {
            return std::io::Error::last_os_error().raw_os_error();
        }
        libc::close(fd);
    }
    None
}

/// What one accept gave.
#[derive(Debug)]
pub enum Accepted {
    /// A client socket, allocated in the ptrans passed to accept.
    Socket(ClientSocket),
    /// Nothing, for a benign reason (interrupted, the client reset…): try again.
    Nothing,
    /// Nothing waits (EAGAIN; only a non-blocking socket says so).
    Empty,
    /// The listener is broken (`ap_unixd_accept` logged why): the child should retire.
    Broken,
    /// The process is at its open-file limit (EMFILE; the core logged AH02179): a child
    /// that holds connections waits for one to close. ENFILE (the system's table) is
    /// [`Accepted::Broken`].
    OutOfFiles,
}

impl Listener {
    /// The listening descriptor (for poll over several listeners).
    pub fn os_fd(&self) -> RawFd {
        let mut fd: sys::apr_os_sock_t = -1;
        // SAFETY: lr->sd is the listener's live APR socket.
        unsafe { sys::apr_os_sock_get(&mut fd, (*self.0.as_ptr()).sd) };
        fd
    }

    /// Accepts one connection into `ptrans` (the listener's `accept_func`).
    pub fn accept(&self, ptrans: &mut Pool) -> Accepted {
        // SAFETY: a live listener of this child's bucket, used by this thread alone.
        unsafe { accept_on(self.0, ptrans) }
    }

    /// Whether several threads may accept on this socket at once: its `accept_func` is
    /// httpd's own `ap_unixd_accept` (a module's replacement may keep state).
    pub fn accepts_concurrently(&self) -> bool {
        // SAFETY: reads a field of a live listen record.
        let f = unsafe { (*self.0.as_ptr()).accept_func };
        match f {
            None => true,
            Some(f) => f as *const () == sys::ap_unixd_accept as *const (),
        }
    }

    /// For a parking child's event set: non-blocking, accepted by whichever worker wakes
    /// (see [`PolledListener`]).
    pub fn into_polled(self) -> PolledListener {
        self.set_nonblocking();
        PolledListener {
            concurrent: self.accepts_concurrently(),
            lr: self.0,
        }
    }

    /// Shares this socket with the child's idle workers, which all accept on it
    /// (`RWorkerAccept workers`); `None` (the socket dropped) unless
    /// [`Listener::accepts_concurrently`].
    pub fn into_shared(self) -> Option<SharedListener> {
        self.accepts_concurrently()
            .then_some(SharedListener(self.0))
    }

    /// Makes accept non-blocking (a listener that polls must not block in accept when
    /// another process took the connection first; `ap_unixd_accept` treats EAGAIN as
    /// nothing accepted).
    pub fn set_nonblocking(&self) {
        // SAFETY: lr->sd is the listener's live APR socket.
        unsafe { sys::apr_socket_opt_set((*self.0.as_ptr()).sd, sys::APR_SO_NONBLOCK as i32, 1) };
    }

    /// Closes this listener and the ones after it in the bucket's list (the child's
    /// copies; other processes keep theirs).
    pub fn close_from_here(&self) {
        // SAFETY: a live listener list of this child.
        unsafe { sys::ap_close_listeners_ex(self.0.as_ptr()) };
    }
}

/// The poll set over several listening sockets, built once; `next` rotates over the
/// ready ones so no listener starves.
pub struct PollSet {
    fds: Vec<libc::pollfd>,
    next: usize,
}

impl PollSet {
    /// The poll set over `sockets`.
    pub fn new(sockets: &[Listener]) -> PollSet {
        PollSet {
            fds: sockets
                .iter()
                .map(|l| libc::pollfd {
                    fd: l.os_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect(),
            next: 0,
        }
    }

    /// Waits until a listener is readable; its index, or None when interrupted.
    pub fn wait(&mut self) -> Option<usize> {
        for p in self.fds.iter_mut() {
            p.revents = 0;
        }
        // SAFETY: fds is a valid, exclusively borrowed array of pollfd of this length.
        let n = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, -1) };
        if n <= 0 {
            return None;
        }
        let len = self.fds.len();
        let i = (0..len)
            .map(|k| (self.next + k) % len)
            .find(|&i| self.fds[i].revents != 0)?;
        self.next = i + 1;
        Some(i)
    }
}

/// A bucket's accept mutex as the parent created it, not yet attached in this child.
#[derive(Debug)]
pub struct ParentAcceptMutex(NonNull<sys::apr_proc_mutex_t>);

/// A bucket's cross-process accept mutex, re-attached in a child.
#[derive(Debug)]
pub struct AcceptMutex(NonNull<sys::apr_proc_mutex_t>);

// SAFETY: an APR proc mutex may be locked and unlocked from any thread of the process
// that attached it; the child's listener is its only user.
unsafe impl Send for AcceptMutex {}

impl AcceptMutex {
    /// Re-attaches the parent's mutex in a fresh child (`apr_proc_mutex_child_init`).
    /// Errors: the APR status.
    pub fn child_init(parent: ParentAcceptMutex, pchild: &Pool) -> Result<AcceptMutex, i32> {
        let mut m = parent.0.as_ptr();
        // SAFETY: a mutex created by the parent in pconf (from ListenBuckets), attached
        // once per child, in pchild, before threads exist.
        let rv = unsafe {
            sys::apr_proc_mutex_child_init(&mut m, sys::apr_proc_mutex_lockfile(m), pchild.as_ptr())
        };
        match NonNull::new(m) {
            Some(m) if rv == 0 => Ok(AcceptMutex(m)),
            _ => Err(if rv != 0 { rv } else { sys::APR_ENOMEM as i32 }),
        }
    }

    /// Takes the mutex. Errors: the APR status (EINTR when a signal interrupted).
    pub fn lock(&mut self) -> Result<(), i32> {
        // SAFETY: an attached mutex, used by one thread.
        match unsafe { sys::apr_proc_mutex_lock(self.0.as_ptr()) } {
            0 => Ok(()),
            rv => Err(rv),
        }
    }

    /// Releases the mutex taken by [`AcceptMutex::lock`]. Errors: the APR status.
    pub fn unlock(&mut self) -> Result<(), i32> {
        // SAFETY: as for lock; we hold it.
        match unsafe { sys::apr_proc_mutex_unlock(self.0.as_ptr()) } {
            0 => Ok(()),
            rv => Err(rv),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(errno: Option<i32>, probe: Option<i32>) -> &'static str {
        match accept_failure(errno, || probe) {
            Accepted::OutOfFiles => "own limit",
            Accepted::Broken => "broken",
            _ => "other",
        }
    }

    #[test]
    fn only_the_process_limit_waits_for_a_close() {
        assert_eq!(failure(Some(libc::EMFILE), None), "own limit");
        // Logging overwrote errno: a descriptor the child cannot get says which.
        assert_eq!(failure(Some(libc::ENOTTY), Some(libc::EMFILE)), "own limit");
        assert_eq!(failure(None, Some(libc::EMFILE)), "own limit");
        // Before: ENFILE lowered the child (RW00042, at its file limit for the parent,
        // which forked more children into a system-wide shortage).
        assert_eq!(failure(Some(libc::ENFILE), None), "broken");
        assert_eq!(failure(Some(libc::ENFILE), Some(libc::EMFILE)), "broken");
        assert_eq!(failure(Some(libc::ENOTTY), Some(libc::ENFILE)), "broken");
        assert_eq!(failure(Some(libc::ENOMEM), None), "broken");
    }
}
