//! [`DpdkDevice`]: smoltcp's [`phy::Device`] over one DPDK queue pair, so
//! tcp-lite's `Stack` runs on a DPDK port unchanged.
//!
//! Zero-copy both ways: a received frame is lent to smoltcp in place, in its
//! mbuf ([`RxToken`] borrows the mbuf's data), and smoltcp writes each frame
//! it sends straight into a fresh mbuf's data room ([`TxToken`]). Frames go
//! in and out in bursts of up to [`BURST_MAX`]: receives are taken from the
//! port 32 at a time and handed to smoltcp one by one; sends are staged and
//! go out when 32 are staged or at [`flush`](DpdkDevice::flush), which the
//! core calls once per turn.
//!
//! Before smoltcp sees a frame it is checked, and dropped and counted if it
//! is a runt, oversized, not IPv4 or ARP, addressed to another MAC, a
//! malformed IPv4 packet, or has a bad IPv4 or TCP checksum: a hostile
//! wire costs counters, never a panic.
//!
//! Back-pressure, never loss: smoltcp gets a transmit token only while a
//! free mbuf and a staging slot exist. When the port's transmit ring is
//! full (the staged frames cannot go) or the pool is empty, the device
//! refuses tokens, smoltcp keeps its data in the socket and tries again at
//! the next poll. Receiving goes on: a reply smoltcp makes to a received
//! frame (an ACK, a reset) while there is no room is dropped and counted
//! (`tx_reply_dropped`; TCP recovers a lost ACK), as a receive that waited
//! for room to send could wait for a peer that waits for us.
//!
//! Checksums ([`TxChecksum`], [`RxChecksum`]): smoltcp neither computes nor
//! verifies IPv4 and TCP checksums here; the device does, per the port:
//! offloaded to the port where it can, in software where it cannot, or not
//! at all on a trusted wire (memif between two dpwarp processes).

use std::sync::Arc;

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use crate::checksum::{self, RxChecksum, TxChecksum};
use crate::dpdk::{ChecksumVerdict, Mbuf, Pool, Queue, BURST_MAX, RX_IP_CHECKSUM, RX_L4_CHECKSUM};
use crate::steer::{Kind, Steer, SteerPoint};

/// The most received frames one poll of the stack may drop or hand to
/// another core before [`DpdkDevice`]'s receive says there is nothing more
/// for now: a flow of frames that are not ours (another host's traffic on
/// a promiscuous port, runts, bad checksums) must not keep the core's turn
/// from its timers, its control link and its transmits. tcp-lite takes at
/// most [`tcp_lite::RX_BURST_PACKETS_MAX`] frames a poll; these are on top.
/// What is left waits in the ring for the next poll.
pub const RX_SKIPPED_PER_POLL_MAX: usize = 256;

