//! sctp-lite's sans-IO endpoint (`sctp_lite::Endpoint`, sctp-proto's
//! associations in UDP, RFC 6951) on damaged and foreign datagrams.
//!
//! Two endpoints run an association in virtual time: A connects, B
//! accepts. Every datagram either sends waits in a queue per direction,
//! and the input decides what happens to the queue heads: delivered,
//! dropped, duplicated, reordered, or mutated (bits flipped, octets set,
//! truncated, grown) with the CRC32c put right again (RFC 9260 §6.8), so
//! that the damage reaches the chunk parsers. The input also injects raw
//! datagrams from the peer's address or from strangers (new INITs beyond
//! `associations_max`), sends messages of any PPID, aborts, shuts down and reconnects,
//! and moves time. sctp-proto draws verification tags and cookies at
//! random, so the same input need not replay the same association: the
//! mutations are chosen relative to the datagrams, not their contents.
//!
//! Input: a 2-octet header (see [`configs`]), then records `op (1)` and its
//! operands (see [`run_op`]).
//!
//! Asserts: no panic; per endpoint at most `associations_max`
//! associations; no message read is longer than `message_size_max`, and
//! only associations reported `Up` (and not closed since) deliver; every
//! association reports `Up` or `Refused` at most once and before `Closed`,
//! and nothing after `Refused` or `Closed`; no packet sent is longer than
//! `packet_size_max`.
#![no_main]

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};

use libfuzzer_sys::fuzz_target;
use rnic_engine::mpa::crc::crc32c;
use sctp_lite::{AssocId, Config, Duration, Endpoint, EventKind, Instant};

/// Datagrams waiting per direction at most; beyond, new ones are lost.
const QUEUE_MAX: usize = 64;
/// Datagrams taken from one endpoint per pump, at most.
const PUMP_MAX: usize = 64;
/// Octets a mutation appends to a datagram, at most.
const GROW_MAX: usize = 9000;
/// Records of one input, at most.
const OPS_MAX: usize = 512;
/// The SCTP common header (RFC 9260 §3.1) and where its checksum sits.
const COMMON_HEADER_LEN: usize = 12;
const CHECKSUM: core::ops::Range<usize> = 8..12;

/// Which endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    A,
    B,
}

/// What an endpoint reported about an association so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Up,
    Gone,
}

struct Node {
    endpoint: Endpoint,
    addr: SocketAddr,
    lives: HashMap<AssocId, Life>,
    /// Datagrams it sent to its peer, not yet delivered.
    queue: VecDeque<Vec<u8>>,
    assoc: Option<AssocId>,
}

struct World {
    a: Node,
    b: Node,
    now: Instant,
    buf: Vec<u8>,
}

fn addr(host: u8) -> SocketAddr {
    SocketAddr::from((
        Ipv4Addr::new(10, 0, 0, host),
        sctp_lite::UDP_ENCAPSULATION_PORT,
    ))
}

/// Header octet 0: bit 0 B does not require DDP, bit 1 A sends no
/// adaptation indication, bit 2 A sends code point 2 (not DDP, RFC 5043
/// §7.1), bits 4-5 B's `associations_max` less one. Octet 1: the path MTU
/// (1500 for 0, else from `PATH_MTU_MIN` in steps of 8), so that messages and packets of
/// every size reach their bounds.
fn configs(h: [u8; 2]) -> (Config, Config) {
    let path_mtu = match h[1] {
        0 => 1500,
        m => sctp_lite::PATH_MTU_MIN - 8 + 8 * u32::from(m),
    };
    let base = Config {
        associations_max: 2,
        streams: 4,
        path_mtu,
        receive_window: 8192,
        send_buffer_max: 8192,
        ..Config::default()
    };
    let a = Config {
        adaptation_code_point: match h[0] & 6 {
            0 => Some(sctp_lite::ADAPTATION_CODE_POINT_DDP),
            4 => Some(2),
            _ => None,
        },
        ..base.clone()
    };
    let b = Config {
        require_ddp: h[0] & 1 == 0,
        associations_max: usize::from((h[0] >> 4) & 3) + 1,
        ..base
    };
    (a, b)
}

