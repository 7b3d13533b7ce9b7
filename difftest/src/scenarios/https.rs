//! TLS handshakes and request heads over TLS (issue 48: park drives the handshake and
//! reads the head over TLS without a thread; nothing a client sees may change). SNI
//! choosing a vhost with its own Timeout, KeepAliveTimeout and Protocols; ALPN; session
//! resumption; a client certificate required at the handshake (tls-cc.test); TLS 1.2 and
//! 1.3; a ClientHello one byte per write, within and past `RequestReadTimeout handshake=`
//! and under Timeout alone; plain HTTP to the TLS port; the next request on a TLS
//! keep-alive connection dribbled, and pipelined requests in one TLS record.
//!
//! Heads over TLS are written as [`deliver`] writes them: one byte per write is one TLS
//! record per byte. Where the server cuts a connection, the time is from the client's
//! first byte (its ClientHello's, or its head's), in the scenario's marks.

use super::{
    deliver_and_watch, side_by_side, timed_response, watch, Case, Delivery, Group, Scenario, Target,
};
use crate::h1::{self, H1};
use crate::observe::{Observation, Scale};
use crate::site::*;
use crate::tls::{Client, Handshake, Session};
use openssl::ssl::SslVersion;
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
            "tls-sni-vhost-dribbled",
            "SNI tls-b.test (KeepAliveTimeout 6, Timeout 8): a head one byte per write over 2 s, answered, then idle",
            false,
            sni_vhost_dribbled,
        ),
        s(
            "tls-sni-vhost-stall",
            "SNI tls-b.test (Timeout 8; the address's Timeout 4): a partial request line; a request line and a partial header; then nothing",
            true,
            sni_vhost_stall,
        ),
        s(
            "tls-alpn-h1-dribbled",
            "ALPN http/1.1 chosen (offered alone; no ALPN; h2 and http/1.1 offered to tls-h1.test, Protocols http/1.1): a head one byte per write over 1 s, then idle",
            false,
            alpn_h1_dribbled,
        ),
        s(
            "tls-resume",
            "TLS 1.2 and 1.3: a GET, then a second connection offering the first's session: resumed?, its head in pieces",
            true,
            resume,
        ),
        s(
            "tls-client-cert",
            "SNI tls-cc.test (SSLVerifyClient require), TLS 1.2 and 1.3: with the client CA's certificate (a head dribbled) and without one",
            true,
            client_cert,
        ),
        s(
            "tls-versions-dribbled",
            "TLS 1.2 and TLS 1.3 forced by the client: a head one byte per write over 1 s, then idle",
            false,
            versions_dribbled,
        ),
        s(
            "tls-hello-dribbled",
            "a ClientHello (517 B) one byte per write: over 0.5 s and over 4 s on 127.0.0.1 (handshake=2), over 6 s on 127.0.0.2 (Timeout 4 a read); then a GET",
            true,
            hello_dribbled,
        ),
        s(
            "tls-port-plain-http",
            "a plain-text GET to the TLS port, in one write and dribbled",
            true,
            port_plain_http,
        ),
        s(
            "tls-ka-next-dribbled",
            "tls-a.test: a response, 1 s idle, then the next head one byte per write over 1.5 s (past KeepAliveTimeout from the response)",
            false,
            ka_next_dribbled,
        ),
        s(
            "tls-pipeline",
            "tls-a.test: two GETs in one TLS write; a GET and the next one's first bytes in one write, the rest 0.3 s later",
            true,
            pipeline,
        ),
    ]
}

/// The marks of the TLS vhosts on 127.0.0.1: the address's (tls-a.test's, the server
/// config's) and tls-b.test's.
fn scale() -> Scale {
    Scale::new(&[
        (KEEP_ALIVE, "KeepAliveTimeout"),
        (TIMEOUT, "Timeout"),
        (VHOST_KEEP_ALIVE, "tls-b.test's KeepAliveTimeout"),
        (VHOST_TIMEOUT, "tls-b.test's Timeout"),
    ])
}

/// The client certificate and its key in `t`'s ServerRoot (the run's own client CA
/// signed it).
fn client_cert_files(t: &Target) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = t.server.root.join("certs");
    (dir.join("client.pem"), dir.join("client-key.pem"))
}

