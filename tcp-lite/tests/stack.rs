//! The smoltcp stack over the in-memory link: handshakes, transfers, close,
//! abort, events, limits and timeouts, in virtual time.

mod support;

use std::net::SocketAddrV4;
use support::*;
use tcp_lite::link::{Faults, LinkConfig};

use tcp_lite::{ConnectError, Duration, EventKind, RecvError, SendError, Transport};

#[test]
fn connect_transfer_close() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 1, |_| {});
    let (client, server) = net.connect(4000);
    let (local, peer) = net.a.endpoints(client).unwrap();
    assert_eq!(
        (*local.ip(), *peer.ip(), peer.port()),
        (A_ADDR, B_ADDR, 4000)
    );
    assert_eq!(net.b.endpoints(server), Ok((peer, local)));
    transfer(
        &mut net,
        client,
        server,
        10 << 20,
        5,
        Duration::from_secs(10),
    );
    net.a.close(client).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        net.b_events
            .iter()
            .any(|e| e.conn == server && e.kind == EventKind::PeerClosed)
    });
    net.b.close(server).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        net.a_events
            .iter()
            .any(|e| e.conn == client && e.kind == EventKind::Closed)
            && net
                .b_events
                .iter()
                .any(|e| e.conn == server && e.kind == EventKind::Closed)
    });
    assert_eq!(
        net.a.endpoints(client),
        Ok((local, peer)),
        "kept after the close"
    );
    net.a.release(client);
    net.b.release(server);
    assert_eq!(net.a.connections(), 0);
    assert_eq!(net.b.connections(), 0);
}

const GIB: u64 = 1 << 30;

/// Bigger buffers than the defaults' 256 KiB: a window of many segments.
fn big_buffers(config: &mut tcp_lite::StackConfig) {
    config.tcp.rx_buffer = 1 << 20;
    config.tcp.tx_buffer = 1 << 20;
}

#[test]
fn one_gib_clean() {
    let mut net = Net::new(LinkConfig::ethernet(9000), 2, big_buffers);
    let (client, server) = net.connect(4001);
    let took = transfer(&mut net, client, server, GIB, 21, Duration::from_secs(60));
    let stats = net.a.device().tx_stats();
    assert_eq!(stats.dropped + stats.overflowed, 0, "{stats:?}");
    eprintln!("1 GiB clean: {took} virtual, {} frames", stats.frames);
}

#[test]
fn one_gib_with_loss_reordering_and_duplication() {
    let mut net = Net::new(LinkConfig::ethernet(9000), 3, big_buffers);
    let (client, server) = net.connect(4002);
    let faults = Faults {
        drop: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.0,
    };
    net.a.device().set_tx_faults(faults);
    net.b.device().set_tx_faults(faults);
    let took = transfer(&mut net, client, server, GIB, 22, Duration::from_secs(30));
    let (ab, ba) = (net.a.device().tx_stats(), net.b.device().tx_stats());
    assert!(
        ab.dropped > 0 && ab.duplicated > 0 && ab.reordered > 0,
        "faults happened: {ab:?}"
    );
    eprintln!("1 GiB with faults: {took} virtual; a->b {ab:?}; b->a {ba:?}");
}

fn has(events: &[tcp_lite::Event], conn: tcp_lite::ConnId, kind: EventKind) -> bool {
    events.iter().any(|e| e.conn == conn && e.kind == kind)
}

