//! Serving: static files, HEAD, 404, keep-alive, pipelining; process and thread layout;
//! what mod_status sees (contract §6 items 1–3).

mod common;

use common::*;
use std::time::Duration;

#[test]
fn serves_static_files_byte_exact() {
    let s = Server::start(ServerOpts::default());
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("/", INDEX_HTML.as_bytes().to_vec()),
        ("/index.html", INDEX_HTML.as_bytes().to_vec()),
        ("/1b.txt", b"x".to_vec()),
        ("/4k.bin", pattern(4096)),
        ("/100k.bin", pattern(100 * 1024)),
    ];
    for (path, want) in cases {
        let (code, body) = http_get(&s.url(path)).unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert_eq!(code, 200, "GET {path}");
        assert!(
            body == want,
            "GET {path}: {} bytes, expected {} (content differs)",
            body.len(),
            want.len()
        );
    }
    s.assert_no_warnings_in_error_log();
}

#[test]
fn ten_megabyte_file_arrives_whole() {
    let s = Server::start(ServerOpts::default());
    let (code, body) = http_get(&s.url("/10m.bin")).expect("GET /10m.bin");
    assert_eq!(code, 200);
    assert_eq!(body.len(), TEN_MB, "length of /10m.bin");
    if let Some(i) = body
        .iter()
        .enumerate()
        .position(|(i, &b)| b != pattern_byte(i))
    {
        panic!("/10m.bin differs from the pattern first at byte {i}");
    }
}

#[test]
fn head_has_length_but_no_body() {
    let s = Server::start(ServerOpts::default());
    let (code, headers, body_len) = http_head(&s.url("/100k.bin")).expect("HEAD /100k.bin");
    assert_eq!(code, 200);
    assert_eq!(
        headers.get("content-length").map(String::as_str),
        Some("102400"),
        "headers: {headers:?}"
    );
    assert_eq!(body_len, 0);

    // On a raw connection: a HEAD, then a GET on the same connection; if the HEAD had sent
    // a body, the GET's status line would not be where we read it.
    let mut c = RawConn::connect(&s.addr());
    c.send(b"HEAD /4k.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let (st, h) = c.read_head();
    assert_eq!(st, 200);
    assert_eq!(h.get("content-length").map(String::as_str), Some("4096"));
    c.send(RawConn::get_request("/1b.txt").as_bytes());
    let r = c.read_response();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"x"[..]));
}

#[test]
fn missing_file_is_404() {
    let s = Server::start(ServerOpts::default());
    let (code, _) = http_get(&s.url("/no/such/file.html")).expect("GET missing");
    assert_eq!(code, 404);
}

#[test]
fn hundred_requests_on_one_keepalive_connection() {
    let s = Server::start(
        ServerOpts::default()
            .keep_alive(true)
            .max_keep_alive_requests(100),
    );
    let mut c = RawConn::connect(&s.addr());
    let paths = ["/index.html", "/1b.txt", "/4k.bin", "/100k.bin"];
    // MaxKeepAliveRequests counts the requests after the first: httpd keeps the connection
    // open through request 100 and closes it with request 101.
    for i in 0..101 {
        let path = paths[i % paths.len()];
        c.send(RawConn::get_request(path).as_bytes());
        let r = c.read_response();
        assert_eq!(
            r.status, 200,
            "request {i} ({path}) on the keep-alive connection"
        );
        let want_len = match path {
            "/index.html" => INDEX_HTML.len(),
            "/1b.txt" => 1,
            "/4k.bin" => 4096,
            _ => 100 * 1024,
        };
        assert_eq!(r.body.len(), want_len, "request {i} ({path})");
        let conn = r.headers.get("connection").map(|v| v.to_ascii_lowercase());
        if i < 100 {
            assert_ne!(
                conn.as_deref(),
                Some("close"),
                "server closed early, at request {i}"
            );
        } else {
            assert_eq!(
                conn.as_deref(),
                Some("close"),
                "101st response headers: {:?}",
                r.headers
            );
        }
    }
    assert!(
        c.is_closed_by_peer(),
        "connection still open after MaxKeepAliveRequests"
    );
}

