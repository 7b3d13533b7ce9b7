//! [`QueueInfo`]: idle-worker accounting and the recycled-pool stack (httpd's `fd_queue_info_t`).
//!
//! The worker MPM's listener accepts a connection only after reserving an idle worker, so the
//! connection queue never overflows (httpd commit 23fa964736, 2002). httpd counts idlers with an
//! atomic biased counter and falls back to a mutex + condvar to block the listener (commit
//! f86c81e344, 2003; the PR 45605 re-check). Here the counter is a plain atomic count of
//! unreserved idle workers, reserved by a CAS decrement that never goes below zero, and the
//! listener blocks on the futex eventcount of [`crate::parker`] instead of a condvar: a worker
//! going idle wakes the listener only if the listener registered as a waiter, so the common case
//! makes no system call.
//!
//! The recycled transaction pools live in [`crate::pool_stack`], a bounded tagged-index stack.

use crate::parker::{SeqWord, WaitStats};
use crate::pool_stack::PoolStack;
use crate::sync::{fence, spin, AtomicBool, AtomicUsize, Ordering, WAIT_ROUNDS};
use crossbeam_utils::CachePadded;
use std::fmt;

/// Returned by [`QueueInfo::wait_for_idler`] once [`QueueInfo::term`] was called (httpd's
/// `APR_EOF`): the listener should stop accepting.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Terminated;

impl fmt::Display for Terminated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("queue info is terminated")
    }
}

impl std::error::Error for Terminated {}

/// Idle-worker count, listener blocking, and recycled transaction pools (`fd_queue_info_t`).
///
/// `P` is the MPM's pool handle. Workers call [`QueueInfo::set_idle_recycling`] (or
/// [`QueueInfo::set_idle`]) before each pop; the listener calls [`QueueInfo::wait_for_idler`]
/// before each accept.
///
/// ```
/// use rworker_queue::QueueInfo;
/// let qi: QueueInfo<Box<u32>> = QueueInfo::new(2);
/// qi.set_idle();
/// assert_eq!(qi.wait_for_idler(), Ok(false)); // an idler was there: no blocking
/// qi.push_pool(Box::new(1)).unwrap();
/// assert_eq!(qi.pop_pool(), Some(Box::new(1)));
/// ```
pub struct QueueInfo<P> {
    /// Idle workers not yet reserved by a listener. Invariant: never negative; incremented by
    /// `set_idle` *before* it checks `waiters`, decremented only by a successful reservation CAS.
    idlers: CachePadded<AtomicUsize>,
    /// Listeners between registering to park in `wait_for_idler` and leaving it. Invariant:
    /// incremented (SeqCst, then a SeqCst fence) before the waiter's last re-check of `idlers`, so
    /// a `set_idle` after that re-check sees it non-zero and wakes.
    waiters: CachePadded<AtomicUsize>,
    /// Set once by `term`, never cleared.
    terminated: AtomicBool,
    /// What waiting listeners park on; bumped by `set_idle` when it sees a waiter, and by `term`.
    seq: SeqWord,
    /// Recycled transaction pools (`recycled_pools` in httpd).
    pools: PoolStack<P>,
}

impl<P: Send> QueueInfo<P> {
    /// Creates the structure with no idlers and room for `max_recycled_pools` pools
    /// (httpd's `ap_queue_info_create`; the worker MPM passes `ThreadsPerChild + 1`). A bound of
    /// 0 disables recycling: every `push_pool` gives the pool back.
    pub fn new(max_recycled_pools: usize) -> Self {
        Self {
            idlers: CachePadded::new(AtomicUsize::new(0)),
            waiters: CachePadded::new(AtomicUsize::new(0)),
            terminated: AtomicBool::new(false),
            seq: SeqWord::new(),
            pools: PoolStack::new(max_recycled_pools),
        }
    }

    /// A worker became idle (httpd's `ap_queue_info_set_idle`, minus the pool, which goes
    /// through [`QueueInfo::push_pool`]). Wakes the listener with one system call if it is parked
    /// in [`QueueInfo::wait_for_idler`]; makes none otherwise.
    pub fn set_idle(&self) {
        // SeqCst increment + SeqCst fence, then read `waiters`: the mirror of the waiter's
        // (waiters += 1, fence, re-check idlers). One side always sees the other, so the
        // listener either finds this idler or is woken.
        self.idlers.fetch_add(1, Ordering::SeqCst);
        self.wake_waiter();
    }

