//! Stress tests of the [`Inbox`] on real threads, with a listener that really sleeps elsewhere:
//! in `poll(2)` on a Linux eventfd, as the listener will in `epoll_wait`. Millions of parked
//! items, exactly once and in order per producer, no lost wake-up (the listener never sleeps
//! 10 s while pushes are outstanding), at most one `Wake::Needed` per announced sleep, and
//! close racing pushes loses nothing.
//! `cargo test -p rworker-queue --release --test stress_inbox` (a few seconds on 2 cores).
#![cfg(not(loom))]

use rworker_queue::{Inbox, Wake};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

/// Fewer items in debug builds, where everything is ~10x slower.
fn scaled(n: usize) -> usize {
    if cfg!(debug_assertions) {
        n / 20
    } else {
        n
    }
}

/// A Linux eventfd: what the listener's `epoll_wait` is woken by.
struct EventFd(libc::c_int);

impl EventFd {
    fn new() -> Self {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
        EventFd(fd)
    }

    /// A pusher that got `Wake::Needed`.
    fn write(&self) {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a live u64 to our own fd.
        let n = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
        assert_eq!(n, 8, "eventfd write: {}", std::io::Error::last_os_error());
    }

    /// Sleeps until the eventfd is readable (or `limit` passes: returns false).
    fn poll(&self, limit: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.0,
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, limit.as_millis() as libc::c_int) };
            if n >= 0 {
                return n == 1;
            }
            assert_eq!(
                std::io::Error::last_os_error().kind(),
                std::io::ErrorKind::Interrupted
            );
        }
    }

    /// Resets the counter (the listener, between `awake` and its next `prepare_to_sleep`).
    fn read(&self) {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our own fd, which poll said is readable.
        let n = unsafe { libc::read(self.0, (&mut count as *mut u64).cast(), 8) };
        assert_eq!(n, 8, "eventfd read: {}", std::io::Error::last_os_error());
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// What the threads share.
struct World {
    inbox: Inbox<(usize, usize)>,
    efd: EventFd,
    /// `Wake::Needed` answers (to pushes and to close).
    wakes: AtomicUsize,
}

impl World {
    fn wake(&self, wake: Wake) {
        if wake == Wake::Needed {
            self.wakes.fetch_add(1, Ordering::Relaxed);
            self.efd.write();
        }
    }
}

/// What the listener saw.
#[derive(Debug)]
struct Listened {
    /// Per producer, how many items arrived (each producer's items came as 0, 1, 2, ...).
    received: Vec<usize>,
    /// `prepare_to_sleep` calls (announced sleeps).
    prepares: usize,
    /// Real sleeps in `poll`.
    sleeps: usize,
}

/// The listener: drain, check per-producer order, sleep on the eventfd, until the inbox is
/// closed and drained. Fails if it sleeps 10 s while pushes are outstanding.
fn listen(world: &World, producers: usize) -> Listened {
    let mut consumer = world.inbox.consumer().expect("one consumer");
    let mut received = vec![0; producers];
    let (mut prepares, mut sleeps) = (0, 0);
    loop {
        for (p, i) in consumer.drain() {
            assert_eq!(i, received[p], "producer {p}: out of order or duplicated");
            received[p] += 1;
        }
        if consumer.is_finished() {
            break;
        }
        prepares += 1;
        if consumer.prepare_to_sleep() {
            sleeps += 1;
            assert!(
                world.efd.poll(Duration::from_secs(10)),
                "listener asleep for 10 s with pushes outstanding: lost wake-up ({received:?})"
            );
            consumer.awake();
            world.efd.read();
        }
    }
    Listened {
        received,
        prepares,
        sleeps,
    }
}

/// Several workers park millions of items with a listener that sleeps on an eventfd: each
/// item arrives exactly once, in order per worker, nobody hangs, at most one wake per sleep.
/// Capacity 8 exercises the full-inbox wait; 1024 the common case.
#[test]
fn parked_items_arrive_exactly_once_in_order() {
    const PRODUCERS: usize = 4;
    let per_producer = scaled(500_000);
    for capacity in [8, 1024] {
        let world = Arc::new(World {
            inbox: Inbox::new(capacity),
            efd: EventFd::new(),
            wakes: AtomicUsize::new(0),
        });
        let start = Instant::now();
        let barrier = Arc::new(Barrier::new(PRODUCERS + 1));
        let workers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (world, barrier) = (Arc::clone(&world), Arc::clone(&barrier));
                thread::spawn(move || {
                    barrier.wait();
                    for i in 0..per_producer {
                        match world.inbox.push((p, i)) {
                            Ok(wake) => world.wake(wake),
                            Err(_) => panic!("push refused before close"),
                        }
                    }
                })
            })
            .collect();
        let w2 = Arc::clone(&world);
        let listener = thread::spawn(move || listen(&w2, PRODUCERS));
        barrier.wait();
        for h in workers {
            h.join().unwrap();
        }
        world.wake(world.inbox.close());
        let seen = listener.join().unwrap();
        let wakes = world.wakes.load(Ordering::Relaxed);
        eprintln!(
            "inbox capacity {capacity}: {} items in {:?}, {} prepares, {} sleeps, {wakes} wakes",
            PRODUCERS * per_producer,
            start.elapsed(),
            seen.prepares,
            seen.sleeps
        );
        assert_eq!(seen.received, vec![per_producer; PRODUCERS]);
        assert!(wakes <= seen.prepares, "{wakes} wakes for {seen:?}");
    }
}

/// close racing pushes: workers push until refused, the child closes at a random moment; every
/// accepted item is drained (in order), no refused one appears, the listener finishes.
#[test]
fn close_racing_pushes_loses_nothing() {
    const PRODUCERS: usize = 3;
    let rounds = scaled(400);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..rounds {
        // xorshift: how long the closer waits (0-255 spins) and the capacity (1-4).
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let world = Arc::new(World {
            inbox: Inbox::new(1 + (seed >> 8) as usize % 4),
            efd: EventFd::new(),
            wakes: AtomicUsize::new(0),
        });
        let workers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let world = Arc::clone(&world);
                thread::spawn(move || {
                    let mut i = 0;
                    while let Ok(wake) = world.inbox.push((p, i)) {
                        world.wake(wake);
                        i += 1;
                    }
                    i
                })
            })
            .collect();
        let w2 = Arc::clone(&world);
        let listener = thread::spawn(move || listen(&w2, PRODUCERS));
        for _ in 0..(seed & 0xff) {
            std::hint::spin_loop();
        }
        world.wake(world.inbox.close());
        let accepted: Vec<usize> = workers.into_iter().map(|h| h.join().unwrap()).collect();
        let seen = listener.join().unwrap();
        assert_eq!(seen.received, accepted, "round {round}");
        assert!(world.wakes.load(Ordering::Relaxed) <= seen.prepares);
    }
}
