//! Golden vectors from real traffic: every Linux siw capture in
//! `tests/data/golden/` is reassembled and decoded, and what it holds is
//! compared with what its `.txt` says: the commands (`-n`, `-s`, `-C`, `-S`,
//! `-o`), the siw module parameters of both sides, and the programs' output. On
//! the way, every wire fact of RFC 5040/5041/5044 that the captures show is
//! checked (CRC byte order, DDP/RDMAP versions, one FPDU per TCP segment with
//! MULPDU 1442, MSN/MO/TO progression, siw's Terminate encoding).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use dpwarp_capture::reassembly::{ConnId, Dir};
use dpwarp_pcap::decode::{Body, CrcVerdict, Fpdu, Message, MpaFrame, Options, Summary, TcpEvent};
use rnic_engine::wire::{ddp, mpa_rr, rdmap, term, DdpBuffer, RdmapHeader, RdmapOpcode};

const CAPTURES: [&str; 14] = [
    "ib_read_bw",
    "ib_send_lat",
    "ib_send_lat_nocrc",
    "ib_write_bw",
    "ib_write_lat",
    "ib_write_lat_mpa_v1",
    "iwprobe_ops",
    "mpa_reject_crc",
    "rping_v1_crc",
    "rping_v2",
    "rping_v2_crc",
    "rping_v2_p2p_write_rtr",
    "term_bad_read",
    "term_bad_write",
];

/// With TCP timestamps siw's MSS is 1448, so its largest ULPDU is 1442.
const SIW_MULPDU: usize = 1442;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden")
}

/// One capture, decoded, with its description.
struct Capture {
    name: &'static str,
    messages: Vec<Message>,
    summary: Summary,
    txt: String,
}

impl Capture {
    fn load(name: &'static str) -> Capture {
        let dir = golden_dir();
        let file = File::open(dir.join(format!("{name}.pcap"))).expect("golden capture");
        let (messages, summary, failure) =
            dpwarp_pcap::decode_capture(BufReader::new(file), Options::default());
        assert!(failure.is_none(), "{name}: {failure:?}");
        let txt = std::fs::read_to_string(dir.join(format!("{name}.txt"))).expect("golden .txt");
        Capture {
            name,
            messages,
            summary,
            txt,
        }
    }

    fn conns(&self) -> Vec<ConnId> {
        let mut ids: Vec<ConnId> = self.messages.iter().map(|m| m.conn).collect();
        ids.dedup();
        ids.sort();
        ids.dedup();
        ids
    }

    fn frames(&self, conn: ConnId) -> Vec<(&Message, &MpaFrame)> {
        self.messages
            .iter()
            .filter(|m| m.conn == conn)
            .filter_map(|m| match &m.body {
                Body::Mpa(f) => Some((m, f)),
                _ => None,
            })
            .collect()
    }

    fn fpdus(&self, conn: ConnId) -> Vec<(&Message, &Fpdu)> {
        self.messages
            .iter()
            .filter(|m| m.conn == conn)
            .filter_map(|m| match &m.body {
                Body::Fpdu(f) => Some((m, f)),
                _ => None,
            })
            .collect()
    }

    /// The client's or server's line of siw module parameters.
    fn siw_param(&self, side: &str, key: &str) -> String {
        let mut lines = self.txt.lines();
        lines
            .find(|l| l.starts_with(side))
            .unwrap_or_else(|| panic!("{}: no {side} line", self.name));
        let params = lines.next().expect("siw params line");
        let field = params
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{}: no {key} for {side}", self.name));
        field.to_string()
    }

    fn siw_flag(&self, side: &str, key: &str) -> bool {
        self.siw_param(side, key) == "Y"
    }

    /// A numeric option of the client's command line, e.g. `-n 5`.
    fn client_option(&self, flag: &str) -> u32 {
        let line = self
            .txt
            .lines()
            .find(|l| l.starts_with("client"))
            .expect("client line");
        let mut words = line.split_whitespace();
        words
            .find(|w| *w == flag)
            .unwrap_or_else(|| panic!("{}: no {flag}", self.name));
        words
            .next()
            .and_then(|w| w.parse().ok())
            .expect("numeric option")
    }
}

