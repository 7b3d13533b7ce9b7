//! A panic inside the MPM must not end a child silently: the panic hook writes one
//! emergency line naming the thread that panicked, the child aborts, and the parent
//! replaces it. The panic is injected through the worker's test hook
//! (`RWORKER_TEST_PANIC_FILE`: the worker that deletes that file panics while serving).
//!
//! One test per binary: the hook is switched on through httpd's environment, which this
//! test sets for itself.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{http_get, wait_until, Mpm, Server, ServerOpts};

#[test]
fn worker_panic_is_logged_once_and_the_child_replaced() {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: the panic hook is rworker's");
        return;
    }
    // The worker runs as www-data, so it must be able to delete the trigger.
    let dir = tempfile::Builder::new()
        .prefix("rworker-panic-")
        .tempdir()
        .expect("temp dir");
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let trigger = dir.path().join("panic-now");
    // Single-test binary: nothing else reads the environment meanwhile.
    std::env::set_var("RWORKER_TEST_PANIC_FILE", &trigger);

    let s = Server::start(ServerOpts::stable());
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "server did not settle"
    );
    let before = s.children();
    let (code, _) = http_get(&s.url("/")).expect("GET / before the panic");
    assert_eq!(code, 200);

    fs::write(&trigger, b"").unwrap();
    // The worker that takes this connection panics; the request fails.
    let failed = http_get(&s.url("/"));
    assert!(
        failed.is_err(),
        "the connection that triggered the panic was answered: {failed:?}"
    );
    assert!(!trigger.exists(), "no worker took the trigger");

    let logged = wait_until(Duration::from_secs(10), || {
        s.error_log().contains("RW00020")
    });
    let log = s.error_log();
    assert!(logged, "no panic line in the error log:\n{log}");
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("RW00020")).collect();
    assert_eq!(lines.len(), 1, "one panic line expected:\n{log}");
    let line = lines[0];
    assert!(line.contains(":emerg]"), "not at emerg level: {line}");
    // CI failed here when the trigger reached a worker that had run a hook before: the
    // hook had renamed the thread for good ("panic in the pre_connection hook"). A bug,
    // not timing: since fc32154 panic::enter puts the previous name back (unit-tested in
    // src/ffi/panic.rs), so the name no longer depends on which worker takes the trigger.
    assert!(
        line.contains("panic in the worker thread")
            && line.contains("src/mpm/worker.rs")
            && line.contains("RWORKER_TEST_PANIC_FILE"),
        "the line must name the thread, the place and the message: {line}"
    );

    // The parent reaps the aborted child and forks a replacement.
    let replaced = wait_until(Duration::from_secs(10), || {
        let now = s.children();
        now.len() == before.len() && now.iter().any(|p| !before.contains(p))
    });
    assert!(
        replaced,
        "child not replaced: before {before:?}, now {:?}\n{}",
        s.children(),
        s.error_log()
    );
    assert!(
        s.error_log().contains("exit signal Abort"),
        "the parent did not log the child's abort:\n{}",
        s.error_log()
    );
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "server did not settle"
    );
    let (code, _) = http_get(&s.url("/")).expect("GET / after the panic");
    assert_eq!(code, 200);
}
