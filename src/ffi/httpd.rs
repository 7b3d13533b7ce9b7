//! The server's hooks and globals that the MPM calls or reads: configuration defines,
//! detaching, the pidfile, the pre_mpm / child_init / drop_privileges / child_stopping /
//! child_status hooks, and the core's directives the MPM honours (MaxConnectionsPerChild,
//! MaxMemFree, ThreadStackSize, GracefulShutdownTimeout).
//!
//! Calls that httpd allows only where the MPM runs single-threaded take a
//! [`SingleThreaded`] token (`crate::ffi::phase`).

use std::ffi::CStr;
use std::fmt;
use std::os::raw::c_int;
use std::ptr;

pub use crate::ffi::phase::SingleThreaded;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::sys;

/// httpd's main server record of the running generation.
#[derive(Clone, Copy, Debug)]
pub struct ServerRec(std::ptr::NonNull<sys::server_rec>);

impl ServerRec {
    /// Wraps the server record httpd passed to a hook; `None` for null.
    ///
    /// # Safety
    /// `s` is httpd's live main server record, valid for the rest of the generation.
    pub unsafe fn new(s: *mut sys::server_rec) -> Option<ServerRec> {
        std::ptr::NonNull::new(s).map(ServerRec)
    }

    /// The raw pointer, for httpd calls.
    pub fn as_ptr(self) -> *mut sys::server_rec {
        self.0.as_ptr()
    }
}

/// `httpd -D name` was given.
pub fn config_define(name: &CStr) -> bool {
    // SAFETY: reads httpd's -D list with a valid C string.
    unsafe { sys::ap_exists_config_define(name.as_ptr()) != 0 }
}

/// The core's MaxConnectionsPerChild (0 = unlimited).
pub fn max_connections_per_child() -> c_int {
    // SAFETY: a plain int written by the configuration phase only.
    unsafe { sys::ap_max_requests_per_child }
}

/// The core's MaxMemFree in bytes (0 = no cap).
pub fn max_mem_free() -> usize {
    // SAFETY: as above.
    unsafe { sys::ap_max_mem_free as usize }
}

/// The core's ThreadStackSize in bytes (0 = APR's default).
pub fn thread_stack_size() -> usize {
    // SAFETY: as above.
    unsafe { sys::ap_thread_stacksize }
}

/// GracefulShutdownTimeout in seconds (0 = no limit).
pub fn graceful_shutdown_timeout() -> c_int {
    // SAFETY: as above.
    unsafe { sys::ap_graceful_shutdown_timeout }
}

/// Every virtual host's KeepAliveTimeout and Timeout (the main server's first), for the
/// timeout classes of a parking child.
pub fn server_timeouts() -> Vec<(std::time::Duration, std::time::Duration)> {
    let mut out = Vec::new();
    let us = |t: sys::apr_interval_time_t| std::time::Duration::from_micros(t.max(0) as u64);
    // SAFETY: ap_server_conf and its `next` chain are the generation's server records,
    // built by the configuration pass and only read afterwards.
    unsafe {
        let mut s = sys::ap_server_conf;
        while !s.is_null() {
            out.push((us((*s).keep_alive_timeout), us((*s).timeout)));
            s = (*s).next;
        }
    }
    out
}

/// A module magic number (`MODULE_MAGIC_NUMBER_MAJOR.MINOR`) with the release it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpdApi {
    /// The major: 20120211 for every httpd 2.4.
    pub major: i32,
    /// The minor: grows by one with each interface added within 2.4.
    pub minor: i32,
    /// The release, as "2.4.58" (`ap_get_server_revision`, or the headers' `ap_release.h`).
    pub release: String,
}

impl fmt::Display for HttpdApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "httpd {} (module magic number {}.{})",
            self.release, self.major, self.minor
        )
    }
}

