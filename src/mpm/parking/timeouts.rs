//! Timeout lists for parked connections: one FIFO per timeout class (the
//! KeepAliveTimeout of each vhost, Timeout, the 2 s and 30 s lingering bounds, the 1 s a
//! stopping child gives keep-alive connections), so a handful of lists. Entries of one
//! list are appended in time order with the same timeout, so each list stays sorted by
//! deadline and expiry is O(expired): unlink from the front while due. (Callers never add
//! a time left as a timeout: that would make a list per entry, and the scans of
//! `next_deadline` and `expire` O(entries).) The lists are
//! intrusive and doubly linked through nodes indexed by the parked connection's table
//! slot, so a connection that becomes readable leaves its list in O(1) and nothing is
//! kept for it afterwards.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const NONE: u32 = u32::MAX;

/// One node: slot `i` of the table is node `i`.
#[derive(Clone, Copy, Debug)]
struct Node<K> {
    key: Option<K>,
    list: Duration,
    deadline: Instant,
    prev: u32,
    next: u32,
}

/// A list's ends.
#[derive(Clone, Copy, Debug)]
struct Ends {
    head: u32,
    tail: u32,
}

/// The lists (see the module doc).
#[derive(Debug)]
pub struct Timeouts<K> {
    nodes: Vec<Node<K>>,
    lists: BTreeMap<Duration, Ends>,
}

impl<K: Copy> Default for Timeouts<K> {
    fn default() -> Self {
        Timeouts {
            nodes: Vec::new(),
            lists: BTreeMap::new(),
        }
    }
}

impl<K: Copy> Timeouts<K> {
    /// Adds slot `slot` (whose connection is `key`) to expire `timeout` after `now`; a
    /// slot already listed is moved.
    pub fn add(&mut self, slot: u32, key: K, timeout: Duration, now: Instant) {
        self.remove(slot);
        let i = slot as usize;
        if self.nodes.len() <= i {
            self.nodes.resize(
                i + 1,
                Node {
                    key: None,
                    list: Duration::ZERO,
                    deadline: now,
                    prev: NONE,
                    next: NONE,
                },
            );
        }
        let ends = self.lists.entry(timeout).or_insert(Ends {
            head: NONE,
            tail: NONE,
        });
        let prev = ends.tail;
        if prev == NONE {
            ends.head = slot;
        } else {
            self.nodes[prev as usize].next = slot;
        }
        ends.tail = slot;
        self.nodes[i] = Node {
            key: Some(key),
            list: timeout,
            deadline: now + timeout,
            prev,
            next: NONE,
        };
    }

    /// Takes slot `slot` off its list, if it is on one.
    pub fn remove(&mut self, slot: u32) {
        let Some(n) = self.nodes.get(slot as usize).copied() else {
            return;
        };
        if n.key.is_none() {
            return;
        }
        if n.prev != NONE {
            self.nodes[n.prev as usize].next = n.next;
        }
        if n.next != NONE {
            self.nodes[n.next as usize].prev = n.prev;
        }
        if let Some(ends) = self.lists.get_mut(&n.list) {
            if ends.head == slot {
                ends.head = n.next;
            }
            if ends.tail == slot {
                ends.tail = n.prev;
            }
            if ends.head == NONE {
                self.lists.remove(&n.list);
            }
        }
        self.nodes[slot as usize].key = None;
    }

    /// The earliest deadline, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lists
            .values()
            .map(|e| self.nodes[e.head as usize].deadline)
            .min()
    }

    /// Takes every entry due at `now` off its list; their keys, in deadline order per list.
    pub fn expire(&mut self, now: Instant) -> Vec<K> {
        let mut out = Vec::new();
        let heads: Vec<u32> = self.lists.values().map(|e| e.head).collect();
        for mut slot in heads {
            while slot != NONE {
                let n = self.nodes[slot as usize];
                if n.deadline > now {
                    break;
                }
                self.remove(slot);
                out.extend(n.key);
                slot = n.next;
            }
        }
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

    fn listed<K>(t: &Timeouts<K>) -> usize {
        t.nodes.iter().filter(|n| n.key.is_some()).count()
    }

    #[test]
    fn expires_in_order_per_list_and_never_early() {
        let t0 = Instant::now();
        let mut t = Timeouts::default();
        t.add(0, 'a', Duration::from_secs(5), t0);
        t.add(1, 'b', Duration::from_secs(2), t0);
        t.add(
            2,
            'c',
            Duration::from_secs(5),
            t0 + Duration::from_millis(10),
        );
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_secs(2)));
        assert!(t.expire(t0 + Duration::from_millis(1999)).is_empty());
        assert_eq!(t.expire(t0 + Duration::from_secs(2)), vec!['b']);
        assert_eq!(t.expire(t0 + Duration::from_secs(6)), vec!['a', 'c']);
        assert_eq!(t.next_deadline(), None);
        assert_eq!(t.poll_timeout_ms(t0), -1);
    }

    #[test]
    fn removal_is_immediate_and_keeps_the_lists_linked() {
        let t0 = Instant::now();
        let mut t = Timeouts::default();
        for slot in 0..5 {
            t.add(
                slot,
                slot,
                Duration::from_secs(1),
                t0 + Duration::from_millis(slot as u64),
            );
        }
        t.remove(0); // head
        t.remove(2); // middle
        t.remove(4); // tail
        t.remove(4); // twice: nothing
        assert_eq!(listed(&t), 2);
        // Re-adding moves a slot to the back of its (new) list.
        t.add(1, 1, Duration::from_secs(1), t0 + Duration::from_millis(10));
        assert_eq!(t.expire(t0 + Duration::from_secs(2)), vec![3, 1]);
        assert_eq!(listed(&t), 0);
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn many_parks_and_resumes_keep_nothing() {
        let t0 = Instant::now();
        let mut t = Timeouts::default();
        for round in 0..10_000u32 {
            t.add(round % 3, round, Duration::from_secs(5), t0);
            t.remove(round % 3);
        }
        assert_eq!(listed(&t), 0);
        assert!(t.lists.is_empty());
    }

    #[test]
    fn poll_timeout_rounds_up() {
        let t0 = Instant::now();
        let mut t = Timeouts::default();
        t.add(0, 1, Duration::from_micros(1500), t0);
        assert_eq!(t.poll_timeout_ms(t0), 2);
        assert_eq!(t.poll_timeout_ms(t0 + Duration::from_micros(1499)), 1);
        assert_eq!(t.poll_timeout_ms(t0 + Duration::from_secs(1)), 0);
    }
}
