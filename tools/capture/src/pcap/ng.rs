//! pcapng: a sequence of sections, each a Section Header Block followed by blocks.
//!
//! Every block is `type (4) | total length (4) | body | total length (4)`, with the total
//! length a multiple of 4 and repeated at the end so that a file can be walked backwards.
//! The Section Header Block's type, 0x0A0D0D0A, reads the same in both byte orders; the
//! byte-order magic that follows it decides how the rest of the section is read. Packet
//! blocks refer to interfaces by their index among the section's Interface Description
//! Blocks, which is where the link-layer type and time stamp resolution come from.
//!
//! We read the Enhanced Packet Block, the Simple Packet Block and the obsolete Packet
//! Block, and skip every other block type, checking only its framing.

use std::io::Read;

use super::INTERFACES_MAX;
use super::{Endian, Error, Part, RecordMeta, Source, BLOCK_LEN_MAX, CAPTURED_LEN_MAX};

/// The Section Header Block type as it appears in the file, in either byte order.
pub(super) const SHB_TYPE: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

mod block_type {
    pub(super) const INTERFACE_DESCRIPTION: u32 = 0x0000_0001;
    pub(super) const PACKET_OBSOLETE: u32 = 0x0000_0002;
    pub(super) const SIMPLE_PACKET: u32 = 0x0000_0003;
    pub(super) const ENHANCED_PACKET: u32 = 0x0000_0006;
    pub(super) const SECTION_HEADER: u32 = 0x0a0d_0d0a;
}

/// Smallest legal total length of each block type: 12 bytes of framing plus the fixed
/// part of the body.
mod min_len {
    pub(super) const ANY: u32 = 12;
    pub(super) const SECTION_HEADER: u32 = 28;
    pub(super) const INTERFACE_DESCRIPTION: u32 = 20;
    pub(super) const SIMPLE_PACKET: u32 = 16;
    pub(super) const PACKET: u32 = 32;
}

/// Body offsets of the fixed fields, counted from the first byte after the length word.
mod field {
    // Section Header Block, after the byte-order magic (which the framing code consumes).
    pub(super) const SHB_VERSION_MAJOR: usize = 0;
    pub(super) const SHB_VERSION_MINOR: usize = 2;

    // Interface Description Block.
    pub(super) const IDB_LINKTYPE: usize = 0;
    pub(super) const IDB_SNAPLEN: usize = 4;
    pub(super) const IDB_OPTIONS: usize = 8;

    // Enhanced Packet Block; the obsolete Packet Block differs only in its first word,
    // which holds a 16-bit interface id and a 16-bit drop count.
    pub(super) const EPB_INTERFACE: usize = 0;
    pub(super) const EPB_TS_HIGH: usize = 4;
    pub(super) const EPB_TS_LOW: usize = 8;
    pub(super) const EPB_CAPTURED_LEN: usize = 12;
    pub(super) const EPB_ORIG_LEN: usize = 16;
    pub(super) const EPB_DATA: usize = 20;

    // Simple Packet Block.
    pub(super) const SPB_ORIG_LEN: usize = 0;
    pub(super) const SPB_DATA: usize = 4;

    // Option header: code and value length, then the value padded to 4 bytes.
    pub(super) const OPTION_HEADER_LEN: usize = 4;
}

mod option_code {
    pub(super) const END_OF_OPTIONS: u16 = 0;
    pub(super) const IF_TSRESOL: u16 = 9;
    pub(super) const IF_TSOFFSET: u16 = 14;
}

const _: () = assert!(min_len::PACKET as usize == 12 + field::EPB_DATA);
const _: () = assert!(min_len::SIMPLE_PACKET as usize == 12 + field::SPB_DATA);
const _: () = assert!(min_len::INTERFACE_DESCRIPTION as usize == 12 + field::IDB_OPTIONS);