/// A handshake to `ip` with SNI `sni` as `client` says; recorded under "handshake" (the
/// version, ALPN's choice, whether a session was resumed; or why and when it failed, in
/// `scale`'s buckets). The session if it finished.
fn handshake(
    t: &Target,
    o: &mut Observation,
    ip: &str,
    sni: &str,
    client: &Client,
    scale: &Scale,
) -> Result<Option<Session>, String> {
    match client.connect(ip, t.ports().tls, sni)? {
        Handshake::Done(s) => {
            let mut what = format!(
                "{}, ALPN {}",
                s.version,
                s.alpn.as_deref().unwrap_or("none")
            );
            if client.session.is_some() {
                what.push_str(if s.reused {
                    ", resumed"
                } else {
                    ", not resumed"
                });
            }
            o.add("handshake", what);
            Ok(Some(s))
        }
        Handshake::Failed(f) => {
            o.add(
                "handshake",
                format!(
                    "failed at {} from {}: {}",
                    scale.bucket(f.after),
                    f.since,
                    f.why
                ),
            );
            if let Some(n) = f.hello_sent {
                o.note("ClientHello sent", n);
            }
            Ok(None)
        }
    }
}

/// An HTTP/1.1-over-TLS connection to 127.0.0.1 with SNI `sni` (ALPN http/1.1 only).
fn tls_h1(t: &Target, sni: &str) -> Result<H1, String> {
    let (c, _alpn) = t.tls("127.0.0.1", sni, &["http/1.1"])?;
    Ok(H1::new(c))
}

/// A GET to `host` with two more fields: a head of about 90 bytes.
fn head(host: &str) -> Vec<u8> {
    h1::request(
        "GET",
        host,
        "/index.html",
        "HTTP/1.1",
        &["User-Agent: rworker-diff", "Accept: */*"],
        b"",
    )
}

fn sni_vhost_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = tls_h1(t, "tls-b.test")?;
    let req = head("tls-b.test");
    deliver_and_watch(
        o,
        "server",
        &mut h,
        &req,
        Delivery::over(2.0, &req),
        &scale(),
        10.0,
    );
    Ok(())
}

/// `bytes` to tls-b.test in one write, then nothing: what the server does within 12 s
/// of the write, and the access log's line.
fn stall_case(t: &Target, o: &mut Observation, bytes: &[u8]) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = tls_h1(t, "tls-b.test")?;
    let port = h.conn.local_port();
    let t0 = Instant::now();
    h.send(bytes)?;
    watch(o, "server", &mut h, t0, &scale(), 12.0);
    t.record_log(o, mark, port, "127.0.0.1", 1);
    Ok(())
}

/// The head is read under the address's vhost (c->base_server: tls-a.test, Timeout 4 and
/// reqtimeout's header=20-40) until its Host is known, whatever SNI chose.
fn sni_vhost_stall(t: &Target, o: &mut Observation) -> Result<(), String> {
    let cases: Vec<Case> = vec![
        (
            "partial request line".into(),
            Box::new(move |o: &mut Observation| stall_case(t, o, b"GET /index.html HT")),
        ),
        (
            "partial header".into(),
            Box::new(move |o: &mut Observation| {
                stall_case(
                    t,
                    o,
                    b"GET /index.html HTTP/1.1\r\nHost: tls-b.test\r\nX-Partial: ab",
                )
            }),
        ),
    ];
    side_by_side(o, cases)
}

/// A handshake to 127.0.0.1 with SNI `sni` as `client` says, then `host`'s head one byte
/// per write over `over` s: the answer, and the close within `limit` s.
fn dribbled_after(
    t: &Target,
    o: &mut Observation,
    sni: &str,
    client: &Client,
    over: f64,
    limit: f64,
) -> Result<(), String> {
    let Some(s) = handshake(t, o, "127.0.0.1", sni, client, &scale())? else {
        return Ok(());
    };
    if s.alpn.as_deref() == Some("h2") {
        return Ok(());
    }
    let mut h = H1::new(s.conn);
    let req = head(sni);
    deliver_and_watch(
        o,
        "server",
        &mut h,
        &req,
        Delivery::over(over, &req),
        &scale(),
        limit,
    );
    Ok(())
}

fn alpn_h1_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let case = |name: &str, sni: &'static str, alpn: &'static [&'static str]| -> Case {
        (
            name.to_owned(),
            Box::new(move |o: &mut Observation| {
                let client = Client {
                    alpn,
                    ..Client::default()
                };
                dribbled_after(t, o, sni, &client, 1.0, 5.0)
            }),
        )
    };
    side_by_side(
        o,
        vec![
            case("tls-a.test, http/1.1 offered", "tls-a.test", &["http/1.1"]),
            case("tls-a.test, no ALPN", "tls-a.test", &[]),
            case(
                "tls-h1.test, h2 and http/1.1 offered",
                "tls-h1.test",
                &["h2", "http/1.1"],
            ),
        ],
    )
}

/// The protocol versions forced, with their names for the cases.
const VERSIONS: [(&str, SslVersion); 2] = [
    ("TLS 1.2", SslVersion::TLS1_2),
    ("TLS 1.3", SslVersion::TLS1_3),
];

