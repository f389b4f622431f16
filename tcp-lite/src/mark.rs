//! DSCP marks on a connection's segments: the class of service a switch
//! queues them by (RFC 2474: the IPv4 header's former TOS octet, its upper
//! six bits; the lower two are ECN's, RFC 3168, left as they are).
//!
//! smoltcp writes every IPv4 header with DSCP 0, so [`Marking`] sits
//! between it and the device: each frame smoltcp writes into a transmit
//! token is looked at once written, and a TCP segment of a marked
//! connection gets its DSCP, the header checksum mended to match
//! (RFC 1624's incremental update). With no connection marked, a frame
//! costs one test of an empty table.
//!
//! The other way, [`SynClasses`] learns the DSCP of each SYN that arrives
//! for us (while on), so that a listener can give the connection the class
//! its peer asked for from its SYN-ACK on (a hardware iWARP RNIC's passive
//! side takes the TOS of the SYN; Linux does with
//! `net.ipv4.tcp_reflect_tos`).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv4Addr;

use smoltcp::phy::{Device, DeviceCapabilities, Medium, PacketMeta, RxToken, TxToken};
use smoltcp::time::Instant;

/// A connection, as its segments name it: our address and port, the
/// peer's address and port.
pub(crate) type Flow = (Ipv4Addr, u16, Ipv4Addr, u16);

/// A multiplicative hash of a flow's few words from a per-stack seed,
/// finished by MurmurHash3's 64-bit mix: looked up for every frame while
/// any connection is marked, where SipHash's rounds would cost more than
/// the rest of the look. A peer chooses its own address and port (and,
/// with classes reflected, which connections are in the table): the seed
/// and the final mix, which makes every bit of the result depend on every
/// bit of the state, keep it from picking ports that all land in one
/// bucket (a plain product's low bits depend on its input's low bits
/// only, whatever the seed).
pub(crate) struct FlowHasher(u64);

/// Builds [`FlowHasher`]s from a seed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowHashing(pub(crate) u64);

impl BuildHasher for FlowHashing {
    type Hasher = FlowHasher;

    fn build_hasher(&self) -> FlowHasher {
        FlowHasher(self.0)
    }
}

impl Hasher for FlowHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// The DSCP of each marked connection, and the stack's slot it belongs
/// to.
#[derive(Debug)]
pub(crate) struct Marks {
    by_flow: HashMap<Flow, (u8, u32), FlowHashing>,
}

impl Marks {
    /// No connection marked; flows hashed from `seed`.
    pub(crate) fn new(seed: u64) -> Marks {
        Marks {
            by_flow: HashMap::with_hasher(FlowHashing(seed)),
        }
    }

    /// Marks `flow`'s segments with `dscp` (0: unmarked), for the
    /// connection in slot `slot`.
    pub(crate) fn set(&mut self, flow: Flow, dscp: u8, slot: u32) {
        if dscp == 0 {
            self.forget(flow, slot);
        } else {
            self.by_flow.insert(flow, (dscp, slot));
        }
    }

    /// Slot `slot`'s mark goes (not another connection's on the same flow).
    pub(crate) fn forget(&mut self, flow: Flow, slot: u32) {
        if self.by_flow.get(&flow).is_some_and(|&(_, s)| s == slot) {
            self.by_flow.remove(&flow);
        }
    }

    /// Slot `slot`'s mark on `flow` (0: none).
    pub(crate) fn get(&self, flow: Flow, slot: u32) -> u8 {
        match self.by_flow.get(&flow) {
            Some(&(dscp, s)) if s == slot => dscp,
            _ => 0,
        }
    }

    /// Connections marked now.
    pub(crate) fn len(&self) -> usize {
        self.by_flow.len()
    }

