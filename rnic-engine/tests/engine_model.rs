//! Random operation sequences checked against a model of memory and
//! completions; atomics from many QPs and threads on one word; remote and
//! local access racing on registered memory.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use rnic_engine::atomics::{masked_add, masked_cmp_swap};
use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::pair::{PairConfig, RnicPair};
use rnic_engine::verbs::{SendOp, SendWr};
use support::*;

const MEMORY: usize = 8192;
const RECV_SLOT: usize = 4096;

#[derive(Debug, Clone)]
enum Op {
    Write {
        from: usize,
        to: usize,
        len: usize,
    },
    Read {
        from: usize,
        to: usize,
        len: usize,
    },
    Send {
        from: usize,
        len: usize,
        solicited: bool,
    },
    WriteImm {
        from: usize,
        to: usize,
        len: usize,
        imm: u64,
    },
    Imm {
        imm: u64,
    },
    FetchAdd {
        word: usize,
        add: u64,
        mask: u64,
    },
    CmpSwap {
        word: usize,
        compare: u64,
        compare_mask: u64,
        swap: u64,
        swap_mask: u64,
    },
}

fn span() -> impl Strategy<Value = (usize, usize, usize)> {
    (0..MEMORY, 0..MEMORY, 0usize..3000).prop_map(|(from, to, len)| {
        let len = len.min(MEMORY - from).min(MEMORY - to);
        (from, to, len)
    })
}

fn op() -> impl Strategy<Value = Op> {
    // Compare values from a small set so that some compares succeed.
    let small = prop_oneof![Just(0u64), Just(1), Just(0x1111), any::<u64>()];
    prop_oneof![
        3 => span().prop_map(|(from, to, len)| Op::Write { from, to, len }),
        3 => span().prop_map(|(from, to, len)| Op::Read { from, to, len }),
        2 => (span(), any::<bool>()).prop_map(|((from, _, len), solicited)| Op::Send { from, len: len.min(RECV_SLOT), solicited }),
        1 => (span(), any::<u64>()).prop_map(|((from, to, len), imm)| Op::WriteImm { from, to, len, imm }),
        1 => any::<u64>().prop_map(|imm| Op::Imm { imm }),
        2 => (0usize..4, any::<u64>(), prop_oneof![Just(0u64), any::<u64>()]).prop_map(|(word, add, mask)| Op::FetchAdd { word, add, mask }),
        2 => (0usize..4, small, any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(word, compare, compare_mask, swap, swap_mask)| {
            Op::CmpSwap { word, compare, compare_mask, swap, swap_mask }
        }),
    ]
}

fn config() -> impl Strategy<Value = PairConfig> {
    (
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(0usize), 1usize..300],
        1u16..5,
        any::<u64>(),
    )
        .prop_map(|(crc, markers, cut_max, ird_ord, seed)| PairConfig {
            crc,
            markers,
            cut_max,
            ird_ord,
            seed,
            ..PairConfig::default()
        })
}

fn word_of(memory: &[u8], word: usize) -> u64 {
    u64::from_ne_bytes(memory[word * 8..word * 8 + 8].try_into().unwrap())
}

