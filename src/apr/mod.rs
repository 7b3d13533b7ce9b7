//! Thin safe wrappers over the parts of APR and httpd that rworker uses: error-log
//! lines, pools, and APR threads. Everything FFI-shaped that is not a raw binding
//! lives here, so `crate::mpm` reads in httpd's terms.

pub mod log;
pub mod pool;
pub mod thread;
