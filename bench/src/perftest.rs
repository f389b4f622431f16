//! `bench perftest`: perftest's six RC tests (ib_write_bw, ib_read_bw,
//! ib_send_bw, ib_write_lat, ib_read_lat, ib_send_lat) over dpwarp's RNIC,
//! as server or client, against perftest itself (e.g. on Linux siw).
//!
//! perftest (linux-rdma/perftest; read from 4.5-0.17 = "6.06", the Debian
//! bookworm package, and from siw's captures in `tests/data/golden/ib_*`)
//! runs, with `-R` (rdma_cm; iWARP has no other way to connect a QP):
//!
//! 1. A *control* connection to the port (18515): MPA, IRD = ORD = 0, no
//!    private data. Every message on it is an untagged Send into the peer's
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

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use control::mpa::{Accept, StartupConfig};
use control::runtime::{Decision, Handoff, StartupResult};
use dataplane::CoreTransport;
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{QpHandle, RecvWr, RemoteAddr, SendOp, SendWr};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};

use crate::endpoint::{now, Endpoint, QUEUE_DEPTH};
use crate::link::{self, LinkArgs, PeerTransport};
use crate::rping::term_text;

/// perftest's port.
pub const PORT: u16 = 18515;
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
/// How long a server that refused a client waits for its retries to stop.
const REFUSAL_QUIET: Duration = Duration::from_secs(2);
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

    /// Server, kernel TCP: the address to listen on.
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
}

