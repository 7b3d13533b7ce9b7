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

/// Whether the server has let go of that connection: no descriptor holds its end any more.
pub fn server_released(server_port: u16, client_port: u16) -> bool {
    server_side(server_port, client_port).is_none_or(|(_, inode)| inode == 0)
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
