//! DDP Stream Session Control messages (RFC 5043, SCTP PPID 17) with RFC
//! 6581 §7's enhanced function codes.
//!
//! ```text
//! offset 0..2  DDP-SSN (the stream sequence number, RFC 5043 §6.1)
//! offset 2..4  Function Code
//! offset 4..   Private Data: the rest of the SCTP user message, at most 512
//!              octets. Enhanced Initiate/Accept/Reject begin it with RFC
//!              6581 §9's A|B|IRD|C|D|ORD word, the ULP's data follows.
//! ```
//!
//! There is no length field and there are no reserved bits: the SCTP user
//! message delimits the private data, so a view of the whole message is a
//! view of this header. The function codes are those of the "SCTP Function
//! Codes for DDP Session Control" registry (RFC 6580 §3.5, RFC 6581 §11).
//!
//! RFC 6581 §7: "Private Data length MUST NOT exceed 512 bytes in any
//! message, including enhanced RDMA connection establishment data." and
//! "Private Data MUST NOT be included in the DDP Stream Session TERM
//! message."
//!
//! The enhanced word is [`mpa_rr::EnhancedRepr`], the one the MPA Request
//! and Reply carry (RFC 6581 §9 names both carriers).
//!
//! Deviation to note: RFC 6581 §7 puts the word in "the 'DDP Stream Session
//! Initiate' and 'DDP Stream Session Accept'" and is silent on the Enhanced
//! Reject's layout; §9.1 has the responder "specify the required ORD in the
//! ... Reject ... responder ORD" and the initiator "pass the responder
//! provided IRD and ORD to the ULP for both ... Accept and Reject", which
//! only works if the Enhanced Reject carries the word too. So it does here,
//! as an enhanced MPA Reply with R=1 does.

use core::fmt;

use super::macros::enum_with_unknown;
use super::mpa_rr::{self, EnhancedPacket, EnhancedRepr, ENHANCED_LEN};
use super::{be, Error, Field, Rest, Result};

mod field {
    use super::{Field, Rest};

    pub(crate) const SSN: Field = 0..2;
    pub(crate) const FUNCTION_CODE: Field = 2..4;
    pub(crate) const PRIVATE_DATA: Rest = 4..;
}

/// SCTP Payload Protocol Identifier of a DDP Segment (RFC 5043 §5.2).
pub const PPID_DDP_SEGMENT: u32 = 16;
/// SCTP Payload Protocol Identifier of a DDP Stream Session Control message
/// (RFC 5043 §5.2).
pub const PPID_SESSION_CONTROL: u32 = 17;
/// DDP-SSN and Function Code.
pub const HEADER_LEN: usize = field::PRIVATE_DATA.start;
/// RFC 6581 §7: private data "MUST NOT exceed 512 bytes in any message".
pub const PRIVATE_DATA_LEN_MAX: usize = mpa_rr::PRIVATE_DATA_LEN_MAX;
/// The ULP's private data in an enhanced message: 512 less the word.
pub const ULP_PRIVATE_DATA_LEN_MAX_ENHANCED: usize = PRIVATE_DATA_LEN_MAX - ENHANCED_LEN;
/// The longest session control message (RFC 5043 §9: 516 octets).
pub const MESSAGE_LEN_MAX: usize = HEADER_LEN + PRIVATE_DATA_LEN_MAX;

const _: () = assert!(HEADER_LEN == 4);
const _: () = assert!(MESSAGE_LEN_MAX == 516);
const _: () = assert!(ULP_PRIVATE_DATA_LEN_MAX_ENHANCED == 508);

