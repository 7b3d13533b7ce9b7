//! The MPMs under test: which config template each uses and how to recognise it running.

use crate::error::{Error, Result};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Debian's stock worker MPM, which `worker` loads and `worker-aa` copies.
pub const STOCK_WORKER_SO: &str = "/usr/lib/apache2/modules/mod_mpm_worker.so";
/// Debian's stock event MPM.
pub const STOCK_EVENT_SO: &str = "/usr/lib/apache2/modules/mod_mpm_event.so";

/// One of the configurations the A/B matrix compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MpmKind {
    /// Debian's stock worker MPM (`mod_mpm_worker.so`): the reference.
    Worker,
    /// The stock worker again, loaded from a byte-identical copy of its `.so` under another
    /// file name: `worker-aa` / `worker` is the A/A pair, whose ratios show the run's noise.
    WorkerAa,
    /// Debian's stock event MPM (`mod_mpm_event.so`).
    Event,
    /// rworker with httpd's own mutex + condvar fdqueue (`RWorkerQueue apr`).
    RworkerApr,
    /// rworker as the module sets itself up without any rworker directive: its own
    /// atomics-based queue, and the module's default keep-alive mode (`park` since it became
    /// the default; the server-start check reports which one ran).
    Rworker,
    /// rworker with a worker thread holding each keep-alive connection
    /// (`RWorkerKeepAlive thread`, the stock worker's way).
    RworkerThread,
    /// rworker parking idle connections (`RWorkerKeepAlive park`, explicitly; the same
    /// configuration as `rworker` while park is the module's default).
    RworkerPark,
    /// rworker with the listener thread's hand-off instead of idle workers accepting
    /// (`RWorkerAccept listener`): the stock worker's process model on rworker's queue.
    RworkerListener,
    /// `rworker-park` from another build of the module (`--baseline-so`): a before/after
    /// comparison in the same interleaved run.
    RworkerParkBase,
}

impl MpmKind {
    /// All kinds, in the order tables and charts list them.
    pub const ALL: [MpmKind; 9] = [
        MpmKind::Worker,
        MpmKind::WorkerAa,
        MpmKind::Event,
        MpmKind::RworkerApr,
        MpmKind::RworkerListener,
        MpmKind::Rworker,
        MpmKind::RworkerThread,
        MpmKind::RworkerPark,
        MpmKind::RworkerParkBase,
    ];

    /// The kinds a run compares when `--mpms` is not given (`rworker-listener` only on
    /// request: it isolates the accept path, see the README; `rworker-park` no more, since
    /// `rworker` parks by default: `rworker-thread` is the other keep-alive mode).
    pub const DEFAULT: [MpmKind; 5] = [
        MpmKind::Worker,
        MpmKind::Event,
        MpmKind::RworkerApr,
        MpmKind::Rworker,
        MpmKind::RworkerThread,
    ];

