//! The Terminate header (RFC 5040 §4.8) in both control-word layouts:
//! RFC 5040's and Linux siw's little-endian bitfield.
//!
//! Asserts: `detect` never fails on a checked view and its `ambiguous` flag
//! is only set when the two readings differ; the control word round-trips
//! in both layouts; for each encoding that parses, every octet is accounted
//! for (`buffer_len == input`), `emit(parse(b)) == b` and
//! `parse(emit(r)) == r`; re-encoding a parsed header in the other layout
//! reads back the same fields; Display does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::term::{self, ControlWord, Encoding, Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = Packet::new_checked(data) else {
        assert!(data.len() < term::CONTROL_LEN);
        return;
    };
    let octets = packet.control_octets();
    let detection = term::detect(&packet).expect("detect works on a checked view");
    let differ = packet.control(Encoding::Rfc5040) != packet.control(Encoding::SiwBitfield);
    assert!(
        !detection.ambiguous || differ,
        "ambiguous but both layouts read the same"
    );

    for encoding in [Encoding::Rfc5040, Encoding::SiwBitfield] {
        let word = ControlWord::decode(octets, encoding);
        assert_eq!(
            word.encode(encoding),
            octets,
            "control word round-trips ({encoding:?})"
        );
        let _ = word.describe();

        let Ok(repr) = Repr::parse(&packet, encoding) else {
            continue;
        };
        assert_eq!(repr.encoding, encoding);
        assert_eq!(repr.control(), word);
        assert_eq!(
            repr.buffer_len(),
            data.len(),
            "the header bits account for every octet"
        );
        if !(word.m || word.d) {
            assert_eq!(
                repr.ddp_segment_length, 0,
                "absent segment length reads as 0"
            );
        }
        let _ = repr.to_string();

        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], data, "emit(parse(b)) == b ({encoding:?})");
        let again = Repr::parse(&Packet::new_checked(&out[..]).unwrap(), encoding).unwrap();
        assert_eq!(again, repr, "parse(emit(r)) == r");

        // The same fields written in the other layout read back the same.
        let other = match encoding {
            Encoding::Rfc5040 => Encoding::SiwBitfield,
            Encoding::SiwBitfield => Encoding::Rfc5040,
        };
        let moved = Repr {
            encoding: other,
            ..repr
        };
        let mut out = vec![0u8; moved.buffer_len()];
        moved.emit(&mut Packet::new_unchecked(&mut out[..]));
        let back = Repr::parse(&Packet::new_checked(&out[..]).unwrap(), other)
            .expect("a header re-encoded in the other layout parses");
        assert_eq!(back, moved);
    }
});
