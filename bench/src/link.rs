//! The link options `bench`, `bench rping` and `bench perftest` share, and
//! the transports they make: kernel TCP, tcp-lite on a TAP fd, and
//! tcp-lite on a DPDK port (`net_tap`, `net_af_packet`, `net_memif`, a PCI
//! NIC). `--ip`, `--netns`, `--bridge`, `--tap` and `--mtu` mean the same
//! for `tap` and `net_tap`.

use std::net::Ipv4Addr;

use clap::{Args, ValueEnum};
use dataplane::dpdk::Eal;
use dataplane::ports::{self, Hugepages, Opened, PortKind, PortOptions};
use dataplane::DpdkDevice;
use tcp_lite::sys::tap::TapDevice;
use tcp_lite::{CongestionControl, Stack, StackConfig, TcpConfig};

use crate::endpoint::now;

/// What carries a single RNIC's TCP (`bench rping`, `bench perftest`, and
/// `bench --server` / `bench OP HOST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PeerTransport {
    /// Linux TCP sockets.
    Kernel,
    /// tcp-lite on a TAP device's file descriptor (needs --ip and root).
    Tap,
    /// tcp-lite on DPDK's TAP driver (needs --ip and root).
    #[value(name = "net_tap")]
    NetTap,
    /// tcp-lite on DPDK's AF_PACKET driver over an existing interface
    /// (--iface; needs --ip and root).
    #[value(name = "af_packet")]
    AfPacket,
    /// tcp-lite on DPDK's memif to another dpwarp process (--ip).
    Memif,
    /// tcp-lite on a PCI NIC bound to vfio-pci (--pci, --ip; root).
    Pci,
}

impl PeerTransport {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PeerTransport::Kernel => "kernel",
            PeerTransport::Tap => "tap",
            PeerTransport::NetTap => "net_tap",
            PeerTransport::AfPacket => "af_packet",
            PeerTransport::Memif => "memif",
            PeerTransport::Pci => "pci",
        }
    }

    /// Whether it runs on DPDK.
    pub fn is_dpdk(self) -> bool {
        matches!(
            self,
            PeerTransport::NetTap
                | PeerTransport::AfPacket
                | PeerTransport::Memif
                | PeerTransport::Pci
        )
    }
}

/// Hugepages on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum HugepagesArg {
    /// 2 MiB hugepages when enough are free, else ordinary pages (said).
    #[default]
    Auto,
    /// Hugepages or fail.
    On,
    /// Ordinary pages (`--no-huge`).
    Off,
}

/// memif's control socket when `--memif-socket` is not given.
pub const MEMIF_SOCKET_DEFAULT: &str = "/run/dpwarp/memif.sock";

/// The link options of every tool.
#[derive(Debug, Clone, Default, Args)]
pub struct LinkArgs {
    /// tap, net_tap: the TAP interface to create.
    #[arg(long)]
    pub tap: Option<String>,

    /// tap, net_tap, af_packet, memif, pci: our address and prefix on the
    /// link, e.g. 10.77.0.10/24.
    #[arg(long)]
    pub ip: Option<String>,

    /// tap, net_tap: put the TAP interface in this network namespace ...
    /// (af_packet: the namespace --iface is in).
    #[arg(long)]
    pub netns: Option<String>,

    /// ... and make it a port of this bridge there.
    #[arg(long, requires = "netns")]
    pub bridge: Option<String>,

    /// af_packet: the existing kernel interface to run on (one end of a
    /// veth pair, say).
    #[arg(long)]
    pub iface: Option<String>,

    /// pci: the NIC's PCI address, bound to vfio-pci first
    /// (`dpdk-devbind.py -b vfio-pci 0000:01:00.0`).
    #[arg(long)]
    pub pci: Option<String>,

    /// memif: the control socket's name (an abstract socket: no file).
    #[arg(long = "memif-socket", default_value = MEMIF_SOCKET_DEFAULT)]
    pub memif_socket: String,

    /// DPDK: EAL's memory, 2 MiB hugepages or ordinary pages.
    #[arg(long, value_enum, default_value_t = HugepagesArg::Auto)]
    pub hugepages: HugepagesArg,

    /// CPUs to pin the poll-mode cores to, as DPDK's -l lists them
    /// (`0,1` or `0-1`): the client's core first, then the server's.
    #[arg(short = 'l', long = "lcores")]
    pub lcores: Option<String>,

    /// Compute TCP/IP checksums in software: on the embedded link (which
    /// offloads them by default, as a NIC does) and on DPDK ports that
    /// could offload them or need none (memif, ring). Not with kernel TCP
    /// or the TAP device, which compute their own.
    #[arg(long = "sw-checksums")]
    pub sw_checksums: bool,

