//! mod_reqtimeout: a request line, a head or a body that comes too slowly, with its default
//! limits (127.0.0.1) and explicit ones (ip.test on 127.0.0.2, r.test); TLS handshakes
//! that never finish, bounded by `RequestReadTimeout handshake=` or by Timeout.

use super::{after, watch, Group, Scenario, Target};
use crate::h1::{self, Event, H1};
use crate::observe::{Observation, Scale};
use crate::site::*;
use crate::tls;
use std::time::Instant;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "rt-line-explicit",
            about: "half a request line to ip.test (header=2), then nothing",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: line_explicit,
        },
        Scenario {
            name: "rt-line-default",
            about:
                "half a request line to 127.0.0.1 (reqtimeout's defaults, Timeout 4), then nothing",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: line_default,
        },
        Scenario {
            name: "rt-headers-explicit",
            about: "a head drip-fed (a line every 0.5 s) to ip.test (header=2)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: headers_explicit,
        },
        Scenario {
            name: "rt-headers-default",
            about: "a head drip-fed (a line every 0.5 s) to 127.0.0.1 (header=20-40,MinRate=500)",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: headers_default,
        },
        Scenario {
            name: "rt-body-explicit",
            about: "10 of 100 body bytes to ip.test (body=2), then nothing",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: body_explicit,
        },
        Scenario {
            name: "rt-body-name-vhost",
            about: "10 of 100 body bytes to name-based r.test (body=2), then nothing",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: body_name_vhost,
        },
        Scenario {
            name: "rt-body-default",
            about: "10 of 100 body bytes to a.test (body=20,MinRate=500; Timeout 4), then nothing",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: body_default,
        },
        Scenario {
            name: "tls-handshake-stall-reqtimeout",
            about: "60 bytes of a ClientHello to the TLS port (handshake=2), then nothing",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: handshake_reqtimeout,
        },
        Scenario {
            name: "tls-handshake-stall-timeout",
            about:
                "60 bytes of a ClientHello to 127.0.0.2's TLS port (no handshake limit: Timeout 4)",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: handshake_timeout,
        },
    ]
}

fn scale() -> Scale {
    Scale::new(&[
        (REQTIMEOUT_EXPLICIT, "RequestReadTimeout 2"),
        (TIMEOUT, "Timeout"),
        (VHOST_TIMEOUT, "vhost Timeout"),
        (REQTIMEOUT_DEFAULT, "reqtimeout default 20"),
    ])
}

/// Sends `bytes`, then watches what the server does for `limit` seconds.
fn send_then_watch(
    h: &mut H1,
    o: &mut Observation,
    bytes: &[u8],
    limit: f64,
) -> Result<(), String> {
    h.send(bytes)?;
    let t = Instant::now();
    watch(o, "server", h, t, &scale(), limit);
    Ok(())
}

fn line_explicit(t: &Target, o: &mut Observation) -> Result<(), String> {
    send_then_watch(&mut t.h1("127.0.0.2")?, o, b"GET /index.html HT", 12.0)
}

fn line_default(t: &Target, o: &mut Observation) -> Result<(), String> {
    send_then_watch(&mut t.h1("127.0.0.1")?, o, b"GET /index.html HT", 30.0)
}

/// A head whose lines come every 0.5 s, for at most `limit` seconds, then its end.
fn drip(h: &mut H1, o: &mut Observation, host: &str, limit: f64) -> Result<(), String> {
    h.send(format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\n").as_bytes())?;
    let t = Instant::now();
    let end = after(limit);
    let mut n = 0;
    while Instant::now() < end {
        match h.next_event(after(0.5)) {
            Event::End(cut) if cut.end.is_none() && cut.partial == 0 => {
                n += 1;
                if h.send(format!("X-Drip-{n}: x\r\n").as_bytes()).is_err() {
                    // The server closed; what it sent comes next.
                    break;
                }
            }
            Event::Response(r, at) => {
                o.add(
                    "server: response",
                    format!("{} at {}", r.summary(), scale().bucket(at - t)),
                );
                break;
            }
            Event::End(cut) => {
                o.add(
                    "server",
                    format!("{} at {}", cut.describe(), scale().bucket(cut.at - t)),
                );
                return Ok(());
            }
        }
    }
    if Instant::now() >= end {
        // Never cut: the head is finished and answered?
        let _ = h.send(b"\r\n");
        o.add(
            "head",
            format!("accepted for {} s", crate::observe::secs(limit)),
        );
    }
    watch(o, "server", h, t, &scale(), 10.0);
    Ok(())
}

fn headers_explicit(t: &Target, o: &mut Observation) -> Result<(), String> {
    drip(&mut t.h1("127.0.0.2")?, o, "ip.test", 8.0)
}

fn headers_default(t: &Target, o: &mut Observation) -> Result<(), String> {
    drip(&mut t.h1("127.0.0.1")?, o, "a.test", 45.0)
}

/// A POST to /echo announcing 100 bytes, of which 10 come.
fn slow_body(h: &mut H1, o: &mut Observation, host: &str, limit: f64) -> Result<(), String> {
    let req = h1::request(
        "POST",
        host,
        "/echo",
        "HTTP/1.1",
        &["Content-Length: 100"],
        &[b'x'; 10],
    );
    send_then_watch(h, o, &req, limit)
}

fn body_explicit(t: &Target, o: &mut Observation) -> Result<(), String> {
    slow_body(&mut t.h1("127.0.0.2")?, o, "ip.test", 12.0)
}

fn body_name_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    slow_body(&mut t.h1("127.0.0.1")?, o, "r.test", 12.0)
}

fn body_default(t: &Target, o: &mut Observation) -> Result<(), String> {
    slow_body(&mut t.h1("127.0.0.1")?, o, "a.test", 30.0)
}

fn handshake_scale() -> Scale {
    Scale::new(&[(HANDSHAKE_TIMEOUT, "handshake=2"), (TIMEOUT, "Timeout")])
}

fn handshake(t: &Target, o: &mut Observation, ip: &str) -> Result<(), String> {
    let mut h = H1::new(t.raw_tls_port(ip)?);
    h.send(&tls::partial_client_hello())?;
    let t0 = Instant::now();
    watch(o, "server", &mut h, t0, &handshake_scale(), 12.0);
    Ok(())
}

fn handshake_reqtimeout(t: &Target, o: &mut Observation) -> Result<(), String> {
    handshake(t, o, "127.0.0.1")
}

fn handshake_timeout(t: &Target, o: &mut Observation) -> Result<(), String> {
    handshake(t, o, "127.0.0.2")
}
