//! SCTP packets, carried directly by IP (protocol 132) or encapsulated in UDP: the
//! common header and the chunk bytes, which the caller walks.
//!
//! Reading list: RFC 9260 §3 (the SCTP packet format: §3.1 the common header, §3.2 the
//! chunk layout), Appendix A (the CRC32c checksum), and RFC 6951 (SCTP over UDP: the
//! UDP header sits between IP and SCTP's common header, with UDP port 9899 registered for
//! it).
//!
//! As for TCP, checksums are not a reason to drop a packet: [`SctpPacket::checksum_ok`]
//! says whether the CRC32c holds, and the caller decides what to make of it.

use std::net::SocketAddr;

use smoltcp::wire::IpProtocol;

use super::link::{be16, be32};
use super::{ip, link, Skip};

/// The IP protocol number of SCTP, as IANA assigned it.
pub const IP_PROTOCOL_SCTP: u8 = 132;
/// The UDP port IANA registered for SCTP over UDP ("sctp-tunneling", RFC 6951). A UDP
/// datagram to or from it is read as SCTP.
pub const UDP_ENCAPSULATION_PORT: u16 = 9899;
/// Octets of SCTP's common header (RFC 9260 §3.1).
pub const COMMON_HEADER_LEN: usize = common::CHECKSUM.end;

/// The UDP header (RFC 768).
mod udp {
    use core::ops::Range;
    pub(super) const SRC_PORT: Range<usize> = 0..2;
    pub(super) const DST_PORT: Range<usize> = 2..4;
    pub(super) const LENGTH: Range<usize> = 4..6;
    pub(super) const HEADER_LEN: usize = 8;
}

/// SCTP's common header (RFC 9260 §3.1): ports, Verification Tag, Checksum.
mod common {
    use core::ops::Range;
    pub(super) const SRC_PORT: Range<usize> = 0..2;
    pub(super) const DST_PORT: Range<usize> = 2..4;
    pub(super) const VERIFICATION_TAG: Range<usize> = 4..8;
    pub(super) const CHECKSUM: Range<usize> = 8..12;
}

const _: () = assert!(COMMON_HEADER_LEN == 12);

/// An SCTP packet found in a frame. Its slices borrow the frame's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SctpPacket<'a> {
    /// Source address and SCTP port (not the UDP port of an encapsulated packet).
    pub src: SocketAddr,
    /// Destination address and SCTP port.
    pub dst: SocketAddr,
    /// The Verification Tag (RFC 9260 §3.1): 0 in a packet carrying an INIT.
    pub verification_tag: u32,
    /// The Checksum field, read as the CRC32c value it carries (RFC 9260 Appendix A
    /// places the least significant octet first).
    pub checksum: u32,
    /// `(source, destination)` UDP ports when the packet came encapsulated in UDP (RFC
    /// 6951); `None` when IP carried it directly.
    pub udp_ports: Option<(u16, u16)>,
    /// The captured chunk bytes: every chunk after the common header, or a prefix of
    /// them if `chunks_truncated`. Link-layer padding is never included.
    pub chunks: &'a [u8],
    /// Octets of chunks the IP (or UDP) header declares.
    pub chunks_wire_len: usize,
    /// The capture's snapshot length cut the chunks short.
    pub chunks_truncated: bool,
    /// The whole SCTP packet as captured, common header first, for the checksum.
    packet: &'a [u8],
}

impl SctpPacket<'_> {
    /// Whether the Checksum field holds the CRC32c of the packet (RFC 9260 Appendix A),
    /// or `None` when the capture cut the packet and the sum cannot be checked.
    pub fn checksum_ok(&self) -> Option<bool> {
        if self.chunks_truncated {
            return None;
        }
        Some(crc32c_of(self.packet) == self.checksum)
    }
}

