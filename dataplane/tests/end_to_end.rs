//! Whole RNICs end to end: a control-plane thread per host runs the MPA
//! startup over the host's tcp-lite transport (the in-memory link, or Linux
//! TCP over loopback), hands the connection to the "core" (this thread),
//! which runs an engine QP over the same TCP connection. Peer-to-peer with
//! each RTR, client-server with the responder fenced, reject with private
//! data, and a revision-1 initiator; RDMA Send, Write and Read checked octet
//! by octet afterwards.
#![allow(clippy::disallowed_methods)] // The test paces itself by the real clock.

mod support;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Rtr, RtrSet, StartupConfig};
use control::runtime::{Decision, StartupResult};
use dataplane::CoreTransport;
use rnic_engine::verbs::{SendOp, SendWr};
use support::*;
use tcp_lite::sys::kernel::KernelTransport;
use tcp_lite::Transport;

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

fn p2p_with<T: CoreTransport, U: CoreTransport>(
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
    let (ha, hb) = establish_plain(a, b, addr);
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

/// The engine takes FPDUs straight from received frames (TCP's receive
/// buffer empty, `CoreConfig::direct_receive`), or, turned off, every octet
/// through TCP's buffer; either way every octet of Sends, a Write and a Read
/// arrives, and the counters say which way it went.
#[test]
fn fpdus_are_taken_straight_from_frames_or_through_tcps_buffer() {
    for direct in [true, false] {
        let (mut a, mut b, addr) = stacks();
        a.core.config_mut().direct_receive = direct;
        b.core.config_mut().direct_receive = direct;
        let (ha, hb) = establish_plain(&mut a, &mut b, addr);
        traffic(&mut a, &mut b, &ha, &hb);
        for (host, c) in [("a", a.core.counters()), ("b", b.core.counters())] {
            // a: b's Send, Write and a Read Response; b: a's Send and Read
            // Request.
            assert!(c.rx_fpdu_octets > 6_000, "{host}: {c:?}");
            if direct {
                // Everything but what may wait in TCP's buffer from before
                // the QP (none here: the peers are fenced) or behind a
                // segment that arrived while octets waited.
                assert!(
                    c.rx_direct_octets * 10 >= c.rx_fpdu_octets * 9,
                    "{host}: {} of {} octets taken straight",
                    c.rx_direct_octets,
                    c.rx_fpdu_octets
                );
            } else {
                assert_eq!(c.rx_direct_octets, 0, "{host}");
            }
        }
        let stats = a.core.transport().stats();
        assert_eq!(stats.rx_direct_octets, a.core.counters().rx_direct_octets);
    }
}

/// Frames lost, duplicated and reordered both ways: segments beyond a hole
/// wait in TCP's buffer and the ones after them come straight again once
/// it is read; every octet arrives once, in order (the core asserts the
/// stream positions), and both ways were used.
#[test]
fn a_lossy_link_mixes_straight_and_buffered_octets_without_losing_any() {
    let (mut a, mut b, addr) = stacks();
    let (ha, hb) = establish_plain(&mut a, &mut b, addr);
    let faults = tcp_lite::link::Faults {
        drop: 0.02,
        duplicate: 0.02,
        reorder: 0.05,
        corrupt: 0.0,
    };
    a.core.transport().device().set_tx_faults(faults);
    b.core.transport().device().set_tx_faults(faults);
    for _ in 0..8 {
        traffic(&mut a, &mut b, &ha, &hb);
    }
    // Most octets go to a (Write, Read Responses, a Send a round).
    let c = a.core.counters();
    assert!(
        c.rx_direct_octets > 0 && c.rx_direct_octets < c.rx_fpdu_octets,
        "{} of {} octets taken straight",
        c.rx_direct_octets,
        c.rx_fpdu_octets
    );
}

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
                "b did not finish: {} connections, {} in startup, handoffs {:?}",
                b.core.transport().connections(),
                b.core.in_startup(),
                b.handoffs
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
        // The core hears the close; the ULP hears that the peer closed.
        peers.push((
            "a peer that disconnects mid-Request",
            Some(FailReason::PeerClosed),
            Box::new(move |s: &mut TcpStream| {
                s.write_all(&part).unwrap();
                s.shutdown(std::net::Shutdown::Both).unwrap();
            }),
        ));
    }
    for (what, reason, behave) in &peers {
        let accepted = b.core.transport().stats().accepted;
        let mut stream = TcpStream::connect(target).unwrap();
        behave(&mut stream);
        pump(&mut b, &mut |b| {
            b.core.transport().stats().accepted > accepted
        });
        pump(&mut b, &mut |b| !b.handoffs.is_empty());
        let reasons: Vec<_> = b
            .handoffs
            .drain(..)
            .map(|h| match h.result {
                StartupResult::Failed(f) => Some(f.reason),
                _ => None,
            })
            .collect();
        assert_eq!(reasons, [*reason], "{what}");
        assert!(b.qps.is_empty(), "{what}: no QP");
        // Once the peer is gone too, nothing of it is left on b's core.
        drop(stream);
        pump(&mut b, &mut |b| {
            b.core.transport().connections() == 0 && !b.link_busy()
        });
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
    let (ha, hb) = establish_plain(&mut a, &mut b, addr);
    traffic(&mut a, &mut b, &ha, &hb);
}

/// The QP events of `host`'s connection `conn` (the core reports them
/// even after the Terminate ended the connection and its QP).
/// Runs both hosts until `b`'s QP on `conn` has events, and returns them.
fn first_qp_events<T: CoreTransport, U: CoreTransport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    conn: tcp_lite::ConnId,
    what: &str,
) -> Vec<rnic_engine::qp::QpEvent> {
    let mut events = Vec::new();
    run(a, b, what, |_, b| {
        events.extend(qp_events(b, conn));
        !events.is_empty()
    });
    events
}

