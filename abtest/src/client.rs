//! The load client: `wrk --latency`, its output parsed, and its own CPU time measured with
//! `wait4(2)` (the rusage of exactly that child).

use crate::bail;
use crate::error::{Context, Result};
use crate::options::ConnMode;
use crate::shutdown;
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
    /// Latency percentiles in microseconds (wrk `--latency`).
    pub p50_us: f64,
    /// 99th percentile latency in microseconds.
    pub p99_us: f64,
    /// `Non-2xx or 3xx responses:`.
    pub non_2xx: u64,
    /// Socket errors: connect, read, write, timeout.
    pub socket_errors: [u64; 4],
    /// wrk's own user + system CPU seconds.
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

/// Parses wrk's text output (with `--latency`).
pub fn parse_wrk(out: &str) -> Result<WrkResult> {
    let mut r = WrkResult {
        output: out.to_string(),
        ..WrkResult::default()
    };
    let mut saw_rps = false;
    for line in out.lines() {
        let t = line.trim();
        if let Some(v) = t.strip_prefix("Requests/sec:") {
            r.rps = v.trim().parse().unwrap_or(0.0);
            saw_rps = true;
        } else if let Some(v) = t.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = v.trim().parse().unwrap_or(0);
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
            r.requests = t
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
        } else if let Some(v) = t.strip_prefix("50%") {
            r.p50_us = duration_us(v).unwrap_or(0.0);
        } else if let Some(v) = t.strip_prefix("99%") {
            r.p99_us = duration_us(v).unwrap_or(0.0);
        }
    }
    if !saw_rps {
        bail!("wrk output has no Requests/sec line:\n{out}");
    }
    Ok(r)
}

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
    let out = fs::File::create(log).context(|| format!("create {}", log.display()))?;
    let err = out.try_clone().context(|| "dup wrk log")?;
    let mut cmd = Command::new(WRK);
    cmd.arg(format!("-t{}", threads.clamp(1, clients.max(1))))
        .arg(format!("-c{clients}"))
        .arg(format!("-d{secs}s"))
        .arg("--timeout")
        .arg("10s")
        .arg("--latency");
    if mode == ConnMode::Close {
        cmd.arg("-H").arg("Connection: close");
    }
    cmd.arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err));
    let child = cmd
        .spawn()
        .context(|| format!("start {WRK} (apt-get install wrk)"))?;
    let pid = child.id() as libc::pid_t;
    shutdown::set_client_pid(pid);
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child; we reap it here, so `child` is never waited by std.
    let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    shutdown::set_client_pid(0);
    drop(child);
    if rc != pid {
        bail!(
            "wait4 on wrk (pid {pid}): {}",
            std::io::Error::last_os_error()
        );
    }
    let text = fs::read_to_string(log).unwrap_or_default();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("wrk {url} failed (wait status {status}):\n{text}");
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
    fn garbage_is_an_error() {
        assert!(parse_wrk("unable to connect").is_err());
    }
}
