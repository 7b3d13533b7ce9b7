//! The store-then-check handshake: two threads each make a change visible, then look at
//! the other's (Dekker's pattern), so that at least one of them sees the other's change.
//!
//! A parking child has several such pairs: a worker publishes a parked connection, then
//! looks whether a stop began; the stop marks itself, then scans what is parked. A close
//! lowers the open count, then looks whether the listening sockets were taken out at the
//! file limit; the taker marks that, then counts the open connections. Without a SeqCst
//! fence between each side's store and its load, both loads may read the old values (each
//! store still in its core's store buffer), and a connection is left with the longer
//! wait, or the sockets out of the set for good. Every such pair goes through
//! [`publish_then_check`], so the fence is written, and argued, once; the loom models in
//! `tests/loom_park.rs` run it, and catch a weaker fence.

use crate::sync::{fence, Ordering};

/// Runs `publish` (this side's store; what it returns is handed to `check`), a SeqCst
/// fence, then `check` (its load of the other side's flag), and returns what `check`
/// returns. The other side must do the same with its own store and load: then at least one
/// side reads the other's store.
#[inline]
pub fn publish_then_check<P, R>(publish: impl FnOnce() -> P, check: impl FnOnce(P) -> R) -> R {
    publish_then_check_with(Ordering::SeqCst, publish, check)
}

/// [`publish_then_check`] with another fence ordering: only for the models that show a
/// weaker fence fails.
#[doc(hidden)]
#[inline]
pub fn publish_then_check_with<P, R>(
    order: Ordering,
    publish: impl FnOnce() -> P,
    check: impl FnOnce(P) -> R,
) -> R {
    let p = publish();
    fence(order);
    check(p)
}
