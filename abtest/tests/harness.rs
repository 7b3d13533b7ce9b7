//! The harness measures the MPM it claims to, and fails loudly when something is wrong.
//!
//! Needs root (httpd switches its children to www-data), `/usr/sbin/apache2`, `wrk`, and
//! rworker's module: `RWORKER_SO`, else target/release, else target/debug
//! (`cargo build --release` first).

use rworker_ab::mpm::MpmKind;
use rworker_ab::server::Server;
use rworker_testkit::procfs;
use rworker_testkit::rworker_so::find_rworker_so;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rworker-ab");

fn rworker_so() -> PathBuf {
    find_rworker_so().unwrap_or_else(|e| panic!("{e}"))
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rworker-ab-test-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("create output dir");
    d
}

/// One repetition of one-second runs, no warm-up, the 1-byte file, 10 clients.
const SHORT_RUN: &[&str] = &[
    "--duration",
    "1",
    "--warmup",
    "0",
    "--reps",
    "1",
    "--sizes",
    "1",
    "--clients",
    "10",
];

fn run_ab(args: &[&str], out: &Path) -> Output {
    let so = rworker_so();
    Command::new(BIN)
        .args(["--no-build", "--rworker-so"])
        .arg(&so)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("run rworker-ab")
}

/// The private ServerRoots the runner reported (`... (ServerRoot /tmp/rworker-ab-...); ...`).
fn server_roots(all: &str) -> Vec<String> {
    let mut roots: Vec<String> = all
        .split("(ServerRoot ")
        .skip(1)
        .filter_map(|s| s.split(')').next())
        .map(String::from)
        .collect();
    // Printed on stderr as progress and again in the report on stdout.
    roots.sort();
    roots.dedup();
    roots
}

/// Live processes whose command line names `root` (httpd runs as `apache2 -f <root>/httpd.conf`).
fn processes_naming(root: &str) -> Vec<String> {
    procfs::processes_naming(root)
        .into_iter()
        .map(procfs::cmdline)
        .collect()
}

