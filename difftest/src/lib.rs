//! rworker-diff: a differential harness. Each scenario runs against two servers started
//! from the same generated configuration ([`site`]), differing only in the MPM ([`mpm`]):
//! stock event against rworker's default (`RWorkerKeepAlive park`), and the stock worker against
//! rworker with `RWorkerKeepAlive thread`. A scenario records what a client can observe
//! ([`observe`]): status lines and the headers that matter, body lengths and hashes, when
//! and how the server closes (FIN or RST, on the scenario's own time scale), whether a next
//! request is answered, the HTTP/2 frames that end a connection, mod_status's counts. The
//! [`runner`] runs the reference and rworker at the same time, so that both see the same
//! machine load; [`report`] prints one table: scenario | reference | rworker | same?
//!
//! The order a run travels: [`site`] (config, ServerRoot) -> [`server`] (start, signals,
//! stop by pidfile) -> [`scenarios`] (each on a [`scenarios::Target`], through the clients
//! [`conn`], [`h1`], [`tls`], [`h2`], [`status`], [`tcp`]) -> [`observe`] -> [`runner`] ->
//! [`expected`] (the differences we know of, with their reasons) -> [`report`].

pub mod conn;
pub mod expected;
pub mod h1;
pub mod h2;
pub mod mpm;
pub mod observe;
pub mod report;
pub mod runner;
pub mod scenarios;
pub mod server;
pub mod site;
pub mod status;
pub mod tcp;
pub mod tls;
