use super::{param_header::*, param_type::*, *};

use bytes::BufMut;

/// dpwarp: the Adaptation Layer Indication parameter (RFC 5061 §4.2.6), which the sender of
/// an INIT or INIT ACK includes "for the purpose of indicating the adaptation layer it
/// supports" to its peer, e.g. 1 for DDP over SCTP (RFC 5043 §5.1).
///
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |     Type =0xC006              |    Length = 0x0008            |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Adaptation Code Point                      |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
#[derive(Default, Debug, Clone, PartialEq)]
pub(crate) struct ParamAdaptationLayerIndication {
    pub(crate) adaptation_code_point: u32,
}

/// The parameter's value: one 32-bit code point (RFC 5061 §4.2.6, "Length = 0x0008").
pub(crate) const ADAPTATION_CODE_POINT_LENGTH: usize = 4;

impl fmt::Display for ParamAdaptationLayerIndication {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:#010x}", self.header(), self.adaptation_code_point)
    }
}

impl Param for ParamAdaptationLayerIndication {
    fn header(&self) -> ParamHeader {
        ParamHeader {
            typ: ParamType::AdaptLayerInd,
            value_length: self.value_length() as u16,
        }
    }

    fn unmarshal(raw: &Bytes) -> Result<Self> {
        let header = ParamHeader::unmarshal(raw)?;
        if header.typ != ParamType::AdaptLayerInd {
            return Err(Error::ErrParamTypeUnexpected);
        }
        match header.value_length().cmp(&ADAPTATION_CODE_POINT_LENGTH) {
            core::cmp::Ordering::Less => return Err(Error::ErrParamPacketTooShort),
            core::cmp::Ordering::Greater => {
                return Err(Error::ErrParamHeaderSelfReportedLengthLonger);
            }
            core::cmp::Ordering::Equal => {}
        }
        let reader = &mut raw.slice(PARAM_HEADER_LENGTH..PARAM_HEADER_LENGTH + 4);
        Ok(ParamAdaptationLayerIndication {
            adaptation_code_point: reader.get_u32(),
        })
    }

    fn marshal_to(&self, buf: &mut BytesMut) -> Result<usize> {
        self.header().marshal_to(buf)?;
        buf.put_u32(self.adaptation_code_point);
        Ok(buf.len())
    }

    fn value_length(&self) -> usize {
        ADAPTATION_CODE_POINT_LENGTH
    }

    fn clone_to(&self) -> Box<dyn Param + Send + Sync> {
        Box::new(self.clone())
    }

    fn as_any(&self) -> &(dyn Any + Send + Sync) {
        self
    }
}
