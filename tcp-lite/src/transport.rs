//! The connection interface every transport offers: smoltcp over any
//! device ([`Stack`](crate::Stack)) and Linux TCP
//! ([`KernelTransport`](crate::sys::kernel::KernelTransport)).

use core::fmt;
use std::net::SocketAddrV4;

use smoltcp::time::Instant;

use crate::event::{ConnId, Event, ListenerId};

/// What [`Transport::poll_direct`] offers received octets to: given the
/// connection, the octets and the stream position of the first, returns how
/// many it took, from the first.
pub type DirectReceive<'d> = dyn FnMut(ConnId, &[u8], u64) -> usize + 'd;

/// A set of TCP connections driven by [`poll`](Transport::poll).
///
/// Stream positions count octets from the start of each direction (0 is the
/// first octet after the handshake), as MPA needs for marker placement
/// (RFC 5044 §4.3: markers sit at multiples of 512 of the stream position).
pub trait Transport {
    /// Listen on `port` of the local address.
    fn listen(&mut self, port: u16) -> Result<ListenerId, ListenError>;

    /// Stop listening; connections already accepted stay open.
    fn unlisten(&mut self, listener: ListenerId);

    /// Start an active open to `remote`. [`EventKind::Connected`](crate::EventKind::Connected)
    /// (or `Reset`/`TimedOut`) follows from a later poll.
    fn connect(&mut self, remote: SocketAddrV4, now: Instant) -> Result<ConnId, ConnectError>;

