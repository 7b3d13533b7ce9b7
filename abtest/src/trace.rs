//! System calls of one process, every thread, by kind: `strace -f -p PID` attached for the
//! length of a load run, its trace counted here.
//!
//! The full trace (`-o FILE`, not `-c`) is read rather than strace's summary so that futex
//! calls can be split by operation (wake against wait) and failed calls (`EAGAIN` reads)
//! counted; a call that was in progress when strace attached (a thread parked in `futex` or
//! `epoll_wait`) shows only as `<... resumed>` and is not counted, since it began before the run.

use crate::error::{Context, Error, Result};
use rworker_testkit::wait::wait_until;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The tracer binary.
pub const STRACE: &str = "strace";

/// What one traced run did, summed over all threads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyscallCounts {
    /// Calls by system call name.
    pub calls: BTreeMap<String, u64>,
    /// Calls that returned -1 (any errno), by name.
    pub errors: BTreeMap<String, u64>,
    /// futex calls by operation (`FUTEX_WAKE_PRIVATE`, `FUTEX_WAIT_BITSET_PRIVATE`, ...;
    /// flags such as `FUTEX_CLOCK_REALTIME` dropped).
    pub futex_ops: BTreeMap<String, u64>,
}

impl SyscallCounts {
    /// All calls.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }
    /// futex calls that wake (`FUTEX_WAKE*`, `FUTEX_REQUEUE`, `FUTEX_CMP_REQUEUE`, `FUTEX_WAKE_OP`).
    pub fn futex_wakes(&self) -> u64 {
        self.futex_ops
            .iter()
            .filter(|(op, _)| op.contains("WAKE") || op.contains("REQUEUE"))
            .map(|(_, n)| n)
            .sum()
    }
    /// futex calls that wait (`FUTEX_WAIT*`, `FUTEX_LOCK_PI`).
    pub fn futex_waits(&self) -> u64 {
        self.futex_ops
            .iter()
            .filter(|(op, _)| op.contains("WAIT") || op.contains("LOCK"))
            .map(|(_, n)| n)
            .sum()
    }
}

/// The name of the call a trace line starts (`None` for `<... x resumed>`, signals, exits).
/// With `-f -o FILE` every line starts with the thread id.
fn parse_line(line: &str) -> Option<(&str, &str)> {
    let rest = line.trim_start();
    let rest = rest
        .split_once(' ')
        .filter(|(tid, _)| tid.bytes().all(|b| b.is_ascii_digit()))
        .map_or(rest, |(_, r)| r)
        .trim_start();
    let open = rest.find('(')?;
    let name = &rest[..open];
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'?')
    {
        return None;
    }
    Some((name, &rest[open + 1..]))
}

/// Whether a (complete or resumed) trace line reports a failed call: `= -1 EXXX (...)`.
fn failed(line: &str) -> bool {
    line.rsplit_once(" = ")
        .is_some_and(|(_, ret)| ret.starts_with("-1 ") || ret.starts_with("? ERESTART"))
}

/// Counts a trace written by `strace -f -o FILE`.
pub fn count_trace(text: &str) -> SyscallCounts {
    let mut c = SyscallCounts::default();
    for line in text.lines() {
        if let Some(i) = line.find("<... ") {
            // `<... read resumed>...) = -1 EAGAIN`: the call was counted where it began.
            let name = line[i + 5..].split_whitespace().next().unwrap_or("");
            if failed(line) && !line.contains("<unfinished") {
                *c.errors.entry(name.to_string()).or_default() += 1;
            }
            continue;
        }
        let Some((name, args)) = parse_line(line) else {
            continue;
        };
        *c.calls.entry(name.to_string()).or_default() += 1;
        if !line.ends_with("<unfinished ...>") && failed(line) {
            *c.errors.entry(name.to_string()).or_default() += 1;
        }
        if name == "futex" {
            let op = args
                .split(", ")
                .nth(1)
                .unwrap_or("?")
                .split('|')
                .find(|p| p.starts_with("FUTEX_") && *p != "FUTEX_CLOCK_REALTIME")
                .unwrap_or("?");
            *c.futex_ops.entry(op.to_string()).or_default() += 1;
        }
    }
    c
}

/// Thread ids of `pid`.
pub fn tasks(pid: i32) -> Vec<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `TracerPid:` of thread `tid` of `pid` (0: not traced).
fn tracer_of(pid: i32, tid: i32) -> Option<i32> {
    fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()
}

/// A running `strace -f -qq -s 0 -o FILE -p PID`, attached to every thread of PID.
pub struct Tracer {
    /// strace, until [`Tracer::detach`] (or drop) ends it.
    child: Option<Child>,
    out: PathBuf,
    pid: i32,
}

