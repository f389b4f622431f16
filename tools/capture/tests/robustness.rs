//! Hostile and broken input: arbitrary bytes, mutated and truncated captures, readers
//! that trickle or fail. Nothing may panic or hang, and every failure must say what broke.

mod common;

use std::io::{self, Read};

use common::{golden_bytes, golden_pcaps, pipeline, read_all, NgBuilder};
use dpwarp_capture::packet::{build_tcp_frame, TcpFlags};
use dpwarp_capture::pcap::{Error, Part, Reader};
use dpwarp_capture::reassembly::Limits;
use proptest::prelude::*;
use proptest::sample::Index;

/// Limits small enough that the limit paths run often on small inputs.
fn tight_limits() -> Limits {
    Limits {
        buffered_bytes_max: 512,
        buffered_segments_max: 4,
        buffered_bytes_total_max: 1024,
        connections_max: 8,
        history_bytes_max: 64,
    }
}

/// Runs the whole pipeline twice (default and tight limits) and checks what can be
/// checked about any input: records are bounded by the input size and errors say something.
fn survive(bytes: &[u8]) {
    let (records, error) = read_all(bytes);
    // Every record costs at least a 16-byte header (classic) or 16-byte block (pcapng).
    assert!(records.len() <= bytes.len() / 16);
    if let Some(error) = &error {
        assert!(!error.to_string().is_empty());
        assert!(error.offset() <= bytes.len() as u64);
    }
    for limits in [Limits::default(), tight_limits()] {
        let (events, stats, _) = pipeline(bytes, limits);
        assert!(stats.segments <= records.len() as u64);
        assert!(events.len() <= 8 * bytes.len() + 8);
    }
}

/// A small valid pcapng file, for mutation.
fn sample_pcapng() -> Vec<u8> {
    let a = "10.0.0.1:1000".parse().unwrap();
    let b = "10.0.0.2:2000".parse().unwrap();
    let mut ng = NgBuilder::new(false);
    ng.section()
        .interface(1, 0, Some(9))
        .enhanced(0, 5, &build_tcp_frame(a, b, 7, 0, TcpFlags::SYN, b""), 54)
        .enhanced(
            0,
            6,
            &build_tcp_frame(a, b, 8, 0, TcpFlags::ACK, b"hello"),
            59,
        )
        .simple(59, &build_tcp_frame(b, a, 9, 13, TcpFlags::ACK, b"world"))
        .block(0x0bad, b"skip me");
    ng.bytes
}

fn prefixes() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        vec![
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0,
        ],
        vec![
            0xa1, 0xb2, 0x3c, 0x4d, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 1,
        ],
        sample_pcapng()[..28].to_vec(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(
        prefix in any::<Index>(),
        tail in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let prefixes = prefixes();
        let mut bytes = prefixes[prefix.index(prefixes.len())].clone();
        bytes.extend_from_slice(&tail);
        survive(&bytes);
    }

    #[test]
    fn mutated_golden_captures_never_panic(
        file in any::<Index>(),
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 1..32),
        cut in prop::option::of(any::<Index>()),
        splice in prop::option::of((any::<Index>(), prop::collection::vec(any::<u8>(), 1..64))),
    ) {
        let paths = golden_pcaps();
        let mut bytes = std::fs::read(&paths[file.index(paths.len())]).unwrap();
        mutate(&mut bytes, &flips, cut, splice);
        survive(&bytes);
    }

    #[test]
    fn mutated_pcapng_never_panics(
        flips in prop::collection::vec((any::<Index>(), any::<u8>()), 1..16),
        cut in prop::option::of(any::<Index>()),
        splice in prop::option::of((any::<Index>(), prop::collection::vec(any::<u8>(), 1..64))),
    ) {
        let mut bytes = sample_pcapng();
        mutate(&mut bytes, &flips, cut, splice);
        survive(&bytes);
    }
}

fn mutate(
    bytes: &mut Vec<u8>,
    flips: &[(Index, u8)],
    cut: Option<Index>,
    splice: Option<(Index, Vec<u8>)>,
) {
    for (at, value) in flips {
        let at = at.index(bytes.len());
        bytes[at] = *value;
    }
    if let Some((at, insert)) = splice {
        let at = at.index(bytes.len());
        bytes.splice(at..at, insert);
    }
    if let Some(cut) = cut {
        bytes.truncate(cut.index(bytes.len() + 1));
    }
}

/// Where each record of a classic capture starts, plus the end of the file.
fn record_boundaries(bytes: &[u8]) -> Vec<usize> {
    let mut boundaries = vec![24];
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + len;
        boundaries.push(at);
    }
    assert_eq!(at, bytes.len());
    boundaries
}

