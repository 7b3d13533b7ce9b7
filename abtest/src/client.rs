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

/// The load client of `--percon`: `ab`, which sends exactly `-n` requests.
pub const AB: &str = "ab";

/// What one `ab` run reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AbResult {
    /// `Complete requests:`.
    pub complete: u64,
    /// `Failed requests:` (connect, receive, length and exception errors).
    pub failed: u64,
    /// `Non-2xx responses:` (absent: 0).
    pub non_2xx: u64,
    /// `Keep-Alive requests:`: responses that came on a connection kept alive, so the number
    /// of connections is `complete - keepalive`.
    pub keepalive: u64,
}

impl AbResult {
    /// TCP connections ab opened for its completed requests: each connection's first request
    /// is not a keep-alive one.
    pub fn connections(&self) -> u64 {
        self.complete.saturating_sub(self.keepalive)
    }
}

/// Parses ab's report.
pub fn parse_ab(text: &str) -> Result<AbResult> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let Some(complete) = field("Complete requests:") else {
        crate::bail!("ab printed no 'Complete requests:' line:\n{text}");
    };
    Ok(AbResult {
        complete,
        failed: field("Failed requests:").unwrap_or(0),
        non_2xx: field("Non-2xx responses:").unwrap_or(0),
        keepalive: field("Keep-Alive requests:").unwrap_or(0),
    })
}

/// `ab -q -n requests -c clients -s 10 [-k | -H 'Connection: close'] url`, output to `log`.
/// An error if ab fails, or if any request failed or was not a 2xx: the per-connection
/// figures divide by these counts, so they must be exact.
pub fn run_ab(
    url: &str,
    mode: ConnMode,
    requests: u64,
    clients: u32,
    log: &Path,
) -> Result<AbResult> {
    use crate::error::Context;
    use std::process::{Command, Stdio};
    let out = std::fs::File::create(log).context(|| format!("create {}", log.display()))?;
    let err = out.try_clone().context(|| "dup ab log")?;
    let mut cmd = Command::new(AB);
    cmd.args(["-q", "-s", "10", "-n", &requests.to_string()])
        .args(["-c", &clients.to_string()]);
    match mode {
        ConnMode::KeepAlive => cmd.arg("-k"),
        ConnMode::Close => cmd.args(["-H", "Connection: close"]),
    };
    let mut child = cmd
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .context(|| format!("start {AB} (apt-get install apache2-utils)"))?;
    shutdown::set_client_pid(child.id() as i32);
    let status = child.wait();
    shutdown::set_client_pid(0);
    let status = status.context(|| "wait for ab")?;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    if !status.success() {
        return Err(Error(format!("ab {url} failed ({status}):\n{text}")));
    }
    let r = parse_ab(&text)?;
    if r.complete != requests || r.failed > 0 || r.non_2xx > 0 {
        return Err(Error(format!(
            "ab {url}: {} of {requests} requests complete, {} failed, {} non-2xx:\n{text}",
            r.complete, r.failed, r.non_2xx
        )));
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ab_keepalive_report() {
        let text = "Server Software:        Apache/2.4.62\nDocument Length:        1 bytes\n\n\
            Concurrency Level:      4\nTime taken for tests:   0.210 seconds\n\
            Complete requests:      2000\nFailed requests:        0\n\
            Keep-Alive requests:    1980\nTotal transferred:      600000 bytes\n";
        let r = parse_ab(text).expect("parse");
        assert_eq!(
            (r.complete, r.failed, r.non_2xx, r.keepalive),
            (2000, 0, 0, 1980)
        );
        assert_eq!(r.connections(), 20);
        let close = parse_ab("Complete requests:      50\nFailed requests:        2\n   (Connect: 0, Receive: 0, Length: 2, Exceptions: 0)\nNon-2xx responses:      7\n")
            .expect("parse");
        assert_eq!(
            (close.failed, close.non_2xx, close.connections()),
            (2, 7, 50)
        );
        assert!(parse_ab("apr_socket_connect(): Connection refused (111)").is_err());
    }
}
