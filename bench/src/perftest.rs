//! `bench perftest`: perftest's six RC tests (ib_write_bw, ib_read_bw,
//! ib_send_bw, ib_write_lat, ib_read_lat, ib_send_lat) over dpwarp's RNIC,
//! as server or client, against perftest itself (e.g. on Linux siw).
//!
//! perftest (linux-rdma/perftest; read from 4.5-0.17 = "6.06", the Debian
//! bookworm package, and from siw's captures in `tests/data/golden/ib_*`)
//! runs, with `-R` (rdma_cm; iWARP has no other way to connect a QP):
//!
//! 1. A *control* connection to the port (18515): MPA, IRD = ORD = 0, no
//!    private data (from perftest's client; see below for ours). Every message on it is an untagged Send into the peer's
//!    single posted receive of 56 octets. Each exchange is the client's
//!    message, then the server's answer; so neither side ever has two
//!    messages in flight, which is all the one receive allows.
//! 2. On it: the version string (16 octets, NUL-padded; both sides refuse a
//!    peer older than 5.70), the cycle buffer (page size) and cache line
//!    size (4-octet big-endian each; both take the larger), the IB MTU enum
//!    as a decimal string (2 octets, e.g. `"3\0"`), and a *handshake* of
//!    `pingpong_dest` (below).
//! 3. A *data* connection to the same port (IRD = ORD = the outstanding
//!    reads for the Read tests, else 0), then a handshake. A client retries
//!    it (10 times, 100 ms apart): perftest's server listens again only
//!    after the first handshake.
//! 4. The test's handshakes (each side's buffer as `rkey`/`vaddr`), the
//!    test, and the last handshakes and reports: see [`Test`]'s variants.
//!
//! perftest's connections do not say which they are (its server listens
//! for one client's data connections only); dpwarp's client says so in its
//! MPA Requests' private data ([`CONTROL_MARK`], [`DATA_MARK`]), which
//! perftest's server ignores and dpwarp's many-client server
//! ([`PerftestService`]) reads.
//!
//! `pingpong_dest` is 56 octets, big-endian: `lid`, `out_reads`, `qpn`,
//! `psn` (u32 each), `rkey` (u32) and 4 octets of padding, `vaddr` (u64),
//! `gid` (16 octets), `srqn`, `gid_index` (u32 each). A report is five
//! 8-octet exchanges: size and iterations (u64), peak and average MB/s and
//! the message rate in Mpps (f64 bits, big-endian).
//!
//! perftest verifies no data; neither can we verify its buffers (random,
//! zero for write_lat).
//! What is checked here: every work request completes successfully, every
//! message received has the test's size, the handshakes and reports parse,
//! and, as a server, the client's report names our size and iteration
//! count. The exit status is 0 only then.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use control::mpa::StartupConfig;
use control::runtime::{Handoff, StartupResult};
use dataplane::CoreTransport;
use rnic_engine::cq::Wc;
use rnic_engine::verbs::QpHandle;
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};

pub mod machine;
pub mod service;

use machine::{Layout, Machine, SizeOutcome, Status};
pub use service::{Gate, PerftestService, Slots};

use crate::endpoint::{now, Endpoint, QUEUE_DEPTH};
use crate::link::{self, LinkArgs, PeerTransport};
use crate::pace::Pacer;
use crate::rping::term_text;

/// perftest's port.
pub const PORT: u16 = 18515;
/// The private data of dpwarp's client's control connection's MPA Request
/// (RFC 5044 §7.1; after RFC 6581's IRD/ORD in enhanced mode): a server
/// of many clients then never takes it for a data connection of another
/// client on the same host (see [`service`]).
pub const CONTROL_MARK: &[u8] = b"dpwarp perftest control";
/// The private data of dpwarp's client's data connections' MPA Requests.
pub const DATA_MARK: &[u8] = b"dpwarp perftest data";
/// The perftest protocol we speak (perftest 4.5-0.17's `PACKAGE_VERSION`).
pub const VERSION: &str = "6.06";
/// The oldest peer perftest (and so we) work with.
const VERSION_MIN: f64 = 5.70;
/// Octets of a `pingpong_dest`.
pub const DEST_LEN: usize = 56;
/// Octets of the version string.
const VERSION_LEN: usize = 16;
/// Our cycle buffer (the page size) and cache line, as perftest's.
const CYCLE_BUFFER: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// The largest cycle buffer a peer may ask for (our buffers are sized for it).
const CYCLE_MAX: u32 = 64 * 1024;
/// perftest's largest message.
pub const SIZE_MAX: u64 = 8 << 20;
/// perftest's fewest iterations.
pub const ITERS_MIN: u64 = 5;
/// The most iterations (each keeps its timestamps, as perftest's do).
pub const ITERS_MAX: u64 = 10_000_000;
/// The deepest queue perftest asks for by default, and ours.
const DEPTH_MAX: u32 = QUEUE_DEPTH as u32;
/// The deepest IRRQ/ORQ (`QP_DEPTH_MAX`; siw's too).
const OUT_READS_MAX: u16 = 128;
/// How long any step may wait for the peer.
const STALL_LIMIT: Duration = Duration::from_secs(10);
/// perftest's client: attempts at the data connection, and the pause.
const CONNECT_TRIES: u32 = 10;
const CONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long, after a run, we let the peer close first (see
/// `Session::finish`).
const HANG_UP_GRACE: Duration = Duration::from_secs(1);
/// perftest drops the largest samples from its latency statistics.
const LAT_MEASURE_TAIL: usize = 2;

/// A perftest test (RC, one QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Test {
    /// RDMA Writes, the client to the server's buffer. After the run the
    /// client sends a handshake and its report; the server answers both
    /// (perftest's server sends a report it never filled); a last
    /// handshake closes.
    #[value(name = "write_bw", alias = "ib_write_bw")]
    WriteBw,
    /// RDMA Reads by the client from the server's buffer; as `write_bw`.
    #[value(name = "read_bw", alias = "ib_read_bw")]
    ReadBw,
    /// Sends, the client to the server's receives. iWARP has no RNR retry,
    /// so the server RDMA Writes its receive count (u32, little-endian, as
    /// an x86 host holds it) into the client's credit word whenever the
    /// count modulo `rx_depth` is a multiple of `rx_depth / 3`, and the
    /// client keeps fewer than `rx_depth` Sends beyond the last count. The handshakes carry the credit word
    /// as `rkey`/`vaddr`. No report; a last handshake closes.
    #[value(name = "send_bw", alias = "ib_send_bw")]
    SendBw,
    /// RDMA Write ping-pong into each other's buffer, the server first:
    /// each side waits until the last octet of its buffer holds the
    /// iteration number (mod 256), then writes its own. No last handshake.
    #[value(name = "write_lat", alias = "ib_write_lat")]
    WriteLat,
    /// RDMA Reads by the client, one at a time; a last handshake closes.
    #[value(name = "read_lat", alias = "ib_read_lat")]
    ReadLat,
    /// Send ping-pong, the client first, into receives posted before a
    /// handshake; a last handshake closes.
    #[value(name = "send_lat", alias = "ib_send_lat")]
    SendLat,
}

