//! The listener's poll set when it parks connections: one epoll instance (listening
//! sockets, a wake eventfd, parked connections with EPOLLONESHOT, so a fired connection
//! is disarmed and has exactly one owner), and the eventfd workers write to wake it.

use std::os::unix::io::RawFd;

/// What a registration waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// Readable (or hung up): level-triggered, for the wake fd.
    ReadLevel,
    /// Readable, level-triggered, and only one of the epoll sets that wait on the same
    /// socket is woken (`EPOLLEXCLUSIVE`): for listening sockets that every child polls.
    /// Such a registration cannot be modified, only deleted and added again.
    ReadExclusive,
    /// Readable once: a parked connection waiting for its next request or the client's FIN.
    ReadOnce,
    /// Writable once: a parked connection waiting to write.
    WriteOnce,
    /// Nothing: registered but ignored (listening sockets while no worker is idle).
    None,
}

impl Interest {
    fn events(self) -> u32 {
        let e = match self {
            Interest::ReadLevel => libc::EPOLLIN,
            Interest::ReadExclusive => libc::EPOLLIN | libc::EPOLLEXCLUSIVE,
            Interest::ReadOnce => libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLONESHOT,
            Interest::WriteOnce => libc::EPOLLOUT | libc::EPOLLONESHOT,
            Interest::None => 0,
        };
        e as u32
    }
}

/// An epoll instance, owned by the listener thread (closed on drop).
#[derive(Debug)]
pub struct Epoll {
    fd: RawFd,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    /// A new instance returning up to `batch` events per wait. Errors: errno.
    pub fn new(batch: usize) -> Result<Epoll, i32> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(errno());
        }
        Ok(Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; batch.max(1)],
        })
    }

    fn ctl(&self, op: i32, fd: RawFd, interest: Interest, key: u64) -> Result<(), i32> {
        let mut ev = libc::epoll_event {
            events: interest.events(),
            u64: key,
        };
        // SAFETY: a valid epoll fd and event struct; a stale or closed `fd` only errors.
        if unsafe { libc::epoll_ctl(self.fd, op, fd, &mut ev) } < 0 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    /// Registers `fd` with `interest`, reported with `key`. Errors: errno.
    pub fn add(&self, fd: RawFd, interest: Interest, key: u64) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, interest, key)
    }

    /// Changes (and re-arms) `fd`'s registration. Errors: errno.
    pub fn modify(&self, fd: RawFd, interest: Interest, key: u64) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, interest, key)
    }

    /// Removes `fd`. Errors: errno.
    pub fn delete(&self, fd: RawFd) -> Result<(), i32> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, Interest::None, 0)
    }

    /// Waits up to `timeout_ms` (-1: forever) and returns the keys of the ready
    /// registrations with whether each hung up or failed. Interrupted: none.
    pub fn wait(&mut self, timeout_ms: i32) -> impl Iterator<Item = (u64, bool)> + '_ {
        // SAFETY: the buffer holds events.len() entries, exclusively borrowed.
        let n = unsafe {
            libc::epoll_wait(
                self.fd,
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                timeout_ms,
            )
        };
        let n = n.max(0) as usize;
        self.events[..n].iter().map(|e| {
            let hup = e.events & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0;
            (e.u64, hup)
        })
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.fd) };
    }
}

/// An eventfd: workers `signal` it, the listener's epoll sees it readable, and the
/// listener `clear`s it.
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

    /// Consumes the pending signals.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local from our non-blocking eventfd.
        unsafe { libc::read(self.0, &mut v as *mut u64 as *mut libc::c_void, 8) };
    }
}

impl Drop for WakeFd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}
