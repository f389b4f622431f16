//! MPA receive: a TCP byte stream in, ULPDUs out.
//!
//! Heads up! Read [`crate::wire::mpa_fpdu`] and [`crate::wire::mpa_marker`]
//! first: they state the FPDU layout, where markers fall and what the CRC
//! covers.
//!
//! The [`Deframer`] is fed the stream in whatever pieces TCP delivers
//! (any segmentation: a marker, the ULPDU_Length or the CRC split across
//! pieces) and yields each ULPDU with markers removed, after checking the
//! CRC when it was negotiated and every marker's FPDUPTR. It keeps the
//! rx state of siw's `siw_rx_state` in fields instead of an enum, and has
//! two paths:
//!
//! * **in place**: an FPDU that lies whole in the piece and has no marker
//!   inside is checked where it is and yielded as a slice of the input,
//!   without a copy;
//! * **assembled**: anything else is copied, marker-free, into a buffer
//!   the deframer allocated once, in runs between markers, folding the CRC
//!   in the same pass ([`crc::copy_append`]).
//!
//! Errors are RFC 5044 / RFC 6580 Terminate causes of layer 2 (LLP), type 0
//! (MPA): [`MpaError`]. The first error is sticky: after it the deframer
//! yields nothing more, because the stream can no longer be trusted.
//!
//! Resources a peer controls are bounded: the assembly buffer holds one
//! FPDU of at most [`RxConfig::ulpdu_max`] octets, and a longer
//! ULPDU_Length is a framing error before anything is buffered.

use core::fmt;

use super::crc::{self, Crc32c};
use crate::wire::mpa_fpdu::{self, CRC_LEN, HEADER_LEN};
use crate::wire::mpa_marker::{self, MARKER_INTERVAL, MARKER_LEN};

/// How a connection's incoming FPDUs are framed, fixed at the end of the
/// MPA startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxConfig {
    /// CRC negotiated: either side set C. Without it the field is ignored.
    pub crc: bool,
    /// This side set M: the peer puts markers in what it sends.
    pub markers: bool,
    /// The longest ULPDU accepted. A longer ULPDU_Length is a framing
    /// error; the assembly buffer is sized from this.
    pub ulpdu_max: usize,
}

/// A receive error: Terminate layer 2 (LLP), type 0 (MPA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MpaError {
    /// The CRC does not match (code 0x02, "MPA CRC Error").
    Crc,
    /// A marker's FPDUPTR does not point at its FPDU (code 0x03, "MPA
    /// Marker and ULPDU Length field mismatch").
    Marker,
    /// ULPDU_Length is longer than this side accepts (code 0x04).
    Framing,
}

impl MpaError {
    /// Terminate layer: 2, LLP.
    pub const fn layer(self) -> u8 {
        2
    }

    /// Terminate error type: 0, MPA.
    pub const fn etype(self) -> u8 {
        0
    }

    /// Terminate error code.
    pub const fn ecode(self) -> u8 {
        match self {
            MpaError::Crc => 0x02,
            MpaError::Marker => 0x03,
            MpaError::Framing => 0x04,
        }
    }
}

impl fmt::Display for MpaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self {
            MpaError::Crc => "MPA CRC error",
            MpaError::Marker => "MPA marker does not point at its FPDU",
            MpaError::Framing => "ULPDU_Length longer than this connection accepts",
        };
        write!(
            f,
            "{what} (TERM {}/{}/{:#04x})",
            self.layer(),
            self.etype(),
            self.ecode()
        )
    }
}

impl std::error::Error for MpaError {}

/// What one [`Deframer::poll`] produced.
#[derive(Debug, PartialEq, Eq)]
pub enum Poll<'a> {
    /// The next ULPDU (a DDP segment), markers removed and CRC checked.
    Ulpdu(&'a [u8]),
    /// The piece is used up; feed the next one.
    NeedMore,
    /// The stream is broken (sticky).
    Error(MpaError),
}

