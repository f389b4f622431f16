//! CRC32c throughput: every kernel this CPU supports, `append` and
//! `copy_append`, next to the `crc32c` crate and a plain `copy_from_slice`
//! on the same buffers; then FPDUs fed in pieces to [`Crc32c`], against one
//! call over the same octets.
//!
//! ```text
//! cargo run --release -p rnic-engine --example crc_speed            # both
//! cargo run --release -p rnic-engine --example crc_speed -- 4096    # sizes
//! cargo run --release -p rnic-engine --example crc_speed -- pieces  # pieces only
//! ```
//!
//! GB/s are 10^9 octets per second. Each cell is the median of [`RUNS`]
//! timed runs of about [`RUN_TIME`] each, after a warm-up that also picks
//! the number of calls per run. Buffers start on a 64-octet boundary
//! (cache line); a last table repeats 4 KiB with the source one octet and
//! the destination three octets past it. Calls are independent (the result
//! of one is not the next one's input), as FPDUs of a burst are. The whole
//! run takes a few seconds; another busy process on the same core lowers
//! some runs, which the median discounts.
//!
//! The pieces table (best kernel) feeds one FPDU's CRC'd octets to
//! [`Crc32c`] the way the framer and deframer get them, next to one call
//! over as many octets and to one `append`/`copy_append` per piece (the
//! framer's and deframer's way before `Crc32c`, rows marked "today"):
//!
//! * (a) one `copy_append` over a 4082-octet payload, the reference;
//! * (b) 2 + 14 octets (`update`), the payload (`copy_update`), 2 of PAD;
//! * (c) with markers: a first run of 200 octets, then a marker (4 octets,
//!   `update`) and 508 octets (`copy_update`) in turn, 4096 + 32 in all;
//!   (c1) copies the runs and markers first and CRCs the result in one
//!   `append`, two passes (the framer's way with markers before `Crc32c`);
//! * (d) the same in place (`update` only), as the receive side does, next
//!   to (d1), one `append` over those octets;
//! * (e) a 64-octet FPDU as 2 + 14 + 48 octets, in calls per second, next
//!   to (e1), one `copy_append` over 64.
//!
//! GB/s count the octets each row's CRC covers. The table is measured
//! differently from the others, because its point is a ratio and this
//! machine's speed drifts by tens of percent from one minute to the next:
//! every variant runs for about [`ROUND_TIME`] in turn, round after round
//! ([`ROUNDS`] rounds, the order rotating), and each ratio is the median
//! over rounds of the ratio within one round, so drift that spans a round
//! cancels.

use std::hint::black_box;
use std::time::Duration;

use rnic_engine::mpa::crc::{self, Crc32c, Kernel};

#[path = "common/measure.rs"]
mod measure;
use measure::{load, median_rate, size_name, time, RUNS};

const SIZES: [usize; 5] = [64, 512, 1460, 4096, 65536];
const ALIGN: usize = 64;

/// Rounds of the pieces table.
const ROUNDS: usize = 151;
/// Time one variant of the pieces table runs in one round.
const ROUND_TIME: Duration = Duration::from_micros(500);

fn main() {
    // Sizes on the command line replace the default ones; `pieces` runs
    // the pieces table alone.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let pieces_only = args.iter().any(|a| a == "pieces");
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        SIZES.to_vec()
    } else {
        sizes
    };
    println!("best kernel: {:?}; {}", crc::kernel(), load());
    if !pieces_only {
        println!();
        println!("CRC32c throughput, GB/s (10^9 octets/s), median of {RUNS} runs");
        println!();
        table(0, 0, &sizes);
        println!();
        println!("4 KiB, source and destination this many octets past a 64-octet boundary:");
        for (src_offset, dst_offset) in [(1, 0), (0, 1), (1, 3)] {
            println!("src +{src_offset}, dst +{dst_offset}");
            table(src_offset, dst_offset, &[4096]);
        }
    }
    println!();
    pieces_table(crc::kernel());
    println!();
    println!("after the run: {}", load());
}

