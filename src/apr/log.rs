//! Error-log lines through `ap_log_error_`, tagged with rworker's module index so
//! `LogLevel mpm_rworker:debug` works like `LogLevel mpm_worker:debug` does.
//!
//! Messages keep httpd's style: one line, what happened and what to do, with the
//! stock `AHxxxxx` number where the event is the same one the stock worker MPM
//! reports (so log monitors keep working) and an `RWxxxxx` number otherwise.

use std::ffi::CString;
use std::os::raw::c_int;

use crate::sys;

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
/// `APLOG_STARTUP`), with APR status `status` (0 for none), against `server`
/// (null: `ap_server_conf`, or stderr before the config is read).
///
/// Interior NUL bytes in `msg` are replaced; the call never fails.
pub fn log_error(
    file: &'static str,
    line: u32,
    level: c_int,
    status: i32,
    server: *const sys::server_rec,
    msg: &str,
) {
    let msg = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let file = CString::new(file).unwrap_or_default();
    // SAFETY: reading an exported global pointer of httpd (written only by the
    // single-threaded config phase) and our own module struct's index field.
    let (server, index) = unsafe {
        let s = if server.is_null() {
            sys::ap_server_conf as *const _
        } else {
            server
        };
        (
            s,
            (*std::ptr::addr_of!(crate::mpm_rworker_module)).module_index,
        )
    };
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
/// MPM at `crate::apr::log::level::LEVEL`, against `ap_server_conf`.
#[macro_export]
macro_rules! mpm_log {
    ($lvl:expr, $status:expr, $($arg:tt)*) => {
        $crate::apr::log::log_error(file!(), line!(), $lvl, $status as i32, std::ptr::null(), &format!($($arg)*))
    };
}
