//! The MPM's settings for one configuration generation (StartServers … ThreadLimit,
//! RWorkerQueue), their defaults, and every clamp applied to them, exactly where and how
//! the stock worker MPM clamps (worker.c `worker_check_config` and `worker_run`). The
//! clamps are pure functions: they return the adjustments to log, and are unit-tested.
//!
//! Storage: one process-wide [`Settings`] value, reset to the defaults at every
//! pre_config (httpd re-reads the configuration on every pass), written only by the
//! parent's single-threaded phases and read as a copy everywhere. State that must
//! survive a restart lives in the retained block (`crate::ffi::retained`), never here.

use std::os::raw::c_int;

use crate::ffi::httpd::SingleThreaded;
use crate::ffi::phase::PhaseCell;

/// Hard upper bound for ServerLimit (worker.c MAX_SERVER_LIMIT).
pub const MAX_SERVER_LIMIT: c_int = 20000;
/// Hard upper bound for ThreadLimit (worker.c MAX_THREAD_LIMIT).
pub const MAX_THREAD_LIMIT: c_int = 20000;
/// Default StartServers.
pub const DEFAULT_START_DAEMON: c_int = 3;
/// Default ThreadsPerChild.
pub const DEFAULT_THREADS_PER_CHILD: c_int = 25;
/// Default ServerLimit.
pub const DEFAULT_SERVER_LIMIT: c_int = 16;
/// Default ThreadLimit.
pub const DEFAULT_THREAD_LIMIT: c_int = 64;
/// Default MinSpareThreads (3 children's worth).
pub const DEFAULT_MIN_SPARE_THREADS: c_int = 3 * DEFAULT_THREADS_PER_CHILD;
/// Default MaxSpareThreads (10 children's worth).
pub const DEFAULT_MAX_SPARE_THREADS: c_int = 10 * DEFAULT_THREADS_PER_CHILD;
/// Default MaxRequestWorkers (ServerLimit × ThreadsPerChild).
pub const DEFAULT_MAX_WORKERS: c_int = DEFAULT_SERVER_LIMIT * DEFAULT_THREADS_PER_CHILD;

/// Which listener → worker hand-off a child uses (`RWorkerQueue`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// rworker's own atomics-based fdqueue and queue_info (`rworker-queue`).
    Atomic,
    /// httpd's own mutex + condition-variable fdqueue (`ap_queue_*`, exported by the
    /// server binary), to A/B the queues with the process model held constant.
    Apr,
}

/// What holds a connection between its requests (`RWorkerKeepAlive`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepAliveMode {
    /// Its worker thread, waiting in a blocking read (the stock worker MPM's way, for A/B).
    Thread,
    /// Nobody (the default): it waits in its child's event set, which idle workers take
    /// turns on, until the client speaks; lingering closes wait there too (event's scale,
    /// without event's closing of idle connections under load).
    Park,
}

/// Who accepts a child's connections (`RWorkerAccept`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptMode {
    /// Idle worker threads accept for themselves, each blocked in accept on the listening
    /// socket (the kernel hands each connection to exactly one of them): no listener
    /// wake, no queue, no futex per connection. Only where it can work: one listening
    /// socket per bucket, no accept mutex (see [`AcceptMode::effective`]). With
    /// `RWorkerKeepAlive park` the listener thread still watches parked connections.
    Workers,
    /// The listener thread accepts and hands the connection to an idle worker through the
    /// fdqueue (the stock worker MPM's way).
    Listener,
}

/// Why a child accepts with its listener thread although `RWorkerAccept workers` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerBecause {
    /// Several listening sockets: a worker cannot block in accept on more than one.
    Sockets,
    /// An accept mutex serialises accept across children.
    AcceptMutex,
    /// `RWorkerQueue apr`, which exists to A/B the listener's hand-off.
    AprQueue,
    /// A module replaced the listening socket's accept function (it may keep state).
    AcceptFunction,
    /// The open-file limit: each worker blocked in accept holds a descriptor (the kernel
    /// reserves the new connection's number first), so ThreadsPerChild idle workers need
    /// that many on top of what the child already has open.
    OpenFiles,
}

/// Descriptors a child keeps for itself beyond one per worker blocked in accept (its
/// listening sockets, logs, scoreboard, pipe of death, modules' files).
pub const ACCEPT_FD_RESERVE: u64 = 64;

