//! Cuts the fuzz seed corpus out of the golden Linux siw captures.
//!
//! `corpus-tool GOLDEN_DIR CORPUS_DIR` reads every `GOLDEN_DIR/*.pcap`,
//! reassembles its TCP streams with `dpwarp-capture`, walks each direction
//! as the decoder does (MPA Request/Reply, then FPDUs cut by ULPDU_Length)
//! and writes `CORPUS_DIR/<target>/seed-<capture>-<what>` files:
//!
//! | target          | seeds                                                        |
//! |-----------------|--------------------------------------------------------------|
//! | `mpa_frame`     | every distinct MPA Request/Reply, and one followed by its FPDU |
//! | `fpdu`          | whole FPDUs, the first two of each opcode per capture          |
//! | `rdmap_segment` | the ULPDUs of those FPDUs                                      |
//! | `terminate`     | the DDP payload of every Terminate (`term_bad_*.pcap`)         |
//! | `atomic`        | RFC 7306 headers built with the engine's emitters (no capture has atomics) |
//! | `markers`       | a real FPDU stream with markers inserted, at several start positions |
//! | `pcap_reader`   | small captures, re-framed as raw IP, Linux SLL/SLL2, BSD loopback and 802.1Q |
//! | `pcap_decode`   | every capture, and one rebuilt with MPA markers negotiated     |
//! | `decode_stream` | every connection as a `dpwarp_fuzz::stream` script, as captured, FPDU-only with `--port`, and with markers |
//!
//! Nothing is random: re-running gives the same files. Everything written
//! is named `seed-*`, which `.gitignore` lets through.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use dpwarp_capture::packet::{self, build_tcp_frame, TcpFlags};
use dpwarp_capture::pcap::{self, linktype};
use dpwarp_capture::reassembly::{ConnId, Dir, Event, Limits, Reassembler};
use dpwarp_fuzz::stream::{Op, Script};

mod sctp;
use rnic_engine::mpa::crc;
use rnic_engine::wire::{atomic, ddp, mpa_fpdu, mpa_marker, mpa_rr, rdmap};

/// Per capture and opcode, how many FPDUs to keep.
const FPDUS_PER_OPCODE: usize = 2;
/// Largest capture copied whole into `pcap_reader` (the decoder gets all).
const READER_PCAP_MAX: u64 = 5_000;

/// One TCP connection of a capture, as reassembly reported it.
#[derive(Debug, Default)]
struct Conversation {
    client: Option<SocketAddr>,
    /// Reassembly events and SYNs, in capture order, with their frames.
    steps: Vec<Step>,
}

#[derive(Debug, Clone)]
enum Step {
    Syn(Dir),
    Data { dir: Dir, frame: u64, data: Vec<u8> },
    Gap(Dir, u64),
    Fin(Dir),
    Rst(Dir),
}

/// A unit cut from a direction's stream.
#[derive(Debug, Clone)]
struct Unit {
    frame: u64,
    bytes: Vec<u8>,
}

struct Writer {
    root: PathBuf,
    seen: BTreeMap<String, BTreeSet<Vec<u8>>>,
    written: usize,
    octets: usize,
}

impl Writer {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) -> io::Result<()> {
        if !self
            .seen
            .entry(target.to_string())
            .or_default()
            .insert(bytes.to_vec())
        {
            return Ok(());
        }
        let dir = self.root.join(target);
        fs::create_dir_all(&dir)?;
        fs::write(dir.join(format!("seed-{name}")), bytes)?;
        self.written += 1;
        self.octets += bytes.len();
        Ok(())
    }
}

fn dir_name(dir: Dir) -> &'static str {
    match dir {
        Dir::ClientToServer => "c2s",
        Dir::ServerToClient => "s2c",
    }
}

fn slot(dir: Dir) -> usize {
    match dir {
        Dir::ClientToServer => 0,
        Dir::ServerToClient => 1,
    }
}

