//! How a child stops, as one small state machine shared by its threads: the stop mode
//! (none → graceful → ungraceful, only ever escalating), whether the listener has left
//! its loop, and whether the child is sick (a thread could not be created, accept broke)
//! and must exit with APEXIT_CHILDSICK. What each thread does about it:
//!
//! - the starter stops creating threads once any stop is requested;
//! - the listener leaves its loop once any stop is requested, closes its listeners,
//!   lets the workers drain the fdqueue, and reports that it is gone;
//! - workers finish their connection and exit once the queue is terminated and empty
//!   (graceful), or drop what they hold at once (ungraceful);
//! - the main thread turns a request into wake-ups (`ChildRuntime::signal_threads`).
//!
//! Orderings: the state publishes no other memory — every wake-up that goes with a
//! request travels through the queues' own terms (with their own orderings) or a signal,
//! and each loop re-reads the state after waking. Requests are Release and reads
//! Acquire anyway, so a thread that sees a stop also sees what its requester did before
//! asking; on x86 and ARMv8 that costs nothing over Relaxed for the loads in the loops.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// How the child is asked to stop (`terminate_mode` in worker.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum StopMode {
    /// Keep serving.
    None = 0,
    /// Stop accepting, finish queued and in-flight connections, then exit.
    Graceful = 1,
    /// Stop now: in-flight connections are cut.
    Ungraceful = 2,
}

impl StopMode {
    fn from_raw(v: u8) -> StopMode {
        match v {
            0 => StopMode::None,
            1 => StopMode::Graceful,
            _ => StopMode::Ungraceful,
        }
    }
}

/// A child's stop state (see the module doc).
#[derive(Debug)]
pub struct Shutdown {
    /// The strongest [`StopMode`] requested so far; never decreases.
    mode: AtomicU8,
    /// The listener has left its loop and closed its listeners (worker.c `dying`).
    listener_gone: AtomicBool,
    /// The child must exit with APEXIT_CHILDSICK.
    sick: AtomicBool,
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            mode: AtomicU8::new(StopMode::None as u8),
            listener_gone: AtomicBool::new(false),
            sick: AtomicBool::new(false),
        }
    }
}

impl Shutdown {
    /// The strongest stop requested so far.
    pub fn mode(&self) -> StopMode {
        // Acquire: pairs with request's Release (module doc).
        StopMode::from_raw(self.mode.load(Ordering::Acquire))
    }

    /// Requests `mode` (a weaker request than one already made changes nothing);
    /// returns the mode before.
    pub fn request(&self, mode: StopMode) -> StopMode {
        // AcqRel: Release publishes the requester's prior writes (module doc); Acquire
        // because the previous mode is read and acted on.
        StopMode::from_raw(self.mode.fetch_max(mode as u8, Ordering::AcqRel))
    }

    /// Any stop was requested: the starter and the listener leave their loops.
    pub fn is_stopping(&self) -> bool {
        self.mode() != StopMode::None
    }

    /// An immediate stop was requested: workers drop what they hold and exit.
    pub fn workers_must_exit(&self) -> bool {
        self.mode() == StopMode::Ungraceful
    }

    /// The listener reports that it left its loop, closed its listeners and
    /// terminated the fdqueue.
    pub fn mark_listener_gone(&self) {
        // Release: a thread that sees the listener gone also sees its listeners closed
        // and the queue terminated (the main thread joins it after seeing this).
        self.listener_gone.store(true, Ordering::Release);
    }

    /// Whether the listener has left its loop.
    pub fn listener_gone(&self) -> bool {
        // Acquire: pairs with mark_listener_gone.
        self.listener_gone.load(Ordering::Acquire)
    }

    /// The child must exit with APEXIT_CHILDSICK (a resource shortage).
    pub fn mark_sick(&self) {
        // Relaxed: read by the main thread only after it joined every thread that sets it.
        self.sick.store(true, Ordering::Relaxed);
    }

    /// Whether the child is sick.
    pub fn is_sick(&self) -> bool {
        // Relaxed: see mark_sick.
        self.sick.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_only_escalate() {
        let s = Shutdown::default();
        assert!(!s.is_stopping());
        assert_eq!(s.request(StopMode::Graceful), StopMode::None);
        assert!(s.is_stopping() && !s.workers_must_exit());
        assert_eq!(s.request(StopMode::Ungraceful), StopMode::Graceful);
        assert_eq!(s.request(StopMode::Graceful), StopMode::Ungraceful);
        assert_eq!(s.mode(), StopMode::Ungraceful);
        assert!(s.workers_must_exit());
    }
}
