//! Many connections sending at once over a link that pushes back (a full
//! queue refuses transmit tokens, as a DPDK port's full ring does): every
//! connection gets its turn. smoltcp's egress visited its sockets from the
//! first each time and stopped at the first refused token, so the
//! connections opened last never sent (the change in
//! `third_party/smoltcp/DPWARP.md`).

mod support;

use support::*;
use tcp_lite::link::LinkConfig;
use tcp_lite::{Duration, Transport};

/// Two stacks on an Ethernet link whose 16-frame queue refuses transmit
/// tokens when full, 64 KiB buffers, no congestion control.
fn pushing_back(seed: u64) -> Net {
    let mut link = LinkConfig::ethernet(1500);
    link.queue_frames = 16;
    link.backpressure = true;
    Net::new(link, seed, |c| {
        c.tcp.rx_buffer = 64 * 1024;
        c.tcp.tx_buffer = 64 * 1024;
        c.tcp.congestion = tcp_lite::CongestionControl::None;
    })
}

#[test]
fn every_connection_gets_its_turn_on_a_link_that_pushes_back() {
    const CONNS: usize = 64;
    let mut net = pushing_back(7);
    // Every connection up, and the server's end of each.
    let pairs = net.open_many(CONNS, 9000);
    // Everyone sends as fast as TCP takes it; the server reads it all.
    let mut received = vec![0u64; CONNS];
    let chunk = vec![0x5a; 16 * 1024];
    for _ in 0..3000 {
        for &(client, _) in &pairs {
            let _ = net.a.send_with(client, chunk.len(), |space| {
                space.copy_from_slice(&chunk[..space.len()]);
                (space.len(), ())
            });
        }
        net.step(Duration::from_millis(1));
        for (i, &(_, server)) in pairs.iter().enumerate() {
            while let Ok(n) = net.b.recv_with(server, |data, _| (data.len(), data.len())) {
                if n == 0 {
                    break;
                }
                received[i] += n as u64;
            }
        }
    }
    let total: u64 = received.iter().sum();
    let mean = total / CONNS as u64;
    let least = *received.iter().min().unwrap();
    assert!(total > 0, "nothing moved");
    assert!(
        least >= mean / 4,
        "a connection starved: least {least} octets against a mean of {mean} \
         (last ones: {:?})",
        &received[CONNS - 4..]
    );
}

/// Steps (polls of both stacks) from each 64-octet ping's send on the
/// last of `busy + 1` connections to its arrival, over a link that pushes
/// back while the other connections keep their rings full; `urgent`
/// marks the ping's connection urgent on both ends.
fn ping_steps_beside_busy(busy: usize, urgent: bool) -> Vec<u32> {
    let mut net = pushing_back(11);
    let pairs = net.open_many(busy + 1, 9000);
    let (ping, pong) = pairs[busy];
    net.a.set_urgent(ping, urgent).unwrap();
    net.b.set_urgent(pong, urgent).unwrap();
    let chunk = vec![0x5a; 16 * 1024];
    let mut steps = Vec::new();
    let mut waiting: Option<u32> = None;
    for _ in 0..4000 {
        for &(client, _) in &pairs[..busy] {
            let _ = net.a.send_with(client, chunk.len(), |space| {
                space.copy_from_slice(&chunk[..space.len()]);
                (space.len(), ())
            });
        }
        if waiting.is_none() {
            let sent = net.a.send_with(ping, 64, |space| {
                space.fill(0x11);
                (space.len(), space.len())
            });
            assert_eq!(sent, Ok(64), "the ping's ring has room");
            waiting = Some(0);
        }
        net.step(Duration::from_millis(1));
        if let Some(n) = waiting.as_mut() {
            *n += 1;
        }
        for &(_, server) in &pairs[..busy] {
            while let Ok(n) = net.b.recv_with(server, |data, _| (data.len(), data.len())) {
                if n == 0 {
                    break;
                }
            }
        }
        let got = net
            .b
            .recv_with(pong, |data, _| (data.len(), data.len()))
            .unwrap_or(0);
        if got > 0 {
            assert_eq!(got, 64, "one ping at a time");
            steps.push(waiting.take().unwrap());
        }
    }
    steps
}

/// An urgent connection (`Transport::set_urgent`) sends before the busy
/// ones: its pings arrive at the next step, where a plain connection's
/// wait behind every busy connection's segment.
#[test]
fn an_urgent_connection_sends_before_busy_ones_on_a_link_that_pushes_back() {
    let urgent = ping_steps_beside_busy(64, true);
    let plain = ping_steps_beside_busy(64, false);
    let worst = |s: &[u32]| *s.iter().max().unwrap();
    eprintln!(
        "pings: urgent {} (worst {} steps), plain {} (worst {} steps)",
        urgent.len(),
        worst(&urgent),
        plain.len(),
        worst(&plain)
    );
    assert!(urgent.len() >= 1000, "urgent pings: {}", urgent.len());
    assert!(!plain.is_empty(), "no plain ping arrived");
    assert!(
        worst(&urgent) <= 2,
        "an urgent ping waited {} steps",
        worst(&urgent)
    );
    assert!(
        worst(&plain) > 2 * worst(&urgent),
        "the busy connections did not hold a plain ping back ({} steps): \
         the test shows nothing",
        worst(&plain)
    );
}
