//! The engine end to end over `RnicPair`: every operation at the sizes
//! around the segment boundary, byte for byte and by completions, with
//! CRC and markers on and off and the stream cut anywhere; ordering,
//! ORD throttling, fairness, SRQs, fast registration, invalidation and
//! notification.

mod support;

use rnic_engine::cq::{Notify, WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::pair::{self, Link, PairConfig};
use rnic_engine::verbs::{FastRegistration, QpEvent, QpInit, QpState, SendOp, SendWr, VerbError};
use rnic_engine::wire::ddp;
use support::*;

/// The payload sizes around a segment of `per_segment` octets.
fn sizes(per_segment: usize) -> [usize; 6] {
    [0, 1, per_segment - 1, per_segment, per_segment + 1, 1 << 20]
}

#[test]
fn rdma_write_every_size() {
    for config in configs() {
        for len in sizes(mulpdu(&config) - ddp::TAGGED_HEADER_LEN) {
            let mut pair = pair(config);
            let (b_region, b_mr, a_region, a_mr) =
                regions(&mut pair, len + 16, Access::REMOTE_WRITE);
            let data = pattern(len, 3);
            a_region.write(5, &data).unwrap();
            // Three SGEs, to cross entries as well as segments.
            let cut = [len / 3, len / 3 + len / 5];
            let sgl = [
                sge(&a_mr, 5, cut[0]),
                sge(&a_mr, 5 + cut[0], cut[1] - cut[0]),
                sge(&a_mr, 5 + cut[1], len - cut[1]),
            ];
            pair.a
                .rnic
                .post_send(pair.a.qp, &wr(7, SendOp::Write(remote(&b_mr, 3)), &sgl))
                .unwrap();
            pair.run(STEPS);
            let wcs = pair.a.completions();
            assert_eq!(wcs.len(), 1, "{config:?} len {len}");
            assert_wc(&wcs[0], 7, WcOpcode::Write, len);
            let got = b_region.to_vec();
            assert_eq!(&got[3..3 + len], &data[..], "{config:?} len {len}");
            assert!(
                got[..3].iter().chain(&got[3 + len..]).all(|&o| o == 0),
                "nothing outside the target"
            );
            assert!(
                pair.b.completions().is_empty(),
                "a Write completes nothing at the target"
            );
        }
    }
}

/// Jumbo FPDUs with CRC framed both ways (`Rnic::set_one_pass_framing`):
/// Writes and the Read Responses of Reads arrive whole either way, and the
/// two ways put the same octets on the wire.
#[test]
fn jumbo_fpdus_framed_in_one_pass_or_not_carry_the_same_octets() {
    let config = PairConfig {
        crc: true,
        markers: false,
        emss: 9000,
        link: Link::SegmentsRecorded,
        ..PairConfig::default()
    };
    let len = 200_000;
    let mut wires = Vec::new();
    for one_pass in [true, false] {
        let mut pair = pair(config);
        pair.a.rnic.set_one_pass_framing(one_pass);
        pair.b.rnic.set_one_pass_framing(one_pass);
        let access = Access::REMOTE_WRITE | Access::REMOTE_READ;
        let (b_region, b_mr, a_region, a_mr) = regions(&mut pair, 2 * len, access);
        let data = pattern(len, 9);
        a_region.write(0, &data).unwrap();
        pair.a
            .rnic
            .post_send(
                pair.a.qp,
                &wr(1, SendOp::Write(remote(&b_mr, 0)), &[sge(&a_mr, 0, len)]),
            )
            .unwrap();
        pair.run(STEPS);
        assert_eq!(
            &b_region.to_vec()[..len],
            &data[..],
            "Write, one pass {one_pass}"
        );
        // And back: b's Read Responses frame from its region.
        pair.a
            .rnic
            .post_send(
                pair.a.qp,
                &wr(2, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, len, len)]),
            )
            .unwrap();
        pair.run(STEPS);
        assert_eq!(
            &a_region.to_vec()[len..],
            &data[..],
            "Read, one pass {one_pass}"
        );
        let wcs = pair.a.completions();
        assert_eq!(wcs.len(), 2, "one pass {one_pass}");
        let recordings = pair.take_recordings();
        assert!(
            recordings[0][0].stream.len() > len,
            "the Write's FPDUs were recorded"
        );
        wires.push(recordings);
    }
    // The same octets each way: the framing changes how, not what.
    assert!(
        wires[0] == wires[1],
        "the two framings put different octets on the wire"
    );
}

#[test]
fn rdma_read_every_size() {
    for config in configs() {
        for len in sizes(mulpdu(&config) - ddp::TAGGED_HEADER_LEN) {
            let mut pair = pair(config);
            let (b_region, b_mr, a_region, a_mr) =
                regions(&mut pair, len + 16, Access::REMOTE_READ);
            let data = pattern(len, 9);
            b_region.write(11, &data).unwrap();
            let sgl = [sge(&a_mr, 2, len)];
            pair.a
                .rnic
                .post_send(pair.a.qp, &wr(8, SendOp::Read(remote(&b_mr, 11)), &sgl))
                .unwrap();
            pair.run(STEPS);
            let wcs = pair.a.completions();
            assert_eq!(wcs.len(), 1, "{config:?} len {len}");
            assert_wc(&wcs[0], 8, WcOpcode::Read, len);
            let got = a_region.to_vec();
            assert_eq!(&got[2..2 + len], &data[..], "{config:?} len {len}");
            assert!(got[..2].iter().chain(&got[2 + len..]).all(|&o| o == 0));
        }
    }
}

