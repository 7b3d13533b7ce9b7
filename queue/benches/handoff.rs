//! Listener-to-worker hand-off benchmark: rworker's atomics-based queues against the stock
//! worker-MPM design (contract §4.2: a mutex-protected ring with a `not_empty` condvar, and an
//! idlers counter with a mutex/condvar slow path), the latter built twice: on std
//! `Mutex` + `Condvar`, and on APR's `apr_thread_mutex_*` / `apr_thread_cond_*` from the system
//! libapr-1 (what httpd itself uses).
//!
//! `cargo bench -p rworker-queue --bench handoff` prints one table. Environment knobs:
//! `HANDOFFS` (per run, default 200000), `RUNS` (median of, default 5), `WORK` (spin
//! iterations a worker "processes" per connection, default 50), `IMPLS` (which of a, b, c to
//! run, default `abc`), `CASES` (comma-separated `PxN` producer x worker pairs to run, e.g.
//! `1x4,4x8`; default all).
//!
//! The pattern is worker.c's: listener = `wait_for_idler`, `pop_pool` (or make a pool), push
//! the connection; worker = `set_idle` recycling the previous connection's pool, pop, process.

use rworker_queue::{FdQueue, PopError, QueueInfo};
use std::cell::{RefCell, UnsafeCell};
use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Instant;

/// A connection handed to a worker: an id and its transaction pool (a token here).
type Conn = (u64, usize);

/// What the listener and the workers call, per implementation.
trait Handoff: Send + Sync + 'static {
    fn new(workers: usize) -> Self;
    /// Reserve an idle worker; false once terminated.
    fn wait_for_idler(&self) -> bool;
    fn pop_pool(&self) -> Option<usize>;
    /// Recycle a pool without going idle (the contended case, which skips `set_idle`).
    fn push_pool(&self, pool: usize);
    fn push(&self, conn: Conn);
    /// Push without a reserved idler (contended case): gives the connection back when full.
    fn try_push(&self, conn: Conn) -> Result<(), Conn>;
    /// `Some(conn)`, `None` on a spurious/interrupted wake-up; `Err(())` once terminated+drained.
    fn pop(&self) -> Result<Option<Conn>, ()>;
    /// Go idle, recycling the previous connection's pool first (`ap_queue_info_set_idle`).
    fn set_idle(&self, recycled: Option<usize>);
    fn term(&self);
    /// (parks, wake calls) so far.
    fn stats(&self) -> (u64, u64);
}

// ---------------------------------------------------------------------------------------------
// (a) rworker

struct Rworker {
    q: FdQueue<Conn>,
    qi: QueueInfo<usize>,
}

impl Handoff for Rworker {
    fn new(workers: usize) -> Self {
        Self {
            q: FdQueue::new(workers),
            qi: QueueInfo::new(workers + 1),
        }
    }
    fn wait_for_idler(&self) -> bool {
        self.qi.wait_for_idler().is_ok()
    }
    fn pop_pool(&self) -> Option<usize> {
        self.qi.pop_pool()
    }
    fn push_pool(&self, pool: usize) {
        let _ = self.qi.push_pool(pool);
    }
    fn push(&self, conn: Conn) {
        self.q.push(conn).expect("an idler was reserved");
    }
    fn try_push(&self, conn: Conn) -> Result<(), Conn> {
        self.q.push(conn).map_err(|e| e.into_inner())
    }
    fn pop(&self) -> Result<Option<Conn>, ()> {
        match self.q.pop() {
            Ok(c) => Ok(Some(c)),
            Err(PopError::Terminated) => Err(()),
            Err(_) => Ok(None),
        }
    }
    fn set_idle(&self, recycled: Option<usize>) {
        // A refused pool (stack full) is a token: nothing to destroy.
        let _ = self.qi.set_idle_recycling(recycled);
    }
    fn term(&self) {
        self.qi.term();
        self.q.term();
    }
    fn stats(&self) -> (u64, u64) {
        let (a, b) = (self.q.wait_stats(), self.qi.wait_stats());
        (a.parks + b.parks, a.wakes + b.wakes)
    }
}