#[test]
fn thousand_concurrent_connections_open_transfer_and_close() {
    const N: usize = 1000;
    const SIZE: usize = 4096;
    let mut net = Net::new(LinkConfig::ethernet(1500), 4, |c| {
        c.max_connections = N + 8;
        c.tcp.rx_buffer = 16 * 1024;
        c.tcp.tx_buffer = 16 * 1024;
    });
    net.b.listen(5000).unwrap();
    let now = net.now;
    let clients: Vec<_> = (0..N)
        .map(|_| net.a.connect(SocketAddrV4::new(B_ADDR, 5000), now).unwrap())
        .collect();
    assert_eq!(net.a.connections(), N);
    // Every client sends SIZE octets of its own pattern; the server echoes;
    // the client checks and closes; the server closes on the peer's FIN.
    let mut sent = vec![0usize; N];
    let mut back = vec![0usize; N];
    let mut echo: std::collections::HashMap<tcp_lite::ConnId, Vec<u8>> = Default::default();
    let (mut a_closed, mut b_closed) = (0, 0);
    let (mut a_all, mut b_all) = (Vec::new(), Vec::new());
    let end = net.now + Duration::from_secs(60);
    while a_closed < N || b_closed < N {
        assert!(net.now < end, "{a_closed} and {b_closed} of {N} closed");
        net.step(Duration::from_millis(10));
        for e in std::mem::take(&mut net.b_events) {
            match e.kind {
                EventKind::Accepted(_) => {
                    echo.insert(e.conn, Vec::new());
                }
                EventKind::PeerClosed => net.b.close(e.conn).unwrap(),
                EventKind::Closed => {
                    b_closed += 1;
                    net.b.release(e.conn);
                }
                EventKind::Reset | EventKind::TimedOut => panic!("server {} {:?}", e.conn, e.kind),
                _ => {}
            }
            b_all.push(e);
        }
        for (conn, pending) in echo.iter_mut() {
            if net.b.tcp_state(*conn).is_none() {
                continue;
            }
            while let Ok(n) = net.b.recv_with(*conn, |data, _| {
                pending.extend_from_slice(data);
                (data.len(), data.len())
            }) {
                if n == 0 {
                    break;
                }
            }
            if !pending.is_empty() {
                if let Ok(n) = net.b.send_with(*conn, pending.len(), |buf| {
                    buf.copy_from_slice(&pending[..buf.len()]);
                    (buf.len(), buf.len())
                }) {
                    pending.drain(..n);
                }
            }
        }
        for e in std::mem::take(&mut net.a_events) {
            match e.kind {
                EventKind::Closed => {
                    a_closed += 1;
                    net.a.release(e.conn);
                }
                EventKind::Reset | EventKind::TimedOut => panic!("client {} {:?}", e.conn, e.kind),
                _ => {}
            }
            a_all.push(e);
        }
        for (i, &conn) in clients.iter().enumerate() {
            if !has(&a_all, conn, EventKind::Connected) || net.a.tcp_state(conn).is_none() {
                continue;
            }
            let seed = i as u64;
            if sent[i] < SIZE {
                let at = sent[i];
                sent[i] += net
                    .a
                    .send_with(conn, SIZE - at, |buf| {
                        fill(seed, at as u64, buf);
                        (buf.len(), buf.len())
                    })
                    .unwrap();
            }
            if back[i] < SIZE {
                let n = net
                    .a
                    .recv_with(conn, |data, pos| {
                        assert_eq!(check(seed, pos, data), Ok(()), "client {i}");
                        (data.len(), data.len())
                    })
                    .unwrap();
                back[i] += n;
                if back[i] == SIZE {
                    net.a.close(conn).unwrap();
                }
            }
        }
    }
    let count = |events: &[tcp_lite::Event], want: fn(EventKind) -> bool| {
        events.iter().filter(|e| want(e.kind)).count()
    };
    assert_eq!(count(&a_all, |k| k == EventKind::Connected), N);
    assert_eq!(count(&b_all, |k| matches!(k, EventKind::Accepted(_))), N);
    assert_eq!(count(&a_all, |k| k == EventKind::Closed), N);
    assert_eq!(count(&b_all, |k| k == EventKind::Closed), N);
    assert!(back.iter().all(|&b| b == SIZE));
    assert_eq!((net.a.connections(), net.b.connections()), (0, 0));
    let (sa, sb) = (net.a.stats(), net.b.stats());
    assert_eq!(
        (sa.connected, sb.accepted, sa.closed, sb.closed),
        (N as u64, N as u64, N as u64, N as u64)
    );
}

#[test]
fn refused_connect_and_abort_are_resets() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 5, |_| {});
    // Nobody listens on 4999: smoltcp answers the SYN with RST.
    let now = net.now;
    let refused = net.a.connect(SocketAddrV4::new(B_ADDR, 4999), now).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        has(&net.a_events, refused, EventKind::Reset)
    });
    net.a.release(refused);
    // An abort reaches the peer as a reset.
    let (client, server) = net.connect(4003);
    net.a.abort(client).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        has(&net.b_events, server, EventKind::Reset)
    });
    assert!(
        !has(&net.a_events, client, EventKind::Reset),
        "an abort reports nothing to its own side"
    );
    net.a.release(client);
    net.b.release(server);
    net.run_until(Duration::from_secs(1), |net| {
        net.a.connections() + net.b.connections() == 0
    });
}

