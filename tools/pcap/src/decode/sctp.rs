//! DDP over SCTP: every chunk of every SCTP packet, one line each.
//!
//! Heads up! Before working on this file read RFC 9260 §3 (the chunks: §3.2 the
//! chunk layout and its padding, §3.2.1 parameters, §3.3.1-§3.3.13 each chunk type),
//! RFC 5061 §4.2.6 (the Adaptation Layer Indication, parameter 0xC006), RFC 5043 §5
//! (the two DDP message formats and their PPIDs) and RFC 6581 §7 (the enhanced session
//! control function codes).
//!
//! Unlike the TCP path there is nothing to reassemble: RFC 5043 §9 puts one DDP
//! message in one unfragmented SCTP user message, so each DATA chunk is decoded on
//! its own, in capture order. A DATA chunk that is a fragment (B and E not both set)
//! is reported as such, never reassembled. Every length is checked before it is read;
//! a malformed chunk ends the walk of its packet with a problem line.

use std::net::SocketAddr;

use dpwarp_capture::packet::SctpPacket;
use dpwarp_capture::reassembly::{ConnId, Dir};
use rnic_engine::sctp::{self as ddp_sctp, PPID_DDP_SEGMENT, PPID_SESSION_CONTROL};
use rnic_engine::wire::mpa_rr;

use super::{Body, Message, Sink};

/// Chunks decoded per packet; the rest of a packet holding more is skipped with a
/// problem line. A 9000-octet jumbo frame of DATA chunks carrying DDP segments holds
/// at most about 100 (each at least 16 octets of header and a DDP header).
pub const CHUNKS_PER_PACKET_MAX: usize = 256;
/// Parameters (or error causes) walked per chunk.
pub const PARAMETERS_PER_CHUNK_MAX: usize = 64;
/// Associations remembered at once; beyond this the oldest is forgotten (a packet of
/// it later starts a new number).
pub const ASSOCIATIONS_MAX: usize = 4096;
/// The most private data a session control message carries (RFC 5043 §9: 512
/// octets, so the largest message is 516).
pub const SESSION_PRIVATE_DATA_LEN_MAX: usize = 512;

/// Chunk types (RFC 9260 §3.2).
mod chunk_type {
    pub(super) const DATA: u8 = 0;
    pub(super) const INIT: u8 = 1;
    pub(super) const INIT_ACK: u8 = 2;
    pub(super) const SACK: u8 = 3;
    pub(super) const HEARTBEAT: u8 = 4;
    pub(super) const HEARTBEAT_ACK: u8 = 5;
    pub(super) const ABORT: u8 = 6;
    pub(super) const SHUTDOWN: u8 = 7;
    pub(super) const SHUTDOWN_ACK: u8 = 8;
    pub(super) const ERROR: u8 = 9;
    pub(super) const COOKIE_ECHO: u8 = 10;
    pub(super) const COOKIE_ACK: u8 = 11;
    pub(super) const SHUTDOWN_COMPLETE: u8 = 14;
}

/// The chunk header (RFC 9260 §3.2): Type, Flags, Length; Length counts the header
/// and the value but not the padding to a multiple of 4 octets.
mod chunk {
    pub(super) const HEADER_LEN: usize = 4;
    pub(super) const PADDING: usize = 4;
}

/// The DATA chunk's value (RFC 9260 §3.3.1), after the chunk header, and its flags.
mod data {
    use core::ops::Range;
    pub(super) const TSN: Range<usize> = 0..4;
    pub(super) const SID: Range<usize> = 4..6;
    pub(super) const STREAM_SEQ: Range<usize> = 6..8;
    pub(super) const PPID: Range<usize> = 8..12;
    pub(super) const FIXED_LEN: usize = PPID.end;
    pub(super) const FLAG_UNORDERED: u8 = 0x04;
    pub(super) const FLAG_BEGIN: u8 = 0x02;
    pub(super) const FLAG_END: u8 = 0x01;
}

