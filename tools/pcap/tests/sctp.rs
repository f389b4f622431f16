//! DDP over SCTP (RFC 5043, RFC 6581 §7): synthetic captures of SCTP over UDP
//! port 9899 (RFC 6951) and directly over IP, decoded chunk by chunk; malformed
//! chunks; TCP beside SCTP; and a cross-check of chunk types, TSNs and PPIDs
//! against tshark when it is installed.
//!
//! The chunks are written here by hand from RFC 9260 §3.3 (layouts) and RFC
//! 5061 §4.2.6 (the Adaptation Layer Indication), independently of the
//! decoder, as the tests' oracle.

mod common;

use std::io::Cursor;
use std::path::Path;
use std::process::Command;

use dpwarp_capture::packet::{build_sctp_chunk, SctpOver};
use dpwarp_capture::pcap::{linktype, Writer};
use dpwarp_pcap::decode::{Body, Options, SctpBody};
use dpwarp_pcap::{decode_capture, render, run, Config};
use rnic_engine::wire::{
    mpa_rr, rdmap, DdpBuffer, DdpPacket, DdpRepr, RdmapHeader, RdmapOpcode, RdmapRepr,
};
use serde_json::Value;

use common::{
    decode, init, SctpCapture, ABORT, COOKIE_ACK, COOKIE_ECHO, DATA, INIT, INIT_ACK, PASSIVE, SACK,
};

const TAG_ACTIVE: u32 = 0x1111_2222;
const TAG_PASSIVE: u32 = 0x3333_4444;

/// DATA flags (RFC 9260 §3.3.1): U, B, E.
const UNORDERED_WHOLE: u8 = 0x07;

/// DATA (RFC 9260 §3.3.1).
fn data(flags: u8, tsn: u32, sid: u16, stream_seq: u16, ppid: u32, user: &[u8]) -> Vec<u8> {
    let mut value = tsn.to_be_bytes().to_vec();
    value.extend_from_slice(&sid.to_be_bytes());
    value.extend_from_slice(&stream_seq.to_be_bytes());
    value.extend_from_slice(&ppid.to_be_bytes());
    value.extend_from_slice(user);
    build_sctp_chunk(DATA, flags, &value)
}

/// SACK (RFC 9260 §3.3.4) with no gap blocks or duplicates.
fn sack(cum_tsn_ack: u32) -> Vec<u8> {
    let mut value = cum_tsn_ack.to_be_bytes().to_vec();
    value.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    build_sctp_chunk(SACK, 0, &value)
}

/// A PPID 16 message: DDP-SSN, then a DDP segment.
fn segment_message(ssn: u16, repr: &RdmapRepr<'_>) -> Vec<u8> {
    let mut out = ssn.to_be_bytes().to_vec();
    let mut segment = vec![0u8; repr.buffer_len()];
    repr.emit(&mut DdpPacket::new_unchecked(&mut segment[..]));
    out.extend_from_slice(&segment);
    out
}

fn send_message(ssn: u16, msn: u32, payload: &[u8]) -> Vec<u8> {
    segment_message(
        ssn,
        &RdmapRepr {
            ddp: DdpRepr {
                last: true,
                reserved: 0,
                version: 1,
                rsvd_ulp: rdmap::Control::new(RdmapOpcode::Send).to_octet(),
                buffer: DdpBuffer::Untagged {
                    rsvd_ulp: 0,
                    qn: 0,
                    msn,
                    mo: 0,
                },
            },
            header: RdmapHeader::None,
            payload,
        },
    )
}

fn write_message(ssn: u16, stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    segment_message(
        ssn,
        &RdmapRepr {
            ddp: DdpRepr {
                last: true,
                reserved: 0,
                version: 1,
                rsvd_ulp: rdmap::Control::new(RdmapOpcode::RdmaWrite).to_octet(),
                buffer: DdpBuffer::Tagged { stag, to },
            },
            header: RdmapHeader::None,
            payload,
        },
    )
}

