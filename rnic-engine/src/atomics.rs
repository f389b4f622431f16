//! The atomic unit: RFC 7306 (draft-ietf-storm-rdmap-ext-00) §5.1 operations on
//! registered memory.
//!
//! draft-ietf-storm-rdmap-ext-00 §5.3: "Atomicity of the RMW on the responder's node by the
//! Atomic Operation SHALL be assured in the presence of concurrent atomic
//! accesses by other QPs on the same RNIC." Every operation here is one
//! compare-and-swap loop on the target's `AtomicU64` word ([`Region::word`]),
//! so no other QP's atomic, on this core or another, and no local atomic
//! through [`Region`]'s API interleaves between its read and its write.
//! Plain RDMA Writes to an atomic target are not ordered against it, as the
//! seed allows ("it is recommended that the applications do not use the
//! buffer addresses used for atomic operations for other RDMA operations").
//!
//! [`Region::word`]: crate::mem::Region::word
//! [`Region`]: crate::mem::Region

use std::sync::atomic::{AtomicU64, Ordering};

/// draft-ietf-storm-rdmap-ext-00 §5.1.1 masked FetchAdd: fields end at set bits of `mask` (a
/// carry out of a bit whose mask bit is set is dropped); mask 0 is a plain
/// 64-bit add. Computed a word at a time: with each field's top bit
/// cleared no carry can cross into the next field, and the top bits are
/// then the XOR of the operands' top bits and the carry that reached them.
pub const fn masked_add(original: u64, add: u64, mask: u64) -> u64 {
    let low = (original & !mask).wrapping_add(add & !mask);
    low ^ ((original ^ add) & mask)
}

/// draft-ietf-storm-rdmap-ext-00 §5.1.3 masked CmpSwap: when the masked compare matches, the
/// masked swap bits replace the original's.
pub const fn masked_cmp_swap(
    original: u64,
    compare: u64,
    compare_mask: u64,
    swap: u64,
    swap_mask: u64,
) -> u64 {
    if (compare ^ original) & compare_mask == 0 {
        (original & !swap_mask) | (swap & swap_mask)
    } else {
        original
    }
}

/// Applies `f` to the word atomically and returns the value before.
fn apply(word: &AtomicU64, f: impl Fn(u64) -> u64) -> u64 {
    match word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| Some(f(old))) {
        Ok(old) | Err(old) => old,
    }
}

/// Masked FetchAdd on a word; returns the original value.
pub fn fetch_add(word: &AtomicU64, add: u64, mask: u64) -> u64 {
    apply(word, |old| masked_add(old, add, mask))
}

/// Masked CmpSwap on a word; returns the original value.
pub fn cmp_swap(
    word: &AtomicU64,
    compare: u64,
    compare_mask: u64,
    swap: u64,
    swap_mask: u64,
) -> u64 {
    apply(word, |old| {
        masked_cmp_swap(old, compare, compare_mask, swap, swap_mask)
    })
}

/// The seed's unmasked Swap (AOpCode 1); returns the original value.
pub fn swap(word: &AtomicU64, value: u64) -> u64 {
    word.swap(value, Ordering::AcqRel)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// draft-ietf-storm-rdmap-ext-00 §5.1.1's pseudo-code, bit by bit, as written.
    fn pseudo_code_add(original: u64, add: u64, mask: u64) -> u64 {
        let mut bit_location = 1u64;
        let mut carry = 0u64;
        let mut remote = 0u64;
        for bit in 0..64 {
            if bit != 0 {
                bit_location <<= 1;
            }
            let val1 = u64::from(original & bit_location != 0);
            let val2 = u64::from(add & bit_location != 0);
            let mut sum = carry + val1 + val2;
            carry = u64::from(sum & 2 != 0);
            sum &= 1;
            if sum != 0 {
                remote |= bit_location;
            }
            carry = u64::from(carry != 0 && mask & bit_location == 0);
        }
        remote
    }

    #[test]
    fn masked_add_matches_the_seed_pseudo_code() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let (a, b, m) = (next(), next(), next() & next());
            assert_eq!(
                masked_add(a, b, m),
                pseudo_code_add(a, b, m),
                "{a:#x} + {b:#x} mask {m:#x}"
            );
        }
        assert_eq!(masked_add(u64::MAX, 1, 0), 0, "mask 0: one 64-bit add");
        // Two 32-bit fields: the low field's carry stops at bit 31.
        assert_eq!(
            masked_add(0x0000_0001_FFFF_FFFF, 1, 0x8000_0000_8000_0000),
            0x0000_0001_0000_0000
        );
    }

    #[test]
    fn cmp_swap_and_swap() {
        let word = AtomicU64::new(0x1111_2222_3333_4444);
        assert_eq!(
            cmp_swap(
                &word,
                0x9999_2222_0000_0000,
                0x0000_FFFF_0000_0000,
                0xAAAA_BBBB_CCCC_DDDD,
                0xFFFF_0000_0000_0000
            ),
            0x1111_2222_3333_4444
        );
        assert_eq!(word.load(Ordering::Relaxed), 0xAAAA_2222_3333_4444);
        assert_eq!(
            cmp_swap(&word, 0, u64::MAX, 5, u64::MAX),
            0xAAAA_2222_3333_4444,
            "no match: unchanged"
        );
        assert_eq!(word.load(Ordering::Relaxed), 0xAAAA_2222_3333_4444);
        // Swap sent as CmpSwap with compare mask 0 and swap mask all ones.
        assert_eq!(cmp_swap(&word, 0, 0, 7, u64::MAX), 0xAAAA_2222_3333_4444);
        assert_eq!(swap(&word, 9), 7);
        assert_eq!(fetch_add(&word, 1, 0), 9);
        assert_eq!(word.load(Ordering::Relaxed), 10);
    }

    #[test]
    fn concurrent_fetch_adds_are_exact() {
        let word = std::sync::Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let word = word.clone();
                std::thread::spawn(move || {
                    for _ in 0..100_000 {
                        fetch_add(&word, 3, 0);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(word.load(Ordering::Relaxed), 1_200_000);
    }
}
