//! Raw TCP: connecting (with a small receive buffer for slow readers), resetting with
//! SO_LINGER 0, and the server side's state of a connection in /proc/net/tcp.

use std::fs;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Duration;

/// Connects to `ip:port` with TCP_NODELAY (each write is its own packet where the client
/// wants that: split pipelines, drip-fed heads).
pub fn connect(ip: &str, port: u16) -> io::Result<TcpStream> {
    let addr: SocketAddr = format!("{ip}:{port}")
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{ip}:{port}: {e}")))?;
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn setsockopt_int(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: setsockopt(2) on a descriptor we own, with a valid int option value.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &value as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Connects to `ip:port` with SO_RCVBUF `bytes`, set before connect so that the window
/// offered in the handshake is that small too: a slow reader that does not let the kernel
/// buffer megabytes for it.
pub fn connect_with_rcvbuf(ip: &str, port: u16, bytes: i32) -> io::Result<TcpStream> {
    let ip4: std::net::Ipv4Addr = ip
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{ip}: {e}")))?;
    // SAFETY: a fresh socket whose only owner becomes the TcpStream below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new socket nobody else owns.
    let s = unsafe { TcpStream::from_raw_fd(fd) };
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bytes)?;
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip4).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: connect(2) with a valid sockaddr_in of its own size.
    let rc = unsafe {
        libc::connect(
            fd,
            &sin as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    s.set_nodelay(true)?;
    Ok(s)
}

/// Closes `s` with SO_LINGER 0: the kernel sends a RST instead of a FIN.
pub fn reset(s: TcpStream) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt(2) with a valid struct linger on a descriptor we own.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    drop(s);
    Ok(())
}

/// The server's end of the connection from client port `client_port` to server port
/// `server_port`, from /proc/net/tcp (both ends are on this host): its state (as the table
/// numbers them) and its inode, 0 once no descriptor holds it (an orphan the kernel finishes
/// alone). None when it is gone from the table (closed and done, or reset).
///
/// The table lists every TCP socket of the host: with tens of thousands in TIME_WAIT (a
/// shared machine after a benchmark) one read costs ~0.1 s of CPU, and scenarios that poll
/// it every 50 ms starve the servers they time. [`server_side_of`] asks the kernel for the
/// one socket.
pub fn server_side(server_port: u16, client_port: u16) -> Option<(u8, u64)> {
    let text = fs::read_to_string("/proc/net/tcp").ok()?;
    let port_of =
        |field: &str| -> Option<u16> { u16::from_str_radix(field.rsplit(':').next()?, 16).ok() };
    text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (local, remote, state, inode) = (f.get(1)?, f.get(2)?, f.get(3)?, f.get(9)?);
        if port_of(local)? == server_port && port_of(remote)? == client_port {
            Some((u8::from_str_radix(state, 16).ok()?, inode.parse().ok()?))
        } else {
            None
        }
    })
}

/// As [`server_side`], for the server's end at `server` of a connection from `client`, by
/// one sock_diag lookup (netlink) of that socket; /proc/net/tcp where netlink fails.
pub fn server_side_of(server: SocketAddr, client: SocketAddr) -> Option<(u8, u64)> {
    match (server, client) {
        (SocketAddr::V4(sv), SocketAddr::V4(cl)) => match diag::lookup(sv, cl) {
            Ok(found) => found,
            Err(_) => server_side(sv.port(), cl.port()),
        },
        _ => server_side(server.port(), client.port()),
    }
}

/// Whether the server at `server` has let go of the connection from `client`: no
/// descriptor holds its end any more.
pub fn server_released(server: SocketAddr, client: SocketAddr) -> bool {
    server_side_of(server, client).is_none_or(|(_, inode)| inode == 0)
}

/// A client connection's (server, client) addresses, for [`server_released`].
pub fn ends(s: &TcpStream) -> io::Result<(SocketAddr, SocketAddr)> {
    Ok((s.peer_addr()?, s.local_addr()?))
}

/// One inet_diag lookup over NETLINK_SOCK_DIAG (linux/inet_diag.h).
mod diag {
    use std::io;
    use std::net::SocketAddrV4;

