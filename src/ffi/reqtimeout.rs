//! mod_reqtimeout's handshake and header stages as the administrator configured them for a
//! server (`RequestReadTimeout handshake=... header=...`), read from the module's own server
//! configuration so that a TLS handshake or a head waited for without a thread is due
//! exactly when mod_reqtimeout would end it.
//!
//! It also steps over mod_reqtimeout's input filter for the length of a read ([`Aside`]),
//! where a parking child reads a head through mod_ssl between requests (`head_buffer`).
//!
//! mod_reqtimeout keeps its per-server configuration in a structure its headers do not
//! publish: three stages (handshake, header, body) of `{int timeout; int max_timeout; int
//! min_rate; apr_time_t rate_factor}`, -1 for "not set" (then its built-in defaults
//! apply). That layout has not changed since httpd 2.4.39 (the handshake stage), which
//! covers every httpd rworker supports (2.4.52 and later). It is mirrored here and
//! checked on every read: the values must be what mod_reqtimeout's own parser and merge can
//! produce (`rate_factor` is one second divided by `min_rate`, or 0 where a vhost's own
//! `RequestReadTimeout` line inherits the server's MinRate without its factor: then no
//! MinRate applies, as mod_reqtimeout applies none); anything else is [`Stage::Unknown`],
//! and the caller then leaves the head to the stock path, which mod_reqtimeout times
//! itself.

use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::time::Duration;

use crate::head::TimeoutStage;
use crate::sys;

/// One stage of mod_reqtimeout's server configuration (see the module doc).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RawStage {
    timeout: c_int,
    max_timeout: c_int,
    min_rate: c_int,
    rate_factor: sys::apr_time_t,
}

/// mod_reqtimeout's server configuration (see the module doc).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RawConfig {
    handshake: RawStage,
    header: RawStage,
    body: RawStage,
}

const UNSET: c_int = -1;

/// mod_reqtimeout's built-in header stage (its `MRT_DEFAULT_header_*`), which applies where
/// `RequestReadTimeout` does not set `header=`: 20 s, up to 40 s at 500 bytes/s.
const DEFAULT_HEADER: RawStage = RawStage {
    timeout: 20,
    max_timeout: 40,
    min_rate: 500,
    rate_factor: 1_000_000 / 500,
};

/// What governs a read stage on a server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// No such stage (mod_reqtimeout not loaded, `header=0`, `handshake=` unset or 0): the
    /// core's `Timeout` per read.
    Off,
    /// mod_reqtimeout's stage.
    Timed(TimeoutStage),
    /// mod_reqtimeout is loaded but its configuration does not read as expected.
    Unknown,
}

/// The header stage for connections whose base server is `s`.
///
/// # Safety
/// `s` is a server_rec of the running configuration, read by the calling thread while the
/// configuration lives (any time in a child).
pub unsafe fn header_stage(s: *const sys::server_rec) -> Stage {
    // SAFETY: the caller's contract.
    match unsafe { config(s) } {
        Read::Off => Stage::Off,
        Read::Unknown => Stage::Unknown,
        // Unset: mod_reqtimeout's built-in header stage.
        Read::Config(cfg) if cfg.header.timeout == UNSET => timed(DEFAULT_HEADER),
        Read::Config(cfg) => timed(cfg.header),
    }
}

/// The handshake stage for connections whose base server is `s`: mod_reqtimeout has no
/// built-in one ("disabled when unset, for compatibility"), so only `handshake=` sets it.
///
/// # Safety
/// As [`header_stage`].
pub unsafe fn handshake_stage(s: *const sys::server_rec) -> Stage {
    // SAFETY: the caller's contract.
    match unsafe { config(s) } {
        Read::Off => Stage::Off,
        Read::Unknown => Stage::Unknown,
        Read::Config(cfg) if cfg.handshake.timeout <= 0 => Stage::Off,
        Read::Config(cfg) => timed(cfg.handshake),
    }
}

/// A configured stage: off at 0 (`header=0`).
fn timed(h: RawStage) -> Stage {
    if h.timeout <= 0 {
        return Stage::Off;
    }
    Stage::Timed(TimeoutStage {
        timeout: Duration::from_secs(h.timeout as u64),
        max: (h.max_timeout > 0).then(|| Duration::from_secs(h.max_timeout as u64)),
        per_byte: Duration::from_micros(h.rate_factor.max(0) as u64),
    })
}

/// What a server's mod_reqtimeout configuration reads as.
enum Read {
    /// mod_reqtimeout is not loaded.
    Off,
    Config(RawConfig),
    /// Loaded, but its configuration does not read as expected.
    Unknown,
}

/// Server `s`'s mod_reqtimeout configuration.
///
/// # Safety
/// As [`header_stage`].
unsafe fn config(s: *const sys::server_rec) -> Read {
    // SAFETY: a NUL-terminated literal; the module list is the configuration's.
    let m = unsafe { sys::ap_find_linked_module(c"mod_reqtimeout.c".as_ptr()) };
    if m.is_null() {
        return Read::Off;
    }
    // SAFETY: the caller's contract; a loaded module has an entry in every server's
    // module_config vector, at its index, which mod_reqtimeout fills with its structure
    // (create/merge_server_config allocate one for every server).
    let cfg = unsafe {
        let index = (*m).module_index;
        let v = (*s).module_config as *const *const RawConfig;
        if v.is_null() || index < 0 {
            return Read::Unknown;
        }
        let p = *v.add(index as usize);
        if p.is_null() {
            return Read::Unknown;
        }
        *p
    };
    if ![cfg.handshake, cfg.header, cfg.body].iter().all(plausible) {
        return Read::Unknown;
    }
    Read::Config(cfg)
}

