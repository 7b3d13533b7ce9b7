//! Worker threads (worker.c `worker_thread`, `process_socket`; event.c's for parked
//! connections): announce idleness, recycling the last connection's pool; pop a job from
//! the fdqueue; serve it; again.
//!
//! With `RWorkerKeepAlive thread` a worker serves a connection from accept to close
//! (`conn`). With `park` it serves one request at a time: the connection's protocol runs,
//! the worker flushes the response (write completion stays on the worker, bounded by
//! Timeout), then hands the connection to the listener to wait for the next request or
//! for the client's FIN (`inbox`), and goes idle.

use std::ops::ControlFlow;
use std::os::raw::{c_int, c_long};
use std::sync::OnceLock;
use std::time::Duration;

use crate::ffi::async_conn::{AsyncConn, Flush, Next as Step};
use crate::ffi::pool::Pool;
use crate::ffi::scoreboard::{self, status};
use crate::ffi::thread::{self, CurrentThread};
use crate::ffi::{panic, signal};
use crate::mpm::conn::Conn;
use crate::mpm::handoff::{Job, Next};
use crate::mpm::idle_split::{hold_keep_alive, Hold, Idle, Wait};
use crate::mpm::inbox::{Park, ParkState, Parking};
use crate::mpm::query;
use crate::mpm::runtime::{ChildRuntime, WORKER_SIGNAL};
use crate::mpm::status::Counter;
use crate::mpm::worker_accept::{Next as Accepted, WorkerAccept};

/// Test hook: with `RWORKER_TEST_PANIC_FILE=/some/path` in httpd's environment, the worker
/// that manages to delete that file panics while serving its connection, so tests can
/// check that a panic is logged and the child replaced. Read once per process.
fn injected_panic_due() -> bool {
    static PATH: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| std::env::var_os("RWORKER_TEST_PANIC_FILE").map(Into::into))
        .as_ref()
        .is_some_and(|p| std::fs::remove_file(p).is_ok())
}

/// Worker thread `t`'s body: it serves what the listener hands it, or with `accept`
/// (`RWorkerAccept workers`) accepts its own connections.
pub fn run(
    rt: &'static ChildRuntime,
    t: usize,
    thd: CurrentThread,
    accept: Option<&'static WorkerAccept>,
) {
    let _place = panic::enter("worker thread");
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
    if rt.parking.is_none() {
        query::runs_keep_alive_loop(rt.slot, tn);
    }
    let w = Worker {
        rt,
        t,
        tn,
        id: (rt.slot * rt.thread_limit + tn) as c_long,
        thd,
        accept,
    };

    let last_ptrans = match (accept, &rt.parking) {
        (Some(acc), Some(parking)) => w.accept_or_pop_and_serve(acc, parking),
        (Some(acc), None) => w.accept_and_serve(acc),
        (None, _) => w.pop_and_serve(),
    };
    let gone = rt.shutdown.listener_gone();
    scoreboard::set_thread_status(
        rt.slot,
        tn,
        if gone { status::DEAD } else { status::GRACEFUL },
    );
    drop(last_ptrans);
    rt.threads.worker_exiting();
}

/// How long a worker waits for the client's FIN before it parks a lingering close. A
/// client usually closes right after it read the response, but on a busy machine that can
/// take milliseconds: with 2 ms, `Connection: close` at 400 clients parked most closes
/// (a timer wake, then a listener wake, per connection: 1.9x the voluntary context
/// switches and 1.1-1.3x the CPU per request of 30 ms, which served 1.2-1.4x the
/// requests). A client that has not closed by then costs its worker no more than this.
const LINGER_ON_WORKER: Duration = Duration::from_millis(30);

/// How long a worker with spare threads beside it waits on a keep-alive connection for the
/// next request before it parks the connection (`idle_split::hold_keep_alive`). A busy
/// client's next request comes within a millisecond or two; an idle one costs its worker
/// no more than this, then parks.
const HOLD_ON_WORKER: Duration = Duration::from_millis(20);

