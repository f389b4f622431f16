//! The workloads, as perftest runs them: bandwidth (a window of `depth`
//! work requests per QP kept full) and latency (one message in flight).
//!
//! Latency, like perftest: Write, Send and Write with Immediate are
//! ping-pongs and report half the round trip; Read and the atomics report
//! the whole round trip from post to completion.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::verbs::{QpHandle, RecvWr, SendOp, SendWr};
use tcp_lite::Transport;

use crate::rig::{Endpoint, Rig};

/// An operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// RDMA Write.
    Write,
    /// RDMA Read.
    Read,
    /// Send.
    Send,
    /// RDMA Write with Immediate (RFC 7306).
    WriteImm,
    /// Atomic FetchAdd (RFC 7306), 8 octets.
    FetchAdd,
    /// Atomic CmpSwap (RFC 7306), 8 octets.
    CmpSwap,
}

impl Op {
    /// Every operation.
    pub const ALL: [Op; 6] = [
        Op::Write,
        Op::Read,
        Op::Send,
        Op::WriteImm,
        Op::FetchAdd,
        Op::CmpSwap,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
            Op::Send => "send",
            Op::WriteImm => "write_imm",
            Op::FetchAdd => "fetch_add",
            Op::CmpSwap => "cmp_swap",
        }
    }

    /// Atomics move 8 octets whatever the size asked.
    pub fn is_atomic(self) -> bool {
        matches!(self, Op::FetchAdd | Op::CmpSwap)
    }

    /// Whether the target consumes a posted receive.
    fn needs_receive(self) -> bool {
        matches!(self, Op::Send | Op::WriteImm)
    }
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A window of messages in flight per QP.
    Bandwidth,
    /// One message in flight.
    Latency,
}

/// When a run ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many messages.
    Iterations(u64),
    /// After this long.
    Duration(Duration),
}

/// One workload.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The operation.
    pub op: Op,
    /// Bandwidth or latency.
    pub mode: Mode,
    /// Message size in octets (8 for atomics).
    pub size: usize,
    /// When to stop.
    pub stop: Stop,
    /// Work requests in flight per QP (bandwidth).
    pub depth: usize,
}

/// What a run measured.
pub struct Measured {
    /// Messages completed.
    pub messages: u64,
    /// Octets moved.
    pub octets: u64,
    /// Wall-clock time of the timed part.
    pub elapsed: Duration,
    /// CPU time of this thread (both RNICs) over the timed part.
    pub cpu: Duration,
    /// Latency in ns (latency mode; bandwidth mode records each message's
    /// post-to-completion time too).
    pub latency: Histogram<u64>,
    /// One histogram per second of the run, for the interval log.
    pub intervals: Vec<(Duration, Histogram<u64>)>,
    /// The run stopped early (Ctrl-C).
    pub interrupted: bool,
}

/// CPU time this thread has run (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(Duration::ZERO, |t| {
            Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
        })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Where each QP's messages go in the registered memory: a slot of `size`
/// octets per QP, twice (source and sink), so QPs never share octets.
fn slot(qp_index: usize, size: usize) -> u64 {
    (qp_index * size.max(8) * 2) as u64
}

/// Memory the rig needs for `qps` QPs of messages of `size`.
pub fn memory_for(qps: usize, size: usize) -> usize {
    qps * size.max(8) * 2 + 4096
}

