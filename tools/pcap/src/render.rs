//! Text lines and JSON objects for [`Message`]s.
//!
//! Text: one line per message,
//! `FRAME TIME SRC > DST seq=REL KIND details`, TIME in seconds since the
//! first record, REL the relative TCP sequence number as Wireshark shows it.
//! CRC fields print as their wire octets (`crc=013cacdf`), which is how
//! Wireshark shows them too; the CRC32c value is those octets read least
//! significant first.
//!
//! SCTP chunks (DDP over SCTP) print as
//! `FRAME TIME SRC > DST sctp[/udp] assoc=N` and the chunk: `SCTP INIT ...`,
//! `SCTP SACK ...`, `DDP SESSION sid= tsn= stream_seq= ssn= FUNCTION ...` for
//! PPID 17, `DDP sid= tsn= stream_seq= ssn= SEGMENT segment_len=` for PPID 16,
//! `SCTP DATA ...` for other DATA, `! problem`.
//!
//! JSON (`--json`): one object per line, keys documented in the README. Every
//! FPDU object has every FPDU key; a key that does not apply (`stag` of an
//! untagged segment) is `null`. A DDP segment over SCTP is an FPDU object too,
//! with `crc` `"off"` and the SCTP keys (`llp`, `assoc`, `sid`, `tsn`, `ssn`,
//! ...) in place of the TCP ones (`conn`, `seq`, `tcp_seq`).

use std::fmt::Write as _;

use rnic_engine::wire::pretty::{Hex, Ulpdu};
use rnic_engine::wire::{ddp, mpa_rr, rdmap, term};
use serde_json::{json, Map, Value};

use crate::decode::{
    function, Association, Body, CrcVerdict, DataChunk, Fpdu, Message, MpaFrame, SctpBody,
    SctpChunk, Summary, TcpEvent,
};

/// Octets of payload `--payload` shows.
pub const PAYLOAD_SHOWN_MAX: usize = 64;

/// How to print.
#[derive(Debug, Clone, Copy, Default)]
pub struct Style {
    /// Show up to [`PAYLOAD_SHOWN_MAX`] octets of each payload.
    pub payload: bool,
}

/// The text line of a message. `t0_ns` is the first record's time.
pub fn text(message: &Message, t0_ns: u64, style: Style) -> String {
    let t = message.ts_ns.saturating_sub(t0_ns);
    let mut line = format!(
        "{:>6} {:>4}.{:06} {} > {} ",
        message.frame,
        t / 1_000_000_000,
        (t % 1_000_000_000) / 1000,
        message.src,
        message.dst,
    );
    if let Body::Sctp(chunk) = &message.body {
        write_sctp_text(&mut line, message, chunk, style);
        return line;
    }
    let _ = write!(line, "seq={} ", message.seq_rel());
    match &message.body {
        Body::Mpa(frame) => write_mpa_text(&mut line, frame),
        Body::Fpdu(fpdu) => write_fpdu_text(&mut line, fpdu, style),
        Body::NonMpa { len } => {
            let _ = write!(
                line,
                "DATA len={len} (after an MPA reject: ULP data, not FPDUs)"
            );
        }
        Body::Tcp(event) => line.push_str(tcp_name(*event)),
        Body::Gap { len } => {
            let _ = write!(line, "GAP {len} octets missing from the capture");
        }
        Body::Problem(text) => {
            let _ = write!(line, "! {text}");
        }
        Body::Cut { what, len } => {
            let _ = write!(line, "CUT by a reset inside {what}: {len} octets discarded");
        }
        // Written above, with its own prefix.
        Body::Sctp(_) => {}
    }
    line
}

fn tcp_name(event: TcpEvent) -> &'static str {
    match event {
        TcpEvent::Syn => "TCP SYN",
        TcpEvent::SynAck => "TCP SYN-ACK",
        TcpEvent::Fin => "TCP FIN",
        TcpEvent::Rst => "TCP RST",
    }
}

fn mpa_repr(frame: &MpaFrame) -> mpa_rr::Repr<'_> {
    mpa_rr::Repr {
        kind: frame.kind,
        markers: frame.markers,
        crc: frame.crc,
        reject: frame.reject,
        reserved: frame.reserved,
        revision: frame.revision,
        enhanced: frame.enhanced,
        private_data: &frame.private_data,
    }
}

