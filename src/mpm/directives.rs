//! The MPM's directives: the C shim's table names them (StartServers … ThreadLimit,
//! RWorkerQueue) and sends every one to [`rworker_set_directive`], which dispatches on
//! the directive's name, so the table and this file share nothing but the names.
//! Parsing is pure ([`parse`], unit-tested); values are clamped later, with a warning,
//! by `settings::clamp`, as the stock worker does.

use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

use crate::ffi::directive::DirectiveCall;
use crate::ffi::httpd::SingleThreaded;
use crate::ffi::log::level;
use crate::ffi::{fdqueue, panic};
use crate::mpm::settings::{self, AcceptMode, KeepAliveMode, QueueKind, Settings};

/// A keyword argument: the value of the (case-insensitive) keyword `arg` names among
/// `choices`, or the error message that lists them ("RWorkerX takes 'a' or 'b', not 'c'").
fn one_of<T: Copy, const N: usize>(
    directive: &str,
    arg: &str,
    choices: [(&str, T); N],
) -> Result<T, String> {
    let word = arg.trim().to_ascii_lowercase();
    choices
        .iter()
        .find(|(name, _)| *name == word)
        .map(|&(_, v)| v)
        .ok_or_else(|| {
            let names: Vec<String> = choices.iter().map(|(n, _)| format!("'{n}'")).collect();
            format!("{directive} takes {}, not '{arg}'", names.join(" or "))
        })
}

/// One directive's parsed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directive {
    /// StartServers.
    StartServers(c_int),
    /// MinSpareThreads.
    MinSpareThreads(c_int),
    /// MaxSpareThreads.
    MaxSpareThreads(c_int),
    /// MaxRequestWorkers, or its deprecated name MaxClients (`deprecated_name`).
    MaxRequestWorkers { value: c_int, deprecated_name: bool },
    /// ThreadsPerChild.
    ThreadsPerChild(c_int),
    /// ServerLimit.
    ServerLimit(c_int),
    /// ThreadLimit.
    ThreadLimit(c_int),
    /// RWorkerQueue.
    Queue(QueueKind),
    /// RWorkerKeepAlive.
    KeepAlive(KeepAliveMode),
    /// RWorkerAccept.
    Accept(AcceptMode),
    /// mpm_event's AsyncRequestWorkerFactor: accepted for configurations ported from event,
    /// with no effect (`check_config` says so).
    AsyncRequestWorkerFactor,
}

impl Directive {
    /// Stores the value in `s`.
    pub fn apply(self, s: &mut Settings) {
        match self {
            Directive::StartServers(v) => s.daemons_to_start = v,
            Directive::MinSpareThreads(v) => s.min_spare_threads = v,
            Directive::MaxSpareThreads(v) => s.max_spare_threads = v,
            Directive::MaxRequestWorkers { value, .. } => s.max_workers = value,
            Directive::ThreadsPerChild(v) => s.threads_per_child = v,
            Directive::ServerLimit(v) => s.server_limit = v,
            Directive::ThreadLimit(v) => s.thread_limit = v,
            Directive::Queue(q) => s.queue = q,
            Directive::KeepAlive(k) => s.keep_alive = k,
            Directive::Accept(a) => s.accept = a,
            Directive::AsyncRequestWorkerFactor => s.async_request_worker_factor = true,
        }
    }
}

/// Parses an integer as httpd admins write it: optionally signed decimal with
/// surrounding blanks. Values beyond `c_int` saturate (the clamps then warn); anything
/// else is an error naming the directive.
fn parse_int(name: &str, arg: &str) -> Result<c_int, String> {
    let t = arg.trim();
    let digits = t.strip_prefix(['+', '-']).unwrap_or(t);
    match t.parse::<i64>() {
        Ok(v) => Ok(v.clamp(c_int::MIN as i64, c_int::MAX as i64) as c_int),
        // All digits but beyond i64: saturate, and let the clamps warn.
        Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(if t.starts_with('-') {
                c_int::MIN
            } else {
                c_int::MAX
            })
        }
        Err(_) => Err(format!("{name} takes an integer argument, not '{arg}'")),
    }
}

