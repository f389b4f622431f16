//! Ethernet ports: made from a virtual device (`net_memif`, `net_tap`,
//! `net_af_packet`, `net_null`), a PCI NIC, or a pair of rings in this
//! process (`net_ring`); configured with queue pairs; stopped, closed and
//! removed when the last handle to them goes.
//!
//! A port's queues are [`Queue`]s, each taken once: DPDK's bursts on one
//! queue must come from one thread at a time, so a queue has one owner (a
//! poll-mode core) and its bursts take `&mut self`. A DPDK port has one
//! [`Port`] in a process at a time (a second open of the same PCI address
//! is refused), so its queues cannot be taken twice either.

use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use dpdk_sys as sys;

use super::eal::{counted, errno, error_text, make, released, Eal, EalError};
use super::mbuf::{Mbuf, Pool};
use super::rss::{self, Rss, RssCaps};

/// Mbufs moved by one burst call at most (DPDK's customary 32).
pub const BURST_MAX: usize = 32;

/// How a port runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortConfig {
    /// Receive/transmit queue pairs (one per core).
    pub queues: u16,
    /// Descriptors of each receive ring.
    pub rx_descriptors: u16,
    /// Descriptors of each transmit ring.
    pub tx_descriptors: u16,
    /// IP MTU; frames are up to 14 octets longer.
    pub mtu: u16,
    /// Use the port's IPv4/TCP checksum offloads where it has them.
    pub checksum_offload: bool,
    /// Receive every frame, whatever its destination MAC (the device
    /// still drops foreign unicast, and counts it).
    pub promiscuous: bool,
    /// With several queues, spread received IPv4/TCP frames over them by
    /// the Toeplitz hash with this key where the port has RSS (see
    /// [`super::rss`]); [`Port::rss`] says what was done.
    pub rss_key: Option<[u8; tcp_lite::rss::KEY_LEN]>,
}

impl PortConfig {
    /// One queue pair of 1024 descriptors each way at `mtu`, offloads on.
    pub fn new(mtu: u16) -> PortConfig {
        PortConfig {
            queues: 1,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            mtu,
            checksum_offload: true,
            promiscuous: false,
            rss_key: Some(tcp_lite::rss::SYMMETRIC_KEY),
        }
    }
}

/// What a port is and can do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// DPDK's port id.
    pub id: u16,
    /// The device name (`net_memif0`, `0000:01:00.0`).
    pub name: String,
    /// The driver (`net_memif`, `net_tap`, `net_ice`).
    pub driver: String,
    /// Its Ethernet address.
    pub mac: [u8; 6],
    /// Largest MTU it takes.
    pub mtu_max: u16,
    /// Queue pairs it can have.
    pub queues_max: u16,
    /// It computes IPv4 header and TCP checksums on transmit.
    pub tx_checksum: bool,
    /// It verifies IPv4 header and TCP checksums on receive.
    pub rx_checksum: bool,
    /// Its receive side scaling, where it has a redirection table.
    pub rss: Option<RssCaps>,
}

/// Link state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Carrier.
    pub up: bool,
    /// Speed in Mbit/s (0 when unknown).
    pub speed_mbps: u32,
}

/// A port's counters (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Octets received.
    pub rx_octets: u64,
    /// Octets sent.
    pub tx_octets: u64,
    /// Frames the port dropped because its receive ring was full.
    pub rx_missed: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Receives that found the mbuf pool empty.
    pub rx_no_mbuf: u64,
}

/// How the port was made, for removing it.
#[derive(Debug)]
enum Origin {
    /// `rte_vdev_init(name)`: `rte_vdev_uninit(name)` removes it.
    Vdev(CString),
    /// `rte_dev_probe(address)`: `rte_eal_hotplug_remove("pci", address)`.
    Pci(CString),
    /// `rte_eth_from_rings`, which makes the virtual device `net_ring_NAME`
    /// (removed as a vdev); the rings, freed after both ports of the pair,
    /// are held here.
    Rings(CString, Arc<RingPair>),
}

#[derive(Debug)]
struct PortInner {
    info: PortInfo,
    origin: Origin,
    /// Queue pairs configured (0 until [`Port::start`]).
    queues: u16,
    /// Which queues were handed out.
    taken: Mutex<Vec<bool>>,
    /// Receive pools: the port's rings hold their mbufs until it closes.
    pools: Vec<Arc<Pool>>,
    /// The offloads enabled.
    tx_checksum: bool,
    rx_checksum: bool,
    /// How received frames are spread over the queues.
    rss: Rss,
    started: bool,
}

/// An Ethernet port. Cloning shares it; the last handle (with its queues)
/// stops, closes and removes it.
#[derive(Debug, Clone)]
pub struct Port {
    inner: Arc<PortInner>,
}

/// Two rings that two `net_ring` ports cross-connect, freed after both
/// ports. Frames one port sent and the other never read are still in a
/// ring then: the pair keeps both ports' pools, so those mbufs go back to
/// their pool when the pair drains the rings, before the pools go.
#[derive(Debug)]
struct RingPair {
    /// Two per queue pair (one each way); null until made.
    rings: Vec<*mut sys::rte_ring>,
    /// Both ports' pools (added as each starts).
    pools: Mutex<Vec<Arc<Pool>>>,
}

