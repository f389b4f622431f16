//! The decoder on traffic no capture here holds: markers (siw never sends
//! them), RFC 7306 atomics and immediate data (siw refuses them), private
//! data, lost segments, captures that start mid-connection, and hostile or
//! truncated files, through the library and through the binary.

mod common;

use std::io::Cursor;
use std::net::SocketAddrV4;
use std::process::Command;

use dpwarp_capture::packet::{build_tcp_frame, TcpFlags};
use dpwarp_capture::pcap::{linktype, Writer};
use dpwarp_pcap::decode::{Body, CrcVerdict, Fpdu, Message, Options};
use dpwarp_pcap::{decode_capture, render, run, Config, RunError};
use proptest::prelude::*;

use common::{decode, frame_stream, golden, mpa_frame, segment, send, untagged, Capture, CLIENT};
use rnic_engine::wire::{
    atomic, ddp, mpa_marker, mpa_rr, rdmap, term, RdmapHeader, RdmapOpcode, RdmapRepr,
};

fn fpdus(messages: &[Message]) -> Vec<(&Message, &Fpdu)> {
    messages
        .iter()
        .filter_map(|m| match &m.body {
            Body::Fpdu(f) => Some((m, f)),
            _ => None,
        })
        .collect()
}

/// A connection with markers both ways (both frames set M) and CRC, whose
/// FPDUs straddle markers anywhere, cut into arbitrary segments.
fn marked_capture(ulpdus: &[Vec<u8>], cuts: &[usize]) -> (Vec<u8>, Vec<u8>) {
    let mut capture = Capture::new();
    let req = mpa_frame(mpa_rr::FrameKind::Request, true, true, None, b"");
    let rep = mpa_frame(mpa_rr::FrameKind::Reply, true, true, None, b"");
    capture.send(0, &req, &[]);
    capture.send(1, &rep, &[]);
    let client = frame_stream(0, ulpdus, true, true);
    let server = frame_stream(0, &ulpdus[..1], true, true);
    capture.send(0, &client, cuts);
    capture.send(1, &server, &[]);
    (capture.close(), client)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn markers_are_stripped_checked_and_covered_by_the_crc(
        sizes in proptest::collection::vec(0usize..1500, 1..12),
        cuts in proptest::collection::vec(1usize..900, 0..40),
    ) {
        let ulpdus: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| send(i as u32 + 1, &vec![i as u8; *n]))
            .collect();
        let (bytes, stream) = marked_capture(&ulpdus, &cuts);
        let messages = decode(&bytes);
        let client: Vec<_> = fpdus(&messages).into_iter().filter(|(m, _)| m.src.port() == 40000).collect();
        prop_assert_eq!(client.len(), ulpdus.len());
        let mut markers = 0;
        for ((_, fpdu), ulpdu) in client.iter().zip(&ulpdus) {
            prop_assert_eq!(&fpdu.ulpdu, ulpdu);
            prop_assert_eq!(fpdu.crc, CrcVerdict::Good);
            prop_assert!(fpdu.markers.iter().all(|m| m.ok()));
            markers += fpdu.markers.len();
        }
        prop_assert_eq!(markers, stream.len().div_ceil(512), "one marker per 512 octets");
        let trouble = messages.iter().any(|m| matches!(m.body, Body::Problem(_) | Body::Gap { .. }));
        prop_assert!(!trouble, "no problems or gaps expected");
    }
}

#[test]
fn a_wrong_marker_and_a_bad_crc_are_reported() {
    let ulpdus = vec![send(1, &[7; 600]), send(2, &[8; 40])];
    let mut capture = Capture::new();
    capture.send(
        0,
        &mpa_frame(mpa_rr::FrameKind::Request, false, true, None, b""),
        &[],
    );
    capture.send(
        1,
        &mpa_frame(mpa_rr::FrameKind::Reply, true, true, None, b""),
        &[],
    );
    let mut stream = frame_stream(0, &ulpdus, true, true);
    // The marker at 512 is inside the first FPDU: FPDUPTR 512. Break it.
    assert_eq!(&stream[512..516], &[0, 0, 2, 0]);
    stream[515] = 1;
    let last = stream.len() - 1;
    stream[last] ^= 0xff;
    capture.send(0, &stream, &[]);
    let messages = decode(&capture.close());
    let found = fpdus(&messages);
    assert_eq!(found.len(), 2);
    let bad: Vec<_> = found[0].1.markers.iter().filter(|m| !m.ok()).collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(
        (bad[0].position, bad[0].fpduptr, bad[0].expected),
        (512, 513, 512)
    );
    assert_eq!(found[0].1.crc, CrcVerdict::Bad, "the CRC covers the marker");
    assert_eq!(found[1].1.crc, CrcVerdict::Bad);
    let text = render::text(found[0].0, 0, render::Style::default());
    assert!(
        text.contains("BAD-MARKER@512:fpduptr=513,expected=512"),
        "{text}"
    );
    assert!(text.contains("(bad) expected="), "{text}");
}

