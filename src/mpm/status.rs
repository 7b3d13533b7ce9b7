//! rworker's own figures: per-child counters of what the MPM does for each connection
//! (connections accepted, hand-offs, futex wakes, transaction pools reused or created,
//! idle workers), kept in shared memory, one row per scoreboard slot, and shown in
//! mod_status's report. A row is never reset: a child that takes over a slot adds to
//! what its predecessors counted, so the totals are server-wide since start and survive
//! graceful restarts, as mod_status's own access counts do.
//!
//! Cost on the hot path: a relaxed increment of a counter in the listener's or worker's
//! own child row per event. Relaxed everywhere: the counters are statistics, published
//! nothing else, read whenever someone asks.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ffi::phase::SingleThreaded;
use crate::ffi::retained::Retained;
use crate::ffi::scoreboard;
use crate::ffi::shm::{Row, SharedRows};
use crate::ffi::status::{Flags, Output};

/// Counters per row that the MPM uses (the shared row has room for more).
pub const COUNTERS: usize = 9;

/// What a row counts (the index of each counter in it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    /// Connections accepted.
    Connections = 0,
    /// Connections handed from the listener to a worker through the fdqueue.
    Handoffs = 1,
    /// Futex wake system calls made by the hand-off (fdqueue and queue_info).
    FutexWakes = 2,
    /// Transaction pools reused: taken from the recycled stack, or with `RWorkerAccept
    /// workers` the worker's own pool from its last connection.
    PoolsReused = 3,
    /// Transaction pools created (the stack was empty, or a worker's first connection).
    PoolsCreated = 4,
    /// Idle workers as queue_info counts them, or with `RWorkerAccept workers` the workers
    /// blocked in accept (a gauge, not a total).
    IdleWorkers = 5,
    /// Connections parked in the child's event set (a gauge; `RWorkerKeepAlive park`).
    Parked = 6,
    /// 1 while the child holds as many connections as its open-file limit allows and
    /// accepts no more (a gauge; `crate::mpm::open_files`): summed, the children at their
    /// limit.
    AtFileLimit = 7,
    /// Connections parked while their request head arrives (a gauge; `park`).
    ParkedHeads = 8,
}

impl Counter {
    /// The gauges: values now, counted for live children only, rather than totals.
    const GAUGES: [Counter; 4] = [
        Counter::IdleWorkers,
        Counter::Parked,
        Counter::AtFileLimit,
        Counter::ParkedHeads,
    ];

    fn is_gauge(i: usize) -> bool {
        Counter::GAUGES.iter().any(|&c| c as usize == i)
    }
}

/// Maps the rows if this process has none yet (the parent, before it forks).
pub fn ensure_rows(token: SingleThreaded, r: Retained, slots: c_int) {
    if r.shared_rows().is_none() {
        if let Some(rows) = SharedRows::map(token, slots.max(1) as usize) {
            r.set_shared_rows(token, rows);
        }
    }
}

/// One child's counters: its own (for its exit line) and its slot's shared row.
#[derive(Debug)]
pub struct ChildCounters {
    own: [AtomicU64; COUNTERS],
    row: Option<&'static Row>,
}

impl ChildCounters {
    /// Counters for the child in `slot` (its gauges are `crate::mpm::row_counts`').
    pub fn for_slot(slot: c_int) -> ChildCounters {
        let rows = Retained::lookup().and_then(|r| r.shared_rows());
        ChildCounters {
            own: Default::default(),
            row: rows
                .filter(|r| (slot as usize) < r.slots())
                .map(|r| r.row(slot as usize)),
        }
    }

