//! Property tests for every wire view: `parse(emit(x)) == x` for every
//! representation, `emit(parse(b)) == b` for every byte string a parser
//! accepts, and no panic on arbitrary octets.

use proptest::collection::vec;
use proptest::prelude::*;
use rnic_engine::wire::{
    atomic, ddp, mpa_fpdu, mpa_marker, mpa_rr, pretty, rdmap, term, DdpBuffer, DdpPacket, DdpRepr,
    FpduPacket, FpduRepr, MpaPacket, MpaRepr, RdmapHeader, RdmapOpcode, RdmapRepr,
};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 2048,
        ..ProptestConfig::default()
    }
}

fn enhanced() -> impl Strategy<Value = mpa_rr::EnhancedRepr> {
    (any::<[bool; 4]>(), 0..=0x3FFFu16, 0..=0x3FFFu16).prop_map(|(f, ird, ord)| {
        mpa_rr::EnhancedRepr {
            peer_to_peer: f[0],
            rtr_send: f[1],
            rtr_write: f[2],
            rtr_read: f[3],
            ird,
            ord,
        }
    })
}

/// An MPA frame's fields, owning its private data.
#[derive(Debug, Clone)]
struct MpaFields {
    reply: bool,
    flags: [bool; 3],
    reserved: u8,
    revision: u8,
    enhanced: Option<mpa_rr::EnhancedRepr>,
    private_data: Vec<u8>,
}

impl MpaFields {
    fn repr(&self) -> MpaRepr<'_> {
        MpaRepr {
            kind: if self.reply {
                mpa_rr::FrameKind::Reply
            } else {
                mpa_rr::FrameKind::Request
            },
            markers: self.flags[0],
            crc: self.flags[1],
            reject: self.flags[2],
            reserved: self.reserved,
            revision: self.revision,
            enhanced: self.enhanced,
            private_data: &self.private_data,
        }
    }
}

fn mpa_fields() -> impl Strategy<Value = MpaFields> {
    (
        any::<bool>(),
        any::<[bool; 3]>(),
        0..16u8,
        any::<u8>(),
        proptest::option::of(enhanced()),
    )
        .prop_flat_map(|(reply, flags, reserved, revision, enhanced)| {
            let room = mpa_rr::PRIVATE_DATA_LEN_MAX - enhanced.map_or(0, |_| 4);
            vec(any::<u8>(), 0..=room).prop_map(move |private_data| MpaFields {
                reply,
                flags,
                reserved,
                revision,
                enhanced,
                private_data,
            })
        })
}

fn ddp_repr() -> impl Strategy<Value = DdpRepr> {
    let tagged = (any::<u32>(), any::<u64>()).prop_map(|(stag, to)| DdpBuffer::Tagged { stag, to });
    let untagged = any::<[u32; 4]>().prop_map(|[rsvd_ulp, qn, msn, mo]| DdpBuffer::Untagged {
        rsvd_ulp,
        qn,
        msn,
        mo,
    });
    (
        any::<bool>(),
        0..16u8,
        0..4u8,
        any::<u8>(),
        prop_oneof![tagged, untagged],
    )
        .prop_map(|(last, reserved, version, rsvd_ulp, buffer)| DdpRepr {
            last,
            reserved,
            version,
            rsvd_ulp,
            buffer,
        })
}

/// A Terminate header's fields, owning the echoed headers.
#[derive(Debug, Clone)]
struct TermFields {
    siw: bool,
    layer: u8,
    etype: u8,
    ecode: u8,
    reserved: u16,
    m: bool,
    length: u16,
    ddp_header: Option<Vec<u8>>,
    rdma_header: Option<Vec<u8>>,
}

impl TermFields {
    fn repr(&self) -> term::Repr<'_> {
        let has_length = self.m || self.ddp_header.is_some();
        term::Repr {
            encoding: if self.siw {
                term::Encoding::SiwBitfield
            } else {
                term::Encoding::Rfc5040
            },
            layer: term::Layer::from(self.layer),
            etype: self.etype,
            ecode: self.ecode,
            reserved: self.reserved,
            segment_length_valid: self.m,
            ddp_segment_length: if has_length { self.length } else { 0 },
            ddp_header: self.ddp_header.as_deref(),
            rdma_header: self.rdma_header.as_deref(),
        }
    }
}

fn echoed_ddp_header() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        vec(any::<u8>(), 14).prop_map(tag(true)),
        vec(any::<u8>(), 18).prop_map(tag(false))
    ]
}

