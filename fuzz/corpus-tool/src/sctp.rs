//! Seeds of the DDP-over-SCTP targets, `session_control` and
//! `sctp_datagram`, in those targets' input formats (see their module docs).
//! No capture has DDP over SCTP, so the messages are made with
//! `wire::ddp_session` and the datagrams come from two `sctp_lite`
//! endpoints associated in memory.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use rnic_engine::wire::ddp_session::{FunctionCode, Packet, Repr};
use rnic_engine::wire::mpa_rr::EnhancedRepr;
use sctp_lite::{Config, Duration, Endpoint, EventKind, Instant};

use crate::Writer;

/// A PPID 17 message.
fn control(function: FunctionCode, enhanced: Option<EnhancedRepr>, private_data: &[u8]) -> Vec<u8> {
    let repr = Repr {
        ssn: 0,
        function,
        enhanced,
        private_data,
    };
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    out
}

/// A `session_control` record carrying `message` with PPID 17 to `to`
/// (0 both machines, 1 the initiator, 2 the responder).
fn record(to: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![to << 3];
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// `session_control`'s ops (see the target): drain both outboxes, deliver
/// one message to the responder or the initiator, the responder's ULP
/// accepts, the initiator terminates.
const DRAIN: u8 = 0x07;
const TO_RESPONDER: u8 = 0x14;
const TO_INITIATOR: u8 = 0x1C;
const ACCEPT: u8 = 0x05;
const INITIATOR_TERMINATES: u8 = 0x16;

pub(crate) fn session_seeds(w: &mut Writer) -> io::Result<()> {
    let word = EnhancedRepr {
        ird: 16,
        ord: 16,
        ..EnhancedRepr::default()
    };
    // Header octet 0: bit 0 a plain initiator, bit 1 a plain responder.
    let seeds: [(&str, u8, Vec<u8>, &[u8]); 6] = [
        (
            "enhanced-initiate",
            0,
            record(
                2,
                &control(FunctionCode::EnhancedInitiate, Some(word), b"hi"),
            ),
            &[ACCEPT, DRAIN, TO_INITIATOR],
        ),
        (
            "enhanced-accept",
            0,
            record(1, &control(FunctionCode::EnhancedAccept, Some(word), b"ok")),
            &[DRAIN],
        ),
        (
            "accept",
            1,
            record(1, &control(FunctionCode::Accept, None, b"ok")),
            &[DRAIN],
        ),
        (
            "reject",
            0,
            record(1, &control(FunctionCode::Reject, None, b"no")),
            &[DRAIN],
        ),
        (
            "terminate",
            0,
            record(0, &control(FunctionCode::Terminate, None, b"")),
            &[DRAIN],
        ),
        (
            "initiate",
            2,
            record(2, &control(FunctionCode::Initiate, None, b"hi")),
            &[ACCEPT, DRAIN],
        ),
    ];
    for (name, flags, first, ops) in seeds {
        let mut input = vec![flags, 0, 0, 0, 0, 0, 0, 0];
        input.extend_from_slice(&first);
        input.extend_from_slice(ops);
        w.put("session_control", &format!("synthetic-{name}"), &input)?;
    }
    // The two machines alone: Initiate, Accept, Terminate.
    let mut pair = vec![0u8; 8];
    pair.extend_from_slice(&[
        DRAIN,
        TO_RESPONDER,
        ACCEPT,
        DRAIN,
        TO_INITIATOR,
        INITIATOR_TERMINATES,
        DRAIN,
        TO_RESPONDER,
    ]);
    w.put("session_control", "synthetic-pair", &pair)
}

/// The datagrams of an association between two endpoints at 10.0.0.1 and
/// .2 (A connects): the handshake (INIT and INIT ACK with adaptation code
/// point 1, COOKIE ECHO, COOKIE ACK), then a PPID 17 message from A and a
/// PPID 16 message from B with their SACKs (and whatever heartbeats the
/// 3.2 s of virtual time bring). Each with whether A sent it.
fn association() -> Vec<(bool, Vec<u8>)> {
    let addr = |host| SocketAddr::from((Ipv4Addr::new(10, 0, 0, host), 9899));
    #[allow(clippy::disallowed_methods)]
    // Only the origin of sctp-proto's time.
    let epoch = std::time::Instant::now();
    let config = Config {
        streams: 4,
        ..Config::default()
    };
    let mut a = Endpoint::new(config.clone(), epoch).expect("config");
    let mut b = Endpoint::new(config, epoch).expect("config");
    let mut now = Instant::ZERO;
    let assoc_a = a.connect(now, addr(2)).expect("connect");
    let mut assoc_b = None;
    let mut sent = (false, false);
    let mut log = Vec::new();
    let mut buf = vec![0u8; 65_536];
    for _ in 0..32 {
        // 100 ms a round: the delayed SACKs (RFC 9260 §6.2, 200 ms) go too.
        now += Duration::from_millis(100);
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(t) = a.poll_transmit(now, &mut buf) {
            log.push((true, buf[..t.len].to_vec()));
            b.handle_datagram(now, addr(1), &buf[..t.len]);
        }
        while let Some(t) = b.poll_transmit(now, &mut buf) {
            log.push((false, buf[..t.len].to_vec()));
            a.handle_datagram(now, addr(2), &buf[..t.len]);
        }
        while let Some(e) = b.poll_event() {
            if matches!(e.kind, EventKind::Up { .. }) {
                assoc_b = Some(e.assoc);
            }
        }
        while a.recv(&mut buf).is_some() || b.recv(&mut buf).is_some() {}
        if a.is_up(assoc_a) && !sent.0 {
            a.send(assoc_a, 0, 17, true, &[0, 0, 0, 5, 0, 16, 0, 16])
                .expect("send");
            sent.0 = true;
        }
        if let (Some(assoc), false) = (assoc_b, sent.1) {
            b.send(assoc, 0, 16, true, &[0x55; 64]).expect("send");
            sent.1 = true;
        }
    }
    log
}

/// `sctp_datagram`'s records: deliver one of A's or B's datagrams, inject
/// a raw one (with its CRC32c as captured).
const DELIVER_A: u8 = 0x00;
const DELIVER_B: u8 = 0x08;

fn inject(how: u8, datagram: &[u8]) -> Vec<u8> {
    let mut out = vec![0x04, how];
    out.extend_from_slice(&(datagram.len() as u16).to_be_bytes());
    out.extend_from_slice(datagram);
    out
}

pub(crate) fn datagram_seeds(w: &mut Writer) -> io::Result<()> {
    let log = association();
    // A clean association: deliver everything in turn.
    let mut clean = vec![0u8, 0];
    for _ in 0..8 {
        clean.extend_from_slice(&[DELIVER_A, DELIVER_B]);
    }
    // Then a message each way: A sends PPID 17, B PPID 16 (`send` records).
    clean.extend_from_slice(&[0x06, 0, 1, 0, 8, 0x0E, 0, 0, 0, 64]);
    for _ in 0..4 {
        clean.extend_from_slice(&[DELIVER_A, DELIVER_B]);
    }
    w.put("sctp_datagram", "synthetic-clean", &clean)?;
    for (i, (from_a, datagram)) in log.iter().enumerate() {
        // A's datagrams go to B, B's to A, as if from the peer.
        let to_b = u8::from(*from_a);
        let name = format!(
            "{}-{}",
            if *from_a { "a" } else { "b" },
            chunk_names(datagram)
        );
        let mut seed = vec![0u8, 0];
        seed.extend_from_slice(&inject(to_b, datagram));
        w.put("sctp_datagram", &format!("synthetic-{i}-{name}"), &seed)?;
        if i == 0 {
            // A's INIT from strangers 10.0.0.11 and .12: B's second and
            // third association; with associations_max 1 (header bits 4-5
            // zero) both are aborted.
            let mut seed = vec![0u8, 0];
            seed.extend_from_slice(&inject(1 | 2, datagram));
            seed.extend_from_slice(&inject(1 | 4, datagram));
            seed.extend_from_slice(&[DELIVER_A, DELIVER_B, DELIVER_A, DELIVER_B]);
            w.put("sctp_datagram", "synthetic-init-from-strangers", &seed)?;
        }
    }
    Ok(())
}

/// The chunk types of an SCTP packet (RFC 9260 §3.2), e.g. `init` or
/// `data-sack`.
fn chunk_names(packet: &[u8]) -> String {
    let mut names = Vec::new();
    let mut at = 12;
    while let Some(&[kind, _, hi, lo]) = packet
        .get(at..at + 4)
        .map(|c| <&[u8; 4]>::try_from(c).unwrap())
    {
        names.push(match kind {
            0 => "data",
            1 => "init",
            2 => "init-ack",
            3 => "sack",
            6 => "abort",
            10 => "cookie-echo",
            11 => "cookie-ack",
            _ => "chunk",
        });
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        if len < 4 {
            break;
        }
        at += len.next_multiple_of(4);
    }
    names.join("-")
}