/// The RDMAP message of an FPDU. Every FPDU of every capture must parse.
fn message(fpdu: &Fpdu) -> rdmap::Repr<'_> {
    let packet = ddp::Packet::new_checked(&fpdu.ulpdu[..]).expect("DDP header fits");
    rdmap::Repr::parse(&packet).expect("RDMAP message parses")
}

fn is_client(m: &Message) -> bool {
    m.dir == Dir::ClientToServer
}

/// A compact description of an FPDU for sequence comparisons:
/// (client sent it, opcode, ULP payload octets).
fn shape(m: &Message, fpdu: &Fpdu) -> (bool, RdmapOpcode, usize) {
    let repr = message(fpdu);
    (is_client(m), repr.opcode(), repr.payload.len())
}

#[test]
fn every_capture_decodes_without_problems() {
    for name in CAPTURES {
        let capture = Capture::load(name);
        let s = capture.summary;
        assert_eq!(s.problems, 0, "{name}: {:#?}", capture.messages);
        assert_eq!(s.crc_bad, 0, "{name}");
        assert_eq!(s.other_connections, 0, "{name}");
        assert!(s.iwarp_connections >= 1, "{name}");
        assert_eq!(
            s.mpa_frames,
            2 * s.iwarp_connections,
            "{name}: a Request and a Reply each"
        );
        for (_, fpdu) in capture.conns().iter().flat_map(|c| capture.fpdus(*c)) {
            let _ = message(fpdu);
        }
    }
}

/// The startup frames agree with both sides' siw parameters: the client's
/// `mpa_version` picks the revision and S, C follows `mpa_crc_required`
/// (a responder honours the peer's C unless `mpa_crc_strict`), and a strict
/// responder that does not want CRC rejects a peer that does.
#[test]
fn startup_frames_match_the_siw_parameters() {
    for name in CAPTURES {
        let capture = Capture::load(name);
        let v2 = capture.siw_param("client", "mpa_version") == "2";
        let client_crc = capture.siw_flag("client", "mpa_crc_required");
        let server_crc = capture.siw_flag("server", "mpa_crc_required");
        let strict = capture.siw_flag("server", "mpa_crc_strict");
        let reject = client_crc && strict && !server_crc;
        let p2p = capture.siw_flag("client", "peer_to_peer");
        for conn in capture.conns() {
            let frames = capture.frames(conn);
            assert_eq!(frames.len(), 2, "{name}");
            let (req_msg, req) = frames[0];
            let (rep_msg, rep) = frames[1];
            assert!(
                is_client(req_msg) && !is_client(rep_msg),
                "{name}: client requests"
            );
            assert_eq!(
                (req.kind, rep.kind),
                (mpa_rr::FrameKind::Request, mpa_rr::FrameKind::Reply)
            );
            assert_eq!(req.revision, if v2 { 2 } else { 1 }, "{name}");
            assert_eq!(
                rep.revision, req.revision,
                "{name}: siw answers in the request's revision"
            );
            assert_eq!(req.enhanced.is_some(), v2, "{name}");
            assert_eq!(rep.enhanced.is_some(), v2, "{name}");
            assert_eq!(usize::from(req.pd_len), if v2 { 4 } else { 0 }, "{name}");
            assert!(
                !req.markers && !rep.markers,
                "{name}: siw never asks for markers"
            );
            assert_eq!(req.crc, client_crc, "{name}");
            assert_eq!(rep.reject, reject, "{name}");
            assert_eq!(rep.crc, !reject && (server_crc || client_crc), "{name}");
            assert_eq!(req.reserved | rep.reserved, 0, "{name}: try_gso is off");
            if let (Some(q), Some(p)) = (req.enhanced, rep.enhanced) {
                assert_eq!(q.peer_to_peer, p2p, "{name}");
                assert_eq!(p.peer_to_peer, p2p && !reject, "{name}");
            }
            // The frame ends the segment it came in: siw writes it alone.
            assert_eq!(req_msg.first_frame, req_msg.frame, "{name}");
        }
    }
}

