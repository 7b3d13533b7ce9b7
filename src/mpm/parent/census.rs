//! The scoreboard census one maintenance cycle starts from: for one listener bucket,
//! how many threads of the current generation are idle, how many are busy, which child
//! slots are free to fork into, and how far up the scoreboard children still live.
//! [`count`] is pure over a reader of slots, so it is unit-tested without httpd.
//!
//! MaxRequestWorkers bounds the current generation only: its live, non-quiescing
//! children may number MaxRequestWorkers / ThreadsPerChild (the bucket's share), and they
//! may live in any slot below ServerLimit. So after a graceful restart, while children of
//! the old generation still finish their requests in the low slots, the new generation
//! grows into the slots above them instead of waiting for the old one to leave.

use std::os::raw::c_int;
use std::sync::atomic::Ordering;

use crate::ffi::retained::Retained;
use crate::ffi::scoreboard::{self, status, ProcessSlot};
use crate::mpm::status::Counter;
use crate::sys;

/// One bucket's census.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Census {
    /// Threads ready for a connection in live, non-quiescing children of this generation.
    pub idle_threads: c_int,
    /// Threads that are READY or busy (not starting, not dying) in live children of the
    /// current generation: what MaxRequestWorkers bounds.
    pub active_threads: c_int,
    /// Highest slot with no thread winding down (-1: none).
    pub last_non_dead: c_int,
    /// Slots to fork into (free or held by a quiescing child, with a dead thread), fully
    /// dead ones first, at most the spawn rate and at most what the current generation
    /// may still grow by.
    pub free_slots: Vec<c_int>,
    /// How many of `free_slots`, from the front, hold no running thread (free, or a
    /// quiescing child's whose threads have all ended): a child forked there starts every
    /// thread at once, where in a quiescing child's slot it starts each only once the
    /// old one there has ended.
    pub fully_free: c_int,
    /// Live children of this generation that hold as many connections as their open-file
    /// limit allows (`crate::mpm::open_files`): their threads do not count as idle, since
    /// they take no new connection.
    pub at_file_limit: c_int,
    /// Connections that live children of this generation hold without a thread (parked:
    /// their open connections less their busy threads): each will want one.
    pub parked: c_int,
}

/// What the census reads of one child slot.
pub struct SlotView {
    /// The slot's process fields.
    pub process: ProcessSlot,
    /// The status of each of its first ThreadsPerChild threads.
    pub threads: Vec<c_int>,
    /// The child accepts no more for its open-file limit (its status row).
    pub at_file_limit: bool,
    /// Its open connections (a parking child publishes each open and close at once; 0
    /// for a child that does not park).
    pub connections: u32,
}

/// Where and how far to look.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    /// The bucket counted (its slots are those with `slot % num_buckets == bucket`).
    pub bucket: c_int,
    /// Number of listener buckets.
    pub num_buckets: c_int,
    /// Children the current generation may have (MaxRequestWorkers / ThreadsPerChild).
    pub daemons_limit: c_int,
    /// Highest slot ever used + 1: beyond it, stop once enough free slots were found.
    pub max_daemons_limit: c_int,
    /// Slots in the scoreboard (ServerLimit).
    pub server_limit: c_int,
    /// Free slots wanted at most (the bucket's spawn rate).
    pub spawn_rate: c_int,
    /// The generation the parent runs now.
    pub generation: sys::ap_generation_t,
}

