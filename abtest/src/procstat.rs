//! CPU time and context switches of an httpd process tree, read from `/proc`.
//!
//! CPU: `utime + stime` of the parent and of every live child, plus the parent's
//! `cutime + cstime` (children it has reaped), so a child that exits during a run still counts.
//! Context switches: `voluntary_ctxt_switches` and `nonvoluntary_ctxt_switches` summed over
//! every thread (`/proc/<pid>/task/*/status`) of the parent and its live children; a child that
//! exits during a run takes its count with it, which is why the child set is compared too.

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

/// `sysconf(_SC_CLK_TCK)`: the unit of the CPU times in `/proc/<pid>/stat`.
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// The fields of `/proc/<pid>/stat` after the command name: `(state, ppid, utime+stime,
/// cutime+cstime)`. The command name may contain spaces and parentheses, so the split is at
/// the last `)`.
fn parse_stat(text: &str) -> Option<(char, i32, u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] = state (field 3), f[1] = ppid (4), f[11..15] = utime stime cutime cstime (14..17).
    let state = f.first()?.chars().next()?;
    let ppid = f.get(1)?.parse().ok()?;
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    Some((state, ppid, num(11)? + num(12)?, num(13)? + num(14)?))
}

fn read_stat(pid: i32) -> Option<(char, i32, u64, u64)> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Live (non-zombie) children of `parent`, found by scanning `/proc/*/stat`.
pub fn children_of(parent: i32) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    let Ok(dir) = fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if let Some((state, ppid, _, _)) = read_stat(pid) {
            if ppid == parent && state != 'Z' {
                out.insert(pid);
            }
        }
    }
    out
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    read_stat(pid).is_some_and(|(state, ..)| state != 'Z')
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
pub fn sample_tree(parent: i32) -> TreeSample {
    let mut s = TreeSample::default();
    if let Some((_, _, own, reaped)) = read_stat(parent) {
        s.cpu_ticks += own + reaped;
    }
    let (v, nv) = ctxt_switches(parent);
    s.vcsw += v;
    s.nvcsw += nv;
    s.children = children_of(parent);
    for &c in &s.children {
        if let Some((_, _, own, _)) = read_stat(c) {
            s.cpu_ticks += own;
        }
        let (v, nv) = ctxt_switches(c);
        s.vcsw += v;
        s.nvcsw += nv;
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
    fn stat_with_odd_command_name() {
        let line = "1234 (apache2 (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    7 3 11 2 20 0 1 0 100 0 0";
        assert_eq!(parse_stat(line), Some(('S', 1, 10, 13)));
    }

    #[test]
    fn own_process_is_sampled() {
        let me = std::process::id() as i32;
        assert!(alive(me));
        let s = sample_tree(me);
        assert!(s.vcsw + s.nvcsw > 0 || s.cpu_ticks > 0);
    }
}
