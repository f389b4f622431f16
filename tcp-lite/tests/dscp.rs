//! DSCP marks (`Transport::set_dscp`): a marked connection's segments carry
//! its class in their IPv4 headers, with headers the peer's checksum check
//! accepts; other connections' and the mark taken back leave 0.

mod support;

use support::*;
use tcp_lite::link::LinkConfig;
use tcp_lite::{Duration, Transport};

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
