//! `--tls`: the matrix over HTTPS. What the servers' config gains, the run's certificate, and
//! the small TLS client the harness's own requests (start-up checks, `server-status?auto`
//! readings) use once the one listener speaks only TLS.
//!
//! Every MPM gets the same change, so the configs still differ only in the MPM lines:
//! `common.conf`'s `Listen 127.0.0.1:@PORT@` becomes `Listen 127.0.0.1:@PORT@ https` and
//! `apache-conf/ab/tls.conf.in` (mod_ssl with Debian's ssl.conf settings) is appended. There
//! is still one listener, so no MPM changes how it accepts (a second, plain listener would put
//! the stock worker behind its accept mutex). The certificate is made once per run, so every
//! server of the run presents the same one.

use crate::bail;
use crate::error::{Context, Error, Result};
use crate::server::override_directives;
use crate::shutdown;
use openssl::ssl::{SslConnector, SslMethod, SslStream, SslVerifyMode};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What `--tls` appends to `common.conf` (embedded at build time).
pub const TLS_TEMPLATE: &str = include_str!("../../apache-conf/ab/tls.conf.in");

/// The run's self-signed certificate and key (`cert.pem`, `key.pem`) in a private temp dir,
/// removed on drop (and by the signal watcher if a signal ends the run).
#[derive(Debug)]
pub struct Certificate {
    /// The directory holding `cert.pem` and `key.pem`.
    pub dir: PathBuf,
}

impl Certificate {
    /// Makes an ECDSA P-256 certificate for `localhost` and 127.0.0.1, valid for two days,
    /// with the openssl CLI, in `<temp>/rworker-ab-<pid>-tls/`. P-256 is what certbot issues by
    /// default, and the cheapest common handshake: the MPM's share of a TLS request is as large
    /// as it gets, so a cost the MPM adds shows the most.
    pub fn make() -> Result<Certificate> {
        let dir = std::env::temp_dir().join(format!("rworker-ab-{}-tls", std::process::id()));
        std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
        shutdown::add_scratch_dir(dir.clone());
        let cert = Certificate { dir };
        let out = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            // Without it, req -x509 marks the certificate a CA, and mod_ssl warns (AH01906).
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(cert.dir.join("key.pem"))
            .arg("-out")
            .arg(cert.dir.join("cert.pem"))
            .stdin(Stdio::null())
            .output()
            .context(|| "run openssl req (apt-get install openssl)")?;
        if !out.status.success() {
            bail!(
                "openssl req could not make the run's certificate: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(cert)
    }
}

impl Drop for Certificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `common` (the shared config, placeholders not yet filled) for a TLS-only listener: its
/// one `Listen` line gains `https`, and [`TLS_TEMPLATE`] follows with `@TLS_DIR@` filled in
/// as `tls_dir`. An error if `common` has no single top-level `Listen` line.
pub fn common_conf(common: &str, tls_dir: &Path) -> Result<String> {
    let listen = common
        .lines()
        .find_map(|l| l.strip_prefix("Listen "))
        .ok_or_else(|| Error("--tls: common.conf has no Listen line".into()))?;
    let https = format!("{} https", listen.trim());
    let mut conf = override_directives(common, &[("Listen", https)])?;
    conf.push('\n');
    conf.push_str(&TLS_TEMPLATE.replace("@TLS_DIR@", &tls_dir.display().to_string()));
    Ok(conf)
}

/// A TLS client connection over `tcp` that takes the run's self-signed certificate without
/// checking it (SNI `localhost`).
pub fn connect(tcp: TcpStream) -> Result<SslStream<TcpStream>> {
    let peer = tcp.peer_addr().map_or("?".into(), |a| a.to_string());
    let mut b = SslConnector::builder(SslMethod::tls_client())
        .map_err(|e| Error(format!("TLS client: {e}")))?;
    b.set_verify(SslVerifyMode::NONE);
    b.build()
        .configure()
        .map_err(|e| Error(format!("TLS client: {e}")))?
        .verify_hostname(false)
        .connect("localhost", tcp)
        .map_err(|e| Error(format!("TLS handshake with {peer}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpm::COMMON_TEMPLATE;

    #[test]
    fn the_one_listener_speaks_tls() {
        let conf = common_conf(COMMON_TEMPLATE, Path::new("/run/tls")).expect("tls conf");
        let listens: Vec<&str> = conf.lines().filter(|l| l.starts_with("Listen")).collect();
        assert_eq!(listens, ["Listen 127.0.0.1:@PORT@ https"]);
        for line in [
            "SSLEngine on",
            "SSLCertificateFile /run/tls/cert.pem",
            "SSLCertificateKeyFile /run/tls/key.pem",
            "SSLSessionCache shmcb:@ROOT@/run/ssl_scache(512000)",
            "SSLSessionTickets off",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line} missing:\n{conf}");
        }
        assert!(!conf.contains("@TLS_DIR@"));
        // Everything of the plain config is still there, in its order, ahead of the TLS lines.
        let plain: Vec<&str> = COMMON_TEMPLATE.lines().collect();
        let with: Vec<&str> = conf.lines().take(plain.len()).collect();
        let differ: Vec<(&&str, &&str)> = plain.iter().zip(&with).filter(|(a, b)| a != b).collect();
        assert_eq!(
            differ,
            [(&"Listen 127.0.0.1:@PORT@", &"Listen 127.0.0.1:@PORT@ https")]
        );
        assert!(common_conf("ServerName x\n", Path::new("/t")).is_err());
    }
}