    /// A worker that served a connection becomes idle, recycling that connection's (cleared)
    /// transaction pool first (httpd's `ap_queue_info_set_idle` with its pool argument): pushes
    /// `recycled` onto the pool stack, then counts the idler exactly as [`QueueInfo::set_idle`]
    /// does. Returns the pool if the stack refused it (`max_recycled_pools` pools held, or
    /// closed by [`QueueInfo::free_idle_pools`]), for the caller to destroy; `None` otherwise.
    ///
    /// The push comes before the count, as in httpd, so that a listener that reserves this
    /// idler finds the pool on the stack (unless another popper took it first) instead of
    /// creating a new one: the stack's successful push CAS is sequenced before the SeqCst
    /// increment of `idlers`, and the listener's AcqRel reservation CAS reads that increment
    /// (or a later RMW of its release sequence), so the push happens-before the reservation
    /// and the listener's next `pop_pool`. No ordering is added here: both halves are the
    /// existing operations, in that order.
    ///
    /// ```
    /// use rworker_queue::QueueInfo;
    /// let qi: QueueInfo<Box<u32>> = QueueInfo::new(1);
    /// assert_eq!(qi.set_idle_recycling(None), None); // first connection: no pool yet
    /// assert_eq!(qi.set_idle_recycling(Some(Box::new(1))), None); // recycled
    /// assert_eq!(qi.set_idle_recycling(Some(Box::new(2))), Some(Box::new(2))); // stack full
    /// assert_eq!(qi.num_idlers(), 3);
    /// ```
    #[must_use = "a refused pool must be destroyed by the caller"]
    pub fn set_idle_recycling(&self, recycled: Option<P>) -> Option<P> {
        let refused = recycled.and_then(|pool| self.push_pool(pool).err());
        self.set_idle();
        refused
    }

    /// The wake half of the handshake, run after an idler was counted.
    #[inline]
    fn wake_waiter(&self) {
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.waiters.load(Ordering::Relaxed) != 0 {
            self.seq.bump();
            self.seq.wake_one();
        }
    }

