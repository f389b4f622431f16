//! DDP stream session control over SCTP (`control::session`, RFC 5043 §6
//! with RFC 6581 §7's enhanced function codes): an `Initiator` and a
//! `Responder` wired back to back, with arbitrary messages of any PPID
//! injected into either, the ULP's decisions and time chosen by the input.
//! Every injected message also goes through `wire::ddp_session`.
//!
//! Input: an 8-octet header (see [`Header`]), then records of `op (1)` and
//! its operands (see [`Op`]). The simplest input is a header of zeros and one record
//! `00 | len (2, BE) | message`: a PPID 17 message for both machines.
//!
//! Asserts: no panic; no machine ever holds more than `OUTBOX_MESSAGES_MAX`
//! messages, nor sends more in its life (RFC 5043 §6: at most three control
//! messages per direction, here plus the RDMAP Terminate segment); every
//! PPID 17 message sent parses with `wire::ddp_session` (so a Terminate
//! never carries private data: RFC 6581 §7 "MUST NOT") and every PPID 16
//! message is DDP-SSN 0 and an RDMAP Terminate segment; Rejected and Failed
//! outcomes never change, Established only becomes Failed; and for every
//! injected PPID 17 message that parses, `emit(parse(m)) == m` and
//! `parse(emit(r)) == r`.
#![no_main]

use control::session::{
    Accept, Initiator, Outcome, Responder, SessionConfig, Transmit, OUTBOX_MESSAGES_MAX,
};
use libfuzzer_sys::fuzz_target;
use rnic_engine::qp::RtrSet;
use rnic_engine::wire::{ddp, ddp_session, rdmap};
use tcp_lite::{Duration, Instant};

/// QP depth bound of `control::negotiate` (QP_DEPTH_MAX) and "no value".
const DEPTH_MAX: u16 = 128;
const NO_NEGOTIATION: u16 = 0x3FFF;
/// Messages in flight between the two machines, per direction, at most.
const WIRE_MAX: usize = 2 * OUTBOX_MESSAGES_MAX;

/// The first 8 octets: both machines' configuration and the ULP's answer.
struct Header {
    initiator: SessionConfig,
    responder: SessionConfig,
    accept: Accept,
}

impl Header {
    fn parse(h: &[u8; 8]) -> Header {
        // A QP depth (at most 128), or 0x3FFF for 0xFF.
        let depth = |v: u8| {
            if v == 0xFF {
                NO_NEGOTIATION
            } else {
                u16::from(v) % (DEPTH_MAX + 1)
            }
        };
        let optional = |bit: u8, v: u8| (h[0] & bit != 0).then(|| depth(v));
        let ird_max = u16::from(h[3]) % (DEPTH_MAX + 1);
        let ird = match depth(h[1]) {
            NO_NEGOTIATION => NO_NEGOTIATION,
            ird => ird.min(ird_max),
        };
        // 100 ms steps, 10 s for 0 (the default).
        let timeout = match h[7] {
            0 => Duration::from_secs(10),
            t => Duration::from_millis(100 * u64::from(t)),
        };
        let config = |enhanced: bool| SessionConfig {
            // Enhanced is the default: a zero header is the usual setup.
            enhanced,
            ird,
            ord: depth(h[2]),
            ird_max,
            rtr: RtrSet::ALL,
            timeout,
        };
        Header {
            initiator: config(h[0] & 1 == 0),
            responder: config(h[0] & 2 == 0),
            accept: Accept {
                ird: optional(4, h[4]),
                ord: optional(8, h[5]),
                ord_required: optional(16, h[6]),
                private_data: b"ok".to_vec(),
                ulp_token: 0,
            },
        }
    }
}

/// One record of the input.
#[derive(Debug)]
enum Op<'a> {
    /// `op % 8 == 0..=2`: a message (PPID 17, 16, or the next four octets'
    /// PPID) of `len (2, BE)` octets; bit 3 of `op` set: to the initiator
    /// only, bit 4: to the responder only, neither: to both.
    Message { to: u8, ppid: u32, octets: &'a [u8] },
    /// 3: time advances by `(op >> 3) * 100 ms`.
    Wait(u64),
    /// 4: the next message one machine sent reaches the other (bit 3: the
    /// responder's to the initiator); `op >> 4` of them.
    Deliver { to_initiator: bool, count: u8 },
    /// 5: the responder's ULP decides: accept, reject, no ULP, local
    /// failure, or terminate (`(op >> 3) % 5`).
    Decide(u8),
    /// 6: the initiator's association acknowledged the Initiate; or (bit
    /// 3) it fails locally, (bit 4) terminates.
    Initiator(u8),
    /// 7: both outboxes are drained onto the wire.
    Drain,
}

