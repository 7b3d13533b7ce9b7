//! `RWorkerKeepAlive park`: idle keep-alive connections wait in their child's event set
//! without a thread, so fresh clients are served at once even when there are far more
//! open connections than workers, and no idle connection is closed before its
//! KeepAliveTimeout because workers were busy. Graceful restart and stop with parked
//! connections; mod_status's async-connection counts.
//!
//! (Every other test file runs in park mode too, the default; scripts/test.sh runs the
//! serving and lifecycle ones again with `RWORKER_TEST_KEEPALIVE=thread`.)

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{
    idle_connections, parse_ab, pid_connection_peers_on, pids_listening_on, raise_fd_limit,
    read_response, run_ab, spawn_ab, thread_report, wait_parked, wait_until, Mpm, Server,
    ServerOpts, REQ,
};

/// MaxRequestWorkers 150 in 6 children of 25, all started, parking on.
fn opts() -> ServerOpts {
    ServerOpts::default()
        .start_servers(6)
        .server_limit(6)
        .threads_per_child(25)
        .max_request_workers(150)
        .spare_threads(25, 150)
        .keep_alive(true)
        .max_keep_alive_requests(0)
        .line("KeepAliveTimeout 30")
        .line("RWorkerKeepAlive park")
}

fn p99_ms(ab_output: &str) -> u64 {
    ab_output
        .lines()
        .find(|l| l.trim_start().starts_with("99%"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no 99% line in ab output:\n{ab_output}"))
}

fn rworker_only() -> bool {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: RWorkerKeepAlive is rworker's");
        return false;
    }
    raise_fd_limit();
    true
}

/// The parking server of these tests, settled; None for a stock MPM.
fn start() -> Option<Server> {
    if !rworker_only() {
        return None;
    }
    let s = Server::start(opts());
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    Some(s)
}

#[test]
fn two_thousand_idle_connections_wait_without_threads_while_fresh_clients_are_served() {
    let Some(s) = start() else { return };
    let idle = 2000;
    let mut conns = idle_connections(&s, idle);

    // mod_status sees them parked (counts refresh once a second), and no thread holds one.
    let mut last = None;
    let parked = wait_until(Duration::from_secs(15), || {
        let st = s.server_status_auto();
        // The status requests' own connections (closed by the client, parked until the
        // listener sees the close) may add a few.
        let idle = idle as u64;
        let ok = (idle..=idle + 4).contains(&st.num("ConnsAsyncKeepAlive"))
            && (idle..=idle + 6).contains(&st.num("ConnsTotal"))
            && !st.scoreboard().contains('K');
        last = Some(st);
        ok
    });
    assert!(
        parked,
        "status does not show {idle} parked connections: {:?}",
        last.map(|s| s.0)
    );

    // Fresh clients, with 2,000 open connections against 150 threads: served at once. Were
    // the idle connections holding threads, fresh clients would wait in the backlog for a
    // KeepAliveTimeout (30 s): a p99 near 30 s, or ab's own 30 s timeout. A loaded machine
    // slows every request by a scheduler's delay, not by seconds: the bound is 10 s.
    let t0 = Instant::now();
    let r = run_ab(&["-n", "3000", "-c", "100"], &s.url("/index.html"));
    r.assert_all_ok(3000);
    let p99 = p99_ms(&r.output);
    eprintln!(
        "fresh clients with {idle} parked connections: p99 {p99} ms, {:?} in all",
        t0.elapsed()
    );
    assert!(
        p99 < 10_000,
        "fresh-request p99 {p99} ms: clients waited for threads\n{}",
        r.output
    );

    // Every idle connection is still open and answers its next request.
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(REQ)
            .unwrap_or_else(|e| panic!("idle connection {i} was closed: {e}"));
        assert_eq!(
            read_response(c),
            Some(200),
            "second response on idle connection {i}"
        );
    }
    // AH00286 says that at one maintenance census every worker was busy: under `ab -c 100`
    // on 150 threads that happens when the machine is loaded (each ab connection also holds
    // its worker while it waits for ab's FIN), as in the test below; seen once in CI-like
    // runs. It is load, not a fault: allowed, as there.
    s.assert_no_warnings_in_error_log_except(&["AH00286"]);
}

