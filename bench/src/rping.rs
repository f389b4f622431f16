//! `bench rping`: rdma-core's rping (librdmacm/examples/rping.c), both
//! roles, over dpwarp's RNIC, so siw's users can test against dpwarp the
//! way they test siw against siw.
//!
//! The protocol, as rping runs it (read from its source and from siw's
//! captures; `tests/data/golden/rping_v2*.pcap`): MPA with IRD = ORD = 1 and
//! no ULP private data; every message is a 16-octet Send of
//! `{ buf: be64, rkey: be32, size: be32 }`. Per iteration the client fills
//! its start buffer with `"rdma-ping-N: "` and a rolling alphabet (last
//! octet 0) and advertises it; the server RDMA Reads it, answers with a
//! Send (rping's server sends 16 zero octets); the client advertises its
//! second buffer; the server RDMA Writes what it read (`strlen + 1`
//! octets) there and Sends again; the client compares the two buffers. An
//! orderly TCP close (no Terminate) ends the connection.
//!
//! Unlike rping, both sides always verify the data (the client the echo,
//! the server the pattern of the iteration it expects), and the exit status
//! is 0 only when every iteration verified.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use control::mpa::StartupConfig;
use control::runtime::{Decision, StartupResult};
use dataplane::CoreTransport;
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::qp::{QpEvent, RtrSet};
use rnic_engine::verbs::{QpHandle, RecvWr, RemoteAddr, SendOp, SendWr};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};

use crate::endpoint::{now, Endpoint};
use crate::link::{self, LinkArgs, PeerTransport};
use crate::pace::Pacer;

/// rping's port.
pub const PORT: u16 = 7174;
/// The TAP interface `bench rping` makes when --tap is not given.
const DEFAULT_TAP: &str = "dpwrping0";
/// rping's smallest buffer: room for `"rdma-ping-2147483647: "` and a 0.
pub const SIZE_MIN: usize = 26;
/// rping's largest buffer.
pub const SIZE_MAX: usize = 65535;
/// Octets of an advertisement.
const INFO_LEN: usize = 16;
/// Connections a persistent server serves at once.
pub const CONNECTIONS_MAX: usize = 64;
/// How long a step of the protocol may wait for the peer.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// `bench rping`: rping's command line (`rping -s|-c -a ADDR ...`), plus
/// dpwarp's transport and MPA choices.
#[derive(Debug, Parser)]
#[command(
    name = "bench rping",
    bin_name = "bench rping",
    about = "rping (rdma-core) over dpwarp: ping-pong RDMA Read/Write/Send with any rping peer, \
             data verified; exit status 0 only when every iteration verified"
)]
pub struct RpingArgs {
    /// Be the server (listen on -a ADDR, -p PORT).
    #[arg(
        short = 's',
        conflicts_with = "client",
        required_unless_present = "client"
    )]
    pub server: bool,

    /// Be the client (connect to -a ADDR, -p PORT).
    #[arg(short = 'c')]
    pub client: bool,

    /// Server: the address to listen on; client: the server's address.
    #[arg(short = 'a')]
    pub addr: Ipv4Addr,

    /// Port (rping's 7174).
    #[arg(short = 'p', default_value_t = PORT)]
    pub port: u16,

    /// Client: iterations (default: until Ctrl-C, as rping).
    #[arg(short = 'C')]
    pub count: Option<u64>,

    /// Buffer size in octets, 26 to 65535 (rping's -S; default 64).
    #[arg(short = 'S', default_value_t = 64)]
    pub size: usize,

    /// Print each iteration's data, as rping -v.
    #[arg(short = 'v')]
    pub verbose: bool,

    /// Verify the data (rping -V): always on here; accepted for rping's
    /// command lines.
    #[arg(short = 'V')]
    pub validate: bool,

    /// Server: serve client after client (rping -P); a client that
    /// misbehaves costs its connection only. Without it the server exits
    /// after its first client.
    #[arg(short = 'P')]
    pub persistent: bool,

    /// What carries TCP: `kernel` (Linux TCP sockets), `tap` (tcp-lite on
    /// a TAP device's fd), `net_tap` (tcp-lite on DPDK's TAP driver),
    /// `af_packet` (tcp-lite on DPDK's AF_PACKET driver, --iface), `memif`
    /// (tcp-lite on DPDK memif, to another dpwarp) or `pci` (a NIC bound
    /// to vfio-pci, --pci). All but `kernel` need --ip and root.
    #[arg(long, value_enum, default_value_t = PeerTransport::Kernel)]
    pub transport: PeerTransport,

    /// MPA revision: 2 (RFC 6581 enhanced, IRD/ORD exchanged) or 1.
    #[arg(long = "mpa-rev", default_value_t = 2)]
    pub mpa_rev: u8,

    /// Ask for MPA CRC32c (used if either side asks).
    #[arg(long)]
    pub crc: bool,

    /// Client: ask for the peer-to-peer model with this RTR (RFC 6581).
    #[arg(long, value_enum)]
    pub p2p: Option<RtrArg>,

    /// Ask for MPA markers (RFC 5044 §5; siw refuses them).
    #[arg(long)]
    pub markers: bool,

    /// Server: reject every connection, with this text as the MPA Reply's
    /// private data.
    #[arg(long, value_name = "TEXT")]
    pub reject: Option<String>,

    /// Inbound RDMA Reads we accept (IRD; rping uses 1). A client's 0
    /// leaves rping's server no Read to issue, and every iteration fails:
    /// a test of the peer's IRD/ORD negotiation (RFC 6581 §9.1), which the
    /// interop suite runs against siw.
    #[arg(long, default_value_t = 1)]
    pub ird: u16,

    /// Outbound RDMA Reads we issue at once (ORD; rping uses 1; a server's
    /// 0 fails every iteration likewise).
    #[arg(long, default_value_t = 1)]
    pub ord: u16,

    /// The link (TAP and DPDK options; the TAP interface defaults to
    /// dpwrping0).
    #[command(flatten)]
    pub link: LinkArgs,

    /// Client: milliseconds to wait after the MPA Reply before the first
    /// FPDU. Linux siw (6.1) sends its Reply before it hands the socket to
    /// its receive path; an FPDU that lands in between waits for the next
    /// segment, which in rping never comes (a 10 s stall).
    #[arg(long = "settle-ms", default_value_t = 50)]
    pub settle_ms: u64,

    /// Spin the core without rest, as a poll-mode core does. By default
    /// it naps 50 us after each idle turn once it has been idle for
    /// 200 us (`bench::pace`), which leaves the CPU to a slow peer on the
    /// same machine (siw in an emulated guest); a peer that answers within
    /// 200 us never meets a nap.
    #[arg(long = "busy-poll")]
    pub busy_poll: bool,

    /// How our Terminates lay out their control word: `rfc5040` (RFC 5040
    /// §4.8) or `siw` (Linux siw's little-endian bitfield, which siw reads
    /// ours with; it reads RFC 5040's with layer and type swapped).
    #[arg(long = "term-layout", value_enum, default_value_t = TermLayout::Rfc5040)]
    pub term_layout: TermLayout,

    /// Misbehave on purpose, to make a peer (or ourselves) terminate:
    /// `bad-stag` (client: advertise a start buffer under an STag we do not
    /// have; server: RDMA Write to an STag the client did not advertise),
    /// `bad-read-stag` (server: RDMA Read from one), `bounds` (client:
    /// advertise an echo buffer that runs past the end of our memory),
    /// `no-recv` (server: post no receives, so the client's Send finds none).
    #[arg(long, value_enum)]
    pub fault: Option<Fault>,

    /// IP MTU of the path (FPDUs are sized for it).
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,
}