fn write_mpa_text(line: &mut String, frame: &MpaFrame) {
    let _ = write!(line, "{}", mpa_repr(frame));
    if !frame.private_data.is_empty() {
        let shown = &frame.private_data[..frame.private_data.len().min(PAYLOAD_SHOWN_MAX)];
        let _ = write!(line, " ulp_pd={}", Hex(shown));
    }
}

fn crc_name(verdict: CrcVerdict) -> &'static str {
    match verdict {
        CrcVerdict::Good => "good",
        CrcVerdict::Bad => "bad",
        CrcVerdict::Off => "off",
    }
}

fn write_fpdu_text(line: &mut String, fpdu: &Fpdu, style: Style) {
    write_segment_text(line, &fpdu.ulpdu, fpdu.rtr);
    let _ = write!(
        line,
        " ulpdu_len={} crc={}({})",
        fpdu.ulpdu_len,
        Hex(&fpdu.crc_field),
        crc_name(fpdu.crc)
    );
    if fpdu.crc == CrcVerdict::Bad {
        let _ = write!(line, " expected={}", Hex(&fpdu.crc_computed.to_le_bytes()));
    }
    if !fpdu.markers.is_empty() {
        let bad: Vec<_> = fpdu.markers.iter().filter(|m| !m.ok()).collect();
        let _ = write!(line, " markers={}", fpdu.markers.len());
        if bad.is_empty() {
            line.push_str("(ok)");
        }
        for m in bad {
            let _ = write!(
                line,
                " BAD-MARKER@{}:fpduptr={},expected={}",
                m.position, m.fpduptr, m.expected
            );
        }
    }
    write_payload_text(line, &fpdu.ulpdu, style);
}

/// A DDP segment (an FPDU's ULPDU, or the segment of a DDP message over SCTP):
/// its DDP and RDMAP headers, and the other reading of a Terminate.
fn write_segment_text(line: &mut String, segment: &[u8], rtr: bool) {
    let _ = write!(line, "{}", Ulpdu(segment));
    if rtr {
        line.push_str(" (RTR)");
    }
    if let Some(alt) = term_alternative(segment) {
        let _ = write!(line, " [other reading: {alt}]");
    }
}

/// With `--payload`, the start of a DDP segment's ULP payload.
fn write_payload_text(line: &mut String, segment: &[u8], style: Style) {
    if style.payload {
        if let Some(payload) = payload(segment) {
            let shown = &payload[..payload.len().min(PAYLOAD_SHOWN_MAX)];
            let _ = write!(line, " payload=\"{}\"", shown.escape_ascii());
        }
    }
}

/// The ULP payload of a ULPDU that parses.
fn payload(ulpdu: &[u8]) -> Option<&[u8]> {
    let packet = ddp::Packet::new_checked(ulpdu).ok()?;
    rdmap::Repr::parse(&packet).ok().map(|r| r.payload)
}

/// For a Terminate whose control word also reads differently in the other
/// layout, that other reading (siw's bit-swapped control word: report both when
/// they differ).
fn term_alternative(ulpdu: &[u8]) -> Option<String> {
    let (chosen, packet) = terminate(ulpdu)?;
    let other = match chosen.encoding {
        term::Encoding::Rfc5040 => term::Encoding::SiwBitfield,
        term::Encoding::SiwBitfield => term::Encoding::Rfc5040,
    };
    let word = packet.control(other);
    let mine = chosen.control();
    if (word.layer, word.etype, word.ecode) == (mine.layer, mine.etype, mine.ecode) {
        return None;
    }
    let name = word.describe().unwrap_or("unregistered");
    Some(format!(
        "{}: layer={} etype={} ecode={:#04x} ({name})",
        encoding_name(other),
        word.layer,
        word.etype,
        word.ecode
    ))
}

fn terminate(ulpdu: &[u8]) -> Option<(term::Repr<'_>, term::Packet<&[u8]>)> {
    let packet = ddp::Packet::new_checked(ulpdu).ok()?;
    let repr = rdmap::Repr::parse(&packet).ok()?;
    let rdmap::Header::Terminate(t) = repr.header else {
        return None;
    };
    let payload = &ulpdu[packet.header_len()..];
    Some((t, term::Packet::new_unchecked(payload)))
}

