//! One-line renderings of every header, for traces, `dpwarp-pcap` and test
//! failure messages (STYLE.md §2: "Give every view a pretty-printer").
//!
//! Each `Repr` implements `Display`; [`Ulpdu`] renders raw ULPDU octets as
//! well as they can be read, falling back to the DDP header alone or to
//! "malformed" with the length, never panicking.

use core::fmt;

use super::{atomic, ddp, mpa_marker, mpa_rr, rdmap, term};

impl fmt::Display for mpa_rr::EnhancedRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rtr = [
            (self.rtr_send, "SEND0"),
            (self.rtr_write, "WRITE0"),
            (self.rtr_read, "READ0"),
        ];
        write!(
            f,
            "IRD={} ORD={} P2P={} RTR=",
            self.ird,
            self.ord,
            u8::from(self.peer_to_peer)
        )?;
        let mut any = false;
        for (_, name) in rtr.iter().filter(|(set, _)| *set) {
            write!(f, "{}{name}", if any { "|" } else { "" })?;
            any = true;
        }
        if !any {
            f.write_str("-")?;
        }
        Ok(())
    }
}

impl fmt::Display for mpa_rr::Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            mpa_rr::FrameKind::Request => "MPA-REQ",
            mpa_rr::FrameKind::Reply => "MPA-REP",
        };
        write!(
            f,
            "{kind} rev={} M={} C={} R={} S={} res={:#x} pd_len={}",
            self.revision,
            u8::from(self.markers),
            u8::from(self.crc),
            u8::from(self.reject),
            u8::from(self.enhanced.is_some()),
            self.reserved,
            self.pd_length()
        )?;
        if let Some(enhanced) = self.enhanced {
            write!(f, " {enhanced}")?;
        }
        if !self.private_data.is_empty() {
            write!(f, " ulp_pd_len={}", self.private_data.len())?;
        }
        Ok(())
    }
}

impl fmt::Display for mpa_marker::Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MARKER fpduptr={}", self.fpduptr)?;
        if self.reserved != 0 {
            write!(f, " reserved={:#06x}", self.reserved)?;
        }
        Ok(())
    }
}

impl fmt::Display for ddp::Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let model = if self.tagged() { "T" } else { "U" };
        write!(f, "{model} L={} DV={}", u8::from(self.last), self.version)?;
        if self.reserved != 0 {
            write!(f, " ddp_res={:#x}", self.reserved)?;
        }
        match self.buffer {
            ddp::Buffer::Tagged { stag, to } => write!(f, " stag={stag:#010x} to={to:#018x}"),
            ddp::Buffer::Untagged {
                rsvd_ulp,
                qn,
                msn,
                mo,
            } => {
                write!(f, " qn={qn} msn={msn} mo={mo}")?;
                if rsvd_ulp != 0 {
                    write!(f, " rsvd_ulp={rsvd_ulp:#010x}")?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Display for rdmap::ReadRequestRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sink={:#010x}@{:#018x} size={} src={:#010x}@{:#018x}",
            self.sink_stag, self.sink_to, self.read_size, self.source_stag, self.source_to
        )
    }
}

impl fmt::Display for atomic::RequestRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "aop={:?} id={} stag={:#010x} to={:#018x} data={:#x} mask={:#x} cmp={:#x} cmp_mask={:#x}",
            self.opcode,
            self.request_id,
            self.remote_stag,
            self.remote_to,
            self.add_or_swap_data,
            self.add_or_swap_mask,
            self.compare_data,
            self.compare_mask
        )
    }
}

impl fmt::Display for atomic::ResponseRepr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "id={} orig={:#x}",
            self.original_request_id, self.original_remote_value
        )
    }
}

impl fmt::Display for term::Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            term::Layer::Rdmap => f.write_str("RDMAP"),
            term::Layer::Ddp => f.write_str("DDP"),
            term::Layer::Llp => f.write_str("LLP"),
            term::Layer::Unknown(other) => write!(f, "layer{other}"),
        }
    }
}

