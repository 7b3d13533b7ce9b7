//! [`Serial`]: changes that one thread at a time makes, without a lock, none of them lost. A
//! parking child's registrations in its event set (its listening sockets, the relay) change
//! this way: any worker (after an accept, after a close below the open-file limit, when the
//! relay rings) and the main thread (the stop) may ask for a change.
//!
//! One word holds both facts: a thread is making changes (`BUSY`), and a change was asked
//! for since the holder last looked (`DIRTY`). A requester sets both in one read-modify-write:
//! if `BUSY` was clear it is the holder now, else it leaves its request to the holder and
//! returns at once. The holder clears `DIRTY`, makes the change, and lets go only if nobody
//! asked meanwhile (a compare-exchange from `BUSY` alone), else it changes again. Every
//! request is followed by a change made after it, from the state of that moment. Every
//! access is a read-modify-write of the one word, so nothing rests on a fence.

use crate::sync::{AtomicU32, Ordering};

/// A thread is making changes.
const BUSY: u32 = 1;
/// A change was asked for since the holder last looked.
const DIRTY: u32 = 2;

/// The right to make changes under one [`Serial`], held while [`Serial::run`]'s change runs.
/// Only `run` makes one: a function that takes `&Holder` and is only called under one
/// `Serial` runs in one thread at a time.
#[derive(Debug)]
pub struct Holder(());

/// One thread at a time (see the module doc).
#[derive(Debug)]
pub struct Serial {
    /// BUSY and DIRTY.
    state: AtomicU32,
}

impl Serial {
    /// No change asked for, nobody making one.
    pub fn new() -> Serial {
        Serial {
            state: AtomicU32::new(0),
        }
    }

    /// Runs `change` in this thread, or leaves it to the thread that runs changes now,
    /// which runs it once more after this call began. What `change` reads (the state it
    /// brings the registrations in line with) is read after this call's request.
    pub fn run(&self, mut change: impl FnMut(&Holder)) {
        // AcqRel. Release: what this thread wrote before asking is seen by the holder's
        // Acquire below (a read-modify-write, so every later one on the word carries it on).
        // Acquire: a thread that becomes the holder sees the previous holder's changes
        // (its Release compare-exchange).
        if self.state.fetch_or(BUSY | DIRTY, Ordering::AcqRel) & BUSY != 0 {
            return;
        }
        loop {
            // Acquire: the requests made so far (see above) are seen by this change.
            self.state.fetch_and(!DIRTY, Ordering::Acquire);
            change(&Holder(()));
            // Release: these changes are seen by the next holder. Fails if a request came
            // since the fetch_and: change again for it.
            if self
                .state
                .compare_exchange(BUSY, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

impl Default for Serial {
    fn default() -> Serial {
        Serial::new()
    }
}
