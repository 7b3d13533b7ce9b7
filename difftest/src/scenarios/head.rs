//! Request heads: how they arrive (one byte per write, split at awkward places, pipelined,
//! with their body, after a keep-alive pause), what they hold (at the limits of
//! lim.test and one byte or field over, HTTP/1.0 and 0.9 request lines, blank lines before
//! the request line) and what is not a head at all (a TLS ClientHello on the plain port,
//! mod_echo's connections). Each answer is recorded as the client sees it, and where the
//! access log tells more (the status of a request that got none, the request line it
//! logged), its line.
//!
//! Today rworker reads a head on a thread with blocking reads, as event does; the same
//! scenarios must agree once it reads heads without one (issue 47).

use super::{
    after, deliver, deliver_and_watch, exchange, raw, record_event, side_by_side, timed_response,
    watch, Case, Delivery, Group, Scenario, Target,
};
use crate::conn::Got;
use crate::h1::{self, Event, Response, H1};
use crate::observe::{Observation, Scale};
use crate::site::*;
use crate::tls;
use std::time::Instant;

pub fn scenarios() -> Vec<Scenario> {
    let s = |name, about, fast, run| Scenario {
        name,
        about,
        group: Group::Steady,
        fast,
        signals: false,
        site: Site::Full,
        run,
    };
    vec![
        s(
            "head-dribbled",
            "a head one byte per write, evenly over 2 s, to a.test: answered, then keep-alive",
            true,
            head_dribbled,
        ),
        s(
            "limit-request-line",
            "lim.test (LimitRequestLine 64): request lines of 64, 65 (the longest httpd takes) and 66 bytes, each in one write and dribbled",
            true,
            limit_request_line,
        ),
        s(
            "limit-field-size",
            "lim.test (LimitRequestFieldSize 64): header fields of 64, 65 (the longest httpd takes) and 66 bytes, each in one write and dribbled",
            true,
            limit_field_size,
        ),
        s(
            "limit-fields",
            "lim.test (LimitRequestFields 4): 4 header fields and 5, each in one write and dribbled",
            true,
            limit_fields,
        ),
        s(
            "pipeline-split-crlf",
            "three GETs split between CR and LF, mid request line, and one head's end with the next one's start",
            true,
            pipeline_split_crlf,
        ),
        s(
            "pipeline-dribbled",
            "three pipelined GETs, one byte per write, 8 ms apart",
            false,
            pipeline_dribbled,
        ),
        s(
            "post-body-with-head",
            "a POST's head, its 1000-byte body (Content-Length) and a next GET in one write",
            true,
            post_body_with_head,
        ),
        s(
            "chunked-with-head",
            "a chunked POST's head, its chunks, the last chunk and a next GET in one write",
            true,
            chunked_with_head,
        ),
        s(
            "expect-100-dribbled",
            "a POST with Expect: 100-continue, its head dribbled; the body after the interim response",
            false,
            expect_100_dribbled,
        ),
        s(
            "expect-100-with-body",
            "a POST with Expect: 100-continue whose body comes in the head's write, without waiting",
            false,
            expect_100_with_body,
        ),
        s(
            "http10-no-host",
            "GET HTTP/1.0 without Host, in one write and dribbled",
            false,
            http10_no_host,
        ),
        s(
            "http09",
            "an HTTP/0.9 request line (GET /), in one write and dribbled (HttpProtocolOptions default)",
            true,
            http09,
        ),
        s(
            "leading-crlf",
            "two CRLFs before the request line, in one write and dribbled",
            true,
            leading_crlf,
        ),
        s(
            "bare-lf",
            "a head whose lines end in LF alone (HttpProtocolOptions Strict, the default), in one write and dribbled",
            false,
            bare_lf,
        ),
        s(
            "leading-crlf-many",
            "12 CRLFs before the request line (httpd skips at most 10 blank lines)",
            false,
            leading_crlf_many,
        ),
        s(
            "tls-hello-to-plain-port",
            "a whole TLS ClientHello sent to the plain port",
            true,
            tls_hello_to_plain,
        ),
        s(
            "tls-partial-hello-to-plain-port",
            "60 bytes of a ClientHello (no LF in them) to the plain port, then nothing",
            false,
            tls_partial_hello_to_plain,
        ),
        s(
            "status-dribbled",
            "GET /server-status?auto, one byte per write over 1 s",
            true,
            status_dribbled,
        ),
        s(
            "info-dribbled",
            "GET /server-info?server (mod_info), one byte per write over 1 s",
            false,
            info_dribbled,
        ),
        s(
            "ka-next-dribbled",
            "a.test: a response, 1 s idle, then the next head one byte per write over 1.5 s (past KeepAliveTimeout from the response)",
            true,
            ka_next_dribbled,
        ),
        s(
            "ka-next-dribbled-timeout",
            "ip.test (header=2, KeepAliveTimeout 5): a response, 3 s idle, then a next head dribbled too slowly: cut 2 s after its first byte?",
            false,
            ka_next_dribbled_timeout,
        ),
        s(
            "echo-protocol",
            "127.0.0.8 with ProtocolEcho On (it echoes line by line): a line in one write, one a byte at a time, then the client's FIN",
            true,
            echo_protocol,
        ),
    ]
}

