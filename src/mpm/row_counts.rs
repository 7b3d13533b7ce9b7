//! Where a child's open, parked and idle counts are kept: in the child, and written whole
//! into the two rows of its scoreboard slot that other processes read (the scoreboard's
//! `process_score`: mod_status's "Async connections" and `ConnsTotal`, the parent's census;
//! rworker's status row: `RWorkerParked`, `RWorkerIdlers`, `RWorkerAtFileLimit`).
//!
//! Why not add to the rows directly: two processes can share a slot. The parent forks a
//! new generation's child into a quiescing child's slot once one of its thread columns is
//! free (the stock worker's rule), and the old child drains its connections meanwhile. Had
//! both added to one row, the old child's closes would have been subtracted from the new
//! child's counts (which start at 0): `ConnsTotal` near 4.29e9, a census whose parked
//! count saturates. So each count lives in the child, and the child writes its value into
//! the row only while the row names it (the pid in the slot); a child that lost its slot
//! stops writing. Event writes its counts whole too, from its listener.
//!
//! Publish and recheck: a thread that changed a count stores the count's value into the
//! row, then reads the count again and stores again if it moved. Every access is SeqCst, so
//! in their single total order the row's last store was made by a thread that then read
//! the count unchanged, and any later change is followed by its own store: once the
//! child's threads are done, the row holds the child's count exactly, whatever order their
//! stores landed in.
//!
//! What is left: a store by a child that read "the row names me" just before the parent
//! gave the slot to a new child, and landed after the new child's first writes, stays in
//! the row until the new child's next change of that count (nanoseconds of exposure at a
//! fork into a shared slot; the value is a real count, never a wrapped one).

use std::os::raw::c_int;
use std::sync::atomic::{AtomicI64, Ordering};

use crate::ffi::retained::Retained;
use crate::ffi::scoreboard::{self, AsyncField};
use crate::ffi::shm::Row;
use crate::mpm::status::Counter;
use crate::sys;

/// A count the rows show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// Open connections (`ConnsTotal`'s share).
    Connections,
    /// Parked in write completion (`ConnsAsyncWriting`).
    WriteCompletion,
    /// Parked between requests (`ConnsAsyncKeepAlive`).
    KeepAlive,
    /// Parked in a lingering close (`ConnsAsyncClosing`).
    LingeringClose,
    /// Parked while a module waits for the socket (`ConnsAsyncWaitIO`).
    WaitIo,
    /// Parked while a request head arrives (`RWorkerParkedHeads`).
    ReadingHead,
    /// Taken over by a module (`CONN_STATE_SUSPENDED`).
    Suspended,
    /// Parked, every kind (`RWorkerParked`).
    Parked,
    /// Idle workers (`RWorkerIdlers`).
    IdleWorkers,
    /// 1 while the child accepts no more for its open-file limit (`RWorkerAtFileLimit`).
    AtFileLimit,
}

const COUNTS: usize = 10;

impl Count {
    /// Where the count is shown: a field of the scoreboard's process row, or a counter of
    /// rworker's status row.
    fn place(self) -> Place {
        match self {
            Count::Connections => Place::Scoreboard(AsyncField::Connections),
            Count::WriteCompletion => Place::Scoreboard(AsyncField::WriteCompletion),
            Count::KeepAlive => Place::Scoreboard(AsyncField::KeepAlive),
            Count::LingeringClose => Place::Scoreboard(AsyncField::LingeringClose),
            Count::WaitIo => Place::Scoreboard(AsyncField::WaitIo),
            Count::Suspended => Place::Scoreboard(AsyncField::Suspended),
            Count::ReadingHead => Place::Status(Counter::ParkedHeads),
            Count::Parked => Place::Status(Counter::Parked),
            Count::IdleWorkers => Place::Status(Counter::IdleWorkers),
            Count::AtFileLimit => Place::Status(Counter::AtFileLimit),
        }
    }
}

enum Place {
    Scoreboard(AsyncField),
    Status(Counter),
}

