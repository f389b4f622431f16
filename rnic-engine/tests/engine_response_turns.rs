//! How the responder's transmit side takes turns between the inbound Read
//! queue's responses and its own send queue (both found by a review; each
//! test failed before its fix): messages of one kind never intersect, and
//! the send queue gets its turn whatever room TCP gives.

mod support;

use rnic_engine::mem::Access;
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::pair::{PairConfig, RnicPair};
use rnic_engine::verbs::SendOp;
use rnic_engine::wire::ddp;
use rnic_engine::wire::rdmap::{Control, Opcode};
use support::*;

/// Moves what each side has to send to the other, once each way; appends
/// the ULPDUs b sent to `b_ulpdus` and returns the octets moved.
fn exchange(pair: &mut RnicPair, b_out: &mut Deframer, b_ulpdus: &mut Vec<Vec<u8>>) -> usize {
    let mut wire = vec![0u8; 1448];
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    let n = pair.a.rnic.poll_transmit(qa, &mut wire).unwrap();
    pair.b.rnic.handle_stream(qb, &wire[..n]).unwrap();
    let m = pair.b.rnic.poll_transmit(qb, &mut wire).unwrap();
    let mut rest = &wire[..m];
    while !rest.is_empty() {
        let (used, poll) = b_out.poll(rest);
        if let Poll::Ulpdu(u) = poll {
            b_ulpdus.push(u.to_vec());
        }
        rest = &rest[used..];
        if used == 0 {
            break;
        }
    }
    pair.a.rnic.handle_stream(qa, &wire[..m]).unwrap();
    n + m
}

/// RFC 5041 names a tagged DDP message by nothing but its segments up to
/// the one with L (untagged ones carry a QN and MSN): the segments of two
/// tagged messages must not intersect, and Linux siw refuses it
/// (`siw_get_hdr`: "a WRITE can get intersected by a SEND, but not by a
/// READ RESPONSE", a Terminate follows). A responder whose send queue has
/// a long RDMA Write while it streams a long Read Response must finish one
/// tagged message before it starts the other.
#[test]
fn a_write_from_the_send_queue_does_not_intersect_a_read_response() {
    let mut pair = pair(PairConfig::default());
    let len = 256 << 10;
    let (b_region, b_mr) = pair.b.region(len, ALL).unwrap();
    b_region.write(0, &pattern(len, 4)).unwrap();
    let (_, a_mr) = pair.a.region(2 * len, ALL).unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, len)]),
        )
        .unwrap();
    // b's own Write towards a, posted while the response streams.
    pair.b
        .rnic
        .post_send(
            pair.b.qp,
            &wr(
                2,
                SendOp::Write(remote(&a_mr, len)),
                &[sge(&b_mr, 0, 64 << 10)],
            ),
        )
        .unwrap();
    let mut deframer = Deframer::new(RxConfig {
        crc: true,
        markers: false,
        ulpdu_max: 65535,
    });
    let mut ulpdus = Vec::new();
    for _ in 0..10_000 {
        if exchange(&mut pair, &mut deframer, &mut ulpdus) == 0 {
            break;
        }
    }
    // siw's rule, per buffer model: a message of one opcode left open (no
    // L yet) may not be followed by a segment of another opcode.
    let mut open: Option<Opcode> = None;
    for (i, ulpdu) in ulpdus.iter().enumerate() {
        let packet = ddp::Packet::new_checked(&ulpdu[..]).unwrap();
        if !packet.tagged() {
            continue;
        }
        let opcode = Control::from_octet(packet.rsvd_ulp()).opcode;
        if let Some(previous) = open {
            assert_eq!(
                previous, opcode,
                "FPDU {i}: a tagged {opcode:?} segment intersects an unfinished {previous:?}"
            );
        }
        open = (!packet.last()).then_some(opcode);
    }
}