// SAFETY: rte_rings are multi-thread safe objects; the pointers are only
// used to drain and free them, once, when the pair drops.
unsafe impl Send for RingPair {}
// SAFETY: as above.
unsafe impl Sync for RingPair {}

impl RingPair {
    /// Frees every mbuf left in `ring`.
    fn drain(ring: *mut sys::rte_ring) {
        let mut objects = [std::ptr::null_mut(); BURST_MAX];
        loop {
            // SAFETY: the ring is alive (the pair owns it) and both ports
            // are closed (each held an Arc of the pair), so no one else
            // dequeues; it holds only mbufs.
            let n = unsafe {
                sys::dpw_ring_dequeue_burst(ring, objects.as_mut_ptr(), BURST_MAX as u32)
            };
            if n == 0 {
                return;
            }
            for &object in &objects[..n as usize] {
                // SAFETY: a frame a port enqueued: an mbuf nobody else owns,
                // of a pool this pair keeps alive.
                unsafe { sys::dpw_pktmbuf_free(object.cast()) };
            }
        }
    }
}

impl Drop for RingPair {
    fn drop(&mut self) {
        for &ring in &self.rings {
            if ring.is_null() {
                continue;
            }
            RingPair::drain(ring);
            // SAFETY: both ports using the rings are closed (each holds an
            // Arc of this pair until its inner drops); drained above.
            unsafe { sys::rte_ring_free(ring) };
        }
        // The pools go after this, every mbuf back in them.
    }
}

/// DPDK ports that have a [`Port`] in this process.
static CLAIMED: Mutex<Vec<u16>> = Mutex::new(Vec::new());

fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

impl Port {
    /// A port of the virtual device `name` (`net_memif0`, `net_tap3`,
    /// `net_af_packet0`, ...) with driver arguments `args`
    /// (`role=server,socket=/run/dpwarp.sock`).
    pub fn vdev(eal: Eal, name: &str, args: &str) -> Result<Port, EalError> {
        let _ = eal;
        let c_name = c_string(name)?;
        let c_args = c_string(args)?;
        make(|| {
            // SAFETY: EAL runs (checked under the lock); both strings are
            // NUL-terminated; DPDK copies them.
            let rc = unsafe { sys::rte_vdev_init(c_name.as_ptr(), c_args.as_ptr()) };
            if rc < 0 {
                return Err(EalError(format!(
                    "cannot create DPDK device {name},{args}: {}{}",
                    error_text(-rc),
                    vdev_hint(name, -rc)
                )));
            }
            Port::found(name, Origin::Vdev(c_name), true)
        })
    }

    /// The port of the PCI NIC at `address` (`0000:01:00.0`), which must be
    /// bound to vfio-pci (`dpdk-devbind.py -b vfio-pci ADDRESS`) and allowed
    /// in [`EalConfig::pci`](super::EalConfig::pci).
    pub fn pci(eal: Eal, address: &str) -> Result<Port, EalError> {
        let _ = eal;
        let c_address = c_string(address)?;
        make(|| {
            // EAL probes the PCI devices it is allowed at start; one it has
            // not is probed here (and removed again if it fails).
            let probed = Port::by_name(address).is_none();
            if probed {
                // SAFETY: EAL runs (checked under the lock); the string is
                // NUL-terminated.
                let rc = unsafe { sys::rte_dev_probe(c_address.as_ptr()) };
                if rc < 0 {
                    return Err(EalError(format!(
                        "no DPDK port at PCI address {address}: {} (is it bound to vfio-pci? \
                         dpdk-devbind.py --status; and allowed with the EAL's pci list?)",
                        error_text(-rc)
                    )));
                }
            }
            Port::found(address, Origin::Pci(c_address), probed)
        })
    }

    /// Two ports joined back to back in this process through two rings
    /// (`net_ring`): what one sends the other receives. No root, no device.
    pub fn ring_pair(eal: Eal, ring_size: u32) -> Result<(Port, Port), EalError> {
        Port::ring_pair_queues(eal, ring_size, 1)
    }

