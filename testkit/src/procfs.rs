//! What `/proc` says about a process: state, parent, CPU time, children, command line; and
//! about the host's TCP sockets on a port (connections not yet closed, the listener, its
//! backlog and which process holds it).
//!
//! Every reading is a snapshot: a process may exit, and its pid be reused, between two calls.

use std::collections::BTreeSet;
use std::fs;

/// The fields of `/proc/<pid>/stat` the kit uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `Z` (zombie: exited, not yet reaped), ...
    pub state: char,
    /// The parent's pid.
    pub ppid: i32,
    /// `utime + stime` of all its threads, in clock ticks (see [`clock_ticks_per_sec`]).
    pub cpu_ticks: u64,
    /// `cutime + cstime`: CPU ticks of the children it has reaped.
    pub reaped_cpu_ticks: u64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name may contain spaces and parentheses,
/// so the fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] = state (field 3), f[1] = ppid (4), f[11..15] = utime stime cutime cstime (14..17).
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: f.get(1)?.parse().ok()?,
        cpu_ticks: num(11)? + num(12)?,
        reaped_cpu_ticks: num(13)? + num(14)?,
    })
}

/// `/proc/<pid>/stat`, if the process exists.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The state letter of `pid` (`Z` for a zombie), if it exists.
pub fn proc_state(pid: i32) -> Option<char> {
    stat(pid).map(|s| s.state)
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    proc_state(pid).is_some_and(|s| s != 'Z')
}

/// `utime + stime` of `pid` (all its threads), in clock ticks.
pub fn cpu_ticks(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.cpu_ticks)
}

/// `sysconf(_SC_CLK_TCK)`: the unit of the CPU times in `/proc/<pid>/stat`; `None` if the
/// system does not say.
pub fn clock_ticks_per_sec() -> Option<u64> {
    // SAFETY: sysconf(3) has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(t).ok().filter(|&t| t > 0)
}

/// Every pid in `/proc`.
pub fn all_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `(pid, state)` of every process whose parent is `ppid`, zombies included, by pid.
pub fn children_of(ppid: i32) -> Vec<(i32, char)> {
    let mut v: Vec<_> = all_pids()
        .into_iter()
        .filter_map(|p| match stat(p) {
            Some(s) if s.ppid == ppid => Some((p, s.state)),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v
}

/// The live (non-zombie) children of `ppid`.
pub fn live_children(ppid: i32) -> BTreeSet<i32> {
    children_of(ppid)
        .into_iter()
        .filter(|&(_, state)| state != 'Z')
        .map(|(p, _)| p)
        .collect()
}

/// The command line of `pid`, arguments joined by spaces (empty for a zombie or a gone pid).
pub fn cmdline(pid: i32) -> String {
    fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Live processes whose command line contains `text`: for a private httpd, its config file's
/// path (`apache2 -f <root>/httpd.conf`) names its parent, its children and any `apache2 -k`
/// control process of it, and nothing else on the host.
pub fn processes_naming(text: &str) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| alive(p) && cmdline(p).contains(text))
        .collect()
}

/// TCP sockets (IPv4 and IPv6) whose local port is `port` and that the local side has not
/// begun to close yet: ESTABLISHED, or CLOSE_WAIT (the peer closed, we have not). A server
/// whose count reaches 0 has called `shutdown` or `close` on every connection it accepted.
pub fn tcp_unclosed_on_port(port: u16) -> usize {
    unclosed_peers_in_tables(port, None).len()
}

/// Of [`tcp_unclosed_on_port`]'s sockets, those that process `pid` holds (their inode is
/// one of its descriptors), by their peers' ports: the connections a server process has
/// open on `port`, and which clients they are (for clients that all connect from one
/// address).
///
/// One reading of the kernel's tables: a socket that stays open the whole time is listed
/// at most once, but a reading that races other sockets opening and closing may miss it.
/// A caller that needs every connection of a quiet process unites a few readings.
pub fn pid_connection_peers_on(pid: i32, port: u16) -> BTreeSet<u16> {
    let inodes = pid_socket_inodes(pid);
    unclosed_peers_in_tables(port, Some(&inodes))
        .iter()
        .filter_map(|a| port_of(a))
        .collect()
}

/// The inodes of the sockets process `pid` holds (empty if it is gone).
fn pid_socket_inodes(pid: i32) -> BTreeSet<String> {
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return BTreeSet::new();
    };
    rd.flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect()
}