#[test]
fn released_handles_are_stale_and_closed_connections_refuse_sends() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 6, |_| {});
    let (client, server) = net.connect(4004);
    net.a.close(client).unwrap();
    assert_eq!(
        net.a.send_with(client, 10, |b| (b.len(), ())),
        Err(SendError::InvalidState)
    );
    net.run_until(Duration::from_secs(5), |net| {
        has(&net.b_events, server, EventKind::PeerClosed)
    });
    // The peer's direction is still open: b sends, a (in FIN-WAIT-2) receives.
    let n = net
        .b
        .send_with(server, 100, |b| (b.len(), b.len()))
        .unwrap();
    assert_eq!(n, 100);
    net.run_until(Duration::from_secs(5), |net| {
        net.a.recv_queue(client) == Ok(100)
    });
    net.b.close(server).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        has(&net.a_events, client, EventKind::Closed)
            && has(&net.b_events, server, EventKind::Closed)
    });
    // Data that arrived before the FIN is still there to read, then Finished.
    assert_eq!(
        net.a.recv_with(client, |d, pos| (d.len(), (d.len(), pos))),
        Ok((100, 0))
    );
    assert_eq!(
        net.a.recv_with(client, |d, _| (d.len(), ())),
        Err(RecvError::Finished)
    );
    net.a.release(client);
    assert_eq!(
        net.a.send_with(client, 1, |b| (b.len(), ())),
        Err(SendError::InvalidConnection)
    );
    assert_eq!(
        net.a.recv_with(client, |d, _| (d.len(), ())),
        Err(RecvError::InvalidConnection)
    );
    // The slot is reused with a new generation: the old handle stays stale.
    let (again, _) = net.connect(4005);
    assert_eq!(again.index(), client.index());
    assert_ne!(again, client);
    assert_eq!(net.a.send_space(client), Err(SendError::InvalidConnection));
}

#[test]
fn max_connections_bounds_both_roles() {
    // With one listening socket, a full stack does not replace it, and
    // smoltcp answers the SYN with RST; with four, the socket that took the
    // SYN is aborted (RST) by the stack.
    for backlog in [1, 4] {
        max_connections_with_backlog(backlog);
    }
}

fn max_connections_with_backlog(backlog: usize) {
    let mut net = Net::new(LinkConfig::ethernet(1500), 7, |c| {
        c.max_connections = if c.addr == B_ADDR { 2 } else { 3 };
        c.backlog = backlog;
    });
    net.b.listen(4006).unwrap();
    let now = net.now;
    let remote = SocketAddrV4::new(B_ADDR, 4006);
    let conns: Vec<_> = (0..3)
        .map(|_| net.a.connect(remote, now).unwrap())
        .collect();
    assert_eq!(
        net.a.connect(remote, now),
        Err(ConnectError::TooManyConnections)
    );
    net.run_until(Duration::from_secs(5), |net| {
        conns.iter().all(|&c| {
            has(&net.a_events, c, EventKind::Connected) || has(&net.a_events, c, EventKind::Reset)
        })
    });
    let connected = conns
        .iter()
        .filter(|&&c| has(&net.a_events, c, EventKind::Connected))
        .count();
    let reset = conns
        .iter()
        .filter(|&&c| has(&net.a_events, c, EventKind::Reset))
        .count();
    assert_eq!(
        (connected, reset),
        (2, 1),
        "the third SYN is refused with RST"
    );
    let stats = net.b.stats();
    if backlog == 1 {
        assert!(
            stats.refused == 0 && stats.backlog_exhausted > 0,
            "{stats:?}"
        );
    } else {
        assert_eq!(stats.refused, 1, "{stats:?}");
    }
    net.run_until(Duration::from_secs(1), |net| net.b.connections() == 2);
    // Releasing one on a frees one on b (its RST arrives), and a new one fits.
    let first = *conns
        .iter()
        .find(|&&c| has(&net.a_events, c, EventKind::Connected))
        .unwrap();
    net.a.release(first);
    net.run_until(Duration::from_secs(1), |net| {
        net.b_events.iter().any(|e| e.kind == EventKind::Reset)
    });
    let gone = net
        .b_events
        .iter()
        .find(|e| e.kind == EventKind::Reset)
        .unwrap()
        .conn;
    assert_eq!(
        net.b.connections(),
        2,
        "a reset connection holds its slot until released"
    );
    net.b.release(gone);
    assert_eq!(net.b.connections(), 1);
    let late = net.a.connect(remote, net.now).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        has(&net.a_events, late, EventKind::Connected)
    });
}

