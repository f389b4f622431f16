use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

use smoltcp::wire::{EthernetFrame, IpAddress, Ipv4Packet, TcpPacket};

use super::*;
use crate::pcap::linktype;

const ETHERNET_LEN: usize = 14;
const IPV4_LEN: usize = 20;

fn client() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 3), 35539)
}

fn server() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), 7174)
}

fn frame(payload: &[u8]) -> Vec<u8> {
    build_tcp_frame(
        client(),
        server(),
        1000,
        2000,
        TcpFlags::ACK | TcpFlags::PSH,
        payload,
    )
}

/// The IPv4 packet of a built frame, for link layers other than Ethernet.
fn ipv4_packet(payload: &[u8]) -> Vec<u8> {
    frame(payload)[ETHERNET_LEN..].to_vec()
}

/// The TCP header and payload of a built frame, to wrap in IPv6 by hand.
fn tcp_bytes(payload: &[u8]) -> Vec<u8> {
    frame(payload)[ETHERNET_LEN + IPV4_LEN..].to_vec()
}

/// An IPv6 packet: fixed header, then `extensions` (each `(next header, bytes)`, chained
/// in order), then `upper` with protocol `last`.
fn ipv6_packet(extensions: &[(u8, Vec<u8>)], last: u8, upper: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut protocols: Vec<u8> = extensions.iter().map(|(kind, _)| *kind).collect();
    protocols.push(last);
    for (i, (_, bytes)) in extensions.iter().enumerate() {
        let mut bytes = bytes.clone();
        bytes[0] = protocols[i + 1];
        body.extend_from_slice(&bytes);
    }
    body.extend_from_slice(upper);
    let mut packet = vec![0x60, 0, 0, 0];
    packet.extend_from_slice(&(body.len() as u16).to_be_bytes());
    packet.push(protocols[0]);
    packet.push(64);
    packet.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    packet.extend_from_slice(&Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2).octets());
    packet.extend_from_slice(&body);
    packet
}

#[test]
fn built_frame_parses_back() {
    let data = frame(b"MPA ID Req Frame");
    let seg = parse_tcp(linktype::ETHERNET, &data).unwrap();
    assert_eq!(seg.src, SocketAddr::V4(client()));
    assert_eq!(seg.dst, SocketAddr::V4(server()));
    assert_eq!((seg.seq, seg.ack, seg.window), (1000, 2000, u16::MAX));
    assert!(seg.ack_flag && seg.psh && !seg.syn && !seg.fin && !seg.rst);
    assert_eq!(seg.payload, b"MPA ID Req Frame");
    assert_eq!(seg.payload_wire_len, 16);
    assert!(!seg.payload_truncated);
}

#[test]
fn built_frame_has_valid_checksums() {
    let data = frame(b"checksummed");
    let ethernet = EthernetFrame::new_checked(&data[..]).unwrap();
    let ip = Ipv4Packet::new_checked(ethernet.payload()).unwrap();
    assert!(ip.verify_checksum());
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    let (src, dst) = (
        IpAddress::Ipv4(*client().ip()),
        IpAddress::Ipv4(*server().ip()),
    );
    assert!(tcp.verify_checksum(&src, &dst));
}

/// A built SYN frame with `options` (a multiple of four octets) after its TCP header.
fn syn_with_options(options: &[u8]) -> Vec<u8> {
    let mut data = build_tcp_frame(client(), server(), 1000, 0, TcpFlags::SYN, b"");
    let tcp = ETHERNET_LEN + IPV4_LEN;
    data.splice(tcp + 20..tcp + 20, options.iter().copied());
    data[tcp + 12] = (((20 + options.len()) / 4) << 4) as u8;
    let total = (IPV4_LEN + 20 + options.len()) as u16;
    data[ETHERNET_LEN + 2..ETHERNET_LEN + 4].copy_from_slice(&total.to_be_bytes());
    data
}

