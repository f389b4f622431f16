//! Atomic Request and Response headers (RFC 7306, draft-ietf-storm-rdmap-ext-00
//! §5.2).
//!
//! Both follow the untagged DDP header: the Request on QN 1 (sharing the
//! ORD/IRD credits of RDMA Read Requests, draft-ietf-storm-rdmap-ext-00 §5.2),
//! the Response on QN 3 (§5.2.2 item 3). draft-ietf-storm-rdmap-ext-00 §5.2.1, Figure 4:
//!
//! ```text
//! Reserved (28) | AOpCode (4)
//! Request Identifier (32)
//! Remote STag (32)
//! Remote Tagged Offset (64)
//! Add or Swap Data (64)
//! Add or Swap Mask (64)
//! Compare Data (64)
//! Compare Mask (64)
//! ```
//!
//! and Figure 6, the Response: Original Request Identifier (32), Original
//! Remote Data Value (64). "The fields are in big-endian format on the
//! wire" (§5.1.1).
//!
//! AOpCode (Figure 5): 0 FetchAdd, 1 Swap, 2 CmpSwap. RFC 7306, Wireshark
//! and the one software implementation treat 1 as reserved, so
//! [`RequestRepr::swap`] sends a Swap as CmpSwap with compare mask 0 and
//! swap mask all ones, which RFC 7306 peers execute as a swap; a received
//! AOpCode 1 is the seed's Swap.
//!
//! draft-ietf-storm-rdmap-ext-00's Figure 2 lists QN 1 for Immediate Data with SE and for the
//! Atomic Response, but its normative text says QN 0 (§6.3) and QN 3
//! (§5.2.2); the text wins here and in [`super::rdmap::Opcode::info`].
//!
//! Linux siw implements none of this (libsiw refuses atomics with EINVAL,
//! `iwprobe_ops.txt`), so these headers have no capture: the tests use
//! vectors built from the figures, cross-checked with the masked-operation
//! pseudo-code of §5.1.

use super::macros::enum_with_unknown;
use super::{be, Error, Field, Result};

mod field {
    use super::Field;

    pub(crate) const RESERVED_AOPCODE: Field = 0..4;
    pub(crate) const REQUEST_ID: Field = 4..8;
    pub(crate) const REMOTE_STAG: Field = 8..12;
    pub(crate) const REMOTE_TO: Field = 12..20;
    pub(crate) const ADD_SWAP_DATA: Field = 20..28;
    pub(crate) const ADD_SWAP_MASK: Field = 28..36;
    pub(crate) const COMPARE_DATA: Field = 36..44;
    pub(crate) const COMPARE_MASK: Field = 44..52;

    pub(crate) const AOPCODE_MASK: u32 = 0x0F;
    pub(crate) const RESERVED_SHIFT: u32 = 4;

    pub(crate) const ORIG_REQUEST_ID: Field = 0..4;
    pub(crate) const ORIG_REMOTE_VALUE: Field = 4..12;
}

/// Length of the Atomic Request header.
pub const REQUEST_HEADER_LEN: usize = field::COMPARE_MASK.end;
/// Length of the Atomic Response header.
pub const RESPONSE_HEADER_LEN: usize = field::ORIG_REMOTE_VALUE.end;
/// Largest value of the 28 reserved bits.
pub const RESERVED_MAX: u32 = 0x0FFF_FFFF;

const _: () = assert!(REQUEST_HEADER_LEN == 52);
const _: () = assert!(RESPONSE_HEADER_LEN == 12);

enum_with_unknown! {
    /// Atomic Operation Code (draft-ietf-storm-rdmap-ext-00 Figure 5).
    pub enum AtomicOpcode(u8) {
        /// Masked fetch-and-add.
        FetchAdd = 0,
        /// The seed's unmasked Swap (reserved in RFC 7306).
        Swap = 1,
        /// Masked compare-and-swap.
        CmpSwap = 2,
    }
}

