//! How many connections a parking child may hold when accept meets EMFILE or ENFILE
//! (modules hold more descriptors than `crate::mpm::open_files` reserved, or the system is
//! out). Pure: the caller passes the count of connections it holds; unit-tested.
//!
//! - A failure at full budget lowers the child to what it holds: it takes no more until
//!   some closes, then tries its full budget again. Each lowering in an episode waits for
//!   twice as many closes as the last (1, 2, 4, ...), so a shortage that lasts costs one
//!   failed accept (and the core's AH02179 line) per 1, 2, 4, ... closes, not one per
//!   close. The episode ends when an accept at full budget takes the child above the
//!   fewest connections a failure found it holding: it has descriptors it did not have.
//! - A failure while already lowered is the same shortage seen again, not a retry that
//!   failed: the set wakes more than one waiter for a new connection, and Linux takes the
//!   new descriptor before it looks at the queue, so every accept tried at a shortage fails,
//!   whether or not it would have had a connection. It lowers the bound to what the child
//!   holds now and leaves the wait as it was.
//! - A failure whose accept began before the full budget came back (the worker was
//!   preempted between its accept and `failed`) is stale: it says nothing about the
//!   descriptors the close just freed, and is dropped. The next accept tells.
//!
//! All of it is one word, changed by compare-and-swap, so every change goes from one whole
//! state to another: a lowered child always has closes to wait for, and the close that
//! gives the full budget back cannot be undone by a failure that raced with it. (Until
//! 2026-12-07 the bound, the closes and the wait were three atomics: two workers that met
//! one shortage doubled the wait, and a failure landing just after the close that
//! restored the budget left the child lowered with no close to wait for, for good.)
//!
//! Every access is Relaxed: the word is the whole state, and its readers only steer when
//! the child accepts; a stale read moves one accept by a close. Whoever makes a decision
//! visible to other threads (the listening sockets' registration) orders it itself: the
//! close that re-settles the child's sockets reads the bound after its own decrement.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Lowerings in a row: the last waits for `1 << (MAX_LOWERINGS - 1)` closes.
const MAX_LOWERINGS: u32 = 21;

// The word: `level` in bits 0-31, `closes_left` in 32-52, `lowerings` in 53-57, `epoch`
// in 58-63.
const CLOSES_SHIFT: u32 = 32;
const CLOSES_BITS: u32 = 21;
const LOWERINGS_SHIFT: u32 = 53;
const LOWERINGS_BITS: u32 = 5;
const EPOCH_SHIFT: u32 = 58;
const EPOCH_BITS: u32 = 6;

const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

/// The shortage's state (see the module doc), packed into one word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    /// The fewest connections a failure found the child holding in this episode (read
    /// only while `lowerings` > 0).
    level: u32,
    /// Closes still to wait for before the full budget (0: at full budget).
    closes_left: u32,
    /// Lowerings from the full budget in this episode (0: no episode).
    lowerings: u32,
    /// Counts (wrapping) the times the full budget came back.
    epoch: u32,
}

impl State {
    fn pack(self) -> u64 {
        debug_assert!(u64::from(self.closes_left) <= mask(CLOSES_BITS));
        debug_assert!(self.lowerings <= MAX_LOWERINGS);
        u64::from(self.level)
            | u64::from(self.closes_left) << CLOSES_SHIFT
            | u64::from(self.lowerings) << LOWERINGS_SHIFT
            | (u64::from(self.epoch) & mask(EPOCH_BITS)) << EPOCH_SHIFT
    }

    fn unpack(w: u64) -> State {
        State {
            level: w as u32,
            closes_left: (w >> CLOSES_SHIFT & mask(CLOSES_BITS)) as u32,
            lowerings: (w >> LOWERINGS_SHIFT & mask(LOWERINGS_BITS)) as u32,
            epoch: (w >> EPOCH_SHIFT & mask(EPOCH_BITS)) as u32,
        }
    }
}

/// When the full budget last came back, read before an accept (see [`Shortage::failed`]).
/// It wraps after 64 returns of the full budget: a worker stalled that long between its
/// accept and `failed` lowers the child once more than it should, which closes undo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Epoch(u32);

pub struct Shortage {
    /// The most connections the child may hold for its open-file limit.
    budget: usize,
    state: AtomicU64,
}

