//! RDMAP messages (RFC 5040 §4; RFC 7306, draft-ietf-storm-rdmap-ext-00 §4-§6).
//!
//! RDMAP lives inside DDP's header: its control octet is DDP's 8-bit RsvdULP
//! field, and Send with Invalidate puts the Invalidate STag in DDP's untagged
//! 32-bit RsvdULP field (draft-ietf-storm-rdmap-ext-00 §4.1, Figure 1):
//!
//! ```text
//! |T|L| Resrv | DV| RV|Rsv| Opcode|     DDP control | RDMAP control
//! |                Invalidate STag                |   (untagged only)
//! ```
//!
//! Per opcode, an RDMAP header may follow the DDP header ([`OPCODES`]):
//! a Read Request's 28 octets, a Terminate header ([`super::term`]), 8 octets
//! of Immediate Data, or an Atomic Request/Response header
//! ([`super::atomic`]).
//!
//! siw capture facts: RV is 1 on every message; siw sends opcodes 0-7 only;
//! its zero-length Write RTR uses STag 1 and TO 0
//! (`rping_v2_p2p_write_rtr.pcap` frame 8); Read Responses travel as tagged
//! segments to the Read Request's sink STag/TO, 1428 payload octets per
//! segment with MSS 1448 (`iwprobe_ops.pcap`, 8 KiB Read).
//!
//! # Validity
//! [`Repr::parse`] rejects what cannot be laid out: a known opcode with the
//! wrong buffer model (its headers would be misread), an RDMAP header that does
//! not fit, and octets after the header of a message that carries no ULP
//! payload (Read Request, Immediate Data, Atomics:
//! draft-ietf-storm-rdmap-ext-00 Figure 3 "ULP Message allowed: No"; RFC 7306
//! requires exactly 8 octets of Immediate Data). It keeps an unknown opcode,
//! any RDMAP version, any QN and the reserved bits, so the engine can answer
//! each with its TERM.

use super::macros::enum_with_unknown;
use super::{atomic, be, ddp, term, Error, Field, Result};

mod field {
    use super::Field;

    pub(crate) const VERSION_MASK: u8 = 0xC0;
    pub(crate) const VERSION_SHIFT: u32 = 6;
    pub(crate) const RESERVED_MASK: u8 = 0x30;
    pub(crate) const RESERVED_SHIFT: u32 = 4;
    pub(crate) const OPCODE_MASK: u8 = 0x0F;

    // Read Request header, after the untagged DDP header.
    pub(crate) const SINK_STAG: Field = 0..4;
    pub(crate) const SINK_TO: Field = 4..12;
    pub(crate) const READ_SIZE: Field = 12..16;
    pub(crate) const SOURCE_STAG: Field = 16..20;
    pub(crate) const SOURCE_TO: Field = 20..28;
}

/// RDMAP version of RFC 5040; draft-ietf-storm-rdmap-ext-00 §4.1: "MUST be 01b"
/// with the extensions too.
pub const VERSION: u8 = 1;
/// Length of the Read Request header.
pub const READ_REQUEST_HEADER_LEN: usize = field::SOURCE_TO.end;
/// Length of the Immediate Data header (draft-ietf-storm-rdmap-ext-00 §6.2).
pub const IMMEDIATE_DATA_LEN: usize = 8;

const _: () = assert!(READ_REQUEST_HEADER_LEN == 28);

enum_with_unknown! {
    /// RDMA message opcode (RFC 5040 §4.2; draft-ietf-storm-rdmap-ext-00 §4.1
    /// Figure 2).
    pub enum Opcode(u8) {
        /// RDMA Write (tagged).
        RdmaWrite = 0x0,
        /// RDMA Read Request (untagged, QN 1).
        RdmaReadRequest = 0x1,
        /// RDMA Read Response (tagged).
        RdmaReadResponse = 0x2,
        /// Send (QN 0).
        Send = 0x3,
        /// Send with Invalidate (QN 0).
        SendWithInvalidate = 0x4,
        /// Send with Solicited Event (QN 0).
        SendWithSe = 0x5,
        /// Send with Solicited Event and Invalidate (QN 0).
        SendWithSeAndInvalidate = 0x6,
        /// Terminate (QN 2).
        Terminate = 0x7,
        /// Immediate Data (QN 0, RFC 7306).
        ImmediateData = 0x8,
        /// Immediate Data with Solicited Event (QN 0, RFC 7306).
        ImmediateDataWithSe = 0x9,
        /// Atomic Request (QN 1, RFC 7306).
        AtomicRequest = 0xA,
        /// Atomic Response (QN 3, RFC 7306).
        AtomicResponse = 0xB,
    }
}