/// The SCTP checksum of `packet`: CRC32c over the whole packet with the Checksum field
/// taken as zero (RFC 9260 Appendix A).
pub(super) fn crc32c_of(packet: &[u8]) -> u32 {
    let head = packet.get(..common::CHECKSUM.start).unwrap_or(packet);
    let rest = packet.get(common::CHECKSUM.end..).unwrap_or_default();
    let crc = crc32c::crc32c_append(crc32c::crc32c(head), &[0; 4]);
    crc32c::crc32c_append(crc, rest)
}

/// Parses the SCTP packet in `data`, a frame of link-layer type `linktype`: IP protocol
/// 132, or a UDP datagram to or from [`UDP_ENCAPSULATION_PORT`].
///
/// Never panics, whatever `data` holds. Anything else is a [`Skip`]: another protocol is
/// [`Skip::NotSctp`] (UDP on other ports included), and TCP among it, so a caller tries
/// [`super::parse_tcp`] first.
pub fn parse_sctp(linktype: u32, data: &[u8]) -> Result<SctpPacket<'_>, Skip> {
    let network = link::network_layer(linktype, data)?;
    let ip = ip::parse(network)?;
    let Carried {
        payload: sctp,
        wire_len,
        udp_ports,
    } = match ip.protocol {
        IpProtocol::Unknown(IP_PROTOCOL_SCTP) => Carried {
            payload: ip.payload,
            wire_len: ip.wire_len,
            udp_ports: None,
        },
        IpProtocol::Udp => strip_udp(ip.payload, ip.wire_len)?,
        other => {
            return Err(Skip::NotSctp {
                protocol: u8::from(other),
            })
        }
    };
    if wire_len < COMMON_HEADER_LEN {
        return Err(Skip::BadHeader);
    }
    let src_port = be16(sctp, common::SRC_PORT.start).ok_or(Skip::Truncated)?;
    let dst_port = be16(sctp, common::DST_PORT.start).ok_or(Skip::Truncated)?;
    let verification_tag = be32(sctp, common::VERIFICATION_TAG.start).ok_or(Skip::Truncated)?;
    let checksum = be32(sctp, common::CHECKSUM.start).ok_or(Skip::Truncated)?;
    let chunks = sctp.get(COMMON_HEADER_LEN..).unwrap_or_default();
    let chunks_wire_len = wire_len - COMMON_HEADER_LEN;
    Ok(SctpPacket {
        src: SocketAddr::new(ip.src, src_port),
        dst: SocketAddr::new(ip.dst, dst_port),
        verification_tag,
        checksum: checksum.swap_bytes(),
        udp_ports,
        chunks,
        chunks_wire_len,
        chunks_truncated: chunks.len() < chunks_wire_len,
        packet: sctp,
    })
}

/// An SCTP packet as its carrier (IP or UDP) delimits it.
struct Carried<'a> {
    /// The captured bytes.
    payload: &'a [u8],
    /// The length the carrier declares.
    wire_len: usize,
    udp_ports: Option<(u16, u16)>,
}

/// The SCTP packet inside a UDP datagram on [`UDP_ENCAPSULATION_PORT`].
fn strip_udp(datagram: &[u8], ip_wire_len: usize) -> Result<Carried<'_>, Skip> {
    let src = be16(datagram, udp::SRC_PORT.start).ok_or(Skip::Truncated)?;
    let dst = be16(datagram, udp::DST_PORT.start).ok_or(Skip::Truncated)?;
    let length = usize::from(be16(datagram, udp::LENGTH.start).ok_or(Skip::Truncated)?);
    if src != UDP_ENCAPSULATION_PORT && dst != UDP_ENCAPSULATION_PORT {
        return Err(Skip::NotSctp {
            protocol: u8::from(IpProtocol::Udp),
        });
    }
    // RFC 768: "Length is the length in octets of this user datagram including this
    // header", so at least 8, and never more than IP carries.
    if length < udp::HEADER_LEN || length > ip_wire_len {
        return Err(Skip::BadHeader);
    }
    let payload = datagram
        .get(udp::HEADER_LEN..length.min(datagram.len()))
        .unwrap_or_default();
    Ok(Carried {
        payload,
        wire_len: length - udp::HEADER_LEN,
        udp_ports: Some((src, dst)),
    })
}
