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
//!   ([`packet::Skip`]). [`packet::defrag`] reassembles IPv4 fragments first, within
//!   bounds of memory and capture time.
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

/// Both directions of one TCP connection of a capture, reassembled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streams {
    /// The connection.
    pub conn: reassembly::ConnId,
    /// What the client sent, in order.
    pub client_to_server: Vec<u8>,
    /// What the server sent, in order.
    pub server_to_client: Vec<u8>,
    /// Octets missing from either direction (each gap is left out, not
    /// filled): 0 for a complete capture.
    pub gap_bytes: u64,
}

/// Reads the capture at `path` and reassembles every TCP connection in it
/// with the default limits, in order of first appearance: what the golden
/// tests replay.
pub fn streams(path: impl AsRef<std::path::Path>) -> Result<Vec<Streams>, pcap::Error> {
    let mut reader = pcap::open(path)?;
    let mut reassembler = reassembly::Reassembler::new(reassembly::Limits::default());
    let mut events = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record?;
        if let Ok(segment) = packet::parse_tcp(record.linktype, record.data) {
            reassembler.push(record.frame, record.ts_ns, &segment, &mut events);
        }
    }
    reassembler.finish(&mut events);
    let mut out: Vec<Streams> = Vec::new();
    for event in events {
        let (conn, dir) = match &event {
            reassembly::Event::Data { conn, dir, .. }
            | reassembly::Event::Gap { conn, dir, .. } => (*conn, *dir),
            _ => continue,
        };
        let at = match out.iter().position(|s| s.conn == conn) {
            Some(at) => at,
            None => {
                out.push(Streams {
                    conn,
                    client_to_server: Vec::new(),
                    server_to_client: Vec::new(),
                    gap_bytes: 0,
                });
                out.len() - 1
            }
        };
        let streams = &mut out[at];
        match event {
            reassembly::Event::Data { data, .. } => match dir {
                reassembly::Dir::ClientToServer => {
                    streams.client_to_server.extend_from_slice(&data)
                }
                reassembly::Dir::ServerToClient => {
                    streams.server_to_client.extend_from_slice(&data)
                }
            },
            reassembly::Event::Gap { len, .. } => streams.gap_bytes += len,
            _ => {}
        }
    }
    Ok(out)
}
