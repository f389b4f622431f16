//! QP handles name one QP of one RNIC: a handle kept past `destroy_qp`, or
//! one of another RNIC over the same registry, names nothing (found by a
//! review: a stale handle reached the slot's next QP, and a handle of one
//! core's RNIC acted on another core's QP).

use rnic_engine::cq::Wc;
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
