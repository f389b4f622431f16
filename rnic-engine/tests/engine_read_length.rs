//! A Read Response of the wrong length: RFC 5040 §5.2.2 (the RDMA Read
//! Response is as long as the Read Request's RDMARDSZ) is broken by a peer
//! that sends more or fewer octets than our Read asked for, ending with the
//! Last flag. The Read completes with a named error (never Flushed), the
//! stream ends with a DDP tagged buffer base or bounds Terminate (1/1/1,
//! RFC 5041 §7.2, what Linux siw's `siw_rresp_check_ntoh` sends for both),
//! and what was posted after the Read is flushed.
//!
//! Side a posts the Reads; their requests are taken off a's wire and
//! dropped, so b's responder never answers; the bad responses are injected
//! into b's stream instead (`Rnic::inject_ulpdu`).

mod support;

use rnic_engine::cq::WcStatus;
use rnic_engine::mem::Access;
use rnic_engine::pair::{PairConfig, RnicPair};
use rnic_engine::verbs::{Mr, QpEvent, QpState, SendOp};
use rnic_engine::wire::ddp;
use rnic_engine::wire::rdmap::{Control, Header, Opcode};
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
