//! [`ParkSlots`]: the connections a child parks between requests (`RWorkerKeepAlive park`),
//! each in the slot of a small integer the caller owns while the connection lives (its
//! descriptor number), with one atomic *claim word* per slot.
//!
//! A parked connection can be wanted by several threads at once: the worker that epoll woke
//! because its socket became readable, the worker that found its timeout due, the main
//! thread closing what is left after an immediate stop. Each of them holds a [`Ticket`]
//! (slot index and generation) and races for the connection by one compare-and-swap on the
//! slot's word; the winner owns the connection, every loser forgets its ticket. Each park
//! takes a new generation, so a ticket from an earlier park (a stale epoll event, a timeout
//! entry left behind when the connection was resumed, a descriptor number reused by a new
//! connection) never matches again.
//!
//! Parking has two steps, because the parker must hand the ticket out (arm epoll with it,
//! file a timeout under it) before the connection is in the slot: [`ParkSlots::reserve`]
//! takes the next generation (FILLING), [`Reservation::publish`] stores the connection
//! (PARKED). A claimer that comes in between marks the slot FIRED and leaves; `publish`
//! then gives the connection back to the parker, which still owns it and parks it again
//! (its socket is readable, so epoll fires again) or serves it. So no claimer waits for a
//! parker, and the parker never touches the connection once it is published.
//!
//! The word: bits 0..3 the state, 8..16 a caller's tag (what the connection waits for),
//! 32..64 the generation. Slots live in pages allocated on first use and kept until the
//! table is dropped, so a claim through a stale ticket always reads a live word.

use crate::sync::{AtomicPtr, AtomicU64, Ordering, UnsafeCell};
use std::mem::MaybeUninit;
use std::ptr;

/// No value; the generation is the last one used.
const EMPTY: u64 = 0;
/// Reserved by a parker, which holds the value and may have handed out the ticket.
const FILLING: u64 = 1;
/// The value is in the slot.
const PARKED: u64 = 2;
/// A claimer won and is moving the value out.
const TAKING: u64 = 3;
/// A claimer came while the parker was filling; the parker keeps the value.
const FIRED: u64 = 4;
const STATE_MASK: u64 = 0xff;
const TAG_SHIFT: u32 = 8;
const GEN_SHIFT: u32 = 32;

/// Slots per page.
#[cfg(not(loom))]
const PAGE: usize = 256;
#[cfg(loom)]
const PAGE: usize = 2;

#[inline]
fn state(w: u64) -> u64 {
    w & STATE_MASK
}

#[inline]
fn generation(w: u64) -> u32 {
    (w >> GEN_SHIFT) as u32
}

#[inline]
fn tag(w: u64) -> u8 {
    (w >> TAG_SHIFT) as u8
}

#[inline]
fn word(state: u64, tag: u8, generation: u32) -> u64 {
    state | u64::from(tag) << TAG_SHIFT | u64::from(generation) << GEN_SHIFT
}

/// Which park of which slot: what an epoll event, a timeout entry or a stop carries to
/// claim a parked value. A claim check only (it owns nothing), so it is `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    index: u32,
    generation: u32,
}

impl Ticket {
    /// The ticket as one integer (epoll's user data): generation in the high half.
    pub fn to_u64(self) -> u64 {
        u64::from(self.generation) << 32 | u64::from(self.index)
    }

    /// The ticket [`Ticket::to_u64`] made.
    pub fn from_u64(v: u64) -> Ticket {
        Ticket {
            index: v as u32,
            generation: (v >> 32) as u32,
        }
    }

    /// The slot index.
    pub fn index(self) -> usize {
        self.index as usize
    }
}

struct Slot<T> {
    /// The claim word (see the module doc).
    word: AtomicU64,
    /// Initialised exactly while the word says PARKED or TAKING (and, for the parker, from
    /// its write in `publish` until its CAS there fails).
    value: UnsafeCell<MaybeUninit<T>>,
}

