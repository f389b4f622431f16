//! Copies between registered memory and plain buffers: the RNIC's DMA.
//!
//! This is the engine's only `unsafe` outside the CRC kernels
//! (`mpa/simd.rs`). Registered memory is stored as `AtomicU64` words
//! ([`super::Region`]) because a peer's RDMA Write may land while another
//! thread reads the same octets, and a racing non-atomic access is
//! undefined behaviour the compiler may exploit. Copying word by word with
//! relaxed atomics is sound but slow (LLVM never vectorises atomics: 30
//! GB/s for stores and 5 GB/s for a naive byte-exact load loop on this
//! machine, against 49 GB/s for `memcpy` of 64 KiB), so on x86-64 the copy
//! is inline assembly: `rep movsb` for short and long copies (FSRM and ERMS
//! make it as fast as `memcpy`: 52 and 50 GB/s at 64 KiB) and 64-octet
//! AVX-512 moves between (a segment's payload; see `x86::copy`).
//!
//! Why that is sound: the compiler treats an `asm!` block as opaque code
//! that reads and writes the memory its pointer operands reach, so it can
//! neither assume the octets are unchanged by other threads nor tear,
//! duplicate or reorder the accesses inside; what remains is the hardware's
//! behaviour, where the copy is a sequence of byte or vector stores (each
//! octet written whole) and a racing reader sees old or new octets, exactly
//! like a DMA engine writing host memory. The 64-bit atomics of the atomic unit are locked
//! read-modify-writes, which byte stores never split. Everywhere else
//! (other architectures, and under Miri, which cannot run assembly) the
//! copy falls back to relaxed atomic word accesses with the same
//! semantics.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Copies `src` into `words` from octet `offset`.
///
/// # Panics
/// If the range lies outside `words` (callers check it first).
pub(super) fn copy_in(words: &[AtomicU64], offset: usize, src: &[u8]) {
    assert!(
        offset
            .checked_add(src.len())
            .is_some_and(|end| end <= words.len() * 8),
        "checked by the caller"
    );
    if src.is_empty() {
        return;
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let dst = words.as_ptr().cast::<u8>().cast_mut();
        // SAFETY: `offset + src.len()` lies inside `words` (asserted above),
        // so the destination range is within the slice's allocation, and
        // `words` is made of `UnsafeCell`s (`AtomicU64`), which may be
        // written through a pointer derived from a shared reference. `src`
        // is a valid slice of `src.len()` octets that cannot overlap
        // `words` (a `&[u8]` and a `&[AtomicU64]` never share memory). What
        // other threads do to the destination meanwhile is a hardware race
        // of the kind the module comment explains, invisible to the
        // compiler.
        #[allow(unsafe_code)]
        unsafe {
            x86::copy(dst.add(offset), src.as_ptr(), src.len());
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    portable::copy_in(words, offset, src);
}

/// Copies octets of `words` from `offset` into `dst`.
///
/// # Panics
/// If the range lies outside `words` (callers check it first).
pub(super) fn copy_out(words: &[AtomicU64], offset: usize, dst: &mut [u8]) {
    assert!(
        offset
            .checked_add(dst.len())
            .is_some_and(|end| end <= words.len() * 8),
        "checked by the caller"
    );
    if dst.is_empty() {
        return;
    }
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let src = words.as_ptr().cast::<u8>();
        // SAFETY: the source range lies inside `words` (asserted above);
        // `dst` is an exclusive slice of `dst.len()` octets, disjoint from
        // `words`. The copy reads each source octet with byte-or-wider
        // loads whatever other threads do to them meanwhile (module
        // comment).
        #[allow(unsafe_code)]
        unsafe {
            x86::copy(dst.as_mut_ptr(), src.add(offset), dst.len());
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    portable::copy_out(words, offset, dst);
}

/// Octets `offset..offset + len` of `words` as a slice of `AtomicU8`, for
/// the one-pass framer, which reads them with opaque loads only (inline
/// assembly, as the copies here: `mpa::simd`'s module documentation).
///
/// # Panics
/// If the range lies outside `words` (callers check it first).
pub(super) fn octets(words: &[AtomicU64], offset: usize, len: usize) -> &[AtomicU8] {
    assert!(
        offset
            .checked_add(len)
            .is_some_and(|end| end <= words.len() * 8),
        "checked by the caller"
    );
    let base = words.as_ptr().cast::<AtomicU8>();
    // SAFETY: the range lies inside `words` (asserted above), which lives
    // as long as the returned slice. `AtomicU8` has the size of a `u8` and
    // an alignment of 1, so any octet of the words is one; like
    // `AtomicU64`, it is an `UnsafeCell`, so a shared slice of them may
    // alias memory other threads write. No atomic operation of another
    // size than the words' is made through it: the framer only loads from
    // it in assembly.
    #[allow(unsafe_code)]
    unsafe {
        std::slice::from_raw_parts(base.add(offset), len)
    }
}

/// The copy in assembly.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[allow(unsafe_code)]
mod x86 {
    /// From this many octets `rep movsb` is as fast as anything (ERMS);
    /// below it, and from [`VECTOR_MIN`], 64-octet AVX-512 moves are (at
    /// 1428 octets, a 1448-EMSS segment's payload: 11.0 ns against 17.5
    /// ns for `rep movsb` and 10.8 ns for glibc's `memcpy`).
    const REP_MIN: usize = 2048;
    /// Shorter copies use `rep movsb` (FSRM makes it quick).
    const VECTOR_MIN: usize = 64;

    /// Copies `n` octets from `src` to `dst`.
    ///
    /// # Safety
    /// `src` must be valid for reads and `dst` for writes of `n` octets,
    /// and the ranges must not overlap. Other threads may access them at
    /// the same time (the module comment says what they see).
    #[inline]
    pub(super) unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
        if (VECTOR_MIN..REP_MIN).contains(&n) && std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the caller's contract, `n >= 64`, and AVX-512F is
            // present. The loop copies 256 octets at a time, then 64; the
            // last 64 octets of the source, loaded first, are stored last
            // at `dst + n - 64`, which covers the remainder (re-storing
            // some octets with the values just stored). `vzeroupper` avoids
            // the AVX-SSE transition penalty after; `clobber_abi("C")`
            // tells the compiler every vector register may change.
            unsafe {
                core::arch::asm!(
                    "vmovdqu64 zmm4, [rsi + rcx - 64]",
                    "cmp rcx, 256",
                    "jb 3f",
                    "2:",
                    "vmovdqu64 zmm0, [rsi]",
                    "vmovdqu64 zmm1, [rsi + 64]",
                    "vmovdqu64 zmm2, [rsi + 128]",
                    "vmovdqu64 zmm3, [rsi + 192]",
                    "vmovdqu64 [rdi], zmm0",
                    "vmovdqu64 [rdi + 64], zmm1",
                    "vmovdqu64 [rdi + 128], zmm2",
                    "vmovdqu64 [rdi + 192], zmm3",
                    "add rsi, 256",
                    "add rdi, 256",
                    "sub rcx, 256",
                    "cmp rcx, 256",
                    "jae 2b",
                    "3:",
                    "cmp rcx, 64",
                    "jbe 4f",
                    "vmovdqu64 zmm0, [rsi]",
                    "vmovdqu64 [rdi], zmm0",
                    "add rsi, 64",
                    "add rdi, 64",
                    "sub rcx, 64",
                    "jmp 3b",
                    "4:",
                    "vmovdqu64 [rdi + rcx - 64], zmm4",
                    "vzeroupper",
                    inout("rsi") src => _,
                    inout("rdi") dst => _,
                    inout("rcx") n => _,
                    // Every vector register: the block uses zmm0-4, and
                    // `vzeroupper` zeroes the upper halves of ymm0-15,
                    // which code built with AVX may keep values in.
                    clobber_abi("C"),
                    options(nostack),
                );
            }
        } else {
            // SAFETY: the caller's contract. `rep movsb` reads RCX octets at
            // RSI and writes them at RDI with the direction flag clear,
            // which Rust guarantees on entry to `asm!`; it touches no stack
            // and no flags.
            unsafe {
                core::arch::asm!(
                    "rep movsb",
                    inout("rcx") n => _,
                    inout("rdi") dst => _,
                    inout("rsi") src => _,
                    options(nostack, preserves_flags),
                );
            }
        }
    }
}

/// Relaxed atomic word accesses: the reference the assembly must agree
/// with, and the copy where there is no assembly.
#[cfg_attr(all(target_arch = "x86_64", not(miri)), allow(dead_code))]
pub(super) mod portable {
    use super::{AtomicU64, Ordering};

    /// Stores up to 8 octets that lie in one word, leaving the word's other
    /// octets as they are, in one atomic read-modify-write.
    fn merge(words: &[AtomicU64], at: usize, src: &[u8]) {
        let shift = at % 8;
        debug_assert!(shift + src.len() <= 8);
        let mut bytes = [0u8; 8];
        bytes[shift..shift + src.len()].copy_from_slice(src);
        let mut mask_bytes = [0u8; 8];
        mask_bytes[shift..shift + src.len()].fill(0xFF);
        let (bits, mask) = (u64::from_ne_bytes(bytes), u64::from_ne_bytes(mask_bytes));
        let _ = words[at / 8].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
            Some((old & !mask) | bits)
        });
    }

    pub(in crate::mem) fn copy_in(words: &[AtomicU64], offset: usize, src: &[u8]) {
        let (mut at, mut src) = (offset, src);
        if !at.is_multiple_of(8) && !src.is_empty() {
            let n = (8 - at % 8).min(src.len());
            merge(words, at, &src[..n]);
            at += n;
            src = &src[n..];
        }
        let (chunks, tail) = src.as_chunks::<8>();
        for (word, chunk) in words[at / 8..].iter().zip(chunks) {
            word.store(u64::from_ne_bytes(*chunk), Ordering::Relaxed);
        }
        at += chunks.len() * 8;
        if !tail.is_empty() {
            merge(words, at, tail);
        }
    }

    pub(in crate::mem) fn copy_out(words: &[AtomicU64], offset: usize, dst: &mut [u8]) {
        let (mut at, mut dst) = (offset, dst);
        if !at.is_multiple_of(8) && !dst.is_empty() {
            let skip = at % 8;
            let n = (8 - skip).min(dst.len());
            let word = words[at / 8].load(Ordering::Relaxed).to_ne_bytes();
            dst[..n].copy_from_slice(&word[skip..skip + n]);
            at += n;
            dst = &mut dst[n..];
        }
        let (chunks, tail) = dst.as_chunks_mut::<8>();
        for (chunk, word) in chunks.iter_mut().zip(&words[at / 8..]) {
            *chunk = word.load(Ordering::Relaxed).to_ne_bytes();
        }
        at += chunks.len() * 8;
        if !tail.is_empty() {
            let word = words[at / 8].load(Ordering::Relaxed).to_ne_bytes();
            let n = tail.len();
            tail.copy_from_slice(&word[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(len: usize) -> Vec<AtomicU64> {
        (0..len.div_ceil(8))
            .map(|i| AtomicU64::new(0x1111_1111_1111_1111u64.wrapping_mul(i as u64 + 1)))
            .collect()
    }

    fn snapshot(words: &[AtomicU64]) -> Vec<u8> {
        words
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_ne_bytes())
            .collect()
    }

    /// The copy in use and the portable reference agree on every
    /// alignment and length, and leave the octets around alone.
    #[test]
    fn copies_agree_with_the_reference() {
        let lengths = (0..48)
            .chain(60..70)
            .chain(250..262)
            .chain([319, 320, 321, 1428, 2047, 2048, 2049, 5000]);
        let lengths: Vec<usize> = lengths.collect();
        for offset in 0..24 {
            for &len in &lengths {
                let src: Vec<u8> = (0..len).map(|i| (i * 13 + offset) as u8 | 0x80).collect();
                let (fast, reference) = (words(5100), words(5100));
                copy_in(&fast, offset, &src);
                portable::copy_in(&reference, offset, &src);
                assert_eq!(
                    snapshot(&fast),
                    snapshot(&reference),
                    "copy_in offset {offset} len {len}"
                );
                let mut expected = snapshot(&words(5100));
                expected[offset..offset + len].copy_from_slice(&src);
                assert_eq!(snapshot(&fast), expected);

                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                copy_out(&fast, offset, &mut a);
                portable::copy_out(&fast, offset, &mut b);
                assert_eq!(a, src, "copy_out offset {offset} len {len}");
                assert_eq!(b, src, "portable copy_out offset {offset} len {len}");
            }
        }
    }

    /// Vector registers the compiler keeps live across the copy survive it
    /// (the vector copy ends with `vzeroupper`, which clears the upper
    /// halves of ymm0-15; the asm must declare that).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[test]
    fn live_vector_registers_survive_the_copy() {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return;
        }
        let target = words(128);
        // SAFETY: AVX2 is present (checked above).
        #[allow(unsafe_code)]
        let lanes = unsafe { hold_ymm_across_copy(&target) };
        let expected: Vec<i64> = (0..32).map(|i| 1000 + i * 2).collect();
        assert_eq!(lanes.to_vec(), expected);
    }

    /// Eight 256-bit values live across a vector-sized copy, then stored.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[allow(unsafe_code)]
    #[target_feature(enable = "avx2")]
    fn hold_ymm_across_copy(target: &[AtomicU64]) -> [i64; 32] {
        use core::arch::x86_64::*;
        // Computed at run time from opaque inputs, so that the compiler
        // keeps them in registers rather than rebuilding them after.
        let step = _mm256_set1_epi64x(std::hint::black_box(8));
        let v0 = _mm256_set_epi64x(
            std::hint::black_box(1006),
            std::hint::black_box(1004),
            std::hint::black_box(1002),
            std::hint::black_box(1000),
        );
        let v1 = _mm256_add_epi64(v0, step);
        let v2 = _mm256_add_epi64(v1, step);
        let v3 = _mm256_add_epi64(v2, step);
        let v4 = _mm256_add_epi64(v3, step);
        let v5 = _mm256_add_epi64(v4, step);
        let v6 = _mm256_add_epi64(v5, step);
        let v7 = _mm256_add_epi64(v6, step);
        let src = [0x42u8; 128];
        assert!(target.len() * 8 >= src.len());
        // SAFETY: `target` holds 128 octets (asserted), disjoint from `src`.
        unsafe {
            super::x86::copy(
                target.as_ptr().cast::<u8>().cast_mut(),
                src.as_ptr(),
                src.len(),
            )
        };
        let mut out = [0i64; 32];
        for (i, v) in [v0, v1, v2, v3, v4, v5, v6, v7].into_iter().enumerate() {
            // SAFETY: `out` has room for 4 i64 at 4 * i; unaligned store.
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(4 * i).cast(), v) };
        }
        out
    }

    #[test]
    #[should_panic(expected = "checked by the caller")]
    fn out_of_range_is_refused() {
        copy_in(&words(16), 10, &[0; 7]);
    }
}
