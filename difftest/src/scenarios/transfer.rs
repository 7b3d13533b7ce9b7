//! Transfers: pipelined requests (one packet, split across packets), `Expect:
//! 100-continue`, a chunked upload, a body over LimitRequestBody (the lingering close, with a
//! client that stops sending and one that keeps on), a client half-close, and an 8 MiB
//! response to a reader that reads slowly, stops reading (Timeout), or resets.
//!
//! The 8 MiB come from two places. `/8m.bin` is under httpd's default `EnableSendfile Off`:
//! the core writes the file's mapped pages with blocking writes before the handler returns,
//! under every MPM, so the MPM's write completion only sees the tail. `/sf/8m.bin`
//! ([`LARGE_SENDFILE`], `EnableSendfile On`) is set aside by reference and drained by the
//! MPM's write completion: under event (and rworker `park`) the connection then waits for
//! writability in the listener's poll set, under the vhost's Timeout, without a thread. The
//! `-sendfile` scenarios are that path: a slow reader (and then the connection's
//! keep-alive), a stalled one (when the server gives up, in the server config and a vhost).
//! `download-slow-reader-tls` is a slow reader of h1 over TLS: mod_ssl reads the file and
//! hands the core its records in memory, so the core writes them blocking inside the
//! handler again (server-status during it: a worker busy for it under event and `park`,
//! sendfile on or not), and write completion sees the last records, with TLS's own wants.

use super::{after, exchange, response, timed_response, watch, Group, Scenario, Target};
use crate::conn::{Conn, End, Got};
use crate::h1::{self, Event, H1};
use crate::observe::{secs, Observation, Scale};
use crate::site::*;
use crate::status;
use crate::tcp;
use rworker_testkit::wait::wait_until;
use std::time::{Duration, Instant};

pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "pipeline-one-packet",
            about: "three GETs in one write",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: pipeline_one_packet,
        },
        Scenario {
            name: "pipeline-split",
            about: "three GETs split across four writes at odd places, 50 ms apart",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: pipeline_split,
        },
        Scenario {
            name: "expect-100-continue",
            about: "a POST with Expect: 100-continue waits for the interim response, then sends its body",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: expect_100,
        },
        Scenario {
            name: "chunked-upload",
            about: "a chunked POST in three chunks 100 ms apart, echoed; then a next request",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: chunked_upload,
        },
        Scenario {
            name: "over-limit-then-stops",
            about: "a body over l.test's LimitRequestBody: 413, the client sends 100 kB more, then stops (lingering close)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: over_limit_then_stops,
        },
        Scenario {
            name: "over-limit-keeps-sending",
            about: "a body over LimitRequestBody that the client keeps sending, 4 kB every 100 ms",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: over_limit_keeps_sending,
        },
        Scenario {
            name: "half-close",
            about: "a GET, then the client's FIN (shutdown of its write side)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: half_close,
        },
        Scenario {
            name: "download-slow-reader",
            about: "8 MiB read 128 kB per 40 ms through a 64 kB window, then a next request",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: download_slow_reader,
        },
        Scenario {
            name: "download-slow-reader-sendfile",
            about: "8 MiB with EnableSendfile On (write completion) read 128 kB per 40 ms through a 64 kB window; a next request; the close",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: download_slow_reader_sendfile,
        },
        Scenario {
            name: "download-slow-reader-tls",
            about: "8 MiB over TLS (h1, tls-a.test, /sf/) read 16 kB per 5 ms through a 64 kB window; a next request; the close",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: download_slow_reader_tls,
        },
        Scenario {
            name: "download-stalled-reader",
            about: "8 MiB from a.test, the reader stops after 64 kB: when the server gives up (Timeout 4)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: download_stalled,
        },
        Scenario {
            name: "download-stalled-reader-vhost",
            about: "8 MiB from b.test (Timeout 8), the reader stops after 64 kB",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: download_stalled_vhost,
        },
        Scenario {
            name: "download-stalled-reader-sendfile",
            about: "8 MiB with EnableSendfile On from a.test, the reader stops after 64 kB: when write completion gives up (Timeout 4, then the lingering close's last flush)",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: download_stalled_sendfile,
        },
        Scenario {
            name: "download-stalled-reader-sendfile-vhost",
            about: "8 MiB with EnableSendfile On from b.test (Timeout 8), the reader stops after 64 kB",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: download_stalled_sendfile_vhost,
        },
        Scenario {
            name: "client-reset-mid-response",
            about: "the client resets (SO_LINGER 0) after 128 kB of 8 MiB: the worker freed, a fresh request answered",
            group: Group::Exclusive,
            fast: false,
            signals: false,
            site: Site::Full,
            run: client_reset,
        },
    ]
}

