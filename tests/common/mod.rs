//! Shared harness for rworker's integration tests.
//!
//! Every test starts its own `/usr/sbin/apache2` (or the httpd `RWORKER_TEST_APACHE2` names,
//! with its modules in `RWORKER_TEST_MODULES`: rworker-testkit's `install`) with a private
//! ServerRoot in a temporary directory and a private port on 127.0.0.1, loads the MPM under
//! test and talks to it over the loopback only. The MPM under test comes from `RWORKER_TEST_MPM`:
//! `rworker` (the default: our `mod_mpm_rworker.so`), `worker` or `event` (Debian's stock
//! modules, the A/B reference the tests were first validated against).
//!
//! Servers are controlled only through `apache2 -f <our conf> -k ...` or the pid in their own
//! pidfile, never by process name: other apache2 instances may run on the same host. `Drop`
//! stops the server by its pidfile (rworker-testkit's [`Httpd::stop`]) and, as a last resort,
//! SIGKILLs the processes whose command line names this server's private config file.
//!
//! What the A/B harness (`abtest/`) needs as well lives in rworker-testkit and is re-exported
//! here: starting and stopping by pidfile, `/proc`, the crash-line rule, wrk.
// Each test binary uses only a part of the harness.
#![allow(dead_code, unused_imports)]

use rworker_testkit::httpd::Httpd;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

pub use rworker_testkit::error_log::{crash_lines, log_level};
pub use rworker_testkit::httpd::APACHE2;
pub use rworker_testkit::install::{apache2, load_module_lines, stock_module, stock_modules};
pub use rworker_testkit::procfs::{
    alive as pid_alive, all_pids, children_of, cmdline, cpu_ticks, listen_backlog,
    pid_connection_peers_on, pid_listens_on, pid_sockets_settled, pids_listening_on, proc_state,
    thread_report,
};
pub use rworker_testkit::wait::wait_until;
pub use rworker_testkit::wrk::WrkResult;

/// Size of the patterned file `/10m.bin`.
pub const TEN_MB: usize = 10 * 1024 * 1024;
/// Size of the sparse (all zero) file `/64m.bin`, used for slow downloads.
pub const SIXTY_FOUR_MB: u64 = 64 * 1024 * 1024;
/// Number of `/seq/NN.txt` files (content `seq NN\n`), used to check pipelined order.
pub const SEQ_FILES: usize = 16;

/// Error log message ids that a healthy server writes on start, restart and stop. They are
/// all at `notice` level in stock httpd; they are listed so that a log line carrying one of
/// them is never reported, whatever level an MPM gives it.
pub const START_STOP_NOTICES: &[&str] = &[
    "AH00292", // configured -- resuming normal operations
    "AH00163", // (prefork/event twin of AH00292)
    "AH00094", // Command line: ...
    "AH00169", // caught SIGTERM, shutting down (mpm_common)
    "AH00295", // caught SIGTERM, shutting down (worker)
    "AH00296", // caught SIGWINCH, shutting down gracefully
    "AH00297", // SIGUSR1 received.  Doing graceful restart
    "AH00298", // SIGHUP received.  Attempting to restart
    "AH00493", // SIGUSR1 received.  Doing graceful restart (event)
    "AH00489", // (event) configured -- resuming normal operations
    "AH00558", // could not reliably determine the server's FQDN
];

// ------------------------------------------------------------------------------------------
// The MPM under test

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mpm {
    Rworker,
    Worker,
    Event,
}

impl Mpm {
    /// The MPM selected by `RWORKER_TEST_MPM` (default `rworker`).
    pub fn under_test() -> Mpm {
        match std::env::var("RWORKER_TEST_MPM").as_deref() {
            Err(_) | Ok("") | Ok("rworker") => Mpm::Rworker,
            Ok("worker") => Mpm::Worker,
            Ok("event") => Mpm::Event,
            Ok(other) => panic!("RWORKER_TEST_MPM={other:?}: expected rworker, worker or event"),
        }
    }

    /// What `mpm_get_name` returns: `Server MPM:` in `apache2 -V`, `ServerMPM:` in mod_status.
    pub fn name(self) -> &'static str {
        match self {
            Mpm::Rworker => "rworker",
            Mpm::Worker => "worker",
            Mpm::Event => "event",
        }
    }

    /// The exported module symbol, `mpm_<name>_module`.
    pub fn module_symbol(self) -> String {
        format!("mpm_{}_module", self.name())
    }

    /// The per-module log tag, as used in `LogLevel mpm_<name>:debug`.
    pub fn log_tag(self) -> String {
        format!("mpm_{}", self.name())
    }

    /// Path of the shared object to `LoadModule`. For rworker: `RWORKER_SO`, else the
    /// release build, else the debug build; panics if none exists.
    pub fn so_path(self) -> PathBuf {
        match self {
            Mpm::Worker => stock_module("mpm_worker"),
            Mpm::Event => stock_module("mpm_event"),
            Mpm::Rworker => rworker_so(),
        }
    }
}

fn rworker_so() -> PathBuf {
    rworker_testkit::rworker_so::find_rworker_so()
        .unwrap_or_else(|e| panic!("{e} (or RWORKER_TEST_MPM=worker to test the stock worker MPM)"))
}

// ------------------------------------------------------------------------------------------
// Server options

/// Whether the suite runs rworker in its default keep-alive mode, `park` (unless
/// RWORKER_TEST_KEEPALIVE=thread): every server parks its connections unless its own lines
/// say otherwise.
pub fn parking_under_test() -> bool {
    Mpm::under_test() == Mpm::Rworker
        && !std::env::var("RWORKER_TEST_KEEPALIVE").is_ok_and(|m| m == "thread")
}

/// Directives of the server under test. `Default` is the test config of the contract (§6):
/// StartServers 2, MinSpareThreads 25, MaxSpareThreads 75, ThreadLimit 64,
/// ThreadsPerChild 25, MaxRequestWorkers 150.
#[derive(Clone, Debug)]
pub struct ServerOpts {
    pub start_servers: u32,
    pub min_spare_threads: u32,
    pub max_spare_threads: u32,
    pub thread_limit: u32,
    pub threads_per_child: u32,
    pub max_request_workers: u32,
    pub server_limit: Option<u32>,
    pub keep_alive: Option<bool>,
    pub max_keep_alive_requests: Option<u32>,
    pub max_connections_per_child: Option<u32>,
    pub graceful_shutdown_timeout: Option<u32>,
    /// The server's (soft, hard) open-file limit (None: the test process's).
    pub open_files: Option<(u64, u64)>,
    /// Extra configuration lines, appended verbatim at the end of httpd.conf.
    pub extra: Vec<String>,
}

