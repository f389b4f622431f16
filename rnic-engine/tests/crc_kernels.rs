//! Every CRC32c kernel this CPU supports against a bitwise reference: all
//! lengths 0..=4096 at every source (and destination) alignment 0..=63,
//! the RFC 3720 vectors, appends cut at every point, large inputs, and an
//! arbitrary initial CRC throughout. Kernels the CPU lacks are skipped (they
//! would run the portable kernel, which is tested anyway).
//!
//! [`Crc32c`], fed in pieces, against the same reference: random feedings
//! (0..=8192 octets in 1..=20 pieces, empty ones included, `update` and
//! `copy_update` mixed, `finish` after every piece, a clone continued
//! differently), every split of a short input into three pieces around the
//! partial block and the start of folding, pieces of 1 to 16 octets after
//! a partial block of every length, and the MPA shapes (length, header,
//! payload, PAD; runs of 4 and 508 octets between markers).

use rnic_engine::mpa::crc::{self, Crc32c, Kernel};

/// CRC32c's polynomial 0x1EDC6F41 (RFC 3720), reflected.
const POLY: u32 = 0x82F6_3B78;

/// Buffers are padded so every alignment and a guard area fit.
const LEN_MAX: usize = 4096;
const ALIGN: usize = 64;

/// Initial CRCs the tests cycle through: the fresh CRC, all ones, others.
const CRCS: [u32; 4] = [0, 0xFFFF_FFFF, 0x1234_5678, 0xE306_9283];

/// The register after one octet, one bit at a time.
fn reference_step(mut register: u32, octet: u8) -> u32 {
    register ^= u32::from(octet);
    for _ in 0..8 {
        register = (register >> 1) ^ (POLY & 0u32.wrapping_sub(register & 1));
    }
    register
}

/// CRC32c continued from `crc`, one bit at a time.
fn reference(crc: u32, data: &[u8]) -> u32 {
    !data
        .iter()
        .fold(!crc, |register, &octet| reference_step(register, octet))
}

/// `prefixes[n] == reference(crc, &data[..n])` for every `n`.
fn reference_prefixes(crc: u32, data: &[u8]) -> Vec<u32> {
    let mut register = !crc;
    let mut prefixes = vec![crc];
    for &octet in data {
        register = reference_step(register, octet);
        prefixes.push(!register);
    }
    prefixes
}

/// SplitMix64: seeded, so failures replay.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn fill(&mut self, buffer: &mut [u8]) {
        for chunk in buffer.chunks_mut(8) {
            let octets = self.next().to_le_bytes();
            chunk.copy_from_slice(&octets[..chunk.len()]);
        }
    }
}

fn supported_kernels() -> Vec<Kernel> {
    Kernel::ALL
        .into_iter()
        .filter(|&k| crc::supported(k))
        .collect()
}

/// A buffer whose first octet sits at a 64-octet boundary, so `offset`
/// into it is alignment `offset`.
struct Aligned {
    storage: Vec<u8>,
    start: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let storage = vec![0u8; len + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        Aligned { storage, start }
    }

    fn at(&self, offset: usize, len: usize) -> &[u8] {
        &self.storage[self.start + offset..self.start + offset + len]
    }

    fn whole_mut(&mut self) -> &mut [u8] {
        let start = self.start;
        &mut self.storage[start..]
    }
}

#[test]
fn rfc3720_b4_vectors_every_kernel() {
    let ascending: Vec<u8> = (0..32).collect();
    let descending: Vec<u8> = (0..32).rev().collect();
    let vectors: [(&[u8], u32); 4] = [
        (&[0u8; 32], 0x8A91_36AA),
        (&[0xFFu8; 32], 0x62A8_AB43),
        (&ascending, 0x46DD_794E),
        (&descending, 0x113F_DB5C),
    ];
    for kernel in supported_kernels() {
        for (data, expected) in vectors {
            assert_eq!(crc::append_with(kernel, 0, data), expected, "{kernel:?}");
            let mut dst = [0u8; 32];
            assert_eq!(crc::copy_append_with(kernel, 0, &mut dst, data), expected);
            assert_eq!(dst, data);
        }
    }
    for (data, expected) in vectors {
        assert_eq!(crc::crc32c(data), expected);
        assert_eq!(reference(0, data), expected);
    }
}

