//! The scenarios: what each does as a client, and what it records. Each runs against one
//! server (a [`Target`]) and fills an [`Observation`]; the runner runs it against the
//! reference and rworker at the same time and compares the two.
//!
//! - [`keepalive`]: KeepAliveTimeout, Timeout, MaxKeepAliveRequests, `KeepAlive Off`, in the
//!   server config and in name-based, IP-based and SNI-chosen TLS vhosts; HTTP/1.0.
//! - [`reqtimeout`]: mod_reqtimeout on slow request lines, heads and bodies, defaults and
//!   explicit values; TLS handshakes that never finish.
//! - [`head`]: request heads dribbled a byte per write, split at awkward places, at
//!   LimitRequestLine, LimitRequestFieldSize, LimitRequestFields and one over, HTTP/1.0 and
//!   0.9, blank lines first, with their body; not HTTP (a ClientHello, mod_echo).
//! - [`proxy`]: the PROXY protocol, v1 and v2, in one write and dribbled (mod_remoteip).
//! - [`transfer`]: pipelining, 100-continue, chunked uploads, a body over LimitRequestBody
//!   (the lingering close), half-close, large responses to slow, stalled and resetting
//!   readers, with sendfile off (httpd's default) and on (the MPM's write completion), and
//!   over TLS.
//! - [`http2`]: h2 over TLS and h2c: idle connections, PING, per-vhost Protocols, a reset
//!   stream, a stream blocked on flow control and one to a slow reader, the h2c upgrade.
//! - [`https`]: TLS handshakes and heads over TLS: SNI vhosts with their own timeouts and
//!   Protocols, ALPN, session resumption, a required client certificate, TLS 1.2 and 1.3, a
//!   ClientHello dribbled, plain HTTP to the TLS port, keep-alive and pipelining over TLS.
//! - [`status`]: mod_status's connection counts.
//! - [`restart`]: the above's idle or slow phases through a graceful restart and a
//!   graceful-stop.

pub mod head;
pub mod http2;
pub mod https;
pub mod keepalive;
pub mod proxy;
pub mod reqtimeout;
pub mod restart;
pub mod status;
pub mod transfer;

use crate::conn::Conn;
use crate::h1::{Event, Response, H1};
use crate::observe::{secs, Observation, Scale};
use crate::server::Server;
use crate::site::{Ports, Site};
use crate::tcp;
use crate::tls;
use std::time::{Duration, Instant};

/// How a scenario shares its server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Beside the other steady scenarios, at the same time: it only looks at its own
    /// connections.
    Steady,
    /// Alone on its server: it reads server-wide counts or signals the server.
    Exclusive,
    /// Alone, and the server stops (graceful-stop): the runner starts it again after.
    Stops,
}

/// A scenario's body: fills the observation, or fails for a reason of the harness's own.
pub type Run = fn(&Target, &mut Observation) -> Result<(), String>;

/// One scenario.
pub struct Scenario {
    /// Its name in the table, the expected list and `--only`.
    pub name: &'static str,
    /// What it does, in a line.
    pub about: &'static str,
    pub group: Group,
    /// Whether the fast subset (CI) runs it.
    pub fast: bool,
    /// Whether it signals its server (graceful, graceful-stop).
    pub signals: bool,
    /// The site its server is started from.
    pub site: Site,
    pub run: Run,
}

/// A slow reader's SO_RCVBUF (set before connect, so its window is that small too).
pub const SMALL_WINDOW: i32 = 65536;

/// The server a scenario runs against.
pub struct Target<'a> {
    pub server: &'a Server,
}

