//! `--cores`: the same workload on K pinned poll-mode cores at once. Core
//! k runs both ends of its own connections (a client RNIC core and a
//! server RNIC core, turned in turn on its thread). Over DPDK the two
//! hosts are one memif (or net_ring) pair with a queue pair per core: core
//! k's stacks are queue k of each port, steered (`dataplane::steer`: its
//! active opens pick source ports that hash to it, and the peer's core k
//! owns them too), with their own mbuf pools, TCP stacks, engines, queue
//! pairs and memory; over the in-memory link each core has a link of its
//! own. Nothing the cores write on the hot path is shared, so what one core
//! moves does not depend on how many others run: the scaling from 1 to 2
//! cores here is the argument for N (see each core's busy share and
//! counters).
//!
//! The -q queue pairs of the run are spread over the cores (core k gets
//! every K-th); all cores start each size together (a barrier) and run it
//! for the same -D or -n. The aggregate is every core's octets over the
//! longest core's time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use dataplane::CoreTransport;

use crate::endpoint::Host;
use crate::link::LinkArgs;
use crate::report::Report;
use crate::rig::{self, CoreReport, Rig, RigConfig, Share};
use crate::spec::{memory_for, Measured, Op, Spec};
use crate::workload;

/// Which link joins each core's two RNICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreLink {
    /// DPDK memif (a pair of ports per core, one socket each).
    Memif,
    /// DPDK net_ring.
    Ring,
    /// The in-memory link.
    Embedded,
}

impl CoreLink {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            CoreLink::Memif => "memif",
            CoreLink::Ring => "ring",
            CoreLink::Embedded => "embedded",
        }
    }
}

/// Held while a core opens or closes its DPDK ports.
fn control_path() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one core did at one size.
struct CoreRun {
    measured: Measured,
    reports: Vec<CoreReport>,
}

/// The queue pairs core `k` of `cores` runs of `qps`.
pub fn qps_of(qps: usize, cores: usize, k: usize) -> usize {
    qps / cores + usize::from(k < qps % cores)
}

