//! FPDUs aligned to TCP segments (`Rnic::poll_transmit_segments`, RFC 5044
//! §5): the framer's longest ULPDU for a room, the engine shrinking data
//! FPDUs to end at a segment boundary and stopping before an FPDU that does
//! not fit, and random workloads between two engines whose link models
//! TCP's segmentation, every FPDU checked against the segments, every
//! operation against a model of memory and completions.

mod support;

use std::sync::Arc;

use proptest::prelude::*;
use rnic_engine::cq::{WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Region};
use rnic_engine::mpa::tx::{Framer, TxConfig, EMSS_MIN};
use rnic_engine::pair::{Link, PairConfig, Recording, RnicPair};
use rnic_engine::verbs::{Mr, Segments, SendOp, SendWr, Sge};
use rnic_engine::wire::mpa_marker::{self, Piece, Pieces};
use rnic_engine::wire::rdmap::{Control, Opcode};
use rnic_engine::wire::{ddp, mpa_fpdu};
use support::*;

/// One FPDU of a stream.
#[derive(Debug)]
struct Fpdu {
    /// Stream positions of its first octet and one past its last.
    start: u64,
    end: u64,
    /// Its ULPDU (the DDP segment), markers removed.
    ulpdu: Vec<u8>,
}

/// Splits `stream`, whose first octet is at stream position `start`, into
/// its FPDUs by their ULPDU_Length fields (RFC 5044 §4: ULPDU_Length, the
/// ULPDU, PAD to a multiple of 4, CRC; markers inside counted).
fn fpdus(stream: &[u8], start: u64, markers: bool) -> Vec<Fpdu> {
    let mut found = Vec::new();
    let mut at = 0usize;
    while at < stream.len() {
        let position = start + at as u64;
        // FPDUs and markers are 4-aligned: no marker splits the length.
        let length_at = if markers && mpa_marker::is_marker_at(position) {
            at + 4
        } else {
            at
        };
        let ulpdu_len = usize::from(u16::from_be_bytes([
            stream[length_at],
            stream[length_at + 1],
        ]));
        let fpdu_len = mpa_fpdu::fpdu_len(ulpdu_len);
        let wire_len = if markers {
            mpa_marker::stream_len(position, fpdu_len)
        } else {
            fpdu_len
        };
        assert!(
            at + wire_len <= stream.len(),
            "the FPDU at {position} ({wire_len} octets) runs past the stream's end"
        );
        let raw = &stream[at..at + wire_len];
        let octets: Vec<u8> = if markers {
            Pieces::new(position, raw)
                .filter_map(|piece| match piece {
                    Piece::Data(data) => Some(data),
                    Piece::Marker { .. } => None,
                })
                .flatten()
                .copied()
                .collect()
        } else {
            raw.to_vec()
        };
        assert_eq!(octets.len(), fpdu_len);
        found.push(Fpdu {
            start: position,
            end: position + wire_len as u64,
            ulpdu: octets[2..2 + ulpdu_len].to_vec(),
        });
        at += wire_len;
    }
    found
}

/// A data FPDU's DDP header length, payload length and L flag; `None` for
/// any other message.
fn data_segment(ulpdu: &[u8]) -> Option<(usize, usize, bool)> {
    let packet = ddp::Packet::new_checked(ulpdu).expect("a DDP header");
    let opcode = Control::from_octet(packet.rsvd_ulp()).opcode;
    let data = matches!(
        opcode,
        Opcode::RdmaWrite
            | Opcode::RdmaReadResponse
            | Opcode::Send
            | Opcode::SendWithInvalidate
            | Opcode::SendWithSe
            | Opcode::SendWithSeAndInvalidate
    );
    let header_len = packet.header_len();
    data.then(|| (header_len, ulpdu.len() - header_len, packet.last()))
}

fn framer(markers: bool, emss: usize) -> Framer {
    Framer::new(TxConfig {
        crc: true,
        markers,
        emss,
    })
    .unwrap()
}