impl Target<'_> {
    pub fn ports(&self) -> Ports {
        self.server.ports
    }

    /// A plain HTTP/1 connection to `ip` (127.0.0.1, .2 or .3) on the plain port.
    pub fn h1(&self, ip: &str) -> Result<H1, String> {
        let s = tcp::connect(ip, self.ports().plain).map_err(|e| format!("connect {ip}: {e}"))?;
        Ok(H1::new(Conn::Plain(s)))
    }

    /// As [`Target::h1`], with a small receive buffer (a slow reader).
    pub fn h1_small_window(&self, ip: &str) -> Result<H1, String> {
        let s = tcp::connect_with_rcvbuf(ip, self.ports().plain, SMALL_WINDOW)
            .map_err(|e| format!("connect {ip}: {e}"))?;
        Ok(H1::new(Conn::Plain(s)))
    }

    /// A TLS connection to `ip` on the TLS port with SNI `sni`, offering `alpn`; the
    /// protocol chosen.
    pub fn tls(
        &self,
        ip: &str,
        sni: &str,
        alpn: &[&str],
    ) -> Result<(Conn, Option<String>), String> {
        tls::connect(ip, self.ports().tls, sni, alpn)
    }

    /// As [`Target::tls`], with a small receive buffer (a slow reader).
    pub fn tls_small_window(
        &self,
        ip: &str,
        sni: &str,
        alpn: &[&str],
    ) -> Result<(Conn, Option<String>), String> {
        tls::connect_with_rcvbuf(ip, self.ports().tls, sni, alpn, SMALL_WINDOW)
    }

    /// The access log's length now: the lines of connections opened after come after it.
    pub fn log_mark(&self) -> u64 {
        std::fs::metadata(self.server.access_log()).map_or(0, |m| m.len())
    }

    /// The access log's lines after `mark` of the connection from client port `port` to
    /// server address `ip` (the first two fields), without those; waits up to 2 s for
    /// `want` of them (the log is written after the response went).
    pub fn logged(&self, mark: u64, port: u16, ip: &str, want: usize) -> Vec<String> {
        let path = self.server.access_log();
        let prefix = format!("{port} {ip} ");
        let read = || -> Vec<String> {
            let Ok(all) = std::fs::read(&path) else {
                return Vec::new();
            };
            let from = (mark as usize).min(all.len());
            String::from_utf8_lossy(&all[from..])
                .lines()
                .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
                .collect()
        };
        let end = after(2.0);
        loop {
            let lines = read();
            if lines.len() >= want || Instant::now() >= end {
                return lines;
            }
            sleep(0.05);
        }
    }

    /// Records the access log's lines since `mark` of the connection from client port
    /// `port` to server address `ip` under "access log" (waiting for `want` of them).
    pub fn record_log(&self, o: &mut Observation, mark: u64, port: u16, ip: &str, want: usize) {
        let lines = self.logged(mark, port, ip, want);
        o.add(
            "access log",
            if lines.is_empty() {
                "no line".to_owned()
            } else {
                lines.join(" / ")
            },
        );
    }

    /// A raw TCP connection to `ip` on the TLS port (a handshake that never finishes).
    pub fn raw_tls_port(&self, ip: &str) -> Result<Conn, String> {
        let s = tcp::connect(ip, self.ports().tls).map_err(|e| format!("connect {ip}: {e}"))?;
        Ok(Conn::Plain(s))
    }
}

/// An instant `s` seconds from now.
pub fn after(s: f64) -> Instant {
    Instant::now() + Duration::from_secs_f64(s)
}

pub fn sleep(s: f64) {
    std::thread::sleep(Duration::from_secs_f64(s));
}

/// Reads one response within `limit` seconds and records it under `what` (or how it was
/// cut). Returns it.
pub fn response(o: &mut Observation, what: &str, h: &mut H1, limit: f64) -> Option<Response> {
    match h.read_response(after(limit)) {
        Ok(r) => {
            o.add(what, r.summary());
            Some(r)
        }
        Err(cut) => {
            o.add(what, cut.describe());
            None
        }
    }
}

/// As [`response`], with the time its first byte came from `since` in `scale`'s buckets:
/// a response held back (a pipelined request left unread in a buffer, a head handed on
/// late) shows.
pub fn timed_response(
    o: &mut Observation,
    what: &str,
    h: &mut H1,
    since: Instant,
    scale: &Scale,
    limit: f64,
) -> Option<Response> {
    match h.next_event(after(limit)) {
        Event::Response(r, at) => {
            o.add(
                what,
                format!(
                    "{} at {}",
                    r.summary(),
                    scale.bucket(at.saturating_duration_since(since))
                ),
            );
            Some(r)
        }
        Event::End(cut) => {
            o.add(what, cut.describe());
            None
        }
    }
}

