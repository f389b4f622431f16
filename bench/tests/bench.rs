//! The benchmark's command line, its files read back, its JSON schema, and
//! a tiny run of every operation in both modes over the embedded rig.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bench::args::{Args, TransportArg};
use bench::report::{self, Report};
use bench::rig::{self, RigConfig};
use bench::workload::{self, memory_for, Mode, Op, Spec, Stop};
use clap::Parser;

fn parse(line: &str) -> Result<Args, String> {
    Args::try_parse_from(line.split_whitespace()).map_err(|e| e.to_string())
}

#[test]
fn perftest_vocabulary_parses() {
    let a =
        parse("bench write -s 65536 -D 5 --compare kernel --json f.json --report_gbits").unwrap();
    let plan = a.plan().unwrap();
    assert_eq!(
        (plan.op, plan.mode, plan.sizes.clone()),
        (Op::Write, Mode::Bandwidth, vec![65536])
    );
    assert_eq!(plan.stop, Stop::Duration(Duration::from_secs(5)));
    assert_eq!(a.compare, Some(TransportArg::Kernel));
    assert!(a.report_gbits && a.json.is_some());
    let a = parse("bench write -s 64 -D 5 --lat --compare kernel --json f.json").unwrap();
    assert_eq!(a.plan().unwrap().mode, Mode::Latency);
    let a = parse("bench read -a -n 10 -q 4 -t 32 --no-crc --markers -p 2000").unwrap();
    let plan = a.plan().unwrap();
    assert_eq!(plan.sizes.first(), Some(&2));
    assert_eq!(plan.sizes.last(), Some(&(8 << 20)));
    assert_eq!(plan.sizes.len(), 23);
    assert_eq!(
        (a.qps, a.depth, a.no_crc, a.markers, a.port),
        (4, 32, true, true, 2000)
    );
    // Defaults as perftest's: 65536 for bandwidth, 2 for latency; atomics 8.
    assert_eq!(parse("bench send").unwrap().plan().unwrap().sizes, [65536]);
    assert_eq!(
        parse("bench send --lat").unwrap().plan().unwrap().sizes,
        [2]
    );
    assert_eq!(
        parse("bench fetch_add --lat")
            .unwrap()
            .plan()
            .unwrap()
            .sizes,
        [8]
    );
    for op in [
        "write",
        "read",
        "send",
        "write_imm",
        "fetch_add",
        "cmp_swap",
    ] {
        assert!(parse(&format!("bench {op}")).is_ok(), "{op}");
    }
}

#[test]
fn bad_arguments_say_what_to_fix() {
    let bad = [
        ("bench write -s 0", "-s 0"),
        ("bench write -s 9999999999", "sizes go from 1"),
        ("bench write -n 0", "-n 0"),
        ("bench write -D 0", "-D 0"),
        ("bench write -D 99999", "-D 99999"),
        ("bench write -q 0", "-q 0"),
        ("bench write -t 100000", "-t 100000"),
        ("bench write --lat -q 2", "one queue pair"),
        ("bench fetch_add -s 64", "moves 8 octets"),
        ("bench write -a -s 64", "drop -s"),
        ("bench write --compare embedded", "--compare"),
        ("bench write --mtu 100", "--mtu 100"),
        ("bench write --lat -s 1", "-s 2"),
    ];
    for (line, want) in bad {
        let err = match parse(line) {
            Ok(args) => args.plan().expect_err(line),
            Err(e) => e,
        };
        assert!(err.contains(want), "{line}: {err}");
        assert!(
            !err.contains('\n') || err.starts_with("error:"),
            "{line}: one line: {err}"
        );
    }
    // clap's own errors: an unknown operation, -n with -D.
    assert!(parse("bench frobnicate")
        .unwrap_err()
        .contains("frobnicate"));
    assert!(parse("bench write -n 5 -D 5").is_err());
}

