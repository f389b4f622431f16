//! Packets no larger than our own, whatever the peer sends: a HEARTBEAT
//! ACK carries the HEARTBEAT's information back unchanged (RFC 9260
//! §3.3.6), so a peer's oversize HEARTBEAT asked for an oversize answer,
//! which `poll_transmit` wrote into a buffer of `packet_size_max` octets
//! and panicked (found by the `sctp_datagram` fuzz target's assertion that
//! no packet sent exceeds `packet_size_max`); and the smallest path MTU
//! still carries the handshake. Also: a packet with the association's tag
//! from another address is not its peer's.

mod support;

use std::net::{Ipv4Addr, SocketAddr};

use sctp_lite::{Config, Endpoint, EventKind, Instant};
use support::{addr, sent};

/// Two endpoints with `config` associated in memory; the last datagram A
/// sent to B.
fn associated(config: Config) -> (Endpoint, Endpoint, Vec<u8>) {
    associated_as(config.clone(), config)
}

/// [`associated`] with A on `config_a` and B on `config_b`.
fn associated_as(config_a: Config, config_b: Config) -> (Endpoint, Endpoint, Vec<u8>) {
    #[allow(clippy::disallowed_methods)] // Only the origin of sctp-proto's time.
    let epoch = std::time::Instant::now();
    let mut buf = vec![0u8; config_a.packet_size_max().max(config_b.packet_size_max())];
    let mut a = Endpoint::new(config_a, epoch).unwrap();
    let mut b = Endpoint::new(config_b, epoch).unwrap();
    let now = Instant::ZERO;
    let assoc = a.connect(now, addr(2)).unwrap();
    let mut last_from_a = Vec::new();
    for _ in 0..8 {
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            last_from_a = buf[..t.len].to_vec();
            b.handle_datagram(now, addr(1), &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(now, addr(2), &buf[..t.len]);
        }
    }
    assert!(a.is_up(assoc));
    assert!(std::iter::from_fn(|| b.poll_event()).any(|e| matches!(e.kind, EventKind::Up { .. })));
    (a, b, last_from_a)
}

/// A HEARTBEAT (RFC 9260 §3.3.5) with `info_len` octets of Heartbeat
/// Information, in a packet with `header`'s ports and verification tag,
/// its CRC32c (RFC 9260 §6.8) right.
fn heartbeat(header: &[u8], info_len: usize) -> Vec<u8> {
    let param_len = 4 + info_len;
    let mut chunk = vec![4, 0];
    chunk.extend_from_slice(&((4 + param_len) as u16).to_be_bytes());
    chunk.extend_from_slice(&1u16.to_be_bytes());
    chunk.extend_from_slice(&(param_len as u16).to_be_bytes());
    chunk.extend((0..info_len).map(|i| i as u8));
    with_chunk(header, &chunk)
}

/// A packet with `header`'s ports and verification tag carrying `chunk`,
/// its CRC32c (RFC 9260 §6.8) right.
fn with_chunk(header: &[u8], chunk: &[u8]) -> Vec<u8> {
    let mut packet = header[..12].to_vec();
    packet.extend_from_slice(chunk);
    while !packet.len().is_multiple_of(4) {
        packet.push(0);
    }
    packet[8..12].fill(0);
    let crc = crc32c(&packet);
    packet[8..12].copy_from_slice(&crc.to_le_bytes());
    packet
}