    /// [`Port::ring_pair`] with `queues` queue pairs: queue q of one port
    /// sends to queue q of the other.
    pub fn ring_pair_queues(
        eal: Eal,
        ring_size: u32,
        queues: u16,
    ) -> Result<(Port, Port), EalError> {
        let _ = eal;
        if queues == 0 {
            return Err(EalError("a ring pair needs a queue pair at least".into()));
        }
        make(|| {
            // Dropped on any error below: what was made of it goes.
            let mut pair = RingPair {
                rings: vec![std::ptr::null_mut(); 2 * usize::from(queues)],
                pools: Mutex::new(Vec::new()),
            };
            for ring in &mut pair.rings {
                let name = c_string(&unique("dpw_ring"))?;
                // SAFETY: EAL runs (checked under the lock); the name is
                // NUL-terminated and unique; one producer (the sending core)
                // and one consumer (the receiving).
                *ring = unsafe {
                    sys::rte_ring_create(
                        name.as_ptr(),
                        ring_size,
                        sys::SOCKET_ID_ANY,
                        sys::RING_F_SP_ENQ | sys::RING_F_SC_DEQ,
                    )
                };
                if ring.is_null() {
                    return Err(EalError(format!(
                        "cannot create a ring: {}",
                        error_text(errno())
                    )));
                }
            }
            let pair = Arc::new(pair);
            let mut ports = Vec::with_capacity(2);
            // Ring 2q carries queue q from the first port to the second,
            // ring 2q + 1 back.
            let way = |parity: usize| -> Vec<*mut sys::rte_ring> {
                pair.rings.iter().skip(parity).step_by(2).copied().collect()
            };
            for (rx, tx) in [(way(1), way(0)), (way(0), way(1))] {
                let name = unique("dpw");
                let c_name = c_string(&name)?;
                // SAFETY: the rings live as long as `pair`, which the port
                // keeps; DPDK copies the two arrays of pointers.
                let id = unsafe {
                    sys::rte_eth_from_rings(
                        c_name.as_ptr(),
                        rx.as_ptr(),
                        u32::from(queues),
                        tx.as_ptr(),
                        u32::from(queues),
                        0,
                    )
                };
                if id < 0 {
                    return Err(EalError(format!(
                        "cannot make a ring port: {}",
                        error_text(errno())
                    )));
                }
                // DPDK names the device after ours.
                let device = format!("net_ring_{name}");
                let origin = Origin::Rings(c_string(&device)?, pair.clone());
                ports.push(Port::found(&device, origin, true)?);
            }
            let b = ports.pop().expect("two ports");
            let a = ports.pop().expect("two ports");
            Ok((a, b))
        })
    }

    fn by_name(name: &str) -> Option<u16> {
        let c_name = CString::new(name).ok()?;
        let mut id = 0u16;
        // SAFETY: the name is NUL-terminated; `id` is a valid out pointer.
        let rc = unsafe { sys::rte_eth_dev_get_port_by_name(c_name.as_ptr(), &mut id) };
        (rc == 0).then_some(id)
    }

    /// The port of the device `name` just made (`ours`: by us, so removed
    /// again if it cannot be used), claimed for this process. Runs inside
    /// [`make`].
    fn found(name: &str, origin: Origin, ours: bool) -> Result<Port, EalError> {
        let Some(id) = Port::by_name(name) else {
            if ours {
                remove(&origin);
            }
            return Err(EalError(format!(
                "DPDK made device {name} but no Ethernet port for it"
            )));
        };
        let mut claimed = CLAIMED.lock().unwrap_or_else(|p| p.into_inner());
        if claimed.contains(&id) {
            return Err(EalError(format!(
                "port {name} is open already in this process (DPDK port {id})"
            )));
        }
        let info = match port_info(id, name) {
            Ok(info) => info,
            Err(e) => {
                if ours {
                    // SAFETY: the port exists, unstarted, and is ours.
                    unsafe { sys::rte_eth_dev_close(id) };
                    remove(&origin);
                }
                return Err(e);
            }
        };
        claimed.push(id);
        counted();
        Ok(Port {
            inner: Arc::new(PortInner {
                info,
                origin,
                queues: 0,
                taken: Mutex::new(Vec::new()),
                pools: Vec::new(),
                tx_checksum: false,
                rx_checksum: false,
                rss: Rss::Off,
                started: false,
            }),
        })
    }

