//! Where the idle workers of a parking child wait when they accept for themselves
//! (`RWorkerKeepAlive park` with `RWorkerAccept workers`): blocked in accept(2), to take
//! the next new connection with no listener in between, or on the fdqueue, for a parked
//! connection that the listener resumes (or must close).
//!
//! A new connection costs one wake-up when a worker waits for it in accept, two when the
//! listener accepts it and wakes a worker; a resumed connection costs one futex wake when
//! a worker waits on the fdqueue, and a signal (to get a worker out of accept) when none
//! does. So the split follows the traffic: the listener raises the fdqueue's share each
//! time it finds no worker there and halves it each second in which it never did. Workers
//! above the share that wait on the fdqueue are sent back to accept (`Job::Accept`). At
//! least one idle worker waits in accept whenever one is idle, so new connections are
//! never left to the fdqueue's share alone; a worker the listener interrupted in accept
//! (a nudge) goes to the fdqueue even if it was the last one there, and so does a worker
//! that took a new connection while the listener waits: new and parked connections take
//! turns on a child's few free workers.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Where an idle worker waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// In accept(2), for a new connection.
    Accept,
    /// On the fdqueue, for work from the listener.
    Queue,
}

/// What a worker going idle knows when it chooses.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    /// The child stops: no more accepting; the listener still hands out closes.
    pub stopping: bool,
    /// The worker's accept was just interrupted while the child is not stopping: the
    /// listener wants it on the fdqueue (a nudge).
    pub nudged: bool,
    /// The listener waits for an idle worker now.
    pub listener_waits: bool,
    /// Workers in accept now.
    pub in_accept: usize,
    /// Workers waiting on the fdqueue now.
    pub on_queue: usize,
    /// Where this worker got its last job (`Queue` before its first).
    pub last: Wait,
    /// The child's open connections now.
    pub open: usize,
    /// The child holds as many connections as its open-file limit allows
    /// (`crate::mpm::open_files`).
    pub at_file_limit: bool,
}

/// The fdqueue's share of the idle workers (see the module doc).
#[derive(Debug)]
pub struct IdleSplit {
    /// Idle workers wanted on the fdqueue, 1..=max.
    on_queue: AtomicUsize,
    max: usize,
    /// The child accepts only while it has fewer open connections than this
    /// ([`accept_cap`], set by the listener).
    accept_cap: AtomicUsize,
    /// Scoreboard slots where this generation's children live (MaxRequestWorkers /
    /// ThreadsPerChild).
    children: usize,
}

impl IdleSplit {
    /// For a child of `threads_per_child` workers among `children` slots: one on the
    /// fdqueue to start with, no accept cap until the listener sets one.
    pub fn new(threads_per_child: usize, children: usize) -> IdleSplit {
        IdleSplit {
            on_queue: AtomicUsize::new(1),
            max: threads_per_child.max(1),
            accept_cap: AtomicUsize::new(usize::MAX),
            children,
        }
    }

    /// Listener: the connection count from which this child stops accepting.
    pub fn set_accept_cap(&self, cap: usize) {
        // Relaxed: a balancing hint (see `accept_cap`); a stale value costs a connection
        // more or less for this child.
        self.accept_cap.store(cap, Ordering::Relaxed);
    }

    /// Whether a child with `open` connections accepts now.
    pub fn may_accept(&self, open: usize) -> bool {
        // Relaxed: see set_accept_cap.
        open < self.accept_cap.load(Ordering::Relaxed)
    }

    /// Scoreboard slots to look at for siblings.
    pub fn children(&self) -> usize {
        self.children
    }

    /// Worker: where to wait.
    pub fn choose(&self, w: Idle) -> Wait {
        if w.stopping || w.nudged || (w.listener_waits && w.last == Wait::Accept) {
            // Taking turns: after a new connection, a worker serves a parked one that is
            // waiting before it accepts again. Otherwise, with a backlog of new connections,
            // a child of one or two threads went from accept to accept (which returns at
            // once) and parked connections waited for a lull (5 s at ThreadsPerChild 1).
            Wait::Queue
        } else if w.at_file_limit || !self.may_accept(w.open) {
            // More connections than the least loaded sibling plus a child's threads (see
            // accept_cap), or than the child has descriptors for: new connections are for
            // the others now.
            Wait::Queue
        } else if w.in_accept == 0 {
            // Even while the listener waits for a worker: under overload it always does,
            // and new connections would wait in the backlog until a lull (keep-alive at 400
            // clients and 150 workers: the first request of each reconnection was the p99).
            Wait::Accept
        } else if w.listener_waits || w.on_queue < self.wanted_on_queue() {
            Wait::Queue
        } else {
            Wait::Accept
        }
    }

