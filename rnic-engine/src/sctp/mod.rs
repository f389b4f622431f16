//! DDP over SCTP (RFC 5043) below DDP: the second lower layer of the
//! engine, beside [`crate::mpa`]. One DDP segment travels as one SCTP user
//! message; the association (its chunks, CRC32c, retransmission) belongs to
//! the data plane, and the session control messages (PPID 17) to the
//! `control` crate.
//!
//! Heads up! Read RFC 5043 §5 (the message formats), §6.1 (the DDP-SSN),
//! §8-§10 (unordered delivery, sizes) and RFC 5041 §5 (placement and
//! delivery) first.
//!
//! * A DDP Segment message (PPID 16) is `DDP-SSN(16) | DDP header |
//!   payload`: the DDP header sits at offset 2, where MPA's ULPDU_Length
//!   field would end, and there is no MPA length, PAD, marker or CRC (SCTP
//!   has its own CRC32c). [`tx::MessageFramer`] writes them.
//! * Every data chunk is sent unordered (U=1, RFC 5043 §8), so messages may
//!   arrive in any order. The DDP-SSN, counted per stream and direction
//!   from 0 at the start of the session (RFC 5043 §6.1) modulo 2^16,
//!   restores it: [`rx::Reorder`] lets an RDMA Write segment be placed as it
//!   arrives, and hands everything else to the queue pair in DDP-SSN order,
//!   so completions are delivered in order (out-of-order placement,
//!   in-order delivery, as RFC 5041 §5 allows).
//!
//! The queue pair above is the same one MPA feeds: one code path for
//! DDP/RDMAP ([`crate::qp`]) and two adapters.

pub mod rx;
pub mod tx;

/// The SCTP Payload Protocol Identifiers of DDP Segment (16) and DDP
/// Stream Session Control (17) messages (RFC 5043 §5), defined with the
/// session control messages' wire view.
pub use crate::wire::ddp_session::{PPID_DDP_SEGMENT, PPID_SESSION_CONTROL};
/// The Adaptation Layer Indication code point of DDP (RFC 5043 §5.1),
/// carried in the INIT and INIT-ACK (RFC 5061 §4.2.6, parameter 0xC006).
pub const ADAPTATION_DDP: u32 = 1;
/// The UDP port of SCTP over UDP encapsulation (RFC 6951 §5).
pub const UDP_ENCAPSULATION_PORT: u16 = 9899;
/// Octets of the DDP-SSN in front of every message.
pub const SSN_LEN: usize = 2;
/// The largest user message over UDP encapsulation on IPv4 at MTU 1500:
/// 1500 - 20 (IP) - 8 (UDP) - 12 (SCTP common header) - 16 (DATA chunk
/// header). A message fits one packet: RFC 5043 §9 forbids SCTP
/// fragmentation unless the alternative is IP fragmentation.
pub const MESSAGE_MAX_MTU_1500: usize = 1444;
/// The smallest message size a connection may use: room for the DDP-SSN
/// and the largest RDMAP header (an untagged DDP header and an Atomic
/// Request, 70 octets).
pub const MESSAGE_MIN: usize = SSN_LEN + 70;

/// The DDP-SSN and the DDP segment of a PPID 16 message, or `None` when it
/// is too short to hold a DDP-SSN.
pub fn split(message: &[u8]) -> Option<(u16, &[u8])> {
    let (ssn, segment) = message.split_first_chunk::<SSN_LEN>()?;
    Some((u16::from_be_bytes(*ssn), segment))
}

/// The largest user message over UDP encapsulation (RFC 6951) on IPv4 for
/// a path MTU of `mtu` octets (IP 20, UDP 8, SCTP common header 12, DATA
/// chunk header 16), or `None` below [`MESSAGE_MIN`].
pub fn message_max(mtu: usize) -> Option<usize> {
    mtu.checked_sub(20 + 8 + 12 + 16)
        .filter(|&n| n >= MESSAGE_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_1500_carries_1442_octets_of_segment() {
        assert_eq!(message_max(1500), Some(MESSAGE_MAX_MTU_1500));
        assert_eq!(MESSAGE_MAX_MTU_1500 - SSN_LEN, 1442);
        assert_eq!(message_max(9000), Some(8944));
        assert_eq!(message_max(100), None);
    }

    #[test]
    fn split_reads_the_ssn_in_network_order() {
        assert_eq!(split(&[0x12, 0x34, 9]), Some((0x1234, &[9u8][..])));
        assert_eq!(split(&[0x12, 0x34]), Some((0x1234, &[][..])));
        assert_eq!(split(&[1]), None);
    }
}