    /// Configures `config.queues` queue pairs, each receiving into the pool
    /// of the same index in `pools` (one per core), and starts the port.
    /// Only a port with no other handle can be started.
    pub fn start(&mut self, config: &PortConfig, pools: &[Arc<Pool>]) -> Result<(), EalError> {
        let inner = Arc::get_mut(&mut self.inner)
            .ok_or_else(|| EalError("start a port before sharing it".into()))?;
        if inner.started {
            return Err(EalError(format!(
                "port {} already started",
                inner.info.name
            )));
        }
        check_config(&inner.info, config, pools)?;
        // The port keeps its pools from here on, even if a step below fails
        // after a driver filled its ring from them (they go after it
        // closes). A ring pair keeps both ports' pools until both close.
        inner.pools = pools[..usize::from(config.queues)].to_vec();
        if let Origin::Rings(_, pair) = &inner.origin {
            let mut kept = pair.pools.lock().unwrap_or_else(|p| p.into_inner());
            kept.extend(inner.pools.iter().cloned());
        }
        let id = inner.info.id;
        let tx_checksum = config.checksum_offload && inner.info.tx_checksum;
        let rx_checksum = config.checksum_offload && inner.info.rx_checksum;
        let mut conf = sys::rte_eth_conf::default();
        conf.rxmode.mtu = u32::from(if no_wire_mtu(&inner.info) {
            config.mtu.min(inner.info.mtu_max)
        } else {
            config.mtu
        });
        if rx_checksum {
            conf.rxmode.offloads |=
                u64::from(sys::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | sys::RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
        }
        if tx_checksum {
            conf.txmode.offloads |=
                u64::from(sys::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | sys::RTE_ETH_TX_OFFLOAD_TCP_CKSUM);
        }
        let name = inner.info.name.clone();
        let fail =
            |what: &str, rc: i32| EalError(format!("port {name}: {what}: {}", error_text(-rc)));
        // Receive side scaling, where there is something to spread and the
        // port can: the key goes in the configuration, the table after the
        // start.
        let tcp_bit = u64::from(sys::RTE_ETH_RSS_NONFRAG_IPV4_TCP);
        let mut rss = match config.rss_key {
            Some(key) if config.queues > 1 => {
                match rss::plan(inner.info.rss, config.queues, tcp_bit) {
                    Ok(reta) => Some((key, reta)),
                    Err(why) => {
                        inner.rss = Rss::Software(format!("{}: {why}", inner.info.driver));
                        None
                    }
                }
            }
            _ => None,
        };
        let mut key_octets = Vec::new();
        let mut hash_types = 0;
        if let (Some((key, _)), Some(caps)) = (&rss, inner.info.rss) {
            key_octets = rss::port_key(key, caps.key_len);
            // TCP by its four-tuple; other IPv4 (UDP to the SCTP port,
            // which the cores pin in software) by what the port can.
            let wanted = tcp_bit
                | u64::from(sys::RTE_ETH_RSS_IPV4)
                | u64::from(sys::RTE_ETH_RSS_NONFRAG_IPV4_UDP);
            hash_types = caps.hash_types & wanted;
            let mut with_rss = conf;
            with_rss.rxmode.mq_mode = sys::RTE_ETH_MQ_RX_RSS;
            with_rss.rx_adv_conf.rss_conf = sys::rte_eth_rss_conf {
                rss_key: key_octets.as_mut_ptr(),
                rss_key_len: key_octets.len() as u8,
                rss_hf: hash_types,
            };
            // SAFETY: the port exists and is stopped; the configuration and
            // the key it points to outlive the call (ethdev copies both).
            let rc =
                unsafe { sys::rte_eth_dev_configure(id, config.queues, config.queues, &with_rss) };
            if rc < 0 {
                // Configured without it below; the cores sort frames out.
                inner.rss = Rss::Software(format!(
                    "{}: configuring RSS failed: {}",
                    inner.info.driver,
                    error_text(-rc)
                ));
                rss = None;
            }
        }
        if rss.is_none() {
            // SAFETY: the port exists and is stopped; conf outlives the call.
            let rc = unsafe { sys::rte_eth_dev_configure(id, config.queues, config.queues, &conf) };
            if rc < 0 {
                return Err(fail("configure", rc));
            }
        }
        // SAFETY: the port exists.
        let socket = unsafe { sys::rte_eth_dev_socket_id(id) };
        let socket = if socket < 0 {
            sys::SOCKET_ID_ANY
        } else {
            socket
        };
        let mut dev_info = sys::rte_eth_dev_info::default();
        // SAFETY: dev_info is a valid out pointer.
        unsafe { sys::rte_eth_dev_info_get(id, &mut dev_info) };
        for q in 0..config.queues {
            let mut rxconf = dev_info.default_rxconf;
            rxconf.offloads = conf.rxmode.offloads;
            let pool = pools[usize::from(q)].as_ptr();
            // SAFETY: the port is configured with `queues` queues; the pool
            // outlives the port (PortInner keeps it).
            let rc = unsafe {
                sys::rte_eth_rx_queue_setup(
                    id,
                    q,
                    config.rx_descriptors,
                    socket as u32,
                    &rxconf,
                    pool,
                )
            };
            if rc < 0 {
                return Err(fail("receive queue setup", rc));
            }
            let mut txconf = dev_info.default_txconf;
            txconf.offloads = conf.txmode.offloads;
            // SAFETY: as above.
            let rc = unsafe {
                sys::rte_eth_tx_queue_setup(id, q, config.tx_descriptors, socket as u32, &txconf)
            };
            if rc < 0 {
                return Err(fail("transmit queue setup", rc));
            }
        }
        // SAFETY: the port is configured.
        let rc = unsafe { sys::rte_eth_dev_start(id) };
        if rc < 0 {
            let mut error = fail("start", rc);
            error.0.push_str(start_hint(&inner.info.driver));
            return Err(error);
        }
        if let Some((key, reta)) = rss {
            inner.rss = match program_reta(id, &reta, &key_octets, hash_types) {
                Ok(port_entries) => Rss::Hardware {
                    key,
                    reta,
                    port_entries,
                },
                Err(why) => Rss::Software(format!("{}: {why}", inner.info.driver)),
            };
        }
        if config.promiscuous {
            // SAFETY: the port is started. Some drivers have no such mode
            // (memif, ring): the device filters by MAC anyway.
            unsafe { sys::rte_eth_promiscuous_enable(id) };
        }
        inner.queues = config.queues;
        inner.taken = Mutex::new(vec![false; usize::from(config.queues)]);
        inner.tx_checksum = tx_checksum;
        inner.rx_checksum = rx_checksum;
        inner.started = true;
        Ok(())
    }

    /// Queue pair `index`, once: `None` if it was taken or does not exist.
    pub fn queue(&self, index: u16) -> Option<Queue> {
        let mut taken = self.inner.taken.lock().unwrap_or_else(|p| p.into_inner());
        let slot = taken.get_mut(usize::from(index))?;
        if *slot {
            return None;
        }
        *slot = true;
        // Counted from a live port: cleanup cannot run before it.
        counted();
        Some(Queue {
            gate: (self.inner.info.driver == "net_memif").then(super::memif_gate::mark),
            port: self.inner.clone(),
            index,
            tx_rejected: 0,
        })
    }

    /// What the port is.
    pub fn info(&self) -> &PortInfo {
        &self.inner.info
    }

    /// Checksum offloads in use on transmit and on receive.
    pub fn checksum_offloads(&self) -> (bool, bool) {
        (self.inner.tx_checksum, self.inner.rx_checksum)
    }

    /// How received frames are spread over the queues (after
    /// [`Port::start`]).
    pub fn rss(&self) -> &Rss {
        &self.inner.rss
    }

    /// The port's redirection table and hash key as it reads them back
    /// (for reports, and to check what [`Port::start`] programmed), or why
    /// it cannot.
    pub fn rss_readback(&self) -> Result<(Vec<u16>, Vec<u8>), String> {
        let info = &self.inner.info;
        let caps = info.rss.ok_or_else(|| format!("{}: no RSS", info.driver))?;
        let why = |what: &str, rc: i32| {
            format!("{}: reading its {what}: {}", info.driver, error_text(-rc))
        };
        let table = read_reta(info.id, caps.reta_size).map_err(|rc| why("table", rc))?;
        let (mut key, _) = read_hash(info.id).map_err(|rc| why("key", rc))?;
        if caps.key_len != 0 {
            key.truncate(usize::from(caps.key_len));
        } else {
            key.truncate(tcp_lite::rss::KEY_LEN);
        }
        Ok((table, key))
    }

    /// The link, without waiting.
    pub fn link(&self) -> Link {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: the port exists; `link` is a valid out pointer.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.inner.info.id, &mut link) };
        Link {
            up: rc == 0 && u32::from(link.link_status()) == sys::RTE_ETH_LINK_UP,
            speed_mbps: if rc == 0 { link.link_speed } else { 0 },
        }
    }

    /// The port's counters.
    pub fn stats(&self) -> PortStats {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: the port exists; `s` is a valid out pointer.
        let rc = unsafe { sys::rte_eth_stats_get(self.inner.info.id, &mut s) };
        if rc != 0 {
            return PortStats::default();
        }
        PortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_octets: s.ibytes,
            tx_octets: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_no_mbuf: s.rx_nombuf,
        }
    }
}

