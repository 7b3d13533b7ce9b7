//! The MPM's directives (StartServers … ThreadLimit) and the per-generation settings
//! derived from them, validated and clamped in `check_config` exactly where the
//! stock worker MPM clamps (worker.c `worker_check_config`).
//!
//! Storage: one process-wide [`Settings`] value, reset to the defaults at every
//! `pre_config` (httpd re-reads the configuration on every pass), written only by the
//! single-threaded configuration phase and the parent, and read-only in children once
//! their threads start. State that must survive a restart is in
//! [`crate::mpm::retained`], never here.

use std::cell::UnsafeCell;
use std::ffi::{c_void, CStr};
use std::os::raw::{c_char, c_int};

use crate::apr::log::level;
use crate::mpm::retained;
use crate::sys;

/// Hard upper bound for ServerLimit (worker.c MAX_SERVER_LIMIT).
pub const MAX_SERVER_LIMIT: c_int = 20000;
/// Hard upper bound for ThreadLimit (worker.c MAX_THREAD_LIMIT).
pub const MAX_THREAD_LIMIT: c_int = 20000;
/// Default StartServers.
pub const DEFAULT_START_DAEMON: c_int = 3;
/// Default ThreadsPerChild.
pub const DEFAULT_THREADS_PER_CHILD: c_int = 25;
/// Default ServerLimit.
pub const DEFAULT_SERVER_LIMIT: c_int = 16;
/// Default ThreadLimit.
pub const DEFAULT_THREAD_LIMIT: c_int = 64;
/// Default MinSpareThreads (3 children's worth).
pub const DEFAULT_MIN_SPARE_THREADS: c_int = 3 * DEFAULT_THREADS_PER_CHILD;
/// Default MaxSpareThreads (10 children's worth).
pub const DEFAULT_MAX_SPARE_THREADS: c_int = 10 * DEFAULT_THREADS_PER_CHILD;
/// Default MaxRequestWorkers (ServerLimit × ThreadsPerChild).
pub const DEFAULT_MAX_WORKERS: c_int = DEFAULT_SERVER_LIMIT * DEFAULT_THREADS_PER_CHILD;

/// The MPM's tunables for one configuration generation, in httpd's units (processes,
/// threads). Field names follow worker.c's variables.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// StartServers: children forked at start-up (>= 1, <= daemons_limit).
    pub daemons_to_start: c_int,
    /// MinSpareThreads: idle threads below which the parent forks (>= 1).
    pub min_spare_threads: c_int,
    /// MaxSpareThreads: idle threads above which the parent sheds a child.
    pub max_spare_threads: c_int,
    /// MaxRequestWorkers: a multiple of ThreadsPerChild, <= ServerLimit × ThreadsPerChild.
    pub max_workers: c_int,
    /// ThreadsPerChild: worker threads per child, 1..=ThreadLimit.
    pub threads_per_child: c_int,
    /// ServerLimit: scoreboard process slots, fixed at first start.
    pub server_limit: c_int,
    /// ThreadLimit: scoreboard thread slots per process, fixed at first start.
    pub thread_limit: c_int,
    /// MaxRequestWorkers / ThreadsPerChild: process slots in use.
    pub daemons_limit: c_int,
    /// RWorkerQueue: the hand-off implementation.
    pub queue: QueueKind,
    /// `-X` / `-DONE_PROCESS` / `-DDEBUG`: serve from the parent, no fork.
    pub one_process: bool,
    /// `-DFOREGROUND` (or DEBUG): do not detach.
    pub foreground: bool,
    /// `-DNO_DETACH`: detach from the terminal but stay in the foreground session.
    pub no_detach: bool,
}

impl Settings {
    /// The stock defaults (mpm_default.h and worker.c).
    pub const DEFAULT: Settings = Settings {
        daemons_to_start: DEFAULT_START_DAEMON,
        min_spare_threads: DEFAULT_MIN_SPARE_THREADS,
        max_spare_threads: DEFAULT_MAX_SPARE_THREADS,
        max_workers: DEFAULT_MAX_WORKERS,
        threads_per_child: DEFAULT_THREADS_PER_CHILD,
        server_limit: DEFAULT_SERVER_LIMIT,
        thread_limit: DEFAULT_THREAD_LIMIT,
        daemons_limit: DEFAULT_SERVER_LIMIT,
        queue: QueueKind::Atomic,
        one_process: false,
        foreground: false,
        no_detach: false,
    };
}