fn read_conversations(path: &Path) -> Result<Vec<Conversation>, String> {
    let mut reader = pcap::open(path).map_err(|e| e.to_string())?;
    let mut reassembler = Reassembler::new(Limits::default());
    let mut conns: BTreeMap<ConnId, Conversation> = BTreeMap::new();
    let mut addr_conn: BTreeMap<(SocketAddr, SocketAddr), ConnId> = BTreeMap::new();
    let mut events = Vec::new();
    let take = |events: &mut Vec<Event>,
                conns: &mut BTreeMap<ConnId, Conversation>,
                addr_conn: &mut BTreeMap<(SocketAddr, SocketAddr), ConnId>| {
        for event in events.drain(..) {
            match event {
                Event::Open { conn, info } => {
                    let key = if info.client <= info.server {
                        (info.client, info.server)
                    } else {
                        (info.server, info.client)
                    };
                    addr_conn.insert(key, conn);
                    conns.entry(conn).or_default().client = Some(info.client);
                }
                Event::Data {
                    conn,
                    dir,
                    frame,
                    data,
                    ..
                } => {
                    conns
                        .entry(conn)
                        .or_default()
                        .steps
                        .push(Step::Data { dir, frame, data });
                }
                Event::Gap { conn, dir, len, .. } => {
                    conns
                        .entry(conn)
                        .or_default()
                        .steps
                        .push(Step::Gap(dir, len));
                }
                Event::Fin { conn, dir, .. } => {
                    conns.entry(conn).or_default().steps.push(Step::Fin(dir))
                }
                Event::Rst { conn, dir, .. } => {
                    conns.entry(conn).or_default().steps.push(Step::Rst(dir))
                }
            }
        }
    };
    while let Some(record) = reader.next_record() {
        let record = record.map_err(|e| e.to_string())?;
        let Ok(segment) = packet::parse_tcp(record.linktype, record.data) else {
            continue;
        };
        reassembler.push(record.frame, record.ts_ns, &segment, &mut events);
        take(&mut events, &mut conns, &mut addr_conn);
        if segment.syn {
            let key = if segment.src <= segment.dst {
                (segment.src, segment.dst)
            } else {
                (segment.dst, segment.src)
            };
            if let Some(conn) = addr_conn.get(&key).and_then(|id| conns.get_mut(id)) {
                let dir = if Some(segment.src) == conn.client {
                    Dir::ClientToServer
                } else {
                    Dir::ServerToClient
                };
                conn.steps.push(Step::Syn(dir));
            }
        }
    }
    reassembler.finish(&mut events);
    take(&mut events, &mut conns, &mut addr_conn);
    Ok(conns.into_values().collect())
}

/// Walks one direction's octets: the MPA frame (if it starts with a key),
/// then FPDUs, each with the frame its first octet came in.
fn cut_direction(conv: &Conversation, dir: Dir) -> (Option<Unit>, Vec<Unit>, bool) {
    let mut stream = Vec::new();
    let mut frames = Vec::new(); // (offset, frame)
    for step in &conv.steps {
        if let Step::Data {
            dir: d,
            frame,
            data,
        } = step
        {
            if *d == dir {
                frames.push((stream.len(), *frame));
                stream.extend_from_slice(data);
            }
        }
    }
    let frame_at = |offset: usize| {
        frames
            .iter()
            .rev()
            .find(|(o, _)| *o <= offset)
            .map_or(0, |(_, f)| *f)
    };
    let mut at = 0;
    let mut mpa = None;
    let mut reject = false;
    if let Ok(packet) = mpa_rr::Packet::new_checked(&stream[..]) {
        if mpa_rr::Repr::parse(&packet).is_ok() {
            let len = packet.frame_len();
            reject = packet.reject();
            mpa = Some(Unit {
                frame: frame_at(0),
                bytes: stream[..len].to_vec(),
            });
            at = len;
        }
    }
    let mut fpdus = Vec::new();
    if mpa.is_some() {
        while let Ok(packet) = mpa_fpdu::Packet::new_checked(&stream[at..]) {
            let len = packet.total_len();
            fpdus.push(Unit {
                frame: frame_at(at),
                bytes: stream[at..at + len].to_vec(),
            });
            at += len;
        }
    }
    (mpa, fpdus, reject)
}

fn opcode_name(ulpdu: &[u8]) -> String {
    let Ok(packet) = ddp::Packet::new_checked(ulpdu) else {
        return "short".into();
    };
    let opcode = rdmap::Control::from_octet(packet.rsvd_ulp()).opcode;
    match opcode.info() {
        Some(info) => info.name.to_ascii_lowercase(),
        None => format!("op{:x}", u8::from(opcode)),
    }
}

