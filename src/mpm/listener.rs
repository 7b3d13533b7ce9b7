//! The listener thread: reserve an idle worker, accept one connection into a
//! transaction pool (recycled when possible), push it on the fdqueue (worker.c
//! `listener_thread`). It never accepts more connections than there are idle workers,
//! so when every worker is busy new connections wait in the kernel's backlog (or go
//! to another child) while the parent forks more children.

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::Ordering;

use crate::apr::log::level;
use crate::apr::pool::Pool;
use crate::apr::thread;
use crate::mpm::child::{
    unblock_for_this_thread, Accepted, ChildRuntime, StopMode, LISTENER_SIGNAL,
};
use crate::mpm::scoreboard;
use crate::sys;

fn apr_eintr(rv: sys::apr_status_t) -> bool {
    rv == libc::EINTR
}

/// The poll set over this bucket's listeners (index i = `rt.listeners[i]`), built once.
fn listener_pollfds(rt: &ChildRuntime) -> Vec<libc::pollfd> {
    rt.listeners
        .iter()
        .map(|&lr| {
            let mut fd: sys::apr_os_sock_t = -1;
            // SAFETY: lr->sd is the listener's live APR socket.
            unsafe { sys::apr_os_sock_get(&mut fd, (*lr).sd) };
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }
        })
        .collect()
}

/// Waits until one of several listeners is readable (round-robin over ready ones).
/// Returns None when interrupted (the caller re-checks whether to exit).
fn poll_listeners(
    rt: &ChildRuntime,
    fds: &mut [libc::pollfd],
    next: &mut usize,
) -> Option<*mut sys::ap_listen_rec> {
    for p in fds.iter_mut() {
        p.revents = 0;
    }
    // SAFETY: fds is a valid array of pollfd.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
    if n <= 0 {
        return None;
    }
    for k in 0..fds.len() {
        let i = (*next + k) % fds.len();
        if fds[i].revents != 0 {
            *next = i + 1;
            return Some(rt.listeners[i]);
        }
    }
    None
}

