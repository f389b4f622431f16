//! The Internet checksum (RFC 1071) of IPv4 headers and TCP segments, for
//! ports that do not compute or verify it themselves.
//!
//! RFC 1071 §2(B): the one's complement sum is independent of byte order,
//! so the data is summed as native-endian 32-bit words into a 64-bit
//! accumulator (which cannot overflow for any frame: a 64 KiB frame adds
//! 2^14 words below 2^32) and swapped once at the end. The loop is simple
//! enough for the compiler to vectorise.

/// Sum of `data` as native-endian 32-bit words (a trailing 1 to 3 octets
/// padded with zeros, RFC 1071 §4.1's odd octet), not folded.
pub(crate) fn sum(data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(4);
    let mut total: u64 = 0;
    for c in &mut chunks {
        total += u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut last = [0u8; 4];
        last[..rest.len()].copy_from_slice(rest);
        total += u64::from(u32::from_ne_bytes(last));
    }
    total
}

/// Folds a [`sum`] (or several added together) to 16 bits, in network
/// order, not complemented.
pub(crate) fn fold(mut total: u64) -> u16 {
    while total > 0xFFFF_FFFF {
        total = (total & 0xFFFF_FFFF) + (total >> 32);
    }
    let mut t = total as u32;
    while t > 0xFFFF {
        t = (t & 0xFFFF) + (t >> 16);
    }
    // Native-endian words: the folded 16 bits are in native order.
    u16::from_be(t as u16)
}

/// The IPv4 pseudo-header's sum for a TCP segment of `tcp_len` octets
/// (RFC 9293 §3.1: source, destination, zero, protocol 6, TCP length).
pub(crate) fn pseudo_header(src: [u8; 4], dst: [u8; 4], tcp_len: u16) -> u64 {
    let len = tcp_len.to_be_bytes();
    sum(&src) + sum(&dst) + sum(&[0, 6, len[0], len[1]])
}

/// Offsets of an Ethernet + IPv4 frame's parts.
const ETHERNET_LEN: usize = 14;
const IPV4_CHECKSUM: usize = 10;
const TCP_CHECKSUM: usize = 16;

/// What [`fill`] and [`verify`] found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ipv4Frame {
    /// IPv4 header length.
    pub header_len: usize,
    /// The IPv4 total length (header and payload).
    pub total_len: usize,
    /// The payload is TCP.
    pub tcp: bool,
}

/// The IPv4 header of an Ethernet frame whose EtherType is IPv4, if it is
/// well formed: version 4, header length 20 to 60 within the frame, total
/// length covering the header and within the frame.
pub(crate) fn ipv4(frame: &[u8]) -> Option<Ipv4Frame> {
    let ip = frame.get(ETHERNET_LEN..)?;
    let first = *ip.first()?;
    let header_len = usize::from(first & 0x0F) * 4;
    if first >> 4 != 4 || header_len < 20 || ip.len() < header_len {
        return None;
    }
    let total_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if total_len < header_len || total_len > ip.len() {
        return None;
    }
    Some(Ipv4Frame {
        header_len,
        total_len,
        tcp: ip[9] == 6,
    })
}

/// How the checksums of a frame we send are completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxChecksum {
    /// The port computes them: the IPv4 checksum field is zero and the TCP
    /// field holds the pseudo-header sum, as DPDK's offload wants.
    Offload,
    /// Computed here.
    Software,
    /// Left zero: the wire is memory between processes that trust it
    /// (both ends receive with [`RxChecksum::Trusted`]).
    Trusted,
}

/// How the checksums of a frame we receive are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxChecksum {
    /// The port verified them (its verdict in the mbuf's flags); frames it
    /// could not judge are verified here.
    Offload,
    /// Verified here.
    Software,
    /// Not verified: see [`TxChecksum::Trusted`].
    Trusted,
}