fn encoding_name(encoding: term::Encoding) -> &'static str {
    match encoding {
        term::Encoding::Rfc5040 => "rfc5040",
        term::Encoding::SiwBitfield => "siw",
    }
}

/// The JSON object of a message.
pub fn json(message: &Message, t0_ns: u64, style: Style) -> Value {
    let mut object = Map::new();
    object.insert("frame".into(), json!(message.frame));
    object.insert("first_frame".into(), json!(message.first_frame));
    object.insert(
        "time".into(),
        json!(message.ts_ns.saturating_sub(t0_ns) as f64 / 1e9),
    );
    object.insert("src".into(), json!(message.src.to_string()));
    object.insert("dst".into(), json!(message.dst.to_string()));
    if let Body::Sctp(chunk) = &message.body {
        sctp_json(&mut object, message, chunk, style);
        return Value::Object(object);
    }
    object.insert("conn".into(), json!(message.conn.0));
    object.insert("seq".into(), json!(message.seq_rel()));
    object.insert("tcp_seq".into(), json!(message.tcp_seq));
    match &message.body {
        Body::Mpa(frame) => mpa_json(&mut object, frame),
        Body::Fpdu(fpdu) => fpdu_json(&mut object, fpdu, style),
        Body::NonMpa { len } => {
            object.insert("kind".into(), json!("data"));
            object.insert("len".into(), json!(len));
        }
        Body::Tcp(event) => {
            object.insert("kind".into(), json!("tcp"));
            let name = match event {
                TcpEvent::Syn => "syn",
                TcpEvent::SynAck => "syn_ack",
                TcpEvent::Fin => "fin",
                TcpEvent::Rst => "rst",
            };
            object.insert("event".into(), json!(name));
        }
        Body::Gap { len } => {
            object.insert("kind".into(), json!("gap"));
            object.insert("len".into(), json!(len));
        }
        Body::Problem(text) => {
            object.insert("kind".into(), json!("problem"));
            object.insert("message".into(), json!(text));
        }
        Body::Cut { what, len } => {
            object.insert("kind".into(), json!("cut"));
            object.insert("inside".into(), json!(what));
            object.insert("len".into(), json!(len));
        }
        // Written above, with its own common keys.
        Body::Sctp(_) => {}
    }
    Value::Object(object)
}

fn mpa_json(object: &mut Map<String, Value>, frame: &MpaFrame) {
    let kind = match frame.kind {
        mpa_rr::FrameKind::Request => "mpa_req",
        mpa_rr::FrameKind::Reply => "mpa_rep",
    };
    object.insert("kind".into(), json!(kind));
    object.insert("rev".into(), json!(frame.revision));
    object.insert("m".into(), json!(frame.markers));
    object.insert("c".into(), json!(frame.crc));
    object.insert("r".into(), json!(frame.reject));
    object.insert("s".into(), json!(frame.enhanced.is_some()));
    object.insert("res".into(), json!(frame.reserved));
    object.insert("pd_len".into(), json!(frame.pd_len));
    if let Some(e) = frame.enhanced {
        enhanced_json(object, &e);
    }
    object.insert(
        "private_data".into(),
        json!(Hex(&frame.private_data).to_string()),
    );
}

/// RFC 6581's enhanced word, as an MPA frame and a session control message
/// carry it.
fn enhanced_json(object: &mut Map<String, Value>, e: &mpa_rr::EnhancedRepr) {
    object.insert("ird".into(), json!(e.ird));
    object.insert("ord".into(), json!(e.ord));
    object.insert("p2p".into(), json!(e.peer_to_peer));
    object.insert("rtr_send".into(), json!(e.rtr_send));
    object.insert("rtr_write".into(), json!(e.rtr_write));
    object.insert("rtr_read".into(), json!(e.rtr_read));
}

fn fpdu_json(object: &mut Map<String, Value>, fpdu: &Fpdu, style: Style) {
    object.insert("kind".into(), json!("fpdu"));
    object.insert("ulpdu_len".into(), json!(fpdu.ulpdu_len));
    object.insert("crc".into(), json!(crc_name(fpdu.crc)));
    object.insert("crc_field".into(), json!(Hex(&fpdu.crc_field).to_string()));
    object.insert("rtr".into(), json!(fpdu.rtr));
    let markers: Vec<Value> = fpdu
        .markers
        .iter()
        .map(|m| json!({"pos": m.position, "fpduptr": m.fpduptr, "ok": m.ok()}))
        .collect();
    object.insert("markers".into(), Value::Array(markers));
    segment_json(object, &fpdu.ulpdu, style);
}

