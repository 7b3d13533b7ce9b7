//! Memory that survives restarts: one block allocated with `ap_retained_data_create` in
//! httpd's global pool (the DSO is unloaded and reloaded on every configuration pass,
//! so Rust statics cannot carry it), plus unixd's shared MPM state. Plain old data only.
//!
//! Several threads of one process can reach the block: the parent's signal handlers
//! write unixd's flags, and in a child the worker threads read `mpm_state` (through
//! `ap_mpm_query`, between keep-alive requests) while the main thread writes it. So the
//! block is never borrowed: [`Retained`] reads and writes one `int` at a time, as an
//! atomic access through a raw pointer. Relaxed ordering throughout: each field is a
//! value in its own right; no field publishes other memory.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr::{self, addr_of_mut, NonNull};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use crate::ffi::epoll::WakeFd;
use crate::ffi::httpd::SingleThreaded;
use crate::ffi::shm::SharedRows;
use crate::sys;

/// Key under which httpd keeps rworker's block.
const KEY: &std::ffi::CStr = c"mpm_rworker_module";

/// rworker's block (worker.c's `worker_retained_data`), zero-filled by httpd on the
/// first start. Field meanings are on [`Retained`]'s accessors.
#[repr(C)]
struct Block {
    mpm: *mut sys::ap_unixd_mpm_retained_data,
    first_server_limit: c_int,
    first_thread_limit: c_int,
    sick_child_detected: c_int,
    healthy_child_seen: c_int,
    maxclients_reported: c_int,
    near_maxclients_reported: c_int,
    max_daemons_limit: c_int,
    idle_spawn_rate: *mut c_int,
    idle_spawn_rate_len: c_int,
    hold_off_on_exponential_spawning: c_int,
    signal_deaths_in_a_row: c_int,
    scoreboard_full_cycles: c_int,
    children_at_restart: c_int,
    old_pods: *mut c_int,
    old_pods_len: c_int,
    old_pods_cap: c_int,
    shared_rows: *mut c_void,
    shared_rows_len: c_int,
    file_limit_reported: c_int,
    relays: *mut c_int,
    relays_len: c_int,
    parent_bell_plus_one: c_int,
}

/// Address of the block once looked up (see [`Retained::lookup`]).
static CACHED: AtomicPtr<Block> = AtomicPtr::new(ptr::null_mut());

/// A handle to the retained block. It lives in `ap_pglobal` until the process exits and
/// nothing can free it, so the handle is `Copy`.
#[derive(Clone, Copy, Debug)]
pub struct Retained(NonNull<Block>);

// SAFETY: every access through the handle is an atomic access to one int (or a
// write-once pointer), so sharing it between threads is sound.
unsafe impl Send for Retained {}
// SAFETY: as for Send.
unsafe impl Sync for Retained {}

/// One `int` of the block (or of unixd's part) as an atomic.
///
/// # Safety
/// `p` points to a live, aligned int that is only accessed atomically (or by a signal
/// handler of the same thread) while the returned reference is used.
unsafe fn int<'a>(p: *mut c_int) -> &'a AtomicI32 {
    // SAFETY: forwarded to the caller.
    unsafe { AtomicI32::from_ptr(p) }
}

