//! The MPA framer and deframer, GB/s per ULPDU size, beside memcpy, the
//! `crc32c` crate and our SIMD CRC alone on the same buffers in the same run.
//!
//! ```text
//! cargo run --release -p rnic-engine --example framer_table [-- --json]
//! ```
//!
//! GB/s are 10^9 octets of ULPDU per second (the DDP segments carried; the
//! FPDU's length field, PAD, CRC and markers are overhead on top). Each
//! figure is the median of 21 runs of about 1 ms after a warm-up. One core;
//! the load average before and after says how busy the other one was.
//!
//! * `tx`: [`Framer::frame`] of a 14-octet DDP header and a payload from
//!   a registered buffer into an output buffer (an mbuf data room): length,
//!   copy, PAD, markers, CRC in one pass. The two pieces are passed as an
//!   array made once, behind `black_box`: built afresh in each call from
//!   two `black_box`ed slices, the compiler stored each slice in two
//!   halves and loaded it whole, a store-forwarding stall in every call
//!   that held each call until the one before had retired, so the rows
//!   measured the CRC's last steps' latency, which the reference rows
//!   (their buffer in registers) overlap with the next call.
//! * `rx`: [`Deframer::poll`] over a stream of such FPDUs, CRC verified;
//!   without markers the FPDUs are checked in place, with markers copied
//!   out marker-free.
//! * references: `copy_from_slice` of the ULPDU (memcpy), the `crc32c`
//!   crate, and our CRC (`crc::crc32c`) alone, on the same octets.
//!
//! The largest size is 65000 octets, not 64 KiB: ULPDU_Length is 16 bits,
//! and with markers an FPDU must fit 65535 octets of EMSS.
//!
//! `--json` ends the output with one line of JSON holding every figure,
//! keyed `<path>_<size>_gb_s` (sizes `64b`, `512b`, `1460b`, `4k`, `64k`)
//! plus `tx_crc_64b_mfpdus` and `rx_crc_64b_mfpdus` (millions of 64-octet
//! FPDUs per second), and `<path>_fixed_ns` and `<path>_per_512_ns` for
//! `tx_crc`, `tx_crc_markers` and `ref_simd_copy_crc`: a call's ns split
//! into a part every FPDU pays and a part per 512 octets, from 4 and 8 KiB
//! measured in turn (see `fixed_and_slope`).

use std::hint::black_box;

use rnic_engine::mpa::crc;
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::wire::ddp;

#[path = "common/measure.rs"]
mod measure;
use measure::{load, median_calls, median_rate, time};

