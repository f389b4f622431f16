//! `parse(emit(r)) == r` and `emit(parse(emit(r))) == emit(r)` for
//! representations built with `arbitrary`: MPA frames (with enhanced data
//! and private data), FPDUs, markers, DDP headers, whole RDMAP messages of
//! every opcode (Terminate in either encoding, Read Request, Immediate Data,
//! atomics, unknown opcodes), and standalone atomic headers.
//!
//! This is `rnic-engine/tests/wire_props.rs` made coverage-guided: the
//! generators only produce values `emit` accepts (fields within their bit
//! widths, buffer model matching the opcode), the same way the proptest
//! strategies do.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::rdmap::{self, Control, HeaderKind, TermReading};
use rnic_engine::wire::{atomic, ddp, mpa_fpdu, mpa_marker, mpa_rr, term};

#[derive(Debug, Arbitrary)]
enum Case {
    Mpa(MpaIn),
    Fpdu { ulpdu: Vec<u8>, crc: bool },
    Marker { reserved: u16, fpduptr: u16 },
    Ddp(DdpIn),
    Message(MessageIn),
    Term(TermIn),
    AtomicRequest(AtomicRequestIn),
    AtomicResponse { id: u32, value: u64 },
}

#[derive(Debug, Arbitrary)]
struct EnhancedIn {
    flags: [bool; 4],
    ird: u16,
    ord: u16,
}

impl EnhancedIn {
    fn repr(&self) -> mpa_rr::EnhancedRepr {
        mpa_rr::EnhancedRepr {
            peer_to_peer: self.flags[0],
            rtr_send: self.flags[1],
            rtr_write: self.flags[2],
            rtr_read: self.flags[3],
            ird: self.ird & mpa_rr::IRD_ORD_NO_NEGOTIATION,
            ord: self.ord & mpa_rr::IRD_ORD_NO_NEGOTIATION,
        }
    }
}

#[derive(Debug, Arbitrary)]
struct MpaIn {
    reply: bool,
    flags: [bool; 3],
    reserved: u8,
    revision: u8,
    enhanced: Option<EnhancedIn>,
    private_data: Vec<u8>,
}

#[derive(Debug, Arbitrary)]
enum BufferIn {
    Tagged {
        stag: u32,
        to: u64,
    },
    Untagged {
        rsvd_ulp: u32,
        qn: u32,
        msn: u32,
        mo: u32,
    },
}

#[derive(Debug, Arbitrary)]
struct DdpIn {
    last: bool,
    reserved: u8,
    version: u8,
    rsvd_ulp: u8,
    buffer: BufferIn,
}

impl DdpIn {
    fn repr(&self) -> ddp::Repr {
        ddp::Repr {
            last: self.last,
            reserved: self.reserved & 0x0F,
            version: self.version & 0x03,
            rsvd_ulp: self.rsvd_ulp,
            buffer: match self.buffer {
                BufferIn::Tagged { stag, to } => ddp::Buffer::Tagged { stag, to },
                BufferIn::Untagged {
                    rsvd_ulp,
                    qn,
                    msn,
                    mo,
                } => ddp::Buffer::Untagged {
                    rsvd_ulp,
                    qn,
                    msn,
                    mo,
                },
            },
        }
    }
}

#[derive(Debug, Arbitrary)]
struct TermIn {
    siw: bool,
    layer: u8,
    etype: u8,
    ecode: u8,
    reserved: u16,
    m: bool,
    length: u16,
    /// The echoed DDP header: tagged (14 octets) or untagged (18).
    ddp_header: Option<(bool, [u8; 18])>,
    rdma_header: Option<Vec<u8>>,
}

struct TermOwned {
    ddp_header: Option<Vec<u8>>,
    rdma_header: Option<Vec<u8>>,
}

impl TermIn {
    fn owned(&self) -> TermOwned {
        TermOwned {
            ddp_header: self.ddp_header.map(|(tagged, mut bytes)| {
                if tagged {
                    bytes[0] |= 0x80;
                    bytes[..ddp::TAGGED_HEADER_LEN].to_vec()
                } else {
                    bytes[0] &= 0x7F;
                    bytes.to_vec()
                }
            }),
            rdma_header: self.rdma_header.clone().filter(|h| !h.is_empty()),
        }
    }

    fn repr<'a>(&self, owned: &'a TermOwned) -> term::Repr<'a> {
        let has_length = self.m || owned.ddp_header.is_some();
        term::Repr {
            encoding: if self.siw {
                term::Encoding::SiwBitfield
            } else {
                term::Encoding::Rfc5040
            },
            layer: term::Layer::from(self.layer & 0x0F),
            etype: self.etype & 0x0F,
            ecode: self.ecode,
            reserved: self.reserved & term::RESERVED_MAX,
            segment_length_valid: self.m,
            ddp_segment_length: if has_length { self.length } else { 0 },
            ddp_header: owned.ddp_header.as_deref(),
            rdma_header: owned.rdma_header.as_deref(),
        }
    }
}

