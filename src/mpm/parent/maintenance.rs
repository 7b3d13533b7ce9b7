//! Idle-server maintenance as a pure decision (worker.c
//! `perform_idle_server_maintenance`): from one listener bucket's census, the settings
//! and what the parent remembers between cycles, decide whether to fork children (and
//! into which slots), shed one child, or wait, and which lines to log. The parent calls
//! [`decide`] about once a second per bucket and performs the result.

use std::os::raw::c_int;

use crate::mpm::parent::census::Census;

/// Upper bound of children forked in one maintenance cycle, over all buckets.
pub const MAX_SPAWN_RATE: c_int = 32;
/// Maintenance cycles (seconds) a full scoreboard must persist before AH00288 is an error.
pub const SCOREBOARD_FULL_CYCLES: c_int = 10;

/// The settings maintenance works with (a bucket's share is taken here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Process slots in use (MaxRequestWorkers / ThreadsPerChild).
    pub daemons_limit: c_int,
    /// ThreadsPerChild.
    pub threads_per_child: c_int,
    /// MinSpareThreads, server-wide.
    pub min_spare_threads: c_int,
    /// MaxSpareThreads, server-wide.
    pub max_spare_threads: c_int,
    /// Number of listener buckets (>= 1).
    pub num_buckets: c_int,
}

impl Limits {
    fn min_idle(&self) -> c_int {
        self.min_spare_threads / self.num_buckets
    }
    fn max_idle(&self) -> c_int {
        self.max_spare_threads / self.num_buckets
    }
    /// This bucket's share of MaxRequestWorkers.
    fn max_active(&self) -> c_int {
        self.daemons_limit * self.threads_per_child / self.num_buckets
    }
}

/// What the parent remembers between cycles (kept in the retained block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Children to fork for this bucket in the next cycle that needs some (1, 2, 4…).
    pub spawn_rate: c_int,
    /// Cycles, after a graceful restart, during which the spawn rate does not grow.
    pub hold_off: c_int,
    /// A child exited sick and no thread has been active since.
    pub sick_child_detected: bool,
    /// A census of this generation saw an active thread: children did initialise, so a
    /// later sick child is a transient shortage (fds, memory), not a server that cannot
    /// start. A child that retires sick may be gone before the next census (rworker's
    /// children exit at once, the stock worker's linger), so the census alone cannot say.
    pub healthy_child_seen: bool,
    /// AH00286 was logged for the current saturation.
    pub maxclients_reported: bool,
    /// AH00287 was logged for the current saturation.
    pub near_maxclients_reported: bool,
    /// Consecutive cycles that wanted a fork but found every slot held.
    pub scoreboard_full_cycles: c_int,
    /// RW00041 was logged for children that are at their open-file limit now.
    pub file_limit_reported: bool,
}

/// A line the parent logs for the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// AH02325: children die before any initialises: the server gives up.
    GiveUp,
    /// RW00004 (debug): too many idle threads, one child exits.
    Shed {
        idle: c_int,
        parked: c_int,
        max_idle: c_int,
    },
    /// RW00041 (warn): children hold as many connections as their open-file limit allows.
    AtFileLimit { children: c_int },
    /// AH00286: MaxRequestWorkers reached.
    MaxRequestWorkersReached,
    /// AH00287: within MinSpareThreads of MaxRequestWorkers.
    NearMaxRequestWorkers,
    /// AH00288: a fork was wanted but every slot is held; an error when `persistent`.
    ScoreboardFull { persistent: bool },
    /// AH00289 (info): forking fast.
    Busy {
        spawning: c_int,
        idle: c_int,
        active: c_int,
        children: c_int,
    },
}

/// What the parent does for the bucket this cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Wait,
    /// Stop the server (after [`Line::GiveUp`]).
    GiveUp,
    /// One child of the bucket exits gracefully (the first to read the pipe of death).
    ShedOne,
    /// Fork a child into each of these slots.
    Spawn(Vec<c_int>),
}

/// One cycle's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What to do.
    pub action: Action,
    /// What to log, in order.
    pub lines: Vec<Line>,
}

