//! The DDP/RDMAP engine's cost: RDMA Write, Read and Send through an
//! `RnicPair` (two engines, one core, no TCP), beside the MPA framer alone
//! on the same octets in the same run.
//!
//! ```text
//! cargo run --release -p rnic-engine --example engine_table [-- --json]
//! ```
//!
//! Each figure is the median of 21 runs of about 1 ms after a warm-up
//! (`common/measure.rs`). One call posts a batch of messages (64 of 64
//! octets, one of 64 KiB; only the last signaled), moves the FPDUs between
//! the two engines until the link is idle, and polls the completions: the
//! data path of both ends, sender and receiver, on one core. CRC on,
//! markers off, FPDUs sized to an EMSS of 1448 (one Ethernet MSS, siw's
//! FPDU size) unless a row says 9000. The link moves a 64 KiB window of
//! FPDUs per transfer, as the data plane hands the engine its TCP send
//! window's room; rows marked "per segment" move one EMSS at a time. The
//! "segments" row fills the same window with
//! `Rnic::poll_transmit_segments`, no FPDU across the TCP segments the link
//! models (`Link::Segments`).
//!
//! `framer only` frames the same tagged segments from a plain buffer,
//! deframes them (CRC checked) and copies the payload to a plain buffer,
//! through the same window: the least any receiver of these octets does.
//! The difference to `RDMA Write` is the engine's own cost: DDP/RDMAP
//! headers, STag checks, placement into registered memory, queues and
//! completions.
//!
//! `--json` ends the output with one line of JSON: `write_64k_gbit_s`,
//! `framer_only_64k_gbit_s`, `write_64b_mops` (the issue's figures),
//! `engine_overhead_64k_pct`, and `read_64k_gbit_s`, `send_64k_gbit_s`,
//! `read_64b_mops`, `send_64b_mops`, `framer_only_64b_mops`,
//! `write_64k_segment_gbit_s`, `framer_only_64k_segment_gbit_s`,
//! `write_64k_jumbo_gbit_s`, `framer_only_64k_jumbo_gbit_s`,
//! `write_64k_segments_gbit_s`, and for DDP over SCTP's messages (rows
//! "SCTP messages": the engine's second lower layer, RFC 5043, without
//! the SCTP association) `write_64k_sctp_gbit_s`, `read_64k_sctp_gbit_s`,
//! `write_64b_sctp_mops`.

#[path = "common/measure.rs"]
mod measure;
#[path = "common/workloads.rs"]
mod workloads;

use measure::{load, median_calls, median_rate};
use rnic_engine::pair::Link;
use workloads::{EngineWorkload, FramerWorkload, Kind};

const EMSS: usize = 1448;
const JUMBO: usize = 9000;
const WINDOW: usize = 64 << 10;
/// One segment per transfer.
const SEGMENT: usize = 0;

fn engine_gbit(kind: Kind, size: usize, emss: usize, window: usize) -> f64 {
    let mut w = EngineWorkload::new(kind, size, emss, window);
    median_rate(w.octets(), || w.call()) * 8.0
}

/// RDMA Write through `Rnic::poll_transmit_segments` (64 KiB window).
fn segments_gbit(size: usize) -> f64 {
    let mut w = EngineWorkload::with_link(Kind::Write, size, EMSS, WINDOW, Link::Segments);
    median_rate(w.octets(), || w.call()) * 8.0
}

fn engine_mops(kind: Kind, size: usize) -> f64 {
    let mut w = EngineWorkload::new(kind, size, EMSS, WINDOW);
    median_calls(|| w.call()) * w.batch() as f64 / 1e6
}

/// The engine over DDP over SCTP's messages (RFC 5043; `Link::Messages`,
/// 1,444-octet messages, MTU 1500 over UDP), without SCTP itself: what the
/// second lower layer costs the engine, beside MPA with CRC.
fn messages_gbit(kind: Kind, size: usize) -> f64 {
    let message = rnic_engine::sctp::MESSAGE_MAX_MTU_1500;
    let mut w = EngineWorkload::with_link(kind, size, message, WINDOW, Link::Messages);
    median_rate(w.octets(), || w.call()) * 8.0
}

fn messages_mops(size: usize) -> f64 {
    let message = rnic_engine::sctp::MESSAGE_MAX_MTU_1500;
    let mut w = EngineWorkload::with_link(Kind::Write, size, message, WINDOW, Link::Messages);
    median_calls(|| w.call()) * w.batch() as f64 / 1e6
}

/// 64 KiB RDMA Writes at EMSS 9000 (`window` octets a transfer, 0: one
/// segment), the RNICs switched between copying then folding and framing
/// in one pass (`Rnic::set_one_pass_framing`) every 20 ms for 3 s in this
/// process, so that the VM's changes of speed hit both alike. Returns the
/// Gbit/s of each: `(copy then CRC, one pass)`.
#[allow(clippy::disallowed_methods)] // A benchmark reads the clock; the library never does.
fn one_pass_in_turn(window: usize) -> (f64, f64) {
    let mut w = EngineWorkload::new(Kind::Write, 64 << 10, JUMBO, window);
    let mut sums = [(0usize, 0f64); 2];
    let start = std::time::Instant::now();
    let mut k = 0;
    while start.elapsed().as_secs_f64() < 3.0 {
        w.set_one_pass_framing(k == 1);
        let t = std::time::Instant::now();
        let mut octets = 0;
        while t.elapsed().as_millis() < 20 {
            w.call();
            octets += w.octets();
        }
        sums[k].0 += octets;
        sums[k].1 += t.elapsed().as_secs_f64();
        k ^= 1;
    }
    let gbit = |(octets, secs): (usize, f64)| octets as f64 * 8.0 / secs / 1e9;
    (gbit(sums[0]), gbit(sums[1]))
}

