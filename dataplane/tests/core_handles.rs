//! A QP's life through `dataplane::Core`: the application may destroy a
//! connection's QP itself, and a connection may end before the
//! application has heard of it; in neither case does another connection's
//! QP take its place (found by a review: the first connection's octets were
//! fed to the next connection's QP, which had the same handle, and
//! `next_ended` named a live QP of another connection).

mod support;

use rnic_engine::verbs::{RecvWr, SendOp, SendWr};
use support::*;
use tcp_lite::link::LinkEnd;
use tcp_lite::Stack;

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