#[test]
fn unanswered_connect_and_unacknowledged_data_time_out() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 9, |c| {
        c.tcp.user_timeout = Duration::from_secs(3)
    });
    let (client, server) = net.connect(4008);
    // The link goes dark both ways: queued data is never acknowledged.
    let dark = Faults {
        drop: 1.0,
        ..Faults::NONE
    };
    net.a.device().set_tx_faults(dark);
    net.b.device().set_tx_faults(dark);
    let start = net.now;
    net.a.send_with(client, 1000, |b| (b.len(), ())).unwrap();
    net.run_until(Duration::from_secs(10), |net| {
        has(&net.a_events, client, EventKind::TimedOut)
    });
    let took = net.now - start;
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(4),
        "timed out after {took}"
    );
    // A connect into the dark times out the same way.
    let start = net.now;
    let lost = net
        .a
        .connect(SocketAddrV4::new(B_ADDR, 4008), start)
        .unwrap();
    net.run_until(Duration::from_secs(10), |net| {
        has(&net.a_events, lost, EventKind::TimedOut)
    });
    assert!(net.now - start >= Duration::from_secs(3));
    // An idle connection without queued data does not time out.
    assert!(!has(&net.b_events, server, EventKind::TimedOut));
    assert_eq!(net.a.stats().timed_out, 2);
}

#[test]
fn writable_follows_a_full_transmit_buffer() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 10, |c| {
        c.tcp.tx_buffer = 4096;
        c.tcp.rx_buffer = 8192;
    });
    let (client, server) = net.connect(4009);
    let n = net
        .a
        .send_with(client, 10_000, |b| (b.len(), b.len()))
        .unwrap();
    assert_eq!(n, 4096);
    assert_eq!(net.a.send_space(client), Ok(0));
    net.a_events.clear();
    net.run_until(Duration::from_secs(5), |net| {
        has(&net.a_events, client, EventKind::Writable)
    });
    assert!(has(&net.b_events, server, EventKind::Readable));
    assert!(net.a.send_space(client).unwrap() > 0);
}

