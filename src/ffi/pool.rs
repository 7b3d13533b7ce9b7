//! APR pools as rworker uses them: per-connection transaction pools (ptrans) with their
//! own allocator, and subpools for a child's lifetime and its threads' structures.
//!
//! [`Pool`] owns its pool: it is not `Copy`, dropping it destroys the pool, and it moves
//! between threads only by value, so "the pool travels with the connection" is checked
//! by the compiler. [`ConfigPool`] is the generation's `pconf`, which httpd owns: a
//! copyable handle that can create subpools but never destroy.

use std::ffi::CStr;
use std::ptr::{self, NonNull};

use crate::sys;

/// An owned `apr_pool_t`; dropping it destroys the pool and its subpools.
///
/// An APR pool is not thread-safe: one thread uses it at a time. `Pool` is `Send` but
/// not `Sync` or `Copy`, so whoever holds the value is that thread.
#[derive(Debug)]
pub struct Pool(NonNull<sys::apr_pool_t>);

// SAFETY: an APR pool may be used from any thread as long as one thread at a time does;
// the value is moved (never shared: not Sync, not Copy) from thread to thread through the
// fdqueue or the recycled-pool stack, whose release/acquire orderings make each move a
// happens-before edge.
unsafe impl Send for Pool {}

impl Pool {
    /// Takes ownership of a raw pool; `None` for null.
    ///
    /// # Safety
    /// `p` is a live pool that nobody else uses or destroys from now on, and whose parent
    /// outlives this value.
    pub unsafe fn from_raw(p: *mut sys::apr_pool_t) -> Option<Pool> {
        NonNull::new(p).map(Pool)
    }

    /// Gives up ownership (to httpd's fdqueue, say) without destroying the pool.
    pub fn into_raw(self) -> *mut sys::apr_pool_t {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The raw pointer, for FFI calls that use the pool while `self` is borrowed.
    pub fn as_ptr(&self) -> *mut sys::apr_pool_t {
        self.0.as_ptr()
    }

    /// Runs the pool's cleanups and frees its memory for reuse (`apr_pool_clear`).
    pub fn clear(&mut self) {
        // SAFETY: the pool is live and `&mut self` is the only way to it.
        unsafe { sys::apr_pool_clear(self.as_ptr()) }
    }

    /// Destroys the pool and its subpools (`apr_pool_destroy`); the same as dropping it.
    pub fn destroy(self) {
        drop(self)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: we own the pool (from_raw's contract) and this is its only destruction.
        unsafe { sys::apr_pool_destroy(self.as_ptr()) }
    }
}

/// # Safety
/// `parent` is a live pool that outlives the new one.
unsafe fn create_sub_raw(parent: *mut sys::apr_pool_t, tag: &'static CStr) -> Result<Pool, i32> {
    let mut p = ptr::null_mut();
    // SAFETY: parent is live (caller); APR serialises edits of the parent's child list
    // through the parent allocator's mutex.
    let rv = unsafe { sys::apr_pool_create_ex(&mut p, parent, None, ptr::null_mut()) };
    if rv != 0 {
        return Err(rv);
    }
    // SAFETY: p was just created and is non-null on success; the tag is 'static.
    unsafe { sys::apr_pool_tag(p, tag.as_ptr()) };
    // SAFETY: the new pool is ours alone; its parent outlives it (caller).
    unsafe { Pool::from_raw(p) }.ok_or(sys::APR_ENOMEM as i32)
}

/// The generation's configuration pool (`pconf`), owned by httpd: it lives until the
/// next configuration pass in the parent, and until exit in a child. Creating subpools
/// is all rworker does with it.
#[derive(Clone, Copy, Debug)]
pub struct ConfigPool(NonNull<sys::apr_pool_t>);

// SAFETY: the handle only creates subpools, which APR serialises through pconf's
// allocator mutex (httpd's pconf shares the global allocator, which has one); in a child the
// main thread, the starter, the listener and (RWorkerAccept workers) each worker's first
// connection do it.
unsafe impl Send for ConfigPool {}
// SAFETY: as for Send.
unsafe impl Sync for ConfigPool {}

impl ConfigPool {
    /// Wraps the generation's pconf; `None` for null.
    ///
    /// # Safety
    /// `p` is httpd's pconf of the running generation, live for as long as the handle is
    /// used (in a child: until exit).
    pub unsafe fn new(p: *mut sys::apr_pool_t) -> Option<ConfigPool> {
        NonNull::new(p).map(ConfigPool)
    }

    /// The raw pointer, for httpd calls that take pconf.
    pub fn as_ptr(self) -> *mut sys::apr_pool_t {
        self.0.as_ptr()
    }

    /// Creates a subpool tagged `tag`. Errors: the APR status.
    pub fn create_sub(self, tag: &'static CStr) -> Result<Pool, i32> {
        // SAFETY: pconf outlives its subpools (new's contract).
        unsafe { create_sub_raw(self.as_ptr(), tag) }
    }

    /// Creates a transaction pool (ptrans) with its own allocator, whose retained free
    /// memory is capped at `max_free` bytes (`MaxMemFree`; 0 = no cap), as worker.c's
    /// listener does. Errors: the APR status.
    pub fn create_ptrans(self, max_free: usize) -> Result<Pool, i32> {
        let mut allocator = ptr::null_mut();
        // SAFETY: plain APR constructor with an out-pointer.
        let rv = unsafe { sys::apr_allocator_create(&mut allocator) };
        if rv != 0 {
            return Err(rv);
        }
        let mut p = ptr::null_mut();
        // SAFETY: allocator is fresh and unowned; pconf is live (new's contract).
        let rv = unsafe {
            sys::apr_allocator_max_free_set(allocator, max_free as _);
            sys::apr_pool_create_ex(&mut p, self.as_ptr(), None, allocator)
        };
        if rv != 0 {
            // SAFETY: the allocator was never attached to a pool.
            unsafe { sys::apr_allocator_destroy(allocator) };
            return Err(rv);
        }
        // SAFETY: p owns allocator from here on, so destroying p frees it.
        unsafe {
            sys::apr_allocator_owner_set(allocator, p);
            sys::apr_pool_tag(p, c"transaction".as_ptr());
        }
        // SAFETY: the new pool is ours alone; pconf outlives it.
        unsafe { Pool::from_raw(p) }.ok_or(sys::APR_ENOMEM as i32)
    }

    /// Allocates `size` bytes that live as long as pconf (`apr_palloc`).
    pub fn alloc(self, size: usize) -> *mut std::ffi::c_void {
        // SAFETY: pconf is live; APR aborts through the pool's abort function on failure.
        unsafe { sys::apr_palloc(self.as_ptr(), size as _) }
    }
}