/// Whether every socket process `pid` holds is settled: a TCP socket that listens or is
/// established, or a socket of another kind (UDP, raw, netlink, unix). Not settled: a TCP
/// connection on its way out that the process has yet to close (CLOSE_WAIT, LAST_ACK, ...,
/// or closed by the kernel and out of its tables while the descriptor stays open). False
/// if the process is gone.
pub fn pid_sockets_settled(pid: i32) -> bool {
    if !alive(pid) {
        return false;
    }
    let mut tcp = std::collections::HashMap::new();
    let mut other = BTreeSet::new();
    for t in [
        "tcp", "tcp6", "udp", "udp6", "raw", "raw6", "netlink", "unix",
    ] {
        let text = fs::read_to_string(format!("/proc/net/{t}")).unwrap_or_default();
        // The inode's column: 6 in the unix table, 9 in the others.
        let at = if t == "unix" { 6 } else { 9 };
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let Some(inode) = f.get(at).map(|i| i.to_string()) else {
                continue;
            };
            if t.starts_with("tcp") {
                tcp.insert(inode, f[3].to_string());
            } else {
                other.insert(inode);
            }
        }
    }
    pid_socket_inodes(pid)
        .iter()
        .all(|inode| match tcp.get(inode) {
            // LISTEN, ESTABLISHED.
            Some(state) => state == "0A" || state == "01",
            None => other.contains(inode),
        })
}

/// The processes holding the listening socket on 127.0.0.1:`port`.
pub fn pids_listening_on(port: u16) -> Vec<i32> {
    all_pids()
        .into_iter()
        .filter(|&p| pid_listens_on(p, port))
        .collect()
}

/// One line per thread of `pid`: its id, state, kernel wait channel and the system call
/// it is in with its arguments (`/proc/<pid>/task/*/syscall`): for a failure message about
/// a process that does not do what it should.
pub fn thread_report(pid: i32) -> String {
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone\n");
    };
    let mut out = String::new();
    for t in rd.flatten() {
        let read = |f: &str| fs::read_to_string(t.path().join(f)).unwrap_or_default();
        let state = parse_stat(&read("stat")).map_or('?', |s| s.state);
        out += &format!(
            "  tid {} state {state} wchan {} syscall {}\n",
            t.file_name().to_string_lossy(),
            read("wchan").trim(),
            read("syscall").trim()
        );
    }
    out
}

/// The peer addresses (as the tables write them) of the unclosed sockets on `port`, as a
/// set: `/proc/net/tcp` is read in pieces and is no snapshot. With 5,000 connections open
/// and one more opened and closed in a loop, 60 readings listed 0-45 sockets twice in most
/// readings and some 4,000 twice in two (none missing); counted as a list, a child's 967
/// connections once read as 1,004.
fn unclosed_peers_in_tables(port: u16, inodes: Option<&BTreeSet<String>>) -> BTreeSet<String> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| fs::read_to_string(f).ok())
        .flat_map(|t| unclosed_peers(&t, port, inodes))
        .collect()
}

