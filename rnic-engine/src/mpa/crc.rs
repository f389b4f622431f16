//! CRC32c as MPA uses it (RFC 5044 §4.4, the iSCSI polynomial of RFC 3720).
//!
//! The MPA CRC covers ULPDU_Length, the ULPDU, the PAD and every marker
//! inside the FPDU. On the wire the standard CRC32c value travels least
//! significant octet first, as iSCSI and SCTP send theirs: checked on every
//! FPDU of the siw captures (`rping_v2_crc.pcap` frame 8 ends in
//! `01 3c ac df` for the value 0xdfac3c01), and Wireshark agrees.
//!
//! This module is the one place the workspace computes it. CRC32c here is
//! the Castagnoli polynomial 0x1EDC6F41 (0x82F63B78 reflected), initial
//! value all ones, final XOR all ones, octets fed least significant bit
//! first; `crc32c(&[]) == 0`.
//!
//! # Kernels
//!
//! Three kernels compute the same function. [`kernel`] is the best one this
//! CPU supports, detected once and cached; [`append`], [`crc32c`] and
//! [`copy_append`] use it, and [`append_with`]/[`copy_append_with`] name one
//! (tests and benchmarks).
//!
//! * [`Kernel::Vpclmulqdq`] (x86_64 with AVX-512F, AVX-512BW, BMI2,
//!   VPCLMULQDQ, PCLMULQDQ and SSE4.2) folds four 512-bit accumulators, 256
//!   octets a turn, and finishes with the `crc32` instruction. Inputs under 256 octets go
//!   straight to the `crc32` instruction, so a short FPDU pays no setup.
//! * [`Kernel::Sse42`] (x86_64 with SSE4.2 and PCLMULQDQ) runs the `crc32`
//!   instruction over three interleaved streams and joins them with one
//!   carry-less multiply per stream.
//! * [`Kernel::Portable`] is slicing-by-8 over tables built at compile
//!   time; every target has it.
//!
//! `copy_append` copies while it computes, in one pass over the data: each
//! block is loaded once, stored to the destination and folded.
//!
//! # An FPDU in one pass
//!
//! The framer's transmit path, `copy_fpdu` (crate-internal), writes a whole
//! FPDU but its CRC (the length field, the ULPDU's pieces, PAD and the
//! markers) into the output and returns its CRC, in one pass with the
//! VPCLMULQDQ kernel: the output is put together a block at a time in a
//! register, on the output's cache lines, stored once and folded, with the
//! four accumulators in registers from the first octet to the last (fact 9
//! in `simd`). Other kernels leave it to the framer to copy and then
//! compute the CRC.
//!
//! # Fed in pieces
//!
//! An FPDU's CRC covers octets that come in pieces: the length and the
//! DDP header, the payload, the PAD, and with markers runs of 4 (a marker)
//! and up to 508 octets (data). Each [`append`] pays for its setup and a
//! full reduction; [`Crc32c`] pays for them once. Pieces of up to 16
//! octets in all wait in registers for the next piece, so a length field,
//! a DDP header, a marker or the PAD costs no call. Until 256 octets have
//! come, and always with the SSE4.2 and portable kernels, the state is the
//! CRC register, which longer pieces go to. Then the VPCLMULQDQ kernel
//! starts folding, with the waiting octets in front of its first block: it
//! keeps its four accumulators and the partial block after the last whole
//! one in the `Crc32c` between pieces, and reduces them only in
//! [`Crc32c::finish`] (fact 8 in `simd`).
//!
//! The x86_64 kernels and all of this crate's `unsafe` live in the private
//! `simd` module next to this file (STYLE.md §1.1), whose documentation
//! derives every folding constant. This module keeps the safe API, the
//! portable kernel and the polynomial arithmetic the constants come from.
//!
//! # Polynomial arithmetic
//!
//! A `u32` in "reflected form" holds a polynomial over GF(2) of degree below
//! 32 with bit `31 - i` the coefficient of `x^i`; it is how the CRC register
//! holds its value. `POLY` is `P(x) - x^32` in that form, so multiplying
//! by `x` is a right shift that XORs `POLY` in when the `x^31` coefficient
//! (bit 0) falls off: `mul_mod_p` and `x_pow_mod_p` build on that.