/// Counters of a device (one queue pair of a port).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    /// Frames handed to smoltcp.
    pub rx_packets: u64,
    /// Their octets.
    pub rx_octets: u64,
    /// Frames the port took to send (not those still staged, nor those
    /// its prepare step refused: `tx_rejected`).
    pub tx_packets: u64,
    /// Their octets.
    pub tx_octets: u64,
    /// Receive bursts that brought frames.
    pub rx_bursts: u64,
    /// Transmit bursts.
    pub tx_bursts: u64,
    /// Dropped: shorter than an Ethernet header.
    pub rx_runt: u64,
    /// Dropped: longer than the MTU allows.
    pub rx_oversized: u64,
    /// Dropped: neither IPv4 nor ARP (IPv6, LLDP, ...).
    pub rx_non_ip: u64,
    /// Dropped: unicast to another MAC.
    pub rx_foreign_mac: u64,
    /// Dropped: an IPv4 header that does not parse.
    pub rx_malformed: u64,
    /// Dropped: an IPv4 fragment (More Fragments or an offset set). The
    /// stack reassembles nothing, and dpwarp's own TCP segments and UDP
    /// datagrams are never fragmented (Don't Fragment, sized to the MTU).
    pub rx_fragment: u64,
    /// Dropped: a bad IPv4 header or TCP checksum.
    pub rx_bad_checksum: u64,
    /// Chained frames copied into their first mbuf before smoltcp read them.
    pub rx_linearized: u64,
    /// Times smoltcp was refused a transmit token (ring full or pool
    /// empty). A reply to a received frame made without room is
    /// `tx_reply_dropped`, not this.
    pub tx_backpressure: u64,
    /// Frames the port's transmit prepare step refused (dropped).
    pub tx_rejected: u64,
    /// Replies smoltcp made to a received frame (ACKs, resets) while no
    /// mbuf or transmit slot was free, dropped (TCP recovers a lost ACK):
    /// receiving never waits for room to send, or two ports whose
    /// transmit rings are both full would each wait for the other.
    pub tx_reply_dropped: u64,
    /// Frames whose checksums were to be offloaded but that the mbuf's
    /// offload request refused (headers longer than the frame, or not an
    /// IPv4 header): checksummed here instead and sent.
    pub tx_checksum_software: u64,
    /// Fewest free mbufs in the pool seen by [`DpdkDevice::sample_pool`].
    pub pool_low_water: u32,
    /// Received frames another core owns, handed to it ([`crate::steer`]).
    pub rx_steered_out: u64,
    /// Frames other cores handed to this one.
    pub rx_steered_in: u64,
    /// Copies of received ARP frames handed to the other cores.
    pub rx_arp_shared: u64,
    /// Frames for another core dropped: its handoff ring was full.
    pub rx_steer_dropped: u64,
    /// Copies of a received ARP frame another core did not get: no mbuf
    /// was free for the copy, or its handoff ring was full (the frame
    /// itself went on to this core's stack).
    pub rx_arp_share_failed: u64,
}

impl DeviceCounters {
    /// What was counted since `earlier` (the pool's low water is the
    /// later one: it is a level, not a count).
    pub fn since(&self, earlier: &DeviceCounters) -> DeviceCounters {
        DeviceCounters {
            rx_packets: self.rx_packets - earlier.rx_packets,
            rx_octets: self.rx_octets - earlier.rx_octets,
            tx_packets: self.tx_packets - earlier.tx_packets,
            tx_octets: self.tx_octets - earlier.tx_octets,
            rx_bursts: self.rx_bursts - earlier.rx_bursts,
            tx_bursts: self.tx_bursts - earlier.tx_bursts,
            rx_runt: self.rx_runt - earlier.rx_runt,
            rx_oversized: self.rx_oversized - earlier.rx_oversized,
            rx_non_ip: self.rx_non_ip - earlier.rx_non_ip,
            rx_foreign_mac: self.rx_foreign_mac - earlier.rx_foreign_mac,
            rx_malformed: self.rx_malformed - earlier.rx_malformed,
            rx_fragment: self.rx_fragment - earlier.rx_fragment,
            rx_bad_checksum: self.rx_bad_checksum - earlier.rx_bad_checksum,
            rx_linearized: self.rx_linearized - earlier.rx_linearized,
            tx_backpressure: self.tx_backpressure - earlier.tx_backpressure,
            tx_rejected: self.tx_rejected - earlier.tx_rejected,
            tx_reply_dropped: self.tx_reply_dropped - earlier.tx_reply_dropped,
            tx_checksum_software: self.tx_checksum_software - earlier.tx_checksum_software,
            pool_low_water: self.pool_low_water,
            rx_steered_out: self.rx_steered_out - earlier.rx_steered_out,
            rx_steered_in: self.rx_steered_in - earlier.rx_steered_in,
            rx_arp_shared: self.rx_arp_shared - earlier.rx_arp_shared,
            rx_steer_dropped: self.rx_steer_dropped - earlier.rx_steer_dropped,
            rx_arp_share_failed: self.rx_arp_share_failed - earlier.rx_arp_share_failed,
        }
    }

