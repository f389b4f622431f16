//! Synthesising Ethernet + IPv4 + TCP or SCTP frames for tests and tools.

use std::net::SocketAddrV4;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpPacket, TcpSeqNumber, UdpPacket,
};

use super::sctp::{crc32c_of, COMMON_HEADER_LEN, IP_PROTOCOL_SCTP, UDP_ENCAPSULATION_PORT};
use super::TcpFlags;

const ETHERNET_HEADER_LEN: usize = 14;
const IPV4_HEADER_LEN: usize = 20;
const TCP_HEADER_LEN: usize = 20;
const UDP_HEADER_LEN: usize = 8;
/// An SCTP chunk header: Type, Flags, Length (RFC 9260 §3.2).
const CHUNK_HEADER_LEN: usize = 4;
/// Window advertised by built segments: the largest unscaled value, so that nothing
/// reading the synthetic capture sees a closed window.
const WINDOW: u16 = u16::MAX;
const HOP_LIMIT: u8 = 64;

/// Largest payload [`build_tcp_frame`] accepts: what fits one IPv4 packet with option-less
/// IPv4 and TCP headers.
pub const BUILD_PAYLOAD_LEN_MAX: usize = u16::MAX as usize - IPV4_HEADER_LEN - TCP_HEADER_LEN;
/// Largest chunk bytes [`build_sctp_frame`] accepts: what fits one IPv4 packet with an
/// option-less IPv4 header, a UDP header and SCTP's common header.
pub const BUILD_CHUNKS_LEN_MAX: usize =
    u16::MAX as usize - IPV4_HEADER_LEN - UDP_HEADER_LEN - COMMON_HEADER_LEN;

/// What carries a built SCTP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SctpOver {
    /// IP directly, protocol 132.
    Ip,
    /// UDP (RFC 6951), from and to port [`UDP_ENCAPSULATION_PORT`].
    Udp,
}

/// Builds an Ethernet II frame carrying an option-less IPv4 + TCP segment, with valid
/// IPv4 and TCP checksums.
///
/// The MAC addresses are derived from the IPv4 addresses (`02:00:a:b:c:d`, locally
/// administered), so each host keeps one address across frames. The acknowledgment field
/// is written as given even without [`TcpFlags::ACK`]; the window is 65535.
///
/// # Panics
///
/// If `payload` is longer than [`BUILD_PAYLOAD_LEN_MAX`]. This is a programmer error in
/// the test or tool calling it, never a consequence of input data.
pub fn build_tcp_frame(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    payload: &[u8],
) -> Vec<u8> {
    assert!(
        payload.len() <= BUILD_PAYLOAD_LEN_MAX,
        "TCP payload too long for one IPv4 packet"
    );
    let tcp_len = TCP_HEADER_LEN + payload.len();
    let mut frame = ethernet_ipv4(src, dst, IpProtocol::Tcp, tcp_len);
    let mut tcp = TcpPacket::new_unchecked(&mut frame[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN..]);
    tcp.set_src_port(src.port());
    tcp.set_dst_port(dst.port());
    // smoltcp keeps sequence numbers as i32 for its wrapping comparisons; the bits are
    // the same.
    tcp.set_seq_number(TcpSeqNumber(seq as i32));
    tcp.set_ack_number(TcpSeqNumber(ack as i32));
    tcp.set_header_len(TCP_HEADER_LEN as u8);
    tcp.clear_flags();
    tcp.set_fin(flags.contains(TcpFlags::FIN));
    tcp.set_syn(flags.contains(TcpFlags::SYN));
    tcp.set_rst(flags.contains(TcpFlags::RST));
    tcp.set_psh(flags.contains(TcpFlags::PSH));
    tcp.set_ack(flags.contains(TcpFlags::ACK));
    tcp.set_window_len(WINDOW);
    tcp.set_urgent_at(0);
    tcp.payload_mut().copy_from_slice(payload);
    tcp.fill_checksum(&IpAddress::Ipv4(*src.ip()), &IpAddress::Ipv4(*dst.ip()));
    frame
}