impl World {
    fn node(&mut self, side: Side) -> &mut Node {
        match side {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// `from`'s datagram arrives at the other side from `from`'s address.
    fn deliver(&mut self, from: Side, datagram: &[u8]) {
        let (source, to) = match from {
            Side::A => (self.a.addr, &mut self.b),
            Side::B => (self.b.addr, &mut self.a),
        };
        to.endpoint.handle_datagram(self.now, source, datagram);
    }

    /// Collects what both endpoints send, report and deliver, checking it.
    fn pump(&mut self) {
        for side in [Side::A, Side::B] {
            let now = self.now;
            let node = match side {
                Side::A => &mut self.a,
                Side::B => &mut self.b,
            };
            let peer = match side {
                Side::A => addr(2),
                Side::B => addr(1),
            };
            pump_node(node, now, peer, &mut self.buf);
        }
    }
}

fn pump_node(node: &mut Node, now: Instant, peer: SocketAddr, buf: &mut [u8]) {
    let config = node.endpoint.config().clone();
    for _ in 0..PUMP_MAX {
        let Some(t) = node.endpoint.poll_transmit(now, buf) else {
            break;
        };
        assert!(
            t.len <= config.packet_size_max(),
            "a packet of {} octets above packet_size_max {}: {:02x?}",
            t.len,
            config.packet_size_max(),
            &buf[..t.len]
        );
        // Strangers (injected INITs) get no answer: nobody is there.
        if t.remote == peer && node.queue.len() < QUEUE_MAX {
            node.queue.push_back(buf[..t.len].to_vec());
        }
    }
    while let Some(event) = node.endpoint.poll_event() {
        let life = node.lives.get(&event.assoc).copied();
        match (event.kind, life) {
            (EventKind::Up { .. }, None) => {
                node.lives.insert(event.assoc, Life::Up);
            }
            (EventKind::Refused { .. }, None) | (EventKind::Closed(_), None | Some(Life::Up)) => {
                node.lives.insert(event.assoc, Life::Gone);
            }
            (kind, life) => panic!("{kind:?} for {} after {life:?}", event.assoc),
        }
    }
    assert!(node.endpoint.associations() <= config.associations_max);
    while let Some(r) = node.endpoint.recv(buf) {
        assert!(
            r.len <= config.receive_message_max(),
            "a message of {} octets",
            r.len
        );
        assert_eq!(
            node.lives.get(&r.assoc),
            Some(&Life::Up),
            "data on {}",
            r.assoc
        );
    }
}

/// Puts the CRC32c of an SCTP packet right (RFC 9260 §6.8: computed with
/// the checksum field zero, stored as sctp-proto writes it).
fn fix_checksum(packet: &mut [u8]) {
    if packet.len() >= COMMON_HEADER_LEN {
        packet[CHECKSUM].fill(0);
        let crc = crc32c(packet);
        packet[CHECKSUM].copy_from_slice(&crc.to_le_bytes());
    }
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(rest.len());
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    head
}

fn be16(octets: &[u8]) -> usize {
    match *octets {
        [a, b] => usize::from(u16::from_be_bytes([a, b])),
        [a] => usize::from(a),
        _ => 0,
    }
}

/// One record. `op % 8`, with `side` = bit 3 (0: A's queue or A acts):
/// 0 deliver `(op >> 4) + 1` datagrams; 1 drop one; 2 deliver a copy and
/// keep it; 3 mutate the next one in place (deliver it with 0): `kind (1)
/// | at (2) | value (1)`, kind % 5 flips `value`'s bits at `at`, sets the
/// octet, truncates to `at`, appends `at` octets of `value`, or swaps the
/// first two, and bit 7 of kind leaves the CRC as it is; 4 inject
/// `to_and_from (1) | len (2) | octets`; 5 time passes, `(op >> 3) * 50 ms
/// + 1 ms`; 6 send `stream (1) | ppid (1) | len (2)`, unordered with bit 4;
/// 7 abort (bit 4 clear) or connect again (bit 4 set).
fn run_op(world: &mut World, op: u8, rest: &mut &[u8]) {
    let side = if op & 8 == 0 { Side::A } else { Side::B };
    match op % 8 {
        0 => {
            for _ in 0..=(op >> 4) {
                let Some(d) = world.node(side).queue.pop_front() else {
                    break;
                };
                world.deliver(side, &d);
            }
        }
        1 => {
            world.node(side).queue.pop_front();
        }
        2 => {
            if let Some(d) = world.node(side).queue.front().cloned() {
                world.deliver(side, &d);
            }
        }
        3 => mutate(world, side, rest),
        4 => inject(world, rest),
        5 => {
            world.now += Duration::from_millis(50 * u64::from(op >> 3) + 1);
            let now = world.now;
            world.a.endpoint.handle_timeout(now);
            world.b.endpoint.handle_timeout(now);
        }
        6 => send(world, side, op & 16 != 0, rest),
        _ => {
            let now = world.now;
            let node = world.node(side);
            if op & 16 == 0 {
                if let Some(assoc) = node.assoc {
                    let _ = node.endpoint.abort(assoc);
                }
            } else if op & 32 != 0 {
                // A graceful close (RFC 9260 §9.2): what was received before
                // it is still read, then `Closed`.
                if let Some(assoc) = node.assoc {
                    let _ = node.endpoint.shutdown(assoc);
                }
            } else if side == Side::A {
                node.assoc = node.endpoint.connect(now, addr(2)).ok().or(node.assoc);
            }
        }
    }
}

fn mutate(world: &mut World, side: Side, rest: &mut &[u8]) {
    let operands = take(rest, 4);
    let [kind, at_hi, at_lo, value] = *operands else {
        return;
    };
    let at = usize::from(u16::from_be_bytes([at_hi, at_lo]));
    let queue = &mut world.node(side).queue;
    if kind % 5 == 4 {
        if queue.len() >= 2 {
            queue.swap(0, 1);
        }
        return;
    }
    let Some(d) = queue.front_mut() else { return };
    match kind % 5 {
        0 if !d.is_empty() => {
            let i = at % d.len();
            d[i] ^= value.max(1);
        }
        1 if !d.is_empty() => {
            let i = at % d.len();
            d[i] = value;
        }
        2 => d.truncate(at % (d.len() + 1)),
        // Grown: the peer's packets may be longer than ours.
        3 => d.extend(std::iter::repeat_n(value, at % GROW_MAX)),
        _ => {}
    }
    if kind & 0x80 == 0 {
        fix_checksum(d);
    }
}

/// A raw datagram to A (bit 0 clear) or B, from the peer (bits 1-2 zero)
/// or from one of three strangers; bit 3 puts its CRC32c right.
fn inject(world: &mut World, rest: &mut &[u8]) {
    let Some(&how) = take(rest, 1).first() else {
        return;
    };
    let len = be16(take(rest, 2));
    let mut d = take(rest, len).to_vec();
    if how & 8 != 0 {
        fix_checksum(&mut d);
    }
    let stranger = (how >> 1) & 3;
    let (to, peer) = if how & 1 == 0 {
        (&mut world.a, addr(2))
    } else {
        (&mut world.b, addr(1))
    };
    let source = if stranger == 0 {
        peer
    } else {
        addr(10 + stranger)
    };
    to.endpoint.handle_datagram(world.now, source, &d);
}

fn send(world: &mut World, side: Side, unordered: bool, rest: &mut &[u8]) {
    let operands = take(rest, 4);
    let [stream, ppid, len_hi, len_lo] = *operands else {
        return;
    };
    let ppid = match ppid % 4 {
        0 => sctp_lite::PPID_DDP_SEGMENT,
        1 => sctp_lite::PPID_DDP_STREAM_SESSION_CONTROL,
        _ => u32::from(ppid),
    };
    let len = usize::from(u16::from_be_bytes([len_hi, len_lo]));
    let message: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let node = world.node(side);
    if let Some(assoc) = node.assoc {
        // Refusals are typed errors (full, too large, not up): fine here.
        let _ = node
            .endpoint
            .send(assoc, u16::from(stream % 5), ppid, unordered, &message);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((h, mut rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let (config_a, config_b) = configs(*h);
    #[allow(clippy::disallowed_methods)]
    // Only the origin of sctp-proto's time; see Endpoint::new.
    let epoch = std::time::Instant::now();
    let node = |config: Config, host: u8| Node {
        endpoint: Endpoint::new(config, epoch).expect("a valid config"),
        addr: addr(host),
        lives: HashMap::new(),
        queue: VecDeque::new(),
        assoc: None,
    };
    let mut world = World {
        a: node(config_a, 1),
        b: node(config_b, 2),
        now: Instant::ZERO,
        buf: vec![0; 65_536],
    };
    world.a.assoc = world.a.endpoint.connect(world.now, addr(2)).ok();
    world.pump();
    let mut ops = 0;
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        run_op(&mut world, op, &mut rest);
        world.pump();
        // B's association is the one A's INIT made: the first Up.
        if world.b.assoc.is_none() {
            world.b.assoc = world
                .b
                .lives
                .iter()
                .find(|(_, l)| **l == Life::Up)
                .map(|(a, _)| *a);
        }
        ops += 1;
        if ops >= OPS_MAX {
            break;
        }
    }
    // Then a clean link for a while: whatever state the damage left must
    // still follow the rules (retransmissions, shutdown, timeouts).
    for _ in 0..64 {
        let mut moved = false;
        for side in [Side::A, Side::B] {
            while let Some(d) = world.node(side).queue.pop_front() {
                world.deliver(side, &d);
                moved = true;
            }
        }
        world.pump();
        if !moved {
            let due = [
                world.a.endpoint.poll_timeout(),
                world.b.endpoint.poll_timeout(),
            ];
            let Some(next) = due.into_iter().flatten().min() else {
                break;
            };
            world.now = world.now.max(next);
            let now = world.now;
            world.a.endpoint.handle_timeout(now);
            world.b.endpoint.handle_timeout(now);
            world.pump();
        }
    }
});