/// What a child has that decides whether its workers can accept (see
/// [`AcceptMode::effective`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptSite {
    /// Listening sockets in the child's bucket.
    pub sockets: usize,
    /// Whether accept is serialised with a mutex.
    pub accept_mutex: bool,
    /// Whether every socket's accept function is httpd's own `ap_unixd_accept`.
    pub stock_accept: bool,
    /// The soft open-file limit (RLIMIT_NOFILE), `u64::MAX` for none.
    pub open_files: u64,
}

impl AcceptMode {
    /// The mode a child runs: `Workers` falls back to `Listener` (saying why) where a
    /// worker cannot block in accept alone; see [`ListenerBecause`].
    pub fn effective(self, s: &Settings, site: AcceptSite) -> Result<AcceptMode, ListenerBecause> {
        if self == AcceptMode::Listener {
            return Ok(AcceptMode::Listener);
        }
        if site.sockets != 1 {
            Err(ListenerBecause::Sockets)
        } else if site.accept_mutex {
            Err(ListenerBecause::AcceptMutex)
        } else if s.queue == QueueKind::Apr {
            Err(ListenerBecause::AprQueue)
        } else if !site.stock_accept {
            Err(ListenerBecause::AcceptFunction)
        } else if (s.threads_per_child.max(1) as u64).saturating_add(ACCEPT_FD_RESERVE)
            > site.open_files
        {
            Err(ListenerBecause::OpenFiles)
        } else {
            Ok(AcceptMode::Workers)
        }
    }
}

/// The MPM's tunables for one configuration generation, in httpd's units (processes,
/// threads). Field names follow worker.c's variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// StartServers: children forked at start-up (>= 1, <= daemons_limit).
    pub daemons_to_start: c_int,
    /// MinSpareThreads: idle threads below which the parent forks (>= 1).
    pub min_spare_threads: c_int,
    /// MaxSpareThreads: idle threads above which the parent sheds a child.
    pub max_spare_threads: c_int,
    /// MaxRequestWorkers: a multiple of ThreadsPerChild, <= ServerLimit × ThreadsPerChild.
    pub max_workers: c_int,
    /// ThreadsPerChild: worker threads per child, 1..=ThreadLimit.
    pub threads_per_child: c_int,
    /// ServerLimit: scoreboard process slots, fixed at first start.
    pub server_limit: c_int,
    /// ThreadLimit: scoreboard thread slots per process, fixed at first start.
    pub thread_limit: c_int,
    /// MaxRequestWorkers / ThreadsPerChild: process slots in use.
    pub daemons_limit: c_int,
    /// RWorkerQueue: the hand-off implementation.
    pub queue: QueueKind,
    /// RWorkerKeepAlive: what holds a connection between requests.
    pub keep_alive: KeepAliveMode,
    /// RWorkerAccept: who accepts connections (before the fallbacks of
    /// [`AcceptMode::effective`]).
    pub accept: AcceptMode,
    /// mpm_event's AsyncRequestWorkerFactor was given (it has no effect here; the check
    /// pass says so once).
    pub async_request_worker_factor: bool,
    /// `-X` / `-DONE_PROCESS` / `-DDEBUG`: serve from the parent, no fork.
    pub one_process: bool,
    /// `-DFOREGROUND` (or DEBUG): do not detach.
    pub foreground: bool,
    /// `-DNO_DETACH`: detach from the terminal but stay in the foreground session.
    pub no_detach: bool,
}

impl Settings {
    /// The stock defaults (mpm_default.h and worker.c).
    pub const DEFAULT: Settings = Settings {
        daemons_to_start: DEFAULT_START_DAEMON,
        min_spare_threads: DEFAULT_MIN_SPARE_THREADS,
        max_spare_threads: DEFAULT_MAX_SPARE_THREADS,
        max_workers: DEFAULT_MAX_WORKERS,
        threads_per_child: DEFAULT_THREADS_PER_CHILD,
        server_limit: DEFAULT_SERVER_LIMIT,
        thread_limit: DEFAULT_THREAD_LIMIT,
        daemons_limit: DEFAULT_SERVER_LIMIT,
        queue: QueueKind::Atomic,
        keep_alive: KeepAliveMode::Park,
        accept: AcceptMode::Workers,
        async_request_worker_factor: false,
        one_process: false,
        foreground: false,
        no_detach: false,
    };
}

static SETTINGS: PhaseCell<Settings> = PhaseCell::new(Settings::DEFAULT);

/// A copy of the current generation's settings.
pub fn get() -> Settings {
    SETTINGS.get()
}

