//! The open-file limit (RLIMIT_NOFILE) against the connections a child holds: each one
//! is a descriptor, and a parking child (`RWorkerKeepAlive park`) holds many more
//! connections than it has threads.
//!
//! - The parent raises its soft limit to the hard limit when it starts, and its children
//!   inherit it (what systemd advises programs that need many descriptors: its default soft
//!   limit, 1,024, would let a parking child hold little more than a thousand connections).
//! - A parking child holds at most [`connection_budget`] connections. At that count it
//!   stops accepting: new clients go to its siblings, or wait in the backlog. So it does
//!   not meet EMFILE, which the core reports as a broken listener (AH02179): the child
//!   would retire sick and drop every connection it holds. Should a module's own
//!   descriptors bring EMFILE anyway, the child takes no more until its next close
//!   (`parking::shortage`).
//! - The parent counts a child at its limit as having no idle thread (it takes no new
//!   connection), so it forks another where MaxRequestWorkers allows, and warns once
//!   (RW00041, `parent::maintenance`).

use crate::ffi::log::level;
use crate::ffi::process;

/// Descriptors a child keeps free per worker beyond its connections: one for what the
/// worker serves (a file, a CGI pipe, a proxied backend) and one for a connection it
/// accepts after the budget was reached (it was already waiting in accept).
pub const RESERVE_PER_WORKER: u64 = 2;
/// Descriptors a child keeps free beyond those per worker: log files a module opens,
/// resolver sockets, and the like.
pub const RESERVE: u64 = 32;

/// The soft limit the parent sets at start: the hard limit (bounded by the kernel's
/// `ceiling`, fs.nr_open, when the hard limit is unlimited), when above the soft one.
pub fn soft_limit_to_set(soft: u64, hard: u64, ceiling: Option<u64>) -> Option<u64> {
    let target = match (hard, ceiling) {
        (u64::MAX, None) => return None,
        (u64::MAX, Some(c)) => c,
        (h, _) => h,
    };
    (target > soft).then_some(target)
}

/// The connections a child may hold under a soft limit of `limit` descriptors, with
/// `in_use` open before it serves (listeners, logs, pipes, what modules opened) and
/// `threads_per_child` workers: at least one.
pub fn connection_budget(limit: u64, in_use: u64, threads_per_child: usize) -> usize {
    if limit == u64::MAX {
        return usize::MAX;
    }
    let reserve = in_use + RESERVE + RESERVE_PER_WORKER * threads_per_child as u64;
    limit.saturating_sub(reserve).max(1) as usize
}

/// The parent, before it forks: raises the soft limit (see the module doc), and says so at
/// info with the figures and how to cap it.
pub fn raise_soft_limit() {
    let Some((soft, hard)) = process::open_files_limits() else {
        return;
    };
    let Some(to) = soft_limit_to_set(soft, hard, process::kernel_open_files_ceiling()) else {
        return;
    };
    match process::set_open_files_soft_limit(to) {
        Ok(()) => crate::mpm_log!(
            level::INFO,
            0,
            "RW00040: raised the open-file limit from {soft} to {to} (the hard limit), so that children can hold their connections; to cap it, lower the hard limit (ulimit -Hn, or LimitNOFILE= under systemd)"
        ),
        Err(errno) => crate::mpm_log!(
            level::INFO,
            errno,
            "RW00040: could not raise the open-file limit from {soft} to {to}"
        ),
    }
}

/// A child, before its threads start: the connections it may hold (`usize::MAX` when
/// the limit is unknown or unlimited).
pub fn child_connection_budget(threads_per_child: usize) -> usize {
    match (process::open_files_limits(), process::descriptors_in_use()) {
        (Some((soft, _)), Some(in_use)) => connection_budget(soft, in_use, threads_per_child),
        _ => usize::MAX,
    }
}

/// The most descriptor numbers a child can have (its soft limit), which bounds the slots
/// of its parked connections; capped for a limit that is unlimited or unknown.
pub fn descriptor_ceiling() -> usize {
    const CAP: u64 = 1 << 24;
    process::open_files_limits().map_or(CAP, |(soft, _)| soft.min(CAP)) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_rises_to_the_hard_one() {
        // systemd's defaults.
        assert_eq!(
            soft_limit_to_set(1024, 524_288, Some(1_048_576)),
            Some(524_288)
        );
        // Already there (apache2ctl's `ulimit -n 8192` sets both).
        assert_eq!(soft_limit_to_set(8192, 8192, Some(1_048_576)), None);
        // An unlimited hard limit: as far as the kernel allows, or not at all when unknown.
        assert_eq!(
            soft_limit_to_set(1024, u64::MAX, Some(1_048_576)),
            Some(1_048_576)
        );
        assert_eq!(soft_limit_to_set(1024, u64::MAX, None), None);
        assert_eq!(soft_limit_to_set(u64::MAX, u64::MAX, Some(1 << 20)), None);
    }

    #[test]
    fn a_child_keeps_descriptors_for_its_workers_and_modules() {
        // Debian's sizing under a limit of 1,024 with 20 descriptors open at start:
        // 1,024 - 20 - 32 - 2 x 25.
        assert_eq!(connection_budget(1024, 20, 25), 922);
        assert_eq!(connection_budget(u64::MAX, 20, 25), usize::MAX);
        // A limit below the reserve still lets the child take a connection.
        assert_eq!(connection_budget(64, 40, 25), 1);
    }
}
