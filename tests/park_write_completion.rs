//! Write completion without a thread (`RWorkerKeepAlive park`): a response that does not
//! fit in the socket waits parked in the child's event set until the client reads, as
//! under event, so slow readers of large files cost descriptors, not threads. With
//! `EnableSendfile On` the core sets a large file aside by reference and the MPM writes it
//! out as the socket drains (with sendfile off the core writes the in-memory part with
//! blocking writes before the handler returns, under every MPM; docs/design.md).
//!
//! Nothing here is timed: how fast fresh clients are answered beside thousands of slow
//! readers is `bench/slow-readers`' figure. The tests assert what can only hold if the
//! downloads hold no thread: more slow readers than the server has threads, every one of
//! them receiving, while fresh clients are answered.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    connect_with_rcvbuf, parking_under_test, raise_fd_limit, read_response, wait_until, Server,
    ServerOpts, REQ,
};

/// Debian's sizing (StartServers 2, ThreadsPerChild 25, MaxRequestWorkers 150) with
/// sendfile on, so that the core leaves a large response to write completion.
fn opts(timeout_secs: u32) -> ServerOpts {
    ServerOpts::default()
        .keep_alive(true)
        .line("EnableSendfile On")
        .line(format!("Timeout {timeout_secs}"))
}

fn parking_only() -> bool {
    if !parking_under_test() {
        eprintln!("skipped: write completion parks with RWorkerKeepAlive park only");
        return false;
    }
    raise_fd_limit();
    true
}

