//! One registry, many cores: a region registered once is used by QPs of
//! two RNICs (two poll-mode cores of one host), each on its own thread,
//! and an invalidation or deregistration made anywhere stops both.
//!
//! Host A runs two cores over one [`Registry`]; host B is two independent
//! RNICs, one per A core, each joined to its A core by an in-memory link
//! (FPDUs moved whole, one EMSS at a time). Each pair runs on its own
//! thread.

use std::sync::{Arc, Barrier};

use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::pair::{connection, Link, PairConfig};
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{
    CqHandle, QpHandle, QpInit, Registry, RemoteAddr, Rnic, RnicConfig, SendOp, SendWr, Sge,
};

const EMSS: usize = 8960;

fn pair_config() -> PairConfig {
    PairConfig {
        crc: true,
        markers: false,
        emss: EMSS,
        ird_ord: 16,
        queue_size: 256,
        cq_size: 1024,
        window: 0,
        cut_max: 0,
        seed: 1,
        link: Link::Window,
    }
}

/// One side of a link: an RNIC, its QP and CQ.
struct End {
    rnic: Rnic,
    qp: QpHandle,
    cq: CqHandle,
}

impl End {
    /// A QP on `rnic` in its PD `pd`, connected.
    fn new(mut rnic: Rnic, pd: rnic_engine::mem::Pd) -> End {
        let cq = rnic.create_cq(1024).unwrap();
        let qp = rnic
            .create_qp(QpInit {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                sq_size: 256,
                rq_size: 256,
            })
            .unwrap();
        rnic.connect(qp, connection(&pair_config())).unwrap();
        End { rnic, qp, cq }
    }
}

/// Moves FPDUs both ways until neither side has any; returns the octets
/// moved.
fn shuttle(x: &mut End, y: &mut End) -> usize {
    let mut buf = vec![0u8; EMSS];
    let mut total = 0;
    loop {
        let moved = step(x, y, &mut buf) + step(y, x, &mut buf);
        if moved == 0 {
            return total;
        }
        total += moved;
    }
}

/// One EMSS of FPDUs from `from` to `to`.
fn step(from: &mut End, to: &mut End, buf: &mut [u8]) -> usize {
    let n = from.rnic.poll_transmit(from.qp, buf).unwrap();
    if n > 0 {
        let taken = to.rnic.handle_stream(to.qp, &buf[..n]).unwrap();
        assert!(taken <= n);
    }
    n
}

fn wait_one(end: &mut End, x: &mut End) -> rnic_engine::cq::Wc {
    for _ in 0..1000 {
        shuttle(x, end);
        let mut wc = [rnic_engine::cq::Wc::EMPTY; 1];
        if end.rnic.poll_cq(end.cq, &mut wc).unwrap() == 1 {
            return wc[0];
        }
    }
    panic!("no completion");
}

struct HostA {
    registry: Arc<Registry>,
    pd: rnic_engine::mem::Pd,
    region: Arc<Region>,
    stag: u32,
}

fn host_a(len: usize) -> HostA {
    let config = RnicConfig {
        stag_seed: 0x5eed,
        ..RnicConfig::default()
    };
    let registry = Registry::new(&config);
    let pd = registry.alloc_pd().unwrap();
    let region = Region::new(len);
    let stag = registry
        .reg_region(
            pd,
            region.clone(),
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        )
        .unwrap()
        .stag;
    HostA {
        registry,
        pd,
        region,
        stag,
    }
}

/// A core of host A (over the shared registry) and its peer on host B.
fn core_pair(a: &HostA, seed: u64) -> (End, End, Arc<Region>, u32) {
    let config = RnicConfig::default();
    let core = End::new(Rnic::with_registry(config, a.registry.clone()), a.pd);
    let mut rnic = Rnic::new(RnicConfig {
        stag_seed: seed,
        ..config
    });
    let pd = rnic.alloc_pd().unwrap();
    let local = Region::new(1 << 20);
    let lstag = rnic
        .reg_region(pd, local.clone(), Access::LOCAL_WRITE)
        .unwrap()
        .stag;
    let peer = End::new(rnic, pd);
    (core, peer, local, lstag)
}