/// The Window Scale option (RFC 7323 §2.2: kind 3, length 3, shift.cnt) is read
/// wherever it is among the options; options that end before it, or one malformed
/// before it, say there is none or that it cannot be told.
#[test]
fn the_window_scale_option_is_read() {
    let cases: [(&[u8], WindowScale); 7] = [
        (&[], WindowScale::Absent),
        // MSS 1460, NOP, Window Scale 7: Linux's order without SACK or timestamps.
        (&[2, 4, 0x05, 0xb4, 1, 3, 3, 7], WindowScale::Shift(7)),
        // A shift count above 14 as sent: the reassembler uses 14 (RFC 7323 §2.3).
        (&[3, 3, 20, 0], WindowScale::Shift(20)),
        // End of Option List before it.
        (&[0, 3, 3, 7], WindowScale::Absent),
        (&[2, 4, 0x05, 0xb4], WindowScale::Absent),
        // A length of 1, and a Window Scale option of length 4.
        (&[8, 1, 3, 3, 7, 1, 1, 1], WindowScale::Unknown),
        (&[3, 4, 7, 0], WindowScale::Unknown),
    ];
    for (options, expected) in cases {
        let data = syn_with_options(options);
        let seg = parse_tcp(linktype::ETHERNET, &data).unwrap();
        assert!(seg.syn);
        assert_eq!(seg.window_scale, expected, "{options:?}");
    }
    assert_eq!(
        parse_tcp(linktype::ETHERNET, &frame(b"x"))
            .unwrap()
            .window_scale,
        WindowScale::Absent
    );
}

#[test]
fn flags_map_one_to_one() {
    for (flags, expect) in [
        (TcpFlags::SYN, [true, false, false, false, false]),
        (
            TcpFlags::SYN | TcpFlags::ACK,
            [true, true, false, false, false],
        ),
        (
            TcpFlags::FIN | TcpFlags::ACK,
            [false, true, true, false, false],
        ),
        (TcpFlags::RST, [false, false, false, true, false]),
        (TcpFlags::PSH, [false, false, false, false, true]),
        (TcpFlags::NONE, [false; 5]),
    ] {
        let data = build_tcp_frame(client(), server(), 1, 2, flags, &[]);
        let seg = parse_tcp(linktype::ETHERNET, &data).unwrap();
        assert_eq!(
            [seg.syn, seg.ack_flag, seg.fin, seg.rst, seg.psh],
            expect,
            "{flags:?}"
        );
    }
}

#[test]
fn ethernet_padding_is_not_payload() {
    let mut data = frame(b"ab");
    assert_eq!(data.len(), 56);
    data.resize(60, 0xee);
    let seg = parse_tcp(linktype::ETHERNET, &data).unwrap();
    assert_eq!(seg.payload, b"ab");
}

#[test]
fn vlan_tags_are_peeled_up_to_two() {
    let plain = frame(b"tagged");
    let tag = |ethertype: [u8; 2]| [ethertype[0], ethertype[1], 0x00, 0x05];
    let mut one = plain[..12].to_vec();
    one.extend_from_slice(&tag([0x81, 0x00]));
    one.extend_from_slice(&plain[12..]);
    assert_eq!(
        parse_tcp(linktype::ETHERNET, &one).unwrap().payload,
        b"tagged"
    );
    let mut two = plain[..12].to_vec();
    two.extend_from_slice(&tag([0x88, 0xa8]));
    two.extend_from_slice(&tag([0x81, 0x00]));
    two.extend_from_slice(&plain[12..]);
    assert_eq!(
        parse_tcp(linktype::ETHERNET, &two).unwrap().payload,
        b"tagged"
    );
    let mut three = plain[..12].to_vec();
    for _ in 0..3 {
        three.extend_from_slice(&tag([0x81, 0x00]));
    }
    three.extend_from_slice(&plain[12..]);
    assert_eq!(parse_tcp(linktype::ETHERNET, &three), Err(Skip::NotIp));
}

#[test]
fn linux_cooked_v1_and_v2() {
    let ip = ipv4_packet(b"cooked");
    let mut sll = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00];
    sll.extend_from_slice(&ip);
    assert_eq!(
        parse_tcp(linktype::LINUX_SLL, &sll).unwrap().payload,
        b"cooked"
    );
    let mut sll2 = vec![
        0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 0, 0, 0,
    ];
    sll2.extend_from_slice(&ip);
    assert_eq!(
        parse_tcp(linktype::LINUX_SLL2, &sll2).unwrap().payload,
        b"cooked"
    );
    assert_eq!(
        parse_tcp(linktype::LINUX_SLL2, &sll2[..19]),
        Err(Skip::Truncated)
    );
}

