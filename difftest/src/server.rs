//! One private httpd of a run: its ServerRoot under a temp directory, started with
//! `apache2 -f <its conf> -k start`, signalled and stopped through that same config and its
//! own pidfile (rworker-testkit's [`Httpd`]); never by process name.

use crate::mpm::Mpm;
use crate::site::{self, Ports, Site};
use crate::status;
use rworker_testkit::error_log::crash_lines;
use rworker_testkit::httpd::Httpd;
use rworker_testkit::port::free_port;
use rworker_testkit::procfs;
use rworker_testkit::wait::wait_until;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a start may take on a loaded machine.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a fresh server may take to answer server-status on a loaded machine.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long `-k stop` may take before the last resort (SIGKILL of the pidfile's pids).
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// A server of the run.
#[derive(Debug)]
pub struct Server {
    pub mpm: Mpm,
    /// The site it is started from.
    pub site: Site,
    pub root: PathBuf,
    pub ports: Ports,
    httpd: Httpd,
    rworker_so: PathBuf,
    /// The parent's pid from the last start.
    parent: Option<i32>,
    /// Set by [`Server::graceful_stop`]: the parent is on its way out, whatever its
    /// pidfile says yet (it removes the file once it has read the signal).
    stopping: AtomicBool,
}

/// Two free ports that every address of the site can bind (a moment ago).
fn free_ports() -> Result<Ports, String> {
    let bindable_everywhere = |p: u16| {
        site::ADDRESSES[1..]
            .iter()
            .all(|ip| TcpListener::bind((*ip, p)).is_ok())
    };
    for _ in 0..20 {
        let plain = free_port().map_err(|e| e.to_string())?;
        let tls = free_port().map_err(|e| e.to_string())?;
        if plain != tls && bindable_everywhere(plain) && bindable_everywhere(tls) {
            return Ok(Ports { plain, tls });
        }
    }
    Err("no pair of ports free on 127.0.0.1-8 in 20 tries".into())
}

impl Server {
    /// Writes a ServerRoot under `run_dir` for `mpm` and `site` (the certificate copied
    /// from `certs`) and starts it; checks that mod_status names the MPM.
    pub fn start(
        mpm: Mpm,
        site: Site,
        rworker_so: &Path,
        certs: &Path,
        run_dir: &Path,
    ) -> Result<Server, String> {
        let root = run_dir.join(mpm.label().replace(' ', "-"));
        let httpd = Httpd::create_root(&root, &[]).map_err(|e| e.to_string())?;
        site::write_docroot(&root)
            .map_err(|e| format!("DocumentRoot under {}: {e}", root.display()))?;
        let cert_dir = root.join("certs");
        fs::create_dir_all(&cert_dir).map_err(|e| e.to_string())?;
        for f in site::CERT_FILES {
            fs::copy(certs.join(f), cert_dir.join(f)).map_err(|e| format!("copy {f}: {e}"))?;
        }
        let mut server = Server {
            mpm,
            site,
            root,
            ports: Ports { plain: 0, tls: 0 },
            httpd,
            rworker_so: rworker_so.to_owned(),
            parent: None,
            stopping: AtomicBool::new(false),
        };
        server.start_on_free_ports()?;
        Ok(server)
    }

    fn start_on_free_ports(&mut self) -> Result<(), String> {
        for attempt in 0..3 {
            self.ports = free_ports()?;
            let conf = site::conf(
                &self.root,
                self.ports,
                self.mpm,
                &self.rworker_so,
                self.site,
            );
            fs::write(&self.httpd.conf, conf).map_err(|e| format!("write httpd.conf: {e}"))?;
            let _ = fs::write(&self.httpd.error_log, "");
            match self.httpd.start(self.ports.plain, START_TIMEOUT) {
                Ok(parent) => {
                    self.parent = Some(parent);
                    return self.check_mpm();
                }
                Err(failure) => {
                    self.httpd.stop(STOP_TIMEOUT);
                    if attempt < 2 && failure.port_in_use() {
                        continue;
                    }
                    return Err(format!("{} did not start: {failure}", self.mpm));
                }
            }
        }
        Err(format!("{}: no free ports in 3 tries", self.mpm))
    }

    /// The server answers, with the MPM it should have (a run must never compare a server
    /// with itself), and its children are up.
    fn check_mpm(&self) -> Result<(), String> {
        let mut last = String::new();
        let ok = wait_until(CHECK_TIMEOUT, || match status::fetch(self.ports.plain) {
            Ok(s) => {
                // An async MPM (event, rworker parking) shows the Async connections keys.
                let parks = s.get("ConnsAsyncKeepAlive").is_some();
                last = format!(
                    "{} ({})",
                    s.get("ServerMPM").unwrap_or("?"),
                    if parks { "async" } else { "not async" }
                );
                s.get("ServerMPM") == Some(self.mpm.server_mpm()) && parks == self.mpm.is_async()
            }
            Err(e) => {
                last = e;
                false
            }
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{}: server-status says ServerMPM {last:?}, expected {} ({})",
                self.mpm,
                self.mpm.server_mpm(),
                if self.mpm.is_async() {
                    "async"
                } else {
                    "not async"
                }
            ))
        }
    }

    /// Sends `sig` to the parent named by this server's own pidfile, as `apache2 -k` does
    /// (SIGUSR1 for graceful, SIGWINCH for graceful-stop), and returns the instant it was
    /// sent: the scenarios time what follows from it, and `apache2 -k` would add its own
    /// configuration pass (a second on a loaded machine) between the signal and its exit.
    fn signal(&self, sig: i32, name: &str) -> Result<Instant, String> {
        let pid = match (self.httpd.pid(), self.parent) {
            (Some(p), Some(started)) if p == started && procfs::alive(p) => p,
            (file, started) => {
                return Err(format!(
                    "{name}: the pidfile names {file:?}, the server started as {started:?}"
                ))
            }
        };
        let at = Instant::now();
        // SAFETY: kill(2) of the parent this server wrote into its own pidfile.
        if unsafe { libc::kill(pid, sig) } != 0 {
            return Err(format!(
                "{name}: kill {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(at)
    }

    /// A graceful restart; the instant the signal went.
    pub fn graceful(&self) -> Result<Instant, String> {
        self.signal(libc::SIGUSR1, "graceful")
    }

    /// A graceful stop; the instant the signal went.
    pub fn graceful_stop(&self) -> Result<Instant, String> {
        self.stopping.store(true, Ordering::Relaxed);
        self.signal(libc::SIGWINCH, "graceful-stop")
    }

    /// After a `graceful-stop`: waits for the old parent to exit (GracefulShutdownTimeout
    /// bounds it; SIGKILL of exactly that pid and its children after 20 s), then starts the
    /// server again. Does nothing while the server runs.
    pub fn ensure_running(&mut self) -> Result<(), String> {
        let Some(parent) = self.parent else {
            return self.start_on_free_ports();
        };
        if !self.stopping.load(Ordering::Relaxed) && procfs::alive(parent) {
            return Ok(());
        }
        let mut family = procfs::live_children(parent);
        family.insert(parent);
        let gone = wait_until(Duration::from_secs(20), || {
            if procfs::alive(parent) {
                family.extend(procfs::live_children(parent));
            }
            family.iter().all(|&p| !procfs::alive(p))
        });
        if !gone {
            for &pid in &family {
                if procfs::alive(pid) {
                    // SAFETY: kill(2) of this server's own parent (from its pidfile at start)
                    // or one of its children.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
        self.parent = None;
        self.stopping.store(false, Ordering::Relaxed);
        // A start on a loaded machine can fail where a second one does not.
        match self.start_on_free_ports() {
            Ok(()) => Ok(()),
            Err(first) => {
                self.httpd.stop(STOP_TIMEOUT);
                self.start_on_free_ports()
                    .map_err(|second| format!("{first}; again: {second}"))
            }
        }
    }

    /// The error log's crash lines (a crash is reported beside the table).
    pub fn crash_lines(&self) -> Vec<String> {
        crash_lines(&self.httpd.error_log_text())
    }

    /// The error log's path.
    pub fn error_log(&self) -> &Path {
        &self.httpd.error_log
    }

    /// The access log's path (the template's `CustomLog`).
    pub fn access_log(&self) -> PathBuf {
        self.root.join("logs/access.log")
    }

    /// Stops the server by its pidfile. Returns whether it took SIGKILL.
    pub fn stop(&mut self) -> bool {
        let killed = self.httpd.stop(STOP_TIMEOUT);
        self.parent = None;
        killed
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
