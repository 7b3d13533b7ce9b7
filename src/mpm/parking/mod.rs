//! A parking child (`RWorkerKeepAlive park`): its idle workers take turns waiting on one
//! event set (Leader/Followers, with the kernel as the dispatcher), and a connection holds a
//! thread only while a request is served.
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
//!   word, which readiness, expiry and a stop race for; the loser forgets it) and serves its
//!   next request, or goes on with its lingering close;
//! - the alarm: it pops what timed out (`rworker_queue::Timeouts`, FIFOs per worker and
//!   timeout length, lazy deletion), claims each, and closes it;
//! - the relay: a sibling may have dropped a new connection's wake (it stopped accepting
//!   just then); it re-adds the listening sockets, and the add polls them;
//! - the bell: the child is done, it leaves.
//!
//! A worker that finished a request parks the connection itself: it takes the connection's
//! next ticket, files its timeout, arms the socket in the set under that ticket, and only
//! then publishes the connection in its slot; from then on it never touches it again. Nobody
//! hands a connection to anybody, and nothing here takes a lock. A busy keep-alive
//! connection parks once per request: while its last timeout entry is not yet due it parks
//! again under that entry's ticket and files nothing (so the FIFOs hold one entry per
//! connection, not one per request); the entry then comes due before the connection's real
//! deadline, and the expirer parks it again under a new ticket, filed for that deadline.
//!
//! Nothing is closed before its timeout because workers are busy: a connection that became
//! readable stays in the set's ready list until a worker is free. A graceful stop takes the
//! listening sockets out, gives each parked keep-alive connection `STOP_KEEP_ALIVE` for one
//! more request (its last response promised keep-alive, and a busy client may be sending
//! already; that request is answered with `Connection: close`), lets lingering closes end
//! within `SHORT_LINGER`, and rings the bell once the last connection is closed
//! (`rworker_queue::Drain`).

mod classes;
mod gate;
mod relay;

use std::os::raw::c_int;
use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rworker_queue::{
    Alarm, ConnectionBudget, Drain, ParkSlots, Producer, Serial, Ticket, Timeouts,
};

use crate::ffi::async_conn::AsyncConn;
use crate::ffi::epoll::{monotonic_ns, Epoll, Interest, TimerFd, WakeFd};
use crate::ffi::httpd;
use crate::ffi::listen::{Accepted, Listener as ListenSocket};
use crate::ffi::log::level;
use crate::ffi::pool::{ConfigPool, Pool};
use crate::ffi::scoreboard::{self, AsyncField};
use crate::mpm::conn::Conn;
use crate::mpm::handoff::Handoff;
use crate::mpm::open_files;
use crate::mpm::status::{Counter, Gauges};
use classes::Classes;
use gate::{Gate, Inside};
use relay::Relay;

/// The bell's key in the set.
const BELL: u64 = u64::MAX;
/// The alarm's key.
const ALARM: u64 = u64::MAX - 1;
/// The relay's key.
const RELAY: u64 = u64::MAX - 2;
/// Listening socket `i`'s key is `GATES - i` (tickets never come near: their low half is a
/// descriptor number).
const GATES: u64 = u64::MAX - 3;

/// Lingering close after the client was told we are done (httpd's `SECONDS_TO_LINGER`).
const SHORT_LINGER: Duration = Duration::from_secs(2);
/// Lingering close at most (httpd's `MAX_SECS_TO_LINGER`).
const LINGER: Duration = Duration::from_secs(30);
/// A stopping child's keep-alive connections wait at most this long for their next
/// request (less if their KeepAliveTimeout ends sooner). A client in the middle of its
/// requests sends the next one within milliseconds of a response; one quiet for a second
/// is idle, and is closed as KeepAliveTimeout would close it. Closing at once instead cut
/// the request a busy client was sending: 82-97 wrk read errors per graceful restart under
/// `wrk -c100` keep-alive (bench/graceful/run.sh, 2026-12-02).
const STOP_KEEP_ALIVE: Duration = Duration::from_secs(1);
/// How late the alarm may fire after the earliest deadline: deadlines are rounded up to a
/// multiple of this, so a child whose connections time out one after another wakes for
/// them at most ten times a second (the event MPM's `TIMEOUT_FUDGE_FACTOR`). Never early.
const ALARM_SLACK: u64 = 100_000_000;
/// Connections one worker closes per wake of the alarm before it leaves the rest to the
/// next worker (the alarm is set again at once): a burst of timeouts (thousands of idle
/// clients that connected together) is spread over the idle workers.
const EXPIRE_BATCH: usize = 64;

