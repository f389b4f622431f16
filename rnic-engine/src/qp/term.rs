//! Why a stream is terminated: one exhaustive mapping from cause to the
//! Terminate layer/type/code of the IANA "RDDP" registry (RFC 6580, and RFC
//! 5040 §7 and RFC 5041 §7; siw's `iwarp.h` agrees on every value), no
//! catch-all arm.
//!
//! STYLE.md §4: the wire layer only knows that bytes do not parse; the
//! engine knows which layer checked what, so it picks the cause here.

use crate::mem::AccessError;
use crate::mpa::rx::MpaError;
use crate::wire::rdmap::{self, Control, Header, Opcode};
use crate::wire::{atomic, ddp, term};

/// A DDP tagged buffer error (layer 1, type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaggedError {
    /// No such STag (also for missing access rights, for which RFC 5041
    /// has no code; siw's `siw_tagged_error` makes the same choice).
    InvalidStag,
    /// Base or bounds violation.
    BaseBounds,
    /// STag not associated with the DDP stream (another PD).
    NotAssociated,
    /// TO wrap.
    ToWrap,
    /// DDP version not 1.
    Version,
}

/// A DDP untagged buffer error (layer 1, type 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UntaggedError {
    /// No such queue for this message.
    InvalidQn,
    /// No buffer posted for a new message (a Send without a receive).
    NoBuffer,
    /// MSN out of range.
    MsnRange,
    /// MO beyond the buffer.
    InvalidMo,
    /// The message is longer than its buffer.
    TooLong,
    /// DDP version not 1.
    Version,
}

/// An RDMAP remote protection error code (layer 0, type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtectionError {
    /// Invalid STag.
    InvalidStag,
    /// Base or bounds violation.
    BaseBounds,
    /// Access rights violation.
    AccessRights,
    /// STag not associated with the RDMAP stream.
    NotAssociated,
    /// TO wrap.
    ToWrap,
    /// The STag of a Send with Invalidate cannot be invalidated (an access
    /// problem; siw uses this type for `-EACCES`).
    CannotInvalidate,
}

/// An RDMAP remote operation error code (layer 0, type 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperationError {
    /// RDMAP version not 1.
    Version,
    /// Unexpected opcode (unknown, or the wrong buffer model).
    Opcode,
    /// Catastrophic error, localized to the RDMAP stream.
    CatastrophicStream,
    /// The STag of a Send with Invalidate cannot be invalidated (no such
    /// STag).
    CannotInvalidate,
    /// Unspecified: a request this RNIC cannot carry out for no other
    /// listed reason (an atomic target not 8-aligned, Immediate Data not 8
    /// octets, an Atomic Response nothing asked for).
    Unspecified,
}

/// An error of enhanced RDMA connection establishment (layer 2 LLP, type 0):
/// RFC 6581 §8's codes, which "extends the error codes defined in [RFC5044]
/// by adding three new error codes. Thus, enhanced RDMA connection
/// establishment is backward compatible with both [RFC5043] and [RFC5044]."
/// They serve MPA over TCP and DDP over SCTP alike (RFC 5043 defines no LLP
/// codes of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EstablishmentError {
    /// 0x05 Local catastrophic (RFC 6581 §9.3: "any error locally for which
    /// the special Error Code is not defined").
    LocalCatastrophic,
    /// 0x06 Insufficient IRD resources (RFC 6581 §9.1).
    InsufficientIrd,
    /// 0x07 No matching RTR option (RFC 6581 §9.2), also a connection model
    /// mismatch.
    NoMatchingRtr,
}

impl EstablishmentError {
    /// Layer, error type and error code: [`TermCause::code`] of
    /// `TermCause::Establishment(self)`.
    pub const fn code(self) -> (u8, u8, u8) {
        TermCause::Establishment(self).code()
    }
}

