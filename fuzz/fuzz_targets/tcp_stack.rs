//! tcp-lite's `Stack` against a hostile peer: arbitrary TCP segments (and
//! arbitrary IP packets) into a stack that listens, has connections open and
//! an application that reads, writes, closes, aborts and releases, while
//! virtual time moves on. The stack is polled with `poll_direct`, whose
//! receiver takes all, none or part of each in-order run offered (as the
//! input says).
//!
//! The link is IP-medium with checksums ignored, so the fuzzer's segments
//! reach TCP. Asserts: no panic and no hang; open connections never exceed
//! `max_connections`; every event names a connection that was not released,
//! and no connection reports anything after its final event; each
//! connection's octets reach the application once, in order: the stream
//! position of every run offered straight from a segment or read from the
//! buffer is where the last one ended.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tcp_lite::link::{self, LinkConfig};
use tcp_lite::smoltcp::phy::{Device, Medium, RxToken, TxToken};
use tcp_lite::smoltcp::wire::{IpProtocol, Ipv4Packet, TcpPacket};
use tcp_lite::{ConnId, Duration, Instant, Stack, StackConfig, Transport};

const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const LISTEN_PORT: u16 = 80;
const MAX_CONNECTIONS: usize = 6;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A TCP segment from the peer; ports picked from a few so they match.
    Segment {
        src_port: u8,
        dst_port: u8,
        seq: u32,
        ack: u32,
        flags: u8,
        window: u16,
        header_words: u8,
        options: [u8; 12],
        payload: Vec<u8>,
    },
    /// Any IPv4 payload (after a valid header to us).
    Raw(Vec<u8>),
    Advance(u16),
    Recv(u8),
    Send(u8, u16),
    Close(u8),
    Abort(u8),
    Release(u8),
    Connect(u8),
    /// How much of each run `poll_direct` offers the application takes
    /// from now on: none (0), all (255), or that share in 256ths.
    Take(u8),
    /// A segment that answers the stack's last one in order (its
    /// sequence number the stack's acknowledgement, acknowledging all the
    /// stack sent): how the fuzzer completes handshakes and sends data the
    /// stack takes, without guessing the stack's initial sequence number.
    Answer {
        flags: u8,
        window: u16,
        payload: Vec<u8>,
    },
}

/// The stack's last segment: its ports (ours, the peer's), sequence and
/// acknowledgement numbers, and the sequence space it took.
#[derive(Clone, Copy)]
struct Sent {
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    len: u32,
    syn: bool,
}

fn port(sel: u8) -> u16 {
    match sel % 4 {
        0 => LISTEN_PORT,
        1 => 49152,
        2 => 49153,
        _ => 1000 + u16::from(sel),
    }
}

fn ip_packet(payload_len: usize, buf: &mut [u8]) {
    let mut ip = Ipv4Packet::new_unchecked(buf);
    ip.set_version(4);
    ip.set_header_len(20);
    ip.set_dscp(0);
    ip.set_ecn(0);
    ip.set_total_len((20 + payload_len) as u16);
    ip.set_ident(0);
    ip.clear_flags();
    ip.set_frag_offset(0);
    ip.set_hop_limit(64);
    ip.set_next_header(IpProtocol::Tcp);
    ip.set_src_addr(PEER);
    ip.set_dst_addr(US);
    ip.fill_checksum();
}

/// Writes a TCP segment from the peer into `buf` (an IPv4 packet).
#[allow(clippy::too_many_arguments)]
fn segment(
    buf: &mut [u8],
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: &[u8],
    payload: &[u8],
) {
    let header = 20 + options.len();
    ip_packet(header + payload.len(), buf);
    let mut tcp = TcpPacket::new_unchecked(&mut buf[20..]);
    tcp.set_src_port(ports.0);
    tcp.set_dst_port(ports.1);
    tcp.set_seq_number(tcp_lite::smoltcp::wire::TcpSeqNumber(seq as i32));
    tcp.set_ack_number(tcp_lite::smoltcp::wire::TcpSeqNumber(ack as i32));
    tcp.set_header_len(header as u8);
    let raw = tcp.into_inner();
    raw[13] = flags;
    raw[14..16].copy_from_slice(&window.to_be_bytes());
    raw[16..20].fill(0);
    raw[20..header].copy_from_slice(options);
    raw[header..].copy_from_slice(payload);
}

/// The TCP segment in an IPv4 packet the stack sent, if it is one.
fn sent(packet: &[u8]) -> Option<Sent> {
    let ip = Ipv4Packet::new_checked(packet).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let len = tcp.payload().len() as u32 + u32::from(tcp.syn()) + u32::from(tcp.fin());
    Some(Sent {
        ports: (tcp.src_port(), tcp.dst_port()),
        seq: tcp.seq_number().0 as u32,
        ack: tcp.ack_number().0 as u32,
        len,
        syn: tcp.syn(),
    })
}

