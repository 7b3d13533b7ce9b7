//! [`Inbox`]: the lock-free multi-producer, single-consumer queue through which workers hand
//! keep-alive connections back to the listener ("park this connection"), with a sleep protocol
//! for a consumer that sleeps somewhere else (the listener sleeps in `epoll_wait`, woken by an
//! eventfd write).
//!
//! **The queue** is Dmitry Vyukov's bounded ring
//! (<https://www.1024cores.net/home/lock-free-algorithms/queues/bounded-mpmc-queue>), as in
//! [`crate::FdQueue`], reduced to one consumer: every slot carries a *stamp* saying whether it is
//! writable or readable in the current lap; producers claim positions by a CAS on `tail`; the
//! consumer owns `head` outright (no CAS, no shared write) and takes the head slot once its
//! stamp says *published*. No allocation per push: the capacity is fixed at construction. When
//! the ring is full a push waits (bounded spin, then `sched_yield`) for the consumer, which never
//! waits on a producer, so the wait ends as soon as the listener drains. Termination is a mark
//! bit in `tail` ([`Inbox::close`]), so "pushed before close" and "refused" are decided by one
//! atomic word, as in `FdQueue`.
//!
//! **Order.** Items come out in the order their pushes claimed positions in `tail`: one total
//! FIFO order, consistent with real time for pushes that do not overlap. In particular the
//! connections one worker parks come out in the order it parked them (its pushes claim
//! increasing positions), which is what the listener needs. A claimed but not yet published
//! slot holds back the items behind it until its push publishes (a few instructions, unless
//! that producer is preempted); that push then runs the wake check below like any other.
//!
//! **The sleep protocol** is a Dekker handshake on a three-state word `state`
//! ([`AWAKE`] / [`SLEEPING`] / [`NOTIFIED`]):
//!
//! - consumer, [`InboxConsumer::prepare_to_sleep`]: store `SLEEPING`; `fence(SeqCst)`; look at
//!   the head slot (and at the close mark). If an item is published (or the inbox is closed and
//!   drained) store `AWAKE` back and return `false`: drain instead of sleeping. Otherwise return
//!   `true` and sleep (`epoll_wait`); on waking, [`InboxConsumer::awake`] stores `AWAKE`.
//! - producer, [`Inbox::push`]: publish the item (stamp store); `fence(SeqCst)`; load `state`.
//!   Only if it reads `SLEEPING`, CAS `SLEEPING -> NOTIFIED`: the one pusher whose CAS succeeds
//!   gets [`Wake::Needed`] and writes the eventfd; everyone else gets [`Wake::NotNeeded`].
//!
//! Why no wake-up is lost: the two fences are totally ordered. If the producer's fence comes
//! first, its load of `state` is coherence-ordered before the consumer's `SLEEPING` store, and
//! the consumer's check after its own fence sees the published stamp, so it does not sleep. If
//! the consumer's fence comes first, the producer's load sees this `SLEEPING` or a later value:
//! `SLEEPING` (it CASes; if it loses, someone else won), `NOTIFIED` (a wake for this sleep went
//! to another pusher) or `AWAKE` (the consumer is up and its *next* `prepare_to_sleep` will see
//! the item by the first case). So a consumer never sleeps with an item published at the head
//! unless a `Wake::Needed` was handed to some pusher after its `prepare_to_sleep`, and the CAS
//! hands out at most one per `SLEEPING` store. A slot claimed but unpublished at the head does
//! not stop the consumer from sleeping: its push will publish and run the same check.
//! [`Inbox::close`] runs the check too, so a sleeping consumer learns of the close.
//!
//! A `Wake::Needed` can arrive for a sleep the consumer abandoned (its `prepare_to_sleep` found
//! an item after the pusher's CAS) or ended for another reason (another fd fired): the eventfd is
//! then readable once too often, and one later `epoll_wait` returns at once. That is the whole
//! cost of a race; it is never a lost item.
//!
//! The loom models are in `tests/loom_inbox.rs`; `tests/stress_inbox.rs` runs millions of items
//! through a real eventfd.