/// Sends `req` and records its response under `what`; a send that fails is recorded too.
pub fn exchange(
    o: &mut Observation,
    what: &str,
    h: &mut H1,
    req: &[u8],
    limit: f64,
) -> Option<Response> {
    if let Err(e) = h.send(req) {
        o.add(what, format!("could not send: {e}"));
        return None;
    }
    response(o, what, h, limit)
}

/// Watches the connection for `limit` seconds from now, times taken from `since`: every
/// response the server sends (a 408) and how it ends, recorded under `what` in `scale`'s
/// buckets. Returns whether it is still open.
pub fn watch(
    o: &mut Observation,
    what: &str,
    h: &mut H1,
    since: Instant,
    scale: &Scale,
    limit: f64,
) -> bool {
    let deadline = after(limit);
    loop {
        if let Some(open) = record_event(o, what, h.next_event(deadline), since, scale, deadline) {
            return open;
        }
    }
}

/// Records what the server did (as [`watch`] does): None after a response (more may
/// come), else whether the connection is still open.
pub fn record_event(
    o: &mut Observation,
    what: &str,
    event: Event,
    since: Instant,
    scale: &Scale,
    deadline: Instant,
) -> Option<bool> {
    match event {
        Event::Response(r, at) => {
            o.add(
                format!("{what}: response"),
                format!(
                    "{} at {}",
                    r.summary(),
                    scale.bucket(at.saturating_duration_since(since))
                ),
            );
            None
        }
        Event::End(cut) => {
            match cut.end {
                Some(_) => o.add(
                    what,
                    format!(
                        "{} at {}",
                        cut.describe(),
                        scale.bucket(cut.at.saturating_duration_since(since))
                    ),
                ),
                None if cut.partial > 0 => {
                    o.add(what, format!("{} B of a response, then quiet", cut.partial))
                }
                None => o.add(
                    what,
                    format!(
                        "open {} s later",
                        secs(deadline.saturating_duration_since(since).as_secs_f64())
                    ),
                ),
            }
            Some(cut.end.is_none())
        }
    }
}

/// How a client writes a head (and what follows it).
#[derive(Clone, Copy, Debug)]
pub enum Delivery {
    /// All in one write.
    OneWrite,
    /// One byte per write, this many seconds apart.
    Dribbled(f64),
}

impl Delivery {
    /// One byte per write, spread evenly over `total` seconds.
    pub fn over(total: f64, bytes: &[u8]) -> Delivery {
        Delivery::Dribbled(total / bytes.len().max(1) as f64)
    }
}

/// Sends `bytes` as `how` says. Dribbled, the connection is watched between writes: the
/// first thing the server does before the last byte went (a response, its close) stops
/// the sending and is returned (a write the server refused too: what it sent before comes
/// back). None once every byte went.
pub fn deliver(h: &mut H1, bytes: &[u8], how: Delivery) -> Option<Event> {
    let gap = match how {
        Delivery::OneWrite => {
            return match h.send(bytes) {
                Ok(()) => None,
                Err(_) => Some(h.next_event(after(2.0))),
            };
        }
        Delivery::Dribbled(gap) => gap,
    };
    for (i, b) in bytes.iter().enumerate() {
        if h.send(std::slice::from_ref(b)).is_err() {
            return Some(h.next_event(after(2.0)));
        }
        if i + 1 < bytes.len() {
            match h.next_event(after(gap)) {
                Event::End(cut) if cut.end.is_none() && cut.partial == 0 => {}
                other => return Some(other),
            }
        }
    }
    None
}

/// Sends `bytes` as `how` says, then records every response and how the connection ends
/// within `limit` s, times from the last byte sent (or from the server's first word, if
/// it spoke before).
pub fn deliver_and_watch(
    o: &mut Observation,
    what: &str,
    h: &mut H1,
    bytes: &[u8],
    how: Delivery,
    scale: &Scale,
    limit: f64,
) {
    let early = deliver(h, bytes, how);
    let since = Instant::now();
    let deadline = after(limit);
    if let Some(ev) = early {
        if record_event(o, what, ev, since, scale, deadline).is_some() {
            return;
        }
    }
    watch(o, what, h, since, scale, limit);
}

