//! The Terminate header (RFC 5040 §4.8) and the registry of
//! Terminate layer/type/code values (IANA "RDDP", RFC 6580, RFC 6581 §8).
//!
//! A Terminate is an untagged DDP segment on QN 2 (opcode 7). After the DDP
//! header comes the Terminate Control word and, as its header-control bits
//! say, the terminated segment's length and headers:
//!
//! ```text
//! |Layer|EType| Error Code |M|D|R| Reserved (13) |   RFC 5040 layout
//! [DDP Segment Length (2)]     present when M or D is set
//! [Terminated DDP Header]      D: 14 or 18 octets, by its own T bit
//! [Terminated RDMA Header]     R: the rest (a Read Request's 28 octets)
//! ```
//!
//! This project's reading where the RFC text is not on these machines: the
//! DDP Segment Length field is present when M ("DDP Segment Length valid")
//! or D is set, because the terminated DDP header follows it. Wireshark
//! reads the field when D is set; siw and Intel's irdma always set M with
//! D. We always send M together with D.
//!
//! # Linux siw's encoding (siw captures)
//! siw fills the control word through a little-endian C bitfield
//! (`struct iwarp_terminate` in siw's `iwarp.h`), so on the wire its octet 0
//! is `etype << 4 | layer` and its M/D/R sit in bits 0/1/2 of octet 2:
//! `term_bad_read.pcap` frame 14 carries `10 00 07 00` for RDMAP / Remote
//! Protection / Invalid STag with M, D and R, and `term_bad_write.pcap`
//! frame 14 carries `11 00 03 00` for DDP / Tagged Buffer / Invalid STag with
//! M and D. Two more siw habits, seen in the same frames: its DDP Segment
//! Length is the terminated segment's *payload* length (64 for a 64-octet
//! Write, 0 for a Read Request), not the ULPDU length; and for an error on a
//! Read Request it found while building the response, the echoed Read
//! Request's MSN holds the read size (64) instead of the MSN (2).
//!
//! We send RFC 5040's layout ([`Encoding::Rfc5040`]) unless a connection
//! asks for siw's (`Connection::terminate_layout`), and read a peer's
//! Terminate with [`detect`], which scores both readings against the
//! registry and the message length and reports when both are plausible.

use super::macros::enum_with_unknown;
use super::{be, ddp, Error, Field, Result};

mod field {
    use super::Field;

    pub(crate) const CONTROL: Field = 0..4;
    pub(crate) const DDP_SEGMENT_LENGTH: Field = 4..6;

    // RFC 5040 layout.
    pub(crate) const RFC_FLAG_M: u8 = 0x80;
    pub(crate) const RFC_FLAG_D: u8 = 0x40;
    pub(crate) const RFC_FLAG_R: u8 = 0x20;
    pub(crate) const RFC_RESERVED_HIGH: u8 = 0x1F;

    // siw's little-endian bitfield layout.
    pub(crate) const SIW_FLAG_M: u8 = 0x01;
    pub(crate) const SIW_FLAG_D: u8 = 0x02;
    pub(crate) const SIW_FLAG_R: u8 = 0x04;
    pub(crate) const SIW_RESERVED_SHIFT: u32 = 3;
}

/// Length of the Terminate Control word.
pub const CONTROL_LEN: usize = field::CONTROL.end;
/// Length of the DDP Segment Length field.
pub const SEGMENT_LENGTH_LEN: usize = 2;
/// The reserved part of the control word is 13 bits.
pub const RESERVED_MAX: u16 = 0x1FFF;

const _: () = assert!(CONTROL_LEN == 4);
const _: () = assert!(field::DDP_SEGMENT_LENGTH.end == CONTROL_LEN + SEGMENT_LENGTH_LEN);

enum_with_unknown! {
    /// The layer that detected the error.
    pub enum Layer(u8) {
        /// RDMAP (RFC 5040).
        Rdmap = 0,
        /// DDP (RFC 5041).
        Ddp = 1,
        /// The lower layer protocol: MPA (RFC 5044) or SCTP (RFC 5043).
        Llp = 2,
    }
}

/// How the control word's bits are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// RFC 5040 §4.8: octet 0 is `layer << 4 | etype`, M/D/R are bits 7/6/5
    /// of octet 2. What dpwarp sends.
    Rfc5040,
    /// Linux siw: octet 0 is `etype << 4 | layer`, M/D/R are bits 0/1/2 of
    /// octet 2 (a little-endian C bitfield).
    SiwBitfield,
}

