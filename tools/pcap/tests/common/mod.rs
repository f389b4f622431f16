//! Synthetic captures shared by the integration tests: a pcap writer for one
//! TCP address pair's connections and one for SCTP packets, and the MPA,
//! DDP/RDMAP and FPDU builders. They are written from the RFCs, apart from
//! the decoder, as the tests' oracle.
//!
//! Each test binary (`synthetic.rs`, `sctp.rs`, `reassembly_and_summary.rs`)
//! uses a different subset of these helpers.
#![allow(dead_code)]

use std::io::Cursor;
use std::net::SocketAddrV4;
use std::path::{Path, PathBuf};

use dpwarp_capture::packet::TcpFlags;
use dpwarp_capture::packet::{build_sctp_chunk, build_sctp_frame, build_tcp_frame, SctpOver};
use dpwarp_capture::pcap::{linktype, Writer};
use dpwarp_pcap::decode::{Message, Options};
use dpwarp_pcap::decode_capture;
use rnic_engine::mpa::crc;
use rnic_engine::wire::{
    mpa_rr, rdmap, DdpBuffer, DdpPacket, DdpRepr, MpaPacket, MpaRepr, RdmapHeader, RdmapOpcode,
    RdmapRepr,
};

pub(crate) const CLIENT: &str = "10.9.0.1:40000";
pub(crate) const SERVER: &str = "10.9.0.2:7174";
/// Initial sequence numbers (client, server) of [`Capture::new`].
pub(crate) const ISN: [u32; 2] = [1000, 5_000_000];

/// Writes a synthetic capture of one address pair's TCP connections.
pub(crate) struct Capture {
    pub(crate) writer: Writer<Vec<u8>>,
    pub(crate) ends: [SocketAddrV4; 2],
    /// The next sequence number of each side (0 client, 1 server).
    pub(crate) next_seq: [u32; 2],
    pub(crate) ts_ns: u64,
}

impl Capture {
    /// A capture of one connection that starts with a handshake from [`ISN`].
    pub(crate) fn new() -> Capture {
        Capture::with_isn(ISN)
    }

    /// A capture that starts with a handshake from the initial sequence
    /// numbers `isn` (client, server).
    pub(crate) fn with_isn(isn: [u32; 2]) -> Capture {
        let writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
        Capture::handshake(writer, 1_000_000_000, CLIENT.parse().unwrap(), isn)
    }

    /// A capture of one connection that starts after its handshake: no SYN, no MPA
    /// startup, as when tcpdump starts while traffic flows.
    pub(crate) fn mid_connection() -> Capture {
        Capture {
            writer: Writer::new(Vec::new(), linktype::ETHERNET).unwrap(),
            ends: [CLIENT.parse().unwrap(), SERVER.parse().unwrap()],
            next_seq: [ISN[0] + 1, ISN[1] + 1],
            ts_ns: 1_000_000_000,
        }
    }

    /// Continues `writer` with one more connection, from `client`, with a handshake.
    pub(crate) fn after(writer: Writer<Vec<u8>>, ts_ns: u64, client: SocketAddrV4) -> Capture {
        Capture::handshake(writer, ts_ns, client, ISN)
    }

    fn handshake(
        writer: Writer<Vec<u8>>,
        ts_ns: u64,
        client: SocketAddrV4,
        isn: [u32; 2],
    ) -> Capture {
        let mut capture = Capture {
            writer,
            ends: [client, SERVER.parse().unwrap()],
            next_seq: isn,
            ts_ns,
        };
        capture.segment(0, TcpFlags::SYN, &[]);
        capture.segment(1, TcpFlags::SYN | TcpFlags::ACK, &[]);
        capture.next_seq = [isn[0].wrapping_add(1), isn[1].wrapping_add(1)];
        capture
    }

    /// A segment from side `from` (0 client, 1 server) with sequence number
    /// `seq`, acknowledging what the other side sent so far.
    pub(crate) fn at(&mut self, from: usize, seq: u32, flags: TcpFlags, payload: &[u8]) {
        let (src, dst) = (self.ends[from], self.ends[1 - from]);
        let ack = self.next_seq[1 - from];
        let frame = build_tcp_frame(src, dst, seq, ack, flags, payload);
        self.writer.write_record(self.ts_ns, &frame).unwrap();
        self.ts_ns += 1000;
    }

    /// A segment from side `from` at its next sequence number.
    pub(crate) fn segment(&mut self, from: usize, flags: TcpFlags, payload: &[u8]) {
        let seq = self.next_seq[from];
        self.at(from, seq, flags, payload);
        self.next_seq[from] = seq.wrapping_add(payload.len() as u32);
    }