/// Why a connection is parked, and so what the set waits for and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParkState {
    /// Between requests: readable within KeepAliveTimeout, else closed.
    KeepAlive,
    /// A module waits for the socket (h2 flow control): readable (`read`) or writable
    /// within Timeout, then its protocol runs again.
    WaitIo { read: bool },
    /// Lingering close: reading what the client still sends until it closes, for up to
    /// 2 s (`short`) or 30 s.
    Linger { short: bool },
}

impl ParkState {
    /// The tag in the slot's claim word (for a stop's scan and for the counts).
    fn tag(self) -> u8 {
        match self {
            ParkState::KeepAlive => 0,
            ParkState::WaitIo { read: true } => 1,
            ParkState::WaitIo { read: false } => 2,
            ParkState::Linger { short: true } => 3,
            ParkState::Linger { short: false } => 4,
        }
    }

    fn from_tag(tag: u8) -> ParkState {
        match tag {
            0 => ParkState::KeepAlive,
            1 => ParkState::WaitIo { read: true },
            2 => ParkState::WaitIo { read: false },
            3 => ParkState::Linger { short: true },
            _ => ParkState::Linger { short: false },
        }
    }

    /// mod_status's count this state is shown in.
    fn field(self) -> AsyncField {
        match self {
            ParkState::KeepAlive => AsyncField::KeepAlive,
            ParkState::WaitIo { .. } => AsyncField::WaitIo,
            ParkState::Linger { .. } => AsyncField::LingeringClose,
        }
    }
}

/// A parked connection, as it waits in its slot.
#[derive(Debug)]
pub struct Parked {
    /// The connection.
    pub conn: AsyncConn,
    /// What it waits for.
    pub state: ParkState,
    /// Its ticket (a lingering close that waits on keeps it: `Parking::linger_on`).
    ticket: Ticket,
    /// When its wait ends ([`monotonic_ns`]).
    deadline: u64,
    /// The timeout entry filed under `ticket` for its wait: earlier than `deadline` when it
    /// was filed for an earlier park of the connection (see [`Filed`]).
    filed: Filed,
}

impl Parked {
    /// The timeout entry filed for this connection, for its next park.
    pub fn filed(&self) -> Filed {
        self.filed
    }
}

/// A connection's timeout entry: its ticket, class and deadline. A connection that parks
/// again in the same class before that deadline keeps the ticket and files nothing.
#[derive(Clone, Copy, Debug)]
pub struct Filed {
    ticket: Ticket,
    /// `usize::MAX` for an entry in the expirer's heap: the next park files anew.
    class: usize,
    deadline: u64,
}

/// How a park files its timeout.
enum Filing<'w> {
    /// A new entry in this worker's FIFO for the class.
    Push(&'w mut Waiter, usize),
    /// None: the connection's entry is still filed (it parks under that entry's ticket).
    Again(Filed),
    /// None here: the expirer puts it in its heap.
    Heap,
}

/// Why a park did not happen.
enum Unarmed {
    /// A claimer came first, or the filed entry's slot was not free: still ours, try anew.
    Again(AsyncConn),
    /// No slot or no arming: the caller closes it.
    Failed(AsyncConn),
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
    /// Parked connections whose time is up, claimed: to close.
    Expired(Vec<Parked>),
    /// The child is done: leave.
    Exit,
    /// Nothing for it (a sibling took the connection, a stale event, a signal).
    Nothing,
}

