//! The command line, in perftest's vocabulary (`ib_write_bw -s 65536 -D 5
//! --report_gbits` becomes `bench write -s 65536 -D 5 --report_gbits`;
//! `ib_write_lat` is `bench write --lat`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::link::{HugepagesArg, LinkArgs, PeerTransport};
use crate::spec::{Mode, Op, Stop};

/// dpwarp's benchmark: two software RNICs, perftest-style bandwidth and
/// latency, with HDR latency histograms, plots and a same-run baseline.
#[derive(Debug, Parser)]
#[command(
    name = "bench",
    version,
    about,
    long_about = None,
    after_help = "Tools, each with its own --help: `bench rping` (rping against any rping \
                  peer), `bench perftest` (perftest's six RC tests, as server or client), \
                  `bench connect` (MPA establishments per second), `bench port` (the device \
                  layer's cost per packet), `bench sctp-echo` (DDP over SCTP against an \
                  echoing peer)."
)]
pub struct Args {
    /// The operation: write, read, send, write_imm (RDMA Write with
    /// Immediate Data), fetch_add or cmp_swap (RFC 7306 atomics, 8 octets).
    /// A --server serves whatever its client asks, and may leave it out.
    #[arg(value_enum, required_unless_present = "server")]
    pub op: Option<OpArg>,

    /// Run as the client of the `bench --server` at this address (IPv4
    /// address or host name; perftest's `ib_write_bw HOST`), over kernel
    /// TCP or the --transport given (memif, net_tap, af_packet, pci).
    /// Without it, and without --server, both RNICs run in this process.
    pub host: Option<String>,

    /// Run as a server for a `bench ... HOST` client in another process or
    /// on another host (perftest's side without a HOST), over kernel TCP
    /// or the --transport given (memif, net_tap, af_packet, pci),
    /// listening on -p. Each connection brings its client's workload; the
    /// server exits when its client is done. -s/-a and -q size its memory
    /// (at least 16 MiB).
    #[arg(long, conflicts_with_all = ["host", "compare"])]
    pub server: bool,

    /// Latency mode (perftest's *_lat): one message in flight, HDR histogram.
    /// Without it: bandwidth (perftest's *_bw).
    #[arg(long)]
    pub lat: bool,

    /// Message size in octets (default 65536 for bandwidth, 2 for latency;
    /// atomics are always 8).
    #[arg(short = 's', long)]
    pub size: Option<usize>,

    /// Every size from 2 octets to 8 MiB, in powers of two.
    #[arg(short = 'a', long)]
    pub all: bool,

    /// Messages per size (default 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long = "iters", conflicts_with = "duration")]
    pub iters: Option<u64>,

    /// Run each size for this many seconds instead of a message count.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,

    /// Queue pairs (connections) running at once (bandwidth), 1 to 1024;
    /// with -t, at most 65536 work requests in flight in all.
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: usize,

    /// With --lat on write: this many more QPs, each keeping -t Writes of
    /// the same size in flight, while one QP measures latency (the latency
    /// of one QP among many busy ones).
    #[arg(long, default_value_t = 0, conflicts_with = "idle")]
    pub active: usize,

    /// The measured QPs are urgent on both ends: each end's core looks at
    /// them first, TCP sends their segments before other connections', and
    /// while they live a turn looks at one other connection only (a class
    /// of service, as a NIC's strict-priority queue; the other QPs'
    /// throughput pays). With --lat --active N: the latency of a QP that
    /// asked for precedence among busy ones.
    #[arg(long)]
    pub urgent: bool,

    /// The TOS octet of the measured QPs' connections from their SYN on
    /// (perftest's --tos, which rdma_cm sets before it connects): its
    /// upper six bits are the DSCP (184: Expedited Forwarding, 46), the
    /// lower two ECN's and must be 0. A QP of the core's urgent class
    /// (EF) is urgent; a server that takes its clients' classes from
    /// their SYNs (dpwarpd's reflect_dscp) serves them in it too.
    #[arg(long, value_name = "TOS")]
    pub tos: Option<u8>,

    /// With --lat on write: this many more QPs connected (in RTS) and idle
    /// while one QP measures latency (what many QPs cost the core that
    /// serves one).
    #[arg(long, default_value_t = 0)]
    pub idle: usize,

    /// Work requests in flight per queue pair (bandwidth), at most 512.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub depth: usize,

    /// Report bandwidth in Gbit/s instead of MB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,

    /// Turn MPA CRC32c off (it is on by default, as siw's peers expect).
    #[arg(long = "no-crc")]
    pub no_crc: bool,

    /// MPA markers in both directions (RFC 5044).
    #[arg(long)]
    pub markers: bool,