use super::simd::{self, Octet};
use crate::wire::mpa_marker;

/// Octets from one marker to the next (RFC 5044 §4.3).
pub(super) const MARKER_INTERVAL: usize = mpa_marker::MARKER_INTERVAL as usize;

/// Octets between one marker and the next.
pub(super) const RUN_LEN: usize = mpa_marker::RUN_LEN;

/// `P(x) = x^32 + x^28 + x^27 + x^26 + x^25 + x^23 + x^22 + x^20 + x^19 +
/// x^18 + x^14 + x^13 + x^11 + x^10 + x^9 + x^8 + x^6 + 1` (0x1EDC6F41,
/// the iSCSI polynomial of RFC 3720) without its `x^32` term, in reflected
/// form.
pub(super) const POLY: u32 = 0x82F6_3B78;

/// Slicing-by-8 tables: `TABLES[0][b]` is the register after feeding octet
/// `b` to a zero register, `TABLES[s][b]` the same followed by `s` zero
/// octets.
static TABLES: [[u32; 256]; 8] = slicing_tables();

const _: () = assert!(x_pow_mod_p(32) == POLY);
const _: () = assert!(x_pow_mod_p(0) == 1 << 31);

/// A CRC32c implementation, see the [module documentation](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512 + VPCLMULQDQ folding (x86_64).
    Vpclmulqdq,
    /// The SSE4.2 `crc32` instruction over interleaved streams, joined with
    /// PCLMULQDQ (x86_64).
    Sse42,
    /// Slicing-by-8, any target.
    Portable,
}

impl Kernel {
    /// Every kernel, best first.
    pub const ALL: [Kernel; 3] = [Kernel::Vpclmulqdq, Kernel::Sse42, Kernel::Portable];
}

/// CRC32c (Castagnoli; initial value and final XOR all ones) of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    append(0, data)
}

/// Continues a CRC32c: `append(crc32c(a), b) == crc32c(a ++ b)`.
pub fn append(crc: u32, data: &[u8]) -> u32 {
    append_with(kernel(), crc, data)
}

/// [`append`] for a few octets (a length field, a DDP header, PAD), by the
/// portable slicing-by-8 code inlined into the caller. Up to a few dozen
/// octets this is cheaper than dispatching to a SIMD kernel, whose call
/// costs more than the work.
#[inline]
pub fn append_short(crc: u32, data: &[u8]) -> u32 {
    !portable_update(!crc, data)
}

/// Copies `src` into `dst` and returns `append(crc, src)`, in one pass over
/// the data.
///
/// # Panics
///
/// If `dst` and `src` differ in length (a programmer error).
pub fn copy_append(crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    copy_append_with(kernel(), crc, dst, src)
}

/// The best kernel this CPU supports. The CPU is asked once per process;
/// later calls read a cached value.
#[inline]
pub fn kernel() -> Kernel {
    simd::best()
}

/// Whether this CPU runs `kernel`. [`Kernel::Portable`] runs everywhere.
#[inline]
pub fn supported(kernel: Kernel) -> bool {
    simd::supports(kernel)
}

/// [`append`] with a chosen kernel, [`Kernel::Portable`] when this CPU does
/// not support `kernel`.
pub fn append_with(kernel: Kernel, crc: u32, data: &[u8]) -> u32 {
    !kernel_update(kernel, !crc, data)
}

/// [`copy_append`] with a chosen kernel, [`Kernel::Portable`] when this CPU
/// does not support `kernel`.
///
/// # Panics
///
/// If `dst` and `src` differ in length (a programmer error).
pub fn copy_append_with(kernel: Kernel, crc: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy_append: dst and src lengths differ"
    );
    !kernel_copy_update(kernel, !crc, dst, src)
}

