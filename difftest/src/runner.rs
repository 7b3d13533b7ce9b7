//! Running the scenarios: per pair of servers (both started from the site's config, only
//! the MPM differs), each scenario against the reference and rworker at the same time, so
//! that both see the same machine load. Steady scenarios run side by side; exclusive ones
//! (server-wide counts, signals) one at a time on a quiet server. A scenario whose two
//! observations differ runs once more; one that agrees the second time is reported as such.
//! Scenarios that need another site ([`site::Site`]: without mod_reqtimeout) run on a pair
//! of servers started from it, after the full site's.

use crate::mpm::{Mpm, Pair};
use crate::observe::{Observation, HARNESS_ERROR};
use crate::scenarios::{self, Group, Scenario, Target};
use crate::server::Server;
use crate::site::{self, Site};
use crate::status;
use rworker_testkit::wait::wait_until;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Only the scenarios marked fast (CI's subset).
    pub fast: bool,
    /// Only these scenarios (by name), if not empty.
    pub only: Vec<String>,
    pub pairs: Vec<Pair>,
    /// Steady scenarios run at once per pair.
    pub parallel: usize,
    /// rworker's module.
    pub rworker_so: PathBuf,
}

/// How long the runner waits after a scenario that signalled its server.
const AFTER_SIGNAL: Duration = Duration::from_millis(2500);

/// One scenario on one pair.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub scenario: &'static str,
    pub about: &'static str,
    pub pair: Pair,
    pub reference: Observation,
    pub rworker: Observation,
    /// When the first try differed and the second agreed: the first try's two.
    pub first_try: Option<(Observation, Observation)>,
}

impl Outcome {
    pub fn same(&self) -> bool {
        self.reference == self.rworker
    }
}

/// Crash lines found in a server's error log.
pub type Crashes = Vec<(Mpm, Vec<String>)>;

/// One pair's outcomes and crash lines.
type PairResult = Result<(Vec<Outcome>, Crashes), String>;

/// A run's results.
#[derive(Debug)]
pub struct RunReport {
    pub outcomes: Vec<Outcome>,
    /// Crash lines in a server's error log.
    pub crashes: Crashes,
    pub started: SystemTime,
    pub elapsed: Duration,
    pub fast: bool,
    pub scenario_count: usize,
}

/// The scenarios `opts` selects, in table order.
pub fn selected(opts: &Options) -> Vec<Scenario> {
    scenarios::all()
        .into_iter()
        .filter(|s| !opts.fast || s.fast)
        .filter(|s| opts.only.is_empty() || opts.only.iter().any(|n| n == s.name))
        .collect()
}

/// One scenario against one server; a failure of the harness's own is recorded as such.
fn run_one(s: &Scenario, server: &Server) -> Observation {
    let mut o = Observation::new();
    let target = Target { server };
    match catch_unwind(AssertUnwindSafe(|| (s.run)(&target, &mut o))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => o.add(HARNESS_ERROR, e),
        Err(_) => o.add(HARNESS_ERROR, "the scenario panicked"),
    }
    o
}

/// One scenario against both servers at the same time.
fn run_both(s: &Scenario, reference: &Server, rworker: &Server) -> (Observation, Observation) {
    std::thread::scope(|sc| {
        let r = sc.spawn(|| run_one(s, reference));
        let w = run_one(s, rworker);
        let r = r.join().unwrap_or_else(|_| {
            let mut o = Observation::new();
            o.add(HARNESS_ERROR, "the scenario's thread panicked");
            o
        });
        (r, w)
    })
}