/// Writes our table into a started port's redirection table, makes sure
/// it hashes with our key (some drivers take the key only from
/// `rte_eth_dev_rss_hash_update`, not from the configuration), and reads
/// both back; returns the port's table size. The port's own rule stays
/// (and the cores steer in software) if it refuses or reads back something
/// else.
fn program_reta(
    id: u16,
    reta: &tcp_lite::rss::Reta,
    key: &[u8],
    hash_types: u64,
) -> Result<u16, String> {
    let mut dev_info = sys::rte_eth_dev_info::default();
    // SAFETY: the port exists; dev_info is a valid out pointer.
    let rc = unsafe { sys::rte_eth_dev_info_get(id, &mut dev_info) };
    if rc != 0 {
        return Err(format!("no device info: {}", error_text(-rc)));
    }
    // Some drivers size the table by the configuration: it must still
    // repeat ours whole.
    let size = dev_info.reta_size;
    if !size.is_power_of_two() || usize::from(size) < reta.entries().len() {
        return Err(format!(
            "its redirection table has {size} entries once configured; ours has {}",
            reta.entries().len()
        ));
    }
    let groups = rss::port_table(reta, size);
    let mut conf: Vec<sys::rte_eth_rss_reta_entry64> = groups
        .iter()
        .map(|&(mask, reta)| sys::rte_eth_rss_reta_entry64 { mask, reta })
        .collect();
    // SAFETY: the port is started; `conf` holds size / 64 groups (rounded
    // up), as many as `size` entries need.
    let rc = unsafe { sys::rte_eth_dev_rss_reta_update(id, conf.as_mut_ptr(), size) };
    if rc != 0 {
        return Err(format!(
            "writing its redirection table failed: {}",
            error_text(-rc)
        ));
    }
    match read_reta(id, size) {
        Ok(back) if back != rss::flatten(&groups, size) => {
            return Err("its redirection table reads back otherwise".into())
        }
        _ => {}
    }
    let tcp_bit = u64::from(sys::RTE_ETH_RSS_NONFRAG_IPV4_TCP);
    let in_use = |(k, hf): &(Vec<u8>, u64)| k.get(..key.len()) == Some(key) && hf & tcp_bit != 0;
    match read_hash(id) {
        Ok(now) if in_use(&now) => return Ok(size),
        // A driver that cannot tell: the configuration carried the key.
        Err(rc) if -rc == ENOTSUP => return Ok(size),
        _ => {}
    }
    let mut octets = key.to_vec();
    let mut hash = sys::rte_eth_rss_conf {
        rss_key: octets.as_mut_ptr(),
        rss_key_len: octets.len() as u8,
        rss_hf: hash_types,
    };
    // SAFETY: the port exists; the key outlives the call (copied).
    let rc = unsafe { sys::rte_eth_dev_rss_hash_update(id, &mut hash) };
    if rc != 0 {
        return Err(format!("setting its hash key failed: {}", error_text(-rc)));
    }
    match read_hash(id) {
        Ok(now) if in_use(&now) => Ok(size),
        Ok(_) => Err("its hash key or hashed types read back otherwise".into()),
        Err(rc) => Err(format!("reading its hash key failed: {}", error_text(-rc))),
    }
}