    /// What joins the two RNICs: `embedded` (tcp-lite over an in-memory
    /// link, one core, no NIC or root needed; the default), `kernel` (Linux
    /// TCP over loopback), `tap` (tcp-lite over a TAP device to Linux TCP
    /// in a network namespace made for the run; root), `memif` (DPDK memif
    /// between the two RNICs, a pinned core each), `ring` (DPDK net_ring,
    /// likewise), `net_tap` (DPDK's TAP driver to Linux TCP in a namespace;
    /// root), `af_packet` (DPDK's AF_PACKET driver on a veth pair to Linux
    /// TCP in a namespace; root). With --server or a HOST: `kernel`
    /// (default), `memif`, `net_tap`, `af_packet` or `pci` (--ip gives our
    /// address on the link).
    #[arg(long, value_enum)]
    pub transport: Option<TransportArg>,

    /// The lower layer under DDP: `mpa` (MPA over TCP, RFC 5044; the
    /// default) or `sctp` (DDP over SCTP over UDP encapsulation, RFC 5043
    /// and RFC 6951; on the embedded link, kernel UDP, memif, ring, TAP,
    /// net_tap and af_packet with both RNICs on one core, or between two
    /// processes, `--server` and HOST, over Linux UDP, memif, net_tap,
    /// af_packet or pci).
    #[arg(long, value_enum, default_value = "mpa")]
    pub llp: LlpArg,

    /// Run the same workload over these baselines too, in the same run, and
    /// print the ratios: transports (`kernel`, or `kernel,embedded`) over
    /// the same lower layer, or the other lower layer (`mpa`, `sctp`) on
    /// the same transport.
    #[arg(long, value_delimiter = ',', value_parser = parse_compare)]
    pub compare: Vec<Compare>,

    /// IP MTU of the link (FPDUs are sized for it on every transport):
    /// 9000 by default, 1500 on net_tap (DPDK 22.11's TAP driver takes no
    /// more than 1504).
    #[arg(long)]
    pub mtu: Option<usize>,

    /// The embedded link drops this percentage of frames each way, at
    /// random (seeded): RDMA over a network that loses packets, which TCP
    /// repairs (SACK, RACK-TLP; CUBIC), every FPDU's CRC checked.
    #[arg(long, value_name = "PERCENT")]
    pub loss: Option<f64>,

    /// Every received octet goes through TCP's receive buffer (copied in,
    /// then out into registered memory), instead of each core's engine
    /// taking FPDUs straight from the received frames where the buffer is
    /// empty: to compare the two receive paths (a DPDK port or the
    /// embedded link; kernel TCP always buffers).
    #[arg(long = "rx-buffered")]
    pub rx_buffered: bool,

    /// Both RNICs on one core (one thread steps both; the embedded link
    /// always runs so). Without it, and with two CPUs or more, each RNIC
    /// in this process has a pinned core of its own (-l picks them).
    #[arg(long = "shared-core")]
    pub shared_core: bool,

    /// Run the workload on this many pinned cores at once: `2`, or `1,2` to
    /// run on one and then on two cores and print the scaling. -q QPs are
    /// spread over the cores; -l picks the CPUs (core k on the k-th). In
    /// one process (memif, ring, or the embedded link) each core runs both
    /// ends of its own connections over a queue pair of its own (with
    /// --llp sctp: its own association and streams); as a HOST's client each core opens its share of the QPs on its queue
    /// pair of the port. With --server: serve on this many cores (one
    /// count), each on a queue pair of the DPDK port (steered) or a kernel
    /// TCP listener (or, with --llp sctp, UDP socket) of its own on the
    /// port (SO_REUSEPORT).
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["compare", "shared_core"])]
    pub cores: Vec<usize>,

    /// With --cores: run each count of two cores or more a second time with
    /// core 0 flooding its peer's core 0 with TCP connections that never
    /// send an MPA Request (at most this many open at once, the oldest
    /// reset to make room) while the other cores run the workload, and
    /// print how much of their rate they kept. Needs -D.
    #[arg(long, requires = "cores")]
    pub flood: Option<usize>,

    /// The link: TAP and DPDK options, CPUs, checksums.
    #[command(flatten)]
    pub link: LinkArgs,

    /// Port the server side listens on (perftest's default 18515; the
    /// in-process kernel baseline uses the next one).
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,

    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Directory for the histogram files (.hgrm), interval logs (.hlog) and
    /// plots (.svg) of latency runs.
    #[arg(long, default_value = OUT_DEFAULT)]
    pub out: PathBuf,
}

/// An operation on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OpArg {
    /// RDMA Write.
    Write,
    /// RDMA Read.
    Read,
    /// Send.
    Send,
    /// RDMA Write with Immediate Data.
    #[value(name = "write_imm")]
    WriteImm,
    /// Atomic FetchAdd.
    #[value(name = "fetch_add")]
    FetchAdd,
    /// Atomic CmpSwap.
    #[value(name = "cmp_swap")]
    CmpSwap,
}