/// A read/write view of an Atomic Request header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RequestPacket<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> RequestPacket<T> {
        RequestPacket { buffer }
    }

    /// Wraps a buffer of at least [`REQUEST_HEADER_LEN`] octets.
    pub fn new_checked(buffer: T) -> Result<RequestPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < REQUEST_HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    fn word(&self, f: Field) -> u32 {
        be::u32(&self.buffer.as_ref()[f])
    }

    fn dword(&self, f: Field) -> u64 {
        be::u64(&self.buffer.as_ref()[f])
    }

    /// The 28 reserved bits ("set to zero on transmit, ignored on receive").
    pub fn reserved(&self) -> u32 {
        self.word(field::RESERVED_AOPCODE) >> field::RESERVED_SHIFT
    }

    /// AOpCode.
    pub fn opcode(&self) -> AtomicOpcode {
        AtomicOpcode::from((self.word(field::RESERVED_AOPCODE) & field::AOPCODE_MASK) as u8)
    }

    /// Request Identifier.
    pub fn request_id(&self) -> u32 {
        self.word(field::REQUEST_ID)
    }

    /// Remote STag.
    pub fn remote_stag(&self) -> u32 {
        self.word(field::REMOTE_STAG)
    }

    /// Remote Tagged Offset.
    pub fn remote_to(&self) -> u64 {
        self.dword(field::REMOTE_TO)
    }

    /// Add or Swap Data.
    pub fn add_or_swap_data(&self) -> u64 {
        self.dword(field::ADD_SWAP_DATA)
    }

    /// Add or Swap Mask.
    pub fn add_or_swap_mask(&self) -> u64 {
        self.dword(field::ADD_SWAP_MASK)
    }

    /// Compare Data.
    pub fn compare_data(&self) -> u64 {
        self.dword(field::COMPARE_DATA)
    }

    /// Compare Mask.
    pub fn compare_mask(&self) -> u64 {
        self.dword(field::COMPARE_MASK)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RequestPacket<T> {
    fn set_word(&mut self, f: Field, v: u32) {
        be::put_u32(&mut self.buffer.as_mut()[f], v);
    }

    fn set_dword(&mut self, f: Field, v: u64) {
        be::put_u64(&mut self.buffer.as_mut()[f], v);
    }

    /// Writes the reserved bits and AOpCode.
    pub fn set_reserved_and_opcode(&mut self, reserved: u32, opcode: AtomicOpcode) {
        let code = u32::from(u8::from(opcode)) & field::AOPCODE_MASK;
        self.set_word(
            field::RESERVED_AOPCODE,
            reserved << field::RESERVED_SHIFT | code,
        );
    }

    /// Writes the Request Identifier.
    pub fn set_request_id(&mut self, v: u32) {
        self.set_word(field::REQUEST_ID, v);
    }

    /// Writes the Remote STag.
    pub fn set_remote_stag(&mut self, v: u32) {
        self.set_word(field::REMOTE_STAG, v);
    }

    /// Writes the Remote Tagged Offset.
    pub fn set_remote_to(&mut self, v: u64) {
        self.set_dword(field::REMOTE_TO, v);
    }

    /// Writes the four data/mask fields.
    pub fn set_operands(&mut self, add_or_swap: (u64, u64), compare: (u64, u64)) {
        self.set_dword(field::ADD_SWAP_DATA, add_or_swap.0);
        self.set_dword(field::ADD_SWAP_MASK, add_or_swap.1);
        self.set_dword(field::COMPARE_DATA, compare.0);
        self.set_dword(field::COMPARE_MASK, compare.1);
    }
}

/// An Atomic Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestRepr {
    /// The 28 reserved bits, kept verbatim.
    pub reserved: u32,
    /// AOpCode.
    pub opcode: AtomicOpcode,
    /// Request Identifier.
    pub request_id: u32,
    /// Remote STag.
    pub remote_stag: u32,
    /// Remote Tagged Offset.
    pub remote_to: u64,
    /// Add Data (FetchAdd) or Swap Data (Swap, CmpSwap).
    pub add_or_swap_data: u64,
    /// Add Mask or Swap Mask.
    pub add_or_swap_mask: u64,
    /// Compare Data (CmpSwap).
    pub compare_data: u64,
    /// Compare Mask (CmpSwap).
    pub compare_mask: u64,
}