#[test]
fn rfc7306_messages_and_enhanced_data_decode() {
    let enhanced = mpa_rr::EnhancedRepr {
        peer_to_peer: true,
        rtr_send: true,
        rtr_write: false,
        rtr_read: true,
        ird: 16,
        ord: 0x3FFF,
    };
    let reply = mpa_rr::EnhancedRepr {
        rtr_send: false,
        ird: 8,
        ord: 16,
        ..enhanced
    };
    let mut capture = Capture::new();
    capture.send(
        0,
        &mpa_frame(
            mpa_rr::FrameKind::Request,
            false,
            true,
            Some(enhanced),
            b"hello",
        ),
        &[],
    );
    capture.send(
        1,
        &mpa_frame(mpa_rr::FrameKind::Reply, false, false, Some(reply), b""),
        &[],
    );
    let read_rtr = segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::RdmaReadRequest, 1, 1, 0, true),
        header: RdmapHeader::ReadRequest(rdmap::ReadRequestRepr {
            sink_stag: 1,
            sink_to: 0,
            read_size: 0,
            source_stag: 1,
            source_to: 0,
        }),
        payload: &[],
    });
    let imm = segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::ImmediateDataWithSe, 0, 1, 0, true),
        header: RdmapHeader::Immediate(*b"\x01\x02\x03\x04\x05\x06\x07\x08"),
        payload: &[],
    });
    let fetch_add = atomic::RequestRepr::fetch_add(7, 0xabcd_0100, 64, 1, 0);
    let atomic_req = segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::AtomicRequest, 1, 2, 0, true),
        header: RdmapHeader::AtomicRequest(fetch_add),
        payload: &[],
    });
    let atomic_resp = segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::AtomicResponse, 3, 1, 0, true),
        header: RdmapHeader::AtomicResponse(atomic::ResponseRepr {
            original_request_id: 7,
            original_remote_value: 41,
        }),
        payload: &[],
    });
    capture.send(
        0,
        &frame_stream(0, &[read_rtr, imm, atomic_req], false, true),
        &[],
    );
    capture.send(1, &frame_stream(0, &[atomic_resp], false, true), &[]);
    let bytes = capture.close();
    let messages = decode(&bytes);
    let found = fpdus(&messages);
    assert!(
        found[0].1.rtr,
        "zero-length Read Request as the p2p initiator's first FPDU"
    );
    assert!(
        found.iter().all(|(_, f)| f.crc == CrcVerdict::Good),
        "C in either frame means CRC"
    );

    let config = Config {
        json: true,
        ..Config::default()
    };
    let mut out = Vec::new();
    run(Cursor::new(&bytes), &mut out, &config).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let req = lines.iter().find(|o| o["kind"] == "mpa_req").unwrap();
    assert_eq!(
        (req["ird"].as_u64(), req["ord"].as_u64()),
        (Some(16), Some(0x3FFF))
    );
    assert_eq!(req["p2p"], true);
    assert_eq!(
        (
            req["rtr_send"].as_bool(),
            req["rtr_write"].as_bool(),
            req["rtr_read"].as_bool()
        ),
        (Some(true), Some(false), Some(true))
    );
    assert_eq!(req["pd_len"], 9);
    assert_eq!(req["private_data"], "68656c6c6f");
    let imm = lines.iter().find(|o| o["opcode"] == 9).unwrap();
    assert_eq!(imm["imm"], "0102030405060708");
    assert_eq!(imm["op"], "IMM_SE");
    let atomic = lines.iter().find(|o| o["opcode"] == 10).unwrap();
    assert_eq!(atomic["atomic"]["aop"], 0);
    assert_eq!(atomic["atomic"]["stag"], 0xabcd_0100u32);
    assert_eq!(atomic["qn"], 1);
    let resp = lines.iter().find(|o| o["opcode"] == 11).unwrap();
    assert_eq!(
        (resp["qn"].as_u64(), resp["atomic"]["orig"].as_u64()),
        (Some(3), Some(41))
    );
}

/// Every JSON object carries the keys the README promises for its kind.
#[test]
fn json_objects_have_the_documented_keys() {
    let common = [
        "frame", "src", "dst", "kind", "conn", "seq", "tcp_seq", "time",
    ];
    let mpa = ["rev", "m", "c", "r", "s", "pd_len"];
    let enhanced = ["ird", "ord", "p2p", "rtr_send", "rtr_write", "rtr_read"];
    let fpdu = [
        "tagged",
        "last",
        "opcode",
        "qn",
        "msn",
        "mo",
        "stag",
        "to",
        "payload_len",
        "crc",
    ];
    let term_keys = ["layer", "etype", "ecode"];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data/golden");
    let mut terminates = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pcap") {
            continue;
        }
        let mut out = Vec::new();
        let config = Config {
            json: true,
            ..Config::default()
        };
        run(std::fs::File::open(&path).unwrap(), &mut out, &config).unwrap();
        for line in String::from_utf8(out).unwrap().lines() {
            let o: serde_json::Value = serde_json::from_str(line).unwrap();
            let has = |keys: &[&str]| keys.iter().all(|k| o.get(*k).is_some());
            assert!(has(&common), "{line}");
            match o["kind"].as_str().unwrap() {
                "mpa_req" | "mpa_rep" => {
                    assert!(has(&mpa), "{line}");
                    assert_eq!(has(&enhanced), o["s"] == true, "{line}");
                }
                "fpdu" => {
                    assert!(has(&fpdu), "{line}");
                    assert!(["good", "bad", "off"].contains(&o["crc"].as_str().unwrap()));
                    if o["opcode"] == 7 {
                        assert!(has(&term_keys), "{line}");
                        terminates += 1;
                    }
                }
                "tcp" => assert!(o.get("event").is_some()),
                other => panic!("unexpected kind {other} in a golden capture: {line}"),
            }
        }
    }
    assert_eq!(terminates, 2);
}

