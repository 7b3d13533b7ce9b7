//! Request heads without a thread (`RWorkerKeepAlive park`): a head that arrives slowly
//! (a client that dribbles it, a silent one that sent one byte) waits parked in the
//! child's event set until it is complete or mod_reqtimeout's deadline passes; only then
//! does a worker run the request. So slow senders cost descriptors, not threads, where
//! every stock httpd MPM gives each one a thread until its head is read.
//!
//! Nothing here is timed beyond "not before the deadline" and a generous "ends": how fast
//! fresh clients are answered beside thousands of slow senders is `bench/slow-senders`'
//! figure. The capacity tests assert what can only hold if the heads hold no thread: more
//! slow senders than the server has threads, counted parked by the server itself, while
//! fresh clients are answered.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    assert_parked_heads, first_line, load_module_lines, parking_under_test, raise_fd_limit,
    read_response, wait_until, Dribblers, Server, ServerOpts, REQ,
};

fn parking_only() -> bool {
    if !parking_under_test() {
        eprintln!(
            "skipped: request heads are read without a thread with RWorkerKeepAlive park only"
        );
        return false;
    }
    raise_fd_limit();
    true
}

/// Debian's sizing (StartServers 2, ThreadsPerChild 25, MaxRequestWorkers 150) with
/// mod_reqtimeout loaded and `lines` added.
fn opts(lines: &[&str]) -> ServerOpts {
    let mut o = ServerOpts::default()
        .keep_alive(true)
        .line(load_module_lines(&["reqtimeout"]).trim_end().to_string())
        .line("LogLevel reqtimeout:info");
    for l in lines {
        o = o.line(*l);
    }
    o
}

/// A fresh client's request on a new connection: its status, within a generous limit.
fn fresh_request(s: &Server) -> Result<u16, String> {
    let mut c = TcpStream::connect(s.addr()).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(REQ).map_err(|e| format!("write: {e}"))?;
    read_response(&mut c).ok_or_else(|| "no response".to_string())
}