/// The receive side of one MPA connection in Full Operation.
#[derive(Debug, Clone)]
pub struct Deframer {
    config: RxConfig,
    /// Stream position of the next input octet, from the first octet of
    /// Full Operation.
    position: u64,
    /// Marker-free octets of the FPDU being assembled.
    buf: Box<[u8]>,
    /// Octets of `buf` filled.
    have: usize,
    /// The FPDU's marker-free length, once ULPDU_Length is in (else 0).
    need: usize,
    /// An FPDU has begun (its first octet, or a marker at its start, is in).
    in_fpdu: bool,
    /// Stream position of the FPDU's first octet.
    start: u64,
    /// CRC32c of the FPDU's covered octets so far.
    crc: Crc32c,
    /// A marker being read, and how much of it is in.
    marker: [u8; MARKER_LEN],
    marker_have: usize,
    error: Option<MpaError>,
}

impl Deframer {
    /// A deframer whose first input octet is the first octet of Full
    /// Operation. Allocates its assembly buffer here, once.
    pub fn new(config: RxConfig) -> Deframer {
        let ulpdu_max = config.ulpdu_max.min(usize::from(u16::MAX));
        let config = RxConfig {
            ulpdu_max,
            ..config
        };
        Deframer {
            config,
            position: 0,
            buf: vec![0u8; mpa_fpdu::fpdu_len(ulpdu_max)].into_boxed_slice(),
            have: 0,
            need: 0,
            in_fpdu: false,
            start: 0,
            crc: Crc32c::new(0),
            marker: [0; MARKER_LEN],
            marker_have: 0,
            error: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> RxConfig {
        self.config
    }

    /// Starts over at the first octet of Full Operation, keeping the
    /// assembly buffer: a pool of deframers serves connection after
    /// connection without allocating.
    pub fn reset(&mut self) {
        self.position = 0;
        self.have = 0;
        self.need = 0;
        self.in_fpdu = false;
        self.marker_have = 0;
        self.error = None;
    }

    /// Stream octets consumed since Full Operation began.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Stream octets of a partly received FPDU the deframer holds (0 at an
    /// FPDU boundary).
    pub fn pending(&self) -> usize {
        if self.in_fpdu || self.marker_have > 0 {
            (self.position - self.start) as usize
        } else {
            0
        }
    }

    /// The error that stopped the stream, if any.
    pub fn error(&self) -> Option<MpaError> {
        self.error
    }

    /// Reads from the front of `input` until it has a ULPDU, runs out of
    /// input, or finds an error, and says how many octets it consumed. Call
    /// it again with the rest of the piece until it answers
    /// [`Poll::NeedMore`]:
    ///
    /// ```
    /// # use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
    /// # let mut deframer = Deframer::new(RxConfig { crc: false, markers: false, ulpdu_max: 1442 });
    /// # let piece: &[u8] = &[0, 2, 0xAA, 0xBB, 0, 0, 0, 0];
    /// let mut rest = piece;
    /// loop {
    ///     let (used, poll) = deframer.poll(rest);
    ///     rest = &rest[used..];
    ///     match poll {
    ///         Poll::Ulpdu(ulpdu) => assert_eq!(ulpdu, &[0xAA, 0xBB]),
    ///         Poll::NeedMore => break,
    ///         Poll::Error(e) => panic!("TERM {}/{}/{}", e.layer(), e.etype(), e.ecode()),
    ///     }
    /// }
    /// ```
    ///
    /// The ULPDU borrows the input (in place) or the deframer (assembled),
    /// so it lives until the next call.
    pub fn poll<'r>(&'r mut self, input: &'r [u8]) -> (usize, Poll<'r>) {
        if let Some(error) = self.error {
            return (0, Poll::Error(error));
        }
        if !self.in_fpdu && self.marker_have == 0 {
            match self.in_place(input) {
                InPlace::Ulpdu(used, ulpdu) => return (used, Poll::Ulpdu(ulpdu)),
                InPlace::Buffered(used, len) => {
                    return (used, Poll::Ulpdu(&self.buf[HEADER_LEN..HEADER_LEN + len]))
                }
                InPlace::Error(error) => return (0, self.fail(error)),
                InPlace::Assemble => {}
            }
        }
        let mut rest = input;
        let result = self.assemble(&mut rest);
        let used = input.len() - rest.len();
        match result {
            Ok(true) => {
                self.in_fpdu = false;
                let ulpdu_len = usize::from(u16::from_be_bytes([self.buf[0], self.buf[1]]));
                (
                    used,
                    Poll::Ulpdu(&self.buf[HEADER_LEN..HEADER_LEN + ulpdu_len]),
                )
            }
            Ok(false) => (used, Poll::NeedMore),
            Err(error) => (used, self.fail(error)),
        }
    }

    fn fail(&mut self, error: MpaError) -> Poll<'static> {
        self.error = Some(error);
        Poll::Error(error)
    }