/// What a test's work requests do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verb {
    Write,
    Read,
    Send,
}

impl Test {
    fn verb(self) -> Verb {
        match self {
            Test::WriteBw | Test::WriteLat => Verb::Write,
            Test::ReadBw | Test::ReadLat => Verb::Read,
            Test::SendBw | Test::SendLat => Verb::Send,
        }
    }

    fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::ReadBw | Test::SendBw)
    }

    /// perftest's title line.
    fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
        }
    }
}

/// `bench perftest`: perftest's command line for its RC tests with `-R`.
#[derive(Debug, Parser)]
#[command(
    name = "bench perftest",
    bin_name = "bench perftest",
    about = "perftest (ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat, ib_read_lat, \
             ib_send_lat with -R) over dpwarp, as server (no SERVER given) or client; exit \
             status 0 only when every work request completed and the exchanges parsed"
)]
pub struct PerftestArgs {
    /// The test (perftest's program name, with or without `ib_`).
    #[arg(value_enum)]
    pub test: Test,

    /// The server to connect to; without it, be the server.
    pub server: Option<Ipv4Addr>,

    /// Port (perftest's 18515).
    #[arg(short = 'p', long = "port", default_value_t = PORT)]
    pub port: u16,

    /// Message size in octets (default: 65536 for bandwidth tests, 2 for
    /// latency tests).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,

    /// Iterations, at least 5 (perftest's defaults: 5000 for write_bw,
    /// 1000 for the others).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,

    /// Every size from 2 to 8388608 octets, one after another (perftest's
    /// `-a`). The server must be told too (perftest says nothing about it
    /// on the wire).
    #[arg(short = 'a', long = "all", conflicts_with = "size")]
    pub all: bool,

    /// Run for this many seconds instead of -n iterations (perftest's
    /// `-D`; not with -a). Both sides.
    #[arg(short = 'D', long = "duration", conflicts_with_all = ["iters", "all"])]
    pub duration: Option<u64>,

    /// Data connections, each a QP running the test (perftest's `-q`;
    /// bandwidth tests; default 1). Both sides.
    #[arg(short = 'q', long = "qp")]
    pub qps: Option<u16>,

    /// Both directions at once (perftest's `-b`; bandwidth tests). Both
    /// sides.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,

    /// Work requests in flight (default: 128 for bandwidth, 1 for latency;
    /// at most the iterations).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,

    /// Receives posted, Send tests (default 512; at most the iterations,
    /// then made even, as perftest does). Both sides must agree.
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,

    /// Outstanding RDMA Reads, Read tests (IRD and ORD; default 128).
    #[arg(short = 'o', long = "outs")]
    pub out_reads: Option<u16>,

    /// perftest's rdma_cm flag: always so here (iWARP connects no other
    /// way); accepted so perftest's command lines work unchanged.
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,

    /// perftest's "do not fail on CPU frequency" flag: accepted, no effect.
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,

    /// Kernel TCP: the address to listen on (server), or to connect from
    /// (client: one of this host's addresses, e.g. to appear as another
    /// client host).
    #[arg(long, default_value_t = Ipv4Addr::UNSPECIFIED)]
    pub bind: Ipv4Addr,

    /// What carries TCP: `kernel` (Linux TCP sockets), `tap` (tcp-lite on
    /// a TAP device's fd), `net_tap` (tcp-lite on DPDK's TAP driver),
    /// `af_packet` (DPDK's AF_PACKET driver, --iface), `memif` (DPDK memif,
    /// to another dpwarp) or `pci` (a NIC bound to vfio-pci, --pci). All
    /// but `kernel` need --ip and root.
    #[arg(long, value_enum, default_value_t = PeerTransport::Kernel)]
    pub transport: PeerTransport,

    /// The link (TAP and DPDK options; the TAP interface defaults to
    /// dpwperf0).
    #[command(flatten)]
    pub link: LinkArgs,

    /// MPA revision: 2 (RFC 6581 enhanced, IRD/ORD exchanged) or 1.
    #[arg(long = "mpa-rev", default_value_t = 2)]
    pub mpa_rev: u8,

    /// Ask for MPA CRC32c (used if either side asks).
    #[arg(long)]
    pub crc: bool,

    /// Spin the core without rest, as a poll-mode core does. By default
    /// it naps 50 us after each idle turn once it has been idle for
    /// 200 us (`bench::pace`), which leaves the CPU to a slow peer on the
    /// same machine (siw in an emulated guest); a peer that answers within
    /// 200 us never meets a nap.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,

    /// Client: milliseconds to wait after an MPA Reply before the first
    /// FPDU (Linux siw 6.1 answers before its receive path is ready; see
    /// `bench rping --help`).
    #[arg(long = "settle-ms", default_value_t = 50)]
    pub settle_ms: u64,

