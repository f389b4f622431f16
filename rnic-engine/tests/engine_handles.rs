//! QP, CQ and SRQ handles name one queue of one RNIC: a handle kept past
//! `destroy_qp`, or one of another RNIC over the same registry, names
//! nothing (found by reviews: a stale handle reached the slot's next QP, a
//! handle of one core's RNIC acted on another core's QP, and one core's CQ
//! or SRQ handle named the queue in the same slot of another core's RNIC).

use rnic_engine::cq::{Notify, Wc};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{QpInit, QpState, RecvWr, Registry, Rnic, RnicConfig, Sge, VerbError};

fn setup(qps_max: usize) -> (Rnic, QpInit, rnic_engine::verbs::Mr) {
    let mut rnic = Rnic::new(RnicConfig {
        qps_max,
        ..RnicConfig::default()
    });
    let pd = rnic.alloc_pd().unwrap();
    let cq = rnic.create_cq(16).unwrap();
    let mr = rnic
        .reg_region(pd, Region::new(64), Access::LOCAL_WRITE)
        .unwrap();
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        sq_size: 4,
        rq_size: 4,
    };
    (rnic, init, mr)
}

#[test]
fn a_stale_qp_handle_names_nothing() {
    let (mut rnic, init, mr) = setup(1);
    let old = rnic.create_qp(init).unwrap();
    rnic.destroy_qp(old).unwrap();
    let new = rnic.create_qp(init).unwrap();
    assert_eq!(new.index(), old.index(), "the one slot again");
    assert_ne!(new, old);
    let sgl = [Sge {
        stag: mr.stag,
        to: 0,
        len: 64,
    }];
    assert_eq!(
        rnic.post_recv(
            old,
            &RecvWr {
                wr_id: 99,
                sgl: &sgl
            }
        ),
        Err(VerbError::UnknownHandle)
    );
    assert_eq!(rnic.qp_state(old), Err(VerbError::UnknownHandle));
    assert_eq!(rnic.close(old), Err(VerbError::UnknownHandle));
    assert_eq!(rnic.destroy_qp(old), Err(VerbError::UnknownHandle));
    // The new QP has nothing of the stale handle's: closing it flushes
    // nothing.
    rnic.close(new).unwrap();
    let mut wcs = [Wc::EMPTY; 4];
    assert_eq!(rnic.poll_cq(init.send_cq, &mut wcs), Ok(0));
    // A slot's first QP has the handle its index (the first RNIC of a
    // registry): what logs and tables showed before.
    let (mut fresh, init, _) = setup(4);
    let q = fresh.create_qp(init).unwrap();
    assert_eq!(q.0 as usize, q.index());
}

#[test]
fn a_foreign_qp_handle_is_refused() {
    let registry = Registry::new(&RnicConfig::default());
    let mut core0 = Rnic::with_registry(RnicConfig::default(), registry.clone());
    let mut core1 = Rnic::with_registry(RnicConfig::default(), registry.clone());
    let pd = registry.alloc_pd().unwrap();
    let make = |r: &mut Rnic| {
        let cq = r.create_cq(4).unwrap();
        r.create_qp(QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: 4,
            rq_size: 4,
        })
        .unwrap()
    };
    let q0 = make(&mut core0);
    let q1 = make(&mut core1);
    assert_eq!(q0.index(), q1.index(), "the same slot on each core");
    assert_eq!(core1.close(q0), Err(VerbError::UnknownHandle));
    assert_ne!(core1.qp_state(q1), Ok(QpState::Error), "core 1's QP lives");
    assert_eq!(core0.qp_state(q1), Err(VerbError::UnknownHandle));
}

/// A CQ or SRQ handle of one core's RNIC is refused by another core's over
/// the same registry, whose CQ and SRQ sit in the same slots, by every verb
/// that takes it, with the error a stale handle gets; the other core's own
/// queues are untouched.
#[test]
fn a_foreign_cq_or_srq_handle_is_refused() {
    let registry = Registry::new(&RnicConfig::default());
    let mut core0 = Rnic::with_registry(RnicConfig::default(), registry.clone());
    let mut core1 = Rnic::with_registry(RnicConfig::default(), registry.clone());
    let pd = registry.alloc_pd().unwrap();
    let mr = registry
        .reg_region(pd, Region::new(64), Access::LOCAL_WRITE)
        .unwrap();
    let sgl = [Sge {
        stag: mr.stag,
        to: 0,
        len: 64,
    }];
    let receive = RecvWr {
        wr_id: 1,
        sgl: &sgl,
    };
    let (cq0, srq0) = (
        core0.create_cq(4).unwrap(),
        core0.create_srq(pd, 4).unwrap(),
    );
    let (cq1, srq1) = (
        core1.create_cq(4).unwrap(),
        core1.create_srq(pd, 4).unwrap(),
    );
    assert_eq!(cq0.index(), cq1.index(), "the same CQ slot on each core");
    assert_eq!(srq0.index(), srq1.index(), "the same SRQ slot on each core");
    assert_ne!(cq0, cq1);
    assert_ne!(srq0, srq1);
    let init = |send_cq, recv_cq, srq| QpInit {
        pd,
        send_cq,
        recv_cq,
        srq,
        sq_size: 4,
        rq_size: 4,
    };
    const UNKNOWN: VerbError = VerbError::UnknownHandle;
    let mut wcs = [Wc::EMPTY; 4];
    assert_eq!(core1.poll_cq(cq0, &mut wcs), Err(UNKNOWN));
    assert_eq!(core1.req_notify_cq(cq0, Notify::Next), Err(UNKNOWN));
    assert_eq!(core1.cq(cq0).err(), Some(UNKNOWN));
    assert_eq!(core1.create_qp(init(cq0, cq1, None)), Err(UNKNOWN));
    assert_eq!(core1.create_qp(init(cq1, cq0, None)), Err(UNKNOWN));
    assert_eq!(core1.create_qp(init(cq1, cq1, Some(srq0))), Err(UNKNOWN));
    assert_eq!(core1.post_srq_recv(srq0, &receive), Err(UNKNOWN));
    assert_eq!(core1.destroy_cq(cq0), Err(UNKNOWN));
    assert_eq!(core1.destroy_srq(srq0), Err(UNKNOWN));
    // Core 1's own queues are still there and work; core 0's are refused
    // core 1's handles the same way.
    assert_eq!(core1.poll_cq(cq1, &mut wcs), Ok(0));
    core1.post_srq_recv(srq1, &receive).unwrap();
    core1.create_qp(init(cq1, cq1, Some(srq1))).unwrap();
    assert_eq!(core0.poll_cq(cq1, &mut wcs), Err(UNKNOWN));
    assert_eq!(core0.destroy_srq(srq1), Err(UNKNOWN));
    core0.destroy_srq(srq0).unwrap();
    core0.destroy_cq(cq0).unwrap();
}

