//! httpd's shared scoreboard: one `process_score` per child slot, one `worker_score`
//! per (slot, thread), and the global part. mod_status and the core read what we write
//! here, and other processes write it too, so every access is a volatile copy in or out
//! through a raw pointer inside this module, bounds-checked against the scoreboard's own
//! ServerLimit and ThreadLimit. Nothing hands out a reference into it.

use std::os::raw::c_int;
use std::ptr::{self, addr_of, addr_of_mut};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::ffi::pool::Pool;
use crate::sys;

/// Thread status values (`SERVER_*` in scoreboard.h).
pub mod status {
    use crate::sys;
    use std::os::raw::c_int;
    pub const DEAD: c_int = sys::SERVER_DEAD as c_int;
    pub const STARTING: c_int = sys::SERVER_STARTING as c_int;
    pub const READY: c_int = sys::SERVER_READY as c_int;
    pub const GRACEFUL: c_int = sys::SERVER_GRACEFUL as c_int;
    pub const BUSY_READ: c_int = sys::SERVER_BUSY_READ as c_int;
    pub const BUSY_WRITE: c_int = sys::SERVER_BUSY_WRITE as c_int;
    pub const BUSY_KEEPALIVE: c_int = sys::SERVER_BUSY_KEEPALIVE as c_int;
    pub const CLOSING: c_int = sys::SERVER_CLOSING as c_int;
}

/// The fields of a child slot's `process_score` that the MPM uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessSlot {
    /// The child's pid, 0 when the slot is free.
    pub pid: sys::pid_t,
    /// The generation the child belongs to.
    pub generation: sys::ap_generation_t,
    /// The child stopped accepting and is exiting.
    pub quiescing: bool,
    /// The listener bucket the child serves.
    pub bucket: c_int,
}

fn image() -> *mut sys::scoreboard {
    // SAFETY: reading httpd's global pointer, set by pre_mpm in the parent before the MPM
    // runs and inherited by children; never changed while the MPM runs.
    let sb = unsafe { sys::ap_scoreboard_image };
    assert!(
        !sb.is_null(),
        "rworker: scoreboard used before pre_mpm created it"
    );
    sb
}

fn process_ptr(slot: c_int) -> *mut sys::process_score {
    let sb = image();
    let limit = slots();
    assert!(
        (0..limit).contains(&slot),
        "rworker: scoreboard slot {slot} out of 0..{limit}"
    );
    // SAFETY: `parent` has server_limit entries and slot is within them (checked).
    unsafe { (*sb).parent.add(slot as usize) }
}

fn worker_ptr(slot: c_int, thread: c_int) -> *mut sys::worker_score {
    let sb = image();
    // SAFETY: as in process_ptr.
    let (slots, threads) = unsafe {
        let g = (*sb).global;
        (
            ptr::read_volatile(addr_of!((*g).server_limit)),
            ptr::read_volatile(addr_of!((*g).thread_limit)),
        )
    };
    assert!(
        (0..slots).contains(&slot) && (0..threads).contains(&thread),
        "rworker: scoreboard entry ({slot}, {thread}) out of {slots} x {threads}"
    );
    // SAFETY: `servers` has server_limit rows of thread_limit entries (checked above).
    unsafe { (*(*sb).servers.add(slot as usize)).add(thread as usize) }
}

/// A copy of child slot `slot` (< ServerLimit).
pub fn process(slot: c_int) -> ProcessSlot {
    let p = process_ptr(slot);
    // SAFETY: p points into the live scoreboard; volatile reads, as other processes write.
    unsafe {
        ProcessSlot {
            pid: ptr::read_volatile(addr_of!((*p).pid)),
            generation: ptr::read_volatile(addr_of!((*p).generation)),
            quiescing: ptr::read_volatile(addr_of!((*p).quiescing)) != 0,
            bucket: ptr::read_volatile(addr_of!((*p).bucket)),
        }
    }
}

/// Child slots in the scoreboard (ServerLimit at first start).
pub fn slots() -> c_int {
    let sb = image();
    // SAFETY: the global part exists with the scoreboard; server_limit is written once.
    unsafe { ptr::read_volatile(addr_of!((*(*sb).global).server_limit)) }
}

/// The open connections of `slot`'s child (`ConnsTotal`'s share).
pub fn connections(slot: c_int) -> u32 {
    // Relaxed: a statistic and a census figure, ordered with nothing else.
    async_count(slot, AsyncField::Connections, |c| c.load(Ordering::Relaxed))
}

/// A count in a child's `process_score` that its threads change as its connections open,
/// park, resume and close, while mod_status (in any child) and the parent's census read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncField {
    /// Open connections (`ConnsTotal`).
    Connections,
    /// Parked in write completion (`ConnsAsyncWriting`).
    WriteCompletion,
    /// Parked between requests (`ConnsAsyncKeepAlive`).
    KeepAlive,
    /// Parked in a lingering close (`ConnsAsyncClosing`).
    LingeringClose,
    /// Parked while a module waits for the socket (`ConnsAsyncWaitIO`).
    WaitIo,
    /// Taken over by a module (`CONN_STATE_SUSPENDED`).
    Suspended,
}

/// Writes `value` into `field` of `slot`'s child (its owner's count, see
/// `crate::mpm::row_counts`: written whole, never added to, so two processes that share a
/// slot cannot wrap each other's counts).
pub fn set_async(slot: c_int, field: AsyncField, value: u32) {
    // SeqCst: the row half of row_counts' publish-and-recheck, which argues the last
    // store of a count in the row is its owner's latest value.
    async_count(slot, field, |c| c.store(value, Ordering::SeqCst));
}

