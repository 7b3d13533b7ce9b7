//! A small HTTP/2 client over one [`Conn`] (TLS with ALPN h2, or h2c): the frames it needs
//! (SETTINGS, HEADERS, DATA, PING, RST_STREAM, WINDOW_UPDATE, GOAWAY) encoded and decoded
//! here, HPACK by fluke-hpack. Connection-level flow control is kept open: every DATA frame
//! read is given back at once.

use crate::conn::{Conn, End, Got};
use crate::h1::hash8;
use std::time::{Duration, Instant};

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// RST_STREAM / GOAWAY error code CANCEL.
pub const CANCEL: u32 = 0x8;

/// An error code's name (RFC 9113 section 7).
pub fn error_name(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    // mod_http2 in a blocking MPM ends an idle session with APR's status as the code.
    const APR_TIMEUP: u32 = 70_007;
    match NAMES.get(code as usize) {
        Some(n) => (*n).to_owned(),
        None if code == APR_TIMEUP => format!("0x{code:x} (APR_TIMEUP)"),
        None => format!("0x{code:x}"),
    }
}

/// One frame.
#[derive(Clone, Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The 9-byte header and the payload.
    pub fn encode(&self) -> Vec<u8> {
        let len = self.payload.len() as u32;
        let mut b = vec![
            (len >> 16) as u8,
            (len >> 8) as u8,
            len as u8,
            self.kind,
            self.flags,
        ];
        b.extend_from_slice(&(self.stream & 0x7fff_ffff).to_be_bytes());
        b.extend_from_slice(&self.payload);
        b
    }

    /// A GOAWAY's (last stream id, error code).
    pub fn goaway(&self) -> Option<(u32, u32)> {
        if self.kind != GOAWAY || self.payload.len() < 8 {
            return None;
        }
        let word = |i: usize| {
            u32::from_be_bytes([
                self.payload[i],
                self.payload[i + 1],
                self.payload[i + 2],
                self.payload[i + 3],
            ])
        };
        Some((word(0) & 0x7fff_ffff, word(4)))
    }

    /// A RST_STREAM's error code.
    pub fn rst_code(&self) -> Option<u32> {
        (self.kind == RST_STREAM && self.payload.len() >= 4).then(|| {
            u32::from_be_bytes([
                self.payload[0],
                self.payload[1],
                self.payload[2],
                self.payload[3],
            ])
        })
    }

    /// The payload without padding and priority fields (DATA, HEADERS).
    fn content(&self) -> &[u8] {
        let mut p = &self.payload[..];
        let mut pad = 0usize;
        if self.flags & PADDED != 0 && !p.is_empty() {
            pad = p[0] as usize;
            p = &p[1..];
        }
        if self.kind == HEADERS && self.flags & PRIORITY_FLAG != 0 && p.len() >= 5 {
            p = &p[5..];
        }
        &p[..p.len().saturating_sub(pad)]
    }
}

