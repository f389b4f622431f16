//! [`Stack`]: many smoltcp TCP connections on one interface, behind the
//! [`Transport`] interface.
//!
//! smoltcp's TCP socket does the protocol (RFC 9293); this module adds what
//! an RNIC needs on top: handles with generations, listeners with a
//! backlog of listening sockets (smoltcp has no SYN queue), zero-copy send,
//! stream positions, segment-sized FPDU hints, events, and a user timeout.

use std::net::SocketAddrV4;

use smoltcp::iface::{
    Config, Interface, PollIngressSingleResult, PollResult, SocketHandle, SocketSet,
};
use smoltcp::phy::{Device, Medium};
use smoltcp::socket::tcp::{self, RecoveryStats, State};
use smoltcp::socket::udp;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr, IpEndpoint};

use crate::config::{ConfigError, StackConfig};
use crate::event::{ConnId, Event, EventKind, EventQueue, ListenerId};
use crate::mark::{Marking, Marks, SynClasses};
use crate::transport::{
    ConnectError, Datagrams, DirectReceive, ListenError, RecvError, SendError, Transport, UdpError,
    UdpId,
};

/// Packets taken from the device per [`Stack::poll`] before egress runs
/// (STYLE.md §5: every poller has a named budget).
pub const RX_BURST_PACKETS_MAX: usize = 256;
/// Rounds of egress per poll; each round lets every socket with something
/// to send emit one segment.
pub const TX_BURST_ROUNDS_MAX: usize = 256;
/// Listeners per stack.
pub const LISTENERS_MAX: usize = 16;

/// IPv4 and TCP headers without options: what smoltcp subtracts from the IP
/// MTU for its segment size (no timestamps are negotiated).
const IPV4_TCP_HEADERS: usize = 40;
/// How often a scan looks at every connection, not only those that may
/// have changed: the user timeout of a connection waiting on a silent peer
/// (no segment, no timer of smoltcp's) is seen at most this late.
const FULL_SCAN_EVERY: Duration = Duration::from_millis(100);

/// Counters of a [`Stack`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Active opens that completed.
    pub connected: u64,
    /// Connections accepted by listeners.
    pub accepted: u64,
    /// Connections that ended with [`EventKind::Closed`].
    pub closed: u64,
    /// Connections reset or refused by the peer.
    pub reset: u64,
    /// Connections aborted by the user timeout.
    pub timed_out: u64,
    /// SYNs refused with RST because `max_connections` were open.
    pub refused: u64,
    /// Times a listener could not be given a fresh listening socket.
    pub backlog_exhausted: u64,
    /// Handshakes of listeners that never completed (reset in SYN-RECEIVED,
    /// or timed out): dropped without an event.
    pub half_open_dropped: u64,
    /// Packets taken from the device.
    pub rx_packets: u64,
    /// Received octets taken straight from their segments by
    /// [`Transport::poll_direct`]'s receiver, never buffered.
    pub rx_direct_octets: u64,
    /// Connections the scans after each poll looked at: those ingress,
    /// egress or the user touched, and every one at the periodic full scan.
    /// An idle connection adds nothing between full scans.
    pub slots_scanned: u64,
    /// SYNs whose DSCP was learned ([`Transport::reflect_dscp`]).
    pub syn_classes_learned: u64,
}

/// Where a slot's socket came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A socket listening for `listener` (not a connection yet).
    Listening(u16),
    /// An active open.
    Active,
    /// Accepted by the listener on this port.
    Accepted(u16),
}

/// One socket and what the stack knows about it.
#[derive(Debug)]
struct Slot {
    generation: u32,
    handle: SocketHandle,
    role: Role,
    /// Local port of an active open, freed with the slot.
    local_port: u16,
    /// Local and remote address, kept from the handshake on (smoltcp forgets
    /// them when the socket closes).
    endpoints: Option<(SocketAddrV4, SocketAddrV4)>,
    /// Waiting for the peer (handshake, acknowledgement, close): the user
    /// timeout runs.
    waiting: bool,
    /// Octets queued for sending since the handshake.
    tx_pos: u64,
    /// Octets received by the user since the handshake.
    rx_pos: u64,
    /// Received octets already announced by [`EventKind::Readable`].
    rx_announced: u64,
    /// Received octets (read, taken from the frame or buffered) a scan has
    /// looked at for the user timeout.
    rx_seen: u64,
    /// Stream position where smoltcp starts its next segment, if it sends
    /// whatever is queued at the next poll.
    segment_anchor: u64,
    /// Stream position of the end of smoltcp's transmit ring, where it cuts
    /// a segment short (it sends only contiguous ring space), if known.
    ring_end: Option<u64>,
    /// `tx_pos - send_queue` when progress was last seen.
    acked: u64,
    state: State,
    progress_at: Instant,
    open_reported: bool,
    peer_fin: bool,
    closed_by_us: bool,
    tx_blocked: bool,
    /// A final event was reported, or the user aborted: no more events.
    finished: bool,
    /// Released by the user: remove the socket once its RST has gone out.
    releasing: bool,
    /// Aborted since the last egress: the RST has not gone out yet.
    rst_pending: bool,
    /// In the list of slots the next scan looks at.
    dirty: bool,
    /// The DSCP of the SYN that opened an accepted connection, where
    /// [`Transport::reflect_dscp`] learned it.
    peer_dscp: Option<u8>,
}

#[derive(Debug)]
struct Listener {
    port: u16,
    /// Slots whose sockets are listening on `port`.
    listening: Vec<u32>,
}