#[test]
fn empty_input_keeps_the_crc() {
    assert_eq!(crc::crc32c(&[]), 0);
    for kernel in supported_kernels() {
        for crc in CRCS {
            assert_eq!(crc::append_with(kernel, crc, &[]), crc);
            assert_eq!(crc::copy_append_with(kernel, crc, &mut [], &[]), crc);
        }
    }
}

/// Every length 0..=4096 at every source alignment 0..=63, random contents,
/// initial CRCs cycling through [`CRCS`].
fn every_length_and_alignment(kernel: Kernel) {
    let mut rng = Rng(0x5EED_0001);
    let mut src = Aligned::new(LEN_MAX + ALIGN);
    for offset in 0..ALIGN {
        rng.fill(src.whole_mut());
        let data = src.at(offset, LEN_MAX);
        let prefixes = CRCS.map(|crc| reference_prefixes(crc, data));
        for len in 0..=LEN_MAX {
            let which = (offset + len) % CRCS.len();
            let got = crc::append_with(kernel, CRCS[which], &data[..len]);
            assert_eq!(
                got, prefixes[which][len],
                "{kernel:?} offset {offset} len {len}"
            );
        }
    }
}

/// Every length 0..=4096 at every source alignment 0..=63; the destination
/// alignment `(offset + len) % 64` meets every source alignment at every
/// destination alignment. `dst` must equal `src` afterwards and the guard
/// octets around it must be untouched.
fn every_length_and_alignment_copy(kernel: Kernel) {
    let mut rng = Rng(0x5EED_0002);
    let mut src = Aligned::new(LEN_MAX + ALIGN);
    let mut dst = Aligned::new(LEN_MAX + 2 * ALIGN);
    let guard: Vec<u8> = (0..dst.whole_mut().len())
        .map(|i| (i * 7 + 3) as u8)
        .collect();
    dst.whole_mut().copy_from_slice(&guard);
    for offset in 0..ALIGN {
        rng.fill(src.whole_mut());
        let data = src.at(offset, LEN_MAX);
        let prefixes = CRCS.map(|crc| reference_prefixes(crc, data));
        for len in 0..=LEN_MAX {
            let which = (offset + len) % CRCS.len();
            let to = (offset + len) % ALIGN;
            let out = &mut dst.whole_mut()[to..to + len];
            let got = crc::copy_append_with(kernel, CRCS[which], out, &data[..len]);
            let context = format!("{kernel:?} offset {offset} to {to} len {len}");
            assert_eq!(got, prefixes[which][len], "{context}");
            let whole = dst.whole_mut();
            assert!(whole[to..to + len] == data[..len], "{context}: dst != src");
            assert!(whole[..to] == guard[..to], "{context}: wrote before dst");
            assert!(
                whole[to + len..] == guard[to + len..],
                "{context}: wrote after dst"
            );
            whole[to..to + len].copy_from_slice(&guard[to..to + len]);
        }
    }
}

#[test]
fn vpclmulqdq_every_length_and_alignment() {
    if crc::supported(Kernel::Vpclmulqdq) {
        every_length_and_alignment(Kernel::Vpclmulqdq);
        every_length_and_alignment_copy(Kernel::Vpclmulqdq);
    }
}

#[test]
fn sse42_every_length_and_alignment() {
    if crc::supported(Kernel::Sse42) {
        every_length_and_alignment(Kernel::Sse42);
        every_length_and_alignment_copy(Kernel::Sse42);
    }
}

#[test]
fn portable_every_length_and_alignment() {
    every_length_and_alignment(Kernel::Portable);
    every_length_and_alignment_copy(Kernel::Portable);
}

#[test]
fn append_cut_at_every_point() {
    let mut rng = Rng(0x5EED_0003);
    let mut data = vec![0u8; 1500];
    rng.fill(&mut data);
    let kernels = supported_kernels();
    for crc in CRCS {
        let whole = reference(crc, &data);
        for cut in 0..=data.len() {
            // Each half by its own kernel, so kernels also continue each other.
            let first = kernels[cut % kernels.len()];
            let second = kernels[(cut / 7) % kernels.len()];
            let (head, tail) = data.split_at(cut);
            let got = crc::append_with(second, crc::append_with(first, crc, head), tail);
            assert_eq!(got, whole, "{first:?} then {second:?}, cut {cut}");
            let mut dst = vec![0u8; data.len()];
            let (dst_head, dst_tail) = dst.split_at_mut(cut);
            let middle = crc::copy_append_with(first, crc, dst_head, head);
            let got = crc::copy_append_with(second, middle, dst_tail, tail);
            assert_eq!(got, whole, "copy: {first:?} then {second:?}, cut {cut}");
            assert_eq!(dst, data);
        }
    }
}

