//! The listener of a parking child (`RWorkerKeepAlive park`): one epoll set holds the
//! listening sockets, the wake eventfd and every parked connection, so an idle
//! keep-alive connection costs no thread. The listener alone owns the set, the table of
//! parked connections (`table`) and their timeout lists (`timeouts`): workers reach it
//! only through the lock-free inbox (`crate::mpm::inbox`), so nothing here takes a lock.
//!
//! One turn of the loop: take in what workers parked; expire what timed out (keep-alive
//! and I/O waits go to a worker for a lingering close, so pre_close hooks run there;
//! lingering closes that timed out are closed here); hand ready connections to idle
//! workers, oldest first; accept new connections only while a worker is reserved and no
//! ready connection waits (so, as with the stock worker, new clients wait in the kernel's
//! backlog when every worker is busy); sleep in epoll_wait until something happens.
//! Nothing is closed before its timeout for lack of a worker: a ready connection waits in
//! the FIFO until a worker frees up.
//!
//! On a graceful stop the listener closes its listening sockets and gives each parked
//! keep-alive connection `STOP_KEEP_ALIVE` more to send its next request (the last
//! response promised keep-alive, and a busy client may be sending already): a request
//! that comes is served, with `Connection: close` since the MPM is stopping; a
//! connection still quiet then gets a short lingering close. It lets requests in flight
//! finish and lingering closes end, and leaves when the child has no connection left.

mod ready;
mod table;
mod timeouts;

use std::time::{Duration, Instant};

use crate::ffi::async_conn::AsyncConn;
use crate::ffi::epoll::{Epoll, Interest};
use crate::ffi::httpd;
use crate::ffi::listen::Accepted;
use crate::ffi::log::level;
use crate::ffi::pool::Pool;
use crate::ffi::scoreboard::{self, AsyncCounts};
use crate::ffi::{panic, signal};
use crate::mpm::conn::Conn;
use crate::mpm::handoff::Job;
use crate::mpm::idle_split::accept_cap;
use crate::mpm::inbox::{Park, ParkState, Parking};
use crate::mpm::listener::{publish_wakes, Listener};
use crate::mpm::runtime::{ChildRuntime, StopMode, LISTENER_SIGNAL};
use crate::mpm::status::Counter;
use crate::mpm::worker_accept::WorkerAccept;
use ready::Ready;
use table::{Key, Table};
use timeouts::Timeouts;

/// The epoll key of the wake eventfd; listening socket `i` is `WAKE - 1 - i`.
const WAKE: u64 = u64::MAX;
/// Keys at or above this are the listening sockets' and the eventfd's.
const FIXED_KEYS: u64 = u64::MAX - 1024;
/// Lingering close after the client was told we are done (`SECONDS_TO_LINGER`).
const SHORT_LINGER: Duration = Duration::from_secs(2);
/// Lingering close at most (`MAX_SECS_TO_LINGER`).
const LINGER: Duration = Duration::from_secs(30);
/// A stopping child's keep-alive connections wait at most this long for their next
/// request (less if their KeepAliveTimeout ends sooner). A client in the middle of its
/// requests sends the next one within milliseconds of a response; one quiet for a second
/// is idle, and is closed as KeepAliveTimeout would close it. Closing at once instead
/// cut the request a busy client was sending: 82-97 wrk read errors per graceful restart
/// under `wrk -c100` keep-alive (bench/graceful/run.sh, 2026-12-02).
const STOP_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// Longest sleep while work waits for an idle worker (a missed wake costs at most this).
const IDLER_POLL: Duration = Duration::from_millis(100);
/// With workers that accept: how soon the listener interrupts another worker in accept
/// when the one it interrupted has not come to the fdqueue (it had just accepted).
const NUDGE_AGAIN: Duration = Duration::from_millis(5);
/// With workers that accept: how often the listener re-publishes its open connections
/// (`Parking::opened` and `closed` publish each change) and sets its accept cap from its
/// siblings' (`idle_split::accept_cap`).
const BALANCE_EVERY: Duration = Duration::from_millis(10);
/// How often an idle listener whose child the accept cap stopped looks at its siblings'
/// counts again (a child with more idle connections than its siblings wakes this often).
const CAPPED_RECHECK: Duration = Duration::from_millis(50);
/// How often the scoreboard's connection counts are refreshed.
const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// One parked connection.
struct Entry {
    conn: AsyncConn,
    state: ParkState,
    /// When the wait ends (a lingering close that reads data keeps it, and its place in
    /// its timeout list).
    deadline: Instant,
}

