//! [`KernelUdp`]: the [`Datagrams`] interface over Linux UDP sockets, for
//! SCTP over UDP encapsulation (RFC 6951) through the host's stack: the
//! interop path to Linux SCTP and the kernel baseline of the benchmarks.
//!
//! Every socket is non-blocking: a send the kernel cannot take now is
//! [`UdpError::Full`] (back-pressure, nothing queued), a receive with
//! nothing waiting is `None`. One copy each way, through a scratch buffer
//! of the largest datagram (the kernel's socket buffers are set to
//! `buffer` octets).

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

use socket2::{Domain, Protocol, Socket, Type};

use crate::transport::{Datagrams, ListenError, UdpError, UdpId};

/// The largest UDP payload over IPv4.
const DATAGRAM_MAX: usize = 65_507;

/// UDP sockets on one local IPv4 address.
#[derive(Debug)]
pub struct KernelUdp {
    addr: Ipv4Addr,
    buffer: usize,
    reuse_port: bool,
    sockets: Vec<UdpSocket>,
    scratch: Vec<u8>,
}

impl KernelUdp {
    /// Sockets on `addr` (e.g. 127.0.0.1, or an address of a namespace's
    /// interface), each with kernel buffers of `buffer` octets per
    /// direction.
    pub fn new(addr: Ipv4Addr, buffer: usize) -> KernelUdp {
        KernelUdp {
            addr,
            buffer,
            reuse_port: false,
            sockets: Vec::new(),
            scratch: vec![0; DATAGRAM_MAX],
        }
    }

    /// Binds its sockets with `SO_REUSEPORT` (socket(7)): several
    /// `KernelUdp`s (a core each) may bind one port, and Linux gives each
    /// datagram to one of their sockets by a hash of its four-tuple, so
    /// that every datagram of one pair of endpoints (an SCTP association
    /// over UDP) reaches the same socket while the set of sockets stays the
    /// same.
    pub fn reuse_port(mut self) -> KernelUdp {
        self.reuse_port = true;
        self
    }

    fn socket(&self, socket: UdpId) -> Result<&UdpSocket, UdpError> {
        self.sockets
            .get(socket.0 as usize)
            .ok_or(UdpError::InvalidSocket)
    }
}

/// Where Linux would send UDP datagrams to `to` from (the local address
/// of the route), and the path MTU it knows for it (IP_MTU on a connected
/// socket, ip(7): the route's or its interface's MTU, lowered by any ICMP
/// "fragmentation needed" seen). A protocol that cannot discover the path
/// MTU itself (an SCTP association over UDP) sizes its packets by it, so
/// Linux never fragments them.
pub fn route_to(to: SocketAddrV4) -> std::io::Result<(SocketAddrV4, usize)> {
    let probe = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    probe.connect(to)?;
    let SocketAddr::V4(local) = probe.local_addr()? else {
        return Err(std::io::Error::other("no IPv4 address"));
    };
    let mtu = nix::sys::socket::getsockopt(&probe, nix::sys::socket::sockopt::IpMtu)?;
    Ok((local, usize::try_from(mtu).unwrap_or(0)))
}

/// How many errors in a row one `udp_recv_with` passes over before it
/// reports nothing received.
const RECV_ERRORS_SKIPPED_MAX: usize = 4;

impl Datagrams for KernelUdp {
    fn udp_bind(&mut self, port: u16) -> Result<UdpId, ListenError> {
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(|_| ListenError::Io)?;
        let _ = socket.set_send_buffer_size(self.buffer);
        let _ = socket.set_recv_buffer_size(self.buffer);
        if self.reuse_port {
            socket.set_reuse_port(true).map_err(|_| ListenError::Io)?;
        }
        socket
            .bind(&SocketAddr::V4(SocketAddrV4::new(self.addr, port)).into())
            .map_err(|e| match e.kind() {
                ErrorKind::AddrInUse => ListenError::PortInUse,
                ErrorKind::PermissionDenied => ListenError::Denied,
                _ => ListenError::Io,
            })?;
        socket.set_nonblocking(true).map_err(|_| ListenError::Io)?;
        self.sockets.push(socket.into());
        Ok(UdpId(self.sockets.len() as u32 - 1))
    }

    fn udp_local(&self, socket: UdpId) -> Result<SocketAddrV4, UdpError> {
        match self.socket(socket)?.local_addr() {
            Ok(SocketAddr::V4(addr)) => Ok(addr),
            _ => Err(UdpError::Io),
        }
    }

    fn udp_send_with(
        &mut self,
        socket: UdpId,
        remote: SocketAddrV4,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), UdpError> {
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(UdpError::Unaddressable);
        }
        if len > DATAGRAM_MAX {
            return Err(UdpError::TooLong);
        }
        let sock = self
            .sockets
            .get(socket.0 as usize)
            .ok_or(UdpError::InvalidSocket)?;
        let buffer = &mut self.scratch[..len];
        fill(buffer);
        match sock.send_to(buffer, remote) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Err(UdpError::Full),
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => Err(UdpError::TooLong),
            Err(_) => Err(UdpError::Io),
        }
    }

    fn udp_recv_with<R>(
        &mut self,
        socket: UdpId,
        take: impl FnOnce(&[u8], SocketAddrV4) -> R,
    ) -> Option<R> {
        let sock = self.sockets.get(socket.0 as usize)?;
        // A pending error (an ICMP error queued on the socket; Linux queues
        // them on an unconnected socket only with IP_RECVERR, which we do
        // not set, so this is defence) is consumed by the call that reports
        // it, and datagrams may wait behind it: try again rather than read
        // it as "nothing received", which ends the caller's drain. Bounded,
        // so a socket that fails every time cannot hold the caller.
        for _ in 0..RECV_ERRORS_SKIPPED_MAX {
            match sock.recv_from(&mut self.scratch) {
                Ok((n, SocketAddr::V4(from))) => return Some(take(&self.scratch[..n], from)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return None,
                // An IPv6 source cannot reach an IPv4 socket; skip it.
                Ok(_) | Err(_) => continue,
            }
        }
        None
    }
}