fn tag(tagged: bool) -> impl Fn(Vec<u8>) -> Vec<u8> {
    move |mut header| {
        header[0] = if tagged {
            header[0] | 0x80
        } else {
            header[0] & 0x7f
        };
        header
    }
}

fn term_fields() -> impl Strategy<Value = TermFields> {
    (
        (
            any::<bool>(),
            0..16u8,
            0..16u8,
            any::<u8>(),
            0..=term::RESERVED_MAX,
        ),
        (any::<bool>(), any::<u16>()),
        proptest::option::of(echoed_ddp_header()),
        proptest::option::of(vec(any::<u8>(), 1..60)),
    )
        .prop_map(
            |((siw, layer, etype, ecode, reserved), (m, length), ddp_header, rdma_header)| {
                TermFields {
                    siw,
                    layer,
                    etype,
                    ecode,
                    reserved,
                    m,
                    length,
                    ddp_header,
                    rdma_header,
                }
            },
        )
}

fn atomic_request() -> impl Strategy<Value = atomic::RequestRepr> {
    (
        0..=atomic::RESERVED_MAX,
        0..16u8,
        any::<[u32; 2]>(),
        any::<[u64; 5]>(),
    )
        .prop_map(
            |(reserved, opcode, [request_id, remote_stag], [remote_to, a, b, c, d])| {
                atomic::RequestRepr {
                    reserved,
                    opcode: atomic::AtomicOpcode::from(opcode),
                    request_id,
                    remote_stag,
                    remote_to,
                    add_or_swap_data: a,
                    add_or_swap_mask: b,
                    compare_data: c,
                    compare_mask: d,
                }
            },
        )
}

/// One RDMAP message's fields, owning what the representation borrows.
#[derive(Debug, Clone)]
struct MessageFields {
    ddp: DdpRepr,
    term: Option<TermFields>,
    header: OwnedHeader,
    payload: Vec<u8>,
}

#[derive(Debug, Clone)]
enum OwnedHeader {
    None,
    ReadRequest(rdmap::ReadRequestRepr),
    Terminate,
    Immediate([u8; 8]),
    AtomicRequest(atomic::RequestRepr),
    AtomicResponse(atomic::ResponseRepr),
}

impl MessageFields {
    fn repr(&self) -> RdmapRepr<'_> {
        let header = match &self.header {
            OwnedHeader::None => RdmapHeader::None,
            OwnedHeader::ReadRequest(r) => RdmapHeader::ReadRequest(*r),
            OwnedHeader::Terminate => RdmapHeader::Terminate(self.term.as_ref().unwrap().repr()),
            OwnedHeader::Immediate(d) => RdmapHeader::Immediate(*d),
            OwnedHeader::AtomicRequest(a) => RdmapHeader::AtomicRequest(*a),
            OwnedHeader::AtomicResponse(a) => RdmapHeader::AtomicResponse(*a),
        };
        RdmapRepr {
            ddp: self.ddp,
            header,
            payload: &self.payload,
        }
    }
}

fn message() -> impl Strategy<Value = MessageFields> {
    (
        0..16u8,
        0..4u8,
        ddp_repr(),
        term_fields(),
        vec(any::<u8>(), 0..300),
        any::<[u64; 4]>(),
    )
        .prop_map(|(opcode, rv, mut ddp, term, payload, n)| {
            let op = RdmapOpcode::from(opcode);
            ddp.rsvd_ulp = rdmap::Control {
                version: rv,
                reserved: 0,
                opcode: op,
            }
            .to_octet();
            let info = op.info();
            if let Some(info) = info {
                ddp.buffer = match (info.tagged, ddp.buffer) {
                    (true, DdpBuffer::Untagged { qn, mo, .. }) => DdpBuffer::Tagged {
                        stag: qn,
                        to: u64::from(mo),
                    },
                    (false, DdpBuffer::Tagged { stag, to }) => DdpBuffer::Untagged {
                        rsvd_ulp: stag,
                        qn: 0,
                        msn: to as u32,
                        mo: 0,
                    },
                    (_, same) => same,
                };
            }
            let kind = info.map_or(rdmap::HeaderKind::None, |i| i.header);
            let header = owned_header(kind, n);
            let payload = if kind == rdmap::HeaderKind::None {
                payload
            } else {
                Vec::new()
            };
            MessageFields {
                ddp,
                term: Some(term),
                header,
                payload,
            }
        })
}

