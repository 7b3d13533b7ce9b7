//! A child process (worker.c `child_main`): set-up after fork (scoreboard, privileges,
//! signals, child_init), the runtime its threads share (`crate::mpm::runtime`), the
//! starter thread that creates them (`starter`), the main thread's wait on the pipe of
//! death, and the stop: wake the threads, join them, exit.
//!
//! Thread roles and signal masks: every thread starts with all asynchronous signals
//! blocked; the main thread unblocks SIGTERM (the parent's "now" during a stop) inside its
//! waits only, which also watch its bell (`ChildRuntime::main_bell`: its own threads ask
//! for a stop, the listener or the last worker left); the listener unblocks
//! LISTENER_SIGNAL (to break a blocking accept or poll), workers unblock WORKER_SIGNAL (to
//! break a keep-alive read on an immediate stop). The handlers only interrupt: no
//! SA_RESTART.

mod starter;

use std::os::raw::c_int;
use std::time::{Duration, Instant};

use crate::ffi::epoll::WakeFd;
use crate::ffi::httpd::{self, SingleThreaded};
use crate::ffi::listen::{AcceptMutex, Listener as ListenSocket, PodMessage};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::ffi::retained::Retained;
use crate::ffi::thread::Spawner;
use crate::ffi::{panic, process, scoreboard, signal};
use crate::mpm::handoff::Handoff;
use crate::mpm::parking::Parking;
use crate::mpm::row_counts::RowCounts;
use crate::mpm::runtime::{
    ChildRuntime, Shutdown, StopMode, Threads, LISTENER_SIGNAL, WORKER_SIGNAL,
};
use crate::mpm::settings::{AcceptMode, AcceptSite, KeepAliveMode, ListenerBecause, QueueKind};
use crate::mpm::status::{ChildCounters, Counter};
use crate::mpm::worker_accept::WorkerAccept;
use crate::mpm::{listen, listener, settings};
use crate::sys;
use starter::Acceptor;

/// The main thread's own state: the child pool, and whether child_stopping ran.
struct MainThread {
    pchild: Option<Pool>,
    stopping_ran: bool,
}

impl MainThread {
    /// Runs the child_stopping hooks, once.
    fn run_child_stopping(&mut self, graceful: bool) {
        if let (false, Some(p)) = (self.stopping_ran, &self.pchild) {
            self.stopping_ran = true;
            httpd::run_child_stopping(p, graceful);
        }
    }

    /// Ends the child: child_stopping (if not yet), pchild's cleanups, `exit(code)`.
    /// Every MPM thread was joined, or never started.
    fn exit(mut self, code: c_int) -> ! {
        self.run_child_stopping(code == 0);
        drop(self.pchild.take());
        if settings::get().one_process {
            // -X: nobody reaps this process; free its slot as the reaper would.
            // (The pidfile stays: privileges are dropped, as with the stock MPM.)
            scoreboard::free_slot(0);
        }
        process::exit(code)
    }
}

