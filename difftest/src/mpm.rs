//! The four servers of a run and how they pair up.

use std::fmt;
use std::path::Path;

use rworker_testkit::install::stock_module;

/// One MPM configuration: what fills the site's `@MPM@` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mpm {
    /// Debian's default MPM.
    Event,
    /// The stock worker MPM.
    Worker,
    /// rworker as it comes, with no `RWorkerKeepAlive` line: its default, `park`.
    RworkerPark,
    /// rworker with `RWorkerKeepAlive thread` (the stock worker's way).
    RworkerThread,
}

impl Mpm {
    /// A short label for tables and directory names.
    pub fn label(self) -> &'static str {
        match self {
            Mpm::Event => "event",
            Mpm::Worker => "worker",
            Mpm::RworkerPark => "rworker park",
            Mpm::RworkerThread => "rworker thread",
        }
    }

    /// The lines that load this MPM; `rworker_so` is rworker's module.
    pub fn conf_lines(self, rworker_so: &Path) -> String {
        let so = rworker_so.display();
        match self {
            Mpm::Event => format!(
                "LoadModule mpm_event_module {}",
                stock_module("mpm_event").display()
            ),
            Mpm::Worker => format!(
                "LoadModule mpm_worker_module {}",
                stock_module("mpm_worker").display()
            ),
            // The default mode: no RWorkerKeepAlive line, so that the harness compares what
            // an administrator gets by loading the module.
            Mpm::RworkerPark => format!("LoadModule mpm_rworker_module {so}"),
            Mpm::RworkerThread => {
                format!("LoadModule mpm_rworker_module {so}\nRWorkerKeepAlive thread")
            }
        }
    }

    /// Whether it is an async MPM (mod_status shows its "Async connections" keys): checked
    /// at start with [`Mpm::server_mpm`], so that rworker runs in the mode compared.
    pub fn is_async(self) -> bool {
        matches!(self, Mpm::Event | Mpm::RworkerPark)
    }

    /// What mod_status's `ServerMPM:` says for it: checked at start, so that a run never
    /// compares a server with itself.
    pub fn server_mpm(self) -> &'static str {
        match self {
            Mpm::Event => "event",
            Mpm::Worker => "worker",
            Mpm::RworkerPark | Mpm::RworkerThread => "rworker",
        }
    }
}

impl fmt::Display for Mpm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A stock MPM and the rworker mode that replaces it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pair {
    pub reference: Mpm,
    pub rworker: Mpm,
}

impl Pair {
    /// Stock event against rworker's default (park); stock worker against rworker's
    /// `thread` mode.
    pub const ALL: [Pair; 2] = [
        Pair {
            reference: Mpm::Event,
            rworker: Mpm::RworkerPark,
        },
        Pair {
            reference: Mpm::Worker,
            rworker: Mpm::RworkerThread,
        },
    ];

    /// `event/park`, `worker/thread`: how tables, options and the expected list name it.
    pub fn name(self) -> &'static str {
        match (self.reference, self.rworker) {
            (Mpm::Event, Mpm::RworkerPark) => "event/park",
            (Mpm::Worker, Mpm::RworkerThread) => "worker/thread",
            _ => "other",
        }
    }

    /// The pair named `name` ([`Pair::name`]).
    pub fn by_name(name: &str) -> Option<Pair> {
        Pair::ALL.into_iter().find(|p| p.name() == name)
    }
}