/// A Terminate layout on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TermLayout {
    /// RFC 5040 §4.8.
    Rfc5040,
    /// Linux siw's bitfield.
    Siw,
}

/// A deliberate fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Fault {
    /// An STag the peer does not have.
    BadStag,
    /// Server: a Read from an STag the client did not advertise.
    BadReadStag,
    /// Client: an echo buffer past the end of our memory.
    Bounds,
    /// Server: no receives posted.
    NoRecv,
}

/// An RTR type on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RtrArg {
    /// Zero-length RDMA Write.
    Write,
    /// Zero-length RDMA Read.
    Read,
    /// Zero-length Send.
    Send,
}

impl TermLayout {
    fn encoding(self) -> rnic_engine::wire::term::Encoding {
        match self {
            TermLayout::Rfc5040 => rnic_engine::wire::term::Encoding::Rfc5040,
            TermLayout::Siw => rnic_engine::wire::term::Encoding::SiwBitfield,
        }
    }
}

impl RpingArgs {
    /// Checks what clap cannot, saying what to fix.
    pub fn check(&self) -> Result<(), String> {
        if !(SIZE_MIN..=SIZE_MAX).contains(&self.size) {
            return Err(format!(
                "-S {}: give a size from {SIZE_MIN} to {SIZE_MAX} octets",
                self.size
            ));
        }
        if !(1..=2).contains(&self.mpa_rev) {
            return Err(format!("--mpa-rev {}: give 1 or 2", self.mpa_rev));
        }
        if self.count == Some(0) {
            return Err("-C 0: give at least one iteration (or leave -C out)".into());
        }
        // Longer looks like a hang (and overflowed the clock far above).
        if self.settle_ms > 10_000 {
            return Err(format!(
                "--settle-ms {}: give at most 10000 ms",
                self.settle_ms
            ));
        }
        if self.server && self.p2p.is_some() {
            return Err("--p2p is the client's choice (a server takes any RTR)".into());
        }
        if self.mpa_rev == 1 && self.p2p.is_some() {
            return Err("--p2p needs --mpa-rev 2 (RTRs are RFC 6581's)".into());
        }
        // Found by a review: ignored on a client.
        if self.client && self.persistent {
            return Err(
                "-P is the server's (persistent: it serves clients one after another): drop it \
                 on the client"
                    .into(),
            );
        }
        if self.client && self.reject.is_some() {
            return Err("--reject is the server's (a client cannot reject)".into());
        }
        if self.reject.as_ref().is_some_and(|r| r.len() > 500) {
            return Err("--reject: at most 500 octets of private data".into());
        }
        match (self.fault, self.server) {
            (Some(Fault::BadReadStag | Fault::NoRecv), false) => {
                return Err("--fault bad-read-stag and no-recv are the server's".into())
            }
            (Some(Fault::Bounds), true) => return Err("--fault bounds is the client's".into()),
            _ => {}
        }
        if self.transport != PeerTransport::Kernel {
            self.link
                .address()
                .map_err(|e| format!("--transport {}: {e}", self.transport.name()))?;
        }
        self.link.cpus()?;
        if !(576..=9000).contains(&self.mtu) {
            return Err(format!("--mtu {}: give 576 to 9000", self.mtu));
        }
        Ok(())
    }

    fn startup(&self) -> StartupConfig {
        let mut rtr = RtrSet::ALL;
        if let Some(p2p) = self.p2p {
            rtr = RtrSet {
                write: p2p == RtrArg::Write,
                read: p2p == RtrArg::Read,
                send: p2p == RtrArg::Send,
            };
        }
        StartupConfig {
            revision: self.mpa_rev,
            enhanced: self.mpa_rev == 2,
            crc: self.crc,
            markers: self.markers,
            peer_to_peer: self.p2p.is_some(),
            rtr,
            ird: self.ird,
            ord: self.ord,
            ..StartupConfig::default()
        }
    }
}

