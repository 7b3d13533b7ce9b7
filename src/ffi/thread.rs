//! MPM threads are APR threads (`ap_thread_create`), so that `conn_rec->current_thread`
//! is a real `apr_thread_t` and `ap_thread_current()` works for modules (mod_lua, the
//! PCRE2 match-data cache). httpd has `ap_thread_create` and its two companions from 2.4.53
//! on; they are looked up in the running httpd ([`HttpdThreadFns`]), and where it lacks them
//! threads are plain `apr_thread_create`, as 2.4.52's event does. A thread runs a Rust
//! closure; the closure, not a `*mut c_void`, carries what the thread needs. A [`Spawner`] owns the
//! pool and the attributes threads are created with and lives until the process exits, so
//! every thread it starts is outlived by both.

use std::ffi::{c_void, CStr};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::ffi::pool::Pool;
use crate::sys;

/// Joinable thread attributes, with `ThreadStackSize` applied when set.
#[derive(Debug)]
struct ThreadAttr(NonNull<sys::apr_threadattr_t>);

// SAFETY: the attributes are written once, by `joinable`, and only read afterwards
// (apr_thread_create copies what it needs).
unsafe impl Send for ThreadAttr {}
// SAFETY: as for Send.
unsafe impl Sync for ThreadAttr {}

impl ThreadAttr {
    /// Joinable attributes allocated in `pool`, with a stack of `stack_size` bytes
    /// (0 = APR's default). Errors: the APR status.
    fn joinable(pool: &Pool, stack_size: usize) -> Result<ThreadAttr, i32> {
        let mut attr = ptr::null_mut();
        // SAFETY: pool is live; out-pointer is valid.
        let rv = unsafe { sys::apr_threadattr_create(&mut attr, pool.as_ptr()) };
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
        NonNull::new(attr)
            .map(ThreadAttr)
            .ok_or(sys::APR_ENOMEM as i32)
    }
}

/// A joinable APR thread; [`AprThread::join`] consumes it, so it is joined at most once.
#[derive(Debug)]
pub struct AprThread(NonNull<sys::apr_thread_t>);

// SAFETY: an apr_thread_t may be joined from any thread; the handle is not Copy, so only
// one thread can join it.
unsafe impl Send for AprThread {}

impl AprThread {
    /// Waits for the thread to end; returns its exit status.
    pub fn join(self) -> i32 {
        let mut status = 0;
        // SAFETY: created joinable by `spawn` and joined once (join consumes the handle).
        unsafe { sys::apr_thread_join(&mut status, self.0.as_ptr()) };
        status
    }
}

/// The running APR thread, handed to a thread's closure: for `conn_rec->current_thread`.
/// Not `Send`: it names the thread it was given to.
#[derive(Debug)]
pub struct CurrentThread(NonNull<sys::apr_thread_t>);

impl CurrentThread {
    /// The raw pointer, for `conn_rec->current_thread`.
    pub fn as_ptr(&self) -> *mut sys::apr_thread_t {
        self.0.as_ptr()
    }
}

/// Creates a process's threads: the pool their structures go to and their attributes.
/// Leaked at creation, so it outlives every thread; the pool is used under a lock, as an
/// APR pool must not be used by two threads at once.
pub struct Spawner {
    attr: ThreadAttr,
    pool: Mutex<Pool>,
}

impl Spawner {
    /// A spawner whose threads get `stack_size` bytes of stack (0 = APR's default),
    /// with their structures in `pool`. Errors: the APR status.
    pub fn new(pool: Pool, stack_size: usize) -> Result<&'static Spawner, i32> {
        let attr = ThreadAttr::joinable(&pool, stack_size)?;
        Ok(Box::leak(Box::new(Spawner {
            attr,
            pool: Mutex::new(pool),
        })))
    }

    /// Starts an APR thread named `name` (what `top -H` and /proc/PID/task/TID/comm
    /// show; at most 15 bytes) that runs `main`.
    /// Errors: the APR status (e.g. EAGAIN when the process is out of threads).
    pub fn spawn<F>(&'static self, name: &'static CStr, main: F) -> Result<AprThread, i32>
    where
        F: FnOnce(CurrentThread) + Send + 'static,
    {
        // A poisoned lock still guards a usable pool (nothing panics while holding it).
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        spawn(&self.attr, &pool, move |thd| {
            // SAFETY: PR_SET_NAME names the calling thread from a NUL-terminated string
            // (the kernel copies at most 15 bytes of it).
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
            main(thd)
        })
    }
}

