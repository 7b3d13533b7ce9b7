//! mod_status's connection counts: three idle keep-alive connections and one reading a
//! slow head, as `server-status?auto` shows them (the async counts where the MPM has them,
//! the busy workers and the scoreboard's K, R and W slots).

use super::{exchange, Group, Scenario, Target};
use crate::h1::{self, H1};
use crate::observe::Observation;
use crate::status::{self, Status};
use rworker_testkit::wait::wait_until;
use std::time::Duration;

pub fn scenarios() -> Vec<Scenario> {
    vec![Scenario {
        name: "status-counts",
        about: "mod_status with 3 idle keep-alive connections and 1 reading a head",
        group: Group::Exclusive,
        fast: true,
        signals: false,
        run: counts,
    }]
}

/// The counts every MPM keeps current: busy workers and the scoreboard's K, R and W slots
/// (the status request itself is one busy worker, `W`).
fn counts_of(s: &Status) -> String {
    let mut parts = vec![format!(
        "BusyWorkers {}",
        s.get("BusyWorkers").unwrap_or("-")
    )];
    for state in ['K', 'R', 'W'] {
        parts.push(format!("{state} {}", s.slots(state)));
    }
    parts.join(", ")
}

/// The async connection counts (event and rworker park only). Shown, not compared: event
/// writes them into the scoreboard only when its listener processes an expiry, so with
/// idle keep-alive connections and nothing due they lag; rworker's are current
/// (docs/design.md, "Where rworker differs from the stock MPMs, and why").
fn async_counts_of(s: &Status) -> String {
    [
        "ConnsTotal",
        "ConnsAsyncKeepAlive",
        "ConnsAsyncWriting",
        "ConnsAsyncClosing",
    ]
    .iter()
    .filter_map(|k| s.get(k).map(|v| format!("{k} {v}")))
    .collect::<Vec<_>>()
    .join(", ")
}

fn counts(t: &Target, o: &mut Observation) -> Result<(), String> {
    // Idle keep-alive connections (ip.test: KeepAliveTimeout 5, its address's own, so a
    // reading 0.3-2.5 s later is well within any MPM's wait), and one that has sent half a
    // head.
    let mut idle: Vec<H1> = Vec::new();
    for i in 1..=3 {
        let mut h = t.h1("127.0.0.2")?;
        let req = h1::get("ip.test", "/index.html");
        exchange(o, &format!("connection {i}"), &mut h, &req, 10.0);
        idle.push(h);
    }
    let mut reading = t.h1("127.0.0.1")?;
    reading.send(b"GET /index.html HTTP/1.1\r\nHost: a.test\r\n")?;
    // Parking takes a moment (rworker holds a connection 20 ms before it parks it): two
    // readings 200 ms apart that agree.
    std::thread::sleep(Duration::from_millis(300));
    let mut last = String::new();
    let mut settled = String::new();
    let mut async_counts = String::new();
    wait_until(Duration::from_secs(2), || {
        let now = match status::fetch(t.ports().plain) {
            Ok(s) => {
                async_counts = async_counts_of(&s);
                counts_of(&s)
            }
            Err(e) => e,
        };
        let same = now == last;
        last = now;
        if same {
            settled = last.clone();
        }
        same
    });
    if settled.is_empty() {
        settled = format!("unsettled, last {last}");
    }
    o.add("server-status", settled);
    if !async_counts.is_empty() {
        o.note("async", async_counts);
    }
    drop(idle);
    drop(reading);
    Ok(())
}
