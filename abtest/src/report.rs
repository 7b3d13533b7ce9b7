//! From samples to what a person reads: medians and ranges per cell and MPM, the
//! rworker / stock-worker and rworker / rworker-apr ratios, per-repetition paired ratios (every
//! rworker kind against the worker, the A/A pair worker-aa / worker that shows the run's
//! noise, and any `--pair A/B`), a Markdown table and CSVs.

use crate::mpm::{MpmKind, Pair, AA_PAIR};
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
    paired_ratios(samples, a, b, metric)
        .into_iter()
        .filter_map(|(cell, v)| Some((cell, Stat::of(v)?)))
        .collect()
}

/// The per-repetition ratios `a / b` that [`paired`] summarises, per cell, in repetition
/// order.
pub fn paired_ratios(
    samples: &[Sample],
    a: MpmKind,
    b: MpmKind,
    metric: fn(&Sample) -> f64,
) -> BTreeMap<Cell, Vec<f64>> {
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
}

/// req/s of a run, for [`paired`].
const RPS: fn(&Sample) -> f64 = |s| s.wrk.rps;
/// httpd CPU µs per request of a run, for [`paired`].
const CPU: fn(&Sample) -> f64 = Sample::cpu_us_per_req;

/// The pairs of the first paired table: every rworker kind in the run against the stock
/// worker, and rworker-park against its baseline build when both ran.
pub fn rworker_pairs(mpms: &[MpmKind]) -> Vec<Pair> {
    let ran = |k: &MpmKind| mpms.contains(k);
    let mut pairs: Vec<Pair> = Vec::new();
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
    pairs
}

/// Every pair the paired section shows, in its order: [`rworker_pairs`], the A/A pair when
/// worker-aa and worker both ran, then the `--pair` ones not shown already (only those whose
/// two kinds ran).
pub fn shown_pairs(mpms: &[MpmKind], extra: &[Pair]) -> Vec<Pair> {
    let mut pairs = rworker_pairs(mpms);
    if mpms.contains(&AA_PAIR.0) && mpms.contains(&AA_PAIR.1) {
        pairs.push(AA_PAIR);
    }
    for &(a, b) in extra {
        if mpms.contains(&a) && mpms.contains(&b) && !pairs.contains(&(a, b)) {
            pairs.push((a, b));
        }
    }
    pairs
}

/// The A/A pair's paired stats per cell: req/s, CPU µs per request.
type Noise = (BTreeMap<Cell, Stat>, BTreeMap<Cell, Stat>);

/// The A/A noise band of one stat of worker-aa / worker ratios: the largest deviation from
/// 1 of any single repetition's ratio, as a log ratio (so that `A/B` and `B/A` are judged
/// alike).
pub fn noise_band(aa: &Stat) -> f64 {
    aa.min.ln().abs().max(aa.max.ln().abs())
}

/// Whether a paired median ratio lies beyond the A/A band of its cell (`None` without one).
pub fn beyond_noise(ratio: &Stat, aa: Option<&Stat>) -> Option<bool> {
    let band = noise_band(aa?);
    (band.is_finite() && ratio.median > 0.0).then(|| ratio.median.ln().abs() > band)
}

/// `1.02x (0.97–1.05)`, the median in bold when `bold`.
fn ratio_range(s: &Stat, bold: bool) -> String {
    let med = format!("{:.2}x", s.median);
    let med = if bold { format!("**{med}**") } else { med };
    format!("{med} ({:.2}–{:.2})", s.min, s.max)
}

/// `±4.2%`: an A/A band as a percentage.
fn band_pct(aa: &Stat) -> String {
    let b = noise_band(aa);
    if b.is_finite() {
        format!("±{:.1}%", (b.exp() - 1.0) * 100.0)
    } else {
        "–".into()
    }
}