/// What follows the DDP header of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderKind {
    /// Nothing: ULP payload directly.
    None,
    /// The 28-octet Read Request header; no payload.
    ReadRequest,
    /// A Terminate header (variable); nothing after it.
    Terminate,
    /// 8 octets of Immediate Data; no payload.
    Immediate,
    /// The 52-octet Atomic Request header; no payload.
    AtomicRequest,
    /// The 12-octet Atomic Response header; no payload.
    AtomicResponse,
}

/// Per-opcode facts (STYLE.md §3: "Opcode dispatch is a const table").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Opcode.
    pub opcode: Opcode,
    /// Short name for traces.
    pub name: &'static str,
    /// Tagged buffer model (else untagged).
    pub tagged: bool,
    /// The untagged queue it travels on.
    pub qn: Option<u32>,
    /// The RDMAP header after the DDP header.
    pub header: HeaderKind,
}

const fn info(
    opcode: Opcode,
    name: &'static str,
    qn: Option<u32>,
    header: HeaderKind,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        name,
        tagged: qn.is_none(),
        qn,
        header,
    }
}

/// Facts of every known opcode, indexed by its value.
pub const OPCODES: [OpcodeInfo; 12] = [
    info(Opcode::RdmaWrite, "WRITE", None, HeaderKind::None),
    info(
        Opcode::RdmaReadRequest,
        "READ_REQ",
        Some(ddp::qn::READ_REQUEST),
        HeaderKind::ReadRequest,
    ),
    info(
        Opcode::RdmaReadResponse,
        "READ_RESP",
        None,
        HeaderKind::None,
    ),
    info(Opcode::Send, "SEND", Some(ddp::qn::SEND), HeaderKind::None),
    info(
        Opcode::SendWithInvalidate,
        "SEND_INV",
        Some(ddp::qn::SEND),
        HeaderKind::None,
    ),
    info(
        Opcode::SendWithSe,
        "SEND_SE",
        Some(ddp::qn::SEND),
        HeaderKind::None,
    ),
    info(
        Opcode::SendWithSeAndInvalidate,
        "SEND_SE_INV",
        Some(ddp::qn::SEND),
        HeaderKind::None,
    ),
    info(
        Opcode::Terminate,
        "TERMINATE",
        Some(ddp::qn::TERMINATE),
        HeaderKind::Terminate,
    ),
    info(
        Opcode::ImmediateData,
        "IMM",
        Some(ddp::qn::SEND),
        HeaderKind::Immediate,
    ),
    info(
        Opcode::ImmediateDataWithSe,
        "IMM_SE",
        Some(ddp::qn::SEND),
        HeaderKind::Immediate,
    ),
    info(
        Opcode::AtomicRequest,
        "ATOMIC_REQ",
        Some(ddp::qn::READ_REQUEST),
        HeaderKind::AtomicRequest,
    ),
    info(
        Opcode::AtomicResponse,
        "ATOMIC_RESP",
        Some(ddp::qn::ATOMIC_RESPONSE),
        HeaderKind::AtomicResponse,
    ),
];

impl Opcode {
    /// The opcode's facts, or `None` for an unknown opcode.
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        OPCODES.get(usize::from(u8::from(self)))
    }

    /// Whether a Send-family opcode carries an Invalidate STag.
    pub fn invalidates(self) -> bool {
        matches!(
            self,
            Opcode::SendWithInvalidate | Opcode::SendWithSeAndInvalidate
        )
    }

    /// Whether the opcode asks for a Solicited Event.
    pub fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendWithSe | Opcode::SendWithSeAndInvalidate | Opcode::ImmediateDataWithSe
        )
    }
}