/// The fixed part of INIT and INIT ACK (RFC 9260 §3.3.2, §3.3.3), then parameters.
mod init {
    use core::ops::Range;
    pub(super) const INIT_TAG: Range<usize> = 0..4;
    pub(super) const A_RWND: Range<usize> = 4..8;
    pub(super) const OUTBOUND_STREAMS: Range<usize> = 8..10;
    pub(super) const INBOUND_STREAMS: Range<usize> = 10..12;
    pub(super) const INITIAL_TSN: Range<usize> = 12..16;
    pub(super) const FIXED_LEN: usize = INITIAL_TSN.end;
    /// RFC 5061 §4.2.6: the Adaptation Layer Indication, 8 octets long.
    pub(super) const ADAPTATION_LAYER_INDICATION: u16 = 0xC006;
    pub(super) const ADAPTATION_LEN: usize = 8;
}

/// SACK (RFC 9260 §3.3.4).
mod sack {
    use core::ops::Range;
    pub(super) const CUM_TSN_ACK: Range<usize> = 0..4;
    pub(super) const A_RWND: Range<usize> = 4..8;
    pub(super) const GAP_BLOCKS: Range<usize> = 8..10;
    pub(super) const DUP_TSNS: Range<usize> = 10..12;
    pub(super) const FIXED_LEN: usize = DUP_TSNS.end;
}

/// The T bit of ABORT and SHUTDOWN COMPLETE (RFC 9260 §3.3.7, §3.3.13): the sender
/// reflected the peer's Verification Tag.
const FLAG_T: u8 = 0x01;
/// A parameter or error cause header: Type (or Cause Code) and Length, which counts
/// the header (RFC 9260 §3.2.1, §3.3.10).
const TLV_HEADER_LEN: usize = 4;

/// DDP Stream Session Control function codes (RFC 5043 §5.3, registry of RFC 6580;
/// 5-7 added by RFC 6581 §7).
pub mod function {
    /// Session Initiate.
    pub const INITIATE: u16 = 1;
    /// Session Accept.
    pub const ACCEPT: u16 = 2;
    /// Session Reject.
    pub const REJECT: u16 = 3;
    /// Session Terminate.
    pub const TERMINATE: u16 = 4;
    /// Enhanced Session Initiate (RFC 6581 §7).
    pub const ENHANCED_INITIATE: u16 = 5;
    /// Enhanced Session Accept (RFC 6581 §7).
    pub const ENHANCED_ACCEPT: u16 = 6;
    /// Enhanced Session Reject (RFC 6581 §7).
    pub const ENHANCED_REJECT: u16 = 7;

    /// The function's name, `"unknown"` for a code not registered.
    pub const fn name(code: u16) -> &'static str {
        match code {
            INITIATE => "Initiate",
            ACCEPT => "Accept",
            REJECT => "Reject",
            TERMINATE => "Terminate",
            ENHANCED_INITIATE => "Enhanced Initiate",
            ENHANCED_ACCEPT => "Enhanced Accept",
            ENHANCED_REJECT => "Enhanced Reject",
            _ => "unknown",
        }
    }

    /// Whether the function's private data begins with RFC 6581's enhanced word.
    pub const fn is_enhanced(code: u16) -> bool {
        matches!(code, ENHANCED_INITIATE | ENHANCED_ACCEPT | ENHANCED_REJECT)
    }
}

/// One SCTP chunk, with what the packet that carried it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SctpChunk {
    /// The packet's Verification Tag.
    pub verification_tag: u32,
    /// The packet came encapsulated in UDP (RFC 6951).
    pub udp: bool,
    /// The chunk's place in its packet, from 0.
    pub index: usize,
    /// Chunk Type; `None` for a problem found before a chunk header could be read.
    pub chunk_type: Option<u8>,
    /// Chunk Flags.
    pub flags: u8,
    /// What the chunk is.
    pub what: SctpBody,
}

/// What an SCTP chunk is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SctpBody {
    /// A chunk of the association's life: set-up, acknowledgement, liveness,
    /// teardown, errors.
    Association(Association),
    /// A DATA chunk that carries no DDP message: another PPID, or a fragment.
    Data(DataChunk),
    /// A DDP Stream Session Control message (PPID 17).
    Session(SessionControl),
    /// A DDP Segment message (PPID 16).
    Segment(DdpSegment),
    /// A malformed chunk or message; the text says what and cites the rule.
    Problem(String),
}