#[derive(Debug, Arbitrary)]
struct AtomicRequestIn {
    reserved: u32,
    opcode: u8,
    request_id: u32,
    remote_stag: u32,
    remote_to: u64,
    operands: [u64; 4],
}

impl AtomicRequestIn {
    fn repr(&self) -> atomic::RequestRepr {
        atomic::RequestRepr {
            reserved: self.reserved & atomic::RESERVED_MAX,
            opcode: atomic::AtomicOpcode::from(self.opcode & 0x0F),
            request_id: self.request_id,
            remote_stag: self.remote_stag,
            remote_to: self.remote_to,
            add_or_swap_data: self.operands[0],
            add_or_swap_mask: self.operands[1],
            compare_data: self.operands[2],
            compare_mask: self.operands[3],
        }
    }
}

#[derive(Debug, Arbitrary)]
struct MessageIn {
    opcode: u8,
    version: u8,
    reserved: u8,
    ddp: DdpIn,
    term: TermIn,
    read_request: [u64; 4],
    immediate: [u8; 8],
    atomic_request: AtomicRequestIn,
    atomic_response: (u32, u64),
    payload: Vec<u8>,
}

fn check_mpa(input: &MpaIn) {
    let room =
        mpa_rr::PRIVATE_DATA_LEN_MAX - input.enhanced.as_ref().map_or(0, |_| mpa_rr::ENHANCED_LEN);
    let private_data = &input.private_data[..input.private_data.len().min(room)];
    let repr = mpa_rr::Repr {
        kind: if input.reply {
            mpa_rr::FrameKind::Reply
        } else {
            mpa_rr::FrameKind::Request
        },
        markers: input.flags[0],
        crc: input.flags[1],
        reject: input.flags[2],
        reserved: input.reserved & 0x0F,
        revision: input.revision,
        enhanced: input.enhanced.as_ref().map(EnhancedIn::repr),
        private_data,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut mpa_rr::Packet::new_unchecked(&mut out[..]));
    let packet = mpa_rr::Packet::new_checked(&out[..]).expect("emitted frame fits");
    assert_eq!(packet.frame_len(), out.len());
    let parsed = mpa_rr::Repr::parse(&packet).expect("emitted frame parses");
    assert_eq!(parsed, repr);
    let _ = parsed.to_string();
    let mut again = vec![0u8; parsed.buffer_len()];
    parsed.emit(&mut mpa_rr::Packet::new_unchecked(&mut again[..]));
    assert_eq!(again, out);
}

fn check_fpdu(ulpdu: &[u8], crc: bool) {
    let repr = mpa_fpdu::Repr { ulpdu };
    let mut out = vec![0x5Au8; repr.buffer_len()];
    repr.emit(&mut mpa_fpdu::Packet::new_unchecked(&mut out[..]), crc);
    assert_eq!(out.len() % 4, 0);
    let packet = mpa_fpdu::Packet::new_checked(&out[..]).expect("emitted FPDU fits");
    assert_eq!(packet.total_len(), out.len());
    assert!(packet.pad().iter().all(|&b| b == 0));
    assert_eq!(
        packet.crc() == packet.compute_crc(),
        crc || packet.compute_crc() == 0
    );
    let parsed = mpa_fpdu::Repr::parse(&packet, crc).expect("emitted FPDU parses");
    assert_eq!(parsed, repr);
    let mut again = vec![0u8; parsed.buffer_len()];
    parsed.emit(&mut mpa_fpdu::Packet::new_unchecked(&mut again[..]), crc);
    assert_eq!(again, out);
}

fn check_term(input: &TermIn) {
    let owned = input.owned();
    let repr = input.repr(&owned);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut term::Packet::new_unchecked(&mut out[..]));
    let packet = term::Packet::new_checked(&out[..]).expect("emitted Terminate has a control word");
    let parsed = term::Repr::parse(&packet, repr.encoding).expect("emitted Terminate parses");
    assert_eq!(parsed, repr);
    let _ = parsed.to_string();
    let _ = term::detect(&packet).expect("detect works on a checked view");
    let mut again = vec![0u8; parsed.buffer_len()];
    parsed.emit(&mut term::Packet::new_unchecked(&mut again[..]));
    assert_eq!(again, out);
}