/// Adds `from`'s facts to `o`, each under `prefix`.
fn add_prefixed(o: &mut Observation, prefix: &str, from: Observation) {
    for (w, v) in from.facts {
        o.add(format!("{prefix}: {w}"), v);
    }
}

/// A first connection and its GET, closed with the client's close_notify; a second that
/// offers the first's session, its head in three pieces 0.1 s apart.
fn resume_case(t: &Target, o: &mut Observation, version: SslVersion) -> Result<(), String> {
    let first = Client {
        alpn: &["http/1.1"],
        version: Some(version),
        ..Client::default()
    };
    let mut c1 = Observation::new();
    let Some(s) = handshake(t, &mut c1, "127.0.0.1", "tls-a.test", &first, &scale())? else {
        add_prefixed(o, "connection 1", c1);
        return Ok(());
    };
    let mut h = H1::new(s.conn);
    super::exchange(
        &mut c1,
        "response",
        &mut h,
        &h1::get("tls-a.test", "/index.html"),
        10.0,
    );
    add_prefixed(o, "connection 1", c1);
    // The session as the response left it (TLS 1.3's tickets come after the handshake).
    let Some(session) = h.conn.tls_session() else {
        o.add("connection 1", "no session to resume");
        return Ok(());
    };
    // A clean close: OpenSSL marks the session of a connection freed without the
    // client's close_notify as not resumable (the client's copy too: it would not even
    // be offered).
    let _ = h.conn.close_notify();
    drop(h);
    let second = Client {
        alpn: &["http/1.1"],
        version: Some(version),
        session: Some(session),
        ..Client::default()
    };
    let mut c2 = Observation::new();
    if let Some(s) = handshake(t, &mut c2, "127.0.0.1", "tls-a.test", &second, &scale())? {
        let mut h = H1::new(s.conn);
        let req = head("tls-a.test");
        let third = req.len() / 3;
        for piece in [&req[..third], &req[third..2 * third]] {
            h.send(piece)?;
            super::sleep(0.1);
        }
        h.send(&req[2 * third..])?;
        let sent = Instant::now();
        timed_response(&mut c2, "response", &mut h, sent, &scale(), 10.0);
    }
    add_prefixed(o, "connection 2", c2);
    Ok(())
}

fn resume(t: &Target, o: &mut Observation) -> Result<(), String> {
    let cases: Vec<Case> = VERSIONS
        .iter()
        .map(|&(name, v)| -> Case {
            (
                name.to_owned(),
                Box::new(move |o: &mut Observation| resume_case(t, o, v)),
            )
        })
        .collect();
    side_by_side(o, cases)
}

/// To tls-cc.test as `version`, with the client certificate or without: the handshake;
/// then with one a head dribbled over 0.5 s and its answer; without one what the server
/// sends unasked within 2 s (TLS 1.3: the client's handshake is done before the server
/// has checked its certificate, and the alert comes after).
fn client_cert_case(
    t: &Target,
    o: &mut Observation,
    version: SslVersion,
    with: bool,
) -> Result<(), String> {
    let client = Client {
        alpn: &["http/1.1"],
        version: Some(version),
        cert: with.then(|| client_cert_files(t)),
        ..Client::default()
    };
    let Some(s) = handshake(t, o, "127.0.0.1", "tls-cc.test", &client, &scale())? else {
        return Ok(());
    };
    let mut h = H1::new(s.conn);
    if with {
        let req = head("tls-cc.test");
        deliver_and_watch(
            o,
            "server",
            &mut h,
            &req,
            Delivery::over(0.5, &req),
            &scale(),
            4.0,
        );
    } else {
        let t1 = Instant::now();
        watch(o, "after the handshake", &mut h, t1, &scale(), 2.0);
    }
    Ok(())
}

fn client_cert(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut cases: Vec<Case> = Vec::new();
    for (name, v) in VERSIONS {
        for with in [true, false] {
            cases.push((
                format!(
                    "{name}, {}",
                    if with {
                        "with a certificate"
                    } else {
                        "without"
                    }
                ),
                Box::new(move |o: &mut Observation| client_cert_case(t, o, v, with)),
            ));
        }
    }
    side_by_side(o, cases)
}

fn versions_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let cases: Vec<Case> = VERSIONS
        .iter()
        .map(|&(name, v)| -> Case {
            (
                name.to_owned(),
                Box::new(move |o: &mut Observation| {
                    let client = Client {
                        alpn: &["http/1.1"],
                        version: Some(v),
                        ..Client::default()
                    };
                    dribbled_after(t, o, "tls-a.test", &client, 1.0, 5.0)
                }),
            )
        })
        .collect();
    side_by_side(o, cases)
}