#[test]
fn idle_connections_survive_load_and_a_graceful_restart_loses_nothing() {
    let Some(s) = start() else { return };
    let mut conns = idle_connections(&s, 1000);

    // ab -c 100 meanwhile: no failure, and no idle connection closed early.
    let r = run_ab(&["-n", "5000", "-c", "100"], &s.url("/index.html"));
    r.assert_all_ok(5000);
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(REQ).unwrap();
        assert_eq!(
            read_response(c),
            Some(200),
            "idle connection {i} after ab -c 100"
        );
    }

    // Graceful restart with 1,000 parked connections and load running: the load loses
    // nothing; the old children close their idle connections promptly and exit.
    let old = s.children();
    let load = spawn_ab(&["-n", "20000", "-c", "20"], &s.url("/index.html"));
    std::thread::sleep(Duration::from_millis(300));
    s.graceful();
    let load = parse_ab(load.wait_with_output().expect("ab"));
    load.assert_all_ok(20000);
    let gone = wait_until(Duration::from_secs(10), || {
        let now = s.children();
        old.iter().all(|p| !now.contains(p))
    });
    assert!(gone, "old children {old:?} still there: {:?}", s.children());
    let mut closed = 0;
    for c in &mut conns {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        if matches!(c.read(&mut b), Ok(0)) {
            closed += 1;
        }
    }
    assert_eq!(
        closed,
        conns.len(),
        "idle connections of the old generation left open"
    );

    // -k stop ends everything within 3 s, parked connections or not: a promise (httpd's own
    // reclaim of children escalates within it); 80-180 ms measured at load average 26-32
    // on 2 cores.
    let _more = idle_connections(&s, 200);
    let t0 = Instant::now();
    s.stop();
    assert!(
        wait_until(Duration::from_secs(3), || s.processes().is_empty()),
        "still running {:?} after -k stop: {:?}",
        t0.elapsed(),
        s.processes()
    );
    eprintln!("all processes gone {:?} after -k stop", t0.elapsed());
    // While the old generation drains, the new one can count too few idle threads.
    s.assert_no_warnings_in_error_log_except(&["AH00286"]);
}

/// Whether `c`'s server end is closed (EOF or reset waiting to be read), without blocking;
/// panics on data nobody asked for.
fn closed_by_server(c: &TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let mut r = c;
    let closed = match r.read(&mut b) {
        Ok(0) => true,
        Ok(_) => panic!("data on an idle connection"),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    };
    c.set_nonblocking(false).unwrap();
    closed
}

/// Polls until mod_status parks exactly the idle connections of `conns` that the server
/// has not closed (a retiring child closes its own); returns those.
fn open_and_parked_agree(s: &Server, conns: Vec<TcpStream>, what: &str) -> Vec<TcpStream> {
    let mut last = (0, 0);
    let agree = wait_until(Duration::from_secs(15), || {
        let open = conns.iter().filter(|c| !closed_by_server(c)).count() as u64;
        let parked = s.server_status_auto().num("ConnsAsyncKeepAlive");
        last = (open, parked);
        (open..=open + 4).contains(&parked)
    });
    assert!(
        agree,
        "{what}: idle connections open, parked in status: {last:?}"
    );
    let open: Vec<TcpStream> = conns.into_iter().filter(|c| !closed_by_server(c)).collect();
    eprintln!("{what}: {} idle connections open", open.len());
    open
}

