//! Where a request head ends, read as bytes arrive: [`HeadScan`] tells whether httpd's
//! core could now read the head from memory and decide what to do with it (serve it, or
//! answer 400/414) without waiting for another byte, or whether more must come first.
//!
//! "Ready" is the core's own reading, not a second HTTP parser: the core reads a head
//! line by line (`ap_rgetline`: up to LF, in pieces of at most [`Limits::piece`] bytes),
//! skips leading blank lines, takes a request line without `HTTP/x.y` as the whole of an
//! HTTP/0.9 request (or refuses it), and stops at the empty line or at the first limit it
//! meets (LimitRequestLine, LimitRequestFieldSize, LimitRequestFields). So the head is
//! ready at the empty line, at the end of a request line without a version, at a complete
//! line over its limit, at one field more than the limit, or once a line without LF has
//! as many bytes as the core reads before it would answer 414/400 (it reads in whole
//! pieces). Bytes that cannot start an HTTP request (a TLS record to a plain port, a
//! protocol that is not HTTP) make it ready at once: the stock path serves what follows,
//! exactly as without rworker. `PRI * HTTP/2.0` (h2's connection preface) is ready once
//! the preface's 24 bytes are there, which is what mod_http2 reads to recognise it.
//! With mod_remoteip's PROXY protocol on the connection, the PROXY header (v1 or v2)
//! comes first and is skipped.
//!
//! Incremental: each call scans only what arrived since the last one. Pure, unit-tested.

/// The limits a head is read under (the base server's, as the core reads the head).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// LimitRequestLine.
    pub line: usize,
    /// LimitRequestFieldSize.
    pub field: usize,
    /// LimitRequestFields (0: unlimited; then `fields_unlimited` is the bound).
    pub fields: usize,
    /// How many fields are buffered at most when LimitRequestFields is 0 (httpd's default
    /// limit): beyond that the stock path reads the rest, as under every MPM.
    pub fields_unlimited: usize,
    /// Blank lines the core skips before a request line (`DEFAULT_LIMIT_BLANK_LINES`).
    pub blank_lines: usize,
    /// The most the core reads of a line at once (`HUGE_STRING_LEN`).
    pub piece: usize,
    /// mod_remoteip expects a PROXY protocol header first on this connection.
    pub proxy_header: bool,
}

impl Limits {
    /// The most a head holds while it waits parked: a request line and one field at their
    /// limits. A longer head (many large fields) is handed to the core once this much has
    /// come, and the core reads the rest itself, blocking, as under every MPM: a parked
    /// connection's memory stays near what the limits allow one line, not what they allow
    /// a whole head (LimitRequestFields times LimitRequestFieldSize, 800 KB by default).
    pub fn parked_bytes(&self) -> usize {
        self.line + 2 + self.field + 2
    }
}

/// What the bytes so far mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// The core can read and decide now.
    Ready,
    /// It would wait for more bytes.
    More,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Before anything (a PROXY header may come).
    #[default]
    Start,
    /// Blank lines, then the request line.
    RequestLine,
    /// `PRI * HTTP/2.0` seen: waiting for the preface's 24 bytes.
    Preface,
    /// Header fields, up to the empty line.
    Fields,
}

/// The scan of one head (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadScan {
    phase: Phase,
    /// Where the current line starts.
    line: usize,
    /// How far the current line has been scanned for its LF.
    seen: usize,
    /// Where the request line starts (for the preface).
    request_line: usize,
    blanks: usize,
    fields: usize,
}

/// h2's connection preface.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The PROXY protocol v2 signature.
const PROXY_V2: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";
/// The longest PROXY v2 header mod_remoteip takes: its 16 bytes and the largest address
/// block (two AF_UNIX paths, 216 bytes; its `proxy_v2`).
const PROXY_V2_MAX: usize = 16 + 216;
/// A PROXY v1 header is at most this long, CRLF included (the protocol's bound).
const PROXY_V1_MAX: usize = 107;

impl HeadScan {
    /// A scan from the first byte of a head.
    pub fn new() -> HeadScan {
        HeadScan::default()
    }

