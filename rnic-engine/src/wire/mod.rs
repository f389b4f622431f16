//! Zero-copy views and representations of every iWARP header.
//!
//! Heads up! Before working on these files you should read, at least: RFC 5044
//! §4 (FPDU, markers, CRC) and §7.1 (MPA Request/Reply), RFC 6581 §6 and §9
//! (enhanced connection establishment data), RFC 5041 §4 (DDP headers), RFC
//! 5040 §4 (RDMAP headers, Terminate) and RFC 7306
//! (draft-ietf-storm-rdmap-ext-00) §4-§6 (atomics, immediate data).
//!
//! The shape follows smoltcp's `wire` module:
//!
//! * a `Packet<T: AsRef<[u8]>>` view per header. If `Packet::check_len()`
//!   returned `Ok(())`, no accessor or setter panics. When parsing untrusted
//!   input it is *necessary* to use `Packet::new_checked()`; when emitting
//!   into a buffer you sized with `Repr::buffer_len()`, `new_unchecked()` is
//!   fine.
//! * a `Repr` per header that holds the header's meaning, with
//!   `Repr::parse(&Packet) -> Result<Repr>` and `Repr::emit(&mut Packet)`.
//!   Validity lives in `Repr::parse`: it rejects what cannot be laid out
//!   (a length that runs past the buffer, an opcode whose header does not
//!   fit), never what a peer may legitimately send and the engine must
//!   answer with a specific Terminate (a DDP version of 2, a Send on QN 5):
//!   those values are kept, so the engine can pick the right TERM code.
//! * unknown opcodes and reserved bits round-trip: `parse(emit(x)) == x`
//!   and `emit(parse(bytes)) == bytes` for every byte string `parse`
//!   accepts (`tests/wire_props.rs`), with one documented exception: the
//!   FPDU's emit writes PAD as zeros and computes the CRC, as a sender must.
//!
//! Facts checked on real Linux siw traffic (`tests/data/golden/*.pcap`, see
//! `tools/pcap/tests/golden.rs`) are marked "siw capture" in the files.
//!
//! # Fuzzing
//! Under `cfg(fuzzing)` the MPA CRC check always passes, as smoltcp's
//! checksum check does, so that a fuzzer reaches the parsers behind it.

use core::fmt;

mod macros;

pub mod atomic;
pub mod ddp;
pub mod ddp_session;
pub mod mpa_fpdu;
pub mod mpa_marker;
pub mod mpa_rr;
pub mod pretty;
pub mod rdmap;
pub mod term;

pub use self::atomic::{
    AtomicOpcode, RequestPacket as AtomicRequestPacket, RequestRepr as AtomicRequestRepr,
    ResponsePacket as AtomicResponsePacket, ResponseRepr as AtomicResponseRepr,
};
pub use self::ddp::{Buffer as DdpBuffer, Packet as DdpPacket, Repr as DdpRepr};
pub use self::mpa_fpdu::{Packet as FpduPacket, Repr as FpduRepr};
pub use self::mpa_marker::{Packet as MarkerPacket, Repr as MarkerRepr};
pub use self::mpa_rr::{
    EnhancedPacket as MpaEnhancedPacket, EnhancedRepr as MpaEnhancedRepr,
    FrameKind as MpaFrameKind, Packet as MpaPacket, Repr as MpaRepr,
};
pub use self::rdmap::{
    Header as RdmapHeader, Opcode as RdmapOpcode, ReadRequestPacket, ReadRequestRepr,
    Repr as RdmapRepr,
};
pub use self::term::{
    ControlWord as TermControlWord, Encoding as TermEncoding, Layer as TermLayer,
    Packet as TermPacket, Repr as TermRepr,
};

/// The error type of every parser in this module.
///
/// It is zero-sized on purpose, like smoltcp's `wire::Error`: the wire layer
/// only knows that bytes do not form a header. Which Terminate
/// layer/type/code that deserves depends on context the engine has (tagged
/// or untagged, which queue, which phase), so the engine attaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Error;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("truncated or malformed iWARP header")
    }
}

impl std::error::Error for Error {}

/// The result type of every parser in this module.
pub type Result<T> = core::result::Result<T, Error>;

/// A byte range of a header field.
pub(crate) type Field = core::ops::Range<usize>;
/// The bytes from a header's end to the end of the buffer.
pub(crate) type Rest = core::ops::RangeFrom<usize>;

/// Big-endian reads from a slice whose length the caller has checked.
///
/// These panic only when the caller broke the `check_len` contract, which
/// is a programmer error (STYLE.md §4, class 3).
pub(crate) mod be {
    pub(crate) fn u16(b: &[u8]) -> u16 {
        u16::from_be_bytes([b[0], b[1]])
    }
    pub(crate) fn u32(b: &[u8]) -> u32 {
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    pub(crate) fn u64(b: &[u8]) -> u64 {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[..8]);
        u64::from_be_bytes(x)
    }
    pub(crate) fn put_u16(b: &mut [u8], v: u16) {
        b[..2].copy_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn put_u32(b: &mut [u8], v: u32) {
        b[..4].copy_from_slice(&v.to_be_bytes());
    }
    pub(crate) fn put_u64(b: &mut [u8], v: u64) {
        b[..8].copy_from_slice(&v.to_be_bytes());
    }
}
