//! DDP over SCTP end to end through two `SctpCore`s: an association over
//! UDP encapsulation (RFC 6951) on the in-memory link and on kernel UDP
//! sockets, enhanced session control on several streams (RFC 5043 §6, RFC
//! 6581 §7), and every RDMAP operation over the streams' QPs, checked octet
//! for octet; refusal of a peer without DDP's adaptation indication (RFC
//! 5043 §7.1); a stream closed by one side ends at the other.
#![allow(clippy::disallowed_methods)] // The kernel test runs in real time.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use control::runtime::{ControlPlane, Decision, OnInitiate};
use control::session::Accept;
use dataplane::{MessageTransport, SctpCore, SctpCoreConfig, SctpEvent};
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::verbs::{
    CqHandle, Mr, QpHandle, QpInit, RecvWr, RemoteAddr, Rnic, RnicConfig, SendOp, SendWr, Sge,
};
use tcp_lite::link::{self, LinkConfig, LinkEnd};
use tcp_lite::sys::udp::KernelUdp;
use tcp_lite::{Duration, Instant, Stack, StackConfig};

const A_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B_ADDR: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const MEMORY: usize = 4 << 20;
const ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// One side: its core, its control plane (which accepts every stream a peer
/// opens), CQ and registered memory.
struct Side<T: MessageTransport> {
    core: SctpCore<T>,
    plane: ControlPlane,
    cq: CqHandle,
    region: Arc<Region>,
    mr: Mr,
    events: Vec<SctpEvent>,
}

impl<T: MessageTransport> Side<T> {
    fn new(transport: T, udp_port: u16, seed: u64, tweak: impl Fn(&mut SctpCoreConfig)) -> Self {
        let accept = |_: &_, _| Decision::Accept(Accept::default());
        Self::with_ulp(transport, udp_port, seed, tweak, Some(Box::new(accept)))
    }

    /// A side whose control plane decides the streams peers open with
    /// `ulp` (none: no one listens).
    fn with_ulp(
        transport: T,
        udp_port: u16,
        seed: u64,
        tweak: impl Fn(&mut SctpCoreConfig),
        ulp: Option<OnInitiate>,
    ) -> Self {
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().unwrap();
        let cq = rnic.create_cq(4096).unwrap();
        let region = Region::new(MEMORY);
        let mr = rnic.reg_region(pd, region.clone(), ALL).unwrap();
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: 256,
            rq_size: 256,
        };
        let mut config = SctpCoreConfig::new(sctp_lite::Config::default());
        tweak(&mut config);
        let epoch = std::time::Instant::now();
        let (plane, mut links) = ControlPlane::start(1);
        let listening = ulp.is_some();
        if let Some(ulp) = ulp {
            plane
                .listen_sessions(0, config.session.clone(), ulp)
                .expect("a valid session configuration");
        }
        let link = links.remove(0);
        let mut core =
            SctpCore::new(config, transport, udp_port, link, rnic, qp_init, epoch).unwrap();
        // The listen reaches the core's link at a turn; Initiates before it
        // would be refused.
        while listening && !core.link().session_listening() {
            assert!(epoch.elapsed() < std::time::Duration::from_secs(5));
            core.turn(Instant::ZERO);
        }
        Side {
            core,
            plane,
            cq,
            region,
            mr,
            events: Vec::new(),
        }
    }

    fn turn(&mut self, now: Instant) -> bool {
        let busy = self.core.turn(now);
        while let Some(e) = self.core.next_event() {
            self.events.push(e);
        }
        busy
    }

    fn completions(&mut self) -> Vec<Wc> {
        let mut out = Vec::new();
        let mut batch = [Wc::EMPTY; 64];
        loop {
            let n = self.core.rnic().poll_cq(self.cq, &mut batch).unwrap();
            out.extend_from_slice(&batch[..n]);
            if n < batch.len() {
                return out;
            }
        }
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

    fn stream_up(&self) -> Vec<(u16, QpHandle, bool)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                SctpEvent::StreamUp {
                    stream,
                    qp,
                    outbound,
                    ..
                } => Some((*stream, *qp, *outbound)),
                _ => None,
            })
            .collect()
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

/// Two cores on an in-memory Ethernet link, in virtual time.
struct Net {
    a: Side<Stack<LinkEnd>>,
    b: Side<Stack<LinkEnd>>,
    now: Instant,
}

impl Net {
    /// [`exercise`] on `qps` in the net's virtual time, 10 us a turn, done
    /// within 10 s of it.
    fn exercise(&mut self, qps: &[(QpHandle, QpHandle)], len: usize) {
        let mut now = self.now;
        exercise(&mut self.a, &mut self.b, qps, len, |a, b, done| {
            let end = now + Duration::from_secs(10);
            while !done(a, b) {
                assert!(now < end, "transfer not done in 10 s of virtual time");
                a.turn(now);
                b.turn(now);
                now += Duration::from_micros(10);
            }
        });
        self.now = now;
    }

    fn new(tweak_b: impl Fn(&mut SctpCoreConfig)) -> Net {
        let accept = |_: &_, _| Decision::Accept(Accept::default());
        Net::with_ulp(tweak_b, Some(Box::new(accept)))
    }

