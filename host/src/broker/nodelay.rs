//! `TCP_NODELAY` on sockets a client library opened without it.
//!
//! rskafka 0.6 connects with a plain `TcpStream::connect`, never sets `TCP_NODELAY`, and writes
//! each request in two parts (its 4-byte length, then its body). With Nagle's algorithm on, the
//! body waits until the broker acknowledges the length, and the broker delays that ACK (40 ms on
//! Linux): every produce request paid it, so a Kafka sink confirmed at most one batch per 40 ms
//! (0.17× the no-sink drain). rskafka offers no hook on its sockets, so the Kafka session finds
//! them: [`set_on_sockets_to`] sets the option on this process's TCP sockets whose peer listens on
//! the given port (the bootstrap server's), and leaves every other socket alone.

/// Sets `TCP_NODELAY` on each TCP socket of this process connected to `port` that lacks it, and returns how many it changed. On Linux it lists the process's descriptors in
/// `/proc/self/fd`; elsewhere it changes nothing and returns 0.
///
/// A descriptor closed (or reused) between the listing and the calls is harmless: the calls name
/// it by number, touch no memory but their own arguments, and fail on a closed one; a reused one
/// is changed only if it is itself a TCP socket connected to `port`.
pub(super) fn set_on_sockets_to(port: u16) -> usize {
    #[cfg(target_os = "linux")]
    {
        linux::set_on_sockets_to(port)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = port;
        0
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::os::unix::ffi::OsStrExt;

    pub(super) fn set_on_sockets_to(port: u16) -> usize {
        let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
            return 0;
        };
        let mut changed = 0;
        for entry in entries.flatten() {
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            // Sockets only: their link reads `socket:[inode]`.
            let is_socket = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.as_os_str().as_bytes().starts_with(b"socket:"));
            if is_socket
                && is_tcp(fd)
                && peer_port(fd) == Some(port)
                && int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY) == Some(0)
                && set_nodelay(fd)
            {
                changed += 1;
            }
        }
        changed
    }

    /// Whether `fd` is a stream socket of the TCP protocol.
    fn is_tcp(fd: i32) -> bool {
        int_option(fd, libc::SOL_SOCKET, libc::SO_TYPE) == Some(libc::SOCK_STREAM)
            && int_option(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL) == Some(libc::IPPROTO_TCP)
    }

    /// The port of `fd`'s peer, when it is an IPv4 or IPv6 socket that is connected.
    fn peer_port(fd: i32) -> Option<u16> {
        // SAFETY: sockaddr_storage is plain data, valid zeroed.
        let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut length = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: getpeername writes at most `length` bytes into `address`, which we own; on a
        // descriptor that is not (or no longer) a connected socket it fails and writes nothing.
        let status = unsafe {
            libc::getpeername(
                fd,
                (&raw mut address).cast::<libc::sockaddr>(),
                &raw mut length,
            )
        };
        if status != 0 {
            return None;
        }
        match i32::from(address.ss_family) {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let v4 = unsafe { &*(&raw const address).cast::<libc::sockaddr_in>() };
                Some(u16::from_be(v4.sin_port))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let v6 = unsafe { &*(&raw const address).cast::<libc::sockaddr_in6>() };
                Some(u16::from_be(v6.sin6_port))
            }
            _ => None,
        }
    }

    /// An integer socket option of `fd`, or `None` when it cannot be read.
    fn int_option(fd: i32, level: i32, name: i32) -> Option<i32> {
        let mut value: libc::c_int = 0;
        let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `length` bytes into `value`, which we own.
        let status = unsafe {
            libc::getsockopt(
                fd,
                level,
                name,
                (&raw mut value).cast::<libc::c_void>(),
                &raw mut length,
            )
        };
        (status == 0).then_some(value)
    }

    /// Turns `TCP_NODELAY` on for `fd`; whether it took.
    fn set_nodelay(fd: i32) -> bool {
        let on: libc::c_int = 1;
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `on`, which we own.
        let status = unsafe {
            libc::setsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&raw const on).cast::<libc::c_void>(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        status == 0
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::set_on_sockets_to;

    #[test]
    fn sets_the_option_on_sockets_to_the_ports_named_and_on_no_other() {
        let named = TcpListener::bind("127.0.0.1:0").unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let to_named = TcpStream::connect(named.local_addr().unwrap()).unwrap();
        let to_other = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let (accepted, _) = named.accept().unwrap();
        assert!(!to_named.nodelay().unwrap() && !to_other.nodelay().unwrap());

        let port = named.local_addr().unwrap().port();
        // Other tests of this process may hold sockets to the named port's number only by
        // chance (it is a fresh ephemeral port): at least the one connected here changes.
        assert!(set_on_sockets_to(port) >= 1);
        assert!(to_named.nodelay().unwrap(), "the socket to the named port");
        assert!(
            !to_other.nodelay().unwrap(),
            "a socket to another port is left alone"
        );
        // The accepted end's peer is the client's ephemeral port, not the named one.
        assert!(
            !accepted.nodelay().unwrap(),
            "the listening side is left alone"
        );
        assert_eq!(
            set_on_sockets_to(port),
            0,
            "a second pass finds nothing to change"
        );
    }
}