const SIZES: [(usize, &str); 5] = [
    (64, "64b"),
    (512, "512b"),
    (1460, "1460b"),
    (4096, "4k"),
    (65000, "64k"),
];
const HEADER: usize = 14;
const EMSS: usize = 65535;
/// FPDUs per receive run: enough octets that the stream does not fit L1.
const STREAM_OCTETS: usize = 256 << 10;

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    println!(
        "MPA framer/deframer, GB/s of ULPDU (10^9 octets/s), median of {} runs",
        measure::RUNS
    );
    println!("CRC kernel: {:?}; {}", crc::kernel(), load());
    println!();
    let paths: [(&str, Path); 9] = [
        (
            "tx_crc",
            Path::Tx {
                crc: true,
                markers: false,
            },
        ),
        (
            "tx_crc_markers",
            Path::Tx {
                crc: true,
                markers: true,
            },
        ),
        (
            "tx_nocrc",
            Path::Tx {
                crc: false,
                markers: false,
            },
        ),
        (
            "rx_crc",
            Path::Rx {
                crc: true,
                markers: false,
            },
        ),
        (
            "rx_crc_markers",
            Path::Rx {
                crc: true,
                markers: true,
            },
        ),
        ("ref_memcpy", Path::Memcpy),
        ("ref_crc32c_crate", Path::Crate),
        ("ref_simd_crc", Path::SimdCrc),
        ("ref_simd_copy_crc", Path::SimdCopyCrc),
    ];
    print!("{:<20}", "");
    for (size, _) in SIZES {
        print!("{:>10}", measure::size_name(size));
    }
    println!();
    let mut figures: Vec<(String, f64)> = Vec::new();
    for (name, path) in paths {
        print!("{name:<20}");
        for (size, token) in SIZES {
            let gb_s = path.measure(size);
            print!("{gb_s:>10.1}");
            figures.push((format!("{name}_{token}_gb_s"), gb_s));
        }
        println!();
    }
    let tx_mfpdus = fpdus_per_second(Path::Tx {
        crc: true,
        markers: false,
    }) / 1e6;
    let rx_mfpdus = fpdus_per_second(Path::Rx {
        crc: true,
        markers: false,
    }) / 1e6;
    println!();
    println!("64-octet ULPDUs, CRC on: transmit {tx_mfpdus:.1} M FPDUs/s, receive {rx_mfpdus:.1} M FPDUs/s");
    figures.push(("tx_crc_64b_mfpdus".into(), tx_mfpdus));
    figures.push(("rx_crc_64b_mfpdus".into(), rx_mfpdus));
    println!();
    println!(
        "ns per call split into a fixed part and a part per 512 octets (4 and 8 KiB, interleaved):"
    );
    for (name, fixed, per_512) in fixed_and_slope() {
        println!("  {name:<20} fixed {fixed:>6.1} ns   per 512 octets {per_512:>5.2} ns");
        figures.push((format!("{name}_fixed_ns"), fixed));
        figures.push((format!("{name}_per_512_ns"), per_512));
    }
    println!();
    println!(
        "from registered memory, ns per FPDU, copy then CRC (the engine's frame_with) / one pass (frame_region), in turn:"
    );
    for (ulpdu, two, one) in from_region() {
        println!(
            "  ULPDU {ulpdu:>5} octets   two passes {two:>6.1} ns   one pass {one:>6.1} ns   {:.2}x",
            two / one
        );
        figures.push((format!("region_{ulpdu}_two_pass_ns"), two));
        figures.push((format!("region_{ulpdu}_one_pass_ns"), one));
    }
    println!("after the run: {}", load());
    if json {
        let fields: Vec<String> = figures
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v:.3}"))
            .collect();
        println!(
            "{{\"crc_kernel\":\"{:?}\",{}}}",
            crc::kernel(),
            fields.join(",")
        );
    }
}

#[derive(Clone, Copy)]
enum Path {
    Tx { crc: bool, markers: bool },
    Rx { crc: bool, markers: bool },
    Memcpy,
    Crate,
    SimdCrc,
    SimdCopyCrc,
}

impl Path {
    /// GB/s of ULPDU octets for ULPDUs of `size` octets.
    fn measure(self, size: usize) -> f64 {
        let mut arena = Arena::new(size);
        let (ulpdu, out) = arena.split();
        let ulpdu = &*ulpdu;
        match self {
            Path::Tx { crc, markers } => {
                let mut framer = Framer::new(TxConfig {
                    crc,
                    markers,
                    emss: EMSS,
                })
                .unwrap();
                let (header, payload) = ulpdu.split_at(HEADER.min(size));
                let pieces = [header, payload];
                median_rate(size, || {
                    black_box(framer.frame(black_box(&pieces), out).unwrap());
                })
            }
            Path::Rx { crc, markers } => rx_rate(size, crc, markers, ulpdu),
            Path::Memcpy => median_rate(size, || out[..size].copy_from_slice(black_box(ulpdu))),
            Path::Crate => median_rate(size, || {
                black_box(crc32c::crc32c(black_box(ulpdu)));
            }),
            Path::SimdCrc => median_rate(size, || {
                black_box(crc::crc32c(black_box(ulpdu)));
            }),
            Path::SimdCopyCrc => median_rate(size, || {
                black_box(crc::copy_append(0, &mut out[..size], black_box(ulpdu)));
            }),
        }
    }
}

/// The ULPDU and an output buffer in one allocation, placed as in a real
/// transmit: the ULPDU on a cache line (registered memory), the output 194
/// octets into a data room (DPDK's 128 octets of headroom, then Ethernet,
/// IPv4 and TCP with timestamps), and the two never a multiple of 4 KiB
/// apart, which makes loads wait for unrelated stores ("4K aliasing") and
/// made figures swing between runs by where the allocator put the buffers.
struct Arena {
    octets: Vec<u8>,
    size: usize,
    ulpdu_at: usize,
    out_at: usize,
}