    /// Frames dropped on receive, over every reason (those for another
    /// core whose handoff ring was full included).
    pub fn rx_dropped(&self) -> u64 {
        self.rx_runt
            + self.rx_oversized
            + self.rx_non_ip
            + self.rx_foreign_mac
            + self.rx_malformed
            + self.rx_fragment
            + self.rx_bad_checksum
            + self.rx_steer_dropped
    }
}

/// How a [`DpdkDevice`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Our Ethernet address: frames to other unicast addresses are dropped.
    pub mac: [u8; 6],
    /// IP MTU (frames are 14 octets longer).
    pub mtu: usize,
    /// How our frames' checksums are completed.
    pub tx_checksum: TxChecksum,
    /// How received frames' checksums are checked.
    pub rx_checksum: RxChecksum,
}

/// The transmit side: the queue, free mbufs and the staged burst. Fields
/// drop in order: the mbufs go back before the queue and the pool they
/// belong to can go.
struct Io {
    /// Free mbufs for the next frames, taken from the pool in bulk.
    spare: [Option<Mbuf>; BURST_MAX],
    spare_len: usize,
    /// Frames made and not yet given to the port, in order.
    staged: [Option<Mbuf>; BURST_MAX],
    staged_len: usize,
    frame_max: usize,
    /// Where a reply goes that has no room to be sent (dropped).
    scratch: Box<[u8]>,
    tx_checksum: TxChecksum,
    counters: DeviceCounters,
    queue: Queue,
    pool: Arc<Pool>,
}

/// smoltcp's device over one DPDK queue pair. (Fields drop in order: the
/// received mbufs before the queue and pool in `io`.)
pub struct DpdkDevice {
    /// The last receive burst, lent out one frame at a time.
    rx: [Option<Mbuf>; BURST_MAX],
    rx_next: usize,
    rx_len: usize,
    /// Frames dropped or handed on since receive last said there was
    /// nothing more ([`RX_SKIPPED_PER_POLL_MAX`]).
    rx_skipped: usize,
    mac: [u8; 6],
    rx_checksum: RxChecksum,
    /// The other cores of the port, when it has several.
    steer: Option<SteerPoint>,
    io: Io,
}

impl DpdkDevice {
    /// A device on `queue` (which receives into its own pool, also used for
    /// sending) with `config`.
    pub fn new(queue: Queue, config: DeviceConfig) -> DpdkDevice {
        let pool = queue.pool().clone();
        let frame_max = (config.mtu + 14).min(pool.data_room());
        let counters = DeviceCounters {
            pool_low_water: pool.available(),
            ..DeviceCounters::default()
        };
        DpdkDevice {
            io: Io {
                queue,
                pool,
                spare: Default::default(),
                spare_len: 0,
                staged: Default::default(),
                staged_len: 0,
                frame_max,
                scratch: vec![0; frame_max].into_boxed_slice(),
                tx_checksum: config.tx_checksum,
                counters,
            },
            rx: Default::default(),
            rx_next: 0,
            rx_len: 0,
            rx_skipped: 0,
            mac: config.mac,
            rx_checksum: config.rx_checksum,
            steer: None,
        }
    }

    /// This device as core `me` of the cores `steer` joins: a received
    /// TCP frame another core owns goes to it, ARP to every core, and what
    /// other cores hand over is received here ([`crate::steer`]).
    pub fn steered(mut self, steer: Arc<Steer>, me: u16) -> DpdkDevice {
        self.steer = Some(SteerPoint { steer, me });
        self
    }

    /// The counters.
    pub fn counters(&self) -> DeviceCounters {
        let mut c = self.io.counters;
        c.tx_rejected = self.io.queue.tx_rejected;
        c
    }

