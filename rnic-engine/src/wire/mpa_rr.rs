//! MPA Request and Reply frames (RFC 5044 §7.1) with RFC 6581 enhanced data.
//!
//! ```text
//! offset 0..16  Key: "MPA ID Req Frame" or "MPA ID Rep Frame"
//! offset 16     |M|C|R|S| Res |     (S is RFC 6581's; RFC 5044 had Res there)
//! offset 17     Rev
//! offset 18..20 PD_Length
//! offset 20..   Private Data (PD_Length octets; when S=1 it begins with the
//!               4 octets of enhanced data, RFC 6581 §9)
//! ```
//!
//! RFC 6581 §9: "this field MUST be sent in network byte order, with the IRD
//! and ORD encoded as 14-bit unsigned integers":
//!
//! ```text
//! |A|B|        IRD (14)           |C|D|        ORD (14)           |
//! ```
//!
//! Facts from the siw captures (`rping_v2*.pcap`, `mpa_reject_crc.pcap`):
//! Linux sends S (its `MPA_RR_FLAG_ENHANCED`, 0x10) with Rev 2 and
//! PD_Length 4 when it has no ULP private data; a reject is flags 0x30
//! (R|S) with IRD = ORD = 0 and no C bit; an MPA v1 frame (`rping_v1_crc`)
//! is flags 0x40 (C), Rev 1, PD_Length 0. siw's optional "GSO" experiment
//! uses the reserved bit 0x08; [`Repr::reserved`] keeps it.
//!
//! Never read past the frame: a Reply and the first FPDU may share a TCP
//! segment, so [`Packet::frame_len`] says exactly how many octets the frame
//! occupies (siw once had this bug, fixed by the 2019 patch "siw: MPA Reply
//! handler tries to read beyond MPA message").

use super::{be, Error, Field, Rest, Result};

mod field {
    use super::{Field, Rest};

    pub(crate) const KEY: Field = 0..16;
    pub(crate) const FLAGS: usize = 16;
    pub(crate) const REV: usize = 17;
    pub(crate) const PD_LENGTH: Field = 18..20;
    pub(crate) const PRIVATE_DATA: Rest = 20..;

    /// RFC 5044 §7.1: the sender requires Markers in the frames it receives.
    pub(crate) const FLAG_M: u8 = 0x80;
    /// RFC 5044 §7.1: CRC; if either side sets it, both use CRC.
    pub(crate) const FLAG_C: u8 = 0x40;
    /// RFC 5044 §7.1: in a Reply, the connection is rejected.
    pub(crate) const FLAG_R: u8 = 0x20;
    /// RFC 6581 §6: "One, if the Private Data begins with the enhanced RDMA
    /// connection establishment data".
    pub(crate) const FLAG_S: u8 = 0x10;
    /// RFC 6581 §6: "Res: One bit smaller than in [RFC5044]". RFC 5044: set
    /// to zero when sending, not checked on reception.
    pub(crate) const FLAGS_RESERVED: u8 = 0x0F;

    // Enhanced data, relative to the start of the private data.
    pub(crate) const IRD_WORD: Field = 0..2;
    pub(crate) const ORD_WORD: Field = 2..4;
    /// RFC 6581 §9.2 A: peer-to-peer connection model (on the IRD word).
    pub(crate) const FLAG_A: u16 = 0x8000;
    /// RFC 6581 §9.2 B: zero-length Send RTR (on the IRD word).
    pub(crate) const FLAG_B: u16 = 0x4000;
    /// RFC 6581 §9.2 C: zero-length RDMA Write RTR (on the ORD word).
    pub(crate) const FLAG_C_RTR: u16 = 0x8000;
    /// RFC 6581 §9.2 D: zero-length RDMA Read RTR (on the ORD word).
    pub(crate) const FLAG_D_RTR: u16 = 0x4000;
    pub(crate) const IRD_ORD_MASK: u16 = 0x3FFF;
}