/// Send, Send with SE, Send with Invalidate and Send with SE and
/// Invalidate, into receives of exactly the message's size and larger.
#[test]
fn send_family_every_size() {
    for config in configs() {
        for len in sizes(mulpdu(&config) - ddp::UNTAGGED_HEADER_LEN) {
            for (kind, solicited, invalidate) in [
                (0, false, false),
                (1, true, false),
                (2, false, true),
                (3, true, true),
            ] {
                let mut pair = pair(config);
                let (b_region, b_mr) = pair.b.region(len + 64, Access::LOCAL_WRITE).unwrap();
                let (a_region, a_mr) = pair.a.region(len + 8, ALL).unwrap();
                let (_, victim) = pair
                    .b
                    .region(64, Access::REMOTE_WRITE.union(Access::REMOTE_INVALIDATE))
                    .unwrap();
                let data = pattern(len, kind);
                a_region.write(8, &data).unwrap();
                // The receive's buffer: two SGEs, the first short.
                let extra = kind as usize * 10;
                let first = len.min(100);
                let rsgl = [
                    sge(&b_mr, 1, first),
                    sge(&b_mr, 1 + first + 7, len - first + extra),
                ];
                pair.b
                    .rnic
                    .post_recv(pair.b.qp, &recv(40 + u64::from(kind), &rsgl))
                    .unwrap();
                let op = if invalidate {
                    SendOp::SendWithInvalidate(victim.stag)
                } else {
                    SendOp::Send
                };
                let sgl = [sge(&a_mr, 8, len)];
                let send = SendWr {
                    wr_id: 9,
                    op,
                    sgl: &sgl,
                    signaled: true,
                    solicited,
                    fence: false,
                };
                pair.a.rnic.post_send(pair.a.qp, &send).unwrap();
                pair.run(STEPS);
                let wcs = pair.a.completions();
                assert_eq!(wcs.len(), 1);
                assert_wc(&wcs[0], 9, WcOpcode::Send, len);
                let wcs = pair.b.completions();
                assert_eq!(wcs.len(), 1, "{config:?} len {len} kind {kind}");
                assert_wc(&wcs[0], 40 + u64::from(kind), WcOpcode::Recv, len);
                assert_eq!(wcs[0].solicited, solicited);
                assert_eq!(wcs[0].invalidated, invalidate.then_some(victim.stag));
                let got = b_region.to_vec();
                let mut placed = got[1..1 + first].to_vec();
                placed.extend_from_slice(&got[1 + first + 7..1 + first + 7 + len - first]);
                assert_eq!(placed, data, "{config:?} len {len} kind {kind}");
                assert!(
                    got[1 + first..1 + first + 7].iter().all(|&o| o == 0),
                    "the gap between SGEs is untouched"
                );
            }
        }
    }
}

/// Immediate Data with and without SE, and RDMA Write with Immediate.
#[test]
fn immediate_data_and_write_with_immediate() {
    for config in configs() {
        for len in sizes(mulpdu(&config) - ddp::TAGGED_HEADER_LEN) {
            let mut pair = pair(config);
            let (b_region, b_mr, a_region, a_mr) =
                regions(&mut pair, len + 8, Access::REMOTE_WRITE);
            let (_, b_recv) = pair.b.region(8, Access::LOCAL_WRITE).unwrap();
            for id in 0..3 {
                pair.b
                    .rnic
                    .post_recv(pair.b.qp, &recv(100 + id, &[sge(&b_recv, 0, 8)]))
                    .unwrap();
            }
            let data = pattern(len, 77);
            a_region.write(0, &data).unwrap();
            let sgl = [sge(&a_mr, 0, len)];
            let imm = *b"IMMEDIAT";
            pair.a
                .rnic
                .post_send(
                    pair.a.qp,
                    &wr(1, SendOp::WriteWithImmediate(remote(&b_mr, 4), imm), &sgl),
                )
                .unwrap();
            let se = SendWr {
                wr_id: 2,
                op: SendOp::Immediate(*b"solicitd"),
                sgl: &[],
                signaled: true,
                solicited: true,
                fence: false,
            };
            pair.a.rnic.post_send(pair.a.qp, &se).unwrap();
            pair.a
                .rnic
                .post_send(
                    pair.a.qp,
                    &wr(3, SendOp::Immediate(7u64.to_be_bytes()), &[]),
                )
                .unwrap();
            pair.run(STEPS);
            let wcs = pair.a.completions();
            assert_eq!(wcs.len(), 3, "one completion for the Write with Immediate");
            assert_wc(&wcs[0], 1, WcOpcode::WriteWithImmediate, len);
            assert_wc(&wcs[1], 2, WcOpcode::Immediate, 0);
            assert_wc(&wcs[2], 3, WcOpcode::Immediate, 0);
            let wcs = pair.b.completions();
            assert_eq!(wcs.len(), 3);
            for (wc, (id, imm, se)) in wcs.iter().zip([
                (100, imm, false),
                (101, *b"solicitd", true),
                (102, 7u64.to_be_bytes(), false),
            ]) {
                assert_wc(wc, id, WcOpcode::RecvImmediate, 0);
                assert_eq!((wc.imm, wc.solicited), (Some(imm), se));
            }
            // draft-ietf-storm-rdmap-ext-00 §7: the Write is placed before the Immediate Data's
            // completion is visible.
            assert_eq!(
                &b_region.to_vec()[4..4 + len],
                &data[..],
                "{config:?} len {len}"
            );
        }
    }
}