/// A value written only in single-threaded phases (see the module doc).
pub struct PhaseCell<T>(UnsafeCell<T>);

// SAFETY: writes happen only while the process has one thread that touches the MPM
// (config hooks, the parent loop, a child before it starts threads); worker and
// listener threads only read.
unsafe impl<T> Sync for PhaseCell<T> {}

impl<T> PhaseCell<T> {
    /// Wraps an initial value.
    pub const fn new(v: T) -> Self {
        PhaseCell(UnsafeCell::new(v))
    }
    /// Shared access.
    pub fn get(&self) -> &T {
        // SAFETY: no `&mut` is live while threads read (phase discipline above).
        unsafe { &*self.0.get() }
    }
    /// Exclusive access.
    ///
    /// # Safety
    /// Only from a single-threaded phase, and no other reference may be live.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn get_mut(&self) -> &mut T {
        // SAFETY: guaranteed by the caller.
        unsafe { &mut *self.0.get() }
    }
}

static SETTINGS: PhaseCell<Settings> = PhaseCell::new(Settings::DEFAULT);

/// The current generation's settings.
pub fn settings() -> &'static Settings {
    SETTINGS.get()
}

/// Mutable settings, for the config hooks and the parent.
///
/// # Safety
/// Single-threaded phases only (see the module doc).
pub unsafe fn settings_mut() -> &'static mut Settings {
    // SAFETY: forwarded to the caller.
    unsafe { SETTINGS.get_mut() }
}

/// Resets every directive to its default (run by `pre_config`, like worker.c).
///
/// # Safety
/// Single-threaded configuration phase.
pub unsafe fn reset_defaults(one_process: bool, foreground: bool, no_detach: bool) {
    // SAFETY: forwarded to the caller.
    let s = unsafe { settings_mut() };
    *s = Settings {
        one_process,
        foreground,
        no_detach,
        ..Settings::DEFAULT
    };
}

/// Directive numbers carried in `cmd->info` by the C shim's table.
mod directive {
    pub const START_SERVERS: usize = 1;
    pub const MIN_SPARE_THREADS: usize = 2;
    pub const MAX_SPARE_THREADS: usize = 3;
    pub const MAX_REQUEST_WORKERS: usize = 4;
    pub const MAX_CLIENTS: usize = 5;
    pub const THREADS_PER_CHILD: usize = 6;
    pub const SERVER_LIMIT: usize = 7;
    pub const THREAD_LIMIT: usize = 8;
    pub const QUEUE: usize = 9;
}

/// Which listener → worker hand-off a child uses (`RWorkerQueue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// rworker's own atomics-based fdqueue and queue_info (`rworker-queue`).
    Atomic,
    /// httpd's own mutex + condition-variable fdqueue (`ap_queue_*`, exported by the
    /// server binary), to A/B the queues with the process model held constant.
    Apr,
}

/// Parses a directive argument as httpd admins write it: an optionally signed decimal
/// integer with surrounding blanks. Out-of-range values are clamped later, with a
/// warning, in `check_config`; garbage is an error naming the directive.
fn parse_int(name: &str, arg: &str) -> Result<c_int, String> {
    let t = arg.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    match t.parse::<i64>() {
        Ok(v) => Ok(v.clamp(c_int::MIN as i64, c_int::MAX as i64) as c_int),
        // All digits but beyond i64: saturate, and let check_config warn and clamp.
        Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(if t.starts_with('-') {
                c_int::MIN
            } else {
                c_int::MAX
            })
        }
        Err(_) => Err(format!("{name} takes an integer argument, not '{arg}'")),
    }
}

/// Stores `msg` in the command's pool and returns it as httpd's directive error.
fn cmd_error(cmd: *mut sys::cmd_parms, msg: &str) -> *const c_char {
    let c = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: cmd->pool is the live config pool; apr_pstrdup copies the string into it.
    unsafe { sys::apr_pstrdup((*cmd).pool, c.as_ptr()) }
}