#[test]
fn pipelined_requests_answered_in_order() {
    let s = Server::start(ServerOpts::default().keep_alive(true));
    let mut c = RawConn::connect(&s.addr());
    let order: Vec<usize> = (0..10).map(|i| (i * 7) % SEQ_FILES).collect();
    let batch: String = order
        .iter()
        .map(|i| RawConn::get_request(&format!("/seq/{i:02}.txt")))
        .collect();
    c.send(batch.as_bytes());
    for (k, &i) in order.iter().enumerate() {
        let r = c.read_response();
        assert_eq!(r.status, 200, "pipelined response {k}");
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            seq_body(i),
            "pipelined response {k} out of order"
        );
    }
    s.assert_no_warnings_in_error_log();
}

#[test]
fn parent_runs_as_root_children_as_www_data() {
    let opts = ServerOpts::stable();
    let s = Server::start(opts.clone());
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "server did not settle; status: {:?}",
        s.try_server_status_auto()
    );
    let parent = s.parent_pid();
    assert_eq!(uid_of(parent), 0, "parent {parent} should run as root");
    assert_eq!(task_count(parent), 1, "the parent is single-threaded");
    let kids = s.children();
    assert_eq!(
        kids.len(),
        opts.start_servers as usize,
        "children of {parent}: {kids:?}"
    );
    let www = uid_of_user("www-data");
    for &c in &kids {
        assert_eq!(uid_of(c), www, "child {c} should run as www-data");
        // Main thread + listener (unless the workers accept) + ThreadsPerChild workers.
        assert_eq!(task_count(c), s.tasks_per_child(), "tasks of child {c}");
    }
}

#[test]
fn server_status_counts_workers_and_accesses() {
    let opts = ServerOpts::stable();
    let s = Server::start(opts.clone());
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "server did not settle; status: {:?}",
        s.try_server_status_auto()
    );
    let before = s.server_status_auto();
    assert_eq!(before.get("ServerMPM"), s.mpm.name());
    assert_eq!(before.num("ParentServerConfigGeneration"), 1);
    assert_eq!(before.num("ParentServerMPMGeneration"), 0);
    let live = s.children().len() * opts.effective_threads_per_child() as usize;
    assert_eq!(
        before.busy() + before.idle(),
        live,
        "Busy+Idle vs live worker threads; status: {before:?}"
    );
    assert!(
        before.busy() >= 1,
        "the status request itself is served by a busy worker"
    );
    let sb = before.scoreboard();
    assert_eq!(
        sb.len(),
        opts.expected_scoreboard_len(),
        "Scoreboard {sb:?}"
    );
    assert_eq!(
        // Every live worker is idle ('_') or in some busy state (W, K for a client's
        // kept-alive connection, R, …); only open slots show '.'.
        sb.chars().filter(|&c| c != '.' && c != ' ').count(),
        live,
        "Scoreboard {sb:?}"
    );

    const N: u64 = 50;
    for _ in 0..N {
        let (code, _) = http_get(&s.url("/4k.bin")).expect("GET /4k.bin");
        assert_eq!(code, 200);
    }
    // core counts a request when its EOR bucket is destroyed, which is after the
    // response's bytes went out: the client can read the 50th response and ask for
    // the status before the worker that served it has counted it (stock httpd too).
    // So the count must come within a bound, not at once. Every status request is
    // counted as well: the one that gave `before` and each earlier poll here.
    // (CI failed here once, 49 of 51 counted, when the count was read once at the instant
    // of the 50th response on 2 busy cores. Polled now, it can fail only if a request is
    // never counted; 10 s is far more than a loaded worker needs to end a request.)
    let mut polls = 0;
    let mut delta = 0;
    let all_counted = wait_until(Duration::from_secs(10), || {
        delta = s.server_status_auto().num("Total Accesses") - before.num("Total Accesses");
        polls += 1;
        delta >= N + polls
    });
    assert!(
        all_counted,
        "Total Accesses rose by {delta} after {N} requests and {polls} status requests"
    );
    s.assert_no_warnings_in_error_log();
}