/// Issue 20, acceptance 8, continued: MaxConnectionsPerChild and graceful-stop with parked
/// connections. Children of MaxConnectionsPerChild 500 retire under `ab -c 20` while 1,000
/// idle connections are parked: ab fails no request, the parent replaces what retired, and
/// mod_status's parked count stays exactly the idle connections still open (a retiring
/// child closes its own after its one more second, and each still open answers); then
/// `-k graceful-stop` closes the rest and every process leaves within 10 s.
#[test]
fn max_connections_per_child_and_graceful_stop_with_parked_connections() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(opts().max_connections_per_child(500));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let first = s.children();
    let conns = idle_connections(&s, 1000);
    run_ab(&["-n", "10000", "-c", "20"], &s.url("/index.html")).assert_all_ok(10000);
    // 11,000 connections over six children of at most 500 each: some retired, and the
    // parent forked for the load (how many it keeps is idle maintenance's choice).
    let replaced = wait_until(Duration::from_secs(15), || {
        let now = s.children();
        first.iter().any(|p| !now.contains(p)) && now.iter().any(|p| !first.contains(p))
    });
    assert!(
        replaced,
        "no child retired: {first:?} -> {:?}",
        s.children()
    );
    let conns = open_and_parked_agree(&s, conns, "after the retirements");
    // More for the graceful-stop, on children that may retire too.
    let mut conns = open_and_parked_agree(
        &s,
        conns.into_iter().chain(idle_connections(&s, 200)).collect(),
        "before the graceful-stop",
    );
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(REQ).unwrap();
        assert_eq!(read_response(c), Some(200), "open idle connection {i}");
    }

    let t0 = Instant::now();
    s.graceful_stop();
    assert!(
        wait_until(Duration::from_secs(10), || s.processes().is_empty()),
        "still running {:?} after -k graceful-stop: {:?}",
        t0.elapsed(),
        s.processes()
    );
    eprintln!("-k graceful-stop: all gone after {:?}", t0.elapsed());
    let open = conns.iter().filter(|c| !closed_by_server(c)).count();
    assert_eq!(open, 0, "idle connections left open by graceful-stop");
    // 1,000 parked connections count as work on 150 threads and ServerLimit 6: a census
    // finds the scoreboard full, at MaxRequestWorkers (AH00286) or, while a retiring child
    // still holds its slot, within MinSpareThreads of it (AH00287), as the stock worker says.
    s.assert_no_warnings_in_error_log_except(&["AH00286", "AH00287"]);
}

/// Issue 40, defect 5: two processes share a scoreboard slot. A graceful restart that
/// raises ThreadsPerChild from 25 to 50 (ServerLimit 6, every slot held by an old child)
/// forks the new generation into the old children's slots, whose columns 25..49 are free,
/// while the old children still close their 200 parked connections. The counts mod_status
/// shows stay those of the slot's own child: once the old ones are gone, `ConnsTotal` is
/// exactly the new connections open (plus the status request's own) and
/// `ConnsAsyncKeepAlive` the parked ones. Before, each child added and subtracted in the
/// slot it shared, and the old children's closes took the new ones' counts below zero
/// (ConnsTotal near 4.29e9).
#[test]
fn a_slot_shared_across_a_graceful_restart_keeps_exact_counts() {
    if !rworker_only() {
        return;
    }
    let base = opts().thread_limit(64).max_keep_alive_requests(0);
    let mut s = Server::start(base.clone());
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let old = s.children();
    let parked = idle_connections(&s, 200);
    s.rewrite_conf(base.threads_per_child(50));
    s.graceful();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let now = s.children();
            !now.is_empty() && now.iter().all(|p| !old.contains(p))
        }),
        "old children still running after the graceful restart: {old:?} -> {:?}\n{}",
        s.children(),
        s.error_log()
    );
    // The old children closed what they parked (no more request came within their grace).
    assert!(
        wait_until(Duration::from_secs(15), || parked
            .iter()
            .all(closed_by_server)),
        "parked connections of the old generation left open"
    );
    let conns = idle_connections(&s, 40);
    let mut last = (0, 0, 0);
    let exact = wait_until(Duration::from_secs(20), || {
        let st = s.server_status_auto();
        last = (
            st.num("ConnsTotal"),
            st.num("ConnsAsyncKeepAlive"),
            st.num("RWorkerParked"),
        );
        last == (41, 40, 40)
    });
    assert!(
        exact,
        "ConnsTotal, ConnsAsyncKeepAlive, RWorkerParked {last:?}, not (41, 40, 40) with 40 idle connections open\n{}",
        s.error_log()
    );
    drop(conns);
    s.assert_no_warnings_in_error_log_except(&["AH00286", "AH00287"]);
}