/// Steady scenarios, `parallel` at a time; results in the order given.
fn run_steady(
    list: &[&Scenario],
    reference: &Server,
    rworker: &Server,
    parallel: usize,
) -> Vec<(Observation, Observation)> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<(Observation, Observation)>>> =
        Mutex::new(vec![None; list.len()]);
    std::thread::scope(|sc| {
        for _ in 0..parallel.max(1) {
            sc.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(s) = list.get(i) else {
                    return;
                };
                let pair = run_both(s, reference, rworker);
                if let Ok(mut r) = results.lock() {
                    r[i] = Some(pair);
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.unwrap_or_default())
        .collect()
}

/// Waits (up to 45 s) until only the status request itself is busy and no old
/// generation's thread is finishing: what came before cannot show in an exclusive
/// scenario's counts. (Not ConnsTotal: event refreshes it only at its listener's expiry
/// passes, so it can stay stale for a KeepAliveTimeout.)
fn wait_quiet(server: &Server) {
    wait_until(Duration::from_secs(45), || {
        status::fetch(server.ports.plain)
            .is_ok_and(|s| s.get("BusyWorkers") == Some("1") && s.slots('G') == 0)
    });
}

/// One exclusive scenario on quiet servers; the servers started again after a stop.
fn run_exclusive(
    s: &Scenario,
    reference: &mut Server,
    rworker: &mut Server,
) -> Result<(Observation, Observation), String> {
    std::thread::scope(|sc| {
        sc.spawn(|| wait_quiet(reference));
        wait_quiet(rworker);
    });
    let pair = run_both(s, reference, rworker);
    if s.group == Group::Stops {
        reference.ensure_running()?;
        rworker.ensure_running()?;
    }
    if s.signals {
        // A graceful restart's old generation may still accept for up to 2 s (rworker's
        // takeover): a next scenario's connection must reach the new one.
        std::thread::sleep(AFTER_SIGNAL);
    }
    Ok(pair)
}

/// Runs every selected scenario on `pair`: those of each site on a pair of servers started
/// from it, one site after the other.
fn run_pair(
    pair: Pair,
    list: &[&Scenario],
    opts: &Options,
    certs: &Path,
    run_dir: &Path,
) -> PairResult {
    let mut outcomes = Vec::new();
    let mut crashes = Vec::new();
    for site in Site::ALL {
        let on_site: Vec<&Scenario> = list.iter().copied().filter(|s| s.site == site).collect();
        if on_site.is_empty() {
            continue;
        }
        let (o, c) = run_site(pair, site, &on_site, opts, certs, run_dir)?;
        outcomes.extend(o);
        crashes.extend(c);
    }
    Ok((outcomes, crashes))
}

/// Runs `list` (scenarios of `site`) on two servers of `pair` started from `site`.
fn run_site(
    pair: Pair,
    site: Site,
    list: &[&Scenario],
    opts: &Options,
    certs: &Path,
    run_dir: &Path,
) -> PairResult {
    let dir = run_dir.join(format!(
        "{}{}",
        pair.name().replace('/', "-"),
        site.suffix()
    ));
    let mut reference = Server::start(pair.reference, site, &opts.rworker_so, certs, &dir)?;
    let mut rworker = Server::start(pair.rworker, site, &opts.rworker_so, certs, &dir)?;
    let steady: Vec<&Scenario> = list
        .iter()
        .copied()
        .filter(|s| s.group == Group::Steady)
        .collect();
    let exclusive: Vec<&Scenario> = list
        .iter()
        .copied()
        .filter(|s| s.group != Group::Steady)
        .collect();

    let mut outcomes: Vec<Outcome> = Vec::new();
    let outcome = |s: &Scenario, (r, w): (Observation, Observation)| Outcome {
        scenario: s.name,
        about: s.about,
        pair,
        reference: r,
        rworker: w,
        first_try: None,
    };
    for (s, obs) in steady
        .iter()
        .zip(run_steady(&steady, &reference, &rworker, opts.parallel))
    {
        outcomes.push(outcome(s, obs));
    }
    for s in &exclusive {
        let obs = run_exclusive(s, &mut reference, &mut rworker)?;
        outcomes.push(outcome(s, obs));
    }

    // A second try for what differed: steady ones side by side again, the rest alone.
    let differing: Vec<usize> = (0..outcomes.len())
        .filter(|&i| !outcomes[i].same())
        .collect();
    let again_steady: Vec<&Scenario> = differing
        .iter()
        .filter_map(|&i| {
            steady
                .iter()
                .copied()
                .find(|s| s.name == outcomes[i].scenario)
        })
        .collect();
    let mut second: Vec<(&'static str, (Observation, Observation))> = again_steady
        .iter()
        .map(|s| s.name)
        .zip(run_steady(
            &again_steady,
            &reference,
            &rworker,
            opts.parallel,
        ))
        .collect();
    for &i in &differing {
        if let Some(s) = exclusive
            .iter()
            .copied()
            .find(|s| s.name == outcomes[i].scenario)
        {
            second.push((s.name, run_exclusive(s, &mut reference, &mut rworker)?));
        }
    }
    for (name, (r, w)) in second {
        if let Some(o) = outcomes.iter_mut().find(|o| o.scenario == name) {
            if r == w {
                let first = (
                    std::mem::replace(&mut o.reference, r),
                    std::mem::replace(&mut o.rworker, w),
                );
                o.first_try = Some(first);
            }
        }
    }

    let crashes = [&reference, &rworker]
        .iter()
        .map(|s| (s.mpm, s.crash_lines()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    reference.stop();
    rworker.stop();
    Ok((outcomes, crashes))
}

/// Runs the selected scenarios on every pair of `opts`, the pairs side by side, in a
/// private directory under the system's temp dir (removed after a run without crash).
pub fn run(opts: &Options) -> Result<RunReport, String> {
    let started = SystemTime::now();
    let t0 = Instant::now();
    let scenarios = selected(opts);
    if scenarios.is_empty() {
        return Err("no scenario selected".into());
    }
    let list: Vec<&Scenario> = scenarios.iter().collect();
    let run_dir = std::env::temp_dir().join(format!("rworker-diff-{}", std::process::id()));
    std::fs::create_dir_all(&run_dir).map_err(|e| format!("mkdir {}: {e}", run_dir.display()))?;
    // The children (www-data) traverse the ServerRoots below.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&run_dir, std::fs::Permissions::from_mode(0o755));
    let certs = run_dir.join("certs");
    site::make_certificate(&certs)?;

    let per_pair: Vec<PairResult> = std::thread::scope(|sc| {
        let handles: Vec<_> = opts
            .pairs
            .iter()
            .map(|&p| {
                let (list, certs, run_dir) = (&list, &certs, &run_dir);
                sc.spawn(move || run_pair(p, list, opts, certs, run_dir))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a pair's runner panicked".into()))
            })
            .collect()
    });
    let mut outcomes = Vec::new();
    let mut crashes = Vec::new();
    for r in per_pair {
        let (o, c) = r.map_err(|e| {
            format!(
                "{e} (ServerRoots and logs kept under {})",
                run_dir.display()
            )
        })?;
        outcomes.extend(o);
        crashes.extend(c);
    }
    // Table order: scenario order, then pair order.
    let order = |name: &str| {
        scenarios
            .iter()
            .position(|s| s.name == name)
            .unwrap_or(usize::MAX)
    };
    outcomes.sort_by_key(|o| {
        (
            order(o.scenario),
            opts.pairs.iter().position(|p| *p == o.pair),
        )
    });
    if crashes.is_empty() {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    Ok(RunReport {
        outcomes,
        crashes,
        started,
        elapsed: t0.elapsed(),
        fast: opts.fast,
        scenario_count: scenarios.len(),
    })
}
