//! From samples to what a person reads: medians and ranges per cell and MPM, the
//! rworker / stock-worker and rworker / rworker-apr ratios, a Markdown table and CSVs.

use crate::mpm::MpmKind;
use crate::plan::{Cell, Outcome, Plan, Sample};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Median, minimum and maximum of a set of runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Stat {
    /// `None` for an empty set; NaNs are left out.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Stat> {
        let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// The runs of one MPM in one cell, summarised.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Runs summarised.
    pub n: usize,
    /// Requests per second.
    pub rps: Stat,
    /// p50 latency, µs.
    pub p50_us: Stat,
    /// p99 latency, µs.
    pub p99_us: Stat,
    /// httpd CPU µs per request.
    pub cpu_us: Stat,
    /// httpd CPU, % of one core.
    pub cpu_pct: Stat,
    /// httpd voluntary context switches per request.
    pub vcsw: Stat,
    /// wrk CPU µs per request.
    pub client_cpu_us: Stat,
    /// rworker's futex wakes per hand-off (`RWorkerFutexWakes` / `RWorkerHandoffs` deltas of
    /// each run); `None` for the stock MPMs.
    pub wakes_per_handoff: Option<Stat>,
    /// Non-2xx responses plus socket errors, all runs together.
    pub errors: u64,
    /// Child processes that came or went during runs, all runs together.
    pub churn: usize,
}

/// Summaries keyed by cell, then MPM.
pub type Table = BTreeMap<Cell, BTreeMap<MpmKind, Summary>>;

/// Groups the samples by cell and MPM and summarises each group.
pub fn summarise(samples: &[Sample]) -> Table {
    let mut groups: BTreeMap<Cell, BTreeMap<MpmKind, Vec<&Sample>>> = BTreeMap::new();
    for s in samples {
        groups
            .entry(s.cell)
            .or_default()
            .entry(s.mpm)
            .or_default()
            .push(s);
    }
    let mut t = Table::new();
    for (cell, by_mpm) in groups {
        for (mpm, runs) in by_mpm {
            let stat = |f: &dyn Fn(&Sample) -> f64| {
                Stat::of(runs.iter().map(|s| f(s))).unwrap_or(Stat {
                    median: f64::NAN,
                    min: f64::NAN,
                    max: f64::NAN,
                })
            };
            let summary = Summary {
                n: runs.len(),
                rps: stat(&|s| s.wrk.rps),
                p50_us: stat(&|s| s.wrk.p50_us),
                p99_us: stat(&|s| s.wrk.p99_us),
                cpu_us: stat(&|s| s.cpu_us_per_req()),
                cpu_pct: stat(&|s| s.httpd_cpu_pct()),
                vcsw: stat(&|s| s.vcsw_per_req()),
                client_cpu_us: stat(&|s| s.client_cpu_us_per_req()),
                wakes_per_handoff: Stat::of(runs.iter().map(|s| s.wakes_per_handoff())),
                errors: runs
                    .iter()
                    .map(|s| s.wrk.non_2xx + s.wrk.socket_error_total())
                    .sum(),
                churn: runs.iter().map(|s| s.churn).sum(),
            };
            t.entry(cell).or_default().insert(mpm, summary);
        }
    }
    t
}

/// Ratio of medians `a / b` of one metric, if both MPMs ran in the cell.
pub fn ratio(
    row: &BTreeMap<MpmKind, Summary>,
    a: MpmKind,
    b: MpmKind,
    metric: fn(&Summary) -> Stat,
) -> Option<f64> {
    let (x, y) = (metric(row.get(&a)?).median, metric(row.get(&b)?).median);
    (y > 0.0 && x.is_finite()).then(|| x / y)
}

