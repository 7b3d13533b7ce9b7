//! A parking child (`RWorkerKeepAlive park`): its idle workers take turns waiting on one
//! event set (Leader/Followers, with the kernel as the dispatcher), and a connection holds a
//! thread only while a request is read and handled: its write completion, the wait for its
//! next request and its lingering close wait parked.
//!
//! The set holds the child's listening sockets (`gate`), its bucket's relay (`relay`: an
//! eventfd shared with the sibling children), a bell (an eventfd that wakes every worker when
//! the child is done), an alarm (a timerfd for the earliest timeout) and every parked
//! connection (one-shot). Each idle worker waits in `epoll_wait` for one event; the
//! kernel wakes one waiter per event, and the worker handles what it woke for:
//!
//! - a listening socket: it accepts one connection (non-blocking) and serves it (one per
//!   wake: a connection is taken only by a worker that will serve it at once, so none
//!   waits in a child whose workers are busy while a sibling's idle);
//! - a parked connection: it claims it (`rworker_queue::ParkSlots`: a CAS on the slot's claim
//!   word, which readiness, expiry and a stop race for; the loser forgets it) and goes on
//!   with its response (write completion), its next request, or its lingering close;
//! - the alarm: it pops what timed out (`rworker_queue::Timeouts`, FIFOs per worker and
//!   timeout length, lazy deletion), claims each, and closes it;
//! - the relay: a sibling may have dropped a new connection's wake (it stopped accepting
//!   just then); it re-adds the listening sockets, and the add polls them;
//! - the bell: the child is done, it leaves.
//!
//! A worker that finished a request parks the connection itself: it takes the connection's
//! next ticket, files a timeout entry under it, arms the socket in the set under it, and
//! only then publishes the connection in its slot; from then on it never touches it again.
//! Nobody hands a connection to anybody, and nothing here takes a lock. Every park files a
//! fresh entry; the entries of earlier parks stay where they are until they come due, and
//! then their claims fail (lazy deletion). What a connection waits for in each of httpd's
//! states, for how long, and what a stop does to it: `states`.
//!
//! Nothing is closed before its timeout because workers are busy: a connection that became
//! readable stays in the set's ready list until a worker is free. A graceful stop takes the
//! listening sockets out, cuts each parked connection's wait as `states` says (a keep-alive
//! connection gets `STOP_KEEP_ALIVE` for one more request: its last response promised
//! keep-alive, and a busy client may be sending already; that request is answered with
//! `Connection: close`), and rings the bell once the last connection is closed
//! (`rworker_queue::Drain`).

mod classes;
mod gate;
mod relay;
mod shortage;
pub mod states;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use rworker_queue::{
    publish_then_check, ConnectionBudget, Drain, ParkSlots, Producer, Serial, Ticket, Timeouts,
};

use crate::ffi::async_conn::AsyncConn;
use crate::ffi::epoll::{monotonic_ns, Epoll, Interest, TimerFd, WakeFd};
use crate::ffi::httpd;
use crate::ffi::listen::{Accepted, Listener as ListenSocket};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::head::clock;
use crate::mpm::conn::Conn;
use crate::mpm::handoff::Handoff;
use crate::mpm::open_files;
use crate::mpm::row_counts::{Count, RowCounts};
use crate::mpm::status::Counter;
use classes::Classes;
use gate::{Gate, Inside};
use relay::Relay;
use shortage::{Failure, Shortage, Want};
use states::{rule, ConnState, Place, LINGER, SHORT_LINGER, STOP_KEEP_ALIVE};

/// The bell's key in the set.
const BELL: u64 = u64::MAX;
/// The alarm's key.
const ALARM: u64 = u64::MAX - 1;
/// The relay's key.
const RELAY: u64 = u64::MAX - 2;
/// Listening socket `i`'s key is `GATES - i` (tickets never come near: their low half is a
/// descriptor number).
const GATES: u64 = u64::MAX - 3;

/// Why a connection is parked, and so what the set waits for and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParkState {
    /// A response waits to be written out (write completion): writable (readable where
    /// TLS must read first, `read`) within Timeout, then the flush goes on.
    WriteCompletion { read: bool },
    /// Between requests: readable within KeepAliveTimeout, else closed.
    KeepAlive,
    /// A module waits for the socket (h2 flow control): readable (`read`) or writable
    /// within Timeout, then its protocol runs again.
    WaitIo { read: bool },
    /// Lingering close: reading what the client still sends until it closes, for up to
    /// 2 s (`short`) or 30 s.
    Linger { short: bool },
    /// A request head that is still arriving: readable, in rounds up to its own deadline
    /// (`crate::head::clock`).
    Head,
}