/// Parses directive `name` (as the table spells it; httpd matches names without
/// regard to case) with argument `arg`. `apr_queue_available` says whether the
/// running server exports httpd's fdqueue (for `RWorkerQueue apr`).
pub fn parse(
    name: &str,
    arg: &str,
    apr_queue_available: impl FnOnce() -> Result<(), String>,
) -> Result<Directive, String> {
    let int = || parse_int(name, arg);
    Ok(match name.to_ascii_lowercase().as_str() {
        "startservers" => Directive::StartServers(int()?),
        "minsparethreads" => Directive::MinSpareThreads(int()?),
        "maxsparethreads" => Directive::MaxSpareThreads(int()?),
        "maxrequestworkers" => Directive::MaxRequestWorkers {
            value: int()?,
            deprecated_name: false,
        },
        "maxclients" => Directive::MaxRequestWorkers {
            value: int()?,
            deprecated_name: true,
        },
        "threadsperchild" => Directive::ThreadsPerChild(int()?),
        "serverlimit" => Directive::ServerLimit(int()?),
        "threadlimit" => Directive::ThreadLimit(int()?),
        "rworkerqueue" => Directive::Queue(
            match one_of(
                "RWorkerQueue",
                arg,
                [("atomic", QueueKind::Atomic), ("apr", QueueKind::Apr)],
            )? {
                QueueKind::Apr => {
                    apr_queue_available().map_err(|missing| {
                        format!("RWorkerQueue apr: this httpd does not export {missing} (httpd's fdqueue API, 2.4.x); use RWorkerQueue atomic")
                    })?;
                    QueueKind::Apr
                }
                q => q,
            },
        ),
        "rworkerkeepalive" => Directive::KeepAlive(one_of(
            "RWorkerKeepAlive",
            arg,
            [
                ("park", KeepAliveMode::Park),
                ("thread", KeepAliveMode::Thread),
            ],
        )?),
        "rworkeraccept" => Directive::Accept(one_of(
            "RWorkerAccept",
            arg,
            [
                ("workers", AcceptMode::Workers),
                ("listener", AcceptMode::Listener),
            ],
        )?),
        // event's check and message (a positive number, decimals allowed).
        "asyncrequestworkerfactor" => match arg.trim().parse::<f64>() {
            Ok(f) if f > 0.0 && f.is_finite() => Directive::AsyncRequestWorkerFactor,
            _ => return Err("AsyncRequestWorkerFactor argument must be a positive number".into()),
        },
        _ => {
            return Err(format!(
                "rworker: the C shim's table names a directive it does not handle: {name}"
            ))
        }
    })
}

