//! A QP's life through `dataplane::Core`: the application may destroy a
//! connection's QP itself, and a connection may end before the
//! application has heard of it; in neither case does another connection's
//! QP take its place (found by a review: the first connection's octets were
//! fed to the next connection's QP, which had the same handle, and
//! `next_ended` named a live QP of another connection). And a CQ the
//! application destroys takes the completions the core kept of it along
//! (found by a review: they were handed out for it after its end, and for
//! the next CQ given its handle).

mod support;

use std::net::Ipv4Addr;

use control::runtime::ControlPlane;
use dataplane::{Core, CoreConfig};
use rnic_engine::cq::{Wc, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{CqHandle, QpInit, RecvWr, Rnic, RnicConfig, SendOp, SendWr};
use rnic_engine::wire::ddp;
use rnic_engine::wire::rdmap::{self, Control, Header, Opcode};
use support::*;
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::{Instant, Stack, StackConfig};

fn steps(a: &mut Host<Stack<LinkEnd>>, b: &mut Host<Stack<LinkEnd>>, n: usize) {
    for _ in 0..n {
        a.step(now());
        b.step(now());
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The application destroys the QP of a live connection through
/// `Core::rnic()` (as `ibv_destroy_qp` after a disconnect). The core keeps
/// the connection live on a QP handle that names nothing; the next
/// connection's QP takes that handle, and the first connection's octets
/// are then fed to the second connection's QP: a Send from the first
/// client completes a receive the application posted for the second.
#[test]
fn a_qp_destroyed_through_the_engine_does_not_take_another_connections_octets() {
    let (mut a, mut b, b_addr) = stacks_with(|_, rnic| rnic.qps_max = 1);
    let (ha, hb) = establish_plain(&mut a, &mut b, b_addr);
    let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
    b.rnic().destroy_qp(qb).unwrap();
    steps(&mut a, &mut b, 50);
    let still_live = b.core.is_live(qb);
    let (ha2, hb2) = establish_plain(&mut a, &mut b, b_addr);
    let _qa2 = a.qps[&ha2.conn.unwrap()];
    let qb2 = b.qps[&hb2.conn.unwrap()];
    let sgl = [b.sge(0, 100)];
    b.rnic()
        .post_recv(
            qb2,
            &RecvWr {
                wr_id: 7,
                sgl: &sgl,
            },
        )
        .unwrap();
    // The first client (connection 1) sends.
    a.region.write(1000, b"from the first client").unwrap();
    let sgl = [a.sge(1000, 21)];
    a.rnic()
        .post_send(qa, &SendWr::signaled(1, SendOp::Send, &sgl))
        .unwrap();
    steps(&mut a, &mut b, 200);
    let got = b.completions();
    let mut data = [0u8; 21];
    b.region.read(0, &mut data).unwrap();
    assert!(
        got.is_empty(),
        "qb {qb:?} live after destroy: {still_live}; qb2 {qb2:?}; b's open connections {}; \
         completions on the second connection's QP: {got:?}; its buffer: {:?}",
        b.core.open_connections(),
        String::from_utf8_lossy(&data)
    );
}

/// A connection ends and its QP is destroyed at once; a connection that
/// comes before the application has taken `next_ended` gets the same
/// handle, so `next_ended` then names a live QP of another connection.
#[test]
fn an_ended_qps_handle_is_not_reused_before_its_end_is_taken() {
    let (mut a, mut b, b_addr) = stacks_with(|_, rnic| rnic.qps_max = 1);
    let (ha, hb) = establish_plain(&mut a, &mut b, b_addr);
    let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
    a.core.abort(qa);
    let ended = b.core.counters().ended;
    run(&mut a, &mut b, "b's QP ends", |_, b| {
        b.core.counters().ended > ended
    });
    let (_, hb2) = establish_plain(&mut a, &mut b, b_addr);
    let qb2 = b.qps.get(&hb2.conn.unwrap()).copied();
    let ended: Vec<_> = std::iter::from_fn(|| b.core.next_ended()).collect();
    assert_eq!(ended, [qb]);
    assert_ne!(
        qb2,
        Some(qb),
        "next_ended says {qb:?} ended, yet is_live({qb:?}) = {}",
        b.core.is_live(qb)
    );
}

/// Two connections; b receives a Send on the second and does not poll, and
/// the first ends, so b's core moves the Send's completion out of the CQ
/// and keeps it for `Core::poll_cq`. Then the application tears down: it
/// destroys the second connection's QP through the engine, which leaves
/// the CQ used by no QP.
fn a_kept_completion_of_an_unused_cq() -> (Host<Stack<LinkEnd>>, Host<Stack<LinkEnd>>) {
    let (mut a, mut b, b_addr) = stacks();
    let (ha1, _) = establish_plain(&mut a, &mut b, b_addr);
    let (ha2, hb2) = establish_plain(&mut a, &mut b, b_addr);
    let qa1 = a.qps[&ha1.conn.unwrap()];
    let (qa2, qb2) = (a.qps[&ha2.conn.unwrap()], b.qps[&hb2.conn.unwrap()]);
    let sgl = [b.sge(0, 100)];
    b.rnic()
        .post_recv(
            qb2,
            &RecvWr {
                wr_id: 7,
                sgl: &sgl,
            },
        )
        .unwrap();
    let sgl = [a.sge(1000, 10)];
    a.rnic()
        .post_send(qa2, &SendWr::signaled(1, SendOp::Send, &sgl))
        .unwrap();
    let cq = b.cq;
    run(&mut a, &mut b, "the Send completes at b", |_, b| {
        !b.rnic().cq(cq).unwrap().is_empty()
    });
    a.core.abort(qa1);
    run(&mut a, &mut b, "the first connection ends at b", |_, b| {
        b.core.counters().ended > 0
    });
    let mut wcs = [Wc::EMPTY; 4];
    assert_eq!(
        b.rnic().poll_cq(cq, &mut wcs),
        Ok(0),
        "the core took the Send's completion out of the CQ"
    );
    b.rnic().destroy_qp(qb2).unwrap();
    (a, b)
}

/// The next CQ of `b`'s engine made in `cq`'s slot that gets `cq`'s handle
/// again, once the slot's generation has wrapped (the slot is the first
/// free one, so each new CQ takes it).
fn the_same_handle_again(b: &mut Host<Stack<LinkEnd>>, cq: CqHandle) -> CqHandle {
    for _ in 0..=u16::MAX {
        let next = b.rnic().create_cq(4).unwrap();
        if next == cq {
            return next;
        }
        b.rnic().destroy_cq(next).unwrap();
    }
    panic!("the slot never gave {cq:?} again")
}

/// The application destroys the CQ through the engine (`Core::rnic`): the
/// completion the core kept of it is not handed out for it afterwards,
/// nor for the CQ that gets its handle next.
#[test]
fn a_cq_destroyed_through_the_engine_takes_its_kept_completions_along() {
    let (_a, mut b) = a_kept_completion_of_an_unused_cq();
    let cq = b.cq;
    b.rnic().destroy_cq(cq).unwrap();
    let mut wcs = [Wc::EMPTY; 4];
    let n = b.core.poll_cq(cq, &mut wcs);
    assert_eq!(n, 0, "from a destroyed CQ: {:?}", &wcs[..n]);
    let reused = the_same_handle_again(&mut b, cq);
    let n = b.core.poll_cq(reused, &mut wcs);
    assert_eq!(n, 0, "from a new CQ: {:?}", &wcs[..n]);
}

/// `Core::destroy_cq` drops the kept completions at once: even a CQ that
/// gets the handle before the core's next turn or poll has none of them.
#[test]
fn core_destroy_cq_drops_the_kept_completions_at_once() {
    let (_a, mut b) = a_kept_completion_of_an_unused_cq();
    let cq = b.cq;
    b.core.destroy_cq(cq).unwrap();
    let reused = the_same_handle_again(&mut b, cq);
    let mut wcs = [Wc::EMPTY; 4];
    let n = b.core.poll_cq(reused, &mut wcs);
    assert_eq!(n, 0, "from a new CQ: {:?}", &wcs[..n]);
}

/// A host whose QPs receive from a shared receive queue.
fn srq_host(
    end: LinkEnd,
    addr: Ipv4Addr,
    mac: u8,
    seed: u64,
) -> (Host<Stack<LinkEnd>>, rnic_engine::verbs::SrqHandle) {
    let stack = Stack::new(
        StackConfig::new([2, 0, 0, 0, 0, mac], addr),
        end,
        Instant::ZERO,
    )
    .unwrap();
    let emss = stack.emss();
    let (control, mut links) = ControlPlane::start(1);
    let mut rnic = Rnic::new(RnicConfig {
        stag_seed: seed,
        ..RnicConfig::default()
    });
    let pd = rnic.alloc_pd().unwrap();
    let cq = rnic.create_cq(256).unwrap();
    let region = Region::new(64 * 1024);
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = rnic.reg_region(pd, region.clone(), access).unwrap();
    let srq = rnic.create_srq(pd, 16).unwrap();
    let qp_init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        sq_size: 64,
        rq_size: 0,
    };
    let host = Host {
        core: Core::new(CoreConfig::new(emss), stack, links.remove(0), rnic, qp_init),
        control,
        cq,
        qps: Default::default(),
        handoffs: Vec::new(),
        region,
        mr,
    };
    (host, srq)
}

/// A receive the QP took from the SRQ (a Send in progress) when its
/// connection is reset: the engine flushes it, and the core kept none of
/// its QP's flushes, so the application never heard of the buffer again,
/// although it was no longer in the SRQ (found by a review). The flush is
/// kept; the SRQ's other buffer stays in the SRQ, unreported.
#[test]
fn an_srq_receive_in_progress_at_a_connections_end_is_reported() {
    let (end_a, end_b) = link::pair(LinkConfig::ethernet(1500), 5);
    let (a_addr, b_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let stack = Stack::new(
        StackConfig::new([2, 0, 0, 0, 0, 1], a_addr),
        end_a,
        Instant::ZERO,
    )
    .unwrap();
    let emss = stack.emss();
    let mut a = Host::new(stack, emss, 1);
    let (mut b, srq) = srq_host(end_b, b_addr, 2, 2);
    let (ha, _hb) = establish_plain(&mut a, &mut b, b_addr);
    let qa = a.qps[&ha.conn.unwrap()];
    for wr_id in [100, 101] {
        let sgl = [b.sge((wr_id - 100) * 1000, 1000)];
        b.rnic()
            .post_srq_recv(srq, &RecvWr { wr_id, sgl: &sgl })
            .unwrap();
    }
    // The first DDP segment of a Send (MSN 1, MO 0, not the last).
    let segment = {
        let repr = rdmap::Repr {
            ddp: ddp::Repr {
                last: false,
                reserved: 0,
                version: ddp::VERSION,
                rsvd_ulp: Control::new(Opcode::Send).to_octet(),
                buffer: ddp::Buffer::Untagged {
                    rsvd_ulp: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0,
                },
            },
            header: Header::None,
            payload: &[0xAB; 100],
        };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ddp::Packet::new_unchecked(&mut out[..]));
        out
    };
    a.rnic().inject_ulpdu(qa, &segment).unwrap();
    steps(&mut a, &mut b, 50);
    let qb = b.qps[&_hb.conn.unwrap()];
    assert_eq!(b.core.rx_octets(qb), Some(124), "the first segment is in");
    a.core.abort(qa);
    run(&mut a, &mut b, "b's QP ends", |_, b| {
        b.core.counters().ended > 0
    });
    let wcs: Vec<Wc> = b.completions();
    assert!(
        wcs.iter()
            .any(|w| w.wr_id == 100 && w.status == WcStatus::Flushed),
        "SRQ buffer 100 was consumed by the ended QP and never reported: {wcs:?}"
    );
    assert!(!wcs.iter().any(|w| w.wr_id == 101), "{wcs:?}");
}
