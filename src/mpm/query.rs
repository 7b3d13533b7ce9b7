//! Answers to `ap_mpm_query`: the MPM's limits, its state and its generation, as the
//! stock worker answers them. httpd asks MPM_STATE between every two keep-alive
//! requests, on worker threads, so an answer only copies values.
//!
//! One answer differs from the stock worker's, on purpose. The core's keep-alive loop
//! (`RWorkerKeepAlive thread`) asks MPM_STATE twice per request: when it writes the
//! response headers (STOPPING: it says `Connection: close`) and after the response, just
//! after marking its thread `K` (STOPPING: it closes the connection). When a graceful
//! stop lands between the two, the stock worker closes a connection whose response has
//! just promised keep-alive, under a client that may be sending its next request (wrk
//! counts read errors at every graceful restart under load). Asked from the `K` state, a
//! worker of this MPM answers RUNNING instead: the connection waits for one more request
//! (up to KeepAliveTimeout), whose response then says `Connection: close`.

use std::cell::Cell;
use std::os::raw::c_int;

use crate::ffi::httpd;
use crate::ffi::retained::Retained;
use crate::ffi::scoreboard;
use crate::mpm::settings::{self, KeepAliveMode};
use crate::sys;

thread_local! {
    /// The scoreboard entry (slot, thread) of a worker that runs the core's keep-alive
    /// loop; None on every other thread.
    static KEEP_ALIVE_LOOP: Cell<Option<(c_int, c_int)>> = const { Cell::new(None) };
}

/// Called by a worker thread that serves whole connections through the core's
/// keep-alive loop, with its scoreboard entry (see the module doc).
pub fn runs_keep_alive_loop(slot: c_int, thread: c_int) {
    KEEP_ALIVE_LOOP.with(|c| c.set(Some((slot, thread))));
}

/// The MPM state as this thread should see it (see the module doc).
fn state(r: Retained) -> c_int {
    let state = r.mpm_state();
    if state != sys::AP_MPMQ_STOPPING as c_int {
        return state;
    }
    let promised_keep_alive = KEEP_ALIVE_LOOP.with(Cell::get).is_some_and(|(slot, t)| {
        scoreboard::thread_status(slot, t) == sys::SERVER_BUSY_KEEPALIVE as c_int
    });
    if promised_keep_alive {
        sys::AP_MPMQ_RUNNING as c_int
    } else {
        state
    }
}

/// The answer to query `code`, or `None` for a query this MPM does not implement.
pub fn answer(code: c_int) -> Option<c_int> {
    let s = settings::get();
    let r = Retained::lookup();
    Some(match code as u32 {
        sys::AP_MPMQ_MAX_DAEMON_USED => r.map_or(0, |r| r.max_daemons_limit().max(0)),
        sys::AP_MPMQ_IS_THREADED => sys::AP_MPMQ_STATIC as c_int,
        sys::AP_MPMQ_IS_FORKED => sys::AP_MPMQ_DYNAMIC as c_int,
        sys::AP_MPMQ_HARD_LIMIT_DAEMONS => s.server_limit,
        sys::AP_MPMQ_HARD_LIMIT_THREADS => s.thread_limit,
        sys::AP_MPMQ_MAX_THREADS => s.threads_per_child,
        sys::AP_MPMQ_MIN_SPARE_DAEMONS | sys::AP_MPMQ_MAX_SPARE_DAEMONS => 0,
        sys::AP_MPMQ_MIN_SPARE_THREADS => s.min_spare_threads,
        sys::AP_MPMQ_MAX_SPARE_THREADS => s.max_spare_threads,
        sys::AP_MPMQ_MAX_REQUESTS_DAEMON => httpd::max_connections_per_child(),
        sys::AP_MPMQ_MAX_DAEMONS => s.daemons_limit,
        sys::AP_MPMQ_MPM_STATE => r.map_or(sys::AP_MPMQ_STARTING as c_int, state),
        sys::AP_MPMQ_GENERATION => r.map_or(0, |r| r.my_generation()),
        // Parking makes the core hand a connection back between requests.
        sys::AP_MPMQ_IS_ASYNC => (s.keep_alive == KeepAliveMode::Park) as c_int,
        // Asked by mod_http2 from 2.4.63 on; older releases have no such query.
        #[cfg(httpd_mpmq_can_waitio)]
        sys::AP_MPMQ_CAN_WAITIO => (s.keep_alive == KeepAliveMode::Park) as c_int,
        _ => return None,
    })
}
