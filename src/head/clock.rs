//! When a head that is still arriving is due: the deadline mod_reqtimeout would give it
//! under the event MPM, or without mod_reqtimeout the core's own (`Timeout` per read). A
//! TLS handshake is timed the same way, by mod_reqtimeout's handshake stage where one is
//! set (it counts the bytes read from the socket, as mod_reqtimeout does below mod_ssl).
//!
//! mod_reqtimeout's header stage starts its clock at the first read of the head (under
//! event: when a worker starts on a new connection, or when the first byte of a keep-alive
//! connection's next request has arrived; here the same moments), allows `timeout`, and
//! with `MinRate` adds `rate` per byte received, up to `max` from the start. Whatever the
//! stage allows, each blocking read of the core waits at most the socket's timeout
//! (`Timeout`) for its next bytes (reqtimeout sets the socket timeout to the lesser of the
//! two). So the head is due at the earlier of the stage's deadline and the last bytes'
//! arrival plus `Timeout`. The values are the administrator's, read from the configuration
//! by the caller; nothing here adds one. Pure, unit-tested.
//!
//! [`rung`] files the wait: a parked head's deadline is its own, not the same length for
//! every connection, so it waits in rounds of fixed lengths (halving, so at most a round
//! per power of two of what was left), each a timeout class of its own, and is closed at
//! the first round's end at or after its deadline: never early, late by less than the
//! shortest round.

use std::time::Duration;

/// A mod_reqtimeout stage (`handshake=` or `header=`), as configured for the connection's
/// server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeoutStage {
    /// The time allowed from the first read.
    pub timeout: Duration,
    /// With MinRate, the most it can be extended to, from the first read (None: no bound).
    pub max: Option<Duration>,
    /// With MinRate, what each byte received adds.
    pub per_byte: Duration,
}

/// The deadline of one head (module doc). Times are
/// `monotonic_ns` readings (the parking child's clock), in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadClock {
    /// The stage's deadline (None: no mod_reqtimeout header stage).
    stage_at: Option<u64>,
    /// The stage's bound on extensions.
    max_at: Option<u64>,
    per_byte_ns: u64,
    /// The socket's timeout, per read.
    per_read_ns: u64,
    last_bytes: u64,
}

impl HeadClock {
    /// A head whose first read is at `now`.
    pub fn start(now: u64, stage: Option<TimeoutStage>, per_read: Duration) -> HeadClock {
        let at = |d: Duration| now.saturating_add(d.as_nanos() as u64);
        HeadClock {
            stage_at: stage.map(|s| at(s.timeout)),
            max_at: stage.and_then(|s| s.max.map(at)),
            per_byte_ns: stage.map_or(0, |s| s.per_byte.as_nanos() as u64),
            per_read_ns: per_read.as_nanos() as u64,
            last_bytes: now,
        }
    }

    /// `n` bytes arrived at `now`.
    pub fn received(&mut self, n: usize, now: u64) {
        if n == 0 {
            return;
        }
        self.last_bytes = now;
        if let Some(at) = self.stage_at {
            let extended = at.saturating_add(self.per_byte_ns.saturating_mul(n as u64));
            self.stage_at = Some(self.max_at.map_or(extended, |m| extended.min(m.max(at))));
        }
    }

    /// When the head is due.
    pub fn deadline(&self) -> u64 {
        let per_read = self.last_bytes.saturating_add(self.per_read_ns);
        self.stage_at.map_or(per_read, |at| at.min(per_read))
    }
}

/// The shortest round a parked head waits (how late it may close, at most).
pub const SHORTEST_ROUND: Duration = Duration::from_millis(125);
/// How many round lengths there are: `SHORTEST_ROUND` times 4, 16, ... up to about 34
/// minutes; a longer wait takes several of the longest. Each length is a timeout class,
/// with a FIFO per worker in every child (every class is looked at when the alarm is set):
/// doubling instead would make 16 classes, for 2 rounds instead of 4 to a silent client's
/// 20 s deadline.
pub const ROUNDS: usize = 8;

/// The round lengths, shortest first (each a timeout class of a parking child).
pub fn rounds() -> impl Iterator<Item = Duration> {
    (0..ROUNDS as u32).map(|i| SHORTEST_ROUND * (1 << (2 * i)))
}

/// The round a head with `left` until its deadline waits next: the longest that does not
/// pass the deadline, or the shortest when less is left; None when it is due.
pub fn rung(left: Duration) -> Option<Duration> {
    if left.is_zero() {
        return None;
    }
    Some(
        rounds()
            .take_while(|&r| r <= left)
            .last()
            .unwrap_or(SHORTEST_ROUND),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn debian() -> TimeoutStage {
        // RequestReadTimeout header=20-40,MinRate=500
        TimeoutStage {
            timeout: Duration::from_secs(20),
            max: Some(Duration::from_secs(40)),
            per_byte: Duration::from_micros(2000),
        }
    }

    #[test]
    fn the_stage_deadline_moves_with_min_rate_up_to_its_maximum() {
        let mut c = HeadClock::start(100 * S, Some(debian()), Duration::from_secs(300));
        assert_eq!(c.deadline(), 120 * S);
        // 500 bytes buy a second.
        c.received(500, 101 * S);
        assert_eq!(c.deadline(), 121 * S);
        // Never past the maximum, 40 s from the first read.
        c.received(1_000_000, 102 * S);
        assert_eq!(c.deadline(), 140 * S);
    }

    #[test]
    fn without_min_rate_or_without_reqtimeout_the_per_read_timeout_applies() {
        let fixed = TimeoutStage {
            timeout: Duration::from_secs(3),
            max: None,
            per_byte: Duration::ZERO,
        };
        let mut c = HeadClock::start(0, Some(fixed), Duration::from_secs(300));
        c.received(10_000, S);
        assert_eq!(c.deadline(), 3 * S);
        // No mod_reqtimeout: Timeout from the last bytes, each time.
        let mut c = HeadClock::start(0, None, Duration::from_secs(5));
        assert_eq!(c.deadline(), 5 * S);
        c.received(1, 4 * S);
        assert_eq!(c.deadline(), 9 * S);
        // A Timeout shorter than the stage's wins.
        let c = HeadClock::start(0, Some(debian()), Duration::from_secs(2));
        assert_eq!(c.deadline(), 2 * S);
    }

    #[test]
    fn rounds_never_pass_the_deadline_and_halve_what_is_left() {
        assert_eq!(rung(Duration::ZERO), None);
        assert_eq!(rung(Duration::from_millis(10)), Some(SHORTEST_ROUND));
        assert_eq!(rung(Duration::from_secs(20)), Some(Duration::from_secs(8)));
        assert_eq!(rung(Duration::from_secs(8)), Some(Duration::from_secs(8)));
        assert_eq!(rung(Duration::from_secs(4)), Some(Duration::from_secs(2)));
        // A 20 s wait: 8, 8, 2, 2, then done: 4 rounds.
        let mut left = Duration::from_secs(20);
        let mut n = 0;
        while let Some(r) = rung(left) {
            left = left.saturating_sub(r);
            n += 1;
        }
        assert_eq!(n, 4);
        // Longer than the longest round: the longest.
        let longest = rounds().last().unwrap();
        assert_eq!(rung(Duration::from_secs(100_000)), Some(longest));
        assert_eq!(longest, Duration::from_millis(125 * 16384));
    }
}
