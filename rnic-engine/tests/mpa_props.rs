//! Framer and deframer properties: random ULPDU sequences survive transmit
//! and receive in any segmentation, with markers and CRC on or off; every
//! FPDU fits the EMSS; the deframer never panics, whatever it is fed.

use proptest::collection::vec;
use proptest::prelude::*;
use rnic_engine::mpa::rx::{Deframer, MpaError, Poll, RxConfig};
use rnic_engine::mpa::tx::{Framer, TxConfig, EMSS_MIN};
use rnic_engine::wire::mpa_marker;

fn deframe(deframer: &mut Deframer, pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, MpaError> {
    let mut out = Vec::new();
    for piece in pieces {
        let mut rest = *piece;
        loop {
            let (used, poll) = deframer.poll(rest);
            rest = &rest[used..];
            match poll {
                Poll::Ulpdu(u) => out.push(u.to_vec()),
                Poll::NeedMore => break,
                Poll::Error(e) => return Err(e),
            }
        }
    }
    Ok(out)
}

/// Splits `bytes` at the given sizes (cycled), the way TCP might deliver it.
fn split<'a>(bytes: &'a [u8], sizes: &[usize]) -> Vec<&'a [u8]> {
    let mut pieces = Vec::new();
    let mut rest = bytes;
    let mut i = 0;
    while !rest.is_empty() {
        let n = sizes
            .get(i % sizes.len().max(1))
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        pieces.push(&rest[..n]);
        rest = &rest[n..];
        i += 1;
    }
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn transmit_then_receive_is_identity(
        crc in any::<bool>(),
        markers in any::<bool>(),
        emss in EMSS_MIN..9000usize,
        lens in vec(0usize..9000, 1..24),
        sizes in vec(1usize..3000, 1..8),
        seed in any::<u8>(),
    ) {
        let mut framer = Framer::new(TxConfig { crc, markers, emss }).unwrap();
        let ulpdus: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(i, n)| (0..*n.min(&framer.mulpdu())).map(|k| (k as u8) ^ (i as u8) ^ seed).collect())
            .collect();
        let mut wire = Vec::new();
        let mut segment = vec![0u8; emss];
        for u in &ulpdus {
            // Header and payload as two pieces, the way the engine passes them.
            let cut = u.len().min(14);
            let expected = framer.wire_len(u.len());
            prop_assert!(expected <= emss, "an FPDU of MULPDU or less fits the EMSS");
            let written = framer.frame(&[&u[..cut], &u[cut..]], &mut segment).unwrap();
            prop_assert_eq!(written, expected);
            prop_assert_eq!(framer.position() % 4, 0);
            wire.extend_from_slice(&segment[..written]);
        }
        prop_assert_eq!(framer.position(), wire.len() as u64);
        if markers {
            let count = (0..wire.len() as u64).filter(|p| mpa_marker::is_marker_at(*p)).count();
            prop_assert!(count >= 1);
        }
        let mut deframer = Deframer::new(RxConfig { crc, markers, ulpdu_max: 65535 });
        let got = deframe(&mut deframer, &split(&wire, &sizes)).unwrap();
        prop_assert_eq!(got, ulpdus);
    }

    #[test]
    fn a_flipped_bit_is_caught_when_crc_is_on(
        markers in any::<bool>(),
        lens in vec(0usize..2000, 1..6),
        at in any::<prop::sample::Index>(),
        bit in 0..8u8,
    ) {
        let mut framer = Framer::new(TxConfig { crc: true, markers, emss: 9000 }).unwrap();
        let mut wire = vec![0u8; 64 * 1024];
        let mut len = 0;
        for n in &lens {
            len += framer.frame(&[&vec![0x5a; *n]], &mut wire[len..]).unwrap();
        }
        wire.truncate(len);
        let i = at.index(wire.len());
        wire[i] ^= 1 << bit;
        let mut deframer = Deframer::new(RxConfig { crc: true, markers, ulpdu_max: 65535 });
        let mut yielded = Vec::new();
        let mut rest = &wire[..];
        loop {
            let (used, poll) = deframer.poll(rest);
            rest = &rest[used..];
            let Poll::Ulpdu(u) = poll else { break };
            yielded.push(u.len());
        }
        // The damaged FPDU is never yielded: what comes out is a prefix of
        // what went in, shorter by at least that FPDU. (A flip in a length
        // field may leave the deframer waiting for octets that never come,
        // or be a framing error; in a marker, a marker error.)
        prop_assert!(yielded.len() < lens.len(), "flip at {i} accepted");
        prop_assert_eq!(&yielded[..], &lens[..yielded.len()]);
    }

    #[test]
    fn segments_hold_whole_fpdus(
        crc in any::<bool>(),
        markers in any::<bool>(),
        emss in EMSS_MIN..9000usize,
        lens in vec(0usize..9000, 1..40),
    ) {
        // Pack FPDUs into EMSS-sized segments the way a sender should: as
        // many whole FPDUs as fit, never one across two segments.
        let mut framer = Framer::new(TxConfig { crc, markers, emss }).unwrap();
        let lens: Vec<usize> = lens.iter().map(|n| n % (framer.mulpdu() + 1)).collect();
        let mut segments: Vec<Vec<u8>> = Vec::new();
        let mut segment = vec![0u8; emss];
        let mut used = 0;
        for n in &lens {
            if framer.wire_len(*n) > emss - used {
                segments.push(segment[..used].to_vec());
                used = 0;
            }
            used += framer.frame(&[&vec![1u8; *n]], &mut segment[used..]).unwrap();
        }
        segments.push(segment[..used].to_vec());
        let mut deframer = Deframer::new(RxConfig { crc, markers, ulpdu_max: 65535 });
        let mut got = Vec::new();
        for s in &segments {
            prop_assert!(s.len() <= emss);
            got.extend(deframe(&mut deframer, &[s]).unwrap().iter().map(Vec::len));
            prop_assert_eq!(deframer.pending(), 0, "a segment ends on an FPDU boundary");
        }
        prop_assert_eq!(got, lens);
    }

    #[test]
    fn the_deframer_never_panics(
        crc in any::<bool>(),
        markers in any::<bool>(),
        ulpdu_max in 0usize..70_000,
        bytes in vec(any::<u8>(), 0..4000),
        sizes in vec(1usize..600, 1..6),
    ) {
        let mut deframer = Deframer::new(RxConfig { crc, markers, ulpdu_max });
        let before = deframer.position();
        let result = deframe(&mut deframer, &split(&bytes, &sizes));
        prop_assert!(deframer.position() >= before);
        if let Ok(ulpdus) = result {
            prop_assert!(ulpdus.iter().all(|u| u.len() <= ulpdu_max));
        }
    }
}
