//! Property tests: whatever order, duplication and overlap a stream's segments arrive in,
//! reassembly yields exactly the stream; and a missing segment is exactly one gap.

use std::net::{Ipv4Addr, SocketAddr};

use dpwarp_capture::packet::{TcpSegment, WindowScale};
use dpwarp_capture::reassembly::{ConnId, Dir, Event, Limits, Reassembler, Stats};
use proptest::prelude::*;
use proptest::sample::Index;

fn client() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 77, 0, 3).into(), 40000)
}

fn server() -> SocketAddr {
    SocketAddr::new(Ipv4Addr::new(10, 77, 0, 2).into(), 7174)
}

/// A client-to-server segment carrying `payload` at sequence number `seq`.
fn segment(seq: u32, syn: bool, fin: bool, payload: &[u8]) -> TcpSegment<'_> {
    TcpSegment {
        src: client(),
        dst: server(),
        seq,
        ack: 0,
        syn,
        ack_flag: !syn,
        fin,
        rst: false,
        psh: false,
        window: 1000,
        window_scale: WindowScale::Absent,
        payload,
        payload_wire_len: payload.len(),
        payload_truncated: false,
    }
}

/// Splits `0..len` into consecutive ranges whose lengths cycle through `cuts`.
fn split(len: usize, cuts: &[usize]) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for cut in cuts.iter().cycle() {
        if start >= len {
            break;
        }
        let end = (start + cut).min(len);
        ranges.push((start, end));
        start = end;
    }
    ranges
}

/// Fisher-Yates with splitmix64, so that a failing case replays from its seed.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        items.swap(i, (z % (i as u64 + 1)) as usize);
    }
}

/// What pushing `ranges` of `data` (in the given order, after a SYN) produced.
struct Outcome {
    stream: Vec<u8>,
    gaps: Vec<(u64, u64)>,
    fin_last: bool,
    stats: Stats,
}

fn reassemble(isn: u32, data: &[u8], ranges: &[(usize, usize)], with_fin: bool) -> Outcome {
    let mut reassembler = Reassembler::new(Limits::default());
    let mut events = Vec::new();
    reassembler.push(1, 0, &segment(isn, true, false, b""), &mut events);
    let base = isn.wrapping_add(1);
    for (i, &(start, end)) in ranges.iter().enumerate() {
        // A range ending at the stream's end carries the FIN, as a real sender's would.
        let fin = with_fin && end == data.len();
        let seq = base.wrapping_add(start as u32);
        reassembler.push(
            i as u64 + 2,
            0,
            &segment(seq, false, fin, &data[start..end]),
            &mut events,
        );
    }
    reassembler.finish(&mut events);
    collect(base, events, reassembler.stats())
}

/// Checks the event sequence is well-formed and gathers the stream and its gaps.
fn collect(base: u32, events: Vec<Event>, stats: Stats) -> Outcome {
    let mut stream = Vec::new();
    let mut gaps = Vec::new();
    let mut position = 0u64;
    assert!(matches!(
        events.first(),
        Some(Event::Open {
            conn: ConnId(0),
            ..
        })
    ));
    for event in &events[1..] {
        match event {
            Event::Data {
                conn,
                dir,
                seq,
                offset,
                data,
                ..
            } => {
                assert_eq!((*conn, *dir), (ConnId(0), Dir::ClientToServer));
                assert_eq!(*offset, position, "data is delivered in order");
                assert_eq!(
                    *seq,
                    base.wrapping_add(*offset as u32),
                    "seq matches offset"
                );
                assert!(!data.is_empty());
                stream.extend_from_slice(data);
                position += data.len() as u64;
            }
            Event::Gap { offset, len, .. } => {
                assert_eq!(*offset, position, "gaps are in order too");
                gaps.push((*offset, *len));
                position += len;
            }
            Event::Fin { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    let fin_last = matches!(events.last(), Some(Event::Fin { .. }));
    Outcome {
        stream,
        gaps,
        fin_last,
        stats,
    }
}

fn isn_strategy() -> impl Strategy<Value = u32> {
    // Half the cases start within a few KiB of the wrap, so the stream crosses it.
    prop_oneof![any::<u32>(), (u32::MAX - 8192)..=u32::MAX]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn shuffled_duplicated_overlapping_segments_reassemble_exactly(
        data in prop::collection::vec(any::<u8>(), 1..4000),
        cuts in prop::collection::vec(1usize..600, 1..12),
        extras in prop::collection::vec((any::<Index>(), 1usize..700), 0..24),
        isn in isn_strategy(),
        seed in any::<u64>(),
        with_fin in any::<bool>(),
    ) {
        let mut ranges = split(data.len(), &cuts);
        // Duplicates and overlapping segments, carrying the same bytes.
        for (start, len) in &extras {
            let start = start.index(data.len());
            ranges.push((start, (start + len).min(data.len())));
        }
        shuffle(&mut ranges, seed);
        let outcome = reassemble(isn, &data, &ranges, with_fin);
        prop_assert_eq!(&outcome.stream, &data);
        prop_assert!(outcome.gaps.is_empty());
        prop_assert_eq!(outcome.fin_last, with_fin);
        prop_assert_eq!(outcome.stats.conflicting_bytes, 0);
        let pushed: usize = ranges.iter().map(|(start, end)| end - start).sum();
        prop_assert_eq!(outcome.stats.duplicate_bytes as usize, pushed - data.len());
    }

    #[test]
    fn a_missing_segment_is_exactly_one_gap(
        data in prop::collection::vec(any::<u8>(), 2..4000),
        cuts in prop::collection::vec(1usize..600, 1..12),
        missing in any::<Index>(),
        isn in isn_strategy(),
        seed in any::<u64>(),
    ) {
        let mut ranges = split(data.len(), &cuts);
        if ranges.len() == 1 {
            // One cut covered everything; halve it so there is something left to find.
            let half = data.len() / 2;
            ranges = vec![(0, half), (half, data.len())];
        }
        let (gap_start, gap_end) = ranges.remove(missing.index(ranges.len()));
        shuffle(&mut ranges, seed);
        // With the FIN the end of the stream is known, so even a missing last segment is
        // a gap; when that last segment was the one with the FIN, add a bare FIN.
        let mut outcome = reassemble(isn, &data, &ranges, true);
        if gap_end == data.len() {
            let mut with_bare_fin = ranges.clone();
            with_bare_fin.push((data.len(), data.len()));
            outcome = reassemble(isn, &data, &with_bare_fin, true);
        }
        prop_assert_eq!(outcome.gaps, vec![(gap_start as u64, (gap_end - gap_start) as u64)]);
        let mut expected = data[..gap_start].to_vec();
        expected.extend_from_slice(&data[gap_end..]);
        prop_assert_eq!(outcome.stream, expected);
        prop_assert!(outcome.fin_last);
        prop_assert_eq!(outcome.stats.gap_bytes, (gap_end - gap_start) as u64);
    }
}
