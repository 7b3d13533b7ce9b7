//! What a parking child does with a connection in each of httpd's connection states: the
//! state its protocol leaves it in when it returns to the MPM (`conn_state_e`, normalised
//! as event normalises it). One match, [`rule`], mirrored by the table "httpd's
//! connection states in park mode" in docs/design.md:
//!
//! | state | waits | for | how long | a graceful stop |
//! |---|---|---|---|---|
//! | READ_REQUEST_LINE (a head arriving) | parked | readable | mod_reqtimeout's header stage, else Timeout per read | lets it finish |
//! | WRITE_COMPLETION | parked | writable (readable: TLS wants to read) | the vhost's Timeout | lets it finish |
//! | KEEPALIVE | parked | readable | the vhost's KeepAliveTimeout | 1 s for one more request |
//! | ASYNC_WAITIO | parked | readable or writable, as the module asked | the vhost's Timeout | keeps its Timeout |
//! | LINGER | parked | readable (the client's FIN) | 2 s (short) or 30 s | 2 s |
//! | SUSPENDED | with the module | - | - | not waited for |
//!
//! "The vhost" is the one `crate::ffi::vhost` chose for the connection (event's rule). An
//! immediate stop ends every one of them at once.
//!
//! The worker that holds a connection first does what it can without waiting (a
//! non-blocking flush, a pipelined request already read, the client's FIN already there);
//! only what must wait goes where [`rule`] says, for what it says and as long as it says:
//! `crate::mpm::worker` routes on the rule and `ParkState` takes its interest, length and
//! stop wait from it, so this table is the behaviour, not a comment beside it. Pure,
//! unit-tested.

use std::time::Duration;

use crate::ffi::epoll::Interest;

/// Lingering close after the client was told we are done (httpd's `SECONDS_TO_LINGER`).
pub const SHORT_LINGER: Duration = Duration::from_secs(2);
/// Lingering close at most (httpd's `MAX_SECS_TO_LINGER`).
pub const LINGER: Duration = Duration::from_secs(30);
/// A stopping child's keep-alive connections wait at most this long for their next
/// request (less if their KeepAliveTimeout ends sooner). A client in the middle of its
/// requests sends the next one within milliseconds of a response; one quiet for a second
/// is idle, and is closed as KeepAliveTimeout would close it. Closing at once instead cut
/// the request a busy client was sending: 82-97 wrk read errors per graceful restart under
/// `wrk -c100` keep-alive (bench/graceful/run.sh, 2026-12-02).
pub const STOP_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// httpd's connection states, as the MPM acts on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// `CONN_STATE_READ_REQUEST_LINE`: a request head is arriving, read without blocking
    /// into the connection's buffer (`crate::ffi::head_buffer`); it waits for its next
    /// bytes until the head is due (`crate::head::clock`).
    ReadHead,
    /// `CONN_STATE_WRITE_COMPLETION`: the response is written out (KEEPALIVE comes here
    /// first, as under event); `read` when TLS must read before it can write on.
    WriteCompletion { read: bool },
    /// `CONN_STATE_KEEPALIVE`: between requests.
    KeepAlive,
    /// `CONN_STATE_ASYNC_WAITIO`: a module (h2) waits for the socket, readable (`read`) or
    /// writable.
    WaitIo { read: bool },
    /// `CONN_STATE_LINGER`: lingering close, reading what the client still sends until it
    /// closes; `short` after the server ended the connection itself.
    Linger { short: bool },
    /// `CONN_STATE_SUSPENDED`: a module took the connection over.
    Suspended,
}

/// Where a connection waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Parked in the child's event set, without a thread.
    Set,
    /// With the module that took it; the MPM forgets it.
    Module,
}

/// How long it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Its vhost's KeepAliveTimeout.
    KeepAliveTimeout,
    /// Its vhost's Timeout.
    Timeout,
    /// A fixed length.
    Fixed(Duration),
    /// The head's own deadline (`crate::head::clock`), in rounds.
    HeadDeadline,
    /// The MPM does not time it.
    Unbounded,
}

/// What a graceful stop does to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnStop {
    /// Nothing: it ends as it would have.
    Keeps,
    /// Its wait is cut to at most this.
    Shortens(Duration),
    /// It is not the child's any more: the stop does not wait for it.
    NotWaitedFor,
}

/// What the MPM does with a connection in one state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub place: Place,
    /// What the socket is waited on for (None: nothing).
    pub interest: Option<Interest>,
    pub wait: Wait,
    pub on_stop: OnStop,
}

