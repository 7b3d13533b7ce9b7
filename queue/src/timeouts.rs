//! [`Timeouts`]: when a child's parked connections time out (KeepAliveTimeout, Timeout,
//! lingering close), kept as FIFOs that workers push to as they park and that whoever the
//! alarm wakes pops up to "now".
//!
//! - One FIFO per (producer, class). A producer is one thread (a worker, or the child's main
//!   thread at a graceful stop); a class is one timeout length. A producer's deadlines in a
//!   class are its clock at the push plus the same length, so each FIFO is sorted by deadline
//!   and expiry is O(expired): pop from the front while due. The earliest deadline is the
//!   least of the FIFOs' heads.
//! - Lazy deletion: a connection that is resumed before its deadline leaves its entry where it
//!   is. When the entry comes due, the expirer's claim through its ticket fails (the
//!   connection was parked again under a new generation, or closed) and it forgets the entry;
//!   and when the consumer re-arms the alarm, heads whose key the caller says is spent go at
//!   once, so that the alarm is set for a live entry, not woken once per park for stale
//!   ones. So a park costs one push and no search, and an entry lives at most one timeout.
//! - Never early: a producer's deadlines in one class must not decrease for its FIFO to stay
//!   sorted. A push whose deadline is earlier than the FIFO's last one is filed at that last
//!   one (late by the difference, never early): a caller that files an older deadline (a
//!   lingering close that waits on, under the deadline it had) may do so.
//! - A FIFO is a single-producer single-consumer list of fixed-size blocks: the producer
//!   fills the tail block (allocating the first at its first push) and links a new one when it is full; the consumer frees a block once
//!   it has popped past it. One consumer at a time: [`Timeouts::try_expire`] hands out the
//!   consumer's part to one thread (a flag taken by swap), and [`Expiry::rearm`] gives it back.
//! - The alarm (a timerfd in the MPM, anything [`Alarm`] here) is set for the earliest
//!   deadline, never later: `armed` holds the deadline it was last lowered to. A push whose
//!   deadline is earlier lowers it and sets the alarm; the consumer, once done, raises `armed`
//!   to "none", then looks at every head (a SeqCst fence on each side: either the consumer
//!   sees the producer's entry, or the producer sees "none" and sets the alarm itself), and
//!   lowers it again to the earliest head. Whoever sets the alarm then re-reads `armed` and sets
//!   it again while `armed` is lower than what it set, so the alarm's last setting is never
//!   later than the earliest deadline (a set that lands after a lower one is followed by a
//!   re-read that sees the lower value). Both sides go through `publish_then_check`.

use crate::handshake::publish_then_check;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;
use std::ptr;

/// Entries per block.
#[cfg(not(loom))]
const BLOCK: usize = 128;
#[cfg(loom)]
const BLOCK: usize = 2;

/// No deadline.
pub const NEVER: u64 = u64::MAX;

/// What wakes the expirer: `set(deadline)` makes it fire at or after `deadline` (the caller's
/// clock), replacing any earlier setting.
pub trait Alarm {
    /// Fires at `deadline`.
    fn set(&self, deadline: u64);
}

struct Block<K> {
    entries: [UnsafeCell<MaybeUninit<(u64, K)>>; BLOCK],
    /// The next block, set by the producer before it publishes the block's first entry.
    next: AtomicPtr<Block<K>>,
}

impl<K> Block<K> {
    fn boxed() -> *mut Block<K> {
        Box::into_raw(Box::new(Block {
            entries: std::array::from_fn(|_| UnsafeCell::new(MaybeUninit::uninit())),
            next: AtomicPtr::new(ptr::null_mut()),
        }))
    }
}

/// A FIFO's consumer side.
struct Head<K> {
    popped: usize,
    block: *mut Block<K>,
    /// The index of `block`'s first entry.
    base: usize,
}

