//! The iWARP stream state machine, `dpwarp_pcap::decode::Decoder`, driven
//! directly with the events TCP reassembly would produce (see
//! `dpwarp_fuzz::stream` for the input format). Unlike `pcap_decode`, no
//! pcap/Ethernet/IP/TCP framing stands between the fuzzer and the MPA
//! startup, FPDU, marker, CRC, resync and reject logic.
//!
//! Asserts:
//! * the `Summary` counts exactly the messages produced (MPA frames, FPDUs,
//!   CRC verdicts, markers, problems and gaps);
//! * every FPDU is self-consistent: ULPDU length; stream extent the
//!   marker-free FPDU length plus 4 per marker; markers at multiples of
//!   512; once both startup frames are known, CRC verdict Good if either
//!   set C (always, under `cfg(fuzzing)`) and Off if neither did;
//! * per direction, MPA frames and FPDUs never overlap and come in stream
//!   order (a frame is consumed exactly, never an octet past PD_Length);
//! * every message renders as text and as JSON;
//! * a FIN or RST line carries the stream offset it came at (all octets and
//!   gaps of its direction before it);
//! * STYLE.md §6 "split everywhere": with no gaps in the script, no
//!   `--port` (and at most 4 KiB of data), cutting every Data record into
//!   one-octet events gives the same messages per direction (all fields but
//!   `segment_start`; runs of post-reject `NonMpa` data compared merged).
//!   A direction read as FPDUs because of `--port` looks for its first FPDU
//!   at segment starts (the capture may start inside one), and so does one
//!   that lost sync (two bad CRCs, which a direction whose peer's startup
//!   frame is missing can have): where the stream is cut is then part of
//!   the input, as after a gap, and the two decodes are not compared.

#![no_main]

use dpwarp_capture::reassembly::Dir;
use dpwarp_fuzz::stream::{drive, Cutting, Outcome, Script};
use dpwarp_pcap::decode::{Body, CrcVerdict, Message, Summary, TcpEvent, PENDING_BYTES_MAX};
use dpwarp_pcap::render::{self, Style};
use libfuzzer_sys::fuzz_target;
use rnic_engine::wire::{mpa_fpdu, mpa_marker, mpa_rr};

/// Largest script (data octets) the split check runs on; far below
/// `PENDING_BYTES_MAX`, beyond which buffering may legitimately differ.
const SPLIT_CHECK_MAX: usize = 4096;
const _: () = assert!(SPLIT_CHECK_MAX < PENDING_BYTES_MAX);

fn check_summary(messages: &[Message], summary: &Summary) {
    let mut want = Summary {
        iwarp_connections: summary.iwarp_connections,
        other_connections: summary.other_connections,
        ..Summary::default()
    };
    for m in messages {
        match &m.body {
            Body::Mpa(_) => want.mpa_frames += 1,
            Body::Fpdu(f) => {
                want.fpdus += 1;
                match f.crc {
                    CrcVerdict::Good => want.crc_good += 1,
                    CrcVerdict::Bad => want.crc_bad += 1,
                    CrcVerdict::Off => {}
                }
                want.markers += f.markers.len() as u64;
                want.markers_bad += f.markers.iter().filter(|m| !m.ok()).count() as u64;
            }
            Body::Problem(_) | Body::Gap { .. } => want.problems += 1,
            Body::NonMpa { .. } | Body::Tcp(_) | Body::Cut { .. } => {}
            // Only SCTP packets make these, and this target feeds TCP streams.
            Body::Sctp(_) => panic!("an SCTP message from TCP stream events"),
        }
    }
    assert_eq!(*summary, want, "the summary counts the messages");
    assert_eq!(
        summary.iwarp_connections + summary.other_connections,
        1,
        "one connection"
    );
}