/// Records of random sizes, each sized to [`Transport::segment_room`], go
/// out one or more per segment and never across a segment boundary (RFC
/// 5044 §5, "MPA-aware TCP"): smoltcp cuts segments only where records may
/// end (the fork's record segmentation, `TcpConfig::whole_records`), with
/// or without congestion control, with losses repaired, and through the
/// first window (the peer's SYN window is unscaled, RFC 7323, so the first
/// burst stops at 64 KiB: the segment there waits for the window instead of
/// being cut short). Without record segmentation CUBIC's window cuts
/// segments short (counted, to show what the option fixes).
#[test]
fn records_sized_by_segment_room_stay_whole_in_segments() {
    let records_per_segment = |congestion, whole_records: bool, drop: f64| {
        let mut net = Net::new(LinkConfig::ethernet(1500), 11, |c| {
            c.tcp.rx_buffer = 1 << 20;
            c.tcp.tx_buffer = 256 * 1024;
            c.tcp.congestion = congestion;
            c.tcp.whole_records = whole_records;
        });
        let (client, server) = net.connect(4010);
        let faults = Faults {
            drop,
            ..Faults::NONE
        };
        net.a.device().set_tx_faults(faults);
        net.b.device().set_tx_faults(faults);
        net.a.device().capture_tx(1 << 20);
        let mut rng = 0x1234_5678u64;
        let mut boundaries = std::collections::HashSet::from([0u64]);
        let mut received = 0u64;
        let total = 8u64 << 20;
        let end = net.now + Duration::from_secs(600);
        while received < total {
            assert!(net.now < end, "{received} of {total} after 600 s");
            loop {
                let room = net.a.segment_room(client).unwrap().unwrap();
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let want = (16 + rng % 1600) as usize;
                let size = want.min(room);
                if size < 16 || net.a.send_space(client).unwrap() < size {
                    break;
                }
                let n = net
                    .a
                    .send_with(client, size, |b| (b.len(), b.len()))
                    .unwrap();
                if n < size {
                    // The ring wrapped: the rest goes in the next call.
                    let rest = net
                        .a
                        .send_with(client, size - n, |b| (b.len(), b.len()))
                        .unwrap();
                    assert_eq!(n + rest, size);
                }
                boundaries.insert(net.a.send_position(client).unwrap());
            }
            net.step(Duration::from_millis(10));
            while let Ok(n) = net.b.recv_with(server, |d, _| (d.len(), d.len())) {
                if n == 0 {
                    break;
                }
                received += n as u64;
            }
        }
        // Data segments of a->b, as stream positions (retransmissions
        // included).
        let frames = net.a.device().take_captured();
        // The first data segment starts the stream (the capture began after the handshake).
        let mut isn = None;
        let (mut whole, mut split) = (0, 0);
        for frame in &frames {
            let eth = smoltcp::wire::EthernetFrame::new_checked(&frame[..]).unwrap();
            let Ok(ip) = smoltcp::wire::Ipv4Packet::new_checked(eth.payload()) else {
                continue;
            };
            let tcp = smoltcp::wire::TcpPacket::new_checked(ip.payload()).unwrap();
            if tcp.payload().is_empty() {
                continue;
            }
            let start = (tcp.seq_number() - *isn.get_or_insert(tcp.seq_number())) as u64;
            let end = start + tcp.payload().len() as u64;
            if boundaries.contains(&start) && boundaries.contains(&end) {
                whole += 1;
            } else {
                split += 1;
            }
        }
        assert!(whole > 3000, "{whole} segments seen");
        let retransmits = net.a.recovery_stats(client).unwrap().retransmits;
        (whole, split, retransmits)
    };
    use tcp_lite::CongestionControl as Cc;
    for (congestion, drop) in [(Cc::None, 0.0), (Cc::Cubic, 0.0), (Cc::Cubic, 0.01)] {
        let (whole, split, retransmits) = records_per_segment(congestion, true, drop);
        eprintln!(
            "{congestion:?}, {}% loss: {split} of {} segments split a record ({retransmits} retransmitted)",
            drop * 100.0,
            whole + split
        );
        assert_eq!(split, 0, "{congestion:?} with {drop} loss");
        assert_eq!(retransmits > 0, drop > 0.0);
    }
    // Without record segmentation, CUBIC's window cuts segments short
    // (35% of them when measured, 2,039 of 5,831).
    let (whole, split, _) = records_per_segment(Cc::Cubic, false, 0.0);
    eprintln!(
        "CUBIC without record segmentation: {split} of {} segments split a record",
        whole + split
    );
    assert!(split * 10 > whole + split, "{split} of {}", whole + split);
}

#[test]
fn corrupted_frames_are_caught_by_checksums() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 12, |_| {});
    let (client, server) = net.connect(4011);
    let corrupt = Faults {
        corrupt: 0.02,
        ..Faults::NONE
    };
    net.a.device().set_tx_faults(corrupt);
    net.b.device().set_tx_faults(corrupt);
    transfer(
        &mut net,
        client,
        server,
        32 << 20,
        23,
        Duration::from_secs(3600),
    );
    assert!(net.a.device().tx_stats().corrupted > 100);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 24, ..Default::default() })]

    /// Any mix of faults, latency, MTU and size: every octet arrives once,
    /// in order, at its stream position (checked inside `transfer`), within
    /// 60 s of virtual time: loss recovery (SACK, RACK-TLP, the least RTO)
    /// repairs even 10% loss each way with reordering and duplication in
    /// bounded time (it took 1 s timeouts, backed off, before).
    #[test]
    fn any_faults_any_size_arrive_exactly(
        drop in 0.0..0.1f64,
        duplicate in 0.0..0.1f64,
        reorder in 0.0..0.2f64,
        corrupt in 0.0..0.05f64,
        latency_us in 0..200i64,
        mtu in proptest::sample::select(vec![576usize, 1500, 9000]),
        size in 1..(512u64 << 10),
        seed in 0..u64::MAX,
    ) {
        let mut link = LinkConfig::ethernet(mtu);
        link.latency = Duration::from_micros(latency_us as u64);
        let mut net = Net::new(link, seed, |c| c.tcp.user_timeout = tcp_lite::USER_TIMEOUT_LIMIT);
        let (client, server) = net.connect(4100);
        let faults = Faults { drop, duplicate, reorder, corrupt };
        net.a.device().set_tx_faults(faults);
        net.b.device().set_tx_faults(faults);
        transfer(&mut net, client, server, size, seed, Duration::from_secs(60));
        let stats = net.a.device().tx_stats();
        // Frames still in flight are neither delivered nor dropped yet.
        proptest::prop_assert!(stats.delivered + stats.dropped + stats.overflowed <= stats.frames + stats.duplicated);
    }
}