    /// Sends `bytes` from side `from` (0 client, 1 server) in segments of
    /// the given sizes (the last one takes what is left, in segments of at
    /// most 1448 octets).
    pub(crate) fn send(&mut self, from: usize, bytes: &[u8], cuts: &[usize]) {
        let mut rest = bytes;
        for &cut in cuts {
            if rest.is_empty() {
                break;
            }
            let (now, later) = rest.split_at(cut.clamp(1, rest.len()));
            self.segment(from, TcpFlags::ACK | TcpFlags::PSH, now);
            rest = later;
        }
        for chunk in rest.chunks(1448) {
            self.segment(from, TcpFlags::ACK | TcpFlags::PSH, chunk);
        }
    }

    /// Skips `len` octets of side `from`'s stream: a segment lost before the capture saw it.
    pub(crate) fn lose(&mut self, from: usize, len: usize) {
        self.next_seq[from] = self.next_seq[from].wrapping_add(len as u32);
    }

    /// Ends the capture with a reset from side `from`.
    pub(crate) fn reset(mut self, from: usize) -> Vec<u8> {
        self.segment(from, TcpFlags::RST, &[]);
        self.writer.into_inner().unwrap()
    }

    /// Ends the capture with a FIN from each side, the client's first (a FIN
    /// occupies a sequence number, RFC 9293 §3.4: the server's acknowledges
    /// it).
    pub(crate) fn close(mut self) -> Vec<u8> {
        self.segment(0, TcpFlags::FIN | TcpFlags::ACK, &[]);
        self.next_seq[0] = self.next_seq[0].wrapping_add(1);
        self.segment(1, TcpFlags::FIN | TcpFlags::ACK, &[]);
        self.writer.into_inner().unwrap()
    }
}

/// An MPA Request or Reply (RFC 5044 §7.1, RFC 6581 §5 when `enhanced`).
pub(crate) fn mpa_frame(
    kind: mpa_rr::FrameKind,
    markers: bool,
    crc: bool,
    enhanced: Option<mpa_rr::EnhancedRepr>,
    pd: &[u8],
) -> Vec<u8> {
    let repr = MpaRepr {
        kind,
        markers,
        crc,
        reject: false,
        reserved: 0,
        revision: if enhanced.is_some() { 2 } else { 1 },
        enhanced,
        private_data: pd,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut MpaPacket::new_unchecked(&mut out[..]));
    out
}

/// Frames ULPDUs into a stream of FPDUs starting at Full Operation
/// position `position`, inserting markers the way `mpa_marker` documents
/// (one at every multiple of 512, FPDUPTR back to the FPDU's start) and
/// computing each CRC over every octet of the FPDU but its CRC, markers
/// included. Written independently of the decoder, as the test's oracle.
pub(crate) fn frame_stream(
    mut position: u64,
    ulpdus: &[Vec<u8>],
    markers: bool,
    crc_on: bool,
) -> Vec<u8> {
    let mut raw = Vec::new();
    for ulpdu in ulpdus {
        let start = position;
        let mut content = (ulpdu.len() as u16).to_be_bytes().to_vec();
        content.extend_from_slice(ulpdu);
        content.resize(content.len() + (4 - content.len() % 4) % 4, 0);
        content.extend_from_slice(&[0; 4]);
        let crc_from = content.len() - 4;
        let mut fpdu_raw = Vec::new();
        let mut crc_at = Vec::new();
        for (i, byte) in content.iter().enumerate() {
            if markers && position.is_multiple_of(512) {
                let ptr = (position - start) as u16;
                fpdu_raw.extend_from_slice(&[0, 0, (ptr >> 8) as u8, ptr as u8]);
                position += 4;
            }
            if i >= crc_from {
                crc_at.push(fpdu_raw.len());
            }
            fpdu_raw.push(*byte);
            position += 1;
        }
        if crc_on {
            let covered: Vec<u8> = fpdu_raw
                .iter()
                .enumerate()
                .filter(|(i, _)| !crc_at.contains(i))
                .map(|(_, b)| *b)
                .collect();
            let value = crc::crc32c(&covered).to_le_bytes();
            for (k, at) in crc_at.iter().enumerate() {
                fpdu_raw[*at] = value[k];
            }
        }
        raw.extend_from_slice(&fpdu_raw);
    }
    raw
}

/// One FPDU of `ulpdu` with CRC and no markers.
pub(crate) fn fpdu(ulpdu: &[u8]) -> Vec<u8> {
    frame_stream(0, &[ulpdu.to_vec()], false, true)
}

/// A DDP segment with its RDMAP message.
pub(crate) fn segment(repr: &RdmapRepr<'_>) -> Vec<u8> {
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DdpPacket::new_unchecked(&mut out[..]));
    out
}