fn wr<'a>(wr_id: u64, op: SendOp, sgl: &'a [rnic_engine::verbs::Sge]) -> SendWr<'a> {
    SendWr {
        wr_id,
        op,
        sgl,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// Posts one message of `spec` on the client's QP `qi` of `pair`.
fn post<T: Transport>(
    client: &mut Endpoint<T>,
    server_remote: rnic_engine::verbs::RemoteAddr,
    qp: QpHandle,
    qi: usize,
    spec: &Spec,
    id: u64,
) -> bool {
    let size = spec.size as u32;
    let base = slot(qi, spec.size);
    let sgl = [client.sge(base, if spec.op.is_atomic() { 8 } else { size })];
    let remote = rnic_engine::verbs::RemoteAddr {
        stag: server_remote.stag,
        to: server_remote.to + base,
    };
    let op = match spec.op {
        Op::Write => SendOp::Write(remote),
        Op::Read => SendOp::Read(remote),
        Op::Send => SendOp::Send,
        Op::WriteImm => SendOp::WriteWithImmediate(remote, id.to_be_bytes()),
        Op::FetchAdd => SendOp::FetchAdd {
            remote,
            add: 1,
            mask: 0,
        },
        Op::CmpSwap => SendOp::CmpSwap {
            remote,
            compare: 0,
            compare_mask: 0,
            swap: id,
            swap_mask: u64::MAX,
        },
    };
    client.rnic.post_send(qp, &wr(id, op, &sgl)).is_ok()
}

fn post_receive<T: Transport>(
    side: &mut Endpoint<T>,
    qp: QpHandle,
    qi: usize,
    size: usize,
    id: u64,
) {
    let sgl = [side.sge(slot(qi, size) + size.max(8) as u64, size.max(8) as u32)];
    let _ = side.rnic.post_recv(
        qp,
        &RecvWr {
            wr_id: id,
            sgl: &sgl,
        },
    );
}

fn check(wc: &Wc) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!("work request {} ended {:?}", wc.wr_id, wc.status))
    }
}

/// Runs `spec` on `rig`; `progress` is called with the fraction done.
pub fn run<T: Transport>(
    rig: &mut Rig<T>,
    spec: &Spec,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    match spec.mode {
        Mode::Bandwidth => bandwidth(rig, spec, stop_flag, progress),
        Mode::Latency => latency(rig, spec, stop_flag, progress),
    }
}

fn done(spec: &Spec, start: Instant, messages: u64) -> (bool, f64) {
    match spec.stop {
        Stop::Iterations(n) => (messages >= n, messages as f64 / n as f64),
        Stop::Duration(d) => (
            start.elapsed() >= d,
            start.elapsed().as_secs_f64() / d.as_secs_f64(),
        ),
    }
}

