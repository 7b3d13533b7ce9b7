//! TLS clients: a handshake with SNI and ALPN (the certificate is the run's own self-signed
//! one, so it is not verified), and as a scenario asks: one protocol version only, a
//! session to resume, a client certificate, the ClientHello one byte per write; the first
//! bytes of a ClientHello for a client that never finishes its handshake.

use crate::conn::{Conn, End, Got};
use crate::tcp;
use openssl::ssl::{
    ErrorCode, HandshakeError, SslConnector, SslFiletype, SslMethod, SslSession, SslVerifyMode,
    SslVersion,
};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A TLS connection to `ip:port` with SNI `sni`, offering `alpn` (e.g. `["h2",
/// "http/1.1"]`); returns it and the protocol the server chose (None: no ALPN).
pub fn connect(
    ip: &str,
    port: u16,
    sni: &str,
    alpn: &[&str],
) -> Result<(Conn, Option<String>), String> {
    let tcp = tcp::connect(ip, port).map_err(|e| format!("connect {ip}:{port}: {e}"))?;
    handshake(tcp, ip, port, sni, alpn)
}

/// As [`connect`], over a TCP connection with SO_RCVBUF `rcvbuf` (a slow reader's small
/// window, [`tcp::connect_with_rcvbuf`]).
pub fn connect_with_rcvbuf(
    ip: &str,
    port: u16,
    sni: &str,
    alpn: &[&str],
    rcvbuf: i32,
) -> Result<(Conn, Option<String>), String> {
    let tcp = tcp::connect_with_rcvbuf(ip, port, rcvbuf)
        .map_err(|e| format!("connect {ip}:{port}: {e}"))?;
    handshake(tcp, ip, port, sni, alpn)
}

fn handshake(
    tcp: TcpStream,
    ip: &str,
    port: u16,
    sni: &str,
    alpn: &[&str],
) -> Result<(Conn, Option<String>), String> {
    let client = Client {
        alpn,
        ..Client::default()
    };
    match client.handshake(tcp, sni)? {
        Handshake::Done(s) => Ok((s.conn, s.alpn)),
        Handshake::Failed(f) => Err(format!(
            "TLS handshake with {sni} at {ip}:{port}: {}",
            f.why
        )),
    }
}

/// What a TLS client offers beyond SNI.
#[derive(Default)]
pub struct Client<'a> {
    /// ALPN protocols, in order (none: no ALPN extension).
    pub alpn: &'a [&'a str],
    /// This protocol version only (min and max).
    pub version: Option<SslVersion>,
    /// A session of an earlier connection, offered for resumption.
    pub session: Option<SslSession>,
    /// A client certificate and its key (PEM files), sent when the server asks.
    pub cert: Option<(PathBuf, PathBuf)>,
    /// The ClientHello one byte per write, spread over this many seconds (the connection
    /// watched between writes); the rest of the handshake as usual.
    pub hello_over: Option<f64>,
}

/// A finished handshake.
pub struct Session {
    pub conn: Conn,
    /// The protocol ALPN chose, if any.
    pub alpn: Option<String>,
    /// "TLSv1.2", "TLSv1.3".
    pub version: String,
    /// Whether the server resumed the session offered.
    pub reused: bool,
}

/// A handshake the server did not finish.
#[derive(Debug)]
pub struct Failed {
    /// What the client saw: the TLS error's reason (an alert), or what the server did
    /// while the ClientHello was still coming (its FIN), and then how the TCP connection
    /// ended.
    pub why: String,
    /// How long after what (`since`) the client saw it: a dribbled hello's end from its
    /// first byte (the server's deadline runs from about then), any other failure from
    /// the client's last write (the time the server took to answer it, without the TCP
    /// connect and the client's own work before).
    pub after: Duration,
    /// "the hello's first byte" or "the client's last write".
    pub since: &'static str,
    /// For a dribbled ClientHello the server ended: how many of its bytes went before,
    /// of how many ("120 of 310 B"; timing-dependent, so a scenario notes it and does not
    /// compare it).
    pub hello_sent: Option<String>,
}

/// How a handshake went.
pub enum Handshake {
    Done(Session),
    Failed(Failed),
}