/// The paired sections: the table of every rworker kind against the stock worker (and
/// rworker-park against its baseline build), the A/A table when worker-aa ran with worker,
/// and one table per `extra` pair (`--pair A/B`), judged against the A/A band.
pub fn paired_section(m: &mut String, samples: &[Sample], mpms: &[MpmKind], extra: &[Pair]) {
    rworker_paired_table(m, samples, mpms);
    let aa = mpms.contains(&AA_PAIR.0) && mpms.contains(&AA_PAIR.1);
    if aa {
        aa_table(m, samples);
    }
    let noise = aa.then(|| {
        (
            paired(samples, AA_PAIR.0, AA_PAIR.1, RPS),
            paired(samples, AA_PAIR.0, AA_PAIR.1, CPU),
        )
    });
    for &(a, b) in extra {
        if let Some(k) = [a, b].into_iter().find(|k| !mpms.contains(k)) {
            let _ = writeln!(m, "## Paired: {a} / {b}\n\n{k} did not run: no table.\n");
        } else if (a, b) != AA_PAIR {
            // (The A/A pair has its table above.)
            pair_table(m, samples, (a, b), noise.as_ref());
        }
    }
}

/// The A/A table: worker-aa / worker per cell, and the extremes over every cell.
fn aa_table(m: &mut String, samples: &[Sample]) {
    let (a, b) = AA_PAIR;
    let rps = paired(samples, a, b, RPS);
    let cpu = paired(samples, a, b, CPU);
    let _ = writeln!(m, "## A/A: {a} / {b}, this run's noise\n");
    let _ = writeln!(
        m,
        "worker-aa is the stock worker loaded from a byte-identical copy of \
         `mod_mpm_worker.so` under another file name, so whatever separates the two is noise: \
         the interleaving, the host's other jobs, where the module and the children landed. \
         Per-repetition ratios, median (min–max); a difference between two other MPMs in a \
         cell means something only beyond this pair's spread in that cell.\n"
    );
    let _ = writeln!(
        m,
        "| cell | {a}/{b} req/s | {a}/{b} CPU/req | A/A band req/s | A/A band CPU/req |"
    );
    let _ = writeln!(m, "|---|---:|---:|---:|---:|");
    let cells: std::collections::BTreeSet<Cell> = samples.iter().map(|s| s.cell).collect();
    for cell in &cells {
        let (r, c) = (rps.get(cell), cpu.get(cell));
        let text = |s: Option<&Stat>| s.map_or("–".into(), |s| ratio_range(s, false));
        let band = |s: Option<&Stat>| s.map_or("–".into(), band_pct);
        let _ = writeln!(
            m,
            "| {} | {} | {} | {} | {} |",
            cell_label(cell),
            text(r),
            text(c),
            band(r),
            band(c)
        );
    }
    let over = |t: &BTreeMap<Cell, Stat>| {
        let lo = t.values().map(|s| s.min).fold(f64::INFINITY, f64::min);
        let hi = t.values().map(|s| s.max).fold(f64::NEG_INFINITY, f64::max);
        let mlo = t.values().map(|s| s.median).fold(f64::INFINITY, f64::min);
        let mhi = t
            .values()
            .map(|s| s.median)
            .fold(f64::NEG_INFINITY, f64::max);
        format!("single repetitions {lo:.2}–{hi:.2}x, cell medians {mlo:.2}–{mhi:.2}x")
    };
    if !rps.is_empty() {
        let _ = writeln!(
            m,
            "\nOver every cell: req/s {}; CPU/req {}. A/A band = the largest deviation from \
             1.00x of any single repetition's ratio in the cell, either way.\n",
            over(&rps),
            over(&cpu)
        );
    } else {
        m.push('\n');
    }
}

