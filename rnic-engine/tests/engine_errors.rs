//! Every bad input of the error lists of RFC 5040 §7, RFC 5041 §7 and
//! draft-ietf-storm-rdmap-ext-00 §8 (RFC 7306): what a broken or hostile peer
//! sends is answered with the specified Terminate, the peer reports the same
//! layer/type/code, the QP's outstanding work completes in error, and the other
//! QPs keep working.
//!
//! Bad segments are sent with `Rnic::inject_ulpdu` from side `a`, through
//! its real framer (so markers and CRC stay right), into side `b`.

mod support;

use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::Access;
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::pair::{Link, PairConfig, RnicPair};
use rnic_engine::verbs::{Mr, QpEvent, QpHandle, QpState, SendOp};
use rnic_engine::wire::atomic::{AtomicOpcode, RequestRepr};
use rnic_engine::wire::rdmap::{self, Control, Header, Opcode, ReadRequestRepr};
use rnic_engine::wire::{ddp, term};
use support::*;

/// Side b's buffers the bad segments aim at.
struct Target {
    /// Remote write only.
    write: Mr,
    /// Remote read only.
    read: Mr,
    /// Remote atomic only.
    atomic: Mr,
    /// Remote write, in another protection domain.
    other_pd: Mr,
}

fn setup(config: PairConfig, post_recv: bool) -> (RnicPair, Target, (QpHandle, QpHandle)) {
    let mut pair = pair(config);
    let second = pair.add_qp().unwrap();
    let (_, write) = pair.b.region(64, Access::REMOTE_WRITE).unwrap();
    let (_, read) = pair.b.region(64, Access::REMOTE_READ).unwrap();
    let (_, atomic) = pair.b.region(64, Access::REMOTE_ATOMIC).unwrap();
    let pd = pair.b.rnic.alloc_pd().unwrap();
    let region = rnic_engine::mem::Region::new(64);
    let other_pd = pair
        .b
        .rnic
        .reg_region(pd, region, Access::REMOTE_WRITE)
        .unwrap();
    if post_recv {
        let (_, recv_mr) = pair.b.region(16, Access::LOCAL_WRITE).unwrap();
        pair.b
            .rnic
            .post_recv(pair.b.qp, &recv(1, &[sge(&recv_mr, 0, 16)]))
            .unwrap();
    }
    (
        pair,
        Target {
            write,
            read,
            atomic,
            other_pd,
        },
        second,
    )
}

fn send(qn: u32, msn: u32, mo: u32, payload: &[u8]) -> Vec<u8> {
    untagged(Opcode::Send, qn, msn, mo, Header::None, payload)
}

fn read_request(msn: u32, source_stag: u32, source_to: u64, read_size: u32) -> Vec<u8> {
    let request = ReadRequestRepr {
        sink_stag: 0x1234_5600,
        sink_to: 0,
        read_size,
        source_stag,
        source_to,
    };
    untagged(
        Opcode::RdmaReadRequest,
        ddp::qn::READ_REQUEST,
        msn,
        0,
        Header::ReadRequest(request),
        &[],
    )
}

fn atomic(mr: &Mr, to: u64, opcode: AtomicOpcode) -> Vec<u8> {
    let mut request = RequestRepr::fetch_add(1, mr.stag, to, 1, 0);
    request.opcode = opcode;
    untagged(
        Opcode::AtomicRequest,
        ddp::qn::READ_REQUEST,
        1,
        0,
        Header::AtomicRequest(request),
        &[],
    )
}

fn send_with_invalidate(stag: u32) -> Vec<u8> {
    let buffer = ddp::Buffer::Untagged {
        rsvd_ulp: stag,
        qn: 0,
        msn: 1,
        mo: 0,
    };
    raw(
        Control::new(Opcode::SendWithInvalidate),
        true,
        ddp::VERSION,
        buffer,
        Header::None,
        b"x",
    )
}