    /// The path for an FPDU that lies whole at the front of `input`: its
    /// markers and CRC are checked where they are (the CRC covers every
    /// octet before it, markers included, and no marker can split it: see
    /// [`crate::wire::mpa_marker`]), and the ULPDU is yielded in place when
    /// no marker falls inside it, else copied out marker-free.
    fn in_place<'i>(&mut self, input: &'i [u8]) -> InPlace<'i> {
        let markers = self.config.markers;
        let lead = if markers && mpa_marker::is_marker_at(self.position) {
            MARKER_LEN
        } else {
            0
        };
        let Some(length) = input.get(lead..lead + HEADER_LEN) else {
            return InPlace::Assemble;
        };
        // Errors are reported in stream order, as the assembling path finds
        // them: a marker at the start, then the length, then later markers,
        // then the CRC.
        if lead > 0 && input[2..4] != [0, 0] {
            return InPlace::Error(MpaError::Marker);
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([length[0], length[1]]));
        if ulpdu_len > self.config.ulpdu_max {
            return InPlace::Error(MpaError::Framing);
        }
        let content_len = mpa_fpdu::fpdu_len(ulpdu_len);
        let wire_len = if markers {
            mpa_marker::stream_len(self.position, content_len)
        } else {
            content_len
        };
        let Some(raw) = input.get(..wire_len) else {
            return InPlace::Assemble;
        };
        let inside = wire_len > content_len;
        if inside && !markers_point_home(self.position, raw) {
            return InPlace::Error(MpaError::Marker);
        }
        // One call over the octets where they lie, markers included: faster
        // than folding the runs between markers one by one while copying.
        let (covered, field) = raw.split_at(wire_len - CRC_LEN);
        let carried = crc::from_wire([field[0], field[1], field[2], field[3]]);
        if self.config.crc && !cfg!(fuzzing) && crc::crc32c(covered) != carried {
            return InPlace::Error(MpaError::Crc);
        }
        let start = self.position;
        self.position += wire_len as u64;
        if !inside {
            return InPlace::Ulpdu(wire_len, &raw[HEADER_LEN..HEADER_LEN + ulpdu_len]);
        }
        let mut have = 0;
        for piece in mpa_marker::Pieces::new(start, covered) {
            if let mpa_marker::Piece::Data(data) = piece {
                self.buf[have..have + data.len()].copy_from_slice(data);
                have += data.len();
            }
        }
        debug_assert_eq!(have + CRC_LEN, content_len);
        InPlace::Buffered(wire_len, ulpdu_len)
    }

    /// The assembling path. `Ok(true)` when an FPDU is complete in `buf`.
    fn assemble(&mut self, input: &mut &[u8]) -> Result<bool, MpaError> {
        while !input.is_empty() {
            let markers = self.config.markers;
            if markers && (self.marker_have > 0 || mpa_marker::is_marker_at(self.position)) {
                self.begin_fpdu();
                self.take_marker(input)?;
                continue;
            }
            self.begin_fpdu();
            if self.take_data(input)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn begin_fpdu(&mut self) {
        if !self.in_fpdu {
            self.in_fpdu = true;
            self.start = self.position;
            self.have = 0;
            self.need = 0;
            self.crc = Crc32c::new(0);
        }
    }

    /// Reads (part of) a marker and checks it once whole.
    fn take_marker(&mut self, input: &mut &[u8]) -> Result<(), MpaError> {
        let n = (MARKER_LEN - self.marker_have).min(input.len());
        self.marker[self.marker_have..self.marker_have + n].copy_from_slice(&input[..n]);
        *input = &input[n..];
        self.marker_have += n;
        self.position += n as u64;
        if self.marker_have < MARKER_LEN {
            return Ok(());
        }
        self.marker_have = 0;
        if self.config.crc {
            self.crc.update(&self.marker);
        }
        let at = self.position - MARKER_LEN as u64;
        let fpduptr = u64::from(u16::from_be_bytes([self.marker[2], self.marker[3]]));
        if fpduptr != at - self.start {
            return Err(MpaError::Marker);
        }
        Ok(())
    }

    /// Copies FPDU octets up to the next marker, the end of ULPDU_Length or
    /// the end of the FPDU. `Ok(true)` when the FPDU is complete.
    fn take_data(&mut self, input: &mut &[u8]) -> Result<bool, MpaError> {
        let want = if self.need == 0 {
            HEADER_LEN - self.have
        } else {
            self.need - self.have
        };
        let mut n = want.min(input.len());
        if self.config.markers {
            n = n.min((MARKER_INTERVAL - self.position % MARKER_INTERVAL) as usize);
        }
        let (src, rest) = input.split_at(n);
        // Covered octets are all but the CRC; the CRC is the last 4.
        let covered_end = if self.need == 0 {
            usize::MAX
        } else {
            self.need - CRC_LEN
        };
        let covered = n.min(covered_end.saturating_sub(self.have));
        let dst = &mut self.buf[self.have..self.have + n];
        if self.config.crc {
            self.crc.copy_update(&mut dst[..covered], &src[..covered]);
            dst[covered..].copy_from_slice(&src[covered..]);
        } else {
            dst.copy_from_slice(src);
        }
        *input = rest;
        self.have += n;
        self.position += n as u64;
        if self.need == 0 && self.have == HEADER_LEN {
            let ulpdu_len = usize::from(u16::from_be_bytes([self.buf[0], self.buf[1]]));
            if ulpdu_len > self.config.ulpdu_max {
                return Err(MpaError::Framing);
            }
            self.need = mpa_fpdu::fpdu_len(ulpdu_len);
        }
        if self.need == 0 || self.have < self.need {
            return Ok(false);
        }
        let c = &self.buf[self.need - CRC_LEN..self.need];
        let carried = crc::from_wire([c[0], c[1], c[2], c[3]]);
        if self.config.crc && !cfg!(fuzzing) && carried != self.crc.finish() {
            return Err(MpaError::Crc);
        }
        Ok(true)
    }
}

/// Whether every marker inside an FPDU's octets (`raw`, starting at stream
/// position `start`) points back at `start`.
fn markers_point_home(start: u64, raw: &[u8]) -> bool {
    let mut at = start.next_multiple_of(MARKER_INTERVAL);
    while at < start + raw.len() as u64 {
        let offset = (at - start) as usize;
        let fpduptr = u16::from_be_bytes([raw[offset + 2], raw[offset + 3]]);
        if u64::from(fpduptr) != at - start {
            return false;
        }
        at += MARKER_INTERVAL;
    }
    true
}

enum InPlace<'i> {
    /// Octets consumed, and the ULPDU within them.
    Ulpdu(usize, &'i [u8]),
    /// Octets consumed; the ULPDU (of this length) is in the buffer.
    Buffered(usize, usize),
    Error(MpaError),
    Assemble,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpa::tx::{Framer, TxConfig};

    fn collect(deframer: &mut Deframer, pieces: &[&[u8]]) -> Result<Vec<Vec<u8>>, MpaError> {
        let mut out = Vec::new();
        for piece in pieces {
            let mut rest = *piece;
            loop {
                let (used, poll) = deframer.poll(rest);
                rest = &rest[used..];
                match poll {
                    Poll::Ulpdu(u) => out.push(u.to_vec()),
                    Poll::NeedMore => break,
                    Poll::Error(e) => return Err(e),
                }
            }
        }
        Ok(out)
    }

    fn stream(crc: bool, markers: bool, ulpdus: &[Vec<u8>]) -> Vec<u8> {
        let mut framer = Framer::new(TxConfig {
            crc,
            markers,
            emss: 1448,
        })
        .unwrap();
        let mut out = vec![0u8; 64 * 1024];
        let mut at = 0;
        for u in ulpdus {
            at += framer.frame(&[u], &mut out[at..]).unwrap();
        }
        out.truncate(at);
        out
    }

    fn config(crc: bool, markers: bool) -> RxConfig {
        RxConfig {
            crc,
            markers,
            ulpdu_max: 1442,
        }
    }

    #[test]
    fn whole_fpdus_are_yielded_in_place() {
        let ulpdus = vec![vec![1u8; 14], vec![2u8; 100], vec![3u8; 1442]];
        let bytes = stream(true, false, &ulpdus);
        let mut d = Deframer::new(config(true, false));
        let (used, poll) = d.poll(&bytes);
        let Poll::Ulpdu(first) = poll else { panic!() };
        assert!(
            core::ptr::eq(first.as_ptr(), bytes[2..].as_ptr()),
            "a slice of the input"
        );
        assert_eq!(used, 20);
        assert_eq!(collect(&mut d, &[&bytes[used..]]).unwrap(), &ulpdus[1..]);
    }

    #[test]
    fn every_split_gives_the_same_ulpdus() {
        for (crc, markers) in [(true, false), (true, true), (false, true), (false, false)] {
            let ulpdus: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 13 + i * 257]).collect();
            let bytes = stream(crc, markers, &ulpdus);
            for cut in 0..bytes.len() {
                let mut d = Deframer::new(config(crc, markers));
                let got = collect(&mut d, &[&bytes[..cut], &bytes[cut..]]).unwrap();
                assert_eq!(got, ulpdus, "crc {crc} markers {markers} cut {cut}");
            }
            let mut d = Deframer::new(config(crc, markers));
            let singles: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(collect(&mut d, &singles).unwrap(), ulpdus);
        }
    }

    #[test]
    fn errors_carry_their_terminate_codes_and_stick() {
        let ulpdus = vec![vec![5u8; 600], vec![6u8; 20]];
        // A bad CRC.
        let mut bytes = stream(true, true, &ulpdus);
        bytes[100] ^= 1;
        let mut d = Deframer::new(config(true, true));
        assert_eq!(collect(&mut d, &[&bytes]), Err(MpaError::Crc));
        assert_eq!(d.poll(&bytes), (0, Poll::Error(MpaError::Crc)), "sticky");
        assert_eq!(
            (
                MpaError::Crc.layer(),
                MpaError::Crc.etype(),
                MpaError::Crc.ecode()
            ),
            (2, 0, 2)
        );
        // A wrong FPDUPTR (the marker at 512 is inside the first FPDU).
        let mut bytes = stream(false, true, &ulpdus);
        bytes[515] ^= 1;
        let mut d = Deframer::new(config(false, true));
        assert_eq!(collect(&mut d, &[&bytes]), Err(MpaError::Marker));
        // A ULPDU_Length over the limit, in place and assembled.
        let bytes = stream(false, false, &[vec![0u8; 1442]]);
        let mut small = Deframer::new(RxConfig {
            ulpdu_max: 1000,
            ..config(false, false)
        });
        assert_eq!(collect(&mut small, &[&bytes]), Err(MpaError::Framing));
        let mut small = Deframer::new(RxConfig {
            ulpdu_max: 1000,
            ..config(false, false)
        });
        assert_eq!(
            collect(&mut small, &[&bytes[..1], &bytes[1..]]),
            Err(MpaError::Framing)
        );
        assert_eq!(
            MpaError::Framing.to_string(),
            "ULPDU_Length longer than this connection accepts (TERM 2/0/0x04)"
        );
    }

    #[test]
    fn without_crc_the_field_is_ignored() {
        let mut bytes = stream(true, false, &[vec![1u8; 30]]);
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let mut d = Deframer::new(config(false, false));
        assert_eq!(collect(&mut d, &[&bytes]).unwrap(), vec![vec![1u8; 30]]);
    }
}
