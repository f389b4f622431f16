//! Writing captures and reading them back: classic pcap via `Writer`, pcapng by hand.

mod common;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use common::{message, read_all, NgBuilder, Owned, ETHERNET};
use dpwarp_capture::packet::{build_tcp_frame, parse_tcp, TcpFlags};
use dpwarp_capture::pcap::{self, linktype, Error, Part, Reader, Writer, CAPTURED_LEN_MAX};

fn client() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 3), 40001)
}

fn server() -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::new(10, 77, 0, 2), 7174)
}

/// A short exchange, with nanosecond time stamps that a microsecond file would lose.
fn exchange() -> Vec<(u64, Vec<u8>)> {
    let (c, s) = (client(), server());
    vec![
        (
            1_700_000_000_000_000_001,
            build_tcp_frame(c, s, 99, 0, TcpFlags::SYN, b""),
        ),
        (
            1_700_000_000_000_500_002,
            build_tcp_frame(s, c, 499, 100, TcpFlags::SYN | TcpFlags::ACK, b""),
        ),
        (
            1_700_000_000_001_000_003,
            build_tcp_frame(c, s, 100, 500, TcpFlags::ACK, b""),
        ),
        (
            1_700_000_000_002_000_004,
            build_tcp_frame(
                c,
                s,
                100,
                500,
                TcpFlags::ACK | TcpFlags::PSH,
                b"MPA ID Req Frame",
            ),
        ),
        (
            1_700_000_001_000_000_005,
            build_tcp_frame(c, s, 116, 500, TcpFlags::FIN | TcpFlags::ACK, b""),
        ),
        (0, build_tcp_frame(s, c, 500, 117, TcpFlags::RST, b"")),
    ]
}

#[test]
fn writer_round_trip_is_exact() {
    let frames = exchange();
    let mut writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
    for (ts_ns, data) in &frames {
        writer.write_record(*ts_ns, data).unwrap();
    }
    let bytes = writer.into_inner().unwrap();
    assert_eq!(
        bytes.len(),
        24 + frames
            .iter()
            .map(|(_, data)| 16 + data.len())
            .sum::<usize>()
    );
    let (records, error) = read_all(&bytes);
    assert!(error.is_none(), "{error:?}");
    let expected: Vec<Owned> = frames
        .iter()
        .enumerate()
        .map(|(i, (ts_ns, data))| Owned {
            frame: i as u64 + 1,
            ts_ns: *ts_ns,
            linktype: ETHERNET,
            orig_len: data.len() as u32,
            data: data.clone(),
        })
        .collect();
    assert_eq!(records, expected);
    let request = parse_tcp(ETHERNET, &records[3].data).unwrap();
    assert_eq!(request.src, SocketAddr::V4(client()));
    assert_eq!((request.seq, request.ack), (100, 500));
    assert_eq!(request.payload, b"MPA ID Req Frame");
}

