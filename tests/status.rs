//! rworker's own figures in `server-status?auto` (`RWorker*` keys): they add up against
//! the load a test sends, they are server-wide (summed over children, from shared
//! memory), and they survive a graceful restart as mod_status's own counters do.

mod common;

use std::time::Duration;

use common::{run_ab, wait_until, Mpm, Server, ServerOpts, Status};

/// Two children of 10 threads; spares wide enough that maintenance neither forks nor sheds.
fn opts() -> ServerOpts {
    ServerOpts::stable()
}

fn status(s: &Server) -> Status {
    s.server_status_auto()
}

/// The per-child rows: (slot, connections) of each live child.
/// Polls until every counted connection has its pool (reused or created); a connection
/// is counted when accepted and gets its pool a moment later.
fn assert_pools_match_connections(s: &Server, what: &str) {
    let pools_match = |st: &Status| {
        st.num("RWorkerPoolsReused") + st.num("RWorkerPoolsCreated") == st.num("RWorkerConnections")
    };
    let mut last = status(s);
    let matched = wait_until(Duration::from_secs(10), || {
        last = status(s);
        pools_match(&last)
    });
    assert!(matched, "{what}: {:?}", last.0);
}

fn per_child_connections(st: &Status) -> Vec<(String, u64)> {
    st.0.iter()
        .filter(|(k, _)| k.starts_with("RWorkerChild[") && k.ends_with("]Connections"))
        .map(|(k, v)| (k.clone(), v.parse().expect("a number")))
        .collect()
}

#[test]
fn rworker_keys_add_up_over_children_and_survive_a_graceful_restart() {
    if Mpm::under_test() != Mpm::Rworker {
        eprintln!("skipped: the RWorker keys are rworker's");
        return;
    }
    let s = Server::start(opts());
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "server did not settle"
    );
    // Exactly n connections, one after the other: n hand-offs from the listener, or none
    // where idle workers accept for themselves (RWorkerAccept workers, the default with
    // one Listen; with parking, see below). The status
    // request that reads `after` is itself a connection accepted before its handler runs;
    // `before`'s was counted in `before`.
    let before = status(&s);
    let n = 200u64;
    for i in 0..n {
        let (code, _) =
            common::http_get(&s.url("/1b.txt")).unwrap_or_else(|e| panic!("GET {i}: {e}"));
        assert_eq!(code, 200);
    }
    let after = status(&s);
    let delta = |st: &Status, b: &Status, k: &str| st.num(k) - b.num(k);
    assert_eq!(delta(&after, &before, "RWorkerConnections"), n + 1);
    // With RWorkerKeepAlive park a kept-alive connection is parked after its request and
    // handed to a worker again when it becomes readable (here: the client's close): with
    // the listener's accept that is a second hand-off per connection; where the workers
    // accept, the only one (a new connection never passes the fdqueue).
    let park = common::parking_under_test();
    let workers_accept = std::env::var("RWORKER_TEST_ACCEPT").map_or(true, |m| m == "workers");
    let handoffs = delta(&after, &before, "RWorkerHandoffs");
    if park && !workers_accept {
        assert!(handoffs > n, "{handoffs} hand-offs for {n} + 1 connections");
    } else if park {
        assert!(
            handoffs <= n + 1,
            "{handoffs} hand-offs for {n} + 1 connections: new connections are not handed off"
        );
    } else if workers_accept {
        assert_eq!(
            handoffs, 0,
            "no hand-off when workers accept: {:?}",
            after.0
        );
    } else {
        assert_eq!(
            handoffs,
            n + 1,
            "hand-offs for {n} connections + 1 status request: {:?}",
            after.0
        );
    }

    // Concurrent load, so that both children serve: ab may open a few connections beyond
    // -n that it closes unused, which the MPM accepts and hands off too (at most -c). Four
    // clients on twenty workers: a client can hold two workers for a moment (one waiting
    // for its last connection's FIN in the lingering close, one serving its next), so on a
    // loaded machine eight could make every worker busy at a census, and AH00286 would
    // then be right.
    let before = after;
    let n = 3000u64;
    run_ab(&["-n", &n.to_string(), "-c", "4"], &s.url("/")).assert_all_ok(n);
    let after = status(&s);
    let connections = delta(&after, &before, "RWorkerConnections");
    assert!(
        (n + 1..=n + 1 + 4).contains(&connections),
        "{connections} connections for {n} ab connections + 1 status request"
    );
    let handoffs = delta(&after, &before, "RWorkerHandoffs");
    if park && !workers_accept {
        assert!(
            handoffs >= connections,
            "{handoffs} hand-offs, {connections} connections"
        );
    } else if park {
        assert!(
            handoffs <= connections,
            "{handoffs} hand-offs, {connections} connections"
        );
    } else if workers_accept {
        assert_eq!(handoffs, 0);
    } else {
        assert_eq!(handoffs, connections);
    }
    // A connection is counted when accepted and gets its pool a moment later; a connection
    // ab opened and closed unused may be accepted while `after` is read, so the two are
    // compared once they agree (polled), not at one instant.
    assert_pools_match_connections(&s, "every connection got a pool, reused or new");
    assert!(
        after.num("RWorkerPoolsReused") >= n,
        "pools are recycled, not created per connection: {:?}",
        after.0
    );
    let wakes = after.num("RWorkerFutexWakes") - before.num("RWorkerFutexWakes");
    assert!(
        wakes <= 2 * handoffs,
        "futex wakes {wakes} for {handoffs} hand-offs"
    );

    // Server-wide: the totals are the sum of at least two children's rows.
    let children = per_child_connections(&after);
    assert!(after.num("RWorkerChildren") >= 2, "{:?}", after.0);
    assert!(
        children.iter().filter(|(_, v)| *v > 0).count() >= 2,
        "the load reached one child only: {children:?}"
    );
    assert_eq!(
        children.iter().map(|(_, v)| v).sum::<u64>(),
        after.num("RWorkerConnections"),
        "per-child rows add up to the total: {children:?}"
    );

    // A graceful restart replaces every child; the totals carry on, like Total Accesses.
    let total_accesses = after.num("Total Accesses");
    let total_connections = after.num("RWorkerConnections");
    let old = s.children();
    s.graceful();
    let replaced = wait_until(Duration::from_secs(15), || {
        let now = s.children();
        !now.is_empty() && now.iter().all(|p| !old.contains(p))
    });
    assert!(
        replaced,
        "children not replaced after graceful: {:?} -> {:?}",
        old,
        s.children()
    );
    assert!(
        s.wait_settled(Duration::from_secs(10)),
        "server did not settle after graceful"
    );
    run_ab(&["-n", "100", "-c", "4"], &s.url("/")).assert_all_ok(100);
    let restarted = status(&s);
    assert!(
        restarted.num("Total Accesses") >= total_accesses,
        "mod_status's own counter went back: {:?}",
        restarted.0
    );
    assert!(
        restarted.num("RWorkerConnections") >= total_connections + 100,
        "RWorkerConnections went back or missed the new load: {total_connections} before, {:?}",
        restarted.0
    );
    assert_pools_match_connections(&s, "pools and connections after the restart");
    s.assert_no_warnings_in_error_log();
}

#[test]
fn html_page_has_the_rworker_section() {
    if Mpm::under_test() != Mpm::Rworker {
        return;
    }
    let s = Server::start(opts());
    let (code, body) = common::http_get(&s.url("/server-status")).expect("GET /server-status");
    assert_eq!(code, 200);
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("<h2>rworker</h2>"), "{body}");
    assert!(body.contains("Transaction pools reused"), "{body}");
}