fn ka_scale() -> Scale {
    Scale::new(&[(KEEP_ALIVE, "KeepAliveTimeout"), (TIMEOUT, "Timeout")])
}

/// Reads the responses to `n` pipelined requests, then watches the connection.
/// Reads the responses to `n` pipelined requests (each with its time from the last write:
/// one left unread in a buffer would come only at a timeout), then watches the connection.
fn read_pipelined(h: &mut H1, o: &mut Observation, n: usize) {
    let sent = Instant::now();
    for i in 1..=n {
        if timed_response(o, &format!("response {i}"), h, sent, &ka_scale(), 10.0).is_none() {
            return;
        }
    }
    let t = Instant::now();
    watch(o, "close", h, t, &ka_scale(), 8.0);
}

fn pipeline_one_packet(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let mut all = Vec::new();
    for i in 1..=3 {
        all.extend(h1::get("a.test", &format!("/seq/{i}.txt")));
    }
    h.send(&all)?;
    read_pipelined(&mut h, o, 3);
    Ok(())
}

fn pipeline_split(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let mut all = Vec::new();
    for i in 1..=3 {
        all.extend(h1::get("a.test", &format!("/seq/{i}.txt")));
    }
    // Cut inside the first Host header, inside the second request line, just before the
    // third head's final CRLF.
    let cuts = [20, 60, all.len() - 2];
    let mut from = 0;
    for &c in cuts.iter().chain(std::iter::once(&all.len())) {
        h.send(&all[from..c])?;
        from = c;
        super::sleep(0.05);
    }
    read_pipelined(&mut h, o, 3);
    Ok(())
}

fn expect_100(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let body = vec![b'e'; 1000];
    h.send(&h1::request(
        "POST",
        "a.test",
        "/echo",
        "HTTP/1.1",
        &[
            "Content-Length: 1000",
            "Expect: 100-continue",
            "Content-Type: application/octet-stream",
        ],
        b"",
    ))?;
    match h.next_event(after(2.0)) {
        Event::Response(r, _) => o.add("interim", r.summary()),
        Event::End(cut) if cut.end.is_none() => o.add("interim", "none within 2 s"),
        Event::End(cut) => {
            o.add("interim", cut.describe());
            return Ok(());
        }
    }
    exchange(o, "response", &mut h, &body, 10.0);
    exchange(
        o,
        "next request",
        &mut h,
        &h1::get("a.test", "/index.html"),
        10.0,
    );
    Ok(())
}

fn chunked_upload(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    h.send(&h1::request(
        "POST",
        "a.test",
        "/echo",
        "HTTP/1.1",
        &[
            "Transfer-Encoding: chunked",
            "Content-Type: application/octet-stream",
        ],
        b"",
    ))?;
    for c in [b'a', b'b', b'c'] {
        super::sleep(0.1);
        let mut chunk = b"3e8\r\n".to_vec();
        chunk.extend(std::iter::repeat_n(c, 1000));
        chunk.extend_from_slice(b"\r\n");
        h.send(&chunk)?;
    }
    exchange(o, "response", &mut h, b"0\r\n\r\n", 10.0);
    exchange(
        o,
        "next request",
        &mut h,
        &h1::get("a.test", "/index.html"),
        10.0,
    );
    Ok(())
}

/// A POST to l.test announcing 100,000 bytes (LimitRequestBody 1000) with its first 10 kB:
/// records the response and whether the server's FIN follows at once.
fn over_limit_start(t: &Target, o: &mut Observation) -> Result<Option<H1>, String> {
    let mut h = t.h1("127.0.0.1")?;
    let req = h1::request(
        "POST",
        "l.test",
        "/echo",
        "HTTP/1.1",
        &["Content-Length: 100000"],
        &[b'o'; 10_000],
    );
    if exchange(o, "response", &mut h, &req, 10.0).is_none() {
        return Ok(None);
    }
    let t0 = Instant::now();
    match h.next_event(after(1.0)) {
        Event::End(cut) if cut.end.is_some() => o.add(
            "server",
            format!("{} at {}", cut.describe(), ka_scale().bucket(cut.at - t0)),
        ),
        Event::End(_) => o.add("server", "no FIN within 1 s"),
        Event::Response(r, _) => o.add("server: response", r.summary()),
    }
    Ok(Some(h))
}

