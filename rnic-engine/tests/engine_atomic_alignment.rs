//! RFC 7306 (draft-ietf-storm-rdmap-ext-00 §5.1.1-§5.1.3) atomics act on a
//! naturally aligned 64-bit word, named on the wire by its Remote Tagged
//! Offset. The requester checks the TO when the work request is posted, the
//! responder when the request arrives; and since the atomic unit needs an
//! aligned word of memory, a registration that allows remote atomics must map
//! aligned TOs to aligned words: one whose `base_to` and `offset` differ
//! modulo 8 is refused (it made the two checks disagree: an aligned TO drew a
//! Terminate, and a misaligned one ran).

mod support;

use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::pair::PairConfig;
use rnic_engine::verbs::{FastRegistration, Mr, QpEvent, SendOp, VerbError};
use rnic_engine::wire::atomic::RequestRepr;
use rnic_engine::wire::ddp;
use rnic_engine::wire::rdmap::{Header, Opcode};
use support::*;

#[test]
fn remote_atomics_are_refused_where_an_aligned_to_names_a_misaligned_word() {
    let mut pair = pair(PairConfig::default());
    let (rnic, pd) = (&mut pair.b.rnic, pair.b.pd);
    let region = Region::new(64);
    let atomic = Access::REMOTE_ATOMIC.union(Access::LOCAL_WRITE);
    // (offset, len, base_to): TO base_to names octet `offset`.
    for (offset, len, base_to) in [(0, 64, 4), (4, 56, 0), (1, 63, 0x1000), (0, 64, 7)] {
        assert_eq!(
            rnic.reg_mr(pd, region.clone(), offset, len, base_to, atomic),
            Err(VerbError::Invalid),
            "offset {offset}, base_to {base_to:#x}"
        );
        // Without remote atomic access any alignment is fine.
        let mr = rnic
            .reg_mr(
                pd,
                region.clone(),
                offset,
                len,
                base_to,
                Access::REMOTE_WRITE,
            )
            .unwrap();
        rnic.dereg_mr(mr.stag).unwrap();
    }
    // Congruent modulo 8: aligned TOs name aligned words.
    for (offset, len, base_to) in [(0, 64, 0), (4, 60, 0x1004), (8, 56, 0x10), (3, 61, 0xB)] {
        let mr = rnic
            .reg_mr(pd, region.clone(), offset, len, base_to, atomic)
            .unwrap_or_else(|e| panic!("offset {offset}, base_to {base_to:#x}: {e}"));
        rnic.dereg_mr(mr.stag).unwrap();
    }
}

#[test]
fn a_fast_registration_follows_the_same_rule() {
    let mut pair = pair(PairConfig::default());
    let region = Region::new(64);
    let qp = pair.a.qp;
    for (wr_id, base_to, status) in [
        (1, 4, WcStatus::LocalProtection),
        (2, 0x2000, WcStatus::Success),
    ] {
        let stag = pair.a.rnic.alloc_fast_reg_stag(pair.a.pd).unwrap();
        let registration = FastRegistration {
            stag,
            region: region.clone(),
            offset: 0,
            len: 64,
            base_to,
            access: Access::REMOTE_ATOMIC,
        };
        pair.a
            .rnic
            .post_send(qp, &wr(wr_id, SendOp::FastRegister(registration), &[]))
            .unwrap();
        pair.run(STEPS);
        let wcs = pair.a.completions();
        assert_eq!(
            (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
            (wr_id, status, WcOpcode::FastRegister),
            "base_to {base_to:#x}"
        );
    }
}

/// An atomic request of a peer (the requester checks the TO at post time,
/// so this one is injected), to TO `to` of `mr`, MSN `msn` of queue 1.
fn fetch_add(mr: &Mr, to: u64, msn: u32) -> Vec<u8> {
    untagged(
        Opcode::AtomicRequest,
        ddp::qn::READ_REQUEST,
        msn,
        0,
        Header::AtomicRequest(RequestRepr::fetch_add(9, mr.stag, to, 1, 0)),
        &[],
    )
}

/// In a window whose TOs start at an odd multiple of 4 (octet 4 of the
/// region at TO 0x1004), an aligned TO runs, on the aligned word it names,
/// and a misaligned TO draws a remote operation Terminate (0/2/0xFF)
/// without touching memory.
#[test]
fn the_responder_checks_the_tagged_offset() {
    let mut pair = pair(PairConfig::default());
    let memory = Region::new(64);
    let b_mr = pair
        .b
        .rnic
        .reg_mr(
            pair.b.pd,
            memory.clone(),
            4,
            60,
            0x1004,
            Access::REMOTE_ATOMIC,
        )
        .unwrap();
    let (_, a_mr) = pair.a.region(8, ALL).unwrap();
    let add = SendOp::FetchAdd {
        remote: remote(&b_mr, 4),
        add: 5,
        mask: 0,
    };
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, add, &[sge(&a_mr, 0, 8)]))
        .unwrap();
    pair.run(STEPS);
    assert_wc(&pair.a.completions()[0], 1, WcOpcode::FetchAdd, 8);
    let mut word = [0u8; 8];
    memory.read(8, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), 5, "TO 0x1008 is octet 8");
    // Misaligned TOs: the post is refused; a peer's request is answered.
    let misaligned = SendOp::FetchAdd {
        remote: remote(&b_mr, 8),
        add: 5,
        mask: 0,
    };
    assert_eq!(
        pair.a
            .rnic
            .post_send(pair.a.qp, &wr(2, misaligned, &[sge(&a_mr, 0, 8)])),
        Err(VerbError::Invalid)
    );
    let before = memory.to_vec();
    pair.a
        .rnic
        .inject_ulpdu(pair.a.qp, &fetch_add(&b_mr, 0x100C, 2))
        .unwrap();
    pair.run(STEPS);
    let code = info((0, 2, 0xFF));
    assert_eq!(
        events(&mut pair, false, None),
        [QpEvent::TerminateSent(code)]
    );
    assert_eq!(
        events(&mut pair, true, None),
        [QpEvent::TerminateReceived(code)]
    );
    assert_eq!(memory.to_vec(), before, "nothing changed");
}
