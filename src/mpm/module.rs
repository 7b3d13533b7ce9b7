//! The exported module struct `mpm_rworker_module`, hook registration, and the hooks
//! httpd calls in the configuration phase: pre_config, check_config, open_logs,
//! mpm_query and mpm_get_name (worker.c `worker_hooks` and friends).

use std::os::raw::{c_char, c_int};
use std::ptr;

use crate::apr::log::level;
use crate::mpm::config::{self, settings, PhaseCell};
use crate::mpm::{parent, retained};
use crate::sys;

/// The name httpd prints for this MPM (`apache2 -V`, mod_status `ServerMPM`).
pub const MPM_NAME: &std::ffi::CStr = c"rworker";

/// Per-generation listening state, rebuilt by `open_logs` on every config pass.
pub struct Generation {
    /// The generation's config pool (`pconf`).
    pub pconf: *mut sys::apr_pool_t,
    /// `ap_duplicate_listeners` buckets: `num_buckets` linked lists of listeners.
    pub listen_buckets: *mut *mut sys::ap_listen_rec,
    /// Number of listener buckets (ListenCoresBucketsRatio), >= 1 once open_logs ran.
    pub num_buckets: c_int,
    /// Pipe of death per bucket (`num_buckets` entries, in pconf).
    pub pods: *mut *mut sys::ap_pod_t,
    /// Accept mutex per bucket (null entries when a bucket has a single listener,
    /// which Linux accepts unserialised: SINGLE_LISTEN_UNSERIALIZED_ACCEPT).
    pub accept_mutexes: *mut *mut sys::apr_proc_mutex_t,
    /// Whether `open_logs` created accept mutexes.
    pub use_accept_mutex: bool,
}

static GENERATION: PhaseCell<Generation> = PhaseCell::new(Generation {
    pconf: ptr::null_mut(),
    listen_buckets: ptr::null_mut(),
    num_buckets: 0,
    pods: ptr::null_mut(),
    accept_mutexes: ptr::null_mut(),
    use_accept_mutex: false,
});

/// The current generation's listening state.
pub fn generation() -> &'static Generation {
    GENERATION.get()
}

/// A NUL-terminated list of module names for hook ordering.
#[repr(transparent)]
struct HookNames<const N: usize>([*const c_char; N]);
// SAFETY: the pointers are to 'static C string literals and are never written.
unsafe impl<const N: usize> Sync for HookNames<N> {}
static CORE_ONLY: HookNames<2> = HookNames([c"core.c".as_ptr(), ptr::null()]);

/// httpd's entry point into the module: the struct it finds with `LoadModule
/// mpm_rworker_module`. httpd writes into it (module_index, next, dynamic_load_handle),
/// hence `static mut`; the version fields are checked by `ap_add_module`.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static mut mpm_rworker_module: sys::module = sys::module {
    version: sys::MODULE_MAGIC_NUMBER_MAJOR as c_int,
    minor_version: sys::MODULE_MAGIC_NUMBER_MINOR as c_int,
    module_index: -1,
    name: c"rworker.c".as_ptr(),
    dynamic_load_handle: ptr::null_mut(),
    next: ptr::null_mut(),
    magic: sys::MODULE_MAGIC_COOKIE as _,
    rewrite_args: None,
    create_dir_config: None,
    merge_dir_config: None,
    create_server_config: None,
    merge_server_config: None,
    // The shim's table: an immutable C array (taking its address needs no unsafe).
    cmds: ptr::addr_of!(sys::rworker_shim_cmds) as *const sys::command_rec,
    register_hooks: Some(register_hooks),
    flags: 0,
};

unsafe extern "C" fn register_hooks(_p: *mut sys::apr_pool_t) {
    // SAFETY: called once per load by ap_add_module, single-threaded; the hook
    // functions live in this DSO, which is never unmapped (-z nodelete).
    unsafe {
        config::settings_mut().one_process = false;
        sys::ap_hook_open_logs(
            Some(open_logs),
            ptr::null(),
            CORE_ONLY.0.as_ptr(),
            sys::APR_HOOK_REALLY_FIRST,
        );
        sys::ap_hook_pre_config(
            Some(pre_config),
            CORE_ONLY.0.as_ptr(),
            ptr::null(),
            sys::APR_HOOK_REALLY_FIRST,
        );
        sys::ap_hook_check_config(
            Some(check_config),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_MIDDLE as c_int,
        );
        sys::ap_hook_mpm(
            Some(parent::run),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_MIDDLE as c_int,
        );
        sys::ap_hook_mpm_query(
            Some(query),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_MIDDLE as c_int,
        );
        sys::ap_hook_mpm_get_name(
            Some(get_name),
            ptr::null(),
            ptr::null(),
            sys::APR_HOOK_MIDDLE as c_int,
        );
    }
}