/// RFC 5044 §4, RFC 5041 and RFC 5040 as siw sends them: DV = RV = 1; one FPDU
/// per TCP segment, no larger than MULPDU 1442; CRC verdicts as negotiated
/// (good where C was set, an all-zero field where not); and per message, L only
/// on the last segment, MSN from 1 counting per queue, MO and TO advancing by
/// payload.
#[test]
fn siw_wire_facts_hold_in_every_capture() {
    for name in CAPTURES {
        let capture = Capture::load(name);
        let mut split = 0;
        for conn in capture.conns() {
            let frames = capture.frames(conn);
            let crc_on = frames.iter().any(|(_, f)| f.crc) && !frames.iter().any(|(_, f)| f.reject);
            let fpdus = capture.fpdus(conn);
            split += check_segment_alignment(name, &fpdus);
            check_crc(name, crc_on, &fpdus);
            check_messages(name, &fpdus);
        }
        assert_eq!(
            split,
            SPLIT_FPDUS.iter().filter(|s| s.0 == name).count(),
            "{name}"
        );
    }
}

/// FPDUs whose CRC siw sent in a segment of its own (first frame, last
/// frame): three 1448-octet Read Response FPDUs of the 8 KiB Read in
/// `iwprobe_ops`, sent as 1444 + 4 octets by siw's sendpage path. Every
/// other FPDU of every capture fills exactly one segment.
const SPLIT_FPDUS: [(&str, u64, u64); 3] = [
    ("iwprobe_ops", 50, 51),
    ("iwprobe_ops", 52, 54),
    ("iwprobe_ops", 55, 56),
];

/// Returns how many FPDUs spanned segments.
fn check_segment_alignment(name: &str, fpdus: &[(&Message, &Fpdu)]) -> usize {
    let mut split = 0;
    let mut frames = std::collections::HashSet::new();
    for (m, fpdu) in fpdus {
        assert!(
            m.segment_start,
            "{name} frame {}: FPDU does not start a segment",
            m.frame
        );
        if m.first_frame != m.frame {
            assert!(
                SPLIT_FPDUS.contains(&(name, m.first_frame, m.frame)),
                "{name} frames {}-{}: FPDU spans segments",
                m.first_frame,
                m.frame
            );
            assert_eq!(message(fpdu).opcode(), RdmapOpcode::RdmaReadResponse);
            split += 1;
        }
        assert!(
            frames.insert(m.first_frame),
            "{name} frame {}: two FPDUs start in one segment",
            m.frame
        );
        assert!(
            usize::from(fpdu.ulpdu_len) <= SIW_MULPDU,
            "{name} frame {}",
            m.frame
        );
        assert!(fpdu.markers.is_empty(), "{name}: siw sends no markers");
    }
    split
}

fn check_crc(name: &str, crc_on: bool, fpdus: &[(&Message, &Fpdu)]) {
    for (m, fpdu) in fpdus {
        if crc_on {
            assert_eq!(fpdu.crc, CrcVerdict::Good, "{name} frame {}", m.frame);
            // The standard CRC32c value travels least significant octet first.
            assert_eq!(
                fpdu.crc_field,
                fpdu.crc_computed.to_le_bytes(),
                "{name} frame {}",
                m.frame
            );
        } else {
            assert_eq!(fpdu.crc, CrcVerdict::Off, "{name} frame {}", m.frame);
            assert_eq!(
                fpdu.crc_field, [0; 4],
                "{name} frame {}: siw zeroes an unused CRC",
                m.frame
            );
        }
    }
}

/// Per direction: the next MSN of each queue, and the open message's MO or TO.
#[derive(Default)]
struct Progress {
    msn: HashMap<u32, u32>,
    open_untagged: Option<(u32, u32, u32)>,
    open_tagged: Option<(u32, u64)>,
}