/// The RDMAP control octet, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Control {
    /// RV (2 bits).
    pub version: u8,
    /// The 2 reserved bits.
    pub reserved: u8,
    /// Opcode (4 bits).
    pub opcode: Opcode,
}

impl Control {
    /// Splits the octet (DDP's 8-bit RsvdULP field).
    pub fn from_octet(octet: u8) -> Control {
        Control {
            version: (octet & field::VERSION_MASK) >> field::VERSION_SHIFT,
            reserved: (octet & field::RESERVED_MASK) >> field::RESERVED_SHIFT,
            opcode: Opcode::from(octet & field::OPCODE_MASK),
        }
    }

    /// A version-1 control octet for `opcode`.
    pub fn new(opcode: Opcode) -> Control {
        Control {
            version: VERSION,
            reserved: 0,
            opcode,
        }
    }

    /// Joins the fields into the octet.
    ///
    /// # Panics
    /// If a field is wider than its bits.
    pub fn to_octet(self) -> u8 {
        let opcode = u8::from(self.opcode);
        assert!(
            self.version <= 3 && self.reserved <= 3 && opcode <= 0x0F,
            "RDMAP control field too wide"
        );
        self.version << field::VERSION_SHIFT | self.reserved << field::RESERVED_SHIFT | opcode
    }
}

/// A read/write view of the Read Request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequestPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ReadRequestPacket<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> ReadRequestPacket<T> {
        ReadRequestPacket { buffer }
    }

    /// Wraps a buffer of at least [`READ_REQUEST_HEADER_LEN`] octets.
    pub fn new_checked(buffer: T) -> Result<ReadRequestPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < READ_REQUEST_HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Data Sink STag: where the Read Responses go.
    pub fn sink_stag(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::SINK_STAG])
    }

    /// Data Sink Tagged Offset.
    pub fn sink_to(&self) -> u64 {
        be::u64(&self.buffer.as_ref()[field::SINK_TO])
    }

    /// RDMA Read Message Size.
    pub fn read_size(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::READ_SIZE])
    }

    /// Data Source STag: what to read.
    pub fn source_stag(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::SOURCE_STAG])
    }

    /// Data Source Tagged Offset.
    pub fn source_to(&self) -> u64 {
        be::u64(&self.buffer.as_ref()[field::SOURCE_TO])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReadRequestPacket<T> {
    /// Writes the sink STag and TO.
    pub fn set_sink(&mut self, stag: u32, to: u64) {
        be::put_u32(&mut self.buffer.as_mut()[field::SINK_STAG], stag);
        be::put_u64(&mut self.buffer.as_mut()[field::SINK_TO], to);
    }

    /// Writes the read size.
    pub fn set_read_size(&mut self, size: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::READ_SIZE], size);
    }

    /// Writes the source STag and TO.
    pub fn set_source(&mut self, stag: u32, to: u64) {
        be::put_u32(&mut self.buffer.as_mut()[field::SOURCE_STAG], stag);
        be::put_u64(&mut self.buffer.as_mut()[field::SOURCE_TO], to);
    }
}

/// A Read Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReadRequestRepr {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub read_size: u32,
    /// Data Source STag.
    pub source_stag: u32,
    /// Data Source Tagged Offset.
    pub source_to: u64,
}

impl ReadRequestRepr {
    /// Parses a Read Request header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &ReadRequestPacket<&T>) -> Result<Self> {
        packet.check_len()?;
        Ok(ReadRequestRepr {
            sink_stag: packet.sink_stag(),
            sink_to: packet.sink_to(),
            read_size: packet.read_size(),
            source_stag: packet.source_stag(),
            source_to: packet.source_to(),
        })
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ReadRequestPacket<T>) {
        packet.set_sink(self.sink_stag, self.sink_to);
        packet.set_read_size(self.read_size);
        packet.set_source(self.source_stag, self.source_to);
    }
}