/// Per-repetition ratios `a / b` of one metric in each cell where both MPMs ran: the
/// median and range over the repetitions in which both have a run. Pairing by repetition
/// takes out what moves every MPM of a repetition alike (other jobs on the host, a slow
/// stretch of the VM), which a ratio of medians mixes across repetitions.
pub fn paired(
    samples: &[Sample],
    a: MpmKind,
    b: MpmKind,
    metric: fn(&Sample) -> f64,
) -> BTreeMap<Cell, Stat> {
    let mut runs: BTreeMap<(Cell, u32), (Option<f64>, Option<f64>)> = BTreeMap::new();
    for s in samples {
        let e = runs.entry((s.cell, s.rep)).or_default();
        if s.mpm == a {
            e.0 = Some(metric(s));
        } else if s.mpm == b {
            e.1 = Some(metric(s));
        }
    }
    let mut ratios: BTreeMap<Cell, Vec<f64>> = BTreeMap::new();
    for ((cell, _), pair) in runs {
        if let (Some(x), Some(y)) = pair {
            if y > 0.0 && x.is_finite() {
                ratios.entry(cell).or_default().push(x / y);
            }
        }
    }
    ratios
        .into_iter()
        .filter_map(|(cell, v)| Some((cell, Stat::of(v)?)))
        .collect()
}

/// The paired-ratio table of every rworker variant in the run against the stock worker,
/// and of rworker-park against its baseline build when both ran.
pub fn paired_section(m: &mut String, samples: &[Sample], mpms: &[MpmKind]) {
    let ran = |k: &MpmKind| mpms.contains(k);
    let mut pairs: Vec<(MpmKind, MpmKind)> = Vec::new();
    if ran(&MpmKind::Worker) {
        pairs.extend(
            MpmKind::ALL
                .into_iter()
                .filter(|k| k.is_rworker() && ran(k))
                .map(|k| (k, MpmKind::Worker)),
        );
    }
    if ran(&MpmKind::RworkerPark) && ran(&MpmKind::RworkerParkBase) {
        pairs.push((MpmKind::RworkerPark, MpmKind::RworkerParkBase));
    }
    if pairs.is_empty() {
        return;
    }
    let _ = writeln!(
        m,
        "## Paired by repetition: median (min–max) of each repetition's ratio\n"
    );
    let _ = writeln!(
        m,
        "Each repetition runs every MPM once (order rotated), so a ratio taken within a \
         repetition leaves out what slowed or sped up that whole repetition; the ratios of \
         medians above mix repetitions. Target as above; **bold** = the median ratio misses \
         it.\n"
    );
    let rps: fn(&Sample) -> f64 = |s| s.wrk.rps;
    let cpu: fn(&Sample) -> f64 = Sample::cpu_us_per_req;
    let mut head = String::from("| cell |");
    let mut rule = String::from("|---|");
    let mut cols = Vec::new();
    for &(a, b) in &pairs {
        let _ = write!(head, " {a}/{b} req/s | {a}/{b} CPU/req |");
        rule.push_str("---:|---:|");
        cols.push((paired(samples, a, b, rps), paired(samples, a, b, cpu)));
    }
    let _ = writeln!(m, "{head}\n{rule}");
    let cells: std::collections::BTreeSet<Cell> = samples.iter().map(|s| s.cell).collect();
    for cell in cells {
        let mut row = format!("| {} |", cell_label(&cell));
        for (r, c) in &cols {
            for (stat, higher) in [(r.get(&cell), true), (c.get(&cell), false)] {
                let text = stat.map_or("–".into(), |s| {
                    let missed = if higher {
                        s.median < 1.0
                    } else {
                        s.median > 1.0
                    };
                    let med = format!("{:.2}x", s.median);
                    let med = if missed { format!("**{med}**") } else { med };
                    format!("{med} ({:.2}–{:.2})", s.min, s.max)
                });
                let _ = write!(row, " {text} |");
            }
        }
        let _ = writeln!(m, "{row}");
    }
    m.push('\n');
}

fn size_label(size: u64) -> String {
    match size {
        s if s >= 1024 && s % 1024 == 0 => format!("{} KiB", s / 1024),
        s => format!("{s} B"),
    }
}

/// Short human label of a cell: `keepalive 4 KiB c=50`.
pub fn cell_label(c: &Cell) -> String {
    format!("{} {} c={}", c.mode.label(), size_label(c.size), c.clients)
}

fn f(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "–".into()
    }
}

fn range(s: &Stat, decimals: usize) -> String {
    format!(
        "{} ({}–{})",
        f(s.median, decimals),
        f(s.min, decimals),
        f(s.max, decimals)
    )
}