/// One `--pair A/B` table, judged against the A/A band of each cell when `noise` (the A/A
/// pair's req/s and CPU stats) is there.
fn pair_table(m: &mut String, samples: &[Sample], (a, b): Pair, noise: Option<&Noise>) {
    let rps = paired(samples, a, b, RPS);
    let cpu = paired(samples, a, b, CPU);
    let _ = writeln!(m, "## Paired: {a} / {b}\n");
    let judged = match noise {
        Some(_) => {
            "**bold** = the median lies beyond the A/A band of that cell (the largest \
                    single-repetition deviation of worker-aa / worker from 1.00x, either way): \
                    a difference larger than this run's noise."
        }
        None => {
            "worker-aa and worker did not both run, so there is no A/A band to judge \
                 these against (add worker-aa to --mpms)."
        }
    };
    let _ = writeln!(
        m,
        "Per-repetition ratios {a} / {b}: median (min–max) over the repetitions in which both \
         ran. {judged}\n"
    );
    let _ = writeln!(
        m,
        "| cell | {a}/{b} req/s | A/A band req/s | {a}/{b} CPU/req | A/A band CPU/req |"
    );
    let _ = writeln!(m, "|---|---:|---:|---:|---:|");
    let cells: std::collections::BTreeSet<Cell> = samples.iter().map(|s| s.cell).collect();
    let mut beyond: [Vec<String>; 2] = Default::default();
    let mut judged_cells = [0usize; 2];
    for cell in &cells {
        let mut row = format!("| {} |", cell_label(cell));
        for (i, t) in [&rps, &cpu].into_iter().enumerate() {
            let aa = noise.and_then(|n| [&n.0, &n.1][i].get(cell));
            let text = match t.get(cell) {
                Some(s) => {
                    let out = beyond_noise(s, aa);
                    if out.is_some() {
                        judged_cells[i] += 1;
                    }
                    if out == Some(true) {
                        beyond[i].push(format!("{} {:.2}x", cell_label(cell), s.median));
                    }
                    ratio_range(s, out == Some(true))
                }
                None => "–".into(),
            };
            let _ = write!(row, " {text} | {} |", aa.map_or("–".into(), band_pct));
        }
        let _ = writeln!(m, "{row}");
    }
    if noise.is_some() {
        let say = |i: usize, what: &str| {
            if beyond[i].is_empty() {
                format!("{what} within it in all {} cells", judged_cells[i])
            } else {
                format!(
                    "{what} in {} of {} cells ({})",
                    beyond[i].len(),
                    judged_cells[i],
                    beyond[i].join("; ")
                )
            }
        };
        let _ = writeln!(
            m,
            "\nBeyond the A/A band: {}; {}.",
            say(0, "req/s"),
            say(1, "CPU/req")
        );
    }
    m.push('\n');
}

/// The paired-ratio table of every rworker variant in the run against the stock worker,
/// and of rworker-park against its baseline build when both ran.
fn rworker_paired_table(m: &mut String, samples: &[Sample], mpms: &[MpmKind]) {
    let pairs = rworker_pairs(mpms);
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
    let (rps, cpu) = (RPS, CPU);
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

/// Short human label of a cell: `keepalive 4 KiB c=50`, `TLS keepalive 4 KiB c=50`.
pub fn cell_label(c: &Cell) -> String {
    format!(
        "{}{} {} c={}",
        if c.tls { "TLS " } else { "" },
        c.mode.label(),
        size_label(c.size),
        c.clients
    )
}

/// The `tls` column of the CSVs.
fn tls_column(c: &Cell) -> &'static str {
    if c.tls {
        "yes"
    } else {
        "no"
    }
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
    if o.tls {
        let _ = writeln!(m, "# rworker A/B benchmark over TLS (HTTPS only)\n");
    } else {
        let _ = writeln!(m, "# rworker A/B benchmark\n");
    }
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
    if o.tls {
        let _ = writeln!(
            m,
            "TLS (`--tls`, every cell): the one listener speaks only TLS (`Listen ... https`, \
             `apache-conf/ab/tls.conf.in`: mod_ssl with Debian's ssl.conf settings, \
             SSLSessionCache shmcb, SSLSessionTickets off, SSLCipherSuite HIGH:!aNULL; one \
             self-signed ECDSA P-256 certificate for the run); wrk requests https://, so \
             `keepalive` reuses each TLS connection and `close` makes a TLS handshake per \
             request. wrk offers each new connection the session of its previous one, and the \
             session cache resumes it: a `close` request's handshake is an abbreviated one \
             (key exchange, no certificate signature).\n"
        );
    }
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
    paired_section(&mut m, &out.samples, &o.mpms, &o.pairs);
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
        "mpm,mode,size_bytes,clients,rep,requests,req_per_s,p50_us,p99_us,non_2xx,sock_connect,sock_read,sock_write,sock_timeout,wall_s,httpd_cpu_s,httpd_cpu_us_per_req,httpd_cpu_pct,vcsw,nvcsw,vcsw_per_req,wrk_cpu_s,wrk_cpu_us_per_req,child_churn,host_busy_pct,load1,failure,rworker_handoffs,rworker_futex_wakes,rworker_wakes_per_handoff,tls\n",
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
            "{},{},{},{},{},{},{:.2},{:.1},{:.1},{},{},{},{},{},{:.3},{:.3},{:.2},{:.1},{},{},{:.3},{:.3},{:.2},{},{:.1},{:.2},{},{},{}",
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
            tls_column(&s.cell),
        );
    }
    c
}