/// Builds the bad segments of a case.
type Build = Box<dyn Fn(&Target) -> Vec<Vec<u8>>>;
type Case = (&'static str, Build, (u8, u8, u8));

fn cases() -> Vec<Case> {
    let one = |f: fn(&Target) -> Vec<u8>| -> Build { Box::new(move |t| vec![f(t)]) };
    vec![
        // DDP local catastrophic (layer 1, type 0): siw's code for a Read
        // Response while no Read is outstanding.
        (
            "read response nobody asked for",
            one(|_| tagged(Opcode::RdmaReadResponse, 0x4242, 0, b"data")),
            (1, 0, 0),
        ),
        // DDP tagged buffer errors (layer 1, type 1).
        (
            "write: invalid STag",
            one(|t| {
                tagged(
                    Opcode::RdmaWrite,
                    t.write.stag.wrapping_add(0x100),
                    0,
                    b"data",
                )
            }),
            (1, 1, 0),
        ),
        (
            "write: stale STag key",
            one(|t| tagged(Opcode::RdmaWrite, t.write.stag ^ 1, 0, b"data")),
            (1, 1, 0),
        ),
        (
            "write: no remote write access",
            one(|t| tagged(Opcode::RdmaWrite, t.read.stag, 0, b"data")),
            (1, 1, 0),
        ),
        (
            "write: past the end",
            one(|t| tagged(Opcode::RdmaWrite, t.write.stag, 61, b"data")),
            (1, 1, 1),
        ),
        (
            "write: other PD",
            one(|t| tagged(Opcode::RdmaWrite, t.other_pd.stag, 0, b"data")),
            (1, 1, 2),
        ),
        (
            "write: TO wraps",
            one(|t| tagged(Opcode::RdmaWrite, t.write.stag, u64::MAX - 1, b"data")),
            (1, 1, 3),
        ),
        (
            "write: DDP version 2",
            one(|t| {
                let buffer = ddp::Buffer::Tagged {
                    stag: t.write.stag,
                    to: 0,
                };
                raw(
                    Control::new(Opcode::RdmaWrite),
                    true,
                    2,
                    buffer,
                    Header::None,
                    b"data",
                )
            }),
            (1, 1, 4),
        ),
        // DDP untagged buffer errors (layer 1, type 2).
        ("send: QN 1", one(|_| send(1, 1, 0, b"data")), (1, 2, 1)),
        ("send: QN 9", one(|_| send(9, 1, 0, b"data")), (1, 2, 1)),
        (
            "send: MSN ahead",
            one(|_| send(0, 2, 0, b"data")),
            (1, 2, 3),
        ),
        (
            "send: MSN behind",
            one(|_| send(0, 0, 0, b"data")),
            (1, 2, 3),
        ),
        (
            "send: MO past the buffer",
            one(|_| send(0, 1, 17, b"data")),
            (1, 2, 4),
        ),
        (
            "send: first segment not at MO 0",
            one(|_| send(0, 1, 5, b"data")),
            (1, 2, 4),
        ),
        (
            "send: a hole between segments",
            Box::new(|_| {
                let buffer = ddp::Buffer::Untagged {
                    rsvd_ulp: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0,
                };
                vec![
                    raw(
                        Control::new(Opcode::Send),
                        false,
                        ddp::VERSION,
                        buffer,
                        Header::None,
                        &[1; 4],
                    ),
                    send(0, 1, 6, &[2; 4]),
                ]
            }),
            (1, 2, 4),
        ),
        (
            "send: longer than the buffer",
            one(|_| send(0, 1, 0, &[7; 17])),
            (1, 2, 5),
        ),
        (
            "send: two segments, too long together",
            Box::new(|_| {
                let buffer = ddp::Buffer::Untagged {
                    rsvd_ulp: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0,
                };
                vec![
                    raw(
                        Control::new(Opcode::Send),
                        false,
                        ddp::VERSION,
                        buffer,
                        Header::None,
                        &[1; 10],
                    ),
                    send(0, 1, 10, &[2; 10]),
                ]
            }),
            (1, 2, 5),
        ),
        (
            "send: DDP version 0",
            one(|_| {
                let buffer = ddp::Buffer::Untagged {
                    rsvd_ulp: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0,
                };
                raw(
                    Control::new(Opcode::Send),
                    true,
                    0,
                    buffer,
                    Header::None,
                    b"data",
                )
            }),
            (1, 2, 6),
        ),
        (
            "read request: not the last segment",
            one(|t| {
                let mut octets = read_request(1, t.read.stag, 0, 8);
                octets[0] &= !0x40;
                octets
            }),
            (1, 2, 4),
        ),
        // RDMAP remote protection errors (layer 0, type 1).
        (
            "read: invalid source STag",
            one(|t| read_request(1, t.read.stag.wrapping_add(0x100), 0, 8)),
            (0, 1, 0),
        ),
        (
            "read: past the end",
            one(|t| read_request(1, t.read.stag, 60, 8)),
            (0, 1, 1),
        ),
        (
            "read: no remote read access",
            one(|t| read_request(1, t.write.stag, 0, 8)),
            (0, 1, 2),
        ),
        (
            "read: other PD",
            one(|t| read_request(1, t.other_pd.stag, 0, 8)),
            (0, 1, 3),
        ),
        (
            "read: TO wraps",
            one(|t| read_request(1, t.read.stag, u64::MAX - 3, 8)),
            (0, 1, 4),
        ),
        (
            "atomic: no remote atomic access",
            one(|t| atomic(&t.write, 0, AtomicOpcode::FetchAdd)),
            (0, 1, 2),
        ),
        (
            "atomic: past the end",
            one(|t| atomic(&t.atomic, 64, AtomicOpcode::FetchAdd)),
            (0, 1, 1),
        ),
        (
            "atomic: invalid STag",
            one(|t| {
                atomic(
                    &Mr {
                        stag: t.atomic.stag ^ 0x80,
                        ..t.atomic
                    },
                    0,
                    AtomicOpcode::FetchAdd,
                )
            }),
            (0, 1, 0),
        ),
        (
            "send with invalidate: no invalidate right",
            one(|t| send_with_invalidate(t.write.stag)),
            (0, 1, 9),
        ),
        // RDMAP remote operation errors (layer 0, type 2).
        (
            "RDMAP version 0",
            one(|_| {
                let buffer = ddp::Buffer::Untagged {
                    rsvd_ulp: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0,
                };
                raw(
                    Control {
                        version: 0,
                        ..Control::new(Opcode::Send)
                    },
                    true,
                    ddp::VERSION,
                    buffer,
                    Header::None,
                    b"data",
                )
            }),
            (0, 2, 5),
        ),
        (
            "opcode 0xC",
            one(|_| untagged(Opcode::Unknown(0xC), 0, 1, 0, Header::None, b"data")),
            (0, 2, 6),
        ),
        (
            "opcode 0xF tagged",
            one(|t| tagged(Opcode::Unknown(0xF), t.write.stag, 0, b"data")),
            (0, 2, 6),
        ),
        (
            "write sent untagged",
            one(|_| untagged(Opcode::RdmaWrite, 0, 1, 0, Header::None, b"data")),
            (0, 2, 6),
        ),
        (
            "send sent tagged",
            one(|t| tagged(Opcode::Send, t.write.stag, 0, b"data")),
            (0, 2, 6),
        ),
        (
            "atomic: AOpCode 5",
            one(|t| atomic(&t.atomic, 0, AtomicOpcode::Unknown(5))),
            (0, 2, 6),
        ),
        (
            "IRD overflow",
            Box::new(|t| {
                (1..=3)
                    .map(|msn| read_request(msn, t.read.stag, 0, 8))
                    .collect()
            }),
            (0, 2, 7),
        ),
        (
            "send with invalidate: no such STag",
            one(|t| send_with_invalidate(t.write.stag.wrapping_add(0x300))),
            (0, 2, 9),
        ),
        (
            "immediate data: 7 octets",
            one(|_| untagged(Opcode::ImmediateData, 0, 1, 0, Header::None, &[1; 7])),
            (0, 2, 0xFF),
        ),
        (
            "immediate data: 9 octets",
            one(|_| untagged(Opcode::ImmediateDataWithSe, 0, 1, 0, Header::None, &[1; 9])),
            (0, 2, 0xFF),
        ),
        (
            "atomic: misaligned target",
            one(|t| atomic(&t.atomic, 4, AtomicOpcode::FetchAdd)),
            (0, 2, 0xFF),
        ),
        (
            "atomic response nobody asked for",
            one(|_| {
                let response = rnic_engine::wire::atomic::ResponseRepr {
                    original_request_id: 1,
                    original_remote_value: 5,
                };
                untagged(
                    Opcode::AtomicResponse,
                    ddp::qn::ATOMIC_RESPONSE,
                    1,
                    0,
                    Header::AtomicResponse(response),
                    &[],
                )
            }),
            (0, 2, 0xFF),
        ),
        (
            "read request header cut short",
            one(|t| {
                let mut octets = read_request(1, t.read.stag, 0, 8);
                octets.truncate(octets.len() - 4);
                octets
            }),
            (0, 2, 0xFF),
        ),
        // LLP (layer 2): a ULPDU too short for any DDP header.
        (
            "three-octet ULPDU",
            one(|_| vec![0x41, 0x43, 0x00]),
            (2, 0, 4),
        ),
    ]
}

/// Sends the segments from a to b and checks both ends of the Terminate.
fn check(
    config: PairConfig,
    name: &str,
    segments: Vec<Vec<u8>>,
    code: (u8, u8, u8),
    second: (QpHandle, QpHandle),
    pair: &mut RnicPair,
) {
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    for segment in &segments {
        pair.a.rnic.inject_ulpdu(qa, segment).unwrap();
    }
    pair.run(STEPS);
    assert_eq!(
        events(pair, false, None),
        [QpEvent::TerminateSent(info(code))],
        "{name} ({config:?})"
    );
    assert_eq!(
        events(pair, true, None),
        [QpEvent::TerminateReceived(info(code))],
        "{name}"
    );
    assert_eq!(pair.b.rnic.qp_state(qb).unwrap(), QpState::Error, "{name}");
    assert_eq!(pair.a.rnic.qp_state(qa).unwrap(), QpState::Error, "{name}");
    // The segment that drew the Terminate is counted as no operation (the
    // segments before it, if any, are).
    let taken: u64 = pair
        .b
        .rnic
        .op_stats(qb)
        .unwrap()
        .rx
        .iter()
        .map(|c| c.messages)
        .sum();
    assert!(
        taken < segments.len() as u64,
        "{name}: {taken} of {} segments counted",
        segments.len()
    );
    // The receive b had posted completes in error, never silently.
    let wcs: Vec<_> = pair
        .b
        .completions()
        .into_iter()
        .filter(|wc| wc.qp == qb)
        .collect();
    assert_eq!(wcs.len(), 1, "{name}: {wcs:?}");
    assert_ne!(wcs[0].status, WcStatus::Success, "{name}");
    assert_other_qp_works(pair, second, name);
}

/// A Write and a Send on the second QP still get through.
fn assert_other_qp_works(pair: &mut RnicPair, (qa, qb): (QpHandle, QpHandle), name: &str) {
    let (b_region, b_mr) = pair
        .b
        .region(32, Access::REMOTE_WRITE.union(Access::LOCAL_WRITE))
        .unwrap();
    let (a_region, a_mr) = pair.a.region(32, ALL).unwrap();
    a_region.write(0, &pattern(32, 1)).unwrap();
    pair.b
        .rnic
        .post_recv(qb, &recv(77, &[sge(&b_mr, 16, 16)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(
            qa,
            &wr(5, SendOp::Write(remote(&b_mr, 0)), &[sge(&a_mr, 0, 16)]),
        )
        .unwrap();
    pair.a
        .rnic
        .post_send(qa, &wr(6, SendOp::Send, &[sge(&a_mr, 16, 16)]))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    assert_eq!(wcs.len(), 2, "{name}: {wcs:?}");
    assert_wc(&wcs[1], 6, WcOpcode::Send, 16);
    let wcs: Vec<_> = pair
        .b
        .completions()
        .into_iter()
        .filter(|wc| wc.qp == qb)
        .collect();
    assert_eq!(wcs.len(), 1, "{name}: {wcs:?}");
    assert_wc(&wcs[0], 77, WcOpcode::Recv, 16);
    assert_eq!(b_region.to_vec(), pattern(32, 1), "{name}");
}

#[test]
fn every_bad_segment_gets_its_terminate() {
    for config in [
        PairConfig::default(),
        PairConfig {
            crc: false,
            markers: true,
            cut_max: 5,
            ird_ord: 2,
            ..PairConfig::default()
        },
        // Injected segments and Terminates go out between TCP segments too.
        PairConfig {
            markers: true,
            seed: 13,
            link: Link::Segments,
            ..PairConfig::default()
        },
        // DDP over SCTP: the same answers, whatever order the messages
        // arrive in (one code path for DDP/RDMAP behind both LLPs).
        PairConfig {
            emss: rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
            link: Link::Messages,
            ..PairConfig::default()
        },
        PairConfig {
            emss: rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
            window: 4 * rnic_engine::sctp::MESSAGE_MAX_MTU_1500,
            seed: 21,
            link: Link::MessagesShuffled,
            ..PairConfig::default()
        },
    ] {
        for (name, build, code) in cases() {
            let config = PairConfig {
                ird_ord: 2,
                ..config
            };
            let (mut pair, target, second) = setup(config, true);
            let segments = build(&target);
            check(config, name, segments, code, second, &mut pair);
        }
    }
}

#[test]
fn a_send_without_a_posted_receive_is_no_buffer() {
    let config = PairConfig::default();
    let (mut pair, _, second) = setup(config, false);
    pair.a
        .rnic
        .inject_ulpdu(pair.a.qp, &send(0, 1, 0, b"data"))
        .unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(info((1, 2, 2)))]
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateReceived(info((1, 2, 2)))]
    );
    assert_other_qp_works(&mut pair, second, "no buffer");
}

#[test]
fn immediate_data_without_a_posted_receive_is_no_buffer() {
    let (mut pair, _, _) = setup(PairConfig::default(), false);
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Immediate([1; 8]), &[]))
        .unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(info((1, 2, 2)))]
    );
}