/// The module API and release of the headers rworker was built with.
pub fn built_api() -> HttpdApi {
    HttpdApi {
        major: sys::MODULE_MAGIC_NUMBER_MAJOR as c_int,
        minor: sys::MODULE_MAGIC_NUMBER_MINOR as c_int,
        release: format!(
            "{}.{}.{}",
            sys::AP_SERVER_MAJORVERSION_NUMBER,
            sys::AP_SERVER_MINORVERSION_NUMBER,
            sys::AP_SERVER_PATCHLEVEL_NUMBER
        ),
    }
}

/// The module API and release of the running httpd: the core module's magic number, which
/// httpd was compiled with (it checks only the major of the modules it loads), and
/// `ap_get_server_revision`.
pub fn running_api() -> HttpdApi {
    let mut v = sys::ap_version_t::default();
    // SAFETY: core_module is httpd's own module struct, whose version fields are set at
    // compile time and never written; ap_get_server_revision fills the struct we pass.
    let (major, minor) = unsafe {
        sys::ap_get_server_revision(&mut v);
        let core = ptr::addr_of!(sys::core_module);
        ((*core).version, (*core).minor_version)
    };
    HttpdApi {
        major,
        minor,
        release: format!("{}.{}.{}", v.major, v.minor, v.patch),
    }
}

/// Microseconds since the epoch (`apr_time_now`).
pub fn time_now() -> i64 {
    // SAFETY: trivially safe APR call.
    unsafe { sys::apr_time_now() }
}

/// The configuration phase's start of a pass: registers the `mpm-accept` mutex type,
/// resets the Listen directives' state, and turns ExtendedStatus off until the
/// configuration turns it on, as every MPM's pre_config does.
/// Errors: the APR status of the mutex registration.
pub fn begin_config_pass(_: SingleThreaded, pconf: ConfigPool) -> Result<(), i32> {
    // SAFETY: single-threaded configuration phase (token); pconf is live.
    let rv = unsafe {
        sys::ap_mutex_register(
            pconf.as_ptr(),
            c"mpm-accept".as_ptr(),
            ptr::null(),
            sys::apr_lockmech_e_APR_LOCK_DEFAULT,
            0,
        )
    };
    if rv != 0 {
        return Err(rv);
    }
    // SAFETY: as above; these globals are only written by the configuration phase.
    unsafe {
        sys::ap_listen_pre_config();
        sys::ap_extended_status = 0;
    }
    Ok(())
}

/// Detaches the parent from the terminal: a daemon (`daemonize`), or only a new
/// session (`-DNO_DETACH`), after setting up the fatal-signal handlers.
/// Errors: the APR status.
pub fn detach(_: SingleThreaded, pconf: ConfigPool, daemonize: bool) -> Result<(), i32> {
    let how = if daemonize {
        sys::APR_PROC_DETACH_DAEMONIZE
    } else {
        sys::APR_PROC_DETACH_FOREGROUND
    };
    // SAFETY: single-threaded parent (token); pconf and ap_server_conf are live.
    match unsafe {
        sys::ap_fatal_signal_setup(sys::ap_server_conf, pconf.as_ptr());
        sys::apr_proc_detach(how as c_int)
    } {
        0 => Ok(()),
        rv => Err(rv),
    }
}

/// The parent's start of a generation: unixd's signal handlers (before the pidfile is
/// written, so `apachectl -k …` finds them), then the pidfile.
pub fn install_signals_and_pidfile(_: SingleThreaded, pconf: ConfigPool, one_process: bool) {
    // SAFETY: single-threaded parent (token); pconf is live; ap_pid_fname is httpd's.
    unsafe {
        sys::ap_unixd_mpm_set_signals(pconf.as_ptr(), one_process as c_int);
        sys::ap_log_pid(pconf.as_ptr(), sys::ap_pid_fname);
    }
}

/// Removes the pidfile (the server is going down).
pub fn remove_pidfile(_: SingleThreaded, pconf: ConfigPool) {
    // SAFETY: single-threaded parent (token); pconf is live.
    unsafe { sys::ap_remove_pid(pconf.as_ptr(), sys::ap_pid_fname) };
}