/// What a failed accept did.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// Lowered the child from its full budget to `open` connections until `closes` close:
    /// worth a warning.
    Lowered { open: usize, closes: u32 },
    /// The child was lowered already (the same shortage met by another accept).
    AlreadyLowered,
    /// The accept began before the full budget came back: nothing changed.
    Stale,
}

impl Shortage {
    pub fn new(budget: usize) -> Shortage {
        Shortage {
            budget,
            state: AtomicU64::new(State::default().pack()),
        }
    }

    fn load(&self) -> State {
        State::unpack(self.state.load(Relaxed))
    }

    /// Moves the state by `f` (None: leave it), in one compare-and-swap; returns what `f`
    /// said last.
    fn update<R>(&self, mut f: impl FnMut(&mut State) -> Option<R>) -> Option<R> {
        let mut w = self.state.load(Relaxed);
        loop {
            let mut s = State::unpack(w);
            let r = f(&mut s)?;
            match self
                .state
                .compare_exchange_weak(w, s.pack(), Relaxed, Relaxed)
            {
                Ok(_) => return Some(r),
                Err(now) => w = now,
            }
        }
    }

    /// Whether a child holding `open` connections takes no more.
    pub fn at_limit(&self, open: usize) -> bool {
        let s = self.load();
        open >= self.budget || (s.closes_left > 0 && open >= s.level as usize)
    }

    /// When the full budget last came back: read it before an accept, for `failed`.
    pub fn epoch(&self) -> Epoch {
        Epoch(self.load().epoch)
    }

    /// An accept that began at `before` failed for want of a descriptor while the child
    /// holds `open` (at least 1; holding none, the child retires instead).
    pub fn failed(&self, open: usize, before: Epoch) -> Failure {
        let open = open.clamp(1, u32::MAX as usize) as u32;
        self.update(|s| {
            if s.epoch != before.0 {
                return None;
            }
            if s.closes_left > 0 {
                s.level = s.level.min(open);
                return Some(Failure::AlreadyLowered);
            }
            s.level = if s.lowerings == 0 {
                open
            } else {
                s.level.min(open)
            };
            s.lowerings = (s.lowerings + 1).min(MAX_LOWERINGS);
            s.closes_left = 1 << (s.lowerings - 1);
            Some(Failure::Lowered {
                open: open as usize,
                closes: s.closes_left,
            })
        })
        .unwrap_or(Failure::Stale)
    }

    /// A connection of the child closed: after as many closes as the lowering asked for,
    /// the full budget again.
    pub fn closed(&self) {
        self.update(|s| {
            s.closes_left = s.closes_left.checked_sub(1)?;
            if s.closes_left == 0 {
                s.epoch = s.epoch.wrapping_add(1);
            }
            Some(())
        });
    }

