//! HTTP/2 over TLS (ALPN h2) and h2c (prior knowledge, and the Upgrade): an idle connection
//! past KeepAliveTimeout (when and how it ends: GOAWAY and its error code, then FIN or RST),
//! a PING while idle, Protocols set per vhost, a stream the client resets; 8 MiB to a client
//! that never opens its window (the server blocked on flow control) and to one that opens
//! it but reads its socket slowly through a small receive buffer (the server held back by
//! the socket, not by flow control; sampled twice during the download, server-status showed
//! no worker busy for it under event nor `park`).

use super::{after, Group, Scenario, Target};
use crate::conn::Conn;
use crate::h1::{self, H1};
use crate::h2::{error_name, H2Cut, CANCEL, GOAWAY, H2, PING, RST_STREAM};
use crate::observe::{secs, Observation, Scale};
use crate::site::*;
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "h2-tls-idle",
            about: "h2 over TLS to the default TLS vhost: one stream, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: tls_idle,
        },
        Scenario {
            name: "h2-tls-idle-sni-vhost",
            about: "h2 over TLS with SNI tls-b.test (KeepAliveTimeout 6): one stream, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: tls_idle_sni_vhost,
        },
        Scenario {
            name: "h2c-idle",
            about: "h2c with prior knowledge: one stream, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: h2c_idle,
        },
        Scenario {
            name: "h2-ping-idle",
            about: "h2 over TLS: one stream, a PING 1.5 s later, then idle",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: ping_idle,
        },
        Scenario {
            name: "h2-protocols-vhost",
            about: "SNI tls-h1.test (Protocols http/1.1) offered h2 and http/1.1",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: protocols_vhost,
        },
        Scenario {
            name: "h2-rst-stream",
            about: "h2 over TLS: 8 MiB on stream 1, reset by the client after its first DATA; a request on stream 3",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: rst_stream,
        },
        Scenario {
            name: "h2-flow-blocked",
            about: "h2 over TLS: 8 MiB on stream 1 to a client that never opens its window: the server blocked on flow control",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: flow_blocked,
        },
        Scenario {
            name: "h2-flow-blocked-sni-vhost",
            about: "as h2-flow-blocked, SNI tls-b.test (Timeout 8, KeepAliveTimeout 6)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: flow_blocked_sni_vhost,
        },
        Scenario {
            name: "h2-slow-reader",
            about: "h2 over TLS: 8 MiB (/sf/) on stream 1, windows given back at once, the socket read 16 kB per 5 ms through a 64 kB window; stream 3; idle",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: slow_reader,
        },
        Scenario {
            name: "h2c-preface-dribbled",
            about: "h2c with prior knowledge, the preface and SETTINGS one byte per write 20 ms apart (mod_http2 looks for the preface in the first read only)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: h2c_preface_dribbled,
        },
        Scenario {
            name: "h2c-upgrade-dribbled",
            about: "HTTP/1.1 Upgrade: h2c, the request one byte per write over 1 s, then the preface: the response on stream 1",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: h2c_upgrade_dribbled,
        },
        Scenario {
            name: "h2c-upgrade",
            about: "HTTP/1.1 Upgrade: h2c, the response on stream 1, then idle",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: h2c_upgrade,
        },
    ]
}

fn scale() -> Scale {
    Scale::new(&[
        (KEEP_ALIVE, "KeepAliveTimeout"),
        (TIMEOUT, "Timeout"),
        (VHOST_KEEP_ALIVE, "vhost KeepAliveTimeout"),
        (VHOST_TIMEOUT, "vhost Timeout"),
    ])
}

/// Records the response on `stream` under `what`; whether it came.
pub fn h2_response(o: &mut Observation, what: &str, h: &mut H2, stream: u32) -> bool {
    match h.response(stream, after(10.0)) {
        Ok(r) => {
            o.add(what, r.summary());
            true
        }
        Err(c) => {
            o.add(what, c.describe());
            false
        }
    }
}

/// Reads frames for `limit` seconds: GOAWAY (code, last stream) and PING ACKs are recorded
/// with their time from `since`, then how the connection ended.
pub fn watch_h2(o: &mut Observation, h: &mut H2, since: Instant, scale: &Scale, limit: f64) {
    let deadline = after(limit);
    loop {
        match h.next_frame(deadline) {
            Ok(f) if f.kind == GOAWAY => {
                let (last, code) = f.goaway().unwrap_or((0, 0));
                o.add(
                    "GOAWAY",
                    format!(
                        "{} last-stream {last} at {}",
                        error_name(code),
                        scale.bucket(since.elapsed())
                    ),
                );
            }
            Ok(f) if f.kind == PING && f.flags & crate::h2::ACK != 0 => {
                o.add("PING", format!("ACK at {}", scale.bucket(since.elapsed())));
            }
            Ok(f) if f.kind == RST_STREAM => {
                o.add(
                    format!("RST_STREAM {}", f.stream),
                    format!(
                        "{} at {}",
                        error_name(f.rst_code().unwrap_or(0)),
                        scale.bucket(since.elapsed())
                    ),
                );
            }
            Ok(_) => {}
            Err(H2Cut::Ended(Some(e), at)) => {
                o.add("close", format!("{e} at {}", scale.bucket(at - since)));
                return;
            }
            Err(H2Cut::Ended(None, _)) => {
                o.add("close", format!("open {} s later", secs(limit)));
                return;
            }
            Err(other) => {
                o.add("close", other.describe());
                return;
            }
        }
    }
}

