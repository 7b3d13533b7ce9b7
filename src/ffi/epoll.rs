//! A parking child's event set (`RWorkerKeepAlive park`): one epoll instance that all its
//! idle workers wait on at once, each taking one event per wait. The kernel wakes one
//! waiter per event (epoll_wait queues its waiters exclusively), so the set itself is the
//! dispatcher: nobody hands a connection to anybody. Beside it, the two descriptors it
//! holds besides sockets: an eventfd (the bell that wakes every worker on a stop) and a
//! timerfd (the alarm for the earliest timeout).

use std::os::raw::c_int;
use std::os::unix::io::RawFd;

/// What a registration waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// Readable, level-triggered: the bell. While it is readable every wait returns it,
    /// one waiter after another.
    ReadLevel,
    /// The bucket's relay, which every accepting child's set holds: reported once per
    /// write to one set that has a waiter (edge-triggered, `EPOLLEXCLUSIVE`). Such a
    /// registration cannot be modified: deleting and adding it again polls it anew.
    ReadEdgeExclusive,
    /// A listening socket, which every child's set holds: a new connection wakes one
    /// waiter, in one set that has a waiter (`EPOLLEXCLUSIVE`), and the set reports it
    /// again while connections are queued (level-triggered). Deleting and adding it again
    /// polls it anew.
    ReadLevelExclusive,
    /// Readable once (then disarmed until modified): a parked connection waiting for its
    /// next request or for the client's FIN, or the alarm.
    ReadOnce,
    /// Writable once: a parked connection waiting to write.
    WriteOnce,
}

impl Interest {
    fn events(self) -> u32 {
        let e = match self {
            Interest::ReadLevel => libc::EPOLLIN,
            Interest::ReadEdgeExclusive => libc::EPOLLIN | libc::EPOLLET | libc::EPOLLEXCLUSIVE,
            Interest::ReadLevelExclusive => libc::EPOLLIN | libc::EPOLLEXCLUSIVE,
            Interest::ReadOnce => libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT,
            Interest::WriteOnce => libc::EPOLLOUT | libc::EPOLLONESHOT,
        };
        e as u32
    }
}

/// An epoll instance shared by a child's workers (closed on drop). Every call is a system
/// call on the kernel's own locked structure, so `&Epoll` may be used from any thread.
#[derive(Debug)]
pub struct Epoll {
    fd: RawFd,
}

impl Epoll {
    /// A new instance. Errors: errno.
    pub fn new() -> Result<Epoll, i32> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(errno());
        }
        Ok(Epoll { fd })
    }

    fn ctl(&self, op: c_int, fd: RawFd, events: u32, key: u64) -> Result<(), i32> {
        let mut ev = libc::epoll_event { events, u64: key };
        // SAFETY: a valid epoll fd and event struct; a stale or closed `fd` only errors.
        if unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) } < 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    /// Registers `fd` with `interest`, reported with `key`. Errors: errno.
    pub fn add(&self, fd: RawFd, interest: Interest, key: u64) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, interest.events(), key)
    }

    /// Changes `fd`'s registration (and re-arms a one-shot one). Errors: errno.
    pub fn modify(&self, fd: RawFd, interest: Interest, key: u64) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, interest.events(), key)
    }

    /// Removes `fd`. Errors: errno.
    pub fn delete(&self, fd: RawFd) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits for one event, without a time limit: its key and whether the peer hung up
    /// or the descriptor failed. None when a signal interrupted the wait.
    pub fn wait_one(&self) -> Option<(u64, bool)> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: one event's room, ours alone.
        let n = unsafe { libc::epoll_wait(self.fd, &mut ev, 1, -1) };
        if n != 1 {
            return None;
        }
        let hup = ev.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
        Some((ev.u64, hup))
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// An eventfd: readable from `signal` until `clear`.
#[derive(Debug)]
pub struct WakeFd(RawFd);

impl WakeFd {
    /// A non-blocking eventfd. Errors: errno.
    pub fn new() -> Result<WakeFd, i32> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            Err(errno())
        } else {
            Ok(WakeFd(fd))
        }
    }

    /// A descriptor of this process's own for the eventfd `fd` (close-on-exec). Errors:
    /// errno.
    ///
    /// # Safety
    /// `fd` is an open eventfd (see [`WakeFd::into_raw`]).
    pub unsafe fn duplicate(fd: RawFd) -> Result<WakeFd, i32> {
        // SAFETY: F_DUPFD_CLOEXEC only duplicates the descriptor.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            Err(errno())
        } else {
            Ok(WakeFd(dup))
        }
    }

    /// Gives up ownership: the descriptor stays open for the rest of the process (and in
    /// its children).
    pub fn into_raw(self) -> RawFd {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }

    /// The descriptor, to register with the epoll set.
    pub fn fd(&self) -> RawFd {
        self.0
    }

    /// Makes the descriptor readable (one write system call).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local to our eventfd; EAGAIN (counter full) is
        // harmless: it is readable already.
        unsafe { libc::write(self.0, &one as *const u64 as *const libc::c_void, 8) };
    }

    /// Consumes the pending signals and says how many there were (0: none).
    pub fn take(&self) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our non-blocking eventfd; on EAGAIN
        // (nothing pending) the local stays 0.
        unsafe { libc::read(self.0, &mut v as *mut u64 as *mut libc::c_void, 8) };
        v
    }

    /// Consumes the pending signals.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our non-blocking eventfd.
        unsafe { libc::read(self.0, &mut v as *mut u64 as *mut libc::c_void, 8) };
    }
}

impl rworker_queue::Bell for WakeFd {
    fn ring(&self) {
        self.signal();
    }
    fn clear(&self) {
        WakeFd::clear(self);
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Nanoseconds on CLOCK_MONOTONIC, the clock of [`TimerFd`] deadlines.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A timerfd on CLOCK_MONOTONIC, set to absolute deadlines: readable once the deadline
/// passed (at once for a deadline in the past) until `clear`.
#[derive(Debug)]
pub struct TimerFd(RawFd);

impl TimerFd {
    /// A non-blocking, disarmed timer. Errors: errno.
    pub fn new() -> Result<TimerFd, i32> {
        // SAFETY: plain syscall.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            Err(errno())
        } else {
            Ok(TimerFd(fd))
        }
    }

    /// The descriptor, to register with the epoll set.
    pub fn fd(&self) -> RawFd {
        self.0
    }

    /// Consumes the expirations counted so far.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our non-blocking timerfd.
        unsafe { libc::read(self.0, &mut v as *mut u64 as *mut libc::c_void, 8) };
    }
}

impl rworker_queue::Alarm for TimerFd {
    /// Fires at `deadline` ([`monotonic_ns`]), replacing the last setting. A deadline of 0
    /// would disarm the timer, so the earliest one set is 1 ns (long past: fires at once).
    fn set(&self, deadline: u64) {
        let deadline = deadline.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (deadline / 1_000_000_000) as libc::time_t,
                tv_nsec: (deadline % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: our timerfd and a valid itimerspec; the old value is not wanted.
        unsafe {
            libc::timerfd_settime(self.0, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut())
        };
    }
}

impl Drop for TimerFd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
