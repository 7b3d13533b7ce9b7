//! CPU time and context switches of an httpd process tree, read from `/proc`.
//!
//! CPU: `utime + stime` of the parent and of every live child, plus the parent's
//! `cutime + cstime` (children it has reaped), so a child that exits during a run still counts.
//! Context switches: `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` summed over
//! every thread (`/proc/<pid>/task/*/status`) of the parent and its live children; a child that
//! exits during a run takes its count with it, which is why the child set is compared too.

use rworker_testkit::procfs;
use std::collections::BTreeSet;
use std::fs;

/// One reading of a process tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeSample {
    /// CPU clock ticks (see [`clock_ticks_per_sec`]) of the tree, reaped children included.
    pub cpu_ticks: u64,
    /// Voluntary context switches summed over all threads.
    pub vcsw: u64,
    /// Involuntary context switches summed over all threads.
    pub nvcsw: u64,
    /// The parent's live (non-zombie) children.
    pub children: BTreeSet<i32>,
}

/// `sysconf(_SC_CLK_TCK)`: the unit of the CPU times in `/proc/<pid>/stat` (100 if the system
/// does not say).
pub fn clock_ticks_per_sec() -> u64 {
    procfs::clock_ticks_per_sec().unwrap_or(100)
}

/// `(voluntary, nonvoluntary)` context switches summed over the threads of `pid`.
fn ctxt_switches(pid: i32) -> (u64, u64) {
    let (mut v, mut nv) = (0, 0);
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0, 0);
    };
    for t in tasks.flatten() {
        let Ok(status) = fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let num = |p: &str| {
                line.strip_prefix(p)
                    .and_then(|s| s.trim().parse::<u64>().ok())
            };
            if let Some(n) = num("voluntary_ctxt_switches:") {
                v += n;
            } else if let Some(n) = num("nonvoluntary_ctxt_switches:") {
                nv += n;
            }
        }
    }
    (v, nv)
}

/// Reads the whole tree under `parent` (the httpd parent from its pidfile).
///
/// A child that has exited but is not reaped yet (httpd reaps in its once-a-second
/// maintenance) is a zombie: its CPU is in neither the live children nor the parent's
/// `cutime`, so it is read from the zombie itself, which keeps its totals until reaped. Leaving
/// zombies out lost a retiring child's whole lifetime of CPU from the reading after a run
/// (runs with 0.0-3.0 µs per request where the others had 35). The parent's reaped total is
/// read before and after the children, and the reading taken again if a reap fell between:
/// else that child counted twice or not at all.
pub fn sample_tree(parent: i32) -> TreeSample {
    loop {
        let mut s = TreeSample::default();
        let reaped = procfs::stat(parent);
        if let Some(st) = reaped {
            s.cpu_ticks += st.cpu_ticks + st.reaped_cpu_ticks;
        }
        let (v, nv) = ctxt_switches(parent);
        s.vcsw += v;
        s.nvcsw += nv;
        for (c, state) in procfs::children_of(parent) {
            if let Some(own) = procfs::cpu_ticks(c) {
                s.cpu_ticks += own;
            }
            if state != 'Z' {
                s.children.insert(c);
                let (v, nv) = ctxt_switches(c);
                s.vcsw += v;
                s.nvcsw += nv;
            }
        }
        let again = procfs::stat(parent);
        if reaped.map(|st| st.reaped_cpu_ticks) == again.map(|st| st.reaped_cpu_ticks) {
            return s;
        }
    }
}

/// One reading of a single process (all its threads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessSample {
    /// On-CPU nanoseconds summed over `/proc/<pid>/task/*/schedstat` (first field): the
    /// scheduler's own accounting, exact to the nanosecond, unlike the clock ticks of `stat`.
    pub cpu_ns: u64,
    /// `utime + stime` from `/proc/<pid>/stat`, in clock ticks (a cross-check of `cpu_ns`).
    pub cpu_ticks: u64,
    /// Voluntary context switches summed over all threads.
    pub vcsw: u64,
    /// Involuntary context switches summed over all threads.
    pub nvcsw: u64,
    /// Threads it had.
    pub threads: usize,
}

impl ProcessSample {
    /// `self - before`, field by field (threads: the later count).
    pub fn since(&self, before: &ProcessSample) -> ProcessSample {
        ProcessSample {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            cpu_ticks: self.cpu_ticks.saturating_sub(before.cpu_ticks),
            vcsw: self.vcsw.saturating_sub(before.vcsw),
            nvcsw: self.nvcsw.saturating_sub(before.nvcsw),
            threads: self.threads,
        }
    }
}

/// Reads one process: CPU (schedstat and stat) and context switches over its threads. A
/// thread that exits between two readings takes its counts with it; the caller compares the
/// thread counts.
pub fn sample_process(pid: i32) -> ProcessSample {
    let (vcsw, nvcsw) = ctxt_switches(pid);
    let mut s = ProcessSample {
        cpu_ticks: procfs::cpu_ticks(pid).unwrap_or(0),
        vcsw,
        nvcsw,
        ..ProcessSample::default()
    };
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            s.threads += 1;
            s.cpu_ns += fs::read_to_string(t.path().join("schedstat"))
                .ok()
                .and_then(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    s
}

/// Host-wide CPU counters from the first line of `/proc/stat`: `(busy, total)` ticks.
pub fn host_cpu() -> (u64, u64) {
    let text = fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|s| s.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle (3) + iowait (4) are not busy.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// The 1-minute load average from `/proc/loadavg`.
pub fn loadavg1() -> f64 {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_sampled() {
        let me = std::process::id() as i32;
        let s = sample_tree(me);
        assert!(s.vcsw + s.nvcsw > 0 || s.cpu_ticks > 0);
    }

    #[test]
    fn own_process_cpu_in_nanoseconds() {
        let me = std::process::id() as i32;
        let a = sample_process(me);
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let b = sample_process(me);
        assert!(a.threads >= 1);
        assert!(b.since(&a).cpu_ns > 0, "{a:?} {b:?}");
    }
}
