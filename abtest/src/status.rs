//! `server-status?auto`: the `Key: value` lines, and rworker's own counters among them.
//!
//! rworker adds `RWorkerConnections`, `RWorkerHandoffs`, `RWorkerFutexWakes`, ... to the
//! `?auto` page (whatever `ExtendedStatus` says); the stock MPMs have none of them, so every
//! reading here is an `Option`, and a missing key is never an error.

use crate::error::Result;
use crate::server::http_get;
use std::collections::BTreeMap;

/// Every `Key: value` line of a `?auto` page, by key.
pub fn parse_auto(body: &str) -> BTreeMap<String, String> {
    body.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// rworker's server-wide totals (sums over every child's row) at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RworkerCounters {
    /// `RWorkerConnections`: connections accepted.
    pub connections: u64,
    /// `RWorkerHandoffs`: connections handed from the listener to a worker.
    pub handoffs: u64,
    /// `RWorkerFutexWakes`: futex wake calls made by the hand-off and idle-worker paths.
    pub futex_wakes: u64,
}

impl RworkerCounters {
    /// The counters in a parsed `?auto` page; `None` unless all three keys are there and
    /// numeric (a stock MPM, or an rworker build that does not publish them).
    pub fn from_auto(keys: &BTreeMap<String, String>) -> Option<RworkerCounters> {
        let num = |k: &str| keys.get(k)?.parse::<u64>().ok();
        Some(RworkerCounters {
            connections: num("RWorkerConnections")?,
            handoffs: num("RWorkerHandoffs")?,
            futex_wakes: num("RWorkerFutexWakes")?,
        })
    }

    /// `self - before`, counter by counter (0 where a counter went backwards: a child was
    /// replaced and its row started again).
    pub fn since(&self, before: &RworkerCounters) -> RworkerCounters {
        RworkerCounters {
            connections: self.connections.saturating_sub(before.connections),
            handoffs: self.handoffs.saturating_sub(before.handoffs),
            futex_wakes: self.futex_wakes.saturating_sub(before.futex_wakes),
        }
    }

    /// Futex wakes per hand-off (NaN without hand-offs), what `RWorkerWakesPerHandoff` shows
    /// for the totals.
    pub fn wakes_per_handoff(&self) -> f64 {
        if self.handoffs == 0 {
            f64::NAN
        } else {
            self.futex_wakes as f64 / self.handoffs as f64
        }
    }
}

/// Reads `/server-status?auto` on 127.0.0.1:`port` (over TLS if `tls`): the page's keys. An
/// error only if the page cannot be fetched or is not a 200.
pub fn read_auto(port: u16, tls: bool) -> Result<BTreeMap<String, String>> {
    let (status, body) = http_get(port, tls, "/server-status?auto")?;
    if status != 200 {
        crate::bail!("GET /server-status?auto on port {port} gave {status}");
    }
    Ok(parse_auto(&body))
}

/// rworker's counters on 127.0.0.1:`port` (over TLS if `tls`), `None` when the server does not
/// publish them (or the page cannot be read: these figures are an addition to a run, never a
/// reason to fail it).
pub fn rworker_counters(port: u16, tls: bool) -> Option<RworkerCounters> {
    RworkerCounters::from_auto(&read_auto(port, tls).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RWORKER_AUTO: &str = "localhost\nServerVersion: Apache/2.4.62 (Debian)\n\
        ServerMPM: rworker\nBusyWorkers: 1\nIdleWorkers: 49\n\
        Scoreboard: _W__\nRWorkerConnections: 120\nRWorkerHandoffs: 120\n\
        RWorkerFutexWakes: 30\nRWorkerPoolsReused: 100\nRWorkerPoolsCreated: 20\n\
        RWorkerIdleWorkers: 49\nRWorkerWakesPerHandoff: 0.250\nRWorkerChildren: 1\n";

    #[test]
    fn rworker_keys_are_read_and_subtracted() {
        let keys = parse_auto(RWORKER_AUTO);
        assert_eq!(keys.get("ServerMPM").map(String::as_str), Some("rworker"));
        let after = RworkerCounters::from_auto(&keys).expect("rworker keys");
        assert_eq!(
            after,
            RworkerCounters {
                connections: 120,
                handoffs: 120,
                futex_wakes: 30
            }
        );
        let before = RworkerCounters {
            connections: 20,
            handoffs: 20,
            futex_wakes: 5,
        };
        let d = after.since(&before);
        assert_eq!((d.connections, d.handoffs, d.futex_wakes), (100, 100, 25));
        assert!((d.wakes_per_handoff() - 0.25).abs() < 1e-12);
        assert!(RworkerCounters::default().wakes_per_handoff().is_nan());
        // A counter that went backwards (a replaced child) is a zero delta, not a wrap.
        assert_eq!(before.since(&after).handoffs, 0);
    }

    #[test]
    fn stock_mpm_pages_have_no_rworker_counters() {
        let stock = "localhost\nServerMPM: worker\nBusyWorkers: 1\nScoreboard: _W\n";
        assert_eq!(RworkerCounters::from_auto(&parse_auto(stock)), None);
        // Half the keys, or a non-number, is as good as none.
        let partial = "RWorkerHandoffs: 3\nRWorkerFutexWakes: x\nRWorkerConnections: 3\n";
        assert_eq!(RworkerCounters::from_auto(&parse_auto(partial)), None);
        assert!(parse_auto("").is_empty());
    }
}
