//! Receive: ULPDUs from the deframer are checked, placed and delivered
//! (siw's `siw_qp_rx.c`).
//!
//! Checks run in the order the layers own them: DDP version, RDMAP version
//! and opcode (RFC 5040 §7.1), the queue number, then per message the MSN
//! and MO (RFC 5041 §7.2-7.3) and the STag (RFC 5041 §7.1 for tagged
//! placement; RFC 5040 §7.2 for Read and atomic sources, which RDMAP
//! checks). The first failure becomes the QP's Terminate.
//!
//! Tagged payloads go straight into registered memory, from the slice the
//! deframer yields (in place in the TCP buffer when it can), with no copy in
//! between. A zero-length Write or Read is not checked against its STag:
//! RFC 6581's RTR indications are zero-length Writes and Reads that siw
//! sends to STag 1, which names nothing.

use crate::cq::{WcOpcode, WcStatus};
use crate::mem::{Access, AccessError};
use crate::mpa::rx::Poll;
use crate::sctp::rx::Arrival;
use crate::wire::rdmap::{self, Control, Header, Opcode};
use crate::wire::{atomic, ddp};

use super::term::{
    EstablishmentError, OperationError, ProtectionError, TaggedError, TermCause, UntaggedError,
};
use super::{
    Ctx, Inner, Irrq, LlpRx, Orq, Qp, QpEvent, QpState, Receiving, RecvCompletion, RtrSet, TermInfo,
};

/// A processing failure: the cause, and whether the Terminate echoes the
/// RDMAP header (errors about a Read or Atomic Request).
type Failure = (TermCause, bool);

fn untagged(error: UntaggedError) -> Failure {
    (TermCause::Untagged(error), false)
}

fn operation(error: OperationError) -> Failure {
    (TermCause::Operation(error), false)
}

impl Qp {
    /// Feeds TCP octets; returns those consumed: all of them, except while
    /// the QP is not connected (none). After an error the rest of the
    /// stream is consumed and ignored.
    pub(crate) fn handle_stream(&mut self, ctx: &mut Ctx<'_>, octets: &[u8]) -> usize {
        let Some(LlpRx::Mpa(deframer)) = self.deframer.as_mut() else {
            return 0;
        };
        let inner = &mut self.inner;
        // Under fuzzing every CRC passes, so this path would only make a
        // stream fed whole read differently from one fed in pieces.
        #[cfg(not(fuzzing))]
        if !inner.rx_started && !octets.is_empty() {
            inner.rx_started = true;
            let config = deframer.config();
            if config.crc && !config.markers {
                if let Some(ulpdu) = startup_terminate(octets) {
                    // Linux siw sends a startup Terminate (e.g. 2/0/6, 2/0/7)
                    // with its CRC field 0 even when CRC was negotiated
                    // (its QP is not in RTS yet). Read it, not a CRC error:
                    // a Terminate ends the stream whatever its CRC. (Only
                    // when it arrives in one piece, as siw sends it.)
                    inner.siw_startup_term = true;
                    inner.receive(ctx, ulpdu);
                    return octets.len();
                }
            }
        }
        let mut rest = octets;
        while inner.state == QpState::Rts {
            let (used, poll) = deframer.poll(rest);
            rest = &rest[used..];
            match poll {
                Poll::Ulpdu(ulpdu) => inner.receive(ctx, ulpdu),
                Poll::NeedMore => break,
                Poll::Error(error) => inner.fail(TermCause::Mpa(error), None, false),
            }
        }
        octets.len()
    }
}