    /// Adds `n` to `c` (a total, not a gauge).
    pub fn add(&self, c: Counter, n: u64) {
        debug_assert!(!Counter::is_gauge(c as usize));
        // Relaxed: statistics (module doc).
        self.own[c as usize].fetch_add(n, Ordering::Relaxed);
        if let Some(row) = self.row {
            row[c as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Takes back `n` of `c` (an event counted ahead that did not happen).
    pub fn remove(&self, c: Counter, n: u64) {
        // Relaxed: statistics (module doc).
        self.own[c as usize].fetch_sub(n, Ordering::Relaxed);
        if let Some(row) = self.row {
            row[c as usize].fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// This child's own count of `c`.
    pub fn own(&self, c: Counter) -> u64 {
        // Relaxed: statistics (module doc).
        self.own[c as usize].load(Ordering::Relaxed)
    }
}

/// The server-wide figures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Sums of every row's counters (gauges: of the rows of live children only).
    pub sums: [u64; COUNTERS],
    /// Live children that have a row.
    pub children: u64,
    /// Per live child: (slot, its row).
    pub per_child: Vec<(usize, [u64; COUNTERS])>,
}

/// Adds up `rows`: totals over every row, gauges and per-child detail over the rows
/// whose slot `live` says holds a running child.
pub fn total(rows: &[[u64; COUNTERS]], live: impl Fn(usize) -> bool) -> Totals {
    let mut t = Totals::default();
    for (slot, row) in rows.iter().enumerate() {
        let alive = live(slot);
        for (i, v) in row.iter().enumerate() {
            if !Counter::is_gauge(i) || alive {
                t.sums[i] += v;
            }
        }
        if alive {
            t.children += 1;
            t.per_child.push((slot, *row));
        }
    }
    t
}

/// `RWorkerWakesPerHandoff`: wakes per hand-off with three decimals (0 without hand-offs).
fn per_handoff(t: &Totals) -> String {
    let h = t.sums[Counter::Handoffs as usize];
    let w = t.sums[Counter::FutexWakes as usize];
    if h == 0 {
        "0.000".into()
    } else {
        format!("{:.3}", w as f64 / h as f64)
    }
}

/// The `?auto` lines (`Key: value`, keys without spaces).
pub fn auto_lines(t: &Totals, extended: bool) -> String {
    const NAMES: [&str; COUNTERS] = [
        "Connections",
        "Handoffs",
        "FutexWakes",
        "PoolsReused",
        "PoolsCreated",
        "IdleWorkers",
        "Parked",
        "AtFileLimit",
        "ParkedHeads",
    ];
    let mut s = String::new();
    for (name, v) in NAMES.iter().zip(t.sums) {
        s.push_str(&format!("RWorker{name}: {v}\n"));
    }
    s.push_str(&format!("RWorkerWakesPerHandoff: {}\n", per_handoff(t)));
    s.push_str(&format!("RWorkerChildren: {}\n", t.children));
    if extended {
        for (slot, row) in &t.per_child {
            for (name, v) in NAMES.iter().zip(row) {
                s.push_str(&format!("RWorkerChild[{slot}]{name}: {v}\n"));
            }
        }
    }
    s
}

/// The HTML section of the normal page.
pub fn html(t: &Totals) -> String {
    let c = |k: Counter| t.sums[k as usize];
    format!(
        "<hr /><h2>rworker</h2>\n<dl>\n\
         <dt>Connections accepted: {}, handed to workers: {}</dt>\n\
         <dt>Futex wakes: {} ({} per hand-off)</dt>\n\
         <dt>Transaction pools reused: {}, created: {}</dt>\n\
         <dt>Idle workers: {} in {} children; connections parked: {}, of them reading a request head: {}</dt>\n\
         <dt>Children at their open-file limit: {}</dt>\n</dl>\n",
        c(Counter::Connections),
        c(Counter::Handoffs),
        c(Counter::FutexWakes),
        per_handoff(t),
        c(Counter::PoolsReused),
        c(Counter::PoolsCreated),
        c(Counter::IdleWorkers),
        t.children,
        c(Counter::Parked),
        c(Counter::ParkedHeads),
        c(Counter::AtFileLimit)
    )
}

/// mod_status's hook: adds rworker's figures to the report.
pub fn render(out: &mut Output, flags: Flags) {
    let Some(rows) = Retained::lookup().and_then(|r| r.shared_rows()) else {
        return;
    };
    let snapshot: Vec<[u64; COUNTERS]> = (0..rows.slots())
        .map(|i| {
            let row = rows.row(i);
            // Relaxed: statistics (module doc).
            std::array::from_fn(|k| row[k].load(Ordering::Relaxed))
        })
        .collect();
    let t = total(&snapshot, |slot| {
        let p = scoreboard::process(slot as c_int);
        p.pid != 0 && !p.quiescing
    });
    if flags.short {
        out.put(&auto_lines(&t, flags.extended));
    } else {
        out.put(&html(&t));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_count_every_row_and_gauges_of_live_children_only() {
        let rows = [
            [10, 10, 9, 7, 3, 4, 1, 1, 1],
            [5, 5, 6, 5, 0, 2, 0, 0, 0],
            [100, 100, 80, 99, 1, 25, 9, 1, 7],
        ];
        let t = total(&rows, |slot| slot != 2);
        assert_eq!(t.sums, [115, 115, 95, 111, 4, 6, 1, 1, 1]);
        assert_eq!(t.children, 2);
        assert_eq!(
            t.per_child.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            vec![0, 1]
        );
    }

    #[test]
    fn auto_lines_have_keys_without_spaces_and_the_ratio() {
        let t = total(&[[4, 4, 3, 2, 2, 1, 0, 0, 0], [0; COUNTERS]], |_| true);
        let text = auto_lines(&t, true);
        for line in text.lines() {
            let (k, v) = line.split_once(": ").expect("Key: value");
            assert!(!k.contains(' ') && !k.contains(':'), "{line}");
            assert!(!v.is_empty(), "{line}");
        }
        assert!(text.contains("RWorkerHandoffs: 4\n"));
        assert!(text.contains("RWorkerWakesPerHandoff: 0.750\n"));
        assert!(text.contains("RWorkerChildren: 2\n"));
        assert!(text.contains("RWorkerChild[1]PoolsCreated: 0\n"));
        assert!(!auto_lines(&t, false).contains("RWorkerChild["));
        assert!(auto_lines(&Totals::default(), false).contains("RWorkerWakesPerHandoff: 0.000\n"));
    }
}
