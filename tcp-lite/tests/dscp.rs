//! DSCP marks (`Transport::set_dscp`): a marked connection's segments carry
//! its class in their IPv4 headers, with headers the peer's checksum check
//! accepts; other connections' and the mark taken back leave 0. A
//! connection marked before it connects (`Transport::connect_marked`)
//! carries its class from the SYN on, and a listener that reflects its
//! peers' classes (`Transport::reflect_dscp`) marks its own segments with
//! it from the SYN-ACK on and tells it (`peer_dscp`).

mod support;

use std::net::SocketAddrV4;

use support::*;
use tcp_lite::link::LinkConfig;
use tcp_lite::{Duration, EventKind, Transport};

/// Our TCP port of each captured IPv4 TCP frame, and its DSCP.
fn classes(frames: &[Vec<u8>]) -> Vec<(u16, u8)> {
    frames
        .iter()
        .filter(|f| f.len() >= 14 + 24 && f[12..14] == [0x08, 0x00] && f[14 + 9] == 6)
        .map(|f| {
            let ip = &f[14..];
            let header = usize::from(ip[0] & 0x0F) * 4;
            (u16::from_be_bytes([ip[header], ip[header + 1]]), ip[1] >> 2)
        })
        .collect()
}

#[test]
fn a_marked_connections_segments_carry_its_dscp() {
    // Checksums on: a header the mark broke would be dropped by `b`, and
    // the transfer would stall.
    let mut net = Net::new(LinkConfig::ethernet(1500), 7, |_| {});
    let (marked, marked_rx) = net.connect(5000);
    // `connect` takes the first acceptance it has seen.
    net.b_events.clear();
    let (plain, plain_rx) = net.connect(5001);
    assert_ne!(plain_rx, marked_rx);
    let ours = |net: &Net, conn| net.a.endpoints(conn).unwrap().0.port();
    let (marked_port, plain_port) = (ours(&net, marked), ours(&net, plain));
    net.a.set_dscp(marked, 46).unwrap();
    net.a.device().capture_tx(100_000);
    net.b.device().capture_tx(100_000);
    transfer(
        &mut net,
        marked,
        marked_rx,
        1 << 20,
        1,
        Duration::from_secs(10),
    );
    transfer(
        &mut net,
        plain,
        plain_rx,
        1 << 20,
        2,
        Duration::from_secs(10),
    );
    let seen = classes(&net.a.device().take_captured());
    let of = |port| seen.iter().filter(move |(p, _)| *p == port);
    assert!(of(marked_port).count() > 700, "1 MiB in segments");
    assert!(of(marked_port).all(|&(_, dscp)| dscp == 46), "{seen:?}");
    assert!(of(plain_port).count() > 700);
    assert!(of(plain_port).all(|&(_, dscp)| dscp == 0));
    // The peer's acknowledgements are its own (unmarked).
    let peer = classes(&net.b.device().take_captured());
    assert!(peer.len() > 10, "acknowledgements: {}", peer.len());
    assert!(peer.iter().all(|&(_, dscp)| dscp == 0));

    // Taken back: unmarked from then on.
    net.a.set_dscp(marked, 0).unwrap();
    net.a.device().take_captured();
    let sent = net
        .a
        .send_with(marked, 64 << 10, |buf| (buf.len(), buf.len()))
        .unwrap();
    assert!(sent > 0);
    let mut got = 0;
    net.run_until(Duration::from_secs(5), |net| {
        got += net
            .b
            .recv_with(marked_rx, |data, _| (data.len(), data.len()))
            .unwrap();
        got == sent
    });
    let seen = classes(&net.a.device().take_captured());
    assert!(seen.iter().any(|&(p, _)| p == marked_port));
    assert!(seen.iter().all(|&(_, dscp)| dscp == 0), "{seen:?}");
}

/// Our TCP port, TCP flags and DSCP of each captured IPv4 TCP frame.
fn flags_and_classes(frames: &[Vec<u8>]) -> Vec<(u16, u8, u8)> {
    frames
        .iter()
        .filter(|f| f.len() >= 14 + 34 && f[12..14] == [0x08, 0x00] && f[14 + 9] == 6)
        .map(|f| {
            let ip = &f[14..];
            let header = usize::from(ip[0] & 0x0F) * 4;
            let port = u16::from_be_bytes([ip[header], ip[header + 1]]);
            (port, ip[header + 13], ip[1] >> 2)
        })
        .collect()
}

