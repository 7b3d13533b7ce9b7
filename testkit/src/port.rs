//! A free TCP port on the loopback.

use std::io;
use std::net::TcpListener;

/// A port on 127.0.0.1 that was free a moment ago. Another process may take it before httpd
/// binds it; starters retry on "Address already in use" (see
/// [`crate::httpd::StartFailure::port_in_use`]).
pub fn free_port() -> io::Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("bind 127.0.0.1:0 to find a free port: {e}"),
        )
    })?;
    Ok(l.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract is "free a moment ago": a parallel test's client connection may take the
    /// same ephemeral port before we bind it (seen once in CI), so one of a few tries must bind.
    #[test]
    fn a_free_port_can_be_bound() {
        let errors: Vec<io::Error> = (0..5)
            .map_while(|_| {
                let p = free_port().expect("free port");
                assert_ne!(p, 0);
                TcpListener::bind(("127.0.0.1", p)).err()
            })
            .collect();
        assert!(errors.len() < 5, "no port found was bindable: {errors:?}");
    }
}