/// Builds an Ethernet II frame carrying an option-less IPv4 packet with an SCTP packet
/// (RFC 9260 §3): the common header with ports from `src` and `dst`, `verification_tag`
/// and a correct CRC32c Checksum (RFC 9260 Appendix A), then `chunks` as given (build
/// each with [`build_sctp_chunk`], or by hand to make a malformed one). Over
/// [`SctpOver::Udp`] a UDP header with a valid checksum comes between IPv4 and SCTP,
/// both its ports [`UDP_ENCAPSULATION_PORT`] (RFC 6951). The MAC addresses are derived
/// as in [`build_tcp_frame`]; drop the first 14 octets for a raw-IP capture.
///
/// # Panics
///
/// If `chunks` is longer than [`BUILD_CHUNKS_LEN_MAX`], a programmer error in the caller.
pub fn build_sctp_frame(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    over: SctpOver,
    verification_tag: u32,
    chunks: &[u8],
) -> Vec<u8> {
    assert!(
        chunks.len() <= BUILD_CHUNKS_LEN_MAX,
        "SCTP chunks too long for one IPv4 packet"
    );
    let mut sctp = Vec::with_capacity(COMMON_HEADER_LEN + chunks.len());
    sctp.extend_from_slice(&src.port().to_be_bytes());
    sctp.extend_from_slice(&dst.port().to_be_bytes());
    sctp.extend_from_slice(&verification_tag.to_be_bytes());
    sctp.extend_from_slice(&[0; 4]);
    sctp.extend_from_slice(chunks);
    // RFC 9260 Appendix A: the CRC32c goes in least significant octet first.
    let checksum = crc32c_of(&sctp).to_le_bytes();
    sctp[COMMON_HEADER_LEN - 4..COMMON_HEADER_LEN].copy_from_slice(&checksum);
    let upper = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;
    match over {
        SctpOver::Ip => {
            let protocol = IpProtocol::Unknown(IP_PROTOCOL_SCTP);
            let mut frame = ethernet_ipv4(src, dst, protocol, sctp.len());
            frame[upper..].copy_from_slice(&sctp);
            frame
        }
        SctpOver::Udp => {
            let udp_len = UDP_HEADER_LEN + sctp.len();
            let mut frame = ethernet_ipv4(src, dst, IpProtocol::Udp, udp_len);
            let mut udp = UdpPacket::new_unchecked(&mut frame[upper..]);
            udp.set_src_port(UDP_ENCAPSULATION_PORT);
            udp.set_dst_port(UDP_ENCAPSULATION_PORT);
            // `udp_len` is at most 65535 - 20 by the assertion above.
            udp.set_len(udp_len as u16);
            udp.payload_mut().copy_from_slice(&sctp);
            udp.fill_checksum(&IpAddress::Ipv4(*src.ip()), &IpAddress::Ipv4(*dst.ip()));
            frame
        }
    }
}

/// One SCTP chunk (RFC 9260 §3.2): Type, Flags, a Length of the header and `value`, then
/// `value` and zero padding to a multiple of 4 octets, which the Length does not count.
///
/// # Panics
///
/// If `value` is longer than a chunk's 16-bit Length can say, a programmer error.
pub fn build_sctp_chunk(chunk_type: u8, flags: u8, value: &[u8]) -> Vec<u8> {
    let len = u16::try_from(CHUNK_HEADER_LEN + value.len()).expect("SCTP chunk too long");
    let mut chunk = vec![chunk_type, flags];
    chunk.extend_from_slice(&len.to_be_bytes());
    chunk.extend_from_slice(value);
    chunk.resize(chunk.len().next_multiple_of(4), 0);
    chunk
}

/// An Ethernet II frame with an option-less IPv4 header (valid checksum) for
/// `upper_len` octets of `protocol`, which are left zero for the caller to fill.
fn ethernet_ipv4(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    protocol: IpProtocol,
    upper_len: usize,
) -> Vec<u8> {
    let mut frame = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + upper_len];
    // Emitting into a buffer we sized ourselves: smoltcp documents `new_unchecked` as the
    // constructor to use here.
    let mut ethernet = EthernetFrame::new_unchecked(&mut frame[..]);
    EthernetRepr {
        src_addr: mac_for(src),
        dst_addr: mac_for(dst),
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut ethernet);
    let mut ip = Ipv4Packet::new_unchecked(ethernet.payload_mut());
    Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        next_header: protocol,
        payload_len: upper_len,
        hop_limit: HOP_LIMIT,
    }
    .emit(&mut ip, &ChecksumCapabilities::default());
    frame
}

fn mac_for(addr: SocketAddrV4) -> EthernetAddress {
    let [a, b, c, d] = addr.ip().octets();
    EthernetAddress([0x02, 0x00, a, b, c, d])
}