/// TCP connections over one smoltcp interface and device.
pub struct Stack<D: Device> {
    config: StackConfig,
    device: D,
    iface: Interface,
    sockets: SocketSet<'static>,
    /// Sockets of freed slots, closed and kept (with their buffers) for the
    /// next slots: a new socket's buffers are zero-filled allocations (two
    /// of 256 KiB in `bench`), which cost more than the whole MPA startup
    /// of a connection. smoltcp clears a socket's state when it is opened
    /// again (`listen` and `connect` reset a closed socket).
    spare: Vec<SocketHandle>,
    slots: Vec<Option<Slot>>,
    /// The most slots: connections and every listener's backlog. The
    /// tables sized by it (`events` among them) hold no more (found by a
    /// review: the bound was `slots`' capacity, which `Vec` may make
    /// larger than asked).
    slots_max: usize,
    /// Generation of each slot index, kept while it is free.
    generations: Vec<u32>,
    free: Vec<u32>,
    /// Indices of slots holding connections (not listening sockets).
    live: Vec<u32>,
    listeners: Vec<Listener>,
    /// Local ports in use by active opens (one bit each).
    ports_used: Vec<u64>,
    next_port: u16,
    events: EventQueue,
    connections: usize,
    /// Largest segment payload on this interface.
    emss: usize,
    stats: StackStats,
    /// Time of the last poll (or of creation).
    now: Instant,
    /// Slots the next scan looks at (their `dirty` is set).
    dirty: Vec<u32>,
    /// The sockets smoltcp says it touched (scratch).
    changed: Vec<SocketHandle>,
    /// Each socket's slot, by the socket's index in `sockets` (`u32::MAX`:
    /// none).
    by_handle: Vec<u32>,
    /// When the next scan looks at every connection.
    full_scan_at: Instant,
    /// A slot was freed since the listeners were last replenished.
    freed: bool,
    /// UDP sockets ([`Datagrams`]), by [`UdpId`]; never removed.
    udp: Vec<SocketHandle>,
    /// The DSCPs of marked connections ([`Transport::set_dscp`]).
    marks: Marks,
    /// The DSCPs of the SYNs that arrived ([`Transport::reflect_dscp`]).
    syns: SynClasses,
    /// The device's medium (where a frame's IPv4 header starts).
    medium: Medium,
    /// smoltcp computes IPv4 header checksums (the device does not): a
    /// marked header's is mended.
    mend_ipv4: bool,
}