    /// Server: send before the client's first FPDU where the test needs it
    /// (ib_write_lat's server writes first), as Linux siw does. RFC 5044
    /// §7.1's MPA fencing forbids it; without this flag a write_lat client
    /// must offer RFC 6581 peer-to-peer (an RTR), as dpwarp's client does
    /// (siw: `echo 1 > /sys/module/siw/parameters/peer_to_peer`).
    #[arg(long)]
    pub unfenced: bool,

    /// IP MTU of the path (FPDUs are sized for it; its IB MTU is told to
    /// the peer).
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,
}

/// The test's numbers, after perftest's own adjustments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// The test.
    pub test: Test,
    /// Whether we are the client.
    pub client: bool,
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Work requests in flight.
    pub tx_depth: u32,
    /// Receives posted (Send tests; 1 otherwise, as perftest).
    pub rx_depth: u32,
    /// Outstanding Reads (Read tests; 1 otherwise, as perftest tells).
    pub out_reads: u16,
    /// Every size from 2 to 2^23 (`size` is then the largest).
    pub all_sizes: bool,
    /// Duration mode: how long each side runs.
    pub duration: Option<Duration>,
    /// Data connections (QPs).
    pub qps: u16,
    /// Both directions at once.
    pub duplex: bool,
}

impl PerftestArgs {
    /// The test's numbers as perftest would set them, or what to fix.
    pub fn params(&self) -> Result<Params, String> {
        let test = self.test;
        let size = if self.all {
            SIZE_MAX
        } else {
            self.size.unwrap_or(if test.is_bw() { 65536 } else { 2 })
        };
        let qps = self.qps.unwrap_or(1);
        if qps != 1 && !test.is_bw() {
            return Err("-q: multiple QPs are for the bandwidth tests (perftest's too)".into());
        }
        if !(1..=machine::QPS_MAX).contains(&qps) {
            return Err(format!("-q {qps}: give 1 to {}", machine::QPS_MAX));
        }
        if self.bidirectional && !test.is_bw() {
            return Err("-b: both directions are for the bandwidth tests (perftest's too)".into());
        }
        let duration = match self.duration {
            Some(d) if !(1..=86_400).contains(&d) => {
                return Err(format!("-D {d}: give 1 to 86400 seconds"))
            }
            d => d.map(Duration::from_secs),
        };
        if !(1..=SIZE_MAX).contains(&size) {
            return Err(format!("-s {size}: give 1 to {SIZE_MAX} octets"));
        }
        let iters = self
            .iters
            .unwrap_or(if test == Test::WriteBw { 5000 } else { 1000 });
        if iters < ITERS_MIN {
            return Err(format!("-n {iters}: give at least {ITERS_MIN}"));
        }
        if iters.saturating_mul(u64::from(qps)) > ITERS_MAX {
            return Err(format!(
                "-n {iters} -q {qps}: every message's timestamps are kept; give at most \
                 {ITERS_MAX} in all"
            ));
        }
        // Duration mode has no iteration count to cap the depths at.
        let cap = if duration.is_some() { u64::MAX } else { iters };
        let clamp = |v: u32| u64::from(v).min(cap) as u32;
        let tx_depth = clamp(self.tx_depth.unwrap_or(if test.is_bw() { 128 } else { 1 }));
        if !(1..=DEPTH_MAX).contains(&tx_depth) {
            return Err(format!("-t {tx_depth}: give 1 to {DEPTH_MAX}"));
        }
        let rx_depth = if test.verb() == Verb::Send {
            let mut rx = clamp(self.rx_depth.unwrap_or(DEPTH_MAX));
            // perftest: "WA for a bug when rx_depth is odd in SEND".
            if rx % 2 == 1 {
                rx += 1;
            }
            if !(1..=DEPTH_MAX).contains(&rx) {
                return Err(format!(
                    "-r {}: give 1 to {DEPTH_MAX}",
                    self.rx_depth.unwrap_or(0)
                ));
            }
            // perftest's send_bw server credits every rx_depth / 3 receives
            // (and divides by zero below 3).
            if test == Test::SendBw && rx < 3 {
                return Err(format!(
                    "-r {rx}: send_bw needs at least 3 (perftest's too)"
                ));
            }
            rx
        } else {
            if self.rx_depth.is_some() {
                return Err("-r is for the Send tests".into());
            }
            1
        };
        let out_reads = if test.verb() == Verb::Read {
            // As perftest: 0 means the device's most, more is cut to it.
            let o = self.out_reads.unwrap_or(0);
            if o > OUT_READS_MAX {
                eprintln!(
                    "bench perftest: -o {o}: above the most outstanding reads ({OUT_READS_MAX}); \
                     using {OUT_READS_MAX}"
                );
            }
            if o == 0 || o > OUT_READS_MAX {
                OUT_READS_MAX
            } else {
                o
            }
        } else {
            if self.out_reads.is_some() {
                return Err("-o is for the Read tests".into());
            }
            1
        };
        if !(1..=2).contains(&self.mpa_rev) {
            return Err(format!("--mpa-rev {}: give 1 or 2", self.mpa_rev));
        }
        // Found by a review: ignored on a client.
        if self.unfenced && self.server.is_some() {
            return Err(
                "--unfenced is the server's (it sends before the client's first FPDU): drop it \
                 on the client"
                    .into(),
            );
        }
        if self.transport != PeerTransport::Kernel {
            if self.link.ip.is_none() {
                return Err(format!(
                    "--transport {} needs --ip ADDR/PREFIX, our address on the link",
                    self.transport.name()
                ));
            }
            self.link.address()?;
        }
        self.link.cpus()?;
        if !(576..=9000).contains(&self.mtu) {
            return Err(format!("--mtu {}: give 576 to 9000", self.mtu));
        }
        if self.settle_ms > 10_000 {
            return Err(format!(
                "--settle-ms {}: give at most 10000",
                self.settle_ms
            ));
        }
        Ok(Params {
            test,
            client: self.server.is_some(),
            size,
            iters,
            tx_depth,
            rx_depth,
            out_reads,
            all_sizes: self.all,
            duration,
            qps,
            duplex: self.bidirectional,
        })
    }

