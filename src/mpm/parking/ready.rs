//! Connections that wait for a worker, oldest first: parked connections that became
//! readable (or must close) and fresh ones the listener accepted. It counts the fresh ones,
//! because they alone decide whether the listener accepts more (see
//! `ParkingListener::arm_listeners`).

use std::collections::VecDeque;

use crate::mpm::handoff::Job;

/// The listener's FIFO of jobs for workers.
#[derive(Default)]
pub struct Ready {
    jobs: VecDeque<Job>,
    /// Jobs in `jobs` that are `Job::New`.
    new: usize,
}

impl Ready {
    pub fn push_back(&mut self, job: Job) {
        if matches!(job, Job::New(_)) {
            self.new += 1;
        }
        self.jobs.push_back(job);
    }

    pub fn pop_front(&mut self) -> Option<Job> {
        let job = self.jobs.pop_front()?;
        if matches!(job, Job::New(_)) {
            self.new -= 1;
        }
        Some(job)
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Accepted connections still waiting for their first worker.
    pub fn new_connections(&self) -> usize {
        self.new
    }
}