#[test]
fn bsd_loopback_either_byte_order() {
    let ip = ipv4_packet(b"lo");
    for family in [2u32.to_le_bytes(), 2u32.to_be_bytes()] {
        let mut data = family.to_vec();
        data.extend_from_slice(&ip);
        assert_eq!(parse_tcp(linktype::NULL, &data).unwrap().payload, b"lo");
        assert_eq!(parse_tcp(linktype::LOOP, &data).unwrap().payload, b"lo");
    }
    let mut v6 = 30u32.to_le_bytes().to_vec();
    v6.extend_from_slice(&ipv6_packet(&[], 6, &tcp_bytes(b"six")));
    assert_eq!(parse_tcp(linktype::NULL, &v6).unwrap().payload, b"six");
    let mut other = 7u32.to_le_bytes().to_vec();
    other.extend_from_slice(&ip);
    assert_eq!(parse_tcp(linktype::NULL, &other), Err(Skip::NotIp));
}

#[test]
fn raw_ip_by_version_nibble() {
    let v4 = ipv4_packet(b"raw");
    let v6 = ipv6_packet(&[], 6, &tcp_bytes(b"raw6"));
    for linktype in [linktype::RAW, linktype::RAW_DLT_12, linktype::RAW_DLT_14] {
        assert_eq!(parse_tcp(linktype, &v4).unwrap().payload, b"raw");
        assert_eq!(parse_tcp(linktype, &v6).unwrap().payload, b"raw6");
        assert_eq!(parse_tcp(linktype, &[0x50; 40]), Err(Skip::NotIp));
        assert_eq!(parse_tcp(linktype, &[]), Err(Skip::Truncated));
    }
    assert_eq!(parse_tcp(linktype::IPV4, &v4).unwrap().payload, b"raw");
    assert_eq!(parse_tcp(linktype::IPV6, &v6).unwrap().payload, b"raw6");
    let seg = parse_tcp(linktype::IPV6, &v6).unwrap();
    assert_eq!(
        seg.src,
        SocketAddr::new(Ipv6Addr::LOCALHOST.into(), client().port())
    );
}

