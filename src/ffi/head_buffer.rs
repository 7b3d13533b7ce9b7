//! A connection's request head, read without blocking while it arrives, and handed back to
//! httpd's core as if the core had read it from the socket.
//!
//! httpd 2.4 reads a head with blocking reads (`ap_read_request`); there is no way to ask
//! the core to read part of one and come back later. So a parking child reads the bytes
//! itself, non-blocking, into a buffer the connection owns ([`HeadBuffer`], in the
//! connection's pool), and the connection waits parked between reads; once the head is
//! complete (`crate::head::scan`), the core runs as always and reads the head through the
//! connection's input filters, where rworker's filter (`rworker_head`, just above the core's
//! network filter) hands it the buffered bytes first, then steps aside.
//!
//! Where the filter sits: below every connection filter that transforms or times the
//! stream (mod_remoteip's PROXY reader, mod_reqtimeout, mod_logio counts what the core
//! reads through it), so they see the head as if it came from the socket; and the buffer
//! is filled from the filter below it (the core's), so nothing above sees the bytes twice.
//! Above all, mod_reqtimeout does not see the non-blocking reads between requests: its
//! clock for a head starts in `ap_read_request`; the buffer's clock is
//! `crate::head::clock`, which reads the same configuration.
//!
//! Over TLS (a handshake the MPM ran, `crate::ffi::tls`) the head is plain text only above
//! mod_ssl, so there the filter is `rworker_tls_head`, just above mod_ssl's, and the buffer
//! is filled through mod_ssl with mod_reqtimeout stepped over (`reqtimeout::Aside`). The
//! clock counts the bytes read from the socket (the wire filter's count, which
//! mod_reqtimeout's MinRate counts under event), and at the deadline the wire filter, not
//! this one, answers APR_TIMEUP, below mod_reqtimeout and mod_ssl as the socket would.
//!
//! At a head's deadline the core is run with the bytes received so far and the filter
//! answers `APR_TIMEUP` where the socket would have timed out: mod_reqtimeout (above it)
//! logs its AH01382 and ends the connection as it would under event, and without it the
//! core answers as to a socket timeout. The client sees what event's client sees.
//!
//! Ownership: the buffer belongs to the connection (freed by a cleanup of its pool); the
//! MPM thread that holds the connection reads into it between requests, and the core reads
//! from it (through the filter) while that thread runs the connection's protocol: never
//! both at once.

use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use crate::ffi::filter;
use crate::ffi::reqtimeout::{self, Aside, Stage};
use crate::ffi::tls::Wire;
use crate::head::{HeadClock, HeadScan, Limits, Progress, TimeoutStage};
use crate::sys;

/// The filter's name (httpd keeps filter names lower-case).
const FILTER: &std::ffi::CStr = c"rworker_head";
/// The filter's name over TLS.
const TLS_FILTER: &std::ffi::CStr = c"rworker_tls_head";
/// The connection note that carries the time a waiting head's request line came, from the
/// buffer to the request (`request_time`).
const LINE_AT: &std::ffi::CStr = c"rworker-request-line-time";
/// mod_remoteip's PROXY protocol reader, present while it expects a PROXY header.
const REMOTEIP_PROXY: &[u8] = b"remoteip_input";

/// The registered filter, set by `register_filter` in each configuration pass (before any
/// child exists) and read by the children.
static FILTER_REC: AtomicPtr<sys::ap_filter_rec_t> = AtomicPtr::new(ptr::null_mut());
/// The same over TLS.
static TLS_FILTER_REC: AtomicPtr<sys::ap_filter_rec_t> = AtomicPtr::new(ptr::null_mut());