fn take<'a>(rest: &mut &'a [u8], n: usize) -> &'a [u8] {
    let n = n.min(rest.len());
    let (head, tail) = rest.split_at(n);
    *rest = tail;
    head
}

fn next_op<'a>(rest: &mut &'a [u8]) -> Option<Op<'a>> {
    let (&op, tail) = rest.split_first()?;
    *rest = tail;
    Some(match op % 8 {
        kind @ 0..=2 => {
            let ppid = match kind {
                0 => ddp_session::PPID_SESSION_CONTROL,
                1 => ddp_session::PPID_DDP_SEGMENT,
                _ => {
                    let p = take(rest, 4);
                    let mut word = [0u8; 4];
                    word[..p.len()].copy_from_slice(p);
                    u32::from_be_bytes(word)
                }
            };
            let len = take(rest, 2);
            let len = match *len {
                [a, b] => usize::from(u16::from_be_bytes([a, b])),
                [a] => usize::from(a),
                _ => 0,
            };
            Op::Message {
                to: (op >> 3) & 3,
                ppid,
                octets: take(rest, len),
            }
        }
        3 => Op::Wait(u64::from(op >> 3)),
        4 => Op::Deliver {
            to_initiator: op & 8 != 0,
            count: (op >> 4).max(1),
        },
        5 => Op::Decide((op >> 3) % 5),
        6 => Op::Initiator(op >> 3),
        _ => Op::Drain,
    })
}

/// What a machine sent, in order, and how much in its life.
#[derive(Default)]
struct Wire {
    queue: std::collections::VecDeque<(u32, Vec<u8>)>,
    sent: usize,
}

impl Wire {
    /// Drains a machine's outbox through `poll`, checking every message.
    fn drain(&mut self, mut poll: impl FnMut(&mut [u8]) -> Option<Transmit>) {
        let mut buf = [0u8; ddp_session::MESSAGE_LEN_MAX];
        let mut drained = 0;
        while let Some(t) = poll(&mut buf) {
            drained += 1;
            assert!(drained <= OUTBOX_MESSAGES_MAX, "outbox above its bound");
            check_transmit(t, &buf[..t.len]);
            self.sent += 1;
            if self.queue.len() < WIRE_MAX {
                self.queue.push_back((t.ppid, buf[..t.len].to_vec()));
            }
        }
        assert!(
            self.sent <= OUTBOX_MESSAGES_MAX,
            "{} messages sent on one stream",
            self.sent
        );
    }
}

/// A message a machine sent is a well-formed session control message or
/// the one DDP segment it writes, an RDMAP Terminate with DDP-SSN 0.
fn check_transmit(t: Transmit, message: &[u8]) {
    match t.ppid {
        ddp_session::PPID_SESSION_CONTROL => {
            let packet = ddp_session::Packet::new_checked(message).expect("a checked message");
            let repr = ddp_session::Repr::parse(&packet).expect("a valid message");
            assert!(
                repr.function != ddp_session::FunctionCode::Terminate
                    || repr.private_data.is_empty()
            );
            assert_eq!(repr.buffer_len(), message.len());
        }
        ddp_session::PPID_DDP_SEGMENT => {
            let (ssn, segment) = rnic_engine::sctp::split(message).expect("a DDP-SSN");
            // RFC 5043 §6.1: the first DDP segment of a direction is 0.
            assert_eq!(ssn, 0);
            let packet = ddp::Packet::new_checked(segment).expect("a DDP segment");
            let repr = rdmap::Repr::parse(&packet).expect("an RDMAP message");
            assert!(
                matches!(repr.header, rdmap::Header::Terminate(_)),
                "{repr:?}"
            );
        }
        other => panic!("PPID {other} sent"),
    }
}

/// `wire::ddp_session` on an arbitrary message: the checked view and the
/// Repr agree, and the Repr round-trips.
fn check_wire(message: &[u8]) {
    let Ok(packet) = ddp_session::Packet::new_checked(message) else {
        assert!(ddp_session::Repr::parse(&ddp_session::Packet::new_unchecked(message)).is_err());
        return;
    };
    let repr = ddp_session::Repr::parse(&packet).expect("a checked message parses");
    assert_eq!(repr.buffer_len(), message.len());
    let _ = repr.to_string();
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ddp_session::Packet::new_unchecked(&mut out[..]));
    assert_eq!(out, message);
    let again = ddp_session::Repr::parse(&ddp_session::Packet::new_checked(&out[..]).unwrap());
    assert_eq!(again, Ok(repr));
}

