//! One client connection, plain or TLS, read with a deadline and with the way it ended told
//! apart: FIN or RST, and for TLS whether a close_notify came first.

use crate::tls::Wire;
use openssl::ssl::{ErrorCode, SslSession, SslStream};
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// The longest single blocking read, so that a deadline is kept to within this.
const READ_SLICE: Duration = Duration::from_millis(200);

/// How the server ended a connection, as the client sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// read() returned 0: the server's FIN.
    Fin,
    /// ECONNRESET: the server's RST.
    Rst,
    /// TLS: a close_notify alert, then the FIN.
    CloseNotifyFin,
    /// TLS: a close_notify alert, then a RST.
    CloseNotifyRst,
    /// TLS: a close_notify alert, and the TCP connection still open 2 s later.
    CloseNotifyOnly,
    /// Any other read error (its kind).
    Error(String),
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Fin => f.write_str("FIN"),
            End::Rst => f.write_str("RST"),
            End::CloseNotifyFin => f.write_str("close_notify+FIN"),
            End::CloseNotifyRst => f.write_str("close_notify+RST"),
            End::CloseNotifyOnly => f.write_str("close_notify, TCP open"),
            End::Error(e) => write!(f, "read error {e}"),
        }
    }
}

/// What one read brought.
#[derive(Debug)]
pub enum Got {
    /// This many bytes.
    Data(usize),
    /// The connection ended.
    End(End),
    /// Nothing by the deadline.
    Quiet,
}

/// A client connection.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<SslStream<Wire>>),
}

fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn io_end(e: &io::Error) -> End {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => End::Rst,
        k => End::Error(format!("{k:?}")),
    }
}

/// Reads a plain socket once, within `deadline`.
pub fn read_tcp(s: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Got {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Got::Quiet;
        }
        let slice = (deadline - now).clamp(Duration::from_millis(1), READ_SLICE);
        if let Err(e) = s.set_read_timeout(Some(slice)) {
            return Got::End(End::Error(e.to_string()));
        }
        match s.read(buf) {
            Ok(0) => return Got::End(End::Fin),
            Ok(n) => return Got::Data(n),
            Err(e) if would_block(&e) => continue,
            Err(e) => return Got::End(io_end(&e)),
        }
    }
}

impl Conn {
    /// The TCP connection under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.get_ref().tcp,
        }
    }

    /// TLS: the session as it is now (after a response, with the tickets TLS 1.3 sends
    /// after the handshake), to resume on another connection.
    pub fn tls_session(&self) -> Option<SslSession> {
        match self {
            Conn::Plain(_) => None,
            Conn::Tls(s) => s.ssl().session().map(|s| s.to_owned()),
        }
    }

    /// The client's port: names this connection in /proc/net/tcp.
    pub fn local_port(&self) -> u16 {
        self.tcp().local_addr().map(|a| a.port()).unwrap_or(0)
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.write_all(bytes),
            Conn::Tls(s) => s.write_all(bytes).and_then(|()| s.flush()),
        }
    }

    /// TLS: sends the client's close_notify (a clean close, after which a session stays
    /// resumable); nothing for a plain connection.
    pub fn close_notify(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(_) => Ok(()),
            Conn::Tls(s) => s.shutdown().map(|_| ()).map_err(io::Error::other),
        }
    }

    /// The client's half-close: a FIN after what was sent (the TCP layer's, under TLS too).
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.tcp().shutdown(Shutdown::Write)
    }

    /// Reads once: data, the end, or nothing by `deadline`.
    pub fn read_some(&mut self, buf: &mut [u8], deadline: Instant) -> Got {
        match self {
            Conn::Plain(s) => read_tcp(s, buf, deadline),
            Conn::Tls(s) => read_tls(s, buf, deadline),
        }
    }
}

/// Reads a TLS stream once, within `deadline`, telling a close_notify apart.
fn read_tls(s: &mut SslStream<Wire>, buf: &mut [u8], deadline: Instant) -> Got {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Got::Quiet;
        }
        let slice = (deadline - now).clamp(Duration::from_millis(1), READ_SLICE);
        if let Err(e) = s.get_ref().tcp.set_read_timeout(Some(slice)) {
            return Got::End(End::Error(e.to_string()));
        }
        let e = match s.ssl_read(buf) {
            Ok(n) => return Got::Data(n),
            Err(e) => e,
        };
        match e.code() {
            ErrorCode::ZERO_RETURN => {
                // The close_notify; what the TCP connection does next is told apart too.
                let mut rest = [0u8; 256];
                let until = Instant::now() + Duration::from_secs(2);
                return Got::End(loop {
                    match read_tcp(&mut s.get_mut().tcp, &mut rest, until) {
                        Got::Data(_) => continue,
                        Got::End(End::Fin) => break End::CloseNotifyFin,
                        Got::End(End::Rst) => break End::CloseNotifyRst,
                        Got::End(other) => break other,
                        Got::Quiet => break End::CloseNotifyOnly,
                    }
                });
            }
            ErrorCode::WANT_READ | ErrorCode::WANT_WRITE => match e.io_error() {
                Some(io) if !would_block(io) => return Got::End(io_end(io)),
                _ => continue,
            },
            ErrorCode::SYSCALL => match e.io_error() {
                None => return Got::End(End::Fin),
                Some(io) if would_block(io) => continue,
                Some(io) => return Got::End(io_end(io)),
            },
            _ => {
                // OpenSSL 3 reports a FIN without close_notify as an SSL error.
                let text = crate::tls::reason(&e);
                if text.contains("unexpected eof") {
                    return Got::End(End::Fin);
                }
                if let Some(io) = e.io_error() {
                    return Got::End(io_end(io));
                }
                // An alert (its reason, not OpenSSL's file and line), and then the TCP
                // connection's end.
                let then = crate::tls::tcp_end(&mut s.get_mut().tcp);
                return Got::End(End::Error(format!("{text}, then {then}")));
            }
        }
    }
}
