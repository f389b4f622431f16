//! tcp-lite's sender against a hostile receiver's acknowledgements: a
//! connection whose peer permits SACK (RFC 2018) sends a known pattern, and
//! the fuzzer answers with arbitrary ACKs carrying arbitrary SACK blocks
//! (out of the window, inverted, overlapping, below the cumulative ACK,
//! beyond what was sent, more than four of them, raw option bytes), window
//! updates and time passing, while the application keeps writing.
//!
//! Asserts: no panic and no hang; every segment the sender puts on the wire
//! carries the pattern's octets at its sequence numbers (a retransmission
//! resends what was sent, nothing else), within what the application wrote;
//! the recovery counters are consistent; and once the fuzzer's turn is
//! over, an honest receiver (which acknowledges everything it saw) gets the
//! whole stream: no SACK sequence wedges the sender.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::smoltcp::phy::{Device, Medium, RxToken, TxToken};
use tcp_lite::smoltcp::wire::{IpProtocol, Ipv4Packet, TcpPacket, TcpSeqNumber};
use tcp_lite::{ConnId, Duration, Instant, Stack, StackConfig, Transport};

const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const PEER_PORT: u16 = 80;
/// The peer's MSS: small, so that a few KiB make many segments.
const MSS: u16 = 200;
/// What the application writes at most.
const STREAM: usize = 64 * 1024;

#[derive(Arbitrary, Debug)]
enum Op {
    /// An ACK: its number `ack` octets past the first data octet (clamped
    /// to what was sent, or not: `wild`), with SACK blocks given as
    /// (start, length) in the same terms, signed to reach below the ACK.
    Ack {
        ack: u16,
        wild: bool,
        window: u16,
        blocks: Vec<(i32, i32)>,
    },
    /// An ACK with raw option bytes (up to 40).
    RawOptions { ack: u16, options: Vec<u8> },
    /// The application writes.
    Write(u16),
    /// Time passes (microseconds).
    Advance(u16),
    /// Time passes for timers (milliseconds).
    AdvanceMs(u8),
}