fn bandwidth<T: Transport>(
    rig: &mut Rig<T>,
    spec: &Spec,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    let pairs = rig.pairs.clone();
    let server_remote = rig.server.remote(0);
    let octets_per = if spec.op.is_atomic() {
        8
    } else {
        spec.size as u64
    };
    // Receives for Sends and Immediates, kept posted on the server.
    if spec.op.needs_receive() {
        for (qi, &(_, sqp)) in pairs.iter().enumerate() {
            for r in 0..spec.depth.min(crate::rig::QUEUE_DEPTH) {
                post_receive(&mut rig.server, sqp, qi, spec.size, r as u64);
            }
        }
    }
    let depth = spec.depth.clamp(1, crate::rig::QUEUE_DEPTH);
    let mut posted_at = vec![std::collections::VecDeque::with_capacity(depth); pairs.len()];
    let mut next_id = 0u64;
    let mut latency = histogram();
    let (mut messages, mut wcs) = (0u64, Vec::new());
    let mut issued = 0u64;
    let limit = match spec.stop {
        Stop::Iterations(n) => n,
        Stop::Duration(_) => u64::MAX,
    };
    let start = Instant::now();
    let cpu0 = thread_cpu();
    let mut interval = histogram();
    let mut intervals = Vec::new();
    let mut interval_start = start;
    let mut interrupted = false;
    loop {
        // Keep every QP's window full.
        for (qi, &(cqp, _)) in pairs.iter().enumerate() {
            while posted_at[qi].len() < depth && issued < limit && !done(spec, start, messages).0 {
                if !post(&mut rig.client, server_remote, cqp, qi, spec, next_id) {
                    break;
                }
                posted_at[qi].push_back(Instant::now());
                next_id += 1;
                issued += 1;
            }
        }
        rig.step();
        wcs.clear();
        rig.client.poll_cq(&mut wcs);
        for wc in &wcs {
            check(wc)?;
            let qi = pairs
                .iter()
                .position(|&(c, _)| c == wc.qp)
                .ok_or("completion on an unknown QP")?;
            if let Some(at) = posted_at[qi].pop_front() {
                let ns = at.elapsed().as_nanos() as u64;
                let _ = latency.record(ns.max(1));
                let _ = interval.record(ns.max(1));
            }
            messages += 1;
        }
        if spec.op.needs_receive() {
            wcs.clear();
            rig.server.poll_cq(&mut wcs);
            for wc in &wcs {
                check(wc)?;
                let qi = pairs
                    .iter()
                    .position(|&(_, s)| s == wc.qp)
                    .ok_or("completion on an unknown QP")?;
                post_receive(&mut rig.server, wc.qp, qi, spec.size, wc.wr_id);
            }
        } else {
            // Nothing is expected on the server; drain it anyway.
            wcs.clear();
            rig.server.poll_cq(&mut wcs);
        }
        if interval_start.elapsed() >= Duration::from_secs(1) {
            intervals.push((
                interval_start - start,
                std::mem::replace(&mut interval, histogram()),
            ));
            interval_start = Instant::now();
        }
        let (finished, fraction) = done(spec, start, messages);
        progress(fraction.min(1.0));
        if stop_flag.load(Ordering::Relaxed) {
            interrupted = true;
        }
        if (finished || interrupted) && posted_at.iter().all(|q| q.is_empty()) {
            break;
        }
        if start.elapsed() > Duration::from_secs(3600) {
            return Err("the run did not finish within an hour".into());
        }
    }
    let elapsed = start.elapsed();
    intervals.push((interval_start - start, interval));
    Ok(Measured {
        messages,
        octets: messages * octets_per,
        elapsed,
        cpu: thread_cpu().saturating_sub(cpu0),
        latency,
        intervals,
        interrupted,
    })
}