fn qp_events<T: CoreTransport>(
    host: &mut Host<T>,
    conn: tcp_lite::ConnId,
) -> Vec<rnic_engine::qp::QpEvent> {
    let qp = host.qps[&conn];
    let mut events = Vec::new();
    while let Some((of, event)) = host.core.next_event() {
        if of == qp {
            events.push(event);
        }
    }
    events
}

on_every_transport!(
    no_matching_rtr_terminates_the_responders_qp,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        // RFC 6581 §9.2: the initiator "MUST send a TERM message ... Layer 2,
        // Error Type 0, Error Code 7" when it cannot generate any of the
        // responder's RTRs; the responder, past its Reply, hears it on its QP.
        let send_only = p2p(RtrSet {
            send: true,
            ..RtrSet::NONE
        });
        let write_only = p2p(RtrSet {
            write: true,
            ..RtrSet::NONE
        });
        let (ha, hb) = establish(a, b, addr, send_only, write_only, accept());
        match &ha.result {
            StartupResult::Failed(f) => {
                assert_eq!(f.term, Some(control::mpa::TermCode::NoMatchingRtr))
            }
            other => panic!("{other:?}"),
        }
        let conn = hb.conn.unwrap();
        let events = first_qp_events(a, b, conn, "the Terminate reaches b's QP");
        let info = rnic_engine::qp::TermInfo {
            layer: 2,
            etype: 0,
            ecode: 7,
        };
        assert_eq!(events, [rnic_engine::qp::QpEvent::TerminateReceived(info)]);
    }
);

on_every_transport!(
    a_qp_joins_the_pd_its_core_picks,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        // b puts the connection's QP in a PD of its own, where only `own`
        // is registered: a's Write into `own` is placed, its Write into b's
        // host-wide registration (another PD) draws DDP's Terminate
        // (tagged buffer error, STag not associated with the DDP stream).
        let registry = b.rnic().registry().clone();
        let pd = registry.alloc_pd().unwrap();
        let own = rnic_engine::mem::Region::new(4096);
        let access = rnic_engine::mem::Access::LOCAL_WRITE | rnic_engine::mem::Access::REMOTE_WRITE;
        let mr = registry.reg_region(pd, own.clone(), access).unwrap();
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        b.core.set_pd_for(Box::new(move |local, peer, _| {
            seen.lock().unwrap().push((local, peer));
            dataplane::PdChoice::In(pd)
        }));
        let (ha, hb) = establish_plain(a, b, addr);
        let (qa, conn) = (a.qps[&ha.conn.unwrap()], hb.conn.unwrap());
        let asked = asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "asked once, for its connection");
        assert_eq!(*asked[0].0.ip(), addr);
        assert_eq!(
            registry.dealloc_pd(pd),
            Err(rnic_engine::verbs::VerbError::InUse)
        );

        a.region.write(0, b"into its own PD").unwrap();
        let sgl = [a.sge(0, 15)];
        let into_own = rnic_engine::verbs::RemoteAddr {
            stag: mr.stag,
            to: mr.base_to + 100,
        };
        a.rnic()
            .post_send(qa, &SendWr::signaled(1, SendOp::Write(into_own), &sgl))
            .unwrap();
        let sgl = [a.sge(0, 8)];
        a.rnic()
            .post_send(qa, &SendWr::signaled(2, SendOp::Write(b.remote(0)), &sgl))
            .unwrap();
        let events = first_qp_events(a, b, conn, "b refuses the other PD's STag");
        let info = rnic_engine::qp::TermInfo {
            layer: 1,
            etype: 1,
            ecode: 2,
        };
        assert_eq!(events, [rnic_engine::qp::QpEvent::TerminateSent(info)]);
        let mut placed = [0u8; 15];
        own.read(100, &mut placed).unwrap();
        assert_eq!(&placed, b"into its own PD");
        let mut host = [0u8; 8];
        b.region.read(0, &mut host).unwrap();
        assert_eq!(host, [0u8; 8], "nothing placed through the other PD's STag");
        // The connection ends with the Terminate; once its QP is gone the
        // PD can be freed (with its registration deregistered).
        registry.dereg_mr(mr.stag).unwrap();
        run(a, b, "b's QP goes", |_, b| b.core.next_ended().is_some());
        assert_eq!(registry.dealloc_pd(pd), Ok(()));
    }
);

on_every_transport!(
    a_connection_its_core_refuses_a_pd_gets_no_qp,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        b.core
            .set_pd_for(Box::new(|_, _, _| dataplane::PdChoice::Refuse));
        let (ha, hb) = establish_plain(a, b, addr);
        assert!(b.qps.is_empty() && hb.conn.is_some(), "established, no QP");
        assert_eq!(b.core.counters().refused, 1);
        // a's side hears the reset: its QP ends, or, if the reset came
        // first, it never had one.
        if let Some(&qa) = ha.conn.and_then(|c| a.qps.get(&c)) {
            run(a, b, "a's QP ends", |a, _| {
                std::iter::from_fn(|| a.core.next_ended()).any(|q| q == qa)
            });
        } else {
            assert!(
                matches!(ha.result, StartupResult::Failed(_)),
                "{:?}",
                ha.result
            );
        }
    }
);

