//! The x86_64 CRC32c kernels behind [`super::crc`], and the only `unsafe`
//! of this crate (STYLE.md §1.1: SIMD kernels live in one module with a safe
//! API and a portable fallback; the fallback is `crc`'s slicing-by-8).
//!
//! # Safety
//!
//! Every `unsafe` block is one of three kinds, each with its `// SAFETY:`:
//!
//! * a call from code without target features into a `#[target_feature]`
//!   kernel, made only when [`best`] says the CPU has those features
//!   ([`detect`] asks `is_x86_feature_detected!`, once, and [`BEST`] caches
//!   the answer, which never changes once known), or into the kernel of a
//!   [`Folding`] that has started, which [`fold_start`] allows only after
//!   that check;
//! * an unaligned SIMD load or store through a pointer taken from a
//!   reference to an array exactly as wide as the access;
//! * a masked load or store of octets (AVX-512BW), which by the contract of
//!   `core::intrinsics::simd::simd_masked_load`/`simd_masked_store` (what
//!   `_mm512_mask_loadu_epi8` and its kin are built on) touches element `i`
//!   at `pointer.wrapping_offset(i)` only when mask bit `i` is set, and
//!   whose set bits all land inside one slice. The pointer itself may lie
//!   before that slice (it is made with `wrapping_sub`): that is how a
//!   piece's first octets are loaded straight into the high octets of a
//!   block;
//! * the same loads, plain or masked, written as inline assembly for the
//!   one-pass FPDU kernel's pieces of registered memory ([`Shared`]:
//!   `AtomicU8`, which another thread may write while the kernel reads):
//!   the compiler treats an `asm!` block as opaque code reading the memory
//!   its pointer reaches, so it can neither assume those octets unchanged
//!   nor tear, repeat or merge the loads (the argument of `mem::dma`,
//!   whose copies are assembly for the same reason); a masked `vmovdqu8`
//!   suppresses faults and accesses for its clear mask bits as the
//!   intrinsics do, so the same bounds hold.
//!
//! Everything else (intrinsics without pointers, calls between kernels with
//! the same features) is safe Rust. On other targets this module compiles
//! to "no kernel", and `crc` runs slicing-by-8.
//!
//! # The math, so a reader can check every constant
//!
//! All polynomials are over GF(2). `P(x)` is the CRC32c polynomial (see
//! [`super::crc::POLY`]). The message is fed octet 0 first, each octet least
//! significant bit first, so an `n`-bit message `m_0 .. m_{n-1}` is
//! `M(x) = sum m_i x^(n-1-i)`.
//!
//! 1. **Register.** After the message, a CRC register that held `S(x)`
//!    holds `R = S(x) x^n + M(x) x^32 mod P(x)`. The CRC32c value is `!R`
//!    for `S = !crc` (`crc = 0` for a fresh CRC). It follows that feeding
//!    `A` then `B` gives `R_A x^(8|B|) + R0(B)`, where `R0(B)` is `B` fed to
//!    a zero register: the CRC of independent pieces can be joined by
//!    multiplying by powers of `x`.
//! 2. **Initial value.** `S(x) x^n = (S(x) x^(n-32)) x^32`, and
//!    `S(x) x^(n-32)` is `S` laid over the first 32 message bits. So a kernel
//!    starts from a zero register with `S` XORed into the first four
//!    octets (register bit `j` onto message bit `j`).
//! 3. **Register form.** A `u32` holds a polynomial with bit `j` the
//!    coefficient of `x^(31-j)` (reflected form, as the register).
//!    `k` octets loaded little-endian into a `u64` or a 128-bit lane hold a
//!    message chunk: bit `i` is `m_i`, worth `x^(8k-1-i)` times the power of
//!    `x` for what follows the chunk.
//! 4. **Multiplying by `x^e` with one carry-less multiply.** Multiply a
//!    64-bit chunk `A` (bit `i` worth `x^(63-i)`) by a `u32` `K` (bit `j`
//!    worth `x^(31-j)`): product bit `m` is worth `x^(94-m)`. Read as a
//!    16-octet chunk (bit `m` worth `x^(127-m)`) it is `A K x^33`. Likewise
//!    a 32-bit register times `K` (bit `m` worth `x^(62-m)`) read as an
//!    8-octet chunk is `A K x`, and the `crc32` instruction on that chunk,
//!    from a zero register, multiplies by another `x^32` (fact 1): `A K
//!    x^33` again. So the constant that multiplies by `x^e` is
//!    `k(e) = x^(e-33) mod P(x)`, computed by [`k`] with
//!    [`super::crc::x_pow_mod_p`].
//! 5. **Folding a 16-octet lane forward by `d` octets.** A lane `X` is
//!    `H x^64 + L`, where `H` is its first 8 octets (the low quadword) and
//!    `L` its last 8 (the high quadword). Moving it `d` octets later
//!    multiplies it by `x^(8d)`, and by fact 4
//!
//!    ```text
//!    X x^(8d) = H x^(8d+64) + L x^(8d)
//!             ≡ clmul(H, k(8d+64)) + clmul(L, k(8d))   (mod P),
//!    ```
//!
//!    a 16-octet chunk (each product has 95 bits) that is XORed onto the
//!    lane found `d` octets later. [`fold`] gives the pair
//!    `[k(8d+64), k(8d)]`, the low and high quadword of a constant lane, so
//!    `vpclmulqdq` with immediate `0x00` multiplies `H` and `0x11`
//!    multiplies `L`.
//! 6. **Finishing.** When one 16-octet lane `X` is left, congruent to
//!    everything folded so far, followed by a tail of under 16 octets, the
//!    register is that of a zero register fed `X`'s 16 octets and the tail
//!    (fact 1 with `S = 0`): two `crc32` on `X`'s quadwords, then the tail.
//! 7. **Joining three `crc32` streams.** Streams `A`, `B`, `C` of `l` octets
//!    each, `A` from the register and `B`, `C` from zero, end in `R_A`,
//!    `R_B`, `R_C`, and the register after all three is
//!    `R_A x^(16l) + R_B x^(8l) + R_C` (fact 1). Hold back `C`'s last
//!    quadword `c`: the `crc32` instruction on register `R_C'` and quadword
//!    `v` gives `R_C' x^64 + v x^32`, so with
//!    `v = c ^ clmul(R_A, k(16l)) ^ clmul(R_B, k(8l))` it gives the joined
//!    register (fact 4).
//!
//! 8. **Fed in pieces.** A CRC fed in pieces ([`Folding`]) keeps the four
//!    accumulators of the main loop between pieces, never reducing them
//!    until the end. Its state after the whole 64-octet blocks up to
//!    stream position `p` is `x_0, x_1, x_2, x_3`, where `x_i` is congruent
//!    to the block at `p - 64 (4 - i)` (so `x_3` is the last block), each
//!    already carrying everything before it. The next block `v`, at `p`,
//!    lies 256 octets after `x_0`'s, so by fact 5
//!
//!    ```text
//!    x_0, x_1, x_2, x_3   becomes   x_1, x_2, x_3, fold(256)(x_0) + v,
//!    ```
//!
//!    with the main loop's constant: one block at a time is the main loop
//!    with the accumulators renamed, and four in a row are one turn of it.
//!    Within a piece the `i`-th block folds into `x_(i mod 4)`, so the
//!    accumulators keep their registers, and they are stored oldest first
//!    at the end of the piece. Folding starts from four zero accumulators
//!    (zero folds to zero) and the register laid over the first block's
//!    first four octets (fact 2). Octets after the last whole block, under
//!    64, are *staged* in a partial block; the next piece completes it,
//!    loading its first octets straight into the block's high octets with
//!    a masked load. Pieces of up to 16 octets in all (markers, PAD; before
//!    folding, a length field and a DDP header) wait in general registers
//!    instead, *pending*, until the next piece merges them into the partial
//!    block (completing it if they reach its end) or into the first block.
//!    At the end the accumulators are joined and reduced to one lane as for
//!    one call, and the staged and pending octets are that call's tail
//!    (fact 6). Feeding in pieces thus computes exactly what one call over
//!    the concatenation would, with one reduction however many pieces there
//!    are.
//!
//! 9. **An FPDU copied in one pass.** [`copy_fpdu`] writes an FPDU's length
//!    field, pieces, PAD and markers into an output and folds them as it
//!    goes, in blocks that start on the output's cache lines, so that
//!    every whole-block store is aligned (a store that straddles two lines
//!    costs two). The first block starts `z` octets before the output (its
//!    offset in a cache line); the last ends `t` octets after it, `0 < t
//!    <= 64`. Both paddings are zero octets, which the blocks hold where
//!    they overhang the output, and which are never stored:
//!
//!    * `z` zeros in front of a message add nothing to a CRC fed from a
//!      zero register (fact 1). The register `S` rides instead in the
//!      block before the first, as its last four octets `W` (zero above),
//!      the accumulator `x_3` the first block folds after (fact 8). That
//!      block is followed by `z + n + t` octets, so it contributes
//!      `W x^(8(z+n+t)) x^32`, which must be `S x^(8(n+t))` (fact 1): `W =
//!      S x^(-8z-32)`, one multiply by a constant of `x86::LEAD` (fact
//!      4; `x` is invertible mod `P` because `P(0) = 1`).
//!    * `t` zeros after a message multiply its register by `x^(8t)`. The
//!      last block (zero-padded, or a whole zero block when the output
//!      ends on a line) is joined with the four accumulators by folding
//!      `x_i` forward `64 (4 - i)` octets (fact 5), and the resulting
//!      block's lanes are folded onto one as in fact 6, each by `t` octets
//!      less, which undoes the padding: lane `i` moves `16 (3 - i) - t`
//!      octets, with the constants of `x86::REDUCE_TRAIL` (negative
//!      distances are powers of `x^-1`). The lane's register (fact 6) is
//!      the CRC's.
//!
//!    Inside, a block is put together in a register from the pieces that
//!    cut it (masked loads that place a piece's octets at their offsets
//!    in the block, the length field and markers broadcast from general
//!    registers), then stored once and folded; whole blocks of one piece
//!    go from load to store and fold. With markers, 508 octets of data and
//!    the marker after them fill exactly 512 octets, eight blocks, so from
//!    one marker to the next the blocks fall on the same offsets every
//!    time: the kernel copies such periods in a loop with fixed masks, and
//!    the eight blocks fold into the four accumulators in turn, which keep
//!    their order.
//!
//! The constants of the VPCLMULQDQ kernel are therefore `fold(256)` for the
//! main loop (four accumulators, each 256 octets ahead of itself) and for
//! single blocks fed in pieces (fact 8), `fold(192)`, `fold(128)`,
//! `fold(64)` to join the accumulators and for the 64-octet loop,
//! `fold(48)`, `fold(32)`, `fold(16)` to reduce a 512-bit accumulator to
//! one lane, and `fold(16)` for the 16-octet loop; fact 9 adds `fold(256)`
//! for joining a fifth block and the tables for `z` and `t`. The SSE4.2
//! kernel needs `k(16l)` and `k(8l)` for each stream length `l` of
//! [`STREAM_OCTETS`].
#![allow(unsafe_code)]

use core::sync::atomic::{AtomicU8, Ordering};