/// The marks of a request's answer and the keep-alive wait after it.
fn ka_scale() -> Scale {
    Scale::new(&[(KEEP_ALIVE, "KeepAliveTimeout"), (TIMEOUT, "Timeout")])
}

/// How each case of the scenarios below names its delivery.
fn named(how: Delivery) -> &'static str {
    match how {
        Delivery::OneWrite => "one write",
        Delivery::Dribbled(_) => "dribbled",
    }
}

/// A head to `ip` as `how` says, everything the server answers and how it ends, and the
/// access log's line for it.
fn head_case(
    t: &Target,
    o: &mut Observation,
    ip: &str,
    bytes: &[u8],
    how: Delivery,
) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1(ip)?;
    let port = h.conn.local_port();
    deliver_and_watch(o, "server", &mut h, bytes, how, &ka_scale(), 5.0);
    t.record_log(o, mark, port, ip, 1);
    Ok(())
}

/// [`head_case`] for each (name, head), in one write and dribbled (5 ms a byte), all at
/// once.
fn head_cases(
    t: &Target,
    o: &mut Observation,
    ip: &str,
    heads: Vec<(&str, Vec<u8>)>,
) -> Result<(), String> {
    let mut cases: Vec<Case> = Vec::new();
    for (name, bytes) in heads {
        for how in [Delivery::OneWrite, Delivery::Dribbled(0.005)] {
            let bytes = bytes.clone();
            cases.push((
                format!("{name}, {}", named(how)),
                Box::new(move |o: &mut Observation| head_case(t, o, ip, &bytes, how)),
            ));
        }
    }
    side_by_side(o, cases)
}

fn head_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let req = h1::request(
        "GET",
        "a.test",
        "/index.html",
        "HTTP/1.1",
        &["User-Agent: rworker-diff", "Accept: */*"],
        b"",
    );
    let mut h = t.h1("127.0.0.1")?;
    deliver_and_watch(
        o,
        "server",
        &mut h,
        &req,
        Delivery::over(2.0, &req),
        &ka_scale(),
        5.0,
    );
    Ok(())
}

/// `GET /index.html?aaa… HTTP/1.1` of exactly `len` bytes (without its CRLF), to
/// lim.test.
fn line_of(len: usize) -> Vec<u8> {
    let fixed = "GET /index.html? HTTP/1.1".len();
    let line = format!("GET /index.html?{} HTTP/1.1", "a".repeat(len - fixed));
    format!("{line}\r\nHost: lim.test\r\n\r\n").into_bytes()
}

/// httpd's line limits count the line with its LF (and not its CR, which it strips
/// first): a line of the limit + 1 bytes before its CRLF is the longest it takes.
fn limit_request_line(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(
        t,
        o,
        "127.0.0.4",
        vec![
            ("at the limit", line_of(LIMIT_REQUEST_LINE)),
            ("limit + 1", line_of(LIMIT_REQUEST_LINE + 1)),
            ("limit + 2", line_of(LIMIT_REQUEST_LINE + 2)),
        ],
    )
}

/// A head to lim.test whose first field, `X-Pad: ppp…`, is `len` bytes (without its
/// CRLF); Host after it.
fn field_of(len: usize) -> Vec<u8> {
    let field = format!("X-Pad: {}", "p".repeat(len - "X-Pad: ".len()));
    format!("GET /index.html HTTP/1.1\r\n{field}\r\nHost: lim.test\r\n\r\n").into_bytes()
}

