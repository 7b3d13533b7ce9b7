//! `rworker-ab`: runs the A/B matrix and writes results.md, results.csv, summary.csv and
//! chart.svg. See `abtest/README.md`, and `--help`.
//!
//! Exit status: 0 all runs clean; 1 some run had non-2xx responses or socket errors (results
//! are still written); 2 bad arguments; 3 aborted (a server did not start, was not the MPM it
//! should be, or crashed); 128+n on signal n, after stopping every server it started.

use rworker_ab::autogroup::Autogroup;
use rworker_ab::error::Context;
use rworker_ab::mpm::{Modules, MpmKind, Pair, STOCK_WORKER_SO};
use rworker_ab::options::{pairs_in_command, Options};
use rworker_ab::plan::{mmss, Plan, Sample};
use rworker_ab::tls::Certificate;
use rworker_ab::{chart, memory, percon, report, server, shutdown, Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// The workspace root (this crate's parent directory).
fn workspace() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn default_so() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    target.join("release/libmod_mpm_rworker.so")
}

fn build_rworker() -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("rworker-ab: {cargo} build --release -p rworker");
    let st = Command::new(&cargo)
        .args(["build", "--release", "-p", "rworker"])
        .current_dir(workspace())
        .stdin(Stdio::null())
        .status()
        .context(|| format!("run {cargo} build --release -p rworker"))?;
    if !st.success() {
        return Err(Error(format!("cargo build --release -p rworker: {st}")));
    }
    Ok(())
}

fn sh(cmd: &str) -> String {
    Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .output()
        .map(|o| {
            let mut s = String::from_utf8_lossy(&o.stdout).to_string();
            s.push_str(&String::from_utf8_lossy(&o.stderr));
            s.trim().to_string()
        })
        .unwrap_or_default()
}

fn machine_info() -> String {
    [
        ("date", "date -u '+%Y-%m-%d %H:%M UTC'"),
        ("nproc", "nproc"),
        ("lscpu | grep 'Model name'", "lscpu | grep 'Model name'"),
        ("uname -srm", "uname -srm"),
        ("apache2 -v", "/usr/sbin/apache2 -v | head -1"),
        ("wrk -v", "wrk -v 2>&1 | head -1"),
        ("ab -V", "ab -V 2>&1 | head -1"),
        ("strace -V", "strace -V 2>&1 | head -1"),
        ("perf -v", "perf -v 2>&1 | head -1"),
        ("cat /proc/loadavg (at start)", "cat /proc/loadavg"),
    ]
    .iter()
    .map(|(label, cmd)| format!("$ {label}\n{}", sh(cmd)))
    .collect::<Vec<_>>()
    .join("\n")
}

/// A private copy of rworker's module for the duration of the matrix (removed on drop).
struct ModuleSnapshot {
    dir: PathBuf,
    path: PathBuf,
}

