//! TLS clients: a handshake with SNI and ALPN (the certificate is the run's own self-signed
//! one, so it is not verified), and the first bytes of a ClientHello for a client that never
//! finishes its handshake.

use crate::conn::Conn;
use crate::tcp;
use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use std::time::Duration;

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
    tcp: std::net::TcpStream,
    ip: &str,
    port: u16,
    sni: &str,
    alpn: &[&str],
) -> Result<(Conn, Option<String>), String> {
    let mut b = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
    b.set_verify(SslVerifyMode::NONE);
    if !alpn.is_empty() {
        let mut wire = Vec::new();
        for p in alpn {
            wire.push(p.len() as u8);
            wire.extend_from_slice(p.as_bytes());
        }
        b.set_alpn_protos(&wire).map_err(|e| e.to_string())?;
    }
    let connector = b.build();
    // A handshake that hangs is the server's fault, but must not hang the harness.
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let cfg = connector
        .configure()
        .map_err(|e| e.to_string())?
        .verify_hostname(false)
        .use_server_name_indication(true);
    let stream = cfg
        .connect(sni, tcp)
        .map_err(|e| format!("TLS handshake with {sni} at {ip}:{port}: {e}"))?;
    let chosen = stream
        .ssl()
        .selected_alpn_protocol()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    Ok((Conn::Tls(Box::new(stream)), chosen))
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
