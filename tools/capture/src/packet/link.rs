//! Link-layer headers: find where the IP packet starts and which version it is.

use smoltcp::wire::EthernetFrame;

use super::Skip;
use crate::pcap::linktype;

/// An IP packet, not yet parsed, tagged with the version the link layer announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Network<'a> {
    V4(&'a [u8]),
    V6(&'a [u8]),
}

mod ethertype {
    pub(super) const IPV4: u16 = 0x0800;
    pub(super) const IPV6: u16 = 0x86dd;
    /// IEEE 802.1Q customer VLAN tag.
    pub(super) const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service VLAN tag (QinQ outer tag).
    pub(super) const QINQ: u16 = 0x88a8;
    /// The pre-standard QinQ outer tag some switches still send.
    pub(super) const QINQ_LEGACY: u16 = 0x9100;
}

/// A VLAN tag is the 2-byte TCI followed by the 2-byte type of what it encapsulates.
mod vlan {
    use core::ops::Range;
    pub(super) const INNER_TYPE: Range<usize> = 2..4;
    pub(super) const TAG_LEN: usize = INNER_TYPE.end;
    /// Ethernet with a customer tag inside a service tag is as deep as we go.
    pub(super) const TAGS_MAX: usize = 2;
}

/// Linux cooked capture v1: packet type, ARPHRD type, address length, 8 address bytes,
/// then the protocol (an EtherType for IP).
mod sll {
    use core::ops::Range;
    pub(super) const PROTOCOL: Range<usize> = 14..16;
    pub(super) const HEADER_LEN: usize = PROTOCOL.end;
}

/// Linux cooked capture v2: the protocol comes first, then reserved bits, interface
/// index, ARPHRD type, packet type, address length and 8 address bytes.
mod sll2 {
    use core::ops::Range;
    pub(super) const PROTOCOL: Range<usize> = 0..2;
    pub(super) const HEADER_LEN: usize = 20;
}

/// BSD loopback: a 4-byte address family. Its byte order is the capturing host's for
/// `LINKTYPE_NULL` and big-endian for `LINKTYPE_LOOP`; we accept either for both, since the
/// values cannot be confused.
mod null {
    pub(super) const HEADER_LEN: usize = 4;
    pub(super) const AF_INET: u32 = 2;
    /// AF_INET6 differs between BSDs: 24 (NetBSD, OpenBSD), 28 (FreeBSD), 30 (macOS).
    pub(super) const AF_INET6: [u32; 3] = [24, 28, 30];
}

const _: () = assert!(sll::HEADER_LEN == 16);

/// Strips the link-layer header of a `linktype` frame.
pub(super) fn network_layer(linktype: u32, data: &[u8]) -> Result<Network<'_>, Skip> {
    match linktype {
        linktype::ETHERNET => {
            let frame = EthernetFrame::new_checked(data).map_err(|_| Skip::Truncated)?;
            by_ethertype(
                u16::from(frame.ethertype()),
                frame.payload(),
                vlan::TAGS_MAX,
            )
        }
        linktype::LINUX_SLL => {
            let protocol = be16(data, sll::PROTOCOL.start).ok_or(Skip::Truncated)?;
            let rest = data.get(sll::HEADER_LEN..).ok_or(Skip::Truncated)?;
            by_ethertype(protocol, rest, vlan::TAGS_MAX)
        }
        linktype::LINUX_SLL2 => {
            let protocol = be16(data, sll2::PROTOCOL.start).ok_or(Skip::Truncated)?;
            let rest = data.get(sll2::HEADER_LEN..).ok_or(Skip::Truncated)?;
            by_ethertype(protocol, rest, vlan::TAGS_MAX)
        }
        linktype::NULL | linktype::LOOP => bsd_loopback(data),
        linktype::RAW | linktype::RAW_DLT_12 | linktype::RAW_DLT_14 => raw_ip(data),
        linktype::IPV4 => Ok(Network::V4(data)),
        linktype::IPV6 => Ok(Network::V6(data)),
        other => Err(Skip::UnsupportedLinktype(other)),
    }
}

/// Dispatches on an EtherType, peeling up to `tags_left` VLAN tags.
fn by_ethertype(ethertype: u16, payload: &[u8], tags_left: usize) -> Result<Network<'_>, Skip> {
    match ethertype {
        ethertype::IPV4 => Ok(Network::V4(payload)),
        ethertype::IPV6 => Ok(Network::V6(payload)),
        ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_LEGACY if tags_left > 0 => {
            let inner = be16(payload, vlan::INNER_TYPE.start).ok_or(Skip::Truncated)?;
            let rest = payload.get(vlan::TAG_LEN..).ok_or(Skip::Truncated)?;
            by_ethertype(inner, rest, tags_left - 1)
        }
        _ => Err(Skip::NotIp),
    }
}

fn bsd_loopback(data: &[u8]) -> Result<Network<'_>, Skip> {
    let family: [u8; null::HEADER_LEN] = data
        .get(..null::HEADER_LEN)
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or(Skip::Truncated)?;
    let rest = data.get(null::HEADER_LEN..).ok_or(Skip::Truncated)?;
    let either = [u32::from_le_bytes(family), u32::from_be_bytes(family)];
    if either.contains(&null::AF_INET) {
        Ok(Network::V4(rest))
    } else if either.iter().any(|family| null::AF_INET6.contains(family)) {
        Ok(Network::V6(rest))
    } else {
        Err(Skip::NotIp)
    }
}

/// Raw IP: the version nibble of the first byte says which.
fn raw_ip(data: &[u8]) -> Result<Network<'_>, Skip> {
    match data.first().map(|byte| byte >> 4) {
        None => Err(Skip::Truncated),
        Some(4) => Ok(Network::V4(data)),
        Some(6) => Ok(Network::V6(data)),
        Some(_) => Err(Skip::NotIp),
    }
}

/// Reads a big-endian `u16` at `at`, or `None` if `data` is too short.
pub(super) fn be16(data: &[u8], at: usize) -> Option<u16> {
    let bytes = data.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes(bytes.try_into().ok()?))
}

/// Reads a big-endian `u32` at `at`, or `None` if `data` is too short.
pub(super) fn be32(data: &[u8], at: usize) -> Option<u32> {
    let bytes = data.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}
