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