/// The one setter behind every MPM directive of the shim's table (`cmd->info` says
/// which). Returns NULL on success or an error string in the config pool, which httpd
/// prints with the file and line.
///
/// # Safety
/// Called by httpd's config parser with a valid `cmd_parms` and NUL-terminated `arg`.
#[no_mangle]
pub unsafe extern "C" fn rworker_set_directive(
    cmd: *mut sys::cmd_parms,
    _dummy: *mut c_void,
    arg: *const c_char,
) -> *const c_char {
    // SAFETY: httpd passes a valid cmd_parms for the directive being parsed.
    let err = unsafe { sys::ap_check_cmd_context(cmd, sys::GLOBAL_ONLY as _) };
    if !err.is_null() {
        return err;
    }
    // SAFETY: cmd is valid; info is the integer the shim stored; cmd->cmd->name and arg
    // are NUL-terminated strings owned by httpd for the duration of the call.
    let (which, name, arg) = unsafe {
        (
            (*cmd).info as usize,
            CStr::from_ptr((*(*cmd).cmd).name)
                .to_string_lossy()
                .into_owned(),
            CStr::from_ptr(arg).to_string_lossy().into_owned(),
        )
    };
    if which == directive::QUEUE {
        let kind = match arg.trim().to_ascii_lowercase().as_str() {
            "atomic" => QueueKind::Atomic,
            "apr" => {
                if let Err(missing) = crate::mpm::handoff::AprQueueFns::resolve() {
                    return cmd_error(
                        cmd,
                        &format!("RWorkerQueue apr: this httpd does not export {missing} (httpd's fdqueue API, 2.4.x); use RWorkerQueue atomic"),
                    );
                }
                QueueKind::Apr
            }
            _ => {
                return cmd_error(
                    cmd,
                    &format!("RWorkerQueue takes 'atomic' or 'apr', not '{arg}'"),
                )
            }
        };
        // SAFETY: directives are parsed by the single-threaded configuration phase.
        unsafe { settings_mut() }.queue = kind;
        return std::ptr::null();
    }
    let v = match parse_int(&name, &arg) {
        Ok(v) => v,
        Err(e) => return cmd_error(cmd, &e),
    };
    // SAFETY: directives are parsed by the single-threaded configuration phase.
    let s = unsafe { settings_mut() };
    match which {
        directive::START_SERVERS => s.daemons_to_start = v,
        directive::MIN_SPARE_THREADS => s.min_spare_threads = v,
        directive::MAX_SPARE_THREADS => s.max_spare_threads = v,
        directive::MAX_CLIENTS => {
            crate::mpm_log!(
                level::INFO,
                0,
                "AH00324: MaxClients is deprecated, use MaxRequestWorkers instead."
            );
            s.max_workers = v;
        }
        directive::MAX_REQUEST_WORKERS => s.max_workers = v,
        directive::THREADS_PER_CHILD => s.threads_per_child = v,
        directive::SERVER_LIMIT => s.server_limit = v,
        directive::THREAD_LIMIT => s.thread_limit = v,
        _ => {
            return cmd_error(
                cmd,
                "rworker: unknown directive number in the C shim's table",
            )
        }
    }
    std::ptr::null()
}

