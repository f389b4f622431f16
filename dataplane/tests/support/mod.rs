//! Whole hosts for the end-to-end tests: a poll-mode core (`dataplane::Core`
//! over a tcp-lite transport), a control-plane thread, and registered
//! memory, stepped by the test's thread.
// Each test file uses what it needs; the tests pace themselves by the real clock.
#![allow(dead_code, unreachable_pub, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, RtrSet, StartupConfig};
use control::runtime::{ControlPlane, Decision, Handoff, StartupResult};
use dataplane::{Core, CoreConfig, CoreTransport};
use rnic_engine::cq::{Wc, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{
    CqHandle, Mr, QpHandle, QpInit, RecvWr, RemoteAddr, Rnic, RnicConfig, SendOp, SendWr, Sge,
};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::{ConnId, Instant, Stack, StackConfig};

pub const DEADLINE: StdDuration = StdDuration::from_secs(20);

/// A port no other test of this process uses (the kernel tests share
/// loopback and run in parallel), below Linux's ephemeral range (32768 up),
/// where any connection's local end could take it first.
pub fn port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 750) as u16 * 16;
    base + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One clock for every host and step of the process.
pub fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<StdInstant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(StdInstant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}

/// One host: a poll-mode core (its transport, its engine), its control
/// plane, and registered memory.
pub struct Host<T: CoreTransport> {
    pub core: Core<T>,
    pub control: ControlPlane,
    pub cq: CqHandle,
    pub qps: HashMap<ConnId, QpHandle>,
    pub handoffs: Vec<Handoff>,
    pub region: Arc<Region>,
    pub mr: Mr,
}

impl<T: CoreTransport> Host<T> {
    pub fn new(transport: T, emss: usize, seed: u64) -> Host<T> {
        Host::with(
            transport,
            CoreConfig::new(emss),
            RnicConfig::default(),
            seed,
        )
    }

    /// A host with this core's and this engine's configuration.
    pub fn with(transport: T, config: CoreConfig, rnic: RnicConfig, seed: u64) -> Host<T> {
        let (control, mut links) = ControlPlane::start(1);
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..rnic
        });
        let pd = rnic.alloc_pd().unwrap();
        let cq = rnic.create_cq(256).unwrap();
        let region = Region::new(64 * 1024);
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = rnic.reg_region(pd, region.clone(), access).unwrap();
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: 64,
            rq_size: 64,
        };
        Host {
            core: Core::new(config, transport, links.remove(0), rnic, qp_init),
            control,
            cq,
            qps: HashMap::new(),
            handoffs: Vec::new(),
            region,
            mr,
        }
    }

    /// One turn of the core, and the handoffs it made.
    pub fn step(&mut self, now: Instant) {
        self.core.turn(now);
        while let Some((handoff, qp)) = self.core.next_handoff() {
            if let (Some(qp), Some(conn)) = (qp, handoff.conn) {
                self.qps.insert(conn, qp);
            }
            self.handoffs.push(handoff);
        }
    }

    /// The engine.
    pub fn rnic(&mut self) -> &mut Rnic {
        self.core.rnic()
    }

    /// Whether the core still has startups in flight.
    pub fn link_busy(&self) -> bool {
        self.core.in_startup() > 0
    }

    pub fn completions(&mut self) -> Vec<Wc> {
        let mut out = vec![Wc::EMPTY; 64];
        let n = self.core.poll_cq(self.cq, &mut out);
        out.truncate(n);
        out
    }

    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
            len,
        }
    }

    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
        }
    }
}

/// Two hosts on one thread: run until `done`, or fail after the deadline.
pub fn run<T: CoreTransport, U: CoreTransport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    what: &str,
    mut done: impl FnMut(&mut Host<T>, &mut Host<U>) -> bool,
) {
    let start = StdInstant::now();
    while !done(a, b) {
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: not done after {DEADLINE:?}"
        );
        a.step(now());
        b.step(now());
        std::thread::yield_now();
    }
}

/// Connects `a` (initiator) to `b` (responder) and returns the handoffs.
pub fn establish<T: CoreTransport, U: CoreTransport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    b_addr: Ipv4Addr,
    initiator: StartupConfig,
    responder: StartupConfig,
    decide: Decision,
) -> (Handoff, Handoff) {
    let port = port();
    b.control.listen(
        0,
        port,
        responder,
        Box::new(move |request, _peer| {
            assert_eq!(request.private_data, b"hello from a");
            decide.clone()
        }),
    );
    // The listen command reaches b's core before a's SYN does.
    std::thread::sleep(StdDuration::from_millis(20));
    b.step(now());
    let token = a.control.connect(
        0,
        SocketAddrV4::new(b_addr, port),
        initiator,
        b"hello from a",
    );
    run(a, b, "startup", |a, b| {
        !a.handoffs.is_empty() && !b.handoffs.is_empty()
    });
    let (ha, hb) = (a.handoffs.remove(0), b.handoffs.remove(0));
    assert_eq!(ha.token, token);
    (ha, hb)
}

