//! Whose timeouts a parked connection waits under: the virtual host that served its last
//! request, as the event MPM chooses it, not the first vhost of its address.
//!
//! A connection starts on `c->base_server` (the first vhost of its IP and port); a request
//! may be served by another (a name-based vhost, an SNI vhost). Event re-chooses the
//! connection's server for every request in its `post_read_request` hook: the request's
//! server (`r->server`) where that vhost sets KeepAliveTimeout itself, else the base server
//! (the legacy rule the core's own keep-alive loop follows, so thread mode and the stock
//! worker agree), and for a protocol switched on the connection itself (h2 chosen by ALPN,
//! on the SNI vhost) the server it was switched on, in its `protocol_switch` hook. Both the
//! keep-alive wait and `Timeout` (write completion, a module's I/O wait) come from that one
//! server, as event's per-server queues do.
//!
//! The choice lives in the connection's own `conn_config` vector, in rworker's entry: one
//! pointer to a `server_rec`, which lives for the generation, as long as any connection of
//! a child. h2's secondary connections get a copy of that entry (h2_c2_create copies the
//! MPM's entry), and a hook run on one writes the copy only, never the primary's.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::ptr;
use std::time::Duration;

use crate::ffi::log;
use crate::sys;

/// rworker's entry in `c->conn_config`, or None before the module has an index.
///
/// # Safety
/// `c` is a live connection the calling thread holds; its conn_config vector has an entry
/// per module (the core makes it so in `ap_create_conn_config`).
unsafe fn entry(c: *mut sys::conn_rec) -> Option<*mut *mut c_void> {
    let index = usize::try_from(log::module_index()).ok()?;
    // SAFETY: the caller's contract; the index is below the number of modules.
    unsafe {
        let v = (*c).conn_config as *mut *mut c_void;
        (!v.is_null()).then(|| v.add(index))
    }
}

/// The server whose KeepAliveTimeout and Timeout `c` waits under (see the module doc):
/// the one its hooks recorded, else its base server.
///
/// # Safety
/// `c` is a live connection the calling thread holds.
unsafe fn server_of(c: *mut sys::conn_rec) -> *const sys::server_rec {
    // SAFETY: the caller's contract; a recorded pointer is a server_rec of this
    // generation (see `record`).
    unsafe {
        match entry(c).map(|e| *e as *const sys::server_rec) {
            Some(s) if !s.is_null() => s,
            _ => (*c).base_server,
        }
    }
}

/// The KeepAliveTimeout a parked keep-alive connection `c` waits under.
///
/// # Safety
/// `c` is a live connection the calling thread holds.
pub unsafe fn keep_alive_timeout(c: *mut sys::conn_rec) -> Duration {
    // SAFETY: the caller's contract; server records live for the generation.
    let us = unsafe { (*server_of(c)).keep_alive_timeout };
    Duration::from_micros(us.max(0) as u64)
}

/// The Timeout a connection `c` waits under in write completion or a module's I/O wait.
///
/// # Safety
/// `c` is a live connection the calling thread holds.
pub unsafe fn timeout(c: *mut sys::conn_rec) -> Duration {
    // SAFETY: as for keep_alive_timeout.
    let us = unsafe { (*server_of(c)).timeout };
    Duration::from_micros(us.max(0) as u64)
}

/// Records `s` as `c`'s server.
///
/// # Safety
/// `c` is a live connection the calling thread holds, `s` a server record of this
/// generation.
unsafe fn record(c: *mut sys::conn_rec, s: *mut sys::server_rec) {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(e) = entry(c) {
            *e = s as *mut c_void;
        }
    }
}

/// post_read_request: the request's server where it sets KeepAliveTimeout itself, else
/// the connection's base server (event's `event_post_read_request`).
unsafe extern "C" fn post_read_request(r: *mut sys::request_rec) -> c_int {
    let _place = crate::ffi::panic::enter("post_read_request hook (the connection's vhost)");
    // SAFETY: httpd passes the request being read on the thread that serves its
    // connection; both live for the call, the server records for the generation.
    unsafe {
        let c = (*r).connection;
        let s = (*r).server;
        if !c.is_null() && !s.is_null() {
            let chosen = if (*s).keep_alive_timeout_set() != 0 {
                s
            } else {
                (*c).base_server
            };
            record(c, chosen);
        }
    }
    sys::OK as c_int
}

/// protocol_switch: a switch on the connection itself (no request: ALPN's h2) is made on
/// the server `s` the handshake chose, which the connection keeps (event's
/// `event_protocol_switch`). Declines, so the protocol's own hook runs.
unsafe extern "C" fn protocol_switch(
    c: *mut sys::conn_rec,
    r: *mut sys::request_rec,
    s: *mut sys::server_rec,
    _protocol: *const c_char,
) -> c_int {
    let _place = crate::ffi::panic::enter("protocol_switch hook (the connection's vhost)");
    if r.is_null() && !s.is_null() && !c.is_null() {
        // SAFETY: httpd passes the connection being switched, on its thread, and a server
        // record of this generation.
        unsafe { record(c, s) };
    }
    sys::DECLINED
}

/// Registers the two hooks (from register_hooks).
pub fn register_hooks() {
    // SAFETY: called from register_hooks; the functions live in this DSO (never unmapped).
    unsafe {
        sys::ap_hook_post_read_request(
            Some(post_read_request),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_MIDDLE as c_int,
        );
        sys::ap_hook_protocol_switch(
            Some(protocol_switch),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_REALLY_FIRST,
        );
    }
}
