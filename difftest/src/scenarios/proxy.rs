//! The PROXY protocol (mod_remoteip, `RemoteIPProxyProtocol On` on proxy.test, 127.0.0.7):
//! a v1 line and a v2 header in the same write as the request head and dribbled with it;
//! the address they name is the one the request sees (the response's X-Client-Addr) and
//! the access log's (its client port is the header's too). And a head without the header.

use super::{deliver_and_watch, side_by_side, Case, Delivery, Group, Scenario, Target};
use crate::h1;
use crate::observe::{Observation, Scale};
use crate::site::*;

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
            "proxy-v1",
            "a PROXY v1 line and a GET to proxy.test, in one write and dribbled",
            true,
            proxy_v1,
        ),
        s(
            "proxy-v2",
            "a PROXY v2 header and a GET to proxy.test, in one write and dribbled",
            true,
            proxy_v2,
        ),
        s(
            "proxy-missing",
            "a GET to proxy.test without the PROXY header it requires",
            false,
            proxy_missing,
        ),
    ]
}

/// The server's address for proxy.test, which the headers name as the destination too
/// (so the access log's server address is this one either way).
const PROXY_IP: &str = "127.0.0.7";

fn scale() -> Scale {
    Scale::new(&[(KEEP_ALIVE, "KeepAliveTimeout"), (TIMEOUT, "Timeout")])
}

/// A PROXY v1 line from 192.0.2.`host`:`port`.
fn v1(host: u8, port: u16) -> Vec<u8> {
    format!("PROXY TCP4 192.0.2.{host} {PROXY_IP} {port} 80\r\n").into_bytes()
}

/// A PROXY v2 header (PROXY command, TCP over IPv4) from 192.0.2.`host`:`port`.
fn v2(host: u8, port: u16) -> Vec<u8> {
    let mut b = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    b.push(0x21); // version 2, PROXY
    b.push(0x11); // AF_INET, STREAM
    b.extend_from_slice(&12u16.to_be_bytes());
    b.extend_from_slice(&[192, 0, 2, host]);
    b.extend_from_slice(&[127, 0, 0, 7]);
    b.extend_from_slice(&port.to_be_bytes());
    b.extend_from_slice(&80u16.to_be_bytes());
    b
}

/// `header` then a GET, as `how` says; the answer, the end, the access log's line for the
/// header's client port `port`.
fn case(
    t: &Target,
    o: &mut Observation,
    header: Vec<u8>,
    port: u16,
    how: Delivery,
) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1(PROXY_IP)?;
    let mut bytes = header;
    bytes.extend(h1::get("proxy.test", "/index.html"));
    deliver_and_watch(o, "server", &mut h, &bytes, how, &scale(), 5.0);
    t.record_log(o, mark, port, PROXY_IP, 1);
    Ok(())
}

/// The header `make` builds, in one write (source 192.0.2.`host`:`port`) and dribbled 10 ms
/// a byte (192.0.2.`host + 1`:`port + 1`), at the same time.
fn both(
    t: &Target,
    o: &mut Observation,
    make: fn(u8, u16) -> Vec<u8>,
    host: u8,
    port: u16,
) -> Result<(), String> {
    let cases: Vec<Case> = vec![
        (
            "one write".into(),
            Box::new(move |o: &mut Observation| {
                case(t, o, make(host, port), port, Delivery::OneWrite)
            }),
        ),
        (
            "dribbled".into(),
            Box::new(move |o: &mut Observation| {
                case(
                    t,
                    o,
                    make(host + 1, port + 1),
                    port + 1,
                    Delivery::Dribbled(0.01),
                )
            }),
        ),
    ];
    side_by_side(o, cases)
}

fn proxy_v1(t: &Target, o: &mut Observation) -> Result<(), String> {
    // Ports below the ephemeral range: no real client of the run has them.
    both(t, o, v1, 10, 1110)
}

fn proxy_v2(t: &Target, o: &mut Observation) -> Result<(), String> {
    both(t, o, v2, 20, 2220)
}

fn proxy_missing(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mark = t.log_mark();
    let mut h = t.h1(PROXY_IP)?;
    let port = h.conn.local_port();
    let req = h1::get("proxy.test", "/index.html");
    deliver_and_watch(o, "server", &mut h, &req, Delivery::OneWrite, &scale(), 5.0);
    t.record_log(o, mark, port, PROXY_IP, 1);
    Ok(())
}