/// An h2 connection over TLS to 127.0.0.1 with SNI `sni`, ALPN recorded.
pub fn h2_tls(t: &Target, o: &mut Observation, sni: &str) -> Result<Option<H2>, String> {
    let (c, alpn) = t.tls("127.0.0.1", sni, &["h2", "http/1.1"])?;
    o.add("ALPN", alpn.clone().unwrap_or_else(|| "none".into()));
    if alpn.as_deref() != Some("h2") {
        return Ok(None);
    }
    Ok(Some(H2::start(c, "https")?))
}

/// One stream, then idle.
fn one_stream_then_idle(o: &mut Observation, h: &mut H2, authority: &str) -> Result<(), String> {
    h.get(1, authority, "/index.html")?;
    if h2_response(o, "stream 1", h, 1) {
        let t = Instant::now();
        watch_h2(o, h, t, &scale(), 14.0);
    }
    Ok(())
}

fn tls_idle(t: &Target, o: &mut Observation) -> Result<(), String> {
    match h2_tls(t, o, "tls-a.test")? {
        Some(mut h) => one_stream_then_idle(o, &mut h, "tls-a.test"),
        None => Ok(()),
    }
}

fn tls_idle_sni_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    match h2_tls(t, o, "tls-b.test")? {
        Some(mut h) => one_stream_then_idle(o, &mut h, "tls-b.test"),
        None => Ok(()),
    }
}

fn h2c_idle(t: &Target, o: &mut Observation) -> Result<(), String> {
    let h = t.h1("127.0.0.1")?;
    let (conn, _) = h.into_parts();
    let mut h = H2::start(conn, "http")?;
    one_stream_then_idle(o, &mut h, "a.test")
}

fn ping_idle(t: &Target, o: &mut Observation) -> Result<(), String> {
    let Some(mut h) = h2_tls(t, o, "tls-a.test")? else {
        return Ok(());
    };
    h.get(1, "tls-a.test", "/index.html")?;
    if !h2_response(o, "stream 1", &mut h, 1) {
        return Ok(());
    }
    // Idle 1.5 s, then a PING: does it restart the keep-alive wait?
    match h.next_frame(after(1.5)) {
        Err(H2Cut::Ended(None, _)) => {}
        Ok(f) => o.add("before the PING", format!("frame type {}", f.kind)),
        Err(c) => {
            o.add("before the PING", c.describe());
            return Ok(());
        }
    }
    h.ping(*b"rworker!")?;
    let since_ping = Instant::now();
    let scale = Scale::new(&[
        (KEEP_ALIVE - 1.5, "KeepAliveTimeout after the request"),
        (KEEP_ALIVE, "KeepAliveTimeout after the PING"),
        (TIMEOUT, "Timeout after the PING"),
    ]);
    watch_h2(o, &mut h, since_ping, &scale, 12.0);
    Ok(())
}

fn protocols_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    let (c, alpn) = t.tls("127.0.0.1", "tls-h1.test", &["h2", "http/1.1"])?;
    o.add("ALPN", alpn.clone().unwrap_or_else(|| "none".into()));
    if alpn.as_deref() == Some("h2") {
        let mut h = H2::start(c, "https")?;
        h.get(1, "tls-h1.test", "/index.html")?;
        h2_response(o, "stream 1", &mut h, 1);
    } else {
        let mut h = H1::new(c);
        super::exchange(
            o,
            "response",
            &mut h,
            &h1::get("tls-h1.test", "/index.html"),
            10.0,
        );
    }
    Ok(())
}

fn rst_stream(t: &Target, o: &mut Observation) -> Result<(), String> {
    let Some(mut h) = h2_tls(t, o, "tls-a.test")? else {
        return Ok(());
    };
    h.get(1, "tls-a.test", "/8m.bin")?;
    match h.first_data(1, after(10.0)) {
        Ok(_) => o.add("stream 1", "DATA came"),
        Err(c) => {
            o.add("stream 1", c.describe());
            return Ok(());
        }
    }
    h.reset(1, CANCEL)?;
    h.get(3, "tls-a.test", "/index.html")?;
    if h2_response(o, "stream 3", &mut h, 3) {
        let t0 = Instant::now();
        watch_h2(o, &mut h, t0, &scale(), 10.0);
    }
    Ok(())
}