/// Issue 40, defect 3: `-k graceful-stop` closes the listening socket at once, though a
/// worker may be inside accept on it as the stop begins (it closes it as it leaves), while
/// the child lives on for a download to a slow reader and its parked connections drain.
/// Fresh connections keep arriving across the stop, so that workers are in accept then.
/// New clients are refused promptly (under event too), not queued in a socket nobody
/// accepts on until the child exits.
#[test]
fn graceful_stop_refuses_new_clients_while_the_child_drains() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(
        ServerOpts::default()
            .start_servers(1)
            .server_limit(1)
            .threads_per_child(25)
            .max_request_workers(25)
            .spare_threads(1, 100)
            .graceful_shutdown_timeout(30)
            .keep_alive(true)
            .line("KeepAliveTimeout 30")
            .line("RWorkerKeepAlive park"),
    );
    std::fs::write(s.docroot().join("64m.bin"), vec![0u8; 64 << 20]).expect("write 64m.bin");
    let child = s.children()[0];
    let _parked = idle_connections(&s, 50);
    let mut download = common::connect_with_rcvbuf(&s.addr(), 4096);
    download
        .write_all(b"GET /64m.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    // Fresh clients, one after another, across the stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (addr, stop) = (s.addr(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Ok(mut c) = TcpStream::connect(&addr) else {
                    continue;
                };
                let _ = c.set_read_timeout(Some(Duration::from_secs(1)));
                let _ = c
                    .write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
                let mut sink = Vec::new();
                let _ = c.read_to_end(&mut sink);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    s.graceful_stop();
    let refused = wait_until(Duration::from_secs(5), || {
        TcpStream::connect(s.addr()).is_err()
    });
    let after = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    assert!(
        refused,
        "new clients still connect 5 s after -k graceful-stop\n{}\n{}",
        who_listens_on(s.port, child),
        s.error_log()
    );
    assert!(
        s.children().contains(&child),
        "the child exited before the check (the download should hold it)"
    );
    eprintln!("graceful-stop: new clients refused after {after:?}");
    drop(download);
    assert!(
        wait_until(Duration::from_secs(30), || s.processes().is_empty()),
        "still running after the download was dropped: {:?}",
        s.processes()
    );
}

/// With one worker per child, that worker is its child's only waiter in the event set, for
/// new connections and for parked ones that speak again alike; while new connections keep
/// coming, the parked ones must still get their turn. Keep-alive clients on two one-thread
/// children are all served promptly while `ab -c 2` keeps connecting.
#[test]
fn a_child_of_one_thread_serves_parked_connections_through_its_accepting_worker() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(
        ServerOpts::default()
            .start_servers(2)
            .server_limit(2)
            .threads_per_child(1)
            .max_request_workers(2)
            .spare_threads(1, 2)
            .keep_alive(true)
            .max_keep_alive_requests(0)
            .line("KeepAliveTimeout 30")
            .line("RWorkerKeepAlive park"),
    );
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let mut conns = idle_connections(&s, 3);
    // New connections all along (stopped below): ab's own requests are not the point.
    let mut load = spawn_ab(
        &["-t", "60", "-n", "10000000", "-c", "2"],
        &s.url("/index.html"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    for round in 0..30 {
        for (i, c) in conns.iter_mut().enumerate() {
            c.write_all(REQ).unwrap();
            assert_eq!(read_response(c), Some(200), "round {round}, connection {i}");
        }
    }
    let took = t0.elapsed();
    let _ = load.kill();
    let _ = load.wait();
    eprintln!("90 kept-alive requests on one-thread children in {took:?}");
    // 90 resumptions, each by the worker that also accepts: a parked connection left
    // behind the accepts while ab keeps the backlog full, or a readiness event lost, times
    // the read out. The bound is a product promise with room for a loaded machine: 7-150
    // ms measured with four CPU hogs beside the test at load average 26-32 on 2 cores.
    assert!(
        took < Duration::from_secs(3),
        "90 kept-alive requests on a one-thread child took {took:?}"
    );
    s.assert_no_warnings_in_error_log();
}

/// Issue 20, the open-file limit. Under soft and hard limits of 1,024 (systemd's default
/// soft limit) with Debian's sizing (StartServers 2, MaxRequestWorkers 150 in children of
/// 25), 3,000 idle keep-alive clients: each child stops accepting before it runs out of
/// descriptors, the parent forks more children for the clients that wait and warns once
/// (RW00041), and every held connection answers its next request. Before: children met
/// EMFILE (AH02179), retired sick, and dropped every connection they held.
#[test]
fn at_the_open_file_limit_children_stop_accepting_and_keep_what_they_hold() {
    holds_at_the_open_file_limit("workers");
}

/// The same where the listener thread accepts (`RWorkerAccept listener`).
#[test]
fn at_the_open_file_limit_a_listener_stops_accepting_and_keeps_what_it_holds() {
    holds_at_the_open_file_limit("listener");
}

fn holds_at_the_open_file_limit(accept: &str) {
    if !rworker_only() {
        return;
    }
    let s = Server::start(
        ServerOpts::default()
            .open_files(1024, 1024)
            .keep_alive(true)
            .max_keep_alive_requests(0)
            .line("KeepAliveTimeout 120")
            .line("RWorkerKeepAlive park")
            .line(format!("RWorkerAccept {accept}")),
    );
    let mut conns = idle_connections(&s, 3000);
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(REQ).unwrap();
        assert_eq!(
            read_response(c),
            Some(200),
            "next request on held connection {i}\n{}",
            s.error_log()
        );
    }
    let log = s.error_log();
    assert!(
        log.contains("RW00041"),
        "no warning that children reached their open-file limit:\n{log}"
    );
    s.assert_no_warnings_in_error_log_except(&["RW00041"]);
}

