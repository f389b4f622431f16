//! The MPA deframer (`rnic_engine::mpa::rx::Deframer`) on arbitrary octets.
//!
//! Input: octet 0 picks CRC (bit 0) and markers (bit 1); octets 1-2 the
//! largest ULPDU accepted; octet 3 seeds how the rest is cut into pieces.
//!
//! Asserts: no panic; every ULPDU yielded is at most the limit; STYLE.md §6
//! "split everywhere": the stream fed whole, fed in the seeded pieces and
//! fed one octet at a time yields the same ULPDUs and stops at the same
//! error; after an error nothing more is yielded; the position counts every
//! octet consumed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::mpa::rx::{Deframer, MpaError, Poll, RxConfig};

/// What a feeding produced: the ULPDUs, the error, octets consumed.
fn run(config: RxConfig, pieces: &[&[u8]]) -> (Vec<Vec<u8>>, Option<MpaError>, u64) {
    let mut deframer = Deframer::new(config);
    let mut out = Vec::new();
    let mut consumed = 0u64;
    for piece in pieces {
        let mut rest = *piece;
        loop {
            let (used, poll) = deframer.poll(rest);
            rest = &rest[used..];
            consumed += used as u64;
            match poll {
                Poll::Ulpdu(u) => {
                    assert!(u.len() <= config.ulpdu_max.min(65535));
                    out.push(u.to_vec());
                }
                Poll::NeedMore => {
                    assert!(rest.is_empty(), "NeedMore with input left");
                    break;
                }
                Poll::Error(e) => {
                    assert_eq!(deframer.poll(rest).1, Poll::Error(e), "errors stick");
                    assert_eq!(deframer.position(), consumed);
                    return (out, Some(e), consumed);
                }
            }
        }
    }
    assert_eq!(deframer.position(), consumed);
    (out, None, consumed)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let config = RxConfig {
        crc: data[0] & 1 != 0,
        markers: data[0] & 2 != 0,
        ulpdu_max: usize::from(u16::from_be_bytes([data[1], data[2]])),
    };
    let mut seed = u32::from(data[3]) | 1;
    let stream = &data[4..];
    let mut pieces = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let n = (seed % 700 + 1) as usize;
        let (a, b) = rest.split_at(n.min(rest.len()));
        pieces.push(a);
        rest = b;
    }
    let whole = run(config, &[stream]);
    let cut = run(config, &pieces);
    let singles: Vec<&[u8]> = stream.chunks(1).collect();
    let dribbled = run(config, &singles);
    assert_eq!((&whole.0, whole.1), (&cut.0, cut.1), "whole vs pieces");
    assert_eq!(
        (&whole.0, whole.1),
        (&dribbled.0, dribbled.1),
        "whole vs one octet at a time"
    );
});
