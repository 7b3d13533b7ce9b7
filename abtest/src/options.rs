//! Command-line options: which MPMs, cells and repetitions to run, and for how long.

use crate::bail;
use crate::error::{Error, Result};
use crate::mpm::{parse_pair, MpmKind, Pair};
use std::path::PathBuf;
use std::str::FromStr;

/// How each client connection is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConnMode {
    /// Keep-alive: each wrk connection sends request after request.
    KeepAlive,
    /// `Connection: close`: one request per connection (accept-heavy, what the queue sees most).
    Close,
}

impl ConnMode {
    /// The name used on the command line and in the outputs.
    pub fn label(self) -> &'static str {
        match self {
            ConnMode::KeepAlive => "keepalive",
            ConnMode::Close => "close",
        }
    }
}

impl FromStr for ConnMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "keepalive" | "ka" | "k" => Ok(ConnMode::KeepAlive),
            "close" => Ok(ConnMode::Close),
            other => Err(Error(format!(
                "unknown connection mode {other:?}: expected keepalive or close"
            ))),
        }
    }
}

/// Everything a run of the matrix needs to know. [`Options::parse`] builds it from argv.
#[derive(Clone, Debug)]
pub struct Options {
    /// The MPMs to compare, in the order of the first repetition.
    pub mpms: Vec<MpmKind>,
    /// Payload file sizes in bytes (one static file each).
    pub sizes: Vec<u64>,
    /// Concurrent client connections.
    pub clients: Vec<u32>,
    /// `--keepalive-clients LIST` / `--close-clients LIST`: the client counts of one mode
    /// instead of `clients` (see [`Options::clients_for`]).
    pub mode_clients: Vec<(ConnMode, Vec<u32>)>,
    /// `--pair A/B` (repeatable): extra paired-ratio tables, `A / B` per repetition.
    pub pairs: Vec<Pair>,
    /// Connection modes.
    pub modes: Vec<ConnMode>,
    /// Seconds of load per run (one cell, one repetition, one MPM).
    pub duration: u32,
    /// Seconds of warm-up load after each server start (0: none).
    pub warmup: u32,
    /// Repetitions of the whole set, interleaved across MPMs.
    pub reps: u32,
    /// wrk threads (`-t`); capped at the smallest client count.
    pub threads: u32,
    /// Where results.md, results.csv, summary.csv and chart.svg go.
    pub out: PathBuf,
    /// Skip `cargo build --release -p rworker`.
    pub no_build: bool,
    /// Leave the kernel's autogroup scheduling as it is (`--autogroup keep`) instead of
    /// turning it off for the run (see [`crate::autogroup`]).
    pub keep_autogroup: bool,
    /// rworker's module; default target/release/libmod_mpm_rworker.so.
    pub rworker_so: Option<PathBuf>,
    /// Another build of the module, for `rworker-park-base`.
    pub baseline_so: Option<PathBuf>,
    /// Request this path instead of the payload file (for checking the harness fails loudly).
    pub path: Option<String>,
    /// Only redraw chart.svg and summary.csv from this directory's results.csv; run nothing.
    pub replot: Option<PathBuf>,
    /// The set was chosen with `--quick`.
    pub quick: bool,
    /// `--percon`: instead of the matrix, the per-connection cost table (system calls by
    /// kind, context switches, CPU) of one child serving a fixed number of requests.
    pub percon: bool,
    /// `--percon`: requests per measured run (`--requests`).
    pub requests: u64,
    /// `--percon`: requests of the untraced pass (`--cpu-requests`): CPU time needs a longer
    /// sample than counts do.
    pub cpu_requests: u64,
    /// `--percon`: keep each strace output in `<out>/traces/` (`--keep-traces`).
    pub keep_traces: bool,
    /// `--max-workers N`: MaxRequestWorkers N in children of 25 threads, all started (the
    /// default config has 500 threads, more than any client count).
    pub max_workers: Option<u32>,
    /// `--debian-sizing`: Debian's default MPM sizing (see the usage text).
    pub debian_sizing: bool,
    /// `--max-connections-per-child N`: MaxConnectionsPerChild N for every MPM alike (child
    /// churn under load: each child retires after N connections).
    pub max_connections_per_child: Option<u32>,
    /// `--percon`: skip the `perf stat` pass (`--no-perf`); the kinds then come from strace.
    pub no_perf: bool,
    /// `--memory`: instead of the matrix, resident memory per idle keep-alive connection.
    pub memory: bool,
    /// `--tls`: every server's one listener speaks only TLS and wrk requests `https://`
    /// (see [`crate::tls`]); the cells, tables and CSVs say so.
    pub tls: bool,
    /// The command line, as given (in its `cargo run` form), for the report.
    pub command_line: String,
}

