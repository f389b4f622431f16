//! The MPA FPDU (RFC 5044 §4), markers removed.
//!
//! ```text
//! ULPDU_Length (2) | ULPDU (ULPDU_Length octets) | PAD (0..3) | CRC (4)
//! ```
//!
//! PAD (zero to three octets, sent as zeros, not checked on receipt) makes
//! `2 + ULPDU_Length + PAD` a multiple of four. The CRC field is always
//! present; when neither side asked for CRC it is not checked (siw then
//! sends zeros: `rping_v2.pcap`). Linux siw does not zero its PAD: all
//! twelve padded FPDUs of the captures (perftest's 2-octet Sends) carry
//! `00 40` there, covered by a correct CRC. A receiver must ignore PAD.
//!
//! This view is over a contiguous FPDU **without markers**. Markers
//! ([`super::mpa_marker`]) are counted in the CRC but not in ULPDU_Length, so a
//! deframer that strips them computes the CRC over the stream octets itself;
//! [`Packet::compute_crc`] is right only for FPDUs that had no marker inside.
//!
//! siw capture facts (`tools/pcap/tests/golden.rs` checks each): every
//! FPDU starts a TCP segment and no segment starts two FPDUs; with MSS 1448
//! the largest ULPDU is 1442 octets and a multi-segment message fills every
//! segment but its last. An FPDU almost always ends its segment too: the
//! exceptions are three Read Response FPDUs of the 8 KiB Read in
//! `iwprobe_ops.pcap` (frames 50-56), which siw's sendpage path sent as
//! 1444 octets and then the 4-octet CRC in a segment of its own. A receiver
//! must not assume the CRC arrives with its FPDU.

use super::{be, Error, Field, Rest, Result};
use crate::mpa::crc;

mod field {
    use super::{Field, Rest};

    pub(crate) const ULPDU_LENGTH: Field = 0..2;
    pub(crate) const ULPDU: Rest = 2..;
}

const _: () = assert!(field::ULPDU.start == field::ULPDU_LENGTH.end);

/// Length of the ULPDU_Length field.
pub const HEADER_LEN: usize = field::ULPDU_LENGTH.end;
/// Length of the CRC field.
pub const CRC_LEN: usize = 4;
/// The smallest FPDU: header, no ULPDU, two octets of PAD, CRC.
pub const FPDU_LEN_MIN: usize = fpdu_len(0);

const _: () = assert!(HEADER_LEN == 2);
const _: () = assert!(FPDU_LEN_MIN == 8);

/// Octets of PAD after a ULPDU of `ulpdu_len` octets.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (HEADER_LEN + ulpdu_len) % 4) % 4
}

/// Octets of a marker-free FPDU carrying `ulpdu_len` octets.
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    HEADER_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// A read/write view of a marker-free FPDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that the whole FPDU it announces fits.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds ULPDU_Length and then the ULPDU, PAD and
    /// CRC it announces. Octets after the FPDU are allowed (the next FPDU).
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.total_len() {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// ULPDU_Length.
    pub fn ulpdu_length(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::ULPDU_LENGTH])
    }

    /// Octets of PAD.
    pub fn pad_len(&self) -> usize {
        pad_len(usize::from(self.ulpdu_length()))
    }

    /// Octets the whole FPDU occupies, CRC included.
    pub fn total_len(&self) -> usize {
        fpdu_len(usize::from(self.ulpdu_length()))
    }

    /// The ULPDU: one DDP segment.
    pub fn ulpdu(&self) -> &[u8] {
        let end = HEADER_LEN + usize::from(self.ulpdu_length());
        &self.buffer.as_ref()[HEADER_LEN..end]
    }

    /// The PAD octets (the receiver ignores their value).
    pub fn pad(&self) -> &[u8] {
        let start = HEADER_LEN + usize::from(self.ulpdu_length());
        &self.buffer.as_ref()[start..start + self.pad_len()]
    }

    /// The four CRC octets as they are on the wire.
    pub fn crc_field(&self) -> [u8; 4] {
        let at = self.total_len() - CRC_LEN;
        let b = &self.buffer.as_ref()[at..at + CRC_LEN];
        [b[0], b[1], b[2], b[3]]
    }

    /// The CRC32c value the FPDU carries.
    pub fn crc(&self) -> u32 {
        crc::from_wire(self.crc_field())
    }

    /// The octets the CRC covers: everything before the CRC field.
    pub fn covered(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.total_len() - CRC_LEN]
    }

    /// CRC32c of [`Packet::covered`] (right only if the FPDU had no marker).
    pub fn compute_crc(&self) -> u32 {
        crc::crc32c(self.covered())
    }

    /// Whether the carried CRC matches; always true under `cfg(fuzzing)`.
    pub fn verify_crc(&self) -> bool {
        cfg!(fuzzing) || self.crc() == self.compute_crc()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes ULPDU_Length.
    pub fn set_ulpdu_length(&mut self, length: u16) {
        be::put_u16(&mut self.buffer.as_mut()[field::ULPDU_LENGTH], length);
    }

    /// The ULPDU, for writing (ULPDU_Length must be set first).
    pub fn ulpdu_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(self.ulpdu_length());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Zeroes the PAD, as RFC 5044 requires of a sender.
    pub fn clear_pad(&mut self) {
        let start = HEADER_LEN + usize::from(self.ulpdu_length());
        let end = start + self.pad_len();
        self.buffer.as_mut()[start..end].fill(0);
    }

    /// Writes a CRC value into the CRC field.
    pub fn set_crc(&mut self, value: u32) {
        let at = self.total_len() - CRC_LEN;
        self.buffer.as_mut()[at..at + CRC_LEN].copy_from_slice(&crc::to_wire(value));
    }

    /// Computes the CRC over the FPDU as written and stores it.
    pub fn fill_crc(&mut self) {
        let value = self.compute_crc();
        self.set_crc(value);
    }
}