#[test]
fn a_lost_segment_is_a_gap_and_decoding_resumes() {
    let ulpdus: Vec<Vec<u8>> = (1..=6).map(|i| send(i, &[i as u8; 300])).collect();
    let stream = frame_stream(0, &ulpdus, false, true);
    let fpdu_len = stream.len() / 6;
    let mut capture = Capture::new();
    capture.send(
        0,
        &mpa_frame(mpa_rr::FrameKind::Request, false, true, None, b""),
        &[],
    );
    capture.send(
        1,
        &mpa_frame(mpa_rr::FrameKind::Reply, false, true, None, b""),
        &[],
    );
    // FPDU 1 whole; FPDU 2 in two segments of which the second is lost;
    // then FPDUs 3-6 one per segment.
    capture.send(0, &stream[..fpdu_len], &[]);
    capture.send(0, &stream[fpdu_len..fpdu_len + 100], &[]);
    capture.lose(0, fpdu_len - 100);
    for k in 2..6 {
        capture.send(0, &stream[k * fpdu_len..(k + 1) * fpdu_len], &[]);
    }
    let messages = decode(&capture.close());
    let gaps: Vec<_> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Gap { .. }))
        .collect();
    assert_eq!(gaps.len(), 1);
    assert_eq!(
        gaps[0].body,
        Body::Gap {
            len: (fpdu_len - 100) as u64
        }
    );
    let decoded: Vec<_> = fpdus(&messages)
        .iter()
        .map(|(_, f)| f.ulpdu.clone())
        .collect();
    assert_eq!(decoded, [&ulpdus[..1], &ulpdus[2..]].concat());
    let problems: Vec<_> = messages
        .iter()
        .filter_map(|m| match &m.body {
            Body::Problem(p) => Some(p),
            _ => None,
        })
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("cannot complete"));
    assert!(problems[1].starts_with("resynchronised"));
}

#[test]
fn a_named_port_decodes_a_capture_that_starts_mid_connection() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/golden/rping_v2_crc.pcap");
    let full = std::fs::read(golden).unwrap();
    // Keep the file header and drop records 1-7 (SYN ... MPA Reply, ACK).
    let mut reader = dpwarp_capture::pcap::Reader::new(Cursor::new(&full)).unwrap();
    let mut writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
    while let Some(record) = reader.next_record() {
        let record = record.unwrap();
        if record.frame > 7 {
            writer.write_record(record.ts_ns, record.data).unwrap();
        }
    }
    let cut = writer.into_inner().unwrap();
    let (messages, summary, _) = decode_capture(Cursor::new(&cut), Options::default());
    assert_eq!(
        summary.fpdus, 0,
        "without the MPA startup nothing says it is iWARP"
    );
    assert!(messages.is_empty());
    let options = Options {
        ports: vec![7174],
        ..Options::default()
    };
    let (messages, summary, _) = decode_capture(Cursor::new(&cut), options);
    assert_eq!(summary.fpdus, 21);
    assert_eq!(summary.crc_good, 21, "CRC recognised without the handshake");
    assert!(fpdus(&messages)
        .iter()
        .all(|(_, f)| f.crc == CrcVerdict::Good));
}

#[test]
fn terminates_in_both_layouts_report_the_same_code() {
    for encoding in [term::Encoding::Rfc5040, term::Encoding::SiwBitfield] {
        let header = [0xc1, 0x40, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0];
        let t = term::Repr {
            encoding,
            layer: term::Layer::Ddp,
            etype: 1,
            ecode: 0,
            reserved: 0,
            segment_length_valid: true,
            ddp_segment_length: 78,
            ddp_header: Some(&header),
            rdma_header: None,
        };
        let ulpdu = segment(&RdmapRepr {
            ddp: untagged(RdmapOpcode::Terminate, 2, 1, 0, true),
            header: RdmapHeader::Terminate(t),
            payload: &[],
        });
        let mut capture = Capture::new();
        capture.send(
            0,
            &mpa_frame(mpa_rr::FrameKind::Request, false, false, None, b""),
            &[],
        );
        capture.send(
            1,
            &mpa_frame(mpa_rr::FrameKind::Reply, false, false, None, b""),
            &[],
        );
        capture.send(1, &frame_stream(0, &[ulpdu], false, false), &[]);
        let mut out = Vec::new();
        let config = Config {
            json: true,
            ..Config::default()
        };
        run(Cursor::new(capture.close()), &mut out, &config).unwrap();
        let text = String::from_utf8(out).unwrap();
        let o: serde_json::Value =
            serde_json::from_str(text.lines().find(|l| l.contains("\"opcode\":7")).unwrap())
                .unwrap();
        assert_eq!(
            (
                o["layer"].as_u64(),
                o["etype"].as_u64(),
                o["ecode"].as_u64()
            ),
            (Some(1), Some(1), Some(0))
        );
        let name = if encoding == term::Encoding::Rfc5040 {
            "rfc5040"
        } else {
            "siw"
        };
        assert_eq!(o["term_encoding"], name);
        assert_eq!(o["ddp_seg_len"], 78);
    }
}

fn golden_bytes(name: &str) -> Vec<u8> {
    std::fs::read(golden(&format!("{name}.pcap"))).unwrap()
}

