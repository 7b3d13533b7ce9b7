//! Worker threads (worker.c `worker_thread`, `process_socket`; event.c's for parked
//! connections): announce idleness, recycling the last connection's pool; pop a job from
//! the fdqueue; serve it; again.
//!
//! With `RWorkerKeepAlive thread` a worker serves a connection from accept to close
//! (`conn`). With `park` an idle worker waits on the child's event set (`parking`) and
//! serves one request at a time: it reads the request head without blocking (the core
//! reads it once it has come: `crate::ffi::head_buffer`), the connection's protocol runs,
//! the worker flushes the response without blocking, and whatever must wait (the rest of a
//! head, the rest of a response the socket cannot take yet, the next request, the client's
//! FIN) waits parked in the set, where `parking::states` says; the worker goes idle. It owns the connection from its claim to
//! its park or close, and never touches it after a park.

use std::ops::ControlFlow;
use std::os::raw::{c_int, c_long};
use std::os::unix::io::RawFd;
use std::sync::OnceLock;
use std::time::Duration;

use rworker_queue::publish_then_check;

use crate::ffi::async_conn::{Asked, AsyncConn, Flush};
use crate::ffi::epoll::monotonic_ns;
use crate::ffi::head_buffer::HeadRead;
use crate::ffi::pool::Pool;
use crate::ffi::scoreboard::{self, status};
use crate::ffi::thread::{self, CurrentThread};
use crate::ffi::{panic, signal};
use crate::mpm::conn::Conn;
use crate::mpm::handoff::Handed;
use crate::mpm::parking::states::ConnState;
use crate::mpm::parking::{GateIndex, ParkState, Parked, Parking, Waiter, Woken};
use crate::mpm::query;
use crate::mpm::row_counts::Count;
use crate::mpm::runtime::{ChildRuntime, StopMode, WORKER_SIGNAL};
use crate::mpm::status::Counter;
use crate::mpm::worker_accept::{WorkerAccept, WorkerAccepted};

/// Test hook: with `RWORKER_TEST_PANIC_FILE=/some/path` in httpd's environment, the worker
/// that manages to delete that file panics while serving its connection, so tests can
/// check that a panic is logged and the child replaced. Read once per process.
fn injected_panic_due() -> bool {
    static PATH: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    PATH.get_or_init(|| std::env::var_os("RWORKER_TEST_PANIC_FILE").map(Into::into))
        .as_ref()
        .is_some_and(|p| std::fs::remove_file(p).is_ok())
}

/// Test hook: with `RWORKER_TEST_CLAIM_DELAY_MS=n` in httpd's environment, a parking worker
/// that claimed a ready connection waits n ms before it takes it, so that a test can land
/// an immediate stop in that window (`tests/park_stop.rs`). Read once per process.
fn injected_claim_delay() {
    static DELAY: OnceLock<Option<Duration>> = OnceLock::new();
    let d = DELAY.get_or_init(|| {
        std::env::var("RWORKER_TEST_CLAIM_DELAY_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Duration::from_millis)
    });
    if let Some(d) = d {
        std::thread::sleep(*d);
    }
}

/// Worker thread `t`'s body: it serves what the listener hands it, or with `accept`
/// (`RWorkerAccept workers`) accepts its own connections, or in a parking child waits on
/// the child's event set.
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
    };

    let last_ptrans = match (&rt.parking, accept) {
        (Some(parking), _) => w.wait_and_serve(parking),
        (None, Some(acc)) => w.accept_and_serve(acc),
        (None, None) => w.pop_and_serve(),
    };
    let gone = rt.shutdown.listener_gone();
    scoreboard::set_thread_status(
        rt.slot,
        tn,
        if gone { status::DEAD } else { status::GRACEFUL },
    );
    drop(last_ptrans);
    rt.worker_left();
}