impl OpArg {
    /// The workload's operation.
    pub fn op(self) -> Op {
        match self {
            OpArg::Write => Op::Write,
            OpArg::Read => Op::Read,
            OpArg::Send => Op::Send,
            OpArg::WriteImm => Op::WriteImm,
            OpArg::FetchAdd => Op::FetchAdd,
            OpArg::CmpSwap => Op::CmpSwap,
        }
    }
}

/// The lower layer under DDP on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LlpArg {
    /// MPA over TCP (RFC 5044, RFC 6581).
    Mpa,
    /// DDP over SCTP (RFC 5043, RFC 6581 §7) over UDP (RFC 6951).
    Sctp,
}

impl LlpArg {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            LlpArg::Mpa => "mpa",
            LlpArg::Sctp => "sctp",
        }
    }
}

/// One baseline of `--compare`: another transport, or the other lower
/// layer on the same transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// This transport, over the run's lower layer.
    Transport(TransportArg),
    /// The run's transport, over this lower layer.
    Llp(LlpArg),
}

fn parse_compare(s: &str) -> Result<Compare, String> {
    if let Ok(llp) = LlpArg::from_str(s, true) {
        return Ok(Compare::Llp(llp));
    }
    TransportArg::from_str(s, true)
        .map(Compare::Transport)
        .map_err(|_| {
            format!(
                "{s:?} is neither a transport (embedded, kernel, tap, memif, ring, net_tap, \
                 af_packet) nor a lower layer (mpa, sctp)"
            )
        })
}

/// A transport on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// tcp-lite over the in-memory link.
    Embedded,
    /// Linux TCP over loopback.
    Kernel,
    /// tcp-lite over a TAP device, to Linux TCP in a network namespace.
    Tap,
    /// tcp-lite over DPDK memif.
    Memif,
    /// tcp-lite over a DPDK net_ring pair (in this process only).
    Ring,
    /// tcp-lite over DPDK's TAP driver, to Linux TCP in a namespace.
    #[value(name = "net_tap")]
    NetTap,
    /// tcp-lite over DPDK's AF_PACKET driver on a veth pair, to Linux TCP.
    #[value(name = "af_packet")]
    AfPacket,
    /// tcp-lite over a PCI NIC (--server or HOST only).
    Pci,
}

impl TransportArg {
    /// Whether it runs on a DPDK port (EAL's memory, the port's checksum
    /// offloads).
    pub fn is_dpdk(self) -> bool {
        matches!(
            self,
            TransportArg::Memif
                | TransportArg::Ring
                | TransportArg::NetTap
                | TransportArg::AfPacket
                | TransportArg::Pci
        )
    }

    /// The single-RNIC transport of a --server or HOST run, if this is one.
    pub fn peer(self) -> Option<PeerTransport> {
        match self {
            TransportArg::Kernel => Some(PeerTransport::Kernel),
            TransportArg::Memif => Some(PeerTransport::Memif),
            TransportArg::NetTap => Some(PeerTransport::NetTap),
            TransportArg::AfPacket => Some(PeerTransport::AfPacket),
            TransportArg::Pci => Some(PeerTransport::Pci),
            TransportArg::Embedded | TransportArg::Tap | TransportArg::Ring => None,
        }
    }
}

/// Who runs the workload's two sides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Both RNICs in this process, over this transport.
    Local(TransportArg),
    /// The client of a `bench --server` at this address.
    Client(String),
    /// A server for clients elsewhere.
    Server,
}

/// What to run, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The operation.
    pub op: Op,
    /// Bandwidth or latency.
    pub mode: Mode,
    /// Sizes, in order.
    pub sizes: Vec<usize>,
    /// When each size stops.
    pub stop: Stop,
    /// Who runs what.
    pub role: Role,
}

/// The largest message `-a` reaches.
pub const SIZE_MAX: usize = 8 << 20;

/// The most memory one RNIC of a run registers: 4 GiB (-q 1024 of 1 MiB
/// messages fit, of 2 MiB do not), checked before anything is allocated.
pub const MEMORY_MAX: usize = 4 << 30;

/// `--out` when not given.
pub const OUT_DEFAULT: &str = "bench-out";

/// The shortest `-D`, in seconds: a shorter run could end before its first
/// message completes and report nothing.
pub const DURATION_MIN: f64 = 0.01;

impl Args {
    /// The DSCP of `--tos` (0 without it).
    pub fn dscp(&self) -> u8 {
        self.tos.map_or(0, |tos| tos >> 2)
    }

    /// The QPs beside a latency run (`--active` or `--idle`), and whether
    /// they are busy.
    pub fn beside(&self) -> (usize, bool) {
        if self.idle > 0 {
            (self.idle, false)
        } else {
            (self.active, true)
        }
    }