enum_with_unknown! {
    /// A session control function code (RFC 5043; 5-7 from RFC 6581 §7).
    /// 0, 8 and above are unassigned, 0xFFFF reserved: all `Unknown`.
    pub enum FunctionCode(u16) {
        /// DDP Stream Session Initiate.
        Initiate = 0x0001,
        /// DDP Stream Session Accept.
        Accept = 0x0002,
        /// DDP Stream Session Reject.
        Reject = 0x0003,
        /// DDP Stream Session Terminate: no private data.
        Terminate = 0x0004,
        /// Enhanced DDP Stream Session Initiate.
        EnhancedInitiate = 0x0005,
        /// Enhanced DDP Stream Session Accept.
        EnhancedAccept = 0x0006,
        /// Enhanced DDP Stream Session Reject.
        EnhancedReject = 0x0007,
    }
}

impl FunctionCode {
    /// RFC 6581 §7's codes, whose private data begins with the enhanced word.
    pub fn is_enhanced(self) -> bool {
        matches!(
            self,
            FunctionCode::EnhancedInitiate
                | FunctionCode::EnhancedAccept
                | FunctionCode::EnhancedReject
        )
    }

    /// A registered code.
    pub fn is_known(self) -> bool {
        !matches!(self, FunctionCode::Unknown(_))
    }
}

/// A read/write view of a session control message (the whole SCTP user
/// message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a received message and checks it whole: [`Packet::check_len`],
    /// then a registered function code, at most 512 octets of private data,
    /// none in a Terminate, and room for the enhanced word in 5, 6 and 7.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        packet.check_message()?;
        Ok(packet)
    }

    /// Checks that the DDP-SSN and the function code are there, so that no
    /// accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Checks what [`Packet::new_checked`] checks beyond the length.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn check_message(&self) -> Result<()> {
        let function = self.function_code();
        let len = self.private_data().len();
        let fits = function.is_known()
            && len <= PRIVATE_DATA_LEN_MAX
            && (function != FunctionCode::Terminate || len == 0)
            && (!function.is_enhanced() || len >= ENHANCED_LEN);
        if fits {
            Ok(())
        } else {
            Err(Error)
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// DDP-SSN.
    pub fn ssn(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::SSN])
    }

    /// The function code, unknown ones verbatim.
    pub fn function_code(&self) -> FunctionCode {
        FunctionCode::from(be::u16(&self.buffer.as_ref()[field::FUNCTION_CODE]))
    }

    /// All private data (the enhanced word included in 5, 6 and 7).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes DDP-SSN.
    pub fn set_ssn(&mut self, ssn: u16) {
        be::put_u16(&mut self.buffer.as_mut()[field::SSN], ssn);
    }

    /// Writes the function code.
    pub fn set_function_code(&mut self, function: FunctionCode) {
        be::put_u16(
            &mut self.buffer.as_mut()[field::FUNCTION_CODE],
            function.into(),
        );
    }

    /// The private data, for writing: the rest of the buffer.
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PRIVATE_DATA]
    }
}