/// Starts an APR thread (its structures in `pool`) that runs `main`; `attr` and `pool`
/// belong to a leaked [`Spawner`], so they outlive the thread.
fn spawn<F>(attr: &ThreadAttr, pool: &Pool, main: F) -> Result<AprThread, i32>
where
    F: FnOnce(CurrentThread) + Send + 'static,
{
    unsafe extern "C" fn trampoline<F: FnOnce(CurrentThread)>(
        thd: *mut sys::apr_thread_t,
        data: *mut c_void,
    ) -> *mut c_void {
        // SAFETY: `data` is the box `spawn` leaked for this thread alone.
        let main = unsafe { Box::from_raw(data as *mut F) };
        if let Some(thd) = NonNull::new(thd) {
            main(CurrentThread(thd));
        }
        ptr::null_mut()
    }
    let data = Box::into_raw(Box::new(main));
    let mut thd = ptr::null_mut();
    // SAFETY: attr and pool outlive the thread (their Spawner is leaked); the pool is
    // locked by the caller; the trampoline takes ownership of `data` when the thread starts.
    let create = httpd_thread_fns()
        .create
        .unwrap_or(sys::apr_thread_create as ThreadCreate);
    let rv = unsafe {
        create(
            &mut thd,
            attr.0.as_ptr(),
            Some(trampoline::<F>),
            data as *mut c_void,
            pool.as_ptr(),
        )
    };
    match NonNull::new(thd) {
        Some(t) if rv == 0 => Ok(AprThread(t)),
        _ => {
            // SAFETY: the thread did not start, so the box is still ours.
            drop(unsafe { Box::from_raw(data) });
            Err(if rv != 0 { rv } else { sys::APR_ENOMEM as i32 })
        }
    }
}

/// `ap_thread_create` (httpd.h; `apr_thread_create` has the same type).
type ThreadCreate = unsafe extern "C" fn(
    *mut *mut sys::apr_thread_t,
    *mut sys::apr_threadattr_t,
    sys::apr_thread_start_t,
    *mut c_void,
    *mut sys::apr_pool_t,
) -> sys::apr_status_t;
/// `ap_thread_main_create` (httpd.h).
type MainCreate =
    unsafe extern "C" fn(*mut *mut sys::apr_thread_t, *mut sys::apr_pool_t) -> sys::apr_status_t;
/// `ap_thread_current_after_fork` (httpd.h).
type AfterFork = unsafe extern "C" fn();

/// httpd's thread functions of 2.4.53 and later, looked up in the running httpd rather than
/// bound when it loads the module: a build against 2.4.53+ headers still loads into 2.4.52,
/// far enough for pre_config to refuse it by name (RW00060) instead of the loader failing on
/// an undefined symbol, and a build against 2.4.52's headers uses them in a newer httpd, as
/// that httpd's event does. `None` where the running httpd lacks one (or, with APR 1.8, makes
/// it a macro for APR's own: then APR's is taken).
pub struct HttpdThreadFns {
    create: Option<ThreadCreate>,
    main_create: Option<MainCreate>,
    after_fork: Option<AfterFork>,
}

/// The running httpd's [`HttpdThreadFns`], looked up on the first call (the parent calls it
/// before it forks, so a child only reads them).
pub fn httpd_thread_fns() -> &'static HttpdThreadFns {
    static FNS: OnceLock<HttpdThreadFns> = OnceLock::new();
    FNS.get_or_init(|| {
        let lookup = |name: &CStr| {
            // SAFETY: dlsym in the global scope, where httpd's and APR's exported functions
            // are, with a NUL-terminated name.
            NonNull::new(unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
        };
        // SAFETY (the transmutes): each name, where found, is httpd's (or APR's) exported
        // function of the type httpd.h declares for it, written out above.
        HttpdThreadFns {
            create: lookup(c"ap_thread_create")
                .map(|p| unsafe { std::mem::transmute::<*mut c_void, ThreadCreate>(p.as_ptr()) }),
            main_create: lookup(c"ap_thread_main_create")
                .map(|p| unsafe { std::mem::transmute::<*mut c_void, MainCreate>(p.as_ptr()) }),
            after_fork: lookup(c"ap_thread_current_after_fork")
                .or_else(|| lookup(c"apr_thread_current_after_fork"))
                .map(|p| unsafe { std::mem::transmute::<*mut c_void, AfterFork>(p.as_ptr()) }),
        }
    })
}

/// In a new child, before anything else uses APR's thread state: resets the thread-current
/// record it inherited (`ap_thread_current_after_fork`; nothing before httpd 2.4.53).
pub fn current_after_fork() {
    if let Some(f) = httpd_thread_fns().after_fork {
        // SAFETY: httpd's function, called in the fresh child, single-threaded.
        unsafe { f() };
    }
}

/// In a new child: APR's record of its main thread, in `pool` (`ap_thread_main_create`;
/// nothing before httpd 2.4.53, as that release's event creates none).
pub fn create_main_record(pool: &Pool) {
    if let Some(f) = httpd_thread_fns().main_create {
        let mut thd = ptr::null_mut();
        // SAFETY: httpd's function with a valid out-pointer and a live pool, called by the
        // child's main thread.
        unsafe { f(&mut thd, pool.as_ptr()) };
    }
}

/// Sleeps for `d` (`apr_sleep`); a signal cuts it short.
pub fn sleep(d: Duration) {
    // SAFETY: plain sleep.
    unsafe { sys::apr_sleep(d.as_micros() as sys::apr_interval_time_t) }
}

/// The calling thread's id as the scoreboard records it (`apr_os_thread_current`).
pub fn os_thread_id() -> sys::apr_os_thread_t {
    // SAFETY: trivially safe APR call.
    unsafe { sys::apr_os_thread_current() }
}
