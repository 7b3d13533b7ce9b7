//! [`PoolStack`]: the bounded LIFO of recycled transaction pools (`ptrans`) in [`QueueInfo`].
//!
//! httpd keeps recycled pools on an untagged Treiber stack whose nodes live inside the pools
//! themselves, and avoids ABA only because a single thread ever pops (contract §4.3). This one is
//! ABA-safe by construction, for any number of pushers and poppers:
//!
//! * the nodes are a fixed array of `max_recycled_pools` slots that is never freed while the stack
//!   lives, so reading a stale node's `next` is always a valid (atomic) read;
//! * there are two Treiber stacks (R. K. Treiber, IBM RJ 5118, 1986) of slot *indices*: `free`
//!   (empty slots) and `full` (slots holding a pool). Each head is a 64-bit word packing the top
//!   index, the stack's length, and a *version tag* that every successful push or pop increments
//!   (the IBM System/370 "tagged pointer" remedy), so a CAS made from a stale read of the head
//!   fails unless exactly a multiple of 2^23 operations hit that head in between *and* left the
//!   same top index and length (a thread preempted between two adjacent instructions for the
//!   ~0.4 s those operations take at the very least, then matching 40 more bits).
//!
//! Keeping the length in the head word makes [`PoolStack::len`] exact at no cost: a separate
//! counter was one more contended read-modify-write per push and pop (and ~15 % of the hand-off
//! time in the queue benchmark).
//!
//! `free_idle_pools` closes the `full` stack with a flag bit in its head word and takes the whole
//! chain in one swap, so a pool is either returned to the closer or refused to its pusher.
//!
//! [`QueueInfo`]: crate::QueueInfo

use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;

/// Head-word bits 0..20: the index of the top slot, or [`NIL`].
const INDEX_MASK: u64 = (1 << 20) - 1;
/// Index value meaning "no slot" (empty stack / end of chain).
const NIL: u32 = INDEX_MASK as u32;
/// The most slots a stack can have (httpd's ThreadLimit is at most 100000 for worker).
const MAX_BOUND: usize = NIL as usize;
/// Head-word bits 20..40: how many slots the stack holds; adding this increments it.
const LEN_ONE: u64 = 1 << 20;
/// The length field.
const LEN_MASK: u64 = ((1 << 20) - 1) << 20;
/// Head-word bit 40: the stack is closed (only ever set on `full`).
const CLOSED: u64 = 1 << 40;
/// Head-word bits 41..64: the version tag; adding this increments it (wrapping).
const TAG_ONE: u64 = 1 << 41;

/// One slot of the node array.
struct Node<P> {
    /// Index of the slot below this one in whichever stack holds it. Written only by the thread
    /// that owns the slot, before the Release CAS that links it; may be read stale by a racing
    /// popper, whose tagged CAS then fails.
    next: AtomicU32,
    /// Initialised exactly while the slot is on the `full` stack (or owned by a thread between
    /// its `free` pop and `full` push, or between its `full` pop and `free` push).
    value: UnsafeCell<MaybeUninit<P>>,
}

/// Bounded, ABA-safe LIFO stack of pools. Used by [`crate::QueueInfo`].
pub(crate) struct PoolStack<P> {
    /// Top of the stack of slots holding a pool (index | length | CLOSED | tag). Invariant: the
    /// chain from here through `next` lists exactly the slots whose value is initialised and not
    /// owned by a thread, and the length field counts them; once CLOSED is set, the index is NIL
    /// and the length 0 forever.
    full: CachePadded<AtomicU64>,
    /// Top of the stack of empty slots (index | length | tag). Never closed.
    free: CachePadded<AtomicU64>,
    /// The slots; their number is the bound.
    nodes: Box<[Node<P>]>,
}

// SAFETY: the stack owns the pools in its slots and hands each one to exactly one thread (the
// tagged CAS that pops a slot index makes that thread its sole owner); no `&P` is ever shared.
unsafe impl<P: Send> Send for PoolStack<P> {}
// SAFETY: as for `Send`: all shared state is atomics, and slot values are touched only by the
// slot's current owner.
unsafe impl<P: Send> Sync for PoolStack<P> {}

/// The new head word after linking `index` on top of `old`: length + 1, same CLOSED bit, tag + 1.
#[inline]
fn pushed(old: u64, index: u32) -> u64 {
    ((old & !INDEX_MASK) + LEN_ONE).wrapping_add(TAG_ONE) | u64::from(index)
}

/// The new head word after unlinking the top of `old`, leaving `next` on top: length - 1, same
/// CLOSED bit, tag + 1. Only called on a non-empty stack, so the length does not underflow.
#[inline]
fn popped(old: u64, next: u32) -> u64 {
    ((old & !INDEX_MASK) - LEN_ONE).wrapping_add(TAG_ONE) | u64::from(next)
}