impl<T> Slot<T> {
    fn new() -> Slot<T> {
        Slot {
            word: AtomicU64::new(EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }
}

/// The parked values of one child, by slot index (see the module doc).
pub struct ParkSlots<T> {
    /// Page `i` holds slots `i * PAGE ..`; null until first used, then fixed until drop.
    pages: Box<[AtomicPtr<Slot<T>>]>,
    capacity: usize,
}

// SAFETY: a value is moved in by its parker and out by exactly one claimer (the CAS to
// TAKING decides which); no `&T` is ever shared, so `T: Send` suffices.
unsafe impl<T: Send> Send for ParkSlots<T> {}
// SAFETY: as for Send: shared state is the atomic words, and each value is touched only by
// the one thread the word makes its owner.
unsafe impl<T: Send> Sync for ParkSlots<T> {}

/// A slot reserved by [`ParkSlots::reserve`]: its ticket is valid, its value not yet there.
/// Dropped without [`Reservation::publish`], the slot is empty again and the ticket stale.
pub struct Reservation<'a, T> {
    slot: &'a Slot<T>,
    ticket: Ticket,
    tag: u8,
}

impl<T> ParkSlots<T> {
    /// A table of `capacity` slots (indexes `0..capacity`), allocated a page at a time.
    pub fn new(capacity: usize) -> ParkSlots<T> {
        let capacity = capacity.min(u32::MAX as usize);
        ParkSlots {
            pages: (0..capacity.div_ceil(PAGE))
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            capacity,
        }
    }

    /// How many slots the table has.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Slot `index`, if its page exists.
    fn slot(&self, index: usize) -> Option<&Slot<T>> {
        if index >= self.capacity {
            return None;
        }
        // Acquire: pairs with the Release CAS that installed the page, so its slots'
        // initial words are visible.
        let page = self.pages[index / PAGE].load(Ordering::Acquire);
        if page.is_null() {
            return None;
        }
        // SAFETY: a page is PAGE slots from Box::into_raw (see slot_or_alloc), live until
        // the table is dropped, and index % PAGE is within it.
        Some(unsafe { &*page.add(index % PAGE) })
    }

    /// Slot `index`, allocating its page on first use; None beyond the capacity.
    fn slot_or_alloc(&self, index: usize) -> Option<&Slot<T>> {
        if index >= self.capacity {
            return None;
        }
        if let Some(s) = self.slot(index) {
            return Some(s);
        }
        let fresh: Box<[Slot<T>]> = (0..PAGE).map(|_| Slot::new()).collect();
        let fresh = Box::into_raw(fresh) as *mut Slot<T>;
        let cell = &self.pages[index / PAGE];
        // Release: publishes the new page's initialised slots to the Acquire loads in
        // `slot`. Acquire on failure: the winner's page is then visible.
        let page = match cell.compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::Release,
            Ordering::Acquire,
        ) {
            Ok(_) => fresh,
            Err(theirs) => {
                // SAFETY: ours, never shared: rebuild the box to free it.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, PAGE)) });
                theirs
            }
        };
        // SAFETY: as in `slot`.
        Some(unsafe { &*page.add(index % PAGE) })
    }

    /// Reserves slot `index` for a value waiting for `tag` (the caller's label, readable by
    /// [`ParkSlots::parked`]): the slot takes its next generation, whose ticket the caller
    /// may hand out at once. None when `index` is beyond the capacity or the slot is not
    /// empty (the caller does not own that index).
    pub fn reserve(&self, index: usize, tag: u8) -> Option<Reservation<'_, T>> {
        let slot = self.slot_or_alloc(index)?;
        // Relaxed: the CAS below decides.
        let w = slot.word.load(Ordering::Relaxed);
        if state(w) != EMPTY {
            return None;
        }
        let g = generation(w).wrapping_add(1);
        // Acquire: pairs with the Release store of EMPTY by the last claimer, so its move
        // of the value out of the cell is done before `publish` writes the cell.
        slot.word
            .compare_exchange(
                w,
                word(FILLING, tag, g),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .ok()?;
        Some(Reservation {
            slot,
            ticket: Ticket {
                index: index as u32,
                generation: g,
            },
            tag,
        })
    }

    /// Whether `ticket` may still claim something: false once it is spent for good (its
    /// value was claimed, its reservation dropped, or a later park took the slot), and a
    /// spent ticket never becomes current again (generations only grow). For the timeouts'
    /// lazy deletion: an entry whose ticket is spent can go without waiting for its
    /// deadline.
    pub fn is_current(&self, ticket: Ticket) -> bool {
        let Some(slot) = self.slot(ticket.index()) else {
            return false;
        };
        // Relaxed: a hint. A ticket read as current that is spent meanwhile costs its entry a
        // later look; a spent one stays spent.
        let w = slot.word.load(Ordering::Relaxed);
        generation(w) == ticket.generation && state(w) != EMPTY
    }