/// [`establish`] with default startups on both sides and `b` accepting.
pub fn establish_plain<T: CoreTransport, U: CoreTransport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    b_addr: Ipv4Addr,
) -> (Handoff, Handoff) {
    let (initiator, responder) = (StartupConfig::default(), StartupConfig::default());
    establish(a, b, b_addr, initiator, responder, accept())
}

/// RDMA both ways once connected: a Send each way, a Write from b into a,
/// a Read by a from b. Checks every octet.
pub fn traffic<T: CoreTransport, U: CoreTransport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    ha: &Handoff,
    hb: &Handoff,
) {
    let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.region.write(0, &data).unwrap();
    b.region.write(0, &data).unwrap();
    let sge = a.sge(40_000, 8_000);
    a.rnic()
        .post_recv(
            qa,
            &RecvWr {
                wr_id: 10,
                sgl: &[sge],
            },
        )
        .unwrap();
    let sge = b.sge(40_000, 8_000);
    b.rnic()
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 20,
                sgl: &[sge],
            },
        )
        .unwrap();
    // b posts first: with MPA fencing its Send waits for a's first FPDU.
    let b_send = [b.sge(0, 5_000)];
    b.rnic()
        .post_send(qb, &SendWr::signaled(21, SendOp::Send, &b_send))
        .unwrap();
    let b_write = [b.sge(5_000, 7_000)];
    b.rnic()
        .post_send(
            qb,
            &SendWr::signaled(22, SendOp::Write(a.remote(20_000)), &b_write),
        )
        .unwrap();
    let a_send = [a.sge(0, 6_000)];
    a.rnic()
        .post_send(qa, &SendWr::signaled(11, SendOp::Send, &a_send))
        .unwrap();
    let a_read = [a.sge(30_000, 9_000)];
    a.rnic()
        .post_send(
            qa,
            &SendWr::signaled(12, SendOp::Read(b.remote(1_000)), &a_read),
        )
        .unwrap();
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    run(a, b, "traffic", |a, b| {
        wa.extend(a.completions());
        wb.extend(b.completions());
        wa.len() == 3 && wb.len() == 3
    });
    for wc in wa.iter().chain(&wb) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    let read = |r: &Region, at: usize, len: usize| {
        let mut v = vec![0; len];
        r.read(at, &mut v).unwrap();
        v
    };
    assert_eq!(read(&b.region, 40_000, 6_000), &data[..6_000], "a's Send");
    assert_eq!(read(&a.region, 40_000, 5_000), &data[..5_000], "b's Send");
    assert_eq!(
        read(&a.region, 20_000, 7_000),
        &data[5_000..12_000],
        "b's Write"
    );
    assert_eq!(
        read(&a.region, 30_000, 9_000),
        &data[1_000..10_000],
        "a's Read"
    );
}

pub fn stacks() -> (Host<Stack<LinkEnd>>, Host<Stack<LinkEnd>>, Ipv4Addr) {
    stacks_with(|_, _| {})
}

/// [`stacks`], b's core and engine configured by `configure_b` first.
pub fn stacks_with(
    configure_b: impl FnOnce(&mut CoreConfig, &mut RnicConfig),
) -> (Host<Stack<LinkEnd>>, Host<Stack<LinkEnd>>, Ipv4Addr) {
    let (end_a, end_b) = link::pair(LinkConfig::ethernet(1500), 5);
    let (a_addr, b_addr) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let a = Stack::new(
        StackConfig::new([2, 0, 0, 0, 0, 1], a_addr),
        end_a,
        Instant::ZERO,
    )
    .unwrap();
    let b = Stack::new(
        StackConfig::new([2, 0, 0, 0, 0, 2], b_addr),
        end_b,
        Instant::ZERO,
    )
    .unwrap();
    let (ea, eb) = (a.emss(), b.emss());
    let (mut core, mut rnic) = (CoreConfig::new(eb), RnicConfig::default());
    configure_b(&mut core, &mut rnic);
    (Host::new(a, ea, 1), Host::with(b, core, rnic, 2), b_addr)
}

pub fn kernels() -> (Host<KernelTransport>, Host<KernelTransport>, Ipv4Addr) {
    let config = KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        ..KernelConfig::default()
    };
    let a = KernelTransport::new(config.clone()).unwrap();
    let b = KernelTransport::new(config).unwrap();
    (
        Host::new(a, 1448, 1),
        Host::new(b, 1448, 2),
        Ipv4Addr::LOCALHOST,
    )
}

pub fn p2p(rtr: RtrSet) -> StartupConfig {
    StartupConfig {
        peer_to_peer: true,
        rtr,
        ..StartupConfig::default()
    }
}

pub fn accept() -> Decision {
    Decision::Accept(Accept {
        private_data: b"hello from b".to_vec(),
        ..Accept::default()
    })
}

pub fn established(h: &Handoff) -> &control::mpa::Established {
    match &h.result {
        StartupResult::Established(e) => e,
        other => panic!("not established: {other:?}"),
    }
}