    /// The name used on the command line, in CSVs and tables.
    pub fn label(self) -> &'static str {
        match self {
            MpmKind::Worker => "worker",
            MpmKind::WorkerAa => "worker-aa",
            MpmKind::Event => "event",
            MpmKind::RworkerApr => "rworker-apr",
            MpmKind::Rworker => "rworker",
            MpmKind::RworkerThread => "rworker-thread",
            MpmKind::RworkerPark => "rworker-park",
            MpmKind::RworkerListener => "rworker-listener",
            MpmKind::RworkerParkBase => "rworker-park-base",
        }
    }

    /// The MPM-specific config template in `apache-conf/ab/` (embedded at build time).
    pub fn template(self) -> &'static str {
        match self {
            MpmKind::Worker => include_str!("../../apache-conf/ab/worker.conf.in"),
            MpmKind::WorkerAa => include_str!("../../apache-conf/ab/worker-aa.conf.in"),
            MpmKind::Event => include_str!("../../apache-conf/ab/event.conf.in"),
            MpmKind::RworkerApr => include_str!("../../apache-conf/ab/rworker-apr.conf.in"),
            MpmKind::Rworker => include_str!("../../apache-conf/ab/rworker.conf.in"),
            MpmKind::RworkerThread => {
                include_str!("../../apache-conf/ab/rworker-thread.conf.in")
            }
            MpmKind::RworkerPark | MpmKind::RworkerParkBase => {
                include_str!("../../apache-conf/ab/rworker-park.conf.in")
            }
            MpmKind::RworkerListener => {
                include_str!("../../apache-conf/ab/rworker-listener.conf.in")
            }
        }
    }

    /// Whether the template loads rworker's module (and so needs its `.so` path).
    pub fn is_rworker(self) -> bool {
        matches!(
            self,
            MpmKind::RworkerApr
                | MpmKind::Rworker
                | MpmKind::RworkerThread
                | MpmKind::RworkerPark
                | MpmKind::RworkerListener
                | MpmKind::RworkerParkBase
        )
    }

    /// Whether the kind loads the baseline build of the module (`--baseline-so`).
    pub fn is_baseline(self) -> bool {
        self == MpmKind::RworkerParkBase
    }

    /// Whether the kind's template loads a module file the runner provides (a private copy:
    /// rworker's, the baseline's, or worker-aa's copy of the stock worker) rather than one of
    /// Debian's own paths.
    pub fn loads_copy(self) -> bool {
        self.is_rworker() || self == MpmKind::WorkerAa
    }

    /// The module file the running server must have mapped: Debian's for the stock kinds,
    /// else `copy`, the file the runner filled into the template.
    pub fn module_file(self, copy: &Path) -> &Path {
        match self {
            MpmKind::Worker => Path::new(STOCK_WORKER_SO),
            MpmKind::Event => Path::new(STOCK_EVENT_SO),
            _ => copy,
        }
    }

    /// What `server-status?auto` must show as `ServerMPM:`.
    pub fn server_mpm(self) -> &'static str {
        match self {
            MpmKind::Worker | MpmKind::WorkerAa => "worker",
            MpmKind::Event => "event",
            MpmKind::RworkerApr
            | MpmKind::Rworker
            | MpmKind::RworkerThread
            | MpmKind::RworkerPark
            | MpmKind::RworkerListener
            | MpmKind::RworkerParkBase => "rworker",
        }
    }

    /// For rworker: the text its AH00294 start-up line carries at `mpm_rworker:debug`.
    pub fn queue_log(self) -> Option<&'static str> {
        match self {
            MpmKind::RworkerApr => Some("rworker: Apr queue"),
            MpmKind::Rworker
            | MpmKind::RworkerThread
            | MpmKind::RworkerPark
            | MpmKind::RworkerListener
            | MpmKind::RworkerParkBase => Some("rworker: Atomic queue"),
            MpmKind::Worker | MpmKind::WorkerAa | MpmKind::Event => None,
        }
    }

    /// Whether the server must hand idle keep-alive connections back to the MPM between
    /// requests (an async MPM: `server-status?auto` then has `ConnsAsyncKeepAlive`):
    /// `Some(true)` for event and a template with `RWorkerKeepAlive park`, `Some(false)` for
    /// the stock worker and a template with `RWorkerKeepAlive thread`, `None` for an rworker
    /// template without the directive: the module's default, which the start-up check
    /// reports rather than requires.
    pub fn parks(self) -> Option<bool> {
        match self {
            MpmKind::Event => Some(true),
            MpmKind::Worker | MpmKind::WorkerAa => Some(false),
            _ => self.template().lines().find_map(|l| {
                match l.split_whitespace().collect::<Vec<_>>()[..] {
                    ["RWorkerKeepAlive", mode] => Some(mode.eq_ignore_ascii_case("park")),
                    _ => None,
                }
            }),
        }
    }
}

impl fmt::Display for MpmKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

impl FromStr for MpmKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        MpmKind::ALL
            .into_iter()
            .find(|k| k.label() == s.trim())
            .ok_or_else(|| {
                let all: Vec<&str> = MpmKind::ALL.iter().map(|k| k.label()).collect();
                Error(format!(
                    "unknown MPM {s:?}: expected one of {}",
                    all.join(", ")
                ))
            })
    }
}

/// Two kinds compared run by run (`--pair A/B`): ratios `A / B`.
pub type Pair = (MpmKind, MpmKind);

/// Parses `A/B` (two kinds, not the same one).
pub fn parse_pair(s: &str) -> Result<Pair> {
    let Some((a, b)) = s.split_once('/') else {
        return Err(Error(format!(
            "pair {s:?}: expected A/B, two MPM kinds (e.g. rworker/rworker-thread)"
        )));
    };
    let (a, b): (MpmKind, MpmKind) = (a.parse()?, b.parse()?);
    if a == b {
        return Err(Error(format!("pair {s:?}: {a} against itself")));
    }
    Ok((a, b))
}