/// The scoreboard shows MaxRequestWorkers slots (rounded down to a multiple of
/// ThreadsPerChild), as the stock worker does: 150 for the contract's test config.
#[test]
fn scoreboard_length_follows_max_request_workers() {
    let contract = ServerOpts::default();
    assert_eq!(contract.expected_scoreboard_len(), 150);
    let s = Server::start(contract.clone());
    let st = s.server_status_auto();
    assert_eq!(
        st.scoreboard().len(),
        150,
        "Scoreboard {:?}",
        st.scoreboard()
    );

    // MaxRequestWorkers 25 with ThreadsPerChild 10 is rounded down to 20 (AH00316).
    let odd = ServerOpts::stable().max_request_workers(25);
    assert_eq!(odd.expected_scoreboard_len(), 20);
    let s2 = Server::start(odd);
    let st2 = s2.server_status_auto();
    assert_eq!(
        st2.scoreboard().len(),
        20,
        "Scoreboard {:?}",
        st2.scoreboard()
    );
}

/// `RWorkerAccept` with `RWorkerKeepAlive thread` (the stock worker's keep-alive, one
/// directive away from the default `park`): with one Listen the idle workers accept for
/// themselves, each blocked in accept (no listener thread, no hand-off through the
/// fdqueue); with a second Listen, or with `RWorkerAccept listener`, the listener thread
/// accepts and hands off, as in the stock worker. Every connection is served and counted
/// either way.
#[test]
fn who_accepts_follows_rworker_accept_and_the_listen_count() {
    if Mpm::under_test() != Mpm::Rworker || std::env::var("RWORKER_TEST_ACCEPT").is_ok() {
        eprintln!("skipped: rworker's accept modes, as each case sets them");
        return;
    }
    let port2 = free_port();
    let cases = [
        (None, true),
        (Some(format!("Listen 127.0.0.1:{port2}")), false),
        (Some("RWorkerAccept listener".to_string()), false),
        (Some("RWorkerAccept workers".to_string()), true),
    ];
    for (line, workers) in cases {
        let name = line.clone().unwrap_or_else(|| "default".into());
        let mut opts = ServerOpts::stable().line("RWorkerKeepAlive thread");
        if let Some(l) = &line {
            opts = opts.line(l.clone());
        }
        let s = Server::start(opts);
        assert_eq!(s.has_listener_thread(), !workers, "{name}");
        assert!(
            s.wait_settled(Duration::from_secs(10)),
            "{name}: not settled with {} tasks per child: {:?}",
            s.tasks_per_child(),
            s.children()
                .iter()
                .map(|&c| task_count(c))
                .collect::<Vec<_>>()
        );
        let want = if workers {
            "accepts with its idle workers (RWorkerAccept workers)"
        } else {
            "accepts with its listener thread"
        };
        let log = s.error_log();
        assert_eq!(
            log.matches(want).count(),
            s.children().len(),
            "{name}: one RW00011 line per child expected\n{log}"
        );
        let before = s.server_status_auto();
        let mut urls = vec![s.url("/1b.txt")];
        if line.as_deref().is_some_and(|l| l.starts_with("Listen")) {
            urls.push(format!("http://127.0.0.1:{port2}/1b.txt"));
        }
        let n = 40u64;
        for i in 0..n {
            let url = &urls[i as usize % urls.len()];
            let (code, body) = http_get(url).unwrap_or_else(|e| panic!("{name}: GET {url}: {e}"));
            assert_eq!((code, body.as_slice()), (200, b"x".as_slice()), "{name}");
        }
        let after = s.server_status_auto();
        let delta = |k: &str| after.num(k) - before.num(k);
        // n requests, each on its own connection, plus the status request reading `after`.
        assert_eq!(delta("RWorkerConnections"), n + 1, "{name}: {:?}", after.0);
        assert_eq!(
            delta("RWorkerHandoffs"),
            if workers { 0 } else { n + 1 },
            "{name}: {:?}",
            after.0
        );
        s.assert_no_warnings_in_error_log();
    }
}