impl<P: Send> PoolStack<P> {
    /// A stack with room for `bound` pools (clamped to 2^20 - 1).
    pub(crate) fn new(bound: usize) -> Self {
        let bound = bound.min(MAX_BOUND);
        let nodes: Box<[Node<P>]> = (0..bound)
            .map(|i| Node {
                // Initially every slot is on `free`, in index order.
                next: AtomicU32::new(if i + 1 < bound { i as u32 + 1 } else { NIL }),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        let free_top = if bound > 0 { 0 } else { u64::from(NIL) };
        Self {
            full: CachePadded::new(AtomicU64::new(u64::from(NIL))),
            free: CachePadded::new(AtomicU64::new(free_top | (bound as u64 * LEN_ONE))),
            nodes,
        }
    }

    /// Pops a slot index from `head`; `None` if the stack is empty or closed.
    fn pop_index(&self, head: &AtomicU64) -> Option<u32> {
        // Acquire: pairs with the Release CAS that linked the top slot, so its `next` (and, on
        // `full`, its value) are visible.
        let mut cur = head.load(Ordering::Acquire);
        loop {
            let index = (cur & INDEX_MASK) as u32;
            if cur & CLOSED != 0 || index == NIL {
                return None;
            }
            // Relaxed: ordered by the Acquire that produced `cur`. If the slot was popped and
            // relinked since, this value is stale, but then the tag moved and the CAS fails.
            let next = self.nodes[index as usize].next.load(Ordering::Relaxed);
            // Acquire on success: we now own slot `index` and must see its contents;
            // Acquire on failure: the new `cur` is used like the initial load.
            match head.compare_exchange_weak(
                cur,
                popped(cur, next),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(index),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Links slot `index` (owned by the caller) on top of `head`. Fails if the stack is closed.
    fn push_index(&self, head: &AtomicU64, index: u32) -> Result<(), ()> {
        // Relaxed: only a guess, validated by the CAS.
        let mut cur = head.load(Ordering::Relaxed);
        loop {
            if cur & CLOSED != 0 {
                return Err(());
            }
            // Relaxed: published by the Release CAS below.
            self.nodes[index as usize]
                .next
                .store((cur & INDEX_MASK) as u32, Ordering::Relaxed);
            // Release: hands the slot (its `next` and value, or the fact that its old value was
            // read out) to whoever pops it with Acquire.
            match head.compare_exchange_weak(
                cur,
                pushed(cur, index),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(actual) => cur = actual,
            }
        }
    }

    /// Stores `pool`; gives it back if all slots are used or the stack is closed.
    pub(crate) fn push(&self, pool: P) -> Result<(), P> {
        // Relaxed: an early exit only; push_index re-checks with the CAS.
        if self.full.load(Ordering::Relaxed) & CLOSED != 0 {
            return Err(pool);
        }
        let Some(index) = self.pop_index(&self.free) else {
            return Err(pool);
        };
        let node = &self.nodes[index as usize];
        node.value.with_mut(|p| {
            // SAFETY: popping `index` from `free` made us its only owner, and a slot on `free`
            // holds no value (its last reader pushed it there after reading).
            unsafe { p.write(MaybeUninit::new(pool)) }
        });
        if self.push_index(&self.full, index).is_ok() {
            return Ok(());
        }
        // Closed meanwhile: take the pool back out and return the slot.
        let pool = node.value.with_mut(|p| {
            // SAFETY: we still own the slot (the push to `full` failed) and initialised it above.
            unsafe { p.read().assume_init() }
        });
        let _ = self.push_index(&self.free, index);
        Err(pool)
    }

    /// Takes the most recently stored pool.
    pub(crate) fn pop(&self) -> Option<P> {
        let index = self.pop_index(&self.full)?;
        let pool = self.nodes[index as usize].value.with_mut(|p| {
            // SAFETY: popping `index` from `full` made us its only owner, and slots on `full`
            // hold an initialised value (made visible by pop_index's Acquire).
            unsafe { p.read().assume_init() }
        });
        // `free` is never closed, so this cannot fail.
        let _ = self.push_index(&self.free, index);
        Some(pool)
    }

    /// Closes the stack and returns every pool it held, most recent first.
    pub(crate) fn close_and_take_all(&self) -> Vec<P> {
        // AcqRel CAS (keeps the tag moving): Acquire takes ownership of the whole chain (pairs with the pushes'
        // Release); the CLOSED bit makes every later push fail and every later pop see empty.
        let mut cur = self.full.load(Ordering::Relaxed);
        let old = loop {
            let closed =
                ((cur & !(INDEX_MASK | LEN_MASK)).wrapping_add(TAG_ONE)) | CLOSED | u64::from(NIL);
            match self
                .full
                .compare_exchange_weak(cur, closed, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break cur,
                Err(actual) => cur = actual,
            }
        };
        let mut pools = Vec::new();
        let mut index = (old & INDEX_MASK) as u32;
        while index != NIL {
            let node = &self.nodes[index as usize];
            // Relaxed: the chain is ours since the swap, and its links were published by the
            // Release CASes our Acquire synchronised with.
            let next = node.next.load(Ordering::Relaxed);
            pools.push(node.value.with_mut(|p| {
                // SAFETY: every slot on the chain taken above is initialised and now ours alone.
                unsafe { p.read().assume_init() }
            }));
            let _ = self.push_index(&self.free, index);
            index = next;
        }
        pools
    }

    /// How many pools are held (a snapshot, exact at the moment of the load).
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a statistic.
        ((self.full.load(Ordering::Relaxed) & LEN_MASK) / LEN_ONE) as usize
    }

    /// Whether the stack has been closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.full.load(Ordering::Acquire) & CLOSED != 0
    }
}

impl<P> Drop for PoolStack<P> {
    fn drop(&mut self) {
        // `&mut self`: no thread owns a slot, so exactly the `full` chain holds values.
        let mut index = (self.full.load(Ordering::Relaxed) & INDEX_MASK) as u32;
        while index != NIL {
            let node = &self.nodes[index as usize];
            node.value.with_mut(|p| {
                // SAFETY: slots on the `full` chain are initialised; we own the stack.
                unsafe { (*p).assume_init_drop() }
            });
            index = node.next.load(Ordering::Relaxed);
        }
    }
}