/// `ulpdu_len_max` agrees with `wire_len` everywhere: the longest ULPDU
/// whose FPDU fits the room, at every FPDU start of the first 1600 octets
/// (markers at 0, 512, 1024, 1536) and every room up to an EMSS and more.
#[test]
fn ulpdu_len_max_is_the_longest_ulpdu_that_fits() {
    for markers in [false, true] {
        for emss in [EMSS_MIN, 536, 1448] {
            let mut f = framer(markers, emss);
            let mulpdu = f.mulpdu();
            let mut out = [0u8; 16];
            let mut starts = 0;
            while f.position() < 1600 {
                // wire_len grows with the ULPDU: one sweep finds the
                // longest that fits each room.
                let wire: Vec<usize> = (0..=mulpdu).map(|u| f.wire_len(u)).collect();
                let (mut best, mut next) = (None, 0);
                for room in 0..=emss + 16 {
                    while next <= mulpdu && wire[next] <= room {
                        best = Some(next);
                        next += 1;
                    }
                    assert_eq!(
                        f.ulpdu_len_max(room),
                        best,
                        "markers {markers} EMSS {emss} position {} room {room}",
                        f.position()
                    );
                }
                // On by the smallest FPDU: 8 octets, 12 with a marker, so
                // starts fall on both sides of every marker.
                f.frame(&[&[0u8; 2]], &mut out).unwrap();
                starts += 1;
            }
            assert!(starts > 130, "{starts} positions");
        }
    }
}

/// The lengths at positions next to a marker, worked by hand.
#[test]
fn ulpdu_len_max_counts_the_markers_in_the_room() {
    // (lead-in ULPDU, position it leaves, room, longest ULPDU)
    let cases = [
        // Markers at 0 and 512 take 8 of 700 octets: FPDU 692, ULPDU 686.
        (None, 0, 700, Some(686)),
        // [504, 520): the marker at 512 leaves 12 octets, ULPDU 6.
        (Some(494), 504, 16, Some(6)),
        (Some(494), 504, 15, Some(2)),
        // [508, 516): 4 octets and the marker: not even an empty FPDU.
        (Some(498), 508, 8, None),
        (Some(498), 508, 12, Some(2)),
        // [500, 514): half the marker is in the room; 12 octets before it.
        (Some(490), 500, 14, Some(6)),
        (Some(490), 500, 12, Some(6)),
        (Some(490), 500, 11, Some(2)),
        // After the marker: [520, 1020) holds none.
        (Some(506), 520, 500, Some(494)),
        // Capped at MULPDU (1430 for EMSS 1448 with markers).
        (None, 0, 4000, Some(1430)),
    ];
    for (lead_in, position, room, longest) in cases {
        let mut f = framer(true, 1448);
        if let Some(len) = lead_in {
            f.frame(&[&vec![0u8; len]], &mut [0u8; 1448]).unwrap();
        }
        assert_eq!(f.position(), position);
        assert_eq!(f.ulpdu_len_max(room), longest, "{position} + {room}");
    }
    // Without markers: the room rounded down to 4, less length and CRC.
    let f = framer(false, 1448);
    for (room, longest) in [(700, Some(694)), (703, Some(694)), (8, Some(2)), (7, None)] {
        assert_eq!(f.ulpdu_len_max(room), longest);
    }
}

/// The lengths of the FPDUs a call wrote, as (ULPDU length, wire length).
fn lengths(out: &[u8], start: u64, markers: bool) -> Vec<(usize, usize)> {
    fpdus(out, start, markers)
        .iter()
        .map(|f| (f.ulpdu.len(), (f.end - f.start) as usize))
        .collect()
}

/// A pair with a region on each side, and side a's framer position moved
/// to `lead_in` by a Write sent with `poll_transmit` (and not delivered:
/// only a's output is looked at).
fn sender(markers: bool, lead_in: usize) -> (RnicPair, Mr, Mr) {
    let mut pair = pair(PairConfig {
        markers,
        ..PairConfig::default()
    });
    let (_, b_mr, _, a_mr) = regions(&mut pair, 1 << 16, ALL);
    if lead_in > 0 {
        let sgl = [sge(&a_mr, 0, lead_in)];
        let write = wr(1, SendOp::Write(remote(&b_mr, 0)), &sgl);
        pair.a.rnic.post_send(pair.a.qp, &write).unwrap();
        let mut out = vec![0u8; 2048];
        pair.a.rnic.poll_transmit(pair.a.qp, &mut out).unwrap();
    }
    (pair, a_mr, b_mr)
}