/// The byte-order magic as written by a little-endian writer.
const BYTE_ORDER_MAGIC_LE: [u8; 4] = [0x4d, 0x3c, 0x2b, 0x1a];
/// The byte-order magic as written by a big-endian writer.
const BYTE_ORDER_MAGIC_BE: [u8; 4] = [0x1a, 0x2b, 0x3c, 0x4d];

/// pcapng: "If this option is not present, a resolution of 10^-6 is assumed".
const TSRESOL_DEFAULT: u8 = 6;

/// State of the current section: its byte order and the interfaces described so far.
#[derive(Debug)]
pub(super) struct Section {
    endian: Endian,
    interfaces: Vec<Interface>,
}

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    /// 0 means "no limit", as the format defines it.
    snaplen: u32,
    /// `if_tsresol`: a negative power of 10, or of 2 if the top bit is set.
    tsresol: u8,
    /// `if_tsoffset`: seconds to add to every time stamp.
    tsoffset_s: i64,
}

/// Where a packet block keeps its interface id and time stamp.
struct PacketFields {
    interface: u32,
    /// `None` for the Simple Packet Block, which has no time stamp.
    ts: Option<u64>,
    captured_len: u32,
    orig_len: u32,
    data_start: usize,
}

impl Section {
    /// Reads the first Section Header Block, whose type word `Reader::new` consumed.
    pub(super) fn read_first<R: Read>(source: &mut Source<R>) -> Result<Self, Error> {
        let mut section = Section {
            endian: Endian::Little,
            interfaces: Vec::new(),
        };
        section.read_section_header(source, 0)?;
        Ok(section)
    }

    /// Reads blocks until a packet block, which it leaves in `source.buf`.
    ///
    /// Every pass of the loop consumes at least one 12-byte block or fails, so it ends.
    pub(super) fn next<R: Read>(
        &mut self,
        source: &mut Source<R>,
        frame: u64,
    ) -> Result<Option<RecordMeta>, Error> {
        loop {
            let start = source.offset;
            let Some(type_bytes) = source.read_array_or_eof::<4>(Part::BlockHeader, None)? else {
                return Ok(None);
            };
            if type_bytes == SHB_TYPE {
                self.read_section_header(source, start)?;
                continue;
            }
            let block_type = self.endian.u32(type_bytes);
            self.read_block(source, start, block_type, frame)?;
            let fields = match block_type {
                block_type::INTERFACE_DESCRIPTION => {
                    self.add_interface(&source.buf, start)?;
                    continue;
                }
                block_type::ENHANCED_PACKET => self.enhanced_fields(&source.buf, false),
                block_type::PACKET_OBSOLETE => self.enhanced_fields(&source.buf, true),
                block_type::SIMPLE_PACKET => self.simple_fields(&source.buf, start, frame)?,
                _ => continue,
            };
            return self
                .take_packet(&mut source.buf, fields, start, frame)
                .map(Some);
        }
    }

    /// Reads the rest of a Section Header Block starting at `start`, and starts a new
    /// section: a new byte order and an empty interface table.
    fn read_section_header<R: Read>(
        &mut self,
        source: &mut Source<R>,
        start: u64,
    ) -> Result<(), Error> {
        let header: [u8; 8] = source.read_array(Part::BlockHeader, start, None)?;
        let [l0, l1, l2, l3, m0, m1, m2, m3] = header;
        let endian = match [m0, m1, m2, m3] {
            BYTE_ORDER_MAGIC_LE => Endian::Little,
            BYTE_ORDER_MAGIC_BE => Endian::Big,
            magic => {
                let magic = u32::from_be_bytes(magic);
                return Err(Error::BadByteOrderMagic {
                    offset: start,
                    magic,
                });
            }
        };
        let len = endian.u32([l0, l1, l2, l3]);
        let block_type = block_type::SECTION_HEADER;
        check_len(block_type, len, min_len::SECTION_HEADER, start)?;
        // The byte-order magic is part of the body and has been read already.
        source.read_into_buf(len - 12, Part::BlockBody, start, None)?;
        strip_trailer(endian, &mut source.buf, len, start)?;
        let major = endian
            .u16_at(&source.buf, field::SHB_VERSION_MAJOR)
            .unwrap_or_default();
        let minor = endian
            .u16_at(&source.buf, field::SHB_VERSION_MINOR)
            .unwrap_or_default();
        if major != 1 {
            return Err(Error::UnsupportedVersion {
                offset: start,
                major,
                minor,
            });
        }
        self.endian = endian;
        self.interfaces.clear();
        Ok(())
    }

