//! Why a stream is terminated: one exhaustive mapping from cause to the
//! Terminate layer/type/code of the IANA "RDDP" registry (RFC 6580, and RFC
//! 5040 §7 and RFC 5041 §7; siw's `iwarp.h` agrees on every value), no
//! catch-all arm.
//!
//! STYLE.md §4: the wire layer only knows that bytes do not parse; the
//! engine knows which layer checked what, so it picks the cause here.

use crate::mem::AccessError;
use crate::mpa::rx::MpaError;

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
    /// octets, a Read Response nothing asked for).
    Unspecified,
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
    /// A peer-to-peer connection's first message is none of the negotiated
    /// RTR indications: RFC 6581 §8's "No matching RTR option" (2/0/7).
    NoMatchingRtr,
    /// DDP tagged (1/1).
    Tagged(TaggedError),
    /// DDP untagged (1/2).
    Untagged(UntaggedError),
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
            TermCause::Truncated | TermCause::Sequence => (2, 0, 0x04),
            TermCause::NoMatchingRtr => (2, 0, 0x07),
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