/// The preface dribbled: mod_http2 decides h2c or HTTP/1 on its connection's first read
/// (24 bytes wanted, whatever came taken), so under event a preface that comes a byte at a
/// time is an HTTP/1 request, `PRI * HTTP/2.0`. Whatever the server makes of it is
/// recorded: an HTTP/1 answer while the preface is still coming, or h2.
fn h2c_preface_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    if let Some(ev) = super::deliver(&mut h, &H2::hello(), super::Delivery::Dribbled(0.02)) {
        let t0 = Instant::now();
        if super::record_event(o, "server", ev, t0, &scale(), t0).is_none() {
            super::watch(o, "server", &mut h, t0, &scale(), 5.0);
        }
        return Ok(());
    }
    let (conn, rest) = h.into_parts();
    let mut h = H2::after_hello(conn, rest, "http");
    one_stream_then_idle(o, &mut h, "a.test")
}

fn h2c_upgrade(t: &Target, o: &mut Observation) -> Result<(), String> {
    upgrade(t, o, super::Delivery::OneWrite)
}

fn h2c_upgrade_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    upgrade(t, o, super::Delivery::Dribbled(1.0 / 130.0))
}

/// An HTTP/1.1 GET with `Upgrade: h2c`, sent as `how` says; the 101, then stream 1 and
/// the connection's end.
fn upgrade(t: &Target, o: &mut Observation, how: super::Delivery) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let req = h1::request(
        "GET",
        "a.test",
        "/index.html",
        "HTTP/1.1",
        &[
            "Connection: Upgrade, HTTP2-Settings",
            "Upgrade: h2c",
            "HTTP2-Settings: AAMAAABkAAQAAP__",
        ],
        b"",
    );
    let first = match super::deliver(&mut h, &req, how) {
        Some(ev) => ev,
        None => h.next_event(after(10.0)),
    };
    let r = match first {
        crate::h1::Event::Response(r, _) => {
            o.add("response", r.summary());
            r
        }
        crate::h1::Event::End(cut) => {
            o.add("response", cut.describe());
            return Ok(());
        }
    };
    if r.code() != 101 {
        return Ok(());
    }
    let (conn, rest): (Conn, Vec<u8>) = h.into_parts();
    let mut h = H2::start_with(conn, rest, "http")?;
    if h2_response(o, "stream 1", &mut h, 1) {
        let t0 = Instant::now();
        watch_h2(o, &mut h, t0, &scale(), 10.0);
    }
    Ok(())
}

/// GET /8m.bin with the client's windows never opened: the server sends 64 kB and waits on
/// flow control (an MPM's I/O wait, bounded by Timeout). When does it give up, and how?
fn flow_blocked_on(t: &Target, o: &mut Observation, sni: &str) -> Result<(), String> {
    let Some(mut h) = h2_tls(t, o, sni)? else {
        return Ok(());
    };
    h.stop_window_updates();
    h.get(1, sni, "/8m.bin")?;
    match h.first_data(1, after(10.0)) {
        Ok(_) => o.add("stream 1", "DATA came"),
        Err(c) => {
            o.add("stream 1", c.describe());
            return Ok(());
        }
    }
    let t0 = Instant::now();
    watch_h2(o, &mut h, t0, &scale(), 16.0);
    Ok(())
}

fn flow_blocked(t: &Target, o: &mut Observation) -> Result<(), String> {
    flow_blocked_on(t, o, "tls-a.test")
}

fn flow_blocked_sni_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    flow_blocked_on(t, o, "tls-b.test")
}

/// GET 8 MiB on stream 1 over a TLS connection with a 64 kB receive buffer, read slowly (a
/// TLS record per 5 ms) while every DATA frame is given back to both windows at once: the
/// server is held by TCP, not by flow control. Then stream 3, and the idle connection.
fn slow_reader(t: &Target, o: &mut Observation) -> Result<(), String> {
    let (c, alpn) = t.tls_small_window("127.0.0.1", "tls-a.test", &["h2", "http/1.1"])?;
    o.add("ALPN", alpn.clone().unwrap_or_else(|| "none".into()));
    if alpn.as_deref() != Some("h2") {
        return Ok(());
    }
    let mut h = H2::start(c, "https")?;
    h.set_pace(16 * 1024, Duration::from_millis(5));
    h.get(1, "tls-a.test", LARGE_SENDFILE)?;
    match h.response(1, after(60.0)) {
        Ok(r) => o.add("stream 1", r.summary()),
        Err(c) => {
            o.add("stream 1", c.describe());
            return Ok(());
        }
    }
    h.get(3, "tls-a.test", "/index.html")?;
    if h2_response(o, "stream 3", &mut h, 3) {
        let t0 = Instant::now();
        watch_h2(o, &mut h, t0, &scale(), 10.0);
    }
    Ok(())
}
