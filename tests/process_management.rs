//! Process management under load and faults (issue 5): dynamic sizing, saturation,
//! MaxConnectionsPerChild, kill -9 under load, restart storms, signals at odd moments,
//! idle CPU, bad configuration, several listeners, memory against the stock worker; and
//! (issue 3) transaction pools recycled through the pool stack.
//!
//! Every test runs against the MPM chosen by `RWORKER_TEST_MPM` and was validated on the
//! stock worker; the few that check a promise only rworker makes say so and skip elsewhere.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

/// Access log format: child pid, local port, status, keep-alive request number, URL.
const ACCESS_LOG: &str = r#"CustomLog logs/access.log "%P %{local}p %>s %k %U%q""#;

#[derive(Debug, Clone)]
struct Access {
    pid: i32,
    port: u16,
    status: u16,
    keepalive_n: u32,
    uri: String,
}

fn accesses(s: &Server) -> Vec<Access> {
    s.access_log()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Access {
                pid: f.first()?.parse().ok()?,
                port: f.get(1)?.parse().ok()?,
                status: f.get(2)?.parse().ok()?,
                keepalive_n: f.get(3)?.parse().ok()?,
                uri: f.get(4)?.to_string(),
            })
        })
        .collect()
}

/// The value of `key` in a `?a=1&b=2` query.
fn query_param<'a>(uri: &'a str, key: &str) -> Option<&'a str> {
    uri.split_once('?')?
        .1
        .split('&')
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

/// One sample: when, and the live children's pids.
type ChildSample = (Instant, BTreeSet<i32>);

/// Samples the set of live children every 50 ms in a thread, until dropped.
struct ChildSampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<ChildSample>>>,
    handle: Option<thread::JoinHandle<()>>,
}

impl ChildSampler {
    fn start(parent: i32) -> ChildSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (st, sa) = (stop.clone(), samples.clone());
        let handle = thread::spawn(move || {
            while !st.load(Ordering::SeqCst) {
                let kids: BTreeSet<i32> = children_of(parent)
                    .into_iter()
                    .filter(|&(_, s)| s != 'Z')
                    .map(|(p, _)| p)
                    .collect();
                sa.lock().unwrap().push((Instant::now(), kids));
                sleep(Duration::from_millis(50));
            }
        });
        ChildSampler {
            stop,
            samples,
            handle: Some(handle),
        }
    }

    fn samples(&self) -> Vec<ChildSample> {
        self.samples.lock().unwrap().clone()
    }

    /// (first time seen, pid) of every child that appeared after `since`.
    fn births(&self, since: Instant) -> Vec<(Instant, i32)> {
        let mut seen = BTreeSet::new();
        let mut v = Vec::new();
        for (t, kids) in self.samples() {
            for &k in &kids {
                if seen.insert(k) && t > since {
                    v.push((t, k));
                }
            }
        }
        v
    }

    /// (first time missed, pid) of every child that disappeared after `since`.
    fn deaths(&self, since: Instant) -> Vec<(Instant, i32)> {
        let mut v = Vec::new();
        let s = self.samples();
        for w in s.windows(2) {
            for &k in w[0].1.difference(&w[1].1) {
                if w[1].0 > since {
                    v.push((w[1].0, k));
                }
            }
        }
        v
    }
}

impl Drop for ChildSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// When the kernel started process `pid` (`starttime` of /proc/PID/stat, in clock ticks
/// since boot): the instant of its fork, however late a sampler comes to see it.
fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name in parentheses: state is the 3rd field, starttime the 22nd.
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// The largest number of events within any window of `width`.
fn max_in_window(times: &[Instant], width: Duration) -> usize {
    let mut t: Vec<Instant> = times.to_vec();
    t.sort();
    (0..t.len())
        .map(|i| t[i..].iter().take_while(|&&x| x - t[i] <= width).count())
        .max()
        .unwrap_or(0)
}

fn count(log: &str, id: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(&format!("{id}:")))
        .count()
}

// ------------------------------------------------------------------------------------------
// 1. Dynamic sizing

#[test]
fn burst_forks_exponentially_then_sheds_one_child_per_cycle() {
    // 8 slots of 5 threads; MaxSpareThreads is raised by the MPM to Min + TPC + 1 = 11.
    let opts = ServerOpts::default()
        .start_servers(1)
        .threads_per_child(5)
        .max_request_workers(40)
        .spare_threads(5, 10)
        .keep_alive(false)
        .line("Timeout 30");
    let s = Server::start(opts);
    assert!(s.wait_settled(Duration::from_secs(10)), "did not settle");
    assert_eq!(s.children().len(), 1, "StartServers 1");
    let sampler = ChildSampler::start(s.parent_pid());
    sleep(Duration::from_millis(200));

    // The burst: 30 slow requests, each holding a worker.
    let burst = Instant::now();
    let mut held: Vec<HeldRequest> = (0..30)
        .map(|i| HeldRequest::open(&s.addr(), &format!("/index.html?held={i}")))
        .collect();
    let grown = wait_until(Duration::from_secs(15), || s.children().len() == 8);
    let grow_time = burst.elapsed();
    assert!(
        grown,
        "children did not grow to MaxRequestWorkers/ThreadsPerChild = 8 within 15 s: {:?}",
        s.children()
    );
    // The 8 children are alive (they hold requests) and the sampler sees each at least once.
    let seen = wait_until(Duration::from_secs(5), || sampler.births(burst).len() == 7);
    let born: Vec<i32> = sampler.births(burst).iter().map(|b| b.1).collect();
    assert!(seen, "7 children forked for the burst, sampled {born:?}");
    // When each was forked, from the kernel (10 ms ticks), not when the 50 ms sampler came
    // to see it: a sampler thread starved on a loaded machine would spread one batch of
    // forks over several samples.
    let tick = Duration::from_secs(1) / clk_tck() as u32;
    let ticks: Vec<u64> = born.iter().filter_map(|&p| start_ticks(p)).collect();
    assert_eq!(ticks.len(), 7, "start times of {born:?}");
    let t_first = *ticks.iter().min().unwrap();
    let births: Vec<Instant> = ticks
        .iter()
        .map(|&t| burst + tick * (t - t_first) as u32)
        .collect();
    let biggest_batch = max_in_window(&births, Duration::from_millis(900));
    eprintln!(
        "grew 1 -> 8 children in {grow_time:?}; forks at {:?} ms after the first; biggest batch {biggest_batch}",
        births
            .iter()
            .map(|t| (*t - burst).as_millis())
            .collect::<Vec<_>>()
    );
    // Exponential: 1, 2, then 4 children in one maintenance cycle, forked in one loop. A
    // linear parent forks at most one per cycle, and cycles are 1 s apart or more (a busy
    // machine only delays them): it can never fork 3 within 900 ms, however loaded.
    assert!(
        biggest_batch >= 3,
        "the spawn rate did not grow: at most {biggest_batch} children forked within 900 ms"
    );
    // About 3-4 cycles of 1 s; a linear parent needs 7. The 10 s bound holds on a loaded
    // machine: a cycle only takes the parent a few ms of CPU.
    assert!(
        grow_time < Duration::from_secs(10),
        "1 -> 8 children took {grow_time:?} (exponential spawning needs about 3-4 cycles)"
    );
    // Every held request is in a worker now (30 + this status request).
    let accepted = wait_until(Duration::from_secs(20), || {
        s.try_server_status_auto().is_ok_and(|st| st.busy() >= 31)
    });
    assert!(
        accepted,
        "held requests not all accepted: {:?}",
        s.try_server_status_auto()
    );

    // The burst ends, but for 2 requests that stay held while children are shed.
    let late = held.split_off(28);
    let ended = Instant::now();
    for h in held {
        assert_eq!(h.complete(), Ok(200), "a held request after the burst");
    }
    sleep(Duration::from_millis(2500));
    let window_end = ended + Duration::from_millis(2500);
    let early_deaths: Vec<(Instant, i32)> = sampler
        .deaths(ended)
        .into_iter()
        .filter(|d| d.0 <= window_end)
        .collect();
    eprintln!(
        "children exited in the first 2.5 s after the burst: {:?}",
        early_deaths
            .iter()
            .map(|(t, p)| (p, (*t - ended).as_millis()))
            .collect::<Vec<_>>()
    );
    // At most 3 maintenance cycles (1 s apart or more) fit in 2.5 s, each sheds one child;
    // a death is seen by the sampler at or after it happened, so load can only lower this.
    assert!(
        early_deaths.len() <= 3,
        "{} children shed within 2.5 s: one per maintenance cycle (1 s) expected",
        early_deaths.len()
    );
    // Shedding began: polled, since a loaded machine delays the exits.
    let began = wait_until(Duration::from_secs(10), || {
        !sampler.deaths(ended).is_empty()
    });
    assert!(
        began,
        "no child shed 12.5 s after the burst ended ({} children)",
        s.children().len()
    );
    // Children told to go while holding a request finish it (graceful).
    for h in late {
        assert_eq!(
            h.complete(),
            Ok(200),
            "a request held while children were shed was cut"
        );
    }
    // Idle threads settle at <= MaxSpareThreads (11): 2 children of 5.
    let shed = wait_until(Duration::from_secs(30), || s.children().len() == 2);
    assert!(
        shed,
        "children not shed down to 2 within 30 s: {:?}",
        s.children()
    );
    // The sampler has seen the last exit once it has sampled after it.
    wait_until(Duration::from_secs(5), || sampler.deaths(ended).len() >= 6);
    let all_deaths = sampler.deaths(ended);
    let times: Vec<Instant> = all_deaths.iter().map(|d| d.0).collect();
    eprintln!(
        "shed 8 -> 2 in {:?}; exits at {:?} ms",
        ended.elapsed(),
        times
            .iter()
            .map(|t| (*t - ended).as_millis())
            .collect::<Vec<_>>()
    );
    assert_eq!(all_deaths.len(), 6, "6 children shed");
    sleep(Duration::from_millis(2500));
    assert_eq!(s.children().len(), 2, "process count is stable at rest");
    assert!(
        wait_until(Duration::from_secs(10), || s.zombie_children().is_empty()),
        "zombies: {:?}",
        s.zombie_children()
    );
    s.assert_no_warnings_in_error_log();
}