    /// b's streams decided by `ulp` on b's control plane.
    fn with_ulp(tweak_b: impl Fn(&mut SctpCoreConfig), ulp: Option<OnInitiate>) -> Net {
        let (end_a, end_b) = link::pair(LinkConfig::ethernet(1500), 3);
        let now = Instant::ZERO;
        let stack = |end, mac: u8, addr| {
            let mut config = StackConfig::new([2, 0, 0, 0, 0, mac], addr);
            config.seed = u64::from(mac);
            Stack::new(config, end, now).unwrap()
        };
        Net {
            a: Side::new(stack(end_a, 1, A_ADDR), 0, 1, |_| {}),
            b: Side::with_ulp(stack(end_b, 2, B_ADDR), 9899, 2, tweak_b, ulp),
            now,
        }
    }

    /// Turns both cores until `done`, advancing virtual time 10 us a turn;
    /// fails after `limit`.
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Net) -> bool) {
        let end = self.now + limit;
        while !done(self) {
            assert!(self.now < end, "not done after {limit} of virtual time");
            self.a.turn(self.now);
            self.b.turn(self.now);
            self.now += Duration::from_micros(10);
        }
    }

    /// An association from a to b, up.
    fn associate(&mut self) -> sctp_lite::AssocId {
        let assoc = self
            .a
            .core
            .connect(self.now, SocketAddrV4::new(B_ADDR, 9899))
            .unwrap();
        self.run_until(Duration::from_secs(5), |net| {
            net.a
                .events
                .iter()
                .any(|e| matches!(e, SctpEvent::AssociationUp { .. }))
        });
        assoc
    }

    /// An association from a to b and `streams` DDP streams on it; a's and
    /// b's QP of each.
    fn open(&mut self, streams: u16) -> Vec<(QpHandle, QpHandle)> {
        let assoc = self.associate();
        for stream in 0..streams {
            self.a
                .core
                .open_stream(self.now, assoc, stream, b"hello")
                .unwrap();
        }
        self.run_until(Duration::from_secs(5), |net| {
            net.a.stream_up().len() == usize::from(streams)
                && net.b.stream_up().len() == usize::from(streams)
        });
        let (a, b) = (self.a.stream_up(), self.b.stream_up());
        (0..streams)
            .map(|s| {
                let qa = a.iter().find(|u| u.0 == s).unwrap();
                let qb = b.iter().find(|u| u.0 == s).unwrap();
                assert!(qa.2 && !qb.2, "a initiated every stream");
                (qa.1, qb.1)
            })
            .collect()
    }
}

/// Writes, Reads, Sends and a FetchAdd on each stream at once, both ways,
/// every octet checked.
fn exercise<T: MessageTransport, U: MessageTransport>(
    a: &mut Side<T>,
    b: &mut Side<U>,
    qps: &[(QpHandle, QpHandle)],
    len: usize,
    mut run: impl FnMut(&mut Side<T>, &mut Side<U>, &mut dyn FnMut(&mut Side<T>, &mut Side<U>) -> bool),
) {
    let n = qps.len();
    for (i, &(qa, qb)) in qps.iter().enumerate() {
        let base = i * 4 * len;
        a.region.write(base, &pattern(len, i as u8)).unwrap();
        b.region
            .write(base + len, &pattern(len, 100 + i as u8))
            .unwrap();
        let recv_sge = [b.sge(base + 3 * len, 64)];
        b.core
            .rnic()
            .post_recv(
                qb,
                &RecvWr {
                    wr_id: 50 + i as u64,
                    sgl: &recv_sge,
                },
            )
            .unwrap();
        let (write_sge, read_sge) = (a.sge(base, len), a.sge(base + 2 * len, len));
        let send_sge = a.sge(base, 64);
        let rnic = a.core.rnic();
        let posts = [
            SendWr::signaled(
                1,
                SendOp::Write(b.remote(base)),
                std::slice::from_ref(&write_sge),
            ),
            SendWr::signaled(
                2,
                SendOp::Read(b.remote(base + len)),
                std::slice::from_ref(&read_sge),
            ),
            SendWr::signaled(3, SendOp::Send, std::slice::from_ref(&send_sge)),
        ];
        for wr in &posts {
            rnic.post_send(qa, wr).unwrap();
        }
    }
    let mut a_wcs = Vec::new();
    let mut b_wcs = Vec::new();
    run(a, b, &mut |a, b| {
        a_wcs.extend(a.completions());
        b_wcs.extend(b.completions());
        a_wcs.len() == 3 * n && b_wcs.len() == n
    });
    assert!(
        a_wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{a_wcs:?}"
    );
    assert!(
        b_wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{b_wcs:?}"
    );
    assert!(b_wcs
        .iter()
        .all(|wc| wc.opcode == WcOpcode::Recv && wc.byte_len == 64));
    for (i, &(qa, _)) in qps.iter().enumerate() {
        let base = i * 4 * len;
        let mine: Vec<_> = a_wcs
            .iter()
            .filter(|wc| wc.qp == qa)
            .map(|wc| wc.wr_id)
            .collect();
        assert_eq!(
            mine,
            [1, 2, 3],
            "completions in posting order on stream {i}"
        );
        let b_mem = b.region.to_vec();
        let a_mem = a.region.to_vec();
        assert_eq!(
            &b_mem[base..base + len],
            &pattern(len, i as u8)[..],
            "Write {i}"
        );
        assert_eq!(
            &a_mem[base + 2 * len..base + 3 * len],
            &pattern(len, 100 + i as u8)[..],
            "Read {i}"
        );
        assert_eq!(
            &b_mem[base + 3 * len..base + 3 * len + 64],
            &pattern(len, i as u8)[..64],
            "Send {i}"
        );
    }
}

