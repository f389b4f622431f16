//! Defects a review found in dpwarp-pcap and in the reassembly under it:
//! how connections and associations are told apart, what a capture it cannot
//! read says, how sequence numbers print. Each test failed before its fix.

mod common;

use std::io::Cursor;
use std::process::Command;

use dpwarp_capture::packet::{build_sctp_chunk, build_tcp_frame, SctpOver, TcpFlags};
use dpwarp_capture::pcap::{linktype, Writer};
use dpwarp_pcap::decode::{
    Body, CrcVerdict, Decoder, Message, Options, TcpEvent, UNSUPPORTED_LINKTYPES_MAX, UNTRACKED,
};
use dpwarp_pcap::{decode_capture, run, Config};
use rnic_engine::wire::mpa_rr;

use common::{
    fpdu, golden, init, send, Capture, SctpCapture, COOKIE_ACK, COOKIE_ECHO, INIT, INIT_ACK, SERVER,
};

/// An untagged Send of 100 octets, each `msn`.
fn send_ulpdu(msn: u32) -> Vec<u8> {
    send(msn, &[msn as u8; 100])
}

/// A CRC connection's MPA Request or Reply, without markers or private
/// data.
fn mpa_frame(kind: mpa_rr::FrameKind) -> Vec<u8> {
    common::mpa_frame(kind, false, true, None, b"")
}

/// MPA Request and Reply, then three Sends each way.
fn iwarp_exchange(capture: &mut Capture) {
    capture.send(0, &mpa_frame(mpa_rr::FrameKind::Request), &[]);
    capture.send(1, &mpa_frame(mpa_rr::FrameKind::Reply), &[]);
    for msn in 1..=3 {
        capture.send(0, &fpdu(&send_ulpdu(msn)), &[]);
        capture.send(1, &fpdu(&send_ulpdu(msn)), &[]);
    }
}

/// The ULPDUs of the server's FPDUs with a good CRC.
fn server_fpdus(messages: &[Message]) -> Vec<Vec<u8>> {
    messages
        .iter()
        .filter(|m| m.src.to_string() == SERVER)
        .filter_map(|m| match &m.body {
            Body::Fpdu(f) if f.crc == CrcVerdict::Good => Some(f.ulpdu.clone()),
            _ => None,
        })
        .collect()
}

/// Two connections of [`iwarp_exchange`] on one address pair decoded whole:
/// no gap, each one's MPA Reply, and the server's three Sends of each.
#[track_caller]
fn both_connections_whole(messages: &[Message]) {
    let gaps: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Gap { .. }))
        .collect();
    assert!(
        gaps.is_empty(),
        "no octet of either connection is missing: {gaps:?}"
    );
    let replies = messages
        .iter()
        .filter(|m| matches!(&m.body, Body::Mpa(f) if f.kind == mpa_rr::FrameKind::Reply))
        .count();
    assert_eq!(replies, 2, "each connection's MPA Reply");
    let sends: Vec<Vec<u8>> = (1..=3).map(send_ulpdu).collect();
    assert_eq!(server_fpdus(messages), [sends.clone(), sends].concat());
}

