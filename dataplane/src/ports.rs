//! Opening the DPDK ports dpwarp runs on, by kind, with what each needs:
//! EAL started for the machine (hugepages when reserved), mbuf pools sized
//! for the MTU, the port started and its link waited for, and a smoltcp
//! device over each queue with the right checksum handling. `bench`,
//! `bench rping`, `bench perftest` and the appliance share this; none of
//! them knows DPDK's device arguments.
//!
//! | kind | DPDK driver | what it is |
//! |---|---|---|
//! | [`PortKind::Memif`] | `net_memif` | shared-memory packet interface to another process (or another core) |
//! | [`PortKind::Tap`] | `net_tap` | a kernel TAP interface, made in a network namespace |
//! | [`PortKind::AfPacket`] | `net_af_packet` | an existing kernel interface (a veth end), through AF_PACKET |
//! | [`PortKind::Pci`] | the NIC's PMD | a PCI NIC bound to vfio-pci |
//!
//! `net_ring` pairs (two ports in this process) come from
//! [`Port::ring_pair`] directly.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checksum::{RxChecksum, TxChecksum};
use crate::device::{DeviceConfig, DpdkDevice};
use crate::dpdk::{Eal, EalConfig, Memory, Pool, Port, PortConfig, Rss};
use crate::steer::Steer;

/// Which port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortKind {
    /// `net_memif`: `socket` names the control socket (abstract: no file),
    /// `server` says which side creates the shared memory.
    Memif {
        /// The socket's name.
        socket: String,
        /// This side is memif's server (it owns the regions).
        server: bool,
    },
    /// `net_tap`: a TAP interface `iface` made inside namespace `netns` (or
    /// ours). The kernel end is a Linux host to talk to.
    Tap {
        /// The kernel interface's name.
        iface: String,
        /// The network namespace to make it in.
        netns: Option<String>,
    },
    /// `net_af_packet` on the existing kernel interface `iface` (in `netns`).
    AfPacket {
        /// The interface (e.g. one end of a veth pair).
        iface: String,
        /// The namespace it is in.
        netns: Option<String>,
    },
    /// A PCI NIC at `address` (bound to vfio-pci).
    Pci {
        /// `0000:01:00.0`.
        address: String,
    },
}

impl PortKind {
    /// The DPDK driver's name.
    pub fn driver(&self) -> &'static str {
        match self {
            PortKind::Memif { .. } => "net_memif",
            PortKind::Tap { .. } => "net_tap",
            PortKind::AfPacket { .. } => "net_af_packet",
            PortKind::Pci { .. } => "pci",
        }
    }
}

/// Whether EAL takes hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hugepages {
    /// Use 2 MiB hugepages if enough are free, else ordinary pages (and
    /// say so).
    Auto,
    /// Hugepages or fail.
    On,
    /// Ordinary pages.
    Off,
}

/// Memory EAL takes, in MiB.
pub const EAL_MEGABYTES: u32 = 1024;