use crate::sync::{
    fence, spin, spin_hint, yield_now, AtomicBool, AtomicU32, AtomicUsize, Ordering, UnsafeCell,
    WAIT_ROUNDS,
};
use crossbeam_utils::CachePadded;
use std::fmt;
use std::mem::MaybeUninit;

/// `state`: the consumer is running (or about to drain); pushes need not wake it.
const AWAKE: u32 = 0;
/// `state`: the consumer has announced a sleep and found nothing to drain; the next push (or
/// close) that sees this value and wins the CAS to [`NOTIFIED`] must wake it.
const SLEEPING: u32 = 1;
/// `state`: a pusher (or closer) got [`Wake::Needed`] for the current sleep; later ones rely on
/// that wake.
const NOTIFIED: u32 = 2;

/// What a pusher must do after a successful [`Inbox::push`] (or after [`Inbox::close`]).
#[must_use = "on Wake::Needed the caller must wake the consumer (write its eventfd)"]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The consumer sleeps (or is about to) and this caller is the one chosen to wake it: write
    /// the eventfd now. Exactly one caller gets this per sleep.
    Needed,
    /// The consumer is awake, or another caller is waking it: nothing to do.
    NotNeeded,
}

/// One ring entry.
struct Slot<T> {
    /// Invariant: for a position `pos` (an index plus a lap) that maps to this slot,
    /// `stamp == pos` means the slot is empty and the push at `pos` may write it;
    /// `stamp == pos + 1` means the push at `pos` has published its value and the consumer may
    /// read it; the consumer then stores `pos + one_lap`, the next lap's writable stamp.
    stamp: AtomicUsize,
    /// Initialised exactly when `stamp == pos + 1` for the slot's current position; owned by the
    /// push whose CAS claimed that position while it writes, then by the consumer.
    value: UnsafeCell<MaybeUninit<T>>,
}

/// Lock-free bounded MPSC queue with a sleep protocol for a consumer that sleeps elsewhere
/// (workers park keep-alive connections; the listener drains). See the module documentation
/// for the algorithm and the ordering argument.
///
/// Producers call [`Inbox::push`] on a shared `&Inbox`; the single consumer works through the
/// [`InboxConsumer`] handle from [`Inbox::consumer`], of which at most one exists at a time.
///
/// ```
/// use rworker_queue::{Inbox, Wake};
/// let inbox = Inbox::new(4);
/// let mut listener = inbox.consumer().unwrap();
/// assert!(listener.prepare_to_sleep()); // empty: sleep (epoll_wait) now
/// assert_eq!(inbox.push(7), Ok(Wake::Needed)); // this pusher writes the eventfd
/// assert_eq!(inbox.push(8), Ok(Wake::NotNeeded)); // that wake covers this one too
/// listener.awake(); // epoll_wait returned
/// assert_eq!(listener.drain().collect::<Vec<_>>(), [7, 8]);
/// inbox.close();
/// assert_eq!(inbox.push(9), Err(9)); // the worker closes the connection itself
/// assert!(listener.is_finished());
/// ```
pub struct Inbox<T> {
    /// Position of the next push (index in the low bits, lap above `mark_bit`), plus `mark_bit`
    /// once [`Inbox::close`] ran. Advanced only by a pusher's CAS; once marked it never changes.
    tail: CachePadded<AtomicUsize>,
    /// The consumer's sleep state: [`AWAKE`], [`SLEEPING`] or [`NOTIFIED`]. Invariant: only the
    /// consumer stores `SLEEPING` and `AWAKE`; pushers and closers only CAS `SLEEPING ->
    /// NOTIFIED`, so each `SLEEPING` store yields at most one [`Wake::Needed`].
    state: CachePadded<AtomicU32>,
    /// Position of the next item the consumer takes (same encoding as `tail`, never marked).
    /// Only the current [`InboxConsumer`] reads or writes it (it keeps a copy while it lives and
    /// writes it back on drop); the `consumer_taken` flag hands it from one consumer to the next.
    head: CachePadded<UnsafeCell<usize>>,
    /// Whether an [`InboxConsumer`] exists. Taken with an Acquire swap, released with a Release
    /// store, so a new consumer sees the `head` its predecessor wrote back.
    consumer_taken: AtomicBool,
    /// The ring, `cap` slots.
    buffer: Box<[Slot<T>]>,
    /// Number of slots, >= 1.
    cap: usize,
    /// `(cap + 1).next_power_of_two()`: the close mark in `tail`, above every index.
    mark_bit: usize,
    /// `2 * mark_bit`: the amount a position grows by per lap around the ring.
    one_lap: usize,
}

