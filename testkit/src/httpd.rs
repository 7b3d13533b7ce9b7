//! One private httpd, named by its own config file and pidfile.
//!
//! It is started with `apache2 -f <conf> -k start` and stopped with `apache2 -f <conf> -k stop`;
//! the last resort is SIGKILL of exactly the pid in its own pidfile and that parent's children.
//! Never by process name: other apache2 instances (the system's, other tests') may run on the
//! same host.

use crate::procfs;
use crate::wait::wait_until;
use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::io;
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Debian's httpd binary; the tests run [`crate::install::apache2`], which the environment
/// may point elsewhere.
pub const APACHE2: &str = crate::install::DEBIAN_APACHE2;

/// The files that name one private httpd: all it takes to start, find and stop it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Httpd {
    /// Its private httpd.conf (`apache2 -f`).
    pub conf: PathBuf,
    /// Its `PidFile`.
    pub pidfile: PathBuf,
    /// Its `ErrorLog` (quoted when a start fails).
    pub error_log: PathBuf,
}

/// Why [`Httpd::start`] did not bring the server up.
#[derive(Clone, Debug)]
pub struct StartFailure {
    /// What was run and what it said: status, stdout, stderr, error log.
    pub text: String,
}

impl StartFailure {
    /// Whether httpd could not bind its port: another process took it between
    /// [`crate::port::free_port`] and httpd's bind, so a retry on another port may succeed.
    pub fn port_in_use(&self) -> bool {
        says_port_in_use(&self.text)
    }
}

/// Whether httpd's output (console or error log) says it could not bind its port.
pub fn says_port_in_use(text: &str) -> bool {
    text.contains("Address already in use")
}

impl fmt::Display for StartFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for StartFailure {}

impl Httpd {
    /// The usual layout under a ServerRoot: `httpd.conf`, `run/httpd.pid`, `logs/error.log`.
    pub fn in_root(root: impl Into<PathBuf>) -> Httpd {
        let root = root.into();
        Httpd {
            conf: root.join("httpd.conf"),
            pidfile: root.join("run/httpd.pid"),
            error_log: root.join("logs/error.log"),
        }
    }

    /// Creates the directories of that layout under an existing `root`: `run/`, `logs/`,
    /// `htdocs/` and `docroot_subdirs` under it. The root and the DocumentRoot tree get mode 755:
    /// the children run as `User www-data` and must traverse the root and read the files.
    pub fn create_root(root: impl Into<PathBuf>, docroot_subdirs: &[&str]) -> io::Result<Httpd> {
        let root = root.into();
        let context = |what: &str, p: &Path, e: io::Error| {
            io::Error::new(e.kind(), format!("{what} {}: {e}", p.display()))
        };
        let docroot = root.join("htdocs");
        let subdirs = docroot_subdirs.iter().map(|d| docroot.join(d));
        for dir in [root.join("run"), root.join("logs"), docroot.clone()]
            .into_iter()
            .chain(subdirs.clone())
        {
            fs::create_dir_all(&dir).map_err(|e| context("mkdir", &dir, e))?;
        }
        for dir in [root.clone(), docroot.clone()].into_iter().chain(subdirs) {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
                .map_err(|e| context("chmod 755", &dir, e))?;
        }
        Ok(Httpd::in_root(root))
    }

    /// Runs `apache2 -f <conf> <args>` to completion; the exit status is not checked.
    pub fn apache2(&self, args: &[&str]) -> io::Result<Output> {
        self.apache2_with_open_files(args, None)
    }

