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
//!
//! Under DDP over SCTP (`--llp sctp`) each core's two RNICs are SCTP
//! endpoints (`crate::sctp`) on its own link or queue pair, the same way:
//! core k's association and its streams are core k's alone (its datagrams
//! stay on the queue they arrive on), and each host's control plane runs
//! every core's session establishment (RFC 5043 §6, RFC 6581 §7).

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use dataplane::{CoreTransport, MessageTransport};

use crate::args::LlpArg;
use crate::link::{LinkArgs, PeerTransport};
use crate::report::Report;
use crate::rig::{self, BenchRig, CoreReport, Rig, RigConfig, Share};
use crate::sctp::{self, SctpRig};
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
    /// The client of a `bench --server` at this address: each core opens
    /// its share of the run's QPs (their own slots of the server's memory)
    /// on its queue pair of a DPDK port, steered, or over Linux TCP.
    Remote(PeerTransport, SocketAddrV4),
}

impl CoreLink {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            CoreLink::Memif => "memif",
            CoreLink::Ring => "ring",
            CoreLink::Embedded => "embedded",
            CoreLink::Remote(peer, _) => rig::TransportKind::Remote(peer).name(),
        }
    }
}

/// Each core thread's result, in order; a thread that panicked is an
/// error of its own.
pub fn joined<T>(
    threads: Vec<std::thread::ScopedJoinHandle<'_, Result<T, String>>>,
) -> Vec<Result<T, String>> {
    threads
        .into_iter()
        .map(|t| {
            t.join()
                .unwrap_or_else(|_| Err("a core's thread panicked".into()))
        })
        .collect()
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
/// in `counts` in turn, core k pinned to `cpus[k]`, over `llp` (DDP over
/// SCTP: on the in-memory link, memif or net_ring, or as a HOST's client;
/// without a flood).
/// Returns one report per count and size: the aggregate, with every core's
/// counters and share.
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
    llp: LlpArg,
    counts: &[usize],
    cpus: &[usize],
    spec: &Spec,
    sizes: &[usize],
    flood: Option<usize>,
    floods: &mut Vec<(usize, FloodStats)>,
    stop: &AtomicBool,
) -> Result<Vec<Report>, String> {
    let most = counts.iter().copied().max().unwrap_or(1);
    if counts.contains(&0) || most > cpus.len() {
        return Err(format!("{counts:?} cores on {} CPUs", cpus.len()));
    }
    let remote = matches!(kind, CoreLink::Remote(..));
    let sctp = llp == LlpArg::Sctp;
    if sctp && flood.is_some() {
        return Err(
            "--flood opens TCP connections that never start MPA: not with --llp sctp".into(),
        );
    }
    let mut eal = match kind {
        CoreLink::Memif | CoreLink::Ring => {
            Some(dataplane::ports::start_eal(link.hugepages(), &[])?.0)
        }
        CoreLink::Embedded | CoreLink::Remote(..) => None,
    };
    let largest = sizes.iter().copied().max().unwrap_or(spec.size);
    // Every (count, size), and with a flood each count of two cores or more
    // again with core 0 flooded.
    let mut plan_steps = Vec::new();
    for (c, &count) in counts.iter().enumerate() {
        for (i, &size) in sizes.iter().enumerate() {
            // A remote server serves one run: its last size is the last
            // size of the last count.
            let last = i + 1 == sizes.len() && (!remote || c + 1 == counts.len());
            plan_steps.push(Step {
                count,
                size,
                flood: None,
                last,
            });
            if count >= 2 && flood.is_some() {
                plan_steps.push(Step {
                    count,
                    size,
                    flood,
                    last,
                });
            }
        }
    }
    // Every core meets the others once when its rig is up, then before each
    // step.
    let steps = plan_steps.len();
    let barrier = Barrier::new(most);
    let failed = AtomicBool::new(false);
    // Memory for the most QPs a core runs in any count (core 0's); for a
    // remote server's client, a slot for every QP of the run (each core's
    // QPs use their own).
    let qps_max = |k: usize| {
        if remote {
            return spec.qps;
        }
        plan_steps
            .iter()
            .filter_map(|s| s.qps_of(spec.qps, k))
            .max()
            .unwrap_or(1)
    };
    // DPDK: one port pair with a queue pair per core, and a rig per core on
    // it, made here (DPDK's control path on one thread) and moved to the
    // cores.
    let mut kernel_rigs = Vec::new();
    let mut sctp_rigs = Vec::new();
    let mut kernel_sctp_rigs = Vec::new();
    let mut dpdk_rigs = match kind {
        CoreLink::Remote(peer, server) if sctp => {
            let config = RigConfig {
                memory: memory_for(spec.qps, largest),
                ..config.clone()
            };
            let cores = u16::try_from(most).map_err(|_| "too many cores".to_string())?;
            let _one = control_path();
            match sctp::remote_cores(&config, link, peer, server, cores)? {
                sctp::RemoteSctpCores::Dpdk(rigs, info) => {
                    println!(" {}, {}", info.ports, info.checksums);
                    eal = Some(info.eal);
                    sctp_rigs = rigs;
                }
                sctp::RemoteSctpCores::Kernel(rigs) => kernel_sctp_rigs = rigs,
            }
            Vec::new()
        }
        CoreLink::Memif | CoreLink::Ring if sctp => {
            let config = RigConfig {
                memory: memory_for(qps_max(0), largest),
                ..config.clone()
            };
            let cores = u16::try_from(most).map_err(|_| "too many cores".to_string())?;
            let _one = control_path();
            sctp_rigs = sctp::dpdk_pair_cores(&config, link, kind == CoreLink::Memif, cores)?;
            Vec::new()
        }
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
        CoreLink::Remote(peer, server) => {
            let config = RigConfig {
                memory: memory_for(spec.qps, largest),
                ..config.clone()
            };
            let cores = u16::try_from(most).map_err(|_| "too many cores".to_string())?;
            let _one = control_path();
            match rig::remote_cores(&config, link, peer, server, cores)? {
                rig::RemoteCores::Dpdk(rigs, info) => {
                    println!(" {}, {}", info.ports, info.checksums);
                    eal = Some(info.eal);
                    rigs
                }
                rig::RemoteCores::Kernel(rigs) => {
                    kernel_rigs = rigs;
                    Vec::new()
                }
            }
        }
    }
    .into_iter();
    let mut kernel_rigs = kernel_rigs.into_iter();
    let mut sctp_rigs = sctp_rigs.into_iter();
    let mut kernel_sctp_rigs = kernel_sctp_rigs.into_iter();
    // The in-memory link: a link per core, made on its core's thread; the
    // two hosts (a control-plane thread and a registry each) shared.
    let cores = u16::try_from(most).map_err(|_| "too many cores".to_string())?;
    let hosts = (kind == CoreLink::Embedded).then(|| config.hosts(cores));
    let results: Vec<Result<Vec<Done>, String>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..most)
            .map(|k| {
                let (barrier, failed) = (&barrier, &failed);
                let cpu = cpus[k];
                let plan = Plan {
                    k,
                    cpu,
                    spec: *spec,
                    steps: &plan_steps,
                    remote,
                };
                let dpdk_rig = dpdk_rigs.next();
                let kernel_rig = kernel_rigs.next();
                let sctp_rig = sctp_rigs.next();
                let kernel_sctp_rig = kernel_sctp_rigs.next();
                let hosts = hosts.as_ref();
                let config = RigConfig {
                    memory: memory_for(qps_max(k), largest),
                    ..config.clone()
                };
                scope.spawn(move || {
                    let mut met = 0;
                    let on_core = |met: &mut usize| -> Result<Vec<Done>, String> {
                        let _pinned = dataplane::lcore::enter(Some(cpu), eal)?;
                        if let Some(mut rig) = kernel_rig {
                            return drive(&mut rig, &plan, barrier, failed, stop, met);
                        }
                        if let Some(mut rig) = kernel_sctp_rig {
                            return drive(&mut rig, &plan, barrier, failed, stop, met);
                        }
                        // A DPDK rig's ports close on DPDK's control path,
                        // after a quiet spell on memif (see MEMIF_QUIET).
                        let close = |rig: Box<dyn Send>| {
                            if matches!(
                                kind,
                                CoreLink::Memif | CoreLink::Remote(PeerTransport::Memif, _)
                            ) {
                                std::thread::sleep(crate::link::MEMIF_QUIET);
                            }
                            let _one = control_path();
                            drop(rig);
                        };
                        if let Some(mut rig) = sctp_rig {
                            let result = drive(&mut rig, &plan, barrier, failed, stop, met);
                            close(Box::new(rig));
                            return result;
                        }
                        match dpdk_rig {
                            Some(mut rig) => {
                                let result = drive(&mut rig, &plan, barrier, failed, stop, met);
                                close(Box::new(rig));
                                result
                            }
                            None if sctp => {
                                let hosts = hosts.ok_or("no link for this core")?;
                                let mut rig = sctp::embedded_on(hosts, k as u16, &config)?;
                                drive(&mut rig, &plan, barrier, failed, stop, met)
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
        joined(threads)
    });
    let mut per_core = Vec::with_capacity(most);
    for (k, result) in results.into_iter().enumerate() {
        per_core.push(result.map_err(|why| format!("core {k} (CPU {}): {why}", cpus[k]))?);
    }
    let mut out = Vec::new();
    for (n, step) in plan_steps.iter().enumerate() {
        let done: Vec<&Done> = per_core[..step.count]
            .iter()
            .filter_map(|r| r.get(n))
            .collect();
        if done.len() < step.count {
            return Ok(out);
        }
        let runs: Vec<&CoreRun> = done
            .iter()
            .filter_map(|d| match d {
                Done::Ran(run) => Some(run),
                _ => None,
            })
            .collect();
        if runs.is_empty() {
            return Ok(out);
        }
        let mut per_core: Vec<CoreReport> = runs.iter().flat_map(|r| r.reports.clone()).collect();
        let mut flood_stats = None;
        for d in &done {
            if let Done::Flooded(f) = d {
                per_core.extend(f.reports.iter().cloned());
                flood_stats = Some(f.stats);
            }
        }
        out.push(Report {
            op: spec.op,
            mode: spec.mode,
            size: step.size,
            transport: match (kind, flood_stats.is_some()) {
                (_, false) | (CoreLink::Remote(..), true) => kind.name(),
                (CoreLink::Memif, true) => "memif+flood",
                (CoreLink::Ring, true) => "ring+flood",
                (CoreLink::Embedded, true) => "embedded+flood",
            },
            llp: llp.name(),
            cores: step.count,
            per_core,
            measured: aggregate(&runs),
        });
        if let Some(f) = flood_stats {
            floods.push((out.len() - 1, f));
        }
    }
    Ok(out)
}

/// One step of a `--cores` run.
#[derive(Debug, Clone, Copy)]
struct Step {
    count: usize,
    size: usize,
    /// Core 0 floods its peer with connections that never start MPA (at
    /// most this many open at once) instead of running the workload.
    flood: Option<usize>,
    last: bool,
}

impl Step {
    /// The QPs core `k` runs in this step (none: it floods or idles). In
    /// a flooded step the other cores run what they run without the flood
    /// (core 0's share is not run), so each core's rate compares with its
    /// own.
    fn qps_of(&self, qps: usize, k: usize) -> Option<usize> {
        let flooder = usize::from(self.flood.is_some());
        (k >= flooder && k < self.count).then(|| qps_of(qps, self.count, k))
    }
}

/// What a core did in a step.
enum Done {
    /// Not in this step's count.
    Idle,
    /// Its share of the workload.
    Ran(CoreRun),
    /// The flood.
    Flooded(FloodRun),
}

/// What a flood did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FloodStats {
    /// TCP connections opened to the peer's core (none starts MPA).
    pub opened: u64,
    /// Opens refused at once by our own stack (its connection limit).
    pub refused_here: u64,
    /// The most MPA startups the peer's core held at once.
    pub held_max: usize,
    /// Startups the peer's control plane refused for its limits.
    pub refused_by_peer: u64,
    /// Seconds it ran.
    pub millis: u64,
}

struct FloodRun {
    stats: FloodStats,
    reports: Vec<CoreReport>,
}

/// What one core's thread runs.
struct Plan<'a> {
    k: usize,
    cpu: usize,
    spec: Spec,
    steps: &'a [Step],
    /// The server is another process's: the cores' QPs are numbered
    /// across the cores (each its own slots of the server's memory).
    remote: bool,
}

/// A core's rig: MPA's, which can also flood, or DDP over SCTP's.
trait CoreRig: BenchRig {
    /// [`flood`]: core 0's flood of half-open MPA startups.
    fn flood(
        &mut self,
        open_max: usize,
        stop_at: crate::spec::Stop,
        stop: &AtomicBool,
    ) -> Result<FloodStats, String>;
}

impl<C: CoreTransport, S: CoreTransport> CoreRig for Rig<C, S> {
    fn flood(
        &mut self,
        open_max: usize,
        stop_at: crate::spec::Stop,
        stop: &AtomicBool,
    ) -> Result<FloodStats, String> {
        flood(self, open_max, stop_at, stop)
    }
}

impl<C: MessageTransport, S: MessageTransport> CoreRig for SctpRig<C, S> {
    fn flood(
        &mut self,
        _: usize,
        _: crate::spec::Stop,
        _: &AtomicBool,
    ) -> Result<FloodStats, String> {
        // `run` refuses a flood under DDP over SCTP before any core starts.
        Err("--flood floods MPA startups: not with --llp sctp".into())
    }
}

/// Every step on one core's rig, each started with the other cores.
/// `met` counts the barriers passed.
fn drive<R: CoreRig>(
    rig: &mut R,
    plan: &Plan<'_>,
    barrier: &Barrier,
    failed: &AtomicBool,
    stop: &AtomicBool,
    met: &mut usize,
) -> Result<Vec<Done>, String> {
    let mut out = Vec::new();
    // Every core's rig is up.
    barrier.wait();
    *met += 1;
    for step in plan.steps {
        barrier.wait();
        *met += 1;
        if failed.load(Ordering::SeqCst) || stop.load(Ordering::SeqCst) {
            return Ok(out);
        }
        if plan.k >= step.count {
            out.push(Done::Idle);
            continue;
        }
        // A turn first, so the wait at the barrier is not counted as the
        // last turn's time.
        rig.step()?;
        let before = rig.core_reports();
        let reports = |rig: &R, share: Option<Share>, flooded: bool| {
            rig.core_reports()
                .into_iter()
                .zip(&before)
                .map(|(after, before)| CoreReport {
                    counters: after.counters.since(&before.counters),
                    cpu: Some(plan.cpu),
                    // The core's share goes with its client (the side that
                    // counts messages).
                    share: share.filter(|_| after.role == "client"),
                    role: match (flooded, after.role) {
                        (true, "client") => "flooder",
                        (true, _) => "flooded",
                        (false, role) => role,
                    },
                })
                .collect::<Vec<_>>()
        };
        if let (Some(open_max), 0) = (step.flood, plan.k) {
            let stats = rig.flood(open_max, plan.spec.stop, stop)?;
            out.push(Done::Flooded(FloodRun {
                stats,
                reports: reports(rig, None, true),
            }));
            continue;
        }
        let spec = Spec {
            size: step.size,
            qps: step.qps_of(plan.spec.qps, plan.k).unwrap_or(1),
            ..plan.spec
        };
        let measured = if plan.remote {
            let first = (0..plan.k)
                .filter_map(|j| step.qps_of(plan.spec.qps, j))
                .sum();
            workload::run_share(
                rig,
                &spec,
                first,
                plan.spec.qps,
                step.last,
                stop,
                &mut |_| {},
            )?
        } else {
            workload::run(rig, &spec, step.last, stop, &mut |_| {})?
        };
        let share = Share {
            messages: measured.messages,
            octets: measured.octets,
            seconds: measured.elapsed.as_secs_f64(),
        };
        let reports = reports(rig, Some(share), false);
        out.push(Done::Ran(CoreRun { measured, reports }));
    }
    Ok(out)
}

/// Core 0's flood: TCP connections to its peer's core that never send an
/// MPA Request (half-open MPA startups), as many as `open_max` at once and
/// as fast as the core opens them, the oldest aborted to make room, for as
/// long as the workload runs on the other cores (its -D).
// The flood runs for a wall-clock time, as the workload does.
#[allow(clippy::disallowed_methods)]
fn flood<C: CoreTransport, S: CoreTransport>(
    rig: &mut Rig<C, S>,
    open_max: usize,
    stop_at: crate::spec::Stop,
    stop: &AtomicBool,
) -> Result<FloodStats, String> {
    let crate::spec::Stop::Duration(duration) = stop_at else {
        return Err("--flood runs for a duration: give -D".into());
    };
    let server = rig.server_addr();
    // Room for what a core's stack can hold open, not for whatever number
    // the caller asked (a connect beyond it is refused and counted).
    let mut open =
        std::collections::VecDeque::with_capacity(open_max.min(crate::endpoint::CONNECTIONS_MAX));
    let mut stats = FloodStats::default();
    let control = |rig: &Rig<C, S>| {
        rig.local_server()
            .map(|s| s.endpoint.control.host().stats().refused_startups)
            .unwrap_or(0)
    };
    let refused_before = control(rig);
    let start = std::time::Instant::now();
    while start.elapsed() < duration && !stop.load(Ordering::Relaxed) {
        // Up to 64 opens a turn.
        for _ in 0..64 {
            if open.len() >= open_max {
                if let Some(old) = open.pop_front() {
                    let t = rig.client.core.transport_mut();
                    let _ = t.abort(old);
                    t.release(old);
                }
            }
            match rig
                .client
                .core
                .transport_mut()
                .connect(server, crate::endpoint::now())
            {
                Ok(conn) => {
                    open.push_back(conn);
                    stats.opened += 1;
                }
                Err(_) => {
                    stats.refused_here += 1;
                    break;
                }
            }
        }
        rig.step()?;
        if let Some(s) = rig.local_server() {
            stats.held_max = stats.held_max.max(s.endpoint.core.in_startup());
        }
    }
    let t = rig.client.core.transport_mut();
    for conn in open {
        let _ = t.abort(conn);
        t.release(conn);
    }
    // Let the resets reach the peer.
    for _ in 0..64 {
        rig.step()?;
    }
    stats.refused_by_peer = control(rig) - refused_before;
    stats.millis = start.elapsed().as_millis() as u64;
    Ok(stats)
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
        beside: runs.iter().map(|r| r.measured.beside).sum(),
    }
}

/// The per-core rows of one report, for the table.
pub fn core_rows(report: &Report, report_gbits: bool) -> Vec<String> {
    let mut rows = Vec::new();
    // A flooded run's workload ran on the cores after core 0.
    let mut k = usize::from(report.transport.ends_with("+flood"));
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
                share.octets as f64 / share.seconds.max(1e-9) / crate::report::MB
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
        // A remote server's turns are its own process's.
        let has_server = report
            .per_core
            .iter()
            .any(|r| r.cpu == c.cpu && r.role == "server");
        let server = if has_server {
            format!(", server {:.0}%", busy("server") * 100.0)
        } else {
            String::new()
        };
        rows.push(format!(
            "   core {k} (CPU {}): {bw}, {:.3} Mmsg/s, {} messages; turns busy: client \
             {:.0}%{server}; frames at the wrong core: {misplaced}",
            c.cpu.map_or("-".into(), |c| c.to_string()),
            share.msgs_s() / 1e6,
            share.messages,
            busy("client") * 100.0,
        ));
        k += 1;
    }
    rows
}