/// A data FPDU that would cross the boundary ends exactly at it, with the
/// most payload that fits; the following FPDUs start the segments after
/// and are full; the call stops where a full one does not fit `out`.
#[test]
fn a_data_fpdu_shrinks_to_end_at_the_segment_boundary() {
    // (markers, lead-in Write payload, first, FPDUs as (ULPDU, wire))
    let cases = [
        // 700 octets: ULPDU 694 = 14 header + 680 payload, then full ones
        // (1442, siw's) in segments [700, 2148) and [2148, 3596); the next
        // full FPDU would cross `out`'s end at 4096, which is no boundary.
        (false, 0, 700, vec![(694, 700), (1442, 1448), (1442, 1448)]),
        // 24: ULPDU 18, 4 octets of payload.
        (false, 0, 24, vec![(18, 24), (1442, 1448), (1442, 1448)]),
        // With markers, those at 0 and 512 take 8 of the 700: ULPDU 686.
        // MULPDU 1430 leaves room for 3 markers: a full FPDU holding those
        // at 1024, 1536 and 2048 fills [700, 2148) exactly, one holding
        // 2560, 3072 and 3584 fills [2148, 3596).
        (true, 0, 700, vec![(686, 700), (1430, 1448), (1430, 1448)]),
        // At 504, 28 octets hold the marker at 512 and 24 of FPDU: ULPDU
        // 18. A full FPDU in [532, 1980) holds only 2 markers (1024, 1536):
        // 1444 octets, and no FPDU fits the 4 left, so the call stops.
        (true, 480, 28, vec![(18, 28), (1430, 1444)]),
        // first = 0: the room starts a segment.
        (false, 0, 0, vec![(1442, 1448), (1442, 1448)]),
    ];
    for (markers, lead_in, first, expected) in cases {
        let (mut pair, a_mr, b_mr) = sender(markers, lead_in);
        let sgl = [sge(&a_mr, 0, 10_000)];
        let write = wr(2, SendOp::Write(remote(&b_mr, 0)), &sgl);
        pair.a.rnic.post_send(pair.a.qp, &write).unwrap();
        let mut out = vec![0u8; 4096];
        let segments = Segments { first, size: 1448 };
        let n = pair
            .a
            .rnic
            .poll_transmit_segments(pair.a.qp, &mut out, segments)
            .unwrap();
        let start = if lead_in == 0 { 0 } else { 504 };
        let got = lengths(&out[..n], start, markers);
        assert_eq!(got, expected, "markers {markers} first {first}");
        let boundaries: Vec<usize> = got
            .iter()
            .scan(0, |at, (_, wire)| {
                *at += wire;
                Some(*at)
            })
            .collect();
        if first == 700 && !markers {
            assert_eq!(boundaries, [700, 2148, 3596], "each ends a segment");
        }
    }
}