    /// Claims the value parked under `ticket`: Some for the one claimer that wins, None for
    /// every other one and for a stale ticket. A claim that comes while the parker is still
    /// filling the slot makes its `publish` fail (the parker keeps the value) and gets None.
    pub fn claim(&self, ticket: Ticket) -> Option<T> {
        let slot = self.slot(ticket.index())?;
        // Relaxed: only the CAS below reads the cell's value, and it is Acquire.
        let mut w = slot.word.load(Ordering::Relaxed);
        loop {
            if generation(w) != ticket.generation {
                return None;
            }
            let next = match state(w) {
                PARKED => word(TAKING, tag(w), ticket.generation),
                FILLING => word(FIRED, tag(w), ticket.generation),
                _ => return None,
            };
            // Acquire on success: pairs with publish's Release CAS, so the value written
            // before it is visible here (for FILLING → FIRED it orders nothing, harmlessly).
            match slot
                .word
                .compare_exchange(w, next, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) if state(w) == FILLING => return None,
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        // SAFETY: our CAS moved the word from PARKED to TAKING, so the value is initialised
        // (published with Release, seen through our Acquire) and no other thread touches the
        // cell until we store EMPTY below.
        let value = slot
            .value
            .with_mut(|p| unsafe { ptr::read(p).assume_init() });
        // Release: the next reserve (Acquire) sees the cell emptied before it refills it.
        slot.word
            .store(word(EMPTY, 0, ticket.generation), Ordering::Release);
        Some(value)
    }

    /// The tickets and tags of the values parked at this moment: a snapshot, any of which
    /// may be claimed (or parked anew) before the caller uses it. Pages not yet used hold
    /// nothing.
    pub fn parked(&self) -> impl Iterator<Item = (Ticket, u8)> + '_ {
        self.pages.iter().enumerate().flat_map(move |(p, cell)| {
            // Acquire: as in `slot`.
            let page = cell.load(Ordering::Acquire);
            let used = if page.is_null() { 0 } else { PAGE };
            (0..used).filter_map(move |k| {
                let index = p * PAGE + k;
                if index >= self.capacity {
                    return None;
                }
                // SAFETY: as in `slot`.
                let slot = unsafe { &*page.add(k) };
                // Relaxed: the snapshot reads no value; a claim through it is a CAS of its own.
                let w = slot.word.load(Ordering::Relaxed);
                (state(w) == PARKED).then_some((
                    Ticket {
                        index: index as u32,
                        generation: generation(w),
                    },
                    tag(w),
                ))
            })
        })
    }
}

impl<T> Reservation<'_, T> {
    /// The ticket that claims the value once published.
    pub fn ticket(&self) -> Ticket {
        self.ticket
    }

    /// Parks `value` in the slot. Err gives it back when a claimer came while the slot was
    /// being filled: the caller still owns the value (the slot is empty again, the ticket
    /// stale), and what that claimer wanted (readable socket, due timeout) is still true.
    pub fn publish(self, value: T) -> Result<(), T> {
        let slot = self.slot;
        let (filling, parked) = (
            word(FILLING, self.tag, self.ticket.generation),
            word(PARKED, self.tag, self.ticket.generation),
        );
        std::mem::forget(self);
        // SAFETY: the word is FILLING or FIRED (ours since reserve): no claimer touches the
        // cell in either state.
        slot.value.with_mut(|p| unsafe { (*p).write(value) });
        // Release: publishes the value to the claimer's Acquire CAS.
        match slot
            .word
            .compare_exchange(filling, parked, Ordering::Release, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(fired) => {
                debug_assert_eq!(state(fired), FIRED);
                // SAFETY: FIRED: still ours, and initialised just above.
                let value = slot
                    .value
                    .with_mut(|p| unsafe { ptr::read(p).assume_init() });
                // Release: as in claim's store of EMPTY.
                slot.word
                    .store(word(EMPTY, 0, generation(fired)), Ordering::Release);
                Err(value)
            }
        }
    }
}