#[test]
fn rdma_over_sctp_on_the_in_memory_link() {
    let mut net = Net::new(|_| {});
    let qps = net.open(4);
    let up = net
        .a
        .events
        .iter()
        .find_map(|e| match e {
            SctpEvent::StreamUp { session, .. } => Some(session.clone()),
            _ => None,
        })
        .unwrap();
    assert!(up.enhanced, "RFC 6581 §7's Enhanced Initiate and Accept");
    let peer_pd = net.b.events.iter().find_map(|e| match e {
        SctpEvent::StreamUp { session, .. } => Some(session.peer_private_data.clone()),
        _ => None,
    });
    assert_eq!(peer_pd.as_deref(), Some(&b"hello"[..]));
    net.exercise(&qps, 200_000);
    // One message per DDP segment, every one delivered once: a's Writes in
    // segments of 1,444 - 2 (DDP-SSN) - 14 (tagged DDP header) octets.
    let (ca, cb) = (net.a.core.counters(), net.b.core.counters());
    assert!(ca.tx_segments >= 4 * 200_000_u64.div_ceil(1428), "{ca:?}");
    assert_eq!(ca.tx_segments, cb.rx_segments, "{ca:?} {cb:?}");
    assert_eq!(cb.tx_segments, ca.rx_segments, "{ca:?} {cb:?}");
    assert_eq!((ca.stray, cb.stray, ca.early_held), (0, 0, 0));
    // a ends stream 0: b's QP for it ends too; the others keep working.
    net.a.core.close_stream(qps[0].0);
    net.run_until(Duration::from_secs(5), |net| {
        net.b
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::StreamEnded { qp: Some(qp), .. } if *qp == qps[0].1))
    });
    assert_eq!(net.b.core.open_streams(), 3);
    net.exercise(&qps[1..], 1000);
}

#[test]
fn a_peer_without_the_ddp_adaptation_indication_is_refused() {
    let mut net = Net::new(|c| c.endpoint.adaptation_code_point = None);
    net.a
        .core
        .connect(net.now, SocketAddrV4::new(B_ADDR, 9899))
        .unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        net.a
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::AssociationEnded { .. }))
    });
    let refused = net.a.events.iter().find_map(|e| match e {
        SctpEvent::AssociationEnded { refused, .. } => Some(*refused),
        _ => None,
    });
    assert_eq!(refused, Some(Some(None)), "refused: b sent no indication");
    assert!(!net
        .a
        .events
        .iter()
        .any(|e| matches!(e, SctpEvent::AssociationUp { .. })));
}

#[test]
fn rdma_over_sctp_over_kernel_udp() {
    let mut a = Side::new(KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20), 0, 5, |_| {});
    let mut b = Side::new(KernelUdp::new(Ipv4Addr::LOCALHOST, 1 << 20), 0, 6, |_| {});
    let b_addr = b.core.local().unwrap();
    let clock = std::time::Instant::now();
    let now = |clock: std::time::Instant| Instant::from_micros(clock.elapsed().as_micros() as i64);
    let assoc = a.core.connect(now(clock), b_addr).unwrap();
    let deadline = std::time::Duration::from_secs(20);
    let spin =
        |a: &mut Side<KernelUdp>,
         b: &mut Side<KernelUdp>,
         done: &mut dyn FnMut(&mut Side<KernelUdp>, &mut Side<KernelUdp>) -> bool| {
            while !done(a, b) {
                assert!(clock.elapsed() < deadline, "not done in {deadline:?}");
                a.turn(now(clock));
                b.turn(now(clock));
            }
        };
    spin(&mut a, &mut b, &mut |a, _| {
        a.events
            .iter()
            .any(|e| matches!(e, SctpEvent::AssociationUp { .. }))
    });
    for stream in 0..2 {
        a.core.open_stream(now(clock), assoc, stream, b"").unwrap();
    }
    spin(&mut a, &mut b, &mut |a, b| {
        a.stream_up().len() == 2 && b.stream_up().len() == 2
    });
    let qps: Vec<_> = (0..2)
        .map(|s| {
            let qa = a.stream_up().into_iter().find(|u| u.0 == s).unwrap().1;
            let qb = b.stream_up().into_iter().find(|u| u.0 == s).unwrap().1;
            (qa, qb)
        })
        .collect();
    exercise(&mut a, &mut b, &qps, 300_000, |a, b, done| spin(a, b, done));
}

