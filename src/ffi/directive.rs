//! One call of a directive handler from httpd's configuration parser: the directive's
//! name, its argument, the context check, and the error string httpd prints.

use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr::NonNull;

use crate::sys;

/// The `cmd_parms` and argument httpd passed to a TAKE1 directive handler.
pub struct DirectiveCall {
    cmd: NonNull<sys::cmd_parms>,
    arg: String,
}

impl DirectiveCall {
    /// Wraps httpd's arguments; `None` if either is null.
    ///
    /// # Safety
    /// `cmd` and `arg` are what httpd's parser passed to the handler now running: a valid
    /// `cmd_parms` (with its `cmd` record) and a NUL-terminated string.
    pub unsafe fn new(cmd: *mut sys::cmd_parms, arg: *const c_char) -> Option<DirectiveCall> {
        let cmd = NonNull::new(cmd)?;
        if arg.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string owned by httpd for the call (caller).
        let arg = unsafe { CStr::from_ptr(arg) }
            .to_string_lossy()
            .into_owned();
        Some(DirectiveCall { cmd, arg })
    }

    /// The directive's name as the table spells it.
    pub fn name(&self) -> String {
        // SAFETY: cmd->cmd is the live command record with a NUL-terminated name (new).
        unsafe { CStr::from_ptr((*(*self.cmd.as_ptr()).cmd).name) }
            .to_string_lossy()
            .into_owned()
    }

    /// The argument.
    pub fn arg(&self) -> &str {
        &self.arg
    }

    /// httpd's refusal when the directive appears outside the main server config
    /// (`ap_check_cmd_context(GLOBAL_ONLY)`), or null.
    pub fn check_global_only(&self) -> *const c_char {
        // SAFETY: a valid cmd_parms (new).
        unsafe { sys::ap_check_cmd_context(self.cmd.as_ptr(), sys::GLOBAL_ONLY as _) }
    }

    /// `msg` copied into the configuration pool, as the handler's error return.
    pub fn error(&self, msg: &str) -> *const c_char {
        let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
        // SAFETY: cmd->pool is the live configuration pool; apr_pstrdup copies into it.
        unsafe { sys::apr_pstrdup((*self.cmd.as_ptr()).pool, c.as_ptr()) }
    }
}