impl ParkState {
    /// How a connection in httpd's `state` waits in the set, where `states::rule` places it
    /// there (`Place::Set`); None where the rule places it elsewhere (a suspended connection
    /// waits with its module).
    pub fn of(state: ConnState) -> Option<ParkState> {
        if rule(state).place != Place::Set {
            return None;
        }
        match state {
            ConnState::WriteCompletion { read } => Some(ParkState::WriteCompletion { read }),
            ConnState::KeepAlive => Some(ParkState::KeepAlive),
            ConnState::WaitIo { read } => Some(ParkState::WaitIo { read }),
            ConnState::Linger { short } => Some(ParkState::Linger { short }),
            ConnState::ReadHead => Some(ParkState::Head),
            ConnState::Suspended => None,
        }
    }

    /// The tag in the slot's claim word (for a stop's scan and for the counts).
    fn tag(self) -> u8 {
        match self {
            ParkState::KeepAlive => 0,
            ParkState::WaitIo { read: true } => 1,
            ParkState::WaitIo { read: false } => 2,
            ParkState::Linger { short: true } => 3,
            ParkState::Linger { short: false } => 4,
            ParkState::WriteCompletion { read: false } => 5,
            ParkState::WriteCompletion { read: true } => 6,
            ParkState::Head => 7,
        }
    }

    fn from_tag(tag: u8) -> ParkState {
        match tag {
            0 => ParkState::KeepAlive,
            1 => ParkState::WaitIo { read: true },
            2 => ParkState::WaitIo { read: false },
            3 => ParkState::Linger { short: true },
            5 => ParkState::WriteCompletion { read: false },
            6 => ParkState::WriteCompletion { read: true },
            7 => ParkState::Head,
            _ => ParkState::Linger { short: false },
        }
    }

    /// The row count this state is shown in.
    fn count(self) -> Count {
        match self {
            ParkState::WriteCompletion { .. } => Count::WriteCompletion,
            ParkState::KeepAlive => Count::KeepAlive,
            ParkState::WaitIo { .. } => Count::WaitIo,
            ParkState::Linger { .. } => Count::LingeringClose,
            ParkState::Head => Count::ReadingHead,
        }
    }

    /// httpd's state it is.
    fn conn_state(self) -> ConnState {
        match self {
            ParkState::WriteCompletion { read } => ConnState::WriteCompletion { read },
            ParkState::KeepAlive => ConnState::KeepAlive,
            ParkState::WaitIo { read } => ConnState::WaitIo { read },
            ParkState::Linger { short } => ConnState::Linger { short },
            ParkState::Head => ConnState::ReadHead,
        }
    }

    /// The length of its wait for `conn` (`states`: whose timeout).
    fn wait(self, conn: &mut AsyncConn) -> Duration {
        let r = rule(self.conn_state());
        // Every parked state has a length; the vhost's two are read only when used.
        match r.wait {
            states::Wait::KeepAliveTimeout => conn.keep_alive_timeout(),
            states::Wait::Timeout => conn.timeout(),
            states::Wait::Fixed(d) => d,
            states::Wait::Unbounded => LINGER,
            // The next round toward the head's own deadline (a due head waits the
            // shortest: the worker it wakes ends it).
            states::Wait::HeadDeadline => {
                let left = conn
                    .head_deadline()
                    .map_or(0, |d| d.saturating_sub(monotonic_ns()));
                clock::rung(Duration::from_nanos(left)).unwrap_or(clock::SHORTEST_ROUND)
            }
        }
    }

    /// What the set waits for.
    fn interest(self) -> Interest {
        rule(self.conn_state())
            .interest
            .unwrap_or(Interest::ReadOnce)
    }

    /// The wait a graceful stop leaves it, if shorter.
    fn stop_wait(self) -> Option<Duration> {
        rule(self.conn_state()).stop_wait()
    }
}

/// A parked connection, as it waits in its slot.
#[derive(Debug)]
pub struct Parked {
    /// The connection.
    pub conn: AsyncConn,
    /// What it waits for.
    pub state: ParkState,
    /// When its wait ends ([`monotonic_ns`]): a lingering close that waits on keeps it.
    deadline: u64,
}

/// How a connection was accepted, for the child's counters.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    /// Its transaction pool: `PoolsReused` (from the recycled stack) or `PoolsCreated`.
    pub pool: Counter,
    /// MaxConnectionsPerChild was reached (the child retires once it is served).
    pub last: bool,
    /// The listening socket it came from, for [`Parking::take_turn`].
    pub gate: GateIndex,
}

/// One of the child's listening sockets, named for [`Parking::take_turn`].
#[derive(Clone, Copy, Debug)]
pub struct GateIndex(usize);

/// What a worker woke for (see the module doc).
pub enum Woken {
    /// A connection to serve from its first request, accepted now.
    New { conn: Conn, how: Admission },
    /// Accept failed for want of a resource (the core logged why; or no transaction
    /// pool): the child retires, sick.
    Broken,
    /// A parked connection it claimed: readable (or writable), or for a lingering close,
    /// the client sent more or closed.
    Ready(Parked),
    /// A parked connection whose time is up, claimed: to close.
    Expired(Parked),
    /// The child is done: leave.
    Exit,
    /// Nothing for it (a sibling took the connection, a stale event, a signal).
    Nothing,
}