/// One advertisement: a buffer as the peer addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Info {
    /// Its address (our tagged offset).
    pub buf: u64,
    /// Its STag (rping's rkey).
    pub rkey: u32,
    /// Its length.
    pub size: u32,
}

impl Info {
    /// Its 16 octets.
    pub fn encode(&self) -> [u8; INFO_LEN] {
        let mut out = [0; INFO_LEN];
        out[..8].copy_from_slice(&self.buf.to_be_bytes());
        out[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        out[12..].copy_from_slice(&self.size.to_be_bytes());
        out
    }

    /// Reads one.
    pub fn decode(octets: &[u8; INFO_LEN]) -> Info {
        let mut buf = [0; 8];
        buf.copy_from_slice(&octets[..8]);
        let mut word = [0; 4];
        word.copy_from_slice(&octets[8..12]);
        let rkey = u32::from_be_bytes(word);
        word.copy_from_slice(&octets[12..]);
        Info {
            buf: u64::from_be_bytes(buf),
            rkey,
            size: u32::from_be_bytes(word),
        }
    }
}

/// The buffer of iteration `ping` of `size` octets, as rping's client
/// fills it: `"rdma-ping-N: "`, then letters from `'A' + ping % 58`
/// counting up through `'z'` and wrapping to `'A'`, the last octet 0.
pub fn ping_data(ping: u64, size: usize) -> Vec<u8> {
    let mut out = format!("rdma-ping-{ping}: ").into_bytes();
    out.truncate(size.saturating_sub(1));
    let mut c = b'A' + (ping % 58) as u8;
    while out.len() < size {
        out.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = out.last_mut() {
        *last = 0;
    }
    out
}

/// What a finished rping did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Iterations whose data verified.
    pub verified: u64,
    /// Connections that ended in an error.
    pub failed: u64,
}

/// Where a connection's buffers are in the registered memory.
#[derive(Debug, Clone, Copy)]
struct Layout {
    size: usize,
    /// Where slot 0 starts in the registered memory.
    origin: usize,
}

impl Layout {
    fn slot_len(&self) -> usize {
        (2 * self.size + 3 * INFO_LEN).next_multiple_of(64)
    }
    fn base(&self, slot: usize) -> usize {
        self.origin + slot * self.slot_len()
    }
    /// The client's start buffer; the server's read buffer.
    fn first(&self, slot: usize) -> usize {
        self.base(slot)
    }
    /// The client's echo buffer.
    fn second(&self, slot: usize) -> usize {
        self.base(slot) + self.size
    }
    fn recv(&self, slot: usize, which: usize) -> usize {
        self.base(slot) + 2 * self.size + which * INFO_LEN
    }
    fn send(&self, slot: usize) -> usize {
        self.recv(slot, 2)
    }
    fn memory(&self, slots: usize) -> usize {
        slots * self.slot_len()
    }
}

// wr_id: the kind of work request in the low octet, the slot above.
const WR_RECV0: u64 = 0;
const WR_RECV1: u64 = 1;
const WR_SEND: u64 = 2;
const WR_READ: u64 = 3;
const WR_WRITE: u64 = 4;

fn wr_id(slot: usize, kind: u64) -> u64 {
    (slot as u64) << 8 | kind
}

fn post_recv<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    qp: QpHandle,
    l: Layout,
    slot: usize,
    which: u64,
) -> Result<(), String> {
    let sgl = [ep.sge(l.recv(slot, which as usize) as u64, INFO_LEN as u32)];
    ep.rnic()
        .post_recv(
            qp,
            &RecvWr {
                wr_id: wr_id(slot, which),
                sgl: &sgl,
            },
        )
        .map_err(|e| format!("posting a receive: {e:?}"))
}

fn post_send<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    qp: QpHandle,
    l: Layout,
    slot: usize,
    info: [u8; INFO_LEN],
) -> Result<(), String> {
    ep.region
        .write(l.send(slot), &info)
        .map_err(|e| format!("{e:?}"))?;
    let sgl = [ep.sge(l.send(slot) as u64, INFO_LEN as u32)];
    let wr = SendWr {
        wr_id: wr_id(slot, WR_SEND),
        op: SendOp::Send,
        sgl: &sgl,
        signaled: true,
        solicited: false,
        fence: false,
    };
    ep.rnic()
        .post_send(qp, &wr)
        .map_err(|e| format!("posting a Send: {e:?}"))
}

fn post_rdma<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    qp: QpHandle,
    slot: usize,
    kind: u64,
    local: usize,
    len: usize,
    remote: RemoteAddr,
) -> Result<(), String> {
    let sgl = [ep.sge(local as u64, len as u32)];
    let op = if kind == WR_READ {
        SendOp::Read(remote)
    } else {
        SendOp::Write(remote)
    };
    let wr = SendWr {
        wr_id: wr_id(slot, kind),
        op,
        sgl: &sgl,
        signaled: true,
        solicited: false,
        fence: false,
    };
    ep.rnic().post_send(qp, &wr).map_err(|e| {
        format!(
            "posting an RDMA {}: {e:?}",
            if kind == WR_READ { "Read" } else { "Write" }
        )
    })
}

fn read_info<T: CoreTransport>(
    ep: &Endpoint<T>,
    l: Layout,
    slot: usize,
    which: u64,
) -> Result<Info, String> {
    let mut octets = [0; INFO_LEN];
    ep.region
        .read(l.recv(slot, which as usize), &mut octets)
        .map_err(|e| format!("{e:?}"))?;
    Ok(Info::decode(&octets))
}

/// A Terminate sent or received, in words (the interop suite greps these).
pub(crate) fn term_text(event: QpEvent) -> String {
    match event {
        QpEvent::TerminateSent(t) => format!(
            "sent a Terminate: layer {} type {} code {:#04x}",
            t.layer, t.etype, t.ecode
        ),
        QpEvent::TerminateReceived(t) => format!(
            "the peer sent a Terminate: layer {} type {} code {:#04x}",
            t.layer, t.etype, t.ecode
        ),
    }
}