/// How long a worker waits for the client's FIN before it parks a lingering close. Most
/// clients close right after they read the response; parking it instead costs an epoll
/// registration and a second wake-up per connection. Measured (rworker-ab, Debian's sizing,
/// `Connection: close`, 1 B, 3 interleaved reps, 2026-12-03): at 100 clients 14,974 req/s
/// and 78.5 µs httpd CPU per request with 30 ms, 9,236 and 143.2 µs without the wait (2.9
/// against 6.1 context switches per request); at 400 clients 14,522 and 79.0 µs against
/// 8,939 and 151.6 µs. A client slower than this waits parked, without a thread.
const LINGER_ON_WORKER: Duration = Duration::from_millis(30);

/// How long a worker waits on a keep-alive connection for its next request before it
/// parks it, while another worker of its child waits in the set (so that nothing which
/// becomes ready waits for this one). Measured (same harness, keep-alive, 1 B, 3 reps,
/// 2026-12-03), 20 ms against parking at once: at 50 clients 43,062 against 33,045 req/s,
/// 34.2 against 43.5 µs httpd CPU per request; at 400 clients 35.9 against 41.4 µs and a
/// p99 of 16 against 27 ms (0.55 against 1.09 context switches per request); at 100
/// clients equal within the spread.
const HOLD_ON_WORKER: Duration = Duration::from_millis(20);

/// A worker that has closed a connection gives up the rest of its time slice before it
/// takes a fresh one (`sched_yield`; it returns at once when no other thread is runnable).
/// Without it a worker going from connection to connection keeps running on the slice it
/// has already used up, and the scheduler takes the CPU from it in the middle of its next
/// request, which then waits for every runnable thread's turn. With it the worker waits
/// for its turn while it holds nothing. Measured (`ab -c 100` of a 1-byte file,
/// `Connection: close`, Debian's sizing, 2-core VM, 2026-12-04, interleaved): p99 108-146
/// ms without, 11-16 ms with, in both modes, at the same requests per second (the stock
/// worker, whose workers sleep between connections: 25-52 ms). Not after a request whose
/// connection was parked: a parking worker that finds the next event ready never sleeps,
/// and the scheduler charges each yield to it as a slice used, so at 400 keep-alive
/// clients (wrk, 5 reps) the park p99 grew from 18-30 ms to 342-580 ms.
fn yield_between_connections() {
    std::thread::yield_now();
}

/// One worker's identity while it serves.
struct Worker {
    rt: &'static ChildRuntime,
    t: usize,
    tn: c_int,
    id: c_long,
    thd: CurrentThread,
}

impl Worker {
    /// The listener's worker: announces itself idle (recycling its last pool), pops a
    /// connection from the fdqueue, serves it, until the queue is terminated or an
    /// immediate stop. Returns the pool it still holds.
    fn pop_and_serve(&self) -> Option<Pool> {
        let rt = self.rt;
        let mut ptrans = None;
        while !rt.shutdown.workers_must_exit() {
            scoreboard::set_thread_status(rt.slot, self.tn, status::READY);
            let Some(conn) = self.wait_on_queue(ptrans.take()) else {
                break;
            };
            if self.take(conn, &mut ptrans).is_break() {
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
                WorkerAccepted::Conn(conn) => {
                    if self.take(conn, &mut ptrans).is_break() {
                        break;
                    }
                    yield_between_connections();
                }
                WorkerAccepted::Again(p) => ptrans = Some(p),
                WorkerAccepted::Stop => break,
            }
        }
        ptrans
    }

    /// A connection this worker got: served, or on an immediate stop closed unserved
    /// (then `Break`: the worker leaves its loop). Either way `held` is the pool it holds
    /// now.
    fn take(&self, conn: Conn, held: &mut Option<Pool>) -> ControlFlow<()> {
        if self.rt.shutdown.workers_must_exit() {
            *held = Some(conn.drop_unserved());
            return ControlFlow::Break(());
        }
        if injected_panic_due() {
            panic!("RWORKER_TEST_PANIC_FILE asked this worker to panic");
        }
        let rt = self.rt;
        *held = Some(conn.serve(&self.thd, rt.slot, self.tn, self.id, |fd| {
            rt.threads.set_worker_fd(self.t, fd)
        }));
        ControlFlow::Continue(())
    }