/// A worker's own part of the set: where it files timeouts, and the child's stack of
/// recycled pools. An idle worker keeps no pool of its own: a pool left by a closed
/// connection goes to the stack at once (at most ThreadsPerChild + 1 there, the rest
/// destroyed), so a child holds a pool per open connection and a few more, as event does.
/// (Kept per worker, 25 pools a child held each a request's worth of freed memory: 0.9 MB
/// more per child than event after 200,000 keep-alive requests, 2026-12-04.)
pub struct Waiter {
    timeouts: Producer<'static, Ticket>,
    /// The child's recycled pools (queue_info's stack).
    recycled: &'static Handoff,
}

/// What a parking child's threads share (see the module doc).
pub struct Parking {
    set: Epoll,
    bell: WakeFd,
    timer: TimerFd,
    gates: Box<[Gate]>,
    /// The bucket's relay (None if the parent could not make one).
    relay: Option<Relay>,
    /// Changes to the registrations of the gates and the relay.
    serial: Serial,
    slots: ParkSlots<Parked>,
    /// Workers waiting in the set now.
    waiting: AtomicUsize,
    timeouts: Timeouts<Ticket>,
    classes: Classes,
    /// Open connections, the stop, the bell's protocol.
    drain: Drain,
    /// MaxConnectionsPerChild.
    budget: ConnectionBudget,
    /// The most connections the child may hold for its open-file limit
    /// (`crate::mpm::open_files`), and none more until a close once it was short of a
    /// descriptor (EMFILE) or of a place in its set for a listening socket.
    files: Shortage,
    /// The gates were taken out of the set while the child was held back
    /// ([`Parking::held_back`]): the close that ends that puts them back.
    files_blocked: AtomicBool,
    /// Accept broke (a resource shortage): the child retires, sick, and takes no more
    /// connections meanwhile.
    broken: AtomicBool,
    /// A worker took the news of `broken` to the child's main thread ([`Woken::Broken`]).
    broken_told: AtomicBool,
    /// When a graceful stop began ([`monotonic_ns`]; written once, before the stop's mark).
    stop_time: AtomicU64,
    /// Workers (each a timeout producer; the main thread is one more, for the stop).
    workers: usize,
    /// The child's counts as its rows show them.
    rows: &'static RowCounts,
    pconf: ConfigPool,
    max_mem_free: usize,
}

impl Parking {
    /// The set for a child (its counts and slot rows `rows`) with `workers`
    /// workers, accepting on `sockets` (told through its bucket's `relay`), with pools
    /// under `pconf`. It holds at most as many connections as its open-file limit leaves
    /// room for (`open_files`), and MaxConnectionsPerChild. Errors: errno (no epoll set,
    /// eventfd or timerfd).
    pub fn new(
        rows: &'static RowCounts,
        workers: usize,
        sockets: Vec<ListenSocket>,
        relay: Option<WakeFd>,
        pconf: ConfigPool,
    ) -> Result<Parking, i32> {
        let set = Epoll::new()?;
        let bell = WakeFd::new()?;
        let timer = TimerFd::new()?;
        set.add(bell.fd(), Interest::ReadLevel, BELL)?;
        set.add(timer.fd(), Interest::ReadOnce, ALARM)?;
        let classes = Classes::new(
            httpd::server_timeouts()
                .into_iter()
                .flat_map(|(keep_alive, timeout)| [keep_alive, timeout])
                .chain([SHORT_LINGER, LINGER, STOP_KEEP_ALIVE])
                .chain(clock::rounds()),
        );
        let gates = sockets
            .into_iter()
            .enumerate()
            .map(|(i, s)| Gate::new(s.into_polled(), GATES - i as u64))
            .collect();
        Ok(Parking {
            set,
            bell,
            timer,
            gates,
            relay: relay.map(|bell| Relay::new(bell, RELAY)),
            serial: Serial::new(),
            slots: ParkSlots::new(open_files::descriptor_ceiling()),
            waiting: AtomicUsize::new(0),
            timeouts: Timeouts::new(workers + 1, classes.len()),
            classes,
            drain: Drain::new(),
            budget: ConnectionBudget::new(httpd::max_connections_per_child().max(0) as u64),
            files: Shortage::new(open_files::child_connection_budget(workers)),
            files_blocked: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            broken_told: AtomicBool::new(false),
            stop_time: AtomicU64::new(0),
            workers,
            rows,
            pconf,
            max_mem_free: httpd::max_mem_free(),
        })
    }