    /// MPA for the control connection (`data` false) or the data one.
    pub fn startup(&self, p: &Params, data: bool) -> StartupConfig {
        let reads = if data && p.test.verb() == Verb::Read {
            p.out_reads
        } else {
            0
        };
        // ib_write_lat's server writes first: the client offers RFC 6581's
        // peer-to-peer model, whose RTR lifts the server's MPA fencing.
        let p2p = data && p.test == Test::WriteLat && self.mpa_rev == 2;
        StartupConfig {
            revision: self.mpa_rev,
            enhanced: self.mpa_rev == 2,
            crc: self.crc,
            peer_to_peer: p2p && p.client,
            ird: reads,
            ord: reads,
            ird_max: OUT_READS_MAX,
            ..StartupConfig::default()
        }
    }

    /// The IB MTU enum perftest tells its peer: the largest IB MTU (256 to
    /// 4096) within the path's.
    pub fn ib_mtu(&self) -> u8 {
        let mut e = 1;
        while e < 5 && (256usize << e) <= self.mtu {
            e += 1;
        }
        e
    }
}

/// perftest's `pingpong_dest`: one side's QP and buffer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// IB LID (0 on iWARP).
    pub lid: u32,
    /// Outstanding Reads.
    pub out_reads: u32,
    /// QP number.
    pub qpn: u32,
    /// Packet sequence number (random; meaningless on iWARP).
    pub psn: u32,
    /// The buffer's STag.
    pub rkey: u32,
    /// The buffer's address (tagged offset).
    pub vaddr: u64,
    /// GID.
    pub gid: [u8; 16],
    /// SRQ number.
    pub srqn: u32,
    /// GID index.
    pub gid_index: u32,
}

impl Dest {
    /// Its 56 octets (the padding after `rkey` zero).
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut o = [0; DEST_LEN];
        o[0..4].copy_from_slice(&self.lid.to_be_bytes());
        o[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        o[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        o[12..16].copy_from_slice(&self.psn.to_be_bytes());
        o[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        o[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        o[32..48].copy_from_slice(&self.gid);
        o[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        o[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        o
    }

    /// Reads one; it must be exactly 56 octets.
    pub fn decode(o: &[u8]) -> Result<Dest, String> {
        if o.len() != DEST_LEN {
            return Err(format!(
                "a handshake of {} octets (perftest's are {DEST_LEN})",
                o.len()
            ));
        }
        let u32_at = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
        let mut vaddr = [0; 8];
        vaddr.copy_from_slice(&o[24..32]);
        let mut gid = [0; 16];
        gid.copy_from_slice(&o[32..48]);
        Ok(Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(vaddr),
            gid,
            srqn: u32_at(48),
            gid_index: u32_at(52),
        })
    }
}

/// A bandwidth report, as perftest exchanges it.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Messages.
    pub iters: u64,
    /// Peak MB/s (2^20 octets).
    pub bw_peak: f64,
    /// Average MB/s.
    pub bw_avg: f64,
    /// Average message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// Its five 8-octet fields, in exchange order.
    pub fn fields(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// From the five fields.
    pub fn from_fields(f: &[[u8; 8]; 5]) -> BwReport {
        let d = |i: usize| f64::from_bits(u64::from_be_bytes(f[i]));
        BwReport {
            size: u64::from_be_bytes(f[0]),
            iters: u64::from_be_bytes(f[1]),
            bw_peak: d(2),
            bw_avg: d(3),
            msg_rate: d(4),
        }
    }
}

/// A version string's number, as perftest's `atof` reads it (0 if none).
pub fn version_number(octets: &[u8]) -> f64 {
    let end = octets.iter().position(|&b| b == 0).unwrap_or(octets.len());
    let text = String::from_utf8_lossy(&octets[..end]);
    let lead: String = text
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    lead.parse().unwrap_or(0.0)
}

/// perftest's `INC`: how far consecutive messages are apart in a buffer
/// (cache lines of `line` octets).
fn inc(size: u64, line: u64) -> u64 {
    if size > line {
        size.next_multiple_of(line)
    } else {
        line
    }
}

/// Where message `n` goes in a buffer of `cycle` octets (perftest cycles
/// messages of up to half the buffer through it, a cache line apart).
fn slot_offset(n: u64, size: u64, cycle: u64, line: u64) -> u64 {
    if size <= cycle / 2 {
        (n % (cycle / inc(size, line))) * inc(size, line)
    } else {
        0
    }
}

/// The TAP interface `bench perftest` makes when --tap is not given.
const DEFAULT_TAP: &str = "dpwperf0";

/// Runs `bench perftest`; returns the process's exit status.
pub fn main(argv: Vec<String>, stop: &AtomicBool) -> i32 {
    main_with(argv, stop, &Hooks::default())
}

/// What a test may do to a client's run beside what perftest's options
/// say ([`main_with`]): see the buffer its server offered, or read and
/// write elsewhere, as a hostile client would (the tests of what a server
/// lets one session reach of another's; perftest's own client has no way
/// to), or wait before its data connections, as a slow host's would.
#[derive(Debug, Default)]
pub struct Hooks {
    /// Every buffer the server offers taken as this `(STag, address)`
    /// instead.
    pub aim_at: Option<(u32, u64)>,
    /// Set to the buffer the server offered for the first QP (STag and
    /// address; send_bw's credit word) once its handshake told it, as it
    /// offered it.
    pub offered: std::sync::Mutex<Option<(u32, u64)>>,
    /// Set to why the run failed, as printed.
    pub failed: std::sync::Mutex<Option<String>>,
    /// How long to wait, once the server answered the handshake, before
    /// opening the data connections (turning the control connection).
    pub data_pause: Option<Duration>,
}

/// [`main`], with `hooks` on a client's run (a server's ignores them).
pub fn main_with(argv: Vec<String>, stop: &AtomicBool, hooks: &Hooks) -> i32 {
    let args = match PerftestArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    let p = match args.params() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("bench perftest: {why}");
            return 2;
        }
    };
    let emss = args.mtu - 52;
    let result = match args.transport {
        PeerTransport::Kernel => {
            let kc = KernelConfig {
                bind: args.bind,
                ..KernelConfig::default()
            };
            match KernelTransport::new(kc) {
                Ok(t) => run(t, emss, &args, &p, stop, hooks),
                Err(e) => Err(e.to_string()),
            }
        }
        PeerTransport::Tap => link::tap_stack(
            args.link.tap.as_deref().unwrap_or(DEFAULT_TAP),
            args.link.ip.as_deref().unwrap_or_default(),
            args.link.netns.as_deref(),
            args.link.bridge.as_deref(),
        )
        .and_then(|stack| {
            let emss = stack.emss();
            run(stack, emss, &args, &p, stop, hooks)
        }),
        dpdk => link::run_on_dpdk(
            dpdk,
            &args.link,
            args.mtu,
            !p.client,
            DEFAULT_TAP,
            |stack| {
                let emss = stack.emss();
                run(stack, emss, &args, &p, stop, hooks)
            },
        ),
    };
    match result {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("bench perftest: {why}");
            *hooks.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            1
        }
    }
}

fn run<T: CoreTransport>(
    transport: T,
    emss: usize,
    args: &PerftestArgs,
    p: &Params,
    stop: &AtomicBool,
    hooks: &Hooks,
) -> Result<(), String> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Peers are told only the STags of the session's slots (`Exposed`):
    // the rest of the memory is for local work only.
    let mut ep = Endpoint::new_local(transport, emss, seed, Layout::memory(p));
    ep.set_unfenced(args.unfenced);
    ep.set_pacing((!args.busy_poll).then(Pacer::default));
    if p.client {
        ep.set_settle(tcp_lite::Duration::from_millis(args.settle_ms));
    }
    print_banner(p, args);
    let results = if p.client {
        client(&mut ep, args, p, seed, stop, hooks)
    } else {
        server(&mut ep, args, p, seed, stop)
    }?;
    print_results(p, &results);
    Ok(())
}

