//! [`FdQueue`]: the bounded FIFO of accepted connections between the listener and the workers.
//!
//! httpd's `fd_queue_t` (`server/mpm_fdqueue.c`) is a ring behind `one_big_mutex` with a
//! `not_empty` condvar. Here the ring is Dmitry Vyukov's bounded MPMC queue
//! (<https://www.1024cores.net/home/lock-free-algorithms/queues/bounded-mpmc-queue>), in the
//! form crossbeam's `ArrayQueue` made popular: every slot carries a *stamp* saying whether it is
//! ready to be written or read in the current lap, and producers and consumers claim slots by a
//! CAS on `tail` / `head`. Termination is a *mark bit* in `tail` (as in crossbeam-channel's array
//! flavour), so "pushed before term" and "refused by term" are decided by one atomic word.
//!
//! Blocking uses the eventcount in [`crate::parker`]: a popper that finds the queue empty spins a
//! bounded number of rounds, then registers in `sleepers`, reads the sequence word, re-checks
//! and parks. A push publishes its item and wakes one sleeper only if `sleepers` is non-zero, so
//! a hand-off to a running (or spinning) worker makes no system call.

use crate::adaptive_spin::AdaptiveSpin;
use crate::parker::{SeqWord, WaitStats};
use crate::sync::{
    fence, spin, spin_hint, yield_now, AtomicUsize, Ordering, UnsafeCell, WAIT_ROUNDS,
};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::mem::MaybeUninit;

/// Why [`FdQueue::push`] refused an item. The item comes back so the caller can close it.
#[derive(Debug)]
pub enum PushError<T> {
    /// The queue holds `capacity` items. In the worker MPM this cannot happen when the listener
    /// reserved an idler first (httpd would silently overwrite a slot here; we refuse instead).
    Full(T),
    /// [`FdQueue::term`] was called; no item is accepted any more.
    Terminated(T),
}

impl<T> PushError<T> {
    /// The refused item.
    pub fn into_inner(self) -> T {
        match self {
            PushError::Full(t) | PushError::Terminated(t) => t,
        }
    }
}

impl<T> fmt::Display for PushError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("connection queue is full"),
            PushError::Terminated(_) => f.write_str("connection queue is terminated"),
        }
    }
}

impl<T: fmt::Debug> std::error::Error for PushError<T> {}

/// Why [`FdQueue::pop`] / [`FdQueue::try_pop`] returned no item.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum PopError {
    /// [`FdQueue::try_pop`] only: nothing is queued right now.
    Empty,
    /// [`FdQueue::interrupt_all`] was called while this `pop` was in progress and nothing was
    /// queued (httpd's `APR_EINTR`). The worker checks its exit flags and pops again.
    Interrupted,
    /// [`FdQueue::term`] was called and every item queued before it has been taken
    /// (httpd's `APR_EOF`). Permanent.
    Terminated,
}

impl fmt::Display for PopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PopError::Empty => f.write_str("connection queue is empty"),
            PopError::Interrupted => f.write_str("connection queue pop was interrupted"),
            PopError::Terminated => f.write_str("connection queue is terminated and drained"),
        }
    }
}

impl std::error::Error for PopError {}