fn framer_gbit(size: usize, emss: usize, window: usize) -> f64 {
    let mut w = FramerWorkload::new(size, emss, window);
    median_rate(w.octets(), || w.call()) * 8.0
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    println!(
        "DDP/RDMAP engine over RnicPair (both ends on one core), median of {} runs",
        measure::RUNS
    );
    println!(
        "CRC kernel: {:?}; {}",
        rnic_engine::mpa::crc::kernel(),
        load()
    );
    println!();
    let k = 64 << 10;
    let framer_64k = framer_gbit(k, EMSS, WINDOW);
    let write_64k = engine_gbit(Kind::Write, k, EMSS, WINDOW);
    let read_64k = engine_gbit(Kind::Read, k, EMSS, WINDOW);
    let send_64k = engine_gbit(Kind::Send, k, EMSS, WINDOW);
    let framer_segment = framer_gbit(k, EMSS, SEGMENT);
    let write_segment = engine_gbit(Kind::Write, k, EMSS, SEGMENT);
    let write_segments = segments_gbit(k);
    let framer_jumbo = framer_gbit(k, JUMBO, WINDOW);
    let write_jumbo = engine_gbit(Kind::Write, k, JUMBO, WINDOW);
    let write_sctp = messages_gbit(Kind::Write, k);
    let read_sctp = messages_gbit(Kind::Read, k);
    let framer_64b = {
        let mut w = FramerWorkload::new(64, EMSS, WINDOW);
        median_calls(|| w.call()) * workloads::batch(64) as f64 / 1e6
    };
    let write_64b = engine_mops(Kind::Write, 64);
    let read_64b = engine_mops(Kind::Read, 64);
    let send_64b = engine_mops(Kind::Send, 64);
    let write_64b_sctp = messages_mops(64);
    let overhead = (framer_64k / write_64k - 1.0) * 100.0;

    println!(
        "{:<34} {:>10} {:>10}",
        "64 KiB messages", "Gbit/s", "vs framer"
    );
    for (name, value, framer) in [
        ("framer only", framer_64k, framer_64k),
        ("RDMA Write", write_64k, framer_64k),
        ("RDMA Read", read_64k, framer_64k),
        ("Send", send_64k, framer_64k),
        ("framer only, per segment", framer_segment, framer_segment),
        ("RDMA Write, per segment", write_segment, framer_segment),
        ("RDMA Write, segments", write_segments, framer_64k),
        ("framer only, EMSS 9000", framer_jumbo, framer_jumbo),
        ("RDMA Write, EMSS 9000", write_jumbo, framer_jumbo),
        ("RDMA Write, SCTP messages", write_sctp, framer_64k),
        ("RDMA Read, SCTP messages", read_sctp, framer_64k),
    ] {
        println!("{name:<34} {value:>10.1} {:>9.0}%", value / framer * 100.0);
    }
    println!();
    println!("{:<34} {:>10}", "64 B messages", "M msgs/s");
    for (name, value) in [
        ("framer only", framer_64b),
        ("RDMA Write", write_64b),
        ("RDMA Read", read_64b),
        ("Send", send_64b),
        ("RDMA Write, SCTP messages", write_64b_sctp),
    ] {
        println!("{name:<34} {value:>10.2}");
    }
    println!();
    println!("engine overhead above the framer at 64 KiB: {overhead:.1}% (goal <= 15%)");
    println!("64 B RDMA Writes: {write_64b:.2} M/s (goal >= 5 M/s)");
    println!();
    println!("64 KiB RDMA Writes at EMSS 9000, jumbo FPDUs framed in one pass or copied then folded (in turn):");
    let mut one_pass = Vec::new();
    for (name, window) in [("64 KiB window", WINDOW), ("one segment a call", SEGMENT)] {
        let (two, one) = one_pass_in_turn(window);
        println!(
            "  {name:<20} copy then CRC {two:>6.1}   one pass {one:>6.1} Gbit/s   {:.3}x",
            one / two
        );
        one_pass.push(one / two);
    }
    println!("{}", load());
    if json {
        println!(
            "{{\"write_64k_gbit_s\":{write_64k:.2},\"framer_only_64k_gbit_s\":{framer_64k:.2},\"write_64b_mops\":{write_64b:.3},\
\"engine_overhead_64k_pct\":{overhead:.1},\"read_64k_gbit_s\":{read_64k:.2},\"send_64k_gbit_s\":{send_64k:.2},\
\"read_64b_mops\":{read_64b:.3},\"send_64b_mops\":{send_64b:.3},\"framer_only_64b_mops\":{framer_64b:.3},\
\"write_64k_segment_gbit_s\":{write_segment:.2},\"framer_only_64k_segment_gbit_s\":{framer_segment:.2},\
\"write_64k_jumbo_gbit_s\":{write_jumbo:.2},\"framer_only_64k_jumbo_gbit_s\":{framer_jumbo:.2},\
\"write_64k_segments_gbit_s\":{write_segments:.2},\"write_64k_sctp_gbit_s\":{write_sctp:.2},\
\"read_64k_sctp_gbit_s\":{read_sctp:.2},\"write_64b_sctp_mops\":{write_64b_sctp:.3},\
\"one_pass_jumbo_window_ratio\":{:.3},\"one_pass_jumbo_segment_ratio\":{:.3}}}",
            one_pass[0], one_pass[1]
        );
    }
}