/// What a broken peer sends on a DDP stream (injected beside the rules):
/// a Segment before any Initiate, an unknown function code, a PPID other
/// than 16 and 17 on an open stream. Each ends that stream at the receiver
/// with the specified reason and a Session Terminate to the sender, never
/// a panic; the association and its other streams go on.
#[test]
fn bad_session_traffic_ends_only_its_stream() {
    use control::session::{FailReason, Violation};
    let mut net = Net::new(|_| {});
    let qps = net.open(2);
    let assoc = net
        .a
        .events
        .iter()
        .find_map(|e| match e {
            SctpEvent::AssociationUp { assoc, .. } => Some(*assoc),
            _ => None,
        })
        .unwrap();
    // Stream 7: a Segment with no session; stream 8: function code 9;
    // stream 1 (up): PPID 99.
    let segment = [0u8, 0, 0xC1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    net.a.core.inject_message(assoc, 7, 16, &segment).unwrap();
    net.a
        .core
        .inject_message(assoc, 8, 17, &[0, 0, 0, 9])
        .unwrap();
    net.a.core.inject_message(assoc, 1, 99, b"hello").unwrap();
    let ended = |side: &Side<Stack<LinkEnd>>, stream: u16| {
        side.events.iter().find_map(|e| match e {
            SctpEvent::StreamEnded {
                stream: s, failure, ..
            } if *s == stream => Some(failure.clone()),
            _ => None,
        })
    };
    // A Segment first is answered by the core itself (RFC 5043 §6.6: no ULP
    // decision can make it right); no stream is kept for it.
    net.run_until(Duration::from_secs(5), |net| {
        [8, 1].iter().all(|&s| ended(&net.b, s).is_some())
            && net.b.core.counters().refused_streams == 1
    });
    assert!(ended(&net.b, 7).is_none());
    let reason = |stream| ended(&net.b, stream).flatten().map(|f| f.reason);
    assert_eq!(
        reason(8),
        Some(FailReason::Violation(Violation::UnknownFunction(9)))
    );
    assert_eq!(
        reason(1),
        Some(FailReason::Violation(Violation::UnknownPpid(99)))
    );
    // b answered each with a Session Terminate, which ends a's side of
    // stream 1 too.
    net.run_until(Duration::from_secs(5), |net| ended(&net.a, 1).is_some());
    assert!(!net
        .b
        .events
        .iter()
        .any(|e| matches!(e, SctpEvent::AssociationEnded { .. })));
    // Stream 0 still carries RDMA.
    net.exercise(&qps[..1], 5000);
}

/// A session that a bad message ends after its QP has sent DDP Segments:
/// the RDMAP Terminate goes as the Segment after the QP's last (RFC 5043
/// §6.1), so the peer's QP takes it as a Terminate (2/0/4 for the bad
/// session control) and reports it received. Sent as DDP-SSN 0, the
/// stream's first, it was out of sequence there: the peer's QP sent its own
/// Terminate instead and never heard why (found by a review).
#[test]
fn a_terminate_after_the_qps_segments_reaches_the_peer_in_sequence() {
    use rnic_engine::qp::{QpEvent, TermInfo};
    let mut net = Net::new(|_| {});
    let qps = net.open(1);
    let assoc = a_assoc(&net);
    // b sends Read Responses and Sends' completions: Segments of its own.
    net.exercise(&qps, 5000);
    assert!(net.b.core.counters().tx_segments > 0);
    // A PPID no session knows, on the open stream: b ends it.
    net.a.core.inject_message(assoc, 0, 99, b"hello").unwrap();
    let terminate = |side: &Side<Stack<LinkEnd>>| {
        side.events.iter().find_map(|e| match e {
            SctpEvent::StreamEnded {
                stream: 0,
                terminate,
                ..
            } => Some(*terminate),
            _ => None,
        })
    };
    net.run_until(Duration::from_secs(5), |net| terminate(&net.a).is_some());
    let code = TermInfo {
        layer: 2,
        etype: 0,
        ecode: 4,
    };
    assert_eq!(
        terminate(&net.a),
        Some(Some(QpEvent::TerminateReceived(code)))
    );
}

/// The association of a's first `AssociationUp`.
fn a_assoc(net: &Net) -> sctp_lite::AssocId {
    net.a
        .events
        .iter()
        .find_map(|e| match e {
            SctpEvent::AssociationUp { assoc, .. } => Some(*assoc),
            _ => None,
        })
        .unwrap()
}

/// A peer may reuse a stream once its session ended (the DDP-SSNs start
/// again at 0, RFC 5043 §6.1): an Initiate right behind the Session
/// Terminate, in the same packet, reaches the ULP as a new session on the
/// stream.
#[test]
fn an_initiate_right_behind_a_terminate_opens_the_stream_again() {
    use control::session::FailReason;
    let mut net = Net::new(|_| {});
    net.open(1);
    let assoc = a_assoc(&net);
    // Both before a turn: one packet, one receive batch at b.
    net.a
        .core
        .inject_message(assoc, 0, 17, &[0, 0, 0, 4])
        .unwrap();
    net.a
        .core
        .inject_message(assoc, 0, 17, &[0, 0, 0, 1])
        .unwrap();
    net.run_until(Duration::from_secs(5), |net| net.b.stream_up().len() == 2);
    assert!(net.b.stream_up().iter().all(|s| s.0 == 0 && !s.2));
    let first_end = net.b.events.iter().find_map(|e| match e {
        SctpEvent::StreamEnded { failure, .. } => Some(failure.clone().map(|f| f.reason)),
        _ => None,
    });
    assert_eq!(first_end, Some(Some(FailReason::PeerTerminated)));
    assert_eq!(net.b.plane.stats().established, 2);
}

/// DDP Segments on streams with no session (RFC 5043 §6.6 broken) draw
/// one Session Terminate per stream, not one per Segment: a peer could
/// otherwise make the core queue a Terminate, and sctp-proto's bookkeeping
/// of it, for each octet it sends. A late Segment of a stream that ended
/// here draws none (it could end the peer's next session on the stream).
#[test]
fn stray_segments_draw_one_terminate_per_stream() {
    let mut net = Net::new(|_| {});
    let qps = net.open(1);
    let assoc = a_assoc(&net);
    for stream in [10, 11] {
        for _ in 0..300 {
            net.a.core.inject_message(assoc, stream, 16, &[0]).unwrap();
        }
    }
    let before = net.b.core.counters();
    net.run_until(Duration::from_secs(5), |net| {
        let c = net.b.core.counters();
        c.stray + c.refused_streams - before.stray - before.refused_streams == 600
    });
    let c = net.b.core.counters();
    assert_eq!(c.refused_streams - before.refused_streams, 2, "{c:?}");
    // a ends stream 0; a Segment of it that b receives after its end is
    // dropped unanswered.
    net.a.core.close_stream(qps[0].0);
    net.run_until(Duration::from_secs(5), |net| {
        net.b
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::StreamEnded { .. }))
    });
    let before = net.b.core.counters();
    let segment = [0u8, 9, 0xC1, 0x40, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 0];
    net.a.core.inject_message(assoc, 0, 16, &segment).unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        net.b.core.counters().stray > before.stray
    });
    assert_eq!(
        net.b.core.counters().refused_streams,
        before.refused_streams
    );
}