impl Client<'_> {
    /// A handshake with SNI `sni` to `ip:port`; Err only for the harness's own failures
    /// (no TCP connection, a client certificate that would not load).
    pub fn connect(&self, ip: &str, port: u16, sni: &str) -> Result<Handshake, String> {
        let tcp = tcp::connect(ip, port).map_err(|e| format!("connect {ip}:{port}: {e}"))?;
        self.handshake(tcp, sni)
    }

    fn handshake(&self, tcp: TcpStream, sni: &str) -> Result<Handshake, String> {
        let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
        b.set_verify(SslVerifyMode::NONE);
        if !self.alpn.is_empty() {
            let mut wire = Vec::new();
            for p in self.alpn {
                wire.push(p.len() as u8);
                wire.extend_from_slice(p.as_bytes());
            }
            b.set_alpn_protos(&wire).map_err(|e| e.to_string())?;
        }
        if let Some(v) = self.version {
            b.set_min_proto_version(Some(v))
                .and_then(|()| b.set_max_proto_version(Some(v)))
                .map_err(|e| e.to_string())?;
        }
        if let Some((cert, key)) = &self.cert {
            b.set_certificate_chain_file(cert)
                .and_then(|()| b.set_private_key_file(key, SslFiletype::PEM))
                .map_err(|e| format!("client certificate {}: {e}", cert.display()))?;
        }
        let connector = b.build();
        // A handshake that hangs is the server's fault, but must not hang the harness.
        tcp.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        let mut cfg = connector
            .configure()
            .map_err(|e| e.to_string())?
            .verify_hostname(false)
            .use_server_name_indication(true);
        if let Some(s) = &self.session {
            // SAFETY: the session comes from a connection with the same protocol family
            // (a TLS client), which is all SSL_set_session asks.
            unsafe { cfg.set_session(s) }.map_err(|e| e.to_string())?;
        }
        let wire = Wire {
            tcp,
            hello_over: self.hello_over,
            early: None,
            first_write: None,
            last_write: None,
        };
        match cfg.connect(sni, wire) {
            Ok(stream) => {
                let ssl = stream.ssl();
                let alpn = ssl
                    .selected_alpn_protocol()
                    .map(|p| String::from_utf8_lossy(p).into_owned());
                let version = ssl.version_str().to_owned();
                let reused = ssl.session_reused();
                Ok(Handshake::Done(Session {
                    conn: Conn::Tls(Box::new(stream)),
                    alpn,
                    version,
                    reused,
                }))
            }
            Err(HandshakeError::SetupFailure(e)) => Err(e.to_string()),
            Err(HandshakeError::Failure(mut mid)) | Err(HandshakeError::WouldBlock(mut mid)) => {
                let at = Instant::now();
                let w = mid.get_ref();
                if let Some((what, early_at, sent)) = w.early.clone() {
                    let first = w.first_write.unwrap_or(early_at);
                    return Ok(Handshake::Failed(Failed {
                        why: format!("{what} before the ClientHello was whole"),
                        after: early_at.saturating_duration_since(first),
                        since: "the hello's first byte",
                        hello_sent: Some(sent),
                    }));
                }
                let last = w.last_write.unwrap_or(at);
                let why = if mid.error().code() == ErrorCode::WANT_READ {
                    "no answer within 10 s".to_owned()
                } else {
                    reason(mid.error())
                };
                let then = tcp_end(&mut mid.get_mut().tcp);
                Ok(Handshake::Failed(Failed {
                    why: format!("{why}, then {then}"),
                    after: at.saturating_duration_since(last),
                    since: "the client's last write",
                    hello_sent: None,
                }))
            }
        }
    }
}

/// The reason of a TLS error as OpenSSL names it ("tlsv13 alert certificate required",
/// "unexpected eof while reading"), without its file and line; else the I/O error's kind.
pub fn reason(e: &openssl::ssl::Error) -> String {
    if let Some(r) = e
        .ssl_error()
        .and_then(|s| s.errors().iter().find_map(|x| x.reason()))
    {
        return r.to_owned();
    }
    match e.io_error() {
        Some(io) => format!("{:?}", io.kind()),
        None if e.code() == ErrorCode::SYSCALL => "EOF".to_owned(),
        None => format!("TLS error code {}", e.code().as_raw()),
    }
}