/// Everything the server sends until it ends the connection (or `limit` s pass), as raw
/// bytes: an HTTP/0.9 answer has no head to parse. Records its length, hash and first
/// line, and the end with its time from `since`.
pub fn raw(o: &mut Observation, what: &str, h: &mut H1, since: Instant, scale: &Scale, limit: f64) {
    let deadline = after(limit);
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let end = loop {
        match h.conn.read_some(&mut chunk, deadline) {
            crate::conn::Got::Data(n) => got.extend_from_slice(&chunk[..n]),
            crate::conn::Got::End(e) => break format!("{e} at {}", scale.bucket(since.elapsed())),
            crate::conn::Got::Quiet => break format!("open {} s later", secs(limit)),
        }
    };
    if got.is_empty() {
        o.add(what, format!("nothing, {end}"));
        return;
    }
    let first = got.split(|&b| b == b'\n').next().unwrap_or(&[]);
    o.add(
        what,
        format!(
            "{} B #{}, first line {:?}, then {end}",
            got.len(),
            crate::h1::hash8(&got),
            String::from_utf8_lossy(first).trim_end()
        ),
    );
}

/// One case of a scenario that runs several at once ([`side_by_side`]).
pub type Case<'a> = (
    String,
    Box<dyn FnOnce(&mut Observation) -> Result<(), String> + Send + 'a>,
);

/// Runs `cases` at the same time, each on an observation of its own, and adds their facts
/// in the order given, each under its case's name.
pub fn side_by_side(o: &mut Observation, cases: Vec<Case<'_>>) -> Result<(), String> {
    let results: Vec<(String, Observation, Result<(), String>)> = std::thread::scope(|sc| {
        let handles: Vec<_> = cases
            .into_iter()
            .map(|(name, f)| {
                let h = sc.spawn(move || {
                    let mut mine = Observation::new();
                    let r = f(&mut mine);
                    (mine, r)
                });
                (name, h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(name, h)| match h.join() {
                Ok((mine, r)) => (name, mine, r),
                Err(_) => (name, Observation::new(), Err("the case panicked".into())),
            })
            .collect()
    });
    for (name, mine, r) in results {
        for (w, v) in mine.facts {
            o.add(format!("{name}: {w}"), v);
        }
        for (w, v) in mine.notes {
            o.note(format!("{name}: {w}"), v);
        }
        r.map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// Waits `idle` seconds on a connection that should stay open, recording only what the
/// server does meanwhile (under `what`); true if nothing happened.
pub fn idle(
    o: &mut Observation,
    what: &str,
    h: &mut H1,
    since: Instant,
    scale: &Scale,
    idle: f64,
) -> bool {
    let deadline = after(idle);
    match h.next_event(deadline) {
        Event::End(cut) if cut.end.is_none() && cut.partial == 0 => true,
        Event::End(cut) => {
            o.add(
                what,
                format!("{} at {}", cut.describe(), scale.bucket(cut.at - since)),
            );
            false
        }
        Event::Response(r, at) => {
            o.add(
                format!("{what}: response"),
                format!("{} at {}", r.summary(), scale.bucket(at - since)),
            );
            false
        }
    }
}

/// Every scenario, in table order.
pub fn all() -> Vec<Scenario> {
    let mut v = Vec::new();
    v.extend(keepalive::scenarios());
    v.extend(reqtimeout::scenarios());
    v.extend(head::scenarios());
    v.extend(proxy::scenarios());
    v.extend(transfer::scenarios());
    v.extend(http2::scenarios());
    v.extend(https::scenarios());
    v.extend(status::scenarios());
    v.extend(restart::scenarios());
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_and_enough() {
        let all = all();
        let names: BTreeSet<&str> = all.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), all.len(), "duplicate scenario names");
        assert!(all.len() >= 30, "the issue asks for at least 30 scenarios");
        // Acceptance 3: the per-vhost keep-alive scenario is in the CI subset.
        assert!(all.iter().any(|s| s.name == "ka-name-vhost-next" && s.fast));
    }
}