/// The DDP and RDMAP keys of a DDP segment (an FPDU's ULPDU, or the segment of
/// a DDP message over SCTP). Every key is there; those that do not apply are
/// `null`, and `malformed` says whether the headers parsed.
fn segment_json(object: &mut Map<String, Value>, segment: &[u8], style: Style) {
    for key in [
        "tagged", "last", "dv", "rv", "opcode", "op", "qn", "msn", "mo", "stag", "to",
    ] {
        object.insert(key.into(), Value::Null);
    }
    object.insert("payload_len".into(), Value::Null);
    object.insert("malformed".into(), json!(false));
    let Ok(packet) = ddp::Packet::new_checked(segment) else {
        object.insert("malformed".into(), json!(true));
        return;
    };
    ddp_json(object, &packet);
    match rdmap::Repr::parse(&packet) {
        Ok(repr) => rdmap_json(object, &repr, style),
        Err(_) => {
            object.insert("malformed".into(), json!(true));
        }
    }
}

fn ddp_json(object: &mut Map<String, Value>, packet: &ddp::Packet<&[u8]>) {
    let control = rdmap::Control::from_octet(packet.rsvd_ulp());
    object.insert("tagged".into(), json!(packet.tagged()));
    object.insert("last".into(), json!(packet.last()));
    object.insert("dv".into(), json!(packet.version()));
    object.insert("rv".into(), json!(control.version));
    object.insert("opcode".into(), json!(u8::from(control.opcode)));
    let name = control.opcode.info().map(|i| i.name);
    object.insert("op".into(), json!(name));
    if packet.tagged() {
        object.insert("stag".into(), json!(packet.stag()));
        object.insert("to".into(), json!(packet.tagged_offset()));
    } else {
        object.insert("qn".into(), json!(packet.qn()));
        object.insert("msn".into(), json!(packet.msn()));
        object.insert("mo".into(), json!(packet.mo()));
        if control.opcode.invalidates() {
            object.insert("inval_stag".into(), json!(packet.rsvd_ulp_word()));
        }
    }
    object.insert("payload_len".into(), json!(packet.payload().len()));
}

fn rdmap_json(object: &mut Map<String, Value>, repr: &rdmap::Repr<'_>, style: Style) {
    object.insert("payload_len".into(), json!(repr.payload.len()));
    match &repr.header {
        rdmap::Header::None => {}
        rdmap::Header::ReadRequest(r) => {
            object.insert(
                "read".into(),
                json!({"sink_stag": r.sink_stag, "sink_to": r.sink_to, "size": r.read_size,
                       "src_stag": r.source_stag, "src_to": r.source_to}),
            );
        }
        rdmap::Header::Terminate(t) => term_json(object, t),
        rdmap::Header::Immediate(data) => {
            object.insert("imm".into(), json!(Hex(data).to_string()));
        }
        rdmap::Header::AtomicRequest(a) => {
            object.insert(
                "atomic".into(),
                json!({"aop": u8::from(a.opcode), "id": a.request_id, "stag": a.remote_stag,
                       "to": a.remote_to, "data": a.add_or_swap_data, "mask": a.add_or_swap_mask,
                       "cmp": a.compare_data, "cmp_mask": a.compare_mask}),
            );
        }
        rdmap::Header::AtomicResponse(a) => {
            object.insert(
                "atomic".into(),
                json!({"id": a.original_request_id, "orig": a.original_remote_value}),
            );
        }
    }
    if style.payload {
        let shown = &repr.payload[..repr.payload.len().min(PAYLOAD_SHOWN_MAX)];
        object.insert("payload_hex".into(), json!(Hex(shown).to_string()));
    }
}

