//! Results: perftest-style tables, HdrHistogram's percentile-distribution
//! file (`.hgrm`) and interval log, an SVG latency plot, and the JSON report.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::rig::CoreReport;
use crate::spec::{Measured, Mode, Op};

/// One measured workload, as reported.
pub struct Report {
    /// The operation.
    pub op: Op,
    /// Bandwidth or latency.
    pub mode: Mode,
    /// Message size.
    pub size: usize,
    /// `embedded`, `kernel`, `memif`, ...
    pub transport: &'static str,
    /// The lower layer under DDP: `mpa` or `sctp`.
    pub llp: &'static str,
    /// Cores the RNICs of this process ran on (1: one thread stepped both).
    pub cores: usize,
    /// Each core's counters over this workload.
    pub per_core: Vec<CoreReport>,
    /// What was measured.
    pub measured: Measured,
}

/// The percentiles every latency table and report shows.
pub const PERCENTILES: [(&str, f64); 5] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99_9", 99.9),
    ("p99_99", 99.99),
];

impl Report {
    /// Goodput in Gbit/s (10^9 bits of payload per second).
    pub fn gbit_s(&self) -> f64 {
        self.measured.octets as f64 * 8.0 / self.measured.elapsed.as_secs_f64().max(1e-9) / 1e9
    }