/// An untagged DDP header of RDMAP `opcode`.
pub(crate) fn untagged(opcode: RdmapOpcode, qn: u32, msn: u32, mo: u32, last: bool) -> DdpRepr {
    DdpRepr {
        last,
        reserved: 0,
        version: 1,
        rsvd_ulp: rdmap::Control::new(opcode).to_octet(),
        buffer: DdpBuffer::Untagged {
            rsvd_ulp: 0,
            qn,
            msn,
            mo,
        },
    }
}

/// A whole Send of `payload` on queue 0.
pub(crate) fn send(msn: u32, payload: &[u8]) -> Vec<u8> {
    segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::Send, 0, msn, 0, true),
        header: RdmapHeader::None,
        payload,
    })
}

/// Every message of a capture that reads to its end.
pub(crate) fn decode(bytes: &[u8]) -> Vec<Message> {
    let (messages, _, failure) = decode_capture(Cursor::new(bytes), Options::default());
    assert!(failure.is_none(), "{failure:?}");
    messages
}

/// The path of a golden capture (`tests/data/golden/`), by file name.
pub(crate) fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/golden")
        .join(name)
}

pub(crate) const ACTIVE: &str = "10.9.0.1:5001";
pub(crate) const PASSIVE: &str = "10.9.0.2:5002";

/// SCTP chunk types (RFC 9260 §3.2).
pub(crate) const DATA: u8 = 0;
pub(crate) const INIT: u8 = 1;
pub(crate) const INIT_ACK: u8 = 2;
pub(crate) const SACK: u8 = 3;
pub(crate) const ABORT: u8 = 6;
pub(crate) const COOKIE_ECHO: u8 = 10;
pub(crate) const COOKIE_ACK: u8 = 11;

/// Writes a synthetic capture of SCTP packets between two hosts.
pub(crate) struct SctpCapture {
    writer: Writer<Vec<u8>>,
    over: SctpOver,
    ethernet: bool,
    ends: [SocketAddrV4; 2],
    ts_ns: u64,
}

impl SctpCapture {
    /// Packets between [`ACTIVE`] and [`PASSIVE`], over UDP or IP, in
    /// Ethernet frames or raw IP.
    pub(crate) fn new(over: SctpOver, ethernet: bool) -> SctpCapture {
        let link = if ethernet {
            linktype::ETHERNET
        } else {
            linktype::RAW
        };
        SctpCapture {
            writer: Writer::new(Vec::new(), link).unwrap(),
            over,
            ethernet,
            ends: [ACTIVE.parse().unwrap(), PASSIVE.parse().unwrap()],
            ts_ns: 2_000_000_000,
        }
    }

    /// One packet from side `from` (0 active, 1 passive) bundling `chunks`.
    pub(crate) fn packet(&mut self, from: usize, vtag: u32, chunks: &[Vec<u8>]) {
        self.raw(from, vtag, &chunks.concat());
    }

    /// One packet whose chunk bytes are exactly `chunks`.
    pub(crate) fn raw(&mut self, from: usize, vtag: u32, chunks: &[u8]) {
        let (src, dst) = (self.ends[from], self.ends[1 - from]);
        let frame = build_sctp_frame(src, dst, self.over, vtag, chunks);
        let frame = if self.ethernet {
            &frame[..]
        } else {
            &frame[14..]
        };
        self.writer.write_record(self.ts_ns, frame).unwrap();
        self.ts_ns += 1000;
    }

    pub(crate) fn bytes(self) -> Vec<u8> {
        self.writer.into_inner().unwrap()
    }
}

/// INIT or INIT ACK (RFC 9260 §3.3.2): Initiate Tag, a_rwnd 65536, 4 streams
/// each way, Initial TSN; then a Supported Extensions parameter (0x8008, 5
/// octets: padding follows) and, if given, the Adaptation Layer Indication.
pub(crate) fn init(kind: u8, init_tag: u32, init_tsn: u32, adaptation: Option<u32>) -> Vec<u8> {
    let mut value = init_tag.to_be_bytes().to_vec();
    value.extend_from_slice(&65536u32.to_be_bytes());
    value.extend_from_slice(&[0, 4, 0, 4]);
    value.extend_from_slice(&init_tsn.to_be_bytes());
    value.extend_from_slice(&[0x80, 0x08, 0, 5, 0xc1, 0, 0, 0]);
    if let Some(code) = adaptation {
        value.extend_from_slice(&[0xc0, 0x06, 0, 8]);
        value.extend_from_slice(&code.to_be_bytes());
    }
    build_sctp_chunk(kind, 0, &value)
}