    /// Worker `t`'s part of the set (once per worker), recycling pools through `recycled`.
    pub fn waiter(&'static self, t: usize, recycled: &'static Handoff) -> Option<Waiter> {
        Some(Waiter {
            timeouts: self.timeouts.producer(t)?,
            recycled,
        })
    }

    /// Puts the listening sockets and the relay in the set (once the first worker exists).
    pub fn start_accepting(&self) {
        self.settle_all();
    }

    /// An idle worker's wait: blocks until the set has an event for it, and handles it.
    pub fn wait(&'static self, w: &mut Waiter) -> Woken {
        if self.drain.is_exiting() {
            return Woken::Exit;
        }
        // Broken where no worker could say so (a close, a turn or the start found the set
        // refusing a listening socket with nothing held).
        if self.broken_news() {
            return Woken::Broken;
        }
        self.rows.add(Count::IdleWorkers, 1);
        // Relaxed: a hint for keep-alive holds (`has_waiters`).
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let ev = self.set.wait_one();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.rows.add(Count::IdleWorkers, -1);
        let Some((key, _)) = ev else {
            return Woken::Nothing;
        };
        match key {
            BELL if self.drain.woken(&self.bell) => Woken::Exit,
            BELL => Woken::Nothing,
            ALARM => self.expire(),
            RELAY => {
                // A sibling may have dropped a new connection's wake: re-adding the gates
                // polls them. Reading the relay clears it for every set, a sibling's whose
                // event is still pending too; so a child that does not accept now (its
                // relay was on its way out of the set as the ring came) passes the ring on.
                if let Some(r) = &self.relay {
                    r.answer();
                    self.settle_all();
                    if !self.accepting() {
                        r.ring();
                    }
                }
                Woken::Nothing
            }
            k if k <= GATES && GATES - k < self.gates.len() as u64 => {
                let i = GateIndex((GATES - k) as usize);
                let g = &self.gates[i.0];
                match g.enter() {
                    Some(inside) => self.accept(i, g, inside, w),
                    None => {
                        // Closing (the stop takes it out of the set), or a module's accept
                        // function that takes one thread at a time is busy: the set reports
                        // the socket again while connections are queued, so give the
                        // thread inside the CPU before looking again.
                        if !g.is_closing() {
                            std::thread::yield_now();
                        }
                        Woken::Nothing
                    }
                }
            }
            k => match self.claim(Ticket::from_u64(k)) {
                Some(p) => Woken::Ready(p),
                None => Woken::Nothing,
            },
        }
    }

    /// Whether another worker of the child waits in the set now.
    pub fn has_waiters(&self) -> bool {
        // Relaxed: a hint (see `waiting`).
        self.waiting.load(Ordering::Relaxed) > 0
    }

    /// Whether the child takes new connections now.
    fn accepting(&self) -> bool {
        self.accepting_at(self.held_back())
    }

    /// [`Parking::accepting`], given [`Parking::held_back`].
    fn accepting_at(&self, held_back: bool) -> bool {
        // Relaxed `broken`: set once; a worker that reads it late accepts once more (it
        // fails as the first did, or serves that connection while the child retires).
        !self.drain.is_stopping()
            && !self.broken.load(Ordering::Relaxed)
            && !held_back
            && !self.budget.spent()
    }

    /// Settles a gate's registration with [`Parking::accepting`] (see `gate`), the relay's,
    /// and the figures that show them.
    fn settle(&self, g: &Gate) {
        g.request();
        self.apply_registrations();
    }

    /// [`Parking::settle`] for every gate.
    fn settle_all(&self) {
        for g in self.gates.iter() {
            g.request();
        }
        self.apply_registrations();
    }

    /// Brings the gates' and the relay's registrations in line with whether the child
    /// accepts, under the serial (the invariant it keeps: `gate`'s module doc).
    fn apply_registrations(&self) {
        let relay = self.relay.as_ref();
        self.serial.run(|h| loop {
            // One reading of the limit per pass, for the gates, the relay and the mark: with
            // two, a close between them could find no mark while this holder took the gates
            // out for the limit it read first, and nobody would put them back.
            let held_back = self.held_back();
            let wanted = self.accepting_at(held_back);
            let mut refused = false;
            for g in self.gates.iter() {
                refused |= !g.apply(h, &self.set, wanted, relay);
            }
            if refused {
                // The set refused a socket (RW00049): the child takes no more until one of
                // its connections closes, as at EMFILE, and holding none it retires. The
                // next pass takes the rest out.
                if self.files.failed(Want::Watch, || self.drain.open()) == Failure::Retire {
                    // Relaxed: see `accepting_at`.
                    self.broken.store(true, Ordering::Relaxed);
                    // Every worker may sleep in a set that nothing will wake now: the bell
                    // wakes one (not exiting, it clears the bell and comes back to `wait`,
                    // where it takes the news).
                    self.bell.signal();
                }
                for g in self.gates.iter() {
                    g.request();
                }
                continue;
            }
            // A ring this set takes itself (its relay is still in) is passed on when the
            // relay leaves the set too, so the order of the two does not matter.
            if let Some(r) = relay {
                let closing = self.gates.iter().any(Gate::is_closing);
                r.apply(h, &self.set, wanted && !closing);
            }
            if held_back {
                self.files_blocked.store(true, Ordering::Relaxed);
            }
            // The mark, then the count: against `gone`, which lowers the count, then reads
            // the mark. Either the close sees the mark and settles again, or this holder
            // sees the close and applies again now.
            let put_back = publish_then_check(
                || (),
                |()| {
                    self.files_blocked.load(Ordering::Relaxed)
                        && !self.held_back()
                        && self.files_blocked.swap(false, Ordering::Relaxed)
                },
            );
            if !put_back {
                break;
            }
            for g in self.gates.iter() {
                g.request();
            }
        });
        self.rows.set_not_accepting(!self.accepting());
        // A stopping child accepts nothing anyway: it reports 0. The parent counts a child
        // at its open-file limit as one without idle threads (RW00041).
        let at_limit = !self.drain.is_stopping() && self.files.at_file_limit(self.descriptors());
        self.rows.set(Count::AtFileLimit, at_limit as i64);
    }