/// A request for the 64 MiB file on a connection with an 8 KiB receive buffer, not read.
fn slow_reader(s: &Server) -> TcpStream {
    let mut c = connect_with_rcvbuf(&s.addr(), 8192);
    c.write_all(b"GET /64m.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    c.set_nonblocking(true).unwrap();
    c
}

/// Clients that each read 4 KiB a second (one thread for all, non-blocking reads): how
/// many bytes each has received, and whether the server closed it.
struct SlowReaders {
    state: Arc<Mutex<Vec<(u64, bool)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SlowReaders {
    fn start(mut conns: Vec<TcpStream>) -> SlowReaders {
        let n = conns.len();
        let state = Arc::new(Mutex::new(vec![(0u64, false); n]));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let start = Instant::now();
            // Each reader's turns are spread over the second.
            let mut next: Vec<Duration> = (0..n)
                .map(|i| Duration::from_millis((i as u64 * 1000) / n as u64))
                .collect();
            let mut buf = [0u8; 4096];
            while !sp.load(Ordering::Relaxed) {
                let now = start.elapsed();
                for (i, c) in conns.iter_mut().enumerate() {
                    if now < next[i] {
                        continue;
                    }
                    next[i] += Duration::from_secs(1);
                    let got = match c.read(&mut buf) {
                        Ok(0) => None,
                        Ok(k) => Some(k as u64),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => Some(0),
                        Err(_) => None,
                    };
                    let mut s = st.lock().unwrap();
                    match got {
                        Some(k) => s[i].0 += k,
                        None => s[i].1 = true,
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        SlowReaders {
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// Bytes received by each, and whether it was closed.
    fn snapshot(&self) -> Vec<(u64, bool)> {
        self.state.lock().unwrap().clone()
    }
}

impl Drop for SlowReaders {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A fresh client's request on a new connection: its status, within a generous limit.
fn fresh_request(s: &Server) -> Result<u16, String> {
    let mut c = TcpStream::connect(s.addr()).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(REQ).map_err(|e| format!("write: {e}"))?;
    read_response(&mut c).ok_or_else(|| "no response".to_string())
}

/// The server's counts of connections parked in write completion (`ConnsAsyncWriting`)
/// and busy workers.
fn writing_and_busy(s: &Server) -> Option<(u64, u64)> {
    let st = s.try_server_status_auto().ok()?;
    Some((st.num("ConnsAsyncWriting"), st.num("BusyWorkers")))
}

/// Waits up to `limit` for at least `n` connections parked in write completion, as the
/// server counts them.
fn assert_parked_writing(s: &Server, n: usize, limit: Duration) {
    let mut last = None;
    let parked = wait_until(limit, || {
        last = writing_and_busy(s);
        last.is_some_and(|(writing, _)| writing as usize >= n)
    });
    assert!(
        parked,
        "fewer than {n} responses parked in write completion: (ConnsAsyncWriting, BusyWorkers) = {last:?}"
    );
}

/// 1,000 slow readers of a large file, more than six times the server's 150 threads,
/// all receiving, while 40 fresh clients are each answered. Under the stock worker (and
/// `RWorkerKeepAlive thread`) 150 downloads take every thread and the fresh clients wait
/// behind them in the backlog.
#[test]
fn a_thousand_slow_readers_wait_parked_while_fresh_clients_are_answered() {
    if !parking_only() {
        return;
    }
    const N: usize = 1000;
    let s = Server::start(opts(60));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let conns: Vec<TcpStream> = (0..N).map(|_| slow_reader(&s)).collect();
    let readers = SlowReaders::start(conns);

    // Parked: the status says so, with threads to spare (a generous limit: 1,000 clients
    // connect through a backlog of 511 on a loaded machine).
    assert_parked_writing(&s, N - 150, Duration::from_secs(90));

    // Fresh clients, one every 250 ms, each on a new connection.
    let mut failed = Vec::new();
    for i in 0..40 {
        if let Err(e) = fresh_request(&s).and_then(|st| match st {
            200 => Ok(()),
            other => Err(format!("status {other}")),
        }) {
            failed.push(format!("fresh request {i}: {e}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(failed.is_empty(), "fresh clients not answered: {failed:?}");

    // Every download is still receiving: each one's count grows past where it stood.
    let before = readers.snapshot();
    let mut now = before.clone();
    let all_grew = wait_until(Duration::from_secs(60), || {
        now = readers.snapshot();
        now.iter().zip(&before).all(|(n, b)| n.0 > b.0)
    });
    let closed = now.iter().filter(|c| c.1).count();
    let stuck = now.iter().zip(&before).filter(|(n, b)| n.0 <= b.0).count();
    assert!(
        all_grew && closed == 0,
        "{stuck} of {N} downloads stopped receiving, {closed} closed by the server"
    );
    drop(readers);
    s.assert_no_warnings_in_error_log();
}

fn port_of(s: &Server) -> u16 {
    s.addr().rsplit(':').next().unwrap().parse().unwrap()
}

/// A reader that stops reading is given up at Timeout, from its parked wait: its
/// connection is parked in write completion (no thread), and closed no sooner than
/// Timeout after the socket filled (event's write-completion queue).
#[test]
fn a_stalled_reader_is_closed_at_timeout_without_holding_a_thread() {
    if !parking_only() {
        return;
    }
    const TIMEOUT: u64 = 3;
    let s = Server::start(opts(TIMEOUT as u32));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let start = Instant::now();
    let stalled = slow_reader(&s);
    assert_parked_writing(&s, 1, Duration::from_secs(30));
    // Closed by the server: no connection of this child is left open.
    let closed = wait_until(Duration::from_secs(TIMEOUT + 60), || {
        s.try_server_status_auto()
            .is_ok_and(|st| st.num("ConnsTotal") <= 1 && st.num("ConnsAsyncWriting") == 0)
            && rworker_testkit::procfs::tcp_unclosed_on_port(port_of(&s)) == 0
    });
    let took = start.elapsed();
    assert!(closed, "the stalled reader was never closed");
    assert!(
        took >= Duration::from_secs(TIMEOUT),
        "closed after {took:?}, before Timeout ({TIMEOUT} s)"
    );
    drop(stalled);
    s.assert_no_warnings_in_error_log();
}

/// `-k stop` with downloads parked in write completion: the server is gone at once (the
/// stop closes what is parked), and each client sees its connection end.
#[test]
fn an_immediate_stop_closes_parked_downloads() {
    if !parking_only() {
        return;
    }
    let s = Server::start(opts(300));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let mut conns: Vec<TcpStream> = (0..20).map(|_| slow_reader(&s)).collect();
    assert_parked_writing(&s, 20, Duration::from_secs(30));
    s.stop();
    assert!(
        wait_until(Duration::from_secs(20), || s.processes().is_empty()),
        "the server did not stop: {:?}",
        s.processes()
    );
    // Each connection ends: after what the kernel buffered, an end of stream or a reset.
    let mut buf = [0u8; 65536];
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_nonblocking(false).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let ended = loop {
            match c.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                    break false
                }
                Err(_) => break true,
            }
        };
        assert!(ended, "download {i} still open after the stop");
    }
}

/// Under a low open-file limit, downloads parked in write completion count twice against
/// a child's budget (the socket and, with sendfile, the file the core keeps open): children
/// stop accepting before a request they took finds no descriptor for its file. Counted
/// once, each child filled its limit with parked downloads and answered the next ones 403
/// (AH00132, AH00529 "Too many open files").
#[test]
fn parked_downloads_count_their_files_against_the_open_file_budget() {
    if !parking_only() {
        return;
    }
    const N: usize = 600;
    let s = Server::start(opts(60).open_files(256, 256));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let conns: Vec<TcpStream> = (0..N).map(|_| slow_reader(&s)).collect();
    // Each client's first bytes: a status line, or nothing yet (waiting in the backlog
    // while every child is at its budget).
    let mut firsts: Vec<Vec<u8>> = vec![Vec::new(); N];
    let mut buf = [0u8; 16];
    let settled = wait_until(Duration::from_secs(60), || {
        for (i, mut c) in conns.iter().enumerate() {
            if firsts[i].len() < 12 {
                if let Ok(n) = c.read(&mut buf[..12 - firsts[i].len()]) {
                    firsts[i].extend_from_slice(&buf[..n]);
                }
            }
        }
        let answered = firsts.iter().filter(|f| f.len() >= 12).count();
        // The parent logs RW00041 once children hold all their budget allows.
        answered >= 100 && s.error_log().contains("RW00041")
    });
    let statuses: std::collections::BTreeMap<String, usize> = firsts
        .iter()
        .filter(|f| f.len() >= 12)
        .fold(Default::default(), |mut m, f| {
            *m.entry(String::from_utf8_lossy(&f[9..12]).into_owned())
                .or_default() += 1;
            m
        });
    assert!(
        settled,
        "the children did not fill their budgets: statuses so far {statuses:?}"
    );
    assert_eq!(
        statuses.keys().map(String::as_str).collect::<Vec<_>>(),
        vec!["200"],
        "every answered download starts 200: {statuses:?}"
    );
    // A while at the budget: clients keep reading, children keep writing.
    std::thread::sleep(Duration::from_secs(3));
    let log = s.error_log();
    for id in ["AH00132", "AH00529", "AH02179"] {
        assert!(
            !log.contains(id),
            "{id} in the error log: a child ran out of descriptors:\n{log}"
        );
    }
    drop(conns);
}
