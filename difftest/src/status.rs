//! mod_status's `server-status?auto`, fetched on its own connection.

use crate::conn::Conn;
use crate::h1::{self, H1};
use crate::tcp;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The `Key: value` lines of `server-status?auto`.
#[derive(Clone, Debug, Default)]
pub struct Status {
    pub keys: BTreeMap<String, String>,
}

impl Status {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.keys.get(key).map(String::as_str)
    }

    /// How many scoreboard slots show `state` (`K`, `R`, `W`, ...).
    pub fn slots(&self, state: char) -> usize {
        self.get("Scoreboard")
            .map_or(0, |s| s.chars().filter(|&c| c == state).count())
    }
}

/// `GET /server-status?auto` on 127.0.0.1:`port` (the default vhost), `Connection: close`.
pub fn fetch(port: u16) -> Result<Status, String> {
    let s = tcp::connect("127.0.0.1", port).map_err(|e| format!("connect: {e}"))?;
    let mut h = H1::new(Conn::Plain(s));
    h.send(&h1::request(
        "GET",
        "a.test",
        "/server-status?auto",
        "HTTP/1.1",
        &["Connection: close"],
        b"",
    ))?;
    let r = h
        .read_response(Instant::now() + Duration::from_secs(10))
        .map_err(|c| format!("server-status: {}", c.describe()))?;
    if r.code() != 200 {
        return Err(format!("server-status: {}", r.status_line));
    }
    let keys = String::from_utf8_lossy(&r.body)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(": ")?;
            Some((k.trim().to_owned(), v.trim().to_owned()))
        })
        .collect();
    Ok(Status { keys })
}