fn check_messages(name: &str, fpdus: &[(&Message, &Fpdu)]) {
    let mut progress: [Progress; 2] = Default::default();
    for (m, fpdu) in fpdus {
        let repr = message(fpdu);
        let at = format!("{name} frame {}", m.frame);
        assert_eq!(repr.ddp.version, ddp::VERSION, "{at}");
        assert_eq!(repr.control().version, rdmap::VERSION, "{at}");
        assert_eq!(repr.ddp.reserved, 0, "{at}");
        assert_eq!(repr.control().reserved, 0, "{at}");
        let info = repr.opcode().info().expect("siw sends known opcodes only");
        assert!(
            u8::from(repr.opcode()) <= 7,
            "{at}: siw does not implement RFC 7306"
        );
        if !repr.ddp.last {
            assert_eq!(
                usize::from(fpdu.ulpdu_len),
                SIW_MULPDU,
                "{at}: a full segment"
            );
        }
        let p = &mut progress[usize::from(!is_client(m))];
        match repr.ddp.buffer {
            DdpBuffer::Untagged { qn, msn, mo, .. } => {
                assert_eq!(Some(qn), info.qn, "{at}");
                let next = p.msn.entry(qn).or_insert(1);
                let expected_mo = match p.open_untagged {
                    Some((open_qn, open_msn, open_mo)) if open_qn == qn => {
                        assert_eq!(msn, open_msn, "{at}: same message until L");
                        open_mo
                    }
                    _ => {
                        assert_eq!(msn, *next, "{at}: MSN counts messages per queue from 1");
                        0
                    }
                };
                assert_eq!(mo, expected_mo, "{at}: MO advances by payload");
                let payload = (repr.header.len() + repr.payload.len()) as u32;
                p.open_untagged = (!repr.ddp.last).then_some((qn, msn, mo + payload));
                if repr.ddp.last {
                    *next += 1;
                }
            }
            DdpBuffer::Tagged { stag, to } => {
                if let Some((open_stag, open_to)) = p.open_tagged {
                    assert_eq!(
                        (stag, to),
                        (open_stag, open_to),
                        "{at}: TO advances by payload"
                    );
                }
                let next_to = to + repr.payload.len() as u64;
                p.open_tagged = (!repr.ddp.last).then_some((stag, next_to));
            }
        }
    }
}

/// rping: per iteration the client advertises its buffer (Send), the server
/// reads the ping data (Read Request, Read Response), says go (Send), the
/// client advertises again (Send), the server writes the data back and says
/// done (Write, Send). `-C` iterations of `-S` octets; the data is what the
/// .txt prints after "ping data:".
#[test]
fn rping_captures_hold_the_ping_data() {
    for name in ["rping_v2", "rping_v2_crc", "rping_v2_p2p_write_rtr"] {
        let capture = Capture::load(name);
        let count = capture.client_option("-C") as usize;
        let size = capture.client_option("-S") as usize;
        let pings: Vec<&str> = capture
            .txt
            .lines()
            .filter_map(|l| l.strip_prefix("ping data: "))
            .collect();
        assert_eq!(pings.len(), count, "{name}");
        let conn = capture.conns()[0];
        let mut fpdus = capture.fpdus(conn);
        let frames = capture.frames(conn);
        if name.contains("p2p") {
            let (first, rtr) = fpdus.remove(0);
            assert!(
                is_client(first) && rtr.rtr,
                "{name}: the initiator's first FPDU is the RTR"
            );
            let repr = message(rtr);
            assert_eq!(repr.opcode(), RdmapOpcode::RdmaWrite);
            assert_eq!(
                repr.ddp.buffer,
                DdpBuffer::Tagged { stag: 1, to: 0 },
                "siw's Write RTR"
            );
            assert!(repr.payload.is_empty());
            let rep = frames[1].1.enhanced.unwrap();
            assert!(
                rep.rtr_write && !rep.rtr_read && !rep.rtr_send,
                "{name}: Write RTR chosen"
            );
            let req = frames[0].1.enhanced.unwrap();
            assert!(
                req.rtr_write && !req.rtr_read,
                "{name}: p2p_rtr=1 offers Write only"
            );
        } else {
            let e = frames[0].1.enhanced.unwrap();
            assert_eq!((e.ird, e.ord), (1, 1), "{name}: README says IRD=ORD=1");
        }
        let iteration = [
            (true, RdmapOpcode::Send, 16),
            (false, RdmapOpcode::RdmaReadRequest, 0),
            (true, RdmapOpcode::RdmaReadResponse, size),
            (false, RdmapOpcode::Send, 16),
            (true, RdmapOpcode::Send, 16),
            (false, RdmapOpcode::RdmaWrite, size),
            (false, RdmapOpcode::Send, 16),
        ];
        let shapes: Vec<_> = fpdus.iter().map(|(m, f)| shape(m, f)).collect();
        assert_eq!(shapes, iteration.repeat(count), "{name}");
        for (i, ping) in pings.iter().enumerate() {
            for offset in [2, 5] {
                let data = message(fpdus[i * 7 + offset].1).payload;
                assert_eq!(&data[..ping.len()], ping.as_bytes(), "{name} iteration {i}");
                assert_eq!(data[ping.len()], 0, "{name}: rping's data is a C string");
            }
            let Some(RdmapHeader::ReadRequest(rr)) = Some(message(fpdus[i * 7 + 1].1).header)
            else {
                panic!("{name}: not a Read Request")
            };
            assert_eq!(rr.read_size as usize, size, "{name}");
        }
        let closes = capture
            .messages
            .iter()
            .filter(|m| m.body == Body::Tcp(TcpEvent::Fin))
            .count();
        assert_eq!(
            closes, 2,
            "{name}: graceful close is a FIN each way, not a Terminate"
        );
    }
}