    /// The queue's port and index.
    pub fn queue_id(&self) -> (u16, u16) {
        self.io.queue.id()
    }

    /// Whether the port's link is up.
    pub fn link_up(&self) -> bool {
        self.io.queue.link_up()
    }

    /// Sends what is staged. Returns false when frames stay staged (the
    /// port's ring is full): they go at a later flush, in order.
    pub fn flush(&mut self) -> bool {
        self.io.flush()
    }

    /// Sends `frame` as it is, with no checksum completed: for tests and
    /// tools that must put what a broken or hostile peer would on the
    /// wire. False when no mbuf or staging slot is free, or it does not
    /// fit an mbuf.
    pub fn send_frame(&mut self, frame: &[u8]) -> bool {
        let io = &mut self.io;
        if frame.len() > io.pool.data_room() || !io.ready() {
            return false;
        }
        io.spare_len -= 1;
        let mut mbuf = io.spare[io.spare_len]
            .take()
            .expect("ready left a spare mbuf");
        match mbuf.set_len(frame.len()) {
            Some(room) => room.copy_from_slice(frame),
            None => return false,
        }
        io.staged[io.staged_len] = Some(mbuf);
        io.staged_len += 1;
        true
    }

    /// Frames staged and not yet taken by the port.
    pub fn staged(&self) -> usize {
        self.io.staged_len
    }

    /// Reads the pool's free count into the low-water mark. It sums every
    /// lcore's cache, so the core calls it now and then, not per packet.
    pub fn sample_pool(&mut self) -> u32 {
        let free = self.io.pool.available();
        let c = &mut self.io.counters;
        c.pool_low_water = c.pool_low_water.min(free);
        free
    }

    /// Takes the next acceptable frame, refilling from the port; frames
    /// that fail a check are dropped and counted. `None` when the port has
    /// nothing more, or when [`RX_SKIPPED_PER_POLL_MAX`] frames were
    /// dropped or handed on since the last `None` (a poll ends at a
    /// `None`): the rest wait in the ring.
    fn next_frame(&mut self) -> Option<Mbuf> {
        // What other cores handed over (checked where it arrived) first.
        if let Some(mbuf) = self.steer.as_ref().and_then(SteerPoint::take) {
            self.io.counters.rx_steered_in += 1;
            return Some(mbuf);
        }
        loop {
            if self.rx_skipped >= RX_SKIPPED_PER_POLL_MAX {
                self.rx_skipped = 0;
                return None;
            }
            if self.rx_next == self.rx_len {
                self.rx_next = 0;
                self.rx_len = self.io.queue.rx_burst(&mut self.rx);
                if self.rx_len == 0 {
                    self.rx_skipped = 0;
                    return None;
                }
                self.io.counters.rx_bursts += 1;
            }
            let mut mbuf = self.rx[self.rx_next]
                .take()
                .expect("received slots hold mbufs");
            self.rx_next += 1;
            if !self.accept(&mut mbuf) {
                self.rx_skipped += 1;
                continue;
            }
            let Some(steer) = &self.steer else {
                return Some(mbuf);
            };
            let c = &mut self.io.counters;
            match steer.classify(mbuf.data()) {
                Kind::Mine | Kind::Here => return Some(mbuf),
                Kind::Theirs(owner) => {
                    if steer.hand(owner, mbuf) {
                        c.rx_steered_out += 1;
                    } else {
                        c.rx_steer_dropped += 1;
                    }
                    self.rx_skipped += 1;
                }
                Kind::Everyone => {
                    for other in steer.others() {
                        let copy = self.io.pool.alloc().and_then(|mut m| {
                            m.set_len(mbuf.data().len())?.copy_from_slice(mbuf.data());
                            Some(m)
                        });
                        if copy.is_some_and(|m| steer.hand(other, m)) {
                            c.rx_arp_shared += 1;
                        } else {
                            c.rx_arp_share_failed += 1;
                        }
                    }
                    return Some(mbuf);
                }
            }
        }
    }