    /// Scans `head` (every byte of this head so far, from its first) on from where the
    /// last call stopped.
    pub fn scan(&mut self, head: &[u8], lim: &Limits) -> Progress {
        if head.len() > lim.parked_bytes() {
            return Progress::Ready;
        }
        loop {
            match self.phase {
                Phase::Start => match proxy_header_len(head, lim.proxy_header) {
                    Some(Skip::Wait) => return Progress::More,
                    Some(Skip::Ready) => return Progress::Ready,
                    Some(Skip::Len(n)) => {
                        self.start_line(n);
                        self.phase = Phase::RequestLine;
                    }
                    None => self.phase = Phase::RequestLine,
                },
                Phase::RequestLine => {
                    let Some(end) = self.line_end(head) else {
                        let partial = &head[self.line..];
                        if !could_start_request(partial) {
                            return Progress::Ready;
                        }
                        return over_piece(partial.len(), lim.line, lim.piece);
                    };
                    let line = trim_cr(&head[self.line..end]);
                    if line.is_empty() {
                        self.blanks += 1;
                        if self.blanks > lim.blank_lines {
                            return Progress::Ready;
                        }
                        self.start_line(end + 1);
                        continue;
                    }
                    self.request_line = self.line;
                    if line == &PREFACE[..14] {
                        self.phase = Phase::Preface;
                        continue;
                    }
                    if end + 1 - self.line > lim.line + 2 || !has_version(line) {
                        return Progress::Ready;
                    }
                    self.phase = Phase::Fields;
                    self.start_line(end + 1);
                }
                Phase::Preface => {
                    return if head.len() - self.request_line >= PREFACE.len() {
                        Progress::Ready
                    } else {
                        Progress::More
                    };
                }
                Phase::Fields => {
                    let Some(end) = self.line_end(head) else {
                        return over_piece(head.len() - self.line, lim.field, lim.piece);
                    };
                    let field = trim_cr(&head[self.line..end]);
                    // The empty line; a field over its limit; a line that is neither a field
                    // nor a folded continuation of one (the core answers 400 at it).
                    if field.is_empty()
                        || end + 1 - self.line > lim.field + 2
                        || !(field.contains(&b':') || field[0] == b' ' || field[0] == b'\t')
                    {
                        return Progress::Ready;
                    }
                    self.fields += 1;
                    let most = if lim.fields == 0 {
                        lim.fields_unlimited
                    } else {
                        lim.fields
                    };
                    if self.fields > most {
                        return Progress::Ready;
                    }
                    self.start_line(end + 1);
                }
            }
        }
    }

    /// Whether the request line has been read (the core stamps a request's time then).
    pub fn past_request_line(&self) -> bool {
        matches!(self.phase, Phase::Fields | Phase::Preface)
    }

    fn start_line(&mut self, at: usize) {
        self.line = at;
        self.seen = at;
    }

    /// The index of the current line's LF, if it has arrived; remembers how far it looked.
    fn line_end(&mut self, head: &[u8]) -> Option<usize> {
        match head[self.seen..].iter().position(|&b| b == b'\n') {
            Some(i) => Some(self.seen + i),
            None => {
                self.seen = head.len();
                None
            }
        }
    }
}

enum Skip {
    /// Too few bytes to tell.
    Wait,
    /// Not a PROXY header the core could take: mod_remoteip answers it now.
    Ready,
    /// A PROXY header of this many bytes.
    Len(usize),
}

/// The PROXY header at the start of `head`, if mod_remoteip expects one (`on`).
fn proxy_header_len(head: &[u8], on: bool) -> Option<Skip> {
    if !on {
        return None;
    }
    let n = head.len().min(PROXY_V2.len());
    if head[..n] == PROXY_V2[..n] {
        if head.len() < 16 {
            return Some(Skip::Wait);
        }
        let len = 16 + u16::from_be_bytes([head[14], head[15]]) as usize;
        if len > PROXY_V2_MAX {
            return Some(Skip::Ready); // mod_remoteip refuses it at once (AH10186)
        }
        return Some(if head.len() < len {
            Skip::Wait
        } else {
            Skip::Len(len)
        });
    }
    let v1 = b"PROXY ";
    let n = head.len().min(v1.len());
    if head[..n] != v1[..n] {
        return None;
    }
    match head.iter().position(|&b| b == b'\n') {
        Some(i) => Some(Skip::Len(i + 1)),
        None if head.len() >= PROXY_V1_MAX => Some(Skip::Ready),
        None => Some(Skip::Wait),
    }
}