/// Rejected and Failed are final; Established may only fail afterwards.
fn check_outcome(before: &mut Option<Outcome>, now: Option<&Outcome>) {
    match (&*before, now) {
        (None, _) => {}
        (Some(Outcome::Established(_)), Some(Outcome::Established(_) | Outcome::Failed(_))) => {}
        (Some(b), Some(n)) if matches!(b, Outcome::Rejected(_) | Outcome::Failed(_)) => {
            assert_eq!(b, n, "a final outcome changed")
        }
        (b, n) => panic!("outcome {b:?} became {n:?}"),
    }
    if let (Some(Outcome::Established(b)), Some(Outcome::Established(n))) = (&*before, now) {
        assert_eq!(b, n, "an established session changed its values");
    }
    *before = now.cloned();
}

fuzz_target!(|data: &[u8]| {
    let Some((h, mut rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let header = Header::parse(h);
    let mut now = Instant::ZERO;
    let mut init = Initiator::new(header.initiator, b"hello", now).ok();
    let mut resp = Responder::new(header.responder, now).ok();
    let (mut to_resp, mut to_init) = (Wire::default(), Wire::default());
    let (mut init_outcome, mut resp_outcome) = (None, None);
    let mut ops = 0;
    while let Some(op) = next_op(&mut rest) {
        ops += 1;
        if ops > 256 {
            break;
        }
        match op {
            Op::Message { to, ppid, octets } => {
                if ppid == ddp_session::PPID_SESSION_CONTROL {
                    check_wire(octets);
                }
                if let (Some(init), 0 | 1) = (init.as_mut(), to) {
                    init.handle_message(now, ppid, octets);
                }
                if let (Some(resp), 0 | 2) = (resp.as_mut(), to) {
                    resp.handle_message(now, ppid, octets);
                }
            }
            Op::Wait(steps) => {
                now += Duration::from_millis(100 * steps);
                if let Some(init) = init.as_mut() {
                    init.handle_timeout(now);
                }
                if let Some(resp) = resp.as_mut() {
                    resp.handle_timeout(now);
                }
            }
            Op::Deliver {
                to_initiator,
                count,
            } => {
                for _ in 0..count {
                    if to_initiator {
                        let (Some(init), Some((ppid, m))) =
                            (init.as_mut(), to_init.queue.pop_front())
                        else {
                            break;
                        };
                        init.handle_message(now, ppid, &m);
                    } else {
                        let (Some(resp), Some((ppid, m))) =
                            (resp.as_mut(), to_resp.queue.pop_front())
                        else {
                            break;
                        };
                        resp.handle_message(now, ppid, &m);
                    }
                }
            }
            Op::Decide(choice) => {
                if let Some(resp) = resp.as_mut() {
                    let had_request = resp.request().is_some();
                    let result = match choice {
                        0 => resp.accept(&header.accept),
                        1 => resp.reject(b"no"),
                        2 => {
                            resp.reject_non_ulp();
                            Ok(())
                        }
                        3 => {
                            resp.fail_local();
                            Ok(())
                        }
                        _ => {
                            resp.terminate();
                            Ok(())
                        }
                    };
                    // The ULP's values are valid: only a missing request
                    // makes a decision fail.
                    assert_eq!(result.is_ok(), had_request || choice >= 2, "{result:?}");
                }
            }
            Op::Initiator(what) => {
                if let Some(init) = init.as_mut() {
                    match what % 3 {
                        0 => init.handle_acked(),
                        1 => init.fail_local(),
                        _ => init.terminate(),
                    }
                }
            }
            Op::Drain => {
                if let Some(init) = init.as_mut() {
                    to_resp.drain(|buf| init.poll_transmit(buf));
                }
                if let Some(resp) = resp.as_mut() {
                    to_init.drain(|buf| resp.poll_transmit(buf));
                }
            }
        }
        if let Some(init) = init.as_ref() {
            check_outcome(&mut init_outcome, init.outcome());
        }
        if let Some(resp) = resp.as_ref() {
            check_outcome(&mut resp_outcome, resp.outcome());
        }
    }
    // In the end: every outbox drains within its bound, and after the
    // timeout neither machine is still opening (RFC 5043 §6: the active
    // side gives up; the passive side holds at most the ULP's request).
    now += Duration::from_secs(24 * 3600 + 1);
    if let Some(mut init) = init {
        init.handle_timeout(now);
        check_outcome(&mut init_outcome, init.outcome());
        assert!(init.outcome().is_some());
        to_resp.drain(|buf| init.poll_transmit(buf));
    }
    if let Some(mut resp) = resp {
        resp.handle_timeout(now);
        check_outcome(&mut resp_outcome, resp.outcome());
        assert!(resp.outcome().is_some());
        assert!(resp.request().is_none());
        to_init.drain(|buf| resp.poll_transmit(buf));
    }
});
