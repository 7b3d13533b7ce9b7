//! Counters in anonymous shared memory: one row of atomics per scoreboard slot, mapped
//! by the parent before it forks, so every child writes its row and any child (the one
//! serving /server-status) reads them all. The mapping is made once per httpd process
//! and kept in the retained block, so it survives restarts and the DSO's reloads; it is
//! never unmapped.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::ffi::phase::SingleThreaded;

/// Counters per slot (room for more than rworker uses: `crate::mpm::status::COUNTERS`).
pub const PER_SLOT: usize = 16;

/// One slot's row.
pub type Row = [AtomicU64; PER_SLOT];

/// The shared rows: `slots` rows of [`PER_SLOT`] counters, zero at creation. Mapped
/// until the process exits and never unmapped, so the handle is `Copy`.
#[derive(Clone, Copy, Debug)]
pub struct SharedRows {
    base: NonNull<Row>,
    slots: usize,
}

// SAFETY: the memory holds atomics only, lives until exit, and every access is atomic.
unsafe impl Send for SharedRows {}
// SAFETY: as for Send.
unsafe impl Sync for SharedRows {}

impl SharedRows {
    /// Maps `slots` zeroed rows shared with every process forked afterwards; None when
    /// the kernel refuses (the status figures are then missing, nothing else).
    pub fn map(_: SingleThreaded, slots: usize) -> Option<SharedRows> {
        let bytes = std::mem::size_of::<Row>().checked_mul(slots.max(1))?;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // Anonymous mappings are zero-filled, and all-zero bytes are valid AtomicU64s.
        NonNull::new(p as *mut Row).map(|base| SharedRows {
            base,
            slots: slots.max(1),
        })
    }

    /// The raw parts, to keep in the retained block.
    pub fn into_raw(self) -> (*mut std::ffi::c_void, usize) {
        (self.base.as_ptr() as *mut _, self.slots)
    }

    /// Rebuilds the handle from [`SharedRows::into_raw`]'s parts; None for null.
    ///
    /// # Safety
    /// The parts come from `into_raw` in this process or its parent before fork.
    pub unsafe fn from_raw(p: *mut std::ffi::c_void, slots: usize) -> Option<SharedRows> {
        NonNull::new(p as *mut Row).map(|base| SharedRows { base, slots })
    }

    /// Number of rows.
    pub fn slots(self) -> usize {
        self.slots
    }

    /// Row `slot` (< slots()).
    pub fn row(self, slot: usize) -> &'static Row {
        assert!(
            slot < self.slots,
            "rworker: counter row {slot} of {}",
            self.slots
        );
        // SAFETY: in bounds (checked); the mapping lives until exit and holds atomics only.
        unsafe { &*self.base.as_ptr().add(slot) }
    }
}