/// Completes the IPv4 header and TCP checksums of `frame` (Ethernet,
/// IPv4) for `how`. Frames that are not IPv4, or whose IPv4 header is
/// malformed, are left alone. Returns the IPv4 header length when the port
/// must finish a TCP checksum (`Offload`).
pub(crate) fn fill(frame: &mut [u8], how: TxChecksum) -> Option<usize> {
    if how == TxChecksum::Trusted || frame.len() < ETHERNET_LEN || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let f = ipv4(frame)?;
    let ip = &mut frame[ETHERNET_LEN..ETHERNET_LEN + f.total_len];
    ip[IPV4_CHECKSUM..IPV4_CHECKSUM + 2].fill(0);
    let (src, dst) = addresses(ip);
    let tcp_len = f.total_len - f.header_len;
    let is_tcp = f.tcp && tcp_len >= 20;
    // The port is asked for the IPv4 header checksum only with a TCP one
    // (`request_tcp_checksum_offload`): anything else (smoltcp's ICMP echo
    // replies, ARP aside) gets its header checksum here.
    let offload = how == TxChecksum::Offload && is_tcp;
    if !offload {
        let c = !fold(sum(&ip[..f.header_len]));
        ip[IPV4_CHECKSUM..IPV4_CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
    }
    if !is_tcp {
        return None;
    }
    let pseudo = pseudo_header(src, dst, tcp_len as u16);
    let tcp = &mut ip[f.header_len..];
    tcp[TCP_CHECKSUM..TCP_CHECKSUM + 2].fill(0);
    if offload {
        // DPDK: "the pseudo-header checksum", not complemented.
        tcp[TCP_CHECKSUM..TCP_CHECKSUM + 2].copy_from_slice(&fold(pseudo).to_be_bytes());
        return Some(f.header_len);
    }
    let c = !fold(pseudo + sum(tcp));
    tcp[TCP_CHECKSUM..TCP_CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
    None
}

/// Whether the IPv4 header checksum of `frame` (well formed, per [`ipv4`])
/// is right.
pub(crate) fn ipv4_header_ok(frame: &[u8], f: &Ipv4Frame) -> bool {
    fold(sum(&frame[ETHERNET_LEN..ETHERNET_LEN + f.header_len])) == 0xFFFF
}

/// Whether the TCP checksum of `frame` (IPv4 carrying TCP, per [`ipv4`])
/// is right.
pub(crate) fn tcp_ok(frame: &[u8], f: &Ipv4Frame) -> bool {
    let ip = &frame[ETHERNET_LEN..ETHERNET_LEN + f.total_len];
    let tcp_len = f.total_len - f.header_len;
    if tcp_len < 20 {
        return false;
    }
    let (src, dst) = addresses(ip);
    fold(pseudo_header(src, dst, tcp_len as u16) + sum(&ip[f.header_len..])) == 0xFFFF
}

fn addresses(ip: &[u8]) -> ([u8; 4], [u8; 4]) {
    let mut src = [0; 4];
    let mut dst = [0; 4];
    src.copy_from_slice(&ip[12..16]);
    dst.copy_from_slice(&ip[16..20]);
    (src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's straightforward 16-bit big-endian sum, as the reference.
    fn reference(data: &[u8]) -> u16 {
        let mut total: u32 = 0;
        for pair in data.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            total += u32::from(word);
        }
        while total > 0xFFFF {
            total = (total & 0xFFFF) + (total >> 16);
        }
        total as u16
    }

    #[test]
    fn sum_matches_rfc_1071_at_every_length_and_offset() {
        let data: Vec<u8> = (0..2000u32).map(|i| (i * 151 + 7) as u8).collect();
        for start in 0..4 {
            for len in 0..300 {
                let d = &data[start..start + len];
                assert_eq!(fold(sum(d)), reference(d), "start {start} len {len}");
            }
        }
        let all_ones = vec![0xFF; 1501];
        assert_eq!(fold(sum(&all_ones)), reference(&all_ones));
    }

    #[test]
    fn rfc_1071_example() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            fold(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0xddf2
        );
    }
}

#[cfg(test)]
mod fill_tests {
    use super::*;
    use smoltcp::wire::{IpAddress, Ipv4Packet, TcpPacket};

    /// An Ethernet/IPv4/TCP frame with `payload` octets, checksums zero.
    fn frame(payload: usize) -> Vec<u8> {
        let total = 40 + payload;
        let mut f = vec![0u8; 14 + total];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[14..];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 1, 2, 3]);
        ip[16..20].copy_from_slice(&[10, 4, 5, 6]);
        ip[20..22].copy_from_slice(&1234u16.to_be_bytes());
        ip[22..24].copy_from_slice(&80u16.to_be_bytes());
        ip[32] = 5 << 4;
        ip[33] = 0x02;
        for (i, o) in ip[40..].iter_mut().enumerate() {
            *o = (i * 7 + 1) as u8;
        }
        f
    }

    #[test]
    fn software_checksums_are_what_smoltcp_verifies() {
        for payload in [0, 1, 2, 3, 100, 1459, 1460, 8960] {
            let mut f = frame(payload);
            assert_eq!(fill(&mut f, TxChecksum::Software), None);
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            assert!(ip.verify_checksum(), "IPv4, payload {payload}");
            let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
            let (src, dst) = (
                IpAddress::from(ip.src_addr()),
                IpAddress::from(ip.dst_addr()),
            );
            assert!(tcp.verify_checksum(&src, &dst), "TCP, payload {payload}");
            let parsed = ipv4(&f).unwrap();
            assert!(ipv4_header_ok(&f, &parsed) && tcp_ok(&f, &parsed));
        }
    }

    #[test]
    fn offload_leaves_tcp_to_the_port_and_completes_the_rest_here() {
        // TCP: the port finishes both; the TCP field holds the pseudo-header
        // sum and the header length is returned for the mbuf's flags.
        let mut f = frame(100);
        assert_eq!(fill(&mut f, TxChecksum::Offload), Some(20));
        assert_eq!(&f[14 + IPV4_CHECKSUM..14 + IPV4_CHECKSUM + 2], &[0, 0]);
        let pseudo = fold(pseudo_header([10, 1, 2, 3], [10, 4, 5, 6], 120));
        let at = 14 + 20 + TCP_CHECKSUM;
        assert_eq!(&f[at..at + 2], &pseudo.to_be_bytes());
        // Not TCP (an ICMP echo reply, protocol 1): no offload is asked, so
        // the IPv4 header checksum is computed here.
        let mut f = frame(100);
        f[14 + 9] = 1;
        assert_eq!(fill(&mut f, TxChecksum::Offload), None);
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        // A TCP header cut short: the same.
        let mut f = frame(0);
        f[14 + 2..14 + 4].copy_from_slice(&36u16.to_be_bytes());
        f.truncate(14 + 36);
        assert_eq!(fill(&mut f, TxChecksum::Offload), None);
        assert!(Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum());
    }
}