/// A port's redirection table of `size` entries, as it reads back.
fn read_reta(id: u16, size: u16) -> Result<Vec<u16>, i32> {
    let groups = usize::from(size).div_ceil(64);
    let mut back: Vec<sys::rte_eth_rss_reta_entry64> = (0..groups)
        .map(|g| sys::rte_eth_rss_reta_entry64 {
            mask: rss::group_mask(g, size),
            reta: [0; 64],
        })
        .collect();
    // SAFETY: the port exists; `back` holds as many groups as `size`
    // entries need.
    let rc = unsafe { sys::rte_eth_dev_rss_reta_query(id, back.as_mut_ptr(), size) };
    if rc != 0 {
        return Err(rc);
    }
    let back: Vec<(u64, [u16; 64])> = back.iter().map(|g| (g.mask, g.reta)).collect();
    Ok(rss::flatten(&back, size))
}

/// A port's hash key (as long as the port says, at most 64 octets) and
/// the frame types it hashes.
fn read_hash(id: u16) -> Result<(Vec<u8>, u64), i32> {
    let mut key = vec![0u8; 64];
    let mut hash = sys::rte_eth_rss_conf {
        rss_key: key.as_mut_ptr(),
        rss_key_len: key.len() as u8,
        rss_hf: 0,
    };
    // SAFETY: the port exists; the key buffer is as long as it says and
    // longer than any key DPDK's drivers have.
    let rc = unsafe { sys::rte_eth_dev_rss_hash_conf_get(id, &mut hash) };
    if rc != 0 {
        return Err(rc);
    }
    if (1..=64).contains(&hash.rss_key_len) {
        key.truncate(usize::from(hash.rss_key_len));
    }
    Ok((key, hash.rss_hf))
}

/// `ENOTSUP` (Linux's value, which DPDK returns negated).
const ENOTSUP: i32 = 95;

fn check_config(info: &PortInfo, config: &PortConfig, pools: &[Arc<Pool>]) -> Result<(), EalError> {
    let name = &info.name;
    if config.queues == 0 || config.queues > info.queues_max {
        return Err(EalError(format!(
            "port {name}: {} queue pair(s) asked, it has 1 to {}",
            config.queues, info.queues_max
        )));
    }
    if pools.len() < usize::from(config.queues) {
        return Err(EalError(format!(
            "port {name}: one pool per queue pair needed"
        )));
    }
    if config.mtu > info.mtu_max && !no_wire_mtu(info) {
        return Err(EalError(format!(
            "port {name} ({}) takes an MTU of at most {}; {} asked",
            info.driver, info.mtu_max, config.mtu
        )));
    }
    let frame = usize::from(config.mtu) + 14;
    if let Some(pool) = pools.iter().find(|p| p.data_room() < frame) {
        return Err(EalError(format!(
            "port {name}: mbufs of {} octets cannot hold {frame}-octet frames (MTU {})",
            pool.data_room(),
            config.mtu
        )));
    }
    Ok(())
}

/// The largest MTU ethdev lets a port be configured with: its `max_mtu`,
/// and no more than its largest frame allows (ethdev checks the frame:
/// MTU plus the driver's overhead, 18 octets of Ethernet header and FCS
/// unless the two figures say otherwise).
fn mtu_max(dev_info: &sys::rte_eth_dev_info) -> u16 {
    let frame = dev_info.max_rx_pktlen;
    let max_mtu = u32::from(dev_info.max_mtu);
    let overhead = if max_mtu != u32::from(u16::MAX) && frame > max_mtu {
        frame - max_mtu
    } else {
        18
    };
    max_mtu.min(frame.saturating_sub(overhead)) as u16
}

/// Whether ethdev's MTU limit is not the wire's for this driver. DPDK 22.11
/// reports a largest frame of 1518 octets for `net_memif` and
/// `net_af_packet` and refuses to be configured above it, yet both carry
/// longer frames: memif chains shared-memory buffers (no MTU on its wire at
/// all), and AF_PACKET copies whole frames to and from its ring, whose
/// frame size is set when the port is made. Such a port is configured at
/// ethdev's limit and carries frames up to the MTU asked (the kernel
/// interface's MTU, for AF_PACKET, is the caller's to set). `net_tap` is
/// not one: its transmit refuses frames longer than the configured MTU
/// plus 22 octets, so it stays at 1504.
fn no_wire_mtu(info: &PortInfo) -> bool {
    matches!(info.driver.as_str(), "net_memif" | "net_af_packet")
}

