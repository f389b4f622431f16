//! The capture layer of `dpwarp-capture`: `pcap::Reader` (classic pcap and
//! pcapng) -> `packet::defrag::Defragmenter` (IPv4 fragments of TCP, RFC 791
//! §3.2) -> `packet::parse_tcp` -> `reassembly::Reassembler`, as
//! `dpwarp-pcap` chains them.
//!
//! Run twice per input: with the default limits and with tiny ones, so that
//! the out-of-order buffer limits, the connection limit and the history
//! trimming are all reached.
//!
//! Asserts (besides terminating without panic): frame numbers count 1, 2,
//! 3...; after `None` or an error the reader yields only `None`; captured
//! data never exceeds `CAPTURED_LEN_MAX`; a reassembled datagram is an
//! unfragmented IPv4 packet (Version 4) of at most 65,535 octets whose Total
//! Length is its length and whose header checksum verifies, and it is no
//! fragment to `parse_tcp`; the defragmenter's counters agree with what it
//! returned (every fragment held or completing a datagram, no more given up
//! or duplicate than held, a first given-up frame iff any); a parsed
//! segment's payload lies in the frame (or datagram) and `payload_truncated`
//! means `payload.len() < wire_len`; reassembly events are well-formed:
//! `Open` precedes a connection's other events, Data is never empty, a Gap is
//! never 0 octets, each direction's Data and Gap events are contiguous from
//! offset 0, `seq - offset` is the same for all Data of a direction, Fin and
//! Rst come at most once per direction, and `Stats::gap_bytes` is the sum of
//! the gaps.
#![no_main]

use std::collections::HashMap;

use dpwarp_capture::packet::defrag::{Defrag, DefragStats, Defragmenter};
use dpwarp_capture::packet::{self, Skip};
use dpwarp_capture::pcap::{self, linktype, CAPTURED_LEN_MAX};
use dpwarp_capture::reassembly::{ConnId, Dir, Event, Limits, Reassembler};
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct DirState {
    next: u64,
    /// `seq - offset` of the first Data event: every later one must agree.
    seq_base: Option<u32>,
    fin: bool,
    rst: bool,
}

#[derive(Default)]
struct Checker {
    open: HashMap<ConnId, [DirState; 2]>,
    gap_bytes: u64,
}

fn slot(dir: Dir) -> usize {
    match dir {
        Dir::ClientToServer => 0,
        Dir::ServerToClient => 1,
    }
}

impl Checker {
    fn dir(&mut self, conn: ConnId, dir: Dir) -> &mut DirState {
        &mut self
            .open
            .get_mut(&conn)
            .expect("an event for a connection that was never opened")[slot(dir)]
    }

    fn check(&mut self, events: &mut Vec<Event>) {
        for event in events.drain(..) {
            match event {
                Event::Open { conn, info } => {
                    assert_eq!(conn, info.id);
                    assert!(
                        self.open.insert(conn, Default::default()).is_none(),
                        "{conn:?} opened twice"
                    );
                }
                Event::Data {
                    conn,
                    dir,
                    offset,
                    seq,
                    data,
                    ..
                } => {
                    assert!(!data.is_empty(), "empty Data event");
                    let d = self.dir(conn, dir);
                    assert_eq!(offset, d.next, "Data out of order on {conn:?} {dir:?}");
                    let base = seq.wrapping_sub(offset as u32);
                    assert_eq!(
                        *d.seq_base.get_or_insert(base),
                        base,
                        "seq and offset disagree"
                    );
                    d.next += data.len() as u64;
                }
                Event::Gap {
                    conn,
                    dir,
                    offset,
                    len,
                    ..
                } => {
                    assert!(len > 0, "empty Gap event");
                    let d = self.dir(conn, dir);
                    assert_eq!(offset, d.next, "Gap out of order on {conn:?} {dir:?}");
                    d.next += len;
                    self.gap_bytes += len;
                }
                Event::Fin { conn, dir, .. } => {
                    let d = self.dir(conn, dir);
                    assert!(!d.fin, "second Fin on {conn:?} {dir:?}");
                    d.fin = true;
                }
                Event::Rst { conn, dir, .. } => {
                    let d = self.dir(conn, dir);
                    assert!(!d.rst, "second Rst on {conn:?} {dir:?}");
                    d.rst = true;
                }
            }
        }
    }
}

/// The IP protocol whose fragments are reassembled: TCP, all `parse_tcp` takes.
const TCP: u8 = 6;

