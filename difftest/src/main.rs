//! `rworker-diff`: runs the differential scenarios and prints the table.
//!
//! ```text
//! rworker-diff [--fast] [--out FILE] [--only NAME,...] [--pairs event/park,worker/thread]
//!              [--parallel N] [--list]
//! ```
//! Exit status: 0 when every difference is a known one, 1 when one is not (or a server
//! crashed), 2 when the harness could not run.

use rworker_diff::mpm::Pair;
use rworker_diff::report;
use rworker_diff::runner::{self, Options};
use std::process::ExitCode;

fn usage() -> &'static str {
    "usage: rworker-diff [--fast] [--out FILE] [--only NAME,...] [--pairs event/park,worker/thread] [--parallel N] [--list]\n\
     As root, with Debian's apache2 (or the httpd RWORKER_TEST_APACHE2 names, its modules in\n\
     RWORKER_TEST_MODULES) and rworker built (cargo build --release, or RWORKER_SO)."
}

fn main() -> ExitCode {
    let mut opts = Options {
        fast: false,
        only: Vec::new(),
        pairs: Pair::ALL.to_vec(),
        parallel: 8,
        rworker_so: Default::default(),
    };
    let mut out = None;
    let mut list = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--fast" => opts.fast = true,
            "--list" => list = true,
            "--out" => out = args.next(),
            "--only" => {
                opts.only = args
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::to_owned)
                    .collect()
            }
            "--parallel" => match args.next().and_then(|n| n.parse().ok()) {
                Some(n) => opts.parallel = n,
                None => {
                    eprintln!("--parallel needs a number\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "--pairs" => {
                let names = args.next().unwrap_or_default();
                let pairs: Option<Vec<Pair>> = names.split(',').map(Pair::by_name).collect();
                match pairs {
                    Some(p) if !p.is_empty() => opts.pairs = p,
                    _ => {
                        eprintln!(
                            "--pairs {names:?}: expected event/park and/or worker/thread\n{}",
                            usage()
                        );
                        return ExitCode::from(2);
                    }
                }
            }
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{}", usage());
                return ExitCode::from(2);
            }
        }
    }
    if list {
        for s in runner::selected(&opts) {
            println!(
                "{:40} {:9} {} {}",
                s.name,
                format!("{:?}", s.group),
                if s.fast { "fast" } else { "    " },
                s.about
            );
        }
        return ExitCode::SUCCESS;
    }
    match rworker_testkit::rworker_so::find_rworker_so() {
        Ok(p) => opts.rworker_so = p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    }
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("rworker-diff starts httpd, whose children switch to www-data: run it as root");
        return ExitCode::from(2);
    }
    let r = match runner::run(&opts) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rworker-diff: {e}");
            return ExitCode::from(2);
        }
    };
    let md = report::markdown(&r);
    println!("{md}");
    if let Some(path) = out {
        if let Err(e) = std::fs::write(&path, &md) {
            eprintln!("write {path}: {e}");
            return ExitCode::from(2);
        }
    }
    if report::unexpected(&r).is_empty() && r.crashes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