/// rping over MPA v1: no IRD/ORD exchange, so the responder has ORD 0, its
/// Read is refused locally ("post send error") and it disconnects after the
/// client's first Send.
#[test]
fn rping_v1_stops_after_the_first_send() {
    let capture = Capture::load("rping_v1_crc");
    assert!(capture.txt.contains("post send error"));
    let conn = capture.conns()[0];
    let fpdus = capture.fpdus(conn);
    let shapes: Vec<_> = fpdus.iter().map(|(m, f)| shape(m, f)).collect();
    assert_eq!(shapes, [(true, RdmapOpcode::Send, 16)]);
    let fin = capture
        .messages
        .iter()
        .find(|m| m.body == Body::Tcp(TcpEvent::Fin))
        .unwrap();
    assert!(!is_client(fin), "the server disconnects first");
}

/// A strict responder that does not want CRC rejects: R=1 with no C, then
/// TCP closes; nothing after the frames is MPA.
#[test]
fn mpa_reject_has_no_fpdus() {
    let capture = Capture::load("mpa_reject_crc");
    assert!(capture.txt.contains("RDMA_CM_EVENT_REJECTED"));
    let conn = capture.conns()[0];
    let frames = capture.frames(conn);
    let rep = frames[1].1;
    assert!(rep.reject && !rep.crc);
    let e = rep.enhanced.unwrap();
    assert_eq!((e.ird, e.ord, e.peer_to_peer), (0, 0, false));
    assert!(capture.fpdus(conn).is_empty());
    assert!(!capture
        .messages
        .iter()
        .any(|m| matches!(m.body, Body::NonMpa { .. })));
}

/// perftest opens two rdma_cm connections: the first carries its
/// out-of-band exchange (Sends), the second the test itself: `-n`
/// operations of `-s` octets of the test's kind.
#[test]
fn perftest_second_connection_runs_the_test() {
    use RdmapOpcode::{RdmaReadRequest, RdmaReadResponse, RdmaWrite, Send};
    let cases: [(&str, &[(bool, RdmapOpcode)]); 6] = [
        ("ib_write_bw", &[(true, RdmaWrite)]),
        (
            "ib_read_bw",
            &[(true, RdmaReadRequest), (false, RdmaReadResponse)],
        ),
        ("ib_send_lat", &[(true, Send), (false, Send)]),
        ("ib_send_lat_nocrc", &[(true, Send), (false, Send)]),
        ("ib_write_lat", &[(true, RdmaWrite), (false, RdmaWrite)]),
        (
            "ib_write_lat_mpa_v1",
            &[(true, RdmaWrite), (false, RdmaWrite)],
        ),
    ];
    for (name, kinds) in cases {
        let capture = Capture::load(name);
        let n = capture.client_option("-n") as usize;
        let size = capture.client_option("-s") as usize;
        let conns = capture.conns();
        assert_eq!(conns.len(), 2, "{name}: perftest -R opens two connections");
        let oob = capture.fpdus(conns[0]);
        assert!(
            oob.iter().all(|(_, f)| message(f).opcode() == Send),
            "{name}: exchange by Sends"
        );
        let test = capture.fpdus(conns[1]);
        for (client, opcode) in kinds {
            let found: Vec<usize> = test
                .iter()
                .map(|(m, f)| shape(m, f))
                .filter(|(c, o, _)| c == client && o == opcode)
                .map(|(_, _, len)| len)
                .collect();
            let expected = if *opcode == RdmaReadRequest { 0 } else { size };
            assert_eq!(
                found,
                vec![expected; n],
                "{name}: {opcode:?} from client={client}"
            );
        }
        assert_eq!(
            test.len(),
            n * kinds.len(),
            "{name}: nothing else on the test connection"
        );
        if name == "ib_read_bw" {
            let e = capture.frames(conns[1])[0].1.enhanced.unwrap();
            assert_eq!(
                (e.ird, e.ord),
                (128, 128),
                "reads need IRD/ORD; siw's maximum is 128"
            );
        }
        if name == "ib_write_bw" {
            let e = capture.frames(conns[1])[0].1.enhanced.unwrap();
            assert_eq!((e.ird, e.ord), (0, 0), "README: IRD=ORD=0 for Writes");
        }
    }
}