/// One (producer, class) FIFO.
struct Fifo<K> {
    /// Entries pushed so far; the producer's Release store publishes each. Not padded to a
    /// cache line: a child has a FIFO per worker and timeout class, most never used, and
    /// padded each took 256 bytes (a child of 50 workers with a parked head's 8 round
    /// lengths as classes: 100 kB more). A producer's own FIFOs sit side by side, so a line
    /// is shared by one producer's classes and, at the edges, a neighbour's.
    pushed: AtomicUsize,
    /// The producer's side: the tail block (null until the first push: most FIFOs of a
    /// child, one per worker and class, are never used), and the last deadline pushed.
    /// Only the producer touches them.
    tail: UnsafeCell<(*mut Block<K>, u64)>,
    /// The first block, set by the producer's first push before it publishes the entry;
    /// where the consumer starts.
    first: AtomicPtr<Block<K>>,
    /// The consumer's side: entries popped so far, the head block and the index of its
    /// first entry. Only the thread holding the consumer's flag touches them.
    head: UnsafeCell<Head<K>>,
}

impl<K: Copy> Fifo<K> {
    fn new() -> Fifo<K> {
        Fifo {
            pushed: AtomicUsize::new(0),
            tail: UnsafeCell::new((ptr::null_mut(), 0)),
            first: AtomicPtr::new(ptr::null_mut()),
            head: UnsafeCell::new(Head {
                popped: 0,
                block: ptr::null_mut(),
                base: 0,
            }),
        }
    }

    /// Producer only: files `key` at `deadline`, or at the last deadline filed if that is
    /// later (module doc); returns the deadline filed.
    ///
    /// # Safety
    /// The caller is this FIFO's one producer.
    unsafe fn push(&self, deadline: u64, key: K) -> u64 {
        // Relaxed: only the producer writes `pushed`.
        let n = self.pushed.load(Ordering::Relaxed);
        // SAFETY: the producer's own field (caller's contract), and blocks from the tail on
        // are never freed by the consumer (it frees only blocks it has popped past, and the
        // entry the producer writes is not published yet).
        unsafe {
            let deadline = self.tail.with_mut(|tail| {
                let (tail, latest) = &mut *tail;
                let deadline = deadline.max(*latest);
                *latest = deadline;
                if n == 0 {
                    *tail = Block::boxed();
                    // Relaxed: the Release store of `pushed` below publishes it.
                    self.first.store(*tail, Ordering::Relaxed);
                } else if n % BLOCK == 0 {
                    let next = Block::boxed();
                    // Release is not needed here: the Release store of `pushed` below
                    // publishes the link with the entry.
                    (**tail).next.store(next, Ordering::Relaxed);
                    *tail = next;
                }
                (**tail).entries[n % BLOCK].with_mut(|e| (*e).write((deadline, key)));
                deadline
            });
            // Release: publishes the entry (and a new block's link) to the consumer's
            // Acquire.
            self.pushed.store(n + 1, Ordering::Release);
            deadline
        }
    }

    /// Consumer only: the head entry, if any.
    ///
    /// # Safety
    /// The caller holds the consumer's flag.
    unsafe fn peek(&self) -> Option<(u64, K)> {
        // Acquire: pairs with push's Release, so the entry and the links to it are visible.
        let pushed = self.pushed.load(Ordering::Acquire);
        // SAFETY: the consumer's own fields (caller's contract); entries below `pushed` are
        // initialised and the producer no longer writes them.
        unsafe {
            self.head.with_mut(|head| {
                let head = &mut *head;
                if head.popped == pushed {
                    return None;
                }
                if head.block.is_null() {
                    // The first entry: its block was stored before the entry's publication.
                    head.block = self.first.load(Ordering::Relaxed);
                }
                if head.popped - head.base == BLOCK {
                    // The head block is spent: move to the next (linked before the entry
                    // we saw published) and free the old one, which nobody uses any more.
                    let next = (*head.block).next.load(Ordering::Relaxed);
                    drop(Box::from_raw(head.block));
                    head.block = next;
                    head.base += BLOCK;
                }
                let i = head.popped - head.base;
                Some((*head.block).entries[i].with_mut(|e| (*e).assume_init()))
            })
        }
    }

    /// Consumer only: drops the head entry (after `peek` returned it).
    ///
    /// # Safety
    /// The caller holds the consumer's flag and `peek` just returned an entry.
    unsafe fn pop(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.head.with_mut(|head| (*head).popped += 1) };
    }
}

