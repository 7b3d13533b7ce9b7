//! The park/wake primitive: a 32-bit *sequence word* threads sleep on, futex style.
//!
//! This is the "eventcount" pattern (Vyukov; also Linux futex usage, folly's `EventCount`):
//! a waiter reads the word, re-checks its condition, and sleeps only if the word still holds the
//! value it read. A waker first makes its condition true, then bumps the word, then wakes. Because
//! the kernel compares the word and enqueues the waiter atomically with respect to wakes, a bump
//! that lands anywhere after the waiter's read makes the sleep return at once: no lost wake-up.
//!
//! In production the word is a real Linux futex (`futex(2)` through `libc`, private to the
//! process; `FUTEX_WAKE` reports how many sleepers it woke, which the wake token below needs).
//! Under loom, which cannot model a futex, the same contract is built from a loom `Mutex` +
//! `Condvar` plus a count of modelled sleepers: the waiter compares the word under the mutex, and
//! a waker passes through the mutex, which gives exactly the futex's atomicity and wake count.
//!
//! Three levels of "is anyone there?":
//! 1. Callers own a counter of *registered* waiters (a waiter registers before its last
//!    re-check), so a hand-off with none registered does not even touch this word.
//! 2. `parked` counts the threads actually inside [`SeqWord::wait`]; a waker that bumped the
//!    word skips the wake system call when it is zero.
//! 3. The *wake token* (`waking`): at most one `wake_one` is in flight at a time. A woken thread
//!    stays counted in `parked` until the scheduler runs it, which on a busy 2-core machine can
//!    take many hand-offs; without the token every one of them would issue a `FUTEX_WAKE` that
//!    finds nobody asleep (measured: ~0.95 wake calls per hand-off with 16 workers, against
//!    ~0.05 real sleeps). With it, a waker that finds a wake in flight marks the token
//!    *relied on* and returns; whichever thread leaves `wait` next takes the token back, and if
//!    it was relied on, tells its caller to pass a wake on once it has re-checked (the caller
//!    knows whether work is left; see [`SeqWord::wait`]). This is the "one searching worker"
//!    idea of Go's and tokio's schedulers, reduced to a three-state word. A waiter about to spin
//!    takes the token too (only if free): a spinner will see the next item by itself, so wakers
//!    rely on it instead of waking a sleeper that would find nothing.
//!
//! The token alone turns a burst into a chain: items queued behind the one an in-flight wake
//! covers are passed on by hand-ons, one scheduling hop each. Where waiters sleep long (an httpd
//! child's idle workers) that tripled the median latency of `close` requests in the A/B test, so
//! there a waker that relied on the token but sees more items queued than wakes in flight issues
//! one more, untracked wake ([`SeqWord::wake_uncovered`], gated by the caller), and so does a
//! popper handing a wake on. Those wakes are counted in `in_flight` before they are issued, so
//! two threads that see the same uncovered item do not both wake for it. An untracked wake is
//! always safe: its wakee leaves `wait` like any other, taking the token back and re-checking.

use crate::sync::{fence, AtomicIsize, AtomicU32, AtomicUsize, Ordering};
use std::sync::atomic::{AtomicU64 as StatCounter, Ordering as StatOrdering};

/// Wake token: no wake in flight.
const TOKEN_FREE: u32 = 0;
/// Wake token: a `FUTEX_WAKE` was issued and its wakee has not taken the token back yet.
const TOKEN_IN_FLIGHT: u32 = 1;
/// Wake token, this value and above: in flight, and (value - 1) wakers skipped their own wake
/// because of it.
const TOKEN_RELIED_ON: u32 = 2;

