//! TLS handshakes and request heads over TLS without a thread (`RWorkerKeepAlive park`): a
//! client that sends part of its ClientHello, or finishes the handshake and dribbles its
//! head, waits parked in the child's event set, where under every stock MPM mod_ssl's
//! blocking handshake (and the core's blocking head read) gives it a thread until
//! `Timeout`. The deadlines are the administrator's: mod_reqtimeout's `handshake=` when set,
//! else `Timeout` per read, then the header stage as for plain text; what the client sees
//! then is what event's client sees.
//!
//! Nothing here is timed beyond "not before the deadline" and a generous "ends": how fast
//! fresh clients are answered beside thousands of slow ones is `bench/slow-senders`' figure.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    assert_parked_heads, first_line, free_port, load_module_lines, parking_under_test,
    raise_fd_limit, read_until_closed, wait_until, Dribblers, Server, ServerOpts,
};
use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode, SslVersion};

fn parking_only() -> bool {
    if !parking_under_test() {
        eprintln!(
            "skipped: TLS handshakes are run without a thread with RWorkerKeepAlive park only"
        );
        return false;
    }
    raise_fd_limit();
    true
}

/// A parking server with a TLS listener (its own ECDSA certificate: cheap handshakes for
/// thousands of clients), mod_reqtimeout loaded, Debian's sizing, and `lines`; returns it,
/// its TLS port and the certificate's directory (kept while the server runs).
fn start(lines: &[&str]) -> (Server, u16, tempfile::TempDir) {
    start_with_vhost(lines, &[])
}

/// As [`start`], with `vhost` lines in the TLS listener's vhost.
fn start_with_vhost(lines: &[&str], vhost: &[&str]) -> (Server, u16, tempfile::TempDir) {
    let (certs, cert, key) = common::self_signed_cert(
        "localhost",
        &["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    );
    let tls = free_port();
    let mut o = ServerOpts::default().keep_alive(true);
    for m in ["socache_shmcb", "ssl", "reqtimeout"] {
        o = o.line(load_module_lines(&[m]).trim_end().to_string());
    }
    o = o
        .line("LogLevel reqtimeout:info ssl:error")
        .line(format!("Listen 127.0.0.1:{tls} https"))
        .line(format!(
            "<VirtualHost 127.0.0.1:{tls}>\n SSLEngine on\n SSLCertificateFile {}\n SSLCertificateKeyFile {}\n {}\n</VirtualHost>",
            cert.display(),
            key.display(),
            vhost.join("\n ")
        ));
    for l in lines {
        o = o.line(*l);
    }
    let s = Server::start(o);
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    (s, tls, certs)
}

/// The first 5 bytes of a TLS ClientHello: a handshake record's header, whose body never
/// comes.
const HELLO_START: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00];

fn connector(version: Option<SslVersion>) -> SslConnector {
    let mut b = SslConnector::builder(SslMethod::tls_client()).unwrap();
    b.set_verify(SslVerifyMode::NONE);
    if let Some(v) = version {
        b.set_min_proto_version(Some(v)).unwrap();
        b.set_max_proto_version(Some(v)).unwrap();
    }
    b.build()
}

/// A TLS connection to `port`, its handshake done.
fn tls_connect(port: u16) -> Result<SslStream<TcpStream>, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // One connector for all: making one loads the system's CA store (tens of ms).
    static CONNECTOR: std::sync::OnceLock<SslConnector> = std::sync::OnceLock::new();
    CONNECTOR
        .get_or_init(|| connector(None))
        .configure()
        .unwrap()
        .verify_hostname(false)
        .connect("localhost", tcp)
        .map_err(|e| format!("handshake: {e}"))
}

/// A fresh HTTPS client's request on a new connection (handshake included): its status line.
fn fresh_request(port: u16) -> Result<String, String> {
    let mut c = tls_connect(port)?;
    c.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    Ok(first_line(&read_until_closed(&mut c, Instant::now()).0))
}