/// Validates and clamps the settings after the config is read (`check_config` hook),
/// logging each adjustment as the stock worker does: to the console on the first
/// pass (`startup`), to the error log on restarts. Returns OK, or an error for values
/// that cannot work.
///
/// # Safety
/// Single-threaded configuration phase; `r` is the live retained data.
pub unsafe fn check_config(r: &mut retained::Retained, startup: bool) -> c_int {
    // SAFETY: forwarded to the caller.
    let s = unsafe { settings_mut() };
    let lvl = |l: c_int| if startup { l | level::STARTUP } else { l };
    // Each adjustment has the stock worker's pair of message numbers: one for the
    // console at first start, one for the error log on a restart.
    let warn = |(at_start, at_restart): (u32, u32), msg: String| {
        if startup {
            crate::mpm_log!(lvl(level::WARNING), 0, "AH{at_start:05}: WARNING: {msg}");
        } else {
            crate::mpm_log!(level::WARNING, 0, "AH{at_restart:05}: {msg}");
        }
    };

    // ServerLimit and ThreadLimit size the shared scoreboard once: clamp them to their
    // hard limits, then pin them to their first values (later changes wait for a full stop).
    let scoreboard_limit = |value: &mut c_int,
                            first: &mut c_int,
                            name: &str,
                            unit: &str,
                            max: c_int,
                            ids: [u32; 5]| {
        if *value > max {
            warn(
                (ids[0], ids[1]),
                format!("{name} of {value} exceeds compile-time limit of {max} {unit}, decreasing to {max}."),
            );
            *value = max;
        } else if *value < 1 {
            warn(
                (ids[2], ids[3]),
                format!("{name} of {value} not allowed, increasing to 1."),
            );
            *value = 1;
        }
        if *first == 0 {
            *first = *value;
        } else if *value != *first {
            warn(
                (ids[4], ids[4]),
                format!("changing {name} to {value} from original value of {first} not allowed during restart"),
            );
            *value = *first;
        }
    };
    scoreboard_limit(
        &mut s.server_limit,
        &mut r.first_server_limit,
        "ServerLimit",
        "servers",
        MAX_SERVER_LIMIT,
        [300, 301, 302, 303, 304],
    );
    scoreboard_limit(
        &mut s.thread_limit,
        &mut r.first_thread_limit,
        "ThreadLimit",
        "threads",
        MAX_THREAD_LIMIT,
        [305, 306, 307, 308, 309],
    );

    if s.threads_per_child > s.thread_limit {
        warn((310, 311), format!(
            "ThreadsPerChild of {} exceeds ThreadLimit of {}, decreasing to match. To increase, please see the ThreadLimit directive.",
            s.threads_per_child, s.thread_limit
        ));
        s.threads_per_child = s.thread_limit;
    } else if s.threads_per_child < 1 {
        warn(
            (312, 313),
            format!(
                "ThreadsPerChild of {} not allowed, increasing to 1.",
                s.threads_per_child
            ),
        );
        s.threads_per_child = 1;
    }

    if s.max_workers < s.threads_per_child {
        warn((314, 315), format!(
            "MaxRequestWorkers of {} is less than ThreadsPerChild of {}, increasing to {}. MaxRequestWorkers must be at least as large as the number of threads in a single server.",
            s.max_workers, s.threads_per_child, s.threads_per_child
        ));
        s.max_workers = s.threads_per_child;
    }
    s.daemons_limit = s.max_workers / s.threads_per_child;
    if s.max_workers % s.threads_per_child != 0 {
        let rounded = s.daemons_limit * s.threads_per_child;
        warn((316, 317), format!(
            "MaxRequestWorkers of {} is not an integer multiple of ThreadsPerChild of {}, decreasing to nearest multiple {}, for a maximum of {} servers.",
            s.max_workers, s.threads_per_child, rounded, s.daemons_limit
        ));
        s.max_workers = rounded;
    }
    if s.daemons_limit > s.server_limit {
        warn((318, 319), format!(
            "MaxRequestWorkers of {} would require {} servers and would exceed ServerLimit of {}, decreasing to {}. To increase, please see the ServerLimit directive.",
            s.max_workers,
            s.daemons_limit,
            s.server_limit,
            s.server_limit * s.threads_per_child
        ));
        s.daemons_limit = s.server_limit;
        s.max_workers = s.server_limit * s.threads_per_child;
    }

    if s.daemons_to_start < 1 {
        warn(
            (320, 321),
            format!(
                "StartServers of {} not allowed, increasing to 1.",
                s.daemons_to_start
            ),
        );
        s.daemons_to_start = 1;
    }
    if s.min_spare_threads < 1 {
        warn((322, 323), format!("MinSpareThreads of {} not allowed, increasing to 1 to avoid almost certain server failure. Please read the documentation.", s.min_spare_threads));
        s.min_spare_threads = 1;
    }
    // MaxSpareThreads is raised to a workable value in the parent (it depends on the
    // number of listener buckets, known only after open_logs).
    sys::OK as c_int
}