/// The child's entry point after fork (or the parent itself with `-X`): serves until
/// told to stop, then exits. `pconf` is the generation's configuration pool.
pub fn main(token: SingleThreaded, pconf: ConfigPool, slot: c_int, bucket: c_int) -> ! {
    let _place = panic::enter("child process main thread");
    let st = settings::get();
    let buckets = listen::buckets();
    let r = Retained::get_or_create(token);
    r.set_mpm_state(sys::AP_MPMQ_STARTING as c_int);
    if !st.one_process {
        signal::exit_on(libc::SIGTERM);
        signal::default_action(libc::SIGCHLD);
    }
    let mut main = MainThread {
        pchild: None,
        stopping_ran: true, // nothing to stop until the threads run
    };
    let pchild = match pconf.create_sub(c"pchild") {
        Ok(p) => p,
        Err(rv) => {
            crate::mpm_log!(level::EMERG, rv, "RW00002: could not create the child pool");
            main.exit(sys::APEXIT_CHILDFATAL as c_int)
        }
    };
    httpd::child_early_setup(token, &pchild, st.one_process);
    // Keep only this bucket's listeners and pipe of death, and of that only the read
    // end (the parent's exit then reads as its end), nor the write ends of an older
    // generation's pipes that the parent keeps during a graceful restart.
    buckets.close_other_buckets(bucket as usize);
    if !st.one_process {
        buckets.pod(bucket as usize).close_write_end();
        buckets.pod(bucket as usize).read_without_blocking();
        crate::ffi::listen::close_fds(&r.take_old_pods(token));
    }
    scoreboard::reopen(&pchild);
    let accept_mutex = match buckets.accept_mutex(bucket as usize) {
        None => None,
        Some(m) => match AcceptMutex::child_init(m, &pchild) {
            Ok(m) => Some(m),
            Err(rv) => {
                crate::mpm_log!(
                    level::EMERG,
                    rv,
                    "AH00280: Couldn't initialize cross-process lock in child"
                );
                main.pchild = Some(pchild);
                main.exit(sys::APEXIT_CHILDFATAL as c_int)
            }
        },
    };
    // Lose root before any thread exists, then block async signals so every thread
    // created later (ours and modules') inherits the blocked mask.
    if httpd::drop_privileges(token, &pchild).is_err() {
        main.pchild = Some(pchild);
        main.exit(sys::APEXIT_CHILDFATAL as c_int);
    }
    signal::block_all_in_this_thread();
    httpd::run_child_init(token, &pchild);
    main.pchild = Some(pchild);

    let mut sockets = buckets.listeners(bucket as usize);
    let parking_sockets = match st.keep_alive {
        KeepAliveMode::Park => std::mem::take(&mut sockets),
        KeepAliveMode::Thread => Vec::new(),
    };
    let relay = match st.keep_alive {
        // SAFETY: a retained relay is an open eventfd (ensure_relays), inherited.
        KeepAliveMode::Park => r
            .relay(bucket as usize)
            .and_then(|fd| unsafe { WakeFd::duplicate(fd) }.ok()),
        KeepAliveMode::Thread => None,
    };
    let rt = match build_runtime(pconf, slot, st, parking_sockets, relay) {
        Ok(rt) => rt,
        Err(rv) => {
            crate::mpm_log!(
                level::ALERT,
                rv,
                "RW00003: could not set up the child's threads runtime"
            );
            main.exit(sys::APEXIT_CHILDFATAL as c_int)
        }
    };
    let acceptor = match rt.parking {
        Some(_) => Acceptor::Parking,
        None => acceptor(rt, sockets, accept_mutex, pconf, st),
    };
    let accept = match &acceptor {
        Acceptor::Workers(acc) => Some(*acc),
        Acceptor::Listener(_) | Acceptor::Parking => None,
    };

    signal::interrupt_only(LISTENER_SIGNAL);
    signal::interrupt_only(WORKER_SIGNAL);
    main.stopping_ran = false;

    let starter = match rt.spawner.spawn(c"rw-starter", move |_| {
        let _place = panic::enter("starter thread");
        starter::run(rt, acceptor)
    }) {
        Ok(t) => t,
        Err(rv) => {
            crate::mpm_log!(
                level::ALERT,
                rv,
                "AH00282: ap_thread_create: unable to create worker thread"
            );
            main.exit(sys::APEXIT_CHILDSICK as c_int)
        }
    };
    r.set_mpm_state(sys::AP_MPMQ_RUNNING as c_int);

    let (mode, by_parent) = if st.one_process {
        // -X: wait for SIGTERM or SIGINT (Ctrl-C) and stop immediately.
        signal::wait_for_sigterm_or_sigint();
        (StopMode::Ungraceful, true)
    } else {
        wait_for_stop(rt, buckets.pod(bucket as usize))
    };

    // Stop creating threads first, so the set of threads to join is final.
    rt.shutdown.request(mode);
    starter.join();
    rt.signal_threads(mode);
    if let Some(acc) = accept {
        // The child accepts no more once its workers are out of accept; there is no
        // listener to leave: that is when the listener has gone.
        acc.leave(rt);
        rt.rows.set_quiescing();
        rt.shutdown.mark_listener_gone();
    }
    if rt.parking.is_some() {
        // No listener either: the event set stopped accepting in signal_threads.
        rt.shutdown.mark_listener_gone();
    }
    if !by_parent && mode == StopMode::Graceful && !rt.shutdown.is_sick() {
        // Retiring at MaxConnectionsPerChild, perhaps with long downloads or keep-alive
        // clients still to serve: the parent may fork the replacement now (a sick child
        // waits for the cycle, so that a fault that kills every child is no fork storm).
        rt.rows.set_quiescing();
        tell_parent_retiring();
    }
    main.run_child_stopping(mode == StopMode::Graceful);
    join_threads(rt, mode);
    if let Some(p) = &rt.parking {
        p.finish();
        rt.handoff.free_idle_pools();
    }

    crate::mpm_log!(
        level::DEBUG,
        0,
        "RW00010: child {} (slot {}) exiting: {} connections, ptrans created {}, reused from the recycled stack {}",
        std::process::id(),
        slot,
        rt.counters.own(Counter::Connections),
        rt.counters.own(Counter::PoolsCreated),
        rt.counters.own(Counter::PoolsReused)
    );
    let code = if rt.shutdown.is_sick() {
        sys::APEXIT_CHILDSICK as c_int
    } else {
        0
    };
    main.exit(code)
}

