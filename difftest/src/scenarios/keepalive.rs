//! Keep-alive: how long an idle connection stays open and whether the next request is
//! answered, by the server config and by vhosts that override it (name-based, IP-based, TLS
//! chosen by SNI); MaxKeepAliveRequests; `KeepAlive Off`; HTTP/1.0's `Connection:
//! keep-alive`.

use super::{exchange, idle, watch, Group, Scenario, Target};
use crate::conn::Conn;
use crate::h1::{self, H1};
use crate::observe::{Observation, Scale};
use crate::site::*;
use std::time::Instant;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "ka-server",
            about: "one request to the default vhost, then idle: closed at the server's KeepAliveTimeout",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: ka_server,
        },
        Scenario {
            name: "ka-server-next",
            about: "a second request 1 s after the first (within KeepAliveTimeout) is answered",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: ka_server_next,
        },
        Scenario {
            name: "ka-name-vhost-next",
            about: "name-based vhost b.test (KeepAliveTimeout 6): a second request 3.5 s after the first, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: ka_name_vhost_next,
        },
        Scenario {
            name: "ka-name-vhost-timeout-only",
            about: "name-based vhost e.test sets Timeout only: the keep-alive wait stays the address's",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: ka_name_vhost_timeout_only,
        },
        Scenario {
            name: "ka-ip-vhost-next",
            about: "IP-based vhost on 127.0.0.2 (KeepAliveTimeout 5): a second request 3.5 s later, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: ka_ip_vhost_next,
        },
        Scenario {
            name: "ka-off-name-vhost",
            about: "name-based vhost c.test with KeepAlive Off",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: ka_off_name_vhost,
        },
        Scenario {
            name: "ka-off-ip-vhost",
            about: "KeepAlive Off as the base server of 127.0.0.3",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: ka_off_ip_vhost,
        },
        Scenario {
            name: "max-requests-server",
            about: "requests one after another up to the server's MaxKeepAliveRequests 4",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: max_requests_server,
        },
        Scenario {
            name: "max-requests-vhost",
            about: "requests one after another up to d.test's MaxKeepAliveRequests 2",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: max_requests_vhost,
        },
        Scenario {
            name: "http10-keep-alive",
            about: "HTTP/1.0 with Connection: keep-alive: two requests, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: http10_keep_alive,
        },
        Scenario {
            name: "http10-plain",
            about: "HTTP/1.0 without Connection: keep-alive",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: http10_plain,
        },
        Scenario {
            name: "tls-ka-default",
            about: "HTTP/1.1 over TLS to the default TLS vhost, then idle",
            group: Group::Steady,
            fast: false,
            signals: false,
            site: Site::Full,
            run: tls_ka_default,
        },
        Scenario {
            name: "tls-ka-sni-vhost-next",
            about: "HTTP/1.1 over TLS, SNI tls-b.test (KeepAliveTimeout 6): a second request 3.5 s later, then idle",
            group: Group::Steady,
            fast: true,
            signals: false,
            site: Site::Full,
            run: tls_ka_sni_vhost_next,
        },
    ]
}

/// The marks of a keep-alive wait on 127.0.0.1.
fn ka_scale() -> Scale {
    Scale::new(&[
        (KEEP_ALIVE, "KeepAliveTimeout"),
        (VHOST_KEEP_ALIVE, "vhost KeepAliveTimeout"),
        (VHOST_TIMEOUT, "vhost Timeout"),
    ])
}

/// One request to `host`, then idle: how it ends.
fn one_then_idle(h: &mut H1, o: &mut Observation, host: &str, scale: &Scale) {
    if exchange(o, "response", h, &h1::get(host, "/index.html"), 10.0).is_some() {
        let t = Instant::now();
        watch(o, "close", h, t, scale, 14.0);
    }
}

/// One request to `host`, `gap` seconds idle, a second request, then idle.
fn two_then_idle(h: &mut H1, o: &mut Observation, host: &str, gap: f64, scale: &Scale) {
    if exchange(o, "response 1", h, &h1::get(host, "/index.html"), 10.0).is_none() {
        return;
    }
    let t = Instant::now();
    if !idle(o, "before request 2", h, t, scale, gap) {
        // Closed (or spoke) before the second request: is it answered all the same?
        exchange(o, "request 2", h, &h1::get(host, "/index.html"), 5.0);
        return;
    }
    if exchange(o, "response 2", h, &h1::get(host, "/index.html"), 10.0).is_some() {
        let t = Instant::now();
        watch(o, "close", h, t, scale, 14.0);
    }
}

fn ka_server(t: &Target, o: &mut Observation) -> Result<(), String> {
    one_then_idle(&mut t.h1("127.0.0.1")?, o, "a.test", &ka_scale());
    Ok(())
}

