//! DDP over SCTP, transmit: DDP segments in, PPID 16 messages out
//! (`DDP-SSN | DDP segment`, RFC 5043 §5.2), written back to back into the
//! caller's buffer with each message's length recorded, so the data plane
//! hands each to SCTP as one user message.

use crate::mpa::tx::FrameError;

use super::SSN_LEN;

/// The transmit side of one DDP stream over SCTP.
///
/// It has the shape of [`crate::mpa::tx::Framer`] (the queue pair drives
/// either): [`MessageFramer::frame`] and [`MessageFramer::frame_with`]
/// write one message, [`MessageFramer::wire_len`] says how long it is, and
/// [`MessageFramer::mulpdu`] is the largest DDP segment.
#[derive(Debug, Clone)]
pub struct MessageFramer {
    message_max: usize,
    /// The DDP-SSN of the next message: 0 at the start of the session
    /// (RFC 5043 §6.1), then one more per message, modulo 2^16.
    ssn: u16,
    /// The length of each message written since the last
    /// [`MessageFramer::take_lengths`].
    lengths: Vec<u16>,
}

impl MessageFramer {
    /// A framer for user messages of at most `message_max` octets (from
    /// the association's path MTU, [`super::message_max`]), the first with
    /// DDP-SSN 0. `None` when `message_max` is outside
    /// [`super::MESSAGE_MIN`]..=65535.
    pub fn new(message_max: usize) -> Option<MessageFramer> {
        (super::MESSAGE_MIN..=usize::from(u16::MAX))
            .contains(&message_max)
            .then(|| MessageFramer {
                message_max,
                ssn: 0,
                lengths: Vec::new(),
            })
    }

    /// The largest DDP segment one message carries.
    pub fn mulpdu(&self) -> usize {
        self.message_max - SSN_LEN
    }

    /// The DDP-SSN the next message takes.
    pub fn ssn(&self) -> u16 {
        self.ssn
    }

    /// Octets of the message that carries `ulpdu_len` octets of segment.
    pub fn wire_len(&self, ulpdu_len: usize) -> usize {
        SSN_LEN + ulpdu_len
    }

    /// The longest segment, at most [`MessageFramer::mulpdu`], whose message
    /// fits `room` octets; `None` when not even an empty one does.
    pub fn ulpdu_len_max(&self, room: usize) -> Option<usize> {
        Some(room.checked_sub(SSN_LEN)?.min(self.mulpdu()))
    }

    /// Writes one message carrying the concatenation of `pieces` into the
    /// front of `out`; returns its length.
    pub fn frame(&mut self, pieces: &[&[u8]], out: &mut [u8]) -> Result<usize, FrameError> {
        let ulpdu_len: usize = pieces.iter().map(|p| p.len()).sum();
        let len = self.room(ulpdu_len, out.len())?;
        let mut at = self.put_ssn(out);
        for piece in pieces {
            out[at..at + piece.len()].copy_from_slice(piece);
            at += piece.len();
        }
        Ok(self.written(len))
    }

    /// Writes one message carrying `header` and then `payload_len` octets
    /// that `fill` writes in place, called once with offset 0 and the whole
    /// payload's room (there are no markers to skip).
    pub fn frame_with(
        &mut self,
        header: &[u8],
        payload_len: usize,
        out: &mut [u8],
        mut fill: impl FnMut(usize, &mut [u8]),
    ) -> Result<usize, FrameError> {
        let len = self.room(header.len() + payload_len, out.len())?;
        let at = self.put_ssn(out);
        out[at..at + header.len()].copy_from_slice(header);
        fill(0, &mut out[at + header.len()..len]);
        Ok(self.written(len))
    }

    /// The lengths of the messages written since the last call, in order,
    /// appended to `out`.
    pub fn take_lengths(&mut self, out: &mut Vec<u16>) {
        out.append(&mut self.lengths);
    }

    fn room(&self, ulpdu_len: usize, available: usize) -> Result<usize, FrameError> {
        if ulpdu_len > self.mulpdu() {
            return Err(FrameError::TooLong {
                ulpdu_len,
                mulpdu: self.mulpdu(),
            });
        }
        let needed = self.wire_len(ulpdu_len);
        if available < needed {
            return Err(FrameError::NoRoom { needed, available });
        }
        Ok(needed)
    }

    fn put_ssn(&self, out: &mut [u8]) -> usize {
        out[..SSN_LEN].copy_from_slice(&self.ssn.to_be_bytes());
        SSN_LEN
    }

    fn written(&mut self, len: usize) -> usize {
        self.ssn = self.ssn.wrapping_add(1);
        // At most 65535 octets: checked by `new` and `room`.
        self.lengths.push(len as u16);
        len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_consecutive_ssns_and_their_lengths() {
        let mut framer = MessageFramer::new(100).unwrap();
        assert_eq!(framer.mulpdu(), 98);
        let mut out = [0u8; 300];
        let a = framer.frame(&[b"ab", b"cde"], &mut out).unwrap();
        let b = framer
            .frame_with(b"H", 4, &mut out[a..], |offset, run| {
                assert_eq!((offset, run.len()), (0, 4));
                run.copy_from_slice(b"wxyz");
            })
            .unwrap();
        assert_eq!((a, b), (7, 7));
        assert_eq!(&out[..14], b"\0\0abcde\0\x01Hwxyz");
        let mut lengths = Vec::new();
        framer.take_lengths(&mut lengths);
        assert_eq!(lengths, [7, 7]);
        framer.take_lengths(&mut lengths);
        assert_eq!(lengths, [7, 7], "taken once");
    }

    #[test]
    fn the_ssn_wraps_modulo_2_16() {
        let mut framer = MessageFramer::new(80).unwrap();
        framer.ssn = u16::MAX;
        let mut out = [0u8; 8];
        framer.frame(&[b"x"], &mut out).unwrap();
        assert_eq!(&out[..2], &[0xFF, 0xFF]);
        framer.frame(&[b"x"], &mut out).unwrap();
        assert_eq!(&out[..2], &[0, 0]);
    }

    #[test]
    fn errors_are_reported_not_written() {
        let mut framer = MessageFramer::new(80).unwrap();
        let mut out = [0u8; 10];
        assert_eq!(
            framer.frame(&[&[0; 79]], &mut [0; 100]),
            Err(FrameError::TooLong {
                ulpdu_len: 79,
                mulpdu: 78
            })
        );
        assert_eq!(
            framer.frame(&[&[0; 9]], &mut out),
            Err(FrameError::NoRoom {
                needed: 11,
                available: 10
            })
        );
        assert_eq!(framer.ssn(), 0, "no SSN taken by a failed frame");
        assert_eq!(framer.ulpdu_len_max(1), None);
        assert_eq!(framer.ulpdu_len_max(50), Some(48));
        assert_eq!(framer.ulpdu_len_max(500), Some(78));
        assert!(MessageFramer::new(super::super::MESSAGE_MIN - 1).is_none());
        assert!(MessageFramer::new(70_000).is_none());
    }
}
