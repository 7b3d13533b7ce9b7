//! Error-log lines through `ap_log_error_`, tagged with rworker's module index so
//! `LogLevel mpm_rworker:debug` works like `LogLevel mpm_worker:debug` does.
//!
//! Messages keep httpd's style: one line, what happened and what to do, with the
//! stock `AHxxxxx` number where the event is the same one the stock worker MPM
//! reports (so log monitors keep working) and an `RWxxxxx` number otherwise.

use std::ffi::CString;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::sys;

/// rworker's module index, as httpd assigned it in `ap_add_module` (-1 until then,
/// which logs as "no module").
static MODULE_INDEX: AtomicI32 = AtomicI32::new(-1);

/// Records the module index httpd gave rworker (called from `register_hooks`, which
/// httpd runs right after assigning it).
pub fn set_module_index(index: c_int) {
    // Relaxed: the value is written by the single-threaded configuration phase, before
    // any MPM thread or child exists; fork and thread creation order it for readers.
    MODULE_INDEX.store(index, Ordering::Relaxed);
}

/// rworker's module index (-1 before `register_hooks`): its log tag, and its entry in the
/// per-module vectors httpd keeps (`conn_config`, see `vhost`).
pub fn module_index() -> c_int {
    // Relaxed: see set_module_index.
    MODULE_INDEX.load(Ordering::Relaxed)
}

/// httpd log levels (`APLOG_*` in http_log.h), as `c_int`.
pub mod level {
    use crate::sys;
    use std::os::raw::c_int;
    pub const EMERG: c_int = sys::APLOG_EMERG as c_int;
    pub const ALERT: c_int = sys::APLOG_ALERT as c_int;
    pub const CRIT: c_int = sys::APLOG_CRIT as c_int;
    pub const ERR: c_int = sys::APLOG_ERR as c_int;
    pub const WARNING: c_int = sys::APLOG_WARNING as c_int;
    pub const NOTICE: c_int = sys::APLOG_NOTICE as c_int;
    pub const INFO: c_int = sys::APLOG_INFO as c_int;
    pub const DEBUG: c_int = sys::APLOG_DEBUG as c_int;
    /// `APLOG_STARTUP`: print to the console without the usual prefix (first config pass).
    pub const STARTUP: c_int = sys::APLOG_STARTUP as c_int;
}

/// Writes one error-log line at `level` (an `APLOG_*` value, optionally or-ed with
/// `APLOG_STARTUP`), with APR status `status` (0 for none), against `ap_server_conf`
/// (stderr before the config is read).
///
/// Interior NUL bytes in `msg` are replaced; the call never fails.
pub fn log_error(file: &'static str, line: u32, level: c_int, status: i32, msg: &str) {
    let msg = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let file = CString::new(file).unwrap_or_default();
    // SAFETY: reading an exported global pointer of httpd, written only by the
    // single-threaded configuration phase (null before the config is read).
    let server = unsafe { sys::ap_server_conf as *const sys::server_rec };
    // Relaxed: see set_module_index.
    let index = MODULE_INDEX.load(Ordering::Relaxed);
    // SAFETY: `%s` with a NUL-terminated string matches the variadic contract of
    // ap_log_error_; file and msg outlive the call; a null server is accepted.
    unsafe {
        sys::ap_log_error_(
            file.as_ptr(),
            line as c_int,
            index,
            level,
            status,
            server,
            c"%s".as_ptr(),
            msg.as_ptr(),
        );
    }
}

/// `mpm_log!(LEVEL, status, "AH00000: format", args…)`: an error-log line from the
/// MPM at `crate::ffi::log::level::LEVEL`, against `ap_server_conf`.
#[macro_export]
macro_rules! mpm_log {
    ($lvl:expr, $status:expr, $($arg:tt)*) => {
        $crate::ffi::log::log_error(file!(), line!(), $lvl, $status as i32, &format!($($arg)*))
    };
}