/// 40 fresh HTTPS clients, one every 250 ms: the failures.
fn fresh_clients(port: u16) -> Vec<String> {
    let mut failed = Vec::new();
    for i in 0..40 {
        match fresh_request(port) {
            Ok(st) if st.contains(" 200 ") => {}
            Ok(st) => failed.push(format!("fresh request {i}: {st:?}")),
            Err(e) => failed.push(format!("fresh request {i}: {e}")),
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    failed
}

const N: usize = 3000;

/// 3,000 clients that send the first 5 bytes of a ClientHello and then nothing: far more
/// than the server's 150 threads, all parked as the server counts them, while 40 fresh
/// HTTPS clients are answered. (Under every stock MPM each holds a thread for `Timeout`.)
#[test]
fn three_thousand_stalled_handshakes_wait_parked_while_fresh_https_clients_are_answered() {
    if !parking_only() {
        return;
    }
    let (s, tls, _certs) = start(&["Timeout 300"]);
    let conns: Vec<TcpStream> = (0..N)
        .map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", tls)).expect("connect");
            c.write_all(HELLO_START).unwrap();
            c
        })
        .collect();
    // A generous limit: 3,000 clients connect through a backlog of 511 on a loaded machine.
    assert_parked_heads(&s, (N - 150) as u64, Duration::from_secs(120));
    let failed = fresh_clients(tls);
    assert!(failed.is_empty(), "fresh clients not answered: {failed:?}");
    drop(conns);
    s.assert_no_warnings_in_error_log();
}

/// 3,000 TLS clients that finish the handshake, then send a header byte every 2 s: parked
/// (counted), none closed, while 40 fresh HTTPS clients are answered.
#[test]
fn three_thousand_tls_head_dribblers_wait_parked_while_fresh_https_clients_are_answered() {
    if !parking_only() {
        return;
    }
    // Timeout 300: the first clients wait for the last ones' handshakes before they dribble.
    let (s, tls, _certs) = start(&["RequestReadTimeout header=300", "Timeout 300"]);
    let began = Instant::now();
    let conns: Vec<SslStream<TcpStream>> = (0..N)
        .map(|i| {
            let mut c = tls_connect(tls).unwrap_or_else(|e| panic!("client {i}: {e}"));
            c.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\nX-a: ")
                .unwrap();
            c.get_ref().set_nonblocking(true).unwrap();
            c
        })
        .collect();
    eprintln!("{N} TLS clients connected in {:?}", began.elapsed());
    let dribblers = Dribblers::start(conns);
    assert_parked_heads(&s, (N - 150) as u64, Duration::from_secs(120));
    let failed = fresh_clients(tls);
    assert!(failed.is_empty(), "fresh clients not answered: {failed:?}");
    assert_eq!(
        dribblers.closed(),
        0,
        "dribbling clients closed by the server"
    );
    drop(dribblers);
    s.assert_no_warnings_in_error_log();
}

/// `RequestReadTimeout handshake=2` in the TLS vhost, beside Debian's reqtimeout.conf at the
/// server level (the vhost's stages then carry the server's MinRate without its factor: no
/// MinRate): a stalled handshake is parked, then ended at its deadline (never before) by
/// mod_reqtimeout's own timeout, which logs AH01382 as under event; the client sees the
/// connection closed, with no response.
#[test]
fn a_stalled_handshake_ends_at_the_handshake_stage() {
    if !parking_only() {
        return;
    }
    let (s, tls, _certs) = start_with_vhost(
        &["RequestReadTimeout header=20-40,MinRate=500 body=10,MinRate=500"],
        &["RequestReadTimeout handshake=2"],
    );
    let start = Instant::now();
    let mut c = TcpStream::connect(("127.0.0.1", tls)).unwrap();
    c.write_all(HELLO_START).unwrap();
    assert_parked_heads(&s, 1, Duration::from_secs(2));
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (got, took) = read_until_closed(&mut c, start);
    assert!(
        took >= Duration::from_secs(2),
        "ended after {took:?}, before the deadline"
    );
    assert!(
        took < Duration::from_secs(30),
        "ended after {took:?}, not at the 2 s deadline"
    );
    assert!(got.is_empty(), "a response to a stalled handshake: {got:?}");
    assert!(
        wait_until(Duration::from_secs(10), || s
            .error_log()
            .contains("Request handshake read timeout")),
        "no AH01382 for the handshake: {}",
        s.error_log()
    );
}