    /// Messages per second.
    pub fn msgs_s(&self) -> f64 {
        self.measured.messages as f64 / self.measured.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU time per message, both RNICs together, in ns.
    pub fn cpu_ns_per_msg(&self) -> f64 {
        self.measured.cpu.as_nanos() as f64 / (self.measured.messages.max(1)) as f64
    }

    /// The run's name in tables and file names: its transport, and `/sctp`
    /// after it over DDP over SCTP (`embedded/sctp`).
    pub fn label(&self) -> String {
        if self.llp == "mpa" {
            self.transport.to_string()
        } else {
            format!("{}/{}", self.transport, self.llp)
        }
    }

    /// File names start with this: `write_lat_64B_embedded`
    /// (`..._embedded_sctp` over SCTP).
    pub fn stem(&self) -> String {
        let mode = match self.mode {
            Mode::Bandwidth => "bw",
            Mode::Latency => "lat",
        };
        format!(
            "{}_{}_{}B_{}",
            self.op.name(),
            mode,
            self.size,
            self.label().replace('/', "_")
        )
    }

    /// The JSON object of this result (documented in the README).
    pub fn json(&self) -> Value {
        let h = &self.measured.latency;
        let mut latency = serde_json::Map::new();
        latency.insert("min".into(), json!(h.min()));
        for (name, p) in PERCENTILES {
            latency.insert(name.into(), json!(h.value_at_percentile(p)));
        }
        latency.insert("max".into(), json!(h.max()));
        latency.insert("mean".into(), json!(h.mean()));
        json!({
            "operation": self.op.name(),
            "mode": match self.mode { Mode::Bandwidth => "bandwidth", Mode::Latency => "latency" },
            "size": self.size,
            "transport": self.transport,
            "llp": self.llp,
            "cores": self.cores,
            "per_core": self.per_core.iter().map(core_json).collect::<Vec<_>>(),
            "iterations": self.measured.messages,
            "seconds": self.measured.elapsed.as_secs_f64(),
            "gbit_s": self.gbit_s(),
            "msgs_per_s": self.msgs_s(),
            "cpu_ns_per_msg": self.cpu_ns_per_msg(),
            "latency_ns": Value::Object(latency),
            "interrupted": self.measured.interrupted,
            "beside_messages": self.measured.beside,
        })
    }
}

/// One core's counters in the JSON report.
/// Checks before a run that `--json PATH` can be written, saying what to
/// fix: an unwritable path was found only after the whole run (found by a
/// review). A file that did not exist is not left behind.
pub fn check_json_output(path: &Path) -> Result<(), String> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("--json {}: {e}: give a file to write", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

fn core_json(c: &CoreReport) -> Value {
    let k = &c.counters;
    let d = &k.device;
    let mut out = json!({
        "role": c.role,
        "cpu": c.cpu,
        "turns": k.turns,
        "busy_turns": k.busy_turns,
        "idle_turns": k.idle_turns,
        "busy_us": k.busy_us,
        "idle_us": k.idle_us,
        "busy_share": k.busy_us as f64 / (k.busy_us + k.idle_us).max(1) as f64,
        "tx_fpdu_octets": k.tx_fpdu_octets,
        "rx_fpdu_octets": k.rx_fpdu_octets,
        "rx_direct_octets": k.rx_direct_octets,
        "looked_at": k.looked_at,
        "polls_between_looks": k.polls_between_looks,
        "rx_packets": d.rx_packets,
        "tx_packets": d.tx_packets,
        "rx_bursts": d.rx_bursts,
        "tx_bursts": d.tx_bursts,
        "rx_dropped": d.rx_dropped(),
        "rx_bad_checksum": d.rx_bad_checksum,
        "tx_backpressure": d.tx_backpressure,
        "pool_low_water": d.pool_low_water,
        "rx_steered_out": d.rx_steered_out,
        "rx_steered_in": d.rx_steered_in,
        "rx_arp_shared": d.rx_arp_shared,
        "rx_steer_dropped": d.rx_steer_dropped,
        "rx_arp_share_failed": d.rx_arp_share_failed,
    });
    if let (Some(share), Some(map)) = (&c.share, out.as_object_mut()) {
        map.insert("messages".into(), json!(share.messages));
        map.insert("octets".into(), json!(share.octets));
        map.insert("seconds".into(), json!(share.seconds));
        map.insert("gbit_s".into(), json!(share.gbit_s()));
        map.insert("msgs_per_s".into(), json!(share.msgs_s()));
    }
    out
}

/// The bandwidth table's header, perftest's columns plus CPU per message.
pub fn bw_header(report_gbits: bool) -> String {
    let unit = if report_gbits { "Gb/sec" } else { "MB/sec" };
    format!(
        " {:<12} {:<5} {:<12} {:<10} {:>14} {:>14} {:>14} {:>12}",
        "transport",
        "cores",
        "#bytes",
        "#iterations",
        format!("BW average[{unit}]"),
        "MsgRate[Mpps]",
        "CPU/msg[ns]",
        ""
    )
}

/// Octets in perftest's MB (its `BW average[MB/sec]`, `format_factor`).
pub const MB: f64 = 1_048_576.0;

/// One row of the bandwidth table.
pub fn bw_row(r: &Report, report_gbits: bool) -> String {
    let bw = if report_gbits {
        r.gbit_s()
    } else {
        // perftest's MB: 2^20 octets (found by a review: 10^6 printed
        // 4.9% more than ib_write_bw under its column's name).
        r.measured.octets as f64 / r.measured.elapsed.as_secs_f64().max(1e-9) / MB
    };
    format!(
        " {:<12} {:<5} {:<12} {:<10} {:>14.2} {:>14.6} {:>14.1} {:>12}",
        r.label(),
        r.cores,
        r.size,
        r.measured.messages,
        bw,
        r.msgs_s() / 1e6,
        r.cpu_ns_per_msg(),
        if r.measured.interrupted {
            "(interrupted)"
        } else {
            ""
        }
    )
}

/// The latency table's header: perftest's with the whole HDR percentile set.
pub fn lat_header() -> String {
    format!(
        " {:<12} {:<5} {:<8} {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "transport",
        "cores",
        "#bytes",
        "#iters",
        "t_min[us]",
        "t_p50",
        "t_p90",
        "t_p99",
        "t_p99.9",
        "t_p99.99",
        "t_max",
        "t_avg"
    )
}

/// One row of the latency table.
pub fn lat_row(r: &Report) -> String {
    let h = &r.measured.latency;
    let us = |ns: u64| ns as f64 / 1000.0;
    format!(
        " {:<12} {:<5} {:<8} {:<10} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
        r.label(),
        r.cores,
        r.size,
        r.measured.messages,
        us(h.min()),
        us(h.value_at_percentile(50.0)),
        us(h.value_at_percentile(90.0)),
        us(h.value_at_percentile(99.0)),
        us(h.value_at_percentile(99.9)),
        us(h.value_at_percentile(99.99)),
        us(h.max()),
        h.mean() / 1000.0
    ) + if r.measured.interrupted {
        " (interrupted)"
    } else {
        ""
    }
}

/// HdrHistogram's percentile-distribution format (`outputPercentileDistribution`,
/// 5 ticks per half-distance, values in microseconds), which its plotters read.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let scale = 1000.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in h.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let value = v.value_iterated_to() as f64 / scale;
        if q < 1.0 {
            let _ = writeln!(
                out,
                "{value:12.3} {q:2.12} {total:10} {:14.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(out, "{value:12.3} {q:2.12} {total:10}");
        }
    }
    let _ = writeln!(
        out,
        "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]",
        h.mean() / scale,
        h.stdev() / scale
    );
    let _ = writeln!(
        out,
        "#[Max     = {:12.3}, Total count    = {:12}]",
        h.max() as f64 / scale,
        h.len()
    );
    let sub_buckets = (2 * 10u64.pow(u32::from(h.sigfig()))).next_power_of_two();
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_buckets
    );
    out
}