/// Free 2 MiB hugepages (0 where the kernel has none).
pub fn free_hugepages() -> u64 {
    std::fs::read_to_string(FREE_HUGEPAGES)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The kernel's count of free 2 MiB hugepages.
const FREE_HUGEPAGES: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages";

/// An exclusive lock on the free hugepage count, held from counting the
/// pages to EAL having taken them ([`Hugepages::Auto`]), so that processes
/// starting at once (a test binary and its child, a server and its client)
/// do not both count the same pages and the later one fail in EAL ("Not
/// enough memory available", fatal: EAL starts once a process) where it
/// would have run without hugepages. An advisory `flock` on the sysfs file
/// itself, which every dpwarp process locks the same way; released when
/// the file closes. `None` where the kernel has no such file or lock.
fn hugepage_count_lock() -> Option<std::fs::File> {
    let file = std::fs::File::open(FREE_HUGEPAGES).ok()?;
    file.lock().ok()?;
    Some(file)
}

/// Starts EAL (once per process) with `hugepages`; returns it and a line
/// saying which memory it runs on.
pub fn start_eal(hugepages: Hugepages, pci: &[String]) -> Result<(Eal, String), String> {
    // EAL starts once: later calls get the running one (whatever the
    // hugepages look like now; the first call took its share).
    static STARTED: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let mut said = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    if let (Some(eal), Some(memory)) = (Eal::running(), said.as_ref()) {
        return Ok((eal, memory.clone()));
    }
    let (eal, memory) = start_eal_once(hugepages, pci)?;
    *said = Some(memory.clone());
    Ok((eal, memory))
}

fn start_eal_once(hugepages: Hugepages, pci: &[String]) -> Result<(Eal, String), String> {
    let pages_needed = u64::from(EAL_MEGABYTES / 2);
    let _counting = (hugepages == Hugepages::Auto)
        .then(hugepage_count_lock)
        .flatten();
    let free = free_hugepages();
    let huge = match hugepages {
        Hugepages::On => true,
        Hugepages::Off => false,
        Hugepages::Auto => free >= pages_needed,
    };
    let memory = if huge {
        Memory::Huge {
            megabytes: EAL_MEGABYTES,
            dir: None,
        }
    } else {
        Memory::NoHuge {
            megabytes: EAL_MEGABYTES,
        }
    };
    let config = EalConfig {
        memory,
        pci: pci.to_vec(),
        // Errors only: EAL's start-up notices (no 1 GiB pages on this node,
        // no multi-process channel with --no-shconf) are not ours to show.
        // (DPDK 22.11's TAP driver prints what it cannot set up for
        // rte_flow, which dpwarp does not use, whatever the level.)
        log_level: "*:error".into(),
    };
    let eal = Eal::init(&config).map_err(|e| e.to_string())?;
    let said = if huge {
        format!("DPDK on 2 MiB hugepages ({EAL_MEGABYTES} MiB)")
    } else if hugepages == Hugepages::Auto {
        format!(
            "DPDK without hugepages (--no-huge: {free} of the {pages_needed} 2 MiB pages needed \
             are free; as root, echo {pages_needed} > \
             /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages for the faster memory)"
        )
    } else {
        "DPDK without hugepages (--no-huge)".to_string()
    };
    Ok((eal, said))
}

/// How a port is opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortOptions {
    /// IP MTU.
    pub mtu: u16,
    /// Queue pairs (one per core).
    pub queues: u16,
    /// Mbufs per queue's pool.
    pub mbufs: u32,
    /// Compute TCP/IP checksums in software even where the port could
    /// offload them or the wire is trusted.
    pub sw_checksums: bool,
    /// How long to wait for the link to come up.
    pub link_timeout: Duration,
}

impl PortOptions {
    /// One queue pair at `mtu`, 8192 mbufs, 10 s for the link.
    pub fn new(mtu: u16) -> PortOptions {
        PortOptions {
            mtu,
            queues: 1,
            mbufs: 8192,
            sw_checksums: false,
            link_timeout: Duration::from_secs(10),
        }
    }

    /// Octets of frame each mbuf holds: a whole frame of the MTU (no
    /// chains), at least DPDK's usual 2048.
    pub fn data_room(&self) -> usize {
        (usize::from(self.mtu) + 14 + 4)
            .next_multiple_of(64)
            .max(2048)
    }
}

/// The log2 of a memif ring's descriptors for buffers of `bsize` octets:
/// the power of two nearest 4 MiB of buffers (by ratio), from 2^8 to
/// 2^11. The two ends copy every frame through the ring's buffers, which
/// they visit in turn, so the ring's octets are what stays in the caches:
/// 2^11 buffers of 9,024 octets (MTU 9000) are 18 MiB a direction, beside
/// a 32 MiB L3 and 2 MiB of L2 a core, and 64 KiB Writes over memif at
/// MTU 9000 made 85.8-90.9 Gbit/s against 98.7-107.1 with 2^9 (4.4 MiB;
/// six runs each, in turn, hugepages; 2^8 measured the same as 2^9). At
/// MTU 1500 (2,048-octet buffers) 2^11 is 4 MiB already, and 2^9 measured
/// 5% slower (fewer frames in flight). 512 frames of 9,000 octets are
/// still 18 times a 256 KiB TCP window.
pub fn memif_ring_log2(bsize: usize) -> u32 {
    const RING_OCTETS: usize = 4 << 20;
    let fit = (RING_OCTETS / bsize.max(1)).max(1);
    // The power of two at or below `fit`, or the one above it where `fit`
    // is nearer that (at or past the geometric middle, `lower * sqrt(2)`).
    let lower = 1usize << fit.ilog2();
    let log2 = fit.ilog2() + u32::from(fit * fit >= 2 * lower * lower);
    log2.clamp(8, 11)
}