    /// An accept went through, and the child holds `open`: above the fewest a failure
    /// found it holding, at full budget, the episode is over (the next lowering waits for
    /// one close again).
    pub fn accepted(&self, open: usize) {
        let s = self.load();
        if s.lowerings == 0 || s.closes_left > 0 || open <= s.level as usize {
            return;
        }
        // One try: if the word moved meanwhile, a failure or a close came, and the episode
        // goes on.
        let over = State {
            epoch: s.epoch,
            ..State::default()
        };
        let _ = self
            .state
            .compare_exchange(s.pack(), over.pack(), Relaxed, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(s: &Shortage, open: usize) -> Failure {
        s.failed(open, s.epoch())
    }

    /// The first lowering of an episode, at `open`: one close to wait for.
    fn first_at(open: usize) -> Failure {
        Failure::Lowered { open, closes: 1 }
    }

    #[test]
    fn the_word_holds_every_field_whole() {
        let full = State {
            level: u32::MAX,
            closes_left: 1 << (MAX_LOWERINGS - 1),
            lowerings: MAX_LOWERINGS,
            epoch: mask(EPOCH_BITS) as u32,
        };
        assert_eq!(State::unpack(full.pack()), full);
        let wrapped = State {
            epoch: mask(EPOCH_BITS) as u32 + 1,
            ..State::default()
        };
        assert_eq!(State::unpack(wrapped.pack()).epoch, 0);
    }

    #[test]
    fn a_failure_holds_the_child_at_what_it_has_until_one_close() {
        let s = Shortage::new(100);
        assert!(!s.at_limit(10));
        assert_eq!(fail(&s, 10), first_at(10));
        assert!(s.at_limit(10), "takes no more");
        assert!(!s.at_limit(9), "refills what a close frees meanwhile");
        s.closed();
        assert!(
            !s.at_limit(10) && !s.at_limit(99),
            "the full budget after one close"
        );
        assert!(s.at_limit(100));
    }

    #[test]
    fn the_same_shortage_seen_by_more_accepts_waits_for_one_close_only() {
        let s = Shortage::new(100);
        let before = s.epoch();
        assert_eq!(s.failed(10, before), first_at(10));
        assert_eq!(s.failed(10, before), Failure::AlreadyLowered);
        assert_eq!(s.failed(10, before), Failure::AlreadyLowered);
        s.closed();
        assert!(!s.at_limit(10), "one close gives the budget back");
    }

    #[test]
    fn a_failure_while_lowered_lowers_to_what_the_child_holds_now() {
        let s = Shortage::new(100);
        fail(&s, 10);
        assert_eq!(fail(&s, 7), Failure::AlreadyLowered);
        assert!(s.at_limit(7));
        assert_eq!(fail(&s, 9), Failure::AlreadyLowered);
        assert!(s.at_limit(7), "never raised by a failure");
    }

    #[test]
    fn a_failure_from_before_the_budget_came_back_changes_nothing() {
        let s = Shortage::new(100);
        let before = s.epoch();
        assert_eq!(s.failed(10, before), first_at(10));
        s.closed();
        // A second worker's accept failed with the first, and it reports only now.
        assert_eq!(s.failed(9, before), Failure::Stale);
        assert!(!s.at_limit(10), "still at full budget");
        // Before: it lowered the child with nothing left to wait for, for good.
        for _ in 0..3 {
            s.closed();
        }
        assert!(!s.at_limit(50));
    }

    #[test]
    fn retries_that_fail_in_a_row_wait_for_twice_as_many_closes() {
        let s = Shortage::new(100);
        let mut waits = Vec::new();
        for _ in 0..4 {
            let Failure::Lowered { closes, .. } = fail(&s, 10) else {
                panic!("a failure at full budget lowers");
            };
            let mut n = 0;
            while s.at_limit(10) {
                s.closed();
                n += 1;
            }
            assert_eq!(n, closes);
            waits.push(n);
            // The child refills to 10 (not above) and the retry fails again.
            s.accepted(10);
        }
        assert_eq!(waits, [1, 2, 4, 8]);
    }

    #[test]
    fn an_accept_above_the_level_at_full_budget_ends_the_episode() {
        let s = Shortage::new(100);
        fail(&s, 10);
        s.closed();
        s.accepted(10);
        assert_eq!(
            fail(&s, 10),
            Failure::Lowered {
                open: 10,
                closes: 2
            }
        );
        s.accepted(9);
        s.closed();
        s.accepted(11);
        assert!(s.at_limit(10), "still lowered: the episode goes on");
        s.closed();
        s.accepted(11);
        assert_eq!(fail(&s, 10), first_at(10));
    }

    #[test]
    fn a_close_that_is_not_waited_for_changes_nothing() {
        let s = Shortage::new(100);
        s.closed();
        assert_eq!(s.load(), State::default());
        fail(&s, 10);
        s.closed();
        let after = s.load();
        s.closed();
        assert_eq!(
            s.load(),
            after,
            "one close restored it; the next is an ordinary close"
        );
    }

    #[test]
    fn the_wait_stops_doubling_at_its_ceiling() {
        let s = Shortage::new(100);
        s.state.store(
            State {
                level: 10,
                lowerings: MAX_LOWERINGS,
                ..State::default()
            }
            .pack(),
            Relaxed,
        );
        assert_eq!(
            fail(&s, 10),
            Failure::Lowered {
                open: 10,
                closes: 1 << (MAX_LOWERINGS - 1)
            }
        );
    }

    #[test]
    fn closes_from_many_threads_are_each_counted() {
        // Before: two closes that read the same count took one off it between them.
        let s = std::sync::Arc::new(Shortage::new(100));
        let wait = 1 << (MAX_LOWERINGS - 1);
        s.state.store(
            State {
                level: 10,
                closes_left: wait,
                lowerings: MAX_LOWERINGS,
                epoch: 0,
            }
            .pack(),
            Relaxed,
        );
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let s = s.clone();
                std::thread::spawn(move || (0..10_000).for_each(|_| s.closed()))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(s.load().closes_left, wait - 40_000);
    }
}
