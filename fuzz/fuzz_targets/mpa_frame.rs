//! MPA Request/Reply frames (RFC 5044 §7.1, RFC 6581 enhanced data).
//!
//! Asserts: `check_len` agrees with `frame_len`; `Repr::parse` rejects
//! exactly what `mpa_rr` documents (a key that is neither frame's,
//! PD_Length above 512, S=1 with fewer than 4 octets of private data);
//! `emit(parse(b)) == b[..frame_len]` (the frame never reads past itself);
//! `parse(emit(r)) == r`; enhanced data round-trips on its own; Display
//! does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::mpa_rr::{
    self, EnhancedPacket, EnhancedRepr, FrameKind, Packet, Repr, HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    // The enhanced-data view over any four octets.
    if let Ok(packet) = EnhancedPacket::new_checked(data) {
        let repr = EnhancedRepr::parse(&packet).expect("a checked enhanced view parses");
        let mut out = [0u8; mpa_rr::ENHANCED_LEN];
        repr.emit(&mut EnhancedPacket::new_unchecked(&mut out[..]));
        assert_eq!(
            &out[..],
            &data[..mpa_rr::ENHANCED_LEN],
            "every enhanced bit round-trips"
        );
        let _ = repr.to_string();
    } else {
        assert!(data.len() < mpa_rr::ENHANCED_LEN);
    }

    let packet = match Packet::new_checked(data) {
        Ok(packet) => packet,
        Err(_) => {
            if data.len() >= HEADER_LEN {
                let pd = usize::from(u16::from_be_bytes([data[18], data[19]]));
                assert!(
                    data.len() < HEADER_LEN + pd,
                    "check_len rejected a frame that fits"
                );
            }
            return;
        }
    };
    let frame_len = packet.frame_len();
    assert!(frame_len <= data.len());
    assert_eq!(frame_len, HEADER_LEN + usize::from(packet.pd_length()));
    assert_eq!(packet.private_data().len(), usize::from(packet.pd_length()));
    // Every accessor is safe after check_len.
    let _ = (
        packet.key(),
        packet.frame_kind(),
        packet.markers(),
        packet.crc(),
        packet.reject(),
        packet.enhanced(),
        packet.reserved(),
        packet.revision(),
    );

    let documented_reject = packet.frame_kind().is_none()
        || usize::from(packet.pd_length()) > mpa_rr::PRIVATE_DATA_LEN_MAX
        || (packet.enhanced() && usize::from(packet.pd_length()) < mpa_rr::ENHANCED_LEN);
    let repr = match Repr::parse(&packet) {
        Ok(repr) => repr,
        Err(_) => {
            assert!(
                documented_reject,
                "parse rejected a frame mpa_rr documents as valid"
            );
            return;
        }
    };
    assert!(
        !documented_reject,
        "parse accepted a frame mpa_rr documents as invalid"
    );
    assert_eq!(Some(repr.kind), packet.frame_kind());
    assert_eq!(repr.buffer_len(), frame_len);
    assert_eq!(repr.flags(), packet.flags());
    let _ = repr.to_string();

    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Packet::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &data[..frame_len], "emit(parse(b)) == b");
    let again = Repr::parse(&Packet::new_checked(&out[..]).expect("emitted frame fits"))
        .expect("emitted frame parses");
    assert_eq!(again, repr, "parse(emit(r)) == r");
    if let Some(enhanced) = repr.enhanced {
        let view = EnhancedPacket::new_checked(packet.private_data()).expect("S=1 has 4 octets");
        assert_eq!(EnhancedRepr::parse(&view).unwrap(), enhanced);
    }
    match repr.kind {
        FrameKind::Request => assert_eq!(&data[..16], &mpa_rr::KEY_REQUEST),
        FrameKind::Reply => assert_eq!(&data[..16], &mpa_rr::KEY_REPLY),
    }
});
