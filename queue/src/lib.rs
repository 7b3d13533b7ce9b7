//! rworker's listener-to-worker hand-off: httpd's `fd_queue_t` and `fd_queue_info_t`
//! (`server/mpm_fdqueue.c`) rebuilt on atomics, in pure Rust.
//!
//! - [`FdQueue`]: the bounded FIFO of accepted connections (`ap_queue_push_socket`,
//!   `ap_queue_pop_socket`, `ap_queue_interrupt_all`, `ap_queue_term`). Lock-free ring; workers
//!   that find it empty spin briefly, then park on a futex.
//! - [`QueueInfo`]: the idle-worker count the listener waits on (`ap_queue_info_set_idle`,
//!   `ap_queue_info_wait_for_idler`, ...) and the bounded, ABA-safe stack of recycled
//!   transaction pools.
//! - [`Inbox`]: the way back, workers to listener: a bounded lock-free MPSC queue of parked
//!   keep-alive connections, with a sleep protocol for a listener that sleeps in `epoll_wait`
//!   (a push tells its caller whether it must write the eventfd: only one per sleep does).
//!
//! Rules kept everywhere: a hand-off with no sleeper makes no system call; a push or `set_idle`
//! makes at most one wake (rarely two, see `parker`), and a popper that slept may hand one on;
//! every wait is a bounded spin followed by a park (except a push into a full [`Inbox`], which
//! spins then yields until the listener drains: the listener never waits on a worker). The memory
//! ordering of each atomic operation is justified where it is written. Built with
//! `--cfg loom`, the same code runs under the loom model checker (`tests/loom.rs`,
//! `tests/loom_inbox.rs`).
//!
//! All three types are `Send + Sync` for `Send` payloads and carry no FFI types: the MPM passes
//! sockets and pools as opaque handles.

#![warn(missing_docs)]

mod adaptive_spin;
mod budget;
mod drain;
mod fdqueue;
mod handshake;
mod occupancy;
mod park_slots;
mod parker;
mod pool_stack;
mod queue_info;
mod serial;
mod sync;
mod timeouts;

pub use budget::ConnectionBudget;
pub use drain::{Bell, Drain};
pub use fdqueue::{FdQueue, PopError, PushError};
pub use handshake::{publish_then_check, publish_then_check_with};
pub use occupancy::Occupancy;
pub use park_slots::{ParkSlots, Reservation, Ticket};
pub use parker::WaitStats;
pub use queue_info::{QueueInfo, Terminated};
pub use serial::{Holder, Serial};
pub use timeouts::{Alarm, Expiry, Producer, Timeouts, NEVER};