/// Registers the filters and the request-time hook (from register_hooks, once per
/// configuration pass). Their types put the plain-text filter just above the core's
/// network filter, below mod_logio's, mod_reqtimeout's and every other connection filter,
/// and the TLS one just above mod_ssl's (`AP_FTYPE_CONNECTION + 5`; see the module doc).
pub fn register_filter() {
    let network = sys::ap_filter_type_AP_FTYPE_NETWORK - 1;
    filter::register_input(FILTER, replay, network, &FILTER_REC);
    let above_ssl = sys::ap_filter_type_AP_FTYPE_CONNECTION + 4;
    filter::register_input(TLS_FILTER, replay, above_ssl, &TLS_FILTER_REC);
    // SAFETY: as above.
    unsafe {
        sys::ap_hook_post_read_request(
            Some(request_time),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_REALLY_FIRST,
        );
        // A head that failed (a 408 at its deadline) runs no post_read_request: its log
        // line gets the time here, before the loggers run.
        sys::ap_hook_log_transaction(
            Some(request_time),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_REALLY_FIRST,
        );
    };
}

/// post_read_request (and log_transaction): a request whose head waited parked gets the
/// time its request line came, as the core stamps it when it reads the line itself (`%t`,
/// `%D` in the access log); the core read it from the buffer later.
unsafe extern "C" fn request_time(r: *mut sys::request_rec) -> std::os::raw::c_int {
    let _place = crate::ffi::panic::enter("post_read_request hook (request time)");
    // SAFETY: httpd passes the request being read or logged, on the thread that holds its
    // connection; the notes table is the connection's.
    unsafe {
        let notes = (*(*r).connection).notes;
        let v = sys::apr_table_get(notes, LINE_AT.as_ptr());
        if !v.is_null() {
            if let Some(t) = std::ffi::CStr::from_ptr(v)
                .to_str()
                .ok()
                .and_then(|t| t.parse::<sys::apr_time_t>().ok())
            {
                (*r).request_time = t;
            }
            sys::apr_table_unset(notes, LINE_AT.as_ptr());
        }
    }
    sys::DECLINED
}

/// What a head read found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadRead {
    /// The core can read the head and decide now (complete, over a limit, not HTTP, or the
    /// client closed or failed: the core meets that as it would have).
    Ready,
    /// More must arrive: the socket is not readable yet.
    More,
}

/// How a connection's bytes come to the core.
#[derive(Debug)]
pub enum Transport {
    /// From the socket.
    Plain,
    /// Through mod_ssl, after a handshake the MPM ran; the connection's wire filter.
    Tls(Wire),
}

impl Transport {
    /// Whether it is TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Transport::Tls(_))
    }

    /// A new head begins: over TLS, only the bytes read from now on count for it.
    pub fn mark(&mut self) {
        if let Transport::Tls(w) = self {
            w.mark();
        }
    }
}

/// A connection's head buffer (see the module doc).
#[derive(Debug)]
pub struct HeadBuffer {
    /// Bytes received; `bytes[start..]` are not handed to the core yet.
    bytes: Vec<u8>,
    start: usize,
    scan: HeadScan,
    clock: HeadClock,
    limits: Limits,
    /// mod_reqtimeout's header stage (None: Timeout per read alone).
    stage: Option<TimeoutStage>,
    /// The head is past its deadline: the filter answers APR_TIMEUP once its complete lines
    /// are read (plain text; over TLS the wire filter answers it).
    expired: bool,
    /// Over TLS, the wire filter.
    wire: Option<Wire>,
    /// Its request line's arrival is noted (`LINE_AT`).
    line_noted: bool,
    /// The filter's entry in the connection's chain.
    filter: *mut sys::ap_filter_t,
    /// A brigade for the reads, in the connection's pool.
    bb: *mut sys::apr_bucket_brigade,
}

