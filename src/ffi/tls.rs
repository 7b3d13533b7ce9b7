//! TLS under a parking child's reads: mod_ssl's handshake driven without blocking, and what
//! the MPM sees of the bytes below mod_ssl.
//!
//! mod_ssl runs a connection's handshake in its process_connection hook with a blocking
//! `AP_MODE_INIT` read, so under every stock MPM a client that sends part of a ClientHello
//! holds a thread until `Timeout`. Its input filter already answers a non-blocking INIT read
//! with `APR_EAGAIN` when OpenSSL wants more bytes, and its own blocking INIT later does
//! nothing once the handshake is finished. So a parking child drives the handshake itself
//! ([`Handshake`]), non-blocking, before the connection's process_connection hooks run, and
//! parks the connection readable while mod_ssl answers EAGAIN. It never waits to write:
//! mod_ssl flushes each flight of the handshake as OpenSSL writes it, blocking, the way it
//! does under event (a few kB into an empty socket buffer). A handshake that fails (plain
//! HTTP on the port, a malformed ClientHello, a refused client certificate, the client gone)
//! goes to the stock path as it is: mod_ssl has logged it and marked the connection
//! (aborted, or "HTTP spoken on HTTPS port"), and the core answers as it always does. Its
//! process_connection hook must not run the handshake a second time then: that INIT read
//! would take the request line mod_ssl puts in place of plain HTTP (for its 400 "speaking
//! plain HTTP to an SSL-enabled server port"), so a filter above it (`rworker_tls_init`)
//! answers that one INIT read itself, and goes.
//!
//! The wire filter (`rworker_tls_wire`, just above the core's network filter, below mod_ssl
//! and mod_reqtimeout) sees every byte mod_ssl reads from the socket. It counts them, since
//! the handshake's and the head's deadlines move with the bytes received, as mod_reqtimeout's
//! MinRate and the socket's per-read Timeout do under event, where they see the same
//! encrypted bytes. Once the wait is due it answers `APR_TIMEUP` where the socket would have
//! timed out, so that mod_reqtimeout (which logs its AH01382) and mod_ssl above it end the
//! connection as they do under event.
//!
//! Reading a head through mod_ssl between requests, the MPM steps over mod_reqtimeout's
//! filter (`reqtimeout::Aside`, used by `head_buffer`): until the next request's
//! `pre_read_request` its stage is the last request's (the body's, when the body was never
//! read), and it starts and checks that stage's clock on every read, non-blocking ones
//! included. The MPM's own clock times the head instead (`crate::head::clock`), as it does
//! below mod_reqtimeout for plain text.
//!
//! Ownership: the wire's state lives in the connection's pool; only the thread that holds
//! the connection reads or writes it (the filter runs on that thread, inside its reads).

use std::ffi::{c_void, CStr};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use crate::ffi::filter;
use crate::ffi::reqtimeout::{self, Stage};
use crate::head::HeadClock;
use crate::sys;

/// The wire filter's name (httpd keeps filter names lower-case).
const WIRE: &CStr = c"rworker_tls_wire";
/// The name of the filter that answers mod_ssl's INIT after a failed handshake.
const INIT: &CStr = c"rworker_tls_init";

/// The registered wire filter, set by `register_filter` in each configuration pass (before
/// any child exists) and read by the children.
static WIRE_REC: AtomicPtr<sys::ap_filter_rec_t> = AtomicPtr::new(ptr::null_mut());
/// The same for `INIT`.
static INIT_REC: AtomicPtr<sys::ap_filter_rec_t> = AtomicPtr::new(ptr::null_mut());

/// Registers the filters (from register_hooks, once per configuration pass): the wire
/// filter just above the core's network filter, the INIT one just above mod_ssl's
/// (`AP_FTYPE_CONNECTION + 5`).
pub fn register_filter() {
    let network = sys::ap_filter_type_AP_FTYPE_NETWORK - 1;
    filter::register_input(WIRE, wire_filter, network, &WIRE_REC);
    let above_ssl = sys::ap_filter_type_AP_FTYPE_CONNECTION + 4;
    filter::register_input(INIT, init_filter, above_ssl, &INIT_REC);
}