/// One CSV row per cell and MPM: medians, ranges and the ratios to the stock worker.
pub fn summary_csv(table: &Table) -> String {
    let mut c = String::from(
        "mode,size_bytes,clients,mpm,runs,req_per_s_median,req_per_s_min,req_per_s_max,p50_us_median,p99_us_median,cpu_us_per_req_median,cpu_us_per_req_min,cpu_us_per_req_max,httpd_cpu_pct_median,vcsw_per_req_median,wrk_cpu_us_per_req_median,errors,child_churn,req_per_s_vs_worker,cpu_per_req_vs_worker,rworker_wakes_per_handoff_median,tls\n",
    );
    for (cell, row) in table {
        for (mpm, s) in row {
            let opt = |r: Option<f64>| r.map_or(String::new(), |r| format!("{r:.3}"));
            let _ = writeln!(
                c,
                "{},{},{},{},{},{:.2},{:.2},{:.2},{:.1},{:.1},{:.2},{:.2},{:.2},{:.1},{:.3},{:.2},{},{},{},{},{},{}",
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
                tls_column(cell),
            );
        }
    }
    c
}

/// One CSV row per pair the paired section shows ([`shown_pairs`]), cell and metric
/// (`req_per_s`, `cpu_us_per_req`): how many repetitions paired, the median and range of
/// their ratios `a / b`, the cell's A/A band in % (empty without worker-aa and worker) and
/// whether the median lies beyond it (`yes` / `no`; empty for the A/A pair itself); `tls`
/// whether the cell ran over TLS.
pub fn paired_csv(samples: &[Sample], mpms: &[MpmKind], extra: &[Pair]) -> String {
    let mut c = String::from(
        "a,b,mode,size_bytes,clients,metric,reps,median,min,max,aa_band_pct,beyond_aa,tls\n",
    );
    let aa = mpms.contains(&AA_PAIR.0) && mpms.contains(&AA_PAIR.1);
    for (a, b) in shown_pairs(mpms, extra) {
        for (name, metric) in [("req_per_s", RPS), ("cpu_us_per_req", CPU)] {
            let noise = aa.then(|| paired(samples, AA_PAIR.0, AA_PAIR.1, metric));
            for (cell, v) in paired_ratios(samples, a, b, metric) {
                let Some(st) = Stat::of(v.iter().copied()) else {
                    continue;
                };
                let band = noise.as_ref().and_then(|n| n.get(&cell));
                let band_pct = band.map_or(String::new(), |s| {
                    format!("{:.2}", (noise_band(s).exp() - 1.0) * 100.0)
                });
                let beyond = match beyond_noise(&st, band) {
                    Some(_) if (a, b) == AA_PAIR => "",
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "",
                };
                let _ = writeln!(
                    c,
                    "{a},{b},{},{},{},{name},{},{:.4},{:.4},{:.4},{band_pct},{beyond},{}",
                    cell.mode.label(),
                    cell.size,
                    cell.clients,
                    v.len(),
                    st.median,
                    st.min,
                    st.max,
                    tls_column(&cell)
                );
            }
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
                // Older results.csv files have no tls column: they all ran plain HTTP.
                tls: get("tls").is_ok_and(|v| v == "yes"),
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
                tls: false,
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

    /// A cell's runs: `(mpm, rep, req/s, httpd CPU s)`, in `cell`.
    fn runs_in(cell: Cell, runs: &[(MpmKind, u32, f64, f64)]) -> Vec<Sample> {
        runs.iter()
            .map(|&(k, rep, rps, cpu)| Sample {
                cell,
                ..run(k, rep, rps, cpu)
            })
            .collect()
    }

    #[test]
    fn pairs_shown_and_their_order() {
        use MpmKind::*;
        let mpms = [Worker, WorkerAa, Event, Rworker, RworkerThread];
        // Every rworker kind against worker (not worker-aa, not event), then A/A, then the
        // --pair ones not shown yet and whose kinds both ran.
        assert_eq!(
            shown_pairs(
                &mpms,
                &[
                    (Rworker, RworkerThread),
                    (WorkerAa, Worker),
                    (Rworker, Worker),
                    (RworkerPark, Worker)
                ]
            ),
            vec![
                (Rworker, Worker),
                (RworkerThread, Worker),
                (WorkerAa, Worker),
                (Rworker, RworkerThread)
            ]
        );
        assert_eq!(
            rworker_pairs(&[Worker, Event, RworkerPark]),
            [(RworkerPark, Worker)]
        );
        assert!(rworker_pairs(&[WorkerAa, Rworker]).is_empty());
    }

    #[test]
    fn a_pair_is_judged_against_the_aa_band_of_its_cell() {
        use MpmKind::{Rworker as R, RworkerThread as T, Worker as W, WorkerAa as AA};
        let cell = |mode, clients| Cell {
            tls: false,
            mode,
            size: 1,
            clients,
        };
        let ka = cell(crate::options::ConnMode::KeepAlive, 50);
        let close = cell(crate::options::ConnMode::Close, 100);
        // keep-alive: A/A within ±4 % (0.96..1.02), R 10 % faster than T in every rep.
        // close: A/A within ±10 %, R 5 % faster: inside the noise.
        let mut samples = runs_in(
            ka,
            &[
                (W, 1, 1000.0, 5.0),
                (AA, 1, 960.0, 5.0),
                (T, 1, 1000.0, 5.0),
                (R, 1, 1100.0, 5.0),
                (W, 2, 1000.0, 5.0),
                (AA, 2, 1020.0, 5.0),
                (T, 2, 500.0, 5.0),
                (R, 2, 550.0, 5.0),
                (W, 3, 1000.0, 5.0),
                (AA, 3, 1000.0, 5.0),
                (T, 3, 800.0, 5.0),
                (R, 3, 880.0, 5.0),
            ],
        );
        samples.extend(runs_in(
            close,
            &[
                (W, 1, 1000.0, 5.0),
                (AA, 1, 1100.0, 5.0),
                (T, 1, 1000.0, 5.0),
                (R, 1, 1050.0, 5.0),
                (W, 2, 1000.0, 5.0),
                (AA, 2, 950.0, 5.0),
                (T, 2, 1000.0, 5.0),
                (R, 2, 1050.0, 5.0),
            ],
        ));
        let aa = paired(&samples, AA, W, |s| s.wrk.rps);
        assert!((noise_band(&aa[&ka]) - 0.96f64.ln().abs()).abs() < 1e-12);
        let rt = paired(&samples, R, T, |s| s.wrk.rps);
        assert_eq!(beyond_noise(&rt[&ka], aa.get(&ka)), Some(true));
        assert_eq!(beyond_noise(&rt[&close], aa.get(&close)), Some(false));
        // B/A is judged as A/B is.
        let tr = paired(&samples, T, R, |s| s.wrk.rps);
        assert_eq!(beyond_noise(&tr[&ka], aa.get(&ka)), Some(true));
        assert_eq!(beyond_noise(&rt[&ka], None), None);

        let mpms = [W, AA, R, T];
        let mut m = String::new();
        paired_section(&mut m, &samples, &mpms, &[(R, T), AA_PAIR]);
        assert!(m.contains("| cell | rworker/worker req/s |"), "{m}");
        assert!(
            m.contains("## A/A: worker-aa / worker, this run's noise"),
            "{m}"
        );
        // Once only, though --pair asked for it too.
        assert_eq!(m.matches("## A/A").count(), 1, "{m}");
        assert!(
            m.contains("| keepalive 1 B c=50 | 1.00x (0.96–1.02) | 1.00x (0.98–1.04) | ±4.2% |"),
            "{m}"
        );
        assert!(m.contains("## Paired: rworker / rworker-thread"), "{m}");
        // req/s: bold beyond the band; CPU/req (0.91x in each rep: the same CPU over 10 %
        // more requests) too.
        assert!(
            m.contains("| keepalive 1 B c=50 | **1.10x** (1.10–1.10) | ±4.2% | **0.91x** (0.91–0.91) | ±4.2% |"),
            "{m}"
        );
        assert!(
            m.contains("| close 1 B c=100 | 1.05x (1.05–1.05) | ±10.0% |"),
            "{m}"
        );
        assert!(
            m.contains("Beyond the A/A band: req/s in 1 of 2 cells (keepalive 1 B c=50 1.10x)"),
            "{m}"
        );
        // Without worker-aa nothing is judged, and a pair whose kind did not run says so.
        let mut m = String::new();
        paired_section(&mut m, &samples, &[W, R, T], &[(R, T), (R, MpmKind::Event)]);
        assert!(!m.contains("## A/A") && !m.contains("**1.10x**"), "{m}");
        assert!(m.contains("no A/A band"), "{m}");
        assert!(m.contains("event did not run: no table."), "{m}");

        let csv = paired_csv(&samples, &mpms, &[(R, T)]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "a,b,mode,size_bytes,clients,metric,reps,median,min,max,aa_band_pct,beyond_aa,tls"
        );
        assert!(
            lines.contains(
                &"rworker,rworker-thread,keepalive,1,50,req_per_s,3,1.1000,1.1000,1.1000,4.17,yes,no"
            ),
            "{csv}"
        );
        assert!(
            lines.contains(
                &"rworker,rworker-thread,close,1,100,req_per_s,2,1.0500,1.0500,1.0500,10.00,no,no"
            ),
            "{csv}"
        );
        // The A/A pair's own rows carry its band, and no verdict on itself.
        assert!(
            lines.contains(
                &"worker-aa,worker,keepalive,1,50,req_per_s,3,1.0000,0.9600,1.0200,4.17,,no"
            ),
            "{csv}"
        );
        // rworker/worker, rworker-thread/worker, A/A, rworker/rworker-thread: 2 cells x 2
        // metrics each.
        assert_eq!(lines.len(), 1 + 4 * 2 * 2, "{csv}");
    }

    #[test]
    fn csv_round_trip() {
        let s = Sample {
            mpm: MpmKind::RworkerApr,
            cell: Cell {
                tls: false,
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
        assert!(csv.lines().nth(1).is_some_and(|l| l.ends_with(",,,no")));
        let back = samples_from_csv(&csv).expect("parse back");
        assert!(back[0].rworker.is_none() && back[0].wakes_per_handoff().is_nan());
        // From before the tls column, and from before the rworker columns too.
        let old: String = csv
            .lines()
            .map(|l| l.rsplitn(5, ',').last().unwrap_or("").to_string() + "\n")
            .collect();
        assert!(!old.contains("rworker_handoffs") && !old.contains("tls"));
        let old = samples_from_csv(&old).expect("old csv");
        assert!(old.len() == 1 && !old[0].cell.tls);
        let t = summarise(&back);
        let row = t.values().next().expect("one cell");
        assert!(row[&MpmKind::Worker].wakes_per_handoff.is_none());
        // A TLS run's rows come back as TLS cells, apart from the same cell over plain HTTP.
        let tls = Sample {
            cell: Cell {
                tls: true,
                ..s.cell
            },
            ..s.clone()
        };
        let csv = samples_csv(&[s.clone(), tls]);
        assert!(csv.lines().nth(2).is_some_and(|l| l.ends_with(",yes")));
        let both = samples_from_csv(&csv).expect("parse back");
        assert_eq!(
            both.iter().map(|b| b.cell.tls).collect::<Vec<_>>(),
            [false, true]
        );
        assert_eq!(summarise(&both).len(), 2);
        assert_eq!(cell_label(&both[1].cell), "TLS close 4 KiB c=100");
        assert!(summary_csv(&summarise(&both))
            .lines()
            .nth(2)
            .is_some_and(|l| l.ends_with(",yes")));
    }
}