impl HeadBuffer {
    /// Gives connection `c` (one that [`eligible`] let through) a head buffer and its
    /// filter, on `transport`. None when its server's mod_reqtimeout configuration does not
    /// read as expected: then the stock path reads its heads (as under every MPM).
    ///
    /// # Safety
    /// `c` is a live primary connection the calling thread holds, between requests, and
    /// `transport` its own.
    pub unsafe fn attach(
        c: *mut sys::conn_rec,
        now: u64,
        transport: Transport,
    ) -> Option<NonNull<HeadBuffer>> {
        let (rec, wire) = match transport {
            Transport::Plain => (FILTER_REC.load(Ordering::Relaxed), None),
            Transport::Tls(w) => (TLS_FILTER_REC.load(Ordering::Relaxed), Some(w)),
        };
        // SAFETY: the caller's contract; the configuration is the running one.
        unsafe {
            let stage = match reqtimeout::header_stage((*c).base_server) {
                _ if rec.is_null() => return None,
                Stage::Unknown => return None,
                Stage::Off => None,
                Stage::Timed(h) => Some(h),
            };
            let bb = sys::apr_brigade_create((*c).pool, (*c).bucket_alloc);
            let mut limits = limits_of(c);
            // A PROXY header comes before the handshake, below mod_ssl.
            limits.proxy_header &= wire.is_none();
            let buf = Box::into_raw(Box::new(HeadBuffer {
                bytes: Vec::new(),
                start: 0,
                scan: HeadScan::new(),
                clock: HeadClock::start(now, None, Duration::ZERO),
                limits,
                stage,
                expired: false,
                wire,
                line_noted: false,
                filter: ptr::null_mut(),
                bb,
            }));
            sys::apr_pool_cleanup_register(
                (*c).pool,
                buf as *const c_void,
                Some(free),
                Some(sys::apr_pool_cleanup_null),
            );
            let f = sys::ap_add_input_filter_handle(rec, buf as *mut c_void, ptr::null_mut(), c);
            (*buf).filter = f;
            NonNull::new(buf).filter(|_| !f.is_null())
        }
    }

    /// Whether bytes of the next head are buffered here already (read ahead with the last
    /// one).
    pub fn has_pending(&self) -> bool {
        self.start < self.bytes.len()
    }

    /// A new head begins at `now` (its first read; the core's next blocking read would
    /// wait up to `per_read`, the socket's timeout; over TLS the wire was marked then,
    /// `mark_wire`): its clock starts, and what is left over from the last one (pipelined
    /// bytes) is its beginning. The `proxy_header` limit holds for the first head only
    /// (mod_remoteip reads the header once).
    pub fn begin(&mut self, now: u64, per_read: Duration) {
        self.bytes.drain(..self.start);
        self.start = 0;
        self.scan = HeadScan::new();
        self.clock = HeadClock::start(now, self.stage, per_read);
        if self.wire.is_some() {
            // Counted from the socket (since the mark: what the peek read): bytes read
            // ahead came with the last head's.
            self.count(0, now);
        } else {
            // Bytes of it read ahead (pipelined) count for MinRate, as mod_reqtimeout
            // counts them when the core reads them.
            self.clock.received(self.bytes.len(), now);
        }
        self.expired = false;
        self.line_noted = false;
        // SAFETY: the filter's connection is the caller's, whose notes table it is.
        unsafe { sys::apr_table_unset((*(*self.filter).c).notes, LINE_AT.as_ptr()) };
    }

    /// Reads what has arrived, without blocking, until the head is ready or the socket has
    /// nothing more.
    pub fn read(&mut self, now: u64) -> HeadRead {
        loop {
            let progress = self.scan.scan(&self.bytes[self.start..], &self.limits);
            if !self.line_noted && self.scan.past_request_line() {
                self.line_noted = true;
                self.note_line_time();
            }
            if progress == Progress::Ready {
                self.limits.proxy_header = false;
                return HeadRead::Ready;
            }
            let got = self.read_some();
            self.count(if let Got::Bytes(n) = got { n } else { 0 }, now);
            match got {
                Got::Bytes(_) => {}
                Got::Nothing => return HeadRead::More,
                Got::End => return HeadRead::Ready,
            }
        }
    }

    /// The clock learns what arrived at `now`: `n` bytes of head, or over TLS what the wire
    /// filter counted since it last looked (a record's bytes move the deadline before
    /// they decrypt to anything).
    fn count(&mut self, n: usize, now: u64) {
        let n = match &mut self.wire {
            Some(w) => w.arrived() as usize,
            None => n,
        };
        self.clock.received(n, now);
    }