/// One row per function, one column per size; `src_offset` and
/// `dst_offset` octets past a 64-octet boundary.
fn table(src_offset: usize, dst_offset: usize, sizes: &[usize]) {
    print!("{:<26}", "");
    for size in sizes {
        print!("{:>10}", size_name(*size));
    }
    println!();
    let mut rows: Vec<(String, Row)> = Vec::new();
    for kernel in Kernel::ALL.into_iter().filter(|&k| crc::supported(k)) {
        rows.push((format!("{kernel:?} append"), Row::Append(kernel)));
        rows.push((format!("{kernel:?} copy_append"), Row::CopyAppend(kernel)));
    }
    rows.push(("crc32c crate".to_string(), Row::Crate));
    rows.push(("memcpy (copy_from_slice)".to_string(), Row::Memcpy));
    let len_max = sizes.iter().copied().max().unwrap_or(0);
    let mut src_storage = vec![0u8; len_max + 2 * ALIGN];
    for (i, octet) in src_storage.iter_mut().enumerate() {
        *octet = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3];
    }
    let mut dst_storage = vec![0u8; len_max + 2 * ALIGN];
    let src_start = src_storage.as_ptr().align_offset(ALIGN) + src_offset;
    let dst_start = dst_storage.as_ptr().align_offset(ALIGN) + dst_offset;
    for (name, row) in &rows {
        print!("{name:<26}");
        for &size in sizes {
            let src = &src_storage[src_start..src_start + size];
            let dst = &mut dst_storage[dst_start..dst_start + size];
            print!("{:>10.1}", row.measure(src, dst));
        }
        println!();
    }
}

#[derive(Clone, Copy)]
enum Row {
    Append(Kernel),
    CopyAppend(Kernel),
    Crate,
    Memcpy,
}

impl Row {
    /// GB/s of this row's function on `src` (and `dst`).
    fn measure(self, src: &[u8], dst: &mut [u8]) -> f64 {
        match self {
            Row::Append(kernel) => median_rate(src.len(), || {
                black_box(crc::append_with(kernel, black_box(0), black_box(src)));
            }),
            Row::CopyAppend(kernel) => median_rate(src.len(), || {
                let dst = black_box(&mut *dst);
                black_box(crc::copy_append_with(
                    kernel,
                    black_box(0),
                    dst,
                    black_box(src),
                ));
            }),
            Row::Crate => median_rate(src.len(), || {
                black_box(crc32c::crc32c_append(black_box(0), black_box(src)));
            }),
            Row::Memcpy => median_rate(src.len(), || {
                black_box(&mut *dst).copy_from_slice(black_box(src));
            }),
        }
    }
}

// --- Fed in pieces -----------------------------------------------------------

/// A 4 KiB FPDU without markers: ULPDU_Length, a tagged DDP header, the
/// payload and PAD, which the CRC covers.
const LENGTH: usize = 2;
const HEADER: usize = 14;
const PAYLOAD: usize = 4082;
const PAD: usize = 2;
const FPDU_COVERED: usize = LENGTH + HEADER + PAYLOAD + PAD;
/// The same FPDU's CRC'd octets with markers: 4096 and 8 markers.
const MARKED_COVERED: usize = 4096 + 32;
/// The first data run of the marked FPDU (it starts between two markers).
const FIRST_RUN: usize = 200;
/// The 64-octet FPDU: length, header, payload, no PAD.
const SMALL_PAYLOAD: usize = 64 - LENGTH - HEADER;

// FPDUs are multiples of 4 octets; this one is 4 KiB with its CRC.
const _: () = assert!(FPDU_COVERED + 4 == 4104 && FPDU_COVERED.is_multiple_of(4));

/// One row of the pieces table: a function over one FPDU, and how many
/// octets its CRC covers. It writes, if at all, to the buffer it is given,
/// the same for every row. With a buffer of its own per row, a row's ratio
/// changed with where the allocator put it (0.68 and 0.95 for (b) in two
/// runs), plausibly because the distance between source and destination
/// decides how often a load shares the low 12 address bits of a store
/// before it, which delays the load.
struct Variant<'a> {
    name: &'static str,
    octets: usize,
    call: Call<'a>,
}

/// A row's function, given the output buffer.
type Call<'a> = Box<dyn FnMut(&mut [u8]) + 'a>;

/// The runs of the marked FPDU's CRC'd octets, in stream order: `(start,
/// length, is_marker)`. A data run of [`FIRST_RUN`] octets, then a marker
/// and up to 508 octets of data in turn.
fn marked_runs() -> Vec<(usize, usize, bool)> {
    let mut runs = vec![(0, FIRST_RUN, false)];
    let mut at = FIRST_RUN;
    while at < MARKED_COVERED {
        runs.push((at, 4, true));
        at += 4;
        let len = 508.min(MARKED_COVERED - at);
        runs.push((at, len, false));
        at += len;
    }
    runs
}