/// One child's counts (see the module doc).
#[derive(Debug)]
pub struct RowCounts {
    slot: c_int,
    pid: sys::pid_t,
    /// The counts, by `Count as usize`.
    counts: [AtomicI64; COUNTS],
    /// The slot's status row (None if shared memory could not be mapped).
    row: Option<&'static Row>,
}

impl RowCounts {
    /// The counts of the child in `slot` (this process), all 0, written into the rows
    /// whatever a killed predecessor left there. The parent names the child in the slot
    /// right after the fork; a child that got here first waits for that (its counts are
    /// written only while the slot names it), yielding, unless the parent is gone.
    pub fn for_slot(slot: c_int) -> RowCounts {
        let pid = std::process::id() as sys::pid_t;
        // SAFETY: getppid(2) cannot fail.
        let parent = unsafe { libc::getppid() };
        while scoreboard::pid_of(slot) != pid {
            // SAFETY: as above.
            if unsafe { libc::getppid() } != parent {
                break;
            }
            std::thread::yield_now();
        }
        scoreboard::set_not_accepting(slot, false);
        let row = Retained::lookup()
            .and_then(|r| r.shared_rows())
            .filter(|r| (slot as usize) < r.slots())
            .map(|r| r.row(slot as usize));
        let c = RowCounts {
            slot,
            pid,
            counts: Default::default(),
            row,
        };
        for count in ALL {
            c.write(count, 0);
        }
        c
    }

    /// Adds `delta` (which may be negative) to `count`.
    pub fn add(&self, count: Count, delta: i64) {
        // SeqCst: see the module doc (publish and recheck).
        self.counts[count as usize].fetch_add(delta, Ordering::SeqCst);
        self.publish(count);
    }

    /// Sets `count` to `value`.
    pub fn set(&self, count: Count, value: i64) {
        // SeqCst: as in add.
        self.counts[count as usize].store(value, Ordering::SeqCst);
        self.publish(count);
    }

    /// This child's own value of `count`.
    pub fn get(&self, count: Count) -> i64 {
        // SeqCst: as in add (a plain read would do; one ordering for every access).
        self.counts[count as usize].load(Ordering::SeqCst)
    }

    /// Writes `count`'s value into its row while the slot names this child, again while
    /// it moved meanwhile (module doc).
    fn publish(&self, count: Count) {
        let c = &self.counts[count as usize];
        loop {
            if scoreboard::pid_of(self.slot) != self.pid {
                return; // the slot is another child's now
            }
            // SeqCst: module doc.
            let v = c.load(Ordering::SeqCst);
            self.write(count, v);
            if c.load(Ordering::SeqCst) == v {
                return;
            }
        }
    }

    /// Says whether the child accepts new connections (mod_status's "accepting" column),
    /// while the slot names it.
    pub fn set_not_accepting(&self, not: bool) {
        if scoreboard::pid_of(self.slot) == self.pid {
            scoreboard::set_not_accepting(self.slot, not);
        }
    }

    /// Marks the child as quiescing (it stopped accepting), while the slot names it: a
    /// late mark must not make the parent's census take a new child in the slot for a
    /// quiescing one.
    pub fn set_quiescing(&self) {
        if scoreboard::pid_of(self.slot) == self.pid {
            scoreboard::set_quiescing(self.slot);
        }
    }

    fn write(&self, count: Count, v: i64) {
        match count.place() {
            Place::Scoreboard(f) => {
                scoreboard::set_async(self.slot, f, v.clamp(0, u32::MAX as i64) as u32)
            }
            Place::Status(c) => {
                if let Some(row) = self.row {
                    // SeqCst: the row half of publish and recheck (module doc).
                    row[c as usize].store(v.max(0) as u64, Ordering::SeqCst);
                }
            }
        }
    }
}

const ALL: [Count; COUNTS] = [
    Count::Connections,
    Count::WriteCompletion,
    Count::KeepAlive,
    Count::LingeringClose,
    Count::WaitIo,
    Count::ReadingHead,
    Count::Suspended,
    Count::Parked,
    Count::IdleWorkers,
    Count::AtFileLimit,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_count_is_listed_once_at_its_own_index() {
        for (i, c) in ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