/// Who accepts this child's connections: its idle workers when `RWorkerAccept workers`
/// can work here (see `AcceptMode::effective`), else the listener thread.
fn acceptor(
    rt: &ChildRuntime,
    mut sockets: Vec<ListenSocket>,
    accept_mutex: Option<AcceptMutex>,
    pconf: ConfigPool,
    st: settings::Settings,
) -> Acceptor {
    let site = AcceptSite {
        sockets: sockets.len(),
        accept_mutex: accept_mutex.is_some(),
        stock_accept: sockets.iter().all(|s| s.accepts_concurrently()),
        open_files: process::open_files_limit(),
    };
    let mode = st.accept.effective(&st, site);
    let workers = mode == Ok(AcceptMode::Workers);
    if mode == Err(ListenerBecause::OpenFiles) {
        crate::mpm_log!(
            level::WARNING,
            0,
            "RW00013: the open-file limit ({}) leaves too few descriptors for ThreadsPerChild {} workers waiting in accept (each holds one, plus {} for the child); the listener thread accepts instead (raise ulimit -n, e.g. APACHE_ULIMIT_MAX_FILES in /etc/apache2/envvars)",
            site.open_files,
            st.threads_per_child,
            settings::ACCEPT_FD_RESERVE
        );
    }
    crate::mpm_log!(
        level::DEBUG,
        0,
        "RW00011: child {} accepts with {}",
        std::process::id(),
        match mode {
            Ok(AcceptMode::Workers) => "its idle workers (RWorkerAccept workers)".to_string(),
            Ok(AcceptMode::Listener) => "its listener thread".to_string(),
            Err(why) => format!("its listener thread ({why:?})"),
        }
    );
    if workers {
        if let Some(socket) = sockets.pop().and_then(ListenSocket::into_shared) {
            let acc: &'static WorkerAccept = Box::leak(Box::new(WorkerAccept::new(
                socket,
                pconf,
                httpd::max_mem_free(),
                httpd::max_connections_per_child().max(0) as u64,
                rt.threads.workers(),
            )));
            return Acceptor::Workers(acc);
        }
    }
    Acceptor::Listener(listener::Listener::new(sockets, accept_mutex, pconf))
}

fn build_runtime(
    pconf: ConfigPool,
    slot: c_int,
    st: settings::Settings,
    parking_sockets: Vec<ListenSocket>,
    relay: Option<WakeFd>,
) -> Result<&'static ChildRuntime, i32> {
    let tpc = st.threads_per_child.max(1) as usize;
    let spawner = Spawner::new(
        pconf.create_sub(c"mpm_runtime")?,
        httpd::thread_stack_size(),
    )?;
    // Parking has no hand-off; its workers recycle pools through queue_info's stack, which
    // only the atomic queue has apart from an idler count (`Waiter`).
    let queue = match st.keep_alive {
        KeepAliveMode::Park => QueueKind::Atomic,
        KeepAliveMode::Thread => st.queue,
    };
    let handoff = Handoff::new(queue, tpc, pconf)?;
    let counters = ChildCounters::for_slot(slot);
    let rows: &'static RowCounts = Box::leak(Box::new(RowCounts::for_slot(slot)));
    let parking = match st.keep_alive {
        KeepAliveMode::Park => Some(Parking::new(rows, tpc, parking_sockets, relay, pconf)?),
        KeepAliveMode::Thread => None,
    };
    let generation = Retained::lookup().map_or(0, |r| r.my_generation());
    Ok(Box::leak(Box::new(ChildRuntime {
        slot,
        generation,
        thread_limit: st.thread_limit,
        handoff,
        parking,
        shutdown: Shutdown::default(),
        threads: Threads::new(tpc),
        spawner,
        counters,
        rows,
        main_bell: WakeFd::new()?,
    })))
}