/// The alarm, rounded up to `ALARM_SLACK`.
struct CoarseAlarm<'a>(&'a TimerFd);

impl Alarm for CoarseAlarm<'_> {
    fn set(&self, deadline: u64) {
        self.0
            .set(deadline.div_ceil(ALARM_SLACK).saturating_mul(ALARM_SLACK));
    }
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
    /// (`crate::mpm::open_files`).
    max_open: AtomicUsize,
    /// Accept met EMFILE (logged once).
    out_of_files: AtomicBool,
    /// The gates were taken out of the set at the open-file limit: a close below it puts
    /// them back.
    files_blocked: AtomicBool,
    /// Workers (each a timeout producer; the main thread is one more, for the stop).
    workers: usize,
    slot: c_int,
    /// The child's gauges (AtFileLimit, Parked).
    gauges: Gauges,
    pconf: ConfigPool,
    max_mem_free: usize,
}

impl Parking {
    /// The set for the child in scoreboard `slot` (its gauges `gauges`) with `workers`
    /// workers, accepting on `sockets` (told through its bucket's `relay`), with pools
    /// under `pconf`. It holds at most as many connections as its open-file limit leaves
    /// room for (`open_files`), and MaxConnectionsPerChild. Errors: errno (no epoll set,
    /// eventfd or timerfd).
    pub fn new(
        slot: c_int,
        gauges: Gauges,
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
                .chain([SHORT_LINGER, LINGER, STOP_KEEP_ALIVE]),
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
            max_open: AtomicUsize::new(open_files::child_connection_budget(workers)),
            out_of_files: AtomicBool::new(false),
            files_blocked: AtomicBool::new(false),
            workers,
            slot,
            gauges,
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
        self.gauges.add(Counter::IdleWorkers, 1);
        // Relaxed: a hint for keep-alive holds (`has_waiters`).
        self.waiting.fetch_add(1, Ordering::Relaxed);
        let ev = self.set.wait_one();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        self.gauges.add(Counter::IdleWorkers, -1);
        let Some((key, _)) = ev else {
            return Woken::Nothing;
        };
        match key {
            BELL if self.drain.woken(&self.bell) => Woken::Exit,
            BELL => Woken::Nothing,
            ALARM => self.expire(w),
            RELAY => {
                // A sibling may have dropped a new connection's wake: re-adding the gates
                // polls them.
                if let Some(r) = &self.relay {
                    r.answer();
                }
                self.settle_all();
                Woken::Nothing
            }
            k if k <= GATES && GATES - k < self.gates.len() as u64 => {
                let i = GateIndex((GATES - k) as usize);
                let g = &self.gates[i.0];
                match g.enter() {
                    Some(inside) => self.accept(i, g, inside, w),
                    None => Woken::Nothing,
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
        !self.drain.is_stopping() && !self.at_file_limit() && !self.budget.spent()
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

    fn apply_registrations(&self) {
        if self.at_file_limit() {
            // SeqCst fence after the flag: against `closed`'s fence before it reads the flag
            // (either the close sees it and settles again, or this settle sees the close).
            self.files_blocked.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
        }
        let relay = self.relay.as_ref();
        self.serial.run(|h| {
            // A ring this set takes itself (its relay is still in) is passed on when the
            // relay leaves the set too, so the order of the two does not matter.
            for g in self.gates.iter() {
                g.apply(h, &self.set, &|| self.accepting(), relay);
            }
            if let Some(r) = relay {
                let closing = self.gates.iter().any(Gate::is_closing);
                r.apply(h, &self.set, self.accepting() && !closing);
            }
        });
        scoreboard::set_not_accepting(self.slot, !self.accepting());
        // A stopping child accepts nothing anyway, and its slot may already be another
        // child's (the row goes with the slot): it reports 0. The parent counts a child at
        // its limit as one without idle threads (RW00041).
        let at_limit = !self.drain.is_stopping() && self.at_file_limit();
        self.gauges.set(Counter::AtFileLimit, at_limit as u64);
    }

    /// A listening socket woke this worker: accepts one connection, which it serves itself.
    /// One per wake: the kernel wakes one waiter per new connection, so a burst is spread
    /// over the idle workers of every child as it comes, and a connection is never taken by
    /// a child that has no worker for it. (Accept batches, which parked a connection in the
    /// set for each other waiter, left connections waiting in a child whose workers had
    /// meanwhile all turned busy, up to Timeout, while a sibling's workers idled.)
    fn accept(&self, i: GateIndex, g: &Gate, inside: Inside<'_>, w: &mut Waiter) -> Woken {
        let mut conn = None;
        // The socket's queue was seen empty: the next connection wakes a waiter by itself
        // (edge-triggered), so the registration may stay as it is.
        let mut emptied = false;
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
                        Accepted::Empty => emptied = true,
                        Accepted::OutOfFiles => self.out_of_files(),
                        Accepted::Broken => broken = true,
                        // Interrupted, or the client left first: look again.
                        Accepted::Nothing | Accepted::Socket(_) => continue,
                    }
                    break;
                }
            }
        }
        // Connections still queued after an accept came before this wake's event was
        // collected (their wakes found it pending), so nothing will tell a waiter of them:
        // deleting and adding the socket again polls the queue (see `gate`).
        let more = conn.is_some() && inside.has_queued();
        inside.leave();
        // Out of the set if the child stopped accepting; re-added after an accept that
        // left connections queued, or after a failed one that did not empty the queue.
        if !self.accepting() || more || (conn.is_none() && !emptied) {
            self.settle(g);
        }
        match (conn, broken) {
            (Some((conn, how)), _) => Woken::New { conn, how },
            (None, true) => Woken::Broken,
            (None, false) => Woken::Nothing,
        }
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
        self.unpark_counts(p.state);
        Some(p)
    }

