//! IPv4 and IPv6: addresses, the upper-layer protocol and its bytes.
//!
//! smoltcp's `check_len` for both versions requires the whole packet, as its Total
//! Length or Payload Length states, to be in the buffer. A capture cut by the snapshot
//! length does not satisfy that, yet its TCP header is usually intact and worth showing.
//! So we give smoltcp a copy of only the fixed header, with the length field rewritten to
//! cover just that copy, and bound the payload ourselves against both the declared length
//! and the captured bytes. The version, IHL and length fields read here before smoltcp
//! sees the header are checked with explicit bounds.

use std::net::IpAddr;

use smoltcp::wire::{IpProtocol, Ipv4Packet, Ipv6ExtHeader, Ipv6Packet};

use super::link::{be16, Network};
use super::Skip;

/// How many IPv6 extension headers we walk before giving up on finding the upper layer. RFC 8200's
/// recommended header order has each type at most once, except Destination Options,
/// which may appear twice; eight leaves room for that and more.
pub const IPV6_EXTENSION_HEADERS_MAX: usize = 8;

mod ipv4 {
    use core::ops::Range;
    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOTAL_LEN: Range<usize> = 2..4;
    pub(super) const HEADER_LEN_MIN: usize = 20;
    /// IHL is four bits counting 32-bit words.
    pub(super) const HEADER_LEN_MAX: usize = 60;
}

mod ipv6 {
    use core::ops::Range;
    pub(super) const PAYLOAD_LEN: Range<usize> = 4..6;
    pub(super) const HEADER_LEN: usize = 40;
}

/// The upper-layer part of an IP packet.
#[derive(Debug, Clone, Copy)]
pub(super) struct IpPayload<'a> {
    pub(super) src: IpAddr,
    pub(super) dst: IpAddr,
    /// The captured upper-layer bytes, never beyond what the IP header declares.
    pub(super) payload: &'a [u8],
    /// The upper-layer length the IP header declares.
    pub(super) wire_len: usize,
    /// The upper-layer protocol: the IPv4 Protocol, or the IPv6 Next Header that
    /// follows the extension headers.
    pub(super) protocol: IpProtocol,
}

/// Parses an IP packet, whatever its upper-layer protocol. Fragments are a [`Skip`]:
/// the upper-layer header may be in another fragment.
pub(super) fn parse(network: Network<'_>) -> Result<IpPayload<'_>, Skip> {
    match network {
        Network::V4(data) => parse_ipv4(data),
        Network::V6(data) => parse_ipv6(data),
    }
}

fn parse_ipv4(data: &[u8]) -> Result<IpPayload<'_>, Skip> {
    let ver_ihl = *data.get(ipv4::VER_IHL).ok_or(Skip::Truncated)?;
    let header_len = usize::from(ver_ihl & 0x0f) * 4;
    if ver_ihl >> 4 != 4 || header_len < ipv4::HEADER_LEN_MIN {
        return Err(Skip::BadHeader);
    }
    let header = data.get(..header_len).ok_or(Skip::Truncated)?;
    let total_len = usize::from(be16(data, ipv4::TOTAL_LEN.start).ok_or(Skip::Truncated)?);
    let mut copy = [0u8; ipv4::HEADER_LEN_MAX];
    let copy = &mut copy[..header_len];
    copy.copy_from_slice(header);
    // `header_len` is at most 60, so it fits the 16-bit field.
    copy[ipv4::TOTAL_LEN].copy_from_slice(&(header_len as u16).to_be_bytes());
    let view = Ipv4Packet::new_checked(&copy[..]).map_err(|_| Skip::BadHeader)?;
    if view.more_frags() || view.frag_offset() != 0 {
        return Err(Skip::Fragment {
            protocol: u8::from(view.next_header()),
        });
    }
    let end = match total_len {
        // TCP segmentation offload: the stack handed the NIC one large segment whose
        // Total Length it left at zero, and the capture shows it before the NIC split it.
        0 => data.len(),
        len if len < header_len => return Err(Skip::BadHeader),
        len => len,
    };
    let payload = data
        .get(header_len..end.min(data.len()))
        .unwrap_or_default();
    Ok(IpPayload {
        src: IpAddr::V4(view.src_addr()),
        dst: IpAddr::V4(view.dst_addr()),
        payload,
        wire_len: end - header_len,
        protocol: view.next_header(),
    })
}

fn parse_ipv6(data: &[u8]) -> Result<IpPayload<'_>, Skip> {
    let header = data.get(..ipv6::HEADER_LEN).ok_or(Skip::Truncated)?;
    let payload_len = usize::from(be16(data, ipv6::PAYLOAD_LEN.start).ok_or(Skip::Truncated)?);
    let mut copy = [0u8; ipv6::HEADER_LEN];
    copy.copy_from_slice(header);
    copy[ipv6::PAYLOAD_LEN].copy_from_slice(&[0, 0]);
    let view = Ipv6Packet::new_checked(&copy[..]).map_err(|_| Skip::BadHeader)?;
    if view.version() != 6 {
        return Err(Skip::BadHeader);
    }
    let captured = data.get(ipv6::HEADER_LEN..).unwrap_or_default();
    // A zero Payload Length means a jumbogram or, as for IPv4, segmentation offload;
    // either way the captured bytes are all we can go by.
    let wire_len = if payload_len == 0 {
        captured.len()
    } else {
        payload_len
    };
    let payload = captured
        .get(..wire_len.min(captured.len()))
        .unwrap_or_default();
    let ip = IpPayload {
        src: IpAddr::V6(view.src_addr()),
        dst: IpAddr::V6(view.dst_addr()),
        payload,
        wire_len,
        protocol: view.next_header(),
    };
    skip_extension_headers(ip)
}

/// Walks the IPv6 extension headers that may precede the upper layer (TCP, UDP, SCTP)
/// in an unfragmented packet.
fn skip_extension_headers(mut ip: IpPayload<'_>) -> Result<IpPayload<'_>, Skip> {
    for _ in 0..IPV6_EXTENSION_HEADERS_MAX {
        match ip.protocol {
            IpProtocol::Ipv6Frag => {
                // RFC 8200 §4.5: the Fragment header's first octet is Next Header.
                let protocol = ip.payload.first().copied();
                return Err(Skip::Fragment {
                    protocol: protocol.unwrap_or(u8::from(IpProtocol::Ipv6Frag)),
                });
            }
            IpProtocol::HopByHop | IpProtocol::Ipv6Route | IpProtocol::Ipv6Opts => {}
            _ => return Ok(ip),
        }
        let cut = if ip.payload.len() < ip.wire_len {
            Skip::Truncated
        } else {
            Skip::BadHeader
        };
        let header = Ipv6ExtHeader::new_checked(ip.payload).map_err(|_| cut)?;
        // RFC 8200, Hdr Ext Len: "Length of the Hop-by-Hop Options header in 8-octet
        // units, not including the first 8 octets." Routing and Destination Options
        // headers define theirs the same way.
        let len = (usize::from(header.header_len()) + 1) * 8;
        ip.protocol = header.next_header();
        ip.payload = ip.payload.get(len..).ok_or(cut)?;
        ip.wire_len = ip.wire_len.checked_sub(len).ok_or(Skip::BadHeader)?;
    }
    Err(Skip::BadHeader)
}