/// A PPID 17 message: DDP-SSN, Function Code, and for the enhanced codes the
/// RFC 6581 word before `ulp_data`.
fn session_message(
    ssn: u16,
    function: u16,
    enhanced: Option<mpa_rr::EnhancedRepr>,
    ulp_data: &[u8],
) -> Vec<u8> {
    let mut out = ssn.to_be_bytes().to_vec();
    out.extend_from_slice(&function.to_be_bytes());
    if let Some(e) = enhanced {
        let mut word = [0u8; mpa_rr::ENHANCED_LEN];
        e.emit(&mut mpa_rr::EnhancedPacket::new_unchecked(&mut word[..]));
        out.extend_from_slice(&word);
    }
    out.extend_from_slice(ulp_data);
    out
}

const ENHANCED: mpa_rr::EnhancedRepr = mpa_rr::EnhancedRepr {
    peer_to_peer: true,
    rtr_send: false,
    rtr_write: true,
    rtr_read: true,
    ird: 16,
    ord: 0x3FFF,
};

/// An association set up, DDP messages both ways in bundles, then ABORT.
fn association(over: SctpOver, ethernet: bool) -> Vec<u8> {
    let mut capture = SctpCapture::new(over, ethernet);
    capture.packet(0, 0, &[init(INIT, TAG_ACTIVE, 100, Some(1))]);
    capture.packet(1, TAG_ACTIVE, &[init(INIT_ACK, TAG_PASSIVE, 900, Some(1))]);
    capture.packet(
        0,
        TAG_PASSIVE,
        &[build_sctp_chunk(COOKIE_ECHO, 0, &[0xc0; 24])],
    );
    capture.packet(1, TAG_ACTIVE, &[build_sctp_chunk(COOKIE_ACK, 0, &[])]);
    let initiate = session_message(0, 5, Some(ENHANCED), b"hi");
    capture.packet(
        0,
        TAG_PASSIVE,
        &[data(UNORDERED_WHOLE, 100, 0, 0, 17, &initiate)],
    );
    let accept = session_message(
        0,
        6,
        Some(mpa_rr::EnhancedRepr {
            ird: 8,
            ord: 16,
            ..ENHANCED
        }),
        b"",
    );
    capture.packet(
        1,
        TAG_ACTIVE,
        &[sack(100), data(UNORDERED_WHOLE, 900, 0, 0, 17, &accept)],
    );
    // The bundle: a SACK, two DDP segments and a session control message.
    capture.packet(
        0,
        TAG_PASSIVE,
        &[
            sack(900),
            data(
                UNORDERED_WHOLE,
                101,
                1,
                0,
                16,
                &write_message(0, 0xabcd_0001, 4096, &[7; 33]),
            ),
            data(UNORDERED_WHOLE, 102, 1, 0, 16, &send_message(1, 1, b"ping")),
            data(
                UNORDERED_WHOLE,
                103,
                2,
                0,
                17,
                &session_message(0, 5, Some(ENHANCED), b""),
            ),
        ],
    );
    // ABORT with one error cause: User-Initiated Abort (12), no information.
    capture.packet(1, TAG_ACTIVE, &[build_sctp_chunk(ABORT, 0, &[0, 12, 0, 4])]);
    capture.bytes()
}