/// Issue 20, the fourth defect. On Debian's sizing with StartServers 6 the server has 150
/// threads for MaxSpareThreads 75, so idle maintenance retires children, one a second.
/// 300 idle keep-alive connections parked over them are work, though they hold no thread:
/// no child that holds them retires (before: three did, and closed what they held), and
/// after five maintenance cycles every connection answers its next request.
#[test]
fn children_that_hold_parked_connections_are_not_retired_as_spare() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(
        ServerOpts::default()
            .start_servers(6)
            .keep_alive(true)
            .max_keep_alive_requests(0)
            .line("KeepAliveTimeout 60")
            .line("RWorkerKeepAlive park"),
    );
    let mut conns = idle_connections(&s, 300);
    // Time for the server to do wrong: five maintenance cycles (the check is what every
    // connection answers, not what the server looks like at this instant).
    std::thread::sleep(Duration::from_secs(5));
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(REQ).unwrap();
        assert_eq!(
            read_response(c),
            Some(200),
            "next request on parked connection {i}\n{}",
            s.error_log()
        );
    }
    s.assert_no_warnings_in_error_log();
}

/// Children take turns at connections that stay: a child whose new connection is kept
/// alive after its first response goes to the back of the listening socket's queue, so
/// that the next new connection goes to a sibling with a waiting worker. Without the turn
/// the kernel gives every connection to the first child with a waiting worker, and busy
/// keep-alive clients pile up on that child's workers while its siblings idle. 30 clients
/// that connect one after another (each waits for its first response) on three children
/// of 25 threads: each child holds at most 20 (without the turn one held all 30).
#[test]
fn keep_alive_clients_that_connect_one_by_one_spread_over_the_children() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(
        ServerOpts::default()
            .start_servers(3)
            .server_limit(3)
            .max_request_workers(75)
            .spare_threads(25, 75)
            .keep_alive(true)
            .max_keep_alive_requests(0)
            .line("KeepAliveTimeout 60")
            .line("RWorkerKeepAlive park"),
    );
    assert!(
        s.wait_settled(Duration::from_secs(30)),
        "three children never settled"
    );
    let children = s.children();
    assert_eq!(children.len(), 3, "children: {children:?}");
    let conns: Vec<TcpStream> = (0..30)
        .map(|i| {
            let mut c = TcpStream::connect(s.addr()).unwrap_or_else(|e| panic!("connect {i}: {e}"));
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.write_all(REQ).unwrap();
            assert_eq!(
                read_response(&mut c),
                Some(200),
                "first response on client {i}"
            );
            c
        })
        .collect();
    // Which child holds each client, by the client's port in the child's sockets (a reading
    // of the kernel's tables may miss a socket: the union of readings, until all are seen).
    let ours: BTreeSet<u16> = conns
        .iter()
        .map(|c| c.local_addr().unwrap().port())
        .collect();
    let mut held: Vec<BTreeSet<u16>> = vec![BTreeSet::new(); children.len()];
    let all_seen = wait_until(Duration::from_secs(20), || {
        for (h, &c) in held.iter_mut().zip(&children) {
            h.extend(pid_connection_peers_on(c, s.port).intersection(&ours));
        }
        held.iter().map(BTreeSet::len).sum::<usize>() == ours.len()
    });
    let per_child: Vec<usize> = held.iter().map(BTreeSet::len).collect();
    assert!(
        all_seen,
        "the children do not hold the 30 clients: {per_child:?}"
    );
    assert!(
        per_child.iter().all(|&n| n <= 20),
        "one child took most of the connections: {per_child:?}"
    );
    drop(conns);
    s.assert_no_warnings_in_error_log();
}

