//! Whole RNICs end to end: a control-plane thread per host runs the MPA
//! startup over the host's tcp-lite transport (the in-memory link, or Linux
//! TCP over loopback), hands the connection to the "core" (this thread),
//! which runs an engine QP over the same TCP connection. Peer-to-peer with
//! each RTR, client-server with the responder fenced, reject with private
//! data, and a revision-1 initiator; RDMA Send, Write and Read checked octet
//! by octet afterwards.
#![allow(clippy::disallowed_methods)] // The test paces itself by the real clock.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, Rtr, RtrSet, StartupConfig};
use control::runtime::{ControlPlane, CoreLink, Decision, Handoff, StartupResult};
use rnic_engine::cq::{Wc, WcStatus};
use rnic_engine::mem::{Access, Pd, Region};
use rnic_engine::verbs::{
    CqHandle, Mr, QpHandle, QpInit, RecvWr, RemoteAddr, Rnic, RnicConfig, SendOp, SendWr, Sge,
};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::kernel::{KernelConfig, KernelTransport};
use tcp_lite::{ConnId, Instant, Stack, StackConfig, Transport};

const DEADLINE: StdDuration = StdDuration::from_secs(20);

/// A port no other test of this process uses (the kernel tests share
/// loopback and run in parallel).
fn port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 2_000) as u16 * 16;
    base + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One clock for every host and step of the process.
fn now() -> Instant {
    static EPOCH: std::sync::OnceLock<StdInstant> = std::sync::OnceLock::new();
    let epoch = EPOCH.get_or_init(StdInstant::now);
    Instant::from_micros(epoch.elapsed().as_micros() as i64 + 1)
}

/// One host: its transport (the core's), its control plane, its RNIC.
struct Host<T: Transport> {
    transport: T,
    control: ControlPlane,
    link: CoreLink,
    rnic: Rnic,
    pd: Pd,
    cq: CqHandle,
    emss: usize,
    qps: HashMap<ConnId, QpHandle>,
    handoffs: Vec<Handoff>,
    region: Arc<Region>,
    mr: Mr,
}

impl<T: Transport> Host<T> {
    fn new(transport: T, emss: usize, seed: u64) -> Host<T> {
        let (control, mut links) = ControlPlane::start(1);
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().unwrap();
        let cq = rnic.create_cq(256).unwrap();
        let region = Region::new(64 * 1024);
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = rnic.reg_region(pd, region.clone(), access).unwrap();
        Host {
            transport,
            control,
            link: links.remove(0),
            rnic,
            pd,
            cq,
            emss,
            qps: HashMap::new(),
            handoffs: Vec::new(),
            region,
            mr,
        }
    }

    /// One turn of the core's loop.
    fn step(&mut self, now: Instant) {
        self.transport.poll(now);
        while let Some(event) = self.transport.next_event() {
            self.link.handle_event(&mut self.transport, event);
        }
        self.link.poll(&mut self.transport, now);
        while let Some(handoff) = self.link.next_handoff() {
            if let StartupResult::Established(e) = &handoff.result {
                let qp = self
                    .rnic
                    .create_qp(QpInit {
                        pd: self.pd,
                        send_cq: self.cq,
                        recv_cq: self.cq,
                        srq: None,
                        sq_size: 64,
                        rq_size: 64,
                    })
                    .unwrap();
                self.rnic
                    .connect(qp, e.connection(self.emss, 65535))
                    .unwrap();
                self.qps.insert(handoff.conn, qp);
            }
            self.handoffs.push(handoff);
        }
        // The engine's FPDUs go straight into TCP's transmit space; what TCP
        // received goes straight to the engine.
        for (&conn, &qp) in &self.qps {
            let rnic = &mut self.rnic;
            let _ = self.transport.send_with(conn, 64 * 1024, |space| {
                let n = rnic.poll_transmit(qp, space).unwrap_or(0);
                (n, ())
            });
            loop {
                let got = self.transport.recv_with(conn, |data, _| {
                    let n = rnic.handle_stream(qp, data).unwrap_or(0);
                    (n, n)
                });
                match got {
                    Ok(n) if n > 0 => {}
                    _ => break,
                }
            }
        }
        self.transport.poll(now);
    }