#[test]
fn a_region_registered_once_serves_qps_on_two_cores() {
    const HALF: usize = 256 * 1024;
    const ADDS: u64 = 2000;
    let a = Arc::new(host_a(2 * HALF + 8));
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2u64)
        .map(|k| {
            let (a, barrier) = (a.clone(), barrier.clone());
            std::thread::spawn(move || {
                let (mut core, mut peer, local, lstag) = core_pair(&a, 100 + k);
                // Each peer writes its half of the region through its core.
                let pattern: Vec<u8> = (0..HALF).map(|i| (i as u64 * 7 + k * 13) as u8).collect();
                local.write(0, &pattern).unwrap();
                let sge = [Sge {
                    stag: lstag,
                    to: 0,
                    len: HALF as u32,
                }];
                let mine = RemoteAddr {
                    stag: a.stag,
                    to: k * HALF as u64,
                };
                peer.rnic
                    .post_send(peer.qp, &SendWr::signaled(1, SendOp::Write(mine), &sge))
                    .unwrap();
                let wc = wait_one(&mut peer, &mut core);
                assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Write));
                // Both cores add to one word at once: the atomic unit is
                // exact across cores.
                let word = RemoteAddr {
                    stag: a.stag,
                    to: 2 * HALF as u64,
                };
                let sink = [Sge {
                    stag: lstag,
                    to: HALF as u64 * 2,
                    len: 8,
                }];
                for i in 0..ADDS {
                    let op = SendOp::FetchAdd {
                        remote: word,
                        add: 1,
                        mask: 0,
                    };
                    peer.rnic
                        .post_send(peer.qp, &SendWr::signaled(10 + i, op, &sink))
                        .unwrap();
                    let wc = wait_one(&mut peer, &mut core);
                    assert_eq!(wc.status, WcStatus::Success);
                }
                barrier.wait();
                // Then each reads the other core's half, placed by the other
                // core, through its own.
                let theirs = RemoteAddr {
                    stag: a.stag,
                    to: (1 - k) * HALF as u64,
                };
                let sink = [Sge {
                    stag: lstag,
                    to: HALF as u64,
                    len: HALF as u32,
                }];
                peer.rnic
                    .post_send(peer.qp, &SendWr::signaled(2, SendOp::Read(theirs), &sink))
                    .unwrap();
                let wc = wait_one(&mut peer, &mut core);
                assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Read));
                let mut got = vec![0u8; HALF];
                local.read(HALF, &mut got).unwrap();
                let expected: Vec<u8> = (0..HALF)
                    .map(|i| (i as u64 * 7 + (1 - k) * 13) as u8)
                    .collect();
                assert!(got == expected, "core {k} read the other core's half");
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut word = [0u8; 8];
    a.region.read(2 * HALF, &mut word).unwrap();
    assert_eq!(
        u64::from_ne_bytes(word),
        2 * ADDS,
        "every FetchAdd counted once"
    );
}

#[test]
fn an_invalidation_on_one_core_is_seen_by_the_other() {
    let a = host_a(4096);
    let (mut core0, mut peer0, _, lstag0) = core_pair(&a, 7);
    let (mut core1, mut peer1, _, lstag1) = core_pair(&a, 8);
    let remote = RemoteAddr {
        stag: a.stag,
        to: 0,
    };
    let read = |peer: &mut End, core: &mut End, lstag: u32| {
        let sink = [Sge {
            stag: lstag,
            to: 0,
            len: 64,
        }];
        peer.rnic
            .post_send(peer.qp, &SendWr::signaled(5, SendOp::Read(remote), &sink))
            .unwrap();
        wait_one(peer, core)
    };
    assert_eq!(
        read(&mut peer1, &mut core1, lstag1).status,
        WcStatus::Success
    );
    // Core 0's QP invalidates the STag locally (its PD owns it).
    core0
        .rnic
        .post_send(
            core0.qp,
            &SendWr::signaled(9, SendOp::LocalInvalidate(a.stag), &[]),
        )
        .unwrap();
    let wc = wait_one(&mut core0, &mut peer0);
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::LocalInvalidate)
    );
    // Core 1 refuses the next Read: a Terminate of layer RDMAP (0), type
    // Remote Protection Error (1), code Invalid STag (0) (RFC 5040 §7.2).
    let wc = read(&mut peer1, &mut core1, lstag1);
    assert_eq!(wc.status, WcStatus::RemoteAccess);
    let event = core1.rnic.poll_event(core1.qp).unwrap();
    match event {
        Some(QpEvent::TerminateSent(t)) => {
            assert_eq!((t.layer, t.etype, t.ecode), (0, 1, 0), "{t:?}");
        }
        other => panic!("core 1 sent no Terminate: {other:?}"),
    }
    // Core 0's own peer is refused too.
    assert_eq!(
        read(&mut peer0, &mut core0, lstag0).status,
        WcStatus::RemoteAccess
    );
}

