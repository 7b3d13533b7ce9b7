//! APR pools as rworker uses them: per-connection transaction pools (ptrans) with
//! their own allocator, and plain subpools for child and runtime lifetimes.

use std::ptr::{self, NonNull};

use crate::sys;

/// A borrowed or owned `apr_pool_t`, passed between threads by value.
///
/// Mirrors httpd's pool handling in worker.c: an APR pool is not thread-safe, so a
/// `Pool` is used by one thread at a time; moving it through the fdqueue hands it
/// over. Destruction is explicit ([`Pool::destroy`]); dropping the handle does nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct Pool(NonNull<sys::apr_pool_t>);

// SAFETY: a pool is handed from one thread to another through the fdqueue or the
// recycled-pool stack, whose release/acquire orderings make the hand-off a
// happens-before edge; only one thread uses it at a time.
unsafe impl Send for Pool {}

impl Pool {
    /// Wraps a raw pool pointer; `None` for null.
    pub fn from_raw(p: *mut sys::apr_pool_t) -> Option<Pool> {
        NonNull::new(p).map(Pool)
    }

    /// The raw pointer, for FFI calls.
    pub fn as_ptr(self) -> *mut sys::apr_pool_t {
        self.0.as_ptr()
    }

    /// Creates a subpool of `parent` tagged `tag` (shown by pool debugging).
    /// Errors: the APR status when APR cannot allocate.
    ///
    /// # Safety
    /// `parent` must be a live pool of this process.
    pub unsafe fn create_sub(
        parent: *mut sys::apr_pool_t,
        tag: &'static std::ffi::CStr,
    ) -> Result<Pool, i32> {
        let mut p = ptr::null_mut();
        // SAFETY: parent is a live pool owned by this process; APR serialises child-list
        // edits through the parent allocator's mutex.
        let rv = unsafe { sys::apr_pool_create_ex(&mut p, parent, None, ptr::null_mut()) };
        if rv != 0 {
            return Err(rv);
        }
        // SAFETY: p was just created and is non-null on success; the tag is 'static.
        unsafe { sys::apr_pool_tag(p, tag.as_ptr()) };
        Pool::from_raw(p).ok_or(sys::APR_ENOMEM as i32)
    }

    /// Creates a transaction pool (ptrans) under `parent` with its own allocator,
    /// whose retained free memory is capped at `max_free` bytes (`MaxMemFree`; 0 = no cap),
    /// as worker.c's listener does.
    /// Errors: the APR status when APR cannot allocate.
    ///
    /// # Safety
    /// `parent` must be a live pool of this process.
    pub unsafe fn create_ptrans(
        parent: *mut sys::apr_pool_t,
        max_free: usize,
    ) -> Result<Pool, i32> {
        let mut allocator = ptr::null_mut();
        // SAFETY: plain APR constructor with an out-pointer.
        let rv = unsafe { sys::apr_allocator_create(&mut allocator) };
        if rv != 0 {
            return Err(rv);
        }
        let mut p = ptr::null_mut();
        // SAFETY: allocator is fresh and unowned; parent is a live pool (pconf).
        let rv = unsafe {
            sys::apr_allocator_max_free_set(allocator, max_free as _);
            sys::apr_pool_create_ex(&mut p, parent, None, allocator)
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
        Pool::from_raw(p).ok_or(sys::APR_ENOMEM as i32)
    }

    /// Runs the pool's cleanups and frees its memory for reuse (`apr_pool_clear`).
    pub fn clear(self) {
        // SAFETY: the caller holds the pool exclusively (type-level hand-off discipline).
        unsafe { sys::apr_pool_clear(self.as_ptr()) }
    }

    /// Destroys the pool and its subpools (`apr_pool_destroy`).
    pub fn destroy(self) {
        // SAFETY: as for clear; the handle must not be used afterwards.
        unsafe { sys::apr_pool_destroy(self.as_ptr()) }
    }

    /// Allocates `size` zeroed bytes in the pool (`apr_pcalloc`).
    pub fn calloc(self, size: usize) -> *mut std::ffi::c_void {
        // SAFETY: apr_palloc returns memory valid for the pool's lifetime (or aborts via
        // the pool's abort function); we zero exactly `size` bytes of it.
        unsafe {
            let m = sys::apr_palloc(self.as_ptr(), size as _);
            if !m.is_null() {
                ptr::write_bytes(m as *mut u8, 0, size);
            }
            m
        }
    }
}