    /// Whether smoltcp should see this frame; counts why not.
    fn accept(&mut self, mbuf: &mut Mbuf) -> bool {
        let c = &mut self.io.counters;
        // A tagged frame is dropped below (not IPv4), so no allowance for
        // a VLAN tag: past the MTU is oversized (found by a review: 4
        // octets more let untagged frames past it).
        if mbuf.pkt_len() > self.io.frame_max {
            c.rx_oversized += 1;
            return false;
        }
        if mbuf.segments() > 1 {
            if !mbuf.linearize() {
                c.rx_oversized += 1;
                return false;
            }
            c.rx_linearized += 1;
        }
        let frame = mbuf.data();
        if frame.len() < 14 {
            c.rx_runt += 1;
            return false;
        }
        let dst = &frame[..6];
        let group = dst[0] & 1 == 1; // broadcast and multicast
        if !group && dst != self.mac {
            c.rx_foreign_mac += 1;
            return false;
        }
        match [frame[12], frame[13]] {
            [0x08, 0x06] => return true, // ARP: smoltcp checks it
            [0x08, 0x00] => {}
            _ => {
                c.rx_non_ip += 1;
                return false;
            }
        }
        let Some(ip) = checksum::ipv4(frame) else {
            c.rx_malformed += 1;
            return false;
        };
        // Flags and fragment offset (RFC 791): `ipv4` checked a header of
        // at least 20 octets.
        if u16::from_be_bytes([frame[20], frame[21]]) & 0x3FFF != 0 {
            c.rx_fragment += 1;
            return false;
        }
        let good = match self.rx_checksum {
            RxChecksum::Trusted => true,
            RxChecksum::Software => {
                checksum::ipv4_header_ok(frame, &ip) && (!ip.tcp || checksum::tcp_ok(frame, &ip))
            }
            RxChecksum::Offload => {
                let flags = mbuf.ol_flags();
                // NONE (both bits: the mask) says the data are intact though
                // the checksum field is not valid (DPDK's mbuf flags), as
                // good as GOOD; UNKNOWN (neither bit) is ours to check.
                let verdict = |v: ChecksumVerdict| match flags & v.mask {
                    x if x == v.good || x == v.mask => Some(true),
                    x if x == v.bad => Some(false),
                    _ => None,
                };
                let header =
                    verdict(RX_IP_CHECKSUM).unwrap_or_else(|| checksum::ipv4_header_ok(frame, &ip));
                let tcp = !ip.tcp
                    || verdict(RX_L4_CHECKSUM).unwrap_or_else(|| checksum::tcp_ok(frame, &ip));
                header && tcp
            }
        };
        if !good {
            c.rx_bad_checksum += 1;
            return false;
        }
        true
    }
}

impl Io {
    /// A free mbuf and a staging slot for the next frame, or false.
    fn ready(&mut self) -> bool {
        if self.staged_len == BURST_MAX {
            // A flush that sent some of the frames frees their slots.
            self.flush();
            if self.staged_len == BURST_MAX {
                return false;
            }
        }
        if self.spare_len == 0 {
            if self.pool.alloc_bulk(&mut self.spare) {
                self.spare_len = BURST_MAX;
            } else if let Some(m) = self.pool.alloc() {
                self.spare[0] = Some(m);
                self.spare_len = 1;
            } else {
                return false;
            }
        }
        true
    }

    fn flush(&mut self) -> bool {
        if self.staged_len == 0 {
            return true;
        }
        let mut lens = [0u16; BURST_MAX];
        for (len, frame) in lens.iter_mut().zip(&self.staged[..self.staged_len]) {
            *len = frame.as_ref().map_or(0, |m| m.data().len() as u16);
        }
        let sent = self.queue.tx_burst(&mut self.staged[..self.staged_len]);
        self.counters.tx_bursts += 1;
        self.counters.tx_packets += sent as u64;
        self.counters.tx_octets += lens[..sent].iter().map(|&l| u64::from(l)).sum::<u64>();
        // A frame the driver refused left its slot empty too.
        let left = self.staged[..self.staged_len]
            .iter()
            .filter(|s| s.is_some())
            .count();
        debug_assert!(self.staged_len - left >= sent);
        self.staged_len = left;
        left == 0
    }
}

