//! httpd's own fdqueue and queue_info (mutex + condition variable, `ap_queue_*`), which
//! the server binary exports: `RWorkerQueue apr` uses them to A/B rworker's queues with
//! the process model held constant.
//!
//! httpd installs no header for them (server/mpm_fdqueue.h, outside the MMN guarantee),
//! so the 2.4.x prototypes are declared here and the functions are looked up at run time
//! with `dlsym`; a server that lacks them makes `RWorkerQueue apr` a configuration error
//! instead of a failed `LoadModule`.

use std::ffi::{c_void, CStr};
use std::os::raw::c_int;
use std::ptr;

use crate::ffi::pool::Pool;
use crate::ffi::socket::ClientSocket;
use crate::sys;

type Status = sys::apr_status_t;
type Qi = c_void; // fd_queue_info_t, opaque
type Q = c_void; // fd_queue_t, used only through its functions

/// httpd 2.4.x's fdqueue functions, resolved from the running server. Shapes as in
/// 2.4.x; `timer_event_t` is passed as null.
#[derive(Clone, Copy)]
struct Fns {
    info_create: unsafe extern "C" fn(*mut *mut Qi, *mut sys::apr_pool_t, c_int, c_int) -> Status,
    info_set_idle: unsafe extern "C" fn(*mut Qi, *mut sys::apr_pool_t) -> Status,
    info_wait_for_idler: unsafe extern "C" fn(*mut Qi, *mut c_int) -> Status,
    info_term: unsafe extern "C" fn(*mut Qi) -> Status,
    info_pop_pool: unsafe extern "C" fn(*mut Qi, *mut *mut sys::apr_pool_t),
    info_free_idle_pools: unsafe extern "C" fn(*mut Qi),
    create: unsafe extern "C" fn(*mut *mut Q, c_int, *mut sys::apr_pool_t) -> Status,
    push_socket: unsafe extern "C" fn(
        *mut Q,
        *mut sys::apr_socket_t,
        *mut c_void,
        *mut sys::apr_pool_t,
    ) -> Status,
    pop_something: unsafe extern "C" fn(
        *mut Q,
        *mut *mut sys::apr_socket_t,
        *mut *mut c_void,
        *mut *mut sys::apr_pool_t,
        *mut *mut c_void,
    ) -> Status,
    interrupt_all: unsafe extern "C" fn(*mut Q) -> Status,
    term: unsafe extern "C" fn(*mut Q) -> Status,
}

fn lookup(name: &CStr) -> Result<*mut c_void, String> {
    // SAFETY: dlsym over the global scope with a valid C string.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        Err(name.to_string_lossy().into_owned())
    } else {
        Ok(p)
    }
}

macro_rules! resolve_fn {
    ($name:literal) => {
        // SAFETY: the symbol is httpd 2.4.x's function of exactly this prototype
        // (server/mpm_fdqueue.h); a function pointer and a data pointer have the same size.
        unsafe { std::mem::transmute::<*mut c_void, _>(lookup($name)?) }
    };
}

impl Fns {
    // Each transmute's target type is the struct field it initialises.
    #[allow(clippy::missing_transmute_annotations)]
    fn resolve() -> Result<Fns, String> {
        Ok(Fns {
            info_create: resolve_fn!(c"ap_queue_info_create"),
            info_set_idle: resolve_fn!(c"ap_queue_info_set_idle"),
            info_wait_for_idler: resolve_fn!(c"ap_queue_info_wait_for_idler"),
            info_term: resolve_fn!(c"ap_queue_info_term"),
            info_pop_pool: resolve_fn!(c"ap_queue_info_pop_pool"),
            info_free_idle_pools: resolve_fn!(c"ap_queue_info_free_idle_pools"),
            create: resolve_fn!(c"ap_queue_create"),
            push_socket: resolve_fn!(c"ap_queue_push_socket"),
            pop_something: resolve_fn!(c"ap_queue_pop_something"),
            interrupt_all: resolve_fn!(c"ap_queue_interrupt_all"),
            term: resolve_fn!(c"ap_queue_term"),
        })
    }
}

/// Whether the running server exports every function; Err names the first one missing.
pub fn available() -> Result<(), String> {
    Fns::resolve().map(|_| ())
}

/// What a worker's pop gave.
pub enum Popped {
    /// A connection: its socket and its transaction pool.
    Connection(ClientSocket, Pool),
    /// Woken without one (interrupt_all).
    Interrupted,
    /// The queue was terminated and drained.
    Terminated,
}