    /// Whether its connection is TLS.
    pub fn is_tls(&self) -> bool {
        self.wire.is_some()
    }

    /// A new head begins: over TLS, only the bytes read from now on count for it.
    pub fn mark_wire(&mut self) {
        if let Some(w) = &mut self.wire {
            w.mark();
        }
    }

    /// Notes now as the time the request line came (`LINE_AT`, in the connection's notes:
    /// the core drops every input filter but its own when a head fails, so the hooks cannot
    /// reach the buffer then).
    fn note_line_time(&mut self) {
        // SAFETY: the filter's connection is the caller's; the value is copied into its pool
        // and lives as long as the notes table.
        unsafe {
            let c = (*self.filter).c;
            let t = sys::apr_time_now().to_string();
            let v = sys::apr_pstrmemdup((*c).pool, t.as_ptr() as *const _, t.len() as _);
            sys::apr_table_setn((*c).notes, LINE_AT.as_ptr(), v);
        }
    }

    /// When the head is due (`crate::head::clock`).
    pub fn deadline(&self) -> u64 {
        self.clock.deadline()
    }

    /// The head is past its deadline: the core reads what came and then meets a timeout.
    pub fn expire(&mut self) {
        match &mut self.wire {
            Some(w) => w.expire(),
            None => self.expired = true,
        }
    }

    /// One non-blocking read from the filter below ours. The core's filter answers an
    /// empty read both when nothing has arrived and, once, at the end of the stream (the
    /// next read then fails with APR_EOF), so an empty read is asked again before it counts
    /// as "nothing".
    fn read_some(&mut self) -> Got {
        // SAFETY: the filter is in the chain of the connection the calling thread holds,
        // which is read below it only, and not changed, while the value lives.
        let _aside = self
            .wire
            .is_some()
            .then(|| unsafe { Aside::new(self.filter) });
        for _ in 0..2 {
            // SAFETY: the filter and brigade live in the connection's pool, which the
            // calling thread holds (it holds the connection); the brigade is emptied after
            // each read, whatever it found.
            let got = unsafe {
                let rv = sys::ap_get_brigade(
                    (*self.filter).next,
                    self.bb,
                    sys::ap_input_mode_t_AP_MODE_READBYTES,
                    sys::apr_read_type_e_APR_NONBLOCK_READ,
                    self.limits.piece as sys::apr_off_t,
                );
                let got = self.take_brigade(rv);
                sys::apr_brigade_cleanup(self.bb as *mut c_void);
                got
            };
            if !matches!(got, Got::Bytes(0)) {
                return got;
            }
        }
        Got::Nothing
    }

    /// What a read left in the brigade (`rv` its status), appended to the buffer; an empty
    /// read is `Bytes(0)`.
    ///
    /// # Safety
    /// The brigade is the buffer's, just read into by the calling thread.
    unsafe fn take_brigade(&mut self, rv: sys::apr_status_t) -> Got {
        if rv == sys::APR_EAGAIN as sys::apr_status_t {
            return Got::Nothing;
        }
        let mut len: sys::apr_off_t = 0;
        // SAFETY: the caller's contract.
        if rv != 0 || unsafe { sys::apr_brigade_length(self.bb, 1, &mut len) } != 0 {
            return Got::End;
        }
        let at = self.bytes.len();
        let want = at + len.max(0) as usize;
        if want > self.bytes.capacity() {
            // Doubling, but never past what a parked head can hold and one more read: a
            // 16 KiB head would otherwise sit in a 32 KiB buffer.
            let most = self.limits.parked_bytes() + self.limits.piece;
            let to = want.max((2 * self.bytes.capacity()).min(most));
            self.bytes.reserve_exact(to - at);
        }
        self.bytes.resize(want, 0);
        let mut n = (want - at) as sys::apr_size_t;
        // SAFETY: the caller's contract; `n` bytes of room from `at`.
        let rv = unsafe {
            sys::apr_brigade_flatten(self.bb, self.bytes[at..].as_mut_ptr() as *mut _, &mut n)
        };
        if rv != 0 {
            self.bytes.truncate(at);
            return Got::End;
        }
        self.bytes.truncate(at + n);
        Got::Bytes(n)
    }

