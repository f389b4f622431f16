//! The deframer on real Linux siw traffic: every FPDU stream of every
//! capture in `tests/data/golden/`, fed whole, cut at every octet, and
//! dribbled in random pieces, yields the ULPDUs the capture holds with every
//! CRC checked where the connection negotiated it. And the framer, given
//! those ULPDUs, writes siw's octets back exactly.

use std::path::PathBuf;

use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::wire::{mpa_fpdu, mpa_rr};

/// One direction of one connection: its Full Operation octets and whether
/// the connection negotiated CRC.
struct Stream {
    name: String,
    crc: bool,
    octets: Vec<u8>,
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/golden")
}

/// Reassembles a capture's TCP streams and cuts off the MPA startup frames.
fn streams(name: &str) -> Vec<Stream> {
    let mut raw: std::collections::BTreeMap<(u32, bool), Vec<u8>> = Default::default();
    for s in dpwarp_capture::streams(golden_dir().join(format!("{name}.pcap"))).unwrap() {
        assert_eq!(s.gap_bytes, 0, "{name}: the capture is complete");
        raw.insert((s.conn.0, true), s.client_to_server);
        raw.insert((s.conn.0, false), s.server_to_client);
    }
    let mut out = Vec::new();
    for conn in raw
        .keys()
        .map(|k| k.0)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let (Some(c2s), Some(s2c)) = (raw.get(&(conn, true)), raw.get(&(conn, false))) else {
            continue;
        };
        let req = mpa_rr::Repr::parse(&mpa_rr::Packet::new_checked(&c2s[..]).unwrap()).unwrap();
        let rep = mpa_rr::Repr::parse(&mpa_rr::Packet::new_checked(&s2c[..]).unwrap()).unwrap();
        if rep.reject {
            continue;
        }
        let crc = req.crc || rep.crc;
        out.push(Stream {
            name: format!("{name}#{conn}>"),
            crc,
            octets: c2s[req.buffer_len()..].to_vec(),
        });
        out.push(Stream {
            name: format!("{name}#{conn}<"),
            crc,
            octets: s2c[rep.buffer_len()..].to_vec(),
        });
    }
    out
}

fn all_streams() -> Vec<Stream> {
    let mut names: Vec<String> = std::fs::read_dir(golden_dir())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            (path.extension()? == "pcap")
                .then(|| path.file_stem().unwrap().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 14);
    names.iter().flat_map(|n| streams(n)).collect()
}

/// The ULPDUs by walking the stream with the wire view (no markers in siw).
fn ulpdus_by_view(octets: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = octets;
    while !rest.is_empty() {
        let packet = mpa_fpdu::Packet::new_checked(rest).expect("whole FPDUs");
        out.push(packet.ulpdu().to_vec());
        rest = &rest[packet.total_len()..];
    }
    out
}

fn deframe(crc: bool, pieces: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut deframer = Deframer::new(RxConfig {
        crc,
        markers: false,
        ulpdu_max: 65535,
    });
    let mut out = Vec::new();
    for piece in pieces {
        let mut rest = *piece;
        loop {
            let (used, poll) = deframer.poll(rest);
            rest = &rest[used..];
            match poll {
                Poll::Ulpdu(u) => out.push(u.to_vec()),
                Poll::NeedMore => break,
                Poll::Error(e) => panic!("{e}"),
            }
        }
    }
    assert_eq!(
        deframer.position(),
        pieces.iter().map(|p| p.len() as u64).sum::<u64>()
    );
    out
}

#[test]
fn every_golden_stream_cut_at_every_octet() {
    let streams = all_streams();
    assert!(streams.len() >= 26, "{} streams", streams.len());
    let mut checked = 0usize;
    for stream in &streams {
        let expected = ulpdus_by_view(&stream.octets);
        assert_eq!(
            deframe(stream.crc, &[&stream.octets]),
            expected,
            "{}",
            stream.name
        );
        for cut in 0..=stream.octets.len() {
            let (a, b) = stream.octets.split_at(cut);
            assert_eq!(
                deframe(stream.crc, &[a, b]),
                expected,
                "{} cut at {cut}",
                stream.name
            );
            checked += 1;
        }
    }
    assert!(checked > 40_000, "{checked} cuts");
}

#[test]
fn every_golden_stream_in_random_pieces() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for stream in all_streams() {
        let expected = ulpdus_by_view(&stream.octets);
        for _ in 0..20 {
            let mut pieces = Vec::new();
            let mut rest = &stream.octets[..];
            while !rest.is_empty() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let n = (state % 97 + 1) as usize;
                let (a, b) = rest.split_at(n.min(rest.len()));
                pieces.push(a);
                rest = b;
            }
            assert_eq!(deframe(stream.crc, &pieces), expected, "{}", stream.name);
        }
    }
}

/// siw's PAD is not zero: every padded FPDU in the captures (perftest's
/// 2-octet Sends, twelve in all) carries `00 40` there. RFC 5044 has the
/// sender zero it and the receiver ignore it, so the deframer ignores it
/// and the framer writes zeros.
const SIW_PAD: [u8; 2] = [0x00, 0x40];

#[test]
fn the_framer_writes_siw_octets_back() {
    let mut nonzero_pads = 0;
    for stream in all_streams() {
        let ulpdus = ulpdus_by_view(&stream.octets);
        let mut framer = Framer::new(TxConfig {
            crc: stream.crc,
            markers: false,
            emss: 1448,
        })
        .unwrap();
        let mut out = vec![0u8; stream.octets.len()];
        let mut at = 0;
        for u in &ulpdus {
            let n = framer.frame(&[u], &mut out[at..]).unwrap();
            let (ours, siw) = (&out[at..at + n], &stream.octets[at..at + n]);
            let pad = mpa_fpdu::pad_len(u.len());
            let body = 2 + u.len();
            assert_eq!(&ours[..body], &siw[..body], "{}", stream.name);
            if siw[body..body + pad].iter().all(|&b| b == 0) {
                assert_eq!(ours, siw, "{}: PAD and CRC", stream.name);
            } else {
                assert_eq!(&siw[body..body + pad], &SIW_PAD[..pad], "{}", stream.name);
                assert_eq!(&ours[body..body + pad], &[0, 0][..pad], "{}", stream.name);
                nonzero_pads += 1;
            }
            at += n;
        }
        assert_eq!(at, out.len());
    }
    assert_eq!(nonzero_pads, 12);
}