    fn park_counts(&self, state: ParkState) {
        scoreboard::add_async(self.slot, state.field(), 1);
        self.gauges.add(Counter::Parked, 1);
    }

    fn unpark_counts(&self, state: ParkState) {
        scoreboard::add_async(self.slot, state.field(), -1);
        self.gauges.add(Counter::Parked, -1);
    }

    /// The length of `state`'s wait for `conn`.
    fn wait_of(conn: &AsyncConn, state: ParkState) -> Duration {
        match state {
            ParkState::KeepAlive => conn.keep_alive_timeout(),
            ParkState::WaitIo { .. } => conn.timeout(),
            ParkState::Linger { short: true } => SHORT_LINGER,
            ParkState::Linger { short: false } => LINGER,
        }
    }

    /// Parks `conn` (on the worker that holds it) to wait for `state`; `filed` is the
    /// timeout entry of its last park, if it came out of the set. Err gives it back when it
    /// could not be armed in the set (the caller closes it). Once this returns Ok the caller
    /// has nothing left of the connection.
    pub fn park(
        &self,
        w: &mut Waiter,
        conn: AsyncConn,
        state: ParkState,
        filed: Option<Filed>,
    ) -> Result<(), AsyncConn> {
        let (class, wait) = self.classes.of(Self::wait_of(&conn, state));
        let deadline = monotonic_ns().saturating_add(wait.as_nanos() as u64);
        // The last entry is not due yet, so it is still in its FIFO: it will claim this
        // park, and the expirer will see the real deadline (`expire`).
        let again = filed.filter(|f| f.class == class && f.deadline > monotonic_ns());
        let mut conn = match again {
            Some(f) => match self.arm_and_publish(conn, state, Filing::Again(f), deadline) {
                Ok(ticket) => {
                    // Its entry may have come due while this worker held the connection
                    // (the expirer's claim then found it out of its slot, and forgot the
                    // entry): parked without an entry, it would never time out. Take it
                    // back and file anew. SeqCst fence between the publish and the clock
                    // read, against the expirer's between its clock read and its claim
                    // (`expire`): if this read is before the deadline, the expirer's later
                    // claim sees the connection parked.
                    fence(Ordering::SeqCst);
                    if monotonic_ns() < f.deadline {
                        return self.after_park(w, ticket, state);
                    }
                    match self.claim(ticket) {
                        Some(p) => p.conn,
                        // Not ours any more (the expirer or a reader claimed it).
                        _ => return Ok(()),
                    }
                }
                Err(Unarmed::Again(conn)) => conn,
                Err(Unarmed::Failed(conn)) => return Err(conn),
            },
            None => conn,
        };
        loop {
            let deadline = monotonic_ns().saturating_add(wait.as_nanos() as u64);
            match self.arm_and_publish(conn, state, Filing::Push(w, class), deadline) {
                Ok(ticket) => return self.after_park(w, ticket, state),
                // A claimer came between the arming and the publish: the connection is
                // still ours, and what it came for still holds. Park it anew (the socket's
                // readiness fires again; an expiry gets a new deadline, never an early one).
                Err(Unarmed::Again(back)) => conn = back,
                Err(Unarmed::Failed(conn)) => return Err(conn),
            }
        }
    }