/// Decides one maintenance cycle for a bucket (`last_bucket`: the highest-numbered one,
/// where a sick server gives up), updating `m`.
pub fn decide(c: &Census, l: &Limits, last_bucket: bool, m: &mut Memory) -> Decision {
    let mut lines = Vec::new();
    if c.active_threads > 0 {
        m.healthy_child_seen = true;
    }
    if m.sick_child_detected {
        if m.healthy_child_seen {
            m.sick_child_detected = false;
        } else if last_bucket {
            return Decision {
                action: Action::GiveUp,
                lines: vec![Line::GiveUp],
            };
        }
    }

    if c.at_file_limit == 0 {
        m.file_limit_reported = false;
    } else if !m.file_limit_reported {
        lines.push(Line::AtFileLimit {
            children: c.at_file_limit,
        });
        m.file_limit_reported = true;
    }

    // A parked connection holds no thread, but it is work: its client's next request
    // wants one, and the child that retires closes it. So only threads beyond the parked
    // connections are spare (counting them as idle retired children that held busy
    // keep-alive connections: 18-36 wrk read errors in 4 of 14 runs at 100 clients on
    // Debian's sizing).
    let spare = c.idle_threads - c.parked.clamp(0, c.idle_threads.max(0));
    let action = if spare > l.max_idle() {
        lines.push(Line::Shed {
            idle: c.idle_threads,
            parked: c.parked,
            max_idle: l.max_idle(),
        });
        m.spawn_rate = 1;
        Action::ShedOne
    } else if c.idle_threads < l.min_idle() {
        if c.free_slots.is_empty() {
            if c.at_file_limit > 0 {
                // Children short of descriptors, not of workers: RW00041 said so, and
                // raising MaxRequestWorkers (AH00286's advice) would not help.
            } else if c.active_threads >= l.max_active() {
                if !m.maxclients_reported {
                    lines.push(Line::MaxRequestWorkersReached);
                    m.maxclients_reported = true;
                }
            } else if !m.near_maxclients_reported
                && c.active_threads + l.min_idle() > l.max_active()
            {
                lines.push(Line::NearMaxRequestWorkers);
                m.near_maxclients_reported = true;
            } else if c.active_threads + l.min_idle() <= l.max_active() {
                // Slots held by exiting children free up within moments (a child retiring
                // after MaxConnectionsPerChild, or shed): routine, so an error only when
                // it persists.
                m.scoreboard_full_cycles += 1;
                lines.push(Line::ScoreboardFull {
                    persistent: m.scoreboard_full_cycles % SCOREBOARD_FULL_CYCLES == 0,
                });
            }
            m.spawn_rate = 1;
            Action::Wait
        } else {
            m.scoreboard_full_cycles = 0;
            let n = (c.free_slots.len() as c_int).min(m.spawn_rate);
            if m.spawn_rate >= 8 {
                lines.push(Line::Busy {
                    spawning: n,
                    idle: c.idle_threads,
                    active: c.active_threads,
                    children: c.last_non_dead + 1,
                });
            }
            let slots = c.free_slots[..n as usize].to_vec();
            if m.hold_off > 0 {
                m.hold_off -= 1;
            } else if m.spawn_rate < MAX_SPAWN_RATE / l.num_buckets {
                m.spawn_rate *= 2;
            }
            Action::Spawn(slots)
        }
    } else {
        m.spawn_rate = 1;
        m.scoreboard_full_cycles = 0;
        // Load dropped below the limit again: report a new saturation next time.
        if c.active_threads + l.min_idle() <= l.max_active() {
            m.maxclients_reported = false;
            m.near_maxclients_reported = false;
        }
        Action::Wait
    };
    Decision { action, lines }
}

/// A child of the current generation exited on its own (it reached MaxConnectionsPerChild,
/// or a cycle shed it): the slot to fork its replacement into now, rather than at the next
/// cycle, when its bucket is short of idle threads without it (`c` counts the bucket after
/// the exit). A shed child is not replaced: MaxSpareThreads is at least MinSpareThreads +
/// ThreadsPerChild, so the threads left after a shed stay above MinSpareThreads.
///
/// One fork per exit, so forks follow exits, and each exit is a child that served (a child
/// that cannot start exits sick or fatal, never here). The spawn rate, which paces growth
/// under new load, is neither used nor changed.
///
/// Only into a slot where the replacement can start every thread at once (`fully_free`):
/// in a slot that a retiring child still holds with threads running, a new child starts
/// each of its threads only once the old one there has ended, yet the census counts them
/// all as idle, so no other child is forked meanwhile. Replacing children as they began to
/// retire, that way, cut `park` at MaxConnectionsPerChild 100 and 100 `Connection: close`
/// clients from 21,217 to 9,297 req/s (p99 6.8 to 100 ms). The cycle still takes such
/// slots, as the stock worker does, when nothing better is left.
pub fn replacement(c: &Census, l: &Limits) -> Option<c_int> {
    if c.idle_threads < l.min_idle() && c.fully_free > 0 {
        c.free_slots.first().copied()
    } else {
        None
    }
}