/// Length of the fixed part of a Request or Reply (key, flags, rev, PD_Length).
pub const HEADER_LEN: usize = field::PRIVATE_DATA.start;
/// Length of the RFC 6581 enhanced data at the start of the private data.
pub const ENHANCED_LEN: usize = field::ORD_WORD.end;
/// RFC 5044 §7.1: PD_Length above 512 makes the frame improperly formatted.
pub const PRIVATE_DATA_LEN_MAX: usize = 512;
/// The longest frame: the fixed part plus the most private data.
pub const FRAME_LEN_MAX: usize = HEADER_LEN + PRIVATE_DATA_LEN_MAX;
/// RFC 6581 §9.1: "An all ones value (0x3FFF) indicates that automatic
/// negotiation of the IRD or ORD is not desired".
pub const IRD_ORD_NO_NEGOTIATION: u16 = field::IRD_ORD_MASK;
/// The key of an MPA Request frame.
pub const KEY_REQUEST: [u8; 16] = *b"MPA ID Req Frame";
/// The key of an MPA Reply frame.
pub const KEY_REPLY: [u8; 16] = *b"MPA ID Rep Frame";
/// MPA revision of RFC 5044.
pub const REVISION_1: u8 = 1;
/// MPA revision of RFC 6581 ("MUST be set to two or higher" for enhanced).
pub const REVISION_2: u8 = 2;

const _: () = assert!(HEADER_LEN == 20);
const _: () = assert!(ENHANCED_LEN == 4);

/// Which of the two startup frames a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// "MPA ID Req Frame", sent by the connection initiator.
    Request,
    /// "MPA ID Rep Frame", sent by the responder.
    Reply,
}

impl FrameKind {
    /// The 16-octet key of this frame kind.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => &KEY_REQUEST,
            FrameKind::Reply => &KEY_REPLY,
        }
    }

    /// The frame kind a 16-octet key names, if any.
    pub fn from_key(key: &[u8]) -> Option<FrameKind> {
        if key == KEY_REQUEST {
            Some(FrameKind::Request)
        } else if key == KEY_REPLY {
            Some(FrameKind::Reply)
        } else {
            None
        }
    }
}

/// A read/write view of an MPA Request or Reply frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks that the fixed part and the private data
    /// it announces fit ([`Packet::check_len`]).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the fixed part and all `PD_Length`
    /// octets of private data. PD_Length above 512 is not a length error:
    /// [`Repr::parse`] rejects it.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.frame_len() {
            Err(Error)
        } else {
            Ok(())
        }
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Octets the whole frame occupies: the fixed part plus PD_Length.
    ///
    /// # Panics
    /// If the buffer is shorter than [`HEADER_LEN`].
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_length())
    }

    /// The 16-octet key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The frame kind the key names, or `None` for any other key.
    pub fn frame_kind(&self) -> Option<FrameKind> {
        FrameKind::from_key(self.key())
    }

    /// The flags octet, unparsed.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// M: markers required in the frames sent to this frame's sender.
    pub fn markers(&self) -> bool {
        self.flags() & field::FLAG_M != 0
    }

    /// C: CRC requested.
    pub fn crc(&self) -> bool {
        self.flags() & field::FLAG_C != 0
    }

    /// R: rejected (meaningful in a Reply).
    pub fn reject(&self) -> bool {
        self.flags() & field::FLAG_R != 0
    }

    /// S: the private data begins with RFC 6581 enhanced data.
    pub fn enhanced(&self) -> bool {
        self.flags() & field::FLAG_S != 0
    }

    /// The four reserved low bits of the flags octet.
    pub fn reserved(&self) -> u8 {
        self.flags() & field::FLAGS_RESERVED
    }

    /// The MPA revision.
    pub fn revision(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length: octets of private data, enhanced data included.
    pub fn pd_length(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::PD_LENGTH])
    }

    /// All private data (enhanced data included when S=1).
    pub fn private_data(&self) -> &[u8] {
        let data = &self.buffer.as_ref()[field::PRIVATE_DATA];
        &data[..usize::from(self.pd_length())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the key.
    pub fn set_key(&mut self, kind: FrameKind) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(kind.key());
    }

    /// Writes the flags octet.
    pub fn set_flags(&mut self, flags: u8) {
        self.buffer.as_mut()[field::FLAGS] = flags;
    }

    /// Writes the revision.
    pub fn set_revision(&mut self, revision: u8) {
        self.buffer.as_mut()[field::REV] = revision;
    }

    /// Writes PD_Length.
    pub fn set_pd_length(&mut self, length: u16) {
        be::put_u16(&mut self.buffer.as_mut()[field::PD_LENGTH], length);
    }

    /// The private data, for writing (PD_Length must be set first).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let length = usize::from(self.pd_length());
        &mut self.buffer.as_mut()[field::PRIVATE_DATA][..length]
    }
}

