//! One configuration pass of the parent, hook by hook: pre_config (defaults, the
//! mpm-accept mutex type, detaching on the second load of a normal start),
//! check_config (the stock clamps, logged with the stock message numbers) and
//! open_logs (listen buckets). httpd runs a pass at start-up twice and once per restart.

use std::os::raw::c_int;

use crate::ffi::httpd::{self, ServerRec, SingleThreaded};
use crate::ffi::log::level;
use crate::ffi::pool::ConfigPool;
use crate::ffi::retained::Retained;
use crate::mpm::httpd_api;
use crate::mpm::listen;
use crate::mpm::settings::{self, FirstLimits, Settings};
use crate::sys;

/// pre_config: resets the directives to their defaults and readies the pass. Returns
/// the hook's result (OK, DONE, or 500 when detaching failed, as the stock MPM returns).
pub fn pre_config(token: SingleThreaded, pconf: ConfigPool) -> c_int {
    // Before anything else: never run in an httpd older than the headers we were built with.
    if let Some(line) = httpd_api::refusal(&httpd::built_api(), &httpd::running_api()) {
        crate::mpm_log!(level::EMERG | level::STARTUP, 0, "{line}");
        return sys::DONE;
    }
    let debug = httpd::config_define(c"DEBUG");
    let one_process = debug || httpd::config_define(c"ONE_PROCESS");
    let foreground = debug || httpd::config_define(c"FOREGROUND");
    let no_detach = httpd::config_define(c"NO_DETACH");

    let r = Retained::get_or_create(token);
    r.set_mpm_state(sys::AP_MPMQ_STARTING as c_int);
    if let Err(rv) = httpd::begin_config_pass(token, pconf) {
        crate::mpm_log!(
            level::CRIT | level::STARTUP,
            rv,
            "RW00001: could not register the mpm-accept mutex"
        );
        return sys::DONE;
    }
    // A different MPM ran before us (MPM switched across restart): nothing to keep.
    if !r.claim_unixd_block() {
        r.set_was_graceful(0);
    }
    r.set_module_loads(r.module_loads() + 1);

    // The second load of a normal start is where a daemon detaches.
    if r.module_loads() == 2 && !one_process && !foreground {
        if let Err(rv) = httpd::detach(token, pconf, !no_detach) {
            crate::mpm_log!(level::CRIT, rv, "AH00299: apr_proc_detach failed");
            return 500; // HTTP_INTERNAL_SERVER_ERROR, as the stock MPM returns
        }
    }
    settings::update(token, |s| {
        *s = Settings {
            one_process,
            foreground,
            no_detach,
            ..Settings::DEFAULT
        }
    });
    sys::OK as c_int
}

/// check_config: clamps the settings, logging each adjustment as the stock worker does
/// (to the console on the first pass, to the error log on restarts).
pub fn check_config(token: SingleThreaded) -> c_int {
    let r = Retained::get_or_create(token);
    let startup = r.module_loads() == 1;
    let mut first = FirstLimits {
        server_limit: r.first_server_limit(),
        thread_limit: r.first_thread_limit(),
    };
    let mut s = settings::get();
    for a in settings::clamp(&mut s, &mut first) {
        if a.at_start == 0 {
            // rworker's own adjustment: one line, with its RW number.
            crate::mpm_log!(
                level::WARNING | if startup { level::STARTUP } else { 0 },
                0,
                "RW00030: {}",
                a.text
            );
        } else if startup {
            crate::mpm_log!(
                level::WARNING | level::STARTUP,
                0,
                "AH{:05}: WARNING: {}",
                a.at_start,
                a.text
            );
        } else {
            crate::mpm_log!(level::WARNING, 0, "AH{:05}: {}", a.at_restart, a.text);
        }
    }
    if s.async_request_worker_factor && startup {
        // A configuration ported from mpm_event: say why the directive does nothing here.
        crate::mpm_log!(
            level::NOTICE | level::STARTUP,
            0,
            "RW00050: AsyncRequestWorkerFactor has no effect with rworker: a child takes new connections while it has idle workers, and idle keep-alive connections wait without a thread and are never closed early because the workers are busy; MaxRequestWorkers and the open-file limit size the server"
        );
    }
    let grace = httpd::graceful_shutdown_timeout();
    if grace < 0 {
        // The core takes any number; the stock MPMs then cut a graceful stop at once,
        // silently. Said here, so that nobody expects "no limit" from it.
        crate::mpm_log!(
            level::WARNING | if startup { level::STARTUP } else { 0 },
            0,
            "RW00043: GracefulShutdownTimeout of {grace} is negative: a graceful stop will end in-flight requests at once; 0 means no limit"
        );
    }
    settings::update(token, |cur| *cur = s);
    r.set_first_server_limit(first.server_limit);
    r.set_first_thread_limit(first.thread_limit);
    sys::OK as c_int
}

/// open_logs: builds the generation's listen buckets.
pub fn open_logs(token: SingleThreaded, pconf: ConfigPool, s: ServerRec) -> c_int {
    let r = Retained::get_or_create(token);
    let startup = if r.module_loads() == 1 {
        level::STARTUP
    } else {
        0
    };
    if listen::open(token, pconf, s, r, startup) {
        sys::OK as c_int
    } else {
        sys::DONE
    }
}