// SAFETY: an `Inbox<T>` owns the `T`s in its slots and moves each one from the pushing thread to
// the consumer (or to the dropping thread); the stamp protocol guarantees that only the thread
// whose CAS claimed a position, then the one consumer, touch its slot. So sending or sharing the
// inbox is sound whenever `T` may be sent; no `&T` is ever shared.
unsafe impl<T: Send> Send for Inbox<T> {}
// SAFETY: see the `Send` impl; shared mutation goes through atomics, a slot owned by one thread
// at a time, or `head`, owned by the one `InboxConsumer` (guarded by `consumer_taken`).
unsafe impl<T: Send> Sync for Inbox<T> {}

impl<T: Send> Inbox<T> {
    /// Creates an empty inbox holding up to `capacity` items (0 is clamped to 1). A push into a
    /// full inbox waits for the consumer to drain, so size it for the bursts expected between
    /// two drains (e.g. `ThreadsPerChild`: each worker parks at most one connection per request).
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
            tail: CachePadded::new(AtomicUsize::new(0)),
            state: CachePadded::new(AtomicU32::new(AWAKE)),
            head: CachePadded::new(UnsafeCell::new(0)),
            consumer_taken: AtomicBool::new(false),
            buffer,
            cap,
            mark_bit,
            one_lap: mark_bit * 2,
        }
    }

    /// The number of slots (after clamping 0 to 1).
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Appends `item` (a worker parks a connection). Lock-free; makes no system call.
    ///
    /// `Ok(Wake::Needed)`: the consumer sleeps and this caller must wake it (write the eventfd)
    /// right away; exactly one caller per sleep gets it. `Ok(Wake::NotNeeded)`: nothing to do.
    /// `Err(item)` after [`Inbox::close`]: the caller keeps the item (closes the connection
    /// itself). If the inbox is full, waits (spin, then yield) until the consumer takes an item
    /// or the inbox is closed; the consumer must therefore keep draining until it closes the inbox,
    /// and must not push itself.
    pub fn push(&self, item: T) -> Result<Wake, T> {
        // Relaxed: only a guess at the position; the CAS below validates it.
        let mut tail = self.tail.load(Ordering::Relaxed);
        let mut round = 0;
        loop {
            if tail & self.mark_bit != 0 {
                return Err(item);
            }
            let index = tail & (self.mark_bit - 1);
            let lap = tail & !(self.one_lap - 1);
            let slot = &self.buffer[index];
            // Acquire: pairs with the consumer's Release stamp store when it emptied this slot
            // in the previous lap, so its read of the old value happens-before our write.
            let stamp = slot.stamp.load(Ordering::Acquire);
            if stamp == tail {
                // The slot is writable in this lap: try to claim position `tail`.
                let next = if index + 1 < self.cap {
                    tail + 1
                } else {
                    lap.wrapping_add(self.one_lap)
                };
                // Relaxed: the claim needs only atomicity. Read-modify-writes of `tail` are
                // totally ordered, so close's `fetch_or` either comes first (the value differs
                // from `tail` and we fail) or later (the marked final value counts our
                // position, which the consumer then waits for). The item itself is published by
                // the stamp store, not by this CAS.
                match self.tail.compare_exchange_weak(
                    tail,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        slot.value.with_mut(|p| {
                            // SAFETY: our CAS claimed position `tail`, and `stamp == tail` said
                            // the slot is empty; no other thread touches it until we publish.
                            unsafe { p.write(MaybeUninit::new(item)) }
                        });
                        // Release: publishes the value to the consumer's Acquire stamp load.
                        slot.stamp.store(tail + 1, Ordering::Release);
                        return Ok(self.wake_check());
                    }
                    Err(current) => {
                        tail = current;
                        spin_hint();
                    }
                }
            } else if stamp.wrapping_add(self.one_lap) == tail + 1 {
                // The slot still holds last lap's item: the ring is full (or the consumer is
                // taking that item right now). The consumer never waits for us, so this ends as
                // soon as it drains: spin a little, then give the CPU away (on 2 cores the
                // listener may need ours).
                if round < WAIT_ROUNDS {
                    spin(round);
                    round += 1;
                } else {
                    yield_now();
                }
                tail = self.tail.load(Ordering::Relaxed);
            } else {
                // Our `tail` was stale: another push claimed this position. Reload.
                spin_hint();
                tail = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// The producer's half of the Dekker handshake, run after publishing (an item's stamp, or
    /// the close mark). See the module documentation for the argument.
    #[inline]
    fn wake_check(&self) -> Wake {
        // SeqCst fence between our publication and the `state` load: the consumer does the
        // mirror image (store SLEEPING; SeqCst fence; look at the head slot), so at least one
        // side sees the other.
        fence(Ordering::SeqCst);
        // Relaxed: ordered by the fence above. A plain load first, so that the common case (the
        // listener is awake) does not take the line exclusive.
        if self.state.load(Ordering::Relaxed) != SLEEPING {
            return Wake::NotNeeded;
        }
        // Relaxed: only atomicity matters here; the one CAS that moves this SLEEPING to NOTIFIED
        // wins the wake. The consumer sees our item through the eventfd (a system call orders
        // it) and, whatever woke it, through its next `prepare_to_sleep`: our load read a value
        // before that next SLEEPING store. A failed CAS read NOTIFIED (someone else wakes this
        // sleep) or AWAKE (the consumer is up): either way nothing is owed.
        match self
            .state
            .compare_exchange(SLEEPING, NOTIFIED, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Wake::Needed,
            Err(_) => Wake::NotNeeded,
        }
    }

    /// Closes the inbox (the child is stopping): every later [`Inbox::push`] fails and gives its
    /// item back; items pushed before still come out of [`InboxConsumer::drain`]. Idempotent.
    ///
    /// Returns [`Wake::Needed`] when the consumer sleeps and the caller must wake it so that it
    /// notices the close (the listener usually closes its own inbox and ignores the result).
    pub fn close(&self) -> Wake {
        // SeqCst RMW (Relaxed would do for the push race, which only needs `tail`'s modification
        // order; SeqCst documents that this is the one decision point). The wake check's fence
        // then orders the mark before our `state` load, as a push's fence orders its stamp.
        let was = self.tail.fetch_or(self.mark_bit, Ordering::SeqCst);
        if was & self.mark_bit != 0 {
            return Wake::NotNeeded;
        }
        self.wake_check()
    }

    /// Whether [`Inbox::close`] has been called.
    pub fn is_closed(&self) -> bool {
        // Acquire: a caller that sees `true` also sees what the closer did before.
        self.tail.load(Ordering::Acquire) & self.mark_bit != 0
    }

    /// The consumer's handle, or `None` while another one exists. The single-consumer rule is
    /// checked here instead of being left to a comment: only the holder of the handle can drain.
    pub fn consumer(&self) -> Option<InboxConsumer<'_, T>> {
        // Acquire: pairs with the Release store of the previous consumer's drop, so the `head`
        // it wrote back is visible.
        if self.consumer_taken.swap(true, Ordering::Acquire) {
            return None;
        }
        let head = self.head.with_mut(|p| {
            // SAFETY: we just took `consumer_taken`, so no other thread accesses `head`.
            unsafe { *p }
        });
        Some(InboxConsumer {
            inbox: self,
            head,
            sleeping: false,
        })
    }
}