    /// Hands the core up to `n` buffered bytes (consuming them unless `peek`).
    fn give(
        &mut self,
        bb: *mut sys::apr_bucket_brigade,
        n: usize,
        peek: bool,
    ) -> sys::apr_status_t {
        let n = n.min(self.bytes.len() - self.start);
        let data = &self.bytes[self.start..self.start + n];
        // SAFETY: `bb` is the caller's brigade; apr_brigade_write copies the bytes into
        // buckets of its own (no flush function: it never calls out).
        let rv = unsafe {
            sys::apr_brigade_write(bb, None, ptr::null_mut(), data.as_ptr() as *const _, n as _)
        };
        if !peek {
            self.start += n;
            if self.start == self.bytes.len() {
                // All handed over: a parked keep-alive connection keeps no head memory.
                self.bytes = Vec::new();
                self.start = 0;
            }
        }
        rv
    }
}

enum Got {
    Bytes(usize),
    Nothing,
    End,
}

/// Whether the MPM may read `c`'s request heads: an HTTP/1 connection, without TLS or
/// over a TLS handshake the MPM ran (`tls`), not taken by another protocol, on an HTTP
/// listener, whose `Protocols` allow http/1.1. Else the stock path reads them, as under
/// every MPM.
///
/// # Safety
/// `c` is a live connection the calling thread holds, before its first request.
pub unsafe fn eligible(c: *mut sys::conn_rec, tls: bool) -> bool {
    // SAFETY: the caller's contract; the protocol functions read the connection and its
    // server's configuration only.
    unsafe {
        !FILTER_REC.load(Ordering::Relaxed).is_null()
            && (*c).master.is_null()
            && (*c).aborted == 0
            && speaks_http1(c, tls)
            && serves_http(c)
            && sys::ap_is_allowed_protocol(c, ptr::null_mut(), ptr::null_mut(), http1()) != 0
    }
}

/// The limits `c`'s heads are read under (its base server's, as the core reads a head).
///
/// # Safety
/// `c` is a live connection the calling thread holds.
unsafe fn limits_of(c: *mut sys::conn_rec) -> Limits {
    // SAFETY: the caller's contract; the server is the running configuration's.
    unsafe {
        let s = (*c).base_server;
        Limits {
            line: (*s).limit_req_line.max(0) as usize,
            field: (*s).limit_req_fieldsize.max(0) as usize,
            fields: (*s).limit_req_fields.max(0) as usize,
            fields_unlimited: sys::DEFAULT_LIMIT_REQUEST_FIELDS as usize,
            blank_lines: sys::DEFAULT_LIMIT_BLANK_LINES as usize,
            piece: sys::HUGE_STRING_LEN as usize,
            proxy_header: has_filter(c, REMOTEIP_PROXY),
        }
    }
}

