//! A Read Response of the wrong length: RFC 5040 §5.2.2 (the RDMA Read
//! Response is as long as the Read Request's RDMARDSZ) is broken by a peer
//! that sends more or fewer octets than our Read asked for, ending with the
//! Last flag. The Read completes with a named error (never Flushed), the
//! stream ends with a DDP tagged buffer base or bounds Terminate (1/1/1,
//! RFC 5041 §7.2, what Linux siw's `siw_rresp_check_ntoh` sends for both),
//! and what was posted after the Read is flushed.
//!
//! A Read Response while no Read is outstanding has no Read to fail: RFC
//! 5040 names no code for it, and the stream ends with DDP local
//! catastrophic (1/0/0), what siw's `siw_proc_rresp` sends when it finds no
//! ORQ entry, echoing the segment's DDP header as any DDP error does.
//!
//! Side a posts the Reads; their requests are taken off a's wire and
//! dropped, so b's responder never answers; the bad responses are injected
//! into b's stream instead (`Rnic::inject_ulpdu`).

mod support;

use rnic_engine::cq::WcStatus;
use rnic_engine::mem::Access;
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::pair::{PairConfig, RnicPair};
use rnic_engine::verbs::{Mr, QpEvent, QpState, SendOp};
use rnic_engine::wire::rdmap::{self, Control, Header, Opcode};
use rnic_engine::wire::{ddp, term};
use support::*;

/// Octets each Read asks for.
const READ_LEN: usize = 16;

/// A Read Response segment to `mr`'s TO `offset`, the last one or not.
fn response(mr: &Mr, offset: usize, payload: &[u8], last: bool) -> Vec<u8> {
    raw(
        Control::new(Opcode::RdmaReadResponse),
        last,
        ddp::VERSION,
        ddp::Buffer::Tagged {
            stag: mr.stag,
            to: mr.base_to + offset as u64,
        },
        Header::None,
        payload,
    )
}

/// A pair where a has two Reads of `READ_LEN` outstanding (wr 1 into a's
/// octets 0.., wr 2 into 32..), whose requests b never saw. Returns a's MR.
fn two_reads_outstanding() -> (RnicPair, Mr) {
    let mut pair = pair(PairConfig::default());
    let (_, b_mr, _, a_mr) = regions(&mut pair, 64, Access::REMOTE_READ);
    for (wr_id, at) in [(1, 0), (2, 32)] {
        let sgl = [sge(&a_mr, at, READ_LEN)];
        let read = wr(wr_id, SendOp::Read(remote(&b_mr, at)), &sgl);
        pair.a.rnic.post_send(pair.a.qp, &read).unwrap();
    }
    // Markers are off, so dropping whole FPDUs leaves b's stream readable.
    let mut wire = vec![0u8; 1448];
    while pair.a.rnic.poll_transmit(pair.a.qp, &mut wire).unwrap() > 0 {}
    (pair, a_mr)
}

/// Sends `segments` from b as the response to a's first Read and checks
/// the outcome: the Read fails, the next flushes, and the Terminate is
/// `code` (layer, type, code).
#[track_caller]
fn check(name: &str, code: (u8, u8, u8), segments: impl Fn(&Mr) -> Vec<Vec<u8>>) {
    let (mut pair, a_mr) = two_reads_outstanding();
    for segment in segments(&a_mr) {
        pair.b.rnic.inject_ulpdu(pair.b.qp, &segment).unwrap();
    }
    pair.run(STEPS);
    let got: Vec<_> = pair
        .a
        .completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(
        got,
        [(1, WcStatus::BadResponse), (2, WcStatus::Flushed)],
        "{name}"
    );
    let code = info(code);
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(code)],
        "{name}"
    );
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateReceived(code)],
        "{name}"
    );
    assert_eq!(pair.a.rnic.qp_state(pair.a.qp).unwrap(), QpState::Error);
}

/// [`check`] with RFC 5041 §7.2's DDP tagged buffer error, base or bounds
/// violation (1/1/1).
#[track_caller]
fn check_bb(name: &str, segments: impl Fn(&Mr) -> Vec<Vec<u8>>) {
    check(name, (1, 1, 1), segments);
}

#[test]
fn a_read_response_longer_than_the_read_is_a_base_or_bounds_error() {
    check_bb("one segment, one octet too many", |mr| {
        vec![response(mr, 0, &[7; READ_LEN + 1], true)]
    });
    check_bb("the last segment goes past the end", |mr| {
        vec![
            response(mr, 0, &[7; 10], false),
            response(mr, 10, &[7; 10], true),
        ]
    });
    check_bb("a segment after the Read was whole", |mr| {
        vec![
            response(mr, 0, &[7; READ_LEN], false),
            response(mr, READ_LEN, &[7; 4], true),
        ]
    });
}

#[test]
fn a_read_response_shorter_than_the_read_is_a_base_or_bounds_error() {
    check_bb("one segment, one octet short", |mr| {
        vec![response(mr, 0, &[7; READ_LEN - 1], true)]
    });
    check_bb("two segments, short together", |mr| {
        vec![
            response(mr, 0, &[7; 4], false),
            response(mr, 4, &[7; 4], true),
        ]
    });
    check_bb("a zero-length response", |mr| {
        vec![response(mr, 0, &[], true)]
    });
}