/// A read/write view of the 4 octets of RFC 6581 enhanced data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnhancedPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EnhancedPacket<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> EnhancedPacket<T> {
        EnhancedPacket { buffer }
    }

    /// Wraps a buffer of at least [`ENHANCED_LEN`] octets.
    pub fn new_checked(buffer: T) -> Result<EnhancedPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the 4 octets.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ENHANCED_LEN {
            Err(Error)
        } else {
            Ok(())
        }
    }

    fn ird_word(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::IRD_WORD])
    }

    fn ord_word(&self) -> u16 {
        be::u16(&self.buffer.as_ref()[field::ORD_WORD])
    }

    /// A: peer-to-peer connection model.
    pub fn peer_to_peer(&self) -> bool {
        self.ird_word() & field::FLAG_A != 0
    }

    /// B: zero-length Send (FULPDU) RTR.
    pub fn rtr_send(&self) -> bool {
        self.ird_word() & field::FLAG_B != 0
    }

    /// C: zero-length RDMA Write RTR.
    pub fn rtr_write(&self) -> bool {
        self.ord_word() & field::FLAG_C_RTR != 0
    }

    /// D: zero-length RDMA Read RTR.
    pub fn rtr_read(&self) -> bool {
        self.ord_word() & field::FLAG_D_RTR != 0
    }

    /// IRD, 14 bits.
    pub fn ird(&self) -> u16 {
        self.ird_word() & field::IRD_ORD_MASK
    }

    /// ORD, 14 bits.
    pub fn ord(&self) -> u16 {
        self.ord_word() & field::IRD_ORD_MASK
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EnhancedPacket<T> {
    /// Writes the IRD word: A, B and the 14-bit IRD.
    pub fn set_ird_word(&mut self, peer_to_peer: bool, rtr_send: bool, ird: u16) {
        let word = flag(peer_to_peer, field::FLAG_A)
            | flag(rtr_send, field::FLAG_B)
            | (ird & field::IRD_ORD_MASK);
        be::put_u16(&mut self.buffer.as_mut()[field::IRD_WORD], word);
    }

    /// Writes the ORD word: C, D and the 14-bit ORD.
    pub fn set_ord_word(&mut self, rtr_write: bool, rtr_read: bool, ord: u16) {
        let word = flag(rtr_write, field::FLAG_C_RTR)
            | flag(rtr_read, field::FLAG_D_RTR)
            | (ord & field::IRD_ORD_MASK);
        be::put_u16(&mut self.buffer.as_mut()[field::ORD_WORD], word);
    }
}

fn flag(set: bool, bit: u16) -> u16 {
    if set {
        bit
    } else {
        0
    }
}

/// RFC 6581 §9 enhanced connection establishment data.
///
/// All 32 bits are fields, so every value round-trips. IRD and ORD are 14-bit;
/// [`EnhancedRepr::emit`] asserts that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EnhancedRepr {
    /// A: peer-to-peer model (1) or client-server (0).
    pub peer_to_peer: bool,
    /// B: zero-length Send RTR requested (Request) or supported (Reply).
    pub rtr_send: bool,
    /// C: zero-length RDMA Write RTR.
    pub rtr_write: bool,
    /// D: zero-length RDMA Read RTR.
    pub rtr_read: bool,
    /// Inbound RDMA Read queue depth; 0x3FFF leaves negotiation to the ULP.
    pub ird: u16,
    /// Outbound RDMA Read queue depth; 0x3FFF leaves negotiation to the ULP.
    pub ord: u16,
}