    /// Let `fill` write straight into the connection's transmit space: it
    /// gets the free contiguous space (at most `max` octets, possibly empty)
    /// and returns how many octets it wrote, which are then committed at
    /// once. Call again for the part of the space that wraps around.
    fn send_with<R>(
        &mut self,
        conn: ConnId,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, SendError>;

    /// Octets that can be queued now.
    fn send_space(&self, conn: ConnId) -> Result<usize, SendError>;

    /// Octets to put in the current TCP segment so that it ends on a segment
    /// boundary: size an FPDU to at most this, or start the next segment
    /// (RFC 5044: "MPA-aware TCP" senders put whole FPDUs in segments).
    /// Where the transmit ring wraps, the room ends there too (smoltcp cuts
    /// a segment at the wrap). `None` when the transport does not control
    /// segmentation (kernel TCP).
    fn segment_room(&mut self, conn: ConnId) -> Result<Option<usize>, SendError>;

    /// The connection's local and remote address, from the handshake on.
    fn endpoints(&self, conn: ConnId) -> Result<(SocketAddrV4, SocketAddrV4), SendError>;

    /// Stream position of the next octet [`send_with`](Transport::send_with) queues.
    fn send_position(&self, conn: ConnId) -> Result<u64, SendError>;

    /// Let `take` look at received data: it gets a borrowed slice (contiguous,
    /// so possibly only part of the queue) with the stream position of its
    /// first octet, and returns how many octets it consumed.
    fn recv_with<R>(
        &mut self,
        conn: ConnId,
        take: impl FnOnce(&[u8], u64) -> (usize, R),
    ) -> Result<R, RecvError>;

    /// Octets waiting to be received.
    fn recv_queue(&self, conn: ConnId) -> Result<usize, RecvError>;

    /// Orderly close of our direction (FIN after the queued data).
    fn close(&mut self, conn: ConnId) -> Result<(), SendError>;

    /// Abort: send RST and drop queued data. The handle stays valid (and
    /// reports nothing more) until released.
    fn abort(&mut self, conn: ConnId) -> Result<(), SendError>;

    /// Give the connection's segments precedence over the other
    /// connections' on our egress, or take it back: a class of service for
    /// latency-sensitive traffic beside bulk transfers, as a NIC's strict
    /// priority queue. A [`Stack`](crate::Stack) sends an urgent
    /// connection's segments at the next poll before any other
    /// connection's; a transport whose egress is the kernel's leaves the
    /// order to it (the default: nothing changes).
    fn set_urgent(&mut self, conn: ConnId, urgent: bool) -> Result<(), SendError> {
        let _ = (conn, urgent);
        Ok(())
    }

    /// Marks the connection's segments with DSCP `dscp` from now on (RFC
    /// 2474: the class of service a switch queues them by, 0 to 63; 0, the
    /// default, unmarked; ECN's two bits stay as they are). A connection
    /// with a peer (a [`Stack`](crate::Stack) names it by its addresses and
    /// ports: an active open has them from `connect` on); a transport that
    /// cannot mark leaves them as they are (the default).
    ///
    /// # Panics
    /// If `dscp` is above 63 (a TOS octet given where its DSCP belongs).
    fn set_dscp(&mut self, conn: ConnId, dscp: u8) -> Result<(), SendError> {
        assert!(dscp < 64, "a DSCP is six bits: {dscp}");
        let _ = conn;
        Ok(())
    }

    /// [`connect`](Transport::connect) with the connection's segments
    /// marked DSCP `dscp` from its SYN on, as an rdma_cm user sets a
    /// connection's TOS before it connects (`RDMA_OPTION_ID_TOS`), so that
    /// the network and a peer that reflects the class
    /// ([`reflect_dscp`](Transport::reflect_dscp)) serve it so from the
    /// first segment. 0 is [`connect`](Transport::connect). The default
    /// connects and then marks ([`set_dscp`](Transport::set_dscp)): from
    /// the SYN on where the transport sends it at a later poll, as a
    /// [`Stack`](crate::Stack) does (Linux TCP sets IP_TOS before
    /// connect(2) instead).
    ///
    /// # Panics
    /// If `dscp` is above 63.
    fn connect_marked(
        &mut self,
        remote: SocketAddrV4,
        now: Instant,
        dscp: u8,
    ) -> Result<ConnId, ConnectError> {
        assert!(dscp < 64, "a DSCP is six bits: {dscp}");
        let conn = self.connect(remote, now)?;
        if dscp != 0 {
            let _ = self.set_dscp(conn, dscp);
        }
        Ok(conn)
    }

    /// The DSCP the connection's segments carry ([`set_dscp`](Transport::set_dscp),
    /// [`connect_marked`](Transport::connect_marked),
    /// [`reflect_dscp`](Transport::reflect_dscp)); 0 where unmarked or
    /// where the transport cannot mark (the default).
    fn dscp(&self, conn: ConnId) -> u8 {
        let _ = conn;
        0
    }

    /// Give each connection a listener accepts from now on the DSCP its
    /// SYN carried, on its segments from the SYN-ACK on, and tell it
    /// ([`peer_dscp`](Transport::peer_dscp)); or stop. A
    /// [`Stack`](crate::Stack) looks at each received frame's headers
    /// while it reflects (SYNs to its address, kept in a table of fixed
    /// size, which a flood of SYNs only overwrites); a transport that
    /// cannot see its peers' SYNs reflects nothing (the default; Linux
    /// TCP's own way is the host-wide `net.ipv4.tcp_reflect_tos`).
    fn reflect_dscp(&mut self, on: bool) {
        let _ = on;
    }

    /// The DSCP of the SYN that opened a connection a listener accepted,
    /// where the transport reflected it ([`reflect_dscp`](Transport::reflect_dscp));
    /// `None` for active opens, or when it is not known.
    fn peer_dscp(&self, conn: ConnId) -> Option<u8> {
        let _ = conn;
        None
    }

    /// Free the handle and its buffers. An open connection is aborted first
    /// (its RST goes out at the next poll). A connection in TIME-WAIT is
    /// freed at once: a FIN the peer sends again is answered with RST, which
    /// a peer in LAST-ACK takes as the end of the connection.
    fn release(&mut self, conn: ConnId);

    /// Move packets and run timers. Returns whether anything happened.
    fn poll(&mut self, now: Instant) -> bool;

    /// [`Transport::poll`], offering `direct` each received run of a
    /// connection's octets that would otherwise land in an empty receive
    /// buffer (the next octets of the stream, nothing waiting before them):
    /// `direct(conn, octets, position)` returns how many of them, from the
    /// first, it took, as the `take` of [`Transport::recv_with`] would have
    /// (`position` is the stream position of the first, as there), and the
    /// rest are buffered for `recv_with` as usual. Taken octets are read:
    /// no [`EventKind::Readable`](crate::EventKind::Readable) announces
    /// them. A receiver that takes whole records as they arrive saves the
    /// copy into the buffer and back out. By default (a transport that
    /// cannot offer them, kernel TCP) this is `poll`, and every octet goes
    /// through the buffer.
    fn poll_direct(&mut self, now: Instant, direct: &mut DirectReceive<'_>) -> bool {
        let _ = direct;
        self.poll(now)
    }

    /// When to poll next at the latest (`None`: only on input).
    fn poll_at(&mut self, now: Instant) -> Option<Instant>;

    /// The next pending event.
    fn next_event(&mut self) -> Option<Event>;

    /// Connections open (not yet released).
    fn connections(&self) -> usize;
}

/// A UDP socket of a [`Datagrams`] transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpId(pub(crate) u32);

/// UDP datagrams beside a transport's TCP connections, on the same device
/// (an in-memory link, a TAP fd, a DPDK queue) or the kernel's sockets:
/// what SCTP over UDP encapsulation (RFC 6951) runs on, so that DDP over
/// SCTP (RFC 5043) goes wherever MPA over TCP goes. Datagrams move at the
/// transport's [`Transport::poll`] (the kernel's at once).
pub trait Datagrams {
    /// A UDP socket on `port` of the local address (0: an ephemeral port).
    fn udp_bind(&mut self, port: u16) -> Result<UdpId, ListenError>;