#[test]
fn atomics_return_the_original_and_apply_the_seeds_semantics() {
    for config in configs() {
        let mut pair = pair(config);
        let (b_region, b_mr, a_region, a_mr) = regions(&mut pair, 64, Access::REMOTE_ATOMIC);
        b_region
            .write(8, &0x0000_00FF_FFFF_FFF0u64.to_ne_bytes())
            .unwrap();
        b_region.write(16, &5u64.to_ne_bytes()).unwrap();
        let word = |i: usize| remote(&b_mr, 8 * i);
        let ops = [
            // Masked FetchAdd: two 32-bit lanes, the low carry stops at bit 31.
            SendOp::FetchAdd {
                remote: word(1),
                add: 0x0000_0001_0000_0020,
                mask: 0x8000_0000,
            },
            SendOp::CmpSwap {
                remote: word(2),
                compare: 5,
                compare_mask: !0,
                swap: 9,
                swap_mask: !0,
            },
            // Compare fails: nothing changes.
            SendOp::CmpSwap {
                remote: word(2),
                compare: 5,
                compare_mask: !0,
                swap: 1,
                swap_mask: !0,
            },
            // Masked compare on the low octet only, masked swap of the high half.
            SendOp::CmpSwap {
                remote: word(2),
                compare: 0xAB09,
                compare_mask: 0xFF,
                swap: 0x1234_5678_0000_0000,
                swap_mask: 0xFFFF_FFFF_0000_0000,
            },
            SendOp::Swap {
                remote: word(3),
                swap: 0xDEAD_BEEF,
            },
            SendOp::FetchAdd {
                remote: word(3),
                add: 1,
                mask: 0,
            },
        ];
        for (i, op) in ops.iter().enumerate() {
            let sgl = [sge(&a_mr, 8 * i, 8)];
            pair.a
                .rnic
                .post_send(pair.a.qp, &wr(i as u64, op.clone(), &sgl))
                .unwrap();
        }
        pair.run(STEPS);
        let wcs = pair.a.completions();
        let opcodes = [
            WcOpcode::FetchAdd,
            WcOpcode::CmpSwap,
            WcOpcode::CmpSwap,
            WcOpcode::CmpSwap,
            WcOpcode::Swap,
            WcOpcode::FetchAdd,
        ];
        assert_eq!(wcs.len(), ops.len());
        for (i, wc) in wcs.iter().enumerate() {
            assert_wc(wc, i as u64, opcodes[i], 8);
        }
        let value = |region: &Region, at: usize| {
            let mut octets = [0u8; 8];
            region.read(at, &mut octets).unwrap();
            u64::from_ne_bytes(octets)
        };
        let originals: Vec<u64> = (0..ops.len()).map(|i| value(&a_region, 8 * i)).collect();
        assert_eq!(originals, [0x0000_00FF_FFFF_FFF0, 5, 9, 9, 0, 0xDEAD_BEEF]);
        assert_eq!(
            value(&b_region, 8),
            0x0000_0100_0000_0010,
            "lanes add without carrying across bit 31"
        );
        assert_eq!(
            value(&b_region, 16),
            0x1234_5678_0000_0009,
            "masked compare matched, masked swap"
        );
        assert_eq!(value(&b_region, 24), 0xDEAD_BEF0);
    }
}

#[test]
fn completions_follow_posting_order_and_unsignaled_requests_stay_silent() {
    let mut pair = pair(PairConfig::default());
    let (b_region, b_mr, _a_region, a_mr) = regions(
        &mut pair,
        1 << 20,
        Access::REMOTE_READ.union(Access::REMOTE_WRITE),
    );
    b_region.write(0, &pattern(1 << 20, 1)).unwrap();
    let (_, b_recv) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(pair.b.qp, &recv(50, &[sge(&b_recv, 0, 64)]))
        .unwrap();
    let qp = pair.a.qp;
    let read = [sge(&a_mr, 0, 1 << 19)];
    pair.a
        .rnic
        .post_send(qp, &wr(1, SendOp::Read(remote(&b_mr, 0)), &read))
        .unwrap();
    pair.a
        .rnic
        .post_send(qp, &wr(2, SendOp::Send, &[sge(&a_mr, 0, 10)]))
        .unwrap();
    let quiet = SendWr {
        wr_id: 3,
        op: SendOp::Write(remote(&b_mr, 1 << 19)),
        sgl: &[sge(&a_mr, 0, 100)],
        signaled: false,
        solicited: false,
        fence: false,
    };
    pair.a.rnic.post_send(qp, &quiet).unwrap();
    pair.a
        .rnic
        .post_send(
            qp,
            &wr(
                4,
                SendOp::Write(remote(&b_mr, 1 << 19)),
                &[sge(&a_mr, 0, 100)],
            ),
        )
        .unwrap();
    // The Send reaches the peer long before the Read's response ends, but
    // completes after the Read, in posting order.
    let mut steps = 0;
    while pair.b.completions().is_empty() {
        pair.step();
        steps += 1;
        assert!(steps < 100, "the Send does not wait for the Read");
    }
    assert!(
        pair.a.completions().is_empty(),
        "nothing completes before the Read"
    );
    pair.run(STEPS);
    let ids: Vec<u64> = pair.a.completions().iter().map(|wc| wc.wr_id).collect();
    assert_eq!(ids, [1, 2, 4]);
}

