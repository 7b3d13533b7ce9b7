//! loom models of what a parking child's workers share (`RWorkerKeepAlive park`): the claim
//! word of a parked connection ([`ParkSlots`]), the timeout FIFOs with lazy deletion
//! ([`Timeouts`]), a park against its own expiry with the clock as an atomic, the
//! store-then-check handshake ([`publish_then_check`]) between a park and a stop's scan
//! (and a weaker fence that loses), the wake-all on stop ([`Drain`]), the close of a
//! listening socket that workers are inside ([`Occupancy`]), the changes to a child's
//! registrations ([`Serial`]), and MaxConnectionsPerChild's reservations
//! ([`ConnectionBudget`], which accepting workers of either mode share). Run with
//! `queue/loom.sh`.
//!
//! A value claimed twice or lost shows up as a failed count, a read of a value that was not
//! published as a causality violation, a waiter left asleep as a loom "deadlock".
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use rworker_queue::{
    publish_then_check_with, Alarm, Bell, ConnectionBudget, Drain, Occupancy, ParkSlots, Serial,
    Ticket, Timeouts, NEVER,
};

fn model<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    builder.check(f);
}

/// Takes whatever is still parked (after every thread of a model has joined).
fn drain_parked(slots: &ParkSlots<String>) -> Vec<String> {
    let tickets: Vec<Ticket> = slots.parked().map(|(t, _)| t).collect();
    tickets.into_iter().filter_map(|t| slots.claim(t)).collect()
}

