//! State that survives restarts: allocated once with `ap_retained_data_create` in
//! httpd's global pool (the DSO is unloaded and reloaded on every config pass, so Rust
//! statics cannot carry it). Plain old data only: no Rust heap objects, no vtables.

use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::sys;

/// Address of the retained block once known (see [`get`]).
static CACHED: AtomicPtr<Retained> = AtomicPtr::new(ptr::null_mut());

/// Key under which httpd keeps our retained block.
const KEY: &std::ffi::CStr = c"mpm_rworker_module";

/// rworker's retained data (worker.c's `worker_retained_data`), zero-initialised by
/// httpd on the first start.
#[repr(C)]
pub struct Retained {
    /// unixd's shared MPM state: mpm_state, shutdown/restart flags written by the
    /// parent's signal handlers, my_generation, module_loads, was_graceful, buckets.
    pub mpm: *mut sys::ap_unixd_mpm_retained_data,
    /// ServerLimit at first start (the scoreboard is sized once); 0 until set.
    pub first_server_limit: c_int,
    /// ThreadLimit at first start; 0 until set.
    pub first_thread_limit: c_int,
    /// A child exited with APEXIT_CHILDSICK since the last healthy sign.
    pub sick_child_detected: c_int,
    /// AH00286 (MaxRequestWorkers reached) was logged; reset when load drops.
    pub maxclients_reported: c_int,
    /// AH00287 (within MinSpareThreads of MaxRequestWorkers) was logged.
    pub near_maxclients_reported: c_int,
    /// Highest scoreboard slot in use + 1 (answer to AP_MPMQ_MAX_DAEMON_USED); the core
    /// scans this many slots when reaping, so it must never be too small.
    pub max_daemons_limit: c_int,
    /// Per listener bucket: children to fork in the next maintenance cycle (doubles
    /// while idle threads stay short, up to MAX_SPAWN_RATE / buckets). `idle_spawn_rate_len` entries.
    pub idle_spawn_rate: *mut c_int,
    /// Number of entries allocated at `idle_spawn_rate` (in ap_pglobal).
    pub idle_spawn_rate_len: c_int,
    /// After a graceful restart, maintenance cycles during which the spawn rate does
    /// not grow (old children are still draining).
    pub hold_off_on_exponential_spawning: c_int,
    /// Children killed by a signal in a row, each respawned at once (at most 3).
    pub signal_deaths_in_a_row: c_int,
    /// Consecutive maintenance cycles in which a fork was wanted but every slot was held
    /// (mostly by exiting children); AH00288 is logged only when this persists.
    pub scoreboard_full_cycles: c_int,
}

/// Returns the retained block, creating it on the first call of this httpd process.
///
/// # Safety
/// Configuration phase (single-threaded parent).
pub unsafe fn get_or_create() -> &'static mut Retained {
    // SAFETY: ap_retained_data_get/create return a pointer into ap_pglobal memory that
    // lives until the process exits; create zero-fills it.
    unsafe {
        let mut p = sys::ap_retained_data_get(KEY.as_ptr()) as *mut Retained;
        if p.is_null() {
            p = sys::ap_retained_data_create(KEY.as_ptr(), std::mem::size_of::<Retained>() as _)
                as *mut Retained;
            (*p).mpm = sys::ap_unixd_mpm_get_retained_data();
            (*p).max_daemons_limit = -1;
        }
        &mut *p
    }
}

/// The retained block if pre_config already created it (null-safe for `ap_mpm_query`,
/// which httpd may call before pre_config, e.g. for `apache2 -V`).
///
/// `ap_mpm_query(MPM_STATE)` runs between every two keep-alive requests, so the block's
/// address is remembered after the first lookup instead of hashing the key each time. The
/// block lives in ap_pglobal until exit, so the remembered address never dangles; a fresh
/// mapping of the DSO starts with null and looks it up again.
pub fn get() -> Option<&'static mut Retained> {
    let mut p = CACHED.load(Ordering::Acquire);
    if p.is_null() {
        // SAFETY: lookup only.
        p = unsafe { sys::ap_retained_data_get(KEY.as_ptr()) } as *mut Retained;
        CACHED.store(p, Ordering::Release);
    }
    // SAFETY: the block, if any, lives until exit.
    unsafe {
        if p.is_null() || (*p).mpm.is_null() {
            None
        } else {
            Some(&mut *p)
        }
    }
}

impl Retained {
    /// unixd's shared state (`ap_unixd_mpm_retained_data`).
    pub fn mpm(&self) -> &'static mut sys::ap_unixd_mpm_retained_data {
        // SAFETY: set at creation from ap_unixd_mpm_get_retained_data, which lives in
        // ap_pglobal for the life of the process.
        unsafe { &mut *self.mpm }
    }

    /// Makes room for `buckets` spawn-rate entries (each starting at 1), growing the
    /// array in ap_pglobal when the bucket count rises across restarts.
    pub fn ensure_spawn_rates(&mut self, buckets: c_int) {
        if self.idle_spawn_rate_len >= buckets && !self.idle_spawn_rate.is_null() {
            return;
        }
        // SAFETY: ap_pglobal lives until exit; the new array is fully initialised before
        // being published and the old one (also in ap_pglobal) is simply abandoned.
        unsafe {
            let bytes = std::mem::size_of::<c_int>() * buckets as usize;
            let fresh = sys::apr_palloc(sys::ap_pglobal, bytes as _) as *mut c_int;
            for i in 0..buckets as usize {
                let old =
                    if (i as c_int) < self.idle_spawn_rate_len && !self.idle_spawn_rate.is_null() {
                        *self.idle_spawn_rate.add(i)
                    } else {
                        1
                    };
                ptr::write(fresh.add(i), old.max(1));
            }
            self.idle_spawn_rate = fresh;
            self.idle_spawn_rate_len = buckets;
        }
    }

    /// The spawn rate of `bucket` (index < idle_spawn_rate_len).
    pub fn spawn_rate(&mut self, bucket: usize) -> &mut c_int {
        debug_assert!((bucket as c_int) < self.idle_spawn_rate_len);
        // SAFETY: ensure_spawn_rates sized the array for every bucket in use.
        unsafe { &mut *self.idle_spawn_rate.add(bucket) }
    }
}
