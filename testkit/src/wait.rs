//! Polling a condition until it holds or a deadline passes.

use std::thread::sleep;
use std::time::{Duration, Instant};

/// How often [`wait_until`] tests its condition.
pub const POLL: Duration = Duration::from_millis(50);

/// Tests `cond` every [`POLL`] until it holds (true) or `timeout` passes (false). The condition
/// is tested at least once, and once more at the deadline.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn true_at_once_and_false_after_the_timeout() {
        assert!(wait_until(Duration::ZERO, || true));
        let t = Instant::now();
        assert!(!wait_until(Duration::from_millis(120), || false));
        assert!(t.elapsed() >= Duration::from_millis(120));
        let mut n = 0;
        assert!(wait_until(Duration::from_secs(5), || {
            n += 1;
            n == 3
        }));
    }
}