/// The table (module doc).
pub fn rule(state: ConnState) -> Rule {
    use ConnState::*;
    match state {
        ReadHead => Rule {
            place: Place::Set,
            interest: Some(Interest::ReadOnce),
            wait: Wait::HeadDeadline,
            on_stop: OnStop::Keeps,
        },
        WriteCompletion { read } => Rule {
            place: Place::Set,
            interest: Some(either(read)),
            wait: Wait::Timeout,
            on_stop: OnStop::Keeps,
        },
        KeepAlive => Rule {
            place: Place::Set,
            interest: Some(Interest::ReadOnce),
            wait: Wait::KeepAliveTimeout,
            on_stop: OnStop::Shortens(STOP_KEEP_ALIVE),
        },
        WaitIo { read } => Rule {
            place: Place::Set,
            interest: Some(either(read)),
            wait: Wait::Timeout,
            on_stop: OnStop::Keeps,
        },
        Linger { short } => Rule {
            place: Place::Set,
            interest: Some(Interest::ReadOnce),
            wait: Wait::Fixed(if short { SHORT_LINGER } else { LINGER }),
            on_stop: OnStop::Shortens(SHORT_LINGER),
        },
        Suspended => Rule {
            place: Place::Module,
            interest: None,
            wait: Wait::Unbounded,
            on_stop: OnStop::NotWaitedFor,
        },
    }
}

/// Readable (`read`) or writable, once.
fn either(read: bool) -> Interest {
    if read {
        Interest::ReadOnce
    } else {
        Interest::WriteOnce
    }
}

impl Rule {
    /// The wait's length, given the vhost's (KeepAliveTimeout, Timeout) and, for a head,
    /// the time left until it is due.
    pub fn length(
        self,
        keep_alive_timeout: Duration,
        timeout: Duration,
        head_left: Duration,
    ) -> Option<Duration> {
        match self.wait {
            Wait::KeepAliveTimeout => Some(keep_alive_timeout),
            Wait::Timeout => Some(timeout),
            Wait::Fixed(d) => Some(d),
            Wait::HeadDeadline => Some(head_left),
            Wait::Unbounded => None,
        }
    }

    /// The wait a graceful stop leaves it, if it shortens it.
    pub fn stop_wait(self) -> Option<Duration> {
        match self.on_stop {
            OnStop::Shortens(d) => Some(d),
            OnStop::Keeps | OnStop::NotWaitedFor => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_states_wait_in_the_set_under_their_vhosts_timeouts() {
        let (ka, t) = (Duration::from_secs(5), Duration::from_secs(60));
        let r = rule(ConnState::KeepAlive);
        assert_eq!(
            (r.place, r.length(ka, t, Duration::ZERO)),
            (Place::Set, Some(ka))
        );
        assert_eq!(r.stop_wait(), Some(STOP_KEEP_ALIVE));
        let r = rule(ConnState::WaitIo { read: false });
        assert_eq!(r.interest, Some(Interest::WriteOnce));
        assert_eq!(
            (r.length(ka, t, Duration::ZERO), r.stop_wait()),
            (Some(t), None)
        );
        let r = rule(ConnState::Linger { short: true });
        assert_eq!(r.length(ka, t, Duration::ZERO), Some(SHORT_LINGER));
        assert_eq!(
            rule(ConnState::Linger { short: false }).length(ka, t, Duration::ZERO),
            Some(LINGER)
        );
        assert_eq!(r.stop_wait(), Some(SHORT_LINGER));
    }

    #[test]
    fn write_completion_parks_under_timeout_and_a_suspended_connection_is_the_modules() {
        let r = rule(ConnState::WriteCompletion { read: false });
        assert_eq!(
            (r.place, r.interest, r.wait, r.on_stop),
            (
                Place::Set,
                Some(Interest::WriteOnce),
                Wait::Timeout,
                OnStop::Keeps
            )
        );
        // TLS that must read on before it can write (the core's sense).
        let r = rule(ConnState::WriteCompletion { read: true });
        assert_eq!(r.interest, Some(Interest::ReadOnce));
        let r = rule(ConnState::Suspended);
        assert_eq!((r.place, r.interest), (Place::Module, None));
        assert_eq!(r.on_stop, OnStop::NotWaitedFor);
        // A head: readable, until its own deadline; a graceful stop lets it finish.
        let r = rule(ConnState::ReadHead);
        let (ka, t, left) = (
            Duration::from_secs(5),
            Duration::from_secs(60),
            Duration::from_secs(7),
        );
        assert_eq!(
            (r.place, r.interest),
            (Place::Set, Some(Interest::ReadOnce))
        );
        assert_eq!(
            (r.length(ka, t, left), r.on_stop),
            (Some(left), OnStop::Keeps)
        );
    }
}
