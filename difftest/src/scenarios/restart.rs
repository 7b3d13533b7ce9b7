//! The idle and slow phases of the other groups through a signal: `graceful` (a restart;
//! the server goes on) and `graceful-stop` with GracefulShutdownTimeout 3 (the server
//! exits; the runner starts it again). Times are from the signal. The downloads come from
//! `/8m.bin` (sendfile off: written blocking inside the handler) and from the sendfile
//! location (`download-sendfile`: drained by the MPM's write completion, which waits for
//! writability in the poll set under event and rworker `park`).

use super::http2::{h2_response, watch_h2};
use super::{after, exchange, response, watch, Group, Scenario, Target};
use crate::conn::Got;
use crate::h1::{self, H1};
use crate::h2::H2;
use crate::observe::{Observation, Scale};
use crate::site::*;
use crate::tls;
use std::time::{Duration, Instant};

/// The signal a scenario sends its server.
#[derive(Clone, Copy, Debug)]
pub enum Signal {
    Graceful,
    GracefulStop,
}

/// Signals the server; the instant the signal went, which later times are taken from.
fn send(t: &Target, s: Signal) -> Result<Instant, String> {
    match s {
        Signal::Graceful => t.server.graceful(),
        Signal::GracefulStop => t.server.graceful_stop(),
    }
}

/// The marks after a signal.
fn scale(extra: &[(f64, &str)]) -> Scale {
    let mut marks = vec![(1.0, "1 s"), (GRACEFUL_SHUTDOWN, "GracefulShutdownTimeout")];
    marks.extend_from_slice(extra);
    Scale::new(&marks)
}

/// Idle keep-alive on ip.test (KeepAliveTimeout 5), the signal 0.3 s after the response.
fn ka_idle(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let mut h = t.h1("127.0.0.2")?;
    if exchange(
        o,
        "response",
        &mut h,
        &h1::get("ip.test", "/index.html"),
        10.0,
    )
    .is_none()
    {
        return Ok(());
    }
    super::sleep(0.3);
    let at = send(t, s)?;
    watch(
        o,
        "close",
        &mut h,
        at,
        &scale(&[(IP_KEEP_ALIVE - 0.3, "KeepAliveTimeout after the response")]),
        10.0,
    );
    Ok(())
}

/// As [`ka_idle`], and a next request 0.3 s after the signal.
fn ka_next(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let mut h = t.h1("127.0.0.2")?;
    if exchange(
        o,
        "response 1",
        &mut h,
        &h1::get("ip.test", "/index.html"),
        10.0,
    )
    .is_none()
    {
        return Ok(());
    }
    super::sleep(0.3);
    let at = send(t, s)?;
    super::sleep(0.3);
    if exchange(
        o,
        "response 2",
        &mut h,
        &h1::get("ip.test", "/index.html"),
        10.0,
    )
    .is_some()
    {
        watch(
            o,
            "close",
            &mut h,
            at,
            &scale(&[(IP_KEEP_ALIVE, "KeepAliveTimeout")]),
            10.0,
        );
    }
    Ok(())
}

/// Half a head, the signal, the rest of the head 0.5 s later.
fn slow_head(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    h.send(b"GET /index.html HTTP/1.1\r\nHost: a.test\r\n")?;
    super::sleep(0.3);
    let at = send(t, s)?;
    super::sleep(0.5);
    if h.send(b"X-Rest: 1\r\n\r\n").is_err() {
        o.add("rest of head", "refused");
    }
    if response(o, "response", &mut h, 10.0).is_some() {
        watch(
            o,
            "close",
            &mut h,
            at,
            &scale(&[(KEEP_ALIVE + 0.5, "KeepAliveTimeout")]),
            10.0,
        );
    } else {
        watch(o, "close", &mut h, at, &scale(&[]), 1.0);
    }
    Ok(())
}

/// A head one byte per write over 2 s, the signal 0.5 s in.
fn dribble_head(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    dribble_head_on(t, o, s, t.h1("127.0.0.1")?, "a.test")
}

/// As [`dribble_head`] over TLS (tls-a.test, ALPN http/1.1): each byte a TLS record.
fn tls_dribble_head(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let (c, _alpn) = t.tls("127.0.0.1", "tls-a.test", &["http/1.1"])?;
    dribble_head_on(t, o, s, H1::new(c), "tls-a.test")
}