/// Opens a connection from `a` to `b`'s `port` marked `dscp` from the
/// start, capturing what each side sends; the client and the server.
fn open_marked(net: &mut Net, port: u16, dscp: u8) -> (tcp_lite::ConnId, tcp_lite::ConnId) {
    net.a.device().capture_tx(1000);
    net.b.device().capture_tx(1000);
    let ends = net.connect_marked(port, dscp);
    net.b_events.clear();
    ends
}

#[test]
fn a_connection_marked_before_it_connects_carries_its_class_from_the_syn() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 10, |_| {});
    net.b.reflect_dscp(true);
    let (client, server) = open_marked(&mut net, 5000, 46);
    let port = net.a.endpoints(client).unwrap().0.port();
    let sent = flags_and_classes(&net.a.device().take_captured());
    let ours: Vec<_> = sent.iter().filter(|s| s.0 == port).collect();
    // The SYN (no ACK) first, then the handshake's ACK: all marked.
    assert!(ours.len() >= 2, "{sent:?}");
    assert_eq!(ours[0].1 & 0x12, 0x02, "the SYN first: {sent:?}");
    assert!(ours.iter().all(|s| s.2 == 46), "{sent:?}");
    assert_eq!(net.a.dscp(client), 46);
    // The listener reflects it: told, and on its own segments from the
    // SYN-ACK on.
    assert_eq!(net.b.peer_dscp(server), Some(46));
    assert_eq!(net.b.dscp(server), 46);
    let answered = flags_and_classes(&net.b.device().take_captured());
    let theirs: Vec<_> = answered.iter().filter(|s| s.0 == 5000).collect();
    assert_eq!(theirs[0].1 & 0x12, 0x12, "the SYN-ACK first: {answered:?}");
    assert!(theirs.iter().all(|s| s.2 == 46), "{answered:?}");
    assert_eq!(
        net.a.peer_dscp(client),
        None,
        "an active open has no SYN of its peer's"
    );
    assert_eq!(net.b.stats().syn_classes_learned, 1);

    // An unmarked SYN is learned as 0; a listener that does not reflect
    // knows nothing and marks nothing.
    let (_, plain) = open_marked(&mut net, 5001, 0);
    assert_eq!(net.b.peer_dscp(plain), Some(0));
    assert_eq!(net.b.dscp(plain), 0);
    net.b.reflect_dscp(false);
    let (_, unknown) = open_marked(&mut net, 5002, 46);
    assert_eq!(net.b.peer_dscp(unknown), None);
    assert_eq!(net.b.dscp(unknown), 0);
    assert_eq!(net.b.stats().syn_classes_learned, 2);
    assert_eq!(net.b.marked(), 1, "the first connection's mark only");
}

/// A marked active open that is refused, or released before its first
/// poll, leaves no mark behind (smoltcp forgets a closed socket's
/// addresses; the mark must not outlive its slot and mark a later
/// connection on the same ports).
#[test]
fn a_refused_marked_connection_leaves_no_mark() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 11, |_| {});
    let now = net.now;
    let early = net
        .a
        .connect_marked(SocketAddrV4::new(B_ADDR, 5998), now, 46)
        .unwrap();
    net.a.release(early);
    net.run_until(Duration::from_secs(1), |net| net.a.connections() == 0);
    assert_eq!(net.a.marked(), 0, "released before its first poll");
    let refused = net
        .a
        .connect_marked(SocketAddrV4::new(B_ADDR, 5999), now, 46)
        .unwrap();
    assert_eq!(net.a.marked(), 1);
    net.run_until(Duration::from_secs(5), |net| {
        net.a_events
            .iter()
            .any(|e| e.conn == refused && e.kind == EventKind::Reset)
    });
    net.a.release(refused);
    net.run_until(Duration::from_secs(1), |net| net.a.connections() == 0);
    assert_eq!(net.a.marked(), 0);
}

#[test]
fn a_released_connection_cannot_be_marked() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 8, |_| {});
    let (conn, _) = net.connect(5000);
    net.a.set_dscp(conn, 10).unwrap();
    net.a.release(conn);
    assert!(net.a.set_dscp(conn, 46).is_err());
}

#[test]
#[should_panic(expected = "a DSCP is six bits")]
fn a_tos_octet_is_not_a_dscp() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 9, |_| {});
    let (conn, _) = net.connect(5000);
    let _ = net.a.set_dscp(conn, 46 << 2);
}