/// What each flooded run did, and how much of their rate the other cores
/// kept beside the same run without the flood.
pub fn flood_lines(reports: &[Report], floods: &[(usize, FloodStats)]) -> Vec<String> {
    let mut out = Vec::new();
    for &(at, f) in floods {
        let Some(r) = reports.get(at) else { continue };
        out.push(format!(
            " {} B, {} cores, core 0 flooding its peer for {:.1} s: {} TCP connections \
             opened that never start MPA ({} refused by our stack's limit), the peer's core \
             held at most {} MPA startups, its control plane refused {} for its limits",
            r.size,
            r.cores,
            f.millis as f64 / 1000.0,
            f.opened,
            f.refused_here,
            f.held_max,
            f.refused_by_peer
        ));
        let base = reports
            .iter()
            .find(|b| b.cores == r.cores && b.size == r.size && !b.transport.ends_with("+flood"));
        for c in r.per_core.iter().filter(|c| c.share.is_some()) {
            let quiet = base.and_then(|b| {
                b.per_core
                    .iter()
                    .find(|q| q.cpu == c.cpu && q.share.is_some())
                    .and_then(|q| q.share)
            });
            let (Some(now), Some(quiet)) = (c.share, quiet) else {
                continue;
            };
            out.push(format!(
                "   the core on CPU {}: {:.3} Mmsg/s ({:.2} Gbit/s) beside the flood, {:.1}% of \
                 its {:.3} Mmsg/s without",
                c.cpu.map_or("-".into(), |c| c.to_string()),
                now.msgs_s() / 1e6,
                now.gbit_s(),
                100.0 * now.msgs_s() / quiet.msgs_s().max(1e-9),
                quiet.msgs_s() / 1e6
            ));
        }
    }
    out
}

/// "2 cores: 1.93x the bandwidth of 1 core" lines, per size, for every
/// count against the first.
pub fn scaling(reports: &[Report]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(first) = reports.first().map(|r| r.cores) else {
        return out;
    };
    for r in reports
        .iter()
        .filter(|r| r.cores != first && !r.transport.ends_with("+flood"))
    {
        if let Some(base) = reports
            .iter()
            .find(|b| b.cores == first && b.size == r.size && !b.transport.ends_with("+flood"))
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