/// iwprobe: the client's `-o` list, each op's completion in the client
/// output (or "ibv_post_send failed", and then nothing on the wire), and a
/// final 4-octet Send "BYE". Multi-segment messages split at MULPDU with
/// 1428 octets of tagged and 1424 of untagged payload per segment.
#[test]
fn iwprobe_ops_match_the_completions() {
    let capture = Capture::load("iwprobe_ops");
    let mut expected = Vec::new();
    let mut lines = capture
        .txt
        .lines()
        .skip_while(|l| !l.starts_with("----- client output"));
    let mut op = None;
    for line in lines
        .by_ref()
        .take_while(|l| !l.starts_with("[client exit"))
    {
        if let Some(name) = line.strip_prefix("client: op ") {
            op = Some(name.to_string());
        } else if line.contains("ibv_post_send failed") {
            op = None;
        } else if let Some(rest) = line.strip_prefix("client: wc status=success(0) opcode=") {
            let mut words = rest.split_whitespace();
            let opcode = words.next().unwrap();
            let len: usize = words
                .next()
                .unwrap()
                .trim_start_matches("len=")
                .parse()
                .unwrap();
            let se = op.as_deref() == Some("sendse");
            expected.push(match opcode {
                "RDMA_WRITE" => (RdmapOpcode::RdmaWrite, len),
                "RDMA_READ" => (RdmapOpcode::RdmaReadRequest, len),
                "SEND" if se => (RdmapOpcode::SendWithSe, len),
                "SEND" => (RdmapOpcode::Send, len),
                other => panic!("unexpected completion {other}"),
            });
            op = None;
        }
    }
    assert_eq!(
        expected.len(),
        10,
        "9 ops that reached the wire and the final BYE"
    );
    let conn = capture.conns()[0];
    let fpdus = capture.fpdus(conn);
    // Client messages, segments joined: (opcode, total payload or read size).
    let mut messages: Vec<(RdmapOpcode, usize)> = Vec::new();
    let mut open = false;
    for (m, f) in fpdus.iter().filter(|(m, _)| is_client(m)) {
        let repr = message(f);
        let len = match repr.header {
            RdmapHeader::ReadRequest(rr) => rr.read_size as usize,
            _ => repr.payload.len(),
        };
        if open {
            messages.last_mut().unwrap().1 += len;
        } else {
            messages.push((repr.opcode(), len));
        }
        open = !repr.ddp.last;
        if !repr.ddp.last {
            let per_segment = if repr.ddp.tagged() { 1428 } else { 1424 };
            assert_eq!(repr.payload.len(), per_segment, "frame {}", m.frame);
        }
    }
    assert_eq!(messages, expected);
    let bye = message(fpdus.last().unwrap().1);
    assert_eq!(bye.payload, b"BYE\0");
    // The server's side: its buffer advertisement (a 16-octet Send) first,
    // then only Read Responses, 64 octets and then 8 KiB.
    let server: Vec<_> = fpdus
        .iter()
        .filter(|(m, _)| !is_client(m))
        .map(|(_, f)| message(f))
        .collect();
    assert_eq!(
        (server[0].opcode(), server[0].payload.len()),
        (RdmapOpcode::Send, 16)
    );
    assert!(capture
        .txt
        .contains("server: wc status=success(0) opcode=SEND len=16"));
    let read: usize = server[1..].iter().map(|r| r.payload.len()).sum();
    assert!(server[1..]
        .iter()
        .all(|r| r.opcode() == RdmapOpcode::RdmaReadResponse));
    assert_eq!(read, 64 + 8192);
}