/// qp/mod.rs: "at most RESPONSE_BURST_FPDUS_MAX response FPDUs in a row
/// while the SQ has work". The burst is counted when a job is picked, not
/// when its FPDU is written: a send-queue FPDU that does not fit the rest of
/// the room resets the count, so when the room the caller hands over (the
/// rest of TCP's send window) holds four response FPDUs and not one more
/// request, every call writes four responses and the send queue never gets
/// its turn while the IRRQ has work (a peer keeping its Reads coming starves
/// this side's send queue for good).
#[test]
fn the_send_queue_gets_its_turn_whatever_the_room() {
    let mut pair = pair(PairConfig::default());
    let len = 1 << 20;
    let (b_region, b_mr) = pair.b.region(len, ALL).unwrap();
    b_region.write(0, &pattern(len, 4)).unwrap();
    let (_, a_mr) = pair.a.region(len, ALL).unwrap();
    let (_, a_recv) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    pair.a
        .rnic
        .post_recv(qa, &recv(70, &[sge(&a_recv, 0, 64)]))
        .unwrap();
    pair.a
        .rnic
        .post_send(
            qa,
            &wr(1, SendOp::Read(remote(&b_mr, 0)), &[sge(&a_mr, 0, len)]),
        )
        .unwrap();
    let mut wire = vec![0u8; 1448];
    let n = pair.a.rnic.poll_transmit(qa, &mut wire).unwrap();
    pair.b.rnic.handle_stream(qb, &wire[..n]).unwrap();
    let (_, b_src) = pair.b.region(64, ALL).unwrap();
    pair.b
        .rnic
        .post_send(qb, &wr(2, SendOp::Send, &[sge(&b_src, 0, 64)]))
        .unwrap();
    // Four full response FPDUs (1448 octets each at EMSS 1448) and 40
    // octets: less than the Send's FPDU (18 + 64 + 2 + 4 = 88).
    let mut room = vec![0u8; 4 * 1448 + 40];
    let mut deframer = Deframer::new(RxConfig {
        crc: true,
        markers: false,
        ulpdu_max: 65535,
    });
    let mut responses_before_send = 0;
    'calls: for _ in 0..1000 {
        let m = pair.b.rnic.poll_transmit(qb, &mut room).unwrap();
        assert!(m > 0, "b stopped sending");
        let mut rest = &room[..m];
        while !rest.is_empty() {
            let (used, poll) = deframer.poll(rest);
            let Poll::Ulpdu(ulpdu) = poll else {
                panic!("{poll:?}")
            };
            let packet = ddp::Packet::new_checked(ulpdu).unwrap();
            match Control::from_octet(packet.rsvd_ulp()).opcode {
                Opcode::RdmaReadResponse => responses_before_send += 1,
                Opcode::Send => break 'calls,
                other => panic!("{other:?}"),
            }
            rest = &rest[used..];
        }
    }
    let bound = rnic_engine::qp::RESPONSE_BURST_FPDUS_MAX as usize;
    assert!(
        responses_before_send <= bound,
        "{responses_before_send} response FPDUs went out while the Send waited (at most {bound})"
    );
}

/// The untagged side of the same rule: a multi-segment Send under way is
/// finished before an Atomic Response (untagged, RFC 7306) goes out, as
/// siw's receiver keeps one untagged message open at a time; and a Read
/// Response (tagged) may still go between a Send's segments.
#[test]
fn an_atomic_response_waits_for_the_send_under_way() {
    let mut pair = pair(PairConfig::default());
    let len = 64 << 10;
    let (b_src_region, b_src) = pair.b.region(len, ALL).unwrap();
    b_src_region.write(0, &pattern(len, 9)).unwrap();
    let (_, a_sink) = pair.a.region(len, ALL).unwrap();
    let (_, b_word) = pair.b.region(64, Access::REMOTE_ATOMIC).unwrap();
    let (_, a_result) = pair.a.region(8, ALL).unwrap();
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    pair.a
        .rnic
        .post_recv(qa, &recv(1, &[sge(&a_sink, 0, len)]))
        .unwrap();
    pair.b
        .rnic
        .post_send(qb, &wr(2, SendOp::Send, &[sge(&b_src, 0, len)]))
        .unwrap();
    let mut deframer = Deframer::new(RxConfig {
        crc: true,
        markers: false,
        ulpdu_max: 65535,
    });
    let mut ulpdus = Vec::new();
    // b's Send is under way: its first segment is out.
    let mut wire = vec![0u8; 1448];
    let m = pair.b.rnic.poll_transmit(qb, &mut wire).unwrap();
    let (used, poll) = deframer.poll(&wire[..m]);
    assert_eq!(used, m);
    let Poll::Ulpdu(first) = poll else {
        panic!("{poll:?}")
    };
    ulpdus.push(first.to_vec());
    pair.a.rnic.handle_stream(qa, &wire[..m]).unwrap();
    // a's FetchAdd reaches b meanwhile.
    pair.a
        .rnic
        .post_send(
            qa,
            &wr(
                3,
                SendOp::FetchAdd {
                    remote: remote(&b_word, 0),
                    add: 1,
                    mask: 0,
                },
                &[sge(&a_result, 0, 8)],
            ),
        )
        .unwrap();
    for _ in 0..10_000 {
        if exchange(&mut pair, &mut deframer, &mut ulpdus) == 0 {
            break;
        }
    }
    let mut send_open = false;
    let mut atomic_seen = false;
    for (i, ulpdu) in ulpdus.iter().enumerate() {
        let packet = ddp::Packet::new_checked(&ulpdu[..]).unwrap();
        if packet.tagged() {
            continue;
        }
        match Control::from_octet(packet.rsvd_ulp()).opcode {
            Opcode::Send => send_open = !packet.last(),
            Opcode::AtomicResponse => {
                assert!(!send_open, "FPDU {i}: an Atomic Response inside a Send");
                atomic_seen = true;
            }
            other => panic!("FPDU {i}: {other:?}"),
        }
    }
    assert!(atomic_seen, "the Atomic Response went out");
    assert!(!send_open, "the Send finished");
    let wcs = pair.a.completions();
    assert_eq!(wcs.len(), 2, "{wcs:?}");
}
