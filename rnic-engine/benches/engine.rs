//! Criterion benchmarks of the DDP/RDMAP engine: RDMA Write, Read and Send
//! goodput and messages per second over `RnicPair` (both ends on one
//! core, no TCP), beside the framer alone on the same octets:
//! `cargo bench -p rnic-engine --bench engine`. The quick table with the
//! same workloads is `cargo run --release -p rnic-engine --example
//! engine_table`.

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};

#[path = "../examples/common/workloads.rs"]
mod workloads;
use workloads::{EngineWorkload, FramerWorkload, Kind};

const EMSS: usize = 1448;
const WINDOW: usize = 64 << 10;

fn engine(c: &mut Criterion) {
    for (size, name) in [(64 << 10, "64k"), (64, "64b")] {
        let mut group = c.benchmark_group(format!("engine_{name}"));
        let batch = workloads::batch(size);
        group.throughput(if size >= 4096 {
            Throughput::Bytes((size * batch) as u64)
        } else {
            Throughput::Elements(batch as u64)
        });
        let mut framer = FramerWorkload::new(size, EMSS, WINDOW);
        group.bench_function(BenchmarkId::new("framer_only", size), |b| {
            b.iter(|| framer.call())
        });
        for (kind, op) in [
            (Kind::Write, "write"),
            (Kind::Read, "read"),
            (Kind::Send, "send"),
        ] {
            let mut w = EngineWorkload::new(kind, size, EMSS, WINDOW);
            group.bench_function(BenchmarkId::new(op, size), |b| b.iter(|| w.call()));
        }
        group.finish();
    }
}

// criterion's macros define undocumented items.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::engine);
}
criterion_main!(group::benches);