impl Arena {
    fn new(size: usize) -> Arena {
        let span = (size + 4096).next_multiple_of(4096);
        let mut octets = vec![0u8; 2 * span + 8192];
        let ulpdu_at = octets.as_ptr().align_offset(64);
        let out_at = ulpdu_at + span + 2048 + 194;
        for (i, octet) in octets[ulpdu_at..ulpdu_at + size].iter_mut().enumerate() {
            *octet = (i as u32).wrapping_mul(2_654_435_761) as u8;
        }
        Arena {
            octets,
            size,
            ulpdu_at,
            out_at,
        }
    }

    /// The ULPDU and the output buffer.
    fn split(&mut self) -> (&mut [u8], &mut [u8]) {
        let (a, b) = self.octets.split_at_mut(self.out_at);
        (
            &mut a[self.ulpdu_at..self.ulpdu_at + self.size],
            &mut b[..self.size + 4096],
        )
    }
}

/// Receive: a stream of FPDUs framed once, deframed per run from octet 0.
fn rx_rate(size: usize, crc: bool, markers: bool, ulpdu: &[u8]) -> f64 {
    let stream = framed_stream(size, crc, markers, ulpdu);
    let count = stream.1;
    let mut deframer = Deframer::new(RxConfig {
        crc,
        markers,
        ulpdu_max: 65535,
    });
    median_rate(size * count, || {
        deframer.reset();
        let mut rest = black_box(&stream.0[..]);
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
        assert_eq!(seen, size * count);
    })
}

/// At least [`STREAM_OCTETS`] of FPDUs carrying `ulpdu`, and how many.
fn framed_stream(size: usize, crc: bool, markers: bool, ulpdu: &[u8]) -> (Vec<u8>, usize) {
    let mut framer = Framer::new(TxConfig {
        crc,
        markers,
        emss: EMSS,
    })
    .unwrap();
    let count = (STREAM_OCTETS / size).max(4);
    let mut stream = vec![0u8; count * (size + 1024)];
    let mut at = 0;
    for _ in 0..count {
        at += framer.frame(&[ulpdu], &mut stream[at..]).unwrap();
    }
    stream.truncate(at);
    (stream, count)
}

/// FPDUs per second for 64-octet ULPDUs on a path.
fn fpdus_per_second(path: Path) -> f64 {
    let ulpdu = [0x5au8; 64];
    match path {
        Path::Tx { crc, markers } => {
            let mut framer = Framer::new(TxConfig {
                crc,
                markers,
                emss: EMSS,
            })
            .unwrap();
            let mut out = [0u8; 128];
            let pieces = [&ulpdu[..14], &ulpdu[14..]];
            median_calls(|| {
                black_box(framer.frame(black_box(&pieces), &mut out).unwrap());
            })
        }
        Path::Rx { crc, markers } => rx_rate(64, crc, markers, &ulpdu) * 1e9 / 64.0,
        _ => unreachable!("only the framer's paths count FPDUs"),
    }
}