/// The consumer's side of an [`Inbox`] (the listener). At most one exists at a time.
///
/// The listener's loop:
///
/// ```text
/// loop {
///     for conn in consumer.drain() { /* park: epoll_ctl, timeout list */ }
///     if consumer.is_finished() { /* closed and empty: stop using the protocol */ }
///     let sleep = consumer.prepare_to_sleep();   // false: items came in, loop and drain
///     epoll_wait(if sleep { timeout } else { 0 });
///     consumer.awake();
///     /* read (reset) the eventfd if it fired, handle the other events */
/// }
/// ```
///
/// Reset the eventfd only between `awake` and the next `prepare_to_sleep`: a wake meant for
/// the next sleep is written after that `prepare_to_sleep`, so it cannot be swallowed early.
pub struct InboxConsumer<'a, T> {
    /// The inbox this handle drains.
    inbox: &'a Inbox<T>,
    /// The consumer's copy of `Inbox::head`: the position of the next item to take. Written
    /// back on drop.
    head: usize,
    /// Whether the last `prepare_to_sleep` returned `true` and `awake` has not run since.
    sleeping: bool,
}

impl<'a, T: Send> InboxConsumer<'a, T> {
    /// Takes the oldest item, if it is published. Never blocks.
    pub fn try_pop(&mut self) -> Option<T> {
        if self.sleeping {
            self.awake();
        }
        let inbox = self.inbox;
        let head = self.head;
        let index = head & (inbox.mark_bit - 1);
        let slot = &inbox.buffer[index];
        // Acquire: pairs with the push's Release stamp store, so the value is visible.
        if slot.stamp.load(Ordering::Acquire) != head + 1 {
            // Empty, or claimed and not yet published: its push will run the wake check.
            return None;
        }
        let item = slot.value.with_mut(|p| {
            // SAFETY: `stamp == head + 1` means the push at `head` initialised the value (made
            // visible by the Acquire above); we are the only consumer and mark it empty below.
            unsafe { p.read().assume_init() }
        });
        let next = if index + 1 < inbox.cap {
            head + 1
        } else {
            (head & !(inbox.one_lap - 1)).wrapping_add(inbox.one_lap)
        };
        // Release: our read of the value happens-before the next lap's push writes the slot.
        slot.stamp
            .store(head.wrapping_add(inbox.one_lap), Ordering::Release);
        self.head = next;
        Some(item)
    }