/// Listener thread entry point (`data` is the child's `&'static ChildRuntime`).
///
/// # Safety
/// Called by APR on a new thread with the child's leaked runtime as `data`.
pub unsafe extern "C" fn main(_thd: *mut sys::apr_thread_t, data: *mut c_void) -> *mut c_void {
    // SAFETY: data is the leaked runtime, valid for the child's life.
    let rt: &'static ChildRuntime = unsafe { &*(data as *const ChildRuntime) };
    rt.listener_os_thread
        .store(thread::current_os_thread() as usize, Ordering::SeqCst);
    unblock_for_this_thread(LISTENER_SIGNAL);

    let mut ptrans: Option<Pool> = None;
    let mut have_idle_worker = false;
    let mut next_listener = 0usize;
    let mut pollfds = listener_pollfds(rt);
    let mut self_stop = StopMode::None;
    // SAFETY: reading core's MaxMemFree (bytes).
    let max_mem_free = unsafe { sys::ap_max_mem_free } as usize;

    while !rt.listener_may_exit.load(Ordering::SeqCst) {
        if rt.connections_left.load(Ordering::Relaxed) <= 0 {
            // MaxConnectionsPerChild reached: this child retires gracefully.
            self_stop = StopMode::Graceful;
            break;
        }
        if !have_idle_worker {
            match rt.handoff.wait_for_idler() {
                Ok(()) => have_idle_worker = true,
                Err(_) => break,
            }
        }
        if rt.listener_may_exit.load(Ordering::SeqCst) {
            break;
        }
        if !rt.accept_mutex.is_null() {
            // SAFETY: the mutex was child-initialised in child::main.
            let rv = unsafe { sys::apr_proc_mutex_lock(rt.accept_mutex) };
            if rv != 0 {
                if apr_eintr(rv) {
                    continue;
                }
                crate::mpm_log!(level::EMERG, rv, "AH00272: apr_proc_mutex_lock failed. Attempting to shutdown process gracefully.");
                rt.resource_shortage.store(true, Ordering::SeqCst);
                self_stop = StopMode::Graceful;
                break;
            }
        }
        let lr = if rt.listeners.len() == 1 {
            Some(rt.listeners[0])
        } else {
            poll_listeners(rt, &mut pollfds, &mut next_listener)
        };
        let mut accepted: *mut c_void = ptr::null_mut();
        let mut rv: sys::apr_status_t = 0;
        if let Some(lr) = lr {
            if ptrans.is_none() {
                ptrans = match rt.handoff.pop_pool() {
                    Some(p) => {
                        rt.ptrans_reused.fetch_add(1, Ordering::Relaxed);
                        Some(p)
                    }
                    // SAFETY: pconf outlives the child (its pool tree is destroyed at exit).
                    None => match unsafe { Pool::create_ptrans(rt.pconf, max_mem_free) } {
                        Ok(p) => {
                            rt.ptrans_created.fetch_add(1, Ordering::Relaxed);
                            Some(p)
                        }
                        Err(e) => {
                            crate::mpm_log!(
                                level::ALERT,
                                e,
                                "AH03137: Failed to create transaction pool"
                            );
                            None
                        }
                    },
                };
            }
            if let Some(p) = ptrans {
                // SAFETY: lr is one of this bucket's live listeners; accept_func is
                // ap_unixd_accept, which allocates the client socket in ptrans.
                rv = unsafe {
                    ((*lr).accept_func.unwrap_or(sys::ap_unixd_accept))(
                        &mut accepted,
                        lr,
                        p.as_ptr(),
                    )
                };
            } else {
                rt.resource_shortage.store(true, Ordering::SeqCst);
                self_stop = StopMode::Graceful;
            }
        }
        if !rt.accept_mutex.is_null() {
            // SAFETY: we hold the lock taken above.
            let urv = unsafe { sys::apr_proc_mutex_unlock(rt.accept_mutex) };
            if urv != 0 {
                crate::mpm_log!(level::EMERG, urv, "AH00273: apr_proc_mutex_unlock failed. Attempting to shutdown process gracefully.");
                rt.resource_shortage.store(true, Ordering::SeqCst);
                self_stop = StopMode::Graceful;
            }
        }
        if self_stop != StopMode::None {
            break;
        }
        if rv == sys::APR_EGENERAL as sys::apr_status_t {
            // ap_unixd_accept logged the cause; a broken listener is a resource shortage.
            rt.resource_shortage.store(true, Ordering::SeqCst);
            self_stop = StopMode::Graceful;
            break;
        }
        if accepted.is_null() {
            continue; // interrupted, or a benign accept error (reset, aborted…)
        }
        let Some(pool) = ptrans.take() else { continue };
        let item = Accepted {
            sock: accepted as *mut sys::apr_socket_t,
            ptrans: pool,
        };
        match rt.handoff.push(item) {
            Ok(()) => {
                have_idle_worker = false;
                rt.connections.fetch_add(1, Ordering::Relaxed);
                rt.connections_left.fetch_sub(1, Ordering::Relaxed);
            }
            Err(a) => {
                // SAFETY: the socket and pool are still ours.
                unsafe { sys::apr_socket_close(a.sock) };
                crate::mpm_log!(level::CRIT, 0, "AH03138: ap_queue_push_socket failed");
                a.ptrans.clear();
                ptrans = Some(a.ptrans);
            }
        }
    }

    // Leave: stop listening, let workers drain the queue and exit.
    if let Some(&head) = rt.listeners.first() {
        // SAFETY: closes this bucket's listener list (our copies; other processes keep theirs).
        unsafe { sys::ap_close_listeners_ex(head) };
    }
    if let Some(p) = ptrans.take() {
        p.destroy();
    }
    rt.handoff.free_idle_pools();
    rt.handoff.term_queue();
    scoreboard::process(rt.slot).quiescing = 1;
    rt.dying.store(true, Ordering::SeqCst);
    if self_stop != StopMode::None {
        rt.request_stop(self_stop);
    }
    ptr::null_mut()
}