/// Without a handshake stage a handshake waits as mod_ssl's blocking read would: `Timeout`
/// for each read. A ClientHello dribbled a byte a second for longer than Timeout in all
/// stays; once it stops, the connection is closed Timeout after its last byte.
#[test]
fn without_a_handshake_stage_a_handshake_waits_timeout_per_read() {
    if !parking_only() {
        return;
    }
    let (s, tls, _certs) = start(&["Timeout 3"]);
    let mut c = TcpStream::connect(("127.0.0.1", tls)).unwrap();
    c.set_nodelay(true).unwrap();
    for b in &HELLO_START[..4] {
        c.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
    }
    c.write_all(&HELLO_START[4..]).unwrap();
    let last = Instant::now();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let (got, took) = read_until_closed(&mut c, last);
    assert!(
        took >= Duration::from_secs(3),
        "ended {took:?} after the last byte"
    );
    assert!(
        took < Duration::from_secs(30),
        "ended {took:?} after the last byte"
    );
    assert!(got.is_empty(), "a response to a stalled handshake: {got:?}");
    drop(s);
}

/// A stream that writes one byte per write (with a pause), so that a client's ClientHello
/// and head arrive in pieces.
#[derive(Debug)]
struct OneByteWrites(TcpStream);

impl Read for OneByteWrites {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for OneByteWrites {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(2));
        self.0.write(&buf[..1])
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A handshake whose every flight comes a byte at a time, then a head a byte (a TLS record)
/// at a time, on TLS 1.2 and 1.3, twice on one connection: each answered as from a whole
/// one.
#[test]
fn handshakes_and_heads_in_pieces_are_served_as_whole_ones() {
    if !parking_only() {
        return;
    }
    let (s, tls, _certs) = start(&[]);
    for version in [SslVersion::TLS1_2, SslVersion::TLS1_3] {
        let tcp = TcpStream::connect(("127.0.0.1", tls)).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut c = connector(Some(version))
            .configure()
            .unwrap()
            .verify_hostname(false)
            .connect("localhost", OneByteWrites(tcp))
            .unwrap_or_else(|e| panic!("{version:?} handshake in pieces: {e}"));
        for last in [false, true] {
            let close = if last { "Connection: close\r\n" } else { "" };
            let head = format!("GET /index.html HTTP/1.1\r\nHost: x\r\n{close}\r\n");
            for b in head.as_bytes() {
                c.write_all(&[*b]).unwrap();
            }
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // The response: its head and the whole body (index.html's length).
            while !String::from_utf8_lossy(&got).contains("\r\n\r\n") {
                let k = c.read(&mut buf).unwrap_or(0);
                assert!(
                    k > 0,
                    "{version:?}: no response (got {:?})",
                    String::from_utf8_lossy(&got)
                );
                got.extend_from_slice(&buf[..k]);
            }
            assert!(
                first_line(&String::from_utf8_lossy(&got)).contains(" 200 "),
                "{version:?}: {:?}",
                String::from_utf8_lossy(&got)
            );
            if last {
                read_until_closed(&mut c, Instant::now());
            } else {
                // The rest of the body, so the next response starts clean.
                let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
                let len: usize = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap());
                let body_at = text.find("\r\n\r\n").unwrap() + 4;
                let mut have = got.len() - body_at;
                while have < len {
                    have += c.read(&mut buf).unwrap();
                }
            }
        }
    }
    s.assert_no_warnings_in_error_log();
}