/// `a` sends `total` octets to `b`, which polls with `poll_direct`: of
/// each run of octets offered it takes what `take(offered, k)` says (`k`
/// counts the offers), and reads what it left through `recv_with`. Checks
/// every octet and its stream position either way; returns the octets
/// taken straight.
fn direct_transfer(
    net: &mut Net,
    (tx, rx): (tcp_lite::ConnId, tcp_lite::ConnId),
    total: u64,
    seed: u64,
    take: impl Fn(usize, u64) -> usize,
) -> u64 {
    let (mut sent, mut received, mut straight, mut offers) = (0u64, 0u64, 0u64, 0u64);
    let end = net.now + Duration::from_secs(60);
    while received < total {
        assert!(net.now < end, "stalled at {received} of {total} octets");
        send_pattern(net, tx, &mut sent, total, seed);
        net.step_with(Duration::from_millis(10), |b, now| {
            b.poll_direct(now, &mut |conn, data, pos| {
                assert_eq!(conn, rx);
                assert_eq!(pos, received, "stream position offered");
                offers += 1;
                let n = take(data.len(), offers).min(data.len());
                if let Err(at) = check(seed, pos, &data[..n]) {
                    panic!("octet {at} is wrong");
                }
                received += n as u64;
                straight += n as u64;
                n
            })
        });
        read_pattern(net, rx, &mut received, seed);
    }
    assert_eq!(net.b.stats().rx_direct_octets, straight);
    straight
}

/// On a clean link every octet is taken straight from its segment, none
/// buffered.
#[test]
fn a_receiver_that_takes_every_offer_reads_nothing_from_the_buffer() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 3, |_| {});
    let pair = net.connect(4200);
    let total = 4 << 20;
    assert_eq!(direct_transfer(&mut net, pair, total, 3, |n, _| n), total);
}

/// The same on a device whose frames are bare IP packets (a TUN-like
/// medium): smoltcp's IP path offers in-order payload too (it did not,
/// before its change 11 reached that path).
#[test]
fn a_receiver_on_an_ip_medium_link_takes_every_offer_too() {
    let mut link = LinkConfig::ethernet(1500);
    link.medium = tcp_lite::smoltcp::phy::Medium::Ip;
    link.mtu = 1500;
    let mut net = Net::new(link, 4, |c| c.mac = None);
    let pair = net.connect(4200);
    let total = 1 << 20;
    assert_eq!(direct_transfer(&mut net, pair, total, 4, |n, _| n), total);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 16, ..Default::default() })]

    /// Any faults, and a receiver that takes all, none or part of each
    /// offer: every octet arrives once, in order, at its position, some
    /// straight from segments and the rest through the buffer.
    #[test]
    fn direct_receive_with_any_faults_and_any_takes_loses_nothing(
        drop in 0.0..0.05f64,
        duplicate in 0.0..0.05f64,
        reorder in 0.0..0.1f64,
        mtu in proptest::sample::select(vec![576usize, 1500, 9000]),
        size in 1..(256u64 << 10),
        rule in 0..4u8,
        seed in 0..u64::MAX,
    ) {
        let mut net = Net::new(LinkConfig::ethernet(mtu), seed, |_| {});
        let pair = net.connect(4300);
        let faults = Faults { drop, duplicate, reorder, corrupt: 0.0 };
        net.a.device().set_tx_faults(faults);
        net.b.device().set_tx_faults(faults);
        let take = move |n: usize, k: u64| match rule {
            0 => n,
            1 => 0,
            2 => n / 2,
            _ => if k.is_multiple_of(3) { 0 } else { n - n / 3 },
        };
        direct_transfer(&mut net, pair, size, seed, take);
    }
}

