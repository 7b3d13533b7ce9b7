//! loom model checks of the hand-off protocols. Run with `queue/loom.sh`, i.e.
//! `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p rworker-queue --release --test loom`.
//!
//! A lost wake-up shows up as a loom "deadlock" (every thread blocked), a data race on a slot as
//! a causality violation, and a wrong result as a failed assertion. Each model is small (2-3
//! threads, capacities 1-2) and bounded by `LOOM_MAX_PREEMPTIONS` (default 3 here).
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use rworker_queue::{FdQueue, PopError, PushError, QueueInfo, Terminated};

/// Runs `f` under loom with a preemption bound (3 unless `LOOM_MAX_PREEMPTIONS` says otherwise).
fn model<F: Fn() + Sync + Send + 'static>(f: F) {
    model_bounded(3, f);
}

/// Runs `f` under loom with preemption bound `bound` unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise. The four-thread models use 2 to keep the suite within CI time.
fn model_bounded<F: Fn() + Sync + Send + 'static>(bound: usize, f: F) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(bound);
    }
    builder.check(f);
}

/// One popper parks on an empty queue; one push must wake it (no lost wake-up), with the value.
#[test]
fn push_wakes_parked_pop() {
    model(|| {
        let q = Arc::new(FdQueue::new(1));
        let q2 = q.clone();
        let popper = thread::spawn(move || q2.pop());
        q.push(7u32).unwrap();
        assert_eq!(popper.join().unwrap(), Ok(7));
    });
}

/// Two producers, one consumer that takes both: FIFO per producer, nothing lost or duplicated,
/// and the "claimed but unpublished" slot (Pending) is handled by parking, not by returning.
#[test]
fn two_pushers_one_popper() {
    model(|| {
        let q = Arc::new(FdQueue::new(2));
        let pushers: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|v| {
                let q = q.clone();
                thread::spawn(move || q.push(v).unwrap())
            })
            .collect();
        let mut got = [q.pop().unwrap(), q.pop().unwrap()];
        for p in pushers {
            p.join().unwrap();
        }
        got.sort();
        assert_eq!(got, [1, 2]);
        assert_eq!(q.try_pop(), Err(PopError::Empty));
    });
}

/// Two poppers park, two pushes: each popper gets exactly one item (wake_one + re-check never
/// strands an item while a popper sleeps).
#[test]
fn two_poppers_two_pushes() {
    model(|| {
        two_poppers_get_1_and_2(|q| {
            q.push(1).unwrap();
            q.push(2).unwrap();
        })
    });
}

/// Two poppers pop once each while `push` (on the main thread) makes 1 and 2 available: each
/// popper gets exactly one of them.
fn two_poppers_get_1_and_2(push: impl FnOnce(&Arc<FdQueue<u32>>)) {
    let q = Arc::new(FdQueue::new(2));
    let poppers: Vec<_> = (0..2)
        .map(|_| {
            let q = q.clone();
            thread::spawn(move || q.pop().unwrap())
        })
        .collect();
    push(&q);
    let mut got: Vec<u32> = poppers.into_iter().map(|h| h.join().unwrap()).collect();
    got.sort();
    assert_eq!(got, [1, 2]);
}

/// Two pushers and two poppers: the wake token's hard case. A push whose wake finds nobody in
/// the kernel yet (its sleeper is still on the way in) must take the token back, and if another
/// push relied on it meanwhile, wake on that push's behalf; a popper that takes back a relied-on
/// token must pass the wake on while items are left. Every item reaches exactly one popper.
/// Four threads, so preemption bound 2 (about 30 s; bound 3 takes several minutes: run it with
/// `LOOM_MAX_PREEMPTIONS=3 queue/loom.sh relied_on` after touching the wake protocol).
#[test]
fn relied_on_token_passes_the_wake_on() {
    model_bounded(2, || {
        two_poppers_get_1_and_2(|q| {
            let q2 = q.clone();
            let pusher = thread::spawn(move || q2.push(2).unwrap());
            q.push(1).unwrap();
            pusher.join().unwrap();
        })
    });
}

