//! The client socket of an accepted connection (`apr_socket_t`, allocated in the
//! connection's transaction pool).

use std::os::unix::io::RawFd;
use std::ptr::NonNull;

use crate::sys;

/// An accepted client socket. It lives in its connection's ptrans, so it travels with
/// that pool and is not used after the pool is cleared.
#[derive(Debug)]
pub struct ClientSocket(NonNull<sys::apr_socket_t>);

// SAFETY: the socket moves with its ptrans from the listener to one worker (see Pool's
// Send); it is never shared (not Sync, not Copy).
unsafe impl Send for ClientSocket {}

impl ClientSocket {
    /// Takes ownership of an accepted socket; `None` for null.
    ///
    /// # Safety
    /// `p` is an open socket that nobody else uses, allocated in the pool it travels with.
    pub unsafe fn from_raw(p: *mut sys::apr_socket_t) -> Option<ClientSocket> {
        NonNull::new(p).map(ClientSocket)
    }

    /// The raw pointer, for the core's connection hooks while `self` is borrowed.
    pub fn as_ptr(&self) -> *mut sys::apr_socket_t {
        self.0.as_ptr()
    }

    /// Gives up ownership (to httpd's fdqueue).
    pub fn into_raw(self) -> *mut sys::apr_socket_t {
        self.0.as_ptr()
    }

    /// The descriptor (for an immediate stop's shutdown(2) from another thread).
    pub fn os_fd(&self) -> RawFd {
        let mut fd: sys::apr_os_sock_t = -1;
        // SAFETY: the socket is live while borrowed.
        unsafe { sys::apr_os_sock_get(&mut fd, self.as_ptr()) };
        fd
    }

    /// Closes the socket unserved.
    pub fn close(self) {
        // SAFETY: we own the open socket; it is not used afterwards (consumed).
        unsafe { sys::apr_socket_close(self.as_ptr()) };
    }
}

/// Shuts down both directions of the socket with descriptor `fd`, so a thread blocked
/// reading or writing it returns at once (an immediate stop cutting a connection).
/// Touches no memory; on a stale number it fails with ENOTSOCK or hits a socket that the
/// immediate stop cuts anyway.
pub fn shutdown_fd(fd: RawFd) {
    // SAFETY: shutdown(2) takes a number, not memory.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}