/// loom only: the modelled futex wait queue.
#[cfg(loom)]
#[derive(Debug, Default)]
struct SleepQueue {
    /// Sleepers enqueued and not yet woken.
    sleeping: u32,
    /// Wakes granted and not yet consumed by a sleeper (a woken sleeper leaves with one).
    tickets: u32,
}

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
    /// The wake token: [`TOKEN_FREE`], [`TOKEN_IN_FLIGHT`] or at least [`TOKEN_RELIED_ON`]. Invariant:
    /// while it is not free, some thread will later swap it back to free and then act on what
    /// it held: a thread that `FUTEX_WAKE` took out of the kernel's queue (it swaps in `wait`,
    /// before its caller re-checks), a spinner that held it (`release_token`), or, when a wake
    /// found nobody asleep, the waker itself.
    /// Only read-modify-writes touch it, so the releaser's swap synchronises with every waker
    /// that relied on the token before it (see `take_token`).
    waking: AtomicU32,
    /// loom only: the number of modelled sleepers not yet woken (the futex's wait queue length).
    #[cfg(loom)]
    asleep: loom::sync::Mutex<SleepQueue>,
    /// loom only: where modelled sleepers wait.
    #[cfg(loom)]
    cond: loom::sync::Condvar,
    /// Wakes in flight: threads a wake took, or is about to take, out of the kernel's queue
    /// that have not yet left [`SeqWord::wait`]. A waker may skip a wake because of this
    /// count ([`SeqWord::wake_uncovered`]), so it must not promise re-checks that will not
    /// happen. Each unit is one of:
    /// (a) a woken thread not yet past the decrement in `wait`; its caller re-checks after
    ///     it (SeqCst on both sides: a reader that saw the unit precedes the decrement, hence
    ///     the re-check, in the total order);
    /// (b) a reservation made just before a single wake's system call (`wake_one`,
    ///     `wake_uncovered`): it becomes (a) if the call woke someone, and is taken back if
    ///     the call found nobody in the kernel. A thread that skipped its wake because of such
    ///     a reservation is still covered: the call found nobody, so every thread that sleeps
    ///     after it compares the word after the items the skipper saw were queued (their
    ///     pushes bumped after publishing), and either its own re-check saw them or its sleep
    ///     returns at once; a thread asleep before the call would have been woken by it.
    ///     (The loom models pass with and without a second wake after taking a reservation
    ///     back; README, mutation table.)
    /// `wake_all` adds what its call reported *after* it, so its wakees may be subtracted
    /// first: the count may dip below the truth (even below zero) for a moment, which only
    /// costs an extra wake.
    in_flight: AtomicIsize,
    /// Times a thread went to sleep on this word (statistics only; plain std atomics, not
    /// modelled by loom, and never read by the algorithm).
    parks: StatCounter,
    /// `FUTEX_WAKE` calls issued (counted in `futex_wake`, one system call each).
    wakes: StatCounter,
}