    /// Sets the DSCP of `frame` if it is an IPv4 TCP segment of a marked
    /// connection; anything else (too short, another protocol, a fragment's
    /// tail) is left alone.
    fn mark(&self, medium: Medium, mend: bool, frame: &mut [u8]) {
        if self.by_flow.is_empty() {
            return;
        }
        // Its ports: the TCP header's first 4 octets.
        let Some((start, header)) = tcp_in(medium, frame, 4) else {
            return;
        };
        let ip = &mut frame[start..];
        let ours = u16::from_be_bytes([ip[header], ip[header + 1]]);
        let theirs = u16::from_be_bytes([ip[header + 2], ip[header + 3]]);
        let us = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let peer = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let Some(&(dscp, _)) = self.by_flow.get(&(us, ours, peer, theirs)) else {
            return;
        };
        let old = u16::from_be_bytes([ip[0], ip[1]]);
        ip[1] = dscp << 2 | (ip[1] & 0x03);
        // smoltcp leaves the checksum zero where the device computes it
        // (after us); only one smoltcp computed is mended.
        if mend {
            let new = u16::from_be_bytes([ip[0], ip[1]]);
            let checksum = u16::from_be_bytes([ip[10], ip[11]]);
            ip[10..12].copy_from_slice(&mended(checksum, old, new).to_be_bytes());
        }
    }
}

/// RFC 1624 eqn. 3: the checksum `hc` of a header whose 16-bit word `m`
/// became `m2`: `~(~hc + ~m + m2)` in ones' complement.
fn mended(hc: u16, m: u16, m2: u16) -> u16 {
    let sum = u32::from(!hc) + u32::from(!m) + u32::from(m2);
    let sum = (sum & 0xFFFF) + (sum >> 16);
    let sum = (sum & 0xFFFF) + (sum >> 16);
    !(sum as u16)
}

/// Where an Ethernet frame's or an IP packet's IPv4 TCP segment is:
/// `(offset of the IP header in the frame, length of the IP header)`,
/// with at least `tcp` octets of the TCP header there; `None` for anything
/// else (too short, another protocol, a fragment after the first, which
/// carries no TCP header).
fn tcp_in(medium: Medium, frame: &[u8], tcp: usize) -> Option<(usize, usize)> {
    let start = match medium {
        Medium::Ethernet => {
            if frame.len() < 14 || frame[12..14] != [0x08, 0x00] {
                return None;
            }
            14
        }
        Medium::Ip => 0,
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    let ip = &frame[start..];
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
        return None;
    }
    let header = usize::from(ip[0] & 0x0F) * 4;
    let offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1FFF;
    if header < 20 || offset != 0 || ip.len() < header + tcp {
        return None;
    }
    Some((start, header))
}

/// The DSCP of recent SYNs to our address, by the connection they open
/// (our address and port, the peer's): a table of [`SynClasses::SLOTS`]
/// entries, each SYN written over the entry its flow hashes to, so a
/// flood of SYNs costs nothing more than the table. The stack takes a
/// SYN's entry as the SYN turns a listening socket into a connection,
/// in the poll that received it (no other frame comes in between), so a
/// connection's class is not lost to a later SYN. Off until
/// [`SynClasses::learning`] is set: then each received frame costs a look
/// at its headers.
#[derive(Debug)]
pub(crate) struct SynClasses {
    pub(crate) learning: bool,
    entries: Box<[Option<(Flow, u8)>]>,
    /// SYNs learned since the stack began.
    pub(crate) learned: u64,
    /// Our address: SYNs to any other are not ours to learn.
    ours: Ipv4Addr,
    hashing: FlowHashing,
}

impl SynClasses {
    /// Entries of the table (a power of two).
    pub(crate) const SLOTS: usize = 1024;

    /// An empty table, not learning, for the stack at `ours`; flows hashed
    /// from `seed`.
    pub(crate) fn new(ours: Ipv4Addr, seed: u64) -> SynClasses {
        SynClasses {
            learning: false,
            entries: vec![None; SynClasses::SLOTS].into_boxed_slice(),
            learned: 0,
            ours,
            hashing: FlowHashing(seed),
        }
    }

    fn slot(&self, flow: &Flow) -> usize {
        (self.hashing.hash_one(flow) >> 54) as usize % SynClasses::SLOTS
    }