// ------------------------------------------------------------------------------------------
// 2. Saturation

#[test]
fn saturation_leaves_connections_in_the_backlog_and_warns_once() {
    let opts = ServerOpts::default()
        .start_servers(2)
        .threads_per_child(5)
        .max_request_workers(10)
        .spare_threads(1, 1000)
        .keep_alive(false)
        .line("Timeout 30");
    let s = Server::start(opts);
    assert!(s.wait_settled(Duration::from_secs(10)), "did not settle");

    let mut held: Vec<HeldRequest> = (0..9)
        .map(|i| HeldRequest::open(&s.addr(), &format!("/index.html?held={i}")))
        .collect();
    let nine_busy = wait_until(Duration::from_secs(10), || {
        s.try_server_status_auto().is_ok_and(|st| st.busy() == 10)
    });
    assert!(
        nine_busy,
        "9 held requests + status: {:?}",
        s.try_server_status_auto()
    );
    held.push(HeldRequest::open(&s.addr(), "/index.html?held=9"));
    let accepted = wait_until(Duration::from_secs(15), || {
        listen_backlog(s.port) == Some(0)
    });
    assert!(accepted, "the 10th held request was not accepted");
    sleep(Duration::from_millis(300));

    // Every worker is busy: 5 more complete requests must wait in the kernel's backlog.
    let addr = s.addr();
    let queued: Vec<_> = (0..5)
        .map(|i| {
            let addr = addr.clone();
            thread::spawn(move || -> Result<(u16, Instant), String> {
                let mut c = TcpStream::connect(&addr).map_err(|e| e.to_string())?;
                c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                write!(
                    c,
                    "GET /index.html?queued={i} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                )
                .map_err(|e| e.to_string())?;
                let mut line = String::new();
                BufReader::new(c)
                    .read_line(&mut line)
                    .map_err(|e| e.to_string())?;
                let code = line
                    .get(9..12)
                    .and_then(|c| c.parse().ok())
                    .ok_or(format!("status line {line:?}"))?;
                Ok((code, Instant::now()))
            })
        })
        .collect();
    // Polled (5 client threads must run and connect); the check that matters is the next
    // one, that the count stays at 5: load cannot make a listener accept.
    let backlogged = wait_until(Duration::from_secs(15), || {
        listen_backlog(s.port) == Some(5)
    });
    assert!(
        backlogged,
        "backlog holds {:?} connections, expected 5 (the listener accepted while no worker was idle?)",
        listen_backlog(s.port)
    );
    sleep(Duration::from_millis(2000));
    assert_eq!(
        listen_backlog(s.port),
        Some(5),
        "the listener accepted connections while every worker was busy"
    );
    let warned = wait_until(Duration::from_secs(15), || {
        count(&s.error_log(), "AH00286") > 0
    });
    assert!(warned, "no AH00286 in the error log:\n{}", s.error_log());
    // Several more maintenance cycles at saturation: still one line.
    sleep(Duration::from_millis(4000));
    assert_eq!(
        count(&s.error_log(), "AH00286"),
        1,
        "AH00286 logged more than once:\n{}",
        s.error_log()
    );
    assert!(
        s.error_log()
            .contains("server reached MaxRequestWorkers setting"),
        "log:\n{}",
        s.error_log()
    );

    // Workers free up: every queued client is served.
    let released = Instant::now();
    for h in held {
        assert_eq!(h.complete(), Ok(200), "held request");
    }
    for q in queued {
        let (code, answered) = q
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("queued client: {e}"));
        assert_eq!(code, 200, "queued client");
        assert!(
            answered > released,
            "a queued client was answered before any worker freed up"
        );
    }
    // Served as soon as workers free up, not after Timeout (30 s): 15 s tells the two
    // apart on a loaded machine, where 15 tiny requests take well under a second.
    assert!(
        released.elapsed() < Duration::from_secs(15),
        "queued clients took {:?} after release",
        released.elapsed()
    );
    sleep(Duration::from_millis(1500));
    assert_eq!(count(&s.error_log(), "AH00286"), 1, "AH00286 count");
    s.assert_no_warnings_in_error_log_except(&["AH00286", "AH00287"]);
}

/// A keep-alive HTTP/1.1 connection that reports, rather than panics on, a close.
struct KeepAliveConn {
    rd: BufReader<TcpStream>,
    w: TcpStream,
    used: bool,
}

impl KeepAliveConn {
    fn connect(addr: &str) -> KeepAliveConn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        KeepAliveConn {
            w: s.try_clone().unwrap(),
            rd: BufReader::new(s),
            used: false,
        }
    }

    /// GET `path`; Ok(Some((status, server closes))) for a whole response, Ok(None) if
    /// the server closed this reused connection before sending a byte, Err otherwise.
    fn request(&mut self, path: &str, close: bool) -> Result<Option<(u16, bool)>, String> {
        let hdr = if close { "Connection: close\r\n" } else { "" };
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{hdr}\r\n");
        let reused = self.used;
        self.used = true;
        let mut line = String::new();
        let first = self
            .w
            .write_all(req.as_bytes())
            .map_err(|e| e.to_string())
            .and_then(|_| self.rd.read_line(&mut line).map_err(|e| e.to_string()));
        match first {
            Ok(0) | Err(_) if reused && line.is_empty() => return Ok(None),
            Ok(0) => return Err("closed before the status line".into()),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        let status: u16 = line
            .get(9..12)
            .and_then(|c| c.parse().ok())
            .ok_or(format!("status line {line:?}"))?;
        let (mut len, mut closing) = (0usize, false);
        loop {
            let mut h = String::new();
            if self.rd.read_line(&mut h).map_err(|e| e.to_string())? == 0 {
                return Err("closed inside the head".into());
            }
            let h = h.trim_end().to_ascii_lowercase();
            if h.is_empty() {
                break;
            }
            if let Some(v) = h.strip_prefix("content-length:") {
                len = v.trim().parse().map_err(|_| format!("bad {h}"))?;
            }
            if let Some(v) = h.strip_prefix("connection:") {
                closing |= v.trim() == "close";
            }
        }
        let mut body = vec![0; len];
        std::io::Read::read_exact(&mut self.rd, &mut body).map_err(|e| format!("body cut: {e}"))?;
        Ok(Some((status, closing)))
    }
}

// ------------------------------------------------------------------------------------------
// 3. MaxConnectionsPerChild counts connections

/// MaxConnectionsPerChild below ThreadsPerChild: workers waiting in accept reserve
/// connections but do not spend them, so an idle child stays (no churn), and a child under
/// load retires after exactly N connections, in either accept mode.
#[test]
fn max_connections_per_child_smaller_than_threads_per_child() {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: reads rworker's RW00010 exit lines");
        return;
    }
    const N: u64 = 3;
    let opts = ServerOpts::stable() // 2 children x 10 threads
        .max_connections_per_child(N as u32)
        .keep_alive(false);
    let s = Server::start(opts);
    // Not `wait_settled`: its server-status polls are connections, and a child that served
    // N of them retires (under load, once, just after the snapshot below).
    assert!(
        s.wait_threads_started(Duration::from_secs(30)),
        "threads not started"
    );
    let idle = s.children();
    sleep(Duration::from_millis(1500));
    assert_eq!(s.children(), idle, "idle children retired without serving");
    for i in 0..30 {
        let (code, _) = http_get(&s.url("/index.html")).unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert_eq!(code, 200, "GET {i}");
    }
    // A child logs its exit line after it served its last connection and its threads
    // ended, which comes after the client read that response: poll for the lines.
    let served = || -> Vec<u64> {
        s.error_log()
            .lines()
            .filter_map(|l| l.split("exiting: ").nth(1))
            .filter_map(|t| t.split(' ').next()?.parse().ok())
            .collect()
    };
    wait_until(Duration::from_secs(15), || served().len() >= 8);
    let (log, served) = (s.error_log(), served());
    assert!(
        served.len() >= 8,
        "children that retired: {served:?}\n{log}"
    );
    assert!(
        served.iter().all(|&n| n == N),
        "connections per retired child: {served:?}"
    );
}