/// The two Terminate captures: siw's encoding, its codes, and the echoed
/// headers of the FPDU that failed.
#[test]
fn siw_terminates_decode_as_described() {
    // "RDMA Write to an invalid STag: responder sends TERMINATE (DDP tagged
    // buffer error, invalid STag)"
    let capture = Capture::load("term_bad_write");
    let conn = capture.conns()[0];
    let fpdus = capture.fpdus(conn);
    let (bad_write_msg, bad_write) = fpdus[fpdus.len() - 2];
    let (term_msg, term_fpdu) = fpdus[fpdus.len() - 1];
    assert!(is_client(bad_write_msg) && !is_client(term_msg));
    let t = terminate(term_fpdu);
    assert_eq!(t.encoding, term::Encoding::SiwBitfield);
    assert_eq!((t.layer, t.etype, t.ecode), (term::Layer::Ddp, 1, 0));
    let c = t.control();
    assert!(c.m && c.d && !c.r);
    assert_eq!(
        t.ddp_header,
        Some(&bad_write.ulpdu[..ddp::TAGGED_HEADER_LEN])
    );
    assert_eq!(
        usize::from(t.ddp_segment_length),
        message(bad_write).payload.len(),
        "siw quirk"
    );
    // The first Write went to the advertised rkey, the bad one did not.
    let rkey =
        u32::from_str_radix(capture.txt.split("rkey=0x").nth(1).unwrap()[..8].trim(), 16).unwrap();
    assert_eq!(
        message(fpdus[fpdus.len() - 3].1).ddp.buffer,
        DdpBuffer::Tagged {
            stag: rkey,
            to: stag_to(&capture)
        }
    );
    assert_ne!(
        message(bad_write).ddp.buffer,
        DdpBuffer::Tagged {
            stag: rkey,
            to: stag_to(&capture)
        }
    );

    // "RDMA Read Request for an invalid source STag: responder sends
    // TERMINATE (RDMAP remote protection error)"
    let capture = Capture::load("term_bad_read");
    let conn = capture.conns()[0];
    let fpdus = capture.fpdus(conn);
    let (_, bad_read) = fpdus[fpdus.len() - 2];
    let (_, term_fpdu) = fpdus[fpdus.len() - 1];
    let t = terminate(term_fpdu);
    assert_eq!(t.encoding, term::Encoding::SiwBitfield);
    assert_eq!((t.layer, t.etype, t.ecode), (term::Layer::Rdmap, 1, 0));
    assert_eq!(
        t.control().describe(),
        Some("RDMAP / Remote Protection Error / Invalid STag")
    );
    let c = t.control();
    assert!(c.m && c.d && c.r);
    let echoed = ddp::Packet::new_checked(t.ddp_header.unwrap()).unwrap();
    let failed = ddp::Packet::new_checked(&bad_read.ulpdu[..]).unwrap();
    assert_eq!(echoed.qn(), 1);
    assert_eq!(failed.msn(), 2, "the second Read Request");
    assert_eq!(
        echoed.msn(),
        64,
        "siw quirk: the echoed MSN holds the read size"
    );
    assert_eq!(
        t.rdma_header,
        Some(failed.payload()),
        "the Read Request header, verbatim"
    );
    assert!(capture.txt.contains("Work Request Flushed Error"));
}

fn stag_to(capture: &Capture) -> u64 {
    let addr = capture.txt.split("buffer addr=0x").nth(1).unwrap();
    let hex: String = addr.chars().take_while(char::is_ascii_hexdigit).collect();
    u64::from_str_radix(&hex, 16).unwrap()
}

fn terminate(fpdu: &Fpdu) -> term::Repr<'_> {
    let repr = message(fpdu);
    assert_eq!(repr.opcode(), RdmapOpcode::Terminate);
    assert_eq!(
        repr.ddp.buffer,
        DdpBuffer::Untagged {
            rsvd_ulp: 0,
            qn: 2,
            msn: 1,
            mo: 0
        }
    );
    match repr.header {
        RdmapHeader::Terminate(t) => t,
        other => panic!("not a Terminate header: {other:?}"),
    }
}