impl RequestRepr {
    /// A masked FetchAdd; Figure 5 and §5.2.1 want compare data 0 and
    /// compare mask all ones for it.
    pub fn fetch_add(request_id: u32, stag: u32, to: u64, add: u64, add_mask: u64) -> Self {
        RequestRepr {
            reserved: 0,
            opcode: AtomicOpcode::FetchAdd,
            request_id,
            remote_stag: stag,
            remote_to: to,
            add_or_swap_data: add,
            add_or_swap_mask: add_mask,
            compare_data: 0,
            compare_mask: u64::MAX,
        }
    }

    /// A masked CmpSwap.
    pub fn cmp_swap(
        request_id: u32,
        stag: u32,
        to: u64,
        swap: (u64, u64),
        compare: (u64, u64),
    ) -> Self {
        RequestRepr {
            reserved: 0,
            opcode: AtomicOpcode::CmpSwap,
            request_id,
            remote_stag: stag,
            remote_to: to,
            add_or_swap_data: swap.0,
            add_or_swap_mask: swap.1,
            compare_data: compare.0,
            compare_mask: compare.1,
        }
    }

    /// An unconditional Swap, sent as CmpSwap with compare mask 0 (always
    /// equal) and swap mask all ones, so RFC 7306 peers understand it.
    pub fn swap(request_id: u32, stag: u32, to: u64, swap: u64) -> Self {
        Self::cmp_swap(request_id, stag, to, (swap, u64::MAX), (0, 0))
    }

    /// Parses an Atomic Request header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &RequestPacket<&T>) -> Result<RequestRepr> {
        packet.check_len()?;
        Ok(RequestRepr {
            reserved: packet.reserved(),
            opcode: packet.opcode(),
            request_id: packet.request_id(),
            remote_stag: packet.remote_stag(),
            remote_to: packet.remote_to(),
            add_or_swap_data: packet.add_or_swap_data(),
            add_or_swap_mask: packet.add_or_swap_mask(),
            compare_data: packet.compare_data(),
            compare_mask: packet.compare_mask(),
        })
    }

    /// Octets [`RequestRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        REQUEST_HEADER_LEN
    }

    /// Writes the header.
    ///
    /// # Panics
    /// If `reserved` exceeds 28 bits or the AOpCode 4 bits.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut RequestPacket<T>) {
        assert!(
            self.reserved <= RESERVED_MAX,
            "atomic reserved field is 28 bits"
        );
        assert!(u8::from(self.opcode) <= 0x0F, "AOpCode is 4 bits");
        packet.set_reserved_and_opcode(self.reserved, self.opcode);
        packet.set_request_id(self.request_id);
        packet.set_remote_stag(self.remote_stag);
        packet.set_remote_to(self.remote_to);
        packet.set_operands(
            (self.add_or_swap_data, self.add_or_swap_mask),
            (self.compare_data, self.compare_mask),
        );
    }
}

/// A read/write view of an Atomic Response header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ResponsePacket<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> ResponsePacket<T> {
        ResponsePacket { buffer }
    }

    /// Wraps a buffer of at least [`RESPONSE_HEADER_LEN`] octets.
    pub fn new_checked(buffer: T) -> Result<ResponsePacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the header fits.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < RESPONSE_HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Original Request Identifier.
    pub fn original_request_id(&self) -> u32 {
        be::u32(&self.buffer.as_ref()[field::ORIG_REQUEST_ID])
    }

    /// Original Remote Data Value.
    pub fn original_remote_value(&self) -> u64 {
        be::u64(&self.buffer.as_ref()[field::ORIG_REMOTE_VALUE])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ResponsePacket<T> {
    /// Writes the Original Request Identifier.
    pub fn set_original_request_id(&mut self, v: u32) {
        be::put_u32(&mut self.buffer.as_mut()[field::ORIG_REQUEST_ID], v);
    }

    /// Writes the Original Remote Data Value.
    pub fn set_original_remote_value(&mut self, v: u64) {
        be::put_u64(&mut self.buffer.as_mut()[field::ORIG_REMOTE_VALUE], v);
    }
}

/// An Atomic Response header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResponseRepr {
    /// The Request Identifier of the request this answers.
    pub original_request_id: u32,
    /// The 64-bit value at the target before the operation.
    pub original_remote_value: u64,
}

