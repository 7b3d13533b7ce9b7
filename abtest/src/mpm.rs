//! The MPMs under test: which config template each uses and how to recognise it running.

use crate::error::{Error, Result};
use std::fmt;
use std::str::FromStr;

/// One of the configurations the A/B matrix compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MpmKind {
    /// Debian's stock worker MPM (`mod_mpm_worker.so`): the reference.
    Worker,
    /// Debian's stock event MPM (`mod_mpm_event.so`).
    Event,
    /// rworker with httpd's own mutex + condvar fdqueue (`RWorkerQueue apr`).
    RworkerApr,
    /// rworker with its own atomics-based queue (`RWorkerQueue atomic`, the default).
    Rworker,
    /// rworker parking idle connections in its listener (`RWorkerKeepAlive park`).
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
    pub const ALL: [MpmKind; 7] = [
        MpmKind::Worker,
        MpmKind::Event,
        MpmKind::RworkerApr,
        MpmKind::RworkerListener,
        MpmKind::Rworker,
        MpmKind::RworkerPark,
        MpmKind::RworkerParkBase,
    ];

    /// The kinds a run compares when `--mpms` is not given (`rworker-listener` only on
    /// request: it isolates the accept path, see the README).
    pub const DEFAULT: [MpmKind; 5] = [
        MpmKind::Worker,
        MpmKind::Event,
        MpmKind::RworkerApr,
        MpmKind::Rworker,
        MpmKind::RworkerPark,
    ];

    /// The name used on the command line, in CSVs and tables.
    pub fn label(self) -> &'static str {
        match self {
            MpmKind::Worker => "worker",
            MpmKind::Event => "event",
            MpmKind::RworkerApr => "rworker-apr",
            MpmKind::Rworker => "rworker",
            MpmKind::RworkerPark => "rworker-park",
            MpmKind::RworkerListener => "rworker-listener",
            MpmKind::RworkerParkBase => "rworker-park-base",
        }
    }

    /// The MPM-specific config template in `apache-conf/ab/` (embedded at build time).
    pub fn template(self) -> &'static str {
        match self {
            MpmKind::Worker => include_str!("../../apache-conf/ab/worker.conf.in"),
            MpmKind::Event => include_str!("../../apache-conf/ab/event.conf.in"),
            MpmKind::RworkerApr => include_str!("../../apache-conf/ab/rworker-apr.conf.in"),
            MpmKind::Rworker => include_str!("../../apache-conf/ab/rworker.conf.in"),
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
                | MpmKind::RworkerPark
                | MpmKind::RworkerListener
                | MpmKind::RworkerParkBase
        )
    }

    /// Whether the kind loads the baseline build of the module (`--baseline-so`).
    pub fn is_baseline(self) -> bool {
        self == MpmKind::RworkerParkBase
    }

    /// What `server-status?auto` must show as `ServerMPM:`.
    pub fn server_mpm(self) -> &'static str {
        match self {
            MpmKind::Worker => "worker",
            MpmKind::Event => "event",
            MpmKind::RworkerApr
            | MpmKind::Rworker
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
            | MpmKind::RworkerPark
            | MpmKind::RworkerListener
            | MpmKind::RworkerParkBase => Some("rworker: Atomic queue"),
            MpmKind::Worker | MpmKind::Event => None,
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
                Error(format!(
                    "unknown MPM {s:?}: expected one of worker, event, rworker-apr, rworker-listener, rworker, rworker-park, rworker-park-base"
                ))
            })
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