impl fmt::Display for term::Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let control = self.control();
        write!(
            f,
            "layer={} etype={} ecode={:#04x} M={} D={} R={}",
            self.layer,
            self.etype,
            self.ecode,
            u8::from(control.m),
            u8::from(control.d),
            u8::from(control.r)
        )?;
        if control.m || control.d {
            write!(f, " seg_len={}", self.ddp_segment_length)?;
        }
        if let Some(name) = control.describe() {
            write!(f, " ({name})")?;
        }
        if self.encoding == term::Encoding::SiwBitfield {
            f.write_str(" [siw bitfield encoding]")?;
        }
        Ok(())
    }
}

impl fmt::Display for rdmap::Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let control = self.control();
        match control.opcode.info() {
            Some(info) => f.write_str(info.name)?,
            None => write!(f, "OPCODE_{:#x}", u8::from(control.opcode))?,
        }
        write!(f, " {} RV={}", self.ddp, control.version)?;
        if control.reserved != 0 {
            write!(f, " rdmap_res={:#x}", control.reserved)?;
        }
        match &self.header {
            rdmap::Header::None => {}
            rdmap::Header::ReadRequest(r) => write!(f, " {r}")?,
            rdmap::Header::Terminate(t) => write!(f, " {t}")?,
            rdmap::Header::Immediate(data) => write!(f, " imm={}", Hex(data))?,
            rdmap::Header::AtomicRequest(a) => write!(f, " {a}")?,
            rdmap::Header::AtomicResponse(a) => write!(f, " {a}")?,
        }
        write!(f, " len={}", self.payload.len())
    }
}

/// Renders octets as lowercase hex without separators.
#[derive(Debug, Clone, Copy)]
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Renders a ULPDU (one DDP segment) as well as it can be read.
#[derive(Debug, Clone, Copy)]
pub struct Ulpdu<'a>(pub &'a [u8]);

impl fmt::Display for Ulpdu<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ok(packet) = ddp::Packet::new_checked(self.0) else {
            return write!(
                f,
                "MALFORMED ulpdu_len={} (shorter than its DDP header)",
                self.0.len()
            );
        };
        match rdmap::Repr::parse(&packet) {
            Ok(repr) => write!(f, "{repr}"),
            Err(_) => match ddp::Repr::parse(&packet) {
                Ok(ddp) => write!(
                    f,
                    "MALFORMED rdmap_ctrl={:#04x} {ddp} len={}",
                    ddp.rsvd_ulp,
                    packet.payload().len()
                ),
                Err(_) => write!(f, "MALFORMED ulpdu_len={}", self.0.len()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_siw_read_request() {
        let bytes = [
            0x41, 0x41, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01,
            0x00, 0x00, 0x00, 0x00, 0x05, 0xba, 0xfb, 0x00, 0x00, 0x00, 0x55, 0x5b, 0x05, 0xeb,
            0xe5, 0x50, 0x00, 0x00, 0x00, 0x40, 0x4c, 0x1b, 0x05, 0x00, 0x00, 0x00, 0x55, 0x73,
            0x01, 0x29, 0x63, 0x70,
        ];
        assert_eq!(
            Ulpdu(&bytes).to_string(),
            "READ_REQ U L=1 DV=1 qn=1 msn=1 mo=0 RV=1 sink=0x05bafb00@0x0000555b05ebe550 \
             size=64 src=0x4c1b0500@0x0000557301296370 len=0"
        );
    }

    #[test]
    fn renders_garbage_without_panicking() {
        assert!(Ulpdu(&[]).to_string().starts_with("MALFORMED"));
        assert!(Ulpdu(&[0x41, 0x41, 0]).to_string().starts_with("MALFORMED"));
        let mut send_with_t = [0u8; 14];
        send_with_t[0] = 0xc1;
        send_with_t[1] = 0x43;
        assert!(Ulpdu(&send_with_t)
            .to_string()
            .starts_with("MALFORMED rdmap_ctrl=0x43"));
    }

    #[test]
    fn renders_enhanced_data() {
        let enhanced = mpa_rr::EnhancedRepr {
            peer_to_peer: true,
            rtr_send: false,
            rtr_write: true,
            rtr_read: true,
            ird: 1,
            ord: 16383,
        };
        assert_eq!(
            enhanced.to_string(),
            "IRD=1 ORD=16383 P2P=1 RTR=WRITE0|READ0"
        );
    }
}