    /// Reads the length word, the body and the trailer of a block whose type word (at
    /// `start`) has been read; leaves the body in `source.buf`.
    fn read_block<R: Read>(
        &self,
        source: &mut Source<R>,
        start: u64,
        block_type: u32,
        frame: u64,
    ) -> Result<(), Error> {
        let len_bytes: [u8; 4] = source.read_array(Part::BlockHeader, start, None)?;
        let len = self.endian.u32(len_bytes);
        let (min, frame) = match block_type {
            block_type::INTERFACE_DESCRIPTION => (min_len::INTERFACE_DESCRIPTION, None),
            block_type::ENHANCED_PACKET | block_type::PACKET_OBSOLETE => {
                (min_len::PACKET, Some(frame))
            }
            block_type::SIMPLE_PACKET => (min_len::SIMPLE_PACKET, Some(frame)),
            _ => (min_len::ANY, None),
        };
        check_len(block_type, len, min, start)?;
        source.read_into_buf(len - 8, Part::BlockBody, start, frame)?;
        strip_trailer(self.endian, &mut source.buf, len, start)
    }

    /// Records an Interface Description Block whose body is `body`.
    fn add_interface(&mut self, body: &[u8], start: u64) -> Result<(), Error> {
        if self.interfaces.len() >= INTERFACES_MAX {
            return Err(Error::TooManyInterfaces {
                offset: start,
                limit: INTERFACES_MAX,
            });
        }
        let endian = self.endian;
        let mut interface = Interface {
            linktype: u32::from(endian.u16_at(body, field::IDB_LINKTYPE).unwrap_or_default()),
            snaplen: endian.u32_at(body, field::IDB_SNAPLEN).unwrap_or_default(),
            tsresol: TSRESOL_DEFAULT,
            tsoffset_s: 0,
        };
        let options = body.get(field::IDB_OPTIONS..).unwrap_or_default();
        parse_interface_options(endian, options, &mut interface)
            .ok_or(Error::BadOptions { offset: start })?;
        self.interfaces.push(interface);
        Ok(())
    }

    /// Reads the fixed fields of an Enhanced (or obsolete) Packet Block. The minimum block
    /// length guarantees they are all present.
    fn enhanced_fields(&self, body: &[u8], obsolete: bool) -> PacketFields {
        let endian = self.endian;
        let interface = if obsolete {
            u32::from(
                endian
                    .u16_at(body, field::EPB_INTERFACE)
                    .unwrap_or_default(),
            )
        } else {
            endian
                .u32_at(body, field::EPB_INTERFACE)
                .unwrap_or_default()
        };
        let high = endian.u32_at(body, field::EPB_TS_HIGH).unwrap_or_default();
        let low = endian.u32_at(body, field::EPB_TS_LOW).unwrap_or_default();
        PacketFields {
            interface,
            ts: Some(u64::from(high) << 32 | u64::from(low)),
            captured_len: endian
                .u32_at(body, field::EPB_CAPTURED_LEN)
                .unwrap_or_default(),
            orig_len: endian.u32_at(body, field::EPB_ORIG_LEN).unwrap_or_default(),
            data_start: field::EPB_DATA,
        }
    }

