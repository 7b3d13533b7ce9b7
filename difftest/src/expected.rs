//! The differences we know of, each with its reason: a defect to fix (the test still
//! passes, and the table says so) or a deliberate choice that docs/design.md ("Where
//! rworker differs from the stock MPMs, and why") argues for. Any other difference fails the
//! CI subset.

/// Why rworker differs there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A defect, being fixed: the entry goes when the fix lands.
    Defect,
    /// On purpose: better for a user (docs/design.md says why).
    Deliberate,
}

/// One known difference.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    pub scenario: &'static str,
    /// [`crate::mpm::Pair::name`].
    pub pair: &'static str,
    pub kind: Kind,
    pub why: &'static str,
}

/// Deliberate: park's stop grace for idle keep-alive connections (docs/design.md).
const ONE_MORE_REQUEST_PARK: &str = "at a graceful restart or stop, park gives an idle keep-alive connection 1 s (STOP_KEEP_ALIVE) for one more request, answered with Connection: close; event closes it at once (h2: GOAWAY at once), so a request sent then meets a FIN.";

/// Deliberate: thread's stop grace for a connection that was promised keep-alive.
const ONE_MORE_REQUEST_THREAD: &str = "at a graceful restart or stop, thread waits up to KeepAliveTimeout for one more request on a connection whose response promised keep-alive, answered with Connection: close; the stock worker closes it after the response.";

/// Deliberate: GracefulShutdownTimeout in the children (docs/design.md, "Process model").
const CHILDREN_HONOUR_GRACEFUL_SHUTDOWN: &str = "rworker's children honour GracefulShutdownTimeout (3 s): what is still open then is cut; the stock MPM's child kept it past that (an idle connection until its KeepAliveTimeout, a download to its end).";

/// Deliberate: park reads a request head without a thread (docs/design.md, "Request heads
/// without a thread").
const HEAD_PARKED: &str = "park reads a request head without a thread: a connection whose head is still arriving waits parked (ConnsTotal), not on a worker in R; event's worker reads it.";

/// Deliberate: park reads h2's preface whole before mod_http2 peeks at it.
const PREFACE_READ_WHOLE: &str = "park hands the core a head once it can decide on it, and h2's 24-byte preface is such a head: a dribbled preface is h2c, as event serves it when the preface comes in one read; event's mod_http2 looks at its first read only and answers the rest as HTTP/1 (400).";

/// Every known difference.
pub const KNOWN: &[Known] = &[
    Known {
        scenario: "status-counts",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: HEAD_PARKED,
    },
    Known {
        scenario: "h2c-preface-dribbled",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: PREFACE_READ_WHOLE,
    },
    Known {
        scenario: "ka-idle+graceful",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "ka-idle+graceful-stop",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "ka-next+graceful",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "ka-next+graceful-stop",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "slow-body+graceful",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "slow-body+graceful-stop",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "h2-idle+graceful",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "h2-idle+graceful-stop",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_PARK,
    },
    Known {
        scenario: "slow-body+graceful",
        pair: "worker/thread",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_THREAD,
    },
    Known {
        scenario: "slow-body+graceful-stop",
        pair: "worker/thread",
        kind: Kind::Deliberate,
        why: ONE_MORE_REQUEST_THREAD,
    },
    Known {
        scenario: "ka-idle+graceful-stop",
        pair: "worker/thread",
        kind: Kind::Deliberate,
        why: CHILDREN_HONOUR_GRACEFUL_SHUTDOWN,
    },
    Known {
        scenario: "download+graceful-stop",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: CHILDREN_HONOUR_GRACEFUL_SHUTDOWN,
    },
    Known {
        scenario: "h2-idle+graceful-stop",
        pair: "worker/thread",
        kind: Kind::Deliberate,
        why: CHILDREN_HONOUR_GRACEFUL_SHUTDOWN,
    },
    Known {
        scenario: "download+graceful-stop",
        pair: "worker/thread",
        kind: Kind::Deliberate,
        why: CHILDREN_HONOUR_GRACEFUL_SHUTDOWN,
    },
    Known {
        scenario: "download-sendfile+graceful-stop",
        pair: "event/park",
        kind: Kind::Deliberate,
        why: CHILDREN_HONOUR_GRACEFUL_SHUTDOWN,
    },
    Known {
        scenario: "download-sendfile+graceful-stop",
        pair: "worker/thread",
        kind: Kind::Deliberate,
        why: CHILDREN_HONOUR_GRACEFUL_SHUTDOWN,
    },
];

/// The entry for `scenario` on `pair`, if any.
pub fn lookup(scenario: &str, pair: &str) -> Option<&'static Known> {
    KNOWN
        .iter()
        .find(|k| k.scenario == scenario && k.pair == pair)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpm::Pair;

    /// Every entry names a scenario and a pair that exist.
    #[test]
    fn entries_name_real_scenarios() {
        let names: Vec<&str> = crate::scenarios::all().iter().map(|s| s.name).collect();
        for k in KNOWN {
            assert!(
                names.contains(&k.scenario),
                "unknown scenario {}",
                k.scenario
            );
            assert!(Pair::by_name(k.pair).is_some(), "unknown pair {}", k.pair);
            assert!(!k.why.is_empty());
        }
    }
}
