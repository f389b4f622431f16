//! MPA markers (RFC 5044 §4): `stream_len`, `Pieces` and the marker view.
//!
//! Input: 8 octets of start position, 4 of FPDU length, the rest stream
//! octets. The start is moved out of any marker (an FPDU cannot start inside
//! one) and kept below 2^48 (a stream offset, not a sequence number).
//!
//! Asserts: walking `Pieces` over `stream_len(start, len)` octets yields
//! exactly `len` data octets, whole markers only at multiples of 512, and
//! ends where an FPDU may start; `stream_len` is `len` plus 4 per marker
//! position in the extent; walking any octets reproduces them in order with
//! markers exactly at multiples of 512 and `position()` at the end; every
//! whole marker round-trips through `Repr`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::mpa_marker::{
    is_fpdu_start, is_marker_at, stream_len, Packet, Piece, Pieces, Repr, MARKER_INTERVAL,
    MARKER_LEN,
};

/// Longest FPDU length tried: a 64 KiB ULPDU plus header, PAD and CRC, and
/// some more.
const LEN_MAX: u32 = 1 << 17;
const START_MASK: u64 = (1 << 48) - 1;

fuzz_target!(|data: &[u8]| {
    if data.len() < 12 {
        return;
    }
    let mut start = u64::from_be_bytes(data[..8].try_into().unwrap()) & START_MASK;
    let len = (u32::from_be_bytes(data[8..12].try_into().unwrap()) % LEN_MAX) as usize;
    let octets = &data[12..];
    if !is_fpdu_start(start) {
        start += MARKER_LEN as u64 - start % MARKER_INTERVAL;
    }
    assert!(is_fpdu_start(start));

    // stream_len against a walk of that many octets.
    let wire = stream_len(start, len);
    assert!(wire >= len);
    let end = start + wire as u64;
    let markers_inside = (end.div_ceil(MARKER_INTERVAL) - start.div_ceil(MARKER_INTERVAL)) as usize;
    assert_eq!(
        wire,
        len + MARKER_LEN * markers_inside,
        "stream_len counts each marker once"
    );
    let zeros = vec![0u8; wire];
    let mut data_octets = 0;
    let mut last = None;
    for piece in Pieces::new(start, &zeros) {
        match piece {
            Piece::Data(d) => {
                assert!(!d.is_empty());
                data_octets += d.len();
            }
            Piece::Marker { position, octets } => {
                assert!(is_marker_at(position));
                assert_eq!(
                    octets.len(),
                    MARKER_LEN,
                    "an FPDU never ends inside a marker"
                );
            }
        }
        last = Some(piece);
    }
    assert_eq!(
        data_octets, len,
        "the data pieces of stream_len octets are the FPDU"
    );
    if len > 0 {
        assert!(
            matches!(last, Some(Piece::Data(_))),
            "an FPDU ends on a data octet"
        );
    }
    assert!(
        is_fpdu_start(start + wire as u64),
        "the next FPDU may start right after"
    );

    // Any octets: the walk is a partition of them.
    let mut walk = Pieces::new(start, octets);
    let mut rebuilt = Vec::with_capacity(octets.len());
    let mut position = start;
    for piece in walk.by_ref() {
        match piece {
            Piece::Data(d) => {
                assert!(!d.is_empty());
                let phase = position % MARKER_INTERVAL;
                assert!(
                    phase >= MARKER_LEN as u64 && phase + d.len() as u64 <= MARKER_INTERVAL,
                    "a data run lies between two markers"
                );
                rebuilt.extend_from_slice(d);
                position += d.len() as u64;
            }
            Piece::Marker {
                position: at,
                octets: m,
            } => {
                assert_eq!(at, position);
                assert!(is_marker_at(at));
                assert!(!m.is_empty() && m.len() <= MARKER_LEN);
                if let Ok(packet) = Packet::new_checked(m) {
                    let repr = Repr::parse(&packet).unwrap();
                    let mut out = [0u8; MARKER_LEN];
                    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
                    assert_eq!(&out[..], m, "marker round-trips");
                    let _ = repr.to_string();
                } else {
                    assert_eq!(
                        rebuilt.len() + m.len(),
                        octets.len(),
                        "only the last marker is cut"
                    );
                }
                rebuilt.extend_from_slice(m);
                position += m.len() as u64;
            }
        }
    }
    assert_eq!(rebuilt, octets);
    assert_eq!(walk.position(), start + octets.len() as u64);
});