fn term_json(object: &mut Map<String, Value>, t: &term::Repr<'_>) {
    let control = t.control();
    object.insert("layer".into(), json!(control.layer));
    object.insert("etype".into(), json!(control.etype));
    object.insert("ecode".into(), json!(control.ecode));
    object.insert("term_m".into(), json!(control.m));
    object.insert("term_d".into(), json!(control.d));
    object.insert("term_r".into(), json!(control.r));
    object.insert("term_encoding".into(), json!(encoding_name(t.encoding)));
    object.insert("term_desc".into(), json!(control.describe()));
    if control.m || control.d {
        object.insert("ddp_seg_len".into(), json!(t.ddp_segment_length));
    }
}

/// The closing summary line of text output.
///
/// The SCTP counts are added only to a capture that holds SCTP, so the line
/// of a TCP-only capture reads as it always has.
pub fn summary(summary: &Summary) -> String {
    let mut line = format!(
        "# {} iWARP connection(s), {} other; {} MPA frame(s), {} FPDU(s) (CRC: {} good, {} bad); \
         {} marker(s), {} bad; {} problem(s)",
        summary.iwarp_connections,
        summary.other_connections,
        summary.mpa_frames,
        summary.fpdus,
        summary.crc_good,
        summary.crc_bad,
        summary.markers,
        summary.markers_bad,
        summary.problems
    );
    if summary.ignored_segments > 0 || summary.conflicting_bytes > 0 || summary.dropped_bytes > 0 {
        let _ = write!(
            line,
            "; reassembly: {} segment(s) not taken (too many open connections), {} octet(s) \
             retransmitted with different values, {} octet(s) dropped before the start of their \
             stream",
            summary.ignored_segments, summary.conflicting_bytes, summary.dropped_bytes
        );
    }
    if summary.stray_segments > 0 {
        let _ = write!(
            line,
            "; {} TCP segment(s) of older connections left out",
            summary.stray_segments
        );
    }
    if summary.resynced > 0 {
        let _ = write!(
            line,
            "; {} direction(s) taken back after the capture lost more than a window",
            summary.resynced
        );
    }
    if summary.unsupported_frames > 0 {
        let _ = write!(
            line,
            "; {} frame(s) of unsupported link-layer types not decoded",
            summary.unsupported_frames
        );
    }
    if summary.datagrams_reassembled > 0 {
        let _ = write!(
            line,
            "; {} IP datagram(s) reassembled from fragments",
            summary.datagrams_reassembled
        );
    }
    if summary.fragments > 0 {
        let _ = write!(
            line,
            "; {} IP fragment(s) not reassembled, not decoded",
            summary.fragments
        );
    }
    if summary.sctp_packets > 0 {
        let _ = write!(
            line,
            "; SCTP: {} association(s), {} packet(s), {} chunk(s), {} DDP segment(s), {} session \
             control message(s)",
            summary.sctp_associations,
            summary.sctp_packets,
            summary.sctp_chunks,
            summary.ddp_segments,
            summary.session_messages
        );
    }
    line
}

/// The text of an SCTP chunk, after frame, time and endpoints:
/// `sctp[/udp] assoc=N` and what the chunk is.
fn write_sctp_text(line: &mut String, message: &Message, chunk: &SctpChunk, style: Style) {
    let carrier = if chunk.udp { "sctp/udp" } else { "sctp" };
    let _ = write!(line, "{carrier} assoc={} ", message.conn.0);
    match &chunk.what {
        SctpBody::Association(a) => write_association_text(line, a, chunk.chunk_type),
        SctpBody::Data(data) => {
            line.push_str("SCTP DATA ");
            write_data_text(line, data);
            let _ = write!(line, " ppid={} len={}", data.ppid, data.len);
            if !data.whole() {
                let _ = write!(
                    line,
                    " (fragment B={} E={})",
                    data.begin as u8, data.end as u8
                );
            }
        }
        SctpBody::Session(session) => {
            line.push_str("DDP SESSION ");
            write_data_text(line, &session.data);
            let _ = write!(
                line,
                " ssn={} {} ({})",
                session.ssn,
                function::name(session.function),
                session.function
            );
            if let Some(e) = session.enhanced {
                let _ = write!(
                    line,
                    " IRD={} ORD={} p2p={} rtr_send={} rtr_write={} rtr_read={}",
                    e.ird,
                    e.ord,
                    e.peer_to_peer as u8,
                    e.rtr_send as u8,
                    e.rtr_write as u8,
                    e.rtr_read as u8
                );
            }
            let pd = &session.private_data;
            let _ = write!(line, " pd_len={}", pd.len());
            if !pd.is_empty() {
                let _ = write!(line, " pd={}", Hex(&pd[..pd.len().min(PAYLOAD_SHOWN_MAX)]));
            }
        }
        SctpBody::Segment(segment) => {
            line.push_str("DDP ");
            write_data_text(line, &segment.data);
            let _ = write!(line, " ssn={} ", segment.ssn);
            write_segment_text(line, &segment.segment, false);
            let _ = write!(line, " segment_len={}", segment.segment.len());
            write_payload_text(line, &segment.segment, style);
        }
        SctpBody::Problem(text) => {
            let _ = write!(line, "! {text}");
        }
    }
}