/// Whether a request line that has not ended yet can still be an HTTP request: its method
/// (the bytes before the first space) is made of token characters.
fn could_start_request(partial: &[u8]) -> bool {
    partial
        .iter()
        .take_while(|&&b| b != b' ')
        .all(|&b| is_tchar(b) || b == b'\r')
}

/// RFC 9110's tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A complete request line after which the core reads header fields: `METHOD SP target SP
/// HTTP/1.x`, one space each, as `ap_parse_request_line` wants it. Anything else (HTTP/0.9,
/// extra words, another version, a stray space) the core answers or refuses from the line
/// alone, or (with lenient HttpProtocolOptions) reads the rest itself as under every MPM.
fn has_version(line: &[u8]) -> bool {
    let mut words = line.split(|&b| b == b' ');
    let (Some(m), Some(t), Some(v), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return false;
    };
    !m.is_empty()
        && !t.is_empty()
        && v.len() == 8
        && v.starts_with(b"HTTP/1.")
        && v[7].is_ascii_digit()
}

/// A line without LF is ready once it holds as many bytes as the core reads (whole pieces)
/// before a piece takes it over `limit` (+2 for CRLF): the core answers then.
fn over_piece(len: usize, limit: usize, piece: usize) -> Progress {
    let n = limit + 2;
    if len >= piece * (n / piece + 1) {
        Progress::Ready
    } else {
        Progress::More
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim() -> Limits {
        Limits {
            line: 8190,
            field: 8190,
            fields: 100,
            fields_unlimited: 100,
            blank_lines: 10,
            piece: 8192,
            proxy_header: false,
        }
    }

    /// Feeds `head` one byte at a time; the length at which it became ready.
    fn ready_at(head: &[u8], lim: &Limits) -> Option<usize> {
        let mut s = HeadScan::new();
        (1..=head.len()).find(|&n| s.scan(&head[..n], lim) == Progress::Ready)
    }

    #[test]
    fn a_head_is_ready_at_its_empty_line_byte_by_byte_or_whole() {
        let h = b"GET /i.html HTTP/1.1\r\nHost: x\r\nX-a: b\r\n\r\nGET /next";
        let end = h.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(ready_at(h, &lim()), Some(end));
        assert_eq!(HeadScan::new().scan(h, &lim()), Progress::Ready);
        assert_eq!(HeadScan::new().scan(&h[..end - 1], &lim()), Progress::More);
        // Bare LFs, as the core accepts them.
        assert_eq!(ready_at(b"GET / HTTP/1.0\n\n", &lim()), Some(16));
    }

    #[test]
    fn leading_blank_lines_are_skipped_up_to_the_cores_count() {
        assert_eq!(
            ready_at(b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", &lim()),
            Some(31)
        );
        let many = b"\r\n".repeat(11);
        assert_eq!(ready_at(&many, &lim()), Some(22));
    }

    #[test]
    fn http_0_9_and_lines_that_are_not_http_are_ready_at_once() {
        assert_eq!(ready_at(b"GET /\r\n", &lim()), Some(7));
        assert_eq!(ready_at(b"GET / FOO/1.0\r\n", &lim()), Some(15));
        // What the core refuses from the request line alone: extra words, HTTP/2+, doubled
        // spaces; and a field line that is no field.
        assert_eq!(ready_at(b"GET / HTTP/1.1 x\r\n", &lim()), Some(18));
        assert_eq!(ready_at(b"GET / HTTP/3.0\r\n", &lim()), Some(16));
        assert_eq!(ready_at(b"GET  / HTTP/1.1\r\n", &lim()), Some(17));
        assert_eq!(ready_at(b"GET / HTTP/1.1\r\nnocolon\r\n", &lim()), Some(25));
        assert_eq!(
            HeadScan::new().scan(b"GET / HTTP/1.1\r\nA: 1\r\n b\r\n", &lim()),
            Progress::More
        );
        // A TLS ClientHello to the plain port: its first byte.
        assert_eq!(ready_at(&[0x16, 0x03, 0x01], &lim()), Some(1));
        assert_eq!(ready_at(b"GE\x01T", &lim()), Some(3));
    }

    #[test]
    fn the_h2_preface_is_ready_at_its_24th_byte() {
        let mut p = PREFACE.to_vec();
        p.extend_from_slice(&[0, 0, 0, 4]);
        assert_eq!(ready_at(&p, &lim()), Some(24));
    }

    #[test]
    fn lines_over_their_limits_are_ready_when_the_core_would_answer() {
        let l = Limits {
            line: 100,
            field: 50,
            fields: 3,
            ..lim()
        };
        // A complete request line of exactly the limit waits on; one byte over is ready.
        let at = |n: usize| {
            let mut h = b"GET /".to_vec();
            h.resize(n - 9, b'a');
            h.extend_from_slice(b" HTTP/1.1");
            h
        };
        let mut h = at(100);
        h.extend_from_slice(b"\r\n");
        assert_eq!(HeadScan::new().scan(&h, &l), Progress::More);
        let mut h = at(101);
        h.extend_from_slice(b"\r\n");
        assert_eq!(HeadScan::new().scan(&h, &l), Progress::Ready);
        // Without LF: ready once a whole piece is there.
        let wide = Limits { line: 100, ..lim() };
        let h = vec![b'a'; 8191];
        assert_eq!(HeadScan::new().scan(&h, &wide), Progress::More);
        assert_eq!(
            HeadScan::new().scan(&vec![b'a'; 8192], &wide),
            Progress::Ready
        );
        // A field over its limit, and one field too many.
        let mut h = b"GET / HTTP/1.1\r\nX: ".to_vec();
        h.extend(std::iter::repeat_n(b'b', 49));
        h.extend_from_slice(b"\r\n");
        assert_eq!(HeadScan::new().scan(&h, &l), Progress::Ready);
        let h = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n";
        assert_eq!(HeadScan::new().scan(h, &l), Progress::More);
        let h = b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n";
        assert_eq!(HeadScan::new().scan(h, &l), Progress::Ready);
        // A parked head holds at most a request line and a field at their limits.
        let big = Limits {
            line: 100,
            field: 100,
            ..lim()
        };
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        while many.len() <= big.parked_bytes() {
            many.extend_from_slice(b"X: 0123456789\r\n");
        }
        assert_eq!(HeadScan::new().scan(&many, &big), Progress::Ready);
        // LimitRequestFields 0 (unlimited): bounded by fields_unlimited.
        let l0 = Limits {
            fields: 0,
            fields_unlimited: 2,
            ..l
        };
        assert_eq!(HeadScan::new().scan(h, &l0), Progress::Ready);
    }

    #[test]
    fn a_proxy_header_comes_first_when_remoteip_expects_one() {
        let l = Limits {
            proxy_header: true,
            ..lim()
        };
        let h = b"PROXY TCP4 10.0.0.1 10.0.0.2 1111 80\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(ready_at(h, &l), Some(h.len()));
        // Without mod_remoteip's PROXY protocol, "PROXY ..." is not an HTTP request line.
        assert_eq!(ready_at(h, &lim()), Some(38));
        let mut v2 = PROXY_V2.to_vec();
        v2.extend_from_slice(&[0x21, 0x11, 0, 12]);
        v2.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2, 4, 87, 0, 80]);
        let start = v2.len();
        v2.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(ready_at(&v2, &l), Some(start + 18));
        // A v2 header longer than mod_remoteip takes: refused at once, not waited for.
        let mut huge = PROXY_V2.to_vec();
        huge.extend_from_slice(&[0x21, 0x11, 0xff, 0xff]);
        assert_eq!(ready_at(&huge, &l), Some(16));
        // A PROXY v1 header longer than the protocol allows: mod_remoteip refuses it.
        let mut long = b"PROXY ".to_vec();
        long.resize(200, b'x');
        assert_eq!(ready_at(&long, &l), Some(PROXY_V1_MAX));
    }
}
