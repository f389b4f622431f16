//! An STag invalidated or deregistered while a message is under way stops
//! that message at its next segment, on either side: the engine checks the
//! STag again for every segment it places or sends (RFC 5040 §7.1, RFC 5041
//! §7.1), so an invalidated STag takes no further placement (RFC 5040
//! §6.10) and `dereg_mr` means what it says ("no core places into or reads
//! from it after this returns"). A receive whose buffer went completes with
//! Local Protection and a request whose source went likewise, each failing
//! the QP with the local catastrophic Terminate (0/0/0) that a list failing
//! its first check draws.

mod support;

use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::pair::{PairConfig, RnicPair};
use rnic_engine::verbs::{FastRegistration, QpEvent, QpHandle, SendOp};
use rnic_engine::wire::ddp;
use rnic_engine::wire::rdmap::{Control, Header, Opcode};
use support::*;

/// What a local protection error on a list sends, at its first segment
/// as after it: RDMAP, local catastrophic (layer 0, type 0, code 0, RFC
/// 5040 §4.8), as `a_bad_local_sge_fails_the_request_and_the_qp` in
/// engine.rs checks for a list that fails its first check.
const LOCAL_CATASTROPHIC: (u8, u8, u8) = (0, 0, 0);

fn send_segment(msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
    raw(
        Control::new(Opcode::Send),
        last,
        ddp::VERSION,
        ddp::Buffer::Untagged {
            rsvd_ulp: 0,
            qn: 0,
            msn,
            mo,
        },
        Header::None,
        payload,
    )
}

/// `b`'s QP `qb` failed its receive `wr_id` with Local Protection (the one
/// completion in `wcs`) and sent `a`'s QP `qa` the local catastrophic Terminate.
#[track_caller]
fn assert_receive_failed(
    pair: &mut RnicPair,
    wcs: &[rnic_engine::cq::Wc],
    qa: QpHandle,
    qb: QpHandle,
    wr_id: u64,
) {
    let got: Vec<_> = wcs
        .iter()
        .map(|wc| (wc.qp, wc.wr_id, wc.status, wc.opcode))
        .collect();
    assert_eq!(
        got,
        [(qb, wr_id, WcStatus::LocalProtection, WcOpcode::Recv)],
        "{wcs:?}"
    );
    assert_eq!(
        events(pair, false, Some(qb)),
        [QpEvent::TerminateSent(info(LOCAL_CATASTROPHIC))]
    );
    assert_eq!(
        events(pair, true, Some(qa)),
        [QpEvent::TerminateReceived(info(LOCAL_CATASTROPHIC))]
    );
}

/// A peer's Send with Invalidate on another QP invalidates the STag of the
/// buffer a Send on the first QP is still filling: the Send's next segment
/// takes nothing (RFC 5040 §6.10: the STag names no buffer any more).
#[test]
fn a_receive_buffer_invalidated_mid_send_takes_no_more_octets() {
    let mut pair = pair(PairConfig::default());
    let (qa2, qb2) = pair.add_qp().unwrap();
    let (qa1, qb1) = (pair.a.qp, pair.b.qp);
    let (buffer, buffer_mr) = pair
        .b
        .region(32, Access::LOCAL_WRITE.union(Access::REMOTE_INVALIDATE))
        .unwrap();
    pair.b
        .rnic
        .post_recv(qb1, &recv(1, &[sge(&buffer_mr, 0, 32)]))
        .unwrap();
    let (_, other_mr) = pair.b.region(16, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(qb2, &recv(2, &[sge(&other_mr, 0, 16)]))
        .unwrap();
    pair.a
        .rnic
        .inject_ulpdu(qa1, &send_segment(1, 0, false, &[0xAA; 8]))
        .unwrap();
    pair.run(STEPS);
    let inv = raw(
        Control::new(Opcode::SendWithInvalidate),
        true,
        ddp::VERSION,
        ddp::Buffer::Untagged {
            rsvd_ulp: buffer_mr.stag,
            qn: 0,
            msn: 1,
            mo: 0,
        },
        Header::None,
        b"x",
    );
    pair.a.rnic.inject_ulpdu(qa2, &inv).unwrap();
    pair.run(STEPS);
    let wcs = pair.b.completions();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].invalidated),
        (2, WcStatus::Success, Some(buffer_mr.stag)),
        "{wcs:?}"
    );
    pair.a
        .rnic
        .inject_ulpdu(qa1, &send_segment(1, 8, true, &[0xBB; 8]))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.b.completions();
    let octets = buffer.to_vec();
    assert_eq!(
        octets[8..16],
        [0u8; 8],
        "placed through an invalidated STag; completions {wcs:?}"
    );
    assert_eq!(octets[..8], [0xAA; 8], "placed before the invalidation");
    assert_receive_failed(&mut pair, &wcs, qa1, qb1, 1);
    // The other QP is untouched.
    assert!(events(&mut pair, false, Some(qb2)).is_empty());
}