/// Inserts MPA markers into a marker-free FPDU that starts at stream
/// position `start` of Full Operation, recomputing the CRC over the marked
/// extent as RFC 5044 §4 defines it (markers inside the FPDU are covered).
fn mark_fpdu(fpdu: &[u8], start: u64, with_crc: bool) -> Vec<u8> {
    let insert = |content: &[u8]| {
        let mut out = Vec::with_capacity(mpa_marker::stream_len(start, content.len()));
        let mut position = start;
        let mut rest = content;
        while !rest.is_empty() {
            if mpa_marker::is_marker_at(position) {
                let marker = mpa_marker::Repr {
                    reserved: 0,
                    fpduptr: (position - start) as u16,
                };
                let mut octets = [0u8; mpa_marker::MARKER_LEN];
                marker.emit(&mut mpa_marker::Packet::new_unchecked(&mut octets[..]));
                out.extend_from_slice(&octets);
                position += mpa_marker::MARKER_LEN as u64;
            } else {
                out.push(rest[0]);
                rest = &rest[1..];
                position += 1;
            }
        }
        out
    };
    let mut content = fpdu.to_vec();
    let covered_len = content.len() - mpa_fpdu::CRC_LEN;
    let marked = insert(&content);
    let mut state = 0u32;
    let mut data_seen = 0;
    for piece in mpa_marker::Pieces::new(start, &marked) {
        match piece {
            mpa_marker::Piece::Data(d) => {
                let covered = d.len().min(covered_len.saturating_sub(data_seen));
                state = crc::append(state, &d[..covered]);
                data_seen += d.len();
            }
            mpa_marker::Piece::Marker { octets, .. } => state = crc::append(state, octets),
        }
    }
    let value = if with_crc {
        crc::to_wire(state)
    } else {
        [0; 4]
    };
    content[covered_len..].copy_from_slice(&value);
    insert(&content)
}

/// The conversation rebuilt with M set in both startup frames and markers
/// in every FPDU, one FPDU per step as siw sends them.
fn with_markers(conv: &Conversation) -> Option<Vec<Step>> {
    let mut units: [Vec<Unit>; 2] = Default::default();
    let mut crc_on = false;
    for dir in [Dir::ClientToServer, Dir::ServerToClient] {
        let (mpa, fpdus, reject) = cut_direction(conv, dir);
        let mut mpa = mpa?;
        if reject {
            return None;
        }
        mpa.bytes[16] |= 0x80;
        crc_on |= mpa.bytes[16] & 0x40 != 0;
        units[slot(dir)].push(mpa);
        units[slot(dir)].extend(fpdus);
    }
    // Replay in the order of the first frame of each unit.
    let mut order: Vec<(u64, Dir, usize)> = Vec::new();
    for dir in [Dir::ClientToServer, Dir::ServerToClient] {
        for (i, unit) in units[slot(dir)].iter().enumerate() {
            order.push((unit.frame, dir, i));
        }
    }
    order.sort();
    let mut steps = Vec::new();
    let mut position = [0u64; 2];
    for dir in [Dir::ClientToServer, Dir::ServerToClient] {
        if conv
            .steps
            .iter()
            .any(|s| matches!(s, Step::Syn(d) if *d == dir))
        {
            steps.push(Step::Syn(dir));
        }
    }
    for (frame, dir, i) in order {
        let unit = &units[slot(dir)][i];
        let data = if i == 0 {
            unit.bytes.clone()
        } else {
            let marked = mark_fpdu(&unit.bytes, position[slot(dir)], crc_on);
            position[slot(dir)] += marked.len() as u64;
            marked
        };
        steps.push(Step::Data { dir, frame, data });
    }
    for dir in [Dir::ClientToServer, Dir::ServerToClient] {
        if conv
            .steps
            .iter()
            .any(|s| matches!(s, Step::Fin(d) if *d == dir))
        {
            steps.push(Step::Fin(dir));
        }
    }
    Some(steps)
}

fn script_bytes(steps: &[Step], forced: bool) -> Vec<u8> {
    let ops = steps
        .iter()
        .map(|step| match step {
            Step::Syn(dir) => Op::Syn(*dir),
            Step::Data { dir, data, .. } => Op::Data(*dir, data),
            Step::Gap(dir, len) => Op::Gap(*dir, *len),
            Step::Fin(dir) => Op::Fin(*dir),
            Step::Rst(dir) => Op::Rst(*dir),
        })
        .collect();
    Script {
        forced,
        all: false,
        ops,
    }
    .encode()
}