/// The pid `slot` names now (0: free).
pub fn pid_of(slot: c_int) -> sys::pid_t {
    let p = process_ptr(slot);
    // SAFETY: p points into the live scoreboard; a volatile read of an aligned int.
    unsafe { ptr::read_volatile(addr_of!((*p).pid)) }
}

/// Says whether `slot`'s child accepts new connections (mod_status's "accepting" column).
pub fn set_not_accepting(slot: c_int, not: bool) {
    let p = process_ptr(slot);
    // SAFETY: p points into the live scoreboard; a child writes this int of its own slot,
    // and an aligned int store is not seen torn.
    unsafe { ptr::write_volatile(addr_of_mut!((*p).not_accepting), not as _) };
}

/// Runs `f` on `field` of `slot`: fields that several threads of a child write while
/// others read them, so every access of this crate goes through this atomic view.
fn async_count<R>(slot: c_int, field: AsyncField, f: impl FnOnce(&AtomicU32) -> R) -> R {
    let p = process_ptr(slot);
    // SAFETY: p points into the live scoreboard for the duration of the call; each field
    // is an aligned u32 that this crate accesses only through this view (mod_status reads
    // them as plain ints; an aligned 32-bit store is never seen torn).
    unsafe {
        let field = match field {
            AsyncField::Connections => addr_of_mut!((*p).connections),
            AsyncField::WriteCompletion => addr_of_mut!((*p).write_completion),
            AsyncField::KeepAlive => addr_of_mut!((*p).keep_alive),
            AsyncField::LingeringClose => addr_of_mut!((*p).lingering_close),
            #[cfg(httpd_score_wait_io)]
            AsyncField::WaitIo => addr_of_mut!((*p).wait_io),
            // Before 2.4.63 the field does not exist (the next slot's pid follows), and no
            // connection waits for I/O: the count stays 0 in a sink of this process.
            #[cfg(not(httpd_score_wait_io))]
            AsyncField::WaitIo => {
                static NO_WAIT_IO: AtomicU32 = AtomicU32::new(0);
                return f(&NO_WAIT_IO);
            }
            AsyncField::Suspended => addr_of_mut!((*p).suspended),
        };
        f(AtomicU32::from_ptr(field))
    }
}

/// Records a freshly forked child in `slot` (the parent, after fork).
pub fn claim_slot(slot: c_int, pid: sys::pid_t, generation: sys::ap_generation_t, bucket: c_int) {
    let p = process_ptr(slot);
    // SAFETY: p points into the live scoreboard; the parent is the only writer of these
    // fields of a slot it hands out.
    unsafe {
        ptr::write_volatile(addr_of_mut!((*p).quiescing), 0);
        ptr::write_volatile(addr_of_mut!((*p).bucket), bucket);
        ptr::write_volatile(addr_of_mut!((*p).pid), pid);
        ptr::write_volatile(addr_of_mut!((*p).generation), generation);
    }
}

/// Frees `slot` after its child was reaped (pid 0, not quiescing).
pub fn free_slot(slot: c_int) {
    let p = process_ptr(slot);
    // SAFETY: as in claim_slot.
    unsafe {
        ptr::write_volatile(addr_of_mut!((*p).pid), 0);
        ptr::write_volatile(addr_of_mut!((*p).quiescing), 0);
    }
}

/// Marks `slot`'s child as quiescing (its listener stopped accepting).
pub fn set_quiescing(slot: c_int) {
    let p = process_ptr(slot);
    // SAFETY: as in claim_slot; a child writes this field of its own slot only.
    unsafe { ptr::write_volatile(addr_of_mut!((*p).quiescing), 1) };
}

/// The status of thread `thread` of `slot`.
pub fn thread_status(slot: c_int, thread: c_int) -> c_int {
    let w = worker_ptr(slot, thread);
    // SAFETY: w points into the live scoreboard; a volatile read of a byte.
    unsafe { ptr::read_volatile(addr_of!((*w).status)) as c_int }
}

/// Sets a thread's status through the core (`ap_update_child_status_from_indexes`),
/// which also keeps the extended-status fields consistent.
pub fn set_thread_status(slot: c_int, thread: c_int, status: c_int) {
    worker_ptr(slot, thread); // bounds check
                              // SAFETY: indexes are within the scoreboard (checked); a null request is allowed.
    unsafe {
        sys::ap_update_child_status_from_indexes(slot, thread, status, ptr::null_mut());
    }
}

/// Records which process, thread and generation hold the worker entry (the worker
/// thread itself, as it starts).
pub fn register_worker(
    slot: c_int,
    thread: c_int,
    pid: sys::pid_t,
    tid: sys::apr_os_thread_t,
    generation: sys::ap_generation_t,
) {
    let w = worker_ptr(slot, thread);
    // SAFETY: w points into the live scoreboard; each entry is written by its own thread.
    unsafe {
        ptr::write_volatile(addr_of_mut!((*w).pid), pid);
        ptr::write_volatile(addr_of_mut!((*w).tid), tid);
        ptr::write_volatile(addr_of_mut!((*w).generation), generation);
    }
}

/// Publishes the generation of the children the parent runs now.
pub fn set_running_generation(generation: sys::ap_generation_t) {
    let sb = image();
    // SAFETY: the global part lives with the scoreboard; the parent is its only writer.
    unsafe { ptr::write_volatile(addr_of_mut!((*(*sb).global).running_generation), generation) };
}

/// Re-attaches a forked child to the shared scoreboard (`ap_reopen_scoreboard`).
pub fn reopen(pchild: &Pool) {
    // SAFETY: pchild is live; the call only re-maps shared memory for this process.
    unsafe { sys::ap_reopen_scoreboard(pchild.as_ptr(), ptr::null_mut(), 0) };
}