/// CRC32c, bit by bit (Castagnoli, reflected 0x82F63B78).
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &octet in data {
        crc ^= u32::from(octet);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_heartbeat_longer_than_our_packets_gets_no_answer() {
    let (_, mut b, from_a) = associated(Config::default());
    let max = Config::default().packet_size_max();
    let mut buf = vec![0u8; max];
    // Up to our packet size: answered with a HEARTBEAT ACK (type 5) of the
    // same length. Beyond it (3,000 and 9,000 octets of information, as a
    // peer with a larger MTU or a forged packet may send): no answer.
    let largest = max - 12 - 4 - 4;
    for (info_len, answered) in [
        (100, true),
        (largest, true),
        (largest + 4, false),
        (3000, false),
        (9000, false),
    ] {
        let request = heartbeat(&from_a, info_len);
        b.handle_datagram(Instant::ZERO, addr(1), &request);
        let mut acks = Vec::new();
        while let Some(t) = b.poll_transmit(Instant::ZERO, &mut buf) {
            assert!(t.len <= max);
            if buf[12] == 5 {
                acks.push(t.len);
            }
        }
        let want = if answered {
            vec![request.len()]
        } else {
            Vec::new()
        };
        assert_eq!(acks, want, "{info_len} octets of information");
    }
}

#[test]
fn the_smallest_path_mtu_carries_the_handshake() {
    let config = Config {
        path_mtu: sctp_lite::PATH_MTU_MIN,
        receive_window: 4096,
        send_buffer_max: 4096,
        ..Config::default()
    };
    assert_eq!(config.packet_size_max(), 100);
    associated(config);
}

/// Each end sizes its messages by its own path MTU (RFC 5043 §9): a peer at
/// MTU 9000 sends messages of 8,944 octets to one at 1500, which takes
/// them (up to `receive_message_max`, 64 KiB) where IP fragments them or a
/// jumbo path carries them. It took only what it sends itself, 1,444, and
/// the first full message stalled the association.
#[test]
fn a_peer_with_a_larger_path_mtu_is_heard() {
    let jumbo = Config {
        path_mtu: 9000,
        ..Config::default()
    };
    let (mut a, mut b, _) = associated_as(jumbo.clone(), Config::default());
    assert_eq!(b.config().receive_message_max(), 65_536);
    let assoc = a.associations();
    assert_eq!(assoc, 1);
    let up = std::iter::from_fn(|| a.poll_event())
        .find_map(|e| matches!(e.kind, EventKind::Up { .. }).then_some(e.assoc))
        .expect("A is up");
    let message: Vec<u8> = (0..jumbo.message_size_max()).map(|i| i as u8).collect();
    assert_eq!(message.len(), 8944);
    a.send(up, 0, 16, true, &message).unwrap();
    let mut buf = vec![0u8; 9000];
    let mut rx = vec![0u8; b.config().receive_message_max()];
    let mut got = None;
    for _ in 0..8 {
        while let Some(t) = a.poll_transmit(Instant::ZERO, &mut buf) {
            b.handle_datagram(Instant::ZERO, addr(1), &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(Instant::ZERO, &mut buf) {
            a.handle_datagram(Instant::ZERO, addr(2), &buf[..t.len]);
        }
        if let Some(r) = b.recv(&mut rx) {
            got = Some(rx[..r.len].to_vec());
        }
    }
    assert_eq!(got.as_deref(), Some(&message[..]), "B took A's message");
}

/// A packet that carries the association's verification tag but comes from
/// another address is not the peer's: an ABORT from a stranger who guessed
/// the tag ends nothing (sctp-proto finds associations by the tag alone;
/// found by a review). The same ABORT from the peer's address ends it.
#[test]
fn a_packet_from_another_address_is_not_the_peers() {
    let (_a, mut b, from_a) = associated(Config::default());
    while b.poll_event().is_some() {}
    let abort = with_chunk(&from_a, &[6, 0, 0, 4]);
    let stranger = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 7), 40000));
    let mut buf = vec![0u8; 65_536];
    b.handle_datagram(Instant::ZERO, stranger, &abort);
    while b.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    assert!(
        b.poll_event().is_none(),
        "an ABORT from {stranger} ended it"
    );
    assert_eq!(b.associations(), 1);
    b.handle_datagram(Instant::ZERO, addr(1), &abort);
    while b.poll_transmit(Instant::ZERO, &mut buf).is_some() {}
    assert!(std::iter::from_fn(|| b.poll_event()).any(|e| matches!(e.kind, EventKind::Closed(_))));
}

/// An INIT beyond the server's `associations_max` is answered with an
/// ABORT (RFC 9260 §8.4 (3): its tag the INIT's Initiate Tag), which ends
/// the attempt at once; an INIT ACK went out before, and the attempt
/// waited out its T1-cookie (found by a review).
#[test]
fn an_init_beyond_associations_max_is_aborted() {
    let full = Config {
        associations_max: 1,
        ..Config::default()
    };
    let (mut a, mut b, _) = associated_as(Config::default(), full);
    while a.poll_event().is_some() {}
    let now = Instant::ZERO;
    let second = a.connect(now, addr(2)).unwrap();
    let mut buf = vec![0u8; 65_536];
    for _ in 0..4 {
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            b.handle_datagram(now, addr(1), &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            assert_ne!(buf[12], 2, "an INIT ACK for an association with no room");
            a.handle_datagram(now, addr(2), &buf[..t.len]);
        }
    }
    assert!(std::iter::from_fn(|| a.poll_event())
        .any(|e| e.assoc == second && matches!(e.kind, EventKind::Closed(_))));
    assert_eq!(b.associations(), 1);
}

/// A flood of INITs beyond `associations_max` between two calls of
/// `poll_transmit` queues a bounded number of ABORTs, as a flood of
/// packets for no association does (found by an audit: every INIT's ABORT
/// was queued, 10,000 of them here).
#[test]
fn aborts_for_a_flood_of_inits_beyond_associations_max_are_bounded() {
    const INIT: u8 = 1;
    const ABORT: u8 = 6;
    let full = Config {
        associations_max: 1,
        ..Config::default()
    };
    let (_a, mut b, from_a) = associated_as(Config::default(), full);
    while b.poll_event().is_some() {}
    let now = Instant::ZERO;
    // RFC 9260 §8.5.1 (A): an INIT's Verification Tag is 0.
    let mut header = from_a[..12].to_vec();
    header[4..8].fill(0);
    let flood = 10_000u32;
    for k in 0..flood {
        // Initiate Tag, a_rwnd, outbound and inbound streams, initial TSN.
        let mut init = vec![INIT, 0, 0, 20];
        init.extend_from_slice(&(1 + k).to_be_bytes());
        init.extend_from_slice(&[0, 1, 0, 0, 0, 10, 0, 10, 0, 0, 0, 1]);
        let port = 1024 + (k % 50_000) as u16;
        let from = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1 + (k / 50_000) as u8), port));
        b.handle_datagram(now, from, &with_chunk(&header, &init));
    }
    let out = sent(&mut b, now);
    assert!(
        !out.is_empty() && out.len() <= 64,
        "{} packets queued",
        out.len()
    );
    for abort in &out {
        assert_eq!(abort[12], ABORT, "{abort:?}");
    }
    assert_eq!(b.associations(), 1);
}
