//! `--memory`: resident memory per idle keep-alive connection, for MPMs that hold idle
//! connections without a thread each (the stock event MPM, rworker with
//! `RWorkerKeepAlive park`).
//!
//! Each repetition (MPM order rotated, as in the matrix) starts a private server from the A/B
//! templates (`--max-workers`, default 150: six children of 25 threads, all started), warms
//! it with a few requests, and sums `VmRSS` over its children; then opens `--clients`
//! connections that each send one keep-alive request, read the 200 and stay open; once
//! `server-status?auto` shows them all parked (`ConnsAsyncKeepAlive`; rworker only, event's
//! stays 0 here), sums `VmRSS` again.
//! The difference divided by the connection count is the figure: memory for the connection's
//! socket buffers is the kernel's and not in it; its pool, its `conn_rec`, the filters'
//! state and the poll set's entry are.

use crate::error::{Error, Result};
use crate::mpm::{rotated, Modules, MpmKind};
use crate::options::Options;
use crate::plan::worker_limit;
use crate::server::{http_get, payload_path, Server};
use crate::shutdown;
use crate::status::parse_auto;
use rworker_testkit::procfs;
use rworker_testkit::wait::wait_until;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One repetition's reading.
#[derive(Clone, Debug)]
pub struct Reading {
    pub mpm: MpmKind,
    pub rep: u32,
    pub connections: usize,
    /// Sum of the children's VmRSS before and with the idle connections, kB.
    pub rss_before_kb: u64,
    pub rss_after_kb: u64,
    /// `ConnsAsyncKeepAlive` when the second reading was taken.
    pub parked: u64,
}

impl Reading {
    /// kB per idle connection.
    pub fn per_connection_kb(&self) -> f64 {
        (self.rss_after_kb as f64 - self.rss_before_kb as f64) / self.connections as f64
    }
}

/// The sum of `VmRSS` over `parent`'s children, kB.
fn children_rss_kb(parent: i32) -> u64 {
    procfs::live_children(parent)
        .iter()
        .filter_map(|&c| std::fs::read_to_string(format!("/proc/{c}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .sum()
}

/// A connection that sent one keep-alive request and read its 200 response.
fn idle_connection(port: u16, path: &str) -> Result<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| Error(format!("connect 127.0.0.1:{port}: {e}")))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .map_err(|e| Error(format!("send: {e}")))?;
    let mut r = BufReader::new(&s);
    let mut status = String::new();
    r.read_line(&mut status)
        .map_err(|e| Error(format!("read: {e}")))?;
    if !status.starts_with("HTTP/1.1 200") {
        return Err(Error(format!("GET {path}: {}", status.trim())));
    }
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line)
            .map_err(|e| Error(format!("read: {e}")))?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    r.read_exact(&mut body)
        .map_err(|e| Error(format!("read body: {e}")))?;
    Ok(s)
}

/// `ConnsAsyncKeepAlive` now (0 when absent).
fn parked(port: u16) -> u64 {
    http_get(port, false, "/server-status?auto")
        .ok()
        .and_then(|(_, body)| parse_auto(&body).get("ConnsAsyncKeepAlive")?.parse().ok())
        .unwrap_or(0)
}