fn emss(args: &RpingArgs) -> usize {
    // IP and TCP headers with timestamps, as Linux sends them.
    args.mtu - 52
}

/// Runs `bench rping`; returns the process's exit status.
pub fn main(argv: Vec<String>, stop: &AtomicBool) -> i32 {
    let args = match RpingArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    if let Err(why) = args.check() {
        eprintln!("bench rping: {why}");
        return 2;
    }
    let result = match args.transport {
        PeerTransport::Kernel => {
            let kc = KernelConfig {
                bind: if args.server {
                    args.addr
                } else {
                    Ipv4Addr::UNSPECIFIED
                },
                ..KernelConfig::default()
            };
            match KernelTransport::new(kc) {
                Ok(t) => run(t, emss(&args), &args, stop),
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
            run(stack, emss, &args, stop)
        }),
        dpdk => link::run_on_dpdk(
            dpdk,
            &args.link,
            args.mtu,
            args.server,
            DEFAULT_TAP,
            |stack| {
                let emss = stack.emss();
                run(stack, emss, &args, stop)
            },
        ),
    };
    match result {
        Ok(o) if o.failed == 0 => 0,
        Ok(o) => {
            eprintln!(
                "bench rping: {} connection(s) failed ({} iteration(s) verified)",
                o.failed, o.verified
            );
            1
        }
        Err(why) => {
            eprintln!("bench rping: {why}");
            1
        }
    }
}

fn run<T: CoreTransport>(
    transport: T,
    emss: usize,
    args: &RpingArgs,
    stop: &AtomicBool,
) -> Result<Outcome, String> {
    let layout = Layout {
        size: args.size,
        origin: 0,
    };
    if args.server {
        let slots = if args.persistent { CONNECTIONS_MAX } else { 1 };
        // Its memory is its own: it Reads into it and Writes from it, and
        // no client may reach another's slots (a client that named its
        // STag once read another client's buffers).
        let mut ep = Endpoint::new_local(transport, emss, 7, layout.memory(slots));
        ep.set_terminate_layout(args.term_layout.encoding());
        ep.set_pacing((!args.busy_poll).then(Pacer::default));
        server(&mut ep, layout, slots, args, stop)
    } else {
        let mut ep = Endpoint::new(transport, emss, 5, layout.memory(1));
        ep.set_settle(tcp_lite::Duration::from_millis(args.settle_ms));
        ep.set_terminate_layout(args.term_layout.encoding());
        ep.set_pacing((!args.busy_poll).then(Pacer::default));
        client(&mut ep, layout, args, stop)
    }
}

/// Where a server connection is in rping's loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the client's start buffer.
    ReadAdv,
    /// Reading it.
    Reading,
    /// Waiting for the client's echo buffer.
    WriteAdv,
    /// Writing the echo.
    Writing,
}

struct Served {
    qp: QpHandle,
    slot: usize,
    /// The client host whose place in [`HostCap`] it holds.
    host: Option<Ipv4Addr>,
    phase: Phase,
    /// Iterations done (the next one expected).
    ping: u64,
    echo_len: usize,
    peer: String,
    since: Instant,
    /// A Terminate went either way: the connection failed.
    terminated: bool,
    /// The connection failed here and was counted (it is being ended).
    failed: bool,
    /// We closed it for want of progress (a second stall aborts it).
    stalled: bool,
}

/// What a server does besides rping's protocol.
#[derive(Debug, Clone, Copy, Default)]
struct ServeOpts {
    /// Print rping's `-v` lines.
    verbose: bool,
    /// A deliberate fault (the interop suite's).
    fault: Option<Fault>,
}

/// How a served connection ended ([`RpingService::ended`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The client closed between iterations, as rping does when done.
    Done,
    /// It failed (a Terminate, an error, or gone mid-iteration).
    Failed,
}

/// rping's server side for the connections of one core, as a service:
/// the core's loop hands it the connections it serves, their
/// completions, ends and Terminates. Each connection has a slot of the
/// registered memory (its buffers); the slot is free again only once the
/// connection's QP is gone. `bench rping -s` runs one; the appliance runs
/// one per core beside its other services.
pub struct RpingService {
    layout: Layout,
    served: Vec<Served>,
    free: Vec<usize>,
    outcome: Outcome,
    opts: ServeOpts,
    /// What one client host may hold, over every core that shares it
    /// ([`RpingService::limited_by`]); none: as many as the slots.
    hosts: Option<Arc<HostCap>>,
}

/// How many connections one client host holds of a service whose cores
/// each have an [`RpingService`], and at most how many it may: a host that
/// opens connections from as many source ports as it likes and keeps each
/// one just alive would otherwise take every slot of every core from the
/// other hosts (as a review found of the appliance's memory and bench
/// services). Taken once per connection at its establishment, not per
/// packet.
#[derive(Debug)]
pub struct HostCap {
    per_host: usize,
    held: Mutex<HashMap<Ipv4Addr, usize>>,
    /// Connections reset at establishment because their host held its share
    /// (a burst whose startups all passed a gate that checks the count
    /// before any is established).
    turned_away: std::sync::atomic::AtomicU64,
}