/// A core that refuses streams (here: no one listens) answers Initiates
/// with a Session Terminate only while none of its earlier ones on the
/// stream awaits acknowledgement: a burst of Initiates on one stream draws
/// a few Terminates, not one each.
#[test]
fn a_burst_of_refused_initiates_draws_few_terminates() {
    let mut net = Net::with_ulp(|_| {}, None);
    let assoc = net.associate();
    for _ in 0..300 {
        net.a
            .core
            .inject_message(assoc, 5, 17, &[0, 0, 0, 1])
            .unwrap();
    }
    net.run_until(Duration::from_secs(5), |net| {
        let c = net.b.core.counters();
        c.stray + c.refused_streams == 300
    });
    let c = net.b.core.counters();
    assert!((1..10).contains(&c.refused_streams), "{c:?}");
}

/// DDP Segments held for a stream in establishment (they may overtake the
/// Accept, RFC 5043 §8) are bounded in octets as well as in messages: one
/// that would pass `early_octets_max` ends the stream, which never comes
/// up, whatever the ULP decides.
#[test]
fn a_stream_in_establishment_holds_early_octets_up_to_its_bound() {
    use std::sync::mpsc;
    let (release, held) = mpsc::channel::<()>();
    // The ULP decides only once the test lets it: the stream stays in
    // establishment meanwhile.
    let ulp: OnInitiate = Box::new(move |_, _| {
        let _ = held.recv_timeout(std::time::Duration::from_secs(10));
        Decision::Accept(Accept::default())
    });
    let mut net = Net::with_ulp(|c| c.early_octets_max = 4000, Some(ulp));
    let assoc = net.associate();
    net.a
        .core
        .inject_message(assoc, 3, 17, &[0, 0, 0, 1])
        .unwrap();
    // Four Segments of 1,400 octets: fewer than `early_max`, more octets
    // than the bound.
    for ssn in 0..4u8 {
        let mut segment = vec![0u8; 1400];
        segment[1] = ssn;
        net.a.core.inject_message(assoc, 3, 16, &segment).unwrap();
    }
    net.run_until(Duration::from_secs(5), |net| {
        net.b.core.counters().early_held >= 2
    });
    let end = net.now + Duration::from_millis(1);
    net.run_until(Duration::from_secs(1), |net| net.now >= end);
    release.send(()).unwrap();
    let on_3 = |net: &Net| {
        net.b.events.iter().find_map(|e| match e {
            SctpEvent::StreamUp { stream: 3, .. } => Some(true),
            SctpEvent::StreamEnded { stream: 3, .. } => Some(false),
            _ => None,
        })
    };
    net.run_until(Duration::from_secs(5), |net| on_3(net).is_some());
    assert_eq!(on_3(&net), Some(false), "{:?}", net.b.events);
    assert_eq!(net.b.core.counters().early_held, 2);
}

/// The reorder windows of one association's streams hold at most
/// `reorder_association_octets` together, drawn from the core's budget: a
/// peer that sends each of its streams messages ahead of their turn (and
/// never the one in turn) fails its own stream past that share, and leaves
/// the rest of the core's budget to the other associations' streams.
#[test]
fn one_association_holds_at_most_its_share_of_the_reorder_budget() {
    use dataplane::sctp::REORDER_BUDGET_DEFAULT;
    use rnic_engine::qp::QpEvent;
    let mut net = Net::new(|c| c.reorder_association_octets = 3000);
    net.open(2);
    let assoc = a_assoc(&net);
    // An untagged Send (DDP-SSN, DDP and RDMAP control, QN 0, MSN, MO 0),
    // 1,400 octets: each far within a stream's window of 1 MiB.
    let early = |ssn: u16| {
        let mut m = vec![0u8; 1400];
        m[..2].copy_from_slice(&ssn.to_be_bytes());
        m[2..4].copy_from_slice(&[0x41, 0x43]);
        m[15] = ssn as u8 + 1;
        m
    };
    net.a.core.inject_message(assoc, 0, 16, &early(5)).unwrap();
    net.a.core.inject_message(assoc, 1, 16, &early(5)).unwrap();
    net.a.core.inject_message(assoc, 1, 16, &early(6)).unwrap();
    let ended = |net: &Net| {
        net.b.events.iter().find_map(|e| match e {
            SctpEvent::StreamEnded {
                stream, terminate, ..
            } => Some((*stream, *terminate)),
            _ => None,
        })
    };
    net.run_until(Duration::from_secs(5), |net| ended(net).is_some());
    let Some((1, Some(QpEvent::TerminateSent(t)))) = ended(&net) else {
        panic!("{:?}", ended(&net));
    };
    assert_eq!((t.layer, t.etype, t.ecode), (2, 0, 4), "past the share");
    assert_eq!(net.b.core.open_streams(), 1, "stream 0 holds on");
    let left = net.b.core.rnic().reorder_budget_left().unwrap();
    assert_eq!(left, REORDER_BUDGET_DEFAULT - 1398, "stream 0's early Send");
}

