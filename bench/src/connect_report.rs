//! What `bench connect` measures and reports, whichever lower layer it
//! runs on (MPA over TCP in `connect`, DDP over SCTP in `sctp`): the
//! settings of a run, its report and JSON, and the CPU clocks it reads.

use std::collections::BTreeMap;
use std::time::Duration;

use control::mpa::{RtrSet, StartupConfig};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// How long one connection may take from its connect to its end on both
/// sides before it counts as failed.
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(10);

/// How one run goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The timed window.
    pub duration: Duration,
    /// Startups in flight at once.
    pub parallel: usize,
    /// The listener's port.
    pub port: u16,
    /// The CPU of the thread that turns both cores, if pinned.
    pub cpu: Option<usize>,
    /// MPA CRC.
    pub crc: bool,
    /// TCP buffers of every connection, each way, in octets.
    pub tcp_buffer: usize,
}

impl Settings {
    /// The MPA startup both ends run: RFC 6581's enhanced one (revision 2,
    /// IRD/ORD), the peer-to-peer model with the zero-length RDMA Write as
    /// the one RTR both ends take (the cheapest, and Linux siw's pick).
    pub fn startup(&self) -> StartupConfig {
        StartupConfig {
            crc: self.crc,
            peer_to_peer: true,
            rtr: RtrSet {
                send: false,
                write: true,
                read: false,
            },
            ..StartupConfig::default()
        }
    }
}

/// What one transport's run measured.
#[derive(Debug, Clone)]
pub struct ConnectReport {
    /// `embedded` or `kernel`.
    pub transport: &'static str,
    /// Connections established on both ends within the timed window.
    pub connects: u64,
    /// The timed window, in seconds.
    pub seconds: f64,
    /// Startups in flight at once.
    pub parallel: usize,
    /// TCP buffers of every connection, each way, in octets.
    pub tcp_buffer: usize,
    /// From `connect` to the initiator's Established handoff, in ns, of
    /// every connection counted.
    pub latency: Histogram<u64>,
    /// Failures by reason (empty in a healthy run).
    pub failures: BTreeMap<String, u64>,
    /// Established handoffs with a QP over the whole run (the window and
    /// the drain after it): the initiator's and the responder's.
    pub established: [u64; 2],
    /// Responder QPs that took the initiator's RTR.
    pub rtrs_taken: u64,
    /// QPs that ended (their connections closed): initiator's, responder's.
    pub ended: [u64; 2],
    /// Connections each core still had open after the run (0 and 0 when
    /// everything closed).
    pub left_open: [usize; 2],
    /// Connections each core still had in MPA startup after the run.
    pub left_in_startup: [usize; 2],
    /// CPU time of the thread that turned both cores during the window.
    pub core_cpu: Duration,
    /// CPU time of the whole process during the window (the cores' thread
    /// and the control-plane thread).
    pub process_cpu: Duration,
    /// Ctrl-C ended the window early.
    pub interrupted: bool,
    /// The lower layer: `mpa` or `sctp`.
    pub llp: &'static str,
}

impl ConnectReport {
    /// Connections established per second.
    pub fn connects_per_s(&self) -> f64 {
        self.connects as f64 / self.seconds.max(1e-9)
    }

    /// Failures of every reason.
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }

    /// A latency percentile in microseconds.
    pub fn latency_us(&self, percentile: f64) -> f64 {
        self.latency.value_at_percentile(percentile) as f64 / 1000.0
    }

    /// The JSON object of this run (documented in the README).
    pub fn json(&self) -> Value {
        let h = &self.latency;
        let us = |ns: u64| ns as f64 / 1000.0;
        let (threads, close) = if self.llp == "sctp" {
            (
                "both cores on one thread; session control on each RNIC's control-plane thread",
                "the initiator's ABORT once both ends had the stream up",
            )
        } else {
            (
                "both cores on one thread, one control-plane thread for both",
                "orderly (the responder's FIN after it took the RTR, then the initiator's)",
            )
        };
        json!({
            "transport": self.transport,
            "llp": self.llp,
            "connects_per_s": self.connects_per_s(),
            "connects": self.connects,
            "seconds": self.seconds,
            "parallel": self.parallel,
            "tcp_buffer_kib": self.tcp_buffer >> 10,
            "failed": self.failed(),
            "failures": self.failures,
            "latency_us": {
                "min": us(h.min()),
                "p50": self.latency_us(50.0),
                "p90": self.latency_us(90.0),
                "p99": self.latency_us(99.0),
                "p99_9": self.latency_us(99.9),
                "max": us(h.max()),
                "mean": h.mean() / 1000.0,
            },
            "established": { "initiator": self.established[0], "responder": self.established[1] },
            "rtrs_taken": self.rtrs_taken,
            "ended": { "initiator": self.ended[0], "responder": self.ended[1] },
            "core_cpu_share": self.core_cpu.as_secs_f64() / self.seconds.max(1e-9),
            "process_cpu_share": self.process_cpu.as_secs_f64() / self.seconds.max(1e-9),
            "cpu_us_per_connect":
                self.process_cpu.as_secs_f64() * 1e6 / self.connects.max(1) as f64,
            "threads": threads,
            "close": close,
            "interrupted": self.interrupted,
        })
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu() -> Duration {
    cpu_clock(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process.
pub fn process_cpu() -> Duration {
    cpu_clock(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_clock(clock: nix::time::ClockId) -> Duration {
    nix::time::clock_gettime(clock).map_or(Duration::ZERO, |t| {
        Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32)
    })
}