/// The Terminate Control word, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlWord {
    /// Layer (4 bits).
    pub layer: u8,
    /// Error Type (4 bits).
    pub etype: u8,
    /// Error Code.
    pub ecode: u8,
    /// M: DDP Segment Length valid.
    pub m: bool,
    /// D: terminated DDP header included.
    pub d: bool,
    /// R: terminated RDMA header included.
    pub r: bool,
    /// The 13 reserved bits.
    pub reserved: u16,
}

impl ControlWord {
    /// Reads the four control octets in the given layout.
    pub fn decode(octets: [u8; 4], encoding: Encoding) -> ControlWord {
        let [b0, b1, b2, b3] = octets;
        match encoding {
            Encoding::Rfc5040 => ControlWord {
                layer: b0 >> 4,
                etype: b0 & 0x0F,
                ecode: b1,
                m: b2 & field::RFC_FLAG_M != 0,
                d: b2 & field::RFC_FLAG_D != 0,
                r: b2 & field::RFC_FLAG_R != 0,
                reserved: u16::from(b2 & field::RFC_RESERVED_HIGH) << 8 | u16::from(b3),
            },
            Encoding::SiwBitfield => ControlWord {
                layer: b0 & 0x0F,
                etype: b0 >> 4,
                ecode: b1,
                m: b2 & field::SIW_FLAG_M != 0,
                d: b2 & field::SIW_FLAG_D != 0,
                r: b2 & field::SIW_FLAG_R != 0,
                reserved: u16::from(b2 >> field::SIW_RESERVED_SHIFT) | u16::from(b3) << 5,
            },
        }
    }

    /// Writes the control word in the given layout.
    ///
    /// # Panics
    /// If layer or etype exceed 4 bits or reserved exceeds 13 bits.
    pub fn encode(&self, encoding: Encoding) -> [u8; 4] {
        assert!(
            self.layer <= 0x0F && self.etype <= 0x0F,
            "layer and etype are 4 bits"
        );
        assert!(
            self.reserved <= RESERVED_MAX,
            "the reserved field is 13 bits"
        );
        let bit = |set: bool, mask: u8| if set { mask } else { 0 };
        match encoding {
            Encoding::Rfc5040 => [
                self.layer << 4 | self.etype,
                self.ecode,
                bit(self.m, field::RFC_FLAG_M)
                    | bit(self.d, field::RFC_FLAG_D)
                    | bit(self.r, field::RFC_FLAG_R)
                    | (self.reserved >> 8) as u8,
                self.reserved as u8,
            ],
            Encoding::SiwBitfield => [
                self.etype << 4 | self.layer,
                self.ecode,
                bit(self.m, field::SIW_FLAG_M)
                    | bit(self.d, field::SIW_FLAG_D)
                    | bit(self.r, field::SIW_FLAG_R)
                    | ((self.reserved & 0x1F) as u8) << field::SIW_RESERVED_SHIFT,
                (self.reserved >> 5) as u8,
            ],
        }
    }

    /// The registry's name for this layer/type/code, if it has one.
    pub fn describe(&self) -> Option<&'static str> {
        describe(self.layer, self.etype, self.ecode)
    }
}

/// A read/write view of a Terminate header (the DDP payload of a Terminate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer that holds at least the control word.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the control word is there. How much follows depends on
    /// the encoding; [`Repr::parse`] checks that.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < CONTROL_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The four control octets.
    pub fn control_octets(&self) -> [u8; 4] {
        let b = &self.buffer.as_ref()[field::CONTROL];
        [b[0], b[1], b[2], b[3]]
    }

    /// The control word read in the given layout.
    pub fn control(&self, encoding: Encoding) -> ControlWord {
        ControlWord::decode(self.control_octets(), encoding)
    }

    /// Everything after the control word.
    pub fn rest(&self) -> &[u8] {
        &self.buffer.as_ref()[CONTROL_LEN..]
    }
}

/// The outcome of [`detect`]: which layout a received Terminate most
/// plausibly uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detection {
    /// The better-scoring layout (RFC 5040 on a tie).
    pub encoding: Encoding,
    /// Both layouts parse, score the same and read differently: report both.
    pub ambiguous: bool,
}