/// A response that is not the one the Read expects (another STag, or the
/// wrong TO) ends the Read the same way, with its own Terminate code.
#[test]
fn a_read_response_aimed_elsewhere_ends_the_read_with_an_error() {
    for (name, code, aim) in [
        ("another STag", (1, 1, 0), 0x100u32),
        ("a TO past the start", (1, 1, 1), 0),
    ] {
        check(name, code, |mr| {
            let mut target = *mr;
            target.stag = target.stag.wrapping_add(aim);
            let offset = if aim == 0 { 4 } else { 0 };
            vec![response(&target, offset, &[7; READ_LEN], true)]
        });
    }
}

/// The right length still completes the Read (the check is not off by one).
#[test]
fn a_read_response_of_the_right_length_completes_the_read() {
    let (mut pair, a_mr) = two_reads_outstanding();
    for segment in [
        response(&a_mr, 0, &[7; 6], false),
        response(&a_mr, 6, &[7; READ_LEN - 6], true),
    ] {
        pair.b.rnic.inject_ulpdu(pair.b.qp, &segment).unwrap();
    }
    pair.run(STEPS);
    let wcs = pair.a.completions();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].byte_len),
        (1, WcStatus::Success, READ_LEN as u32),
        "{wcs:?}"
    );
    assert!(events(&mut pair, true, None).is_empty());
}

/// DDP local catastrophic, layer 1 type 0 code 0: siw's answer to a Read
/// Response while no Read is outstanding.
const NO_READ_OUTSTANDING: (u8, u8, u8) = (1, 0, 0);

/// A Read Response while a has no Read outstanding, sent from b to a by
/// hand: a's Terminate is DDP local catastrophic with M and D, the
/// response's length and its tagged DDP header, and no RDMA header (R
/// clear), as siw's; b reports the same code, and a's QP is in Error
/// with nothing more to send.
#[test]
fn a_read_response_with_no_read_outstanding_is_a_ddp_catastrophic_error() {
    let mut pair = pair(PairConfig::default());
    let (_, _, _, a_mr) = regions(&mut pair, 64, Access::REMOTE_READ);
    let segment = response(&a_mr, 0, &[7; READ_LEN], true);
    pair.b.rnic.inject_ulpdu(pair.b.qp, &segment).unwrap();
    let mut wire = vec![0u8; 1448];
    let n = pair.b.rnic.poll_transmit(pair.b.qp, &mut wire).unwrap();
    assert_eq!(pair.a.rnic.handle_stream(pair.a.qp, &wire[..n]).unwrap(), n);
    let n = pair.a.rnic.poll_transmit(pair.a.qp, &mut wire).unwrap();
    let fpdu = wire[..n].to_vec();
    let mut deframer = Deframer::new(RxConfig {
        crc: true,
        markers: false,
        ulpdu_max: 65535,
    });
    let (used, poll) = deframer.poll(&fpdu);
    assert_eq!(used, n, "one FPDU");
    let Poll::Ulpdu(ulpdu) = poll else {
        panic!("{poll:?}")
    };
    let packet = ddp::Packet::new_checked(ulpdu).unwrap();
    assert_eq!(
        (packet.tagged(), packet.qn(), packet.msn(), packet.last()),
        (false, ddp::qn::TERMINATE, 1, true)
    );
    let message = rdmap::Repr::parse(&packet).unwrap();
    let Header::Terminate(terminate) = message.header else {
        panic!("{message:?}")
    };
    assert_eq!(
        (terminate.layer, terminate.etype, terminate.ecode),
        (term::Layer::Ddp, 0, 0)
    );
    assert!(terminate.segment_length_valid, "M");
    assert_eq!(usize::from(terminate.ddp_segment_length), segment.len());
    assert_eq!(
        terminate.ddp_header,
        Some(&segment[..ddp::TAGGED_HEADER_LEN]),
        "D"
    );
    assert_eq!(terminate.rdma_header, None, "R");
    assert_eq!(
        pair.a.rnic.poll_transmit(pair.a.qp, &mut wire).unwrap(),
        0,
        "one Terminate per stream"
    );
    assert_eq!(pair.a.rnic.qp_state(pair.a.qp).unwrap(), QpState::Error);
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(info(NO_READ_OUTSTANDING))]
    );
    pair.b.rnic.handle_stream(pair.b.qp, &fpdu).unwrap();
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateReceived(info(NO_READ_OUTSTANDING))]
    );
}

/// A second response to a Read that is already complete (a duplicate, or
/// one segment too many after the Last flag) finds no Read outstanding
/// either: the complete Read keeps its success, and the stream ends the
/// same way.
#[test]
fn a_response_after_the_last_read_completed_is_a_ddp_catastrophic_error() {
    let mut pair = pair(PairConfig::default());
    let (_, b_mr, _, a_mr) = regions(&mut pair, 64, Access::REMOTE_READ);
    let sgl = [sge(&a_mr, 0, READ_LEN)];
    let read = wr(1, SendOp::Read(remote(&b_mr, 0)), &sgl);
    pair.a.rnic.post_send(pair.a.qp, &read).unwrap();
    pair.run(STEPS);
    let segment = response(&a_mr, 0, &[7; READ_LEN], true);
    pair.b.rnic.inject_ulpdu(pair.b.qp, &segment).unwrap();
    pair.run(STEPS);
    let got: Vec<_> = pair
        .a
        .completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    assert_eq!(got, [(1, WcStatus::Success)]);
    let code = info(NO_READ_OUTSTANDING);
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(code)]
    );
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateReceived(code)]
    );
    assert_eq!(pair.a.rnic.qp_state(pair.a.qp).unwrap(), QpState::Error);
}