/// Runs the pre_mpm hooks, which create the shared scoreboard. Errors: a hook failed.
pub fn run_pre_mpm(_: SingleThreaded, s: ServerRec) -> Result<(), c_int> {
    // SAFETY: single-threaded parent (token); s and its process record are live.
    let rv = unsafe {
        sys::ap_run_pre_mpm(
            (*(*s.as_ptr()).process).pool,
            sys::ap_scoreboard_e_SB_SHARED,
        )
    };
    if rv == sys::OK as c_int {
        Ok(())
    } else {
        Err(rv)
    }
}

/// Logs the lines every MPM logs once it runs: the server's description and build
/// (AH00292, AH00293), the command line and the MPM's common settings.
pub fn log_startup_lines(pconf: ConfigPool, s: ServerRec) {
    // SAFETY: httpd's own string getters return static strings; pconf and s are live.
    unsafe {
        let desc = CStr::from_ptr(sys::ap_get_server_description()).to_string_lossy();
        crate::mpm_log!(
            crate::ffi::log::level::NOTICE,
            0,
            "AH00292: {desc} configured -- resuming normal operations"
        );
        let built = CStr::from_ptr(sys::ap_get_server_built()).to_string_lossy();
        crate::mpm_log!(
            crate::ffi::log::level::INFO,
            0,
            "AH00293: Server built: {built}"
        );
        sys::ap_log_command_line(pconf.as_ptr(), s.as_ptr());
        sys::ap_log_mpm_common(s.as_ptr());
    }
}

/// A fresh child's set-up before it drops privileges: fatal-signal handlers and APR's
/// main-thread record (`ap_thread_main_create`, skipped for `-X`; httpd 2.4.53 and later,
/// as event of older releases has no such record).
pub fn child_early_setup(_: SingleThreaded, pchild: &Pool, one_process: bool) {
    // SAFETY: fresh child, single-threaded (token); ap_server_conf is live.
    unsafe { sys::ap_fatal_signal_child_setup(sys::ap_server_conf) };
    if !one_process {
        crate::ffi::thread::create_main_record(pchild);
    }
}

/// Runs the drop_privileges hooks (unixd switches to User/Group). Errors: a hook failed.
pub fn drop_privileges(_: SingleThreaded, pchild: &Pool) -> Result<(), c_int> {
    // SAFETY: fresh child, single-threaded (token); pchild and ap_server_conf are live.
    match unsafe { sys::ap_run_drop_privileges(pchild.as_ptr(), sys::ap_server_conf) } {
        0 => Ok(()),
        rv => Err(rv),
    }
}

/// Runs the child_init hooks.
pub fn run_child_init(_: SingleThreaded, pchild: &Pool) {
    // SAFETY: fresh child, single-threaded (token); pchild is live.
    unsafe { sys::ap_run_child_init(pchild.as_ptr(), sys::ap_server_conf) };
}

/// Runs the child_stopping hooks (modules start winding down).
pub fn run_child_stopping(pchild: &Pool, graceful: bool) {
    // SAFETY: pchild is live; the hooks are modules' own code, callable from the child's
    // main thread at any time, as worker.c does.
    unsafe { sys::ap_run_child_stopping(pchild.as_ptr(), graceful as c_int) };
}

/// What the child_status hook is told.
#[derive(Clone, Copy, Debug)]
pub enum ChildStatus {
    /// Forked into its slot.
    Started,
    /// Reaped.
    Exited,
    /// Lost its slot to a child of a newer generation (kept as an extra process).
    LostSlot,
}

/// Runs the child_status hooks for `pid` of `generation` in `slot` (-1: no slot).
pub fn run_child_status(
    pid: sys::pid_t,
    generation: sys::ap_generation_t,
    slot: c_int,
    status: ChildStatus,
) {
    let status = match status {
        ChildStatus::Started => sys::mpm_child_status_MPM_CHILD_STARTED,
        ChildStatus::Exited => sys::mpm_child_status_MPM_CHILD_EXITED,
        ChildStatus::LostSlot => sys::mpm_child_status_MPM_CHILD_LOST_SLOT,
    };
    // SAFETY: plain hook run with values; ap_server_conf is live.
    unsafe { sys::ap_run_child_status(sys::ap_server_conf, pid, generation, slot, status) };
}