/// The receive buffer deregistered between two segments of a Send: the
/// second takes nothing (`dereg_mr` has returned).
#[test]
fn a_receive_buffer_deregistered_mid_send_takes_no_more_octets() {
    let mut pair = pair(PairConfig::default());
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    let (buffer, mr) = pair.b.region(32, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(qb, &recv(1, &[sge(&mr, 0, 32)]))
        .unwrap();
    pair.a
        .rnic
        .inject_ulpdu(qa, &send_segment(1, 0, false, &[0xAA; 8]))
        .unwrap();
    pair.run(STEPS);
    pair.b.rnic.dereg_mr(mr.stag).unwrap();
    pair.a
        .rnic
        .inject_ulpdu(qa, &send_segment(1, 8, true, &[0xBB; 8]))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.b.completions();
    let octets = buffer.to_vec();
    assert_eq!(
        octets[8..16],
        [0u8; 8],
        "placed after dereg_mr returned; completions {wcs:?}"
    );
    assert_eq!(octets[..8], [0xAA; 8], "placed before dereg_mr");
    assert_receive_failed(&mut pair, &wcs, qa, qb, 1);
}

/// A segment is checked against the entries it touches: one that spans
/// two, the second deregistered, places nothing in it.
#[test]
fn a_segment_spanning_a_deregistered_entry_places_nothing_in_it() {
    let mut pair = pair(PairConfig::default());
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    let (first, first_mr) = pair.b.region(16, Access::LOCAL_WRITE).unwrap();
    let (second, second_mr) = pair.b.region(16, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(
            qb,
            &recv(1, &[sge(&first_mr, 0, 16), sge(&second_mr, 0, 16)]),
        )
        .unwrap();
    pair.a
        .rnic
        .inject_ulpdu(qa, &send_segment(1, 0, false, &[0xAA; 8]))
        .unwrap();
    pair.run(STEPS);
    pair.b.rnic.dereg_mr(second_mr.stag).unwrap();
    pair.a
        .rnic
        .inject_ulpdu(qa, &send_segment(1, 8, true, &[0xBB; 16]))
        .unwrap();
    pair.run(STEPS);
    let wcs = pair.b.completions();
    assert_eq!(second.to_vec(), [0u8; 16], "completions {wcs:?}");
    // Nothing of the segment in the entry still valid either: it is
    // checked whole before any octet is placed.
    assert_eq!(first.to_vec()[..8], [0xAA; 8]);
    assert_eq!(first.to_vec()[8..], [0u8; 8]);
    assert_receive_failed(&mut pair, &wcs, qa, qb, 1);
}

/// A Send the peer's engine segments, in every configuration (CRC and
/// markers, the stream cut anywhere, FPDUs aligned to TCP segments, DDP over
/// SCTP in and out of order): the receive buffer deregistered after the
/// first segments were placed takes no more.
#[test]
fn a_receive_buffer_deregistered_midway_takes_no_more_octets_in_every_config() {
    for config in configs() {
        let mut pair = pair(config);
        let (qa, qb) = (pair.a.qp, pair.b.qp);
        let len = (256 << 10).max(4 * config.window);
        let data = pattern(len, 5);
        let (source, source_mr) = pair.a.region(len, ALL).unwrap();
        source.write(0, &data).unwrap();
        let (buffer, mr) = pair.b.region(len, Access::LOCAL_WRITE).unwrap();
        pair.b
            .rnic
            .post_recv(qb, &recv(1, &[sge(&mr, 0, len)]))
            .unwrap();
        pair.a
            .rnic
            .post_send(qa, &wr(1, SendOp::Send, &[sge(&source_mr, 0, len)]))
            .unwrap();
        // Until a first segment is placed (shuffled, it may wait).
        let send = usize::from(u8::from(Opcode::Send));
        let mut placed = 0;
        for _ in 0..8 {
            pair.step();
            placed = pair.b.rnic.op_stats(qb).unwrap().rx[send].octets as usize;
            if placed > 0 {
                break;
            }
        }
        assert!(
            0 < placed && placed < len,
            "{config:?}: placed {placed} of {len} octets"
        );
        pair.b.rnic.dereg_mr(mr.stag).unwrap();
        pair.run(STEPS);
        let wcs = pair.b.completions();
        let octets = buffer.to_vec();
        assert_eq!(octets[..placed], data[..placed], "{config:?}");
        let tail = octets[placed..].iter().filter(|&&o| o != 0).count();
        assert_eq!(
            tail, 0,
            "{config:?}: {tail} octets placed after dereg_mr ({placed} before); \
             completions {wcs:?}"
        );
        assert_receive_failed(&mut pair, &wcs, qa, qb, 1);
    }
}

/// Posts a `len`-octet `op` (Write or Send) on `a` from a fresh source
/// region of `pattern(len, 7)`, into a zeroed sink on `b`, lets one step
/// go, deregisters the source and runs to the end. Returns the sink's
/// octets, the octets of payload `a` had sent before the deregistration,
/// `a`'s completions and the pair.
fn deregister_source_midway(
    config: PairConfig,
    len: usize,
    send: bool,
) -> (Vec<u8>, usize, Vec<rnic_engine::cq::Wc>, RnicPair) {
    let mut pair = pair(config);
    let (qa, qb) = (pair.a.qp, pair.b.qp);
    let data = pattern(len, 7);
    let (source, source_mr) = pair.a.region(len, Access::LOCAL_WRITE).unwrap();
    source.write(0, &data).unwrap();
    let (sink, sink_mr) = pair
        .b
        .region(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let (op, opcode) = if send {
        pair.b
            .rnic
            .post_recv(qb, &recv(5, &[sge(&sink_mr, 0, len)]))
            .unwrap();
        (SendOp::Send, Opcode::Send)
    } else {
        (SendOp::Write(remote(&sink_mr, 0)), Opcode::RdmaWrite)
    };
    pair.a
        .rnic
        .post_send(qa, &wr(1, op, &[sge(&source_mr, 0, len)]))
        .unwrap();
    pair.step();
    let sent = pair.a.rnic.op_stats(qa).unwrap().tx[usize::from(u8::from(opcode))].octets as usize;
    assert!(
        0 < sent && sent < len,
        "{config:?}: one step sent {sent} of {len} octets"
    );
    pair.a.rnic.dereg_mr(source_mr.stag).unwrap();
    pair.run(STEPS);
    let wcs = pair.a.completions();
    let octets = sink.to_vec();
    assert_eq!(
        octets[..sent],
        data[..sent],
        "{config:?}: what went before dereg_mr"
    );
    (octets, sent, wcs, pair)
}

#[track_caller]
fn assert_request_failed(
    config: &PairConfig,
    pair: &mut RnicPair,
    octets: &[u8],
    sent: usize,
    wcs: &[rnic_engine::cq::Wc],
    opcode: WcOpcode,
) {
    let tail = octets[sent..].iter().filter(|&&o| o != 0).count();
    assert_eq!(
        tail, 0,
        "{config:?}: {tail} octets read from the source after dereg_mr \
         ({sent} sent before); completions {wcs:?}"
    );
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status, wc.opcode))
            .collect::<Vec<_>>(),
        [(1, WcStatus::LocalProtection, opcode)],
        "{config:?}"
    );
    assert_eq!(
        events(pair, true, None),
        [QpEvent::TerminateSent(info(LOCAL_CATASTROPHIC))],
        "{config:?}"
    );
    assert_eq!(
        events(pair, false, None),
        [QpEvent::TerminateReceived(info(LOCAL_CATASTROPHIC))],
        "{config:?}"
    );
}

