//! The real Linux siw captures in tests/data/golden, read end to end.

mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use common::{golden_bytes, golden_dir, golden_pcaps, pipeline, read_all, ETHERNET};
use dpwarp_capture::packet::parse_tcp;
use dpwarp_capture::pcap;
use dpwarp_capture::reassembly::{ConnId, ConnInfo, Dir, Event, Limits};

const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 3));

/// Reassembled bytes per connection and direction, as `tshark -z follow,tcp,raw` counts
/// them: (client-to-server, server-to-client) for each connection in order.
const STREAM_BYTES: &[(&str, &[(usize, usize)])] = &[
    ("ib_read_bw.pcap", &[(868, 868), (284, 444)]),
    ("ib_send_lat.pcap", &[(708, 708), (464, 464)]),
    ("ib_send_lat_nocrc.pcap", &[(708, 708), (464, 464)]),
    ("ib_write_bw.pcap", &[(868, 868), (444, 24)]),
    ("ib_write_lat.pcap", &[(628, 628), (444, 444)]),
    ("ib_write_lat_mpa_v1.pcap", &[(624, 624), (440, 440)]),
    ("iwprobe_ops.pcap", &[(17044, 8460)]),
    ("mpa_reject_crc.pcap", &[(24, 24)]),
    ("rping_v1_crc.pcap", &[(60, 20)]),
    ("rping_v2.pcap", &[(516, 672)]),
    ("rping_v2_crc.pcap", &[(516, 672)]),
    ("rping_v2_p2p_write_rtr.pcap", &[(372, 456)]),
    ("term_bad_read.pcap", &[(128, 224)]),
    ("term_bad_write.pcap", &[(192, 108)]),
];

/// The packet count the scenario's .txt states: "... (NN packets captured)".
fn stated_packet_count(pcap_name: &str) -> usize {
    let txt = golden_dir().join(pcap_name.replace(".pcap", ".txt"));
    let text = std::fs::read_to_string(&txt).expect("scenario description exists");
    let end = text
        .find(" packets captured)")
        .expect("capture line in the description");
    let start = text[..end].rfind('(').expect("opening parenthesis") + 1;
    text[start..end].parse().expect("a packet count")
}

/// Streams of one capture: connection info and the bytes of each direction.
struct Streams {
    conns: BTreeMap<ConnId, ConnInfo>,
    bytes: BTreeMap<(ConnId, Dir), Vec<u8>>,
    events: Vec<Event>,
}

fn streams(name: &str) -> Streams {
    let (events, stats, error) = pipeline(&golden_bytes(name), Limits::default());
    assert!(error.is_none(), "{name}: {error:?}");
    assert_eq!(stats.gap_bytes, 0, "{name}: the capture is complete");
    assert_eq!(
        stats.conflicting_bytes, 0,
        "{name}: siw never retransmits different data"
    );
    let mut conns = BTreeMap::new();
    let mut bytes: BTreeMap<(ConnId, Dir), Vec<u8>> = BTreeMap::new();
    for event in &events {
        match event {
            Event::Open { conn, info } => assert!(conns.insert(*conn, *info).is_none()),
            Event::Data {
                conn,
                dir,
                offset,
                data,
                ..
            } => {
                let stream = bytes.entry((*conn, *dir)).or_default();
                assert_eq!(
                    *offset,
                    stream.len() as u64,
                    "{name}: offsets are contiguous"
                );
                stream.extend_from_slice(data);
            }
            Event::Gap { .. } => panic!("{name}: unexpected {event:?}"),
            Event::Fin { .. } | Event::Rst { .. } => {}
        }
    }
    Streams {
        conns,
        bytes,
        events,
    }
}

#[test]
fn all_golden_captures_are_listed() {
    let names: Vec<String> = golden_pcaps()
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    let listed: Vec<&str> = STREAM_BYTES.iter().map(|(name, _)| *name).collect();
    assert_eq!(names, listed);
}

#[test]
fn record_counts_match_the_descriptions() {
    for path in golden_pcaps() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let (records, error) = read_all(&std::fs::read(&path).unwrap());
        assert!(error.is_none(), "{name}: {error:?}");
        assert_eq!(records.len(), stated_packet_count(&name), "{name}");
        let frames: Vec<u64> = records.iter().map(|record| record.frame).collect();
        let expected: Vec<u64> = (1..=records.len() as u64).collect();
        assert_eq!(frames, expected, "{name}: frames are numbered from 1");
        assert!(
            records.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
            "{name}: time order"
        );
        // tcpdump's microsecond files: every time stamp is a whole microsecond.
        assert!(
            records.iter().all(|record| record.ts_ns % 1000 == 0),
            "{name}"
        );
    }
}