/// An open port: the port, its pools, and how its devices checksum.
#[derive(Debug)]
pub struct Opened {
    /// The port.
    pub port: Port,
    /// One pool per queue pair.
    pub pools: Vec<Arc<Pool>>,
    /// What it is, for reports (`net_memif`, `net_tap on dpw0`, ...).
    pub describe: String,
    mtu: u16,
    tx_checksum: TxChecksum,
    rx_checksum: RxChecksum,
}

impl Opened {
    /// Steering among this port's queue pairs, one core each
    /// ([`crate::steer`]): give each core's device to
    /// [`DpdkDevice::steered`] and its stack `steer.steering(core)`.
    ///
    /// Where the port's RSS was programmed ([`Rss::Hardware`]) the
    /// steering uses its table, so that the port's choice of queue and the
    /// cores' agree and nothing is handed over (but for TCP ports pinned to
    /// a core or spread by host, which the NIC hashes by four-tuple like
    /// any other: their frames at another core are handed over in
    /// software); elsewhere the default table (the one a dpwarp peer with
    /// as many queues uses).
    pub fn steer(&self) -> Result<Arc<Steer>, String> {
        match self.port.rss() {
            Rss::Hardware { key, reta, .. } => Steer::with_table(&self.pools, key, reta.clone()),
            Rss::Off | Rss::Software(_) => Steer::new(&self.pools),
        }
    }

    /// [`Self::steer`], each local TCP port of `pinned` owned by the core
    /// beside it and the datagrams to the UDP ports `steered_udp` by the
    /// core their four-tuple hashes to (see [`Steer::pinning`]).
    pub fn steer_pinning(
        &self,
        pinned: &[(u16, u16)],
        steered_udp: &[u16],
    ) -> Result<Arc<Steer>, String> {
        self.steer()?.pin(pinned, steered_udp)
    }

    /// How the port spreads received frames over its queues, in words.
    pub fn steering(&self) -> String {
        self.port.rss().describe()
    }

    /// A smoltcp device on queue pair `queue`, with our MAC `mac` (the
    /// port's own where it has one, when `None`).
    pub fn device(&self, queue: u16, mac: Option<[u8; 6]>) -> Result<DpdkDevice, String> {
        let q = self
            .port
            .queue(queue)
            .ok_or_else(|| format!("{}: queue {queue} is taken or absent", self.describe))?;
        Ok(DpdkDevice::new(
            q,
            DeviceConfig {
                mac: mac.unwrap_or_else(|| self.mac()),
                mtu: usize::from(self.mtu),
                tx_checksum: self.tx_checksum,
                rx_checksum: self.rx_checksum,
            },
        ))
    }

    /// The MAC our stack uses on this port: the port's, or a locally
    /// administered one made from its id where it has none (`net_ring`).
    /// On `net_tap`, one that differs from the port's in its last octet:
    /// DPDK gives the kernel's end of the TAP interface the port's own MAC,
    /// and a bridge the interface joins takes frames to that MAC for itself
    /// instead of forwarding them to us (the TAP driver hands us every
    /// frame the kernel sends, whatever its destination).
    pub fn mac(&self) -> [u8; 6] {
        let mut mac = self.port.info().mac;
        if mac == [0; 6] {
            return [0x02, 0x64, 0x70, 0x77, 0, self.port.info().id as u8];
        }
        if self.port.info().driver == "net_tap" {
            mac[0] |= 0x02; // locally administered
            mac[5] ^= 0x01;
        }
        mac
    }

    /// How the devices complete and check checksums, in words.
    pub fn checksums(&self) -> &'static str {
        match (self.tx_checksum, self.rx_checksum) {
            (TxChecksum::Offload, _) => "TCP/IP checksums offloaded to the port",
            (TxChecksum::Trusted, _) => "TCP/IP checksums not computed (a trusted memory wire)",
            (TxChecksum::Software, _) => "TCP/IP checksums in software",
        }
    }
}