/// The RDMAP header of a message, by opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Header<'a> {
    /// No RDMAP header (Write, Read Response, Sends, unknown opcodes).
    None,
    /// Read Request.
    ReadRequest(ReadRequestRepr),
    /// Terminate.
    Terminate(term::Repr<'a>),
    /// Immediate Data (or with SE): the 8 octets, as the ULP gave them.
    Immediate([u8; IMMEDIATE_DATA_LEN]),
    /// Atomic Request.
    AtomicRequest(atomic::RequestRepr),
    /// Atomic Response.
    AtomicResponse(atomic::ResponseRepr),
}

impl Header<'_> {
    /// Octets this header occupies after the DDP header.
    pub fn len(&self) -> usize {
        match self {
            Header::None => 0,
            Header::ReadRequest(_) => READ_REQUEST_HEADER_LEN,
            Header::Terminate(repr) => repr.buffer_len(),
            Header::Immediate(_) => IMMEDIATE_DATA_LEN,
            Header::AtomicRequest(_) => atomic::REQUEST_HEADER_LEN,
            Header::AtomicResponse(_) => atomic::RESPONSE_HEADER_LEN,
        }
    }

    /// Whether the header is absent.
    pub fn is_empty(&self) -> bool {
        matches!(self, Header::None)
    }
}

/// How [`Repr::parse_with`] reads a Terminate's control word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermReading {
    /// Pick the more plausible layout ([`term::detect`]).
    Detect,
    /// Use this layout.
    Fixed(term::Encoding),
}

/// One DDP segment read as an RDMAP message: DDP header, RDMAP header, and
/// the ULP payload of this segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The DDP header; its `rsvd_ulp` octet is the RDMAP control octet.
    pub ddp: ddp::Repr,
    /// The RDMAP header the opcode calls for.
    pub header: Header<'a>,
    /// ULP payload (empty for messages that carry none).
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a segment, reading a Terminate in whichever layout fits
    /// ([`TermReading::Detect`]).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &ddp::Packet<&'a T>) -> Result<Repr<'a>> {
        Self::parse_with(packet, TermReading::Detect)
    }

    /// Parses a segment; see the module docs for what is rejected.
    pub fn parse_with<T: AsRef<[u8]> + ?Sized>(
        packet: &ddp::Packet<&'a T>,
        reading: TermReading,
    ) -> Result<Repr<'a>> {
        let ddp = ddp::Repr::parse(packet)?;
        let rest: &'a [u8] = &packet_bytes(packet)[packet.header_len()..];
        let Some(info) = Control::from_octet(ddp.rsvd_ulp).opcode.info() else {
            return Ok(Repr {
                ddp,
                header: Header::None,
                payload: rest,
            });
        };
        if info.tagged != ddp.tagged() {
            return Err(Error);
        }
        let (header, payload) = parse_header(info.header, rest, reading)?;
        Ok(Repr {
            ddp,
            header,
            payload,
        })
    }

    /// The RDMAP control octet, decoded.
    pub fn control(&self) -> Control {
        Control::from_octet(self.ddp.rsvd_ulp)
    }

    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        self.control().opcode
    }

    /// Octets [`Repr::emit`] writes: the whole DDP segment (the ULPDU).
    pub fn buffer_len(&self) -> usize {
        self.ddp.header_len() + self.header.len() + self.payload.len()
    }

    /// Writes the DDP segment: DDP header, RDMAP header and payload.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ddp::Packet<T>) {
        self.ddp.emit(packet);
        let out = packet.payload_mut();
        let (head, tail) = out.split_at_mut(self.header.len());
        match self.header {
            Header::None => {}
            Header::ReadRequest(r) => r.emit(&mut ReadRequestPacket::new_unchecked(head)),
            Header::Terminate(t) => t.emit(&mut term::Packet::new_unchecked(head)),
            Header::Immediate(data) => head.copy_from_slice(&data),
            Header::AtomicRequest(a) => a.emit(&mut atomic::RequestPacket::new_unchecked(head)),
            Header::AtomicResponse(a) => a.emit(&mut atomic::ResponsePacket::new_unchecked(head)),
        }
        tail[..self.payload.len()].copy_from_slice(self.payload);
    }
}