impl ResponseRepr {
    /// Parses an Atomic Response header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &ResponsePacket<&T>) -> Result<ResponseRepr> {
        packet.check_len()?;
        Ok(ResponseRepr {
            original_request_id: packet.original_request_id(),
            original_remote_value: packet.original_remote_value(),
        })
    }

    /// Octets [`ResponseRepr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        RESPONSE_HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut ResponsePacket<T>) {
        packet.set_original_request_id(self.original_request_id);
        packet.set_original_remote_value(self.original_remote_value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FetchAdd of 1 at STag 0x727a3200, TO 0x7fca9fb5e010 (the
    /// `iwprobe_ops` buffer that libsiw refused to target), laid out from
    /// Figure 4 by hand.
    static FETCH_ADD: [u8; 52] = [
        0x00, 0x00, 0x00, 0x00, // reserved, AOpCode 0
        0x00, 0x00, 0x00, 0x2a, // request id 42
        0x72, 0x7a, 0x32, 0x00, // remote STag
        0x00, 0x00, 0x7f, 0xca, 0x9f, 0xb5, 0xe0, 0x10, // remote TO
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, // add data
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // add mask: one 64-bit field
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // compare data
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // compare mask
    ];

    #[test]
    fn test_fetch_add_vector() {
        let repr = RequestRepr::fetch_add(42, 0x727a_3200, 0x7fca_9fb5_e010, 1, 0);
        let mut out = [0u8; REQUEST_HEADER_LEN];
        repr.emit(&mut RequestPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, FETCH_ADD);
        let packet = RequestPacket::new_checked(&FETCH_ADD[..]).unwrap();
        assert_eq!(packet.opcode(), AtomicOpcode::FetchAdd);
        assert_eq!(RequestRepr::parse(&packet).unwrap(), repr);
    }

    #[test]
    fn test_swap_is_sent_as_cmp_swap() {
        let repr = RequestRepr::swap(7, 1, 8, 0x1122_3344_5566_7788);
        let mut out = [0u8; REQUEST_HEADER_LEN];
        repr.emit(&mut RequestPacket::new_unchecked(&mut out[..]));
        assert_eq!(&out[0..4], &[0, 0, 0, 2], "AOpCode 2 (CmpSwap)");
        assert_eq!(&out[28..36], &[0xff; 8], "swap mask all ones");
        assert_eq!(&out[44..52], &[0; 8], "compare mask zero");
    }

    #[test]
    fn test_reserved_and_unknown_opcode_round_trip() {
        let mut bytes = FETCH_ADD;
        bytes[0..4].copy_from_slice(&[0xab, 0xcd, 0xef, 0x1f]);
        let repr = RequestRepr::parse(&RequestPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.reserved, 0x0abc_def1);
        assert_eq!(repr.opcode, AtomicOpcode::Unknown(0x0f));
        let mut out = [0u8; REQUEST_HEADER_LEN];
        repr.emit(&mut RequestPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn test_response() {
        let bytes = [0, 0, 0, 42, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        let repr = ResponseRepr::parse(&ResponsePacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(repr.original_request_id, 42);
        assert_eq!(repr.original_remote_value, 0x0102_0304_0506_0708);
        let mut out = [0u8; RESPONSE_HEADER_LEN];
        repr.emit(&mut ResponsePacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn test_impossible_len() {
        for len in 0..REQUEST_HEADER_LEN {
            assert_eq!(RequestPacket::new_checked(&FETCH_ADD[..len]), Err(Error));
        }
        for len in 0..RESPONSE_HEADER_LEN {
            assert_eq!(ResponsePacket::new_checked(&FETCH_ADD[..len]), Err(Error));
        }
    }
}
