//! One ULPDU read as a DDP segment (RFC 5041) carrying an RDMAP message
//! (RFC 5040, RFC 7306), with each of the three Terminate readings.
//!
//! Asserts: the DDP header round-trips on its own; `rdmap::Repr::parse_with`
//! accepts or rejects exactly as the `rdmap` module documents (unknown
//! opcodes always parse; a known opcode with the wrong buffer model never
//! does; fixed-size RDMAP headers must fill the segment exactly; a Terminate
//! parses iff `term::Repr::parse` does in the chosen encoding); `Detect`
//! behaves as `Fixed(term::detect(..).encoding)`; whenever it parses,
//! `emit(parse(b)) == b` and `parse(emit(r)) == r`; `pretty::Ulpdu` never
//! panics and agrees with the message's own Display.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::pretty::Ulpdu;
use rnic_engine::wire::rdmap::{self, HeaderKind, TermReading};
use rnic_engine::wire::{atomic, ddp, term};

fuzz_target!(|data: &[u8]| {
    let rendered = Ulpdu(data).to_string();
    let packet = match ddp::Packet::new_checked(data) {
        Ok(packet) => packet,
        Err(_) => {
            if data.len() >= ddp::CONTROL_LEN {
                let need = if data[0] & 0x80 != 0 {
                    ddp::TAGGED_HEADER_LEN
                } else {
                    ddp::UNTAGGED_HEADER_LEN
                };
                assert!(data.len() < need, "check_len rejected a header that fits");
            }
            return;
        }
    };
    let header_len = packet.header_len();
    assert_eq!(packet.payload().len(), data.len() - header_len);
    let ddp_repr = ddp::Repr::parse(&packet).expect("a checked DDP view parses");
    assert_eq!(ddp_repr.header_len(), header_len);
    assert_eq!(ddp_repr.control(), packet.control());
    let mut header = vec![0u8; header_len];
    ddp_repr.emit(&mut ddp::Packet::new_unchecked(&mut header[..]));
    assert_eq!(&header[..], &data[..header_len], "DDP header round-trips");
    let _ = ddp_repr.to_string();

    let control = rdmap::Control::from_octet(packet.rsvd_ulp());
    assert_eq!(control.to_octet(), packet.rsvd_ulp());
    let info = control.opcode.info();
    let rest = packet.payload();

    let detected = term::Packet::new_checked(rest)
        .ok()
        .map(|p| term::detect(&p).expect("checked"));
    let readings = [
        TermReading::Detect,
        TermReading::Fixed(term::Encoding::Rfc5040),
        TermReading::Fixed(term::Encoding::SiwBitfield),
    ];
    let mut results = Vec::new();
    for reading in readings {
        let parsed = rdmap::Repr::parse_with(&packet, reading);
        // What the module documents about acceptance.
        let expected_ok = match info {
            None => true,
            Some(info) if info.tagged != packet.tagged() => false,
            Some(info) => match info.header {
                HeaderKind::None => true,
                HeaderKind::ReadRequest => rest.len() == rdmap::READ_REQUEST_HEADER_LEN,
                HeaderKind::Immediate => rest.len() == rdmap::IMMEDIATE_DATA_LEN,
                HeaderKind::AtomicRequest => rest.len() == atomic::REQUEST_HEADER_LEN,
                HeaderKind::AtomicResponse => rest.len() == atomic::RESPONSE_HEADER_LEN,
                HeaderKind::Terminate => match term::Packet::new_checked(rest) {
                    Err(_) => false,
                    Ok(p) => {
                        let encoding = match reading {
                            TermReading::Detect => {
                                detected.expect("rest holds a control word").encoding
                            }
                            TermReading::Fixed(e) => e,
                        };
                        term::Repr::parse(&p, encoding).is_ok()
                    }
                },
            },
        };
        assert_eq!(parsed.is_ok(), expected_ok, "{reading:?} on {info:?}");
        results.push(parsed);
        let Ok(repr) = parsed else { continue };

        assert_eq!(repr.ddp, ddp_repr);
        assert_eq!(repr.buffer_len(), data.len());
        if let rdmap::Header::Terminate(t) = repr.header {
            if let TermReading::Fixed(e) = reading {
                assert_eq!(t.encoding, e);
            }
        }
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut ddp::Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], data, "emit(parse(b)) == b ({reading:?})");
        let again = rdmap::Repr::parse_with(&ddp::Packet::new_checked(&out[..]).unwrap(), reading)
            .expect("emitted segment parses");
        assert_eq!(again, repr, "parse(emit(r)) == r");
        let shown = repr.to_string();
        if reading == TermReading::Detect {
            assert_eq!(
                rendered, shown,
                "Ulpdu renders a parsable segment as its Repr"
            );
        }
    }
    // Detect reads a Terminate exactly as the layout detect() picks.
    if let Some(d) = detected {
        if info.is_some_and(|i| i.header == HeaderKind::Terminate) {
            let fixed = match d.encoding {
                term::Encoding::Rfc5040 => results[1],
                term::Encoding::SiwBitfield => results[2],
            };
            assert_eq!(results[0], fixed);
        }
    }
    // Without a Terminate the reading does not matter.
    if !info.is_some_and(|i| i.header == HeaderKind::Terminate) {
        assert_eq!(results[0], results[1]);
        assert_eq!(results[0], results[2]);
    }
});