    fn after_park(
        &self,
        w: &mut Waiter,
        ticket: Ticket,
        state: ParkState,
    ) -> Result<(), AsyncConn> {
        self.after_publish(w, ticket, stop_wait(state));
        Ok(())
    }

    /// One try at parking `conn` until `deadline`: reserves its slot (a new ticket, or the
    /// filed entry's again), files the timeout as `filing` says, arms the socket under the
    /// ticket and publishes the connection. Ok: parked under the ticket.
    fn arm_and_publish(
        &self,
        mut conn: AsyncConn,
        state: ParkState,
        filing: Filing<'_>,
        deadline: u64,
    ) -> Result<Ticket, Unarmed> {
        let fd = conn.fd();
        let r = match &filing {
            Filing::Again(f) => self.slots.reserve_again(f.ticket, state.tag()),
            Filing::Push(..) | Filing::Heap => self.slots.reserve(fd.max(0) as usize, state.tag()),
        };
        let Some(r) = r else {
            if let Filing::Again(_) = filing {
                return Err(Unarmed::Again(conn));
            }
            crate::mpm_log!(
                level::ERR,
                0,
                "RW00033: no parking slot for descriptor {fd}; closing its connection"
            );
            return Err(Unarmed::Failed(conn));
        };
        let ticket = r.ticket();
        let filed = match filing {
            Filing::Again(f) => f,
            Filing::Push(w, class) => {
                w.timeouts
                    .push(class, deadline, ticket, &CoarseAlarm(&self.timer));
                Filed {
                    ticket,
                    class,
                    deadline,
                }
            }
            Filing::Heap => Filed {
                ticket,
                class: usize::MAX,
                deadline,
            },
        };
        let interest = match state {
            ParkState::WaitIo { read: false } => Interest::WriteOnce,
            _ => Interest::ReadOnce,
        };
        let armed = if conn.is_registered() {
            self.set.modify(fd, interest, ticket.to_u64())
        } else {
            self.set.add(fd, interest, ticket.to_u64())
        };
        if let Err(errno) = armed {
            crate::mpm_log!(
                level::ERR,
                errno,
                "RW00032: could not poll a parked connection; closing it"
            );
            return Err(Unarmed::Failed(conn));
        }
        conn.set_registered();
        // Counted before the publish: its claimer takes the count back.
        self.park_counts(state);
        let parked = Parked {
            conn,
            state,
            ticket,
            deadline,
            filed,
        };
        match r.publish(parked) {
            Ok(()) => Ok(ticket),
            Err(back) => {
                self.unpark_counts(state);
                Err(Unarmed::Again(back.conn))
            }
        }
    }