/// An RDMA Write's DDP segments framed from registered memory (a
/// `Region`), the two ways the engine can: `frame_with`, its payload
/// copied out of the region and then the CRC computed over the FPDU, and
/// `frame_region`, the payload loaded once, stored and folded. ULPDUs of an
/// 8,948-octet EMSS segment (14-octet header), 6,144 and 16,000 octets,
/// each way in turn in the same rounds; the output moves through a
/// 64 KiB window as a TCP ring's would. Returns `(ULPDU octets, two-pass ns,
/// one-pass ns)`, or nothing where the one-pass kernel does not run. (The
/// engine frames only ULPDUs of 6,144 octets or more in one pass: see
/// `ONE_PASS_SHARED_MIN` in `mpa/tx.rs`.)
fn from_region() -> Vec<(usize, f64, f64)> {
    const ROUNDS: usize = 31;
    const CALLS: u64 = 4000;
    let region = rnic_engine::mem::Region::new(1 << 20);
    let header = ddp::Repr {
        last: false,
        reserved: 0,
        version: ddp::VERSION,
        rsvd_ulp: 0x40,
        buffer: ddp::Buffer::Tagged {
            stag: 0x1234_5678,
            to: 0x10_0000,
        },
    };
    let mut out = vec![0u8; (64 << 10) + 32768];
    let mut results = Vec::new();
    for ulpdu in [8928usize, 6144, 16000] {
        let payload = ulpdu - ddp::TAGGED_HEADER_LEN;
        let mut framer = Framer::new(TxConfig {
            crc: true,
            markers: false,
            emss: EMSS,
        })
        .unwrap();
        if framer
            .frame_region(&header, &region, 0, payload, &mut out)
            .is_none()
        {
            return Vec::new();
        }
        let (mut two, mut one) = (Vec::new(), Vec::new());
        let (mut at, mut offset) = (0usize, 0usize);
        let step = |at: &mut usize, offset: &mut usize, n: usize| {
            *at = if *at + 2 * n > 64 << 10 { 0 } else { *at + n };
            *offset = (*offset + payload) % ((1 << 20) - payload);
        };
        for _ in 0..ROUNDS {
            // The engine's way (`qp::tx::frame_segment`): the header
            // emitted into the FPDU, the payload copied after it.
            let t = time(CALLS, &mut || {
                let header = black_box(&header);
                let hl = ddp::TAGGED_HEADER_LEN;
                let n = framer
                    .frame_with(&[], hl + payload, &mut out[at..], |o, run| {
                        if o == 0 {
                            header.emit(&mut ddp::Packet::new_unchecked(&mut run[..hl]));
                            region.read(offset, &mut run[hl..]).unwrap();
                        } else {
                            region.read(offset + o - hl, run).unwrap();
                        }
                    })
                    .unwrap();
                step(&mut at, &mut offset, n);
            });
            two.push(t.as_secs_f64() * 1e9 / CALLS as f64);
            let t = time(CALLS, &mut || {
                let n = framer
                    .frame_region(black_box(&header), &region, offset, payload, &mut out[at..])
                    .unwrap();
                step(&mut at, &mut offset, n);
            });
            one.push(t.as_secs_f64() * 1e9 / CALLS as f64);
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        results.push((ulpdu, median(&mut two), median(&mut one)));
    }
    results
}

/// For the two transmit paths with CRC and `ref_simd_copy_crc`: the ns a
/// call takes for 4 KiB and 8 KiB ULPDUs, measured in turn in the same
/// rounds (the VM's speed drifts between figures taken apart), split as
/// `fixed + per_512 * octets / 512`: what an FPDU costs whatever its size
/// (set-up, the length field and header, the runs around the markers, the
/// final reduction, the framer's own bookkeeping) and what its octets
/// cost. Returns `(name, fixed ns, ns per 512 octets)`.
fn fixed_and_slope() -> Vec<(&'static str, f64, f64)> {
    const ROUNDS: usize = 41;
    const CALLS: u64 = 4000;
    let sizes = [4096usize, 8192];
    let mut arena = Arena::new(8192);
    let (ulpdu, out) = arena.split();
    let ulpdu = &*ulpdu;
    let names = ["tx_crc", "tx_crc_markers", "ref_simd_copy_crc"];
    // ns[path][size]: one figure per round.
    let mut ns = vec![vec![Vec::new(); 2]; 3];
    for _ in 0..ROUNDS {
        for (z, &size) in sizes.iter().enumerate() {
            let (header, payload) = ulpdu[..size].split_at(HEADER);
            let pieces = [header, payload];
            for (k, markers) in [false, true].into_iter().enumerate() {
                let mut framer = Framer::new(TxConfig {
                    crc: true,
                    markers,
                    emss: EMSS,
                })
                .unwrap();
                let t = time(CALLS, &mut || {
                    black_box(framer.frame(black_box(&pieces), out).unwrap());
                });
                ns[k][z].push(t.as_secs_f64() * 1e9 / CALLS as f64);
            }
            let src = &ulpdu[..size];
            let t = time(CALLS, &mut || {
                black_box(crc::copy_append(0, &mut out[..size], black_box(src)));
            });
            ns[2][z].push(t.as_secs_f64() * 1e9 / CALLS as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    names
        .iter()
        .zip(ns.iter_mut())
        .map(|(name, by_size)| {
            let small = median(&mut by_size[0]);
            let large = median(&mut by_size[1]);
            let per_512 = (large - small) / 8.0;
            (*name, small - 8.0 * per_512, per_512)
        })
        .collect()
}