fn port_info(id: u16, name: &str) -> Result<PortInfo, EalError> {
    let mut dev_info = sys::rte_eth_dev_info::default();
    // SAFETY: the port exists; dev_info is a valid out pointer.
    let rc = unsafe { sys::rte_eth_dev_info_get(id, &mut dev_info) };
    if rc != 0 {
        return Err(EalError(format!(
            "port {name}: no device info: {}",
            error_text(-rc)
        )));
    }
    let driver = if dev_info.driver_name.is_null() {
        String::new()
    } else {
        // SAFETY: DPDK's driver names are static NUL-terminated strings.
        unsafe { CStr::from_ptr(dev_info.driver_name) }
            .to_string_lossy()
            .into_owned()
    };
    let mut mac = sys::rte_ether_addr::default();
    // SAFETY: the port exists; mac is a valid out pointer.
    unsafe { sys::rte_eth_macaddr_get(id, &mut mac) };
    let tx = u64::from(sys::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | sys::RTE_ETH_TX_OFFLOAD_TCP_CKSUM);
    let rx = u64::from(sys::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | sys::RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
    Ok(PortInfo {
        id,
        name: name.to_string(),
        driver,
        mac: mac.addr_bytes,
        mtu_max: mtu_max(&dev_info),
        queues_max: dev_info.max_rx_queues.min(dev_info.max_tx_queues).max(1),
        tx_checksum: dev_info.tx_offload_capa & tx == tx,
        rx_checksum: dev_info.rx_offload_capa & rx == rx,
        rss: (dev_info.reta_size > 0).then_some(RssCaps {
            reta_size: dev_info.reta_size,
            key_len: dev_info.hash_key_size,
            hash_types: dev_info.flow_type_rss_offloads,
        }),
    })
}

/// What to check when a port of `driver` does not start.
fn start_hint(driver: &str) -> &'static str {
    if driver.contains("memif") {
        // A memif server starts listening; a client starts by connecting
        // to its server's socket, which fails when nothing serves it.
        " (a memif client connects to its server when it starts: start the server first, on the same socket)"
    } else {
        ""
    }
}

/// What to check when a virtual device cannot be made.
fn vdev_hint(name: &str, errno: i32) -> &'static str {
    const EEXIST: i32 = 17;
    if errno == EEXIST {
        " (a device of that name exists already)"
    } else if name.starts_with("net_memif") {
        " (is the memif socket's directory there, or the socket served by another process?)"
    } else if name.starts_with("net_tap") {
        " (net_tap needs root and /dev/net/tun; is the interface name free?)"
    } else if name.starts_with("net_af_packet") {
        " (net_af_packet needs root and an existing interface, iface=NAME)"
    } else {
        ""
    }
}

fn c_string(text: &str) -> Result<CString, EalError> {
    CString::new(text).map_err(|_| EalError(format!("{text:?} contains a NUL octet")))
}

/// Removes the device a port was made from (closed, or never set up).
fn remove(origin: &Origin) {
    match origin {
        // SAFETY: the device's port is closed or unused; the name is the
        // one it was made with.
        Origin::Vdev(name) | Origin::Rings(name, _) => unsafe {
            sys::rte_vdev_uninit(name.as_ptr());
        },
        Origin::Pci(address) => {
            let bus = c"pci";
            // SAFETY: as above.
            unsafe { sys::rte_eal_hotplug_remove(bus.as_ptr(), address.as_ptr()) };
        }
    }
}

/// How long a closed memif port waits before its device is removed (see
/// `PortInner::drop`).
const MEMIF_CLOSE_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

impl Drop for PortInner {
    fn drop(&mut self) {
        let id = self.info.id;
        // SAFETY: no queue handle exists (each holds an Arc of this inner);
        // stopping and closing releases the mbufs in the port's rings to
        // their pools, which this inner still keeps alive.
        unsafe {
            if self.started {
                sys::rte_eth_dev_stop(id);
            }
            sys::rte_eth_dev_close(id);
        }
        // Closing released the port's id to DPDK, which may give it to the
        // next port made, by another thread, while this one sleeps below:
        // it is no longer ours to claim (kept until after the sleep, it
        // made that thread's port refused as "open already").
        CLAIMED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|&claimed| claimed != id);
        if self.info.driver == "net_memif" {
            // DPDK 22.11's memif closes its control channel by deferring
            // the release to EAL's interrupt thread, which then still uses
            // the device's private data; removing the device at once frees
            // that under it (a crash on the interrupt thread after a run, 1
            // in 10 to 15 `bench --compare` runs on hugepages). Give the
            // interrupt thread the time to run what was deferred.
            std::thread::sleep(MEMIF_CLOSE_GRACE);
        }
        // A ring pair's frames this port sent and the other never read go
        // back to their pool when the pair drains, after both ports.
        remove(&self.origin);
        released();
    }
}