fn write_data_text(line: &mut String, data: &DataChunk) {
    let _ = write!(
        line,
        "sid={} tsn={} stream_seq={}{}",
        data.sid,
        data.tsn,
        data.stream_seq,
        if data.unordered { " U" } else { "" }
    );
}

fn write_association_text(line: &mut String, association: &Association, chunk_type: Option<u8>) {
    let causes = |causes: &[u16]| {
        let codes: Vec<String> = causes.iter().map(|c| c.to_string()).collect();
        codes.join(",")
    };
    let _ = match association {
        Association::Init(init) | Association::InitAck(init) => {
            let name = match association {
                Association::Init(_) => "INIT",
                _ => "INIT-ACK",
            };
            let adaptation = match init.adaptation {
                Some(rnic_engine::sctp::ADAPTATION_DDP) => "1 (DDP)".to_string(),
                Some(other) => other.to_string(),
                None => "none".to_string(),
            };
            write!(
                line,
                "SCTP {name} init_tag={:#010x} init_tsn={} a_rwnd={} streams={}/{} \
                 adaptation={adaptation}",
                init.init_tag,
                init.init_tsn,
                init.a_rwnd,
                init.outbound_streams,
                init.inbound_streams
            )
        }
        Association::Sack(sack) => write!(
            line,
            "SCTP SACK cum_tsn_ack={} a_rwnd={} gap_blocks={} dup_tsns={}",
            sack.cum_tsn_ack, sack.a_rwnd, sack.gap_blocks, sack.dup_tsns
        ),
        Association::Heartbeat => write!(line, "SCTP HEARTBEAT"),
        Association::HeartbeatAck => write!(line, "SCTP HEARTBEAT-ACK"),
        Association::Abort {
            reflected,
            causes: c,
        } => write!(
            line,
            "SCTP ABORT T={} causes=[{}]",
            *reflected as u8,
            causes(c)
        ),
        Association::Shutdown { cum_tsn_ack } => {
            write!(line, "SCTP SHUTDOWN cum_tsn_ack={cum_tsn_ack}")
        }
        Association::ShutdownAck => write!(line, "SCTP SHUTDOWN-ACK"),
        Association::Error { causes: c } => write!(line, "SCTP ERROR causes=[{}]", causes(c)),
        Association::CookieEcho { cookie_len } => {
            write!(line, "SCTP COOKIE-ECHO cookie_len={cookie_len}")
        }
        Association::CookieAck => write!(line, "SCTP COOKIE-ACK"),
        Association::ShutdownComplete { reflected } => {
            write!(line, "SCTP SHUTDOWN-COMPLETE T={}", *reflected as u8)
        }
        Association::Other { len } => {
            let kind = chunk_type.unwrap_or_default();
            write!(line, "SCTP chunk type={kind} len={len}")
        }
    };
}