#[test]
fn max_connections_per_child_counts_keepalive_connections_not_requests() {
    const N: usize = 10;
    const CLIENTS: usize = 3;
    const CONNS: usize = 15;
    const REQS: usize = 4;
    let opts = ServerOpts::default()
        .start_servers(1)
        .threads_per_child(3)
        .max_request_workers(3)
        .spare_threads(1, 1000)
        .keep_alive(true)
        .max_keep_alive_requests(100)
        .max_connections_per_child(N as u32)
        .line(ACCESS_LOG);
    let s = Server::start(opts);
    let first_child = s.children();
    assert_eq!(first_child.len(), 1);

    let addr = s.addr();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|t| {
            let addr = addr.clone();
            thread::spawn(move || {
                let mut errors = Vec::new();
                let (mut reopened, mut retried) = (0, 0);
                for k in 0..CONNS {
                    // One session of REQS requests. When the server announces that it
                    // closes (a retiring child), go on over a new connection; when it
                    // closes an idle reused connection before any byte of the answer
                    // (the keep-alive race every HTTP client handles), retry there.
                    let mut j = 0;
                    let mut c = KeepAliveConn::connect(&addr);
                    let mut r = 0;
                    while r < REQS {
                        let last = r + 1 == REQS;
                        let path = format!("/index.html?conn={t}-{k}-{j}&req={r}");
                        match c.request(&path, last) {
                            Ok(Some((status, closing))) => {
                                if status != 200 {
                                    errors.push(format!("{path}: {status}"));
                                }
                                r += 1;
                                if closing && !last {
                                    reopened += 1;
                                    j += 1;
                                    c = KeepAliveConn::connect(&addr);
                                }
                            }
                            Ok(None) => {
                                retried += 1;
                                j += 1;
                                c = KeepAliveConn::connect(&addr);
                            }
                            Err(e) => {
                                errors.push(format!("{path}: {e}"));
                                break;
                            }
                        }
                    }
                }
                eprintln!("client {t}: {reopened} sessions went on over a new connection after Connection: close, {retried} requests retried after an idle keep-alive close");
                (errors, retried)
            })
        })
        .collect();
    let mut errors = Vec::new();
    let mut retried = 0;
    for c in clients {
        let (e, r) = c.join().expect("client thread");
        errors.extend(e);
        retried += r;
    }
    assert!(errors.is_empty(), "client errors: {errors:?}");

    // Read who served what once every request is logged: a request is logged after its
    // response went out, so the client can be done before the last line is written.
    let logged = || -> Vec<Access> {
        accesses(&s)
            .into_iter()
            .filter(|a| a.uri.contains("conn="))
            .collect()
    };
    wait_until(Duration::from_secs(15), || {
        logged().len() >= CLIENTS * CONNS * REQS
    });
    let log = logged();
    assert_eq!(log.len(), CLIENTS * CONNS * REQS, "access log lines");
    let mut conn_pid: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    let mut per_pid: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
    let mut reqs_per_pid: BTreeMap<i32, usize> = BTreeMap::new();
    for a in &log {
        assert_eq!(a.status, 200, "{a:?}");
        let conn = query_param(&a.uri, "conn").expect("conn id").to_owned();
        assert!(
            a.keepalive_n < REQS as u32,
            "keep-alive request number of {a:?}"
        );
        conn_pid.entry(conn.clone()).or_default().insert(a.pid);
        per_pid.entry(a.pid).or_default().insert(conn);
        *reqs_per_pid.entry(a.pid).or_default() += 1;
    }
    for (conn, pids) in &conn_pid {
        assert_eq!(
            pids.len(),
            1,
            "connection {conn} served by several children {pids:?}"
        );
    }
    let counts: BTreeMap<i32, usize> = per_pid.iter().map(|(p, c)| (*p, c.len())).collect();
    // Let every retiring child finish exiting (slower on a loaded machine): at rest one
    // child is left, the one serving now.
    wait_until(Duration::from_secs(15), || {
        counts.keys().filter(|&&p| pid_alive(p)).count() <= 1 && s.children().len() == 1
    });
    eprintln!("connections per child (in order of pid): {counts:?}; requests {reqs_per_pid:?}");
    let retired: Vec<i32> = counts.keys().copied().filter(|&p| !pid_alive(p)).collect();
    assert!(
        retired.len() >= 3,
        "{} connections at {N} per child, yet only {} children retired: {counts:?}",
        CLIENTS * CONNS,
        retired.len()
    );
    // An idle keep-alive connection of a retiring child may be closed at most once per
    // client and retirement.
    assert!(
        retried <= CLIENTS * (retired.len() + 1),
        "{retried} requests had to be retried for {} retired children",
        retired.len()
    );
    for &p in &retired {
        let n = counts[&p];
        // The first child also accepted the harness's probe connection (no request).
        let probe = usize::from(first_child.contains(&p));
        match s.mpm {
            Mpm::Rworker => assert_eq!(
                n + probe,
                N,
                "child {p} retired after {} connections, MaxConnectionsPerChild is {N}: {counts:?}",
                n + probe
            ),
            // The stock worker decrements its counter after a connection ends, so a child
            // may accept up to ThreadsPerChild more than N.
            _ => assert!(
                (N..=N + 3).contains(&(n + probe)),
                "child {p} retired after {} connections (N = {N}): {counts:?}",
                n + probe
            ),
        }
        assert!(
            reqs_per_pid[&p] > n,
            "child {p}: {} requests on {n} connections: keep-alive was not exercised",
            reqs_per_pid[&p]
        );
    }
    if s.mpm == Mpm::Rworker {
        let log = s.error_log();
        let exits: Vec<&str> = log.lines().filter(|l| l.contains("RW00010")).collect();
        assert!(exits.len() >= retired.len(), "RW00010 lines: {exits:?}");
        for l in exits {
            assert!(
                l.contains(&format!("exiting: {N} connections")),
                "a child retired after a number of connections other than {N}: {l}"
            );
        }
    }
    let live = s.children();
    assert_eq!(live.len(), 1, "process count after rotation: {live:?}");
    // A child that has just exited is reaped as the parent's wait notices (SIGCHLD, or
    // its next one-second tick should the signal land just before the wait): poll.
    let reaped = wait_until(Duration::from_secs(10), || s.zombie_children().is_empty());
    assert!(
        reaped,
        "zombies 10 s after rotation: {:?}",
        s.zombie_children()
    );
    s.assert_no_warnings_in_error_log();
}

/// A child that retires at MaxConnectionsPerChild leaves its share of new clients in the
/// backlog until another child accepts. The stock worker forks one at its next maintenance
/// cycle (up to a second later); rworker's parent forks the replacement as it reaps the
/// child, when the bucket is short of idle threads without it (RW00045).
#[test]
fn a_retired_child_is_replaced_as_it_is_reaped() {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: reads rworker's RW00045 lines");
        return;
    }
    const REQUESTS: usize = 20;
    // One child of 5 threads, MinSpareThreads 5: a live child is enough for maintenance,
    // and every retirement leaves the server short.
    let opts = ServerOpts::default()
        .start_servers(1)
        .threads_per_child(5)
        .max_request_workers(10)
        .spare_threads(5, 1000)
        .keep_alive(false)
        .max_connections_per_child(1);
    let s = Server::start(opts);
    for i in 0..REQUESTS {
        let (code, _) = http_get(&s.url("/index.html")).unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert_eq!(code, 200, "GET {i}");
    }
    // Every request ended a child; the last one's exit line comes after its response.
    let retired = || count(&s.error_log(), "RW00010");
    wait_until(Duration::from_secs(15), || retired() >= REQUESTS);
    // A child logs its exit line before it exits, and the parent reaps it (and logs
    // RW00045) after: poll until every retired child has been reaped.
    let reaped = wait_until(Duration::from_secs(15), || s.zombie_children().is_empty());
    assert!(
        reaped,
        "zombies 15 s after the last exit: {:?}",
        s.zombie_children()
    );
    let log = s.error_log();
    assert!(
        retired() >= REQUESTS,
        "children retired: {}\n{log}",
        retired()
    );
    // Most are replaced as they begin to retire, when they ring the parent's bell
    // (RW00047), the others as they are reaped (RW00045). A maintenance cycle that runs
    // between a child's last accept and its bell or exit forks for it instead; it runs
    // once a second and that window lasts milliseconds, so it takes a few at most.
    let replaced = count(&log, "RW00045") + count(&log, "RW00047");
    assert!(
        replaced >= REQUESTS / 2,
        "{replaced} of {REQUESTS} retired children were replaced as they retired or were reaped\n{log}"
    );
    s.assert_no_warnings_in_error_log();
}