    /// Learns the DSCP of `frame` if it is a SYN (no ACK) of IPv4 TCP to
    /// our address.
    fn learn(&mut self, medium: Medium, frame: &[u8]) {
        // Up to its flags octet, 13 octets into TCP's header.
        let Some((start, at)) = tcp_in(medium, frame, 14) else {
            return;
        };
        let ip = &frame[start..];
        // SYN without ACK: the flags octet, 13 octets into TCP's header.
        if ip[at + 13] & 0x12 != 0x02 {
            return;
        }
        let peer = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let us = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let theirs = u16::from_be_bytes([ip[at], ip[at + 1]]);
        let ours = u16::from_be_bytes([ip[at + 2], ip[at + 3]]);
        if us != self.ours {
            return;
        }
        let flow = (us, ours, peer, theirs);
        let slot = self.slot(&flow);
        self.entries[slot] = Some((flow, ip[1] >> 2));
        self.learned += 1;
    }

    /// The DSCP the SYN that opened `flow` carried, if it is still known;
    /// the entry is taken.
    pub(crate) fn take(&mut self, flow: Flow) -> Option<u8> {
        let slot = self.slot(&flow);
        let entry = &mut self.entries[slot];
        match *entry {
            Some((f, dscp)) if f == flow => {
                *entry = None;
                Some(dscp)
            }
            _ => None,
        }
    }
}

/// A device whose transmitted frames [`Marks`] looks at.
pub(crate) struct Marking<'a, D: Device> {
    pub(crate) inner: &'a mut D,
    pub(crate) marks: &'a Marks,
    /// Where received SYNs' classes are learned.
    pub(crate) syns: &'a mut SynClasses,
    /// The device's medium (its capabilities', fixed).
    pub(crate) medium: Medium,
    /// Whether smoltcp computes the IPv4 header checksum (the device's
    /// capabilities do not offload it): only then is it mended.
    pub(crate) mend: bool,
}

/// A transmit token of [`Marking`].
pub(crate) struct MarkTx<'a, T: TxToken> {
    inner: T,
    marks: &'a Marks,
    medium: Medium,
    mend: bool,
}

impl<T: TxToken> TxToken for MarkTx<'_, T> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let (marks, medium, mend) = (self.marks, self.medium, self.mend);
        self.inner.consume(len, |frame| {
            let r = f(frame);
            marks.mark(medium, mend, frame);
            r
        })
    }

    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta);
    }
}

impl<D: Device> Device for Marking<'_, D> {
    type RxToken<'b>
        = MarkRx<'b, D::RxToken<'b>>
    where
        Self: 'b;
    type TxToken<'b>
        = MarkTx<'b, D::TxToken<'b>>
    where
        Self: 'b;

    fn receive(&mut self, timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let (marks, medium, mend) = (self.marks, self.medium, self.mend);
        let (rx, tx) = self.inner.receive(timestamp)?;
        let syns = if self.syns.learning {
            Some(&mut *self.syns)
        } else {
            None
        };
        Some((
            MarkRx {
                inner: rx,
                syns,
                medium,
            },
            MarkTx {
                inner: tx,
                marks,
                medium,
                mend,
            },
        ))
    }

    fn transmit(&mut self, timestamp: Instant) -> Option<Self::TxToken<'_>> {
        let (marks, medium, mend) = (self.marks, self.medium, self.mend);
        let tx = self.inner.transmit(timestamp)?;
        Some(MarkTx {
            inner: tx,
            marks,
            medium,
            mend,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.inner.capabilities()
    }
}

/// A receive token of [`Marking`]: the device's, its frame looked at for
/// a SYN's class while [`SynClasses`] learns.
pub(crate) struct MarkRx<'a, T: RxToken> {
    inner: T,
    syns: Option<&'a mut SynClasses>,
    medium: Medium,
}

