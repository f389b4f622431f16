//! Cutting one FPDU out of a direction's octets: ULPDU_Length (which a
//! marker may split), markers, CRC.

use rnic_engine::mpa::crc;
use rnic_engine::wire::{ddp, mpa_fpdu, mpa_marker, rdmap};

use super::{CrcVerdict, Fpdu, MarkerCheck, FPDU_STREAM_LEN_MAX};

/// How a connection's FPDUs carry their CRC: as its MPA startup
/// negotiated, or, for a capture that starts after the startup, found out
/// from the FPDUs themselves (`Auto`: a zero field means none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CrcMode {
    On,
    Off,
    Auto,
}

/// What the MPA startup negotiated for one direction's FPDUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Params {
    pub(super) crc: CrcMode,
    pub(super) markers: bool,
}

/// Where the next FPDU ends, before its octets are all there.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cut {
    pub(super) ulpdu_len: u16,
    /// Octets without markers.
    content_len: usize,
    /// Octets in the stream, markers included.
    pub(super) stream_len: usize,
    markers: bool,
}

impl Cut {
    /// Reads ULPDU_Length (which a marker may split) at stream position
    /// `position`, the first octet of `buf`.
    pub(super) fn measure(position: u64, buf: &[u8], markers: bool) -> Option<Cut> {
        let mut length = [0u8; 2];
        let mut have = 0;
        if markers {
            for piece in mpa_marker::Pieces::new(position, buf) {
                if let mpa_marker::Piece::Data(data) = piece {
                    let take = data.len().min(2 - have);
                    length[have..have + take].copy_from_slice(&data[..take]);
                    have += take;
                }
                if have == 2 {
                    break;
                }
            }
        } else if buf.len() >= 2 {
            length.copy_from_slice(&buf[..2]);
            have = 2;
        }
        if have < 2 {
            return None;
        }
        let ulpdu_len = u16::from_be_bytes(length);
        let content_len = mpa_fpdu::fpdu_len(usize::from(ulpdu_len));
        let stream_len = if markers {
            mpa_marker::stream_len(position, content_len)
        } else {
            content_len
        };
        Some(Cut {
            ulpdu_len,
            content_len,
            stream_len,
            markers,
        })
    }

    /// Strips markers, checks them and the CRC, and returns the FPDU.
    pub(super) fn decode(&self, position: u64, raw: &[u8], crc_mode: CrcMode) -> Fpdu {
        debug_assert_eq!(raw.len(), self.stream_len);
        let covered_len = self.content_len - mpa_fpdu::CRC_LEN;
        let mut content = Vec::with_capacity(self.content_len);
        let mut markers = Vec::new();
        let mut crc_state = 0u32;
        let pieces: Box<dyn Iterator<Item = mpa_marker::Piece<'_>>> = if self.markers {
            Box::new(mpa_marker::Pieces::new(position, raw))
        } else {
            Box::new(std::iter::once(mpa_marker::Piece::Data(raw)))
        };
        for piece in pieces {
            match piece {
                mpa_marker::Piece::Data(data) => {
                    let covered = data.len().min(covered_len.saturating_sub(content.len()));
                    crc_state = crc::append(crc_state, &data[..covered]);
                    content.extend_from_slice(data);
                }
                mpa_marker::Piece::Marker {
                    position: at,
                    octets,
                } => {
                    crc_state = crc::append(crc_state, octets);
                    let marker = mpa_marker::Packet::new_unchecked(octets);
                    markers.push(MarkerCheck {
                        position: at,
                        fpduptr: marker.fpduptr(),
                        expected: at - position,
                        reserved: marker.reserved(),
                    });
                }
            }
        }
        let packet = mpa_fpdu::Packet::new_unchecked(&content[..]);
        let crc_field = packet.crc_field();
        let carried = crc::from_wire(crc_field);
        let crc = match crc_mode {
            CrcMode::On if carried == crc_state || cfg!(fuzzing) => CrcVerdict::Good,
            CrcMode::On => CrcVerdict::Bad,
            CrcMode::Off => CrcVerdict::Off,
            CrcMode::Auto if carried == crc_state => CrcVerdict::Good,
            CrcMode::Auto if carried == 0 => CrcVerdict::Off,
            CrcMode::Auto => CrcVerdict::Bad,
        };
        Fpdu {
            ulpdu_len: self.ulpdu_len,
            ulpdu: packet.ulpdu().to_vec(),
            crc_field,
            crc_computed: crc_state,
            crc,
            markers,
            stream_len: self.stream_len,
            rtr: false,
        }
    }
}

/// Whether the octets at `position` start a believable FPDU: a DDP segment
/// long enough for its header, DDP and RDMAP version 1, and (with CRC) a
/// good CRC. `None` while too few octets are there to tell.
pub(super) fn plausible_fpdu(position: u64, buf: &[u8], params: Params) -> Option<bool> {
    let cut = Cut::measure(position, buf, params.markers)?;
    if usize::from(cut.ulpdu_len) < ddp::TAGGED_HEADER_LEN {
        return Some(false);
    }
    if buf.len() < cut.stream_len {
        return if cut.stream_len > FPDU_STREAM_LEN_MAX {
            Some(false)
        } else {
            None
        };
    }
    // The versions first, where no marker can sit among the headers: a
    // start they rule out costs no CRC over up to 64 KiB (resynchronising
    // over many segment starts judged each one so; the verdict is the
    // same, as it needs both versions anyway).
    if !params.markers {
        if let Ok(segment) = ddp::Packet::new_checked(&buf[2..cut.stream_len]) {
            let rdmap_version = rdmap::Control::from_octet(segment.rsvd_ulp()).version;
            if segment.version() != ddp::VERSION || rdmap_version != rdmap::VERSION {
                return Some(false);
            }
        }
    }
    let fpdu = cut.decode(position, &buf[..cut.stream_len], params.crc);
    if fpdu.crc == CrcVerdict::Bad || fpdu.markers.iter().any(|m| !m.ok()) {
        return Some(false);
    }
    let Ok(segment) = ddp::Packet::new_checked(&fpdu.ulpdu[..]) else {
        return Some(false);
    };
    let rdmap_version = rdmap::Control::from_octet(segment.rsvd_ulp()).version;
    Some(segment.version() == ddp::VERSION && rdmap_version == rdmap::VERSION)
}

/// Whether a ULPDU is one of RFC 6581's RTR indications: a zero-length
/// Send, RDMA Write or RDMA Read (Read Request of size 0).
/// Whether `ulpdu` is a Terminate.
pub(super) fn is_terminate(ulpdu: &[u8]) -> bool {
    ddp::Packet::new_checked(ulpdu)
        .and_then(|p| rdmap::Repr::parse(&p))
        .is_ok_and(|r| r.opcode() == rdmap::Opcode::Terminate)
}

pub(super) fn is_zero_length_rtr(ulpdu: &[u8]) -> bool {
    let Ok(packet) = ddp::Packet::new_checked(ulpdu) else {
        return false;
    };
    let Ok(repr) = rdmap::Repr::parse(&packet) else {
        return false;
    };
    match (repr.opcode(), repr.header) {
        (rdmap::Opcode::Send | rdmap::Opcode::RdmaWrite, _) => repr.payload.is_empty(),
        (rdmap::Opcode::RdmaReadRequest, rdmap::Header::ReadRequest(r)) => r.read_size == 0,
        _ => false,
    }
}