/// Counts one bucket through `read(slot)`.
pub fn count(scope: &Scope, mut read: impl FnMut(c_int) -> SlotView) -> Census {
    let mut c = Census {
        idle_threads: 0,
        active_threads: 0,
        last_non_dead: -1,
        free_slots: Vec::new(),
        fully_free: 0,
        at_file_limit: 0,
        parked: 0,
    };
    let mut totally_free = 0usize;
    let nb = scope.num_buckets.max(1);
    let ours = move |i: &c_int| i % nb == scope.bucket;
    // The bucket's share of the current generation's children, and those alive.
    let share = (0..scope.daemons_limit).filter(ours).count();
    let mut live = 0usize;
    // Every slot a child may hold; beyond the slots ever used, only until enough free
    // ones were found.
    let used = scope
        .daemons_limit
        .max(scope.max_daemons_limit)
        .min(scope.server_limit);
    for i in (0..used).filter(ours) {
        let enough = c.free_slots.len() as c_int >= scope.spawn_rate;
        if i >= scope.max_daemons_limit && enough {
            break;
        }
        let v = read(i);
        let ps = v.process;
        let (mut any_dying, mut any_dead, mut all_dead) = (false, false, true);
        let mut busy = 0u32;
        let current = ps.pid != 0 && !ps.quiescing && ps.generation == scope.generation;
        let accepts = !(current && v.at_file_limit);
        c.at_file_limit += c_int::from(!accepts);
        for &st in &v.threads {
            any_dying |= st == status::GRACEFUL;
            any_dead |= st == status::DEAD;
            all_dead &= st == status::DEAD || st == status::GRACEFUL;
            if ps.pid != 0 {
                if st <= status::READY && current && accepts {
                    c.idle_threads += 1;
                }
                if (status::READY..status::GRACEFUL).contains(&st)
                    && ps.generation == scope.generation
                {
                    c.active_threads += 1;
                    busy += u32::from(st != status::READY);
                }
            }
        }
        if current {
            live += 1;
            let parked = v.connections.saturating_sub(busy);
            c.parked = c
                .parked
                .saturating_add(parked.min(c_int::MAX as u32) as c_int);
        }
        if any_dead && !enough && (ps.pid == 0 || ps.quiescing) {
            if all_dead {
                c.free_slots.insert(totally_free, i);
                totally_free += 1;
            } else {
                c.free_slots.push(i);
            }
        }
        if !any_dying {
            c.last_non_dead = i;
        }
    }
    let room = share
        .saturating_sub(live)
        .min(scope.spawn_rate.max(0) as usize);
    // Where old children hold the slots the generation would use, grow above them, into
    // slots no child ever had, before taking over a quiescing child's slot.
    for i in (used..scope.server_limit).filter(ours) {
        if totally_free >= room {
            break;
        }
        if read(i).process.pid == 0 {
            c.free_slots.insert(totally_free, i);
            totally_free += 1;
        }
    }
    c.free_slots.truncate(room);
    c.fully_free = totally_free.min(c.free_slots.len()) as c_int;
    c
}