#[test]
fn deregistration_stops_a_read_response_streaming_on_another_core() {
    const LEN: usize = 1 << 20;
    let a = host_a(LEN);
    a.region.write(0, &vec![0x5a; LEN]).unwrap();
    let (mut core1, mut peer1, local, lstag) = core_pair(&a, 9);
    let sink = [Sge {
        stag: lstag,
        to: 0,
        len: LEN as u32,
    }];
    let remote = RemoteAddr {
        stag: a.stag,
        to: 0,
    };
    peer1
        .rnic
        .post_send(peer1.qp, &SendWr::signaled(3, SendOp::Read(remote), &sink))
        .unwrap();
    // The Read Request reaches core 1, then a few Read Response segments
    // flow.
    let mut buf = vec![0u8; EMSS];
    let n = peer1.rnic.poll_transmit(peer1.qp, &mut buf).unwrap();
    core1.rnic.handle_stream(core1.qp, &buf[..n]).unwrap();
    let mut streamed = 0;
    for _ in 0..4 {
        let n = core1.rnic.poll_transmit(core1.qp, &mut buf).unwrap();
        assert!(n > 0);
        peer1.rnic.handle_stream(peer1.qp, &buf[..n]).unwrap();
        streamed += n;
    }
    // The control side deregisters the region, as a daemon would.
    a.registry.dereg_mr(a.stag).unwrap();
    let wc = wait_one(&mut peer1, &mut core1);
    assert_eq!(wc.status, WcStatus::RemoteAccess, "{wc:?}");
    assert!(matches!(
        core1.rnic.poll_event(core1.qp).unwrap(),
        Some(QpEvent::TerminateSent(_))
    ));
    let placed = local.to_vec().iter().filter(|&&b| b == 0x5a).count();
    assert!(
        placed > 0 && placed < LEN && placed <= streamed,
        "the stream stopped at the next segment: {placed} of {LEN} placed"
    );
    // The STag is gone for every core, and its index comes back with a new
    // key.
    assert!(a.registry.dereg_mr(a.stag).is_err());
    let again = a
        .registry
        .reg_region(a.pd, Region::new(8), Access::REMOTE_READ)
        .unwrap();
    assert_ne!(again.stag, a.stag);
}

/// A protection domain is freed only once nothing is in it, as
/// `ibv_dealloc_pd` refuses while resources remain: registrations,
/// fast-registration STags, QPs and SRQs on any core. A freed PD is
/// unknown until it is handed out again.
#[test]
fn a_pd_is_freed_only_once_nothing_is_in_it() {
    use rnic_engine::verbs::VerbError;
    let registry = Registry::new(&RnicConfig {
        pds_max: 2,
        stags_max: 4,
        ..RnicConfig::default()
    });
    let pd = registry.alloc_pd().unwrap();
    let region = Region::new(4096);
    let mr = registry
        .reg_region(pd, region.clone(), Access::REMOTE_READ)
        .unwrap();
    assert_eq!(registry.dealloc_pd(pd), Err(VerbError::InUse));
    let stag = registry.alloc_fast_reg_stag(pd).unwrap();
    registry.dereg_mr(mr.stag).unwrap();
    assert_eq!(registry.dealloc_pd(pd), Err(VerbError::InUse), "an STag");
    registry.dereg_mr(stag).unwrap();
    // A registration refused for want of STags leaves nothing behind.
    let other = registry.alloc_pd().unwrap();
    let held: Vec<_> = std::iter::from_fn(|| {
        registry
            .reg_region(other, region.clone(), Access::REMOTE_READ)
            .ok()
    })
    .collect();
    assert!(!held.is_empty());
    assert_eq!(
        registry.reg_region(pd, region.clone(), Access::REMOTE_READ),
        Err(VerbError::Full)
    );
    assert_eq!(registry.alloc_fast_reg_stag(pd), Err(VerbError::Full));

    // A QP on a core holds it until destroyed.
    let mut rnic = Rnic::with_registry(RnicConfig::default(), registry.clone());
    let cq = rnic.create_cq(16).unwrap();
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        sq_size: 4,
        rq_size: 4,
    };
    let qp = rnic.create_qp(init).unwrap();
    assert_eq!(registry.dealloc_pd(pd), Err(VerbError::InUse), "a QP");
    rnic.destroy_qp(qp).unwrap();
    // An SRQ holds it too; an SRQ and a QP still there when the core's
    // RNIC goes are released.
    rnic.create_srq(pd, 4).unwrap();
    assert_eq!(registry.dealloc_pd(pd), Err(VerbError::InUse), "an SRQ");
    rnic.create_qp(init).unwrap();
    drop(rnic);
    assert_eq!(registry.dealloc_pd(pd), Ok(()));
    assert_eq!(registry.pds_in_use(), 1);

    // Freed: nothing more is made in it, and it is handed out again.
    assert_eq!(
        registry.reg_region(pd, region.clone(), Access::REMOTE_READ),
        Err(VerbError::UnknownHandle)
    );
    assert_eq!(registry.dealloc_pd(pd), Err(VerbError::UnknownHandle));
    let mut rnic = Rnic::with_registry(RnicConfig::default(), registry.clone());
    let cq = rnic.create_cq(16).unwrap();
    assert_eq!(
        rnic.create_qp(QpInit {
            send_cq: cq,
            recv_cq: cq,
            ..init
        }),
        Err(VerbError::UnknownHandle)
    );
    // The index comes back (every other free one first), under a new
    // handle: the stale one still names nothing.
    let again = registry.alloc_pd().unwrap();
    assert_ne!(again, pd);
    assert_eq!(registry.dealloc_pd(pd), Err(VerbError::UnknownHandle));
    assert_eq!(
        registry.reg_region(pd, region.clone(), Access::REMOTE_READ),
        Err(VerbError::UnknownHandle)
    );
    registry.dealloc_pd(again).unwrap();
    for mr in held {
        registry.dereg_mr(mr.stag).unwrap();
    }
    assert_eq!(registry.dealloc_pd(other), Ok(()));
}