impl<K> Drop for Fifo<K> {
    fn drop(&mut self) {
        // Entries are `Copy`: only the blocks need freeing, from the consumer's head on.
        // SAFETY: `&mut self`: nobody else touches the head.
        let mut block = self.head.with_mut(|h| unsafe { (*h).block });
        if block.is_null() {
            // Never peeked at: from the first block, if any.
            block = self.first.load(Ordering::Relaxed);
        }
        while !block.is_null() {
            // SAFETY: `&mut self`: every block from the head on is ours, linked once.
            let b = unsafe { Box::from_raw(block) };
            block = b.next.load(Ordering::Relaxed);
        }
    }
}

/// The timeouts of one child (see the module doc). `K` is what an entry carries (a ticket).
pub struct Timeouts<K> {
    fifos: Box<[Fifo<K>]>,
    classes: usize,
    /// Per producer: its handle was handed out.
    producers: Box<[AtomicBool]>,
    /// A thread holds the consumer's part.
    expiring: CachePadded<AtomicBool>,
    /// The deadline the alarm was last lowered to ([`NEVER`]: not set).
    armed: CachePadded<AtomicU64>,
}

// SAFETY: entries are `Copy + Send` values moved between threads; each FIFO's producer and
// consumer fields are touched by one thread at a time (a unique Producer handle, the
// `expiring` flag).
unsafe impl<K: Copy + Send> Send for Timeouts<K> {}
// SAFETY: as for Send.
unsafe impl<K: Copy + Send> Sync for Timeouts<K> {}

/// The one handle through which producer `index` pushes.
pub struct Producer<'a, K> {
    t: &'a Timeouts<K>,
    index: usize,
}

/// The consumer's part, held by one thread at a time (from [`Timeouts::try_expire`] until
/// [`Expiry::rearm`]).
pub struct Expiry<'a, K> {
    t: &'a Timeouts<K>,
}

impl<K: Copy> Timeouts<K> {
    /// Timeouts for `producers` threads and `classes` timeout lengths.
    pub fn new(producers: usize, classes: usize) -> Timeouts<K> {
        let classes = classes.max(1);
        Timeouts {
            fifos: (0..producers * classes).map(|_| Fifo::new()).collect(),
            classes,
            producers: (0..producers).map(|_| AtomicBool::new(false)).collect(),
            expiring: CachePadded::new(AtomicBool::new(false)),
            armed: CachePadded::new(AtomicU64::new(NEVER)),
        }
    }

    /// Producer `index`'s handle, once (None after that, or beyond the count).
    pub fn producer(&self, index: usize) -> Option<Producer<'_, K>> {
        // Relaxed: only hands out the handle once; the handle's pushes order themselves.
        let taken = self.producers.get(index)?.swap(true, Ordering::Relaxed);
        (!taken).then_some(Producer { t: self, index })
    }

    /// The consumer's part, unless another thread holds it.
    pub fn try_expire(&self) -> Option<Expiry<'_, K>> {
        // Acquire: pairs with rearm's Release, so the last consumer's pops are visible.
        (!self.expiring.swap(true, Ordering::Acquire)).then_some(Expiry { t: self })
    }

    /// Lowers `armed` to `deadline` if that is earlier, and then sets the alarm (see the
    /// module doc).
    fn lower(&self, deadline: u64, alarm: &impl Alarm) {
        // SeqCst, here and in `settle`: these are the `armed` accesses of the fence
        // handshake with the consumer (module doc).
        let mut a = self.armed.load(Ordering::SeqCst);
        while deadline < a {
            match self
                .armed
                .compare_exchange_weak(a, deadline, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return self.settle(deadline, alarm),
                Err(now) => a = now,
            }
        }
    }

    /// Sets the alarm to `v`, then again while `armed` is lower than what was set.
    fn settle(&self, mut v: u64, alarm: &impl Alarm) {
        loop {
            alarm.set(v);
            let a = self.armed.load(Ordering::SeqCst);
            if a >= v {
                return;
            }
            v = a;
        }
    }
}