impl ModuleSnapshot {
    /// Copies `built` to `<temp>/rworker-ab-<pid>-<name>/<name>`.
    fn take(built: &Path, name: &str) -> Result<ModuleSnapshot> {
        let dir = std::env::temp_dir().join(format!("rworker-ab-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
        shutdown::add_scratch_dir(dir.clone());
        let path = dir.join(name);
        std::fs::copy(built, &path).context(|| {
            format!(
                "copy rworker's module {} (build it with cargo build --release -p rworker, \
                 or pass --rworker-so)",
                built.display()
            )
        })?;
        Ok(ModuleSnapshot { dir, path })
    }

    /// worker-aa's module: a copy of Debian's `mod_mpm_worker.so` under another file name,
    /// checked to be byte-identical to the original.
    fn stock_worker_copy() -> Result<ModuleSnapshot> {
        let original = Path::new(STOCK_WORKER_SO);
        let s = ModuleSnapshot::take(original, "mod_mpm_worker-aa.so")
            .context(|| "worker-aa: copy the stock worker MPM (apt-get install apache2)")?;
        let a = std::fs::read(original).context(|| format!("read {STOCK_WORKER_SO}"))?;
        let b = std::fs::read(&s.path).context(|| format!("read {}", s.path.display()))?;
        if a != b {
            return Err(Error(format!(
                "worker-aa: {} is not byte-identical to {STOCK_WORKER_SO}",
                s.path.display()
            )));
        }
        Ok(s)
    }
}

impl Drop for ModuleSnapshot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let p = dir.join(name);
    std::fs::write(&p, text).context(|| format!("write {}", p.display()))?;
    Ok(p)
}

/// paired.md: the paired sections on their own.
fn paired_md(source: &Path, samples: &[Sample], mpms: &[MpmKind], pairs: &[Pair]) -> String {
    let mut paired = format!("# Paired ratios, from {}\n\n", source.display());
    report::paired_section(&mut paired, samples, mpms, pairs);
    paired
}

/// `--replot DIR`: chart.svg, summary.csv, paired.md and paired.csv again from
/// DIR/results.csv, with the command line from DIR/results.md in the chart's title. The
/// paired tables are those of the `--pair` options of that command line and of this one.
fn replot(dir: &Path, extra_pairs: &[Pair]) -> Result<()> {
    let csv = dir.join("results.csv");
    let text = std::fs::read_to_string(&csv).context(|| format!("read {}", csv.display()))?;
    let samples = report::samples_from_csv(&text)?;
    let table = report::summarise(&samples);
    let md = std::fs::read_to_string(dir.join("results.md")).unwrap_or_default();
    let command = md
        .lines()
        .find(|l| l.starts_with("cargo run"))
        .unwrap_or("(command unknown)");
    let date = md
        .lines()
        .skip_while(|l| *l != "$ date")
        .nth(1)
        .unwrap_or("");
    let title = format!(
        "{command}\n{date}, {} CPUs, {} (chart redrawn from results.csv)",
        sh("nproc"),
        sh("lscpu | grep 'Model name' | sed 's/.*: *//'")
    );
    write(dir, "summary.csv", &report::summary_csv(&table))?;
    let mpms: Vec<MpmKind> = MpmKind::ALL
        .into_iter()
        .filter(|k| samples.iter().any(|s| s.mpm == *k))
        .collect();
    let mut pairs = pairs_in_command(command);
    for p in extra_pairs {
        if !pairs.contains(p) {
            pairs.push(*p);
        }
    }
    write(dir, "paired.md", &paired_md(&csv, &samples, &mpms, &pairs))?;
    write(
        dir,
        "paired.csv",
        &report::paired_csv(&samples, &mpms, &pairs),
    )?;
    let p = write(dir, "chart.svg", &chart::svg(&table, &title))?;
    eprintln!(
        "rworker-ab: redrew {} from {} runs",
        p.display(),
        samples.len()
    );
    Ok(())
}

fn run(opts: Options) -> Result<bool> {
    if let Some(dir) = &opts.replot {
        replot(dir, &opts.pairs)?;
        return Ok(true);
    }
    for tool in [server::APACHE2] {
        if !Path::new(tool).is_file() {
            return Err(Error(format!("{tool} not found: apt-get install apache2")));
        }
    }
    let tools: &[(&str, &str)] = match (opts.percon, opts.no_perf) {
        (true, false) => &[
            ("ab", "apache2-utils"),
            ("strace", "strace"),
            ("perf", "linux-perf (or pass --no-perf)"),
        ],
        (true, true) => &[("ab", "apache2-utils"), ("strace", "strace")],
        (false, _) => &[("wrk", "wrk")],
    };
    for (tool, package) in tools {
        if sh(&format!("command -v {tool}")).is_empty() {
            return Err(Error(format!(
                "{tool} not found: apt-get install {package}"
            )));
        }
    }
    let needs_rworker = opts.mpms.iter().any(|k| k.is_rworker());
    if needs_rworker && !opts.no_build && opts.rworker_so.is_none() {
        build_rworker()?;
    }
    let built = opts.rworker_so.clone().unwrap_or_else(default_so);
    std::fs::create_dir_all(&opts.out).context(|| format!("create {}", opts.out.display()))?;
    let mut machine = machine_info();
    // Held until run() returns: restores the switch.
    let autogroup = Autogroup::prepare(opts.keep_autogroup)?;
    machine.push_str(&format!(
        "\n$ autogroup scheduling\n{}",
        autogroup.describe()
    ));
    // Other builds may replace target/release/*.so while the matrix runs: every rworker
    // server loads one private copy taken now, and the report says which build it was.
    let snapshot = if needs_rworker {
        let s = ModuleSnapshot::take(&built, "mod_mpm_rworker.so")?;
        machine.push_str(&format!(
            "\n$ rworker module\n{} (git {}), sha256 {}",
            built.display(),
            sh(&format!(
                "cd '{}' && git describe --always --dirty=+uncommitted-changes",
                workspace().display()
            )),
            sh(&format!("sha256sum '{}' | cut -c1-16", s.path.display()))
        ));
        Some(s)
    } else {
        None
    };
    let so = snapshot.as_ref().map_or(built.clone(), |s| s.path.clone());
    let worker_aa = if opts.mpms.contains(&MpmKind::WorkerAa) {
        let s = ModuleSnapshot::stock_worker_copy()?;
        machine.push_str(&format!(
            "\n$ worker-aa module\n{STOCK_WORKER_SO} copied to {}, byte-identical (sha256 {})",
            s.path.display(),
            sh(&format!("sha256sum '{}' | cut -c1-16", s.path.display()))
        ));
        Some(s)
    } else {
        None
    };
    let baseline = match &opts.baseline_so {
        Some(b) if opts.mpms.iter().any(|k| k.is_baseline()) => {
            let s = ModuleSnapshot::take(b, "mod_mpm_rworker-baseline.so")?;
            machine.push_str(&format!(
                "\n$ baseline module (rworker-park-base)\n{}, sha256 {}",
                b.display(),
                sh(&format!("sha256sum '{}' | cut -c1-16", s.path.display()))
            ));
            Some(s)
        }
        _ => None,
    };
    let modules = Modules {
        rworker: so,
        baseline: baseline.as_ref().map(|s| s.path.clone()),
        worker_aa: worker_aa.as_ref().map(|s| s.path.clone()),
    };
    // --tls: one certificate for every server of the run.
    let certificate = if opts.tls {
        let c = Certificate::make()?;
        machine.push_str(&format!(
            "\n$ TLS (--tls)\n{}; mod_ssl {}; certificate ECDSA P-256, self-signed, CN=localhost \
             (sha256 fingerprint {}), certificate made in {} (removed at the end)",
            sh("openssl version"),
            sh("dpkg-query -W -f='${Version}' apache2-bin 2>/dev/null || echo '?'"),
            sh(&format!(
                "openssl x509 -in '{}' -noout -fingerprint -sha256 | cut -d= -f2 | cut -c1-23",
                c.dir.join("cert.pem").display()
            )),
            c.dir.display()
        ));
        Some(c)
    } else {
        None
    };
    if opts.memory {
        return run_memory(&opts, &modules, &machine);
    }
    if opts.percon {
        return run_percon(&opts, &modules, &machine);
    }
    let plan = Plan::new(opts);
    eprintln!(
        "rworker-ab: {} runs ({} cells × {} MPMs × {} reps, {} s each), about {} in all",
        plan.total_runs(),
        plan.cells.len(),
        plan.opts.mpms.len(),
        plan.opts.reps,
        plan.opts.duration,
        mmss(plan.estimated_secs())
    );
    let outcome = plan.run(&modules, certificate.as_ref(), |line| eprintln!("{line}"))?;
    let table = report::summarise(&outcome.samples);
    let md = report::markdown(&plan, &outcome, &machine);
    let out = &plan.opts.out;
    let title = format!(
        "{}\n{}, {} CPUs, {}",
        plan.opts.command_line,
        sh("date -u '+%Y-%m-%d %H:%M UTC'"),
        sh("nproc"),
        sh("lscpu | grep 'Model name' | sed 's/.*: *//'")
    );
    write(out, "results.csv", &report::samples_csv(&outcome.samples))?;
    write(out, "summary.csv", &report::summary_csv(&table))?;
    write(out, "chart.svg", &chart::svg(&table, &title))?;
    let o = &plan.opts;
    let csv = out.join("results.csv");
    write(
        out,
        "paired.md",
        &paired_md(&csv, &outcome.samples, &o.mpms, &o.pairs),
    )?;
    write(
        out,
        "paired.csv",
        &report::paired_csv(&outcome.samples, &o.mpms, &o.pairs),
    )?;
    let md_path = write(out, "results.md", &md)?;
    println!("{md}");
    eprintln!(
        "rworker-ab: done in {}; wrote {} and results.csv, summary.csv, paired.md, paired.csv, \
         chart.svg next to it",
        mmss(outcome.elapsed_s),
        md_path.display()
    );
    if !outcome.failures.is_empty() {
        eprintln!(
            "rworker-ab: FAILED: {} run(s) had errors:",
            outcome.failures.len()
        );
        for f in &outcome.failures {
            eprintln!("  {f}");
        }
        return Ok(false);
    }
    Ok(true)
}

/// `--percon`: the per-connection cost table instead of the matrix.
fn run_percon(opts: &Options, modules: &Modules, machine: &str) -> Result<bool> {
    let passes = opts.reps as usize * opts.mpms.len() * opts.modes.len();
    eprintln!(
        "rworker-ab --percon: {} passes each: untraced ({} requests),{} under strace ({} requests); c={} ({} MPMs × {} modes × {} reps)",
        passes,
        opts.cpu_requests,
        if opts.no_perf { "" } else { " under perf stat," },
        opts.requests,
        opts.clients[0],
        opts.mpms.len(),
        opts.modes.len(),
        opts.reps
    );
    let outcome = percon::run(opts, modules, |line| eprintln!("{line}"))?;
    let md = percon::markdown(opts, &outcome, machine);
    let s = percon::summarise(&outcome);
    write(&opts.out, "results.csv", &percon::results_csv(&outcome))?;
    write(&opts.out, "summary.csv", &percon::summary_csv(&s))?;
    let md_path = write(&opts.out, "results.md", &md)?;
    println!("{md}");
    eprintln!(
        "rworker-ab --percon: done in {}; wrote {} and results.csv, summary.csv next to it",
        mmss(outcome.elapsed_s),
        md_path.display()
    );
    Ok(true)
}

/// `--memory`: resident memory per idle keep-alive connection instead of the matrix.
fn run_memory(opts: &Options, modules: &Modules, machine: &str) -> Result<bool> {
    let readings = memory::run(opts, modules, |line| eprintln!("{line}"))?;
    let md = memory::markdown(opts, &readings, machine);
    let md_path = write(&opts.out, "results.md", &md)?;
    println!("{md}");
    eprintln!("rworker-ab --memory: wrote {}", md_path.display());
    Ok(true)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rworker-ab: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = shutdown::install(|s| {
        // Once stopped cleanly, the private ServerRoot (ours: rworker-ab-*) goes too.
        if !s.stop(server::STOP_TIMEOUT) {
            if let Some(root) = s.conf.parent() {
                let ours = root
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("rworker-ab-"));
                if ours {
                    let _ = std::fs::remove_dir_all(root);
                }
            }
        }
    }) {
        eprintln!("rworker-ab: cannot install the signal handler: {e}");
        return ExitCode::from(3);
    }
    let result = run(opts);
    if shutdown::interrupted() {
        // The signal watcher is stopping the servers and will exit with 128+signal; the
        // error the interrupted load client caused here is not the news.
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rworker-ab: ABORTED: {e}");
            ExitCode::from(3)
        }
    }
}