/// One receive/transmit queue pair of a port, owned by one thread at a
/// time.
#[derive(Debug)]
pub struct Queue {
    port: Arc<PortInner>,
    index: u16,
    /// A memif queue's mark for the gate its bursts pass (see
    /// `memif_gate`): a peer that leaves cannot unmap the rings under one.
    gate: Option<Arc<super::memif_gate::Mark>>,
    /// Frames the driver's transmit prepare step refused (dropped).
    pub tx_rejected: u64,
}

// A Queue moves between threads (Send); its bursts take `&mut self`, so one
// thread at a time uses it, as DPDK requires.
impl Queue {
    /// The port's id and this queue's index.
    pub fn id(&self) -> (u16, u16) {
        (self.port.info.id, self.index)
    }

    /// What the port is.
    pub fn info(&self) -> &PortInfo {
        &self.port.info
    }

    /// Whether the port's link is up.
    pub fn link_up(&self) -> bool {
        let mut link = sys::rte_eth_link::default();
        // SAFETY: the port exists while this queue holds it; `link` is a
        // valid out pointer.
        let rc = unsafe { sys::rte_eth_link_get_nowait(self.port.info.id, &mut link) };
        rc == 0 && u32::from(link.link_status()) == sys::RTE_ETH_LINK_UP
    }

    /// Checksum offloads in use on transmit and on receive.
    pub fn checksum_offloads(&self) -> (bool, bool) {
        (self.port.tx_checksum, self.port.rx_checksum)
    }

    /// The pool this queue receives into.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.port.pools[usize::from(self.index)]
    }

    /// Receives up to `out.len()` (at most [`BURST_MAX`]) frames into the
    /// first slots of `out`; returns how many. Whatever those slots held is
    /// freed.
    pub fn rx_burst(&mut self, out: &mut [Option<Mbuf>]) -> usize {
        let n = out.len().min(BURST_MAX);
        let mut raw = [std::ptr::null_mut::<sys::rte_mbuf>(); BURST_MAX];
        let (port, index) = (self.port.info.id, self.index);
        // SAFETY: we own the queue (`&mut self`, one thread); `raw` has room
        // for `n` pointers. DPDK hands us the first `got` it writes; vector
        // drivers may write ring-owned pointers past them, which are never
        // read.
        let mut burst = || unsafe {
            usize::from(sys::dpw_eth_rx_burst(
                port,
                index,
                raw.as_mut_ptr(),
                n as u16,
            ))
        };
        let got = match &self.gate {
            Some(mark) => super::memif_gate::guarded(mark, burst),
            None => burst(),
        };
        let got = got.min(n);
        for (slot, &m) in out.iter_mut().zip(&raw[..got]) {
            let m = NonNull::new(m).expect("DPDK received into an mbuf");
            // SAFETY: DPDK handed this mbuf over; nobody else owns it.
            *slot = Some(unsafe { Mbuf::from_raw(m) });
        }
        got
    }

    /// Sends the frames at the front of `frames`, up to the first empty
    /// slot ([`BURST_MAX`] at most); the ones sent leave their slots and
    /// the slots after them move to the front, in order (so the frames not
    /// sent stay first). Returns how many were sent: fewer when the
    /// transmit ring is full, which is back-pressure, not loss.
    pub fn tx_burst(&mut self, frames: &mut [Option<Mbuf>]) -> usize {
        let mut raw = [std::ptr::null_mut::<sys::rte_mbuf>(); BURST_MAX];
        let mut n = 0;
        for (slot, frame) in raw.iter_mut().zip(frames.iter()) {
            let Some(frame) = frame else { break };
            *slot = frame.as_ptr();
            n += 1;
        }
        let (port, index) = (self.port.info.id, self.index);
        let ready = if self.port.tx_checksum {
            // tx_prepare fixes what the NIC needs for its offloads (it is
            // a no-op on drivers without a prepare step).
            // SAFETY: we own the queue; `raw[..n]` are mbufs we own (still
            // in `frames`), which prepare may edit but does not take.
            unsafe { sys::dpw_eth_tx_prepare(port, index, raw.as_mut_ptr(), n as u16) }
        } else {
            n as u16
        };
        // SAFETY: as above; DPDK takes ownership of the first `sent`.
        let mut burst =
            || usize::from(unsafe { sys::dpw_eth_tx_burst(port, index, raw.as_mut_ptr(), ready) });
        let sent = match &self.gate {
            // A closed gate sends nothing: back-pressure, as a full ring.
            Some(mark) => super::memif_gate::guarded(mark, burst),
            None => burst(),
        };
        let sent = sent.min(usize::from(ready));
        for slot in &mut frames[..sent] {
            // The driver owns these now: forget, do not free.
            if let Some(m) = slot.take() {
                m.into_raw();
            }
        }
        let mut gone = sent;
        if sent == usize::from(ready) && usize::from(ready) < n {
            // The driver's prepare step refused the frame at `ready` (its
            // offload request is one it cannot do): it would block the
            // queue forever. Drop it, counted.
            frames[sent] = None;
            self.tx_rejected += 1;
            gone += 1;
        }
        frames.rotate_left(gone);
        sent
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        released();
    }
}