impl<D: Device> Stack<D> {
    /// A stack on `device`, configured by `config`.
    pub fn new(config: StackConfig, mut device: D, now: Instant) -> Result<Self, ConfigError> {
        config.validate()?;
        let caps = device.capabilities();
        let hardware_addr = match (caps.medium, config.mac) {
            (Medium::Ethernet, Some(mac)) => HardwareAddress::Ethernet(EthernetAddress(mac)),
            (Medium::Ip, None) => HardwareAddress::Ip,
            (Medium::Ethernet, None) => {
                return Err(ConfigError("the device is Ethernet: set mac"));
            }
            _ => return Err(ConfigError("the device is not Ethernet: mac must be None")),
        };
        let ip_mtu = match caps.medium {
            Medium::Ethernet => caps.max_transmission_unit.saturating_sub(14),
            _ => caps.max_transmission_unit,
        };
        if ip_mtu < 576 {
            return Err(ConfigError(
                "the device's MTU is below IPv4's minimum of 576",
            ));
        }
        let mut iface_config = Config::new(hardware_addr);
        iface_config.random_seed = config.seed;
        let mut iface = Interface::new(iface_config, &mut device, now);
        let addr = config.addr;
        iface.update_ip_addrs(|addrs| {
            // One address, pushed into an empty list: cannot overflow.
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(addr), config.prefix_len));
        });
        if let Some(gateway) = config.gateway {
            iface
                .routes_mut()
                .add_default_ipv4_route(gateway)
                .map_err(|_| ConfigError("the route table is full"))?;
        }
        let slots_max = config.max_connections + LISTENERS_MAX * config.backlog;
        Ok(Stack {
            next_port: {
                let (first, last) = (
                    *config.ephemeral_ports.start(),
                    *config.ephemeral_ports.end(),
                );
                let span = u64::from(last.saturating_sub(first)) + 1;
                first + (config.seed % span) as u16
            },
            events: EventQueue::with_capacity(slots_max),
            slots: Vec::with_capacity(slots_max),
            slots_max,
            generations: Vec::with_capacity(slots_max),
            free: Vec::new(),
            live: Vec::with_capacity(config.max_connections),
            listeners: Vec::new(),
            ports_used: vec![0; 1024],
            sockets: SocketSet::new(Vec::with_capacity(slots_max)),
            spare: Vec::with_capacity(slots_max),
            connections: 0,
            emss: ip_mtu - IPV4_TCP_HEADERS,
            stats: StackStats::default(),
            now,
            dirty: Vec::with_capacity(slots_max),
            changed: Vec::with_capacity(slots_max),
            by_handle: Vec::with_capacity(slots_max),
            full_scan_at: now,
            freed: false,
            udp: Vec::new(),
            // Seeds no peer sees: its addresses and ports cannot be chosen
            // to collide.
            marks: Marks::new(config.seed.rotate_left(17) ^ 0x6d61_726b),
            syns: SynClasses::new(config.addr, config.seed.rotate_left(41) ^ 0x7379_6e73),
            medium: caps.medium,
            mend_ipv4: caps.checksum.ipv4.tx(),
            config,
            device,
            iface,
        })
    }

    /// The device, e.g. to inspect an in-memory link's counters.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The configuration.
    pub fn config(&self) -> &StackConfig {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> StackStats {
        StackStats {
            syn_classes_learned: self.syns.learned,
            ..self.stats
        }
    }

    /// Connections whose segments are marked now ([`Transport::set_dscp`],
    /// [`Transport::connect_marked`]).
    pub fn marked(&self) -> usize {
        self.marks.len()
    }

    /// What loss recovery did on connection `conn` so far: SACK blocks
    /// taken and ignored, segments deemed lost (by RACK, duplicate ACKs or a
    /// timeout), retransmissions, loss probes, timeouts and recovery
    /// episodes (smoltcp's `RecoveryStats`).
    pub fn recovery_stats(&self, conn: ConnId) -> Result<RecoveryStats, SendError> {
        let slot = self.slot(conn)?;
        Ok(self
            .sockets
            .get::<tcp::Socket>(slot.handle)
            .recovery_stats())
    }

    /// The largest segment payload smoltcp sends on this interface (IP MTU
    /// less 40 octets of headers; a peer announcing a smaller MSS lowers it
    /// per connection, which this does not see).
    pub fn emss(&self) -> usize {
        self.emss
    }

    /// Sockets listening now, over all listeners (diagnostics and tests:
    /// at most `backlog` per listener).
    pub fn listening_sockets(&self) -> usize {
        self.listeners.iter().map(|l| l.listening.len()).sum()
    }

    /// smoltcp's state of a connection, for diagnostics and tests.
    pub fn tcp_state(&self, conn: ConnId) -> Option<State> {
        let slot = self.slot(conn).ok()?;
        Some(self.sockets.get::<tcp::Socket>(slot.handle).state())
    }

    fn slot(&self, conn: ConnId) -> Result<&Slot, SendError> {
        match self.slots.get(conn.index as usize) {
            Some(Some(slot))
                if slot.generation == conn.generation
                    && !slot.releasing
                    && !matches!(slot.role, Role::Listening(_)) =>
            {
                Ok(slot)
            }
            _ => Err(SendError::InvalidConnection),
        }
    }

    /// A connection's slot, to change: the next scan looks at it.
    fn slot_mut(&mut self, conn: ConnId) -> Result<&mut Slot, SendError> {
        match self.slots.get_mut(conn.index as usize) {
            Some(Some(slot))
                if slot.generation == conn.generation
                    && !slot.releasing
                    && !matches!(slot.role, Role::Listening(_)) =>
            {
                if !slot.dirty {
                    slot.dirty = true;
                    self.dirty.push(conn.index);
                }
                Ok(slot)
            }
            _ => Err(SendError::InvalidConnection),
        }
    }

    /// A connection's slot, released or not, to change (see
    /// [`slot_mut`](Self::slot_mut)).
    fn slot_mut_any(&mut self, conn: ConnId) -> Result<&mut Slot, SendError> {
        match self.slots.get_mut(conn.index as usize) {
            Some(Some(slot)) if slot.generation == conn.generation => {
                if !slot.dirty {
                    slot.dirty = true;
                    self.dirty.push(conn.index);
                }
                Ok(slot)
            }
            _ => Err(SendError::InvalidConnection),
        }
    }

    /// A new socket in a free slot, or `None` when every slot is taken.
    fn new_slot(&mut self, role: Role, now: Instant) -> Option<u32> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < self.slots_max => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let tcp = &self.config.tcp;
        let handle = match self.spare.pop() {
            Some(handle) => handle,
            None => self.sockets.add(tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0; tcp.rx_buffer]),
                tcp::SocketBuffer::new(vec![0; tcp.tx_buffer]),
            )),
        };
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        socket.set_nagle_enabled(tcp.nagle);
        socket.set_ack_delay(tcp.ack_delay);
        socket.set_rto_min(tcp.rto_min);
        socket.set_record_segmentation(tcp.whole_records);
        // A new controller: a reused socket's must not carry its last
        // connection's window.
        socket.set_congestion_control(tcp.congestion.to_smoltcp());
        socket.set_keep_alive(tcp.keep_alive);
        let generation = self.generations[index as usize].wrapping_add(1);
        self.generations[index as usize] = generation;
        self.slots[index as usize] = Some(Slot {
            generation,
            handle,
            role,
            local_port: 0,
            endpoints: None,
            waiting: false,
            tx_pos: 0,
            rx_pos: 0,
            rx_announced: 0,
            rx_seen: 0,
            segment_anchor: 0,
            ring_end: None,
            acked: 0,
            state: State::Closed,
            progress_at: now,
            open_reported: false,
            peer_fin: false,
            closed_by_us: false,
            tx_blocked: false,
            finished: false,
            releasing: false,
            rst_pending: false,
            dirty: false,
            peer_dscp: None,
        });
        let at = handle.index();
        if at >= self.by_handle.len() {
            self.by_handle.resize(at + 1, u32::MAX);
        }
        self.by_handle[at] = index;
        self.mark(index);
        Some(index)
    }

    fn free_slot(&mut self, index: u32) {
        if let Some(slot) = self.slots[index as usize].take() {
            if let Some(at) = self.by_handle.get_mut(slot.handle.index()) {
                *at = u32::MAX;
            }
            // A socket released in TIME-WAIT (or still listening) is closed
            // first: a closed socket takes no segment, so its four-tuple is
            // free for a new connection at once, as when it was removed.
            // (Its peer, closed already, may get a reset it ignores.)
            let socket = self.sockets.get_mut::<tcp::Socket>(slot.handle);
            if socket.state() != State::Closed {
                socket.abort();
            }
            // The next connection on this socket starts as any other.
            self.sockets.set_urgent(slot.handle, false);
            if let (Some((local, remote)), true) = (slot.endpoints, self.marks.len() > 0) {
                let flow = (*local.ip(), local.port(), *remote.ip(), remote.port());
                self.marks.forget(flow, index);
            }
            self.spare.push(slot.handle);
            if !matches!(slot.role, Role::Listening(_)) {
                self.connections -= 1;
                self.live.retain(|&i| i != index);
            }
            if slot.role == Role::Active {
                self.port_bit(slot.local_port, false);
            }
            self.events.forget(index);
            self.free.push(index);
            self.freed = true;
        }
    }

    fn port_bit(&mut self, port: u16, used: bool) {
        let (word, bit) = (port as usize / 64, port as usize % 64);
        if used {
            self.ports_used[word] |= 1 << bit;
        } else {
            self.ports_used[word] &= !(1 << bit);
        }
    }

    fn port_used(&self, port: u16) -> bool {
        self.ports_used[port as usize / 64] & (1 << (port as usize % 64)) != 0
    }

    /// Put listening sockets back where SYNs took them, and take back the
    /// ones whose handshake was reset (smoltcp returns those to LISTEN).
    fn replenish(&mut self, now: Instant) {
        self.freed = false;
        for l in 0..self.listeners.len() {
            let port = self.listeners[l].port;
            let mut i = 0;
            while i < self.listeners[l].listening.len() {
                let index = self.listeners[l].listening[i];
                let handle = self.slots[index as usize].as_ref().map(|s| s.handle);
                let Some(handle) = handle else {
                    self.listeners[l].listening.swap_remove(i);
                    continue;
                };
                if self.sockets.get::<tcp::Socket>(handle).is_listening() {
                    i += 1;
                    continue;
                }
                // A SYN arrived: this socket is now a connection.
                self.listeners[l].listening.swap_remove(i);
                let refuse = self.connections >= self.config.max_connections;
                // Its SYN's class, taken in the poll that received it, and
                // on its segments from the SYN-ACK on.
                let class = match (self.syns.learning, refuse) {
                    (true, false) => {
                        endpoints(self.sockets.get::<tcp::Socket>(handle)).map(|(local, remote)| {
                            let flow = (*local.ip(), local.port(), *remote.ip(), remote.port());
                            // `None`: not known (its entry was written over
                            // before this; not expected, see `SynClasses`).
                            let class = self.syns.take(flow);
                            if let Some(class @ 1..) = class {
                                self.marks.set(flow, class, index);
                            }
                            (class, (local, remote))
                        })
                    }
                    _ => None,
                };
                if let Some(slot) = self.slots[index as usize].as_mut() {
                    slot.role = Role::Accepted(port);
                    slot.progress_at = now;
                    if let Some((class, ends)) = class {
                        slot.peer_dscp = class;
                        // The mark goes with the slot (`free_slot`).
                        slot.endpoints.get_or_insert(ends);
                    }
                    if refuse {
                        // Over the limit: answer the SYN with RST, free the slot after.
                        slot.finished = true;
                        slot.releasing = true;
                        slot.rst_pending = true;
                    }
                }
                if refuse {
                    self.sockets.get_mut::<tcp::Socket>(handle).abort();
                    self.stats.refused += 1;
                }
                self.connections += 1;
                self.live.push(index);
            }
            while self.listeners[l].listening.len() < self.config.backlog {
                if self.connections >= self.config.max_connections {
                    self.stats.backlog_exhausted += 1;
                    break;
                }
                let Some(index) = self.new_slot(Role::Listening(port), now) else {
                    self.stats.backlog_exhausted += 1;
                    break;
                };
                let handle = self.slots[index as usize].as_ref().map(|s| s.handle);
                if let Some(handle) = handle {
                    // A fresh socket on a port we listen on: cannot fail.
                    let _ = self.sockets.get_mut::<tcp::Socket>(handle).listen(port);
                }
                self.listeners[l].listening.push(index);
            }
        }
    }

    /// Turn smoltcp's socket states into events, enforce the user timeout,
    /// and free released slots (`after_egress`: pending RSTs have gone out).
    /// Only the connections that may have changed are looked at: those
    /// smoltcp says ingress or egress touched (`SocketSet::take_changed`)
    /// and those the user touched; every connection at least every
    /// [`FULL_SCAN_EVERY`] (or a tenth of the user timeout), for the user
    /// timeout of one that waits on a silent peer. A poll so costs what the
    /// active connections cost, not what every connection does.
    fn scan(&mut self, now: Instant, after_egress: bool) {
        self.sockets.take_changed(&mut self.changed);
        if self.changed.is_empty() && self.dirty.is_empty() && now < self.full_scan_at {
            return;
        }
        for i in 0..self.changed.len() {
            let index = self
                .by_handle
                .get(self.changed[i].index())
                .copied()
                .unwrap_or(u32::MAX);
            if index != u32::MAX {
                self.mark(index);
            }
        }
        self.changed.clear();
        let mut dirty = core::mem::take(&mut self.dirty);
        for &index in &dirty {
            if let Some(Some(slot)) = self.slots.get_mut(index as usize) {
                slot.dirty = false;
            }
        }
        if now >= self.full_scan_at {
            let every = FULL_SCAN_EVERY
                .min(self.config.tcp.user_timeout / 10)
                .min(self.config.tcp.handshake_timeout / 10);
            self.full_scan_at = now + every;
            let mut i = 0;
            while i < self.live.len() {
                let index = self.live[i];
                i += 1;
                if self.scan_slot(index, now, after_egress) {
                    i -= 1;
                }
            }
        } else {
            for &index in &dirty {
                self.scan_slot(index, now, after_egress);
            }
        }
        dirty.clear();
        self.dirty = dirty;
    }

    /// Marks slot `index` for the next scan.
    fn mark(&mut self, index: u32) {
        if let Some(Some(slot)) = self.slots.get_mut(index as usize) {
            if !slot.dirty {
                slot.dirty = true;
                self.dirty.push(index);
            }
        }
    }

    /// [`scan`](Self::scan) of one connection; whether it freed the slot.
    fn scan_slot(&mut self, index: u32, now: Instant, after_egress: bool) -> bool {
        self.stats.slots_scanned += 1;
        let timeout = self.config.tcp.user_timeout;
        let Some(slot) = self.slots[index as usize].as_mut() else {
            return false;
        };
        if matches!(slot.role, Role::Listening(_)) {
            return false;
        }
        let conn = ConnId {
            index,
            generation: slot.generation,
        };
        let handle = slot.handle;
        let socket = self.sockets.get::<tcp::Socket>(handle);
        let state = socket.state();
        // smoltcp forgets the tuple once the RST of an abort went out.
        if after_egress && slot.rst_pending && socket.local_endpoint().is_none() {
            slot.rst_pending = false;
        }
        if slot.releasing {
            // A RST that cannot leave (no route to the peer) does not
            // hold the slot past the user timeout.
            let stuck = now >= slot.progress_at + timeout;
            if (!slot.rst_pending || stuck) && matches!(state, State::Closed | State::TimeWait) {
                self.free_slot(index);
                return true;
            }
            return false;
        }
        // A socket whose handshake was reset went back to LISTEN (smoltcp
        // does that in SYN-RECEIVED): it was never a connection. Free it
        // (`replenish` listens afresh), so no state of that peer stays.
        if state == State::Listen {
            self.stats.half_open_dropped += 1;
            self.free_slot(index);
            return true;
        }
        // A handshake reset and the next SYN in one poll: smoltcp puts the
        // socket back to LISTEN and it takes that SYN before this scan, so
        // the state is the same and the peer another. Until the connection
        // is reported it is whoever its socket talks to now (found by a
        // review: the first peer's address was reported for the second's
        // connection, so per-peer limits and address checks saw the wrong
        // peer). The first one's handshake counts as dropped.
        if !slot.open_reported && slot.endpoints.is_some() {
            let ends = endpoints(socket);
            if ends.is_some() && ends != slot.endpoints {
                self.stats.half_open_dropped += 1;
                if let (Some((local, remote)), true) = (slot.endpoints, self.marks.len() > 0) {
                    let flow = (*local.ip(), local.port(), *remote.ip(), remote.port());
                    self.marks.forget(flow, index);
                }
                slot.endpoints = ends;
                slot.progress_at = now;
            }
        }
        if state != slot.state {
            slot.state = state;
            slot.progress_at = now;
            if slot.endpoints.is_none() {
                slot.endpoints = endpoints(socket);
            }
        }
        if slot.finished {
            return false;
        }
        if !slot.open_reported && matches!(state, State::Established | State::CloseWait) {
            slot.open_reported = true;
            match slot.role {
                Role::Accepted(port) => {
                    self.stats.accepted += 1;
                    self.events
                        .push(conn, EventKind::Accepted(ListenerId(port)));
                }
                _ => {
                    self.stats.connected += 1;
                    self.events.push(conn, EventKind::Connected);
                }
            }
        }
        let received = slot.rx_pos + socket.recv_queue() as u64;
        if received > slot.rx_seen {
            slot.rx_seen = received;
            // Data from the peer is progress only while nothing of ours
            // waits for its acknowledgement: the user timeout (RFC 5482
            // §3, RFC 9293 §3.8.3) measures how long sent data stays
            // unacknowledged, and a peer that trickled data but never
            // acknowledged ours would otherwise hold the connection and
            // its buffers for ever. A close we started waits in
            // FIN-WAIT-2, our FIN acknowledged, while the peer still
            // sends: that data is progress.
            let unacknowledged = socket.send_queue() > 0
                || matches!(state, State::FinWait1 | State::Closing | State::LastAck);
            if !unacknowledged {
                slot.progress_at = now;
            }
        }
        if received > slot.rx_announced {
            slot.rx_announced = received;
            self.events.push(conn, EventKind::Readable);
        }
        let acked = slot.tx_pos - socket.send_queue() as u64;
        if acked != slot.acked {
            slot.acked = acked;
            slot.progress_at = now;
        }
        if slot.tx_blocked && socket.send_capacity() > socket.send_queue() && socket.may_send() {
            slot.tx_blocked = false;
            self.events.push(conn, EventKind::Writable);
        }
        if !slot.peer_fin
            && matches!(
                state,
                State::CloseWait | State::LastAck | State::Closing | State::TimeWait
            )
        {
            slot.peer_fin = true;
            self.events.push(conn, EventKind::PeerClosed);
        }
        // smoltcp sends whatever is queued at the next poll, so the next
        // segment starts at the current end of the queue.
        slot.segment_anchor = slot.tx_pos;
        let ended = match state {
            State::TimeWait => Some(EventKind::Closed),
            State::Closed if slot.peer_fin && slot.closed_by_us => Some(EventKind::Closed),
            // A close before the handshake completed (smoltcp drops SYN-SENT).
            State::Closed if slot.closed_by_us && !slot.open_reported => Some(EventKind::Closed),
            State::Closed => Some(EventKind::Reset),
            _ => None,
        };
        // A handshake that never completed was never reported: drop it
        // silently, whatever ended it.
        let unreported = matches!(slot.role, Role::Accepted(_)) && !slot.open_reported;
        if ended.is_some() && unreported {
            slot.finished = true;
            slot.releasing = true;
            slot.progress_at = now;
            self.stats.half_open_dropped += 1;
            return false;
        }
        if let Some(kind) = ended {
            slot.finished = true;
            match kind {
                EventKind::Closed => self.stats.closed += 1,
                _ => self.stats.reset += 1,
            }
            self.events.push(conn, kind);
            return false;
        }
        // With keep-alive, an established connection whose peer has sent
        // nothing for the user timeout, its probes unanswered, is over: a
        // peer that vanished while nothing of ours waited for it would
        // hold the connection for ever (RFC 9293 §3.8.4 lets keep-alive
        // end it; the user timeout below needs something to wait for).
        let silent = self.config.tcp.keep_alive.is_some()
            && matches!(state, State::Established | State::CloseWait)
            && socket
                .remote_last_heard()
                .is_some_and(|heard| now >= heard + timeout);
        if silent {
            self.sockets.get_mut::<tcp::Socket>(handle).abort();
            slot.finished = true;
            slot.rst_pending = true;
            self.stats.timed_out += 1;
            self.events.push(conn, EventKind::TimedOut);
            return false;
        }
        // The user timeout: waiting for a handshake, an acknowledgement,
        // or the end of a close we started, without progress.
        let was_waiting = slot.waiting;
        slot.waiting = match state {
            State::SynSent | State::SynReceived => true,
            State::FinWait1 | State::FinWait2 | State::Closing | State::LastAck => true,
            _ => socket.send_queue() > 0,
        };
        if !slot.waiting {
            // The timeout measures waiting only, not idleness before it.
            slot.progress_at = now;
        } else if !was_waiting {
            // Waiting from now on (between scans it was not).
            slot.progress_at = now;
        } else if now >= slot.progress_at + wait_limit(&self.config.tcp, slot) {
            self.sockets.get_mut::<tcp::Socket>(handle).abort();
            slot.finished = true;
            slot.rst_pending = true;
            if unreported {
                slot.releasing = true;
                slot.progress_at = now;
                self.stats.half_open_dropped += 1;
            } else {
                self.stats.timed_out += 1;
                self.events.push(conn, EventKind::TimedOut);
            }
        }
        false
    }
}

