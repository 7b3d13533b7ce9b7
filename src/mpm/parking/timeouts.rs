//! Timeout lists for parked connections: one FIFO per distinct timeout value (the
//! KeepAliveTimeout of each vhost, Timeout, the 2 s and 30 s lingering bounds). Entries of
//! one list are appended in time order with the same timeout, so each list stays sorted
//! by deadline and expiry is O(expired): pop from the front while due. Removing a
//! connection early (it became readable) is lazy: its entry stays until it reaches the
//! front, where the caller sees a stale or re-parked key (a different `stamp`) and skips it.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// One deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<K> {
    /// Whose deadline.
    pub key: K,
    /// Which parking of it (a connection parked again gets a new stamp).
    pub stamp: u64,
    /// When it expires.
    pub deadline: Instant,
}

/// The lists (see the module doc).
#[derive(Debug)]
pub struct Timeouts<K> {
    lists: BTreeMap<Duration, VecDeque<Entry<K>>>,
}

impl<K: Copy> Default for Timeouts<K> {
    fn default() -> Self {
        Timeouts {
            lists: BTreeMap::new(),
        }
    }
}

impl<K: Copy> Timeouts<K> {
    /// Adds `key` (parked as `stamp`) to expire `timeout` after `now`.
    pub fn add(&mut self, key: K, stamp: u64, timeout: Duration, now: Instant) {
        self.lists.entry(timeout).or_default().push_back(Entry {
            key,
            stamp,
            deadline: now + timeout,
        });
    }

    /// The earliest deadline, if any (stale entries included: waking for one is harmless).
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lists.values().filter_map(|q| q.front()).map(|e| e.deadline).min()
    }

    /// Takes every entry due at `now`, in deadline order per list.
    pub fn expire(&mut self, now: Instant) -> Vec<Entry<K>> {
        let mut out = Vec::new();
        for q in self.lists.values_mut() {
            while q.front().is_some_and(|e| e.deadline <= now) {
                out.extend(q.pop_front());
            }
        }
        self.lists.retain(|_, q| !q.is_empty());
        out
    }

    /// Milliseconds until the earliest deadline, rounded up so nothing expires early;
    /// -1 (wait forever) with no deadline.
    pub fn poll_timeout_ms(&self, now: Instant) -> i32 {
        match self.next_deadline() {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(now);
                let ms = left.as_micros().div_ceil(1000);
                ms.min(i32::MAX as u128) as i32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_in_order_per_list_and_never_early() {
        let t0 = Instant::now();
        let mut t = Timeouts::default();
        t.add(1, 0, Duration::from_secs(5), t0);
        t.add(2, 0, Duration::from_secs(2), t0);
        t.add(3, 0, Duration::from_secs(5), t0 + Duration::from_millis(10));
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(2)));
        assert!(t.expire(t0 + Duration::from_millis(1999)).is_empty());
        let due: Vec<u32> = t.expire(t0 + Duration::from_secs(2)).iter().map(|e| e.key).collect();
        assert_eq!(due, vec![2]);
        let due: Vec<u32> = t.expire(t0 + Duration::from_secs(6)).iter().map(|e| e.key).collect();
        assert_eq!(due, vec![1, 3]);
        assert_eq!(t.next_deadline(), None);
        assert_eq!(t.poll_timeout_ms(t0), -1);
    }

    #[test]
    fn poll_timeout_rounds_up() {
        let t0 = Instant::now();
        let mut t = Timeouts::default();
        t.add(1, 0, Duration::from_micros(1500), t0);
        assert_eq!(t.poll_timeout_ms(t0), 2);
        assert_eq!(t.poll_timeout_ms(t0 + Duration::from_micros(1499)), 1);
        assert_eq!(t.poll_timeout_ms(t0 + Duration::from_secs(1)), 0);
    }
}