/// Scores both layouts of a received Terminate header: a registered
/// layer/type/code, header-control bits that explain the message length
/// exactly, and zero reserved bits each count.
pub fn detect<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Detection> {
    packet.check_len()?;
    let rfc = score(packet, Encoding::Rfc5040);
    let siw = score(packet, Encoding::SiwBitfield);
    let differ = packet.control(Encoding::Rfc5040) != packet.control(Encoding::SiwBitfield);
    let encoding = if siw > rfc {
        Encoding::SiwBitfield
    } else {
        Encoding::Rfc5040
    };
    Ok(Detection {
        encoding,
        ambiguous: differ && rfc == siw,
    })
}

fn score<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>, encoding: Encoding) -> u8 {
    let control = packet.control(encoding);
    let mut score = 0;
    if control.describe().is_some() {
        score += 2;
    }
    if Repr::parse(packet, encoding).is_ok() {
        score += 2;
    }
    if control.reserved == 0 {
        score += 1;
    }
    score
}

/// A Terminate header.
///
/// When neither M nor D is set the DDP Segment Length field is absent, and
/// `parse` leaves `ddp_segment_length` at 0; `emit` ignores it then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The layout the control word was read in or is written in.
    pub encoding: Encoding,
    /// Layer (4 bits).
    pub layer: Layer,
    /// Error Type (4 bits).
    pub etype: u8,
    /// Error Code.
    pub ecode: u8,
    /// The 13 reserved bits, kept verbatim.
    pub reserved: u16,
    /// M: the DDP Segment Length is valid.
    pub segment_length_valid: bool,
    /// DDP Segment Length (see the type's docs for when it is on the wire).
    pub ddp_segment_length: u16,
    /// D: the terminated DDP header (14 or 18 octets, by its T bit).
    pub ddp_header: Option<&'a [u8]>,
    /// R: the terminated RDMA header (everything after the DDP header).
    pub rdma_header: Option<&'a [u8]>,
}

impl<'a> Repr<'a> {
    /// Parses a Terminate header in the given layout. It is an error if the
    /// header-control bits do not account for every octet.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        encoding: Encoding,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        let control = packet.control(encoding);
        let mut rest = &packet.buffer.as_ref()[CONTROL_LEN..];
        let mut ddp_segment_length = 0;
        if control.m || control.d {
            let (length, tail) = rest.split_at_checked(SEGMENT_LENGTH_LEN).ok_or(Error)?;
            ddp_segment_length = be::u16(length);
            rest = tail;
        }
        let ddp_header = if control.d {
            let first = *rest.first().ok_or(Error)?;
            let len = ddp_header_len(first);
            let (header, tail) = rest.split_at_checked(len).ok_or(Error)?;
            rest = tail;
            Some(header)
        } else {
            None
        };
        let rdma_header = match (control.r, rest.is_empty()) {
            (true, false) => Some(rest),
            (false, true) => None,
            _ => return Err(Error),
        };
        Ok(Repr {
            encoding,
            layer: Layer::from(control.layer),
            etype: control.etype,
            ecode: control.ecode,
            reserved: control.reserved,
            segment_length_valid: control.m,
            ddp_segment_length,
            ddp_header,
            rdma_header,
        })
    }

    /// The control word this header carries.
    pub fn control(&self) -> ControlWord {
        ControlWord {
            layer: u8::from(self.layer),
            etype: self.etype,
            ecode: self.ecode,
            m: self.segment_length_valid,
            d: self.ddp_header.is_some(),
            r: self.rdma_header.is_some(),
            reserved: self.reserved,
        }
    }

    fn has_segment_length(&self) -> bool {
        self.segment_length_valid || self.ddp_header.is_some()
    }

    /// Octets [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        let length = if self.has_segment_length() {
            SEGMENT_LENGTH_LEN
        } else {
            0
        };
        CONTROL_LEN
            + length
            + self.ddp_header.map_or(0, <[u8]>::len)
            + self.rdma_header.map_or(0, <[u8]>::len)
    }

    /// Writes the Terminate header.
    ///
    /// # Panics
    /// If the buffer is shorter than [`Repr::buffer_len`], a field is too
    /// wide, or the DDP header's length disagrees with its T bit.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        let buffer = packet.buffer.as_mut();
        buffer[field::CONTROL].copy_from_slice(&self.control().encode(self.encoding));
        let mut at = CONTROL_LEN;
        if self.has_segment_length() {
            be::put_u16(&mut buffer[at..], self.ddp_segment_length);
            at += SEGMENT_LENGTH_LEN;
        }
        if let Some(header) = self.ddp_header {
            assert!(
                header
                    .first()
                    .is_some_and(|&c| ddp_header_len(c) == header.len()),
                "a terminated DDP header is 14 (tagged) or 18 (untagged) octets"
            );
            buffer[at..at + header.len()].copy_from_slice(header);
            at += header.len();
        }
        if let Some(header) = self.rdma_header {
            assert!(!header.is_empty(), "R set with an empty RDMA header");
            buffer[at..at + header.len()].copy_from_slice(header);
        }
    }
}