/// The parking listener's state (see the module doc).
struct ParkingListener<'a> {
    rt: &'static ChildRuntime,
    parking: &'a Parking,
    l: Listener,
    epoll: Epoll,
    table: Table<Entry>,
    timeouts: Timeouts<Key>,
    ready: Ready,
    /// A worker is reserved for the next job or accept.
    have_idler: bool,
    /// The listening sockets are armed in the epoll set.
    accepting: bool,
    /// The listening sockets are closed (stop under way).
    listeners_closed: bool,
    /// The pool the next connection is accepted into, and where it came from.
    ptrans: Option<(Pool, Counter)>,
    max_mem_free: usize,
    /// MaxConnectionsPerChild: connections this child may still accept.
    connections_left: u64,
    wakes_counted: u64,
    last_publish: Instant,
    /// The workers accept new connections themselves (`RWorkerAccept workers`): this
    /// listener only watches parked connections, and gets workers out of accept when it
    /// needs one on the fdqueue (`crate::mpm::idle_split`).
    accept: Option<&'static WorkerAccept>,
    /// With `accept`: a worker was wanted on the fdqueue since the last publish.
    short_on_queue: bool,
    /// With `accept`: when a worker was last interrupted in accept.
    last_nudge: Option<Instant>,
    /// With `accept`: when the accept cap was last set.
    last_balance: Option<Instant>,
    /// With `accept`: the accept cap stopped this child at the last balance.
    capped: bool,
}

/// The listener thread's body in a parking child; with `accept`, the workers accept new
/// connections and `l` has no sockets.
pub fn run(l: Listener, rt: &'static ChildRuntime, accept: Option<&'static WorkerAccept>) {
    let _place = panic::enter("listener thread (parking)");
    rt.threads.listener_started();
    signal::unblock_for_this_thread(LISTENER_SIGNAL);
    let Some(parking) = rt.parking.as_ref() else {
        return l.run(rt);
    };
    let epoll = match Epoll::new(256) {
        Ok(e) => e,
        Err(errno) => {
            crate::mpm_log!(
                level::EMERG,
                errno,
                "RW00031: could not create the listener's epoll set"
            );
            rt.shutdown.mark_sick();
            rt.ask_main_thread_to_stop(StopMode::Graceful);
            rt.shutdown.mark_listener_gone();
            return;
        }
    };
    let mut pl = ParkingListener {
        rt,
        parking,
        l,
        epoll,
        table: Table::default(),
        timeouts: Timeouts::default(),
        ready: Ready::default(),
        have_idler: false,
        accepting: false,
        listeners_closed: false,
        ptrans: None,
        max_mem_free: httpd::max_mem_free(),
        connections_left: match httpd::max_connections_per_child() {
            n if n > 0 => n as u64,
            _ => u64::MAX,
        },
        wakes_counted: 0,
        last_publish: Instant::now(),
        accept,
        short_on_queue: false,
        last_nudge: None,
        last_balance: None,
        capped: false,
    };
    pl.run();
}

