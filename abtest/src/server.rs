//! One private httpd for one MPM: ServerRoot in a temp dir, config from `apache-conf/ab/`,
//! started and stopped only through `apache2 -f <its conf> -k start|stop` and its own pidfile.
//! Its one listener speaks HTTP, or with `--tls` only HTTPS ([`crate::tls`]).

use crate::bail;
use crate::error::{Context, Error, Result};
use crate::mpm::{MpmKind, COMMON_TEMPLATE};
use crate::shutdown::Registry;
use rworker_testkit::httpd::Httpd;
use rworker_testkit::port::free_port;
use rworker_testkit::wait::wait_until;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

pub use rworker_testkit::error_log::is_crash_line;
pub use rworker_testkit::httpd::APACHE2;

/// How long `apache2 -k stop` may take before the last resort (SIGKILL by the pidfile).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Name of the payload file of `size` bytes in the DocumentRoot.
pub fn payload_path(size: u64) -> String {
    format!("/{size}.bin")
}

/// A running (or just stopped) httpd started by the harness.
#[derive(Debug)]
pub struct Server {
    /// The config it was started with.
    pub kind: MpmKind,
    /// Private ServerRoot (removed after a clean stop).
    pub root: PathBuf,
    /// Port on 127.0.0.1.
    pub port: u16,
    /// Whether the port speaks only TLS (`--tls`): every request to it, the harness's own
    /// included, is HTTPS.
    pub tls: bool,
    /// The parent's pid, from the pidfile.
    pub parent: i32,
    /// The module copy filled into the template (see [`Server::launch_with`]).
    so: PathBuf,
    /// Its config, pidfile and error log: how it is started and stopped.
    httpd: Httpd,
    /// Bytes of the error log already checked by [`Server::check_log`].
    log_checked: u64,
    stopped: bool,
}

fn make_root(kind: MpmKind) -> Result<PathBuf> {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = base.join(format!(
            "rworker-ab-{}-{n}-{}",
            std::process::id(),
            kind.label()
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => bail!("create ServerRoot {}: {e}", dir.display()),
        }
    }
    bail!("could not create a ServerRoot under {}", base.display())
}

/// Fills a template's placeholders. `so` is the module copy the kind loads: rworker's
/// (`@RWORKER_SO@`) or worker-aa's copy of the stock worker (`@WORKER_AA_SO@`); a template
/// has at most one of the two.
fn fill(template: &str, root: &Path, port: u16, so: &Path) -> String {
    template
        .replace("@ROOT@", &root.display().to_string())
        .replace("@PORT@", &port.to_string())
        .replace("@RWORKER_SO@", &so.display().to_string())
        .replace("@WORKER_AA_SO@", &so.display().to_string())
}

/// Whether the `?auto` page has the async MPM's connection counts (`ConnsAsyncKeepAlive`):
/// mod_status prints them only when the MPM answers `AP_MPMQ_IS_ASYNC` with 1, which rworker
/// does in park mode and the stock worker never does.
pub fn shows_async_counts(auto_body: &str) -> bool {
    auto_body
        .lines()
        .any(|l| l.trim_start().starts_with("ConnsAsyncKeepAlive:"))
}

/// Whether `/proc/<pid>/maps` text maps `file`.
pub fn maps_file(maps: &str, file: &Path) -> bool {
    let want = file.display().to_string();
    maps.lines()
        .any(|l| l.split_whitespace().nth(5) == Some(want.as_str()))
}