#[test]
fn truncated_files_print_what_they_hold_then_fail() {
    let full = golden_bytes("term_bad_write");
    // A file that ends between records is a shorter capture, not a broken one.
    let mut boundaries = vec![24u64];
    let mut reader = dpwarp_capture::pcap::Reader::new(Cursor::new(&full)).unwrap();
    while let Some(record) = reader.next_record() {
        record.unwrap();
        boundaries.push(reader.offset());
    }
    for cut in (0..full.len())
        .step_by(37)
        .chain([23, 24, 39, 40, full.len() - 1])
    {
        let mut out = Vec::new();
        let result = run(Cursor::new(&full[..cut]), &mut out, &Config::default());
        match result {
            Ok(_) => assert!(
                boundaries.contains(&(cut as u64)),
                "cut at {cut} is inside a record"
            ),
            Err(RunError::Capture(e)) => {
                assert!(!boundaries.contains(&(cut as u64)), "cut at {cut}: {e}");
                let text = e.to_string();
                assert!(
                    text.contains("truncated") || text.contains("not a pcap"),
                    "{text}"
                );
            }
            Err(other) => panic!("cut at {cut}: {other}"),
        }
    }
    // Cut inside the last record: everything before it is still printed.
    let mut out = Vec::new();
    let result = run(
        Cursor::new(&full[..full.len() - 10]),
        &mut out,
        &Config::default(),
    );
    let text = String::from_utf8(out).unwrap();
    assert!(matches!(result, Err(RunError::Capture(_))));
    assert!(text.contains("TERMINATE"), "{text}");
}

#[test]
fn arbitrary_bytes_never_panic() {
    let full = golden_bytes("rping_v2_crc");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for _ in 0..300 {
        let mut bytes = full.clone();
        for _ in 0..(next() % 16 + 1) {
            let at = (next() % bytes.len() as u64) as usize;
            bytes[at] = next() as u8;
        }
        for config in [
            Config::default(),
            Config {
                json: true,
                ..Config::default()
            },
        ] {
            let _ = run(Cursor::new(&bytes), &mut std::io::sink(), &config);
        }
    }
}

fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dpwarp-pcap"))
}