/// Reads an `.hgrm` back: (value in us, percentile, total count) per line.
pub fn parse_hgrm(text: &str) -> Result<Vec<(f64, f64, u64)>, String> {
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 3 {
            return Err(format!("short line: {line}"));
        }
        let parse = |s: &str| s.parse::<f64>().map_err(|e| format!("{s}: {e}"));
        rows.push((
            parse(cols[0])?,
            parse(cols[1])?,
            cols[2].parse().map_err(|e| format!("{}: {e}", cols[2]))?,
        ));
    }
    Ok(rows)
}

/// A percentile plot (latency against 1/(1-percentile), log scale) in SVG.
pub fn svg(title: &str, series: &[(&str, &Histogram<u64>)]) -> String {
    let (w, h, left, bottom) = (720.0, 420.0, 70.0, 50.0);
    let plot_w = w - left - 20.0;
    let plot_h = h - bottom - 40.0;
    let max_x: f64 = 6.0; // up to 99.9999%
    let max_us = series
        .iter()
        .map(|(_, hist)| hist.value_at_percentile(99.9999) as f64 / 1000.0)
        .fold(0.001, f64::max)
        * 1.1;
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        w / 2.0,
        escape(title)
    );
    for (i, label) in ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"]
        .iter()
        .enumerate()
    {
        let x = left + plot_w * i as f64 / max_x;
        let _ = writeln!(
            out,
            r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"##,
            40.0,
            40.0 + plot_h,
            h - bottom + 18.0
        );
    }
    for i in 0..=4 {
        let y = 40.0 + plot_h * (1.0 - i as f64 / 4.0);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{:.2}</text>"##,
            left + plot_w,
            left - 6.0,
            y + 4.0,
            max_us * i as f64 / 4.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">percentile</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">latency (us)</text>"#,
        left + plot_w / 2.0,
        h - 10.0,
        40.0 + plot_h / 2.0,
        40.0 + plot_h / 2.0
    );
    for (n, (name, hist)) in series.iter().enumerate() {
        let mut points = String::new();
        for v in hist.iter_quantiles(5) {
            let q = v.quantile_iterated_to().min(0.999999);
            let x = left + plot_w * (-(1.0 - q).log10()).min(max_x) / max_x;
            let y = 40.0 + plot_h * (1.0 - (v.value_iterated_to() as f64 / 1000.0) / max_us);
            let _ = write!(points, "{x:.1},{y:.1} ");
        }
        let color = colors[n % colors.len()];
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>"#
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" fill="{color}">{}</text>"#,
            left + 10.0,
            56.0 + 16.0 * n as f64,
            escape(name)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// HdrHistogram's interval log (`.hlog`): one histogram per second of the
/// run (`intervals`, each with its start), readable by its log processors.
/// Each interval's length is the time to the next one's start, and the
/// last's to `elapsed`, the run's end (found by a review: every interval
/// said 1 s, a run's last and partial one too, so a rate taken from the
/// log understated it). Its maximum is in microseconds, as the `.hgrm`'s.
pub fn write_interval_log(
    path: &Path,
    intervals: &[(Duration, Histogram<u64>)],
    elapsed: Duration,
) -> Result<(), String> {
    let mut file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut serializer = V2Serializer::new();
    let mut buffer = Vec::new();
    {
        let mut log = IntervalLogWriterBuilder::new()
            .with_base_time(std::time::SystemTime::UNIX_EPOCH)
            .with_max_value_divisor(1000.0)
            .begin_log_with(&mut buffer, &mut serializer)
            .map_err(|e| format!("{e:?}"))?;
        for (k, (start, hist)) in intervals.iter().enumerate() {
            let end = intervals.get(k + 1).map_or(elapsed, |(next, _)| *next);
            let length = end.saturating_sub(*start);
            log.write_histogram(hist, *start, length, Tag::new("latency"))
                .map_err(|e| format!("{e:?}"))?;
        }
    }
    file.write_all(&buffer)
        .map_err(|e| format!("{}: {e}", path.display()))
}