/// Opens and starts a port of `kind`, waiting for its link.
pub fn open(eal: Eal, kind: &PortKind, options: &PortOptions) -> Result<Opened, String> {
    // The TAP and AF_PACKET drivers open their interface's files and
    // sockets when the device is made and when its queues are set up, in
    // the namespace of the thread doing it: both happen in the namespace
    // (the TAP driver would otherwise make a second interface of the same
    // name where we stand).
    let netns = match kind {
        PortKind::Tap { netns, .. } | PortKind::AfPacket { netns, .. } => netns.as_deref(),
        PortKind::Memif { .. } | PortKind::Pci { .. } => None,
    };
    in_netns(netns, || open_here(eal, kind, options))?
}

/// [`open`], in the calling thread's namespace.
fn open_here(eal: Eal, kind: &PortKind, options: &PortOptions) -> Result<Opened, String> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut port = match kind {
        PortKind::Memif { socket, server } => {
            let role = if *server { "server" } else { "client" };
            // Buffers that hold a whole frame, and about 4 MiB of them a
            // ring (see `memif_ring_log2`).
            let bsize = options.data_room();
            let rsize = memif_ring_log2(bsize);
            let args = format!(
                "role={role},socket={socket},socket-abstract=yes,bsize={bsize},rsize={rsize}"
            );
            Port::vdev(eal, &format!("net_memif{n}"), &args)
        }
        PortKind::Tap { iface, .. } => {
            Port::vdev(eal, &format!("net_tap{n}"), &format!("iface={iface}"))
        }
        PortKind::AfPacket { iface, .. } => {
            let (frame, block) = af_packet_frames(options);
            let args = format!(
                "iface={iface},qpairs={},blocksz={block},framesz={frame},framecnt=1024",
                options.queues
            );
            Port::vdev(eal, &format!("net_af_packet{n}"), &args)
        }
        PortKind::Pci { address } => Port::pci(eal, address),
    }
    .map_err(|e| e.to_string())?;
    let room = match kind {
        // The driver copies a whole ring frame into one mbuf.
        PortKind::AfPacket { .. } => af_packet_frames(options).0 - AF_PACKET_HEADER,
        _ => options.data_room(),
    };
    let pools = (0..options.queues)
        .map(|_| Pool::new(eal, options.mbufs, 256, room))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let mut config = PortConfig::new(options.mtu);
    config.queues = options.queues;
    config.checksum_offload = !options.sw_checksums;
    config.promiscuous = matches!(kind, PortKind::Pci { .. });
    port.start(&config, &pools).map_err(|e| e.to_string())?;
    let (tx_offload, rx_offload) = port.checksum_offloads();
    let trusted = matches!(kind, PortKind::Memif { .. }) && !options.sw_checksums;
    let (tx_checksum, rx_checksum) = checksums(trusted, tx_offload, rx_offload);
    let describe = match kind {
        PortKind::Memif { socket, server } => {
            format!(
                "net_memif ({} of {socket})",
                if *server { "server" } else { "client" }
            )
        }
        PortKind::Tap { iface, .. } => format!("net_tap ({iface})"),
        PortKind::AfPacket { iface, .. } => format!("net_af_packet ({iface})"),
        PortKind::Pci { address } => format!("{} ({address})", port.info().driver),
    };
    Ok(Opened {
        port,
        pools,
        describe,
        mtu: options.mtu,
        tx_checksum,
        rx_checksum,
    })
}

