//! The engine over its second lower layer, DDP over SCTP (RFC 5043): one
//! DDP segment per message, `DDP-SSN | DDP segment`, arriving in any order.
//! Every data test of `engine.rs` and every bad segment of
//! `engine_errors.rs` also runs over SCTP messages (their configurations
//! include `Link::Messages` and `Link::MessagesShuffled`); this file checks
//! what only the message layer does: the DDP-SSN numbering, placement ahead
//! of delivery, in-order completion, the window's bounds and the verbs'
//! refusals.

mod support;

use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::Access;
use rnic_engine::pair::{self, Link, PairConfig, RnicPair};
use std::sync::Arc;

use rnic_engine::sctp::rx::{ReorderBudget, ReorderConfig};
use rnic_engine::sctp::{self, MESSAGE_MAX_MTU_1500};
use rnic_engine::verbs::{
    MessageConnection, Mr, QpEvent, QpHandle, QpInit, QpState, SendOp, VerbError,
};
use rnic_engine::wire::rdmap::{Header, Opcode};
use rnic_engine::wire::term;
use support::*;

fn messages(link: Link) -> PairConfig {
    PairConfig {
        emss: MESSAGE_MAX_MTU_1500,
        window: 8 * MESSAGE_MAX_MTU_1500,
        seed: 29,
        link,
        ..PairConfig::default()
    }
}

/// `DDP-SSN | segment`.
fn message(ssn: u16, segment: &[u8]) -> Vec<u8> {
    let mut out = ssn.to_be_bytes().to_vec();
    out.extend_from_slice(segment);
    out
}

fn send(msn: u32, payload: &[u8]) -> Vec<u8> {
    untagged(Opcode::Send, 0, msn, 0, Header::None, payload)
}

/// The Terminate b sent, by its events.
fn terminate_sent(pair: &mut RnicPair) -> Vec<QpEvent> {
    pair.run(STEPS);
    events(pair, false, None)
}

/// b's QP `qp` sends what it has (its Terminate, if it owes one); then
/// its next event.
fn event_after_sending(pair: &mut RnicPair, qp: QpHandle) -> Option<QpEvent> {
    let mut out = vec![0u8; 4096];
    let mut lengths = Vec::new();
    pair.b
        .rnic
        .poll_transmit_messages(qp, &mut out, &mut lengths)
        .unwrap();
    pair.b.rnic.poll_event(qp).unwrap()
}

#[test]
fn the_shuffled_link_reorders_and_everything_still_arrives_in_order() {
    let mut pair = pair(messages(Link::MessagesShuffled));
    let len = 1 << 16;
    let (b_region, b_mr, a_region, a_mr) = regions(&mut pair, 2 * len, ALL);
    let data = pattern(len, 4);
    a_region.write(0, &data).unwrap();
    let (b_inbox, b_inbox_mr) = pair.b.region(64 * 100, Access::LOCAL_WRITE).unwrap();
    for i in 0..100u64 {
        let sgl = [sge(&b_inbox_mr, 64 * i as usize, 64)];
        pair.b.rnic.post_recv(pair.b.qp, &recv(i, &sgl)).unwrap();
    }
    b_region.write(len, &pattern(len, 8)).unwrap();
    // Writes, Sends and a Read interleaved: 100 Sends must complete in
    // posting order at b although their messages arrive shuffled.
    let qa = pair.a.qp;
    for i in 0..100u64 {
        let payload = [sge(&a_mr, i as usize * 64, 64)];
        if i % 10 == 0 {
            let sgl = [sge(&a_mr, 0, len)];
            let write = wr(1000 + i, SendOp::Write(remote(&b_mr, 0)), &sgl);
            pair.a.rnic.post_send(qa, &write).unwrap();
        }
        pair.a
            .rnic
            .post_send(qa, &wr(i, SendOp::Send, &payload))
            .unwrap();
        pair.run(3);
    }
    let read = [sge(&a_mr, len, len)];
    let read_wr = wr(5000, SendOp::Read(remote(&b_mr, len)), &read);
    pair.a.rnic.post_send(qa, &read_wr).unwrap();
    pair.run(STEPS);
    assert!(pair.reordered > 100, "only {} overtakes", pair.reordered);
    let b_wcs = pair.b.completions();
    assert_eq!(b_wcs.len(), 100);
    for (i, wc) in b_wcs.iter().enumerate() {
        assert_wc(wc, i as u64, WcOpcode::Recv, 64);
        let got = b_inbox.to_vec();
        assert_eq!(&got[64 * i..64 * i + 64], &data[64 * i..64 * i + 64]);
    }
    assert_eq!(&b_region.to_vec()[..len], &data[..]);
    assert_eq!(&a_region.to_vec()[len..], &pattern(len, 8)[..]);
    let a_wcs = pair.a.completions();
    assert_eq!(a_wcs.len(), 111);
    assert!(a_wcs.iter().all(|wc| wc.status == WcStatus::Success));
    assert_eq!(a_wcs.last().unwrap().wr_id, 5000, "the Read completes last");
}