/// The client: one session, its connections opened here.
fn client<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    args: &PerftestArgs,
    p: &Params,
    seed: u64,
    stop: &AtomicBool,
    hooks: &Hooks,
) -> Result<Vec<SizeOutcome>, String> {
    let mut m = Machine::new(*p, 0, args.ib_mtu(), seed);
    if let Some((stag, address)) = hooks.aim_at {
        m.aim_at(stag, address);
    }
    let mut told = false;
    let mut wcs = Vec::new();
    let result = (|| {
        let ctrl = connect(ep, args, p, false, stop, &mut m, &mut wcs)?;
        m.set_ctrl(ep, ctrl)?;
        loop {
            turn(ep, &mut m, &mut wcs);
            let status = m.poll(ep);
            if !told {
                if let Some(b) = m.peer_buffer() {
                    *hooks.offered.lock().unwrap_or_else(|p| p.into_inner()) = Some(b);
                    told = true;
                }
            }
            match status {
                Status::Running => {}
                Status::Connect => {
                    let pause = hooks.data_pause.unwrap_or_default();
                    let begun = Instant::now();
                    while begun.elapsed() < pause && !stop.load(Ordering::SeqCst) {
                        turn(ep, &mut m, &mut wcs);
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    for _ in 0..p.qps {
                        let qp = connect(ep, args, p, true, stop, &mut m, &mut wcs)?;
                        m.add_data(qp);
                    }
                }
                Status::Done => return Ok(m.results().to_vec()),
                Status::Failed(why) => return Err(why),
            }
            if stop.load(Ordering::SeqCst) {
                return Err(format!("interrupted ({})", m.phase()));
            }
        }
    })();
    finish(ep, &m, result.is_ok(), stop);
    result
}

/// One turn of a lone session: the RNIC steps, its completions and
/// Terminates go to it.
fn turn<T: CoreTransport>(ep: &mut Endpoint<T>, m: &mut Machine, wcs: &mut Vec<Wc>) {
    ep.step(now());
    for (qp, event) in ep.take_events() {
        if m.owns(qp) {
            m.terminated(event);
        }
    }
    for qp in ep.take_ended() {
        m.ended(qp);
    }
    wcs.clear();
    ep.poll_cq(wcs);
    for wc in wcs.drain(..) {
        m.completion(wc);
    }
}

/// Closes the session's connections (the data ones first) and waits for
/// them to end. After a run that went well the peer may hang up first,
/// for up to [`HANG_UP_GRACE`]: Linux siw (6.1) reports a Send or Write it
/// sent in full as failed (`IBV_WC_LOC_QP_OP_ERR`, "wqe ... processing
/// failed: -103") when the peer's FIN arrives before its `sendmsg`
/// returns, and perftest then fails its run; dpwarp answers fast enough to
/// hit that.
fn finish<T: CoreTransport>(ep: &mut Endpoint<T>, m: &Machine, ok: bool, stop: &AtomicBool) {
    let start = Instant::now();
    let stopped = || stop.load(Ordering::SeqCst);
    while ok && !stopped() && ep.open_connections() > 0 && start.elapsed() < HANG_UP_GRACE {
        ep.step(now());
        let _ = ep.take_ended();
    }
    let qps: Vec<QpHandle> = m.qps().collect();
    for qp in qps.iter().skip(1).chain(qps.first()) {
        ep.close(*qp);
    }
    crate::rping::drain(ep);
}

/// Connects to the server (the client's); a data connection is tried again
/// as perftest's client does.
fn connect<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    args: &PerftestArgs,
    p: &Params,
    data: bool,
    stop: &AtomicBool,
    m: &mut Machine,
    wcs: &mut Vec<Wc>,
) -> Result<QpHandle, String> {
    let server = SocketAddrV4::new(args.server.unwrap_or(Ipv4Addr::UNSPECIFIED), args.port);
    let tries = if data { CONNECT_TRIES } else { 1 };
    let mut last = String::new();
    let begun = Instant::now();
    let mut handoffs: Vec<(Handoff, Option<QpHandle>)> = Vec::new();
    for attempt in 0..tries {
        if attempt > 0 {
            if begun.elapsed() > STALL_LIMIT {
                break;
            }
            std::thread::sleep(CONNECT_PAUSE);
        }
        let mark = if data { DATA_MARK } else { CONTROL_MARK };
        let token = ep.control.connect(server, args.startup(p, data), mark);
        let start = Instant::now();
        let got = loop {
            turn(ep, m, wcs);
            handoffs.extend(ep.take_handoffs());
            if let Some(i) = handoffs.iter().position(|(h, _)| h.token == token) {
                break Some(handoffs.remove(i));
            }
            if stop.load(Ordering::SeqCst) {
                return Err(format!("interrupted before {server} answered"));
            }
            if start.elapsed() > STALL_LIMIT {
                break None;
            }
        };
        let Some((handoff, qp)) = got else {
            last = format!("no answer from {server} in {} s", STALL_LIMIT.as_secs());
            continue;
        };
        match (handoff.result, qp) {
            (StartupResult::Established(_), Some(qp)) => {
                // Whatever waits out the settle (see --settle-ms) is not the
                // test's.
                let settle = Duration::from_millis(args.settle_ms);
                let start = Instant::now();
                while start.elapsed() < settle && !stop.load(Ordering::SeqCst) {
                    turn(ep, m, wcs);
                }
                return Ok(qp);
            }
            (StartupResult::Rejected(r), _) => {
                return Err(format!(
                    "{server} rejected the connection (MPA Reply with R=1, private data {:?})",
                    String::from_utf8_lossy(&r.private_data)
                ))
            }
            (StartupResult::Failed(f), _) => last = f.reason.to_string(),
            _ => last = "the connection failed".into(),
        }
    }
    Err(format!(
        "connecting the {} connection to {server} failed{}: {last}",
        if data { "data" } else { "control" },
        if data {
            format!(" ({tries} tries)")
        } else {
            String::new()
        }
    ))
}