/// A control chunk, by type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Association {
    /// INIT (RFC 9260 §3.3.2).
    Init(Init),
    /// INIT ACK (RFC 9260 §3.3.3).
    InitAck(Init),
    /// SACK (RFC 9260 §3.3.4).
    Sack(Sack),
    /// HEARTBEAT (RFC 9260 §3.3.5).
    Heartbeat,
    /// HEARTBEAT ACK (RFC 9260 §3.3.6).
    HeartbeatAck,
    /// ABORT (RFC 9260 §3.3.7).
    Abort {
        /// T: the Verification Tag is the peer's, reflected.
        reflected: bool,
        /// The error causes' codes.
        causes: Vec<u16>,
    },
    /// SHUTDOWN (RFC 9260 §3.3.8).
    Shutdown {
        /// Cumulative TSN Ack.
        cum_tsn_ack: u32,
    },
    /// SHUTDOWN ACK (RFC 9260 §3.3.9).
    ShutdownAck,
    /// ERROR (RFC 9260 §3.3.10).
    Error {
        /// The error causes' codes.
        causes: Vec<u16>,
    },
    /// COOKIE ECHO (RFC 9260 §3.3.11).
    CookieEcho {
        /// Octets of the cookie.
        cookie_len: usize,
    },
    /// COOKIE ACK (RFC 9260 §3.3.12).
    CookieAck,
    /// SHUTDOWN COMPLETE (RFC 9260 §3.3.13).
    ShutdownComplete {
        /// T, as in ABORT.
        reflected: bool,
    },
    /// Any other chunk type (ECNE, FORWARD TSN, ASCONF, I-DATA, ...): shown by number.
    Other {
        /// Octets of the chunk's value.
        len: usize,
    },
}

impl Association {
    /// The `event` name of the JSON output.
    pub const fn event(&self) -> &'static str {
        match self {
            Association::Init(_) => "init",
            Association::InitAck(_) => "init_ack",
            Association::Sack(_) => "sack",
            Association::Heartbeat => "heartbeat",
            Association::HeartbeatAck => "heartbeat_ack",
            Association::Abort { .. } => "abort",
            Association::Shutdown { .. } => "shutdown",
            Association::ShutdownAck => "shutdown_ack",
            Association::Error { .. } => "error",
            Association::CookieEcho { .. } => "cookie_echo",
            Association::CookieAck => "cookie_ack",
            Association::ShutdownComplete { .. } => "shutdown_complete",
            Association::Other { .. } => "other",
        }
    }
}

/// The fixed part of an INIT or INIT ACK, and the adaptation code point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Init {
    /// Initiate Tag: the Verification Tag the sender expects.
    pub init_tag: u32,
    /// Advertised Receiver Window Credit.
    pub a_rwnd: u32,
    /// Number of Outbound Streams.
    pub outbound_streams: u16,
    /// Number of Inbound Streams.
    pub inbound_streams: u16,
    /// Initial TSN.
    pub init_tsn: u32,
    /// The Adaptation Layer Indication's code point (RFC 5061 §4.2.6), `None` when
    /// the chunk has no such parameter. DDP's is 1 (RFC 5043 §5.1).
    pub adaptation: Option<u32>,
}

/// A SACK's fixed part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sack {
    /// Cumulative TSN Ack.
    pub cum_tsn_ack: u32,
    /// Advertised Receiver Window Credit.
    pub a_rwnd: u32,
    /// Number of Gap Ack Blocks.
    pub gap_blocks: u16,
    /// Number of Duplicate TSNs.
    pub dup_tsns: u16,
}