fn text(o: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn matrix_measures_the_mpm_it_claims() {
    let out = out_dir("matrix");
    let o = run_ab(
        &[SHORT_RUN, &["--mpms", "worker,rworker-apr,rworker"]].concat(),
        &out,
    );
    let all = text(&o);
    assert!(o.status.success(), "rworker-ab failed\n{all}");
    // Each server was checked for what it is.
    for want in [
        "worker: started",
        "verified ServerMPM: worker",
        "verified ServerMPM: rworker, error log: \"rworker: Apr queue\"",
        "verified ServerMPM: rworker, error log: \"rworker: Atomic queue\"",
    ] {
        assert!(all.contains(want), "missing {want:?}\n{all}");
    }
    // Every MPM × mode has a run with requests, httpd CPU and no errors.
    let csv = fs::read_to_string(out.join("results.csv")).expect("results.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 3 * 2, "{csv}");
    for mpm in ["worker", "rworker-apr", "rworker"] {
        for mode in ["keepalive", "close"] {
            let r = rows
                .iter()
                .find(|r| r[col("mpm")] == mpm && r[col("mode")] == mode)
                .unwrap_or_else(|| panic!("no {mpm} {mode} row\n{csv}"));
            let num = |c: &str| r[col(c)].parse::<f64>().unwrap_or(f64::NAN);
            assert!(num("requests") > 0.0, "{mpm} {mode}: no requests\n{csv}");
            assert!(
                num("httpd_cpu_s") > 0.0,
                "{mpm} {mode}: no httpd CPU measured\n{csv}"
            );
            assert!(
                num("vcsw") > 0.0,
                "{mpm} {mode}: no context switches measured\n{csv}"
            );
            assert!(
                num("wrk_cpu_s") > 0.0,
                "{mpm} {mode}: no client CPU measured\n{csv}"
            );
            assert_eq!(num("non_2xx"), 0.0);
            assert_eq!(r[col("failure")], "");
            // rworker publishes its hand-off counters; the stock worker has none (empty).
            // rworker's idle workers accept for themselves (one Listen): no hand-off.
            if mpm == "worker" {
                assert_eq!(r[col("rworker_handoffs")], "", "{csv}");
                assert_eq!(r[col("rworker_wakes_per_handoff")], "", "{csv}");
            } else if mpm == "rworker" {
                assert_eq!(
                    num("rworker_handoffs"),
                    0.0,
                    "{mpm} {mode}: hand-offs\n{csv}"
                );
            } else {
                assert!(
                    num("rworker_handoffs") > 0.0,
                    "{mpm} {mode}: no hand-offs\n{csv}"
                );
                assert!(
                    num("rworker_wakes_per_handoff") >= 0.0,
                    "{mpm} {mode}: no wakes per hand-off\n{csv}"
                );
            }
        }
    }
    let md = fs::read_to_string(out.join("results.md")).expect("results.md");
    assert!(md.contains("rworker/worker req/s"), "{md}");
    assert!(md.contains("rworker futex wakes/hand-off"), "{md}");
    let svg = fs::read_to_string(out.join("chart.svg")).expect("chart.svg");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    // Every server it started is gone, and so is its ServerRoot.
    let roots = server_roots(&all);
    assert_eq!(roots.len(), 3, "{all}");
    for root in &roots {
        let left = processes_naming(root);
        assert!(left.is_empty(), "server left running: {left:?}");
        assert!(!Path::new(root).exists(), "ServerRoot {root} left behind");
    }
    let _ = fs::remove_dir_all(&out);
}

/// `--tls`: every server speaks only HTTPS, wrk and the harness's own checks use it, and the
/// outputs mark every cell TLS; the run's certificate goes with it.
#[test]
fn tls_matrix_runs_over_https() {
    let out = out_dir("tls");
    let o = run_ab(
        &[SHORT_RUN, &["--tls", "--mpms", "worker,rworker"]].concat(),
        &out,
    );
    let all = text(&o);
    assert!(o.status.success(), "rworker-ab --tls failed\n{all}");
    for want in [
        "verified ServerMPM: worker, over TLS",
        "verified ServerMPM: rworker, over TLS, error log: \"rworker: Atomic queue\"",
        "TLS keepalive 1 B c=10",
        "TLS close 1 B c=10",
        "# rworker A/B benchmark over TLS",
    ] {
        assert!(all.contains(want), "missing {want:?}\n{all}");
    }
    let csv = fs::read_to_string(out.join("results.csv")).expect("results.csv");
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2 * 2, "{csv}");
    for r in &rows {
        assert_eq!(r[col("tls")], "yes", "{csv}");
        assert!(
            r[col("requests")].parse::<u64>().is_ok_and(|n| n > 0),
            "{csv}"
        );
        assert_eq!(r[col("failure")], "", "{csv}");
    }
    for f in ["summary.csv", "paired.csv"] {
        let c = fs::read_to_string(out.join(f)).expect(f);
        assert!(c.lines().skip(1).all(|l| l.ends_with(",yes")), "{f}\n{c}");
    }
    // Its servers, their ServerRoots and the run's certificate are gone.
    let roots = server_roots(&all);
    assert_eq!(roots.len(), 2, "{all}");
    for root in &roots {
        assert!(processes_naming(root).is_empty(), "server left running");
        assert!(!Path::new(root).exists(), "ServerRoot {root} left behind");
    }
    let cert_dir = all
        .split("certificate made in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("no certificate directory in the report\n{all}"));
    assert!(!Path::new(cert_dir).exists(), "{cert_dir} left behind");
    let _ = fs::remove_dir_all(&out);
}

/// worker-aa loads its own copy of the stock worker, rworker-thread holds keep-alive
/// connections on threads, and the report has the A/A and `--pair` tables.
#[test]
fn aa_pair_and_pair_tables_are_reported() {
    let out = out_dir("pairs");
    let o = run_ab(
        &[
            SHORT_RUN,
            &[
                "--mpms",
                "worker,worker-aa,rworker,rworker-thread",
                "--modes",
                "keepalive",
                "--pair",
                "rworker/rworker-thread",
            ],
        ]
        .concat(),
        &out,
    );
    let all = text(&o);
    assert!(o.status.success(), "rworker-ab failed\n{all}");
    for want in [
        "worker-aa: started",
        "mod_mpm_worker-aa.so, byte-identical",
        ", maps /",
        "keep-alive: thread (no ConnsAsyncKeepAlive)",
    ] {
        assert!(all.contains(want), "missing {want:?}\n{all}");
    }
    let md = fs::read_to_string(out.join("results.md")).expect("results.md");
    let paired = fs::read_to_string(out.join("paired.md")).expect("paired.md");
    for text in [&md, &paired] {
        for want in [
            "| cell | rworker/worker req/s |",
            "## A/A: worker-aa / worker, this run's noise",
            "## Paired: rworker / rworker-thread",
            "| keepalive 1 B c=10 |",
        ] {
            assert!(text.contains(want), "missing {want:?}\n{text}");
        }
    }
    let csv = fs::read_to_string(out.join("paired.csv")).expect("paired.csv");
    assert!(
        csv.lines()
            .any(|l| l.starts_with("rworker,rworker-thread,keepalive,1,10,req_per_s,1,")),
        "{csv}"
    );
    // --replot finds the --pair in results.md's command line and writes the same tables.
    fs::remove_file(out.join("paired.md")).expect("rm paired.md");
    let o = Command::new(BIN)
        .arg("--replot")
        .arg(&out)
        .output()
        .expect("run rworker-ab --replot");
    assert!(o.status.success(), "{}", text(&o));
    let again = fs::read_to_string(out.join("paired.md")).expect("paired.md again");
    assert!(
        again.contains("## Paired: rworker / rworker-thread"),
        "{again}"
    );
    for root in server_roots(&all) {
        assert!(processes_naming(&root).is_empty(), "server left running");
        assert!(!Path::new(&root).exists(), "ServerRoot {root} left behind");
    }
    let _ = fs::remove_dir_all(&out);
}

/// `--percon`: one child per MPM, strace attached to every thread, the table written.
#[test]
fn percon_counts_system_calls_per_connection() {
    let out = out_dir("percon");
    let o = run_ab(
        &[
            "--percon",
            "--reps",
            "1",
            "--requests",
            "300",
            "--cpu-requests",
            "300",
        ],
        &out,
    );
    let all = text(&o);
    assert!(o.status.success(), "rworker-ab --percon failed\n{all}");
    for want in [
        "verified ServerMPM: worker",
        "rworker: Atomic queue",
        "(one child, pid ",
    ] {
        assert!(all.contains(want), "missing {want:?}\n{all}");
    }
    let md = fs::read_to_string(out.join("results.md")).expect("results.md");
    let row = |label: &str| -> Vec<String> {
        md.lines()
            .find(|l| l.starts_with(&format!("| {label} |")))
            .unwrap_or_else(|| panic!("no {label} row\n{md}"))
            .split('|')
            .map(|c| c.trim().to_string())
            .filter(|c| !c.is_empty())
            .collect()
    };
    // The traced figures are reported, not judged here. Columns: worker close, rworker
    // close, ratio, then keep-alive. Each row is there with a number for both MPMs.
    //
    // This test failed in CI twice on the values of these rows: `accept4: ["accept4",
    // "0.00", "1.00", ...]` at load average 13.5 (perf missed the stock worker's accept4
    // calls), and `shutdown 0.827` (perf enabled its events one by one while the load had
    // begun). What perf or strace counts depends on when they attach, which calls were in
    // progress then (a worker blocked in accept4 shows only as `resumed` and is not
    // counted), and on the lingering closes landing before the detach: none of it is exact
    // on a loaded machine. The figures belong to the benchmark (`cargo run --release -p
    // rworker-ab -- --percon` prints them); what is judged below are exact counts: ab's and
    // the server's own counter of accepted connections.
    let number = |c: &str| c.parse::<f64>().is_ok_and(|x| x.is_finite() && x >= 0.0);
    for label in ["accept4", "shutdown", "**total system calls**"] {
        let r = row(label);
        assert!(number(&r[1]) && number(&r[2]), "{label}: {r:?}\n{md}");
    }
    // The untraced pass: CPU for both (the child served 300 requests: it ran).
    let cpu = row("CPU µs (schedstat)");
    assert!(cpu[1].parse::<f64>().is_ok_and(|x| x > 0.0), "{md}");
    assert!(cpu[2].parse::<f64>().is_ok_and(|x| x > 0.0), "{md}");
    // RWorker* keys for rworker only; with one Listen idle workers accept, so there are no
    // hand-offs (a row of zeros is left out).
    assert_eq!(row("RWorkerConnections")[1], "–", "{md}");
    assert!(!md.contains("| RWorkerHandoffs |"), "{md}");
    let csv = fs::read_to_string(out.join("results.csv")).expect("results.csv");
    // ab sent exactly 300 requests over 300 connections in every pass.
    for pass in ["strace", "perf", "untraced"] {
        for mpm in ["worker", "rworker"] {
            let head = format!("{pass},{mpm},close,1,300,300,");
            assert!(csv.contains(&head), "no {head} rows\n{csv}");
        }
    }
    assert!(csv.contains(",futex_op:FUTEX_WAKE_PRIVATE,"), "{csv}");
    // rworker counts a connection when it accepts it, before the response ab waits for,
    // and the harness reads the counter after ab ended: exact whatever the load. ab opened
    // its 300 connections, and (as it stops) at most clients - 1 = 3 more.
    let accepted: Vec<u64> = csv
        .lines()
        .filter(|l| l.starts_with("untraced,rworker,close,1,300,300,"))
        .filter_map(|l| l.split_once(",rworker_connections,"))
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    assert!(
        accepted.len() == 1 && (300..=303).contains(&accepted[0]),
        "RWorkerConnections during 300 connections: {accepted:?}\n{csv}"
    );
    assert!(fs::read_to_string(out.join("summary.csv")).is_ok_and(|s| s.lines().count() > 10));
    // Nothing left behind: no server, no ServerRoot, no strace attached.
    for root in server_roots(&all) {
        let left = processes_naming(&root);
        assert!(left.is_empty(), "server left running: {left:?}");
        assert!(!Path::new(&root).exists(), "ServerRoot {root} left behind");
    }
    let _ = fs::remove_dir_all(&out);
}

#[test]
fn a_404_fails_loudly() {
    let out = out_dir("404");
    let o = run_ab(
        &[
            SHORT_RUN,
            &[
                "--modes",
                "keepalive",
                "--mpms",
                "worker",
                "--path",
                "/no-such-file.bin",
            ],
        ]
        .concat(),
        &out,
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "a 404 run must fail\n{all}");
    assert!(all.contains("FAIL") && all.contains("non-2xx"), "{all}");
    let md = fs::read_to_string(out.join("results.md")).expect("results.md is still written");
    assert!(md.contains("non-2xx"), "{md}");
    let _ = fs::remove_dir_all(&out);
}

#[test]
fn bad_arguments_exit_2_before_starting_anything() {
    let out = out_dir("args");
    let o = run_ab(&["--mpms", "prefork"], &out);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown MPM \"prefork\""));
    let _ = fs::remove_dir_all(&out);
}