/// One FPDU's octets before its CRC (RFC 5044 §4), as [`copy_fpdu`] writes
/// them: ULPDU_Length (big-endian), the ULPDU's pieces and PAD, with a
/// marker (RFC 5044 §4.3) put in wherever one falls before an octet of
/// them or after the last. The pieces' octets are plain (`u8`) or
/// registered memory ([`simd::Shared`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Fpdu<'a, T: Octet = u8> {
    /// ULPDU_Length.
    pub(super) ulpdu_length: u16,
    /// The ULPDU's first `header_len` octets (at most 20), four to a word,
    /// least significant first: a header made in registers (`ddp::Repr::
    /// words`), put in place without a load of octets just stored.
    pub(super) header: [u32; 5],
    /// Octets of `header`.
    pub(super) header_len: usize,
    /// The rest of the ULPDU, in pieces.
    pub(super) pieces: &'a [&'a [T]],
    /// PAD octets, zero.
    pub(super) pad: usize,
    /// Where in the output the first marker goes, then one every
    /// [`MARKER_INTERVAL`] octets; `usize::MAX` for no markers.
    pub(super) marker_at: usize,
}

impl<T: Octet> Fpdu<'_, T> {
    /// The marker at output offset `at`, its octets least significant
    /// first: a zero reserved half, then FPDUPTR, the octets back to the
    /// FPDU's start, big-endian (`crate::wire::mpa_marker`). An FPDU never
    /// spans 65536 octets of stream: MULPDU keeps it within an EMSS.
    #[inline(always)]
    pub(super) fn marker(at: usize) -> u32 {
        u32::from((at as u16).swap_bytes()) << 16
    }
}

/// Writes `fpdu` into `out`, which it must fill exactly, and returns
/// `append(crc, out)`, or `None` when this CPU lacks the VPCLMULQDQ kernel
/// (then nothing is written, and the caller copies and then computes the
/// CRC). It is one pass: each block of `out` is put together in a register
/// from the length field, the pieces, PAD and markers, however they cut
/// it, stored once and folded (fact 9 in `simd`).
///
/// # Panics
///
/// If `fpdu` does not fill `out` exactly (a programmer error).
#[inline]
pub(super) fn copy_fpdu<T: Octet>(crc: u32, out: &mut [u8], fpdu: &Fpdu<'_, T>) -> Option<u32> {
    if kernel() != Kernel::Vpclmulqdq {
        return None;
    }
    Some(!simd::copy_fpdu(!crc, out, fpdu))
}

/// A CRC32c in progress over octets fed in pieces, see ["Fed in
/// pieces"](self#fed-in-pieces). The best kernel is chosen at construction;
/// pieces are folded without reducing between them.
///
/// ```
/// use rnic_engine::mpa::crc::{self, Crc32c};
///
/// let mut crc = Crc32c::new(crc::crc32c(b"ULPDU_"));
/// crc.update(b"Length");
/// let mut to = [0u8; 5];
/// crc.copy_update(&mut to, b", PAD");
/// assert_eq!(crc.finish(), crc::crc32c(b"ULPDU_Length, PAD"));
/// ```
///
/// It holds no heap memory and costs no allocation: at most
/// [`CRC32C_OCTETS_MAX`] octets, aligned to a cache line, so it can live on
/// the stack of a poll loop. Creating one writes a few words; the
/// VPCLMULQDQ kernel's 320 octets of state are written only if it folds.
#[derive(Clone)]
pub struct Crc32c {
    /// A kernel this CPU runs.
    kernel: Kernel,
    /// The register (no inversions) after the `fed` octets, until the
    /// VPCLMULQDQ kernel starts folding.
    register: u32,
    /// How many octets went into `register`, saturating.
    fed: usize,
    /// The VPCLMULQDQ kernel's state once it folds, which holds everything
    /// fed from then on.
    folding: simd::Folding,
}

impl Crc32c {
    /// Continues from a finished CRC32c value with the best kernel:
    /// `Crc32c::new(0)` starts a fresh CRC, and after `new(append(0, a))`
    /// and `update(b)`, `finish()` is `append(0, a ++ b)`.
    #[inline]
    pub fn new(crc: u32) -> Crc32c {
        Crc32c::with_kernel(kernel(), crc)
    }

    /// [`Crc32c::new`] with a chosen kernel (tests and benchmarks),
    /// [`Kernel::Portable`] when this CPU does not support `kernel`.
    #[inline]
    pub fn with_kernel(kernel: Kernel, crc: u32) -> Crc32c {
        Crc32c {
            kernel: if supported(kernel) {
                kernel
            } else {
                Kernel::Portable
            },
            register: !crc,
            fed: 0,
            folding: simd::Folding::new(),
        }
    }