on_every_transport!(
    what_a_qp_completed_before_its_end_is_kept_for_a_late_poll,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        // a Sends and, once b has read it, closes; neither polls its CQ
        // before its QP has ended. The Send is data b received: its completion is kept (the
        // core dropped every completion of an ended QP: found by a
        // review). b's second receive, flushed by the end, is not
        // reported: the end is.
        let (ha, hb) = establish_plain(a, b, addr);
        let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
        let data: Vec<u8> = (0..3_000u32).map(|i| (i * 13 + 1) as u8).collect();
        a.region.write(0, &data).unwrap();
        for wr_id in [30, 31] {
            let sgl = [b.sge(8_000 * (wr_id - 29), 8_000)];
            b.rnic()
                .post_recv(qb, &rnic_engine::verbs::RecvWr { wr_id, sgl: &sgl })
                .unwrap();
        }
        let sgl = [a.sge(0, 3_000)];
        a.rnic()
            .post_send(qa, &SendWr::signaled(40, SendOp::Send, &sgl))
            .unwrap();
        run(a, b, "b reads the Send", |_, b| {
            b.core.rx_octets(qb).is_some_and(|n| n >= 3_000)
        });
        a.core.close(qa);
        let (mut a_ended, mut b_ended) = (false, false);
        run(a, b, "both QPs end", |a, b| {
            a_ended |= std::iter::from_fn(|| a.core.next_ended()).any(|q| q == qa);
            b_ended |= std::iter::from_fn(|| b.core.next_ended()).any(|q| q == qb);
            a_ended && b_ended
        });
        let wb = b.completions();
        assert_eq!(wb.len(), 1, "{wb:?}");
        assert_eq!(
            (wb[0].qp, wb[0].wr_id, wb[0].status, wb[0].byte_len),
            (qb, 30, rnic_engine::cq::WcStatus::Success, 3_000)
        );
        let mut got = vec![0; 3_000];
        b.region.read(8_000, &mut got).unwrap();
        assert_eq!(got, data);
        let wa = a.completions();
        assert_eq!(wa.len(), 1, "{wa:?}");
        assert_eq!(
            (wa[0].qp, wa[0].wr_id, wa[0].status),
            (qa, 40, rnic_engine::cq::WcStatus::Success)
        );
    }
);

on_every_transport!(
    a_close_right_after_a_post_sends_what_was_posted_first,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        // a posts a Send and a Write and closes in the same breath: the
        // FIN follows them (it went at once, ahead of both, and they were
        // lost: found by a review).
        let (ha, hb) = establish_plain(a, b, addr);
        let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
        let data: Vec<u8> = (0..6_000u32).map(|i| (i * 29 + 5) as u8).collect();
        a.region.write(0, &data).unwrap();
        let sgl = [b.sge(8_000, 8_000)];
        b.rnic()
            .post_recv(
                qb,
                &rnic_engine::verbs::RecvWr {
                    wr_id: 50,
                    sgl: &sgl,
                },
            )
            .unwrap();
        let sgl = [a.sge(0, 3_000)];
        a.rnic()
            .post_send(qa, &SendWr::signaled(60, SendOp::Send, &sgl))
            .unwrap();
        let sgl = [a.sge(3_000, 3_000)];
        a.rnic()
            .post_send(
                qa,
                &SendWr::signaled(61, SendOp::Write(b.remote(20_000)), &sgl),
            )
            .unwrap();
        a.core.close(qa);
        let (mut wa, mut wb) = (Vec::new(), Vec::new());
        let (mut a_ended, mut b_ended) = (false, false);
        run(a, b, "both QPs end", |a, b| {
            wa.extend(a.completions());
            wb.extend(b.completions());
            a_ended |= std::iter::from_fn(|| a.core.next_ended()).any(|q| q == qa);
            b_ended |= std::iter::from_fn(|| b.core.next_ended()).any(|q| q == qb);
            a_ended && b_ended
        });
        wa.extend(a.completions());
        wb.extend(b.completions());
        let ok = rnic_engine::cq::WcStatus::Success;
        let a_got: Vec<_> = wa.iter().map(|w| (w.wr_id, w.status)).collect();
        assert_eq!(a_got, [(60, ok), (61, ok)]);
        let b_got: Vec<_> = wb.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect();
        assert_eq!(b_got, [(50, ok, 3_000)]);
        let mut got = vec![0; 3_000];
        b.region.read(8_000, &mut got).unwrap();
        assert_eq!(got, data[..3_000], "the Send");
        b.region.read(20_000, &mut got).unwrap();
        assert_eq!(got, data[3_000..], "the Write");
    }
);

/// After our FIN, a peer that acknowledges it, never sends its own and
/// trickles an octet now and then (which keeps TCP's user timeout away)
/// is reset `CoreConfig::closing_limit` later; meanwhile the QP, past
/// its FIN, is not looked at every turn (the octets put it in Terminate,
/// whose message can no longer go: it was, for ever; found by a review).
#[test]
fn a_peer_that_never_closes_after_our_fin_is_reset() {
    let (mut a, mut b, b_addr) =
        stacks_with(|core, _| core.closing_limit = StdDuration::from_secs(1));
    let (ha, hb) = establish_plain(&mut a, &mut b, b_addr);
    let (ca, qb) = (ha.conn.unwrap(), b.qps[&hb.conn.unwrap()]);
    b.core.close(qb);
    let closed_at = StdInstant::now();
    let looked = b.core.counters().looked_at;
    let mut trickled = StdInstant::now();
    let mut ended = false;
    // a's core is not run: the test is its peer, on a's stack.
    while !ended {
        assert!(
            closed_at.elapsed() < StdDuration::from_secs(8),
            "b's QP still live: {:?}",
            b.core.rnic_ref().qp_state(qb)
        );
        b.step(now());
        let t = a.core.transport_mut();
        t.poll(now());
        while t.next_event().is_some() {}
        if trickled.elapsed() > StdDuration::from_millis(100) {
            trickled = StdInstant::now();
            let sent = t.send_with(ca, 1, |buf| {
                buf[0] = 0xee;
                (1, ())
            });
            assert!(sent.is_ok(), "{sent:?}");
        }
        ended = std::iter::from_fn(|| b.core.next_ended()).any(|q| q == qb);
        std::thread::sleep(StdDuration::from_micros(200));
    }
    assert!(closed_at.elapsed() >= StdDuration::from_secs(1));
    let c = b.core.counters();
    assert_eq!(c.closes_reset, 1);
    let looks = c.looked_at - looked;
    assert!(looks < 200, "looked at {looks} times after its FIN");
}