fn ddp_header_len(control: u8) -> usize {
    if ddp::Packet::new_unchecked([control]).tagged() {
        ddp::TAGGED_HEADER_LEN
    } else {
        ddp::UNTAGGED_HEADER_LEN
    }
}

/// One entry of the Terminate registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registered {
    /// Layer.
    pub layer: u8,
    /// Error Type.
    pub etype: u8,
    /// Error Code, or `None` where the registry says "ALL".
    pub ecode: Option<u8>,
    /// The registry's description.
    pub name: &'static str,
}

macro_rules! registry {
    ($( ($layer:expr, $etype:expr, $ecode:expr, $name:expr) ),* $(,)?) => {
        /// Every layer/type/code the IANA "RDDP" registry (RFC 6580) lists,
        /// with RFC 6581 §8's three MPA codes.
        pub const REGISTRY: &[Registered] = &[
            $( Registered { layer: $layer, etype: $etype, ecode: $ecode, name: $name } ),*
        ];
    };
}

registry! {
    (0, 0, None, "RDMAP / Local Catastrophic Error"),
    (0, 1, Some(0x00), "RDMAP / Remote Protection Error / Invalid STag"),
    (0, 1, Some(0x01), "RDMAP / Remote Protection Error / Base or bounds violation"),
    (0, 1, Some(0x02), "RDMAP / Remote Protection Error / Access rights violation"),
    (0, 1, Some(0x03), "RDMAP / Remote Protection Error / STag not associated with RDMAP Stream"),
    (0, 1, Some(0x04), "RDMAP / Remote Protection Error / TO wrap"),
    (0, 1, Some(0x09), "RDMAP / Remote Protection Error / STag cannot be invalidated"),
    (0, 1, Some(0xFF), "RDMAP / Remote Protection Error / Unspecified error"),
    (0, 2, Some(0x05), "RDMAP / Remote Operation Error / Invalid RDMAP version"),
    (0, 2, Some(0x06), "RDMAP / Remote Operation Error / Unexpected OpCode"),
    (0, 2, Some(0x07), "RDMAP / Remote Operation Error / Catastrophic error, localized to RDMAP Stream"),
    (0, 2, Some(0x08), "RDMAP / Remote Operation Error / Catastrophic error, global"),
    (0, 2, Some(0x09), "RDMAP / Remote Operation Error / STag cannot be invalidated"),
    (0, 2, Some(0xFF), "RDMAP / Remote Operation Error / Unspecified error"),
    (1, 0, None, "DDP / Local Catastrophic Error"),
    (1, 1, Some(0x00), "DDP / Tagged Buffer Error / Invalid STag"),
    (1, 1, Some(0x01), "DDP / Tagged Buffer Error / Base or bounds violation"),
    (1, 1, Some(0x02), "DDP / Tagged Buffer Error / STag not associated with DDP Stream"),
    (1, 1, Some(0x03), "DDP / Tagged Buffer Error / TO wrap"),
    (1, 1, Some(0x04), "DDP / Tagged Buffer Error / Invalid DDP version"),
    (1, 2, Some(0x01), "DDP / Untagged Buffer Error / Invalid QN"),
    (1, 2, Some(0x02), "DDP / Untagged Buffer Error / Invalid MSN - no buffer available"),
    (1, 2, Some(0x03), "DDP / Untagged Buffer Error / Invalid MSN - MSN range is not valid"),
    (1, 2, Some(0x04), "DDP / Untagged Buffer Error / Invalid MO"),
    (1, 2, Some(0x05), "DDP / Untagged Buffer Error / DDP Message too long for available buffer"),
    (1, 2, Some(0x06), "DDP / Untagged Buffer Error / Invalid DDP version"),
    (1, 3, None, "DDP / Reserved for the use by the LLP"),
    (2, 0, Some(0x01), "LLP / MPA Error / TCP connection closed, terminated or lost"),
    (2, 0, Some(0x02), "LLP / MPA Error / MPA CRC Error"),
    (2, 0, Some(0x03), "LLP / MPA Error / MPA Marker and ULPDU Length field mismatch"),
    (2, 0, Some(0x04), "LLP / MPA Error / Invalid MPA Request or MPA Reply Frame"),
    (2, 0, Some(0x05), "LLP / MPA Error / Local catastrophic error"),
    (2, 0, Some(0x06), "LLP / MPA Error / Insufficient IRD resources"),
    (2, 0, Some(0x07), "LLP / MPA Error / No matching RTR option"),
}