/// The server: perftest's, one client at a time (the appliance serves
/// many with the same [`PerftestService`]).
fn server<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    args: &PerftestArgs,
    p: &Params,
    seed: u64,
    stop: &AtomicBool,
) -> Result<Vec<SizeOutcome>, String> {
    let gate = Gate::new(*p, args.unfenced, "--unfenced", true);
    let decide = gate.clone();
    ep.control.listen(
        args.port,
        args.startup(p, false),
        Box::new(move |request, peer| decide.decide(request, peer)),
    );
    let start = Instant::now();
    loop {
        ep.step(now());
        if let Some(status) = ep.listen_status(args.port) {
            status?;
            break;
        }
        if stop.load(Ordering::SeqCst) {
            return Err("interrupted before the listener was up".into());
        }
        if start.elapsed() > STALL_LIMIT {
            return Err("the control plane never set up the listener".into());
        }
    }
    println!("bench perftest: listening on port {}", args.port);
    println!(" Waiting for client to connect...");
    let mut service = PerftestService::new(*p, gate.clone(), 1, 0, args.ib_mtu(), seed);
    let mut wcs = Vec::new();
    let mut finished = Vec::new();
    let mut outcome: Option<Result<Vec<SizeOutcome>, String>> = None;
    // Once the session is over: its connections' ends, at most this long.
    let mut over_at: Option<Instant> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err("interrupted".into());
        }
        ep.step(now());
        for (qp, event) in ep.take_events() {
            if !service.terminated(qp, event) {
                eprintln!("bench perftest: a client: {}", term_text(event));
            }
        }
        // Ends first: a new QP may take an ended one's handle in this step.
        for qp in ep.take_ended() {
            service.ended(qp);
        }
        for (handoff, qp) in ep.take_handoffs() {
            let client = handoff.ends.map(|(_, peer)| *peer.ip());
            let served = match (handoff.result, qp) {
                (StartupResult::Established(_), Some(qp)) => {
                    let peer = handoff
                        .conn
                        .and_then(|c| ep.core.transport().endpoints(c).ok())
                        .map(|(_, peer)| peer);
                    match peer {
                        Some(peer) => service.established(ep, qp, peer),
                        // Gone before we could ask: nothing to serve.
                        None => {
                            ep.abort(qp);
                            false
                        }
                    }
                }
                // One that never got as far as MPA costs that connection
                // only.
                (StartupResult::Failed(f), _) => {
                    eprintln!(
                        "bench perftest: a connection's MPA startup failed: {}",
                        f.reason
                    );
                    false
                }
                // Established without a QP (the core had no room).
                (StartupResult::Established(_), None) => false,
                _ => true,
            };
            // The one client's accepted connection came to no session:
            // the next client may come.
            if let (false, Some(ip), true) = (served, client, service.is_empty()) {
                gate.release_single(ip);
            }
        }
        wcs.clear();
        ep.poll_cq(&mut wcs);
        for wc in &wcs {
            service.completion(wc);
        }
        service.tick(ep, &mut finished);
        if outcome.is_none() {
            if let Some(f) = finished.pop() {
                if let Err(why) = &f.result {
                    eprintln!("bench perftest: {}: {why}", f.peer);
                }
                outcome = Some(f.result);
                over_at = Some(Instant::now());
            }
        }
        if let Some(at) = over_at {
            let settled = service.is_empty() && !gate.refusing();
            if settled || at.elapsed() > HANG_UP_GRACE + STALL_LIMIT {
                break;
            }
        }
        if service.is_empty() && outcome.is_none() {
            // No client yet: nothing here is latency-critical, and the
            // kernel transport polls (it would spin a core).
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    outcome.unwrap_or_else(|| Err("no session".into()))
}