    /// The kernel in use.
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Feeds `data`.
    //
    // Inlined whole, so that a piece costs one call, into the kernel, or
    // none when it is short.
    #[inline(always)]
    pub fn update(&mut self, data: &[u8]) {
        if self.folding.push(data) {
            return;
        }
        if self.folding.started() {
            simd::fold_update::<false>(&mut self.folding, &mut [], data);
        } else {
            self.start::<false>(&mut [], data);
        }
    }

    /// Copies `src` into `dst` and feeds `src`, in one pass over the data.
    ///
    /// # Panics
    ///
    /// If `dst` and `src` differ in length (a programmer error).
    #[inline(always)]
    pub fn copy_update(&mut self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(
            dst.len(),
            src.len(),
            "copy_update: dst and src lengths differ"
        );
        if self.folding.push(src) {
            dst.copy_from_slice(src);
        } else if self.folding.started() {
            simd::fold_update::<true>(&mut self.folding, dst, src);
        } else {
            self.start::<true>(dst, src);
        }
    }

    /// The CRC32c value: [`append`] of the initial value and everything
    /// fed so far. It does not end the CRC: more may be fed, and `finish`
    /// called again.
    #[inline]
    pub fn finish(&self) -> u32 {
        let register = if self.folding.started() {
            simd::fold_finish(&self.folding)
        } else {
            let (pending, len) = self.folding.pending();
            portable_update(self.register, &pending[..len])
        };
        !register
    }

    /// Feeds `src` (copied into `dst` when copying), which does not fit
    /// with the pending octets, before folding: the kernel starts folding
    /// with them, or they go to the register (by the portable code inlined
    /// here, as [`append_short`] does) and `src` to the kernel. Inlined, so
    /// that a short FPDU's pieces cost one call each, into the kernel, as
    /// [`append`] does.
    #[inline(always)]
    fn start<const COPY: bool>(&mut self, dst: &mut [u8], src: &[u8]) {
        let (_, pending) = self.folding.pending();
        let fed = self.fed.saturating_add(pending).saturating_add(src.len());
        if simd::folds(self.kernel, fed, src.len()) {
            self.start_folding::<COPY>(dst, src);
        } else {
            let (pending, len) = self.folding.take_pending();
            let register = portable_update(self.register, &pending[..len]);
            self.register = if COPY {
                kernel_copy_update(self.kernel, register, dst, src)
            } else {
                kernel_update(self.kernel, register, src)
            };
            self.fed = fed;
        }
    }

    /// [`simd::fold_start`], once per CRC at most: out of line.
    #[inline(never)]
    fn start_folding<const COPY: bool>(&mut self, dst: &mut [u8], src: &[u8]) {
        simd::fold_start::<COPY>(&mut self.folding, self.register, dst, src);
    }
}

/// The size of a [`Crc32c`] will not grow past this (checked at compile
/// time).
pub const CRC32C_OCTETS_MAX: usize = 512;

const _: () = assert!(core::mem::size_of::<Crc32c>() <= CRC32C_OCTETS_MAX);

impl core::fmt::Debug for Crc32c {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Crc32c")
            .field("kernel", &self.kernel)
            .field("folding", &self.folding.started())
            .field("value", &self.finish())
            .finish()
    }
}

/// The four octets that carry `crc` on the wire (least significant first).
pub const fn to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC32c value carried by four wire octets.
pub const fn from_wire(octets: [u8; 4]) -> u32 {
    u32::from_le_bytes(octets)
}

/// The register after `data` with `kernel`, or the portable kernel when
/// this CPU lacks it.
#[inline]
fn kernel_update(kernel: Kernel, register: u32, data: &[u8]) -> u32 {
    match simd::update(kernel, register, data) {
        Some(register) => register,
        None => portable_update(register, data),
    }
}

/// [`kernel_update`] that also copies `src` into `dst` (same length).
#[inline]
fn kernel_copy_update(kernel: Kernel, register: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    match simd::copy_update(kernel, register, dst, src) {
        Some(register) => register,
        None => portable_copy_update(register, dst, src),
    }
}

