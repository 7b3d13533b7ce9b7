//! Worker threads: announce idleness (recycling the last transaction pool), pop an
//! accepted connection from the fdqueue, run it through httpd's connection hooks,
//! clear its pool (worker.c `worker_thread`, `process_socket`).

use std::ffi::c_void;
use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::Ordering;

use rworker_queue::PopError;

use crate::apr::pool::Pool;
use crate::apr::thread;
use crate::mpm::child::{unblock_for_this_thread, Accepted, WorkerArgs, WORKER_SIGNAL};
use crate::mpm::config::settings;
use crate::mpm::scoreboard::{self, status};
use crate::sys;

/// Worker thread entry point (`data` is a boxed [`WorkerArgs`]).
///
/// # Safety
/// Called by APR on a new thread with the `WorkerArgs` box the starter leaked for it.
pub unsafe extern "C" fn main(thd: *mut sys::apr_thread_t, data: *mut c_void) -> *mut c_void {
    // SAFETY: the starter boxed the args for this thread and handed over ownership.
    let args = unsafe { Box::from_raw(data as *mut WorkerArgs) };
    let (rt, t) = (args.rt, args.thread_num);
    let entry = &rt.workers[t as usize];
    entry
        .os_thread
        .store(thread::current_os_thread() as usize, Ordering::SeqCst);
    {
        let ws = scoreboard::worker(rt.slot, t);
        ws.pid = std::process::id() as sys::pid_t;
        // SAFETY: trivially safe APR call.
        ws.tid = unsafe { sys::apr_os_thread_current() };
        ws.generation = rt.generation;
    }
    unblock_for_this_thread(WORKER_SIGNAL);

    let mut last_ptrans: Option<Pool> = None;
    let mut is_idle = false;
    while !rt.workers_may_exit.load(Ordering::SeqCst) {
        if !is_idle {
            // Recycle the previous connection's pool as we announce ourselves, so the
            // listener finds it for the connection it accepts for us.
            rt.handoff.set_idle(last_ptrans.take());
            is_idle = true;
        }
        scoreboard::set_status(rt.slot, t, status::READY);
        match rt.handoff.pop() {
            Ok(acc) => {
                is_idle = false;
                if rt.workers_may_exit.load(Ordering::SeqCst) {
                    // Immediate stop: drop the connection unserved.
                    // SAFETY: the socket is ours now.
                    unsafe { sys::apr_socket_close(acc.sock) };
                    acc.ptrans.clear();
                    last_ptrans = Some(acc.ptrans);
                    break;
                }
                let ptrans = acc.ptrans;
                process_socket(thd, acc, rt.slot, t, &entry.fd);
                ptrans.clear();
                last_ptrans = Some(ptrans);
            }
            Err(PopError::Terminated) => break,
            Err(PopError::Interrupted) | Err(PopError::Empty) => continue,
        }
    }
    let dying = rt.dying.load(Ordering::SeqCst);
    scoreboard::set_status(
        rt.slot,
        t,
        if dying {
            status::DEAD
        } else {
            status::GRACEFUL
        },
    );
    if let Some(p) = last_ptrans {
        p.destroy();
    }
    rt.live_workers.fetch_sub(1, Ordering::SeqCst);
    ptr::null_mut()
}

/// Serves one connection: scoreboard handle, conn_rec, the protocol's
/// process_connection hooks (HTTP keep-alive loop included), lingering close.
fn process_socket(
    thd: *mut sys::apr_thread_t,
    acc: Accepted,
    slot: c_int,
    t: c_int,
    fd_slot: &std::sync::atomic::AtomicI32,
) {
    let Accepted { sock, ptrans } = acc;
    let conn_id = (slot * settings().thread_limit + t) as std::os::raw::c_long;
    let mut fd: sys::apr_os_sock_t = -1;
    // SAFETY: sock and ptrans came from the listener's accept and are ours alone; the
    // core's hooks take them as httpd's own worker passes them.
    unsafe {
        sys::apr_os_sock_get(&mut fd, sock);
        fd_slot.store(fd, Ordering::SeqCst);
        let mut sbh: *mut sys::ap_sb_handle_t = ptr::null_mut();
        sys::ap_create_sb_handle(&mut sbh, ptrans.as_ptr(), slot, t);
        let ba = sys::apr_bucket_alloc_create(ptrans.as_ptr());
        let c = sys::ap_run_create_connection(
            ptrans.as_ptr(),
            sys::ap_server_conf,
            sock,
            conn_id,
            sbh as *mut c_void,
            ba,
        );
        if !c.is_null() {
            (*c).current_thread = thd;
            sys::ap_process_connection(c, sock as *mut c_void);
            // Unpublish the descriptor before the close below frees its number.
            fd_slot.store(-1, Ordering::SeqCst);
            sys::ap_lingering_close(c);
        }
        fd_slot.store(-1, Ordering::SeqCst);
    }
}
