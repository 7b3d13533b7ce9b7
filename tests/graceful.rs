//! Graceful restarts at peak (issue 22): the new generation takes over at once, beside
//! old children that still finish their requests, and no client sees a connection cut.
//! scripts/test.sh runs these in every connection and accept mode.
//!
//! Nothing here is timed: a fresh request must be answered while the old children are
//! provably still busy (the test holds their downloads), and wrk must count no socket
//! error at all. The latency figures are bench/graceful/run.sh's.

mod common;

use common::*;
use std::io::{Read, Write};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// A download of `/64m.bin` by a client that reads nothing after the response head, so
/// the worker serving it stays busy until the test reads.
fn held_download(s: &Server) -> RawConn {
    let mut c = RawConn::connect_with_rcvbuf(&s.addr(), 64 * 1024);
    c.send(b"GET /64m.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let (status, _) = c.read_head();
    assert_eq!(status, 200);
    c
}

/// Reads a held download to its end, pausing `pause` after each read (a slow reader);
/// the bytes of the body that arrived.
fn finish(mut c: RawConn, pause: Duration) -> u64 {
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0u64;
    loop {
        match c.read_some(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got += n as u64,
            Err(e) => panic!("download cut after {got} bytes: {e}"),
        }
        thread::sleep(pause);
    }
}

/// ThreadsPerChild 2 and `max_request_workers` threads (so MaxRequestWorkers / 2
/// children a generation), StartServers `start`, maintenance that neither forks nor
/// sheds while a thread is idle, and ServerLimit 16: room for a second generation.
fn small_server(start: u32, max_request_workers: u32) -> ServerOpts {
    ServerOpts::default()
        .start_servers(start)
        .threads_per_child(2)
        .max_request_workers(max_request_workers)
        .spare_threads(1, 1000)
        .server_limit(16)
}

/// Reads the held downloads to their end (each complete), then the old generation
/// leaves; no "scoreboard is full" line, and nothing at warn or above but AH00286 (the
/// downloads do hold every thread: MaxRequestWorkers is reached, and said).
fn finish_downloads_then_old_generation_leaves(s: &Server, downloads: Vec<RawConn>, old: &[i32]) {
    for d in downloads {
        assert_eq!(
            finish(d, Duration::ZERO),
            SIXTY_FOUR_MB,
            "a download spanning the restart"
        );
    }
    assert_gone_and_reaped(s, old, "old generation after its downloads");
    assert_no_scoreboard_trouble(s);
    s.assert_no_warnings_in_error_log_except(&["AH00286"]);
}

/// The lines that would tell an admin the restart ran out of room.
fn assert_no_scoreboard_trouble(s: &Server) {
    let log = s.error_log();
    for id in ["AH00288", "AH03490", "scoreboard is full"] {
        assert!(!log.contains(id), "{id} in the error log:\n{log}");
    }
}

/// Every thread of both children of the old generation is held by a download when the
/// restart comes (ThreadsPerChild 2, MaxRequestWorkers 4: two children, four
/// downloads). ServerLimit 16 leaves room, so the new generation starts in the slots
/// above them and serves a fresh request while the downloads still run. The stock worker
/// only forks into the slots below MaxRequestWorkers / ThreadsPerChild, which the old
/// children hold: its fresh request waits in the backlog until a download ends.
#[test]
fn the_new_generation_serves_while_old_children_finish_downloads() {
    if skip_unless_rworker("the_new_generation_serves_while_old_children_finish_downloads") {
        return;
    }
    let s = Server::start(small_server(2, 4));
    // The server answers as soon as its first child does: poll for the second (CI on a
    // loaded machine once read one child here).
    let both = wait_until(Duration::from_secs(15), || s.children().len() == 2);
    let old = s.children();
    assert!(both, "children at start: {old:?}");
    let downloads: Vec<RawConn> = (0..4).map(|_| held_download(&s)).collect();

    s.graceful();
    let (tx, rx) = mpsc::channel();
    let url = s.url("/index.html");
    thread::spawn(move || {
        let _ = tx.send(http_get(&url));
    });
    // Generous: on a loaded machine the restart itself (a configuration pass, forks)
    // can take seconds; without the takeover the request waits for a download that
    // only the test can end.
    let answer = rx.recv_timeout(Duration::from_secs(30));
    assert!(
        matches!(answer, Ok(Ok((200, _)))),
        "a fresh request after the graceful restart got {answer:?} while the old children were busy\n{}",
        describe_processes(&s.processes())
    );
    let still: Vec<_> = old.iter().copied().filter(|&p| pid_alive(p)).collect();
    assert_eq!(
        still, old,
        "the old children should still be finishing their downloads"
    );

    finish_downloads_then_old_generation_leaves(&s, downloads, &old);
    let st = s.server_status_auto();
    assert_eq!(st.get("ServerMPM"), Mpm::under_test().name());
}

/// The new generation starts at the size the old one had grown to, not at StartServers
/// (idle maintenance would grow it again at one child a second, and only once it runs
/// short of idle threads). Five held downloads grow the server from StartServers 1 to its
/// three children (ThreadsPerChild 2, MaxRequestWorkers 6); MinSpareThreads 1 means
/// maintenance forks nothing more once the downloads end.
#[test]
fn the_new_generation_takes_over_at_the_old_ones_size() {
    if skip_unless_rworker("the_new_generation_takes_over_at_the_old_ones_size") {
        return;
    }
    let s = Server::start(small_server(1, 6));
    let downloads: Vec<RawConn> = (0..5).map(|_| held_download(&s)).collect();
    let old = s.children();
    assert_eq!(old.len(), 3, "children holding five downloads: {old:?}");

    s.graceful();
    let new_children = || {
        s.children()
            .into_iter()
            .filter(|p| !old.contains(p))
            .count()
    };
    let grown = wait_until(Duration::from_secs(30), || new_children() >= 3);
    assert!(
        grown,
        "the new generation has {} children, the old one had 3\n{}",
        new_children(),
        describe_processes(&s.processes())
    );
    finish_downloads_then_old_generation_leaves(&s, downloads, &old);
    assert_eq!(new_children(), 3, "{}", describe_processes(&s.processes()));
}

/// Restarts `times` times, one second apart, while wrk runs with `wrk_args`; wrk must
/// count no socket error (it does not retry: a keep-alive connection closed under a
/// request it sent is a read error) and every response must be a 2xx.
fn restarts_under_wrk(wrk_args: &[&str], times: u32) {
    drop(restarts_under_wrk_on(
        Server::start(ServerOpts::default()),
        wrk_args,
        times,
    ));
}

fn restarts_under_wrk_on(s: Server, wrk_args: &[&str], times: u32) -> Server {
    let mut args = vec!["-t2", "-c50", "--timeout", "20s"];
    args.extend(wrk_args);
    // wrk runs until every restart was sent and two seconds more: `-k graceful` parses
    // the configuration first, which takes a second or more on a busy machine.
    let wrk = WrkLoad::start(&args, &s.url("/index.html"));
    thread::sleep(Duration::from_secs(1));
    for _ in 0..times {
        s.graceful();
        thread::sleep(Duration::from_secs(1));
    }
    thread::sleep(Duration::from_secs(1));
    let r = wrk.stop();
    assert!(r.requests > 0, "{}", r.output);
    assert_eq!(
        r.socket_errors, [0; 4],
        "socket errors (connect, read, write, timeout)\n{}",
        r.output
    );
    assert_eq!(r.non_2xx, 0, "{}", r.output);

    // The old generations leave once their last connection is done: only children of
    // the running generation remain, none of them quiescing ('G' in the scoreboard).
    let settled = wait_until(Duration::from_secs(30), || {
        s.try_server_status_auto()
            .is_ok_and(|st| !st.scoreboard().contains('G') && s.zombie_children().is_empty())
            && s.children().len() <= 6
    });
    assert!(
        settled,
        "old generations still around 30 s after the load:\n{}\n{}",
        s.server_status_auto().scoreboard(),
        describe_processes(&s.processes())
    );
    assert_no_scoreboard_trouble(&s);
    // AH00286 says every worker of the generation was busy at one maintenance census: a
    // capacity report, not a fault. It came once in a CI run with the other tests of this
    // file beside it on 2 CPUs (closing workers whose client's FIN had arrived wait for a
    // CPU, and wrk opens the next connections meanwhile), and in none of 24 runs of this
    // file three at a time here. Whether a request was cut is what wrk counts above.
    s.assert_no_warnings_in_error_log_except(&["AH00286"]);
    s
}

/// Ten graceful restarts one second apart under keep-alive load: a connection whose
/// last response promised keep-alive gets its next request served (with
/// `Connection: close`) by the old child instead of being closed under the client.
#[test]
fn ten_graceful_restarts_under_keep_alive_load_cut_no_request() {
    restarts_under_wrk(&[], 10);
}

/// The same with `Connection: close`: new connections always find an accepting child.
#[test]
fn graceful_restarts_under_connection_close_load_cut_no_request() {
    restarts_under_wrk(&["-H", "Connection: close"], 3);
}

/// With `RWorkerKeepAlive park`: 1,000 idle keep-alive connections parked and a 64 MB
/// download to a slow reader, both spanning ten restarts under keep-alive load. The
/// download completes; wrk counts no error; the old generations leave (their idle
/// connections get a second for a next request, then a lingering close).
#[test]
fn restarts_with_parked_idle_connections_and_a_slow_download() {
    if skip_unless_rworker("restarts_with_parked_idle_connections_and_a_slow_download") {
        return;
    }
    raise_fd_limit();
    let s = Server::start(ServerOpts::default().line("RWorkerKeepAlive park"));
    let idle = idle_keep_alive_connections(&s, 1000);
    let download = held_download(&s);
    // A slow reader: with a 64 KiB receive buffer each read returns at most about that
    // much, so the body takes over 1,000 reads, 12 ms apart: longer than the restarts.
    let reader = thread::spawn(move || finish(download, Duration::from_millis(12)));
    let s = restarts_under_wrk_on(s, &[], 10);
    let got = reader.join().expect("reader");
    assert_eq!(got, SIXTY_FOUR_MB, "slow download\n{}", s.error_log());
    drop(idle);
}

/// A graceful restart whose configuration pass fails ends the server, as with the stock
/// worker. rworker's old generation keeps accepting until a new one would take over, so
/// it is told to stop only afterwards; here the parent exits before, and the old children
/// read the end of their pipe of death as a graceful stop instead of serving on, orphaned.
#[test]
fn a_failed_configuration_pass_still_ends_the_old_children() {
    let mut s = Server::start(ServerOpts::default());
    let parent = s.parent_pid();
    let children = s.children();
    assert!(!children.is_empty());
    s.rewrite_conf(ServerOpts::default().line("ThisIsNotADirective on"));
    s.signal_parent(libc::SIGUSR1);
    let mut pids = children.clone();
    pids.push(parent);
    let gone = wait_until(Duration::from_secs(30), || {
        pids.iter().all(|&p| !pid_alive(p))
    });
    let alive: Vec<_> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
    assert!(
        gone,
        "still running 30 s after a graceful restart with a broken configuration: {alive:?}\n{}",
        describe_processes(&alive)
    );
}

/// A lone connection made in the milliseconds after a graceful restart signal, while the
/// old children stop accepting and the new ones start, is answered without help: no later
/// connection has to come first. (Parking, a new connection wakes one waiter, in one
/// child: if that child had just stopped accepting and did not pass the wake on, the
/// connection stayed in the listening socket's queue until the next one came, 3-10 ms
/// after the signal in 7 of 515 tries.) Each round's connection is the only one: the next
/// round begins only once it is answered or given up on.
#[test]
fn a_lone_connection_right_after_a_graceful_restart_is_answered() {
    const ROUNDS: u64 = 160;
    // Generous: a restart on a loaded machine (a configuration pass, forks) takes a while;
    // a stranded connection waits forever.
    const ANSWER_WITHIN: Duration = Duration::from_secs(5);
    let s = Server::start(ServerOpts::default());
    assert!(s.wait_settled(Duration::from_secs(30)));
    let addr = s.addr();
    let mut unanswered = Vec::new();
    let start_servers = s.children().len();
    for round in 0..ROUNDS {
        let old = s.children();
        s.signal_parent(libc::SIGUSR1);
        // 0-15 ms after the signal, round by round.
        thread::sleep(Duration::from_millis(round % 16));
        let t = std::time::Instant::now();
        let mut c = std::net::TcpStream::connect(&addr).expect("connect");
        c.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
        c.write_all(b"GET /index.html HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .expect("send");
        let mut head = [0u8; 12];
        if let Err(e) = c.read_exact(&mut head) {
            unanswered.push(format!(
                "round {round} ({} ms after the signal): {e} after {:?}",
                round % 16,
                t.elapsed()
            ));
        } else {
            assert_eq!(&head[..], b"HTTP/1.1 200", "round {round}");
        }
        drop(c);
        // The next signal goes to a settled server: the old generation gone, the new one
        // complete.
        let settled = wait_until(Duration::from_secs(30), || {
            let now = s.children();
            now.len() == start_servers && now.iter().all(|p| !old.contains(p))
        });
        assert!(
            settled,
            "round {round}: {}",
            describe_processes(&s.processes())
        );
    }
    assert!(
        unanswered.is_empty(),
        "{} of {ROUNDS} lone connections unanswered:\n{}\n{}",
        unanswered.len(),
        unanswered.join("\n"),
        describe_processes(&s.processes())
    );
    assert!(crash_lines(&s.error_log()).is_empty());
}