    /// An idle worker's wait on the fdqueue: announces itself idle (recycling `pool`, so
    /// the listener finds it for the connection it accepts next) and pops the next
    /// connection; None once the queue is terminated or an immediate stop interrupts it.
    fn wait_on_queue(&self, pool: Option<Pool>) -> Option<Conn> {
        let rt = self.rt;
        rt.handoff.set_idle(pool);
        rt.rows.set(Count::IdleWorkers, rt.handoff.idlers() as i64);
        loop {
            match self.rt.handoff.pop() {
                Handed::Conn(conn) => return Some(conn),
                Handed::Terminated => return None,
                Handed::Interrupted if self.rt.shutdown.workers_must_exit() => return None,
                Handed::Interrupted => {}
            }
        }
    }

    /// `RWorkerKeepAlive park`: waits on the child's event set and serves what it woke
    /// for, until the child is done. Holds no pool when it returns (see `Waiter`).
    fn wait_and_serve(&self, p: &'static Parking) -> Option<Pool> {
        let rt = self.rt;
        let mut w = p.waiter(self.t, &rt.handoff)?;
        loop {
            scoreboard::set_thread_status(rt.slot, self.tn, status::READY);
            let outcome = match p.wait(&mut w) {
                Woken::Exit => break,
                Woken::Nothing => Outcome::Away,
                Woken::Broken => {
                    // ap_unixd_accept logged why: a resource shortage.
                    rt.shutdown.mark_sick();
                    rt.ask_main_thread_to_stop(StopMode::Graceful);
                    Outcome::Away
                }
                Woken::New { conn, how } => {
                    rt.counters.add(Counter::Connections, 1);
                    rt.counters.add(how.pool, 1);
                    if how.last {
                        // MaxConnectionsPerChild reached: this connection is served, then
                        // the child retires gracefully.
                        rt.ask_main_thread_to_stop(StopMode::Graceful);
                    }
                    if self.must_drop(conn.sock.os_fd()) {
                        rt.threads.set_worker_fd(self.t, -1);
                        closed(p, conn.drop_unserved())
                    } else {
                        if injected_panic_due() {
                            panic!("RWORKER_TEST_PANIC_FILE asked this worker to panic");
                        }
                        self.serve_new(conn, how.gate, p, &mut w)
                    }
                }
                Woken::Ready(parked) => {
                    injected_claim_delay();
                    if self.must_drop(parked.conn.fd()) {
                        self.drop_parked(parked, p)
                    } else {
                        self.resume(parked, p, &mut w)
                    }
                }
                Woken::Expired(parked) if self.must_drop(parked.conn.fd()) => {
                    self.drop_parked(parked, p)
                }
                Woken::Expired(parked) => self.expire(parked, p, &mut w),
            };
            let closed_here = match outcome {
                Outcome::Closed(pool) => {
                    // See `Waiter`: an idle worker keeps no pool.
                    rt.handoff.recycle(pool);
                    true
                }
                Outcome::Away => false,
            };
            if rt.shutdown.workers_must_exit() {
                break;
            }
            if closed_here {
                yield_between_connections();
            }
        }
        None
    }

    /// This worker takes the connection on `fd`: publishes the descriptor (an immediate
    /// stop shuts it down under the worker), then looks whether such a stop began; true
    /// when it did, and the connection is to be closed unserved. Against the stop, which
    /// marks itself, then shuts down the published descriptors (`signal_threads`): either
    /// the stop cuts this connection, or this worker sees the stop; a connection claimed
    /// just after the stop cannot hold it until the parent's reclaim.
    fn must_drop(&self, fd: RawFd) -> bool {
        publish_then_check(
            || self.rt.threads.set_worker_fd(self.t, fd),
            |()| self.rt.shutdown.workers_must_exit(),
        )
    }

    /// A parked connection claimed during an immediate stop: closed unserved.
    fn drop_parked(&self, parked: Parked, p: &Parking) -> Outcome {
        self.rt.threads.set_worker_fd(self.t, -1);
        closed(p, parked.conn.close(true))
    }