    /// A listening socket woke this worker: accepts one connection, which it serves itself.
    /// One per wake: the kernel wakes one waiter per new connection, so a burst is spread
    /// over the idle workers of every child as it comes, and a connection is never taken by
    /// a child that has no worker for it. (Accept batches, which parked a connection in the
    /// set for each other waiter, left connections waiting in a child whose workers had
    /// meanwhile all turned busy, up to Timeout, while a sibling's workers idled.)
    fn accept(&self, i: GateIndex, g: &Gate, inside: Inside<'_>, w: &mut Waiter) -> Woken {
        let mut conn = None;
        let mut broken = false;
        while self.accepting() && self.budget.reserve() {
            let Some((mut pool, source)) = self.ptrans(w) else {
                self.budget.release();
                broken = true;
                break;
            };
            match inside.accept(&mut pool) {
                Accepted::Socket(sock) => {
                    self.opened();
                    let how = Admission {
                        pool: source,
                        last: self.budget.accepted(),
                        gate: i,
                    };
                    conn = Some((Conn { sock, ptrans: pool }, how));
                    break;
                }
                other => {
                    self.budget.release();
                    w.recycled.recycle(pool);
                    match other {
                        // Another waiter took it (the set reports a queued socket to
                        // every waiter it wakes meanwhile).
                        Accepted::Empty => {}
                        // No more until a close; holding nothing, the child cannot serve at
                        // all: it retires, sick, as the stock MPMs' children do at any EMFILE.
                        Accepted::OutOfFiles => broken = self.out_of_files(),
                        Accepted::Broken => broken = true,
                        // Interrupted, or the client left first: look again.
                        Accepted::Nothing | Accepted::Socket(_) => continue,
                    }
                    break;
                }
            }
        }
        if broken {
            // Out of the set at once (the settle below), so that no other worker of this
            // child meets the same failure while it retires.
            self.broken.store(true, Ordering::Relaxed);
        }
        // The last worker out of a closing gate closes it (in the settle).
        let last_out = inside.leave();
        // Out of the set if the child stopped accepting. Connections still queued need
        // nothing more: the set reports the socket to the next waiter while they are
        // (level-triggered, see `gate`).
        if last_out || !self.accepting() {
            self.settle(g);
        }
        match conn {
            Some((conn, how)) => Woken::New { conn, how },
            None if self.broken_news() => Woken::Broken,
            None => Woken::Nothing,
        }
    }

    /// Whether the child is broken and this worker is the first to hear it (it asks the
    /// main thread to retire the child, sick).
    fn broken_news(&self) -> bool {
        // Relaxed: `broken` is set once (see `accepting_at`); the swap makes one teller.
        self.broken.load(Ordering::Relaxed) && !self.broken_told.swap(true, Ordering::Relaxed)
    }

    /// A connection accepted on `gate` stays open after its first response: this child
    /// goes to the back of the socket's queue of sets, so that the next new connection
    /// goes to a sibling with a waiter (see `gate`'s module doc for why, and the
    /// measurement).
    pub fn take_turn(&self, gate: GateIndex) {
        self.settle(&self.gates[gate.0]);
    }

    /// A transaction pool for an accept: a recycled one, or a new one; and which it was
    /// (counted once a connection is accepted into it).
    fn ptrans(&self, w: &mut Waiter) -> Option<(Pool, Counter)> {
        if let Some(p) = w.recycled.pop_pool() {
            return Some((p, Counter::PoolsReused));
        }
        match self.pconf.create_ptrans(self.max_mem_free) {
            Ok(p) => Some((p, Counter::PoolsCreated)),
            Err(e) => {
                crate::mpm_log!(
                    level::ALERT,
                    e,
                    "AH03137: Failed to create transaction pool"
                );
                None
            }
        }
    }

