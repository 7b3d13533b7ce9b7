//! Typed access to httpd's shared scoreboard: one `process_score` per child slot and
//! one `worker_score` per (slot, thread). mod_status and the core read what we write
//! here, so statuses follow the stock worker's transitions (contract §3.5).

use std::os::raw::c_int;

use crate::sys;

/// Thread status values (`SERVER_*` in scoreboard.h).
pub mod status {
    use crate::sys;
    use std::os::raw::c_int;
    pub const DEAD: c_int = sys::SERVER_DEAD as c_int;
    pub const STARTING: c_int = sys::SERVER_STARTING as c_int;
    pub const READY: c_int = sys::SERVER_READY as c_int;
    pub const GRACEFUL: c_int = sys::SERVER_GRACEFUL as c_int;
}

/// The `process_score` of child slot `slot` (< ServerLimit).
pub fn process(slot: c_int) -> &'static mut sys::process_score {
    // SAFETY: the scoreboard exists from pre_mpm until exit and has server_limit
    // process slots; callers pass slot < ServerLimit. The parent is the only writer of
    // pid/generation; children write quiescing for their own slot.
    unsafe { &mut *(*sys::ap_scoreboard_image).parent.add(slot as usize) }
}

/// The `worker_score` of thread `thread` (< ThreadLimit) in slot `slot`.
pub fn worker(slot: c_int, thread: c_int) -> &'static mut sys::worker_score {
    // SAFETY: servers has server_limit rows of thread_limit entries; each entry is
    // written by its own thread (or by the parent once the child is reaped).
    unsafe { &mut *(*(*sys::ap_scoreboard_image).servers.add(slot as usize)).add(thread as usize) }
}

/// Reads a thread's status with volatile semantics (another process writes it).
pub fn thread_status(slot: c_int, thread: c_int) -> c_int {
    // SAFETY: see `worker`; a volatile read of a byte in shared memory.
    unsafe { std::ptr::read_volatile(&worker(slot, thread).status) as c_int }
}

/// Sets a thread's status through the core (`ap_update_child_status_from_indexes`),
/// which also keeps the extended-status fields consistent.
pub fn set_status(slot: c_int, thread: c_int, status: c_int) {
    // SAFETY: indexes are within the scoreboard; a null request is allowed.
    unsafe {
        sys::ap_update_child_status_from_indexes(slot, thread, status, std::ptr::null_mut());
    }
}

/// The global part (running generation, restart time).
pub fn global() -> &'static mut sys::global_score {
    // SAFETY: created by pre_mpm before the parent runs; lives until exit.
    unsafe { &mut *(*sys::ap_scoreboard_image).global }
}
