//! `--percon`: what one connection (and one request) costs each MPM, measured rather than
//! guessed: system calls by kind, futex wakes, context switches and CPU.
//!
//! Each MPM gets a private httpd from the A/B templates with one change for all of them
//! ([`overrides`]): one child with [`THREADS_PER_CHILD`] threads does all the work, so its pid
//! is the one to trace and to read. Per repetition (MPM order rotated, as in the matrix) and
//! per connection mode, two passes of the same fixed load (`ab -n requests -c clients`, the
//! 1-byte file; `close` sends `Connection: close`, `keepalive` is `ab -k`):
//!
//! 1. untraced: CPU (schedstat, ns), voluntary/involuntary context switches summed over the
//!    child's threads, and for rworker its `RWorkerHandoffs`/`RWorkerFutexWakes` from
//!    `server-status?auto`, before and after;
//! 2. under `strace -f -p CHILD` (every thread): system calls by name, futex by operation,
//!    failed calls. strace slows every call down, so this pass gives counts only.
//!
//! Connections are counted by ab (`complete - keep-alive requests`), so per-connection and
//! per-request figures divide by exact numbers.

use crate::client::{run_ab, AbResult};
use crate::error::{Error, Result};
use crate::mpm::{Modules, MpmKind};
use crate::options::{ConnMode, Options};
use crate::procstat::{self, sample_process, ProcessSample};
use crate::report::Stat;
use crate::server::{payload_path, Server};
use crate::shutdown;
use crate::status::{self, RworkerCounters};
use crate::trace::{self, PerfCounter, SyscallCounts, Tracer};

/// The [`Traced::tool`] of a pass under strace.
pub const STRACE: &str = "strace";
/// The [`Traced::tool`] of a pass under perf stat.
pub const PERF: &str = "perf";
use rworker_testkit::procfs;
use rworker_testkit::wait::wait_until;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Worker threads of the one child.
pub const THREADS_PER_CHILD: u32 = 25;

/// The payload: the 1-byte file.
const SIZE: u64 = 1;

/// Pause before each reading, so that the lingering closes of the last connections (the
/// server's `shutdown`, `poll`, `read`, `close` after ab has its response) fall inside it.
const SETTLE: Duration = Duration::from_millis(150);
/// The longest wait for the server to begin closing its connections after a traced load.
const UNCLOSED_WAIT: Duration = Duration::from_secs(5);

/// What `--percon` changes in `common.conf`, for every MPM alike: one child that neither
/// forks a sibling nor is retired (MinSpareThreads 5 < its idle threads under 25 clients at
/// most; MaxSpareThreads 50 >= MinSpareThreads + ThreadsPerChild).
pub fn overrides() -> Vec<(&'static str, String)> {
    let t = THREADS_PER_CHILD.to_string();
    vec![
        ("StartServers", "1".into()),
        ("ServerLimit", "1".into()),
        ("ThreadsPerChild", t.clone()),
        ("MaxRequestWorkers", t),
        ("MinSpareThreads", "5".into()),
        ("MaxSpareThreads", "50".into()),
    ]
}

/// One untraced pass.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Which MPM.
    pub mpm: MpmKind,
    /// Which connection mode.
    pub mode: ConnMode,
    /// Repetition, from 1.
    pub rep: u32,
    /// What ab did.
    pub ab: AbResult,
    /// The child's CPU and context switches during the pass.
    pub proc: ProcessSample,
    /// rworker's counters during the pass (the closing `server-status` request's own
    /// connection and hand-off taken off); `None` for the stock MPMs.
    pub rworker: Option<RworkerCounters>,
    /// Seconds ab ran.
    pub wall_s: f64,
    /// Host-wide CPU busy % while ab ran (other jobs on the machine show here).
    pub host_busy_pct: f64,
    /// 1-minute load average at the end of the pass.
    pub load1: f64,
}

/// One pass under strace.
#[derive(Clone, Debug)]
pub struct Traced {
    /// Which counter: [`STRACE`] or [`PERF`].
    pub tool: &'static str,
    /// Which MPM.
    pub mpm: MpmKind,
    /// Which connection mode.
    pub mode: ConnMode,
    /// Repetition, from 1.
    pub rep: u32,
    /// What ab did.
    pub ab: AbResult,
    /// The child's system calls, all threads.
    pub counts: SyscallCounts,
    /// Seconds ab ran (slowed down by strace).
    pub wall_s: f64,
}

