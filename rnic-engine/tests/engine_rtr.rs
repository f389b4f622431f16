//! RFC 6581's peer-to-peer start and RFC 5044's MPA fencing in the engine:
//! the initiator's RTR goes out before any other FPDU, in Linux siw's exact
//! form; the responder sends nothing until the first FPDU arrived, consumes
//! the RTR without a completion, and answers any other first message with
//! TERM 2/0/7; the queues' MSNs go on after the RTR.

mod support;

use rnic_engine::cq::WcOpcode;
use rnic_engine::mem::Access;
use rnic_engine::pair::{connection, PairConfig, RnicPair};
use rnic_engine::qp::{Connection, Rtr, RtrSet};
use rnic_engine::verbs::QpInit;
use rnic_engine::verbs::{QpHandle, SendOp};
use support::*;

/// A pair whose extra QPs are connected as an RFC 6581 initiator (`a`,
/// sending `rtr`) and responder (`b`, fenced, taking `accept`).
fn p2p_pair(
    config: PairConfig,
    rtr: Option<Rtr>,
    accept: RtrSet,
) -> (RnicPair, QpHandle, QpHandle) {
    let base = connection(&config);
    let a = Connection {
        rtr_send: rtr,
        ..base
    };
    let b = Connection {
        rtr_accept: accept,
        fenced: true,
        ..base
    };
    pair_with(config, a, b)
}

/// A pair whose extra QPs, linked, are connected with `a` and `b`.
fn pair_with(config: PairConfig, a: Connection, b: Connection) -> (RnicPair, QpHandle, QpHandle) {
    let mut pair = RnicPair::new(config).unwrap();
    let qp = |side: &mut rnic_engine::pair::Side, c: Connection| {
        let init = QpInit {
            pd: side.pd,
            send_cq: side.cq,
            recv_cq: side.cq,
            srq: None,
            sq_size: 64,
            rq_size: 64,
        };
        let qp = side.rnic.create_qp(init).unwrap();
        side.rnic.connect(qp, c).unwrap();
        qp
    };
    let qa = qp(&mut pair.a, a);
    let qb = qp(&mut pair.b, b);
    pair.link(qa, qb);
    (pair, qa, qb)
}

fn one(rtr: Rtr) -> RtrSet {
    let mut set = RtrSet::NONE;
    match rtr {
        Rtr::Send => set.send = true,
        Rtr::Write => set.write = true,
        Rtr::Read => set.read = true,
    }
    set
}

/// What `a`'s `qp` sends now (CRC on, no markers), and the ULPDU of its
/// first FPDU.
fn first_ulpdu(pair: &mut RnicPair, qp: QpHandle) -> (Vec<u8>, Vec<u8>) {
    let mut out = vec![0u8; 4096];
    let n = pair.a.rnic.poll_transmit(qp, &mut out).unwrap();
    assert!(n > 0, "something was sent");
    let len = usize::from(u16::from_be_bytes([out[0], out[1]]));
    (out[..n].to_vec(), out[2..2 + len].to_vec())
}