fn print_banner(p: &Params, args: &PerftestArgs) {
    let line = "-".repeat(87);
    println!("{line}");
    println!("                    {}", p.test.title());
    println!(" dpwarp (bench perftest, perftest protocol {VERSION})");
    println!(
        " Number of qps   : {}\t\tTransport type : IW ({})",
        p.qps,
        match args.transport {
            PeerTransport::Kernel => "kernel TCP",
            PeerTransport::Tap => "tcp-lite on TAP",
            PeerTransport::NetTap => "tcp-lite on DPDK net_tap",
            PeerTransport::AfPacket => "tcp-lite on DPDK net_af_packet",
            PeerTransport::Memif => "tcp-lite on DPDK memif",
            PeerTransport::Pci => "tcp-lite on a DPDK PCI NIC",
        }
    );
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    if p.test.is_bw() {
        println!(" Bidirectional   : {}", if p.duplex { "ON" } else { "OFF" });
    }
    if p.client || p.test.verb() != Verb::Send {
        println!(" TX depth        : {}", p.tx_depth);
    }
    if p.test.verb() == Verb::Send {
        println!(" RX depth        : {}", p.rx_depth);
    }
    if p.test.verb() == Verb::Read {
        println!(" Outstand reads  : {}", p.out_reads);
    }
    if let Some(d) = p.duration {
        println!(" Duration        : {} s", d.as_secs());
    }
    println!(" rdma_cm QPs\t : ON");
    println!(" Data ex. method : rdma_cm");
    println!("{line}");
}

fn print_results(p: &Params, results: &[SizeOutcome]) {
    let line = "-".repeat(87);
    if p.test.is_bw() {
        println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        for o in results {
            // Ours when we measured; the client's when it sent its numbers
            // (a one-way server measures nothing but send_bw's arrivals).
            let r = if !p.client && !p.duplex {
                o.peer_bw.or(o.bw)
            } else {
                o.bw
            };
            if let Some(r) = r {
                println!(
                    " {:<10} {:<10}       {:.2}               {:.2}   \t\t   {:.6}",
                    r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
                );
            }
            if p.duplex {
                if let Some(r) = o.peer_bw {
                    println!(
                        " {:<10} {:<10}       {:.2}               {:.2}   \t\t   {:.6}   (the \
                         peer's direction)",
                        r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
                    );
                }
            }
        }
        if !p.client && !p.duplex && results.iter().any(|o| o.peer_bw.is_some()) {
            println!(" (the client's measurement, from its report)");
        }
    } else if results.iter().any(|o| LatStats::of(&o.lat).is_some()) {
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
             t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        );
        for o in results {
            if let Some(st) = LatStats::of(&o.lat) {
                println!(
                    " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                    o.size,
                    o.lat.len() + 1,
                    st.min,
                    st.max,
                    st.typical,
                    st.avg,
                    st.stdev,
                    st.p99,
                    st.p999
                );
            }
        }
    }
    println!("{line}");
    // A server that only answered (ib_read_lat's: the client's Reads need
    // no work here, and it measures nothing) says so; the others saw every
    // message, or the client's report of them.
    let done = if !p.client && p.test == Test::ReadLat {
        "served"
    } else {
        "completed"
    };
    let sizes = if p.all_sizes {
        "every size from 2 to 8388608 octets".to_string()
    } else {
        format!("{} octets", p.size)
    };
    let length = match p.duration {
        Some(d) => format!("{} s", d.as_secs()),
        None => format!("{} iterations", p.iters),
    };
    let qps = if p.qps > 1 {
        format!(" on each of {} QPs", p.qps)
    } else {
        String::new()
    };
    println!(
        "bench perftest: {} {}: {length} of {sizes}{qps} {done}",
        p.test.title(),
        if p.client { "client" } else { "server" },
    );
}

/// perftest's latency statistics (`print_report_lat`) over the samples:
/// sorted, the two largest left out (`LAT_MEASURE_TAIL`), the median of an
/// even count the mean of the middle two, the maximum and percentiles read
/// as perftest indexes them (`delta[m]`, `delta[ceil(m * q)]`, `m` the
/// samples kept). The deviation is computed in floating point (perftest
/// truncates each difference to an integer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Smallest sample.
    pub min: f64,
    /// perftest's t_max.
    pub max: f64,
    /// Median.
    pub typical: f64,
    /// Mean of the kept samples.
    pub avg: f64,
    /// Their standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

impl LatStats {
    /// The statistics of `samples` (microseconds); `None` if too few (3).
    pub fn of(samples: &[f64]) -> Option<LatStats> {
        let mut d = samples.to_vec();
        d.sort_by(f64::total_cmp);
        let m = d.len().checked_sub(LAT_MEASURE_TAIL).filter(|&m| m >= 1)?;
        let typical = if (m - 1) % 2 == 1 {
            (d[m / 2] + d[m / 2 - 1]) / 2.0
        } else {
            d[m / 2]
        };
        let avg = d[..m].iter().sum::<f64>() / m as f64;
        let stdev = (d[..m].iter().map(|x| (avg - x) * (avg - x)).sum::<f64>() / m as f64).sqrt();
        let at = |q: f64| d[((m as f64 * q).ceil() as usize).min(d.len() - 1)];
        Some(LatStats {
            min: d[0],
            max: d[m],
            typical,
            avg,
            stdev,
            p99: at(0.99),
            p999: at(0.999),
        })
    }
}

/// Latency samples in microseconds: the time between consecutive posts,
/// over `rtt_factor` (2 for ping-pongs, as perftest).
fn deltas(posted: &[Instant], rtt_factor: f64) -> Vec<f64> {
    posted
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6 / rtt_factor)
        .collect()
}

