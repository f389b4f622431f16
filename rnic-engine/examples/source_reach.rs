//! What framing costs when the sources of many QPs' Writes no longer fit
//! the caches: the framer's one-pass kernel (`Framer::frame_region`, the
//! engine's transmit path for MTU 9000 segments) frames 64 KiB RDMA
//! Writes as 8,928-octet ULPDUs, one Write per QP in turn, as a core does
//! with many busy QPs, from registered memory laid out as `bench` lays it
//! out (a 128 KiB slot per QP: the 64 KiB it sends, then what it
//! receives):
//!
//! * `1 QP`: one source, one 256 KiB transmit ring (everything in L2);
//! * `1,024 QPs, one ring`: 64 MiB of sources, one ring (the sources come
//!   from DRAM, the output stays in the cache);
//! * `1,024 QPs, a ring each`: 64 MiB of sources and 1,024 rings of
//!   256 KiB, one per QP as TCP has them (both from DRAM).
//!
//! The three are timed in turn in the same rounds (the VM's speed drifts),
//! 15 rounds, the median. GB/s = 10^9 octets of payload per second.
//!
//! `cargo run --release -p rnic-engine --example source_reach`

use std::hint::black_box;
use std::time::Instant;

use rnic_engine::mem::Region;
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::wire::ddp;

/// The EMSS of an MTU 9000 path.
const EMSS: usize = 8960;
/// A Write's octets, and its slot in memory (what it sends, then what it
/// receives: `bench`'s `spec::slot`).
const WRITE: usize = 64 << 10;
const SLOT: usize = 2 * WRITE;
/// A TCP transmit ring's size (`bench`'s `tcp_config`).
const RING: usize = 256 << 10;
/// Octets framed per measurement of each layout.
const PER_ROUND: usize = 256 << 20;
const ROUNDS: usize = 15;

#[allow(clippy::disallowed_methods)] // A benchmark reads the clock; the library never does.
fn main() {
    if rnic_engine::mpa::crc::kernel() != rnic_engine::mpa::crc::Kernel::Vpclmulqdq {
        println!("this CPU has no VPCLMULQDQ: the one-pass kernel does not run here");
        return;
    }
    let qps = 1024;
    let region = Region::new(qps * SLOT);
    let mut one_ring = vec![0u8; RING];
    let mut rings: Vec<Vec<u8>> = (0..qps).map(|_| vec![0u8; RING]).collect();
    // Every octet of the rings touched once, so that no run pays the
    // kernel's first touch of a page.
    for ring in &mut rings {
        ring.fill(1);
    }
    let layouts = [
        "1 QP",
        "1,024 QPs, one ring",
        "1,024 QPs, a ring each",
        "1 QP, copy then CRC",
        "1,024 QPs, one ring, copy then CRC",
        "1,024 QPs, a ring each, copy then CRC",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); layouts.len()];
    let mut ring_at = vec![0usize; qps];
    for _ in 0..ROUNDS {
        for (which, samples) in times.iter_mut().enumerate() {
            let start = Instant::now();
            let mut framed = 0usize;
            let mut qp = 0usize;
            while framed < PER_ROUND {
                let (source, out, at) = match which % 3 {
                    0 => (0, &mut one_ring[..], &mut ring_at[0]),
                    1 => (qp * SLOT, &mut one_ring[..], &mut ring_at[0]),
                    _ => (qp * SLOT, &mut rings[qp][..], &mut ring_at[qp]),
                };
                framed += write(&region, source, out, at, which >= 3);
                qp = (qp + 1) % qps;
            }
            samples.push(framed as f64 / start.elapsed().as_secs_f64() / 1e9);
        }
    }
    println!("64 KiB Writes framed in one pass from registered memory (8,928-octet ULPDUs), one Write per QP in turn, {ROUNDS} rounds in turn, median:");
    let mut medians = Vec::new();
    for (name, samples) in layouts.iter().zip(&mut times) {
        samples.sort_by(f64::total_cmp);
        let median = samples[samples.len() / 2];
        medians.push(median);
        println!(
            "  {name:<38} {median:6.1} GB/s  ({:.1} to {:.1})",
            samples[0],
            samples[samples.len() - 1]
        );
    }
    println!(
        "  sources from DRAM: {:.2}x of 1 QP's speed; with a ring each too: {:.2}x",
        medians[1] / medians[0],
        medians[2] / medians[0]
    );
    println!(
        "  extra ns per KiB framed: {:.1} (sources), {:.1} (sources and rings)",
        1024.0 / medians[1] - 1024.0 / medians[0],
        1024.0 / medians[2] - 1024.0 / medians[0]
    );
}

/// Frames one 64 KiB Write from `source` into the ring `out` from `*at`,
/// wrapping as a TCP ring does; returns the payload octets framed.
fn write(region: &Region, source: usize, out: &mut [u8], at: &mut usize, two_pass: bool) -> usize {
    let payload = EMSS - 32 - ddp::TAGGED_HEADER_LEN;
    let mut framer = Framer::new(TxConfig {
        crc: true,
        markers: false,
        emss: EMSS,
    })
    .expect("an MTU 9000 EMSS");
    let mut done = 0;
    while done < WRITE {
        let len = payload.min(WRITE - done);
        let header = ddp::Repr {
            last: done + len == WRITE,
            reserved: 0,
            version: ddp::VERSION,
            rsvd_ulp: 0x40,
            buffer: ddp::Buffer::Tagged {
                stag: 0x1234_5678,
                to: done as u64,
            },
        };
        if *at + EMSS > out.len() {
            *at = 0;
        }
        let one_pass = match two_pass {
            true => None,
            false => framer.frame_region(
                black_box(&header),
                region,
                source + done,
                len,
                &mut out[*at..],
            ),
        };
        let n = one_pass
            .or_else(|| {
                // ULPDUs under the one-pass threshold (a Write's last
                // segment): the engine copies, then folds.
                framer
                    .frame_with(
                        &[],
                        ddp::TAGGED_HEADER_LEN + len,
                        &mut out[*at..],
                        |o, run| {
                            if o == 0 {
                                let hl = ddp::TAGGED_HEADER_LEN;
                                header.emit(&mut ddp::Packet::new_unchecked(&mut run[..hl]));
                                region.read(source + done, &mut run[hl..]).expect("inside");
                            } else {
                                region
                                    .read(source + done + o - ddp::TAGGED_HEADER_LEN, run)
                                    .expect("inside");
                            }
                        },
                    )
                    .ok()
            })
            .expect("the ring has room");
        *at += n;
        done += len;
    }
    WRITE
}
