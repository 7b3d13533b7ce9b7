//! The matrix and its driver: cells × MPMs × repetitions, interleaved so that machine drift
//! falls on every MPM alike, with a progress line per run.

use crate::client::{self, WrkResult};
use crate::error::{Error, Result};
use crate::mpm::{Modules, MpmKind};
use crate::options::{ConnMode, Options};
use crate::procstat::{self, TreeSample};
use crate::server::{payload_path, Server};
use crate::shutdown;
use crate::status::{self, RworkerCounters};
use crate::tls::Certificate;
use std::time::Instant;

/// One point of the load space: over TLS or not, how connections are used, what file, how
/// many clients. A run's cells are all TLS or all plain (`--tls`); the field keeps the two
/// apart wherever cells are tabled, charted or read back from a CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cell {
    /// HTTPS (`--tls`) rather than plain HTTP.
    pub tls: bool,
    /// Keep-alive or one request per connection.
    pub mode: ConnMode,
    /// Payload size in bytes.
    pub size: u64,
    /// Concurrent connections.
    pub clients: u32,
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{} {} B c={}",
            if self.tls { "TLS " } else { "" },
            self.mode.label(),
            self.size,
            self.clients
        )
    }
}

/// The measurements of one run (one MPM, one cell, one repetition).
#[derive(Clone, Debug)]
pub struct Sample {
    /// Which MPM.
    pub mpm: MpmKind,
    /// Which cell.
    pub cell: Cell,
    /// Repetition, from 1.
    pub rep: u32,
    /// What wrk reported (req/s, latency, errors, its own CPU).
    pub wrk: WrkResult,
    /// Wall-clock seconds between the two process-tree readings.
    pub wall_s: f64,
    /// CPU seconds of all httpd processes during the run.
    pub httpd_cpu_s: f64,
    /// Voluntary context switches of all httpd threads during the run.
    pub vcsw: u64,
    /// Involuntary context switches of all httpd threads during the run.
    pub nvcsw: u64,
    /// Children that appeared or disappeared during the run (0: the set was stable).
    pub churn: usize,
    /// Host-wide CPU busy % during the run (other load on the machine shows here).
    pub host_busy_pct: f64,
    /// 1-minute load average at the end of the run.
    pub load1: f64,
    /// Why this run counts as failed (non-2xx, socket errors), if it does.
    pub failure: Option<String>,
    /// rworker's `RWorkerHandoffs` / `RWorkerFutexWakes` deltas over the run, from
    /// `server-status?auto` read before and after it (the second reading's own hand-off taken
    /// off); `None` for the stock MPMs, which publish no such keys.
    pub rworker: Option<RworkerCounters>,
}

impl Sample {
    fn per_req(&self, x: f64) -> f64 {
        if self.wrk.requests == 0 {
            f64::NAN
        } else {
            x / self.wrk.requests as f64
        }
    }
    /// httpd CPU microseconds per request.
    pub fn cpu_us_per_req(&self) -> f64 {
        self.per_req(self.httpd_cpu_s * 1e6)
    }
    /// httpd voluntary context switches per request.
    pub fn vcsw_per_req(&self) -> f64 {
        self.per_req(self.vcsw as f64)
    }
    /// wrk CPU microseconds per request.
    pub fn client_cpu_us_per_req(&self) -> f64 {
        self.per_req(self.wrk.client_cpu_s * 1e6)
    }
    /// rworker's futex wakes per hand-off during the run (NaN for the stock MPMs).
    pub fn wakes_per_handoff(&self) -> f64 {
        self.rworker
            .as_ref()
            .map_or(f64::NAN, RworkerCounters::wakes_per_handoff)
    }
    /// httpd CPU as % of one core.
    pub fn httpd_cpu_pct(&self) -> f64 {
        if self.wall_s > 0.0 {
            100.0 * self.httpd_cpu_s / self.wall_s
        } else {
            f64::NAN
        }
    }
}