#[test]
fn the_binary_decodes_and_fails_clearly() {
    let dir = std::env::temp_dir().join(format!("dpwarp-pcap-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/data/golden/rping_v2_crc.pcap");

    let ok = binary().arg(&golden).output().unwrap();
    assert!(ok.status.success());
    let stdout = String::from_utf8(ok.stdout).unwrap();
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains("crc=") && l.contains("(good)"))
            .count(),
        21
    );
    assert!(stdout
        .lines()
        .last()
        .unwrap()
        .starts_with("# 1 iWARP connection(s)"));

    let truncated = dir.join("truncated.pcap");
    let full = std::fs::read(&golden).unwrap();
    std::fs::write(&truncated, &full[..full.len() - 7]).unwrap();
    let out = binary().arg(&truncated).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("dpwarp-pcap: ") && stderr.contains("truncated"),
        "{stderr}"
    );

    let garbage = dir.join("garbage.pcap");
    std::fs::write(&garbage, b"this is not a capture at all").unwrap();
    let out = binary().arg(&garbage).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("not a pcap"));

    let out = binary().arg(dir.join("missing.pcap")).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("cannot open"));

    for args in [&["--bogus"][..], &[], &["--port", "x", "f"], &["a", "b"]] {
        let out = binary().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(
            stderr.lines().count(),
            1,
            "one line that says what to fix: {stderr}"
        );
    }

    // --strict fails on a capture with a bad CRC; the text shows which.
    let mut bad = full.clone();
    let at = bad.windows(11).position(|w| w == b"rdma-ping-1").unwrap();
    bad[at] ^= 0x55;
    let bad_path = dir.join("bad-crc.pcap");
    std::fs::write(&bad_path, &bad).unwrap();
    let lenient = binary().arg(&bad_path).output().unwrap();
    assert!(lenient.status.success());
    let text = String::from_utf8(lenient.stdout).unwrap();
    assert_eq!(
        text.lines()
            .filter(|l| l.contains("(bad) expected="))
            .count(),
        1,
        "{text}"
    );
    let strict = binary().arg("--strict").arg(&bad_path).output().unwrap();
    assert_eq!(strict.status.code(), Some(3));
    assert!(String::from_utf8(strict.stderr).unwrap().contains("1 bad"));
    assert_eq!(
        binary()
            .arg("--strict")
            .arg(&golden)
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn marker_positions_follow_the_wire_module() {
    // The oracle and the wire module agree on how long a marked FPDU is.
    for (start, len) in [(0u64, 8usize), (0, 508), (4, 600), (100, 5000), (512, 1448)] {
        let ulpdu = vec![0u8; mpa_fpdu_ulpdu_len(len)];
        let raw = frame_stream(start, &[ulpdu], true, false);
        assert_eq!(
            raw.len(),
            mpa_marker::stream_len(start, len),
            "start {start} len {len}"
        );
    }
}

/// The ULPDU length whose FPDU is `fpdu_len` octets (a multiple of 4 >= 8).
fn mpa_fpdu_ulpdu_len(fpdu_len: usize) -> usize {
    let len = fpdu_len.max(8) - 6;
    assert_eq!(
        rnic_engine::wire::mpa_fpdu::fpdu_len(len),
        fpdu_len.max(8).div_ceil(4) * 4
    );
    len
}

#[test]
fn ddp_views_read_the_synthetic_segments() {
    let ulpdu = send(3, b"abc");
    let packet = ddp::Packet::new_checked(&ulpdu[..]).unwrap();
    assert_eq!(
        (packet.qn(), packet.msn(), packet.payload()),
        (0, 3, &b"abc"[..])
    );
}

fn problems(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match &m.body {
            Body::Problem(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn other_tcp_connections_are_counted_not_printed() {
    let mut capture = Capture::new();
    capture.send(0, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", &[]);
    capture.send(1, b"HTTP/1.1 200 OK\r\n\r\n", &[]);
    let bytes = capture.close();
    let (messages, summary, _) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(messages.is_empty(), "{messages:?}");
    assert_eq!(
        (summary.iwarp_connections, summary.other_connections),
        (0, 1)
    );
    let all = Options {
        all: true,
        ..Options::default()
    };
    let (messages, _, _) = decode_capture(Cursor::new(&bytes), all);
    let events: Vec<_> = messages.iter().map(|m| &m.body).collect();
    use dpwarp_pcap::decode::TcpEvent::{Fin, Syn, SynAck};
    assert_eq!(
        events,
        [
            &Body::Tcp(Syn),
            &Body::Tcp(SynAck),
            &Body::Tcp(Fin),
            &Body::Tcp(Fin)
        ]
    );
}

#[test]
fn invalid_startup_frames_are_reported() {
    // PD_Length 513: improperly formatted (RFC 5044: close the connection).
    let mut frame = mpa_frame(mpa_rr::FrameKind::Request, false, false, None, &[0; 512]);
    frame[18..20].copy_from_slice(&513u16.to_be_bytes());
    frame.push(0);
    let mut capture = Capture::new();
    capture.send(0, &frame, &[7, 1]);
    let found = problems(&decode(&capture.close()));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("PD_Length 513 exceeds 512"), "{found:?}");

    // S=1 with only 2 octets of private data.
    let mut frame = mpa_frame(mpa_rr::FrameKind::Reply, false, false, None, &[1, 2]);
    frame[16] |= 0x10;
    let mut capture = Capture::new();
    capture.send(
        0,
        &mpa_frame(mpa_rr::FrameKind::Request, false, false, None, b""),
        &[],
    );
    capture.send(1, &frame, &[]);
    let found = problems(&decode(&capture.close()));
    assert!(found.len() == 1 && found[0].contains("S=1"), "{found:?}");

    // Both sides send a Request (RFC 5044 initiator/initiator).
    let mut capture = Capture::new();
    capture.send(
        0,
        &mpa_frame(mpa_rr::FrameKind::Request, false, false, None, b""),
        &[],
    );
    capture.send(
        1,
        &mpa_frame(mpa_rr::FrameKind::Request, false, false, None, b""),
        &[],
    );
    let found = problems(&decode(&capture.close()));
    assert!(
        found.len() == 1 && found[0].contains("initiator/initiator"),
        "{found:?}"
    );

    // A stream that ends inside a frame.
    let mut capture = Capture::new();
    capture.send(
        0,
        &mpa_frame(mpa_rr::FrameKind::Request, false, false, None, b"hello")[..22],
        &[],
    );
    let found = problems(&decode(&capture.close()));
    assert!(
        found.len() == 1 && found[0].contains("inside an MPA startup frame"),
        "{found:?}"
    );
}

#[test]
fn the_startup_frame_arriving_a_byte_at_a_time_decodes() {
    let mut capture = Capture::new();
    let req = mpa_frame(mpa_rr::FrameKind::Request, false, true, None, b"pd");
    let rep = mpa_frame(mpa_rr::FrameKind::Reply, false, true, None, b"");
    // Frame and the first FPDU in the same byte stream, one octet per segment.
    let mut client = req.clone();
    client.extend(frame_stream(0, &[send(1, b"x")], false, true));
    capture.send(1, &[], &[]);
    capture.send(0, &client, &vec![1; client.len()]);
    capture.send(1, &rep, &[]);
    let messages = decode(&capture.close());
    let found = fpdus(&messages);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1.crc, CrcVerdict::Good);
    assert_eq!(
        found[0].0.first_frame + 27,
        found[0].0.frame,
        "28 octets, one per frame: {:?}",
        found[0].0
    );
    let frames: Vec<_> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Mpa(_)))
        .collect();
    assert_eq!(frames.len(), 2);
}

/// RFC 6581 §9.2: an initiator whose Reply offers no RTR it can send
/// terminates instead (LLP, MPA, No matching RTR option): a Terminate as the
/// peer-to-peer initiator's first FPDU is no problem; anything else is.
#[test]
fn a_p2p_initiator_may_terminate_instead_of_an_rtr() {
    let offer = mpa_rr::EnhancedRepr {
        peer_to_peer: true,
        rtr_send: true,
        rtr_write: false,
        rtr_read: false,
        ird: 1,
        ord: 1,
    };
    let answer = mpa_rr::EnhancedRepr {
        rtr_send: false,
        rtr_write: true,
        ..offer
    };
    let terminate = segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::Terminate, 2, 1, 0, true),
        header: RdmapHeader::Terminate(term::Repr {
            encoding: term::Encoding::Rfc5040,
            layer: term::Layer::Llp,
            etype: 0,
            ecode: 7,
            reserved: 0,
            segment_length_valid: false,
            ddp_segment_length: 0,
            ddp_header: None,
            rdma_header: None,
        }),
        payload: &[],
    });
    let send = segment(&RdmapRepr {
        ddp: untagged(RdmapOpcode::Send, 0, 1, 0, true),
        header: RdmapHeader::None,
        payload: b"not an RTR",
    });
    for (first, trouble) in [(terminate, false), (send, true)] {
        let mut capture = Capture::new();
        capture.send(
            0,
            &mpa_frame(mpa_rr::FrameKind::Request, false, false, Some(offer), b""),
            &[],
        );
        capture.send(
            1,
            &mpa_frame(mpa_rr::FrameKind::Reply, false, false, Some(answer), b""),
            &[],
        );
        capture.send(0, &frame_stream(0, &[first], false, false), &[]);
        let found = problems(&decode(&capture.close()));
        assert_eq!(!found.is_empty(), trouble, "{found:?}");
    }
}

