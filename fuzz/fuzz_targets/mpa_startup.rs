//! The MPA startup state machines (`control::mpa`) on arbitrary octets and
//! cuts, both roles, with arbitrary configurations and ULP decisions.
//!
//! Asserts: no panic; never more consumed than one frame (532 octets) nor
//! more than given; after the startup timeout each machine has ended (or
//! the responder holds a Request); an established initiator's negotiated
//! values respect RFC 6581 §9.1 against the Reply it read (initiator ORD <=
//! responder IRD, IRD >= responder ORD, where neither is 0x3FFF).
#![no_main]

use control::mpa::{
    Accept, Initiator, Outcome, Responder, RtrSet, StartupConfig, NO_NEGOTIATION, QP_DEPTH_MAX,
};
use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::mpa_rr;
use tcp_lite::{Duration, Instant};

/// The first 19 octets configure both machines and the ULP; the rest is
/// the peer's stream (so seeds are plain frames behind a header).
#[derive(Debug)]
struct Input<'a> {
    revision: bool,
    enhanced: bool,
    crc: bool,
    markers: bool,
    p2p: bool,
    rtr: u8,
    ird: u16,
    ord: u16,
    ird_max: u16,
    reject: bool,
    accept_ird: Option<u16>,
    accept_ord: Option<u16>,
    ord_required: Option<u16>,
    cut: u8,
    octets: &'a [u8],
}

impl<'a> Input<'a> {
    fn parse(data: &'a [u8]) -> Option<Input<'a>> {
        let (h, octets) = data.split_at_checked(19)?;
        let u16_at = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let opt = |flag: u8, i: usize| (h[1] & flag != 0).then(|| u16_at(i));
        Some(Input {
            revision: h[0] & 1 != 0,
            enhanced: h[0] & 2 != 0,
            crc: h[0] & 4 != 0,
            markers: h[0] & 8 != 0,
            p2p: h[0] & 16 != 0,
            reject: h[0] & 32 != 0,
            rtr: h[2],
            ird: u16_at(3),
            ord: u16_at(5),
            ird_max: u16_at(7),
            accept_ird: opt(1, 9),
            accept_ord: opt(2, 11),
            ord_required: opt(4, 13),
            cut: h[15],
            octets,
        })
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = Input::parse(data) else {
        return;
    };
    // Values a QP can hold (at most QP_DEPTH_MAX), or 0x3FFF: others are
    // configuration errors the validation tests cover.
    let clamp = |v: u16| {
        if v == NO_NEGOTIATION {
            v
        } else {
            v % (QP_DEPTH_MAX + 1)
        }
    };
    let ird_max = input.ird_max % (QP_DEPTH_MAX + 1);
    let mut config = StartupConfig {
        revision: if input.revision { 2 } else { 1 },
        enhanced: input.enhanced && input.revision,
        crc: input.crc,
        markers: input.markers,
        peer_to_peer: input.p2p && input.enhanced && input.revision,
        rtr: RtrSet {
            send: input.rtr & 1 != 0,
            write: input.rtr & 2 != 0,
            read: input.rtr & 4 != 0,
        },
        ird: clamp(input.ird).min(ird_max),
        ord: clamp(input.ord),
        ird_max,
        ..StartupConfig::default()
    };
    if config.rtr.is_empty() {
        config.rtr = RtrSet::ALL;
    }
    let cut = usize::from(input.cut).max(1);
    let t0 = Instant::ZERO;

    if let Ok(mut resp) = Responder::new(config.clone(), t0) {
        let mut taken = 0;
        for chunk in input.octets.chunks(cut) {
            let n = resp.handle_input(chunk, t0);
            assert!(n <= chunk.len());
            taken += n;
            if n < chunk.len() {
                break;
            }
        }
        assert!(taken <= 532);
        if resp.request().is_some() {
            let result = if input.reject {
                resp.reject(b"no")
            } else {
                resp.accept(&Accept {
                    ird: input.accept_ird.map(clamp),
                    ord: input.accept_ord.map(clamp),
                    ord_required: input.ord_required.map(clamp),
                    private_data: b"yes".to_vec(),
                    ulp_token: 0,
                })
            };
            assert!(result.is_ok());
            let mut out = [0u8; 2048];
            let n = resp.poll_transmit(&mut out);
            let reply =
                mpa_rr::Repr::parse(&mpa_rr::Packet::new_checked(&out[..n]).expect("a frame"))
                    .expect("valid");
            assert_eq!(reply.kind, mpa_rr::FrameKind::Reply);
            assert!(resp.outcome().is_some());
        } else {
            resp.handle_timeout(t0 + Duration::from_secs(3600));
            assert!(resp.outcome().is_some());
        }
    }

    if let Ok(mut init) = Initiator::new(config.clone(), b"hi", t0) {
        let mut out = [0u8; 1024];
        while init.poll_transmit(&mut out) > 0 {}
        let mut taken = 0;
        for chunk in input.octets.chunks(cut) {
            let n = init.handle_input(chunk, t0);
            assert!(n <= chunk.len());
            taken += n;
            if n < chunk.len() {
                break;
            }
        }
        assert!(taken <= 532);
        if let Some(Outcome::Established(e)) = init.outcome() {
            let reply =
                mpa_rr::Repr::parse(&mpa_rr::Packet::new_checked(&input.octets[..taken]).unwrap())
                    .unwrap();
            if let Some(r) = reply.enhanced {
                if r.ird != NO_NEGOTIATION && e.ord != NO_NEGOTIATION {
                    assert!(e.ord <= r.ird || e.rtr == Some(control::mpa::Rtr::Read) && e.ord == 1);
                }
                if r.ord != NO_NEGOTIATION && e.ird != NO_NEGOTIATION {
                    assert!(e.ird >= r.ord && e.ird <= config.ird_max.max(config.ird));
                }
            }
        }
        init.handle_timeout(t0 + Duration::from_secs(3600));
        assert!(init.outcome().is_some() || init.wants_transmit());
    }
});