    /// Takes the published items in FIFO order, at most `capacity` of them per call, so that a
    /// steady stream of pushes cannot keep the listener from its poll set. Stops early at a slot
    /// whose push has not published yet (that push will wake the consumer if it sleeps).
    pub fn drain(&mut self) -> Drain<'_, 'a, T> {
        let left = self.inbox.cap;
        Drain {
            consumer: self,
            left,
        }
    }

    /// The consumer's half of the Dekker handshake, just before it sleeps elsewhere.
    ///
    /// Returns `true`: sleep now, and call [`InboxConsumer::awake`] when the sleep ends; if an
    /// item arrives meanwhile, exactly one pusher gets [`Wake::Needed`] and wakes you (as does
    /// a closer). Returns `false`: do not sleep (poll with a zero timeout at most) because an
    /// item is published (drain it), or because the inbox is closed and drained
    /// ([`InboxConsumer::is_finished`]: no wake will ever come; sleep without this protocol).
    pub fn prepare_to_sleep(&mut self) -> bool {
        let inbox = self.inbox;
        // Relaxed store: the fence below orders it before our look at the slot, which is all
        // the handshake needs (see the module documentation).
        inbox.state.store(SLEEPING, Ordering::Relaxed);
        // SeqCst fence: the mirror of `Inbox::wake_check`'s. Either a producer's fence comes
        // first and we see its stamp (or the close mark) below, or it comes second and it sees
        // SLEEPING (or a later state).
        fence(Ordering::SeqCst);
        let head = self.head;
        let slot = &inbox.buffer[head & (inbox.mark_bit - 1)];
        // Relaxed: ordered by the fence; `try_pop` reloads with Acquire before reading a value.
        let published = slot.stamp.load(Ordering::Relaxed) == head + 1;
        // Relaxed: ordered by the fence. With the mark set, `tail` is final.
        let tail = inbox.tail.load(Ordering::Relaxed);
        let finished = tail & inbox.mark_bit != 0 && tail & !inbox.mark_bit == head;
        if published || finished {
            // Relaxed: only tells pushers not to wake us. If one already won the CAS, its wake
            // lands on a later sleep: one spurious return from epoll_wait, nothing lost.
            inbox.state.store(AWAKE, Ordering::Relaxed);
            return false;
        }
        self.sleeping = true;
        true
    }