/// ORD bounds the Read and atomic requests in flight: the rest wait in the
/// send queue (and block what follows them), and all of them complete.
#[test]
fn ord_throttles_outstanding_requests() {
    let config = PairConfig {
        ird_ord: 2,
        ..PairConfig::default()
    };
    let mut pair = pair(config);
    let (b_region, b_mr, a_region, a_mr) = regions(
        &mut pair,
        4096,
        Access::REMOTE_READ.union(Access::REMOTE_ATOMIC),
    );
    b_region.write(0, &pattern(4096, 2)).unwrap();
    for i in 0..10u64 {
        let op = if i % 3 == 2 {
            SendOp::FetchAdd {
                remote: remote(&b_mr, 4088),
                add: 1,
                mask: 0,
            }
        } else {
            SendOp::Read(remote(&b_mr, 100 * i as usize))
        };
        let len = if i % 3 == 2 { 8 } else { 100 };
        pair.a
            .rnic
            .post_send(pair.a.qp, &wr(i, op, &[sge(&a_mr, 400 * i as usize, len)]))
            .unwrap();
    }
    let mut segment = vec![0u8; 65536];
    let n = pair.a.rnic.poll_transmit(pair.a.qp, &mut segment).unwrap();
    let framer = rnic_engine::mpa::tx::Framer::new(rnic_engine::mpa::tx::TxConfig {
        crc: true,
        markers: false,
        emss: 1448,
    })
    .unwrap();
    let request = framer.wire_len(ddp::UNTAGGED_HEADER_LEN + 28);
    assert_eq!(n, 2 * request, "exactly ORD = 2 Read Requests leave");
    assert_eq!(
        pair.a.rnic.poll_transmit(pair.a.qp, &mut segment).unwrap(),
        0,
        "the third waits for a response"
    );
    pair.b.rnic.handle_stream(pair.b.qp, &segment[..n]).unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    assert_eq!(
        wcs.iter().map(|wc| wc.wr_id).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert!(wcs.iter().all(|wc| wc.status == WcStatus::Success));
    for i in (0..10).filter(|i| i % 3 != 2) {
        let mut got = [0u8; 100];
        a_region.read(400 * i, &mut got).unwrap();
        assert_eq!(&got[..], &b_region.to_vec()[100 * i..100 * i + 100]);
    }
    let mut word = [0u8; 8];
    b_region.read(4088, &mut word).unwrap();
    let before = u64::from_ne_bytes(pattern(4096, 2)[4088..].try_into().unwrap());
    assert_eq!(u64::from_ne_bytes(word), before.wrapping_add(3));
    assert!(
        events(&mut pair, false, None).is_empty(),
        "the peer saw no IRD overflow"
    );
}

/// With ORD 0 nothing can carry a Read or atomic: it completes locally in
/// error, and the QP keeps working.
#[test]
fn ord_zero_refuses_reads_locally() {
    let mut pair = pair(PairConfig {
        ird_ord: 0,
        ..PairConfig::default()
    });
    let (_, b_mr, _, a_mr) = regions(&mut pair, 64, ALL);
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, 8)]),
        )
        .unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(2, SendOp::Write(remote(&b_mr, 0)), &[sge(&a_mr, 0, 8)]),
        )
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (1, WcStatus::LocalQpOperation)
    );
    assert_wc(&wcs[1], 2, WcOpcode::Write, 8);
    assert_eq!(pair.a.rnic.qp_state(pair.a.qp).unwrap(), QpState::Rts);
}

/// A long Read Response does not starve the responder's own send queue:
/// its Send goes out within a burst of response FPDUs.
#[test]
fn responses_and_the_send_queue_share_the_link() {
    let mut pair = pair(PairConfig::default());
    let (b_region, b_mr, _a_region, a_mr) = regions(&mut pair, 1 << 20, Access::REMOTE_READ);
    b_region.write(0, &pattern(1 << 20, 4)).unwrap();
    let (_, a_recv) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
    pair.a
        .rnic
        .post_recv(pair.a.qp, &recv(70, &[sge(&a_recv, 0, 64)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, 1 << 20)]),
        )
        .unwrap();
    for _ in 0..5 {
        pair.step();
    }
    let (_, b_src) = pair.b.region(64, ALL).unwrap();
    pair.b
        .rnic
        .post_send(pair.b.qp, &wr(2, SendOp::Send, &[sge(&b_src, 0, 64)]))
        .unwrap();
    let mut steps = 0;
    loop {
        let wcs = pair.a.completions();
        if let Some(wc) = wcs.first() {
            assert_wc(wc, 70, WcOpcode::Recv, 64);
            break;
        }
        pair.step();
        steps += 1;
    }
    let bound = rnic_engine::qp::RESPONSE_BURST_FPDUS_MAX as usize + 1;
    assert!(steps <= bound, "the Send waited {steps} segments");
    pair.run(STEPS);
    assert_wc(&pair.a.completions()[0], 1, WcOpcode::Read, 1 << 20);
}

#[test]
fn shared_receive_queue_feeds_several_qps_in_arrival_order() {
    let config = PairConfig::default();
    let mut pair = pair(config);
    let srq = pair.b.rnic.create_srq(pair.b.pd, 8).unwrap();
    let mut links = Vec::new();
    for _ in 0..2 {
        let a_qp = pair
            .a
            .rnic
            .create_qp(QpInit {
                pd: pair.a.pd,
                send_cq: pair.a.cq,
                recv_cq: pair.a.cq,
                srq: None,
                sq_size: 8,
                rq_size: 8,
            })
            .unwrap();
        let b_qp = pair
            .b
            .rnic
            .create_qp(QpInit {
                pd: pair.b.pd,
                send_cq: pair.b.cq,
                recv_cq: pair.b.cq,
                srq: Some(srq),
                sq_size: 8,
                rq_size: 8,
            })
            .unwrap();
        pair.a
            .rnic
            .connect(a_qp, pair::connection(&config))
            .unwrap();
        pair.b
            .rnic
            .connect(b_qp, pair::connection(&config))
            .unwrap();
        pair.link(a_qp, b_qp);
        links.push((a_qp, b_qp));
    }
    assert_eq!(
        pair.b.rnic.post_recv(links[0].1, &recv(0, &[])),
        Err(VerbError::State),
        "receives go to the SRQ"
    );
    let (b_region, b_mr) = pair.b.region(4 * 32, Access::LOCAL_WRITE).unwrap();
    for i in 0..4 {
        pair.b
            .rnic
            .post_srq_recv(srq, &recv(i, &[sge(&b_mr, 32 * i as usize, 32)]))
            .unwrap();
    }
    let (a_region, a_mr) = pair.a.region(64, ALL).unwrap();
    a_region.write(0, &pattern(64, 8)).unwrap();
    for (round, &(a_qp, _)) in [links[1], links[0], links[1]].iter().enumerate() {
        pair.a
            .rnic
            .post_send(
                a_qp,
                &wr(round as u64, SendOp::Send, &[sge(&a_mr, round * 8, 20)]),
            )
            .unwrap();
        pair.run(STEPS);
    }
    let wcs = pair.b.completions();
    let got: Vec<(u64, u64)> = wcs.iter().map(|wc| (wc.wr_id, wc.qp.0)).collect();
    assert_eq!(
        got,
        [(0, links[1].1 .0), (1, links[0].1 .0), (2, links[1].1 .0)]
    );
    for (i, wc) in wcs.iter().enumerate() {
        assert_wc(wc, i as u64, WcOpcode::Recv, 20);
        assert_eq!(
            &b_region.to_vec()[32 * i..32 * i + 20],
            &pattern(64, 8)[i * 8..i * 8 + 20]
        );
    }
}