/// The cause of a Terminate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TermCause {
    /// MPA (layer 2, type 0).
    Mpa(MpaError),
    /// A ULPDU too short for a DDP header: framing (2/0/4).
    Truncated,
    /// DDP over SCTP: a message whose DDP-SSN is outside the receive
    /// window, already arrived, or more than the window holds (RFC 5043
    /// §6.1 lets a receiver terminate on an invalid DDP-SSN). RFC 5043
    /// names no LLP error codes, so this is the lower layer's framing error
    /// (2/0/4), as for a message too short to hold a DDP-SSN.
    Sequence,
    /// An invalid DDP Stream Session Control message over SCTP (malformed,
    /// an unknown function code, one out of sequence): 2/0/4, "Invalid MPA
    /// Request or MPA Reply Frame". RFC 5043 defines no LLP error codes (RFC
    /// 6581 §8: "[RFC5043] does not define any"), so the startup frame code
    /// of the same layer and type, the nearest meaning, stands in.
    InvalidSessionControl,
    /// Connection establishment (layer 2, type 0, RFC 6581 §8). A
    /// peer-to-peer connection's first message that is none of the
    /// negotiated RTR indications is `NoMatchingRtr` (2/0/7).
    Establishment(EstablishmentError),
    /// DDP tagged (1/1).
    Tagged(TaggedError),
    /// DDP untagged (1/2).
    Untagged(UntaggedError),
    /// DDP local catastrophic (1/0/0): a segment DDP cannot place for a
    /// reason that is neither a tagged nor an untagged buffer error (a Read
    /// Response while no Read is outstanding, as Linux siw's
    /// `siw_proc_rresp` reports it).
    DdpCatastrophic,
    /// RDMAP local catastrophic (0/0).
    LocalCatastrophic,
    /// RDMAP remote protection (0/1).
    Protection(ProtectionError),
    /// RDMAP remote operation (0/2).
    Operation(OperationError),
}

impl TermCause {
    /// (layer, error type, error code) on the wire.
    pub const fn code(self) -> (u8, u8, u8) {
        match self {
            TermCause::Mpa(e) => (e.layer(), e.etype(), e.ecode()),
            TermCause::Truncated | TermCause::Sequence | TermCause::InvalidSessionControl => {
                (2, 0, 0x04)
            }
            TermCause::Establishment(e) => (
                2,
                0,
                match e {
                    EstablishmentError::LocalCatastrophic => 0x05,
                    EstablishmentError::InsufficientIrd => 0x06,
                    EstablishmentError::NoMatchingRtr => 0x07,
                },
            ),
            TermCause::Tagged(e) => (
                1,
                1,
                match e {
                    TaggedError::InvalidStag => 0x00,
                    TaggedError::BaseBounds => 0x01,
                    TaggedError::NotAssociated => 0x02,
                    TaggedError::ToWrap => 0x03,
                    TaggedError::Version => 0x04,
                },
            ),
            TermCause::Untagged(e) => (
                1,
                2,
                match e {
                    UntaggedError::InvalidQn => 0x01,
                    UntaggedError::NoBuffer => 0x02,
                    UntaggedError::MsnRange => 0x03,
                    UntaggedError::InvalidMo => 0x04,
                    UntaggedError::TooLong => 0x05,
                    UntaggedError::Version => 0x06,
                },
            ),
            TermCause::DdpCatastrophic => (1, 0, 0x00),
            TermCause::LocalCatastrophic => (0, 0, 0x00),
            TermCause::Protection(e) => (
                0,
                1,
                match e {
                    ProtectionError::InvalidStag => 0x00,
                    ProtectionError::BaseBounds => 0x01,
                    ProtectionError::AccessRights => 0x02,
                    ProtectionError::NotAssociated => 0x03,
                    ProtectionError::ToWrap => 0x04,
                    ProtectionError::CannotInvalidate => 0x09,
                },
            ),
            TermCause::Operation(e) => (
                0,
                2,
                match e {
                    OperationError::Version => 0x05,
                    OperationError::Opcode => 0x06,
                    OperationError::CatastrophicStream => 0x07,
                    OperationError::CannotInvalidate => 0x09,
                    OperationError::Unspecified => 0xFF,
                },
            ),
        }
    }

    /// A tagged placement refused by the STag table (DDP checks it).
    pub(crate) fn tagged(error: AccessError) -> TermCause {
        TermCause::Tagged(match error {
            AccessError::InvalidStag | AccessError::Rights => TaggedError::InvalidStag,
            AccessError::BaseBounds => TaggedError::BaseBounds,
            AccessError::PdMismatch => TaggedError::NotAssociated,
            AccessError::ToWrap => TaggedError::ToWrap,
        })
    }