/// A classic pcap of `steps` on 10.0.0.1:50000 <-> 10.0.0.2:7174, one
/// Ethernet frame per step.
fn synth_pcap(steps: &[Step]) -> io::Result<Vec<u8>> {
    let client: SocketAddrV4 = "10.0.0.1:50000".parse().expect("address");
    let server: SocketAddrV4 = "10.0.0.2:7174".parse().expect("address");
    let isn = [1000u32, 5000u32];
    let mut next = [isn[0].wrapping_add(1), isn[1].wrapping_add(1)];
    let mut out = pcap::Writer::new(Vec::new(), linktype::ETHERNET)?;
    for (i, step) in steps.iter().enumerate() {
        let ts = 1_700_000_000_000_000_000 + i as u64 * 1_000_000;
        let (dir, flags, payload): (Dir, TcpFlags, &[u8]) = match step {
            Step::Syn(Dir::ClientToServer) => (Dir::ClientToServer, TcpFlags::SYN, &[]),
            Step::Syn(Dir::ServerToClient) => {
                (Dir::ServerToClient, TcpFlags::SYN | TcpFlags::ACK, &[])
            }
            Step::Data { dir, data, .. } => (*dir, TcpFlags::ACK | TcpFlags::PSH, data),
            Step::Fin(dir) => (*dir, TcpFlags::FIN | TcpFlags::ACK, &[]),
            Step::Rst(dir) => (*dir, TcpFlags::RST, &[]),
            Step::Gap(..) => continue,
        };
        let d = slot(dir);
        let (src, dst) = if d == 0 {
            (client, server)
        } else {
            (server, client)
        };
        let seq = if flags.contains(TcpFlags::SYN) {
            isn[d]
        } else {
            next[d]
        };
        let frame = build_tcp_frame(src, dst, seq, next[1 - d], flags, payload);
        out.write_record(ts, &frame)?;
        next[d] = next[d].wrapping_add(payload.len() as u32);
        if flags.contains(TcpFlags::FIN) {
            next[d] = next[d].wrapping_add(1);
        }
    }
    out.into_inner()
}

/// The records of an Ethernet capture re-framed for another link type.
fn reframe(pcap_bytes: &[u8], linktype: u32) -> Result<Vec<u8>, String> {
    let mut reader = pcap::Reader::new(pcap_bytes).map_err(|e| e.to_string())?;
    let mut out = pcap::Writer::new(Vec::new(), linktype).map_err(|e| e.to_string())?;
    while let Some(record) = reader.next_record() {
        let record = record.map_err(|e| e.to_string())?;
        let eth = record.data;
        if eth.len() < 14 {
            continue;
        }
        let ethertype = [eth[12], eth[13]];
        let ip = &eth[14..];
        let frame = match linktype {
            linktype::RAW | linktype::IPV4 | linktype::RAW_DLT_12 => ip.to_vec(),
            linktype::NULL => [&2u32.to_le_bytes()[..], ip].concat(),
            linktype::LOOP => [&2u32.to_be_bytes()[..], ip].concat(),
            linktype::LINUX_SLL => {
                // packet type, ARPHRD_ETHER, address length, address (8), protocol.
                let mut h = vec![0, 0, 0, 1, 0, 6];
                h.extend_from_slice(&eth[6..12]);
                h.extend_from_slice(&[0, 0]);
                h.extend_from_slice(&ethertype);
                [&h[..], ip].concat()
            }
            linktype::LINUX_SLL2 => {
                // protocol, reserved, interface index, ARPHRD_ETHER, packet type,
                // address length, address (8).
                let mut h = ethertype.to_vec();
                h.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 0, 6]);
                h.extend_from_slice(&eth[6..12]);
                h.extend_from_slice(&[0, 0]);
                [&h[..], ip].concat()
            }
            _ => {
                // Ethernet with an 802.1Q tag (VLAN 77).
                let mut f = eth[..12].to_vec();
                f.extend_from_slice(&[0x81, 0x00, 0x00, 77]);
                f.extend_from_slice(&eth[12..]);
                f
            }
        };
        out.write_record(record.ts_ns, &frame)
            .map_err(|e| e.to_string())?;
    }
    out.into_inner().map_err(|e| e.to_string())
}