/// `a(x) * x mod P(x)`, reflected form.
const fn times_x(a: u32) -> u32 {
    if a & 1 == 0 {
        a >> 1
    } else {
        (a >> 1) ^ POLY
    }
}

/// `a(x) * b(x) mod P(x)`, all in reflected form.
pub(super) const fn mul_mod_p(a: u32, b: u32) -> u32 {
    let mut product = 0;
    // `b(x) * x^i mod P(x)` for the `i` of the current turn.
    let mut b_times_x_i = b;
    let mut i = 0;
    while i < 32 {
        // Bit `31 - i` of `a` is its coefficient of `x^i`.
        if a & (1 << (31 - i)) != 0 {
            product ^= b_times_x_i;
        }
        b_times_x_i = times_x(b_times_x_i);
        i += 1;
    }
    product
}

/// `a(x) * x^-1 mod P(x)`, reflected form: `x` has an inverse because
/// `P(0) = 1`, namely `(P(x) - 1) / x`. Undoes [`times_x`]: when `a` has an
/// `x^0` term (bit 31), `P(x)` is added first, which clears it and brings
/// in `x^32`, so the division by `x` (a left shift) is exact.
const fn times_x_inverse(a: u32) -> u32 {
    if a & (1 << 31) == 0 {
        a << 1
    } else {
        ((a ^ POLY) << 1) | 1
    }
}

/// `x^n mod P(x)`, reflected form, by square and multiply.
pub(super) const fn x_pow_mod_p(n: u64) -> u32 {
    pow_mod_p(1 << 30, n) // x^1
}

/// `x^-n mod P(x)`, reflected form: the power of `x` that undoes `x^n`.
pub(super) const fn x_inverse_pow_mod_p(n: u64) -> u32 {
    pow_mod_p(times_x_inverse(1 << 31), n) // x^-1
}

/// `base(x)^n mod P(x)`, reflected form, by square and multiply.
const fn pow_mod_p(base: u32, n: u64) -> u32 {
    let mut result = 1 << 31; // x^0
    let mut square = base; // base^(2^k) in turn k
    let mut n = n;
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod_p(result, square);
        }
        square = mul_mod_p(square, square);
        n >>= 1;
    }
    result
}

const fn slicing_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0; 256]; 8];
    let mut octet = 0;
    while octet < 256 {
        // The octet's 8 bits sit at x^24..x^31 of the register; 8 shifts
        // move them past x^32 and reduce.
        let mut register = octet as u32;
        let mut bit = 0;
        while bit < 8 {
            register = times_x(register);
            bit += 1;
        }
        tables[0][octet] = register;
        octet += 1;
    }
    let mut slice = 1;
    while slice < 8 {
        let mut octet = 0;
        while octet < 256 {
            let previous = tables[slice - 1][octet];
            tables[slice][octet] = (previous >> 8) ^ tables[0][(previous & 0xFF) as usize];
            octet += 1;
        }
        slice += 1;
    }
    tables
}

/// Feeds eight octets to the register (slicing-by-8).
#[inline]
fn portable_step8(register: u32, octets: [u8; 8]) -> u32 {
    let v = u64::from_le_bytes(octets) ^ u64::from(register);
    let t = &TABLES;
    let octet = |i: u32| ((v >> (8 * i)) & 0xFF) as usize;
    t[7][octet(0)]
        ^ t[6][octet(1)]
        ^ t[5][octet(2)]
        ^ t[4][octet(3)]
        ^ t[3][octet(4)]
        ^ t[2][octet(5)]
        ^ t[1][octet(6)]
        ^ t[0][octet(7)]
}

/// Feeds one octet to the register.
#[inline]
fn portable_step1(register: u32, octet: u8) -> u32 {
    (register >> 8) ^ TABLES[0][usize::from(register as u8 ^ octet)]
}

/// The register after `data`, without the initial and final inversions.
#[inline]
fn portable_update(mut register: u32, data: &[u8]) -> u32 {
    let words = data.chunks_exact(8);
    let tail = words.remainder();
    for word in words {
        register = portable_step8(register, word.try_into().expect("8 octets"));
    }
    for &octet in tail {
        register = portable_step1(register, octet);
    }
    register
}