impl Default for ServerOpts {
    fn default() -> Self {
        ServerOpts {
            start_servers: 2,
            min_spare_threads: 25,
            max_spare_threads: 75,
            thread_limit: 64,
            threads_per_child: 25,
            max_request_workers: 150,
            server_limit: None,
            keep_alive: None,
            max_keep_alive_requests: None,
            max_connections_per_child: None,
            graceful_shutdown_timeout: None,
            open_files: None,
            extra: Vec::new(),
        }
    }
}

impl ServerOpts {
    /// A small config whose process count does not move at rest: 2 children × 10 threads,
    /// MaxRequestWorkers 20, spare limits that neither fork nor shed.
    pub fn stable() -> Self {
        ServerOpts {
            start_servers: 2,
            min_spare_threads: 1,
            max_spare_threads: 1000,
            thread_limit: 64,
            threads_per_child: 10,
            max_request_workers: 20,
            ..ServerOpts::default()
        }
    }
    pub fn start_servers(mut self, n: u32) -> Self {
        self.start_servers = n;
        self
    }
    pub fn spare_threads(mut self, min: u32, max: u32) -> Self {
        self.min_spare_threads = min;
        self.max_spare_threads = max;
        self
    }
    pub fn thread_limit(mut self, n: u32) -> Self {
        self.thread_limit = n;
        self
    }
    pub fn threads_per_child(mut self, n: u32) -> Self {
        self.threads_per_child = n;
        self
    }
    pub fn max_request_workers(mut self, n: u32) -> Self {
        self.max_request_workers = n;
        self
    }
    pub fn server_limit(mut self, n: u32) -> Self {
        self.server_limit = Some(n);
        self
    }
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = Some(on);
        self
    }
    pub fn max_keep_alive_requests(mut self, n: u32) -> Self {
        self.max_keep_alive_requests = Some(n);
        self
    }
    pub fn max_connections_per_child(mut self, n: u32) -> Self {
        self.max_connections_per_child = Some(n);
        self
    }
    pub fn graceful_shutdown_timeout(mut self, secs: u32) -> Self {
        self.graceful_shutdown_timeout = Some(secs);
        self
    }
    /// Starts the server with this (soft, hard) open-file limit.
    pub fn open_files(mut self, soft: u64, hard: u64) -> Self {
        self.open_files = Some((soft, hard));
        self
    }
    pub fn line(mut self, line: impl Into<String>) -> Self {
        self.extra.push(line.into());
        self
    }

    /// ThreadsPerChild after httpd's clamping to ThreadLimit.
    pub fn effective_threads_per_child(&self) -> u32 {
        self.threads_per_child.min(self.thread_limit).max(1)
    }

    /// The length of the `Scoreboard:` string in `server-status?auto`, as the stock worker
    /// gives it: mod_status shows MAX_DAEMONS × MAX_THREADS slots, where MAX_THREADS is
    /// ThreadsPerChild and MAX_DAEMONS is MaxRequestWorkers / ThreadsPerChild (MaxRequestWorkers
    /// is raised to ThreadsPerChild, rounded down to a multiple of it (AH00316), and capped
    /// at ServerLimit (default 16) × ThreadsPerChild). The HardLimit slots beyond are hidden.
    pub fn expected_scoreboard_len(&self) -> usize {
        (self.expected_daemons() * self.effective_threads_per_child()) as usize
    }

    /// MaxRequestWorkers / ThreadsPerChild after the clamps above: the most children.
    fn expected_daemons(&self) -> u32 {
        let tpc = self.effective_threads_per_child();
        let mrw = self.max_request_workers.max(tpc);
        (mrw / tpc).min(self.server_limit.unwrap_or(16))
    }

    /// Children the parent forks at start: StartServers, at least 1, at most the daemons
    /// MaxRequestWorkers allows (as the stock MPMs clamp it).
    pub fn expected_start_children(&self) -> usize {
        self.start_servers.clamp(1, self.expected_daemons().max(1)) as usize
    }
}

// ------------------------------------------------------------------------------------------
// Server

/// One private httpd. Created by [`Server::new`] (config and DocumentRoot written, nothing
/// started), started by [`Server::start`] / [`Server::start_foreground`].
pub struct Server {
    pub mpm: Mpm,
    pub opts: ServerOpts,
    pub port: u16,
    dir: tempfile::TempDir,
    /// Its config, pidfile and error log: how it is started and stopped.
    httpd: Httpd,
    /// The pid read from the pidfile after start (the parent).
    parent: Option<i32>,
    /// `apache2 -X`, when started in the foreground.
    foreground: Option<Child>,
}

impl Server {
    /// Writes ServerRoot, httpd.conf and DocumentRoot for the MPM under test; starts nothing.
    pub fn new(opts: ServerOpts) -> Server {
        Server::new_for(Mpm::under_test(), opts)
    }

    pub fn new_for(mpm: Mpm, opts: ServerOpts) -> Server {
        // SAFETY: geteuid(2) has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(euid, 0, "the integration tests start httpd, which must run as root to switch its children to www-data; run them as root");
        let so = mpm.so_path();
        let dir = tempfile::Builder::new()
            .prefix("rworker-test-")
            .tempdir()
            .expect("create temp ServerRoot");
        let root = dir.path();
        let httpd = Httpd::create_root(root, &["seq"]).unwrap_or_else(|e| panic!("{e}"));
        write_docroot(&root.join("htdocs"));
        let mut server = Server {
            mpm,
            opts,
            port: 0,
            dir,
            httpd,
            parent: None,
            foreground: None,
        };
        server.port = free_port();
        server.write_conf(&so);
        server
    }

    /// Writes the config and starts the server with `apache2 -k start`; waits until it answers.
    pub fn start(opts: ServerOpts) -> Server {
        let mut s = Server::new(opts);
        s.run_start();
        s
    }