impl PerftestArgs {
    /// The test's numbers as perftest would set them, or what to fix.
    pub fn params(&self) -> Result<Params, String> {
        let test = self.test;
        let size = self.size.unwrap_or(if test.is_bw() { 65536 } else { 2 });
        if !(1..=SIZE_MAX).contains(&size) {
            return Err(format!("-s {size}: give 1 to {SIZE_MAX} octets"));
        }
        let iters = self
            .iters
            .unwrap_or(if test == Test::WriteBw { 5000 } else { 1000 });
        if iters < ITERS_MIN {
            return Err(format!("-n {iters}: give at least {ITERS_MIN}"));
        }
        if iters > ITERS_MAX {
            return Err(format!(
                "-n {iters}: every message's timestamps are kept; give at most {ITERS_MAX}"
            ));
        }
        let clamp = |v: u32| u64::from(v).min(iters) as u32;
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
        if self.transport != PeerTransport::Kernel && self.link.ip.is_none() {
            return Err(
                "--transport tap needs --ip ADDR/PREFIX, our address on the TAP link".into(),
            );
        }
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
        })
    }

    /// MPA for the control connection (`data` false) or the data one.
    fn startup(&self, p: &Params, data: bool) -> StartupConfig {
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
    fn ib_mtu(&self) -> u8 {
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

/// Our registered memory: the control messages, the credit words, and two
/// data buffers (what we send or read into; what the peer writes or reads).
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// Each data buffer's length (perftest's `BUFF_SIZE`, for the largest
    /// cycle buffer we accept).
    buff: u64,
}

/// Control receives posted at once.
const CTRL_RECVS: usize = 4;
/// A control message slot.
const CTRL_SLOT: usize = 64;
const SEND_AT: usize = CTRL_RECVS * CTRL_SLOT;
/// Our receive count, the source of a credit Write (Send tests).
const CREDIT_OUT_AT: usize = SEND_AT + CTRL_SLOT;
/// The credit word the peer writes.
const CREDIT_IN_AT: usize = CREDIT_OUT_AT + CTRL_SLOT;
const DATA_AT: u64 = 4096;

impl Layout {
    fn new(size: u64) -> Layout {
        Layout {
            buff: size.max(u64::from(CYCLE_MAX)).next_multiple_of(4096),
        }
    }
    /// What we send, or where our Reads land.
    fn local(&self) -> u64 {
        DATA_AT
    }
    /// What the peer writes or reads (our `vaddr`).
    fn target(&self) -> u64 {
        DATA_AT + self.buff
    }
    fn memory(&self) -> usize {
        (DATA_AT + 2 * self.buff) as usize
    }
}

// wr_id kinds.
const WR_CTRL_SEND: u64 = 1;
const WR_CTRL_RECV: u64 = 2;
const WR_DATA: u64 = 3;
const WR_DATA_RECV: u64 = 4;
const WR_CREDIT: u64 = 5;

/// A run's end, for the report.
#[derive(Debug, Default, Clone)]
pub struct Outcome {
    /// Our report (bandwidth tests, the side that measured).
    pub bw: Option<BwReport>,
    /// The peer's report (bandwidth tests, server).
    pub peer_bw: Option<BwReport>,
    /// Latency samples, microseconds (latency tests, the side that measured).
    pub lat: Vec<f64>,
}

/// The TAP interface `bench perftest` makes when --tap is not given.
const DEFAULT_TAP: &str = "dpwperf0";

/// Runs `bench perftest`; returns the process's exit status.
pub fn main(argv: Vec<String>, stop: &AtomicBool) -> i32 {
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
                bind: if p.client {
                    Ipv4Addr::UNSPECIFIED
                } else {
                    args.bind
                },
                ..KernelConfig::default()
            };
            match KernelTransport::new(kc) {
                Ok(t) => run(t, emss, &args, &p, stop),
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
            run(stack, emss, &args, &p, stop)
        }),
        dpdk => link::run_on_dpdk(
            dpdk,
            &args.link,
            args.mtu,
            !p.client,
            DEFAULT_TAP,
            |stack| {
                let emss = stack.emss();
                run(stack, emss, &args, &p, stop)
            },
        ),
    };
    match result {
        Ok(()) => 0,
        Err(why) => {
            eprintln!("bench perftest: {why}");
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
) -> Result<(), String> {
    let layout = Layout::new(p.size);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut ep = Endpoint::new(transport, emss, seed, layout.memory());
    ep.set_unfenced(args.unfenced);
    if p.client {
        ep.set_settle(tcp_lite::Duration::from_millis(args.settle_ms));
    }
    // Something other than zeros to move: perftest fills its buffers at
    // random; we use a pattern. write_lat's stay zero (as perftest's): the
    // last octet of the target is the poll byte, and the peer's first Write
    // may land as soon as the handshakes are done.
    if p.test != Test::WriteLat {
        let pattern: Vec<u8> = (0..layout.buff).map(|i| (i % 251) as u8).collect();
        ep.region
            .write(layout.local() as usize, &pattern)
            .and_then(|()| ep.region.write(layout.target() as usize, &pattern))
            .map_err(|e| format!("{e:?}"))?;
    }
    print_banner(p, args);
    let mut s = Session::new(&mut ep, stop, *p, layout, seed);
    let result = s.run(args);
    s.finish(result.is_ok());
    let outcome = result?;
    print_results(p, &outcome);
    Ok(())
}

fn print_banner(p: &Params, args: &PerftestArgs) {
    let line = "-".repeat(87);
    println!("{line}");
    println!("                    {}", p.test.title());
    println!(" dpwarp (bench perftest, perftest protocol {VERSION})");
    println!(
        " Number of qps   : 1\t\tTransport type : IW ({})",
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
    if p.client || p.test.verb() != Verb::Send {
        println!(" TX depth        : {}", p.tx_depth);
    }
    if p.test.verb() == Verb::Send {
        println!(" RX depth        : {}", p.rx_depth);
    }
    if p.test.verb() == Verb::Read {
        println!(" Outstand reads  : {}", p.out_reads);
    }
    println!(" rdma_cm QPs\t : ON");
    println!(" Data ex. method : rdma_cm");
    println!("{line}");
}

fn print_results(p: &Params, o: &Outcome) {
    let line = "-".repeat(87);
    if p.test.is_bw() {
        println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        let r = o.bw.or(o.peer_bw);
        if let Some(r) = r {
            println!(
                " {:<10} {:<10}       {:.2}               {:.2}   \t\t   {:.6}",
                r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
            );
        }
        if o.bw.is_none() && o.peer_bw.is_some() {
            println!(" (the client's measurement, from its report)");
        }
    } else if let Some(st) = LatStats::of(&o.lat) {
        println!(
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
             t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
        );
        println!(
            " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
            p.size, p.iters, st.min, st.max, st.typical, st.avg, st.stdev, st.p99, st.p999
        );
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
    println!(
        "bench perftest: {} {}: {} iterations of {} octets {done}",
        p.test.title(),
        if p.client { "client" } else { "server" },
        p.iters,
        p.size
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

/// One run's connections and the completions sorted by them.
struct Session<'a, T: CoreTransport> {
    ep: &'a mut Endpoint<T>,
    stop: &'a AtomicBool,
    p: Params,
    l: Layout,
    psn: u32,
    ctrl: Option<QpHandle>,
    data: Option<QpHandle>,
    ctrl_wcs: VecDeque<Wc>,
    data_wcs: VecDeque<Wc>,
    handoffs: Vec<(Handoff, Option<QpHandle>)>,
    wcs: Vec<Wc>,
    /// Server: the data connection may come now (the listener refuses a
    /// second connection before).
    data_open: Arc<AtomicBool>,
    /// Server: the listener refused the client's data connection for good
    /// (write_lat without an RTR); the run cannot go on.
    refused: Arc<AtomicBool>,
    /// The cycle buffer and cache line both sides agreed on.
    cycle: u64,
    line: u64,
}

impl<'a, T: CoreTransport> Session<'a, T> {
    fn new(
        ep: &'a mut Endpoint<T>,
        stop: &'a AtomicBool,
        p: Params,
        l: Layout,
        seed: u64,
    ) -> Session<'a, T> {
        Session {
            ep,
            stop,
            p,
            l,
            psn: (seed as u32) & 0xff_ffff,
            ctrl: None,
            data: None,
            ctrl_wcs: VecDeque::new(),
            data_wcs: VecDeque::new(),
            handoffs: Vec::new(),
            wcs: Vec::new(),
            data_open: Arc::new(AtomicBool::new(false)),
            refused: Arc::new(AtomicBool::new(false)),
            cycle: u64::from(CYCLE_BUFFER),
            line: u64::from(CACHE_LINE),
        }
    }

    /// Octets the peer sent us on the data connection so far: the run's
    /// progress (the control connection's exchanges have a plain deadline).
    fn heard(&self) -> u64 {
        self.data.and_then(|qp| self.ep.rx_octets(qp)).unwrap_or(0)
    }

    /// One turn: the RNIC steps, completions are sorted by QP, a Terminate
    /// either way is an error.
    fn turn(&mut self) -> Result<(), String> {
        self.ep.step(now());
        let event = self.ep.take_events().into_iter().next();
        // Once both connections are up, later startups (refused: a run is
        // in progress) need no answer.
        let handoffs = self.ep.take_handoffs();
        if self.data.is_none() {
            self.handoffs.extend(handoffs);
        }
        let _ = self.ep.take_ended();
        self.wcs.clear();
        self.ep.poll_cq(&mut self.wcs);
        for wc in self.wcs.drain(..) {
            if Some(wc.qp) == self.ctrl {
                self.ctrl_wcs.push_back(wc);
            } else if Some(wc.qp) == self.data {
                self.data_wcs.push_back(wc);
            }
        }
        if let Some((_, event)) = event {
            // A completion in error names the cause better than the
            // Terminate it made (a Send too long for its receive): it is
            // read first.
            let cause = |wc: &Wc| !matches!(wc.status, WcStatus::Success | WcStatus::Flushed);
            if self.data_wcs.iter().any(cause) {
                return Ok(());
            }
            let code = match event {
                QpEvent::TerminateSent(t) | QpEvent::TerminateReceived(t) => {
                    (t.layer, t.etype, t.ecode)
                }
            };
            // RFC 5041 §7.2: DDP untagged buffer errors 2 (no buffer) and 5
            // (message too long for the buffer).
            let hint = match (self.p.test.verb(), code) {
                (Verb::Send, (1, 2, 2)) => {
                    " (a Send with no receive for it: both sides need the same -n and -r)"
                }
                (Verb::Send, (1, 2, 5)) => {
                    " (a Send longer than the receive for it: both sides need the same -s)"
                }
                _ => "",
            };
            return Err(format!("{}{hint}", term_text(event)));
        }
        Ok(())
    }

    /// Turns until `done` gives an answer; at most [`STALL_LIMIT`] without
    /// one and without a word from the peer, and only while the connections
    /// it needs are up.
    fn wait<R>(
        &mut self,
        what: &str,
        mut done: impl FnMut(&mut Self) -> Option<Result<R, String>>,
    ) -> Result<R, String> {
        let mut start = Instant::now();
        let mut heard = self.heard();
        loop {
            if let Some(r) = done(self) {
                return r;
            }
            self.turn()?;
            // Anything from the peer on the data connection is progress: a
            // long run (Writes or Read Requests into our memory, which make
            // no completion here) may come before the answer we wait for.
            let now_heard = self.heard();
            if now_heard != heard {
                heard = now_heard;
                start = Instant::now();
            }
            if let Some(r) = done(self) {
                return r;
            }
            for (qp, name) in [(self.ctrl, "control"), (self.data, "data")] {
                if let Some(qp) = qp {
                    if !self.ep.is_live(qp) {
                        return Err(format!(
                            "the peer closed the {name} connection while we waited for {what}"
                        ));
                    }
                }
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err(format!("interrupted waiting for {what}"));
            }
            if start.elapsed() > STALL_LIMIT {
                return Err(format!(
                    "no progress for {} s waiting for {what}",
                    STALL_LIMIT.as_secs()
                ));
            }
        }
    }

    fn run(&mut self, args: &PerftestArgs) -> Result<Outcome, String> {
        // The control connection.
        let ctrl = if self.p.client {
            self.connect(args, false)?
        } else {
            self.listen(args)?;
            println!("bench perftest: listening on port {}", args.port);
            println!(" Waiting for client to connect...");
            self.accept("the client's control connection")?
        };
        self.ctrl = Some(ctrl);
        for slot in 0..CTRL_RECVS {
            self.post_ctrl_recv(slot)?;
        }
        // Versions, buffers, MTU.
        let mut version = [0u8; VERSION_LEN];
        version[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.xchg(&version, "the peer's version")?;
        let v = version_number(&theirs);
        if v < VERSION_MIN {
            return Err(format!(
                "the peer speaks perftest {:?}; perftest and we need {VERSION_MIN:.2} or newer",
                String::from_utf8_lossy(&theirs).trim_end_matches('\0')
            ));
        }
        let cycle = self.xchg(&CYCLE_BUFFER.to_be_bytes(), "the peer's cycle buffer")?;
        let line = self.xchg(&CACHE_LINE.to_be_bytes(), "the peer's cache line")?;
        let word = |o: &[u8], what: &str| -> Result<u32, String> {
            <[u8; 4]>::try_from(o)
                .map(u32::from_be_bytes)
                .map_err(|_| format!("the peer's {what} is {} octets, not 4", o.len()))
        };
        let cycle = word(&cycle, "cycle buffer")?.max(CYCLE_BUFFER);
        let line = word(&line, "cache line")?.max(CACHE_LINE);
        if cycle > CYCLE_MAX || !cycle.is_power_of_two() || !line.is_power_of_two() || line > cycle
        {
            return Err(format!(
                "the peer's cycle buffer ({cycle}) or cache line ({line}) is beyond what we \
                 work with (powers of two, the buffer at most {CYCLE_MAX})"
            ));
        }
        self.cycle = u64::from(cycle);
        self.line = u64::from(line);
        let mtu = [b'0' + args.ib_mtu(), 0];
        let theirs = self.xchg(&mtu, "the peer's MTU")?;
        if theirs.len() != 2 {
            return Err(format!("the peer's MTU is {} octets, not 2", theirs.len()));
        }
        // The data connection, between two handshakes (perftest's `my_dest`
        // is still zero then).
        // Server: the client connects as soon as it has our answer to this
        // handshake, which may be before this call returns.
        self.data_open.store(true, Ordering::SeqCst);
        self.handshake(&Dest::default(), "the handshake before the data connection")?;
        let data = if self.p.client {
            self.connect(args, true)?
        } else {
            self.accept("the client's data connection")?
        };
        self.data = Some(data);
        self.handshake(&Dest::default(), "the handshake after the data connection")?;
        let my = self.my_dest();
        match self.p.test {
            Test::WriteBw | Test::ReadBw => {
                let rem = self.handshake(&my, "the peer's buffer")?;
                self.handshake(&my, "the second handshake")?;
                self.handshake(&my, "the third handshake")?;
                let mut out = Outcome::default();
                if self.p.client {
                    let r = self.bw_client(&rem)?;
                    self.handshake(&my, "the handshake after the run")?;
                    self.xchg_report(&r)?;
                    out.bw = Some(r);
                } else {
                    self.handshake(&my, "the client's end of the run")?;
                    let mine = BwReport {
                        size: self.p.size,
                        iters: self.p.iters,
                        ..BwReport::default()
                    };
                    let theirs = self.xchg_report(&mine)?;
                    if theirs.size != self.p.size || theirs.iters != self.p.iters {
                        return Err(format!(
                            "the client ran {} iterations of {} octets; we were told -n {} -s {}",
                            theirs.iters, theirs.size, self.p.iters, self.p.size
                        ));
                    }
                    out.peer_bw = Some(theirs);
                }
                self.handshake(&my, "the closing handshake")?;
                Ok(out)
            }
            Test::SendBw => {
                let rem = self.handshake(&my, "the peer's credit word")?;
                self.handshake(&my, "the second handshake")?;
                self.handshake(&my, "the third handshake")?;
                if !self.p.client {
                    self.post_data_recvs()?;
                }
                self.handshake(&my, "the handshake before the run")?;
                let r = if self.p.client {
                    self.bw_client(&rem)?
                } else {
                    self.send_bw_server(&rem)?
                };
                self.handshake(&my, "the closing handshake")?;
                Ok(Outcome {
                    bw: Some(r),
                    ..Outcome::default()
                })
            }
            Test::WriteLat | Test::ReadLat => {
                let rem = self.handshake(&my, "the peer's buffer")?;
                for what in ["second", "third", "fourth"] {
                    self.handshake(&my, &format!("the {what} handshake"))?;
                }
                let mut out = Outcome::default();
                if self.p.test == Test::WriteLat {
                    out.lat = self.write_lat(&rem)?;
                } else {
                    if self.p.client {
                        out.lat = self.read_lat(&rem)?;
                    }
                    self.handshake(&my, "the closing handshake")?;
                }
                Ok(out)
            }
            Test::SendLat => {
                self.handshake(&my, "the peer's buffer")?;
                self.handshake(&my, "the second handshake")?;
                self.handshake(&my, "the third handshake")?;
                self.post_data_recvs()?;
                self.handshake(&my, "the handshake before the run")?;
                let lat = self.send_lat()?;
                self.handshake(&my, "the closing handshake")?;
                Ok(Outcome {
                    lat,
                    ..Outcome::default()
                })
            }
        }
    }

    /// Our `pingpong_dest`: the data buffer the peer addresses, or the
    /// credit word in `send_bw`.
    fn my_dest(&self) -> Dest {
        let (rkey, vaddr) = if self.p.test == Test::SendBw {
            (self.ep.mr.stag, self.ep.mr.base_to + CREDIT_IN_AT as u64)
        } else {
            (self.ep.mr.stag, self.ep.mr.base_to + self.l.target())
        };
        Dest {
            out_reads: u32::from(self.p.out_reads),
            qpn: self.data.map_or(0, |q| q.0),
            psn: self.psn,
            rkey,
            vaddr,
            ..Dest::default()
        }
    }

    fn listen(&mut self, args: &PerftestArgs) -> Result<(), String> {
        let ctrl = args.startup(&self.p, false);
        let (ctrl_reads, data_reads) = (ctrl.ird, args.startup(&self.p, true).ird);
        // A fenced server cannot write first unless the client sends an RTR.
        let needs_rtr = self.p.test == Test::WriteLat && !args.unfenced;
        let mut seen = 0u32;
        let mut client: Option<Ipv4Addr> = None;
        let (data_open, refused) = (self.data_open.clone(), self.refused.clone());
        // The first connection is the control one, the second the data one;
        // a run serves one client.
        self.ep.control.listen(
            args.port,
            ctrl,
            Box::new(move |request, peer| {
                // The data connection comes from the control connection's
                // host; anyone else meanwhile is another client.
                let early = seen == 1 && !data_open.load(Ordering::SeqCst);
                if client.is_some_and(|c| c != *peer.ip()) || seen >= 2 || early {
                    eprintln!("bench perftest: refusing {peer}: a run is in progress");
                    return Decision::Reject(
                        b"dpwarp perftest: a run is in progress; one client at a time".to_vec(),
                    );
                }
                client = Some(*peer.ip());
                seen += 1;
                if seen == 2 && needs_rtr && !request.enhanced.is_some_and(|e| e.peer_to_peer) {
                    refused.store(true, Ordering::SeqCst);
                    eprintln!(
                        "bench perftest: refusing {peer}'s data connection: ib_write_lat's \
                         server writes first, which RFC 5044 §7.1 (MPA fencing) forbids before \
                         the client's first FPDU, and the client offered no RFC 6581 \
                         peer-to-peer RTR. Give the client peer-to-peer mode (siw: echo 1 > \
                         /sys/module/siw/parameters/peer_to_peer; dpwarp's client does it), or \
                         run this server with --unfenced (as Linux siw behaves)"
                    );
                    return Decision::Reject(
                        b"dpwarp perftest: write_lat needs peer-to-peer (an RTR) or --unfenced"
                            .to_vec(),
                    );
                }
                let reads = if seen == 1 { ctrl_reads } else { data_reads };
                Decision::Accept(Accept {
                    ird: Some(reads),
                    ord: Some(reads),
                    ..Accept::default()
                })
            }),
        );
        let start = Instant::now();
        loop {
            self.ep.step(now());
            if let Some(status) = self.ep.listen_status(args.port) {
                return status;
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err("interrupted before the listener was up".into());
            }
            if start.elapsed() > STALL_LIMIT {
                return Err("the control plane never set up the listener".into());
            }
        }
    }

    /// Waits for the next accepted connection (the server's).
    fn accept(&mut self, what: &str) -> Result<QpHandle, String> {
        let start = Instant::now();
        loop {
            self.turn()?;
            while !self.handoffs.is_empty() {
                let (handoff, qp) = self.handoffs.remove(0);
                match (handoff.result, qp) {
                    (StartupResult::Established(_), Some(qp)) => return Ok(qp),
                    // Someone else's connection, or one that never got as far
                    // as MPA: it costs that connection only.
                    (StartupResult::Failed(f), _) => {
                        eprintln!(
                            "bench perftest: a connection's MPA startup failed: {}",
                            f.reason
                        );
                    }
                    (StartupResult::Rejected(_), _) if self.refused.load(Ordering::SeqCst) => {
                        self.linger_refusing();
                        return Err(format!("{what} was refused (see above)"));
                    }
                    _ => {}
                }
            }
            if self.stop.load(Ordering::SeqCst) {
                return Err(format!("interrupted waiting for {what}"));
            }
            if self.ctrl.is_none() {
                // No client yet: nothing here is latency-critical, and the
                // kernel transport polls (it would spin a core).
                std::thread::sleep(Duration::from_millis(1));
            }
            // The first client may take its time; once a run has begun the
            // usual limit applies.
            if self.ctrl.is_some() && start.elapsed() > STALL_LIMIT {
                return Err(format!("no {what} for {} s", STALL_LIMIT.as_secs()));
            }
            if let Some(ctrl) = self.ctrl {
                if !self.ep.is_live(ctrl) {
                    return Err(format!(
                        "the client closed its control connection before {what}"
                    ));
                }
            }
        }
    }

    /// After refusing the client's data connection: perftest's client tries
    /// it again (ten times, 100 ms apart); each try is answered, refused,
    /// until the client has been quiet for [`REFUSAL_QUIET`]. Leaving in the
    /// middle of a retry's MPA startup would leave the peer to time out
    /// (Linux siw's client then hung past a minute).
    fn linger_refusing(&mut self) {
        let start = Instant::now();
        let mut last = Instant::now();
        while last.elapsed() < REFUSAL_QUIET
            && start.elapsed() < STALL_LIMIT
            && !self.stop.load(Ordering::SeqCst)
        {
            if self.turn().is_err() {
                break;
            }
            if !self.handoffs.is_empty() {
                self.handoffs.clear();
                last = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Connects to the server (the client's); the data connection is tried
    /// again as perftest's client does.
    fn connect(&mut self, args: &PerftestArgs, data: bool) -> Result<QpHandle, String> {
        let server = SocketAddrV4::new(args.server.unwrap_or(Ipv4Addr::UNSPECIFIED), args.port);
        let tries = if data { CONNECT_TRIES } else { 1 };
        let mut last = String::new();
        let begun = Instant::now();
        for attempt in 0..tries {
            if attempt > 0 {
                if begun.elapsed() > STALL_LIMIT {
                    break;
                }
                std::thread::sleep(CONNECT_PAUSE);
            }
            let token = self
                .ep
                .control
                .connect(server, args.startup(&self.p, data), b"");
            let start = Instant::now();
            let got = loop {
                self.turn()?;
                if let Some(i) = self.handoffs.iter().position(|(h, _)| h.token == token) {
                    break Some(self.handoffs.remove(i));
                }
                if self.stop.load(Ordering::SeqCst) {
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
                    // Whatever waits out the settle (see --settle-ms) is not
                    // the test's.
                    let settle = Duration::from_millis(args.settle_ms);
                    let start = Instant::now();
                    while start.elapsed() < settle && !self.stop.load(Ordering::SeqCst) {
                        self.turn()?;
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

    fn post_ctrl_recv(&mut self, slot: usize) -> Result<(), String> {
        let qp = self.ctrl.ok_or("no control connection")?;
        let sgl = [self.ep.sge((slot * CTRL_SLOT) as u64, CTRL_SLOT as u32)];
        self.ep
            .rnic()
            .post_recv(
                qp,
                &RecvWr {
                    wr_id: WR_CTRL_RECV | (slot as u64) << 8,
                    sgl: &sgl,
                },
            )
            .map_err(|e| format!("posting a control receive: {e:?}"))
    }

    /// Sends a control message (one Send).
    fn ctrl_send(&mut self, msg: &[u8]) -> Result<(), String> {
        let qp = self.ctrl.ok_or("no control connection")?;
        self.ep
            .region
            .write(SEND_AT, msg)
            .map_err(|e| format!("{e:?}"))?;
        let sgl = [self.ep.sge(SEND_AT as u64, msg.len() as u32)];
        self.ep
            .rnic()
            .post_send(
                qp,
                &SendWr {
                    wr_id: WR_CTRL_SEND,
                    op: SendOp::Send,
                    sgl: &sgl,
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .map_err(|e| format!("posting a control Send: {e:?}"))?;
        // As perftest: the Send completes before anything else happens, so
        // the one send slot is free again.
        self.wait("our control Send's completion", |s| {
            let wc = s.ctrl_wcs.iter().position(|w| w.wr_id == WR_CTRL_SEND)?;
            let wc = s.ctrl_wcs.remove(wc)?;
            Some(match wc.status {
                WcStatus::Success => Ok(()),
                status => Err(format!("our control Send ended {status:?}")),
            })
        })
    }

    /// Receives the peer's next control message.
    fn ctrl_recv(&mut self, what: &str) -> Result<Vec<u8>, String> {
        let wc = self.wait(what, |s| {
            let i = s
                .ctrl_wcs
                .iter()
                .position(|w| w.wr_id & 0xff == WR_CTRL_RECV)?;
            s.ctrl_wcs.remove(i).map(Ok)
        })?;
        if wc.status != WcStatus::Success {
            return Err(format!("a control receive ended {:?} ({what})", wc.status));
        }
        let slot = (wc.wr_id >> 8) as usize;
        let mut msg = vec![0; (wc.byte_len as usize).min(CTRL_SLOT)];
        self.ep
            .region
            .read(slot * CTRL_SLOT, &mut msg)
            .map_err(|e| format!("{e:?}"))?;
        self.post_ctrl_recv(slot)?;
        Ok(msg)
    }

    /// perftest's `ctx_xchg_data`: the client sends first, the server answers.
    fn xchg(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, String> {
        if self.p.client {
            self.ctrl_send(mine)?;
            self.ctrl_recv(what)
        } else {
            let theirs = self.ctrl_recv(what)?;
            self.ctrl_send(mine)?;
            Ok(theirs)
        }
    }

    /// perftest's `ctx_hand_shake`.
    fn handshake(&mut self, my: &Dest, what: &str) -> Result<Dest, String> {
        let theirs = self.xchg(&my.encode(), what)?;
        Dest::decode(&theirs).map_err(|e| format!("{what}: {e}"))
    }

    /// perftest's `xchg_bw_reports`: five 8-octet exchanges.
    fn xchg_report(&mut self, mine: &BwReport) -> Result<BwReport, String> {
        let mut theirs = [[0u8; 8]; 5];
        for (i, field) in mine.fields().iter().enumerate() {
            let got = self.xchg(field, "the peer's report")?;
            theirs[i] = <[u8; 8]>::try_from(got.as_slice())
                .map_err(|_| format!("a report field of {} octets, not 8", got.len()))?;
        }
        Ok(BwReport::from_fields(&theirs))
    }

    /// The next data completion, checked.
    fn data_wc(&mut self) -> Result<Option<Wc>, String> {
        let Some(wc) = self.data_wcs.pop_front() else {
            return Ok(None);
        };
        match wc.status {
            WcStatus::Success => Ok(Some(wc)),
            WcStatus::LocalLength if wc.wr_id == WR_DATA_RECV => Err(format!(
                "a Send longer than our receives of {} octets arrived (run both sides with the \
                 same -s)",
                self.p.size
            )),
            status => Err(format!("a data work request ended {status:?}")),
        }
    }

    /// Fails once the data connection is gone, the run is interrupted, or
    /// nothing happened since `since` for too long.
    fn check_progress(&self, since: Instant, what: &str) -> Result<(), String> {
        if let Some(data) = self.data {
            if !self.ep.is_live(data) {
                return Err(format!("the peer closed the data connection during {what}"));
            }
        }
        if self.stop.load(Ordering::SeqCst) {
            return Err(format!("interrupted during {what}"));
        }
        if since.elapsed() > STALL_LIMIT {
            return Err(format!(
                "no progress for {} s during {what}",
                STALL_LIMIT.as_secs()
            ));
        }
        Ok(())
    }

    fn post_data(&mut self, op: SendOp, local: u64, len: u64) -> Result<(), String> {
        self.post_wr(WR_DATA, op, local, len)
    }

    /// A signaled work request on the data connection.
    fn post_wr(&mut self, wr_id: u64, op: SendOp, local: u64, len: u64) -> Result<(), String> {
        let qp = self.data.ok_or("no data connection")?;
        let sgl = [self.ep.sge(local, len as u32)];
        self.ep
            .rnic()
            .post_send(
                qp,
                &SendWr {
                    wr_id,
                    op,
                    sgl: &sgl,
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .map_err(|e| format!("posting a data work request: {e:?}"))
    }

    fn post_data_recv(&mut self, n: u64) -> Result<(), String> {
        let qp = self.data.ok_or("no data connection")?;
        let at = self.l.target() + slot_offset(n, self.p.size, self.cycle, self.line);
        let sgl = [self.ep.sge(at, self.p.size as u32)];
        self.ep
            .rnic()
            .post_recv(
                qp,
                &RecvWr {
                    wr_id: WR_DATA_RECV,
                    sgl: &sgl,
                },
            )
            .map_err(|e| format!("posting a data receive: {e:?}"))
    }

    /// perftest's `ctx_set_recv_wqes`: `rx_depth` receives (at most the
    /// iterations).
    fn post_data_recvs(&mut self) -> Result<(), String> {
        for n in 0..u64::from(self.p.rx_depth).min(self.p.iters) {
            self.post_data_recv(n)?;
        }
        Ok(())
    }

    /// A received data message: it must be the test's size.
    fn check_recv(&self, wc: &Wc) -> Result<(), String> {
        if !matches!(wc.opcode, WcOpcode::Recv) {
            return Err(format!("an unexpected {:?} completion", wc.opcode));
        }
        if u64::from(wc.byte_len) != self.p.size {
            return Err(format!(
                "a Send of {} octets arrived; the test's are {} (run both sides with the same -s)",
                wc.byte_len, self.p.size
            ));
        }
        Ok(())
    }

    /// The client's bandwidth loop (perftest's `run_iter_bw`): RDMA Writes
    /// or Reads into the server's buffer (`rem`), or Sends within the
    /// server's credits (the credit word is ours, the peer writes it).
    fn bw_client(&mut self, rem: &Dest) -> Result<BwReport, String> {
        let (size, iters) = (self.p.size, self.p.iters);
        let (depth, rx) = (u64::from(self.p.tx_depth), u64::from(self.p.rx_depth));
        let verb = self.p.test.verb();
        let mut posted = Vec::with_capacity(iters as usize);
        let mut completed = Vec::with_capacity(iters as usize);
        let (mut scnt, mut ccnt) = (0u64, 0u64);
        let mut since = Instant::now();
        while ccnt < iters {
            let credit = if verb == Verb::Send {
                let mut word = [0u8; 4];
                self.ep
                    .region
                    .read(CREDIT_IN_AT, &mut word)
                    .map_err(|e| format!("{e:?}"))?;
                Some(u32::from_le_bytes(word))
            } else {
                None
            };
            while scnt < iters
                && scnt - ccnt < depth
                && credit.is_none_or(|c| (scnt as u32).wrapping_add(1).wrapping_sub(c) < rx as u32)
            {
                let offset = slot_offset(scnt, size, self.cycle, self.line);
                let remote = RemoteAddr {
                    stag: rem.rkey,
                    to: rem.vaddr.wrapping_add(offset),
                };
                let op = match verb {
                    Verb::Read => SendOp::Read(remote),
                    Verb::Write => SendOp::Write(remote),
                    Verb::Send => SendOp::Send,
                };
                posted.push(Instant::now());
                self.post_data(op, self.l.local() + offset, size)?;
                scnt += 1;
            }
            self.turn()?;
            while let Some(wc) = self.data_wc()? {
                if wc.wr_id == WR_DATA {
                    completed.push(Instant::now());
                    ccnt += 1;
                    since = Instant::now();
                }
            }
            self.check_progress(since, "the run")?;
        }
        Ok(bw_report(size, &posted, &completed, depth as usize))
    }

    /// The server's Send bandwidth loop (perftest's `run_iter_bw_server`):
    /// receives reposted, and the count written back (see [`Test::SendBw`]).
    fn send_bw_server(&mut self, rem: &Dest) -> Result<BwReport, String> {
        let (size, iters, rx) = (self.p.size, self.p.iters, u64::from(self.p.rx_depth));
        let credit_every = (rx / 3).max(1);
        let mut posted_recvs = rx.min(iters);
        let mut rcnt = 0u64;
        let mut times = Vec::with_capacity(iters as usize);
        let mut since = Instant::now();
        while rcnt < iters {
            self.turn()?;
            while let Some(wc) = self.data_wc()? {
                match wc.wr_id {
                    WR_DATA_RECV => {
                        self.check_recv(&wc)?;
                        let t = Instant::now();
                        times.push(t);
                        rcnt += 1;
                        since = t;
                        if posted_recvs < iters {
                            self.post_data_recv(posted_recvs)?;
                            posted_recvs += 1;
                        }
                        if (rcnt % rx).is_multiple_of(credit_every) {
                            self.ep
                                .region
                                .write(CREDIT_OUT_AT, &(rcnt as u32).to_le_bytes())
                                .map_err(|e| format!("{e:?}"))?;
                            let remote = RemoteAddr {
                                stag: rem.rkey,
                                to: rem.vaddr,
                            };
                            self.post_wr(
                                WR_CREDIT,
                                SendOp::Write(remote),
                                CREDIT_OUT_AT as u64,
                                4,
                            )?;
                        }
                    }
                    WR_CREDIT => {}
                    _ => return Err(format!("an unexpected {:?} completion", wc.opcode)),
                }
            }
            self.check_progress(since, "the run")?;
        }
        Ok(bw_report_rx(size, &times, rx as usize))
    }

    /// RDMA Write ping-pong (perftest's `run_iter_lat_write`): the server
    /// writes first; each side waits for the iteration's number in the last
    /// octet of its buffer.
    fn write_lat(&mut self, rem: &Dest) -> Result<Vec<f64>, String> {
        let (size, iters) = (self.p.size, self.p.iters);
        let remote = RemoteAddr {
            stag: rem.rkey,
            to: rem.vaddr,
        };
        let post_at = (self.l.local() + size - 1) as usize;
        let poll_at = (self.l.target() + size - 1) as usize;
        let mut posted = Vec::with_capacity(iters as usize);
        let (mut scnt, mut ccnt, mut rcnt) = (0u64, 0u64, 0u64);
        while scnt < iters || ccnt < iters || rcnt < iters {
            // The server writes first: its first turn waits for nothing.
            if rcnt < iters && (self.p.client || scnt >= 1) {
                rcnt += 1;
                let want = rcnt as u8;
                self.wait("the peer's RDMA Write", |s| {
                    let mut b = [0u8];
                    match s.ep.region.read(poll_at, &mut b) {
                        Ok(()) if b[0] == want => Some(Ok(())),
                        Ok(()) => None,
                        Err(e) => Some(Err(format!("{e:?}"))),
                    }
                })?;
            }
            if scnt < iters {
                scnt += 1;
                self.ep
                    .region
                    .write(post_at, &[scnt as u8])
                    .map_err(|e| format!("{e:?}"))?;
                posted.push(Instant::now());
                self.post_data(SendOp::Write(remote), self.l.local(), size)?;
            }
            if ccnt < iters {
                self.wait("our RDMA Write's completion", |s| {
                    s.data_wc().map(|w| w.map(|_| ())).transpose()
                })?;
                ccnt += 1;
            }
        }
        Ok(deltas(&posted, 2.0))
    }

    /// One RDMA Read at a time (perftest's `run_iter_lat`, the client's).
    fn read_lat(&mut self, rem: &Dest) -> Result<Vec<f64>, String> {
        let remote = RemoteAddr {
            stag: rem.rkey,
            to: rem.vaddr,
        };
        let mut posted = Vec::with_capacity(self.p.iters as usize);
        for _ in 0..self.p.iters {
            posted.push(Instant::now());
            self.post_data(SendOp::Read(remote), self.l.local(), self.p.size)?;
            self.wait("our RDMA Read's response", |s| {
                s.data_wc().map(|w| w.map(|_| ())).transpose()
            })?;
        }
        Ok(deltas(&posted, 1.0))
    }

    /// Send ping-pong (perftest's `run_iter_lat_send`): the client sends
    /// first.
    fn send_lat(&mut self) -> Result<Vec<f64>, String> {
        let (size, iters, rx) = (self.p.size, self.p.iters, u64::from(self.p.rx_depth));
        let mut posted_recvs = rx.min(iters);
        let mut posted = Vec::with_capacity(iters as usize);
        let (mut scnt, mut rcnt, mut ccnt) = (0u64, 0u64, 0u64);
        // The next receive; our own Sends' completions are counted on the way.
        let mut next = |s: &mut Self| loop {
            match s.data_wc() {
                Err(e) => return Some(Err(e)),
                Ok(None) => return None,
                Ok(Some(w)) if w.wr_id == WR_DATA_RECV => return Some(Ok(Some(w))),
                Ok(Some(_)) => ccnt += 1,
            }
        };
        while scnt < iters || rcnt < iters {
            // The client sends first: its first turn waits for nothing.
            if rcnt < iters && (!self.p.client || scnt >= 1) {
                let wc = self
                    .wait("the peer's Send", &mut next)?
                    .ok_or("no receive completion")?;
                self.check_recv(&wc)?;
                rcnt += 1;
                if posted_recvs < iters {
                    self.post_data_recv(posted_recvs)?;
                    posted_recvs += 1;
                }
            }
            if scnt < iters {
                scnt += 1;
                posted.push(Instant::now());
                self.post_data(SendOp::Send, self.l.local(), size)?;
            }
        }
        // Every Send of ours completes before the closing handshake.
        self.wait("our Sends' completions", |s| loop {
            match s.data_wc() {
                Err(e) => return Some(Err(e)),
                Ok(Some(w)) if w.wr_id == WR_DATA => ccnt += 1,
                Ok(Some(w)) => {
                    return Some(Err(format!("an unexpected {:?} completion", w.opcode)))
                }
                Ok(None) if ccnt >= iters => return Some(Ok(())),
                Ok(None) => return None,
            }
        })?;
        Ok(deltas(&posted, 2.0))
    }

    /// Closes both connections in order and waits for them to end. After
    /// a run that went well the peer may hang up first, for up to
    /// [`HANG_UP_GRACE`]: Linux siw (6.1) reports a Send or Write it sent
    /// in full as failed (`IBV_WC_LOC_QP_OP_ERR`, "wqe ... processing
    /// failed: -103") when the peer's FIN arrives before its `sendmsg`
    /// returns, and perftest then fails its run; dpwarp answers fast enough
    /// to hit that.
    fn finish(&mut self, ok: bool) {
        let start = Instant::now();
        let stopped = || self.stop.load(Ordering::SeqCst);
        while ok && !stopped() && self.ep.open_connections() > 0 && start.elapsed() < HANG_UP_GRACE
        {
            self.ep.step(now());
            let _ = self.ep.take_ended();
        }
        for qp in [self.data, self.ctrl].into_iter().flatten() {
            self.ep.close(qp);
        }
        let start = Instant::now();
        while self.ep.open_connections() > 0 && start.elapsed() < STALL_LIMIT {
            self.ep.step(now());
            let _ = self.ep.take_ended();
        }
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
