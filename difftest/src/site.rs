//! The site every server of a run is started from (`conf/site.conf.in`), its DocumentRoot
//! and its certificate, and the configured values the scenarios' time marks name.
//!
//! The values here must match the template; [`tests`] checks that they do.

use crate::mpm::Mpm;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// The configuration template.
pub const TEMPLATE: &str = include_str!("../conf/site.conf.in");

/// Server config: `KeepAliveTimeout`.
pub const KEEP_ALIVE: f64 = 2.0;
/// Server config: `Timeout`.
pub const TIMEOUT: f64 = 4.0;
/// Server config: `MaxKeepAliveRequests`.
pub const MAX_KEEP_ALIVE_REQUESTS: usize = 4;
/// Server config: `GracefulShutdownTimeout`.
pub const GRACEFUL_SHUTDOWN: f64 = 3.0;
/// `b.test` and `tls-b.test`: `KeepAliveTimeout`.
pub const VHOST_KEEP_ALIVE: f64 = 6.0;
/// `b.test`, `e.test` and `tls-b.test`: `Timeout`.
pub const VHOST_TIMEOUT: f64 = 8.0;
/// `d.test`: `MaxKeepAliveRequests`.
pub const VHOST_MAX_KEEP_ALIVE_REQUESTS: usize = 2;
/// `ip.test` (127.0.0.2) and `ip-tls.test` (127.0.0.2, TLS): `KeepAliveTimeout`.
pub const IP_KEEP_ALIVE: f64 = 5.0;
/// `ip.test`: `RequestReadTimeout header=2 body=2`; `r.test`: `body=2`.
pub const REQTIMEOUT_EXPLICIT: f64 = 2.0;
/// mod_reqtimeout's default first header and body limits (`header=20-40,MinRate=500
/// body=20,MinRate=500`), on 127.0.0.1.
pub const REQTIMEOUT_DEFAULT: f64 = 20.0;
/// `tls-a.test`: `RequestReadTimeout handshake=2`.
pub const HANDSHAKE_TIMEOUT: f64 = 2.0;
/// `l.test`: `LimitRequestBody`.
pub const LIMIT_REQUEST_BODY: usize = 1000;
/// `lim.test` (127.0.0.4): `LimitRequestLine`, `LimitRequestFieldSize`,
/// `LimitRequestFields`.
pub const LIMIT_REQUEST_LINE: usize = 64;
pub const LIMIT_REQUEST_FIELD_SIZE: usize = 64;
pub const LIMIT_REQUEST_FIELDS: usize = 4;
/// `rt.test` (127.0.0.5): `RequestReadTimeout header=2-4,MinRate=500`: the first limit, the
/// most it is extended to, the rate.
pub const REQTIMEOUT_RATE_FIRST: f64 = 2.0;
pub const REQTIMEOUT_RATE_MAX: f64 = 4.0;
pub const REQTIMEOUT_RATE_MIN_RATE: usize = 500;
/// `rt.test`: `Timeout`, above its header limits.
pub const REQTIMEOUT_RATE_TIMEOUT: f64 = 10.0;
/// `rt-own.test` (name-based on 127.0.0.5): `RequestReadTimeout header=6`.
pub const REQTIMEOUT_NAME_VHOST: f64 = 6.0;
/// `rt3.test` (127.0.0.6): `RequestReadTimeout header=3`.
pub const REQTIMEOUT_FIXED: f64 = 3.0;
/// httpd's lingering close: at most `MAX_SECS_TO_LINGER` in all, `SECONDS_TO_LINGER`
/// without data.
pub const MAX_SECS_TO_LINGER: f64 = 30.0;
pub const SECONDS_TO_LINGER: f64 = 2.0;

/// Size of `/8m.bin` (patterned bytes).
pub const LARGE: usize = 8 * 1024 * 1024;
/// The same 8 MiB under `<Directory .../sf>` with `EnableSendfile On`: the core sets the
/// file aside and the MPM's write completion drains it (`/8m.bin` is under httpd's default,
/// Off, written with blocking writes inside the handler).
pub const LARGE_SENDFILE: &str = "/sf/8m.bin";
/// Files `/seq/N.txt`, N in 1..=SEQ_FILES, content `seq N\n`: pipelined order shows in the
/// body hashes.
pub const SEQ_FILES: usize = 8;

/// The addresses the plain port listens on; the TLS port on the first two.
pub const ADDRESSES: &[&str] = &[
    "127.0.0.1",
    "127.0.0.2",
    "127.0.0.3",
    "127.0.0.4",
    "127.0.0.5",
    "127.0.0.6",
    "127.0.0.7",
    "127.0.0.8",
];

/// The plain and TLS ports of one server (on [`ADDRESSES`] as the template says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    pub plain: u16,
    pub tls: u16,
}

/// The modules the site uses beside its MPM (the template's `@MODULES@`).
pub const MODULES: &[&str] = &[
    "unixd",
    "authz_core",
    "mime",
    "dir",
    "status",
    "headers",
    "reflector",
    "reqtimeout",
    "socache_shmcb",
    "ssl",
    "http2",
    "log_config",
    "remoteip",
    "info",
    "echo",
];