    /// Starts `apache2 -X` (one process, in the foreground, as our child).
    ///
    /// It is ready when *it* listens on the port: a bare connect cannot tell, because the
    /// port is only "free a moment ago" (`free_port`), and another server started beside
    /// this test (seen with two suites at once) may take it first. Then apache2 -X exits
    /// with "Address already in use" on its console, while a connect reaches the other
    /// server: a test then talked to a foreign server that answered, or reset its request
    /// as it stopped (the "Connection reset by peer" on the first GET). The listening
    /// socket's inode must be one of our process's descriptors.
    pub fn start_foreground(opts: ServerOpts) -> Server {
        let mut s = Server::new(opts);
        for attempt in 0..3 {
            let console = s.root().join("logs/console.log");
            let out = fs::File::create(&console).expect("create logs/console.log");
            let child = Command::new(apache2())
                .arg("-f")
                .arg(s.conf_path())
                .arg("-X")
                .stdin(Stdio::null())
                .stdout(out.try_clone().expect("dup console log"))
                .stderr(out)
                .spawn()
                .expect("spawn apache2 -X");
            let pid = child.id() as i32;
            s.foreground = Some(child);
            let port = s.port;
            let mut listening = false;
            wait_until(Duration::from_secs(15), || {
                listening = pid_listens_on(pid, port);
                // An exited process holds no socket: stop waiting for it.
                listening
                    || s.foreground
                        .as_mut()
                        .is_some_and(|c| !matches!(c.try_wait(), Ok(None)))
            });
            if listening {
                return s;
            }
            let log = format!(
                "{}{}",
                fs::read_to_string(&console).unwrap_or_default(),
                s.error_log()
            );
            s.kill_foreground();
            if attempt < 2 && rworker_testkit::httpd::says_port_in_use(&log) {
                s.rebind();
                continue;
            }
            panic!(
                "apache2 -X did not start listening on {}; console and error log:\n{log}",
                s.port
            );
        }
        unreachable!()
    }

    fn run_start(&mut self) {
        for attempt in 0..3 {
            // Listeners open (and connections queue) before the parent writes its pidfile;
            // both can lag on a loaded machine.
            match self.httpd.start_with_open_files(
                self.port,
                Duration::from_secs(25),
                self.opts.open_files,
            ) {
                Ok(parent) => {
                    self.parent = Some(parent);
                    // The parent forks its first children after it wrote the pidfile; on a
                    // loaded machine that can lag, and tests count children right away.
                    let forked =
                        wait_until(Duration::from_secs(10), || !self.children().is_empty());
                    assert!(
                        forked,
                        "no child process 10 s after start:\n{}",
                        self.error_log()
                    );
                    // The parent forks its StartServers children one after another; a test
                    // that counts them (or their log lines) must not see the first alone.
                    // Idle maintenance cannot shed any before its first tick, a second on;
                    // should a child not come up, the test's own assertions say why.
                    let want = self.opts.expected_start_children();
                    wait_until(Duration::from_secs(10), || self.children().len() >= want);
                    return;
                }
                Err(failure) => {
                    self.stop_quietly();
                    if attempt < 2 && failure.port_in_use() {
                        // Another test grabbed the port between our probe and httpd's bind.
                        self.rebind();
                        continue;
                    }
                    panic!("server did not start\n{failure}");
                }
            }
        }
    }

    fn rebind(&mut self) {
        self.port = free_port();
        let so = self.mpm.so_path();
        self.write_conf(&so);
        let _ = fs::write(self.error_log_path(), "");
    }

    fn write_conf(&self, so: &Path) {
        let t = self.root().display().to_string();
        let o = &self.opts;
        let mut c = String::new();
        let mut line = |s: String| {
            c.push_str(&s);
            c.push('\n');
        };
        line(format!(
            "# written by rworker's test harness for MPM {:?}",
            self.mpm
        ));
        line(format!("ServerRoot {t}"));
        line(format!("PidFile {t}/run/httpd.pid"));
        line(format!("ScoreBoardFile {t}/run/sb"));
        line(format!("Mutex file:{t}/run default"));
        line(format!(
            "LoadModule {} {}",
            self.mpm.module_symbol(),
            so.display()
        ));
        // mod_unixd (User, Group) and the rest, where the binary lacks them.
        line(
            load_module_lines(rworker_testkit::install::BASE_MODULES)
                .trim_end()
                .to_string(),
        );
        line("TypesConfig /etc/mime.types".into());
        line("User www-data".into());
        line("Group www-data".into());
        line("ServerName localhost".into());
        line(format!("Listen 127.0.0.1:{}", self.port));
        line(format!("DocumentRoot {t}/htdocs"));
        line(format!(
            "<Directory {t}/htdocs>\n    Require all granted\n</Directory>"
        ));
        line("DirectoryIndex index.html".into());
        line("<Location /server-status>\n    SetHandler server-status\n    Require all granted\n</Location>".into());
        line("ExtendedStatus On".into());
        line(format!("ErrorLog {t}/logs/error.log"));
        if self.mpm == Mpm::Rworker {
            line(format!("LogLevel warn {}:debug", self.mpm.log_tag()));
            // RWORKER_TEST_KEEPALIVE=thread runs every test with the stock worker's
            // keep-alive (park is the default).
            if let Ok(mode) = std::env::var("RWORKER_TEST_KEEPALIVE") {
                line(format!("RWorkerKeepAlive {mode}"));
            }
            // RWORKER_TEST_ACCEPT=listener runs every test with the listener's hand-off.
            if let Ok(mode) = std::env::var("RWORKER_TEST_ACCEPT") {
                line(format!("RWorkerAccept {mode}"));
            }
        } else {
            line("LogLevel warn".into());
        }
        line(format!("StartServers {}", o.start_servers));
        if let Some(n) = o.server_limit {
            line(format!("ServerLimit {n}"));
        }
        line(format!("MinSpareThreads {}", o.min_spare_threads));
        line(format!("MaxSpareThreads {}", o.max_spare_threads));
        line(format!("ThreadLimit {}", o.thread_limit));
        line(format!("ThreadsPerChild {}", o.threads_per_child));
        line(format!("MaxRequestWorkers {}", o.max_request_workers));
        if let Some(on) = o.keep_alive {
            line(format!("KeepAlive {}", if on { "On" } else { "Off" }));
        }
        if let Some(n) = o.max_keep_alive_requests {
            line(format!("MaxKeepAliveRequests {n}"));
        }
        if let Some(n) = o.max_connections_per_child {
            line(format!("MaxConnectionsPerChild {n}"));
        }
        if let Some(n) = o.graceful_shutdown_timeout {
            line(format!("GracefulShutdownTimeout {n}"));
        }
        for l in &o.extra {
            line(l.clone());
        }
        fs::write(self.conf_path(), c).expect("write httpd.conf");
    }

    // --- paths and config ---------------------------------------------------------------

