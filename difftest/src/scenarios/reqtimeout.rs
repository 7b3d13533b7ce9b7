//! mod_reqtimeout: a request line, a head or a body that comes too slowly, with its default
//! limits (127.0.0.1) and explicit ones (ip.test on 127.0.0.2, r.test); TLS handshakes
//! that never finish, bounded by `RequestReadTimeout handshake=` or by Timeout.
//!
//! Heads that never complete (`rt-stall-*`, `rt-dribble-*`): a partial request line, and a
//! request line with a partial header, then silence, or a head dribbled too slowly; under
//! a rate (rt.test, `header=2-4,MinRate=500`: the bytes read extend the limit), a fixed
//! limit (rt3.test, `header=3`), a name-based vhost's own limit (rt-own.test), and without
//! mod_reqtimeout at all (a site of its own: Timeout alone, read by read). Times are from
//! the first byte; what the client got, and the access log's line. mod_reqtimeout waits
//! at least 1 s once less is left, so a cut can come up to 1 s late: the scales' windows
//! allow that (and the measured time is noted, not compared).

use super::{
    after, deliver, record_event, side_by_side, watch, Case, Delivery, Group, Scenario, Target,
};
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
        Scenario {
            name: "rt-stall-rate",
            about: "rt.test (header=2-4,MinRate=500, Timeout 10): a partial request line; a request line and a partial header; the same after 600 and 2000 bytes of header; then nothing",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: stall_rate,
        },
        Scenario {
            name: "rt-stall-fixed",
            about: "rt3.test (header=3): a partial request line; a request line and a partial header; then nothing",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: stall_fixed,
        },
        Scenario {
            name: "rt-stall-name-vhost",
            about: "127.0.0.5, Host: rt-own.test (its own header=6; the address's header=2-4): a partial header, then nothing",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: stall_name_vhost,
        },
        Scenario {
            name: "rt-dribble-rate",
            about: "rt.test (header=2-4,MinRate=500): a head one byte per 0.25 s, never done in time",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: dribble_rate,
        },
        Scenario {
            name: "rt-dribble-fixed",
            about: "rt3.test (header=3): a head one byte per 0.25 s, never done in time",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: dribble_fixed,
        },
        Scenario {
            name: "rt-stall-no-reqtimeout",
            about: "without mod_reqtimeout (Timeout 4): a partial request line; a request line and a partial header; then nothing",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::WithoutReqtimeout,
            run: stall_no_reqtimeout,
        },
        Scenario {
            name: "rt-dribble-no-reqtimeout",
            about: "without mod_reqtimeout (Timeout 4): a head one byte per 0.15 s, 6.5 s in all: each read within Timeout",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::WithoutReqtimeout,
            run: dribble_no_reqtimeout,
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

/// What a stalled or dribbled head gets: every response and the end, times from `t0` (its
/// first byte) in `scale`'s buckets, the measured times noted.
fn watch_noting(o: &mut Observation, h: &mut H1, t0: Instant, scale: &Scale, limit: f64) {
    let deadline = after(limit);
    loop {
        let ev = h.next_event(deadline);
        let (at, what) = match &ev {
            Event::Response(r, at) => (*at, format!("{} at", r.code())),
            Event::End(cut) => (cut.at, cut.describe()),
        };
        let quiet = matches!(&ev, Event::End(cut) if cut.end.is_none());
        let done = record_event(o, "server", ev, t0, scale, deadline);
        if !quiet {
            o.note(
                "measured",
                format!(
                    "{what} {:.2} s",
                    at.saturating_duration_since(t0).as_secs_f64()
                ),
            );
        }
        if done.is_some() {
            return;
        }
    }
}

/// `bytes` to `ip` in one write, then nothing: what the server does within 12 s, and the
/// access log's line.
fn stall(
    t: &Target,
    o: &mut Observation,
    ip: &str,
    bytes: &[u8],
    scale: &Scale,
) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1(ip)?;
    let port = h.conn.local_port();
    let t0 = Instant::now();
    h.send(bytes)?;
    watch_noting(o, &mut h, t0, scale, 12.0);
    t.record_log(o, mark, port, ip, 1);
    Ok(())
}