/// Which site a server is started from: the template as it is, or without mod_reqtimeout
/// (a head then meets only Timeout, read by read). Scenarios say which they need; the
/// runner starts a pair of servers for each site a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Site {
    Full,
    WithoutReqtimeout,
}

impl Site {
    /// Every site, in the order a run starts them.
    pub const ALL: [Site; 2] = [Site::Full, Site::WithoutReqtimeout];

    /// A suffix for the servers' directories ("" for the full site).
    pub fn suffix(self) -> &'static str {
        match self {
            Site::Full => "",
            Site::WithoutReqtimeout => "-no-reqtimeout",
        }
    }
}

/// The template filled for `mpm`, as `site` says.
pub fn conf(root: &Path, ports: Ports, mpm: Mpm, rworker_so: &Path, site: Site) -> String {
    let (modules, template): (Vec<&str>, String) = match site {
        Site::Full => (MODULES.to_vec(), TEMPLATE.to_owned()),
        Site::WithoutReqtimeout => (
            MODULES
                .iter()
                .copied()
                .filter(|m| *m != "reqtimeout")
                .collect(),
            TEMPLATE
                .lines()
                .filter(|l| !l.trim_start().starts_with("RequestReadTimeout"))
                .map(|l| format!("{l}\n"))
                .collect(),
        ),
    };
    template
        .replace("@MPM@", &mpm.conf_lines(rworker_so))
        .replace(
            "@MODULES@",
            rworker_testkit::install::load_module_lines(&modules).trim_end(),
        )
        .replace("@ROOT@", &root.display().to_string())
        .replace("@TLS_PORT@", &ports.tls.to_string())
        .replace("@PORT@", &ports.plain.to_string())
}

/// The bytes of `/8m.bin`: a pattern that no shift of itself matches (a cut or repeated
/// block changes the hash).
pub fn large_body() -> Vec<u8> {
    (0..LARGE as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// The DocumentRoot's files, under `root/htdocs` (which exists, mode 755).
pub fn write_docroot(root: &Path) -> io::Result<()> {
    let docroot = root.join("htdocs");
    let seq = docroot.join("seq");
    let sf = docroot.join("sf");
    for dir in [&seq, &sf] {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
    }
    fs::write(
        docroot.join("index.html"),
        "<html><body>rworker-diff index</body></html>\n",
    )?;
    let large = large_body();
    fs::write(docroot.join("8m.bin"), &large)?;
    fs::write(sf.join("8m.bin"), &large)?;
    for n in 1..=SEQ_FILES {
        fs::write(seq.join(format!("{n}.txt")), format!("seq {n}\n"))?;
    }
    for entry in fs::read_dir(&docroot)?
        .chain(fs::read_dir(&seq)?)
        .chain(fs::read_dir(&sf)?)
    {
        let path = entry?.path();
        if path.is_file() {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o644))?;
        }
    }
    Ok(())
}

/// The files [`make_certificate`] writes and every ServerRoot's `certs/` holds: the
/// server's certificate and key, the client CA that tls-cc.test trusts, a client
/// certificate it signed and that certificate's key.
pub const CERT_FILES: &[&str] = &[
    "cert.pem",
    "key.pem",
    "client-ca.pem",
    "client.pem",
    "client-key.pem",
];

/// A self-signed certificate for every name of the site, made once per run with the
/// `openssl` command into `dir` (`cert.pem`, `key.pem`); and a client CA (`client-ca.pem`,
/// its key `client-ca-key.pem`) with a client certificate it signed (`client.pem`,
/// `client-key.pem`), for tls-cc.test's `SSLVerifyClient require`.
pub fn make_certificate(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let p = |f: &str| dir.join(f).display().to_string();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    openssl_req(&[
        &["-newkey", "rsa:2048", "-subj", "/CN=tls-a.test", "-addext"],
        &["subjectAltName=DNS:tls-a.test,DNS:tls-b.test,DNS:tls-h1.test,DNS:ip-tls.test,DNS:tls-cc.test"],
        &["-keyout", &p("key.pem"), "-out", &p("cert.pem")],
    ])?;
    openssl_req(&[
        &ec,
        &["-subj", "/CN=rworker-diff client CA"],
        &[
            "-keyout",
            &p("client-ca-key.pem"),
            "-out",
            &p("client-ca.pem"),
        ],
    ])?;
    openssl_req(&[
        &ec,
        &["-subj", "/CN=rworker-diff client"],
        &[
            "-CA",
            &p("client-ca.pem"),
            "-CAkey",
            &p("client-ca-key.pem"),
        ],
        &["-addext", "basicConstraints=critical,CA:FALSE"],
        &["-addext", "extendedKeyUsage=clientAuth"],
        &["-keyout", &p("client-key.pem"), "-out", &p("client.pem")],
    ])
}