/// Values mod_reqtimeout's parser and merge can produce. Its merge takes a vhost's
/// `min_rate` from the server when the vhost's line leaves it out, but `rate_factor` from
/// the vhost (0): MinRate shown, none applied.
fn plausible(s: &RawStage) -> bool {
    let set_or_unset = |v: c_int| v >= UNSET;
    let rate_fits = s.rate_factor == 0
        || (s.min_rate > 0 && s.rate_factor == 1_000_000 / s.min_rate as sys::apr_time_t);
    set_or_unset(s.timeout) && set_or_unset(s.max_timeout) && set_or_unset(s.min_rate) && rate_fits
}

/// The pass-through that stands in for mod_reqtimeout's filter while an [`Aside`] lives.
const STAND_IN: &std::ffi::CStr = c"rworker_reqtimeout_aside";
/// Its record, set by `register_filter` in each configuration pass (before any child
/// exists) and read by the children.
static STAND_IN_REC: AtomicPtr<sys::ap_filter_rec_t> = AtomicPtr::new(ptr::null_mut());

/// Registers the stand-in (from register_hooks, once per configuration pass). It is never
/// added to a chain: an [`Aside`] lends its record to mod_reqtimeout's filter.
pub fn register_filter() {
    let ftype = sys::ap_filter_type_AP_FTYPE_CONNECTION + 8;
    crate::ffi::filter::register_input(STAND_IN, pass_through, ftype, &STAND_IN_REC);
}

/// The stand-in: the read goes on below, untouched and untimed.
unsafe extern "C" fn pass_through(
    f: *mut sys::ap_filter_t,
    bb: *mut sys::apr_bucket_brigade,
    mode: sys::ap_input_mode_t,
    block: sys::apr_read_type_e,
    readbytes: sys::apr_off_t,
) -> sys::apr_status_t {
    // SAFETY: httpd calls it for a filter of a live chain, on the thread reading it.
    unsafe { sys::ap_get_brigade((*f).next, bb, mode, block, readbytes) }
}

/// mod_reqtimeout's input filter, made a pass-through while the value lives: its filter
/// keeps its place in the chain and its state, and runs the stand-in's function instead
/// of its own (httpd calls a filter through its record), so whatever the read does to the
/// chain, dropping the value gives the filter its own record back. Between requests
/// mod_reqtimeout's stage is the last request's (the body's, if the body was never read),
/// and every read through it, non-blocking ones included, starts and checks that stage's
/// clock: the parking child's reads of a head through mod_ssl go past it, and the child's
/// own clock times them (`crate::head::clock`).
#[derive(Debug)]
pub struct Aside {
    /// mod_reqtimeout's filter and its own record (null: none in the chain).
    filter: *mut sys::ap_filter_t,
    frec: *mut sys::ap_filter_rec_t,
}

impl Aside {
    /// Steps over mod_reqtimeout's filter at or below `top`.
    ///
    /// # Safety
    /// `top` is a filter of the input chain of a live connection that the calling thread
    /// holds, and reads, while the value lives.
    pub unsafe fn new(top: *mut sys::ap_filter_t) -> Aside {
        let stand_in = STAND_IN_REC.load(Ordering::Relaxed);
        // SAFETY: a NUL-terminated literal; the registry is the running configuration's.
        let own = unsafe { sys::ap_get_input_filter_handle(c"reqtimeout".as_ptr()) };
        let mut f = top;
        if !stand_in.is_null() && !own.is_null() {
            // SAFETY: the caller's contract: the chain's filters are live, and only the
            // calling thread reads or changes them.
            unsafe {
                while !f.is_null() {
                    if (*f).frec == own {
                        (*f).frec = stand_in;
                        return Aside {
                            filter: f,
                            frec: own,
                        };
                    }
                    f = (*f).next;
                }
            }
        }
        Aside {
            filter: ptr::null_mut(),
            frec: ptr::null_mut(),
        }
    }
}

impl Drop for Aside {
    fn drop(&mut self) {
        if !self.filter.is_null() {
            // SAFETY: `new`'s contract: the filter lives in the pool of the connection the
            // calling thread holds (a filter removed from its chain still does).
            unsafe { (*self.filter).frec = self.frec };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_values_the_parser_makes_are_read() {
        let debian = RawStage {
            timeout: 20,
            max_timeout: 40,
            min_rate: 500,
            rate_factor: 2000,
        };
        assert!(plausible(&debian));
        assert!(plausible(&DEFAULT_HEADER));
        let unset = RawStage {
            timeout: UNSET,
            max_timeout: UNSET,
            min_rate: UNSET,
            rate_factor: 0,
        };
        assert!(plausible(&unset));
        assert!(!plausible(&RawStage {
            rate_factor: 7,
            ..debian
        }));
        // Debian's reqtimeout.conf (header=20-40,minrate=500) with a vhost's own
        // `RequestReadTimeout handshake=5`: the vhost's header stage as merged.
        assert!(plausible(&RawStage {
            rate_factor: 0,
            ..debian
        }));
        assert!(!plausible(&RawStage {
            timeout: -5,
            ..unset
        }));
    }

    #[test]
    fn a_stage_at_zero_is_off_and_min_rate_is_per_byte() {
        let off = RawStage {
            timeout: 0,
            max_timeout: UNSET,
            min_rate: UNSET,
            rate_factor: 0,
        };
        assert_eq!(timed(off), Stage::Off);
        // handshake=5-10,MinRate=500
        let hs = RawStage {
            timeout: 5,
            max_timeout: 10,
            min_rate: 500,
            rate_factor: 2000,
        };
        assert_eq!(
            timed(hs),
            Stage::Timed(TimeoutStage {
                timeout: Duration::from_secs(5),
                max: Some(Duration::from_secs(10)),
                per_byte: Duration::from_micros(2000),
            })
        );
    }
}