#[test]
fn fast_registration_local_and_remote_invalidation() {
    let mut pair = pair(PairConfig::default());
    let (a_region, a_mr) = pair.a.region(256, ALL).unwrap();
    a_region.write(0, &pattern(256, 6)).unwrap();
    let memory = Region::new(4096);
    let stag = pair.b.rnic.alloc_fast_reg_stag(pair.b.pd).unwrap();
    let window = |access| FastRegistration {
        stag,
        region: memory.clone(),
        offset: 1024,
        len: 512,
        base_to: 0x7000,
        access,
    };
    let (b_qp, a_qp) = (pair.b.qp, pair.a.qp);
    let target = rnic_engine::verbs::RemoteAddr { stag, to: 0x7010 };

    pair.b
        .rnic
        .post_send(
            b_qp,
            &wr(1, SendOp::FastRegister(window(Access::REMOTE_WRITE)), &[]),
        )
        .unwrap();
    pair.run(STEPS);
    assert_wc(&pair.b.completions()[0], 1, WcOpcode::FastRegister, 0);
    pair.a
        .rnic
        .post_send(a_qp, &wr(2, SendOp::Write(target), &[sge(&a_mr, 0, 100)]))
        .unwrap();
    pair.run(STEPS);
    assert_eq!(
        &memory.to_vec()[1024 + 0x10..1024 + 0x10 + 100],
        &pattern(256, 6)[..100]
    );

    // Local invalidation, then a bind with remote-invalidate rights, then a
    // Send with Invalidate from the peer.
    pair.b
        .rnic
        .post_send(b_qp, &wr(3, SendOp::LocalInvalidate(stag), &[]))
        .unwrap();
    pair.b
        .rnic
        .post_send(
            b_qp,
            &wr(
                4,
                SendOp::FastRegister(window(
                    Access::REMOTE_WRITE.union(Access::REMOTE_INVALIDATE),
                )),
                &[],
            ),
        )
        .unwrap();
    let (_, b_recv) = pair.b.region(16, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(b_qp, &recv(5, &[sge(&b_recv, 0, 16)]))
        .unwrap();
    pair.run(STEPS);
    pair.a
        .rnic
        .post_send(
            a_qp,
            &wr(6, SendOp::SendWithInvalidate(stag), &[sge(&a_mr, 0, 16)]),
        )
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.b.completions();
    assert_wc(&wcs[0], 3, WcOpcode::LocalInvalidate, 0);
    assert_wc(&wcs[1], 4, WcOpcode::FastRegister, 0);
    assert_wc(&wcs[2], 5, WcOpcode::Recv, 16);
    assert_eq!(wcs[2].invalidated, Some(stag));
    // The invalidated STag no longer takes a Write: DDP invalid STag.
    pair.a
        .rnic
        .post_send(a_qp, &wr(7, SendOp::Write(target), &[sge(&a_mr, 0, 8)]))
        .unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, Some(b_qp)),
        [QpEvent::TerminateSent(info((1, 1, 0)))]
    );
    assert_eq!(
        events(&mut pair, true, Some(a_qp)),
        [QpEvent::TerminateReceived(info((1, 1, 0)))]
    );
}

#[test]
fn fast_registration_outside_the_region_fails_locally() {
    let mut pair = pair(PairConfig::default());
    let memory = Region::new(100);
    let stag = pair.b.rnic.alloc_fast_reg_stag(pair.b.pd).unwrap();
    let fr = FastRegistration {
        stag,
        region: memory,
        offset: 64,
        len: 64,
        base_to: 0,
        access: Access::REMOTE_WRITE,
    };
    pair.b
        .rnic
        .post_send(pair.b.qp, &wr(1, SendOp::FastRegister(fr), &[]))
        .unwrap();
    pair.b
        .rnic
        .post_send(pair.b.qp, &wr(2, SendOp::LocalInvalidate(stag ^ 0x55), &[]))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.b.completions();
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        [
            (1, WcStatus::LocalProtection),
            (2, WcStatus::LocalProtection)
        ]
    );
}

