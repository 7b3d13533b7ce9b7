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
/// A tracing tool (strace, perf stat) attached to a process, writing to a file: ended with
/// SIGINT, by [`Attached::stop`] or, on an error path, on drop, so that it never stays
/// attached to the server.
struct Attached {
    /// The tool, until `stop` (or drop) ends it.
    child: Option<Child>,
    /// Its output file.
    out: PathBuf,
    /// Its name, for messages.
    tool: &'static str,
}

impl Attached {
    /// Spawns `cmd` (whose output file is `out`); `install` says how to get the tool.
    fn spawn(mut cmd: Command, tool: &'static str, out: &Path, install: &str) -> Result<Attached> {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context(|| format!("start {tool} ({install})"))?;
        Ok(Attached {
            child: Some(child),
            out: out.to_path_buf(),
            tool,
        })
    }

    /// The tool's pid.
    fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// SIGINT (the tool detaches, writes what it has and exits), then its exit status and
    /// stderr, and the text of its output file.
    fn stop(&mut self) -> Result<(std::process::Output, String)> {
        let Some(child) = self.child.take() else {
            return Err(Error(format!("{} already stopped", self.tool)));
        };
        // SAFETY: kill(2) of our own child, not yet reaped: we held its Child.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let out = child
            .wait_with_output()
            .context(|| format!("wait for {}", self.tool))?;
        let text = fs::read_to_string(&self.out)
            .context(|| format!("read {} output {}", self.tool, self.out.display()))?;
        Ok((out, text))
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) of our own child, not yet reaped: we hold its Child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let _ = child.wait();
        }
    }
}

pub struct Tracer {
    /// strace, until [`Tracer::detach`] (or drop) ends it.
    strace: Attached,
    pid: i32,
}