impl HostCap {
    /// One host holds at most `per_host` (at least 1) connections.
    pub fn new(per_host: usize) -> Arc<HostCap> {
        Arc::new(HostCap {
            per_host: per_host.max(1),
            held: Mutex::new(HashMap::new()),
            turned_away: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// At most how many connections one host holds.
    pub fn per_host(&self) -> usize {
        self.per_host
    }

    /// Connections reset at establishment because their host held its share.
    pub fn turned_away(&self) -> u64 {
        self.turned_away.load(Ordering::Relaxed)
    }

    /// Connections `host` holds now.
    pub fn held_by(&self, host: Ipv4Addr) -> usize {
        self.lock().get(&host).copied().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Ipv4Addr, usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, host: Ipv4Addr) -> bool {
        let mut held = self.lock();
        let n = held.entry(host).or_default();
        if *n >= self.per_host {
            self.turned_away.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        *n += 1;
        true
    }

    fn give(&self, host: Ipv4Addr) {
        let mut held = self.lock();
        if let Some(n) = held.get_mut(&host) {
            *n -= 1;
            if *n == 0 {
                held.remove(&host);
            }
        }
    }
}

impl RpingService {
    /// Octets of registered memory `slots` connections of at most `size`
    /// octets take.
    pub fn memory(size: usize, slots: usize) -> usize {
        Layout { size, origin: 0 }.memory(slots)
    }

    /// A service for buffers of at most `size` octets (rping's `-S`),
    /// `slots` connections at once, in the registered memory from offset
    /// `origin` on ([`RpingService::memory`] octets of it).
    pub fn new(size: usize, slots: usize, origin: usize, verbose: bool) -> RpingService {
        RpingService::with(
            Layout { size, origin },
            slots,
            ServeOpts {
                verbose,
                fault: None,
            },
        )
    }

    fn with(layout: Layout, slots: usize, opts: ServeOpts) -> RpingService {
        RpingService {
            layout,
            served: Vec::new(),
            free: (0..slots).rev().collect(),
            outcome: Outcome::default(),
            opts,
            hosts: None,
        }
    }

    /// The service with one client host held to `hosts`' share, which the
    /// other cores' services of the same service share.
    pub fn limited_by(mut self, hosts: Arc<HostCap>) -> RpingService {
        self.hosts = Some(hosts);
        self
    }

    /// Iterations verified and connections failed so far.
    pub fn outcome(&self) -> Outcome {
        self.outcome
    }

    /// Serves QP `qp`, the connection from `peer`: posts its receives.
    /// Without a free slot, or if posting fails, it closes the connection
    /// and returns false.
    pub fn established<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        qp: QpHandle,
        from: Option<SocketAddrV4>,
    ) -> bool {
        let peer = from.map_or("a client".to_string(), |p| p.to_string());
        let host = from.map(|p| *p.ip());
        if let (Some(hosts), Some(ip)) = (&self.hosts, host) {
            if !hosts.take(ip) {
                eprintln!(
                    "bench rping: {ip} holds {} connections already, as many as one host \
                     may; resetting {peer}",
                    hosts.per_host()
                );
                ep.abort(qp);
                return false;
            }
        }
        // The host's place, given back if the connection is not served.
        let give_back = |hosts: &Option<Arc<HostCap>>| {
            if let (Some(hosts), Some(ip)) = (hosts, host) {
                hosts.give(ip);
            }
        };
        let Some(slot) = self.free.pop() else {
            give_back(&self.hosts);
            // Reset, not closed: a peer that never closes its side held
            // the QP until the closing limit (found by a review).
            eprintln!(
                "bench rping: {} clients already; resetting {peer}",
                self.served.len()
            );
            ep.abort(qp);
            return false;
        };
        let l = self.layout;
        let posted = if self.opts.fault == Some(Fault::NoRecv) {
            Ok(())
        } else {
            post_recv(ep, qp, l, slot, WR_RECV0).and_then(|()| post_recv(ep, qp, l, slot, WR_RECV1))
        };
        if let Err(why) = posted {
            eprintln!("bench rping: {peer}: {why}");
            self.free.push(slot);
            give_back(&self.hosts);
            ep.abort(qp);
            return false;
        }
        self.served.push(Served {
            qp,
            slot,
            host: host.filter(|_| self.hosts.is_some()),
            phase: Phase::ReadAdv,
            ping: 0,
            echo_len: 0,
            peer,
            since: Instant::now(),
            terminated: false,
            failed: false,
            stalled: false,
        });
        true
    }

    /// A Terminate went either way on `qp`; reported, and the connection
    /// counted as failed when it ends. Returns whether `qp` is served here.
    pub fn terminated(&mut self, qp: QpHandle, event: QpEvent) -> bool {
        let Some(s) = self.served.iter_mut().find(|s| s.qp == qp) else {
            return false;
        };
        eprintln!("bench rping: {}: {}", s.peer, term_text(event));
        s.terminated = true;
        true
    }

    /// QP `qp` is gone: its slot is free again. `None` if it was not
    /// served here.
    pub fn ended(&mut self, qp: QpHandle) -> Option<Ended> {
        let i = self.served.iter().position(|s| s.qp == qp)?;
        // Only now, with the QP gone, may the slot serve another.
        let s = self.served.swap_remove(i);
        self.free.push(s.slot);
        if let (Some(hosts), Some(ip)) = (&self.hosts, s.host) {
            hosts.give(ip);
        }
        if s.failed {
            // Counted and reported when it failed.
            Some(Ended::Failed)
        } else if s.terminated {
            // Reported with the Terminate.
            self.outcome.failed += 1;
            Some(Ended::Failed)
        } else if s.phase == Phase::ReadAdv {
            if self.opts.verbose {
                println!(
                    "server DISCONNECT EVENT from {} after {} iteration(s)",
                    s.peer, s.ping
                );
            }
            Some(Ended::Done)
        } else {
            eprintln!(
                "bench rping: {} left in the middle of iteration {}",
                s.peer, s.ping
            );
            self.outcome.failed += 1;
            Some(Ended::Failed)
        }
    }

    /// One completion; returns whether it was for a QP served here. A
    /// failure ends that connection at once (its QP with it, so nothing
    /// the client sends later lands in the slot).
    pub fn completion<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>, wc: &Wc) -> bool {
        let Some(i) = self.served.iter().position(|s| s.qp == wc.qp) else {
            return false;
        };
        if self.served[i].failed {
            return true;
        }
        let (l, opts) = (self.layout, self.opts);
        if let Err(why) = serve_completion(ep, l, &mut self.served[i], wc, opts) {
            let s = &mut self.served[i];
            eprintln!("bench rping: {}: iteration {}: {why}", s.peer, s.ping);
            self.outcome.failed += 1;
            s.failed = true;
            // Its end, seen next turn, frees the slot.
            ep.abort(s.qp);
            return true;
        }
        if self.served[i].phase == Phase::ReadAdv && wc.wr_id & 0xff == WR_WRITE {
            self.outcome.verified += 1;
        }
        true
    }

    /// A client that makes no progress (idle in any phase) is closed; one
    /// that does not close then is reset, so no slot is held forever.
    pub fn tick<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) {
        for s in &mut self.served {
            if !s.failed && s.since.elapsed() > STALL_LIMIT {
                eprintln!(
                    "bench rping: {}: no progress for {} s{}",
                    s.peer,
                    STALL_LIMIT.as_secs(),
                    if s.stalled {
                        "; resetting"
                    } else {
                        "; closing"
                    }
                );
                s.since = Instant::now();
                if s.stalled {
                    ep.abort(s.qp);
                } else {
                    s.stalled = true;
                    ep.close(s.qp);
                }
            }
        }
    }

    /// The clients it serves now: QP number, peer.
    pub fn clients(&self) -> Vec<(u32, String)> {
        self.served
            .iter()
            .map(|s| (s.qp.index() as u32, s.peer.clone()))
            .collect()
    }

    /// The QPs it serves (to end them at a drain's deadline).
    pub fn qps(&self) -> Vec<QpHandle> {
        self.served.iter().map(|s| s.qp).collect()
    }
}

fn server<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    l: Layout,
    slots: usize,
    args: &RpingArgs,
    stop: &AtomicBool,
) -> Result<Outcome, String> {
    let reject = args.reject.clone();
    ep.control.listen(
        args.port,
        args.startup(),
        Box::new(move |_, peer| match &reject {
            Some(text) => {
                eprintln!("bench rping: rejecting {peer} (--reject)");
                Decision::Reject(text.clone().into_bytes())
            }
            None => Decision::Accept(control::mpa::Accept::default()),
        }),
    );
    let start = Instant::now();
    loop {
        ep.step(now());
        if let Some(status) = ep.listen_status(args.port) {
            status?;
            break;
        }
        if start.elapsed() > STALL_LIMIT {
            return Err("the control plane never set up the listener".into());
        }
    }
    if args.verbose {
        println!("bench rping: listening on {}:{}", args.addr, args.port);
    }
    let mut service = RpingService::with(
        l,
        slots,
        ServeOpts {
            verbose: args.verbose,
            fault: args.fault,
        },
    );
    let mut wcs: Vec<Wc> = Vec::new();
    let mut connections = 0u64;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(service.outcome());
        }
        ep.step(now());
        for (qp, event) in ep.take_events() {
            if !service.terminated(qp, event) {
                eprintln!("bench rping: a client: {}", term_text(event));
            }
        }
        // Ends first: a new QP may take an ended one's handle in this step.
        for qp in ep.take_ended() {
            if service.ended(qp).is_some() && !args.persistent {
                drain(ep);
                return Ok(service.outcome());
            }
        }
        for (handoff, qp) in ep.take_handoffs() {
            match (handoff.result, qp) {
                (StartupResult::Established(_), Some(qp)) => {
                    let peer = handoff
                        .conn
                        .and_then(|c| ep.core.transport().endpoints(c).ok())
                        .map(|(_, p)| p);
                    if service.established(ep, qp, peer) {
                        connections += 1;
                    }
                }
                (StartupResult::Rejected(_), _) => {
                    // Our --reject: the rejection was the point.
                    connections += 1;
                    if !args.persistent {
                        drain(ep);
                        return Ok(service.outcome());
                    }
                }
                (StartupResult::Failed(f), _) => {
                    eprintln!("bench rping: a client's MPA startup failed: {}", f.reason);
                    service.outcome.failed += 1;
                    if !args.persistent && connections == 0 {
                        return Ok(service.outcome());
                    }
                }
                _ => {}
            }
        }
        wcs.clear();
        ep.poll_cq(&mut wcs);
        for wc in &wcs {
            service.completion(ep, wc);
        }
        service.tick(ep);
    }
}