/// How long `slot` may wait for its peer without progress: the user
/// timeout, and for a passive open not yet reported (its handshake) at
/// most the handshake timeout.
fn wait_limit(tcp: &crate::TcpConfig, slot: &Slot) -> Duration {
    let unreported = matches!(slot.role, Role::Accepted(_)) && !slot.open_reported;
    if unreported {
        tcp.user_timeout.min(tcp.handshake_timeout)
    } else {
        tcp.user_timeout
    }
}

/// A socket's local and remote IPv4 endpoints, while it has them.
fn endpoints(socket: &tcp::Socket) -> Option<(SocketAddrV4, SocketAddrV4)> {
    let v4 = |e: IpEndpoint| match e.addr {
        IpAddress::Ipv4(addr) => Some(SocketAddrV4::new(addr, e.port)),
        // Another crate of the workspace may turn on smoltcp's IPv6.
        #[allow(unreachable_patterns)]
        _ => None,
    };
    Some((
        v4(socket.local_endpoint()?)?,
        v4(socket.remote_endpoint()?)?,
    ))
}

impl<D: Device> Transport for Stack<D> {
    fn listen(&mut self, port: u16) -> Result<ListenerId, ListenError> {
        if port == 0 {
            return Err(ListenError::Unaddressable);
        }
        // A port an active open holds is in use too, as bind(2) says
        // EADDRINUSE for it: a listener there would share the port with a
        // connection it did not accept (found by a review).
        if self.listeners.iter().any(|l| l.port == port) || self.port_used(port) {
            return Err(ListenError::PortInUse);
        }
        if self.listeners.len() >= LISTENERS_MAX {
            return Err(ListenError::Io);
        }
        self.listeners.push(Listener {
            port,
            listening: Vec::with_capacity(self.config.backlog),
        });
        // Time only matters for connections; listening sockets wait forever.
        self.replenish(Instant::ZERO);
        Ok(ListenerId(port))
    }