    pub fn root(&self) -> &Path {
        self.dir.path()
    }
    pub fn conf_path(&self) -> PathBuf {
        self.httpd.conf.clone()
    }
    pub fn pidfile(&self) -> PathBuf {
        self.httpd.pidfile.clone()
    }
    pub fn error_log_path(&self) -> PathBuf {
        self.httpd.error_log.clone()
    }
    pub fn docroot(&self) -> PathBuf {
        self.root().join("htdocs")
    }
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.port, path)
    }
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `apache2 -f <conf> <args>` and returns its output (does not check the status).
    pub fn ctl(&self, args: &[&str]) -> Output {
        self.httpd.apache2(args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ctl_ok(&self, args: &[&str]) {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "apache2 {}: {}\nstdout: {}\nstderr: {}\nerror log:\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.error_log()
        );
    }

    // --- processes ----------------------------------------------------------------------

    /// The pid in the server's own pidfile, if there is one.
    pub fn pid_from_pidfile(&self) -> Option<i32> {
        self.httpd.pid()
    }

    /// The parent's pid as recorded at start (the pidfile's content then).
    pub fn parent_pid(&self) -> i32 {
        if let Some(c) = &self.foreground {
            return c.id() as i32;
        }
        self.parent.expect("server not started")
    }

    /// Live (non-zombie) children of the parent.
    pub fn children(&self) -> Vec<i32> {
        children_of(self.parent_pid())
            .into_iter()
            .filter(|&(_, st)| st != 'Z')
            .map(|(p, _)| p)
            .collect()
    }

    /// Children of the parent that are zombies (exited, not yet reaped).
    pub fn zombie_children(&self) -> Vec<i32> {
        children_of(self.parent_pid())
            .into_iter()
            .filter(|&(_, st)| st == 'Z')
            .map(|(p, _)| p)
            .collect()
    }

    /// Every live process whose command line names this server's config file: the parent,
    /// its children, and an `apache2 -k ...` control process that happens to run.
    pub fn processes(&self) -> Vec<i32> {
        rworker_testkit::procfs::processes_naming(&self.conf_path().display().to_string())
    }

    /// Waits until the server accepts TCP connections on its port.
    pub fn wait_listening(&self, timeout: Duration) -> bool {
        wait_until(timeout, || TcpStream::connect(self.addr()).is_ok())
    }

    /// Whether this server's children run a listener thread: the stock MPMs always; rworker
    /// unless its idle workers accept for themselves: with `RWorkerAccept workers` (the
    /// default, which needs one listening socket and `RWorkerQueue atomic`), or through its
    /// event set with `RWorkerKeepAlive park`.
    pub fn has_listener_thread(&self) -> bool {
        if self.mpm != Mpm::Rworker {
            return true;
        }
        if self.parks() {
            // Its idle workers wait on its event set, for any number of listening sockets.
            return false;
        }
        let env_is = |k: &str, v: &str| std::env::var(k).is_ok_and(|m| m == v);
        let extra = |needle: &str| self.has_line(needle);
        env_is("RWORKER_TEST_ACCEPT", "listener")
            || extra("rworkeraccept listener")
            || extra("rworkerqueue apr")
            || extra("listen ")
    }

    /// Whether this server is rworker with `RWorkerKeepAlive park` (the default; from its
    /// own lines or RWORKER_TEST_KEEPALIVE; its own line comes after the environment's, so
    /// it wins).
    pub fn parks(&self) -> bool {
        if self.mpm != Mpm::Rworker || self.has_line("rworkerkeepalive thread") {
            return false;
        }
        self.has_line("rworkerkeepalive park") || parking_under_test()
    }

    /// Whether one of the configuration's extra lines contains `needle` (lower case).
    fn has_line(&self, needle: &str) -> bool {
        self.opts
            .extra
            .iter()
            .any(|l| l.to_ascii_lowercase().contains(needle))
    }

    /// Tasks of a settled child: its main thread, the listener (if any) and
    /// ThreadsPerChild workers.
    pub fn tasks_per_child(&self) -> usize {
        self.opts.effective_threads_per_child() as usize + 1 + self.has_listener_thread() as usize
    }

    /// Waits until the StartServers children exist and each has [`Server::tasks_per_child`]
    /// tasks, without a request: for tests where every connection counts (a status poll is
    /// one, and MaxConnectionsPerChild retires a child after a few).
    pub fn wait_threads_started(&self, timeout: Duration) -> bool {
        let tasks = self.tasks_per_child();
        let want = self.opts.expected_start_children();
        wait_until(timeout, || {
            let kids = self.children();
            kids.len() == want && kids.iter().all(|&c| task_count(c) == tasks)
        })
    }

    /// Waits until every child has [`Server::tasks_per_child`] tasks and `server-status` counts
    /// exactly the live worker threads (children × ThreadsPerChild) as busy or idle.
    pub fn wait_settled(&self, timeout: Duration) -> bool {
        let tpc = self.opts.effective_threads_per_child() as usize;
        let tasks = self.tasks_per_child();
        wait_until(timeout, || {
            let kids = self.children();
            if kids.is_empty() || kids.iter().any(|&c| task_count(c) != tasks) {
                return false;
            }
            let Ok(st) = self.try_server_status_auto() else {
                return false;
            };
            st.busy() + st.idle() == kids.len() * tpc
        })
    }

    // --- signals ------------------------------------------------------------------------

    pub fn graceful(&self) {
        self.ctl_ok(&["-k", "graceful"]);
    }
    pub fn restart(&self) {
        self.ctl_ok(&["-k", "restart"]);
    }
    pub fn graceful_stop(&self) {
        self.ctl_ok(&["-k", "graceful-stop"]);
    }
    pub fn stop(&self) {
        self.ctl_ok(&["-k", "stop"]);
    }

    /// Sends `sig` to the parent, by the pid recorded from its own pidfile.
    pub fn signal_parent(&self, sig: i32) {
        let pid = self.parent_pid();
        // SAFETY: plain kill(2) on a pid this server wrote into its own pidfile.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        );
    }

    /// Stops the server (`-k stop`) and waits until all its processes are gone.
    pub fn stop_and_wait(&self, timeout: Duration) -> bool {
        self.stop();
        wait_until(timeout, || self.processes().is_empty())
    }

    /// For a foreground (`-X`) server: waits for it to exit and returns its exit status.
    pub fn wait_foreground_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.foreground.as_mut().expect("not a foreground server");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            sleep(Duration::from_millis(20));
        }
    }

    fn kill_foreground(&mut self) {
        if let Some(mut c) = self.foreground.take() {
            // SAFETY: kill(2) on our own child, which has not been reaped yet.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn stop_quietly(&mut self) {
        if self.foreground.is_some() {
            self.kill_foreground();
        }
        // By the pidfile: -k stop, then SIGKILL of its parent and children after 5 s.
        self.httpd.stop(Duration::from_secs(5));
        wait_until(Duration::from_secs(5), || self.processes().is_empty());
        // Last resort: whatever still runs with our config file on its command line. Repeat
        // until nothing is left: a parent caught while starting may fork between two scans.
        let left = self.processes();
        if !left.is_empty() {
            eprintln!(
                "harness: SIGKILL to leftover processes of {}: {left:?}",
                self.conf_path().display()
            );
            wait_until(Duration::from_secs(5), || {
                let left = self.processes();
                for &pid in &left {
                    // SAFETY: kill(2) on a pid whose cmdline names our private config file.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
                left.is_empty()
            });
        }
    }

    // --- logs and status ----------------------------------------------------------------

    pub fn error_log(&self) -> String {
        self.httpd.error_log_text()
    }

    /// Error log lines at warn or above (or not in httpd's log format at all, e.g. a panic
    /// message on a child's stderr), minus the start/stop notices and `allowed` ids.
    pub fn error_log_problems(&self, allowed: &[&str]) -> Vec<String> {
        self.error_log()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter(|l| match log_level(l) {
                Some(level) => matches!(level, "warn" | "error" | "crit" | "alert" | "emerg"),
                None => true,
            })
            .filter(|l| {
                !START_STOP_NOTICES
                    .iter()
                    .chain(allowed.iter())
                    .any(|id| l.contains(&format!("{id}:")))
            })
            .map(str::to_owned)
            .collect()
    }

    pub fn assert_no_warnings_in_error_log(&self) {
        self.assert_no_warnings_in_error_log_except(&[]);
    }

    pub fn assert_no_warnings_in_error_log_except(&self, allowed: &[&str]) {
        let bad = self.error_log_problems(allowed);
        assert!(
            bad.is_empty(),
            "error log of the {} MPM has {} line(s) at warn or above:\n{}",
            self.mpm.name(),
            bad.len(),
            bad.join("\n")
        );
    }

    pub fn try_server_status_auto(&self) -> Result<Status, String> {
        let (code, body) = http_get(&self.url("/server-status?auto"))?;
        if code != 200 {
            return Err(format!("server-status?auto: HTTP {code}"));
        }
        Ok(Status::parse(&String::from_utf8_lossy(&body)))
    }

    pub fn server_status_auto(&self) -> Status {
        self.try_server_status_auto()
            .unwrap_or_else(|e| panic!("{e}\nerror log:\n{}", self.error_log()))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_quietly();
    }
}

/// The `key: value` lines of `server-status?auto`.
#[derive(Clone, Debug, Default)]
pub struct Status(pub BTreeMap<String, String>);

impl Status {
    pub fn parse(text: &str) -> Status {
        let mut m = BTreeMap::new();
        for l in text.lines() {
            if let Some((k, v)) = l.split_once(": ") {
                m.insert(k.trim().to_owned(), v.trim().to_owned());
            }
        }
        Status(m)
    }
    pub fn get(&self, key: &str) -> &str {
        self.0
            .get(key)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no {key:?} in server-status: {:?}", self.0))
    }
    pub fn num(&self, key: &str) -> u64 {
        let v = self.get(key);
        v.parse()
            .unwrap_or_else(|_| panic!("server-status {key}: {v:?} is not a number"))
    }
    pub fn busy(&self) -> usize {
        self.num("BusyWorkers") as usize
    }
    pub fn idle(&self) -> usize {
        self.num("IdleWorkers") as usize
    }
    pub fn scoreboard(&self) -> &str {
        self.get("Scoreboard")
    }
}

// ------------------------------------------------------------------------------------------
// DocumentRoot

/// Byte `i` of `/10m.bin`: a pattern that does not repeat with any power-of-two period,
/// so a misplaced or duplicated chunk shows.
pub fn pattern_byte(i: usize) -> u8 {
    ((i % 251) as u8) ^ ((i / 251 % 256) as u8)
}

pub fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(pattern_byte).collect()
}