fn json_lines(bytes: &[u8]) -> Vec<Value> {
    let config = Config {
        json: true,
        ..Config::default()
    };
    let mut out = Vec::new();
    run(Cursor::new(bytes), &mut out, &config).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn has(object: &Value, keys: &[&str]) -> bool {
    keys.iter().all(|k| object.get(*k).is_some())
}

#[test]
fn an_association_decodes_every_chunk_over_udp_and_ip() {
    for (over, ethernet) in [
        (SctpOver::Udp, true),
        (SctpOver::Ip, true),
        (SctpOver::Udp, false),
        (SctpOver::Ip, false),
    ] {
        let lines = json_lines(&association(over, ethernet));
        let kinds: Vec<String> = lines
            .iter()
            .map(|o| match o["kind"].as_str().unwrap() {
                "sctp" => o["event"].as_str().unwrap().to_string(),
                kind => kind.to_string(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "init",
                "init_ack",
                "cookie_echo",
                "cookie_ack",
                "ddp_session",
                "sack",
                "ddp_session",
                "sack",
                "fpdu",
                "fpdu",
                "ddp_session",
                "abort"
            ],
            "{over:?} ethernet={ethernet}"
        );
        let common = [
            "frame",
            "first_frame",
            "time",
            "src",
            "dst",
            "llp",
            "assoc",
            "vtag",
            "udp",
            "chunk",
            "chunk_type",
            "chunk_flags",
            "kind",
        ];
        for o in &lines {
            assert!(has(o, &common), "{o}");
            assert_eq!(o["llp"], "sctp");
            assert_eq!(o["udp"], over == SctpOver::Udp);
            assert_eq!(o["assoc"], 0, "one association");
            assert!(o.get("tcp_seq").is_none(), "{o}");
        }
        assert_eq!(lines[0]["adaptation"], 1);
        assert_eq!(lines[0]["init_tsn"], 100);
        assert_eq!(lines[0]["init_tag"], TAG_ACTIVE);
        assert_eq!(lines[0]["vtag"], 0);
        assert_eq!(
            (lines[0]["os"].as_u64(), lines[0]["mis"].as_u64()),
            (Some(4), Some(4))
        );
        assert_eq!(lines[1]["adaptation"], 1);
        assert_eq!(lines[1]["init_tsn"], 900);
        assert_eq!(lines[1]["src"], PASSIVE);
        assert_eq!(lines[2]["cookie_len"], 24);
        assert_eq!(lines[5]["cum_tsn_ack"], 100);

        let initiate = &lines[4];
        assert_eq!(initiate["function"], 5);
        assert_eq!(initiate["function_name"], "Enhanced Initiate");
        assert_eq!(
            (initiate["sid"].as_u64(), initiate["tsn"].as_u64()),
            (Some(0), Some(100))
        );
        assert_eq!(initiate["ssn"], 0);
        assert_eq!(
            initiate["pd_len"], 6,
            "the enhanced word and the ULP's 2 octets"
        );
        assert_eq!(
            initiate["private_data"],
            format!("{}6869", word_hex(ENHANCED))
        );
        assert_eq!(
            (initiate["ird"].as_u64(), initiate["ord"].as_u64()),
            (Some(16), Some(0x3FFF))
        );
        assert_eq!(initiate["p2p"], true);
        assert_eq!(
            (
                &initiate["rtr_send"],
                &initiate["rtr_write"],
                &initiate["rtr_read"]
            ),
            (&Value::Bool(false), &Value::Bool(true), &Value::Bool(true))
        );
        let accept = &lines[6];
        assert_eq!(
            (accept["function_name"].as_str(), accept["ird"].as_u64()),
            (Some("Enhanced Accept"), Some(8))
        );
        assert_eq!(accept["chunk"], 1, "second chunk of its packet");

        let bundle: Vec<&Value> = lines.iter().filter(|o| o["frame"] == 7).collect();
        assert_eq!(bundle.len(), 4);
        let chunks: Vec<u64> = bundle
            .iter()
            .map(|o| o["chunk"].as_u64().unwrap())
            .collect();
        assert_eq!(chunks, [0, 1, 2, 3]);
        let (write, send) = (bundle[1], bundle[2]);
        for fpdu in [write, send] {
            assert!(
                has(
                    fpdu,
                    &[
                        "tagged",
                        "last",
                        "dv",
                        "rv",
                        "opcode",
                        "op",
                        "qn",
                        "msn",
                        "mo",
                        "stag",
                        "to",
                        "payload_len",
                        "ulpdu_len",
                        "crc",
                        "crc_field",
                        "markers",
                        "rtr",
                        "malformed",
                        "sid",
                        "tsn",
                        "ssn",
                        "stream_seq",
                        "ppid"
                    ]
                ),
                "{fpdu}"
            );
            assert_eq!(fpdu["crc"], "off");
            assert_eq!(fpdu["ppid"], 16);
            assert_eq!(fpdu["malformed"], false);
        }
        assert_eq!(
            (
                write["tsn"].as_u64(),
                write["sid"].as_u64(),
                write["ssn"].as_u64()
            ),
            (Some(101), Some(1), Some(0))
        );
        assert_eq!(write["tagged"], true);
        assert_eq!(
            (write["stag"].as_u64(), write["to"].as_u64()),
            (Some(0xabcd_0001), Some(4096))
        );
        assert_eq!(write["payload_len"], 33);
        assert_eq!(write["op"], "WRITE");
        assert_eq!(write["ulpdu_len"], 14 + 33);
        assert_eq!(
            (
                send["ssn"].as_u64(),
                send["msn"].as_u64(),
                send["payload_len"].as_u64()
            ),
            (Some(1), Some(1), Some(4))
        );
        assert_eq!(send["op"], "SEND");
        assert_eq!(
            (bundle[3]["kind"].as_str(), bundle[3]["sid"].as_u64()),
            (Some("ddp_session"), Some(2))
        );
        let abort = lines.last().unwrap();
        assert_eq!(
            (abort["t"].as_bool(), abort["causes"].clone()),
            (Some(false), serde_json::json!([12]))
        );
    }
}

/// The enhanced word as the decoder's hex shows it.
fn word_hex(e: mpa_rr::EnhancedRepr) -> String {
    let mut word = [0u8; mpa_rr::ENHANCED_LEN];
    e.emit(&mut mpa_rr::EnhancedPacket::new_unchecked(&mut word[..]));
    word.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn an_init_without_adaptation_says_null() {
    let mut capture = SctpCapture::new(SctpOver::Ip, false);
    capture.packet(0, 0, &[init(INIT, TAG_ACTIVE, 1, None)]);
    capture.packet(
        1,
        TAG_ACTIVE,
        &[init(INIT_ACK, TAG_PASSIVE, 2, Some(0x1234))],
    );
    let lines = json_lines(&capture.bytes());
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["event"], "init");
    assert_eq!(lines[0]["adaptation"], Value::Null);
    assert!(lines[0].get("adaptation").is_some());
    assert_eq!(lines[1]["adaptation"], 0x1234);
    let text = render::text(
        &decode(&association(SctpOver::Udp, true))[0],
        0,
        render::Style::default(),
    );
    assert!(
        text.contains("sctp/udp assoc=0 SCTP INIT init_tag=0x11112222 init_tsn=100"),
        "{text}"
    );
    assert!(text.ends_with("adaptation=1 (DDP)"), "{text}");
}

fn problems(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|o| o["kind"] == "problem")
        .map(|o| o["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn malformed_chunks_are_problems_and_the_walk_stops() {
    let mut capture = SctpCapture::new(SctpOver::Udp, true);
    // A Length below the header, after a good chunk: the good one still prints.
    capture.raw(0, 1, &[&sack(5)[..], &[DATA, 3, 0, 2]].concat());
    // A Length past the end of the packet.
    capture.raw(0, 1, &[DATA, 3, 0, 40, 0, 0, 0, 1]);
    // Three octets: no room for a header.
    capture.raw(
        0,
        1,
        &[&build_sctp_chunk(COOKIE_ACK, 0, &[])[..], &[1, 2, 3]].concat(),
    );
    // Fixed parts too short: DATA, INIT, SACK.
    capture.raw(0, 1, &build_sctp_chunk(DATA, 3, &[0; 8]));
    capture.raw(0, 0, &build_sctp_chunk(INIT, 0, &[0; 12]));
    capture.raw(0, 1, &build_sctp_chunk(SACK, 0, &[0; 4]));
    // An INIT parameter whose Length runs past the chunk.
    let mut bad_param = init(INIT, TAG_ACTIVE, 1, None);
    bad_param.extend_from_slice(&[0xc0, 0x06, 0, 8, 0, 0]);
    let len = bad_param.len() as u16;
    bad_param[2..4].copy_from_slice(&len.to_be_bytes());
    capture.raw(0, 0, &bad_param);
    // A fragment of a DDP message; PPID 17 and 16 messages too short; another PPID.
    capture.packet(
        0,
        1,
        &[
            data(0x06, 7, 0, 0, 16, &send_message(0, 1, b"x")),
            data(UNORDERED_WHOLE, 8, 0, 0, 17, &[0, 0, 0]),
            data(UNORDERED_WHOLE, 9, 0, 0, 16, &[0]),
            data(UNORDERED_WHOLE, 10, 0, 0, 51, b"webrtc"),
            data(
                UNORDERED_WHOLE,
                11,
                0,
                0,
                17,
                &session_message(1, 4, None, b"pd"),
            ),
            data(
                UNORDERED_WHOLE,
                12,
                0,
                0,
                17,
                &session_message(1, 5, None, b""),
            ),
            data(
                UNORDERED_WHOLE,
                13,
                0,
                0,
                17,
                &session_message(1, 9, None, b""),
            ),
            data(UNORDERED_WHOLE, 14, 0, 0, 16, &[0, 1, 0xff]),
        ],
    );
    let bytes = capture.bytes();
    let lines = json_lines(&bytes);
    let found = problems(&lines);
    let expect = [
        "chunk Length 2 is less than its 4-octet header",
        "chunk Length 40 runs past the end of the packet (8 octets left)",
        "3 octets after the last chunk",
        "DATA chunk of 12 octets: its fixed part needs 16",
        "INIT chunk of 16 octets: its fixed part needs 20",
        "SACK chunk of 8 octets: its fixed part needs 16",
        "INIT parameter 0xc006 has Length 8 (6 octets left",
        "TSN 7: a fragment of a DDP message (B=1 E=0)",
        "TSN 8: session control message of 3 octets has no room for its Function Code",
        "TSN 9: PPID 16 message of 1 octets has no room for its DDP-SSN",
        "TSN 11: Terminate with 2 octets of private data",
        "TSN 12: Enhanced Initiate with 0 octets of private data: too short",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (text, want) in found.iter().zip(expect) {
        assert!(text.contains(want), "{text:?} should say {want:?}");
    }
    assert_eq!(lines[0]["event"], "sack", "the chunk before the bad one");
    let other = lines.iter().find(|o| o["ppid"] == 51).unwrap();
    assert_eq!(
        (other["event"].as_str(), other["len"].as_u64()),
        (Some("data"), Some(6))
    );
    let fragment = lines
        .iter()
        .find(|o| o["tsn"] == 7 && o["kind"] == "sctp")
        .unwrap();
    assert_eq!(
        (fragment["b"].as_bool(), fragment["e"].as_bool()),
        (Some(true), Some(false))
    );
    let unknown = lines.iter().find(|o| o["tsn"] == 13).unwrap();
    assert_eq!(unknown["function_name"], "unknown");
    let junk = lines.iter().find(|o| o["tsn"] == 14).unwrap();
    assert_eq!(
        (junk["kind"].as_str(), junk["malformed"].as_bool()),
        (Some("fpdu"), Some(true))
    );
    let (_, summary, _) = decode_capture(Cursor::new(&bytes), Options::default());
    assert_eq!(summary.problems, expect.len() as u64);
    assert_eq!(summary.sctp_packets, 8);
    assert!(render::summary(&summary).contains("; SCTP: "));
    // Text lines for each, no panic.
    let mut out = Vec::new();
    run(Cursor::new(&bytes), &mut out, &Config::default()).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("SCTP DATA sid=0 tsn=7 stream_seq=0 U ppid=16 len=21 (fragment B=1 E=0)"),
        "{text}"
    );
}

#[test]
fn too_many_chunks_in_one_packet_are_cut_off() {
    let mut capture = SctpCapture::new(SctpOver::Ip, true);
    let many: Vec<Vec<u8>> = (0..300)
        .map(|_| build_sctp_chunk(COOKIE_ACK, 0, &[]))
        .collect();
    capture.packet(0, 1, &many);
    let lines = json_lines(&capture.bytes());
    assert_eq!(lines.len(), 257);
    assert!(
        problems(&lines)[0].contains("more than 256 chunks in one packet: the rest (176 octets)")
    );
}

#[test]
fn tcp_decodes_as_before_beside_sctp() {
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden/rping_v2_crc.pcap");
    let full = std::fs::read(golden).unwrap();
    let sctp = association(SctpOver::Udp, true);
    let mut sctp_reader = dpwarp_capture::pcap::Reader::new(Cursor::new(&sctp)).unwrap();
    let mut reader = dpwarp_capture::pcap::Reader::new(Cursor::new(&full)).unwrap();
    let mut writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        writer.write_record(record.ts_ns, record.data).unwrap();
        if let Some(extra) = sctp_reader.next_record() {
            writer
                .write_record(record.ts_ns, extra.unwrap().data)
                .unwrap();
        }
    }
    let mixed = writer.into_inner().unwrap();
    let (alone, alone_summary, _) = decode_capture(Cursor::new(&full), Options::default());
    let (both, both_summary, _) = decode_capture(Cursor::new(&mixed), Options::default());
    let tcp: Vec<_> = both
        .iter()
        .filter(|m| !matches!(m.body, Body::Sctp(_)))
        .collect();
    assert_eq!(tcp.len(), alone.len());
    for (a, b) in alone.iter().zip(tcp) {
        assert_eq!(a.body, b.body);
        assert_eq!((a.conn, a.offset, a.tcp_seq), (b.conn, b.offset, b.tcp_seq));
    }
    assert_eq!(both.len() - alone.len(), 12);
    assert_eq!(both_summary.fpdus, alone_summary.fpdus);
    assert_eq!(
        (both_summary.ddp_segments, both_summary.session_messages),
        (2, 3)
    );
    assert_eq!(both_summary.sctp_associations, 1);
    assert_eq!(alone_summary.sctp_packets, 0);
    let sctp_chunks = both
        .iter()
        .filter(|m| matches!(&m.body, Body::Sctp(c) if !matches!(c.what, SctpBody::Problem(_))))
        .count();
    assert_eq!(sctp_chunks as u64, both_summary.sctp_chunks);
}

#[test]
fn a_new_init_after_an_abort_is_a_new_association() {
    let mut bytes = association(SctpOver::Ip, true);
    let again = association(SctpOver::Ip, true);
    bytes.extend_from_slice(&again[24..]);
    let lines = json_lines(&bytes);
    let assocs: Vec<u64> = lines.iter().map(|o| o["assoc"].as_u64().unwrap()).collect();
    assert_eq!(assocs, [[0; 12], [1; 12]].concat());
}

#[test]
fn mutated_sctp_captures_never_panic() {
    let full = association(SctpOver::Udp, true);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..500 {
        let mut bytes = full.clone();
        for _ in 0..(next() % 8 + 1) {
            // Past the file and record headers, mostly into SCTP.
            let at = 24 + (next() % (bytes.len() as u64 - 24)) as usize;
            bytes[at] = next() as u8;
        }
        for json in [false, true] {
            let config = Config {
                json,
                ..Config::default()
            };
            let _ = run(Cursor::new(&bytes), &mut std::io::sink(), &config);
        }
    }
}

/// Runs tshark over a capture this test writes and compares the chunk types,
/// TSNs and PPIDs it finds, frame by frame, with dpwarp-pcap's. Skipped (with
/// a message) when tshark is not installed.
#[test]
fn tshark_sees_the_same_chunks() {
    // scripts/test.sh requires it (DPWARP_REQUIRE_TSHARK): there a missing
    // tshark fails the test rather than skipping the comparison.
    let required = std::env::var_os("DPWARP_REQUIRE_TSHARK").is_some();
    let Ok(version) = Command::new("tshark").arg("--version").output() else {
        assert!(
            !required,
            "tshark is not installed (DPWARP_REQUIRE_TSHARK is set)"
        );
        println!("skipped: tshark is not installed");
        return;
    };
    if !version.status.success() {
        assert!(
            !required,
            "tshark --version failed (DPWARP_REQUIRE_TSHARK is set)"
        );
        println!("skipped: tshark --version failed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("dpwarp-pcap-sctp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, over) in [("udp", SctpOver::Udp), ("ip", SctpOver::Ip)] {
        let bytes = association(over, true);
        let path = dir.join(format!("{name}.pcap"));
        std::fs::write(&path, &bytes).unwrap();
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&path)
            // tshark decodes UDP port 9899 as SCTP by default; saying so keeps the
            // test independent of the version's preference.
            .args(["-d", "udp.port==9899,sctp", "-T", "fields"])
            // sctp.data_tsn is relative to the first TSN in tshark 4.0; the
            // absolute TSN, which dpwarp-pcap prints, is sctp.data_tsn_raw.
            .args(["-e", "frame.number", "-e", "sctp.chunk_type"])
            .args([
                "-e",
                "sctp.data_tsn_raw",
                "-e",
                "sctp.data_payload_proto_id",
            ])
            // And the builder's CRC32c is right: status 1 is "Good".
            .args(["-o", "sctp.checksum:CRC-32C", "-e", "sctp.checksum.status"])
            .args(["-E", "occurrence=a"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs = String::from_utf8(out.stdout).unwrap();
        let mut ours = String::new();
        for frame in 1..=8u64 {
            let lines: Vec<Value> = json_lines(&bytes)
                .into_iter()
                .filter(|o| o["frame"] == frame)
                .collect();
            let field = |key: &str| {
                let values: Vec<String> = lines
                    .iter()
                    .filter(|o| o["chunk_type"] == 0 || key == "chunk_type")
                    .map(|o| o[key].to_string())
                    .collect();
                values.join(",")
            };
            ours.push_str(&format!(
                "{frame}\t{}\t{}\t{}\t1\n",
                field("chunk_type"),
                field("tsn"),
                field("ppid")
            ));
        }
        assert_eq!(theirs, ours, "tshark (left) and dpwarp-pcap over {name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The captures the fuzz target `pcap_decode` starts from decode without a
/// problem. With `DPWARP_SCTP_CORPUS=DIR` set, this writes them to DIR under
/// the corpus's file names: `fuzz/make-corpus.sh` makes them so.
#[test]
fn fuzz_corpus_captures_decode_cleanly() {
    let captures = [
        ("udp", association(SctpOver::Udp, true)),
        ("ip", association(SctpOver::Ip, true)),
        ("raw-ip", association(SctpOver::Ip, false)),
    ];
    for (name, bytes) in captures {
        let (messages, summary, _) = decode_capture(Cursor::new(&bytes), Options::default());
        assert_eq!((messages.len(), summary.problems), (12, 0), "{name}");
        if let Ok(dir) = std::env::var("DPWARP_SCTP_CORPUS") {
            let path = Path::new(&dir).join(format!("seed-synthetic-sctp-{name}"));
            std::fs::write(path, &bytes).unwrap();
        }
    }
}