impl SeqWord {
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU32::new(0),
            parked: AtomicUsize::new(0),
            waking: AtomicU32::new(TOKEN_FREE),
            in_flight: AtomicIsize::new(0),
            #[cfg(loom)]
            asleep: loom::sync::Mutex::new(SleepQueue::default()),
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
    ///
    /// Returns `true` when a waker relied on the wake token this thread took back on leaving
    /// (see the module doc). Both callers hand a wake on whenever they slept (after their
    /// re-check, if work is left for other waiters), which covers this case, so the value is
    /// for tests and statistics.
    pub(crate) fn wait(&self, seen: u32) -> bool {
        self.parks.fetch_add(1, StatOrdering::Relaxed);
        // Announce, then SeqCst fence, then let the kernel compare the word: the mirror of
        // `wake_*` (bump; fence; read `parked`). Either the waker sees us and wakes, or our
        // compare sees its bump and returns at once.
        self.parked.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.sleep(seen) {
            // SeqCst: see `in_flight`; the caller's re-check comes after this in the total
            // order (the token swap below and the caller's loads are SeqCst too).
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        // Take the token back, whatever woke us: if it was in flight for us, the next waker may
        // wake again; if a waker relied on it, our caller's re-check (which comes after this
        // SeqCst swap) sees that waker's condition, and the caller passes the wake on. A thread
        // that returned for another reason (the word had moved, a wake_all) may take back a
        // token meant for someone else: that costs at most one extra wake later, never a lost
        // one, because it re-checks just the same.
        let owed = self.release_token();
        // Relaxed: leaving late only costs a waker one wasted wake call.
        self.parked.fetch_sub(1, Ordering::Relaxed);
        owed
    }

    /// Whether a wake call may find someone; see `parked`. Called after the caller's bump.
    #[inline]
    fn anyone_parked(&self) -> bool {
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        self.parked.load(Ordering::Relaxed) != 0
    }

    /// Takes the wake token for a waiter about to spin, only if it is free: a spinning waiter
    /// is as good as a wake in flight (it will see the next item), so wakers rely on it instead
    /// of waking a sleeper. `true`: the caller holds the token and must give it back with
    /// [`SeqWord::release_token`] when it stops spinning.
    #[inline]
    pub(crate) fn try_hold_token(&self) -> bool {
        // SeqCst RMW on success, like every token transition (see `take_token`); Relaxed on
        // failure: we only learn that someone else holds it.
        self.waking
            .compare_exchange(
                TOKEN_FREE,
                TOKEN_IN_FLIGHT,
                Ordering::SeqCst,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Gives the wake token back (a spinner that held it, a thread leaving [`SeqWord::wait`], or
    /// a waker whose wake found nobody). Returns `true` when a waker relied on it: the caller
    /// must re-check *after* this call (the swap synchronises with the relying waker) and hand
    /// a wake on if work is left for others.
    #[inline]
    #[must_use = "a relied-on wake token must be passed on"]
    pub(crate) fn release_token(&self) -> bool {
        self.waking.swap(TOKEN_FREE, Ordering::SeqCst) >= TOKEN_RELIED_ON
    }

    /// Takes the wake token if it is free (`true`: the caller must wake). If a wake is already
    /// in flight, marks the token relied on and returns `false`: the thread that takes the token
    /// back will re-check on this waker's behalf.
    ///
    /// One `fetch_add`: 0 is free, 1 in flight, anything above relied on (it would take 2^32
    /// wakers relying on one in-flight wake to wrap). Being a read-modify-write, it is part of
    /// the release sequence the releasing `swap` (in `wait`, `release_token` or `wake_one`)
    /// reads from, so
    /// everything this waker published before it happens-before the releaser's re-check. No
    /// reasoning about the SeqCst total order is needed for that step.
    #[inline]
    fn take_token(&self) -> bool {
        // SeqCst (Release + Acquire and more): see above.
        self.waking.fetch_add(1, Ordering::SeqCst) == TOKEN_FREE
    }

    /// The futex wait proper (or its loom model). Returns `true` when the thread slept and a
    /// wake took it out of the queue (`FUTEX_WAIT` returned 0), `false` when the word had
    /// already moved or a signal interrupted it.
    fn sleep(&self, seen: u32) -> bool {
        #[cfg(not(loom))]
        // SAFETY: FUTEX_WAIT reads the aligned u32 behind a live `AtomicU32` and compares it
        // atomically; a null timeout means "no timeout". EINTR/EAGAIN returns are spurious
        // wake-ups, which every caller absorbs by looping.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                self.word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                seen,
                std::ptr::null::<libc::timespec>(),
            ) == 0
        }
        #[cfg(loom)]
        {
            let mut queue = self.asleep.lock().unwrap();
            // Compare under the lock: a waker bumps before it takes the lock, so either we see
            // the bump here or we are queued when it wakes.
            if self.word.load(Ordering::SeqCst) != seen {
                return false;
            }
            queue.sleeping += 1;
            while queue.tickets == 0 {
                queue = self.cond.wait(queue).unwrap();
            }
            queue.tickets -= 1;
            true
        }
    }

    /// `FUTEX_WAKE` for up to `n` sleepers (`wake_all`); returns how many were woken. Counts
    /// the call in `wakes` and, after it, the woken in `in_flight` (an undercount until then;
    /// see there).
    fn futex_wake(&self, n: u32) -> u32 {
        self.wakes.fetch_add(1, StatOrdering::Relaxed);
        let woken = self.futex_wake_call(n);
        // SeqCst: `in_flight` is read in the SeqCst handshakes of `wake_uncovered`.
        self.in_flight.fetch_add(
            isize::try_from(woken).unwrap_or(isize::MAX),
            Ordering::SeqCst,
        );
        woken
    }

    /// The wake system call proper (or its loom model).
    fn futex_wake_call(&self, n: u32) -> u32 {
        #[cfg(not(loom))]
        {
            let n = i32::try_from(n).unwrap_or(i32::MAX);
            // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is a live AtomicU32.
            let woken = unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    self.word.as_ptr(),
                    libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                    n,
                )
            };
            // -1 (EFAULT/EINVAL) cannot happen for a valid private futex; count it as nobody.
            u32::try_from(woken).unwrap_or(0)
        }
        #[cfg(loom)]
        {
            let mut queue = self.asleep.lock().unwrap();
            let woken = queue.sleeping.min(n);
            queue.sleeping -= woken;
            queue.tickets += woken;
            drop(queue);
            if woken == 1 {
                self.cond.notify_one();
            } else if woken > 1 {
                self.cond.notify_all();
            }
            woken
        }
    }