/// A reset throws away what is in flight: the unfinished FPDU it cut is
/// reported as cut, not as a framing problem (a peer with what it wanted
/// may reset while the last Writes travel); the same unfinished FPDU
/// before a FIN is a problem.
#[test]
fn an_fpdu_cut_by_a_reset_is_not_a_problem() {
    let req = mpa_frame(mpa_rr::FrameKind::Request, false, true, None, b"");
    let rep = mpa_frame(mpa_rr::FrameKind::Reply, false, true, None, b"");
    let stream = frame_stream(0, &[send(1, &[7; 100]), send(2, &[8; 100])], false, true);
    let cut = stream.len() - 30;
    for from in [0, 1] {
        let mut capture = Capture::new();
        capture.send(0, &req, &[]);
        capture.send(1, &rep, &[]);
        capture.send(0, &stream[..cut], &[]);
        let messages = decode(&capture.reset(from));
        assert_eq!(
            problems(&messages),
            Vec::<String>::new(),
            "reset from {from}"
        );
        let cuts: Vec<_> = messages
            .iter()
            .filter_map(|m| match &m.body {
                Body::Cut { what, len } => Some((*what, *len)),
                _ => None,
            })
            .collect();
        let first = fpdus(&messages).len();
        assert_eq!(first, 1, "the whole FPDU before the cut decodes");
        assert_eq!(cuts.len(), 1, "reset from {from}: {cuts:?}");
        assert_eq!(cuts[0].0, "an FPDU");
        assert!(cuts[0].1 > 0 && cuts[0].1 < stream.len() / 2, "{cuts:?}");
    }
    let mut capture = Capture::new();
    capture.send(0, &req, &[]);
    capture.send(1, &rep, &[]);
    capture.send(0, &stream[..cut], &[]);
    let found = problems(&decode(&capture.close()));
    assert!(
        found.len() == 1 && found[0].contains("stream ends inside an FPDU"),
        "{found:?}"
    );
}

/// The MPA startup of a CRC connection and FPDUs of `ulpdus` from the client; the
/// client's stream after the startup.
fn crc_connection(capture: &mut Capture, ulpdus: &[Vec<u8>]) -> Vec<u8> {
    capture.send(
        0,
        &mpa_frame(mpa_rr::FrameKind::Request, false, true, None, b""),
        &[],
    );
    capture.send(
        1,
        &mpa_frame(mpa_rr::FrameKind::Reply, false, true, None, b""),
        &[],
    );
    frame_stream(0, ulpdus, false, true)
}

/// `count` short connections to port 80 (SYN, SYN-ACK, then FIN both ways, or an RST
/// from the server for odd ones, or nothing more with `open`), written to a new capture;
/// the writer and the next time stamp.
fn many_connections(count: u32, open: bool) -> (Writer<Vec<u8>>, u64) {
    let mut writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
    let mut ts_ns = 1_000_000_000;
    let server: SocketAddrV4 = "10.9.0.2:80".parse().unwrap();
    for i in 0..count {
        let ip = std::net::Ipv4Addr::new(10, 8, (i >> 15) as u8 + 1, 1);
        let client = SocketAddrV4::new(ip, (i & 0x7fff) as u16 + 1);
        let mut frame = |src, dst, seq, ack, flags| {
            let bytes = build_tcp_frame(src, dst, seq, ack, flags, &[]);
            writer.write_record(ts_ns, &bytes).unwrap();
            ts_ns += 1000;
        };
        frame(client, server, 1000, 0, TcpFlags::SYN);
        frame(server, client, 7000, 1001, TcpFlags::SYN | TcpFlags::ACK);
        if open {
            continue;
        }
        if i % 2 == 0 {
            frame(client, server, 1001, 7001, TcpFlags::FIN | TcpFlags::ACK);
            frame(server, client, 7001, 1002, TcpFlags::FIN | TcpFlags::ACK);
        } else {
            frame(server, client, 7001, 1001, TcpFlags::RST);
        }
    }
    (writer, ts_ns)
}

/// A long capture: more short connections than the reassembler tracks at once, all
/// ended, then an iWARP connection with a bad CRC. The ended ones must not crowd it out.
#[test]
fn ended_connections_do_not_crowd_out_later_ones() {
    let count = dpwarp_capture::reassembly::CONNECTIONS_MAX as u32;
    let (writer, ts_ns) = many_connections(count, false);
    let mut capture = Capture::after(writer, ts_ns, CLIENT.parse().unwrap());
    let mut stream = crc_connection(&mut capture, &[send(1, &[5; 100])]);
    stream[30] ^= 1;
    capture.send(0, &stream, &[]);
    let (messages, summary, _) = decode_capture(Cursor::new(capture.close()), Options::default());
    assert_eq!(summary.iwarp_connections, 1);
    assert_eq!(summary.other_connections, u64::from(count));
    assert_eq!((summary.fpdus, summary.crc_bad), (1, 1), "{summary:?}");
    assert_eq!(fpdus(&messages)[0].1.crc, CrcVerdict::Bad);
}

/// Segments reassembly cannot take (every tracked connection still open) are not
/// decoded; that is a problem, so `--strict` fails rather than pass a capture it did
/// not read.
#[test]
fn segments_beyond_the_connection_limit_are_a_problem() {
    let count = dpwarp_capture::reassembly::CONNECTIONS_MAX as u32;
    let (writer, ts_ns) = many_connections(count, true);
    let mut capture = Capture::after(writer, ts_ns, CLIENT.parse().unwrap());
    let stream = crc_connection(&mut capture, &[send(1, &[5; 100])]);
    capture.send(0, &stream, &[]);
    let (messages, summary, _) = decode_capture(Cursor::new(capture.close()), Options::default());
    assert_eq!(summary.fpdus, 0, "the connection was never reassembled");
    let found = problems(&messages);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("65536 connections"), "{found:?}");
    assert_eq!(summary.problems, 1);
    assert!(summary.ignored_segments >= 4, "{summary:?}");
    assert!(render::summary(&summary).contains("not taken"));
}