pub const INDEX_HTML: &str = "<html><body><h1>rworker test server</h1></body></html>\n";

pub fn seq_body(i: usize) -> String {
    format!("seq {i:02}\n")
}

fn write_docroot(d: &Path) {
    fs::write(d.join("index.html"), INDEX_HTML).unwrap();
    fs::write(d.join("1b.txt"), "x").unwrap();
    fs::write(d.join("4k.bin"), pattern(4096)).unwrap();
    fs::write(d.join("100k.bin"), pattern(100 * 1024)).unwrap();
    fs::write(d.join("10m.bin"), pattern(TEN_MB)).unwrap();
    // Sparse: created instantly, reads as zeros.
    let f = fs::File::create(d.join("64m.bin")).unwrap();
    f.set_len(SIXTY_FOUR_MB).unwrap();
    for i in 0..SEQ_FILES {
        fs::write(d.join(format!("seq/{i:02}.txt")), seq_body(i)).unwrap();
    }
    for entry in walk(d) {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        fs::set_permissions(&entry, fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(walk(&p));
        }
        v.push(p);
    }
    v
}

// ------------------------------------------------------------------------------------------
// HTTP

fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .redirects(0)
        .build()
}

/// GET with a real HTTP client; any status is returned, not an error.
pub fn http_get(url: &str) -> Result<(u16, Vec<u8>), String> {
    into_parts(url, agent().get(url).call())
}

/// HEAD: status, headers (lower-case names) and the body length read (must be 0).
pub fn http_head(url: &str) -> Result<(u16, BTreeMap<String, String>, usize), String> {
    let resp = match agent().head(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => return Err(format!("{url}: {t}")),
    };
    let code = resp.status();
    let mut headers = BTreeMap::new();
    for name in resp.headers_names() {
        if let Some(v) = resp.header(&name) {
            headers.insert(name.to_ascii_lowercase(), v.to_owned());
        }
    }
    let mut body = Vec::new();
    resp.into_reader()
        .read_to_end(&mut body)
        .expect("read HEAD body");
    Ok((code, headers, body.len()))
}

fn into_parts(url: &str, r: Result<ureq::Response, ureq::Error>) -> Result<(u16, Vec<u8>), String> {
    let resp = match r {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => return Err(format!("{url}: {t}")),
    };
    let code = resp.status();
    let mut body = Vec::new();
    resp.into_reader()
        .read_to_end(&mut body)
        .expect("read body");
    Ok((code, body))
}