#[test]
fn large_random_inputs() {
    let mut rng = Rng(0x5EED_0004);
    let mut src = Aligned::new((1 << 20) + ALIGN);
    rng.fill(src.whole_mut());
    let mut dst = vec![0u8; (1 << 20) + ALIGN];
    let lengths = [1 << 20, (1 << 20) - 1, 65_536 + 3, 300_001, 777_777, 12_345];
    for (i, len) in lengths.into_iter().enumerate() {
        let offset = rng.below(ALIGN);
        let to = rng.below(ALIGN);
        let data = src.at(offset, len);
        let crc = rng.next() as u32;
        let expected = reference(crc, data);
        for kernel in supported_kernels() {
            assert_eq!(
                crc::append_with(kernel, crc, data),
                expected,
                "{kernel:?} {i}"
            );
            let out = &mut dst[to..to + len];
            out.fill(0);
            let got = crc::copy_append_with(kernel, crc, out, data);
            assert_eq!(got, expected, "copy {kernel:?} {i}");
            assert!(out == data, "copy {kernel:?} {i}: dst != src");
        }
        assert_eq!(crc::append(crc, data), expected);
    }
}

#[test]
fn default_functions_use_the_best_kernel() {
    let mut rng = Rng(0x5EED_0005);
    let mut data = vec![0u8; 3000];
    rng.fill(&mut data);
    for len in [0, 1, 63, 64, 255, 256, 1460, 3000] {
        let expected = reference(0, &data[..len]);
        assert_eq!(crc::crc32c(&data[..len]), expected);
        assert_eq!(crc::append(0, &data[..len]), expected);
        let mut dst = vec![0u8; len];
        assert_eq!(crc::copy_append(0, &mut dst, &data[..len]), expected);
        assert_eq!(dst, data[..len]);
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn copy_append_rejects_unequal_lengths() {
    let mut dst = [0u8; 10];
    crc::copy_append(0, &mut dst, &[0u8; 11]);
}

#[test]
fn kernel_is_the_best_supported() {
    assert!(crc::supported(Kernel::Portable));
    let best = Kernel::ALL.into_iter().find(|&k| crc::supported(k));
    assert_eq!(Some(crc::kernel()), best);
    if crc::supported(Kernel::Vpclmulqdq) {
        assert_eq!(crc::kernel(), Kernel::Vpclmulqdq);
        // Each kernel needs a superset of the next one's features.
        assert!(crc::supported(Kernel::Sse42));
    }
}

/// The detection agrees with the standard library's, independently asked.
#[cfg(target_arch = "x86_64")]
#[test]
fn detection_matches_the_cpu() {
    let sse42 = is_x86_feature_detected!("sse4.2") && is_x86_feature_detected!("pclmulqdq");
    let zmm = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("bmi2")
        && is_x86_feature_detected!("vpclmulqdq");
    assert_eq!(crc::supported(Kernel::Sse42), sse42);
    assert_eq!(crc::supported(Kernel::Vpclmulqdq), sse42 && zmm);
    if sse42 && zmm {
        assert_eq!(crc::kernel(), Kernel::Vpclmulqdq);
    }
}

// --- Crc32c, fed in pieces ------------------------------------------------

/// A destination for `copy_update` inside guard octets: every octet outside
/// the slices handed out must keep its guard value, and every octet handed
/// out must end up equal to its source.
struct Guarded {
    storage: Vec<u8>,
    guard: Vec<u8>,
}

impl Guarded {
    /// Room for `len` octets between `ALIGN` guard octets on either side.
    fn new(len: usize) -> Guarded {
        let guard: Vec<u8> = (0..len + 2 * ALIGN).map(|i| (i * 13 + 5) as u8).collect();
        Guarded {
            storage: guard.clone(),
            guard,
        }
    }

    /// `len` octets at `at` (0 is the first octet after the front guard).
    fn at(&mut self, at: usize, len: usize) -> &mut [u8] {
        &mut self.storage[ALIGN + at..ALIGN + at + len]
    }

    /// Asserts that `data` was copied to `at..` and nothing else changed,
    /// then restores the guard values.
    fn check_and_reset(&mut self, at: usize, data: &[u8], context: &str) {
        let (start, end) = (ALIGN + at, ALIGN + at + data.len());
        assert!(self.storage[start..end] == *data, "{context}: dst != src");
        assert!(
            self.storage[..start] == self.guard[..start],
            "{context}: wrote before dst"
        );
        assert!(
            self.storage[end..] == self.guard[end..],
            "{context}: wrote after dst"
        );
        self.storage[start..end].copy_from_slice(&self.guard[start..end]);
    }
}

/// Feeds `piece` by `update`, or by `copy_update` into `dst` at `at` when
/// `copy`, checking what the copy wrote.
fn feed(crc: &mut Crc32c, piece: &[u8], copy: bool, dst: &mut Guarded, at: usize, context: &str) {
    if copy {
        crc.copy_update(dst.at(at, piece.len()), piece);
        dst.check_and_reset(at, piece, context);
    } else {
        crc.update(piece);
    }
}

/// Random piece lengths summing to `len`: 1..=20 pieces, some empty, some
/// short (staged), some long (folded).
fn random_pieces(rng: &mut Rng, len: usize) -> Vec<usize> {
    let count = 1 + rng.below(20);
    let mut pieces = Vec::with_capacity(count);
    let mut left = len;
    for _ in 1..count {
        let piece = match rng.below(5) {
            0 => 0,
            1 => 1 + rng.below(16),
            2 => rng.below(80),
            _ => rng.below(left + 1),
        };
        let piece = piece.min(left);
        pieces.push(piece);
        left -= piece;
    }
    pieces.push(left);
    pieces
}

/// Random feedings of random data: lengths 0..=8192 split by
/// [`random_pieces`], `update` and `copy_update` mixed, a random initial
/// CRC, a random source alignment; `finish` after every piece; at a random
/// piece the state is cloned and the clone fed the rest with the other
/// function, and both must agree with the reference.
fn random_feedings(kernel: Kernel, cases: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut src = Aligned::new(8192 + ALIGN);
    let mut dst = Guarded::new(8192);
    let mut clone_dst = Guarded::new(8192);
    for case in 0..cases {
        rng.fill(src.whole_mut());
        let len = match rng.below(3) {
            0 => rng.below(600),
            _ => rng.below(8193),
        };
        let data = src.at(rng.below(ALIGN), len);
        let crc = rng.next() as u32;
        let prefixes = reference_prefixes(crc, data);
        let pieces = random_pieces(&mut rng, len);
        let clone_at = rng.below(pieces.len());
        let mut state = Crc32c::with_kernel(kernel, crc);
        assert_eq!(state.kernel(), kernel);
        assert_eq!(state.finish(), crc, "{kernel:?} case {case}: fresh");
        let mut clone = None;
        let mut at = 0;
        for (i, &piece_len) in pieces.iter().enumerate() {
            if i == clone_at {
                clone = Some((state.clone(), at));
            }
            let piece = &data[at..at + piece_len];
            let copy = rng.below(2) == 0;
            let context = format!("{kernel:?} case {case} piece {i} of {pieces:?}, copy {copy}");
            feed(&mut state, piece, copy, &mut dst, at, &context);
            at += piece_len;
            assert_eq!(state.finish(), prefixes[at], "{context}");
            // `finish` does not end the CRC, and asking twice changes nothing.
            assert_eq!(state.finish(), prefixes[at], "{context}: again");
        }
        let (mut clone, mut at) = clone.expect("a piece to clone at");
        for (i, &piece_len) in pieces.iter().enumerate().skip(clone_at) {
            let piece = &data[at..at + piece_len];
            let copy = rng.below(2) == 0;
            let context = format!("{kernel:?} case {case} clone, piece {i} of {pieces:?}");
            feed(&mut clone, piece, copy, &mut clone_dst, at, &context);
            at += piece_len;
        }
        assert_eq!(
            clone.finish(),
            prefixes[len],
            "{kernel:?} case {case}: clone"
        );
        assert_eq!(
            state.finish(),
            prefixes[len],
            "{kernel:?} case {case}: original"
        );
    }
}

#[test]
fn crc32c_random_feedings() {
    for kernel in supported_kernels() {
        random_feedings(kernel, 1500, 0x5EED_0010);
    }
}

/// Every split of 1024 octets into a first piece of 0..=400 octets, a
/// second of 0..=130 and the rest: the staging block at every fill, each
/// fill completed by pieces of every length around a block, and folding
/// started at every point around its 256-octet threshold.
fn every_three_piece_split(kernel: Kernel) {
    let mut rng = Rng(0x5EED_0011);
    let mut data = vec![0u8; 1024];
    rng.fill(&mut data);
    let crc = rng.next() as u32;
    let prefixes = reference_prefixes(crc, &data);
    let mut dst = Guarded::new(data.len());
    for first in 0..=400 {
        let mut state = Crc32c::with_kernel(kernel, crc);
        state.update(&data[..first]);
        for second in 0..=130 {
            let mut state = state.clone();
            let (middle, rest) = data[first..].split_at(second);
            let copy = (first + second).is_multiple_of(2);
            let context = format!("{kernel:?} {first} + {second} + rest, copy {copy}");
            feed(&mut state, middle, copy, &mut dst, first, &context);
            assert_eq!(state.finish(), prefixes[first + second], "{context}");
            feed(&mut state, rest, !copy, &mut dst, first + second, &context);
            assert_eq!(state.finish(), prefixes[data.len()], "{context}");
        }
    }
}

#[test]
fn crc32c_every_three_piece_split() {
    for kernel in supported_kernels() {
        every_three_piece_split(kernel);
    }
}

/// Once folding, pieces of up to 16 octets in all (markers, PAD) wait for
/// the next piece: after a partial block of every length 0..=63, runs of
/// such pieces (which fill the block, cross its end, and fill the next),
/// then pieces that complete a block or not, each checked by `finish`.
fn short_pieces_after_every_partial_block(kernel: Kernel) {
    let mut rng = Rng(0x5EED_0015);
    let mut data = vec![0u8; 1024];
    rng.fill(&mut data);
    let patterns: [&[usize]; 6] = [
        &[1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1, 300],
        &[9, 16, 12, 15, 10, 13, 11, 14, 1, 16, 300],
        &[4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 200],
        &[8, 8, 8, 8, 8, 8, 8, 8, 8, 1, 63, 8, 64, 3],
        &[3, 0, 5, 60, 4, 508, 4, 2],
        &[7, 1, 120, 8, 8, 56, 1],
    ];
    let mut dst = Guarded::new(data.len());
    for partial in 0..64 {
        // A first piece long enough to start folding leaves `partial`
        // octets after its last whole block (under 512: no alignment).
        let first = 256 + partial;
        for (p, pattern) in patterns.iter().enumerate() {
            let crc = rng.next() as u32;
            let total = first + pattern.iter().sum::<usize>();
            let prefixes = reference_prefixes(crc, &data[..total]);
            let mut state = Crc32c::with_kernel(kernel, crc);
            state.update(&data[..first]);
            let mut at = first;
            for (i, &len) in pattern.iter().enumerate() {
                let context = format!("{kernel:?} partial {partial} pattern {p} piece {i}");
                let copy = (partial + i).is_multiple_of(3);
                feed(
                    &mut state,
                    &data[at..at + len],
                    copy,
                    &mut dst,
                    at,
                    &context,
                );
                at += len;
                assert_eq!(state.finish(), prefixes[at], "{context}");
            }
        }
    }
}

#[test]
fn crc32c_short_pieces_after_every_partial_block() {
    for kernel in supported_kernels() {
        short_pieces_after_every_partial_block(kernel);
    }
}

/// How the framer and deframer feed an FPDU without markers: the 2-octet
/// ULPDU_Length, a DDP/RDMAP header of 14 to 52 octets (`update`), the
/// payload (`copy_update`), 0..=3 octets of PAD (`update`).
#[test]
fn crc32c_mpa_fpdu_shape() {
    let mut rng = Rng(0x5EED_0012);
    let mut src = vec![0u8; 2 + 52 + 9000];
    rng.fill(&mut src);
    let mut dst = Guarded::new(9000);
    let payloads = (0..=600).chain([1446, 1460, 4082, 4096, 8176, 8960]);
    for kernel in supported_kernels() {
        for payload in payloads.clone() {
            for header in [14, 18, 28, 52] {
                let pad = (4 - (2 + header + payload) % 4) % 4;
                // PAD octets are zeros on the wire.
                let covered_len = 2 + header + payload + pad;
                let mut covered = src[..covered_len].to_vec();
                covered[covered_len - pad..].fill(0);
                let crc = rng.next() as u32;
                let expected = reference(crc, &covered);
                let (length, rest) = covered.split_at(2);
                let (head, rest) = rest.split_at(header);
                let (body, pad) = rest.split_at(payload);
                let mut state = Crc32c::with_kernel(kernel, crc);
                state.update(length);
                state.update(head);
                let context = format!("{kernel:?} header {header} payload {payload}");
                feed(&mut state, body, true, &mut dst, 0, &context);
                state.update(pad);
                assert_eq!(state.finish(), expected, "{context}");
            }
        }
    }
}

/// How the framer and deframer feed an FPDU with markers: a first data run
/// shorter than 508 octets (the FPDU starts anywhere between two markers),
/// then a 4-octet marker (`update`) and a data run of up to 508 octets
/// (`copy_update`, or `update` as the deframer's in-place path does), in
/// turn, until the FPDU ends.
#[test]
fn crc32c_mpa_marker_shape() {
    let mut rng = Rng(0x5EED_0013);
    let mut data = vec![0u8; 4096 + 32 + 1024];
    rng.fill(&mut data);
    let mut dst = Guarded::new(data.len());
    for kernel in supported_kernels() {
        for first in 0..=508 {
            let len = 4096 + 32 + first % 1024;
            let data = &data[..len];
            let crc = rng.next() as u32;
            let expected = reference(crc, data);
            let copy = !first.is_multiple_of(3);
            let mut state = Crc32c::with_kernel(kernel, crc);
            let mut at = 0;
            let mut run = first;
            let mut marker = false;
            while at < len {
                let piece = run.min(len - at);
                let context = format!("{kernel:?} first run {first}, at {at}, copy {copy}");
                let copy = copy && !marker;
                feed(
                    &mut state,
                    &data[at..at + piece],
                    copy,
                    &mut dst,
                    at,
                    &context,
                );
                at += piece;
                (run, marker) = if marker { (508, false) } else { (4, true) };
            }
            assert_eq!(state.finish(), expected, "{kernel:?} first run {first}");
        }
    }
}

/// `finish` in the middle, then more pieces; `finish` on nothing fed; a
/// continued CRC; empty pieces.
#[test]
fn crc32c_finish_midway_and_continue() {
    let mut rng = Rng(0x5EED_0014);
    let mut data = vec![0u8; 5000];
    rng.fill(&mut data);
    for kernel in supported_kernels() {
        for crc in CRCS {
            let mut state = Crc32c::with_kernel(kernel, crc);
            assert_eq!(state.finish(), crc);
            state.update(&[]);
            state.copy_update(&mut [], &[]);
            assert_eq!(state.finish(), crc);
            let mut at = 0;
            for piece in [1, 300, 0, 63, 1, 2000, 4, 508, 64, 64, 17, 0, 1978] {
                state.update(&data[at..at + piece]);
                at += piece;
                assert_eq!(state.finish(), reference(crc, &data[..at]));
            }
            assert_eq!(at, data.len());
            // new(append(0, a)) then update(b) is append(0, a ++ b).
            for cut in [0, 1, 255, 256, 1000, 4999] {
                let (a, b) = data.split_at(cut);
                let mut state = Crc32c::with_kernel(kernel, crc::append_with(kernel, crc, a));
                state.update(b);
                assert_eq!(
                    state.finish(),
                    reference(crc, &data),
                    "{kernel:?} cut {cut}"
                );
            }
        }
    }
    assert_eq!(Crc32c::new(0).finish(), 0);
    let mut state = Crc32c::new(0);
    state.update(&data);
    assert_eq!(state.finish(), crc::crc32c(&data));
}

/// A kernel this CPU lacks falls back to the portable one; `new` takes the
/// best.
#[test]
fn crc32c_kernel_choice() {
    assert_eq!(Crc32c::new(0).kernel(), crc::kernel());
    for kernel in Kernel::ALL {
        let expected = if crc::supported(kernel) {
            kernel
        } else {
            Kernel::Portable
        };
        assert_eq!(Crc32c::with_kernel(kernel, 0).kernel(), expected);
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn crc32c_copy_update_rejects_unequal_lengths() {
    let mut dst = [0u8; 100];
    Crc32c::new(0).copy_update(&mut dst, &[0u8; 101]);
}