impl<K: Copy> Producer<'_, K> {
    /// Files `key` to expire at `deadline` in `class` (or later, never earlier: see the
    /// module doc), setting the alarm if it is the earliest.
    pub fn push(&mut self, class: usize, deadline: u64, key: K, alarm: &impl Alarm) {
        let t = self.t;
        let fifo = &t.fifos[self.index * t.classes + class.min(t.classes - 1)];
        // The producer's half of the handshake with `Expiry::rearm` (module doc): the entry
        // is published before `armed` is read.
        publish_then_check(
            // SAFETY: this handle is the FIFO's only producer (handed out once, `&mut self`).
            || unsafe { fifo.push(deadline, key) },
            |filed| t.lower(filed, alarm),
        );
    }
}

impl<K: Copy> Expiry<'_, K> {
    /// Pops the entries due at `now` (deadline <= now), in deadline order per FIFO, and
    /// gives each (deadline, key) to `take`, which says whether it was still live (its
    /// claim won); stops after `max` live ones (the rest stay filed, and `rearm` sets the
    /// alarm for them at once). Returns how many were live.
    pub fn expire(&mut self, now: u64, max: usize, mut take: impl FnMut(u64, K) -> bool) -> usize {
        let mut live = 0;
        for fifo in self.t.fifos.iter() {
            // SAFETY: we hold the consumer's flag.
            unsafe {
                while live < max {
                    match fifo.peek() {
                        Some((deadline, key)) if deadline <= now => {
                            fifo.pop();
                            live += usize::from(take(deadline, key));
                        }
                        _ => break,
                    }
                }
            }
        }
        live
    }

    /// Sets the alarm for the earliest deadline left whose key is `live` (entries at the
    /// head of a FIFO whose key is not go now, whatever their deadline: an entry of an
    /// earlier park whose connection came back would otherwise wake the alarm for nothing,
    /// one wake per park), and gives the consumer's part back.
    pub fn rearm(self, alarm: &impl Alarm, live: impl Fn(K) -> bool) {
        let t = self.t;
        // The consumer's half of the handshake (module doc): "none armed" is visible
        // before the heads are read.
        let earliest = publish_then_check(
            || t.armed.store(NEVER, Ordering::SeqCst),
            |()| {
                t.fifos
                    .iter()
                    .filter_map(|f| {
                        // SAFETY: we hold the consumer's flag.
                        unsafe {
                            loop {
                                match f.peek() {
                                    Some((_, k)) if !live(k) => f.pop(),
                                    head => return head.map(|(d, _)| d),
                                }
                            }
                        }
                    })
                    .min()
                    .unwrap_or(NEVER)
            },
        );
        if earliest != NEVER {
            t.lower(earliest, alarm);
        }
        // Release: pairs with try_expire's Acquire (the next consumer sees our pops).
        t.expiring.store(false, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[derive(Default)]
    struct Clock(Cell<u64>);
    impl Alarm for Clock {
        fn set(&self, deadline: u64) {
            self.0.set(deadline);
        }
    }

    #[test]
    fn entries_expire_in_order_never_early_and_the_alarm_follows_the_earliest() {
        let alarm = Clock::default();
        let t = Timeouts::new(2, 2);
        let mut a = t.producer(0).unwrap();
        let mut b = t.producer(1).unwrap();
        assert!(t.producer(0).is_none(), "one handle per producer");
        a.push(0, 5_000, 'a', &alarm);
        assert_eq!(alarm.0.get(), 5_000);
        b.push(1, 2_000, 'b', &alarm);
        assert_eq!(alarm.0.get(), 2_000, "earlier: lowered");
        a.push(0, 5_010, 'c', &alarm);
        assert_eq!(alarm.0.get(), 2_000, "later: untouched");
        let mut due = Vec::new();
        let mut e = t.try_expire().unwrap();
        assert!(t.try_expire().is_none(), "one consumer at a time");
        e.expire(1_999, 10, |_, k| {
            due.push(k);
            true
        });
        assert!(due.is_empty());
        e.expire(2_000, 10, |_, k| {
            due.push(k);
            true
        });
        assert_eq!(due, ['b']);
        e.rearm(&alarm, |_| true);
        assert_eq!(alarm.0.get(), 5_000, "the next head");
        let mut e = t.try_expire().unwrap();
        // The batch bound leaves 'c' filed.
        assert_eq!(
            e.expire(9_999, 1, |_, k| {
                due.push(k);
                true
            }),
            1
        );
        e.rearm(&alarm, |_| true);
        assert_eq!(
            alarm.0.get(),
            5_010,
            "what the batch left is still armed for"
        );
        let mut e = t.try_expire().unwrap();
        e.expire(9_999, 10, |_, k| {
            due.push(k);
            true
        });
        assert_eq!(due, ['b', 'a', 'c']);
        e.rearm(&alarm, |_| true);
        assert_eq!(t.armed.load(Ordering::Relaxed), NEVER);
    }

    #[test]
    fn a_head_not_yet_due_at_a_block_boundary_is_looked_at_again_and_again() {
        let alarm = Clock::default();
        let t = Timeouts::new(1, 1);
        let mut p = t.producer(0).unwrap();
        for i in 0..BLOCK as u64 + 1 {
            p.push(0, i, i, &alarm);
        }
        let mut seen = Vec::new();
        for _ in 0..3 {
            let mut e = t.try_expire().unwrap();
            e.expire(BLOCK as u64 - 1, usize::MAX, |_, k| {
                seen.push(k);
                true
            });
            e.rearm(&alarm, |_| true);
            assert_eq!(alarm.0.get(), BLOCK as u64, "the next block's first entry");
        }
        assert_eq!(seen.len(), BLOCK);
    }

    #[test]
    fn many_blocks_are_pushed_and_freed() {
        let alarm = Clock::default();
        let t = Timeouts::new(1, 1);
        let mut p = t.producer(0).unwrap();
        let mut due = Vec::new();
        for round in 0..10u64 {
            for i in 0..1000u64 {
                p.push(0, round * 1000 + i, i, &alarm);
            }
            let mut e = t.try_expire().unwrap();
            e.expire(round * 1000 + 499, usize::MAX, |_, k| {
                due.push(k);
                true
            });
            e.rearm(&alarm, |_| true);
            assert_eq!(alarm.0.get(), round * 1000 + 500);
            let mut e = t.try_expire().unwrap();
            e.expire(u64::MAX - 1, usize::MAX, |_, k| {
                due.push(k);
                true
            });
            e.rearm(&alarm, |_| true);
        }
        assert_eq!(due.len(), 10_000);
        // Leftovers are freed on drop.
        p.push(0, 1, 1, &alarm);
    }

    #[test]
    fn stale_heads_go_at_rearm_and_the_alarm_waits_for_a_live_entry() {
        let alarm = Clock::default();
        let t = Timeouts::new(1, 1);
        let mut p = t.producer(0).unwrap();
        for (d, k) in [(100, 'a'), (200, 'b'), (300, 'c')] {
            p.push(0, d, k, &alarm);
        }
        // 'a' and 'b' came back (their tickets are spent): the alarm goes to 'c'.
        t.try_expire().unwrap().rearm(&alarm, |k| k == 'c');
        assert_eq!(alarm.0.get(), 300);
        let mut due = Vec::new();
        let mut e = t.try_expire().unwrap();
        e.expire(1_000, 10, |_, k| {
            due.push(k);
            true
        });
        assert_eq!(due, ['c'], "the spent ones were dropped at the rearm");
        e.rearm(&alarm, |_| true);
    }

    #[test]
    fn an_earlier_deadline_is_filed_late_never_early() {
        let alarm = Clock::default();
        let t = Timeouts::new(1, 1);
        let mut p = t.producer(0).unwrap();
        p.push(0, 300, 'a', &alarm);
        // Older than the FIFO's last: filed at 300, behind 'a'.
        p.push(0, 100, 'b', &alarm);
        assert_eq!(alarm.0.get(), 300);
        let mut due = Vec::new();
        let mut e = t.try_expire().unwrap();
        e.expire(299, 10, |d, k| {
            due.push((d, k));
            true
        });
        assert!(due.is_empty(), "nothing early");
        e.expire(300, 10, |d, k| {
            due.push((d, k));
            true
        });
        e.rearm(&alarm, |_| true);
        assert_eq!(due, [(300, 'a'), (300, 'b')]);
    }
}