/// A response on one stream.
#[derive(Clone, Debug, Default)]
pub struct H2Response {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl H2Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `:status`, x-vhost, content-length and the body's length and hash.
    pub fn summary(&self) -> String {
        let mut parts = vec![format!(":status {}", self.header(":status").unwrap_or("?"))];
        for h in ["x-vhost", "content-length"] {
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

/// Why a read or a response did not complete: how the connection ended (None: quiet until
/// the deadline) and when, or a frame that ended the stream or the connection.
#[derive(Clone, Debug)]
pub enum H2Cut {
    Ended(Option<End>, Instant),
    Reset(u32),
    GoAway(u32, u32),
    Protocol(String),
}

impl H2Cut {
    pub fn describe(&self) -> String {
        match self {
            H2Cut::Ended(None, _) => "no answer".into(),
            H2Cut::Ended(Some(e), _) => e.to_string(),
            H2Cut::Reset(c) => format!("RST_STREAM {}", error_name(*c)),
            H2Cut::GoAway(last, c) => format!("GOAWAY {} last-stream {last}", error_name(*c)),
            H2Cut::Protocol(p) => format!("protocol: {p}"),
        }
    }
}

/// An HTTP/2 client connection.
pub struct H2 {
    conn: Conn,
    buf: Vec<u8>,
    ended: Option<(End, Instant)>,
    enc: fluke_hpack::Encoder<'static>,
    dec: fluke_hpack::Decoder<'static>,
    scheme: &'static str,
    /// Whether DATA read is given back to the connection's window (off: a client whose
    /// window runs out, the server then blocked on flow control).
    give_back: bool,
    /// A slow reader's pace: bytes per socket read, pause after each (its windows open, its
    /// TCP receive queue full).
    pace: Option<(usize, Duration)>,
}

impl H2 {
    /// Starts HTTP/2 on `conn`: the preface and an empty SETTINGS (prior knowledge, or
    /// after ALPN h2). `scheme` is `https` or `http`.
    pub fn start(conn: Conn, scheme: &'static str) -> Result<H2, String> {
        H2::start_with(conn, Vec::new(), scheme)
    }

    /// As [`H2::start`], with bytes already read from the server (after a 101 response).
    pub fn start_with(conn: Conn, already: Vec<u8>, scheme: &'static str) -> Result<H2, String> {
        let mut h = H2::new(conn, already, scheme);
        h.write(&H2::hello())?;
        Ok(h)
    }

    /// HTTP/2 on `conn` whose preface and SETTINGS ([`H2::hello`]) the caller sent
    /// already (dribbled), with bytes already read from the server.
    pub fn after_hello(conn: Conn, already: Vec<u8>, scheme: &'static str) -> H2 {
        H2::new(conn, already, scheme)
    }

    fn new(conn: Conn, already: Vec<u8>, scheme: &'static str) -> H2 {
        H2 {
            conn,
            buf: already,
            ended: None,
            enc: fluke_hpack::Encoder::new(),
            dec: fluke_hpack::Decoder::new(),
            scheme,
            give_back: true,
            pace: None,
        }
    }

    /// The client's first bytes: the preface and an empty SETTINGS.
    pub fn hello() -> Vec<u8> {
        let mut hello = PREFACE.to_vec();
        hello.extend(
            Frame {
                kind: SETTINGS,
                flags: 0,
                stream: 0,
                payload: Vec::new(),
            }
            .encode(),
        );
        hello
    }

    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Stops giving DATA back to the connection's window: after the first 64 kB the server
    /// can send nothing more.
    pub fn stop_window_updates(&mut self) {
        self.give_back = false;
    }

    /// Reads the socket at most `bytes` at a time, sleeping `pause` after each read: a
    /// reader slower than the server, whose windows stay open (every DATA given back) while
    /// its TCP receive queue is full.
    pub fn set_pace(&mut self, bytes: usize, pause: Duration) {
        self.pace = Some((bytes, pause));
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.conn.write_all(bytes).map_err(|e| format!("send: {e}"))
    }

    /// Sends one frame.
    pub fn send(
        &mut self,
        kind: u8,
        flags: u8,
        stream: u32,
        payload: Vec<u8>,
    ) -> Result<(), String> {
        let f = Frame {
            kind,
            flags,
            stream,
            payload,
        };
        self.write(&f.encode())
    }

    /// GET `path` of `authority` on `stream` (odd, rising), the request's end with it.
    pub fn get(&mut self, stream: u32, authority: &str, path: &str) -> Result<(), String> {
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"GET"),
            (b":scheme", self.scheme.as_bytes()),
            (b":authority", authority.as_bytes()),
            (b":path", path.as_bytes()),
        ];
        let block = self.enc.encode(fields);
        self.send(HEADERS, END_HEADERS | END_STREAM, stream, block)
    }

    pub fn ping(&mut self, data: [u8; 8]) -> Result<(), String> {
        self.send(PING, 0, 0, data.to_vec())
    }

    pub fn reset(&mut self, stream: u32, code: u32) -> Result<(), String> {
        self.send(RST_STREAM, 0, stream, code.to_be_bytes().to_vec())
    }

    /// The next frame by `deadline`. SETTINGS are acknowledged and DATA given back to the
    /// connection's window here; every frame is returned.
    pub fn next_frame(&mut self, deadline: Instant) -> Result<Frame, H2Cut> {
        loop {
            if self.buf.len() >= 9 {
                let len = (self.buf[0] as usize) << 16
                    | (self.buf[1] as usize) << 8
                    | self.buf[2] as usize;
                if self.buf.len() >= 9 + len {
                    let f = Frame {
                        kind: self.buf[3],
                        flags: self.buf[4],
                        stream: u32::from_be_bytes([
                            self.buf[5],
                            self.buf[6],
                            self.buf[7],
                            self.buf[8],
                        ]) & 0x7fff_ffff,
                        payload: self.buf[9..9 + len].to_vec(),
                    };
                    self.buf.drain(..9 + len);
                    if f.kind == SETTINGS && f.flags & ACK == 0 {
                        self.send(SETTINGS, ACK, 0, Vec::new())
                            .map_err(H2Cut::Protocol)?;
                    }
                    if f.kind == DATA && !f.payload.is_empty() && self.give_back {
                        let n = f.payload.len() as u32;
                        self.send(WINDOW_UPDATE, 0, 0, n.to_be_bytes().to_vec())
                            .map_err(H2Cut::Protocol)?;
                    }
                    return Ok(f);
                }
            }
            if let Some((e, at)) = &self.ended {
                return Err(H2Cut::Ended(Some(e.clone()), *at));
            }
            let mut chunk = vec![0u8; self.pace.map_or(64 * 1024, |(b, _)| b)];
            match self.conn.read_some(&mut chunk, deadline) {
                Got::Data(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    if let Some((_, pause)) = self.pace {
                        std::thread::sleep(pause);
                    }
                }
                Got::End(e) => self.ended = Some((e, Instant::now())),
                Got::Quiet => return Err(H2Cut::Ended(None, Instant::now())),
            }
        }
    }

    /// Decodes a header block (HEADERS, with its CONTINUATIONs already joined).
    fn decode(&mut self, block: &[u8]) -> Result<Vec<(String, String)>, H2Cut> {
        self.dec
            .decode(block)
            .map(|fields| {
                fields
                    .into_iter()
                    .map(|(n, v)| {
                        (
                            String::from_utf8_lossy(&n).into_owned(),
                            String::from_utf8_lossy(&v).into_owned(),
                        )
                    })
                    .collect()
            })
            .map_err(|e| H2Cut::Protocol(format!("HPACK: {e:?}")))
    }

    /// The whole response on `stream` by `deadline`; frames of other streams are read and
    /// dropped (their header blocks decoded, to keep the HPACK table in step).
    pub fn response(&mut self, stream: u32, deadline: Instant) -> Result<H2Response, H2Cut> {
        let mut r = H2Response::default();
        let mut block: Vec<u8> = Vec::new();
        let mut block_stream = 0u32;
        loop {
            let f = self.next_frame(deadline)?;
            match f.kind {
                HEADERS | CONTINUATION => {
                    if f.kind == HEADERS {
                        block.clear();
                        block_stream = f.stream;
                    }
                    block.extend_from_slice(f.content());
                    if f.flags & END_HEADERS != 0 {
                        let fields = self.decode(&std::mem::take(&mut block))?;
                        if block_stream == stream {
                            r.headers.extend(fields);
                        }
                    }
                    if f.stream == stream && f.kind == HEADERS && f.flags & END_STREAM != 0 {
                        return Ok(r);
                    }
                }
                DATA if f.stream == stream => {
                    r.body.extend_from_slice(f.content());
                    let n = f.payload.len() as u32;
                    if n > 0 && f.flags & END_STREAM == 0 {
                        self.send(WINDOW_UPDATE, 0, stream, n.to_be_bytes().to_vec())
                            .map_err(H2Cut::Protocol)?;
                    }
                    if f.flags & END_STREAM != 0 {
                        return Ok(r);
                    }
                }
                RST_STREAM if f.stream == stream => {
                    return Err(H2Cut::Reset(f.rst_code().unwrap_or(0)));
                }
                GOAWAY => {
                    let (last, code) = f.goaway().unwrap_or((0, 0));
                    if last < stream {
                        return Err(H2Cut::GoAway(last, code));
                    }
                }
                _ => {}
            }
        }
    }

    /// Reads until the first DATA frame of `stream`; its length.
    pub fn first_data(&mut self, stream: u32, deadline: Instant) -> Result<usize, H2Cut> {
        let mut block: Vec<u8> = Vec::new();
        loop {
            let f = self.next_frame(deadline)?;
            match f.kind {
                HEADERS | CONTINUATION => {
                    if f.kind == HEADERS {
                        block.clear();
                    }
                    block.extend_from_slice(f.content());
                    if f.flags & END_HEADERS != 0 {
                        self.decode(&std::mem::take(&mut block))?;
                    }
                }
                DATA if f.stream == stream => return Ok(f.payload.len()),
                RST_STREAM if f.stream == stream => {
                    return Err(H2Cut::Reset(f.rst_code().unwrap_or(0)))
                }
                _ => {}
            }
        }
    }
}