/// A session control message.
///
/// Invariants, which [`Repr::parse`] establishes and [`Repr::emit`]
/// asserts: the function code is registered; `enhanced` is `Some` exactly
/// for 5, 6 and 7; a Terminate has no private data; the private data
/// (with the word) is at most 512 octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// DDP-SSN.
    pub ssn: u16,
    /// Function Code.
    pub function: FunctionCode,
    /// RFC 6581 §9's word, in the enhanced messages.
    pub enhanced: Option<EnhancedRepr>,
    /// The ULP's private data (after the word in enhanced messages).
    pub private_data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a received message; see the type's docs for what is refused.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        packet.check_message()?;
        let function = packet.function_code();
        let data = &packet.buffer.as_ref()[field::PRIVATE_DATA];
        let (enhanced, private_data) = if function.is_enhanced() {
            let (word, rest) = data.split_at_checked(ENHANCED_LEN).ok_or(Error)?;
            (
                Some(EnhancedRepr::parse(&EnhancedPacket::new_unchecked(word))?),
                rest,
            )
        } else {
            (None, data)
        };
        Ok(Repr {
            ssn: packet.ssn(),
            function,
            enhanced,
            private_data,
        })
    }

    /// Octets of private data, the word included.
    pub fn private_data_len(&self) -> usize {
        self.enhanced.map_or(0, |_| ENHANCED_LEN) + self.private_data.len()
    }

    /// Octets [`Repr::emit`] writes: the whole SCTP user message.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.private_data_len()
    }

    /// Writes the message into a buffer of exactly [`Repr::buffer_len`]
    /// octets (the private data is the rest of the buffer).
    ///
    /// # Panics
    /// If the buffer's length is not [`Repr::buffer_len`] or the type's
    /// invariants do not hold: programmer errors.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        assert!(self.function.is_known(), "unregistered function code");
        assert_eq!(
            self.enhanced.is_some(),
            self.function.is_enhanced(),
            "the enhanced word goes in exactly the enhanced messages"
        );
        assert!(
            self.function != FunctionCode::Terminate || self.private_data.is_empty(),
            "a Terminate carries no private data"
        );
        assert!(
            self.private_data_len() <= PRIVATE_DATA_LEN_MAX,
            "session control private data over 512 octets"
        );
        assert_eq!(packet.buffer.as_ref().len(), self.buffer_len());
        packet.set_ssn(self.ssn);
        packet.set_function_code(self.function);
        let data = packet.private_data_mut();
        let rest = match self.enhanced {
            Some(enhanced) => {
                let (word, rest) = data.split_at_mut(ENHANCED_LEN);
                enhanced.emit(&mut EnhancedPacket::new_unchecked(word));
                rest
            }
            None => data,
        };
        rest.copy_from_slice(self.private_data);
    }
}