impl ParkingListener<'_> {
    fn run(&mut self) {
        let mut consumer = self
            .parking
            .inbox
            .consumer()
            .expect("the listener is the inbox's only consumer");
        let _ = self
            .epoll
            .add(self.parking.wake.fd(), Interest::ReadLevel, WAKE);
        for s in &self.l.sockets {
            s.set_nonblocking();
        }
        let mut self_stop = false;
        loop {
            let now = Instant::now();
            if self.rt.shutdown.workers_must_exit() {
                break;
            }
            let stopping = self.rt.shutdown.is_stopping();
            if stopping && !self.listeners_closed {
                self.begin_stop();
            }
            if !stopping && !self_stop && self.connections_left == 0 {
                // MaxConnectionsPerChild reached: this child retires gracefully.
                self_stop = true;
                self.rt.ask_main_thread_to_stop(StopMode::Graceful);
            }
            for p in consumer.drain() {
                self.take_in(p, stopping, now);
            }
            self.expire(now);
            self.dispatch();
            if !stopping {
                self.balance(now);
            }
            self.arm_listeners(stopping);
            if now.duration_since(self.last_publish) >= PUBLISH_EVERY {
                self.publish();
                if !stopping {
                    self.resize_split();
                }
            }
            if stopping
                && self.table.is_empty()
                && self.ready.is_empty()
                && self.parking.open() == 0
            {
                break;
            }
            // Sleep until a socket, a worker or a deadline needs us.
            let waiting_for_idler = !self.have_idler && !self.ready.is_empty();
            if waiting_for_idler {
                self.parking.want_idler();
                if self.rt.handoff.try_get_idler() {
                    self.have_idler = true;
                    self.parking.idler_found();
                    continue;
                }
                self.nudge(now);
            }
            let mut timeout = self.timeouts.poll_timeout_ms(now);
            let mut cap = |d: Duration| {
                let ms = d.as_millis() as i32;
                if timeout < 0 || timeout > ms {
                    timeout = ms;
                }
            };
            cap(PUBLISH_EVERY);
            if waiting_for_idler || stopping {
                cap(IDLER_POLL);
            }
            if waiting_for_idler && self.accept.is_some() {
                cap(NUDGE_AGAIN);
            }
            if let Some(acc) = self.accept {
                // No worker accepts here: look again soon (balance), at the siblings' counts
                // if the cap stopped this child, or to send a worker back to accept.
                if self.capped {
                    cap(CAPPED_RECHECK);
                } else if acc.waiting() == 0 {
                    cap(BALANCE_EVERY);
                }
            }
            let sleep = consumer.prepare_to_sleep();
            let events: Vec<(u64, bool)> =
                self.epoll.wait(if sleep { timeout } else { 0 }).collect();
            consumer.awake();
            for (key, hup) in events {
                self.event(key, hup);
            }
        }
        self.finish(consumer);
    }

    /// With workers that accept, none of them waits on the fdqueue for the work in the
    /// ready FIFO: wants more there from now on, and gets one out of accept (again after
    /// `NUDGE_AGAIN` if it does not come).
    fn nudge(&mut self, now: Instant) {
        let Some(acc) = self.accept else {
            return;
        };
        self.parking.split.short_on_queue();
        self.short_on_queue = true;
        if self
            .last_nudge
            .is_some_and(|t| now.duration_since(t) < NUDGE_AGAIN)
        {
            return;
        }
        if acc.nudge_one(&self.rt.threads) {
            self.last_nudge = Some(now);
        }
    }

    /// With workers that accept, every `BALANCE_EVERY` while the listener runs: publishes
    /// the child's open connections, sets its accept cap from its siblings', and if it may
    /// accept but no worker does, sends one from the fdqueue back to accept.
    fn balance(&mut self, now: Instant) {
        let Some(acc) = self.accept else {
            return;
        };
        if self
            .last_balance
            .is_some_and(|t| now.duration_since(t) < BALANCE_EVERY)
        {
            return;
        }
        self.last_balance = Some(now);
        self.parking.republish_open();
        let own = self.parking.open();
        let siblings = self.parking.siblings_open();
        let split = &self.parking.split;
        split.set_accept_cap(accept_cap(
            own as usize,
            siblings,
            self.rt.threads.workers(),
        ));
        let full = !split.may_accept(own as usize) || self.parking.at_file_limit();
        let was_capped = std::mem::replace(&mut self.capped, full);
        if self.capped || !self.ready.is_empty() {
            return;
        }
        // Uncapped: the workers the cap sent to the fdqueue go back to accept (all beyond
        // the fdqueue's share when the cap just lifted, else one if none accepts), or new
        // connections would wait for them one kick at a time.
        let kicks = if was_capped {
            split.surplus_on_queue(self.rt.handoff.idlers() as usize)
        } else {
            usize::from(acc.waiting() == 0)
        };
        self.send_to_accept(kicks);
    }

    /// Sends up to `n` workers waiting on the fdqueue back to accept (`Job::Accept`).
    fn send_to_accept(&mut self, n: usize) {
        let mut sent = 0;
        while sent < n && self.rt.handoff.try_get_idler() {
            if self.rt.handoff.push(Job::Accept).is_err() {
                break;
            }
            sent += 1;
        }
        if sent > 0 {
            self.wakes_counted = publish_wakes(self.rt, self.wakes_counted);
        }
    }

    /// With workers that accept, once a second: a second without a shortage on the
    /// fdqueue halves its share of the idle workers, and the workers waiting there beyond
    /// it are sent back to accept.
    fn resize_split(&mut self) {
        if self.accept.is_none() {
            return;
        }
        if !std::mem::take(&mut self.short_on_queue) {
            self.parking.split.decay();
        }
        let surplus = self
            .parking
            .split
            .surplus_on_queue(self.rt.handoff.idlers() as usize);
        self.send_to_accept(surplus);
        // Once a second at least, whatever was sent.
        self.wakes_counted = publish_wakes(self.rt, self.wakes_counted);
    }

    /// Stop under way: stop listening, and give parked keep-alive connections at most
    /// `STOP_KEEP_ALIVE` for their next request.
    fn begin_stop(&mut self) {
        self.listeners_closed = true;
        self.accepting = false;
        if let Some(first) = self.l.sockets.first() {
            first.close_from_here();
        }
        scoreboard::set_quiescing(self.rt.slot);
        let now = Instant::now();
        for key in self.table.keys() {
            let Some(e) = self.table.get_mut(key) else {
                continue;
            };
            let left = match e.state {
                // A stopping child lingers 2 s at most (event's clamp), so that a client
                // that never closes cannot hold it.
                ParkState::Linger { .. } => SHORT_LINGER,
                ParkState::KeepAlive => STOP_KEEP_ALIVE,
                ParkState::WaitIo { .. } => continue,
            };
            if e.deadline > now + left {
                // One list for all of them: the same timeout from the same instant.
                e.deadline = now + left;
                self.timeouts.add(key.index(), key, left, now);
            }
        }
    }

    /// A connection a worker parked.
    fn take_in(&mut self, p: Park, stopping: bool, now: Instant) {
        let Park { conn, state } = p;
        let wait = match state {
            ParkState::KeepAlive if stopping => conn.keep_alive_timeout().min(STOP_KEEP_ALIVE),
            ParkState::KeepAlive => conn.keep_alive_timeout(),
            ParkState::WaitIo { .. } => conn.timeout(),
            ParkState::Linger { short } if short || stopping => SHORT_LINGER,
            ParkState::Linger { .. } => LINGER,
        };
        self.park(conn, state, wait, now);
    }

    /// Puts a connection in the table, the epoll set and the timeout list of `wait` (its
    /// class: a KeepAliveTimeout, Timeout, or a lingering bound), to expire `wait` after
    /// `now`. The lists are keyed by class, not by time left, so there are only a few.
    fn park(&mut self, mut conn: AsyncConn, state: ParkState, wait: Duration, now: Instant) {
        let deadline = now + wait;
        let interest = match state {
            ParkState::WaitIo { read: false } => Interest::WriteOnce,
            _ => Interest::ReadOnce,
        };
        let fd = conn.fd();
        let registered = conn.is_registered();
        conn.set_registered();
        let key = self.table.insert(Entry {
            conn,
            state,
            deadline,
        });
        let armed = if registered {
            self.epoll.modify(fd, interest, key.to_u64())
        } else {
            self.epoll.add(fd, interest, key.to_u64())
        };
        if let Err(errno) = armed {
            crate::mpm_log!(
                level::ERR,
                errno,
                "RW00032: could not poll a parked connection; closing it"
            );
            self.timeouts.remove(key.index());
            if let Some(e) = self.table.remove(key) {
                self.close_here(e.conn);
            }
            return;
        }
        self.timeouts.add(key.index(), key, wait, now);
    }

    /// Deadlines that passed.
    fn expire(&mut self, now: Instant) {
        for key in self.timeouts.expire(now) {
            // The socket stays registered: see begin_stop.
            let Some(entry) = self.table.remove(key) else {
                continue;
            };
            match entry.state {
                ParkState::KeepAlive | ParkState::WaitIo { .. } => {
                    let mut conn = entry.conn;
                    conn.set_short_linger();
                    self.ready.push_back(Job::Close(conn));
                }
                ParkState::Linger { .. } => self.close_here(entry.conn),
            }
        }
    }

    /// A ready registration.
    fn event(&mut self, key: u64, hup: bool) {
        if key == WAKE {
            self.parking.wake.clear();
            return;
        }
        if key >= FIXED_KEYS {
            let i = (WAKE - 1 - key) as usize;
            self.accept(i);
            return;
        }
        let key = Key::from_u64(key);
        let Some(entry) = self.table.get_mut(key) else {
            return; // stale: the connection left the table since
        };
        if let ParkState::Linger { .. } = entry.state {
            // A lingering close that read what came and is still open waits on, armed
            // again, in its place in its timeout list (it keeps its first deadline).
            if !hup && !entry.conn.drain() {
                let fd = entry.conn.fd();
                if self
                    .epoll
                    .modify(fd, Interest::ReadOnce, key.to_u64())
                    .is_ok()
                {
                    return;
                }
            }
        }
        let Some(entry) = self.table.remove(key) else {
            return;
        };
        self.timeouts.remove(key.index());
        match entry.state {
            ParkState::KeepAlive | ParkState::WaitIo { .. } => {
                self.ready.push_back(Job::Resume(entry.conn));
            }
            // Done (the client closed), or it could not be armed again.
            ParkState::Linger { .. } => self.close_here(entry.conn),
        }
    }

    /// Hands ready connections to idle workers, oldest first.
    fn dispatch(&mut self) {
        while !self.ready.is_empty() {
            if !self.have_idler {
                self.have_idler = self.rt.handoff.try_get_idler();
                if !self.have_idler {
                    return;
                }
            }
            let Some(job) = self.ready.pop_front() else {
                return;
            };
            self.rt.counters.add(Counter::Handoffs, 1);
            match self.rt.handoff.push(job) {
                Ok(()) => {
                    self.have_idler = false;
                    self.wakes_counted = publish_wakes(self.rt, self.wakes_counted);
                }
                Err(job) => {
                    self.rt.counters.remove(Counter::Handoffs, 1);
                    self.close_job(job);
                }
            }
        }
    }

    /// Arms the listening sockets while fewer than ThreadsPerChild accepted connections
    /// wait for their first worker, and the child is below its open-file limit (else it
    /// looks again at the next turn: a close, a timeout, at most `PUBLISH_EVERY`). A new connection joins the back of the ready FIFO,
    /// behind parked connections that became readable before it, so under overload new and
    /// kept-alive clients are served in arrival order. Only waiting *new* connections count
    /// against the bound: counting resumed ones too left reconnecting clients
    /// (MaxKeepAliveRequests) in the kernel's backlog for as long as parked connections kept
    /// the FIFO long (p99 0.2 s at 400 keep-alive clients and 150 workers, 1 s with 50).
    /// Beyond the bound new clients wait in the backlog, or go to a less busy child.
    fn arm_listeners(&mut self, stopping: bool) {
        let want = !stopping
            && !self.listeners_closed
            && self.connections_left > 0
            && !self.parking.at_file_limit()
            && self.ready.new_connections() < self.rt.threads.workers();
        if want != self.accepting {
            // Every child polls the same listening sockets: EPOLLEXCLUSIVE wakes one
            // listener per connection instead of all (the others would only get EAGAIN).
            // An exclusive registration cannot be modified, so disarming deletes it.
            for (i, s) in self.l.sockets.iter().enumerate() {
                let _ = if want {
                    self.epoll
                        .add(s.os_fd(), Interest::ReadExclusive, WAKE - 1 - i as u64)
                } else {
                    self.epoll.delete(s.os_fd())
                };
            }
            self.accepting = want;
        }
    }

    /// Accepts one connection from listening socket `i` into the ready FIFO.
    fn accept(&mut self, i: usize) {
        if !self.accepting || self.connections_left == 0 {
            return;
        }
        if self.ptrans.is_none() {
            self.ptrans = self.l.ptrans(self.rt, self.max_mem_free);
        }
        let Some((pool, _)) = self.ptrans.as_mut() else {
            return;
        };
        let sock = match self.l.sockets[i].accept(pool) {
            Accepted::Socket(s) => s,
            Accepted::Nothing => return, // another child took it, or the client left
            Accepted::Broken => {
                self.rt.shutdown.mark_sick();
                self.rt.ask_main_thread_to_stop(StopMode::Graceful);
                return;
            }
            Accepted::OutOfFiles => {
                // The child keeps what it holds and accepts again once some close
                // (arm_listeners).
                self.parking.out_of_files();
                return;
            }
        };
        let Some((pool, source)) = self.ptrans.take() else {
            return;
        };
        self.rt.counters.add(source, 1);
        self.rt.counters.add(Counter::Connections, 1);
        self.parking.opened();
        self.connections_left = self.connections_left.saturating_sub(1);
        self.ready.push_back(Job::New(Conn { sock, ptrans: pool }));
        self.dispatch();
    }

    /// Closes a connection on this thread (lingering done or timed out, or no worker
    /// will take it) and recycles its pool.
    fn close_here(&mut self, conn: AsyncConn) {
        self.parking.closed();
        let pool = conn.close(true);
        self.recycle(pool);
    }

    /// Closes a job's connection unserved and recycles its pool.
    fn close_job(&mut self, job: Job) {
        if job.has_connection() {
            self.parking.closed();
        }
        if let Some(pool) = job.close_unserved() {
            self.recycle(pool);
        }
    }

    fn recycle(&mut self, pool: Pool) {
        self.rt.handoff.recycle(pool);
    }

    /// The scoreboard's connection counts for mod_status.
    fn publish(&mut self) {
        self.last_publish = Instant::now();
        let mut a = AsyncCounts {
            connections: self.parking.open(),
            suspended: self.parking.suspended_count(),
            not_accepting: !self.accepting,
            ..AsyncCounts::default()
        };
        for key in self.table.keys() {
            if let Some(e) = self.table.get_mut(key) {
                match e.state {
                    ParkState::KeepAlive => a.keep_alive += 1,
                    ParkState::WaitIo { .. } => a.wait_io += 1,
                    ParkState::Linger { .. } => a.lingering_close += 1,
                }
            }
        }
        scoreboard::set_async_counts(self.rt.slot, a);
        self.rt.counters.set(
            Counter::Parked,
            (a.keep_alive + a.wait_io + a.lingering_close) as u64,
        );
        // A stopping child accepts nothing anyway, and its slot may already be another
        // child's (the row goes with the slot): it reports 0.
        let at_limit = !self.rt.shutdown.is_stopping() && self.parking.at_file_limit();
        self.rt.counters.set(Counter::AtFileLimit, at_limit as u64);
    }

    /// Leaving: close whatever is left, close the inbox (workers then close their own
    /// connections), let workers drain the fdqueue, and report the listener gone.
    fn finish(&mut self, mut consumer: rworker_queue::InboxConsumer<'_, Park>) {
        if !self.listeners_closed {
            self.listeners_closed = true;
            if let Some(first) = self.l.sockets.first() {
                first.close_from_here();
            }
        }
        let _ = consumer.inbox().close();
        let left: Vec<Park> = consumer.drain().collect();
        for p in left {
            self.close_here(p.conn);
        }
        for key in self.table.keys() {
            self.timeouts.remove(key.index());
            if let Some(e) = self.table.remove(key) {
                self.close_here(e.conn);
            }
        }
        while let Some(job) = self.ready.pop_front() {
            self.close_job(job);
        }
        drop(self.ptrans.take());
        self.publish();
        self.wakes_counted = publish_wakes(self.rt, self.wakes_counted);
        self.rt.handoff.free_idle_pools();
        self.rt.handoff.term_queue();
        scoreboard::set_quiescing(self.rt.slot);
        self.rt.shutdown.mark_listener_gone();
    }
}
