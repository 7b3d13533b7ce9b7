//! [`Occupancy`]: the threads inside something that may be closed under them (a parking
//! child's listening socket, which its workers accept on), and who closes it.
//!
//! One word: the number of threads inside, and a CLOSING bit. A thread enters only while
//! the bit is clear; [`Occupancy::begin_close`] sets it, so nobody enters from then on.
//! Whoever sees the count reach zero with the bit set is the one that may close: the
//! closer itself if nobody was inside ([`Occupancy::is_vacated`] after setting the bit),
//! else the last thread to leave ([`Occupancy::leave`] says so). So the close happens once
//! everybody has left, without anybody waiting for anybody, and without a later event
//! having to notice.

use crate::sync::{AtomicU32, Ordering};

/// The bit that keeps new threads out.
const CLOSING: u32 = 1 << 31;

/// Threads inside, and whether a close began (see the module doc).
#[derive(Debug, Default)]
pub struct Occupancy {
    word: AtomicU32,
}

impl Occupancy {
    /// Nobody inside, not closing.
    pub fn new() -> Occupancy {
        Occupancy::default()
    }

    /// Enters, unless a close began or `limit` threads are inside already (a limit of 1
    /// serialises the threads inside).
    pub fn enter(&self, limit: u32) -> bool {
        let limit = limit.clamp(1, CLOSING - 1);
        // Relaxed load, Acquire CAS: pairs with the Release of the last leaver, so with a
        // limit of 1 each thread inside sees what the one before it did there.
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            if w & CLOSING != 0 || w >= limit {
                return false;
            }
            match self
                .word
                .compare_exchange_weak(w, w + 1, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => w = now,
            }
        }
    }

    /// Leaves; true when this was the last thread inside and a close began meanwhile: the
    /// caller now closes (nobody else will).
    #[must_use]
    pub fn leave(&self) -> bool {
        // AcqRel: Release orders what this thread did inside before a close; Acquire, when
        // it turns out to be the closer, orders the close after the others' leaves.
        self.word.fetch_sub(1, Ordering::AcqRel) == CLOSING + 1
    }

    /// Nobody enters from now on. Returns true when nobody was inside: the caller closes
    /// (else the last leaver does).
    #[must_use]
    pub fn begin_close(&self) -> bool {
        // AcqRel: Acquire pairs with the leavers' Release (their work inside is done before
        // a close); Release for the last leaver's Acquire.
        let before = self.word.fetch_or(CLOSING, Ordering::AcqRel);
        before == 0
    }

    /// A close began and nobody is inside (so nobody will enter again).
    pub fn is_vacated(&self) -> bool {
        // Acquire: pairs with the leavers' Release.
        self.word.load(Ordering::Acquire) == CLOSING
    }

    /// Whether a close began.
    pub fn is_closing(&self) -> bool {
        // Relaxed: a hint; the transitions that decide who closes are the RMWs above.
        self.word.load(Ordering::Relaxed) & CLOSING != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn enter_begin_close_leave_the_leaver_closes() {
        let o = Occupancy::new();
        assert!(o.enter(u32::MAX));
        assert!(!o.begin_close(), "someone inside: not the closer's");
        assert!(!o.enter(u32::MAX), "closing: nobody enters");
        assert!(!o.is_vacated());
        assert!(o.leave(), "the last one out of a closing occupancy closes");
        assert!(o.is_vacated());
    }

    #[test]
    fn a_close_of_an_empty_occupancy_is_the_closers() {
        let o = Occupancy::new();
        assert!(o.enter(1));
        assert!(!o.enter(1), "limit 1: one at a time");
        assert!(!o.leave(), "not closing: nobody closes");
        assert!(o.begin_close());
        assert!(o.is_closing() && o.is_vacated());
    }
}