/// A corrupted CRC is an MPA error: layer 2, type 0, code 2.
#[test]
fn a_bad_crc_is_an_mpa_terminate() {
    let config = PairConfig::default();
    let (mut pair, target, second) = setup(config, true);
    let mut framer = Framer::new(TxConfig {
        crc: true,
        markers: false,
        emss: config.emss,
    })
    .unwrap();
    let mut fpdu = vec![0u8; 256];
    let n = framer
        .frame(
            &[&tagged(Opcode::RdmaWrite, target.write.stag, 0, b"data")],
            &mut fpdu,
        )
        .unwrap();
    fpdu[n - 1] ^= 0x20;
    pair.b.rnic.handle_stream(pair.b.qp, &fpdu[..n]).unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(info((2, 0, 2)))]
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateReceived(info((2, 0, 2)))]
    );
    assert_other_qp_works(&mut pair, second, "CRC");
}

/// The Terminate's own layout (RFC 5040 §4.8): M and D with the failed
/// segment's length and DDP header; R and the 28-octet header for a Read
/// Request; no RDMA header for an atomic (draft-ietf-storm-rdmap-ext-00 §8.1);
/// only the first error is reported.
#[test]
fn the_terminate_echoes_the_failed_segment() {
    let config = PairConfig::default();
    let bad_read = |t: &Target| read_request(1, t.write.stag, 0, 8);
    let bad_atomic = |t: &Target| atomic(&t.atomic, 4, AtomicOpcode::FetchAdd);
    let bad_write = |t: &Target| tagged(Opcode::RdmaWrite, t.write.stag, 62, b"data");
    // Octets past a Read Request's header: the echo is still its 28.
    let long_read = |t: &Target| {
        let mut segment = read_request(1, t.write.stag, 0, 8);
        segment.extend_from_slice(&[0xEE; 12]);
        segment
    };
    for (build, rdma_header) in [
        (Box::new(bad_read) as Box<dyn Fn(&Target) -> Vec<u8>>, true),
        (Box::new(long_read), true),
        (Box::new(bad_atomic), false),
        (Box::new(bad_write), false),
    ] {
        let (mut pair, target, _) = setup(config, true);
        let segment = build(&target);
        pair.a.rnic.inject_ulpdu(pair.a.qp, &segment).unwrap();
        // A second bad segment right behind it: ignored, first error wins.
        pair.a
            .rnic
            .inject_ulpdu(pair.a.qp, &send(7, 9, 0, b"x"))
            .unwrap();
        a_to_b(&mut pair);
        let ulpdu = b_terminate(&mut pair);
        let term = assert_echoes(&ulpdu, &segment, rdma_header);
        assert_eq!(term.encoding, term::Encoding::Rfc5040);
        let mut wire = vec![0u8; 1448];
        assert_eq!(
            pair.b.rnic.poll_transmit(pair.b.qp, &mut wire).unwrap(),
            0,
            "one Terminate per stream"
        );
    }
}