/// The pattern's octet at stream offset `i`.
fn pattern(i: usize) -> u8 {
    (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8
}

struct Peer {
    link: LinkEnd,
    /// Our first data octet's sequence number, once the handshake is done.
    isn: Option<TcpSeqNumber>,
    /// Our port.
    port: u16,
    /// The peer's own sequence number (it sends no data).
    peer_seq: TcpSeqNumber,
    /// The highest stream offset seen on the wire.
    highest: usize,
    /// What the peer has received, by stream offset (to acknowledge at the
    /// end).
    received: Vec<bool>,
}

impl Peer {
    fn segment(&mut self, now: Instant, ack: TcpSeqNumber, flags: u8, window: u16, options: &[u8]) {
        let options = &options[..options.len().min(40)];
        let header = 20 + options.len().div_ceil(4) * 4;
        let token = self.link.transmit(now).expect("link transmit");
        let (port, seq) = (self.port, self.peer_seq);
        token.consume(20 + header, |buf| {
            let mut ip = Ipv4Packet::new_unchecked(&mut buf[..]);
            ip.set_version(4);
            ip.set_header_len(20);
            ip.set_dscp(0);
            ip.set_ecn(0);
            ip.set_total_len((20 + header) as u16);
            ip.set_ident(0);
            ip.clear_flags();
            ip.set_frag_offset(0);
            ip.set_hop_limit(64);
            ip.set_next_header(IpProtocol::Tcp);
            ip.set_src_addr(PEER);
            ip.set_dst_addr(US);
            ip.fill_checksum();
            let mut tcp = TcpPacket::new_unchecked(&mut buf[20..]);
            tcp.set_src_port(PEER_PORT);
            tcp.set_dst_port(port);
            tcp.set_seq_number(seq);
            tcp.set_ack_number(ack);
            tcp.set_header_len(header as u8);
            let raw = tcp.into_inner();
            raw[13] = flags;
            raw[14..16].copy_from_slice(&window.to_be_bytes());
            raw[16..20].fill(0);
            raw[20..20 + options.len()].copy_from_slice(options);
            raw[20 + options.len()..header].fill(0);
        });
    }

    /// Takes what the stack sent: the SYN (answered with SYN-ACK, SACK
    /// permitted), and data segments, checked against the pattern.
    fn take(&mut self, now: Instant, written: usize) -> Option<TcpSeqNumber> {
        let mut syn = None;
        while let Some((rx, _)) = self.link.receive(now) {
            rx.consume(|frame| {
                let Ok(ip) = Ipv4Packet::new_checked(frame) else {
                    return;
                };
                let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
                    return;
                };
                if tcp.syn() {
                    self.port = tcp.src_port();
                    syn = Some(tcp.seq_number());
                    return;
                }
                let Some(isn) = self.isn else { return };
                let payload = tcp.payload();
                if payload.is_empty() {
                    return;
                }
                let start = (tcp.seq_number().0.wrapping_sub(isn.0)) as u32 as usize;
                assert!(
                    start + payload.len() <= written,
                    "sent {}..{} of {written} written",
                    start,
                    start + payload.len()
                );
                for (k, &b) in payload.iter().enumerate() {
                    assert_eq!(b, pattern(start + k), "octet {} on the wire", start + k);
                }
                self.highest = self.highest.max(start + payload.len());
                for r in &mut self.received[start..start + payload.len()] {
                    *r = true;
                }
            });
        }
        syn
    }

    /// The peer acknowledged `[0, ack)`: the sender may forget it, so it
    /// counts as received (a cumulative ACK is binding; SACK blocks are
    /// not, RFC 2018 §8). The sender takes an ACK up to the end of what it
    /// sent (the highest offset seen on the wire, a zero-window probe's
    /// octet included); one beyond, of data queued but not sent or not
    /// written at all, is answered with an ACK and dropped (RFC 9293
    /// §3.10.7.4, RFC 5961 §5.2).
    fn claim(&mut self, ack: usize) {
        if ack <= self.highest {
            for r in &mut self.received[..ack] {
                *r = true;
            }
        }
    }

    /// The sequence number of stream offset `o`.
    fn seq(&self, o: i64) -> u32 {
        (self.isn.expect("established").0 as i64 + o) as u32
    }
}

fn sack_option(blocks: &[(u32, u32)]) -> Vec<u8> {
    let mut o = vec![1, 1, 5, (2 + 8 * blocks.len()) as u8];
    for &(l, r) in blocks {
        o.extend_from_slice(&l.to_be_bytes());
        o.extend_from_slice(&r.to_be_bytes());
    }
    o
}

