//! Steering: which core of a port owns a received frame.
//!
//! Each core of a port has a queue pair of it and a TCP stack of its own on
//! one IP address; a TCP connection belongs to the core its four-tuple
//! hashes to (the Toeplitz hash of Microsoft's RSS specification, indexed
//! into a redirection table: `tcp_lite::rss`). Where the port spreads what
//! it receives by that hash (a NIC's RSS programmed with the same key and
//! table, or a dpwarp peer whose core k sends on queue k only what core k
//! owns), every frame arrives at its owner. Where it does not (DPDK's TAP
//! driver, whose kernel side picks a queue by its own hash; a peer with
//! another number of cores), the device that received a frame checks the
//! hash and hands a frame owned by another core to that core over a
//! bounded ring ([`Steer`]), counted at both ends; a full ring drops the
//! frame and counts it (TCP sends it again), it never blocks a core.
//!
//! ARP is every core's business: each core's stack keeps its own neighbour
//! cache and may have asked, so ARP frames are copied to every other core.
//! UDP datagrams to a steered UDP port (a DDP over SCTP listener's, RFC
//! 6951, with an SCTP endpoint on every core: an association's packets must
//! all meet its endpoint) go to the core their four-tuple hashes to, as a
//! TCP connection's do (a NIC's RSS hashes UDP's ports too), TCP segments
//! to a pinned TCP port to the core it is pinned to, and TCP segments to a
//! port spread by host ([`Steer::by_host`]) to the core the client's
//! address, ours and the port hash to, whatever the client's source port:
//! every connection of one client host to that port meets on one core
//! (perftest's control and data connections say nothing of each other),
//! while different hosts' clients spread over the cores. Other frames stay
//! where they arrived.
//!
//! The key is the symmetric one (`tcp_lite::rss::SYMMETRIC_KEY`): both
//! directions of a connection hash alike, so two dpwarp hosts with the same
//! number of cores per port agree on the owning core whichever side opened
//! the connection.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use tcp_lite::rss::{Reta, Steering, Toeplitz, RETA_ENTRIES_DEFAULT, SYMMETRIC_KEY};

use crate::dpdk::{Mbuf, Pool};

/// Frames one core's handoff ring holds.
pub const HANDOFF_DEPTH: usize = 1024;

/// What the cores of one port share: a handoff ring per core and, so that
/// no frame in a ring outlives its pool, every queue's pool.
#[derive(Debug)]
pub struct Steer {
    rings: Vec<(Sender<Mbuf>, Receiver<Mbuf>)>,
    /// Declared after the rings: the frames in them go back first.
    _pools: Vec<Arc<Pool>>,
    toeplitz: Toeplitz,
    reta: Reta,
    /// Local TCP ports whose connections one core owns, whatever their
    /// hash, and that core (services whose clients' several connections
    /// must meet on one core: perftest's control and data connections say
    /// nothing of each other).
    pinned: Vec<(u16, u16)>,
    /// Local UDP ports whose datagrams go to the core their four-tuple
    /// hashes to (SCTP endpoints on every core, each association on the
    /// core its UDP ports hash to).
    steered_udp: Vec<u16>,
    /// Local TCP ports whose connections go to the core their two
    /// addresses and the local port hash to ([`Steer::by_host`]).
    by_host: Vec<u16>,
}

impl Steer {
    /// Steering among `pools.len()` cores (queue k, pool k), with the
    /// symmetric key and a round-robin table of
    /// [`RETA_ENTRIES_DEFAULT`] entries.
    pub fn new(pools: &[Arc<Pool>]) -> Result<Arc<Steer>, String> {
        Steer::with_key(pools, &SYMMETRIC_KEY)
    }

