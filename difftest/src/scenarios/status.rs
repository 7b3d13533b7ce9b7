//! mod_status's connection counts: three idle keep-alive connections and one reading a
//! slow head, as `server-status?auto` shows them (the async counts where the MPM has them,
//! the busy workers and the scoreboard's K, R and W slots); and a slow download with
//! `EnableSendfile On`, which holds a worker under the stock worker and `thread` but not
//! under event and `park`, whose write completion waits in the poll set.

use super::{exchange, Group, Scenario, Target};
use crate::h1::{self, H1};
use crate::observe::Observation;
use crate::site::{Site, LARGE_SENDFILE};
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
        site: Site::Full,
        run: counts,
    },
    Scenario {
        name: "status-download-sendfile",
        about: "mod_status 1 s into 8 MiB with EnableSendfile On read 128 kB per 40 ms: does the download hold a worker?",
        group: Group::Exclusive,
        fast: true,
        signals: false,
        site: Site::Full,
        run: download_sendfile,
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
    settled_counts(t, o);
    drop(idle);
    drop(reading);
    Ok(())
}

/// Readings of server-status until two in a row agree (for 2 s): the busy workers and
/// slots compared, the async counts noted.
fn settled_counts(t: &Target, o: &mut Observation) {
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
}

/// 8 MiB from the sendfile location to a reader of 128 kB per 40 ms through a 64 kB window
/// (2.6 s at least); server-status 1 s in. The status request is one busy worker (`W`); the
/// download another where it holds one (a worker's blocking writes), none where write
/// completion waits for writability in the poll set. (With sendfile off every MPM holds a
/// worker: the core writes the file blocking inside the handler.)
fn download_sendfile(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1_small_window("127.0.0.1")?;
    h.set_pace(128 * 1024, Duration::from_millis(40));
    h.send(&h1::get("a.test", LARGE_SENDFILE))?;
    let download = std::thread::scope(|sc| {
        let reader = sc.spawn(|| match h.read_response(super::after(60.0)) {
            Ok(r) => r.summary(),
            Err(cut) => cut.describe(),
        });
        std::thread::sleep(Duration::from_secs(1));
        settled_counts(t, o);
        reader
            .join()
            .unwrap_or_else(|_| "the reader panicked".into())
    });
    o.add("download", download);
    Ok(())
}