/// A retransmission that carries different octets than the first copy: reassembly keeps
/// the first, and the decoder says the capture disagrees with itself.
#[test]
fn a_retransmission_with_different_octets_is_a_problem() {
    let mut capture = Capture::new();
    let stream = crc_connection(&mut capture, &[send(1, &[5; 100])]);
    capture.send(0, &stream, &[]);
    let mut changed = stream.clone();
    changed[40] ^= 0xff;
    capture.next_seq[0] = capture.next_seq[0].wrapping_sub(stream.len() as u32);
    capture.send(0, &changed, &[]);
    let bytes = capture.close();
    let messages = decode(&bytes);
    assert_eq!(
        fpdus(&messages)[0].1.crc,
        CrcVerdict::Good,
        "first copy wins"
    );
    let found = problems(&messages);
    assert!(
        found.len() == 1 && found[0].contains("retransmission"),
        "{found:?}"
    );
    let (_, summary, _) = decode_capture(Cursor::new(bytes), Options::default());
    assert_eq!((summary.conflicting_bytes, summary.problems), (1, 1));
}

/// The same on a connection that is not iWARP: its line is shown only with `--all`,
/// but the problem counts either way, so `--all` changes only what is printed (the
/// `pcap_decode` fuzz target found the count differing).
#[test]
fn a_retransmission_that_differs_counts_on_any_connection() {
    let mut capture = Capture::new();
    let stream = b"GET / HTTP/1.0\r\n\r\n".to_vec();
    capture.send(0, &stream, &[]);
    let mut changed = stream.clone();
    changed[3] ^= 0xff;
    capture.next_seq[0] = capture.next_seq[0].wrapping_sub(stream.len() as u32);
    capture.send(0, &changed, &[]);
    let bytes = capture.close();
    let all = Options {
        all: true,
        ..Options::default()
    };
    let (_, plain, _) = decode_capture(Cursor::new(bytes.clone()), Options::default());
    let (_, with_all, _) = decode_capture(Cursor::new(bytes), all);
    assert_eq!(plain, with_all);
    assert_eq!(
        (
            plain.iwarp_connections,
            plain.conflicting_bytes,
            plain.problems
        ),
        (0, 1, 1)
    );
}

/// `--port` on a capture that starts inside an FPDU: the direction looks for the first
/// plausible FPDU at a segment start instead of reading a length out of the middle of one.
#[test]
fn a_named_port_finds_the_first_fpdu_of_a_capture_that_starts_inside_one() {
    // The skipped octets read as a short ULPDU_Length (0x0101), then as one
    // longer than the capture holds (0xc8c8), which must not stall the search.
    for fill in [1u8, 0xc8] {
        starts_inside_an_fpdu(fill);
    }
}

fn starts_inside_an_fpdu(fill: u8) {
    let mut ulpdus: Vec<Vec<u8>> = (1..=5).map(|i| send(i, &[i as u8; 300])).collect();
    ulpdus[0] = send(1, &[fill; 300]);
    let stream = frame_stream(0, &ulpdus, false, true);
    let fpdu_len = stream.len() / 5;
    let mut capture = Capture::mid_connection();
    // The last 100 octets of FPDU 1, then FPDUs 2-5 one per segment.
    capture.send(0, &stream[fpdu_len - 100..fpdu_len], &[]);
    for k in 1..5 {
        capture.send(0, &stream[k * fpdu_len..(k + 1) * fpdu_len], &[]);
    }
    let options = Options {
        ports: vec![7174],
        ..Options::default()
    };
    let (messages, summary, _) = decode_capture(Cursor::new(capture.close()), options);
    let decoded: Vec<_> = fpdus(&messages)
        .iter()
        .map(|(_, f)| f.ulpdu.clone())
        .collect();
    assert_eq!(decoded, &ulpdus[1..]);
    assert_eq!((summary.crc_good, summary.crc_bad), (4, 0), "{summary:?}");
    let found = problems(&messages);
    assert!(
        found.len() == 1 && found[0].contains("100 octets"),
        "the skipped octets are reported: {found:?}"
    );
}

/// With `--port` the CRC is auto-detected; bad CRCs found that way also make the
/// direction stop trusting ULPDU_Length and resynchronise.
#[test]
fn auto_detected_bad_crcs_resynchronise() {
    let ulpdus = vec![
        send(1, &[7; 100]),
        send(2, &[1; 1000]),
        send(3, &[8; 100]),
        send(4, &[9; 100]),
    ];
    let mut stream = frame_stream(0, &ulpdus, false, true);
    let first = mpa_fpdu_len(&ulpdus[0]);
    let second = mpa_fpdu_len(&ulpdus[1]);
    // FPDU 2 claims a 20-octet ULPDU: the next length is read from its 0x01 payload.
    stream[first..first + 2].copy_from_slice(&20u16.to_be_bytes());
    let mut capture = Capture::mid_connection();
    let mut at = 0;
    for len in [first, second, stream.len() - first - second] {
        capture.send(0, &stream[at..at + len], &[]);
        at += len;
    }
    let options = Options {
        ports: vec![7174],
        ..Options::default()
    };
    let (messages, _, _) = decode_capture(Cursor::new(capture.close()), options);
    let good: Vec<_> = fpdus(&messages)
        .iter()
        .filter(|(_, f)| f.crc == CrcVerdict::Good)
        .map(|(_, f)| f.ulpdu.clone())
        .collect();
    assert_eq!(good, [&ulpdus[..1], &ulpdus[2..]].concat());
    assert!(
        problems(&messages)
            .iter()
            .any(|p| p.contains("bad CRCs in a row")),
        "{:?}",
        problems(&messages)
    );
}

