//! Synthesising Ethernet + IPv4 + TCP frames for tests and tools.

use std::net::SocketAddrV4;

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Packet, Ipv4Repr, TcpPacket, TcpSeqNumber,
};

use super::TcpFlags;

const ETHERNET_HEADER_LEN: usize = 14;
const IPV4_HEADER_LEN: usize = 20;
const TCP_HEADER_LEN: usize = 20;
/// Window advertised by built segments: the largest unscaled value, so that nothing
/// reading the synthetic capture sees a closed window.
const WINDOW: u16 = u16::MAX;
const HOP_LIMIT: u8 = 64;

/// Largest payload [`build_tcp_frame`] accepts: what fits one IPv4 packet with option-less
/// IPv4 and TCP headers.
pub const BUILD_PAYLOAD_LEN_MAX: usize = u16::MAX as usize - IPV4_HEADER_LEN - TCP_HEADER_LEN;

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
    let mut frame = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + tcp_len];
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
        next_header: IpProtocol::Tcp,
        payload_len: tcp_len,
        hop_limit: HOP_LIMIT,
    }
    .emit(&mut ip, &ChecksumCapabilities::default());
    let mut tcp = TcpPacket::new_unchecked(ip.payload_mut());
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

fn mac_for(addr: SocketAddrV4) -> EthernetAddress {
    let [a, b, c, d] = addr.ip().octets();
    EthernetAddress([0x02, 0x00, a, b, c, d])
}