/// Everything `--percon` measured.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Untraced passes.
    pub measured: Vec<Measured>,
    /// Traced passes.
    pub traced: Vec<Traced>,
    /// One line per server start: what was verified.
    pub verified: Vec<String>,
    /// warn/error lines from the error logs.
    pub warnings: Vec<String>,
    /// Wall-clock seconds for the whole run.
    pub elapsed_s: f64,
}

/// One ab run while a tool counts the child's system calls: ab's result, the counts, and
/// ab's wall time. `detach` stops the tool after [`SETTLE`] (the last connections' closes
/// land in the count), and runs even when ab failed, so the tool never stays attached.
fn counted_run(
    url: &str,
    port: u16,
    mode: ConnMode,
    requests: u64,
    clients: u32,
    ab_log: &Path,
    detach: impl FnOnce() -> Result<SyscallCounts>,
) -> Result<(AbResult, SyscallCounts, f64)> {
    let t = Instant::now();
    let ab = run_ab(url, mode, requests, clients, ab_log);
    let wall_s = t.elapsed().as_secs_f64();
    // The server's lingering closes of the last connections come after ab has its
    // responses, later still on a busy machine under strace: wait until it has begun to
    // close every connection (shutdown or close called), then SETTLE for the rest.
    wait_until(UNCLOSED_WAIT, || procfs::tcp_unclosed_on_port(port) == 0);
    std::thread::sleep(SETTLE);
    let counts = detach()?;
    Ok((ab?, counts, wall_s))
}

/// The one child of `parent` (waits up to 10 s for it).
fn only_child(parent: i32) -> Result<i32> {
    let mut kids = Default::default();
    wait_until(Duration::from_secs(10), || {
        kids = procfs::live_children(parent);
        kids.len() == 1
    });
    match kids.iter().next() {
        Some(&c) if kids.len() == 1 => Ok(c),
        _ => Err(Error(format!(
            "expected exactly one child of httpd {parent}, found {kids:?}"
        ))),
    }
}

/// Checks that `child` is still the server's only child and has `threads` threads.
fn same_child(server: &Server, child: i32, threads: usize, what: &str) -> Result<()> {
    let kids = procfs::live_children(server.parent);
    let now = trace::tasks(child).len();
    if kids.len() != 1 || !kids.contains(&child) || now != threads {
        return Err(Error(format!(
            "{}: the child changed during {what} (children {kids:?}, expected {child} with \
             {threads} threads, it has {now}): the figures would mix processes",
            server.kind
        )));
    }
    Ok(())
}

