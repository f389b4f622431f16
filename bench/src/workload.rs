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
use rnic_engine::verbs::{QpHandle, RecvWr, RemoteAddr, SendOp, SendWr};

use crate::endpoint::RnicEnd;
use crate::rig::{BenchRig, Pair};
use crate::spec::{credit_offset, half, memory_for, slot, Measured, Mode, Op, Spec, Stop};

/// CPU time this process has run (`CLOCK_PROCESS_CPUTIME_ID`): every core
/// of the RNICs in it (one thread or two) and their control planes.
fn process_cpu() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map_or(Duration::ZERO, |t| {
            Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
        })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds")
}

/// Posts one message of `spec` on QP `qi` (`pair`) of the client.
fn post<E: RnicEnd>(client: &mut E, pair: &Pair, qi: usize, spec: &Spec, id: u64) -> bool {
    let size = spec.size as u32;
    let base = slot(qi, spec.size);
    let sgl = [client.sge(base, if spec.op.is_atomic() { 8 } else { size })];
    let remote = RemoteAddr {
        stag: pair.remote.stag,
        to: pair.remote.to + base,
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
    client
        .rnic()
        .post_send(pair.qp, &SendWr::signaled(id, op, &sgl))
        .is_ok()
}

/// Posts a receive for the pong of a latency round into the client's
/// second half.
fn post_receive<E: RnicEnd>(
    client: &mut E,
    qp: QpHandle,
    size: usize,
    id: u64,
) -> Result<(), String> {
    let sgl = [client.sge(slot(0, size) + half(size) as u64, half(size) as u32)];
    client
        .rnic()
        .post_recv(
            qp,
            &RecvWr {
                wr_id: id,
                sgl: &sgl,
            },
        )
        .map_err(|e| format!("posting a receive: {e:?}"))
}

fn check(wc: &Wc) -> Result<(), String> {
    if wc.status == WcStatus::Success {
        Ok(())
    } else {
        Err(format!("work request {} ended {:?}", wc.wr_id, wc.status))
    }
}

/// Runs `spec` on `rig` over connections of its own, opened here and
/// closed before returning; `last` tells a remote server this is the last
/// size. `progress` is called with the fraction done.
pub fn run<R: BenchRig>(
    rig: &mut R,
    spec: &Spec,
    last: bool,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    run_beside(rig, spec, 0, true, last, stop_flag, progress)
}

/// [`run`], and for a Write latency run, `active` more QPs beside it:
/// `busy`, each keeping `spec.depth` Writes of the same size in flight
/// meanwhile (`--active`), the latency of one QP among many busy ones; or
/// connected and idle (`--idle`), what many QPs cost a core that serves
/// one.
pub fn run_beside<R: BenchRig>(
    rig: &mut R,
    spec: &Spec,
    active: usize,
    busy: bool,
    last: bool,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    run_in(
        rig,
        spec,
        (active, busy),
        0,
        spec.qps + active,
        last,
        stop_flag,
        progress,
    )
}

/// [`run`] for one core's share of a run of `total` QPs on several cores
/// of a client (`--cores` against a `bench --server`): its `spec.qps` QPs
/// are numbers `first..` of the run, and use those slots of memory on both
/// sides, so that no two cores' QPs share one.
pub fn run_share<R: BenchRig>(
    rig: &mut R,
    spec: &Spec,
    first: usize,
    total: usize,
    last: bool,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    if first + spec.qps > total {
        return Err(format!(
            "QPs {first}..{} of a run of {total}",
            first + spec.qps
        ));
    }
    run_in(
        rig,
        spec,
        (0, true),
        first,
        total,
        last,
        stop_flag,
        progress,
    )
}

/// `spec.qps` QPs numbered from `first` of `total`, and `active` more
/// after them (see [`run_beside`]).
#[allow(clippy::too_many_arguments)]
fn run_in<R: BenchRig>(
    rig: &mut R,
    spec: &Spec,
    (active, busy): (usize, bool),
    first: usize,
    total: usize,
    last: bool,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    if active > 0 && (spec.mode != Mode::Latency || spec.op != Op::Write) {
        return Err("QPs active beside a run go with a Write latency run".into());
    }
    let need = memory_for(total, spec.size);
    if need > rig.client().region().len() {
        return Err(format!(
            "{} QP(s) of {} B messages need {need} octets of memory; this rig has {}",
            spec.qps,
            spec.size,
            rig.client().region().len()
        ));
    }
    // A fresh count for each connection (the memory outlives them).
    for qi in first..first + spec.qps {
        let at = credit_offset(total, qi, spec.size) as usize;
        rig.client()
            .region()
            .write(at, &[0; 8])
            .map_err(|e| format!("credit word: {e:?}"))?;
    }
    let mut background = Background::new(spec, active, busy);
    if active > 0 {
        let busy = Spec {
            mode: Mode::Bandwidth,
            qps: active,
            urgent: false,
            dscp: 0,
            ..*spec
        };
        background.pairs = rig.open_slots(&busy, last, first + spec.qps, total)?;
    }
    let pairs = match rig.open_slots(spec, last, first, total) {
        Ok(pairs) => pairs,
        Err(why) => {
            let _ = rig.close(&background.pairs);
            return Err(why);
        }
    };
    let measured = match spec.mode {
        Mode::Bandwidth => bandwidth(rig, &pairs, spec, stop_flag, progress),
        Mode::Latency => latency(rig, &pairs, &mut background, spec, stop_flag, progress),
    };
    let mut all = pairs;
    all.extend_from_slice(&background.pairs);
    let closed = rig.close(&all);
    let measured = measured?;
    closed?;
    Ok(measured)
}

/// The QPs beside a latency run: each keeps its window of Writes full,
/// re-posting one as one completes, or, not `busy`, is idle.
struct Background {
    /// Whether the QPs keep Writes in flight (`--active`) or stay idle,
    /// connected and ready (`--idle`).
    busy: bool,
    spec: Spec,
    pairs: Vec<Pair>,
    /// Which of `pairs` a QP is.
    index: std::collections::HashMap<QpHandle, usize>,
    next_id: u64,
    /// Writes completed.
    done: u64,
}

impl Background {
    fn new(spec: &Spec, active: usize, busy: bool) -> Background {
        Background {
            busy,
            spec: Spec {
                mode: Mode::Bandwidth,
                qps: active,
                urgent: false,
                dscp: 0,
                ..*spec
            },
            pairs: Vec::new(),
            index: std::collections::HashMap::new(),
            next_id: 1 << 40,
            done: 0,
        }
    }

    /// Fills every QP's window.
    fn start<E: RnicEnd>(&mut self, client: &mut E) -> Result<(), String> {
        self.index = self
            .pairs
            .iter()
            .enumerate()
            .map(|(i, p)| (p.qp, i))
            .collect();
        if !self.busy {
            return Ok(());
        }
        let depth = self.spec.depth.clamp(1, crate::endpoint::QUEUE_DEPTH);
        for i in 0..self.pairs.len() {
            for _ in 0..depth {
                self.post(client, i)?;
            }
        }
        Ok(())
    }

    fn post<E: RnicEnd>(&mut self, client: &mut E, i: usize) -> Result<(), String> {
        self.next_id += 1;
        if post(
            client,
            &self.pairs[i],
            self.pairs[i].slot,
            &self.spec,
            self.next_id,
        ) {
            Ok(())
        } else {
            Err("a busy QP's send queue is full".into())
        }
    }

    /// Takes `wc` if it is a busy QP's: checks it and posts the next Write.
    /// `None` if it is not one of theirs.
    fn take<E: RnicEnd>(&mut self, client: &mut E, wc: &Wc) -> Option<Result<(), String>> {
        let &i = self.index.get(&wc.qp)?;
        self.done += 1;
        Some(check(wc).and_then(|()| self.post(client, i)))
    }
}

fn done(spec: &Spec, start: Instant, messages: u64) -> (bool, f64) {
    done_at(spec, start, Instant::now(), messages)
}

/// [`done`] as of `now` (a clock read the caller already made).
fn done_at(spec: &Spec, start: Instant, now: Instant, messages: u64) -> (bool, f64) {
    let elapsed = now.saturating_duration_since(start);
    match spec.stop {
        Stop::Iterations(n) => (messages >= n, messages as f64 / n as f64),
        Stop::Duration(d) => (elapsed >= d, elapsed.as_secs_f64() / d.as_secs_f64()),
    }
}

fn bandwidth<R: BenchRig>(
    rig: &mut R,
    pairs: &[Pair],
    spec: &Spec,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    let octets_per = if spec.op.is_atomic() {
        8
    } else {
        spec.size as u64
    };
    let depth = spec.depth.clamp(1, crate::endpoint::QUEUE_DEPTH);
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
    let cpu0 = process_cpu();
    let mut interval = histogram();
    let mut intervals = Vec::new();
    let mut interval_start = start;
    let mut interrupted = false;
    let mut last_progress = start;
    // Messages each QP's server has receives for (credit flow control).
    let credited = spec.op.needs_receive();
    let mut sent = vec![0u64; pairs.len()];
    // Each completion's QP in one look-up (a handle's number is the
    // engine's slot index, so it indexes this), not a search of every QP:
    // with 1,024 QPs at 64 B, that search and a walk of every QP's window
    // each round took 43% of the client thread's time (README, "Many
    // cores").
    let mut qi_of = Vec::new();
    for (qi, pair) in pairs.iter().enumerate() {
        let h = pair.qp.index();
        if qi_of.len() <= h {
            qi_of.resize(h + 1, usize::MAX);
        }
        qi_of[h] = qi;
    }
    // The QPs whose windows may have room: at first every one, then those
    // a completion freed, and those left short (no credit, a full send
    // queue), which are looked at again each round.
    let mut wanting: Vec<usize> = (0..pairs.len()).collect();
    let mut listed = vec![true; pairs.len()];
    let mut still = Vec::with_capacity(pairs.len());
    loop {
        // One clock read for this round's posts and one for its
        // completions: at millions of messages a second, a read per message
        // (three, once) cost the client's core a third of its time.
        let now = Instant::now();
        let over = done_at(spec, start, now, messages).0;
        // Keep every QP's window full, within its credits.
        for &qi in &wanting {
            let pair = &pairs[qi];
            let granted = if credited {
                let mut word = [0; 8];
                let at = pair.credit as usize;
                rig.client()
                    .region()
                    .read(at, &mut word)
                    .map_err(|e| format!("credit word: {e:?}"))?;
                depth as u64 + u64::from_be_bytes(word)
            } else {
                u64::MAX
            };
            while posted_at[qi].len() < depth
                && sent[qi] < granted
                && issued < limit
                && !interrupted
                && !over
            {
                if !post(rig.client(), pair, pair.slot, spec, next_id) {
                    break;
                }
                posted_at[qi].push_back(now);
                next_id += 1;
                issued += 1;
                sent[qi] += 1;
            }
            // Posting is over for good once the run is (every QP then
            // only drains).
            if posted_at[qi].len() < depth && issued < limit && !interrupted && !over {
                still.push(qi);
            } else {
                listed[qi] = false;
            }
        }
        std::mem::swap(&mut wanting, &mut still);
        still.clear();
        rig.step()?;
        alive(rig, pairs)?;
        wcs.clear();
        rig.client().poll_cq(&mut wcs);
        let now = Instant::now();
        if !wcs.is_empty() {
            last_progress = now;
        } else if now.saturating_duration_since(last_progress) > STALL_LIMIT {
            return Err(format!(
                "no completion for {} s ({messages} messages done)",
                STALL_LIMIT.as_secs()
            ));
        }
        for wc in &wcs {
            check(wc)?;
            let qi = qi_of
                .get(wc.qp.index())
                .copied()
                .filter(|&qi| qi != usize::MAX)
                .ok_or("completion on an unknown QP")?;
            if !listed[qi] {
                listed[qi] = true;
                wanting.push(qi);
            }
            if let Some(at) = posted_at[qi].pop_front() {
                let ns = now.saturating_duration_since(at).as_nanos() as u64;
                let _ = latency.record(ns.max(1));
                let _ = interval.record(ns.max(1));
            }
            messages += 1;
        }
        if now.saturating_duration_since(interval_start) >= Duration::from_secs(1) {
            intervals.push((
                interval_start - start,
                std::mem::replace(&mut interval, histogram()),
            ));
            interval_start = now;
        }
        let (finished, fraction) = done_at(spec, start, now, messages);
        progress(fraction.min(1.0));
        if stop_flag.load(Ordering::Relaxed) {
            interrupted = true;
        }
        if (finished || interrupted) && posted_at.iter().all(|q| q.is_empty()) {
            break;
        }
        if now.saturating_duration_since(start) > Duration::from_secs(3600) {
            return Err("the run did not finish within an hour".into());
        }
    }
    let elapsed = start.elapsed();
    intervals.push((interval_start - start, interval));
    Ok(Measured {
        messages,
        octets: messages * octets_per,
        elapsed,
        cpu: process_cpu().saturating_sub(cpu0),
        latency,
        intervals,
        interrupted,
        beside: 0,
    })
}

fn latency<R: BenchRig>(
    rig: &mut R,
    pairs: &[Pair],
    background: &mut Background,
    spec: &Spec,
    stop_flag: &AtomicBool,
    progress: &mut dyn FnMut(f64),
) -> Result<Measured, String> {
    let pair = pairs[0];
    let cqp = pair.qp;
    let size = spec.size;
    let octets_per = if spec.op.is_atomic() { 8 } else { size as u64 };
    let mut latency = histogram();
    let mut interval = histogram();
    let mut intervals = Vec::new();
    let mut messages = 0u64;
    let ping_pong = matches!(spec.op, Op::Write | Op::Send | Op::WriteImm);
    // Our octet the server's pong ends in (Write latency).
    let pong_at = half(size) + size - 1;
    if spec.op == Op::Write {
        rig.client()
            .region()
            .write(pong_at, &[0])
            .map_err(|e| format!("{e:?}"))?;
    }
    if spec.op.needs_receive() {
        post_receive(rig.client(), cqp, size, 0)?;
    }
    background.start(rig.client())?;
    let warmup = 100u64;
    let mut start = Instant::now();
    let mut cpu0 = process_cpu();
    let mut interval_start = start;
    let interrupted;
    let mut round = 0u64;
    loop {
        // The clock of a -D run starts after the warm-up: on a busy host
        // the warm-up alone may outlast it, which measured nothing.
        let (finished, fraction) = if round < warmup {
            (false, 0.0)
        } else {
            done(spec, start, messages)
        };
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
            rig.client()
                .region()
                .write(size - 1, &[marker])
                .map_err(|e| format!("{e:?}"))?;
            if !post(rig.client(), &pair, 0, spec, round) {
                return Err("the client's send queue is full".into());
            }
            let mut last = [0];
            let mut error = None;
            wait(
                rig,
                pairs,
                "the server's Write back",
                |rig: &mut R, wcs: &mut Vec<Wc>| {
                    // The pong first: the completions wait for the next
                    // look (the next round's first).
                    if rig.client().region().read(pong_at, &mut last).is_ok() && last[0] == marker {
                        return true;
                    }
                    // Reap our Write's completion as it comes, and keep
                    // the busy QPs' windows full.
                    wcs.clear();
                    rig.client().poll_cq(wcs);
                    for w in wcs.iter() {
                        let outcome = match background.take(rig.client(), w) {
                            Some(result) => result,
                            None => check(w),
                        };
                        error = error.take().or(outcome.err());
                    }
                    // (The pong was not there above, and nothing ran since.)
                    error.is_some()
                },
            )?;
            if let Some(e) = error {
                return Err(e);
            }
        } else if ping_pong {
            if !post(rig.client(), &pair, 0, spec, round) {
                return Err("the client's send queue is full".into());
            }
            completion(rig, pairs, "the server's reply", cqp, true)?;
            post_receive(rig.client(), cqp, size, round)?;
        } else {
            if !post(rig.client(), &pair, 0, spec, round) {
                return Err("the client's send queue is full".into());
            }
            completion(rig, pairs, "the completion", cqp, false)?;
        }
        let mut ns = t0.elapsed().as_nanos() as u64;
        if ping_pong {
            ns /= 2;
        }
        if round <= warmup {
            if round == warmup {
                start = Instant::now();
                cpu0 = process_cpu();
                interval_start = start;
                // The busy QPs' Writes are counted over the same timed
                // part (found by a review: those of the warm-up, and the
                // windows filled before it, were counted over the timed
                // part's time).
                background.done = 0;
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
    let beside = background.done;
    intervals.push((interval_start - start, interval));
    // The send completions of a Write latency run's last round.
    let mut wcs = Vec::new();
    rig.client().poll_cq(&mut wcs);
    Ok(Measured {
        messages,
        octets: messages * octets_per,
        elapsed,
        cpu: process_cpu().saturating_sub(cpu0),
        latency,
        intervals,
        interrupted,
        beside,
    })
}

/// Steps until `qp` completes a work request (only a receive, with
/// `receive`), checking every completion on the way.
fn completion<R: BenchRig>(
    rig: &mut R,
    pairs: &[Pair],
    what: &str,
    qp: QpHandle,
    receive: bool,
) -> Result<(), String> {
    let mut error = None;
    let mut got = false;
    wait(rig, pairs, what, |rig: &mut R, wcs: &mut Vec<Wc>| {
        wcs.clear();
        rig.client().poll_cq(wcs);
        for w in wcs.iter() {
            error = error.take().or(check(w).err());
            got |= w.qp == qp
                && (!receive || matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvImmediate));
        }
        got || error.is_some()
    })?;
    error.map_or(Ok(()), Err)
}

/// How long a run may go without a completion before it is called stuck.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// An error if a connection of the run has ended (the server closed or
/// reset it, or TCP gave up).
fn alive<R: BenchRig>(rig: &mut R, pairs: &[Pair]) -> Result<(), String> {
    if pairs.iter().all(|p| rig.client().is_live(p.qp)) {
        Ok(())
    } else {
        Err("the server ended a connection in the middle of the run".into())
    }
}

/// Steps the rig until `ready`, at most [`STALL_LIMIT`].
fn wait<R: BenchRig, F: FnMut(&mut R, &mut Vec<Wc>) -> bool>(
    rig: &mut R,
    pairs: &[Pair],
    what: &str,
    mut ready: F,
) -> Result<(), String> {
    let start = Instant::now();
    let mut wcs = Vec::new();
    loop {
        rig.step()?;
        if ready(rig, &mut wcs) {
            return Ok(());
        }
        alive(rig, pairs)?;
        if start.elapsed() > STALL_LIMIT {
            return Err(format!(
                "no progress for {} s waiting for {what}",
                STALL_LIMIT.as_secs()
            ));
        }
    }
}