/// One ring entry.
struct Slot<T> {
    /// Invariant: for a position `pos` (an index plus a lap) that maps to this slot,
    /// `stamp == pos` means the slot is empty and the push at `pos` may write it;
    /// `stamp == pos + 1` means the push at `pos` has published its value and the pop at `pos`
    /// may read it; the pop then stores `pos + one_lap`, the next lap's writable stamp.
    stamp: AtomicUsize,
    /// Initialised exactly when `stamp == pos + 1` for the slot's current position; owned by the
    /// one thread whose CAS claimed that position while it writes or reads it.
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Result of one non-blocking attempt to take the head item.
enum Dequeue<T> {
    Item(T),
    /// Nothing claimed beyond `head`.
    Empty,
    /// A producer claimed the head slot but has not published it yet. It will wake a sleeper
    /// when it does, so a popper may treat this as empty and park. (The wake that brought the
    /// popper here may have been meant for a later, already published slot; the popper that
    /// takes this one passes that wake on: see the end of `pop_in_epoch`.)
    Pending,
    /// Empty and terminated.
    Closed,
}

/// Bounded multi-producer multi-consumer FIFO of accepted connections (httpd's `fd_queue_t`).
///
/// `T` is whatever the MPM hands a worker (a socket and its transaction pool, as opaque handles).
/// The capacity is `ThreadsPerChild`. Pushes never block; pops block (bounded spin, then park on
/// a futex) while the queue is empty. See the module documentation for the algorithm.
///
/// ```
/// use rworker_queue::{FdQueue, PopError};
/// let q = FdQueue::new(2);
/// q.push(7).unwrap();
/// assert_eq!(q.pop(), Ok(7));
/// q.term();
/// assert_eq!(q.pop(), Err(PopError::Terminated));
/// ```
pub struct FdQueue<T> {
    /// Position of the next pop (index in the low bits, lap above `mark_bit`). Only grows (modulo
    /// wrapping), by a CAS of the popper that claims that position. Never carries `mark_bit`.
    head: CachePadded<AtomicUsize>,
    /// Position of the next push, with the same encoding, plus `mark_bit` once [`FdQueue::term`]
    /// ran. Once marked it never changes again, so no push can succeed after term.
    tail: CachePadded<AtomicUsize>,
    /// The ring, `cap` slots.
    buffer: Box<[Slot<T>]>,
    /// Number of slots, >= 1.
    cap: usize,
    /// `(cap + 1).next_power_of_two()`: the termination flag in `tail`, above every index.
    mark_bit: usize,
    /// `2 * mark_bit`: the amount a position grows by per lap around the ring.
    one_lap: usize,
    /// Number of poppers between registering to park and leaving `pop`. Invariant: a popper
    /// increments it (SeqCst, then a SeqCst fence) *before* its last re-check of the ring, so a
    /// push that publishes after that re-check is guaranteed to see it non-zero and wake.
    sleepers: CachePadded<AtomicUsize>,
    /// Count of `interrupt_all` calls. A pop compares it with the value it read on entry; a
    /// change means "an interrupt happened during this call".
    interrupts: AtomicUsize,
    /// What poppers park on; bumped by every push that sees a sleeper, by interrupts and by term.
    seq: SeqWord,
    /// Whether poppers spin before parking (only while recent parks were short).
    spin: AdaptiveSpin,
}

// SAFETY: an `FdQueue<T>` owns the `T`s in its slots and moves each one from the pushing thread
// to exactly one popping thread (or to the dropping thread); the stamp protocol guarantees that
// only the thread whose CAS claimed a position touches its slot. So sending or sharing the queue
// is sound whenever `T` itself may be sent; `T: Sync` is not needed since no `&T` is shared.
unsafe impl<T: Send> Send for FdQueue<T> {}
// SAFETY: see the `Send` impl above; all shared mutation goes through atomics or through a slot
// owned by exactly one thread at a time.
unsafe impl<T: Send> Sync for FdQueue<T> {}

impl<T: Send> FdQueue<T> {
    /// Creates an empty queue for `capacity` connections (`ThreadsPerChild`), like
    /// `ap_queue_create`. A capacity of 0 is clamped to 1.
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.max(1);
        let mark_bit = (cap + 1).next_power_of_two();
        let buffer = (0..cap)
            .map(|i| Slot {
                stamp: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Self {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            buffer,
            cap,
            mark_bit,
            one_lap: mark_bit * 2,
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            interrupts: AtomicUsize::new(0),
            seq: SeqWord::new(),
            spin: AdaptiveSpin::new(),
        }
    }

    /// The number of slots (after clamping 0 to 1).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// How many items are queued. Exact when no other thread is using the queue, a snapshot
    /// otherwise.
    pub fn len(&self) -> usize {
        // SeqCst loads: a consistent-enough pair for a statistic; re-read tail so that a head
        // read after a concurrent push/pop pair does not produce "full" for an empty queue.
        loop {
            let tail = self.tail.load(Ordering::SeqCst) & !self.mark_bit;
            let head = self.head.load(Ordering::SeqCst);
            if self.tail.load(Ordering::SeqCst) & !self.mark_bit == tail {
                let hix = head & (self.mark_bit - 1);
                let tix = tail & (self.mark_bit - 1);
                return if hix < tix {
                    tix - hix
                } else if hix > tix {
                    self.cap - hix + tix
                } else if tail == head {
                    0
                } else {
                    self.cap
                };
            }
        }
    }

    /// `len() == 0`, with the same caveat.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a connection and wakes one parked worker if any (httpd's `ap_queue_push_socket`).
    ///
    /// Never blocks and makes no system call unless a worker is parked; then at most one wake,
    /// none when a wake in flight covers the item (rarely two; see `parker`).
    /// Errors give the item back: [`PushError::Full`] when `capacity` items are queued,
    /// [`PushError::Terminated`] after [`FdQueue::term`].
    pub fn push(&self, item: T) -> Result<(), PushError<T>> {
        // Relaxed: only a guess at the position; the CAS below validates it.
        let mut tail = self.tail.load(Ordering::Relaxed);
        loop {
            if tail & self.mark_bit != 0 {
                return Err(PushError::Terminated(item));
            }
            let index = tail & (self.mark_bit - 1);
            let lap = tail & !(self.one_lap - 1);
            let slot = &self.buffer[index];
            // Acquire: pairs with the Release stamp store of the pop that emptied this slot in
            // the previous lap, so its read of the old value happens-before our write.
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                // The slot is writable in this lap: try to claim position `tail`.
                let next = if index + 1 < self.cap {
                    tail + 1
                } else {
                    lap.wrapping_add(self.one_lap)
                };
                // SeqCst on success: the claim is ordered with term's SeqCst `fetch_or` (a push
                // either claims before the mark or sees it) and with the SeqCst fence + tail load
                // a popper uses to tell "empty" from "claimed but unpublished".
                match self.tail.compare_exchange_weak(
                    tail,
                    next,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.value.with_mut(|p| {
                            // SAFETY: our CAS claimed position `tail`, and `stamp == tail` said
                            // the slot is empty; no other thread touches it until we publish.
                            unsafe { p.write(MaybeUninit::new(item)) }
                        });
                        // Release: publishes the value to the pop that Acquire-loads this stamp.
                        slot.stamp.store(tail + 1, Ordering::Release);
                        self.wake_one_popper();
                        return Ok(());
                    }
                    Err(current) => {
                        tail = current;
                        spin_hint();
                    }
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                // The slot still holds last lap's item. SeqCst fence, then head: if no pop has
                // claimed that item, the ring is really full.
                fence(Ordering::SeqCst);
                let head = self.head.load(Ordering::Relaxed);
                if head.wrapping_add(self.one_lap) == tail {
                    return Err(PushError::Full(item));
                }
                // A pop claimed it and is copying it out (a few instructions): let it finish.
                yield_now();
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                // Our `tail` was stale: another push claimed this position. Reload.
                spin_hint();
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// The wake half of the eventcount, run after a push published its item.
    #[inline]
    fn wake_one_popper(&self) {
        // SeqCst fence between our stamp store and the `sleepers` load. The popper does the
        // mirror image (sleepers += 1, SeqCst fence, re-check stamps), so at least one side sees
        // the other: either we see the sleeper and wake it, or its re-check sees our item.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above.
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            self.seq.bump();
            // A push that claimed its slot before `term` and publishes after it wakes every
            // sleeper: they must all come to see Terminated, and a single wake (or a spinner
            // relied on) may be taken by a popper that never pops again. Relaxed: ordered by
            // the fence above; only a push racing term pays for the wake-all.
            if self.tail.load(Ordering::Relaxed) & self.mark_bit != 0 {
                self.seq.wake_all();
            } else if self.seq.wake_one() && self.spin.waiters_sleep_long() {
                // We relied on a wake in flight. Where waiters sleep long (an httpd child's idle
                // workers), nobody running will take the items that wait beyond the ones
                // in-flight wakes cover, so wake one more now rather than leave them to a chain
                // of hand-ons (see `SeqWord::wake_uncovered`). Where waiters spin (a tight
                // hand-off loop), running poppers take them sooner than a sleeper could wake,
                // and extra wakes only cost system calls and futile parks (measured: -35% in
                // the hand-off benchmark at N=16 and contended).
                let queued = self.len();
                if queued > 1 {
                    self.seq.wake_uncovered(queued);
                }
            }
        }
    }

    /// One non-blocking attempt to take the head item.
    fn dequeue(&self) -> Dequeue<T> {
        // Relaxed: a guess, validated by the stamp check and the CAS.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            let index = head & (self.mark_bit - 1);
            let lap = head & !(self.one_lap - 1);
            let slot = &self.buffer[index];
            // Acquire: pairs with the push's Release stamp store, so a published value is
            // visible once we see `head + 1`.
            let stamp = slot.stamp.load(Ordering::Acquire);
            if head + 1 == stamp {
                // Published: try to claim position `head`.
                let next = if index + 1 < self.cap {
                    head + 1
                } else {
                    lap.wrapping_add(self.one_lap)
                };
                // SeqCst on success: pairs with the SeqCst fence + head load in push's "full"
                // test, so a push does not report Full for a slot whose item was claimed.
                match self.head.compare_exchange_weak(
                    head,
                    next,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let item = slot.value.with_mut(|p| {
                            // SAFETY: `stamp == head + 1` means the push at `head` initialised
                            // the value (made visible by the Acquire above), and our CAS made us
                            // the only thread to read it; we mark the slot empty right after.
                            unsafe { p.read().assume_init() }
                        });
                        // Release: our read of the value happens-before the next lap's write.
                        slot.stamp
                            .store(head.wrapping_add(self.one_lap), Ordering::Release);
                        return Dequeue::Item(item);
                    }
                    Err(current) => {
                        head = current;
                        spin_hint();
                    }
                }
            } else if stamp == head {
                // Not published in this lap. SeqCst fence, then tail: has anyone claimed it?
                fence(Ordering::SeqCst);
                let tail = self.tail.load(Ordering::Relaxed);
                if tail & !self.mark_bit == head {
                    return if tail & self.mark_bit != 0 {
                        Dequeue::Closed
                    } else {
                        Dequeue::Empty
                    };
                }
                return Dequeue::Pending;
            } else {
                // Our `head` was stale: another pop took this position. Reload.
                spin_hint();
                head = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest connection, blocking while the queue is empty
    /// (httpd's `ap_queue_pop_socket` / `ap_queue_pop_something`).
    ///
    /// A worker that finds the queue empty spins a bounded number of rounds (7 rounds of
    /// `pause`, then 16 `sched_yield`s, and only while spinning pays off), then parks on a
    /// futex until a push, [`FdQueue::interrupt_all`] or
    /// [`FdQueue::term`] wakes it; spurious wake-ups are absorbed here.
    ///
    /// Errors: [`PopError::Interrupted`] if `interrupt_all` was called after this call began and
    /// nothing is queued; [`PopError::Terminated`] once `term` was called and the queue is drained.
    pub fn pop(&self) -> Result<T, PopError> {
        // SeqCst: the interrupt epoch this call runs in, ordered with interrupt_all's SeqCst
        // increment, so an interrupt that starts after this load is seen as a change.
        self.pop_in_epoch(self.interrupts.load(Ordering::SeqCst))
    }

    /// loom only: the interrupt epoch a `pop` starting now would run in. Lets a model say
    /// "this pop began before that interrupt_all", which real time cannot express under loom.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn loom_interrupt_epoch(&self) -> usize {
        self.interrupts.load(Ordering::SeqCst)
    }

    /// loom only: `pop` as if it had begun in interrupt epoch `epoch`.
    #[cfg(loom)]
    #[doc(hidden)]
    pub fn loom_pop_in_epoch(&self, epoch: usize) -> Result<T, PopError> {
        self.pop_in_epoch(epoch)
    }

    /// `pop`, for a call that began in interrupt epoch `epoch`.
    fn pop_in_epoch(&self, epoch: usize) -> Result<T, PopError> {
        // Fast path: an item is there.
        match self.dequeue() {
            Dequeue::Item(item) => return Ok(item),
            Dequeue::Closed => {
                self.pass_on_after_term();
                return Err(PopError::Terminated);
            }
            Dequeue::Empty | Dequeue::Pending => {}
        }
        // Bounded spin: a worker that is about to be fed should not pay for a park/wake pair
        // (two system calls and two context switches), but only while spinning pays off (see
        // `adaptive_spin`: an httpd child's idle workers mostly wait far longer than a spin).
        // The first spinner holds the wake token (see `parker`), so a push while it spins wakes
        // no parked worker: it relies on the spinner, which hands a wake on if it leaves items
        // behind. Other poppers spin too, without the token (letting only one spin made 2-4
        // workers on 2 cores park 0.3-0.4 times per hand-off).
        let mut owe_hand_on = false;
        if self.spin.should_spin() {
            let holds_token = self.seq.try_hold_token();
            let got = (0..WAIT_ROUNDS).find_map(|round| {
                spin(round);
                match self.dequeue() {
                    Dequeue::Item(item) => Some(Ok(item)),
                    Dequeue::Closed => Some(Err(PopError::Terminated)),
                    Dequeue::Empty | Dequeue::Pending => None,
                }
            });
            // Give the token back before any re-check below: that re-check then sees the item
            // of every push that relied on us.
            owe_hand_on = holds_token && self.seq.release_token();
            if let Some(result) = got {
                if owe_hand_on || result.is_err() {
                    self.hand_on(&result);
                    self.pass_on_after_term();
                }
                return result;
            }
        }

        // Slow path: register, then re-check, then park. SeqCst increment + fence: the popper's
        // side of the Dekker handshake described in `wake_one_popper`.
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut parked = None;
        let result = loop {
            fence(Ordering::SeqCst);
            // Read the sequence word *before* the re-check: any push, interrupt or term that
            // bumps it after this point makes `wait` return at once.
            let seen = self.seq.load();
            match self.dequeue() {
                Dequeue::Item(item) => break Ok(item),
                Dequeue::Closed => break Err(PopError::Terminated),
                Dequeue::Empty | Dequeue::Pending => {}
            }
            // SeqCst: if we read the bump that interrupt_all made after its increment, the
            // Acquire in `seq.load` already makes the increment visible; otherwise `wait` below
            // returns because the word moved.
            if self.interrupts.load(Ordering::SeqCst) != epoch {
                break Err(PopError::Interrupted);
            }
            parked.get_or_insert_with(|| self.spin.park_start());
            // A relied-on wake token (see `parker`) is honoured by the hand-on below, which every
            // popper that slept runs.
            let _ = self.seq.wait(seen);
        };
        // Relaxed: a late decrement only costs a pusher one wasted wake call.
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        let slept = parked.is_some();
        if let Some(start) = parked {
            self.spin.parked(start);
        }
        if slept || owe_hand_on {
            self.hand_on(&result);
        }
        self.pass_on_after_term();
        result
    }

    /// Hands the wake on: a popper that slept (or spun holding a token a push relied on) and now
    /// leaves with an item wakes the next sleeper if more items are queued behind it. Two kinds
    /// of wake would be lost without this: (1) a push that skipped its own wake because ours was
    /// in flight (the wake token in `parker`): our re-check ran after we took the token back, so
    /// its item is ours or still queued; (2) a wake that found only a `Pending` head (two
    /// pushers: the later slot published first) and went back to sleep: once the head is
    /// published, its pusher wakes a sleeper; if a popper that slept takes the head, it hands
    /// the wake on here; if one that never slept takes it, the sleeper woken for the head finds
    /// the later item. A popper that never slept consumed no wake and owes none. Costs two loads
    /// off the fast path. The loom models `two_poppers_two_pushes` (1) and
    /// `relied_on_token_passes_the_wake_on` (2) deadlock without it.
    ///
    /// How it wakes depends on the regime. Where waiters spin, through the token: a wake it
    /// sends while another is in flight makes no system call, and a running popper takes the
    /// item soon anyway. Where waiters sleep long (an httpd child's idle workers), through
    /// [`SeqWord::wake_uncovered`]: only for items that the wakes in flight do not cover, so a
    /// woken worker and the listener's burst wake (see `wake_one_popper`) do not both wake a
    /// sleeper for the same connection (measured at `close` c=100: 1.20 futex wakes per
    /// hand-off before, 1.06 with the check alone, 0.998-1.000 with its reservation).
    fn hand_on(&self, result: &Result<T, PopError>) {
        if result.is_ok() && self.has_queued() {
            if self.spin.waiters_sleep_long() {
                // SeqCst fence, then `sleepers`, as in `wake_one_popper`: nobody registered
                // means every popper still to park re-checks after our item's publication.
                fence(Ordering::SeqCst);
                // Relaxed: ordered by the fence above.
                if self.sleepers.load(Ordering::Relaxed) != 0 {
                    self.seq.bump();
                    self.seq.wake_uncovered(self.len());
                }
            } else {
                self.wake_one_popper();
            }
        }
    }

    /// Passes the wake on after term. Several poppers can sleep on a slot that a push claimed
    /// before `term` but publishes after it, and every one must come to see Terminated. Two
    /// mechanisms see to it: such a push wakes all sleepers when it sees the mark (see
    /// `wake_one_popper`), and a popper that leaves a terminated queue after sleeping, spinning
    /// for a relying push, or seeing it closed bumps and wakes all (this function). The first
    /// came from the stress test `term_loses_nothing`; each covers the other in the loom models
    /// `term_with_two_poppers_and_a_publishing_push` and
    /// `term_with_a_popper_that_takes_the_last_item_and_leaves`, which deadlock only when both
    /// are removed. Acquire in `is_terminated`: the mark is visible here because
    /// this popper's wake came through the word, whose bumps form a release sequence headed by
    /// term's own bump, or through the token, which the relying push moved after term. Costs
    /// one load before term, and no system call while nobody is parked.
    #[cold]
    fn pass_on_after_term(&self) {
        if self.is_terminated() {
            self.seq.bump();
            self.seq.wake_all();
        }
    }

    /// Whether any position between head and tail is claimed (published or not). SeqCst loads:
    /// read after the caller's SeqCst token swap, they see every push whose wake relied on it.
    fn has_queued(&self) -> bool {
        self.tail.load(Ordering::SeqCst) & !self.mark_bit != self.head.load(Ordering::SeqCst)
    }

    /// Takes the oldest connection without blocking.
    ///
    /// Errors: [`PopError::Empty`] when nothing is ready (including an item whose push has not
    /// finished publishing), [`PopError::Terminated`] when terminated and drained.
    pub fn try_pop(&self) -> Result<T, PopError> {
        match self.dequeue() {
            Dequeue::Item(item) => Ok(item),
            Dequeue::Closed => Err(PopError::Terminated),
            Dequeue::Empty | Dequeue::Pending => Err(PopError::Empty),
        }
    }

    /// Wakes every parked worker (httpd's `ap_queue_interrupt_all`, used on ungraceful exit).
    ///
    /// Every `pop` in progress when this is called returns promptly: with an item if one is
    /// queued, else [`PopError::Interrupted`]. Pops that start after it returned block normally.
    pub fn interrupt_all(&self) {
        // SeqCst: ordered before the bump below, so a popper that reads the bumped sequence
        // value sees the new epoch.
        self.interrupts.fetch_add(1, Ordering::SeqCst);
        self.seq.bump();
        self.seq.wake_all();
    }

    /// Terminates the queue (httpd's `ap_queue_term`): pushes fail from now on, and pops drain
    /// the items queued before this call, then return [`PopError::Terminated`] forever. Wakes
    /// every parked worker. Idempotent.
    pub fn term(&self) {
        // SeqCst RMW on tail: a push's claim CAS is either before it (item delivered before
        // Terminated) or after it (the push sees the mark and fails). Then bump + wake all.
        self.tail.fetch_or(self.mark_bit, Ordering::SeqCst);
        self.seq.bump();
        self.seq.wake_all();
    }

    /// Whether [`FdQueue::term`] has been called.
    pub fn is_terminated(&self) -> bool {
        // Acquire: a caller that sees `true` also sees everything term's caller did before.
        self.tail.load(Ordering::Acquire) & self.mark_bit != 0
    }

    /// Park/wake counters of the poppers' slow path, for benchmarks and tuning.
    pub fn wait_stats(&self) -> WaitStats {
        self.seq.stats()
    }
}

impl<T> Drop for FdQueue<T> {
    fn drop(&mut self) {
        // `&mut self`: no other thread can be inside push or pop, so every position in
        // [head, tail) holds a published value.
        let mut head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed) & !self.mark_bit;
        while head != tail {
            let index = head & (self.mark_bit - 1);
            self.buffer[index].value.with_mut(|p| {
                // SAFETY: positions in [head, tail) were published by completed pushes and not
                // yet taken; we own the queue exclusively.
                unsafe { (*p).assume_init_drop() }
            });
            head = if index + 1 < self.cap {
                head + 1
            } else {
                (head & !(self.one_lap - 1)).wrapping_add(self.one_lap)
            };
        }
    }
}

impl<T> fmt::Debug for FdQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FdQueue")
            .field("capacity", &self.cap)
            .field("head", &self.head.load(Ordering::Relaxed))
            .field("tail", &self.tail.load(Ordering::Relaxed))
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