fn ratio_cell(r: Option<f64>, higher_is_better: bool) -> String {
    match r {
        Some(r) => {
            let miss = if higher_is_better { r < 1.0 } else { r > 1.0 };
            format!("{}{r:.2}x", if miss { "**" } else { "" }) + if miss { "**" } else { "" }
        }
        None => "–".into(),
    }
}

/// The Markdown report: header, the rworker-vs-reference ratio table, the full table, and
/// every failure, warning and verification line.
pub fn markdown(plan: &Plan, out: &Outcome, machine: &str) -> String {
    let o = &plan.opts;
    let table = summarise(&out.samples);
    let mut m = String::new();
    let _ = writeln!(m, "# rworker A/B benchmark\n");
    let _ = writeln!(
        m,
        "Command (from the repository root):\n\n```sh\n{}\n```\n",
        o.command_line
    );
    let _ = writeln!(m, "Machine:\n\n```\n{}\n```\n", machine.trim());
    let host_busy = Stat::of(out.samples.iter().map(|s| s.host_busy_pct));
    let load = Stat::of(out.samples.iter().map(|s| s.load1));
    let _ = writeln!(
        m,
        "{} runs of {} s each ({} repetitions, MPM order rotated each repetition), wrk -t{} \
         --latency, {} s warm-up per server start; {} in all. Host CPU busy during runs: median \
         {}% ({}–{}%), 1-min load average {} ({}–{}): other jobs share this machine, which is \
         what the interleaving and medians are for.\n",
        out.samples.len(),
        o.duration,
        o.reps,
        o.threads,
        o.warmup,
        crate::plan::mmss(out.elapsed_s),
        host_busy.map_or("–".into(), |s| f(s.median, 0)),
        host_busy.map_or("–".into(), |s| f(s.min, 0)),
        host_busy.map_or("–".into(), |s| f(s.max, 0)),
        load.map_or("–".into(), |s| f(s.median, 1)),
        load.map_or("–".into(), |s| f(s.min, 1)),
        load.map_or("–".into(), |s| f(s.max, 1)),
    );
    let list = |v: Vec<(&str, String)>| {
        v.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sizing = match (o.max_workers, o.debian_sizing) {
        (Some(n), _) => format!(
            "`--max-workers {n}` ({}): every child started, so idle maintenance neither forks \
             nor retires",
            list(crate::plan::worker_limit(n))
        ),
        (None, true) => format!(
            "Debian's default sizing (`--debian-sizing`: {}), so idle maintenance forks and \
             retires children during the runs (the child churn column)",
            list(crate::plan::debian_sizing())
        ),
        (None, false) => "10 children × 50 threads fixed (StartServers 10, \
             MaxRequestWorkers 500, spare limits that neither fork nor retire)"
            .to_string(),
    };
    let sizing = match o.max_connections_per_child {
        Some(n) => format!(
            "{sizing}; MaxConnectionsPerChild {n} (`--max-connections-per-child`), so \
             children retire and are replaced throughout the runs"
        ),
        None => sizing,
    };
    let _ = writeln!(
        m,
        "Config: `apache-conf/ab/` (identical but for the MPM's LoadModule line): {sizing}, \
         KeepAlive On (100 requests, 5 s), no access log, 127.0.0.1 only. \
         `close` = wrk with `Connection: close` (one request per connection).\n"
    );
    let (w, r, a) = (MpmKind::Worker, MpmKind::Rworker, MpmKind::RworkerApr);
    let rps = |s: &Summary| s.rps;
    let cpu = |s: &Summary| s.cpu_us;
    let _ = writeln!(
        m,
        "## rworker against the stock worker (ratios of medians)\n"
    );
    let _ = writeln!(m, "Target: req/s ratio ≥ 1.00 and CPU-µs/request ratio ≤ 1.00; **bold** = target missed in that cell.\n");
    let _ = writeln!(m, "| cell | worker req/s | rworker req/s | rworker/worker req/s | worker CPU µs/req | rworker CPU µs/req | rworker/worker CPU/req | rworker/rworker-apr req/s | rworker/rworker-apr CPU/req | rworker futex wakes/hand-off |");
    let _ = writeln!(m, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut missed = Vec::new();
    for (cell, row) in &table {
        let med = |k: MpmKind, g: fn(&Summary) -> Stat, d| {
            row.get(&k).map_or("–".into(), |s| f(g(s).median, d))
        };
        let rr = ratio(row, r, w, rps);
        let rc = ratio(row, r, w, cpu);
        if rr.is_some_and(|x| x < 1.0) || rc.is_some_and(|x| x > 1.0) {
            missed.push(cell_label(cell));
        }
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            cell_label(cell),
            med(w, rps, 0),
            med(r, rps, 0),
            ratio_cell(rr, true),
            med(w, cpu, 1),
            med(r, cpu, 1),
            ratio_cell(rc, false),
            ratio_cell(ratio(row, r, a, rps), true),
            ratio_cell(ratio(row, r, a, cpu), false),
            row.get(&r)
                .and_then(|s| s.wakes_per_handoff)
                .map_or("–".into(), |w| f(w.median, 3)),
        );
    }
    if o.mpms.contains(&w) && o.mpms.contains(&r) {
        if missed.is_empty() {
            let _ = writeln!(m, "\nTarget met in every cell.\n");
        } else {
            let _ = writeln!(
                m,
                "\nTarget missed in {} of {} cells: {}.\n",
                missed.len(),
                table.len(),
                missed.join("; ")
            );
        }
    }
    paired_section(&mut m, &out.samples, &o.mpms);
    let _ = writeln!(m, "## All MPMs: median (min–max) over repetitions\n");
    let _ = writeln!(m, "| cell | MPM | req/s | p50 ms | p99 ms | httpd CPU µs/req | httpd %CPU | httpd vol. ctx sw/req | rworker futex wakes/hand-off | wrk CPU µs/req | errors | child churn |");
    let _ = writeln!(
        m,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (cell, row) in &table {
        for (mpm, s) in row {
            let ms = |st: Stat| Stat {
                median: st.median / 1e3,
                min: st.min / 1e3,
                max: st.max / 1e3,
            };
            let _ = writeln!(
                m,
                "| {} | {mpm} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                cell_label(cell),
                range(&s.rps, 0),
                f(ms(s.p50_us).median, 2),
                f(ms(s.p99_us).median, 2),
                range(&s.cpu_us, 1),
                f(s.cpu_pct.median, 0),
                f(s.vcsw.median, 2),
                s.wakes_per_handoff
                    .as_ref()
                    .map_or("–".into(), |w| range(w, 3)),
                f(s.client_cpu_us.median, 1),
                s.errors,
                s.churn,
            );
        }
    }
    let _ = writeln!(m, "\nhttpd CPU = utime+stime of the parent and every child from /proc/<pid>/stat (plus the parent's cutime+cstime for reaped children), before/after each run; context switches = voluntary_ctxt_switches over /proc/<pid>/task/*/status; futex wakes/hand-off = rworker's RWorkerFutexWakes / RWorkerHandoffs from server-status?auto, read before and after each run (the stock MPMs publish no such keys: –); wrk CPU from wait4(2) rusage. Per-run values are in results.csv, medians in summary.csv, chart.svg plots req/s and CPU µs/request.\n");
    let _ = writeln!(m, "## Failures\n");
    if out.failures.is_empty() {
        let _ = writeln!(m, "None: no non-2xx response, no socket error, no crash.\n");
    } else {
        for l in &out.failures {
            let _ = writeln!(m, "- {l}");
        }
        m.push('\n');
        if out
            .failures
            .iter()
            .any(|l| l.contains(" event keepalive") && l.contains("read "))
        {
            let _ = writeln!(
                m,
                "A `read` socket error under keep-alive is the server closing a keep-alive \
                 connection while wrk is sending its next request on it. The stock event MPM \
                 does this by design when a child has no idle worker (it closes its idle \
                 keep-alive connections to free workers; with 400 connections accept() spreads \
                 them unevenly over the children); the worker-model MPMs keep a thread per \
                 connection and do not.\n"
            );
        }
    }
    let _ = writeln!(m, "## Error-log warnings\n");
    if out.warnings.is_empty() {
        let _ = writeln!(m, "None.\n");
    } else {
        let _ = writeln!(m, "```");
        for l in &out.warnings {
            let _ = writeln!(m, "{l}");
        }
        let _ = writeln!(m, "```\n");
    }
    let _ = writeln!(m, "## Servers started and what was verified\n\n```");
    for l in &out.verified {
        let _ = writeln!(m, "{l}");
    }
    let _ = writeln!(m, "```");
    m
}

/// One CSV row per run.
pub fn samples_csv(samples: &[Sample]) -> String {
    let mut c = String::from(
        "mpm,mode,size_bytes,clients,rep,requests,req_per_s,p50_us,p99_us,non_2xx,sock_connect,sock_read,sock_write,sock_timeout,wall_s,httpd_cpu_s,httpd_cpu_us_per_req,httpd_cpu_pct,vcsw,nvcsw,vcsw_per_req,wrk_cpu_s,wrk_cpu_us_per_req,child_churn,host_busy_pct,load1,failure,rworker_handoffs,rworker_futex_wakes,rworker_wakes_per_handoff\n",
    );
    for s in samples {
        let rw = s.rworker.as_ref().map_or(",,".into(), |r| {
            format!(
                "{},{},{:.4}",
                r.handoffs,
                r.futex_wakes,
                r.wakes_per_handoff()
            )
        });
        let e = s.wrk.socket_errors;
        let _ = writeln!(
            c,
            "{},{},{},{},{},{},{:.2},{:.1},{:.1},{},{},{},{},{},{:.3},{:.3},{:.2},{:.1},{},{},{:.3},{:.3},{:.2},{},{:.1},{:.2},{},{}",
            s.mpm,
            s.cell.mode.label(),
            s.cell.size,
            s.cell.clients,
            s.rep,
            s.wrk.requests,
            s.wrk.rps,
            s.wrk.p50_us,
            s.wrk.p99_us,
            s.wrk.non_2xx,
            e[0],
            e[1],
            e[2],
            e[3],
            s.wall_s,
            s.httpd_cpu_s,
            s.cpu_us_per_req(),
            s.httpd_cpu_pct(),
            s.vcsw,
            s.nvcsw,
            s.vcsw_per_req(),
            s.wrk.client_cpu_s,
            s.client_cpu_us_per_req(),
            s.churn,
            s.host_busy_pct,
            s.load1,
            s.failure.as_deref().unwrap_or("").replace([',', '\n'], ";"),
            rw,
        );
    }
    c
}

/// One CSV row per cell and MPM: medians, ranges and the ratios to the stock worker.
pub fn summary_csv(table: &Table) -> String {
    let mut c = String::from(
        "mode,size_bytes,clients,mpm,runs,req_per_s_median,req_per_s_min,req_per_s_max,p50_us_median,p99_us_median,cpu_us_per_req_median,cpu_us_per_req_min,cpu_us_per_req_max,httpd_cpu_pct_median,vcsw_per_req_median,wrk_cpu_us_per_req_median,errors,child_churn,req_per_s_vs_worker,cpu_per_req_vs_worker,rworker_wakes_per_handoff_median\n",
    );
    for (cell, row) in table {
        for (mpm, s) in row {
            let opt = |r: Option<f64>| r.map_or(String::new(), |r| format!("{r:.3}"));
            let _ = writeln!(
                c,
                "{},{},{},{},{},{:.2},{:.2},{:.2},{:.1},{:.1},{:.2},{:.2},{:.2},{:.1},{:.3},{:.2},{},{},{},{},{}",
                cell.mode.label(),
                cell.size,
                cell.clients,
                mpm,
                s.n,
                s.rps.median,
                s.rps.min,
                s.rps.max,
                s.p50_us.median,
                s.p99_us.median,
                s.cpu_us.median,
                s.cpu_us.min,
                s.cpu_us.max,
                s.cpu_pct.median,
                s.vcsw.median,
                s.client_cpu_us.median,
                s.errors,
                s.churn,
                opt(ratio(row, *mpm, MpmKind::Worker, |s| s.rps)),
                opt(ratio(row, *mpm, MpmKind::Worker, |s| s.cpu_us)),
                s.wakes_per_handoff
                    .map_or(String::new(), |w| format!("{:.4}", w.median)),
            );
        }
    }
    c
}

/// Reads back a `results.csv` written by [`samples_csv`] (for `--replot`).
pub fn samples_from_csv(text: &str) -> crate::Result<Vec<Sample>> {
    use crate::error::Error;
    use crate::plan::Cell;
    let mut lines = text.lines();
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| Error("results.csv is empty".into()))?
        .split(',')
        .collect();
    let col = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or_else(|| Error(format!("results.csv has no column {name:?}")))
    };
    let mut out = Vec::new();
    for (i, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        let get = |name: &str| -> crate::Result<&str> {
            let c = col(name)?;
            f.get(c)
                .copied()
                .ok_or_else(|| Error(format!("results.csv line {}: no {name}", i + 2)))
        };
        let num = |name: &str| -> crate::Result<f64> {
            let v = get(name)?;
            v.parse()
                .map_err(|e| Error(format!("results.csv line {}: {name} {v:?}: {e}", i + 2)))
        };
        let failure = get("failure")?;
        // Older results.csv files have no rworker columns; empty cells: a stock MPM.
        let opt_num = |name: &str| -> Option<u64> { get(name).ok()?.parse().ok() };
        let rworker = match (opt_num("rworker_handoffs"), opt_num("rworker_futex_wakes")) {
            (Some(handoffs), Some(futex_wakes)) => Some(crate::status::RworkerCounters {
                connections: handoffs,
                handoffs,
                futex_wakes,
            }),
            _ => None,
        };
        let wrk = crate::client::WrkResult {
            requests: num("requests")? as u64,
            rps: num("req_per_s")?,
            p50_us: num("p50_us")?,
            p99_us: num("p99_us")?,
            non_2xx: num("non_2xx")? as u64,
            socket_errors: [
                num("sock_connect")? as u64,
                num("sock_read")? as u64,
                num("sock_write")? as u64,
                num("sock_timeout")? as u64,
            ],
            client_cpu_s: num("wrk_cpu_s")?,
            output: String::new(),
        };
        out.push(Sample {
            mpm: get("mpm")?.parse()?,
            cell: Cell {
                mode: get("mode")?.parse()?,
                size: num("size_bytes")? as u64,
                clients: num("clients")? as u32,
            },
            rep: num("rep")? as u32,
            wall_s: num("wall_s")?,
            httpd_cpu_s: num("httpd_cpu_s")?,
            vcsw: num("vcsw")? as u64,
            nvcsw: num("nvcsw")? as u64,
            churn: num("child_churn")? as usize,
            host_busy_pct: num("host_busy_pct")?,
            load1: num("load1")?,
            failure: (!failure.is_empty()).then(|| failure.to_string()),
            rworker,
            wrk,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let s = Stat::of([3.0, 1.0, 2.0]).expect("non-empty");
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        let s = Stat::of([4.0, 1.0, 2.0, f64::NAN, 3.0]).expect("non-empty");
        assert_eq!(s.median, 2.5);
        assert!(Stat::of([]).is_none());
    }

    fn run(mpm: MpmKind, rep: u32, rps: f64, cpu_s: f64) -> Sample {
        Sample {
            mpm,
            cell: Cell {
                mode: crate::options::ConnMode::KeepAlive,
                size: 1,
                clients: 50,
            },
            rep,
            wrk: crate::client::WrkResult {
                requests: (rps * 5.0) as u64,
                rps,
                p50_us: 1.0,
                p99_us: 2.0,
                non_2xx: 0,
                socket_errors: [0; 4],
                client_cpu_s: 1.0,
                output: String::new(),
            },
            wall_s: 5.0,
            httpd_cpu_s: cpu_s,
            vcsw: 0,
            nvcsw: 0,
            churn: 0,
            host_busy_pct: 100.0,
            load1: 1.0,
            failure: None,
            rworker: None,
        }
    }

    #[test]
    fn paired_ratios_are_taken_within_each_repetition() {
        use MpmKind::{RworkerPark as P, Worker as W};
        // Repetition 2 is slow for both MPMs alike; within each repetition P is 10 % faster.
        let samples = [
            run(W, 1, 1000.0, 5.0),
            run(P, 1, 1100.0, 5.0),
            run(W, 2, 500.0, 5.0),
            run(P, 2, 550.0, 5.0),
            run(W, 3, 1000.0, 5.0),
            run(P, 3, 1100.0, 5.0),
            // A repetition that lacks one of the two counts for neither.
            run(P, 4, 10.0, 5.0),
        ];
        let rps = paired(&samples, P, W, |s| s.wrk.rps);
        let s = rps.values().next().expect("one cell");
        assert!(
            (s.median - 1.1).abs() < 1e-9 && (s.min - 1.1).abs() < 1e-9,
            "{s:?}"
        );
        assert!((s.max - 1.1).abs() < 1e-9, "{s:?}");
        // The ratio of medians takes in repetition 4's unpaired run: P's median is 825 (of
        // 10, 550, 1100, 1100), the worker's 1000.
        let t = summarise(&samples);
        let row = t.values().next().expect("one cell");
        let r = ratio(row, P, W, |s| s.rps).expect("both ran");
        assert!((r - 0.825).abs() < 1e-9, "{r}");
        let cpu = paired(&samples, P, W, Sample::cpu_us_per_req);
        let c = cpu.values().next().expect("one cell");
        assert!((c.median - 1.0 / 1.1).abs() < 1e-9, "{c:?}");
        assert!(paired(&samples, P, MpmKind::Event, |s| s.wrk.rps).is_empty());
    }

    #[test]
    fn csv_round_trip() {
        let s = Sample {
            mpm: MpmKind::RworkerApr,
            cell: Cell {
                mode: crate::options::ConnMode::Close,
                size: 4096,
                clients: 100,
            },
            rep: 2,
            wrk: crate::client::WrkResult {
                requests: 1000,
                rps: 200.5,
                p50_us: 10.0,
                p99_us: 99.0,
                non_2xx: 1,
                socket_errors: [0, 2, 0, 0],
                client_cpu_s: 0.5,
                output: String::new(),
            },
            wall_s: 5.0,
            httpd_cpu_s: 0.25,
            vcsw: 300,
            nvcsw: 7,
            churn: 0,
            host_busy_pct: 90.0,
            load1: 3.5,
            failure: Some("1 non-2xx, x".into()),
            rworker: Some(crate::status::RworkerCounters {
                connections: 40,
                handoffs: 40,
                futex_wakes: 10,
            }),
        };
        let back = samples_from_csv(&samples_csv(std::slice::from_ref(&s))).expect("parse back");
        assert_eq!(back.len(), 1);
        let b = &back[0];
        assert_eq!((b.mpm, b.cell, b.rep), (s.mpm, s.cell, s.rep));
        assert_eq!(b.wrk.requests, 1000);
        assert_eq!(b.wrk.socket_errors, [0, 2, 0, 0]);
        assert!((b.cpu_us_per_req() - 250.0).abs() < 1e-9);
        assert_eq!(b.failure.as_deref(), Some("1 non-2xx; x"));
        assert!((b.wakes_per_handoff() - 0.25).abs() < 1e-12);
        // A stock MPM's row (empty rworker cells) and a results.csv from before those columns.
        let stock = Sample {
            rworker: None,
            mpm: MpmKind::Worker,
            ..s.clone()
        };
        let csv = samples_csv(&[stock]);
        assert!(csv.lines().nth(1).is_some_and(|l| l.ends_with(",,")));
        let back = samples_from_csv(&csv).expect("parse back");
        assert!(back[0].rworker.is_none() && back[0].wakes_per_handoff().is_nan());
        let old: String = csv
            .lines()
            .map(|l| l.rsplitn(4, ',').last().unwrap_or("").to_string() + "\n")
            .collect();
        assert!(!old.contains("rworker_handoffs"));
        assert_eq!(samples_from_csv(&old).expect("old csv").len(), 1);
        let t = summarise(&back);
        let row = t.values().next().expect("one cell");
        assert!(row[&MpmKind::Worker].wakes_per_handoff.is_none());
    }
}