#[test]
fn the_rtr_goes_first_in_siws_form_and_is_consumed() {
    // Linux siw's RTRs as captured (rping_v2_p2p_write_rtr packet 8) and as
    // its siw_qp_prepare_tx builds them.
    let expected: [(Rtr, &[u8]); 3] = [
        (
            Rtr::Write,
            &[0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0],
        ),
        (
            Rtr::Read,
            &[
                0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,
                0, // DDP: QN 1, MSN 1, MO 0
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // sink STag 0, TO 0
                0, 0, 0, 0, // size 0
                0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, // source STag 1, TO 0
            ],
        ),
        (
            Rtr::Send,
            &[0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0],
        ),
    ];
    for (rtr, bytes) in expected {
        let (mut pair, qa, qb) = p2p_pair(PairConfig::default(), Some(rtr), one(rtr));
        // Work posted before anything was sent still goes after the RTR.
        let (_, a_mr) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
        let (_, b_mr) = pair
            .b
            .region(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        pair.b
            .rnic
            .post_recv(qb, &recv(1, &[sge(&b_mr, 0, 64)]))
            .unwrap();
        let sgl = [sge(&a_mr, 0, 16)];
        pair.a
            .rnic
            .post_send(qa, &wr(2, SendOp::Send, &sgl))
            .unwrap();
        let (wire, ulpdu) = first_ulpdu(&mut pair, qa);
        assert_eq!(ulpdu, bytes, "{rtr:?}");
        // The RTR and the Send behind it, to b.
        pair.b.rnic.handle_stream(qb, &wire).unwrap();
        pair.run(100);
        let b = pair.b.completions();
        assert_eq!(b.len(), 1, "{rtr:?}: only the Send completes on b: {b:?}");
        assert_wc(&b[0], 1, WcOpcode::Recv, 16);
        let a = pair.a.completions();
        assert_eq!(
            a.len(),
            1,
            "{rtr:?}: no completion for the RTR or its Read Response: {a:?}"
        );
        assert!(
            events(&mut pair, true, Some(qa)).is_empty()
                && events(&mut pair, false, Some(qb)).is_empty()
        );
    }
}

#[test]
fn every_rtr_then_every_operation_both_ways() {
    for rtr in [Rtr::Write, Rtr::Read, Rtr::Send] {
        // No RTR over SCTP (RFC 6581 §7: either side may send first).
        for config in configs().into_iter().filter(|c| !c.link.is_messages()) {
            let (mut pair, qa, qb) = p2p_pair(config, Some(rtr), RtrSet::ALL);
            let (a_region, a_mr) = pair
                .a
                .region(
                    4096,
                    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
                )
                .unwrap();
            let (b_region, b_mr) = pair
                .b
                .region(
                    4096,
                    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
                )
                .unwrap();
            let data = pattern(3000, 7);
            a_region.write(0, &data).unwrap();
            b_region.write(0, &data).unwrap();
            // A Send each way (MSNs go on after a Send RTR), a Read from b
            // (MSNs on queue 1 go on after a Read RTR), a Write from b.
            pair.b
                .rnic
                .post_recv(qb, &recv(10, &[sge(&b_mr, 3000, 1000)]))
                .unwrap();
            pair.a
                .rnic
                .post_recv(qa, &recv(20, &[sge(&a_mr, 3000, 1000)]))
                .unwrap();
            let a_sgl = [sge(&a_mr, 0, 900)];
            pair.a
                .rnic
                .post_send(qa, &wr(1, SendOp::Send, &a_sgl))
                .unwrap();
            let b_sgl = [sge(&b_mr, 0, 800)];
            pair.b
                .rnic
                .post_send(qb, &wr(2, SendOp::Send, &b_sgl))
                .unwrap();
            let read_sink = [sge(&b_mr, 1000, 500)];
            pair.b
                .rnic
                .post_send(qb, &wr(3, SendOp::Read(remote(&a_mr, 100)), &read_sink))
                .unwrap();
            let a_read_sink = [sge(&a_mr, 2000, 300)];
            pair.a
                .rnic
                .post_send(qa, &wr(4, SendOp::Read(remote(&b_mr, 200)), &a_read_sink))
                .unwrap();
            pair.run(10_000);
            let (mut a, mut b) = (pair.a.completions(), pair.b.completions());
            a.sort_by_key(|w| w.wr_id);
            b.sort_by_key(|w| w.wr_id);
            let ids = |w: &[rnic_engine::cq::Wc]| {
                w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>()
            };
            use rnic_engine::cq::WcStatus::Success;
            assert_eq!(
                ids(&a),
                [(1, Success), (4, Success), (20, Success)],
                "{rtr:?} {config:?}"
            );
            assert_eq!(
                ids(&b),
                [(2, Success), (3, Success), (10, Success)],
                "{rtr:?} {config:?}"
            );
            let mut got = vec![0u8; 500];
            b_region.read(1000, &mut got).unwrap();
            assert_eq!(got, &data[100..600]);
            let mut got = vec![0u8; 900];
            b_region.read(3000, &mut got[..900]).unwrap();
            assert_eq!(got, &data[..900]);
        }
    }
}

#[test]
fn the_fenced_responder_sends_nothing_before_the_first_fpdu() {
    // Client-server: no RTR, but RFC 5044's fence on the responder.
    let (mut pair, qa, qb) = p2p_pair(PairConfig::default(), None, RtrSet::NONE);
    let (_, b_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    let (_, a_mr) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
    pair.a
        .rnic
        .post_recv(qa, &recv(1, &[sge(&a_mr, 0, 64)]))
        .unwrap();
    let sgl = [sge(&b_mr, 0, 8)];
    pair.b
        .rnic
        .post_send(qb, &wr(2, SendOp::Send, &sgl))
        .unwrap();
    let mut out = vec![0u8; 4096];
    assert_eq!(
        pair.b.rnic.poll_transmit(qb, &mut out).unwrap(),
        0,
        "fenced"
    );
    pair.run(100);
    assert!(pair.b.completions().is_empty() && pair.a.completions().is_empty());
    // The initiator's first FPDU lifts the fence.
    pair.b
        .rnic
        .post_recv(qb, &recv(3, &[sge(&b_mr, 8, 8)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(qa, &wr(4, SendOp::Send, &[sge(&a_mr, 0, 8)]))
        .unwrap();
    pair.run(100);
    let mut b = pair.b.completions();
    b.sort_by_key(|w| w.wr_id);
    assert_eq!(b.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(pair.a.completions().len(), 2);
}

#[test]
fn a_first_message_that_is_not_a_negotiated_rtr_is_term_2_0_7() {
    for (sent, accept) in [
        (None, RtrSet::ALL),                // a Send instead of any RTR
        (Some(Rtr::Write), one(Rtr::Read)), // the wrong RTR
        (Some(Rtr::Read), one(Rtr::Send)),
    ] {
        let (mut pair, qa, qb) = p2p_pair(PairConfig::default(), sent, accept);
        let (_, a_mr) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
        let (_, b_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
        pair.b
            .rnic
            .post_recv(qb, &recv(1, &[sge(&b_mr, 0, 64)]))
            .unwrap();
        pair.a
            .rnic
            .post_send(qa, &wr(2, SendOp::Send, &[sge(&a_mr, 0, 8)]))
            .unwrap();
        pair.run(100);
        let want = rnic_engine::qp::QpEvent::TerminateSent(info((2, 0, 7)));
        assert_eq!(
            events(&mut pair, false, Some(qb)),
            [want],
            "{sent:?} to {accept:?}"
        );
        assert_eq!(
            events(&mut pair, true, Some(qa)),
            [rnic_engine::qp::QpEvent::TerminateReceived(info((2, 0, 7)))]
        );
    }
}

#[test]
fn malformed_rtr_lookalikes_are_term_2_0_7_not_panics() {
    use rnic_engine::wire::rdmap::{Control, Opcode};
    // A zero-length Send on queue 9, a Send RTR with MO 4, a Read RTR
    // without L: none is an RTR; none may panic the responder.
    let send_on = |qn: u32, mo: u32| {
        let mut u = vec![0u8; 18];
        u[0] = 0x41; // untagged, L, DV 1
        u[1] = Control::new(Opcode::Send).to_octet();
        u[6..10].copy_from_slice(&qn.to_be_bytes());
        u[10..14].copy_from_slice(&1u32.to_be_bytes());
        u[14..18].copy_from_slice(&mo.to_be_bytes());
        u
    };
    let mut read_not_last = vec![0u8; 46];
    read_not_last[0] = 0x01; // untagged, not L
    read_not_last[1] = Control::new(Opcode::RdmaReadRequest).to_octet();
    read_not_last[6..10].copy_from_slice(&1u32.to_be_bytes());
    read_not_last[10..14].copy_from_slice(&1u32.to_be_bytes());
    for ulpdu in [send_on(9, 0), send_on(0, 4), read_not_last] {
        let (mut pair, qa, qb) = p2p_pair(PairConfig::default(), None, RtrSet::ALL);
        pair.a.rnic.inject_ulpdu(qa, &ulpdu).unwrap();
        pair.run(100);
        let want = rnic_engine::qp::QpEvent::TerminateSent(info((2, 0, 7)));
        assert_eq!(events(&mut pair, false, Some(qb)), [want], "{ulpdu:02x?}");
    }
}

#[test]
fn a_read_rtr_is_answered_even_with_ird_0() {
    let config = PairConfig {
        ird_ord: 0,
        ..PairConfig::default()
    };
    let base = connection(&config);
    // The initiator's ORD is 1 for the RTR; the responder's IRD stays 0.
    let a = Connection {
        rtr_send: Some(Rtr::Read),
        ord: 1,
        ..base
    };
    let b = Connection {
        rtr_accept: one(Rtr::Read),
        fenced: true,
        ..base
    };
    let (mut pair, qa, qb) = pair_with(config, a, b);
    let (_, b_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    let (_, a_mr) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
    pair.a
        .rnic
        .post_recv(qa, &recv(1, &[sge(&a_mr, 0, 64)]))
        .unwrap();
    pair.b
        .rnic
        .post_send(qb, &wr(2, SendOp::Send, &[sge(&b_mr, 0, 8)]))
        .unwrap();
    pair.run(100);
    assert!(events(&mut pair, false, Some(qb)).is_empty());
    assert!(events(&mut pair, true, Some(qa)).is_empty());
    assert_eq!(
        pair.a.completions().len(),
        1,
        "b's Send arrived after the RTR's response"
    );
    // The provider's: neither the RTR nor its zero-length response is
    // in the counters the ULP's metrics read, nor timed; b's Send is.
    use rnic_engine::wire::rdmap::Opcode;
    let stats = pair.b.rnic.op_stats(qb).unwrap();
    let at = |o: Opcode| usize::from(u8::from(o));
    assert_eq!(stats.rx[at(Opcode::RdmaReadRequest)].messages, 0);
    assert_eq!(stats.tx[at(Opcode::RdmaReadResponse)].messages, 0);
    assert_eq!(stats.read_responses.count(), 0);
    assert_eq!(stats.tx[at(Opcode::Send)].messages, 1);
}

#[test]
fn siws_startup_terminate_with_crc_0_is_read_as_a_terminate() {
    // Linux siw's Terminate for "insufficient IRD" during the startup: its
    // own bit layout (layer in the low nibble) and a CRC field of 0, though
    // CRC was negotiated (siw_send_terminate before its QP is in RTS).
    let siw_term: [u8; 28] = [
        0x00, 0x16, 0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0,
        0, // DDP, QN 2, MSN 1
        0x02, 0x06, 0x00, 0x00, // 2/0/6, siw layout
        0, 0, 0, 0, // CRC 0
    ];
    let (mut pair, _qa, qb) = p2p_pair(PairConfig::default(), None, RtrSet::ALL);
    pair.b.rnic.handle_stream(qb, &siw_term).unwrap();
    let got = rnic_engine::qp::QpEvent::TerminateReceived(info((2, 0, 6)));
    assert_eq!(events(&mut pair, false, Some(qb)), [got]);
    // Only the first FPDU, only a Terminate, only CRC 0: a wrong non-zero
    // CRC is still a CRC error (2/0/2).
    let mut bad = siw_term;
    bad[27] = 1;
    let (mut pair, _qa, qb) = p2p_pair(PairConfig::default(), None, RtrSet::ALL);
    pair.b.rnic.handle_stream(qb, &bad).unwrap();
    pair.run(10);
    let sent = rnic_engine::qp::QpEvent::TerminateSent(info((2, 0, 2)));
    assert_eq!(events(&mut pair, false, Some(qb)), [sent]);
}

/// A connection with `terminate_layout: SiwBitfield` sends its Terminates in
/// Linux siw's layout (octet 0 `etype << 4 | layer`, flags in bits 0-2 of
/// octet 2), which siw reads correctly; dpwarp still reads them right.
#[test]
fn terminates_go_out_in_the_layout_asked_for() {
    use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
    use rnic_engine::verbs::QpEvent;
    use rnic_engine::wire::{ddp, rdmap, term};
    for layout in [term::Encoding::Rfc5040, term::Encoding::SiwBitfield] {
        let config = PairConfig::default();
        let base = connection(&config);
        let b = Connection {
            terminate_layout: layout,
            ..base
        };
        let (mut pair, qa, qb) = pair_with(config, base, b);
        // A Send into b, which has no receive posted: b terminates with DDP
        // (1), untagged buffer error (2), no buffer available (2).
        let sgl: [rnic_engine::verbs::Sge; 0] = [];
        pair.a
            .rnic
            .post_send(
                qa,
                &rnic_engine::verbs::SendWr {
                    wr_id: 1,
                    op: rnic_engine::verbs::SendOp::Send,
                    sgl: &sgl,
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .unwrap();
        let mut wire = vec![0u8; 4096];
        let n = pair.a.rnic.poll_transmit(qa, &mut wire).unwrap();
        pair.b.rnic.handle_stream(qb, &wire[..n]).unwrap();
        let n = pair.b.rnic.poll_transmit(qb, &mut wire).unwrap();
        let mut deframer = Deframer::new(RxConfig {
            crc: config.crc,
            markers: false,
            ulpdu_max: 65535,
        });
        let (_, poll) = deframer.poll(&wire[..n]);
        let Poll::Ulpdu(ulpdu) = poll else {
            panic!("{poll:?}")
        };
        let packet = ddp::Packet::new_checked(ulpdu).unwrap();
        assert_eq!(packet.qn(), ddp::qn::TERMINATE);
        let control = &ulpdu[packet.header_len()..packet.header_len() + 4];
        let expect_octet0 = match layout {
            term::Encoding::Rfc5040 => 1 << 4 | 2,
            term::Encoding::SiwBitfield => 2 << 4 | 1,
        };
        assert_eq!(control[0], expect_octet0, "{layout:?}");
        assert_eq!(control[1], 2, "the code");
        let message = rdmap::Repr::parse(&packet).unwrap();
        let rdmap::Header::Terminate(t) = message.header else {
            panic!("{message:?}")
        };
        assert_eq!(t.encoding, layout);
        // The peer (dpwarp) reports the same layer/type/code either way.
        pair.a.rnic.handle_stream(qa, &wire[..n]).unwrap();
        let mut events = Vec::new();
        while let Ok(Some(e)) = pair.a.rnic.poll_event(qa) {
            events.push(e);
        }
        assert!(
            events.iter().any(|e| matches!(
                e,
                QpEvent::TerminateReceived(i) if (i.layer, i.etype, i.ecode) == (1, 2, 2)
            )),
            "{layout:?}: {events:?}"
        );
    }
}