/// How the TCP connection under a failed TLS one ends within 2 s (bytes the server still
/// sends are skipped).
pub fn tcp_end(s: &mut TcpStream) -> String {
    let mut rest = [0u8; 256];
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        match crate::conn::read_tcp(s, &mut rest, until) {
            Got::Data(_) => continue,
            Got::End(e) => return e.to_string(),
            Got::Quiet => return "TCP open 2 s later".to_owned(),
        }
    }
}

/// The TCP connection under a TLS client. Reads and writes pass through, but for a
/// ClientHello to be dribbled: its write goes one byte per write, and between them the
/// connection is watched (as [`crate::scenarios::deliver`] does), so that a server that
/// closes before the hello is whole is seen then, with the time.
pub struct Wire {
    pub tcp: TcpStream,
    /// The hello's spread (None once it went, or when it goes in one write).
    hello_over: Option<f64>,
    /// What the server did while the hello was still coming, when, and the hello's bytes
    /// sent by then.
    early: Option<(String, Instant, String)>,
    /// When the first byte went (the hello's), and when the last write ended.
    first_write: Option<Instant>,
    last_write: Option<Instant>,
}

impl Wire {
    /// Waits until `due` unless the server sends something or ends the connection first
    /// (ppoll(2), whose timeout is not rounded to the scheduler's tick as a socket's
    /// receive timeout is): what it did, or None.
    fn watch_until(&mut self, due: Instant) -> io::Result<Option<String>> {
        loop {
            let now = Instant::now();
            if now >= due {
                return Ok(None);
            }
            let left = due - now;
            let ts = libc::timespec {
                tv_sec: left.as_secs() as libc::time_t,
                tv_nsec: left.subsec_nanos() as libc::c_long,
            };
            let mut p = libc::pollfd {
                fd: self.tcp.as_raw_fd(),
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            };
            // SAFETY: one valid pollfd, a valid timespec, no signal mask.
            let rc = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                continue;
            }
            self.tcp.set_nonblocking(true)?;
            let mut one = [0u8; 1];
            let peeked = self.tcp.peek(&mut one);
            self.tcp.set_nonblocking(false)?;
            return Ok(Some(match peeked {
                Ok(0) => End::Fin.to_string(),
                Ok(_) => "data".to_owned(),
                Err(e) if would_block(&e) => continue,
                Err(e) => io_name(&e),
            }));
        }
    }

    fn dribble(&mut self, bytes: &[u8], over: f64) -> io::Result<()> {
        let gap = Duration::from_secs_f64(over / bytes.len().max(1) as f64);
        for (i, b) in bytes.iter().enumerate() {
            if let Err(e) = self.tcp.write_all(std::slice::from_ref(b)) {
                self.early = Some((
                    format!("write refused ({})", io_name(&e)),
                    Instant::now(),
                    format!("{i} of {} B", bytes.len()),
                ));
                return Err(e);
            }
            if i + 1 == bytes.len() {
                return Ok(());
            }
            let due = Instant::now() + gap;
            if let Some(what) = self.watch_until(due)? {
                self.early = Some((
                    what,
                    Instant::now(),
                    format!("{} of {} B", i + 1, bytes.len()),
                ));
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "the server acted before the ClientHello was whole",
                ));
            }
        }
        Ok(())
    }
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// RST for a reset, else the error's kind.
fn io_name(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => End::Rst.to_string(),
        k => format!("{k:?}"),
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tcp.read(buf)
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.first_write.get_or_insert_with(Instant::now);
        let sent = match self.hello_over.take() {
            None => self.tcp.write(buf),
            Some(over) => self.dribble(buf, over).map(|()| buf.len()),
        };
        self.last_write = Some(Instant::now());
        sent
    }

    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// The first 60 bytes of a TLS 1.2 ClientHello record that announces 512 bytes: a server
