//! Adaptive spinning for waiters: spin before parking only while spinning has recently paid off.
//!
//! The idea is the adaptive mutex's (Solaris, glibc's `PTHREAD_MUTEX_ADAPTIVE_NP`, HotSpot):
//! a bounded spin saves a park/wake pair (two system calls and two context switches) only when
//! the awaited event comes within the spin window; otherwise it burns CPU that the thread we are
//! waiting for may need — on a 2-core machine, often *our* CPU. The two regimes are far apart:
//! a tight benchmark hands off every microsecond, while an httpd child's idle workers wait tens
//! of microseconds to seconds for the next connection (and there are dozens of them).
//!
//! So each queue keeps a small *credit*. A waiter spins only while the credit is positive. A
//! waiter that had to park measures how long it slept: woken within [`SPIN_WINDOW`], a spin would
//! have caught the event, so the credit rises; asleep longer, the credit falls. The decision is
//! a hint: correctness never depends on it (the slow path always re-checks before parking).
//! Under loom the policy never reads the clock, so models stay deterministic: it spins (one
//! modelled round) unless the run models the sleep-long regime (`RWORKER_LOOM_SLEEP_LONG=1`).

use crate::sync::{AtomicU32, Ordering};

/// Credit ceiling: after this many short parks in a row, this many long ones stop spinning.
const MAX_CREDIT: u32 = 8;

/// A park shorter than this would have been caught by spinning (the spin rounds in
/// `crate::sync` last a few microseconds plus a few `sched_yield`s).
#[cfg(not(loom))]
const SPIN_WINDOW: std::time::Duration = std::time::Duration::from_micros(20);

/// The per-queue spin credit (see the module doc).
#[derive(Debug)]
pub(crate) struct AdaptiveSpin {
    /// 0 ..= MAX_CREDIT; spinning is allowed while > 0. Relaxed everywhere: a heuristic whose
    /// value never guards data.
    credit: AtomicU32,
    /// loom only: what [`AdaptiveSpin::waiters_sleep_long`] answers (and the opposite of
    /// `should_spin`), from the environment variable `RWORKER_LOOM_SLEEP_LONG=1`
    /// (`queue/loom.sh` runs the queue models both ways).
    #[cfg(loom)]
    sleep_long: bool,
}

/// When a waiter started to sleep (nothing under loom).
pub(crate) struct ParkStart {
    #[cfg(not(loom))]
    at: std::time::Instant,
}

impl AdaptiveSpin {
    /// Starts optimistic: a new queue spins until long parks say otherwise.
    pub(crate) fn new() -> Self {
        Self {
            credit: AtomicU32::new(MAX_CREDIT / 2),
            #[cfg(loom)]
            sleep_long: std::env::var("RWORKER_LOOM_SLEEP_LONG").is_ok_and(|v| v == "1"),
        }
    }

    /// Whether a waiter should spin before parking.
    #[inline]
    pub(crate) fn should_spin(&self) -> bool {
        #[cfg(loom)]
        {
            !self.sleep_long
        }
        #[cfg(not(loom))]
        {
            self.credit.load(Ordering::Relaxed) > 0
        }
    }

    /// Whether waiters are in the "sleep long" regime (spinning is off because recent parks
    /// outlasted the spin window): an httpd child's idle workers, not a tight hand-off loop.
    /// There no running popper is about to take a queued item, so a waker may wake more eagerly
    /// (see `FdQueue`'s push). Under loom the regime is fixed per run by
    /// `RWORKER_LOOM_SLEEP_LONG` (1: no spinning and extra wakes, as in production's sleep-long
    /// regime; otherwise spinning and no extra wakes), so the models check both.
    #[inline]
    pub(crate) fn waiters_sleep_long(&self) -> bool {
        #[cfg(loom)]
        {
            self.sleep_long
        }
        #[cfg(not(loom))]
        {
            !self.should_spin()
        }
    }

    /// Called just before a waiter's first park.
    #[inline]
    pub(crate) fn park_start(&self) -> ParkStart {
        ParkStart {
            #[cfg(not(loom))]
            at: std::time::Instant::now(),
        }
    }

    /// Called when a waiter that parked leaves its wait: adjusts the credit by how long it slept.
    #[inline]
    pub(crate) fn parked(&self, start: ParkStart) {
        #[cfg(loom)]
        let _ = (start, &self.credit, Ordering::Relaxed);
        #[cfg(not(loom))]
        {
            let short = start.at.elapsed() < SPIN_WINDOW;
            // Relaxed read-modify-write: concurrent updates may merge, which only blurs a hint.
            let _ = self
                .credit
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                    Some(if short {
                        (c + 1).min(MAX_CREDIT)
                    } else {
                        c.saturating_sub(1)
                    })
                });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn started(ago: Duration) -> ParkStart {
        ParkStart {
            at: Instant::now() - ago,
        }
    }

    #[test]
    fn long_parks_stop_spinning_and_short_ones_restart_it() {
        let s = AdaptiveSpin::new();
        assert!(s.should_spin(), "a new queue spins");
        for _ in 0..MAX_CREDIT {
            s.parked(started(Duration::from_millis(5)));
        }
        assert!(
            !s.should_spin(),
            "after many long parks a waiter parks at once"
        );
        s.parked(started(Duration::ZERO));
        assert!(
            s.should_spin(),
            "one short park makes spinning worth trying again"
        );
        for _ in 0..3 * MAX_CREDIT {
            s.parked(started(Duration::ZERO));
        }
        assert_eq!(
            s.credit.load(Ordering::Relaxed),
            MAX_CREDIT,
            "credit is capped"
        );
    }
}