#[test]
fn idleness_before_a_send_is_not_waiting() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 13, |c| {
        c.tcp.user_timeout = Duration::from_secs(2)
    });
    let (client, server) = net.connect(4012);
    // Idle for 60 s of virtual time, polled now and then.
    let end = net.now + Duration::from_secs(60);
    while net.now < end {
        net.now += Duration::from_millis(500);
        net.step(Duration::from_millis(500));
    }
    transfer(
        &mut net,
        client,
        server,
        1 << 20,
        30,
        Duration::from_secs(10),
    );
    assert!(!has(&net.a_events, client, EventKind::TimedOut));
    assert_eq!(net.a.stats().timed_out, 0);
}

/// With keep-alive, an idle connection whose peer vanished (nothing of
/// ours waits for an acknowledgement, so the user timeout alone never
/// ends it) ends once the peer has been silent for the user timeout; one
/// whose peer answers the probes lives on, idle. Without keep-alive the
/// vanished peer's connection stays (as `unanswered_connect_and_...`
/// shows), holding its slot for good.
#[test]
fn keep_alive_ends_an_idle_connection_whose_peer_vanished() {
    let mut net = Net::new(LinkConfig::ethernet(1500), 14, |c| {
        c.tcp.user_timeout = Duration::from_secs(6);
        c.tcp.keep_alive = Some(Duration::from_secs(2));
    });
    let (client, server) = net.connect(4013);
    // Idle 30 s, both ends there: the probes are answered.
    let end = net.now + Duration::from_secs(30);
    while net.now < end {
        net.now += Duration::from_millis(250);
        net.step(Duration::from_millis(250));
    }
    assert!(net
        .a_events
        .iter()
        .chain(&net.b_events)
        .all(|e| !matches!(e.kind, EventKind::Reset | EventKind::TimedOut)));
    // b's host goes: nothing it would say arrives any more.
    net.b.device().set_tx_faults(Faults {
        drop: 1.0,
        ..Faults::NONE
    });
    let start = net.now;
    net.run_until(Duration::from_secs(20), |net| {
        has(&net.a_events, client, EventKind::TimedOut)
    });
    let took = net.now - start;
    assert!(
        took >= Duration::from_secs(6) && took < Duration::from_secs(9),
        "ended after {took}"
    );
    net.a.release(client);
    assert_eq!(net.a.connections(), 0, "its slot is free");
    let _ = server;
}

#[test]
fn keep_alive_is_checked_against_the_user_timeout() {
    for (k, ok) in [(0, false), (1, true), (15, true), (16, false)] {
        let mut c =
            tcp_lite::StackConfig::new([2, 0, 0, 0, 0, 1], std::net::Ipv4Addr::new(10, 0, 0, 1));
        c.tcp.user_timeout = Duration::from_secs(30);
        c.tcp.keep_alive = Some(Duration::from_secs(k));
        let checked = c.validate();
        assert_eq!(checked.is_ok(), ok, "{k} s: {checked:?}");
        if let Err(e) = checked {
            assert!(e.to_string().contains("tcp.keep_alive"), "{e}");
        }
    }
}

/// Active opens start at a seed-derived place in the ephemeral range (RFC
/// 6056 §3.2): two runs with different seeds do not reuse each other's
/// four-tuple (a peer may still hold the last one in TIME-WAIT); the same
/// seed gives the same port, so tests stay reproducible.
#[test]
fn the_first_ephemeral_port_follows_the_seed() {
    let first_port = |seed: u64| {
        let mut net = Net::new(LinkConfig::ethernet(1500), 1, |c| {
            c.seed = seed;
            c.ephemeral_ports = 49152..=65535;
        });
        let (client, _) = net.connect(4000);
        net.a.endpoints(client).unwrap().0.port()
    };
    let ports: Vec<u16> = (1..=8u64).map(|s| first_port(s * 7919)).collect();
    assert!(
        ports.iter().all(|p| (49152..=65535).contains(p)),
        "{ports:?}"
    );
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    assert_eq!(first_port(7919), first_port(7919));
    // Seed 0 starts at the range's start.
    assert_eq!(first_port(0), 49152);
}