/// Sends (untagged, 18-octet header) and Read Responses (the responder's
/// data FPDUs) shrink the same way.
#[test]
fn sends_and_read_responses_shrink_too() {
    let (mut pair, a_mr, b_mr) = sender(false, 0);
    let (_, inbox) = pair.b.region(4096, Access::LOCAL_WRITE).unwrap();
    pair.b
        .rnic
        .post_recv(pair.b.qp, &recv(1, &[sge(&inbox, 0, 4096)]))
        .unwrap();
    let sgl = [sge(&a_mr, 0, 3000)];
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Send, &sgl))
        .unwrap();
    // `out` ends at the third segment's end: nothing follows there.
    let mut out = vec![0u8; 2996];
    let segments = Segments {
        first: 100,
        size: 1448,
    };
    let n = pair
        .a
        .rnic
        .poll_transmit_segments(pair.a.qp, &mut out, segments)
        .unwrap();
    // 100 octets: ULPDU 94 = 18 header + 76 payload; then 1424 a segment;
    // the last 1500 octets of the Send take 1424 + 76.
    assert_eq!(
        lengths(&out[..n], 0, false),
        [(94, 100), (1442, 1448), (1442, 1448)]
    );
    pair.b.rnic.handle_stream(pair.b.qp, &out[..n]).unwrap();
    // A Read of b's memory: its response shrinks at b's boundary.
    let sink = [sge(&a_mr, 0, 2000)];
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(2, SendOp::Read(remote(&b_mr, 0)), &sink))
        .unwrap();
    // The rest of the Send (76 octets: ULPDU 94), then the Read Request.
    let mut out = vec![0u8; 4096];
    let n = pair.a.rnic.poll_transmit(pair.a.qp, &mut out).unwrap();
    assert_eq!(lengths(&out[..n], 2996, false), [(94, 100), (46, 52)]);
    pair.b.rnic.handle_stream(pair.b.qp, &out[..n]).unwrap();
    let segments = Segments {
        first: 300,
        size: 1448,
    };
    let n = pair
        .b
        .rnic
        .poll_transmit_segments(pair.b.qp, &mut out, segments)
        .unwrap();
    // 300: ULPDU 294 = 14 header + 280 payload; then 1428 and 292.
    assert_eq!(
        lengths(&out[..n], 0, false),
        [(294, 300), (1442, 1448), (306, 312)]
    );
    pair.a.rnic.handle_stream(pair.a.qp, &out[..n]).unwrap();
    let wcs = pair.a.completions();
    assert_eq!(wcs.len(), 2);
    assert_wc(&wcs[0], 1, WcOpcode::Send, 3000);
    assert_wc(&wcs[1], 2, WcOpcode::Read, 2000);
    let wcs = pair.b.completions();
    assert_wc(&wcs[0], 1, WcOpcode::Recv, 3000);
}

/// Other FPDUs never shrink: the call stops before one that does not fit
/// the rest of its segment, and writes it at the start of the next.
#[test]
fn the_call_stops_before_an_fpdu_that_does_not_fit_its_segment() {
    let (mut pair, a_mr, b_mr) = sender(false, 0);
    // A Read Request (ULPDU 46, FPDU 52), then a Write.
    let sink = [sge(&a_mr, 0, 100)];
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Read(remote(&b_mr, 0)), &sink))
        .unwrap();
    let sgl = [sge(&a_mr, 0, 5000)];
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(2, SendOp::Write(remote(&b_mr, 0)), &sgl))
        .unwrap();
    let mut out = vec![0u8; 4096];
    let mut transmit = |pair: &mut RnicPair, first| {
        let segments = Segments { first, size: 1448 };
        let n = pair
            .a
            .rnic
            .poll_transmit_segments(pair.a.qp, &mut out, segments)
            .unwrap();
        lengths(&out[..n], 0, false)
    };
    assert_eq!(transmit(&mut pair, 51), [], "51 octets: no room");
    // The caller lets TCP send the short segment; a whole one has room.
    assert_eq!(
        transmit(&mut pair, 1448),
        [(46, 52), (1390, 1396), (1442, 1448)],
        "the Write's first FPDU follows the Request, shrunk to the first \
         segment's end (1448 - 52 = 1396); the next starts the next segment"
    );
    // Before, poll_transmit put a full FPDU right after the Request, so it
    // crossed the boundary at 1448; here the first Write FPDU is 1396.
    let (mut pair, a_mr, b_mr) = sender(false, 0);
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Read(remote(&b_mr, 0)), &sink))
        .unwrap();
    pair.a
        .rnic
        .post_send(
            pair.a.qp,
            &wr(2, SendOp::Write(remote(&b_mr, 0)), &[sge(&a_mr, 0, 5000)]),
        )
        .unwrap();
    let mut out = vec![0u8; 4096];
    let n = pair.a.rnic.poll_transmit(pair.a.qp, &mut out).unwrap();
    assert_eq!(
        lengths(&out[..n], 0, false)[..2],
        [(46, 52), (1442, 1448)],
        "poll_transmit is unchanged"
    );
}

