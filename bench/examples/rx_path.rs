//! The engine's two receive paths taken in turn in one process, both RNICs
//! on this thread over the embedded link (MTU 9000, CRC on): FPDUs taken
//! straight from the received frames (`dataplane::CoreConfig::direct_receive`,
//! the default) and every octet through TCP's receive buffer
//! (`bench --rx-buffered`). Each round runs the same Write workload once
//! each way, the order alternating; the ratio printed is the median of the
//! rounds' ratios, so that the machine's changes of pace (this VM's differ
//! by 2x from minute to minute) fall on both alike.
//!
//! `cargo run --release -p bench --example rx_path [-- --json]`
#![allow(clippy::disallowed_methods)] // A benchmark reads the real clock.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bench::rig::{self, RigConfig};
use bench::spec::{memory_for, Mode, Op, Spec, Stop};
use bench::workload;

const ROUNDS: usize = 9;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    println!("RDMA Writes over the embedded link, both RNICs on one core, MTU 9000, CRC on;");
    println!("{ROUNDS} rounds, each running the workload once with each receive path, in turn\n");
    let mut out = Vec::new();
    for (k, &(name, key, size, qps)) in [
        ("64 KiB, 1 QP", "64k_1qp", 65536usize, 1usize),
        ("64 KiB, 64 QPs", "64k_64qp", 65536, 64),
        ("4 KiB, 1 QP", "4k_1qp", 4096, 1),
        ("64 B, 1 QP", "64b_1qp", 64, 1),
    ]
    .iter()
    .enumerate()
    {
        let config = RigConfig {
            crc: true,
            markers: false,
            mtu: 9000,
            memory: memory_for(qps, size),
            port: 7400 + k as u16,
            sw_checksums: false,
            loss: 0.0,
            direct_receive: true,
        };
        let mut rig = rig::embedded(&config).expect("the embedded rig");
        let spec = Spec {
            op: Op::Write,
            mode: Mode::Bandwidth,
            size,
            stop: Stop::Duration(Duration::from_millis(300)),
            depth: 16,
            qps,
            urgent: false,
            dscp: 0,
        };
        let stop = AtomicBool::new(false);
        let run = |rig: &mut rig::EmbeddedRig, direct: bool| -> f64 {
            assert!(rig.set_direct_receive(direct));
            let m = workload::run(rig, &spec, false, &stop, &mut |_| {}).expect("a run");
            m.octets as f64 * 8.0 / m.elapsed.as_secs_f64() / 1e9
        };
        run(&mut rig, true);
        let (mut direct, mut buffered, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let (d, b) = if round % 2 == 0 {
                let d = run(&mut rig, true);
                (d, run(&mut rig, false))
            } else {
                let b = run(&mut rig, false);
                (run(&mut rig, true), b)
            };
            direct.push(d);
            buffered.push(b);
            ratios.push(d / b);
        }
        let (d, b, r) = (median(direct), median(buffered), median(ratios));
        println!(
            "  {name:<16} straight from frames {d:>6.1}   through TCP's buffer {b:>6.1} Gbit/s   {r:.3}x"
        );
        out.push(format!("\"rx_direct_ratio_{key}\":{r:.3}"));
    }
    if json {
        println!("{{{}}}", out.join(","));
    }
}