/// A Read or atomic request that fails only when its turn to be answered
/// comes (its STag invalidated by the peer's Send with Invalidate, RFC 5040
/// §6.10, or deregistered while it waited in the IRRQ) is echoed as if it
/// had failed on arrival: M with its whole segment's length (an atomic's
/// 18 + 52 octets, not its DDP header's 18) and D with its DDP header; R
/// and its header for a Read only (draft-ietf-storm-rdmap-ext-00 §8.1).
#[test]
fn a_request_failing_when_answered_echoes_its_whole_segment() {
    for (atomic_request, invalidate) in [(true, true), (true, false), (false, true), (false, false)]
    {
        let (mut pair, _, _) = setup(PairConfig::default(), true);
        let rights = if atomic_request {
            Access::REMOTE_ATOMIC
        } else {
            Access::REMOTE_READ
        };
        let (_, mr) = pair
            .b
            .region(64, rights.union(Access::REMOTE_INVALIDATE))
            .unwrap();
        let segment = if atomic_request {
            atomic(&mr, 8, AtomicOpcode::FetchAdd)
        } else {
            read_request(1, mr.stag, 0, 8)
        };
        let name = format!("atomic: {atomic_request}, invalidated: {invalidate}");
        pair.a.rnic.inject_ulpdu(pair.a.qp, &segment).unwrap();
        if invalidate {
            pair.a
                .rnic
                .inject_ulpdu(pair.a.qp, &send_with_invalidate(mr.stag))
                .unwrap();
        }
        // b takes the request (valid then) into its IRRQ, and answers it
        // only when it next transmits.
        a_to_b(&mut pair);
        if !invalidate {
            pair.b.rnic.dereg_mr(mr.stag).unwrap();
        }
        let ulpdu = b_terminate(&mut pair);
        let term = assert_echoes(&ulpdu, &segment, !atomic_request);
        assert_eq!(
            (term.layer, term.etype, term.ecode),
            (term::Layer::Rdmap, 1, 0),
            "{name}: a remote protection error, invalid STag"
        );
    }
}