fn ka_server_next(t: &Target, o: &mut Observation) -> Result<(), String> {
    two_then_idle(&mut t.h1("127.0.0.1")?, o, "a.test", 1.0, &ka_scale());
    Ok(())
}

fn ka_name_vhost_next(t: &Target, o: &mut Observation) -> Result<(), String> {
    two_then_idle(&mut t.h1("127.0.0.1")?, o, "b.test", 3.5, &ka_scale());
    Ok(())
}

fn ka_name_vhost_timeout_only(t: &Target, o: &mut Observation) -> Result<(), String> {
    one_then_idle(&mut t.h1("127.0.0.1")?, o, "e.test", &ka_scale());
    Ok(())
}

fn ka_ip_vhost_next(t: &Target, o: &mut Observation) -> Result<(), String> {
    let scale = Scale::new(&[
        (KEEP_ALIVE, "server KeepAliveTimeout"),
        (IP_KEEP_ALIVE, "vhost KeepAliveTimeout"),
    ]);
    two_then_idle(&mut t.h1("127.0.0.2")?, o, "ip.test", 3.5, &scale);
    Ok(())
}

fn ka_off_name_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    one_then_idle(&mut t.h1("127.0.0.1")?, o, "c.test", &ka_scale());
    Ok(())
}

fn ka_off_ip_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    one_then_idle(&mut t.h1("127.0.0.3")?, o, "off.test", &ka_scale());
    Ok(())
}

/// Requests one after another until the server closes (at most `most` + 1).
fn requests_until_close(h: &mut H1, o: &mut Observation, host: &str, most: usize) {
    for i in 1..=most + 1 {
        let what = format!("response {i}");
        match exchange(o, &what, h, &h1::get(host, &format!("/seq/{i}.txt")), 10.0) {
            Some(r)
                if r.header("Connection")
                    .is_some_and(|c| c.eq_ignore_ascii_case("close")) =>
            {
                let t = Instant::now();
                watch(o, "close", h, t, &ka_scale(), 6.0);
                return;
            }
            Some(_) => {}
            None => return,
        }
    }
}

fn max_requests_server(t: &Target, o: &mut Observation) -> Result<(), String> {
    requests_until_close(
        &mut t.h1("127.0.0.1")?,
        o,
        "a.test",
        MAX_KEEP_ALIVE_REQUESTS,
    );
    Ok(())
}

fn max_requests_vhost(t: &Target, o: &mut Observation) -> Result<(), String> {
    requests_until_close(
        &mut t.h1("127.0.0.1")?,
        o,
        "d.test",
        VHOST_MAX_KEEP_ALIVE_REQUESTS,
    );
    Ok(())
}

fn http10_keep_alive(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let req = h1::request(
        "GET",
        "a.test",
        "/index.html",
        "HTTP/1.0",
        &["Connection: keep-alive"],
        b"",
    );
    if exchange(o, "response 1", &mut h, &req, 10.0).is_none() {
        return Ok(());
    }
    super::sleep(0.5);
    if exchange(o, "response 2", &mut h, &req, 10.0).is_some() {
        let t0 = Instant::now();
        watch(o, "close", &mut h, t0, &ka_scale(), 10.0);
    }
    Ok(())
}

fn http10_plain(t: &Target, o: &mut Observation) -> Result<(), String> {
    let mut h = t.h1("127.0.0.1")?;
    let req = h1::request("GET", "a.test", "/index.html", "HTTP/1.0", &[], b"");
    if exchange(o, "response", &mut h, &req, 10.0).is_some() {
        let t0 = Instant::now();
        watch(o, "close", &mut h, t0, &ka_scale(), 10.0);
    }
    Ok(())
}

/// An HTTP/1.1-over-TLS connection to 127.0.0.1 with SNI `sni` (ALPN http/1.1 only).
fn tls_h1(t: &Target, sni: &str) -> Result<H1, String> {
    let (c, _alpn): (Conn, _) = t.tls("127.0.0.1", sni, &["http/1.1"])?;
    Ok(H1::new(c))
}

fn tls_ka_default(t: &Target, o: &mut Observation) -> Result<(), String> {
    one_then_idle(&mut tls_h1(t, "tls-a.test")?, o, "tls-a.test", &ka_scale());
    Ok(())
}

fn tls_ka_sni_vhost_next(t: &Target, o: &mut Observation) -> Result<(), String> {
    two_then_idle(
        &mut tls_h1(t, "tls-b.test")?,
        o,
        "tls-b.test",
        3.5,
        &ka_scale(),
    );
    Ok(())
}