/// Wrap-around with a capacity-1 ring: a push that finds the slot still being read waits for
/// the reader instead of overwriting or spuriously reporting Full.
#[test]
fn capacity_one_ring_laps() {
    model(|| {
        let q = Arc::new(FdQueue::new(1));
        q.push(1u32).unwrap();
        let q2 = q.clone();
        let popper = thread::spawn(move || {
            let a = q2.pop().unwrap();
            let b = q2.pop().unwrap();
            (a, b)
        });
        // Retry while the single slot is still occupied.
        let mut item = 2u32;
        loop {
            match q.push(item) {
                Ok(()) => break,
                Err(PushError::Full(v)) => {
                    item = v;
                    thread::yield_now();
                }
                Err(PushError::Terminated(_)) => unreachable!(),
            }
        }
        assert_eq!(popper.join().unwrap(), (1, 2));
    });
}

/// interrupt_all racing a pop that began before it: the pop returns Interrupted (or an item
/// pushed meanwhile), never sleeps through it.
#[test]
fn interrupt_all_racing_pop() {
    model(|| {
        let q = Arc::new(FdQueue::<u32>::new(1));
        // The pop "begins" here, before interrupt_all is called.
        let epoch = q.loom_interrupt_epoch();
        let q2 = q.clone();
        let popper = thread::spawn(move || q2.loom_pop_in_epoch(epoch));
        q.interrupt_all();
        assert_eq!(popper.join().unwrap(), Err(PopError::Interrupted));
    });
}