    /// DPDK: mbufs in each queue pair's pool (none: the port's default,
    /// 8192). Not on the command line: the appliance's configuration sets
    /// it.
    #[arg(skip)]
    pub mbufs: Option<u32>,
}

impl LinkArgs {
    /// The CPUs of `--lcores`, checked against the ones this process may
    /// use: each range runs upwards, every CPU is one this process may use,
    /// and none is named twice (two pinned cores on one CPU would take
    /// turns with each other). A range is checked before it is expanded,
    /// so a huge one costs nothing.
    pub fn cpus(&self) -> Result<Option<Vec<usize>>, String> {
        let Some(list) = &self.lcores else {
            return Ok(None);
        };
        let allowed = dataplane::lcore::cpus();
        let mut cpus = Vec::new();
        for part in list.split(',') {
            let range = match part.split_once('-') {
                Some((a, b)) => (a.trim().parse::<usize>(), b.trim().parse::<usize>()),
                None => (part.trim().parse::<usize>(), part.trim().parse::<usize>()),
            };
            let (Ok(first), Ok(last)) = range else {
                return Err(format!("-l {list}: give CPUs as 0,1 or 0-3"));
            };
            if first > last {
                return Err(format!(
                    "-l {list}: the range {first}-{last} runs backwards; give the lower CPU \
                     first ({last}-{first})"
                ));
            }
            // Every CPU of the range is checked as it is taken: a range
            // longer than the allowed set stops at its first CPU outside.
            for cpu in first..=last {
                if !allowed.contains(&cpu) {
                    return Err(format!(
                        "-l {list}: CPU {cpu} is not one this process may use ({allowed:?})"
                    ));
                }
                if cpus.contains(&cpu) {
                    return Err(format!(
                        "-l {list}: CPU {cpu} is named twice; give each CPU once (two pinned \
                         cores on one CPU take turns with each other)"
                    ));
                }
                cpus.push(cpu);
            }
        }
        Ok(Some(cpus))
    }

    /// Whether `--memif-socket` names a socket other than the default (a
    /// run that makes its own memif, or uses none, refuses it).
    pub fn memif_socket_given(&self) -> bool {
        !self.memif_socket.is_empty() && self.memif_socket != MEMIF_SOCKET_DEFAULT
    }

    /// EAL's hugepage choice.
    pub fn hugepages(&self) -> Hugepages {
        match self.hugepages {
            HugepagesArg::Auto => Hugepages::Auto,
            HugepagesArg::On => Hugepages::On,
            HugepagesArg::Off => Hugepages::Off,
        }
    }

    /// `--ip` as an address and a prefix.
    pub fn address(&self) -> Result<(Ipv4Addr, u8), String> {
        let ip = self
            .ip
            .as_deref()
            .ok_or("this transport needs --ip ADDR/PREFIX, our address on the link")?;
        parse_cidr(ip)
    }
}

/// `ADDR/PREFIX`.
pub fn parse_cidr(ip: &str) -> Result<(Ipv4Addr, u8), String> {
    ip.split_once('/')
        .and_then(|(a, p)| Some((a.parse::<Ipv4Addr>().ok()?, p.parse::<u8>().ok()?)))
        .filter(|&(_, p)| (1..=32).contains(&p))
        .ok_or_else(|| format!("--ip {ip}: give ADDR/PREFIX, e.g. 10.77.0.10/24"))
}

/// A locally administered MAC made from an IPv4 address (its last two
/// octets), for our stacks on TAP and virtual DPDK ports.
pub fn ip_mac(addr: Ipv4Addr) -> [u8; 6] {
    let o = addr.octets();
    [0x02, 0x64, 0x70, 0x77, o[2], o[3]]
}

/// A seed that differs from run to run: initial sequence numbers and
/// ephemeral ports of a new run must not repeat the last one's (a peer may
/// still hold its four-tuple in TIME-WAIT).
pub fn run_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ (u64::from(std::process::id()) << 32)
}

/// tcp-lite's settings for a link: lossless wires (memif, the in-memory
/// link) run without congestion control; real ones with CUBIC.
pub fn tcp_config(lossless: bool) -> TcpConfig {
    TcpConfig {
        rx_buffer: 256 * 1024,
        tx_buffer: 256 * 1024,
        congestion: if lossless {
            CongestionControl::None
        } else {
            CongestionControl::Cubic
        },
        keep_alive: Some(KEEP_ALIVE),
        ..TcpConfig::default()
    }
}