/// A keep-alive connection over TLS 1.2 (whose first request comes a round trip after the
/// handshake: it found nothing at the first look and was read into a buffer): its second
/// head, sent in part, waits parked too (counted), then is served.
#[test]
fn a_second_head_over_tls12_waits_parked() {
    if !parking_only() {
        return;
    }
    let (s, tls, _certs) = start(&[]);
    let tcp = TcpStream::connect(("127.0.0.1", tls)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut c = connector(Some(SslVersion::TLS1_2))
        .configure()
        .unwrap()
        .verify_hostname(false)
        .connect("localhost", tcp)
        .unwrap();
    c.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let first = read_one_response(&mut c);
    assert!(first_line(&first).contains(" 200 "), "first: {first:?}");
    c.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert_parked_heads(&s, 1, Duration::from_secs(10));
    c.write_all(b"Connection: close\r\n\r\n").unwrap();
    let (second, _) = read_until_closed(&mut c, Instant::now());
    assert!(first_line(&second).contains(" 200 "), "second: {second:?}");
    s.assert_no_warnings_in_error_log();
}

/// One response with a Content-Length body, read whole.
fn read_one_response<S: Read>(c: &mut S) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let len: usize = text[..end]
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                return text;
            }
        }
        let k = c.read(&mut buf).unwrap_or(0);
        assert!(k > 0, "no whole response: {text:?}");
        got.extend_from_slice(&buf[..k]);
    }
}

/// A head over TLS whose fields never end: at mod_reqtimeout's header deadline (`header=3`)
/// answered 408 and closed, as under event, with mod_reqtimeout's own log line; never
/// before the deadline.
#[test]
fn an_unfinished_head_over_tls_gets_408_at_the_header_deadline() {
    if !parking_only() {
        return;
    }
    let (s, tls, _certs) = start(&["RequestReadTimeout header=3", "Timeout 60"]);
    let mut c = tls_connect(tls).unwrap();
    let start = Instant::now();
    c.write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert_parked_heads(&s, 1, Duration::from_secs(2));
    c.get_ref()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let (got, took) = read_until_closed(&mut c, start);
    assert!(
        took >= Duration::from_secs(3),
        "ended after {took:?}, before the deadline"
    );
    assert!(
        took < Duration::from_secs(30),
        "ended after {took:?}, not at the 3 s deadline"
    );
    assert!(
        first_line(&got).contains(" 408 "),
        "got {:?}",
        first_line(&got)
    );
    assert!(
        s.error_log().contains("Request header read timeout"),
        "no AH01382: {}",
        s.error_log()
    );
    s.assert_no_warnings_in_error_log();
}

/// Plain HTTP sent to the TLS port, whole or a byte at a time: mod_ssl's 400 ("speaking
/// plain HTTP to an SSL-enabled server port"), as under every MPM.
#[test]
fn plain_http_to_the_tls_port_gets_mod_ssls_400() {
    if !parking_only() {
        return;
    }
    let (_s, tls, _certs) = start(&[]);
    for dribbled in [false, true] {
        let mut c = TcpStream::connect(("127.0.0.1", tls)).unwrap();
        c.set_nodelay(true).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let req = b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n";
        if dribbled {
            for b in req {
                c.write_all(&[*b]).unwrap();
                std::thread::sleep(Duration::from_millis(20));
            }
        } else {
            c.write_all(req).unwrap();
        }
        let (got, _) = read_until_closed(&mut c, Instant::now());
        assert!(
            first_line(&got).contains(" 400 "),
            "dribbled {dribbled}: {:?}",
            first_line(&got)
        );
        assert!(got.contains("plain HTTP"), "dribbled {dribbled}: {got:?}");
    }
}