/// The INIT filter (module doc): answers the first INIT read itself and removes itself;
/// passes other reads on.
unsafe extern "C" fn init_filter(
    f: *mut sys::ap_filter_t,
    bb: *mut sys::apr_bucket_brigade,
    mode: sys::ap_input_mode_t,
    block: sys::apr_read_type_e,
    readbytes: sys::apr_off_t,
) -> sys::apr_status_t {
    let _place = crate::ffi::panic::enter("rworker_tls_init input filter");
    // SAFETY: httpd calls the filter on the thread that holds the connection; removing
    // itself from its chain is allowed to a filter during its own call.
    unsafe {
        if mode != sys::ap_input_mode_t_AP_MODE_INIT {
            return sys::ap_get_brigade((*f).next, bb, mode, block, readbytes);
        }
        sys::ap_remove_input_filter(f);
    }
    0
}

/// Whether `c` is a TLS connection whose handshake nobody has begun: mod_ssl set it up in
/// pre_connection and its process_connection hook has not run.
///
/// # Safety
/// `c` is a live connection the calling thread holds, before its process_connection hooks
/// first run.
pub unsafe fn handshake_due(c: *mut sys::conn_rec) -> bool {
    // SAFETY: the caller's contract; mod_ssl's answer reads its connection config only.
    unsafe { (*c).master.is_null() && (*c).aborted == 0 && sys::ap_ssl_conn_is_ssl(c) != 0 }
}

/// The wire filter's state (module doc), in the connection's pool.
#[repr(C)]
struct WireState {
    /// Bytes read from the socket under mod_ssl so far.
    received: u64,
    /// The wait is due: reads answer APR_TIMEUP.
    timeup: bool,
}

/// A TLS connection's wire filter (module doc). Not `Copy`: one value per connection,
/// which its holder moves from the handshake to the head buffer.
#[derive(Debug)]
pub struct Wire {
    state: NonNull<WireState>,
    /// The filter's count when its holder last looked (or began a new wait).
    seen: u64,
}

impl Wire {
    /// Adds the wire filter to `c`. None when no filter was registered.
    ///
    /// # Safety
    /// `c` is a live connection the calling thread holds, and the value lives no longer
    /// than its pool (the holder owns the pool).
    unsafe fn attach(c: *mut sys::conn_rec) -> Option<Wire> {
        let rec = WIRE_REC.load(Ordering::Relaxed);
        if rec.is_null() {
            return None;
        }
        // SAFETY: the caller's contract; the state is written before the filter can read
        // it, and needs no cleanup (plain data in the pool).
        unsafe {
            let state =
                sys::apr_palloc((*c).pool, std::mem::size_of::<WireState>() as _) as *mut WireState;
            let state = NonNull::new(state)?;
            state.as_ptr().write(WireState {
                received: 0,
                timeup: false,
            });
            let f = sys::ap_add_input_filter_handle(
                rec,
                state.as_ptr() as *mut c_void,
                ptr::null_mut(),
                c,
            );
            (!f.is_null()).then_some(Wire { state, seen: 0 })
        }
    }

    /// Bytes read from the socket under mod_ssl since the holder last looked (or marked).
    pub fn arrived(&mut self) -> u64 {
        // SAFETY: the state lives in the pool of the connection whose holder holds this
        // value (`attach`); the filter writes it only inside that thread's reads.
        let got = unsafe { (*self.state.as_ptr()).received };
        let n = got - self.seen;
        self.seen = got;
        n
    }

    /// A new wait begins: only bytes read from now on (a head's peek included) are its own.
    pub fn mark(&mut self) {
        self.arrived();
    }

    /// The wait is due: from now on reads below mod_ssl time out.
    pub fn expire(&mut self) {
        // SAFETY: as in `arrived`.
        unsafe { (*self.state.as_ptr()).timeup = true };
    }
}

/// The wire filter (module doc).
unsafe extern "C" fn wire_filter(
    f: *mut sys::ap_filter_t,
    bb: *mut sys::apr_bucket_brigade,
    mode: sys::ap_input_mode_t,
    block: sys::apr_read_type_e,
    readbytes: sys::apr_off_t,
) -> sys::apr_status_t {
    let _place = crate::ffi::panic::enter("rworker_tls_wire input filter");
    // SAFETY: httpd calls the filter on the thread that holds the connection; ctx is the
    // state `Wire::attach` gave it, in the connection's pool.
    let w = unsafe { &mut *((*f).ctx as *mut WireState) };
    if w.timeup && mode != sys::ap_input_mode_t_AP_MODE_INIT {
        return sys::APR_TIMEUP as sys::apr_status_t;
    }
    // What a read takes from the socket (a speculative one leaves it there, to be taken
    // and counted by the next).
    let takes = mode == sys::ap_input_mode_t_AP_MODE_READBYTES
        || mode == sys::ap_input_mode_t_AP_MODE_GETLINE;
    // SAFETY: the caller's brigade; only lengths already known are summed (no bucket is
    // read: a socket bucket would block).
    unsafe {
        let before = if takes { known_length(bb) } else { 0 };
        let rv = sys::ap_get_brigade((*f).next, bb, mode, block, readbytes);
        if takes && rv == 0 {
            w.received += known_length(bb).saturating_sub(before);
        }
        rv
    }
}