/// Runs `--percon`. `modules` has the module copies the kinds load; `progress` gets one line
/// per server start and per pass.
pub fn run(opts: &Options, modules: &Modules, mut progress: impl FnMut(&str)) -> Result<Outcome> {
    let t0 = Instant::now();
    let mut out = Outcome::default();
    let ov = overrides();
    let clients = opts.clients[0];
    for rep in 0..opts.reps {
        for mpm in crate::mpm::rotated(&opts.mpms, rep) {
            if shutdown::interrupted() {
                return Err(Error("interrupted".into()));
            }
            let so = modules.for_kind(mpm)?;
            let (mut server, what) = Server::start_with(mpm, &[SIZE], so, &ov, None)?;
            let child = only_child(server.parent)?;
            let line = format!(
                "rep {}/{} {mpm}: started pid {} (one child, pid {child}) on port {} \
                 (ServerRoot {}); verified {what}",
                rep + 1,
                opts.reps,
                server.parent,
                server.port,
                server.root.display()
            );
            progress(&line);
            out.verified.push(line);
            let url = server.url(&opts.path.clone().unwrap_or_else(|| payload_path(SIZE)));
            let logs = server.root.join("logs");
            // Warm-up: every thread has served, pools and buffers exist.
            for mode in [ConnMode::Close, ConnMode::KeepAlive] {
                run_ab(&url, mode, 500, clients, &logs.join("ab-warmup.txt"))?;
            }
            std::thread::sleep(SETTLE);
            let threads = trace::tasks(child).len();
            for &mode in &opts.modes {
                let m = mode.label();
                // 1. Untraced.
                let st0 = status::rworker_counters(server.port, server.tls);
                std::thread::sleep(SETTLE);
                let p0 = sample_process(child);
                let host0 = procstat::host_cpu();
                let t = Instant::now();
                let ab = run_ab(
                    &url,
                    mode,
                    opts.cpu_requests,
                    clients,
                    &logs.join(format!("ab-{m}-{rep}.txt")),
                )?;
                let wall_s = t.elapsed().as_secs_f64();
                let host1 = procstat::host_cpu();
                std::thread::sleep(SETTLE);
                let p1 = sample_process(child);
                let st1 = status::rworker_counters(server.port, server.tls);
                same_child(&server, child, threads, "the untraced pass")?;
                let rworker = st0.zip(st1).map(|(a, b)| {
                    let mut d = b.since(&a);
                    // The second status request was itself accepted and handed off.
                    d.connections = d.connections.saturating_sub(1);
                    d.handoffs = d.handoffs.saturating_sub(1);
                    d
                });
                let meas = Measured {
                    mpm,
                    mode,
                    rep: rep + 1,
                    ab,
                    proc: p1.since(&p0),
                    rworker,
                    wall_s,
                    host_busy_pct: 100.0 * host1.0.saturating_sub(host0.0) as f64
                        / host1.1.saturating_sub(host0.1).max(1) as f64,
                    load1: procstat::loadavg1(),
                };
                let conns = Per::Conn.units(mode, &meas.ab);
                let mut line = format!(
                    "rep {}/{} {:<14} {m:<9} {} req in {:.2} s: {:.1} µs CPU/conn, \
                     {:.2} vol + {:.2} invol ctx sw/conn",
                    rep + 1,
                    opts.reps,
                    mpm.label(),
                    meas.ab.complete,
                    wall_s,
                    meas.proc.cpu_ns as f64 / 1e3 / conns,
                    meas.proc.vcsw as f64 / conns,
                    meas.proc.nvcsw as f64 / conns,
                );
                if let Some(r) = &meas.rworker {
                    let _ = write!(line, ", {:.3} futex wakes/hand-off", r.wakes_per_handoff());
                }
                progress(&line);
                out.measured.push(meas);

                // 2. Under perf stat: counters in the kernel, the timing nearly untouched.
                if !opts.no_perf {
                    let perf_file = logs.join(format!("perf-{m}-{rep}.txt"));
                    let counter = PerfCounter::attach(child, &perf_file)?;
                    let (ab, counts, wall_s) = counted_run(
                        &url,
                        server.port,
                        mode,
                        opts.requests,
                        clients,
                        &logs.join(format!("ab-perf-{m}-{rep}.txt")),
                        || counter.detach(),
                    )?;
                    same_child(&server, child, threads, "the perf pass")?;
                    let conns = Per::Conn.units(mode, &ab);
                    progress(&format!(
                        "rep {}/{} {:<14} {m:<9} perf:   {:.1} syscalls/conn ({:.2} futex \
                         wakes) in {:.2} s",
                        rep + 1,
                        opts.reps,
                        mpm.label(),
                        counts.total() as f64 / conns,
                        counts.futex_wakes() as f64 / conns,
                        wall_s
                    ));
                    out.traced.push(Traced {
                        tool: PERF,
                        mpm,
                        mode,
                        rep: rep + 1,
                        ab,
                        counts,
                        wall_s,
                    });
                }

                // 3. Under strace.
                let trace_file = logs.join(format!("strace-{m}-{rep}.txt"));
                let tracer = Tracer::attach(child, &trace_file)?;
                let (ab, counts, wall_s) = counted_run(
                    &url,
                    server.port,
                    mode,
                    opts.requests,
                    clients,
                    &logs.join(format!("ab-strace-{m}-{rep}.txt")),
                    || tracer.detach(),
                )?;
                if opts.keep_traces {
                    let dir = opts.out.join("traces");
                    let kept = dir.join(format!("strace-{mpm}-{m}-{}.txt", rep + 1));
                    std::fs::create_dir_all(&dir)
                        .and_then(|()| std::fs::rename(&trace_file, &kept))
                        .or_else(|_| std::fs::copy(&trace_file, &kept).map(|_| ()))
                        .map_err(|e| Error(format!("keep {}: {e}", kept.display())))?;
                }
                let _ = std::fs::remove_file(&trace_file);
                same_child(&server, child, threads, "the strace pass")?;
                let conns = Per::Conn.units(mode, &ab);
                progress(&format!(
                    "rep {}/{} {:<14} {m:<9} strace: {:.1} syscalls/conn ({:.1} futex, {:.2} of \
                     them wakes) in {:.2} s",
                    rep + 1,
                    opts.reps,
                    mpm.label(),
                    counts.total() as f64 / conns,
                    counts.calls.get("futex").copied().unwrap_or(0) as f64 / conns,
                    counts.futex_wakes() as f64 / conns,
                    wall_s
                ));
                out.traced.push(Traced {
                    tool: STRACE,
                    mpm,
                    mode,
                    rep: rep + 1,
                    ab,
                    counts,
                    wall_s,
                });
                for w in server.check_log()? {
                    out.warnings.push(format!("{mpm}: {w}"));
                }
            }
            for w in server.stop()? {
                out.warnings.push(format!("{mpm}: {w}"));
            }
        }
    }
    out.elapsed_s = t0.elapsed().as_secs_f64();
    Ok(out)
}