impl Qp {
    /// Takes one DDP Segment message (PPID 16: `DDP-SSN | DDP segment`,
    /// RFC 5043 §5.2) of a DDP stream over SCTP, which may arrive in any
    /// order (see [`crate::sctp::rx`]). Segments reach the same receive
    /// path MPA's ULPDUs do, in DDP-SSN order, but for RDMA Writes, placed
    /// as they come. Returns whether the QP took it: `false` for a QP that
    /// is not connected over SCTP or not in RTS (the message is ignored).
    pub(crate) fn handle_message(&mut self, ctx: &mut Ctx<'_>, message: &[u8]) -> bool {
        let Some(LlpRx::Sctp(reorder)) = self.deframer.as_mut() else {
            return false;
        };
        let inner = &mut self.inner;
        if inner.state != QpState::Rts {
            return false;
        }
        let Some((ssn, segment)) = crate::sctp::split(message) else {
            inner.fail(TermCause::Truncated, None, false);
            return true;
        };
        match reorder.arrival(ssn) {
            Arrival::Next => {
                inner.receive(ctx, segment);
                reorder.advance();
                while inner.state == QpState::Rts {
                    match reorder.next_ready() {
                        Some(Some(held)) => {
                            inner.receive(ctx, &held);
                            reorder.recycle(held);
                        }
                        Some(None) => {}
                        None => break,
                    }
                }
            }
            Arrival::Early(k) if is_write(segment) => {
                // Tagged placement needs nothing earlier (RFC 5041 §5); a
                // Write delivers nothing at the data sink, so only its turn
                // is left.
                inner.receive(ctx, segment);
                reorder.placed(k);
            }
            Arrival::Early(k) => {
                if !reorder.hold(k, segment) {
                    inner.fail(TermCause::Sequence, Some(segment), false);
                }
            }
            Arrival::Invalid => inner.fail(TermCause::Sequence, Some(segment), false),
        }
        true
    }
}

/// Whether a DDP segment is a well-formed RDMA Write's (tagged, opcode
/// Write): one that may be placed ahead of its turn. Anything else, a
/// malformed segment included, waits for its turn and is checked then.
fn is_write(segment: &[u8]) -> bool {
    ddp::Packet::new_checked(segment).is_ok_and(|packet| {
        packet.tagged()
            && packet.version() == ddp::VERSION
            && Control::from_octet(packet.rsvd_ulp()).opcode == Opcode::RdmaWrite
    })
}

/// The ULPDU of a Terminate FPDU at the very start of a stream whose CRC
/// field is zero, as Linux siw sends its startup Terminates: ULPDU_Length
/// 22 (an untagged DDP header and a bare Terminate control word), QN 2,
/// no PAD, CRC 0. Nothing else qualifies.
#[cfg_attr(fuzzing, allow(dead_code))]
fn startup_terminate(octets: &[u8]) -> Option<&[u8]> {
    const ULPDU_LEN: usize = ddp::UNTAGGED_HEADER_LEN + 4;
    const FPDU_LEN: usize = 2 + ULPDU_LEN + 4;
    let fpdu = octets.get(..FPDU_LEN)?;
    if usize::from(u16::from_be_bytes([fpdu[0], fpdu[1]])) != ULPDU_LEN
        || fpdu[FPDU_LEN - 4..] != [0; 4]
    {
        return None;
    }
    let ulpdu = &fpdu[2..2 + ULPDU_LEN];
    let packet = ddp::Packet::new_checked(ulpdu).ok()?;
    let opcode = Control::from_octet(packet.rsvd_ulp()).opcode;
    (!packet.tagged() && packet.qn() == ddp::qn::TERMINATE && opcode == Opcode::Terminate)
        .then_some(ulpdu)
}

impl Inner {
    fn receive(&mut self, ctx: &mut Ctx<'_>, ulpdu: &[u8]) {
        // MPA fencing ends with the first FPDU, valid or not (an invalid one
        // is answered with a Terminate, which is an FPDU too).
        self.fenced = false;
        let result = if self.rtr_rx.is_empty() {
            self.process(ctx, ulpdu)
        } else {
            self.receive_rtr(ctx, ulpdu)
        };
        if let Err((cause, rdma_header)) = result {
            self.fail(cause, Some(ulpdu), rdma_header);
        }
    }