/// Hands b, in one call, what a sends next (the segments injected into it).
fn a_to_b(pair: &mut RnicPair) {
    let mut wire = vec![0u8; 1448];
    let n = pair.a.rnic.poll_transmit(pair.a.qp, &mut wire).unwrap();
    assert_eq!(pair.b.rnic.handle_stream(pair.b.qp, &wire[..n]).unwrap(), n);
}

/// The ULPDU of the one FPDU b sends next (its Terminate).
fn b_terminate(pair: &mut RnicPair) -> Vec<u8> {
    let mut wire = vec![0u8; 1448];
    let n = pair.b.rnic.poll_transmit(pair.b.qp, &mut wire).unwrap();
    let mut deframer = Deframer::new(RxConfig {
        crc: true,
        markers: false,
        ulpdu_max: 65535,
    });
    let (used, poll) = deframer.poll(&wire[..n]);
    assert_eq!(used, n, "one FPDU");
    let Poll::Ulpdu(ulpdu) = poll else {
        panic!("{poll:?}")
    };
    ulpdu.to_vec()
}

/// Checks that `ulpdu` is a stream's first Terminate and that it echoes
/// the failed `segment` (RFC 5040 §4.8): M with its length, D with its DDP
/// header, and R with its 28-octet Read Request header if `rdma_header`
/// (none otherwise). Returns the Terminate.
fn assert_echoes<'a>(ulpdu: &'a [u8], segment: &[u8], rdma_header: bool) -> term::Repr<'a> {
    let packet = ddp::Packet::new_checked(ulpdu).unwrap();
    assert_eq!(
        (packet.qn(), packet.msn(), packet.last()),
        (ddp::qn::TERMINATE, 1, true)
    );
    let message = rdmap::Repr::parse(&packet).unwrap();
    let Header::Terminate(term) = message.header else {
        panic!("{message:?}")
    };
    assert!(term.segment_length_valid);
    assert_eq!(
        usize::from(term.ddp_segment_length),
        segment.len(),
        "the DDP segment's length"
    );
    let ddp_len = ddp::Packet::new_checked(segment).unwrap().header_len();
    assert_eq!(term.ddp_header, Some(&segment[..ddp_len]));
    if rdma_header {
        assert_eq!(term.rdma_header, Some(&segment[ddp_len..ddp_len + 28]));
    } else {
        assert_eq!(term.rdma_header, None);
    }
    term
}

