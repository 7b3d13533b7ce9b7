//! rworker: Apache httpd's worker MPM rebuilt in Rust, loaded by a stock httpd 2.4 as
//! `mod_mpm_rworker.so` (`LoadModule mpm_rworker_module …`).
//!
//! Layout: `sys` holds the bindgen output over the installed httpd/APR headers; `ffi`
//! the thin layer where every call into httpd and APR is made (owning handles, copies in
//! and out of shared memory); `head` pure knowledge of HTTP/1 request heads (where one
//! ends, when it is due) that both `ffi` and `mpm` use; `mpm` the MPM itself, in safe
//! Rust. The listener → worker hand-off (fdqueue) and idle-worker accounting (queue_info)
//! are the `rworker-queue` crate, pure Rust and model-checked with loom.

pub mod ffi;
pub mod head;
pub mod mpm;
pub mod sys;

pub use mpm::module::mpm_rworker_module;