/// The rows of the compact table: a label and the system calls it adds up.
pub const GROUPS: &[(&str, &[&str])] = &[
    ("accept4", &["accept4", "accept"]),
    ("fcntl", &["fcntl", "fcntl64"]),
    ("futex", &["futex"]),
    ("sched_yield", &["sched_yield"]),
    (
        "poll / epoll",
        &[
            "poll",
            "ppoll",
            "epoll_wait",
            "epoll_pwait",
            "epoll_pwait2",
            "epoll_ctl",
            "select",
            "pselect6",
        ],
    ),
    ("read", &["read", "readv", "recvfrom", "recvmsg"]),
    (
        "writev / sendfile",
        &["writev", "write", "sendfile", "sendmsg", "sendto"],
    ),
    ("shutdown", &["shutdown"]),
    ("close", &["close"]),
    (
        "mmap / munmap",
        &["mmap", "munmap", "mprotect", "madvise", "mremap", "brk"],
    ),
    ("openat", &["openat", "open"]),
    (
        "fstat / stat",
        &["fstat", "newfstatat", "stat", "lstat", "statx"],
    ),
    (
        "getsockname / setsockopt",
        &["getsockname", "getpeername", "setsockopt", "getsockopt"],
    ),
];

/// `MaxKeepAliveRequests` of `common.conf`: a keep-alive connection serves this many requests.
pub const KEEPALIVE_REQUESTS: u64 = 100;

/// The unit a figure is divided by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Per {
    /// Per connection. `close`: per TCP connection (one request each). `keepalive`: per
    /// [`KEEPALIVE_REQUESTS`] requests, the work of one full keep-alive connection; ab's
    /// connection count is not exact here (the last connection of each client is cut short
    /// when the run ends, and ab does not count those), so the figure divides by the
    /// requests, which are exact.
    Conn,
    /// Per request.
    Req,
}

impl Per {
    /// How many units a pass of `mode` that did `ab` is.
    pub fn units(self, mode: ConnMode, ab: &AbResult) -> f64 {
        match (self, mode) {
            (Per::Req, _) => ab.complete as f64,
            (Per::Conn, ConnMode::Close) => ab.connections() as f64,
            (Per::Conn, ConnMode::KeepAlive) => ab.complete as f64 / KEEPALIVE_REQUESTS as f64,
        }
        .max(1e-9)
    }
}

/// The figures of one counted pass by row label: the kinds ([`GROUPS`], `other`, total,
/// futex wake and wait) from the pass that gives them (perf if it ran, else strace), and from
/// strace, when perf gave the kinds, what only it sees, under its own labels.
pub fn traced_rows(c: &SyscallCounts, kinds: bool) -> Vec<(String, u64)> {
    let mut rows = Vec::new();
    if kinds {
        let mut grouped = 0;
        for (label, names) in GROUPS {
            let n: u64 = names.iter().filter_map(|k| c.calls.get(*k)).sum();
            grouped += n;
            rows.push((label.to_string(), n));
        }
        rows.push(("other".into(), c.total() - grouped));
        rows.push(("**total system calls**".into(), c.total()));
        rows.push(("futex wake".into(), c.futex_wakes()));
        rows.push(("futex wait".into(), c.futex_waits()));
    } else {
        rows.push(("total under strace".into(), c.total()));
        rows.push((
            "futex under strace".into(),
            c.calls.get("futex").copied().unwrap_or(0),
        ));
        rows.push(("futex wake under strace".into(), c.futex_wakes()));
    }
    rows.push((
        "failed calls under strace (EAGAIN, ...)".into(),
        c.errors.values().sum::<u64>(),
    ));
    rows
}

/// The figures of one untraced pass by row label.
pub fn measured_rows(m: &Measured) -> Vec<(String, f64)> {
    let mut rows = vec![
        ("voluntary ctx switches".into(), m.proc.vcsw as f64),
        ("involuntary ctx switches".into(), m.proc.nvcsw as f64),
        ("CPU µs (schedstat)".into(), m.proc.cpu_ns as f64 / 1e3),
    ];
    if let Some(r) = &m.rworker {
        rows.push(("RWorkerConnections".into(), r.connections as f64));
        rows.push(("RWorkerFutexWakes".into(), r.futex_wakes as f64));
        rows.push(("RWorkerHandoffs".into(), r.handoffs as f64));
    }
    rows
}