/// A DATA chunk's header (RFC 9260 §3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataChunk {
    /// TSN.
    pub tsn: u32,
    /// Stream Identifier S.
    pub sid: u16,
    /// Stream Sequence Number n (SCTP's, not the DDP-SSN).
    pub stream_seq: u16,
    /// Payload Protocol Identifier.
    pub ppid: u32,
    /// U: unordered (RFC 5043 §8 sends every DDP message so).
    pub unordered: bool,
    /// B: first fragment of a user message.
    pub begin: bool,
    /// E: last fragment.
    pub end: bool,
    /// Octets of user data.
    pub len: usize,
}

impl DataChunk {
    /// Whether the chunk holds a whole user message.
    pub fn whole(&self) -> bool {
        self.begin && self.end
    }
}

/// A DDP Stream Session Control message (RFC 5043 §5.3): `DDP-SSN | Function Code |
/// Private Data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionControl {
    /// The DATA chunk.
    pub data: DataChunk,
    /// The DDP-SSN.
    pub ssn: u16,
    /// The Function Code ([`function`]).
    pub function: u16,
    /// Every octet after the function code, RFC 6581's enhanced word included.
    pub private_data: Vec<u8>,
    /// For functions 5-7, the enhanced word `A|B|IRD|C|D|ORD` at the start of the
    /// private data (RFC 6581 §7), when there are 4 octets for it.
    pub enhanced: Option<mpa_rr::EnhancedRepr>,
}

/// A DDP Segment message (RFC 5043 §5.2): `DDP-SSN | DDP segment`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdpSegment {
    /// The DATA chunk.
    pub data: DataChunk,
    /// The DDP-SSN.
    pub ssn: u16,
    /// The DDP segment: DDP header, RDMAP header, payload.
    pub segment: Vec<u8>,
}

/// What the decoder remembers of an association: its number and who started it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Assoc {
    id: u32,
    /// The sender of the INIT, or of the first packet seen.
    initiator: SocketAddr,
    /// A chunk other than INIT and INIT ACK was seen: a later INIT starts another
    /// association.
    established: bool,
}

/// The SCTP side of the decoder: associations by address pair.
#[derive(Debug, Default)]
pub(super) struct Associations {
    by_addr: std::collections::HashMap<(SocketAddr, SocketAddr), Assoc>,
    next_id: u32,
}

impl Associations {
    /// The association of a packet, which may start a new one.
    fn lookup(&mut self, packet: &SctpPacket<'_>, sink: &mut Sink<'_>) -> Assoc {
        let key = super::addr_key(packet.src, packet.dst);
        let first = packet.chunks.first().copied();
        let starts = first == Some(chunk_type::INIT);
        // RFC 9260 §5.1: an endpoint whose INIT ACK was lost retransmits its INIT when
        // T1-init expires, so an INIT after an INIT ACK is still the same handshake. Found
        // by a review: the INIT ACK set the association up, and the retransmitted INIT
        // started another.
        let handshake = starts || first == Some(chunk_type::INIT_ACK);
        match self.by_addr.get_mut(&key) {
            Some(assoc) if !(starts && assoc.established) => {
                assoc.established |= !handshake;
                return *assoc;
            }
            _ => {}
        }
        if self.by_addr.len() >= ASSOCIATIONS_MAX && !self.by_addr.contains_key(&key) {
            let oldest = self
                .by_addr
                .iter()
                .min_by_key(|(_, a)| a.id)
                .map(|(k, _)| *k);
            oldest.map(|k| self.by_addr.remove(&k));
        }
        let assoc = Assoc {
            id: self.next_id,
            initiator: packet.src,
            established: !handshake,
        };
        self.next_id = self.next_id.wrapping_add(1);
        sink.summary.sctp_associations += 1;
        self.by_addr.insert(key, assoc);
        assoc
    }

