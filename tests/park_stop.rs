//! An immediate stop (`-k stop`) against a parked connection that a worker claims just as
//! the stop begins: the worker publishes the descriptor it takes, then looks for the stop,
//! and the stop marks itself, then shuts down the published descriptors (a store-then-check
//! pair on each side), so the connection is either cut by the stop or closed unserved by
//! the worker. Before that, a worker that claimed it after the stop's scan served it, and
//! a client that had sent half a request held the child until the parent's reclaim sent
//! SIGTERM again (AH00045).
//!
//! One test per binary: the worker's claim-delay hook (`RWORKER_TEST_CLAIM_DELAY_MS`,
//! which widens the window between a claim and its take to half a second) is switched on
//! through httpd's environment, which this test sets for itself.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{
    idle_connections, parking_under_test, raise_fd_limit, wait_until, Server, ServerOpts,
};

#[test]
fn an_immediate_stop_closes_a_connection_claimed_as_it_begins() {
    if !parking_under_test() {
        eprintln!("skipped: parking only");
        return;
    }
    raise_fd_limit();
    // Single-test binary: nothing else reads the environment meanwhile.
    std::env::set_var("RWORKER_TEST_CLAIM_DELAY_MS", "500");
    let s = Server::start(
        ServerOpts::default()
            .keep_alive(true)
            .line("KeepAliveTimeout 60")
            .line("Timeout 60"),
    );
    assert!(
        s.wait_settled(Duration::from_secs(15)),
        "server did not settle"
    );
    let mut conns: Vec<TcpStream> = idle_connections(&s, 8);
    assert!(
        wait_until(Duration::from_secs(30), || s
            .try_server_status_auto()
            .is_ok_and(|st| st.num("ConnsAsyncKeepAlive") >= 8)),
        "the connections did not park"
    );
    // Half a request on each: the workers that claim them wait 500 ms (the hook), and the
    // stop lands in that wait.
    for c in conns.iter_mut() {
        c.write_all(b"GET /index.html HTTP/1.1\r\nHost: loc")
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    s.stop();
    assert!(
        wait_until(Duration::from_secs(60), || s.processes().is_empty()),
        "the server did not stop: {:?}",
        s.processes()
    );
    let log = s.error_log();
    let reclaimed: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("AH00045") || l.contains("AH00046"))
        .collect();
    assert!(
        reclaimed.is_empty(),
        "the stop waited for the parent's reclaim:\n{}",
        reclaimed.join("\n")
    );
}
