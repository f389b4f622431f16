//! An [`Endpoint`] over a non-blocking kernel UDP socket: SCTP over UDP
//! (RFC 6951) without DPDK, for tests and the benchmark.
//!
//! The driver moves datagrams between the socket and the endpoint in
//! bounded bursts; the caller owns the loop and the clock.

use std::io;
use std::net::{SocketAddr, UdpSocket};

use smoltcp::time::Instant;

use crate::Endpoint;

/// Most datagrams read from the socket per [`UdpDriver::poll`].
pub const RX_BURST_DATAGRAMS_MAX: usize = 64;
/// Most datagrams written to the socket per [`UdpDriver::poll`].
pub const TX_BURST_DATAGRAMS_MAX: usize = 64;
/// The largest UDP payload (an SCTP packet) the driver reads: a datagram that
/// does not fit is cut short and dropped by SCTP's checksum.
pub const DATAGRAM_LEN_MAX: usize = 65_507;

/// A UDP socket bound for an [`Endpoint`].
pub struct UdpDriver {
    socket: UdpSocket,
    rx: Vec<u8>,
    tx: Vec<u8>,
}

/// What one [`UdpDriver::poll`] moved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Datagrams received and handed to the endpoint.
    pub received: usize,
    /// Datagrams sent.
    pub sent: usize,
    /// Datagrams the socket refused (full send buffer); SCTP retransmits them.
    pub dropped: usize,
}

impl UdpDriver {
    /// Bind `addr` (port 0 for an ephemeral port; the RFC 6951 port is
    /// [`UDP_ENCAPSULATION_PORT`](crate::UDP_ENCAPSULATION_PORT)) and make the
    /// socket non-blocking.
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(UdpDriver {
            socket,
            rx: vec![0; DATAGRAM_LEN_MAX],
            tx: vec![0; DATAGRAM_LEN_MAX],
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// One round: receive up to [`RX_BURST_DATAGRAMS_MAX`] datagrams into
    /// `endpoint`, run its due timers, and send up to
    /// [`TX_BURST_DATAGRAMS_MAX`] of its packets. Errors other than
    /// `WouldBlock` (and a refused send) are returned.
    pub fn poll(&mut self, endpoint: &mut Endpoint, now: Instant) -> io::Result<PollStats> {
        let mut stats = PollStats::default();
        while stats.received < RX_BURST_DATAGRAMS_MAX {
            match self.socket.recv_from(&mut self.rx) {
                Ok((len, remote)) => {
                    endpoint.handle_datagram(now, remote, &self.rx[..len]);
                    stats.received += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // An ICMP port unreachable from an earlier send (Linux reports
                // it on the next call); SCTP's timers deal with the peer.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
        if endpoint.poll_timeout().is_some_and(|t| t <= now) {
            endpoint.handle_timeout(now);
        }
        while stats.sent + stats.dropped < TX_BURST_DATAGRAMS_MAX {
            let Some(transmit) = endpoint.poll_transmit(now, &mut self.tx) else {
                break;
            };
            match self
                .socket
                .send_to(&self.tx[..transmit.len], transmit.remote)
            {
                Ok(_) => stats.sent += 1,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    stats.dropped += 1
                }
                Err(e) => return Err(e),
            }
        }
        Ok(stats)
    }
}