/// What a whole matrix run produced.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Every run, in the order it ran.
    pub samples: Vec<Sample>,
    /// Runs that had non-2xx responses or socket errors (also in `samples[..].failure`).
    pub failures: Vec<String>,
    /// warn/error lines from the servers' error logs.
    pub warnings: Vec<String>,
    /// One line per server start: what was verified (ServerMPM, queue kind).
    pub verified: Vec<String>,
    /// Wall-clock seconds for the whole matrix.
    pub elapsed_s: f64,
}

/// The matrix to run, from [`Options`].
#[derive(Clone, Debug)]
pub struct Plan {
    /// The options it was built from.
    pub opts: Options,
    /// Cells in the order each server runs them.
    pub cells: Vec<Cell>,
}

/// Seconds a server start, its checks and its stop take, roughly (for the estimate).
const SERVER_OVERHEAD_S: f64 = 3.0;
/// Seconds between two runs (readings, wrk start-up), roughly.
const RUN_OVERHEAD_S: f64 = 0.3;

/// `m:ss` of a number of seconds.
pub fn mmss(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    format!("{}:{:02}", s / 60, s % 60)
}

impl Plan {
    /// The cells: every mode × size × that mode's clients ([`Options::clients_for`]), all
    /// over TLS with `--tls`.
    pub fn new(opts: Options) -> Plan {
        let mut cells = Vec::new();
        for &mode in &opts.modes {
            for &size in &opts.sizes {
                for &clients in opts.clients_for(mode) {
                    cells.push(Cell {
                        tls: opts.tls,
                        mode,
                        size,
                        clients,
                    });
                }
            }
        }
        Plan { opts, cells }
    }

    /// Number of load runs (not counting warm-ups).
    pub fn total_runs(&self) -> usize {
        self.cells.len() * self.opts.mpms.len() * self.opts.reps as usize
    }

    /// Rough wall-clock estimate of the whole matrix, in seconds.
    pub fn estimated_secs(&self) -> f64 {
        let servers = (self.opts.mpms.len() * self.opts.reps as usize) as f64;
        servers * (SERVER_OVERHEAD_S + self.opts.warmup as f64)
            + self.total_runs() as f64 * (self.opts.duration as f64 + RUN_OVERHEAD_S)
    }

    /// The MPM order of repetition `rep` (from 0): rotated by one each repetition, so no MPM
    /// always runs first (right after a build) or last.
    pub fn order(&self, rep: u32) -> Vec<MpmKind> {
        crate::mpm::rotated(&self.opts.mpms, rep)
    }