impl EnhancedRepr {
    /// Parses the enhanced data.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &EnhancedPacket<&T>) -> Result<EnhancedRepr> {
        packet.check_len()?;
        Ok(EnhancedRepr {
            peer_to_peer: packet.peer_to_peer(),
            rtr_send: packet.rtr_send(),
            rtr_write: packet.rtr_write(),
            rtr_read: packet.rtr_read(),
            ird: packet.ird(),
            ord: packet.ord(),
        })
    }

    /// Writes the enhanced data.
    ///
    /// # Panics
    /// If IRD or ORD does not fit in 14 bits (a programmer error: the
    /// negotiation code clamps them).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut EnhancedPacket<T>) {
        assert!(
            self.ird <= IRD_ORD_NO_NEGOTIATION,
            "IRD {} is not 14-bit",
            self.ird
        );
        assert!(
            self.ord <= IRD_ORD_NO_NEGOTIATION,
            "ORD {} is not 14-bit",
            self.ord
        );
        packet.set_ird_word(self.peer_to_peer, self.rtr_send, self.ird);
        packet.set_ord_word(self.rtr_write, self.rtr_read, self.ord);
    }
}

/// An MPA Request or Reply.
///
/// `parse` accepts any revision and any combination of flags: which ones a
/// responder accepts is the connection manager's decision (RFC 5044 §7.1
/// closes the connection on an unsupported revision; RFC 6581 §10 has an
/// unenhanced responder treat S=1 as improperly formatted). It rejects a key
/// that is neither frame's, PD_Length above 512, and S=1 with fewer than 4
/// octets of private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Request or Reply.
    pub kind: FrameKind,
    /// M: markers required in the frames sent to this frame's sender.
    pub markers: bool,
    /// C: CRC requested.
    pub crc: bool,
    /// R: rejected (a Request should carry 0).
    pub reject: bool,
    /// The four reserved low flag bits, kept verbatim.
    pub reserved: u8,
    /// Rev.
    pub revision: u8,
    /// The enhanced data; `Some` exactly when S=1.
    pub enhanced: Option<EnhancedRepr>,
    /// The ULP's private data (after the enhanced data when S=1).
    pub private_data: &'a [u8],
}