/// One worker's identity while it serves.
struct Worker {
    rt: &'static ChildRuntime,
    t: usize,
    tn: c_int,
    id: c_long,
    thd: CurrentThread,
    /// The child's workers accept for themselves (`RWorkerAccept workers`).
    accept: Option<&'static WorkerAccept>,
}

impl Worker {
    /// The listener's worker: announces itself idle (recycling its last pool), pops a
    /// job from the fdqueue, serves it, until the queue is terminated or an immediate
    /// stop. Returns the pool it still holds.
    fn pop_and_serve(&self) -> Option<Pool> {
        let rt = self.rt;
        let mut ptrans = None;
        while !rt.shutdown.workers_must_exit() {
            scoreboard::set_thread_status(rt.slot, self.tn, status::READY);
            let Some(job) = self.wait_on_queue(ptrans.take(), 0) else {
                break;
            };
            if self.take(job, &mut ptrans).is_break() {
                break;
            }
        }
        ptrans
    }

    /// `RWorkerAccept workers`: accepts its next connection itself (into the pool it kept
    /// from the last one) and serves it, until the child stops accepting. Returns the
    /// pool it still holds.
    fn accept_and_serve(&self, acc: &WorkerAccept) -> Option<Pool> {
        let rt = self.rt;
        let mut ptrans = None;
        while !rt.shutdown.is_stopping() {
            scoreboard::set_thread_status(rt.slot, self.tn, status::READY);
            match acc.next(rt, self.t, ptrans.take()) {
                Accepted::Conn(conn) => {
                    if self.take(Job::New(conn), &mut ptrans).is_break() {
                        break;
                    }
                }
                Accepted::Again(p) => ptrans = Some(p),
                Accepted::Stop => break,
            }
        }
        ptrans
    }

    /// `RWorkerKeepAlive park` with `RWorkerAccept workers`: each time it is idle the
    /// worker waits either in accept, for a new connection, or on the fdqueue, for a
    /// parked connection the listener hands out (`idle_split` decides which). Returns the
    /// pool it still holds.
    fn accept_or_pop_and_serve(&self, acc: &WorkerAccept, parking: &Parking) -> Option<Pool> {
        let rt = self.rt;
        let mut ptrans = None;
        let mut nudged = false;
        let mut last = Wait::Queue;
        while !rt.shutdown.workers_must_exit() {
            let stopping = rt.shutdown.is_stopping();
            let wait = parking.split.choose(Idle {
                stopping,
                nudged: std::mem::take(&mut nudged) && !stopping,
                last,
                open: parking.open() as usize,
                at_file_limit: parking.at_file_limit(),
                listener_waits: parking.listener_waits(),
                in_accept: acc.waiting(),
                on_queue: rt.handoff.idlers() as usize,
            });
            scoreboard::set_thread_status(rt.slot, self.tn, status::READY);
            let job = match wait {
                Wait::Accept => {
                    let pool = ptrans.take().or_else(|| rt.handoff.pop_pool());
                    match acc.next(rt, self.t, pool) {
                        Accepted::Conn(conn) => {
                            parking.opened();
                            Job::New(conn)
                        }
                        Accepted::Again(p) => {
                            // Interrupted (the listener's nudge, or a benign accept error).
                            ptrans = Some(p);
                            nudged = true;
                            continue;
                        }
                        // The child stops: from now on this worker waits on the fdqueue,
                        // for the closes the listener still hands out.
                        Accepted::Stop => continue,
                    }
                }
                Wait::Queue => match self.wait_on_queue(ptrans.take(), acc.waiting()) {
                    Some(Job::Accept) => continue,
                    Some(job) => job,
                    None => break,
                },
            };
            last = wait;
            if self.take(job, &mut ptrans).is_break() {
                break;
            }
        }
        ptrans
    }

