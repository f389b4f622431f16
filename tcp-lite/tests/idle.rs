//! Idle connections cost a poll nothing. smoltcp's egress visited every
//! socket on every poll, and tcp-lite's scan looked at every connection
//! after it, so a core with 1,023 idle connections beside one busy one
//! spent 100 times as long per message (136 us against 1.3 us, `bench
//! write --lat --idle 1023`). Egress now visits the sockets that may have
//! something to send (touched by the user or by a segment, or a timer due:
//! `third_party/smoltcp/DPWARP.md`), and the scan looks at those only, and
//! at every connection once per full-scan period for the user timeout.
//! Counted, not timed: `StackStats::slots_scanned`.

mod support;

use support::*;
use tcp_lite::link::LinkConfig;
use tcp_lite::{Duration, Transport};

#[test]
fn a_ping_pong_beside_512_idle_connections_looks_at_none_of_them() {
    const IDLE: usize = 512;
    const ROUNDS: u64 = 1000;
    let mut net = Net::new(LinkConfig::ethernet(1500), 11, |c| {
        c.tcp.rx_buffer = 4096;
        c.tcp.tx_buffer = 4096;
        c.max_connections = 1024;
    });
    let (client, server) = net.open_many(IDLE + 1, 9000)[IDLE];
    // Quiet: every handshake's last ACK is in.
    for _ in 0..100 {
        net.step(Duration::from_millis(1));
    }
    let before = net.a.stats().slots_scanned + net.b.stats().slots_scanned;
    let start = net.now;
    let mut polls = 0u64;
    let ping = [0x5a; 64];
    for round in 0..ROUNDS {
        for (from, to, a_to_b) in [(client, server, true), (server, client, false)] {
            let tx = if a_to_b { &mut net.a } else { &mut net.b };
            let sent = tx
                .send_with(from, ping.len(), |space| {
                    space.copy_from_slice(&ping[..space.len()]);
                    (space.len(), space.len())
                })
                .unwrap();
            assert_eq!(sent, ping.len(), "round {round}");
            let mut got = 0;
            while got < ping.len() {
                assert!(
                    net.now < start + Duration::from_secs(10),
                    "round {round} stalled"
                );
                net.step(Duration::from_millis(1));
                polls += 2;
                let rx = if a_to_b { &mut net.b } else { &mut net.a };
                while let Ok(n) = rx.recv_with(to, |data, _| (data.len(), data.len())) {
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
            }
        }
    }
    let scanned = net.a.stats().slots_scanned + net.b.stats().slots_scanned - before;
    // Full scans: one per 100 ms of virtual time and stack, and the first.
    let full_scans = 2 * ((net.now - start).total_millis() / 100 + 1);
    let busy = 8 * 2 * ROUNDS;
    eprintln!("{scanned} connections scanned in {polls} polls, {full_scans} full scans");
    assert!(
        scanned <= full_scans * (IDLE as u64 + 1) + busy,
        "{scanned} connections scanned in {polls} polls ({full_scans} full scans)"
    );
    // Looking at every connection at every poll would be this many.
    assert!(
        scanned * 20 < polls * (IDLE as u64 + 1),
        "{scanned} connections scanned in {polls} polls"
    );
}