fn owned_header(kind: rdmap::HeaderKind, n: [u64; 4]) -> OwnedHeader {
    match kind {
        rdmap::HeaderKind::None => OwnedHeader::None,
        rdmap::HeaderKind::ReadRequest => OwnedHeader::ReadRequest(rdmap::ReadRequestRepr {
            sink_stag: n[0] as u32,
            sink_to: n[1],
            read_size: (n[0] >> 32) as u32,
            source_stag: n[2] as u32,
            source_to: n[3],
        }),
        rdmap::HeaderKind::Terminate => OwnedHeader::Terminate,
        rdmap::HeaderKind::Immediate => OwnedHeader::Immediate(n[0].to_be_bytes()),
        rdmap::HeaderKind::AtomicRequest => {
            OwnedHeader::AtomicRequest(atomic::RequestRepr::cmp_swap(
                n[0] as u32,
                n[1] as u32,
                n[2],
                (n[3], n[0]),
                (n[1], n[2]),
            ))
        }
        rdmap::HeaderKind::AtomicResponse => OwnedHeader::AtomicResponse(atomic::ResponseRepr {
            original_request_id: n[0] as u32,
            original_remote_value: n[1],
        }),
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mpa_frame_round_trips(fields in mpa_fields()) {
        let repr = fields.repr();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut MpaPacket::new_unchecked(&mut out[..]));
        let packet = MpaPacket::new_checked(&out[..]).unwrap();
        prop_assert_eq!(packet.frame_len(), out.len());
        prop_assert_eq!(MpaRepr::parse(&packet).unwrap(), repr);
    }

    #[test]
    fn mpa_frame_bytes_round_trip(bytes in vec(any::<u8>(), 0..600), key in 0..3u8) {
        let mut bytes = bytes;
        if bytes.len() >= 20 && key < 2 {
            let kind = if key == 0 { mpa_rr::FrameKind::Request } else { mpa_rr::FrameKind::Reply };
            bytes[..16].copy_from_slice(kind.key());
            let room = (bytes.len() - 20).min(512) as u16;
            let pd_len = u16::from_be_bytes([bytes[18], bytes[19]]) % (room + 1);
            bytes[18..20].copy_from_slice(&pd_len.to_be_bytes());
        }
        if let Ok(packet) = MpaPacket::new_checked(&bytes[..]) {
            if let Ok(repr) = MpaRepr::parse(&packet) {
                let _ = repr.to_string();
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut MpaPacket::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..packet.frame_len()]);
            }
        }
    }

    #[test]
    fn fpdu_round_trips(ulpdu in vec(any::<u8>(), 0..3000), crc in any::<bool>()) {
        let repr = FpduRepr { ulpdu: &ulpdu };
        let mut out = vec![0xA5u8; repr.buffer_len()];
        repr.emit(&mut FpduPacket::new_unchecked(&mut out[..]), crc);
        prop_assert_eq!(out.len() % 4, 0);
        let packet = FpduPacket::new_checked(&out[..]).unwrap();
        prop_assert_eq!(packet.total_len(), out.len());
        prop_assert_eq!(packet.verify_crc(), crc);
        prop_assert!(packet.pad().iter().all(|&b| b == 0));
        prop_assert_eq!(FpduRepr::parse(&packet, crc).unwrap(), repr);
    }

    #[test]
    fn fpdu_arbitrary_bytes(bytes in vec(any::<u8>(), 0..300)) {
        if let Ok(packet) = FpduPacket::new_checked(&bytes[..]) {
            let _ = (packet.ulpdu(), packet.pad(), packet.crc(), packet.verify_crc());
            prop_assert!(packet.total_len() <= bytes.len());
            let _ = FpduRepr::parse(&packet, true);
            let _ = pretty::Ulpdu(packet.ulpdu()).to_string();
        }
    }

    #[test]
    fn marker_round_trips(reserved in any::<u16>(), fpduptr in any::<u16>()) {
        let repr = mpa_marker::Repr { reserved, fpduptr };
        let mut out = [0u8; 4];
        repr.emit(&mut mpa_marker::Packet::new_unchecked(&mut out[..]));
        prop_assert_eq!(mpa_marker::Repr::parse(&mpa_marker::Packet::new_checked(&out[..]).unwrap()).unwrap(), repr);
    }

    #[test]
    fn marker_stream_len_matches_pieces(start in 0..4096u64, len in 0..5000usize) {
        prop_assume!(mpa_marker::is_fpdu_start(start));
        let wire = mpa_marker::stream_len(start, len);
        let octets = vec![0u8; wire];
        let data: usize = mpa_marker::Pieces::new(start, &octets)
            .map(|p| match p { mpa_marker::Piece::Data(d) => d.len(), _ => 0 })
            .sum();
        prop_assert_eq!(data, len);
        // The FPDU ends on a data octet: the next position is not inside a marker.
        prop_assert!(mpa_marker::is_fpdu_start(start + wire as u64));
    }

    #[test]
    fn ddp_header_round_trips(repr in ddp_repr()) {
        let mut out = vec![0u8; repr.header_len()];
        repr.emit(&mut DdpPacket::new_unchecked(&mut out[..]));
        prop_assert_eq!(DdpRepr::parse(&DdpPacket::new_checked(&out[..]).unwrap()).unwrap(), repr);
    }

    #[test]
    fn terminate_round_trips(fields in term_fields()) {
        let repr = fields.repr();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut term::Packet::new_unchecked(&mut out[..]));
        let packet = term::Packet::new_checked(&out[..]).unwrap();
        prop_assert_eq!(term::Repr::parse(&packet, repr.encoding).unwrap(), repr);
        let _ = term::detect(&packet).unwrap();
    }

    #[test]
    fn atomic_request_round_trips(repr in atomic_request()) {
        let mut out = [0u8; atomic::REQUEST_HEADER_LEN];
        repr.emit(&mut atomic::RequestPacket::new_unchecked(&mut out[..]));
        let packet = atomic::RequestPacket::new_checked(&out[..]).unwrap();
        prop_assert_eq!(atomic::RequestRepr::parse(&packet).unwrap(), repr);
    }

    #[test]
    fn rdmap_message_round_trips(fields in message()) {
        let repr = fields.repr();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut DdpPacket::new_unchecked(&mut out[..]));
        let packet = DdpPacket::new_checked(&out[..]).unwrap();
        let reading = match repr.header {
            RdmapHeader::Terminate(t) => rdmap::TermReading::Fixed(t.encoding),
            _ => rdmap::TermReading::Detect,
        };
        prop_assert_eq!(RdmapRepr::parse_with(&packet, reading).unwrap(), repr);
        let _ = repr.to_string();
    }

    #[test]
    fn rdmap_arbitrary_bytes_round_trip(bytes in vec(any::<u8>(), 0..200)) {
        let Ok(packet) = DdpPacket::new_checked(&bytes[..]) else { return Ok(()) };
        let _ = pretty::Ulpdu(&bytes).to_string();
        for reading in [
            rdmap::TermReading::Detect,
            rdmap::TermReading::Fixed(term::Encoding::Rfc5040),
            rdmap::TermReading::Fixed(term::Encoding::SiwBitfield),
        ] {
            if let Ok(repr) = RdmapRepr::parse_with(&packet, reading) {
                let mut out = vec![0u8; repr.buffer_len()];
                repr.emit(&mut DdpPacket::new_unchecked(&mut out[..]));
                prop_assert_eq!(&out[..], &bytes[..]);
            }
        }
    }

    #[test]
    fn every_view_survives_arbitrary_bytes(bytes in vec(any::<u8>(), 0..128)) {
        if let Ok(p) = mpa_rr::EnhancedPacket::new_checked(&bytes[..]) {
            let _ = mpa_rr::EnhancedRepr::parse(&p).unwrap();
        }
        if let Ok(p) = term::Packet::new_checked(&bytes[..]) {
            let _ = term::detect(&p).unwrap();
            for e in [term::Encoding::Rfc5040, term::Encoding::SiwBitfield] {
                if let Ok(r) = term::Repr::parse(&p, e) {
                    let _ = r.to_string();
                }
            }
        }
        if let Ok(p) = atomic::RequestPacket::new_checked(&bytes[..]) {
            let _ = atomic::RequestRepr::parse(&p).unwrap().to_string();
        }
        if let Ok(p) = atomic::ResponsePacket::new_checked(&bytes[..]) {
            let _ = atomic::ResponseRepr::parse(&p).unwrap().to_string();
        }
        if let Ok(p) = rdmap::ReadRequestPacket::new_checked(&bytes[..]) {
            let _ = rdmap::ReadRequestRepr::parse(&p).unwrap().to_string();
        }
        if let Ok(p) = mpa_marker::Packet::new_checked(&bytes[..]) {
            let _ = mpa_marker::Repr::parse(&p).unwrap().to_string();
        }
        let _ = mpa_fpdu::fpdu_len(bytes.len());
        let _ = ddp::Packet::new_checked(&bytes[..]).map(|p| DdpRepr::parse(&p));
    }
}
