//! The DPDK device under tcp-lite, over a `net_ring` pair in this process
//! (no root, no NIC): TCP transfers verified octet for octet, hostile frames
//! counted and dropped, back-pressure from a full transmit ring and from an
//! empty pool without losing an octet, and every mbuf back in its pool.
//! EAL starts once for the whole binary (`--no-huge`).
#![allow(clippy::disallowed_methods)] // The tests pace themselves by the clock.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::{Arc, Mutex, MutexGuard};

use dataplane::dpdk::{check_layout, Eal, EalConfig, Pool, Port, PortConfig};
use dataplane::{DeviceConfig, DeviceCounters, DpdkDevice, RxChecksum, TxChecksum};
use tcp_lite::{ConnId, EventKind, Instant, Stack, StackConfig, TcpConfig, Transport};

const A_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xA];
const B_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xB];
const A_ADDR: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B_ADDR: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);

fn eal() -> Eal {
    Eal::init(&EalConfig::no_huge(768)).expect("EAL starts without hugepages")
}

/// DPDK ports are process-wide and the tests check pools are full after
/// them: one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(std::time::Instant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}

/// How a pair of stacks is built.
struct Setup {
    mtu: u16,
    ring: u32,
    mbufs: u32,
    tx_checksum: TxChecksum,
    rx_checksum: RxChecksum,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            mtu: 1500,
            ring: 1024,
            mbufs: 4096,
            tx_checksum: TxChecksum::Software,
            rx_checksum: RxChecksum::Software,
        }
    }
}

struct Net {
    a: Stack<DpdkDevice>,
    b: Stack<DpdkDevice>,
    pools: Vec<Arc<Pool>>,
    ports: Vec<Port>,
}

impl Net {
    fn new(setup: &Setup) -> Net {
        let eal = eal();
        check_layout().expect("bindgen's rte_mbuf matches C's");
        let room = usize::from(setup.mtu) + 14;
        let pools = vec![
            Pool::new(eal, setup.mbufs, 32, room).unwrap(),
            Pool::new(eal, setup.mbufs, 32, room).unwrap(),
        ];
        let (mut pa, mut pb) = Port::ring_pair(eal, setup.ring).unwrap();
        let config = PortConfig::new(setup.mtu);
        pa.start(&config, &pools[..1]).unwrap();
        pb.start(&config, &pools[1..]).unwrap();
        let device = |port: &Port, mac| {
            DpdkDevice::new(
                port.queue(0).unwrap(),
                DeviceConfig {
                    mac,
                    mtu: usize::from(setup.mtu),
                    tx_checksum: setup.tx_checksum,
                    rx_checksum: setup.rx_checksum,
                },
            )
        };
        let tcp = TcpConfig {
            rx_buffer: 256 * 1024,
            tx_buffer: 256 * 1024,
            ..TcpConfig::default()
        };
        let stack = |mac, addr, dev| {
            let mut c = StackConfig::new(mac, addr);
            c.tcp = tcp.clone();
            Stack::new(c, dev, now()).unwrap()
        };
        let a = stack(A_MAC, A_ADDR, device(&pa, A_MAC));
        let b = stack(B_MAC, B_ADDR, device(&pb, B_MAC));
        Net {
            a,
            b,
            pools,
            ports: vec![pa, pb],
        }
    }

    fn step(&mut self) {
        let t = now();
        self.a.poll(t);
        self.a.device_mut().flush();
        self.b.poll(t);
        self.b.device_mut().flush();
    }

    fn connect(&mut self, port: u16) -> (ConnId, ConnId) {
        self.b.listen(port).unwrap();
        let client = self
            .a
            .connect(SocketAddrV4::new(B_ADDR, port), now())
            .unwrap();
        let (mut connected, mut accepted) = (false, None);
        self.run(|net| {
            while let Some(e) = net.a.next_event() {
                connected |= e.conn == client && e.kind == EventKind::Connected;
            }
            while let Some(e) = net.b.next_event() {
                if matches!(e.kind, EventKind::Accepted(_)) {
                    accepted = Some(e.conn);
                }
            }
            connected && accepted.is_some()
        });
        (client, accepted.expect("accepted"))
    }

    fn run(&mut self, mut done: impl FnMut(&mut Net) -> bool) {
        let start = std::time::Instant::now();
        while !done(self) {
            assert!(start.elapsed().as_secs() < 30, "not done in 30 s");
            self.step();
        }
    }

    /// Both devices' counters.
    fn counters(&self) -> (DeviceCounters, DeviceCounters) {
        (self.a.device().counters(), self.b.device().counters())
    }

    /// Drops everything and checks every mbuf came back.
    fn finish(self) {
        let Net { a, b, pools, ports } = self;
        drop((a, b));
        drop(ports);
        for pool in &pools {
            assert_eq!(
                pool.available(),
                pool.capacity(),
                "mbufs leaked from {}",
                pool.name()
            );
        }
    }
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Sends `total` octets a -> b and checks each one.
fn transfer(net: &mut Net, from: ConnId, to: ConnId, total: u64) {
    let (mut sent, mut received) = (0u64, 0u64);
    net.run(|net| {
        if sent < total {
            let _ = net.a.send_with(from, (total - sent) as usize, |space| {
                for (i, o) in space.iter_mut().enumerate() {
                    *o = pattern(sent + i as u64);
                }
                (space.len(), ())
            });
            sent = net.a.send_position(from).unwrap();
        }
        while let Ok(n) = net.b.recv_with(to, |data, at| {
            for (i, &o) in data.iter().enumerate() {
                assert_eq!(o, pattern(at + i as u64), "octet {} differs", at + i as u64);
            }
            (data.len(), data.len())
        }) {
            received += n as u64;
            if n == 0 {
                break;
            }
        }
        received == total
    });
}

#[test]
fn bindgen_layout_of_rte_mbuf_matches_c() {
    let _g = serial();
    eal();
    check_layout().unwrap();
}

#[test]
fn tcp_over_a_ring_pair_moves_every_octet_and_returns_every_mbuf() {
    let _g = serial();
    for (mtu, tx, rx) in [
        (1500, TxChecksum::Software, RxChecksum::Software),
        (9000, TxChecksum::Software, RxChecksum::Software),
        (9000, TxChecksum::Trusted, RxChecksum::Trusted),
    ] {
        let mut net = Net::new(&Setup {
            mtu,
            tx_checksum: tx,
            rx_checksum: rx,
            ..Setup::default()
        });
        let (client, server) = net.connect(5000);
        transfer(&mut net, client, server, 20 << 20);
        let (a, b) = net.counters();
        assert_eq!(a.rx_dropped() + b.rx_dropped(), 0, "{a:?} {b:?}");
        assert!(a.tx_packets > (20 << 20) / u64::from(mtu), "{a:?}");
        assert_eq!(
            b.rx_packets, a.tx_packets,
            "the ring loses nothing: {a:?} {b:?}"
        );
        net.a.close(client).unwrap();
        net.b.close(server).unwrap();
        net.run(|net| {
            let closed = |s: &mut Stack<DpdkDevice>| {
                std::iter::from_fn(|| s.next_event()).any(|e| e.kind == EventKind::Closed)
            };
            closed(&mut net.a) | closed(&mut net.b)
        });
        net.finish();
    }
}