/// One child's fdqueue and queue_info of httpd's kind, allocated in a pool that lives
/// until the child exits.
pub struct AprQueue {
    f: Fns,
    q: *mut Q,
    qi: *mut Qi,
}

// SAFETY: httpd's queue structures are thread-safe (their own mutexes and condition
// variables); the pointers are written once, by `new`.
unsafe impl Send for AprQueue {}
// SAFETY: as for Send.
unsafe impl Sync for AprQueue {}

impl AprQueue {
    /// Creates the queues for `capacity` workers in `pool` ('static: it outlives them).
    /// Errors: the APR status, or APR_ENOTIMPL when the functions are gone.
    pub fn new(capacity: usize, pool: &'static Pool) -> Result<AprQueue, i32> {
        let f = Fns::resolve().map_err(|_| sys::APR_ENOTIMPL as i32)?;
        let (mut q, mut qi) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: httpd's constructors with valid out-pointers and a live pool.
        unsafe {
            let rv = (f.create)(&mut q, capacity as c_int, pool.as_ptr());
            if rv != 0 {
                return Err(rv);
            }
            let rv = (f.info_create)(&mut qi, pool.as_ptr(), capacity as c_int, -1);
            if rv != 0 {
                return Err(rv);
            }
        }
        Ok(AprQueue { f, q, qi })
    }

    /// Listener: reserves an idle worker, blocking while none is idle; false once
    /// queue_info was terminated.
    pub fn wait_for_idler(&self) -> bool {
        let mut blocked = 0;
        // SAFETY: live queue_info; httpd's function is thread-safe.
        unsafe { (self.f.info_wait_for_idler)(self.qi, &mut blocked) != sys::APR_EOF as Status }
    }

    /// Listener: a recycled transaction pool, if any.
    pub fn pop_pool(&self) -> Option<Pool> {
        let mut p = ptr::null_mut();
        // SAFETY: the listener is the single popper, as httpd's stack requires; a popped
        // pool is ours alone and its parent (pconf) outlives the child.
        unsafe {
            (self.f.info_pop_pool)(self.qi, &mut p);
            Pool::from_raw(p)
        }
    }

    /// Listener: hands a connection to the workers; gives it back on failure.
    pub fn push(&self, sock: ClientSocket, ptrans: Pool) -> Result<(), (ClientSocket, Pool)> {
        // SAFETY: live queue; on success the queue owns both until a worker pops them.
        let rv = unsafe {
            (self.f.push_socket)(self.q, sock.as_ptr(), ptr::null_mut(), ptrans.as_ptr())
        };
        if rv == 0 {
            sock.into_raw();
            ptrans.into_raw();
            Ok(())
        } else {
            Err((sock, ptrans))
        }
    }

    /// Worker: becomes idle, handing the previous connection's pool to the recycled
    /// stack (httpd's set_idle clears it, or destroys it when the stack is full).
    pub fn set_idle(&self, recycle: Option<Pool>) {
        let p = recycle.map_or(ptr::null_mut(), Pool::into_raw);
        // SAFETY: live queue_info; httpd takes ownership of the pool.
        unsafe { (self.f.info_set_idle)(self.qi, p) };
    }

    /// Worker: the next connection.
    pub fn pop(&self) -> Popped {
        let (mut sd, mut p) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: live queue; baton and timer out-pointers are not used by worker.
        let rv = unsafe {
            (self.f.pop_something)(self.q, &mut sd, ptr::null_mut(), &mut p, ptr::null_mut())
        };
        if rv == sys::APR_EOF as Status {
            return Popped::Terminated;
        }
        // SAFETY: on success the queue handed us the socket and its pool, ours alone.
        match unsafe { (ClientSocket::from_raw(sd), Pool::from_raw(p)) } {
            (Some(s), Some(p)) if rv == 0 => Popped::Connection(s, p),
            _ => Popped::Interrupted,
        }
    }

    /// Wakes every waiting worker (immediate stop).
    pub fn interrupt_all(&self) {
        // SAFETY: live queue.
        unsafe { (self.f.interrupt_all)(self.q) };
    }

    /// Workers drain what is queued, then get Terminated.
    pub fn term(&self) {
        // SAFETY: live queue.
        unsafe { (self.f.term)(self.q) };
    }

    /// The listener's wait for an idler fails from now on.
    pub fn term_idlers(&self) {
        // SAFETY: live queue_info.
        unsafe { (self.f.info_term)(self.qi) };
    }

    /// Destroys every recycled pool.
    pub fn free_idle_pools(&self) {
        // SAFETY: live queue_info.
        unsafe { (self.f.info_free_idle_pools)(self.qi) };
    }
}