/// A 16 KiB Write (twelve segments at EMSS 1448) whose source is
/// deregistered after its first segment left: nothing more is read from
/// it, and it fails as a list that fails its first check does.
#[test]
fn a_write_source_deregistered_mid_write_sends_no_more_octets() {
    let config = PairConfig::default();
    let len = 16 << 10;
    let (octets, sent, wcs, mut pair) = deregister_source_midway(config, len, false);
    assert_eq!(
        sent,
        mulpdu(&config) - ddp::TAGGED_HEADER_LEN,
        "one segment before dereg_mr"
    );
    assert_request_failed(&config, &mut pair, &octets, sent, &wcs, WcOpcode::Write);
}

/// The same for Writes and Sends in every configuration: CRC and markers,
/// one-pass framing of jumbo FPDUs, FPDUs aligned to TCP segments, DDP over
/// SCTP in and out of order.
#[test]
fn a_source_deregistered_midway_sends_no_more_octets_in_every_config() {
    for config in configs() {
        // Several windows' worth, so that the first step leaves some.
        let len = (256 << 10).max(4 * config.window);
        for send in [false, true] {
            let (octets, sent, wcs, mut pair) = deregister_source_midway(config, len, send);
            let opcode = if send {
                WcOpcode::Send
            } else {
                WcOpcode::Write
            };
            assert_request_failed(&config, &mut pair, &octets, sent, &wcs, opcode);
            if send {
                // The receive the Send was filling is flushed.
                let wcs = pair.b.completions();
                assert_eq!(
                    wcs.iter()
                        .map(|wc| (wc.wr_id, wc.status))
                        .collect::<Vec<_>>(),
                    [(5, WcStatus::Flushed)],
                    "{config:?}"
                );
            }
        }
    }
}