    fn unlisten(&mut self, listener: ListenerId) {
        if let Some(at) = self.listeners.iter().position(|l| l.port == listener.0) {
            let l = self.listeners.swap_remove(at);
            for index in l.listening {
                self.free_slot(index);
            }
            // Its handshakes not yet reported are reset, as Linux resets
            // the connections a closed listener had not handed out (found
            // by a review: one completed afterwards and was reported as
            // accepted by the listener that was gone).
            for i in 0..self.live.len() {
                let index = self.live[i];
                let Some(slot) = self.slots[index as usize].as_mut() else {
                    continue;
                };
                if slot.role == Role::Accepted(listener.0) && !slot.open_reported && !slot.finished
                {
                    slot.finished = true;
                    slot.releasing = true;
                    slot.rst_pending = true;
                    let handle = slot.handle;
                    self.sockets.get_mut::<tcp::Socket>(handle).abort();
                    self.stats.half_open_dropped += 1;
                    self.mark(index);
                }
            }
        }
    }

    fn connect(&mut self, remote: SocketAddrV4, now: Instant) -> Result<ConnId, ConnectError> {
        if remote.ip().is_unspecified() || remote.port() == 0 {
            return Err(ConnectError::Unaddressable);
        }
        if self.connections >= self.config.max_connections {
            return Err(ConnectError::TooManyConnections);
        }
        let (first, last) = (
            *self.config.ephemeral_ports.start(),
            *self.config.ephemeral_ports.end(),
        );
        let span = u32::from(last - first) + 1;
        let local_addr = self.config.addr;
        let mut port = None;
        // The walk of RFC 6056 §3.3.1 (Algorithm 1) until
        // `check_suitable_port()`, which "checks whether the resulting port
        // number is acceptable as an ephemeral port", holds. Ours holds for
        // a port that is free and, with steering, whose reply traffic
        // (remote to us) hashes to our queue: about one port in `queues`, so
        // the walk takes about `queues` candidates, bounded by the range.
        // Unlike Algorithm 1 the start is drawn once per stack (`seed`), not
        // per connection, and each walk goes on from where the last ended:
        // consecutive connections take consecutive ports, so a four-tuple
        // comes back as late as the range allows (a peer may still hold the
        // last one in TIME-WAIT), at the price of ports an observer can
        // predict; the initial sequence numbers (seeded) stay unpredictable.
        for _ in 0..span {
            let candidate = self.next_port;
            self.next_port = if candidate >= last {
                first
            } else {
                candidate + 1
            };
            let steered_here = self.config.steering.as_ref().is_none_or(|steering| {
                steering.is_mine(SocketAddrV4::new(local_addr, candidate), remote)
            });
            if !self.port_used(candidate)
                && !self.listeners.iter().any(|l| l.port == candidate)
                && steered_here
            {
                port = Some(candidate);
                break;
            }
        }
        let port = port.ok_or(ConnectError::NoPort)?;
        let index = self
            .new_slot(Role::Active, now)
            .ok_or(ConnectError::TooManyConnections)?;
        let slot = self.slots[index as usize]
            .as_mut()
            .ok_or(ConnectError::Io)?;
        let conn = ConnId {
            index,
            generation: slot.generation,
        };
        let handle = slot.handle;
        let endpoint = IpEndpoint::new(IpAddress::Ipv4(*remote.ip()), remote.port());
        let result = self.sockets.get_mut::<tcp::Socket>(handle).connect(
            self.iface.context(),
            endpoint,
            port,
        );
        self.connections += 1;
        self.live.push(index);
        if let Some(slot) = self.slots[index as usize].as_mut() {
            slot.local_port = port;
        }
        self.port_bit(port, true);
        if result.is_err() {
            self.free_slot(index);
            return Err(ConnectError::Unaddressable);
        }
        Ok(conn)
    }

