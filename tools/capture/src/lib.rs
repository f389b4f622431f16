//! Read packet captures and reassemble the TCP streams in them.
//!
//! This crate serves two users: the iWARP pcap decoder tool, and the golden-vector tests
//! that replay real Linux siw captures. Both feed it files they did not write, so every
//! layer is built for hostile input:
//!
//! * [`pcap`] reads classic pcap and pcapng from any [`std::io::Read`]. Every length field
//!   is checked against a named limit *before* anything is allocated, and a short or
//!   malformed file ends in an [`pcap::Error`] that says what is wrong and at which byte.
//! * [`packet`] turns a captured frame into a [`packet::TcpSegment`], going through
//!   `smoltcp::wire` views created with `new_checked`, or says why it cannot
//!   ([`packet::Skip`]).
//! * [`reassembly`] orders each TCP direction into a byte stream, the way Wireshark's
//!   "Follow TCP Stream" does, but streaming and with bounded buffers: data that cannot
//!   be placed within the limits becomes an explicit [`reassembly::Event::Gap`].
//!
//! Nothing here panics, loops without progress or allocates in proportion to a length
//! field it has not validated. The property tests in `tests/` feed arbitrary and mutated
//! files through all three layers to hold us to that.
//!
//! ```no_run
//! use dpwarp_capture::{packet, pcap, reassembly};
//!
//! let mut reader = pcap::open("trace.pcap")?;
//! let mut reassembler = reassembly::Reassembler::new(reassembly::Limits::default());
//! let mut events = Vec::new();
//! while let Some(record) = reader.next_record() {
//!     let record = record?;
//!     if let Ok(segment) = packet::parse_tcp(record.linktype, record.data) {
//!         reassembler.push(record.frame, record.ts_ns, &segment, &mut events);
//!     }
//! }
//! reassembler.finish(&mut events);
//! # Ok::<(), pcap::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod packet;
pub mod pcap;
pub mod reassembly;