fn dribble_head_on(
    t: &Target,
    o: &mut Observation,
    s: Signal,
    mut h: H1,
    host: &str,
) -> Result<(), String> {
    let req = h1::request(
        "GET",
        host,
        "/index.html",
        "HTTP/1.1",
        &["User-Agent: rworker-diff", "Accept: */*"],
        b"",
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let early = std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            let _ = tx.send(send(t, s));
        });
        super::deliver(&mut h, &req, super::Delivery::over(2.0, &req))
    });
    let at = match rx.recv() {
        Ok(Ok(at)) => at,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("the signal's thread sent nothing".into()),
    };
    // Not the usual 1 s mark: the head ends 1.5 s after the signal, inside its window.
    let scale = Scale::new(&[
        (1.5, "the head's end"),
        (GRACEFUL_SHUTDOWN, "GracefulShutdownTimeout"),
        (1.5 + KEEP_ALIVE, "KeepAliveTimeout after the head"),
    ]);
    if let Some(ev) = early {
        o.add("head", "cut short");
        if super::record_event(o, "server", ev, at, &scale, after(10.0)).is_some() {
            return Ok(());
        }
    }
    watch(o, "server", &mut h, at, &scale, 10.0);
    Ok(())
}

/// Half a body (POST /echo), the signal, the rest 0.5 s later.
fn slow_body(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    h.send(&h1::request(
        "POST",
        "a.test",
        "/echo",
        "HTTP/1.1",
        &["Content-Length: 200"],
        &[b'1'; 100],
    ))?;
    super::sleep(0.3);
    let at = send(t, s)?;
    super::sleep(0.5);
    if h.send(&[b'2'; 100]).is_err() {
        o.add("rest of body", "refused");
    }
    if response(o, "response", &mut h, 10.0).is_some() {
        watch(
            o,
            "close",
            &mut h,
            at,
            &scale(&[(KEEP_ALIVE + 0.5, "KeepAliveTimeout")]),
            10.0,
        );
    }
    Ok(())
}

/// 8 MiB to a reader that takes about 5 s (past GracefulShutdownTimeout); the signal 0.5 s
/// in.
fn download(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    download_from(t, o, s, "/8m.bin")
}

/// As [`download`] from the sendfile location: the download waits in write completion
/// (parked under event and rworker `park`) when the signal comes.
fn download_sendfile(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    download_from(t, o, s, LARGE_SENDFILE)
}

fn download_from(t: &Target, o: &mut Observation, s: Signal, path: &str) -> Result<(), String> {
    let mut h = t.h1_small_window("127.0.0.1")?;
    h.send(&h1::get("a.test", path))?;
    // The head and the first bytes, so that the response is under way.
    let mut first = vec![0u8; 4096];
    match h.conn.read_some(&mut first, after(10.0)) {
        Got::Data(n) => first.truncate(n),
        other => {
            o.add("response", format!("{other:?}"));
            return Ok(());
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (got, end, end_at) = std::thread::scope(|sc| {
        sc.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            let _ = tx.send(send(t, s));
        });
        // Read the rest (its head went in `first`: count what follows).
        let mut got = 0usize;
        let mut b = vec![0u8; 64 * 1024];
        loop {
            match h.conn.read_some(&mut b, after(30.0)) {
                Got::Data(n) => {
                    got += n;
                    std::thread::sleep(Duration::from_millis(40));
                }
                Got::End(e) => break (got, e.to_string(), Instant::now()),
                Got::Quiet => break (got, "quiet 30 s".to_string(), Instant::now()),
            }
        }
    });
    let signalled = match rx.recv() {
        Ok(Ok(at)) => at,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err("the signal's thread sent nothing".into()),
    };
    let head_text = String::from_utf8_lossy(&first);
    let head_len = head_text.find("\r\n\r\n").map_or(0, |i| i + 4);
    let body = got + first.len() - head_len;
    o.add("status", head_text.lines().next().unwrap_or("").to_owned());
    o.add(
        "download",
        if body >= LARGE {
            format!("whole body, then {end}")
        } else {
            // When, from the signal: a cut at GracefulShutdownTimeout is the children's
            // deadline; one at once would be a stop that does not wait for the download.
            format!(
                "cut short at {}, then {end}",
                scale(&[]).bucket(end_at.saturating_duration_since(signalled))
            )
        },
    );
    Ok(())
}