    /// Reads a Simple Packet Block: it has no captured length, so that is the original
    /// length cut to interface 0's snapshot length and to what the block holds.
    fn simple_fields(&self, body: &[u8], start: u64, frame: u64) -> Result<PacketFields, Error> {
        let Some(interface) = self.interfaces.first() else {
            return Err(Error::UnknownInterface {
                offset: start,
                frame,
                interface: 0,
            });
        };
        let orig_len = self
            .endian
            .u32_at(body, field::SPB_ORIG_LEN)
            .unwrap_or_default();
        let in_block = body.len().saturating_sub(field::SPB_DATA);
        let mut captured_len = orig_len.min(u32::try_from(in_block).unwrap_or(u32::MAX));
        if interface.snaplen != 0 {
            captured_len = captured_len.min(interface.snaplen);
        }
        Ok(PacketFields {
            interface: 0,
            ts: None,
            captured_len,
            orig_len,
            data_start: field::SPB_DATA,
        })
    }

    /// Checks a packet block's fields against the section and the limits, then moves its
    /// data to the front of `buf` so that the record can borrow all of `buf`.
    fn take_packet(
        &self,
        buf: &mut Vec<u8>,
        fields: PacketFields,
        start: u64,
        frame: u64,
    ) -> Result<RecordMeta, Error> {
        let index = usize::try_from(fields.interface).unwrap_or(usize::MAX);
        let Some(interface) = self.interfaces.get(index) else {
            return Err(Error::UnknownInterface {
                offset: start,
                frame,
                interface: fields.interface,
            });
        };
        let len = fields.captured_len;
        if len > CAPTURED_LEN_MAX {
            let limit = CAPTURED_LEN_MAX;
            return Err(Error::RecordTooLong {
                offset: start,
                frame,
                len,
                limit,
            });
        }
        // `len` is at most CAPTURED_LEN_MAX, so the sum cannot overflow.
        let data = fields.data_start..fields.data_start + len as usize;
        if data.end > buf.len() {
            return Err(Error::PacketExceedsBlock {
                offset: start,
                frame,
                len,
            });
        }
        buf.copy_within(data, 0);
        buf.truncate(len as usize);
        let ts_ns = fields.ts.map_or(0, |ts| interface.ts_ns(ts));
        Ok(RecordMeta {
            ts_ns,
            linktype: interface.linktype,
            orig_len: fields.orig_len,
        })
    }
}

impl Interface {
    /// Converts a time stamp in this interface's units to nanoseconds since the epoch,
    /// saturating at 0 and `u64::MAX` rather than wrapping.
    fn ts_ns(&self, ts: u64) -> u64 {
        let exponent = u32::from(self.tsresol & 0x7f);
        let ts = u128::from(ts);
        let ns = if self.tsresol & 0x80 == 0 {
            // Units of 10^-exponent seconds.
            match exponent.checked_sub(9) {
                None => ts * 10u128.pow(9 - exponent),
                Some(excess) => 10u128.checked_pow(excess).map_or(0, |divisor| ts / divisor),
            }
        } else {
            // Units of 2^-exponent seconds; exponent < 128, so the shift is in range.
            (ts * 1_000_000_000).checked_shr(exponent).unwrap_or(0)
        };
        // `ns` < 2^94 and the offset term < 2^94, so the sum fits an i128.
        let offset_ns = i128::from(self.tsoffset_s) * 1_000_000_000;
        let total = i128::try_from(ns)
            .unwrap_or(i128::MAX)
            .saturating_add(offset_ns);
        u64::try_from(total.max(0)).unwrap_or(u64::MAX)
    }
}

/// Reads `if_tsresol` and `if_tsoffset` from an option list; `None` if an option's value
/// runs past the end of the list.
fn parse_interface_options(
    endian: Endian,
    options: &[u8],
    interface: &mut Interface,
) -> Option<()> {
    let mut at = 0;
    while options.len().saturating_sub(at) >= field::OPTION_HEADER_LEN {
        let code = endian.u16_at(options, at)?;
        let len = usize::from(endian.u16_at(options, at + 2)?);
        let value_start = at + field::OPTION_HEADER_LEN;
        let value = options.get(value_start..value_start + len)?;
        match code {
            option_code::END_OF_OPTIONS => break,
            option_code::IF_TSRESOL if len == 1 => interface.tsresol = *value.first()?,
            option_code::IF_TSOFFSET if len == 8 => {
                interface.tsoffset_s = endian.u64_at(value, 0)? as i64;
            }
            _ => {}
        }
        // Values are padded to a multiple of 4; the padding may be cut short by the
        // end of the list, which the loop condition then notices.
        at = value_start + len.next_multiple_of(4);
    }
    Some(())
}