    /// A connection this worker accepted on `gate`: its connection state, then its first
    /// request.
    fn serve_new(&self, conn: Conn, gate: GateIndex, p: &Parking, w: &mut Waiter) -> Outcome {
        let rt = self.rt;
        match AsyncConn::create(&self.thd, conn.sock, conn.ptrans, rt.slot, self.tn, self.id) {
            Ok(c) => self.run_async(c, Step::Head { begins: true }, Some(gate), p, w),
            Err(pool) => {
                rt.threads.set_worker_fd(self.t, -1);
                closed(p, pool)
            }
        }
    }

    /// A parked connection this worker claimed because its socket is ready: its flush goes
    /// on (write completion), its protocol runs again (keep-alive, a module's I/O wait), or
    /// its lingering close reads what came.
    fn resume(&self, parked: Parked, p: &Parking, w: &mut Waiter) -> Outcome {
        let step = match parked.state {
            ParkState::Linger { .. } => return self.linger_on(parked, p, w),
            ParkState::WriteCompletion { read } => Step::In(ConnState::WriteCompletion { read }),
            // The first bytes of its next request are there.
            ParkState::KeepAlive => Step::Head { begins: true },
            ParkState::Head => Step::Head { begins: false },
            ParkState::WaitIo { .. } => Step::Process,
        };
        let mut c = parked.conn;
        c.resume(&self.thd, self.rt.slot, self.tn, self.id);
        self.run_async(c, step, None, p, w)
    }

    /// A parked connection whose time is up: a response that did not drain, a keep-alive
    /// or an I/O wait ends with a short lingering close here (so the pre_close hooks run
    /// on a worker, as event's `defer_lingering_close`); a lingering close that timed out
    /// is closed.
    fn expire(&self, parked: Parked, p: &Parking, w: &mut Waiter) -> Outcome {
        match parked.state {
            ParkState::Linger { .. } => self.drop_parked(parked, p),
            // A round of its wait ended: the head reads on, waits another round, or is due.
            ParkState::Head => {
                let mut c = parked.conn;
                c.resume(&self.thd, self.rt.slot, self.tn, self.id);
                self.run_async(c, Step::Head { begins: false }, None, p, w)
            }
            ParkState::WriteCompletion { .. } | ParkState::KeepAlive | ParkState::WaitIo { .. } => {
                let mut c = parked.conn;
                c.resume(&self.thd, self.rt.slot, self.tn, self.id);
                c.set_short_linger();
                // The server ends this one, not the client: no FIN is on its way, and
                // waiting for one here would hold up the rest of the expired batch.
                self.lingering_close(c, p, w, None)
            }
        }
    }

