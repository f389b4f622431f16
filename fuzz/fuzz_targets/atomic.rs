//! RFC 7306 Atomic Request (52 octets) and Atomic Response (12 octets)
//! headers.
//!
//! Asserts: each view is checked iff the input is long enough; parsing a
//! checked view never fails; `emit(parse(b)) == b[..len]` for both (every
//! bit is a field, the 28 reserved bits included); `parse(emit(r)) == r`;
//! Display does not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::atomic::{
    RequestPacket, RequestRepr, ResponsePacket, ResponseRepr, REQUEST_HEADER_LEN, RESERVED_MAX,
    RESPONSE_HEADER_LEN,
};

fuzz_target!(|data: &[u8]| {
    match RequestPacket::new_checked(data) {
        Err(_) => assert!(data.len() < REQUEST_HEADER_LEN),
        Ok(packet) => {
            let repr = RequestRepr::parse(&packet).expect("a checked request parses");
            assert!(repr.reserved <= RESERVED_MAX);
            assert!(u8::from(repr.opcode) <= 0x0F);
            let _ = repr.to_string();
            let mut out = [0u8; REQUEST_HEADER_LEN];
            repr.emit(&mut RequestPacket::new_unchecked(&mut out[..]));
            assert_eq!(
                &out[..],
                &data[..REQUEST_HEADER_LEN],
                "request: emit(parse(b)) == b"
            );
            let again = RequestRepr::parse(&RequestPacket::new_checked(&out[..]).unwrap()).unwrap();
            assert_eq!(again, repr);
        }
    }
    match ResponsePacket::new_checked(data) {
        Err(_) => assert!(data.len() < RESPONSE_HEADER_LEN),
        Ok(packet) => {
            let repr = ResponseRepr::parse(&packet).expect("a checked response parses");
            let _ = repr.to_string();
            let mut out = [0u8; RESPONSE_HEADER_LEN];
            repr.emit(&mut ResponsePacket::new_unchecked(&mut out[..]));
            assert_eq!(
                &out[..],
                &data[..RESPONSE_HEADER_LEN],
                "response: emit(parse(b)) == b"
            );
            let again =
                ResponseRepr::parse(&ResponsePacket::new_checked(&out[..]).unwrap()).unwrap();
            assert_eq!(again, repr);
        }
    }
});