/// The A/A pair: the stock worker from its copy against itself.
pub const AA_PAIR: Pair = (MpmKind::WorkerAa, MpmKind::Worker);

/// The module files a run's servers load from private copies, per kind.
#[derive(Clone, Debug, Default)]
pub struct Modules {
    /// rworker's module (every rworker kind but the baseline).
    pub rworker: PathBuf,
    /// Another build of it, for `rworker-park-base` (`--baseline-so`).
    pub baseline: Option<PathBuf>,
    /// The byte-identical copy of [`STOCK_WORKER_SO`] that `worker-aa` loads.
    pub worker_aa: Option<PathBuf>,
}

impl Modules {
    /// The file `kind`'s template loads through `@RWORKER_SO@` / `@WORKER_AA_SO@`; for the
    /// stock kinds (which load Debian's files by their own paths) rworker's, unused. An error
    /// when the kind needs a copy the run did not make.
    pub fn for_kind(&self, kind: MpmKind) -> Result<&Path> {
        let missing = |what: &str| Error(format!("{kind} needs {what}, which this run lacks"));
        match kind {
            MpmKind::RworkerParkBase => self
                .baseline
                .as_deref()
                .ok_or_else(|| missing("--baseline-so PATH (another build of the module)")),
            MpmKind::WorkerAa => self
                .worker_aa
                .as_deref()
                .ok_or_else(|| missing("a copy of mod_mpm_worker.so")),
            _ => Ok(&self.rworker),
        }
    }
}

/// The MPM order of repetition `rep` (from 0): `mpms` rotated by one each repetition, so
/// A/B/A/B drift cancels.
pub fn rotated(mpms: &[MpmKind], rep: u32) -> Vec<MpmKind> {
    (0..mpms.len())
        .map(|i| mpms[(i + rep as usize) % mpms.len()])
        .collect()
}

/// The shared config template (`apache-conf/ab/common.conf.in`).
pub const COMMON_TEMPLATE: &str = include_str!("../../apache-conf/ab/common.conf.in");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_parses_back() {
        for k in MpmKind::ALL {
            assert_eq!(k.label().parse::<MpmKind>().expect("label"), k);
        }
        let e = "prefork".parse::<MpmKind>().expect_err("not a kind");
        assert!(
            e.0.contains("worker-aa") && e.0.contains("rworker-thread"),
            "{e}"
        );
    }

    #[test]
    fn new_kinds_are_what_they_claim() {
        use MpmKind::*;
        assert_eq!(WorkerAa.server_mpm(), "worker");
        assert!(WorkerAa.loads_copy() && !WorkerAa.is_rworker());
        assert_eq!(WorkerAa.queue_log(), None);
        assert_eq!(RworkerThread.server_mpm(), "rworker");
        assert_eq!(RworkerThread.queue_log(), Some("rworker: Atomic queue"));
        assert_eq!(
            (RworkerThread.parks(), RworkerPark.parks(), Rworker.parks()),
            (Some(false), Some(true), None)
        );
        let copy = Path::new("/tmp/x/mod_mpm_worker-aa.so");
        assert_eq!(WorkerAa.module_file(copy), copy);
        assert_eq!(Worker.module_file(copy), Path::new(STOCK_WORKER_SO));
    }

    #[test]
    fn pairs_parse() {
        assert_eq!(
            parse_pair("rworker/rworker-thread").expect("pair"),
            (MpmKind::Rworker, MpmKind::RworkerThread)
        );
        assert_eq!(parse_pair(" worker-aa / worker ").expect("pair"), AA_PAIR);
        for bad in [
            "rworker",
            "rworker/",
            "rworker/prefork",
            "worker/worker",
            "a/b/c",
        ] {
            assert!(parse_pair(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn modules_per_kind() {
        let m = Modules {
            rworker: PathBuf::from("/r.so"),
            baseline: None,
            worker_aa: Some(PathBuf::from("/aa.so")),
        };
        assert_eq!(
            m.for_kind(MpmKind::RworkerThread).expect("rworker"),
            Path::new("/r.so")
        );
        assert_eq!(
            m.for_kind(MpmKind::WorkerAa).expect("copy"),
            Path::new("/aa.so")
        );
        assert!(m.for_kind(MpmKind::RworkerParkBase).is_err());
        assert!(Modules::default().for_kind(MpmKind::WorkerAa).is_err());
    }
}
