//! The MPM's single-threaded phases: the [`SingleThreaded`] token that proves the
//! caller runs in one (the parent's configuration hooks and main loop, a fresh child
//! before its threads), and [`PhaseCell`], a process-wide value that only such a phase
//! writes and every thread may read as a copy.

use std::cell::UnsafeCell;
use std::marker::PhantomData;

/// Proof that the caller runs where the MPM is single-threaded: the parent process
/// (its configuration hooks and the `mpm` hook; the parent has no other threads), or a
/// freshly forked child before it starts threads. Not `Send`: it stays on that thread.
#[derive(Clone, Copy, Debug)]
pub struct SingleThreaded(PhantomData<*const ()>);

impl SingleThreaded {
    /// Asserts the single-threaded phase.
    ///
    /// # Safety
    /// The calling thread is the parent's (configuration hooks, `mpm` hook, directive
    /// handlers), or a child's main thread before it creates any thread; and no other
    /// thread of the process touches the MPM's state while the token is used.
    pub unsafe fn assume() -> SingleThreaded {
        SingleThreaded(PhantomData)
    }
}

/// A `Copy` value written only while the MPM is single-threaded ([`SingleThreaded`]
/// token) and read as a copy, never borrowed: no reference to it outlives a read.
pub struct PhaseCell<T: Copy>(UnsafeCell<T>);

// SAFETY: writes need the SingleThreaded token, whose contract excludes other threads
// touching the MPM's state meanwhile; children and their threads only read, after the
// fork and thread creation that order them after the last write.
unsafe impl<T: Copy + Send> Sync for PhaseCell<T> {}

impl<T: Copy> PhaseCell<T> {
    /// Wraps an initial value.
    pub const fn new(v: T) -> Self {
        PhaseCell(UnsafeCell::new(v))
    }

    /// A copy of the value.
    pub fn get(&self) -> T {
        // SAFETY: no write runs concurrently (writes need the SingleThreaded token), and
        // the copy is made before this returns, so no reference escapes.
        unsafe { *self.0.get() }
    }

    /// Replaces the value.
    pub fn set(&self, _: SingleThreaded, v: T) {
        // SAFETY: the token's contract: no other thread reads or writes meanwhile.
        unsafe { *self.0.get() = v }
    }

    /// Changes the value in place.
    pub fn update(&self, token: SingleThreaded, f: impl FnOnce(&mut T)) {
        let mut v = self.get();
        f(&mut v);
        self.set(token, v);
    }
}
