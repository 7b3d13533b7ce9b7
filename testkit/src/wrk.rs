//! The load client `wrk`: one run to completion, its output parsed, and its own CPU time
//! measured with `wait4(2)` (the rusage of exactly that child).

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

/// The load client binary.
pub const WRK: &str = "wrk";

/// What one wrk run reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WrkResult {
    /// Completed requests.
    pub requests: u64,
    /// `Requests/sec:` as wrk printed it.
    pub rps: f64,
    /// Median latency in microseconds (`--latency`; 0 without it).
    pub p50_us: f64,
    /// 99th percentile latency in microseconds (`--latency`; 0 without it).
    pub p99_us: f64,
    /// `Non-2xx or 3xx responses:`.
    pub non_2xx: u64,
    /// Socket errors: connect, read, write, timeout.
    pub socket_errors: [u64; 4],
    /// wrk's own user + system CPU seconds (0 when only parsed).
    pub client_cpu_s: f64,
    /// The raw output, for error messages.
    pub output: String,
}

impl WrkResult {
    /// All socket errors together.
    pub fn socket_error_total(&self) -> u64 {
        self.socket_errors.iter().sum()
    }
}

/// `12.34us` / `1.2ms` / `3.00s` / `5m` to microseconds.
fn duration_us(s: &str) -> Option<f64> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => return None,
    };
    Some(v * mult)
}

/// Parses wrk's text output. An error, with the output, if it has no request count or no
/// `Requests/sec:` line (wrk did not run a test).
pub fn parse_wrk(out: &str) -> Result<WrkResult, String> {
    let mut r = WrkResult {
        output: out.to_string(),
        ..WrkResult::default()
    };
    let (mut saw_rps, mut saw_requests) = (false, false);
    for line in out.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            r.rps = v.trim().parse().unwrap_or(0.0);
            saw_rps = true;
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = v.trim().parse().unwrap_or(u64::MAX);
        } else if let Some(v) = t.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for (i, part) in v.split(',').enumerate().take(4) {
                r.socket_errors[i] = part
                    .split_whitespace()
                    .nth(1)
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
        } else if t.contains(" requests in ") {
            if let Some(n) = t.split_whitespace().next().and_then(|n| n.parse().ok()) {
                r.requests = n;
                saw_requests = true;
            }
        } else if let Some(v) = t.strip_prefix("50%") {
            r.p50_us = duration_us(v).unwrap_or(0.0);
        } else if let Some(v) = t.strip_prefix("99%") {
            r.p99_us = duration_us(v).unwrap_or(0.0);
        }
    }
    if !saw_requests {
        return Err(format!("no request count in wrk output:\n{out}"));
    }
    if !saw_rps {
        return Err(format!("wrk output has no Requests/sec line:\n{out}"));
    }
    Ok(r)
}

/// Runs `wrk <args> <url>` to completion, its stdout and stderr going to `log` (kept for
/// failure reports); `on_spawn` gets wrk's pid as soon as it runs (to stop it on a signal).
/// An error if wrk cannot start, exits non-zero or prints no result.
pub fn run_wrk<A: AsRef<OsStr>>(
    args: &[A],
    url: &str,
    log: &Path,
    on_spawn: impl FnOnce(i32),
) -> Result<WrkResult, String> {
    let out = fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| format!("dup wrk log: {e}"))?;
    let child = Command::new(WRK)
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .map_err(|e| format!("start {WRK} (apt-get install wrk): {e}"))?;
    let pid = child.id() as libc::pid_t;
    on_spawn(pid);
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child; it is reaped here, so `child` is never waited by std.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    drop(child);
    if rc != pid {
        return Err(format!(
            "wait4 on wrk (pid {pid}): {}",
            std::io::Error::last_os_error()
        ));
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("wrk {url} failed (wait status {status}):\n{text}"));
    }
    let mut r = parse_wrk(&text)?;
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    r.client_cpu_s = tv(ru.ru_utime) + tv(ru.ru_stime);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Running 5s test @ http://127.0.0.1:1/1.bin
  2 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.21ms    1.02ms  40.11ms   90.00%
    Req/Sec     7.80k   400.00     8.50k    70.00%
  Latency Distribution
     50%    2.95ms
     75%    3.50ms
     90%    4.10ms
     99%    1.20s
  77600 requests in 5.00s, 20.00MB read
  Socket errors: connect 0, read 3, write 1, timeout 2
  Non-2xx or 3xx responses: 7
Requests/sec:  15520.12
Transfer/sec:      4.00MB
";

    #[test]
    fn parses_wrk_output() {
        let r = parse_wrk(SAMPLE).expect("parse");
        assert_eq!(r.requests, 77600);
        assert!((r.rps - 15520.12).abs() < 1e-6);
        assert!((r.p50_us - 2950.0).abs() < 1e-6);
        assert!((r.p99_us - 1.2e6).abs() < 1e-3);
        assert_eq!(r.socket_errors, [0, 3, 1, 2]);
        assert_eq!(r.socket_error_total(), 6);
        assert_eq!(r.non_2xx, 7);
    }

    #[test]
    fn clean_run_without_latency() {
        let out = "Running 1s test @ http://127.0.0.1:1/\n  2 threads and 2 connections\n  \
                   10 requests in 1.00s, 1.00KB read\nRequests/sec:     10.00\n";
        let r = parse_wrk(out).expect("parse");
        assert_eq!((r.requests, r.socket_error_total(), r.non_2xx), (10, 0, 0));
        assert_eq!(r.p99_us, 0.0);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse_wrk("unable to connect").is_err());
        assert!(
            parse_wrk("Requests/sec: 1.0\n").is_err(),
            "no request count"
        );
    }

    #[test]
    fn a_failing_wrk_is_an_error() {
        let log = std::env::temp_dir().join(format!("rworker-testkit-wrk-{}", std::process::id()));
        // No server on port 1: wrk cannot connect. Missing wrk is an error as well.
        let r = run_wrk(&["-t1", "-c1", "-d1s"], "http://127.0.0.1:1/", &log, |_| {});
        let _ = fs::remove_file(&log);
        assert!(r.is_err(), "{r:?}");
    }
}