fn atomic_seeds(w: &mut Writer) -> io::Result<()> {
    let requests = [
        (
            "fetch-add",
            atomic::RequestRepr::fetch_add(1, 0x1234_5601, 0x7f8e_a5d5_b000, 1, u64::MAX),
        ),
        (
            "cmp-swap",
            atomic::RequestRepr::cmp_swap(2, 0x1234_5601, 0x40, (7, u64::MAX), (3, u64::MAX)),
        ),
        (
            "swap",
            atomic::RequestRepr::swap(3, 0x1234_5601, 0x48, 0xdead_beef),
        ),
    ];
    for (name, repr) in requests {
        let mut out = [0u8; atomic::REQUEST_HEADER_LEN];
        repr.emit(&mut atomic::RequestPacket::new_unchecked(&mut out[..]));
        w.put("atomic", &format!("synthetic-request-{name}"), &out)?;
    }
    let response = atomic::ResponseRepr {
        original_request_id: 1,
        original_remote_value: 41,
    };
    let mut out = [0u8; atomic::RESPONSE_HEADER_LEN];
    response.emit(&mut atomic::ResponsePacket::new_unchecked(&mut out[..]));
    w.put("atomic", "synthetic-response", &out)
}

fn run(golden: &Path, corpus: &Path) -> Result<(usize, usize), String> {
    let mut w = Writer {
        root: corpus.to_path_buf(),
        seen: BTreeMap::new(),
        written: 0,
        octets: 0,
    };
    let io = |e: io::Error| e.to_string();
    let mut paths: Vec<PathBuf> = fs::read_dir(golden)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        .collect();
    paths.sort();
    let mut marked_done = false;
    for path in &paths {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("capture")
            .to_string();
        let bytes = fs::read(path).map_err(io)?;
        w.put("pcap_decode", &stem, &bytes).map_err(io)?;
        if bytes.len() as u64 <= READER_PCAP_MAX {
            w.put("pcap_reader", &stem, &bytes).map_err(io)?;
        }
        let conversations = read_conversations(path)?;
        for (c, conv) in conversations.iter().enumerate() {
            let tag = if conversations.len() > 1 {
                format!("{stem}-conn{c}")
            } else {
                stem.clone()
            };
            w.put("decode_stream", &tag, &script_bytes(&conv.steps, false))
                .map_err(io)?;
            let mut per_opcode: BTreeMap<String, usize> = BTreeMap::new();
            let mut fpdu_only = Vec::new();
            for dir in [Dir::ClientToServer, Dir::ServerToClient] {
                let (mpa, fpdus, _) = cut_direction(conv, dir);
                let Some(mpa) = mpa else { continue };
                let d = dir_name(dir);
                w.put(
                    "mpa_frame",
                    &format!("{tag}-{d}-f{}", mpa.frame),
                    &mpa.bytes,
                )
                .map_err(io)?;
                if let Some(first) = fpdus.first() {
                    let both = [&mpa.bytes[..], &first.bytes[..]].concat();
                    w.put(
                        "mpa_frame",
                        &format!("{tag}-{d}-f{}-with-fpdu", mpa.frame),
                        &both,
                    )
                    .map_err(io)?;
                }
                for fpdu in &fpdus {
                    let packet = mpa_fpdu::Packet::new_unchecked(&fpdu.bytes[..]);
                    let ulpdu = packet.ulpdu();
                    let op = opcode_name(ulpdu);
                    let name = format!("{tag}-{d}-f{}-{op}", fpdu.frame);
                    if op == "terminate" {
                        if let Ok(segment) = ddp::Packet::new_checked(ulpdu) {
                            w.put("terminate", &name, segment.payload()).map_err(io)?;
                        }
                    }
                    let count = per_opcode.entry(op).or_default();
                    if *count < FPDUS_PER_OPCODE {
                        *count += 1;
                        w.put("fpdu", &name, &fpdu.bytes).map_err(io)?;
                        w.put("rdmap_segment", &name, ulpdu).map_err(io)?;
                    }
                    fpdu_only.push((fpdu.frame, dir, fpdu.bytes.clone()));
                }
            }
            // The same FPDUs without the startup frames, for `--port`.
            fpdu_only.sort_by_key(|(frame, _, _)| *frame);
            if !fpdu_only.is_empty() && conversations.len() == 1 && stem.starts_with("rping") {
                let steps: Vec<Step> = fpdu_only
                    .into_iter()
                    .map(|(frame, dir, data)| Step::Data { dir, frame, data })
                    .collect();
                w.put(
                    "decode_stream",
                    &format!("{tag}-fpdus-forced"),
                    &script_bytes(&steps, true),
                )
                .map_err(io)?;
            }
            if !marked_done && stem == "rping_v2_crc" {
                if let Some(steps) = with_markers(conv) {
                    marked_done = true;
                    w.put(
                        "decode_stream",
                        &format!("{tag}-markers"),
                        &script_bytes(&steps, false),
                    )
                    .map_err(io)?;
                    let pcap = synth_pcap(&steps).map_err(io)?;
                    w.put("pcap_decode", &format!("{tag}-markers"), &pcap)
                        .map_err(io)?;
                    // The marked client stream for the `markers` target.
                    let (_, fpdus, _) = cut_direction(conv, Dir::ClientToServer);
                    let plain: Vec<u8> = fpdus.iter().flat_map(|f| f.bytes.clone()).collect();
                    for start in [0u64, 4, 300, 508, 516] {
                        let Some(first) = fpdus.first() else { break };
                        let mut seed = start.to_be_bytes().to_vec();
                        seed.extend_from_slice(&(first.bytes.len() as u32).to_be_bytes());
                        seed.extend_from_slice(&mark_fpdu(&plain, start, false));
                        w.put("markers", &format!("{tag}-c2s-start{start}"), &seed)
                            .map_err(io)?;
                    }
                }
            }
        }
        if stem == "rping_v2_crc" {
            for (lt, name) in [
                (linktype::RAW, "raw"),
                (linktype::IPV4, "ipv4"),
                (linktype::NULL, "null"),
                (linktype::LOOP, "loop"),
                (linktype::LINUX_SLL, "sll"),
                (linktype::LINUX_SLL2, "sll2"),
                (linktype::ETHERNET, "vlan"),
            ] {
                let reframed = reframe(&bytes, lt)?;
                w.put("pcap_reader", &format!("{stem}-{name}"), &reframed)
                    .map_err(io)?;
            }
        }
    }
    atomic_seeds(&mut w).map_err(io)?;
    engine_seeds(&mut w).map_err(io)?;
    engine_message_seeds(&mut w).map_err(io)?;
    sctp::session_seeds(&mut w).map_err(io)?;
    sctp::datagram_seeds(&mut w).map_err(io)?;
    Ok((w.written, w.octets))
}