fuzz_target!(|ops: Vec<Op>| {
    let mut config = LinkConfig::ethernet(1500);
    config.medium = Medium::Ip;
    config.mtu = 1500;
    config.checksums = false;
    let (mut peer, end) = link::pair(config, 1);
    let mut stack_config = StackConfig::new([0; 6], US);
    stack_config.mac = None;
    stack_config.max_connections = MAX_CONNECTIONS;
    stack_config.backlog = 2;
    stack_config.tcp.rx_buffer = 4096;
    stack_config.tcp.tx_buffer = 4096;
    stack_config.tcp.user_timeout = Duration::from_secs(3);
    let mut now = Instant::ZERO;
    let mut stack = Stack::new(stack_config, end, now).expect("config");
    stack.listen(LISTEN_PORT).expect("listen");
    // Every frame's headers looked at for a SYN's class.
    stack.reflect_dscp(true);
    let mut conns: Vec<ConnId> = Vec::new();
    let mut released: HashSet<ConnId> = HashSet::new();
    let mut finished: HashSet<ConnId> = HashSet::new();
    let pick =
        |conns: &[ConnId], sel: u8| conns.get(usize::from(sel) % conns.len().max(1)).copied();
    // Where each connection's next octet is, for the application.
    let mut next_at: HashMap<ConnId, u64> = HashMap::new();
    let mut take = 255u8;
    let mut last: Option<Sent> = None;

    for op in ops.into_iter().take(256) {
        match op {
            Op::Segment {
                src_port,
                dst_port,
                seq,
                ack,
                flags,
                window,
                header_words,
                options,
                payload,
            } => {
                let payload = &payload[..payload.len().min(1400)];
                let header = 4 * usize::from(5 + header_words % 4);
                let len = 20 + header + payload.len();
                let token = peer.transmit(now).expect("link transmit");
                token.consume(len, |buf| {
                    let ports = (port(src_port), port(dst_port));
                    let options = &options[..header - 20];
                    segment(buf, ports, seq, ack, flags, window, options, payload);
                });
            }
            Op::Answer {
                flags,
                window,
                payload,
            } => {
                if let Some(last) = last {
                    let payload = &payload[..payload.len().min(1400)];
                    let token = peer.transmit(now).expect("link transmit");
                    token.consume(40 + payload.len(), |buf| {
                        // ACK always; SYN only where the stack's was one
                        // (a SYN-ACK to its SYN); FIN, RST, PSH as given.
                        let syn = if last.syn { flags & 0x02 } else { 0 };
                        let flags = (flags & 0x0D) | 0x10 | syn;
                        let ports = (last.ports.1, last.ports.0);
                        let ack = last.seq.wrapping_add(last.len);
                        segment(buf, ports, last.ack, ack, flags, window, &[], payload);
                    });
                }
            }
            Op::Raw(bytes) => {
                let bytes = &bytes[..bytes.len().min(1480)];
                let token = peer.transmit(now).expect("link transmit");
                token.consume(20 + bytes.len(), |buf| {
                    ip_packet(bytes.len(), buf);
                    buf[20..].copy_from_slice(bytes);
                });
            }
            Op::Advance(ms) => now += Duration::from_millis(u64::from(ms)),
            Op::Recv(sel) => {
                if let Some(c) = pick(&conns, sel) {
                    let _ = stack.recv_with(c, |d, at| {
                        let next = next_at.entry(c).or_insert(0);
                        assert_eq!(at, *next, "read at {at}, the stream was at {next}");
                        *next += d.len() as u64;
                        (d.len(), ())
                    });
                }
            }
            Op::Send(sel, n) => {
                if let Some(c) = pick(&conns, sel) {
                    let _ = stack.send_with(c, usize::from(n), |b| (b.len(), ()));
                    let _ = stack.segment_room(c);
                }
            }
            Op::Close(sel) => {
                if let Some(c) = pick(&conns, sel) {
                    let _ = stack.close(c);
                }
            }
            Op::Abort(sel) => {
                if let Some(c) = pick(&conns, sel) {
                    if stack.abort(c).is_ok() {
                        finished.insert(c);
                    }
                }
            }
            Op::Release(sel) => {
                if let Some(c) = pick(&conns, sel) {
                    stack.release(c);
                    released.insert(c);
                }
            }
            Op::Connect(sel) => {
                if let Ok(c) = stack.connect(SocketAddrV4::new(PEER, port(sel)), now) {
                    assert_eq!(
                        stack.peer_dscp(c),
                        None,
                        "an active open's peer sent no SYN"
                    );
                    conns.push(c);
                }
            }
            Op::Take(share) => take = share,
        }
        stack.poll_direct(now, &mut |c, d, at| {
            let next = next_at.entry(c).or_insert(0);
            assert_eq!(at, *next, "offered at {at}, the stream was at {next}");
            let n = match take {
                0 => 0,
                255 => d.len(),
                share => d.len() * usize::from(share) / 256,
            };
            *next += n as u64;
            n
        });
        while let Some(event) = stack.next_event() {
            assert!(
                !released.contains(&event.conn),
                "{event:?} for a released connection"
            );
            assert!(
                !finished.contains(&event.conn),
                "{event:?} after the final event"
            );
            if let tcp_lite::EventKind::Accepted(_) = event.kind {
                conns.push(event.conn);
                // The SYN that made it was learned in the poll that
                // received it: no other frame can have taken its entry.
                assert!(
                    stack.peer_dscp(event.conn).is_some(),
                    "an accepted connection's class was lost"
                );
            }
            if event.kind.is_final() {
                finished.insert(event.conn);
            }
        }
        assert!(
            stack.connections() <= MAX_CONNECTIONS,
            "{} connections",
            stack.connections()
        );
        // What the stack sent goes nowhere; its last segment is kept for
        // an Answer.
        while let Some((rx, _)) = peer.receive(now) {
            if let Some(s) = rx.consume(sent) {
                last = Some(s);
            }
        }
        if conns.len() > 64 {
            conns.drain(..32);
        }
    }
});