/// A connection in its lingering close: a `Connection: close` request answered, and the
/// server's side shut down (the client's is open).
fn lingering(s: &Server) -> TcpStream {
    let mut c = TcpStream::connect(s.addr()).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.write_all(b"GET /index.html HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = Vec::new();
    c.read_to_end(&mut response).unwrap(); // the server shut its side down
    assert!(response.starts_with(b"HTTP/1.1 200"));
    c
}

/// A lingering close that the client keeps feeding: the server read what comes, waits on
/// in the same place in its timeout list, and closes when the client does. Each write
/// after the response lands on a connection still open (a closed socket would answer the
/// first with a reset, and the next write would fail); then nothing stays parked.
#[test]
fn a_lingering_close_reads_what_the_client_still_sends_until_it_closes() {
    let Some(s) = start() else {
        return;
    };
    let mut c = lingering(&s);
    for i in 0..5 {
        // Well past the worker's short wait for a FIN: the connection is parked.
        std::thread::sleep(Duration::from_millis(200));
        c.write_all(b"more bytes the server never asked for\r\n")
            .unwrap_or_else(|e| panic!("write {i} during the lingering close: {e}"));
    }
    drop(c);
    let settled = wait_until(Duration::from_secs(20), || {
        s.try_server_status_auto()
            .is_ok_and(|st| st.num("RWorkerParked") == 0)
    });
    assert!(
        settled,
        "the lingering close stayed parked after the client closed"
    );
}

/// Issue 49, defect 5: a graceful stop leaves a lingering close 2 s (docs/design.md), counted
/// from the stop. A client that feeds its lingering close a byte every 300 ms makes the
/// connection park again each time; before, each park filed the stop's 2 s from its own
/// time, so the connection stayed until its lingering close's own 30 s were up (and the
/// child with it). The server's close shows as a failed write (the first write after it
/// draws a reset). The bound is generous for a loaded machine and still well below the 30 s.
#[test]
fn a_graceful_stop_ends_a_lingering_close_the_client_keeps_feeding() {
    let Some(s) = start() else {
        return;
    };
    let mut c = lingering(&s);
    let feed = |c: &mut TcpStream| {
        std::thread::sleep(Duration::from_millis(300));
        c.write_all(b"x")
    };
    for i in 0..3 {
        // Past the worker's short wait for a FIN: the connection is parked, and parks again.
        feed(&mut c).unwrap_or_else(|e| panic!("write {i} before the stop: {e}"));
    }
    let t0 = Instant::now();
    s.graceful_stop();
    let limit = Duration::from_secs(20);
    let closed_after = loop {
        if feed(&mut c).is_err() {
            break Some(t0.elapsed());
        }
        if t0.elapsed() > limit {
            break None;
        }
    };
    eprintln!("graceful-stop: the fed lingering close closed after {closed_after:?}");
    assert!(
        closed_after.is_some(),
        "a lingering close the client feeds was still open {limit:?} after -k graceful-stop"
    );
    assert!(
        wait_until(Duration::from_secs(20), || s.children().is_empty()),
        "children still running after the graceful stop: {:?}",
        s.children()
    );
}

/// Issue 20, the fourth defect, as a client sees it: on Debian's default sizing (StartServers
/// 2, MinSpareThreads 25, MaxSpareThreads 75, MaxRequestWorkers 150), a short keep-alive
/// load and then a longer one. Between the two the server has more idle threads than
/// MaxSpareThreads and sheds children; before, a parking child's parked connections left its
/// threads idle, idle maintenance retired children that held busy connections, and the
/// retiring child closed them under requests wrk had sent (18-36 read errors in 4 of 14
/// runs). wrk's read errors are exactly such closes; they must be 0 however loaded the
/// machine (timeouts, which load can cause, are given 10 s and not judged).
#[test]
fn keep_alive_load_on_debian_sizing_never_finds_its_connection_closed_under_a_request() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(
        ServerOpts::default()
            .keep_alive(true)
            .max_keep_alive_requests(0)
            .line("KeepAliveTimeout 5")
            .line("RWorkerKeepAlive park"),
    );
    for secs in ["2", "6"] {
        let r = common::run_wrk(
            &["-t2", "-c100", "-d", secs, "--timeout", "10s"],
            &s.url("/index.html"),
        );
        let [_, read, write, _] = r.socket_errors;
        assert_eq!(
            (read, write),
            (0, 0),
            "wrk -d{secs}: read/write errors (connections closed under a request):\n{}\n{}",
            r.output,
            s.error_log()
        );
        assert!(r.requests > 0, "wrk -d{secs} served nothing:\n{}", r.output);
    }
}

