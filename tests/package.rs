//! The Debian package libapache2-mpm-rworker (issue 12), built by scripts/build-deb.sh.
//!
//! `package_contents_control_fields_and_lintian` only reads the .deb. `install_enable_upgrade
//! _remove_purge_on_this_machine` installs it into this machine's apache2 configuration
//! (/etc/apache2, the module directory), switches the MPM with a2dismod/a2enmod, upgrades,
//! removes and purges it, checking `apache2ctl -t`/`-V` at each step. It never starts or stops
//! the system apache2: a policy-rc.d that denies every service action is in place while it runs
//! (the maintainer scripts restart apache2 through invoke-rc.d, as Debian's do), and a guard
//! puts back the MPM symlinks, a2enmod's state markers, policy-rc.d and the package's previous
//! state even when an assertion fails midway.
//!
//! Self-contained on purpose (no `mod common`): it uses the system's apache2, not a private one.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const PKG: &str = "libapache2-mpm-rworker";
const STOCK_MPMS: [&str; 3] = ["mpm_event", "mpm_worker", "mpm_prefork"];
/// The only lintian warning left, explained in docs/debian.md ("lintian").
const EXPLAINED_WARNINGS: [&str; 1] = ["initial-upload-closes-no-bugs"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn output(cmd: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(cmd)
        .args(args)
        .envs(env.iter().copied())
        .env("DEBIAN_FRONTEND", "noninteractive")
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs a command that must succeed; returns its stdout and stderr together.
fn ok(cmd: &str, args: &[&str]) -> String {
    let out = output(cmd, args, &[]);
    let all = text(&out);
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed ({}):\n{all}",
        out.status
    );
    all
}

fn stdout(cmd: &str, args: &[&str]) -> String {
    let out = output(cmd, args, &[]);
    assert!(out.status.success(), "{cmd} {args:?}: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn libexecdir() -> String {
    stdout("apxs", &["-q", "LIBEXECDIR"])
}

/// The MMN as Debian's apache2-bin announces it: "Provides: apache2-api-20120211, ...".
fn installed_apache2_api() -> String {
    let provides = stdout("dpkg-query", &["-W", "-f=${Provides}", "apache2-bin"]);
    let api: Vec<&str> = provides
        .split(',')
        .map(str::trim)
        .filter(|p| {
            p.strip_prefix("apache2-api-")
                .is_some_and(|n| n.len() == 8 && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    assert_eq!(api.len(), 1, "apache2-bin Provides: {provides}");
    api[0].to_string()
}

/// Two packages, built once per test run and copied out of target/debian (which the next
/// build-deb.sh run empties): a second, higher version first, for the upgrade step, then the
/// real one, so that target/debian ends up holding the real package.
struct Debs {
    deb: PathBuf,
    upgrade: PathBuf,
    version: String,
    upgrade_version: String,
}

fn debs() -> &'static Debs {
    static DEBS: OnceLock<Debs> = OnceLock::new();
    DEBS.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("package-test");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let version = stdout(
            "dpkg-parsechangelog",
            &["-l", "pkg/deb/changelog", "-S", "Version"],
        );
        let upgrade_version = format!("{version}+upgradetest1");
        // build-deb.sh would run cargo itself without it, under the lock this cargo test holds.
        let so = repo().join("target/release/libmod_mpm_rworker.so");
        assert!(
            so.is_file(),
            "{} missing: cargo build --release first (scripts/test.sh does)",
            so.display()
        );
        let build = |env: &[(&str, &str)], name: &str| {
            let out = output("bash", &["scripts/build-deb.sh"], env);
            let log = text(&out);
            assert!(out.status.success(), "build-deb.sh failed:\n{log}");
            let last = String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap_or("")
                .trim()
                .to_string();
            let built = PathBuf::from(last);
            assert!(
                built.is_file(),
                "build-deb.sh did not print a .deb path:\n{log}"
            );
            let copy = dir.join(name);
            fs::copy(&built, &copy).unwrap();
            copy
        };
        let upgrade = build(&[("RWORKER_DEB_VERSION", &upgrade_version)], "upgrade.deb");
        let deb = build(&[], "package.deb");
        Debs {
            deb,
            upgrade,
            version,
            upgrade_version,
        }
    })
}

#[test]
fn package_contents_control_fields_and_lintian() {
    let d = debs();
    let deb = d.deb.to_str().unwrap();
    let field = |f: &str| stdout("dpkg-deb", &["-f", deb, f]);

    // Control fields.
    assert_eq!(field("Package"), PKG);
    assert_eq!(field("Version"), d.version);
    assert_eq!(
        field("Architecture"),
        stdout("dpkg", &["--print-architecture"])
    );
    assert_eq!(field("Section"), "httpd");
    let depends: Vec<String> = field("Depends")
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let api = installed_apache2_api();
    assert!(
        depends.contains(&api),
        "Depends must name {api} (the MMN of the installed apache2-bin): {depends:?}"
    );
    let mmn_header =
        fs::read_to_string(Path::new(&stdout("apxs", &["-q", "INCLUDEDIR"])).join("ap_mmn.h"))
            .unwrap();
    assert!(
        mmn_header.contains(&format!(
            "#define MODULE_MAGIC_NUMBER_MAJOR {}",
            &api["apache2-api-".len()..]
        )),
        "{api} is not the MMN of the headers the module was built with"
    );
    for dep in [
        "apache2-bin (>= ",
        "libapr1 (>= ",
        "libaprutil1 (>= ",
        "libc6 (>= ",
    ] {
        assert!(
            depends.iter().any(|d| d.starts_with(dep)),
            "Depends lacks {dep}...): {depends:?}"
        );
    }
    let info = ok("dpkg-deb", &["-I", deb]);
    for script in ["postinst", "prerm", "postrm"] {
        assert!(
            info.contains(&format!(" {script} ")),
            "no {script} in the control area:\n{info}"
        );
    }

    // Conffiles: exactly the two mods-available files.
    let conffiles = stdout("dpkg-deb", &["-I", deb, "conffiles"]);
    assert_eq!(
        conffiles.lines().collect::<Vec<_>>(),
        [
            "/etc/apache2/mods-available/mpm_rworker.load",
            "/etc/apache2/mods-available/mpm_rworker.conf"
        ]
    );

    // Contents: module in apxs's LIBEXECDIR, mode 0644, root-owned; the Debian docs.
    let listing = ok("dpkg-deb", &["-c", deb]);
    let module = format!(".{}/mod_mpm_rworker.so", libexecdir());
    let expected = [
        module.as_str(),
        "./etc/apache2/mods-available/mpm_rworker.load",
        "./etc/apache2/mods-available/mpm_rworker.conf",
        "./usr/share/doc/libapache2-mpm-rworker/copyright",
        "./usr/share/doc/libapache2-mpm-rworker/changelog.Debian.gz",
        "./usr/share/doc/libapache2-mpm-rworker/README.md.gz",
    ];
    for path in expected {
        let line = listing
            .lines()
            .find(|l| l.ends_with(&format!(" {path}")))
            .unwrap_or_else(|| panic!("{path} is not in the package:\n{listing}"));
        assert!(line.starts_with("-rw-r--r-- root/root "), "{line}");
    }

    // The unpacked files: the .load loads the packaged path; the module is stripped and
    // still exports mpm_rworker_module.
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_str().unwrap();
    ok("dpkg-deb", &["-x", deb, root]);
    let load = fs::read_to_string(
        tmp.path()
            .join("etc/apache2/mods-available/mpm_rworker.load"),
    )
    .unwrap();
    assert!(
        load.lines().any(|l| l
            == format!(
                "LoadModule mpm_rworker_module {}/mod_mpm_rworker.so",
                libexecdir()
            )),
        "{load}"
    );
    assert!(
        load.contains("# Conflicts: mpm_event mpm_prefork mpm_worker"),
        "{load}"
    );
    let so = format!("{root}{}", &module[1..]);
    assert!(ok("nm", &["-D", "--defined-only", &so]).contains(" mpm_rworker_module"));
    assert!(
        !ok("readelf", &["-S", &so]).contains(".debug_info"),
        "the packaged module is not stripped"
    );

    // lintian: no errors; warnings only those docs/debian.md explains.
    let out = output("lintian", &["--fail-on", "error", deb], &[]);
    let report = text(&out);
    assert!(out.status.success(), "lintian failed:\n{report}");
    for line in report.lines() {
        assert!(!line.starts_with("E: "), "lintian error: {line}\n{report}");
        if line.starts_with("W: ") {
            assert!(
                EXPLAINED_WARNINGS
                    .iter()
                    .any(|w| line.contains(&format!(": {w}"))),
                "lintian warning not explained in docs/debian.md: {line}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// The system test and its guard.

const MODS_ENABLED: &str = "/etc/apache2/mods-enabled";
const MODS_AVAILABLE: &str = "/etc/apache2/mods-available";
const STATE_DIR: &str = "/var/lib/apache2/module";
const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";

/// The MPMs enabled now, by their .load symlinks ("mpm_event").
fn enabled_mpms() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(MODS_ENABLED)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".load").map(str::to_string))
        .filter(|n| n.starts_with("mpm_"))
        .collect();
    v.sort();
    v
}

/// "ii 0.1.0-1" when installed, None when dpkg does not know the package; panics on any
/// other state (e.g. removed with its conffiles kept), which the guard could not restore.
fn package_status() -> Option<String> {
    let out = output(
        "dpkg-query",
        &["-W", "-f=${db:Status-Abbrev} ${Version}", PKG],
        &[],
    );
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || s.is_empty() || s.starts_with("un") {
        return None;
    }
    assert!(
        s.starts_with("ii"),
        "{PKG} is in state {s:?}; install or purge it first"
    );
    Some(s)
}

/// What the test changes, as it was before; `restore` puts it back (also on panic, from Drop).
struct Guard {
    backup: tempfile::TempDir,
    /// mods-enabled/mpm_* entries: name -> symlink target.
    mpm_links: Vec<(String, PathBuf)>,
    state_existed: bool,
    policy_existed: bool,
    /// The package was installed before: reinstall the one built here, keep its conffiles.
    was_installed: bool,
    restored: bool,
}

impl Guard {
    fn take() -> Guard {
        let backup = tempfile::tempdir().unwrap();
        let mut mpm_links = Vec::new();
        for e in fs::read_dir(MODS_ENABLED).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name.starts_with("mpm_") {
                let target = fs::read_link(e.path()).unwrap_or_else(|_| {
                    panic!("{MODS_ENABLED}/{name} is not a symlink; not touching this machine")
                });
                mpm_links.push((name, target));
            }
        }
        let state_existed = Path::new(STATE_DIR).exists();
        if state_existed {
            // cp -a keeps the markers' mtimes: the prerm picks the MPM disabled last by them.
            ok(
                "cp",
                &[
                    "-a",
                    STATE_DIR,
                    backup.path().join("module").to_str().unwrap(),
                ],
            );
        }
        let policy_existed = Path::new(POLICY_RC_D).exists();
        if policy_existed {
            ok(
                "cp",
                &[
                    "-a",
                    POLICY_RC_D,
                    backup.path().join("policy-rc.d").to_str().unwrap(),
                ],
            );
        }
        let was_installed = package_status().is_some();
        if was_installed {
            for f in ["mpm_rworker.load", "mpm_rworker.conf"] {
                let _ = fs::copy(Path::new(MODS_AVAILABLE).join(f), backup.path().join(f));
            }
        }
        let guard = Guard {
            backup,
            mpm_links,
            state_existed,
            policy_existed,
            was_installed,
            restored: false,
        };
        // Deny every service action by maintainer scripts (exit 101), so that the helper's
        // "invoke-rc.d apache2 restart" never touches the system's apache2.
        fs::write(
            POLICY_RC_D,
            "#!/bin/sh\n# rworker tests/package.rs: no service actions while it runs; removed after.\nexit 101\n",
        )
        .unwrap();
        ok("chmod", &["0755", POLICY_RC_D]);
        guard
    }

    fn restore(&mut self) {
        if self.restored {
            return;
        }
        self.restored = true;
        let b = self.backup.path();
        // The package first: its maintainer scripts touch mods-enabled and the markers.
        if self.was_installed {
            let deb = debs().deb.to_str().unwrap().to_string();
            let out = output("dpkg", &["-i", "--force-confold", &deb], &[]);
            if !out.status.success() {
                eprintln!("package guard: reinstalling {deb} failed:\n{}", text(&out));
            }
            for f in ["mpm_rworker.load", "mpm_rworker.conf"] {
                if b.join(f).exists() {
                    let _ = fs::copy(b.join(f), Path::new(MODS_AVAILABLE).join(f));
                }
            }
        } else if output("dpkg-query", &["-W", PKG], &[]).status.success() {
            let out = output("dpkg", &["--purge", PKG], &[]);
            if !out.status.success() {
                eprintln!("package guard: purging {PKG} failed:\n{}", text(&out));
            }
        }
        // Exactly the MPM symlinks that were there.
        for e in fs::read_dir(MODS_ENABLED).unwrap().flatten() {
            if e.file_name().to_string_lossy().starts_with("mpm_") {
                let _ = fs::remove_file(e.path());
            }
        }
        for (name, target) in &self.mpm_links {
            if let Err(e) = std::os::unix::fs::symlink(target, Path::new(MODS_ENABLED).join(name)) {
                eprintln!("package guard: cannot restore {MODS_ENABLED}/{name}: {e}");
            }
        }
        let _ = fs::remove_dir_all(STATE_DIR);
        if self.state_existed {
            let _ = output(
                "cp",
                &["-a", b.join("module").to_str().unwrap(), STATE_DIR],
                &[],
            );
        }
        let _ = fs::remove_file(POLICY_RC_D);
        if self.policy_existed {
            let _ = output(
                "cp",
                &["-a", b.join("policy-rc.d").to_str().unwrap(), POLICY_RC_D],
                &[],
            );
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.restore();
    }
}

fn apache2ctl_t() -> String {
    let out = ok("apache2ctl", &["-t"]);
    assert!(out.contains("Syntax OK"), "{out}");
    out
}

/// One test for the whole sequence: every step depends on the one before, and nothing else
/// in this file touches the system's configuration.
#[test]
fn install_enable_upgrade_remove_purge_on_this_machine() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test installs a Debian package: run it as root"
    );
    let d = debs();
    let before = enabled_mpms();
    // A machine whose apache2 configuration is already broken tells us nothing; leave it be.
    apache2ctl_t();
    assert_eq!(
        before.len(),
        1,
        "expected exactly one enabled MPM, found {before:?}"
    );
    let mut guard = Guard::take();
    let module = PathBuf::from(libexecdir()).join("mod_mpm_rworker.so");

    // Install as the README says; it must not switch the MPM by itself.
    let apt = |deb: &Path| {
        ok(
            "apt-get",
            &[
                "install",
                "-y",
                "-o",
                "DPkg::Lock::Timeout=120",
                "-o",
                "Dpkg::Options::=--force-confold",
                deb.to_str().unwrap(),
            ],
        )
    };
    let log = apt(&d.deb);
    assert!(package_status().is_some(), "{PKG} not installed:\n{log}");
    assert!(
        module.is_file(),
        "{} missing after install",
        module.display()
    );
    assert_eq!(
        enabled_mpms(),
        before,
        "installing the package changed the enabled MPM"
    );
    apache2ctl_t();

    // Switch apache2 to rworker.
    for mpm in &before {
        ok("a2dismod", &[mpm.as_str()]);
    }
    ok("a2enmod", &["mpm_rworker"]);
    assert_eq!(enabled_mpms(), ["mpm_rworker"]);
    apache2ctl_t();
    let v = ok("apache2ctl", &["-V"]);
    assert!(
        v.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Server", "MPM:", "rworker"]),
        "apache2ctl -V does not say Server MPM: rworker:\n{v}"
    );

    // Upgrade with an edited .conf: dpkg keeps the administrator's version, rworker stays on.
    let conf = Path::new(MODS_AVAILABLE).join("mpm_rworker.conf");
    let edited = format!(
        "{}# edited by tests/package.rs\n",
        fs::read_to_string(&conf).unwrap()
    );
    fs::write(&conf, &edited).unwrap();
    let log = apt(&d.upgrade);
    let status = package_status().unwrap_or_default();
    assert!(
        status.ends_with(&d.upgrade_version),
        "upgrade did not install {}: {status}\n{log}",
        d.upgrade_version
    );
    assert_eq!(
        fs::read_to_string(&conf).unwrap(),
        edited,
        "the upgrade replaced the edited .conf"
    );
    assert_eq!(
        enabled_mpms(),
        ["mpm_rworker"],
        "the upgrade changed the MPM"
    );
    apache2ctl_t();

    // Remove while enabled: the prerm disables rworker, gives back the MPM disabled above
    // (the one the admin disabled last), and says so on stderr.
    let out = output("dpkg", &["-r", PKG], &[]);
    let log = text(&out);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "dpkg -r failed:\n{log}");
    assert!(!module.exists(), "{} left after remove", module.display());
    let after = enabled_mpms();
    assert!(
        !after.contains(&"mpm_rworker".to_string()),
        "mpm_rworker still enabled after remove: {after:?}"
    );
    let expected: Vec<String> = if STOCK_MPMS.contains(&before[0].as_str()) {
        before.clone()
    } else {
        after.clone()
    };
    assert_eq!(after, expected, "remove did not give apache2 back its MPM");
    assert_eq!(after.len(), 1, "{after:?}");
    let fallback = &after[0];
    assert!(
        stderr.contains(&format!(
            "disabled mpm_rworker and ENABLED {fallback} in its place"
        )),
        "remove did not say on stderr which MPM it enabled:\n{log}"
    );
    assert!(
        stderr.contains("systemctl restart apache2"),
        "no restart command in:\n{log}"
    );
    assert!(
        stderr.contains(&format!("a2dismod {fallback} && a2enmod ")),
        "no way back in:\n{log}"
    );
    apache2ctl_t();

    if !guard.was_installed {
        // The administrator enables rworker again by hand from the .load that remove left
        // behind (its module is gone, so apache2 cannot parse its configuration); purge must
        // switch away from it as well. Then conffiles and a2enmod's markers go too.
        ok("a2dismod", &[fallback.as_str()]);
        ok("a2enmod", &["mpm_rworker"]);
        let out = output("dpkg", &["--purge", PKG], &[]);
        let log = text(&out);
        assert!(out.status.success(), "dpkg --purge failed:\n{log}");
        assert_eq!(
            &enabled_mpms(),
            &after,
            "purge did not give apache2 back its MPM:\n{log}"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "disabled mpm_rworker and ENABLED {fallback} in its place"
            )),
            "purge did not say which MPM it enabled:\n{log}"
        );
        for f in ["mpm_rworker.load", "mpm_rworker.conf"] {
            assert!(
                !Path::new(MODS_AVAILABLE).join(f).exists(),
                "{f} left after purge"
            );
        }
        let markers = ok("find", &[STATE_DIR, "-name", "mpm_rworker"]);
        assert!(
            markers.trim().is_empty(),
            "state markers left after purge: {markers}"
        );
        assert!(
            !output("dpkg-query", &["-W", PKG], &[]).status.success(),
            "{PKG} still known to dpkg"
        );
        apache2ctl_t();
    }

    guard.restore();
    assert_eq!(
        enabled_mpms(),
        before,
        "the guard did not restore the enabled MPMs"
    );
    apache2ctl_t();
}