/// One response read off a raw connection.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// A raw HTTP/1.1 connection, for keep-alive sequences and pipelining.
pub struct RawConn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RawConn {
    pub fn connect(addr: &str) -> RawConn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        RawConn::from_stream(s)
    }

    fn from_stream(s: TcpStream) -> RawConn {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        RawConn {
            writer: s.try_clone().unwrap(),
            reader: BufReader::new(s),
        }
    }

    pub fn get_request(path: &str) -> String {
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: rworker-tests\r\n\r\n")
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("write request");
    }

    pub fn shutdown_write(&mut self) {
        let _ = self.writer.shutdown(Shutdown::Write);
    }

    /// Reads status line and headers; the body is left on the connection.
    pub fn read_head(&mut self) -> (u16, BTreeMap<String, String>) {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read status line");
        assert!(line.starts_with("HTTP/1.1 "), "bad status line {line:?}");
        let status: u16 = line[9..12].parse().expect("status code");
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            let n = self.reader.read_line(&mut h).expect("read header");
            assert!(n > 0, "connection closed inside the headers");
            let h = h.trim_end_matches(['\r', '\n']);
            if h.is_empty() {
                break;
            }
            let (k, v) = h
                .split_once(':')
                .unwrap_or_else(|| panic!("bad header line {h:?}"));
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
        (status, headers)
    }

    /// Reads one whole response, framed by Content-Length (what httpd sends for files).
    pub fn read_response(&mut self) -> RawResponse {
        let (status, headers) = self.read_head();
        let len: usize = headers
            .get("content-length")
            .unwrap_or_else(|| panic!("response without Content-Length: {headers:?}"))
            .parse()
            .expect("Content-Length");
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).expect("read body");
        RawResponse {
            status,
            headers,
            body,
        }
    }

    /// Reads up to `buf.len()` body bytes (0 at EOF).
    pub fn read_some(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reader.read(buf)
    }

    /// True if the server closed the connection (EOF) within the read timeout.
    pub fn is_closed_by_peer(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.reader.read(&mut b), Ok(0) | Err(_))
    }
}

// ------------------------------------------------------------------------------------------
// Load generators

#[derive(Debug)]
pub struct AbResult {
    pub complete: u64,
    pub failed: u64,
    pub non_2xx: u64,
    pub output: String,
}

impl AbResult {
    /// Asserts that all `n` requests completed with a 2xx status and none failed; the failure
    /// message carries ab's output.
    #[track_caller]
    pub fn assert_all_ok(&self, n: u64) {
        assert_eq!(
            (self.complete, self.failed, self.non_2xx),
            (n, 0, 0),
            "ab\n{}",
            self.output
        );
    }
}

/// Runs `ab <args> <url>` to completion.
pub fn run_ab(args: &[&str], url: &str) -> AbResult {
    let out = Command::new("ab")
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("run ab");
    parse_ab(out)
}

pub fn spawn_ab(args: &[&str], url: &str) -> Child {
    Command::new("ab")
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ab")
}

pub fn parse_ab(out: Output) -> AbResult {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "ab failed ({}):\n{text}", out.status);
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    AbResult {
        complete: field("Complete requests")
            .unwrap_or_else(|| panic!("no 'Complete requests' in ab output:\n{text}")),
        failed: field("Failed requests")
            .unwrap_or_else(|| panic!("no 'Failed requests' in ab output:\n{text}")),
        non_2xx: field("Non-2xx responses").unwrap_or(0),
        output: text,
    }
}

