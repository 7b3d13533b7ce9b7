//! rworker's connection input filters: their registration (once per configuration pass,
//! from register_hooks, before any child exists) and finding a filter in a chain by name.

use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::sys;

/// An input filter's function (httpd's `ap_in_filter_func`).
pub type InputFilter = unsafe extern "C" fn(
    *mut sys::ap_filter_t,
    *mut sys::apr_bucket_brigade,
    sys::ap_input_mode_t,
    sys::apr_read_type_e,
    sys::apr_off_t,
) -> sys::apr_status_t;

/// Registers input filter `name` (lower-case: httpd keeps filter names so) of type `ftype`
/// and keeps its record in `slot` for the children.
pub fn register_input(
    name: &'static CStr,
    func: InputFilter,
    ftype: sys::ap_filter_type,
    slot: &AtomicPtr<sys::ap_filter_rec_t>,
) {
    // SAFETY: called single-threaded from register_hooks; the name is 'static and the
    // function lives in this DSO, which is never unmapped.
    let rec = unsafe { sys::ap_register_input_filter(name.as_ptr(), Some(func), None, ftype) };
    // Relaxed: written before the children are forked, which orders it for them.
    slot.store(rec, Ordering::Relaxed);
}

/// Whether filter `f` is the one named `name`.
///
/// # Safety
/// `f` is a live filter of a chain the calling thread holds.
pub unsafe fn is_named(f: *mut sys::ap_filter_t, name: &[u8]) -> bool {
    // SAFETY: the caller's contract; a registered filter's name is a NUL-terminated string
    // of the configuration.
    unsafe {
        let n = (*(*f).frec).name;
        !n.is_null() && CStr::from_ptr(n).to_bytes() == name
    }
}