fn limit_field_size(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(
        t,
        o,
        "127.0.0.4",
        vec![
            ("at the limit", field_of(LIMIT_REQUEST_FIELD_SIZE)),
            ("limit + 1", field_of(LIMIT_REQUEST_FIELD_SIZE + 1)),
            ("limit + 2", field_of(LIMIT_REQUEST_FIELD_SIZE + 2)),
        ],
    )
}

/// A head to lim.test with `n` fields: Host and `X-F1` … .
fn fields(n: usize) -> Vec<u8> {
    let mut head = "GET /index.html HTTP/1.1\r\nHost: lim.test\r\n".to_owned();
    for i in 1..n {
        head.push_str(&format!("X-F{i}: {i}\r\n"));
    }
    head.push_str("\r\n");
    head.into_bytes()
}

fn limit_fields(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(
        t,
        o,
        "127.0.0.4",
        vec![
            ("at the limit", fields(LIMIT_REQUEST_FIELDS)),
            ("one over", fields(LIMIT_REQUEST_FIELDS + 1)),
        ],
    )
}

/// Three GETs of `/seq/N.txt` to a.test, and where each ends.
fn three_gets() -> (Vec<u8>, [usize; 3]) {
    let mut all = Vec::new();
    let mut ends = [0; 3];
    for (i, end) in ends.iter_mut().enumerate() {
        all.extend(h1::get("a.test", &format!("/seq/{}.txt", i + 1)));
        *end = all.len();
    }
    (all, ends)
}

/// Reads `n` responses (each with its time from the last write), then how the
/// connection ends.
fn read_responses(h: &mut H1, o: &mut Observation, n: usize) {
    let sent = Instant::now();
    for i in 1..=n {
        if timed_response(o, &format!("response {i}"), h, sent, &ka_scale(), 10.0).is_none() {
            return;
        }
    }
    let t = Instant::now();
    watch(o, "close", h, t, &ka_scale(), 5.0);
}

fn pipeline_split_crlf(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let (all, [end1, end2, _]) = three_gets();
    let line1 = all.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
    let cuts = [
        line1 + 1,     // between the CR and the LF of the first request line
        end1 - 1,      // between the CR and the LF of the first head's blank line
        end1 + 5,      // the first head's LF with "GET /" of the second
        end2 - 3,      // between the second head's last field's CR LF and its blank line
        end2 + 1,      // the second head's end with the third's "G"
        all.len() - 1, // all but the third head's last LF
    ];
    let mut from = 0;
    for &c in cuts.iter().chain(std::iter::once(&all.len())) {
        h.send(&all[from..c])?;
        from = c;
        super::sleep(0.05);
    }
    read_responses(&mut h, o, 3);
    Ok(())
}

fn pipeline_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let (all, _) = three_gets();
    // Responses come while the client is still sending: it sends on regardless.
    for b in &all {
        h.send(std::slice::from_ref(b))?;
        super::sleep(0.008);
    }
    read_responses(&mut h, o, 3);
    Ok(())
}

fn post_body_with_head(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let mut all = h1::request(
        "POST",
        "a.test",
        "/echo",
        "HTTP/1.1",
        &[
            "Content-Length: 1000",
            "Content-Type: application/octet-stream",
        ],
        &[b'p'; 1000],
    );
    all.extend(h1::get("a.test", "/seq/1.txt"));
    h.send(&all)?;
    read_responses(&mut h, o, 2);
    Ok(())
}

fn chunked_with_head(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let mut all = h1::request(
        "POST",
        "a.test",
        "/echo",
        "HTTP/1.1",
        &[
            "Transfer-Encoding: chunked",
            "Content-Type: application/octet-stream",
        ],
        b"",
    );
    all.extend_from_slice(b"3e8\r\n");
    all.extend_from_slice(&[b'c'; 1000]);
    all.extend_from_slice(b"\r\n10\r\n");
    all.extend_from_slice(&[b'd'; 16]);
    all.extend_from_slice(b"\r\n0\r\n\r\n");
    all.extend(h1::get("a.test", "/seq/2.txt"));
    h.send(&all)?;
    read_responses(&mut h, o, 2);
    Ok(())
}

/// A POST of 1000 bytes to /echo with Expect: 100-continue: its head.
fn expect_head() -> Vec<u8> {
    h1::request(
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
    )
}

