//! MPA markers (RFC 5044 §4).
//!
//! ```text
//! | reserved (16, zero) | FPDUPTR (16) |
//! ```
//!
//! Towards a peer that set M in its startup frame, the sender puts a marker
//! every 512 octets of the TCP stream, counted from the first octet of Full
//! Operation in that direction (the first octet after that side's MPA
//! Request or Reply). So the first four octets of Full Operation are a
//! marker, and a marker occupies stream positions `[512k, 512k + 4)`.
//! FPDUPTR is the number of octets from the marker back to the start
//! (ULPDU_Length) of the FPDU that contains it. A marker that falls where
//! an FPDU begins belongs to that FPDU, with FPDUPTR 0. Markers are not
//! counted in ULPDU_Length but are covered by the FPDU's CRC, and can fall
//! anywhere in it, between PAD and CRC too.
//!
//! Wireshark computes marker positions the same way (relative to the first
//! FPDU octet of each direction). Linux siw never sends markers and rejects
//! a peer that asks for them, so no capture has any: the tests here and the
//! decoder's tests build marked streams themselves.
//!
//! Positions in this module are `u64` stream offsets from the first octet of
//! Full Operation, never TCP sequence numbers (which wrap).

use super::{be, Error, Field, Result};

mod field {
    use super::Field;

    pub(crate) const RESERVED: Field = 0..2;
    pub(crate) const FPDUPTR: Field = 2..4;
}

/// Length of a marker.
pub const MARKER_LEN: usize = field::FPDUPTR.end;
/// Distance between markers in the stream (RFC 5044: 512 octets).
pub const MARKER_INTERVAL: u64 = 512;
/// Octets of FPDU between two markers.
pub const RUN_LEN: usize = MARKER_INTERVAL as usize - MARKER_LEN;

const _: () = assert!(MARKER_LEN == 4);
const _: () = assert!(RUN_LEN == 508);

/// A read/write view of a marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer of at least [`MARKER_LEN`] octets.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a marker.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MARKER_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// The reserved half (sent as zero).
    pub fn reserved(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::RESERVED])
    }

    /// FPDUPTR: octets back from this marker to its FPDU's start.
    pub fn fpduptr(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::FPDUPTR])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the reserved half.
    pub fn set_reserved(&mut self, value: u16) {
        be::put_u16(&mut self.buffer.as_mut()[field::RESERVED], value);
    }

    /// Writes FPDUPTR.
    pub fn set_fpduptr(&mut self, value: u16) {
        be::put_u16(&mut self.buffer.as_mut()[field::FPDUPTR], value);
    }
}

/// A marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    /// The reserved half, kept verbatim (a receiver does not check it).
    pub reserved: u16,
    /// FPDUPTR.
    pub fpduptr: u16,
}

impl Repr {
    /// Parses a marker.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            reserved: packet.reserved(),
            fpduptr: packet.fpduptr(),
        })
    }

    /// Octets [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        MARKER_LEN
    }

    /// Writes the marker.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_reserved(self.reserved);
        packet.set_fpduptr(self.fpduptr);
    }
}

/// Whether a marker starts at stream position `position`.
pub const fn is_marker_at(position: u64) -> bool {
    position.is_multiple_of(MARKER_INTERVAL)
}

/// Whether an FPDU may start at `position`: not inside a marker.
pub const fn is_fpdu_start(position: u64) -> bool {
    let phase = position % MARKER_INTERVAL;
    phase == 0 || phase >= MARKER_LEN as u64
}

/// Stream octets an FPDU occupies when it starts at `start` and is
/// `fpdu_len` octets long without markers: its length plus the markers
/// that fall inside it (including one at `start` itself).
///
/// # Panics
/// If `start` is inside a marker ([`is_fpdu_start`] is false).
pub fn stream_len(start: u64, fpdu_len: usize) -> usize {
    assert!(is_fpdu_start(start), "an FPDU cannot start inside a marker");
    // FPDU octets that fit before the next marker (none at a marker). A
    // marker goes in when an octet is still to come: the first after those
    // octets, then one per run of RUN_LEN. Counted, not walked: the
    // framer asks for every FPDU, and a walk costs a dependent step per
    // marker (12 ns of a 4 KiB FPDU's framing on the development machine).
    let before = ((MARKER_INTERVAL - start % MARKER_INTERVAL) % MARKER_INTERVAL) as usize;
    let markers = match fpdu_len.checked_sub(before + 1) {
        Some(after_first) => 1 + after_first / RUN_LEN,
        None => 0,
    };
    // At most one marker per 508 octets, so this fits whenever fpdu_len does.
    fpdu_len + MARKER_LEN * markers
}

/// One piece of a marked stream, as [`Pieces`] yields them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// FPDU octets between markers.
    Data(&'a [u8]),
    /// A marker (or, at the end of the input, the part of one that is there).
    Marker {
        /// Stream position of the marker's first octet.
        position: u64,
        /// Its octets: [`MARKER_LEN`] of them unless the input ends inside it.
        octets: &'a [u8],
    },
}

