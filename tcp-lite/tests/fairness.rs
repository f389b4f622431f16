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

#[test]
fn every_connection_gets_its_turn_on_a_link_that_pushes_back() {
    const CONNS: usize = 64;
    let mut link = LinkConfig::ethernet(1500);
    link.queue_frames = 16;
    link.backpressure = true;
    let mut net = Net::new(link, 7, |c| {
        c.tcp.rx_buffer = 64 * 1024;
        c.tcp.tx_buffer = 64 * 1024;
        c.tcp.congestion = tcp_lite::CongestionControl::None;
    });
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