/// A data FPDU with no room for one octet of payload is not written: 23
/// octets hold a tagged header (FPDU 20) but no payload.
#[test]
fn a_data_fpdu_needs_room_for_one_octet() {
    let (mut pair, a_mr, b_mr) = sender(false, 0);
    let sgl = [sge(&a_mr, 0, 5000)];
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Write(remote(&b_mr, 0)), &sgl))
        .unwrap();
    let mut out = vec![0u8; 4096];
    for (first, written) in [(20, 0), (23, 0), (24, 24 + 1448 + 1448)] {
        let segments = Segments { first, size: 1448 };
        let n = pair
            .a
            .rnic
            .poll_transmit_segments(pair.a.qp, &mut out, segments)
            .unwrap();
        assert_eq!(n, written, "first {first}");
    }
    // A zero-length Write is a whole message: it fits or waits.
    let (mut pair, a_mr, b_mr) = sender(false, 0);
    let sgl = [sge(&a_mr, 0, 0)];
    pair.a
        .rnic
        .post_send(pair.a.qp, &wr(1, SendOp::Write(remote(&b_mr, 0)), &sgl))
        .unwrap();
    for (first, written) in [(19, 0), (20, 20)] {
        let segments = Segments { first, size: 1448 };
        let n = pair
            .a
            .rnic
            .poll_transmit_segments(pair.a.qp, &mut out, segments)
            .unwrap();
        assert_eq!(n, written, "first {first}");
    }
}

#[test]
#[should_panic(expected = "segments of at least EMSS_MIN")]
fn segments_smaller_than_emss_min_are_refused() {
    let (mut pair, _, _) = sender(false, 0);
    let segments = Segments {
        first: 0,
        size: EMSS_MIN - 1,
    };
    let _ = pair
        .a
        .rnic
        .poll_transmit_segments(pair.a.qp, &mut [0u8; 64], segments);
}

/// Checks one direction's recording: the segments cover the stream end to
/// end, none is longer than `size`; every FPDU lies inside one segment and
/// starts it or follows another FPDU of it; a data FPDU that is neither
/// full (MULPDU) nor its message's last was shrunk to its segment's end,
/// within the 3 octets (7 with markers) a 4-octet FPDU may leave there,
/// and carries at least one octet. Returns the FPDUs.
fn check_alignment(recording: &Recording, config: &PairConfig) -> Result<usize, TestCaseError> {
    let size = config.emss as u64;
    let mulpdu = mulpdu(config);
    let segments = &recording.segments;
    let stream_len = recording.stream.len() as u64;
    let mut at = 0;
    for segment in segments {
        prop_assert_eq!(segment.start, at, "segments are contiguous");
        prop_assert!(segment.start < segment.end && segment.end <= segment.full_end);
        prop_assert!(segment.full_end - segment.start <= size);
        at = segment.end;
    }
    prop_assert_eq!(at, stream_len, "segments cover the stream");
    let slack = if config.markers { 7 } else { 3 };
    let fpdus = fpdus(&recording.stream, 0, config.markers);
    let mut index = 0;
    let mut previous_end = 0;
    for fpdu in &fpdus {
        while segments[index].end <= fpdu.start {
            index += 1;
        }
        let segment = segments[index];
        prop_assert!(
            fpdu.start == segment.start || fpdu.start == previous_end,
            "the FPDU at {} starts its segment or follows one",
            fpdu.start
        );
        prop_assert!(
            fpdu.end <= segment.end,
            "the FPDU [{}, {}) crosses the end of segment {:?}",
            fpdu.start,
            fpdu.end,
            segment
        );
        previous_end = fpdu.end;
        let Some((header_len, payload, last)) = data_segment(&fpdu.ulpdu) else {
            continue;
        };
        if !last && payload < mulpdu - header_len {
            prop_assert!(payload >= 1, "a shrunk FPDU carries payload");
            prop_assert!(
                fpdu.end == segment.end && segment.full_end - fpdu.end <= slack,
                "a short FPDU [{}, {}) ends its segment {:?}",
                fpdu.start,
                fpdu.end,
                segment
            );
        }
    }
    Ok(fpdus.len())
}

const MEMORY: usize = 256 << 10;
const LEN_MAX: usize = 200 << 10;