/// Rejects block lengths that are too long, too short for the type or not a multiple of 4.
fn check_len(block_type: u32, len: u32, min: u32, start: u64) -> Result<(), Error> {
    if len > BLOCK_LEN_MAX {
        return Err(Error::BlockTooLong {
            offset: start,
            len,
            limit: BLOCK_LEN_MAX,
        });
    }
    if len < min || !len.is_multiple_of(4) {
        return Err(Error::BadBlockLength {
            offset: start,
            block_type,
            len,
        });
    }
    Ok(())
}

/// Checks that the last word of `buf` repeats the block length `len`, then drops it.
fn strip_trailer(endian: Endian, buf: &mut Vec<u8>, len: u32, start: u64) -> Result<(), Error> {
    let body_len = buf.len().saturating_sub(4);
    let trailer = endian.u32_at(buf, body_len).unwrap_or_default();
    if trailer != len {
        return Err(Error::BlockLengthMismatch {
            offset: start,
            header: len,
            trailer,
        });
    }
    buf.truncate(body_len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(tsresol: u8, tsoffset_s: i64) -> Interface {
        Interface {
            linktype: 1,
            snaplen: 0,
            tsresol,
            tsoffset_s,
        }
    }

    #[test]
    fn time_stamp_resolutions() {
        assert_eq!(interface(6, 0).ts_ns(1_500_000), 1_500_000_000);
        assert_eq!(interface(9, 0).ts_ns(123), 123);
        assert_eq!(interface(12, 0).ts_ns(123_456), 123);
        assert_eq!(interface(0x80 | 10, 0).ts_ns(1024), 1_000_000_000);
        assert_eq!(interface(0, 2).ts_ns(1), 3_000_000_000);
        assert_eq!(
            interface(0, -5).ts_ns(1),
            0,
            "negative times saturate at the epoch"
        );
        assert_eq!(
            interface(0, 0).ts_ns(u64::MAX),
            u64::MAX,
            "huge times saturate"
        );
        assert_eq!(interface(127, 0).ts_ns(u64::MAX), 0);
        assert_eq!(interface(0xff, 0).ts_ns(u64::MAX), 0);
    }

    #[test]
    fn options_are_bounded() {
        let mut idb = interface(6, 0);
        // if_tsresol = 9, padded, then end of options.
        let options = [9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            parse_interface_options(Endian::Little, &options, &mut idb),
            Some(())
        );
        assert_eq!(idb.tsresol, 9);
        // An option claiming 0xffff bytes in an 8-byte list.
        let options = [2, 0, 0xff, 0xff, 1, 2, 3, 4];
        assert_eq!(
            parse_interface_options(Endian::Little, &options, &mut idb),
            None
        );
        // A value whose padding is cut by the end of the list is fine.
        let options = [9, 0, 1, 0, 3];
        assert_eq!(
            parse_interface_options(Endian::Little, &options, &mut idb),
            Some(())
        );
        assert_eq!(idb.tsresol, 3);
    }

    #[test]
    fn block_lengths() {
        assert!(check_len(6, 32, min_len::PACKET, 0).is_ok());
        assert!(matches!(
            check_len(6, 28, 32, 0),
            Err(Error::BadBlockLength { len: 28, .. })
        ));
        assert!(matches!(
            check_len(6, 34, 32, 0),
            Err(Error::BadBlockLength { len: 34, .. })
        ));
        let too_long = BLOCK_LEN_MAX + 4;
        assert!(matches!(
            check_len(6, too_long, 32, 0),
            Err(Error::BlockTooLong { .. })
        ));
    }
}
