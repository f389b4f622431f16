//! One port, both lower layers: on each host a poll-mode core runs MPA over
//! TCP (`dataplane::Core`) and lends its tcp-lite stack, turn after turn, to
//! an `SctpUnit` that runs DDP over SCTP over UDP (RFC 5043, RFC 6951) on
//! the same stack, device and link. Both carry RDMA Writes and Reads at
//! once, every octet checked, and either's end leaves the other running.
#![allow(clippy::disallowed_methods)] // The hosts pace themselves by the real clock.

mod support;

use std::net::SocketAddrV4;
use std::sync::Arc;
use std::time::Instant as StdInstant;

use control::runtime::{ControlPlane, Decision, OnInitiate};
use control::session::Accept;
use dataplane::{SctpCoreConfig, SctpEvent, SctpUnit};
use rnic_engine::cq::{Wc, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{CqHandle, Mr, QpInit, RemoteAddr, SendOp, SendWr, Sge};
use support::*;
use tcp_lite::link::LinkEnd;
use tcp_lite::Stack;

const SCTP_PORT: u16 = 9899;
const LEN: usize = 300_000;

/// A host's DDP over SCTP side: the unit on the host's stack, with an
/// engine, control plane, CQ and memory of its own (as the appliance's
/// listener has a control-plane link of its own).
struct Sctp {
    unit: SctpUnit,
    _plane: ControlPlane,
    cq: CqHandle,
    region: Arc<Region>,
    mr: Mr,
    events: Vec<SctpEvent>,
}

impl Sctp {
    fn on(
        host: &mut Host<Stack<LinkEnd>>,
        udp_port: u16,
        seed: u64,
        ulp: Option<OnInitiate>,
    ) -> Sctp {
        let mut rnic = rnic_engine::verbs::Rnic::new(rnic_engine::verbs::RnicConfig {
            stag_seed: seed,
            ..rnic_engine::verbs::RnicConfig::default()
        });
        let pd = rnic.alloc_pd().unwrap();
        let cq = rnic.create_cq(1024).unwrap();
        let region = Region::new(4 * LEN);
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = rnic.reg_region(pd, region.clone(), all).unwrap();
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: 64,
            rq_size: 64,
        };
        let config = SctpCoreConfig::new(sctp_lite::Config::default());
        let (plane, mut links) = ControlPlane::start(1);
        let listening = ulp.is_some();
        if let Some(ulp) = ulp {
            plane
                .listen_sessions(0, config.session.clone(), ulp)
                .unwrap();
        }
        let epoch = StdInstant::now();
        let transport = host.core.transport_mut();
        let mut unit = SctpUnit::new(
            config,
            transport,
            udp_port,
            links.remove(0),
            rnic,
            qp_init,
            epoch,
        )
        .unwrap();
        while listening && !unit.link().session_listening() {
            assert!(epoch.elapsed() < DEADLINE);
            unit.turn(host.core.transport_mut(), now());
        }
        Sctp {
            unit,
            _plane: plane,
            cq,
            region,
            mr,
            events: Vec::new(),
        }
    }

    fn completions(&mut self) -> Vec<Wc> {
        let mut out = vec![Wc::EMPTY; 64];
        let n = self.unit.rnic().poll_cq(self.cq, &mut out).unwrap();
        out.truncate(n);
        out
    }

    fn sge(&self, offset: usize, len: usize) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset as u64,
            len: len as u32,
        }
    }

    fn remote(&self, offset: usize) -> RemoteAddr {
        RemoteAddr {
            stag: self.mr.stag,
            to: self.mr.base_to + offset as u64,
        }
    }
}

/// One turn of a host: its MPA core, then its SCTP unit over the core's
/// stack.
fn turn(host: &mut Host<Stack<LinkEnd>>, sctp: &mut Sctp) {
    let t = now();
    host.step(t);
    sctp.unit.turn(host.core.transport_mut(), t);
    while let Some(e) = sctp.unit.next_event() {
        sctp.events.push(e);
    }
}

struct Pair {
    a: Host<Stack<LinkEnd>>,
    b: Host<Stack<LinkEnd>>,
    sa: Sctp,
    sb: Sctp,
}

impl Pair {
    fn run_until(&mut self, what: &str, mut done: impl FnMut(&mut Pair) -> bool) {
        let start = StdInstant::now();
        while !done(self) {
            assert!(
                start.elapsed() < DEADLINE,
                "{what}: not done after {DEADLINE:?}"
            );
            turn(&mut self.a, &mut self.sa);
            turn(&mut self.b, &mut self.sb);
        }
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(u32::from(seed)) as u8
                ^ seed
        })
        .collect()
}

fn read(region: &Region, at: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    region.read(at, &mut v).unwrap();
    v
}