    fn send_with<R>(
        &mut self,
        conn: ConnId,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> (usize, R),
    ) -> Result<R, SendError> {
        let handle = self.slot(conn)?.handle;
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        let (written, offered, result) = socket
            .send(|space| {
                let offered = space.len().min(max);
                let (written, result) = fill(&mut space[..offered]);
                let written = written.min(offered);
                (written, (written, offered, result))
            })
            .map_err(|_| SendError::InvalidState)?;
        let slot = self.slot_mut(conn)?;
        slot.tx_pos += written as u64;
        // Blocked: the caller wanted more than the space and filled all of it.
        if offered < max && written == offered {
            slot.tx_blocked = true;
        }
        // smoltcp cuts a segment where its ring wraps: the next starts there.
        if let Some(end) = slot.ring_end {
            if slot.tx_pos >= end {
                slot.segment_anchor = end;
                slot.ring_end = None;
            }
        }
        Ok(result)
    }

    fn send_space(&self, conn: ConnId) -> Result<usize, SendError> {
        let socket = self.sockets.get::<tcp::Socket>(self.slot(conn)?.handle);
        if !socket.may_send() {
            return Err(SendError::InvalidState);
        }
        Ok(socket.send_capacity() - socket.send_queue())
    }

    fn segment_room(&mut self, conn: ConnId) -> Result<Option<usize>, SendError> {
        let handle = self.slot(conn)?.handle;
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        // Ask for the contiguous space without writing: smoltcp sends from
        // one contiguous slice, so a segment ends where its ring wraps (an
        // empty ring also starts over at its start here).
        let contiguous = socket
            .send(|space| (0, space.len()))
            .map_err(|_| SendError::InvalidState)?;
        if self.config.tcp.whole_records {
            // smoltcp cuts segments only where records may end: its cells.
            let room = socket.record_room();
            return Ok(Some(if contiguous > 0 {
                room.min(contiguous)
            } else {
                room
            }));
        }
        let free = socket.send_capacity() - socket.send_queue();
        let emss = self.emss as u64;
        let slot = self.slot_mut(conn)?;
        // Recomputed each time: smoltcp moves an empty ring back to its start.
        slot.ring_end = (contiguous < free).then_some(slot.tx_pos + contiguous as u64);
        let filled = (slot.tx_pos - slot.segment_anchor) % emss;
        let mut room = (emss - filled) as usize;
        if let Some(end) = slot.ring_end {
            room = room.min((end - slot.tx_pos) as usize);
        }
        Ok(Some(room))
    }