fn check_message(input: &MessageIn) {
    let opcode = rdmap::Opcode::from(input.opcode & 0x0F);
    let mut ddp = input.ddp.repr();
    ddp.rsvd_ulp = Control {
        version: input.version & 3,
        reserved: input.reserved & 3,
        opcode,
    }
    .to_octet();
    let info = opcode.info();
    if let Some(info) = info {
        // Give the opcode its buffer model, keeping the fuzzer's numbers.
        ddp.buffer = match (info.tagged, ddp.buffer) {
            (true, ddp::Buffer::Untagged { qn, mo, .. }) => ddp::Buffer::Tagged {
                stag: qn,
                to: u64::from(mo),
            },
            (false, ddp::Buffer::Tagged { stag, to }) => ddp::Buffer::Untagged {
                rsvd_ulp: stag,
                qn: to as u32,
                msn: (to >> 32) as u32,
                mo: 0,
            },
            (_, same) => same,
        };
    }
    let kind = info.map_or(HeaderKind::None, |i| i.header);
    let owned = input.term.owned();
    let n = input.read_request;
    let header = match kind {
        HeaderKind::None => rdmap::Header::None,
        HeaderKind::ReadRequest => rdmap::Header::ReadRequest(rdmap::ReadRequestRepr {
            sink_stag: n[0] as u32,
            sink_to: n[1],
            read_size: (n[0] >> 32) as u32,
            source_stag: n[2] as u32,
            source_to: n[3],
        }),
        HeaderKind::Terminate => rdmap::Header::Terminate(input.term.repr(&owned)),
        HeaderKind::Immediate => rdmap::Header::Immediate(input.immediate),
        HeaderKind::AtomicRequest => rdmap::Header::AtomicRequest(input.atomic_request.repr()),
        HeaderKind::AtomicResponse => rdmap::Header::AtomicResponse(atomic::ResponseRepr {
            original_request_id: input.atomic_response.0,
            original_remote_value: input.atomic_response.1,
        }),
    };
    let payload: &[u8] = if kind == HeaderKind::None {
        &input.payload
    } else {
        &[]
    };
    let repr = rdmap::Repr {
        ddp,
        header,
        payload,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ddp::Packet::new_unchecked(&mut out[..]));
    let packet = ddp::Packet::new_checked(&out[..]).expect("emitted segment has its header");
    let reading = match repr.header {
        rdmap::Header::Terminate(t) => TermReading::Fixed(t.encoding),
        _ => TermReading::Detect,
    };
    let parsed = rdmap::Repr::parse_with(&packet, reading).expect("emitted message parses");
    assert_eq!(parsed, repr);
    let _ = parsed.to_string();
    let mut again = vec![0u8; parsed.buffer_len()];
    parsed.emit(&mut ddp::Packet::new_unchecked(&mut again[..]));
    assert_eq!(again, out);
    // Detect may pick the other layout for a Terminate, but then it must
    // still describe these very octets.
    if let Ok(detected) = rdmap::Repr::parse(&packet) {
        let mut again = vec![0u8; detected.buffer_len()];
        detected.emit(&mut ddp::Packet::new_unchecked(&mut again[..]));
        assert_eq!(again, out);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(case) = Case::arbitrary(&mut u) else {
        return;
    };
    match &case {
        Case::Mpa(m) => check_mpa(m),
        Case::Fpdu { ulpdu, crc } => {
            check_fpdu(&ulpdu[..ulpdu.len().min(usize::from(u16::MAX))], *crc)
        }
        Case::Marker { reserved, fpduptr } => {
            let repr = mpa_marker::Repr {
                reserved: *reserved,
                fpduptr: *fpduptr,
            };
            let mut out = [0u8; mpa_marker::MARKER_LEN];
            repr.emit(&mut mpa_marker::Packet::new_unchecked(&mut out[..]));
            let parsed =
                mpa_marker::Repr::parse(&mpa_marker::Packet::new_checked(&out[..]).unwrap())
                    .unwrap();
            assert_eq!(parsed, repr);
        }
        Case::Ddp(d) => {
            let repr = d.repr();
            let mut out = vec![0u8; repr.header_len()];
            repr.emit(&mut ddp::Packet::new_unchecked(&mut out[..]));
            let parsed = ddp::Repr::parse(&ddp::Packet::new_checked(&out[..]).unwrap()).unwrap();
            assert_eq!(parsed, repr);
            let _ = parsed.to_string();
        }
        Case::Message(m) => check_message(m),
        Case::Term(t) => check_term(t),
        Case::AtomicRequest(a) => {
            let repr = a.repr();
            let mut out = [0u8; atomic::REQUEST_HEADER_LEN];
            repr.emit(&mut atomic::RequestPacket::new_unchecked(&mut out[..]));
            let parsed =
                atomic::RequestRepr::parse(&atomic::RequestPacket::new_checked(&out[..]).unwrap())
                    .unwrap();
            assert_eq!(parsed, repr);
        }
        Case::AtomicResponse { id, value } => {
            let repr = atomic::ResponseRepr {
                original_request_id: *id,
                original_remote_value: *value,
            };
            let mut out = [0u8; atomic::RESPONSE_HEADER_LEN];
            repr.emit(&mut atomic::ResponsePacket::new_unchecked(&mut out[..]));
            let parsed = atomic::ResponseRepr::parse(
                &atomic::ResponsePacket::new_checked(&out[..]).unwrap(),
            )
            .unwrap();
            assert_eq!(parsed, repr);
        }
    }
});
