//! The listener → worker hand-off a child uses: rworker's own atomics-based fdqueue
//! and queue_info (`rworker-queue`, the default), or — for A/B measurements with the
//! process model held constant (`RWorkerQueue apr`) — httpd's own mutex + condition
//! variable fdqueue, which the server binary exports as `ap_queue_*`.
//!
//! httpd installs no header for its fdqueue (server/mpm_fdqueue.h, outside the MMN
//! guarantee), so the 2.4.x prototypes are declared here and the functions are looked
//! up at run time with `dlsym`; a server that lacks them makes `RWorkerQueue apr` a
//! configuration error instead of a failed `LoadModule`.

use std::ffi::{c_void, CStr};
use std::os::raw::c_int;
use std::ptr;

use rworker_queue::{FdQueue, PopError, PushError, QueueInfo, Terminated};

use crate::apr::pool::Pool;
use crate::mpm::child::Accepted;
use crate::mpm::config::QueueKind;
use crate::sys;

type Status = sys::apr_status_t;
type Qi = c_void; // fd_queue_info_t, opaque
type Q = c_void; // fd_queue_t, used only through its functions

/// httpd 2.4.x's fdqueue functions (server/mpm_fdqueue.h), resolved from the running
/// server. Shapes as in 2.4.x; `timer_event_t` is passed as null.
#[derive(Clone, Copy)]
pub struct AprQueueFns {
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

impl AprQueueFns {
    /// Looks up every function; Err(name) names the first one the server lacks.
    // Each transmute's target type is the struct field it initialises.
    #[allow(clippy::missing_transmute_annotations)]
    pub fn resolve() -> Result<AprQueueFns, String> {
        Ok(AprQueueFns {
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

/// One child's hand-off: fdqueue (accepted connections, capacity ThreadsPerChild)
/// plus queue_info (idle workers, recycled ptrans).
// One value per child, created once and never moved: the padded atomic variant's size
// costs nothing, while boxing it would add an indirection to every hand-off.
#[allow(clippy::large_enum_variant)]
pub enum Handoff {
    /// rworker-queue: atomics, futex parking only when a thread must sleep.
    Atomic {
        /// Accepted connections, listener → workers.
        fdq: FdQueue<Accepted>,
        /// Idle-worker count and the recycled-pool stack (ThreadsPerChild + 1 pools).
        qi: QueueInfo<Pool>,
    },
    /// httpd's ap_queue_* (mutex + condition variable), allocated in `pruntime`.
    Apr {
        /// The resolved functions.
        f: AprQueueFns,
        /// fd_queue_t*.
        q: *mut Q,
        /// fd_queue_info_t*.
        qi: *mut Qi,
    },
}

// SAFETY: the Apr variant's objects are httpd's thread-safe queue structures (their own
// mutexes and atomics); the Atomic variant is Send + Sync by construction.
unsafe impl Sync for Handoff {}
// SAFETY: as above.
unsafe impl Send for Handoff {}

impl Handoff {
    /// Creates the hand-off for `threads_per_child` workers (`pruntime` holds httpd's
    /// structures for the Apr kind). Errors: the APR status, or APR_ENOTIMPL when the
    /// server lost the fdqueue functions since the configuration was read.
    pub fn new(kind: QueueKind, threads_per_child: usize, pruntime: Pool) -> Result<Handoff, i32> {
        match kind {
            QueueKind::Atomic => Ok(Handoff::Atomic {
                fdq: FdQueue::new(threads_per_child),
                qi: QueueInfo::new(threads_per_child + 1),
            }),
            QueueKind::Apr => {
                let f = AprQueueFns::resolve().map_err(|_| sys::APR_ENOTIMPL as i32)?;
                let (mut q, mut qi) = (ptr::null_mut(), ptr::null_mut());
                // SAFETY: httpd's constructors with valid out-pointers and a live pool.
                unsafe {
                    let rv = (f.create)(&mut q, threads_per_child as c_int, pruntime.as_ptr());
                    if rv != 0 {
                        return Err(rv);
                    }
                    let rv =
                        (f.info_create)(&mut qi, pruntime.as_ptr(), threads_per_child as c_int, -1);
                    if rv != 0 {
                        return Err(rv);
                    }
                }
                Ok(Handoff::Apr { f, q, qi })
            }
        }
    }

    /// Listener: reserve an idle worker, blocking while none is idle.
    /// Err(Terminated) once queue_info was terminated (the listener must exit).
    pub fn wait_for_idler(&self) -> Result<(), Terminated> {
        match self {
            Handoff::Atomic { qi, .. } => qi.wait_for_idler().map(|_| ()),
            Handoff::Apr { f, qi, .. } => {
                let mut blocked = 0;
                // SAFETY: live queue_info; httpd's function is thread-safe.
                let rv = unsafe { (f.info_wait_for_idler)(*qi, &mut blocked) };
                if rv == sys::APR_EOF as Status {
                    Err(Terminated)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Listener: a recycled transaction pool, if any.
    pub fn pop_pool(&self) -> Option<Pool> {
        match self {
            Handoff::Atomic { qi, .. } => qi.pop_pool(),
            Handoff::Apr { f, qi, .. } => {
                let mut p = ptr::null_mut();
                // SAFETY: single popper (the listener), as httpd's stack requires.
                unsafe { (f.info_pop_pool)(*qi, &mut p) };
                Pool::from_raw(p)
            }
        }
    }

    /// Listener: hand an accepted connection to the workers; gives it back on failure.
    pub fn push(&self, acc: Accepted) -> Result<(), Accepted> {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.push(acc).map_err(|e| match e {
                PushError::Full(a) | PushError::Terminated(a) => a,
            }),
            Handoff::Apr { f, q, .. } => {
                // SAFETY: live queue; an idler was reserved, so the ring has room.
                let rv =
                    unsafe { (f.push_socket)(*q, acc.sock, ptr::null_mut(), acc.ptrans.as_ptr()) };
                if rv == 0 {
                    Ok(())
                } else {
                    Err(acc)
                }
            }
        }
    }

    /// Worker: become idle, recycling the previous connection's (cleared) pool.
    pub fn set_idle(&self, recycle: Option<Pool>) {
        match self {
            Handoff::Atomic { qi, .. } => {
                if let Some(p) = recycle {
                    if let Err(p) = qi.push_pool(p) {
                        p.destroy();
                    }
                }
                qi.set_idle();
            }
            Handoff::Apr { f, qi, .. } => {
                // SAFETY: httpd's set_idle pushes (and clears) the pool, then counts the idler.
                unsafe { (f.info_set_idle)(*qi, recycle.map_or(ptr::null_mut(), |p| p.as_ptr())) };
            }
        }
    }

    /// Worker: the next connection. Err(Interrupted) after `interrupt_all`;
    /// Err(Terminated) once the queue was terminated and drained.
    pub fn pop(&self) -> Result<Accepted, PopError> {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.pop(),
            Handoff::Apr { f, q, .. } => {
                let (mut sd, mut p) = (ptr::null_mut(), ptr::null_mut());
                // SAFETY: live queue; baton and timer out-pointers are not used by worker.
                let rv = unsafe {
                    (f.pop_something)(*q, &mut sd, ptr::null_mut(), &mut p, ptr::null_mut())
                };
                match (rv, Pool::from_raw(p)) {
                    (0, Some(ptrans)) if !sd.is_null() => Ok(Accepted { sock: sd, ptrans }),
                    (rv, _) if rv == sys::APR_EOF as Status => Err(PopError::Terminated),
                    _ => Err(PopError::Interrupted),
                }
            }
        }
    }

    /// Wakes every waiting worker (immediate stop).
    pub fn interrupt_all(&self) {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.interrupt_all(),
            // SAFETY: live queue.
            Handoff::Apr { f, q, .. } => unsafe {
                (f.interrupt_all)(*q);
            },
        }
    }

    /// Workers drain what is queued, then get Terminated.
    pub fn term_queue(&self) {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.term(),
            // SAFETY: live queue.
            Handoff::Apr { f, q, .. } => unsafe {
                (f.term)(*q);
            },
        }
    }

    /// The listener's wait for an idler returns Err from now on.
    pub fn term_idlers(&self) {
        match self {
            Handoff::Atomic { qi, .. } => qi.term(),
            // SAFETY: live queue_info.
            Handoff::Apr { f, qi, .. } => unsafe {
                (f.info_term)(*qi);
            },
        }
    }

    /// Destroys every recycled pool; later recycling destroys instead of keeping.
    pub fn free_idle_pools(&self) {
        match self {
            Handoff::Atomic { qi, .. } => qi.free_idle_pools().into_iter().for_each(Pool::destroy),
            // SAFETY: live queue_info.
            Handoff::Apr { f, qi, .. } => unsafe { (f.info_free_idle_pools)(*qi) },
        }
    }
}