#[test]
fn truncated_golden_file_names_the_problem() {
    let bytes = golden_bytes("rping_v2.pcap");
    let boundaries = record_boundaries(&bytes);
    let mut cuts: Vec<usize> = (0..200).collect();
    for &boundary in &boundaries[..boundaries.len() - 1] {
        cuts.extend([
            boundary + 1,
            boundary + 15,
            boundary + 16,
            boundary + 17,
            boundary + 40,
        ]);
    }
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        let (records, error) = read_all(&bytes[..cut]);
        let complete = boundaries
            .iter()
            .filter(|&&b| b <= cut)
            .count()
            .saturating_sub(1);
        assert_eq!(records.len(), complete, "cut at {cut}");
        let message = error.as_ref().map(ToString::to_string).unwrap_or_default();
        if cut < 24 {
            assert_eq!(message, "truncated file header at byte 0", "cut at {cut}");
        } else if boundaries.contains(&cut) {
            assert!(error.is_none(), "cut at record boundary {cut}: {message}");
        } else {
            let start = boundaries[complete];
            let frame = complete as u64 + 1;
            let (part, offset) = if cut < start + 16 {
                (Part::RecordHeader, start)
            } else {
                (Part::RecordData, start + 16)
            };
            let expected = format!("truncated {part} at byte {offset} (frame {frame})");
            assert_eq!(message, expected, "cut at {cut}");
            let truncated = Error::Truncated {
                part,
                offset: offset as u64,
                frame: Some(frame),
            };
            assert_eq!(message, truncated.to_string());
        }
    }
}

#[test]
fn truncated_pcapng_ends_cleanly_only_at_block_boundaries() {
    let bytes = sample_pcapng();
    let mut ng = NgBuilder::new(false);
    ng.bytes = bytes.clone();
    let boundaries = {
        let mut ends = vec![];
        let mut at = 0;
        while at < bytes.len() {
            at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            ends.push(at);
        }
        ends
    };
    for cut in 0..bytes.len() {
        let (_, error) = read_all(&bytes[..cut]);
        if boundaries.contains(&cut) {
            assert!(error.is_none(), "cut at block boundary {cut}: {error:?}");
        } else {
            let message = error.map(|e| e.to_string()).unwrap_or_default();
            assert!(
                message.starts_with("truncated "),
                "cut at {cut}: {message:?}"
            );
        }
    }
}

#[test]
fn a_huge_claimed_length_costs_nothing() {
    // A record header claiming the maximum captured length, followed by 3 bytes.
    let mut bytes = prefixes()[1].clone();
    bytes.extend_from_slice(&[0; 8]);
    bytes.extend_from_slice(&262_144u32.to_le_bytes());
    bytes.extend_from_slice(&262_144u32.to_le_bytes());
    bytes.extend_from_slice(b"abc");
    let (_, error) = read_all(&bytes);
    assert_eq!(
        error.unwrap().to_string(),
        "truncated record data at byte 40 (frame 1)"
    );
}

/// Hands out at most one byte per call and interrupts every other call.
struct Trickle<'a> {
    bytes: &'a [u8],
    interrupt: bool,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.interrupt = !self.interrupt;
        if self.interrupt {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = buf.len().min(self.bytes.len()).min(1);
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// Fails after `left` bytes.
struct Failing<'a> {
    bytes: &'a [u8],
    left: usize,
}

impl Read for Failing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            return Err(io::Error::other("disk on fire"));
        }
        let n = buf.len().min(self.left).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        self.left -= n;
        Ok(n)
    }
}

fn count_records<R: Read>(mut reader: Reader<R>) -> (usize, Option<Error>) {
    let mut count = 0;
    while let Some(record) = reader.next_record() {
        match record {
            Ok(_) => count += 1,
            Err(error) => return (count, Some(error)),
        }
    }
    (count, None)
}

#[test]
fn partial_and_interrupted_reads_change_nothing() {
    for bytes in [golden_bytes("iwprobe_ops.pcap"), sample_pcapng()] {
        let (records, _) = read_all(&bytes);
        let mut trickled = Reader::new(Trickle {
            bytes: &bytes,
            interrupt: false,
        })
        .unwrap();
        for expected in &records {
            let record = trickled.next_record().unwrap().unwrap();
            assert_eq!(
                (record.frame, record.ts_ns, record.data),
                (expected.frame, expected.ts_ns, &expected.data[..])
            );
        }
        assert!(trickled.next_record().is_none());
    }
}

#[test]
fn reader_errors_carry_the_offset() {
    let bytes = golden_bytes("rping_v2.pcap");
    let reader = Reader::new(Failing {
        bytes: &bytes,
        left: 100,
    })
    .unwrap();
    let (count, error) = count_records(reader);
    assert_eq!(count, 0);
    let error = error.unwrap();
    assert!(matches!(&error, Error::Io { offset: 100, .. }), "{error:?}");
    assert_eq!(error.to_string(), "read error at byte 100: disk on fire");
}