/// A bandwidth report from per-message post and completion times. The peak
/// is the best rate over spans of consecutive messages, as perftest's: here
/// every span from the first message, every span to the last, and every
/// span of `window` messages (perftest tries every pair its completion
/// moderation leaves).
fn bw_report(size: u64, posted: &[Instant], completed: &[Instant], window: usize) -> BwReport {
    let n = completed.len().min(posted.len());
    if n == 0 {
        return BwReport {
            size,
            ..BwReport::default()
        };
    }
    let mb = (1u64 << 20) as f64;
    let per = |i: usize, j: usize| {
        (completed[j] - posted[i]).as_secs_f64().max(1e-9) / (j + 1 - i) as f64
    };
    let total = per(0, n - 1) * n as f64;
    let w = window.clamp(1, n);
    let mut best = per(0, n - 1);
    for k in 0..n {
        best = best.min(per(0, k)).min(per(k, n - 1));
        if k + w <= n {
            best = best.min(per(k, k + w - 1));
        }
    }
    BwReport {
        size,
        iters: n as u64,
        bw_peak: size as f64 / best / mb,
        bw_avg: (size * n as u64) as f64 / total / mb,
        msg_rate: n as f64 / total / 1e6,
    }
}

/// A receiver's bandwidth report from its arrival times: the average from
/// the first message to the last, as perftest's server measures it, and the
/// peak over spans of `window` arrivals (never below the average).
fn bw_report_rx(size: u64, arrived: &[Instant], window: usize) -> BwReport {
    let n = arrived.len();
    let mb = (1u64 << 20) as f64;
    let span = |i: usize, j: usize| (arrived[j] - arrived[i]).as_secs_f64().max(1e-9);
    if n < 2 {
        return BwReport {
            size,
            iters: n as u64,
            ..BwReport::default()
        };
    }
    // Messages per second.
    let avg = n as f64 / span(0, n - 1);
    let w = window.clamp(2, n);
    let peak = (0..=n - w)
        .map(|i| (w - 1) as f64 / span(i, i + w - 1))
        .fold(avg, f64::max);
    BwReport {
        size,
        iters: n as u64,
        bw_peak: size as f64 * peak / mb,
        bw_avg: size as f64 * avg / mb,
        msg_rate: avg / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dest_round_trips_and_rejects_other_lengths() {
        let d = Dest {
            lid: 1,
            out_reads: 128,
            qpn: 2,
            psn: 0xb08df,
            rkey: 0x221c_7600,
            vaddr: 0x5564_2b44_4000,
            gid: [7; 16],
            srqn: 3,
            gid_index: 4,
        };
        assert_eq!(Dest::decode(&d.encode()), Ok(d));
        assert!(Dest::decode(&[0; 55]).is_err());
        assert!(Dest::decode(&[0; 57]).is_err());
    }

    #[test]
    fn versions_read_as_atof_does() {
        assert_eq!(version_number(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"), 6.06);
        assert_eq!(version_number(b"5.70"), 5.70);
        assert_eq!(version_number(b"\0garbage"), 0.0);
        assert_eq!(version_number(b"x6.0"), 0.0);
    }

    #[test]
    fn messages_cycle_through_the_buffer_a_cache_line_apart() {
        assert_eq!(slot_offset(0, 64, 4096, 64), 0);
        assert_eq!(slot_offset(1, 64, 4096, 64), 64);
        assert_eq!(slot_offset(63, 64, 4096, 64), 63 * 64);
        assert_eq!(slot_offset(64, 64, 4096, 64), 0);
        assert_eq!(slot_offset(1, 2, 4096, 64), 64);
        assert_eq!(slot_offset(1, 100, 4096, 64), 128);
        // Over half the buffer: always the start.
        assert_eq!(slot_offset(5, 3000, 4096, 64), 0);
        // A 128-octet cache line (the larger of the two sides' wins).
        assert_eq!(slot_offset(1, 64, 4096, 128), 128);
        assert_eq!(slot_offset(32, 64, 4096, 128), 0);
    }

    #[test]
    fn latency_statistics_are_perftests() {
        // 1..=10 shuffled: the 9 and 10 left out, m = 8.
        let st = LatStats::of(&[5.0, 3.0, 10.0, 1.0, 7.0, 2.0, 9.0, 4.0, 8.0, 6.0]).unwrap();
        assert_eq!(st.min, 1.0);
        // delta[m]: the ninth smallest.
        assert_eq!(st.max, 9.0);
        // m even: the mean of delta[3] and delta[4].
        assert_eq!(st.typical, 4.5);
        assert_eq!(st.avg, 4.5);
        // ceil(8 * 0.99) = 8.
        assert_eq!(st.p99, 9.0);
        let st = LatStats::of(&[1.0, 2.0, 3.0, 100.0, 200.0]).unwrap();
        // m = 3, odd: the middle one.
        assert_eq!(st.typical, 2.0);
        assert!(LatStats::of(&[1.0, 2.0]).is_none());
    }

    #[test]
    fn a_receivers_peak_is_never_below_its_average() {
        let t0 = Instant::now();
        let arrived: Vec<Instant> = (0..100)
            .map(|i| t0 + Duration::from_micros(10 * i))
            .collect();
        let r = bw_report_rx(4096, &arrived, 8);
        assert!(r.bw_peak >= r.bw_avg, "{r:?}");
        assert_eq!(r.iters, 100);
    }

    #[test]
    fn perftests_adjustments_apply() {
        let args = |a: &[&str]| PerftestArgs::try_parse_from(a).unwrap().params();
        let p = args(&["perftest", "send_bw", "-n", "5"]).unwrap();
        assert_eq!((p.tx_depth, p.rx_depth, p.size), (5, 6, 65536));
        let p = args(&["perftest", "ib_write_lat", "1.2.3.4", "-n", "100"]).unwrap();
        assert_eq!((p.client, p.tx_depth, p.rx_depth, p.size), (true, 1, 1, 2));
        let p = args(&["perftest", "read_bw", "-R", "-o", "4"]).unwrap();
        assert_eq!((p.out_reads, p.tx_depth), (4, 128));
        assert!(args(&["perftest", "write_bw", "-n", "4"]).is_err());
        assert!(args(&["perftest", "write_bw", "-s", "0"]).is_err());
        assert!(args(&["perftest", "write_bw", "-o", "4"]).is_err());
        assert!(args(&["perftest", "send_lat", "-r", "600"]).is_err());
    }
}