/// Makes Linux complete the checksums of what it sends on `iface` (a veth
/// end, in the calling thread's namespace) instead of leaving them to
/// "hardware". Over a veth, Linux hands locally made TCP segments to the
/// peer with only the pseudo-header summed (the peer takes them as
/// verified); DPDK's AF_PACKET driver receives them as they are, and our
/// device, checking every checksum, would drop them all. Needs `ethtool`.
pub fn kernel_checksums_complete(iface: &str) -> Result<(), String> {
    let out = std::process::Command::new("ethtool")
        .args(["-K", iface, "tx", "off"])
        .output()
        .map_err(|e| format!("cannot run ethtool (apt-get install ethtool): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ethtool -K {iface} tx off failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Octets of TPACKET_V2 header DPDK's AF_PACKET driver keeps at the start
/// of each ring frame.
const AF_PACKET_HEADER: usize = 32;

/// The AF_PACKET ring's frame and block sizes for `options`: a frame holds
/// a whole Ethernet frame after the header; the driver walks frames as if
/// they were packed end to end, so a block (whole pages) must hold a whole
/// number of them: a power of two of at least a page does.
fn af_packet_frames(options: &PortOptions) -> (usize, usize) {
    let frame = (options.data_room() + AF_PACKET_HEADER).next_power_of_two();
    (frame, frame.max(4096))
}

/// Two `net_ring` ports joined back to back in this process, started, for
/// two in-process RNICs (no root, no device). The wire is memory, so
/// checksums are trusted unless `options.sw_checksums`.
pub fn ring_pair(eal: Eal, options: &PortOptions) -> Result<(Opened, Opened), String> {
    let (a, b) = Port::ring_pair_queues(eal, 4096, options.queues).map_err(|e| e.to_string())?;
    let mut opened = Vec::with_capacity(2);
    for mut port in [a, b] {
        let pools = (0..options.queues)
            .map(|_| Pool::new(eal, options.mbufs, 256, options.data_room()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let mut config = PortConfig::new(options.mtu);
        config.queues = options.queues;
        port.start(&config, &pools).map_err(|e| e.to_string())?;
        let (tx_checksum, rx_checksum) = checksums(!options.sw_checksums, false, false);
        opened.push(Opened {
            describe: format!("net_ring ({})", port.info().name),
            port,
            pools,
            mtu: options.mtu,
            tx_checksum,
            rx_checksum,
        });
    }
    let b = opened.pop().expect("two ports");
    let a = opened.pop().expect("two ports");
    Ok((a, b))
}

/// Two memif ports of this process joined through `socket`, the server's
/// and the client's, started: two cores as two hosts on a wire. Their link
/// comes up in the background ([`wait_link`]).
pub fn memif_pair(
    eal: Eal,
    socket: &str,
    options: &PortOptions,
) -> Result<(Opened, Opened), String> {
    let side = |server| PortKind::Memif {
        socket: socket.to_string(),
        server,
    };
    let server = open(eal, &side(true), options)?;
    let client = open(eal, &side(false), options)?;
    Ok((server, client))
}

/// The checksum handling of a port: a trusted wire computes none;
/// otherwise each direction is offloaded where the port can, else done in
/// software.
fn checksums(trusted: bool, tx_offload: bool, rx_offload: bool) -> (TxChecksum, RxChecksum) {
    if trusted {
        return (TxChecksum::Trusted, RxChecksum::Trusted);
    }
    (
        if tx_offload {
            TxChecksum::Offload
        } else {
            TxChecksum::Software
        },
        if rx_offload {
            RxChecksum::Offload
        } else {
            RxChecksum::Software
        },
    )
}

/// Waits until the link of every port in `ports` is up, at most `timeout`
/// (memif connects through its control socket in the background).
// Setting ports up waits by the clock; the turns of a core never do.
#[allow(clippy::disallowed_methods)]
pub fn wait_link(ports: &[&Opened], timeout: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let down: Vec<&str> = ports
            .iter()
            .filter(|p| !p.port.link().up)
            .map(|p| p.describe.as_str())
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(format!(
                "the link of {} did not come up in {} s (for memif: is the other side running, \
                 on the same socket name?)",
                down.join(", "),
                timeout.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `make` on a thread inside namespace `netns` (or on this thread):
/// the devices DPDK's TAP and AF_PACKET drivers create, and the sockets
/// they keep, belong to the namespace of the thread that probes them.
fn in_netns<R: Send>(netns: Option<&str>, make: impl FnOnce() -> R + Send) -> Result<R, String> {
    let Some(ns) = netns else {
        return Ok(make());
    };
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tcp_lite::sys::netns::enter(ns)
                    .map_err(|e| format!("entering namespace {ns}: {e}"))?;
                Ok(make())
            })
            .join()
            .map_err(|_| "the thread making the port panicked".to_string())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// About 4 MiB of buffers a memif ring, as a power of two of
    /// descriptors from 2^8 to 2^11.
    #[test]
    fn memif_rings_hold_about_four_mib() {
        let ring = |mtu: u16| memif_ring_log2(PortOptions::new(mtu).data_room());
        assert_eq!(ring(1500), 11, "2,048 buffers of 2,048 octets");
        assert_eq!(ring(9000), 9, "512 buffers of 9,024 octets");
        assert_eq!(ring(4000), 10, "1,024 buffers of 4,032 octets");
        assert_eq!(memif_ring_log2(64 * 1024), 8, "never fewer than 256");
        assert_eq!(memif_ring_log2(64), 11, "never more than 2,048");
    }
}