#[test]
fn writer_refuses_what_it_cannot_represent() {
    assert_eq!(
        Writer::new(Vec::new(), 0x1_0000).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let mut writer = Writer::new(Vec::new(), linktype::RAW).unwrap();
    let too_long = vec![0; CAPTURED_LEN_MAX as usize + 1];
    assert_eq!(
        writer.write_record(0, &too_long).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let year_2106 = (u64::from(u32::MAX) + 1) * 1_000_000_000;
    assert_eq!(
        writer.write_record(year_2106, b"").unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    writer.write_record(year_2106 - 1, b"").unwrap();
    let (records, error) = read_all(&writer.into_inner().unwrap());
    assert!(error.is_none());
    assert_eq!(records[0].ts_ns, year_2106 - 1);
    assert_eq!(records[0].linktype, linktype::RAW);
}

/// Two sections in opposite byte orders, with every packet block type and blocks that
/// must be skipped.
fn two_section_pcapng(first_big_endian: bool) -> (Vec<u8>, Vec<Owned>) {
    let frames = exchange();
    let raw_ip = &frames[3].1[14..];
    let mut ng = NgBuilder::new(first_big_endian);
    ng.section()
        .interface(1, 0, Some(9))
        .block(0x0000_0bad, b"unknown block, skipped")
        .enhanced(
            0,
            1_234_567_890_123_456_789,
            &frames[0].1,
            frames[0].1.len() as u32,
        )
        .simple(frames[1].1.len() as u32, &frames[1].1)
        .obsolete(0, 42, &frames[2].1)
        .block(5, &[0; 20]);
    ng.big_endian = !first_big_endian;
    // A new section forgets the old interfaces: this one's interface 0 is raw IP with
    // the default microsecond resolution and a snapshot length that only the Simple
    // Packet Block below uses, and interface 1 is cut to 40 bytes.
    let snaplen = frames[5].1.len() as u32;
    ng.section()
        .interface(linktype::RAW as u16, snaplen, None)
        .interface(1, 40, Some(0x80 | 10))
        .enhanced(0, 1_500_000, raw_ip, raw_ip.len() as u32)
        .enhanced(1, 3 * 1024, &frames[4].1[..40], frames[4].1.len() as u32)
        .simple(frames[5].1.len() as u32 + 100, &frames[5].1);
    let owned = |frame, ts_ns, linktype, orig_len: usize, data: &[u8]| Owned {
        frame,
        ts_ns,
        linktype,
        orig_len: orig_len as u32,
        data: data.to_vec(),
    };
    let expected = vec![
        owned(
            1,
            1_234_567_890_123_456_789,
            ETHERNET,
            frames[0].1.len(),
            &frames[0].1,
        ),
        owned(2, 0, ETHERNET, frames[1].1.len(), &frames[1].1),
        owned(3, 42, ETHERNET, frames[2].1.len(), &frames[2].1),
        owned(4, 1_500_000_000, linktype::RAW, raw_ip.len(), raw_ip),
        owned(
            5,
            3_000_000_000,
            ETHERNET,
            frames[4].1.len(),
            &frames[4].1[..40],
        ),
        // A Simple Packet Block's captured length is its original length cut to the
        // snapshot length; the block's padding is not data.
        owned(6, 0, linktype::RAW, frames[5].1.len() + 100, &frames[5].1),
    ];
    (ng.bytes, expected)
}

#[test]
fn pcapng_both_byte_orders() {
    for first_big_endian in [false, true] {
        let (bytes, expected) = two_section_pcapng(first_big_endian);
        let (records, error) = read_all(&bytes);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(
            records, expected,
            "first section big-endian: {first_big_endian}"
        );
        let segment = parse_tcp(records[3].linktype, &records[3].data).unwrap();
        assert_eq!(segment.payload, b"MPA ID Req Frame");
    }
}

#[test]
fn pcapng_simple_packet_is_cut_to_the_snapshot_length() {
    let mut ng = NgBuilder::new(false);
    ng.section().interface(1, 20, None).simple(100, &[7; 100]);
    let (records, error) = read_all(&ng.bytes);
    assert!(error.is_none());
    assert_eq!(records[0].data, [7; 20]);
    assert_eq!(records[0].orig_len, 100);
}

#[test]
fn pcapng_structural_errors_are_named() {
    let mut ng = NgBuilder::new(false);
    ng.section().enhanced(0, 0, b"no interface", 12);
    let (_, error) = read_all(&ng.bytes);
    assert!(matches!(
        error,
        Some(Error::UnknownInterface {
            offset: 28,
            frame: 1,
            interface: 0
        })
    ));
    assert_eq!(
        message(&error),
        "packet block at byte 28 (frame 1) names undescribed interface 0"
    );

    let mut ng = NgBuilder::new(true);
    ng.section().interface(1, 0, None);
    let mut bytes = ng.bytes.clone();
    let last = bytes.len() - 1;
    bytes[last] ^= 4;
    let (_, error) = read_all(&bytes);
    assert!(
        matches!(error, Some(Error::BlockLengthMismatch { offset: 28, .. })),
        "{error:?}"
    );

    let mut bytes = ng.bytes.clone();
    bytes.extend_from_slice(&6u32.to_be_bytes());
    bytes.extend_from_slice(&0x7fff_fff0u32.to_be_bytes());
    let (_, error) = read_all(&bytes);
    assert_eq!(
        message(&error),
        "block length 2147483632 exceeds limit 16777216 at byte 64"
    );

    let mut bytes = ng.bytes.clone();
    bytes.extend_from_slice(&6u32.to_be_bytes());
    bytes.extend_from_slice(&30u32.to_be_bytes());
    let (_, error) = read_all(&bytes);
    assert_eq!(
        message(&error),
        "invalid length 30 for block type 0x00000006 at byte 64"
    );
}

#[test]
fn pcapng_oversized_packet_is_refused_before_reading_it() {
    let mut ng = NgBuilder::new(false);
    ng.section().interface(1, 0, None);
    // A well-framed EPB whose captured length claims more than the limit.
    let mut body = vec![0u8; 20];
    body[12..16].copy_from_slice(&(CAPTURED_LEN_MAX + 1).to_le_bytes());
    ng.block(6, &body);
    let (_, error) = read_all(&ng.bytes);
    assert!(matches!(error, Some(Error::RecordTooLong { len, .. }) if len == CAPTURED_LEN_MAX + 1));
    // And one whose captured length runs past its block.
    let mut ng = NgBuilder::new(false);
    ng.section().interface(1, 0, None);
    body[12..16].copy_from_slice(&8u32.to_le_bytes());
    ng.block(6, &body);
    let (_, error) = read_all(&ng.bytes);
    assert_eq!(
        message(&error),
        "captured length 8 does not fit in the block at byte 64 (frame 1)"
    );
}

#[test]
fn pcapng_bad_byte_order_magic_and_version() {
    let mut ng = NgBuilder::new(false);
    ng.section();
    let mut bytes = ng.bytes.clone();
    bytes[8..12].copy_from_slice(&[1, 2, 3, 4]);
    let error = Reader::new(&bytes[..]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "section header at byte 0 has byte-order magic 0x01020304, expected 0x1a2b3c4d"
    );
    let mut bytes = ng.bytes.clone();
    bytes[12] = 2;
    let error = Reader::new(&bytes[..]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "unsupported file format version 2.0 at byte 0"
    );
}

#[test]
fn classic_errors_are_named() {
    let mut writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
    writer.write_record(0, b"first").unwrap();
    let mut bytes = writer.into_inner().unwrap();
    let second = bytes.len();
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&9_999_999u32.to_le_bytes());
    bytes.extend_from_slice(&9_999_999u32.to_le_bytes());
    let (records, error) = read_all(&bytes);
    assert_eq!(records.len(), 1);
    assert_eq!(
        message(&error),
        format!("record length 9999999 exceeds limit 262144 at byte {second} (frame 2)")
    );
    let mut version = bytes.clone();
    version[4] = 3;
    let error = Reader::new(&version[..]).unwrap_err();
    assert!(matches!(
        error,
        Error::UnsupportedVersion {
            major: 3,
            minor: 4,
            ..
        }
    ));
}

#[test]
fn classic_big_endian_and_microsecond_magic() {
    // Big-endian, microsecond: the byte-swapped form of 0xa1b2c3d4.
    let mut bytes = vec![0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4];
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&65535u32.to_be_bytes());
    bytes.extend_from_slice(&(0x0400_0000 | linktype::LINUX_SLL).to_be_bytes());
    bytes.extend_from_slice(&7u32.to_be_bytes());
    bytes.extend_from_slice(&250_000u32.to_be_bytes());
    bytes.extend_from_slice(&3u32.to_be_bytes());
    bytes.extend_from_slice(&60u32.to_be_bytes());
    bytes.extend_from_slice(b"abc");
    let (records, error) = read_all(&bytes);
    assert!(error.is_none());
    let expected = Owned {
        frame: 1,
        ts_ns: 7_250_000_000,
        // The FCS bits above the low 16 are not part of the link type.
        linktype: linktype::LINUX_SLL,
        orig_len: 60,
        data: b"abc".to_vec(),
    };
    assert_eq!(records, [expected]);
}

#[test]
fn open_reports_missing_files() {
    let error = pcap::open("/nonexistent/dpwarp/capture.pcap").unwrap_err();
    assert!(
        matches!(&error, Error::Io { offset: 0, source } if source.kind() == ErrorKind::NotFound)
    );
    assert!(std::error::Error::source(&error).is_some());
    let reader = pcap::open(common::golden_dir().join("rping_v2.pcap")).unwrap();
    assert_eq!(reader.offset(), 24);
}

#[test]
fn truncated_file_header_names_its_part() {
    let error = Reader::new(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0][..]).unwrap_err();
    assert!(matches!(
        error,
        Error::Truncated {
            part: Part::FileHeader,
            offset: 0,
            frame: None
        }
    ));
    assert_eq!(error.to_string(), "truncated file header at byte 0");
}