impl<T: RxToken> RxToken for MarkRx<'_, T> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let (syns, medium) = (self.syns, self.medium);
        self.inner.consume(|frame| {
            if let Some(syns) = syns {
                syns.learn(medium, frame);
            }
            f(frame)
        })
    }

    fn meta(&self) -> PacketMeta {
        self.inner.meta()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's sum over a header whose checksum field is zero.
    fn checksum(header: &[u8]) -> u16 {
        let mut sum: u32 = header
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn segment(tos: u8, ours: u16, peer: [u8; 4], theirs: u16) -> Vec<u8> {
        let mut ip = vec![
            0x45, tos, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, peer[0], peer[1],
            peer[2], peer[3],
        ];
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip.extend_from_slice(&ours.to_be_bytes());
        ip.extend_from_slice(&theirs.to_be_bytes());
        ip.extend_from_slice(&[0; 16]);
        ip
    }

    #[test]
    fn a_marked_connections_segments_carry_its_dscp_and_a_right_checksum() {
        let flow = (
            Ipv4Addr::new(10, 0, 0, 1),
            4000,
            Ipv4Addr::new(10, 0, 0, 2),
            18515,
        );
        let mut marks = Marks::new(5);
        marks.set(flow, 46, 3);
        for ecn in 0..4u8 {
            let mut frame = segment(ecn, 4000, [10, 0, 0, 2], 18515);
            marks.mark(Medium::Ip, true, &mut frame);
            assert_eq!(frame[1], 46 << 2 | ecn, "DSCP set, ECN kept");
            let mut zeroed = frame[..20].to_vec();
            zeroed[10..12].fill(0);
            assert_eq!(
                u16::from_be_bytes([frame[10], frame[11]]),
                checksum(&zeroed)
            );
        }
        // Behind an Ethernet header too.
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&segment(0, 4000, [10, 0, 0, 2], 18515));
        marks.mark(Medium::Ethernet, true, &mut frame);
        assert_eq!(frame[15], 46 << 2);
        // Others are left alone: another connection, another protocol, a
        // later fragment, a runt; and an unmarked one.
        for (frame, medium) in [
            (segment(0, 4001, [10, 0, 0, 2], 18515), Medium::Ip),
            (segment(0, 4000, [10, 0, 0, 3], 18515), Medium::Ip),
            (segment(0, 4000, [10, 0, 0, 2], 18516), Medium::Ip),
            (
                {
                    let mut f = segment(0, 4000, [10, 0, 0, 2], 18515);
                    f[9] = 17;
                    f
                },
                Medium::Ip,
            ),
            (
                {
                    let mut f = segment(0, 4000, [10, 0, 0, 2], 18515);
                    f[7] = 1;
                    f
                },
                Medium::Ip,
            ),
            (
                segment(0, 4000, [10, 0, 0, 2], 18515)[..21].to_vec(),
                Medium::Ip,
            ),
        ] {
            let mut marked = frame.clone();
            marks.mark(medium, true, &mut marked);
            assert_eq!(marked, frame);
        }
        // A header with options: the ports after them; a checksum the
        // device computes (zero from smoltcp) is left to it.
        let mut frame = segment(0, 4000, [10, 0, 0, 2], 18515);
        frame[0] = 0x46;
        frame.splice(20..20, [1, 1, 1, 1]);
        frame[10..12].fill(0);
        let c = checksum(&frame[..24]);
        frame[10..12].copy_from_slice(&c.to_be_bytes());
        marks.mark(Medium::Ip, true, &mut frame);
        assert_eq!(frame[1], 46 << 2);
        let mut zeroed = frame[..24].to_vec();
        zeroed[10..12].fill(0);
        assert_eq!(
            u16::from_be_bytes([frame[10], frame[11]]),
            checksum(&zeroed)
        );
        let mut frame = segment(0, 4000, [10, 0, 0, 2], 18515);
        frame[10..12].fill(0);
        marks.mark(Medium::Ip, false, &mut frame);
        assert_eq!((frame[1], &frame[10..12]), (46 << 2, &[0u8, 0][..]));
        // Not IPv4 behind Ethernet (an 802.1Q tag, IPv6): untouched.
        for ethertype in [[0x81, 0x00], [0x86, 0xDD]] {
            let mut frame = vec![0u8; 12];
            frame.extend_from_slice(&ethertype);
            frame.extend_from_slice(&segment(0, 4000, [10, 0, 0, 2], 18515));
            let before = frame.clone();
            marks.mark(Medium::Ethernet, true, &mut frame);
            assert_eq!(frame, before);
        }
        // Another slot's connection on the flow leaves it; its own takes
        // it back.
        marks.forget(flow, 4);
        assert_eq!(marks.len(), 1);
        marks.set(flow, 0, 3);
        assert_eq!(marks.len(), 0);
        let frame = segment(0, 4000, [10, 0, 0, 2], 18515);
        let mut marked = frame.clone();
        marks.mark(Medium::Ip, true, &mut marked);
        assert_eq!(marked, frame);
    }

    /// A SYN from `peer:theirs` to `10.0.0.1:ours` with TOS `tos`, as it
    /// arrives (TCP flags `flags`).
    fn arriving(tos: u8, ours: u16, peer: [u8; 4], theirs: u16, flags: u8) -> Vec<u8> {
        let mut ip = segment(tos, theirs, [10, 0, 0, 1], ours);
        ip[12..16].copy_from_slice(&peer);
        ip[20 + 13] = flags;
        ip
    }

    #[test]
    fn a_syns_class_is_learned_and_a_flood_of_syns_costs_no_more_than_the_table() {
        let mut syns = SynClasses::new(Ipv4Addr::new(10, 0, 0, 1), 7);
        let flow = |peer: [u8; 4], theirs| (Ipv4Addr::new(10, 0, 0, 1), 4000, peer.into(), theirs);
        syns.learn(
            Medium::Ip,
            &arriving(46 << 2 | 1, 4000, [10, 0, 0, 2], 5000, 0x02),
        );
        // A SYN-ACK, an ACK, UDP and a runt teach nothing.
        syns.learn(
            Medium::Ip,
            &arriving(10 << 2, 4000, [10, 0, 0, 3], 5000, 0x12),
        );
        syns.learn(
            Medium::Ip,
            &arriving(10 << 2, 4000, [10, 0, 0, 4], 5000, 0x10),
        );
        let mut udp = arriving(10 << 2, 4000, [10, 0, 0, 5], 5000, 0x02);
        udp[9] = 17;
        syns.learn(Medium::Ip, &udp);
        syns.learn(
            Medium::Ip,
            &arriving(10 << 2, 4000, [10, 0, 0, 6], 5000, 0x02)[..30],
        );
        assert_eq!(syns.learned, 1);
        for peer in [[10, 0, 0, 3], [10, 0, 0, 4], [10, 0, 0, 5], [10, 0, 0, 6]] {
            assert_eq!(syns.take(flow(peer, 5000)), None, "{peer:?}");
        }
        // ECN's bits are not the class; taken once.
        assert_eq!(syns.take(flow([10, 0, 0, 2], 5000)), Some(46));
        assert_eq!(syns.take(flow([10, 0, 0, 2], 5000)), None);
        // A SYN to another address is not ours.
        let mut elsewhere = arriving(46 << 2, 4000, [10, 0, 0, 7], 5000, 0x02);
        elsewhere[19] = 99;
        syns.learn(Medium::Ip, &elsewhere);
        assert_eq!(syns.learned, 1);
        // 100,000 SYNs from as many ports write over the table's entries
        // (one learned before them is gone), and take nothing more: a SYN
        // after them is learned as any other.
        syns.learn(
            Medium::Ip,
            &arriving(18 << 2, 4000, [10, 0, 0, 8], 5000, 0x02),
        );
        for i in 0..100_000u32 {
            let peer = [192, 0, (i >> 16) as u8, (i >> 8) as u8];
            syns.learn(Medium::Ip, &arriving(8 << 2, 4000, peer, i as u16, 0x02));
        }
        assert_eq!(syns.take(flow([10, 0, 0, 8], 5000)), None, "written over");
        let filled = syns.entries.iter().filter(|e| e.is_some()).count();
        assert!(
            filled > SynClasses::SLOTS * 9 / 10,
            "spread over the table: {filled}"
        );
        let mut frame = vec![0u8; 12];
        frame.extend_from_slice(&[0x08, 0x00]);
        frame.extend_from_slice(&arriving(34 << 2, 4000, [10, 0, 0, 9], 6000, 0x02));
        syns.learn(Medium::Ethernet, &frame);
        assert_eq!(syns.take(flow([10, 0, 0, 9], 6000)), Some(34));
    }
}