/// `openssl req -x509 -nodes -days 2` with `args`.
fn openssl_req(args: &[&[&str]]) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(["req", "-x509", "-nodes", "-days", "2"])
        .args(args.iter().flat_map(|a| a.iter()))
        .output()
        .map_err(|e| format!("run openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl req could not make a test certificate: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constants the scenarios build their time marks from are the template's values.
    #[test]
    fn constants_match_the_template() {
        for line in [
            format!("KeepAliveTimeout {KEEP_ALIVE}"),
            format!("Timeout {TIMEOUT}"),
            format!("MaxKeepAliveRequests {MAX_KEEP_ALIVE_REQUESTS}"),
            format!("GracefulShutdownTimeout {GRACEFUL_SHUTDOWN}"),
            format!("    KeepAliveTimeout {VHOST_KEEP_ALIVE}"),
            format!("    Timeout {VHOST_TIMEOUT}"),
            format!("    MaxKeepAliveRequests {VHOST_MAX_KEEP_ALIVE_REQUESTS}"),
            format!("    KeepAliveTimeout {IP_KEEP_ALIVE}"),
            format!(
                "    RequestReadTimeout header={REQTIMEOUT_EXPLICIT} body={REQTIMEOUT_EXPLICIT}"
            ),
            format!("    RequestReadTimeout handshake={HANDSHAKE_TIMEOUT} header="),
            format!("    LimitRequestBody {LIMIT_REQUEST_BODY}"),
            format!("    LimitRequestLine {LIMIT_REQUEST_LINE}"),
            format!("    LimitRequestFieldSize {LIMIT_REQUEST_FIELD_SIZE}"),
            format!("    LimitRequestFields {LIMIT_REQUEST_FIELDS}"),
            format!(
                "    RequestReadTimeout header={REQTIMEOUT_RATE_FIRST}-{REQTIMEOUT_RATE_MAX},MinRate={REQTIMEOUT_RATE_MIN_RATE} "
            ),
            format!("    RequestReadTimeout header={REQTIMEOUT_NAME_VHOST}"),
            format!("    Timeout {REQTIMEOUT_RATE_TIMEOUT}"),
            format!("    RequestReadTimeout header={REQTIMEOUT_FIXED}"),
        ] {
            assert!(
                TEMPLATE.lines().any(|l| l.starts_with(&line)),
                "conf/site.conf.in has no line starting {line:?}"
            );
        }
    }

    /// Every file the template names under the ServerRoot's `certs/` is one a run makes
    /// and copies there.
    #[test]
    fn the_template_names_only_certificates_a_run_makes() {
        let named: Vec<&str> = TEMPLATE
            .split("@ROOT@/certs/")
            .skip(1)
            .map(|rest| rest.split_whitespace().next().unwrap_or(""))
            .collect();
        assert!(named.contains(&"client-ca.pem"), "{named:?}");
        for f in named {
            assert!(CERT_FILES.contains(&f), "{f} is not in CERT_FILES");
        }
    }

    /// `LARGE_SENDFILE`'s directory is the one the template turns sendfile on for.
    #[test]
    fn the_sendfile_directory_is_configured() {
        let dir = LARGE_SENDFILE.rsplit_once('/').map_or("", |(d, _)| d);
        let open = format!("<Directory @ROOT@/htdocs{dir}>");
        let block: Vec<&str> = TEMPLATE
            .lines()
            .skip_while(|l| *l != open)
            .take_while(|l| *l != "</Directory>")
            .collect();
        assert!(
            block.iter().any(|l| l.trim() == "EnableSendfile On"),
            "conf/site.conf.in has no {open} with EnableSendfile On"
        );
    }

    #[test]
    fn every_placeholder_is_filled() {
        let c = conf(
            Path::new("/r"),
            Ports { plain: 1, tls: 2 },
            Mpm::RworkerPark,
            Path::new("/x.so"),
            Site::Full,
        );
        assert!(!c.contains('@'), "{c}");
        for ip in ADDRESSES {
            assert!(c.contains(&format!("Listen {ip}:1\n")), "{ip}: {c}");
        }
        assert!(c.contains("Listen 127.0.0.2:2 https"));
        assert!(c.contains("LoadModule mpm_rworker_module /x.so"));
        assert!(
            !c.lines()
                .any(|l| l.trim_start().starts_with("RWorkerKeepAlive")),
            "park is the default: {c}"
        );
    }

    /// Without mod_reqtimeout: neither its module nor a directive of its is left.
    #[test]
    fn the_site_without_reqtimeout_has_none() {
        let c = conf(
            Path::new("/r"),
            Ports { plain: 1, tls: 2 },
            Mpm::Event,
            Path::new("/x.so"),
            Site::WithoutReqtimeout,
        );
        assert!(
            !c.lines()
                .any(|l| l.trim_start().starts_with("RequestReadTimeout")),
            "{c}"
        );
        assert!(!c.contains("reqtimeout_module"), "{c}");
        assert!(c.contains("Timeout 4\n"), "{c}");
        let full = conf(
            Path::new("/r"),
            Ports { plain: 1, tls: 2 },
            Mpm::Event,
            Path::new("/x.so"),
            Site::Full,
        );
        assert!(full.contains("reqtimeout_module"), "{full}");
    }
}