/// An ended QP whose completions the application has not taken keeps its
/// slot: with the engine full, a new connection is refused rather than
/// the completions dropped (a data delivered Send's among them); once
/// they are taken, the slot is free again.
#[test]
fn a_full_engine_refuses_a_connection_rather_than_drop_kept_completions() {
    let (mut a, mut b, b_addr) = stacks_with(|_, rnic| rnic.qps_max = 1);
    let (ha, hb) = establish_plain(&mut a, &mut b, b_addr);
    let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
    let sgl = [b.sge(8_000, 8_000)];
    b.rnic()
        .post_recv(
            qb,
            &rnic_engine::verbs::RecvWr {
                wr_id: 30,
                sgl: &sgl,
            },
        )
        .unwrap();
    let sgl = [a.sge(0, 1_000)];
    a.rnic()
        .post_send(qa, &SendWr::signaled(40, SendOp::Send, &sgl))
        .unwrap();
    run(&mut a, &mut b, "b reads the Send", |_, b| {
        b.core.rx_octets(qb).is_some_and(|n| n >= 1_000)
    });
    a.core.abort(qa);
    run(&mut a, &mut b, "b's QP ends", |_, b| {
        std::iter::from_fn(|| b.core.next_ended()).any(|q| q == qb)
    });
    // A second connection before b's application polls: no slot.
    let (_, refused) = establish_plain(&mut a, &mut b, b_addr);
    assert!(!b.qps.contains_key(&refused.conn.unwrap()), "no QP for it");
    assert_eq!(b.core.counters().refused, 1);
    let wb = b.completions();
    let got: Vec<_> = wb.iter().map(|w| (w.qp, w.wr_id, w.byte_len)).collect();
    assert_eq!(got, [(qb, 30, 1_000)]);
    // Taken: the slot is free for the next connection.
    let (_, third) = establish_plain(&mut a, &mut b, b_addr);
    assert!(b.qps.contains_key(&third.conn.unwrap()));
}

/// What the core keeps of a CQ for its application, when a QP ends, is
/// bounded by the CQ's capacity, as the CQ itself is: an application that
/// keeps posting signaled work on a live QP and never polls made every
/// end (a peer's connection reset, here three) move the whole ring into
/// the core's keeping, and the ring fill again, without bound (found by a
/// review of "a QP whose application never polls its CQ is never
/// freed"). Past the bound the newest are lost, as a full ring loses
/// them, and counted.
#[test]
fn completions_kept_past_ends_are_bounded_by_the_cq() {
    let (mut a, mut b, b_addr) = stacks();
    let cq = b.cq;
    let capacity = b.rnic().cq(cq).unwrap().capacity();
    let (ha, hb) = establish_plain(&mut a, &mut b, b_addr);
    let (qa, qb) = (a.qps[&ha.conn.unwrap()], b.qps[&hb.conn.unwrap()]);
    // a's first FPDU lets b's (the fenced responder's) go.
    let sgl = [a.sge(0, 1)];
    let into_b = b.remote(100);
    a.rnic()
        .post_send(qa, &SendWr::signaled(1, SendOp::Write(into_b), &sgl))
        .unwrap();
    let into_a = a.remote(100);
    let mut posted = 0u64;
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        // b's Writes on its live QP fill its CQ's ring; b never polls.
        let mut left = capacity;
        run(&mut a, &mut b, "b's CQ fills", |_, b| {
            while left > 0 {
                let sgl = [b.sge(0, 1)];
                let wr = SendWr::signaled(posted, SendOp::Write(into_a), &sgl);
                if b.rnic().post_send(qb, &wr).is_err() {
                    break;
                }
                posted += 1;
                left -= 1;
            }
            b.rnic().cq(cq).unwrap().len() == capacity
        });
        // A peer's connection that comes and goes: its end at b reads the
        // ring out.
        let (hc, _) = establish_plain(&mut a, &mut b, b_addr);
        let qc = a.qps[&hc.conn.unwrap()];
        a.core.abort(qc);
        let ended = b.core.counters().ended;
        run(&mut a, &mut b, "the peer's connection ends at b", |_, b| {
            b.core.counters().ended > ended
        });
        assert!(b.core.is_live(qb), "round {round}");
    }
    let mut got = Vec::new();
    loop {
        let batch = b.completions();
        if batch.is_empty() {
            break;
        }
        got.extend(batch);
    }
    assert_eq!(posted, (ROUNDS * capacity) as u64);
    assert!(
        got.len() <= 2 * capacity,
        "{} completions held for a CQ of {capacity}",
        got.len()
    );
    // Each completion was kept or counted lost; the oldest are kept, in
    // order.
    let lost = b.core.counters().completions_lost;
    assert_eq!(got.len() as u64 + lost, posted);
    // The CQ says it lost some, as a full ring does.
    assert!(lost > 0);
    assert!(b.rnic().cq(cq).unwrap().overflowed());
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..got.len() as u64).collect::<Vec<_>>());
}