fn latency<T: Transport>(
    rig: &mut Rig<T>,
    spec: &Spec,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    let (cqp, sqp) = rig.pairs[0];
    let size = spec.size;
    let octets_per = if spec.op.is_atomic() { 8 } else { size as u64 };
    let mut latency = histogram();
    let mut interval = histogram();
    let mut intervals = Vec::new();
    let (mut messages, mut wcs) = (0u64, Vec::new());
    let client_remote = rig.client.remote(0);
    let server_remote = rig.server.remote(0);
    let ping_pong = matches!(spec.op, Op::Write | Op::Send | Op::WriteImm);
    if spec.op.needs_receive() {
        post_receive(&mut rig.server, sqp, 0, size, 0);
        post_receive(&mut rig.client, cqp, 0, size, 0);
    }
    let warmup = 100u64;
    let mut start = Instant::now();
    let mut cpu0 = thread_cpu();
    let mut interval_start = start;
    let interrupted;
    let mut round = 0u64;
    loop {
        let (finished, fraction) = done(spec, start, messages);
        if finished || stop_flag.load(Ordering::Relaxed) {
            interrupted = !finished;
            break;
        }
        round += 1;
        // The last octet of a Write carries the round (never 0), which the
        // other side polls for, as perftest's write_lat does.
        let marker = (round % 255 + 1) as u8;
        let t0 = Instant::now();
        if spec.op == Op::Write {
            let mut last = [marker];
            rig.client
                .region
                .write(size - 1, &last)
                .map_err(|e| format!("{e:?}"))?;
            post(&mut rig.client, server_remote, cqp, 0, spec, round);
            // The server sees the marker, then writes back.
            wait(rig, "the server's buffer", &mut |rig, _| {
                rig.server.region.read(size - 1, &mut last).is_ok() && last[0] == marker
            })?;
            // The pong comes from the server's second half into the
            // client's second half, so neither side sees its own marker.
            rig.server
                .region
                .write(2 * size - 1, &[marker])
                .map_err(|e| format!("{e:?}"))?;
            let sgl = [rig.server.sge(size as u64, size as u32)];
            let pong = rnic_engine::verbs::RemoteAddr {
                stag: client_remote.stag,
                to: client_remote.to + size as u64,
            };
            let _ = rig
                .server
                .rnic
                .post_send(sqp, &wr(round, SendOp::Write(pong), &sgl));
            wait(rig, "the client's buffer", &mut |rig, _| {
                rig.client.region.read(2 * size - 1, &mut last).is_ok() && last[0] == marker
            })?;
            // Reap the Writes' completions.
            wcs.clear();
            rig.client.poll_cq(&mut wcs);
            rig.server.poll_cq(&mut wcs);
            for wc in &wcs {
                check(wc)?;
            }
            let _ = client_remote;
        } else if ping_pong {
            post(&mut rig.client, server_remote, cqp, 0, spec, round);
            arrive(rig, "the server's receive", sqp)?;
            post_receive(&mut rig.server, sqp, 0, size, round);
            let sgl = [rig.server.sge(size as u64, size as u32)];
            let back = match spec.op {
                Op::Send => SendOp::Send,
                _ => SendOp::WriteWithImmediate(client_remote, round.to_be_bytes()),
            };
            let _ = rig.server.rnic.post_send(sqp, &wr(round, back, &sgl));
            arrive(rig, "the client's receive", cqp)?;
            post_receive(&mut rig.client, cqp, 0, size, round);
        } else {
            post(&mut rig.client, server_remote, cqp, 0, spec, round);
            let mut error = None;
            let mut got = false;
            wait(rig, "the completion", &mut |rig, wcs| {
                wcs.clear();
                rig.client.poll_cq(wcs);
                for w in wcs.iter() {
                    error = error.take().or(check(w).err());
                    got |= w.qp == cqp;
                }
                got || error.is_some()
            })?;
            if let Some(e) = error {
                return Err(e);
            }
        }
        let mut ns = t0.elapsed().as_nanos() as u64;
        if ping_pong {
            ns /= 2;
        }
        if round <= warmup {
            if round == warmup {
                start = Instant::now();
                cpu0 = thread_cpu();
                interval_start = start;
            }
            continue;
        }
        let _ = latency.record(ns.max(1));
        let _ = interval.record(ns.max(1));
        messages += 1;
        if interval_start.elapsed() >= Duration::from_secs(1) {
            intervals.push((
                interval_start - start,
                std::mem::replace(&mut interval, histogram()),
            ));
            interval_start = Instant::now();
        }
        progress(fraction.min(1.0));
    }
    let elapsed = start.elapsed();
    intervals.push((interval_start - start, interval));
    Ok(Measured {
        messages,
        octets: messages * octets_per,
        elapsed,
        cpu: thread_cpu().saturating_sub(cpu0),
        latency,
        intervals,
        interrupted,
    })
}

/// Steps the rig until a receive (or Immediate) completes on `qp`; other
/// completions (the sender's) are checked and dropped.
fn arrive<T: Transport>(rig: &mut Rig<T>, what: &str, qp: QpHandle) -> Result<(), String> {
    let mut error = None;
    let mut got = false;
    wait(rig, what, &mut |rig, wcs| {
        wcs.clear();
        rig.server.poll_cq(wcs);
        rig.client.poll_cq(wcs);
        for w in wcs.iter() {
            error = error.take().or(check(w).err());
            got |= w.qp == qp && matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvImmediate);
        }
        got || error.is_some()
    })?;
    error.map_or(Ok(()), Err)
}

/// Steps the rig until `ready`, at most 10 s.
fn wait<T: Transport>(
    rig: &mut Rig<T>,
    what: &str,
    ready: &mut dyn FnMut(&mut Rig<T>, &mut Vec<Wc>) -> bool,
) -> Result<(), String> {
    let start = Instant::now();
    let mut wcs = Vec::new();
    loop {
        rig.step();
        if ready(rig, &mut wcs) {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(10) {
            return Err(format!("no progress for 10 s waiting for {what}"));
        }
    }
}