/// A marker-free FPDU: the ULPDU it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// The DDP segment.
    pub ulpdu: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses an FPDU. With `check_crc` (CRC negotiated), a CRC mismatch is
    /// an error; without it the field is ignored (neither side set C in the
    /// startup frames).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        check_crc: bool,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if check_crc && !packet.verify_crc() {
            return Err(Error);
        }
        let end = HEADER_LEN + usize::from(packet.ulpdu_length());
        Ok(Repr {
            ulpdu: &packet.buffer.as_ref()[HEADER_LEN..end],
        })
    }

    /// Octets [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        fpdu_len(self.ulpdu.len())
    }

    /// Writes the FPDU: length, ULPDU, zero PAD, and the CRC (or four zero
    /// octets without CRC, as siw sends).
    ///
    /// # Panics
    /// If the ULPDU is longer than 65535 octets or the buffer is shorter
    /// than [`Repr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>, crc: bool) {
        let length = u16::try_from(self.ulpdu.len()).expect("ULPDU over 65535 octets");
        packet.set_ulpdu_length(length);
        packet.ulpdu_mut().copy_from_slice(self.ulpdu);
        packet.clear_pad();
        if crc {
            packet.fill_crc();
        } else {
            packet.set_crc(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rping_v2_p2p_write_rtr.pcap` frame 8: siw's zero-length RDMA Write
    /// RTR (STag 1, TO 0), CRC on: ULPDU 14 octets, PAD 0.
    static SIW_WRITE_RTR: [u8; 20] = [
        0x00, 0x0e, 0xc1, 0x40, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0xeb, 0xd3, 0x4c, 0x5f,
    ];
    /// `rping_v2.pcap` frame 8: a Send with CRC off (CRC field zero).
    static SIW_SEND_NO_CRC: [u8; 40] = [
        0x00, 0x22, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x56, 0x2a, 0xe9, 0x0b, 0x73, 0x70, 0x59, 0x54,
        0x6f, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn test_pad_lengths() {
        let want = [2, 1, 0, 3, 2, 1, 0, 3];
        for (ulpdu_len, pad) in want.iter().enumerate() {
            assert_eq!(pad_len(ulpdu_len), *pad, "ULPDU {ulpdu_len}");
            assert_eq!(fpdu_len(ulpdu_len) % 4, 0);
        }
        // siw's largest: MSS 1448 carries exactly one FPDU with ULPDU 1442.
        assert_eq!(fpdu_len(1442), 1448);
    }

    #[test]
    fn test_deconstruct_siw_rtr() {
        let packet = Packet::new_checked(&SIW_WRITE_RTR[..]).unwrap();
        assert_eq!(packet.ulpdu_length(), 14);
        assert_eq!(packet.pad_len(), 0);
        assert_eq!(packet.total_len(), 20);
        assert_eq!(packet.crc_field(), [0xeb, 0xd3, 0x4c, 0x5f]);
        assert!(packet.verify_crc());
        let repr = Repr::parse(&packet, true).unwrap();
        assert_eq!(repr.ulpdu, &SIW_WRITE_RTR[2..16]);
    }

    #[test]
    fn test_construct_matches_siw() {
        for (bytes, crc) in [(&SIW_WRITE_RTR[..], true), (&SIW_SEND_NO_CRC[..], false)] {
            let repr = Repr::parse(&Packet::new_checked(bytes).unwrap(), crc).unwrap();
            let mut out = vec![0xAAu8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut out[..]), crc);
            assert_eq!(&out[..], bytes);
        }
    }

    #[test]
    fn test_bad_crc() {
        let mut bytes = SIW_WRITE_RTR;
        bytes[10] ^= 0x01;
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert!(!packet.verify_crc());
        assert_eq!(Repr::parse(&packet, true), Err(Error));
        assert!(
            Repr::parse(&packet, false).is_ok(),
            "CRC off: the field is not checked"
        );
        // The CRC of the no-CRC capture is zero and must not verify.
        let packet = Packet::new_checked(&SIW_SEND_NO_CRC[..]).unwrap();
        assert_eq!(packet.crc(), 0);
        assert!(!packet.verify_crc());
    }

    #[test]
    fn test_impossible_len() {
        for len in 0..SIW_WRITE_RTR.len() {
            assert_eq!(
                Packet::new_checked(&SIW_WRITE_RTR[..len]),
                Err(Error),
                "len {len}"
            );
        }
        // ULPDU_Length larger than the buffer.
        assert_eq!(
            Packet::new_checked(&[0xff, 0xff, 0, 0, 0, 0, 0, 0][..]),
            Err(Error)
        );
    }

    #[test]
    fn test_next_fpdu_may_follow() {
        let mut two = SIW_WRITE_RTR.to_vec();
        two.extend_from_slice(&SIW_WRITE_RTR);
        let packet = Packet::new_checked(&two[..]).unwrap();
        assert_eq!(packet.total_len(), 20);
        assert!(packet.verify_crc());
    }
}
