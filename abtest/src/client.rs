//! The load client: `wrk --latency` with the matrix's options, run by rworker-testkit's runner
//! (output parsed, wrk's own CPU time from `wait4(2)`), registered with [`shutdown`] so that a
//! signal stops it too.

use crate::error::{Error, Result};
use crate::options::ConnMode;
use crate::shutdown;
use std::path::Path;

pub use rworker_testkit::wrk::WrkResult;

/// One load run: `wrk -t threads -c clients -d secs --latency [-H 'Connection: close'] url`.
/// wrk's output goes to `log` (kept for failure reports).
pub fn run_wrk(
    url: &str,
    mode: ConnMode,
    clients: u32,
    threads: u32,
    secs: u32,
    log: &Path,
) -> Result<WrkResult> {
    let mut args = vec![
        format!("-t{}", threads.clamp(1, clients.max(1))),
        format!("-c{clients}"),
        format!("-d{secs}s"),
        "--timeout".into(),
        "10s".into(),
        "--latency".into(),
    ];
    if mode == ConnMode::Close {
        args.extend(["-H".into(), "Connection: close".into()]);
    }
    let r = rworker_testkit::wrk::run_wrk(&args, url, log, shutdown::set_client_pid);
    shutdown::set_client_pid(0);
    r.map_err(Error)
}