#[derive(Debug, Clone)]
enum Op {
    Write {
        from: usize,
        to: usize,
        len: usize,
    },
    Read {
        from: usize,
        to: usize,
        len: usize,
    },
    Send {
        from: usize,
        len: usize,
    },
    WriteImm {
        from: usize,
        to: usize,
        len: usize,
        imm: u64,
    },
    Imm {
        imm: u64,
    },
    FetchAdd {
        word: usize,
        add: u64,
    },
    CmpSwap {
        word: usize,
        compare: u64,
        swap: u64,
    },
}

fn span() -> impl Strategy<Value = (usize, usize, usize)> {
    // Short messages often, so that small FPDUs precede full ones.
    let len = prop_oneof![0usize..64, 0usize..4096, 0usize..=LEN_MAX];
    (len, 0..=MEMORY, 0..=MEMORY)
        .prop_map(|(len, from, to)| (from.min(MEMORY - len), to.min(MEMORY - len), len))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => span().prop_map(|(from, to, len)| Op::Write { from, to, len }),
        3 => span().prop_map(|(from, to, len)| Op::Read { from, to, len }),
        2 => span().prop_map(|(from, _, len)| Op::Send { from, len }),
        1 => (span(), any::<u64>())
            .prop_map(|((from, to, len), imm)| Op::WriteImm { from, to, len, imm }),
        1 => any::<u64>().prop_map(|imm| Op::Imm { imm }),
        1 => (0usize..4, any::<u64>()).prop_map(|(word, add)| Op::FetchAdd { word, add }),
        1 => (0usize..4, prop_oneof![Just(0u64), any::<u64>()], any::<u64>())
            .prop_map(|(word, compare, swap)| Op::CmpSwap { word, compare, swap }),
    ]
}

fn config() -> impl Strategy<Value = PairConfig> {
    (
        (any::<bool>(), any::<bool>(), 536usize..=9000),
        prop_oneof![Just(0usize), 1usize..=65536],
        prop_oneof![Just(0usize), 1usize..3000],
        (1u16..5, any::<u64>()),
    )
        .prop_map(
            |((crc, markers, emss), window, cut_max, (ird_ord, seed))| PairConfig {
                crc,
                markers,
                emss,
                window,
                cut_max,
                ird_ord,
                seed,
                link: Link::SegmentsRecorded,
                ..PairConfig::default()
            },
        )
}

/// The memory of both sides, as registered and as the model expects it,
/// and the completions each side should report.
struct Model {
    b_mem: (Arc<Region>, Mr),
    b_inbox: (Arc<Region>, Mr),
    a_src: Mr,
    a_sink: (Arc<Region>, Mr),
    a_results: (Arc<Region>, Mr),
    source: Vec<u8>,
    b: Vec<u8>,
    inbox: Vec<u8>,
    sink: Vec<u8>,
    results: Vec<u8>,
    inbox_at: usize,
    /// a's send completions: id, opcode, length.
    completions_a: Vec<(u64, WcOpcode, usize)>,
    /// b's receive completions: id, opcode, length, immediate data.
    completions_b: Vec<(u64, WcOpcode, usize, Option<[u8; 8]>)>,
}

impl Model {
    fn new(pair: &mut RnicPair, ops: &[Op]) -> Model {
        let inbox_len: usize = ops
            .iter()
            .map(|op| match op {
                Op::Send { len, .. } => *len,
                _ => 0,
            })
            .sum::<usize>()
            .max(1);
        let b_mem = pair.b.region(MEMORY, ALL).unwrap();
        let b_inbox = pair.b.region(inbox_len, Access::LOCAL_WRITE).unwrap();
        let (a_src, a_src_mr) = pair.a.region(MEMORY, ALL).unwrap();
        let a_sink = pair.a.region(MEMORY, ALL).unwrap();
        let a_results = pair.a.region(8 * ops.len(), ALL).unwrap();
        let source = pattern(MEMORY, 0x5A);
        a_src.write(0, &source).unwrap();
        let b = pattern(MEMORY, 0xC3);
        b_mem.0.write(0, &b).unwrap();
        Model {
            b_mem,
            b_inbox,
            a_src: a_src_mr,
            a_sink,
            a_results,
            source,
            b,
            inbox: vec![0; inbox_len],
            sink: vec![0; MEMORY],
            results: vec![0; 8 * ops.len()],
            inbox_at: 0,
            completions_a: Vec::new(),
            completions_b: Vec::new(),
        }
    }