    /// Idle workers wanted on the fdqueue now.
    pub fn wanted_on_queue(&self) -> usize {
        // Relaxed: a sizing hint; a worker that reads a stale value waits in the other
        // place, which the listener corrects (a nudge, or `Job::Accept`).
        self.on_queue.load(Ordering::Relaxed)
    }

    /// Listener: it found no worker on the fdqueue for a ready connection.
    pub fn short_on_queue(&self) {
        // Listener only writes, so load + store (Relaxed, as in wanted_on_queue).
        let n = self.on_queue.load(Ordering::Relaxed);
        self.on_queue
            .store((n + 1).min(self.max), Ordering::Relaxed);
    }

    /// Listener, once a second without a shortage: halves the share.
    pub fn decay(&self) {
        let n = self.on_queue.load(Ordering::Relaxed);
        self.on_queue.store((n / 2).max(1), Ordering::Relaxed);
    }

    /// Listener: how many of `on_queue` waiting workers are more than wanted (to be sent
    /// back to accept).
    pub fn surplus_on_queue(&self, on_queue: usize) -> usize {
        on_queue.saturating_sub(self.wanted_on_queue())
    }
}

/// Balance between children: the most open connections with which a child still waits
/// in accept, given its own count and its siblings' (the current generation's, in its
/// bucket). No limit for a child that is itself the least loaded, so new connections never
/// wait for every child to refresh its count. Otherwise:
/// - while the server could hold keep-alive connections on workers ([`hold_keep_alive`]:
///   a quarter of its threads to spare) and the least loaded sibling could hold one more
///   (it has fewer than [`keep_alive_hold_max`]), that many: a child beyond it parks every
///   keep-alive request, and a parking child has more idle workers in accept than a holding
///   one, so it drew the next connections too (keep-alive with 100 reconnecting clients over
///   six children of 25, before this rule: one child had 25-34 connections in most samples
///   and a third of all requests took the parked path);
/// - else the least loaded sibling's count plus ThreadsPerChild. Without it, the kernel's
///   accept queue gives new connections to whichever child has the most workers waiting,
///   that is the least busy one *now*, and a parking child has idle workers even while it
///   holds many (idle) connections: with reconnecting keep-alive clients one child of six
///   gathered 160 of 400 connections within two seconds (its clients then waited four
///   times as long, the p99 of the A/B).
pub fn accept_cap(
    own: usize,
    siblings: impl Iterator<Item = usize>,
    threads_per_child: usize,
) -> usize {
    let all = ServerCounts::of(own, siblings);
    let hold_max = keep_alive_hold_max(threads_per_child);
    if all.least_sibling >= own {
        usize::MAX
    } else if all.least_sibling < hold_max && all.room_to_hold(threads_per_child) {
        hold_max
    } else {
        all.least_sibling + threads_per_child.max(1)
    }
}

/// A child's count of open connections together with its siblings'.
struct ServerCounts {
    /// The child and its siblings.
    children: usize,
    /// Their open connections in all.
    open: usize,
    /// The least loaded sibling's (`usize::MAX` without siblings).
    least_sibling: usize,
}

impl ServerCounts {
    fn of(own: usize, siblings: impl Iterator<Item = usize>) -> ServerCounts {
        siblings.fold(
            ServerCounts {
                children: 1,
                open: own,
                least_sibling: usize::MAX,
            },
            |all, c| ServerCounts {
                children: all.children + 1,
                open: all.open + c,
                least_sibling: all.least_sibling.min(c),
            },
        )
    }

    /// Whether the server has a thread for every connection and a quarter of its threads
    /// (at least one per child) to spare.
    fn room_to_hold(&self, threads_per_child: usize) -> bool {
        let spare = (threads_per_child / 4).max(1);
        self.open + self.children * spare <= self.children * threads_per_child
    }
}

/// The most open connections with which a child of `threads_per_child` workers holds
/// keep-alive connections on its workers ([`hold_keep_alive`]): one thread stays free.
pub fn keep_alive_hold_max(threads_per_child: usize) -> usize {
    threads_per_child.saturating_sub(1)
}

/// What a worker that just answered a keep-alive request knows when it decides whether to
/// hold the connection ([`hold_keep_alive`]).
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    /// Its child's open connections.
    pub own: usize,
    /// The listener waits for an idle worker now.
    pub listener_waits: bool,
    /// Workers of the child waiting in accept now (`None`: the listener accepts).
    pub in_accept: Option<usize>,
    /// ThreadsPerChild.
    pub threads_per_child: usize,
}