/// `bytes` to `ip` one byte per `gap` s until the server acts.
fn dribble(
    t: &Target,
    o: &mut Observation,
    ip: &str,
    bytes: &[u8],
    gap: f64,
    scale: &Scale,
) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1(ip)?;
    let port = h.conn.local_port();
    let t0 = Instant::now();
    match deliver(&mut h, bytes, Delivery::Dribbled(gap)) {
        Some(ev) => {
            let (at, what) = match &ev {
                Event::Response(r, at) => (*at, format!("{} at", r.code())),
                Event::End(cut) => (cut.at, cut.describe()),
            };
            o.note(
                "measured",
                format!(
                    "{what} {:.2} s",
                    at.saturating_duration_since(t0).as_secs_f64()
                ),
            );
            if record_event(o, "server", ev, t0, scale, after(12.0)).is_none() {
                watch_noting(o, &mut h, t0, scale, 12.0);
            }
        }
        None => {
            o.add("head", "sent whole");
            watch_noting(o, &mut h, t0, scale, 12.0);
        }
    }
    t.record_log(o, mark, port, ip, 1);
    Ok(())
}

/// A request line to `host`, X-Pad fields of at most 100 bytes, then a partial header:
/// `total` bytes in all (at least a few hundred), each of which extends a rate's limit.
fn padded_partial(host: &str, total: usize) -> Vec<u8> {
    const TAIL: &str = "X-Partial: ab";
    let mut head = format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\n");
    let mut n = 0;
    loop {
        let left = total.saturating_sub(head.len() + TAIL.len());
        if left == 0 {
            break;
        }
        n += 1;
        let name = format!("X-Pad-{n:02}: ");
        // A field with a one-byte value is the least that can be left for the next.
        let least = name.len() + 3;
        let take = if left <= 100 {
            left.max(least)
        } else if left - 100 >= least {
            100
        } else {
            left - least
        };
        head.push_str(&name);
        head.push_str(&"p".repeat(take - name.len() - 2));
        head.push_str("\r\n");
    }
    head.push_str(TAIL);
    head.into_bytes()
}

/// The partial request line and the partial header every `rt-stall-*` sends.
const PARTIAL_LINE: &[u8] = b"GET /index.html HT";

fn partial_header(host: &str) -> Vec<u8> {
    format!("GET /index.html HTTP/1.1\r\nHost: {host}\r\nX-Partial: ab").into_bytes()
}

/// rt.test's marks: its first limit, its most, its Timeout; `extra` beside them.
fn rate_scale(extra: &[(f64, &str)]) -> Scale {
    let mut marks = vec![
        (REQTIMEOUT_RATE_FIRST, "header=2-4 first"),
        (REQTIMEOUT_RATE_MAX, "header=2-4 most"),
        (REQTIMEOUT_RATE_TIMEOUT, "vhost Timeout"),
    ];
    marks.extend_from_slice(extra);
    Scale::new(&marks)
}