impl<'a> Repr<'a> {
    /// Parses a frame; see the type's docs for what is rejected.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>> {
        packet.check_len()?;
        let kind = packet.frame_kind().ok_or(Error)?;
        if usize::from(packet.pd_length()) > PRIVATE_DATA_LEN_MAX {
            return Err(Error);
        }
        let data = &packet.buffer.as_ref()[field::PRIVATE_DATA][..usize::from(packet.pd_length())];
        let (enhanced, private_data) = if packet.enhanced() {
            let (head, rest) = data.split_at_checked(ENHANCED_LEN).ok_or(Error)?;
            (
                Some(EnhancedRepr::parse(&EnhancedPacket::new_unchecked(head))?),
                rest,
            )
        } else {
            (None, data)
        };
        Ok(Repr {
            kind,
            markers: packet.markers(),
            crc: packet.crc(),
            reject: packet.reject(),
            reserved: packet.reserved(),
            revision: packet.revision(),
            enhanced,
            private_data,
        })
    }

    /// PD_Length this frame carries: enhanced data plus ULP private data.
    pub fn pd_length(&self) -> usize {
        self.enhanced.map_or(0, |_| ENHANCED_LEN) + self.private_data.len()
    }

    /// Octets [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// The flags octet this frame carries.
    pub fn flags(&self) -> u8 {
        let mut flags = self.reserved & field::FLAGS_RESERVED;
        for (set, bit) in [
            (self.markers, field::FLAG_M),
            (self.crc, field::FLAG_C),
            (self.reject, field::FLAG_R),
            (self.enhanced.is_some(), field::FLAG_S),
        ] {
            if set {
                flags |= bit;
            }
        }
        flags
    }

    /// Writes the frame into the first [`Repr::buffer_len`] octets.
    ///
    /// # Panics
    /// If the buffer is too short, the private data makes PD_Length exceed
    /// 512, or the reserved bits do not fit in 4 bits: all programmer errors.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        assert!(
            self.pd_length() <= PRIVATE_DATA_LEN_MAX,
            "MPA private data over 512 octets"
        );
        assert!(
            self.reserved <= field::FLAGS_RESERVED,
            "MPA reserved flags are 4 bits"
        );
        packet.set_key(self.kind);
        packet.set_flags(self.flags());
        packet.set_revision(self.revision);
        // The assertion above keeps this within u16.
        packet.set_pd_length(self.pd_length() as u16);
        let data = packet.private_data_mut();
        let rest = match self.enhanced {
            Some(enhanced) => {
                let (head, rest) = data.split_at_mut(ENHANCED_LEN);
                enhanced.emit(&mut EnhancedPacket::new_unchecked(head));
                rest
            }
            None => data,
        };
        rest.copy_from_slice(self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// siw's MPA v2 Request, `rping_v2_crc.pcap` frame 4: C and S set, Rev 2,
    /// PD_Length 4, IRD = ORD = 1, client-server.
    static SIW_REQUEST_V2_CRC: [u8; 24] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x50, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01,
    ];
    /// siw's peer-to-peer Reply, `rping_v2_p2p_write_rtr.pcap` frame 6: A and
    /// C (Write RTR) set, IRD = ORD = 1.
    static SIW_REPLY_P2P_WRITE: [u8; 24] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x50, 0x02, 0x00, 0x04, 0x80, 0x01, 0x80, 0x01,
    ];
    /// siw's reject, `mpa_reject_crc.pcap` frame 6: R and S, no C, IRD = ORD = 0.
    static SIW_REPLY_REJECT: [u8; 24] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x70, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x30, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
    ];
    /// siw's MPA v1 Request, `rping_v1_crc.pcap` frame 4.
    static SIW_REQUEST_V1_CRC: [u8; 20] = [
        0x4d, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6d,
        0x65, 0x40, 0x01, 0x00, 0x00,
    ];

    fn enhanced(p2p: bool, write: bool, ird: u16, ord: u16) -> Option<EnhancedRepr> {
        Some(EnhancedRepr {
            peer_to_peer: p2p,
            rtr_send: false,
            rtr_write: write,
            rtr_read: false,
            ird,
            ord,
        })
    }

    #[test]
    fn test_deconstruct_siw_request() {
        let packet = Packet::new_checked(&SIW_REQUEST_V2_CRC[..]).unwrap();
        assert_eq!(packet.frame_kind(), Some(FrameKind::Request));
        assert!(!packet.markers());
        assert!(packet.crc());
        assert!(!packet.reject());
        assert!(packet.enhanced());
        assert_eq!(packet.reserved(), 0);
        assert_eq!(packet.revision(), 2);
        assert_eq!(packet.pd_length(), 4);
        assert_eq!(packet.frame_len(), 24);
        let enh = EnhancedPacket::new_checked(packet.private_data()).unwrap();
        assert_eq!((enh.ird(), enh.ord(), enh.peer_to_peer()), (1, 1, false));
    }

    #[test]
    fn test_parse_siw_frames() {
        let cases: [(&[u8], Repr<'_>); 4] = [
            (
                &SIW_REQUEST_V2_CRC,
                Repr {
                    kind: FrameKind::Request,
                    markers: false,
                    crc: true,
                    reject: false,
                    reserved: 0,
                    revision: 2,
                    enhanced: enhanced(false, false, 1, 1),
                    private_data: &[],
                },
            ),
            (
                &SIW_REPLY_P2P_WRITE,
                Repr {
                    kind: FrameKind::Reply,
                    markers: false,
                    crc: true,
                    reject: false,
                    reserved: 0,
                    revision: 2,
                    enhanced: enhanced(true, true, 1, 1),
                    private_data: &[],
                },
            ),
            (
                &SIW_REPLY_REJECT,
                Repr {
                    kind: FrameKind::Reply,
                    markers: false,
                    crc: false,
                    reject: true,
                    reserved: 0,
                    revision: 2,
                    enhanced: enhanced(false, false, 0, 0),
                    private_data: &[],
                },
            ),
            (
                &SIW_REQUEST_V1_CRC,
                Repr {
                    kind: FrameKind::Request,
                    markers: false,
                    crc: true,
                    reject: false,
                    reserved: 0,
                    revision: 1,
                    enhanced: None,
                    private_data: &[],
                },
            ),
        ];
        for (bytes, want) in cases {
            let repr = Repr::parse(&Packet::new_checked(bytes).unwrap()).unwrap();
            assert_eq!(repr, want);
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut out[..]));
            assert_eq!(&out[..], bytes, "emit reproduces the siw bytes");
        }
    }

    #[test]
    fn test_never_reads_past_the_frame() {
        // A Reply followed by the first FPDU in the same segment.
        let mut bytes = SIW_REPLY_P2P_WRITE.to_vec();
        bytes.extend_from_slice(&[0x00, 0x0e, 0xc1, 0x40]);
        let packet = Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(packet.frame_len(), 24);
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(repr.private_data, &[] as &[u8]);
        assert_eq!(repr.buffer_len(), 24);
    }

    #[test]
    fn test_private_data_after_enhanced_data() {
        let repr = Repr {
            kind: FrameKind::Request,
            markers: true,
            crc: false,
            reject: false,
            reserved: 0x8,
            revision: 2,
            enhanced: Some(EnhancedRepr {
                peer_to_peer: true,
                rtr_send: true,
                rtr_write: false,
                rtr_read: true,
                ird: IRD_ORD_NO_NEGOTIATION,
                ord: 7,
            }),
            private_data: b"hello",
        };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[16], 0x80 | 0x10 | 0x08);
        assert_eq!(&out[18..20], &[0, 9]);
        assert_eq!(&out[20..24], &[0xff, 0xff, 0x40, 0x07]);
        assert_eq!(&out[24..], b"hello");
        assert_eq!(
            Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap(),
            repr
        );
    }

    #[test]
    fn test_impossible_len() {
        for len in 0..SIW_REQUEST_V2_CRC.len() {
            assert_eq!(
                Packet::new_checked(&SIW_REQUEST_V2_CRC[..len]),
                Err(Error),
                "len {len}"
            );
        }
    }

    #[test]
    fn test_rejects_bad_key_and_long_private_data() {
        let mut bad_key = SIW_REQUEST_V2_CRC;
        bad_key[3] = b'_';
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bad_key[..]).unwrap()),
            Err(Error)
        );

        let mut long = vec![0u8; HEADER_LEN + 513];
        long[..16].copy_from_slice(&KEY_REQUEST);
        long[17] = 1;
        long[18..20].copy_from_slice(&513u16.to_be_bytes());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&long[..]).unwrap()),
            Err(Error)
        );
        long[18..20].copy_from_slice(&512u16.to_be_bytes());
        let repr = Repr::parse(&Packet::new_checked(&long[..]).unwrap()).unwrap();
        assert_eq!(repr.private_data.len(), 512);
    }

    #[test]
    fn test_enhanced_flag_needs_four_octets() {
        for pd_len in 0..4u16 {
            let mut frame = vec![0u8; HEADER_LEN + usize::from(pd_len)];
            frame[..16].copy_from_slice(&KEY_REPLY);
            frame[16] = field::FLAG_S;
            frame[17] = 2;
            frame[18..20].copy_from_slice(&pd_len.to_be_bytes());
            let packet = Packet::new_checked(&frame[..]).unwrap();
            assert_eq!(
                Repr::parse(&packet),
                Err(Error),
                "PD_Length {pd_len} with S"
            );
        }
    }
}