    /// Runs the matrix. `progress` gets one line per run and per server start. A server that
    /// does not start, is not the MPM it should be, or crashes aborts the matrix (`Err`);
    /// non-2xx responses and socket errors mark the run failed and the matrix goes on.
    /// `modules` has the module copies the kinds load (rworker's, the baseline's,
    /// worker-aa's); `tls` the run's certificate, which `--tls` needs.
    pub fn run(
        &self,
        modules: &Modules,
        tls: Option<&Certificate>,
        mut progress: impl FnMut(&str),
    ) -> Result<Outcome> {
        let o = &self.opts;
        if o.tls != tls.is_some() {
            return Err(Error(format!(
                "--tls is {}, but the run {} a certificate",
                if o.tls { "on" } else { "off" },
                if tls.is_some() { "has" } else { "has no" }
            )));
        }
        let tls_dir = tls.map(|c| c.dir.as_path());
        let t0 = Instant::now();
        let total = self.total_runs();
        let estimate = self.estimated_secs();
        let mut out = Outcome::default();
        let mut done = 0usize;
        let largest_clients = self.cells.iter().map(|c| c.clients).max().unwrap_or(50);
        for rep in 0..o.reps {
            for mpm in self.order(rep) {
                if shutdown::interrupted() {
                    return Err(Error("interrupted".into()));
                }
                let mut overrides = match (o.max_workers, o.debian_sizing) {
                    (Some(n), _) => worker_limit(n),
                    (None, true) => debian_sizing(),
                    (None, false) => Vec::new(),
                };
                if let Some(n) = o.max_connections_per_child {
                    overrides.push(("MaxConnectionsPerChild", n.to_string()));
                }
                let so = modules.for_kind(mpm)?;
                let (mut server, what) =
                    Server::start_with(mpm, &o.sizes, so, &overrides, tls_dir)?;
                let line = format!(
                    "rep {}/{} {mpm}: started pid {} on port {} (ServerRoot {}); verified {what}",
                    rep + 1,
                    o.reps,
                    server.parent,
                    server.port,
                    server.root.display()
                );
                progress(&line);
                out.verified.push(line);
                if o.warmup > 0 {
                    let path = o.path.clone().unwrap_or_else(|| payload_path(o.sizes[0]));
                    let log = server.root.join("logs/wrk-warmup.txt");
                    client::run_wrk(
                        &server.url(&path),
                        ConnMode::KeepAlive,
                        largest_clients.min(100),
                        o.threads,
                        o.warmup,
                        &log,
                    )?;
                }
                for &cell in &self.cells {
                    let s = self.run_cell(&server, mpm, cell, rep + 1)?;
                    done += 1;
                    let mut line = format!(
                        "[{done:>4}/{total} {} / ~{}] rep {}/{} {:<14} {:<26} {:>9.0} req/s  {:>7.1} µs CPU/req  p99 {:>8.0} µs",
                        mmss(t0.elapsed().as_secs_f64()),
                        mmss(estimate),
                        rep + 1,
                        o.reps,
                        mpm.label(),
                        cell.to_string(),
                        s.wrk.rps,
                        s.cpu_us_per_req(),
                        s.wrk.p99_us,
                    );
                    if let Some(r) = &s.rworker {
                        line.push_str(&format!(
                            "  {:.3} futex wakes/hand-off",
                            r.wakes_per_handoff()
                        ));
                    }
                    if s.churn > 0 {
                        line.push_str(&format!("  (child churn {})", s.churn));
                    }
                    if let Some(f) = &s.failure {
                        line.push_str(&format!("  FAIL: {f}"));
                        out.failures
                            .push(format!("rep {} {mpm} {cell}: {f}", rep + 1));
                    }
                    progress(&line);
                    out.samples.push(s);
                    // A crash ends the matrix at once, with the log lines.
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

    fn run_cell(&self, server: &Server, mpm: MpmKind, cell: Cell, rep: u32) -> Result<Sample> {
        let o = &self.opts;
        let path = o.path.clone().unwrap_or_else(|| payload_path(cell.size));
        let log = server.root.join(format!(
            "logs/wrk-{}-{}-{}-{rep}.txt",
            cell.mode.label(),
            cell.size,
            cell.clients
        ));
        let tick = procstat::clock_ticks_per_sec() as f64;
        // Read before the /proc readings and after them, so its own request is not in them.
        let status0 = status::rworker_counters(server.port, server.tls);
        let host0 = procstat::host_cpu();
        let before: TreeSample = procstat::sample_tree(server.parent);
        let t = Instant::now();
        let wrk = client::run_wrk(
            &server.url(&path),
            cell.mode,
            cell.clients,
            o.threads,
            o.duration,
            &log,
        )?;
        let wall_s = t.elapsed().as_secs_f64();
        let after = procstat::sample_tree(server.parent);
        let host1 = procstat::host_cpu();
        let status1 = status::rworker_counters(server.port, server.tls);
        let rworker = status0.zip(status1).map(|(a, b)| {
            let mut d = b.since(&a);
            // The second status request was itself accepted and handed off.
            d.connections = d.connections.saturating_sub(1);
            d.handoffs = d.handoffs.saturating_sub(1);
            d
        });
        let churn = before
            .children
            .symmetric_difference(&after.children)
            .count();
        let host_total = host1.1.saturating_sub(host0.1).max(1) as f64;
        let mut problems = Vec::new();
        if wrk.requests == 0 {
            problems.push("no request completed".to_string());
        }
        if wrk.non_2xx > 0 {
            problems.push(format!("{} non-2xx responses (GET {path})", wrk.non_2xx));
        }
        if wrk.socket_error_total() > 0 {
            let [c, r, w, t] = wrk.socket_errors;
            problems.push(format!(
                "socket errors: connect {c}, read {r}, write {w}, timeout {t}"
            ));
        }
        Ok(Sample {
            mpm,
            cell,
            rep,
            wall_s,
            httpd_cpu_s: after.cpu_ticks.saturating_sub(before.cpu_ticks) as f64 / tick,
            vcsw: after.vcsw.saturating_sub(before.vcsw),
            nvcsw: after.nvcsw.saturating_sub(before.nvcsw),
            churn,
            host_busy_pct: 100.0 * host1.0.saturating_sub(host0.0) as f64 / host_total,
            load1: procstat::loadavg1(),
            failure: (!problems.is_empty()).then(|| problems.join("; ")),
            rworker,
            wrk,
        })
    }
}

/// Debian's default sizing (its mpm_worker.conf and mpm_event.conf), for every MPM alike.
pub fn debian_sizing() -> Vec<(&'static str, String)> {
    [
        ("StartServers", "2"),
        ("ServerLimit", "16"),
        ("ThreadsPerChild", "25"),
        ("MaxRequestWorkers", "150"),
        ("MinSpareThreads", "25"),
        ("MaxSpareThreads", "75"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .collect()
}

/// What `--max-workers n` changes in `common.conf`, for every MPM alike: `n / 25` children
/// of 25 threads, all started; idle maintenance neither forks nor retires during a run.
pub fn worker_limit(n: u32) -> Vec<(&'static str, String)> {
    let children = (n / 25).max(1).to_string();
    vec![
        ("StartServers", children.clone()),
        ("ServerLimit", children),
        ("ThreadsPerChild", "25".into()),
        ("MaxRequestWorkers", n.to_string()),
        ("MinSpareThreads", "25".into()),
        ("MaxSpareThreads", n.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn cells_take_each_modes_own_clients() {
        let o = Options::parse(&args(
            "--sizes 1 --modes keepalive,close --keepalive-clients 50,100,400 \
             --close-clients 100,400 --mpms worker,worker-aa,event,rworker,rworker-thread \
             --reps 5",
        ))
        .expect("parse");
        let plan = Plan::new(o);
        let cells: Vec<String> = plan.cells.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            cells,
            [
                "keepalive 1 B c=50",
                "keepalive 1 B c=100",
                "keepalive 1 B c=400",
                "close 1 B c=100",
                "close 1 B c=400"
            ]
        );
        assert_eq!(plan.total_runs(), 5 * 5 * 5);
        // Without per-mode lists: the full product, as before.
        let plan = Plan::new(Options::parse(&args("--sizes 1 --clients 50,100")).expect("parse"));
        assert_eq!(plan.cells.len(), 4);
        assert!(plan.cells.iter().all(|c| !c.tls));
    }

    #[test]
    fn tls_marks_every_cell() {
        let o = Options::parse(&args(
            "--tls --sizes 1 --keepalive-clients 50,400 --close-clients 50",
        ))
        .expect("parse");
        let plan = Plan::new(o);
        let cells: Vec<String> = plan.cells.iter().map(|c| c.to_string()).collect();
        assert_eq!(
            cells,
            [
                "TLS keepalive 1 B c=50",
                "TLS keepalive 1 B c=400",
                "TLS close 1 B c=50"
            ]
        );
        // The same cell over TLS and over plain HTTP are two cells.
        let plain = Cell {
            tls: false,
            ..plan.cells[0]
        };
        assert_ne!(plain, plan.cells[0]);
        // The certificate and the option go together.
        let modules = Modules {
            rworker: "/nonexistent.so".into(),
            baseline: None,
            worker_aa: None,
        };
        let err = plan
            .run(&modules, None, |_| {})
            .expect_err("--tls without a certificate");
        assert!(err.0.contains("--tls is on"), "{}", err.0);
    }
}
