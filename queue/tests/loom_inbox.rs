//! loom model checks of the [`Inbox`] (workers park connections with the listener). Run with
//! `queue/loom.sh`, i.e. `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom
//! cargo test -p rworker-queue --release --test loom_inbox`.
//!
//! The listener's `epoll_wait` on an eventfd is modelled by [`EventFd`]: a counter under a loom
//! `Mutex` that a waiter sleeps on with a `Condvar` until it is non-zero, then resets (an
//! eventfd's read). A lost wake-up therefore shows up as a loom "deadlock" (every thread
//! blocked), a wrong result or a second `Wake::Needed` for one sleep as a failed assertion, and
//! a data race on a slot as a causality violation, and a push that waits forever on a full
//! inbox as loom's "exceeded maximum number of branches". Each model has 2-3 threads and
//! preemption bound 4, or 3 for the one where three threads loop (override both with
//! `LOOM_MAX_PREEMPTIONS`); all five take about 5 s.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use rworker_queue::{Inbox, InboxConsumer, Wake};

/// Runs `f` under loom with preemption bound 4 unless `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    model_bounded(4, f);
}

/// Runs `f` under loom with preemption bound `bound` unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise. The model where three threads all loop uses 3 (22 s at 4, 2.5 s at 3).
fn model_bounded<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    builder.check(f);
}

/// The listener's eventfd: `write` adds one, `wait` sleeps until the count is non-zero and
/// resets it (what `epoll_wait` + `read` do with the real one).
#[derive(Default)]
struct EventFd {
    count: Mutex<u64>,
    cond: Condvar,
}

impl EventFd {
    fn write(&self) {
        *self.count.lock().unwrap() += 1;
        self.cond.notify_one();
    }

    fn wait(&self) {
        let mut count = self.count.lock().unwrap();
        while *count == 0 {
            count = self.cond.wait(count).unwrap();
        }
        *count = 0;
    }
}

/// What the model's threads share: the inbox, the eventfd, and counters of the `Wake::Needed`
/// answers and of the consumer's announced sleeps (`prepare_to_sleep` calls).
struct World {
    inbox: Inbox<u32>,
    efd: EventFd,
    wakes: AtomicUsize,
    sleeps: AtomicUsize,
}

impl World {
    fn new(capacity: usize) -> Arc<Self> {
        Arc::new(World {
            inbox: Inbox::new(capacity),
            efd: EventFd::default(),
            wakes: AtomicUsize::new(0),
            sleeps: AtomicUsize::new(0),
        })
    }

    /// A worker parking `item`: push, and write the eventfd if told to. Whether it was accepted.
    fn park(&self, item: u32) -> bool {
        match self.inbox.push(item) {
            Ok(wake) => {
                self.wake(wake);
                true
            }
            Err(_) => false,
        }
    }

    /// Acts on a `Wake` answer.
    fn wake(&self, wake: Wake) {
        if wake == Wake::Needed {
            self.wakes.fetch_add(1, Ordering::Relaxed);
            self.efd.write();
        }
    }

    /// The listener's loop: drain, stop when `done` says so, else announce a sleep and sleep on
    /// the eventfd. Returns what it drained, in order.
    fn listen(&self, done: impl Fn(&InboxConsumer<'_, u32>, &[u32]) -> bool) -> Vec<u32> {
        let mut consumer = self.inbox.consumer().unwrap();
        let mut got = Vec::new();
        loop {
            got.extend(consumer.drain());
            if done(&consumer, &got) {
                break;
            }
            self.sleeps.fetch_add(1, Ordering::Relaxed);
            if consumer.prepare_to_sleep() {
                self.efd.wait();
                consumer.awake();
            }
        }
        got
    }

    /// At most one `Wake::Needed` per announced sleep.
    fn check_wake_count(&self) {
        let (wakes, sleeps) = (
            self.wakes.load(Ordering::Relaxed),
            self.sleeps.load(Ordering::Relaxed),
        );
        assert!(wakes <= sleeps, "{wakes} wakes for {sleeps} sleeps");
    }
}

/// One worker parks two connections while the listener drains and sleeps: the listener never
/// sleeps through a parked connection (no lost wake-up), gets both in the order they were
/// parked, and at most one pusher per sleep writes the eventfd.
#[test]
fn push_wakes_sleeping_consumer() {
    model(|| {
        let w = World::new(2);
        let w2 = w.clone();
        let listener = thread::spawn(move || w2.listen(|_, got| got.len() == 2));
        assert!(w.park(1));
        assert!(w.park(2));
        assert_eq!(listener.join().unwrap(), [1, 2]);
        w.check_wake_count();
    });
}

/// Two workers race to park while the listener has announced one sleep: exactly one of them
/// gets `Wake::Needed`, and the listener, woken by it, drains both.
#[test]
fn two_producers_race_one_sleep() {
    model(|| {
        let w = World::new(2);
        let mut consumer = w.inbox.consumer().unwrap();
        assert!(consumer.prepare_to_sleep());
        let workers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|v| {
                let w = w.clone();
                thread::spawn(move || assert!(w.park(v)))
            })
            .collect();
        for h in workers {
            h.join().unwrap();
        }
        assert_eq!(w.wakes.load(Ordering::Relaxed), 1);
        w.efd.wait();
        consumer.awake();
        let mut got: Vec<u32> = consumer.drain().collect();
        got.sort();
        assert_eq!(got, [1, 2]);
    });
}

/// Two workers park one connection each while the listener loops (drain, sleep, wake): both
/// arrive, nobody sleeps forever, at most one wake per sleep. Preemption bound 3.
#[test]
fn two_producers_one_sleeping_consumer() {
    model_bounded(3, || {
        let w = World::new(2);
        let w2 = w.clone();
        let worker = thread::spawn(move || assert!(w2.park(2)));
        let w3 = w.clone();
        let listener = thread::spawn(move || w3.listen(|_, got| got.len() == 2));
        assert!(w.park(1));
        worker.join().unwrap();
        let mut got = listener.join().unwrap();
        got.sort();
        assert_eq!(got, [1, 2]);
        w.check_wake_count();
    });
}

/// A full inbox (capacity 1): the second push waits for the listener, which may be asleep
/// (woken by the first push), and the order is kept.
#[test]
fn full_inbox_push_waits_for_the_consumer() {
    model(|| {
        let w = World::new(1);
        let w2 = w.clone();
        let listener = thread::spawn(move || w2.listen(|_, got| got.len() == 2));
        assert!(w.park(1));
        assert!(w.park(2));
        assert_eq!(listener.join().unwrap(), [1, 2]);
        w.check_wake_count();
    });
}

/// close (from a third thread, the child stopping) racing a worker's push while the listener
/// sleeps: the push either succeeds and its connection is drained, or fails and the worker
/// keeps it; the listener always comes to see the inbox finished (the closer's or the pusher's
/// wake reaches it).
#[test]
fn close_racing_push() {
    model(|| {
        let w = World::new(1);
        let w2 = w.clone();
        let worker = thread::spawn(move || w2.park(1));
        let w3 = w.clone();
        let listener = thread::spawn(move || w3.listen(|c, _| c.is_finished()));
        w.wake(w.inbox.close());
        let pushed = worker.join().unwrap();
        let got = listener.join().unwrap();
        assert_eq!(got, if pushed { vec![1] } else { vec![] });
        w.check_wake_count();
    });
}