/// Looks at what has arrived of a head in the core's own input filter without taking it
/// (a non-blocking AP_MODE_SPECULATIVE read of the core's filter, below every other, into
/// `bb`): true when the core can read and decide on the head now, from its own buffer, as
/// it always does (the common case: a fast client's head comes whole, and with `AcceptFilter
/// http data` it is there at accept). Nothing is copied to a buffer of the connection's and
/// no filter is added then. False: it is not there yet (or the peek could not tell), and
/// the head is to be read into a [`HeadBuffer`]. Over TLS (`tls`) the peek is at the top
/// of the chain, through mod_ssl (which keeps what it decrypted for the core's read; an
/// empty head buffer's filter passes it on), with mod_reqtimeout stepped over.
///
/// # Safety
/// `c` is a live connection the calling thread holds, between requests, whose head buffer
/// (if it has one) holds nothing; `bb` a brigade of its pool.
// Never inlined: its stack copy stays in its own frame, not in the worker's, under which
// every request's deeper calls would run that much lower (worker stacks' RSS).
#[inline(never)]
pub unsafe fn peek_ready(
    c: *mut sys::conn_rec,
    bb: *mut sys::apr_bucket_brigade,
    tls: bool,
) -> bool {
    // SAFETY: the caller's contract.
    let lim = unsafe { limits_of(c) };
    // SAFETY: the caller's contract; the chain's last filter is the core's, which answers a
    // non-blocking speculative read from what it holds or one recv, and keeps the bytes;
    // mod_ssl's answers one from what it decrypted or decrypts now, and keeps it.
    unsafe {
        let mut f = (*c).input_filters;
        while !tls && !f.is_null() && !(*f).next.is_null() {
            f = (*f).next;
        }
        if f.is_null() {
            return false;
        }
        let _aside = tls.then(|| Aside::new(f));
        let rv = sys::ap_get_brigade(
            f,
            bb,
            sys::ap_input_mode_t_AP_MODE_SPECULATIVE,
            sys::apr_read_type_e_APR_NONBLOCK_READ,
            lim.piece as sys::apr_off_t,
        );
        let mut len: sys::apr_off_t = 0;
        if rv != 0 || sys::apr_brigade_length(bb, 1, &mut len) != 0 || len <= 0 {
            sys::apr_brigade_cleanup(bb as *mut c_void);
            return false;
        }
        // A copy on the stack, for the common head: no allocation on this path (a
        // thread-local buffer made each worker thread take a malloc arena of its own, and
        // a HUGE_STRING_LEN array made each worker's stack 8 KiB deeper: both showed in the
        // children's RSS). A longer head than fits is read into the buffer instead.
        let mut seen = std::mem::MaybeUninit::<[u8; PEEK]>::uninit();
        let mut n = PEEK as sys::apr_size_t;
        let flat = len as usize <= PEEK
            && sys::apr_brigade_flatten(bb, seen.as_mut_ptr() as *mut _, &mut n) == 0;
        sys::apr_brigade_cleanup(bb as *mut c_void);
        if !flat {
            return false;
        }
        // SAFETY: apr_brigade_flatten wrote `n` (at most PEEK) bytes from the start.
        let seen = std::slice::from_raw_parts(seen.as_ptr() as *const u8, n.min(PEEK));
        HeadScan::new().scan(seen, &lim) == Progress::Ready
    }
}

/// The most of a head `peek_ready` looks at (a request head is rarely longer).
const PEEK: usize = 2048;

/// Whether `c` still speaks HTTP/1 as its heads began: TLS or not as `tls` says (an RFC
/// 2817 upgrade makes a plain one TLS later, under its own handshake), and no protocol
/// switch (h2 by Upgrade, by prior knowledge, or by ALPN).
///
/// # Safety
/// `c` is a live connection the calling thread holds.
pub unsafe fn speaks_http1(c: *mut sys::conn_rec, tls: bool) -> bool {
    // SAFETY: the caller's contract; ap_get_protocol returns a string of the connection's
    // or a static one.
    unsafe {
        if (sys::ap_ssl_conn_is_ssl(c) != 0) != tls {
            return false;
        }
        let proto = sys::ap_get_protocol(c);
        !proto.is_null() && libc::strcmp(proto, http1()) == 0
    }
}

/// httpd's name for HTTP/1 (`AP_PROTOCOL_HTTP1`, NUL-terminated).
fn http1() -> *const std::os::raw::c_char {
    sys::AP_PROTOCOL_HTTP1.as_ptr() as *const _
}

/// Whether `c` came in on an HTTP listener: its server's protocol (`Listen`'s protocol
/// argument, or the `Protocol` directive) is http or https. A module that serves another
/// protocol on its own `Listen ... ftp` (one where the server speaks first) gets its
/// connections untouched.
///
/// # Safety
/// `c` is a live connection the calling thread holds.
pub unsafe fn serves_http(c: *mut sys::conn_rec) -> bool {
    // SAFETY: the caller's contract; the server's protocol is a string of the configuration
    // (set by listen.c for every server) or NULL.
    unsafe {
        let p = sys::ap_get_server_protocol((*c).base_server);
        p.is_null()
            || libc::strcasecmp(p, c"http".as_ptr()) == 0
            || libc::strcasecmp(p, c"https".as_ptr()) == 0
    }
}