fn stall_rate(t: &Target, o: &mut Observation) -> Result<(), String> {
    // 600 bytes read: the first 2 s extended by 1.2 s. 2000: by 4 s, beyond the most.
    let extended = REQTIMEOUT_RATE_FIRST + 600.0 / REQTIMEOUT_RATE_MIN_RATE as f64;
    let cases: Vec<Case> = vec![
        (
            "partial request line".into(),
            Box::new(move |o: &mut Observation| {
                stall(t, o, "127.0.0.5", PARTIAL_LINE, &rate_scale(&[]))
            }),
        ),
        (
            "partial header".into(),
            Box::new(move |o: &mut Observation| {
                stall(
                    t,
                    o,
                    "127.0.0.5",
                    &partial_header("rt.test"),
                    &rate_scale(&[]),
                )
            }),
        ),
        (
            "600 B, then a partial header".into(),
            Box::new(move |o: &mut Observation| {
                // Only this case's marks: 3.2 s sits inside the most's window.
                let scale = Scale::new(&[
                    (REQTIMEOUT_RATE_FIRST, "header=2-4 first"),
                    (extended, "first + 600 B at MinRate"),
                    (REQTIMEOUT_RATE_TIMEOUT, "vhost Timeout"),
                ]);
                stall(t, o, "127.0.0.5", &padded_partial("rt.test", 600), &scale)
            }),
        ),
        (
            "2000 B, then a partial header".into(),
            Box::new(move |o: &mut Observation| {
                let scale = rate_scale(&[(6.0, "first + 2000 B at MinRate, past the most")]);
                stall(t, o, "127.0.0.5", &padded_partial("rt.test", 2000), &scale)
            }),
        ),
    ];
    side_by_side(o, cases)
}

fn fixed_scale() -> Scale {
    Scale::new(&[(REQTIMEOUT_FIXED, "header=3"), (TIMEOUT, "Timeout")])
}

fn stall_fixed(t: &Target, o: &mut Observation) -> Result<(), String> {
    stall_line_and_header(t, o, "127.0.0.6", "rt3.test", fixed_scale)
}

/// A partial request line, and a complete one with a partial header, each left to stall
/// on `addr` (the header's Host: `host`), side by side.
fn stall_line_and_header(
    t: &Target,
    o: &mut Observation,
    addr: &'static str,
    host: &'static str,
    scale: fn() -> Scale,
) -> Result<(), String> {
    let cases: Vec<Case> = vec![
        (
            "partial request line".into(),
            Box::new(move |o: &mut Observation| stall(t, o, addr, PARTIAL_LINE, &scale())),
        ),
        (
            "partial header".into(),
            Box::new(move |o: &mut Observation| stall(t, o, addr, &partial_header(host), &scale())),
        ),
    ];
    side_by_side(o, cases)
}

fn stall_name_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    let scale = Scale::new(&[
        (REQTIMEOUT_RATE_FIRST, "the address's header=2-4"),
        (REQTIMEOUT_NAME_VHOST, "rt-own.test's header=6"),
        (REQTIMEOUT_RATE_TIMEOUT, "vhost Timeout"),
    ]);
    stall(t, o, "127.0.0.5", &partial_header("rt-own.test"), &scale)
}

fn dribble_rate(t: &Target, o: &mut Observation) -> Result<(), String> {
    let head = h1::get("rt.test", "/index.html");
    dribble(t, o, "127.0.0.5", &head, 0.25, &rate_scale(&[]))
}

fn dribble_fixed(t: &Target, o: &mut Observation) -> Result<(), String> {
    let head = h1::get("rt3.test", "/index.html");
    dribble(t, o, "127.0.0.6", &head, 0.25, &fixed_scale())
}

fn timeout_scale() -> Scale {
    Scale::new(&[(TIMEOUT, "Timeout")])
}

fn stall_no_reqtimeout(t: &Target, o: &mut Observation) -> Result<(), String> {
    stall_line_and_header(t, o, "127.0.0.1", "a.test", timeout_scale)
}

fn dribble_no_reqtimeout(t: &Target, o: &mut Observation) -> Result<(), String> {
    let head = h1::get("a.test", "/index.html");
    let gap = 6.5 / head.len() as f64;
    let scale = Scale::new(&[(TIMEOUT, "Timeout"), (6.5, "the head's last byte")]);
    dribble(t, o, "127.0.0.1", &head, gap, &scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_heads_have_the_length_asked() {
        for total in [300, 600, 2000, 2013, 2099] {
            let h = padded_partial("rt.test", total);
            assert_eq!(h.len(), total);
            assert!(h.ends_with(b"X-Partial: ab"));
            let text = String::from_utf8_lossy(&h).into_owned();
            assert!(text.split("\r\n").all(|l| l.len() <= 100), "{text}");
        }
    }
}