/// The passive side's ULP decides each stream on its control-plane thread
/// (RFC 5043 §6.2-§6.3): it sees the initiator's private data and IRD/ORD
/// and accepts one stream with its own private data and rejects another
/// with a reason, which the initiator hears; a core where no one listens
/// answers every Initiate with a Session Terminate (RFC 5043 §6.4).
#[test]
fn the_control_plane_accepts_and_rejects_streams_for_the_ulp() {
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let record = seen.clone();
    let ulp: OnInitiate = Box::new(move |request, _from| {
        record.lock().unwrap().push(request.private_data.clone());
        if request.private_data == b"please" {
            Decision::Accept(Accept {
                private_data: b"welcome".to_vec(),
                ..Accept::default()
            })
        } else {
            Decision::Reject(b"go away".to_vec())
        }
    });
    let mut net = Net::with_ulp(|_| {}, Some(ulp));
    let assoc = net.associate();
    net.a
        .core
        .open_stream(net.now, assoc, 0, b"please")
        .unwrap();
    net.a.core.open_stream(net.now, assoc, 1, b"now").unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        net.a.stream_up().len() == 1
            && net
                .a
                .events
                .iter()
                .any(|e| matches!(e, SctpEvent::StreamRejected { .. }))
    });
    let up = net.a.events.iter().find_map(|e| match e {
        SctpEvent::StreamUp {
            stream, session, ..
        } => Some((*stream, session.peer_private_data.clone())),
        _ => None,
    });
    assert_eq!(up, Some((0, b"welcome".to_vec())));
    let rejected = net.a.events.iter().find_map(|e| match e {
        SctpEvent::StreamRejected {
            stream, rejected, ..
        } => Some((*stream, rejected.private_data.clone(), rejected.enhanced)),
        _ => None,
    });
    assert_eq!(rejected, Some((1, b"go away".to_vec(), true)));
    let mut decided = seen.lock().unwrap().clone();
    decided.sort();
    assert_eq!(decided, [b"now".to_vec(), b"please".to_vec()]);
    // b's stream 0 is up, stream 1 gone; its control plane counted both.
    net.run_until(Duration::from_secs(5), |net| net.b.core.open_streams() == 1);
    let stats = net.b.plane.stats();
    assert_eq!((stats.established, stats.rejected), (1, 1), "{stats:?}");
}

#[test]
fn a_core_where_no_one_listens_for_streams_answers_session_terminate() {
    use control::session::FailReason;
    let mut net = Net::with_ulp(|_| {}, None);
    let assoc = net.associate();
    net.a.core.open_stream(net.now, assoc, 0, b"hello").unwrap();
    net.run_until(Duration::from_secs(5), |net| {
        net.a
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::StreamEnded { .. }))
    });
    let failure = net.a.events.iter().find_map(|e| match e {
        SctpEvent::StreamEnded { failure, .. } => failure.clone(),
        _ => None,
    });
    assert_eq!(failure.map(|f| f.reason), Some(FailReason::NonUlpRejected));
    assert_eq!(net.b.core.counters().refused_streams, 1);
    assert_eq!(net.b.core.open_streams(), 0);
    assert_eq!(net.b.core.link().refused_startups(), 1);
}

/// A stream's QP joins the protection domain its ULP picks by the session
/// (`SctpUnit::set_pd_for`), before anything the peer sent reaches it: a
/// service that lends each client memory of its own keeps every client's
/// STags out of the others' streams' reach. The initiator's Writes through
/// an STag of the stream's PD land; through an STag of the core's default
/// PD they draw DDP's "STag not associated with RDMAP Stream" (RFC 5041
/// §7.2), and the other way round for a stream left in the default PD. A
/// stream the ULP's choice refuses ends with a Session Terminate.
#[test]
fn each_stream_joins_the_pd_its_ulp_picks() {
    use dataplane::PdChoice;
    use rnic_engine::qp::QpEvent;
    let mut net = Net::new(|_| {});
    let own_pd = net.b.core.rnic().alloc_pd().unwrap();
    let own_region = Region::new(4096);
    let own = net
        .b
        .core
        .rnic()
        .reg_region(own_pd, own_region.clone(), ALL)
        .unwrap();
    net.b.core.set_pd_for(Box::new(move |session, peer| {
        assert_eq!(peer.ip(), std::net::IpAddr::V4(A_ADDR), "a's association");
        match session.peer_private_data.as_slice() {
            b"own" => PdChoice::In(own_pd),
            b"none" => PdChoice::Refuse,
            _ => PdChoice::Default,
        }
    }));
    let assoc = net.associate();
    for (stream, hello) in [(0, &b"own"[..]), (1, b"plain"), (2, b"none")] {
        net.a
            .core
            .open_stream(net.now, assoc, stream, hello)
            .unwrap();
    }
    let ended = |side: &Side<Stack<LinkEnd>>, stream: u16| {
        side.events.iter().find_map(|e| match e {
            SctpEvent::StreamEnded {
                stream: s,
                terminate,
                ..
            } if *s == stream => Some(*terminate),
            _ => None,
        })
    };
    // a hears b's Accept of stream 2, then its Session Terminate.
    net.run_until(Duration::from_secs(5), |net| {
        net.b.stream_up().len() == 2 && ended(&net.a, 2).is_some()
    });
    assert!(
        net.b.stream_up().iter().all(|s| s.0 != 2),
        "stream 2 never up"
    );
    let qa = |net: &Net, stream: u16| {
        let up = net.a.stream_up();
        up.iter().find(|u| u.0 == stream).expect("up at a").1
    };
    let (q_own, q_plain) = (qa(&net, 0), qa(&net, 1));
    net.a.region.write(0, &[0x3C; 64]).unwrap();
    let to = |mr: &Mr| RemoteAddr {
        stag: mr.stag,
        to: mr.base_to,
    };
    let default = net.b.mr;
    let write = |net: &mut Net, qp, id, sink: &Mr| {
        let sge = [net.a.sge(0, 64)];
        let wr = SendWr::signaled(id, SendOp::Write(to(sink)), &sge);
        net.a.core.rnic().post_send(qp, &wr).unwrap();
    };
    // Each stream writes into its own PD's memory: both land.
    write(&mut net, q_own, 1, &own);
    write(&mut net, q_plain, 2, &default);
    let mut wcs = Vec::new();
    net.run_until(Duration::from_secs(5), |net| {
        wcs.extend(net.a.completions());
        wcs.len() == 2
    });
    assert!(
        wcs.iter().all(|wc| wc.status == WcStatus::Success),
        "{wcs:?}"
    );
    let mut got = [0u8; 64];
    own_region.read(0, &mut got).unwrap();
    assert_eq!(got, [0x3C; 64], "the stream's own PD");
    net.b.region.read(0, &mut got).unwrap();
    assert_eq!(got, [0x3C; 64], "the default PD");
    // Then each into the other's: both are terminated, nothing lands.
    net.a.region.write(0, &[0x77; 64]).unwrap();
    write(&mut net, q_own, 3, &default);
    write(&mut net, q_plain, 4, &own);
    net.run_until(Duration::from_secs(5), |net| {
        ended(&net.a, 0).is_some() && ended(&net.a, 1).is_some()
    });
    for stream in [0, 1] {
        let Some(Some(QpEvent::TerminateReceived(t))) = ended(&net.a, stream) else {
            panic!("stream {stream}: {:?}", ended(&net.a, stream));
        };
        assert_eq!((t.layer, t.etype, t.ecode), (1, 1, 2), "stream {stream}");
    }
    own_region.read(0, &mut got).unwrap();
    assert_eq!(got, [0x3C; 64], "nothing from the other stream");
    net.b.region.read(0, &mut got).unwrap();
    assert_eq!(got, [0x3C; 64], "nothing from the other stream");
}