#[test]
fn wrong_mpm_queue_kind_and_crash_lines_fail_loudly() {
    let so = rworker_so();
    // A stock worker presented as rworker.
    let worker = Server::launch(MpmKind::Worker, &[1], &so).expect("start worker");
    let e = worker
        .verify(MpmKind::Rworker)
        .expect_err("worker passed as rworker");
    assert!(e.0.contains("ServerMPM: worker"), "{e}");
    // ... and as worker-aa, which must map its copy of the module, not Debian's file.
    let e = worker
        .verify(MpmKind::WorkerAa)
        .expect_err("worker passed as worker-aa");
    assert!(e.0.contains("does not map it"), "{e}");
    worker.verify(MpmKind::Worker).expect("worker is worker");
    worker.stop().expect("clean stop");

    // rworker with its atomic queue (and RWorkerKeepAlive thread, as rworker-apr) presented
    // as rworker-apr; as rworker-park; then a crash line in its log.
    let mut rw = Server::launch(MpmKind::RworkerThread, &[1], &so).expect("start rworker");
    let e = rw
        .verify(MpmKind::RworkerApr)
        .expect_err("atomic passed as apr");
    assert!(
        e.0.contains("Apr queue") && e.0.contains("Atomic queue"),
        "{e}"
    );
    let e = rw
        .verify(MpmKind::RworkerPark)
        .expect_err("thread passed as park");
    assert!(e.0.contains("to park keep-alive connections"), "{e}");
    let what = rw
        .verify(MpmKind::RworkerThread)
        .expect("rworker-thread is rworker-thread");
    assert!(what.contains("keep-alive: thread"), "{what}");
    assert!(rw.check_log().is_ok());
    let mut log = fs::OpenOptions::new()
        .append(true)
        .open(&rw.httpd().error_log)
        .expect("open error log");
    use std::io::Write;
    writeln!(
        log,
        "[Sun Nov 30 01:00:00.000000 2025] [core:notice] [pid 1:tid 1] AH00052: child pid 42 exit signal Segmentation fault (11)"
    )
    .expect("append");
    let e = rw.check_log().expect_err("a segfault line must fail");
    assert!(e.0.contains("CRASH") && e.0.contains("exit signal"), "{e}");
    let root = rw.root.clone();
    drop(rw); // stops it by its pidfile
    assert!(
        !root.join("run/httpd.pid").exists(),
        "pidfile left: server still running?"
    );
    let _ = fs::remove_dir_all(&root);
}
