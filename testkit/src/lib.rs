//! rworker-testkit: what rworker's integration tests (`tests/`) and its A/B benchmark harness
//! (`abtest/`) both need to drive a private httpd, so that each rule is written once.
//!
//! - [`httpd`]: one private httpd, named by its own config file and pidfile: started with
//!   `apache2 -f <conf> -k start`, stopped with `-k stop` and, as a last resort, SIGKILL of
//!   exactly the pidfile's pid and its children. Never by process name: other apache2
//!   instances may run on the same host.
//! - [`install`]: which httpd the tests run (Debian's, or the one the environment names)
//!   and the `LoadModule` lines its own modules need.
//! - [`procfs`]: what `/proc` says about a process: alive, parent, children, CPU ticks,
//!   command line.
//! - [`error_log`]: reading httpd's error log: a line's level, and the one crash-line rule.
//! - [`wrk`]: running `wrk` and parsing its output.
//! - [`port`]: a free port on 127.0.0.1; [`wait`]: polling a condition with a deadline;
//!   [`rworker_so`]: where the rworker module under test was built.
//!
//! Functions return errors with their context instead of panicking; the tests turn them into
//! panics, the harness into its own error type.

pub mod error_log;
pub mod httpd;
pub mod install;
pub mod port;
pub mod procfs;
pub mod rworker_so;
pub mod wait;
pub mod wrk;