/// Replaces the value of each top-level directive named in `overrides` (`("ThreadsPerChild",
/// "25")`): the line `Name old-value` becomes `Name new-value`. Every name must occur exactly
/// once in `conf`, so that a renamed template line cannot silently leave the old value in place.
pub fn override_directives(conf: &str, overrides: &[(&str, String)]) -> Result<String> {
    let mut out = String::with_capacity(conf.len());
    let mut seen = vec![0usize; overrides.len()];
    for line in conf.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        match overrides
            .iter()
            .position(|(n, _)| n.eq_ignore_ascii_case(name) && line.starts_with(name))
        {
            Some(i) => {
                seen[i] += 1;
                out.push_str(&format!("{} {}", overrides[i].0, overrides[i].1));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    for ((name, _), n) in overrides.iter().zip(seen) {
        if n != 1 {
            bail!("config override {name}: the template has {n} top-level {name} lines, not 1");
        }
    }
    Ok(out)
}

/// Is this error-log line worth showing (warn or error), though not a crash?
pub fn is_warning_line(line: &str) -> bool {
    line.contains(":warn]") || line.contains(":error]")
}

/// `GET path` over HTTP/1.0 on 127.0.0.1:port, over TLS if `tls`: `(status, body)`.
pub fn http_get(port: u16, tls: bool, path: &str) -> Result<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .context(|| format!("connect {addr}"))?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .context(|| "set_read_timeout")?;
    let mut buf = Vec::new();
    if tls {
        let mut s = crate::tls::connect(tcp)?;
        match exchange(&mut s, path, &mut buf) {
            // A TCP close without close_notify after the response: the response is all there
            // is to HTTP/1.0 (OpenSSL 3 calls that an unexpected EOF).
            Err(_) if !buf.is_empty() => {}
            r => r.context(|| format!("GET {path} from https://{addr}"))?,
        }
    } else {
        let mut s = tcp;
        exchange(&mut s, path, &mut buf).context(|| format!("GET {path} from {addr}"))?;
    }
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok());
    let Some(status) = status else {
        bail!(
            "GET {path} on {addr}: no HTTP status line in {:?}",
            text.chars().take(200).collect::<String>()
        );
    };
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

/// Sends `GET path` (HTTP/1.0, so the server closes after it) and reads the response into
/// `buf` until the server closes.
fn exchange(s: &mut (impl Read + Write), path: &str, buf: &mut Vec<u8>) -> std::io::Result<()> {
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    s.read_to_end(buf).map(drop)
}

impl Server {
    /// Writes a private ServerRoot for `kind` (config, payload files of `sizes` bytes) and
    /// starts it with `apache2 -k start`; waits until the pidfile's parent runs and the port
    /// answers. Does not check what MPM it runs: see [`Server::verify`]. `rworker_so` is the
    /// module copy the kind's template loads ([`crate::mpm::Modules::for_kind`]: rworker's,
    /// the baseline's, or worker-aa's copy of the stock worker); the stock kinds ignore it.
    pub fn launch(kind: MpmKind, sizes: &[u64], rworker_so: &Path) -> Result<Server> {
        Server::launch_with(kind, sizes, rworker_so, &[], None)
    }

    /// [`Server::launch`] with some directives of the shared `common.conf` changed (see
    /// [`override_directives`]), and with `tls` (the run's certificate directory) its one
    /// listener speaking only TLS ([`crate::tls::common_conf`]): the same change for every
    /// MPM, so their configs still differ only in the MPM lines.
    pub fn launch_with(
        kind: MpmKind,
        sizes: &[u64],
        rworker_so: &Path,
        overrides: &[(&str, String)],
        tls: Option<&Path>,
    ) -> Result<Server> {
        let common = override_directives(COMMON_TEMPLATE, overrides)?;
        let common = match tls {
            Some(dir) => crate::tls::common_conf(&common, dir)?,
            None => common,
        };
        if kind.is_rworker() && !rworker_so.is_file() {
            bail!(
                "rworker module {} not found: build it with cargo build --release -p rworker \
                 (or pass --rworker-so)",
                rworker_so.display()
            );
        }
        if kind.loads_copy() && !rworker_so.is_file() {
            bail!("{kind}: module copy {} not found", rworker_so.display());
        }
        let root = make_root(kind)?;
        let mut server = Server {
            kind,
            root: root.clone(),
            port: 0,
            tls: tls.is_some(),
            parent: 0,
            so: rworker_so.to_path_buf(),
            httpd: Httpd::create_root(&root, &[]).map_err(|e| Error(e.to_string()))?,
            log_checked: 0,
            stopped: true,
        };
        for &size in sizes {
            let bytes: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
            let p = root.join("htdocs").join(format!("{size}.bin"));
            fs::write(&p, bytes).context(|| format!("write {}", p.display()))?;
        }
        fs::write(root.join("htdocs/index.html"), "rworker-ab\n").context(|| "write index.html")?;

        let mut last = String::new();
        for _attempt in 0..3 {
            server.port = free_port().map_err(|e| Error(e.to_string()))?;
            fs::write(
                root.join("common.conf"),
                fill(&common, &root, server.port, rworker_so),
            )
            .context(|| "write common.conf")?;
            fs::write(
                &server.httpd.conf,
                fill(kind.template(), &root, server.port, rworker_so),
            )
            .context(|| "write httpd.conf")?;
            let _ = fs::write(&server.httpd.error_log, "");
            let Some(mut reg) = Registry::begin_start() else {
                bail!("interrupted: not starting {kind}");
            };
            reg.add(server.httpd.clone());
            server.stopped = false;
            let started = server.httpd.start(server.port, Duration::from_secs(15));
            drop(reg);
            match started {
                Ok(parent) => {
                    server.parent = parent;
                    return Ok(server);
                }
                Err(failure) => {
                    server.stop_quietly();
                    let retry = failure.port_in_use();
                    last = failure.text;
                    if !retry {
                        break;
                    }
                }
            }
        }
        bail!(
            "{kind}: server did not start (ServerRoot kept: {})\n{last}",
            root.display()
        )
    }

    /// [`Server::launch`] then [`Server::verify`]; on a failed check the server is stopped.
    pub fn start(kind: MpmKind, sizes: &[u64], rworker_so: &Path) -> Result<(Server, String)> {
        Server::start_with(kind, sizes, rworker_so, &[], None)
    }

    /// [`Server::launch_with`] then [`Server::verify`]; on a failed check the server is stopped.
    pub fn start_with(
        kind: MpmKind,
        sizes: &[u64],
        rworker_so: &Path,
        overrides: &[(&str, String)],
        tls: Option<&Path>,
    ) -> Result<(Server, String)> {
        let mut s = Server::launch_with(kind, sizes, rworker_so, overrides, tls)?;
        match s.verify(kind) {
            Ok(what) => Ok((s, what)),
            Err(e) => {
                s.stop_quietly();
                Err(e)
            }
        }
    }

    /// Checks that the running server is `expect`: `server-status?auto` shows its
    /// `ServerMPM`, and the async connection counts exactly when the kind parks keep-alive
    /// connections ([`MpmKind::parks`]; where the kind takes the module's default, which mode
    /// ran is reported); the parent maps the kind's module file ([`MpmKind::module_file`]:
    /// worker-aa its copy, worker Debian's); for rworker, the error log's AH00294 line names
    /// its queue kind. Returns a one-line description of what was found.
    pub fn verify(&self, expect: MpmKind) -> Result<String> {
        let (status, body) = http_get(self.port, self.tls, "/server-status?auto")?;
        if status != 200 {
            bail!(
                "{expect}: GET /server-status?auto on port {} gave {status}",
                self.port
            );
        }
        let found = body
            .lines()
            .find_map(|l| l.strip_prefix("ServerMPM:"))
            .map(str::trim)
            .unwrap_or("(no ServerMPM line)");
        if found != expect.server_mpm() {
            bail!(
                "expected MPM {expect} but server-status?auto says ServerMPM: {found} \
                 (config {})",
                self.httpd.conf.display()
            );
        }
        let mut what = format!("ServerMPM: {found}");
        if self.tls {
            what.push_str(", over TLS");
        }
        let parks = shows_async_counts(&body);
        if let Some(want) = expect.parks() {
            if want != parks {
                bail!(
                    "expected {expect} to {} keep-alive connections, but server-status?auto {} \
                     (config {})",
                    if want { "park" } else { "hold on a thread" },
                    if parks {
                        "has ConnsAsyncKeepAlive (an async MPM: it parks)"
                    } else {
                        "has no ConnsAsyncKeepAlive (not async: a thread holds them)"
                    },
                    self.httpd.conf.display()
                );
            }
        }
        let module = expect.module_file(&self.so);
        let maps = fs::read_to_string(format!("/proc/{}/maps", self.parent)).unwrap_or_default();
        if !maps_file(&maps, module) {
            bail!(
                "expected {expect} to load {} but httpd {} does not map it (config {})",
                module.display(),
                self.parent,
                self.httpd.conf.display()
            );
        }
        if let Some(want) = expect.queue_log() {
            // The AH00294 line is written once the parent is up; give it a moment.
            let mut log = String::new();
            wait_until(Duration::from_secs(5), || {
                log = fs::read_to_string(&self.httpd.error_log).unwrap_or_default();
                log.contains("AH00294")
            });
            let Some(line) = log.lines().find(|l| l.contains("AH00294")) else {
                bail!(
                    "{expect}: no AH00294 line in {} (LogLevel mpm_rworker:debug must be set):\n{log}",
                    self.httpd.error_log.display()
                );
            };
            if !line.contains(want) {
                bail!("expected {expect} (\"{want}\") but the error log says:\n{line}");
            }
            what.push_str(&format!(", error log: \"{want}\""));
        }
        // After the queue kind, so the lines read as before up to there.
        if expect.is_rworker() {
            what.push_str(if parks {
                ", keep-alive: park (ConnsAsyncKeepAlive)"
            } else {
                ", keep-alive: thread (no ConnsAsyncKeepAlive)"
            });
        }
        if expect == MpmKind::WorkerAa {
            what.push_str(&format!(", maps {}", module.display()));
        }
        Ok(what)
    }

    /// Reads the error log written since the last call: `Err` on a crash line (see
    /// [`is_crash_line`]), else the warn/error lines, which the caller reports.
    pub fn check_log(&mut self) -> Result<Vec<String>> {
        let text = fs::read(&self.httpd.error_log)
            .context(|| format!("read {}", self.httpd.error_log.display()))?;
        let start = (self.log_checked as usize).min(text.len());
        let new = String::from_utf8_lossy(&text[start..]).to_string();
        self.log_checked = text.len() as u64;
        let crashes: Vec<&str> = new.lines().filter(|l| is_crash_line(l)).collect();
        if !crashes.is_empty() {
            bail!(
                "{}: CRASH in the error log ({}):\n{}",
                self.kind,
                self.httpd.error_log.display(),
                crashes.join("\n")
            );
        }
        Ok(new
            .lines()
            .filter(|l| is_warning_line(l))
            .map(String::from)
            .collect())
    }

    /// Stops the server by its pidfile and checks the error log one last time. Removes the
    /// ServerRoot when everything was clean.
    pub fn stop(mut self) -> Result<Vec<String>> {
        let killed = self.stop_quietly();
        let warnings = self.check_log();
        if killed {
            bail!(
                "{}: apache2 -k stop did not end the server within 15 s; SIGKILLed it (ServerRoot kept: {})",
                self.kind,
                self.root.display()
            );
        }
        let warnings = warnings?;
        let _ = fs::remove_dir_all(&self.root);
        Ok(warnings)
    }

    /// Stops without checking anything; returns whether it had to SIGKILL.
    fn stop_quietly(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        self.stopped = true;
        let killed = self.httpd.stop(STOP_TIMEOUT);
        Registry::remove(&self.httpd.conf);
        killed
    }

    /// Its config, pidfile and error log: what the signal handler needs to stop it.
    pub fn httpd(&self) -> &Httpd {
        &self.httpd
    }
    /// `http://127.0.0.1:port<path>`, or `https://` with `--tls`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_quietly();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which lines are crashes is rworker-testkit's rule (and its tests); these are the lines
    /// the report lists as warnings.
    #[test]
    fn warning_lines_are_recognised() {
        let ok = "[mpm_worker:notice] [pid 1] AH00292: Apache/2.4 configured -- resuming";
        assert!(!is_crash_line(ok));
        assert!(!is_warning_line(ok));
        assert!(is_warning_line(
            "[mpm_worker:error] [pid 1] AH00286: server reached MaxRequestWorkers"
        ));
    }

    #[test]
    fn async_counts_and_mapped_modules_are_recognised() {
        let worker = "ServerMPM: worker\nBusyWorkers: 1\nIdleWorkers: 49\nScoreboard: _W\n";
        let park = "ServerMPM: rworker\nConnsTotal: 3\nConnsAsyncWriting: 0\n\
                    ConnsAsyncKeepAlive: 2\nConnsAsyncClosing: 0\nRWorkerParked: 2\n";
        assert!(!shows_async_counts(worker));
        assert!(shows_async_counts(park));
        let maps = "7f00-7f01 r--p 00000000 08:01 123 /usr/lib/apache2/modules/mod_mpm_worker.so\n\
                    7f02-7f03 r-xp 00001000 08:01 456 /tmp/rworker-ab-9-mod_mpm_worker-aa.so/mod_mpm_worker-aa.so\n\
                    7f04-7f05 rw-p 00000000 00:00 0 \n";
        assert!(maps_file(maps, Path::new(crate::mpm::STOCK_WORKER_SO)));
        assert!(maps_file(
            maps,
            Path::new("/tmp/rworker-ab-9-mod_mpm_worker-aa.so/mod_mpm_worker-aa.so")
        ));
        // A prefix of a mapped path is not that path.
        assert!(!maps_file(
            maps,
            Path::new("/usr/lib/apache2/modules/mod_mpm_worker")
        ));
        assert!(!maps_file(maps, Path::new(crate::mpm::STOCK_EVENT_SO)));
    }

    #[test]
    fn overrides_replace_exactly_one_top_level_line() {
        let o = |n: &'static str, v: &str| (n, v.to_string());
        let conf = override_directives(
            COMMON_TEMPLATE,
            &[o("StartServers", "1"), o("ThreadsPerChild", "25")],
        )
        .expect("both directives are in common.conf");
        assert!(conf.lines().any(|l| l == "StartServers 1"));
        assert!(conf.lines().any(|l| l == "ThreadsPerChild 25"));
        assert!(!conf.contains("ThreadsPerChild         50"));
        assert_eq!(conf.lines().count(), COMMON_TEMPLATE.lines().count());
        // A comment mentioning a directive is not the directive; a missing one is an error.
        assert!(override_directives(
            "# StartServers 3\nStartServers 2\n",
            &[o("StartServers", "1")]
        )
        .is_ok_and(|c| c == "# StartServers 3\nStartServers 1\n"));
        assert!(override_directives(COMMON_TEMPLATE, &[o("NoSuchDirective", "1")]).is_err());
    }

    #[test]
    fn templates_differ_only_in_the_mpm_lines() {
        let so = Path::new("/x/libmod_mpm_rworker.so");
        let lines = |k: MpmKind| -> Vec<String> {
            fill(k.template(), Path::new("/r"), 1, so)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .map(String::from)
                .collect()
        };
        for k in MpmKind::ALL {
            let l = lines(k);
            assert_eq!(
                l.last().map(String::as_str),
                Some("Include /r/common.conf"),
                "{k}"
            );
            assert!(
                l[0].starts_with(&format!("LoadModule mpm_{}_module ", k.server_mpm())),
                "{k}"
            );
            let extra: Vec<&String> = l[1..l.len() - 1].iter().collect();
            assert!(!l.iter().any(|x| x.contains('@')), "{k}: unfilled: {l:?}");
            if k.loads_copy() {
                assert!(l[0].ends_with(" /x/libmod_mpm_rworker.so"), "{k}: {}", l[0]);
            } else {
                assert!(
                    l[0].ends_with(&format!(" {}", k.module_file(so).display())),
                    "{k}"
                );
            }
            match k {
                MpmKind::RworkerApr => {
                    assert_eq!(extra, vec!["RWorkerKeepAlive thread", "RWorkerQueue apr"])
                }
                MpmKind::RworkerThread => assert_eq!(extra, vec!["RWorkerKeepAlive thread"]),
                MpmKind::RworkerPark | MpmKind::RworkerParkBase => {
                    assert_eq!(extra, vec!["RWorkerKeepAlive park"])
                }
                MpmKind::RworkerListener => {
                    assert_eq!(
                        extra,
                        vec!["RWorkerKeepAlive thread", "RWorkerAccept listener"]
                    )
                }
                _ => assert!(extra.is_empty(), "{k}: {extra:?}"),
            }
            // What the start-up check expects of the keep-alive mode follows the template.
            let mode = extra
                .iter()
                .find_map(|e| e.strip_prefix("RWorkerKeepAlive "))
                .map(|m| m == "park");
            if k.is_rworker() {
                assert_eq!(k.parks(), mode, "{k}");
            }
        }
        let common = fill(COMMON_TEMPLATE, Path::new("/r"), 1, so);
        assert!(!common.contains('@'), "unfilled placeholder in common.conf");
        assert!(!common.contains("CustomLog"), "access log must be off");
        assert!(common.contains("Listen 127.0.0.1:1"));
    }
}