/// Steps until every connection has ended (what is queued, a Reject or a
/// Terminate and our FIN, goes out first), at most [`STALL_LIMIT`].
pub(crate) fn drain<T: CoreTransport>(ep: &mut Endpoint<T>) {
    let start = Instant::now();
    while ep.open_connections() > 0 && start.elapsed() < STALL_LIMIT {
        ep.step(now());
        let _ = ep.take_ended();
    }
}

/// One completion of a served connection.
fn serve_completion<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    l: Layout,
    s: &mut Served,
    wc: &Wc,
    args: ServeOpts,
) -> Result<(), String> {
    let verbose = args.verbose;
    if wc.status != WcStatus::Success {
        return Err(format!("work request ended {:?}", wc.status));
    }
    let kind = wc.wr_id & 0xff;
    match (kind, s.phase) {
        (WR_RECV0 | WR_RECV1, Phase::ReadAdv | Phase::WriteAdv) => {
            if wc.byte_len as usize != INFO_LEN {
                return Err(format!("received bogus data, size {}", wc.byte_len));
            }
            let info = read_info(ep, l, s.slot, kind)?;
            post_recv(ep, s.qp, l, s.slot, kind)?;
            let mut remote = RemoteAddr {
                stag: info.rkey,
                to: info.buf,
            };
            // A deliberate fault: an STag the client never advertised.
            let wrong = RemoteAddr {
                stag: info.rkey ^ 0x5a5a_5a00,
                ..remote
            };
            if matches!(args.fault, Some(Fault::BadStag | Fault::BadReadStag)) {
                // Let the client's Send leave its transmitter first: Linux
                // siw (6.1) skips the Terminate it owes when a send is still
                // in progress ("cannot send TERMINATE: op 3 in progress")
                // and just closes. Fault injection only.
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            if s.phase == Phase::ReadAdv {
                if args.fault == Some(Fault::BadReadStag) {
                    remote = wrong;
                }
                if info.size == 0 {
                    return Err("the client advertised an empty buffer".into());
                }
                if info.size as usize > l.size {
                    return Err(format!(
                        "the client's buffer is {} octets, ours {} (start the server with -S {})",
                        info.size, l.size, info.size
                    ));
                }
                post_rdma(
                    ep,
                    s.qp,
                    s.slot,
                    WR_READ,
                    l.first(s.slot),
                    info.size as usize,
                    remote,
                )?;
                s.echo_len = info.size as usize;
                s.phase = Phase::Reading;
            } else {
                if (info.size as usize) < s.echo_len {
                    return Err(format!(
                        "the client's echo buffer is {} octets, its data {}",
                        info.size, s.echo_len
                    ));
                }
                if args.fault == Some(Fault::BadStag) {
                    remote = wrong;
                }
                post_rdma(
                    ep,
                    s.qp,
                    s.slot,
                    WR_WRITE,
                    l.first(s.slot),
                    s.echo_len,
                    remote,
                )?;
                s.phase = Phase::Writing;
            }
            s.since = Instant::now();
        }
        (WR_READ, Phase::Reading) => {
            let mut data = vec![0; s.echo_len];
            ep.region
                .read(l.first(s.slot), &mut data)
                .map_err(|e| format!("{e:?}"))?;
            let want = ping_data(s.ping, s.echo_len);
            if data != want {
                return Err(format!(
                    "data mismatch in rping's iteration {}: {}",
                    s.ping,
                    mismatch(&data, &want)
                ));
            }
            // rping writes back strlen + 1 octets.
            s.echo_len = data
                .iter()
                .position(|&b| b == 0)
                .map_or(data.len(), |n| n + 1);
            if verbose {
                println!(
                    "server ping data: {}",
                    String::from_utf8_lossy(&data[..s.echo_len.saturating_sub(1)])
                );
            }
            post_send(ep, s.qp, l, s.slot, [0; INFO_LEN])?;
            s.phase = Phase::WriteAdv;
        }
        (WR_WRITE, Phase::Writing) => {
            post_send(ep, s.qp, l, s.slot, [0; INFO_LEN])?;
            s.ping += 1;
            s.phase = Phase::ReadAdv;
        }
        (WR_SEND, _) => {}
        (kind, phase) => {
            let what = match kind {
                WR_RECV0 | WR_RECV1 => "a receive (the client's advertisement)",
                WR_SEND => "a send",
                WR_READ => "an RDMA Read",
                WR_WRITE => "an RDMA Write",
                _ => "an unknown work request",
            };
            return Err(format!(
                "{what} completed in phase {phase:?}: the client broke rping's order (one \
                 advertisement at a time, each after our answer to the last)"
            ));
        }
    }
    Ok(())
}

/// Where `got` first differs from `want`, with a few octets of each from
/// there (a client's whole 64 KiB buffer, twice, in every error line let it
/// fill the log).
fn mismatch(got: &[u8], want: &[u8]) -> String {
    const CONTEXT: usize = 32;
    let at = got
        .iter()
        .zip(want)
        .position(|(g, w)| g != w)
        .unwrap_or(got.len().min(want.len()));
    let piece = |b: &[u8]| {
        let end = (at + CONTEXT).min(b.len());
        String::from_utf8_lossy(&b[at.min(end)..end]).into_owned()
    };
    format!(
        "{} octets, first difference at octet {at}: read {:?}..., expected {:?}...",
        got.len(),
        piece(got),
        piece(want)
    )
}

fn client<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    l: Layout,
    args: &RpingArgs,
    stop: &AtomicBool,
) -> Result<Outcome, String> {
    let server = SocketAddrV4::new(args.addr, args.port);
    let token = ep.control.connect(server, args.startup(), b"");
    let start = Instant::now();
    let qp = loop {
        ep.step(now());
        if let Some((handoff, qp)) = ep
            .take_handoffs()
            .into_iter()
            .find(|(h, _)| h.token == token)
        {
            match (handoff.result, qp) {
                (StartupResult::Established(_), Some(qp)) => break qp,
                (StartupResult::Rejected(r), _) => {
                    return Err(format!(
                        "{server} rejected the connection (MPA Reply with R=1, private data {:?})",
                        String::from_utf8_lossy(&r.private_data)
                    ))
                }
                (StartupResult::Failed(f), _) => {
                    return Err(format!("connecting to {server} failed: {}", f.reason))
                }
                _ => return Err(format!("connecting to {server} failed")),
            }
        }
        if start.elapsed() > STALL_LIMIT {
            return Err(format!(
                "no connection to {server} after {} s",
                STALL_LIMIT.as_secs()
            ));
        }
        if stop.load(Ordering::SeqCst) {
            return Err(format!("interrupted before {server} answered"));
        }
    };
    post_recv(ep, qp, l, 0, WR_RECV0)?;
    post_recv(ep, qp, l, 0, WR_RECV1)?;
    let advertise = |ep: &Endpoint<T>, at: usize| {
        let mut info = Info {
            buf: ep.mr.base_to + at as u64,
            rkey: ep.mr.stag,
            size: l.size as u32,
        };
        match args.fault {
            // The start buffer under an STag we do not have.
            Some(Fault::BadStag) if at == l.first(0) => info.rkey ^= 0x5a5a_5a00,
            // The echo buffer's second half past the end of our memory.
            Some(Fault::Bounds) if at == l.second(0) => {
                info.buf = ep.mr.base_to + (ep.region.len() - l.size / 2) as u64;
            }
            _ => {}
        }
        info
    };
    let mut outcome = Outcome::default();
    let mut ping = 0u64;
    let result = loop {
        if args.count.is_some_and(|c| ping >= c) {
            break Ok(());
        }
        if stop.load(Ordering::SeqCst) {
            // Without -C, Ctrl-C is how rping ends; with it, the run is short.
            break match args.count {
                Some(c) => Err(format!("interrupted after {ping} of {c} iterations")),
                None => Ok(()),
            };
        }
        let data = ping_data(ping, l.size);
        ep.region
            .write(l.first(0), &data)
            .map_err(|e| format!("{e:?}"))?;
        ep.region
            .write(l.second(0), &vec![0; l.size])
            .map_err(|e| format!("{e:?}"))?;
        let step = post_send(ep, qp, l, 0, advertise(ep, l.first(0)).encode())
            .and_then(|()| wait_recv(ep, qp, l, "the server's go-ahead after its Read", stop))
            .and_then(|()| post_send(ep, qp, l, 0, advertise(ep, l.second(0)).encode()))
            .and_then(|()| wait_recv(ep, qp, l, "the server's go-ahead after its Write", stop));
        if let Err(why) = step {
            break Err(format!("iteration {ping}: {why}"));
        }
        let mut echo = vec![0; l.size];
        ep.region
            .read(l.second(0), &mut echo)
            .map_err(|e| format!("{e:?}"))?;
        if echo != data {
            break Err(format!(
                "iteration {ping}: data mismatch, what the server wrote back against what \
                 we sent: {}",
                mismatch(&echo, &data)
            ));
        }
        outcome.verified += 1;
        if args.verbose {
            println!(
                "ping data: {}",
                String::from_utf8_lossy(&echo[..l.size - 1])
            );
        }
        ping += 1;
    };
    for (_, event) in ep.take_events() {
        eprintln!("bench rping: {}", term_text(event));
    }
    // An orderly close, as rping's disconnect: FIN, no Terminate.
    ep.close(qp);
    let start = Instant::now();
    while ep.open_connections() > 0 && start.elapsed() < STALL_LIMIT {
        ep.step(now());
        let _ = ep.take_ended();
    }
    if args.verbose {
        println!("client DISCONNECT EVENT...");
    }
    match result {
        Ok(()) => Ok(outcome),
        Err(why) => {
            eprintln!("bench rping: {why}");
            outcome.failed += 1;
            Ok(outcome)
        }
    }
}