    /// Applies op `i` to the model, posts b's receive for it if it needs
    /// one, and returns a's work request for it.
    fn request(&mut self, pair: &mut RnicPair, i: usize, op: &Op) -> (SendOp, Vec<Sge>) {
        let id = i as u64;
        let (op, sgl, opcode, len) = match *op {
            Op::Write { from, to, len } => {
                self.b[to..to + len].copy_from_slice(&self.source[from..from + len]);
                let op = SendOp::Write(remote(&self.b_mem.1, to));
                (op, vec![sge(&self.a_src, from, len)], WcOpcode::Write, len)
            }
            Op::Read { from, to, len } => {
                self.sink[to..to + len].copy_from_slice(&self.b[from..from + len]);
                let op = SendOp::Read(remote(&self.b_mem.1, from));
                (op, vec![sge(&self.a_sink.1, to, len)], WcOpcode::Read, len)
            }
            Op::Send { from, len } => {
                let at = self.inbox_at;
                self.inbox[at..at + len].copy_from_slice(&self.source[from..from + len]);
                self.inbox_at += len;
                let slot = [sge(&self.b_inbox.1, at, len)];
                pair.b.rnic.post_recv(pair.b.qp, &recv(id, &slot)).unwrap();
                self.completions_b.push((id, WcOpcode::Recv, len, None));
                let sgl = vec![sge(&self.a_src, from, len)];
                (SendOp::Send, sgl, WcOpcode::Send, len)
            }
            Op::WriteImm { from, to, len, imm } => {
                self.b[to..to + len].copy_from_slice(&self.source[from..from + len]);
                let imm = self.immediate(pair, id, imm);
                let op = SendOp::WriteWithImmediate(remote(&self.b_mem.1, to), imm);
                let sgl = vec![sge(&self.a_src, from, len)];
                (op, sgl, WcOpcode::WriteWithImmediate, len)
            }
            Op::Imm { imm } => {
                let imm = self.immediate(pair, id, imm);
                (SendOp::Immediate(imm), vec![], WcOpcode::Immediate, 0)
            }
            Op::FetchAdd { .. } | Op::CmpSwap { .. } => {
                let (op, opcode) = self.atomic(i, op);
                (op, vec![sge(&self.a_results.1, i * 8, 8)], opcode, 8)
            }
        };
        self.completions_a.push((id, opcode, len));
        (op, sgl)
    }

    /// Posts the receive an Immediate Data consumes.
    fn immediate(&mut self, pair: &mut RnicPair, id: u64, imm: u64) -> [u8; 8] {
        pair.b.rnic.post_recv(pair.b.qp, &recv(id, &[])).unwrap();
        let imm = imm.to_be_bytes();
        self.completions_b
            .push((id, WcOpcode::RecvImmediate, 0, Some(imm)));
        imm
    }

    /// An atomic on one of b's first four words; the original value lands
    /// in a's result slot `i`.
    fn atomic(&mut self, i: usize, op: &Op) -> (SendOp, WcOpcode) {
        let (w, new, op, opcode) = match *op {
            Op::FetchAdd { word, add } => {
                let op = SendOp::FetchAdd {
                    remote: remote(&self.b_mem.1, word * 8),
                    add,
                    mask: 0,
                };
                let original = self.word(word);
                (word, original.wrapping_add(add), op, WcOpcode::FetchAdd)
            }
            Op::CmpSwap {
                word,
                compare,
                swap,
            } => {
                let op = SendOp::CmpSwap {
                    remote: remote(&self.b_mem.1, word * 8),
                    compare,
                    compare_mask: u64::MAX,
                    swap,
                    swap_mask: u64::MAX,
                };
                let original = self.word(word);
                let new = if original == compare { swap } else { original };
                (word, new, op, WcOpcode::CmpSwap)
            }
            _ => unreachable!("an atomic"),
        };
        let original = self.word(w);
        self.results[i * 8..i * 8 + 8].copy_from_slice(&original.to_ne_bytes());
        self.b[w * 8..w * 8 + 8].copy_from_slice(&new.to_ne_bytes());
        (op, opcode)
    }