impl Tracer {
    /// Starts strace on `pid` and waits (up to 10 s) until every thread of `pid` names it as
    /// its tracer, so that nothing the load does is missed.
    pub fn attach(pid: i32, out: &Path) -> Result<Tracer> {
        let child = Command::new(STRACE)
            .args(["-f", "-qq", "-s", "0", "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context(|| format!("start {STRACE} (apt-get install strace)"))?;
        let me = child.id() as i32;
        let t = Tracer {
            child: Some(child),
            out: out.to_path_buf(),
            pid,
        };
        let attached = wait_until(Duration::from_secs(10), || {
            let tids = tasks(pid);
            !tids.is_empty() && tids.iter().all(|&tid| tracer_of(pid, tid) == Some(me))
        });
        if !attached {
            let why = t.detach().err().map(|e| e.0).unwrap_or_default();
            return Err(Error(format!(
                "strace -p {pid} did not attach to every thread within 10 s \
                 (ptrace not permitted in this container?) {why}"
            )));
        }
        Ok(t)
    }

    /// Detaches (SIGINT to strace, which detaches from every thread and exits) and counts
    /// the trace.
    pub fn detach(mut self) -> Result<SyscallCounts> {
        let Some(child) = self.child.take() else {
            return Err(Error("strace already detached".into()));
        };
        // SAFETY: kill(2) of our own child, strace.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child.wait_with_output().context(|| "wait for strace")?;
        let text = fs::read_to_string(&self.out)
            .context(|| format!("read strace output {}", self.out.display()))?;
        let counts = count_trace(&text);
        if counts.total() == 0 {
            return Err(Error(format!(
                "strace -p {} recorded no system call ({}): {}",
                self.pid,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(counts)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        // An error path: strace must not stay attached to the server.
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) of our own child, strace (not yet reaped: we hold its Child).
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "\
4242  accept4(3, 0x7ffd, [16], SOCK_CLOEXEC) = 9
4243  <... futex resumed>)              = 0
4243  fcntl(9, F_GETFL)                 = 0x2 (flags O_RDWR)
4243  fcntl(9, F_SETFL, O_RDWR|O_NONBLOCK) = 0
4243  read(9, \"\"..., 8000)           = 76
4243  read(9, 0x7f, 8000)               = -1 EAGAIN (Resource temporarily unavailable)
4242  futex(0x55d0, FUTEX_WAKE_PRIVATE, 1) = 1
4244  futex(0x55d4, FUTEX_WAIT_BITSET_PRIVATE|FUTEX_CLOCK_REALTIME, 0, NULL, FUTEX_BITSET_MATCH_ANY <unfinished ...>
4243  poll([{fd=9, events=POLLIN}], 1, 2000 <unfinished ...>
4243  <... poll resumed>)               = 1 ([{fd=9, revents=POLLIN}])
4245  epoll_wait(4,  <unfinished ...>
4245  <... epoll_wait resumed>[], 1, 100) = -1 EINTR (Interrupted system call)
4243  --- SIGCHLD {si_signo=SIGCHLD} ---
4243  writev(9, [{iov_base=\"\"..., iov_len=250}], 1) = 251
4243  shutdown(9, SHUT_WR)              = 0
4243  close(9)                          = 0
4246  +++ exited with 0 +++
";

    #[test]
    fn a_trace_is_counted_by_call_futex_op_and_error() {
        let c = count_trace(TRACE);
        let n = |k: &str| c.calls.get(k).copied().unwrap_or(0);
        assert_eq!(n("accept4"), 1);
        assert_eq!(n("fcntl"), 2);
        assert_eq!(n("read"), 2);
        assert_eq!(n("futex"), 2, "the resumed futex began before the trace");
        assert_eq!((n("poll"), n("epoll_wait"), n("writev")), (1, 1, 1));
        assert_eq!((n("shutdown"), n("close")), (1, 1));
        assert_eq!(c.total(), 12);
        assert_eq!(c.errors.get("read"), Some(&1));
        assert_eq!(c.errors.get("epoll_wait"), Some(&1));
        assert_eq!(c.errors.len(), 2);
        assert_eq!(c.futex_wakes(), 1);
        assert_eq!(c.futex_waits(), 1);
        assert_eq!(c.futex_ops.get("FUTEX_WAIT_BITSET_PRIVATE"), Some(&1));
    }

    #[test]
    fn own_threads_are_listed() {
        let me = std::process::id() as i32;
        assert!(tasks(me).contains(&me));
        assert_eq!(tracer_of(me, me), Some(0));
    }
}
