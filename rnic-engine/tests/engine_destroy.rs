//! `destroy_cq` and `destroy_srq`, with ibverbs' rules: a CQ a live QP
//! completes to, or an SRQ a live QP receives from, is refused (`EBUSY` from
//! `ibv_destroy_cq`/`ibv_destroy_srq`; here `VerbError::InUse`); otherwise its
//! slot (and an SRQ's hold on its PD) is freed, and a handle kept past it
//! names nothing, even once the slot holds a new CQ or SRQ.

use rnic_engine::cq::{Notify, Wc, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{
    CqHandle, QpInit, RecvWr, Rnic, RnicConfig, SendOp, SendWr, Sge, SrqHandle, VerbError,
};

/// An RNIC with one slot for each kind of CQ or SRQ: every new one reuses
/// the slot of the one destroyed before it.
fn rnic() -> Rnic {
    Rnic::new(RnicConfig {
        cqs_max: 2,
        srqs_max: 1,
        ..RnicConfig::default()
    })
}

fn init(pd: rnic_engine::mem::Pd, send_cq: CqHandle) -> QpInit {
    QpInit {
        pd,
        send_cq,
        recv_cq: send_cq,
        srq: None,
        sq_size: 4,
        rq_size: 4,
    }
}

#[test]
fn a_cq_a_qp_uses_is_not_destroyed() {
    let mut rnic = rnic();
    let pd = rnic.alloc_pd().unwrap();
    let send = rnic.create_cq(4).unwrap();
    let recv = rnic.create_cq(4).unwrap();
    let qp = rnic
        .create_qp(QpInit {
            recv_cq: recv,
            ..init(pd, send)
        })
        .unwrap();
    assert_eq!(rnic.destroy_cq(send), Err(VerbError::InUse), "its send CQ");
    assert_eq!(
        rnic.destroy_cq(recv),
        Err(VerbError::InUse),
        "its receive CQ"
    );
    // Both still work.
    let mut wcs = [Wc::EMPTY; 4];
    assert_eq!(rnic.poll_cq(send, &mut wcs), Ok(0));
    assert_eq!(rnic.poll_cq(recv, &mut wcs), Ok(0));
    rnic.destroy_qp(qp).unwrap();
    rnic.destroy_cq(send).unwrap();
    rnic.destroy_cq(recv).unwrap();
}

#[test]
fn a_destroyed_cq_frees_its_slot_and_its_handle_names_nothing() {
    let mut rnic = rnic();
    let pd = rnic.alloc_pd().unwrap();
    let old = rnic.create_cq(4).unwrap();
    let _other = rnic.create_cq(4).unwrap();
    assert_eq!(rnic.create_cq(4), Err(VerbError::Full), "two slots");
    rnic.destroy_cq(old).unwrap();
    let new = rnic.create_cq(8).unwrap();
    assert_eq!(new.index(), old.index(), "the freed slot");
    assert_ne!(new, old);
    let mut wcs = [Wc::EMPTY; 4];
    assert_eq!(rnic.poll_cq(old, &mut wcs), Err(VerbError::UnknownHandle));
    assert_eq!(
        rnic.req_notify_cq(old, Notify::Next),
        Err(VerbError::UnknownHandle)
    );
    assert!(matches!(rnic.cq(old), Err(VerbError::UnknownHandle)));
    assert_eq!(rnic.destroy_cq(old), Err(VerbError::UnknownHandle));
    assert_eq!(
        rnic.create_qp(init(pd, old)),
        Err(VerbError::UnknownHandle),
        "no QP completes to a stale handle's slot"
    );
    // The new CQ is whole: its capacity, and a QP's completions reach it.
    assert_eq!(rnic.cq(new).unwrap().capacity(), 8);
    let qp = rnic.create_qp(init(pd, new)).unwrap();
    rnic.close(qp).unwrap();
    let sgl = [Sge::default()];
    assert_eq!(
        rnic.post_send(qp, &SendWr::signaled(1, SendOp::Send, &sgl)),
        Err(VerbError::State)
    );
    assert_eq!(rnic.poll_cq(new, &mut wcs), Ok(0));
    assert_eq!(rnic.destroy_cq(CqHandle(9)), Err(VerbError::UnknownHandle));
}

#[test]
fn an_srq_a_qp_receives_from_is_not_destroyed() {
    let mut rnic = rnic();
    let pd = rnic.alloc_pd().unwrap();
    let cq = rnic.create_cq(4).unwrap();
    let srq = rnic.create_srq(pd, 4).unwrap();
    let qp = rnic
        .create_qp(QpInit {
            srq: Some(srq),
            ..init(pd, cq)
        })
        .unwrap();
    assert_eq!(rnic.destroy_srq(srq), Err(VerbError::InUse));
    rnic.destroy_qp(qp).unwrap();
    rnic.destroy_srq(srq).unwrap();
    // The SRQ left its PD: nothing else holds it now.
    rnic.destroy_cq(cq).unwrap();
    rnic.registry().dealloc_pd(pd).unwrap();
}

#[test]
fn a_destroyed_srq_frees_its_slot_and_its_handle_names_nothing() {
    let mut rnic = rnic();
    let pd = rnic.alloc_pd().unwrap();
    let cq = rnic.create_cq(4).unwrap();
    let region = Region::new(64);
    let mr = rnic.reg_region(pd, region, Access::LOCAL_WRITE).unwrap();
    let sgl = [Sge {
        stag: mr.stag,
        to: 0,
        len: 64,
    }];
    let receive = |wr_id| RecvWr { wr_id, sgl: &sgl };
    let old = rnic.create_srq(pd, 4).unwrap();
    rnic.post_srq_recv(old, &receive(1)).unwrap();
    assert_eq!(rnic.create_srq(pd, 4), Err(VerbError::Full), "one slot");
    rnic.destroy_srq(old).unwrap();
    let new = rnic.create_srq(pd, 2).unwrap();
    assert_eq!(new.index(), old.index(), "the freed slot");
    assert_ne!(new, old);
    assert_eq!(
        rnic.post_srq_recv(old, &receive(2)),
        Err(VerbError::UnknownHandle)
    );
    assert_eq!(rnic.destroy_srq(old), Err(VerbError::UnknownHandle));
    assert_eq!(
        rnic.create_qp(QpInit {
            srq: Some(old),
            ..init(pd, cq)
        }),
        Err(VerbError::UnknownHandle)
    );
    assert_eq!(
        rnic.destroy_srq(SrqHandle(7)),
        Err(VerbError::UnknownHandle)
    );
    // The new SRQ is empty (the old one's receive went with it) and has
    // its own capacity.
    rnic.post_srq_recv(new, &receive(3)).unwrap();
    rnic.post_srq_recv(new, &receive(4)).unwrap();
    assert_eq!(rnic.post_srq_recv(new, &receive(5)), Err(VerbError::Full));
    // A QP on it, closed, flushes nothing of the SRQ's (receives on an
    // SRQ belong to no QP until one takes them) and nothing of the old.
    let qp = rnic
        .create_qp(QpInit {
            srq: Some(new),
            ..init(pd, cq)
        })
        .unwrap();
    rnic.close(qp).unwrap();
    let mut wcs = [Wc::EMPTY; 8];
    let n = rnic.poll_cq(cq, &mut wcs).unwrap();
    assert!(
        wcs[..n]
            .iter()
            .all(|wc| wc.status == WcStatus::Flushed && wc.wr_id != 1),
        "{:?}",
        &wcs[..n]
    );
}