/// Changes the current generation's settings (configuration phase, parent).
pub fn update(token: SingleThreaded, f: impl FnOnce(&mut Settings)) {
    SETTINGS.update(token, f)
}

/// ServerLimit and ThreadLimit as first started (the scoreboard is sized once); 0 until
/// the first check_config. Kept in the retained block between passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FirstLimits {
    /// ServerLimit at first start.
    pub server_limit: c_int,
    /// ThreadLimit at first start.
    pub thread_limit: c_int,
}

/// One clamp to log: the stock message numbers (console at first start, error log on a
/// restart) and the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adjustment {
    /// `AHnnnnn` for the first start's console line.
    pub at_start: u32,
    /// `AHnnnnn` for a restart's error-log line.
    pub at_restart: u32,
    /// What was changed and why.
    pub text: String,
}

impl Adjustment {
    fn new(ids: (u32, u32), text: String) -> Adjustment {
        Adjustment {
            at_start: ids.0,
            at_restart: ids.1,
            text,
        }
    }
}

/// Clamps a ServerLimit / ThreadLimit value to its hard bounds, then pins it to its
/// first value (`first`, 0 = this is the first start, which records it).
fn scoreboard_limit(
    value: &mut c_int,
    first: &mut c_int,
    name: &str,
    unit: &str,
    max: c_int,
    ids: [u32; 5],
    out: &mut Vec<Adjustment>,
) {
    if *value > max {
        out.push(Adjustment::new(
            (ids[0], ids[1]),
            format!("{name} of {value} exceeds compile-time limit of {max} {unit}, decreasing to {max}."),
        ));
        *value = max;
    } else if *value < 1 {
        out.push(Adjustment::new(
            (ids[2], ids[3]),
            format!("{name} of {value} not allowed, increasing to 1."),
        ));
        *value = 1;
    }
    if *first == 0 {
        *first = *value;
    } else if *value != *first {
        out.push(Adjustment::new(
            (ids[4], ids[4]),
            format!("changing {name} to {value} from original value of {first} not allowed during restart"),
        ));
        *value = *first;
    }
}

/// Validates and clamps the directives as read (check_config), in the stock worker's
/// order and with its messages. `first` carries ServerLimit / ThreadLimit across restarts.
pub fn clamp(s: &mut Settings, first: &mut FirstLimits) -> Vec<Adjustment> {
    let mut out = Vec::new();
    scoreboard_limit(
        &mut s.server_limit,
        &mut first.server_limit,
        "ServerLimit",
        "servers",
        MAX_SERVER_LIMIT,
        [300, 301, 302, 303, 304],
        &mut out,
    );
    scoreboard_limit(
        &mut s.thread_limit,
        &mut first.thread_limit,
        "ThreadLimit",
        "threads",
        MAX_THREAD_LIMIT,
        [305, 306, 307, 308, 309],
        &mut out,
    );

    if s.threads_per_child > s.thread_limit {
        out.push(Adjustment::new((310, 311), format!(
            "ThreadsPerChild of {} exceeds ThreadLimit of {}, decreasing to match. To increase, please see the ThreadLimit directive.",
            s.threads_per_child, s.thread_limit
        )));
        s.threads_per_child = s.thread_limit;
    } else if s.threads_per_child < 1 {
        out.push(Adjustment::new(
            (312, 313),
            format!(
                "ThreadsPerChild of {} not allowed, increasing to 1.",
                s.threads_per_child
            ),
        ));
        s.threads_per_child = 1;
    }

    if s.max_workers < s.threads_per_child {
        out.push(Adjustment::new((314, 315), format!(
            "MaxRequestWorkers of {} is less than ThreadsPerChild of {}, increasing to {}. MaxRequestWorkers must be at least as large as the number of threads in a single server.",
            s.max_workers, s.threads_per_child, s.threads_per_child
        )));
        s.max_workers = s.threads_per_child;
    }
    s.daemons_limit = s.max_workers / s.threads_per_child;
    if s.max_workers % s.threads_per_child != 0 {
        let rounded = s.daemons_limit * s.threads_per_child;
        out.push(Adjustment::new((316, 317), format!(
            "MaxRequestWorkers of {} is not an integer multiple of ThreadsPerChild of {}, decreasing to nearest multiple {}, for a maximum of {} servers.",
            s.max_workers, s.threads_per_child, rounded, s.daemons_limit
        )));
        s.max_workers = rounded;
    }
    if s.daemons_limit > s.server_limit {
        out.push(Adjustment::new((318, 319), format!(
            "MaxRequestWorkers of {} would require {} servers and would exceed ServerLimit of {}, decreasing to {}. To increase, please see the ServerLimit directive.",
            s.max_workers,
            s.daemons_limit,
            s.server_limit,
            s.server_limit * s.threads_per_child
        )));
        s.daemons_limit = s.server_limit;
        s.max_workers = s.server_limit * s.threads_per_child;
    }

    if s.daemons_to_start < 1 {
        out.push(Adjustment::new(
            (320, 321),
            format!(
                "StartServers of {} not allowed, increasing to 1.",
                s.daemons_to_start
            ),
        ));
        s.daemons_to_start = 1;
    }
    if s.min_spare_threads < 1 {
        out.push(Adjustment::new((322, 323), format!("MinSpareThreads of {} not allowed, increasing to 1 to avoid almost certain server failure. Please read the documentation.", s.min_spare_threads)));
        s.min_spare_threads = 1;
    }
    // MaxSpareThreads is raised to a workable value by `fit_buckets` (it depends on the
    // number of listener buckets, known only after open_logs).
    out
}