#[test]
fn ipv6_extension_headers_are_skipped() {
    let hop_by_hop = (0u8, vec![0, 0, 1, 4, 0, 0, 0, 0]);
    let destination = (60u8, vec![0, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    let packet = ipv6_packet(&[hop_by_hop.clone(), destination], 6, &tcp_bytes(b"deep"));
    let seg = parse_tcp(linktype::RAW, &packet).unwrap();
    assert_eq!(seg.payload, b"deep");
    assert_eq!(seg.payload_wire_len, 4);
    let fragment = (44u8, vec![0, 0, 0, 1, 0, 0, 0, 7]);
    let packet = ipv6_packet(&[hop_by_hop, fragment], 6, &tcp_bytes(b"frag"));
    assert_eq!(
        parse_tcp(linktype::RAW, &packet),
        Err(Skip::Fragment { protocol: 6 })
    );
    let packet = ipv6_packet(&[], 17, &[0; 8]);
    assert_eq!(
        parse_tcp(linktype::RAW, &packet),
        Err(Skip::NotTcp { protocol: 17 })
    );
}

#[test]
fn ipv6_extension_chain_is_bounded() {
    let options = (60u8, vec![0, 0, 1, 4, 0, 0, 0, 0]);
    let chain = vec![options; IPV6_EXTENSION_HEADERS_MAX + 1];
    let packet = ipv6_packet(&chain, 6, &tcp_bytes(b""));
    assert_eq!(parse_tcp(linktype::RAW, &packet), Err(Skip::BadHeader));
}

#[test]
fn ipv4_fragments_are_skipped() {
    let mut more_fragments = ipv4_packet(b"frag");
    more_fragments[6] |= 0x20;
    assert_eq!(
        parse_tcp(linktype::RAW, &more_fragments),
        Err(Skip::Fragment { protocol: 6 })
    );
    let mut later_fragment = ipv4_packet(b"frag");
    later_fragment[7] = 1;
    assert_eq!(
        parse_tcp(linktype::RAW, &later_fragment),
        Err(Skip::Fragment { protocol: 6 })
    );
}

#[test]
fn snaplen_cut_payload_is_marked() {
    let data = frame(&[7; 100]);
    let cut = &data[..data.len() - 30];
    let seg = parse_tcp(linktype::ETHERNET, cut).unwrap();
    assert_eq!(seg.payload, &[7; 70][..]);
    assert_eq!(seg.payload_wire_len, 100);
    assert!(seg.payload_truncated);
}

#[test]
fn segmentation_offload_zero_total_length() {
    let mut data = frame(&[9; 3000]);
    data[ETHERNET_LEN + 2..ETHERNET_LEN + 4].copy_from_slice(&[0, 0]);
    let seg = parse_tcp(linktype::ETHERNET, &data).unwrap();
    assert_eq!(seg.payload.len(), 3000);
    assert!(!seg.payload_truncated);
}

#[test]
fn impossible_headers_are_bad() {
    let mut short_ihl = ipv4_packet(b"x");
    short_ihl[0] = 0x44;
    assert_eq!(parse_tcp(linktype::IPV4, &short_ihl), Err(Skip::BadHeader));
    let mut short_total = ipv4_packet(b"x");
    short_total[2..4].copy_from_slice(&10u16.to_be_bytes());
    assert_eq!(
        parse_tcp(linktype::IPV4, &short_total),
        Err(Skip::BadHeader)
    );
    let mut short_data_offset = ipv4_packet(b"x");
    short_data_offset[IPV4_LEN + 12] = 0x40;
    assert_eq!(
        parse_tcp(linktype::IPV4, &short_data_offset),
        Err(Skip::BadHeader)
    );
    let mut total_cuts_tcp_header = ipv4_packet(b"");
    total_cuts_tcp_header[2..4].copy_from_slice(&30u16.to_be_bytes());
    assert_eq!(
        parse_tcp(linktype::IPV4, &total_cuts_tcp_header),
        Err(Skip::BadHeader)
    );
}

#[test]
fn other_protocols_and_link_types() {
    let mut udp = ipv4_packet(b"");
    udp[9] = 17;
    assert_eq!(
        parse_tcp(linktype::IPV4, &udp),
        Err(Skip::NotTcp { protocol: 17 })
    );
    let mut arp = frame(b"");
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert_eq!(parse_tcp(linktype::ETHERNET, &arp), Err(Skip::NotIp));
    assert_eq!(parse_tcp(147, &arp), Err(Skip::UnsupportedLinktype(147)));
    assert_eq!(
        Skip::UnsupportedLinktype(147).to_string(),
        "unsupported link-layer type 147"
    );
    assert_eq!(
        Skip::NotTcp { protocol: 17 }.to_string(),
        "not TCP: IP protocol UDP"
    );
}

#[test]
fn every_prefix_is_truncated_or_cut() {
    let data = frame(b"0123456789");
    let header_end = ETHERNET_LEN + IPV4_LEN + 20;
    for len in 0..data.len() {
        let result = parse_tcp(linktype::ETHERNET, &data[..len]);
        if len < header_end {
            assert_eq!(result, Err(Skip::Truncated), "prefix of {len} bytes");
        } else {
            let seg = result.unwrap();
            assert_eq!(seg.payload, &b"0123456789"[..len - header_end]);
            assert!(seg.payload_truncated);
        }
    }
}

fn sctp_frame(over: SctpOver, chunks: &[u8]) -> Vec<u8> {
    build_sctp_frame(client(), server(), over, 0xdead_beef, chunks)
}

#[test]
fn built_sctp_frames_parse_back_over_ip_and_udp() {
    let chunks = build_sctp_chunk(11, 0, b"");
    for over in [SctpOver::Ip, SctpOver::Udp] {
        let data = sctp_frame(over, &chunks);
        let packet = parse_sctp(linktype::ETHERNET, &data).unwrap();
        assert_eq!(packet.src, SocketAddr::V4(client()));
        assert_eq!(packet.dst, SocketAddr::V4(server()));
        assert_eq!(packet.verification_tag, 0xdead_beef);
        assert_eq!(packet.chunks, &chunks[..]);
        assert_eq!(packet.chunks_wire_len, 4);
        assert!(!packet.chunks_truncated);
        assert_eq!(packet.checksum_ok(), Some(true), "{over:?}");
        let udp = (over == SctpOver::Udp).then_some((9899, 9899));
        assert_eq!(packet.udp_ports, udp);
        // Not TCP, and without Ethernet too.
        assert!(matches!(
            parse_tcp(linktype::ETHERNET, &data),
            Err(Skip::NotTcp { protocol: 17 | 132 })
        ));
        let raw = &data[ETHERNET_LEN..];
        assert_eq!(parse_sctp(linktype::RAW, raw).unwrap().chunks, &chunks[..]);
    }
}

#[test]
fn the_sctp_checksum_is_the_crc32c_least_significant_octet_first() {
    // RFC 9260 Appendix A: CRC32c over the packet with the field zeroed.
    let data = sctp_frame(SctpOver::Ip, &build_sctp_chunk(4, 0, &[0, 1, 0, 4]));
    let sctp = &data[ETHERNET_LEN + IPV4_LEN..];
    let mut zeroed = sctp.to_vec();
    zeroed[8..12].fill(0);
    assert_eq!(&sctp[8..12], &crc32c::crc32c(&zeroed).to_le_bytes());
    let mut bad = data.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(
        parse_sctp(linktype::ETHERNET, &bad).unwrap().checksum_ok(),
        Some(false)
    );
}

#[test]
fn chunk_padding_is_not_counted_in_the_length() {
    assert_eq!(
        build_sctp_chunk(0x80, 3, b"abcde"),
        b"\x80\x03\x00\x09abcde\0\0\0"
    );
    assert_eq!(build_sctp_chunk(11, 0, b"").len(), 4);
}

#[test]
fn tcp_and_other_udp_are_not_sctp() {
    assert_eq!(
        parse_sctp(linktype::ETHERNET, &frame(b"x")),
        Err(Skip::NotSctp { protocol: 6 })
    );
    let mut other_port = sctp_frame(SctpOver::Udp, &build_sctp_chunk(11, 0, b""));
    let udp = ETHERNET_LEN + IPV4_LEN;
    other_port[udp..udp + 4].copy_from_slice(&[0, 53, 0, 53]);
    assert_eq!(
        parse_sctp(linktype::ETHERNET, &other_port),
        Err(Skip::NotSctp { protocol: 17 })
    );
    // Port 9899 on one side is enough.
    other_port[udp + 2..udp + 4].copy_from_slice(&9899u16.to_be_bytes());
    assert!(parse_sctp(linktype::ETHERNET, &other_port).is_ok());
}

#[test]
fn cut_and_impossible_sctp_packets_are_skipped_or_marked() {
    let data = sctp_frame(SctpOver::Udp, &build_sctp_chunk(0, 3, &[7; 40]));
    let sctp = ETHERNET_LEN + IPV4_LEN + 8;
    for cut in 0..sctp + 12 {
        assert!(
            parse_sctp(linktype::ETHERNET, &data[..cut]).is_err(),
            "{cut}"
        );
    }
    let packet = parse_sctp(linktype::ETHERNET, &data[..sctp + 20]).unwrap();
    assert!(packet.chunks_truncated);
    assert_eq!((packet.chunks.len(), packet.chunks_wire_len), (8, 44));
    assert_eq!(packet.checksum_ok(), None);
    // A UDP Length shorter than its header, or longer than IP carries.
    for length in [7u16, 2000] {
        let mut bad = data.clone();
        bad[sctp - 4..sctp - 2].copy_from_slice(&length.to_be_bytes());
        assert_eq!(
            parse_sctp(linktype::ETHERNET, &bad),
            Err(Skip::BadHeader),
            "{length}"
        );
    }
    // Room for less than the common header.
    let mut short = data[..sctp + 8].to_vec();
    short[sctp - 4..sctp - 2].copy_from_slice(&16u16.to_be_bytes());
    short[ETHERNET_LEN + 2..ETHERNET_LEN + 4].copy_from_slice(&44u16.to_be_bytes());
    assert_eq!(parse_sctp(linktype::ETHERNET, &short), Err(Skip::BadHeader));
}

#[test]
fn sctp_over_ipv6_walks_extension_headers() {
    let data = sctp_frame(SctpOver::Ip, &build_sctp_chunk(11, 0, b""));
    let sctp = data[ETHERNET_LEN + IPV4_LEN..].to_vec();
    let hop_by_hop = vec![0u8; 8];
    let packet = ipv6_packet(&[(0, hop_by_hop)], 132, &sctp);
    let parsed = parse_sctp(linktype::RAW, &packet).unwrap();
    assert_eq!(parsed.chunks, &sctp[12..]);
    assert_eq!(parsed.checksum_ok(), Some(true));
    assert_eq!(parsed.dst.port(), 7174);
}