    /// The first message of a peer-to-peer connection must be one of the
    /// negotiated RTR indications (RFC 6581 §9.2-9.3); the provider consumes
    /// it: a zero-length Write is dropped, a zero-length Send takes MSN 1 of
    /// queue 0 without a receive, a zero-length Read is answered with a
    /// zero-length Read Response. The Read RTR joins the IRRQ without the IRD
    /// check (it may be 0) and holds an entry until answered, as both sides
    /// count it in their ORQ. Anything else is TERM 2/0/7 (no matching RTR
    /// option).
    fn receive_rtr(&mut self, ctx: &mut Ctx<'_>, ulpdu: &[u8]) -> Result<(), Failure> {
        let accept = std::mem::replace(&mut self.rtr_rx, RtrSet::NONE);
        let no_match = (
            TermCause::Establishment(EstablishmentError::NoMatchingRtr),
            false,
        );
        let Ok(packet) = ddp::Packet::new_checked(ulpdu) else {
            return self.process(ctx, ulpdu);
        };
        let control = Control::from_octet(packet.rsvd_ulp());
        if control.opcode == Opcode::Terminate
            || packet.version() != ddp::VERSION
            || control.version != rdmap::VERSION
        {
            // Version errors and a Terminate keep their own handling.
            return self.process(ctx, ulpdu);
        }
        let zero = packet.payload().is_empty() && packet.last();
        match control.opcode {
            Opcode::RdmaWrite if zero && packet.tagged() && accept.write => Ok(()),
            Opcode::Send if zero && !packet.tagged() && accept.send => {
                if packet.qn() != ddp::qn::SEND || packet.mo() != 0 {
                    return Err(no_match);
                }
                self.check_msn(&packet)?;
                self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
                Ok(())
            }
            Opcode::RdmaReadRequest if !packet.tagged() && accept.read => {
                let repr = rdmap::Repr::parse(&packet).map_err(|_| no_match)?;
                let Header::ReadRequest(request) = repr.header else {
                    return Err(no_match);
                };
                if request.read_size != 0
                    || packet.qn() != ddp::qn::READ_REQUEST
                    || !packet.last()
                    || packet.mo() != 0
                {
                    return Err(no_match);
                }
                self.check_msn(&packet)?;
                self.rx_msn[1] = self.rx_msn[1].wrapping_add(1);
                self.irrq.push_back(Irrq::Read {
                    msn: packet.msn(),
                    request,
                    sent: 0,
                    arrived: None,
                });
                Ok(())
            }
            _ => Err(no_match),
        }
    }

    /// Takes one DDP segment, and counts it by opcode once it was taken:
    /// a segment that draws a Terminate is no operation the peer made.
    fn process(&mut self, ctx: &mut Ctx<'_>, ulpdu: &[u8]) -> Result<(), Failure> {
        let packet = ddp::Packet::new_checked(ulpdu).map_err(|_| (TermCause::Truncated, false))?;
        let control = Control::from_octet(packet.rsvd_ulp());
        let (octets, last) = (packet.payload().len(), packet.last());
        self.take_segment(ctx, packet, control)?;
        self.stats.received(control.opcode, octets, last);
        Ok(())
    }

    fn take_segment(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: ddp::Packet<&[u8]>,
        control: Control,
    ) -> Result<(), Failure> {
        if packet.version() != ddp::VERSION {
            let cause = if packet.tagged() {
                TermCause::Tagged(TaggedError::Version)
            } else {
                TermCause::Untagged(UntaggedError::Version)
            };
            return Err((cause, false));
        }
        if control.opcode == Opcode::Terminate {
            // Whatever else is wrong with it (QN, L, MO, RDMAP version), a
            // Terminate ends the stream and is never answered with one.
            self.receive_terminate(ctx, &packet);
            return Ok(());
        }
        if control.version != rdmap::VERSION {
            return Err(operation(OperationError::Version));
        }
        let info = control
            .opcode
            .info()
            .ok_or(operation(OperationError::Opcode))?;
        if info.tagged != packet.tagged() {
            return Err(operation(OperationError::Opcode));
        }
        if !packet.tagged() && Some(packet.qn()) != info.qn {
            return Err(untagged(UntaggedError::InvalidQn));
        }
        if matches!(
            control.opcode,
            Opcode::ImmediateData | Opcode::ImmediateDataWithSe
        ) && packet.payload().len() != rdmap::IMMEDIATE_DATA_LEN
        {
            // RFC 7306 (draft-ietf-storm-rdmap-ext-00) §6.3: exactly 8 octets.
            return Err(operation(OperationError::Unspecified));
        }
        let single = matches!(
            control.opcode,
            Opcode::RdmaReadRequest
                | Opcode::AtomicRequest
                | Opcode::AtomicResponse
                | Opcode::Terminate
        ) || matches!(
            control.opcode,
            Opcode::ImmediateData | Opcode::ImmediateDataWithSe
        );
        if single && (!packet.last() || packet.mo() != 0) {
            return Err(untagged(UntaggedError::InvalidMo));
        }
        // RFC 5040 §4.8 echoes the RDMA header of a failed Read Request;
        // draft-ietf-storm-rdmap-ext-00 §8.1 item 2 leaves it out (zero) for
        // the new messages.
        let read_request = control.opcode == Opcode::RdmaReadRequest;
        // The data messages have no RDMAP header: their payload follows the
        // DDP header, no parsing needed (the hot path).
        match control.opcode {
            Opcode::RdmaWrite => return self.place_write(ctx, &packet, packet.payload()),
            Opcode::RdmaReadResponse => {
                return self.place_read_response(ctx, &packet, packet.payload())
            }
            Opcode::Send
            | Opcode::SendWithSe
            | Opcode::SendWithInvalidate
            | Opcode::SendWithSeAndInvalidate => {
                return self.receive_send(ctx, &packet, control.opcode, packet.payload());
            }
            _ => {}
        }
        let repr = rdmap::Repr::parse(&packet).map_err(|_| {
            (
                TermCause::Operation(OperationError::Unspecified),
                read_request,
            )
        })?;
        match control.opcode {
            Opcode::RdmaWrite
            | Opcode::RdmaReadResponse
            | Opcode::Send
            | Opcode::SendWithSe
            | Opcode::SendWithInvalidate
            | Opcode::SendWithSeAndInvalidate => {
                unreachable!("handled above")
            }
            Opcode::ImmediateData | Opcode::ImmediateDataWithSe => {
                self.receive_immediate(ctx, &packet, control.opcode, &repr.header)
            }
            Opcode::RdmaReadRequest => self
                .receive_read_request(ctx, &packet, &repr.header)
                .map_err(|c| (c, true)),
            Opcode::AtomicRequest => self
                .receive_atomic_request(ctx, &packet, &repr.header)
                .map_err(|c| (c, false)),
            Opcode::AtomicResponse => self.receive_atomic_response(ctx, &packet, &repr.header),
            Opcode::Terminate | Opcode::Unknown(_) => Err(operation(OperationError::Opcode)),
        }
    }