#[cfg(target_arch = "x86_64")]
use super::crc::{x_inverse_pow_mod_p, x_pow_mod_p, MARKER_INTERVAL, RUN_LEN};
use super::crc::{Fpdu, Kernel};

/// The best kernel of this CPU, once known: 0 until [`detect`] ran, then
/// [`code`] of its answer.
static BEST: AtomicU8 = AtomicU8::new(0);

/// An octet the one-pass FPDU kernel ([`copy_fpdu`]) copies and folds:
/// `u8` for plain memory, [`Shared`] for registered memory.
pub(crate) trait Octet: sealed::Sealed + Sized {
    /// Read by opaque loads (module documentation, Safety).
    const SHARED: bool;
}

/// An octet of registered memory as the kernel reads it: another thread (a
/// peer's RDMA Write placed on another core, the application) may write it
/// meanwhile, so it is read once, by loads the compiler cannot see into,
/// and what the kernel stored is what it folded into the CRC.
pub(crate) type Shared = AtomicU8;

impl Octet for u8 {
    const SHARED: bool = false;
}

impl Octet for Shared {
    const SHARED: bool = true;
}

mod sealed {
    pub(crate) trait Sealed {}
    impl Sealed for u8 {}
    impl Sealed for super::Shared {}
}

#[cfg(target_arch = "x86_64")]
/// Octets per stream in the SSE4.2 kernel's three-stream blocks, longest
/// first: a block costs one join (two carry-less multiplies and a `crc32`
/// in a row), so long blocks go first and short ones mop up. Under 192
/// octets one stream is faster (measured with examples/crc_speed.rs).
const STREAM_OCTETS: [usize; 3] = [1024, 256, 64];

#[cfg(target_arch = "x86_64")]
/// `k(e) = x^(e-33) mod P(x)`: the constant that multiplies by `x^e` through
/// one carry-less multiply (fact 4 of the module documentation).
const fn k(e: u64) -> u64 {
    x_pow_mod_p(e - 33) as u64
}

#[cfg(target_arch = "x86_64")]
/// `[k(8d+64), k(8d)]`: folds a 16-octet lane forward by `d` octets (fact 5).
const fn fold(d: u64) -> [u64; 2] {
    [k(8 * d + 64), k(8 * d)]
}

/// The best kernel this CPU supports, detected on the first call.
#[inline]
pub(super) fn best() -> Kernel {
    match BEST.load(Ordering::Relaxed) {
        1 => Kernel::Portable,
        2 => Kernel::Sse42,
        3 => Kernel::Vpclmulqdq,
        _ => detect_once(),
    }
}

/// [`detect`], stored in [`BEST`].
#[cold]
fn detect_once() -> Kernel {
    // Two threads may both get here; both store the same answer.
    let kernel = detect();
    BEST.store(code(kernel), Ordering::Relaxed);
    kernel
}

/// Whether this CPU runs `kernel`: each kernel needs a superset of the
/// features of the next one down.
#[inline]
pub(super) fn supports(kernel: Kernel) -> bool {
    code(kernel) <= code(best())
}

/// The register after `data` (no inversions) with `kernel`, or `None` when
/// `kernel` is [`Kernel::Portable`] or this CPU lacks it.
#[inline]
pub(super) fn update(kernel: Kernel, register: u32, data: &[u8]) -> Option<u32> {
    run::<false>(kernel, register, &mut [], data)
}

/// [`update`] that also copies `src` into `dst`, which has `src`'s length.
#[inline]
pub(super) fn copy_update(
    kernel: Kernel,
    register: u32,
    dst: &mut [u8],
    src: &[u8],
) -> Option<u32> {
    assert_eq!(dst.len(), src.len());
    run::<true>(kernel, register, dst, src)
}

/// Octets in a block of the VPCLMULQDQ kernel, one 512-bit register: the
/// unit a CRC fed in pieces folds.
const BLOCK_OCTETS: usize = 64;

/// One block on a cache line boundary, so a 512-bit load or store of it
/// never straddles two lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; BLOCK_OCTETS]);

/// What the VPCLMULQDQ kernel keeps between the pieces of a CRC (fact 8).
/// Elsewhere than on x86_64 nothing makes one: folding never starts.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
struct Zmm {
    /// The four accumulators, oldest first.
    accumulators: [Block; 4],
    /// The partial block after the last whole one, its first
    /// [`Folding::staged`] octets.
    staging: Block,
    /// See [`Niche`].
    niche: Niche,
}

/// Always [`Niche::Set`]. Its zero is no valid value, so `Option<Zmm>`
/// keeps `None` there and needs no tag of its own. With a tag, `Option`
/// puts it before the accumulators and LLVM builds `Some(..)` aside and
/// copies it in one octet off its alignment, and the copy's loads wait
/// for the stores they straddle (measured: two thirds of the time spent
/// starting to fold). So `None` costs one octet store, `Some(Zmm::ZERO)`
/// five aligned ones.
#[derive(Clone, Copy)]
#[repr(u8)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
enum Niche {
    Set = 1,
}

impl Zmm {
    #[cfg(target_arch = "x86_64")]
    const ZERO: Zmm = Zmm {
        accumulators: [Block([0; BLOCK_OCTETS]); 4],
        staging: Block([0; BLOCK_OCTETS]),
        niche: Niche::Set,
    };
}

/// A CRC fed in pieces as the VPCLMULQDQ kernel folds it (fact 8 of the
/// module documentation), once [`fold_start`] started it; before that it
/// holds nothing. Its fields are this module's alone.
#[derive(Clone)]
pub(super) struct Folding {
    /// The kernel's state once folding started (only [`fold_start`] sets
    /// it, after it found the kernel's features: `best()` was Vpclmulqdq,
    /// which it stays once known). `None` costs a CRC that never folds (a
    /// short FPDU) nothing for the 320 octets it does not use.
    zmm: Option<Zmm>,
    /// How many octets of `zmm.staging` are staged, under 64.
    staged: usize,
    /// Octets fed after the staged ones, not yet in `zmm.staging`.
    pending: Pending,
}

impl Folding {
    /// Not started.
    #[inline(always)]
    pub(super) fn new() -> Folding {
        Folding {
            zmm: None,
            staged: 0,
            pending: Pending::EMPTY,
        }
    }

    /// Whether [`fold_start`] started folding.
    #[inline(always)]
    pub(super) fn started(&self) -> bool {
        self.zmm.is_some()
    }

    /// Adds `data` to the pending octets if they fit. Whether it did.
    #[inline(always)]
    pub(super) fn push(&mut self, data: &[u8]) -> bool {
        match self.pending.push(data) {
            Some(pending) => {
                self.pending = pending;
                true
            }
            None => false,
        }
    }

    /// The pending octets, in the first `len` of the array, and `len`.
    #[inline(always)]
    pub(super) fn pending(&self) -> ([u8; Pending::CAPACITY], usize) {
        (self.pending.octets.to_le_bytes(), self.pending.len)
    }

    /// [`Folding::pending`], which are then gone.
    #[inline(always)]
    pub(super) fn take_pending(&mut self) -> ([u8; Pending::CAPACITY], usize) {
        let pending = self.pending();
        self.pending = Pending::EMPTY;
        pending
    }
}

/// Up to 16 octets fed and not yet given to a kernel, first octet least
/// significant: before folding, the pieces ahead of the first long one (a
/// length field and a DDP header), which [`fold_start`] puts in front of
/// its first block; while folding, short pieces (markers, PAD) after the
/// staged octets, which the next [`fold_update`] merges into the staging
/// block. They wait in general registers, so feeding them costs no call
/// and no chain of dependent table lookups (the first block waits for the
/// register of everything before it, and one accumulator's whole chain,
/// then the end, wait for the first block), and the staging block no
/// extra trip through memory.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    /// The octets, `octets >> (8 * i)` the `i`-th; zero above them.
    octets: u128,
    /// How many, at most [`Pending::CAPACITY`].
    len: usize,
}

impl Pending {
    /// At most this many octets wait.
    pub(super) const CAPACITY: usize = 16;

    /// No octets.
    const EMPTY: Pending = Pending { octets: 0, len: 0 };

    /// `self` followed by `data`, when they fit.
    #[inline(always)]
    fn push(self, data: &[u8]) -> Option<Pending> {
        if data.len() > Pending::CAPACITY - self.len {
            return None;
        }
        if data.is_empty() {
            return Some(self);
        }
        // Two loads of the same width that overlap unless `n` is twice
        // that width; where they do, both hold the same octets. A marker
        // is one 4-octet load, a 14-octet DDP header two 8-octet ones.
        let n = data.len();
        let word = if n >= 8 {
            let first = u64::from_le_bytes(data[..8].try_into().expect("8 octets"));
            let last = u64::from_le_bytes(data[n - 8..].try_into().expect("8 octets"));
            u128::from(first) | u128::from(last) << (8 * (n - 8))
        } else if n >= 4 {
            let first = u32::from_le_bytes(data[..4].try_into().expect("4 octets"));
            let last = u32::from_le_bytes(data[n - 4..].try_into().expect("4 octets"));
            u128::from(u64::from(first) | u64::from(last) << (8 * (n - 4)))
        } else {
            let mut word = 0u128;
            for (i, &octet) in data.iter().enumerate() {
                word |= u128::from(octet) << (8 * i);
            }
            word
        };
        // `self.len` is under 16 here, as `data` is not empty.
        Some(Pending {
            octets: self.octets | word << (8 * self.len),
            len: self.len + n,
        })
    }
}

/// Whether a CRC fed in pieces with `kernel` should start folding with a
/// `piece` of this many octets, `fed` octets in (the piece's included):
/// only the VPCLMULQDQ kernel folds, only once the input is long enough
/// that folding beats the `crc32` instruction alone, and [`fold_start`]
/// needs a whole block.
#[inline]
pub(super) fn folds(kernel: Kernel, fed: usize, piece: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    let long_enough = fed >= x86::ZMM_OCTETS_MIN && piece >= BLOCK_OCTETS;
    #[cfg(not(target_arch = "x86_64"))]
    let long_enough = {
        let _ = (fed, piece);
        false
    };
    long_enough && kernel == Kernel::Vpclmulqdq && best() == Kernel::Vpclmulqdq
}

/// Starts folding (fact 8) after what `register` (no inversions) covers:
/// the pending octets and then `src` (at least 64 octets, copied into `dst`
/// when copying) are folded into `folding`, and the octets after the last
/// whole block are staged.
///
/// # Panics
///
/// If folding has started, unless [`folds`] said yes, or if `src` is
/// shorter than 64 octets.
#[inline]
pub(super) fn fold_start<const COPY: bool>(
    folding: &mut Folding,
    register: u32,
    dst: &mut [u8],
    src: &[u8],
) {
    assert!(folding.zmm.is_none(), "folding has started");
    assert!(
        best() == Kernel::Vpclmulqdq,
        "folding needs the VPCLMULQDQ kernel"
    );
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `best()` is Vpclmulqdq only if `detect` found AVX-512F,
        // AVX-512BW, BMI2, VPCLMULQDQ, PCLMULQDQ and SSE4.2, the kernel's
        // features.
        let pending = core::mem::replace(&mut folding.pending, Pending::EMPTY);
        folding.staged =
            unsafe { x86::fold_start::<COPY>(&mut folding.zmm, pending, register, dst, src) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (register, dst, src);
        unreachable!("no VPCLMULQDQ kernel on this target")
    }
}