    /// Decodes every chunk of `packet`.
    pub(super) fn handle_packet(
        &mut self,
        frame: u64,
        ts_ns: u64,
        packet: &SctpPacket<'_>,
        sink: &mut Sink<'_>,
    ) {
        sink.summary.sctp_packets += 1;
        let assoc = self.lookup(packet, sink);
        let dir = if packet.src == assoc.initiator {
            Dir::ClientToServer
        } else {
            Dir::ServerToClient
        };
        let message = |index: usize, chunk_type: Option<u8>, flags: u8, what: SctpBody| Message {
            frame,
            first_frame: frame,
            ts_ns,
            conn: ConnId(assoc.id),
            dir,
            src: packet.src,
            dst: packet.dst,
            offset: 0,
            tcp_seq: 0,
            segment_start: true,
            body: Body::Sctp(SctpChunk {
                verification_tag: packet.verification_tag,
                udp: packet.udp_ports.is_some(),
                index,
                chunk_type,
                flags,
                what,
            }),
        };
        let mut rest = packet.chunks;
        for index in 0.. {
            if rest.is_empty() {
                break;
            }
            if index == CHUNKS_PER_PACKET_MAX {
                let text = format!(
                    "more than {CHUNKS_PER_PACKET_MAX} chunks in one packet: the rest ({} \
                     octets) is not decoded",
                    rest.len()
                );
                sink.push(message(index, None, 0, SctpBody::Problem(text)));
                break;
            }
            let (kind, flags) = match rest {
                [kind, flags, ..] => (*kind, *flags),
                _ => (rest[0], 0),
            };
            let len = rest
                .get(2..4)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])));
            let problem = match len {
                None => Some(cut_or_bad(
                    packet,
                    format!(
                        "{} octets after the last chunk: no room for a chunk header",
                        rest.len()
                    ),
                )),
                Some(len) if len < chunk::HEADER_LEN => Some(format!(
                    "chunk Length {len} is less than its 4-octet header (RFC 9260 §3.2)"
                )),
                Some(len) if len > rest.len() => Some(cut_or_bad(
                    packet,
                    format!(
                        "chunk Length {len} runs past the end of the packet ({} octets left)",
                        rest.len()
                    ),
                )),
                Some(_) => None,
            };
            let Some(len) = len.filter(|_| problem.is_none()) else {
                let text = problem.unwrap_or_default();
                let kind = (rest.len() >= 2).then_some(kind);
                sink.push(message(index, kind, flags, SctpBody::Problem(text)));
                break;
            };
            let value = &rest[chunk::HEADER_LEN..len];
            for what in decode_chunk(kind, flags, value) {
                sink.push(message(index, Some(kind), flags, what));
            }
            // RFC 9260 §3.2: the Length excludes the padding, which the last chunk of
            // a packet may lack.
            rest = rest
                .get(len.next_multiple_of(chunk::PADDING)..)
                .unwrap_or_default();
        }
    }
}

/// A length problem, which the capture's snapshot length may explain.
fn cut_or_bad(packet: &SctpPacket<'_>, text: String) -> String {
    if packet.chunks_truncated {
        format!("chunk cut by the capture's snapshot length: {text}")
    } else {
        text
    }
}

fn be16(value: &[u8], range: core::ops::Range<usize>) -> u16 {
    let bytes = &value[range];
    u16::from_be_bytes([bytes[0], bytes[1]])
}

