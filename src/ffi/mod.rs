//! The FFI layer: every call into httpd and APR that the MPM makes goes through a
//! function or type in this folder, and nowhere else in `crate::mpm` is a raw binding
//! called. Types that own something C can destroy (pools, threads) are not `Copy`,
//! and their constructors from raw pointers are `unsafe` and say what the caller
//! promises; shared memory owned by C (scoreboard, retained data) is read and written
//! through methods that copy values in and out.
//!
//! One file per thing wrapped:
//! - `log`: error-log lines; `panic`: the line a panic leaves before the abort;
//! - `phase`: the single-threaded phases, and values only they write;
//! - `pool`: pools; `thread`: APR threads and sleeping; `signal`: handlers, masks, kill;
//! - `httpd`: the server's hooks and globals; `directive`: a directive handler's call;
//! - `process`: fork, wait and reap; `scoreboard`: the shared scoreboard; `retained`:
//!   restart-proof memory; `shm`: counters shared by all children; `status`: mod_status's
//!   status_hook;
//! - `listen`: listening sockets, pipes of death, accept mutexes; `socket`: the client
//!   socket; `conn`: serving a connection through the core; `fdqueue`: httpd's own
//!   fdqueue (for `RWorkerQueue apr`);
//! - `async_conn`: a connection served the asynchronous way (parked between requests);
//!   `vhost`: whose timeouts it waits under; `epoll`: the parking child's event set;
//!   `head_buffer`: its request heads, read without blocking and handed to the core;
//!   `tls`: TLS handshakes run without blocking, and the bytes read below mod_ssl;
//!   `reqtimeout`: mod_reqtimeout's stages as configured (when a handshake or head is
//!   due), and its filter stepped over; `filter`: registering rworker's input filters.

pub mod async_conn;
pub mod conn;
pub mod directive;
pub mod epoll;
pub mod fdqueue;
pub mod filter;
pub mod head_buffer;
pub mod httpd;
pub mod listen;
pub mod log;
pub mod panic;
pub mod phase;
pub mod pool;
pub mod process;
pub mod reqtimeout;
pub mod retained;
pub mod scoreboard;
pub mod shm;
pub mod signal;
pub mod socket;
pub mod status;
pub mod thread;
pub mod tls;
pub mod vhost;