/// Runs `ops` from a to b and checks memory on both sides and every
/// completion against a sequential model: b executes a's requests in
/// posting order (RFC 5040 §5.5), and completions come in posting order.
fn run_model(config: PairConfig, ops: &[(Op, bool)]) -> Result<(), TestCaseError> {
    let mut pair = RnicPair::new(config).unwrap();
    let (b_mem, b_mr) = pair.b.region(MEMORY, ALL).unwrap();
    let (b_inbox, b_inbox_mr) = pair.b.region(RECV_SLOT * 4, Access::LOCAL_WRITE).unwrap();
    let (a_src, a_src_mr) = pair.a.region(MEMORY, ALL).unwrap();
    let (a_sink, a_sink_mr) = pair.a.region(MEMORY, ALL).unwrap();
    let (a_results, a_results_mr) = pair.a.region(8 * ops.len().max(1), ALL).unwrap();
    let source = pattern(MEMORY, 0x5A);
    a_src.write(0, &source).unwrap();
    let mut model_b = pattern(MEMORY, 0xC3);
    b_mem.write(0, &model_b).unwrap();
    let mut model_sink = vec![0u8; MEMORY];
    let mut model_results = vec![0u8; 8 * ops.len().max(1)];
    let mut expected_a = Vec::new();
    let mut expected_b = Vec::new();
    let mut recv_id = 0u64;
    // Reads and atomics posted since the pair last ran dry: a Write behind one
    // of them needs a fence, or it may be placed before the earlier request's
    // data is fetched (RFC 5040 §5.5, draft-ietf-storm-rdmap-ext-00 §5.4 item
    // 3).
    let mut fetching = false;

    for (i, (op, signaled)) in ops.iter().enumerate() {
        let id = i as u64;
        let (op, sgl, opcode, len) = match *op {
            Op::Write { from, to, len } => {
                model_b[to..to + len].copy_from_slice(&source[from..from + len]);
                (
                    SendOp::Write(remote(&b_mr, to)),
                    vec![sge(&a_src_mr, from, len)],
                    WcOpcode::Write,
                    len,
                )
            }
            Op::Read { from, to, len } => {
                model_sink[to..to + len].copy_from_slice(&model_b[from..from + len]);
                (
                    SendOp::Read(remote(&b_mr, from)),
                    vec![sge(&a_sink_mr, to, len)],
                    WcOpcode::Read,
                    len,
                )
            }
            Op::Send {
                from,
                len,
                solicited,
            } => {
                let slot = (recv_id % 4) as usize * RECV_SLOT;
                pair.b
                    .rnic
                    .post_recv(
                        pair.b.qp,
                        &recv(recv_id, &[sge(&b_inbox_mr, slot, RECV_SLOT)]),
                    )
                    .unwrap();
                expected_b.push((
                    recv_id,
                    WcOpcode::Recv,
                    len,
                    None,
                    solicited,
                    Some((slot, source[from..from + len].to_vec())),
                ));
                recv_id += 1;
                let sgl = [sge(&a_src_mr, from, len)];
                let wr = SendWr {
                    wr_id: id,
                    op: SendOp::Send,
                    sgl: &sgl,
                    signaled: *signaled,
                    solicited,
                    fence: false,
                };
                pair.a.rnic.post_send(pair.a.qp, &wr).unwrap();
                if *signaled {
                    expected_a.push((id, WcOpcode::Send, len));
                }
                // Deliver it before its receive slot comes round again.
                pair.run(STEPS);
                fetching = false;
                continue;
            }
            Op::WriteImm { from, to, len, imm } => {
                model_b[to..to + len].copy_from_slice(&source[from..from + len]);
                pair.b
                    .rnic
                    .post_recv(pair.b.qp, &recv(recv_id, &[]))
                    .unwrap();
                expected_b.push((
                    recv_id,
                    WcOpcode::RecvImmediate,
                    0,
                    Some(imm.to_be_bytes()),
                    false,
                    None,
                ));
                recv_id += 1;
                let op = SendOp::WriteWithImmediate(remote(&b_mr, to), imm.to_be_bytes());
                (
                    op,
                    vec![sge(&a_src_mr, from, len)],
                    WcOpcode::WriteWithImmediate,
                    len,
                )
            }
            Op::Imm { imm } => {
                pair.b
                    .rnic
                    .post_recv(pair.b.qp, &recv(recv_id, &[]))
                    .unwrap();
                expected_b.push((
                    recv_id,
                    WcOpcode::RecvImmediate,
                    0,
                    Some(imm.to_be_bytes()),
                    false,
                    None,
                ));
                recv_id += 1;
                (
                    SendOp::Immediate(imm.to_be_bytes()),
                    vec![],
                    WcOpcode::Immediate,
                    0,
                )
            }
            Op::FetchAdd { word, add, mask } => {
                let original = word_of(&model_b, word);
                model_b[word * 8..word * 8 + 8]
                    .copy_from_slice(&masked_add(original, add, mask).to_ne_bytes());
                model_results[i * 8..i * 8 + 8].copy_from_slice(&original.to_ne_bytes());
                let op = SendOp::FetchAdd {
                    remote: remote(&b_mr, word * 8),
                    add,
                    mask,
                };
                (
                    op,
                    vec![sge(&a_results_mr, i * 8, 8)],
                    WcOpcode::FetchAdd,
                    8,
                )
            }
            Op::CmpSwap {
                word,
                compare,
                compare_mask,
                swap,
                swap_mask,
            } => {
                let original = word_of(&model_b, word);
                let new = masked_cmp_swap(original, compare, compare_mask, swap, swap_mask);
                model_b[word * 8..word * 8 + 8].copy_from_slice(&new.to_ne_bytes());
                model_results[i * 8..i * 8 + 8].copy_from_slice(&original.to_ne_bytes());
                let op = SendOp::CmpSwap {
                    remote: remote(&b_mr, word * 8),
                    compare,
                    compare_mask,
                    swap,
                    swap_mask,
                };
                (op, vec![sge(&a_results_mr, i * 8, 8)], WcOpcode::CmpSwap, 8)
            }
        };
        let writes = matches!(op, SendOp::Write(_) | SendOp::WriteWithImmediate(..));
        let fence = writes && fetching;
        fetching |= matches!(
            op,
            SendOp::Read(_) | SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. }
        );
        let wr = SendWr {
            wr_id: id,
            op,
            sgl: &sgl,
            signaled: *signaled,
            solicited: false,
            fence,
        };
        pair.a.rnic.post_send(pair.a.qp, &wr).unwrap();
        if *signaled {
            expected_a.push((id, opcode, len));
        }
        // Let requests pile up sometimes, so ORD throttling and the IRRQ
        // work with several outstanding.
        if i % 3 == 2 {
            pair.run(STEPS);
            fetching = false;
        }
    }
    pair.run(STEPS);

    let got_a: Vec<_> = pair
        .a
        .completions()
        .iter()
        .map(|wc| (wc.wr_id, wc.status, wc.opcode, wc.byte_len as usize))
        .collect();
    let want_a: Vec<_> = expected_a
        .iter()
        .map(|&(id, opcode, len)| (id, WcStatus::Success, opcode, len))
        .collect();
    prop_assert_eq!(got_a, want_a);
    let got_b = pair.b.completions();
    prop_assert_eq!(got_b.len(), expected_b.len());
    for (wc, (id, opcode, len, imm, solicited, _)) in got_b.iter().zip(&expected_b) {
        prop_assert_eq!(
            (
                wc.wr_id,
                wc.status,
                wc.opcode,
                wc.byte_len as usize,
                wc.imm,
                wc.solicited
            ),
            (*id, WcStatus::Success, *opcode, *len, *imm, *solicited)
        );
    }
    // Sends land in their slot; each slot holds the last Send into it.
    let inbox = b_inbox.to_vec();
    let mut last = [None; 4];
    for (id, _, _, _, _, data) in &expected_b {
        if let Some((slot, _)) = data {
            last[slot / RECV_SLOT] = Some(*id);
        }
    }
    for (id, _, _, _, _, data) in &expected_b {
        if let Some((slot, bytes)) = data {
            if last[slot / RECV_SLOT] == Some(*id) {
                prop_assert_eq!(&inbox[*slot..slot + bytes.len()], &bytes[..]);
            }
        }
    }
    prop_assert!(
        b_mem.to_vec() == model_b,
        "b's memory differs from the model"
    );
    prop_assert!(
        a_sink.to_vec() == model_sink,
        "Read sinks differ from the model"
    );
    prop_assert!(
        a_results.to_vec() == model_results,
        "atomic originals differ from the model"
    );
    prop_assert!(
        events(&mut pair, true, None).is_empty() && events(&mut pair, false, None).is_empty()
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_match_the_model(config in config(), ops in prop::collection::vec((op(), any::<bool>()), 1..40)) {
        run_model(config, &ops)?;
    }
}