/// A child of the current generation began to retire (it rang the parent's bell) and may
/// serve its last connections for long yet: the slot to fork a replacement into now, only
/// when the bucket has no idle thread left without it, so that new clients would wait in
/// the backlog until it exits or the next cycle. Where idle threads remain, its siblings
/// accept meanwhile and the replacement waits for the child's exit ([`replacement`]): a
/// fork at every retirement came on top of that one under MaxConnectionsPerChild churn
/// (`park`, MaxConnectionsPerChild 100, 100 `Connection: close` clients: p99 12-679 ms
/// against 6 ms, the idle threads pushed over MaxSpareThreads and shed again).
pub fn replacement_at_retirement(c: &Census, l: &Limits) -> Option<c_int> {
    if c.idle_threads == 0 {
        replacement(c, l)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default config: ThreadsPerChild 25, MaxRequestWorkers 400, spares 75 / 250.
    const L: Limits = Limits {
        daemons_limit: 16,
        threads_per_child: 25,
        min_spare_threads: 75,
        max_spare_threads: 250,
        num_buckets: 1,
    };

    fn fresh() -> Memory {
        Memory {
            spawn_rate: 1,
            hold_off: 0,
            sick_child_detected: false,
            healthy_child_seen: false,
            maxclients_reported: false,
            near_maxclients_reported: false,
            scoreboard_full_cycles: 0,
            file_limit_reported: false,
        }
    }

    fn census(idle: c_int, active: c_int, free: &[c_int]) -> Census {
        Census {
            idle_threads: idle,
            active_threads: active,
            last_non_dead: 1,
            free_slots: free.to_vec(),
            fully_free: free.len() as c_int,
            at_file_limit: 0,
            parked: 0,
        }
    }

    #[test]
    fn a_child_that_retired_is_replaced_at_once_only_where_threads_are_short() {
        // Short of MinSpareThreads (75) without it: the first free slot, whatever the
        // spawn rate says.
        assert_eq!(replacement(&census(50, 100, &[3, 7]), &L), Some(3));
        // Short, but no slot (MaxRequestWorkers): the next cycle reports it.
        assert_eq!(replacement(&census(50, 400, &[]), &L), None);
        // Enough idle threads without it (a shed child, or a quiet server): no fork.
        assert_eq!(replacement(&census(75, 25, &[3]), &L), None);
        // Two buckets: each counts against its half of MinSpareThreads.
        let two = Limits {
            num_buckets: 2,
            ..L
        };
        assert_eq!(replacement(&census(37, 25, &[4]), &two), None);
        assert_eq!(replacement(&census(36, 25, &[4]), &two), Some(4));
        // Short, but the only slot is a retiring child's with threads still running: the
        // cycle decides.
        let held = Census {
            fully_free: 0,
            ..census(50, 100, &[3])
        };
        assert_eq!(replacement(&held, &L), None);
    }

    #[test]
    fn a_child_that_begins_to_retire_is_replaced_only_if_nobody_else_accepts() {
        assert_eq!(
            replacement_at_retirement(&census(0, 100, &[3, 7]), &L),
            Some(3)
        );
        // Siblings still accept: its exit (or the cycle) replaces it.
        assert_eq!(replacement_at_retirement(&census(1, 100, &[3]), &L), None);
        // No slot, or only a slot whose old threads still run: the cycle decides.
        assert_eq!(replacement_at_retirement(&census(0, 400, &[]), &L), None);
        let held = Census {
            fully_free: 0,
            ..census(0, 100, &[3])
        };
        assert_eq!(replacement_at_retirement(&held, &L), None);
    }

    #[test]
    fn enough_idle_threads_means_wait_and_reset() {
        let mut m = Memory {
            spawn_rate: 8,
            scoreboard_full_cycles: 3,
            ..fresh()
        };
        let d = decide(&census(100, 50, &[2, 3]), &L, true, &mut m);
        assert_eq!(
            d,
            Decision {
                action: Action::Wait,
                lines: vec![]
            }
        );
        assert_eq!((m.spawn_rate, m.scoreboard_full_cycles), (1, 0));
    }

    #[test]
    fn spawning_doubles_each_cycle_up_to_the_cap() {
        let mut m = fresh();
        let free: Vec<c_int> = (2..16).collect();
        let mut forked = vec![];
        for _ in 0..7 {
            match decide(&census(10, 40, &free), &L, true, &mut m).action {
                Action::Spawn(slots) => forked.push(slots.len()),
                a => panic!("expected a spawn, got {a:?}"),
            }
        }
        assert_eq!(forked, vec![1, 2, 4, 8, 14, 14, 14]);
        assert_eq!(m.spawn_rate, MAX_SPAWN_RATE);
        // Spawns go to the census's slots in its order (fully dead ones first).
        let mut m = Memory {
            spawn_rate: 2,
            ..fresh()
        };
        let d = decide(&census(10, 40, &[7, 3, 5]), &L, true, &mut m);
        assert_eq!(d.action, Action::Spawn(vec![7, 3]));
    }

    #[test]
    fn the_cap_is_shared_by_buckets() {
        let l = Limits {
            num_buckets: 4,
            ..L
        };
        let mut m = Memory {
            spawn_rate: 8,
            ..fresh()
        };
        decide(&census(0, 0, &[1, 5, 9]), &l, false, &mut m);
        assert_eq!(m.spawn_rate, 8, "32 / 4 buckets");
    }

    #[test]
    fn busy_line_from_a_spawn_rate_of_eight() {
        let mut m = Memory {
            spawn_rate: 8,
            ..fresh()
        };
        let d = decide(&census(3, 47, &[4, 5]), &L, true, &mut m);
        assert_eq!(
            d.lines,
            vec![Line::Busy {
                spawning: 2,
                idle: 3,
                active: 47,
                children: 2
            }]
        );
    }

    #[test]
    fn graceful_restart_holds_the_rate_while_old_children_drain() {
        let mut m = Memory {
            hold_off: 2,
            ..fresh()
        };
        for left in [1, 0] {
            decide(&census(0, 0, &[1, 2, 3]), &L, true, &mut m);
            assert_eq!((m.spawn_rate, m.hold_off), (1, left));
        }
        decide(&census(0, 0, &[1, 2, 3]), &L, true, &mut m);
        assert_eq!(m.spawn_rate, 2);
    }

    #[test]
    fn one_shed_per_cycle_and_the_rate_resets() {
        let mut m = Memory {
            spawn_rate: 4,
            ..fresh()
        };
        for _ in 0..3 {
            let d = decide(&census(300, 0, &[]), &L, true, &mut m);
            assert_eq!(d.action, Action::ShedOne);
            assert_eq!(
                d.lines,
                vec![Line::Shed {
                    idle: 300,
                    parked: 0,
                    max_idle: 250
                }]
            );
            assert_eq!(m.spawn_rate, 1);
        }
        // Exactly MaxSpareThreads idle is not too many.
        let d = decide(&census(250, 0, &[]), &L, true, &mut m);
        assert_eq!(d.action, Action::Wait);
    }

    #[test]
    fn parked_connections_are_work_so_their_children_stay() {
        // 300 idle threads, 100 of them needed by parked keep-alive connections: 200 spare,
        // within MaxSpareThreads 250, so no child retires (and closes what it parked).
        let mut m = fresh();
        let held = Census {
            parked: 100,
            ..census(300, 300, &[])
        };
        assert_eq!(decide(&held, &L, true, &mut m).action, Action::Wait);
        // More parked connections than idle threads is no reason to fork either.
        let crowded = Census {
            parked: 5000,
            ..census(100, 300, &[5])
        };
        assert_eq!(decide(&crowded, &L, true, &mut m).action, Action::Wait);
        // Once they are gone, the spare threads are too many again.
        let d = decide(&census(300, 300, &[]), &L, true, &mut m);
        assert_eq!(d.action, Action::ShedOne);
    }

    #[test]
    fn children_at_their_open_file_limit_are_reported_once_while_they_are() {
        let mut m = fresh();
        let at_limit = Census {
            at_file_limit: 2,
            ..census(100, 100, &[])
        };
        let d = decide(&at_limit, &L, true, &mut m);
        assert_eq!(d.lines, vec![Line::AtFileLimit { children: 2 }]);
        // Every child at its limit and no slot left: the shortage is of descriptors, so
        // no AH00286 (whose advice is MaxRequestWorkers).
        let all_full = Census {
            at_file_limit: 16,
            ..census(0, 400, &[])
        };
        assert!(decide(&all_full, &L, true, &mut m).lines.is_empty());
        assert!(decide(&at_limit, &L, true, &mut m).lines.is_empty());
        decide(&census(100, 100, &[]), &L, true, &mut m);
        assert_eq!(
            decide(&at_limit, &L, true, &mut m).lines,
            vec![Line::AtFileLimit { children: 2 }]
        );
    }

    #[test]
    fn saturation_is_logged_once_until_load_drops() {
        let mut m = fresh();
        let full = census(0, 400, &[]);
        let d = decide(&full, &L, true, &mut m);
        assert_eq!(d.lines, vec![Line::MaxRequestWorkersReached]);
        for _ in 0..5 {
            assert!(decide(&full, &L, true, &mut m).lines.is_empty());
        }
        // Load drops (enough idle threads again, far from the limit): re-armed.
        decide(&census(100, 100, &[]), &L, true, &mut m);
        assert!(!m.maxclients_reported);
        assert_eq!(
            decide(&full, &L, true, &mut m).lines,
            vec![Line::MaxRequestWorkersReached]
        );
    }

    #[test]
    fn near_saturation_is_logged_once() {
        let mut m = fresh();
        let near = census(10, 380, &[]);
        assert_eq!(
            decide(&near, &L, true, &mut m).lines,
            vec![Line::NearMaxRequestWorkers]
        );
        assert!(decide(&near, &L, true, &mut m).lines.is_empty());
    }

    #[test]
    fn a_full_scoreboard_is_an_error_only_when_it_persists() {
        let mut m = fresh();
        let held = census(10, 100, &[]);
        let persistent: Vec<bool> = (0..SCOREBOARD_FULL_CYCLES)
            .map(|_| match &decide(&held, &L, true, &mut m).lines[..] {
                [Line::ScoreboardFull { persistent }] => *persistent,
                l => panic!("unexpected lines {l:?}"),
            })
            .collect();
        assert_eq!(persistent.iter().filter(|p| **p).count(), 1);
        assert!(persistent[SCOREBOARD_FULL_CYCLES as usize - 1]);
        // A successful fork resets the streak.
        decide(&census(10, 100, &[3]), &L, true, &mut m);
        assert_eq!(m.scoreboard_full_cycles, 0);
    }

    #[test]
    fn a_sick_server_gives_up_only_when_nothing_ever_ran() {
        let mut m = Memory {
            sick_child_detected: true,
            ..fresh()
        };
        // Not the last bucket: carry on (the last bucket decides).
        let d = decide(&census(0, 0, &[1]), &L, false, &mut m);
        assert_eq!(d.action, Action::Spawn(vec![1]));
        let d = decide(&census(0, 0, &[1]), &L, true, &mut m);
        assert_eq!(
            d,
            Decision {
                action: Action::GiveUp,
                lines: vec![Line::GiveUp]
            }
        );
        // An active thread is a healthy sign: forget the sick child.
        let d = decide(&census(0, 1, &[1]), &L, true, &mut m);
        assert!(!m.sick_child_detected);
        assert!(matches!(d.action, Action::Spawn(_)));
        // Children did initialise: a later sick child whose replacements die before a
        // census (descriptors ran out under load) is a shortage, not a reason to exit.
        m.sick_child_detected = true;
        let d = decide(&census(0, 0, &[1]), &L, true, &mut m);
        assert!(!m.sick_child_detected);
        assert_eq!(d.action, Action::Spawn(vec![1]));
    }
}