/// Runs every repetition.
pub fn run(
    opts: &Options,
    modules: &Modules,
    mut progress: impl FnMut(&str),
) -> Result<Vec<Reading>> {
    let n = opts.clients[0] as usize;
    let path = payload_path(1);
    let overrides = worker_limit(opts.max_workers.unwrap_or(150));
    let mut out = Vec::new();
    for rep in 0..opts.reps {
        for mpm in rotated(&opts.mpms, rep) {
            if shutdown::interrupted() {
                return Err(Error("interrupted".into()));
            }
            let so = modules.for_kind(mpm)?;
            let (server, what) = Server::start_with(mpm, &[1], so, &overrides, None)?;
            progress(&format!(
                "rep {}/{} {mpm}: started pid {} on port {}; verified {what}",
                rep + 1,
                opts.reps,
                server.parent,
                server.port
            ));
            for _ in 0..50 {
                http_get(server.port, false, &path)?;
            }
            std::thread::sleep(Duration::from_secs(2));
            let rss_before_kb = children_rss_kb(server.parent);
            let mut conns = Vec::with_capacity(n);
            for _ in 0..n {
                conns.push(idle_connection(server.port, &path)?);
            }
            // Parked counts are published once a second; the status request's own
            // connection may add one. (The stock event MPM's `?auto` counts stayed 0 here,
            // so only rworker's are checked; `rworker` takes the module's default mode, park
            // now, and fails here if a build's default does not park.)
            let must_park = mpm.is_rworker() && mpm.parks() != Some(false);
            let all_parked = !must_park
                || wait_until(Duration::from_secs(10), || parked(server.port) >= n as u64);
            std::thread::sleep(Duration::from_secs(1));
            let reading = Reading {
                mpm,
                rep: rep + 1,
                connections: n,
                rss_before_kb,
                rss_after_kb: children_rss_kb(server.parent),
                parked: parked(server.port),
            };
            drop(conns);
            if !all_parked {
                let conns = http_get(server.port, false, "/server-status?auto")
                    .map(|(_, body)| {
                        body.lines()
                            .filter(|l| l.starts_with("Conns"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    })
                    .unwrap_or_default();
                return Err(Error(format!(
                    "{mpm}: {} of {n} idle connections parked after 10 s (does it park?): {conns}",
                    reading.parked
                )));
            }
            server.stop()?;
            progress(&format!(
                "rep {}/{} {mpm}: {:.1} kB per idle connection ({} -> {} kB over the children, {} parked)",
                rep + 1,
                opts.reps,
                reading.per_connection_kb(),
                reading.rss_before_kb,
                reading.rss_after_kb,
                reading.parked
            ));
            out.push(reading);
        }
    }
    Ok(out)
}

/// results.md: the command, the machine, every reading and the medians.
pub fn markdown(opts: &Options, readings: &[Reading], machine: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Resident memory per idle keep-alive connection\n");
    let _ = writeln!(
        md,
        "Command (from the repository root):\n\n```sh\n{}\n```\n",
        opts.command_line
    );
    let _ = writeln!(md, "Machine:\n\n```\n{machine}\n```\n");
    let _ = writeln!(
        md,
        "Method: MaxRequestWorkers {} (children of 25 threads, all started); VmRSS summed over the children before and with {} idle keep-alive connections (each sent one request for the 1-byte file and read the 200), 1 s after rworker's `ConnsAsyncKeepAlive` counted them all (the stock event MPM's `?auto` connection counts stayed 0 on this httpd, so for event the reading is taken after the same wait without that check); difference / connections.\n",
        opts.max_workers.unwrap_or(150),
        opts.clients[0]
    );
    let _ = writeln!(
        md,
        "| MPM | kB per idle connection, median (min-max) | readings |"
    );
    let _ = writeln!(md, "|---|---:|---|");
    for mpm in &opts.mpms {
        let mut v: Vec<f64> = readings
            .iter()
            .filter(|r| r.mpm == *mpm)
            .map(Reading::per_connection_kb)
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let median = v[v.len() / 2];
        let all = v
            .iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            md,
            "| {mpm} | {median:.1} ({:.1}-{:.1}) | {all} |",
            v[0],
            v[v.len() - 1]
        );
    }
    let _ = writeln!(md, "\n## Every reading\n");
    let _ = writeln!(md, "| rep | MPM | connections | RSS before, kB | RSS with them, kB | parked | kB / connection |");
    let _ = writeln!(md, "|---:|---|---:|---:|---:|---:|---:|");
    for r in readings {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.1} |",
            r.rep,
            r.mpm,
            r.connections,
            r.rss_before_kb,
            r.rss_after_kb,
            r.parked,
            r.per_connection_kb()
        );
    }
    md
}