/// Pops until Terminated; returns what it got. Any other error fails the model.
fn drain(q: &FdQueue<u32>) -> Vec<u32> {
    let mut got = Vec::new();
    loop {
        match q.pop() {
            Ok(v) => got.push(v),
            Err(PopError::Terminated) => return got,
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
}

/// term racing a push and a pop: every item whose push succeeded is delivered before
/// Terminated; a push refused by term is not; the parked popper always wakes.
#[test]
fn term_racing_push_and_pop() {
    model(|| {
        let q = Arc::new(FdQueue::new(2));
        let qp = q.clone();
        let pusher = thread::spawn(move || qp.push(1u32).is_ok());
        let qc = q.clone();
        let popper = thread::spawn(move || drain(&qc));
        q.term();
        let pushed = pusher.join().unwrap();
        let got = popper.join().unwrap();
        assert_eq!(got, if pushed { vec![1] } else { vec![] });
    });
}

/// term racing a push that claims its slot before it and publishes after it, while a second
/// popper drains; `main_pops` is what the main thread does after `term`. The pushed item (if
/// the push won) is taken exactly once, and no popper sleeps forever.
fn term_racing_a_publishing_push(main_pops: fn(&FdQueue<u32>) -> usize) {
    model(move || {
        let q = Arc::new(FdQueue::new(2));
        let qp = q.clone();
        let pusher = thread::spawn(move || qp.push(1u32).is_ok());
        let qc = q.clone();
        let drainer = thread::spawn(move || drain(&qc).len());
        q.term();
        let mine = main_pops(&q);
        let pushed = pusher.join().unwrap();
        let got = mine + drainer.join().unwrap();
        assert_eq!(got, usize::from(pushed));
    });
}

/// term with two parked poppers and a push still publishing: the push's wake reaches one
/// popper, but both must come to see Terminated (a popper that slept on the claimed-but-
/// unpublished slot after term used to sleep forever: found by the stress test
/// `term_loses_nothing`, which loom missed with a single popper).
#[test]
fn term_with_two_poppers_and_a_publishing_push() {
    // The main thread is the second popper and drains too.
    term_racing_a_publishing_push(|q| drain(q).len());
}

/// term racing a publishing push, where the popper that takes the item never pops again (a
/// worker that exits after its last connection): the other popper must still come to see
/// Terminated, although the push's wake may have been relied on a spinner.
#[test]
fn term_with_a_popper_that_takes_the_last_item_and_leaves() {
    term_racing_a_publishing_push(|q| usize::from(q.pop().is_ok()));
}

/// The listener parks in wait_for_idler; a worker's set_idle wakes it and it reserves the idler.
#[test]
fn set_idle_wakes_wait_for_idler() {
    model(|| {
        let qi = Arc::new(QueueInfo::<()>::new(1));
        let qi2 = qi.clone();
        let worker = thread::spawn(move || qi2.set_idle());
        assert!(qi.wait_for_idler().is_ok());
        worker.join().unwrap();
        assert_eq!(qi.num_idlers(), 0);
    });
}

/// A worker recycles its last connection's pool and goes idle while the listener waits: the
/// listener that reserves that idler finds the pool on the stack (the push happens-before the
/// reservation), so it need not create one.
#[test]
fn set_idle_recycling_hands_the_pool_to_the_listener() {
    model(|| {
        let qi = Arc::new(QueueInfo::new(1));
        let qi2 = qi.clone();
        let worker = thread::spawn(move || qi2.set_idle_recycling(Some(5u32)));
        assert!(qi.wait_for_idler().is_ok());
        assert_eq!(qi.pop_pool(), Some(5));
        assert_eq!(worker.join().unwrap(), None);
        assert_eq!(qi.num_idlers(), 0);
    });
}

/// `waiters` listeners wait for an idler while the main thread calls set_idle `waiters` times:
/// each listener reserves exactly one.
fn waiters_and_as_many_idlers(waiters: usize) {
    let qi = Arc::new(QueueInfo::<()>::new(1));
    let handles: Vec<_> = (0..waiters)
        .map(|_| {
            let qi = qi.clone();
            thread::spawn(move || qi.wait_for_idler().is_ok())
        })
        .collect();
    for _ in 0..waiters {
        qi.set_idle();
    }
    for w in handles {
        assert!(w.join().unwrap());
    }
    assert_eq!(qi.num_idlers(), 0);
}

/// Two listeners (the contended bench case) and two idlers: both reserve exactly one.
#[test]
fn two_waiters_two_idlers() {
    model(|| waiters_and_as_many_idlers(2));
}

/// Three listeners park, then three set_idle calls: the first wakes one listener, the next two
/// rely on its token, the woken listener hands one wake on, and the listener that wake reaches
/// owes nothing itself, yet must hand on too or the third sleeps while an idler is left (found
/// by an adversarial review). Four threads: preemption bound 2.
#[test]
fn three_waiters_three_idlers() {
    model_bounded(2, || waiters_and_as_many_idlers(3));
}

/// term racing wait_for_idler: the listener always returns; Err(Terminated) unless it reserved
/// an idler first.
#[test]
fn term_racing_wait_for_idler() {
    model(|| {
        let qi = Arc::new(QueueInfo::<()>::new(1));
        let qi2 = qi.clone();
        let listener = thread::spawn(move || qi2.wait_for_idler());
        qi.term();
        assert_eq!(listener.join().unwrap(), Err(Terminated));
        assert!(!qi.try_get_idler());
    });
}

/// The ABA schedule: T1 reads the top (A) and its next (B); T2 pops A and B and pushes A back;
/// T1's CAS must fail (the tag moved) rather than install B, which T2 owns. Checked by
/// conservation: every pool is held exactly once at the end.
#[test]
fn pool_stack_aba() {
    model(|| {
        let qi = Arc::new(QueueInfo::new(3));
        qi.push_pool(2u32).unwrap(); // B
        qi.push_pool(1u32).unwrap(); // A, on top
        let qa = qi.clone();
        let t1 = thread::spawn(move || qa.pop_pool());
        let a = qi.pop_pool();
        let b = qi.pop_pool();
        if let Some(a) = a {
            qi.push_pool(a).unwrap();
        }
        let t1_got = t1.join().unwrap();
        let mut all: Vec<u32> = qi.free_idle_pools();
        all.extend(t1_got);
        all.extend(b);
        all.sort();
        assert_eq!(all, [1, 2]);
    });
}

/// Concurrent push_pool and free_idle_pools: a pool is either refused to its pusher or
/// returned by free_idle_pools, never lost or duplicated.
#[test]
fn pool_push_racing_free() {
    model(|| {
        let qi = Arc::new(QueueInfo::new(2));
        qi.push_pool(1u32).unwrap();
        let q2 = qi.clone();
        let pusher = thread::spawn(move || q2.push_pool(2u32).err());
        let mut all = qi.free_idle_pools();
        all.extend(pusher.join().unwrap());
        all.sort();
        assert_eq!(all, [1, 2]);
        assert_eq!(qi.pop_pool(), None);
    });
}
