//! Build script: bindgen over the *installed* httpd and APR headers, and the C shim.
//!
//! Header locations come from the tools, never from literals: `apxs -q INCLUDEDIR`
//! (the `APXS` environment variable selects another httpd's apxs) and
//! `apr-1-config --includes --cppflags` (`APR_CONFIG` selects another APR), plus
//! `apxs -q EXTRA_CPPFLAGS` for the defines httpd was built with.
//!
//! httpd 2.4 keeps its module ABI (MMN major 20120211) but adds states, fields and calls in
//! minor bumps; the headers' `ap_mmn.h` says which minor this httpd is, and [`HTTPD_FEATURES`]
//! turns it into `cfg` flags, so one source builds against 2.4.52 to today's 2.4 (docs/build.md).

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// Runs a configuration tool and returns its trimmed stdout, or explains what is missing.
fn query(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!(
            "rworker build: cannot run `{tool}` ({e}); install httpd's development files \
             (Debian: apt-get install apache2-dev) or point APXS / APR_CONFIG at them"
        )
    });
    if !out.status.success() {
        panic!(
            "rworker build: `{tool} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What rworker uses that came in a minor bump of httpd 2.4's module magic number: the cfg
/// flag it sets, the first minor that has it (ap_mmn.h's history), and what it is.
const HTTPD_FEATURES: &[(&str, u32, &str)] = &[
    (
        "httpd_waitio",
        135,
        "CONN_STATE_ASYNC_WAITIO; the names CONN_STATE_PROCESSING and CONN_STATE_KEEPALIVE (2.4.63)",
    ),
    (
        "httpd_score_wait_io",
        136,
        "process_score.wait_io (2.4.63)",
    ),
    (
        "httpd_mpmq_can_waitio",
        137,
        "AP_MPMQ_CAN_WAITIO (2.4.63)",
    ),
];

/// The module magic number (major, minor) that `ap_mmn.h` defines.
fn module_magic_number(ap_mmn_h: &str) -> Option<(u32, u32)> {
    let define = |name: &str| {
        ap_mmn_h.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("#define") && w.next() == Some(name))
                .then(|| w.next()?.parse().ok())
                .flatten()
        })
    };
    Some((
        define("MODULE_MAGIC_NUMBER_MAJOR")?,
        define("MODULE_MAGIC_NUMBER_MINOR")?,
    ))
}

fn main() {
    let apxs = env::var("APXS").unwrap_or_else(|_| "apxs".into());
    let apr_config = env::var("APR_CONFIG").unwrap_or_else(|_| "apr-1-config".into());
    println!("cargo:rerun-if-env-changed=APXS");
    println!("cargo:rerun-if-env-changed=APR_CONFIG");
    println!("cargo:rerun-if-changed=c_shim");

    let httpd_include = query(&apxs, &["-q", "INCLUDEDIR"]);
    let ap_mmn = PathBuf::from(&httpd_include).join("ap_mmn.h");
    println!("cargo:rerun-if-changed={}", ap_mmn.display());
    let (major, minor) = std::fs::read_to_string(&ap_mmn)
        .ok()
        .and_then(|text| module_magic_number(&text))
        .unwrap_or_else(|| {
            panic!(
                "rworker build: no MODULE_MAGIC_NUMBER_MAJOR/MINOR in {}",
                ap_mmn.display()
            )
        });
    if major != 20120211 {
        panic!(
            "rworker build: {} says module magic number {major}.{minor}; rworker is built \
             for httpd 2.4 (20120211.x)",
            ap_mmn.display()
        );
    }
    for &(flag, since, _) in HTTPD_FEATURES {
        println!("cargo::rustc-check-cfg=cfg({flag})");
        if minor >= since {
            println!("cargo::rustc-cfg={flag}");
        }
    }
    let mut cflags: Vec<String> = vec![format!("-I{httpd_include}")];
    for word in query(&apr_config, &["--includes", "--cppflags"])
        .split_whitespace()
        .chain(query(&apxs, &["-q", "EXTRA_CPPFLAGS"]).split_whitespace())
    {
        if (word.starts_with("-I") || word.starts_with("-D")) && !cflags.iter().any(|f| f == word) {
            cflags.push(word.to_string());
        }
    }
    // APR-util's headers (apr_buckets.h) may live apart from APR's.
    if let Ok(apu) = Command::new(env::var("APU_CONFIG").unwrap_or_else(|_| "apu-1-config".into()))
        .arg("--includes")
        .output()
    {
        for word in String::from_utf8_lossy(&apu.stdout).split_whitespace() {
            if word.starts_with("-I") && !cflags.iter().any(|f| f == word) {
                cflags.push(word.to_string());
            }
        }
    }

    // The shim: only the directive table.
    let mut shim = cc::Build::new();
    shim.file("c_shim/rworker_shim.c")
        .include("c_shim")
        .warnings(true);
    for f in &cflags {
        shim.flag(f);
    }
    shim.compile("rworker_shim");

    let bindings = bindgen::Builder::default()
        .header("c_shim/wrapper.h")
        .clang_args(&cflags)
        .clang_arg("-Ic_shim")
        .allowlist_function("ap_.*|apr_.*")
        .allowlist_var("core_module|ap_.*|AP_.*|APR_.*|APLOG_.*|MODULE_MAGIC_.*|SERVER_.*|rworker_shim_cmds|AP_STATUS_.*|HARD_.*|APEXIT_.*|SB_.*|OK|DONE|DECLINED|RSRC_CONF|DEFAULT_.*|HUGE_STRING_LEN|GLOBAL_ONLY|NOT_IN_.*")
        .allowlist_type("module|command_rec|cmd_parms|request_rec|ap_.*|apr_.*|process_score|worker_score|global_score|conn_rec|server_rec|process_rec")
        .blocklist_function("ap_log_rerror_|ap_log_cerror_|ap_log_cserror_|ap_log_perror_")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .generate()
        .expect("rworker build: bindgen could not parse the httpd/APR headers");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings.write_to_file(&out).expect("write bindings.rs");

    // httpd dlcloses and reloads the MPM on every config pass: stay mapped (see
    // docs: DSO unload and reload). Symbols from httpd and APR resolve from the
    // global scope, as for the stock module, so no -lapr here.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
}
