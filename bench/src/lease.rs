//! Leases of a server's registered memory: each client run a server serves
//! at the same time as others gets its own range of the one region, so the
//! runs' messages and credit words never overlap. First fit over a sorted
//! list of free ranges, coalesced on release; every range a multiple of
//! [`LEASE_ALIGN`]. Bounded: a run asking for more than is free is refused,
//! never given an overlapping range.

/// Every lease starts and ends on a multiple of this (a page).
pub const LEASE_ALIGN: u64 = 4096;

/// The free ranges of a region of `len` octets.
#[derive(Debug, Clone)]
pub struct Leases {
    len: u64,
    /// Free `(offset, len)` ranges, sorted by offset, never adjacent.
    free: Vec<(u64, u64)>,
}

impl Leases {
    /// All of `len` octets free (rounded down to [`LEASE_ALIGN`]).
    pub fn new(len: u64) -> Leases {
        let len = len / LEASE_ALIGN * LEASE_ALIGN;
        Leases {
            len,
            free: if len > 0 { vec![(0, len)] } else { Vec::new() },
        }
    }

    /// Octets in leases now.
    pub fn used(&self) -> u64 {
        self.len - self.free.iter().map(|&(_, l)| l).sum::<u64>()
    }

    /// The octets leases can cover.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether nothing can ever be leased.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A range of at least `want` octets: its offset and length, or `None`
    /// when no free range is that large.
    pub fn take(&mut self, want: u64) -> Option<(u64, u64)> {
        let want = want.max(1).checked_add(LEASE_ALIGN - 1)? / LEASE_ALIGN * LEASE_ALIGN;
        let i = self.free.iter().position(|&(_, l)| l >= want)?;
        let (offset, len) = self.free[i];
        if len == want {
            self.free.remove(i);
        } else {
            self.free[i] = (offset + want, len - want);
        }
        Some((offset, want))
    }

    /// Gives back the range `(offset, len)` that [`take`](Self::take)
    /// returned.
    pub fn give_back(&mut self, offset: u64, len: u64) {
        debug_assert!(offset + len <= self.len);
        let i = self.free.partition_point(|&(o, _)| o < offset);
        debug_assert!(i == 0 || self.free[i - 1].0 + self.free[i - 1].1 <= offset);
        debug_assert!(i == self.free.len() || offset + len <= self.free[i].0);
        self.free.insert(i, (offset, len));
        // Coalesce with the next, then the previous.
        if i + 1 < self.free.len() && offset + len == self.free[i + 1].0 {
            self.free[i].1 += self.free[i + 1].1;
            self.free.remove(i + 1);
        }
        if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == offset {
            self.free[i - 1].1 += self.free[i].1;
            self.free.remove(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_never_overlap_and_coalesce_back_to_one_range() {
        let mut l = Leases::new(64 * LEASE_ALIGN + 100);
        assert_eq!(l.len(), 64 * LEASE_ALIGN);
        let a = l.take(1).unwrap();
        let b = l.take(3 * LEASE_ALIGN).unwrap();
        let c = l.take(LEASE_ALIGN + 1).unwrap();
        assert_eq!(a, (0, LEASE_ALIGN));
        assert_eq!(b, (LEASE_ALIGN, 3 * LEASE_ALIGN));
        assert_eq!(c, (4 * LEASE_ALIGN, 2 * LEASE_ALIGN));
        assert_eq!(l.used(), 6 * LEASE_ALIGN);
        // Too large for what is free: refused, nothing changes.
        assert_eq!(l.take(59 * LEASE_ALIGN), None);
        l.give_back(b.0, b.1);
        // First fit: the hole b left.
        assert_eq!(
            l.take(2 * LEASE_ALIGN),
            Some((LEASE_ALIGN, 2 * LEASE_ALIGN))
        );
        l.give_back(LEASE_ALIGN, 2 * LEASE_ALIGN);
        l.give_back(a.0, a.1);
        l.give_back(c.0, c.1);
        assert_eq!(l.used(), 0);
        assert_eq!(l.free, vec![(0, 64 * LEASE_ALIGN)]);
        assert_eq!(l.take(64 * LEASE_ALIGN), Some((0, 64 * LEASE_ALIGN)));
        assert_eq!(l.take(1), None);
    }

    #[test]
    fn a_request_near_u64_max_is_refused_not_wrapped() {
        let mut l = Leases::new(1 << 20);
        assert_eq!(l.take(u64::MAX), None);
        assert_eq!(l.take(u64::MAX - 10), None);
        assert_eq!(l.used(), 0);
    }
}
