//! Serving one accepted connection through httpd's core: a scoreboard handle, the
//! `conn_rec` (`ap_run_create_connection`), the protocol's process_connection hooks
//! (the HTTP keep-alive loop included) and the lingering close — as worker.c's
//! `process_socket` does.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr::{self, NonNull};

use crate::ffi::pool::Pool;
use crate::ffi::socket::ClientSocket;
use crate::ffi::thread::CurrentThread;
use crate::sys;

/// A connection the core created, alive until [`Connection::lingering_close`]; it lives
/// in `ptrans`, which stays borrowed for as long.
pub struct Connection<'p> {
    c: NonNull<sys::conn_rec>,
    _ptrans: std::marker::PhantomData<&'p mut Pool>,
}

/// The core's connection for `sock` in `ptrans` (`p`), scored in (`slot`, `thread`) with id
/// `id`: a scoreboard handle, a bucket allocator, `ap_run_create_connection`. None when a
/// create_connection hook refused it (the core then closed the socket).
///
/// # Safety
/// `p` is a live pool that the caller holds exclusively and that outlives the connection;
/// `sock` was accepted into it; `slot` and `thread` are the calling worker's indexes.
pub(crate) unsafe fn create_conn_rec(
    p: *mut sys::apr_pool_t,
    sock: &ClientSocket,
    slot: c_int,
    thread: c_int,
    id: std::os::raw::c_long,
) -> Option<(NonNull<sys::conn_rec>, *mut sys::ap_sb_handle_t)> {
    // SAFETY: the caller's contract; the core's hooks take these as httpd's own MPMs pass
    // them.
    unsafe {
        let mut sbh: *mut sys::ap_sb_handle_t = ptr::null_mut();
        sys::ap_create_sb_handle(&mut sbh, p, slot, thread);
        let ba = sys::apr_bucket_alloc_create(p);
        let c = sys::ap_run_create_connection(
            p,
            sys::ap_server_conf,
            sock.as_ptr(),
            id,
            sbh as *mut c_void,
            ba,
        );
        NonNull::new(c).map(|c| (c, sbh))
    }
}

impl<'p> Connection<'p> {
    /// Creates the connection for `sock` in `ptrans`, scored in (`slot`, `thread`) with
    /// connection id `id`; `None` when a create_connection hook refused it (the core then
    /// closed the socket).
    pub fn create(
        ptrans: &'p mut Pool,
        sock: &ClientSocket,
        slot: c_int,
        thread: c_int,
        id: std::os::raw::c_long,
    ) -> Option<Connection<'p>> {
        // SAFETY: ptrans is borrowed exclusively for the connection's life; sock was
        // accepted into it; slot and thread are this worker's scoreboard indexes.
        let (c, _) = unsafe { create_conn_rec(ptrans.as_ptr(), sock, slot, thread, id)? };
        Some(Connection {
            c,
            _ptrans: std::marker::PhantomData,
        })
    }

    /// Runs the connection's protocol (`ap_process_connection`) on `thread`, which
    /// modules see as `c->current_thread`.
    pub fn process(&mut self, thread: &CurrentThread, sock: &ClientSocket) {
        // SAFETY: the conn_rec is live (it is in the borrowed ptrans) and used by this
        // thread alone; the csd argument is the connection's socket.
        unsafe {
            (*self.c.as_ptr()).current_thread = thread.as_ptr();
            sys::ap_process_connection(self.c.as_ptr(), sock.as_ptr() as *mut c_void);
        }
    }

    /// Closes the connection the way the core does: flush, shut down our side, read
    /// what the client still sends for a while, close (`ap_lingering_close`).
    pub fn lingering_close(self) {
        // SAFETY: the conn_rec is live; it is not used afterwards (consumed).
        unsafe { sys::ap_lingering_close(self.c.as_ptr()) };
    }
}