#[test]
fn solicited_event_notification() {
    let mut pair = pair(PairConfig::default());
    let (_, b_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    let (_, a_mr) = pair.a.region(64, ALL).unwrap();
    for i in 0..4 {
        pair.b
            .rnic
            .post_recv(pair.b.qp, &recv(i, &[sge(&b_mr, 16 * i as usize, 16)]))
            .unwrap();
    }
    let cq = pair.b.cq;
    pair.b.rnic.req_notify_cq(cq, Notify::Solicited).unwrap();
    let send = |pair: &mut rnic_engine::pair::RnicPair, solicited| {
        let sgl = [sge(&a_mr, 0, 8)];
        let wr = SendWr {
            wr_id: 0,
            op: SendOp::Send,
            sgl: &sgl,
            signaled: false,
            solicited,
            fence: false,
        };
        pair.a.rnic.post_send(pair.a.qp, &wr).unwrap();
        pair.run(STEPS);
    };
    send(&mut pair, false);
    assert!(
        !pair.b.rnic.cq(cq).unwrap().take_event(),
        "an unsolicited Send does not raise it"
    );
    send(&mut pair, true);
    assert!(
        pair.b.rnic.cq(cq).unwrap().take_event(),
        "a Send with SE does"
    );
    send(&mut pair, true);
    assert!(
        !pair.b.rnic.cq(cq).unwrap().take_event(),
        "fires once per arming"
    );
    pair.b.rnic.req_notify_cq(cq, Notify::Next).unwrap();
    send(&mut pair, false);
    assert!(
        pair.b.rnic.cq(cq).unwrap().take_event(),
        "Next fires on any completion"
    );
    assert_eq!(pair.b.completions().len(), 4);
}

#[test]
fn verbs_refuse_bad_requests_without_harming_the_qp() {
    let mut pair = pair(PairConfig {
        queue_size: 2,
        ..PairConfig::default()
    });
    let (_, a_mr) = pair.a.region(64, ALL).unwrap();
    let qp = pair.a.qp;
    let remote = rnic_engine::verbs::RemoteAddr { stag: 0, to: 0 };
    let five = [sge(&a_mr, 0, 1); 5];
    assert_eq!(
        pair.a.rnic.post_send(qp, &wr(0, SendOp::Send, &five)),
        Err(VerbError::TooManySge)
    );
    let fetch = SendOp::FetchAdd {
        remote,
        add: 1,
        mask: 0,
    };
    assert_eq!(
        pair.a
            .rnic
            .post_send(qp, &wr(0, fetch, &[sge(&a_mr, 0, 4)])),
        Err(VerbError::Invalid)
    );
    assert_eq!(
        pair.a.rnic.post_send(qp, &wr(0, SendOp::Read(remote), &[])),
        Err(VerbError::Invalid)
    );
    assert_eq!(
        pair.a
            .rnic
            .post_send(rnic_engine::verbs::QpHandle(99), &wr(0, SendOp::Send, &[])),
        Err(VerbError::UnknownHandle)
    );
    pair.a
        .rnic
        .post_send(qp, &wr(0, SendOp::Send, &[]))
        .unwrap();
    pair.a
        .rnic
        .post_send(qp, &wr(0, SendOp::Send, &[]))
        .unwrap();
    assert_eq!(
        pair.a.rnic.post_send(qp, &wr(0, SendOp::Send, &[])),
        Err(VerbError::Full)
    );
    let region = Region::new(16);
    assert_eq!(
        pair.a.rnic.reg_mr(pair.a.pd, region, 8, 9, 0, ALL),
        Err(VerbError::Invalid),
        "outside the region"
    );
    assert_eq!(pair.a.rnic.qp_state(qp).unwrap(), QpState::Rts);
}

/// A receive larger than 4 GiB is refused, to a QP's queue and to an SRQ,
/// as a send request's list is: the Message Offset is 32 bits (RFC 5041
/// §4.3) and so is a completion's length, so a Send ending past 2^32
/// octets of it would complete with its length cut. A list of exactly
/// `u32::MAX` octets is taken.
#[test]
fn a_receive_larger_than_4_gib_is_refused() {
    let mut pair = pair(PairConfig::default());
    let srq = pair.b.rnic.create_srq(pair.b.pd, 8).unwrap();
    // Posting checks no STag (a receive's list is checked when a Send
    // lands in it), and a registration needs memory behind every octet:
    // a small region stands in for a large one.
    let (_, mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    let large = [sge(&mr, 0, 0x6000_0000); 3];
    let qp = pair.b.qp;
    assert_eq!(
        pair.b.rnic.post_recv(qp, &recv(1, &large)),
        Err(VerbError::Invalid)
    );
    assert_eq!(
        pair.b.rnic.post_srq_recv(srq, &recv(2, &large)),
        Err(VerbError::Invalid)
    );
    let over = [sge(&mr, 0, 0x8000_0000), sge(&mr, 0, 0x8000_0000)];
    assert_eq!(
        pair.b.rnic.post_recv(qp, &recv(3, &over)),
        Err(VerbError::Invalid),
        "2^32 octets"
    );
    let most = [sge(&mr, 0, 0x8000_0000), sge(&mr, 0, 0x7fff_ffff)];
    pair.b.rnic.post_recv(qp, &recv(4, &most)).unwrap();
    pair.b.rnic.post_srq_recv(srq, &recv(5, &most)).unwrap();
    assert_eq!(pair.b.rnic.qp_state(qp).unwrap(), QpState::Rts);
}

/// A local protection error on a send request completes it in error and
/// ends the connection with a local catastrophic Terminate.
#[test]
fn a_bad_local_sge_fails_the_request_and_the_qp() {
    let mut pair = pair(PairConfig::default());
    let (_, a_mr) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
    let (_, b_recv) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(pair.b.qp, &recv(9, &[sge(&b_recv, 0, 64)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Send, &[sge(&a_mr, 60, 8)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(2, SendOp::Send, &[sge(&a_mr, 0, 8)]))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        [(1, WcStatus::LocalProtection), (2, WcStatus::Flushed)]
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(info((0, 0, 0)))]
    );
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateReceived(info((0, 0, 0)))]
    );
    let wcs = pair.b.completions();
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        [(9, WcStatus::Flushed)]
    );
}