    /// Whether the core still has startups in flight.
    fn link_busy(&self) -> bool {
        self.link.in_startup() > 0
    }

    fn completions(&mut self) -> Vec<Wc> {
        let blank = Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: rnic_engine::cq::WcOpcode::Send,
            qp: QpHandle(0),
            byte_len: 0,
            imm: None,
            invalidated: None,
            solicited: false,
        };
        let mut out = vec![blank; 64];
        let n = self.rnic.poll_cq(self.cq, &mut out).unwrap();
        out.truncate(n);
        out
    }

    fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
            len,
        }
    }

    fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
        }
    }
}

/// Two hosts on one thread: run until `done`, or fail after the deadline.
fn run<T: Transport, U: Transport>(
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

fn send(wr_id: u64, op: SendOp, sgl: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op,
        sgl,
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// Connects `a` (initiator) to `b` (responder) and returns the handoffs.
fn establish<T: Transport, U: Transport>(
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

/// RDMA both ways once connected: a Send each way, a Write from b into a,
/// a Read by a from b. Checks every octet.
fn traffic<T: Transport, U: Transport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    ha: &Handoff,
    hb: &Handoff,
) {
    let (qa, qb) = (a.qps[&ha.conn], b.qps[&hb.conn]);
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.region.write(0, &data).unwrap();
    b.region.write(0, &data).unwrap();
    a.rnic
        .post_recv(
            qa,
            &RecvWr {
                wr_id: 10,
                sgl: &[a.sge(40_000, 8_000)],
            },
        )
        .unwrap();
    b.rnic
        .post_recv(
            qb,
            &RecvWr {
                wr_id: 20,
                sgl: &[b.sge(40_000, 8_000)],
            },
        )
        .unwrap();
    // b posts first: with MPA fencing its Send waits for a's first FPDU.
    let b_send = [b.sge(0, 5_000)];
    b.rnic
        .post_send(qb, &send(21, SendOp::Send, &b_send))
        .unwrap();
    let b_write = [b.sge(5_000, 7_000)];
    b.rnic
        .post_send(qb, &send(22, SendOp::Write(a.remote(20_000)), &b_write))
        .unwrap();
    let a_send = [a.sge(0, 6_000)];
    a.rnic
        .post_send(qa, &send(11, SendOp::Send, &a_send))
        .unwrap();
    let a_read = [a.sge(30_000, 9_000)];
    a.rnic
        .post_send(qa, &send(12, SendOp::Read(b.remote(1_000)), &a_read))
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

fn stacks() -> (Host<Stack<LinkEnd>>, Host<Stack<LinkEnd>>, Ipv4Addr) {
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
    (Host::new(a, ea, 1), Host::new(b, eb, 2), b_addr)
}

fn kernels() -> (Host<KernelTransport>, Host<KernelTransport>, Ipv4Addr) {
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

fn p2p(rtr: RtrSet) -> StartupConfig {
    StartupConfig {
        peer_to_peer: true,
        rtr,
        ..StartupConfig::default()
    }
}

fn accept() -> Decision {
    Decision::Accept(Accept {
        private_data: b"hello from b".to_vec(),
        ..Accept::default()
    })
}

fn established(h: &Handoff) -> &control::mpa::Established {
    match &h.result {
        StartupResult::Established(e) => e,
        other => panic!("not established: {other:?}"),
    }
}

macro_rules! on_every_transport {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;

            #[test]
            fn in_memory_link() {
                let (mut a, mut b, addr) = stacks();
                ($body)(&mut a, &mut b, addr);
            }

            #[test]
            fn kernel_tcp() {
                let (mut a, mut b, addr) = kernels();
                ($body)(&mut a, &mut b, addr);
            }
        }
    };
}

fn p2p_with<T: Transport, U: Transport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    addr: Ipv4Addr,
    rtr: Rtr,
) {
    let one = match rtr {
        Rtr::Send => RtrSet {
            send: true,
            ..RtrSet::NONE
        },
        Rtr::Write => RtrSet {
            write: true,
            ..RtrSet::NONE
        },
        Rtr::Read => RtrSet {
            read: true,
            ..RtrSet::NONE
        },
    };
    let (ha, hb) = establish(a, b, addr, p2p(one), p2p(RtrSet::ALL), accept());
    let (ea, eb) = (established(&ha), established(&hb));
    assert_eq!(ea.rtr, Some(rtr));
    assert!(eb.rtr_accept.contains(rtr) && eb.fenced && eb.peer_to_peer);
    assert_eq!(ea.peer_private_data, b"hello from b");
    assert_eq!(eb.peer_private_data, b"hello from a");
    traffic(a, b, &ha, &hb);
}

on_every_transport!(p2p_write_rtr, |a: &mut Host<_>, b: &mut Host<_>, addr| {
    p2p_with(a, b, addr, Rtr::Write)
});
on_every_transport!(p2p_read_rtr, |a: &mut Host<_>, b: &mut Host<_>, addr| {
    p2p_with(a, b, addr, Rtr::Read)
});
on_every_transport!(p2p_send_rtr, |a: &mut Host<_>, b: &mut Host<_>, addr| {
    p2p_with(a, b, addr, Rtr::Send)
});

on_every_transport!(client_server, |a: &mut Host<_>, b: &mut Host<_>, addr| {
    let (ha, hb) = establish(
        a,
        b,
        addr,
        StartupConfig::default(),
        StartupConfig::default(),
        accept(),
    );
    assert!(
        established(&ha).rtr.is_none() && !established(&hb).peer_to_peer && established(&hb).fenced
    );
    traffic(a, b, &ha, &hb);
});

on_every_transport!(
    reject_with_private_data,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        let (ha, hb) = establish(
            a,
            b,
            addr,
            StartupConfig::default(),
            StartupConfig::default(),
            Decision::Reject(b"not today".to_vec()),
        );
        match (&ha.result, &hb.result) {
            (StartupResult::Rejected(ra), StartupResult::Rejected(rb)) => {
                assert_eq!(ra.private_data, b"not today");
                assert_eq!(rb.private_data, b"not today");
            }
            other => panic!("{other:?}"),
        }
        assert!(a.qps.is_empty() && b.qps.is_empty());
    }
);