    /// Ends a sleep announced by [`InboxConsumer::prepare_to_sleep`] (`epoll_wait` returned, for
    /// whatever reason): pushes stop asking for wakes. Idempotent; `try_pop` and `drain` call it
    /// if you forgot, but calling it first thing after the sleep saves pushers' wakes.
    pub fn awake(&mut self) {
        if self.sleeping {
            // Relaxed: only stops further wakes. No item depends on it: a push that reads AWAKE
            // (or the NOTIFIED this overwrites) read a value before our next SLEEPING store, so
            // our next `prepare_to_sleep` sees its item.
            self.inbox.state.store(AWAKE, Ordering::Relaxed);
            self.sleeping = false;
        }
    }

    /// Whether the inbox is closed and every item pushed before the close has been taken. Then
    /// no push can succeed and no wake will come: the listener stops using the protocol.
    pub fn is_finished(&self) -> bool {
        // Acquire: see `Inbox::is_closed`. With the mark set, `tail` is final, so `head` equal
        // to it means every claimed position was taken.
        let tail = self.inbox.tail.load(Ordering::Acquire);
        tail & self.inbox.mark_bit != 0 && tail & !self.inbox.mark_bit == self.head
    }

    /// The inbox this handle drains (to close it, for one). Do not push into it from the
    /// consumer's own thread: a push into a full inbox waits for the consumer, that is forever.
    pub fn inbox(&self) -> &'a Inbox<T> {
        self.inbox
    }
}

impl<T> Drop for InboxConsumer<'_, T> {
    fn drop(&mut self) {
        if self.sleeping {
            // Relaxed: see `awake`.
            self.inbox.state.store(AWAKE, Ordering::Relaxed);
        }
        let head = self.head;
        self.inbox.head.with_mut(|p| {
            // SAFETY: we hold `consumer_taken` until the store below.
            unsafe { *p = head }
        });
        // Release: the next consumer's Acquire swap sees the `head` written above.
        self.inbox.consumer_taken.store(false, Ordering::Release);
    }
}

impl<T> fmt::Debug for InboxConsumer<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InboxConsumer")
            .field("head", &self.head)
            .field("sleeping", &self.sleeping)
            .finish_non_exhaustive()
    }
}

/// Iterator returned by [`InboxConsumer::drain`].
pub struct Drain<'c, 'a, T> {
    /// The consumer being drained.
    consumer: &'c mut InboxConsumer<'a, T>,
    /// Items this call may still yield (starts at the capacity).
    left: usize,
}

impl<T: Send> Iterator for Drain<'_, '_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        let item = self.consumer.try_pop()?;
        self.left -= 1;
        Some(item)
    }
}

impl<T> fmt::Debug for Drain<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Drain")
            .field("left", &self.left)
            .finish_non_exhaustive()
    }
}