/// Closing a QP (the connection is gone) flushes every outstanding work
/// request in order, and the QP takes no more.
#[test]
fn close_flushes_everything_outstanding() {
    let mut pair = pair(PairConfig {
        ird_ord: 1,
        ..PairConfig::default()
    });
    let (_, b_mr, _, a_mr) = regions(&mut pair, 4096, ALL);
    let qp = pair.a.qp;
    for i in 0..3 {
        pair.a
            .rnic
            .post_recv(qp, &recv(100 + i, &[sge(&a_mr, 0, 8)]))
            .unwrap();
    }
    pair.a
        .rnic
        .post_send(
            qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, 64)]),
        )
        .unwrap();
    pair.a
        .rnic
        .post_send(
            qp,
            &wr(2, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 64, 64)]),
        )
        .unwrap();
    pair.a
        .rnic
        .post_send(qp, &wr(3, SendOp::Send, &[sge(&a_mr, 0, 8)]))
        .unwrap();
    let mut segment = vec![0u8; 1448];
    assert!(
        pair.a.rnic.poll_transmit(qp, &mut segment).unwrap() > 0,
        "the first Read leaves"
    );
    pair.a.rnic.close(qp).unwrap();
    let wcs = pair.a.completions();
    let got: Vec<(u64, WcStatus)> = wcs.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    let flushed = WcStatus::Flushed;
    assert_eq!(
        got,
        [
            (1, flushed),
            (2, flushed),
            (3, flushed),
            (100, flushed),
            (101, flushed),
            (102, flushed)
        ]
    );
    assert_eq!(pair.a.rnic.qp_state(qp).unwrap(), QpState::Error);
    assert_eq!(
        pair.a.rnic.post_send(qp, &wr(4, SendOp::Send, &[])),
        Err(VerbError::State)
    );
    assert_eq!(
        pair.a.rnic.post_recv(qp, &recv(5, &[])),
        Err(VerbError::State)
    );
    assert_eq!(pair.a.rnic.poll_transmit(qp, &mut segment).unwrap(), 0);
}

/// A fast registration whose Tagged Offsets would wrap is refused locally,
/// as `reg_mr` refuses one.
#[test]
fn fast_registration_with_wrapping_offsets_fails_locally() {
    let mut pair = pair(PairConfig::default());
    let stag = pair.b.rnic.alloc_fast_reg_stag(pair.b.pd).unwrap();
    let fr = FastRegistration {
        stag,
        region: Region::new(4096),
        offset: 0,
        len: 4096,
        base_to: u64::MAX - 100,
        access: Access::REMOTE_WRITE,
    };
    pair.b
        .rnic
        .post_send(pair.b.qp, &wr(1, SendOp::FastRegister(fr), &[]))
        .unwrap();
    pair.run(STEPS);
    assert_eq!(pair.b.completions()[0].status, WcStatus::LocalProtection);
    let (_, a_mr) = pair.a.region(8, ALL).unwrap();
    let target = rnic_engine::verbs::RemoteAddr {
        stag,
        to: u64::MAX - 50,
    };
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(2, SendOp::Write(target), &[sge(&a_mr, 0, 8)]),
        )
        .unwrap();
    pair.run(STEPS);
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(info((1, 1, 0)))]
    );
}

/// Each QP counts its traffic by RDMAP opcode, each way (what an
/// operator's per-service counters are made of): messages at their last
/// segment, payload octets of every segment, the same numbers at both ends.
#[test]
fn each_qp_counts_its_messages_and_octets_by_opcode() {
    use rnic_engine::wire::rdmap::Opcode;
    for config in configs() {
        let mut pair = pair(config);
        let (write_len, read_len, send_len) = (10_000, 5_000, 300);
        let (b_region, b_mr) = pair.b.region(32_768, ALL).unwrap();
        let (_a_region, a_mr) = pair.a.region(32_768, ALL).unwrap();
        b_region.write(0, &pattern(read_len, 1)).unwrap();
        let rsgl = [sge(&b_mr, 16_384, send_len)];
        pair.b.rnic.post_recv(pair.b.qp, &recv(1, &rsgl)).unwrap();
        let w = [sge(&a_mr, 0, write_len)];
        let r = [sge(&a_mr, 12_000, read_len)];
        let s = [sge(&a_mr, 20_000, send_len)];
        for (id, op, sgl) in [
            (1, SendOp::Write(remote(&b_mr, 8_000)), &w[..]),
            (2, SendOp::Read(remote(&b_mr, 0)), &r[..]),
            (3, SendOp::Send, &s[..]),
        ] {
            pair.a.rnic.post_send(pair.a.qp, &wr(id, op, sgl)).unwrap();
        }
        pair.run(STEPS);
        assert_eq!(pair.a.completions().len(), 3, "{config:?}");
        let a = pair.a.rnic.op_stats(pair.a.qp).unwrap();
        let b = pair.b.rnic.op_stats(pair.b.qp).unwrap();
        let at = |o: Opcode| usize::from(u8::from(o));
        for (way, name) in [(&a.tx, "a sent"), (&b.rx, "b received")] {
            assert_eq!(way[at(Opcode::RdmaWrite)].messages, 1, "{name} {config:?}");
            assert_eq!(
                way[at(Opcode::RdmaWrite)].octets,
                write_len as u64,
                "{name}"
            );
            assert_eq!(way[at(Opcode::RdmaReadRequest)].messages, 1, "{name}");
            // The Read Request's RDMAP header (RFC 5040 §4.4) is its payload.
            assert_eq!(way[at(Opcode::RdmaReadRequest)].octets, 28, "{name}");
            assert_eq!(way[at(Opcode::Send)].messages, 1, "{name}");
            assert_eq!(way[at(Opcode::Send)].octets, send_len as u64, "{name}");
            assert_eq!(way[at(Opcode::RdmaReadResponse)].messages, 0, "{name}");
        }
        for (way, name) in [(&b.tx, "b sent"), (&a.rx, "a received")] {
            assert_eq!(
                way[at(Opcode::RdmaReadResponse)].messages,
                1,
                "{name} {config:?}"
            );
            assert_eq!(
                way[at(Opcode::RdmaReadResponse)].octets,
                read_len as u64,
                "{name}"
            );
            assert_eq!(way[at(Opcode::RdmaWrite)].messages, 0, "{name}");
        }
    }
}