    /// The socket's local address.
    fn udp_local(&self, socket: UdpId) -> Result<SocketAddrV4, UdpError>;

    /// Queues one datagram of `len` octets to `remote`, written in place by
    /// `fill`. [`UdpError::Full`] is back-pressure: nothing was queued, try
    /// again after a poll.
    fn udp_send_with(
        &mut self,
        socket: UdpId,
        remote: SocketAddrV4,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), UdpError>;

    /// Hands the oldest received datagram and its sender to `take`, and
    /// frees it; `None` when none waits.
    fn udp_recv_with<R>(
        &mut self,
        socket: UdpId,
        take: impl FnOnce(&[u8], SocketAddrV4) -> R,
    ) -> Option<R>;
}

macro_rules! errors {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $(#[doc = $text] $variant,)*
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(match self { $($name::$variant => $text,)* })
            }
        }

        impl std::error::Error for $name {}
    };
}

errors! {
    /// Why [`Transport::listen`] failed.
    ListenError {
        PortInUse => "the port is in use: it has a listener, or a connection of ours took it",
        Unaddressable => "port 0 cannot be listened on",
        Io => "the operating system refused the listening socket",
        Denied => "the operating system refused the listening socket: permission denied (EACCES: \
                   a port below 1024 needs CAP_NET_BIND_SERVICE)",
    }
}

errors! {
    /// Why [`Transport::connect`] failed.
    ConnectError {
        TooManyConnections => "max_connections connections are open already",
        NoPort => "no free ephemeral port",
        Unaddressable => "the remote address or port is unspecified",
        Io => "the operating system refused the socket",
    }
}

errors! {
    /// Why a send-side call failed.
    SendError {
        InvalidConnection => "the connection handle was released or never existed",
        InvalidState => "the connection cannot send (not established, or closed by us)",
    }
}

errors! {
    /// Why a datagram could not be queued.
    UdpError {
        InvalidSocket => "the UDP socket handle was never bound",
        Full => "the socket's transmit buffer is full (try again after a poll)",
        TooLong => "the datagram is longer than the socket's buffer or the path MTU allows",
        Unaddressable => "the remote address or port is unspecified",
        Io => "the operating system refused the datagram",
    }
}

errors! {
    /// Why a receive-side call failed.
    RecvError {
        InvalidConnection => "the connection handle was released or never existed",
        InvalidState => "the connection cannot receive (not established, or reset)",
        Finished => "the peer closed its direction and every octet was received",
    }
}
