//! A panic must never cross an `extern "C"` boundary, and must not end a process
//! silently. The crate is built with `panic = "abort"`; this module's hook writes one
//! emergency line to the error log first, naming the code that panicked (each entry
//! point from httpd or APR names itself with [`enter`]) and where, so the admin sees
//! why a child died before the parent logs its exit signal and replaces it.

use std::cell::Cell;
use std::sync::Once;

use crate::ffi::log::level;

thread_local! {
    /// What the current thread runs, as named by the last [`enter`].
    static PLACE: Cell<&'static str> = const { Cell::new("httpd") };
}

/// Names the code the calling thread runs from now on (an entry point from httpd or APR:
/// "worker thread", "listener thread", "the mpm hook"…), for the panic line.
pub fn enter(place: &'static str) {
    PLACE.with(|p| p.set(place));
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