/// A child that reaches MaxConnectionsPerChild stops accepting but may serve its last
/// connections for long (a download, a keep-alive client): it rings the parent's bell, and
/// where that leaves no idle thread (here it was the only child) the parent forks its
/// replacement then (RW00047), not at its next maintenance cycle or once the child exits.
/// Here the child's one connection is a download the client does not read, so the child
/// cannot exit; the stock worker's limit counts finished connections, so it would have
/// accepted on.
#[test]
fn a_retiring_child_that_still_serves_is_replaced_at_once() {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: reads rworker's RW00047 line");
        return;
    }
    let opts = ServerOpts::default()
        .start_servers(1)
        .threads_per_child(5)
        .max_request_workers(10)
        .spare_threads(5, 1000)
        .max_connections_per_child(1)
        .line("SendBufferSize 65536");
    let s = Server::start(opts);
    // The harness's readiness probe was the first child's one connection: wait until that
    // child is gone and one fresh child waits for clients.
    let settled = wait_until(Duration::from_secs(20), || {
        count(&s.error_log(), "RW00010") >= 1
            && s.zombie_children().is_empty()
            && s.children().len() == 1
    });
    assert!(settled, "children: {:?}\n{}", s.children(), s.error_log());
    let server = s.children()[0];
    let (exits, rings) = (
        count(&s.error_log(), "RW00010"),
        count(&s.error_log(), "RW00047"),
    );
    let mut c = RawConn::connect_with_rcvbuf(&s.addr(), 65536);
    c.send(b"GET /64m.bin HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let (status, _) = c.read_head();
    assert_eq!(status, 200);
    // That child now retires with a download it cannot finish while we do not read.
    let replaced = wait_until(Duration::from_secs(20), || {
        count(&s.error_log(), "RW00047") > rings
    });
    assert!(replaced, "no new RW00047 in 20 s\n{}", s.error_log());
    assert!(pid_alive(server), "the retiring child {server} exited");
    assert_eq!(
        count(&s.error_log(), "RW00010"),
        exits,
        "a child exited meanwhile, so the replacement may have come from its reaping\n{}",
        s.error_log()
    );
    // The replacement serves.
    let (code, _) = http_get(&s.url("/index.html")).expect("GET beside the download");
    assert_eq!(code, 200);
    drop(c);
    s.assert_no_warnings_in_error_log();
}

/// Voluntary context switches of every thread of `pid` so far (each is a wake-up after a
/// sleep), or None once it is gone.
fn wake_ups(pid: i32) -> Option<u64> {
    let mut sum = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let status = std::fs::read_to_string(task.ok()?.path().join("status")).ok()?;
        sum += status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
            .trim()
            .parse::<u64>()
            .ok()?;
    }
    Some(sum)
}

/// In a child's last ThreadsPerChild connections more workers are idle than connections are
/// left to accept; those without one sleep until one comes back or the child stops. They
/// once looked again every 10 ms: 496 wake-ups a second in a quiet child of 25 threads
/// with MaxConnectionsPerChild 30 after 10 connections.
#[test]
fn a_quiet_child_near_its_max_connections_per_child_sleeps() {
    let opts = ServerOpts::default()
        .start_servers(1)
        .threads_per_child(25)
        .max_request_workers(25)
        .spare_threads(1, 1000)
        .keep_alive(false)
        .max_connections_per_child(30);
    let s = Server::start(opts);
    for i in 0..10 {
        let (code, _) = http_get(&s.url("/index.html")).unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert_eq!(code, 200, "GET {i}");
    }
    let children = s.children();
    assert_eq!(children.len(), 1, "{children:?}");
    let child = *children.first().unwrap();
    let before = wake_ups(child).expect("the child lives");
    sleep(Duration::from_secs(3));
    let after = wake_ups(child).expect("the child lives");
    // A sleeping thread is not woken by other processes' load: the count is the child's
    // own timed wake-ups (none in either mode), so 0 is expected; the stock worker's
    // listener wakes once a second or so.
    assert!(
        after - before < 30,
        "a quiet child woke {} times in 3 s",
        after - before
    );
    // And the workers that slept serve again when the child is used.
    for i in 10..40 {
        let (code, _) = http_get(&s.url("/index.html")).unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert_eq!(code, 200, "GET {i}");
    }
    s.assert_no_warnings_in_error_log();
}

// ------------------------------------------------------------------------------------------
// 4. kill -9 of a child under load

#[test]
fn killed_child_under_load_is_replaced_at_once_and_others_see_no_error() {
    const CONNS: usize = 16;
    let opts = ServerOpts::stable()
        .keep_alive(true)
        .max_keep_alive_requests(0)
        .line("KeepAliveTimeout 5")
        .line(ACCESS_LOG);
    let s = Server::start(opts);
    assert!(s.wait_settled(Duration::from_secs(10)), "did not settle");
    let before = s.children();
    assert_eq!(before.len(), 2);

    // 16 long keep-alive connections; a child holds at most 10, so both children serve.
    let stop = Arc::new(AtomicBool::new(false));
    let addr = s.addr();
    let clients: Vec<_> = (0..CONNS)
        .map(|i| {
            let (addr, stop) = (addr.clone(), stop.clone());
            thread::spawn(move || -> (usize, Option<String>) {
                let s = match TcpStream::connect(&addr) {
                    Ok(s) => s,
                    Err(e) => return (0, Some(format!("connect: {e}"))),
                };
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut w = s.try_clone().unwrap();
                let mut rd = BufReader::new(s);
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let req = format!(
                        "GET /index.html?conn={i}&req={n} HTTP/1.1\r\nHost: localhost\r\n\r\n"
                    );
                    if let Err(e) = w.write_all(req.as_bytes()) {
                        return (n, Some(format!("write: {e}")));
                    }
                    let mut line = String::new();
                    match rd.read_line(&mut line) {
                        Ok(0) => return (n, Some("closed".into())),
                        Err(e) => return (n, Some(format!("read: {e}"))),
                        Ok(_) => {}
                    }
                    if !line.starts_with("HTTP/1.1 200") {
                        return (n, Some(format!("status {line:?}")));
                    }
                    let mut len = 0;
                    loop {
                        let mut h = String::new();
                        if rd.read_line(&mut h).unwrap_or(0) == 0 {
                            return (n, Some("closed in head".into()));
                        }
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if let Err(e) = std::io::Read::read_exact(&mut rd, &mut body) {
                        return (n, Some(format!("body: {e}")));
                    }
                    n += 1;
                }
                (n, None)
            })
        })
        .collect();

    // Which child serves which connection.
    let mapped = wait_until(Duration::from_secs(10), || {
        let a = accesses(&s);
        (0..CONNS).all(|i| {
            a.iter()
                .any(|a| query_param(&a.uri, "conn") == Some(&i.to_string()))
        })
    });
    assert!(mapped, "not every client connection was served");
    sleep(Duration::from_millis(500));
    let mut conn_pid: BTreeMap<usize, i32> = BTreeMap::new();
    for a in accesses(&s) {
        let Some(c) = query_param(&a.uri, "conn") else {
            continue; // the harness's server-status requests
        };
        let c: usize = c.parse().unwrap();
        let prev = conn_pid.insert(c, a.pid);
        assert!(
            prev.is_none() || prev == Some(a.pid),
            "connection {c} moved"
        );
    }
    let mut by_pid: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (&c, &p) in &conn_pid {
        by_pid.entry(p).or_default().push(c);
    }
    assert_eq!(by_pid.len(), 2, "connections per child: {by_pid:?}");
    let victim = *by_pid.iter().max_by_key(|(_, v)| v.len()).unwrap().0;
    let survivor = *by_pid.keys().find(|&&p| p != victim).unwrap();

    let t0 = Instant::now();
    // SAFETY: kill(2) on a child pid of this test's own server.
    unsafe { libc::kill(victim, libc::SIGKILL) };
    let replaced = wait_until(Duration::from_secs(5), || {
        let now = s.children();
        !now.contains(&victim) && now.len() == 2
    });
    let took = t0.elapsed();
    assert!(replaced, "not replaced: children {:?}", s.children());
    eprintln!(
        "victim {victim} ({} conns) replaced after {took:?}",
        by_pid[&victim].len()
    );
    // At once: the parent reaps within its 1 s wait and forks at once, rather than at a
    // later maintenance cycle. 0.42 s measured at load average 4-6 on 2 cores; the
    // parent needs only a few ms of CPU for it.
    assert!(
        took < Duration::from_secs(2),
        "replacement took {took:?} (a signalled death is respawned at once)"
    );
    sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    let results: Vec<(usize, Option<String>)> =
        clients.into_iter().map(|c| c.join().unwrap()).collect();

    for &c in &by_pid[&survivor] {
        let (n, err) = &results[c];
        assert!(
            err.is_none(),
            "connection {c} of the surviving child {survivor} failed after {n} requests: {err:?}"
        );
    }
    let cut = by_pid[&victim]
        .iter()
        .filter(|&&c| results[c].1.is_some())
        .count();
    assert!(
        cut > 0,
        "no connection of the killed child noticed (was it under load?)"
    );
    // The survivor's clients kept going after the kill.
    let after_kill = accesses(&s).iter().filter(|a| a.pid == survivor).count();
    assert!(after_kill > 0);

    assert!(
        wait_until(Duration::from_secs(10), || s.zombie_children().is_empty()),
        "zombies: {:?}",
        s.zombie_children()
    );
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "scoreboard did not settle after the kill: {:?}",
        s.try_server_status_auto()
    );
    let st = s.server_status_auto();
    assert_eq!(
        st.busy() + st.idle(),
        20,
        "scoreboard counts after the kill"
    );
    let r = run_ab(&["-q", "-n", "2000", "-c", "10"], &s.url("/index.html"));
    r.assert_all_ok(2000);
    assert!(crash_lines(&s.error_log()).is_empty(), "{}", s.error_log());
    s.assert_no_warnings_in_error_log();
}