    fn endpoints(&self, conn: ConnId) -> Result<(SocketAddrV4, SocketAddrV4), SendError> {
        let slot = self.slot(conn)?;
        match slot.endpoints {
            Some(endpoints) => Ok(endpoints),
            None => endpoints(self.sockets.get::<tcp::Socket>(slot.handle))
                .ok_or(SendError::InvalidState),
        }
    }

    fn send_position(&self, conn: ConnId) -> Result<u64, SendError> {
        Ok(self.slot(conn)?.tx_pos)
    }

    fn recv_with<R>(
        &mut self,
        conn: ConnId,
        take: impl FnOnce(&[u8], u64) -> (usize, R),
    ) -> Result<R, RecvError> {
        let slot = self.slot(conn).map_err(|_| RecvError::InvalidConnection)?;
        let (handle, position) = (slot.handle, slot.rx_pos);
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        let (taken, result) = socket
            .recv(|data| {
                let (taken, result) = take(data, position);
                let taken = taken.min(data.len());
                (taken, (taken, result))
            })
            .map_err(|e| match e {
                tcp::RecvError::Finished => RecvError::Finished,
                _ => RecvError::InvalidState,
            })?;
        let slot = self
            .slot_mut(conn)
            .map_err(|_| RecvError::InvalidConnection)?;
        slot.rx_pos += taken as u64;
        Ok(result)
    }

    fn recv_queue(&self, conn: ConnId) -> Result<usize, RecvError> {
        let slot = self.slot(conn).map_err(|_| RecvError::InvalidConnection)?;
        Ok(self.sockets.get::<tcp::Socket>(slot.handle).recv_queue())
    }

    fn close(&mut self, conn: ConnId) -> Result<(), SendError> {
        let slot = self.slot_mut(conn)?;
        slot.closed_by_us = true;
        let handle = slot.handle;
        self.sockets.get_mut::<tcp::Socket>(handle).close();
        Ok(())
    }

    fn abort(&mut self, conn: ConnId) -> Result<(), SendError> {
        let slot = self.slot_mut(conn)?;
        slot.finished = true;
        slot.rst_pending = true;
        let handle = slot.handle;
        self.sockets.get_mut::<tcp::Socket>(handle).abort();
        self.events.forget(conn.index);
        Ok(())
    }

    fn set_urgent(&mut self, conn: ConnId, urgent: bool) -> Result<(), SendError> {
        let handle = self.slot(conn)?.handle;
        self.sockets.set_urgent(handle, urgent);
        Ok(())
    }

    fn set_dscp(&mut self, conn: ConnId, dscp: u8) -> Result<(), SendError> {
        assert!(dscp < 64, "a DSCP is six bits: {dscp}");
        // From the socket's while the slot has not kept them yet (an
        // active open marked before its SYN left), and kept now: the mark
        // goes with the slot (`free_slot`) even if the handshake fails,
        // when the socket forgets them.
        let (local, remote) = self.endpoints(conn)?;
        self.slot_mut(conn)?
            .endpoints
            .get_or_insert((local, remote));
        let flow = (*local.ip(), local.port(), *remote.ip(), remote.port());
        self.marks.set(flow, dscp, conn.index);
        Ok(())
    }

    fn dscp(&self, conn: ConnId) -> u8 {
        let Ok((local, remote)) = self.endpoints(conn) else {
            return 0;
        };
        let flow = (*local.ip(), local.port(), *remote.ip(), remote.port());
        self.marks.get(flow, conn.index)
    }

    fn reflect_dscp(&mut self, on: bool) {
        self.syns.learning = on;
    }

    fn peer_dscp(&self, conn: ConnId) -> Option<u8> {
        self.slot(conn).ok()?.peer_dscp
    }

    fn release(&mut self, conn: ConnId) {
        let now = self.now;
        let Ok(slot) = self.slot_mut(conn) else {
            return;
        };
        slot.releasing = true;
        slot.finished = true;
        slot.progress_at = now;
        let (handle, rst_pending) = (slot.handle, slot.rst_pending);
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        match socket.state() {
            // Nothing left to tell the peer: free at once.
            State::Closed | State::TimeWait if !rst_pending => self.free_slot(conn.index),
            State::Closed | State::TimeWait => {}
            // The RST goes out at the next poll; the slot is freed after it.
            _ => {
                socket.abort();
                if let Ok(slot) = self.slot_mut_any(conn) {
                    slot.rst_pending = true;
                }
            }
        }
        self.events.forget(conn.index);
    }

    fn poll(&mut self, now: Instant) -> bool {
        self.poll_direct(now, &mut |_, _, _| 0)
    }

