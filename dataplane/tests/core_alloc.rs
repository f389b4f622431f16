//! A core's turn allocates nothing per packet: once connections are up and
//! warm, two cores moving RDMA Writes, Reads and Sends (with their
//! completions polled and reposted) make no heap allocation on their
//! thread, over the in-memory link and over a DPDK net_ring pair (a
//! counting global allocator checks, as the engine's own test does).
#![allow(clippy::disallowed_methods)] // The test paces itself by the clock.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4};

use control::mpa::{Accept, StartupConfig};
use control::runtime::{ControlPlane, Decision, StartupResult};
use dataplane::dpdk::{Eal, EalConfig, Pool, Port, PortConfig};
use dataplane::{
    Core, CoreConfig, CoreTransport, DeviceConfig, DpdkDevice, RxChecksum, TxChecksum,
};
use rnic_engine::cq::{Wc, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{
    Mr, QpHandle, QpInit, RecvWr, RemoteAddr, Rnic, RnicConfig, SendOp, SendWr, Sge,
};
use tcp_lite::link::{self, LinkConfig};
use tcp_lite::{CongestionControl, Stack, StackConfig, TcpConfig};

struct Counting;

thread_local! {
    /// Allocations by this thread. Const-initialised, so reading it never
    /// allocates.
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    ALLOCATIONS.with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const PORT: u16 = 9100;

/// One side: its core, its control plane, its memory.
struct Side<T: CoreTransport> {
    core: Core<T>,
    control: ControlPlane,
    mr: Mr,
    cq: rnic_engine::verbs::CqHandle,
}

fn side<T: CoreTransport>(transport: T, emss: usize, seed: u64) -> Side<T> {
    let (control, mut links) = ControlPlane::start(1);
    let mut rnic = Rnic::new(RnicConfig {
        stag_seed: seed,
        ..RnicConfig::default()
    });
    let pd = rnic.alloc_pd().unwrap();
    let cq = rnic.create_cq(1024).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = rnic.reg_region(pd, Region::new(1 << 20), access).unwrap();
    let init = QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        sq_size: 128,
        rq_size: 128,
    };
    Side {
        core: Core::new(
            CoreConfig::new(emss),
            transport,
            links.remove(0),
            rnic,
            init,
        ),
        control,
        mr,
        cq,
    }
}

fn sge(mr: &Mr, offset: u64, len: u32) -> Sge {
    Sge {
        stag: mr.stag,
        to: mr.base_to + offset,
        len,
    }
}

fn turn<A: CoreTransport, B: CoreTransport>(a: &mut Side<A>, b: &mut Side<B>) {
    let now = dataplane::clock::now();
    a.core.turn(now);
    b.core.turn(now);
}

/// Connects a to b and returns both QPs.
fn connect<A: CoreTransport, B: CoreTransport>(
    a: &mut Side<A>,
    b: &mut Side<B>,
    b_addr: Ipv4Addr,
) -> (QpHandle, QpHandle) {
    b.control.listen(
        0,
        PORT,
        StartupConfig::default(),
        Box::new(|_, _| Decision::Accept(Accept::default())),
    );
    let start = std::time::Instant::now();
    while b.core.listen_status(PORT).is_none() {
        assert!(start.elapsed().as_secs() < 10, "no listener");
        turn(a, b);
    }
    a.control.connect(
        0,
        SocketAddrV4::new(b_addr, PORT),
        StartupConfig::default(),
        b"",
    );
    let (mut qa, mut qb) = (None, None);
    while qa.is_none() || qb.is_none() {
        assert!(start.elapsed().as_secs() < 10, "no connection");
        turn(a, b);
        for (side_qp, core) in [
            (&mut qa, &mut a.core as &mut dyn Handoffs),
            (&mut qb, &mut b.core),
        ] {
            if let Some(qp) = core.take() {
                *side_qp = Some(qp);
            }
        }
    }
    (qa.unwrap(), qb.unwrap())
}

/// A core's next established QP, whatever its transport.
trait Handoffs {
    fn take(&mut self) -> Option<QpHandle>;
}

impl<T: CoreTransport> Handoffs for Core<T> {
    fn take(&mut self) -> Option<QpHandle> {
        match self.next_handoff()? {
            (h, Some(qp)) if matches!(h.result, StartupResult::Established(_)) => Some(qp),
            _ => None,
        }
    }
}

/// Writes, Reads and Sends from a to b, 16 in flight, for `turns` turns;
/// returns the messages completed.
fn traffic<A: CoreTransport, B: CoreTransport>(
    a: &mut Side<A>,
    b: &mut Side<B>,
    (qa, qb): (QpHandle, QpHandle),
    turns: usize,
    (posted, completed): (&mut u64, &mut u64),
) -> u64 {
    let mut wcs = [Wc::EMPTY; 64];
    let mut done = 0;
    let remote = RemoteAddr {
        stag: b.mr.stag,
        to: b.mr.base_to,
    };
    for _ in 0..turns {
        while *posted - *completed < 16 {
            let sgl = [sge(&a.mr, 0, 4096)];
            let op = match *posted % 3 {
                0 => SendOp::Write(remote),
                1 => SendOp::Read(remote),
                _ => SendOp::Send,
            };
            if *posted % 3 == 2 {
                let rsgl = [sge(&b.mr, 8192, 4096)];
                b.core
                    .rnic()
                    .post_recv(
                        qb,
                        &RecvWr {
                            wr_id: *posted,
                            sgl: &rsgl,
                        },
                    )
                    .unwrap();
            }
            let wr = SendWr {
                wr_id: *posted,
                op,
                sgl: &sgl,
                signaled: true,
                solicited: false,
                fence: false,
            };
            a.core.rnic().post_send(qa, &wr).unwrap();
            *posted += 1;
        }
        turn(a, b);
        let n = a.core.poll_cq(a.cq, &mut wcs);
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
        done += n as u64;
        *completed += n as u64;
        let m = b.core.poll_cq(b.cq, &mut wcs);
        for wc in &wcs[..m] {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        }
    }
    done
}

fn steady_state_allocates_nothing<A: CoreTransport, B: CoreTransport>(
    mut a: Side<A>,
    mut b: Side<B>,
    b_addr: Ipv4Addr,
) {
    let qps = connect(&mut a, &mut b, b_addr);
    let (mut posted, mut completed) = (0, 0);
    // Warm up: buffers and queues reach their working sizes.
    let warm = traffic(&mut a, &mut b, qps, 5_000, (&mut posted, &mut completed));
    assert!(
        warm > 1_000,
        "warm-up moved {warm} messages: {:?} {:?} {:?} {:?}",
        a.core.counters(),
        b.core.counters(),
        a.core.rnic().qp_state(qps.0),
        b.core.rnic().qp_state(qps.1)
    );
    let before = ALLOCATIONS.with(Cell::get);
    assert!(before > 0, "setting up allocated, and the counter saw it");
    let moved = traffic(&mut a, &mut b, qps, 20_000, (&mut posted, &mut completed));
    let allocations = ALLOCATIONS.with(Cell::get) - before;
    assert!(moved > 5_000, "{moved} messages");
    assert_eq!(
        allocations, 0,
        "{allocations} allocations for {moved} messages"
    );
}

fn tcp() -> TcpConfig {
    TcpConfig {
        congestion: CongestionControl::None,
        ..TcpConfig::default()
    }
}

#[test]
fn a_core_over_the_in_memory_link_allocates_nothing_per_packet() {
    let (end_a, end_b) = link::pair(LinkConfig::ethernet(1500), 3);
    let (a_addr, b_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let stack = |mac: u8, addr, end| {
        let mut c = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
        c.tcp = tcp();
        Stack::new(c, end, dataplane::clock::now()).unwrap()
    };
    let (sa, sb) = (stack(1, a_addr, end_a), stack(2, b_addr, end_b));
    let (ea, eb) = (sa.emss(), sb.emss());
    steady_state_allocates_nothing(side(sa, ea, 1), side(sb, eb, 2), b_addr);
}

#[test]
fn a_core_over_a_dpdk_ring_pair_allocates_nothing_per_packet() {
    let eal = Eal::init(&EalConfig::no_huge(512)).unwrap();
    let (mut pa, mut pb) = Port::ring_pair(eal, 1024).unwrap();
    let pools = [
        Pool::new(eal, 4096, 64, 2048).unwrap(),
        Pool::new(eal, 4096, 64, 2048).unwrap(),
    ];
    pa.start(&PortConfig::new(1500), &pools[..1]).unwrap();
    pb.start(&PortConfig::new(1500), &pools[1..]).unwrap();
    let (a_addr, b_addr) = (Ipv4Addr::new(10, 0, 1, 1), Ipv4Addr::new(10, 0, 1, 2));
    let stack = |port: &Port, mac: u8, addr| {
        let device = DpdkDevice::new(
            port.queue(0).unwrap(),
            DeviceConfig {
                mac: [2, 0, 0, 0, 1, mac],
                mtu: 1500,
                tx_checksum: TxChecksum::Software,
                rx_checksum: RxChecksum::Software,
            },
        );
        let mut c = StackConfig::new([2, 0, 0, 0, 1, mac], addr);
        c.tcp = tcp();
        Stack::new(c, device, dataplane::clock::now()).unwrap()
    };
    let (sa, sb) = (stack(&pa, 1, a_addr), stack(&pb, 2, b_addr));
    let (ea, eb) = (sa.emss(), sb.emss());
    steady_state_allocates_nothing(side(sa, ea, 1), side(sb, eb, 2), b_addr);
}