    fn word(&self, word: usize) -> u64 {
        u64::from_ne_bytes(self.b[word * 8..word * 8 + 8].try_into().unwrap())
    }

    /// Every completion succeeded in posting order, and every octet is
    /// where the model says.
    fn check(&self, pair: &mut RnicPair) -> Result<(), TestCaseError> {
        let got_a: Vec<_> = (pair.a.completions().iter())
            .map(|wc| (wc.wr_id, wc.status, wc.opcode, wc.byte_len as usize))
            .collect();
        let want_a: Vec<_> = (self.completions_a.iter())
            .map(|&(id, opcode, len)| (id, WcStatus::Success, opcode, len))
            .collect();
        prop_assert_eq!(got_a, want_a);
        let got_b: Vec<_> = (pair.b.completions().iter())
            .map(|wc| (wc.wr_id, wc.status, wc.opcode, wc.byte_len as usize, wc.imm))
            .collect();
        let want_b: Vec<_> = (self.completions_b.iter())
            .map(|&(id, opcode, len, imm)| (id, WcStatus::Success, opcode, len, imm))
            .collect();
        prop_assert_eq!(got_b, want_b);
        prop_assert!(self.b_mem.0.to_vec() == self.b, "b's memory differs");
        prop_assert!(self.b_inbox.0.to_vec() == self.inbox, "Sends differ");
        prop_assert!(self.a_sink.0.to_vec() == self.sink, "Read sinks differ");
        prop_assert!(self.a_results.0.to_vec() == self.results, "atomics differ");
        prop_assert!(events(pair, true, None).is_empty() && events(pair, false, None).is_empty());
        Ok(())
    }
}

/// Runs `ops` from a to b over a segment-modelling link and checks the
/// FPDUs of both directions against the segments, memory and completions
/// against a sequential model, and that the work took a bounded number of
/// steps.
fn run(config: PairConfig, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut pair = RnicPair::new(config).unwrap();
    let mut model = Model::new(&mut pair, ops);
    // Reads and atomics posted since the pair last ran dry: a Write behind
    // one needs a fence (RFC 5040 §5.5), as in engine_model.rs.
    let mut fetching = false;
    // Progress: a message takes at most two steps per full FPDU (a call
    // may write only a shrunk FPDU at a segment's end before the next full
    // one), a few for its request, response and completion, and each run
    // of the pair a few to find the link idle.
    let payload_min = mulpdu(&config) - ddp::UNTAGGED_HEADER_LEN;
    let (mut steps, mut steps_max) = (0, 0);
    for (i, op) in ops.iter().enumerate() {
        let (op, sgl) = model.request(&mut pair, i, op);
        let writes = matches!(op, SendOp::Write(_) | SendOp::WriteWithImmediate(..));
        let fence = writes && fetching;
        fetching |= matches!(
            op,
            SendOp::Read(_) | SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. }
        );
        let len = sgl.iter().map(|sge| sge.len as usize).sum::<usize>();
        steps_max += 2 * len.div_ceil(payload_min) + 6;
        let wr = SendWr {
            fence,
            ..wr(i as u64, op, &sgl)
        };
        pair.a.rnic.post_send(pair.a.qp, &wr).unwrap();
        // Let requests pile up sometimes (ORD, the IRRQ, small FPDUs
        // before full ones in one segment).
        if i % 3 == 2 {
            steps += pair.run(STEPS);
            steps_max += 4;
            fetching = false;
        }
    }
    steps += pair.run(STEPS);
    steps_max += 4;
    prop_assert!(
        steps <= steps_max,
        "{} steps for work worth at most {} ({:?} calls)",
        steps,
        steps_max,
        pair.calls
    );
    model.check(&mut pair)?;
    let [from_a, from_b] = pair.take_recordings().remove(0);
    prop_assert_eq!(from_a.stream.len() as u64, pair.moved[0]);
    prop_assert_eq!(from_b.stream.len() as u64, pair.moved[1]);
    let fpdus = check_alignment(&from_a, &config)? + check_alignment(&from_b, &config)?;
    prop_assert!(fpdus > 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_stay_inside_tcp_segments(
        config in config(),
        ops in prop::collection::vec(op(), 1..12),
    ) {
        run(config, &ops)?;
    }
}