// ------------------------------------------------------------------------------------------
// 5. Restart storm

#[test]
fn restart_storm_under_load() {
    const RESTARTS: usize = 20;
    let opts = ServerOpts::default()
        .keep_alive(false)
        .graceful_shutdown_timeout(5);
    let s = Server::start(opts);
    let parent = s.parent_pid();
    let gen0 = s.server_status_auto().num("ParentServerMPMGeneration");

    let stop = Arc::new(AtomicBool::new(false));
    let url = s.url("/index.html");
    let load = {
        let stop = stop.clone();
        thread::spawn(move || {
            let (mut complete, mut failed, mut non_2xx, mut runs) = (0, 0, 0, 0);
            let mut outputs = String::new();
            while !stop.load(Ordering::SeqCst) {
                let r = run_ab(&["-q", "-r", "-n", "2000", "-c", "10"], &url);
                complete += r.complete;
                failed += r.failed;
                non_2xx += r.non_2xx;
                runs += 1;
                if r.failed > 0 || r.non_2xx > 0 {
                    outputs.push_str(&r.output);
                }
            }
            (complete, failed, non_2xx, runs, outputs)
        })
    };
    sleep(Duration::from_millis(500));

    let mut old_children = BTreeSet::new();
    let mut rss_after_first = 0;
    for i in 0..RESTARTS {
        old_children.extend(s.children());
        s.graceful();
        sleep(Duration::from_millis(500));
        // The next restart goes once this one took effect (the parent counted the new
        // generation): two SIGUSR1 sent before the parent handles the first are one pending
        // signal, so a parent slowed down by a busy machine would see fewer restarts than
        // were sent, and the counts below would be wrong for no fault of the server.
        let want = gen0 + i as u64 + 1;
        let took_effect = wait_until(Duration::from_secs(15), || {
            s.try_server_status_auto()
                .is_ok_and(|st| st.num("ParentServerMPMGeneration") >= want)
        });
        assert!(
            took_effect,
            "restart {} did not take effect within 15 s:\n{}",
            i + 1,
            s.error_log()
        );
        assert_eq!(
            s.pid_from_pidfile(),
            Some(parent),
            "the parent changed at restart {}",
            i + 1
        );
        assert!(pid_alive(parent), "parent gone at restart {}", i + 1);
        if i == 0 {
            rss_after_first = rss_kb(parent).expect("parent RSS");
        }
    }
    let storm_end = Instant::now();
    let rss_after_last = rss_kb(parent).expect("parent RSS");
    sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::SeqCst);
    let (complete, failed, non_2xx, runs, outputs) = load.join().unwrap();
    eprintln!(
        "{runs} ab runs, {complete} requests, {failed} failed, {non_2xx} non-2xx; parent RSS {rss_after_first} kB after restart 1, {rss_after_last} kB after {RESTARTS}"
    );
    assert!(complete > 0, "no load");
    assert_eq!(failed, 0, "failed requests without keep-alive:\n{outputs}");
    assert_eq!(non_2xx, 0, "non-2xx responses:\n{outputs}");

    let want = gen0 + RESTARTS as u64;
    let counted = wait_until(Duration::from_secs(15), || {
        s.try_server_status_auto()
            .is_ok_and(|st| st.num("ParentServerMPMGeneration") == want)
    });
    assert!(
        counted,
        "ParentServerMPMGeneration {:?}, expected {want}",
        s.try_server_status_auto()
            .map(|st| st.num("ParentServerMPMGeneration"))
    );
    let grown = rss_after_last as f64 / rss_after_first as f64;
    assert!(
        (0.9..=1.1).contains(&grown),
        "parent RSS {rss_after_first} kB after the first restart, {rss_after_last} kB after {RESTARTS}"
    );

    // No child of an old generation outlives GracefulShutdownTimeout (5 s) by much: they
    // only have short requests to finish. 15 s after the storm leaves a busy machine room
    // to end their threads, and still fails a child that stays.
    let deadline = storm_end + Duration::from_secs(15);
    let gone = wait_until(deadline.saturating_duration_since(Instant::now()), || {
        old_children.iter().all(|&p| !pid_alive(p))
    }) || old_children.iter().all(|&p| !pid_alive(p));
    let left: Vec<_> = old_children.iter().filter(|&&p| pid_alive(p)).collect();
    assert!(
        gone,
        "old-generation children still alive 15 s after the storm: {left:?}"
    );
    assert!(
        wait_until(Duration::from_secs(10), || s.zombie_children().is_empty()),
        "zombies: {:?}",
        s.zombie_children()
    );
    assert_eq!(s.pid_from_pidfile(), Some(parent));
    let log = s.error_log();
    assert!(
        crash_lines(&log).is_empty(),
        "crash in the error log:\n{log}"
    );
    assert_eq!(count(&log, "AH00297"), RESTARTS, "graceful restarts logged");
    s.assert_no_warnings_in_error_log();
}

// ------------------------------------------------------------------------------------------
// 6. Signals at odd moments

/// A small xorshift generator: the delays need not be good random numbers, only varied.
struct XorShift(u64);