    /// Runs a parked-mode connection from `step` until it waits (parked in the set, or with
    /// a module) or closes; `new_on` is the listening socket of a connection accepted now
    /// (it takes its child's turn there if it stays open after its first response). In
    /// each of httpd's states the worker first does what needs no wait; what must wait
    /// goes where `parking::states::rule` says ([`Worker::wait_in`]).
    fn run_async(
        &self,
        mut c: AsyncConn,
        mut step: Step,
        mut new_on: Option<GateIndex>,
        p: &Parking,
        w: &mut Waiter,
    ) -> Outcome {
        loop {
            let state = match step {
                Step::Head { begins } => {
                    c.set_status(status::BUSY_READ);
                    let now = monotonic_ns();
                    if begins && !c.begin_head(now) {
                        step = Step::Process; // the core reads this connection's heads
                        continue;
                    }
                    match c.read_head(now) {
                        HeadRead::Ready => {
                            step = Step::Process;
                            continue;
                        }
                        HeadRead::More if c.head_deadline().is_some_and(|d| now >= d) => {
                            // Due: the core reads what came, then meets the timeout, and
                            // answers as mod_reqtimeout (or a socket timeout) makes it.
                            c.expire_head();
                            step = Step::Process;
                            continue;
                        }
                        HeadRead::More => {
                            // A connection that waits for the rest of its first head takes
                            // its child's turn, as one that stays open after a response.
                            if let Some(gate) = new_on.take() {
                                p.take_turn(gate);
                            }
                            ConnState::ReadHead
                        }
                    }
                }
                Step::Process => match c.process() {
                    Asked::WriteCompletion => ConnState::WriteCompletion { read: false },
                    Asked::WaitIo { read } => ConnState::WaitIo { read },
                    Asked::Suspended => ConnState::Suspended,
                    Asked::Linger => return self.linger(c, p, w),
                },
                Step::In(state) => state,
            };
            step = match state {
                // The response: written out without blocking (the core output filter with
                // no new data, as event does); it waits only when the socket is full.
                ConnState::WriteCompletion { .. } => {
                    c.set_status(status::BUSY_WRITE);
                    match c.flush() {
                        Flush::Pending { read } => {
                            // A connection that stays open after its first response takes
                            // its child's turn as if its response had fit (`take_turn`).
                            if c.keeps_alive() {
                                if let Some(gate) = new_on.take() {
                                    p.take_turn(gate);
                                }
                            }
                            return self.wait_in(c, ConnState::WriteCompletion { read }, p, w);
                        }
                        Flush::Failed => return self.linger(c, p, w),
                        Flush::Done if !c.keeps_alive() => return self.linger(c, p, w),
                        Flush::Done => {
                            if let Some(gate) = new_on.take() {
                                p.take_turn(gate);
                            }
                            if c.input_pending() {
                                Step::Head { begins: true } // a pipelined request: now
                            } else {
                                Step::In(ConnState::KeepAlive)
                            }
                        }
                    }
                }
                // The response promised keep-alive, so the connection waits for its next
                // request even if a graceful stop began meanwhile: the client may be
                // sending it already. That request's response says `Connection: close`
                // (the core asks the MPM's state), and a stopping child gives a quiet
                // connection a short while only. While another worker of the child waits
                // in the set (nothing that becomes ready waits for this one), a busy
                // client's next request is served here, as with `thread` (HOLD_ON_WORKER).
                ConnState::KeepAlive => {
                    if p.has_waiters() && c.wait_ready(true, HOLD_ON_WORKER) {
                        Step::Head { begins: true }
                    } else {
                        return self.wait_in(c, state, p, w);
                    }
                }
                ConnState::WaitIo { .. } => {
                    c.set_status(status::BUSY_READ);
                    return self.wait_in(c, state, p, w);
                }
                ConnState::Suspended => return self.wait_in(c, state, p, w),
                ConnState::Linger { .. } => return self.linger(c, p, w),
                ConnState::ReadHead => return self.wait_in(c, state, p, w),
            };
        }
    }

    /// The connection waits in `state` where `parking::states::rule` puts it: parked in the
    /// set, or with the module that took it over.
    fn wait_in(&self, mut c: AsyncConn, state: ConnState, p: &Parking, w: &mut Waiter) -> Outcome {
        self.rt.threads.set_worker_fd(self.t, -1);
        match ParkState::of(state) {
            Some(parked) => self.park(c, parked, p, w),
            None => {
                // A module owns the connection now and resumes it itself. It no longer
                // counts as the child's: this MPM never sees it again (no resume hook),
                // and a stopping child waits for its own connections only (else a
                // graceful stop waited for SIGTERM).
                c.suspend();
                p.suspended();
                std::mem::forget(c);
                Outcome::Away
            }
        }
    }

    /// Parks the connection in the set; it is gone from this thread once parked.
    fn park(&self, mut c: AsyncConn, state: ParkState, p: &Parking, w: &mut Waiter) -> Outcome {
        c.suspend();
        match p.park(w, c, state) {
            Ok(()) => Outcome::Away,
            // Could not be armed (logged): it ends here, without a wait, under the
            // immediate stop's eye again (its lingering close may flush).
            Err(mut c) => {
                c.resume(&self.thd, self.rt.slot, self.tn, self.id);
                self.rt.threads.set_worker_fd(self.t, c.fd());
                close_without_waiting(c, p, || self.rt.threads.set_worker_fd(self.t, -1))
            }
        }
    }

    /// Lingering close after a response: a client usually closes right after it read
    /// one, so its FIN is waited for here a moment first (LINGER_ON_WORKER).
    fn linger(&self, c: AsyncConn, p: &Parking, w: &mut Waiter) -> Outcome {
        self.lingering_close(c, p, w, Some(LINGER_ON_WORKER))
    }