    /// A Read or atomic source refused by the STag table (RDMAP checks it).
    pub(crate) fn protection(error: AccessError) -> TermCause {
        TermCause::Protection(match error {
            AccessError::InvalidStag => ProtectionError::InvalidStag,
            AccessError::BaseBounds => ProtectionError::BaseBounds,
            AccessError::PdMismatch => ProtectionError::NotAssociated,
            AccessError::Rights => ProtectionError::AccessRights,
            AccessError::ToWrap => ProtectionError::ToWrap,
        })
    }
}

/// The longest Terminate ULPDU [`Terminate::emit_ulpdu`] writes: the DDP
/// header, the Terminate control word and DDP Segment Length, an echoed
/// untagged DDP header and the longest echoed RDMA header (an atomic
/// request's).
pub const TERMINATE_ULPDU_LEN_MAX: usize = ddp::UNTAGGED_HEADER_LEN
    + term::CONTROL_LEN
    + 2
    + ddp::UNTAGGED_HEADER_LEN
    + atomic::REQUEST_HEADER_LEN;

/// A Terminate message (RFC 5040 §4.8) to send: untagged, queue 2, one
/// segment. This is the one encoder of Terminates: the QP's transmit path,
/// MPA startup failures (framed by the caller) and DDP over SCTP (where the
/// ULPDU follows a DDP-SSN, RFC 5043) all write theirs with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminate<'a> {
    /// Why; gives the layer/type/code.
    pub cause: TermCause,
    /// The MSN of queue 2 (1 for a stream's first Terminate).
    pub msn: u32,
    /// The control word's layout (RFC 5040's unless a peer needs siw's).
    pub encoding: term::Encoding,
    /// The terminated DDP segment's length, with its header.
    pub segment_len: u16,
    /// The terminated DDP header (14 or 18 octets), if echoed; sets M and D.
    pub ddp_header: Option<&'a [u8]>,
    /// The terminated RDMA header, if echoed; sets R.
    pub rdma_header: Option<&'a [u8]>,
}