/// A Terminate that echoes one of our Read or atomic requests completes that
/// request with the remote error; the rest is flushed.
#[test]
fn a_refused_read_completes_with_a_remote_access_error() {
    let mut pair = pair(PairConfig::default());
    let (_, b_mr, _, a_mr) = regions(&mut pair, 64, Access::REMOTE_READ);
    let qp = pair.a.qp;
    pair.a
        .rnic
        .post_send(
            qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, 8)]),
        )
        .unwrap();
    pair.run(STEPS);
    pair.a
        .rnic
        .post_send(
            qp,
            &wr(2, SendOp::Read(remote(&b_mr, 60)), &[sge(&a_mr, 8, 8)]),
        )
        .unwrap();
    pair.a
        .rnic
        .post_send(
            qp,
            &wr(
                3,
                SendOp::FetchAdd {
                    remote: remote(&b_mr, 0),
                    add: 1,
                    mask: 0,
                },
                &[sge(&a_mr, 16, 8)],
            ),
        )
        .unwrap();
    pair.run(STEPS);
    let got: Vec<_> = pair
        .a
        .completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success),
            (2, WcStatus::RemoteAccess),
            (3, WcStatus::Flushed)
        ]
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateReceived(info((0, 1, 1)))]
    );
}

/// Linux siw, for a Read Request it rejects while responding, echoes the
/// read size where the Read Request's MSN goes (the siw captures): its
/// Terminate names the Read whose Read Request it echoes (RFC 5040 §4.8,
/// R), not the one whose MSN is that size.
#[test]
fn a_siw_terminate_names_the_read_its_echoed_read_request_names() {
    let mut pair = pair(PairConfig::default());
    let (_, b_mr, _, a_mr) = regions(&mut pair, 64, Access::REMOTE_READ);
    let qp = pair.a.qp;
    for (wr_id, len) in [(1, 2), (2, 64)] {
        pair.a
            .rnic
            .post_send(
                qp,
                &wr(wr_id, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, len)]),
            )
            .unwrap();
    }
    // Both requests leave a (MSN 1 of 2 octets, MSN 2 of 64) and are
    // lost: b's Terminate comes first.
    let mut wire = vec![0u8; 1448];
    let n = pair.a.rnic.poll_transmit(qp, &mut wire).unwrap();
    let mut deframer = Deframer::new(RxConfig {
        crc: true,
        markers: false,
        ulpdu_max: 65535,
    });
    let (used, poll) = deframer.poll(&wire[..n]);
    let Poll::Ulpdu(first) = poll else {
        panic!("{poll:?}")
    };
    let first = first.to_vec();
    assert_eq!(deframer.poll(&wire[used..n]).0, n - used, "two requests");
    let packet = ddp::Packet::new_checked(&first[..]).unwrap();
    assert_eq!((packet.qn(), packet.msn()), (ddp::qn::READ_REQUEST, 1));
    // siw's echo of the first: its MSN field holds the read size, 2, the
    // second Read's MSN.
    let ddp_len = packet.header_len();
    let mut ddp_header = first[..ddp_len].to_vec();
    ddp::Packet::new_unchecked(&mut ddp_header[..]).set_msn(2);
    let repr = term::Repr {
        encoding: term::Encoding::SiwBitfield,
        layer: term::Layer::Rdmap,
        etype: 1,
        ecode: 0,
        reserved: 0,
        segment_length_valid: true,
        ddp_segment_length: 0,
        ddp_header: Some(&ddp_header),
        rdma_header: Some(&first[ddp_len..ddp_len + 28]),
    };
    let terminate = untagged(
        Opcode::Terminate,
        ddp::qn::TERMINATE,
        1,
        0,
        Header::Terminate(repr),
        &[],
    );
    pair.b.rnic.inject_ulpdu(pair.b.qp, &terminate).unwrap();
    pair.run(STEPS);
    let got: Vec<_> = pair
        .a
        .completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(got, [(1, WcStatus::RemoteAccess), (2, WcStatus::Flushed)]);
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateReceived(info((0, 1, 0)))]
    );
}

