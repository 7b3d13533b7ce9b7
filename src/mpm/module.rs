//! The exported module struct `mpm_rworker_module` and the hook table: which function
//! httpd calls for which hook. Each entry point only names itself for the panic line,
//! turns httpd's raw arguments into the FFI layer's handles (the one place their
//! validity is asserted), and calls the safe code that does the work.

use std::os::raw::{c_char, c_int};
use std::ptr;

use crate::ffi::httpd::{ServerRec, SingleThreaded};
use crate::ffi::pool::ConfigPool;
use crate::ffi::{log, panic};
use crate::mpm::status;
use crate::mpm::{config_pass, parent, query};
use crate::sys;

/// The name httpd prints for this MPM (`apache2 -V`, mod_status `ServerMPM`).
pub const MPM_NAME: &std::ffi::CStr = c"rworker";

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

/// Asserts the parent's single-threaded configuration phase for a hook httpd runs there.
///
/// # Safety
/// Called only from the configuration hooks and the `mpm` hook below, which httpd runs
/// in the parent, on its only thread.
unsafe fn parent_phase() -> SingleThreaded {
    // SAFETY: forwarded to the caller.
    unsafe { SingleThreaded::assume() }
}

unsafe extern "C" fn register_hooks(_p: *mut sys::apr_pool_t) {
    panic::install_hook();
    let _place = panic::enter("register_hooks");
    // SAFETY: httpd assigned the index in ap_add_module, which calls us right after,
    // single-threaded; nothing else writes the struct meanwhile.
    log::set_module_index(unsafe { (*ptr::addr_of!(mpm_rworker_module)).module_index });
    crate::ffi::status::add_hook(status::render);
    // Parked connections: h2's secondary connections need their own state.
    crate::ffi::async_conn::register_secondary_state_hook();
    // Parked request heads are handed to the core through a filter of ours.
    crate::ffi::head_buffer::register_filter();
    // A TLS handshake runs without a thread, under a filter of ours that counts its bytes.
    crate::ffi::tls::register_filter();
    // Heads over TLS are read past mod_reqtimeout, through a stand-in of ours.
    crate::ffi::reqtimeout::register_filter();
    // Parked connections wait under their vhost's timeouts, as under event.
    crate::ffi::vhost::register_hooks();
    // SAFETY: called once per load by ap_add_module, single-threaded; the hook functions
    // live in this DSO, which is never unmapped (-z nodelete); CORE_ONLY is a
    // NUL-terminated 'static list.
    unsafe {
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
            Some(mpm),
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

unsafe extern "C" fn pre_config(
    pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    _ptemp: *mut sys::apr_pool_t,
) -> c_int {
    let _place = panic::enter("pre_config hook");
    // SAFETY: httpd runs pre_config in the parent's configuration phase with the new
    // generation's pconf, which lives for the generation.
    let (token, pconf) = unsafe { (parent_phase(), ConfigPool::new(pconf)) };
    pconf.map_or(sys::DONE, |p| config_pass::pre_config(token, p))
}

unsafe extern "C" fn check_config(
    _pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    _ptemp: *mut sys::apr_pool_t,
    _s: *mut sys::server_rec,
) -> c_int {
    let _place = panic::enter("check_config hook");
    // SAFETY: httpd runs check_config in the parent's configuration phase.
    config_pass::check_config(unsafe { parent_phase() })
}

unsafe extern "C" fn open_logs(
    pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    _ptemp: *mut sys::apr_pool_t,
    s: *mut sys::server_rec,
) -> c_int {
    let _place = panic::enter("open_logs hook");
    // SAFETY: httpd runs open_logs in the parent's configuration phase with the
    // generation's pconf and main server record.
    let (token, pconf, s) = unsafe { (parent_phase(), ConfigPool::new(pconf), ServerRec::new(s)) };
    match (pconf, s) {
        (Some(p), Some(s)) => config_pass::open_logs(token, p, s),
        _ => sys::DONE,
    }
}

unsafe extern "C" fn mpm(
    pconf: *mut sys::apr_pool_t,
    _plog: *mut sys::apr_pool_t,
    s: *mut sys::server_rec,
) -> c_int {
    let _place = panic::enter("parent process (mpm hook)");
    // SAFETY: httpd runs the mpm hook in the parent, on its only thread, with the
    // generation's pconf and main server record.
    let (token, pconf, s) = unsafe { (parent_phase(), ConfigPool::new(pconf), ServerRec::new(s)) };
    match (pconf, s) {
        (Some(p), Some(s)) => parent::run(token, p, s),
        _ => sys::DONE,
    }
}

unsafe extern "C" fn query(code: c_int, result: *mut c_int, rv: *mut sys::apr_status_t) -> c_int {
    let (value, status) = match query::answer(code) {
        Some(v) => (v, sys::APR_SUCCESS as sys::apr_status_t),
        None => (0, sys::APR_ENOTIMPL as sys::apr_status_t),
    };
    // SAFETY: httpd passes valid out-pointers.
    unsafe {
        *result = value;
        *rv = status;
    }
    sys::OK as c_int
}

unsafe extern "C" fn get_name() -> *const c_char {
    MPM_NAME.as_ptr()
}
