//! A connection on its way through the child: accepted by the listener into a
//! transaction pool (ptrans), moved through the fdqueue to a worker, served by httpd's
//! core, closed, and its pool cleared for the next connection. The socket lives in the
//! pool, so the two travel together; after the listener hands a `Conn` over it has
//! nothing left of it.

use std::os::raw::{c_int, c_long};

use crate::ffi::conn::Connection;
use crate::ffi::pool::Pool;
use crate::ffi::socket::ClientSocket;
use crate::ffi::thread::CurrentThread;

/// An accepted connection: its client socket and the transaction pool it lives in.
#[derive(Debug)]
pub struct Conn {
    /// The client socket, allocated in `ptrans`.
    pub sock: ClientSocket,
    /// The connection's transaction pool.
    pub ptrans: Pool,
}

impl Conn {
    /// Closes the connection unserved (an immediate stop); returns its pool, cleared.
    pub fn drop_unserved(self) -> Pool {
        let Conn { sock, mut ptrans } = self;
        sock.close();
        ptrans.clear();
        ptrans
    }

    /// Serves the connection on `thread`, worker `t` of scoreboard slot `slot`, with
    /// connection id `id`: the core's connection hooks (the HTTP keep-alive loop
    /// included) and the lingering close. `publish_fd` is told the descriptor while the
    /// connection is served, its lingering close included (a client that keeps sending
    /// holds that for up to 30 s), and -1 once the close has freed the number, so an
    /// immediate stop can cut it anywhere. Returns the pool, cleared, for recycling.
    pub fn serve(
        self,
        thread: &CurrentThread,
        slot: c_int,
        t: c_int,
        id: c_long,
        publish_fd: impl Fn(c_int),
    ) -> Pool {
        let Conn { sock, mut ptrans } = self;
        publish_fd(sock.os_fd());
        if let Some(mut c) = Connection::create(&mut ptrans, &sock, slot, t, id) {
            c.process(thread, &sock);
            c.lingering_close();
        }
        // The number may already be another descriptor's here (the core closed ours): a
        // stop that read it just before this line shuts that one down, a race of a few
        // instructions that `ChildRuntime::signal_threads` accepts.
        publish_fd(-1);
        ptrans.clear();
        ptrans
    }
}
