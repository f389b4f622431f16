//! From a captured frame to a TCP segment or an SCTP packet: link layer, then IPv4 or
//! IPv6, then TCP ([`parse_tcp`]), or SCTP directly or over UDP ([`parse_sctp`]).
//!
//! Reading list: RFC 791 (IPv4: IHL, Total Length, fragmentation fields), RFC 8200
//! (IPv6 extension header order and the Fragment header), RFC 9293 (the TCP header),
//! RFC 7323 §2 (the Window Scale option).
//! For the link layers: IEEE 802.1Q for VLAN tags and the tcpdump.org pages for
//! `LINKTYPE_LINUX_SLL`, `LINKTYPE_LINUX_SLL2` and `LINKTYPE_NULL`.
//!
//! Headers are read through `smoltcp::wire` views created with `new_checked`, so no
//! accessor can index out of bounds. The link-layer headers smoltcp has no view for (VLAN
//! tags, Linux cooked, BSD loopback) are a few fixed fields each, read with explicit bounds
//! in the private `link` module.
//!
//! Checksums are not verified: captures taken on the sending host carry whatever the
//! stack wrote before checksum offload filled them in, and a decoder must still show
//! those packets.

mod build;
pub mod defrag;
mod ip;
mod link;
mod sctp;

use core::fmt;
use core::ops::BitOr;
use std::net::SocketAddr;

use smoltcp::wire::{IpProtocol, TcpOption, TcpPacket};

pub use self::build::{
    build_sctp_chunk, build_sctp_frame, build_tcp_frame, SctpOver, BUILD_CHUNKS_LEN_MAX,
    BUILD_PAYLOAD_LEN_MAX,
};
pub use self::ip::IPV6_EXTENSION_HEADERS_MAX;
pub use self::sctp::{
    parse_sctp, SctpPacket, COMMON_HEADER_LEN as SCTP_COMMON_HEADER_LEN, IP_PROTOCOL_SCTP,
    UDP_ENCAPSULATION_PORT,
};

/// Why a frame did not yield a complete TCP header (or, for [`parse_sctp`], SCTP
/// common header).
///
/// These are expected in any capture (ARP, ICMP, fragments), so they are a value the
/// caller counts or prints, not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The link layer carries something other than IPv4 or IPv6 (ARP, LLDP, ...), or a
    /// raw-IP frame has a version other than 4 or 6, or more than two VLAN tags.
    NotIp,
    /// The IP packet carries another protocol, given by its IP protocol number.
    NotTcp {
        /// The IPv4 protocol or final IPv6 next-header value.
        protocol: u8,
    },
    /// [`parse_sctp`] only: the IP packet carries neither SCTP nor UDP to or from
    /// [`UDP_ENCAPSULATION_PORT`].
    NotSctp {
        /// The IPv4 protocol or final IPv6 next-header value (17 for UDP on other ports).
        protocol: u8,
    },
    /// The IP packet is a fragment; its TCP header may be in another fragment. The
    /// parsers do not reassemble: [`defrag::Defragmenter`] does, for IPv4.
    Fragment {
        /// The upper-layer protocol the fragment is part of: the IPv4 Protocol, which
        /// every fragment carries (RFC 791 §3.2), or the Next Header of the IPv6
        /// Fragment header (RFC 8200 §4.5); 44 (the Fragment header's own number) if
        /// the capture cut it.
        protocol: u8,
    },
    /// The capture cut the frame before the end of the TCP header.
    Truncated,
    /// A header field is impossible: an IPv4 IHL below 5, a TCP data offset below 5, a
    /// length that contradicts another, or a chain of IPv6 extension headers that does not
    /// end in TCP within [`IPV6_EXTENSION_HEADERS_MAX`] headers.
    BadHeader,
    /// The capture's link-layer type is not one of those in [`crate::pcap::linktype`].
    UnsupportedLinktype(u32),
}

/// What a TCP segment's options say of window scaling: the Window Scale option (RFC
/// 7323 §2.2, kind 3), which counts only in a SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowScale {
    /// The options were read to their end and hold no Window Scale option.
    Absent,
    /// The option's shift count, as sent: RFC 7323 §2.3 has the receiver use 14 for a
    /// larger one, and so does [`crate::reassembly`].
    Shift(u8),
    /// An option before any Window Scale option is malformed (a length that is too
    /// short or overruns the header, a Window Scale or other known option of the wrong
    /// length), so whether the segment offered scaling cannot be told.
    Unknown,
}

/// TCP flag bits for [`build_tcp_frame`], combinable with `|`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags(u8);