fuzz_target!(|ops: Vec<Op>| {
    let mut config = LinkConfig::ethernet(1500);
    config.medium = Medium::Ip;
    config.mtu = 1500;
    config.checksums = false;
    let (peer_link, end) = link::pair(config, 1);
    let mut stack_config = StackConfig::new([0; 6], US);
    stack_config.mac = None;
    stack_config.tcp.rx_buffer = 4096;
    stack_config.tcp.tx_buffer = 16 * 1024;
    stack_config.tcp.rto_min = Duration::from_millis(5);
    stack_config.tcp.user_timeout = Duration::from_secs(3600);
    let mut now = Instant::ZERO;
    let mut stack = Stack::new(stack_config, end, now).expect("config");
    let conn: ConnId = stack
        .connect(SocketAddrV4::new(PEER, PEER_PORT), now)
        .expect("connect");
    let mut peer = Peer {
        link: peer_link,
        isn: None,
        port: 0,
        peer_seq: TcpSeqNumber(1_000_000),
        highest: 0,
        received: vec![false; STREAM],
    };
    // The handshake: SYN-ACK with MSS, window scale 0 and SACK permitted.
    stack.poll(now);
    let syn = peer.take(now, 0).expect("a SYN");
    peer.isn = Some(syn + 1);
    let syn_ack_options = [2, 4, (MSS >> 8) as u8, MSS as u8, 1, 3, 3, 0, 1, 1, 4, 2];
    peer.segment(now, syn + 1, 0x12, 65535, &syn_ack_options);
    peer.peer_seq = peer.peer_seq + 1;
    stack.poll(now);
    while stack.next_event().is_some() {}
    let mut written = 0usize;

    let step = |stack: &mut Stack<LinkEnd>, peer: &mut Peer, now: Instant, written: usize| {
        stack.poll(now);
        while stack.next_event().is_some() {}
        peer.take(now, written);
    };
    for op in ops.into_iter().take(512) {
        match op {
            Op::Ack {
                ack,
                wild,
                window,
                blocks,
            } => {
                let ack = if wild {
                    ack as usize
                } else {
                    (ack as usize).min(peer.highest)
                };
                let blocks: Vec<(u32, u32)> = blocks
                    .iter()
                    .take(6)
                    .map(|&(s, len)| {
                        let s = i64::from(s % 70_000);
                        (peer.seq(s), peer.seq(s + i64::from(len % 70_000)))
                    })
                    .collect();
                let options = if blocks.is_empty() {
                    Vec::new()
                } else {
                    sack_option(&blocks)
                };
                peer.claim(ack);
                let ack = TcpSeqNumber(peer.seq(ack as i64) as i32);
                peer.segment(now, ack, 0x10, window, &options);
            }
            Op::RawOptions { ack, options } => {
                let ack = (ack as usize).min(peer.highest);
                peer.claim(ack);
                let ack = TcpSeqNumber(peer.seq(ack as i64) as i32);
                peer.segment(now, ack, 0x10, 4096, &options);
            }
            Op::Write(n) => {
                let n = usize::from(n).min(STREAM - written);
                if n > 0 {
                    let w = stack
                        .send_with(conn, n, |b| {
                            for (k, x) in b.iter_mut().enumerate() {
                                *x = pattern(written + k);
                            }
                            (b.len(), b.len())
                        })
                        .unwrap_or(0);
                    written += w;
                    let _ = stack.segment_room(conn);
                }
            }
            Op::Advance(us) => now += Duration::from_micros(u64::from(us)),
            Op::AdvanceMs(ms) => now += Duration::from_millis(u64::from(ms)),
        }
        step(&mut stack, &mut peer, now, written);
        if let Ok(stats) = stack.recovery_stats(conn) {
            assert!(stats.retransmitted_octets >= stats.retransmits, "{stats:?}");
        }
    }

    // An honest receiver now: it acknowledges the contiguous stream it
    // holds (SACKing the rest) and the sender's timers repair the holes.
    // The whole stream arrives in bounded virtual time, or the sender is
    // wedged.
    let Ok(_) = stack.recovery_stats(conn) else {
        // A wild ACK reset the connection (an ACK beyond what was sent is
        // answered, not taken; a RST only if the fuzzer's flags said so):
        // nothing more to check.
        return;
    };
    let deadline = now + Duration::from_secs(600);
    loop {
        let contiguous = peer
            .received
            .iter()
            .position(|&r| !r)
            .unwrap_or(STREAM)
            .min(written);
        if contiguous >= written {
            break;
        }
        assert!(
            now < deadline,
            "wedged: {contiguous} of {written} delivered"
        );
        let ack = TcpSeqNumber(peer.seq(contiguous as i64) as i32);
        // One SACK block: the first run held past the hole.
        let mut blocks = Vec::new();
        if let Some(l) = (contiguous..written).find(|&i| peer.received[i]) {
            let r = (l..written).find(|&i| !peer.received[i]).unwrap_or(written);
            blocks.push((peer.seq(l as i64), peer.seq(r as i64)));
        }
        let options = if blocks.is_empty() {
            Vec::new()
        } else {
            sack_option(&blocks)
        };
        peer.segment(now, ack, 0x10, 65535, &options);
        step(&mut stack, &mut peer, now, written);
        now += Duration::from_millis(5);
        step(&mut stack, &mut peer, now, written);
    }
});