    /// The IP MTU: --mtu, or 9000 (1500 where net_tap runs).
    pub fn mtu(&self) -> usize {
        let net_tap = self.transport == Some(TransportArg::NetTap)
            || self
                .compare
                .contains(&Compare::Transport(TransportArg::NetTap));
        self.mtu.unwrap_or(if net_tap { 1500 } else { 9000 })
    }

    /// Checks the arguments, saying what to fix.
    pub fn plan(&self) -> Result<Plan, String> {
        let op = self.op.map_or(Op::Write, OpArg::op);
        let mode = if self.lat {
            Mode::Latency
        } else {
            Mode::Bandwidth
        };
        let sizes: Vec<usize> = if op.is_atomic() {
            if self.size.is_some_and(|s| s != 8) {
                return Err(format!("{} moves 8 octets: drop -s or use -s 8", op.name()));
            }
            if self.all {
                return Err(format!(
                    "-a runs every size, but {} moves 8 octets only: drop -a",
                    op.name()
                ));
            }
            vec![8]
        } else if self.all {
            if self.size.is_some() {
                return Err("-a runs every size: drop -s".into());
            }
            (1..=23).map(|shift| 1usize << shift).collect()
        } else {
            let size = self.size.unwrap_or(match mode {
                Mode::Bandwidth => 65536,
                Mode::Latency => 2,
            });
            if !(1..=SIZE_MAX).contains(&size) {
                return Err(format!("-s {size}: sizes go from 1 to {SIZE_MAX} octets"));
            }
            if mode == Mode::Latency && op == Op::Write && size < 2 {
                return Err(
                    "write latency needs -s 2 or more (the last octet is the marker)".into(),
                );
            }
            vec![size]
        };
        let stop = match (self.iters, self.duration) {
            (Some(0), _) => return Err("-n 0: give at least one iteration".into()),
            (Some(n), _) => Stop::Iterations(n),
            (None, Some(d)) if !(DURATION_MIN..=3600.0).contains(&d) => {
                return Err(format!(
                    "-D {d}: give a duration in seconds from {DURATION_MIN} to 3600 (a shorter \
                     run may end before its first message completes)"
                ))
            }
            (None, Some(d)) => Stop::Duration(Duration::from_secs_f64(d)),
            (None, None) => Stop::Iterations(match mode {
                Mode::Bandwidth => 5000,
                Mode::Latency => 1000,
            }),
        };
        if !(1..=crate::endpoint::QPS_MAX).contains(&self.qps) {
            return Err(format!(
                "-q {}: give 1 to {} queue pairs",
                self.qps,
                crate::endpoint::QPS_MAX
            ));
        }
        if mode == Mode::Latency && self.qps != 1 {
            return Err("latency runs use one queue pair: drop -q".into());
        }
        if !(1..=crate::endpoint::QUEUE_DEPTH).contains(&self.depth) {
            return Err(format!(
                "-t {}: give a depth of 1 to {}",
                self.depth,
                crate::endpoint::QUEUE_DEPTH
            ));
        }
        if self.active > 0 && !(self.lat && matches!(self.op, Some(OpArg::Write))) {
            return Err(
                "--active goes with a Write latency run: bench write --lat --active N".into(),
            );
        }
        if let Some(tos) = self.tos {
            if tos & 3 != 0 {
                return Err(format!(
                    "--tos {tos}: the low two bits are ECN's; give a multiple of 4 (184 for EF, DSCP 46)"
                ));
            }
            if self.llp == LlpArg::Sctp {
                return Err("--tos: DDP over SCTP is not marked; it is for MPA over TCP".into());
            }
        }
        if self.urgent && self.llp == LlpArg::Sctp {
            return Err(
                "--urgent: DDP over SCTP has no urgent class; it is for MPA over TCP".into(),
            );
        }
        if self.idle > 0 && !(self.lat && matches!(self.op, Some(OpArg::Write))) {
            return Err("--idle goes with a Write latency run: bench write --lat --idle N".into());
        }
        // Checked before it is added to: `--active` or `--idle` near
        // usize::MAX overflowed the sum (a panic; wrapped to 0 without
        // overflow checks, which passed; found by a review).
        if self.qps.saturating_add(self.beside().0) > crate::endpoint::QPS_MAX {
            return Err(format!(
                "-q {} and {} QPs beside: give at most {} QPs in all",
                self.qps,
                self.beside().0,
                crate::endpoint::QPS_MAX
            ));
        }
        // The QPs that keep -t work requests in flight: the run's, and
        // the busy ones beside a latency run.
        let busy = self.qps + self.active;
        if busy * self.depth > crate::endpoint::IN_FLIGHT_MAX {
            let qps = if self.active > 0 {
                format!("(-q {} + --active {})", self.qps, self.active)
            } else {
                format!("-q {}", self.qps)
            };
            return Err(format!(
                "{qps} x -t {} work requests in flight: the CQ holds {}; give -t {} or less, \
                 or fewer QPs",
                self.depth,
                crate::endpoint::IN_FLIGHT_MAX,
                (crate::endpoint::IN_FLIGHT_MAX / busy).max(1)
            ));
        }
        if !(1280..=65000).contains(&self.mtu()) {
            return Err(format!(
                "--mtu {}: give an MTU of 1280 to 65000",
                self.mtu()
            ));
        }
        if self.port == 0 {
            return Err("-p 0: give a port from 1 to 65535".into());
        }
        let role = match (&self.host, self.server) {
            (Some(host), _) => Role::Client(host.clone()),
            (None, true) => Role::Server,
            (None, false) => Role::Local(self.transport.unwrap_or(TransportArg::Embedded)),
        };
        // Kernel TCP in this process listens next to the run's port.
        let kernel_here = matches!(role, Role::Local(TransportArg::Kernel))
            || self
                .compare
                .contains(&Compare::Transport(TransportArg::Kernel));
        if kernel_here && self.port == u16::MAX {
            return Err(
                "-p 65535: the kernel TCP run listens on -p + 1; give -p 65534 or less".into(),
            );
        }
        match (&role, self.transport) {
            (Role::Local(TransportArg::Pci), _) => {
                return Err(
                    "--transport pci joins this host to another: give a HOST, or run \
                            --server"
                        .into(),
                )
            }
            (Role::Local(_), _) => {
                // A run in this process makes its own link (a namespace,
                // veth or TAP device, memif socket): these would be ignored.
                let link = &self.link;
                let given = [
                    ("--ip", link.ip.is_some()),
                    ("--tap", link.tap.is_some()),
                    ("--netns", link.netns.is_some()),
                    ("--bridge", link.bridge.is_some()),
                    ("--iface", link.iface.is_some()),
                    ("--pci", link.pci.is_some()),
                    ("--memif-socket", link.memif_socket_given()),
                ];
                if let Some((name, _)) = given.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "{name} places a --server or a HOST client on a link; a run without \
                         them makes its own (both ends in this process): drop {name}, or run \
                         --server and a client"
                    ));
                }
            }
            (_, Some(t)) if t.peer().is_none() => {
                return Err(
                    "--server and HOST runs use kernel, memif, net_tap, af_packet or pci".into(),
                );
            }
            (_, Some(t)) if t != TransportArg::Kernel && self.link.ip.is_none() => {
                return Err(format!(
                    "--transport {} to or as a server needs --ip ADDR/PREFIX, our address on the \
                     link",
                    t.to_possible_value()
                        .map_or("?".into(), |v| v.get_name().to_string())
                ));
            }
            _ => {}
        }
        if let Role::Client(_) | Role::Server = &role {
            self.check_peer_link(&role)?;
        }
        if role == Role::Server {
            self.check_server_options()?;
        }
        let cpus = self.link.cpus()?.unwrap_or_else(dataplane::lcore::cpus);
        if !self.cores.is_empty() {
            match &role {
                Role::Local(TransportArg::Memif | TransportArg::Ring | TransportArg::Embedded) => {}
                Role::Local(_) => {
                    return Err("--cores runs both ends of each core's connections in this \
                                process: use --transport memif, ring or embedded (or run a \
                                --server and its HOST client on another transport)"
                        .into())
                }
                Role::Server if self.cores.len() > 1 => {
                    return Err("--server --cores takes one count: the cores it serves on".into())
                }
                Role::Server | Role::Client(_) => {}
            }
            if self.flood.is_some() && !matches!(role, Role::Local(_)) {
                return Err("--flood runs in one process: drop HOST and --server".into());
            }
            if mode == Mode::Latency && role != Role::Server {
                return Err("--cores measures bandwidth: drop --lat".into());
            }
            if self.flood.is_some() && self.duration.is_none() {
                return Err("--flood runs as long as the workload: give -D".into());
            }
            if let Some(n) = self.flood {
                if !(1..=crate::endpoint::CONNECTIONS_MAX).contains(&n) {
                    return Err(format!(
                        "--flood {n}: give 1 to {} (the most connections a core's stack holds \
                         open)",
                        crate::endpoint::CONNECTIONS_MAX
                    ));
                }
            }
            // Counts in rising order, each once: the scaling line compares
            // each with the first (found by a review: `--cores 2,1`
            // printed the inverse of the scaling, `--cores 1,1` ran the
            // one-core run twice).
            if self.cores.windows(2).any(|w| w[0] >= w[1]) {
                let list: Vec<String> = self.cores.iter().map(|k| k.to_string()).collect();
                return Err(format!(
                    "--cores {}: give each count once, in rising order (e.g. --cores 1,2)",
                    list.join(",")
                ));
            }
            for &k in &self.cores {
                if k == 0 || k > cpus.len() {
                    return Err(format!(
                        "--cores {k}: give 1 to {} (the CPUs this process may use{})",
                        cpus.len(),
                        if self.link.lcores.is_some() {
                            ", as -l lists them"
                        } else {
                            ""
                        }
                    ));
                }
                if k > self.qps && role != Role::Server {
                    return Err(format!(
                        "-q {} over {k} cores leaves a core without a queue pair: give -q {k} \
                         or more",
                        self.qps
                    ));
                }
            }
        }
        if let Role::Local(t) = &role {
            if self.compare.contains(&Compare::Transport(*t)) {
                return Err(
                    "--compare names the transport already measured: compare another".into(),
                );
            }
        }
        if self
            .compare
            .contains(&Compare::Transport(TransportArg::Pci))
        {
            return Err(
                "--compare pci: a baseline runs both ends in this process, and pci joins this \
                 host to another; compare embedded, kernel, tap, memif, ring, net_tap or \
                 af_packet"
                    .into(),
            );
        }
        // DPDK's memory and tcp-lite's checksums where no run would use
        // them: refused, not ignored. The transports of this invocation: the
        // run's own and its --compare baselines'.
        let run_on = match &role {
            Role::Local(t) => *t,
            Role::Client(_) | Role::Server => self.transport.unwrap_or(TransportArg::Kernel),
        };
        let transports: Vec<TransportArg> = std::iter::once(run_on)
            .chain(self.compare.iter().filter_map(|c| match c {
                Compare::Transport(t) => Some(*t),
                Compare::Llp(_) => None,
            }))
            .collect();
        let dpdk = transports.iter().any(|t| t.is_dpdk());
        if self.link.hugepages != HugepagesArg::Auto && !dpdk {
            return Err(
                "--hugepages is EAL's memory, and no run here is on a DPDK port (memif, ring, \
                 net_tap, af_packet or pci): drop it"
                    .into(),
            );
        }
        if self.link.sw_checksums && !dpdk && !transports.contains(&TransportArg::Embedded) {
            return Err(
                "--sw-checksums is tcp-lite's on a DPDK port or the embedded link; kernel TCP \
                 and the TAP device do their own: drop it"
                    .into(),
            );
        }
        if let Some(loss) = self.loss {
            if !(0.0..=50.0).contains(&loss) || loss.is_nan() {
                return Err(format!("--loss {loss}: give a percentage from 0 to 50"));
            }
            let embedded =
                |t: Option<TransportArg>| matches!(t, None | Some(TransportArg::Embedded));
            if !matches!(role, Role::Local(_))
                || !embedded(self.transport)
                || self.llp == LlpArg::Sctp
                || !self.cores.is_empty()
            {
                return Err(
                    "--loss drops frames on the embedded link: --transport embedded (the \
                     default), MPA, one core"
                        .into(),
                );
            }
            if !self.compare.is_empty() {
                return Err(
                    "--loss drops frames on the embedded link's MPA run only: a --compare \
                     baseline would run without loss, and its ratio would compare a lossy run \
                     with a lossless one; drop --compare (or --loss)"
                        .into(),
                );
            }
        }
        // The transport the run itself goes over: a --server and a HOST
        // client use kernel TCP unless --transport names another.
        let kernel = match &role {
            Role::Local(t) => *t == TransportArg::Kernel,
            Role::Client(_) | Role::Server => {
                self.transport.unwrap_or(TransportArg::Kernel) == TransportArg::Kernel
            }
        };
        if self.rx_buffered
            && (kernel
                || self.llp == LlpArg::Sctp
                || self.compare.iter().any(|c| matches!(c, Compare::Llp(_))))
        {
            return Err(
                "--rx-buffered picks tcp-lite's receive path: kernel TCP (a --server's and a \
                 HOST client's without --transport) and DDP over SCTP have one each (drop it)"
                    .into(),
            );
        }
        // MPA's options, where no run is MPA's.
        if self.llp == LlpArg::Sctp && !self.compare.contains(&Compare::Llp(LlpArg::Mpa)) {
            let given = [("--markers", self.markers), ("--no-crc", self.no_crc)];
            if let Some((name, _)) = given.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "{name} is MPA's, and --llp sctp runs no MPA (DDP over SCTP has neither \
                     markers nor MPA's CRC; SCTP checks its own): drop {name}, or add \
                     --compare mpa"
                ));
            }
        }
        if self.compare.contains(&Compare::Llp(self.llp)) {
            return Err(format!(
                "--compare {} names the lower layer already measured (--llp): compare the other",
                self.llp.name()
            ));
        }
        if self.llp == LlpArg::Sctp || self.compare.iter().any(|c| matches!(c, Compare::Llp(_))) {
            let sctp_ok = |t: TransportArg| {
                matches!(
                    t,
                    TransportArg::Embedded
                        | TransportArg::Kernel
                        | TransportArg::Memif
                        | TransportArg::Ring
                        | TransportArg::Tap
                        | TransportArg::NetTap
                        | TransportArg::AfPacket
                )
            };
            let local = match &role {
                Role::Local(t) => Some(*t),
                _ => None,
            };
            let runs_sctp = |t: TransportArg| {
                self.llp == LlpArg::Sctp
                    || self.compare.contains(&Compare::Llp(LlpArg::Sctp)) && Some(t) == local
            };
            let mut all: Vec<TransportArg> = local.into_iter().collect();
            all.extend(self.compare.iter().filter_map(|c| match c {
                Compare::Transport(t) => Some(*t),
                Compare::Llp(_) => None,
            }));
            if !self.cores.is_empty() {
                match &role {
                    Role::Local(
                        TransportArg::Embedded | TransportArg::Memif | TransportArg::Ring,
                    )
                    | Role::Client(_)
                    | Role::Server => {}
                    _ => {
                        return Err(
                            "--llp sctp --cores runs both ends of each core's association \
                             in this process (--transport embedded, memif or ring), each \
                             core's association to a HOST, or a --server's cores"
                                .into(),
                        )
                    }
                }
                if self.flood.is_some() {
                    return Err("--flood floods MPA startups: not with --llp sctp".into());
                }
            }
            if local.is_none() {
                // A server or a client alone: over Linux UDP or tcp-lite's
                // UDP on a DPDK port.
                let peer_ok = |t: TransportArg| {
                    matches!(
                        t,
                        TransportArg::Kernel
                            | TransportArg::Memif
                            | TransportArg::NetTap
                            | TransportArg::AfPacket
                            | TransportArg::Pci
                    )
                };
                match (&role, self.transport) {
                    (_, None | Some(TransportArg::Kernel)) => {}
                    (_, Some(t)) if peer_ok(t) => {}
                    (Role::Client(_), Some(_)) => {
                        return Err(
                            "--llp sctp to a server in another process (HOST) runs over \
                             --transport kernel (Linux UDP), memif, net_tap, af_packet or pci"
                                .into(),
                        )
                    }
                    _ => {
                        return Err(
                            "--llp sctp's server (--server) runs over --transport kernel \
                             (Linux UDP), memif, net_tap, af_packet or pci"
                                .into(),
                        )
                    }
                }
                if !self.compare.is_empty() {
                    return Err(
                        "--compare runs its baselines with both RNICs in this process: not \
                         with --server or HOST"
                            .into(),
                    );
                }
            }
            if let Some(t) = all.iter().find(|&&t| runs_sctp(t) && !sctp_ok(t)) {
                return Err(format!(
                    "--llp sctp runs on --transport embedded, kernel (kernel UDP), tap, memif, \
                     ring, net_tap or af_packet, not {t:?}"
                ));
            }
        }
        if (1..self.compare.len()).any(|i| self.compare[..i].contains(&self.compare[i])) {
            return Err("--compare names a baseline twice".into());
        }
        if let Role::Client(host) = &role {
            if host.is_empty() || host.starts_with('-') {
                return Err(format!("{host:?} is not a server address"));
            }
        }
        if self.flood.is_some() && !matches!(role, Role::Local(_)) {
            return Err("--flood runs in one process: drop HOST and --server".into());
        }
        if self.flood.is_some() && !self.cores.iter().any(|&k| k >= 2) {
            return Err(
                "--flood floods core 0 while the other cores run the workload: give --cores \
                 with a count of 2 or more (e.g. --cores 2 or --cores 1,2)"
                    .into(),
            );
        }
        self.check_memory(&role, &sizes)?;
        Ok(Plan {
            op,
            mode,
            sizes,
            stop,
            role,
        })
    }

    /// The link options of a `--server` or a HOST client that its transport
    /// (kernel TCP unless `--transport` names another) would ignore, and
    /// `--ip`, `--iface` and `--pci` where it needs them: refused before
    /// anything starts.
    fn check_peer_link(&self, role: &Role) -> Result<(), String> {
        use PeerTransport::{AfPacket, Kernel, Memif, NetTap, Pci};
        let Some(t) = self.transport.unwrap_or(TransportArg::Kernel).peer() else {
            // Refused by the caller.
            return Ok(());
        };
        let link = &self.link;
        // Each option: whether it was given, the transports that use it.
        let options: [(&str, bool, &[PeerTransport], &str); 7] = [
            (
                "--ip",
                link.ip.is_some(),
                &[Memif, NetTap, AfPacket, Pci],
                "memif, net_tap, af_packet or pci",
            ),
            ("--tap", link.tap.is_some(), &[NetTap], "net_tap"),
            (
                "--netns",
                link.netns.is_some(),
                &[NetTap, AfPacket],
                "net_tap or af_packet",
            ),
            ("--bridge", link.bridge.is_some(), &[NetTap], "net_tap"),
            ("--iface", link.iface.is_some(), &[AfPacket], "af_packet"),
            ("--pci", link.pci.is_some(), &[Pci], "pci"),
            (
                "--memif-socket",
                link.memif_socket_given(),
                &[Memif],
                "memif",
            ),
        ];
        if let Some((name, _, _, users)) = options
            .iter()
            .find(|(_, given, users, _)| *given && !users.contains(&t))
        {
            let who = match role {
                Role::Server => "--server",
                _ => "HOST client",
            };
            let over = if t == Kernel && self.transport.is_none() {
                "kernel (the default without --transport)".to_string()
            } else {
                t.name().to_string()
            };
            return Err(format!(
                "{name} is for --transport {users}; this {who} runs over {over}, which does not \
                 use it: drop {name} (or give the --transport it is for)"
            ));
        }
        if let Some(ip) = &link.ip {
            crate::link::parse_cidr(ip)?;
        }
        if t == AfPacket && link.iface.is_none() {
            return Err("--transport af_packet needs --iface, the interface to run on".into());
        }
        if t == Pci && link.pci.is_none() {
            return Err(
                "--transport pci needs --pci ADDRESS, the NIC's (bound to vfio-pci)".into(),
            );
        }
        Ok(())
    }

    /// The options of a client's run that a `--server` would ignore: it
    /// takes each connection's workload from its client, and its `-s`,
    /// `-a`, `-q` (and `--lat` with `--active` or `--idle`) only size its
    /// memory.
    fn check_server_options(&self) -> Result<(), String> {
        let ignored = [
            ("-D", self.duration.is_some()),
            ("-n", self.iters.is_some()),
            ("--json", self.json.is_some()),
            (
                "--out",
                self.out.as_path() != std::path::Path::new(OUT_DEFAULT),
            ),
            ("--tos", self.tos.is_some()),
            ("--urgent", self.urgent),
            ("--report_gbits", self.report_gbits),
            ("--shared-core", self.shared_core),
        ];
        match ignored.iter().find(|(_, given)| *given) {
            Some((name, _)) => Err(format!(
                "{name} is the client's: a --server takes each run's workload from its client \
                 and reports nothing of it; drop {name} (give it to the client)"
            )),
            None => Ok(()),
        }
    }

    /// The memory each RNIC of the run registers (`-q` QPs and those beside
    /// a latency run, two slots of the largest message each), held to
    /// [`MEMORY_MAX`] and to half this machine's memory over the RNICs of
    /// this process (two where both ends run here, or a baseline does).
    fn check_memory(&self, role: &Role, sizes: &[usize]) -> Result<(), String> {
        let largest = sizes.iter().copied().max().unwrap_or(8);
        let qps = self.qps + self.beside().0;
        let mut memory = crate::spec::memory_for(qps, largest);
        if *role == Role::Server {
            // A server has room for one QP of -a's largest size, whatever
            // -s says.
            memory = memory.max(crate::spec::memory_for(1, SIZE_MAX));
        }
        let rnics = if matches!(role, Role::Local(_)) || !self.compare.is_empty() {
            2
        } else {
            1
        };
        let physical = physical_memory();
        let limit = physical.map_or(MEMORY_MAX, |m| MEMORY_MAX.min(m / 2 / rnics));
        if memory <= limit {
            return Ok(());
        }
        let qps = match self.beside() {
            (0, _) => format!("-q {}", self.qps),
            (n, true) => format!("-q {} and --active {n}", self.qps),
            (n, false) => format!("-q {} and --idle {n}", self.qps),
        };
        let size = if self.all {
            format!("-a (up to {} MiB)", SIZE_MAX >> 20)
        } else {
            format!("-s {largest}")
        };
        let why = match physical {
            Some(m) => format!(
                "{} GiB at most, and half of this machine's {} MiB over {rnics} RNIC(s)",
                MEMORY_MAX >> 30,
                m >> 20
            ),
            None => format!("{} GiB at most", MEMORY_MAX >> 30),
        };
        Err(format!(
            "{qps} with {size}: each RNIC would register {} MiB (two slots of the largest \
             message a QP); it may register {} MiB ({why}): give fewer QPs (-q) or a smaller \
             size (-s)",
            memory >> 20,
            limit >> 20
        ))
    }
}

/// This machine's memory (`MemTotal` of `/proc/meminfo`), if it says.
fn physical_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