/// Steps until a receive completes on `qp` (and reposts it); other
/// completions are checked.
fn wait_recv<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    qp: QpHandle,
    l: Layout,
    what: &str,
    stop: &AtomicBool,
) -> Result<(), String> {
    let start = Instant::now();
    let mut wcs = Vec::new();
    loop {
        ep.step(now());
        wcs.clear();
        ep.poll_cq(&mut wcs);
        let mut got = false;
        for wc in &wcs {
            if wc.status != WcStatus::Success {
                let mut why = format!("work request ended {:?}", wc.status);
                for (_, event) in ep.take_events() {
                    why = format!("{why}; {}", term_text(event));
                }
                return Err(why);
            }
            if matches!(wc.opcode, WcOpcode::Recv) {
                if wc.byte_len as usize != INFO_LEN {
                    return Err(format!("received bogus data, size {}", wc.byte_len));
                }
                post_recv(ep, qp, l, 0, wc.wr_id & 0xff)?;
                got = true;
            }
        }
        if got {
            return Ok(());
        }
        if !ep.is_live(qp) {
            return Err(format!(
                "the server closed the connection while we waited for {what}"
            ));
        }
        if stop.load(Ordering::SeqCst) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A mismatch names where the data first differs and shows a few
    /// octets from there, however large the buffers (a client's 64 KiB of
    /// the wrong pattern put both buffers, escaped, in every error line).
    #[test]
    fn a_mismatch_is_told_in_a_line() {
        let want = ping_data(7, 65_535);
        let mut got = want.clone();
        got[40_000] ^= 0x55;
        let told = mismatch(&got, &want);
        assert!(told.contains("first difference at octet 40000"), "{told}");
        assert!(told.len() < 200, "{} octets: {told}", told.len());
        let short = mismatch(&want[..10], &want);
        assert!(short.contains("at octet 10"), "{short}");
    }

    /// A settle time beyond 10 s is refused (100,000,000 ms waited a day
    /// after the Reply, larger overflowed the clock; found by a review).
    #[test]
    fn a_settle_time_is_bounded() {
        let args = |ms: &str| {
            RpingArgs::try_parse_from(["rping", "-c", "-a", "10.0.0.1", "--settle-ms", ms]).unwrap()
        };
        assert!(args("10000").check().is_ok());
        let why = args("100000000").check().unwrap_err();
        assert!(
            why.contains("--settle-ms 100000000: give at most 10000"),
            "{why}"
        );
    }

    /// A host holds at most its share, gets a place back when one of its
    /// connections goes, and holds nothing of another host's.
    #[test]
    fn a_host_cap_counts_each_host_apart() {
        let cap = HostCap::new(2);
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        assert!(cap.take(a) && cap.take(a));
        assert!(!cap.take(a), "a third from the same host");
        assert_eq!(cap.held_by(a), 2);
        assert!(cap.take(b), "another host is not held back");
        cap.give(a);
        assert!(cap.take(a), "a place back once one went");
        for _ in 0..3 {
            cap.give(b);
        }
        assert_eq!(cap.held_by(b), 0, "never below nothing");
        assert_eq!(HostCap::new(0).per_host(), 1);
    }
}
