//! The benchmark's vocabulary, shared by its client, its server, its
//! command line and its reports: operations, modes, workloads, what a run
//! measured, and where each QP's messages sit in memory.

use std::time::Duration;

use hdrhistogram::Histogram;

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
    pub fn needs_receive(self) -> bool {
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
    /// QPs (connections) running at once.
    pub qps: usize,
    /// The QPs are urgent on both ends (`--urgent`): each end's core looks
    /// at them first and sends their segments first, and keeps its turns
    /// short while they live (`dataplane::Core::set_urgent`).
    pub urgent: bool,
    /// The DSCP the QPs' connections carry from their SYN on (`--tos`,
    /// its upper six bits; 0: unmarked): the class the network, and a
    /// server that reflects its clients' classes, serve them in; the
    /// server's core's urgent class (EF, 46) makes them urgent there.
    pub dscp: u8,
}

/// What a run measured.
pub struct Measured {
    /// Messages completed.
    pub messages: u64,
    /// Octets moved.
    pub octets: u64,
    /// Wall-clock time of the timed part.
    pub elapsed: Duration,
    /// CPU time of this process (the RNICs' cores, one or two, and their
    /// control planes) over the timed part.
    pub cpu: Duration,
    /// Latency in ns (latency mode; bandwidth mode records each message's
    /// post-to-completion time too).
    pub latency: Histogram<u64>,
    /// One histogram per second of the run, for the interval log.
    pub intervals: Vec<(Duration, Histogram<u64>)>,
    /// The run stopped early (Ctrl-C).
    pub interrupted: bool,
    /// Messages the QPs active beside a latency run completed meanwhile
    /// (`--active`).
    pub beside: u64,
}

/// Octets of each half of a QP's slot: messages of `size` (at least 8, an
/// atomic's operand).
pub fn half(size: usize) -> usize {
    size.max(8)
}

/// Where QP `qp_index`'s messages go in either side's memory: a slot of
/// two halves per QP (what it sends or is written, what it receives or
/// replies from), so QPs never share octets.
pub fn slot(qp_index: usize, size: usize) -> u64 {
    (qp_index * half(size) * 2) as u64
}

/// Memory each side needs for `qps` QPs of messages of `size`: their slots,
/// then a credit word per QP.
pub fn memory_for(qps: usize, size: usize) -> usize {
    qps * (half(size) * 2 + 8) + 4096
}

/// Where QP `qp_index`'s credit word is, after every slot: on the client
/// the server writes there how many Sends (or Immediates) it has taken,
/// big-endian; on the server it is the source of that Write.
///
/// iWARP has no receiver-not-ready retry: a Send that finds no posted
/// receive ends the connection (RFC 5041 §7.2: DDP TERM, untagged buffer,
/// no buffer available), and a Send completes at the sender once TCP has
/// it, long before the receiver has seen it. So Send and Write with
/// Immediate bandwidth runs are credit-flow-controlled: the server starts
/// with `depth` receives posted and reports what it consumed; the client
/// never has more outstanding than the server posted.
pub fn credit_offset(qps: usize, qp_index: usize, size: usize) -> u64 {
    (qps * half(size) * 2 + qp_index * 8) as u64
}