/// The length of `bb`'s buckets whose length is known.
///
/// # Safety
/// `bb` is a live brigade of the calling thread's.
unsafe fn known_length(bb: *mut sys::apr_bucket_brigade) -> u64 {
    let mut len: sys::apr_off_t = 0;
    // SAFETY: the caller's contract; read_all = 0 reads no bucket.
    unsafe { sys::apr_brigade_length(bb, 0, &mut len) };
    len.max(0) as u64
}

/// What a step of a handshake found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shook {
    /// Finished ([`Handshake::finish`] gives the wire for the connection's heads).
    Done,
    /// OpenSSL wants more bytes: none are there yet.
    More,
    /// It failed (mod_ssl logged why and marked the connection): the stock path answers.
    Failed,
}

/// A TLS handshake driven without blocking (module doc), with its deadline: mod_reqtimeout's
/// handshake stage where `handshake=` is set, and the socket's Timeout per read.
#[derive(Debug)]
pub struct Handshake {
    c: NonNull<sys::conn_rec>,
    wire: Wire,
    clock: HeadClock,
    /// A brigade for the INIT reads (they return no data), in the connection's pool.
    bb: *mut sys::apr_bucket_brigade,
}

impl Handshake {
    /// Begins `c`'s handshake at `now`, each read waiting at most `per_read` (the socket's
    /// timeout). None when its server's mod_reqtimeout configuration does not read as
    /// expected, or the wire filter is missing: then mod_ssl runs it as always.
    ///
    /// # Safety
    /// `c` is a connection [`handshake_due`] let through, held by the calling thread, and
    /// the value lives no longer than its pool (the holder owns the pool).
    pub unsafe fn start(
        c: NonNull<sys::conn_rec>,
        now: u64,
        per_read: Duration,
    ) -> Option<Handshake> {
        let cp = c.as_ptr();
        // SAFETY: the caller's contract; the configuration is the running one.
        unsafe {
            let stage = match reqtimeout::handshake_stage((*cp).base_server) {
                Stage::Unknown => return None,
                Stage::Off => None,
                Stage::Timed(s) => Some(s),
            };
            let wire = Wire::attach(cp)?;
            Some(Handshake {
                c,
                wire,
                clock: HeadClock::start(now, stage, per_read),
                bb: sys::apr_brigade_create((*cp).pool, (*cp).bucket_alloc),
            })
        }
    }

    /// Takes the handshake as far as the bytes that have come allow, without blocking.
    pub fn step(&mut self, now: u64) -> Shook {
        // SAFETY: the connection is the holder's (`start`), on this thread; INIT reads
        // return no data, and the brigade is emptied anyway.
        let rv = unsafe {
            let rv = sys::ap_get_brigade(
                (*self.c.as_ptr()).input_filters,
                self.bb,
                sys::ap_input_mode_t_AP_MODE_INIT,
                sys::apr_read_type_e_APR_NONBLOCK_READ,
                0,
            );
            sys::apr_brigade_cleanup(self.bb as *mut c_void);
            rv
        };
        self.clock.received(self.wire.arrived() as usize, now);
        match rv {
            0 => Shook::Done,
            _ if rv == sys::APR_EAGAIN as sys::apr_status_t => Shook::More,
            _ => {
                let rec = INIT_REC.load(Ordering::Relaxed);
                // SAFETY: the connection is the holder's, before its process_connection
                // hooks (module doc: mod_ssl's INIT is not to run again).
                if !rec.is_null() {
                    unsafe {
                        sys::ap_add_input_filter_handle(
                            rec,
                            ptr::null_mut(),
                            ptr::null_mut(),
                            self.c.as_ptr(),
                        )
                    };
                }
                Shook::Failed
            }
        }
    }

    /// When the handshake is due.
    pub fn deadline(&self) -> u64 {
        self.clock.deadline()
    }

    /// The handshake is past its deadline: mod_ssl's own blocking handshake meets a timeout
    /// at its next read of the socket.
    pub fn expire(mut self) {
        self.wire.expire();
    }

    /// A finished handshake's wire, for the connection's heads.
    pub fn finish(self) -> Wire {
        self.wire
    }
}