/// FetchAdds from eight QPs on one word: every original value is seen
/// exactly once and the sum is exact.
#[test]
fn atomics_from_many_qps_on_one_word_are_exact() {
    let mut pair = pair(PairConfig {
        ird_ord: 4,
        ..PairConfig::default()
    });
    let (b_mem, b_mr) = pair.b.region(64, Access::REMOTE_ATOMIC).unwrap();
    let mut qps = vec![pair.a.qp];
    for _ in 0..7 {
        qps.push(pair.add_qp().unwrap().0);
    }
    const EACH: usize = 100;
    let (results, results_mr) = pair.a.region(8 * EACH * qps.len(), ALL).unwrap();
    for round in 0..EACH {
        for (q, &qp) in qps.iter().enumerate() {
            let slot = (round * qps.len() + q) * 8;
            let op = SendOp::FetchAdd {
                remote: remote(&b_mr, 16),
                add: 1,
                mask: 0,
            };
            pair.a
                .rnic
                .post_send(
                    qp,
                    &SendWr {
                        wr_id: slot as u64,
                        op,
                        sgl: &[sge(&results_mr, slot, 8)],
                        signaled: false,
                        solicited: false,
                        fence: false,
                    },
                )
                .unwrap();
        }
        if round % 10 == 9 {
            pair.run(STEPS);
        }
    }
    pair.run(STEPS);
    let total = (EACH * qps.len()) as u64;
    let mut word = [0u8; 8];
    b_mem.read(16, &mut word).unwrap();
    assert_eq!(u64::from_ne_bytes(word), total);
    let mut seen: Vec<u64> = results
        .to_vec()
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..total).collect::<Vec<_>>(),
        "each original value exactly once"
    );
}

