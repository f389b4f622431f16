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

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::Ipv4Addr;

use smoltcp::phy::{Device, DeviceCapabilities, Medium, PacketMeta, RxToken, TxToken};
use smoltcp::time::Instant;

/// A connection, as its segments name it: our address and port, the
/// peer's address and port.
pub(crate) type Flow = (Ipv4Addr, u16, Ipv4Addr, u16);

/// A multiplicative hash of a flow's few words: looked up for every frame
/// while any connection is marked, where SipHash's rounds would cost more
/// than the rest of the look (the keys are the stack's own connections,
/// not chosen by a peer beyond its address and port).
#[derive(Default)]
pub(crate) struct FlowHasher(u64);

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
        self.0
    }
}

/// The DSCP of each marked connection, and the stack's slot it belongs
/// to.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    by_flow: HashMap<Flow, (u8, u32), BuildHasherDefault<FlowHasher>>,
}

impl Marks {
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
        let ip = match medium {
            Medium::Ethernet => {
                if frame.len() < 14 || frame[12..14] != [0x08, 0x00] {
                    return;
                }
                &mut frame[14..]
            }
            Medium::Ip => frame,
            #[allow(unreachable_patterns)]
            _ => return,
        };
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
            return;
        }
        let header = usize::from(ip[0] & 0x0F) * 4;
        // A fragment after the first carries no TCP header.
        let offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1FFF;
        if header < 20 || offset != 0 || ip.len() < header + 4 {
            return;
        }
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

/// A device whose transmitted frames [`Marks`] looks at.
pub(crate) struct Marking<'a, D: Device> {
    pub(crate) inner: &'a mut D,
    pub(crate) marks: &'a Marks,
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
        = MarkRx<D::RxToken<'b>>
    where
        Self: 'b;
    type TxToken<'b>
        = MarkTx<'b, D::TxToken<'b>>
    where
        Self: 'b;

    fn receive(&mut self, timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let (marks, medium, mend) = (self.marks, self.medium, self.mend);
        let (rx, tx) = self.inner.receive(timestamp)?;
        Some((
            MarkRx(rx),
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

/// A receive token of [`Marking`]: the device's, as it is.
pub(crate) struct MarkRx<T: RxToken>(T);

impl<T: RxToken> RxToken for MarkRx<T> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        self.0.consume(f)
    }

    fn meta(&self) -> PacketMeta {
        self.0.meta()
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
        let mut marks = Marks::default();
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
}
