//! IPv4 reassembly, bounded in memory and in capture time.
//!
//! Reading list: RFC 791 §3.2 ("Fragmentation and Reassembly", and the reassembly
//! procedure under it) and RFC 815 (keeping track of the holes).
//!
//! RFC 791 §3.2: "To assemble the fragments of an internet datagram, an internet
//! protocol module (for example at a destination host) combines internet datagrams that
//! all have the same value for the four fields: identification, source, destination,
//! and protocol." A datagram is whole once the fragment with offset 0 (which holds the
//! upper-layer header), the one with MF clear (which fixes the length) and every octet
//! between them have come. The first copy of an octet wins, as in TCP reassembly.
//!
//! Bounds: at most [`DATAGRAMS_MAX`] datagrams are reassembled at once, each at most
//! 65,535 octets long in at most [`RANGES_MAX`] separate pieces, so memory stays near
//! 4 MiB and the work per fragment small whatever the capture holds. A datagram still
//! incomplete [`TIMEOUT_NS`] after its first fragment, by the capture's clock, is given
//! up, as is the oldest one when a new one needs room, or one in more pieces; their
//! fragments are counted in [`DefragStats::fragments_dropped`]. A fragment of a
//! datagram completed less than [`DUPLICATE_WINDOW_NS`] before (a copy the network or
//! the capture duplicated) is counted in [`DefragStats::duplicates`], not taken for the
//! start of another datagram that never completes.
//!
//! The fragments' header checksums are not verified, as no checksum is in
//! [`crate::packet`]: a capture on the sending host holds headers from before checksum
//! offload filled them in (dpwarp's own DPDK ports leave the IPv4 header checksum to the
//! NIC), and a corrupt header is no likelier in a fragment than in a whole packet. The
//! datagram put together gets a header checksum of its own ([`Defrag::Complete`]).
//!
//! IPv6 fragments (RFC 8200 §4.5) are not reassembled here.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use smoltcp::wire::Ipv4Packet;

use super::link::{be16, network_layer, Network};

/// Datagrams reassembled at once.
pub const DATAGRAMS_MAX: usize = 64;
/// How long, in capture time, a datagram waits for its missing fragments: Linux's
/// `ipfrag_time` default, 30 s. (RFC 791 §3.2's procedure: "The current recommendation
/// for the initial timer setting is 15 seconds." Linux waits longer; a capture shows
/// what the receiver accepted.)
pub const TIMEOUT_NS: u64 = 30_000_000_000;

/// The largest IPv4 datagram: Total Length is 16 bits.
const DATAGRAM_LEN_MAX: usize = u16::MAX as usize;

/// Separate pieces one datagram may be in while it waits for the rest: beyond, it is
/// given up (a sender's fragments are in order or nearly; a capture of one-octet
/// fragments in a scattered order would otherwise make every fragment re-sort and
/// re-merge thousands of ranges).
pub const RANGES_MAX: usize = 64;

/// How long after a datagram completed a fragment of it is taken for a duplicate
/// (capture time): a copy the network or a span port made comes within this; a new
/// datagram reusing the identification (RFC 6864) does not, at any rate that
/// fragments.
pub const DUPLICATE_WINDOW_NS: u64 = 1_000_000_000;

/// Completed datagrams remembered for [`DUPLICATE_WINDOW_NS`], at most.
const COMPLETED_MAX: usize = 4 * DATAGRAMS_MAX;

mod field {
    use core::ops::Range;
    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOTAL_LEN: Range<usize> = 2..4;
    pub(super) const IDENTIFICATION: Range<usize> = 4..6;
    pub(super) const FLAGS_OFFSET: Range<usize> = 6..8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const SRC: Range<usize> = 12..16;
    pub(super) const DST: Range<usize> = 16..20;
    pub(super) const HEADER_LEN_MIN: usize = 20;
    /// Don't Fragment.
    pub(super) const DF: u16 = 0x4000;
    /// More Fragments.
    pub(super) const MF: u16 = 0x2000;
    /// Fragment Offset, in 8-octet units.
    pub(super) const OFFSET: u16 = 0x1fff;
}