/// [`portable_update`] that also copies `src` into `dst` (same length).
#[inline]
fn portable_copy_update(mut register: u32, dst: &mut [u8], src: &[u8]) -> u32 {
    let words = src.chunks_exact(8);
    let tail = words.remainder();
    let mut dst_words = dst.chunks_exact_mut(8);
    for (word, dst_word) in words.zip(&mut dst_words) {
        dst_word.copy_from_slice(word);
        register = portable_step8(register, word.try_into().expect("8 octets"));
    }
    for (&octet, dst_octet) in tail.iter().zip(dst_words.into_remainder()) {
        *dst_octet = octet;
        register = portable_step1(register, octet);
    }
    register
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register after `data`, one bit at a time.
    fn bitwise_update(mut register: u32, data: &[u8]) -> u32 {
        for &octet in data {
            register ^= u32::from(octet);
            for _ in 0..8 {
                register = times_x(register);
            }
        }
        register
    }

    #[test]
    fn rfc3720_b4_vectors() {
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
        let descending: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&descending), 0x113F_DB5C);
    }

    #[test]
    fn append_continues() {
        let data: Vec<u8> = (0..=255).collect();
        for cut in 0..data.len() {
            assert_eq!(append(crc32c(&data[..cut]), &data[cut..]), crc32c(&data));
        }
    }

    #[test]
    fn siw_wire_order() {
        // rping_v2_crc.pcap frame 8: a Send FPDU, CRC in its last 4 octets.
        let fpdu = [
            0x00, 0x22, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x55, 0x73, 0x01, 0x29, 0x63, 0x70,
            0x4c, 0x1b, 0x05, 0x00, 0x00, 0x00, 0x00, 0x40, 0x01, 0x3c, 0xac, 0xdf,
        ];
        let (covered, field) = fpdu.split_at(fpdu.len() - 4);
        assert_eq!(crc32c(covered), 0xdfac_3c01);
        assert_eq!(
            to_wire(crc32c(covered)),
            [field[0], field[1], field[2], field[3]]
        );
        assert_eq!(from_wire([0x01, 0x3c, 0xac, 0xdf]), 0xdfac_3c01);
    }

    #[test]
    fn slicing_tables_match_bitwise() {
        for octet in 0..=255u8 {
            let mut data = [0u8; 8];
            data[0] = octet;
            for (slice, table) in TABLES.iter().enumerate() {
                assert_eq!(
                    table[usize::from(octet)],
                    bitwise_update(0, &data[..=slice])
                );
            }
        }
    }

    #[test]
    fn x_pow_is_a_power() {
        // x^31 is bit 0; x^32 wraps to P(x) - x^32.
        assert_eq!(x_pow_mod_p(31), 1);
        assert_eq!(x_pow_mod_p(32), POLY);
        let mut power = 1 << 31;
        for n in 0..2000u64 {
            assert_eq!(x_pow_mod_p(n), power, "x^{n}");
            power = times_x(power);
        }
        for (a, b) in [(95, 159), (4000, 77), (1 << 20, 12_345)] {
            assert_eq!(
                mul_mod_p(x_pow_mod_p(a), x_pow_mod_p(b)),
                x_pow_mod_p(a + b)
            );
        }
    }

    #[test]
    fn x_inverse_pow_undoes_x_pow() {
        for a in [1u32 << 31, 1, 0xFFFF_FFFF, 0x1234_5678, POLY] {
            assert_eq!(times_x(times_x_inverse(a)), a);
            assert_eq!(times_x_inverse(times_x(a)), a);
        }
        for n in [0u64, 1, 31, 32, 33, 95, 600, 65_535] {
            assert_eq!(
                mul_mod_p(x_pow_mod_p(n), x_inverse_pow_mod_p(n)),
                1 << 31,
                "x^{n} x^-{n} = 1"
            );
        }
        assert_eq!(
            mul_mod_p(x_pow_mod_p(100), x_inverse_pow_mod_p(37)),
            x_pow_mod_p(63)
        );
    }

    #[test]
    fn zeros_multiply_by_x_pow() {
        // Feeding n zero octets multiplies the register by x^(8n): the fact
        // every folding constant rests on.
        for (register, n) in [
            (0x1234_5678u32, 1usize),
            (0xFFFF_FFFF, 7),
            (0xDEAD_BEEF, 300),
        ] {
            let zeros = vec![0u8; n];
            assert_eq!(
                bitwise_update(register, &zeros),
                mul_mod_p(register, x_pow_mod_p(8 * n as u64))
            );
        }
    }

    /// SplitMix64, seeded, so a failure replays.
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
    }

    /// The octets `fpdu` stands for, put together one at a time: a marker
    /// whenever the output reaches its offset, before an octet or at the
    /// end.
    fn reference_octets(fpdu: &Fpdu<'_>) -> Vec<u8> {
        let mut data = fpdu.ulpdu_length.to_be_bytes().to_vec();
        data.extend((0..fpdu.header_len).map(|i| (fpdu.header[i / 4] >> (8 * (i % 4))) as u8));
        for piece in fpdu.pieces {
            data.extend_from_slice(piece);
        }
        data.resize(data.len() + fpdu.pad, 0);
        let mut out = Vec::new();
        let mut marker_at = fpdu.marker_at;
        for octet in data.into_iter().map(Some).chain([None]) {
            if out.len() == marker_at {
                let at = out.len();
                out.extend_from_slice(&[0, 0, (at >> 8) as u8, at as u8]);
                marker_at += MARKER_INTERVAL;
            }
            out.extend(octet);
        }
        out
    }

    /// Writes `fpdu` into an output at every offset in a cache line (and a
    /// few past it), with guard octets either side, and checks the octets,
    /// that nothing else was written, and the CRC against the bitwise
    /// reference. Without the VPCLMULQDQ kernel, checks that nothing is
    /// written.
    fn check_fpdu(crc: u32, fpdu: &Fpdu<'_>, context: &str) {
        check_fpdu_as(crc, fpdu, fpdu, context);
        // The same octets with the pieces in registered memory (read by
        // opaque loads), the first piece as the header words if it fits.
        let (header, header_len, rest) = match fpdu.pieces.split_first() {
            Some((first, rest)) if first.len() <= 20 => {
                let mut header = [0u32; 5];
                for (i, &o) in first.iter().enumerate() {
                    header[i / 4] |= u32::from(o) << (8 * (i % 4));
                }
                (header, first.len(), rest)
            }
            _ => ([0; 5], 0, fpdu.pieces),
        };
        let shared: Vec<Vec<simd::Shared>> = rest
            .iter()
            .map(|p| p.iter().map(|&o| simd::Shared::new(o)).collect())
            .collect();
        let pieces: Vec<&[simd::Shared]> = shared.iter().map(Vec::as_slice).collect();
        let registered = Fpdu {
            ulpdu_length: fpdu.ulpdu_length,
            header,
            header_len,
            pieces: &pieces,
            pad: fpdu.pad,
            marker_at: fpdu.marker_at,
        };
        check_fpdu_as(crc, fpdu, &registered, &format!("{context}, registered"));
    }

    /// [`check_fpdu`] of `fpdu`, written as `written` (the same octets).
    fn check_fpdu_as<T: Octet>(crc: u32, fpdu: &Fpdu<'_>, written: &Fpdu<'_, T>, context: &str) {
        let expected = reference_octets(fpdu);
        let value = !bitwise_update(!crc, &expected);
        let len = expected.len();
        let mut buffer = vec![0u8; len + 3 * 64];
        let base = buffer.as_ptr().align_offset(64);
        for lead in 0..70 {
            buffer.fill(0xA5);
            let out = &mut buffer[base + lead..base + lead + len];
            let got = copy_fpdu(crc, out, written);
            let at = format!("{context}, lead {lead}");
            if kernel() != Kernel::Vpclmulqdq {
                assert_eq!(got, None);
                assert!(buffer.iter().all(|&o| o == 0xA5), "nothing written: {at}");
                continue;
            }
            assert_eq!(got, Some(value), "CRC: {at}");
            assert_eq!(&buffer[base + lead..][..len], &expected[..], "octets: {at}");
            assert!(
                buffer[..base + lead].iter().all(|&o| o == 0xA5),
                "before: {at}"
            );
            assert!(
                buffer[base + lead + len..].iter().all(|&o| o == 0xA5),
                "after: {at}"
            );
        }
    }

    #[test]
    fn copy_fpdu_random_shapes() {
        let mut rng = Rng(0x0F1E_2D3C_4B5A_6978);
        let data: Vec<u8> = (0..1200).map(|_| rng.next() as u8).collect();
        for case in 0..60 {
            let count = rng.below(6);
            let pieces: Vec<&[u8]> = (0..count)
                .map(|_| {
                    let at = rng.below(64);
                    let len = [rng.below(20), rng.below(200), rng.below(1100)][rng.below(3)];
                    &data[at..at + len]
                })
                .collect();
            let fpdu = Fpdu {
                header: [0; 5],
                header_len: 0,
                ulpdu_length: rng.next() as u16,
                pieces: &pieces,
                pad: rng.below(4),
                marker_at: [usize::MAX, rng.below(700)][rng.below(2)],
            };
            let crc = [0, 0xFFFF_FFFF, rng.next() as u32][case % 3];
            check_fpdu(crc, &fpdu, &format!("case {case}: {fpdu:?}"));
        }
    }

    /// A short FPDU with a marker at every offset in it (and none): every
    /// block boundary falls in every kind of run, markers split the length
    /// field, the pieces and PAD, and come at the start and the end.
    #[test]
    fn copy_fpdu_every_marker_offset() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 29 + 7) as u8).collect();
        for len in [0usize, 1, 14, 61, 64, 130] {
            let pieces = [&data[..len.min(14)], &data[len.min(14)..len]];
            let pad = (4 - (2 + len) % 4) % 4;
            let fpdu_len = 2 + len + pad;
            for marker_at in (0..=fpdu_len + 1).chain([usize::MAX]) {
                let fpdu = Fpdu {
                    header: [0; 5],
                    header_len: 0,
                    ulpdu_length: len as u16,
                    pieces: &pieces,
                    pad,
                    marker_at,
                };
                check_fpdu(0, &fpdu, &format!("{len} octets, marker at {marker_at}"));
            }
        }
    }

    /// A long ULPDU with the first marker at every offset up to past a
    /// marker interval, so that the marker periods of the VPCLMULQDQ
    /// kernel start at every block position (every output offset in a
    /// cache line too), including markers that straddle two blocks.
    #[test]
    fn copy_fpdu_marker_periods_at_every_phase() {
        let data: Vec<u8> = (0..1800u32).map(|i| (i * 131 + 17) as u8).collect();
        let pieces = [&data[..14], &data[14..1714]];
        for marker_at in 0..=MARKER_INTERVAL + 8 {
            let fpdu = Fpdu {
                header: [0; 5],
                header_len: 0,
                ulpdu_length: 1714,
                pieces: &pieces,
                pad: 0,
                marker_at,
            };
            let context = format!("first marker at {marker_at}");
            check_fpdu(0, &fpdu, &context);
        }
    }

    #[test]
    fn copy_fpdu_must_fill_the_output() {
        let fpdu = Fpdu {
            header: [0; 5],
            header_len: 0,
            ulpdu_length: 0,
            pieces: &[],
            pad: 2,
            marker_at: usize::MAX,
        };
        let short = std::panic::catch_unwind(|| copy_fpdu(0, &mut [0u8; 8], &fpdu));
        let long = std::panic::catch_unwind(|| {
            let fpdu = Fpdu {
                pieces: &[&[1; 9]],
                ..fpdu
            };
            copy_fpdu(0, &mut [0u8; 8], &fpdu)
        });
        // Without the kernel nothing is checked, and nothing written.
        let kernel = kernel() == Kernel::Vpclmulqdq;
        assert_eq!(short.is_err(), kernel, "4 octets for 8");
        assert_eq!(long.is_err(), kernel, "13 octets for 8");
    }

    #[test]
    fn portable_matches_bitwise() {
        let data: Vec<u8> = (0..100u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..data.len() {
            let expected = bitwise_update(0x0BAD_F00D, &data[..len]);
            assert_eq!(portable_update(0x0BAD_F00D, &data[..len]), expected);
            let mut dst = vec![0u8; len];
            assert_eq!(
                portable_copy_update(0x0BAD_F00D, &mut dst, &data[..len]),
                expected
            );
            assert_eq!(dst, data[..len]);
        }
    }
}