/// A Terminate from Linux siw (its bit-swapped control word, as in the
/// captures) is understood: the same layer/type/code reaches the application.
#[test]
fn a_siw_style_terminate_is_read_leniently() {
    let mut pair = pair(PairConfig::default());
    let repr = term::Repr {
        encoding: term::Encoding::SiwBitfield,
        layer: term::Layer::from(1),
        etype: 2,
        ecode: 2,
        reserved: 0,
        segment_length_valid: false,
        ddp_segment_length: 0,
        ddp_header: None,
        rdma_header: None,
    };
    let segment = untagged(
        Opcode::Terminate,
        ddp::qn::TERMINATE,
        1,
        0,
        Header::Terminate(repr),
        &[],
    );
    pair.a.rnic.inject_ulpdu(pair.a.qp, &segment).unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateReceived(info((1, 2, 2)))]
    );
    assert!(
        events(&mut pair, true, None).is_empty(),
        "a Terminate is never answered"
    );
}

/// A malformed Terminate (not the last segment, wrong queue, bad RDMAP
/// version) still ends the stream and is never answered with a Terminate.
#[test]
fn a_malformed_terminate_is_not_answered() {
    let repr = term::Repr {
        encoding: term::Encoding::Rfc5040,
        layer: term::Layer::from(0),
        etype: 2,
        ecode: 0xFF,
        reserved: 0,
        segment_length_valid: false,
        ddp_segment_length: 0,
        ddp_header: None,
        rdma_header: None,
    };
    let buffer = |qn| ddp::Buffer::Untagged {
        rsvd_ulp: 0,
        qn,
        msn: 1,
        mo: 0,
    };
    let control = Control::new(Opcode::Terminate);
    for segment in [
        raw(
            control,
            false,
            ddp::VERSION,
            buffer(2),
            Header::Terminate(repr),
            &[],
        ),
        raw(
            control,
            true,
            ddp::VERSION,
            buffer(0),
            Header::Terminate(repr),
            &[],
        ),
        raw(
            Control {
                version: 3,
                ..control
            },
            true,
            ddp::VERSION,
            buffer(2),
            Header::Terminate(repr),
            &[],
        ),
        raw(control, true, ddp::VERSION, buffer(2), Header::None, &[1]),
    ] {
        let mut pair = pair(PairConfig::default());
        pair.a.rnic.inject_ulpdu(pair.a.qp, &segment).unwrap();
        pair.run(STEPS);
        let got = events(&mut pair, false, None);
        assert!(
            matches!(got[..], [QpEvent::TerminateReceived(_)]),
            "{got:?}"
        );
        assert_eq!(pair.b.rnic.qp_state(pair.b.qp).unwrap(), QpState::Error);
        assert!(
            events(&mut pair, true, None).is_empty(),
            "answered: {segment:02x?}"
        );
    }
}

/// An STag invalidated while an atomic on it waits in the IRRQ: the atomic
/// fails with a protection Terminate naming it, and the memory is not
/// touched (the peer invalidated it first in the same stream).
#[test]
fn an_stag_invalidated_under_a_queued_atomic_stops_it() {
    let (mut pair, _, _) = setup(PairConfig::default(), true);
    let access = Access::REMOTE_ATOMIC.union(Access::REMOTE_INVALIDATE);
    let (memory, mr) = pair.b.region(64, access).unwrap();
    pair.a
        .rnic
        .inject_ulpdu(pair.a.qp, &atomic(&mr, 8, AtomicOpcode::FetchAdd))
        .unwrap();
    pair.a
        .rnic
        .inject_ulpdu(pair.a.qp, &send_with_invalidate(mr.stag))
        .unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(info((0, 1, 0)))]
    );
    assert_eq!(memory.to_vec(), vec![0; 64], "the atomic did not run");
    let wcs = pair.b.completions();
    assert_eq!(wcs[0].invalidated, Some(mr.stag));
}