fn expect_100_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    if let Some(ev) = deliver(&mut h, &expect_head(), Delivery::Dribbled(0.005)) {
        let now = Instant::now();
        record_event(
            o,
            "server, before the head's end",
            ev,
            now,
            &ka_scale(),
            now,
        );
        return Ok(());
    }
    let sent = Instant::now();
    match h.next_event(after(2.0)) {
        Event::Response(r, at) => o.add(
            "interim",
            format!(
                "{} at {}",
                r.summary(),
                ka_scale().bucket(at.saturating_duration_since(sent))
            ),
        ),
        Event::End(cut) if cut.end.is_none() => o.add("interim", "none within 2 s"),
        Event::End(cut) => {
            o.add("interim", cut.describe());
            return Ok(());
        }
    }
    h.send(&[b'e'; 1000])?;
    let sent = Instant::now();
    timed_response(o, "response", &mut h, sent, &ka_scale(), 10.0);
    exchange(
        o,
        "next request",
        &mut h,
        &h1::get("a.test", "/index.html"),
        10.0,
    );
    Ok(())
}

fn expect_100_with_body(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let mut all = expect_head();
    all.extend_from_slice(&[b'f'; 1000]);
    h.send(&all)?;
    // The interim response (if any) and the final one, then the keep-alive close.
    let t0 = Instant::now();
    watch(o, "server", &mut h, t0, &ka_scale(), 5.0);
    Ok(())
}

fn http10_no_host(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(
        t,
        o,
        "127.0.0.1",
        vec![("HTTP/1.0", b"GET /index.html HTTP/1.0\r\n\r\n".to_vec())],
    )
}

/// `bytes` to 127.0.0.1 as `how` says; everything the server sends, raw; the access
/// log's line.
fn raw_case(
    t: &Target,
    o: &mut Observation,
    bytes: &[u8],
    how: Delivery,
    limit: f64,
) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1("127.0.0.1")?;
    let port = h.conn.local_port();
    let t0 = Instant::now();
    if let Some(ev) = deliver(&mut h, bytes, how) {
        // Only a parsed response or an end can come back early; record it as it is.
        record_event(o, "server, before the last byte", ev, t0, &ka_scale(), t0);
    } else {
        raw(o, "server", &mut h, t0, &ka_scale(), limit);
    }
    t.record_log(o, mark, port, "127.0.0.1", 1);
    Ok(())
}

fn http09(t: &Target, o: &mut Observation) -> Result<(), String> {
    let cases: Vec<Case> = [Delivery::OneWrite, Delivery::Dribbled(0.05)]
        .into_iter()
        .map(|how| -> Case {
            (
                named(how).to_owned(),
                Box::new(move |o: &mut Observation| raw_case(t, o, b"GET /\r\n", how, 6.0)),
            )
        })
        .collect();
    side_by_side(o, cases)
}

fn with_blank_lines(n: usize) -> Vec<u8> {
    let mut b = b"\r\n".repeat(n);
    b.extend(h1::get("a.test", "/index.html"));
    b
}

fn leading_crlf(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(t, o, "127.0.0.1", vec![("2 CRLFs", with_blank_lines(2))])
}

fn bare_lf(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(
        t,
        o,
        "127.0.0.1",
        vec![("LF", b"GET /index.html HTTP/1.1\nHost: a.test\n\n".to_vec())],
    )
}

fn leading_crlf_many(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_cases(t, o, "127.0.0.1", vec![("12 CRLFs", with_blank_lines(12))])
}

fn tls_hello_to_plain(t: &Target, o: &mut Observation) -> Result<(), String> {
    head_case(t, o, "127.0.0.1", &tls::client_hello(), Delivery::OneWrite)
}

fn tls_partial_hello_to_plain(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1("127.0.0.1")?;
    let port = h.conn.local_port();
    let t0 = Instant::now();
    h.send(&tls::partial_client_hello())?;
    let scale = Scale::new(&[
        (TIMEOUT, "Timeout"),
        (REQTIMEOUT_DEFAULT, "reqtimeout default 20"),
    ]);
    watch(o, "server", &mut h, t0, &scale, 12.0);
    t.record_log(o, mark, port, "127.0.0.1", 1);
    Ok(())
}

/// What a status or info page shows that both MPMs share: its status line, its type, and
/// whether the body holds `marker` (the pages themselves name the MPM, the ports, the
/// paths).
fn page_summary(r: &Response, marker: &str) -> String {
    format!(
        "{}, Content-Type: {}, {}",
        r.status_line,
        r.header("Content-Type").unwrap_or("-"),
        if String::from_utf8_lossy(&r.body).contains(marker) {
            format!("body has {marker:?}")
        } else {
            format!("body without {marker:?}")
        }
    )
}