/// A stream this side opened whose association ends in the turn its
/// control plane's Done (Established) is taken: the stream ends with its
/// association, and is not told as an accepted stream that never came up
/// (that is for streams the peer opened; found by a review: the initiator's
/// Done, taken by the link as any, was told so).
#[test]
fn an_opened_stream_ended_with_its_association_is_not_told_accepted() {
    let mut net = Net::new(|_| {});
    let assoc = net.associate();
    let theirs = net
        .b
        .events
        .iter()
        .find_map(|e| match e {
            SctpEvent::AssociationUp { assoc, .. } => Some(*assoc),
            _ => None,
        })
        .expect("b's association");
    net.a.core.open_stream(net.now, assoc, 0, b"mine").unwrap();
    // Turns until a's control plane has established the stream (its Done on
    // the way to a's core, not taken: that takes a turn of a's), with time
    // for the plane's thread between turns.
    let start = std::time::Instant::now();
    while net.a.plane.stats().established == 0 {
        assert!(start.elapsed() < std::time::Duration::from_secs(10));
        net.a.turn(net.now);
        net.b.turn(net.now);
        net.now += Duration::from_micros(10);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(net.a.stream_up().is_empty(), "the Done is not taken yet");
    // b ends the association; its ABORT reaches a, which then turns once:
    // the Done and the ABORT in the same turn.
    net.b.core.abort(theirs);
    for _ in 0..100 {
        net.b.turn(net.now);
        net.now += Duration::from_micros(10);
    }
    net.a.turn(net.now);
    net.run_until(Duration::from_secs(1), |net| {
        net.a
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::AssociationEnded { .. }))
    });
    assert!(
        !net.a
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::AcceptedNeverUp { .. })),
        "{:?}",
        net.a.events
    );
}