#[test]
fn every_golden_record_is_tcp_between_the_two_hosts() {
    for path in golden_pcaps() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut reader = pcap::open(&path).unwrap();
        while let Some(record) = reader.next_record() {
            let record = record.unwrap();
            assert_eq!(record.linktype, ETHERNET);
            assert_eq!(
                record.orig_len as usize,
                record.data.len(),
                "{name}: not cut"
            );
            let segment = parse_tcp(record.linktype, record.data)
                .unwrap_or_else(|skip| panic!("{name} frame {}: {skip}", record.frame));
            let hosts = [segment.src.ip(), segment.dst.ip()];
            assert!(
                hosts == [SERVER, CLIENT] || hosts == [CLIENT, SERVER],
                "{name}"
            );
            assert!(!segment.payload_truncated);
        }
    }
}

#[test]
fn reassembled_stream_lengths_match_tshark() {
    for (name, expected) in STREAM_BYTES {
        let streams = streams(name);
        assert_eq!(
            streams.conns.len(),
            expected.len(),
            "{name}: connection count"
        );
        for (i, (c2s, s2c)) in expected.iter().enumerate() {
            let conn = ConnId(i as u32);
            let info = streams.conns[&conn];
            assert_eq!(info.client.ip(), CLIENT, "{name}: the client sent the SYN");
            assert_eq!(info.server.ip(), SERVER, "{name}");
            let len = |dir| streams.bytes.get(&(conn, dir)).map_or(0, Vec::len);
            assert_eq!(
                len(Dir::ClientToServer),
                *c2s,
                "{name} {conn} client->server"
            );
            assert_eq!(
                len(Dir::ServerToClient),
                *s2c,
                "{name} {conn} server->client"
            );
        }
    }
}

#[test]
fn every_golden_connection_ends_in_fin_or_rst() {
    for (name, expected) in STREAM_BYTES {
        let streams = streams(name);
        for i in 0..expected.len() {
            let conn = ConnId(i as u32);
            let ended = streams.events.iter().any(|event| {
                matches!(event, Event::Fin { conn: c, .. } | Event::Rst { conn: c, .. } if *c == conn)
            });
            assert!(ended, "{name} {conn}");
        }
    }
}

#[test]
fn rping_v2_streams_begin_with_the_mpa_frames() {
    let streams = streams("rping_v2.pcap");
    assert_eq!(streams.conns.len(), 1);
    let c2s = &streams.bytes[&(ConnId(0), Dir::ClientToServer)];
    let s2c = &streams.bytes[&(ConnId(0), Dir::ServerToClient)];
    assert_eq!(&c2s[..16], b"MPA ID Req Frame");
    assert_eq!(&s2c[..16], b"MPA ID Rep Frame");
    let first = streams
        .events
        .iter()
        .find(|event| matches!(event, Event::Data { .. }));
    // Frame 4 follows the three-way handshake.
    assert!(
        matches!(
            first,
            Some(Event::Data {
                frame: 4,
                offset: 0,
                ..
            })
        ),
        "{first:?}"
    );
}

#[test]
fn perftest_captures_hold_two_connections() {
    for path in golden_pcaps() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("ib_") {
            let streams = streams(&name);
            assert_eq!(
                streams.conns.len(),
                2,
                "{name}: perftest opens two rdma_cm connections"
            );
            let ports: Vec<u16> = streams
                .conns
                .values()
                .map(|info| info.server.port())
                .collect();
            assert_eq!(ports, [18515, 18515], "{name}");
        }
    }
}

#[test]
fn spurious_retransmission_is_trimmed_not_duplicated() {
    // Frame 16 of rping_v2_crc retransmits 40 bytes the server already sent, identical.
    let (_, stats, _) = pipeline(&golden_bytes("rping_v2_crc.pcap"), Limits::default());
    assert_eq!(stats.duplicate_bytes, 40);
    assert_eq!(stats.conflicting_bytes, 0);
}