fn mpa_fpdu_len(ulpdu: &[u8]) -> usize {
    rnic_engine::wire::mpa_fpdu::fpdu_len(ulpdu.len())
}

/// A segment lost before a reset: the reset does not hide the gap, and the FPDUs that
/// followed the gap still decode.
#[test]
fn a_gap_before_a_reset_is_reported() {
    let ulpdus: Vec<Vec<u8>> = (1..=3).map(|i| send(i, &[i as u8; 100])).collect();
    let mut capture = Capture::new();
    let stream = crc_connection(&mut capture, &ulpdus);
    let len = stream.len() / 3;
    capture.send(0, &stream[..len], &[]);
    capture.lose(0, len);
    capture.send(0, &stream[2 * len..], &[]);
    let (messages, summary, _) = decode_capture(Cursor::new(capture.reset(0)), Options::default());
    let gaps: Vec<_> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Gap { .. }))
        .collect();
    assert_eq!(gaps.len(), 1, "{messages:?}");
    let decoded: Vec<_> = fpdus(&messages)
        .iter()
        .map(|(_, f)| f.ulpdu.clone())
        .collect();
    assert_eq!(decoded, [&ulpdus[..1], &ulpdus[2..]].concat());
    assert!(summary.problems >= 1, "--strict fails: {summary:?}");
}

/// Octets captured after the reset that belong before it (the capture reordered them):
/// they decode, bad CRC and all.
#[test]
fn octets_captured_after_a_reset_decode() {
    let mut capture = Capture::new();
    let ulpdus = vec![send(1, &[1; 100]), send(2, &[2; 100])];
    let mut stream = crc_connection(&mut capture, &ulpdus);
    let len = stream.len() / 2;
    stream[len + 20] ^= 1;
    capture.send(0, &stream[..len], &[]);
    let seq = capture.next_seq[0];
    capture.next_seq[0] = seq.wrapping_add(len as u32);
    capture.segment(0, TcpFlags::RST | TcpFlags::ACK, &[]);
    capture.next_seq[0] = seq;
    capture.send(0, &stream[len..], &[]);
    let (messages, summary, _) = decode_capture(
        Cursor::new(capture.writer.into_inner().unwrap()),
        Options::default(),
    );
    assert_eq!((summary.fpdus, summary.crc_bad), (2, 1), "{summary:?}");
    assert_eq!(problems(&messages), Vec::<String>::new());
}

/// The client resets while the server's FPDUs are on their way: those captured after
/// the RST decode, and the one the capture ends inside is cut, not a problem.
#[test]
fn fpdus_in_flight_when_the_peer_resets_decode() {
    let mut capture = Capture::new();
    let ulpdus: Vec<Vec<u8>> = (1..=3).map(|i| send(i, &[i as u8; 100])).collect();
    crc_connection(&mut capture, &[]);
    let server = frame_stream(0, &ulpdus, false, true);
    let len = server.len() / 3;
    capture.send(1, &server[..len], &[]);
    capture.segment(0, TcpFlags::RST, &[]);
    capture.send(1, &server[len..server.len() - 10], &[len]);
    let (messages, summary, _) = decode_capture(
        Cursor::new(capture.writer.into_inner().unwrap()),
        Options::default(),
    );
    let decoded: Vec<_> = fpdus(&messages)
        .iter()
        .map(|(_, f)| f.ulpdu.clone())
        .collect();
    assert_eq!(decoded, &ulpdus[..2]);
    assert_eq!(problems(&messages), Vec::<String>::new());
    assert_eq!(summary.problems, 0);
    let cuts: Vec<_> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Cut { .. }))
        .collect();
    assert_eq!(cuts.len(), 1, "{messages:?}");
}

/// A capture of one side only (or one where the other side's startup frame is lost):
/// the direction stops waiting for the frame that will never come and decodes with
/// CRC auto-detected, as it would past PENDING_BYTES_MAX.
#[test]
fn fpdus_decode_without_the_other_sides_startup_frame() {
    let ulpdus: Vec<Vec<u8>> = (1..=3).map(|i| send(i, &[i as u8; 100])).collect();
    let request = mpa_frame(mpa_rr::FrameKind::Request, false, true, None, b"");
    let reply = mpa_frame(mpa_rr::FrameKind::Reply, false, true, None, b"");
    for lost_reply in [false, true] {
        let mut capture = Capture::new();
        capture.send(0, &request, &[]);
        if lost_reply {
            capture.lose(1, reply.len());
            capture.segment(1, TcpFlags::ACK, &[]);
        }
        capture.send(0, &frame_stream(0, &ulpdus, false, true), &[]);
        let messages = decode(&capture.close());
        let decoded: Vec<_> = fpdus(&messages)
            .iter()
            .map(|(_, f)| (f.ulpdu.clone(), f.crc))
            .collect();
        let want: Vec<_> = ulpdus
            .iter()
            .map(|u| (u.clone(), CrcVerdict::Good))
            .collect();
        assert_eq!(decoded, want, "reply lost: {lost_reply}");
        let found = problems(&messages);
        assert!(
            found
                .iter()
                .any(|p| p.contains("other side's MPA frame is not in the capture")),
            "{found:?}"
        );
        assert!(
            !found.iter().any(|p| p.contains("cannot complete")),
            "{found:?}"
        );
    }
}