fn config_define(name: &std::ffi::CStr) -> bool {
    // SAFETY: reads httpd's -D list with a valid C string.
    unsafe { sys::ap_exists_config_define(name.as_ptr()) != 0 }
}

unsafe extern "C" fn pre_config(
    pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    _ptemp: *mut sys::apr_pool_t,
) -> c_int {
    let debug = config_define(c"DEBUG");
    let one_process = debug || config_define(c"ONE_PROCESS");
    let foreground = debug || config_define(c"FOREGROUND");
    let no_detach = config_define(c"NO_DETACH");

    // SAFETY: configuration phase, single-threaded; retained data lives in ap_pglobal.
    unsafe {
        let r = retained::get_or_create();
        let mpm = r.mpm();
        mpm.mpm_state = sys::AP_MPMQ_STARTING as c_int;
        let rv = sys::ap_mutex_register(
            pconf,
            c"mpm-accept".as_ptr(),
            ptr::null(),
            sys::apr_lockmech_e_APR_LOCK_DEFAULT,
            0,
        );
        if rv != 0 {
            crate::mpm_log!(
                level::CRIT | level::STARTUP,
                rv,
                "RW00001: could not register the mpm-accept mutex"
            );
            return sys::DONE;
        }
        // A different MPM ran before us (MPM switched across restart): nothing to keep.
        if mpm.baton != r as *mut _ as *mut std::ffi::c_void {
            mpm.was_graceful = 0;
            mpm.baton = r as *mut _ as *mut std::ffi::c_void;
        }
        mpm.module_loads += 1;

        // The second load of a normal start is where a daemon detaches.
        if mpm.module_loads == 2 && !one_process && !foreground {
            sys::ap_fatal_signal_setup(sys::ap_server_conf, pconf);
            let how = if no_detach {
                sys::APR_PROC_DETACH_FOREGROUND
            } else {
                sys::APR_PROC_DETACH_DAEMONIZE
            };
            let rv = sys::apr_proc_detach(how as c_int);
            if rv != 0 {
                crate::mpm_log!(level::CRIT, rv, "AH00299: apr_proc_detach failed");
                return 500; // HTTP_INTERNAL_SERVER_ERROR, as the stock MPM returns
            }
        }
        sys::ap_listen_pre_config();
        config::reset_defaults(one_process, foreground, no_detach);
        sys::ap_extended_status = 0;
    }
    sys::OK as c_int
}

unsafe extern "C" fn check_config(
    _pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    _ptemp: *mut sys::apr_pool_t,
    _s: *mut sys::server_rec,
) -> c_int {
    // SAFETY: configuration phase; pre_config created the retained data.
    unsafe {
        let r = retained::get_or_create();
        let startup = r.mpm().module_loads == 1;
        config::check_config(r, startup)
    }
}