fn check_messages(messages: &[Message]) {
    // The C flag of each direction's startup frame, once seen. With both
    // known the decoder fixes CRC on or off for good; before that it may
    // only auto-detect (after PENDING_BYTES_MAX octets, or with --port).
    let mut crc_flag = [None::<bool>; 2];
    let mut end = [0u64; 2];
    for m in messages {
        let d = usize::from(m.dir == Dir::ServerToClient);
        let _ = render::text(m, 0, Style { payload: true });
        let _ = render::json(m, 0, Style { payload: true }).to_string();
        match &m.body {
            Body::Mpa(frame) => {
                assert!(m.offset >= end[d], "MPA frame overlaps what came before");
                end[d] = m.offset + (mpa_rr::HEADER_LEN + usize::from(frame.pd_len)) as u64;
                assert!(usize::from(frame.pd_len) <= mpa_rr::PRIVATE_DATA_LEN_MAX);
                crc_flag[d].get_or_insert(frame.crc);
            }
            Body::Fpdu(f) => {
                assert!(m.offset >= end[d], "FPDU overlaps what came before");
                end[d] = m.offset + f.stream_len as u64;
                assert_eq!(f.ulpdu.len(), usize::from(f.ulpdu_len));
                let plain = mpa_fpdu::fpdu_len(usize::from(f.ulpdu_len));
                assert_eq!(
                    f.stream_len,
                    plain + mpa_marker::MARKER_LEN * f.markers.len(),
                    "an FPDU's extent is its octets plus its markers"
                );
                for marker in &f.markers {
                    assert_eq!(marker.position % mpa_marker::MARKER_INTERVAL, 0);
                }
                if let [Some(a), Some(b)] = crc_flag {
                    if a || b {
                        assert_ne!(
                            f.crc,
                            CrcVerdict::Bad,
                            "bad CRC on a CRC connection under cfg(fuzzing)"
                        );
                    } else {
                        assert_eq!(
                            f.crc,
                            CrcVerdict::Off,
                            "CRC checked on a connection without CRC"
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

fn check_tcp_ends(outcome: &Outcome) {
    for m in &outcome.messages {
        if let Body::Tcp(event @ (TcpEvent::Fin | TcpEvent::Rst)) = m.body {
            let want = outcome
                .tcp_ends
                .iter()
                .find(|(dir, frame, _)| *dir == m.dir && *frame == m.frame);
            let (_, _, offset) = want.expect("a FIN/RST line for a FIN/RST that was sent");
            assert_eq!(
                m.offset, *offset,
                "{event:?} of {:?} at the wrong stream offset",
                m.dir
            );
        }
    }
}

/// What must not change when the stream is cut differently.
fn comparable(messages: &[Message], dir: Dir) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for m in messages.iter().filter(|m| m.dir == dir) {
        let mut m = m.clone();
        m.segment_start = false;
        if let (Some(prev), Body::NonMpa { len }) = (out.last_mut(), &m.body) {
            if let Body::NonMpa { len: prev_len } = &mut prev.body {
                if prev.offset + *prev_len as u64 == m.offset {
                    *prev_len += len;
                    prev.frame = m.frame;
                    prev.ts_ns = m.ts_ns;
                    continue;
                }
            }
        }
        out.push(m);
    }
    out
}

/// Whether a decode looked for an FPDU at segment starts (lost sync).
fn resynchronised(messages: &[Message]) -> bool {
    messages.iter().any(|m| {
        matches!(&m.body, Body::Problem(p) if p.contains("segment start") || p.contains("resynchronised"))
    })
}

fuzz_target!(|data: &[u8]| {
    let script = Script::parse(data);
    let scripted = drive(&script, Cutting::AsScripted);
    check_summary(&scripted.messages, &scripted.summary);
    check_messages(&scripted.messages);
    check_tcp_ends(&scripted);

    // One event per octet is slow; 4 KiB already holds a startup and FPDUs.
    // Segment starts are where a gap, or `--port`, looks for an FPDU.
    if script.has_gap() || script.forced || script.data_len() > SPLIT_CHECK_MAX {
        return;
    }
    let cut = drive(&script, Cutting::EveryOctet);
    check_summary(&cut.messages, &cut.summary);
    check_tcp_ends(&cut);
    if resynchronised(&scripted.messages) || resynchronised(&cut.messages) {
        return;
    }
    for dir in [Dir::ClientToServer, Dir::ServerToClient] {
        let a = comparable(&scripted.messages, dir);
        let b = comparable(&cut.messages, dir);
        assert_eq!(
            a, b,
            "cutting the {dir:?} stream at every octet changed the decode"
        );
    }
});
