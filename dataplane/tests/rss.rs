//! Receive side scaling programmed on a port that has it. No NIC is here;
//! DPDK's `net_null` driver keeps a redirection table and a hash key as a
//! NIC does (it receives nothing, so the spreading itself cannot be seen):
//! the port is configured, its table written, its key set (the driver
//! ignores the key in the configuration, so this takes
//! `rte_eth_dev_rss_hash_update`, the path for drivers that do the same),
//! and both read back. A port left to itself keeps the driver's defaults,
//! so the read-back shows our writes, not defaults that happen to match.
//! Ports without RSS (`net_ring`, and the TAP driver on this kernel) are
//! steered in software: `tests/steer.rs`.

use std::sync::Arc;

use dataplane::dpdk::{Eal, EalConfig, Mbuf, Pool, Port, PortConfig, Rss};
use tcp_lite::rss::{Reta, SYMMETRIC_KEY};

fn started(eal: Eal, name: &str, queues: u16, key: Option<[u8; 40]>) -> Port {
    let mut port = Port::vdev(eal, name, "").expect("net_null is a plugin of Debian's DPDK");
    let pools: Vec<Arc<Pool>> = (0..queues)
        .map(|_| Pool::new(eal, 1024, 0, 2048).unwrap())
        .collect();
    let mut config = PortConfig::new(1500);
    config.queues = queues;
    config.rss_key = key;
    port.start(&config, &pools).unwrap();
    port
}

#[test]
fn a_port_with_rss_hashes_by_our_key_into_our_table() {
    let eal = Eal::init(&EalConfig::no_huge(512)).unwrap();
    let caps = Port::vdev(eal, "net_null9", "")
        .unwrap()
        .info()
        .rss
        .expect("net_null has a redirection table");
    assert_eq!(caps.reta_size, 128);

    // Three queues: a table that no driver's default (all zeros, or
    // entry i = i % queues over another length) gives by chance.
    let ours = started(eal, "net_null0", 3, Some(SYMMETRIC_KEY));
    let Rss::Hardware {
        key,
        reta,
        port_entries,
    } = ours.rss()
    else {
        panic!("programmed: {:?}", ours.rss());
    };
    assert_eq!((key, port_entries), (&SYMMETRIC_KEY, &128));
    assert_eq!(reta, &Reta::new(128, 3).unwrap());
    let (table, read_key) = ours.rss_readback().unwrap();
    assert_eq!(table, reta.entries(), "the port's table is ours");
    assert_eq!(read_key, SYMMETRIC_KEY, "the port hashes with our key");
    assert!(ours
        .rss()
        .describe()
        .contains("128-entry table over 3 queues"));

    // Not asked: the driver's own table and key stay, and differ.
    let theirs = started(eal, "net_null1", 3, None);
    assert_eq!(theirs.rss(), &Rss::Off);
    let (table, key) = theirs.rss_readback().unwrap();
    assert_ne!(table, reta.entries());
    assert_ne!(key, SYMMETRIC_KEY);

    // One queue: nothing to spread.
    let single = started(eal, "net_null2", 1, Some(SYMMETRIC_KEY));
    assert_eq!(single.rss(), &Rss::Off);
}

/// A received frame's octets never reach past its mbuf's buffer, whatever
/// length the driver wrote: `net_null` with `size=1024` fills 64-octet
/// buffers with 1,024-octet frames, and `Mbuf::data` handed out slices
/// over the next mbufs of the pool (found by a review).
#[test]
fn a_frame_the_driver_made_longer_than_its_buffer_stays_in_its_buffer() {
    let eal = Eal::init(&EalConfig::no_huge(512)).unwrap();
    let pool = Pool::new(eal, 512, 0, 64).unwrap();
    let mut port = Port::vdev(eal, "net_null7", "size=1024").unwrap();
    let mut config = PortConfig::new(50);
    config.rx_descriptors = 64;
    config.tx_descriptors = 64;
    port.start(&config, &[pool]).unwrap();
    let mut q = port.queue(0).unwrap();
    let mut out: [Option<Mbuf>; 4] = Default::default();
    let n = q.rx_burst(&mut out);
    assert!(n > 0, "net_null always has a frame");
    for m in out[..n].iter_mut().map(|m| m.as_mut().unwrap()) {
        assert_eq!(m.pkt_len(), 1024, "the driver's length");
        let room = m.room();
        assert!(room <= 64, "{room}");
        assert!(
            m.data().len() <= room,
            "{} octets in {room}",
            m.data().len()
        );
        let len = m.data_mut().len();
        assert!(len <= room);
    }
}
