//! MPM threads are APR threads (`ap_thread_create`), so that `conn_rec->current_thread`
//! is a real `apr_thread_t` and `ap_thread_current()` works for modules (mod_lua,
//! the PCRE2 match-data cache).

use std::ffi::c_void;
use std::ptr;

use crate::sys;

/// The entry point APR calls on the new thread: `(thread, data) -> exit value`.
pub type ThreadMain = unsafe extern "C" fn(*mut sys::apr_thread_t, *mut c_void) -> *mut c_void;

/// Joinable thread attributes in `pool`, with `ThreadStackSize` applied when set
/// (`stack_size` bytes, 0 = APR's default).
/// Errors: the APR status.
///
/// # Safety
/// `pool` must be a live pool that outlives the threads created with the attributes.
pub unsafe fn joinable_attr(
    pool: *mut sys::apr_pool_t,
    stack_size: usize,
) -> Result<*mut sys::apr_threadattr_t, i32> {
    let mut attr = ptr::null_mut();
    // SAFETY: pool is live for the child's lifetime; out-pointer is valid.
    let rv = unsafe { sys::apr_threadattr_create(&mut attr, pool) };
    if rv != 0 {
        return Err(rv);
    }
    // SAFETY: attr was created above.
    unsafe {
        sys::apr_threadattr_detach_set(attr, 0);
        if stack_size > 0 {
            let rv = sys::apr_threadattr_stacksize_set(attr, stack_size as _);
            if rv != 0 {
                return Err(rv);
            }
        }
    }
    Ok(attr)
}

/// Starts an APR thread running `main(thread, data)`.
/// Errors: the APR status (e.g. EAGAIN when the process is out of threads).
///
/// # Safety
/// `attr` and `pool` must be live; `data` must stay valid for as long as `main` uses it.
pub unsafe fn spawn(
    attr: *mut sys::apr_threadattr_t,
    pool: *mut sys::apr_pool_t,
    main: ThreadMain,
    data: *mut c_void,
) -> Result<*mut sys::apr_thread_t, i32> {
    let mut thd = ptr::null_mut();
    // SAFETY: attr and pool are live; `main` is an extern "C" fn that never unwinds
    // (panic=abort) and owns `data` by the caller's contract.
    let rv = unsafe { sys::ap_thread_create(&mut thd, attr, Some(main), data, pool) };
    if rv != 0 {
        Err(rv)
    } else {
        Ok(thd)
    }
}

/// Joins an APR thread; returns the thread's exit status.
///
/// # Safety
/// `thd` must come from [`spawn`] with joinable attributes and not be joined yet.
pub unsafe fn join(thd: *mut sys::apr_thread_t) -> i32 {
    let mut status = 0;
    // SAFETY: thd was created joinable by `spawn` and is joined once.
    unsafe { sys::apr_thread_join(&mut status, thd) };
    status
}

/// The calling thread's OS thread (`pthread_t`), for signalling it.
pub fn current_os_thread() -> libc::pthread_t {
    // SAFETY: trivially safe libc call.
    unsafe { libc::pthread_self() }
}
