//! A request head read without a thread: pure knowledge of HTTP/1 heads that both the FFI
//! layer (which holds the bytes, `crate::ffi::head_buffer`) and the MPM (which parks the
//! connection while they arrive, `crate::mpm::worker`) use. It imports nothing from either.
//!
//! - `scan`: whether httpd's core could read and decide on the head from the bytes so far;
//! - `clock`: when the head is due (mod_reqtimeout's header stage, or `Timeout` per read),
//!   and the rounds a parked head waits in.

pub mod clock;
pub mod scan;

pub use clock::{HeadClock, TimeoutStage};
pub use scan::{HeadScan, Limits, Progress};