/// `corpus-tool --summarize FILE...`: what the decoder makes of
/// `decode_stream` inputs, to check that seeds reach FPDUs.
fn summarize(files: &[String]) -> ExitCode {
    for file in files {
        match fs::read(file) {
            Ok(bytes) => {
                let script = Script::parse(&bytes);
                let outcome =
                    dpwarp_fuzz::stream::drive(&script, dpwarp_fuzz::stream::Cutting::AsScripted);
                println!("{file}: {} ops, {:?}", script.ops.len(), outcome.summary);
            }
            Err(e) => {
                eprintln!("{file}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Seeds for `engine_rx`: what a well-behaved peer sends to side `b` of the
/// `engine_messages` inputs: DDP Segment messages of DDP over SCTP (RFC
/// 5043: `DDP-SSN | DDP segment`), each behind its length octet. Two Sends
/// in order and reversed, and an early Write before a Send (its STag names
/// nothing: the fuzzer finds the target's).
fn engine_message_seeds(w: &mut Writer) -> io::Result<()> {
    // An untagged DDP header, last segment, version 1, RDMAP version 1
    // Send (0x41 0x43), queue 0, MSN `msn`, MO 0 (RFC 5041 §4.3, RFC 5040
    // §4.3).
    let send = |msn: u32, payload: &[u8]| {
        let mut s = vec![0x41, 0x43, 0, 0, 0, 0];
        s.extend_from_slice(&0u32.to_be_bytes());
        s.extend_from_slice(&msn.to_be_bytes());
        s.extend_from_slice(&0u32.to_be_bytes());
        s.extend_from_slice(payload);
        s
    };
    // A tagged header, last, RDMA Write (0xC1 0x40), STag, TO.
    let write = |stag: u32, to: u64, payload: &[u8]| {
        let mut s = vec![0xC1, 0x40];
        s.extend_from_slice(&stag.to_be_bytes());
        s.extend_from_slice(&to.to_be_bytes());
        s.extend_from_slice(payload);
        s
    };
    let message = |ssn: u16, segment: Vec<u8>| {
        let mut m = vec![(segment.len() + 2) as u8];
        m.extend_from_slice(&ssn.to_be_bytes());
        m.extend_from_slice(&segment);
        m
    };
    let seeds = [
        (
            "synthetic-sends-in-order",
            [message(0, send(1, b"hello")), message(1, send(2, b"world"))].concat(),
        ),
        (
            "synthetic-sends-reversed",
            [message(1, send(2, b"world")), message(0, send(1, b"hello"))].concat(),
        ),
        (
            "synthetic-early-write",
            [
                message(1, write(0x100, 0, b"abcd")),
                message(0, send(1, b"x")),
            ]
            .concat(),
        ),
    ];
    for (name, bytes) in seeds {
        w.put("engine_messages", name, &bytes)?;
    }
    Ok(())
}

/// fuzz target's pair (set up the same way, so the STags match): a Write,
/// a Read Request, an atomic, Sends, Immediate Data, in each CRC/markers
/// combination. The first two octets are the target's flags and cut seed.
fn engine_seeds(w: &mut Writer) -> io::Result<()> {
    use rnic_engine::mem::Access;
    use rnic_engine::pair::{PairConfig, RnicPair};
    use rnic_engine::verbs::{RemoteAddr, SendOp, SendWr, Sge};
    for flags in 0u8..4 {
        let config = PairConfig {
            crc: flags & 1 != 0,
            markers: flags & 2 != 0,
            ird_ord: 2,
            ..PairConfig::default()
        };
        let mut pair = RnicPair::new(config).expect("pair");
        let mut stags = Vec::new();
        for access in [
            Access::REMOTE_WRITE,
            Access::REMOTE_READ,
            Access::REMOTE_ATOMIC,
            Access::LOCAL_WRITE,
        ] {
            stags.push(pair.b.region(256, access).expect("region").1.stag);
        }
        let (_, local) = pair.a.region(256, Access::LOCAL_WRITE).expect("region");
        let sge = |to: u64, len: u32| {
            [Sge {
                stag: local.stag,
                to,
                len,
            }]
        };
        let at = |i: usize, to: u64| RemoteAddr { stag: stags[i], to };
        let ops: [(SendOp, [Sge; 1]); 6] = [
            (SendOp::Write(at(0, 8)), sge(0, 100)),
            (SendOp::Read(at(1, 16)), sge(100, 40)),
            (
                SendOp::FetchAdd {
                    remote: at(2, 8),
                    add: 5,
                    mask: 0,
                },
                sge(200, 8),
            ),
            (SendOp::Send, sge(0, 30)),
            (SendOp::Immediate(*b"fuzzseed"), sge(0, 0)),
            (
                SendOp::CmpSwap {
                    remote: at(2, 16),
                    compare: 0x5A5A_5A5A_5A5A_5A5A,
                    compare_mask: !0,
                    swap: 1,
                    swap_mask: !0,
                },
                sge(208, 8),
            ),
        ];
        let mut stream = vec![flags, 0x2D];
        let mut out = vec![0u8; 4096];
        for (i, (op, sgl)) in ops.iter().enumerate() {
            let sgl: &[Sge] = if matches!(op, SendOp::Immediate(_)) {
                &[]
            } else {
                sgl
            };
            let wr = SendWr {
                wr_id: i as u64,
                op: op.clone(),
                sgl,
                signaled: true,
                solicited: false,
                fence: false,
            };
            pair.a.rnic.post_send(pair.a.qp, &wr).expect("post");
            let n = pair.a.rnic.poll_transmit(pair.a.qp, &mut out).expect("qp");
            stream.extend_from_slice(&out[..n]);
        }
        w.put("engine_rx", &format!("pair-ops-{flags}"), &stream)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "--summarize") {
        return summarize(&args[2..]);
    }
    let [_, golden, corpus] = &args[..] else {
        eprintln!("usage: corpus-tool GOLDEN_DIR CORPUS_DIR | corpus-tool --summarize FILE...");
        return ExitCode::from(2);
    };
    match run(Path::new(golden), Path::new(corpus)) {
        Ok((files, octets)) => {
            println!("corpus-tool: wrote {files} seed files, {octets} octets, under {corpus}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("corpus-tool: {e}");
            ExitCode::FAILURE
        }
    }
}
