//! Poll-mode threads: pinning a thread to a CPU (`core_affinity`), making
//! it an EAL thread when DPDK runs (its own mempool caches), and the loop
//! that runs a [`Core`] and its application to completion on it.
//!
//! One poller per CPU: a busy-polling thread that shares its CPU with
//! another collapses both (measured here), so an application gives each
//! core a CPU of its own and leaves the control-plane thread to the
//! scheduler.

use std::sync::atomic::{AtomicBool, Ordering};

use tcp_lite::Instant;

use crate::core::Core;
use crate::dpdk::{current_lcore, register_thread, Eal, ThreadRegistration};
use crate::transport::CoreTransport;

/// A thread pinned to a CPU (and registered with EAL), for as long as it
/// lives.
#[derive(Debug)]
pub struct Pinned {
    cpu: Option<usize>,
    _eal: Option<ThreadRegistration>,
}

impl Pinned {
    /// The CPU this thread runs on, if pinned.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu
    }
}

/// The CPUs this process may run on, in order: read once, at the first
/// call, so that a thread pinned since (to one CPU) still sees them all.
/// Call it before pinning anything (`enter` does).
pub fn cpus() -> Vec<usize> {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        core_affinity::get_core_ids()
            .map(|ids| ids.into_iter().map(|c| c.id).collect())
            .unwrap_or_default()
    })
    .clone()
}

/// Pins the calling thread to `cpu` (none: leaves it to the scheduler) and,
/// when `eal` is given, registers it with EAL. Say what went wrong: a CPU
/// the process may not use, or no lcore id left.
pub fn enter(cpu: Option<usize>, eal: Option<Eal>) -> Result<Pinned, String> {
    if let Some(cpu) = cpu {
        let allowed = cpus();
        if !allowed.contains(&cpu) {
            return Err(format!(
                "CPU {cpu} is not one this process may use (it may use {allowed:?})"
            ));
        }
        if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
            return Err(format!("could not pin this thread to CPU {cpu}"));
        }
    }
    let registration = match eal {
        // EAL's main thread has its lcore already.
        Some(_) if current_lcore().is_some() => None,
        Some(eal) => Some(register_thread(eal).map_err(|e| e.to_string())?),
        None => None,
    };
    Ok(Pinned {
        cpu,
        _eal: registration,
    })
}

thread_local! {
    /// What [`enter_for_life`] keeps until the thread ends.
    static KEPT: std::cell::RefCell<Option<Pinned>> = const { std::cell::RefCell::new(None) };
}

/// [`enter`] for the rest of the calling thread's life: the pinning and the
/// EAL registration are kept in the thread's own storage and given up when
/// it ends (the registration is counted live until then, so EAL's cleanup
/// after joining the thread finds nothing left; leaking it instead made
/// every later cleanup refuse). A thread already kept keeps its first
/// registration (a second [`enter`] on it registers nothing).
pub fn enter_for_life(cpu: Option<usize>, eal: Option<Eal>) -> Result<(), String> {
    let pinned = enter(cpu, eal)?;
    KEPT.with(|kept| {
        let mut kept = kept.borrow_mut();
        match kept.as_mut() {
            Some(first) => {
                first.cpu = pinned.cpu;
                // A first call without EAL registered nothing: this one's
                // registration is the thread's now (dropped, it would be
                // given up at once).
                if first._eal.is_none() {
                    first._eal = pinned._eal;
                }
            }
            None => *kept = Some(pinned),
        }
    });
    Ok(())
}

/// What the application says after each turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Keep turning.
    Continue,
    /// Stop the loop.
    Stop,
}

/// Runs `core` until `app` says stop or `stop` is set: read the clock once,
/// turn, let the application post and poll (run to completion on this
/// thread). Returns the turns run.
pub fn run<T: CoreTransport>(
    core: &mut Core<T>,
    stop: &AtomicBool,
    mut app: impl FnMut(&mut Core<T>, Instant) -> Flow,
) -> u64 {
    let mut turns = 0;
    while !stop.load(Ordering::Relaxed) {
        let now = crate::clock::now();
        core.turn(now);
        turns += 1;
        if app(core, now) == Flow::Stop {
            break;
        }
    }
    turns
}