/// The keep-alive interval of connections on real networks (TAP, DPDK
/// ports, Linux TCP for `bench --server` and dpwarpd): a peer whose host
/// vanished while its connection was idle on our side (a Write bandwidth
/// client's server sends nothing) is found within the user timeout (30 s),
/// and its QP, lease and slot given back, instead of held for good.
pub const KEEP_ALIVE: tcp_lite::Duration = tcp_lite::Duration::from_secs(10);

/// tcp-lite on a new TAP device `tap` with our address `ip` (ADDR/PREFIX),
/// the device moved into namespace `netns` (and made a port of `bridge`
/// there) if given. Seeded from the clock: every run its own initial
/// sequence numbers and ephemeral ports.
pub fn tap_stack(
    tap: &str,
    ip: &str,
    netns: Option<&str>,
    bridge: Option<&str>,
) -> Result<Stack<TapDevice>, String> {
    if let Some(why) = tcp_lite::sys::tap::namespace_unavailable() {
        return Err(format!("--transport tap cannot run here: {why}"));
    }
    let (addr, prefix) = parse_cidr(ip)?;
    let device = TapDevice::open(tap).map_err(|e| e.to_string())?;
    let link = |a: &[&str]| tcp_lite::sys::netns::ip(a).map_err(|e| e.to_string());
    match (netns, bridge) {
        (Some(ns), bridge) => {
            link(&["link", "set", "dev", tap, "netns", ns])?;
            if let Some(br) = bridge {
                link(&["-n", ns, "link", "set", "dev", tap, "master", br])?;
            }
            link(&["-n", ns, "link", "set", "dev", tap, "up"])?;
        }
        (None, _) => link(&["link", "set", "dev", tap, "up"])?,
    }
    let mut config = StackConfig::new(ip_mac(addr), addr);
    config.prefix_len = prefix;
    config.seed = run_seed();
    config.tcp = tcp_config(false);
    Stack::new(config, device, now()).map_err(|e| e.to_string())
}

/// A DPDK port for a single RNIC (`bench rping`, `bench perftest`,
/// `bench --server`/`HOST`): `server` says which side of a memif it is;
/// `default_tap` names the TAP interface when --tap is not given.
pub fn dpdk_port(
    transport: PeerTransport,
    link: &LinkArgs,
    mtu: usize,
    server: bool,
    default_tap: &str,
) -> Result<(Eal, Opened), String> {
    dpdk_port_queues(transport, link, mtu, server, default_tap, 1)
}

/// How `port`, opened with `queues` queue pairs (one per core), is
/// described in reports: its own description, and with several queues how
/// many and how they are steered.
pub fn describe_queues(port: &Opened, queues: u16) -> String {
    if queues > 1 {
        format!(
            "{}, {queues} queue pairs, {}",
            port.describe,
            port.steering()
        )
    } else {
        port.describe.clone()
    }
}

/// [`dpdk_port`] with `queues` queue pairs, one per core (`--cores` of a
/// server or of a client of one). A port without RSS (memif, and net_tap,
/// whose kernel side picks a queue by its own flow hash) is steered by
/// the cores' stacks (`dataplane::steer`).
pub fn dpdk_port_queues(
    transport: PeerTransport,
    link: &LinkArgs,
    mtu: usize,
    server: bool,
    default_tap: &str,
    queues: u16,
) -> Result<(Eal, Opened), String> {
    let pci: Vec<String> = link.pci.iter().cloned().collect();
    let (eal, memory) = ports::start_eal(link.hugepages(), &pci)?;
    eprintln!("dpwarp: {memory}");
    let tap = link.tap.clone().unwrap_or_else(|| default_tap.to_string());
    let kind = match transport {
        PeerTransport::NetTap => {
            if let Some(why) = tcp_lite::sys::tap::namespace_unavailable() {
                return Err(format!("--transport net_tap cannot run here: {why}"));
            }
            PortKind::Tap {
                iface: tap.clone(),
                netns: link.netns.clone(),
            }
        }
        PeerTransport::AfPacket => PortKind::AfPacket {
            iface: link
                .iface
                .clone()
                .ok_or("--transport af_packet needs --iface, the interface to run on")?,
            netns: link.netns.clone(),
        },
        PeerTransport::Memif => PortKind::Memif {
            socket: link.memif_socket.clone(),
            server,
        },
        PeerTransport::Pci => PortKind::Pci {
            address: link
                .pci
                .clone()
                .ok_or("--transport pci needs --pci ADDRESS (bound to vfio-pci)")?,
        },
        PeerTransport::Kernel | PeerTransport::Tap => {
            return Err(format!("{} is not a DPDK transport", transport.name()))
        }
    };
    let mtu = u16::try_from(mtu).map_err(|_| format!("--mtu {mtu} is too large"))?;
    let mut options = PortOptions::new(mtu);
    options.sw_checksums = link.sw_checksums;
    options.queues = queues;
    if let Some(mbufs) = link.mbufs {
        options.mbufs = mbufs;
    }
    let opened = ports::open(eal, &kind, &options)?;
    if transport == PeerTransport::NetTap {
        // The interface is made in the namespace; bring it up there (on
        // the bridge, if one is named), as the TAP transport does.
        let up = |a: &[&str]| tcp_lite::sys::netns::ip(a).map_err(|e| e.to_string());
        if let (Some(ns), Some(br)) = (&link.netns, &link.bridge) {
            up(&["-n", ns, "link", "set", "dev", &tap, "master", br])?;
        }
        match &link.netns {
            Some(ns) => up(&["-n", ns, "link", "set", "dev", &tap, "up"])?,
            None => up(&["link", "set", "dev", &tap, "up"])?,
        }
    }
    // A memif server's link comes up when its client connects: it listens
    // meanwhile. Every other port is up before anyone uses it.
    if !(transport == PeerTransport::Memif && server) {
        ports::wait_link(&[&opened], options.link_timeout)?;
    }
    Ok((eal, opened))
}