/// Runs `wrk <args> <url>` to completion (rworker-testkit's runner and parser).
pub fn run_wrk(args: &[&str], url: &str) -> WrkResult {
    let log = tempfile::NamedTempFile::new().expect("temp file for wrk's output");
    rworker_testkit::wrk::run_wrk(args, url, log.path(), |_| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// wrk running until [`WrkLoad::stop`]: for a test whose load must span steps that take
/// as long as the machine makes them (restarts), not a duration fixed in advance.
pub struct WrkLoad {
    pid: libc::pid_t,
    run: std::thread::JoinHandle<WrkResult>,
}

impl WrkLoad {
    /// Starts `wrk <args> <url>` (`args` without `-d`) and returns once it runs.
    pub fn start(args: &[&str], url: &str) -> WrkLoad {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.extend(["-d".into(), "1h".into()]);
        let url = url.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        let run = std::thread::spawn(move || {
            let log = tempfile::NamedTempFile::new().expect("temp file for wrk's output");
            rworker_testkit::wrk::run_wrk(&args, &url, log.path(), |pid| {
                let _ = tx.send(pid);
            })
            .unwrap_or_else(|e| panic!("{e}"))
        });
        let pid = rx.recv().expect("wrk started");
        WrkLoad { pid, run }
    }

    /// Stops wrk (SIGINT: it ends its connections and prints its figures) and returns them.
    pub fn stop(self) -> WrkResult {
        // SAFETY: kill(2) on our own child, not yet reaped (its runner thread waits on it).
        unsafe { libc::kill(self.pid, libc::SIGINT) };
        self.run
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    }
}

// ------------------------------------------------------------------------------------------
// /proc and small utilities

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    rworker_testkit::port::free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// Number of threads of `pid` (entries of /proc/<pid>/task).
pub fn task_count(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// The thread ids of `pid` (its tasks in /proc).
pub fn task_ids(pid: i32) -> Vec<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Real uid of `pid`.
pub fn uid_of(pid: i32) -> u32 {
    let s = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    s.lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("Uid line")
}

/// The uid of a user name (`www-data`).
pub fn uid_of_user(name: &str) -> u32 {
    let passwd = fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<_> = l.split(':').collect();
            (f.len() > 2 && f[0] == name)
                .then(|| f[2].parse().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("user {name} not in /etc/passwd"))
}

pub fn set_of(v: &[i32]) -> BTreeSet<i32> {
    v.iter().copied().collect()
}

/// For tests that only make sense for one MPM: prints why and returns true when skipping.
pub fn skip_unless_rworker(test: &str) -> bool {
    let mpm = Mpm::under_test();
    if mpm != Mpm::Rworker {
        eprintln!(
            "SKIP {test}: checks mod_mpm_rworker.so itself, but RWORKER_TEST_MPM={} (unset it to run)",
            mpm.name()
        );
        return true;
    }
    false
}

// ------------------------------------------------------------------------------------------
// Process management: CPU, memory, descriptors, backlog, held requests, logs

/// Clock ticks per second of the `utime`/`stime` fields of /proc/<pid>/stat.
pub fn clk_tck() -> u64 {
    rworker_testkit::procfs::clock_ticks_per_sec().expect("sysconf(_SC_CLK_TCK)")
}

/// Resident set size of `pid` in KiB (VmRSS).
pub fn rss_kb(pid: i32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Open file descriptors of `pid` (entries of /proc/<pid>/fd).
pub fn fd_count(pid: i32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

impl Server {
    pub fn access_log_path(&self) -> PathBuf {
        self.root().join("logs/access.log")
    }

    /// The access log written by a `CustomLog logs/access.log ...` line in `extra`.
    pub fn access_log(&self) -> String {
        fs::read_to_string(self.access_log_path()).unwrap_or_default()
    }

    /// True if `pid` is alive and its command line names this server's config file.
    pub fn owns_pid(&self, pid: i32) -> bool {
        pid_alive(pid) && cmdline(pid).contains(&self.conf_path().display().to_string())
    }

    /// Rewrites httpd.conf from `opts` (for a later graceful restart or `-t`).
    pub fn rewrite_conf(&mut self, opts: ServerOpts) {
        self.opts = opts;
        let so = self.mpm.so_path();
        self.write_conf(&so);
    }
}

/// A request whose body is sent only in part, so that the worker that serves it stays busy
/// reading until [`HeldRequest::complete`] (or the server's `Timeout`): the default handler
/// reads (discards) a request's body before it answers, on its worker under every MPM. (A
/// head sent in part held a worker too until request heads were read without a thread in
/// rworker's default mode.)
pub struct HeldRequest {
    stream: TcpStream,
    path: String,
}

impl HeldRequest {
    pub fn open(addr: &str, path: &str) -> HeldRequest {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        let mut h = HeldRequest {
            stream,
            path: path.to_owned(),
        };
        let head = format!(
            "GET {} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 1\r\n\r\n",
            h.path
        );
        h.stream
            .write_all(head.as_bytes())
            .expect("send the head without its body");
        h
    }

    /// Sends the body and reads the whole response; returns the status, or an error if the
    /// connection was cut.
    pub fn complete(mut self) -> Result<u16, String> {
        self.stream
            .write_all(b"x")
            .map_err(|e| format!("{}: send body: {e}", self.path))?;
        let mut resp = Vec::new();
        self.stream
            .read_to_end(&mut resp)
            .map_err(|e| format!("{}: read response: {e}", self.path))?;
        let text = String::from_utf8_lossy(&resp);
        let status = text
            .strip_prefix("HTTP/1.1 ")
            .and_then(|r| r.get(..3))
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{}: no HTTP response: {text:?}", self.path))?;
        if status == 200 {
            // A cut body would be shorter than announced.
            let (head, body) = text
                .split_once("\r\n\r\n")
                .ok_or_else(|| format!("{}: no end of head", self.path))?;
            if let Some(len) = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_owned())
                })
                .and_then(|v| v.parse::<usize>().ok())
            {
                if body.len() != len {
                    return Err(format!("{}: body {} of {len} bytes", self.path, body.len()));
                }
            }
        }
        Ok(status)
    }
}

/// One line per process and thread: pid, ppid, state, wchan, command line; for failure
/// messages about processes that should have exited.
pub fn describe_processes(pids: &[i32]) -> String {
    let mut out = String::new();
    for &p in pids {
        let (st, ppid) = rworker_testkit::procfs::stat(p).map_or(('?', 0), |s| (s.state, s.ppid));
        out.push_str(&format!(
            "pid {p} ppid {ppid} state {st} uid {:?}: {}\n",
            fs::read_to_string(format!("/proc/{p}/status"))
                .ok()
                .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Uid:").map(|v| v
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned()))),
            cmdline(p)
        ));
        if let Ok(st) = fs::read_to_string(format!("/proc/{p}/status")) {
            for l in st
                .lines()
                .filter(|l| l.starts_with("Sig") || l.starts_with("ShdPnd"))
            {
                out.push_str(&format!("    {l}\n"));
            }
        }
        if let Ok(rd) = fs::read_dir(format!("/proc/{p}/fd")) {
            let fds: Vec<String> = rd
                .flatten()
                .filter_map(|e| {
                    fs::read_link(e.path())
                        .ok()
                        .map(|l| format!("{}->{}", e.file_name().to_string_lossy(), l.display()))
                })
                .collect();
            out.push_str(&format!("    fds {}\n", fds.join(" ")));
        }
        if let Ok(rd) = fs::read_dir(format!("/proc/{p}/task")) {
            for t in rd.flatten() {
                let tid = t.file_name().to_string_lossy().into_owned();
                let wchan = fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
                let tst = proc_state(tid.parse().unwrap_or(0)).unwrap_or('?');
                out.push_str(&format!("    task {tid} {tst} {wchan}\n"));
            }
        }
    }
    out
}

impl RawConn {
    /// Like [`RawConn::connect`], through [`connect_with_rcvbuf`].
    pub fn connect_with_rcvbuf(addr: &str, bytes: i32) -> RawConn {
        RawConn::from_stream(connect_with_rcvbuf(addr, bytes))
    }
}

/// A TCP connection to `addr` (an IPv4 `host:port`) whose SO_RCVBUF is `bytes`, set before
/// connect so that the window offered in the handshake is that small too: a slow reader
/// that does not let the kernel buffer megabytes on its side.
pub fn connect_with_rcvbuf(addr: &str, bytes: i32) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sa: std::net::SocketAddrV4 = addr.parse().unwrap_or_else(|e| panic!("{addr}: {e}"));
    // SAFETY: a fresh socket; setsockopt(2) with a valid int option and connect(2) with a
    // valid sockaddr_in; from_raw_fd takes the only copy of the descriptor.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let s = TcpStream::from_raw_fd(fd);
        let rc = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &bytes as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "setsockopt SO_RCVBUF");
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: sa.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*sa.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            &sin as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect {addr}: {}", std::io::Error::last_os_error());
        s
    }
}

/// Lets this process open thousands of sockets.
pub fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max.min(65536);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

/// Opens `n` connections that each made one request (`/index.html`) and now idle in
/// keep-alive.
pub fn idle_keep_alive_connections(s: &Server, n: usize) -> Vec<RawConn> {
    let req = RawConn::get_request("/index.html");
    // Each client sends its first request as soon as it is connected, as real ones do.
    let mut conns: Vec<RawConn> = (0..n)
        .map(|_| {
            let mut c = RawConn::connect(&s.addr());
            c.send(req.as_bytes());
            c
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let r = c.read_response();
        assert_eq!(r.status, 200, "first response on idle connection {i}");
    }
    conns
}

/// Waits until `pids` (old children) are all gone and the parent has no unreaped
/// children; polls, generously (a loaded machine only makes it slower).
pub fn assert_gone_and_reaped(s: &Server, pids: &[i32], what: &str) {
    let gone = wait_until(Duration::from_secs(30), || {
        pids.iter().all(|&p| !pid_alive(p))
    });
    let alive: Vec<_> = pids.iter().copied().filter(|&p| pid_alive(p)).collect();
    assert!(
        gone,
        "{what}: old children {alive:?} still alive 30 s later"
    );
    let reaped = wait_until(Duration::from_secs(15), || s.zombie_children().is_empty());
    assert!(
        reaped,
        "{what}: zombie children of the parent: {:?}",
        s.zombie_children()
    );
}

// ------------------------------------------------------------------------------------------
// Raw keep-alive clients on TcpStream (the park tests)

/// A keep-alive request for `/index.html`.
pub const REQ: &[u8] = b"GET /index.html HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// A response read by [`read_reply`]: its status, and whether it said `Connection: close`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub close: bool,
}

