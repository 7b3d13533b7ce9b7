//! The starter thread (worker.c `start_threads`): creates a worker thread in every
//! scoreboard column that is free — DEAD, or GRACEFUL, which a quiescing child of an
//! older generation may still hold after a graceful restart, so it retries each second —
//! and the listener together with the first worker (none when the workers accept for
//! themselves, `RWorkerAccept workers`, nor in a parking child, whose listening sockets go
//! into its event set once the first worker exists).

use std::os::raw::c_int;
use std::time::Duration;

use crate::ffi::log::level;
use crate::ffi::scoreboard::{self, status};
use crate::ffi::thread;
use crate::mpm::runtime::{ChildRuntime, StopMode};
use crate::mpm::worker_accept::WorkerAccept;
use crate::mpm::{listener, worker};

/// Who accepts the child's connections.
pub enum Acceptor {
    /// The listener thread (what it will own), started with the first worker.
    Listener(listener::Listener),
    /// The idle workers themselves (`RWorkerAccept workers`).
    Workers(&'static WorkerAccept),
    /// The idle workers through the child's event set (`RWorkerKeepAlive park`).
    Parking,
}

/// Runs the starter: returns once every worker exists, a stop was requested, or a thread
/// could not be created (then the child retires, sick).
pub fn run(rt: &'static ChildRuntime, acceptor: Acceptor) {
    // A thread that cannot be created makes the child sick: it retires.
    let give_up = |rv: i32, msg: &str| {
        crate::mpm_log!(level::ALERT, rv, "{msg}");
        rt.shutdown.mark_sick();
        rt.ask_main_thread_to_stop(StopMode::Graceful);
    };
    let (mut listener, accept) = match acceptor {
        Acceptor::Listener(l) => (Some(l), None),
        Acceptor::Workers(acc) => (None, Some(acc)),
        Acceptor::Parking => (None, None),
    };
    let tpc = rt.threads.workers();
    let mut created = 0usize;
    let mut loops = 0u32;
    loop {
        for t in 0..tpc {
            if rt.shutdown.is_stopping() {
                return;
            }
            if rt.threads.worker_created(t) {
                continue;
            }
            let st = scoreboard::thread_status(rt.slot, t as c_int);
            if st != status::DEAD && st != status::GRACEFUL {
                continue;
            }
            scoreboard::set_thread_status(rt.slot, t as c_int, status::STARTING);
            rt.threads.worker_starting();
            match rt
                .spawner
                .spawn(c"rw-worker", move |thd| worker::run(rt, t, thd, accept))
            {
                Ok(h) => rt.threads.set_worker(t, h),
                Err(rv) => {
                    rt.threads.worker_not_created();
                    scoreboard::set_thread_status(rt.slot, t as c_int, status::DEAD);
                    give_up(
                        rv,
                        "AH03142: ap_thread_create: unable to create worker thread",
                    );
                    return;
                }
            }
            created += 1;
            if created == 1 {
                if let Some(p) = &rt.parking {
                    p.start_accepting();
                }
            }
            if let Some(l) = listener.take() {
                match rt.spawner.spawn(c"rw-listener", move |_| l.run(rt)) {
                    Ok(h) => rt.threads.set_listener(h),
                    Err(rv) => {
                        give_up(
                            rv,
                            "AH00275: ap_thread_create: unable to create listener thread",
                        );
                        return;
                    }
                }
            }
        }
        if created == tpc {
            return;
        }
        loops += 1;
        if loops % 120 == 0 {
            crate::mpm_log!(
                level::DEBUG,
                0,
                "AH00277: child {} isn't taking over slots very quickly ({} of {})",
                std::process::id(),
                created,
                tpc
            );
        }
        for _ in 0..10 {
            if rt.shutdown.is_stopping() {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}