/// h2 over TLS to ip-tls.test (127.0.0.2, its own KeepAliveTimeout 5) idle; the signal
/// 0.3 s after the response.
fn h2_idle(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let (c, alpn) = t.tls("127.0.0.2", "ip-tls.test", &["h2", "http/1.1"])?;
    o.add("ALPN", alpn.clone().unwrap_or_else(|| "none".into()));
    if alpn.as_deref() != Some("h2") {
        return Ok(());
    }
    let mut h = H2::start(c, "https")?;
    h.get(1, "ip-tls.test", "/index.html")?;
    if !h2_response(o, "stream 1", &mut h, 1) {
        return Ok(());
    }
    super::sleep(0.3);
    let at = send(t, s)?;
    let marks = [(IP_KEEP_ALIVE - 0.3, "KeepAliveTimeout after the response")];
    watch_h2(o, &mut h, at, &scale(&marks), 10.0);
    Ok(())
}

/// A TLS handshake that never finishes on 127.0.0.2 (Timeout 4); the signal 0.3 s in.
fn tls_handshake(t: &Target, o: &mut Observation, s: Signal) -> Result<(), String> {
    let mut h = H1::new(t.raw_tls_port("127.0.0.2")?);
    h.send(&tls::partial_client_hello())?;
    super::sleep(0.3);
    let at = send(t, s)?;
    watch(
        o,
        "server",
        &mut h,
        at,
        &scale(&[(TIMEOUT - 0.3, "Timeout after the hello")]),
        10.0,
    );
    Ok(())
}

macro_rules! signalled {
    ($($name:literal, $about:literal, $base:ident, $fast:expr, $g:ident, $gs:ident;)*) => {
        $(
            fn $g(t: &Target, o: &mut Observation) -> Result<(), String> {
                $base(t, o, Signal::Graceful)
            }
            fn $gs(t: &Target, o: &mut Observation) -> Result<(), String> {
                $base(t, o, Signal::GracefulStop)
            }
        )*
        pub fn scenarios() -> Vec<Scenario> {
            let mut v = Vec::new();
            $(
                v.extend([Scenario {
                    name: concat!($name, "+graceful"),
                    about: concat!($about, "; graceful restart"),
                    group: Group::Exclusive,
                    fast: $fast,
                    signals: true,
                    site: Site::Full,
                    run: $g,
                },
                Scenario {
                    name: concat!($name, "+graceful-stop"),
                    about: concat!($about, "; graceful-stop, GracefulShutdownTimeout 3"),
                    group: Group::Stops,
                    fast: $fast,
                    signals: true,
                    site: Site::Full,
                    run: $gs,
                }]);
            )*
            v
        }
    };
}

signalled! {
    "ka-idle", "an idle keep-alive connection (ip.test, KeepAliveTimeout 5), the signal 0.3 s after its response", ka_idle, true, ka_idle_g, ka_idle_gs;
    "ka-next", "an idle keep-alive connection, the signal, a next request 0.3 s later", ka_next, false, ka_next_g, ka_next_gs;
    "slow-head", "half a head, the signal, the rest 0.5 s later", slow_head, false, slow_head_g, slow_head_gs;
    "dribble-head", "a head one byte per write over 2 s, the signal 0.5 s in", dribble_head, false, dribble_head_g, dribble_head_gs;
    "tls-dribble-head", "a head over TLS (tls-a.test) one byte per write over 2 s, the signal 0.5 s in", tls_dribble_head, false, tls_dribble_head_g, tls_dribble_head_gs;
    "slow-body", "half a POST body, the signal, the rest 0.5 s later", slow_body, false, slow_body_g, slow_body_gs;
    "download", "8 MiB to a reader that takes 5 s, the signal 0.5 s in", download, true, download_g, download_gs;
    "download-sendfile", "8 MiB with EnableSendfile On (write completion) to a reader that takes 5 s, the signal 0.5 s in", download_sendfile, false, download_sendfile_g, download_sendfile_gs;
    "h2-idle", "an idle h2 connection over TLS (ip-tls.test, KeepAliveTimeout 5), the signal 0.3 s after its stream", h2_idle, false, h2_idle_g, h2_idle_gs;
    "tls-handshake", "a TLS handshake that never finishes (127.0.0.2, Timeout 4), the signal 0.3 s in", tls_handshake, false, tls_handshake_g, tls_handshake_gs;
}