/// What a summary is keyed by: connection mode, MPM, and `"conn"` or `"req"`.
pub type Key = (ConnMode, MpmKind, &'static str);

/// Medians over repetitions: (mode, MPM, per) → row label → stat of the per-unit values.
pub type Summary = BTreeMap<Key, Vec<(String, Stat)>>;

fn per_label(p: Per) -> &'static str {
    match p {
        Per::Conn => "conn",
        Per::Req => "req",
    }
}

/// Per-unit values of every row over the repetitions, in row order.
pub fn summarise(out: &Outcome) -> Summary {
    let mut acc: BTreeMap<Key, Vec<(String, Vec<f64>)>> = BTreeMap::new();
    let mut push = |key, label: String, v: f64| {
        let rows: &mut Vec<(String, Vec<f64>)> = acc.entry(key).or_default();
        match rows.iter_mut().find(|(l, _)| *l == label) {
            Some((_, vs)) => vs.push(v),
            None => rows.push((label, vec![v])),
        }
    };
    let have_perf = out.traced.iter().any(|t| t.tool == PERF);
    // perf's rows first (in table order), then strace's, then the untraced figures.
    let mut passes: Vec<&Traced> = out.traced.iter().filter(|t| t.tool == PERF).collect();
    passes.extend(out.traced.iter().filter(|t| t.tool != PERF));
    for per in [Per::Conn, Per::Req] {
        for t in &passes {
            let d = per.units(t.mode, &t.ab);
            let kinds = t.tool == PERF || !have_perf;
            for (label, n) in traced_rows(&t.counts, kinds) {
                // perf sees no return values: failed calls come from strace only.
                if t.tool == PERF && label.starts_with("failed calls") {
                    continue;
                }
                push((t.mode, t.mpm, per_label(per)), label, n as f64 / d);
            }
        }
        for m in &out.measured {
            let d = per.units(m.mode, &m.ab);
            for (label, v) in measured_rows(m) {
                push((m.mode, m.mpm, per_label(per)), label, v / d);
            }
        }
    }
    acc.into_iter()
        .map(|(k, rows)| {
            let rows = rows
                .into_iter()
                .filter_map(|(l, vs)| Some((l, Stat::of(vs)?)))
                .collect();
            (k, rows)
        })
        .collect()
}