/// Queue sizes are the caller's: one past the limit is refused with
/// `Invalid`, not a panic (`capacity overflow`) or an abort of the process
/// on the allocation (found by a review: `create_cq(1 << 42)` asked for
/// 175 TB).
#[test]
fn oversized_queues_are_refused() {
    use rnic_engine::verbs::{CQ_ENTRIES_MAX, WQ_ENTRIES_MAX};
    let (mut rnic, init, _) = setup(4);
    for capacity in [CQ_ENTRIES_MAX + 1, 1 << 42, usize::MAX] {
        assert_eq!(rnic.create_cq(capacity), Err(VerbError::Invalid));
    }
    for capacity in [WQ_ENTRIES_MAX + 1, usize::MAX] {
        assert_eq!(rnic.create_srq(init.pd, capacity), Err(VerbError::Invalid));
        assert_eq!(
            rnic.create_qp(QpInit {
                sq_size: capacity,
                ..init
            }),
            Err(VerbError::Invalid)
        );
        assert_eq!(
            rnic.create_qp(QpInit {
                rq_size: capacity,
                ..init
            }),
            Err(VerbError::Invalid)
        );
    }
    // Refused before the PD was held: it can still be freed.
    let registry = rnic.registry().clone();
    let pd = registry.alloc_pd().unwrap();
    let _ = rnic.create_qp(QpInit {
        pd,
        sq_size: usize::MAX,
        ..init
    });
    assert_eq!(registry.dealloc_pd(pd), Ok(()));
}

/// A PD handle kept past `dealloc_pd` names nothing, even after its index
/// was handed out again many times (found by a review: the generation had
/// 8 bits, and after 256 reuses the stale handle named the new owner's PD).
#[test]
fn a_stale_pd_handle_names_nothing_after_many_reuses() {
    let registry = Registry::new(&RnicConfig {
        pds_max: 1,
        ..RnicConfig::default()
    });
    let stale = registry.alloc_pd().unwrap();
    registry.dealloc_pd(stale).unwrap();
    for _ in 0..100_000 {
        let pd = registry.alloc_pd().unwrap();
        assert_ne!(pd, stale);
        registry.dealloc_pd(pd).unwrap();
    }
    let _owner = registry.alloc_pd().unwrap();
    assert_eq!(
        registry
            .reg_region(stale, Region::new(8), Access::REMOTE_WRITE)
            .map(|_| ()),
        Err(VerbError::UnknownHandle)
    );
}

/// An atomic whose remote address is not 8-aligned can never succeed (RFC
/// 7306: a naturally aligned word): refused at post, not sent to draw the
/// peer's Terminate and end the connection (found by a review).
#[test]
fn a_misaligned_atomic_is_refused_at_post() {
    use rnic_engine::pair::{PairConfig, RnicPair};
    use rnic_engine::verbs::{RemoteAddr, SendOp, SendWr};
    let mut pair = RnicPair::new(PairConfig::default()).unwrap();
    let (_ra, mra) = pair.a.region(64, Access::LOCAL_WRITE).unwrap();
    let (_rb, mrb) = pair
        .b
        .region(64, Access::REMOTE_ATOMIC | Access::LOCAL_WRITE)
        .unwrap();
    let sgl = [Sge {
        stag: mra.stag,
        to: mra.base_to,
        len: 8,
    }];
    let qp = pair.a.qp;
    for to in [mrb.base_to + 4, mrb.base_to + 1] {
        let op = SendOp::FetchAdd {
            remote: RemoteAddr { stag: mrb.stag, to },
            add: 1,
            mask: 0,
        };
        assert_eq!(
            pair.a.rnic.post_send(qp, &SendWr::signaled(1, op, &sgl)),
            Err(VerbError::Invalid)
        );
    }
    let op = SendOp::FetchAdd {
        remote: RemoteAddr {
            stag: mrb.stag,
            to: mrb.base_to + 8,
        },
        add: 1,
        mask: 0,
    };
    assert_eq!(
        pair.a.rnic.post_send(qp, &SendWr::signaled(2, op, &sgl)),
        Ok(())
    );
    pair.run(10_000);
    assert_eq!(pair.a.rnic.qp_state(qp), Ok(QpState::Rts));
}
