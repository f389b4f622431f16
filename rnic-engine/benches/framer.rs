//! Criterion benchmarks of the MPA framer and deframer, with memcpy, the
//! `crc32c` crate and our SIMD CRC on the same buffers as references:
//! `cargo bench -p rnic-engine`. The quick table with the same figures is
//! `cargo run --release -p rnic-engine --example framer_table`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rnic_engine::mpa::crc;
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::mpa::tx::{Framer, TxConfig};

/// ULPDU sizes; the largest is 65000, not 64 KiB: ULPDU_Length is 16 bits
/// and with markers an FPDU must fit an EMSS of at most 65535.
const SIZES: [usize; 5] = [64, 512, 1460, 4096, 65000];
const EMSS: usize = 65535;
const HEADER: usize = 14;

fn ulpdu(size: usize) -> Vec<u8> {
    (0..size)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
        .collect()
}

fn transmit(c: &mut Criterion) {
    let mut group = c.benchmark_group("tx");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let data = ulpdu(size);
        let (header, payload) = data.split_at(HEADER.min(size));
        let mut out = vec![0u8; size + 4096];
        for (name, crc, markers) in [
            ("crc", true, false),
            ("crc_markers", true, true),
            ("nocrc", false, false),
        ] {
            let mut framer = Framer::new(TxConfig {
                crc,
                markers,
                emss: EMSS,
            })
            .unwrap();
            // The pieces as an array made once: built in each call from
            // `black_box`ed slices, they were stored in halves and loaded
            // whole, a store-forwarding stall per call (examples/framer_table.rs).
            let pieces = [header, payload];
            group.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter(|| framer.frame(black_box(&pieces), &mut out).unwrap())
            });
        }
    }
    group.finish();
}

fn receive(c: &mut Criterion) {
    let mut group = c.benchmark_group("rx");
    for size in SIZES {
        let data = ulpdu(size);
        for (name, markers) in [("crc", false), ("crc_markers", true)] {
            let mut framer = Framer::new(TxConfig {
                crc: true,
                markers,
                emss: EMSS,
            })
            .unwrap();
            let count = ((256 << 10) / size).max(4);
            let mut stream = vec![0u8; count * (size + 1024)];
            let mut at = 0;
            for _ in 0..count {
                at += framer.frame(&[&data], &mut stream[at..]).unwrap();
            }
            stream.truncate(at);
            let mut deframer = Deframer::new(RxConfig {
                crc: true,
                markers,
                ulpdu_max: 65535,
            });
            group.throughput(Throughput::Bytes((size * count) as u64));
            group.bench_function(BenchmarkId::new(name, size), |b| {
                b.iter(|| {
                    deframer.reset();
                    let mut rest = black_box(&stream[..]);
                    let mut seen = 0;
                    loop {
                        let (used, poll) = deframer.poll(rest);
                        rest = &rest[used..];
                        match poll {
                            Poll::Ulpdu(u) => seen += u.len(),
                            Poll::NeedMore => break,
                            Poll::Error(e) => panic!("{e}"),
                        }
                    }
                    seen
                })
            });
        }
    }
    group.finish();
}

fn references(c: &mut Criterion) {
    let mut group = c.benchmark_group("ref");
    for size in SIZES {
        group.throughput(Throughput::Bytes(size as u64));
        let data = ulpdu(size);
        let mut out = vec![0u8; size];
        group.bench_function(BenchmarkId::new("memcpy", size), |b| {
            b.iter(|| out.copy_from_slice(black_box(&data)))
        });
        group.bench_function(BenchmarkId::new("crc32c_crate", size), |b| {
            b.iter(|| crc32c::crc32c(black_box(&data)))
        });
        group.bench_function(BenchmarkId::new("simd_crc", size), |b| {
            b.iter(|| crc::crc32c(black_box(&data)))
        });
        group.bench_function(BenchmarkId::new("simd_copy_crc", size), |b| {
            b.iter(|| crc::copy_append(0, &mut out, black_box(&data)))
        });
    }
    group.finish();
}

// The macro defines an undocumented function.
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, transmit, receive, references);
}
criterion_main!(group::benches);