/// Counts one bucket from the live scoreboard and the children's status rows.
pub fn take(scope: &Scope, threads_per_child: c_int) -> Census {
    let rows = Retained::lookup().and_then(|r| r.shared_rows());
    count(scope, |slot| SlotView {
        process: scoreboard::process(slot),
        threads: (0..threads_per_child)
            .map(|t| scoreboard::thread_status(slot, t))
            .collect(),
        at_file_limit: rows.is_some_and(|r| {
            (slot as usize) < r.slots()
                // Relaxed: a gauge the child's listener refreshes once a second.
                && r.row(slot as usize)[Counter::AtFileLimit as usize].load(Ordering::Relaxed) != 0
        }),
        connections: scoreboard::connections(slot),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEN: sys::ap_generation_t = 4;

    fn scope(bucket: c_int, num_buckets: c_int) -> Scope {
        Scope {
            bucket,
            num_buckets,
            daemons_limit: 6,
            max_daemons_limit: 6,
            server_limit: 6,
            spawn_rate: 32,
            generation: GEN,
        }
    }

    fn slot(
        pid: sys::pid_t,
        quiescing: bool,
        generation: sys::ap_generation_t,
        t: &[c_int],
    ) -> SlotView {
        SlotView {
            process: ProcessSlot {
                pid,
                generation,
                quiescing,
                bucket: 0,
            },
            threads: t.to_vec(),
            at_file_limit: false,
            connections: 0,
        }
    }

    const R: c_int = status::READY;
    const D: c_int = status::DEAD;
    const G: c_int = status::GRACEFUL;
    const S: c_int = status::STARTING;
    const BUSY: c_int = sys::SERVER_BUSY_READ as c_int;

    #[test]
    fn idle_and_busy_threads_of_this_generation() {
        let c = count(&scope(0, 1), |i| match i {
            0 => slot(100, false, GEN, &[R, R, BUSY]),
            1 => slot(101, false, GEN - 1, &[R, BUSY, BUSY]), // old generation: not counted
            2 => slot(102, true, GEN, &[R, S, S]),            // quiescing: not idle
            _ => slot(0, false, 0, &[D, D, D]),
        });
        assert_eq!(c.idle_threads, 2);
        assert_eq!(c.active_threads, 3 + 1);
        assert_eq!(c.free_slots, vec![3, 4, 5]);
        assert_eq!(c.last_non_dead, 5);
    }

    #[test]
    fn fully_dead_slots_come_first_and_dying_ones_bound_the_end() {
        let c = count(&scope(0, 1), |i| match i {
            0 => slot(200, true, GEN - 1, &[G, D, BUSY]), // quiescing, partly dead
            1 => slot(0, false, 0, &[D, D, D]),
            2 => slot(201, false, GEN, &[R, R, R]),
            3 => slot(202, true, GEN - 1, &[G, G, D]), // quiescing, all gone but dying
            _ => slot(203, false, GEN, &[R, R, R]),
        });
        assert_eq!(c.free_slots, vec![1, 3, 0]);
        assert_eq!(c.fully_free, 2);
        assert_eq!(c.last_non_dead, 5);
    }

    #[test]
    fn stops_at_the_spawn_rate_beyond_the_used_slots() {
        let s = Scope {
            max_daemons_limit: 1,
            spawn_rate: 2,
            ..scope(0, 1)
        };
        let mut read = vec![];
        let c = count(&s, |i| {
            read.push(i);
            slot(0, false, 0, &[D])
        });
        assert_eq!(c.free_slots, vec![0, 1]);
        assert_eq!(
            read,
            vec![0, 1],
            "slot 2 is beyond max_daemons_limit with 2 found"
        );
    }

    #[test]
    fn the_new_generation_grows_above_the_old_one() {
        // After a graceful restart: slots 0-2 still hold the old generation, slot 3 a new
        // child. Five more may start (6 children a generation): into the free slots, then
        // above the old ones rather than into their slots.
        let s = Scope {
            server_limit: 16,
            ..scope(0, 1)
        };
        let c = count(&s, |i| match i {
            0..=2 => slot(400 + i, true, GEN - 1, &[BUSY, G, D]),
            3 => slot(410, false, GEN, &[R, R, R]),
            _ => slot(0, false, 0, &[D, D, D]),
        });
        assert_eq!(c.free_slots, vec![4, 5, 6, 7, 8]);
        // Without room above (ServerLimit = the generation's children), the old
        // children's slots are taken as the stock worker takes them, once a thread died.
        let c = count(&scope(0, 1), |i| match i {
            0..=2 => slot(400 + i, true, GEN - 1, &[BUSY, G, D]),
            _ => slot(410 + i, false, GEN, &[R, R, R]),
        });
        assert_eq!(c.free_slots, vec![0, 1, 2]);
    }

    #[test]
    fn a_full_generation_gets_no_slot_however_many_are_free() {
        let s = Scope {
            server_limit: 16,
            ..scope(0, 1)
        };
        let mut read = vec![];
        let c = count(&s, |i| {
            read.push(i);
            match i {
                0..=5 => slot(500 + i, false, GEN, &[R, BUSY]),
                _ => slot(0, false, 0, &[D, D]),
            }
        });
        assert!(c.free_slots.is_empty());
        assert_eq!(
            read,
            (0..6).collect::<Vec<_>>(),
            "nothing read above a full generation"
        );
    }

    #[test]
    fn a_child_at_its_open_file_limit_has_no_idle_thread() {
        let c = count(&scope(0, 1), |i| {
            let mut v = match i {
                0 | 1 => slot(100 + i, false, GEN, &[R, R, BUSY]),
                _ => slot(0, false, 0, &[D, D, D]),
            };
            v.at_file_limit = i == 0;
            v
        });
        assert_eq!(c.idle_threads, 2, "only slot 1's");
        assert_eq!(c.active_threads, 6);
        assert_eq!(c.at_file_limit, 1);
    }

    #[test]
    fn parked_connections_of_this_generation_add_up() {
        let c = count(&scope(0, 1), |i| {
            let mut v = match i {
                0 => slot(100, false, GEN, &[R, R]),
                1 => slot(101, false, GEN, &[R, BUSY]), // one served, 39 parked
                2 => slot(102, true, GEN, &[R, R]),     // quiescing: its own to finish
                3 => slot(103, false, GEN - 1, &[R, R]), // old generation
                _ => slot(0, false, 0, &[D, D]),
            };
            v.connections = 40;
            v
        });
        assert_eq!(c.parked, 40 + 39);
    }

    #[test]
    fn a_bucket_counts_only_its_slots() {
        let c = count(&scope(1, 2), |i| {
            assert_eq!(i % 2, 1, "slot {i} belongs to bucket 0");
            slot(300 + i, false, GEN, &[R])
        });
        assert_eq!(c.idle_threads, 3);
    }
}