    fn place_write(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        payload: &[u8],
    ) -> Result<(), Failure> {
        if payload.is_empty() {
            return Ok(());
        }
        let (region, offset) = ctx
            .stags
            .lookup_cached(
                &mut self.rx_stag,
                packet.stag(),
                self.pd,
                Access::REMOTE_WRITE,
                packet.tagged_offset(),
                payload.len(),
            )
            .map_err(|e| (TermCause::tagged(e), false))?;
        // In bounds: checked against the registration, which lies inside
        // its region.
        let _ = region.write(offset, payload);
        Ok(())
    }

    fn place_read_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        payload: &[u8],
    ) -> Result<(), Failure> {
        if let Some(Orq::Rtr) = self.orq.front() {
            // The Read RTR's response: zero octets to sink STag 0, TO 0, in
            // one segment; the provider's, so no completion.
            if !payload.is_empty()
                || !packet.last()
                || packet.stag() != 0
                || packet.tagged_offset() != 0
            {
                return Err((TermCause::Tagged(TaggedError::BaseBounds), false));
            }
            self.orq.pop_front();
            return Ok(());
        }
        let Some(&Orq::Read {
            seq,
            sink_stag,
            sink_to,
            len,
            placed,
            ..
        }) = self.orq.front()
        else {
            // No Read is outstanding (the ORQ is empty, or an atomic waits
            // at its head): the response has no buffer to go to. RFC 5040
            // names no code for a Read Response nothing asked for, so this
            // follows Linux siw, whose `siw_proc_rresp` finds no ORQ entry
            // and reports DDP local catastrophic (1/0/0 in the IANA "RDDP"
            // registry, RFC 6580), with M and D and the DDP header as for
            // any DDP error; a siw peer reads ours as it reads its own.
            // Nothing completes here: what is outstanding is flushed when
            // the QP enters Error.
            return Err((TermCause::DdpCatastrophic, false));
        };
        // The response must be the one the Read at the head of the ORQ
        // expects: to its sink STag, each segment at the TO where the last
        // ended, and RFC 5040 §5.2.2's length, the Read Request's RDMARDSZ:
        // no more (checked per segment) and no fewer (at the Last flag).
        // DDP finds a segment outside the tagged buffer it expects, so
        // these are RFC 5041 §7.2's tagged buffer errors: invalid STag for
        // another STag, base or bounds violation for the rest. (RFC 5040
        // has no code for a response of the wrong size; Linux siw's
        // `siw_rresp_check_ntoh` sends the same codes for the same cases,
        // so a siw peer reads ours as it reads its own.)
        let end = placed + payload.len();
        let mismatch = if packet.stag() != sink_stag {
            Some(TaggedError::InvalidStag)
        } else if packet.tagged_offset() != sink_to.wrapping_add(placed as u64)
            || end > len
            || (packet.last() && end != len)
        {
            Some(TaggedError::BaseBounds)
        } else {
            None
        };
        if let Some(error) = mismatch {
            let cause = TermCause::Tagged(error);
            return Err(self.read_failed(ctx, seq, WcStatus::BadResponse, cause));
        }
        if !payload.is_empty() {
            // The sink STag again for every segment, as a Write's (RFC 5040
            // §6.6: a Read Response is a tagged message to it): one
            // invalidated (a peer's Send with Invalidate names it, RFC
            // 5040 §6.10) or deregistered while the Read is outstanding
            // takes no more octets, and the Read fails: with local
            // protection, as siw's `siw_proc_rresp` fails it, since the
            // fault is our own buffer's.
            let placement = ctx.stags.lookup_cached(
                &mut self.rx_stag,
                sink_stag,
                self.pd,
                Access::LOCAL_WRITE,
                packet.tagged_offset(),
                payload.len(),
            );
            match placement {
                // In bounds: checked against the registration.
                Ok((region, offset)) => {
                    let _ = region.write(offset, payload);
                }
                Err(error) => {
                    let cause = TermCause::tagged(error);
                    return Err(self.read_failed(ctx, seq, WcStatus::LocalProtection, cause));
                }
            }
        }
        if !packet.last() {
            if let Some(Orq::Read { placed, .. }) = self.orq.front_mut() {
                *placed = end;
            }
            return Ok(());
        }
        self.orq.pop_front();
        self.finish_wqe(ctx, seq, WcStatus::Success, len as u32);
        Ok(())
    }

    /// The Read at the head of the ORQ (`seq`) ends with `status` and
    /// leaves the ORQ; its completion is reported now, in posting order,
    /// and what was posted after it is flushed once the Terminate for
    /// `cause` (which the caller returns) has gone out. Only the first
    /// error of a stream counts (`fail`), and the Read is out of the ORQ,
    /// so nothing later completes it again.
    fn read_failed(
        &mut self,
        ctx: &mut Ctx<'_>,
        seq: u64,
        status: WcStatus,
        cause: TermCause,
    ) -> Failure {
        self.orq.pop_front();
        self.finish_wqe(ctx, seq, status, 0);
        (cause, false)
    }

    /// Checks the MSN of a message on an untagged queue.
    fn check_msn(&self, packet: &ddp::Packet<&[u8]>) -> Result<(), Failure> {
        // Callers check the queue number first; a stray one is still no panic.
        let expected = self
            .rx_msn
            .get(packet.qn() as usize)
            .ok_or(untagged(UntaggedError::InvalidQn))?;
        if packet.msn() != *expected {
            return Err(untagged(UntaggedError::MsnRange));
        }
        Ok(())
    }

    fn receive_send(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        opcode: Opcode,
        payload: &[u8],
    ) -> Result<(), Failure> {
        self.check_msn(packet)?;
        if self.receiving.is_none() {
            let wqe = self
                .take_recv(ctx)
                .ok_or(untagged(UntaggedError::NoBuffer))?;
            match wqe
                .sgl
                .resolve(ctx.stags, &mut self.rx_stag, self.pd, Access::LOCAL_WRITE)
            {
                Ok(grants) => {
                    let capacity = wqe.sgl.total();
                    self.receiving = Some(Receiving {
                        wqe,
                        grants,
                        capacity,
                        len: 0,
                    });
                }
                Err(_) => return Err(self.receive_unprotected(ctx, &wqe)),
            }
        }
        let receiving = self.receiving.as_mut().expect("set above");
        let mo = packet.mo() as usize;
        if mo != receiving.len {
            // TCP delivers in order and senders segment in order, so each
            // segment starts where the last ended: anything else would
            // leave a hole the completion would count as received.
            return Err(untagged(UntaggedError::InvalidMo));
        }
        if mo + payload.len() > receiving.capacity {
            let receiving = self.receiving.take().expect("set");
            let wc = RecvCompletion {
                status: WcStatus::LocalLength,
                ..RecvCompletion::flushed()
            };
            self.complete_recv(ctx, &receiving.wqe, wc);
            return Err(untagged(UntaggedError::TooLong));
        }
        // The buffer's STags again for every segment, as a Write's and a Read
        // Response's are (RFC 5040 §7.1 checks each DDP segment): one
        // invalidated meanwhile (a peer's Send with Invalidate may name it
        // on any QP, RFC 5040 §6.10, or a local invalidate) or
        // deregistered takes no further placement, and the receive fails
        // as one whose list fails at its first segment.
        let checked = receiving.grants.recheck(
            &receiving.wqe.sgl,
            ctx.stags,
            &mut self.rx_stag,
            self.pd,
            Access::LOCAL_WRITE,
            mo..mo + payload.len(),
        );
        if checked.is_err() {
            let receiving = self.receiving.take().expect("set");
            return Err(self.receive_unprotected(ctx, &receiving.wqe));
        }
        receiving.grants.scatter(mo, payload);
        receiving.len = mo + payload.len();
        if !packet.last() {
            return Ok(());
        }
        let receiving = self.receiving.take().expect("set");
        self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        let mut wc = RecvCompletion {
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            byte_len: receiving.len as u32,
            imm: None,
            invalidated: None,
            solicited: matches!(opcode, Opcode::SendWithSe | Opcode::SendWithSeAndInvalidate),
        };
        let mut failure = None;
        if opcode.invalidates() {
            let stag = packet.rsvd_ulp_word();
            match ctx.stags.invalidate(stag, self.pd, true) {
                Ok(()) => wc.invalidated = Some(stag),
                Err(error) => {
                    wc.status = WcStatus::RemoteInvalidate;
                    failure = Some(match error {
                        AccessError::InvalidStag => operation(OperationError::CannotInvalidate),
                        _ => (
                            TermCause::Protection(ProtectionError::CannotInvalidate),
                            false,
                        ),
                    });
                }
            }
        }
        self.complete_recv(ctx, &receiving.wqe, wc);
        failure.map_or(Ok(()), Err)
    }

    /// A receive whose list failed its STag check, at the first segment
    /// or a later one: it completes with Local Protection, and the QP
    /// fails with RDMAP's local catastrophic error (0/0/0, RFC 5040 §4.8):
    /// the fault is this side's buffer, not the peer's message, so no
    /// DDP or remote protection code fits. One path for both, so that a
    /// buffer gone before the first segment and one gone after it end
    /// the same way.
    fn receive_unprotected(&mut self, ctx: &mut Ctx<'_>, wqe: &super::RecvWqe) -> Failure {
        let wc = RecvCompletion {
            status: WcStatus::LocalProtection,
            ..RecvCompletion::flushed()
        };
        self.complete_recv(ctx, wqe, wc);
        (TermCause::LocalCatastrophic, false)
    }

    fn receive_immediate(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        opcode: Opcode,
        header: &Header<'_>,
    ) -> Result<(), Failure> {
        self.check_msn(packet)?;
        if self.receiving.is_some() {
            // A Send on queue 0 is still arriving: one message at a time.
            return Err(untagged(UntaggedError::MsnRange));
        }
        let Header::Immediate(data) = *header else {
            unreachable!("parsed as Immediate Data")
        };
        let wqe = self
            .take_recv(ctx)
            .ok_or(untagged(UntaggedError::NoBuffer))?;
        self.rx_msn[0] = self.rx_msn[0].wrapping_add(1);
        let wc = RecvCompletion {
            status: WcStatus::Success,
            opcode: WcOpcode::RecvImmediate,
            byte_len: 0,
            imm: Some(data),
            invalidated: None,
            solicited: opcode == Opcode::ImmediateDataWithSe,
        };
        self.complete_recv(ctx, &wqe, wc);
        Ok(())
    }

    /// Takes an IRRQ entry for an inbound Read or Atomic Request.
    fn check_ird(&self, packet: &ddp::Packet<&[u8]>) -> Result<(), TermCause> {
        self.check_msn(packet).map_err(|(c, _)| c)?;
        let ird = self.connection.map_or(0, |c| usize::from(c.ird));
        if self.irrq.len() >= ird {
            // The peer broke the ORD it agreed to (RFC 6581 §9.1, RFC 5040
            // §6.4). RFC 5041 would call it "no buffer" on queue 1; Linux
            // siw sends remote operation / catastrophic error in stream
            // (its `siw_init_rresp`), and so do we, for interop.
            return Err(TermCause::Operation(OperationError::CatastrophicStream));
        }
        Ok(())
    }

    fn receive_read_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        header: &Header<'_>,
    ) -> Result<(), TermCause> {
        self.check_ird(packet)?;
        let Header::ReadRequest(request) = *header else {
            unreachable!("parsed as a Read Request")
        };
        let len = request.read_size as usize;
        if len > 0 {
            ctx.stags
                .lookup(
                    request.source_stag,
                    self.pd,
                    Access::REMOTE_READ,
                    request.source_to,
                    len,
                )
                .map_err(TermCause::protection)?;
        }
        let msn = self.rx_msn[1];
        self.rx_msn[1] = msn.wrapping_add(1);
        self.irrq.push_back(Irrq::Read {
            msn,
            request,
            sent: 0,
            arrived: Some(ctx.now_us),
        });
        Ok(())
    }

    fn receive_atomic_request(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        header: &Header<'_>,
    ) -> Result<(), TermCause> {
        self.check_ird(packet)?;
        let Header::AtomicRequest(request) = *header else {
            unreachable!("parsed as an Atomic Request")
        };
        if let atomic::AtomicOpcode::Unknown(_) = request.opcode {
            return Err(TermCause::Operation(OperationError::Opcode));
        }
        let lease = ctx
            .stags
            .lookup(
                request.remote_stag,
                self.pd,
                Access::REMOTE_ATOMIC,
                request.remote_to,
                8,
            )
            .map_err(TermCause::protection)?;
        // RFC 7306 (draft-ietf-storm-rdmap-ext-00 §5.1.1-§5.1.3): the
        // operation acts on a 64-bit value "at a naturally aligned buffer
        // address", and the address on the wire is the Remote Tagged
        // Offset: the TO is checked, as the requester checks it when the
        // work request is posted. The draft gives a misaligned target no
        // Terminate code (it says only that the result "is unknown"), and
        // none is in the registry this engine encodes (`wire::term`, RFC
        // 6580's), so: remote operation error, unspecified (0/2/0xFF), the
        // code an RDMAP responder has for a request it cannot carry out.
        let misaligned = || TermCause::Operation(OperationError::Unspecified);
        if !request.remote_to.is_multiple_of(8) {
            return Err(misaligned());
        }
        // The word the TO maps to is then aligned too: a registration that
        // allows remote atomics maps aligned TOs to aligned words
        // (`Registration::is_valid`). Checked all the same, so that a
        // broken invariant refuses the request instead of splitting it.
        if lease.region().word(lease.offset).is_err() {
            return Err(misaligned());
        }
        let msn = self.rx_msn[1];
        self.rx_msn[1] = msn.wrapping_add(1);
        self.irrq.push_back(Irrq::Atomic {
            msn,
            request,
            arrived: ctx.now_us,
        });
        Ok(())
    }

    fn receive_atomic_response(
        &mut self,
        ctx: &mut Ctx<'_>,
        packet: &ddp::Packet<&[u8]>,
        header: &Header<'_>,
    ) -> Result<(), Failure> {
        self.check_msn(packet)?;
        let Header::AtomicResponse(response) = *header else {
            unreachable!("parsed as an Atomic Response")
        };
        let Some(&Orq::Atomic {
            seq, id, result, ..
        }) = self.orq.front()
        else {
            return Err(operation(OperationError::Unspecified));
        };
        if id != response.original_request_id {
            return Err(operation(OperationError::Unspecified));
        }
        // The result buffer's STag again: one invalidated (a peer's Send
        // with Invalidate may name it, RFC 5040 §6.10, and may come ahead
        // of the response, RFC 7306 §5.4) or deregistered while the
        // request was outstanding names nothing, and takes no octets. The
        // request then fails locally (as one whose list fails when it is
        // sent), and the stream with it.
        let sink = ctx.stags.lookup_cached(
            &mut self.rx_stag,
            result.stag,
            self.pd,
            Access::LOCAL_WRITE,
            result.to,
            8,
        );
        self.orq.pop_front();
        self.rx_msn[3] = self.rx_msn[3].wrapping_add(1);
        match sink {
            Ok((region, offset)) => {
                // Returned in the endian format of local memory, as
                // ibverbs does; in bounds: checked against the
                // registration.
                let _ = region.write(offset, &response.original_remote_value.to_ne_bytes());
                self.finish_wqe(ctx, seq, WcStatus::Success, 8);
                Ok(())
            }
            Err(_) => {
                self.finish_wqe(ctx, seq, WcStatus::LocalProtection, 0);
                Err((TermCause::LocalCatastrophic, false))
            }
        }
    }

    /// The peer ended the stream. Its Terminate is read in whichever layout
    /// fits (Linux siw writes the control word bit-swapped, as the siw captures
    /// show), and even a malformed one ends the QP: never answered with a
    /// Terminate. When it echoes the DDP header of one of our Read or Atomic
    /// Requests (queue 1; see `terminated_request`), that request completes
    /// with the remote error; everything else outstanding is flushed.
    fn receive_terminate(&mut self, ctx: &mut Ctx<'_>, packet: &ddp::Packet<&[u8]>) {
        use crate::wire::term;
        let mut info = TermInfo {
            layer: 0xF,
            etype: 0xF,
            ecode: 0xFF,
        };
        if let Ok(body) = term::Packet::new_checked(packet.payload()) {
            let mut encoding = term::detect(&body).map_or(term::Encoding::Rfc5040, |d| d.encoding);
            // siw's startup Terminate (CRC field 0, see `handle_stream`): where
            // only siw's layout reads as MPA's layer 2, type 0 (RFC 6581 §8's
            // startup codes), that layout it is.
            let (siw, rfc) = (
                body.control(term::Encoding::SiwBitfield),
                body.control(term::Encoding::Rfc5040),
            );
            if self.siw_startup_term
                && (siw.layer, siw.etype) == (2, 0)
                && (rfc.layer, rfc.etype) != (2, 0)
            {
                encoding = term::Encoding::SiwBitfield;
            }
            let control = body.control(encoding);
            info = TermInfo {
                layer: control.layer,
                etype: control.etype,
                ecode: control.ecode,
            };
            let repr = term::Repr::parse(&body, encoding).ok();
            let echoed = repr.and_then(|repr| repr.ddp_header);
            if let Some(header) = echoed.and_then(|h| ddp::Packet::new_checked(h).ok()) {
                if !header.tagged() && header.qn() == ddp::qn::READ_REQUEST {
                    let rdma_header = repr.and_then(|repr| repr.rdma_header);
                    let failed = self.terminated_request(header.msn(), rdma_header);
                    let status = match (info.layer, info.etype) {
                        // RDMAP remote protection, DDP tagged buffer.
                        (0, 1) | (1, 1) => WcStatus::RemoteAccess,
                        _ => WcStatus::RemoteOperation,
                    };
                    if let Some(wqe) = failed.and_then(|seq| self.wqe_mut(seq)) {
                        wqe.done = Some(status);
                    }
                }
            }
        }
        self.push_event(QpEvent::TerminateReceived(info));
        self.enter_error(ctx);
    }

    /// The SQ sequence number of the outstanding Read or atomic request a
    /// peer's Terminate names, from the MSN of the DDP header it echoes on
    /// queue 1 and the RDMA header it echoes with R (RFC 5040 §4.8: a Read
    /// Request's). A Read is named by its echoed Read Request, whose fields
    /// are ours verbatim, and by the MSN only where that echoes none or no
    /// outstanding Read matches it: Linux siw, for a Read Request it
    /// rejects while responding, echoes the read size in the MSN field
    /// (siw captures), which may be another outstanding Read's MSN. Of two
    /// Reads alike in every field the echoed MSN picks, or the older one.
    fn terminated_request(&self, msn: u32, rdma_header: Option<&[u8]>) -> Option<u64> {
        let echoed = rdma_header
            .and_then(|octets| rdmap::ReadRequestPacket::new_checked(octets).ok())
            .and_then(|packet| rdmap::ReadRequestRepr::parse(&packet).ok());
        let sent = |seq: u64, sink_stag: u32, sink_to: u64, len: usize| {
            let wqe = self.sq.get(seq.checked_sub(self.sq_base)? as usize)?;
            let crate::verbs::SendOp::Read(source) = wqe.op else {
                return None;
            };
            // As `emit_read_request` wrote it.
            Some(rdmap::ReadRequestRepr {
                sink_stag,
                sink_to,
                read_size: len as u32,
                source_stag: source.stag,
                source_to: source.to,
            })
        };
        let mut named = self.orq.iter().filter_map(|orq| match *orq {
            Orq::Read {
                seq,
                msn,
                sink_stag,
                sink_to,
                len,
                ..
            } if echoed.is_some() && sent(seq, sink_stag, sink_to, len) == echoed => {
                Some((seq, msn))
            }
            _ => None,
        });
        let oldest = named.next();
        let by_msn = oldest
            .into_iter()
            .chain(named)
            .find(|&(_, read_msn)| read_msn == msn);
        by_msn.or(oldest).map(|(seq, _)| seq).or_else(|| {
            self.orq
                .iter()
                .filter_map(Orq::seq_msn)
                .find(|&(_, request_msn)| request_msn == msn)
                .map(|(seq, _)| seq)
        })
    }
}