    const NETLINK_SOCK_DIAG: i32 = 4;
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;
    const TCP_LISTEN: u8 = 10;

    #[repr(C)]
    #[derive(Clone, Copy)]
    struct SockId {
        sport: u16,
        dport: u16,
        src: [u32; 4],
        dst: [u32; 4],
        ifindex: u32,
        cookie: [u32; 2],
    }

    #[repr(C)]
    struct Request {
        len: u32,
        kind: u16,
        flags: u16,
        seq: u32,
        pid: u32,
        family: u8,
        protocol: u8,
        ext: u8,
        pad: u8,
        states: u32,
        id: SockId,
    }

    /// The socket whose local end is `local` and remote end `remote`: its state and inode;
    /// None when there is none (the kernel's ENOENT, or only the listener on `local`).
    pub fn lookup(local: SocketAddrV4, remote: SocketAddrV4) -> io::Result<Option<(u8, u64)>> {
        // SAFETY: a fresh netlink socket, closed below on every path.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let r = ask(fd, local, remote);
        // SAFETY: fd is ours.
        unsafe { libc::close(fd) };
        r
    }

    fn ask(fd: i32, local: SocketAddrV4, remote: SocketAddrV4) -> io::Result<Option<(u8, u64)>> {
        let req = Request {
            len: std::mem::size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: NLM_F_REQUEST,
            seq: 1,
            pid: 0,
            family: libc::AF_INET as u8,
            protocol: libc::IPPROTO_TCP as u8,
            ext: 0,
            pad: 0,
            states: !0,
            id: SockId {
                sport: local.port().to_be(),
                dport: remote.port().to_be(),
                src: [u32::from(*local.ip()).to_be(), 0, 0, 0],
                dst: [u32::from(*remote.ip()).to_be(), 0, 0, 0],
                ifindex: 0,
                cookie: [!0, !0],
            },
        };
        // SAFETY: send(2) of a repr(C) value of its own size.
        let sent = unsafe {
            libc::send(
                fd,
                &req as *const Request as *const libc::c_void,
                std::mem::size_of::<Request>(),
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = [0u8; 8192];
        // SAFETY: recv(2) into a buffer of that size.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let b = &buf[..n as usize];
        let u16_at = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if b.len() < 16 {
            return Err(io::Error::other("short netlink answer"));
        }
        match u16_at(4) {
            NLMSG_ERROR if b.len() >= 20 => {
                let errno = -(u32_at(16) as i32);
                if errno == libc::ENOENT {
                    Ok(None)
                } else {
                    Err(io::Error::from_raw_os_error(errno))
                }
            }
            // struct inet_diag_msg after the 16-byte header: state at 1, inode at 68.
            SOCK_DIAG_BY_FAMILY if b.len() >= 16 + 72 => {
                let state = b[16 + 1];
                let inode = u64::from(u32_at(16 + 68));
                Ok((state != TCP_LISTEN).then_some((state, inode)))
            }
            other => Err(io::Error::other(format!("netlink answer type {other}"))),
        }
    }
}

/// Bytes waiting in `s`'s receive queue (FIONREAD): while a reader does not read, it grows
/// with every byte the server gets through.
pub fn unread(s: &TcpStream) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: ioctl(2) FIONREAD on a socket we own, into an int.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::FIONREAD, &mut n) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n.max(0) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// The netlink lookup finds the server's end of one connection, tells when its
    /// descriptor is closed, and does not mistake the listener for it.
    #[test]
    fn server_side_by_sock_diag() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let (server, client) = ends(&c).unwrap();
        let (state, inode) = server_side_of(server, client).expect("the server's end");
        assert_eq!(state, 1, "ESTABLISHED");
        assert_ne!(inode, 0);
        assert_eq!(
            Some((state, inode)),
            server_side(server.port(), client.port()),
            "as /proc/net/tcp says"
        );
        assert!(!server_released(server, client));
        drop(s);
        assert!(server_released(server, client));
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(server_side_of(server, nobody), None, "not the listener");
    }
}