    /// Wakes at most one sleeper: one system call, skipped when no thread is inside `wait` or
    /// when another wake is in flight (see the module doc). The caller has already bumped.
    /// Returns `true` when it relied on a wake in flight instead of waking: the caller may
    /// still want [`SeqWord::wake_uncovered`] if that wake cannot cover all its work.
    pub(crate) fn wake_one(&self) -> bool {
        loop {
            if !self.anyone_parked() {
                return false;
            }
            if !self.take_token() {
                return true;
            }
            // SeqCst: a reservation, see `in_flight`.
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            if self.wake_reserved() {
                // The woken thread takes the token back in `wait`.
                return false;
            }
            // Nobody was asleep in the kernel: the threads counted in `parked` are entering (they
            // will see our bump) or leaving. No one will take the token back for us, so we do;
            // if a waker relied on it meanwhile, wake on its behalf. Each further round needs
            // another waker's reliance, so this loop ends when they stop coming.
            if !self.release_token() {
                return false;
            }
        }
    }

    /// Wakes one sleeper for queued work that the wakes in flight do not cover, beside the
    /// token: `work` items wait.
    /// Two callers: a push that relied on a wake in flight while more items wait than that
    /// wake takes (without it they would go to a chain of hand-ons, one scheduling hop each:
    /// that tripled the median latency of `close` requests in the A/B test), and a popper
    /// handing a wake on for the items it leaves behind.
    ///
    /// The wake is reserved in `in_flight` *before* the system call, by a CAS that succeeds
    /// only from below `work`: of two threads that see the same uncovered item (the listener
    /// pushing a burst, a woken worker handing on), one wakes and the other sees it covered.
    /// Without the reservation both woke, and one wakee found nothing: 0.2 futile wakes per
    /// hand-off at `close` c=100. The caller has already bumped the word.
    ///
    /// Always safe to issue: its wakee re-checks and takes the token back like any leaver of
    /// `wait`.
    pub(crate) fn wake_uncovered(&self, work: usize) {
        let work = isize::try_from(work).unwrap_or(isize::MAX);
        if !self.anyone_parked() {
            return;
        }
        // SeqCst: the reservation is ordered with every other reader of the count (see
        // `in_flight`); failure: we only learn that the work is covered.
        let reserved = self
            .in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < work).then_some(n + 1)
            })
            .is_ok();
        if !reserved {
            return;
        }
        // Nobody asleep in the kernel: the threads counted in `parked` are entering (they see
        // the caller's bump) or leaving, and re-check either way.
        let _ = self.wake_reserved();
    }

    /// One `FUTEX_WAKE` for one sleeper, counted in `wakes`, for a wake the caller already
    /// reserved in `in_flight`; takes the reservation back if the call found nobody (see
    /// `in_flight`, (b)). Returns whether it woke a thread.
    fn wake_reserved(&self) -> bool {
        self.wakes.fetch_add(1, StatOrdering::Relaxed);
        if self.futex_wake_call(1) == 1 {
            return true;
        }
        // SeqCst: see `in_flight`.
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Wakes every sleeper (one system call, skipped when no thread is inside `wait`).
    /// The caller has already bumped. Leaves the wake token alone: every thread it wakes
    /// re-checks anyway.
    pub(crate) fn wake_all(&self) {
        if !self.anyone_parked() {
            return;
        }
        let _ = self.futex_wake(u32::MAX);
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    #[test]
    fn token_in_flight_then_relied_on_then_owed_to_the_leaver() {
        let w = SeqWord::new();
        assert!(w.take_token(), "a free token is taken");
        assert!(
            !w.take_token(),
            "a second waker relies on the one in flight"
        );
        assert!(!w.take_token(), "and so does a third");
        // A thread leaving `wait` (here: the word moved before it could sleep) takes it back
        // and learns that wakers relied on it.
        let seen = w.load();
        w.bump();
        assert!(w.wait(seen), "the leaver owes a hand-on");
        assert!(w.take_token(), "free again");
        assert!(
            !w.wait(w.load().wrapping_sub(1)),
            "in flight only: nothing owed"
        );
    }

    #[test]
    fn a_wake_that_finds_nobody_asleep_gives_the_token_back() {
        let w = SeqWord::new();
        // Someone is counted inside `wait` but not asleep in the kernel (entering or leaving).
        w.parked.fetch_add(1, Ordering::SeqCst);
        w.bump();
        w.wake_one();
        assert_eq!(w.stats().wakes, 1, "one FUTEX_WAKE, which found nobody");
        assert!(w.take_token(), "the waker took its token back");
    }

    /// Waits (up to 5 s) until thread `tid` of this process is asleep in the kernel
    /// (`/proc/self/task/<tid>/stat` state `S`): the only blocking call of a thread in
    /// `wait` is the futex, so a wake made now finds it there.
    fn wait_asleep(tid: i32) {
        let start = Instant::now();
        let stat = format!("/proc/self/task/{tid}/stat");
        loop {
            let text = std::fs::read_to_string(&stat).unwrap_or_default();
            // The state follows the parenthesised command name.
            let state = text
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            if state == Some("S") {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "thread {tid} never slept ({text})"
            );
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn an_uncovered_wake_only_for_work_that_wakes_in_flight_do_not_cover() {
        let w = Arc::new(SeqWord::new());
        let seen = w.load();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let sleeper = {
            let w = Arc::clone(&w);
            thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid_tx.send(unsafe { libc::gettid() }).unwrap();
                w.wait(seen)
            })
        };
        wait_asleep(tid_rx.recv().unwrap());
        // A wake in flight (token taken, one thread counted out of the kernel's queue).
        assert!(w.take_token());
        w.in_flight.fetch_add(1, Ordering::SeqCst);
        w.bump();
        assert!(w.wake_one(), "relies on the wake in flight");
        w.wake_uncovered(1);
        assert_eq!(w.stats().wakes, 0, "one item, one wake in flight: covered");
        w.wake_uncovered(2);
        assert_eq!(
            w.stats().wakes,
            1,
            "two items, one wake in flight: one more"
        );
        assert!(
            sleeper.join().unwrap(),
            "it left holding the relied-on token"
        );
        assert_eq!(
            w.in_flight.load(Ordering::SeqCst),
            1,
            "its own wake was added and subtracted; the simulated one remains"
        );
    }

    #[test]
    fn a_burst_of_wakes_for_one_sleeper_is_one_system_call_while_it_is_in_flight() {
        let w = Arc::new(SeqWord::new());
        let w2 = Arc::clone(&w);
        let seen = w.load();
        let sleeper = thread::spawn(move || w2.wait(seen));
        let start = Instant::now();
        while w.stats().parks == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "sleeper never parked"
            );
            thread::sleep(Duration::from_millis(1));
        }
        thread::sleep(Duration::from_millis(20));
        // Hold the token as if a wake were already in flight: these wakers must not call.
        assert!(w.take_token());
        for _ in 0..100 {
            w.bump();
            w.wake_one();
        }
        assert_eq!(
            w.stats().wakes,
            0,
            "no system call while a wake is in flight"
        );
        // Give it back (as the in-flight wakee would) and wake for real.
        let _ = w.waking.swap(TOKEN_FREE, Ordering::SeqCst);
        w.bump();
        w.wake_one();
        assert!(!sleeper.join().unwrap(), "its own wake: nothing owed");
        assert_eq!(w.stats().wakes, 1);
    }
}
