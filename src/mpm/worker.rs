//! Worker threads (worker.c `worker_thread`, `process_socket`): announce idleness,
//! recycling the last connection's pool; pop a connection from the fdqueue; serve it
//! (`conn`); clear its pool; again.

use std::os::raw::{c_int, c_long};
use std::sync::OnceLock;

use crate::ffi::scoreboard::{self, status};
use crate::ffi::thread::{self, CurrentThread};
use crate::ffi::{panic, signal};
use crate::mpm::handoff::Next;
use crate::mpm::runtime::{ChildRuntime, WORKER_SIGNAL};
use crate::mpm::status::Counter;

/// Test hook: with `RWORKER_TEST_PANIC_FILE=/some/path` in httpd's environment, the worker
/// that manages to delete that file panics while serving its connection, so tests can
/// check that a panic is logged and the child replaced. Read once per process.
fn injected_panic_due() -> bool {
    static PATH: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| std::env::var_os("RWORKER_TEST_PANIC_FILE").map(Into::into))
        .as_ref()
        .is_some_and(|p| std::fs::remove_file(p).is_ok())
}

/// Worker thread `t`'s body.
pub fn run(rt: &'static ChildRuntime, t: usize, thd: CurrentThread) {
    panic::enter("worker thread");
    let tn = t as c_int;
    rt.threads.worker_started(t);
    scoreboard::register_worker(
        rt.slot,
        tn,
        std::process::id() as libc::pid_t,
        thread::os_thread_id(),
        rt.generation,
    );
    signal::unblock_for_this_thread(WORKER_SIGNAL);
    let conn_id = (rt.slot * rt.thread_limit + tn) as c_long;

    let mut last_ptrans = None;
    let mut is_idle = false;
    while !rt.shutdown.workers_must_exit() {
        if !is_idle {
            // Recycle the previous connection's pool as we announce ourselves, so the
            // listener finds it for the connection it accepts for us.
            rt.handoff.set_idle(last_ptrans.take());
            rt.counters.set(Counter::IdleWorkers, rt.handoff.idlers());
            is_idle = true;
        }
        scoreboard::set_thread_status(rt.slot, tn, status::READY);
        match rt.handoff.pop() {
            Next::Conn(conn) => {
                is_idle = false;
                if rt.shutdown.workers_must_exit() {
                    // Immediate stop: drop the connection unserved.
                    last_ptrans = Some(conn.drop_unserved());
                    break;
                }
                if injected_panic_due() {
                    panic!("RWORKER_TEST_PANIC_FILE asked this worker to panic");
                }
                last_ptrans = Some(conn.serve(&thd, rt.slot, tn, conn_id, |fd| {
                    rt.threads.set_worker_fd(t, fd)
                }));
            }
            Next::Terminated => break,
            Next::Interrupted => continue,
        }
    }
    let gone = rt.shutdown.listener_gone();
    scoreboard::set_thread_status(
        rt.slot,
        tn,
        if gone { status::DEAD } else { status::GRACEFUL },
    );
    drop(last_ptrans);
    rt.threads.worker_exiting();
}