impl phy::Device for DpdkDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(RxToken, TxToken<'_>)> {
        // The reply smoltcp may send goes out if there is room, and is
        // dropped (counted) if not: a receive that waited for room to send
        // could wait for a peer that waits for us.
        let mbuf = self.next_frame()?;
        let room = self.io.ready();
        let len = mbuf.data().len() as u64;
        self.io.counters.rx_packets += 1;
        self.io.counters.rx_octets += len;
        Some((
            RxToken { mbuf },
            TxToken {
                io: &mut self.io,
                room,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<TxToken<'_>> {
        if !self.io.ready() {
            // Counted here only: a receive without room is not a refusal
            // (its reply, if smoltcp makes one, is `tx_reply_dropped`; a
            // review found every frame received while the ring was full
            // counted here).
            self.io.counters.tx_backpressure += 1;
            return None;
        }
        Some(TxToken {
            io: &mut self.io,
            room: true,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.io.frame_max;
        // The device completes and checks IPv4 and TCP checksums itself
        // (offloaded, in software, or trusted); smoltcp does the rest. On a
        // trusted wire (memif between dpwarp processes) smoltcp's UDP
        // checksums go too, as TCP's do: the peer checks none.
        let mut checksum = ChecksumCapabilities::default();
        checksum.ipv4 = Checksum::None;
        checksum.tcp = Checksum::None;
        if self.io.tx_checksum == TxChecksum::Trusted && self.rx_checksum == RxChecksum::Trusted {
            checksum.udp = Checksum::None;
        }
        caps.checksum = checksum;
        caps
    }
}

/// An Ethernet II header: destination and source addresses, EtherType.
const ETHERNET_HEADER_LEN: u8 = 14;

/// A received frame, lent to smoltcp in its mbuf; freed after.
pub struct RxToken {
    mbuf: Mbuf,
}

impl phy::RxToken for RxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.mbuf.data())
    }
}

/// Room for one frame: smoltcp writes it into an mbuf, which is staged
/// (or, for a reply to a received frame when there was no room, into
/// scratch, and it is dropped).
pub struct TxToken<'a> {
    io: &'a mut Io,
    room: bool,
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let io = self.io;
        if !self.room {
            io.counters.tx_reply_dropped += 1;
            let len = len.min(io.scratch.len());
            return f(&mut io.scratch[..len]);
        }
        // `ready` put a spare mbuf and a staging slot in place.
        io.spare_len -= 1;
        let mut mbuf = io.spare[io.spare_len]
            .take()
            .expect("ready left a spare mbuf");
        let frame = mbuf
            .set_len(len)
            .expect("smoltcp sends at most max_transmission_unit octets, which fit an mbuf");
        let result = f(frame);
        if let Some(l3_len) = checksum::fill(frame, io.tx_checksum) {
            let l3_len = u16::try_from(l3_len).unwrap_or(u16::MAX);
            if mbuf
                .request_tcp_checksum_offload(ETHERNET_HEADER_LEN, l3_len)
                .is_err()
            {
                // The port would read or write past the frame: it goes
                // out checksummed here instead (fill rewrites both fields).
                io.counters.tx_checksum_software += 1;
                checksum::fill(mbuf.data_mut(), TxChecksum::Software);
            }
        }
        io.staged[io.staged_len] = Some(mbuf);
        io.staged_len += 1;
        if io.staged_len == BURST_MAX {
            io.flush();
        }
        result
    }
}