macro_rules! own_int {
    ($(#[$doc:meta])* $get:ident, $set:ident) => {
        $(#[$doc])*
        pub fn $get(self) -> c_int {
            // SAFETY: the block is live and this field is only accessed atomically.
            unsafe { int(addr_of_mut!((*self.0.as_ptr()).$get)) }.load(Ordering::Relaxed)
        }
        #[doc = concat!("Sets [`Retained::", stringify!($get), "`].")]
        pub fn $set(self, v: c_int) {
            // SAFETY: as for the getter.
            unsafe { int(addr_of_mut!((*self.0.as_ptr()).$get)) }.store(v, Ordering::Relaxed)
        }
    };
}

macro_rules! unixd_int {
    ($(#[$doc:meta])* $get:ident, $set:ident) => {
        $(#[$doc])*
        pub fn $get(self) -> c_int {
            // SAFETY: unixd's block is live until exit (set at creation); the field is
            // written by unixd's signal handlers and through this handle only.
            unsafe { int(addr_of_mut!((*self.unixd()).$get)) }.load(Ordering::Relaxed)
        }
        #[doc = concat!("Sets [`Retained::", stringify!($get), "`].")]
        pub fn $set(self, v: c_int) {
            // SAFETY: as for the getter.
            unsafe { int(addr_of_mut!((*self.unixd()).$get)) }.store(v, Ordering::Relaxed)
        }
    };
}

impl Retained {
    /// The block, created (zero-filled) on the first call of this httpd process.
    pub fn get_or_create(_: SingleThreaded) -> Retained {
        // SAFETY: ap_retained_data_get/create return memory in ap_pglobal that lives
        // until the process exits; create zero-fills it; we are single-threaded (token).
        unsafe {
            let mut p = sys::ap_retained_data_get(KEY.as_ptr()) as *mut Block;
            if p.is_null() {
                p = sys::ap_retained_data_create(KEY.as_ptr(), std::mem::size_of::<Block>() as _)
                    as *mut Block;
                (*p).mpm = sys::ap_unixd_mpm_get_retained_data();
                (*p).max_daemons_limit = -1;
            }
            Retained(NonNull::new(p).expect("ap_retained_data_create aborts on failure"))
        }
    }

    /// The block if pre_config already created it (`ap_mpm_query` may run before, e.g.
    /// for `apache2 -V`). `ap_mpm_query(MPM_STATE)` runs between every two keep-alive
    /// requests, so the address is remembered after the first lookup; the block lives
    /// until exit, so it never dangles, and a fresh mapping of the DSO looks it up again.
    pub fn lookup() -> Option<Retained> {
        // Acquire/Release: a thread that finds the cached address also sees the block's
        // creation (mpm pointer set), which happened before the Release store.
        let mut p = CACHED.load(Ordering::Acquire);
        if p.is_null() {
            // SAFETY: lookup only.
            p = unsafe { sys::ap_retained_data_get(KEY.as_ptr()) } as *mut Block;
            // SAFETY: a non-null p is the live block; its mpm pointer is written once, at
            // creation, before any thread exists.
            if p.is_null() || unsafe { (*p).mpm.is_null() } {
                return None;
            }
            CACHED.store(p, Ordering::Release);
        }
        NonNull::new(p).map(Retained)
    }

    fn unixd(self) -> *mut sys::ap_unixd_mpm_retained_data {
        // SAFETY: the pointer is written once, at creation, before any thread exists.
        unsafe { (*self.0.as_ptr()).mpm }
    }

    unixd_int!(
        /// `AP_MPMQ_STARTING`, `RUNNING` or `STOPPING`, for `ap_mpm_query(MPM_STATE)`.
        mpm_state, set_mpm_state
    );
    unixd_int!(
        /// `-k stop` / `graceful-stop` arrived (written by unixd's signal handler).
        shutdown_pending, set_shutdown_pending
    );
    unixd_int!(
        /// `-k restart` / `graceful` arrived (written by unixd's signal handler).
        restart_pending, set_restart_pending
    );
    unixd_int!(
        /// The pending stop or restart is the immediate kind.
        is_ungraceful, set_is_ungraceful
    );
    unixd_int!(
        /// The generation the parent runs now.
        my_generation, set_my_generation
    );
    unixd_int!(
        /// Times the MPM was loaded in this process (2 on the pass where a daemon detaches).
        module_loads, set_module_loads
    );
    unixd_int!(
        /// The current generation began with a graceful restart.
        was_graceful, set_was_graceful
    );
    unixd_int!(
        /// Listener buckets of the current generation.
        num_buckets, set_num_buckets
    );
    unixd_int!(
        /// Most listener buckets of any generation so far.
        max_buckets, set_max_buckets
    );

    /// Whether unixd's block was last owned by this MPM (false when another MPM ran
    /// before a restart); makes it ours.
    pub fn claim_unixd_block(self) -> bool {
        let me = self.0.as_ptr() as *mut c_void;
        // SAFETY: unixd's block is live; `baton` is only touched by the single-threaded
        // configuration phase (the caller is pre_config).
        unsafe {
            let baton = addr_of_mut!((*self.unixd()).baton);
            let ours = ptr::read_volatile(baton) == me;
            ptr::write_volatile(baton, me);
            ours
        }
    }

    own_int!(
        /// ServerLimit at first start (the scoreboard is sized once); 0 until set.
        first_server_limit, set_first_server_limit
    );
    own_int!(
        /// ThreadLimit at first start; 0 until set.
        first_thread_limit, set_first_thread_limit
    );
    own_int!(
        /// A child exited with APEXIT_CHILDSICK since the last healthy sign.
        sick_child_detected, set_sick_child_detected
    );
    own_int!(
        /// A maintenance census of this generation saw an active thread.
        healthy_child_seen, set_healthy_child_seen
    );
    own_int!(
        /// AH00286 (MaxRequestWorkers reached) was logged; reset when load drops.
        maxclients_reported, set_maxclients_reported
    );
    own_int!(
        /// AH00287 (within MinSpareThreads of MaxRequestWorkers) was logged.
        near_maxclients_reported, set_near_maxclients_reported
    );
    own_int!(
        /// Highest scoreboard slot in use + 1 (answer to AP_MPMQ_MAX_DAEMON_USED); the
        /// core scans this many slots when reaping, so it must never be too small.
        max_daemons_limit, set_max_daemons_limit
    );
    own_int!(
        /// After a graceful restart, maintenance cycles during which the spawn rate does
        /// not grow (old children are still draining).
        hold_off_on_exponential_spawning, set_hold_off_on_exponential_spawning
    );
    own_int!(
        /// Children killed by a signal in a row, each respawned at once (at most 3).
        signal_deaths_in_a_row, set_signal_deaths_in_a_row
    );
    own_int!(
        /// Consecutive maintenance cycles in which a fork was wanted but every slot was
        /// held (mostly by exiting children); AH00288 is an error only when this persists.
        scoreboard_full_cycles, set_scoreboard_full_cycles
    );
    own_int!(
        /// RW00041 (children at their open-file limit) was logged; reset once none is.
        file_limit_reported, set_file_limit_reported
    );
    own_int!(
        /// Children of the generation that a graceful restart replaced that were still
        /// accepting then: the size the new generation takes over with.
        children_at_restart, set_children_at_restart
    );

    /// Keeps the write ends of the replaced generation's pipes of death across the
    /// configuration pass of a graceful restart (see `crate::mpm::parent`); the array lives
    /// in ap_pglobal and is reused.
    pub fn keep_old_pods(self, _: SingleThreaded, fds: &[c_int]) {
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the token excludes concurrent access. ap_pglobal
        // lives until exit; a grown array is written before it is published, and the old
        // one (also in ap_pglobal) is abandoned.
        unsafe {
            if (*b).old_pods.is_null() || ((*b).old_pods_cap as usize) < fds.len() {
                let bytes = std::mem::size_of_val(fds);
                (*b).old_pods = sys::apr_palloc(sys::ap_pglobal, bytes as _) as *mut c_int;
                (*b).old_pods_cap = fds.len() as c_int;
            }
            for (i, &fd) in fds.iter().enumerate() {
                ptr::write((*b).old_pods.add(i), fd);
            }
            (*b).old_pods_len = fds.len() as c_int;
        }
    }

    /// Takes the write ends [`Retained::keep_old_pods`] kept (empty when none).
    pub fn take_old_pods(self, _: SingleThreaded) -> Vec<c_int> {
        let b = self.0.as_ptr();
        // SAFETY: as in keep_old_pods; old_pods has old_pods_len entries.
        unsafe {
            let n = (*b).old_pods_len.max(0) as usize;
            (*b).old_pods_len = 0;
            (0..n).map(|i| ptr::read((*b).old_pods.add(i))).collect()
        }
    }

    /// Makes sure buckets `0..buckets` each have a relay (`crate::mpm::parking`'s: an eventfd
    /// made once, inherited by every child of every generation); one that cannot be made
    /// now is tried again on the next pass. Errors: the errno of a failure.
    pub fn ensure_relays(self, _: SingleThreaded, buckets: c_int) -> Result<(), i32> {
        let b = self.0.as_ptr();
        let n = buckets.max(0) as usize;
        let mut result = Ok(());
        // SAFETY: the block is live; the token excludes concurrent access (children read
        // the array only after fork). ap_pglobal lives until exit; a grown array is
        // written before it is published, and the old one (also in ap_pglobal) is
        // abandoned.
        unsafe {
            let len = (*b).relays_len.max(0) as usize;
            if (*b).relays.is_null() || len < n {
                let bytes = std::mem::size_of::<c_int>() * n;
                let fresh = sys::apr_palloc(sys::ap_pglobal, bytes as _) as *mut c_int;
                for i in 0..n {
                    let fd = if i < len { *(*b).relays.add(i) } else { -1 };
                    ptr::write(fresh.add(i), fd);
                }
                (*b).relays = fresh;
                (*b).relays_len = n as c_int;
            }
            for i in 0..n {
                let slot = (*b).relays.add(i);
                if *slot < 0 {
                    match WakeFd::new() {
                        Ok(w) => *slot = w.into_raw(),
                        Err(e) => result = Err(e),
                    }
                }
            }
        }
        result
    }

    /// Bucket `bucket`'s relay, if [`Retained::ensure_relays`] made one: an open eventfd.
    pub fn relay(self, bucket: usize) -> Option<c_int> {
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the array changes only in ensure_relays, in the
        // parent's single-threaded phase, never while a child's threads run.
        unsafe {
            if (*b).relays.is_null() || bucket >= (*b).relays_len.max(0) as usize {
                return None;
            }
            let fd = *(*b).relays.add(bucket);
            (fd >= 0).then_some(fd)
        }
    }

    /// Makes sure the parent's bell exists: an eventfd made once, inherited by every
    /// child of every generation, which a child rings when it begins to retire on its own
    /// (`crate::mpm::parent`'s wait watches it). Errors: the errno of a failure (tried
    /// again on the next pass).
    pub fn ensure_parent_bell(self, _: SingleThreaded) -> Result<(), i32> {
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the token excludes concurrent access (children read
        // the field only after fork). Stored plus one: the block starts zero-filled, and
        // 0 is a descriptor number.
        unsafe {
            if (*b).parent_bell_plus_one <= 0 {
                (*b).parent_bell_plus_one = WakeFd::new()?.into_raw() + 1;
            }
        }
        Ok(())
    }

    /// The parent's bell, if [`Retained::ensure_parent_bell`] made it: an open eventfd.
    pub fn parent_bell(self) -> Option<c_int> {
        // SAFETY: the block is live; the field is written only in ensure_parent_bell, in
        // the parent's single-threaded phase, never while a child's threads run.
        let fd = unsafe { (*self.0.as_ptr()).parent_bell_plus_one } - 1;
        (fd >= 0).then_some(fd)
    }

    /// The status counters shared by every child, once mapped.
    pub fn shared_rows(self) -> Option<SharedRows> {
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the two fields are written once, by set_shared_rows in
        // the parent's single-threaded phase, before any child or thread that reads them
        // exists; the parts come from SharedRows::into_raw.
        unsafe { SharedRows::from_raw((*b).shared_rows, (*b).shared_rows_len.max(0) as usize) }
    }

    /// Keeps `rows` for the rest of the process (restarts included).
    pub fn set_shared_rows(self, _: SingleThreaded, rows: SharedRows) {
        let (p, len) = rows.into_raw();
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the token excludes concurrent access.
        unsafe {
            (*b).shared_rows = p;
            (*b).shared_rows_len = len as c_int;
        }
    }

    /// Makes room for `buckets` spawn rates (each starting at 1), growing the array in
    /// ap_pglobal when the bucket count rises across restarts.
    pub fn ensure_spawn_rates(self, _: SingleThreaded, buckets: c_int) {
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the token excludes concurrent access. ap_pglobal
        // lives until exit; the new array is fully written before it is published, and the
        // old one (also in ap_pglobal) is simply abandoned.
        unsafe {
            let (old, old_len) = ((*b).idle_spawn_rate, (*b).idle_spawn_rate_len);
            if old_len >= buckets && !old.is_null() {
                return;
            }
            let bytes = std::mem::size_of::<c_int>() * buckets as usize;
            let fresh = sys::apr_palloc(sys::ap_pglobal, bytes as _) as *mut c_int;
            for i in 0..buckets.max(0) as usize {
                let prev = if (i as c_int) < old_len && !old.is_null() {
                    *old.add(i)
                } else {
                    1
                };
                ptr::write(fresh.add(i), prev.max(1));
            }
            (*b).idle_spawn_rate = fresh;
            (*b).idle_spawn_rate_len = buckets;
        }
    }

    fn spawn_rate_ptr(self, bucket: usize) -> *mut c_int {
        let b = self.0.as_ptr();
        // SAFETY: the block is live; the array pointer and length change only in
        // ensure_spawn_rates (parent's single thread, before maintenance runs).
        unsafe {
            let len = (*b).idle_spawn_rate_len.max(0) as usize;
            assert!(
                bucket < len,
                "rworker: spawn rate of bucket {bucket} of {len}"
            );
            (*b).idle_spawn_rate.add(bucket)
        }
    }

    /// Children to fork for `bucket` in the next maintenance cycle (doubles while idle
    /// threads stay short, up to the spawn-rate cap).
    pub fn spawn_rate(self, bucket: usize) -> c_int {
        // SAFETY: an in-bounds entry (checked), only accessed atomically.
        unsafe { int(self.spawn_rate_ptr(bucket)) }.load(Ordering::Relaxed)
    }

    /// Sets [`Retained::spawn_rate`].
    pub fn set_spawn_rate(self, bucket: usize, v: c_int) {
        // SAFETY: as for spawn_rate.
        unsafe { int(self.spawn_rate_ptr(bucket)) }.store(v, Ordering::Relaxed)
    }
}