impl fmt::Display for FunctionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FunctionCode::Initiate => f.write_str("Initiate"),
            FunctionCode::Accept => f.write_str("Accept"),
            FunctionCode::Reject => f.write_str("Reject"),
            FunctionCode::Terminate => f.write_str("Terminate"),
            FunctionCode::EnhancedInitiate => f.write_str("Enhanced Initiate"),
            FunctionCode::EnhancedAccept => f.write_str("Enhanced Accept"),
            FunctionCode::EnhancedReject => f.write_str("Enhanced Reject"),
            FunctionCode::Unknown(code) => write!(f, "function {code:#06x}"),
        }
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DDP session SSN={} {}", self.ssn, self.function)?;
        if let Some(enhanced) = self.enhanced {
            write!(f, " {enhanced}")?;
        }
        write!(f, " PD={}", self.private_data.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Enhanced Initiate, SSN 0, A=0, IRD 16, ORD 8, ULP data "hi".
    static ENHANCED_INITIATE: [u8; 10] =
        [0x00, 0x00, 0x00, 0x05, 0x00, 0x10, 0x00, 0x08, b'h', b'i'];
    /// Terminate, SSN 0.
    static TERMINATE: [u8; 4] = [0x00, 0x00, 0x00, 0x04];

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&ENHANCED_INITIATE[..]).unwrap();
        assert_eq!(packet.ssn(), 0);
        assert_eq!(packet.function_code(), FunctionCode::EnhancedInitiate);
        assert_eq!(packet.private_data(), &ENHANCED_INITIATE[4..]);
    }

    #[test]
    fn test_parse_and_emit() {
        let want = Repr {
            ssn: 0,
            function: FunctionCode::EnhancedInitiate,
            enhanced: Some(EnhancedRepr {
                ird: 16,
                ord: 8,
                ..Default::default()
            }),
            private_data: b"hi",
        };
        let repr = Repr::parse(&Packet::new_checked(&ENHANCED_INITIATE[..]).unwrap()).unwrap();
        assert_eq!(repr, want);
        let mut out = [0u8; 10];
        want.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, ENHANCED_INITIATE);
        assert_eq!(
            want.to_string(),
            "DDP session SSN=0 Enhanced Initiate IRD=16 ORD=8 P2P=0 RTR=- PD=2"
        );

        let term = Repr::parse(&Packet::new_checked(&TERMINATE[..]).unwrap()).unwrap();
        assert_eq!(term.function, FunctionCode::Terminate);
        assert_eq!(term.buffer_len(), 4);
    }

    #[test]
    fn test_impossible_len() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&TERMINATE[..len]),
                Err(Error),
                "len {len}"
            );
        }
        // Enhanced without room for the word.
        for len in HEADER_LEN..HEADER_LEN + ENHANCED_LEN {
            assert_eq!(
                Packet::new_checked(&ENHANCED_INITIATE[..len]),
                Err(Error),
                "len {len}"
            );
        }
        // 512 octets of private data is the most.
        let mut long = vec![0u8; MESSAGE_LEN_MAX + 1];
        long[3] = 1;
        assert_eq!(Packet::new_checked(&long[..]), Err(Error));
        assert!(Packet::new_checked(&long[..MESSAGE_LEN_MAX]).is_ok());
        // Terminate with private data.
        assert_eq!(Packet::new_checked(&[0, 0, 0, 4, 0][..]), Err(Error));
    }

    #[test]
    fn test_unknown_function_codes() {
        for code in [0u16, 8, 9, 0x100, 0xFFFE, 0xFFFF] {
            let mut m = [0u8; 8];
            m[2..4].copy_from_slice(&code.to_be_bytes());
            assert_eq!(Packet::new_checked(&m[..]), Err(Error), "code {code}");
            let packet = Packet::new_unchecked(&m[..]);
            assert_eq!(packet.function_code(), FunctionCode::Unknown(code));
        }
    }

    fn arb_repr(data: &[u8]) -> impl Strategy<Value = Repr<'_>> {
        (
            any::<u16>(),
            1u16..=7,
            any::<[bool; 4]>(),
            0u16..=0x3FFF,
            0u16..=0x3FFF,
            0usize..=512,
        )
            .prop_map(move |(ssn, code, flags, ird, ord, len)| {
                let function = FunctionCode::from(code);
                let enhanced = function.is_enhanced().then_some(EnhancedRepr {
                    peer_to_peer: flags[0],
                    rtr_send: flags[1],
                    rtr_write: flags[2],
                    rtr_read: flags[3],
                    ird,
                    ord,
                });
                let len = match function {
                    FunctionCode::Terminate => 0,
                    _ if enhanced.is_some() => len.min(ULP_PRIVATE_DATA_LEN_MAX_ENHANCED),
                    _ => len,
                };
                Repr {
                    ssn,
                    function,
                    enhanced,
                    private_data: &data[..len],
                }
            })
    }

    static DATA: [u8; 512] = {
        let mut d = [0u8; 512];
        let mut i = 0;
        while i < 512 {
            d[i] = (i * 7 + 3) as u8;
            i += 1;
        }
        d
    };

    proptest! {
        #[test]
        fn parse_emit_round_trips(repr in arb_repr(&DATA)) {
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut out[..]));
            let parsed = Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap();
            prop_assert_eq!(parsed, repr);
            prop_assert!(out.len() <= MESSAGE_LEN_MAX);
        }

        #[test]
        fn no_input_panics(
            code in prop_oneof![0u16..10, any::<u16>()],
            tail in proptest::collection::vec(any::<u8>(), 0..600),
            cut in 0usize..4,
        ) {
            // Mostly near-valid messages, some cut inside the header.
            let mut bytes = vec![0x12, 0x34];
            bytes.extend_from_slice(&code.to_be_bytes());
            bytes.extend_from_slice(&tail);
            if cut > 0 && tail.is_empty() {
                bytes.truncate(cut);
            }
            if let Ok(packet) = Packet::new_checked(&bytes[..]) {
                let repr = Repr::parse(&packet).unwrap();
                let _ = repr.to_string();
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut Packet::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..]);
            } else {
                prop_assert!(Repr::parse(&Packet::new_unchecked(&bytes[..])).is_err());
            }
        }
    }
}