/// The registry's description of a layer/type/code, if registered.
pub fn describe(layer: u8, etype: u8, ecode: u8) -> Option<&'static str> {
    REGISTRY
        .iter()
        .find(|r| r.layer == layer && r.etype == etype && r.ecode.is_none_or(|c| c == ecode))
        .map(|r| r.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `term_bad_write.pcap` frame 14, the DDP payload of siw's Terminate:
    /// DDP / Tagged Buffer / Invalid STag, M and D, the failed Write's header.
    static SIW_TERM_BAD_WRITE: [u8; 20] = [
        0x11, 0x00, 0x03, 0x00, 0x00, 0x40, 0xc1, 0x40, 0x95, 0x0c, 0x0c, 0x00, 0x00, 0x00, 0x7f,
        0x8e, 0xa5, 0xd5, 0xb0, 0x10,
    ];
    /// `term_bad_read.pcap` frame 14: RDMAP / Remote Protection / Invalid
    /// STag with M, D, R and the failed Read Request's DDP and RDMAP headers.
    static SIW_TERM_BAD_READ: [u8; 52] = [
        0x10, 0x00, 0x07, 0x00, 0x00, 0x00, 0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x45, 0x9f, 0x31, 0x00, 0x00, 0x00,
        0x56, 0x2d, 0x61, 0xda, 0x0f, 0x80, 0x00, 0x00, 0x00, 0x40, 0xac, 0xe7, 0x97, 0x00, 0x00,
        0x00, 0x7f, 0xf0, 0xe1, 0xc9, 0x10, 0x10,
    ];

    #[test]
    fn test_siw_bad_write() {
        let packet = Packet::new_checked(&SIW_TERM_BAD_WRITE[..]).unwrap();
        let detection = detect(&packet).unwrap();
        assert_eq!(
            detection,
            Detection {
                encoding: Encoding::SiwBitfield,
                ambiguous: false
            }
        );
        let repr = Repr::parse(&packet, Encoding::SiwBitfield).unwrap();
        assert_eq!((repr.layer, repr.etype, repr.ecode), (Layer::Ddp, 1, 0));
        assert!(repr.segment_length_valid);
        assert_eq!(
            repr.ddp_segment_length, 64,
            "siw reports the payload length"
        );
        assert_eq!(repr.ddp_header.map(<[u8]>::len), Some(14));
        assert_eq!(repr.rdma_header, None);
        assert_eq!(
            repr.control().describe(),
            Some("DDP / Tagged Buffer Error / Invalid STag")
        );
        // The RFC reading cannot explain the 16 octets after the control word.
        assert_eq!(Repr::parse(&packet, Encoding::Rfc5040), Err(Error));
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &SIW_TERM_BAD_WRITE[..]);
    }

    #[test]
    fn test_siw_bad_read() {
        let packet = Packet::new_checked(&SIW_TERM_BAD_READ[..]).unwrap();
        assert_eq!(detect(&packet).unwrap().encoding, Encoding::SiwBitfield);
        let repr = Repr::parse(&packet, Encoding::SiwBitfield).unwrap();
        assert_eq!((repr.layer, repr.etype, repr.ecode), (Layer::Rdmap, 1, 0));
        assert_eq!(repr.ddp_segment_length, 0);
        let ddp_header = ddp::Packet::new_checked(repr.ddp_header.unwrap()).unwrap();
        assert_eq!(
            (ddp_header.qn(), ddp_header.msn()),
            (1, 0x40),
            "siw puts the size in MSN"
        );
        assert_eq!(repr.rdma_header.map(<[u8]>::len), Some(28));
        // Re-encoded in RFC 5040's layout, it reads back the same.
        let rfc = Repr {
            encoding: Encoding::Rfc5040,
            ..repr
        };
        let mut out = vec![0u8; rfc.buffer_len()];
        rfc.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..4], &[0x01, 0x00, 0xe0, 0x00]);
        let packet = Packet::new_checked(&out[..]).unwrap();
        assert_eq!(detect(&packet).unwrap().encoding, Encoding::Rfc5040);
        assert_eq!(Repr::parse(&packet, Encoding::Rfc5040).unwrap(), rfc);
    }

    #[test]
    fn test_llp_terms_detected_both_ways() {
        // An MPA CRC error with no headers: 2/0/2 in each layout.
        let rfc = [0x20, 0x02, 0x00, 0x00];
        let siw = [0x02, 0x02, 0x00, 0x00];
        let d = detect(&Packet::new_checked(&rfc[..]).unwrap()).unwrap();
        assert_eq!(
            d,
            Detection {
                encoding: Encoding::Rfc5040,
                ambiguous: false
            }
        );
        let d = detect(&Packet::new_checked(&siw[..]).unwrap()).unwrap();
        assert_eq!(
            d,
            Detection {
                encoding: Encoding::SiwBitfield,
                ambiguous: false
            }
        );
        // Same nibbles both ways: no ambiguity to report.
        let same = [0x00, 0x00, 0x00, 0x00];
        assert!(
            !detect(&Packet::new_checked(&same[..]).unwrap())
                .unwrap()
                .ambiguous
        );
    }

    #[test]
    fn test_ambiguous_is_reported() {
        // 0x02/0x06: RFC 5040 reads RDMAP / Remote Operation / Unexpected
        // OpCode; siw's layout reads LLP / MPA / Insufficient IRD. Both are
        // registered and neither carries headers.
        let octets = [0x02, 0x06, 0x00, 0x00];
        let d = detect(&Packet::new_checked(&octets[..]).unwrap()).unwrap();
        assert_eq!(
            d,
            Detection {
                encoding: Encoding::Rfc5040,
                ambiguous: true
            }
        );
    }

    #[test]
    fn test_control_word_round_trip() {
        for encoding in [Encoding::Rfc5040, Encoding::SiwBitfield] {
            for octets in [[0xff, 0xff, 0xff, 0xff], [0x12, 0x34, 0x56, 0x78], [0; 4]] {
                let word = ControlWord::decode(octets, encoding);
                assert_eq!(word.encode(encoding), octets);
            }
        }
    }

    #[test]
    fn test_header_bits_must_account_for_every_octet() {
        // M without D: length only.
        assert!(Repr::parse(
            &Packet::new_unchecked(&[0x20, 2, 0x80, 0, 0, 9][..]),
            Encoding::Rfc5040
        )
        .is_ok());
        // Trailing octets with no R bit.
        assert_eq!(
            Repr::parse(
                &Packet::new_unchecked(&[0x20, 2, 0, 0, 1][..]),
                Encoding::Rfc5040
            ),
            Err(Error)
        );
        // R with nothing after.
        assert_eq!(
            Repr::parse(
                &Packet::new_unchecked(&[0x20, 2, 0x20, 0][..]),
                Encoding::Rfc5040
            ),
            Err(Error)
        );
        // D with a truncated DDP header.
        let mut short = vec![0x11, 0, 0xc0, 0, 0, 0, 0xc1];
        short.extend_from_slice(&[0; 12]);
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&short[..]), Encoding::Rfc5040),
            Err(Error)
        );
        short.push(0);
        assert!(Repr::parse(&Packet::new_unchecked(&short[..]), Encoding::Rfc5040).is_ok());
    }

    #[test]
    fn test_registry_is_consistent() {
        assert_eq!(
            describe(2, 0, 6),
            Some("LLP / MPA Error / Insufficient IRD resources")
        );
        assert_eq!(
            describe(0, 0, 0x42),
            Some("RDMAP / Local Catastrophic Error")
        );
        assert_eq!(describe(0, 2, 0x00), None);
        for (i, a) in REGISTRY.iter().enumerate() {
            for b in &REGISTRY[i + 1..] {
                assert!(
                    (a.layer, a.etype, a.ecode) != (b.layer, b.etype, b.ecode),
                    "duplicate entry {a:?}"
                );
            }
            let layer = match Layer::from(a.layer) {
                Layer::Rdmap => "RDMAP",
                Layer::Ddp => "DDP",
                Layer::Llp => "LLP",
                Layer::Unknown(_) => panic!("unknown layer in the registry"),
            };
            assert!(a.name.starts_with(layer), "{a:?}");
        }
    }
}