/// A ClientHello to `ip` (SNI `sni`) one byte per write over `over` s; if the handshake
/// finishes, a GET and its answer.
fn hello_case(
    t: &Target,
    o: &mut Observation,
    ip: &str,
    sni: &str,
    over: f64,
) -> Result<(), String> {
    let client = Client {
        alpn: &["http/1.1"],
        hello_over: Some(over),
        ..Client::default()
    };
    let scale = Scale::new(&[
        (HANDSHAKE_TIMEOUT, "handshake=2"),
        (TIMEOUT, "Timeout"),
        (over, "the hello's last byte"),
    ]);
    let Some(s) = handshake(t, o, ip, sni, &client, &scale)? else {
        return Ok(());
    };
    let mut h = H1::new(s.conn);
    super::exchange(o, "response", &mut h, &h1::get(sni, "/index.html"), 10.0);
    Ok(())
}

/// Within the limit by a wide margin (a loaded machine paces the bytes late, never
/// early), past it by twice, and without one.
fn hello_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let case = |name: &str, ip: &'static str, sni: &'static str, over: f64| -> Case {
        (
            name.to_owned(),
            Box::new(move |o: &mut Observation| hello_case(t, o, ip, sni, over)),
        )
    };
    side_by_side(
        o,
        vec![
            case(
                "127.0.0.1 (handshake=2), over 0.5 s",
                "127.0.0.1",
                "tls-a.test",
                0.5,
            ),
            case(
                "127.0.0.1 (handshake=2), over 4 s",
                "127.0.0.1",
                "tls-a.test",
                4.0,
            ),
            case(
                "127.0.0.2 (no handshake limit, Timeout 4), over 6 s",
                "127.0.0.2",
                "ip-tls.test",
                6.0,
            ),
        ],
    )
}

/// A plain GET to 127.0.0.1's TLS port as `how` says: what the server answers (mod_ssl's
/// 400, in plain text) and how it ends, times from the last byte sent; the access log.
fn plain_case(t: &Target, o: &mut Observation, how: Delivery) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = H1::new(t.raw_tls_port("127.0.0.1")?);
    let port = h.conn.local_port();
    let req = h1::get("tls-a.test", "/index.html");
    deliver_and_watch(o, "server", &mut h, &req, how, &scale(), 5.0);
    t.record_log(o, mark, port, "127.0.0.1", 1);
    Ok(())
}

fn port_plain_http(t: &Target, o: &mut Observation) -> Result<(), String> {
    let cases: Vec<Case> = [
        ("one write", Delivery::OneWrite),
        ("dribbled", Delivery::Dribbled(0.01)),
    ]
    .into_iter()
    .map(|(name, how)| -> Case {
        (
            name.to_owned(),
            Box::new(move |o: &mut Observation| plain_case(t, o, how)),
        )
    })
    .collect();
    side_by_side(o, cases)
}

fn ka_next_dribbled(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = tls_h1(t, "tls-a.test")?;
    let req = h1::get("tls-a.test", "/index.html");
    if super::exchange(o, "response 1", &mut h, &req, 10.0).is_none() {
        return Ok(());
    }
    super::sleep(1.0);
    deliver_and_watch(
        o,
        "request 2",
        &mut h,
        &req,
        Delivery::over(1.5, &req),
        &scale(),
        5.0,
    );
    Ok(())
}

/// Sends `first`, then after 0.3 s `rest` (if any); reads `n` responses, each timed from
/// the last write, then how the connection ends.
fn pipeline_case(
    t: &Target,
    o: &mut Observation,
    first: &[u8],
    rest: &[u8],
    n: usize,
) -> Result<(), String> {
    let mut h = tls_h1(t, "tls-a.test")?;
    h.send(first)?;
    if !rest.is_empty() {
        super::sleep(0.3);
        h.send(rest)?;
    }
    let sent = Instant::now();
    for i in 1..=n {
        let what = format!("response {i}");
        if timed_response(o, &what, &mut h, sent, &scale(), 10.0).is_none() {
            return Ok(());
        }
    }
    let t1 = Instant::now();
    watch(o, "close", &mut h, t1, &scale(), 5.0);
    Ok(())
}

/// Two GETs in one TLS record: the second is in mod_ssl's buffer, decrypted, when the
/// first is answered; no more comes on the socket.
fn pipeline(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut two = h1::get("tls-a.test", "/seq/1.txt");
    two.extend(h1::get("tls-a.test", "/seq/2.txt"));
    let split = h1::get("tls-a.test", "/seq/1.txt").len() + 10;
    let cases: Vec<Case> = vec![
        (
            "two in one write".into(),
            Box::new(|o: &mut Observation| pipeline_case(t, o, &two, &[], 2)),
        ),
        (
            "one and 10 bytes, then the rest".into(),
            Box::new(|o: &mut Observation| pipeline_case(t, o, &two[..split], &two[split..], 2)),
        ),
    ];
    side_by_side(o, cases)
}
