//! DDP segment headers (RFC 5041 §4).
//!
//! ```text
//! byte 0 (DDP control)  |T|L| Rsvd  | DV|   T 0x80 tagged, L 0x40 last,
//!                                          0x3C reserved, DV 0x03 version
//! byte 1 (RsvdULP)      the RDMAP control octet (see `rdmap`)
//! tagged,   14 octets:  control(2) | STag(4) | TO(8)
//! untagged, 18 octets:  control(2) | RsvdULP(4) | QN(4) | MSN(4) | MO(4)
//! ```
//!
//! RDMAP puts the Invalidate STag of a Send with Invalidate into the
//! untagged 32-bit RsvdULP field.
//!
//! siw capture facts: DV is 1 on every segment; multi-segment messages set
//! L only on the last segment, and MO advances by the payload of each
//! untagged segment (`iwprobe_ops.pcap`, 8 KiB Send: 1424 octets per
//! segment with MSS 1448); MSN starts at 1 on each queue.
//!
//! `Repr::parse` keeps the version and the reserved bits: a segment with
//! DV other than 1 is well-formed here, and the engine answers it with the
//! DDP "invalid version" Terminate of the right buffer model.

use super::{be, Error, Field, Rest, Result};

mod field {
    use super::{Field, Rest};

    pub(crate) const CONTROL: usize = 0;
    pub(crate) const RSVD_ULP: usize = 1;

    pub(crate) const STAG: Field = 2..6;
    pub(crate) const TO: Field = 6..14;
    pub(crate) const TAGGED_PAYLOAD: Rest = 14..;

    pub(crate) const RSVD_ULP_WORD: Field = 2..6;
    pub(crate) const QN: Field = 6..10;
    pub(crate) const MSN: Field = 10..14;
    pub(crate) const MO: Field = 14..18;
    pub(crate) const UNTAGGED_PAYLOAD: Rest = 18..;

    pub(crate) const FLAG_T: u8 = 0x80;
    pub(crate) const FLAG_L: u8 = 0x40;
    pub(crate) const RESERVED_MASK: u8 = 0x3C;
    pub(crate) const RESERVED_SHIFT: u32 = 2;
    pub(crate) const VERSION_MASK: u8 = 0x03;
}

/// Length of the tagged buffer model header.
pub const TAGGED_HEADER_LEN: usize = field::TAGGED_PAYLOAD.start;
/// Length of the untagged buffer model header.
pub const UNTAGGED_HEADER_LEN: usize = field::UNTAGGED_PAYLOAD.start;
/// Length of the control octets every DDP segment begins with.
pub const CONTROL_LEN: usize = 2;
/// DDP version of RFC 5041.
pub const VERSION: u8 = 1;

const _: () = assert!(TAGGED_HEADER_LEN == 14);
const _: () = assert!(UNTAGGED_HEADER_LEN == 18);

/// Untagged queue numbers RDMAP uses (RFC 5040, RFC 7306).
pub mod qn {
    /// Send, Send with Invalidate/SE, Immediate Data.
    pub const SEND: u32 = 0;
    /// RDMA Read Request and Atomic Request.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
    /// Atomic Response (RFC 7306).
    pub const ATOMIC_RESPONSE: u32 = 3;
}

/// A read/write view of a DDP segment (header and payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that the header its T bit calls for fits.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the control octets and then the tagged or untagged header.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < CONTROL_LEN || len < self.header_len() {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The DDP control octet, unparsed.
    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[field::CONTROL]
    }

    /// T: tagged buffer model.
    pub fn tagged(&self) -> bool {
        self.control() & field::FLAG_T != 0
    }

    /// L: last segment of the DDP message.
    pub fn last(&self) -> bool {
        self.control() & field::FLAG_L != 0
    }

    /// The four reserved bits of the control octet.
    pub fn reserved(&self) -> u8 {
        (self.control() & field::RESERVED_MASK) >> field::RESERVED_SHIFT
    }

    /// DV: DDP version.
    pub fn version(&self) -> u8 {
        self.control() & field::VERSION_MASK
    }

    /// The 8-bit RsvdULP field (RDMAP's control octet).
    pub fn rsvd_ulp(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD_ULP]
    }

    /// Octets of header this segment's buffer model uses.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// Tagged: the Data Sink STag.
    pub fn stag(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::STAG])
    }

    /// Tagged: the Data Sink Tagged Offset.
    pub fn tagged_offset(&self) -> u64 {
        be::u64(&self.buffer.as_ref()[field::TO])
    }

    /// Untagged: the 32-bit RsvdULP field (the Invalidate STag for RDMAP).
    pub fn rsvd_ulp_word(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::RSVD_ULP_WORD])
    }

    /// Untagged: Queue Number.
    pub fn qn(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::QN])
    }

    /// Untagged: Message Sequence Number.
    pub fn msn(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::MSN])
    }

    /// Untagged: Message Offset.
    pub fn mo(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::MO])
    }

    /// The segment's payload: everything after the DDP header (for RDMAP,
    /// its own header and then the ULP payload).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the DDP control octet.
    pub fn set_control(&mut self, value: u8) {
        self.buffer.as_mut()[field::CONTROL] = value;
    }

    /// Writes the 8-bit RsvdULP field.
    pub fn set_rsvd_ulp(&mut self, value: u8) {
        self.buffer.as_mut()[field::RSVD_ULP] = value;
    }

    /// Tagged: writes the STag.
    pub fn set_stag(&mut self, value: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::STAG], value);
    }

    /// Tagged: writes the Tagged Offset.
    pub fn set_tagged_offset(&mut self, value: u64) {
        be::put_u64(&mut self.buffer.as_mut()[field::TO], value);
    }

    /// Untagged: writes the 32-bit RsvdULP field.
    pub fn set_rsvd_ulp_word(&mut self, value: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::RSVD_ULP_WORD], value);
    }

    /// Untagged: writes QN.
    pub fn set_qn(&mut self, value: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::QN], value);
    }

    /// Untagged: writes MSN.
    pub fn set_msn(&mut self, value: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::MSN], value);
    }

    /// Untagged: writes MO.
    pub fn set_mo(&mut self, value: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::MO], value);
    }

    /// The payload, for writing.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