/// Runs `spec`'s workload at every size of `sizes` on each count of cores
/// in `counts` in turn, core k pinned to `cpus[k]`. Returns one report per
/// count and size: the aggregate, with every core's counters and share.
///
/// Every core's rig (its queues, pools, RNICs) is made once, before the
/// first count, and closed after the last: a core not in the current count
/// waits (blocked, not polling) with its connections closed. DPDK 22.11's
/// memif crashed on EAL's interrupt thread when pairs were made after
/// others had closed in the same process (1 run in 3 here), so no port is
/// made after one closed.
#[allow(clippy::too_many_arguments)]
pub fn run(
    config: &RigConfig,
    link: &LinkArgs,
    kind: CoreLink,
    counts: &[usize],
    cpus: &[usize],
    spec: &Spec,
    sizes: &[usize],
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let most = counts.iter().copied().max().unwrap_or(1);
    if counts.contains(&0) || most > cpus.len() {
        return Err(format!("{counts:?} cores on {} CPUs", cpus.len()));
    }
    let eal = match kind {
        CoreLink::Memif | CoreLink::Ring => {
            Some(dataplane::ports::start_eal(link.hugepages(), &[])?.0)
        }
        CoreLink::Embedded => None,
    };
    let largest = sizes.iter().copied().max().unwrap_or(spec.size);
    // Every core meets the others once when its rig is up, then before each
    // (count, size) step.
    let steps = counts.len() * sizes.len();
    let barrier = Barrier::new(most);
    let failed = AtomicBool::new(false);
    // Memory for the most QPs a core runs in any count (core 0's).
    let qps_max = |k: usize| {
        counts
            .iter()
            .filter(|&&c| k < c)
            .map(|&c| qps_of(spec.qps, c, k))
            .max()
            .unwrap_or(1)
    };
    // DPDK: one port pair with a queue pair per core, and a rig per core on
    // it, made here (DPDK's control path on one thread) and moved to the
    // cores.
    let mut dpdk_rigs = match kind {
        CoreLink::Memif | CoreLink::Ring => {
            let config = RigConfig {
                memory: memory_for(qps_max(0), largest),
                ..config.clone()
            };
            let cores = u16::try_from(most).map_err(|_| "too many cores".to_string())?;
            let _one = control_path();
            rig::dpdk_pair_cores(&config, link, kind == CoreLink::Memif, cores)?
        }
        CoreLink::Embedded => Vec::new(),
    }
    .into_iter();
    // The in-memory link: a link per core, made on its core's thread; the
    // two hosts (a control-plane thread and a registry each) shared.
    let cores = u16::try_from(most).map_err(|_| "too many cores".to_string())?;
    let hosts = (kind == CoreLink::Embedded).then(|| (Host::new(cores, 1), Host::new(cores, 2)));
    let results: Vec<Result<Vec<Option<CoreRun>>, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..most)
            .map(|k| {
                let (barrier, failed) = (&barrier, &failed);
                let cpu = cpus[k];
                let plan = Plan {
                    k,
                    cpu,
                    spec: *spec,
                    counts,
                    sizes,
                };
                let dpdk_rig = dpdk_rigs.next();
                let hosts = hosts.as_ref();
                let config = RigConfig {
                    memory: memory_for(qps_max(k), largest),
                    ..config.clone()
                };
                scope.spawn(move || {
                    let mut met = 0;
                    let on_core = |met: &mut usize| -> Result<Vec<Option<CoreRun>>, String> {
                        let _pinned = dataplane::lcore::enter(Some(cpu), eal)?;
                        match dpdk_rig {
                            Some(mut rig) => {
                                let result = drive(&mut rig, &plan, barrier, failed, stop, met);
                                if kind == CoreLink::Memif {
                                    // Quiet before the close (see MEMIF_QUIET).
                                    std::thread::sleep(crate::link::MEMIF_QUIET);
                                }
                                let _one = control_path();
                                drop(rig);
                                result
                            }
                            None => {
                                let hosts = hosts.ok_or("no link for this core")?;
                                let mut rig = rig::embedded_on(hosts, k as u16, &config)?;
                                drive(&mut rig, &plan, barrier, failed, stop, met)
                            }
                        }
                    };
                    let result = on_core(&mut met);
                    if result.is_err() {
                        failed.store(true, Ordering::SeqCst);
                        // Meet the others at the barriers still ahead, so
                        // that they see the failure and stop.
                        for _ in met..=steps {
                            barrier.wait();
                        }
                    }
                    result
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err("a core's thread panicked".into()))
            })
            .collect()
    });
    let mut per_core = Vec::with_capacity(most);
    for (k, result) in results.into_iter().enumerate() {
        per_core.push(result.map_err(|why| format!("core {k} (CPU {}): {why}", cpus[k]))?);
    }
    let mut out = Vec::new();
    for (c, &count) in counts.iter().enumerate() {
        for (i, &size) in sizes.iter().enumerate() {
            let step = c * sizes.len() + i;
            let runs: Vec<&CoreRun> = per_core[..count]
                .iter()
                .filter_map(|r| r.get(step).and_then(Option::as_ref))
                .collect();
            if runs.len() < count {
                return Ok(out);
            }
            out.push(Report {
                op: spec.op,
                mode: spec.mode,
                size,
                transport: kind.name(),
                cores: count,
                per_core: runs.iter().flat_map(|r| r.reports.clone()).collect(),
                measured: aggregate(&runs),
            });
        }
    }
    Ok(out)
}

/// What one core's thread runs.
struct Plan<'a> {
    k: usize,
    cpu: usize,
    spec: Spec,
    counts: &'a [usize],
    sizes: &'a [usize],
}

/// Every (count, size) step on one core's rig, each started with the other
/// cores; `None` for the steps of counts this core is not in. `met` counts
/// the barriers passed.
fn drive<C: CoreTransport, S: CoreTransport>(
    rig: &mut Rig<C, S>,
    plan: &Plan<'_>,
    barrier: &Barrier,
    failed: &AtomicBool,
    stop: &AtomicBool,
    met: &mut usize,
) -> Result<Vec<Option<CoreRun>>, String> {
    let mut out = Vec::new();
    // Every core's rig is up.
    barrier.wait();
    *met += 1;
    for &count in plan.counts {
        for (i, &size) in plan.sizes.iter().enumerate() {
            barrier.wait();
            *met += 1;
            if failed.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
                return Ok(out);
            }
            if plan.k >= count {
                out.push(None);
                continue;
            }
            let spec = Spec {
                size,
                qps: qps_of(plan.spec.qps, count, plan.k),
                ..plan.spec
            };
            // A turn first, so the wait at the barrier is not counted as
            // the last turn's time.
            rig.step()?;
            let before = rig.core_reports();
            let last = i + 1 == plan.sizes.len();
            let measured = workload::run(rig, &spec, last, stop, &mut |_| {})?;
            let share = Share {
                messages: measured.messages,
                octets: measured.octets,
                seconds: measured.elapsed.as_secs_f64(),
            };
            let reports = rig
                .core_reports()
                .into_iter()
                .zip(&before)
                .map(|(after, before)| CoreReport {
                    counters: after.counters.since(&before.counters),
                    cpu: Some(plan.cpu),
                    // The core's share goes with its client (the side that
                    // counts messages).
                    share: (after.role == "client").then_some(share),
                    ..after
                })
                .collect();
            out.push(Some(CoreRun { measured, reports }));
        }
    }
    Ok(out)
}