/// reads it and waits for the rest, which never comes.
pub fn partial_client_hello() -> Vec<u8> {
    let mut b = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, // handshake record, 512 bytes
        0x01, 0x00, 0x01, 0xfc, // ClientHello, 508 bytes
        0x03, 0x03, // TLS 1.2
    ];
    b.extend((0..32u8).map(|i| i.wrapping_mul(37))); // random
    b.push(0); // no session id
    b.extend_from_slice(&[0x00, 0x04, 0x13, 0x01, 0xc0, 0x2f]); // 2 cipher suites
    b.extend_from_slice(&[0x01, 0x00]); // null compression
    b.extend_from_slice(&[0x01, 0xd1, 0x00, 0x00, 0x00]); // extensions: 465 bytes announced
    b
}

/// A whole TLS 1.3 ClientHello (SNI a.test, x25519), every byte fixed: what a client that
/// took the plain port for the TLS one sends first. Like every real one it holds a 0x0a
/// byte (the supported_groups extension's type), so a server reading lines finds a "line"
/// in it.
pub fn client_hello() -> Vec<u8> {
    fn ext(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut e = kind.to_be_bytes().to_vec();
        e.extend_from_slice(&(body.len() as u16).to_be_bytes());
        e.extend_from_slice(body);
        e
    }
    let name = b"a.test";
    let mut sni = ((name.len() + 3) as u16).to_be_bytes().to_vec();
    sni.push(0); // host_name
    sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
    sni.extend_from_slice(name);
    let mut key_share = vec![0x00, 0x24, 0x00, 0x1d, 0x00, 0x20];
    key_share.extend((0..32u8).map(|i| i.wrapping_mul(29).wrapping_add(1)));
    let mut extensions = Vec::new();
    extensions.extend(ext(0x0000, &sni));
    extensions.extend(ext(0x000a, &[0x00, 0x02, 0x00, 0x1d])); // supported_groups: x25519
    extensions.extend(ext(0x000d, &[0x00, 0x02, 0x08, 0x04])); // signature_algorithms
    extensions.extend(ext(0x002b, &[0x02, 0x03, 0x04])); // supported_versions: TLS 1.3
    extensions.extend(ext(0x0033, &key_share));
    let mut hello = vec![0x03, 0x03]; // legacy_version TLS 1.2
    hello.extend((0..32u8).map(|i| i.wrapping_mul(37))); // random
    hello.push(0); // no session id
    hello.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    hello.extend_from_slice(&[0x01, 0x00]); // null compression
    hello.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    hello.extend(extensions);
    let mut handshake = vec![0x01]; // ClientHello
    handshake.extend_from_slice(&(hello.len() as u32).to_be_bytes()[1..]);
    handshake.extend(hello);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend(handshake);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dribbled hello to a server that reads 10 bytes and closes: the FIN is seen
    /// while the hello is still going, with what was sent by then.
    #[test]
    fn a_dribbled_hello_sees_the_servers_fin() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = [0u8; 10];
            s.read_exact(&mut got).unwrap();
            // The FIN now; what comes after is drained, so that no RST overtakes it.
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let _ = std::io::copy(&mut s, &mut std::io::sink());
        });
        let mut w = Wire {
            tcp: tcp::connect("127.0.0.1", port).unwrap(),
            hello_over: Some(1.0),
            early: None,
            first_write: None,
            last_write: None,
        };
        let t0 = Instant::now();
        assert!(w.write(&[0x16; 100]).is_err());
        drop(w.tcp);
        server.join().unwrap();
        let (what, at, sent) = w.early.expect("the FIN seen early");
        assert_eq!(what, "FIN");
        assert!(at - t0 < Duration::from_millis(500), "{:?}", at - t0);
        let n: usize = sent.split(' ').next().unwrap().parse().unwrap();
        assert!((10..100).contains(&n), "{sent}");
        assert!(sent.ends_with(" of 100 B"), "{sent}");
    }

    /// The record's and the handshake's lengths add up, and a line ends inside it.
    #[test]
    fn the_client_hello_is_whole() {
        let h = client_hello();
        assert_eq!(u16::from_be_bytes([h[3], h[4]]) as usize, h.len() - 5);
        assert_eq!(
            u32::from_be_bytes([0, h[6], h[7], h[8]]) as usize,
            h.len() - 9
        );
        assert!(h.contains(&b'\n'));
        assert!(!partial_client_hello().contains(&b'\n'));
    }
}