/// An urgent QP's segments carry `CoreConfig::urgent_dscp` (EF, 46, by
/// default) on the in-memory link; none once it is urgent no more.
#[test]
fn an_urgent_qps_segments_carry_its_class() {
    let (mut a, mut b, addr) = stacks();
    let (ha, _) = establish_plain(&mut a, &mut b, addr);
    let conn = ha.conn.unwrap();
    let qa = a.qps[&conn];
    let ours = a.core.transport().endpoints(conn).unwrap().0.port();
    let classes = |a: &Host<tcp_lite::Stack<tcp_lite::link::LinkEnd>>| -> Vec<u8> {
        let frames: Vec<Vec<u8>> = a.core.transport().device().take_captured();
        frames
            .iter()
            .filter(|f| f.len() >= 38 && f[12..14] == [0x08, 0x00] && f[23] == 6)
            .filter(|f| u16::from_be_bytes([f[34], f[35]]) == ours)
            .map(|f| f[15] >> 2)
            .collect()
    };
    type Linked = Host<tcp_lite::Stack<tcp_lite::link::LinkEnd>>;
    let write = |a: &mut Linked, b: &mut Linked, id: u64| {
        // A Write completes once TCP has it: wait for b's memory.
        let data = vec![id as u8; 20_000];
        a.region.write(0, &data).unwrap();
        let sgl = [a.sge(0, 20_000)];
        a.rnic()
            .post_send(qa, &SendWr::signaled(id, SendOp::Write(b.remote(0)), &sgl))
            .unwrap();
        let mut done = Vec::new();
        run(a, b, "the Write completes", |a, _| {
            done.extend(a.completions());
            !done.is_empty()
        });
        assert_eq!(done[0].status, rnic_engine::cq::WcStatus::Success);
        run(a, b, "the Write is placed", |_, b| {
            let mut placed = vec![0u8; 20_000];
            b.region.read(0, &mut placed).unwrap();
            placed == data
        });
    };
    a.core.transport().device().capture_tx(10_000);
    assert!(a.core.set_urgent(qa, true));
    write(&mut a, &mut b, 1);
    let marked = classes(&a);
    assert!(
        marked.len() >= 14,
        "a 20,000-octet Write in segments: {marked:?}"
    );
    assert!(marked.iter().all(|&c| c == 46), "{marked:?}");
    assert!(a.core.set_urgent(qa, false));
    write(&mut a, &mut b, 2);
    let plain = classes(&a);
    assert!(
        !plain.is_empty() && plain.iter().all(|&c| c == 0),
        "{plain:?}"
    );
}

/// A connection from `a` to `b` opened with class `dscp` (its SYN
/// marked, `ControlPlane::connect_marked`), accepted by `b`: both ends'
/// connections.
fn open_with_class<T: CoreTransport, U: CoreTransport>(
    a: &mut Host<T>,
    b: &mut Host<U>,
    b_addr: Ipv4Addr,
    dscp: u8,
) -> (tcp_lite::ConnId, tcp_lite::ConnId) {
    let port = port();
    b.control
        .listen(0, port, StartupConfig::default(), Box::new(|_, _| accept()));
    std::thread::sleep(StdDuration::from_millis(20));
    b.step(now());
    a.control.connect_marked(
        0,
        SocketAddrV4::new(b_addr, port),
        StartupConfig::default(),
        b"hello from a",
        dscp,
    );
    run(a, b, "startup", |a, b| {
        !a.handoffs.is_empty() && !b.handoffs.is_empty()
    });
    let (ha, hb) = (a.handoffs.remove(0), b.handoffs.remove(0));
    (ha.conn.unwrap(), hb.conn.unwrap())
}