impl Tracer {
    /// Starts strace on `pid` and waits (up to 10 s) until every thread of `pid` names it as
    /// its tracer, so that nothing the load does is missed.
    pub fn attach(pid: i32, out: &Path) -> Result<Tracer> {
        let mut cmd = Command::new(STRACE);
        cmd.args(["-f", "-qq", "-s", "0", "-o"])
            .arg(out)
            .args(["-p", &pid.to_string()]);
        let strace = Attached::spawn(cmd, STRACE, out, "apt-get install strace")?;
        let me = strace.pid();
        let t = Tracer { strace, pid };
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
        let (out, text) = self.strace.stop()?;
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

/// The counting tool of the low-overhead pass.
pub const PERF: &str = "perf";

/// The system calls `perf stat` counts one by one (those that exist as tracepoints on this
/// kernel are used); everything else is `(other)`, the rest of `raw_syscalls:sys_enter`.
pub const PERF_SYSCALLS: &[&str] = &[
    "accept4",
    "accept",
    "fcntl",
    "futex",
    "poll",
    "ppoll",
    "epoll_wait",
    "epoll_pwait",
    "read",
    "readv",
    "writev",
    "write",
    "sendfile64",
    "shutdown",
    "close",
    "mmap",
    "munmap",
    "openat",
    "newfstatat",
    "fstat",
    "statx",
    "sched_yield",
    "nanosleep",
    "clock_nanosleep",
];

/// The name `perf stat` counts all other calls under.
pub const PERF_OTHER: &str = "(other)";

/// The futex operations the perf pass counts, with tracepoint filters on `op`: FUTEX_WAKE
/// (1, | FUTEX_PRIVATE_FLAG 128), and FUTEX_WAIT (0) and FUTEX_WAIT_BITSET (9), private or
/// not, with or without FUTEX_CLOCK_REALTIME (256).
const PERF_FUTEX_OPS: &[(&str, &str)] = &[
    ("FUTEX_WAKE", "op == 1 || op == 129"),
    (
        "FUTEX_WAIT",
        "op == 0 || op == 128 || op == 9 || op == 137 || op == 265 || op == 393",
    ),
];

/// The `-e` arguments of the perf pass, with what each line of its output counts: a system
/// call name, `raw` (all calls), or a futex operation.
fn perf_events() -> Vec<(String, Vec<String>)> {
    let mut ev = vec![(
        "raw".to_string(),
        vec!["-e".to_string(), "raw_syscalls:sys_enter".to_string()],
    )];
    for name in PERF_SYSCALLS {
        if Path::new(&format!(
            "/sys/kernel/tracing/events/syscalls/sys_enter_{name}"
        ))
        .exists()
        {
            ev.push((
                name.to_string(),
                vec!["-e".into(), format!("syscalls:sys_enter_{name}")],
            ));
        }
    }
    if ev.iter().any(|(n, _)| n == "futex") {
        for (op, filter) in PERF_FUTEX_OPS {
            ev.push((
                format!("futex_op:{op}"),
                vec![
                    "-e".into(),
                    "syscalls:sys_enter_futex".into(),
                    "--filter".into(),
                    filter.to_string(),
                ],
            ));
        }
    }
    ev
}

/// Parses `perf stat -x,` output: the counts in event order (`<not counted>`: 0).
fn parse_perf_csv(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.contains(','))
        .map(|l| {
            l.split(',')
                .next()
                .unwrap_or("")
                .trim()
                .parse()
                .unwrap_or(0)
        })
        .collect()
}

/// Builds the counts of a perf pass from its output and the event list.
fn perf_counts(text: &str, events: &[(String, Vec<String>)]) -> Result<SyscallCounts> {
    let values = parse_perf_csv(text);
    if values.len() != events.len() {
        return Err(Error(format!(
            "perf stat printed {} counts for {} events:\n{text}",
            values.len(),
            events.len()
        )));
    }
    let mut c = SyscallCounts::default();
    let mut raw = 0;
    for ((label, _), v) in events.iter().zip(values) {
        if label == "raw" {
            raw = v;
        } else if let Some(op) = label.strip_prefix("futex_op:") {
            c.futex_ops.insert(op.to_string(), v);
        } else if v > 0 {
            c.calls.insert(label.clone(), v);
        }
    }
    let named = c.total();
    c.calls
        .insert(PERF_OTHER.to_string(), raw.saturating_sub(named));
    Ok(c)
}

/// A running `perf stat -x, -p PID` counting system-call tracepoints in every thread of PID:
/// a counter per call kind in the kernel, no stop per call as under strace, so the timing
/// (and with it how often threads park, poll, or find no data) stays close to an untraced run.
pub struct PerfCounter {
    /// perf stat, until [`PerfCounter::detach`] (or drop) ends it.
    perf: Attached,
    events: Vec<(String, Vec<String>)>,
}

/// A named pipe at `path` (replacing a stale one).
fn make_fifo(path: &Path) -> Result<()> {
    let _ = fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| Error(format!("{}: {e}", path.display())))?;
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(Error(format!(
            "mkfifo {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Sends perf's control fifo `enable` and waits (up to 10 s) for its `ack`. Both fifos are
/// opened read-write, which does not block on a fifo whatever perf has opened yet.
fn enable(ctl: &Path, ack: &Path) -> bool {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let open = |p: &Path, flags| {
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(p)
    };
    let (Ok(mut ctl), Ok(mut ack)) = (open(ctl, 0), open(ack, libc::O_NONBLOCK)) else {
        return false;
    };
    if ctl.write_all(b"enable\n").is_err() {
        return false;
    }
    let mut got = Vec::new();
    wait_until(Duration::from_secs(10), || {
        let mut buf = [0u8; 16];
        if let Ok(n) = ack.read(&mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        got.windows(3).any(|w| w == b"ack")
    })
}

/// perf event file descriptors `pid` holds.
fn perf_fds(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
        .unwrap_or(0)
}

impl PerfCounter {
    /// Starts `perf stat` on `pid`, waits (up to 10 s) until it holds a counter for every
    /// event in every thread, then enables them all and waits for perf to say so. perf
    /// opens its counters disabled (`-D -1`) and enables them on the `enable` command of its
    /// control fifo, answering `ack`: left to itself it enables one event after the other in
    /// every thread, and on a busy machine the load had begun meanwhile (in one CI run the
    /// events enabled last missed 17% of the connections that the first ones counted).
    pub fn attach(pid: i32, out: &Path) -> Result<PerfCounter> {
        let events = perf_events();
        let (ctl, ack) = (out.with_extension("ctl"), out.with_extension("ack"));
        make_fifo(&ctl)?;
        make_fifo(&ack)?;
        let mut cmd = Command::new(PERF);
        cmd.args(["stat", "-x", ",", "-D", "-1", "--control"])
            .arg(format!("fifo:{},{}", ctl.display(), ack.display()))
            .arg("-o")
            .arg(out)
            .args(events.iter().flat_map(|(_, a)| a.iter()))
            .args(["-p", &pid.to_string()]);
        let perf = Attached::spawn(cmd, PERF, out, "apt-get install linux-perf")?;
        let me = perf.pid();
        let p = PerfCounter { perf, events };
        let want = tasks(pid).len() * p.events.len();
        let attached = wait_until(Duration::from_secs(10), || perf_fds(me) >= want);
        let enabled = attached && enable(&ctl, &ack);
        let _ = fs::remove_file(&ctl);
        let _ = fs::remove_file(&ack);
        if !enabled {
            let why = p.detach().err().map(|e| e.0).unwrap_or_default();
            return Err(Error(format!(
                "perf stat -p {pid} did not open and enable {want} counters within 10 s \
                 (perf_event_paranoid, or no tracefs? --no-perf skips this pass) {why}"
            )));
        }
        Ok(p)
    }

    /// Stops perf (SIGINT: it prints its counts and exits) and reads the counts.
    pub fn detach(mut self) -> Result<SyscallCounts> {
        let (out, text) = self.perf.stop()?;
        perf_counts(&text, &self.events).map_err(|e| {
            Error(format!(
                "{e}\nperf ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })
    }
}

#[cfg(test)]
mod perf_tests {
    use super::*;

    #[test]
    fn perf_csv_is_matched_to_the_events_in_order() {
        let events: Vec<(String, Vec<String>)> = ["raw", "accept4", "futex", "futex_op:FUTEX_WAKE"]
            .iter()
            .map(|l| (l.to_string(), Vec::new()))
            .collect();
        let text = "# started on Tue Dec  1 06:27:37 2026\n\n\
            1000,,raw_syscalls:sys_enter,145944192,100.00,,\n\
            10,,syscalls:sys_enter_accept4,145944192,100.00,,\n\
            40,,syscalls:sys_enter_futex,145944192,100.00,,\n\
            <not counted>,,syscalls:sys_enter_futex,0,100.00,,\n";
        let c = perf_counts(text, &events).expect("parse");
        assert_eq!(c.calls.get("accept4"), Some(&10));
        assert_eq!(c.calls.get(PERF_OTHER), Some(&950));
        assert_eq!(c.total(), 1000);
        assert_eq!(c.futex_wakes(), 0);
        assert!(perf_counts("1,,x,1,100.00,,\n", &events).is_err());
    }

    #[test]
    fn the_event_list_counts_all_calls_first() {
        let ev = perf_events();
        assert_eq!(ev[0].0, "raw");
    }
}
