//! Answers to `ap_mpm_query`: the MPM's limits, its state and its generation, as the
//! stock worker answers them. httpd asks MPM_STATE between every two keep-alive
//! requests, on worker threads, so an answer only copies values.

use std::os::raw::c_int;

use crate::ffi::httpd;
use crate::ffi::retained::Retained;
use crate::mpm::settings::{self, KeepAliveMode};
use crate::sys;

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
        sys::AP_MPMQ_MPM_STATE => r.map_or(sys::AP_MPMQ_STARTING as c_int, |r| r.mpm_state()),
        sys::AP_MPMQ_GENERATION => r.map_or(0, |r| r.my_generation()),
        // Parking makes the core hand a connection back between requests.
        sys::AP_MPMQ_IS_ASYNC | sys::AP_MPMQ_CAN_WAITIO => {
            (s.keep_alive == KeepAliveMode::Park) as c_int
        }
        _ => return None,
    })
}