    /// A job this worker got: served, or on an immediate stop dropped unserved (then
    /// `Break`: the worker leaves its loop). Either way `held` is the pool it holds now.
    fn take(&self, job: Job, held: &mut Option<Pool>) -> ControlFlow<()> {
        if self.rt.shutdown.workers_must_exit() {
            *held = self.drop_unserved(job);
            return ControlFlow::Break(());
        }
        if injected_panic_due() {
            panic!("RWORKER_TEST_PANIC_FILE asked this worker to panic");
        }
        *held = self.serve(job);
        ControlFlow::Continue(())
    }

    /// An idle worker's wait on the fdqueue: announces itself idle (recycling `pool`, so
    /// the listener finds it for the connection it accepts next; `in_accept` workers of
    /// the child are idle in accept meanwhile), wakes the parking listener if it waits for
    /// a worker, and pops the next job; None once the queue is terminated or an immediate
    /// stop interrupts it.
    fn wait_on_queue(&self, pool: Option<Pool>, in_accept: usize) -> Option<Job> {
        let rt = self.rt;
        rt.handoff.set_idle(pool);
        rt.counters
            .set(Counter::IdleWorkers, rt.handoff.idlers() + in_accept as u64);
        if let Some(p) = &rt.parking {
            p.worker_idle();
        }
        loop {
            match self.rt.handoff.pop() {
                Next::Job(job) => return Some(job),
                Next::Terminated => return None,
                Next::Interrupted if self.rt.shutdown.workers_must_exit() => return None,
                Next::Interrupted => {}
            }
        }
    }

    /// Serves a new connection from accept to close (`RWorkerKeepAlive thread`); returns
    /// its pool, cleared.
    fn serve_new(&self, conn: Conn) -> Pool {
        let rt = self.rt;
        conn.serve(&self.thd, rt.slot, self.tn, self.id, |fd| {
            rt.threads.set_worker_fd(self.t, fd)
        })
    }

    /// Serves a job; the pool to recycle, when the connection ended here.
    fn serve(&self, job: Job) -> Option<Pool> {
        let rt = self.rt;
        match (job, &rt.parking) {
            (Job::New(conn), None) => Some(self.serve_new(conn)),
            (Job::New(conn), Some(parking)) => {
                match AsyncConn::create(
                    &self.thd,
                    conn.sock,
                    conn.ptrans,
                    rt.slot,
                    self.tn,
                    self.id,
                ) {
                    Ok(c) => self.run_async(c, parking),
                    Err(mut pool) => {
                        parking.closed();
                        pool.clear();
                        Some(pool)
                    }
                }
            }
            (Job::Resume(mut c), Some(parking)) => {
                c.resume(&self.thd, rt.slot, self.tn, self.id);
                self.run_async(c, parking)
            }
            (Job::Close(mut c), Some(parking)) => {
                c.resume(&self.thd, rt.slot, self.tn, self.id);
                self.linger(c, parking)
            }
            // Parked connections exist only with parking.
            (Job::Resume(c) | Job::Close(c), None) => Some(cleared(c.lingering_close_here())),
            // Only a parking child's listener sends it, and the worker's loop takes it.
            (Job::Accept, _) => None,
        }
    }