    /// As [`Httpd::apache2`], with the (soft, hard) open-file limit set for the command
    /// and what it starts (None: this process's).
    pub fn apache2_with_open_files(
        &self,
        args: &[&str],
        open_files: Option<(u64, u64)>,
    ) -> io::Result<Output> {
        let apache2 = crate::install::apache2();
        let mut cmd = Command::new(&apache2);
        cmd.arg("-f")
            .arg(&self.conf)
            .args(args)
            .stdin(Stdio::null());
        if let Some((soft, hard)) = open_files {
            let limit = libc::rlimit {
                rlim_cur: soft as libc::rlim_t,
                rlim_max: hard as libc::rlim_t,
            };
            // SAFETY: the closure runs in the forked child before exec and only calls
            // setrlimit(2), which is async-signal-safe, on a value it owns.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.output().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "run {} -f {} {}: {e}",
                    apache2.display(),
                    self.conf.display(),
                    args.join(" ")
                ),
            )
        })
    }

    /// The pid in its pidfile, if there is one (the parent, once it is up).
    pub fn pid(&self) -> Option<i32> {
        fs::read_to_string(&self.pidfile).ok()?.trim().parse().ok()
    }

    /// The error log's text (empty if there is none yet).
    pub fn error_log_text(&self) -> String {
        fs::read_to_string(&self.error_log).unwrap_or_default()
    }

    /// `apache2 -k start`, then waits up to `timeout` until the pidfile names a live parent and
    /// 127.0.0.1:`port` accepts connections (httpd opens its listeners before it writes the
    /// pidfile, so both are awaited). Returns the parent's pid. On failure the server may be
    /// half up: the caller stops it ([`Httpd::stop`]) before retrying or giving up.
    pub fn start(&self, port: u16, timeout: Duration) -> Result<i32, StartFailure> {
        self.start_with_open_files(port, timeout, None)
    }

    /// As [`Httpd::start`], with the server's (soft, hard) open-file limit set to
    /// `open_files` (None: this process's).
    pub fn start_with_open_files(
        &self,
        port: u16,
        timeout: Duration,
        open_files: Option<(u64, u64)>,
    ) -> Result<i32, StartFailure> {
        let out = self
            .apache2_with_open_files(&["-k", "start"], open_files)
            .map_err(|e| StartFailure {
                text: e.to_string(),
            })?;
        let up = out.status.success()
            && wait_until(timeout, || {
                self.pid().is_some_and(procfs::alive)
                    && TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
        match self.pid() {
            Some(parent) if up => Ok(parent),
            _ => Err(StartFailure {
                text: format!(
                    "apache2 -f {} -k start: {}{}\nstdout:\n{}\nstderr:\n{}\nerror log:\n{}",
                    self.conf.display(),
                    out.status,
                    if out.status.success() {
                        format!(", but no live parent in the pidfile answering on port {port} within {timeout:?}")
                    } else {
                        String::new()
                    },
                    String::from_utf8_lossy(&out.stdout).trim(),
                    String::from_utf8_lossy(&out.stderr).trim(),
                    self.error_log_text()
                ),
            }),
        }
    }

    /// Stops the server by its pidfile: `apache2 -k stop`, then waits up to `timeout` for the
    /// parent and its children to exit; as a last resort SIGKILLs exactly those pids. Does
    /// nothing if the pidfile names no live process (never started, or already stopped).
    /// Returns whether it had to SIGKILL.
    pub fn stop(&self, timeout: Duration) -> bool {
        let Some(parent) = self.pid().filter(|&p| procfs::alive(p)) else {
            return false;
        };
        // The children are collected before the stop and while waiting: once the parent is
        // gone, its orphans are no longer its children.
        let mut family: BTreeSet<i32> = procfs::live_children(parent);
        family.insert(parent);
        let _ = self.apache2(&["-k", "stop"]);
        let gone = wait_until(timeout, || {
            if procfs::alive(parent) {
                family.extend(procfs::live_children(parent));
            }
            family.iter().all(|&p| !procfs::alive(p))
        });
        if gone {
            return false;
        }
        for &pid in &family {
            if procfs::alive(pid) {
                // SAFETY: kill(2) of a pid read from this server's own pidfile, or a child of it.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        true
    }
}