/// Four threads, each with its own RNIC pair whose responder registered
/// the same region, plus the application's own atomic adds through the
/// API: no update is lost.
#[test]
fn atomics_from_threads_and_the_application_are_exact() {
    let shared = Region::new(64);
    const PER_THREAD: u64 = 2000;
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut pair = pair(PairConfig {
                    seed: t + 1,
                    ..PairConfig::default()
                });
                let mr = pair
                    .b
                    .rnic
                    .reg_region(pair.b.pd, shared, Access::REMOTE_ATOMIC)
                    .unwrap();
                let (_, sink) = pair.a.region(8, ALL).unwrap();
                for i in 0..PER_THREAD {
                    // Masked add with a lane boundary at bit 31 on a word
                    // whose low half never carries: same as a plain add.
                    let op = SendOp::FetchAdd {
                        remote: remote(&mr, 8),
                        add: 1 << 32 | 1,
                        mask: 1 << 31,
                    };
                    pair.a
                        .rnic
                        .post_send(
                            pair.a.qp,
                            &SendWr {
                                wr_id: i,
                                op,
                                sgl: &[sge(&sink, 0, 8)],
                                signaled: false,
                                solicited: false,
                                fence: false,
                            },
                        )
                        .unwrap();
                    if i % 16 == 15 {
                        pair.run(STEPS);
                    }
                }
                pair.run(STEPS);
            })
        })
        .collect();
    let word = shared.word(8).unwrap();
    for _ in 0..PER_THREAD {
        rnic_engine::atomics::fetch_add(word, 1 << 32 | 1, 1 << 31);
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let total = 5 * PER_THREAD;
    assert_eq!(word.load(Ordering::SeqCst), total << 32 | total);
}

/// Remote Writes race the application's reads of the same memory. Every
/// octet a reader sees is one some Write stored (never torn into values
/// nobody wrote), and per octet values never go backwards (coherence).
#[test]
fn remote_writes_race_local_reads() {
    const LEN: usize = 4096;
    let region = Region::new(LEN);
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (region, done) = (region.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = vec![0u8; LEN];
            let mut now = vec![0u8; LEN];
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) || reads < 10 {
                // Whole, and in pieces of every copy path's sizes (short,
                // vector, long), at odd offsets.
                if reads.is_multiple_of(2) {
                    region.read(0, &mut now).unwrap();
                } else {
                    let mut at = 0;
                    for len in [7usize, 64, 1000, 2047, 63, 915].iter().cycle() {
                        let len = (*len).min(LEN - at);
                        region.read(at, &mut now[at..at + len]).unwrap();
                        at += len;
                        if at == LEN {
                            break;
                        }
                    }
                }
                for (i, (&old, &new)) in last.iter().zip(&now).enumerate() {
                    assert!(new >= old, "octet {i} went back from {old} to {new}");
                    assert!(new <= 250, "octet {i} holds {new}, which nobody wrote");
                }
                std::mem::swap(&mut last, &mut now);
                reads += 1;
            }
            reads
        })
    };
    let mut pair = pair(PairConfig {
        cut_max: 333,
        ..PairConfig::default()
    });
    let mr = pair
        .b
        .rnic
        .reg_region(pair.b.pd, region.clone(), Access::REMOTE_WRITE)
        .unwrap();
    let (source, source_mr) = pair.a.region(LEN, ALL).unwrap();
    for value in 1..=250u8 {
        source.write(0, &[value; LEN]).unwrap();
        // Unaligned pieces too, so partial words race as well.
        for (from, len) in [(0, LEN), (3, 1000), (1001, 7), (2048, 2048)] {
            pair.a
                .rnic
                .post_send(
                    pair.a.qp,
                    &SendWr {
                        wr_id: 0,
                        op: SendOp::Write(remote(&mr, from)),
                        sgl: &[sge(&source_mr, from, len)],
                        signaled: false,
                        solicited: false,
                        fence: false,
                    },
                )
                .unwrap();
        }
        pair.run(STEPS);
    }
    done.store(true, Ordering::Release);
    let reads = reader.join().unwrap();
    assert!(reads >= 10);
    assert_eq!(region.to_vec(), vec![250u8; LEN]);
}