fn page_dribbled(t: &Target, o: &mut Observation, path: &str, marker: &str) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let req = h1::request(
        "GET",
        "a.test",
        path,
        "HTTP/1.1",
        &["Connection: close"],
        b"",
    );
    let early = deliver(&mut h, &req, Delivery::over(1.0, &req));
    let sent = Instant::now();
    let ev = early.unwrap_or_else(|| h.next_event(after(10.0)));
    match ev {
        Event::Response(r, at) => o.add(
            "response",
            format!(
                "{} at {}",
                page_summary(&r, marker),
                ka_scale().bucket(at.saturating_duration_since(sent))
            ),
        ),
        Event::End(cut) => o.add("response", cut.describe()),
    }
    let t0 = Instant::now();
    watch(o, "close", &mut h, t0, &ka_scale(), 3.0);
    Ok(())
}

fn status_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    page_dribbled(t, o, "/server-status?auto", "Scoreboard: ")
}

fn info_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    page_dribbled(t, o, "/server-info?server", "Server Version")
}

fn ka_next_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let req = h1::get("a.test", "/index.html");
    if exchange(o, "response 1", &mut h, &req, 10.0).is_none() {
        return Ok(());
    }
    super::sleep(1.0);
    deliver_and_watch(
        o,
        "request 2",
        &mut h,
        &req,
        Delivery::over(1.5, &req),
        &ka_scale(),
        5.0,
    );
    Ok(())
}

fn ka_next_dribbled_timeout(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1("127.0.0.2")?;
    let port = h.conn.local_port();
    let req = h1::get("ip.test", "/index.html");
    if exchange(o, "response 1", &mut h, &req, 10.0).is_none() {
        return Ok(());
    }
    super::sleep(3.0);
    // 0.1 s a byte: the head would take 4 s; times from its first byte.
    let t0 = Instant::now();
    let scale = Scale::new(&[
        (REQTIMEOUT_EXPLICIT, "header=2 from the first byte"),
        (IP_KEEP_ALIVE, "KeepAliveTimeout"),
    ]);
    match deliver(&mut h, &req, Delivery::Dribbled(0.1)) {
        Some(ev) => {
            if record_event(o, "request 2", ev, t0, &scale, after(8.0)).is_none() {
                watch(o, "request 2", &mut h, t0, &scale, 8.0);
            }
        }
        None => {
            o.add("request 2", "sent whole");
            watch(o, "request 2", &mut h, t0, &scale, 8.0);
        }
    }
    t.record_log(o, mark, port, "127.0.0.2", 2);
    Ok(())
}

/// Reads until `want` bytes came (or 3 s passed): what was echoed, and when its last byte
/// came from `since` (mod_echo answers each line at once; a server that held the bytes
/// back for a whole HTTP head, which never comes, would answer late or not at all).
fn echoed(h: &mut H1, want: usize, since: Instant) -> String {
    let deadline = after(3.0);
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while got.len() < want {
        match h.conn.read_some(&mut chunk, deadline) {
            Got::Data(n) => got.extend_from_slice(&chunk[..n]),
            Got::End(e) => return format!("{:?}, then {e}", String::from_utf8_lossy(&got)),
            Got::Quiet => return format!("{:?}, then quiet", String::from_utf8_lossy(&got)),
        }
    }
    format!(
        "{:?} at {}",
        String::from_utf8_lossy(&got),
        ka_scale().bucket(since.elapsed())
    )
}

fn echo_protocol(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.8")?;
    let first = b"hello, echo\r\n";
    h.send(first)?;
    o.add("line 1", echoed(&mut h, first.len(), Instant::now()));
    // Dribbled, and no blank line in it (mod_echo reads lines: the line comes back once
    // its LF came, not byte by byte).
    let second = b"a line, a byte at a time\r\n";
    for b in second {
        h.send(std::slice::from_ref(b))?;
        super::sleep(0.01);
    }
    o.add(
        "line 2, dribbled",
        echoed(&mut h, second.len(), Instant::now()),
    );
    h.conn
        .shutdown_write()
        .map_err(|e| format!("shutdown: {e}"))?;
    let t0 = Instant::now();
    watch(o, "after the client's FIN", &mut h, t0, &ka_scale(), 5.0);
    Ok(())
}