    /// Claims the connection parked under `ticket`, if it is still there.
    fn claim(&self, ticket: Ticket) -> Option<Parked> {
        let p = self.slots.claim(ticket)?;
        self.park_counts(p.state, -1);
        if let ParkState::WriteCompletion { .. } = p.state {
            // Its file now counts in its worker's reserve (the decrement above, in
            // `park_counts`): the budget may have room again.
            self.put_back_if_below(|| ());
        }
        Some(p)
    }

    fn park_counts(&self, state: ParkState, delta: i64) {
        self.rows.add(state.count(), delta);
        self.rows.add(Count::Parked, delta);
    }

    /// Parks `conn` (on the worker that holds it) to wait for `state`: a fresh ticket and
    /// timeout entry for the wait `states` gives it. Err gives it back when it could not be
    /// armed in the set (the caller closes it). Once this returns Ok the caller has nothing
    /// left of the connection.
    pub fn park(
        &self,
        w: &mut Waiter,
        mut conn: AsyncConn,
        state: ParkState,
    ) -> Result<(), AsyncConn> {
        // Read once: a head's round depends on the time.
        let length = state.wait(&mut conn);
        let deadline = monotonic_ns().saturating_add(length.as_nanos() as u64);
        self.park_until(w, conn, state, deadline, length)
    }

    /// A lingering close that read what the client sent and waits on: parked again until
    /// the deadline its lingering close began with (in a graceful stop, the stop's shorter
    /// one: `stop_deadline`). Err gives it back when that has passed, or it could not be
    /// armed (the caller closes it).
    pub fn linger_on(&self, w: &mut Waiter, mut p: Parked) -> Result<(), AsyncConn> {
        let length = p.state.wait(&mut p.conn);
        let ends = match (self.stop_began(), p.state.stop_wait()) {
            (Some(stop), Some(wait)) => stop_deadline(p.deadline, length, stop, wait),
            _ => p.deadline,
        };
        if monotonic_ns() >= ends {
            return Err(p.conn);
        }
        self.park_until(w, p.conn, p.state, p.deadline, length)
    }

    /// When the graceful stop began ([`monotonic_ns`]), once this thread sees that it did.
    fn stop_began(&self) -> Option<u64> {
        if !self.drain.is_stopping() {
            return None;
        }
        // Acquire: pairs with the stop's Release fence before it marks itself (`stop`), so
        // a thread that saw the mark sees the time stored before it.
        std::sync::atomic::fence(Ordering::Acquire);
        Some(self.stop_time.load(Ordering::Relaxed))
    }

    /// Parks `conn` until `deadline`, `length` from now (its timeout class): takes the
    /// slot's next ticket, files the timeout entry
    /// under it in this worker's FIFO for the wait's class (a deadline earlier than that
    /// FIFO's last is filed at the last one: late, never early), arms the socket under it,
    /// and publishes. A claimer that came between the arming and the publish leaves the
    /// connection with us and what it came for still holds: park it anew.
    ///
    /// What it keeps: every live ticket has a timeout entry (filed before the publish, so
    /// the connection can always expire), and in a graceful stop exactly one of the stop's
    /// scan and this parker files the stop's shorter wait for it: the publish, then the
    /// look at the stop, against the stop's mark, then its scan of what is parked. The
    /// stop's wait is counted from the stop, or from the start of this wait if that came
    /// later ([`stop_deadline`]), so parking again (a lingering close the client feeds)
    /// does not move it.
    fn park_until(
        &self,
        w: &mut Waiter,
        mut conn: AsyncConn,
        state: ParkState,
        deadline: u64,
        length: Duration,
    ) -> Result<(), AsyncConn> {
        let (class, _) = self.classes.of(length);
        loop {
            let fd = conn.fd();
            let Some(r) = self.slots.reserve(fd.max(0) as usize, state.tag()) else {
                crate::mpm_log!(
                    level::ERR,
                    0,
                    "RW00033: no parking slot for descriptor {fd}; closing its connection"
                );
                return Err(conn);
            };
            let ticket = r.ticket();
            w.timeouts.push(class, deadline, ticket, &self.timer);
            let armed = if conn.is_registered() {
                self.set.modify(fd, state.interest(), ticket.to_u64())
            } else {
                self.set.add(fd, state.interest(), ticket.to_u64())
            };
            if let Err(errno) = armed {
                crate::mpm_log!(
                    level::ERR,
                    errno,
                    "RW00032: could not poll a parked connection; closing it"
                );
                return Err(conn);
            }
            conn.set_registered();
            // Counted before the publish: its claimer takes the count back.
            self.park_counts(state, 1);
            let parked = Parked {
                conn,
                state,
                deadline,
            };
            // The publish, then whether a stop began: against the stop, which marks itself,
            // then scans what is parked (`stop`). Either the scan sees this connection, or
            // this sees the stop and files the stop's shorter wait itself. (A class is one
            // length, so the stop's entries keep each FIFO sorted, whoever files them.)
            let published = publish_then_check(
                || r.publish(parked),
                |done| done.map(|()| self.drain.is_stopping()),
            );
            match published {
                Ok(stopping) => {
                    if let Some(wait) = state.stop_wait().filter(|_| stopping) {
                        let (class, wait) = self.classes.of(wait);
                        // `stopping` was read after the publish: the Parked is not ours
                        // any more, so `conn` is not read again; `length` was read before.
                        let stop = self.stop_began().unwrap_or_else(monotonic_ns);
                        let stop_at = stop_deadline(deadline, length, stop, wait);
                        w.timeouts.push(class, stop_at, ticket, &self.timer);
                    }
                    return Ok(());
                }
                Err(back) => {
                    self.park_counts(state, -1);
                    conn = back.conn;
                }
            }
        }
    }