    /// Reserves one idler if there is one; the reservation is the decrement.
    #[inline]
    fn reserve(&self) -> bool {
        // Relaxed: a guess, validated by the CAS.
        let mut cur = self.idlers.load(Ordering::Relaxed);
        while cur != 0 {
            // AcqRel: the reservation is a plain count, but Acquire makes what the worker did
            // before set_idle visible to the listener, which is what a lock-based version gives.
            match self.idlers.compare_exchange_weak(
                cur,
                cur - 1,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
        false
    }

    /// Reserves an idle worker, blocking while there is none
    /// (httpd's `ap_queue_info_wait_for_idler`).
    ///
    /// Spins a bounded number of rounds, then parks until a worker calls
    /// [`QueueInfo::set_idle`] or [`QueueInfo::term`]; it loops on spurious wake-ups, so `Ok`
    /// always means one idler is reserved. `Ok(true)` when it had to wait (httpd's
    /// `had_to_block`), `Ok(false)` when an idler was available. `Err(Terminated)` once `term`
    /// was called, even if idlers remain.
    pub fn wait_for_idler(&self) -> Result<bool, Terminated> {
        for round in 0..WAIT_ROUNDS {
            if self.is_terminated() {
                return Err(Terminated);
            }
            if self.reserve() {
                return Ok(false);
            }
            spin(round);
        }
        // Slow path: register, then re-check, then park (see `set_idle` for the handshake).
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // Whether this waiter slept (and so consumed a wake, or took back a relied-on token).
        let mut slept = false;
        let result = loop {
            fence(Ordering::SeqCst);
            // Read the word before re-checking: a set_idle or term after this makes wait return.
            let seen = self.seq.load();
            // SeqCst: ordered with term's store; if we read term's bump, the Acquire in
            // `seq.load` already made the flag visible.
            if self.terminated.load(Ordering::SeqCst) {
                break Err(Terminated);
            }
            if self.reserve() {
                break Ok(true);
            }
            slept = true;
            // A relied-on token is honoured by the hand-on below, which every waiter that
            // slept runs.
            let _ = self.seq.wait(seen);
        };
        // Relaxed: a late decrement only costs a set_idle one wasted wake call.
        self.waiters.fetch_sub(1, Ordering::Relaxed);
        // Hand the wake on, as FdQueue's poppers do: if idlers are left after our reservation,
        // another waiting listener (the contended case) may need one of them. Not only when a
        // set_idle relied on our token: with several set_idle calls relying on one in-flight
        // wake, the waiter that takes it back wakes one more, which owes nothing itself yet
        // may leave a third waiter asleep with idlers to spare (found by an adversarial review
        // with three waiting listeners). So every waiter that slept hands on.
        if slept && result.is_ok() && self.idlers.load(Ordering::SeqCst) != 0 {
            self.wake_waiter();
        }
        result
    }

    /// Reserves an idle worker without blocking (httpd's `ap_queue_info_try_get_idler`):
    /// `true` if one was reserved, `false` if none is idle or the structure is terminated.
    pub fn try_get_idler(&self) -> bool {
        !self.is_terminated() && self.reserve()
    }

    /// Idle workers not yet reserved (httpd's `ap_queue_info_num_idlers`); a snapshot.
    pub fn num_idlers(&self) -> usize {
        self.idlers.load(Ordering::Relaxed)
    }

    /// Terminates (httpd's `ap_queue_info_term`): a listener parked in
    /// [`QueueInfo::wait_for_idler`] wakes, and it and every later call return
    /// `Err(Terminated)`. Idempotent. The pool stack is unaffected (see
    /// [`QueueInfo::free_idle_pools`]).
    pub fn term(&self) {
        // SeqCst store before the bump: a waiter that reads the bumped word sees the flag.
        self.terminated.store(true, Ordering::SeqCst);
        self.seq.bump();
        self.seq.wake_all();
    }

    /// Whether [`QueueInfo::term`] has been called.
    pub fn is_terminated(&self) -> bool {
        // Acquire: pairs with term's store.
        self.terminated.load(Ordering::Acquire)
    }

    /// Stores a cleared transaction pool for reuse (httpd's `ap_queue_info_push_pool`).
    /// Lock-free and ABA-safe with any number of concurrent pushers and poppers. Gives the pool
    /// back (`Err(pool)`, for the caller to destroy) when `max_recycled_pools` pools are held or
    /// after [`QueueInfo::free_idle_pools`].
    pub fn push_pool(&self, pool: P) -> Result<(), P> {
        self.pools.push(pool)
    }

    /// Takes the most recently recycled pool, if any (httpd's `ap_queue_info_pop_pool`, without
    /// its single-consumer restriction).
    pub fn pop_pool(&self) -> Option<P> {
        self.pools.pop()
    }

    /// Closes the pool stack and returns every pool it held, for the caller to destroy
    /// (httpd's `ap_queue_info_free_idle_pools`). Later `push_pool` calls give their pool back.
    pub fn free_idle_pools(&self) -> Vec<P> {
        self.pools.close_and_take_all()
    }

    /// How many pools the stack holds now (a snapshot).
    pub fn recycled_pools(&self) -> usize {
        self.pools.len()
    }

    /// Whether [`QueueInfo::free_idle_pools`] has closed the pool stack.
    pub fn pools_closed(&self) -> bool {
        self.pools.is_closed()
    }

    /// Park/wake counters of the listener's slow path, for benchmarks and tuning.
    pub fn wait_stats(&self) -> WaitStats {
        self.seq.stats()
    }
}

impl<P> fmt::Debug for QueueInfo<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueInfo")
            .field("idlers", &self.idlers.load(Ordering::Relaxed))
            .field("terminated", &self.terminated.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdCounter;
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    fn wait_parked<P: Send>(qi: &QueueInfo<P>, n: u64) {
        let start = Instant::now();
        while qi.wait_stats().parks < n {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "listener never parked"
            );
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(20));
    }

    #[test]
    fn send_sync() {
        fn check<X: Send + Sync>() {}
        check::<QueueInfo<Box<u8>>>();
        check::<QueueInfo<std::cell::Cell<u8>>>();
    }

    #[test]
    fn idlers_count_and_reserve() {
        let qi: QueueInfo<()> = QueueInfo::new(1);
        assert_eq!(qi.num_idlers(), 0);
        assert!(!qi.try_get_idler());
        qi.set_idle();
        qi.set_idle();
        assert_eq!(qi.num_idlers(), 2);
        assert!(qi.try_get_idler());
        assert_eq!(qi.wait_for_idler(), Ok(false));
        assert_eq!(qi.num_idlers(), 0);
        assert!(!qi.try_get_idler());
        // No waiter: no wake call.
        assert_eq!(qi.wait_stats(), WaitStats::default());
    }

    #[test]
    fn wait_for_idler_blocks_until_set_idle() {
        let qi: Arc<QueueInfo<()>> = Arc::new(QueueInfo::new(1));
        let qi2 = Arc::clone(&qi);
        let h = thread::spawn(move || qi2.wait_for_idler());
        wait_parked(&qi, 1);
        assert!(!h.is_finished());
        qi.set_idle();
        assert_eq!(h.join().unwrap(), Ok(true));
        assert_eq!(qi.num_idlers(), 0);
        assert_eq!(qi.wait_stats().wakes, 1);
    }

    #[test]
    fn term_wakes_parked_listener() {
        let qi: Arc<QueueInfo<()>> = Arc::new(QueueInfo::new(1));
        let qi2 = Arc::clone(&qi);
        let h = thread::spawn(move || qi2.wait_for_idler());
        wait_parked(&qi, 1);
        qi.term();
        assert_eq!(h.join().unwrap(), Err(Terminated));
        assert!(qi.is_terminated());
        qi.set_idle();
        assert_eq!(qi.wait_for_idler(), Err(Terminated));
        assert!(!qi.try_get_idler());
    }

    #[test]
    fn set_idle_recycling_pushes_then_counts() {
        let qi = QueueInfo::new(1);
        // The first connection of a worker has no pool to recycle.
        assert_eq!(qi.set_idle_recycling(None), None);
        assert_eq!((qi.num_idlers(), qi.recycled_pools()), (1, 0));
        assert_eq!(qi.set_idle_recycling(Some(1)), None);
        assert_eq!((qi.num_idlers(), qi.recycled_pools()), (2, 1));
        // Full: the pool comes back, the idler is still counted.
        assert_eq!(qi.set_idle_recycling(Some(2)), Some(2));
        assert_eq!((qi.num_idlers(), qi.recycled_pools()), (3, 1));
        // What a listener sees after reserving: the recycled pool.
        assert_eq!(qi.wait_for_idler(), Ok(false));
        assert_eq!(qi.pop_pool(), Some(1));
        // Closed: the pool comes back too.
        assert!(qi.free_idle_pools().is_empty());
        assert_eq!(qi.set_idle_recycling(Some(3)), Some(3));
        assert_eq!((qi.num_idlers(), qi.recycled_pools()), (3, 0));
        // No waiter: no wake call.
        assert_eq!(qi.wait_stats(), WaitStats::default());
    }

    #[test]
    fn set_idle_recycling_wakes_a_parked_listener_with_the_pool_there() {
        let qi: Arc<QueueInfo<u32>> = Arc::new(QueueInfo::new(2));
        let qi2 = Arc::clone(&qi);
        let h = thread::spawn(move || qi2.wait_for_idler().map(|_| qi2.pop_pool()));
        wait_parked(&qi, 1);
        assert_eq!(qi.set_idle_recycling(Some(7)), None);
        assert_eq!(h.join().unwrap(), Ok(Some(7)));
        assert_eq!(qi.num_idlers(), 0);
        assert_eq!(qi.wait_stats().wakes, 1);
    }

    #[test]
    fn pool_stack_is_lifo_and_bounded() {
        let qi = QueueInfo::new(3);
        assert_eq!(qi.pop_pool(), None);
        for i in 0..3 {
            qi.push_pool(i).unwrap();
        }
        assert_eq!(qi.recycled_pools(), 3);
        assert_eq!(qi.push_pool(9), Err(9));
        assert_eq!(qi.pop_pool(), Some(2));
        qi.push_pool(7).unwrap();
        assert_eq!(qi.pop_pool(), Some(7));
        assert_eq!(qi.pop_pool(), Some(1));
        assert_eq!(qi.pop_pool(), Some(0));
        assert_eq!(qi.pop_pool(), None);
        assert_eq!(qi.recycled_pools(), 0);
    }

    #[test]
    fn zero_bound_refuses_every_pool() {
        let qi = QueueInfo::new(0);
        assert_eq!(qi.push_pool(1), Err(1));
        assert_eq!(qi.pop_pool(), None);
        assert!(qi.free_idle_pools().is_empty());
    }

    #[test]
    fn free_idle_pools_closes_and_returns_all() {
        let qi = QueueInfo::new(4);
        for i in 0..3 {
            qi.push_pool(i).unwrap();
        }
        assert!(!qi.pools_closed());
        assert_eq!(qi.free_idle_pools(), vec![2, 1, 0]);
        assert!(qi.pools_closed());
        assert_eq!(qi.recycled_pools(), 0);
        assert_eq!(qi.push_pool(5), Err(5));
        assert_eq!(qi.pop_pool(), None);
        assert!(qi.free_idle_pools().is_empty());
    }

    #[test]
    fn drop_drops_held_pools() {
        let dropped = Arc::new(StdCounter::new(0));
        struct Pool(Arc<StdCounter>);
        impl Drop for Pool {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        {
            let qi = QueueInfo::new(4);
            for _ in 0..3 {
                assert!(qi.push_pool(Pool(Arc::clone(&dropped))).is_ok());
            }
            drop(qi.pop_pool());
        }
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[test]
    fn pools_survive_concurrent_push_pop() {
        let qi = Arc::new(QueueInfo::new(4));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let qi = Arc::clone(&qi);
                thread::spawn(move || {
                    let mut mine = 0;
                    for i in 0..10_000u64 {
                        if qi.push_pool(t * 1_000_000 + i).is_err() {
                            mine += 1;
                        }
                        if qi.pop_pool().is_some() {
                            mine += 1;
                        }
                    }
                    mine
                })
            })
            .collect();
        let got: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        let counted = qi.recycled_pools();
        let left = qi.free_idle_pools().len() as u64;
        assert_eq!(got + left, 40_000);
        assert_eq!(
            counted as u64, left,
            "the length kept in the head word is exact"
        );
        assert_eq!(qi.recycled_pools(), 0);
    }
}