impl<'a> Terminate<'a> {
    /// A Terminate for `cause` that echoes nothing, as a startup failure
    /// sends it (RFC 6581 §8: "Any enhanced RDMA connection establishment
    /// error generates an MPA termination message to a peer").
    pub const fn bare(cause: TermCause, msn: u32) -> Terminate<'static> {
        Terminate {
            cause,
            msn,
            encoding: term::Encoding::Rfc5040,
            segment_len: 0,
            ddp_header: None,
            rdma_header: None,
        }
    }

    fn message(&self) -> rdmap::Repr<'a> {
        let (layer, etype, ecode) = self.cause.code();
        let repr = term::Repr {
            encoding: self.encoding,
            layer: term::Layer::from(layer),
            etype,
            ecode,
            reserved: 0,
            segment_length_valid: self.ddp_header.is_some(),
            ddp_segment_length: if self.ddp_header.is_some() {
                self.segment_len
            } else {
                0
            },
            ddp_header: self.ddp_header,
            rdma_header: self.rdma_header,
        };
        rdmap::Repr {
            ddp: ddp::Repr {
                last: true,
                reserved: 0,
                version: ddp::VERSION,
                rsvd_ulp: Control::new(Opcode::Terminate).to_octet(),
                buffer: ddp::Buffer::Untagged {
                    rsvd_ulp: 0,
                    qn: ddp::qn::TERMINATE,
                    msn: self.msn,
                    mo: 0,
                },
            },
            header: Header::Terminate(repr),
            payload: &[],
        }
    }

    /// Octets [`Terminate::emit_ulpdu`] writes.
    pub fn ulpdu_len(&self) -> usize {
        self.message().buffer_len()
    }

    /// Writes the ULPDU (DDP header and Terminate header) into the start of
    /// `out` and returns its length.
    ///
    /// # Panics
    /// If `out` is shorter than [`Terminate::ulpdu_len`], or an echoed
    /// header is not a header (programmer errors).
    pub fn emit_ulpdu(&self, out: &mut [u8]) -> usize {
        let message = self.message();
        let len = message.buffer_len();
        assert!(
            len <= TERMINATE_ULPDU_LEN_MAX,
            "Terminate ULPDU of {len} octets"
        );
        message.emit(&mut ddp::Packet::new_unchecked(&mut out[..len]));
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::term::describe;

    /// Every cause, with the registry's words for it (RFC 5040 §7, RFC 5041
    /// §7).
    fn all() -> Vec<(TermCause, &'static str)> {
        use OperationError as O;
        use ProtectionError as P;
        use TaggedError as T;
        use UntaggedError as U;
        vec![
            (TermCause::Mpa(MpaError::Crc), "MPA CRC Error"),
            (TermCause::Mpa(MpaError::Marker), "Marker"),
            (TermCause::Mpa(MpaError::Framing), "Invalid MPA"),
            (TermCause::Truncated, "Invalid MPA"),
            (TermCause::Sequence, "Invalid MPA"),
            (
                TermCause::InvalidSessionControl,
                "Invalid MPA Request or MPA Reply",
            ),
            (
                TermCause::Establishment(EstablishmentError::LocalCatastrophic),
                "MPA Error / Local catastrophic",
            ),
            (
                TermCause::Establishment(EstablishmentError::InsufficientIrd),
                "Insufficient IRD resources",
            ),
            (
                TermCause::Establishment(EstablishmentError::NoMatchingRtr),
                "No matching RTR option",
            ),
            (
                TermCause::Tagged(T::InvalidStag),
                "Tagged Buffer Error / Invalid STag",
            ),
            (
                TermCause::Tagged(T::BaseBounds),
                "Tagged Buffer Error / Base or bounds",
            ),
            (
                TermCause::Tagged(T::NotAssociated),
                "Tagged Buffer Error / STag not associated",
            ),
            (
                TermCause::Tagged(T::ToWrap),
                "Tagged Buffer Error / TO wrap",
            ),
            (
                TermCause::Tagged(T::Version),
                "Tagged Buffer Error / Invalid DDP version",
            ),
            (
                TermCause::Untagged(U::InvalidQn),
                "Untagged Buffer Error / Invalid QN",
            ),
            (TermCause::Untagged(U::NoBuffer), "Invalid MSN - no buffer"),
            (TermCause::Untagged(U::MsnRange), "Invalid MSN - MSN range"),
            (TermCause::Untagged(U::InvalidMo), "Invalid MO"),
            (TermCause::Untagged(U::TooLong), "too long"),
            (
                TermCause::Untagged(U::Version),
                "Untagged Buffer Error / Invalid DDP version",
            ),
            (TermCause::DdpCatastrophic, "DDP / Local Catastrophic"),
            (TermCause::LocalCatastrophic, "RDMAP / Local Catastrophic"),
            (
                TermCause::Protection(P::InvalidStag),
                "Remote Protection Error / Invalid STag",
            ),
            (
                TermCause::Protection(P::BaseBounds),
                "Remote Protection Error / Base or bounds",
            ),
            (
                TermCause::Protection(P::AccessRights),
                "Remote Protection Error / Access rights",
            ),
            (
                TermCause::Protection(P::NotAssociated),
                "Remote Protection Error / STag not associated",
            ),
            (
                TermCause::Protection(P::ToWrap),
                "Remote Protection Error / TO wrap",
            ),
            (
                TermCause::Protection(P::CannotInvalidate),
                "Remote Protection Error / STag cannot be invalidated",
            ),
            (
                TermCause::Operation(O::Version),
                "Remote Operation Error / Invalid RDMAP version",
            ),
            (
                TermCause::Operation(O::Opcode),
                "Remote Operation Error / Unexpected OpCode",
            ),
            (
                TermCause::Operation(O::CatastrophicStream),
                "Catastrophic error, localized",
            ),
            (
                TermCause::Operation(O::CannotInvalidate),
                "Remote Operation Error / STag cannot be invalidated",
            ),
            (
                TermCause::Operation(O::Unspecified),
                "Remote Operation Error / Unspecified",
            ),
        ]
    }

    #[test]
    fn every_cause_is_in_the_registry_with_its_meaning() {
        for (cause, words) in all() {
            let (layer, etype, ecode) = cause.code();
            let name =
                describe(layer, etype, ecode).unwrap_or_else(|| panic!("{cause:?} unregistered"));
            assert!(
                name.contains(words),
                "{cause:?} -> {layer}/{etype}/{ecode:#04x} {name}"
            );
        }
    }
}