/// 40 fresh clients, one every 250 ms, each on a new connection: the failures.
fn fresh_clients(s: &Server) -> Vec<String> {
    let mut failed = Vec::new();
    for i in 0..40 {
        if let Err(e) = fresh_request(s).and_then(|st| match st {
            200 => Ok(()),
            other => Err(format!("status {other}")),
        }) {
            failed.push(format!("fresh request {i}: {e}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    failed
}

/// A connection that has sent `bytes` of a head, non-blocking afterwards.
fn sender(s: &Server, bytes: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(s.addr()).expect("connect");
    c.write_all(bytes).unwrap();
    c.set_nonblocking(true).unwrap();
    c
}

/// The capacity test for one kind of slow sender: `n` of them, far more than the server's
/// 150 threads, all parked as the server counts them, while 40 fresh clients are answered.
/// The header stage is long here so that none is due during the test.
fn slow_senders_leave_threads_free(first: &[u8], dribble: bool) {
    const N: usize = 3000;
    let s = Server::start(opts(&["RequestReadTimeout header=300"]));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let mut conns: Vec<TcpStream> = (0..N).map(|_| sender(&s, first)).collect();
    let dribblers = dribble.then(|| Dribblers::start(std::mem::take(&mut conns)));
    // A generous limit: 3,000 clients connect through a backlog of 511 on a loaded machine.
    assert_parked_heads(&s, (N - 150) as u64, Duration::from_secs(120));
    let failed = fresh_clients(&s);
    assert!(failed.is_empty(), "fresh clients not answered: {failed:?}");
    if let Some(d) = &dribblers {
        assert_eq!(d.closed(), 0, "dribbling clients closed by the server");
    }
    drop((dribblers, conns));
    s.assert_no_warnings_in_error_log();
}

/// 3,000 clients that dribble a header byte every 2 s.
#[test]
fn three_thousand_head_dribblers_wait_parked_while_fresh_clients_are_answered() {
    if !parking_only() {
        return;
    }
    slow_senders_leave_threads_free(b"GET /index.html HTTP/1.1\r\nHost: x\r\nX-a: ", true);
}

/// 3,000 clients that send one byte, then nothing.
#[test]
fn three_thousand_silent_clients_wait_parked_while_fresh_clients_are_answered() {
    if !parking_only() {
        return;
    }
    slow_senders_leave_threads_free(b"G", false);
}

/// Reads until the server closes, blocking up to `limit` a read: what it sent, and when it
/// closed (from `start`).
fn until_closed(c: &mut TcpStream, start: Instant, limit: Duration) -> (String, Duration) {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(limit)).unwrap();
    common::read_until_closed(c, start)
}

/// A head whose request line is complete and whose fields never end: parked (counted),
/// then at mod_reqtimeout's deadline (`header=3` here, no MinRate) answered 408 and closed,
/// as under event, with mod_reqtimeout's own log line and the access-log line; never
/// before the deadline.
#[test]
fn an_unfinished_head_gets_408_at_the_header_deadline() {
    if !parking_only() {
        return;
    }
    let s = Server::start(opts(&[
        "RequestReadTimeout header=3",
        "Timeout 60",
        "LogFormat \"%h %>s %D %r\" plain",
        "CustomLog logs/access.log plain",
    ]));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let start = Instant::now();
    let mut c = sender(&s, b"GET /index.html HTTP/1.1\r\nHost: x\r\n");
    assert_parked_heads(&s, 1, Duration::from_secs(2));
    let (got, took) = until_closed(&mut c, start, Duration::from_secs(60));
    assert!(
        took >= Duration::from_secs(3),
        "ended after {took:?}, before the deadline"
    );
    assert!(
        took < Duration::from_secs(30),
        "ended after {took:?}, not at the 3 s deadline"
    );
    assert!(
        first_line(&got).contains(" 408 "),
        "got {:?}",
        first_line(&got)
    );
    assert!(
        wait_until(Duration::from_secs(10), || s.access_log().contains(" 408 ")),
        "no 408 in the access log: {}",
        s.access_log()
    );
    // Its time is when the request line came, as event's core stamps it, not when the
    // core read the buffered head at the deadline: %D spans the wait.
    let log = s.access_log();
    let line = log.lines().find(|l| l.contains(" 408 ")).unwrap();
    let micros: u64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
    assert!(micros >= 2_500_000, "%D {micros} µs in {line:?}");
    assert!(
        s.error_log().contains("AH01382"),
        "no AH01382: {}",
        s.error_log()
    );
    s.assert_no_warnings_in_error_log();
}

/// Without mod_reqtimeout a head waits as the core's blocking read would: `Timeout` for
/// each read. A client that sends a byte every second stays; one that stops is closed
/// Timeout after its last byte.
#[test]
fn without_reqtimeout_a_head_waits_timeout_per_read() {
    if !parking_only() {
        return;
    }
    let s = Server::start(ServerOpts::default().keep_alive(true).line("Timeout 3"));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let mut c = sender(&s, b"GET /index.html HTTP/1.1\r\n");
    // 5 s of a byte a second: longer than Timeout in all, never Timeout between bytes.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        c.write_all(b"X").unwrap();
    }
    c.write_all(b"-a: b\r\n").unwrap();
    let last = Instant::now();
    let (got, took) = until_closed(&mut c, last, Duration::from_secs(60));
    assert!(
        took >= Duration::from_secs(3),
        "ended {took:?} after the last byte"
    );
    assert!(
        took < Duration::from_secs(30),
        "ended {took:?} after the last byte"
    );
    // The core's answer to a socket timeout while reading the fields.
    assert!(
        first_line(&got).contains(" 408 "),
        "got {:?}",
        first_line(&got)
    );
}

/// A vhost's own header stage: the connection's base server (its address) decides, as
/// mod_reqtimeout reads it.
#[test]
fn a_vhosts_own_header_timeout_applies_to_its_connections() {
    if !parking_only() {
        return;
    }
    let port = common::free_port();
    let vhost = format!(
        "Listen 127.0.0.1:{port}\n<VirtualHost 127.0.0.1:{port}>\n    RequestReadTimeout header=2\n</VirtualHost>"
    );
    let s = Server::start(opts(&["RequestReadTimeout header=60", vhost.as_str()]));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let start = Instant::now();
    let mut c = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
    let (got, took) = until_closed(&mut c, start, Duration::from_secs(60));
    assert!(took >= Duration::from_secs(2), "ended after {took:?}");
    assert!(
        took < Duration::from_secs(30),
        "ended after {took:?}, not the vhost's 2 s"
    );
    assert!(
        first_line(&got).contains(" 408 "),
        "got {:?}",
        first_line(&got)
    );
}

/// The statuses of the next `n` responses on `c` (read as one stream: pipelined responses
/// may share a read).
fn statuses(c: &mut TcpStream, n: usize) -> Vec<u16> {
    c.set_nonblocking(false).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut at = 0;
    let mut chunk = [0u8; 4096];
    while out.len() < n {
        let parsed = buf[at..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .and_then(|end| {
                let head = String::from_utf8_lossy(&buf[at..at + end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                let total = end + 4 + len;
                (buf.len() - at >= total).then(|| {
                    let status = head.split_whitespace().nth(1).and_then(|v| v.parse().ok());
                    (status.unwrap_or(0), total)
                })
            });
        match parsed {
            Some((status, total)) => {
                out.push(status);
                at += total;
            }
            None => match c.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
            },
        }
    }
    out
}

/// A head split at every byte, a pipelined pair in one packet and split mid-line, a POST
/// whose body arrives with its head, and a keep-alive connection's dribbled second
/// request: each answered as from a whole head.
#[test]
fn heads_in_pieces_are_served_as_whole_ones() {
    if !parking_only() {
        return;
    }
    let s = Server::start(opts(&[]));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let read = |c: &mut TcpStream| -> Option<u16> {
        c.set_nonblocking(false).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        read_response(c)
    };

    // Byte by byte.
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.set_nodelay(true).unwrap();
    for b in REQ {
        c.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(read(&mut c), Some(200), "a head sent byte by byte");

    // The next request on the same connection, dribbled too.
    for chunk in REQ.chunks(7) {
        c.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        read(&mut c),
        Some(200),
        "a keep-alive connection's dribbled second head"
    );

    // Two pipelined in one packet, then split mid request line.
    let two = [REQ, REQ].concat();
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.write_all(&two).unwrap();
    assert_eq!(statuses(&mut c, 2), vec![200, 200]);
    let cut = REQ.len() + 15;
    c.write_all(&two[..cut]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    c.write_all(&two[cut..]).unwrap();
    assert_eq!(statuses(&mut c, 2), vec![200, 200]);

    // A POST to a static file (405 from the core's default handler is not what a
    // slow head would change; the answer must only be the same as for a whole head).
    let post = b"POST /index.html HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    let mut whole = TcpStream::connect(s.addr()).unwrap();
    whole.write_all(post).unwrap();
    let expect = read(&mut whole);
    let mut c = TcpStream::connect(s.addr()).unwrap();
    for chunk in post.chunks(9) {
        c.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(read(&mut c), expect, "a POST dribbled with its body");
    s.assert_no_warnings_in_error_log();
}

/// A chunked body that arrives with its head, a chunk-size line cut where the first read
/// ended (the core's filter holds the rest of it): the line is handed over whole, as the
/// core's own read gives it, so mod_reqtimeout's line loop never waits on the socket for
/// bytes that have come already (before: 408 at the body deadline).
#[test]
fn a_chunk_line_cut_by_the_first_read_is_read_whole() {
    if !parking_only() {
        return;
    }
    let s = Server::start(opts(&["RequestReadTimeout header=20 body=6"]));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let head = b"POST /index.html HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    // The request line first and alone, so that the head is read into rworker's buffer;
    // the rest with the body at once, cut where the buffer's read ends.
    let first = head.iter().position(|&b| b == b'\n').unwrap() + 1;
    // (The core's filter reads greedily, 8,000 bytes a recv, and hands out 8,192: the
    // rest of a cut line stays in its brigade, not in the socket.)
    let conns: Vec<(usize, TcpStream, Vec<u8>)> = (first + 8180..first + 8200)
        .map(|at| {
            // The first chunk fills the bytes up to `at`, where "5\r\n" begins.
            let guess = at - head.len() - 4;
            let hex = format!("{guess:x}").len();
            let size = at - head.len() - hex - 4;
            let mut req = head.to_vec();
            req.extend_from_slice(format!("{size:x}\r\n").as_bytes());
            req.extend(std::iter::repeat_n(b'a', size));
            req.extend_from_slice(b"\r\n5\r\nhello\r\n0\r\n\r\n");
            assert_eq!(&req[at..at + 3], b"5\r\n");
            let mut c = TcpStream::connect(s.addr()).unwrap();
            c.write_all(&req[..first]).unwrap();
            (at, c, req)
        })
        .collect();
    // Every one parked on its request line before the rest comes.
    assert_parked_heads(&s, conns.len() as u64, Duration::from_secs(30));
    let conns: Vec<(usize, TcpStream)> = conns
        .into_iter()
        .map(|(at, mut c, req)| {
            c.write_all(&req[first..]).unwrap();
            (at, c)
        })
        .collect();
    for (at, mut c) in conns {
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let status = read_response(&mut c);
        assert!(
            status.is_some_and(|st| st != 408),
            "chunk line at byte {at}: {status:?}"
        );
    }
}