/// Issue 20, defect (a): a signal that reaches a worker while it waits for a slow reader in
/// write completion must not end the connection (an interrupted poll once read as "not
/// ready": the worker gave up write completion, and its lingering close flushed the rest of
/// the response and closed a connection that had promised keep-alive). Parking children
/// send their workers no signal except on an immediate stop, so the test sends them itself:
/// SIGUSR1 (the workers' wake-up signal, which interrupts without restarting) to every
/// worker thread, twenty times, while a 48 KB keep-alive response waits for a client that
/// does not read yet. Small socket buffers on both sides (SendBufferSize, the client's
/// SO_RCVBUF) leave more than fits in them but less than the core's 64 KB set-aside
/// threshold, so the rest waits in the output filters and the connection waits for the
/// socket in write completion, parked (until 2026-12-07 on its worker, where the signals
/// landed: with the EINTR retry in `AsyncConn::wait_ready` removed, the next request found
/// the connection closed). Now the signals land on the workers waiting in the set, and the
/// test guards that none of them ends the parked response. On a machine too slow to reach
/// write completion within the 300 ms head start the test proves less; it cannot fail for
/// that.
#[test]
fn a_signal_on_a_worker_in_write_completion_does_not_cut_the_response() {
    if !rworker_only() {
        return;
    }
    let s = Server::start(opts().line("SendBufferSize 4096"));
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    const LEN: usize = 48 * 1024;
    let mut c = common::connect_with_rcvbuf(&s.addr(), 4096);
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(
        format!(
            "GET /10m.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-{}\r\n\r\n",
            LEN - 1
        )
        .as_bytes(),
    )
    .unwrap();
    // Not reading yet: the worker fills the buffers and waits in write completion.
    std::thread::sleep(Duration::from_millis(300));
    let children = s.children();
    for _ in 0..20 {
        for &pid in &children {
            for tid in common::task_ids(pid).into_iter().filter(|&t| t != pid) {
                // SAFETY: tgkill(2) on a thread of our own server's child.
                unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR1) };
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // A keep-alive response (one with `Connection: close` is flushed blocking by the core,
    // never left to write completion): read until its body is complete.
    let mut got = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let head = got.windows(4).position(|w| w == b"\r\n\r\n");
        if head.is_some_and(|h| got.len() >= h + 4 + LEN) {
            break;
        }
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
    let body = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| &got[i + 4..])
        .expect("a response head");
    assert!(
        got.starts_with(b"HTTP/1.1 206"),
        "{:?}",
        String::from_utf8_lossy(&got[..got.len().min(200)])
    );
    assert_eq!(body.len(), LEN, "the response was cut short");
    assert!(
        body == &common::pattern(common::TEN_MB)[..LEN],
        "the response was corrupted"
    );
    // The response promised keep-alive: the connection serves the next request. (Where the
    // interrupted wait failed write completion, the lingering close still flushed the rest
    // of the response, then closed the connection under this request.)
    c.write_all(REQ).unwrap();
    assert_eq!(
        read_response(&mut c),
        Some(200),
        "the connection was closed after the interrupted write completion"
    );
}