/// Splits octets of a marked stream into data runs and markers.
///
/// A reference implementation for decoders and tests: it walks one piece at
/// a time. The framer (issue 3) strips markers in place at memory speed.
#[derive(Debug, Clone)]
pub struct Pieces<'a> {
    position: u64,
    rest: &'a [u8],
}

impl<'a> Pieces<'a> {
    /// Walks `octets`, whose first octet is at stream position `start`.
    ///
    /// # Panics
    /// If `start` is inside a marker.
    pub fn new(start: u64, octets: &'a [u8]) -> Pieces<'a> {
        assert!(
            is_fpdu_start(start),
            "the walk must not start inside a marker"
        );
        Pieces {
            position: start,
            rest: octets,
        }
    }

    /// Stream position of the next octet the walk would look at.
    pub fn position(&self) -> u64 {
        self.position
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        let take;
        let piece;
        if is_marker_at(self.position) {
            take = MARKER_LEN.min(self.rest.len());
            piece = Piece::Marker {
                position: self.position,
                octets: &self.rest[..take],
            };
        } else {
            let to_marker = (MARKER_INTERVAL - self.position % MARKER_INTERVAL) as usize;
            take = to_marker.min(self.rest.len());
            piece = Piece::Data(&self.rest[..take]);
        }
        self.rest = &self.rest[take..];
        self.position += take as u64;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_construct_and_parse() {
        let repr = Repr {
            reserved: 0,
            fpduptr: 0x01f8,
        };
        let mut bytes = [0u8; 4];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, [0x00, 0x00, 0x01, 0xf8]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap(),
            repr
        );
        assert_eq!(Packet::new_checked(&bytes[..3]), Err(Error));
    }

    #[test]
    fn test_stream_len() {
        // An FPDU at position 0 starts with a marker.
        assert_eq!(stream_len(0, 8), 12);
        // 508 octets fill the first run exactly; the marker at 512 is the next
        // FPDU's.
        assert_eq!(stream_len(0, 508), 512);
        assert_eq!(stream_len(0, 509), 517);
        // Starting mid-run, the marker at 512 falls inside.
        assert_eq!(stream_len(500, 12), 12);
        assert_eq!(stream_len(500, 13), 17);
        // A 64 KiB ULPDU crosses many markers.
        let fpdu: usize = 2 + 65535 + 3 + 4;
        let markers = fpdu.div_ceil(508);
        assert_eq!(stream_len(0, fpdu), fpdu + 4 * markers);
    }

    /// The counted `stream_len` against a walk of the stream, every start
    /// an FPDU may have in two marker intervals and every length up to
    /// three.
    #[test]
    fn test_stream_len_counts_what_a_walk_finds() {
        fn walk(start: u64, fpdu_len: usize) -> usize {
            let mut position = start;
            let mut remaining = fpdu_len as u64;
            while remaining > 0 {
                if is_marker_at(position) {
                    position += MARKER_LEN as u64;
                }
                let run = remaining.min(MARKER_INTERVAL - position % MARKER_INTERVAL);
                position += run;
                remaining -= run;
            }
            (position - start) as usize
        }
        for start in (0..2 * MARKER_INTERVAL).filter(|&p| is_fpdu_start(p)) {
            for fpdu_len in (0..3 * MARKER_INTERVAL as usize).step_by(1 + start as usize % 3) {
                assert_eq!(
                    stream_len(start, fpdu_len),
                    walk(start, fpdu_len),
                    "start {start} length {fpdu_len}"
                );
            }
        }
    }

    #[test]
    fn test_pieces_reassemble() {
        // Number the stream octets; markers are where the walk says.
        let stream: Vec<u8> = (0..2000u32).map(|i| i as u8).collect();
        for start in [0u64, 4, 100, 508, 511, 512, 516, 1020] {
            let mut data = Vec::new();
            let mut markers = Vec::new();
            for piece in Pieces::new(start, &stream) {
                match piece {
                    Piece::Data(d) => data.extend_from_slice(d),
                    Piece::Marker { position, octets } => markers.push((position, octets.len())),
                }
            }
            let total: usize = data.len() + markers.iter().map(|m| m.1).sum::<usize>();
            assert_eq!(total, stream.len());
            for (position, _) in &markers {
                assert!(is_marker_at(*position));
            }
            let expected = (start..start + 2000).filter(|p| is_marker_at(*p)).count();
            assert_eq!(markers.len(), expected, "start {start}");
        }
    }

    #[test]
    fn test_fpdu_starts() {
        assert!(is_fpdu_start(0));
        assert!(!is_fpdu_start(1));
        assert!(!is_fpdu_start(515));
        assert!(is_fpdu_start(516));
    }
}