/// Rings the parent's bell (`Retained::parent_bell`), if there is one.
fn tell_parent_retiring() {
    let Some(fd) = Retained::lookup().and_then(|r| r.parent_bell()) else {
        return;
    };
    // SAFETY: the parent made `fd`, an eventfd, before forking us, and never closes it.
    if let Ok(bell) = unsafe { WakeFd::duplicate(fd) } {
        bell.signal();
    }
}

/// The main thread's wait: read the pipe of death, until it says stop or the child's own
/// threads ask (the main bell: MaxConnectionsPerChild, a fault). SIGTERM stays blocked in
/// this thread outside its waits (`ChildRuntime::wait_pod_or_bell`), so one that comes
/// between two waits is seen by the next. Returns how to stop and whether the parent asked.
fn wait_for_stop(rt: &ChildRuntime, pod: crate::ffi::listen::Pod) -> (StopMode, bool) {
    signal::latch_parents_sigterm();
    loop {
        // A thread may have asked before this thread got here (workers that accept for
        // themselves can reach MaxConnectionsPerChild within milliseconds of the start);
        // one that asks later rings the bell, which ends the wait.
        let asked = rt.shutdown.mode();
        if asked != StopMode::None {
            signal::take_sigterm();
            return (asked, false);
        }
        let msg = rt.wait_pod_or_bell(pod);
        // SIGTERM changes nothing here, as with the stock worker: the parent stops children
        // through the pipe of death. Once a stop is under way, though, the parent's SIGTERM
        // means "now" (see join_threads); anyone else's never does.
        signal::take_sigterm();
        match msg {
            Some(PodMessage::Graceful) => return (StopMode::Graceful, true),
            Some(PodMessage::Restart) => return (StopMode::Ungraceful, true),
            Some(PodMessage::None) | None => {}
        }
    }
}

/// How often the main thread nudges the listener again while it waits for it to leave (a
/// nudge can land between the listener's stop check and its blocking call).
const LISTENER_NUDGE_EVERY: Duration = Duration::from_millis(500);

/// Joins the listener and the workers. A graceful stop waits for in-flight
/// connections; a SIGTERM from the parent while waiting (GracefulShutdownTimeout
/// expired, or `-k stop`) turns it into an immediate stop.
fn join_threads(rt: &'static ChildRuntime, mut mode: StopMode) {
    if let Some(listener) = rt.threads.take_listener() {
        // The listener rings the main bell as it leaves. It may be between its stop check
        // and a blocking call when the signal lands: nudge it again until it has left.
        let mut nudges = 0;
        while !rt.shutdown.listener_gone() {
            let since = Instant::now();
            rt.wait_main_bell(Some(LISTENER_NUDGE_EVERY));
            if signal::take_sigterm() && mode != StopMode::Ungraceful {
                mode = StopMode::Ungraceful;
                rt.signal_threads(mode);
            }
            if !rt.shutdown.listener_gone() && since.elapsed() >= LISTENER_NUDGE_EVERY {
                rt.wake_listener();
                nudges += 1;
                if nudges == 20 {
                    crate::mpm_log!(level::DEBUG, 0, "AH00276: the listener thread didn't exit");
                }
            }
        }
        listener.join();
    } else {
        rt.handoff.term_queue();
    }
    if mode == StopMode::Graceful {
        // The last worker rings the main bell as it leaves.
        while rt.threads.live_workers() > 0 {
            rt.wait_main_bell(None);
            if signal::take_sigterm() {
                rt.signal_threads(StopMode::Ungraceful);
                break;
            }
        }
    }
    for w in rt.threads.take_workers() {
        w.join();
    }
}