    /// The alarm woke this worker: claims the first connection whose time is up (entries of
    /// earlier parks of connections that came back meanwhile fail their claims and are
    /// dropped on the way), and sets the alarm again, at once if more are due, so that a
    /// burst of timeouts (thousands of idle clients that connected together) is spread
    /// over the idle workers one connection each.
    fn expire(&self) -> Woken {
        self.timer.clear();
        let mut due = None;
        if let Some(mut e) = self.timeouts.try_expire() {
            e.expire(monotonic_ns(), 1, |_, t| {
                due = self.claim(t);
                due.is_some()
            });
            e.rearm(&self.timer, |t| self.slots.is_current(t));
        }
        // One-shot: armed again for the next worker (at once if it fired meanwhile).
        let _ = self.set.modify(self.timer.fd(), Interest::ReadOnce, ALARM);
        due.map_or(Woken::Nothing, Woken::Expired)
    }

    /// A connection was accepted.
    fn opened(&self) {
        self.drain.opened();
        self.rows.add(Count::Connections, 1);
    }

    /// A connection of this child was closed, and its descriptor is free.
    pub fn closed(&self) {
        self.gone(true);
    }

    /// A module suspended a connection (it owns it now): it no longer counts as the
    /// child's (this MPM never sees it again, and a stopping child waits for its own). Its
    /// descriptor stays open, so it ends no shortage.
    pub fn suspended(&self) {
        self.rows.add(Count::Suspended, 1);
        self.gone(false);
    }

    /// A connection left the child (`freed`: its descriptor is free).
    fn gone(&self, freed: bool) {
        self.rows.add(Count::Connections, -1);
        // Two store-then-check pairs. The close (the count's decrement in `drain.closed`),
        // then the shortage mark's clear: against a worker that marks the child short, then
        // counts (`Shortage::failed`). And the clear (and the decrement), then
        // `files_blocked`: against `apply_registrations`, which sets `files_blocked`, then
        // reads the count and the mark (`held_back`). Without the second fence the holder
        // could read the mark still set while this close read no `files_blocked`, and a
        // child short of a descriptor would stay out of the set for good.
        self.drain.closed(&self.bell, || {
            self.put_back_if_below(|| {
                if freed {
                    self.files.closed();
                }
            })
        });
    }

    /// The child takes no more connections until one closes: it holds as many as its
    /// open-file limit allows, or was short of a descriptor or of a place in its set
    /// (`shortage`).
    fn held_back(&self) -> bool {
        // A stale bound costs one connection more or less (the reserve in `open_files`
        // covers it), and a close re-checks after its own decrement.
        self.files.at_limit(self.descriptors())
    }

    /// The descriptors the child's connections hold beyond its workers' reserve: one a
    /// connection, and a second for each response parked in write completion (with
    /// `EnableSendfile On` the core keeps its file open until it is written; a worker's
    /// own files are in the per-thread reserve, `open_files`).
    fn descriptors(&self) -> usize {
        // The child's own count (`row_counts`, SeqCst), changed before each park's publish
        // and at each claim, ahead of the claim's put-back check.
        let writing = self.rows.get(Count::WriteCompletion).max(0) as usize;
        self.drain.open() + writing
    }

    /// `lower` lowers what holds the child back (a close's shortage mark, a response
    /// leaving write completion: [`Parking::held_back`]), then this looks whether that puts
    /// the listening sockets back: against `apply_registrations`, which marks
    /// `files_blocked`, then reads the count and the mark. Either this sees the mark, or
    /// the holder sees the lower count.
    fn put_back_if_below<R>(&self, lower: impl FnOnce() -> R) {
        let put_back = publish_then_check(lower, |_| {
            self.files_blocked.load(Ordering::Relaxed)
                && !self.held_back()
                && self.files_blocked.swap(false, Ordering::Relaxed)
        });
        if put_back {
            self.settle_all();
        }
    }