/// The buffer model of a segment and its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// Tagged: placed at `to` within the buffer named by `stag`.
    Tagged {
        /// Data Sink STag.
        stag: u32,
        /// Data Sink Tagged Offset.
        to: u64,
    },
    /// Untagged: the `mo`-th octet onward of message `msn` on queue `qn`.
    Untagged {
        /// The 32-bit RsvdULP field (RDMAP: Invalidate STag, else 0).
        rsvd_ulp: u32,
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number.
        msn: u32,
        /// Message Offset.
        mo: u32,
    },
}

/// A DDP segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// L: last segment of the message.
    pub last: bool,
    /// The four reserved control bits, kept verbatim.
    pub reserved: u8,
    /// DV, kept verbatim (1 for RFC 5041; the engine checks it).
    pub version: u8,
    /// The 8-bit RsvdULP field: RDMAP's control octet.
    pub rsvd_ulp: u8,
    /// Buffer model and its fields.
    pub buffer: Buffer,
}

impl Repr {
    /// Parses the header of a DDP segment.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        let buffer = if packet.tagged() {
            Buffer::Tagged {
                stag: packet.stag(),
                to: packet.tagged_offset(),
            }
        } else {
            Buffer::Untagged {
                rsvd_ulp: packet.rsvd_ulp_word(),
                qn: packet.qn(),
                msn: packet.msn(),
                mo: packet.mo(),
            }
        };
        Ok(Repr {
            last: packet.last(),
            reserved: packet.reserved(),
            version: packet.version(),
            rsvd_ulp: packet.rsvd_ulp(),
            buffer,
        })
    }

    /// Whether the segment uses the tagged buffer model.
    pub fn tagged(&self) -> bool {
        matches!(self.buffer, Buffer::Tagged { .. })
    }

    /// Octets of header [`Repr::emit`] writes.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// The DDP control octet.
    pub fn control(&self) -> u8 {
        let mut control = (self.reserved << field::RESERVED_SHIFT) & field::RESERVED_MASK;
        control |= self.version & field::VERSION_MASK;
        if self.tagged() {
            control |= field::FLAG_T;
        }
        if self.last {
            control |= field::FLAG_L;
        }
        control
    }

    /// The header's octets as [`emit`](Repr::emit) writes them, four to a
    /// word (octet `4i + j` in bits `8j..8j + 8` of word `i`), and how many:
    /// 14 tagged, 18 untagged. Made in registers, for a framer that puts
    /// them in place without reading back octets just stored.
    #[inline]
    pub fn words(&self) -> ([u32; 5], usize) {
        let head = u128::from(self.control()) | u128::from(self.rsvd_ulp) << 8;
        let (octets, tail, len) = match self.buffer {
            Buffer::Tagged { stag, to } => (
                head | u128::from(stag.swap_bytes()) << 16 | u128::from(to.swap_bytes()) << 48,
                0,
                TAGGED_HEADER_LEN,
            ),
            Buffer::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                let mo = mo.swap_bytes();
                (
                    head | u128::from(rsvd_ulp.swap_bytes()) << 16
                        | u128::from(qn.swap_bytes()) << 48
                        | u128::from(msn.swap_bytes()) << 80
                        | u128::from(mo) << 112,
                    mo >> 16,
                    UNTAGGED_HEADER_LEN,
                )
            }
        };
        let word = |i: u32| (octets >> (32 * i)) as u32;
        ([word(0), word(1), word(2), word(3), tail], len)
    }

    /// Writes the header (the payload is the caller's).
    ///
    /// # Panics
    /// If the reserved bits or the version do not fit their fields, or the
    /// buffer is shorter than [`Repr::header_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        assert!(self.reserved <= 0x0F, "DDP reserved bits are 4 bits");
        assert!(self.version <= field::VERSION_MASK, "DDP version is 2 bits");
        packet.set_control(self.control());
        packet.set_rsvd_ulp(self.rsvd_ulp);
        match self.buffer {
            Buffer::Tagged { stag, to } => {
                packet.set_stag(stag);
                packet.set_tagged_offset(to);
            }
            Buffer::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                packet.set_rsvd_ulp_word(rsvd_ulp);
                packet.set_qn(qn);
                packet.set_msn(msn);
                packet.set_mo(mo);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `words` holds the octets `emit` writes, tagged and untagged.
    #[test]
    fn words_are_the_emitted_octets() {
        let reprs = [
            Repr {
                last: true,
                reserved: 0x5,
                version: 1,
                rsvd_ulp: 0x42,
                buffer: Buffer::Tagged {
                    stag: 0x05ba_fb00,
                    to: 0x0102_0304_0506_0708,
                },
            },
            Repr {
                last: false,
                reserved: 0,
                version: 1,
                rsvd_ulp: 0x41,
                buffer: Buffer::Untagged {
                    rsvd_ulp: 0xa1a2_a3a4,
                    qn: 0xb1b2_b3b4,
                    msn: 0xc1c2_c3c4,
                    mo: 0xd1d2_d3d4,
                },
            },
        ];
        for repr in reprs {
            let mut octets = [0u8; UNTAGGED_HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut octets[..]));
            let (words, len) = repr.words();
            assert_eq!(len, repr.header_len());
            let from_words: Vec<u8> = (0..20)
                .map(|i| (words[i / 4] >> (8 * (i % 4))) as u8)
                .collect();
            assert_eq!(&from_words[..len], &octets[..len], "{repr:?}");
            assert!(from_words[len..].iter().all(|&o| o == 0), "{repr:?}");
        }
    }

    /// `rping_v2_crc.pcap` frame 10: a tagged Read Response ULPDU
    /// (header and the first payload octets).
    static SIW_READ_RESPONSE_HEAD: [u8; 18] = [
        0xc1, 0x42, 0x05, 0xba, 0xfb, 0x00, 0x00, 0x00, 0x55, 0x5b, 0x05, 0xeb, 0xe5, 0x50, 0x72,
        0x64, 0x6d, 0x61,
    ];
    /// `rping_v2_crc.pcap` frame 9: an untagged Read Request ULPDU header.
    static SIW_READ_REQUEST_HEAD: [u8; 18] = [
        0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00,
    ];

    #[test]
    fn test_deconstruct_tagged() {
        let packet = Packet::new_checked(&SIW_READ_RESPONSE_HEAD[..]).unwrap();
        assert!(packet.tagged());
        assert!(packet.last());
        assert_eq!(packet.version(), 1);
        assert_eq!(packet.reserved(), 0);
        assert_eq!(packet.rsvd_ulp(), 0x42);
        assert_eq!(packet.stag(), 0x05ba_fb00);
        assert_eq!(packet.tagged_offset(), 0x0000_555b_05eb_e550);
        assert_eq!(packet.payload(), b"rdma");
    }

    #[test]
    fn test_deconstruct_untagged() {
        let packet = Packet::new_checked(&SIW_READ_REQUEST_HEAD[..]).unwrap();
        assert!(!packet.tagged());
        assert!(packet.last());
        assert_eq!(packet.version(), 1);
        assert_eq!((packet.qn(), packet.msn(), packet.mo()), (1, 1, 0));
        assert_eq!(packet.rsvd_ulp_word(), 0);
        assert_eq!(packet.payload(), &[] as &[u8]);
    }

    #[test]
    fn test_round_trip_siw() {
        for bytes in [&SIW_READ_RESPONSE_HEAD[..14], &SIW_READ_REQUEST_HEAD[..]] {
            let repr = Repr::parse(&Packet::new_checked(bytes).unwrap()).unwrap();
            let mut out = vec![0u8; repr.header_len()];
            repr.emit(&mut Packet::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], bytes);
        }
    }

    #[test]
    fn test_reserved_and_version_round_trip() {
        let repr = Repr {
            last: false,
            reserved: 0x0A,
            version: 3,
            rsvd_ulp: 0xFF,
            buffer: Buffer::Untagged {
                rsvd_ulp: 0xdead_beef,
                qn: 7,
                msn: 9,
                mo: 11,
            },
        };
        let mut out = [0u8; UNTAGGED_HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[0], 0x28 | 0x03);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap(),
            repr
        );
    }

    #[test]
    fn test_impossible_len() {
        for len in 0..TAGGED_HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&SIW_READ_RESPONSE_HEAD[..len]),
                Err(Error)
            );
        }
        for len in 0..UNTAGGED_HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&SIW_READ_REQUEST_HEAD[..len]),
                Err(Error)
            );
        }
    }
}
