//! The one place the queue code gets its atomics, cells and spin hints from.
//!
//! In a normal build these are `std`'s types. Built with `RUSTFLAGS="--cfg loom"` they are
//! [loom](https://docs.rs/loom)'s, so `tests/loom.rs` model-checks exactly the code that runs in
//! production (the pattern tokio and crossbeam use). Only the small API subset the crate needs is
//! wrapped; loom's `UnsafeCell` has a closure-based API, which [`UnsafeCell`] mirrors for std.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicIsize, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

pub(crate) use std::sync::atomic::Ordering;

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std::cell::UnsafeCell` behind the closure API of `loom::cell::UnsafeCell`, so the same call
/// sites compile in both builds and loom can check every access for data races.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a mutable raw pointer to the contents; the caller upholds exclusivity.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One step of a busy-wait. Under loom this is a yield point, which loom needs to explore a loop
/// that waits for another thread (without it the model would not terminate).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Give the CPU away while another thread finishes a few-instruction critical window (a producer
/// between claiming a slot and publishing it). On a 2-core machine that thread may be preempted,
/// so spinning would only burn its time slice.
#[inline(always)]
pub(crate) fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// Spin rounds a waiter makes before it yields: round `i < SPIN_ROUNDS` spins `2^i` hints
/// (about 127 `pause` instructions in all, a few microseconds at most).
#[cfg(not(loom))]
const SPIN_ROUNDS: u32 = 7;

/// Total rounds before a waiter parks: after the spin rounds, 16 `sched_yield` rounds. On a
/// 2-core machine the thread that will feed us often needs *our* CPU, so yielding beats spinning;
/// still bounded (on an idle CPU a yield returns in well under a microsecond). Measured with the
/// queue bench, 1 listener to 8 workers on 2 cores: with 4 yields 0.06-0.16 parks per hand-off
/// and 560-1200 ns per hand-off; with 16, 0.00-0.01 parks and 500-580 ns. An httpd child's idle
/// workers do not spin at all once parks are long (`adaptive_spin`).
/// Under loom one round is enough to model the spin path without blowing up the state space.
#[cfg(not(loom))]
pub(crate) const WAIT_ROUNDS: u32 = SPIN_ROUNDS + 16;
#[cfg(loom)]
pub(crate) const WAIT_ROUNDS: u32 = 1;

/// One bounded wait step: `2^round` spin hints for the first rounds, then a yield (a single
/// yield point under loom).
#[inline]
pub(crate) fn spin(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        spin_hint();
    }
    #[cfg(not(loom))]
    if round < SPIN_ROUNDS {
        for _ in 0..(1u32 << round) {
            spin_hint();
        }
    } else {
        std::thread::yield_now();
    }
}