    /// [`Steer::new`] with another Toeplitz key (a NIC's, or to make a peer
    /// that disagrees with us in tests).
    pub fn with_key(pools: &[Arc<Pool>], key: &[u8; 40]) -> Result<Arc<Steer>, String> {
        let cores = u16::try_from(pools.len()).map_err(|_| "too many queues".to_string())?;
        let reta = Reta::new(RETA_ENTRIES_DEFAULT, cores).map_err(|e| e.to_string())?;
        Steer::with_table(pools, key, reta)
    }

    /// Steering by `key` and `reta` (a port's RSS as programmed:
    /// [`crate::dpdk::Rss::Hardware`]), whose entries name queues
    /// `0..pools.len()`.
    pub fn with_table(
        pools: &[Arc<Pool>],
        key: &[u8; 40],
        reta: Reta,
    ) -> Result<Arc<Steer>, String> {
        let cores = u16::try_from(pools.len()).map_err(|_| "too many queues".to_string())?;
        if let Some(q) = reta.entries().iter().find(|&&q| q >= cores) {
            return Err(format!(
                "the redirection table names queue {q}; there are {cores}"
            ));
        }
        Ok(Arc::new(Steer {
            rings: (0..cores)
                .map(|_| crossbeam_channel::bounded(HANDOFF_DEPTH))
                .collect(),
            _pools: pools.to_vec(),
            toeplitz: Toeplitz::new(key),
            reta,
            pinned: Vec::new(),
            steered_udp: Vec::new(),
            by_host: Vec::new(),
        }))
    }

    /// [`Steer::new`], frames to each local TCP port of `pinned` going
    /// to the core beside it, and datagrams to the UDP ports `steered_udp`
    /// to the core their four-tuple hashes to. A core beyond the port's is
    /// refused.
    pub fn pinning(
        pools: &[Arc<Pool>],
        pinned: &[(u16, u16)],
        steered_udp: &[u16],
    ) -> Result<Arc<Steer>, String> {
        Steer::new(pools)?.pin(pinned, steered_udp)
    }

    /// This steering, frames to each local TCP port of `pinned` going to
    /// the core beside it, and datagrams to the UDP ports `steered_udp` to
    /// the core their four-tuple hashes to. Only for a steering no core
    /// has yet (its one handle):
    /// [`Steer::pinning`] and `Opened::steer_pinning` call it on the one
    /// they just made.
    pub(crate) fn pin(
        mut self: Arc<Steer>,
        pinned: &[(u16, u16)],
        steered_udp: &[u16],
    ) -> Result<Arc<Steer>, String> {
        let cores = self.cores();
        if let Some((port, core)) = pinned.iter().find(|(_, core)| *core >= cores) {
            return Err(format!(
                "TCP port {port} is pinned to core {core}; the port has {cores}"
            ));
        }
        let s = Arc::get_mut(&mut self).expect("pinned before it is shared");
        s.pinned = pinned.to_vec();
        s.steered_udp = steered_udp.to_vec();
        Ok(self)
    }

    /// This steering, connections to each local TCP port of `ports` going
    /// to the core that [`Steer::host_owner`] names: all of one client
    /// host's on one core, other hosts' spread over the cores. Only for a
    /// steering no core has yet (refused otherwise), and for ports not
    /// pinned to one core.
    pub fn by_host(mut self: Arc<Steer>, ports: &[u16]) -> Result<Arc<Steer>, String> {
        if let Some((port, core)) = self.pinned.iter().find(|(p, _)| ports.contains(p)) {
            return Err(format!(
                "TCP port {port} is pinned to core {core}: it cannot also be spread by host"
            ));
        }
        let s = Arc::get_mut(&mut self)
            .ok_or("a port's steering is set before a core has it".to_string())?;
        s.by_host = ports.to_vec();
        Ok(self)
    }

    /// The core that owns every connection from host `client` to `local`,
    /// a port spread by host: the Toeplitz hash of the two addresses and
    /// the local port (the client's port taken as 0), so that a client's
    /// connections to different services may still land on different
    /// cores.
    pub fn host_owner(&self, client: Ipv4Addr, local: SocketAddrV4) -> u16 {
        self.reta
            .queue(self.toeplitz.hash_v4(SocketAddrV4::new(client, 0), local))
    }