impl<T> Drop for Inbox<T> {
    fn drop(&mut self) {
        // `&mut self`: no push is in progress and no consumer handle exists, so every position
        // in [head, tail) holds a published value.
        let mut head = self.head.with_mut(|p| {
            // SAFETY: exclusive access through `&mut self`.
            unsafe { *p }
        });
        let tail = self.tail.load(Ordering::Relaxed) & !self.mark_bit;
        while head != tail {
            let index = head & (self.mark_bit - 1);
            self.buffer[index].value.with_mut(|p| {
                // SAFETY: positions in [head, tail) were published by completed pushes and not
                // yet taken; we own the inbox exclusively.
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

impl<T> fmt::Debug for Inbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inbox")
            .field("capacity", &self.cap)
            .field("tail", &self.tail.load(Ordering::Relaxed))
            .field("state", &self.state.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdCounter;
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    #[test]
    fn send_sync() {
        fn check<X: Send + Sync>() {}
        check::<Inbox<Box<u8>>>();
        check::<Inbox<std::cell::Cell<u8>>>();
        fn check_send<X: Send>() {}
        check_send::<InboxConsumer<'static, Box<u8>>>();
    }

    #[test]
    fn fifo_and_capacity() {
        let inbox = Inbox::<u32>::new(0);
        assert_eq!(inbox.capacity(), 1);
        let inbox = Inbox::new(3);
        let mut c = inbox.consumer().unwrap();
        assert_eq!(c.try_pop(), None);
        for i in 0..3 {
            assert_eq!(inbox.push(i), Ok(Wake::NotNeeded));
        }
        assert_eq!(c.drain().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(c.try_pop(), None);
    }

    #[test]
    fn wraps_around_many_laps() {
        for cap in [1, 2, 3, 4, 5, 8] {
            let inbox = Inbox::new(cap);
            let mut c = inbox.consumer().unwrap();
            let mut next_out = 0;
            for i in 0..1000 {
                assert_eq!(inbox.push(i), Ok(Wake::NotNeeded));
                if i % cap == cap - 1 {
                    for v in c.drain() {
                        assert_eq!(v, next_out);
                        next_out += 1;
                    }
                }
            }
            for v in c.drain() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert_eq!(next_out, 1000);
        }
    }

    #[test]
    fn drain_yields_at_most_capacity_per_call() {
        let inbox = Inbox::new(2);
        let mut c = inbox.consumer().unwrap();
        assert_eq!(inbox.push(1), Ok(Wake::NotNeeded));
        assert_eq!(c.try_pop(), Some(1));
        assert_eq!(inbox.push(2), Ok(Wake::NotNeeded));
        assert_eq!(inbox.push(3), Ok(Wake::NotNeeded));
        let mut d = c.drain();
        assert_eq!(d.next(), Some(2));
        assert_eq!(inbox.push(4), Ok(Wake::NotNeeded)); // lands in the slot just freed
        assert_eq!(d.next(), Some(3));
        assert_eq!(d.next(), None, "the capacity bound stops this call");
        assert_eq!(c.drain().collect::<Vec<_>>(), [4]);
    }

    #[test]
    fn one_wake_per_sleep() {
        let inbox = Inbox::new(4);
        let mut c = inbox.consumer().unwrap();
        // Awake: no pusher wakes.
        assert_eq!(inbox.push(1), Ok(Wake::NotNeeded));
        // Items pending: do not sleep, and pushers still need no wake.
        assert!(!c.prepare_to_sleep());
        assert_eq!(inbox.push(2), Ok(Wake::NotNeeded));
        assert_eq!(c.drain().collect::<Vec<_>>(), [1, 2]);
        // Empty: sleep; the first push wakes, the next ones rely on it.
        assert!(c.prepare_to_sleep());
        assert_eq!(inbox.push(3), Ok(Wake::Needed));
        assert_eq!(inbox.push(4), Ok(Wake::NotNeeded));
        c.awake();
        c.awake(); // idempotent
        assert_eq!(inbox.push(5), Ok(Wake::NotNeeded));
        assert_eq!(c.drain().collect::<Vec<_>>(), [3, 4, 5]);
        // A new sleep gets its own wake.
        assert!(c.prepare_to_sleep());
        assert_eq!(inbox.push(6), Ok(Wake::Needed));
        // Forgetting `awake`: draining ends the sleep anyway.
        assert_eq!(c.try_pop(), Some(6));
        assert_eq!(inbox.push(7), Ok(Wake::NotNeeded));
    }

    #[test]
    fn close_refuses_later_pushes_and_drains_earlier_ones() {
        let inbox = Inbox::new(4);
        let mut c = inbox.consumer().unwrap();
        assert_eq!(inbox.push(1), Ok(Wake::NotNeeded));
        assert!(!inbox.is_closed());
        assert_eq!(inbox.close(), Wake::NotNeeded);
        assert_eq!(inbox.close(), Wake::NotNeeded); // idempotent
        assert!(inbox.is_closed());
        assert_eq!(inbox.push(2), Err(2));
        assert!(!c.is_finished());
        assert!(!c.prepare_to_sleep(), "an item is pending");
        assert_eq!(c.drain().collect::<Vec<_>>(), [1]);
        assert!(c.is_finished());
        assert!(!c.prepare_to_sleep(), "finished: no wake will ever come");
    }

    #[test]
    fn close_wakes_a_sleeping_consumer() {
        let inbox = Inbox::<u32>::new(4);
        let mut c = inbox.consumer().unwrap();
        assert!(c.prepare_to_sleep());
        assert_eq!(inbox.close(), Wake::Needed);
        c.awake();
        assert!(c.is_finished());
    }

    #[test]
    fn one_consumer_at_a_time_and_head_is_handed_on() {
        let inbox = Inbox::new(4);
        assert_eq!(inbox.push(1), Ok(Wake::NotNeeded));
        assert_eq!(inbox.push(2), Ok(Wake::NotNeeded));
        {
            let mut c = inbox.consumer().unwrap();
            assert!(inbox.consumer().is_none());
            assert_eq!(c.try_pop(), Some(1));
            assert!(!c.prepare_to_sleep());
        }
        let mut c = inbox.consumer().unwrap();
        assert_eq!(c.try_pop(), Some(2));
        assert!(c.prepare_to_sleep());
        drop(c); // ends the sleep
        assert_eq!(inbox.push(3), Ok(Wake::NotNeeded));
    }

    #[test]
    fn push_into_a_full_inbox_waits_for_the_consumer() {
        let inbox = Arc::new(Inbox::new(1));
        assert_eq!(inbox.push(1), Ok(Wake::NotNeeded));
        let i2 = Arc::clone(&inbox);
        let pusher = thread::spawn(move || i2.push(2));
        thread::sleep(Duration::from_millis(50));
        assert!(!pusher.is_finished(), "push must wait while full");
        let mut c = inbox.consumer().unwrap();
        assert_eq!(c.try_pop(), Some(1));
        assert_eq!(pusher.join().unwrap(), Ok(Wake::NotNeeded));
        assert_eq!(c.try_pop(), Some(2));
    }

    #[test]
    fn close_releases_a_push_waiting_on_a_full_inbox() {
        let inbox = Arc::new(Inbox::new(1));
        assert_eq!(inbox.push(1), Ok(Wake::NotNeeded));
        let i2 = Arc::clone(&inbox);
        let pusher = thread::spawn(move || i2.push(2));
        thread::sleep(Duration::from_millis(20));
        let _ = inbox.close();
        assert_eq!(pusher.join().unwrap(), Err(2));
        let mut c = inbox.consumer().unwrap();
        assert_eq!(c.drain().collect::<Vec<_>>(), [1]);
        assert!(c.is_finished());
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
            let inbox = Inbox::new(3);
            {
                let mut c = inbox.consumer().unwrap();
                for _ in 0..2 {
                    assert!(matches!(
                        inbox.push(Counted(Arc::clone(&dropped))),
                        Ok(Wake::NotNeeded)
                    ));
                    drop(c.try_pop().unwrap());
                }
            }
            for _ in 0..3 {
                assert!(matches!(
                    inbox.push(Counted(Arc::clone(&dropped))),
                    Ok(Wake::NotNeeded)
                ));
            }
            let _ = inbox.close();
            // Refused: the item comes back and is dropped here.
            assert!(inbox.push(Counted(Arc::clone(&dropped))).is_err());
            assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 3);
        }
        assert_eq!(dropped.load(std::sync::atomic::Ordering::Relaxed), 6);
    }
}
