//! loom models of what a parking child's workers share (`RWorkerKeepAlive park`): the claim
//! word of a parked connection ([`ParkSlots`]), the timeout FIFOs with lazy deletion
//! ([`Timeouts`]), a re-park under a filed entry's ticket against that entry coming due,
//! the wake-all on stop ([`Drain`]), the changes to a child's registrations
//! ([`Serial`]), and MaxConnectionsPerChild's reservations ([`ConnectionBudget`], which
//! accepting workers of either mode share). Run with `queue/loom.sh`.
//!
//! A value claimed twice or lost shows up as a failed count, a read of a value that was not
//! published as a causality violation, a waiter left asleep as a loom "deadlock".
#![cfg(loom)]

use loom::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use rworker_queue::{
    Alarm, Bell, ConnectionBudget, Drain, ParkSlots, Serial, Ticket, Timeouts, NEVER,
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
            e.rearm(&*alarm);
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

/// A busy connection parks again under the ticket of its timeout entry, filing nothing,
/// while that entry comes due (the clock, as the MPM reads it, is an atomic here that the
/// expirer moves to the deadline). The expirer claims through the entry's ticket; the parker
/// re-reads the clock after its publish and, past the deadline, takes the connection back to
/// file it anew. Whatever the interleaving, the connection ends either with the expirer
/// (which files it for its real deadline) or filed anew by the parker: never parked under a
/// spent entry, where it would never time out. Without either SeqCst fence (the parker's
/// after its publish, the expirer's after its clock read) loom finds that lost timeout.
#[test]
fn a_re_park_under_a_filed_entry_never_outlives_that_entry_unfiled() {
    model(3, || {
        const DUE: u64 = 10;
        let slots = Arc::new(ParkSlots::<String>::new(2));
        let clock = Arc::new(AtomicU64::new(0));
        // The connection's first park filed the entry (ticket, DUE); a reader claimed it.
        let r = slots.reserve(1, 0).unwrap();
        let ticket = r.ticket();
        r.publish(String::from("conn")).unwrap();
        let conn = slots.claim(ticket).unwrap();

        let expirer = {
            let (slots, clock) = (slots.clone(), clock.clone());
            thread::spawn(move || {
                clock.store(DUE, Ordering::SeqCst);
                fence(Ordering::SeqCst);
                // The entry is due: claim through its ticket (lazy deletion: may be stale).
                slots.claim(ticket)
            })
        };
        // The parker, as `Parking::park` does it.
        let mut filed_anew = false;
        if clock.load(Ordering::SeqCst) < DUE {
            let again = slots.reserve_again(ticket, 0).unwrap();
            match again.publish(conn) {
                Ok(()) => {
                    fence(Ordering::SeqCst);
                    if clock.load(Ordering::SeqCst) >= DUE {
                        if let Some(back) = slots.claim(ticket) {
                            assert_eq!(back, "conn");
                            filed_anew = true;
                        }
                    }
                }
                // The expirer came between reserve and publish: still ours.
                Err(_) => filed_anew = true,
            }
        } else {
            filed_anew = true;
        }
        let expired = expirer.join().unwrap();
        let parked_unfiled = drain_parked(&slots);
        assert!(
            parked_unfiled.is_empty(),
            "parked under a spent entry (expirer got {expired:?}, filed anew {filed_anew})"
        );
        assert_eq!(
            usize::from(expired.is_some()) + usize::from(filed_anew),
            1,
            "exactly one owner"
        );
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
            thread::spawn(move || drain.closed(&*bell))
        };
        drain.begin_stop();
        drain.exit_if_drained(&*bell);
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
