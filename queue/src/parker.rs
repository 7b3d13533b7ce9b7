//! The park/wake primitive: a 32-bit *sequence word* threads sleep on, futex style.
//!
//! This is the "eventcount" pattern (Vyukov; also Linux futex usage, folly's `EventCount`):
//! a waiter reads the word, re-checks its condition, and sleeps only if the word still holds the
//! value it read. A waker first makes its condition true, then bumps the word, then wakes. Because
//! the kernel compares the word and enqueues the waiter atomically with respect to wakes, a bump
//! that lands anywhere after the waiter's read makes the sleep return at once: no lost wake-up.
//!
//! In production the word is a real futex (`atomic-wait`: `futex(2)` on Linux, `WaitOnAddress`
//! on Windows, `__ulock` on macOS). Under loom, which cannot model a futex, the same contract is
//! built from a loom `Mutex` + `Condvar`: the waiter compares the word under the mutex, and a waker
//! passes through the mutex before notifying, which gives exactly the futex's atomicity.
//!
//! Two levels of "is anyone there?": callers own a counter of *registered* waiters (a waiter
//! registers before its last re-check), so a hand-off with none registered does not even touch
//! this word. Here, `parked` counts the threads actually inside [`SeqWord::wait`]; a waker that
//! bumped the word skips the wake system call when it is zero, which removes the wasted wake for
//! a waiter that registered but found work in its re-check.

use crate::sync::{fence, AtomicU32, AtomicUsize, Ordering};
use std::sync::atomic::{AtomicU64 as StatCounter, Ordering as StatOrdering};

/// A futex word plus the statistics of its slow path.
#[derive(Debug)]
pub(crate) struct SeqWord {
    /// Invariant: bumped (wrapping +1) by every waker *after* it made its wake condition visible
    /// and *before* it wakes; a sleeper sleeps only while the word equals the value it read
    /// before its last re-check of the condition. Wraps at 2^32 bumps; a sleeper would have to
    /// miss exactly 2^32 bumps between its read and its sleep to be fooled.
    word: AtomicU32,
    /// Threads inside `wait` (between announcing themselves and returning). Invariant: a thread
    /// increments it and issues a SeqCst fence *before* the kernel compares `word`, so a waker
    /// that bumped `word` and then (after its own SeqCst fence) reads 0 here knows that any
    /// waiter still to arrive will see the bump and not sleep: the wake call can be skipped.
    parked: AtomicUsize,
    /// loom only: serialises compare-and-sleep against bump-and-wake, as the futex bucket lock does.
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    /// loom only: where modelled sleepers wait.
    #[cfg(loom)]
    cond: loom::sync::Condvar,
    /// Times a thread went to sleep on this word (statistics only; plain std atomics, not
    /// modelled by loom, and never read by the algorithm).
    parks: StatCounter,
    /// Wake calls issued (one per `wake_one`/`wake_all`, i.e. one system call each).
    wakes: StatCounter,
}

impl SeqWord {
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
            parked: AtomicUsize::new(0),
            #[cfg(loom)]
            lock: loom::sync::Mutex::new(()),
            #[cfg(loom)]
            cond: loom::sync::Condvar::new(),
            parks: StatCounter::new(0),
            wakes: StatCounter::new(0),
        }
    }

    /// Reads the word before the caller's final re-check.
    ///
    /// Acquire: pairs with the Release half of [`SeqWord::bump`]; if we read a bumped value, the
    /// waker's condition (published before its bump) is visible to our re-check.
    #[inline]
    pub(crate) fn load(&self) -> u32 {
        self.word.load(Ordering::Acquire)
    }

    /// Advances the word. Called by a waker after making its condition visible.
    ///
    /// Release: the condition (an item, an idler, a flag) happens-before any reader that sees the
    /// new value. SeqCst as well, so that bumps are totally ordered with the callers' SeqCst
    /// fences and counters in the Dekker-style handshakes documented at each call site.
    #[inline]
    pub(crate) fn bump(&self) {
        self.word.fetch_add(1, Ordering::SeqCst);
    }

    /// Sleeps while the word equals `seen`. May return spuriously; callers loop and re-check.
    pub(crate) fn wait(&self, seen: u32) {
        self.parks.fetch_add(1, StatOrdering::Relaxed);
        // Announce, then SeqCst fence, then let the kernel compare the word: the mirror of
        // `wake_*` (bump; fence; read `parked`). Either the waker sees us and wakes, or our
        // compare sees its bump and returns at once.
        self.parked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.sleep(seen);
        // Relaxed: leaving late only costs a waker one wasted wake call.
        self.parked.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether a wake call may find someone; see `parked`. Called after the caller's bump.
    #[inline]
    fn anyone_parked(&self) -> bool {
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        self.parked.load(Ordering::Relaxed) != 0
    }

    /// The futex wait proper (or its loom model).
    fn sleep(&self, seen: u32) {
        #[cfg(not(loom))]
        atomic_wait::wait(&self.word, seen);
        #[cfg(loom)]
        {
            let guard = self.lock.lock().unwrap();
            // Compare under the lock: a waker bumps before it takes the lock, so either we see
            // the bump here or we are inside `wait` when it notifies.
            if self.word.load(Ordering::SeqCst) == seen {
                drop(self.cond.wait(guard).unwrap());
            }
        }
    }

    /// Wakes at most one sleeper (one system call, skipped when no thread is inside `wait`).
    /// The caller has already bumped.
    pub(crate) fn wake_one(&self) {
        if !self.anyone_parked() {
            return;
        }
        self.wakes.fetch_add(1, StatOrdering::Relaxed);
        #[cfg(not(loom))]
        atomic_wait::wake_one(&self.word);
        #[cfg(loom)]
        {
            drop(self.lock.lock().unwrap());
            self.cond.notify_one();
        }
    }

    /// Wakes every sleeper (one system call, skipped when no thread is inside `wait`).
    /// The caller has already bumped.
    pub(crate) fn wake_all(&self) {
        if !self.anyone_parked() {
            return;
        }
        self.wakes.fetch_add(1, StatOrdering::Relaxed);
        #[cfg(not(loom))]
        atomic_wait::wake_all(&self.word);
        #[cfg(loom)]
        {
            drop(self.lock.lock().unwrap());
            self.cond.notify_all();
        }
    }

    /// Counters so far.
    pub(crate) fn stats(&self) -> WaitStats {
        WaitStats {
            parks: self.parks.load(StatOrdering::Relaxed),
            wakes: self.wakes.load(StatOrdering::Relaxed),
        }
    }
}

/// Slow-path counters of one blocking structure, for benchmarks: how often a waiter went to
/// sleep, and how many wake system calls were issued. Both only grow; a fast-path hand-off
/// changes neither.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WaitStats {
    /// Futex waits entered (including ones that returned at once because the word had moved).
    pub parks: u64,
    /// Futex wake calls actually issued (`wake_one` or `wake_all`), one system call each.
    pub wakes: u64,
}