fn tiny(op: Op, mode: Mode) -> Report {
    let size = if op.is_atomic() { 8 } else { 1024 };
    let config = RigConfig {
        crc: true,
        markers: false,
        mtu: 9000,
        qps: 1,
        memory: memory_for(1, size),
        port: 7000,
        sw_checksums: true,
    };
    let mut rig = rig::embedded(&config).unwrap();
    let spec = Spec {
        op,
        mode,
        size,
        stop: Stop::Iterations(200),
        depth: 16,
    };
    let measured = workload::run(&mut rig, &spec, &AtomicBool::new(false), &mut |_| {}).unwrap();
    Report {
        op,
        mode,
        size,
        transport: "embedded",
        measured,
    }
}

#[test]
fn every_operation_runs_in_both_modes() {
    for op in Op::ALL {
        for mode in [Mode::Bandwidth, Mode::Latency] {
            let r = tiny(op, mode);
            let m = &r.measured;
            assert_eq!(m.messages, 200, "{op:?} {mode:?}");
            assert_eq!(m.octets, 200 * r.size as u64);
            assert!(!m.interrupted);
            assert_eq!(
                m.latency.len(),
                200,
                "{op:?} {mode:?}: one latency per message"
            );
            assert!(r.gbit_s() > 0.0 && r.msgs_s() > 0.0);
            assert!(m.latency.min() > 0);
        }
    }
}

#[test]
fn the_histogram_files_read_back() {
    let r = tiny(Op::Write, Mode::Latency);
    let h = &r.measured.latency;
    let rows = report::parse_hgrm(&report::hgrm(h)).unwrap();
    assert!(rows.len() > 10);
    // Percentiles and values rise; the last line is 100% with every count.
    for pair in rows.windows(2) {
        assert!(pair[0].1 <= pair[1].1 && pair[0].0 <= pair[1].0, "{pair:?}");
    }
    let last = rows.last().unwrap();
    assert_eq!((last.1, last.2), (1.0, h.len()));
    assert!((last.0 - h.max() as f64 / 1000.0).abs() < 0.01 * last.0.max(1.0));
    // The interval log is HdrHistogram's: its reader gets the counts back.
    let dir = std::env::temp_dir().join(format!("dpwarp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("x.hlog");
    report::write_interval_log(&path, &r.measured.intervals).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let mut total = 0;
    let mut deserializer = hdrhistogram::serialization::Deserializer::new();
    for entry in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&bytes) {
        if let Ok(hdrhistogram::serialization::interval_log::LogEntry::Interval(i)) = entry {
            let decoded = base64_decode(i.encoded_histogram());
            let hist: hdrhistogram::Histogram<u64> =
                deserializer.deserialize(&mut &decoded[..]).unwrap();
            total += hist.len();
        }
    }
    assert_eq!(total, h.len(), "every sample is in the interval log");
    // The plot is SVG with one line per series.
    let svg = report::svg("t", &[("embedded", h)]);
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Standard base64, as the interval log stores histograms.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &c)| {
            acc | (u32::from(value(c)) << (18 - 6 * i))
        });
        out.push((n >> 16) as u8);
        if chunk.len() > 2 {
            out.push((n >> 8) as u8);
        }
        if chunk.len() > 3 {
            out.push(n as u8);
        }
    }
    out
}

#[test]
fn the_json_report_has_the_documented_fields() {
    let r = tiny(Op::Read, Mode::Latency);
    let v = r.json();
    for (field, kind) in [
        ("operation", "string"),
        ("mode", "string"),
        ("size", "number"),
        ("transport", "string"),
        ("iterations", "number"),
        ("seconds", "number"),
        ("gbit_s", "number"),
        ("msgs_per_s", "number"),
        ("cpu_ns_per_msg", "number"),
        ("interrupted", "bool"),
    ] {
        let f = &v[field];
        let ok = match kind {
            "string" => f.is_string(),
            "number" => f.is_number(),
            _ => f.is_boolean(),
        };
        assert!(ok, "{field} is a {kind}: {f}");
    }
    assert_eq!(v["operation"], "read");
    assert_eq!(v["mode"], "latency");
    for p in ["min", "p50", "p90", "p99", "p99_9", "p99_99", "max", "mean"] {
        assert!(v["latency_ns"][p].is_number(), "latency_ns.{p}");
    }
    assert!(v["latency_ns"]["p50"].as_u64().unwrap() <= v["latency_ns"]["p99"].as_u64().unwrap());
}
