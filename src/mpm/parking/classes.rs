//! Timeout classes: the distinct timeout lengths a parking child uses, each with its own
//! FIFO per worker (`rworker_queue::Timeouts`), so that every FIFO holds one length and stays
//! sorted by deadline. The lengths are known when the child starts: each virtual host's
//! KeepAliveTimeout and Timeout, and the MPM's own bounds (lingering close, a stopping
//! child's keep-alive grace). Pure, unit-tested.

use std::time::Duration;

/// The classes of one child: distinct lengths, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classes(Vec<Duration>);

impl Classes {
    /// The classes for these lengths (duplicates and order do not matter).
    pub fn new(lengths: impl IntoIterator<Item = Duration>) -> Classes {
        let mut v: Vec<Duration> = lengths.into_iter().collect();
        v.sort();
        v.dedup();
        if v.is_empty() {
            v.push(Duration::ZERO);
        }
        Classes(v)
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The class of `length`, and the length it files entries under: its own, or for a
    /// length the child did not know at start (none is expected), the shortest known one
    /// that is not shorter; beyond the longest, the longest class with its own length (it
    /// never expires early; entries filed behind it in that FIFO may expire late).
    pub fn of(&self, length: Duration) -> (usize, Duration) {
        match self.0.binary_search(&length) {
            Ok(i) => (i, length),
            Err(i) if i < self.0.len() => (i, self.0[i]),
            Err(_) => (self.0.len() - 1, length),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_length_has_a_class_and_unknown_ones_never_expire_early() {
        let s = Duration::from_secs;
        let c = Classes::new([s(5), s(60), s(2), s(5), s(30), s(1)]);
        assert_eq!(c.len(), 5);
        assert_eq!(c.of(s(5)), (2, s(5)));
        assert_eq!(c.of(s(1)), (0, s(1)));
        // Unknown: the next longer class's length.
        assert_eq!(c.of(s(3)), (2, s(5)));
        // Longer than every class: the last class, its own length.
        assert_eq!(c.of(s(90)), (4, s(90)));
        assert_eq!(Classes::new([]).len(), 1);
    }
}