impl XorShift {
    fn seeded() -> XorShift {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        XorShift(t | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn signals_right_after_start_never_crash_or_hang() {
    const ROUNDS: usize = 50;
    let s = Server::new(ServerOpts::stable());
    let mut rng = XorShift::seeded();
    eprintln!("seed {}", rng.0);
    let signals = [
        (libc::SIGUSR1, "graceful"),
        (libc::SIGHUP, "restart"),
        (libc::SIGTERM, "stop"),
    ];
    let t_all = Instant::now();
    let (mut lost_stops, mut early_deaths) = (0, 0);
    for round in 0..ROUNDS {
        let (sig, what) = signals[round % signals.len()];
        let delay = Duration::from_millis(rng.next() % 51);
        let ctx = || format!("round {round} ({what} {delay:?} after start)");
        assert!(
            s.processes().is_empty(),
            "{}: processes left from the previous round: {:?}",
            ctx(),
            s.processes()
        );
        if s.pidfile().exists() {
            let _ = std::fs::remove_file(s.pidfile());
        }
        let out = s.ctl(&["-k", "start"]);
        assert!(
            out.status.success(),
            "{}: -k start: {}\n{}\n{}",
            ctx(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            s.error_log()
        );
        sleep(delay);
        let mut pid = None;
        // The parent writes its pidfile after -k start returned, later on a busy machine:
        // polled, generously (the signal then lands later than `delay`, still early).
        let found = wait_until(Duration::from_secs(10), || {
            pid = s.pid_from_pidfile().filter(|&p| s.owns_pid(p));
            pid.is_some()
        });
        assert!(found, "{}: no pidfile 10 s after start", ctx());
        let pid = pid.unwrap();
        // SAFETY: kill(2) on the pid in our own pidfile, checked to run our config.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "{}: kill", ctx());

        if sig != libc::SIGTERM {
            let serving = wait_until(Duration::from_secs(15), || {
                http_get(&s.url("/")).is_ok_and(|(c, _)| c == 200)
            });
            if !serving && s.mpm != Mpm::Rworker && !pid_alive(pid) {
                // The stock MPMs write the pidfile before installing their handlers: a
                // signal in between meets the default action and the parent dies.
                eprintln!(
                    "{}: {} parent died of the early signal",
                    ctx(),
                    s.mpm.name()
                );
                early_deaths += 1;
                let _ = std::fs::remove_file(s.pidfile());
                continue;
            }
            assert!(
                serving,
                "{}: not serving 15 s later:\n{}",
                ctx(),
                s.error_log()
            );
            assert_eq!(
                s.pid_from_pidfile(),
                Some(pid),
                "{}: the parent changed",
                ctx()
            );
            let out = s.ctl(&["-k", "stop"]);
            assert!(out.status.success(), "{}: -k stop: {}", ctx(), out.status);
        }
        // A lost stop never ends: 15 s tells it from a slow one on a busy machine.
        let mut gone = wait_until(Duration::from_secs(15), || s.processes().is_empty());
        if !gone && s.mpm != Mpm::Rworker {
            // The stock MPMs lose a SIGTERM that lands while the parent reaps the children
            // of a hard restart (unixd clears the pending flags with pconf right after):
            // the parent then runs on. rworker must not; for the reference, note it and
            // send the stop again.
            eprintln!(
                "{}: {} lost the -k stop sent during a restart; sending it again",
                ctx(),
                s.mpm.name()
            );
            lost_stops += 1;
            let _ = s.ctl(&["-k", "stop"]);
            gone = wait_until(Duration::from_secs(15), || s.processes().is_empty());
        }
        assert!(
            gone,
            "{}: still running 15 s after stop (pidfile {:?}):\n{}\n{}",
            ctx(),
            s.pid_from_pidfile(),
            describe_processes(&s.processes()),
            s.error_log()
        );
        if s.mpm != Mpm::Rworker && s.pidfile().exists() && !pid_alive(pid) {
            eprintln!(
                "{}: {} parent died of the early signal",
                ctx(),
                s.mpm.name()
            );
            early_deaths += 1;
            let _ = std::fs::remove_file(s.pidfile());
        }
        assert!(!s.pidfile().exists(), "{}: pidfile left behind", ctx());
        let crashes = crash_lines(&s.error_log());
        assert!(crashes.is_empty(), "{}: {crashes:?}", ctx());
    }
    eprintln!(
        "{ROUNDS} rounds in {:?}; stops lost by the parent: {lost_stops}; parents killed by an early signal: {early_deaths}",
        t_all.elapsed()
    );
    s.assert_no_warnings_in_error_log();
}

// ------------------------------------------------------------------------------------------
// 7. Idle means idle

#[test]
fn idle_server_uses_almost_no_cpu() {
    let s = Server::start(ServerOpts::default().keep_alive(false));
    // The same counters must see the load, or a zero below would prove nothing.
    let busy0: u64 = s.processes().iter().filter_map(|&p| cpu_ticks(p)).sum();
    let r = run_ab(&["-q", "-n", "5000", "-c", "20"], &s.url("/index.html"));
    assert_eq!((r.complete, r.failed), (5000, 0), "{}", r.output);
    let busy1: u64 = s.processes().iter().filter_map(|&p| cpu_ticks(p)).sum();
    assert!(
        busy1 > busy0,
        "5000 requests cost no CPU ticks: counters broken"
    );
    sleep(Duration::from_secs(3));
    let procs = set_of(&s.processes());
    assert!(
        procs.contains(&s.parent_pid()) && procs.len() >= 3,
        "{procs:?}"
    );
    let ticks = |p: &BTreeSet<i32>| -> u64 { p.iter().filter_map(|&p| cpu_ticks(p)).sum() };
    let t0 = ticks(&procs);
    sleep(Duration::from_secs(60));
    let now = set_of(&s.processes());
    assert_eq!(procs, now, "processes changed while idle");
    let used = (ticks(&procs) - t0) as f64 / clk_tck() as f64;
    eprintln!(
        "{} processes used {used:.3} s of CPU in 60 s of idling",
        procs.len()
    );
    // The CPU an idle server takes is its timed wake-ups, which a busy machine does not
    // multiply: 0.010 s measured with four CPU hogs beside it (load average 6-20), 20
    // times under the bound.
    assert!(used < 0.2, "idle server used {used:.3} s of CPU in 60 s");
    s.assert_no_warnings_in_error_log();
}

// ------------------------------------------------------------------------------------------
// 8. Bad configuration

/// `AHnnnnn` ids in `text`.
fn ah_ids(text: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    (0..b.len().saturating_sub(6))
        .filter(|&i| {
            b[i] == b'A' && b[i + 1] == b'H' && b[i + 2..i + 7].iter().all(u8::is_ascii_digit)
        })
        .map(|i| text[i..i + 7].to_owned())
        .collect()
}

fn config_test(mpm: Mpm, opts: &ServerOpts) -> (bool, String) {
    let s = Server::new_for(mpm, opts.clone());
    let out = s.ctl(&["-t"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// (name, config, scoreboard length, ThreadsPerChild) after the stock worker's clamps.
fn bad_configs() -> Vec<(&'static str, ServerOpts, usize, usize)> {
    let base = || {
        ServerOpts::default()
            .spare_threads(1, 1000)
            .start_servers(1)
    };
    let all = |v: &str| {
        let mut o = base();
        for d in [
            "ServerLimit",
            "ThreadLimit",
            "StartServers",
            "MinSpareThreads",
            "MaxSpareThreads",
            "ThreadsPerChild",
            "MaxRequestWorkers",
        ] {
            o = o.line(format!("{d} {v}"));
        }
        o
    };
    vec![
        (
            "ThreadsPerChild above ThreadLimit",
            base()
                .thread_limit(64)
                .threads_per_child(100)
                .max_request_workers(150),
            128,
            64,
        ),
        (
            "MaxRequestWorkers below ThreadsPerChild",
            base().threads_per_child(25).max_request_workers(10),
            25,
            25,
        ),
        (
            "MaxRequestWorkers not a multiple of ThreadsPerChild",
            base().threads_per_child(25).max_request_workers(60),
            50,
            25,
        ),
        (
            "MaxRequestWorkers above ServerLimit",
            base()
                .server_limit(2)
                .threads_per_child(10)
                .max_request_workers(100),
            20,
            10,
        ),
        (
            "ServerLimit above the compile-time limit",
            base()
                .line("ServerLimit 30000")
                .thread_limit(1)
                .threads_per_child(1)
                .max_request_workers(2),
            2,
            1,
        ),
        ("every limit zero", all("0"), 1, 1),
        ("every limit negative", all("-5"), 1, 1),
    ]
}

#[test]
fn bad_values_are_clamped_with_the_stock_workers_warnings() {
    let mpm = Mpm::under_test();
    let mut differ = Vec::new();
    for (name, opts, sb_len, tpc) in bad_configs() {
        let (ok, ours) = config_test(mpm, &opts);
        let (stock_ok, stock) = config_test(Mpm::Worker, &opts);
        assert!(stock_ok, "{name}: stock -t failed:\n{stock}");
        assert!(ok, "{name}: {} -t failed:\n{ours}", mpm.name());
        assert!(ours.contains("Syntax OK"), "{name}:\n{ours}");
        assert!(
            !ah_ids(&stock).is_empty(),
            "{name}: the stock worker does not warn"
        );
        if ah_ids(&ours) != ah_ids(&stock) {
            differ.push(format!(
                "== {name}: {} {:?}, stock {:?}\n{}:\n{ours}stock worker:\n{stock}",
                mpm.name(),
                ah_ids(&ours),
                ah_ids(&stock),
                mpm.name()
            ));
        }

        // The clamped values are the ones in effect.
        let s = Server::start(opts.clone());
        let st = s.server_status_auto();
        assert_eq!(
            st.scoreboard().len(),
            sb_len,
            "{name}: scoreboard {:?}",
            st.scoreboard()
        );
        let kids = s.children();
        assert!(!kids.is_empty(), "{name}: no children");
        let tasks = tpc + 1 + s.has_listener_thread() as usize;
        let settled = wait_until(Duration::from_secs(10), || {
            s.children().iter().all(|&c| task_count(c) == tasks)
        });
        assert!(
            settled,
            "{name}: expected {tasks} tasks per child (ThreadsPerChild {tpc}), found {:?}",
            s.children()
                .iter()
                .map(|&c| task_count(c))
                .collect::<Vec<_>>()
        );
        assert!(
            crash_lines(&s.error_log()).is_empty(),
            "{name}: {}",
            s.error_log()
        );
    }
    assert!(
        differ.is_empty(),
        "-t warnings differ from the stock worker's (AH ids):\n{}",
        differ.join("\n")
    );
}

#[test]
fn negative_graceful_shutdown_timeout_is_warned_about() {
    if skip_unless_rworker("negative_graceful_shutdown_timeout_is_warned_about") {
        return;
    }
    // The core takes any number; negative cuts a graceful stop at once (the stock MPMs'
    // reading, silent there): rworker says so, and 0 stays "no limit" without a word.
    let (ok, text) = config_test(
        Mpm::Rworker,
        &ServerOpts::default().line("GracefulShutdownTimeout -3"),
    );
    assert!(ok, "GracefulShutdownTimeout -3 failed -t:\n{text}");
    assert!(
        text.contains("RW00043: GracefulShutdownTimeout of -3 is negative"),
        "{text}"
    );
    let (ok, text) = config_test(
        Mpm::Rworker,
        &ServerOpts::default().line("GracefulShutdownTimeout 0"),
    );
    assert!(ok && !text.contains("RW00043"), "{text}");
}

#[test]
fn non_numeric_values_are_refused_by_rworker() {
    let mpm = Mpm::under_test();
    for d in [
        "ThreadsPerChild",
        "MaxRequestWorkers",
        "ServerLimit",
        "StartServers",
    ] {
        let opts = ServerOpts::default().line(format!("{d} abc"));
        let (ok, text) = config_test(mpm, &opts);
        if mpm == Mpm::Rworker {
            assert!(!ok, "{d} abc: -t succeeded:\n{text}");
            assert!(
                text.contains(&format!("{d} takes an integer argument, not 'abc'")),
                "{d} abc:\n{text}"
            );
            // And start refuses, with the message, leaving nothing running.
            let s = Server::new(opts.clone());
            let out = s.ctl(&["-k", "start"]);
            let all = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.status.success(), "{d} abc: -k start succeeded");
            assert!(all.contains("takes an integer argument"), "{all}");
            sleep(Duration::from_millis(300));
            assert!(
                s.processes().is_empty(),
                "{d} abc: processes {:?}",
                s.processes()
            );
        } else {
            // The stock worker atoi()s "abc" to 0 and clamps, as for 0.
            assert!(ok, "{d} abc on {}: {text}", mpm.name());
            let (_, zero) = config_test(mpm, &ServerOpts::default().line(format!("{d} 0")));
            assert_eq!(ah_ids(&text), ah_ids(&zero), "{d} abc vs 0");
        }
    }
}

#[test]
fn rworker_queue_directive() {
    if skip_unless_rworker("rworker_queue_directive") {
        return;
    }
    let (ok, text) = config_test(
        Mpm::Rworker,
        &ServerOpts::default().line("RWorkerQueue bogus"),
    );
    assert!(!ok, "RWorkerQueue bogus passed -t:\n{text}");
    assert!(
        text.contains("RWorkerQueue takes 'atomic' or 'apr', not 'bogus'"),
        "{text}"
    );
    let s = Server::start(ServerOpts::stable().line("RWorkerQueue apr"));
    // Fewer clients than the 20 workers, but AH00286 (MaxRequestWorkers reached) may still
    // come, and is then the stock worker's correct warning too, not a fault of the queue
    // under test: a client's previous connection holds a worker in lingering close while
    // its next one is served, and on a starved machine (CI, 2 cores with both busy) those
    // closes wait for the CPU, so every worker can be busy at a census (seen once in the
    // park pass, 2026-12-05).
    let r = run_ab(&["-q", "-n", "5000", "-c", "10"], &s.url("/index.html"));
    r.assert_all_ok(5000);
    assert!(
        s.error_log().contains("Apr queue"),
        "AH00294 does not name the apr queue:\n{}",
        s.error_log()
    );
    s.assert_no_warnings_in_error_log_except(&["AH00286"]);
}

#[test]
fn server_and_thread_limit_changes_wait_for_a_full_stop() {
    let first = ServerOpts::default()
        .server_limit(4)
        .thread_limit(16)
        .threads_per_child(8)
        .max_request_workers(32)
        .spare_threads(1, 1000)
        .start_servers(1);
    let mut s = Server::start(first);
    assert_eq!(s.server_status_auto().scoreboard().len(), 32);
    let gen = s.server_status_auto().num("ParentServerMPMGeneration");
    // Taken at face value this would be 8 × 20 = 160 slots; with the old limits kept,
    // ThreadsPerChild is clamped to 16 and MaxRequestWorkers to 4 × 16.
    let second = ServerOpts::default()
        .server_limit(8)
        .thread_limit(32)
        .threads_per_child(20)
        .max_request_workers(160)
        .spare_threads(1, 1000)
        .start_servers(1);
    s.rewrite_conf(second);
    s.graceful();
    let restarted = wait_until(Duration::from_secs(20), || {
        s.try_server_status_auto()
            .is_ok_and(|st| st.num("ParentServerMPMGeneration") == gen + 1)
    });
    assert!(restarted, "no graceful restart:\n{}", s.error_log());
    let log = s.error_log();
    eprintln!("{log}");
    // The stock worker's ids for these warnings on a restart (its -t / start-up ids differ):
    // AH00304 ServerLimit and AH00309 ThreadLimit changed, AH00311 ThreadsPerChild above
    // ThreadLimit, AH00319 MaxRequestWorkers above ServerLimit.
    let warned: BTreeSet<String> = log
        .lines()
        .filter(|l| log_level(l) == Some("warn"))
        .flat_map(ah_ids)
        .collect();
    let stock: BTreeSet<String> = ["AH00304", "AH00309", "AH00311", "AH00319"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(warned, stock, "warnings after the graceful restart:\n{log}");
    assert!(log.contains("not allowed during restart"), "{log}");
    let settled = wait_until(Duration::from_secs(10), || {
        let kids = s.children();
        !kids.is_empty()
            && kids
                .iter()
                .all(|&c| task_count(c) == 16 + 1 + s.has_listener_thread() as usize)
    });
    assert!(
        settled,
        "ThreadsPerChild not clamped to the old ThreadLimit 16: tasks {:?}",
        s.children()
            .iter()
            .map(|&c| task_count(c))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        s.server_status_auto().scoreboard().len(),
        64,
        "old ServerLimit 4 × ThreadsPerChild 16"
    );
    assert!(crash_lines(&log).is_empty(), "{log}");
}

// ------------------------------------------------------------------------------------------
// 9. Several listeners

fn every_child_serves_both_ports(extra: Option<&str>) {
    let port2 = free_port();
    let mut opts = ServerOpts::default()
        .start_servers(3)
        .threads_per_child(2)
        .max_request_workers(6)
        .spare_threads(1, 1000)
        .keep_alive(false)
        .line(format!("Listen 127.0.0.1:{port2}"))
        .line(ACCESS_LOG);
    if let Some(l) = extra {
        opts = opts.line(l);
    }
    let s = Server::start(opts);
    assert!(
        wait_until(Duration::from_secs(15), || s.children().len() == 3),
        "children {:?}",
        s.children()
    );
    let kids = set_of(&s.children());
    let url2 = format!("http://127.0.0.1:{port2}/index.html");
    let ab1 = spawn_ab(&["-q", "-n", "3000", "-c", "6"], &s.url("/index.html"));
    let ab2 = spawn_ab(&["-q", "-n", "3000", "-c", "6"], &url2);
    for ab in [ab1, ab2] {
        let r = parse_ab(ab.wait_with_output().unwrap());
        r.assert_all_ok(3000);
    }
    let log = accesses(&s);
    let mut ports: BTreeMap<i32, BTreeMap<u16, usize>> = BTreeMap::new();
    for a in &log {
        *ports.entry(a.pid).or_default().entry(a.port).or_default() += 1;
    }
    eprintln!("requests per child and port: {ports:?}");
    assert_eq!(set_of(&s.children()), kids, "children changed");
    for k in &kids {
        let p = ports.get(k).cloned().unwrap_or_default();
        assert!(
            p.get(&s.port).is_some_and(|&n| n > 0) && p.get(&port2).is_some_and(|&n| n > 0),
            "child {k} did not serve both ports: {ports:?}"
        );
    }
    // Under this load a bucket may run out of free slots (the stock worker then logs
    // AH00288 "scoreboard is full" with 2 buckets): load warnings, not failures.
    s.assert_no_warnings_in_error_log_except(&["AH00286", "AH00287", "AH00288"]);
    if s.mpm == Mpm::Rworker {
        let el = s.error_log();
        assert!(el.contains("Accept mutex: mpm-accept"), "{el}");
    }
}

#[test]
fn second_listen_port_is_served_by_every_child() {
    every_child_serves_both_ports(None);
}

#[test]
fn listen_cores_buckets_ratio_with_two_ports() {
    every_child_serves_both_ports(Some("ListenCoresBucketsRatio 1"));
}

// ------------------------------------------------------------------------------------------
// 10. Memory and descriptors against the stock worker

struct MemResult {
    rss_before: Vec<u64>,
    /// After the first of the two measured runs.
    rss_between: Vec<u64>,
    rss_after: Vec<u64>,
    fds_before: Vec<usize>,
    fds_after: Vec<usize>,
}

/// `children` x `50 / children` threads, 50 keep-alive clients.
fn mem_run(mpm: Mpm, requests: u64, children: usize) -> MemResult {
    let opts = ServerOpts::default()
        .start_servers(children as u32)
        .threads_per_child(50 / children as u32)
        .max_request_workers(50)
        .spare_threads(1, 1000)
        .keep_alive(true)
        .max_keep_alive_requests(0)
        // The warm-up below outlasts it twice, so that what a busy keep-alive connection
        // uses only once its first timeout entry comes due is in "before" too.
        .line("KeepAliveTimeout 1");
    // Server::start takes the MPM from the environment: start this one by hand.
    let s = Server::new_for(mpm, opts);
    let out = s.ctl(&["-k", "start"]);
    assert!(out.status.success(), "{mpm:?} start: {out:?}");
    assert!(s.wait_listening(Duration::from_secs(10)));
    assert!(wait_until(Duration::from_secs(10), || s
        .pid_from_pidfile()
        .is_some_and(|p| s.owns_pid(p))));
    let parent = s.pid_from_pidfile().unwrap();
    let kids = || -> Vec<i32> {
        children_of(parent)
            .into_iter()
            .filter(|&(_, st)| st != 'Z')
            .map(|(p, _)| p)
            .collect()
    };
    let url = s.url("/index.html");
    let warm = run_ab(&["-q", "-k", "-t", "3", "-n", "10000000", "-c", "50"], &url);
    assert_eq!(warm.failed, 0, "{}", warm.output);
    sleep(Duration::from_millis(500));
    let k0 = kids();
    assert_eq!(k0.len(), children, "{mpm:?} children");
    let rss_before = k0.iter().map(|&p| rss_kb(p).unwrap()).collect();
    let fds_before = k0.iter().map(|&p| fd_count(p)).collect();
    let n = requests.to_string();
    let measured_run = || {
        let t = Instant::now();
        let r = run_ab(&["-q", "-k", "-n", &n, "-c", "50"], &url);
        r.assert_all_ok(requests);
        eprintln!("{mpm:?}: {requests} requests in {:?}", t.elapsed());
        sleep(Duration::from_millis(1000));
        assert_eq!(kids(), k0, "{mpm:?}: children changed under load");
    };
    measured_run();
    let rss_between = k0.iter().map(|&p| rss_kb(p).unwrap()).collect();
    measured_run();
    let rss_after = k0.iter().map(|&p| rss_kb(p).unwrap()).collect();
    let fds_after = k0.iter().map(|&p| fd_count(p)).collect();
    assert!(crash_lines(&s.error_log()).is_empty());
    MemResult {
        rss_before,
        rss_between,
        rss_after,
        fds_before,
        fds_after,
    }
}

#[test]
fn memory_after_200k_requests_matches_the_stock_worker() {
    const REQUESTS: u64 = 200_000;
    // Parking, a connection's pool stays with it, and the kernel picks the child that
    // accepts: two runs of ab spread their 50 connections differently over two children,
    // so a child's memory follows how many it got (pools made, freed memory kept by
    // malloc), not the request count. One child of 50 threads (for both MPMs) measures
    // what this test is for.
    let children = if parking_under_test() { 1 } else { 2 };
    let ours = mem_run(Mpm::under_test(), REQUESTS, children);
    let stock = mem_run(Mpm::Worker, REQUESTS, children);
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
    eprintln!(
        "{}: RSS kB before {:?} between {:?} after {:?}, fds {:?} -> {:?}",
        Mpm::under_test().name(),
        ours.rss_before,
        ours.rss_between,
        ours.rss_after,
        ours.fds_before,
        ours.fds_after
    );
    eprintln!(
        "worker: RSS kB before {:?} between {:?} after {:?}, fds {:?} -> {:?}",
        stock.rss_before, stock.rss_between, stock.rss_after, stock.fds_before, stock.fds_after
    );
    assert_eq!(
        ours.fds_before, ours.fds_after,
        "descriptors per child changed"
    );
    assert_eq!(
        stock.fds_before, stock.fds_after,
        "stock: descriptors per child changed"
    );
    // Memory, not time: the same requests over the same 50 connections touch the same
    // pages however loaded the machine is (rworker 6448 kB, worker 6084 kB, both +100 kB,
    // measured at load average 6-20 as on an idle machine).
    let (o, w) = (mean(&ours.rss_after), mean(&stock.rss_after));
    assert!(
        o <= w * 1.10,
        "children's RSS after {REQUESTS} requests: {o:.0} kB, stock worker {w:.0} kB (more than 10 % above)"
    );
    // No growth with the request count beyond the stock worker's own. A leak grows the
    // children in both measured runs alike; what the first run adds once and the second
    // does not (a thread's first connection, a pool made when more connections overlapped
    // than before, malloc's arenas filling) is not one. Parked connections move between
    // threads, so how much of that the warm-up already did varies from run to run (0 to
    // 650 kB seen): the smaller of the two runs' growths is what scales with requests.
    let growth = |m: &MemResult| {
        let first = mean(&m.rss_between) - mean(&m.rss_before);
        let second = mean(&m.rss_after) - mean(&m.rss_between);
        first.min(second)
    };
    assert!(
        growth(&ours) <= growth(&stock).max(0.0) + 0.05 * w,
        "RSS grew by {:.0} kB per child under load (stock worker {:.0} kB)",
        growth(&ours),
        growth(&stock)
    );
}

// ------------------------------------------------------------------------------------------
// Issue 3: transaction pools are recycled

#[test]
fn transaction_pools_are_recycled_through_the_pool_stack() {
    if skip_unless_rworker("transaction_pools_are_recycled_through_the_pool_stack") {
        return;
    }
    let opts = ServerOpts::stable().keep_alive(false);
    let tpc = opts.effective_threads_per_child() as u64;
    let s = Server::start(opts);
    assert!(s.wait_settled(Duration::from_secs(10)));
    let old = s.children();
    let r = run_ab(&["-q", "-n", "3000", "-c", "10"], &s.url("/index.html"));
    assert_eq!((r.complete, r.failed), (3000, 0), "{}", r.output);
    s.graceful();
    let gone = wait_until(Duration::from_secs(20), || {
        old.iter().all(|&p| !pid_alive(p))
    });
    assert!(
        gone,
        "old children still alive 20 s after a graceful restart"
    );
    let log = s.error_log();
    let mut total = 0;
    for &p in &old {
        let l = log
            .lines()
            .find(|l| l.contains("RW00010") && l.contains(&format!("child {p} ")))
            .unwrap_or_else(|| panic!("no RW00010 line for child {p}:\n{log}"));
        // "... exiting: N connections, ptrans created C, reused from the recycled stack R"
        let num_after = |key: &str| -> u64 {
            let i = l.find(key).unwrap_or_else(|| panic!("{key:?} in {l}")) + key.len();
            l[i..]
                .trim_start()
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        let (n, c, r) = (
            num_after("exiting:"),
            num_after("ptrans created"),
            num_after("recycled stack"),
        );
        eprintln!("child {p}: {n} connections, {c} created, {r} reused");
        assert!(r > 0, "no ptrans reused: {l}");
        // A worker holds one pool at a time, and the stack keeps at most ThreadsPerChild + 1.
        // Parking, a pool stays with its connection (accepted, lingering) rather than with a
        // worker: at most ab's 10 open connections' more.
        let most = if s.parks() { tpc + 1 + 10 } else { tpc + 1 };
        assert!(
            c <= most,
            "{c} ptrans created for ThreadsPerChild {tpc} (at most {most}): {l}"
        );
        total += n;
    }
    // ab's 3000 connections plus the harness's probes and status requests.
    assert!(
        (3000..3000 + 50).contains(&total),
        "connections counted by the old children: {total}"
    );
}

// ------------------------------------------------------------------------------------------
// GracefulShutdownTimeout on graceful-stop (rworker does better than stock here)

#[test]
fn graceful_stop_cuts_a_slow_download_after_graceful_shutdown_timeout() {
    if skip_unless_rworker("graceful_stop_cuts_a_slow_download_after_graceful_shutdown_timeout") {
        return;
    }
    // Small socket buffers on both sides, so that what the client still reads after the
    // server cut the connection (the kernel's buffers) takes well under a second.
    let s = Server::start(
        ServerOpts::default()
            .graceful_shutdown_timeout(3)
            .line("SendBufferSize 65536"),
    );
    let mut c = RawConn::connect_with_rcvbuf(&s.addr(), 65536);
    c.send(b"GET /64m.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let (status, _) = c.read_head();
    assert_eq!(status, 200);
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = 0u64;
    while got < 2 * 1024 * 1024 {
        got += c.read_some(&mut buf).expect("read") as u64;
    }
    let procs = s.processes();
    let t0 = Instant::now();
    s.graceful_stop();
    // A slow client: about 1.3 MB/s, which would need ~50 s for the whole file.
    let cut_at = loop {
        match c.read_some(&mut buf) {
            Ok(0) | Err(_) => break t0.elapsed(),
            Ok(n) => got += n as u64,
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "download still running 15 s after graceful-stop with GracefulShutdownTimeout 3"
        );
        sleep(Duration::from_millis(50));
    };
    eprintln!("download cut after {cut_at:?} at {got} bytes");
    assert!(got < SIXTY_FOUR_MB, "the download completed");
    // Not before the timeout, and soon after it: 3.25 s measured at load average 6-20 on 2
    // cores; the cut needs the parent's next 1 s cycle and a few ms of CPU.
    assert!(
        cut_at >= Duration::from_millis(2500) && cut_at < Duration::from_secs(6),
        "download cut {cut_at:?} after graceful-stop, GracefulShutdownTimeout is 3 s"
    );
    let gone = wait_until(Duration::from_secs(4), || {
        procs.iter().all(|&p| !pid_alive(p))
    });
    assert!(
        gone,
        "processes left after the timeout: {:?}",
        s.processes()
    );
    assert!(!s.pidfile().exists(), "pidfile left behind");
    assert!(crash_lines(&s.error_log()).is_empty(), "{}", s.error_log());
}
