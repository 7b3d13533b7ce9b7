//! The listener → worker hand-off of one child: the fdqueue (accepted connections) and
//! queue_info (the count of idle workers, and the stack of recycled transaction pools).
//! Idle workers are counted here: a worker announces itself with [`Handoff::set_idle`]
//! — handing back its last connection's pool for recycling — and the listener reserves
//! one with [`Handoff::wait_for_idler`] before it accepts.
//!
//! Two implementations behind one interface: rworker's own atomics-based fdqueue and
//! queue_info (crate `rworker-queue`, the default), or httpd's own mutex + condition
//! variable ones (`RWorkerQueue apr`), to A/B the queues with the process model held
//! constant.

use rworker_queue::{FdQueue, PopError, PushError, QueueInfo};

use crate::ffi::fdqueue::{AprQueue, Popped};
use crate::ffi::pool::{ConfigPool, Pool};
use crate::mpm::conn::Conn;
use crate::mpm::settings::QueueKind;

/// One child's hand-off (see the module doc).
// One value per child, created once and never moved: the padded atomic variant's size
// costs nothing, while boxing it would add an indirection to every hand-off.
#[allow(clippy::large_enum_variant)]
pub enum Handoff {
    /// rworker-queue: atomics, futex parking only when a thread must sleep.
    Atomic {
        /// Accepted connections, listener → workers (capacity ThreadsPerChild).
        fdq: FdQueue<Conn>,
        /// Idle-worker count and the recycled-pool stack (ThreadsPerChild + 1 pools).
        qi: QueueInfo<Pool>,
    },
    /// httpd's ap_queue_*.
    Apr(AprQueue),
}

/// What a worker's [`Handoff::pop`] gave.
pub enum Handed {
    /// A connection to serve.
    Conn(Conn),
    /// Woken without one (an immediate stop interrupts every waiter): look again.
    Interrupted,
    /// The queue was terminated and drained: the worker exits.
    Terminated,
}

impl Handoff {
    /// Creates the hand-off for `threads_per_child` workers (httpd's kind allocates its
    /// structures in a subpool of `pconf` that lives until the child exits).
    /// Errors: the APR status (APR_ENOTIMPL when the server lost its fdqueue functions).
    pub fn new(
        kind: QueueKind,
        threads_per_child: usize,
        pconf: ConfigPool,
    ) -> Result<Handoff, i32> {
        match kind {
            QueueKind::Atomic => Ok(Handoff::Atomic {
                fdq: FdQueue::new(threads_per_child),
                qi: QueueInfo::new(threads_per_child + 1),
            }),
            QueueKind::Apr => {
                let pool: &'static Pool = Box::leak(Box::new(pconf.create_sub(c"mpm_fdqueue")?));
                Ok(Handoff::Apr(AprQueue::new(threads_per_child, pool)?))
            }
        }
    }

    /// Listener: reserves an idle worker, blocking while none is idle; false once
    /// queue_info was terminated (the listener must exit).
    pub fn wait_for_idler(&self) -> bool {
        match self {
            Handoff::Atomic { qi, .. } => qi.wait_for_idler().is_ok(),
            Handoff::Apr(q) => q.wait_for_idler(),
        }
    }

    /// Listener: a recycled transaction pool, if any.
    pub fn pop_pool(&self) -> Option<Pool> {
        match self {
            Handoff::Atomic { qi, .. } => qi.pop_pool(),
            Handoff::Apr(q) => q.pop_pool(),
        }
    }

    /// Listener: hands a connection to the workers; gives it back on failure.
    pub fn push(&self, conn: Conn) -> Result<(), Conn> {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.push(conn).map_err(|e| match e {
                PushError::Full(c) | PushError::Terminated(c) => c,
            }),
            Handoff::Apr(q) => q
                .push(conn.sock, conn.ptrans)
                .map_err(|(sock, ptrans)| Conn { sock, ptrans }),
        }
    }

    /// Listener: a pool that a closed connection left, cleared, back to the recycled
    /// stack (destroyed when the stack is full or closed).
    pub fn recycle(&self, mut pool: Pool) {
        pool.clear();
        match self {
            Handoff::Atomic { qi, .. } => drop(qi.push_pool(pool)),
            Handoff::Apr(_) => drop(pool),
        }
    }

    /// Worker: becomes idle, recycling its previous connection's (cleared) pool, so the
    /// listener finds it for the connection it accepts for this worker.
    pub fn set_idle(&self, recycle: Option<Pool>) {
        match self {
            // A full or closed stack refuses the pool: it is destroyed (dropped).
            Handoff::Atomic { qi, .. } => drop(qi.set_idle_recycling(recycle)),
            Handoff::Apr(q) => q.set_idle(recycle),
        }
    }

    /// Worker: the next connection.
    pub fn pop(&self) -> Handed {
        match self {
            Handoff::Atomic { fdq, .. } => match fdq.pop() {
                Ok(c) => Handed::Conn(c),
                Err(PopError::Terminated) => Handed::Terminated,
                Err(PopError::Interrupted) | Err(PopError::Empty) => Handed::Interrupted,
            },
            Handoff::Apr(q) => match q.pop() {
                Popped::Connection(sock, ptrans) => Handed::Conn(Conn { sock, ptrans }),
                Popped::Interrupted => Handed::Interrupted,
                Popped::Terminated => Handed::Terminated,
            },
        }
    }

    /// Futex wake system calls made so far by both queues (0 for httpd's kind, which
    /// does not say).
    pub fn futex_wakes(&self) -> u64 {
        match self {
            Handoff::Atomic { fdq, qi } => fdq.wait_stats().wakes + qi.wait_stats().wakes,
            Handoff::Apr(_) => 0,
        }
    }

    /// Idle workers not yet reserved by the listener (0 for httpd's kind).
    pub fn idlers(&self) -> u64 {
        match self {
            Handoff::Atomic { qi, .. } => qi.num_idlers() as u64,
            Handoff::Apr(_) => 0,
        }
    }

    /// Wakes every waiting worker (immediate stop).
    pub fn interrupt_all(&self) {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.interrupt_all(),
            Handoff::Apr(q) => q.interrupt_all(),
        }
    }

    /// Workers drain what is queued, then get Terminated.
    pub fn term_queue(&self) {
        match self {
            Handoff::Atomic { fdq, .. } => fdq.term(),
            Handoff::Apr(q) => q.term(),
        }
    }

    /// The listener's wait for an idler fails from now on.
    pub fn term_idlers(&self) {
        match self {
            Handoff::Atomic { qi, .. } => qi.term(),
            Handoff::Apr(q) => q.term_idlers(),
        }
    }

    /// Destroys every recycled pool; later recycling destroys instead of keeping.
    pub fn free_idle_pools(&self) {
        match self {
            Handoff::Atomic { qi, .. } => drop(qi.free_idle_pools()),
            Handoff::Apr(q) => q.free_idle_pools(),
        }
    }
}