/// A region deregistered while a long Read Response streams from it: the
/// response stops with a protection Terminate and the requester's Read
/// completes with a remote access error (the Terminate names its MSN).
#[test]
fn a_read_sink_the_peer_invalidates_mid_response_takes_no_more_octets() {
    // Our Read's sink STag travels in the Read Request: a peer may name it
    // in a Send with Invalidate (RFC 5040 §6.10) while its response is
    // still coming. The rest of the response must not land in the memory
    // behind it, nor the Read complete as if it had.
    let mut pair = pair(PairConfig::default());
    let len = 1 << 20;
    let (b_region, b_mr) = pair.b.region(len, Access::REMOTE_READ).unwrap();
    b_region.write(0, &pattern(len, 3)).unwrap();
    let (a_region, a_mr) = pair
        .a
        .region(len, ALL.union(Access::REMOTE_INVALIDATE))
        .unwrap();
    let (_, recv_mr) = pair.a.region(16, Access::LOCAL_WRITE).unwrap();
    pair.a
        .rnic
        .post_recv(pair.a.qp, &recv(7, &[sge(&recv_mr, 0, 16)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, len)]),
        )
        .unwrap();
    for _ in 0..10 {
        pair.step();
    }
    assert_eq!(
        a_region.to_vec()[len - 16..],
        [0u8; 16],
        "the response is still coming"
    );
    let invalidate = raw(
        Control::new(Opcode::SendWithInvalidate),
        true,
        ddp::VERSION,
        ddp::Buffer::Untagged {
            rsvd_ulp: a_mr.stag,
            qn: 0,
            msn: 1,
            mo: 0,
        },
        Header::None,
        b"x",
    );
    // From b's side, between its Read Response segments.
    pair.b.rnic.inject_ulpdu(pair.b.qp, &invalidate).unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    let receive = wcs.iter().find(|w| w.wr_id == 7).expect("the Send arrived");
    assert_eq!(receive.invalidated, Some(a_mr.stag));
    let read = wcs.iter().find(|w| w.wr_id == 1).expect("the Read ended");
    // Our own sink failed its check: local protection, not a flush.
    assert_eq!(read.status, WcStatus::LocalProtection, "{wcs:?}");
    assert_eq!(
        a_region.to_vec()[len - 16..],
        [0u8; 16],
        "nothing placed after the invalidation"
    );
    // DDP's tagged buffer error, invalid STag (RFC 5041 §7.2).
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(info((1, 1, 0)))]
    );
}

#[test]
fn deregistering_under_a_read_response_stops_it() {
    let mut pair = pair(PairConfig::default());
    let (b_region, b_mr, _, a_mr) = regions(&mut pair, 1 << 20, Access::REMOTE_READ);
    b_region.write(0, &pattern(1 << 20, 3)).unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, 1 << 20)]),
        )
        .unwrap();
    for _ in 0..10 {
        pair.step();
    }
    pair.b.rnic.dereg_mr(b_mr.stag).unwrap();
    let moved = pair.moved[1];
    pair.run(STEPS);
    assert!(
        pair.moved[1] - moved < 2 * 1448,
        "the response stopped: {} more octets",
        pair.moved[1] - moved
    );
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(info((0, 1, 0)))]
    );
    let wcs = pair.a.completions();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::RemoteAccess));
}

/// The result buffer of our atomic invalidated by the peer's Send with
/// Invalidate (RFC 5040 §6.10), which comes ahead of the response (RFC
/// 7306 §5.4 lets a response follow later Sends): the response's original
/// value is not written into the memory the STag no longer names (it was,
/// through the buffer resolved when the request went out), and the atomic
/// fails locally, ending the stream (a local catastrophic error, 0/0/0).
#[test]
fn an_atomic_result_buffer_the_peer_invalidates_takes_no_octets() {
    let mut pair = pair(PairConfig::default());
    let (b_memory, b_mr) = pair.b.region(64, Access::REMOTE_ATOMIC).unwrap();
    b_memory.write(0, &5u64.to_ne_bytes()).unwrap();
    let (a_memory, a_mr) = pair
        .a
        .region(64, ALL.union(Access::REMOTE_INVALIDATE))
        .unwrap();
    let (_, recv_mr) = pair.a.region(16, Access::LOCAL_WRITE).unwrap();
    pair.a
        .rnic
        .post_recv(pair.a.qp, &recv(7, &[sge(&recv_mr, 0, 16)]))
        .unwrap();
    let fetch = SendOp::FetchAdd {
        remote: remote(&b_mr, 0),
        add: 1,
        mask: 0,
    };
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, fetch, &[sge(&a_mr, 0, 8)]))
        .unwrap();
    pair.b
        .rnic
        .inject_ulpdu(pair.b.qp, &send_with_invalidate(a_mr.stag))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    let receive = wcs.iter().find(|w| w.wr_id == 7).expect("the Send arrived");
    assert_eq!(receive.invalidated, Some(a_mr.stag));
    let fetched = wcs.iter().find(|w| w.wr_id == 1).expect("the atomic ended");
    assert_eq!(fetched.status, WcStatus::LocalProtection, "{wcs:?}");
    assert_eq!(
        a_memory.to_vec()[..8],
        [0u8; 8],
        "nothing written through the invalidated STag"
    );
    assert_eq!(
        b_memory.to_vec()[..8],
        6u64.to_ne_bytes(),
        "the atomic ran at the peer"
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(info((0, 0, 0)))]
    );
}