/// How a response failed to arrive: the connection ended (`Eof`: a FIN; `Reset`: a RST;
/// `Other`: another error) or the read timed out, after `bytes` bytes of it; or what came
/// was no HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoReply {
    Eof { bytes: usize },
    Reset { bytes: usize },
    Timeout { bytes: usize },
    Other { bytes: usize, error: String },
    Malformed(String),
}

/// Reads one response (head, and a body framed by Content-Length) off `c`.
pub fn read_reply(c: &mut TcpStream) -> Result<Reply, NoReply> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut more = |buf: &mut Vec<u8>| -> Result<(), NoReply> {
        let bytes = buf.len();
        match c.read(&mut chunk) {
            Ok(0) => Err(NoReply::Eof { bytes }),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(match e.kind() {
                std::io::ErrorKind::ConnectionReset => NoReply::Reset { bytes },
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    NoReply::Timeout { bytes }
                }
                _ => NoReply::Other {
                    bytes,
                    error: e.to_string(),
                },
            }),
        }
    };
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        more(&mut buf)?;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
    };
    let len: usize = header("content-length:").map_or(0, |v| v.parse().unwrap_or(0));
    let close = header("connection:").is_some_and(|v| v == "close");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| NoReply::Malformed(head.clone()))?;
    while buf.len() < end + 4 + len {
        more(&mut buf)?;
    }
    Ok(Reply { status, close })
}

/// Reads one response off `c`; its status, or None if none came whole.
pub fn read_response(c: &mut TcpStream) -> Option<u16> {
    read_reply(c).ok().map(|r| r.status)
}

/// Opens `n` connections that each made one request ([`REQ`]) and now idle in keep-alive.
pub fn idle_connections(s: &Server, n: usize) -> Vec<TcpStream> {
    // Each client sends its first request as soon as it is connected, as real ones do.
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|i| {
            let mut c = TcpStream::connect(s.addr()).unwrap_or_else(|e| panic!("connect {i}: {e}"));
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.write_all(REQ).unwrap();
            c
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(
            read_response(c),
            Some(200),
            "first response on idle connection {i}"
        );
    }
    conns
}

/// Polls `?auto` until ConnsAsyncKeepAlive counts `n` parked connections (the status
/// requests' own connections, parked until their close is seen, may add a few).
pub fn wait_parked(s: &Server, n: u64, what: &str) {
    let mut last = 0;
    let ok = wait_until(Duration::from_secs(15), || {
        last = s.server_status_auto().num("ConnsAsyncKeepAlive");
        (n..=n + 4).contains(&last)
    });
    assert!(ok, "{what}: ConnsAsyncKeepAlive {last}, not {n}");
}

/// The server's count of parked heads.
pub fn parked_heads(s: &Server) -> Option<u64> {
    s.try_server_status_auto()
        .ok()
        .map(|st| st.num("RWorkerParkedHeads"))
}

/// Polls `?auto` until the server counts at least `n` parked heads (or handshakes).
pub fn assert_parked_heads(s: &Server, n: u64, limit: Duration) {
    let mut last = None;
    let ok = wait_until(limit, || {
        last = parked_heads(s);
        last.is_some_and(|h| h >= n)
    });
    let status = s.try_server_status_auto().map(|st| {
        [
            "ConnsTotal",
            "RWorkerParked",
            "BusyWorkers",
            "Processes",
            "RWorkerConnections",
        ]
        .map(|k| format!("{k} {}", st.get(k)))
        .join(", ")
    });
    assert!(
        ok,
        "fewer than {n} heads parked: RWorkerParkedHeads = {last:?} ({status:?})"
    );
}

/// Clients that each send one more header byte every 2 s (one thread for all), never
/// finishing their heads; counts those the server closed.
pub struct Dribblers {
    closed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Dribblers {
    /// Starts dribbling on `conns` (non-blocking streams: a read that would block means
    /// the server has said nothing).
    pub fn start<S: Read + Write + Send + 'static>(mut conns: Vec<S>) -> Dribblers {
        let closed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (cl, sp) = (closed.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let n = conns.len();
            let start = Instant::now();
            let mut next: Vec<Duration> = (0..n)
                .map(|i| Duration::from_millis((i as u64 * 2000) / n.max(1) as u64))
                .collect();
            let mut open = vec![true; n];
            while !sp.load(Ordering::Relaxed) {
                let now = start.elapsed();
                for (i, c) in conns.iter_mut().enumerate() {
                    if !open[i] || now < next[i] {
                        continue;
                    }
                    next[i] += Duration::from_secs(2);
                    let mut b = [0u8; 64];
                    // Anything from the server (a 408, its FIN, a reset) ends it.
                    let gone = c.write_all(b"x").is_err()
                        || !matches!(c.read(&mut b), Err(ref e) if e.kind() == ErrorKind::WouldBlock);
                    if gone {
                        open[i] = false;
                        cl.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Dribblers {
            closed,
            stop,
            thread: Some(thread),
        }
    }

    pub fn closed(&self) -> usize {
        self.closed.load(Ordering::Relaxed)
    }
}

impl Drop for Dribblers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A self-signed certificate for `cn` and its key, made by the openssl CLI in a new temp
/// dir (kept while the returned value lives); `newkey` is `req -newkey`'s argument and
/// options (`["rsa:2048"]`, or `["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]` for
/// cheap handshakes). Returns the dir, the certificate's path and the key's.
pub fn self_signed_cert(cn: &str, newkey: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let certs = tempfile::tempdir().expect("temp dir");
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey"])
        .args(newkey)
        .args(["-nodes", "-days", "2", "-subj", &format!("/CN={cn}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl")
        .status
        .success();
    assert!(made, "openssl could not make a test certificate");
    (certs, cert, key)
}

/// Reads until the server closes (or the stream's read timeout): what it sent, and when
/// (from `start`).
pub fn read_until_closed<S: Read>(c: &mut S, start: Instant) -> (String, Duration) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return (String::from_utf8_lossy(&got).into_owned(), start.elapsed()),
            Ok(k) => got.extend_from_slice(&buf[..k]),
        }
    }
}

/// The first line of what the server sent.
pub fn first_line(got: &str) -> String {
    got.lines().next().unwrap_or("").to_string()
}