    /// Waits (up to 5 s) until `n` poppers have parked at least once in total.
    fn wait_parked<T: Send>(q: &FdQueue<T>, n: u64) {
        let start = Instant::now();
        while q.wait_stats().parks < n {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "poppers never parked"
            );
            thread::sleep(Duration::from_millis(1));
        }
        // Let them get into the futex proper.
        thread::sleep(Duration::from_millis(20));
    }

    #[test]
    fn send_sync() {
        fn check<X: Send + Sync>() {}
        check::<FdQueue<Box<u8>>>();
        check::<FdQueue<std::cell::Cell<u8>>>();
    }

    #[test]
    fn zero_capacity_is_clamped() {
        let q = FdQueue::new(0);
        assert_eq!(q.capacity(), 1);
        q.push(1).unwrap();
        assert!(matches!(q.push(2), Err(PushError::Full(2))));
    }

    #[test]
    fn fifo_len_and_full() {
        let q = FdQueue::new(3);
        assert!(q.is_empty());
        for i in 0..3 {
            q.push(i).unwrap();
        }
        assert_eq!(q.len(), 3);
        let err = q.push(9).unwrap_err();
        assert!(matches!(err, PushError::Full(9)));
        assert_eq!(err.into_inner(), 9);
        assert_eq!(q.pop(), Ok(0));
        assert_eq!(q.try_pop(), Ok(1));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Ok(2));
        assert_eq!(q.try_pop(), Err(PopError::Empty));
    }

    #[test]
    fn wraps_around_many_laps() {
        for cap in [1, 2, 3, 4, 5, 8] {
            let q = FdQueue::new(cap);
            let mut next_out = 0;
            for i in 0..1000 {
                q.push(i).unwrap();
                if q.len() == cap {
                    while let Ok(v) = q.try_pop() {
                        assert_eq!(v, next_out);
                        next_out += 1;
                    }
                }
            }
            while let Ok(v) = q.try_pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, 1000);
        }
    }

    #[test]
    fn term_drains_then_terminated() {
        let q = FdQueue::new(4);
        q.push(1).unwrap();
        q.push(2).unwrap();
        assert!(!q.is_terminated());
        q.term();
        q.term(); // idempotent
        assert!(q.is_terminated());
        assert!(matches!(q.push(3), Err(PushError::Terminated(3))));
        assert_eq!(q.pop(), Ok(1));
        assert_eq!(q.try_pop(), Ok(2));
        assert_eq!(q.pop(), Err(PopError::Terminated));
        assert_eq!(q.try_pop(), Err(PopError::Terminated));
        assert_eq!(q.pop(), Err(PopError::Terminated));
    }

    #[test]
    fn fast_path_makes_no_wake() {
        let q = FdQueue::new(2);
        for i in 0..100 {
            q.push(i).unwrap();
            assert_eq!(q.pop(), Ok(i));
        }
        assert_eq!(q.wait_stats(), WaitStats::default());
    }

    #[test]
    fn push_wakes_parked_popper_once() {
        let q = Arc::new(FdQueue::new(2));
        let q2 = Arc::clone(&q);
        let h = thread::spawn(move || q2.pop());
        wait_parked(&q, 1);
        q.push(42).unwrap();
        assert_eq!(h.join().unwrap(), Ok(42));
        assert_eq!(q.wait_stats().wakes, 1);
    }

    #[test]
    fn interrupt_all_wakes_every_parked_popper() {
        let q = Arc::new(FdQueue::<u32>::new(4));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let q = Arc::clone(&q);
                thread::spawn(move || q.pop())
            })
            .collect();
        wait_parked(&q, 3);
        q.interrupt_all();
        for h in handles {
            assert_eq!(h.join().unwrap(), Err(PopError::Interrupted));
        }
        // A pop that starts after the interrupt blocks normally.
        let q2 = Arc::clone(&q);
        let h = thread::spawn(move || q2.pop());
        thread::sleep(Duration::from_millis(50));
        assert!(!h.is_finished());
        q.push(5).unwrap();
        assert_eq!(h.join().unwrap(), Ok(5));
    }

    #[test]
    fn interrupt_all_with_items_still_delivers() {
        let q = FdQueue::new(4);
        q.push(1).unwrap();
        q.interrupt_all();
        assert_eq!(q.pop(), Ok(1));
    }

    #[test]
    fn term_wakes_every_parked_popper() {
        let q = Arc::new(FdQueue::<u32>::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let q = Arc::clone(&q);
                thread::spawn(move || q.pop())
            })
            .collect();
        wait_parked(&q, 4);
        q.term();
        for h in handles {
            assert_eq!(h.join().unwrap(), Err(PopError::Terminated));
        }
    }

    #[test]
    fn drop_drops_held_items() {
        #[derive(Debug)]
        struct Counted(Arc<StdCounter>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let dropped = Arc::new(StdCounter::new(0));
        {
            let q = FdQueue::new(3);
            // Move head/tail around the ring first.
            for _ in 0..2 {
                q.push(Counted(Arc::clone(&dropped))).unwrap();
                drop(q.pop().unwrap());
            }
            for _ in 0..3 {
                q.push(Counted(Arc::clone(&dropped))).unwrap();
            }
            q.term();
        }
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 5);
    }

    #[test]
    fn errors_display() {
        assert_eq!(
            PopError::Terminated.to_string(),
            "connection queue is terminated and drained"
        );
        assert_eq!(PushError::Full(()).to_string(), "connection queue is full");
    }
}
