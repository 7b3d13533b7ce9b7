//! The generation's listening side as the MPM keeps it: listen buckets, a pipe of death
//! and an accept mutex per bucket (`crate::ffi::listen::ListenBuckets`), rebuilt by
//! open_logs on every configuration pass and inherited by the children.

use std::os::raw::c_int;

use crate::ffi::httpd::{ServerRec, SingleThreaded};
use crate::ffi::listen::{self, ListenBuckets, OpenError};
use crate::ffi::log::level;
use crate::ffi::phase::PhaseCell;
use crate::ffi::pool::ConfigPool;
use crate::ffi::retained::Retained;
use crate::mpm::settings;

static BUCKETS: PhaseCell<Option<ListenBuckets>> = PhaseCell::new(None);

/// The current generation's buckets. Open_logs runs before the parent's `mpm` hook and
/// stops the server if it cannot build them, so the MPM never runs without them.
pub fn buckets() -> ListenBuckets {
    BUCKETS
        .get()
        .expect("rworker: listen buckets are built by open_logs before the MPM runs")
}

/// open_logs: sets up the listeners and this generation's buckets, pipes of death and
/// accept mutexes. `startup` (the first pass) sends errors to the console. Errors are
/// logged here; false means the server cannot start.
pub fn open(
    token: SingleThreaded,
    pconf: ConfigPool,
    s: ServerRec,
    r: Retained,
    startup: c_int,
) -> bool {
    BUCKETS.set(token, None);
    if listen::setup_listeners(token, s) < 1 {
        crate::mpm_log!(
            level::ALERT | startup,
            0,
            "AH00308: no listening sockets available, shutting down"
        );
        return false;
    }
    // Keep the bucket count across a graceful restart (children of the old generation
    // still share the old layout); let httpd compute it otherwise.
    let keep = if settings::get().one_process {
        1
    } else if r.was_graceful() != 0 {
        r.num_buckets()
    } else {
        0
    };
    let b = match ListenBuckets::open(token, pconf, s, keep) {
        Ok(b) => b,
        Err(e) => {
            let (id, what, rv) = match e {
                OpenError::Duplicate(rv) => ("AH03264", "could not duplicate listeners", rv),
                OpenError::Pod(rv) => ("AH03265", "could not open pipe-of-death", rv),
                OpenError::AcceptMutex(rv) => ("AH03266", "could not create the accept mutex", rv),
            };
            crate::mpm_log!(level::CRIT | startup, rv, "{id}: {what}");
            return false;
        }
    };
    let nb = b.num_buckets() as c_int;
    r.set_max_buckets(r.max_buckets().max(nb));
    r.set_num_buckets(nb);
    r.ensure_spawn_rates(token, r.max_buckets());
    if settings::get().keep_alive == settings::KeepAliveMode::Park {
        if let Err(e) = r.ensure_relays(token, r.max_buckets()) {
            crate::mpm_log!(
                level::WARNING | startup,
                e,
                "RW00044: could not make a bucket's relay (an eventfd): a connection whose wake a stopping child took may wait for the next one"
            );
        }
    }
    BUCKETS.set(token, Some(b));
    true
}