impl<T> Drop for Reservation<'_, T> {
    fn drop(&mut self) {
        // Not published: the slot is empty again under the reserved generation, so the
        // ticket handed out is stale. Release: as in claim's store of EMPTY (nothing was
        // written to the cell, but a later reserve's Acquire needs a release to pair with).
        self.slot
            .word
            .store(word(EMPTY, 0, self.ticket.generation), Ordering::Release);
    }
}

impl<T> Drop for ParkSlots<T> {
    fn drop(&mut self) {
        for cell in self.pages.iter() {
            // Relaxed: `&mut self`, no other thread is left.
            let page = cell.load(Ordering::Relaxed);
            if page.is_null() {
                continue;
            }
            // SAFETY: installed by slot_or_alloc from a boxed slice of PAGE slots; ours now.
            let page = unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(page, PAGE)) };
            for slot in page.iter() {
                if state(slot.word.load(Ordering::Relaxed)) == PARKED {
                    // SAFETY: PARKED: initialised, and nobody else is left to claim it.
                    slot.value
                        .with_mut(|p| unsafe { ptr::drop_in_place((*p).as_mut_ptr()) });
                }
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn one_claimer_wins_and_later_parks_make_old_tickets_stale() {
        let slots = ParkSlots::new(1000);
        let r = slots.reserve(7, 3).unwrap();
        let first = r.ticket();
        r.publish(String::from("a")).unwrap();
        assert!(
            slots.reserve(7, 0).is_none(),
            "parked: not the caller's to reserve"
        );
        assert_eq!(slots.parked().collect::<Vec<_>>(), vec![(first, 3)]);
        assert_eq!(slots.claim(first).as_deref(), Some("a"));
        assert_eq!(slots.claim(first), None, "claimed once");
        let r = slots.reserve(7, 1).unwrap();
        let second = r.ticket();
        assert_ne!(first, second);
        r.publish(String::from("b")).unwrap();
        assert_eq!(slots.claim(first), None, "stale: an earlier park");
        assert_eq!(Ticket::from_u64(second.to_u64()), second);
        assert_eq!(slots.claim(second).as_deref(), Some("b"));
        assert!(slots.parked().next().is_none());
    }

    #[test]
    fn a_claim_while_filling_gives_the_value_back_to_its_parker() {
        let slots = ParkSlots::new(4);
        let r = slots.reserve(0, 0).unwrap();
        let t = r.ticket();
        assert_eq!(slots.claim(t), None, "not published yet");
        assert_eq!(
            r.publish(5u32),
            Err(5),
            "the claim fired: the parker keeps it"
        );
        assert_eq!(slots.claim(t), None, "stale");
        // Empty again: the parker parks it anew.
        let r = slots.reserve(0, 0).unwrap();
        let t2 = r.ticket();
        r.publish(5).unwrap();
        assert_eq!(slots.claim(t2), Some(5));
    }

    #[test]
    fn a_ticket_is_current_until_it_is_spent_and_never_again() {
        let slots = ParkSlots::new(4);
        let r = slots.reserve(1, 0).unwrap();
        let t = r.ticket();
        assert!(slots.is_current(t), "reserved: its entry may claim it");
        r.publish('x').unwrap();
        assert!(slots.is_current(t));
        assert_eq!(slots.claim(t), Some('x'));
        assert!(!slots.is_current(t), "claimed: spent");
        let r = slots.reserve(1, 0).unwrap();
        assert!(!slots.is_current(t), "a later park of the slot");
        assert!(slots.is_current(r.ticket()));
        drop(r);
        assert!(!slots.is_current(t));
    }

    #[test]
    fn an_unpublished_reservation_leaves_the_slot_empty() {
        let slots: ParkSlots<u8> = ParkSlots::new(4);
        let t = slots.reserve(3, 0).unwrap().ticket();
        assert_eq!(slots.claim(t), None);
        assert!(slots.reserve(3, 0).is_some());
        assert!(slots.reserve(4, 0).is_none(), "beyond the capacity");
    }

    #[test]
    fn dropping_the_table_drops_what_is_parked() {
        let v = std::rc::Rc::new(());
        {
            let slots = ParkSlots::new(600);
            for i in [0, 299, 599] {
                slots
                    .reserve(i, 0)
                    .unwrap()
                    .publish(v.clone())
                    .ok()
                    .unwrap();
            }
            assert_eq!(std::rc::Rc::strong_count(&v), 4);
        }
        assert_eq!(std::rc::Rc::strong_count(&v), 1);
    }
}