fn linger_scale() -> Scale {
    Scale::new(&[
        (SECONDS_TO_LINGER, "SECONDS_TO_LINGER"),
        (MAX_SECS_TO_LINGER, "MAX_SECS_TO_LINGER"),
    ])
}

/// Polls until the server lets go of `conn` (no descriptor holds its end), for `limit` s.
fn released_at(conn: &Conn, limit: f64) -> Option<Instant> {
    let (server, client) = tcp::ends(conn.tcp()).ok()?;
    let mut at = None;
    wait_until(Duration::from_secs_f64(limit), || {
        let done = tcp::server_released(server, client);
        if done {
            at = Some(Instant::now());
        }
        done
    });
    at
}

fn over_limit_then_stops(t: &Target, o: &mut Observation) -> Result<(), String> {
    let Some(mut h) = over_limit_start(t, o)? else {
        return Ok(());
    };
    let mut refused = None;
    for _ in 0..10 {
        if let Err(e) = h.conn.write_all(&[b'm'; 10_000]) {
            refused = Some(e.kind());
            break;
        }
        super::sleep(0.05);
    }
    if let Some(k) = refused {
        o.add("more body", format!("refused: {k:?}"));
    }
    let stopped = Instant::now();
    match released_at(&h.conn, 40.0) {
        Some(at) => o.add(
            "server let go",
            format!(
                "{} after the client stopped",
                linger_scale().bucket(at - stopped)
            ),
        ),
        None => o.add("server let go", "not within 40 s"),
    }
    Ok(())
}

fn over_limit_keeps_sending(t: &Target, o: &mut Observation) -> Result<(), String> {
    let Some(mut h) = over_limit_start(t, o)? else {
        return Ok(());
    };
    let t0 = Instant::now();
    let (server, client) = tcp::ends(h.conn.tcp()).map_err(|e| format!("addresses: {e}"))?;
    let end = after(40.0);
    let mut outcome = "still reading after 40 s".to_string();
    while Instant::now() < end {
        if let Err(e) = h.conn.write_all(&[b'k'; 4096]) {
            outcome = format!(
                "our data refused ({:?}) at {}",
                e.kind(),
                linger_scale().bucket(t0.elapsed())
            );
            break;
        }
        let mut b = [0u8; 64];
        if let Got::End(End::Rst) = h.conn.read_some(&mut b, after(0.001)) {
            outcome = format!("RST at {}", linger_scale().bucket(t0.elapsed()));
            break;
        }
        if tcp::server_released(server, client) {
            outcome = format!("server let go at {}", linger_scale().bucket(t0.elapsed()));
            break;
        }
        super::sleep(0.1);
    }
    o.add("lingering close", outcome);
    Ok(())
}

fn half_close(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    h.send(&h1::get("a.test", "/index.html"))?;
    h.conn
        .shutdown_write()
        .map_err(|e| format!("shutdown: {e}"))?;
    if response(o, "response", &mut h, 10.0).is_some() {
        let t0 = Instant::now();
        watch(o, "close", &mut h, t0, &ka_scale(), 8.0);
    }
    Ok(())
}

fn download_slow_reader(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1_small_window("127.0.0.1")?;
    h.set_pace(128 * 1024, Duration::from_millis(40));
    slow_read(o, &mut h, "a.test", "/8m.bin");
    Ok(())
}

/// GET `path` of `host` on `h` (paced by the caller) and the whole response within 60 s,
/// then a next request at full speed; whether that one came.
fn slow_read(o: &mut Observation, h: &mut H1, host: &str, path: &str) -> bool {
    if let Err(e) = h.send(&h1::get(host, path)) {
        o.add("response", format!("could not send: {e}"));
        return false;
    }
    let ok = match h.read_response(after(60.0)) {
        Ok(r) => {
            o.add("response", r.summary());
            true
        }
        Err(cut) => {
            o.add("response", cut.describe());
            false
        }
    };
    ok && {
        h.set_pace(64 * 1024, Duration::ZERO);
        exchange(o, "next request", h, &h1::get(host, "/index.html"), 10.0).is_some()
    }
}

/// As [`download_slow_reader`] from the sendfile location, and then the keep-alive wait: a
/// connection that came back from write completion is an ordinary keep-alive one.
fn download_slow_reader_sendfile(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1_small_window("127.0.0.1")?;
    h.set_pace(128 * 1024, Duration::from_millis(40));
    if slow_read(o, &mut h, "a.test", LARGE_SENDFILE) {
        let t0 = Instant::now();
        watch(o, "close", &mut h, t0, &ka_scale(), 8.0);
    }
    Ok(())
}

