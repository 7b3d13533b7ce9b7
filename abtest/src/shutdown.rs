//! Ctrl-C safety: every server the harness starts is registered here, and SIGINT, SIGTERM or
//! SIGHUP stops each of them by its own pidfile (`apache2 -f <conf> -k stop`), stops the load
//! client, and exits non-zero. Servers are never stopped by process name: other apache2
//! instances may run on the same host.
//!
//! The signal handler itself only records the signal; a watcher thread does the work. Starting
//! a server holds the registry lock, so a signal that arrives mid-start waits for the start to
//! finish (and for the pidfile to exist) and then stops that server too; once shutdown began,
//! [`Registry::begin_start`] refuses to start anything new.

use rworker_testkit::httpd::Httpd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The signal that arrived, or 0. Written by the async-signal handler, read by the watcher.
static CAUGHT: AtomicI32 = AtomicI32::new(0);
/// The pid of the running load client (wrk), or 0, so the watcher can stop it too.
static CLIENT_PID: AtomicI32 = AtomicI32::new(0);

/// The servers currently started, by config path.
pub struct Registry {
    servers: Vec<Httpd>,
    /// Private files (the module snapshot) to remove when a signal ends the run.
    scratch: Vec<PathBuf>,
    /// Files to write back (a kernel switch the run changed) when a signal ends the run.
    restore: Vec<(PathBuf, String)>,
    shutting_down: bool,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    servers: Vec::new(),
    scratch: Vec::new(),
    restore: Vec::new(),
    shutting_down: false,
});

fn lock() -> MutexGuard<'static, Registry> {
    // A panic while holding the lock leaves the list itself intact.
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

impl Registry {
    /// Takes the registry for the duration of a server start. `None` once a signal arrived:
    /// start nothing new.
    pub fn begin_start() -> Option<MutexGuard<'static, Registry>> {
        let g = lock();
        (!g.shutting_down).then_some(g)
    }

    /// Records a server that is (about to be) running; call under [`Registry::begin_start`].
    /// Its [`Httpd`] is what it takes to stop it without knowing anything else about it.
    pub fn add(&mut self, s: Httpd) {
        self.servers.push(s);
    }

    /// Forgets a server once it has been stopped.
    pub fn remove(conf: &std::path::Path) {
        lock().servers.retain(|s| s.conf != conf);
    }
}

/// Registers a private directory to remove if a signal ends the run (a normal exit removes it
/// itself).
pub fn add_scratch_dir(dir: PathBuf) {
    lock().scratch.push(dir);
}

/// Registers a file to write `contents` back into if a signal ends the run (a normal exit
/// calls [`restore_now`]).
pub fn add_restore(path: PathBuf, contents: String) {
    lock().restore.push((path, contents));
}

/// Writes back what [`add_restore`] registered for `path`, now, and forgets it.
pub fn restore_now(path: &std::path::Path) {
    let mut g = lock();
    g.restore.retain(|(p, contents)| {
        if p == path {
            write_back(p, contents);
        }
        p != path
    });
}

/// Writes a registered file's old contents back (an error is reported, not fatal).
fn write_back(path: &std::path::Path, contents: &str) {
    if let Err(e) = std::fs::write(path, contents) {
        eprintln!("rworker-ab: could not restore {}: {e}", path.display());
    }
}

/// Records the pid of the running load client (0: none).
pub fn set_client_pid(pid: i32) {
    CLIENT_PID.store(pid, Ordering::SeqCst);
}

/// Whether a termination signal has arrived.
pub fn interrupted() -> bool {
    CAUGHT.load(Ordering::SeqCst) != 0
}

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    CAUGHT.store(sig, Ordering::SeqCst);
}

/// Installs the SIGINT/SIGTERM/SIGHUP handler and starts the watcher thread. `stop` is called
/// for each registered server (the caller passes the real stop: `-k stop`, wait, last-resort
/// SIGKILL by the pidfile's pid), then the process exits with 128 + signal.
pub fn install(stop: fn(&Httpd)) -> std::io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a handler that only does an atomic store is valid;
        // SA_RESTART keeps wait4/read from failing with EINTR in the main thread.
        let rc = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut())
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    std::thread::Builder::new()
        .name("signal-watcher".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(50));
            let sig = CAUGHT.load(Ordering::SeqCst);
            if sig == 0 {
                continue;
            }
            eprintln!("\nrworker-ab: caught signal {sig}: stopping every server it started");
            let client = CLIENT_PID.load(Ordering::SeqCst);
            if client > 0 {
                // SAFETY: plain kill(2) of our own child.
                unsafe { libc::kill(client, libc::SIGTERM) };
            }
            // Waits for a start in progress to finish (it holds the lock).
            let (servers, scratch, restore) = {
                let mut g = lock();
                g.shutting_down = true;
                (
                    std::mem::take(&mut g.servers),
                    std::mem::take(&mut g.scratch),
                    std::mem::take(&mut g.restore),
                )
            };
            for s in &servers {
                eprintln!("rworker-ab: stopping {}", s.conf.display());
                stop(s);
            }
            for d in &scratch {
                let _ = std::fs::remove_dir_all(d);
            }
            for (p, contents) in &restore {
                write_back(p, contents);
            }
            eprintln!("rworker-ab: interrupted; no server left running");
            std::process::exit(128 + sig);
        })?;
    Ok(())
}
