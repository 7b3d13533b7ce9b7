//! rworker-ab: A/B benchmark of rworker against Debian's stock worker (and event) MPM.
//!
//! The same site, the same configuration (`apache-conf/ab/`, which differ only in the MPM's
//! `LoadModule` line) and the same load go to each MPM in turn, the way httpd's developers
//! measured their fdqueue changes: a fixed number of concurrent clients requesting a small
//! static file, comparing req/s and CPU per request.
//!
//! One run of the matrix ([`plan::Plan`]) is: for each repetition, for each MPM (order rotated
//! each repetition, so A/B/A/B drift cancels): start a private httpd ([`server::Server`]),
//! check it is the MPM it claims to be, warm it up, and for each cell (connection mode × file
//! size × clients) drive `wrk` ([`client`]) while sampling the CPU time and context switches
//! of every httpd process ([`procstat`]); then stop it by its own pidfile. [`report`] turns the
//! samples into a table, CSVs and [`chart`] an SVG; for rworker, each cell also records the
//! `RWorkerHandoffs` / `RWorkerFutexWakes` deltas of `server-status?auto` ([`status`]).
//!
//! `--tls` ([`tls`]) runs the same matrix over HTTPS: one TLS-only listener per server, the
//! same for every MPM, and every cell marked TLS in the outputs.
//!
//! `--percon` ([`percon`]) measures instead what one connection and one request cost: one
//! child per MPM, a fixed `ab` load, system calls by kind under `strace -f` ([`trace`]), CPU
//! and context switches from `/proc` without it.

pub mod autogroup;
pub mod chart;
pub mod client;
pub mod error;
pub mod memory;
pub mod mpm;
pub mod options;
pub mod percon;
pub mod plan;
pub mod procstat;
pub mod report;
pub mod server;
pub mod shutdown;
pub mod status;
pub mod tls;
pub mod trace;

pub use error::{Error, Result};