/// h1 over TLS (ALPN http/1.1 only), a 64 kB window; a TLS read returns one record (16 kB
/// at most), so the pace is per record: at most about 3 MB/s, as the plain slow reader.
fn download_slow_reader_tls(t: &Target, o: &mut Observation) -> Result<(), String> {
    let (c, alpn) = t.tls_small_window("127.0.0.1", "tls-a.test", &["http/1.1"])?;
    o.add("ALPN", alpn.unwrap_or_else(|| "none".into()));
    let mut h = H1::new(c);
    h.set_pace(16 * 1024, Duration::from_millis(5));
    if slow_read(o, &mut h, "tls-a.test", LARGE_SENDFILE) {
        let t0 = Instant::now();
        watch(o, "close", &mut h, t0, &ka_scale(), 8.0);
    }
    Ok(())
}

/// Polls until the server lets go of `conn`, for `limit` s, while nothing is read: how
/// long after the last growth of the receive queue (the server's last progress) it did.
fn released_after_last_progress(conn: &Conn, limit: f64) -> Option<Duration> {
    let (server, client) = tcp::ends(conn.tcp()).ok()?;
    let mut queued = tcp::unread(conn.tcp()).unwrap_or(0);
    let mut last_progress = Instant::now();
    let mut idle = None;
    wait_until(Duration::from_secs_f64(limit), || {
        let now_queued = tcp::unread(conn.tcp()).unwrap_or(queued);
        if now_queued != queued {
            queued = now_queued;
            last_progress = Instant::now();
        }
        let done = tcp::server_released(server, client);
        if done {
            idle = Some(last_progress.elapsed());
        }
        done
    });
    idle
}

fn stalled_scale() -> Scale {
    Scale::new(&[
        (KEEP_ALIVE, "KeepAliveTimeout"),
        (TIMEOUT, "Timeout"),
        (VHOST_TIMEOUT, "vhost Timeout"),
    ])
}

fn stalled_bucket(d: Duration) -> String {
    stalled_scale().bucket(d)
}

/// When a stalled download from the sendfile location was given up, in ranges rather than
/// marks. In write completion, event gives up at the Timeout (of the request's vhost) and
/// starts the lingering close, whose last flush of what is still pending gets
/// SECONDS_TO_LINGER (the socket's timeout then) before the close: the server let go 5.8 s
/// after the last byte got through for a.test and 9.8 s for b.test, event and `park` alike
/// (6.1 s and 10.1 s after the reader's stop: with sendfile the receive queue still grows
/// by a few hundred bytes 0.3 s after the stop, a window the queue's compaction reopens,
/// too small to wake the server). The blocking writes of sendfile off give up at Timeout and
/// close at once (the connection aborted). The marks of [`stalled_scale`] would put 9.8 s
/// at the vhost's Timeout (8 s, whose window reaches 10 s), so these ranges say which
/// Timeout it was (the server config's or the vhost's), with up to the lingering close's
/// 2 s and 1.5 s of a loaded machine after it.
fn stalled_wc_bucket(d: Duration) -> String {
    let t = d.as_secs_f64();
    let range = |timeout: f64| (timeout - 0.35, timeout + SECONDS_TO_LINGER + 1.5);
    let (a_lo, a_hi) = range(TIMEOUT);
    let (b_lo, b_hi) = range(VHOST_TIMEOUT);
    let b = if t < a_lo {
        format!("before ~{} s (Timeout)", secs(TIMEOUT))
    } else if t <= a_hi {
        format!(
            "~{} to ~{} s (Timeout, then up to SECONDS_TO_LINGER)",
            secs(TIMEOUT),
            secs(TIMEOUT + SECONDS_TO_LINGER)
        )
    } else if t < b_lo {
        format!("between ~{} s and ~{} s", secs(a_hi), secs(VHOST_TIMEOUT))
    } else if t <= b_hi {
        format!(
            "~{} to ~{} s (vhost Timeout, then up to SECONDS_TO_LINGER)",
            secs(VHOST_TIMEOUT),
            secs(VHOST_TIMEOUT + SECONDS_TO_LINGER)
        )
    } else {
        format!("after ~{} s", secs(b_hi))
    };
    if std::env::var_os("RWORKER_DIFF_RAW").is_some() {
        format!("{b} [{t:.2} s]")
    } else {
        b
    }
}