// ---------------------------------------------------------------------------------------------
// The stock design, generic over the mutex + condvar it is built on.

/// A mutex with one condition variable; `with_lock` runs `f` holding the mutex.
trait LockCond: Send + Sync + 'static {
    fn new() -> Self;
    fn with_lock<R>(&self, f: impl FnOnce(&dyn CondOps) -> R) -> R;
}

/// Condvar operations available while the mutex is held.
trait CondOps {
    /// Waits once; true if the wait ended by timeout (APR baseline only).
    fn wait(&self) -> bool;
    fn signal(&self);
    fn broadcast(&self);
}

/// State guarded by a [`LockCond`]'s mutex.
struct Guarded<T>(UnsafeCell<T>);
// SAFETY: the contents are only reached through `Stock::locked`, inside `with_lock`.
unsafe impl<T: Send> Sync for Guarded<T> {}

struct Ring {
    items: VecDeque<Conn>,
    terminated: bool,
}

/// httpd 2.4's fd_queue_t + fd_queue_info_t semantics (contract §4.2).
struct Stock<L: LockCond> {
    /// one_big_mutex + not_empty.
    queue_lock: L,
    /// ThreadsPerChild (`bounds`).
    capacity: usize,
    ring: Guarded<Ring>,
    /// idlers, signed instead of biased: < 0 means the listener is waiting.
    idlers: AtomicI64,
    /// idlers_mutex + wait_for_idler; guards `qi_terminated`.
    idlers_lock: L,
    qi_terminated: Guarded<bool>,
    /// Recycled pools. httpd's is a CAS stack that is only safe with a single popper; the
    /// contended case has several listeners, so the baselines use a plain locked stack.
    pools_lock: L,
    pools: Guarded<Vec<usize>>,
    parks: AtomicU64,
    wakes: AtomicU64,
}

impl<L: LockCond> Stock<L> {
    /// SAFETY: call only inside `lock.with_lock` of the lock guarding `g`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn locked<T>(g: &Guarded<T>) -> &mut T {
        // SAFETY: the caller holds the guarding mutex, so no other reference exists.
        unsafe { &mut *g.0.get() }
    }
}