    /// A lingering close that read what the client sent and waits on: parked again under
    /// the same ticket, so it keeps its place in its timeout FIFO. Err gives it back when its
    /// time is up or it could not be armed (the caller closes it).
    pub fn linger_on(&self, w: &mut Waiter, mut p: Parked) -> Result<(), AsyncConn> {
        let fd = p.conn.fd();
        let (ticket, state, deadline) = (p.ticket, p.state, p.deadline);
        loop {
            if monotonic_ns() >= deadline {
                return Err(p.conn);
            }
            let Some(r) = self.slots.reserve_again(ticket, state.tag()) else {
                return Err(p.conn);
            };
            if self
                .set
                .modify(fd, Interest::ReadOnce, ticket.to_u64())
                .is_err()
            {
                return Err(p.conn);
            }
            self.park_counts(state);
            match r.publish(p) {
                Ok(()) => break,
                Err(back) => {
                    self.unpark_counts(state);
                    p = back;
                }
            }
        }
        // Its timeout entry may have come due while this worker held the connection (the
        // expirer's claim then found it out of its slot, and forgot it): close it now.
        if monotonic_ns() >= deadline {
            return match self.claim(ticket) {
                Some(p) => Err(p.conn),
                // Not ours any more (the expirer or a reader claimed it).
                _ => Ok(()),
            };
        }
        self.after_publish(w, ticket, stop_wait(state));
        Ok(())
    }

    /// After a publish: a stop that began meanwhile may have missed the connection in its
    /// scan; then the parker files the stop's shorter wait itself. (A class is one length,
    /// so the stop's entries keep each FIFO sorted, whoever files them.)
    fn after_publish(&self, w: &mut Waiter, ticket: Ticket, on_stop: Option<Duration>) {
        // SeqCst fence between the publish and the read of `stopping`: against the stop's
        // fence between its store and its scan (either the scan sees the connection parked,
        // or this sees the stop).
        fence(Ordering::SeqCst);
        if !self.drain.is_stopping() {
            return;
        }
        if let Some(wait) = on_stop {
            let (class, wait) = self.classes.of(wait);
            let deadline = monotonic_ns().saturating_add(wait.as_nanos() as u64);
            w.timeouts
                .push(class, deadline, ticket, &CoarseAlarm(&self.timer));
        }
    }

    /// The alarm woke this worker: claims what timed out (a batch). A connection whose
    /// entry came due before its deadline (it parked again under the entry's ticket) is
    /// parked again under a new ticket and filed for its deadline.
    fn expire(&self, w: &mut Waiter) -> Woken {
        self.timer.clear();
        let mut out = Vec::new();
        if let Some(mut e) = self.timeouts.try_expire() {
            let now = monotonic_ns();
            // SeqCst fence: the expirer's half of the handshake with a re-park under a
            // filed entry's ticket (`park`).
            fence(Ordering::SeqCst);
            let mut later = Vec::new();
            e.expire(now, EXPIRE_BATCH, |due, t| match self.claim(t) {
                Some(p) if p.filed.deadline == due && p.deadline > now => {
                    let state = p.state;
                    match self.refile(p) {
                        Ok(f) => later.push((f, state)),
                        Err(p) => out.push(p),
                    }
                    true
                }
                Some(p) => {
                    out.push(p);
                    true
                }
                None => false,
            });
            for (f, state) in later {
                e.refile(f.deadline, f.ticket);
                self.after_publish(w, f.ticket, stop_wait(state));
            }
            e.rearm(&CoarseAlarm(&self.timer));
        }
        // One-shot: armed again for the next worker (at once if it fired meanwhile).
        let _ = self.set.modify(self.timer.fd(), Interest::ReadOnce, ALARM);
        Woken::Expired(out)
    }

    /// Parks `p` again, whose entry came due before its deadline, under a new ticket (a
    /// reader that claims the old one, woken before this claim, then finds nothing): its
    /// entry, for the real deadline, is the caller's to refile. Err: it could not be armed
    /// (the caller closes it, a moment before its time).
    fn refile(&self, p: Parked) -> Result<Filed, Parked> {
        let (state, deadline, ticket, filed) = (p.state, p.deadline, p.ticket, p.filed);
        let mut conn = p.conn;
        loop {
            match self.arm_and_publish(conn, state, Filing::Heap, deadline) {
                Ok(ticket) => {
                    return Ok(Filed {
                        ticket,
                        class: usize::MAX,
                        deadline,
                    })
                }
                Err(Unarmed::Again(back)) => conn = back,
                Err(Unarmed::Failed(conn)) => {
                    return Err(Parked {
                        conn,
                        state,
                        ticket,
                        deadline,
                        filed,
                    })
                }
            }
        }
    }