    fn poll_direct(&mut self, now: Instant, direct: &mut DirectReceive<'_>) -> bool {
        let mut progress = false;
        self.now = now;
        // Slots freed since the last poll may let a full listener listen again.
        if self.freed && !self.listeners.is_empty() {
            self.replenish(now);
        }
        for _ in 0..RX_BURST_PACKETS_MAX {
            let (slots, by_handle, stats) = (&mut self.slots, &self.by_handle, &mut self.stats);
            // smoltcp offers a socket's in-order octets when its buffer is
            // empty; the receiver sees them as `recv_with` would show them
            // (a connection of its own, the stream position), and what it
            // takes counts as read and announced.
            let mut offer = |handle: SocketHandle, octets: &[u8]| -> usize {
                let index = by_handle.get(handle.index()).copied().unwrap_or(u32::MAX);
                let Some(Some(slot)) = slots.get_mut(index as usize) else {
                    return 0;
                };
                if slot.releasing || matches!(slot.role, Role::Listening(_)) {
                    return 0;
                }
                let conn = ConnId {
                    index,
                    generation: slot.generation,
                };
                let taken = direct(conn, octets, slot.rx_pos).min(octets.len());
                if taken > 0 {
                    slot.rx_pos += taken as u64;
                    slot.rx_announced = slot.rx_announced.max(slot.rx_pos);
                    // Progress or not, the scan decides (it sees what
                    // awaits acknowledgement): the socket is among those
                    // ingress touched.
                    stats.rx_direct_octets += taken as u64;
                }
                taken
            };
            let mut device = Marking {
                inner: &mut self.device,
                marks: &self.marks,
                syns: &mut self.syns,
                medium: self.medium,
                mend: self.mend_ipv4,
            };
            match self.iface.poll_ingress_single_with(
                now,
                &mut device,
                &mut self.sockets,
                &mut offer,
            ) {
                PollIngressSingleResult::None => break,
                PollIngressSingleResult::PacketProcessed => {}
                PollIngressSingleResult::SocketStateChanged => {
                    if !self.listeners.is_empty() {
                        self.replenish(now);
                    }
                }
            }
            self.stats.rx_packets += 1;
            progress = true;
        }
        self.iface.poll_maintenance(now);
        // The user timeout's aborts need an egress to send their RSTs.
        self.scan(now, false);
        for _ in 0..TX_BURST_ROUNDS_MAX {
            let mut device = Marking {
                inner: &mut self.device,
                marks: &self.marks,
                syns: &mut self.syns,
                medium: self.medium,
                mend: self.mend_ipv4,
            };
            match self.iface.poll_egress(now, &mut device, &mut self.sockets) {
                PollResult::None => break,
                PollResult::SocketStateChanged => progress = true,
            }
        }
        self.scan(now, true);
        progress
    }

    fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        let mut at = self.iface.poll_at(now, &self.sockets);
        for &index in &self.live {
            if let Some(slot) = &self.slots[index as usize] {
                if slot.waiting && !slot.finished && !slot.releasing {
                    // A waiting connection is looked at by the full scans
                    // (`scan`): its deadline is seen by the first at or
                    // after it (found by a review: a deadline passed
                    // before that scan was named again and again, and a
                    // caller sleeping until `poll_at` spun).
                    let deadline = (slot.progress_at + wait_limit(&self.config.tcp, slot))
                        .max(self.full_scan_at);
                    at = Some(at.map_or(deadline, |at| at.min(deadline)));
                }
            }
        }
        at
    }

    fn next_event(&mut self) -> Option<Event> {
        self.events.pop()
    }

    fn connections(&self) -> usize {
        self.connections
    }
}

/// UDP sockets on the stack's interface. smoltcp finds a datagram's socket
/// by walking the sockets (there is no flow index for UDP, unlike TCP's):
/// a cost per datagram that grows with the TCP connections beside it.
impl<D: Device> Datagrams for Stack<D> {
    fn udp_bind(&mut self, port: u16) -> Result<UdpId, ListenError> {
        let port = if port == 0 {
            self.ephemeral_udp_port()?
        } else {
            port
        };
        if self
            .udp
            .iter()
            .any(|&h| self.sockets.get::<udp::Socket>(h).endpoint().port == port)
        {
            return Err(ListenError::PortInUse);
        }
        let buffer = |octets: usize| {
            udp::PacketBuffer::new(
                vec![udp::PacketMetadata::EMPTY; self.config.udp_datagrams],
                vec![0u8; octets],
            )
        };
        let mut socket = udp::Socket::new(
            buffer(self.config.udp_buffer),
            buffer(self.config.udp_buffer),
        );
        socket.bind(port).map_err(|_| ListenError::Unaddressable)?;
        let handle = self.sockets.add(socket);
        self.udp.push(handle);
        Ok(UdpId(self.udp.len() as u32 - 1))
    }

    fn udp_local(&self, socket: UdpId) -> Result<SocketAddrV4, UdpError> {
        let handle = *self
            .udp
            .get(socket.0 as usize)
            .ok_or(UdpError::InvalidSocket)?;
        let port = self.sockets.get::<udp::Socket>(handle).endpoint().port;
        Ok(SocketAddrV4::new(self.config.addr, port))
    }

    fn udp_send_with(
        &mut self,
        socket: UdpId,
        remote: SocketAddrV4,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), UdpError> {
        let handle = *self
            .udp
            .get(socket.0 as usize)
            .ok_or(UdpError::InvalidSocket)?;
        if remote.port() == 0 || remote.ip().is_unspecified() {
            return Err(UdpError::Unaddressable);
        }
        // IPv4 (20) and UDP (8) headers on the interface's IP MTU.
        if len > self.emss + IPV4_TCP_HEADERS - 28 || len > self.config.udp_buffer {
            return Err(UdpError::TooLong);
        }
        let endpoint = IpEndpoint::new(IpAddress::Ipv4(*remote.ip()), remote.port());
        let sock = self.sockets.get_mut::<udp::Socket>(handle);
        match sock.send(len, endpoint) {
            Ok(buffer) => {
                fill(buffer);
                Ok(())
            }
            Err(udp::SendError::BufferFull) => Err(UdpError::Full),
            Err(udp::SendError::Unaddressable) => Err(UdpError::Unaddressable),
        }
    }

    fn udp_recv_with<R>(
        &mut self,
        socket: UdpId,
        take: impl FnOnce(&[u8], SocketAddrV4) -> R,
    ) -> Option<R> {
        let handle = *self.udp.get(socket.0 as usize)?;
        let sock = self.sockets.get_mut::<udp::Socket>(handle);
        if !sock.can_recv() {
            return None;
        }
        let (payload, meta) = sock.recv().ok()?;
        // The interface has one IPv4 address: nothing else reaches it
        // (another build in the same graph may turn smoltcp's IPv6 on).
        #[allow(irrefutable_let_patterns)]
        let IpAddress::Ipv4(ip) = meta.endpoint.addr
        else {
            return None;
        };
        Some(take(payload, SocketAddrV4::new(ip, meta.endpoint.port)))
    }
}

impl<D: Device> Stack<D> {
    /// An ephemeral port no UDP socket of this stack has.
    fn ephemeral_udp_port(&mut self) -> Result<u16, ListenError> {
        let (first, last) = (
            *self.config.ephemeral_ports.start(),
            *self.config.ephemeral_ports.end(),
        );
        'ports: for port in first..=last {
            for &h in &self.udp {
                if self.sockets.get::<udp::Socket>(h).endpoint().port == port {
                    continue 'ports;
                }
            }
            return Ok(port);
        }
        Err(ListenError::Io)
    }
}