/// Raises the limits that depend on the number of listener buckets `nb` (known after
/// open_logs; the parent applies this when a generation starts, as worker.c's
/// `worker_run` does): at least one child and one spare thread per bucket, and room
/// between MinSpareThreads and MaxSpareThreads for a whole child per bucket. Silent, as
/// in the stock MPM.
pub fn fit_buckets(s: &mut Settings, nb: c_int) {
    let nb = nb.max(1);
    s.daemons_limit = s.daemons_limit.max(nb);
    s.daemons_to_start = s.daemons_to_start.max(nb);
    s.min_spare_threads = s.min_spare_threads.max(s.threads_per_child * (nb - 1) + nb);
    s.max_spare_threads = s
        .max_spare_threads
        .max(s.min_spare_threads + (s.threads_per_child + 1) * nb);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_accept_only_where_a_worker_can_block_in_accept() {
        let s = Settings::DEFAULT; // ThreadsPerChild 25
        let one = AcceptSite {
            sockets: 1,
            accept_mutex: false,
            stock_accept: true,
            open_files: 1024,
        };
        let w = |s: &Settings, site| AcceptMode::Workers.effective(s, site);
        assert_eq!(w(&s, one), Ok(AcceptMode::Workers));
        let two = AcceptSite { sockets: 2, ..one };
        assert_eq!(w(&s, two), Err(ListenerBecause::Sockets));
        let mutex = AcceptSite {
            accept_mutex: true,
            ..one
        };
        assert_eq!(w(&s, mutex), Err(ListenerBecause::AcceptMutex));
        let park = Settings {
            keep_alive: KeepAliveMode::Park,
            ..s
        };
        assert_eq!(w(&park, one), Ok(AcceptMode::Workers));
        let apr = Settings {
            queue: QueueKind::Apr,
            ..s
        };
        assert_eq!(w(&apr, one), Err(ListenerBecause::AprQueue));
        let module = AcceptSite {
            stock_accept: false,
            ..one
        };
        assert_eq!(w(&s, module), Err(ListenerBecause::AcceptFunction));
        assert_eq!(
            AcceptMode::Listener.effective(&s, one),
            Ok(AcceptMode::Listener)
        );
    }

    #[test]
    fn workers_accept_needs_a_descriptor_each_on_top_of_the_reserve() {
        let s = Settings {
            threads_per_child: 1100,
            ..Settings::DEFAULT
        };
        let site = |open_files| AcceptSite {
            sockets: 1,
            accept_mutex: false,
            stock_accept: true,
            open_files,
        };
        let w = |n| AcceptMode::Workers.effective(&s, site(n));
        assert_eq!(w(1024), Err(ListenerBecause::OpenFiles));
        assert_eq!(
            w(1100 + ACCEPT_FD_RESERVE - 1),
            Err(ListenerBecause::OpenFiles)
        );
        assert_eq!(w(1100 + ACCEPT_FD_RESERVE), Ok(AcceptMode::Workers));
        assert_eq!(w(u64::MAX), Ok(AcceptMode::Workers));
    }

    fn clamped(f: impl FnOnce(&mut Settings)) -> (Settings, Vec<u32>) {
        let mut s = Settings::DEFAULT;
        f(&mut s);
        let mut first = FirstLimits::default();
        let adj = clamp(&mut s, &mut first);
        (s, adj.iter().map(|a| a.at_start).collect())
    }

    #[test]
    fn defaults_pass_unchanged() {
        let (s, ids) = clamped(|_| {});
        assert!(ids.is_empty());
        assert_eq!(s.daemons_limit, DEFAULT_SERVER_LIMIT);
        assert_eq!(s.max_workers, DEFAULT_MAX_WORKERS);
    }

    #[test]
    fn max_request_workers_rounds_down_to_a_multiple() {
        let (s, ids) = clamped(|s| s.max_workers = 160);
        assert_eq!((s.max_workers, s.daemons_limit), (150, 6));
        assert_eq!(ids, vec![316]);
    }

    #[test]
    fn max_request_workers_below_threads_per_child_rises() {
        let (s, ids) = clamped(|s| s.max_workers = 10);
        assert_eq!((s.max_workers, s.daemons_limit), (25, 1));
        assert_eq!(ids, vec![314]);
    }

    #[test]
    fn max_request_workers_beyond_server_limit_is_capped() {
        let (s, ids) = clamped(|s| {
            s.server_limit = 2;
            s.max_workers = 500;
        });
        assert_eq!((s.max_workers, s.daemons_limit), (50, 2));
        assert_eq!(ids, vec![318]);
    }

    #[test]
    fn threads_per_child_is_bounded_by_thread_limit_and_one() {
        let (s, ids) = clamped(|s| s.threads_per_child = 100);
        assert_eq!(s.threads_per_child, DEFAULT_THREAD_LIMIT);
        // 400 MaxRequestWorkers is then no multiple of 64: rounded down to 6 children.
        assert_eq!(ids, vec![310, 316]);
        assert_eq!((s.max_workers, s.daemons_limit), (384, 6));
        let (s, ids) = clamped(|s| s.threads_per_child = 0);
        assert_eq!(s.threads_per_child, 1);
        // 400 MaxRequestWorkers of 1 thread would need 400 children: capped at ServerLimit.
        assert_eq!(ids, vec![312, 318]);
        assert_eq!((s.max_workers, s.daemons_limit), (16, 16));
    }

    #[test]
    fn hard_limits_and_floors() {
        let (s, ids) = clamped(|s| {
            s.server_limit = 50_000;
            s.thread_limit = -3;
            s.threads_per_child = 1;
            s.max_workers = 1;
            s.daemons_to_start = 0;
            s.min_spare_threads = -1;
        });
        assert_eq!(s.server_limit, MAX_SERVER_LIMIT);
        assert_eq!(s.thread_limit, 1);
        assert_eq!(s.daemons_to_start, 1);
        assert_eq!(s.min_spare_threads, 1);
        assert_eq!(ids, vec![300, 307, 320, 322]);
    }

    #[test]
    fn scoreboard_limits_are_pinned_across_restarts() {
        let mut first = FirstLimits::default();
        let mut s = Settings::DEFAULT;
        assert!(clamp(&mut s, &mut first).is_empty());
        assert_eq!(
            first,
            FirstLimits {
                server_limit: 16,
                thread_limit: 64
            }
        );
        let mut s = Settings {
            server_limit: 32,
            thread_limit: 128,
            ..Settings::DEFAULT
        };
        let adj = clamp(&mut s, &mut first);
        assert_eq!((s.server_limit, s.thread_limit), (16, 64));
        assert_eq!(
            adj.iter().map(|a| a.at_restart).collect::<Vec<_>>(),
            vec![304, 309]
        );
        assert!(adj[0].text.contains("from original value of 16"), "{adj:?}");
    }

    #[test]
    fn buckets_raise_spares_and_children() {
        let mut s = Settings {
            daemons_to_start: 1,
            daemons_limit: 1,
            min_spare_threads: 1,
            max_spare_threads: 1,
            ..Settings::DEFAULT
        };
        fit_buckets(&mut s, 2);
        assert_eq!((s.daemons_to_start, s.daemons_limit), (2, 2));
        assert_eq!(s.min_spare_threads, 25 + 2);
        assert_eq!(s.max_spare_threads, 27 + 26 * 2);
        // One bucket: only MaxSpareThreads may rise (to MinSpareThreads + a child + 1).
        let mut s = Settings {
            min_spare_threads: 5,
            max_spare_threads: 6,
            ..Settings::DEFAULT
        };
        fit_buckets(&mut s, 1);
        assert_eq!((s.min_spare_threads, s.max_spare_threads), (5, 31));
    }
}