/// The claim race: a parker hands its ticket out before it publishes (epoll armed, timeout
/// filed), then publishes; readiness and expiry claim through that ticket, the winner of
/// readiness parks the connection again at once (a new generation), and a graceful stop
/// claims whatever it finds parked. Exactly one thread ends up with the connection, and it is
/// never read before it was written.
#[test]
fn readiness_expiry_stop_and_a_re_park_race_for_one_connection() {
    model(3, || {
        let slots = Arc::new(ParkSlots::new(2));
        let r = slots.reserve(1, 0).unwrap();
        let ticket = r.ticket();
        let kept = Arc::new(AtomicUsize::new(0));

        // The readiness claimer: serves it, then parks it again under a new ticket.
        let ready = {
            let (slots, kept) = (slots.clone(), kept.clone());
            thread::spawn(move || {
                if let Some(v) = slots.claim(ticket) {
                    assert_eq!(v, "conn");
                    let again = slots.reserve(1, 0).expect("the claimer owns the index");
                    if again.publish(v).is_err() {
                        kept.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        // The expirer: its entry's ticket may be stale by now (lazy deletion).
        let expired = {
            let slots = slots.clone();
            thread::spawn(move || slots.claim(ticket))
        };
        // The parker publishes; a claim that came first gives the connection back to it.
        if r.publish(String::from("conn")).is_err() {
            kept.fetch_add(1, Ordering::Relaxed);
        }
        // The stop: whatever is parked now.
        let stopped = drain_parked(&slots);

        ready.join().unwrap();
        let expired = expired.join().unwrap();
        let left = drain_parked(&slots);
        let owners = kept.load(Ordering::Relaxed)
            + usize::from(expired.is_some())
            + stopped.len()
            + left.len();
        assert_eq!(owners, 1, "exactly one owner of the connection");
        assert!(slots.claim(ticket).is_none(), "the first ticket is spent");
    });
}

/// The alarm as a timerfd behaves: one setting, the last set wins.
#[derive(Default)]
struct MockAlarm(Mutex<u64>);

impl Alarm for MockAlarm {
    fn set(&self, deadline: u64) {
        *self.0.lock().unwrap() = deadline;
    }
}

/// The timeout FIFOs: a producer files three entries (across a block boundary: loom blocks
/// hold two) while the expirer pops what is due and re-arms. Nothing filed is lost: after
/// both are done, every entry left is covered by the alarm (set no later than the earliest
/// one), every popped entry was due, and entries whose connection was resumed meanwhile are
/// skipped by their claim failing (lazy deletion).
#[test]
fn filed_timeouts_are_never_missed_by_the_alarm_nor_expired_early() {
    model(3, || {
        let slots = Arc::new(ParkSlots::<String>::new(4));
        let t = Arc::new(Timeouts::<Ticket>::new(1, 1));
        let alarm = Arc::new(MockAlarm(Mutex::new(NEVER)));
        // Three parked connections, slots 0..3, deadlines 10, 20, 30.
        let tickets: Vec<Ticket> = (0..3)
            .map(|i| {
                let r = slots.reserve(i, 0).unwrap();
                let t = r.ticket();
                r.publish(format!("c{i}")).unwrap();
                t
            })
            .collect();
        // The connection in slot 1 is resumed before its timeout: its entry goes stale.
        assert!(slots.claim(tickets[1]).is_some());

        let producer = {
            let (t, alarm) = (t.clone(), alarm.clone());
            let tickets = tickets.clone();
            thread::spawn(move || {
                let mut p = t.producer(0).unwrap();
                for (i, &tk) in tickets.iter().enumerate() {
                    p.push(0, 10 * (i as u64 + 1), tk, &*alarm);
                }
            })
        };
        // The expirer wakes at 20 (it may run before or between the pushes).
        let mut closed = Vec::new();
        if let Some(mut e) = t.try_expire() {
            e.expire(20, usize::MAX, |_, tk| {
                assert!(tk != tickets[2], "30 is not due at 20");
                let c = slots.claim(tk);
                let live = c.is_some();
                closed.extend(c);
                live
            });
            e.rearm(&*alarm, |k| slots.is_current(k));
        }
        producer.join().unwrap();

        assert!(
            !closed.contains(&String::from("c1")),
            "the resumed one stays stale"
        );
        // What is still filed must be covered by the alarm.
        let set = *alarm.0.lock().unwrap();
        let mut e = t.try_expire().unwrap();
        let mut left = Vec::new();
        e.expire(u64::MAX - 1, usize::MAX, |_, tk| {
            left.push(tk);
            true
        });
        if let Some(first) = left.first() {
            let earliest = 10 * (tickets.iter().position(|t| t == first).unwrap() as u64 + 1);
            assert!(
                set <= earliest,
                "alarm at {set}, an entry due at {earliest}"
            );
        }
    });
}

/// A park against its own expiry, the clock an atomic (as `monotonic_ns` is to the MPM)
/// that the expirer moves on: the parker reads the clock, files its entry for that time
/// plus the wait, then publishes (`Parking::park_until`); the expirer moves the clock,
/// pops what is due at its reading and claims each; a reader claims through the same
/// ticket (readiness). Whatever the interleaving: the connection ends with exactly one of
/// them, or is still parked with its entry filed (a last expiry at the end of time finds
/// it); and the expirer never takes it before its deadline.
#[test]
fn a_parked_connection_keeps_its_entry_and_never_expires_early() {
    model(3, || {
        const WAIT: u64 = 10;
        let slots = Arc::new(ParkSlots::<String>::new(2));
        let t = Arc::new(Timeouts::<Ticket>::new(1, 1));
        let alarm = Arc::new(MockAlarm(Mutex::new(NEVER)));
        let clock = Arc::new(AtomicU64::new(5));
        let start = clock.load(Ordering::SeqCst);
        // The parker (this thread) takes its ticket; the others know it (epoll, the FIFO).
        let r = slots.reserve(1, 0).unwrap();
        let ticket = r.ticket();
        let reader = {
            let slots = slots.clone();
            thread::spawn(move || slots.claim(ticket))
        };
        let expirer = {
            let (slots, t, alarm, clock) = (slots.clone(), t.clone(), alarm.clone(), clock.clone());
            thread::spawn(move || {
                clock.store(start + WAIT, Ordering::SeqCst);
                let now = clock.load(Ordering::SeqCst);
                let mut got = None;
                if let Some(mut e) = t.try_expire() {
                    e.expire(now, usize::MAX, |due, tk| {
                        assert!(due <= now, "popped an entry due at {due} at {now}");
                        assert!(due >= start + WAIT, "filed earlier than the wait");
                        let c = slots.claim(tk);
                        let live = c.is_some();
                        got = got.take().or(c);
                        live
                    });
                    e.rearm(&*alarm, |k| slots.is_current(k));
                }
                got
            })
        };
        // The parker files, then publishes.
        t.producer(0)
            .unwrap()
            .push(0, start + WAIT, ticket, &*alarm);
        let published = r.publish(String::from("conn")).is_ok();
        let read = reader.join().unwrap();
        let expired = expirer.join().unwrap();
        // What is left must still be filed: an expiry at the end of time claims it.
        let mut e = t.try_expire().unwrap();
        let mut left = None;
        e.expire(u64::MAX - 1, usize::MAX, |_, tk| {
            let c = slots.claim(tk);
            let live = c.is_some();
            left = left.take().or(c);
            live
        });
        let owners = [read.is_some(), expired.is_some(), left.is_some()];
        if published {
            assert_eq!(
                owners.iter().filter(|&&o| o).count(),
                1,
                "exactly one owner (reader, expirer, still filed): {owners:?}"
            );
        } else {
            // A claim came between reserve and publish: the parker kept it.
            assert_eq!(owners, [false; 3]);
        }
    });
}

/// The two sides of a stop against a park: the parker publishes its connection, then looks
/// whether a stop began (to file the stop's shorter wait itself); the stop marks itself in
/// the [`Drain`], then scans what is parked. `order` is the parker's fence.
fn park_against_stop(order: Ordering) {
    model(2, move || {
        let slots = Arc::new(ParkSlots::<String>::new(2));
        let drain = Arc::new(Drain::new());
        let bell = Arc::new(MockBell::default());
        drain.opened();
        let stop = {
            let (slots, drain) = (slots.clone(), drain.clone());
            thread::spawn(move || {
                let mut scanned = 0;
                drain.begin_stop(&*bell, || scanned = slots.parked().count());
                scanned
            })
        };
        let r = slots.reserve(1, 0).unwrap();
        let parker_saw_stop = publish_then_check_with(
            order,
            || r.publish(String::from("conn")),
            |done| done.is_ok() && drain.is_stopping(),
        );
        let scanned = stop.join().unwrap();
        assert!(
            parker_saw_stop || scanned == 1,
            "neither the parker saw the stop nor the stop the parked connection"
        );
    });
}

/// With `publish_then_check`'s SeqCst fence on both sides, at least one side sees the
/// other: no parked connection keeps its long wait through a graceful stop.
#[test]
fn a_stop_sees_each_parked_connection_or_its_parker_sees_the_stop() {
    park_against_stop(Ordering::SeqCst);
}

/// The same handshake with an acquire-release fence on the parker's side: loom finds the
/// interleaving where both miss each other (store buffering), which is why the helper's
/// fence is SeqCst.
#[test]
#[should_panic(expected = "neither the parker saw the stop")]
fn a_weaker_fence_in_the_handshake_loses_a_parked_connection_to_the_stop() {
    park_against_stop(Ordering::AcqRel);
}

/// A worker is inside accept on a listening socket when the stop begins its close: the
/// socket is closed exactly once, after the worker left, by whoever saw it empty (the stop,
/// or the worker as it leaves), with no later event needed to notice.
#[test]
fn a_listening_socket_closes_once_its_last_worker_left_without_a_further_apply() {
    model(3, || {
        let o = Arc::new(Occupancy::new());
        let closes = Arc::new(AtomicUsize::new(0));
        let inside = Arc::new(AtomicUsize::new(0));
        let worker = {
            let (o, closes, inside) = (o.clone(), closes.clone(), inside.clone());
            thread::spawn(move || {
                if o.enter(u32::MAX) {
                    inside.fetch_add(1, Ordering::Relaxed);
                    inside.fetch_sub(1, Ordering::Relaxed);
                    if o.leave() {
                        assert_eq!(inside.load(Ordering::Relaxed), 0);
                        closes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        if o.begin_close() {
            assert_eq!(inside.load(Ordering::Relaxed), 0, "closed under a worker");
            closes.fetch_add(1, Ordering::Relaxed);
        }
        worker.join().unwrap();
        assert_eq!(closes.load(Ordering::Relaxed), 1, "closed exactly once");
        assert!(o.is_vacated());
    });
}

/// A level-triggered bell as an eventfd in epoll behaves: every waiter sees it while it is
/// readable.
#[derive(Default)]
struct MockBell {
    rung: Mutex<bool>,
    cv: Condvar,
}

impl Bell for MockBell {
    fn ring(&self) {
        *self.rung.lock().unwrap() = true;
        self.cv.notify_all();
    }
    fn clear(&self) {
        *self.rung.lock().unwrap() = false;
    }
}

impl MockBell {
    /// A worker's wait in the event set: until the bell is readable.
    fn wait(&self) {
        let mut rung = self.rung.lock().unwrap();
        while !*rung {
            rung = self.cv.wait(rung).unwrap();
        }
    }
}

/// The wake-all on stop: two idle workers wait on the bell; one connection is still open when
/// the stop begins, and its close (on another thread) races the stop. Every waiter leaves
/// (a lost wake-up would leave one asleep: loom reports a deadlock).
#[test]
fn a_graceful_stop_wakes_every_idle_worker_once_the_last_connection_closes() {
    model(2, || {
        let bell = Arc::new(MockBell::default());
        let drain = Arc::new(Drain::new());
        drain.opened();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (bell, drain) = (bell.clone(), drain.clone());
                thread::spawn(move || loop {
                    if drain.is_exiting() {
                        return;
                    }
                    bell.wait();
                    if drain.woken(&*bell) {
                        return;
                    }
                })
            })
            .collect();
        let closer = {
            let (bell, drain) = (bell.clone(), drain.clone());
            thread::spawn(move || drain.closed(&*bell, || ()))
        };
        drain.begin_stop(&*bell, || ());
        closer.join().unwrap();
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(drain.open(), 0);
    });
}

/// Two threads ask for a change (each writes what it wants, then runs the serial) while
/// neither waits for the other: no two changes run at once, and once both have returned,
/// the last change read both requests. A requester that finds a holder returns at once, so
/// a request the holder did not see would be lost for good.
#[test]
fn every_request_to_a_serial_is_seen_by_a_later_change_that_runs_alone() {
    model(3, || {
        let serial = Arc::new(Serial::new());
        let asked = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(0));
        let changing = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (serial, asked, seen, changing) = (
                    serial.clone(),
                    asked.clone(),
                    seen.clone(),
                    changing.clone(),
                );
                thread::spawn(move || {
                    // Relaxed, as a gate's request is: the serial must publish it.
                    asked.fetch_or(1 << i, Ordering::Relaxed);
                    serial.run(|_| {
                        assert_eq!(
                            changing.fetch_add(1, Ordering::Relaxed),
                            0,
                            "two changes at once"
                        );
                        seen.store(asked.load(Ordering::Relaxed), Ordering::Relaxed);
                        changing.fetch_sub(1, Ordering::Relaxed);
                    });
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            seen.load(Ordering::Relaxed),
            0b11,
            "a request no change saw"
        );
    });
}

/// The last connection of a child's budget is reserved by one worker; another finds none
/// and sleeps. The first worker's accept gives nothing, so it gives the reservation back:
/// the sleeper must wake and take it (a sleeper left asleep shows as a deadlock).
#[test]
fn a_reservation_given_back_reaches_a_worker_waiting_for_one() {
    model(3, || {
        let budget = Arc::new(ConnectionBudget::new(1));
        assert!(budget.reserve());
        let waiter = {
            let budget = budget.clone();
            thread::spawn(move || budget.reserve_or_wait())
        };
        budget.release();
        assert!(waiter.join().unwrap(), "the waiter took the reservation");
        assert!(!budget.reserve(), "one reservation, held by the waiter");
    });
}

/// Two workers wait for a reservation when the child stops: the close must send both away
/// empty-handed, whatever the order.
#[test]
fn closing_a_budget_wakes_every_worker_waiting_on_it() {
    model(2, || {
        let budget = Arc::new(ConnectionBudget::new(1));
        assert!(budget.reserve());
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let budget = budget.clone();
                thread::spawn(move || budget.reserve_or_wait())
            })
            .collect();
        budget.close();
        for w in waiters {
            assert!(!w.join().unwrap(), "nothing to reserve after the close");
        }
    });
}
