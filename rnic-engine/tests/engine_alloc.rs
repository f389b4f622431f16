//! The hot path allocates nothing: after setup, Writes, Reads, Sends,
//! Immediate Data and atomics of any size move through both engines
//! without one heap allocation (a counting global allocator checks).

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rnic_engine::cq::{Wc, WcStatus};
use rnic_engine::mem::Access;
use rnic_engine::pair::PairConfig;
use rnic_engine::verbs::{SendOp, SendWr};
use support::*;

struct Counting;

thread_local! {
    /// Allocations by this thread (the test harness's threads do their
    /// own). Const-initialised, so reading it never allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    ALLOCATIONS.with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn steady_state_transfers_do_not_allocate() {
    // Out of order SCTP delivery is left out: the reorder window copies an
    // early message into a buffer it keeps for reuse, and a deeper
    // reordering than any before takes one more (bounded by its
    // `ReorderConfig`). In-order messages, the steady state, are in.
    let steady = configs()
        .into_iter()
        .filter(|c| c.link != rnic_engine::pair::Link::MessagesShuffled);
    for config in steady {
        let mut pair = pair(PairConfig {
            ird_ord: 4,
            ..config
        });
        let (_, b_mr, _, a_mr) = regions(&mut pair, 1 << 17, ALL);
        let (_, b_inbox) = pair.b.region(1 << 17, Access::LOCAL_WRITE).unwrap();
        let mut wcs = [Wc::EMPTY; 64];
        let mut round = |pair: &mut rnic_engine::pair::RnicPair| {
            for (i, len) in [0usize, 1, 64, 1500, 1 << 16].into_iter().enumerate() {
                let sgl = [sge(&a_mr, 0, len)];
                let post = |pair: &mut rnic_engine::pair::RnicPair, op: SendOp, sgl: &[_]| {
                    let wr = SendWr {
                        wr_id: i as u64,
                        op,
                        sgl,
                        signaled: true,
                        solicited: false,
                        fence: false,
                    };
                    pair.a.rnic.post_send(pair.a.qp, &wr).unwrap();
                };
                pair.b
                    .rnic
                    .post_recv(pair.b.qp, &recv(1, &[sge(&b_inbox, 0, len)]))
                    .unwrap();
                pair.b.rnic.post_recv(pair.b.qp, &recv(2, &[])).unwrap();
                post(pair, SendOp::Write(remote(&b_mr, 8)), &sgl);
                post(pair, SendOp::Read(remote(&b_mr, 16)), &sgl);
                post(pair, SendOp::Send, &sgl);
                post(pair, SendOp::Immediate([i as u8; 8]), &[]);
                post(
                    pair,
                    SendOp::FetchAdd {
                        remote: remote(&b_mr, 0),
                        add: 1,
                        mask: 0,
                    },
                    &[sge(&a_mr, 1 << 16, 8)],
                );
                pair.run(STEPS);
                let a = pair.a.rnic.poll_cq(pair.a.cq, &mut wcs).unwrap();
                assert_eq!(a, 5);
                assert!(wcs[..a].iter().all(|wc| wc.status == WcStatus::Success));
                let b = pair.b.rnic.poll_cq(pair.b.cq, &mut wcs).unwrap();
                assert_eq!(b, 2);
                assert!(wcs[..b].iter().all(|wc| wc.status == WcStatus::Success));
            }
        };
        // The first round may size what grows lazily (nothing should).
        round(&mut pair);
        let before = ALLOCATIONS.with(Cell::get);
        for _ in 0..20 {
            round(&mut pair);
        }
        let during = ALLOCATIONS.with(Cell::get) - before;
        assert_eq!(
            during, 0,
            "{during} allocations on the hot path with {config:?}"
        );
    }
}