#[test]
fn mpa_and_ddp_over_sctp_share_one_stack() {
    let (mut a, mut b, b_addr) = stacks();
    let accept: OnInitiate = Box::new(|_: &_, _| Decision::Accept(Accept::default()));
    let sa = Sctp::on(&mut a, 0, 11, None);
    let sb = Sctp::on(&mut b, SCTP_PORT, 12, Some(accept));
    // MPA first, on the hosts' own steps.
    let (ha, hb) = establish(
        &mut a,
        &mut b,
        b_addr,
        p2p(control::mpa::RtrSet::ALL),
        p2p(control::mpa::RtrSet::ALL),
        accept_mpa(),
    );
    let mpa_a = a.qps[&ha.conn.unwrap()];
    assert!(b.qps.contains_key(&hb.conn.unwrap()));
    let mut net = Pair { a, b, sa, sb };
    // Then an association and a DDP stream on the same stacks.
    let assoc = net
        .sa
        .unit
        .connect(now(), SocketAddrV4::new(b_addr, SCTP_PORT))
        .unwrap();
    net.run_until("the association", |n| {
        n.sa.events
            .iter()
            .any(|e| matches!(e, SctpEvent::AssociationUp { .. }))
    });
    let sctp_a = net
        .sa
        .unit
        .open_stream(now(), assoc, 0, b"over sctp")
        .unwrap();
    net.run_until("the DDP stream", |n| {
        n.sa.events
            .iter()
            .any(|e| matches!(e, SctpEvent::StreamUp { .. }))
            && n.sb
                .events
                .iter()
                .any(|e| matches!(e, SctpEvent::StreamUp { .. }))
    });
    let sctp_b = net
        .sb
        .events
        .iter()
        .find_map(|e| match e {
            SctpEvent::StreamUp { qp, .. } => Some(*qp),
            _ => None,
        })
        .unwrap();

    // Both at once: a Write and a Read on each lower layer, from a.
    // MPA: a's memory is the host's 64 KiB region, so 20,000 octets.
    let mpa_data = pattern(20_000, 1);
    net.a.region.write(0, &mpa_data).unwrap();
    net.b.region.write(0, &pattern(20_000, 2)).unwrap();
    let sctp_data = pattern(LEN, 3);
    net.sa.region.write(0, &sctp_data).unwrap();
    net.sb.region.write(LEN, &pattern(LEN, 4)).unwrap();
    let (w, r) = (net.a.sge(0, 20_000), net.a.sge(40_000, 20_000));
    let rb = net.b.remote(20_000);
    let rb0 = net.b.remote(0);
    net.a
        .rnic()
        .post_send(mpa_a, &SendWr::signaled(1, SendOp::Write(rb), &[w]))
        .unwrap();
    net.a
        .rnic()
        .post_send(mpa_a, &SendWr::signaled(2, SendOp::Read(rb0), &[r]))
        .unwrap();
    let (w, r) = (net.sa.sge(0, LEN), net.sa.sge(2 * LEN, LEN));
    let (sw, sr) = (net.sb.remote(0), net.sb.remote(LEN));
    let unit = &mut net.sa.unit;
    unit.rnic()
        .post_send(sctp_a, &SendWr::signaled(3, SendOp::Write(sw), &[w]))
        .unwrap();
    unit.rnic()
        .post_send(sctp_a, &SendWr::signaled(4, SendOp::Read(sr), &[r]))
        .unwrap();
    let (mut mpa_wcs, mut sctp_wcs) = (Vec::new(), Vec::new());
    net.run_until("the transfers", |n| {
        mpa_wcs.extend(n.a.completions());
        sctp_wcs.extend(n.sa.completions());
        mpa_wcs.len() == 2 && sctp_wcs.len() == 2
    });
    for wc in mpa_wcs.iter().chain(&sctp_wcs) {
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    }
    assert_eq!(read(&net.b.region, 20_000, 20_000), mpa_data, "MPA Write");
    assert_eq!(
        read(&net.a.region, 40_000, 20_000),
        pattern(20_000, 2),
        "MPA Read"
    );
    assert_eq!(read(&net.sb.region, 0, LEN), sctp_data, "SCTP Write");
    assert_eq!(
        read(&net.sa.region, 2 * LEN, LEN),
        pattern(LEN, 4),
        "SCTP Read"
    );
    // The same device carried both: the SCTP unit's datagrams and the MPA
    // core's segments, counted once each by the one link end.
    let (ca, cs) = (net.a.core.counters(), net.sa.unit.counters());
    assert!(cs.tx_segment_octets >= LEN as u64, "{cs:?}");
    assert!(ca.tx_fpdu_octets >= 20_000, "{ca:?}");
    let device = net.a.core.transport().device().tx_stats();
    // 20,000 octets of MPA need at least 14 TCP segments of 1,460.
    assert!(device.frames >= cs.tx_datagrams + 14, "{device:?} {cs:?}");

    // The stream's end leaves the MPA connection working, and the MPA
    // connection's end leaves the stream working.
    net.sa.unit.close_stream(sctp_a);
    net.run_until("the stream's end", |n| {
        n.sb.events
            .iter()
            .any(|e| matches!(e, SctpEvent::StreamEnded { qp: Some(q), .. } if *q == sctp_b))
    });
    let w = net.a.sge(0, 1000);
    let rb = net.b.remote(50_000);
    net.a
        .rnic()
        .post_send(mpa_a, &SendWr::signaled(5, SendOp::Write(rb), &[w]))
        .unwrap();
    let mut wcs = Vec::new();
    net.run_until("a Write after the stream's end", |n| {
        wcs.extend(n.a.completions());
        !wcs.is_empty()
    });
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(read(&net.b.region, 50_000, 1000), mpa_data[..1000]);
    let sctp_a2 = net.sa.unit.open_stream(now(), assoc, 1, b"again").unwrap();
    net.a.core.close(mpa_a);
    net.run_until("the second stream, and MPA's end", |n| {
        n.sa.events
            .iter()
            .any(|e| matches!(e, SctpEvent::StreamUp { qp, .. } if *qp == sctp_a2))
            && n.b.core.open_connections() == 0
    });
    let (w, sw) = (net.sa.sge(0, 5000), net.sb.remote(3 * LEN));
    net.sa
        .unit
        .rnic()
        .post_send(sctp_a2, &SendWr::signaled(6, SendOp::Write(sw), &[w]))
        .unwrap();
    let mut wcs = Vec::new();
    net.run_until("a Write after MPA's end", |n| {
        wcs.extend(n.sa.completions());
        !wcs.is_empty()
    });
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(read(&net.sb.region, 3 * LEN, 5000), sctp_data[..5000]);
}

fn accept_mpa() -> Decision {
    support::accept()
}
