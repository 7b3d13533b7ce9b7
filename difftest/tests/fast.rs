//! The CI subset of the differential harness: the fast scenarios against both pairs
//! (stock event / rworker park, stock worker / rworker thread). Fails on a difference that
//! is not in `src/expected.rs` (each entry there has its reason) and on a crash line in a
//! server's error log. The whole set: `cargo run --release -p rworker-diff -- --out FILE`.
//!
//! Needs root (httpd's children switch to www-data), Debian's apache2 (or the httpd
//! `RWORKER_TEST_APACHE2` names, its modules in `RWORKER_TEST_MODULES`) with mod_ssl,
//! mod_http2, mod_reqtimeout and mod_reflector, and rworker built (`cargo build --release`,
//! or RWORKER_SO).

use rworker_diff::mpm::Pair;
use rworker_diff::report;
use rworker_diff::runner::{self, Options};

#[test]
fn the_fast_scenarios_differ_only_where_known() {
    // SAFETY: geteuid(2) has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the differential harness starts httpd, which must run as root to switch its children to www-data"
    );
    let rworker_so =
        rworker_testkit::rworker_so::find_rworker_so().unwrap_or_else(|e| panic!("{e}"));
    let opts = Options {
        fast: true,
        only: Vec::new(),
        pairs: Pair::ALL.to_vec(),
        parallel: 8,
        rworker_so,
    };
    let r = runner::run(&opts).unwrap_or_else(|e| panic!("the harness could not run: {e}"));
    let md = report::markdown(&r);
    println!("{md}");
    let unexpected: Vec<String> = report::unexpected(&r)
        .iter()
        .map(|o| {
            format!(
                "{} ({}): reference {}; rworker {}",
                o.scenario,
                o.pair.name(),
                o.reference.render(),
                o.rworker.render()
            )
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "differences not in difftest/src/expected.rs:\n{}",
        unexpected.join("\n")
    );
    assert!(
        r.crashes.is_empty(),
        "crash lines in the error logs: {:?}",
        r.crashes
    );
}