/// A Write whose list spans two regions, the second deregistered after the
/// first segment left: what lies in the first still goes, nothing of the
/// second does.
#[test]
fn a_write_stops_at_the_first_segment_touching_a_deregistered_entry() {
    let config = PairConfig::default();
    let mut pair = pair(config);
    let half = 8 << 10;
    let (first, first_mr) = pair.a.region(half, Access::LOCAL_WRITE).unwrap();
    let (second, second_mr) = pair.a.region(half, Access::LOCAL_WRITE).unwrap();
    let data = pattern(2 * half, 3);
    first.write(0, &data[..half]).unwrap();
    second.write(0, &data[half..]).unwrap();
    let (sink, sink_mr) = pair.b.region(2 * half, Access::REMOTE_WRITE).unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(
                1,
                SendOp::Write(remote(&sink_mr, 0)),
                &[sge(&first_mr, 0, half), sge(&second_mr, 0, half)],
            ),
        )
        .unwrap();
    pair.step();
    pair.a.rnic.dereg_mr(second_mr.stag).unwrap();
    pair.run(STEPS);
    let per_segment = mulpdu(&config) - ddp::TAGGED_HEADER_LEN;
    // The segments that lie wholly in the first entry; the one spanning
    // both is not sent at all.
    let whole = half / per_segment * per_segment;
    let octets = sink.to_vec();
    assert_eq!(octets[..whole], data[..whole]);
    assert!(
        octets[whole..].iter().all(|&o| o == 0),
        "read from a deregistered entry"
    );
    let wcs = pair.a.completions();
    assert_eq!(
        wcs.iter()
            .map(|wc| (wc.wr_id, wc.status))
            .collect::<Vec<_>>(),
        [(1, WcStatus::LocalProtection)]
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateSent(info(LOCAL_CATASTROPHIC))]
    );
}