    /// The table in use.
    pub fn reta(&self) -> &Reta {
        &self.reta
    }

    /// Cores.
    pub fn cores(&self) -> u16 {
        self.rings.len() as u16
    }

    /// The stack configuration of core `core`: its active opens pick
    /// source ports whose replies hash to it.
    pub fn steering(&self, core: u16) -> Steering {
        Steering::new(self.toeplitz.clone(), self.reta.clone(), core)
    }

    /// The core that owns a frame from `src` to `dst`.
    pub fn owner(&self, src: SocketAddrV4, dst: SocketAddrV4) -> u16 {
        self.reta.queue(self.toeplitz.hash_v4(src, dst))
    }
}

/// One core's end of a [`Steer`].
#[derive(Debug)]
pub(crate) struct SteerPoint {
    pub(crate) steer: Arc<Steer>,
    pub(crate) me: u16,
}

/// What a received frame is, for steering.
pub(crate) enum Kind {
    /// IPv4 TCP (or UDP to a steered port), owned by this core.
    Mine,
    /// IPv4 TCP (or UDP to a steered port) owned by another core.
    Theirs(u16),
    /// ARP: every core's.
    Everyone,
    /// Anything else: stays here.
    Here,
}

impl SteerPoint {
    /// Classifies an accepted Ethernet frame (at least 14 octets, IPv4
    /// header parsed by the device's checks when IPv4).
    pub(crate) fn classify(&self, frame: &[u8]) -> Kind {
        match [frame[12], frame[13]] {
            [0x08, 0x06] => return Kind::Everyone,
            [0x08, 0x00] => {}
            _ => return Kind::Here,
        }
        let ip = &frame[14..];
        // TCP, or UDP (17) when a UDP port is steered.
        if ip.len() < 20 || !(ip[9] == 6 || (ip[9] == 17 && !self.steer.steered_udp.is_empty())) {
            return Kind::Here;
        }
        let ihl = usize::from(ip[0] & 0x0F) * 4;
        // A fragment carries no ports (or not the first octets): here.
        let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3FFF != 0;
        let Some(tcp) = ip.get(ihl..ihl + 4).filter(|_| !fragment) else {
            return Kind::Here;
        };
        let addr = |o: usize| Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3]);
        let src = SocketAddrV4::new(addr(12), u16::from_be_bytes([tcp[0], tcp[1]]));
        let dst = SocketAddrV4::new(addr(16), u16::from_be_bytes([tcp[2], tcp[3]]));
        let owner = if ip[9] == 17 {
            // UDP: a steered port's datagrams to the core their four-tuple
            // hashes to, the rest stay.
            if !self.steer.steered_udp.contains(&dst.port()) {
                return Kind::Here;
            }
            self.steer.owner(src, dst)
        } else if let Some(&(_, core)) = self.steer.pinned.iter().find(|(p, _)| *p == dst.port()) {
            core
        } else if self.steer.by_host.contains(&dst.port()) {
            self.steer.host_owner(*src.ip(), dst)
        } else {
            self.steer.owner(src, dst)
        };
        match owner {
            owner if owner == self.me => Kind::Mine,
            owner => Kind::Theirs(owner),
        }
    }

    /// Hands `mbuf` to core `to`. False (the frame dropped) when its ring
    /// is full.
    pub(crate) fn hand(&self, to: u16, mbuf: Mbuf) -> bool {
        match self.steer.rings.get(usize::from(to)) {
            Some((tx, _)) => match tx.try_send(mbuf) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        }
    }

    /// The next frame another core handed to this one.
    pub(crate) fn take(&self) -> Option<Mbuf> {
        self.steer.rings[usize::from(self.me)].1.try_recv().ok()
    }

    /// The other cores.
    pub(crate) fn others(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.steer.cores()).filter(move |&c| c != self.me)
    }
}