    /// Lingering close: begins it here (pre_close hooks, flush, shutdown of our side),
    /// waits up to `wait_here` on this thread for the client's FIN (reading what it sent),
    /// and else parks the connection to wait for it without a thread.
    fn lingering_close(
        &self,
        mut c: AsyncConn,
        p: &Parking,
        w: &mut Waiter,
        wait_here: Option<Duration>,
    ) -> Outcome {
        c.set_status(status::CLOSING);
        if (c.is_lingering() || c.start_lingering_close()) && !client_done(&mut c, wait_here) {
            let short = c.short_linger();
            self.rt.threads.set_worker_fd(self.t, -1);
            return self.park(c, ParkState::Linger { short }, p, w);
        }
        self.rt.threads.set_worker_fd(self.t, -1);
        closed(p, c.close(false))
    }

    /// A parked lingering close whose socket is readable: reads what came; done when the
    /// client closed, else it waits on in its place.
    fn linger_on(&self, mut parked: Parked, p: &Parking, w: &mut Waiter) -> Outcome {
        let done = parked.conn.drain();
        self.rt.threads.set_worker_fd(self.t, -1);
        if !done {
            match p.linger_on(w, parked) {
                Ok(()) => return Outcome::Away,
                Err(c) => return closed(p, c.close(true)),
            }
        }
        closed(p, parked.conn.close(true))
    }
}

/// What became of a connection a parking worker held.
enum Outcome {
    /// It waits elsewhere now (parked in the set, or with the module that took it over),
    /// or there was none: nothing of it is left on this worker.
    Away,
    /// It was closed here and the child counted the close: its pool, cleared, to recycle.
    Closed(Pool),
}

/// What a parking worker does next with the connection it holds.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// Read its request head without blocking (`begins`: a new one starts now), then run
    /// its protocol once the head is ready; wait parked while it is not.
    Head { begins: bool },
    /// Run its protocol: its next request (or a module's next turn).
    Process,
    /// Go on from httpd's `state`.
    In(ConnState),
}

/// A connection whose wait could not be set up (logged: no parking slot, an epoll error):
/// it ends on this worker without a wait. Its lingering close begins here unless it has
/// (the pre_close hooks run once, as `short-lingering-close`), what the client sent is
/// read, and the socket closed: no second pass through `ap_lingering_close`, whose blocking
/// reads held the worker up to 30 s.
/// `unpublish` is called just before the socket is closed.
fn close_without_waiting(mut c: AsyncConn, p: &Parking, unpublish: impl FnOnce()) -> Outcome {
    // A lingering close the core ended at once (the connection aborted) has nothing to
    // read, and its socket still blocks: no drain then.
    let open = c.is_lingering() || {
        c.set_short_linger();
        c.start_lingering_close()
    };
    if open {
        let _ = c.drain();
    }
    unpublish();
    closed(p, c.close(false))
}

/// Whether the client of a lingering close is done (closed its side, or the socket
/// failed), reading what it sent; waiting `wait_here` for that first, if given. The
/// wait comes before the read, as APR's does after a short read: a client closes after
/// it read the response, so under load its FIN is rarely there yet, and a read first
/// would find nothing (one `read` per connection more, measured with `perf stat` under
/// `wrk -c100` with `Connection: close`, 2026-12-05).
fn client_done(c: &mut AsyncConn, wait_here: Option<Duration>) -> bool {
    if let Some(t) = wait_here {
        // A timeout or an error: the read says which.
        let _ = c.wait_ready(true, t);
    }
    c.drain()
}

/// A parking child's connection is gone, its socket closed: `pool` is cleared, and only
/// then does the child count the close. A close can let the child accept again (below its
/// open-file bound, or after an EMFILE shortage); counted before its descriptor was free,
/// a worker woken by it met EMFILE again.
fn closed(p: &Parking, mut pool: Pool) -> Outcome {
    pool.clear();
    p.closed();
    Outcome::Closed(pool)
}
