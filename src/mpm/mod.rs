//! The worker MPM, rebuilt. Read top-down, the way a server lives and a connection
//! travels; every module imports only from those below it:
//!
//! - `module`: the exported module struct and the hook table;
//! - `config_pass`: a configuration pass (pre_config, check_config, open_logs), with
//!   `directives` (parsing) and `query` (`ap_mpm_query` answers); `httpd_api`: the
//!   running httpd against the headers rworker was built with (refused when older);
//! - `parent`: the parent process (generation loop, fork and reap, idle maintenance);
//! - `child`: a child process (set-up, the starter thread, the stop);
//! - `listener`, `worker`: the two kinds of thread that serve; `worker_accept`: idle
//!   workers that accept for themselves, without the listener (`RWorkerAccept workers`);
//!   `parking`: a parking child's event set, which its idle workers wait on
//!   (`RWorkerKeepAlive park`); both keep MaxConnectionsPerChild with
//!   `rworker_queue::ConnectionBudget`;
//! - `runtime`: what a child's threads share (stop state, thread registry, counters);
//! - `handoff`, `conn`: the listener → worker hand-off (idle workers, recycled pools)
//!   and the connection that travels through it;
//! - `listen`, `settings`: the generation's listen buckets and settings; `status`: the
//!   figures rworker adds to server-status (counters shared by all children);
//!   `row_counts`: a child's open, parked and idle counts, written whole into its
//!   scoreboard and status rows;
//!   `open_files`: the open-file limit against the connections a child holds.

pub mod child;
pub mod config_pass;
pub mod conn;
pub mod directives;
pub mod handoff;
pub mod httpd_api;
pub mod listen;
pub mod listener;
pub mod module;
pub mod open_files;
pub mod parent;
pub mod parking;
pub mod query;
pub mod row_counts;
pub mod runtime;
pub mod settings;
pub mod status;
pub mod worker;
pub mod worker_accept;
