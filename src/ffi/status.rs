//! mod_status's `status_hook` (an APR optional hook; harmless when mod_status is not
//! loaded): rworker adds its own lines to `/server-status`, as HTML or, for `?auto`,
//! as `Key: value` lines.

use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::OnceLock;

use crate::sys;

/// What mod_status asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flags {
    /// `?auto`: plain `Key: value` lines.
    pub short: bool,
    /// ExtendedStatus On: per-child detail wanted.
    pub extended: bool,
}

/// Where the lines go: the status request's response.
pub struct Output(NonNull<sys::request_rec>);

impl Output {
    /// Writes `text` to the response (`ap_rwrite`, what `ap_rputs` inlines to).
    pub fn put(&mut self, text: &str) {
        // SAFETY: a live request (the hook's argument) used by this thread alone; the
        // bytes outlive the call.
        unsafe {
            sys::ap_rwrite(
                text.as_ptr() as *const std::ffi::c_void,
                text.len() as c_int,
                self.0.as_ptr(),
            )
        };
    }
}

/// The renderer the hook calls.
type Render = fn(&mut Output, Flags);

static RENDER: OnceLock<Render> = OnceLock::new();

unsafe extern "C" fn status_hook(r: *mut sys::request_rec, flags: c_int) -> c_int {
    let _place = crate::ffi::panic::enter("server-status hook");
    if let (Some(render), Some(r)) = (RENDER.get(), NonNull::new(r)) {
        let flags = Flags {
            short: flags & sys::AP_STATUS_SHORT as c_int != 0,
            extended: flags & sys::AP_STATUS_EXTENDED as c_int != 0,
        };
        render(&mut Output(r), flags);
    }
    sys::OK as c_int
}

/// Adds `render` to mod_status's report (call from register_hooks; the first renderer
/// given is kept for the life of the process).
pub fn add_hook(render: Render) {
    RENDER.get_or_init(|| render);
    // SAFETY: registers a 'static function of the hook's exact signature under the hook's
    // name; APR keeps the name's pointer, which is a 'static literal.
    unsafe {
        sys::apr_optional_hook_add(
            c"status_hook".as_ptr(),
            Some(std::mem::transmute::<
                unsafe extern "C" fn(*mut sys::request_rec, c_int) -> c_int,
                unsafe extern "C" fn(),
            >(status_hook)),
            std::ptr::null(),
            std::ptr::null(),
            sys::APR_HOOK_MIDDLE as c_int,
        );
    }
}