/// Checks a datagram the defragmenter put together: RFC 791's header, whole.
fn check_datagram(datagram: &[u8]) {
    assert!(
        datagram.len() <= usize::from(u16::MAX),
        "longer than 65,535"
    );
    assert_eq!(datagram[0] >> 4, 4, "Version");
    let header_len = usize::from(datagram[0] & 0x0f) * 4;
    assert!(header_len >= 20 && header_len <= datagram.len());
    let total_len = usize::from(u16::from_be_bytes([datagram[2], datagram[3]]));
    assert_eq!(total_len, datagram.len(), "Total Length is the datagram's");
    let flags_offset = u16::from_be_bytes([datagram[6], datagram[7]]);
    assert_eq!(flags_offset & 0x3fff, 0, "More Fragments or an offset left");
    assert_eq!(datagram[9], TCP);
    // RFC 791 §3.1 (smoltcp's own check always passes when fuzzing): the
    // ones' complement sum of the header, checksum included, is all ones.
    let sum = datagram[..header_len]
        .chunks(2)
        .map(|word| u32::from(u16::from_be_bytes([word[0], word[1]])))
        .fold(0u32, |sum, word| {
            let sum = sum + word;
            (sum & 0xffff) + (sum >> 16)
        });
    assert_eq!(sum, 0xffff, "header checksum");
    assert!(
        !matches!(
            packet::parse_tcp(linktype::RAW, datagram),
            Err(Skip::Fragment { .. })
        ),
        "a reassembled datagram parsed as a fragment"
    );
}

/// What the defragmenter returned, to check its counters against.
#[derive(Default)]
struct DefragSeen {
    held: u64,
    complete: u64,
}

impl DefragSeen {
    /// Counts what `push` returned and checks the counters after it.
    fn note(&mut self, defrag: &Defrag, stats: DefragStats) {
        match defrag {
            Defrag::Whole => {}
            Defrag::Held => self.held += 1,
            Defrag::Complete(_) => self.complete += 1,
        }
        self.check(stats);
    }

    /// Checks the counters after `finish`.
    fn finish(&self, stats: DefragStats) {
        self.check(stats);
        if self.complete == 0 {
            // Nothing waits after `finish`: with no datagram put together, every
            // fragment was given up or a duplicate.
            assert_eq!(stats.fragments_dropped + stats.duplicates, self.held);
        }
    }

    fn check(&self, stats: DefragStats) {
        assert_eq!(stats.fragments, self.held + self.complete);
        assert_eq!(stats.datagrams, self.complete);
        // Each datagram took at least one fragment; those given up or
        // duplicate were held.
        assert!(stats.fragments_dropped + stats.duplicates <= self.held);
        assert_eq!(stats.first_dropped.is_some(), stats.fragments_dropped > 0);
    }
}

/// Checks a segment `parse_tcp` found in `data`.
fn check_segment(data: &[u8], segment: &packet::TcpSegment<'_>) {
    let frame_range = data.as_ptr_range();
    let payload_range = segment.payload.as_ptr_range();
    assert!(
        segment.payload.is_empty()
            || (frame_range.start <= payload_range.start && payload_range.end <= frame_range.end),
        "payload outside the frame"
    );
    assert_eq!(
        segment.payload_truncated,
        segment.payload.len() < segment.payload_wire_len
    );
    assert!(segment.payload.len() <= segment.payload_wire_len);
}

fn run(data: &[u8], limits: Limits) {
    let Ok(mut reader) = pcap::Reader::new(data) else {
        return;
    };
    let mut defragmenter = Defragmenter::new(&[TCP]);
    let mut seen = DefragSeen::default();
    let mut reassembler = Reassembler::new(limits);
    let mut checker = Checker::default();
    let mut events = Vec::new();
    let mut frames = 0u64;
    loop {
        let record = match reader.next_record() {
            None => break,
            Some(Err(_)) => {
                assert!(reader.next_record().is_none(), "records after an error");
                break;
            }
            Some(Ok(record)) => record,
        };
        frames += 1;
        assert_eq!(record.frame, frames, "frame numbers count up from 1");
        assert!(record.data.len() <= CAPTURED_LEN_MAX as usize);
        let defrag = defragmenter.push(record.frame, record.ts_ns, record.linktype, record.data);
        seen.note(&defrag, defragmenter.stats());
        let datagram;
        let (linktype, data) = match defrag {
            Defrag::Whole => (record.linktype, record.data),
            Defrag::Held => continue,
            Defrag::Complete(whole) => {
                check_datagram(&whole);
                datagram = whole;
                (linktype::RAW, &datagram[..])
            }
        };
        match packet::parse_tcp(linktype, data) {
            Ok(segment) => {
                check_segment(data, &segment);
                reassembler.push(record.frame, record.ts_ns, &segment, &mut events);
                checker.check(&mut events);
            }
            Err(skip) => {
                let _ = skip.to_string();
                if let Skip::UnsupportedLinktype(l) = skip {
                    assert_eq!(l, linktype);
                }
            }
        }
    }
    assert!(reader.next_record().is_none(), "records after the end");
    defragmenter.finish();
    seen.finish(defragmenter.stats());
    reassembler.finish(&mut events);
    checker.check(&mut events);
    let stats = reassembler.stats();
    assert_eq!(
        stats.gap_bytes, checker.gap_bytes,
        "gap_bytes is the sum of the Gap events"
    );
    assert!(stats.conflicting_bytes <= stats.duplicate_bytes);
    assert_eq!(
        stats.first_conflict_frame.is_some(),
        stats.conflicting_bytes > 0
    );
}

fuzz_target!(|data: &[u8]| {
    run(data, Limits::default());
    run(
        data,
        Limits {
            buffered_bytes_max: 3000,
            buffered_segments_max: 3,
            buffered_bytes_total_max: 4000,
            connections_max: 2,
            history_bytes_max: 100,
        },
    );
});