/// A TCP segment found in a frame. Its fields borrow the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpSegment<'a> {
    /// Source address and port.
    pub src: SocketAddr,
    /// Destination address and port.
    pub dst: SocketAddr,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful only if `ack_flag`).
    pub ack: u32,
    /// SYN flag.
    pub syn: bool,
    /// ACK flag.
    pub ack_flag: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// PSH flag.
    pub psh: bool,
    /// Window field, unscaled.
    pub window: u16,
    /// The Window Scale option, if any (meaningful only if `syn`).
    pub window_scale: WindowScale,
    /// The captured payload bytes: all of them, or a prefix if `payload_truncated`.
    /// Link-layer padding (Ethernet pads short frames to 60 bytes) is never included.
    pub payload: &'a [u8],
    /// Payload length as the IP header states it. It is `payload.len()` unless the
    /// capture's snapshot length cut the packet.
    pub payload_wire_len: usize,
    /// The snapshot length cut the payload: fewer bytes were captured than the IP length
    /// says were sent.
    pub payload_truncated: bool,
}

/// Parses the TCP segment in `data`, a frame of link-layer type `linktype`.
///
/// Never panics, whatever `data` holds. IPv4 packets are bounded by their Total Length,
/// so Ethernet padding is stripped; a Total Length of 0 is read as "the rest of the
/// frame", because that is what captures of TCP segmentation offload on the sending host
/// contain. IPv6 packets are read the same way with their Payload Length, skipping
/// Hop-by-Hop, Routing and Destination Options headers.
pub fn parse_tcp(linktype: u32, data: &[u8]) -> Result<TcpSegment<'_>, Skip> {
    let network = link::network_layer(linktype, data)?;
    let ip = ip::parse(network)?;
    if ip.protocol != IpProtocol::Tcp {
        return Err(Skip::NotTcp {
            protocol: u8::from(ip.protocol),
        });
    }
    let truncated = ip.payload.len() < ip.wire_len;
    // A header cut by the snapshot length is truncated; one that does not fit the length
    // the IP header declares is simply wrong.
    let cut = if truncated {
        Skip::Truncated
    } else {
        Skip::BadHeader
    };
    let tcp = TcpPacket::new_checked(ip.payload).map_err(|_| cut)?;
    let header_len = usize::from(tcp.header_len());
    let payload_wire_len = ip.wire_len.checked_sub(header_len).ok_or(Skip::BadHeader)?;
    let payload = tcp.payload();
    Ok(TcpSegment {
        src: SocketAddr::new(ip.src, tcp.src_port()),
        dst: SocketAddr::new(ip.dst, tcp.dst_port()),
        seq: tcp.seq_number().0 as u32,
        ack: tcp.ack_number().0 as u32,
        syn: tcp.syn(),
        ack_flag: tcp.ack(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        psh: tcp.psh(),
        window: tcp.window_len(),
        window_scale: window_scale(&tcp),
        payload,
        payload_wire_len,
        payload_truncated: payload.len() < payload_wire_len,
    })
}

/// Finds the Window Scale option among `tcp`'s options. `TcpPacket::new_checked` has
/// checked that the header, options included, is in the buffer; each option parsed
/// moves on by at least one octet, so the walk ends within the 40 octets of options.
fn window_scale(tcp: &TcpPacket<&[u8]>) -> WindowScale {
    let mut options = tcp.options();
    while !options.is_empty() {
        match TcpOption::parse(options) {
            Ok((_, TcpOption::EndOfList)) => break,
            Ok((_, TcpOption::WindowScale(shift))) => return WindowScale::Shift(shift),
            Ok((rest, _)) => options = rest,
            Err(_) => return WindowScale::Unknown,
        }
    }
    WindowScale::Absent
}

impl TcpFlags {
    /// No flags.
    pub const NONE: TcpFlags = TcpFlags(0);
    /// FIN: the sender has no more data.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// SYN: synchronise sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// RST: reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// PSH: push buffered data to the application.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// ACK: the acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for TcpFlags {
    type Output = TcpFlags;

    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NotIp => f.write_str("not IPv4 or IPv6"),
            Skip::NotTcp { protocol } => {
                write!(f, "not TCP: IP protocol {}", IpProtocol::from(*protocol))
            }
            Skip::NotSctp { protocol } => write!(
                f,
                "not SCTP or UDP port {UDP_ENCAPSULATION_PORT}: IP protocol {}",
                IpProtocol::from(*protocol)
            ),
            Skip::Fragment { protocol } => {
                write!(
                    f,
                    "IP fragment of IP protocol {}",
                    IpProtocol::from(*protocol)
                )
            }
            Skip::Truncated => f.write_str("truncated before the end of the TCP header"),
            Skip::BadHeader => f.write_str("malformed IP or TCP header"),
            Skip::UnsupportedLinktype(linktype) => {
                write!(f, "unsupported link-layer type {linktype}")
            }
        }
    }
}

#[cfg(test)]
mod tests;