/// Whether a worker that just answered a keep-alive request waits on the connection itself
/// for a moment (`HOLD_ON_WORKER` in `crate::mpm::worker`) before it parks it, given what
/// it knows (`h`) and the open connections of its child's siblings (`siblings`). Parking
/// costs every request a listener wake-up, epoll calls and a futex wake; a client that
/// sends its next request at once (a busy client, a page's next resource) is answered
/// sooner and cheaper by a worker that waited for it, as with `RWorkerKeepAlive thread`
/// (measured with the kernel's autogroup off, A/B with MaxRequestWorkers 150: parking
/// every keep-alive request cost 1.38-1.56x the stock worker's CPU per request at 50 and
/// 100 clients, 0.70-0.77x its requests). That is worth a thread only while
/// - the child has a thread for every connection and one more
///   ([`keep_alive_hold_max`]), for a new connection or a parked one that wakes up;
/// - over the whole server there is a thread for every connection with a quarter of the
///   threads to spare: a held connection is answered ahead of parked ones, so holds stop
///   for everyone before any child runs short (with holds decided per child only, a
///   lightly loaded child's few clients got the machine while the others parked);
/// - another worker of the child waits in accept: the counts above are of *accepted*
///   connections, and workers that hold do not come back to accept. Without this, at 400
///   keep-alive clients over 150 threads, holds kept new connections in the kernel's
///   accept queue, where no count saw them, so the counts allowed more holds (15% of
///   requests held, p99 0.75-0.88 s as the stock worker's; with it, p99 31-60 ms and
///   almost no holds). After a burst of connects, 292 of 400 new connections waited there;
/// - nothing waits for a worker now.
///
/// The child's own bound was a quarter of its threads to spare at first: with 100
/// keep-alive clients over six children of 25, children with 20-24 connections parked
/// every request, and a quarter of all requests took the parked path (with one thread to
/// spare, and the child balance of [`accept_cap`], 2-7%).
///
/// `siblings` is called only when the child's own state allows a hold: it reads the
/// scoreboard, and with more clients than threads (where this runs for every request)
/// the answer is no before that.
pub fn hold_keep_alive<I: Iterator<Item = usize>>(h: Hold, siblings: impl FnOnce() -> I) -> bool {
    let tpc = h.threads_per_child;
    if h.listener_waits || h.in_accept == Some(0) || h.own > keep_alive_hold_max(tpc) {
        return false;
    }
    ServerCounts::of(h.own, siblings()).room_to_hold(tpc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(in_accept: usize, on_queue: usize) -> Idle {
        Idle {
            stopping: false,
            nudged: false,
            listener_waits: false,
            in_accept,
            on_queue,
            last: Wait::Queue,
            open: 0,
            at_file_limit: false,
        }
    }

    #[test]
    fn one_on_the_queue_then_the_rest_in_accept() {
        let s = IdleSplit::new(25, 6);
        assert_eq!(s.choose(idle(3, 0)), Wait::Queue);
        assert_eq!(s.choose(idle(3, 1)), Wait::Accept);
        assert_eq!(s.choose(idle(0, 5)), Wait::Accept);
    }

    #[test]
    fn someone_accepts_unless_nudged_or_the_child_stops() {
        let s = IdleSplit::new(4, 6);
        for _ in 0..10 {
            s.short_on_queue();
        }
        assert_eq!(s.wanted_on_queue(), 4);
        assert_eq!(s.choose(idle(0, 0)), Wait::Accept);
        assert_eq!(s.choose(idle(1, 2)), Wait::Queue);
        let waits = |in_accept| Idle {
            listener_waits: true,
            ..idle(in_accept, 0)
        };
        assert_eq!(s.choose(waits(0)), Wait::Accept);
        assert_eq!(s.choose(waits(1)), Wait::Queue);
        let nudged = Idle {
            nudged: true,
            ..waits(0)
        };
        assert_eq!(s.choose(nudged), Wait::Queue);
        // Taking turns: after a new connection, a waiting parked one; after a parked one,
        // accept again if nobody does.
        let after_accept = Idle {
            last: Wait::Accept,
            ..waits(0)
        };
        assert_eq!(s.choose(after_accept), Wait::Queue);
        assert_eq!(
            s.choose(Idle {
                last: Wait::Accept,
                ..idle(0, 0)
            }),
            Wait::Accept
        );
        let stopping = Idle {
            stopping: true,
            ..idle(0, 0)
        };
        assert_eq!(s.choose(stopping), Wait::Queue);
    }

    #[test]
    fn a_child_far_above_its_least_loaded_sibling_stops_accepting() {
        assert_eq!(accept_cap(80, [60, 45, 70].into_iter(), 25), 70);
        assert_eq!(accept_cap(46, [60, 45].into_iter(), 25), 70);
        // The least loaded (or tied, or only) child: no cap.
        assert_eq!(accept_cap(3, [60, 45].into_iter(), 25), usize::MAX);
        assert_eq!(accept_cap(45, [60, 45].into_iter(), 25), usize::MAX);
        assert_eq!(accept_cap(7, std::iter::empty(), 25), usize::MAX);
        // While the least loaded sibling could still hold its connections on workers
        // (fewer than 24 of 25), the others accept only up to that.
        assert_eq!(keep_alive_hold_max(25), 24);
        assert_eq!(accept_cap(30, [12, 18, 9, 9, 9].into_iter(), 25), 24);
        assert_eq!(accept_cap(13, [12, 18, 9, 9, 9].into_iter(), 25), 24);
        assert_eq!(accept_cap(30, [23, 30, 9, 9, 9].into_iter(), 25), 24);
        assert_eq!(accept_cap(30, [24, 26].into_iter(), 25), 49);
        // Not while the server has more connections than it would hold (114 of 150).
        assert_eq!(accept_cap(30, [23, 15, 15, 15, 16].into_iter(), 25), 24);
        assert_eq!(accept_cap(30, [23, 15, 15, 15, 17].into_iter(), 25), 40);
        // Children too small to hold: the loose balance only.
        assert_eq!(keep_alive_hold_max(1), 0);
        assert_eq!(accept_cap(5, [0].into_iter(), 1), 1);
        let s = IdleSplit::new(25, 6);
        s.set_accept_cap(70);
        assert_eq!(
            s.choose(Idle {
                open: 69,
                ..idle(0, 1)
            }),
            Wait::Accept
        );
        assert_eq!(
            s.choose(Idle {
                open: 70,
                ..idle(0, 1)
            }),
            Wait::Queue
        );
        // At its open-file limit a child accepts nothing, whatever its siblings hold.
        assert_eq!(
            s.choose(Idle {
                at_file_limit: true,
                ..idle(0, 1)
            }),
            Wait::Queue
        );
    }

    #[test]
    fn a_worker_holds_a_keep_alive_connection_only_while_every_connection_could() {
        let h = |own| Hold {
            own,
            listener_waits: false,
            in_accept: Some(1),
            threads_per_child: 25,
        };
        let none = std::iter::empty;
        let light = || [5, 5, 5, 5, 5].into_iter();
        assert!(hold_keep_alive(h(24), light));
        assert!(!hold_keep_alive(h(25), light), "no thread to spare");
        // Alone, the child is the whole server: a quarter to spare.
        assert!(hold_keep_alive(h(19), none));
        assert!(!hold_keep_alive(h(20), none));
        let waits = Hold {
            listener_waits: true,
            ..h(3)
        };
        assert!(
            !hold_keep_alive(waits, none),
            "the listener waits for a worker"
        );
        let nobody_accepts = Hold {
            in_accept: Some(0),
            ..h(3)
        };
        assert!(
            !hold_keep_alive(nobody_accepts, none),
            "nobody else accepts"
        );
        // The whole server counts: 6 x 25 threads hold up to 6 x 19 = 114 connections.
        assert!(hold_keep_alive(h(10), || [19, 19, 19, 19, 28].into_iter()));
        assert!(!hold_keep_alive(h(10), || [19, 19, 19, 19, 29].into_iter()));
        assert!(!hold_keep_alive(h(1), || [67, 67, 67, 67, 67].into_iter()));
        // Small children: one spare thread; a child of one never holds.
        let small = |tpc| Hold {
            threads_per_child: tpc,
            in_accept: None,
            ..h(1)
        };
        assert!(hold_keep_alive(small(2), none));
        assert!(!hold_keep_alive(small(1), none));
    }

    #[test]
    fn shortages_raise_the_share_quiet_seconds_halve_it() {
        let s = IdleSplit::new(25, 6);
        for _ in 0..30 {
            s.short_on_queue();
        }
        assert_eq!(s.wanted_on_queue(), 25);
        assert!(s.surplus_on_queue(26) == 1 && s.surplus_on_queue(25) == 0);
        let halves: Vec<usize> = (0..6)
            .map(|_| {
                s.decay();
                s.wanted_on_queue()
            })
            .collect();
        assert_eq!(halves, [12, 6, 3, 1, 1, 1]);
        assert!(s.surplus_on_queue(2) == 1 && s.surplus_on_queue(1) == 0);
    }
}
