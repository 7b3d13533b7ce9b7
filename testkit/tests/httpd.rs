//! A private stock httpd (Debian's mpm_worker) started and stopped by its own pidfile.
//!
//! Needs root (httpd switches its children to www-data) and `/usr/sbin/apache2`.

use rworker_testkit::httpd::Httpd;
use rworker_testkit::port::free_port;
use rworker_testkit::procfs;
use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// A ServerRoot with a minimal worker-MPM config on `port`.
fn server_root(port: u16) -> (tempfile::TempDir, Httpd) {
    // SAFETY: geteuid(2) has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "run as root: httpd switches to www-data"
    );
    let dir = tempfile::Builder::new()
        .prefix("rworker-testkit-")
        .tempdir()
        .expect("temp ServerRoot");
    let root = dir.path();
    let httpd = Httpd::create_root(root, &[]).expect("ServerRoot");
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!((mode(root), mode(&root.join("htdocs"))), (0o755, 0o755));
    assert!(root.join("run").is_dir() && root.join("logs").is_dir());
    let r = root.display();
    let m = "/usr/lib/apache2/modules";
    fs::write(
        &httpd.conf,
        format!(
            "ServerRoot {r}\nPidFile {r}/run/httpd.pid\nScoreBoardFile {r}/run/sb\n\
             Mutex file:{r}/run default\n\
             LoadModule mpm_worker_module {m}/mod_mpm_worker.so\n\
             LoadModule authz_core_module {m}/mod_authz_core.so\n\
             User www-data\nGroup www-data\nServerName localhost\n\
             Listen 127.0.0.1:{port}\nDocumentRoot {r}/htdocs\nErrorLog {r}/logs/error.log\n\
             StartServers 2\nThreadsPerChild 5\nMaxRequestWorkers 10\n"
        ),
    )
    .unwrap();
    (dir, httpd)
}

#[test]
fn start_and_stop_by_pidfile() {
    let port = free_port().expect("free port");
    let (_dir, httpd) = server_root(port);
    assert!(!httpd.stop(Duration::from_secs(1)), "nothing to stop yet");
    let parent = httpd
        .start(port, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(httpd.pid(), Some(parent));
    assert!(procfs::cmdline(parent).contains(&httpd.conf.display().to_string()));
    let conf = httpd.conf.display().to_string();
    assert!(rworker_testkit::wait::wait_until(
        Duration::from_secs(10),
        || { procfs::live_children(parent).len() >= 2 }
    ));
    let family = procfs::processes_naming(&conf);
    assert!(family.contains(&parent) && family.len() >= 3, "{family:?}");

    assert!(!httpd.stop(Duration::from_secs(15)), "needed SIGKILL");
    assert!(procfs::processes_naming(&conf).is_empty());
    assert!(family.iter().all(|&p| !procfs::alive(p)));
    assert!(!httpd.pidfile.exists(), "pidfile left behind");
}

#[test]
fn a_taken_port_is_reported_as_such() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (_dir, httpd) = server_root(port);
    let failure = httpd
        .start(port, Duration::from_secs(5))
        .expect_err("the port is taken");
    assert!(failure.port_in_use(), "{failure}");
    assert!(failure.to_string().contains("-k start"), "{failure}");
    httpd.stop(Duration::from_secs(5));
    assert!(procfs::processes_naming(&httpd.conf.display().to_string()).is_empty());
}