fn packet_bytes<'a, T: AsRef<[u8]> + ?Sized>(packet: &ddp::Packet<&'a T>) -> &'a [u8] {
    packet.clone().into_inner().as_ref()
}

fn parse_header<'a>(
    kind: HeaderKind,
    rest: &'a [u8],
    reading: TermReading,
) -> Result<(Header<'a>, &'a [u8])> {
    let fixed = |len: usize| -> Result<&'a [u8]> {
        if rest.len() == len {
            Ok(rest)
        } else {
            Err(Error)
        }
    };
    let header = match kind {
        HeaderKind::None => return Ok((Header::None, rest)),
        HeaderKind::ReadRequest => {
            let bytes = fixed(READ_REQUEST_HEADER_LEN)?;
            Header::ReadRequest(ReadRequestRepr::parse(&ReadRequestPacket::new_unchecked(
                bytes,
            ))?)
        }
        HeaderKind::Terminate => {
            let packet = term::Packet::new_checked(rest)?;
            let encoding = match reading {
                TermReading::Detect => term::detect(&packet)?.encoding,
                TermReading::Fixed(encoding) => encoding,
            };
            Header::Terminate(term::Repr::parse(&packet, encoding)?)
        }
        HeaderKind::Immediate => {
            let bytes = fixed(IMMEDIATE_DATA_LEN)?;
            let mut data = [0u8; IMMEDIATE_DATA_LEN];
            data.copy_from_slice(bytes);
            Header::Immediate(data)
        }
        HeaderKind::AtomicRequest => {
            let bytes = fixed(atomic::REQUEST_HEADER_LEN)?;
            Header::AtomicRequest(atomic::RequestRepr::parse(
                &atomic::RequestPacket::new_unchecked(bytes),
            )?)
        }
        HeaderKind::AtomicResponse => {
            let bytes = fixed(atomic::RESPONSE_HEADER_LEN)?;
            Header::AtomicResponse(atomic::ResponseRepr::parse(
                &atomic::ResponsePacket::new_unchecked(bytes),
            )?)
        }
    };
    Ok((header, &rest[rest.len()..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rping_v2_crc.pcap` frame 9: siw's Read Request ULPDU.
    static SIW_READ_REQUEST: [u8; 46] = [
        0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x05, 0xba, 0xfb, 0x00, 0x00, 0x00, 0x55, 0x5b, 0x05, 0xeb, 0xe5, 0x50,
        0x00, 0x00, 0x00, 0x40, 0x4c, 0x1b, 0x05, 0x00, 0x00, 0x00, 0x55, 0x73, 0x01, 0x29, 0x63,
        0x70,
    ];
    /// `rping_v2_p2p_write_rtr.pcap` frame 8: the zero-length Write RTR ULPDU.
    static SIW_WRITE_RTR: [u8; 14] = [
        0xc1, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    fn parse(bytes: &[u8]) -> Result<Repr<'_>> {
        Repr::parse(&ddp::Packet::new_checked(bytes)?)
    }

    fn round_trip(repr: &Repr<'_>) -> Vec<u8> {
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ddp::Packet::new_unchecked(&mut out[..]));
        assert_eq!(parse(&out).as_ref(), Ok(repr));
        out
    }

    #[test]
    fn test_opcode_table_is_indexed_by_value() {
        for (i, info) in OPCODES.iter().enumerate() {
            assert_eq!(usize::from(u8::from(info.opcode)), i);
            assert_eq!(info.opcode.info(), Some(info));
        }
        assert_eq!(Opcode::from(0xC).info(), None);
        assert_eq!(Opcode::AtomicResponse.info().unwrap().qn, Some(3));
        assert_eq!(Opcode::ImmediateDataWithSe.info().unwrap().qn, Some(0));
    }

    #[test]
    fn test_siw_read_request() {
        let repr = parse(&SIW_READ_REQUEST).unwrap();
        assert_eq!(repr.control(), Control::new(Opcode::RdmaReadRequest));
        let Header::ReadRequest(rr) = repr.header else {
            panic!("not a Read Request")
        };
        assert_eq!(rr.sink_stag, 0x05ba_fb00);
        assert_eq!(rr.sink_to, 0x0000_555b_05eb_e550);
        assert_eq!(rr.read_size, 64);
        assert_eq!(rr.source_stag, 0x4c1b_0500);
        assert_eq!(rr.source_to, 0x0000_5573_0129_6370);
        assert_eq!(round_trip(&repr), SIW_READ_REQUEST);
    }

    #[test]
    fn test_siw_write_rtr() {
        let repr = parse(&SIW_WRITE_RTR).unwrap();
        assert_eq!(repr.opcode(), Opcode::RdmaWrite);
        assert_eq!(repr.ddp.buffer, ddp::Buffer::Tagged { stag: 1, to: 0 });
        assert!(repr.ddp.last);
        assert!(repr.payload.is_empty());
        assert_eq!(round_trip(&repr), SIW_WRITE_RTR);
    }

    fn untagged(opcode: Opcode, qn: u32) -> ddp::Repr {
        ddp::Repr {
            last: true,
            reserved: 0,
            version: ddp::VERSION,
            rsvd_ulp: Control::new(opcode).to_octet(),
            buffer: ddp::Buffer::Untagged {
                rsvd_ulp: 0,
                qn,
                msn: 1,
                mo: 0,
            },
        }
    }

    #[test]
    fn test_immediate_data_exactly_eight_octets() {
        let repr = Repr {
            ddp: untagged(Opcode::ImmediateDataWithSe, 0),
            header: Header::Immediate(*b"imm-data"),
            payload: &[],
        };
        let bytes = round_trip(&repr);
        assert_eq!(bytes.len(), 18 + 8);
        assert_eq!(bytes[1], 0x49);
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(parse(&long), Err(Error));
        assert_eq!(parse(&bytes[..bytes.len() - 1]), Err(Error));
    }

    #[test]
    fn test_atomics_round_trip() {
        let request = Repr {
            ddp: untagged(Opcode::AtomicRequest, 1),
            header: Header::AtomicRequest(atomic::RequestRepr::fetch_add(9, 0x100, 8, 5, 0)),
            payload: &[],
        };
        assert_eq!(round_trip(&request).len(), 18 + 52);
        let response = Repr {
            ddp: untagged(Opcode::AtomicResponse, 3),
            header: Header::AtomicResponse(atomic::ResponseRepr {
                original_request_id: 9,
                original_remote_value: 77,
            }),
            payload: &[],
        };
        assert_eq!(round_trip(&response).len(), 18 + 12);
    }

    #[test]
    fn test_unknown_opcode_and_versions_round_trip() {
        let mut ddp_repr = untagged(Opcode::Send, 5);
        ddp_repr.rsvd_ulp = Control {
            version: 2,
            reserved: 3,
            opcode: Opcode::Unknown(0xE),
        }
        .to_octet();
        ddp_repr.version = 2;
        let repr = Repr {
            ddp: ddp_repr,
            header: Header::None,
            payload: b"xyz",
        };
        let bytes = round_trip(&repr);
        assert_eq!(bytes[1], 0xBE);
        assert_eq!(
            parse(&bytes).unwrap().control().opcode,
            Opcode::Unknown(0xE)
        );
    }

    #[test]
    fn test_wrong_buffer_model_is_rejected() {
        // A Send with the T bit: its header would be misread.
        let mut bytes = SIW_WRITE_RTR;
        bytes[1] = Control::new(Opcode::Send).to_octet();
        assert_eq!(parse(&bytes), Err(Error));
        // A Read Request with a payload.
        let mut long = SIW_READ_REQUEST.to_vec();
        long.push(0);
        assert_eq!(parse(&long), Err(Error));
    }
}