/// The JSON keys of an SCTP chunk: the packet's (`llp`, `assoc`, `vtag`,
/// `udp`, `chunk`, `chunk_type`, `chunk_flags`), then the chunk's by `kind`.
fn sctp_json(object: &mut Map<String, Value>, message: &Message, chunk: &SctpChunk, style: Style) {
    object.insert("llp".into(), json!("sctp"));
    object.insert("assoc".into(), json!(message.conn.0));
    object.insert("vtag".into(), json!(chunk.verification_tag));
    object.insert("udp".into(), json!(chunk.udp));
    object.insert("chunk".into(), json!(chunk.index));
    object.insert("chunk_type".into(), json!(chunk.chunk_type));
    object.insert("chunk_flags".into(), json!(chunk.flags));
    match &chunk.what {
        SctpBody::Association(a) => {
            object.insert("kind".into(), json!("sctp"));
            object.insert("event".into(), json!(a.event()));
            association_json(object, a);
        }
        SctpBody::Data(data) => {
            object.insert("kind".into(), json!("sctp"));
            object.insert("event".into(), json!("data"));
            data_json(object, data);
            object.insert("len".into(), json!(data.len));
        }
        SctpBody::Session(session) => {
            object.insert("kind".into(), json!("ddp_session"));
            data_json(object, &session.data);
            object.insert("ssn".into(), json!(session.ssn));
            object.insert("function".into(), json!(session.function));
            let name = function::name(session.function);
            object.insert("function_name".into(), json!(name));
            object.insert("pd_len".into(), json!(session.private_data.len()));
            let pd = Hex(&session.private_data).to_string();
            object.insert("private_data".into(), json!(pd));
            if let Some(e) = session.enhanced {
                enhanced_json(object, &e);
            }
        }
        SctpBody::Segment(segment) => {
            // The keys of an FPDU, with what SCTP has in place of MPA's: no
            // ULPDU_Length field (the segment's length stands in), no CRC of its
            // own (SCTP's CRC32c covers the packet), no markers.
            object.insert("kind".into(), json!("fpdu"));
            object.insert("ulpdu_len".into(), json!(segment.segment.len()));
            object.insert("crc".into(), json!(crc_name(CrcVerdict::Off)));
            object.insert("crc_field".into(), Value::Null);
            object.insert("rtr".into(), json!(false));
            object.insert("markers".into(), json!([]));
            segment_json(object, &segment.segment, style);
            data_json(object, &segment.data);
            object.insert("ssn".into(), json!(segment.ssn));
        }
        SctpBody::Problem(text) => {
            object.insert("kind".into(), json!("problem"));
            object.insert("message".into(), json!(text));
        }
    }
}

/// A DATA chunk's header: `sid`, `tsn`, `stream_seq` (SCTP's, not the
/// DDP-SSN), `ppid`, `u`, `b`, `e`.
fn data_json(object: &mut Map<String, Value>, data: &DataChunk) {
    object.insert("sid".into(), json!(data.sid));
    object.insert("tsn".into(), json!(data.tsn));
    object.insert("stream_seq".into(), json!(data.stream_seq));
    object.insert("ppid".into(), json!(data.ppid));
    object.insert("u".into(), json!(data.unordered));
    object.insert("b".into(), json!(data.begin));
    object.insert("e".into(), json!(data.end));
}

fn association_json(object: &mut Map<String, Value>, association: &Association) {
    match association {
        Association::Init(init) | Association::InitAck(init) => {
            object.insert("init_tag".into(), json!(init.init_tag));
            object.insert("a_rwnd".into(), json!(init.a_rwnd));
            object.insert("os".into(), json!(init.outbound_streams));
            object.insert("mis".into(), json!(init.inbound_streams));
            object.insert("init_tsn".into(), json!(init.init_tsn));
            object.insert("adaptation".into(), json!(init.adaptation));
        }
        Association::Sack(sack) => {
            object.insert("cum_tsn_ack".into(), json!(sack.cum_tsn_ack));
            object.insert("a_rwnd".into(), json!(sack.a_rwnd));
            object.insert("gap_blocks".into(), json!(sack.gap_blocks));
            object.insert("dup_tsns".into(), json!(sack.dup_tsns));
        }
        Association::Abort { reflected, causes } => {
            object.insert("t".into(), json!(reflected));
            object.insert("causes".into(), json!(causes));
        }
        Association::Shutdown { cum_tsn_ack } => {
            object.insert("cum_tsn_ack".into(), json!(cum_tsn_ack));
        }
        Association::Error { causes } => {
            object.insert("causes".into(), json!(causes));
        }
        Association::CookieEcho { cookie_len } => {
            object.insert("cookie_len".into(), json!(cookie_len));
        }
        Association::ShutdownComplete { reflected } => {
            object.insert("t".into(), json!(reflected));
        }
        Association::Other { len } => {
            object.insert("len".into(), json!(len));
        }
        Association::Heartbeat
        | Association::HeartbeatAck
        | Association::ShutdownAck
        | Association::CookieAck => {}
    }
}
