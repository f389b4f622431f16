//! The marker-free FPDU (RFC 5044 §4): ULPDU_Length | ULPDU | PAD | CRC.
//!
//! Asserts: `check_len` agrees with `total_len`; `total_len <= input`, is a
//! multiple of 4, and the ULPDU/PAD/CRC slices add up to it; parsing with
//! CRC off never fails on a checked view, and with CRC on always passes
//! under `cfg(fuzzing)`; `emit(parse(b)) == b[..total_len]` whenever the
//! PAD is zero and the CRC field is what emit writes (the true CRC32c with
//! CRC on, zero with CRC off); `parse(emit(r)) == r` and the emitted CRC
//! verifies; `pretty::Ulpdu` on the ULPDU does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::mpa::crc;
use rnic_engine::wire::mpa_fpdu::{self, Packet, Repr, CRC_LEN, HEADER_LEN};
use rnic_engine::wire::pretty::Ulpdu;

fuzz_target!(|data: &[u8]| {
    let packet = match Packet::new_checked(data) {
        Ok(packet) => packet,
        Err(_) => {
            if data.len() >= HEADER_LEN {
                let ulpdu_len = usize::from(u16::from_be_bytes([data[0], data[1]]));
                assert!(
                    data.len() < mpa_fpdu::fpdu_len(ulpdu_len),
                    "check_len rejected an FPDU that fits"
                );
            }
            return;
        }
    };
    let total = packet.total_len();
    assert!(
        total <= data.len(),
        "total_len {total} > input {}",
        data.len()
    );
    assert_eq!(total % 4, 0);
    assert!(total >= mpa_fpdu::FPDU_LEN_MIN);
    assert_eq!(
        total,
        mpa_fpdu::fpdu_len(usize::from(packet.ulpdu_length()))
    );
    assert_eq!(
        HEADER_LEN + packet.ulpdu().len() + packet.pad().len() + CRC_LEN,
        total
    );
    assert!(packet.pad_len() < 4);
    assert_eq!(packet.covered().len(), total - CRC_LEN);
    assert_eq!(
        packet.crc_field(),
        [
            data[total - 4],
            data[total - 3],
            data[total - 2],
            data[total - 1]
        ]
    );
    let real_crc_ok = packet.crc() == packet.compute_crc();
    assert!(
        packet.verify_crc(),
        "verify_crc is always true under cfg(fuzzing)"
    );

    let repr = Repr::parse(&packet, false).expect("CRC off: a checked FPDU parses");
    assert_eq!(repr.ulpdu, packet.ulpdu());
    assert_eq!(
        Repr::parse(&packet, true),
        Ok(repr),
        "CRC on passes under cfg(fuzzing)"
    );
    assert_eq!(repr.buffer_len(), total);
    let _ = Ulpdu(repr.ulpdu).to_string();

    let pad_zero = packet.pad().iter().all(|&b| b == 0);
    for with_crc in [true, false] {
        let mut out = vec![0xA5u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]), with_crc);
        let emitted = Packet::new_checked(&out[..]).expect("emitted FPDU fits");
        assert_eq!(emitted.total_len(), out.len());
        assert!(emitted.pad().iter().all(|&b| b == 0), "emit zeroes the PAD");
        if with_crc {
            assert_eq!(
                emitted.crc(),
                crc::crc32c(emitted.covered()),
                "emit writes the true CRC"
            );
        } else {
            assert_eq!(emitted.crc_field(), [0; 4], "no CRC: emit writes zeros");
        }
        assert_eq!(
            Repr::parse(&emitted, with_crc),
            Ok(repr),
            "parse(emit(r)) == r"
        );
        let crc_as_emitted = if with_crc {
            real_crc_ok
        } else {
            packet.crc_field() == [0; 4]
        };
        if pad_zero && crc_as_emitted {
            assert_eq!(&out[..], &data[..total], "emit(parse(b)) == b");
        }
    }
});
