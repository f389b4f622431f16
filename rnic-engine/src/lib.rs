//! dpwarp's RNIC in sans-IO form.
//!
//! Today: [`wire`], a zero-copy view and a representation of every iWARP
//! header (MPA startup frames with RFC 6581 enhanced data, FPDU and marker,
//! DDP, RDMAP with the RFC 7306 extensions, Terminate), and [`mpa::crc`].
//! Next (issues 3 and 4): the MPA framer/deframer at memory speed, and the
//! DDP/RDMAP engine with verbs, queue pairs, the IRRQ and the atomic unit.
//!
//! This crate opens no socket, reads no clock and starts no thread; it
//! never depends on DPDK or on `tcp-lite` (STYLE.md §1.1). TCP stream
//! positions reach it as plain integers.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod mpa;
pub mod wire;