/// A QP opened with a class (rdma_cm's TOS before connect) carries it from
/// its SYN on, and is urgent where the class is the core's urgent one; a
/// core that reflects its peers' classes (`CoreConfig::reflect_dscp`)
/// gives an accepted connection the class of its SYN (urgent for EF),
/// and one that does not leaves it plain.
#[test]
fn a_qp_opened_with_a_class_is_served_in_it_at_both_ends_where_the_server_reflects() {
    let (mut a, mut b, addr) = stacks();
    b.core.config_mut().reflect_dscp = true;
    a.core.transport().device().capture_tx(1_000);
    let (ca, cb) = open_with_class(&mut a, &mut b, addr, 46);
    let ours = a.core.transport().endpoints(ca).unwrap().0.port();
    // Every frame of the connection a sent, the SYN first, was EF.
    let sent: Vec<(u8, u8)> = a
        .core
        .transport()
        .device()
        .take_captured()
        .iter()
        .filter(|f| f.len() >= 54 && f[12..14] == [0x08, 0x00] && f[23] == 6)
        .filter(|f| u16::from_be_bytes([f[34], f[35]]) == ours)
        .map(|f| (f[47], f[15] >> 2))
        .collect();
    assert_eq!(sent[0].0 & 0x12, 0x02, "the SYN first: {sent:?}");
    assert!(sent.iter().all(|&(_, c)| c == 46), "{sent:?}");
    assert_eq!(a.core.urgent_connections(), 1);
    assert_eq!(b.core.urgent_connections(), 1, "EF reflected: urgent");
    assert_eq!(b.core.transport().dscp(cb), 46);
    assert_eq!(b.core.counters().classes_reflected, 1);
    // Urgent no more, each end goes back to the connection's class.
    assert!(b.core.set_urgent(b.qps[&cb], false));
    assert!(a.core.set_urgent(a.qps[&ca], false));
    assert_eq!(b.core.transport().dscp(cb), 46);
    assert_eq!(a.core.transport().dscp(ca), 46);
    assert_eq!(
        (a.core.urgent_connections(), b.core.urgent_connections()),
        (0, 0)
    );
    assert!(b.core.set_urgent(b.qps[&cb], true));
    assert!(a.core.set_urgent(a.qps[&ca], true));

    // Another class is carried and reflected, but is not urgent.
    let (ca, cb) = open_with_class(&mut a, &mut b, addr, 10);
    assert_eq!(a.core.transport().dscp(ca), 10);
    assert_eq!(b.core.transport().dscp(cb), 10);
    assert_eq!(a.core.urgent_connections(), 1);
    assert_eq!(b.core.urgent_connections(), 1);
    assert_eq!(b.core.counters().classes_reflected, 2);

    // A plain SYN reflects nothing.
    let (_, cb) = open_with_class(&mut a, &mut b, addr, 0);
    assert_eq!(b.core.transport().dscp(cb), 0);
    assert_eq!(b.core.counters().classes_reflected, 2);

    // Not reflecting: the server's end stays plain whatever the SYN said.
    b.core.config_mut().reflect_dscp = false;
    b.step(now());
    let (ca, cb) = open_with_class(&mut a, &mut b, addr, 46);
    assert_eq!(a.core.transport().dscp(ca), 46);
    assert_eq!(a.core.urgent_connections(), 2);
    assert_eq!(b.core.transport().dscp(cb), 0);
    assert_eq!(b.core.urgent_connections(), 1);
    assert_eq!(b.core.counters().classes_reflected, 2);
}

/// Over Linux TCP the class is the socket's IP_TOS.
#[test]
fn an_urgent_qp_on_kernel_tcp_marks_its_socket() {
    let (mut a, mut b, addr) = kernels();
    a.core.config_mut().urgent_dscp = 40;
    let (ha, _) = establish_plain(&mut a, &mut b, addr);
    let conn = ha.conn.unwrap();
    let qa = a.qps[&conn];
    assert_eq!(a.core.transport().tos(conn).unwrap(), 0);
    assert!(a.core.set_urgent(qa, true));
    assert_eq!(a.core.transport().tos(conn).unwrap(), 40 << 2);
    assert!(a.core.set_urgent(qa, false));
    assert_eq!(a.core.transport().tos(conn).unwrap(), 0);

    // Opened with the urgent class: IP_TOS from before its SYN, urgent
    // once established; Linux does not tell the server its peer's class.
    b.core.config_mut().reflect_dscp = true;
    let (ca, cb) = open_with_class(&mut a, &mut b, addr, 40);
    assert_eq!(a.core.transport().tos(ca).unwrap(), 40 << 2);
    assert_eq!(a.core.urgent_connections(), 1);
    assert_eq!(b.core.transport().tos(cb).unwrap(), 0);
    assert_eq!(b.core.urgent_connections(), 0);
}

on_every_transport!(
    reject_for_insufficient_ird_reaches_the_initiator,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        let initiator = StartupConfig {
            ird: 2,
            ..StartupConfig::default()
        };
        let decide = Decision::Accept(control::mpa::Accept {
            ord_required: Some(8),
            ..control::mpa::Accept::default()
        });
        let (ha, hb) = establish(a, b, addr, initiator, StartupConfig::default(), decide);
        match (&ha.result, &hb.result) {
            (StartupResult::Rejected(r), StartupResult::Failed(f)) => {
                assert_eq!(r.peer.unwrap().ord, 8, "the required ORD");
                assert_eq!(f.term, Some(control::mpa::TermCode::InsufficientIrd));
            }
            other => panic!("{other:?}"),
        }
    }
);

on_every_transport!(
    a_connect_nobody_answers_is_reported,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        // Nobody listens on this port: refused, and the ULP hears it.
        let token = a.control.connect(
            0,
            SocketAddrV4::new(addr, port()),
            StartupConfig::default(),
            b"",
        );
        run(a, b, "the failed connect is reported", |a, _| {
            !a.handoffs.is_empty()
        });
        let h = a.handoffs.remove(0);
        assert_eq!((h.conn, h.token), (None, token));
        match h.result {
            StartupResult::Failed(f) => assert_eq!(f.reason, control::mpa::FailReason::Unreachable),
            other => panic!("{other:?}"),
        }
    }
);

/// A Reply the peer follows with FIN at once (as Linux does after a
/// reject) is still read: the ULP gets the reject, not a lost connection.
#[test]
fn a_reject_followed_by_fin_is_not_lost() {
    use std::io::{Read, Write};
    let (mut a, mut b, addr) = kernels();
    let listener = std::net::TcpListener::bind(SocketAddrV4::new(addr, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(StdDuration::from_secs(5))).unwrap();
        let mut request = [0u8; 64];
        let _ = s.read(&mut request).unwrap();
        let reply = rnic_engine::wire::mpa_rr::Repr {
            kind: rnic_engine::wire::mpa_rr::FrameKind::Reply,
            markers: false,
            crc: true,
            reject: true,
            reserved: 0,
            revision: 2,
            enhanced: Some(Default::default()),
            private_data: b"go away",
        };
        let mut out = vec![0; reply.buffer_len()];
        reply.emit(&mut rnic_engine::wire::mpa_rr::Packet::new_unchecked(
            &mut out[..],
        ));
        s.write_all(&out).unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
    });
    let token = a.control.connect(
        0,
        SocketAddrV4::new(addr, port),
        StartupConfig::default(),
        b"hello",
    );
    run(&mut a, &mut b, "the reject", |a, _| !a.handoffs.is_empty());
    peer.join().unwrap();
    let h = a.handoffs.remove(0);
    assert_eq!(h.token, token);
    match h.result {
        StartupResult::Rejected(r) => assert_eq!(r.private_data, b"go away"),
        other => panic!("{other:?}"),
    }
    // A connection handed over is the core's to close, and the core closes
    // it: nothing stays open. (The peer's FIN may have closed and released
    // it first; then the handoff has none, and the core has nothing to
    // clean up.)
    run(&mut a, &mut b, "closing the rejected connection", |a, _| {
        a.core.open_connections() == 0 && a.core.transport().connections() == 0
    });
}