/// A source STag invalidated and bound again to other memory (fast
/// registration, on another QP) while a Write reads from it: the Write's
/// later segments come from the memory the STag names now, never from the
/// memory it no longer names, and the Write completes.
#[test]
fn a_source_stag_bound_again_midway_is_read_where_it_now_points() {
    let mut pair = pair(PairConfig::default());
    let (qa2, _) = pair.add_qp().unwrap();
    let len = 16 << 10;
    let stag = pair.a.rnic.alloc_fast_reg_stag(pair.a.pd).unwrap();
    let bind = |region: &std::sync::Arc<Region>| FastRegistration {
        stag,
        region: region.clone(),
        offset: 0,
        len,
        base_to: 0,
        access: Access::LOCAL_WRITE,
    };
    let old = Region::from_slice(&[0x11; 16 << 10]);
    let new = Region::from_slice(&[0x22; 16 << 10]);
    pair.a
        .rnic
        .post_send(qa2, &wr(1, SendOp::FastRegister(bind(&old)), &[]))
        .unwrap();
    pair.run(STEPS);
    let (sink, sink_mr) = pair.b.region(len, Access::REMOTE_WRITE).unwrap();
    let source = rnic_engine::verbs::Sge {
        stag,
        to: 0,
        len: len as u32,
    };
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(2, SendOp::Write(remote(&sink_mr, 0)), &[source]),
        )
        .unwrap();
    pair.step();
    // Both run at qa2's next turn, between two of the Write's segments.
    pair.a
        .rnic
        .post_send(qa2, &wr(3, SendOp::LocalInvalidate(stag), &[]))
        .unwrap();
    pair.a
        .rnic
        .post_send(qa2, &wr(4, SendOp::FastRegister(bind(&new)), &[]))
        .unwrap();
    pair.run(STEPS);
    let mut wcs: Vec<_> = pair
        .a
        .completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status))
        .collect();
    wcs.sort_unstable_by_key(|&(wr_id, _)| wr_id);
    assert_eq!(
        wcs,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    let octets = sink.to_vec();
    let per_segment = mulpdu(&PairConfig::default()) - ddp::TAGGED_HEADER_LEN;
    assert!(octets[..per_segment].iter().all(|&o| o == 0x11));
    assert!(
        octets[len - per_segment..].iter().all(|&o| o == 0x22),
        "read from memory the STag no longer names"
    );
    // Old octets, then new ones: one switch.
    let switch = octets.iter().position(|&o| o == 0x22).unwrap();
    assert!(octets[..switch].iter().all(|&o| o == 0x11));
    assert!(octets[switch..].iter().all(|&o| o == 0x22));
}

/// The control: a multi-segment Send and Write whose STags stay valid,
/// each list spanning regions, complete with every octet right in every
/// configuration.
#[test]
fn unaffected_multi_segment_sends_and_writes_complete() {
    for config in configs() {
        let mut pair = pair(config);
        let (qa, qb) = (pair.a.qp, pair.b.qp);
        let len = 3 * mulpdu(&config) + 5;
        let data = pattern(len, 11);
        let cut = len / 3;
        let (a1, a1_mr) = pair.a.region(cut + 16, ALL).unwrap();
        let (a2, a2_mr) = pair.a.region(len - cut, ALL).unwrap();
        a1.write(16, &data[..cut]).unwrap();
        a2.write(0, &data[cut..]).unwrap();
        let source = [sge(&a1_mr, 16, cut), sge(&a2_mr, 0, len - cut)];
        let (r1, r1_mr) = pair.b.region(len / 2, Access::LOCAL_WRITE).unwrap();
        let (r2, r2_mr) = pair.b.region(len, Access::LOCAL_WRITE).unwrap();
        pair.b
            .rnic
            .post_recv(
                qb,
                &recv(7, &[sge(&r1_mr, 0, len / 2), sge(&r2_mr, 0, len)]),
            )
            .unwrap();
        let (sink, sink_mr) = pair.b.region(len, Access::REMOTE_WRITE).unwrap();
        pair.a
            .rnic
            .post_send(qa, &wr(1, SendOp::Send, &source))
            .unwrap();
        pair.a
            .rnic
            .post_send(qa, &wr(2, SendOp::Write(remote(&sink_mr, 0)), &source))
            .unwrap();
        pair.run(STEPS);
        let wcs = pair.a.completions();
        assert_eq!(wcs.len(), 2, "{config:?}: {wcs:?}");
        assert_wc(&wcs[0], 1, WcOpcode::Send, len);
        assert_wc(&wcs[1], 2, WcOpcode::Write, len);
        let wcs = pair.b.completions();
        assert_eq!(wcs.len(), 1, "{config:?}: {wcs:?}");
        assert_wc(&wcs[0], 7, WcOpcode::Recv, len);
        let mut received = r1.to_vec();
        received.extend_from_slice(&r2.to_vec()[..len - len / 2]);
        assert!(received == data, "{config:?}: the Send's octets");
        assert!(sink.to_vec() == data, "{config:?}: the Write's octets");
        assert!(events(&mut pair, true, None).is_empty());
        assert!(events(&mut pair, false, None).is_empty());
    }
}