/// What became of a frame given to [`Defragmenter::push`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defrag {
    /// Not an IPv4 fragment of a protocol the defragmenter was asked for: parse the
    /// frame as it is.
    Whole,
    /// A fragment, held until the rest of its datagram comes.
    Held,
    /// The fragment completed its datagram: this IPv4 packet (link type
    /// [`crate::pcap::linktype::RAW`]) holds it, unfragmented. Its header is the first
    /// fragment's with the fields reassembly changes made consistent, as a receiver's
    /// reassembly makes them: Total Length the whole datagram's, More Fragments and
    /// Fragment Offset clear (Don't Fragment as the first fragment had it), and the
    /// Header Checksum recomputed.
    Complete(Vec<u8>),
}

/// Counters over everything a [`Defragmenter`] has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DefragStats {
    /// Fragments taken.
    pub fragments: u64,
    /// Datagrams reassembled.
    pub datagrams: u64,
    /// Fragments given up: their datagram timed out, made room for another, was still
    /// incomplete at [`Defragmenter::finish`], or could not be whole (an octet past
    /// 65,535, a length that contradicts another fragment's).
    pub fragments_dropped: u64,
    /// The frame and capture time of the first fragment given up.
    pub first_dropped: Option<(u64, u64)>,
    /// Fragments of a datagram completed just before: copies, left out.
    pub duplicates: u64,
}

/// Reassembles IPv4 datagrams from their fragments. See the module documentation.
#[derive(Debug)]
pub struct Defragmenter {
    /// The IP protocols whose fragments are reassembled.
    protocols: Vec<u8>,
    datagrams: BTreeMap<Key, Partial>,
    /// Datagrams completed in the last [`DUPLICATE_WINDOW_NS`], oldest first, with
    /// when.
    completed: std::collections::VecDeque<(Key, u64)>,
    stats: DefragStats,
}

/// RFC 791 §3.2: identification, source, destination and protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    protocol: u8,
    identification: u16,
}

/// A datagram being reassembled.
#[derive(Debug)]
struct Partial {
    /// The header of the fragment with offset 0.
    header: Option<Vec<u8>>,
    /// Its payload octets at their offsets; only the `have` ranges are meaningful.
    data: Vec<u8>,
    /// The payload ranges received, sorted, neither overlapping nor touching.
    have: Vec<(usize, usize)>,
    /// The payload length, from the fragment with MF clear.
    len: Option<usize>,
    first_frame: u64,
    first_ts_ns: u64,
    fragments: u64,
    /// A fragment contradicted the others: the datagram can never be whole.
    broken: bool,
}

/// A fragment's header fields and payload.
struct Fragment<'a> {
    key: Key,
    header: &'a [u8],
    offset: usize,
    more: bool,
    payload: &'a [u8],
}

impl Defragmenter {
    /// A defragmenter that reassembles the fragments of the IP `protocols` (TCP is 6)
    /// and leaves those of others [`Defrag::Whole`].
    pub fn new(protocols: &[u8]) -> Defragmenter {
        Defragmenter {
            protocols: protocols.to_vec(),
            datagrams: BTreeMap::new(),
            completed: std::collections::VecDeque::new(),
            stats: DefragStats::default(),
        }
    }

    /// Takes frame `frame`, of link type `linktype`, captured at `ts_ns`. First gives
    /// up the datagrams that waited more than [`TIMEOUT_NS`] before `ts_ns`.
    pub fn push(&mut self, frame: u64, ts_ns: u64, linktype: u32, data: &[u8]) -> Defrag {
        self.expire(ts_ns);
        let Ok(Network::V4(packet)) = network_layer(linktype, data) else {
            return Defrag::Whole;
        };
        let Some(fragment) = parse(packet) else {
            return Defrag::Whole;
        };
        if !self.protocols.contains(&fragment.key.protocol) {
            return Defrag::Whole;
        }
        self.stats.fragments += 1;
        while self
            .completed
            .front()
            .is_some_and(|&(_, at)| ts_ns.saturating_sub(at) > DUPLICATE_WINDOW_NS)
        {
            self.completed.pop_front();
        }
        if !self.datagrams.contains_key(&fragment.key)
            && self.completed.iter().any(|&(key, _)| key == fragment.key)
        {
            self.stats.duplicates += 1;
            return Defrag::Held;
        }
        if !self.datagrams.contains_key(&fragment.key) && self.datagrams.len() >= DATAGRAMS_MAX {
            let oldest = self
                .datagrams
                .iter()
                .min_by_key(|(_, partial)| partial.first_ts_ns)
                .map(|(key, _)| *key);
            if let Some(key) = oldest {
                self.drop_datagram(key);
            }
        }
        let partial = self.datagrams.entry(fragment.key).or_insert(Partial {
            header: None,
            data: Vec::new(),
            have: Vec::new(),
            len: None,
            first_frame: frame,
            first_ts_ns: ts_ns,
            fragments: 0,
            broken: false,
        });
        partial.fragments += 1;
        partial.take(&fragment);
        if partial.broken {
            // Given up now rather than at its timeout: it cannot complete.
            self.drop_datagram(fragment.key);
            return Defrag::Held;
        }
        let Some(whole) = partial.whole() else {
            return Defrag::Held;
        };
        self.datagrams.remove(&fragment.key);
        self.stats.datagrams += 1;
        if self.completed.len() >= COMPLETED_MAX {
            self.completed.pop_front();
        }
        self.completed.push_back((fragment.key, ts_ns));
        Defrag::Complete(whole)
    }