    /// Runs a parked-mode connection until it parks, is suspended, or closes.
    fn run_async(&self, mut c: AsyncConn, parking: &Parking) -> Option<Pool> {
        let rt = self.rt;
        rt.threads.set_worker_fd(self.t, c.fd());
        if c.is_lingering() {
            return self.linger(c, parking);
        }
        loop {
            match c.process() {
                Step::WriteCompletion => {
                    c.set_status(status::BUSY_WRITE);
                    if !self.write_completion(&mut c) || !c.keeps_alive() {
                        return self.linger(c, parking);
                    }
                    if c.input_pending() {
                        continue; // a pipelined request: serve it now
                    }
                    // The response promised keep-alive, so the connection waits for its
                    // next request even if a graceful stop began meanwhile: the client
                    // may be sending it already. That request's response says
                    // `Connection: close` (the core asks the MPM's state), and the
                    // parking listener of a stopping child gives a quiet connection a
                    // short while only (`parking::STOP_KEEP_ALIVE`).
                    c.set_status(status::BUSY_KEEPALIVE);
                    if self.may_hold(parking) && c.wait_ready(true, HOLD_ON_WORKER) {
                        continue;
                    }
                    return self.park(c, ParkState::KeepAlive, parking);
                }
                Step::WaitIo { read } => {
                    c.set_status(status::BUSY_READ);
                    return self.park(c, ParkState::WaitIo { read }, parking);
                }
                Step::Suspended => {
                    // A module owns the connection now and resumes it itself. It no
                    // longer counts as the child's: this MPM never sees it again (no
                    // resume hook), and a stopping child waits for its own connections
                    // only (else a graceful stop waited for SIGTERM).
                    rt.threads.set_worker_fd(self.t, -1);
                    c.suspend();
                    parking.suspended();
                    parking.closed();
                    std::mem::forget(c);
                    return None;
                }
                Step::Linger => return self.linger(c, parking),
            }
        }
    }

    /// Whether this worker may wait on its keep-alive connection for a moment instead of
    /// parking it at once (see `idle_split::hold_keep_alive`).
    fn may_hold(&self, parking: &Parking) -> bool {
        let h = Hold {
            own: parking.open() as usize,
            listener_waits: parking.listener_waits(),
            in_accept: self.accept.map(|a| a.waiting()),
            threads_per_child: self.rt.threads.workers(),
        };
        hold_keep_alive(h, || parking.siblings_open())
    }

    /// Flushes the response on this thread (write completion), waiting for the socket up
    /// to Timeout each time it is full; false when the connection must close.
    fn write_completion(&self, c: &mut AsyncConn) -> bool {
        loop {
            match c.flush() {
                Flush::Done => return true,
                Flush::Failed => return false,
                Flush::Pending { read } => {
                    if !c.wait_ready(read, c.timeout()) || self.rt.shutdown.workers_must_exit() {
                        return false;
                    }
                }
            }
        }
    }

    /// Hands the connection to the listener; it is gone from this thread once pushed.
    fn park(&self, mut c: AsyncConn, state: ParkState, parking: &Parking) -> Option<Pool> {
        self.rt.threads.set_worker_fd(self.t, -1);
        c.suspend();
        match parking.park(Park { conn: c, state }) {
            Ok(()) => None,
            // The listener is leaving (the child stops): close it here.
            Err(p) => {
                let mut c = p.conn;
                c.resume(&self.thd, self.rt.slot, self.tn, self.id);
                parking.closed();
                Some(cleared(c.lingering_close_here()))
            }
        }
    }

    /// Lingering close: begins it here (pre_close hooks, flush, shutdown of our side),
    /// reads what the client already sent, and parks the connection with the listener to
    /// wait for the client's FIN without holding this thread.
    fn linger(&self, mut c: AsyncConn, parking: &Parking) -> Option<Pool> {
        c.set_status(status::CLOSING);
        // A client usually closes right after reading the response: wait a moment for its
        // FIN here before parking (parking costs an inbox push, epoll calls and a wake of
        // the listener; see LINGER_ON_WORKER).
        if (c.is_lingering() || c.start_lingering_close())
            && !c.drain()
            && !(c.wait_ready(true, LINGER_ON_WORKER) && c.drain())
        {
            let short = c.short_linger();
            return self.park(c, ParkState::Linger { short }, parking);
        }
        self.rt.threads.set_worker_fd(self.t, -1);
        parking.closed();
        Some(cleared(c.close(false)))
    }

    /// An immediate stop: closes the job's connection unserved.
    fn drop_unserved(&self, job: Job) -> Option<Pool> {
        if let (Some(p), true) = (&self.rt.parking, job.has_connection()) {
            p.closed();
        }
        job.close_unserved()
    }
}

/// A pool, cleared for recycling.
fn cleared(mut p: Pool) -> Pool {
    p.clear();
    p
}