on_every_transport!(
    revision_1_initiator,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        let v1 = StartupConfig {
            revision: 1,
            enhanced: false,
            ..StartupConfig::default()
        };
        let (ha, hb) = establish(a, b, addr, v1, StartupConfig::default(), accept());
        assert_eq!(
            (established(&ha).revision, established(&hb).revision),
            (1, 1)
        );
        assert!(!established(&ha).enhanced && !established(&hb).enhanced);
        traffic(a, b, &ha, &hb);
    }
);

/// A responder's host against raw TCP peers that stall, flood, dribble or
/// disconnect at every byte of the Request: each ends (closed, timed out,
/// or established) within the timeouts, nothing leaks, and a good peer is
/// served afterwards.
#[test]
fn the_control_plane_survives_hostile_peers() {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    let (mut a, mut b, addr) = kernels();
    let port = port();
    let config = StartupConfig {
        request_timeout: tcp_lite::Duration::from_millis(300),
        startup_timeout: tcp_lite::Duration::from_millis(600),
        ..StartupConfig::default()
    };
    b.control
        .listen(0, port, config.clone(), Box::new(|_, _| accept()));
    std::thread::sleep(StdDuration::from_millis(20));
    b.step(now());
    let request = {
        let repr = rnic_engine::wire::mpa_rr::Repr {
            kind: rnic_engine::wire::mpa_rr::FrameKind::Request,
            markers: false,
            crc: true,
            reject: false,
            reserved: 0,
            revision: 2,
            enhanced: Some(Default::default()),
            private_data: b"hello from a",
        };
        let mut out = vec![0; repr.buffer_len()];
        repr.emit(&mut rnic_engine::wire::mpa_rr::Packet::new_unchecked(
            &mut out[..],
        ));
        out
    };
    let target = SocketAddrV4::new(addr, port);
    // Steps b until `done`, at most 2 s.
    let pump = |b: &mut Host<KernelTransport>,
                done: &mut dyn FnMut(&mut Host<KernelTransport>) -> bool| {
        let start = StdInstant::now();
        while !done(b) {
            assert!(
                start.elapsed() < StdDuration::from_secs(2),
                "b did not finish"
            );
            b.step(now());
            std::thread::sleep(StdDuration::from_micros(200));
        }
    };
    use control::mpa::FailReason;
    type Peer = (
        &'static str,
        Option<FailReason>,
        Box<dyn Fn(&mut TcpStream)>,
    );
    let mut peers: Vec<Peer> = vec![
        (
            "a peer that never sends",
            Some(FailReason::RequestTimeout),
            Box::new(|_| {}),
        ),
        (
            "a peer that floods garbage",
            Some(FailReason::BadKey),
            Box::new(|s: &mut TcpStream| {
                s.set_nonblocking(true).unwrap();
                let junk = vec![0xFF; 64 * 1024];
                for _ in 0..8 {
                    let _ = s.write(&junk);
                }
            }),
        ),
    ];
    for cut in [0usize, 1, 10, 17, 19, 20, 21, 25, request.len() - 1] {
        let part = request[..cut].to_vec();
        // The core hears the close and drops the startup: no handoff.
        peers.push((
            "a peer that disconnects mid-Request",
            None,
            Box::new(move |s: &mut TcpStream| {
                s.write_all(&part).unwrap();
                s.shutdown(std::net::Shutdown::Both).unwrap();
            }),
        ));
    }
    for (what, reason, behave) in &peers {
        let accepted = b.transport.stats().accepted;
        let mut stream = TcpStream::connect(target).unwrap();
        behave(&mut stream);
        pump(&mut b, &mut |b| b.transport.stats().accepted > accepted);
        pump(&mut b, &mut |b| {
            b.transport.connections() == 0
                && !b.link_busy()
                && (reason.is_none() || !b.handoffs.is_empty())
        });
        assert!(b.qps.is_empty(), "{what}: no QP");
        let reasons: Vec<_> = b
            .handoffs
            .drain(..)
            .map(|h| match h.result {
                StartupResult::Failed(f) => Some(f.reason),
                _ => None,
            })
            .collect();
        match reason {
            Some(reason) => assert_eq!(reasons, [Some(*reason)], "{what}"),
            None => assert!(reasons.is_empty(), "{what}: {reasons:?}"),
        }
        drop(stream);
    }
    // A dribbled Request is still a Request.
    let mut stream = TcpStream::connect(target).unwrap();
    stream.set_nodelay(true).unwrap();
    for octet in &request {
        stream.write_all(std::slice::from_ref(octet)).unwrap();
        b.step(now());
    }
    pump(&mut b, &mut |b| !b.handoffs.is_empty());
    assert!(matches!(
        b.handoffs.remove(0).result,
        StartupResult::Established(_)
    ));
    let mut reply = [0u8; 36];
    stream
        .set_read_timeout(Some(StdDuration::from_secs(2)))
        .unwrap();
    stream.read_exact(&mut reply).unwrap();
    assert_eq!(&reply[..16], b"MPA ID Rep Frame");
    // And a real peer afterwards.
    let (ha, hb) = establish(
        &mut a,
        &mut b,
        addr,
        StartupConfig::default(),
        StartupConfig::default(),
        accept(),
    );
    traffic(&mut a, &mut b, &ha, &hb);
}
