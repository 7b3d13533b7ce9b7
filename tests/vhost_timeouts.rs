//! Per-vhost timeouts: a connection waits under the timeouts of the virtual host that
//! served its last request, as under the stock MPMs, not under those of the first vhost of
//! its address. The rule is event's (and the core's keep-alive loop's): the request's
//! vhost where it sets KeepAliveTimeout itself, else the address's first vhost; both
//! KeepAliveTimeout and Timeout come from that one vhost; for h2 chosen by ALPN, the SNI
//! vhost. Each test runs in both keep-alive modes (`park`, where the MPM applies the
//! timeouts itself, and `thread`, where the core does), or against the stock MPM under
//! test.
//!
//! The timeouts differ tenfold between the vhosts, so what is checked is which of the two
//! applies, not how precisely.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{connect_with_rcvbuf, free_port, Mpm, RawConn, Server, ServerOpts};

/// The keep-alive modes to run a test in: both of rworker's, or the stock MPM as it is.
fn modes() -> Vec<Option<&'static str>> {
    match Mpm::under_test() {
        Mpm::Rworker => vec![Some("park"), Some("thread")],
        _ => vec![None],
    }
}

/// A server in `mode` with `main` (directives of the main server) and, on a second port,
/// name-based vhosts `(name, directives)`, the first of which is that address's base
/// server. Returns the server and the vhosts' port.
fn start(mode: Option<&str>, main: &[&str], vhosts: &[(&str, &[&str])]) -> (Server, u16) {
    let port = free_port();
    let mut opts = ServerOpts::default().keep_alive(true);
    for l in main {
        opts = opts.line(*l);
    }
    if let Some(m) = mode {
        opts = opts.line(format!("RWorkerKeepAlive {m}"));
    }
    opts = opts.line(format!("Listen 127.0.0.1:{port}"));
    for (name, lines) in vhosts {
        opts = opts.line(format!(
            "<VirtualHost 127.0.0.1:{port}>\n ServerName {name}\n {}\n</VirtualHost>",
            lines.join("\n ")
        ));
    }
    (Server::start(opts), port)
}

fn request(host: &str, path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: rworker-tests\r\n\r\n").into_bytes()
}

/// One request for `host` on a fresh connection to `port`; the connection, kept alive.
fn first_request(port: u16, host: &str) -> RawConn {
    let mut c = RawConn::connect(&format!("127.0.0.1:{port}"));
    c.send(&request(host, "/index.html"));
    let r = c.read_response();
    assert_eq!(r.status, 200, "first request for {host}");
    assert_ne!(
        r.headers.get("connection").map(String::as_str),
        Some("close"),
        "the first response for {host} does not keep the connection alive"
    );
    c
}

/// Whether a second request on `c` is answered (false: the server had closed it).
fn answers_again(c: &mut RawConn, host: &str) -> bool {
    c.send(&request(host, "/index.html"));
    let mut b = [0u8; 12];
    matches!(c.read_some(&mut b), Ok(n) if n > 0) && b.starts_with(b"HTTP/1.1 200")
}

/// Seconds until the server closes the idle connection `c` (a read returns end of stream
/// or an error), at most `limit`.
fn seconds_until_closed(c: &mut RawConn, limit: Duration) -> Option<f64> {
    let t = Instant::now();
    while t.elapsed() < limit {
        let mut b = [0u8; 64];
        match c.read_some(&mut b) {
            Ok(0) | Err(_) if t.elapsed() < limit => return Some(t.elapsed().as_secs_f64()),
            _ => {}
        }
    }
    None
}

/// KeepAliveTimeout 1 s in the main server, 10 s in the name-based vhost `long.test`: a
/// second request 3 s after the first is answered on `long.test`'s connection, and the
/// address's base vhost (`base.test`, with the main server's 1 s) has closed its own.
#[test]
fn a_name_based_vhost_keeps_its_longer_keep_alive_timeout() {
    for mode in modes() {
        let (s, port) = start(
            mode,
            &["KeepAliveTimeout 1"],
            &[("base.test", &[]), ("long.test", &["KeepAliveTimeout 10"])],
        );
        let mut long = first_request(port, "long.test");
        let mut base = first_request(port, "base.test");
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            answers_again(&mut long, "long.test"),
            "{mode:?}: long.test's connection was closed before its KeepAliveTimeout 10"
        );
        assert!(
            !answers_again(&mut base, "base.test"),
            "{mode:?}: base.test's connection outlived its KeepAliveTimeout 1"
        );
        s.assert_no_warnings_in_error_log();
    }
}

/// KeepAliveTimeout 10 s in the main server, 1 s in the vhost `short.test`: its idle
/// connection is closed after about 1 s, not 10.
#[test]
fn a_name_based_vhost_closes_after_its_shorter_keep_alive_timeout() {
    for mode in modes() {
        let (s, port) = start(
            mode,
            &["KeepAliveTimeout 10"],
            &[("base.test", &[]), ("short.test", &["KeepAliveTimeout 1"])],
        );
        let mut short = first_request(port, "short.test");
        let closed = seconds_until_closed(&mut short, Duration::from_secs(20));
        assert!(
            closed.is_some_and(|t| t < 6.0),
            "{mode:?}: short.test's idle connection was closed after {closed:?} s, not about 1 s"
        );
        s.assert_no_warnings_in_error_log();
    }
}