/// A busy keep-alive connection parks once per request but files one timeout entry per
/// KeepAliveTimeout (it parks again under its entry's ticket; the entry then comes due
/// early and the expirer files the connection for its real deadline): 20 clients that
/// each send a request every 200 ms for four KeepAliveTimeouts keep their connections,
/// and once quiet each is closed one KeepAliveTimeout after its last response, never
/// sooner.
#[test]
fn busy_keep_alive_connections_outlive_their_first_timeout_entry_and_quiet_ones_close_on_time() {
    if !rworker_only() {
        return;
    }
    const KEEP_ALIVE: Duration = Duration::from_secs(2);
    let s = Server::start(
        ServerOpts::default()
            .start_servers(2)
            .server_limit(2)
            .threads_per_child(10)
            .max_request_workers(20)
            .spare_threads(1, 20)
            .keep_alive(true)
            .max_keep_alive_requests(0)
            .line(format!("KeepAliveTimeout {}", KEEP_ALIVE.as_secs()))
            .line("RWorkerKeepAlive park"),
    );
    assert!(s.wait_settled(Duration::from_secs(15)));
    let clients: Vec<_> = (0..20)
        .map(|i| {
            let addr = s.addr();
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                let busy = Instant::now();
                let mut n = 0;
                let mut last = Instant::now();
                while busy.elapsed() < 4 * KEEP_ALIVE {
                    std::thread::sleep(Duration::from_millis(200));
                    // Before the server can have parked the connection after this request.
                    last = Instant::now();
                    c.write_all(REQ)
                        .unwrap_or_else(|e| panic!("client {i}, request {n}: {e}"));
                    assert_eq!(
                        read_response(&mut c),
                        Some(200),
                        "client {i}, request {n} on its one connection"
                    );
                    n += 1;
                }
                let mut b = [0u8; 1];
                let end = c.read(&mut b);
                assert!(
                    matches!(end, Ok(0))
                        || end
                            .as_ref()
                            .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock
                                && e.kind() != std::io::ErrorKind::TimedOut),
                    "client {i}: not closed within 20 s of its last response: {end:?}"
                );
                (n, last.elapsed())
            })
        })
        .collect();
    for (i, h) in clients.into_iter().enumerate() {
        let (n, quiet) = h.join().unwrap_or_else(|_| panic!("client {i}"));
        assert!(n >= 10, "client {i}: only {n} requests");
        // Measured from before the last request was sent, so from before the server
        // parked the connection: a close sooner than KeepAliveTimeout is the server's.
        assert!(
            quiet >= KEEP_ALIVE,
            "client {i}: closed {quiet:?} after its last request (KeepAliveTimeout {KEEP_ALIVE:?})"
        );
    }
    wait_parked(&s, 0, "after every client was closed");
    let log = s.error_log();
    assert!(
        !log.contains("RW00032") && !log.contains("RW00033"),
        "{log}"
    );
}

/// For a failure message: which processes hold the socket listening on `port`, and what
/// each of `child`'s threads is doing.
fn who_listens_on(port: u16, child: i32) -> String {
    format!(
        "processes holding the listening socket on port {port}: {:?}\nthreads of child {child}:\n{}",
        pids_listening_on(port),
        thread_report(child)
    )
}