/// tcp-lite on queue 0 of `opened` at our address `ip`.
pub fn dpdk_stack(
    opened: &Opened,
    ip: (Ipv4Addr, u8),
    lossless: bool,
) -> Result<Stack<DpdkDevice>, String> {
    dpdk_stack_on(opened, 0, None, ip, lossless)
}

/// tcp-lite on queue `queue` of `opened` at our address `ip`; with `steer`,
/// as core `queue` of the port's cores (its device hands frames other cores
/// own to them, its active opens pick ports that hash to it).
pub fn dpdk_stack_on(
    opened: &Opened,
    queue: u16,
    steer: Option<&std::sync::Arc<dataplane::steer::Steer>>,
    ip: (Ipv4Addr, u8),
    lossless: bool,
) -> Result<Stack<DpdkDevice>, String> {
    // A MAC made from our address, the same run after run, as the TAP
    // transport's: DPDK gives virtual ports a random one each time, and a
    // peer that still has the last run's in its ARP cache would send to it
    // (a test's server started right after its client, on the same address,
    // saw its SYNs go unanswered). A NIC keeps its own.
    let mac = if opened.port.info().driver.starts_with("net_") {
        ip_mac(ip.0)
    } else {
        opened.mac()
    };
    let mut device = opened.device(queue, Some(mac))?;
    let mut config = StackConfig::new(mac, ip.0);
    config.max_connections = crate::endpoint::CONNECTIONS_MAX;
    if let Some(steer) = steer {
        device = device.steered(steer.clone(), queue);
        config.steering = Some(steer.steering(queue));
    }
    config.prefix_len = ip.1;
    config.seed = run_seed().wrapping_add(u64::from(queue) << 40);
    config.tcp = tcp_config(lossless);
    Stack::new(config, device, now()).map_err(|e| e.to_string())
}

/// How long each side of a memif link stays quiet (no burst on the port)
/// before it closes the port. DPDK 22.11's memif unmaps the shared memory
/// when the peer leaves, under a burst that is running then (a crash); a
/// side that stops polling and waits this long lets its peer finish
/// closing and stop polling too.
pub const MEMIF_QUIET: std::time::Duration = std::time::Duration::from_millis(300);

/// Runs `run` on tcp-lite over a DPDK port of `transport` (a single RNIC:
/// `bench rping`, `bench perftest`), pinned to the first CPU of -l if
/// given; closes the port (quietly, on memif) and EAL after.
pub fn run_on_dpdk<R>(
    transport: PeerTransport,
    link: &LinkArgs,
    mtu: usize,
    server: bool,
    default_tap: &str,
    run: impl FnOnce(Stack<DpdkDevice>) -> Result<R, String>,
) -> Result<R, String> {
    let result = (|| {
        let (eal, port) = dpdk_port(transport, link, mtu, server, default_tap)?;
        let stack = dpdk_stack(&port, link.address()?, transport == PeerTransport::Memif)?;
        let cpu = link.cpus()?.and_then(|c| c.first().copied());
        let _pinned = dataplane::lcore::enter(cpu, Some(eal))?;
        let result = run(stack);
        if transport == PeerTransport::Memif {
            std::thread::sleep(MEMIF_QUIET);
        }
        drop(port);
        result
    })();
    if let Some(eal) = Eal::running() {
        let _ = eal.cleanup();
    }
    result
}