/// Interleaved rounds over the pieces variants with `kernel`; prints GB/s
/// (CRC'd octets) and calls/s, ratios to one call, and the load.
fn pieces_table(kernel: Kernel) {
    let runs = marked_runs();
    let data_octets: usize = runs.iter().filter(|r| !r.2).map(|r| r.1).sum();
    assert_eq!(data_octets, 4096, "the marked FPDU carries 4 KiB of data");
    // Application data: the payload, or the data runs of the marked FPDU.
    let mut data = vec![0u8; 4096 + ALIGN];
    for (i, octet) in data.iter_mut().enumerate() {
        *octet = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3];
    }
    let data_start = data.as_ptr().align_offset(ALIGN);
    let data = &data[data_start..data_start + 4096];
    let payload = &data[..PAYLOAD];
    // The output buffer (an FPDU, 64-octet aligned) of every row; the
    // payload goes after length and header, at +16.
    let mut buffer = vec![0u8; 4096 + 64 + ALIGN];
    let out_start = buffer.as_ptr().align_offset(ALIGN);
    let out = &mut buffer[out_start..out_start + 4096 + 64];
    // The receive side CRCs a marked FPDU where it lies.
    let received: Vec<u8> = (0..MARKED_COVERED + ALIGN).map(|i| (i * 7) as u8).collect();
    let received = &received[received.as_ptr().align_offset(ALIGN)..][..MARKED_COVERED];
    let marker = [0u8, 0, 0x01, 0x2c];
    let mut variants: Vec<Variant> = vec![
        Variant {
            name: "(a) copy_append 4082",
            octets: PAYLOAD,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let payload = black_box(payload);
                let value = crc::copy_append_with(kernel, 0, &mut out[16..16 + PAYLOAD], payload);
                black_box(value);
            }),
        },
        Variant {
            name: "(b) Crc32c 2+14+4082+2",
            octets: FPDU_COVERED,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let payload = black_box(payload);
                let mut crc = Crc32c::with_kernel(kernel, 0);
                crc.update(&out[..LENGTH]);
                crc.update(&out[LENGTH..LENGTH + HEADER]);
                crc.copy_update(&mut out[16..16 + PAYLOAD], payload);
                crc.update(&out[16 + PAYLOAD..FPDU_COVERED]);
                black_box(crc.finish());
            }),
        },
        Variant {
            name: "(b0) per piece today",
            octets: FPDU_COVERED,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let payload = black_box(payload);
                let value = crc::append_short(0, &out[..LENGTH + HEADER]);
                let value =
                    crc::copy_append_with(kernel, value, &mut out[16..16 + PAYLOAD], payload);
                black_box(crc::append_short(value, &[0; PAD]));
            }),
        },
        Variant {
            name: "(c) Crc32c markers, copy",
            octets: MARKED_COVERED,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let mut source = black_box(data);
                let mut crc = Crc32c::with_kernel(kernel, 0);
                for &(at, len, is_marker) in black_box(&runs[..]) {
                    if is_marker {
                        crc.update(&marker);
                    } else {
                        let (run, rest) = source.split_at(len);
                        crc.copy_update(&mut out[at..at + len], run);
                        source = rest;
                    }
                }
                black_box(crc.finish());
            }),
        },
        Variant {
            name: "(c0) per piece today",
            octets: MARKED_COVERED,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let mut source = black_box(data);
                let mut value = 0;
                for &(at, len, is_marker) in black_box(&runs[..]) {
                    if is_marker {
                        value = crc::append_with(kernel, value, &marker);
                    } else {
                        let (run, rest) = source.split_at(len);
                        let to = &mut out[at..at + len];
                        value = crc::copy_append_with(kernel, value, to, run);
                        source = rest;
                    }
                }
                black_box(value);
            }),
        },
        Variant {
            name: "(c1) copy runs, append once",
            octets: MARKED_COVERED,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let mut source = black_box(data);
                for &(at, len, is_marker) in black_box(&runs[..]) {
                    if is_marker {
                        out[at..at + len].copy_from_slice(&marker);
                    } else {
                        let (run, rest) = source.split_at(len);
                        out[at..at + len].copy_from_slice(run);
                        source = rest;
                    }
                }
                black_box(crc::append_with(kernel, 0, &out[..MARKED_COVERED]));
            }),
        },
        Variant {
            name: "(d) Crc32c markers, in place",
            octets: MARKED_COVERED,
            call: Box::new(|_: &mut [u8]| {
                let received = black_box(received);
                let mut crc = Crc32c::with_kernel(kernel, 0);
                for &(at, len, _) in black_box(&runs[..]) {
                    crc.update(&received[at..at + len]);
                }
                black_box(crc.finish());
            }),
        },
        Variant {
            name: "(d0) per piece today",
            octets: MARKED_COVERED,
            call: Box::new(|_: &mut [u8]| {
                let received = black_box(received);
                let mut value = 0;
                for &(at, len, _) in black_box(&runs[..]) {
                    value = crc::append_with(kernel, value, &received[at..at + len]);
                }
                black_box(value);
            }),
        },
        Variant {
            name: "(d1) append 4128 in place",
            octets: MARKED_COVERED,
            call: Box::new(|_: &mut [u8]| {
                black_box(crc::append_with(kernel, 0, black_box(received)));
            }),
        },
        Variant {
            name: "(e) Crc32c 2+14+48",
            octets: 64,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let payload = black_box(&payload[..SMALL_PAYLOAD]);
                let mut crc = Crc32c::with_kernel(kernel, 0);
                crc.update(&out[..LENGTH]);
                crc.update(&out[LENGTH..LENGTH + HEADER]);
                crc.copy_update(&mut out[16..64], payload);
                black_box(crc.finish());
            }),
        },
        Variant {
            name: "(e0) per piece today",
            octets: 64,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let payload = black_box(&payload[..SMALL_PAYLOAD]);
                let value = crc::append_short(0, &out[..LENGTH]);
                let value = crc::append_short(value, &out[LENGTH..LENGTH + HEADER]);
                black_box(crc::copy_append_with(
                    kernel,
                    value,
                    &mut out[16..64],
                    payload,
                ));
            }),
        },
        Variant {
            name: "(e1) copy_append 64",
            octets: 64,
            call: Box::new(|out: &mut [u8]| {
                let out = black_box(out);
                let payload = black_box(&payload[..64]);
                black_box(crc::copy_append_with(kernel, 0, &mut out[..64], payload));
            }),
        },
    ];
    let calls: Vec<u64> = variants
        .iter_mut()
        .map(|v| calibrate(&mut || (v.call)(&mut *out)))
        .collect();
    // rates[v][round]: GB/s of CRC'd octets.
    let mut rates = vec![Vec::with_capacity(ROUNDS); variants.len()];
    for round in 0..ROUNDS {
        for k in 0..variants.len() {
            let v = (round + k) % variants.len();
            let call = &mut variants[v].call;
            let elapsed = time(calls[v], &mut || call(&mut *out));
            let octets = (variants[v].octets as u64 * calls[v]) as f64;
            rates[v].push(octets / elapsed.as_secs_f64() / 1e9);
        }
    }
    println!(
        "{kernel:?}, fed in pieces: median of {ROUNDS} interleaved rounds of {} us a variant",
        ROUND_TIME.as_micros()
    );
    println!("GB/s count the octets each variant's CRC covers; ratios are per round.");
    println!("{:<30}{:>10}{:>12}{:>10}", "", "GB/s", "Mcalls/s", "ratio");
    let by_name = |name: &str| {
        variants
            .iter()
            .position(|v| v.name.starts_with(name))
            .expect("a variant of that name")
    };
    let references = [
        ("(a)", "(a)"),
        ("(b)", "(a)"),
        ("(b0)", "(a)"),
        ("(c)", "(a)"),
        ("(c0)", "(a)"),
        ("(c1)", "(a)"),
        ("(d)", "(d1)"),
        ("(d0)", "(d1)"),
        ("(d1)", "(a)"),
        ("(e)", "(e1)"),
        ("(e0)", "(e1)"),
        ("(e1)", "(e1)"),
    ];
    for (name, reference) in references {
        let (v, r) = (by_name(name), by_name(reference));
        let ratios: Vec<f64> = rates[v].iter().zip(&rates[r]).map(|(a, b)| a / b).collect();
        let rate = median(&rates[v]);
        let calls_per_second = rate * 1e9 / variants[v].octets as f64 / 1e6;
        println!(
            "{:<30}{:>10.1}{:>12.2}{:>10.3}  of {reference}",
            variants[v].name,
            rate,
            calls_per_second,
            median(&ratios)
        );
    }
    // The headline ratios, also against (a) for the receive side.
    let (a, d) = (by_name("(a)"), by_name("(d)"));
    let ratios: Vec<f64> = rates[d].iter().zip(&rates[a]).map(|(x, y)| x / y).collect();
    println!("(d)/(a) {:.3}", median(&ratios));
}

/// Calls of `call` that take about [`ROUND_TIME`], after a warm-up.
fn calibrate(call: &mut impl FnMut()) -> u64 {
    let mut calls = 1u64;
    let mut elapsed = time(calls, call);
    while elapsed < ROUND_TIME {
        calls *= 2;
        elapsed = time(calls, call);
    }
    (calls as f64 * ROUND_TIME.as_secs_f64() / elapsed.as_secs_f64()).ceil() as u64
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}