/// The responder times each inbound Read and Atomic Request from the turn
/// it arrived to the turn its last response segment was written, on the
/// clock its core sets ([`Rnic::set_now`]): a Read of many segments, sent
/// one segment per step while the clock moves 10 us a step, counts the
/// steps its response took; an Atomic answered in its arrival's step
/// counts 0. The buckets are Prometheus's `le` buckets on powers of two.
#[test]
fn responses_are_timed_from_request_to_last_segment() {
    use rnic_engine::qp::{ResponseTimes, RESPONSE_BUCKETS};
    for (us, bucket) in [
        (0, 0),
        (1, 0),
        (2, 1),
        (3, 2),
        (4, 2),
        (5, 3),
        (1 << 22, 22),
        ((1 << 22) + 1, 23),
        (u64::MAX, 23),
    ] {
        assert_eq!(ResponseTimes::bucket(us), bucket, "{us} us");
    }
    assert_eq!(ResponseTimes::bound_us(22), Some(1 << 22));
    assert_eq!(ResponseTimes::bound_us(RESPONSE_BUCKETS - 1), None);
    for config in configs() {
        let mut pair = pair(config);
        let read_len = 60_000;
        let (b_region, b_mr) = pair.b.region(65_536, ALL).unwrap();
        let (_a_region, a_mr) = pair.a.region(65_536, ALL).unwrap();
        b_region.write(0, &pattern(read_len, 3)).unwrap();
        let r = [sge(&a_mr, 0, read_len)];
        let f = [sge(&a_mr, 61_440, 8)];
        for (id, op, sgl) in [
            (1, SendOp::Read(remote(&b_mr, 0)), &r[..]),
            (
                2,
                SendOp::FetchAdd {
                    remote: remote(&b_mr, 61_440),
                    add: 1,
                    mask: 0,
                },
                &f[..],
            ),
        ] {
            pair.a.rnic.post_send(pair.a.qp, &wr(id, op, sgl)).unwrap();
        }
        let mut steps = 0u64;
        for step in 0..STEPS as u64 {
            pair.a.rnic.set_now(10 * step);
            pair.b.rnic.set_now(10 * step);
            if pair.step() == 0 {
                break;
            }
            steps = step + 1;
        }
        assert_eq!(pair.a.completions().len(), 2, "{config:?}");
        let b = pair.b.rnic.op_stats(pair.b.qp).unwrap();
        let reads = b.read_responses;
        assert_eq!(reads.count(), 1, "{config:?}");
        // A step moves a segment or at most a window each way, so the
        // response's windows after the first took a step each, and the
        // whole no more than the run.
        let windows = read_len.div_ceil(config.window.max(config.emss)) as u64;
        assert!(
            reads.sum_us >= 10 * (windows - 1) && reads.sum_us <= 10 * steps,
            "{} us for {windows} windows in {steps} steps, {config:?}",
            reads.sum_us
        );
        assert_eq!(
            reads.buckets[ResponseTimes::bucket(reads.sum_us)],
            1,
            "{config:?}"
        );
        // The Atomic waits behind the Read's response in the IRRQ (RFC
        // 7306: responses in request order), arriving within a step of it.
        let atomics = b.atomic_responses;
        assert_eq!(atomics.count(), 1, "{config:?}");
        assert!(
            atomics.sum_us + 10 >= reads.sum_us && atomics.sum_us <= 10 * steps,
            "{} us after the Read's {} us, {config:?}",
            atomics.sum_us,
            reads.sum_us
        );
        // The requester answered none.
        let a = pair.a.rnic.op_stats(pair.a.qp).unwrap();
        assert_eq!(a.read_responses.count() + a.atomic_responses.count(), 0);
    }
}

/// A destroyed QP's handle is handed out again only once every other free
/// one has been: the receive it had posted completes flushed under its
/// handle into a CQ its consumer polls later, and a QP made in the
/// meantime does not share that handle (with the lowest free slot first,
/// it did, and the flushed completion named the new QP).
#[test]
fn a_destroyed_qps_handle_comes_back_last() {
    use rnic_engine::cq::Wc;
    use rnic_engine::verbs::{RecvWr, Rnic, RnicConfig};
    let mut rnic = Rnic::new(RnicConfig {
        qps_max: 3,
        ..RnicConfig::default()
    });
    let pd = rnic.alloc_pd().unwrap();
    let cq = rnic.create_cq(16).unwrap();
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        sq_size: 4,
        rq_size: 4,
    };
    let mr = rnic
        .reg_region(pd, Region::new(64), Access::LOCAL_WRITE)
        .unwrap();
    let a = rnic.create_qp(init).unwrap();
    let sgl = [sge(&mr, 0, 64)];
    rnic.post_recv(
        a,
        &RecvWr {
            wr_id: 7,
            sgl: &sgl,
        },
    )
    .unwrap();
    rnic.close(a).unwrap();
    rnic.destroy_qp(a).unwrap();
    let b = rnic.create_qp(init).unwrap();
    assert_ne!(a, b, "a destroyed QP's handle handed out at once");
    let mut wcs = [Wc::EMPTY; 4];
    assert_eq!(rnic.poll_cq(cq, &mut wcs), Ok(1));
    assert_eq!(
        (wcs[0].qp, wcs[0].wr_id, wcs[0].status),
        (a, 7, WcStatus::Flushed)
    );
    // Every other slot taken: then it comes back, and the table is full.
    let c = rnic.create_qp(init).unwrap();
    assert!(c != a && c != b);
    // Its slot, under a new handle: the old one names nothing.
    let again = rnic.create_qp(init).unwrap();
    assert_eq!(again.index(), a.index());
    assert_ne!(again, a);
    assert_eq!(rnic.create_qp(init), Err(VerbError::Full));
    // The next after the last handed out, not the lowest free.
    rnic.destroy_qp(b).unwrap();
    rnic.destroy_qp(c).unwrap();
    assert_eq!(rnic.create_qp(init).map(|q| q.index()), Ok(b.index()));
    assert_eq!(rnic.create_qp(init).map(|q| q.index()), Ok(c.index()));
}