/// The peer addresses of [`tcp_unclosed_on_port`]'s sockets in the text of one
/// `/proc/net/tcp*` table; only sockets with one of `inodes` if given.
fn unclosed_peers(table: &str, port: u16, inodes: Option<&BTreeSet<String>>) -> Vec<String> {
    const ESTABLISHED: &str = "01";
    const CLOSE_WAIT: &str = "08";
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            // sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = l.split_whitespace().collect();
            let held = inodes.map_or(true, |set| f.get(9).is_some_and(|i| set.contains(*i)));
            let unclosed = matches!(f.get(3), Some(&ESTABLISHED | &CLOSE_WAIT));
            if f.get(1).and_then(|a| port_of(a)) == Some(port) && unclosed && held {
                f.get(2).map(|a| a.to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The port of an address as `/proc/net/tcp*` writes it (`0100007F:4650` is 18000).
fn port_of(addr: &str) -> Option<u16> {
    u16::from_str_radix(addr.rsplit(':').next()?, 16).ok()
}

/// The LISTEN socket on 127.0.0.1:`port` in `/proc/net/tcp`, as (rx_queue, inode): for a
/// listening socket rx_queue is its accept backlog.
fn listening_socket(port: u16) -> Option<(u32, String)> {
    find_listening(&fs::read_to_string("/proc/net/tcp").ok()?, port)
}

/// [`listening_socket`] over the text of `/proc/net/tcp`.
fn find_listening(table: &str, port: u16) -> Option<(u32, String)> {
    const LISTEN: &str = "0A";
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // sl local_address rem_address st tx_queue:rx_queue tr:when retrnsmt uid timeout inode
        if f.len() > 9 && f[1] == local && f[3] == LISTEN {
            let rx = u32::from_str_radix(f[4].split(':').nth(1)?, 16).ok()?;
            Some((rx, f[9].to_string()))
        } else {
            None
        }
    })
}

/// Connections waiting in the accept queue of the listening socket 127.0.0.1:`port`.
pub fn listen_backlog(port: u16) -> Option<u32> {
    listening_socket(port).map(|(rx, _)| rx)
}

/// Whether process `pid` holds the listening socket on 127.0.0.1:`port` (its inode is one
/// of the process's descriptors), not merely whether some process listens there.
pub fn pid_listens_on(pid: i32, port: u16) -> bool {
    let Some((_, inode)) = listening_socket(port) else {
        return false;
    };
    let target = format!("socket:[{inode}]");
    fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| fs::read_link(e.path()).is_ok_and(|t| t.as_os_str() == target.as_str()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_name() {
        let line = "1234 (apache2 (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    7 3 11 2 20 0 1 0 100 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                state: 'S',
                ppid: 1,
                cpu_ticks: 10,
                reaped_cpu_ticks: 13
            })
        );
        assert_eq!(parse_stat("1234 (x) S 1"), None);
    }

    #[test]
    fn this_process_listens_reports_its_threads_and_its_sockets_are_settled() {
        let me = std::process::id() as i32;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert_eq!(pids_listening_on(port), vec![me]);
        let report = thread_report(me);
        assert!(
            report.contains(" state ") && report.contains(" syscall "),
            "{report}"
        );
        assert!(pid_sockets_settled(me), "a listening socket is settled");
        // A connection the peer closed and this process has not: CLOSE_WAIT.
        let c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (accepted, _) = l.accept().unwrap();
        drop(c);
        assert!(crate::wait::wait_until(
            std::time::Duration::from_secs(10),
            || { !pid_sockets_settled(me) }
        ));
        drop(accepted);
        drop(l);
        assert!(pids_listening_on(port).is_empty());
    }

    #[test]
    fn unclosed_tcp_sockets_by_local_port_and_state() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue\n\
   0: 0100007F:4650 00000000:0000 0A 00000000:00000000\n\
   1: 0100007F:4650 0100007F:C350 01 00000000:00000000\n\
   2: 0100007F:4650 0100007F:C351 08 00000000:00000000\n\
   3: 0100007F:4650 0100007F:C352 09 00000000:00000000\n\
   4: 0100007F:C350 0100007F:4650 01 00000000:00000000\n";
        // 0x4650 = 18000: one listening (0A), one established, one close-wait, one last-ack
        // (09, already shut down); the last line is the client's end.
        assert_eq!(unclosed_peers(table, 18000, None).len(), 2);
        assert_eq!(unclosed_peers(table, 18001, None).len(), 0);
    }

    #[test]
    fn unclosed_tcp_sockets_of_one_process_by_inode() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:4650 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 100 1\n\
   1: 0100007F:4650 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 101 1\n\
   2: 0100007F:4650 0100007F:C351 01 00000000:00000000 00:00000000 00000000     0        0 102 1\n\
   3: 0100007F:4650 0100007F:C352 08 00000000:00000000 00:00000000 00000000     0        0 103 1\n";
        let ours: BTreeSet<String> = ["100", "102", "103", "999"].map(String::from).into();
        // The listener (100) is not a connection; 101 is another process's.
        assert_eq!(unclosed_peers(table, 18000, Some(&ours)).len(), 2);
        // Their clients' ports: 0xC351, 0xC352.
        assert_eq!(
            unclosed_peers(table, 18000, Some(&ours)),
            ["0100007F:C351", "0100007F:C352"]
        );
        assert_eq!(
            unclosed_peers(table, 18000, Some(&BTreeSet::new())).len(),
            0
        );
    }

    #[test]
    fn the_connection_this_process_accepted() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().unwrap().port();
        let me = std::process::id() as i32;
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let (server_end, _) = l.accept().expect("accept");
        assert_eq!(pid_connection_peers_on(me, port).len(), 1);
        drop(server_end);
        assert_eq!(pid_connection_peers_on(me, port).len(), 0);
    }

    #[test]
    fn listening_socket_by_port_with_backlog_and_inode() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:4650 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 111 1\n\
   1: 0100007F:4650 00000000:0000 0A 00000000:00000005 00:00000000 00000000     0        0 222 1\n";
        // 0x4650 = 18000: the established line's inode is not the listener's.
        assert_eq!(find_listening(table, 18000), Some((5, "222".to_string())));
        assert_eq!(find_listening(table, 18001), None);
    }

    #[test]
    fn the_listener_this_process_holds() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().unwrap().port();
        let me = std::process::id() as i32;
        assert!(pid_listens_on(me, port));
        assert_eq!(listen_backlog(port), Some(0));
        drop(l);
        assert!(!pid_listens_on(me, port));
    }

    #[test]
    fn own_process_and_child() {
        let me = std::process::id() as i32;
        assert!(alive(me));
        assert!(cmdline(me).contains("rworker_testkit"));
        assert!(clock_ticks_per_sec().is_some());
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        assert!(live_children(me).contains(&pid));
        assert_eq!(stat(pid).map(|s| s.ppid), Some(me));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(!children_of(me).iter().any(|&(p, _)| p == pid));
    }
}