#[test]
fn messages_carry_ddp_ssns_from_zero_and_fit_the_message_size() {
    let mut pair = pair(messages(Link::Messages));
    let (_, b_mr, a_region, a_mr) = regions(&mut pair, 8192, ALL);
    a_region.write(0, &pattern(8192, 1)).unwrap();
    let sgl = [sge(&a_mr, 0, 5000)];
    let write = wr(1, SendOp::Write(remote(&b_mr, 0)), &sgl);
    pair.a.rnic.post_send(pair.a.qp, &write).unwrap();
    let mut out = vec![0u8; 1 << 16];
    let mut lengths = Vec::new();
    let n = pair
        .a
        .rnic
        .poll_transmit_messages(pair.a.qp, &mut out, &mut lengths)
        .unwrap();
    assert_eq!(lengths.iter().map(|&l| usize::from(l)).sum::<usize>(), n);
    // 5000 octets of payload in segments of at most 1442 - 14 octets.
    assert_eq!(lengths.len(), 4);
    let mut at = 0;
    for (i, &len) in lengths.iter().enumerate() {
        let len = usize::from(len);
        assert!(len <= MESSAGE_MAX_MTU_1500);
        let (ssn, segment) = sctp::split(&out[at..at + len]).unwrap();
        assert_eq!(ssn, i as u16);
        let packet = rnic_engine::wire::ddp::Packet::new_checked(segment).unwrap();
        assert!(packet.tagged());
        assert_eq!(packet.last(), i == 3);
        at += len;
    }
}

