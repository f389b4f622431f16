//! The RDMAP/DDP engine's receive path (`Rnic::handle_stream`) on arbitrary
//! octets from a peer.
//!
//! Input: octet 0 picks CRC (bit 0) and markers (bit 1); octet 1 seeds how
//! the rest is cut into pieces; the rest is the peer's byte stream into
//! side `b` of an `RnicPair` whose `b` has registered memory of every kind
//! and posted receives (its STags are deterministic, so the fuzzer can
//! find them). Whatever `b` answers (Read Responses, Atomic Responses, a
//! Terminate) is then delivered to `a`.
//!
//! Asserts: no panic and no hang; `b` ends in RTS or Error, and in Error
//! it sent exactly one Terminate or received one; every receive `b` had
//! posted either completed or is still posted, never lost; the same
//! stream fed whole and fed in pieces leaves the same state, events and
//! memory (STYLE.md §6, "split everywhere").
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::mem::{Access, Region};
use rnic_engine::pair::{PairConfig, RnicPair};
use rnic_engine::verbs::{QpEvent, QpState, RecvWr, Sge};
use std::sync::Arc;

const RECEIVES: u64 = 4;

struct Outcome {
    state: QpState,
    events: Vec<QpEvent>,
    completions: usize,
    memory: Vec<Vec<u8>>,
}

fn run(crc: bool, markers: bool, stream: &[u8], cuts: Option<u8>) -> Outcome {
    let config = PairConfig {
        crc,
        markers,
        ird_ord: 2,
        ..PairConfig::default()
    };
    let mut pair = RnicPair::new(config).expect("pair");
    let mut regions: Vec<Arc<Region>> = Vec::new();
    for access in [
        Access::REMOTE_WRITE,
        Access::REMOTE_READ,
        Access::REMOTE_ATOMIC,
        Access::LOCAL_WRITE,
    ] {
        let (region, _) = pair.b.region(256, access).expect("region");
        region.write(0, &[0x5A; 256]).expect("fits");
        regions.push(region);
    }
    let (recv_region, recv_mr) = pair.b.region(256, Access::LOCAL_WRITE).expect("region");
    regions.push(recv_region);
    for i in 0..RECEIVES {
        let sgl = [Sge {
            stag: recv_mr.stag,
            to: 64 * i,
            len: 64,
        }];
        pair.b
            .rnic
            .post_recv(
                pair.b.qp,
                &RecvWr {
                    wr_id: i,
                    sgl: &sgl,
                },
            )
            .expect("receive");
    }
    let qp = pair.b.qp;
    match cuts {
        None => {
            let used = pair.b.rnic.handle_stream(qp, stream).expect("qp");
            assert_eq!(used, stream.len(), "the stream is consumed");
        }
        Some(seed) => {
            let mut rest = stream;
            let mut state = u32::from(seed) | 1;
            while !rest.is_empty() {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let n = (state as usize % 97 + 1).min(rest.len());
                pair.b.rnic.handle_stream(qp, &rest[..n]).expect("qp");
                rest = &rest[n..];
            }
        }
    }
    // Deliver b's answers to a; a may answer too (a Terminate of its own).
    pair.run(10_000);
    let events: Vec<QpEvent> =
        std::iter::from_fn(|| pair.b.rnic.poll_event(qp).expect("qp")).collect();
    let state = pair.b.rnic.qp_state(qp).expect("qp");
    let completions = pair.b.completions().len();
    Outcome {
        state,
        events,
        completions,
        memory: regions.iter().map(|r| r.to_vec()).collect(),
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, seed, stream @ ..] = data else {
        return;
    };
    let (crc, markers) = (flags & 1 != 0, flags & 2 != 0);
    let whole = run(crc, markers, stream, None);
    match whole.state {
        QpState::Rts => assert!(whole.events.is_empty()),
        QpState::Error => {
            assert_eq!(whole.events.len(), 1, "one Terminate: {:?}", whole.events);
            // Every receive completed (flushed or not): none is lost.
            assert_eq!(whole.completions as u64, RECEIVES);
        }
        other => panic!("b left in {other:?}"),
    }
    assert!(whole.completions as u64 <= RECEIVES);
    let cut = run(crc, markers, stream, Some(*seed));
    assert_eq!(whole.state, cut.state);
    assert_eq!(whole.events, cut.events);
    assert_eq!(whole.completions, cut.completions);
    assert!(
        whole.memory == cut.memory,
        "memory differs when the stream is cut"
    );
});