/// A stream the peer opened whose Initiate the ULP accepted, but that never
/// came up here, is told once (`SctpEvent::AcceptedNeverUp`, with what the
/// ULP accepted), so that the ULP gives back what it set aside for it (a
/// client run's admission): one whose QP the PD choice refused, one that
/// ended in establishment (more early octets than it may hold) before the
/// Accept arrived, and one whose association ended before the Accept
/// arrived (the link dropped that Accept: nobody heard of it). A stream
/// that came up, and the initiator's streams, are not told.
#[test]
fn an_accepted_stream_that_never_came_up_is_told_once() {
    use dataplane::PdChoice;
    use std::sync::mpsc;
    let (entered, held_at) = mpsc::channel::<()>();
    let (release, held) = mpsc::channel::<()>();
    // The ULP answers a "held" stream once the test lets it: the stream
    // stays in establishment meanwhile.
    let ulp: OnInitiate = Box::new(move |request, _| {
        if request.private_data.starts_with(b"held") {
            let _ = entered.send(());
            let _ = held.recv_timeout(std::time::Duration::from_secs(10));
        }
        Decision::Accept(Accept::default())
    });
    let mut net = Net::with_ulp(|c| c.early_octets_max = 4000, Some(ulp));
    net.b.core.set_pd_for(Box::new(|session, _| {
        match session.peer_private_data.as_slice() {
            b"none" => PdChoice::Refuse,
            _ => PdChoice::Default,
        }
    }));
    let never_up = |side: &Side<Stack<LinkEnd>>| -> Vec<Vec<u8>> {
        let told = side.events.iter().filter_map(|e| match e {
            SctpEvent::AcceptedNeverUp { session } => Some(session.peer_private_data.clone()),
            _ => None,
        });
        told.collect()
    };
    let assoc = net.associate();
    for (stream, hello) in [(0, &b"up"[..]), (1, b"none")] {
        net.a
            .core
            .open_stream(net.now, assoc, stream, hello)
            .unwrap();
    }
    net.run_until(Duration::from_secs(5), |net| {
        net.b.stream_up().len() == 1 && !never_up(&net.b).is_empty()
    });
    // An Initiate (unenhanced, RFC 5043 §6.2) and four Segments of 1,400
    // octets behind it: more octets than the bound.
    let initiate = |hello: &[u8]| [&[0, 0, 0, 1][..], hello].concat();
    net.a
        .core
        .inject_message(assoc, 2, 17, &initiate(b"held: early"))
        .unwrap();
    for ssn in 0..4u8 {
        let mut segment = vec![0u8; 1400];
        segment[1] = ssn;
        net.a.core.inject_message(assoc, 2, 16, &segment).unwrap();
    }
    net.run_until(Duration::from_secs(5), |net| {
        net.b.core.counters().early_held >= 2
    });
    let end = net.now + Duration::from_millis(1);
    net.run_until(Duration::from_secs(1), |net| net.now >= end);
    held_at
        .recv_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    release.send(()).unwrap();
    net.run_until(Duration::from_secs(5), |net| never_up(&net.b).len() == 2);
    // The association ends while the ULP holds its answer to stream 4.
    net.a
        .core
        .inject_message(assoc, 4, 17, &initiate(b"held: gone"))
        .unwrap();
    net.run_until(Duration::from_secs(5), |_| held_at.try_recv().is_ok());
    net.a.core.abort(assoc);
    net.run_until(Duration::from_secs(5), |net| {
        net.b
            .events
            .iter()
            .any(|e| matches!(e, SctpEvent::AssociationEnded { .. }))
    });
    release.send(()).unwrap();
    net.run_until(Duration::from_secs(5), |net| never_up(&net.b).len() == 3);
    let end = net.now + Duration::from_millis(10);
    net.run_until(Duration::from_secs(1), |net| net.now >= end);
    assert_eq!(
        never_up(&net.b),
        [&b"none"[..], b"held: early", b"held: gone"],
        "{:?}",
        net.b.events
    );
    assert!(never_up(&net.a).is_empty(), "{:?}", net.a.events);
    assert_eq!(net.b.plane.stats().established, 4);
}

/// Heap octets allocated and not yet freed by each thread: the cores run
/// on the test's thread (other tests and the control-plane thread, on
/// theirs, do not count).
mod live {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        /// Const-initialised, so reading it never allocates.
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }

    fn add(octets: isize) {
        // `try_with`: a thread's last frees come after its locals are gone.
        let _ = LIVE.try_with(|n| n.set(n.get() + octets));
    }

    /// This thread's live heap octets.
    pub(super) fn octets() -> isize {
        LIVE.with(Cell::get)
    }

    struct Counting;

    // SAFETY: forwards to the system allocator unchanged; only counts.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as isize);
            // SAFETY: the caller's contract is passed through.
            unsafe { System.alloc(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as isize));
            // SAFETY: the caller's contract is passed through.
            unsafe { System.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size as isize - layout.size() as isize);
            // SAFETY: the caller's contract is passed through.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;
}

/// `early_octets_max` bounds the memory a stream in establishment holds,
/// not only the octets it counts: 60 Segments of 16 octets (960 counted,
/// under a bound of 4,000), each bundled by the peer in one packet with a
/// 1,380-octet message B drops as stray, must not keep those packets
/// alive (found by a review: 90,820 heap octets held).
#[test]
fn early_segments_hold_their_octets_not_their_packets() {
    use std::sync::mpsc;
    let (release, held) = mpsc::channel::<()>();
    let ulp: OnInitiate = Box::new(move |_, _| {
        let _ = held.recv_timeout(std::time::Duration::from_secs(20));
        Decision::Accept(Accept::default())
    });
    let mut net = Net::with_ulp(|c| c.early_octets_max = 4000, Some(ulp));
    let assoc = net.associate();
    net.a
        .core
        .inject_message(assoc, 3, 17, &[0, 0, 0, 1])
        .unwrap();
    net.run_until(Duration::from_secs(5), |net| net.b.core.open_streams() == 1);
    let settle = |net: &mut Net| {
        let end = net.now + Duration::from_secs(1);
        net.run_until(Duration::from_secs(2), |net| net.now >= end);
    };
    settle(&mut net);
    let before = live::octets();
    let n = 60u16;
    for ssn in 0..n {
        let mut segment = [0u8; 16];
        segment[..2].copy_from_slice(&ssn.to_be_bytes());
        net.a.core.inject_message(assoc, 3, 16, &segment).unwrap();
        net.a
            .core
            .inject_message(assoc, 5, 0, &[0x55; 1380])
            .unwrap();
        let held = net.b.core.counters().early_held;
        net.run_until(Duration::from_secs(1), |net| {
            net.b.core.counters().early_held > held
        });
    }
    settle(&mut net);
    let grew = live::octets() - before;
    let c = net.b.core.counters();
    release.send(()).unwrap();
    assert_eq!(c.early_held, u64::from(n), "{c:?}");
    assert_eq!(net.b.core.open_streams(), 1, "960 octets held, under 4,000");
    assert!(
        grew < 2 * 4000,
        "a stream in establishment holding {} counted octets keeps {grew} heap octets alive",
        16 * n
    );
}
