//! dpwarp's RNIC in sans-IO form.
//!
//! * [`wire`]: a zero-copy view and a representation of every iWARP header
//!   (MPA startup frames with RFC 6581 enhanced data, FPDU and marker, DDP,
//!   RDMAP with the RFC 7306 extensions, Terminate).
//! * [`mpa`]: the MPA framer and deframer (markers, CRC32c with SIMD
//!   kernels).
//! * [`sctp`]: the second lower layer, DDP over SCTP (RFC 5043): one DDP
//!   segment per SCTP message behind a DDP-SSN, and the reorder window
//!   that delivers unordered messages in DDP-SSN order
//!   ([`verbs::Rnic::handle_message`], [`verbs::Rnic::poll_transmit_messages`]).
//! * [`verbs`]: the RNIC as an application sees it, in libibverbs' shapes
//!   (protection domains, memory registration, completion queues, queue
//!   pairs with send, receive or shared receive queues), and the data path
//!   the data plane drives: [`verbs::Rnic::handle_stream`] with received
//!   octets, [`verbs::Rnic::poll_transmit`] for octets to send
//!   ([`verbs::Rnic::poll_transmit_segments`] to keep FPDUs inside the TCP
//!   segments a transport will cut). Behind it:
//!   [`qp`] (RDMAP/DDP per connection: segmentation, placement, the IRRQ,
//!   ORD, Terminates), [`mem`] (registered memory and STags), [`atomics`]
//!   (the atomic unit), [`cq`].
//! * [`pair`]: two RNICs joined back to back, for tests and benchmarks.
//!
//! This crate opens no socket, reads no clock and starts no thread; it
//! never depends on DPDK or on `tcp-lite` (STYLE.md §1.1). TCP stream
//! positions reach it as plain integers.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod atomics;
pub mod cq;
pub mod mem;
pub mod mpa;
pub mod pair;
pub mod qp;
pub mod sctp;
pub mod verbs;
pub mod wire;