unsafe extern "C" fn open_logs(
    pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    _ptemp: *mut sys::apr_pool_t,
    s: *mut sys::server_rec,
) -> c_int {
    // SAFETY: configuration phase, single-threaded; pointers come from httpd.
    unsafe {
        let r = retained::get_or_create();
        let mpm = r.mpm();
        let startup = if mpm.module_loads == 1 {
            level::STARTUP
        } else {
            0
        };
        let g = GENERATION.get_mut();
        *g = Generation {
            pconf,
            listen_buckets: ptr::null_mut(),
            num_buckets: 0,
            pods: ptr::null_mut(),
            accept_mutexes: ptr::null_mut(),
            use_accept_mutex: false,
        };

        let nlisteners = sys::ap_setup_listeners(s);
        if nlisteners < 1 {
            crate::mpm_log!(
                level::ALERT | startup,
                0,
                "AH00308: no listening sockets available, shutting down"
            );
            return sys::DONE;
        }

        // Keep the bucket count across a graceful restart (children of the old
        // generation still share the old layout); recompute it otherwise.
        let mut num_buckets: c_int = if settings().one_process {
            1
        } else if mpm.was_graceful != 0 {
            mpm.num_buckets
        } else {
            0
        };
        let rv = sys::ap_duplicate_listeners(pconf, s, &mut g.listen_buckets, &mut num_buckets);
        if rv != 0 {
            crate::mpm_log!(
                level::CRIT | startup,
                rv,
                "AH03264: could not duplicate listeners"
            );
            return sys::DONE;
        }
        g.num_buckets = num_buckets;
        g.pods = sys::apr_palloc(
            pconf,
            (std::mem::size_of::<*mut sys::ap_pod_t>() * num_buckets as usize) as _,
        ) as _;
        g.accept_mutexes = sys::apr_palloc(
            pconf,
            (std::mem::size_of::<*mut sys::apr_proc_mutex_t>() * num_buckets as usize) as _,
        ) as _;
        // One listener per bucket may be accepted without a lock on Linux.
        g.use_accept_mutex = !(*sys::ap_listeners).next.is_null();
        for b in 0..num_buckets as usize {
            let pod = g.pods.add(b);
            let rv = sys::ap_mpm_podx_open(pconf, pod);
            if rv != 0 {
                crate::mpm_log!(
                    level::CRIT | startup,
                    rv,
                    "AH03265: could not open pipe-of-death"
                );
                return sys::DONE;
            }
            *g.accept_mutexes.add(b) = ptr::null_mut();
            if g.use_accept_mutex {
                let id = std::ffi::CString::new(b.to_string()).unwrap_or_default();
                let id = sys::apr_pstrdup(pconf, id.as_ptr());
                let rv = sys::ap_proc_mutex_create(
                    g.accept_mutexes.add(b),
                    ptr::null_mut(),
                    c"mpm-accept".as_ptr(),
                    id,
                    s,
                    pconf,
                    0,
                );
                if rv != 0 {
                    crate::mpm_log!(
                        level::CRIT | startup,
                        rv,
                        "AH03266: could not create the accept mutex"
                    );
                    return sys::DONE;
                }
            }
        }
        if mpm.max_buckets < num_buckets {
            mpm.max_buckets = num_buckets;
        }
        mpm.num_buckets = num_buckets;
        r.ensure_spawn_rates(mpm.max_buckets.max(num_buckets));
    }
    sys::OK as c_int
}

unsafe extern "C" fn query(
    query_code: c_int,
    result: *mut c_int,
    rv: *mut sys::apr_status_t,
) -> c_int {
    let s = settings();
    let r = retained::get();
    // SAFETY: httpd passes valid out-pointers.
    unsafe {
        *rv = sys::APR_SUCCESS as _;
        *result = match query_code as u32 {
            sys::AP_MPMQ_MAX_DAEMON_USED => r.map_or(0, |r| r.max_daemons_limit.max(0)),
            sys::AP_MPMQ_IS_THREADED => sys::AP_MPMQ_STATIC as c_int,
            sys::AP_MPMQ_IS_FORKED => sys::AP_MPMQ_DYNAMIC as c_int,
            sys::AP_MPMQ_HARD_LIMIT_DAEMONS => s.server_limit,
            sys::AP_MPMQ_HARD_LIMIT_THREADS => s.thread_limit,
            sys::AP_MPMQ_MAX_THREADS => s.threads_per_child,
            sys::AP_MPMQ_MIN_SPARE_DAEMONS | sys::AP_MPMQ_MAX_SPARE_DAEMONS => 0,
            sys::AP_MPMQ_MIN_SPARE_THREADS => s.min_spare_threads,
            sys::AP_MPMQ_MAX_SPARE_THREADS => s.max_spare_threads,
            sys::AP_MPMQ_MAX_REQUESTS_DAEMON => sys::ap_max_requests_per_child,
            sys::AP_MPMQ_MAX_DAEMONS => s.daemons_limit,
            sys::AP_MPMQ_MPM_STATE => {
                r.map_or(sys::AP_MPMQ_STARTING as c_int, |r| r.mpm().mpm_state)
            }
            sys::AP_MPMQ_GENERATION => r.map_or(0, |r| r.mpm().my_generation),
            _ => {
                *rv = sys::APR_ENOTIMPL as _;
                0
            }
        };
    }
    sys::OK as c_int
}

unsafe extern "C" fn get_name() -> *const c_char {
    MPM_NAME.as_ptr()
}
