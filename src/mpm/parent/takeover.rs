//! The hand-over from one generation to the next at a graceful restart, so that no
//! client notices it:
//!
//! 1. Before the configuration pass the parent notes the generation's size (its children
//!    that still accept) and keeps its own copies of the pipes' write ends
//!    (`keep_pod_writers`: the pass closes the generation's pods). The old children are
//!    not told anything yet: they keep accepting through the pass.
//! 2. The new generation starts at once at that size (at least StartServers, at most
//!    MaxRequestWorkers / ThreadsPerChild), in the free slots, above the old children
//!    where ServerLimit has room (`census`); each slot an old child frees later takes the
//!    next child still owed (`spawn::child_exited`), within milliseconds (SIGCHLD).
//! 3. Once every new child has a thread ready (none could start: at once), the parent
//!    writes the graceful bytes into the kept write ends; the old children stop accepting
//!    and finish what they serve.
//!
//! Should the configuration pass fail, the parent exits without step 3: the old children
//! read the end of their pipe as a graceful stop (`Pod::wait`).

use std::os::raw::c_int;
use std::time::{Duration, Instant};

use crate::ffi::listen::{self, PodMessage};
use crate::ffi::{scoreboard, thread};
use crate::mpm::parent::Parent;
use crate::mpm::{listen as mpm_listen, settings};
use crate::sys;

/// How long the old generation keeps accepting after a graceful restart while the new
/// one starts: a child is ready within milliseconds (fork, child_init, its threads), so
/// this bounds only a new child that cannot start (the old generation then stops
/// anyway, and idle maintenance replaces the child).
const NEW_GENERATION_WAIT: Duration = Duration::from_secs(2);

impl Parent {
    /// Step 1, at the end of the old generation's run.
    pub(super) fn note_size_for_takeover(&self) {
        self.r
            .set_children_at_restart(self.children_of(self.r.my_generation()));
    }

    /// Step 1: the old generation keeps accepting until `release_old_generation_once_new_accepts`
    /// (told at once where the write ends could not be kept).
    pub(super) fn keep_old_generation_accepting(&mut self) {
        match mpm_listen::buckets().keep_pod_writers() {
            Some(fds) => self.r.keep_old_pods(self.token, &fds),
            None => self.signal_children(PodMessage::Graceful),
        }
    }

    /// Step 2: starts the new generation at the old one's size (`to_start` at least).
    pub(super) fn begin_takeover(&mut self, to_start: c_int) {
        let old = self.r.children_at_restart();
        self.takeover = to_start.max(old).min(settings::get().daemons_limit);
        self.start_owed_children();
    }

    /// Step 3.
    pub(super) fn release_old_generation_once_new_accepts(&self) {
        self.wait_for_new_generation();
        self.release_old_generation();
    }

    /// Live children of `generation` that still accept (not quiescing).
    pub(super) fn children_of(&self, generation: sys::ap_generation_t) -> c_int {
        (0..self.r.max_daemons_limit().max(0))
            .map(scoreboard::process)
            .filter(|p| p.pid != 0 && !p.quiescing && p.generation == generation)
            .count() as c_int
    }

    /// Children the takeover still owes (0 once it is done).
    pub(super) fn owed_children(&mut self) -> c_int {
        if self.takeover > 0 {
            let owed = self.takeover - self.children_of(self.r.my_generation());
            if owed <= 0 {
                // Done: from now on idle maintenance sizes the generation.
                self.takeover = 0;
            }
            return owed.max(0);
        }
        0
    }

    /// Forks the children the takeover still owes into the free slots there are.
    pub(super) fn start_owed_children(&mut self) {
        let owed = self.owed_children();
        if owed > 0 {
            self.startup_children(owed);
        }
    }

    /// After a graceful restart: waits until every child the new generation started has
    /// a thread ready to serve (none started: no room until old children leave), at most
    /// `NEW_GENERATION_WAIT`, or a signal for the parent.
    fn wait_for_new_generation(&self) {
        let r = self.r;
        let generation = r.my_generation();
        let tpc = settings::get().threads_per_child;
        let deadline = Instant::now() + NEW_GENERATION_WAIT;
        while r.shutdown_pending() == 0 && r.restart_pending() == 0 && Instant::now() < deadline {
            let (mut children, mut ready) = (0, 0);
            for slot in 0..r.max_daemons_limit().max(0) {
                let p = scoreboard::process(slot);
                if p.pid == 0 || p.generation != generation {
                    continue;
                }
                children += 1;
                let serving = (0..tpc).any(|t| {
                    let st = scoreboard::thread_status(slot, t);
                    (scoreboard::status::READY..scoreboard::status::GRACEFUL).contains(&st)
                });
                ready += serving as c_int;
            }
            if ready == children {
                return;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Tells the generation a graceful restart replaced to stop accepting (once; also
    /// on a stop that comes before step 3).
    pub(super) fn release_old_generation(&self) {
        let fds = self.r.take_old_pods(self.token);
        if !fds.is_empty() {
            let slots = settings::get()
                .daemons_limit
                .max(self.r.max_daemons_limit());
            listen::signal_kept_pods(&fds, slots, PodMessage::Graceful);
        }
    }
}