/// A peer whose Request the ULP rejected, and which never closes its side
/// but keeps sending (which keeps TCP's user timeout away), is reset
/// `DRAIN_LIMIT` after the core closed the connection: it does not keep
/// the connection for ever (it did: found by a review).
#[test]
fn a_rejected_peer_that_never_closes_is_reset() {
    use control::runtime::DRAIN_LIMIT;
    use rnic_engine::wire::mpa_rr::{FrameKind, Packet, Repr};
    use std::io::{ErrorKind, Read, Write};
    let (mut a, mut b, addr) = kernels();
    let port = port();
    b.control.listen(
        0,
        port,
        StartupConfig::default(),
        Box::new(|_, _| Decision::Reject(b"go away".to_vec())),
    );
    std::thread::sleep(StdDuration::from_millis(20));
    b.step(now());
    let mut s = std::net::TcpStream::connect(SocketAddrV4::new(addr, port)).unwrap();
    let request = Repr {
        kind: FrameKind::Request,
        markers: false,
        crc: false,
        reject: false,
        reserved: 0,
        revision: 1,
        enhanced: None,
        private_data: b"",
    };
    let mut out = vec![0; request.buffer_len()];
    request.emit(&mut Packet::new_unchecked(&mut out[..]));
    s.write_all(&out).unwrap();
    s.set_nonblocking(true).unwrap();
    let start = StdInstant::now();
    let (mut reply, mut closed_at, mut last_write) = (Vec::new(), None, start);
    let mut buf = [0u8; 256];
    let reset = loop {
        assert!(
            start.elapsed() < DRAIN_LIMIT + StdDuration::from_secs(10),
            "the rejected connection is still open: {} connection(s), our FIN {closed_at:?}",
            b.core.open_connections()
        );
        b.step(now());
        match s.read(&mut buf) {
            Ok(0) => {
                closed_at.get_or_insert(start.elapsed());
            }
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => break e.kind(),
        }
        // An octet now and then, never a FIN.
        if last_write.elapsed() >= StdDuration::from_millis(200) {
            last_write = StdInstant::now();
            if let Err(e) = s.write(&[0]) {
                if e.kind() != ErrorKind::WouldBlock {
                    break e.kind();
                }
            }
        }
        std::thread::sleep(StdDuration::from_millis(1));
    };
    assert!(
        matches!(reset, ErrorKind::ConnectionReset | ErrorKind::BrokenPipe),
        "{reset:?}"
    );
    let took = start.elapsed();
    assert!(took >= DRAIN_LIMIT, "reset after {took:?}");
    let packet = Packet::new_checked(&reply[..]).expect("an MPA Reply");
    let repr = Repr::parse(&packet).expect("an MPA Reply");
    assert!(repr.reject, "{repr:?}");
    assert!(closed_at.is_some(), "the core closed its side first");
    run(&mut a, &mut b, "the connection released", |_, b| {
        b.core.open_connections() == 0 && b.core.transport().connections() == 0
    });
}

/// Stopping the control plane fails the startups in flight: the core closes
/// them and tells the ULP; nothing hangs.
#[test]
fn stopping_the_control_plane_fails_startups_in_flight() {
    use control::runtime::ControlPlane;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let target = match silent.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let mut transport = KernelTransport::new(tcp_lite::sys::kernel::KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        ..Default::default()
    })
    .unwrap();
    let (mut control, mut links) = ControlPlane::start(1);
    let link = &mut links[0];
    let token = control.connect(0, target, StartupConfig::default(), b"");
    let start = StdInstant::now();
    // Until the Request is out and the startup waits for the Reply.
    while link.in_startup() == 0 || start.elapsed() < StdDuration::from_millis(50) {
        assert!(start.elapsed() < DEADLINE);
        transport.poll(now());
        while let Some(e) = transport.next_event() {
            link.handle_event(&mut transport, e);
        }
        link.poll(&mut transport, now());
    }
    let stats = control.stop();
    assert_eq!(stats.failed, 1, "the startup in flight failed");
    let mut handoff = None;
    while handoff.is_none() {
        assert!(start.elapsed() < DEADLINE, "no handoff after the stop");
        transport.poll(now());
        while let Some(e) = transport.next_event() {
            link.handle_event(&mut transport, e);
        }
        link.poll(&mut transport, now());
        handoff = link.next_handoff();
    }
    let h = handoff.unwrap();
    assert_eq!(h.token, token);
    assert!(matches!(h.result, StartupResult::Failed(_)));
    // Our FIN is out; once the peer goes too, the connection is released.
    drop(silent);
    while link.in_startup() > 0 || transport.connections() > 0 {
        assert!(
            start.elapsed() < DEADLINE,
            "the connection was not released"
        );
        transport.poll(now());
        while let Some(e) = transport.next_event() {
            link.handle_event(&mut transport, e);
        }
        link.poll(&mut transport, now());
    }
}

