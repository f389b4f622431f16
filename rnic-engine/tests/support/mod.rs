//! Helpers shared by the engine tests: pairs, patterns, raw segments for
//! injection, and completion and event checks.

#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::pair::{Link, PairConfig, RnicPair};
use rnic_engine::verbs::{
    Mr, QpEvent, QpHandle, RecvWr, RemoteAddr, SendOp, SendWr, Sge, TermInfo,
};
use rnic_engine::wire::ddp;
use rnic_engine::wire::rdmap::{self, Control, Header, Opcode};

/// Enough steps for any test transfer (1 MiB is about 750 segments).
pub const STEPS: usize = 100_000;

/// Every access a test region may need.
pub const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// Octets that differ at every position and between seeds.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(u32::from(seed % 31)) as u8
                ^ seed
        })
        .collect()
}

/// The configurations every data test runs in: CRC and markers on and
/// off, segments delivered whole and cut into random pieces, FPDUs sized
/// to MULPDU and aligned to the TCP segments the link models; and DDP over
/// SCTP, messages delivered in order and out of order.
pub fn configs() -> Vec<PairConfig> {
    let base = PairConfig::default();
    vec![
        PairConfig {
            crc: true,
            markers: false,
            cut_max: 0,
            ..base
        },
        PairConfig {
            crc: false,
            markers: true,
            cut_max: 97,
            seed: 5,
            ..base
        },
        PairConfig {
            crc: true,
            markers: true,
            cut_max: 7,
            seed: 9,
            ..base
        },
        PairConfig {
            crc: false,
            markers: false,
            cut_max: 1500,
            seed: 3,
            emss: 9000,
            ..base
        },
        // Jumbo FPDUs with CRC: the engine frames these in one pass from
        // registered memory (`Framer::frame_shared`), markers or not.
        PairConfig {
            crc: true,
            markers: false,
            cut_max: 1500,
            seed: 19,
            emss: 9000,
            ..base
        },
        PairConfig {
            crc: true,
            markers: true,
            cut_max: 300,
            seed: 23,
            emss: 9000,
            ..base
        },
        // FPDUs aligned to TCP segments the link models, from a random
        // start: small FPDUs before full ones in a segment shrink these.
        PairConfig {
            crc: true,
            markers: true,
            cut_max: 200,
            seed: 11,
            emss: 1460,
            link: Link::Segments,
            ..base
        },
        // DDP over SCTP (RFC 5043): one message per DDP segment, 1,444
        // octets at most (MTU 1500 over UDP), in order and shuffled.
        PairConfig {
            emss: rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
            link: Link::Messages,
            ..base
        },
        PairConfig {
            emss: rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
            window: 6 * rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
            seed: 13,
            link: Link::MessagesShuffled,
            ..base
        },
        PairConfig {
            emss: rnic_engine::sctp::message_max(9000).unwrap(),
            window: 20_000,
            seed: 17,
            link: Link::MessagesShuffled,
            ..base
        },
    ]
}

/// The framer's MULPDU for a configuration.
pub fn mulpdu(config: &PairConfig) -> usize {
    if config.link.is_messages() {
        return config.emss - rnic_engine::sctp::SSN_LEN;
    }
    Framer::new(TxConfig {
        crc: config.crc,
        markers: config.markers,
        emss: config.emss,
    })
    .unwrap()
    .mulpdu()
}

/// A pair, or a panic saying which configuration failed.
pub fn pair(config: PairConfig) -> RnicPair {
    RnicPair::new(config).unwrap_or_else(|e| panic!("pair {config:?}: {e}"))
}

/// An SGE covering `len` octets of `mr` from `offset`.
pub fn sge(mr: &Mr, offset: usize, len: usize) -> Sge {
    Sge {
        stag: mr.stag,
        to: mr.base_to + offset as u64,
        len: len as u32,
    }
}

/// The peer address of octet `offset` of `mr`.
pub fn remote(mr: &Mr, offset: usize) -> RemoteAddr {
    RemoteAddr {
        stag: mr.stag,
        to: mr.base_to + offset as u64,
    }
}

/// A signaled work request.
pub fn wr<'a>(wr_id: u64, op: SendOp, sgl: &'a [Sge]) -> SendWr<'a> {
    SendWr::signaled(wr_id, op, sgl)
}

/// A receive.
pub fn recv(wr_id: u64, sgl: &[Sge]) -> RecvWr<'_> {
    RecvWr { wr_id, sgl }
}

/// Checks one successful completion.
#[track_caller]
pub fn assert_wc(wc: &Wc, wr_id: u64, opcode: WcOpcode, byte_len: usize) {
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (wr_id, WcStatus::Success, opcode, byte_len as u32),
        "{wc:?}"
    );
}

/// Every event of a QP (the side's first QP when `None`).
pub fn events(pair: &mut RnicPair, a_side: bool, qp: Option<QpHandle>) -> Vec<QpEvent> {
    let side = if a_side { &mut pair.a } else { &mut pair.b };
    let qp = qp.unwrap_or(side.qp);
    std::iter::from_fn(|| side.rnic.poll_event(qp).unwrap()).collect()
}

/// The three numbers of a Terminate.
pub fn info((layer, etype, ecode): (u8, u8, u8)) -> TermInfo {
    TermInfo {
        layer,
        etype,
        ecode,
    }
}

/// A DDP segment with everything chosen by the caller.
pub fn raw(
    control: Control,
    last: bool,
    version: u8,
    buffer: ddp::Buffer,
    header: Header<'_>,
    payload: &[u8],
) -> Vec<u8> {
    let repr = rdmap::Repr {
        ddp: ddp::Repr {
            last,
            reserved: 0,
            version,
            rsvd_ulp: control.to_octet(),
            buffer,
        },
        header,
        payload,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ddp::Packet::new_unchecked(&mut out[..]));
    out
}

/// A well-formed untagged segment, the last of its message.
pub fn untagged(
    opcode: Opcode,
    qn: u32,
    msn: u32,
    mo: u32,
    header: Header<'_>,
    payload: &[u8],
) -> Vec<u8> {
    let buffer = ddp::Buffer::Untagged {
        rsvd_ulp: 0,
        qn,
        msn,
        mo,
    };
    raw(
        Control::new(opcode),
        true,
        ddp::VERSION,
        buffer,
        header,
        payload,
    )
}

/// A well-formed tagged segment, the last of its message.
pub fn tagged(opcode: Opcode, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    raw(
        Control::new(opcode),
        true,
        ddp::VERSION,
        ddp::Buffer::Tagged { stag, to },
        Header::None,
        payload,
    )
}

/// A zeroed region on side b of `len` octets with `access`, its MR, and a
/// zeroed region of the same size on side a with every access, its MR.
pub fn regions(
    pair: &mut RnicPair,
    len: usize,
    access: Access,
) -> (Arc<Region>, Mr, Arc<Region>, Mr) {
    let (b_region, b_mr) = pair.b.region(len, access).unwrap();
    let (a_region, a_mr) = pair.a.region(len, ALL).unwrap();
    (b_region, b_mr, a_region, a_mr)
}