/// The cores' results as one: every message and octet, over the longest
/// core's time (a core that finished early does not flatter the total).
fn aggregate(runs: &[&CoreRun]) -> Measured {
    let mut latency = runs[0].measured.latency.clone();
    for r in &runs[1..] {
        // Histograms of one configuration: adding cannot fail.
        let _ = latency.add(&r.measured.latency);
    }
    Measured {
        messages: runs.iter().map(|r| r.measured.messages).sum(),
        octets: runs.iter().map(|r| r.measured.octets).sum(),
        elapsed: runs
            .iter()
            .map(|r| r.measured.elapsed)
            .max()
            .unwrap_or(Duration::ZERO),
        // Each core measured the whole process's CPU time over its run.
        cpu: runs
            .iter()
            .map(|r| r.measured.cpu)
            .max()
            .unwrap_or(Duration::ZERO),
        latency,
        intervals: Vec::new(),
        interrupted: runs.iter().any(|r| r.measured.interrupted),
    }
}

/// The per-core rows of one report, for the table.
pub fn core_rows(report: &Report, report_gbits: bool) -> Vec<String> {
    let mut rows = Vec::new();
    let mut k = 0;
    for c in &report.per_core {
        let Some(share) = c.share else { continue };
        let busy = |role: &str| {
            report
                .per_core
                .iter()
                .filter(|r| r.cpu == c.cpu && r.role == role)
                .map(|r| {
                    let t = &r.counters;
                    t.busy_us as f64 / (t.busy_us + t.idle_us).max(1) as f64
                })
                .next()
                .unwrap_or(0.0)
        };
        let bw = if report_gbits {
            format!("{:.2} Gbit/s", share.gbit_s())
        } else {
            format!(
                "{:.2} MB/s",
                share.octets as f64 / share.seconds.max(1e-9) / 1e6
            )
        };
        // TCP frames that reached this core's queues but belonged to
        // another core (0 when both ends steer alike).
        let misplaced: u64 = report
            .per_core
            .iter()
            .filter(|r| r.cpu == c.cpu)
            .map(|r| r.counters.device.rx_steered_out)
            .sum();
        rows.push(format!(
            "   core {k} (CPU {}): {bw}, {:.3} Mmsg/s, {} messages; turns busy: client {:.0}%, \
             server {:.0}%; frames at the wrong core: {misplaced}",
            c.cpu.map_or("-".into(), |c| c.to_string()),
            share.msgs_s() / 1e6,
            share.messages,
            busy("client") * 100.0,
            busy("server") * 100.0,
        ));
        k += 1;
    }
    rows
}

/// "2 cores: 1.93x the bandwidth of 1 core" lines, per size, for every
/// count against the first.
pub fn scaling(reports: &[Report]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(first) = reports.first().map(|r| r.cores) else {
        return out;
    };
    for r in reports.iter().filter(|r| r.cores != first) {
        if let Some(base) = reports
            .iter()
            .find(|b| b.cores == first && b.size == r.size)
        {
            let atomics = matches!(r.op, Op::FetchAdd | Op::CmpSwap);
            out.push(format!(
                " {} B: {} cores / {first} = {:.2}x the {}, {:.2}x the message rate",
                r.size,
                r.cores,
                r.gbit_s() / base.gbit_s().max(1e-12),
                if atomics { "octets" } else { "bandwidth" },
                r.msgs_s() / base.msgs_s().max(1e-12),
            ));
        }
    }
    out
}