on_every_transport!(
    an_unenhanced_responder_gets_an_unenhanced_retry,
    |a: &mut Host<_>, b: &mut Host<_>, addr| {
        // RFC 6581 §10: an unenhanced responder "MUST close the TCP connection
        // and exit MPA"; "the initiator MAY attempt to establish an RDMA
        // connection using the unenhanced MPA protocol ... if this protocol is
        // compatible with the application".
        let initiator = StartupConfig {
            retry_unenhanced: true,
            ..StartupConfig::default()
        };
        let unenhanced = StartupConfig {
            enhanced: false,
            ..StartupConfig::default()
        };
        let (ha, hb) = establish(a, b, addr, initiator, unenhanced, accept());
        // b's first startup failed (it closed the enhanced Request); its second
        // is the one handed over with a's.
        let hb = match hb.result {
            StartupResult::Failed(f) => {
                assert_eq!(f.reason, control::mpa::FailReason::EnhancedNotSupported);
                run(a, b, "the retry", |_, b| !b.handoffs.is_empty());
                b.handoffs.remove(0)
            }
            _ => hb,
        };
        let (ea, eb) = (established(&ha), established(&hb));
        assert_eq!(
            (ea.revision, ea.enhanced, eb.revision, eb.enhanced),
            (1, false, 1, false)
        );
        traffic(a, b, &ha, &hb);
    }
);

/// A listen the transport refuses (the port is taken) is reported to the
/// core, so an application can say so instead of waiting for connections.
#[test]
fn a_refused_listen_is_reported() {
    use control::runtime::ControlPlane;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut transport = KernelTransport::new(tcp_lite::sys::kernel::KernelConfig {
        bind: Ipv4Addr::LOCALHOST,
        ..Default::default()
    })
    .unwrap();
    let (control, mut links) = ControlPlane::start(1);
    let link = &mut links[0];
    let free = port_free();
    let accept_all = || Box::new(|_: &_, _| Decision::Accept(Default::default())) as _;
    control.listen(0, port, StartupConfig::default(), accept_all());
    control.listen(0, free, StartupConfig::default(), accept_all());
    assert_eq!(
        link.listen_status(port),
        None,
        "not before the core hears it"
    );
    let start = StdInstant::now();
    while link.listen_status(port).is_none() || link.listen_status(free).is_none() {
        assert!(
            start.elapsed() < DEADLINE,
            "the listens never reached the core"
        );
        link.poll(&mut transport, now());
    }
    assert_eq!(
        link.listen_status(port),
        Some(Err(tcp_lite::ListenError::PortInUse)),
        "port {port} is taken by another socket"
    );
    assert_eq!(link.listen_status(free), Some(Ok(())));
    drop(taken);
}

/// A port nobody on loopback listens on (bound and released).
fn port_free() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Handoffs past a turn's budget wait in the link's queue; their
/// connections are then neither the link's nor the core's. A peer that
/// resets one meanwhile must still end it: the core keeps the events of
/// connections whose handoff waits and replays them once it takes the
/// handoff (they were dropped, and tcp-lite reports an end once, so the QP
/// and the TCP slot stayed for good; found by a review).
#[test]
fn a_reset_of_a_connection_whose_handoff_waits_still_ends_it() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const N: usize = 4;
    let (mut a, mut b, addr) = stacks();
    b.core.config_mut().budgets.handoffs = 1;
    let port = port();
    // The control plane holds its decisions until all four Requests are
    // in, so that their four handoffs reach b's core in one poll.
    let go = Arc::new(AtomicBool::new(false));
    let wait = go.clone();
    b.control.listen(
        0,
        port,
        StartupConfig::default(),
        Box::new(move |_, _| {
            let start = StdInstant::now();
            while !wait.load(Ordering::SeqCst) && start.elapsed() < StdDuration::from_secs(10) {
                std::thread::sleep(StdDuration::from_millis(1));
            }
            accept()
        }),
    );
    std::thread::sleep(StdDuration::from_millis(20));
    b.step(now());
    for _ in 0..N {
        a.control.connect(
            0,
            SocketAddrV4::new(addr, port),
            StartupConfig::default(),
            b"hello",
        );
    }
    run(&mut a, &mut b, "four startups at b", |_, b| {
        b.core.in_startup() == N
    });
    // Their Requests reach b's control plane (which waits).
    let start = StdInstant::now();
    while start.elapsed() < StdDuration::from_millis(200) {
        a.step(now());
        b.step(now());
    }
    go.store(true, Ordering::SeqCst);
    std::thread::sleep(StdDuration::from_millis(200));
    // One turn of b: all four decided, one handed over (the budget), three
    // waiting; the Replies go out.
    b.step(now());
    assert_eq!(b.handoffs.len(), 1, "one handoff a turn");
    let start = StdInstant::now();
    while a.handoffs.len() < N {
        assert!(start.elapsed() < StdDuration::from_secs(10), "a's startups");
        a.step(now());
    }
    // a resets all four before b takes the waiting handoffs.
    let qps: Vec<_> = a.qps.values().copied().collect();
    assert_eq!(qps.len(), N);
    for qp in qps {
        a.core.abort(qp);
    }
    a.step(now());
    run(&mut a, &mut b, "b ends all four", |_, b| {
        b.handoffs.len() == N
            && b.core.open_connections() == 0
            && b.core.transport().connections() == 0
    });
    assert_eq!(b.core.counters().ended, N as u64);
}
