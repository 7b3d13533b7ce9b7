//! rworker: Apache httpd's worker MPM rebuilt in Rust, loaded by a stock httpd 2.4 as
//! `mod_mpm_rworker.so` (`LoadModule mpm_rworker_module …`).
//!
//! Layout: `sys` holds the bindgen output over the installed httpd/APR headers;
//! `apr` thin safe wrappers (logging, pools, threads); `mpm` the MPM itself. The
//! listener → worker hand-off (fdqueue) and idle-worker accounting (queue_info) are
//! the `rworker-queue` crate, pure Rust and model-checked with loom.

pub mod apr;
pub mod mpm;
pub mod sys;

pub use mpm::module::mpm_rworker_module;
