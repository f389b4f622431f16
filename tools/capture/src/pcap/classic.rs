//! Classic pcap: a 24-byte file header, then records of a 16-byte header and the data.
//!
//! Field layout (libpcap "pcap-savefile"): the file header holds the magic number, major
//! and minor version, two unused words (time zone and accuracy, which old writers filled
//! in and readers must ignore), the snapshot length and the link-layer type word. Each
//! record header holds seconds, the sub-second fraction (micro- or nanoseconds by magic),
//! the captured length and the original length.

use std::io::Read;

use super::{Endian, Error, Part, RecordMeta, Source, CAPTURED_LEN_MAX};

mod field {
    use core::ops::Range;

    // File header, counted from the start of the file (the magic is bytes 0..4).
    pub(super) const VERSION_MAJOR: Range<usize> = 4..6;
    pub(super) const VERSION_MINOR: Range<usize> = 6..8;
    pub(super) const LINKTYPE: Range<usize> = 20..24;
    pub(super) const FILE_HEADER_LEN: usize = LINKTYPE.end;

    // Record header.
    pub(super) const TS_SEC: Range<usize> = 0..4;
    pub(super) const TS_FRACTION: Range<usize> = 4..8;
    pub(super) const CAPTURED_LEN: Range<usize> = 8..12;
    pub(super) const ORIG_LEN: Range<usize> = 12..16;
    pub(super) const RECORD_HEADER_LEN: usize = ORIG_LEN.end;

    /// The link-layer type is the low 16 bits of its word; the high bits carry FCS
    /// information that the TCP path does not need (IP lengths strip an FCS anyway).
    pub(super) const LINKTYPE_MASK: u32 = 0xffff;
}

const _: () = assert!(field::FILE_HEADER_LEN == 24);
const _: () = assert!(field::RECORD_HEADER_LEN == 16);

/// Magic numbers as read little-endian from the first four bytes of the file.
const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;

/// What the file header says about every record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    endian: Endian,
    /// Nanoseconds per unit of the record's fraction field: 1000 or 1.
    fraction_ns: u64,
    linktype: u32,
}

impl Header {
    /// Reads the rest of the file header after `magic`, the first four bytes.
    pub(super) fn read<R: Read>(source: &mut Source<R>, magic: [u8; 4]) -> Result<Self, Error> {
        let (endian, fraction_ns) = match u32::from_le_bytes(magic) {
            MAGIC_MICROS => (Endian::Little, 1000),
            MAGIC_NANOS => (Endian::Little, 1),
            m if m.swap_bytes() == MAGIC_MICROS => (Endian::Big, 1000),
            m if m.swap_bytes() == MAGIC_NANOS => (Endian::Big, 1),
            _ => {
                return Err(Error::BadMagic {
                    magic: u32::from_be_bytes(magic),
                })
            }
        };
        let rest: [u8; field::FILE_HEADER_LEN - 4] =
            source.read_array(Part::FileHeader, 0, None)?;
        let mut header = [0; field::FILE_HEADER_LEN];
        header[..4].copy_from_slice(&magic);
        header[4..].copy_from_slice(&rest);
        let major = endian
            .u16_at(&header, field::VERSION_MAJOR.start)
            .unwrap_or_default();
        let minor = endian
            .u16_at(&header, field::VERSION_MINOR.start)
            .unwrap_or_default();
        // Every classic pcap writer since 1998 writes 2.4; older minors differ only in
        // details this reader does not use, so only the major version is enforced.
        if major != 2 {
            return Err(Error::UnsupportedVersion {
                offset: 0,
                major,
                minor,
            });
        }
        let linktype = endian
            .u32_at(&header, field::LINKTYPE.start)
            .unwrap_or_default();
        Ok(Header {
            endian,
            fraction_ns,
            linktype: linktype & field::LINKTYPE_MASK,
        })
    }

    /// Reads the next record into `source.buf`, or returns `None` at a clean end of file.
    pub(super) fn next<R: Read>(
        &self,
        source: &mut Source<R>,
        frame: u64,
    ) -> Result<Option<RecordMeta>, Error> {
        let start = source.offset;
        let Some(header) = source
            .read_array_or_eof::<{ field::RECORD_HEADER_LEN }>(Part::RecordHeader, Some(frame))?
        else {
            return Ok(None);
        };
        let word = |range: core::ops::Range<usize>| {
            self.endian.u32_at(&header, range.start).unwrap_or_default()
        };
        let captured_len = word(field::CAPTURED_LEN);
        if captured_len > CAPTURED_LEN_MAX {
            return Err(Error::RecordTooLong {
                offset: start,
                frame,
                len: captured_len,
                limit: CAPTURED_LEN_MAX,
            });
        }
        let data_start = source.offset;
        source.read_into_buf(captured_len, Part::RecordData, data_start, Some(frame))?;
        // Both factors fit in 32 bits and the fraction multiplier is at most 1000, so the
        // sum stays below 2^63: no overflow is possible.
        let ts_ns = u64::from(word(field::TS_SEC)) * 1_000_000_000
            + u64::from(word(field::TS_FRACTION)) * self.fraction_ns;
        Ok(Some(RecordMeta {
            ts_ns,
            linktype: self.linktype,
            orig_len: word(field::ORIG_LEN),
        }))
    }
}