/// Bytes of `path` a reader gets that reads nothing for 8 s after its request, then reads
/// on until the end of the stream (its receive buffer is small, so the server fills the
/// socket and waits to write on).
fn read_after_a_stall(port: u16, host: &str, path: &str) -> usize {
    let mut c = connect_with_rcvbuf(&format!("127.0.0.1:{port}"), 4096);
    c.write_all(&request(host, path)).expect("send request");
    std::thread::sleep(Duration::from_secs(8));
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = 0;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match c.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return got,
        }
    }
}

/// Timeout 30 s in the main server, 2 s in the vhost `quick.test` (which sets its own
/// KeepAliveTimeout, so it is the connection's vhost): a reader that stalls for 8 s in the
/// middle of a 64 MB download from `quick.test` loses the connection (the server gave up
/// writing after 2 s), while the same reader on the base vhost gets the whole file. With
/// sendfile and without mmap the core sets the file aside instead of writing it in the
/// handler, so an async MPM writes it in write completion, under the vhost's Timeout.
#[test]
fn write_completion_waits_under_the_vhosts_timeout() {
    for mode in modes() {
        let (s, port) = start(
            mode,
            &[
                "Timeout 30",
                "KeepAliveTimeout 5",
                "EnableSendfile On",
                "EnableMMAP Off",
            ],
            &[
                ("base.test", &[]),
                ("quick.test", &["Timeout 2", "KeepAliveTimeout 5"]),
            ],
        );
        let size = 64 << 20;
        std::fs::write(s.docroot().join("64m.bin"), vec![b'x'; size]).expect("write 64m.bin");
        let quick = read_after_a_stall(port, "quick.test", "/64m.bin");
        let base = read_after_a_stall(port, "base.test", "/64m.bin");
        assert!(
            quick < size,
            "{mode:?}: quick.test's stalled reader got all {quick} bytes: its Timeout 2 did not apply"
        );
        assert!(
            base > size,
            "{mode:?}: base.test's stalled reader got {base} bytes, not the whole response"
        );
        s.assert_no_warnings_in_error_log();
    }
}

/// h2 over TLS, chosen by ALPN on the SNI vhost `long.test` (KeepAliveTimeout 10; the
/// port's first vhost has 1 s): a second request 3 s after the first reuses the connection
/// (curl reports no new connect), where on the first vhost it needs a new one.
#[test]
fn h2_on_an_sni_vhost_keeps_its_keep_alive_timeout() {
    let (_certs, cert, key) = common::self_signed_cert("base.test", &["rsa:2048"]);
    let tls = |name: &str, more: &str| {
        format!(
            "SSLEngine on\n SSLCertificateFile {}\n SSLCertificateKeyFile {}\n {more}\n ServerName {name}",
            cert.display(),
            key.display()
        )
    };
    for mode in modes() {
        let port = free_port();
        let mut opts = ServerOpts::default()
            .keep_alive(true)
            .line("KeepAliveTimeout 1")
            .line("Protocols h2 http/1.1")
            .line("LogLevel ssl:error");
        for m in ["socache_shmcb", "ssl", "http2"] {
            opts = opts.line(common::load_module_lines(&[m]));
        }
        if let Some(m) = mode {
            opts = opts.line(format!("RWorkerKeepAlive {m}"));
        }
        let opts = opts
            .line(format!("Listen 127.0.0.1:{port} https"))
            .line(format!(
                "<VirtualHost 127.0.0.1:{port}>\n {}\n</VirtualHost>",
                tls("base.test", "")
            ))
            .line(format!(
                "<VirtualHost 127.0.0.1:{port}>\n {}\n</VirtualHost>",
                tls("long.test", "KeepAliveTimeout 10")
            ));
        let s = Server::start(opts);
        // Two transfers 3 s apart (--rate), on one connection if the server keeps it.
        let connects = |host: &str| -> Vec<String> {
            let url = format!("https://{host}:{port}/index.html");
            let out = Command::new("curl")
                .args(["-s", "-k", "--http2", "--rate", "20/m"])
                .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
                .args(["-w", "%{http_version} %{http_code} %{num_connects}\\n"])
                .args(["-o", "/dev/null", &url, "-o", "/dev/null", &url])
                .output()
                .expect("run curl");
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_owned)
                .collect()
        };
        let long = connects("long.test");
        assert_eq!(
            long,
            ["2 200 1", "2 200 0"],
            "{mode:?}: h2 on long.test did not keep its connection for 3 s (KeepAliveTimeout 10)"
        );
        let base = connects("base.test");
        assert_eq!(
            base,
            ["2 200 1", "2 200 1"],
            "{mode:?}: h2 on base.test kept its connection past its KeepAliveTimeout 1"
        );
        s.assert_no_warnings_in_error_log();
    }
}