    /// Ends the capture: every datagram still incomplete is given up.
    pub fn finish(&mut self) {
        let keys: Vec<Key> = self.datagrams.keys().copied().collect();
        keys.into_iter().for_each(|key| self.drop_datagram(key));
    }

    /// Counters so far.
    pub fn stats(&self) -> DefragStats {
        self.stats
    }

    fn expire(&mut self, now_ns: u64) {
        let expired: Vec<Key> = self
            .datagrams
            .iter()
            .filter(|(_, partial)| now_ns.saturating_sub(partial.first_ts_ns) > TIMEOUT_NS)
            .map(|(key, _)| *key)
            .collect();
        expired.into_iter().for_each(|key| self.drop_datagram(key));
    }

    fn drop_datagram(&mut self, key: Key) {
        let Some(partial) = self.datagrams.remove(&key) else {
            return;
        };
        self.stats.fragments_dropped += partial.fragments;
        let first = (partial.first_frame, partial.first_ts_ns);
        let earliest = self
            .stats
            .first_dropped
            .map_or(first, |seen| seen.min(first));
        self.stats.first_dropped = Some(earliest);
    }
}

impl Partial {
    /// Adds a fragment's octets where no earlier fragment put any.
    fn take(&mut self, fragment: &Fragment<'_>) {
        let (start, end) = (fragment.offset, fragment.offset + fragment.payload.len());
        let header_len = fragment.header.len();
        if end + header_len > DATAGRAM_LEN_MAX {
            self.broken = true;
            return;
        }
        if !fragment.more {
            // Two last fragments that disagree, or octets past the end.
            if self.len.is_some_and(|len| len != end) || self.have.last().is_some_and(|r| r.1 > end)
            {
                self.broken = true;
                return;
            }
            self.len = Some(end);
        } else if self.len.is_some_and(|len| end > len) {
            self.broken = true;
            return;
        }
        if start == 0 {
            self.header.get_or_insert_with(|| fragment.header.to_vec());
        }
        // The first fragment's header and the last one's end make the datagram: each
        // fragment was checked against its own header's length, and a long first
        // header with a far last fragment can still pass 65,535 (found by a review:
        // Total Length wrapped, and the datagram vanished at parsing).
        if let (Some(header), Some(len)) = (&self.header, self.len) {
            if header.len() + len > DATAGRAM_LEN_MAX {
                self.broken = true;
                return;
            }
        }
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        let mut cur = start;
        let mut added = Vec::new();
        for &(lo, hi) in self.have.iter().filter(|r| r.1 > start && r.0 < end) {
            if lo > cur {
                added.push((cur, lo));
            }
            cur = cur.max(hi);
        }
        if cur < end {
            added.push((cur, end));
        }
        for &(lo, hi) in &added {
            self.data[lo..hi].copy_from_slice(&fragment.payload[lo - start..hi - start]);
        }
        self.have.extend(added);
        self.have.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.have.len());
        for &(lo, hi) in &self.have {
            match merged.last_mut() {
                Some(last) if last.1 >= lo => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        self.have = merged;
        if self.have.len() > RANGES_MAX {
            self.broken = true;
        }
    }

    /// The datagram, unfragmented, once every octet of it has come.
    fn whole(&self) -> Option<Vec<u8>> {
        let header = self.header.as_ref()?;
        let len = self.len?;
        if self.have != [(0, len)] {
            return None;
        }
        let mut out = header.clone();
        let total = (header.len() + len) as u16;
        out[field::TOTAL_LEN].copy_from_slice(&total.to_be_bytes());
        let flags = be16(header, field::FLAGS_OFFSET.start).unwrap_or(0) & field::DF;
        out[field::FLAGS_OFFSET].copy_from_slice(&flags.to_be_bytes());
        // RFC 791 §3.1, Header Checksum: "Since some header fields change (e.g., time
        // to live), this is recomputed and verified at each point that the internet
        // header is processed." Total Length and the fragment fields just changed.
        // `header` is the IHL's length, at least 20 octets ([`parse`]), so the view's
        // checksum stays within it.
        Ipv4Packet::new_unchecked(&mut out[..]).fill_checksum();
        out.extend_from_slice(&self.data[..len]);
        Some(out)
    }
}

/// The fragment in an IPv4 packet, or `None` if it is not one (or is too malformed to
/// be placed: the parser will say why).
fn parse(packet: &[u8]) -> Option<Fragment<'_>> {
    let ver_ihl = *packet.get(field::VER_IHL)?;
    let header_len = usize::from(ver_ihl & 0x0f) * 4;
    // A link layer that says IPv4 over a header of another version (RFC 791 §3.1:
    // "The Version field indicates the format of the internet header") is a bad
    // header to the parser; put together, it would be read as raw IP of that version.
    if ver_ihl >> 4 != 4 || header_len < field::HEADER_LEN_MIN {
        return None;
    }
    let header = packet.get(..header_len)?;
    let flags_offset = be16(header, field::FLAGS_OFFSET.start)?;
    let offset = usize::from(flags_offset & field::OFFSET) * 8;
    let more = flags_offset & field::MF != 0;
    if !more && offset == 0 {
        return None;
    }
    let total_len = usize::from(be16(header, field::TOTAL_LEN.start)?);
    // A fragment cut by the snapshot length, or with a Total Length below its header,
    // cannot be placed: it is left to the parser, which reports it as a fragment.
    let payload = packet.get(header_len..total_len.max(header_len))?;
    let address = |range: core::ops::Range<usize>| -> Option<Ipv4Addr> {
        let octets: [u8; 4] = header.get(range)?.try_into().ok()?;
        Some(Ipv4Addr::from(octets))
    };
    let key = Key {
        src: address(field::SRC)?,
        dst: address(field::DST)?,
        protocol: header[field::PROTOCOL],
        identification: be16(header, field::IDENTIFICATION.start)?,
    };
    Some(Fragment {
        key,
        header,
        offset,
        more,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{build_tcp_frame, parse_tcp, TcpFlags};
    use crate::pcap::linktype;

    const ETHERNET: usize = 14;
    const HEADER: usize = 20;
    const TCP: u8 = 6;

    /// A TCP segment of `payload` in an Ethernet frame, identification `id`.
    fn frame(id: u16, payload: &[u8]) -> Vec<u8> {
        let src = "10.1.0.1:40000".parse().unwrap();
        let dst = "10.1.0.2:7174".parse().unwrap();
        let mut frame = build_tcp_frame(src, dst, 1000, 1, TcpFlags::ACK, payload);
        frame[ETHERNET + 4..ETHERNET + 6].copy_from_slice(&id.to_be_bytes());
        frame
    }

    /// The octets `from..to` of `frame`'s IP payload as a fragment (RFC 791 §3.2),
    /// with a valid header checksum.
    fn piece(frame: &[u8], from: usize, to: usize, more: bool) -> Vec<u8> {
        let mut out = frame[..ETHERNET + HEADER].to_vec();
        out.extend_from_slice(&frame[ETHERNET + HEADER + from..ETHERNET + HEADER + to]);
        let total = (HEADER + to - from) as u16;
        out[ETHERNET + 2..ETHERNET + 4].copy_from_slice(&total.to_be_bytes());
        let flags = (from / 8) as u16 | if more { field::MF } else { 0 };
        out[ETHERNET + 6..ETHERNET + 8].copy_from_slice(&flags.to_be_bytes());
        Ipv4Packet::new_unchecked(&mut out[ETHERNET..]).fill_checksum();
        out
    }

    fn payload() -> Vec<u8> {
        (0..200u8).collect()
    }

    #[test]
    fn fragments_in_any_order_make_the_datagram() {
        let whole = frame(7, &payload());
        let ip_len = whole.len() - ETHERNET;
        let pieces = [
            piece(&whole, 64, 128, true),
            piece(&whole, 128, ip_len - HEADER, false),
            // A fragment overlapping the two before it and the hole in front of them,
            // with other octets: the first copy of each octet wins, so only its
            // octets 56..64 are kept.
            {
                let mut again = piece(&whole, 56, 136, true);
                again[ETHERNET + HEADER..].fill(0xee);
                again
            },
            piece(&whole, 0, 64, true),
        ];
        let mut defrag = Defragmenter::new(&[TCP]);
        let mut results: Vec<Defrag> = Vec::new();
        for (k, p) in pieces.iter().enumerate() {
            results.push(defrag.push(k as u64 + 1, 0, linktype::ETHERNET, p));
        }
        assert_eq!(results[..3], [Defrag::Held, Defrag::Held, Defrag::Held]);
        let Defrag::Complete(datagram) = &results[3] else {
            panic!("{:?}", results[3]);
        };
        let mut expected = whole[ETHERNET..].to_vec();
        // The frame's DF flag: a fragment has none, and it is all that is kept.
        expected[field::FLAGS_OFFSET].fill(0);
        Ipv4Packet::new_unchecked(&mut expected[..]).fill_checksum();
        expected[HEADER + 56..HEADER + 64].fill(0xee);
        assert_eq!(datagram[..], expected[..]);
        let segment = parse_tcp(linktype::RAW, datagram).unwrap();
        assert_eq!(segment.payload.len(), payload().len());
        assert_eq!(segment.payload[64 - 20..], payload()[64 - 20..]);
        let stats = defrag.stats();
        assert_eq!((stats.fragments, stats.datagrams), (4, 1));
        assert_eq!(stats.fragments_dropped, 0);
    }

    /// The datagram's header is what a receiver's reassembly makes of the first
    /// fragment's: Total Length of the whole, More Fragments and Fragment Offset clear,
    /// Don't Fragment as the first fragment had it, and a Header Checksum that
    /// verifies (RFC 791 §3.1: "recomputed and verified at each point that the
    /// internet header is processed"). It used to keep the first fragment's checksum,
    /// wrong for the header it was in.
    #[test]
    fn the_datagram_has_a_consistent_header() {
        let whole = frame(7, &payload());
        let end = whole.len() - ETHERNET - HEADER;
        for dont_fragment in [false, true] {
            let mut first = piece(&whole, 0, 64, true);
            if dont_fragment {
                let mut ip = Ipv4Packet::new_unchecked(&mut first[ETHERNET..]);
                ip.set_dont_frag(true);
                ip.fill_checksum();
            }
            let last = piece(&whole, 64, end, false);
            for fragment in [&first, &last] {
                assert!(Ipv4Packet::new_checked(&fragment[ETHERNET..])
                    .unwrap()
                    .verify_checksum());
            }
            let mut defrag = Defragmenter::new(&[TCP]);
            assert_eq!(defrag.push(1, 0, linktype::ETHERNET, &first), Defrag::Held);
            let Defrag::Complete(datagram) = defrag.push(2, 0, linktype::ETHERNET, &last) else {
                panic!("the datagram is whole");
            };
            let ip = Ipv4Packet::new_checked(&datagram[..]).unwrap();
            assert_eq!(datagram.len(), whole.len() - ETHERNET);
            assert_eq!(usize::from(ip.total_len()), datagram.len());
            assert!(!ip.more_frags());
            assert_eq!(ip.frag_offset(), 0);
            assert_eq!(ip.dont_frag(), dont_fragment);
            assert!(ip.verify_checksum(), "DF {dont_fragment}");
            assert_eq!(ip.payload(), &whole[ETHERNET + HEADER..]);
        }
    }

    #[test]
    fn whole_packets_and_other_protocols_pass_through() {
        let whole = frame(7, &payload());
        let mut defrag = Defragmenter::new(&[TCP]);
        assert_eq!(defrag.push(1, 0, linktype::ETHERNET, &whole), Defrag::Whole);
        let mut icmp = piece(&whole, 0, 64, true);
        icmp[ETHERNET + field::PROTOCOL] = 1;
        assert_eq!(defrag.push(2, 0, linktype::ETHERNET, &icmp), Defrag::Whole);
        assert_eq!(defrag.stats(), DefragStats::default());
    }

    /// An Ethernet frame of type IPv4 whose header says version 6 (or 5) is a bad
    /// header to `parse_tcp`, fragment fields or not. It used to be reassembled with
    /// its like into a datagram that, as raw IP, read as IPv6 (or not IP).
    #[test]
    fn a_fragment_whose_version_is_not_4_is_left_to_the_parser() {
        let whole = frame(7, &payload());
        let end = whole.len() - ETHERNET - HEADER;
        for version in [5u8, 6] {
            let mut defrag = Defragmenter::new(&[TCP]);
            for (k, mut fragment) in [piece(&whole, 0, 64, true), piece(&whole, 64, end, false)]
                .into_iter()
                .enumerate()
            {
                fragment[ETHERNET] = version << 4 | 5;
                assert_eq!(
                    defrag.push(k as u64 + 1, 0, linktype::ETHERNET, &fragment),
                    Defrag::Whole
                );
                assert_eq!(
                    parse_tcp(linktype::ETHERNET, &fragment),
                    Err(crate::packet::Skip::BadHeader)
                );
            }
            assert_eq!(defrag.stats(), DefragStats::default());
        }
    }

    /// A datagram waits [`TIMEOUT_NS`] of capture time for its fragments; then, or at
    /// the end, its fragments are given up and counted.
    #[test]
    fn incomplete_datagrams_time_out_by_capture_time() {
        let whole = frame(7, &payload());
        let mut defrag = Defragmenter::new(&[TCP]);
        let first = piece(&whole, 0, 64, true);
        assert_eq!(defrag.push(1, 5, linktype::ETHERNET, &first), Defrag::Held);
        let late = piece(&whole, 64, whole.len() - ETHERNET - HEADER, false);
        let after = 5 + TIMEOUT_NS + 1;
        assert_eq!(
            defrag.push(2, after, linktype::ETHERNET, &late),
            Defrag::Held
        );
        assert_eq!(defrag.stats().fragments_dropped, 1);
        assert_eq!(defrag.stats().first_dropped, Some((1, 5)));
        defrag.finish();
        assert_eq!(defrag.stats().fragments_dropped, 2);
        assert_eq!(defrag.stats().datagrams, 0);
    }

    /// At most [`DATAGRAMS_MAX`] datagrams are held: the oldest makes room.
    #[test]
    fn datagrams_held_are_bounded() {
        let mut defrag = Defragmenter::new(&[TCP]);
        for id in 0..=DATAGRAMS_MAX as u16 {
            let whole = frame(id, &payload());
            let first = piece(&whole, 0, 64, true);
            let held = defrag.push(u64::from(id) + 1, u64::from(id), linktype::ETHERNET, &first);
            assert_eq!(held, Defrag::Held);
        }
        assert_eq!(defrag.datagrams.len(), DATAGRAMS_MAX);
        assert_eq!(defrag.stats().fragments_dropped, 1);
        assert_eq!(defrag.stats().first_dropped, Some((1, 0)));
    }

    /// Two last fragments that disagree on the length: the datagram can never be
    /// whole and is given up at once.
    #[test]
    fn contradicting_fragments_are_given_up() {
        let whole = frame(7, &payload());
        let mut defrag = Defragmenter::new(&[TCP]);
        let end = whole.len() - ETHERNET - HEADER;
        assert_eq!(
            defrag.push(1, 0, linktype::ETHERNET, &piece(&whole, 64, end, false)),
            Defrag::Held
        );
        assert_eq!(
            defrag.push(2, 0, linktype::ETHERNET, &piece(&whole, 64, 128, false)),
            Defrag::Held
        );
        assert_eq!(defrag.stats().fragments_dropped, 2);
        assert!(defrag.datagrams.is_empty());
    }

    /// A copy of a fragment after its datagram completed (the network or a span
    /// port duplicated it) is a duplicate, not the start of a datagram that never
    /// completes (found by a review: it was counted as dropped, and dpwarp-pcap said
    /// data was missing). Past [`DUPLICATE_WINDOW_NS`] the same identification starts
    /// a new datagram.
    #[test]
    fn a_fragment_again_after_its_datagram_is_a_duplicate() {
        let whole = frame(7, &payload());
        let end = whole.len() - ETHERNET - HEADER;
        let (a, b) = (piece(&whole, 0, 64, true), piece(&whole, 64, end, false));
        let mut defrag = Defragmenter::new(&[TCP]);
        assert_eq!(defrag.push(1, 0, linktype::ETHERNET, &a), Defrag::Held);
        assert!(matches!(
            defrag.push(2, 10, linktype::ETHERNET, &b),
            Defrag::Complete(_)
        ));
        assert_eq!(defrag.push(3, 20, linktype::ETHERNET, &b), Defrag::Held);
        defrag.finish();
        let stats = defrag.stats();
        assert_eq!((stats.duplicates, stats.fragments_dropped), (1, 0));
        // Much later: a new datagram with the identification again.
        let later = 20 + DUPLICATE_WINDOW_NS + 1;
        assert_eq!(defrag.push(4, later, linktype::ETHERNET, &a), Defrag::Held);
        assert!(matches!(
            defrag.push(5, later, linktype::ETHERNET, &b),
            Defrag::Complete(_)
        ));
        assert_eq!(defrag.stats().duplicates, 1);
    }

    /// A first fragment with a 60-octet header and a last one (20-octet header)
    /// ending at 65,515 pass each on its own, but make 65,575 octets: given up, not
    /// put together with a Total Length that wrapped.
    #[test]
    fn a_datagram_past_65535_octets_with_its_first_header_is_given_up() {
        let long_first = {
            let whole = frame(9, &payload());
            let mut p = piece(&whole, 0, 64, true);
            // IHL 15: 40 octets of options (NOPs) after the 20.
            p[ETHERNET] = 0x4f;
            let mut out = p[..ETHERNET + HEADER].to_vec();
            out.extend_from_slice(&[1; 40]);
            out.extend_from_slice(&p[ETHERNET + HEADER..]);
            let total = (60 + 64) as u16;
            out[ETHERNET + 2..ETHERNET + 4].copy_from_slice(&total.to_be_bytes());
            out
        };
        let last = {
            let whole = frame(9, &payload());
            let mut out = whole[..ETHERNET + HEADER].to_vec();
            out.extend_from_slice(&[2; 16]);
            let total = (HEADER + 16) as u16;
            out[ETHERNET + 2..ETHERNET + 4].copy_from_slice(&total.to_be_bytes());
            // Offset 65,496 (8,187 units), MF clear: it ends at 65,512.
            let flags = 8187u16;
            out[ETHERNET + 6..ETHERNET + 8].copy_from_slice(&flags.to_be_bytes());
            out
        };
        let mut defrag = Defragmenter::new(&[TCP]);
        assert_eq!(defrag.push(1, 0, linktype::ETHERNET, &last), Defrag::Held);
        assert_eq!(
            defrag.push(2, 0, linktype::ETHERNET, &long_first),
            Defrag::Held
        );
        assert_eq!(defrag.stats().fragments_dropped, 2);
        assert!(defrag.datagrams.is_empty());
    }

    /// A datagram in more than [`RANGES_MAX`] separate pieces is given up.
    #[test]
    fn a_datagram_in_too_many_pieces_is_given_up() {
        let big = frame(11, &[7u8; 2000]);
        let mut defrag = Defragmenter::new(&[TCP]);
        // Every other 8-octet piece: separate ranges.
        for k in 0..=RANGES_MAX {
            let from = 16 * k + 8;
            let held = defrag.push(
                k as u64 + 1,
                0,
                linktype::ETHERNET,
                &piece(&big, from, from + 8, true),
            );
            assert_eq!(held, Defrag::Held);
        }
        assert_eq!(defrag.stats().fragments_dropped, RANGES_MAX as u64 + 1);
        assert!(defrag.datagrams.is_empty());
    }
}