/// GET `path` (8 MiB) from `host`; read 64 kB; stop reading: when does the server let go
/// (in `bucket`'s terms)? Then read what is left: the whole body, or a cut one.
fn stalled(
    t: &Target,
    o: &mut Observation,
    host: &str,
    path: &str,
    bucket: fn(Duration) -> String,
) -> Result<(), String> {
    let mut h = t.h1_small_window("127.0.0.1")?;
    h.send(&h1::get(host, path))?;
    let mut got = 0usize;
    let mut head = Vec::new();
    let mut b = vec![0u8; 16 * 1024];
    while got < 64 * 1024 {
        match h.conn.read_some(&mut b, after(10.0)) {
            Got::Data(n) => {
                if head.len() < 4096 {
                    head.extend_from_slice(&b[..n.min(4096)]);
                }
                got += n;
            }
            Got::End(e) => {
                o.add("response", format!("{e} after {got} B"));
                return Ok(());
            }
            Got::Quiet => {
                o.add("response", format!("quiet after {got} B"));
                return Ok(());
            }
        }
    }
    let head_text = String::from_utf8_lossy(&head);
    o.add("status", head_text.lines().next().unwrap_or("").to_owned());
    // The server's writes go on for a while after the reader stops (the kernel's buffers,
    // and a window the receive queue's compaction reopens now and then), so its give-up is
    // timed from the last byte it got through, not from the stop.
    match released_after_last_progress(&h.conn, 25.0) {
        Some(idle) => o.add(
            "server let go",
            format!("{} after its last byte got through", bucket(idle)),
        ),
        None => o.add("server let go", "not within 25 s"),
    }
    // The rest, as fast as it comes.
    let head_len = head_text.find("\r\n\r\n").map_or(0, |i| i + 4);
    let end = loop {
        match h.conn.read_some(&mut b, after(10.0)) {
            Got::Data(n) => got += n,
            Got::End(e) => break e.to_string(),
            Got::Quiet => break "quiet".to_string(),
        }
    };
    let body = got.saturating_sub(head_len);
    o.add(
        "then",
        if body >= LARGE {
            format!("whole body, then {end}")
        } else {
            format!("body cut short, then {end}")
        },
    );
    Ok(())
}

fn download_stalled(t: &Target, o: &mut Observation) -> Result<(), String> {
    stalled(t, o, "a.test", "/8m.bin", stalled_bucket)
}

fn download_stalled_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    stalled(t, o, "b.test", "/8m.bin", stalled_bucket)
}

fn download_stalled_sendfile(t: &Target, o: &mut Observation) -> Result<(), String> {
    stalled(t, o, "a.test", LARGE_SENDFILE, stalled_wc_bucket)
}

fn download_stalled_sendfile_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    stalled(t, o, "b.test", LARGE_SENDFILE, stalled_wc_bucket)
}

fn client_reset(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1_small_window("127.0.0.1")?;
    h.send(&h1::get("a.test", "/8m.bin"))?;
    let mut got = 0usize;
    let mut b = vec![0u8; 16 * 1024];
    while got < 128 * 1024 {
        match h.conn.read_some(&mut b, after(10.0)) {
            Got::Data(n) => got += n,
            other => {
                o.add("response", format!("{other:?} after {got} B"));
                return Ok(());
            }
        }
    }
    let (conn, _) = h.into_parts();
    let Conn::Plain(s) = conn else {
        return Err("not a plain connection".into());
    };
    tcp::reset(s).map_err(|e| format!("reset: {e}"))?;
    let t0 = Instant::now();
    let mut busy = String::from("?");
    let freed = wait_until(Duration::from_secs(10), || {
        match status::fetch(t.ports().plain) {
            Ok(s) => {
                busy = s.get("BusyWorkers").unwrap_or("?").to_owned();
                busy == "1"
            }
            Err(_) => false,
        }
    });
    o.add(
        "busy workers",
        if freed {
            format!(
                "back to 1 at {}",
                Scale::new(&[(TIMEOUT, "Timeout")]).bucket(t0.elapsed())
            )
        } else {
            format!("{busy} after 10 s")
        },
    );
    let mut fresh = t.h1("127.0.0.1")?;
    exchange(
        o,
        "fresh request",
        &mut fresh,
        &h1::get("a.test", "/index.html"),
        10.0,
    );
    Ok(())
}