/// RFC 5961 §4 (RFC 9293 §3.10.7.3): a client that lost its connection
/// sends a new SYN; the server, still in the old connection, answers with a
/// challenge ACK from the old sequence space; the client resets that, sends
/// its SYN again and the new connection is set up. The challenge ACK,
/// captured before the server's SYN-ACK, used to fix the start of the new
/// connection's server stream: the SYN-ACK's ISN came millions of octets
/// later, a gap, and the MPA Reply and FPDUs were lost.
#[test]
fn half_open_recovery_keeps_the_servers_stream() {
    let mut capture = Capture::with_isn([1000, 2000]);
    iwarp_exchange(&mut capture);
    let old = capture.next_seq;
    capture.next_seq[0] = 3_000_000;
    capture.segment(0, TcpFlags::SYN, &[]);
    capture.next_seq[0] = old[0];
    // The challenge ACK: the old connection's sequence numbers both ways.
    capture.segment(1, TcpFlags::ACK, &[]);
    capture.at(0, old[0], TcpFlags::RST, &[]);
    capture.next_seq = [3_000_000, 9_000_000];
    capture.segment(0, TcpFlags::SYN, &[]);
    capture.segment(1, TcpFlags::SYN | TcpFlags::ACK, &[]);
    capture.next_seq = [3_000_001, 9_000_001];
    iwarp_exchange(&mut capture);
    let bytes = capture.close();
    let (messages, _, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    both_connections_whole(&messages);
}

/// RFC 9260 §5.1: an endpoint whose INIT ACK was lost retransmits its INIT
/// when T1-init expires. The INIT ACK the capture saw used to mark the
/// association set up, so the second INIT started another one.
#[test]
fn an_init_retransmitted_after_a_lost_init_ack_is_the_same_association() {
    // INIT and INIT ACK carry the Adaptation Layer Indication for DDP.
    let mut capture = SctpCapture::new(SctpOver::Udp, true);
    let mut packet = |from: usize, vtag: u32, chunk: Vec<u8>| capture.packet(from, vtag, &[chunk]);
    packet(0, 0, init(INIT, 0x1111_2222, 100, Some(1)));
    packet(1, 0x1111_2222, init(INIT_ACK, 0x3333_4444, 900, Some(1)));
    packet(0, 0, init(INIT, 0x1111_2222, 100, Some(1)));
    packet(1, 0x1111_2222, init(INIT_ACK, 0x3333_4444, 900, Some(1)));
    packet(
        0,
        0x3333_4444,
        build_sctp_chunk(COOKIE_ECHO, 0, &[0xc0; 24]),
    );
    packet(1, 0x1111_2222, build_sctp_chunk(COOKIE_ACK, 0, &[]));
    let bytes = capture.bytes();
    let (messages, summary, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    let assocs: Vec<u32> = messages.iter().map(|m| m.conn.0).collect();
    assert_eq!(assocs, [0; 6], "one association, every chunk of it");
    assert_eq!(summary.sctp_associations, 1);
}

/// Wireshark's relative sequence numbers: the SYN is 0 (it occupies the
/// ISN, RFC 9293 §3.4), the first data octet 1. The SYN and SYN-ACK lines
/// said 1.
#[test]
fn a_syns_relative_sequence_number_is_zero() {
    let bytes = std::fs::read(golden("rping_v2_crc.pcap")).unwrap();
    let config = Config {
        json: true,
        ..Config::default()
    };
    let mut out = Vec::new();
    run(Cursor::new(&bytes), &mut out, &config).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    // tshark: frame 1 (SYN) tcp.seq 0, tcp.seq_raw 1525777200; frame 2
    // (SYN-ACK) tcp.seq 0, tcp.seq_raw 2870843928; the MPA Request (frame
    // 4) tcp.seq 1.
    for (event, raw) in [("syn", 1_525_777_200u64), ("syn_ack", 2_870_843_928)] {
        let line = lines.iter().find(|o| o["event"] == event).unwrap();
        assert_eq!(line["tcp_seq"], raw);
        assert_eq!(line["seq"], 0, "{line}");
    }
    let request = lines.iter().find(|o| o["kind"] == "mpa_req").unwrap();
    assert_eq!(request["tcp_seq"], 1_525_777_201u64);
    assert_eq!(request["seq"], 1, "{request}");
    let text = Config::default();
    let mut out = Vec::new();
    run(Cursor::new(&bytes), &mut out, &text).unwrap();
    let text = String::from_utf8(out).unwrap();
    let syn = text.lines().find(|l| l.ends_with(" SYN")).unwrap();
    assert!(syn.contains(" seq=0 "), "{syn}");
}

/// A capture of a link-layer type the reader does not know (105, IEEE
/// 802.11) decoded nothing and said nothing: no line, an empty summary,
/// exit status 0 even with `--strict`.
#[test]
fn an_unsupported_link_type_is_said_and_fails_strict() {
    let mut bytes = std::fs::read(golden("rping_v2_crc.pcap")).unwrap();
    // The classic pcap header's LinkType field, in the file's byte order.
    bytes[20..24].copy_from_slice(&105u32.to_le_bytes());
    let (messages, summary, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    let problems: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Problem(_)))
        .collect();
    assert_eq!(problems.len(), 1, "one problem per link-layer type");
    assert_eq!(problems[0].conn, UNTRACKED);
    assert_eq!(problems[0].frame, 1, "the first frame of the type");
    assert_eq!(
        problems[0].body,
        Body::Problem(
            "link-layer type 105 is not supported (only Ethernet, Linux cooked v1 and v2, raw IP \
             and BSD loopback are): 37 frames not decoded"
                .into()
        )
    );
    assert_eq!(summary.unsupported_frames, 37);
    assert_eq!(summary.problems, 1);

    let path = std::env::temp_dir().join(format!("dpwarp-pcap-lt105-{}.pcap", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp-pcap"))
        .arg("--strict")
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("link-layer type 105 is not supported") && stdout.contains("37 frames"),
        "nothing says why nothing was decoded: {stdout}"
    );
    assert!(
        stderr.contains("37 frame(s) of unsupported link-layer types not decoded"),
        "{stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "--strict passed a capture it could not read"
    );
}

/// Each unsupported link-layer type is a problem, up to
/// `UNSUPPORTED_LINKTYPES_MAX` of them (a pcapng file gives each interface a
/// type); frames of more types are counted all the same.
#[test]
fn unsupported_link_types_are_reported_within_a_bound() {
    let mut decoder = Decoder::new(Options::default());
    let types = UNSUPPORTED_LINKTYPES_MAX as u32 + 6;
    for frame in 1..=u64::from(types) * 2 {
        decoder.note_unsupported_linktype(frame, frame * 1000, 1000 + (frame as u32 - 1) % types);
    }
    decoder.finish();
    let messages: Vec<Message> = decoder.drain().collect();
    assert_eq!(messages.len(), UNSUPPORTED_LINKTYPES_MAX);
    assert_eq!(
        messages[0].body,
        Body::Problem(
            "link-layer type 1000 is not supported (only Ethernet, Linux cooked v1 and v2, raw \
             IP and BSD loopback are): 2 frames not decoded"
                .into()
        )
    );
    let frames: Vec<u64> = messages.iter().map(|m| m.frame).collect();
    assert_eq!(
        frames,
        (1..=UNSUPPORTED_LINKTYPES_MAX as u64).collect::<Vec<_>>()
    );
    let summary = decoder.summary();
    assert_eq!(summary.unsupported_frames, u64::from(types) * 2);
    assert_eq!(summary.problems, UNSUPPORTED_LINKTYPES_MAX as u64);
}

/// A capture of many FPDUs whose last segment is lost: a gap, a problem
/// that only the end of the capture shows.
fn long_capture_with_a_late_problem() -> Vec<u8> {
    let mut capture = Capture::with_isn([1000, 2000]);
    capture.send(0, &mpa_frame(mpa_rr::FrameKind::Request), &[]);
    capture.send(1, &mpa_frame(mpa_rr::FrameKind::Reply), &[]);
    // Some 300 KiB of text lines, far more than a pipe holds.
    for msn in 1..=3000 {
        capture.send(0, &fpdu(&send_ulpdu(msn)), &[]);
    }
    capture.next_seq[0] = capture.next_seq[0].wrapping_add(100);
    capture.send(0, &fpdu(&send_ulpdu(3001)), &[]);
    capture.close()
}

/// Runs the binary on `bytes` with `args`, reads one line of its output and
/// closes the pipe (`dpwarp-pcap --strict F | head -1`); returns its status.
fn status_after_one_line(bytes: &[u8], args: &[&str], name: &str) -> std::process::ExitStatus {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let path = std::env::temp_dir().join(format!("dpwarp-pcap-{name}-{}.pcap", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dpwarp-pcap"))
        .args(args)
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("SYN") || line.contains("\"syn\""), "{line}");
    drop(reader);
    let out = child.wait_with_output().unwrap();
    std::fs::remove_file(&path).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    out.status
}

/// `dpwarp-pcap --strict F | head -1`: the reader leaves after one line. The
/// strict verdict was lost: a broken pipe exited 0 before the problem at the
/// end of the capture was decoded. The rest is now decoded unprinted and the
/// status is 3; without `--strict` a reader that leaves is no failure.
#[test]
fn strict_keeps_its_verdict_when_the_reader_leaves() {
    let bytes = long_capture_with_a_late_problem();
    let (_, summary, _) = decode_capture(Cursor::new(&bytes), Options::default());
    assert_eq!(summary.fpdus, 3001);
    assert!(summary.problems > 0, "the lost segment is a gap");
    let strict = status_after_one_line(&bytes, &["--strict"], "epipe-strict");
    assert_eq!(strict.code(), Some(3), "--strict | head -1: {strict:?}");
    let json = status_after_one_line(&bytes, &["--strict", "--json"], "epipe-json");
    assert_eq!(json.code(), Some(3), "--strict --json | head -1: {json:?}");
    let plain = status_after_one_line(&bytes, &[], "epipe-plain");
    assert_eq!(plain.code(), Some(0), "| head -1: {plain:?}");
}

/// Reassembly counted octets it could not place (here a retransmission of
/// octets before the first one captured, in a capture that starts after
/// the handshake) in `dropped_bytes`, but nothing reported them: no
/// problem, no word in the summary, and `--strict` passed.
#[test]
fn octets_dropped_before_the_stream_start_are_reported() {
    let mut capture = Capture::with_isn([1000, 2000]);
    // Start the capture after the handshake: a fresh writer.
    capture.writer = Writer::new(Vec::new(), linktype::ETHERNET).unwrap();
    capture.next_seq = [5000, 8000];
    iwarp_exchange(&mut capture);
    let behind = fpdu(&send_ulpdu(9));
    capture.at(0, 5000 - behind.len() as u32, TcpFlags::ACK, &behind);
    let bytes = capture.close();
    let (messages, summary, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    assert_eq!(summary.dropped_bytes, behind.len() as u64);
    let expected = format!(
        "{} octets lie before the start of the stream (the octet after the SYN, or the first one \
         captured): not decoded",
        behind.len()
    );
    let problems: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(&m.body, Body::Problem(text) if *text == expected))
        .collect();
    assert_eq!(problems.len(), 1, "{messages:#?}");
    assert_eq!(summary.problems, 1);
    let line = dpwarp_pcap::render::summary(&summary);
    assert!(
        line.contains(&format!(
            "{} octet(s) dropped before the start of their stream",
            behind.len()
        )),
        "{line}"
    );

    let path =
        std::env::temp_dir().join(format!("dpwarp-pcap-dropped-{}.pcap", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dpwarp-pcap"))
        .arg("--strict")
        .arg(&path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("octet(s) dropped before the start"),
        "{stdout}"
    );
    assert_eq!(out.status.code(), Some(3), "--strict passed dropped octets");
}

/// Splits the IPv4 packet of an Ethernet frame into two fragments, the
/// first carrying `first_len` octets (a multiple of 8) of its payload (RFC
/// 791 §3.2). Header checksums are left as they are: nothing checks them.
fn fragments(frame: &[u8], first_len: usize) -> [Vec<u8>; 2] {
    const ETHERNET: usize = 14;
    const IP_HEADER: usize = 20;
    let header = &frame[..ETHERNET + IP_HEADER];
    let payload = &frame[ETHERNET + IP_HEADER..];
    let piece = |bytes: &[u8], offset_words: u16, more: bool| {
        let mut out = header.to_vec();
        out.extend_from_slice(bytes);
        let total = (IP_HEADER + bytes.len()) as u16;
        out[ETHERNET + 2..ETHERNET + 4].copy_from_slice(&total.to_be_bytes());
        let flags = offset_words | if more { 0x2000 } else { 0 };
        out[ETHERNET + 6..ETHERNET + 8].copy_from_slice(&flags.to_be_bytes());
        out
    };
    [
        piece(&payload[..first_len], 0, true),
        piece(&payload[first_len..], (first_len / 8) as u16, false),
    ]
}

/// FPDUs sent in IPv4 fragments were skipped without a word and showed only
/// as gaps in the stream, as if the capture had lost the segments. Fragments
/// are reassembled (RFC 791 §3.2): a datagram whose fragments all came (in
/// any order) decodes; one whose last fragment is missing is counted and
/// said (one problem), so `--strict` knows what the gap is. Fragments of
/// protocols the tool does not decode (ICMP) are neither.
#[test]
fn ip_fragments_are_reassembled_or_counted_and_said() {
    let mut capture = Capture::with_isn([1000, 2000]);
    iwarp_exchange(&mut capture);
    let fragmented = |capture: &mut Capture, msn: u32, keep_last: bool| {
        let ulpdu = fpdu(&send_ulpdu(msn));
        let (src, dst) = (capture.ends[0], capture.ends[1]);
        let (seq, ack) = (capture.next_seq[0], capture.next_seq[1]);
        let flags = TcpFlags::ACK | TcpFlags::PSH;
        let mut frame = build_tcp_frame(src, dst, seq, ack, flags, &ulpdu);
        // Each datagram its own Identification.
        frame[14 + 5] = msn as u8;
        let [first, second] = fragments(&frame, 64);
        let mut icmp = second.clone();
        icmp[14 + 9] = 1;
        // The last fragment first: any order.
        let pieces = if keep_last {
            vec![second, icmp, first]
        } else {
            vec![icmp, first]
        };
        for piece in pieces {
            capture.writer.write_record(capture.ts_ns, &piece).unwrap();
            capture.ts_ns += 1000;
        }
        capture.next_seq[0] = seq.wrapping_add(ulpdu.len() as u32);
    };
    fragmented(&mut capture, 4, true);
    fragmented(&mut capture, 5, false);
    capture.send(0, &fpdu(&send_ulpdu(6)), &[]);
    let bytes = capture.close();
    // With `DPWARP_FRAGMENT_CORPUS=DIR` set, the capture is written to DIR as a
    // seed of the fuzz targets `pcap_decode` and `pcap_reader`
    // (`fuzz/make-corpus.sh`), so that the fuzzer starts from fragments the
    // defragmenter puts together and gives up.
    if let Ok(dir) = std::env::var("DPWARP_FRAGMENT_CORPUS") {
        let path = std::path::Path::new(&dir).join("seed-synthetic-ip-fragments");
        std::fs::write(path, &bytes).unwrap();
    }
    let (messages, summary, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    let client_sends: Vec<u32> = messages
        .iter()
        .filter(|m| m.src.to_string() != SERVER)
        .filter_map(|m| match &m.body {
            Body::Fpdu(f) if f.crc == CrcVerdict::Good => f.ulpdu.last().map(|&b| u32::from(b)),
            _ => None,
        })
        .collect();
    assert_eq!(
        client_sends,
        [1, 2, 3, 4, 6],
        "the reassembled FPDU decodes"
    );
    assert_eq!(summary.datagrams_reassembled, 1);
    assert_eq!(summary.fragments, 1, "neither ICMP fragment counts");
    let said: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(&m.body, Body::Problem(text) if text.contains("IP fragment")))
        .collect();
    assert_eq!(said.len(), 1, "{messages:#?}");
    assert_eq!(
        said[0].body,
        Body::Problem(
            "1 IP fragment of TCP, UDP or SCTP not decoded (IPv6 fragments are not reassembled, \
             nor IPv4 datagrams whose fragments did not all come within 30 s, or while 64 \
             others waited): what they carried is missing (a gap in a TCP stream, a lost SCTP \
             packet)"
                .into()
        )
    );
    assert_eq!(said[0].frame, 15, "the frame of the fragment not decoded");
    let gaps = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Gap { .. }))
        .count();
    assert_eq!(gaps, 1, "where the incomplete datagram's segment was");
    let line = dpwarp_pcap::render::summary(&summary);
    assert!(
        line.contains(
            "; 1 IP datagram(s) reassembled from fragments; 1 IP fragment(s) not reassembled, \
             not decoded"
        ),
        "{line}"
    );
}

/// A connection, closed; a new one on the same address pair, whose SYN is
/// followed by a retransmission of the old connection's last server FPDU
/// (its sequence and acknowledgment numbers) before the new SYN-ACK. The
/// stray segment fixed where the new server stream starts: the SYN-ACK
/// moved it no more, and the new MPA Reply and FPDUs were lost behind a
/// gap. It is left out and counted instead.
#[test]
fn an_old_connections_segment_after_a_new_syn_is_left_out() {
    let mut capture = Capture::with_isn([1000, 2000]);
    iwarp_exchange(&mut capture);
    let old = capture.next_seq;
    let last = fpdu(&send_ulpdu(3));
    capture.segment(0, TcpFlags::FIN | TcpFlags::ACK, &[]);
    capture.next_seq[0] = capture.next_seq[0].wrapping_add(1);
    capture.segment(1, TcpFlags::FIN | TcpFlags::ACK, &[]);
    capture.next_seq[1] = capture.next_seq[1].wrapping_add(1);
    let stale = capture.next_seq;
    capture.next_seq = [3_000_000, 9_000_000];
    capture.segment(0, TcpFlags::SYN, &[]);
    // The old server's retransmission of its last FPDU.
    capture.next_seq[0] = stale[0];
    capture.at(
        1,
        old[1].wrapping_sub(last.len() as u32),
        TcpFlags::ACK,
        &last,
    );
    capture.next_seq = [3_000_001, 9_000_000];
    capture.segment(1, TcpFlags::SYN | TcpFlags::ACK, &[]);
    capture.next_seq = [3_000_001, 9_000_001];
    iwarp_exchange(&mut capture);
    let bytes = capture.close();
    let (messages, summary, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    both_connections_whole(&messages);
    assert_eq!(summary.stray_segments, 1);
    assert_eq!(summary.problems, 0);
}

/// A late RST of the address pair's previous connection (its sequence and
/// acknowledgment numbers), captured in the middle of the new one, marked
/// the new connection reset: an RST line, and what it left unfinished a
/// cut. RFC 5961 §3.2 drops an RST outside the receive window.
#[test]
fn an_old_connections_late_rst_resets_nothing() {
    let mut capture = Capture::with_isn([1000, 2000]);
    iwarp_exchange(&mut capture);
    let old = capture.next_seq;
    capture.segment(0, TcpFlags::FIN | TcpFlags::ACK, &[]);
    capture.next_seq[0] = capture.next_seq[0].wrapping_add(1);
    capture.segment(1, TcpFlags::FIN | TcpFlags::ACK, &[]);
    capture.next_seq = [3_000_000, 9_000_000];
    capture.segment(0, TcpFlags::SYN, &[]);
    capture.segment(1, TcpFlags::SYN | TcpFlags::ACK, &[]);
    capture.next_seq = [3_000_001, 9_000_001];
    capture.send(0, &mpa_frame(mpa_rr::FrameKind::Request), &[]);
    let new = capture.next_seq;
    capture.next_seq[0] = old[0];
    capture.at(1, old[1], TcpFlags::RST | TcpFlags::ACK, &[]);
    capture.next_seq = new;
    capture.send(1, &mpa_frame(mpa_rr::FrameKind::Reply), &[]);
    capture.send(0, &fpdu(&send_ulpdu(1)), &[]);
    let bytes = capture.close();
    let (messages, summary, failure) = decode_capture(Cursor::new(&bytes), Options::default());
    assert!(failure.is_none());
    let resets: Vec<&Message> = messages
        .iter()
        .filter(|m| matches!(m.body, Body::Tcp(TcpEvent::Rst)))
        .collect();
    assert!(resets.is_empty(), "{resets:?}");
    let fins = messages
        .iter()
        .filter(|m| m.conn.0 == 1 && matches!(m.body, Body::Tcp(TcpEvent::Fin)))
        .count();
    assert_eq!(fins, 2, "the new connection closes with its FINs");
    assert_eq!(summary.stray_segments, 1);
    assert_eq!(summary.problems, 0);
}