    /// Accept met EMFILE: the child takes no more until a close (`shortage`); true when it
    /// holds nothing, so no close will come (it retires, sick).
    fn out_of_files(&self) -> bool {
        match self.files.failed(Want::Descriptor, || self.drain.open()) {
            Failure::Retire => true,
            Failure::Short { first } => {
                if first {
                    crate::mpm_log!(
                        level::WARNING,
                        0,
                        "RW00042: child {} met its open-file limit ({}, RLIMIT_NOFILE) at accept with {} connections open: it takes no more until one of them closes (modules hold more descriptors than rworker keeps free; raise the limit: ulimit -n, or LimitNOFILE= under systemd)",
                        std::process::id(),
                        crate::ffi::process::open_files_limit(),
                        self.drain.open()
                    );
                }
                false
            }
        }
    }

    /// The main thread: the child stops. Graceful: no new connections, each parked
    /// connection's wait cut as `states` says, and the workers leave once the last
    /// connection is closed. Immediate: every idle worker leaves now (the caller cuts the
    /// busy ones).
    pub fn stop(&'static self, graceful: bool) {
        for g in self.gates.iter() {
            g.begin_close();
        }
        self.settle_all();
        self.rows.set_quiescing();
        if !graceful {
            self.drain.exit(&self.bell);
            return;
        }
        // The main thread's producer: the stop's waits are shorter than the workers'
        // entries for the same connections, and its FIFOs hold only these.
        let mut p = self.timeouts.producer(self.workers);
        let now = monotonic_ns();
        self.stop_time.store(now, Ordering::Relaxed);
        // Release: the time before the mark, for `stop_began`'s Acquire fence.
        std::sync::atomic::fence(Ordering::Release);
        // The stop is marked, then what is parked is scanned: against each parker's
        // publish-then-look (`park_until`).
        self.drain.begin_stop(&self.bell, || {
            let Some(p) = p.as_mut() else { return };
            for (ticket, tag) in self.slots.parked() {
                if let Some(wait) = ParkState::from_tag(tag).stop_wait() {
                    let (class, wait) = self.classes.of(wait);
                    p.push(
                        class,
                        now.saturating_add(wait.as_nanos() as u64),
                        ticket,
                        &self.timer,
                    );
                }
            }
        });
    }

    /// The main thread, once every worker has left: closes what is still parked and the
    /// listening sockets not closed yet.
    pub fn finish(&self) {
        let tickets: Vec<Ticket> = self.slots.parked().map(|(t, _)| t).collect();
        for t in tickets {
            match self.claim(t) {
                Some(p) => drop(p.conn.close(true)),
                None => continue,
            }
            self.closed();
        }
        for g in self.gates.iter() {
            g.begin_close();
        }
        self.settle_all();
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.drain.open()
    }

    /// Whether a stop began (a stopping child serves a keep-alive connection's next request
    /// with `Connection: close`, as the core asks the MPM's state).
    pub fn is_stopping(&self) -> bool {
        self.drain.is_stopping()
    }
}

/// When a wait of `length` that ends at `deadline` ends in a graceful stop that began at
/// `stop` and leaves it `stop_wait`: `stop_wait` after the stop, or after the wait's start
/// if that came later, and never after `deadline` (all [`monotonic_ns`]). The same for each
/// park of one lingering close, however often the client makes it park again.
fn stop_deadline(deadline: u64, length: Duration, stop: u64, stop_wait: Duration) -> u64 {
    let began = deadline.saturating_sub(length.as_nanos() as u64);
    deadline.min(began.max(stop).saturating_add(stop_wait.as_nanos() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_stop_leaves_a_lingering_close_2_s_from_the_stop_however_often_it_parks() {
        let (linger, two) = (Duration::from_secs(30), Duration::from_secs(2));
        // A lingering close began at 100 s (until 130 s); the stop came at 110 s.
        let deadline = 130 * S;
        assert_eq!(stop_deadline(deadline, linger, 110 * S, two), 112 * S);
        // Parked again at 111.5 s (the client sent a byte): the same end. Before, each
        // park filed the stop's wait from its own time (113.5 s), and a client that sent a
        // byte every 300 ms kept the connection until 130 s.
        assert_eq!(stop_deadline(deadline, linger, 110 * S, two), 112 * S);
        // One that began after the stop gets the stop's wait from its start.
        assert_eq!(stop_deadline(145 * S, linger, 110 * S, two), 117 * S);
        // Never after its own deadline (a short lingering close, 2 s from 109 s).
        assert_eq!(stop_deadline(111 * S, two, 110 * S, two), 111 * S);
        // A keep-alive connection parked after the stop: 1 s from its park, as before.
        let ka = Duration::from_secs(5);
        assert_eq!(
            stop_deadline(125 * S, ka, 110 * S, Duration::from_secs(1)),
            121 * S
        );
    }
}