/// Whether `c`'s input chain holds the filter named `name`.
///
/// # Safety
/// `c` is a live connection the calling thread holds.
unsafe fn has_filter(c: *mut sys::conn_rec, name: &[u8]) -> bool {
    // SAFETY: the caller's contract: the chain and each filter's record are live.
    unsafe {
        let mut f = (*c).input_filters;
        while !f.is_null() {
            if filter::is_named(f, name) {
                return true;
            }
            f = (*f).next;
        }
    }
    false
}

/// The connection pool's cleanup: frees the buffer.
unsafe extern "C" fn free(data: *mut c_void) -> sys::apr_status_t {
    // SAFETY: registered with the Box's pointer in `attach`, run once when the pool is
    // cleared or destroyed; nothing reads the buffer afterwards (the filter lives in the
    // same pool).
    drop(unsafe { Box::from_raw(data as *mut HeadBuffer) });
    0
}

/// The filter (see the module doc): buffered bytes first, the way the core's own filter
/// hands out what it has read (a line up to its LF, in pieces of at most HUGE_STRING_LEN;
/// at most `readbytes`; a peek without consuming), then what is below, or after a head's
/// deadline APR_TIMEUP.
unsafe extern "C" fn replay(
    f: *mut sys::ap_filter_t,
    bb: *mut sys::apr_bucket_brigade,
    mode: sys::ap_input_mode_t,
    block: sys::apr_read_type_e,
    readbytes: sys::apr_off_t,
) -> sys::apr_status_t {
    let _place = crate::ffi::panic::enter("rworker_head input filter");
    // SAFETY: httpd calls the filter on the thread that holds the connection, while the
    // MPM does not touch the buffer (module doc); ctx is the buffer `attach` gave it.
    let hb = unsafe { &mut *((*f).ctx as *mut HeadBuffer) };
    let left = hb.bytes.len() - hb.start;
    let down = || {
        // SAFETY: passing the call on down the chain, as every filter does.
        unsafe { sys::ap_get_brigade((*f).next, bb, mode, block, readbytes) }
    };
    if mode == sys::ap_input_mode_t_AP_MODE_INIT || (left == 0 && !hb.expired) {
        return down();
    }
    let timeup = sys::APR_TIMEUP as sys::apr_status_t;
    let wanted = usize::try_from(readbytes).unwrap_or(0);
    match mode {
        sys::ap_input_mode_t_AP_MODE_GETLINE => {
            let pending = &hb.bytes[hb.start..];
            let piece = hb.limits.piece;
            match pending.iter().take(piece).position(|&b| b == b'\n') {
                Some(i) => hb.give(bb, i + 1, false),
                None if hb.expired => timeup,
                None if pending.len() >= piece => hb.give(bb, piece, false),
                None => {
                    let n = pending.len();
                    // The line goes on below (a body's chunk line the core's filter holds
                    // the rest of): the rest of it from there, as the core's own read
                    // would give the whole line. Handed out alone, the part here would
                    // send mod_reqtimeout's line loop to wait on the socket.
                    let rv = hb.give(bb, n, false);
                    if rv != 0 {
                        return rv;
                    }
                    down()
                }
            }
        }
        sys::ap_input_mode_t_AP_MODE_EATCRLF => {
            let crlf = hb.bytes[hb.start..]
                .iter()
                .take_while(|&&b| b == b'\r' || b == b'\n')
                .count();
            hb.start += crlf;
            if hb.start == hb.bytes.len() && !hb.expired {
                return down();
            }
            0
        }
        _ if left == 0 => timeup,
        sys::ap_input_mode_t_AP_MODE_SPECULATIVE => hb.give(bb, wanted.max(1), true),
        sys::ap_input_mode_t_AP_MODE_EXHAUSTIVE => hb.give(bb, left, false),
        _ => hb.give(bb, wanted.max(1), false),
    }
}