/// Usage text for `--help` and argument errors.
pub const USAGE: &str = "\
usage: cargo run --release -p rworker-ab -- [options]

Runs the same site, config and load against each MPM in turn and prints the comparison.
Writes results.md, results.csv (every run), summary.csv (medians), paired.md and
paired.csv (per-repetition ratios) and chart.svg to --out.

  --quick              small set (<5 min): --duration 2 --reps 2 --sizes 1,102400 --clients 50,100
  --duration S         seconds of load per run (default 5)
  --warmup S           seconds of warm-up after each server start (default 2; quick 1)
  --reps N             repetitions, interleaved across MPMs (default 3)
  --mpms LIST          worker,event,rworker-apr,rworker,rworker-thread (the default), and on
                       request worker-aa (the stock worker from a byte-identical copy of
                       its .so: with worker, the A/A pair that shows the run's noise),
                       rworker-park (RWorkerKeepAlive park, explicitly: rworker is the
                       module's default, park now), rworker-listener (RWorkerAccept
                       listener), rworker-park-base (with --baseline-so)
  --max-workers N      MaxRequestWorkers N (a multiple of 25) in N/25 children of 25
                       threads, all started, for every MPM alike (default: 10 x 50)
  --debian-sizing      Debian's mpm_*.conf instead, for every MPM alike: StartServers 2,
                       MinSpareThreads 25, MaxSpareThreads 75, ThreadsPerChild 25,
                       MaxRequestWorkers 150, ServerLimit 16 (the parent forks and sheds)
  --max-connections-per-child N
                       MaxConnectionsPerChild N for every MPM alike (default 0): children
                       retire after N connections and are replaced during the runs
  --sizes LIST         payload sizes in bytes (default 1,4096,102400)
  --clients LIST       concurrent connections (default 50,100,400)
  --modes LIST         keepalive,close (default both)
  --keepalive-clients LIST, --close-clients LIST
                       that mode's client counts instead of --clients (e.g. keep-alive at
                       50,100,400 and close at 100,400 in one interleaved run)
  --pair A/B           (repeatable) a table of the per-repetition ratios A/B (req/s, CPU
                       µs/request: median and min-max) for two kinds of --mpms, judged
                       against the A/A pair (worker-aa/worker) when both ran. Every rworker
                       kind against worker and worker-aa/worker come without asking
  --threads N          wrk threads (default: number of CPUs)
  --out DIR            output directory (default bench/ab)
  --no-build           do not run cargo build --release -p rworker first
  --autogroup off|keep off (the default): turn the kernel's autogroup scheduling off for the
                       run and back on after (needs root). With it on, the load client and
                       the server are two sessions that each may take half the CPUs, and a
                       run settles at random into client-bound or server-bound (see
                       abtest/src/autogroup.rs). keep: leave it as it is
  --rworker-so PATH    rworker module (default target/release/libmod_mpm_rworker.so)
  --baseline-so PATH   another build of it, run as rworker-park-base (before/after)
  --path URLPATH       request URLPATH instead of the payload file (harness self-check)
  --tls                the matrix over HTTPS: every server's one listener speaks only TLS
                       (Listen ... https, mod_ssl with Debian's ssl.conf settings: session
                       cache, no tickets; one self-signed ECDSA P-256 certificate per run)
                       and wrk requests https:// (keep-alive reuses a TLS connection, close
                       makes a handshake per request); tables and CSVs mark the cells TLS
  --replot DIR         only redraw DIR/chart.svg, DIR/summary.csv, DIR/paired.md and
                       DIR/paired.csv from DIR/results.csv (with the --pair options of
                       DIR/results.md's command line and of this one)

  --percon             instead of the matrix: what one connection and one request cost each
                       MPM. One child (StartServers 1, ServerLimit 1, ThreadsPerChild 25)
                       serves --requests requests of the 1-byte file from ab -c <clients>,
                       per mode three times: untraced (CPU from schedstat, context switches,
                       RWorker* keys), under perf stat (system calls by kind, futex wakes:
                       kernel counters, little overhead), under strace -f (every call name,
                       futex operations, failed calls).
                       Defaults: --mpms worker,rworker --clients 4 --reps 5 --out bench/percon
                       (any kinds: e.g. --mpms worker,rworker-thread,rworker).
                       Writes results.md, results.csv (every count), summary.csv (medians).
  --requests N         --percon: requests of the perf and strace passes (default 5000)
  --cpu-requests N     --percon: requests of the untraced pass (CPU, ctx switches; default 20000)
  --keep-traces        --percon: keep every strace output in OUT/traces/ (several MB each)
  --no-perf            --percon: no perf stat pass (system calls by kind from strace only)

  --memory             instead of the matrix: resident memory per idle keep-alive connection
                       (children's VmRSS before and with <clients> connections that each sent
                       one request and wait, once server-status counts them parked), for
                       MPMs that park idle connections. --max-workers as in the matrix
                       (default 150). Defaults: --mpms event,rworker-park --clients 400
                       --reps 3 --out bench/memory.
";

fn list<T: FromStr>(flag: &str, v: &str) -> Result<Vec<T>>
where
    T::Err: std::fmt::Display,
{
    let mut out = Vec::new();
    for item in v.split(',').filter(|s| !s.trim().is_empty()) {
        match item.trim().parse() {
            Ok(x) => out.push(x),
            Err(e) => bail!("{flag} {v:?}: {item:?}: {e}"),
        }
    }
    if out.is_empty() {
        bail!("{flag} needs at least one value");
    }
    Ok(out)
}

fn number<T: FromStr>(flag: &str, v: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    v.trim()
        .parse()
        .map_err(|e| Error(format!("{flag} {v:?}: {e}")))
}

impl Options {
    /// Parses the arguments after the program name. `Err` carries the message to print
    /// (with [`USAGE`] for `--help`).
    pub fn parse(args: &[String]) -> Result<Options> {
        let quick = args.iter().any(|a| a == "--quick");
        let percon = args.iter().any(|a| a == "--percon");
        let memory = args.iter().any(|a| a == "--memory");
        let ncpu = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
        let mut o = Options {
            mpms: if percon {
                vec![MpmKind::Worker, MpmKind::Rworker]
            } else if memory {
                vec![MpmKind::Event, MpmKind::RworkerPark]
            } else {
                MpmKind::DEFAULT.to_vec()
            },
            sizes: if percon {
                vec![1]
            } else if quick {
                vec![1, 102400]
            } else {
                vec![1, 4096, 102400]
            },
            mode_clients: Vec::new(),
            pairs: Vec::new(),
            clients: if percon {
                vec![4]
            } else if memory {
                vec![400]
            } else if quick {
                vec![50, 100]
            } else {
                vec![50, 100, 400]
            },
            modes: if percon {
                vec![ConnMode::Close, ConnMode::KeepAlive]
            } else {
                vec![ConnMode::KeepAlive, ConnMode::Close]
            },
            duration: if quick { 2 } else { 5 },
            warmup: if quick { 1 } else { 2 },
            reps: if percon {
                5
            } else if quick {
                2
            } else {
                3
            },
            threads: ncpu,
            out: PathBuf::from(if percon {
                "bench/percon"
            } else if memory {
                "bench/memory"
            } else {
                "bench/ab"
            }),
            no_build: false,
            keep_autogroup: false,
            rworker_so: None,
            baseline_so: None,
            path: None,
            replot: None,
            quick,
            percon,
            max_workers: None,
            debian_sizing: false,
            max_connections_per_child: None,
            requests: 5000,
            cpu_requests: 20000,
            keep_traces: false,
            no_perf: false,
            memory,
            tls: false,
            command_line: std::iter::once("cargo run --release -p rworker-ab --".to_string())
                .chain(args.iter().cloned())
                .collect::<Vec<_>>()
                .join(" "),
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let flag = flag.as_str();
            let mut value = || {
                it.next()
                    .cloned()
                    .ok_or_else(|| Error(format!("{flag} needs a value\n\n{USAGE}")))
            };
            match flag {
                "--quick" | "--percon" | "--memory" => {}
                "--requests" => o.requests = number(flag, &value()?)?,
                "--cpu-requests" => o.cpu_requests = number(flag, &value()?)?,
                "--help" | "-h" => bail!("{USAGE}"),
                "--duration" => o.duration = number(flag, &value()?)?,
                "--warmup" => o.warmup = number(flag, &value()?)?,
                "--reps" => o.reps = number(flag, &value()?)?,
                "--threads" => o.threads = number(flag, &value()?)?,
                "--mpms" => o.mpms = list(flag, &value()?)?,
                "--sizes" => o.sizes = list(flag, &value()?)?,
                "--clients" => o.clients = list(flag, &value()?)?,
                "--modes" => o.modes = list(flag, &value()?)?,
                "--keepalive-clients" | "--close-clients" => {
                    let mode = if flag == "--close-clients" {
                        ConnMode::Close
                    } else {
                        ConnMode::KeepAlive
                    };
                    let v = list(flag, &value()?)?;
                    o.mode_clients.retain(|(m, _)| *m != mode);
                    o.mode_clients.push((mode, v));
                }
                "--pair" => {
                    let v = value()?;
                    let p = parse_pair(&v).map_err(|e| Error(format!("--pair: {e}")))?;
                    if !o.pairs.contains(&p) {
                        o.pairs.push(p);
                    }
                }
                "--max-workers" => {
                    let n: u32 = value()?
                        .parse()
                        .map_err(|_| Error("--max-workers takes a number".into()))?;
                    if n < 25 || n % 25 != 0 || n > 25 * 64 {
                        bail!("--max-workers {n}: must be a multiple of 25 from 25 to 1600");
                    }
                    o.max_workers = Some(n);
                }
                "--max-connections-per-child" => {
                    let n: u32 = value()?
                        .parse()
                        .map_err(|_| Error("--max-connections-per-child takes a number".into()))?;
                    o.max_connections_per_child = Some(n);
                }
                "--out" => o.out = PathBuf::from(value()?),
                "--no-build" => o.no_build = true,
                "--tls" => o.tls = true,
                "--autogroup" => {
                    o.keep_autogroup = match value()?.as_str() {
                        "keep" => true,
                        "off" => false,
                        v => bail!("--autogroup {v:?}: keep or off"),
                    }
                }
                "--keep-traces" => o.keep_traces = true,
                "--no-perf" => o.no_perf = true,
                "--replot" => o.replot = Some(PathBuf::from(value()?)),
                "--rworker-so" => o.rworker_so = Some(PathBuf::from(value()?)),
                "--debian-sizing" => o.debian_sizing = true,
                "--baseline-so" => o.baseline_so = Some(PathBuf::from(value()?)),
                "--path" => {
                    let p = value()?;
                    if !p.starts_with('/') {
                        bail!("--path {p:?}: must start with /");
                    }
                    o.path = Some(p);
                }
                other => bail!("unknown option {other:?}\n\n{USAGE}"),
            }
        }
        o.validate()?;
        Ok(o)
    }

    fn validate(&mut self) -> Result<()> {
        if !(1..=3600).contains(&self.duration) {
            bail!(
                "--duration {}: must be 1 to 3600 whole seconds",
                self.duration
            );
        }
        if self.warmup > 600 {
            bail!(
                "--warmup {}: must be between 0 and 600 seconds",
                self.warmup
            );
        }
        if self.reps == 0 {
            bail!("--reps must be at least 1");
        }
        if self.debian_sizing && self.max_workers.is_some() {
            bail!("--debian-sizing and --max-workers both set the sizing: choose one");
        }
        if self.mpms.iter().any(|k| k.is_baseline()) && self.baseline_so.is_none() {
            bail!("rworker-park-base needs --baseline-so PATH (another build of the module)");
        }
        if let Some(&c) = self.clients.iter().find(|&&c| c == 0 || c > 10000) {
            bail!("--clients {c}: must be between 1 and 10000");
        }
        for (mode, clients) in &mut self.mode_clients {
            let flag = format!("--{}-clients", mode.label());
            if let Some(&c) = clients.iter().find(|&&c| c == 0 || c > 10000) {
                bail!("{flag} {c}: must be between 1 and 10000");
            }
            if !self.modes.contains(mode) {
                bail!("{flag}: {} is not in --modes", mode.label());
            }
            if self.percon || self.memory {
                bail!("{flag} goes with the matrix, not --percon or --memory");
            }
            clients.dedup();
        }
        if !self.pairs.is_empty() && (self.percon || self.memory) {
            bail!("--pair goes with the matrix (and --replot), not --percon or --memory");
        }
        if self.replot.is_none() {
            for &(a, b) in &self.pairs {
                if let Some(k) = [a, b].into_iter().find(|k| !self.mpms.contains(k)) {
                    bail!("--pair {a}/{b}: {k} is not in --mpms");
                }
            }
        }
        if let Some(&s) = self.sizes.iter().find(|&&s| s == 0 || s > 1 << 30) {
            bail!("--sizes {s}: must be between 1 byte and 1 GiB");
        }
        if self.percon {
            if self.quick {
                bail!("--percon and --quick do not go together");
            }
            if self.clients.len() != 1 {
                bail!("--percon takes one --clients value, not {:?}", self.clients);
            }
            for (flag, n) in [
                ("--requests", self.requests),
                ("--cpu-requests", self.cpu_requests),
            ] {
                if !(100..=10_000_000).contains(&n) {
                    bail!("{flag} {n}: must be 100 to 10000000");
                }
            }
            if self.clients[0] > 25 {
                bail!(
                    "--percon --clients {}: at most 25 (the one child's ThreadsPerChild)",
                    self.clients[0]
                );
            }
        }
        if self.tls && (self.percon || self.memory) {
            bail!("--tls goes with the matrix, not --percon or --memory");
        }
        if self.memory {
            if self.percon || self.quick {
                bail!("--memory goes with neither --percon nor --quick");
            }
            if self.clients.len() != 1 {
                bail!("--memory takes one --clients value, not {:?}", self.clients);
            }
        }
        if self.threads == 0 {
            bail!("--threads must be at least 1");
        }
        // Repeated values would only duplicate cells.
        self.mpms.dedup();
        self.sizes.dedup();
        self.clients.dedup();
        self.modes.dedup();
        Ok(())
    }

    /// The client counts of `mode`: its `--keepalive-clients` / `--close-clients` if given,
    /// else `--clients`.
    pub fn clients_for(&self, mode: ConnMode) -> &[u32] {
        self.mode_clients
            .iter()
            .find(|(m, _)| *m == mode)
            .map_or(&self.clients[..], |(_, v)| &v[..])
    }
}

/// The `--pair` values of a command line as a report prints it (`results.md`'s
/// `cargo run ...` line), for `--replot`: values that do not parse are left out.
pub fn pairs_in_command(command: &str) -> Vec<Pair> {
    let mut out = Vec::new();
    let mut words = command.split_whitespace();
    while let Some(w) = words.next() {
        let value = match w.strip_prefix("--pair=") {
            Some(v) => Some(v),
            None if w == "--pair" => words.next(),
            None => None,
        };
        if let Some(p) = value.and_then(|v| parse_pair(v).ok()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn max_connections_per_child_goes_with_either_sizing() {
        let o =
            Options::parse(&args("--debian-sizing --max-connections-per-child 5")).expect("parse");
        assert_eq!(o.max_connections_per_child, Some(5));
        assert!(Options::parse(&args("--max-connections-per-child x")).is_err());
    }

    #[test]
    fn max_workers_is_a_multiple_of_25() {
        let o = Options::parse(&args("--max-workers 150")).expect("parse");
        assert_eq!(o.max_workers, Some(150));
        assert_eq!(
            crate::plan::worker_limit(150)[0],
            ("StartServers", "6".to_string())
        );
        for bad in ["--max-workers 10", "--max-workers 160", "--max-workers x"] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn defaults_are_the_full_matrix() {
        let o = Options::parse(&[]).expect("defaults parse");
        assert_eq!(o.mpms.len(), 5);
        // rworker parks by default: the other keep-alive mode is the fifth kind.
        assert!(o.mpms.contains(&MpmKind::RworkerThread));
        assert!(!o.mpms.contains(&MpmKind::RworkerPark));
        assert!(o.pairs.is_empty() && o.mode_clients.is_empty());
        assert_eq!(o.sizes, vec![1, 4096, 102400]);
        assert_eq!(o.clients, vec![50, 100, 400]);
        assert_eq!(o.reps, 3);
    }

    #[test]
    fn quick_can_be_overridden() {
        let o = Options::parse(&args("--quick --reps 1 --mpms worker,rworker")).expect("parse");
        assert_eq!(o.reps, 1);
        assert_eq!(o.duration, 2);
        assert_eq!(o.mpms, vec![MpmKind::Worker, MpmKind::Rworker]);
    }

    #[test]
    fn memory_has_its_own_defaults() {
        let o = Options::parse(&args("--memory")).expect("parse");
        assert!(o.memory && !o.percon);
        assert_eq!(o.mpms, vec![MpmKind::Event, MpmKind::RworkerPark]);
        assert_eq!(o.clients, vec![400]);
        assert_eq!(o.out, PathBuf::from("bench/memory"));
        for bad in [
            "--memory --clients 4,8",
            "--memory --percon",
            "--memory --quick",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn percon_has_its_own_defaults() {
        let o = Options::parse(&args("--percon")).expect("parse");
        assert!(o.percon);
        assert_eq!(o.mpms, vec![MpmKind::Worker, MpmKind::Rworker]);
        assert_eq!((o.clients.clone(), o.requests, o.reps), (vec![4], 5000, 5));
        assert_eq!(o.out, PathBuf::from("bench/percon"));
        let o = Options::parse(&args("--percon --requests 500 --mpms rworker,worker,event"))
            .expect("parse");
        assert_eq!(o.requests, 500);
        assert_eq!(o.mpms.len(), 3);
        for bad in [
            "--percon --clients 4,8",
            "--percon --clients 26",
            "--percon --requests 10",
            "--percon --cpu-requests 0",
            "--percon --quick",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn pairs_and_new_kinds() {
        let o = Options::parse(&args(
            "--mpms worker,worker-aa,event,rworker,rworker-thread --pair rworker/rworker-thread \
             --pair worker-aa/worker --pair rworker/rworker-thread",
        ))
        .expect("parse");
        assert_eq!(o.mpms[1], MpmKind::WorkerAa);
        assert_eq!(o.mpms[4], MpmKind::RworkerThread);
        assert_eq!(
            o.pairs,
            vec![
                (MpmKind::Rworker, MpmKind::RworkerThread),
                (MpmKind::WorkerAa, MpmKind::Worker)
            ]
        );
        for bad in [
            // Both kinds must run.
            "--mpms worker,rworker --pair rworker/rworker-thread",
            "--pair rworker/rworker",
            "--pair rworker",
            "--pair rworker/prefork",
            "--percon --pair rworker/worker",
            "--memory --pair event/rworker-park",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad} was accepted");
        }
        // --replot reads results that ran whatever they ran.
        let o = Options::parse(&args(
            "--replot /tmp/x --pair rworker/rworker-thread --mpms worker",
        ))
        .expect("parse");
        assert_eq!(o.pairs.len(), 1);
        let o = Options::parse(&args(
            "--percon --mpms worker,rworker-thread,rworker,worker-aa",
        ))
        .expect("percon takes the new kinds");
        assert_eq!(o.mpms.len(), 4);
    }

    #[test]
    fn pairs_come_back_from_a_reports_command_line() {
        let cmd = "cargo run --release -p rworker-ab -- --no-build --pair rworker/rworker-thread \
                   --mpms worker,worker-aa --pair=worker-aa/worker --pair bogus --pair \
                   rworker/rworker-thread";
        assert_eq!(
            pairs_in_command(cmd),
            vec![
                (MpmKind::Rworker, MpmKind::RworkerThread),
                (MpmKind::WorkerAa, MpmKind::Worker)
            ]
        );
        assert!(pairs_in_command("cargo run --release -p rworker-ab -- --reps 5").is_empty());
    }

    #[test]
    fn clients_per_mode() {
        let o = Options::parse(&args(
            "--clients 50 --keepalive-clients 50,100,400 --close-clients 100,400",
        ))
        .expect("parse");
        assert_eq!(o.clients_for(ConnMode::KeepAlive), &[50, 100, 400]);
        assert_eq!(o.clients_for(ConnMode::Close), &[100, 400]);
        let o = Options::parse(&args("--clients 10,20 --close-clients 30")).expect("parse");
        assert_eq!(o.clients_for(ConnMode::KeepAlive), &[10, 20]);
        assert_eq!(o.clients_for(ConnMode::Close), &[30]);
        // The last one of a mode wins.
        let o = Options::parse(&args("--close-clients 30 --close-clients 40")).expect("parse");
        assert_eq!(o.clients_for(ConnMode::Close), &[40]);
        for bad in [
            "--close-clients 0",
            "--close-clients x",
            "--modes keepalive --close-clients 100",
            "--percon --close-clients 4",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn tls_goes_with_the_matrix() {
        assert!(!Options::parse(&[]).expect("defaults").tls);
        let o = Options::parse(&args(
            "--tls --debian-sizing --mpms worker,worker-aa,rworker --keepalive-clients 50,400 \
             --close-clients 50,400 --pair rworker/worker-aa",
        ))
        .expect("parse");
        assert!(o.tls && o.debian_sizing);
        assert_eq!(o.clients_for(ConnMode::Close), &[50, 400]);
        for bad in ["--tls --percon", "--tls --memory", "--percon --tls"] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        for bad in [
            "--mpms prefork",
            "--sizes 1,x",
            "--duration",
            "--duration 0.2",
            "--duration 0",
            "--clients 0",
            "--bogus",
            "--path nope",
            "--modes sometimes",
        ] {
            assert!(Options::parse(&args(bad)).is_err(), "{bad} was accepted");
        }
    }
}