fn be32(value: &[u8], range: core::ops::Range<usize>) -> u32 {
    let bytes = &value[range];
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// What one chunk says: one body, or a body and a problem about it.
fn decode_chunk(kind: u8, flags: u8, value: &[u8]) -> Vec<SctpBody> {
    let fixed = |name: &str, need: usize| {
        SctpBody::Problem(format!(
            "{name} chunk of {} octets: its fixed part needs {need} (RFC 9260 §3.3)",
            value.len() + chunk::HEADER_LEN,
        ))
    };
    let reflected = flags & FLAG_T != 0;
    let association = |a| vec![SctpBody::Association(a)];
    match kind {
        chunk_type::DATA if value.len() < data::FIXED_LEN => vec![fixed("DATA", 16)],
        chunk_type::DATA => decode_data(flags, value),
        chunk_type::INIT if value.len() < init::FIXED_LEN => vec![fixed("INIT", 20)],
        chunk_type::INIT_ACK if value.len() < init::FIXED_LEN => vec![fixed("INIT ACK", 20)],
        chunk_type::INIT | chunk_type::INIT_ACK => decode_init(kind, value),
        chunk_type::SACK if value.len() < sack::FIXED_LEN => vec![fixed("SACK", 16)],
        chunk_type::SACK => association(Association::Sack(Sack {
            cum_tsn_ack: be32(value, sack::CUM_TSN_ACK),
            a_rwnd: be32(value, sack::A_RWND),
            gap_blocks: be16(value, sack::GAP_BLOCKS),
            dup_tsns: be16(value, sack::DUP_TSNS),
        })),
        chunk_type::HEARTBEAT => association(Association::Heartbeat),
        chunk_type::HEARTBEAT_ACK => association(Association::HeartbeatAck),
        chunk_type::ABORT | chunk_type::ERROR => {
            let (causes, problem) = walk_tlvs(value);
            let mut out = if kind == chunk_type::ABORT {
                association(Association::Abort { reflected, causes })
            } else {
                association(Association::Error { causes })
            };
            out.extend(problem.map(|p| SctpBody::Problem(format!("error cause {p}"))));
            out
        }
        chunk_type::SHUTDOWN if value.len() < 4 => vec![fixed("SHUTDOWN", 8)],
        chunk_type::SHUTDOWN => association(Association::Shutdown {
            cum_tsn_ack: be32(value, 0..4),
        }),
        chunk_type::SHUTDOWN_ACK => association(Association::ShutdownAck),
        chunk_type::COOKIE_ECHO => association(Association::CookieEcho {
            cookie_len: value.len(),
        }),
        chunk_type::COOKIE_ACK => association(Association::CookieAck),
        chunk_type::SHUTDOWN_COMPLETE => association(Association::ShutdownComplete { reflected }),
        _ => association(Association::Other { len: value.len() }),
    }
}

/// Walks parameters or error causes (the same TLV layout, RFC 9260 §3.2.1 and
/// §3.3.10): their types, and what stopped the walk early, if anything.
fn walk_tlvs(mut rest: &[u8]) -> (Vec<u16>, Option<String>) {
    let mut types = Vec::new();
    for _ in 0..PARAMETERS_PER_CHUNK_MAX {
        if rest.is_empty() {
            return (types, None);
        }
        if rest.len() < TLV_HEADER_LEN {
            let text = format!("{} octets at the end: no room for a header", rest.len());
            return (types, Some(text));
        }
        let (kind, len) = (be16(rest, 0..2), usize::from(be16(rest, 2..4)));
        if len < TLV_HEADER_LEN || len > rest.len() {
            let text = format!(
                "{kind:#06x} has Length {len} ({} octets left; RFC 9260 §3.2.1)",
                rest.len()
            );
            return (types, Some(text));
        }
        types.push(kind);
        rest = rest.get(len.next_multiple_of(4)..).unwrap_or_default();
    }
    let text = format!("more than {PARAMETERS_PER_CHUNK_MAX}: the rest is not read");
    (types, (!rest.is_empty()).then_some(text))
}

/// INIT or INIT ACK: the fixed part, and the Adaptation Layer Indication among the
/// parameters (RFC 5061 §4.2.6).
fn decode_init(kind: u8, value: &[u8]) -> Vec<SctpBody> {
    let params = &value[init::FIXED_LEN..];
    let (types, mut problem) = walk_tlvs(params);
    let mut adaptation = None;
    let mut at = 0;
    for kind in types {
        let len = usize::from(be16(params, at + 2..at + 4));
        if kind == init::ADAPTATION_LAYER_INDICATION {
            if len == init::ADAPTATION_LEN {
                adaptation = Some(be32(params, at + TLV_HEADER_LEN..at + init::ADAPTATION_LEN));
            } else {
                problem = Some(format!(
                    "0xc006 (Adaptation Layer Indication) has Length {len}, not 8 (RFC 5061 \
                     §4.2.6)"
                ));
            }
        }
        at += len.next_multiple_of(4);
    }
    let repr = Init {
        init_tag: be32(value, init::INIT_TAG),
        a_rwnd: be32(value, init::A_RWND),
        outbound_streams: be16(value, init::OUTBOUND_STREAMS),
        inbound_streams: be16(value, init::INBOUND_STREAMS),
        init_tsn: be32(value, init::INITIAL_TSN),
        adaptation,
    };
    let mut out = vec![SctpBody::Association(if kind == chunk_type::INIT {
        Association::Init(repr)
    } else {
        Association::InitAck(repr)
    })];
    out.extend(problem.map(|p| SctpBody::Problem(format!("INIT parameter {p}"))));
    out
}

/// A DATA chunk: a DDP message when its PPID is 16 or 17 and it is whole.
fn decode_data(flags: u8, value: &[u8]) -> Vec<SctpBody> {
    let user_data = &value[data::FIXED_LEN..];
    let header = DataChunk {
        tsn: be32(value, data::TSN),
        sid: be16(value, data::SID),
        stream_seq: be16(value, data::STREAM_SEQ),
        ppid: be32(value, data::PPID),
        unordered: flags & data::FLAG_UNORDERED != 0,
        begin: flags & data::FLAG_BEGIN != 0,
        end: flags & data::FLAG_END != 0,
        len: user_data.len(),
    };
    let ddp = matches!(header.ppid, PPID_DDP_SEGMENT | PPID_SESSION_CONTROL);
    if !ddp {
        return vec![SctpBody::Data(header)];
    }
    if !header.whole() {
        let text = format!(
            "TSN {}: a fragment of a DDP message (B={} E={}); RFC 5043 §9 sends each DDP \
             message unfragmented, so it is not reassembled",
            header.tsn, header.begin as u8, header.end as u8
        );
        return vec![SctpBody::Data(header), SctpBody::Problem(text)];
    }
    let Some((ssn, rest)) = ddp_sctp::split(user_data) else {
        let text = format!(
            "TSN {}: PPID {} message of {} octets has no room for its DDP-SSN (RFC 5043 §5)",
            header.tsn,
            header.ppid,
            user_data.len()
        );
        return vec![SctpBody::Problem(text)];
    };
    if header.ppid == PPID_DDP_SEGMENT {
        return vec![SctpBody::Segment(DdpSegment {
            data: header,
            ssn,
            segment: rest.to_vec(),
        })];
    }
    decode_session(header, ssn, rest)
}

/// A session control message after its DDP-SSN: Function Code, Private Data.
fn decode_session(header: DataChunk, ssn: u16, rest: &[u8]) -> Vec<SctpBody> {
    let Some((code, private_data)) = rest.split_first_chunk::<2>() else {
        let text = format!(
            "TSN {}: session control message of {} octets has no room for its Function Code \
             (RFC 5043 §5.3)",
            header.tsn, header.len
        );
        return vec![SctpBody::Problem(text)];
    };
    let code = u16::from_be_bytes(*code);
    let enhanced = if function::is_enhanced(code) {
        mpa_rr::EnhancedPacket::new_checked(private_data)
            .and_then(|p| mpa_rr::EnhancedRepr::parse(&p))
            .ok()
    } else {
        None
    };
    let mut out = vec![SctpBody::Session(SessionControl {
        data: header,
        ssn,
        function: code,
        private_data: private_data.to_vec(),
        enhanced,
    })];
    let problem = if private_data.len() > SESSION_PRIVATE_DATA_LEN_MAX {
        Some(format!(
            "{} octets of private data exceed {SESSION_PRIVATE_DATA_LEN_MAX} (RFC 5043 §9)",
            private_data.len()
        ))
    } else if code == function::TERMINATE && !private_data.is_empty() {
        Some(format!(
            "Terminate with {} octets of private data: it has none (RFC 5043 §5.3)",
            private_data.len()
        ))
    } else if matches!(
        code,
        function::ENHANCED_INITIATE | function::ENHANCED_ACCEPT
    ) && enhanced.is_none()
    {
        Some(format!(
            "{} with {} octets of private data: too short for the enhanced word \
             A|B|IRD|C|D|ORD (RFC 6581 §7)",
            function::name(code),
            private_data.len()
        ))
    } else {
        None
    };
    out.extend(problem.map(|p| SctpBody::Problem(format!("TSN {}: {p}", header.tsn))));
    out
}
