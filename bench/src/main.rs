//! `bench`: see `bench --help` and the README's "Benchmark" section.
#![allow(clippy::disallowed_methods)] // A benchmark reads the clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bench::args::{Args, Plan, TransportArg};
use bench::report::{self, Report};
use bench::rig::{self, RigConfig, TransportKind};
use bench::workload::{self, memory_for, Mode, Spec, Stop};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use tcp_lite::Transport;

fn main() {
    let args = Args::parse();
    let plan = match args.plan() {
        Ok(plan) => plan,
        Err(why) => {
            eprintln!("bench: {why}");
            std::process::exit(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        // Ctrl-C ends the current run; the results so far are printed.
        let _ = ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst));
    }
    let mut transports = vec![kind(args.transport)];
    if let Some(c) = args.compare {
        transports.push(kind(c));
    }
    let mut reports: Vec<Report> = Vec::new();
    let shape = match plan.mode {
        Mode::Bandwidth => format!(
            "bandwidth | {} QP(s), {} in flight each",
            args.qps, args.depth
        ),
        Mode::Latency => "latency | 1 QP, 1 in flight".to_string(),
    };
    println!(
        "{} {} | MPA CRC {}, markers {} | MTU {}, TCP/IP checksums {} on the embedded link",
        plan.op.name(),
        shape,
        if args.no_crc { "off" } else { "on" },
        if args.markers { "on" } else { "off" },
        args.mtu,
        if args.sw_checksums {
            "in software"
        } else {
            "offloaded"
        },
    );
    for &transport in &transports {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match run_transport(&args, &plan, transport, &stop) {
            Ok(mut r) => reports.append(&mut r),
            Err(why) => {
                eprintln!("bench: {} transport: {why}", transport.name());
                print_tables(&args, &plan, &reports);
                std::process::exit(1);
            }
        }
    }
    print_tables(&args, &plan, &reports);
    if let Err(why) = write_files(&args, &plan, &reports) {
        eprintln!("bench: {why}");
        std::process::exit(1);
    }
}

fn kind(t: TransportArg) -> TransportKind {
    match t {
        TransportArg::Embedded => TransportKind::Embedded,
        TransportArg::Kernel => TransportKind::Kernel,
    }
}

fn run_transport(
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let largest = *plan.sizes.iter().max().unwrap_or(&8);
    let config = RigConfig {
        crc: !args.no_crc,
        markers: args.markers,
        mtu: args.mtu,
        qps: args.qps,
        memory: memory_for(args.qps, largest),
        port: args
            .port
            .wrapping_add(if transport == TransportKind::Kernel {
                1
            } else {
                0
            }),
        sw_checksums: args.sw_checksums,
    };
    match transport {
        TransportKind::Embedded => sweep(&mut rig::embedded(&config)?, args, plan, transport, stop),
        TransportKind::Kernel => sweep(&mut rig::kernel(&config)?, args, plan, transport, stop),
    }
}

fn sweep<T: Transport>(
    rig: &mut rig::Rig<T>,
    args: &Args,
    plan: &Plan,
    transport: TransportKind,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let mut out = Vec::new();
    for &size in &plan.sizes {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let spec = Spec {
            op: plan.op,
            mode: plan.mode,
            size,
            stop: plan.stop,
            depth: args.depth,
        };
        // A progress bar on runs of a second or more (a hidden one otherwise).
        let bar = match plan.stop {
            Stop::Duration(d) if d.as_secs_f64() >= 1.0 => ProgressBar::new(1000),
            _ if plan.sizes.len() == 1 => ProgressBar::new(1000),
            _ => ProgressBar::hidden(),
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:40}] {percent}% {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("{} {} B", transport.name(), size));
        let started = std::time::Instant::now();
        let measured = workload::run(rig, &spec, stop, &mut |f| {
            if started.elapsed().as_secs_f64() >= 1.0 {
                bar.set_position((f * 1000.0) as u64);
            }
        })?;
        bar.finish_and_clear();
        out.push(Report {
            op: plan.op,
            mode: plan.mode,
            size,
            transport: transport.name(),
            measured,
        });
    }
    Ok(out)
}

fn print_tables(args: &Args, plan: &Plan, reports: &[Report]) {
    if reports.is_empty() {
        return;
    }
    println!();
    match plan.mode {
        Mode::Bandwidth => {
            println!("{}", report::bw_header(args.report_gbits));
            for r in reports {
                println!("{}", report::bw_row(r, args.report_gbits));
            }
        }
        Mode::Latency => {
            println!("{}", report::lat_header());
            for r in reports {
                println!("{}", report::lat_row(r));
            }
        }
    }
    // Same-run comparison: the first transport against the second, per size.
    if args.compare.is_some() {
        let first = reports[0].transport;
        println!();
        for r in reports.iter().filter(|r| r.transport == first) {
            if let Some(base) = reports
                .iter()
                .find(|b| b.transport != first && b.size == r.size)
            {
                match plan.mode {
                    Mode::Bandwidth => println!(
                        " {} B: {} / {} = {:.2}x the bandwidth",
                        r.size,
                        r.transport,
                        base.transport,
                        r.gbit_s() / base.gbit_s().max(1e-12)
                    ),
                    Mode::Latency => {
                        let p =
                            |x: &Report, q: f64| x.measured.latency.value_at_percentile(q) as f64;
                        println!(
                            " {} B: {} is {:.2}x faster at p50, {:.2}x at p99 than {}",
                            r.size,
                            r.transport,
                            p(base, 50.0) / p(r, 50.0).max(1.0),
                            p(base, 99.0) / p(r, 99.0).max(1.0),
                            base.transport
                        );
                    }
                }
            }
        }
    }
}

fn write_files(args: &Args, plan: &Plan, reports: &[Report]) -> Result<(), String> {
    if plan.mode == Mode::Latency && !reports.is_empty() {
        std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
        for r in reports {
            let base = args.out.join(r.stem());
            let hgrm = base.with_extension("hgrm");
            std::fs::write(&hgrm, report::hgrm(&r.measured.latency))
                .map_err(|e| format!("{}: {e}", hgrm.display()))?;
            report::write_interval_log(&base.with_extension("hlog"), &r.measured.intervals)?;
        }
        // One plot per size, every transport on it.
        let mut sizes: Vec<usize> = reports.iter().map(|r| r.size).collect();
        sizes.dedup();
        for size in sizes {
            let series: Vec<_> = reports
                .iter()
                .filter(|r| r.size == size)
                .map(|r| (r.transport, &r.measured.latency))
                .collect();
            let title = format!("{} latency, {} B", plan.op.name(), size);
            let path = args
                .out
                .join(format!("{}_lat_{}B.svg", plan.op.name(), size));
            std::fs::write(&path, report::svg(&title, &series))
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
        println!(
            "\nhistograms (.hgrm), interval logs (.hlog) and plots (.svg) in {}",
            args.out.display()
        );
    }
    if let Some(path) = &args.json {
        let doc =
            serde_json::json!({ "results": reports.iter().map(Report::json).collect::<Vec<_>>() });
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("JSON report: {}", path.display());
    }
    Ok(())
}
