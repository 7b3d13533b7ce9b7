//! A panic must never cross an `extern "C"` boundary, and must not end a process
//! silently. The crate is built with `panic = "abort"`; this module's hook writes one
//! emergency line to the error log first, naming the code that panicked (each entry
//! point from httpd or APR names itself with [`enter`]) and where, so the admin sees
//! why a child died before the parent logs its exit signal and replaces it.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Once;

use crate::ffi::log::level;

thread_local! {
    /// What the current thread runs, as named by the last [`enter`].
    static PLACE: Cell<&'static str> = const { Cell::new("httpd") };
}

/// Names the code the calling thread runs (an entry point from httpd or APR: "worker
/// thread", "listener thread", "the mpm hook"…), for the panic line, until the returned
/// guard drops; the guard then puts back the name it replaced. httpd calls our hooks on
/// our own threads (a worker runs the pre_connection hook, the server-status hook), and a
/// hook that renamed its thread for good made a later panic in the worker name the hook.
#[must_use = "the name holds only while the guard lives: bind it, `let _place = enter(..)`"]
pub fn enter(place: &'static str) -> Entered {
    Entered {
        previous: PLACE.with(|p| p.replace(place)),
        _this_thread: PhantomData,
    }
}

/// While it lives, the calling thread runs what [`enter`] named (see there).
pub struct Entered {
    previous: &'static str,
    /// The name is the creating thread's: the guard must drop there (not `Send`).
    _this_thread: PhantomData<*const ()>,
}

impl Drop for Entered {
    fn drop(&mut self) {
        PLACE.with(|p| p.set(self.previous));
    }
}

/// Installs the hook, once per process (it survives the DSO's reloads: `-z nodelete`).
pub fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let place = PLACE.with(|p| p.get());
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            crate::mpm_log!(
                level::EMERG,
                0,
                "RW00020: panic in the {place} of process {} at {at}: {msg}; the process aborts",
                std::process::id()
            );
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> &'static str {
        PLACE.with(|p| p.get())
    }

    #[test]
    fn a_hook_gives_its_thread_back_its_name() {
        let _worker = enter("worker thread");
        {
            let _hook = enter("pre_connection hook");
            assert_eq!(place(), "pre_connection hook");
        }
        assert_eq!(place(), "worker thread");
    }
}
