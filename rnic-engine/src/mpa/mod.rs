//! MPA (RFC 5044) below DDP, in Full Operation: the [`tx::Framer`] writes
//! FPDUs (with markers and CRC) into caller buffers, the [`rx::Deframer`]
//! turns a TCP byte stream in any segmentation back into ULPDUs, and
//! [`crc`] is the CRC32c they share, with run-time selected SIMD kernels.
//! The startup phase (MPA Request/Reply) belongs to the `control` crate.

pub mod crc;
pub mod rx;
mod simd;
pub mod tx;
