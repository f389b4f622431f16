//! The safe wrapper's ownership rules where DPDK's own behaviour makes them
//! easy to break, in one process whose last step is EAL's cleanup (which a
//! process can do once, hence a binary of its own, run in order):
//!
//! 1. a bulk allocation that fails on a thread with a mempool cache hands
//!    out nothing (DPDK 22.11 leaves cached pointers in the output array on
//!    that path), and every mbuf is handed out once;
//! 2. a transmit burst sends the frames before the first empty slot and
//!    keeps the rest in order;
//! 3. frames one `net_ring` port sent that the other never read go back to
//!    their pool after both ports close, whichever closes first, while the
//!    other is still in use;
//! 4. a dropped pool's memory stays while an mbuf of it is out or may sit
//!    in a thread's mempool cache, and is freed once they are all home: at
//!    the drop, when a registered thread leaves, at the latest at cleanup;
//! 5. cleanup is refused while a pool, port, queue or thread registration
//!    lives, or an mbuf of a dropped pool is out, and after it every
//!    constructor says DPDK is gone.

use std::collections::HashSet;
use std::sync::Arc;

use dataplane::dpdk::{register_thread, Eal, EalConfig, Mbuf, Pool, Port, PortConfig};

/// One step: its name and what it runs.
type Step = (&'static str, fn(Eal));

fn main() {
    let eal = Eal::init(&EalConfig::no_huge(256)).expect("EAL starts without hugepages");
    let steps: [Step; 5] = [
        (
            "a_failed_bulk_allocation_hands_out_nothing",
            failed_bulk_allocation,
        ),
        (
            "tx_burst_sends_up_to_the_first_empty_slot",
            tx_burst_with_a_hole,
        ),
        (
            "unread_ring_frames_go_back_after_both_ports_close",
            unread_ring_frames,
        ),
        (
            "a_dropped_pool_keeps_its_memory_until_its_mbufs_are_home",
            dropped_pool_with_mbufs_out,
        ),
        (
            "cleanup_waits_for_every_object_and_is_final",
            cleanup_is_final,
        ),
    ];
    for (name, step) in steps {
        step(eal);
        println!("test {name} ... ok");
    }
    println!("\ntest result: ok. {} passed", steps.len());
}

/// The data room's address: an mbuf's identity.
fn id(m: &Mbuf) -> usize {
    m.data().as_ptr() as usize
}

fn failed_bulk_allocation(eal: Eal) {
    // A thread of its own, registered: it gets an lcore id and with it the
    // pool's per-lcore cache, the path where DPDK's failed bulk get writes
    // cached pointers into the caller's array.
    std::thread::scope(|s| {
        s.spawn(|| {
            let _registered = register_thread(eal).expect("an lcore id for this thread");
            let pool = Pool::new(eal, 100, 32, 256).unwrap();
            let mut held: Vec<Mbuf> = Vec::new();
            // Fill the cache, then give some back into it.
            let mut bulk: Vec<Option<Mbuf>> = (0..32).map(|_| None).collect();
            for _ in 0..2 {
                assert!(pool.alloc_bulk(&mut bulk));
                held.extend(bulk.iter_mut().map(|m| m.take().unwrap()));
            }
            held.truncate(40);
            // 60 free (some in the cache): take singles until fewer than 32.
            while pool.available() >= 32 {
                held.push(pool.alloc().expect("one mbuf"));
            }
            let free = pool.available() as usize;
            assert!(!pool.alloc_bulk(&mut bulk), "{free} free, 32 asked");
            assert!(bulk.iter().all(Option::is_none), "nothing handed out");
            assert_eq!(pool.available() as usize, free, "nothing taken");
            // The rest, one by one: each handed out once.
            while let Some(m) = pool.alloc() {
                held.push(m);
            }
            assert_eq!(held.len(), 100);
            let distinct: HashSet<usize> = held.iter().map(id).collect();
            assert_eq!(distinct.len(), 100, "an mbuf handed out twice");
            drop(held);
            assert_eq!(pool.available(), pool.capacity());
        });
    });
}

fn ring_pair(eal: Eal) -> (Port, Port, Arc<Pool>, Arc<Pool>) {
    let pa = Pool::new(eal, 256, 0, 2048).unwrap();
    let pb = Pool::new(eal, 256, 0, 2048).unwrap();
    let (mut a, mut b) = Port::ring_pair(eal, 256).unwrap();
    let config = PortConfig::new(1500);
    a.start(&config, std::slice::from_ref(&pa)).unwrap();
    b.start(&config, std::slice::from_ref(&pb)).unwrap();
    (a, b, pa, pb)
}

fn frame(pool: &Pool, mark: u8) -> Mbuf {
    let mut m = pool.alloc().expect("an mbuf");
    m.set_len(60).expect("room").fill(mark);
    m
}

fn tx_burst_with_a_hole(eal: Eal) {
    let (a, b, pa, pb) = ring_pair(eal);
    let (mut qa, mut qb) = (a.queue(0).unwrap(), b.queue(0).unwrap());
    let mut frames = vec![Some(frame(&pa, 1)), None, Some(frame(&pa, 3))];
    assert_eq!(
        qa.tx_burst(&mut frames),
        1,
        "only the frame before the hole"
    );
    assert!(frames[0].is_none() && frames[2].is_none());
    assert_eq!(frames[1].as_ref().map(|m| m.data()[0]), Some(3));
    let mut got: Vec<Option<Mbuf>> = (0..4).map(|_| None).collect();
    assert_eq!(qb.rx_burst(&mut got), 1);
    assert_eq!(got[0].as_ref().map(|m| m.data()[0]), Some(1));
    // More frames than a burst: the first 32 go, the rest move up.
    let mut many: Vec<Option<Mbuf>> = (0..40).map(|i| Some(frame(&pa, i))).collect();
    assert_eq!(qa.tx_burst(&mut many), 32);
    let left: Vec<u8> = many.iter().flatten().map(|m| m.data()[0]).collect();
    assert_eq!(left, (32..40).collect::<Vec<u8>>());
    assert!(many[..8].iter().all(Option::is_some));
    drop((frames, got, many, qa, qb, a, b));
    assert_eq!(pa.available(), pa.capacity(), "A's mbufs back");
    assert_eq!(pb.available(), pb.capacity(), "B's mbufs back");
}

fn unread_ring_frames(eal: Eal) {
    for sender_closes_first in [true, false] {
        let (a, b, pa, pb) = ring_pair(eal);
        let mut qa = a.queue(0).unwrap();
        let qb = b.queue(0).unwrap();
        let mut frames: Vec<Option<Mbuf>> = (0..20).map(|i| Some(frame(&pa, i))).collect();
        assert_eq!(qa.tx_burst(&mut frames), 20);
        assert_eq!(pa.available(), pa.capacity() - 20, "20 in the ring");
        if sender_closes_first {
            // B still holds its queue (a core would be polling it): A's
            // frames stay in the ring, readable, until B closes too.
            drop((qa, a));
            assert_eq!(pa.available(), pa.capacity() - 20);
            drop((qb, b));
        } else {
            drop((qb, b));
            drop((qa, a));
        }
        assert_eq!(
            pa.available(),
            pa.capacity(),
            "unread frames back (sender closed first: {sender_closes_first})"
        );
        assert_eq!(pb.available(), pb.capacity());
    }
}

fn dropped_pool_with_mbufs_out(eal: Eal) {
    let start = eal.pools();
    // Every mbuf home, none cached: freed at the drop.
    drop(Pool::new(eal, 64, 0, 256).unwrap());
    assert_eq!(eal.pools().freed, start.freed + 1, "an idle pool is freed");
    assert_eq!(eal.pools().retired, start.retired);

    // Dropped with an mbuf out: the mbuf's memory stays the pool's.
    let pool = Pool::new(eal, 64, 0, 256).unwrap();
    let mut out = frame(&pool, 7);
    drop(pool);
    assert_eq!(eal.pools().retired, start.retired + 1, "kept for its mbuf");
    assert_eq!(eal.pools().freed, start.freed + 1);
    out.data_mut().fill(9);
    assert!(
        out.data().iter().all(|&b| b == 9),
        "the mbuf is still usable"
    );
    // Freed on a thread with no lcore id: straight into the pool's ring,
    // where the next look (any pool's drop, here the core's) finds it.
    std::thread::spawn(move || drop(out)).join().unwrap();

    // A registered thread (a poll-mode core) drops the last handle while
    // it still holds mbufs, then frees them into its own mempool cache:
    // the memory stays until the thread leaves and its cache goes home.
    let (dropped_tx, dropped_rx) = std::sync::mpsc::channel();
    let (leave_tx, leave_rx) = std::sync::mpsc::channel::<()>();
    let core = std::thread::spawn(move || {
        let registration = register_thread(eal).expect("an lcore id");
        let pool = Pool::new(eal, 64, 32, 256).unwrap();
        let held: Vec<Mbuf> = (0..10).map(|i| frame(&pool, i)).collect();
        drop(pool);
        drop(held);
        dropped_tx.send(()).unwrap();
        leave_rx.recv().unwrap();
        drop(registration);
    });
    dropped_rx.recv().unwrap();
    let cached = eal.pools();
    assert_eq!(
        cached.freed,
        start.freed + 2,
        "the first one's mbuf came home"
    );
    assert_eq!(
        cached.retired,
        start.retired + 1,
        "a pool whose mbufs sit in a live thread's cache is kept"
    );
    leave_tx.send(()).unwrap();
    core.join().unwrap();
    let after = eal.pools();
    assert_eq!(after.retired, start.retired, "freed as the thread left");
    assert_eq!(after.freed, start.freed + 3);
    assert_eq!(after.live, start.live, "no live pool was counted or lost");
}

fn cleanup_is_final(eal: Eal) {
    let pool = Pool::new(eal, 64, 0, 256).unwrap();
    let refused = eal.cleanup().expect_err("a pool lives");
    assert!(refused.to_string().contains("still exist"), "{refused}");
    drop(pool);
    // A dropped pool with an mbuf out: the mbuf would dangle after cleanup.
    let pool = Pool::new(eal, 64, 32, 256).unwrap();
    let out = frame(&pool, 1);
    drop(pool);
    let refused = eal.cleanup().expect_err("an mbuf of a dropped pool is out");
    assert!(refused.to_string().contains("still in use"), "{refused}");
    // Freed into this (the main lcore's) mempool cache: cleanup, on this
    // thread, sends it home and frees the pool.
    drop(out);
    let retired = eal.pools();
    assert_eq!(retired.retired, 1, "kept while its mbuf sits in a cache");
    // A thread registration counts too.
    let (registered_tx, registered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let registration = register_thread(eal).expect("an lcore id");
        registered_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        drop(registration);
    });
    registered_rx.recv().unwrap();
    let refused = eal.cleanup().expect_err("a thread is registered");
    assert!(refused.to_string().contains("still exist"), "{refused}");
    release_tx.send(()).unwrap();
    thread.join().unwrap();
    eal.cleanup().expect("nothing of DPDK's lives");
    let cleaned = eal.pools();
    assert_eq!(cleaned.retired, 0, "cleanup freed the dropped pool");
    assert_eq!(cleaned.freed, retired.freed + 1);
    let after = |what: &str, e: String| {
        assert!(e.contains("cleaned up"), "{what} after cleanup: {e}");
    };
    after(
        "a pool",
        Pool::new(eal, 64, 0, 256).unwrap_err().to_string(),
    );
    after(
        "a ring pair",
        Port::ring_pair(eal, 64)
            .map(|_| ())
            .unwrap_err()
            .to_string(),
    );
    after(
        "a vdev",
        Port::vdev(eal, "net_null9", "")
            .map(|_| ())
            .unwrap_err()
            .to_string(),
    );
    after(
        "a thread registration",
        std::thread::spawn(move || register_thread(eal).map(|_| ()).unwrap_err().to_string())
            .join()
            .unwrap(),
    );
    after(
        "EAL's start",
        Eal::init(&EalConfig::no_huge(256)).unwrap_err().to_string(),
    );
}