impl<L: LockCond> Handoff for Stock<L> {
    fn new(workers: usize) -> Self {
        Self {
            queue_lock: L::new(),
            capacity: workers,
            ring: Guarded(UnsafeCell::new(Ring {
                items: VecDeque::with_capacity(workers),
                terminated: false,
            })),
            idlers: AtomicI64::new(0),
            idlers_lock: L::new(),
            qi_terminated: Guarded(UnsafeCell::new(false)),
            pools_lock: L::new(),
            pools: Guarded(UnsafeCell::new(Vec::with_capacity(workers + 1))),
            parks: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
        }
    }
    fn wait_for_idler(&self) -> bool {
        // ap_queue_info_wait_for_idler: decrement; if none was idle, lock, re-check, wait once.
        let prev = self.idlers.fetch_sub(1, Ordering::SeqCst);
        self.idlers_lock.with_lock(|c| {
            if prev <= 0 && self.idlers.load(Ordering::SeqCst) < 0 {
                // SAFETY: under idlers_lock.
                if !unsafe { *Self::locked(&self.qi_terminated) } {
                    self.parks.fetch_add(1, Ordering::Relaxed);
                    if c.wait() && self.idlers.load(Ordering::SeqCst) >= 0 {
                        // Timed out although a worker went idle: its set_idle signal was lost
                        // (or it was preempted for 100 ms before signalling).
                        LOST_SIGNALS.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            // SAFETY: under idlers_lock.
            !unsafe { *Self::locked(&self.qi_terminated) }
        })
    }
    fn pop_pool(&self) -> Option<usize> {
        // SAFETY: under pools_lock.
        self.pools_lock
            .with_lock(|_| unsafe { Self::locked(&self.pools) }.pop())
    }
    fn push_pool(&self, pool: usize) {
        // SAFETY: under pools_lock.
        self.pools_lock
            .with_lock(|_| unsafe { Self::locked(&self.pools) }.push(pool));
    }
    fn push(&self, conn: Conn) {
        // ap_queue_push_socket: lock, append, signal not_empty.
        self.queue_lock.with_lock(|c| {
            // SAFETY: under queue_lock.
            unsafe { Self::locked(&self.ring) }.items.push_back(conn);
            self.wakes.fetch_add(1, Ordering::Relaxed);
            c.signal();
        });
    }
    fn try_push(&self, conn: Conn) -> Result<(), Conn> {
        self.queue_lock.with_lock(|c| {
            // SAFETY: under queue_lock.
            let ring = unsafe { Self::locked(&self.ring) };
            if ring.items.len() >= self.capacity {
                return Err(conn);
            }
            ring.items.push_back(conn);
            self.wakes.fetch_add(1, Ordering::Relaxed);
            c.signal();
            Ok(())
        })
    }
    fn pop(&self) -> Result<Option<Conn>, ()> {
        // ap_queue_pop_something: lock; if empty, wait once unless terminated; re-test.
        self.queue_lock.with_lock(|c| {
            // SAFETY: under queue_lock.
            let ring = unsafe { Self::locked(&self.ring) };
            let timed_out = if ring.items.is_empty() && !ring.terminated {
                self.parks.fetch_add(1, Ordering::Relaxed);
                c.wait()
            } else {
                false
            };
            // SAFETY: under queue_lock (re-borrowed after the wait).
            let ring = unsafe { Self::locked(&self.ring) };
            if timed_out && !ring.items.is_empty() {
                // An item was pushed (and signalled under this mutex) while we slept.
                LOST_SIGNALS.fetch_add(1, Ordering::Relaxed);
            }
            match ring.items.pop_front() {
                Some(conn) => Ok(Some(conn)),
                None if ring.terminated => Err(()),
                None => Ok(None),
            }
        })
    }
    fn set_idle(&self, recycled: Option<usize>) {
        // ap_queue_info_set_idle: push the pool, increment; if the listener was waiting,
        // lock + signal.
        if let Some(pool) = recycled {
            self.push_pool(pool);
        }
        let prev = self.idlers.fetch_add(1, Ordering::SeqCst);
        if prev < 0 {
            self.idlers_lock.with_lock(|c| {
                self.wakes.fetch_add(1, Ordering::Relaxed);
                c.signal();
            });
        }
    }
    fn term(&self) {
        self.idlers_lock.with_lock(|c| {
            // SAFETY: under idlers_lock.
            unsafe { *Self::locked(&self.qi_terminated) = true };
            c.broadcast();
        });
        self.queue_lock.with_lock(|c| {
            // SAFETY: under queue_lock.
            unsafe { Self::locked(&self.ring) }.terminated = true;
            c.broadcast();
        });
    }
    fn stats(&self) -> (u64, u64) {
        (
            self.parks.load(Ordering::Relaxed),
            self.wakes.load(Ordering::Relaxed),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// (b) std Mutex + Condvar

struct StdLock {
    m: Mutex<()>,
    c: Condvar,
}

struct StdOps<'a> {
    guard: RefCell<Option<MutexGuard<'a, ()>>>,
    c: &'a Condvar,
}

impl CondOps for StdOps<'_> {
    fn wait(&self) -> bool {
        let g = self.guard.borrow_mut().take().expect("held");
        *self.guard.borrow_mut() = Some(self.c.wait(g).unwrap());
        false
    }
    fn signal(&self) {
        self.c.notify_one();
    }
    fn broadcast(&self) {
        self.c.notify_all();
    }
}

impl LockCond for StdLock {
    fn new() -> Self {
        Self {
            m: Mutex::new(()),
            c: Condvar::new(),
        }
    }
    fn with_lock<R>(&self, f: impl FnOnce(&dyn CondOps) -> R) -> R {
        let ops = StdOps {
            guard: RefCell::new(Some(self.m.lock().unwrap())),
            c: &self.c,
        };
        f(&ops)
    }
}

// ---------------------------------------------------------------------------------------------
// (c) APR apr_thread_mutex_* + apr_thread_cond_* (system libapr-1, linked into this bench only).

mod apr {
    //! The handful of APR 1.x entry points the baseline needs, declared by hand from
    //! /usr/include/apr-1.0 (apr_general.h, apr_pools.h, apr_thread_mutex.h, apr_thread_cond.h):
    //! the types are opaque, `apr_status_t` is `int`, 0 is APR_SUCCESS.
    use std::os::raw::{c_int, c_uint, c_void};

    #[repr(C)]
    pub struct Opaque {
        _private: [u8; 0],
    }
    pub type Pool = Opaque;
    pub type ThreadMutex = Opaque;
    pub type ThreadCond = Opaque;
    /// `APR_THREAD_MUTEX_DEFAULT` (apr_thread_mutex.h).
    pub const THREAD_MUTEX_DEFAULT: c_uint = 0;
    /// `APR_TIMEUP` (apr_errno.h: APR_OS_START_STATUS + 7).
    pub const TIMEUP: c_int = 70007;

    #[link(name = "apr-1")]
    extern "C" {
        pub fn apr_initialize() -> c_int;
        pub fn apr_pool_create_ex(
            newpool: *mut *mut Pool,
            parent: *mut Pool,
            abort_fn: *mut c_void,
            allocator: *mut c_void,
        ) -> c_int;
        pub fn apr_thread_mutex_create(
            mutex: *mut *mut ThreadMutex,
            flags: c_uint,
            pool: *mut Pool,
        ) -> c_int;
        pub fn apr_thread_mutex_lock(mutex: *mut ThreadMutex) -> c_int;
        pub fn apr_thread_mutex_unlock(mutex: *mut ThreadMutex) -> c_int;
        pub fn apr_thread_cond_create(cond: *mut *mut ThreadCond, pool: *mut Pool) -> c_int;
        /// `timeout` is an `apr_interval_time_t`: microseconds.
        pub fn apr_thread_cond_timedwait(
            cond: *mut ThreadCond,
            mutex: *mut ThreadMutex,
            timeout: i64,
        ) -> c_int;
        pub fn apr_thread_cond_signal(cond: *mut ThreadCond) -> c_int;
        pub fn apr_thread_cond_broadcast(cond: *mut ThreadCond) -> c_int;
    }
}

struct AprLock {
    m: *mut apr::ThreadMutex,
    c: *mut apr::ThreadCond,
}

// SAFETY: APR thread mutexes and condvars are made to be shared between threads; the pool they
// live in is never destroyed (leaked for the life of the bench process).
unsafe impl Send for AprLock {}
// SAFETY: as above.
unsafe impl Sync for AprLock {}

struct AprOps<'a>(&'a AprLock);

/// Timed-out condvar waits in the APR baseline whose condition had become true meanwhile: a lost
/// signal, or (less likely) a signaller preempted for 100 ms between its update and its signal.
static LOST_SIGNALS: AtomicU64 = AtomicU64::new(0);

impl CondOps for AprOps<'_> {
    fn wait(&self) -> bool {
        // A timed wait, not apr_thread_cond_wait: with 16 workers, pthread_cond_signal on this
        // machine's glibc 2.36 occasionally failed to wake the waiter (the bench hung with the
        // listener in cond_wait and 16 idlers counted; consistent with glibc bug 25847, fixed in
        // 2.41). The stock code treats any wake-up like a spurious one, so a timeout keeps its
        // semantics; lost signals detected after a timeout are counted and printed.
        // SAFETY: valid handles; the caller holds `m` (we are inside with_lock).
        let rv = unsafe { apr::apr_thread_cond_timedwait(self.0.c, self.0.m, 100_000) };
        if rv == apr::TIMEUP {
            return true;
        }
        assert_eq!(rv, 0);
        false
    }
    fn signal(&self) {
        // SAFETY: valid handle.
        assert_eq!(unsafe { apr::apr_thread_cond_signal(self.0.c) }, 0);
    }
    fn broadcast(&self) {
        // SAFETY: valid handle.
        assert_eq!(unsafe { apr::apr_thread_cond_broadcast(self.0.c) }, 0);
    }
}

impl LockCond for AprLock {
    fn new() -> Self {
        static INIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: apr_initialize is called once, before any other APR call.
        INIT.call_once(|| assert_eq!(unsafe { apr::apr_initialize() }, 0));
        let mut pool = std::ptr::null_mut();
        let (mut m, mut c) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: out-pointers are valid; a NULL parent makes a global-pool child, never freed.
        unsafe {
            assert_eq!(
                apr::apr_pool_create_ex(
                    &mut pool,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut()
                ),
                0
            );
            assert_eq!(
                apr::apr_thread_mutex_create(&mut m, apr::THREAD_MUTEX_DEFAULT, pool),
                0
            );
            assert_eq!(apr::apr_thread_cond_create(&mut c, pool), 0);
        }
        Self { m, c }
    }
    fn with_lock<R>(&self, f: impl FnOnce(&dyn CondOps) -> R) -> R {
        // SAFETY: valid handle; unlocked below on the same thread.
        assert_eq!(unsafe { apr::apr_thread_mutex_lock(self.m) }, 0);
        let r = f(&AprOps(self));
        // SAFETY: we hold it.
        assert_eq!(unsafe { apr::apr_thread_mutex_unlock(self.m) }, 0);
        r
    }
}

// ---------------------------------------------------------------------------------------------
// Driver

struct Sample {
    secs: f64,
    parks: u64,
    wakes: u64,
}

/// One run: `producers` listeners feeding `workers` workers `handoffs` connections in total.
/// With `reserve`, the worker.c pattern (idler reservation); without it (the contended case),
/// producers push directly and retry (yielding) while the queue is full, and workers skip
/// set_idle: httpd's stock wait_for_idler supports one listener only (see README).
fn run_once<H: Handoff>(
    producers: usize,
    workers: usize,
    handoffs: u64,
    work: u32,
    reserve: bool,
) -> Sample {
    let h = Arc::new(H::new(workers));
    let start = Arc::new(Barrier::new(producers + workers + 1));
    let worker_threads: Vec<_> = (0..workers)
        .map(|_| {
            let (h, start) = (Arc::clone(&h), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let mut sum = 0u64;
                // The pool of the connection just processed, recycled when going idle.
                let mut finished = None;
                loop {
                    if reserve {
                        h.set_idle(finished.take());
                    } else if let Some(pool) = finished.take() {
                        h.push_pool(pool);
                    }
                    let conn = loop {
                        match h.pop() {
                            Ok(Some(c)) => break Some(c),
                            Ok(None) => continue,
                            Err(()) => break None,
                        }
                    };
                    let Some((id, pool)) = conn else { break };
                    // "process" the connection.
                    for i in 0..work {
                        sum = sum.wrapping_add(black_box(id ^ u64::from(i)));
                    }
                    finished = Some(pool);
                }
                black_box(sum);
            })
        })
        .collect();
    let per_producer = handoffs / producers as u64;
    let producer_threads: Vec<_> = (0..producers)
        .map(|p| {
            let (h, start) = (Arc::clone(&h), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let mut next_pool = p * 1_000_000;
                for i in 0..per_producer {
                    if reserve && !h.wait_for_idler() {
                        break;
                    }
                    let pool = h.pop_pool().unwrap_or_else(|| {
                        next_pool += 1;
                        next_pool
                    });
                    if reserve {
                        h.push((i, pool));
                    } else {
                        let mut conn = (i, pool);
                        while let Err(back) = h.try_push(conn) {
                            conn = back;
                            thread::yield_now();
                        }
                    }
                }
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    for p in producer_threads {
        p.join().unwrap();
    }
    // Every connection is queued; terminate (worker.c's graceful path) and let workers drain.
    h.term();
    for w in worker_threads {
        w.join().unwrap();
    }
    let secs = t0.elapsed().as_secs_f64();
    let (parks, wakes) = h.stats();
    Sample { secs, parks, wakes }
}

struct Summary {
    ops: f64,
    ns: f64,
    wakes: f64,
    parks: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn measure<H: Handoff>(
    producers: usize,
    workers: usize,
    handoffs: u64,
    runs: usize,
    work: u32,
) -> Summary {
    let reserve = producers == 1;
    let _ = run_once::<H>(producers, workers, handoffs / 10, work, reserve); // warm-up
    let samples: Vec<Sample> = (0..runs)
        .map(|_| run_once::<H>(producers, workers, handoffs, work, reserve))
        .collect();
    let n = (handoffs / producers as u64 * producers as u64) as f64;
    let ops = median(samples.iter().map(|s| n / s.secs).collect());
    Summary {
        ops,
        ns: 1e9 / ops,
        wakes: median(samples.iter().map(|s| s.wakes as f64 / n).collect()),
        parks: median(samples.iter().map(|s| s.parks as f64 / n).collect()),
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs us without it: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let handoffs: u64 = env_or("HANDOFFS", if quick { 2_000 } else { 200_000 });
    let runs: usize = env_or("RUNS", if quick { 1 } else { 5 });
    let work: u32 = env_or("WORK", 50);
    let impls: String = env_or("IMPLS", "abc".to_string());
    println!(
        "hand-off bench: {handoffs} hand-offs per run, median of {runs} runs, {work} work \
         iterations per connection, {} CPUs",
        thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<12} {:>3} {:>3} | {:>11} {:>8} {:>6} {:>6} | {:>11} {:>8} {:>6} {:>6} | {:>11} {:>8} {:>6} {:>6} | {:>5} {:>5}",
        "case", "P", "N",
        "(a) ops/s", "ns/op", "wake", "park",
        "(b) ops/s", "ns/op", "wake", "park",
        "(c) ops/s", "ns/op", "wake", "park",
        "a/b", "a/c"
    );
    let mut cases: Vec<(&str, usize, usize)> = [1, 2, 4, 8, 16]
        .iter()
        .map(|&n| ("1 listener", 1, n))
        .collect();
    cases.push(("contended", 4, 8));
    cases.push(("contended", 4, 16));
    let only: String = env_or("CASES", String::new());
    if !only.is_empty() {
        cases.retain(|(_, p, n)| only.split(',').any(|c| c.trim() == format!("{p}x{n}")));
    }
    for (name, p, n) in cases {
        let skip = || Summary {
            ops: f64::NAN,
            ns: f64::NAN,
            wakes: f64::NAN,
            parks: f64::NAN,
        };
        let a = if impls.contains('a') {
            measure::<Rworker>(p, n, handoffs, runs, work)
        } else {
            skip()
        };
        let b = if impls.contains('b') {
            measure::<Stock<StdLock>>(p, n, handoffs, runs, work)
        } else {
            skip()
        };
        let c = if impls.contains('c') {
            measure::<Stock<AprLock>>(p, n, handoffs, runs, work)
        } else {
            skip()
        };
        println!(
            "{:<12} {:>3} {:>3} | {:>11.0} {:>8.0} {:>6.2} {:>6.2} | {:>11.0} {:>8.0} {:>6.2} {:>6.2} | {:>11.0} {:>8.0} {:>6.2} {:>6.2} | {:>5.2} {:>5.2}",
            name, p, n,
            a.ops, a.ns, a.wakes, a.parks,
            b.ops, b.ns, b.wakes, b.parks,
            c.ops, c.ns, c.wakes, c.parks,
            a.ops / b.ops, a.ops / c.ops
        );
    }
    println!(
        "(c) timed-out condvar waits whose condition was already true (lost signals): {}",
        LOST_SIGNALS.load(Ordering::Relaxed)
    );
}
