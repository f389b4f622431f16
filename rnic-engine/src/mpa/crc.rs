//! CRC32c as MPA uses it (RFC 5044 §4.4, the iSCSI polynomial of RFC 3720).
//!
//! The MPA CRC covers ULPDU_Length, the ULPDU, the PAD and every marker
//! inside the FPDU. On the wire the standard CRC32c value travels least
//! significant octet first, as iSCSI and SCTP send theirs: checked on every
//! FPDU of the siw captures (`rping_v2_crc.pcap` frame 8 ends in
//! `01 3c ac df` for the value 0xdfac3c01), and Wireshark agrees.
//!
//! This module is the one place the workspace computes it, so the faster
//! kernel of issue 3 (VPCLMULQDQ folding, SSE4.2, portable fallback) slots in
//! here without touching callers. Today it delegates to the `crc32c` crate,
//! which picks SSE4.2 at run time.

/// CRC32c (Castagnoli; initial value and final XOR all ones) of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC32c: `append(crc32c(a), b) == crc32c(a ++ b)`.
pub fn append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The four octets that carry `crc` on the wire (least significant first).
pub const fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC32c value carried by four wire octets.
pub const fn from_wire(octets: [u8; 4]) -> u32 {
    u32::from_le_bytes(octets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3720_b4_vectors() {
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        let descending: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&descending), 0x113F_DB5C);
    }

    #[test]
    fn append_continues() {
        let data: Vec<u8> = (0..=255).collect();
        for cut in 0..data.len() {
            assert_eq!(append(crc32c(&data[..cut]), &data[cut..]), crc32c(&data));
        }
    }

    #[test]
    fn siw_wire_order() {
        // rping_v2_crc.pcap frame 8: a Send FPDU, CRC in its last 4 octets.
        let fpdu = [
            0x00, 0x22, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55, 0x73, 0x01, 0x29, 0x63, 0x70,
            0x4c, 0x1b, 0x05, 0x00, 0x00, 0x00, 0x00, 0x40, 0x01, 0x3c, 0xac, 0xdf,
        ];
        let (covered, field) = fpdu.split_at(fpdu.len() - 4);
        assert_eq!(crc32c(covered), 0xdfac_3c01);
        assert_eq!(
            to_wire(crc32c(covered)),
            [field[0], field[1], field[2], field[3]]
        );
        assert_eq!(from_wire([0x01, 0x3c, 0xac, 0xdf]), 0xdfac_3c01);
    }
}