    /// A connection was accepted.
    fn opened(&self) {
        self.drain.opened();
        scoreboard::add_async(self.slot, AsyncField::Connections, 1);
    }

    /// A connection of this child was closed (or a module took it over).
    pub fn closed(&self) {
        scoreboard::add_async(self.slot, AsyncField::Connections, -1);
        self.drain.closed(&self.bell);
        // SeqCst fence between the close (the count's decrement in `drain.closed`) and
        // the read of the flag: against `settle`'s (module gate doc).
        fence(Ordering::SeqCst);
        if self.files_blocked.load(Ordering::Relaxed)
            && !self.at_file_limit()
            && self.files_blocked.swap(false, Ordering::Relaxed)
        {
            self.settle_all();
        }
    }

    /// A module suspended a connection (it owns it now): it no longer counts as the
    /// child's (this MPM never sees it again, and a stopping child waits for its own).
    pub fn suspended(&self) {
        scoreboard::add_async(self.slot, AsyncField::Suspended, 1);
        self.closed();
    }

    /// The child holds as many connections as its open-file limit allows.
    fn at_file_limit(&self) -> bool {
        // Relaxed: max_open only shrinks, and a stale read costs one connection more or
        // less (the reserve in `open_files` covers it).
        self.drain.open() >= self.max_open.load(Ordering::Relaxed)
    }

    /// Accept met EMFILE or ENFILE: what the child holds now is its budget from now on
    /// (modules hold more descriptors than `open_files` reserved); logged once.
    fn out_of_files(&self) {
        let open = self.drain.open().max(1);
        // Relaxed: as in at_file_limit.
        self.max_open.fetch_min(open, Ordering::Relaxed);
        if !self.out_of_files.swap(true, Ordering::Relaxed) {
            crate::mpm_log!(
                level::WARNING,
                0,
                "RW00042: accept found no free descriptor with {open} connections open: this child holds at most that many from now on (modules hold more descriptors than rworker keeps free; raise the open-file limit)"
            );
        }
    }

    /// The main thread: the child stops. Graceful: no new connections, parked keep-alive
    /// connections get `STOP_KEEP_ALIVE` for one more request, lingering closes
    /// `SHORT_LINGER`, and the workers leave once the last connection is closed. Immediate:
    /// every idle worker leaves now (the caller cuts the busy ones).
    pub fn stop(&'static self, graceful: bool) {
        for g in self.gates.iter() {
            g.begin_close();
        }
        self.settle_all();
        scoreboard::set_quiescing(self.slot);
        if !graceful {
            self.drain.exit(&self.bell);
            return;
        }
        self.drain.begin_stop();
        // The main thread's producer: the stop's waits are shorter than the workers'
        // entries for the same connections, and its FIFOs hold only these.
        if let Some(mut p) = self.timeouts.producer(self.workers) {
            let now = monotonic_ns();
            for (ticket, tag) in self.slots.parked() {
                if let Some(wait) = stop_wait(ParkState::from_tag(tag)) {
                    let (class, wait) = self.classes.of(wait);
                    p.push(
                        class,
                        now.saturating_add(wait.as_nanos() as u64),
                        ticket,
                        &CoarseAlarm(&self.timer),
                    );
                }
            }
        }
        self.drain.exit_if_drained(&self.bell);
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

/// How long a stopping child gives a connection parked in `state`, if less than its own
/// wait (a module's I/O wait keeps its Timeout).
fn stop_wait(state: ParkState) -> Option<Duration> {
    match state {
        ParkState::KeepAlive => Some(STOP_KEEP_ALIVE),
        ParkState::Linger { .. } => Some(SHORT_LINGER),
        ParkState::WaitIo { .. } => None,
    }
}
