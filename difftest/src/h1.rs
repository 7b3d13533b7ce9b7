//! HTTP/1.x over one [`Conn`]: requests written byte for byte (pipelined, split, drip-fed
//! by the caller), responses parsed by their own framing (Content-Length, chunked, or to the
//! close), and what the server does next (another response, FIN or RST, nothing).

use crate::conn::{Conn, End, Got};
use std::time::{Duration, Instant};

/// The headers a table shows: which vhost answered (and, behind the PROXY protocol, which
/// client address it saw), and the ones that govern the connection and the body's framing.
pub const SHOWN_HEADERS: &[&str] = &[
    "X-Vhost",
    "X-Client-Addr",
    "Connection",
    "Keep-Alive",
    "Content-Length",
    "Transfer-Encoding",
];

/// A short hash of a body: the first 8 hex digits of its SHA-256.
pub fn hash8(bytes: &[u8]) -> String {
    openssl::sha::sha256(bytes)[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One parsed response.
#[derive(Clone, Debug)]
pub struct Response {
    pub status_line: String,
    /// Every header, in order, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The status code (0 if the status line has none).
    pub fn code(&self) -> u16 {
        self.status_line
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The status line, the headers that matter, the body's length and hash.
    pub fn summary(&self) -> String {
        let mut parts = vec![self.status_line.clone()];
        for h in SHOWN_HEADERS {
            if let Some(v) = self.header(h) {
                parts.push(format!("{h}: {v}"));
            }
        }
        if !self.body.is_empty() {
            parts.push(format!("body {} B #{}", self.body.len(), hash8(&self.body)));
        }
        parts.join(", ")
    }
}

/// Why no whole response came.
#[derive(Clone, Debug)]
pub struct Cut {
    /// How the connection ended, None if it went quiet until the deadline.
    pub end: Option<End>,
    /// When.
    pub at: Instant,
    /// Bytes of the response that did come.
    pub partial: usize,
}

impl Cut {
    /// "FIN", "RST", "no answer", with the bytes that came before if any.
    pub fn describe(&self) -> String {
        let how = self
            .end
            .as_ref()
            .map_or("no answer".to_string(), |e| e.to_string());
        if self.partial > 0 {
            format!("{how} after {} B of a response", self.partial)
        } else {
            how
        }
    }
}

/// What the server did next.
#[derive(Debug)]
pub enum Event {
    /// A response, whose first byte came at the instant.
    Response(Response, Instant),
    /// The connection ended without (more of) a response.
    End(Cut),
}

/// An HTTP/1 client connection.
pub struct H1 {
    pub conn: Conn,
    buf: Vec<u8>,
    /// When the first unconsumed byte in `buf` arrived.
    buf_since: Instant,
    /// The end, once seen (a later read returns it again).
    ended: Option<(End, Instant)>,
    /// A slow reader's pace: bytes per read, pause after each.
    pace: Option<(usize, Duration)>,
}

impl H1 {
    pub fn new(conn: Conn) -> H1 {
        H1 {
            conn,
            buf: Vec::new(),
            buf_since: Instant::now(),
            ended: None,
            pace: None,
        }
    }

    /// Sends bytes as they are (one write).
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.conn.write_all(bytes).map_err(|e| format!("send: {e}"))
    }

    /// Reads more into the buffer: Ok(()) with data, or the end / the deadline.
    fn fill(&mut self, deadline: Instant) -> Result<(), (Option<End>, Instant)> {
        if let Some((e, at)) = &self.ended {
            return Err((Some(e.clone()), *at));
        }
        let mut chunk = vec![0u8; self.pace.map_or(64 * 1024, |(b, _)| b)];
        match self.conn.read_some(&mut chunk, deadline) {
            Got::Data(n) => {
                if self.buf.is_empty() {
                    self.buf_since = Instant::now();
                }
                self.buf.extend_from_slice(&chunk[..n]);
                if let Some((_, pause)) = self.pace {
                    std::thread::sleep(pause);
                }
                Ok(())
            }
            Got::End(e) => {
                let at = Instant::now();
                self.ended = Some((e.clone(), at));
                Err((Some(e), at))
            }
            Got::Quiet => Err((None, Instant::now())),
        }
    }

    /// Position just past the next CRLF at or after `from`, reading more as needed.
    fn line_end(
        &mut self,
        from: usize,
        deadline: Instant,
    ) -> Result<usize, (Option<End>, Instant)> {
        loop {
            if let Some(i) = self.buf[from..].windows(2).position(|w| w == b"\r\n") {
                return Ok(from + i + 2);
            }
            self.fill(deadline)?;
        }
    }

    /// Ensures the buffer holds at least `n` bytes.
    fn need(&mut self, n: usize, deadline: Instant) -> Result<(), (Option<End>, Instant)> {
        while self.buf.len() < n {
            self.fill(deadline)?;
        }
        Ok(())
    }

    /// The connection and what was read past the last response (HTTP/2 frames after a
    /// 101).
    pub fn into_parts(self) -> (Conn, Vec<u8>) {
        (self.conn, self.buf)
    }

    /// Reads at most `bytes` per read, sleeping `pause` after each: a slow reader.
    pub fn set_pace(&mut self, bytes: usize, pause: Duration) {
        self.pace = Some((bytes, pause));
    }

    /// Reads one whole response (a 1xx one too) by `deadline`.
    pub fn read_response(&mut self, deadline: Instant) -> Result<Response, Cut> {
        self.response_at(deadline).map(|(r, _)| r)
    }

    fn response_at(&mut self, deadline: Instant) -> Result<(Response, Instant), Cut> {
        let cut = |this: &H1, (end, at): (Option<End>, Instant)| Cut {
            end,
            at,
            partial: this.buf.len(),
        };
        if self.buf.is_empty() {
            self.fill(deadline).map_err(|e| cut(self, e))?;
        }
        let first_byte = self.buf_since;
        // The head.
        let head_end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill(deadline).map_err(|e| cut(self, e))?;
        };
        let head = String::from_utf8_lossy(&self.buf[..head_end - 4]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| {
                let (n, v) = l.split_once(':')?;
                Some((n.trim().to_owned(), v.trim().to_owned()))
            })
            .collect();
        let mut r = Response {
            status_line,
            headers,
            body: Vec::new(),
        };
        let code = r.code();
        let chunked = r
            .header("Transfer-Encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
        let length: Option<usize> = r.header("Content-Length").and_then(|v| v.parse().ok());
        let mut pos = head_end;
        if (100..200).contains(&code) || code == 204 || code == 304 {
            // No body.
        } else if chunked {
            loop {
                let eol = self.line_end(pos, deadline).map_err(|e| cut(self, e))?;
                let size_text = String::from_utf8_lossy(&self.buf[pos..eol - 2]).into_owned();
                let size =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                        .unwrap_or(0);
                pos = eol;
                if size == 0 {
                    // Trailers, up to the empty line.
                    loop {
                        let eol = self.line_end(pos, deadline).map_err(|e| cut(self, e))?;
                        let empty = eol == pos + 2;
                        pos = eol;
                        if empty {
                            break;
                        }
                    }
                    break;
                }
                self.need(pos + size + 2, deadline)
                    .map_err(|e| cut(self, e))?;
                r.body.extend_from_slice(&self.buf[pos..pos + size]);
                pos += size + 2;
            }
        } else if let Some(n) = length {
            self.need(pos + n, deadline).map_err(|e| cut(self, e))?;
            r.body.extend_from_slice(&self.buf[pos..pos + n]);
            pos += n;
        } else {
            // Delimited by the close.
            loop {
                match self.fill(deadline) {
                    Ok(()) => continue,
                    Err((Some(_), _)) => break,
                    Err(e) => return Err(cut(self, e)),
                }
            }
            r.body.extend_from_slice(&self.buf[pos..]);
            pos = self.buf.len();
        }
        self.buf.drain(..pos);
        self.buf_since = Instant::now();
        Ok((r, first_byte))
    }

    /// The next thing the server does by `deadline`: a response, or the end (or nothing).
    pub fn next_event(&mut self, deadline: Instant) -> Event {
        match self.response_at(deadline) {
            Ok((r, at)) => Event::Response(r, at),
            Err(cut) => Event::End(cut),
        }
    }
}

/// A request's bytes: `METHOD path version`, `Host`, the extra header lines, and the body
/// (its framing headers are the caller's).
pub fn request(
    method: &str,
    host: &str,
    path: &str,
    version: &str,
    extra: &[&str],
    body: &[u8],
) -> Vec<u8> {
    let mut r = format!("{method} {path} {version}\r\nHost: {host}\r\n");
    for h in extra {
        r.push_str(h);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    let mut bytes = r.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// `GET path HTTP/1.1` to `host`.
pub fn get(host: &str, path: &str) -> Vec<u8> {
    request("GET", host, path, "HTTP/1.1", &[], b"")
}