/// The one handler behind every MPM directive of the shim's table. Returns NULL on
/// success or an error string in the configuration pool, which httpd prints with the
/// file and line.
///
/// # Safety
/// Called by httpd's configuration parser with a valid `cmd_parms` and NUL-terminated
/// `arg`, in the parent's single-threaded configuration phase.
#[no_mangle]
pub unsafe extern "C" fn rworker_set_directive(
    cmd: *mut crate::sys::cmd_parms,
    _dummy: *mut c_void,
    arg: *const c_char,
) -> *const c_char {
    let _place = panic::enter("directive handler");
    // SAFETY: httpd's arguments for the handler now running (this function's contract).
    let Some(call) = (unsafe { DirectiveCall::new(cmd, arg) }) else {
        return std::ptr::null();
    };
    let refused = call.check_global_only();
    if !refused.is_null() {
        return refused;
    }
    match parse(&call.name(), call.arg(), fdqueue::available) {
        Ok(d) => {
            if let Directive::MaxRequestWorkers {
                deprecated_name: true,
                ..
            } = d
            {
                crate::mpm_log!(
                    level::INFO,
                    0,
                    "AH00324: MaxClients is deprecated, use MaxRequestWorkers instead."
                );
            }
            // SAFETY: directives are parsed by the parent's single-threaded
            // configuration phase (this function's contract).
            let token = unsafe { SingleThreaded::assume() };
            settings::update(token, |s| d.apply(s));
            std::ptr::null()
        }
        Err(e) => call.error(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(name: &str, arg: &str) -> Directive {
        parse(name, arg, || Ok(())).unwrap()
    }

    fn err(name: &str, arg: &str) -> String {
        parse(name, arg, || Err("ap_queue_create".into())).unwrap_err()
    }

    #[test]
    fn integers_as_admins_write_them() {
        assert_eq!(ok("StartServers", " 4 "), Directive::StartServers(4));
        assert_eq!(ok("MinSpareThreads", "+25"), Directive::MinSpareThreads(25));
        assert_eq!(ok("MaxSpareThreads", "-1"), Directive::MaxSpareThreads(-1));
        assert_eq!(ok("threadlimit", "64"), Directive::ThreadLimit(64));
        assert_eq!(
            ok("ServerLimit", "99999999999"),
            Directive::ServerLimit(c_int::MAX)
        );
        assert_eq!(
            ok("ThreadsPerChild", "-99999999999999999999999"),
            Directive::ThreadsPerChild(c_int::MIN)
        );
    }

    #[test]
    fn garbage_names_the_directive() {
        assert_eq!(
            err("StartServers", "lots"),
            "StartServers takes an integer argument, not 'lots'"
        );
        assert!(err("ThreadsPerChild", "").contains("ThreadsPerChild"));
        assert!(err("ServerLimit", "1e3").contains("not '1e3'"));
        assert!(err("MaxRequestWorkers", "--5").contains("integer"));
    }

    #[test]
    fn max_clients_is_the_deprecated_name() {
        assert_eq!(
            ok("MaxClients", "150"),
            Directive::MaxRequestWorkers {
                value: 150,
                deprecated_name: true
            }
        );
        assert_eq!(
            ok("MaxRequestWorkers", "150"),
            Directive::MaxRequestWorkers {
                value: 150,
                deprecated_name: false
            }
        );
    }

    #[test]
    fn queue_kinds() {
        assert_eq!(
            ok("RWorkerQueue", "Atomic"),
            Directive::Queue(QueueKind::Atomic)
        );
        assert_eq!(ok("RWorkerQueue", " apr"), Directive::Queue(QueueKind::Apr));
        assert!(err("RWorkerQueue", "apr").contains("does not export ap_queue_create"));
        assert_eq!(
            err("RWorkerQueue", "mutex"),
            "RWorkerQueue takes 'atomic' or 'apr', not 'mutex'"
        );
    }

    #[test]
    fn async_request_worker_factor_is_taken_as_event_takes_it() {
        assert_eq!(
            ok("AsyncRequestWorkerFactor", "2"),
            Directive::AsyncRequestWorkerFactor
        );
        assert_eq!(
            ok("AsyncRequestWorkerFactor", " 1.5"),
            Directive::AsyncRequestWorkerFactor
        );
        for bad in ["0", "-1", "many"] {
            assert_eq!(
                err("AsyncRequestWorkerFactor", bad),
                "AsyncRequestWorkerFactor argument must be a positive number"
            );
        }
    }

    #[test]
    fn keep_alive_modes() {
        assert_eq!(
            ok("RWorkerKeepAlive", "Park"),
            Directive::KeepAlive(KeepAliveMode::Park)
        );
        assert_eq!(
            ok("RWorkerKeepAlive", "thread "),
            Directive::KeepAlive(KeepAliveMode::Thread)
        );
        assert_eq!(
            err("RWorkerKeepAlive", "event"),
            "RWorkerKeepAlive takes 'park' or 'thread', not 'event'"
        );
    }

    #[test]
    fn accept_modes() {
        assert_eq!(
            ok("RWorkerAccept", "Workers"),
            Directive::Accept(AcceptMode::Workers)
        );
        assert_eq!(
            ok("RWorkerAccept", " listener"),
            Directive::Accept(AcceptMode::Listener)
        );
        assert_eq!(
            err("RWorkerAccept", "leader"),
            "RWorkerAccept takes 'workers' or 'listener', not 'leader'"
        );
        let mut s = Settings::DEFAULT;
        assert_eq!(s.accept, AcceptMode::Workers, "the default");
        ok("RWorkerAccept", "listener").apply(&mut s);
        assert_eq!(s.accept, AcceptMode::Listener);
    }

    #[test]
    fn apply_stores_each_value_in_its_field() {
        let mut s = Settings::DEFAULT;
        for d in [
            ok("StartServers", "1"),
            ok("MinSpareThreads", "2"),
            ok("MaxSpareThreads", "3"),
            ok("MaxClients", "4"),
            ok("ThreadsPerChild", "5"),
            ok("ServerLimit", "6"),
            ok("ThreadLimit", "7"),
            ok("RWorkerQueue", "apr"),
        ] {
            d.apply(&mut s);
        }
        assert_eq!(
            (
                s.daemons_to_start,
                s.min_spare_threads,
                s.max_spare_threads,
                s.max_workers
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(
            (s.threads_per_child, s.server_limit, s.thread_limit),
            (5, 6, 7)
        );
        assert_eq!(s.queue, QueueKind::Apr);
    }
}