fn fmt(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else if x.abs() >= 0.995 || x == 0.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn lookup(s: &Summary, mode: ConnMode, mpm: MpmKind, per: &str, row: &str) -> Option<Stat> {
    s.get(&(mode, mpm, per))?
        .iter()
        .find(|(l, _)| l == row)
        .map(|(_, st)| *st)
}

/// Every row label in the order they first appear (traced rows in [`GROUPS`] order, then the
/// untraced ones), leaving out rows that are zero everywhere.
fn row_labels(s: &Summary) -> Vec<String> {
    let mut labels: Vec<String> = Vec::new();
    for rows in s.values() {
        for (l, _) in rows {
            if !labels.contains(l) {
                labels.push(l.clone());
            }
        }
    }
    labels.retain(|l| {
        s.values()
            .flat_map(|rows| rows.iter().filter(|(k, _)| k == l))
            .any(|(_, st)| st.max != 0.0)
    });
    labels
}

/// The compact table: rows = kinds, columns = per connection (close), per request and per
/// connection (keep-alive), one column per MPM, and rworker/worker.
pub fn compact_table(s: &Summary, mpms: &[MpmKind], modes: &[ConnMode]) -> String {
    let cols: Vec<(ConnMode, &str)> = modes
        .iter()
        .flat_map(|&m| match m {
            ConnMode::Close => vec![(m, "conn")],
            ConnMode::KeepAlive => vec![(m, "req"), (m, "conn")],
        })
        .collect();
    let ratio = mpms.contains(&MpmKind::Worker) && mpms.contains(&MpmKind::Rworker);
    let mut head = String::from("| per … |");
    let mut rule = String::from("|---|");
    for (mode, per) in &cols {
        for mpm in mpms {
            let unit = match (mode, *per) {
                (ConnMode::KeepAlive, "conn") => "/conn (100 req)",
                (_, "conn") => "/conn",
                _ => "/req",
            };
            let _ = write!(head, " {mpm} {} {unit} |", mode.label());
            rule.push_str("---:|");
        }
        if ratio {
            let _ = write!(head, " rworker/worker |");
            rule.push_str("---:|");
        }
    }
    let mut t = format!("{head}\n{rule}\n");
    for row in row_labels(s) {
        let _ = write!(t, "| {row} |");
        for &(mode, per) in &cols {
            for &mpm in mpms {
                let v = lookup(s, mode, mpm, per, &row).map_or(f64::NAN, |st| st.median);
                let _ = write!(t, " {} |", fmt(v));
            }
            if ratio {
                let w = lookup(s, mode, MpmKind::Worker, per, &row).map(|st| st.median);
                let r = lookup(s, mode, MpmKind::Rworker, per, &row).map(|st| st.median);
                let cell = match (r, w) {
                    (Some(r), Some(w)) if w > 0.0 => format!("{:.2}", r / w),
                    _ => "–".into(),
                };
                let _ = write!(t, " {cell} |");
            }
        }
        t.push('\n');
    }
    t
}

/// The spread table: median (min–max) of every row, per MPM and mode, in the mode's own unit.
pub fn spread_table(s: &Summary, mpms: &[MpmKind], modes: &[ConnMode]) -> String {
    let per = |m: ConnMode| match m {
        ConnMode::Close => "conn",
        ConnMode::KeepAlive => "req",
    };
    let mut t = String::from("| per … |");
    let mut rule = String::from("|---|");
    for &mode in modes {
        for mpm in mpms {
            let _ = write!(t, " {mpm} {} /{} |", mode.label(), per(mode));
            rule.push_str("---:|");
        }
    }
    let _ = writeln!(t, "\n{rule}");
    for row in row_labels(s) {
        let _ = write!(t, "| {row} |");
        for &mode in modes {
            for &mpm in mpms {
                let cell = lookup(s, mode, mpm, per(mode), &row).map_or("–".into(), |st| {
                    format!("{} ({}–{})", fmt(st.median), fmt(st.min), fmt(st.max))
                });
                let _ = write!(t, " {cell} |");
            }
        }
        t.push('\n');
    }
    t
}

/// Every system call name seen, per connection (close) and per request (keep-alive), medians.
pub fn syscall_table(out: &Outcome, mpms: &[MpmKind], modes: &[ConnMode]) -> String {
    let mut names: BTreeMap<String, u64> = BTreeMap::new();
    for t in out.traced.iter().filter(|t| t.tool == STRACE) {
        for (k, v) in &t.counts.calls {
            *names.entry(k.clone()).or_default() += v;
        }
    }
    let mut names: Vec<(String, u64)> = names.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut t = String::from("| system call |");
    let mut rule = String::from("|---|");
    for &mode in modes {
        for mpm in mpms {
            let per = if mode == ConnMode::Close {
                "conn"
            } else {
                "req"
            };
            let _ = write!(t, " {mpm} {} /{per} |", mode.label());
            rule.push_str("---:|");
        }
    }
    let _ = writeln!(t, "\n{rule}");
    for (name, _) in &names {
        let _ = write!(t, "| {name} |");
        for &mode in modes {
            for &mpm in mpms {
                let per = if mode == ConnMode::Close {
                    Per::Conn
                } else {
                    Per::Req
                };
                let vals = out
                    .traced
                    .iter()
                    .filter(|x| x.tool == STRACE && x.mpm == mpm && x.mode == mode)
                    .map(|x| {
                        x.counts.calls.get(name).copied().unwrap_or(0) as f64
                            / per.units(mode, &x.ab)
                    });
                let cell = Stat::of(vals).map_or("–".into(), |s| fmt(s.median));
                let _ = write!(t, " {cell} |");
            }
        }
        t.push('\n');
    }
    t
}

/// Every count of every pass, one per line: `pass,mpm,mode,rep,requests,connections,metric,value`.
pub fn results_csv(out: &Outcome) -> String {
    let mut c = String::from("pass,mpm,mode,rep,requests,connections,wall_s,metric,value\n");
    for t in &out.traced {
        let head = format!(
            "{},{},{},{},{},{},{:.3}",
            t.tool,
            t.mpm,
            t.mode.label(),
            t.rep,
            t.ab.complete,
            t.ab.connections(),
            t.wall_s
        );
        for (k, v) in &t.counts.calls {
            let _ = writeln!(c, "{head},syscall:{k},{v}");
        }
        for (k, v) in &t.counts.futex_ops {
            let _ = writeln!(c, "{head},futex_op:{k},{v}");
        }
        for (k, v) in &t.counts.errors {
            let _ = writeln!(c, "{head},failed:{k},{v}");
        }
    }
    for m in &out.measured {
        let head = format!(
            "untraced,{},{},{},{},{},{:.3}",
            m.mpm,
            m.mode.label(),
            m.rep,
            m.ab.complete,
            m.ab.connections(),
            m.wall_s
        );
        let p = &m.proc;
        let _ = writeln!(c, "{head},cpu_ns,{}", p.cpu_ns);
        let _ = writeln!(c, "{head},cpu_ticks,{}", p.cpu_ticks);
        let _ = writeln!(c, "{head},vcsw,{}", p.vcsw);
        let _ = writeln!(c, "{head},nvcsw,{}", p.nvcsw);
        let _ = writeln!(c, "{head},threads,{}", p.threads);
        let _ = writeln!(c, "{head},host_busy_pct,{:.1}", m.host_busy_pct);
        let _ = writeln!(c, "{head},load1,{:.2}", m.load1);
        if let Some(r) = &m.rworker {
            let _ = writeln!(c, "{head},rworker_connections,{}", r.connections);
            let _ = writeln!(c, "{head},rworker_handoffs,{}", r.handoffs);
            let _ = writeln!(c, "{head},rworker_futex_wakes,{}", r.futex_wakes);
        }
    }
    c
}

/// Medians and ranges: `mode,mpm,per,row,median,min,max`.
pub fn summary_csv(s: &Summary) -> String {
    let mut c = String::from("mode,mpm,per,row,median,min,max\n");
    for ((mode, mpm, per), rows) in s {
        for (label, st) in rows {
            let _ = writeln!(
                c,
                "{},{mpm},{per},{},{:.4},{:.4},{:.4}",
                mode.label(),
                label.replace("**", "").replace(',', ";"),
                st.median,
                st.min,
                st.max
            );
        }
    }
    c
}

/// The Markdown report.
pub fn markdown(opts: &Options, out: &Outcome, machine: &str) -> String {
    let s = summarise(out);
    let mut m = String::new();
    let _ = writeln!(m, "# rworker: per-connection and per-request cost\n");
    let _ = writeln!(
        m,
        "Command (from the repository root):\n\n```sh\n{}\n```\n",
        opts.command_line
    );
    let _ = writeln!(m, "Machine:\n\n```\n{}\n```\n", machine.trim());
    let _ = writeln!(
        m,
        "One child ({}) serves `ab -n {} -c {}` of the 1-byte file (`-n {}` in the untraced \
         pass: CPU needs a longer sample than counts do), `close` \
         (`-H 'Connection: close'`: one request per connection) and `keepalive` (`ab -k`; \
         MaxKeepAliveRequests 100), after a warm-up of 500 requests in each mode. {} \
         repetitions, MPM order rotated each repetition; medians (the spread table has \
         min–max). {} in all.\n",
        overrides()
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        opts.requests,
        opts.clients[0],
        opts.cpu_requests,
        opts.reps,
        crate::plan::mmss(out.elapsed_s)
    );
    let _ = writeln!(
        m,
        "Three passes of the same load per mode, each with its own `ab` run: (1) untraced: \
         CPU (`/proc/<child>/task/*/schedstat`, ns), context switches \
         (`/proc/<child>/task/*/status`) and rworker's `RWorkerFutexWakes` / `RWorkerHandoffs` \
         (`server-status?auto`); (2) `perf stat -p <child>` on the `syscalls:sys_enter_*` \
         tracepoints (every thread; futex wake and wait by tracepoint filters on `op`): the \
         system calls by kind, counted in the kernel with little change to the timing; \
         (3) `strace -f -p <child>`: every call by name, futex by operation, failed calls. \
         strace stops the thread at every call, which changes how often threads park or \
         find no data yet (fewer EAGAIN reads and polls, different futex traffic), so its \
         figures are labelled `under strace` (with `--no-perf` the kinds come from it). Only \
         the child is measured (the parent idles). Per connection: `close` divides by the \
         connections (= requests); `keepalive` by requests / {KEEPALIVE_REQUESTS} \
         (MaxKeepAliveRequests), the work of one full keep-alive connection (ab cuts the last \
         connection of each client short and does not count connections, so requests are \
         the exact divisor); its `accept4` row shows how many connections there really \
         were.\n"
    );
    let busy = Stat::of(out.measured.iter().map(|x| x.host_busy_pct));
    let load = Stat::of(out.measured.iter().map(|x| x.load1));
    let range = |s: Option<Stat>, d: usize| {
        s.map_or("–".into(), |s| {
            format!("{:.d$} ({:.d$}–{:.d$})", s.median, s.min, s.max)
        })
    };
    let _ = writeln!(
        m,
        "Noise: host CPU busy during the untraced passes {}%, 1-min load average after them \
         {} on {} CPUs. The system-call counts hardly depend on it; CPU and involuntary \
         context switches do.\n",
        range(busy, 0),
        range(load, 1),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let _ = writeln!(
        m,
        "## Medians\n\n{}",
        compact_table(&s, &opts.mpms, &opts.modes)
    );
    let _ = writeln!(
        m,
        "## Spread: median (min–max) over repetitions\n\n{}",
        spread_table(&s, &opts.mpms, &opts.modes)
    );
    let _ = writeln!(
        m,
        "## Every system call (strace pass, medians; strace changes the timing, see above)\n\n{}",
        syscall_table(out, &opts.mpms, &opts.modes)
    );
    let _ = writeln!(m, "## Error-log warnings\n");
    if out.warnings.is_empty() {
        let _ = writeln!(m, "None.\n");
    } else {
        let _ = writeln!(m, "```\n{}\n```\n", out.warnings.join("\n"));
    }
    let _ = writeln!(
        m,
        "## Servers started and what was verified\n\n```\n{}\n```",
        out.verified.join("\n")
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pairs: &[(&str, u64)]) -> SyscallCounts {
        SyscallCounts {
            calls: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            futex_ops: [("FUTEX_WAKE_PRIVATE".to_string(), 3)].into(),
            ..SyscallCounts::default()
        }
    }

    fn ab(complete: u64, keepalive: u64) -> AbResult {
        AbResult {
            complete,
            keepalive,
            ..AbResult::default()
        }
    }

    #[test]
    fn rows_add_up_and_divide_by_connections_or_requests() {
        let c = counts(&[("accept4", 10), ("fcntl", 20), ("futex", 5), ("getpid", 1)]);
        let rows = traced_rows(&c, true);
        let get = |l: &str| rows.iter().find(|(k, _)| k == l).map(|(_, v)| *v);
        assert_eq!(get("accept4"), Some(10));
        assert_eq!(get("other"), Some(1));
        assert_eq!(get("**total system calls**"), Some(36));
        assert_eq!(get("futex wake"), Some(3));
        let extra = traced_rows(&c, false);
        assert_eq!(extra[0], ("total under strace".to_string(), 36));
        let out = Outcome {
            traced: vec![
                Traced {
                    tool: STRACE,
                    mpm: MpmKind::Worker,
                    mode: ConnMode::KeepAlive,
                    rep: 1,
                    ab: ab(100, 90),
                    counts: c.clone(),
                    wall_s: 1.0,
                },
                Traced {
                    tool: STRACE,
                    mpm: MpmKind::Rworker,
                    mode: ConnMode::KeepAlive,
                    rep: 1,
                    ab: ab(100, 90),
                    counts: counts(&[("accept4", 10), ("fcntl", 10)]),
                    wall_s: 1.0,
                },
            ],
            ..Outcome::default()
        };
        let s = summarise(&out);
        let per_req = lookup(&s, ConnMode::KeepAlive, MpmKind::Worker, "req", "fcntl");
        let per_conn = lookup(&s, ConnMode::KeepAlive, MpmKind::Worker, "conn", "fcntl");
        assert_eq!(per_req.map(|s| s.median), Some(0.2));
        // Keep-alive per connection = per 100 requests.
        assert_eq!(per_conn.map(|s| s.median), Some(20.0));
        let table = compact_table(
            &s,
            &[MpmKind::Worker, MpmKind::Rworker],
            &[ConnMode::KeepAlive],
        );
        let fcntl = table
            .lines()
            .find(|l| l.starts_with("| fcntl |"))
            .expect("row");
        // per request: 0.200 / 0.100 (ratio 0.50); per 100 requests: 20 / 10 (ratio 0.50).
        assert_eq!(
            fcntl,
            "| fcntl | 0.200 | 0.100 | 0.50 | 20.0 | 10.0 | 0.50 |"
        );
        assert!(
            results_csv(&out).contains("strace,rworker,keepalive,1,100,10,1.000,syscall:fcntl,10")
        );
        assert!(summary_csv(&s).contains("keepalive,worker,conn,total system calls,"));
        // No getsockname/setsockopt calls anywhere: no such row.
        assert!(!table.contains("getsockname"), "{table}");
    }

    #[test]
    fn overrides_make_one_child() {
        let o = overrides();
        let get = |k: &str| o.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("ServerLimit"), Some("1"));
        assert_eq!(get("StartServers"), Some("1"));
        assert_eq!(get("MaxRequestWorkers"), get("ThreadsPerChild"));
        crate::server::override_directives(crate::mpm::COMMON_TEMPLATE, &o)
            .expect("every override names a line of common.conf");
    }
}