/// Feeds `src` (copied into `dst` when copying) to a started `folding`,
/// after its staged and pending octets: if they all stay under a block,
/// they are staged; else the staged block is completed from `src` and
/// folded, then `src`'s whole blocks, and the rest is staged.
///
/// # Panics
///
/// If folding has not started.
#[inline(always)]
pub(super) fn fold_update<const COPY: bool>(folding: &mut Folding, dst: &mut [u8], src: &[u8]) {
    assert!(folding.started(), "folding has not started");
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: folding started, so `fold_start` found the kernel's
        // features (see `Folding::zmm`).
        unsafe { x86::fold_update::<COPY>(folding, dst, src) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (dst, src);
        unreachable!("no VPCLMULQDQ kernel on this target")
    }
}

/// The register (no inversions) after everything fed to a started
/// `folding`.
///
/// # Panics
///
/// If folding has not started.
#[inline]
pub(super) fn fold_finish(folding: &Folding) -> u32 {
    assert!(folding.started(), "folding has not started");
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: folding started, so `fold_start` found the kernel's
        // features (see `Folding::zmm`).
        unsafe { x86::fold_finish(folding) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        unreachable!("no VPCLMULQDQ kernel on this target")
    }
}

/// The register (no inversions) after `register` and then `fpdu`, which is
/// written into `out` and must fill it exactly: one pass, each block of
/// `out` put together in a register, stored once and folded (fact 9).
///
/// # Panics
///
/// If this CPU lacks the VPCLMULQDQ kernel, or if `fpdu` does not fill
/// `out` exactly.
#[inline]
pub(super) fn copy_fpdu<T: Octet>(register: u32, out: &mut [u8], fpdu: &Fpdu<'_, T>) -> u32 {
    assert!(
        best() == Kernel::Vpclmulqdq,
        "copying an FPDU needs the VPCLMULQDQ kernel"
    );
    #[cfg(target_arch = "x86_64")]
    {
        // Without markers, the kernel has no code for them. Each kernel is
        // one function with everything inlined into it and the
        // accumulators in registers throughout; when LLVM kept one of the
        // helpers apart (a slightly larger `Gather::octets`, called from
        // several places), the accumulators went to memory and the marked
        // kernel ran at 0.7 of its speed, so keep the helpers small and
        // check the disassembly for calls after changing them.
        if fpdu.marker_at == usize::MAX {
            // SAFETY: `best()` is Vpclmulqdq only if `detect` found
            // AVX-512F, AVX-512BW, BMI2, VPCLMULQDQ, PCLMULQDQ and SSE4.2,
            // the kernel's features.
            unsafe { x86::copy_fpdu::<false, T>(register, out, fpdu) }
        } else {
            // SAFETY: as above.
            unsafe { x86::copy_fpdu::<true, T>(register, out, fpdu) }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (register, out, fpdu);
        unreachable!("no VPCLMULQDQ kernel on this target")
    }
}

const fn code(kernel: Kernel) -> u8 {
    match kernel {
        Kernel::Portable => 1,
        Kernel::Sse42 => 2,
        Kernel::Vpclmulqdq => 3,
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Kernel {
    let sse42 = is_x86_feature_detected!("sse4.2") && is_x86_feature_detected!("pclmulqdq");
    // AVX-512BW (masked octet loads and stores) and BMI2 (masks) for a CRC
    // fed in pieces; every CPU with VPCLMULQDQ and AVX-512F so far has
    // both.
    let vpclmulqdq = is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("bmi2")
        && is_x86_feature_detected!("vpclmulqdq");
    match (sse42, vpclmulqdq) {
        (true, true) => Kernel::Vpclmulqdq,
        (true, false) => Kernel::Sse42,
        (false, _) => Kernel::Portable,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Kernel {
    Kernel::Portable
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn run<const COPY: bool>(kernel: Kernel, register: u32, dst: &mut [u8], src: &[u8]) -> Option<u32> {
    match (kernel, best()) {
        (Kernel::Vpclmulqdq, Kernel::Vpclmulqdq) => {
            // SAFETY: `best()` is Vpclmulqdq only if `detect` found AVX-512F,
            // AVX-512BW, BMI2, VPCLMULQDQ, PCLMULQDQ and SSE4.2, a superset
            // of the kernel's features.
            Some(unsafe { x86::vpclmulqdq::<COPY>(register, dst, src) })
        }
        (Kernel::Sse42, Kernel::Vpclmulqdq | Kernel::Sse42) => {
            // SAFETY: `best()` is Sse42 or better only if `detect` found
            // SSE4.2 and PCLMULQDQ, the kernel's features.
            Some(unsafe { x86::sse42::<COPY>(register, dst, src) })
        }
        _ => None,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn run<const COPY: bool>(_: Kernel, _: u32, _: &mut [u8], _: &[u8]) -> Option<u32> {
    None
}

/// The kernels. Each takes the register (no inversions), `dst` and `src`;
/// with `COPY` they copy `src` into `dst` (same length), without it `dst`
/// is empty and never touched.
//
// The AVX-512 intrinsics are stable since Rust 1.89 (`as_chunks` since
// 1.88, safe `#[target_feature]` functions since 1.86): this module, hence
// rnic-engine on x86_64, needs 1.89, while the workspace still declares
// `rust-version = "1.85"`, which has to be raised.
#[cfg(target_arch = "x86_64")]
#[clippy::msrv = "1.89"]
mod x86 {
    use core::arch::x86_64::*;

    use core::arch::asm;

    use super::{
        fold, k, x_inverse_pow_mod_p, x_pow_mod_p, Block, Folding, Fpdu, Octet, Pending, Zmm,
        BLOCK_OCTETS, MARKER_INTERVAL, RUN_LEN, STREAM_OCTETS,
    };

    /// Below this many octets the VPCLMULQDQ kernel uses the `crc32`
    /// instruction alone: no constant to load, no lane to reduce. Measured
    /// (examples/crc_speed.rs): one `crc32` stream beats folding up to 192
    /// octets and loses from 256 on, also when copying. A CRC fed in pieces
    /// starts folding once this many octets have come.
    pub(super) const ZMM_OCTETS_MIN: usize = 256;

    /// From this many octets on, the VPCLMULQDQ kernel reads up to a cache
    /// line boundary with the `crc32` instruction before folding.
    const ALIGN_OCTETS_MIN: usize = 512;

    /// The join constants of the three-stream blocks, `[k(16l), k(8l)]` for
    /// each `l` of [`STREAM_OCTETS`] (fact 7):
    /// `[x^16351, x^8159]`, `[x^4063, x^2015]`, `[x^991, x^479]` mod P.
    const JOIN: [[u64; 2]; STREAM_OCTETS.len()] = {
        let mut join = [[0; 2]; STREAM_OCTETS.len()];
        let mut i = 0;
        while i < STREAM_OCTETS.len() {
            let l = STREAM_OCTETS[i] as u64;
            join[i] = [k(16 * l), k(8 * l)];
            i += 1;
        }
        join
    };

    /// Folds by 256 octets, the main loop: `[x^2079, x^2015]` mod P.
    const FOLD_256: [u64; 2] = fold(256);
    /// Folds by 192 octets, joining accumulators: `[x^1567, x^1503]` mod P.
    const FOLD_192: [u64; 2] = fold(192);
    /// Folds by 128 octets, joining accumulators: `[x^1055, x^991]` mod P.
    const FOLD_128: [u64; 2] = fold(128);
    /// Folds by 64 octets, joining accumulators and the 64-octet loop:
    /// `[x^543, x^479]` mod P.
    const FOLD_64: [u64; 2] = fold(64);
    /// Folds by 48 octets, reducing lane 0: `[x^415, x^351]` mod P.
    const FOLD_48: [u64; 2] = fold(48);
    /// Folds by 32 octets, reducing lane 1: `[x^287, x^223]` mod P.
    const FOLD_32: [u64; 2] = fold(32);
    /// Folds by 16 octets, reducing lane 2 and the 16-octet loop:
    /// `[x^159, x^95]` mod P.
    const FOLD_16: [u64; 2] = fold(16);

    /// `[x^a, x^b] mod P` as the constants above hold them.
    const fn powers(a: u64, b: u64) -> [u64; 2] {
        [x_pow_mod_p(a) as u64, x_pow_mod_p(b) as u64]
    }

    // The powers the comments above name, checked at compile time.
    const _: () = {
        assert!(eq(FOLD_256, powers(2079, 2015)));
        assert!(eq(FOLD_192, powers(1567, 1503)));
        assert!(eq(FOLD_128, powers(1055, 991)));
        assert!(eq(FOLD_64, powers(543, 479)));
        assert!(eq(FOLD_48, powers(415, 351)));
        assert!(eq(FOLD_32, powers(287, 223)));
        assert!(eq(FOLD_16, powers(159, 95)));
        assert!(eq(JOIN[0], powers(16351, 8159)));
        assert!(eq(JOIN[1], powers(4063, 2015)));
        assert!(eq(JOIN[2], powers(991, 479)));
    };

    const fn eq(a: [u64; 2], b: [u64; 2]) -> bool {
        a[0] == b[0] && a[1] == b[1]
    }

    /// `dst[at..at + len]` when copying; nothing otherwise.
    #[inline(always)]
    fn part<const COPY: bool>(dst: &mut [u8], at: usize, len: usize) -> &mut [u8] {
        if COPY {
            &mut dst[at..at + len]
        } else {
            &mut []
        }
    }

    /// `src[at..at + N]`, also stored at `dst[at..]` when copying.
    #[inline(always)]
    fn take<const COPY: bool, const N: usize>(dst: &mut [u8], src: &[u8], at: usize) -> [u8; N] {
        let octets: [u8; N] = src[at..at + N].try_into().expect("N octets");
        if COPY {
            dst[at..at + N].copy_from_slice(&octets);
        }
        octets
    }

    // --- SSE4.2 ----------------------------------------------------------

    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn crc_u64(register: u32, quadword: [u8; 8]) -> u32 {
        // The instruction leaves the upper half of its 64-bit result zero.
        _mm_crc32_u64(u64::from(register), u64::from_le_bytes(quadword)) as u32
    }

    /// `a * k`, both at most 32 bits wide, as a 64-bit carry-less product.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn clmul_u32(a: u32, k: u64) -> u64 {
        let a = _mm_cvtsi64_si128(i64::from(a));
        let k = _mm_cvtsi64_si128(k as i64);
        _mm_cvtsi128_si64(_mm_clmulepi64_si128::<0x00>(a, k)) as u64
    }

    /// The `crc32` instruction on one stream: quadwords, then 4, 2 and 1
    /// octets.
    #[inline]
    #[target_feature(enable = "sse4.2")]
    pub(super) fn serial<const COPY: bool>(mut register: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        let (quadwords, tail) = src.as_chunks::<8>();
        if COPY {
            let (dst_quadwords, _) = dst.as_chunks_mut::<8>();
            for (quadword, to) in quadwords.iter().zip(dst_quadwords) {
                *to = *quadword;
                register = crc_u64(register, *quadword);
            }
        } else {
            for quadword in quadwords {
                register = crc_u64(register, *quadword);
            }
        }
        let mut at = src.len() - tail.len();
        if src.len() - at >= 4 {
            let word = u32::from_le_bytes(take::<COPY, 4>(dst, src, at));
            register = _mm_crc32_u32(register, word);
            at += 4;
        }
        if src.len() - at >= 2 {
            let half = u16::from_le_bytes(take::<COPY, 2>(dst, src, at));
            register = _mm_crc32_u16(register, half);
            at += 2;
        }
        if src.len() - at >= 1 {
            let [octet] = take::<COPY, 1>(dst, src, at);
            register = _mm_crc32_u8(register, octet);
        }
        register
    }

    /// The SSE4.2 kernel: three-stream blocks (fact 7), longest first, then
    /// one stream for the rest.
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub(super) fn sse42<const COPY: bool>(mut register: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        let mut at = 0;
        for (&l, join) in STREAM_OCTETS.iter().zip(&JOIN) {
            while src.len() - at >= 3 * l {
                let block = &src[at..at + 3 * l];
                let to = part::<COPY>(dst, at, 3 * l);
                register = three_streams::<COPY>(register, to, block, *join);
                at += 3 * l;
            }
        }
        serial::<COPY>(register, part::<COPY>(dst, at, src.len() - at), &src[at..])
    }

    /// One block of three streams of `src.len() / 3` octets (a multiple of
    /// 8, at least 8), joined with `join = [k(16l), k(8l)]` (fact 7).
    #[inline]
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn three_streams<const COPY: bool>(
        register: u32,
        dst: &mut [u8],
        src: &[u8],
        join: [u64; 2],
    ) -> u32 {
        let n = src.len() / 24; // quadwords per stream
        let [a, b, c] = streams(src, n);
        let [to_a, to_b, to_c] = streams_mut::<COPY>(dst, n);
        let (mut ra, mut rb, mut rc) = (register, 0, 0);
        for i in 0..n {
            if COPY {
                (to_a[i], to_b[i], to_c[i]) = (a[i], b[i], c[i]);
            }
            if i + 1 < n {
                ra = crc_u64(ra, a[i]);
                rb = crc_u64(rb, b[i]);
                rc = crc_u64(rc, c[i]);
            }
        }
        ra = crc_u64(ra, a[n - 1]);
        rb = crc_u64(rb, b[n - 1]);
        let joined = u64::from_le_bytes(c[n - 1]) ^ clmul_u32(ra, join[0]) ^ clmul_u32(rb, join[1]);
        crc_u64(rc, joined.to_le_bytes())
    }

    /// The three streams of `n` quadwords each of a block.
    #[inline(always)]
    fn streams(src: &[u8], n: usize) -> [&[[u8; 8]]; 3] {
        let (quadwords, _) = src.as_chunks::<8>();
        let (a, rest) = quadwords.split_at(n);
        let (b, rest) = rest.split_at(n);
        [a, b, &rest[..n]]
    }

    /// [`streams`] of `dst` when copying; empty otherwise.
    #[inline(always)]
    fn streams_mut<const COPY: bool>(dst: &mut [u8], n: usize) -> [&mut [[u8; 8]]; 3] {
        if !COPY {
            return [&mut [], &mut [], &mut []];
        }
        let (quadwords, _) = dst.as_chunks_mut::<8>();
        let (a, rest) = quadwords.split_at_mut(n);
        let (b, rest) = rest.split_at_mut(n);
        [a, b, &mut rest[..n]]
    }

    // --- AVX-512 + VPCLMULQDQ ---------------------------------------------

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load512(from: &[u8; 64]) -> __m512i {
        // SAFETY: `from` is 64 readable octets; `loadu` needs no alignment.
        unsafe { _mm512_loadu_si512(from.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store512(to: &mut [u8; 64], v: __m512i) {
        // SAFETY: `to` is 64 writable octets; `storeu` needs no alignment.
        unsafe { _mm512_storeu_si512(to.as_mut_ptr().cast(), v) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load128(from: &[u8; 16]) -> __m128i {
        // SAFETY: `from` is 16 readable octets; `loadu` needs no alignment.
        unsafe { _mm_loadu_si128(from.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn store128(to: &mut [u8; 16], v: __m128i) {
        // SAFETY: `to` is 16 writable octets; `storeu` needs no alignment.
        unsafe { _mm_storeu_si128(to.as_mut_ptr().cast(), v) }
    }

    /// The four 64-octet blocks of a 256-octet block.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load4(from: &[u8; 256]) -> [__m512i; 4] {
        let (blocks, _) = from.as_chunks::<64>();
        [
            load512(&blocks[0]),
            load512(&blocks[1]),
            load512(&blocks[2]),
            load512(&blocks[3]),
        ]
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store4(to: &mut [u8; 256], v: [__m512i; 4]) {
        let (blocks, _) = to.as_chunks_mut::<64>();
        for (block, v) in blocks.iter_mut().zip(v) {
            store512(block, v);
        }
    }

    /// The same fold constants `[k(8d+64), k(8d)]` in all four lanes.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn lanes(fold: [u64; 2]) -> __m512i {
        _mm512_broadcast_i32x4(_mm_set_epi64x(fold[1] as i64, fold[0] as i64))
    }

    /// `x` moved forward by the distance of `fold`, XORed onto `onto`
    /// (fact 5).
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold512(x: __m512i, fold: __m512i, onto: __m512i) -> __m512i {
        // H (low quadwords) times k(8d+64), L (high quadwords) times k(8d).
        let h = _mm512_clmulepi64_epi128::<0x00>(x, fold);
        let l = _mm512_clmulepi64_epi128::<0x11>(x, fold);
        _mm512_ternarylogic_epi64::<0x96>(h, l, onto) // three-way XOR
    }

    /// [`fold512`] for four accumulators.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold4(x: [__m512i; 4], fold: __m512i, onto: [__m512i; 4]) -> [__m512i; 4] {
        [
            fold512(x[0], fold, onto[0]),
            fold512(x[1], fold, onto[1]),
            fold512(x[2], fold, onto[2]),
            fold512(x[3], fold, onto[3]),
        ]
    }

    /// The VPCLMULQDQ kernel: four 512-bit accumulators, then one, then one
    /// 128-bit lane, then the `crc32` instruction (facts 2, 5, 6).
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) fn vpclmulqdq<const COPY: bool>(register: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        if src.len() < ZMM_OCTETS_MIN {
            return serial::<COPY>(register, dst, src);
        }
        // Loads that straddle two cache lines cost two; when only reading,
        // the `crc32` instruction takes octets up to a line boundary first.
        // (When copying, either the loads or the stores straddle unless
        // source and destination share their alignment; measured equal.)
        if !COPY && src.len() >= ALIGN_OCTETS_MIN {
            let head = (src.as_ptr() as usize).wrapping_neg() % 64;
            let register = serial::<false>(register, &mut [], &src[..head]);
            return fold_all::<false>(register, &mut [], &src[head..]);
        }
        fold_all::<COPY>(register, dst, src)
    }

    /// The VPCLMULQDQ kernel for at least 256 octets.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    fn fold_all<const COPY: bool>(register: u32, dst: &mut [u8], src: &[u8]) -> u32 {
        // Fact 2: the register rides on the first four octets.
        let register = _mm512_zextsi128_si512(_mm_cvtsi32_si128(register as i32));
        let (x, mut at) = fold_by_256::<COPY>(register, dst, src);
        let rest = src.len() - at;
        let (x, consumed) = fold_by_64::<COPY>(x, part::<COPY>(dst, at, rest), &src[at..]);
        at += consumed;
        let rest = src.len() - at;
        let (lane, consumed) =
            fold_by_16::<COPY>(reduce512(x), part::<COPY>(dst, at, rest), &src[at..]);
        at += consumed;
        let register = lane_register(lane);
        serial::<COPY>(register, part::<COPY>(dst, at, src.len() - at), &src[at..])
    }

    /// The register of a zero register fed `lane`'s 16 octets (fact 6).
    #[inline]
    #[target_feature(enable = "sse4.2")]
    fn lane_register(lane: __m128i) -> u32 {
        let register = crc_u64(0, (_mm_cvtsi128_si64(lane) as u64).to_le_bytes());
        crc_u64(
            register,
            (_mm_extract_epi64::<1>(lane) as u64).to_le_bytes(),
        )
    }

    /// The main loop over `src`'s whole 256-octet blocks (at least one):
    /// the first block, with the register on it, starts four accumulators,
    /// each folded 256 octets ahead a turn; at the end they are joined into
    /// one. Returns it and the octets consumed.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold_by_256<const COPY: bool>(
        register: __m512i,
        dst: &mut [u8],
        src: &[u8],
    ) -> (__m512i, usize) {
        let (blocks, _) = src.as_chunks::<256>();
        let first = load4(&blocks[0]);
        let mut x = [
            _mm512_xor_si512(first[0], register),
            first[1],
            first[2],
            first[3],
        ];
        let by_256 = lanes(FOLD_256);
        if COPY {
            let (to, _) = dst.as_chunks_mut::<256>();
            store4(&mut to[0], first);
            for (from, to) in blocks[1..].iter().zip(&mut to[1..]) {
                let v = load4(from);
                store4(to, v);
                x = fold4(x, by_256, v);
            }
        } else {
            for from in &blocks[1..] {
                x = fold4(x, by_256, load4(from));
            }
        }
        (join(x), 256 * blocks.len())
    }

    /// Joins four accumulators, oldest first, into the last one: `x[i]`
    /// sits `64 * (3 - i)` octets before `x[3]`. The six products do not
    /// depend on each other, so the join takes one multiply and two
    /// three-way XORs in a row rather than three folds.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn join(x: [__m512i; 4]) -> __m512i {
        let (a, b) = products(x[0], lanes(FOLD_192));
        let (c, d) = products(x[1], lanes(FOLD_128));
        let (e, f) = products(x[2], lanes(FOLD_64));
        let left = _mm512_ternarylogic_epi64::<0x96>(a, b, c);
        let right = _mm512_ternarylogic_epi64::<0x96>(d, e, f);
        _mm512_ternarylogic_epi64::<0x96>(left, right, x[3])
    }

    /// The two products of [`fold512`], not yet added.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn products(x: __m512i, fold: __m512i) -> (__m512i, __m512i) {
        (
            _mm512_clmulepi64_epi128::<0x00>(x, fold),
            _mm512_clmulepi64_epi128::<0x11>(x, fold),
        )
    }

    /// Folds `src`'s whole 64-octet blocks into `x`. Returns it and the
    /// octets consumed.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold_by_64<const COPY: bool>(
        mut x: __m512i,
        dst: &mut [u8],
        src: &[u8],
    ) -> (__m512i, usize) {
        let (blocks, _) = src.as_chunks::<64>();
        let by_64 = lanes(FOLD_64);
        if COPY {
            let (to, _) = dst.as_chunks_mut::<64>();
            for (from, to) in blocks.iter().zip(to) {
                let v = load512(from);
                store512(to, v);
                x = fold512(x, by_64, v);
            }
        } else {
            for from in blocks {
                x = fold512(x, by_64, load512(from));
            }
        }
        (x, 64 * blocks.len())
    }

    /// Folds `src`'s whole 16-octet blocks into `lane`. Returns it and the
    /// octets consumed.
    #[inline]
    #[target_feature(enable = "pclmulqdq")]
    fn fold_by_16<const COPY: bool>(
        mut lane: __m128i,
        dst: &mut [u8],
        src: &[u8],
    ) -> (__m128i, usize) {
        let (blocks, _) = src.as_chunks::<16>();
        let by_16 = _mm_set_epi64x(FOLD_16[1] as i64, FOLD_16[0] as i64);
        for (i, from) in blocks.iter().enumerate() {
            let v = load128(from);
            if COPY {
                store128(&mut dst.as_chunks_mut::<16>().0[i], v);
            }
            let h = _mm_clmulepi64_si128::<0x00>(lane, by_16);
            let l = _mm_clmulepi64_si128::<0x11>(lane, by_16);
            lane = _mm_xor_si128(_mm_xor_si128(h, l), v);
        }
        (lane, 16 * blocks.len())
    }

    /// Folds the four lanes of `x` into its last one: lane `i` moves
    /// `16 * (3 - i)` octets forward (fact 5).
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn reduce512(x: __m512i) -> __m128i {
        let [f48, f32, f16] = [FOLD_48, FOLD_32, FOLD_16];
        let constants = _mm512_set_epi64(
            0,
            0,
            f16[1] as i64,
            f16[0] as i64,
            f32[1] as i64,
            f32[0] as i64,
            f48[1] as i64,
            f48[0] as i64,
        );
        let last = _mm512_maskz_mov_epi64(0b1100_0000, x);
        // Lane 3 of `constants` is zero, so lane 3 of the products is too.
        let y = fold512(x, constants, last);
        let y = _mm256_xor_si256(_mm512_castsi512_si256(y), _mm512_extracti64x4_epi64::<1>(y));
        _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
    }

    // --- Fed in pieces (fact 8) -------------------------------------------

    /// The accumulators of `zmm`, oldest first.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_accumulators(zmm: &Zmm) -> [__m512i; 4] {
        let [a, b, c, d] = &zmm.accumulators;
        [load512(&a.0), load512(&b.0), load512(&c.0), load512(&d.0)]
    }

    /// Stores the accumulators `x`, oldest first once `blocks` more
    /// blocks were folded into them by [`fold_blocks`] (which folds block
    /// `i` into `x[i % 4]`, so `x[blocks % 4]` is now the oldest). Each
    /// arm stores to fixed places: renaming the accumulators costs one
    /// branch, no register moves and no address arithmetic.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn store_accumulators(zmm: &mut Zmm, x: [__m512i; 4], blocks: usize) {
        let [a, b, c, d] = x;
        let oldest_first = match blocks % 4 {
            0 => [a, b, c, d],
            1 => [b, c, d, a],
            2 => [c, d, a, b],
            _ => [d, a, b, c],
        };
        for (slot, v) in zmm.accumulators.iter_mut().zip(oldest_first) {
            store512(&mut slot.0, v);
        }
    }

    /// Folds `first` and then `src`'s whole blocks (also stored to `dst`
    /// when copying) into the accumulators `x`, oldest first: the `i`-th of
    /// these blocks folds into `x[i % 4]` (fact 8), so `x` keeps its order
    /// and no register moves. Returns the accumulators, how many blocks
    /// were folded (`first` included) and how many octets of `src`.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn fold_blocks<const COPY: bool>(
        x: [__m512i; 4],
        first: __m512i,
        dst: &mut [u8],
        src: &[u8],
    ) -> ([__m512i; 4], usize, usize) {
        let by_256 = lanes(FOLD_256);
        let [a, b, c, d] = x;
        let a = fold512(a, by_256, first);
        // Blocks 1 to 4 of each group of four fold into b, c, d, a.
        let (groups, _) = src.as_chunks::<256>();
        let mut y = [b, c, d, a];
        if COPY {
            let (to, _) = dst.as_chunks_mut::<256>();
            for (from, to) in groups.iter().zip(to) {
                let v = load4(from);
                store4(to, v);
                y = fold4(y, by_256, v);
            }
        } else {
            for from in groups {
                y = fold4(y, by_256, load4(from));
            }
        }
        let [b, c, d, a] = y;
        // At most three blocks remain, for b, c and d. Written out: as a
        // loop, LLVM makes the copy a `memcpy` call that spills them all.
        let at = 256 * groups.len();
        let (blocks, _) = src[at..].as_chunks::<64>();
        let (to, _) = part::<COPY>(dst, at, src.len() - at).as_chunks_mut::<64>();
        let (mut from, mut to) = (blocks.iter(), to.iter_mut());
        let b = single::<COPY>(b, by_256, from.next(), to.next());
        let c = single::<COPY>(c, by_256, from.next(), to.next());
        let d = single::<COPY>(d, by_256, from.next(), to.next());
        debug_assert!(from.next().is_none());
        let octets = at + 64 * blocks.len();
        ([a, b, c, d], 1 + 4 * groups.len() + blocks.len(), octets)
    }

    /// `acc` with the block `from` folded in, if there is one (copied to
    /// `to` when copying).
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn single<const COPY: bool>(
        acc: __m512i,
        by_256: __m512i,
        from: Option<&[u8; 64]>,
        to: Option<&mut [u8; 64]>,
    ) -> __m512i {
        let Some(from) = from else {
            return acc;
        };
        let v = load512(from);
        if COPY {
            store512(to.expect("dst as long as src"), v);
        }
        fold512(acc, by_256, v)
    }

    /// The first 64 octets of `src`, also stored to `dst` when copying.
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn first_block<const COPY: bool>(dst: &mut [u8], src: &[u8]) -> __m512i {
        let (from, _) = src.split_first_chunk().expect("64 octets");
        let v = load512(from);
        if COPY {
            let (to, _) = dst.split_first_chunk_mut().expect("dst as long as src");
            store512(to, v);
        }
        v
    }

    /// Bits `from..to` of a mask, `from <= to <= 64`.
    #[inline]
    #[target_feature(enable = "bmi2")]
    fn bits(from: usize, to: usize) -> u64 {
        // `bzhi` keeps the bits below its index, all of them from 64 on.
        _bzhi_u64(u64::MAX, to as u32) & !_bzhi_u64(u64::MAX, from as u32)
    }

    /// The partial block `partial` (its first `staged` octets) completed
    /// with the first `64 - staged` octets of `src` (also stored to `dst`
    /// when copying), by one masked load.
    ///
    /// Panics if `src` is shorter than that, or `staged` over 64.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn complete<const COPY: bool>(
        partial: __m512i,
        staged: usize,
        dst: &mut [u8],
        src: &[u8],
    ) -> __m512i {
        let needed = &src[..BLOCK_OCTETS - staged];
        // Bit `i` set for the octets `i >= staged`, which come from `src`.
        let mask = bits(staged, BLOCK_OCTETS);
        let from = needed.as_ptr().wrapping_sub(staged);
        // SAFETY: the masked load reads octet `i` at `from + i` only for
        // the set bits `i` in `staged..64`, which is `needed[i - staged]`,
        // inside `needed` (module documentation, Safety).
        let block = unsafe { _mm512_mask_loadu_epi8(partial, mask, from.cast()) };
        if COPY {
            let to = &mut dst[..needed.len()];
            let at = to.as_mut_ptr().wrapping_sub(staged);
            // SAFETY: the masked store writes octet `i` at `at + i` only
            // for the set bits `i` in `staged..64`, which is `to[i - staged]`,
            // inside `to`.
            unsafe { _mm512_mask_storeu_epi8(at.cast(), mask, block) };
        }
        block
    }

    /// Stages the partial block `partial` (its first `staged` octets) and
    /// `src` after it, where they stay under 64 octets (also copying `src`
    /// to `dst` when copying), by one masked load and a whole-block store,
    /// which a later whole-block load of the staging block takes straight
    /// from the store buffer. Returns how many octets are staged.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn add_to_staged<const COPY: bool>(
        staging: &mut Block,
        partial: __m512i,
        staged: usize,
        dst: &mut [u8],
        src: &[u8],
    ) -> usize {
        let end = staged + src.len();
        assert!(end < BLOCK_OCTETS);
        let mask = bits(staged, end);
        let from = src.as_ptr().wrapping_sub(staged);
        // SAFETY: the masked load reads octet `i` at `from + i` only for
        // the set bits `i` in `staged..end`, which is `src[i - staged]`,
        // inside `src`.
        let block = unsafe { _mm512_mask_loadu_epi8(partial, mask, from.cast()) };
        store512(&mut staging.0, block);
        if COPY {
            let to = &mut dst[..src.len()];
            let at = to.as_mut_ptr().wrapping_sub(staged);
            // SAFETY: the masked store writes octet `i` at `at + i` only
            // for the set bits `i` in `staged..end`, which is
            // `to[i - staged]`, inside `to`.
            unsafe { _mm512_mask_storeu_epi8(at.cast(), mask, block) };
        }
        end
    }

    /// Stages `src[at..]`, under 64 octets, as the partial block (also
    /// copying it to `dst[at..]` when copying), by one masked load and a
    /// whole-block store. Returns how many octets are staged.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn stage_rest<const COPY: bool>(
        staging: &mut Block,
        dst: &mut [u8],
        src: &[u8],
        at: usize,
    ) -> usize {
        let rest = &src[at..];
        assert!(rest.len() < BLOCK_OCTETS);
        let mask = bits(0, rest.len());
        // SAFETY: the masked load reads octet `i` at `rest.as_ptr() + i`
        // only for `i < rest.len()`, inside `rest`.
        let block = unsafe { _mm512_maskz_loadu_epi8(mask, rest.as_ptr().cast()) };
        store512(&mut staging.0, block);
        if COPY {
            let to = &mut dst[at..];
            assert_eq!(to.len(), rest.len());
            // SAFETY: the masked store writes octet `i` at
            // `to.as_mut_ptr() + i` only for `i < rest.len()`, inside `to`.
            unsafe { _mm512_mask_storeu_epi8(to.as_mut_ptr().cast(), mask, block) };
        }
        rest.len()
    }

    /// The staging block with the `pending` octets after its `staged`
    /// ones, in a register, and how many octets that makes: when 64 or
    /// more, the block is complete and the rest of the pending octets are
    /// not in it.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn with_pending(staging: &Block, staged: usize, pending: Pending) -> (__m512i, usize) {
        let partial = load512(&staging.0);
        let end = staged + pending.len;
        // Every 128-bit lane holds the pending octets rotated so that
        // octet `t` sits at `(staged + t) % 16`; the mask picks octets
        // `staged..end`, so octet `t` lands at `staged + t`.
        let rotated = pending.octets.rotate_left(8 * (staged % 16) as u32);
        let lanes = _mm512_broadcast_i32x4(lane(rotated));
        let mask = bits(staged, end.min(BLOCK_OCTETS));
        (_mm512_mask_mov_epi8(partial, mask, lanes), end)
    }

    /// [`super::fold_start`]: the first block is the pending octets, then
    /// `src`'s first; it folds into four zero accumulators with the
    /// register laid over it (fact 2), then the rest of `src` does. When
    /// only reading a long `src` with nothing pending, octets up to a cache
    /// line boundary go to the `crc32` instruction first, as in
    /// [`vpclmulqdq`]. Returns how many octets are staged.
    #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) fn fold_start<const COPY: bool>(
        zmm: &mut Option<Zmm>,
        pending: Pending,
        mut register: u32,
        dst: &mut [u8],
        src: &[u8],
    ) -> usize {
        let zmm = zmm.insert(Zmm::ZERO);
        let mut at = 0;
        if !COPY && pending.len == 0 && src.len() >= ALIGN_OCTETS_MIN {
            at = (src.as_ptr() as usize).wrapping_neg() % 64;
            register = serial::<false>(register, &mut [], &src[..at]);
        }
        let (partial, held) = with_pending(&zmm.staging, 0, pending);
        let rest = src.len() - at;
        let first = if held == 0 {
            first_block::<COPY>(part::<COPY>(dst, at, rest), &src[at..])
        } else {
            complete::<COPY>(partial, held, part::<COPY>(dst, at, rest), &src[at..])
        };
        let register = _mm512_zextsi128_si512(_mm_cvtsi32_si128(register as i32));
        let first = _mm512_xor_si512(first, register);
        at += BLOCK_OCTETS - held;
        let zero = _mm512_setzero_si512();
        let rest = src.len() - at;
        let (x, blocks, consumed) =
            fold_blocks::<COPY>([zero; 4], first, part::<COPY>(dst, at, rest), &src[at..]);
        store_accumulators(zmm, x, blocks);
        stage_rest::<COPY>(&mut zmm.staging, dst, src, at + consumed)
    }

    /// [`super::fold_update`]: merges the pending octets into the staged
    /// block (folding it if they complete it, and starting the next with
    /// those left over); adds `src` to it if they stay under a block; else
    /// completes the block from `src`, folds it and `src`'s whole blocks
    /// after it, and stages the rest.
    #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
    pub(super) fn fold_update<const COPY: bool>(folding: &mut Folding, dst: &mut [u8], src: &[u8]) {
        let Folding {
            zmm,
            staged,
            pending,
        } = folding;
        let zmm = zmm.as_mut().expect("folding started");
        let taken = core::mem::replace(pending, Pending::EMPTY);
        let (partial, held) = with_pending(&zmm.staging, *staged, taken);
        // Pending octets that complete the staged block: with markers every
        // 512 octets and runs of 508 between them, the partial block after
        // a run keeps its length, so if it is 60 or more every marker
        // completes it.
        let (partial, held, folded) = if held >= BLOCK_OCTETS {
            let x = load_accumulators(zmm);
            let x = [x[1], x[2], x[3], fold512(x[0], lanes(FOLD_256), partial)];
            let left = held - BLOCK_OCTETS;
            (leftover(taken, left), left, Some(x))
        } else {
            (partial, held, None)
        };
        if held + src.len() < BLOCK_OCTETS {
            if let Some(x) = folded {
                store_accumulators(zmm, x, 0);
            }
            *staged = add_to_staged::<COPY>(&mut zmm.staging, partial, held, dst, src);
            return;
        }
        // Nothing held is the common case when pieces come in whole blocks;
        // a plain load is cheaper than the masked one.
        let first = if held == 0 {
            first_block::<COPY>(dst, src)
        } else {
            complete::<COPY>(partial, held, dst, src)
        };
        let at = BLOCK_OCTETS - held;
        let rest = src.len() - at;
        let x = match folded {
            Some(x) => x,
            None => load_accumulators(zmm),
        };
        let (x, blocks, consumed) =
            fold_blocks::<COPY>(x, first, part::<COPY>(dst, at, rest), &src[at..]);
        store_accumulators(zmm, x, blocks);
        *staged = stage_rest::<COPY>(&mut zmm.staging, dst, src, at + consumed);
    }

    /// The last `left` of the `pending` octets (fewer than 16), at the
    /// start of a block.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn leftover(pending: Pending, left: usize) -> __m512i {
        let octets = pending
            .octets
            .checked_shr(8 * (pending.len - left) as u32)
            .unwrap_or(0);
        _mm512_maskz_mov_epi8(bits(0, left), _mm512_broadcast_i32x4(lane(octets)))
    }

    /// The 16 octets of `octets` (least significant first) as a lane.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn lane(octets: u128) -> __m128i {
        _mm_set_epi64x((octets >> 64) as i64, octets as i64)
    }

    /// [`super::fold_finish`]: joins and reduces the accumulators to one
    /// lane, then feeds the staged and the pending octets as a tail (facts
    /// 5, 6).
    #[target_feature(enable = "avx512f,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) fn fold_finish(folding: &Folding) -> u32 {
        let zmm = folding.zmm.as_ref().expect("folding started");
        let staged = &zmm.staging.0[..folding.staged];
        let lane = reduce512(join(load_accumulators(zmm)));
        let (lane, consumed) = fold_by_16::<false>(lane, &mut [], staged);
        let register = serial::<false>(lane_register(lane), &mut [], &staged[consumed..]);
        let (octets, len) = folding.pending();
        serial::<false>(register, &mut [], &octets[..len])
    }

    // --- An FPDU copied in one pass (fact 9) ------------------------------

    /// `x^(-8z-65) mod P` for `z` in 0..64: multiplies the register by
    /// `x^(-8z-32)` (fact 4), placing it in the last four octets of the
    /// block before the first, `z` octets of zeros before the output.
    const LEAD: [u32; BLOCK_OCTETS] = {
        let mut lead = [0; BLOCK_OCTETS];
        let mut z = 0;
        while z < BLOCK_OCTETS {
            lead[z] = x_inverse_pow_mod_p(8 * z as u64 + 65);
            z += 1;
        }
        lead
    };

    /// `x^e mod P` for any integer `e`.
    const fn x_pow_signed(e: i64) -> u32 {
        if e >= 0 {
            x_pow_mod_p(e as u64)
        } else {
            x_inverse_pow_mod_p(e.unsigned_abs())
        }
    }

    /// For `t` in 0..=64, the constants that fold lane `i` of a block
    /// forward by `16 (3 - i) - t` octets, `[k(8d+64), k(8d)]` for each `d`
    /// (fact 5) as 32-bit values, low lane first: the block's four lanes
    /// onto one, with `t` octets of zero padding after the block taken
    /// back out (fact 9).
    const REDUCE_TRAIL: [[u32; 8]; BLOCK_OCTETS + 1] = {
        let mut table = [[0; 8]; BLOCK_OCTETS + 1];
        let mut t = 0;
        while t <= BLOCK_OCTETS {
            let mut lane = 0;
            while lane < 4 {
                let d = 16 * (3 - lane as i64) - t as i64;
                table[t][2 * lane] = x_pow_signed(8 * d + 64 - 33);
                table[t][2 * lane + 1] = x_pow_signed(8 * d - 33);
                lane += 1;
            }
            t += 1;
        }
        table
    };

    // Checked against the powers they stand for: x^-65 undoes x^65, and
    // with no padding the reduction is `reduce512`'s.
    const _: () = {
        assert!(super::super::crc::mul_mod_p(LEAD[0], x_pow_mod_p(65)) == 1 << 31);
        let r = REDUCE_TRAIL[0];
        assert!(eq([r[0] as u64, r[1] as u64], FOLD_48));
        assert!(eq([r[2] as u64, r[3] as u64], FOLD_32));
        assert!(eq([r[4] as u64, r[5] as u64], FOLD_16));
        assert!(r[6] == x_pow_mod_p(31) && r[7] == x_inverse_pow_mod_p(33));
    };

    /// [`super::copy_fpdu`]: the length field, the pieces, PAD and the
    /// markers go into [`Gather`], which puts the output together, stores
    /// and folds it block by block.
    #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq,pclmulqdq,sse4.2")]
    pub(super) fn copy_fpdu<const MARKERS: bool, T: Octet>(
        register: u32,
        out: &mut [u8],
        fpdu: &Fpdu<'_, T>,
    ) -> u32 {
        assert_eq!(MARKERS, fpdu.marker_at != usize::MAX);
        let mut gather = Gather::<MARKERS, T>::new(register, out, fpdu.marker_at);
        if !T::SHARED {
            // Plain pieces carry the whole ULPDU (`header_len` is 0), and
            // the kernel is the one it was before registered memory came
            // (with `put_head`'s loop in it too, LLVM kept its accumulators
            // in memory).
            assert_eq!(fpdu.header_len, 0, "a plain FPDU's header is a piece");
            gather.put_octets(u32::from(fpdu.ulpdu_length.swap_bytes()), 2);
        } else {
            gather.put_head(fpdu);
        }
        for piece in fpdu.pieces {
            gather.put(piece);
        }
        gather.put_zeros(fpdu.pad);
        gather.marker_if_due();
        gather.finish()
    }

    impl<const MARKERS: bool, S: Octet> Gather<'_, MARKERS, S> {
        /// ULPDU_Length (big-endian) and the header words after it, from
        /// registers: the FPDU's first 2 to 22 octets. Where they lie in
        /// the first block with no marker among them (most FPDUs), two
        /// dword permutes and two shifts move the words to their offset,
        /// and one masked move puts them in; otherwise a word at a time.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn put_head(&mut self, fpdu: &Fpdu<'_, S>) {
            let h = fpdu.header;
            assert!(fpdu.header_len <= 20, "at most 20 header octets");
            let words = [
                u32::from(fpdu.ulpdu_length.swap_bytes()) | h[0] << 16,
                h[0] >> 16 | h[1] << 16,
                h[1] >> 16 | h[2] << 16,
                h[2] >> 16 | h[3] << 16,
                h[3] >> 16 | h[4] << 16,
                h[4] >> 16,
            ];
            let head = 2 + fpdu.header_len;
            let fill = self.fill();
            if self.at == 0 && fill + head <= BLOCK_OCTETS && (!MARKERS || self.marker_at >= head) {
                self.reserve(head);
                let [w0, w1, w2, w3, w4, w5] = words.map(|w| w as i32);
                let v = _mm512_setr_epi32(w0, w1, w2, w3, w4, w5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
                // Dword `d` of the block takes word `d - q` shifted up by
                // `r` octets, and the top of word `d - q - 1`.
                let (q, r) = (fill / 4, (fill % 4) as i32);
                let iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
                let index = _mm512_sub_epi32(iota, _mm512_set1_epi32(q as i32));
                let a = _mm512_maskz_permutexvar_epi32((0x3f_u32 << q) as u16, index, v);
                let index = _mm512_sub_epi32(index, _mm512_set1_epi32(1));
                let b = _mm512_maskz_permutexvar_epi32((0x3f_u32 << (q + 1)) as u16, index, v);
                // A shift by 32 leaves zero (r = 0: nothing comes from below).
                let up = _mm512_sll_epi32(a, _mm_cvtsi32_si128(8 * r));
                let down = _mm512_srl_epi32(b, _mm_cvtsi32_si128(32 - 8 * r));
                let placed = _mm512_or_si512(up, down);
                self.partial = _mm512_mask_mov_epi8(self.partial, bits(fill, fill + head), placed);
                self.at = head;
                if fill + head == BLOCK_OCTETS {
                    self.complete();
                }
                return;
            }
            for (i, word) in words.into_iter().enumerate() {
                let n = head.saturating_sub(4 * i).min(4);
                if n == 0 {
                    break;
                }
                self.put_octets(word, n);
            }
        }
    }

    /// An output put together from pieces in blocks that start on cache
    /// line boundaries (fact 9): the first `lead` octets of the first block
    /// lie before the output, and are zero for the CRC. Each block is put
    /// together in `partial`, then stored once (masked where it overhangs
    /// the output) and folded; pieces that cover whole blocks go straight
    /// from load to store and fold.
    ///
    /// One `Gather` type per kind of octet it copies (`S`), so that each of
    /// its functions has one caller, in one kernel, and is inlined there
    /// (one shared by the plain and the registered kernel was kept apart,
    /// and the accumulators went to memory).
    struct Gather<'o, const MARKERS: bool, S: Octet> {
        out: &'o mut [u8],
        /// The output's offset in its cache line.
        lead: usize,
        /// Octets of the output assembled so far.
        at: usize,
        /// The block being assembled: its octets below [`Gather::fill`]
        /// are assembled, the rest zero.
        partial: __m512i,
        /// The accumulators, oldest first (fact 8).
        x: [__m512i; 4],
        /// Where the next marker goes; `usize::MAX` without `MARKERS`.
        marker_at: usize,
        octets: core::marker::PhantomData<S>,
    }

    impl<'o, const MARKERS: bool, S: Octet> Gather<'o, MARKERS, S> {
        /// Nothing assembled; the register rides in the block before the
        /// first (fact 9).
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,pclmulqdq,sse4.2")]
        fn new(register: u32, out: &'o mut [u8], marker_at: usize) -> Gather<'o, MARKERS, S> {
            let lead = out.as_ptr() as usize % BLOCK_OCTETS;
            let shifted = crc_u64(0, clmul_u32(register, u64::from(LEAD[lead])).to_le_bytes());
            let zero = _mm512_setzero_si512();
            Gather {
                out,
                lead,
                at: 0,
                partial: zero,
                // The last 4 octets of the block: 32-bit lane 15.
                x: [
                    zero,
                    zero,
                    zero,
                    _mm512_maskz_set1_epi32(1 << 15, shifted as i32),
                ],
                marker_at,
                octets: core::marker::PhantomData,
            }
        }

        /// Copies `src`, with the markers that fall before its octets.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn put(&mut self, src: &[S]) {
            if !MARKERS {
                self.copy(src);
                return;
            }
            // One call of each kernel function, so that LLVM inlines them.
            let mut src = src;
            loop {
                let due = self.marker_at - self.at;
                if due == RUN_LEN && src.len() > RUN_LEN && self.at >= self.fill() {
                    src = self.periods(src);
                }
                let (run, rest) = src.split_at(src.len().min(self.marker_at - self.at));
                self.copy(run);
                if rest.is_empty() {
                    return;
                }
                self.marker_if_due();
                src = rest;
            }
        }

        /// Copies `src`, which starts right after a marker and runs past
        /// the next, period by period: each period is [`RUN_LEN`] octets of
        /// `src` and the marker after them, 512 octets of output and so
        /// exactly eight blocks, with the block boundaries and the marker
        /// in the same places in every period (fact 9). So the loop has
        /// no branch that depends on the data, its masks are fixed, and
        /// the eight blocks fold into the four accumulators in turn, which
        /// keep their order. Returns the rest of `src`, at most [`RUN_LEN`]
        /// octets.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn periods<'s>(&mut self, src: &'s [S]) -> &'s [S] {
            let fill = self.fill();
            // The period's first block starts in the output.
            assert!(self.marker_at - self.at == RUN_LEN && self.at >= fill);
            // A marker goes in only when an octet follows it.
            let count = (src.len() - 1) / RUN_LEN;
            self.reserve(MARKER_INTERVAL * count);
            let (periods, _) = src[..RUN_LEN * count].as_chunks::<RUN_LEN>();
            if fill < 4 {
                self.periods_straddling(periods);
            } else {
                self.periods_inside(periods);
            }
            &src[RUN_LEN * count..]
        }

        /// [`Gather::periods`] when the marker lies inside a block, ending
        /// at `fill` (at least 4). The first block of a period is the last
        /// octets of the run before, the marker and the first of its own
        /// run. After the first period both runs are in `periods`, one
        /// after the other: one load takes the block from `fill` octets
        /// before the run, and the same octets moved down by 4 (one
        /// `valignd`) are the run before's, so two blends put the block
        /// together, and nothing is carried from one period to the next
        /// but the marker, advanced by 512 octets of FPDUPTR with one add.
        /// (Loading the run before's octets from memory, masked or not,
        /// measured slower.)
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn periods_inside(&mut self, periods: &[[S; RUN_LEN]]) {
            let fill = self.fill();
            let by_256 = lanes(FOLD_256);
            let mut x = self.x;
            let (before, mask) = (bits(0, fill - 4), bits(fill - 4, fill));
            // The marker at the end of the first period, rotated so that
            // its octets land at `fill - 4 .. fill`; each next one's
            // FPDUPTR is 512 more, 2 more in its third octet.
            let rotation = 8 * (fill % 4) as u32;
            let word = Fpdu::<u8>::marker(self.at + RUN_LEN).rotate_left(rotation);
            let mut marker = _mm512_set1_epi32(word as i32);
            let step = _mm512_set1_epi32((2u32 << 16).rotate_left(rotation) as i32);
            let flat = periods.as_flattened();
            for (k, run) in periods.iter().enumerate() {
                let start = self.at - fill;
                let to = &mut self.out[start..start + MARKER_INTERVAL];
                let (to, _) = to.as_chunks_mut::<64>();
                let first = if k == 0 {
                    let from = run.as_ptr().cast::<u8>().wrapping_sub(fill);
                    let own = load_masked(bits(fill, BLOCK_OCTETS), from, &run[..64 - fill]);
                    _mm512_or_si512(self.partial, own)
                } else {
                    let at = RUN_LEN * k - fill;
                    let own = load_piece(flat[at..at + 64].try_into().expect("64 octets"));
                    // Octet `p` of `own` shifted down by 4 octets: the
                    // run before's last octets, `p + 4` of `own`.
                    let back = _mm512_alignr_epi32::<1>(own, own);
                    let back = _mm512_mask_mov_epi8(back, mask, marker);
                    marker = _mm512_add_epi8(marker, step);
                    _mm512_mask_mov_epi8(own, before | mask, back)
                };
                store512(&mut to[0], first);
                x[0] = fold512(x[0], by_256, first);
                for j in 1..8 {
                    let at = 64 * j - fill;
                    let v = load_piece(run[at..at + 64].try_into().expect("64 octets"));
                    store512(&mut to[j], v);
                    x[j % 4] = fold512(x[j % 4], by_256, v);
                }
                self.at += MARKER_INTERVAL;
                self.marker_at += MARKER_INTERVAL;
            }
            self.x = x;
            let last = periods.last().expect("a period");
            let tail = load_into(_mm512_setzero_si512(), 0, &last[512 - fill..]);
            self.partial = _mm512_mask_mov_epi8(tail, mask, marker);
        }

        /// [`Gather::periods`] when the marker straddles two blocks, ending
        /// at `fill` (under 4) in the first block of the next period.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn periods_straddling(&mut self, periods: &[[S; RUN_LEN]]) {
            let fill = self.fill();
            let (by_256, zero) = (lanes(FOLD_256), _mm512_setzero_si512());
            let (mut x, mut partial) = (self.x, self.partial);
            let (marker, straddle) = (bits(0, fill), bits(60 + fill, BLOCK_OCTETS));
            for run in periods {
                let start = self.at - fill;
                let to = &mut self.out[start..start + MARKER_INTERVAL];
                let (to, _) = to.as_chunks_mut::<64>();
                // Every 32-bit lane holds the marker rotated so that its
                // octets land at `fill - 4 .. fill` (mod 64).
                let word = Fpdu::<u8>::marker(self.at + RUN_LEN).rotate_left(8 * (fill % 4) as u32);
                let words = _mm512_set1_epi32(word as i32);
                let first = load_into(partial, fill, &run[..BLOCK_OCTETS - fill]);
                store512(&mut to[0], first);
                x[0] = fold512(x[0], by_256, first);
                for j in 1..7 {
                    let at = 64 * j - fill;
                    let v = load_piece(run[at..at + 64].try_into().expect("64 octets"));
                    store512(&mut to[j], v);
                    x[j % 4] = fold512(x[j % 4], by_256, v);
                }
                partial = _mm512_maskz_mov_epi8(marker, words);
                let last = load_into(zero, 0, &run[448 - fill..]);
                let last = _mm512_mask_mov_epi8(last, straddle, words);
                store512(&mut to[7], last);
                x[3] = fold512(x[3], by_256, last);
                self.at += MARKER_INTERVAL;
                self.marker_at += MARKER_INTERVAL;
            }
            (self.x, self.partial) = (x, partial);
        }

        /// [`Gather::octets`], with the markers that fall before them.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn put_octets(&mut self, value: u32, len: usize) {
            let (mut value, mut len) = (value, len);
            loop {
                let n = len.min(self.marker_at - self.at);
                self.octets(value, n);
                value = value.checked_shr(8 * n as u32).unwrap_or(0);
                len -= n;
                if len == 0 {
                    return;
                }
                self.marker_if_due();
            }
        }

        /// [`Gather::zeros`], with the markers that fall before them.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn put_zeros(&mut self, len: usize) {
            let mut len = len;
            loop {
                let n = len.min(self.marker_at - self.at);
                self.zeros(n);
                len -= n;
                if len == 0 {
                    return;
                }
                self.marker_if_due();
            }
        }

        /// Puts the marker in if one goes where the output is.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn marker_if_due(&mut self) {
            if MARKERS && self.at == self.marker_at {
                self.octets(Fpdu::<u8>::marker(self.at), 4);
                self.marker_at += MARKER_INTERVAL;
            }
        }

        /// Octets of the current block assembled.
        #[inline(always)]
        fn fill(&self) -> usize {
            (self.lead + self.at) % BLOCK_OCTETS
        }

        /// Octets of the output still to come. Panics if fewer than `len`.
        #[inline(always)]
        fn reserve(&self, len: usize) {
            assert!(
                len <= self.out.len() - self.at,
                "the FPDU overflows the output"
            );
        }

        /// Folds the block `v`, the one after the last (fact 8).
        #[inline]
        #[target_feature(enable = "avx512f,vpclmulqdq")]
        fn fold_in(&mut self, v: __m512i) {
            let [a, b, c, d] = self.x;
            self.x = [b, c, d, fold512(a, lanes(FOLD_256), v)];
        }

        /// Stores and folds the assembled block, which ends at `at`.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn complete(&mut self) {
            debug_assert_eq!(self.fill(), 0);
            store_part(self.out, self.at, self.partial, BLOCK_OCTETS);
            self.fold_in(self.partial);
            self.partial = _mm512_setzero_si512();
        }

        /// Copies `src`: into the current block, then whole blocks, then
        /// the start of the next block.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn copy(&mut self, src: &[S]) {
            self.reserve(src.len());
            let mut src = src;
            let fill = self.fill();
            if fill != 0 {
                let n = (BLOCK_OCTETS - fill).min(src.len());
                self.partial = load_into(self.partial, fill, &src[..n]);
                self.at += n;
                src = &src[n..];
                if fill + n < BLOCK_OCTETS {
                    return;
                }
                self.complete();
            }
            let (blocks, rest) = src.as_chunks::<64>();
            let whole = BLOCK_OCTETS * blocks.len();
            let to = &mut self.out[self.at..self.at + whole];
            self.x = copy_fold::<MARKERS, S>(self.x, to, blocks);
            self.at += whole;
            if !rest.is_empty() {
                self.partial = load_into(_mm512_setzero_si512(), 0, rest);
                self.at += rest.len();
            }
        }

        /// Puts the first `len` octets of `value` (at most 4) in place.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn octets(&mut self, value: u32, len: usize) {
            assert!(len <= 4, "at most 4 octets");
            self.reserve(len);
            let (mut value, mut len) = (value, len);
            // A run that straddles a block boundary takes two turns.
            while len > 0 {
                let fill = self.fill();
                let n = (BLOCK_OCTETS - fill).min(len);
                // Every 32-bit lane holds `value` rotated so that its octet
                // `t` lands at `fill + t`.
                let word = value.rotate_left(8 * (fill % 4) as u32);
                let words = _mm512_set1_epi32(word as i32);
                self.partial = _mm512_mask_mov_epi8(self.partial, bits(fill, fill + n), words);
                self.at += n;
                value = value.checked_shr(8 * n as u32).unwrap_or(0);
                len -= n;
                if fill + n == BLOCK_OCTETS {
                    self.complete();
                }
            }
        }

        /// `len` zero octets: the block is zero past its fill already.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq")]
        fn zeros(&mut self, len: usize) {
            self.reserve(len);
            let mut len = len;
            while len > 0 {
                let fill = self.fill();
                let n = (BLOCK_OCTETS - fill).min(len);
                self.at += n;
                len -= n;
                if fill + n == BLOCK_OCTETS {
                    self.complete();
                }
            }
        }

        /// Stores the last, partial block, joins it (zero-padded to a
        /// whole one) and the accumulators into one block, and reduces
        /// that to the register with the padding taken back out (fact 9).
        /// With no partial block the padding is a whole zero block.
        #[inline]
        #[target_feature(enable = "avx512f,avx512bw,bmi2,vpclmulqdq,sse4.2")]
        fn finish(self) -> u32 {
            assert!(self.at == self.out.len(), "the FPDU fills the output");
            let fill = self.fill();
            store_part(self.out, self.at, self.partial, fill);
            let block = join_with(self.x, self.partial);
            lane_register(reduce_trail(block, BLOCK_OCTETS - fill))
        }
    }

    /// Joins four accumulators, oldest first, and the block after them
    /// into that block: `x[i]` folds forward by `64 (4 - i)` octets. The
    /// eight products do not depend on each other, so this is one multiply
    /// and two three-way XORs in a row.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn join_with(x: [__m512i; 4], last: __m512i) -> __m512i {
        let (a, b) = products(x[0], lanes(FOLD_256));
        let (c, d) = products(x[1], lanes(FOLD_192));
        let (e, f) = products(x[2], lanes(FOLD_128));
        let (g, h) = products(x[3], lanes(FOLD_64));
        let left = _mm512_ternarylogic_epi64::<0x96>(a, b, c);
        let middle = _mm512_ternarylogic_epi64::<0x96>(d, e, f);
        let right = _mm512_ternarylogic_epi64::<0x96>(g, h, last);
        _mm512_ternarylogic_epi64::<0x96>(left, middle, right)
    }

    /// The lane congruent to `block`'s four lanes folded onto the last,
    /// and then moved back by `trail` octets (fact 9): one multiply of all
    /// four lanes by [`REDUCE_TRAIL`]`[trail]`, then the four products
    /// added.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn reduce_trail(block: __m512i, trail: usize) -> __m128i {
        let constants = &REDUCE_TRAIL[trail];
        // SAFETY: `constants` is 32 readable octets; `loadu` needs no
        // alignment.
        let constants = unsafe { _mm256_loadu_si256(constants.as_ptr().cast()) };
        let (h, l) = products(block, _mm512_cvtepu32_epi64(constants));
        let y = _mm512_xor_si512(h, l);
        // Lanes 1 to 3 are extracted side by side rather than by halving.
        let low = _mm_xor_si128(_mm512_castsi512_si128(y), _mm512_extracti32x4_epi32::<1>(y));
        let high = _mm_xor_si128(
            _mm512_extracti32x4_epi32::<2>(y),
            _mm512_extracti32x4_epi32::<3>(y),
        );
        _mm_xor_si128(low, high)
    }

    /// `partial` with octets `at..at + src.len()` loaded from `src`, by one
    /// masked load. Panics past the block's end.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn load_into<T: Octet>(partial: __m512i, at: usize, src: &[T]) -> __m512i {
        let end = at + src.len();
        assert!(end <= BLOCK_OCTETS);
        let from = src.as_ptr().cast::<u8>().wrapping_sub(at);
        let mask = bits(at, end);
        if T::SHARED {
            let mut v = partial;
            // SAFETY: as below; the load is opaque to the compiler (module
            // documentation, Safety), and reads nothing else.
            unsafe {
                asm!(
                    "vmovdqu8 {v}{{{k}}}, zmmword ptr [{p}]",
                    v = inout(zmm_reg) v,
                    k = in(kreg) mask,
                    p = in(reg) from,
                    options(nostack, preserves_flags, readonly),
                );
            }
            return v;
        }
        // SAFETY: the masked load reads octet `i` at `from + i` only for
        // the set bits `i` in `at..end`, which is `src[i - at]`, inside
        // `src` (module documentation, Safety).
        unsafe { _mm512_mask_loadu_epi8(partial, mask, from.cast()) }
    }

    /// The 64 octets of `from`: one unaligned load, opaque for
    /// [`Octet::SHARED`] octets (module documentation, Safety).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn load_piece<T: Octet>(from: &[T; 64]) -> __m512i {
        let p = from.as_ptr().cast::<u8>();
        if T::SHARED {
            let v: __m512i;
            // SAFETY: `from` is 64 readable octets; `vmovdqu64` needs no
            // alignment; the block reads nothing else.
            unsafe {
                asm!(
                    "vmovdqu64 {v}, zmmword ptr [{p}]",
                    v = out(zmm_reg) v,
                    p = in(reg) p,
                    options(nostack, preserves_flags, readonly),
                );
            }
            return v;
        }
        // SAFETY: `from` is 64 readable octets; `loadu` needs no alignment.
        unsafe { _mm512_loadu_si512(p.cast()) }
    }

    /// The octets of `src` at their places in a block, zero elsewhere: a
    /// zero-masked load with `mask`, whose set bits `i` read `from + i`,
    /// which is `src[i - (src - from)]`.
    ///
    /// Panics unless `mask` is exactly the bits `src - from ..` as many
    /// as `src` has, inside the block.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn load_masked<T: Octet>(mask: u64, from: *const u8, src: &[T]) -> __m512i {
        let at = (src.as_ptr() as usize).wrapping_sub(from as usize);
        assert!(at + src.len() <= BLOCK_OCTETS && mask == bits(at, at + src.len()));
        if T::SHARED {
            let v: __m512i;
            // SAFETY: as below; the load is opaque to the compiler (module
            // documentation, Safety), and reads nothing else.
            unsafe {
                asm!(
                    "vmovdqu8 {v}{{{k}}}{{z}}, zmmword ptr [{p}]",
                    v = out(zmm_reg) v,
                    k = in(kreg) mask,
                    p = in(reg) from,
                    options(nostack, preserves_flags, readonly),
                );
            }
            return v;
        }
        // SAFETY: the masked load reads octet `i` at `from + i` only for
        // the set bits `i` in `at..at + src.len()`, which is `src[i - at]`,
        // inside `src` (module documentation, Safety).
        unsafe { _mm512_maskz_loadu_epi8(mask, from.cast()) }
    }

    /// Stores octets `..fill` of `block` so that octet `fill` would land at
    /// `out[end]`; those that would land before `out` (the first block's
    /// lead) are not stored.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,bmi2")]
    fn store_part(out: &mut [u8], end: usize, block: __m512i, fill: usize) {
        assert!(end <= out.len() && fill <= BLOCK_OCTETS);
        // Block octets `skip..fill` land in `out[end + skip - fill..end]`.
        let skip = fill.saturating_sub(end);
        let to = &mut out[end + skip - fill..end];
        let at = to.as_mut_ptr().wrapping_sub(skip);
        // SAFETY: the masked store writes octet `i` at `at + i` only for the
        // set bits `i` in `skip..fill`, which is `to[i - skip]`, inside `to`.
        unsafe { _mm512_mask_storeu_epi8(at.cast(), bits(skip, fill), block) };
    }

    /// Copies whole blocks from `blocks` to `to` (as long) and folds them
    /// after the accumulators `x`, oldest first (fact 8): four at a time as
    /// the main loop, then one at a time. `_KERNEL` only makes one function
    /// per kernel, each with one caller (see `Gather`).
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn copy_fold<const _KERNEL: bool, T: Octet>(
        x: [__m512i; 4],
        to: &mut [u8],
        blocks: &[[T; 64]],
    ) -> [__m512i; 4] {
        let by_256 = lanes(FOLD_256);
        let (groups, singles) = blocks.as_chunks::<4>();
        let (to_groups, to_singles) = to.as_chunks_mut::<256>();
        let mut x = x;
        for (group, to) in groups.iter().zip(to_groups) {
            let v = [
                load_piece(&group[0]),
                load_piece(&group[1]),
                load_piece(&group[2]),
                load_piece(&group[3]),
            ];
            store4(to, v);
            x = fold4(x, by_256, v);
        }
        // At most three blocks remain. Written out: as a loop, LLVM makes
        // the copy a `memcpy` call and folds what it stored, reloaded.
        let (to_singles, _) = to_singles.as_chunks_mut::<64>();
        let (mut from, mut to) = (singles.iter(), to_singles.iter_mut());
        let x = copy_fold_one(x, by_256, from.next(), to.next());
        let x = copy_fold_one(x, by_256, from.next(), to.next());
        let x = copy_fold_one(x, by_256, from.next(), to.next());
        debug_assert!(from.next().is_none());
        x
    }

    /// The accumulators `x` with the block `from` copied to `to` and folded
    /// in after them, if there is one.
    #[inline]
    #[target_feature(enable = "avx512f,vpclmulqdq")]
    fn copy_fold_one<T: Octet>(
        x: [__m512i; 4],
        by_256: __m512i,
        from: Option<&[T; 64]>,
        to: Option<&mut [u8; 64]>,
    ) -> [__m512i; 4] {
        let Some(from) = from else {
            return x;
        };
        let v = load_piece(from);
        store512(to.expect("`to` as long as `from`"), v);
        let [a, b, c, d] = x;
        [b, c, d, fold512(a, by_256, v)]
    }
}