#[test]
fn an_early_write_is_placed_at_once_and_early_sends_wait_for_their_turn() {
    let mut pair = pair(messages(Link::Messages));
    let (b_region, b_mr) = pair.b.region(64, Access::REMOTE_WRITE).unwrap();
    let (b_inbox, inbox_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    let qb = pair.b.qp;
    for i in 0..2u64 {
        let sgl = [sge(&inbox_mr, 32 * i as usize, 32)];
        pair.b.rnic.post_recv(qb, &recv(i, &sgl)).unwrap();
    }
    let write = tagged(Opcode::RdmaWrite, b_mr.stag, b_mr.base_to + 3, b"early");
    // DDP-SSN 2, a Send, arrives first: it is held.
    pair.b
        .rnic
        .handle_message(qb, &message(2, &send(2, b"second")))
        .unwrap();
    assert!(pair.b.completions().is_empty());
    // DDP-SSN 1, a Write, is placed before DDP-SSN 0 arrived.
    pair.b.rnic.handle_message(qb, &message(1, &write)).unwrap();
    assert_eq!(&b_region.to_vec()[3..8], b"early");
    assert!(pair.b.completions().is_empty());
    // DDP-SSN 0 delivers itself and then the held Send, in order.
    pair.b
        .rnic
        .handle_message(qb, &message(0, &send(1, b"first")))
        .unwrap();
    let wcs = pair.b.completions();
    assert_eq!(wcs.len(), 2);
    assert_wc(&wcs[0], 0, WcOpcode::Recv, 5);
    assert_wc(&wcs[1], 1, WcOpcode::Recv, 6);
    assert_eq!(&b_inbox.to_vec()[..5], b"first");
    assert_eq!(&b_inbox.to_vec()[32..38], b"second");
    assert_eq!(pair.b.rnic.qp_state(qb).unwrap(), QpState::Rts);
}

/// What a broken or hostile peer can send on the message layer: each is
/// answered with the lower layer's Terminate, 2/0/4 (RFC 5043 names no LLP
/// codes), which the peer reports too.
#[test]
fn bad_ddp_ssns_and_runts_get_the_llp_terminate() {
    let cases: [(&str, Vec<Vec<u8>>); 4] = [
        ("one octet", vec![vec![0]]),
        (
            "a DDP-SSN twice",
            vec![message(1, &send(2, b"x")), message(1, &send(2, b"x"))],
        ),
        ("beyond the window", vec![message(2000, &send(1, b"x"))]),
        (
            "behind the window",
            vec![message(0, &send(1, b"x")), message(0, &send(2, b"x"))],
        ),
    ];
    for (name, sent) in cases {
        let mut pair = pair(messages(Link::Messages));
        let (_, inbox_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
        for i in 0..2 {
            let sgl = [sge(&inbox_mr, 32 * i, 32)];
            pair.b
                .rnic
                .post_recv(pair.b.qp, &recv(i as u64, &sgl))
                .unwrap();
        }
        for m in &sent {
            pair.b.rnic.handle_message(pair.b.qp, m).unwrap();
        }
        let code = info((2, 0, 4));
        assert_eq!(
            terminate_sent(&mut pair),
            [QpEvent::TerminateSent(code)],
            "{name}"
        );
        assert_eq!(
            events(&mut pair, true, None),
            [QpEvent::TerminateReceived(code)],
            "{name}"
        );
        assert_eq!(pair.b.rnic.qp_state(pair.b.qp).unwrap(), QpState::Error);
        // Every posted receive completes, in error where nothing arrived.
        let wcs = pair.b.completions();
        assert_eq!(wcs.len(), 2, "{name}: {wcs:?}");
        assert_eq!(wcs[1].status, WcStatus::Flushed, "{name}");
    }
}

/// A QP of `pair.b` connected over messages with a reorder window of 8
/// messages and 100 octets, and `receives` receives of 64 octets each in
/// `inbox` from 64 `first` on.
fn tight_qp(pair: &mut RnicPair, inbox: &Mr, first: usize, receives: usize) -> QpHandle {
    tight_qp_within(pair, inbox, first, receives, None)
}

/// [`tight_qp`], its window drawing on `budget` if given
/// (`Rnic::connect_messages_within`).
fn tight_qp_within(
    pair: &mut RnicPair,
    inbox: &Mr,
    first: usize,
    receives: usize,
    budget: Option<Arc<ReorderBudget>>,
) -> QpHandle {
    let qp = pair
        .b
        .rnic
        .create_qp(QpInit {
            pd: pair.b.pd,
            send_cq: pair.b.cq,
            recv_cq: pair.b.cq,
            srq: None,
            sq_size: 16,
            rq_size: 16,
        })
        .unwrap();
    let tight = MessageConnection {
        reorder: ReorderConfig {
            messages: 8,
            octets: 100,
        },
        ..pair::message_connection(pair.config())
    };
    match budget {
        Some(budget) => pair.b.rnic.connect_messages_within(qp, tight, budget),
        None => pair.b.rnic.connect_messages(qp, tight),
    }
    .unwrap();
    for i in first..first + receives {
        let sgl = [sge(inbox, 64 * i, 64)];
        pair.b.rnic.post_recv(qp, &recv(i as u64, &sgl)).unwrap();
    }
    qp
}

/// The windows of one engine draw on a common budget
/// (`Rnic::set_reorder_budget`): held messages have left SCTP's receive
/// window, so a peer could otherwise make every stream it opens hold its
/// window's bound. Two QPs of 100 octets each, a budget of 150: the second
/// QP's hold past what is left fails it; delivering and closing the first's
/// gives its octets back.
#[test]
fn the_engine_budget_bounds_what_all_windows_hold_together() {
    let mut pair = pair(messages(Link::Messages));
    pair.b.rnic.set_reorder_budget(150);
    let (_, inbox_mr) = pair.b.region(16 * 64, Access::LOCAL_WRITE).unwrap();
    let qps = [
        tight_qp(&mut pair, &inbox_mr, 0, 8),
        tight_qp(&mut pair, &inbox_mr, 8, 8),
    ];
    let early = |ssn: u16| message(ssn, &send(u32::from(ssn) + 1, &[7; 30]));
    // The first QP holds two early Sends (96 octets, within its 100).
    for ssn in 1..=2u16 {
        pair.b.rnic.handle_message(qps[0], &early(ssn)).unwrap();
    }
    assert_eq!(pair.b.rnic.reorder_budget_left(), Some(150 - 96));
    // The second may hold one (54 left), not two: that fails it.
    pair.b.rnic.handle_message(qps[1], &early(1)).unwrap();
    assert_eq!(pair.b.rnic.qp_state(qps[1]).unwrap(), QpState::Rts);
    assert_eq!(pair.b.rnic.reorder_budget_left(), Some(150 - 96 - 48));
    pair.b.rnic.handle_message(qps[1], &early(2)).unwrap();
    assert_eq!(
        event_after_sending(&mut pair, qps[1]),
        Some(QpEvent::TerminateSent(info((2, 0, 4)))),
        "past the budget, as past its window"
    );
    assert_eq!(pair.b.rnic.qp_state(qps[0]).unwrap(), QpState::Rts);
    // The first QP's turn comes (DDP-SSN 0): its held Sends are delivered
    // and their octets go back.
    pair.b.rnic.handle_message(qps[0], &early(0)).unwrap();
    assert_eq!(pair.b.rnic.reorder_budget_left(), Some(150 - 48));
    // The failed QP goes: what it held goes back too.
    pair.b.rnic.destroy_qp(qps[1]).unwrap();
    assert_eq!(pair.b.rnic.reorder_budget_left(), Some(150));
}

/// The windows of one association's streams draw on a budget within the
/// engine's (`Rnic::connect_messages_within`): a peer whose streams hold
/// all of theirs leaves the rest of the engine's budget to the streams of
/// other associations. Engine 150 octets, each association 100: the first
/// association's two QPs hold 96 octets, and a third early Send past its
/// 100 fails its QP; the second association's QP still holds its early
/// Send and delivers it in its turn (all three QPs drawing on the engine's
/// budget alone would have left it 6 octets).
#[test]
fn one_association_holds_at_most_its_budget_of_the_engines() {
    let mut pair = pair(messages(Link::Messages));
    pair.b.rnic.set_reorder_budget(150);
    let (_, inbox_mr) = pair.b.region(24 * 64, Access::LOCAL_WRITE).unwrap();
    let (first, second) = (
        pair.b.rnic.reorder_budget_within(100),
        pair.b.rnic.reorder_budget_within(100),
    );
    let qps = [
        tight_qp_within(&mut pair, &inbox_mr, 0, 8, Some(first.clone())),
        tight_qp_within(&mut pair, &inbox_mr, 8, 8, Some(first.clone())),
        tight_qp_within(&mut pair, &inbox_mr, 16, 8, Some(second.clone())),
    ];
    let early = |ssn: u16| message(ssn, &send(u32::from(ssn) + 1, &[7; 30]));
    for ssn in 1..=2u16 {
        pair.b.rnic.handle_message(qps[0], &early(ssn)).unwrap();
    }
    pair.b.rnic.handle_message(qps[1], &early(1)).unwrap();
    assert_eq!(
        event_after_sending(&mut pair, qps[1]),
        Some(QpEvent::TerminateSent(info((2, 0, 4)))),
        "past its association's budget"
    );
    assert_eq!(
        (first.left(), pair.b.rnic.reorder_budget_left()),
        (4, Some(54))
    );
    pair.b.rnic.handle_message(qps[2], &early(1)).unwrap();
    assert_eq!(pair.b.rnic.qp_state(qps[2]).unwrap(), QpState::Rts);
    assert_eq!(second.left(), 52);
    pair.b.rnic.handle_message(qps[2], &early(0)).unwrap();
    let wcs = pair.b.completions();
    let mine: Vec<_> = wcs.iter().filter(|wc| wc.qp == qps[2]).collect();
    assert_eq!(mine.len(), 2, "{wcs:?}");
    assert!(mine
        .iter()
        .all(|wc| wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv));
    assert_eq!(
        (second.left(), pair.b.rnic.reorder_budget_left()),
        (100, Some(54))
    );
}

#[test]
fn the_window_bounds_what_a_peer_makes_us_hold() {
    let mut pair = pair(messages(Link::Messages));
    let (_, inbox_mr) = pair.b.region(16 * 64, Access::LOCAL_WRITE).unwrap();
    let qb = tight_qp(&mut pair, &inbox_mr, 0, 16);
    // Early Sends of 18 + 30 octets each: two fit 100 octets, the third
    // does not.
    for ssn in 1..=2u16 {
        let m = message(ssn, &send(u32::from(ssn) + 1, &[7; 30]));
        pair.b.rnic.handle_message(qb, &m).unwrap();
    }
    assert_eq!(pair.b.rnic.qp_state(qb).unwrap(), QpState::Rts);
    let m = message(3, &send(4, &[7; 30]));
    pair.b.rnic.handle_message(qb, &m).unwrap();
    assert_eq!(
        pair.b.rnic.poll_event(qb).unwrap(),
        None,
        "the Terminate is still to go"
    );
    let mut out = vec![0u8; 4096];
    let mut lengths = Vec::new();
    let n = pair
        .b
        .rnic
        .poll_transmit_messages(qb, &mut out, &mut lengths)
        .unwrap();
    assert_eq!(lengths, [n as u16]);
    let (ssn, segment) = sctp::split(&out[..n]).unwrap();
    assert_eq!(ssn, 0, "b's first message");
    let message = rnic_engine::wire::rdmap::Repr::parse(
        &rnic_engine::wire::ddp::Packet::new_checked(segment).unwrap(),
    )
    .unwrap();
    let Header::Terminate(t) = message.header else {
        panic!("{message:?}")
    };
    assert_eq!((t.layer, t.etype, t.ecode), (term::Layer::Llp, 0, 4));
    assert_eq!(
        pair.b.rnic.poll_event(qb).unwrap(),
        Some(QpEvent::TerminateSent(info((2, 0, 4))))
    );
}

#[test]
fn the_verbs_keep_the_two_lower_layers_apart() {
    let mut mpa = pair(PairConfig::default());
    assert_eq!(
        mpa.a
            .rnic
            .handle_message(mpa.a.qp, &message(0, &send(1, b"x"))),
        Err(VerbError::State)
    );
    let mut lengths = Vec::new();
    assert_eq!(
        mpa.a
            .rnic
            .poll_transmit_messages(mpa.a.qp, &mut [0; 64], &mut lengths),
        Err(VerbError::State)
    );
    let mut sctp = pair(messages(Link::Messages));
    assert_eq!(
        sctp.a.rnic.poll_transmit(sctp.a.qp, &mut [0; 64]),
        Err(VerbError::State)
    );
    assert_eq!(sctp.a.rnic.handle_stream(sctp.a.qp, &[0; 8]), Ok(0));
    let qp = sctp.a.rnic.create_qp(QpInit {
        pd: sctp.a.pd,
        send_cq: sctp.a.cq,
        recv_cq: sctp.a.cq,
        srq: None,
        sq_size: 4,
        rq_size: 4,
    });
    let qp = qp.unwrap();
    let too_small = MessageConnection {
        message_max: sctp::MESSAGE_MIN - 1,
        ..pair::message_connection(sctp.config())
    };
    assert_eq!(
        sctp.a.rnic.connect_messages(qp, too_small),
        Err(VerbError::Invalid)
    );
    let fine = pair::message_connection(sctp.config());
    sctp.a.rnic.connect_messages(qp, fine).unwrap();
    assert_eq!(
        sctp.a.rnic.connect_messages(qp, fine),
        Err(VerbError::State)
    );
}

/// A QP made before its consumer is known (a DDP over SCTP stream's, made
/// when the Initiate arrives) moves into the PD its ULP picks while it is
/// Idle with nothing posted (`Rnic::move_qp_to_pd`): then a Write with an
/// STag of the new PD lands, one with an STag of the PD it was made in
/// draws the invalid-STag Terminate, and the PDs' users follow. A QP that
/// is connected, or has work posted, or an SRQ, stays where it is.
#[test]
fn an_idle_qp_moves_into_the_pd_its_ulp_picks() {
    use rnic_engine::mem::Region;
    let mut pair = pair(messages(Link::Messages));
    let registry = pair.b.rnic.registry().clone();
    let (old, new) = (pair.b.pd, registry.alloc_pd().unwrap());
    let (theirs, theirs_mr) = pair.b.region(64, Access::REMOTE_WRITE).unwrap();
    let mine = Region::new(64);
    let mine_mr = registry
        .reg_region(new, mine.clone(), Access::REMOTE_WRITE)
        .unwrap();
    let init = QpInit {
        pd: old,
        send_cq: pair.b.cq,
        recv_cq: pair.b.cq,
        srq: None,
        sq_size: 4,
        rq_size: 4,
    };
    // Made in a PD of its own, which it leaves: that PD is free to go at
    // once (the move gave back the QP's hold on it), its new one is not.
    let first = registry.alloc_pd().unwrap();
    let qp = pair.b.rnic.create_qp(QpInit { pd: first, ..init }).unwrap();
    assert_eq!(registry.dealloc_pd(first), Err(VerbError::InUse));
    pair.b.rnic.move_qp_to_pd(qp, new).unwrap();
    registry.dealloc_pd(first).unwrap();
    assert_eq!(
        registry.dealloc_pd(new),
        Err(VerbError::InUse),
        "the QP holds its new PD"
    );
    pair.b
        .rnic
        .connect_messages(qp, pair::message_connection(pair.config()))
        .unwrap();
    assert_eq!(
        pair.b.rnic.move_qp_to_pd(qp, old),
        Err(VerbError::State),
        "connected: it stays"
    );
    let write = |ssn: u16, stag: u32| message(ssn, &tagged(Opcode::RdmaWrite, stag, 0, &[9; 16]));
    pair.b
        .rnic
        .handle_message(qp, &write(0, mine_mr.stag))
        .unwrap();
    assert_eq!(&mine.to_vec()[..16], &[9; 16], "its new PD's STag");
    pair.b
        .rnic
        .handle_message(qp, &write(1, theirs_mr.stag))
        .unwrap();
    assert_eq!(&theirs.to_vec()[..16], &[0; 16], "not the old PD's");
    let Some(QpEvent::TerminateSent(t)) = event_after_sending(&mut pair, qp) else {
        panic!("no Terminate for the old PD's STag");
    };
    // DDP's tagged buffer error "STag not associated with RDMAP Stream"
    // (RFC 5041 §7.2).
    assert_eq!(t, info((1, 1, 2)));
    // The QP goes: its new PD is free to go too.
    pair.b.rnic.destroy_qp(qp).unwrap();
    registry.dereg_mr(mine_mr.stag).unwrap();
    registry.dealloc_pd(new).unwrap();
    // Work posted: it stays.
    let (_, inbox_mr) = pair.b.region(64, Access::LOCAL_WRITE).unwrap();
    let qp = pair.b.rnic.create_qp(init).unwrap();
    let other = registry.alloc_pd().unwrap();
    let sgl = [sge(&inbox_mr, 0, 64)];
    pair.b.rnic.post_recv(qp, &recv(1, &sgl)).unwrap();
    assert_eq!(pair.b.rnic.move_qp_to_pd(qp, other), Err(VerbError::State));
    assert_eq!(
        pair.b.rnic.move_qp_to_pd(QpHandle(999), other),
        Err(VerbError::UnknownHandle)
    );
    registry.dealloc_pd(other).unwrap();
    let qp = pair.b.rnic.create_qp(init).unwrap();
    assert_eq!(
        pair.b.rnic.move_qp_to_pd(qp, other),
        Err(VerbError::UnknownHandle),
        "a PD that is gone"
    );
}
