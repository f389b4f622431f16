//! Receive-side scaling (RSS): which receive queue, and so which core, an
//! IPv4/TCP packet reaches, and what an active open needs to know to pick a
//! local port whose reply traffic comes back to the core that opened it.
//!
//! Heads up! Before working on this file read Microsoft's RSS specification:
//! "RSS Hashing Functions" (the Toeplitz hash and the order of its input),
//! "Verifying the RSS Hash Calculation" (the vectors tested at the bottom of
//! this file) and "RSS Configuration" (the 40-octet secret key and the
//! indirection table, which NIC drivers call the redirection table or RETA).
//! For the symmetric key, read Woo and Park, "Scalable TCP Session Monitoring
//! with Symmetric Receive-side Scaling" (2012).
//!
//! A NIC hashes the 4-tuple of each received packet with a [`Toeplitz`] key,
//! takes the low bits of the hash as an index into a [`Reta`], and delivers
//! the packet to the queue found there. Ports without hardware RSS (DPDK
//! memif, net_ring) get the same effect in software: the sender computes the
//! hash the receiver would and puts the packet on that queue. Either way a
//! stack that owns one queue ([`Steering`]) receives only the connections
//! whose tuples hash to it, so an active open must pick a local port for
//! which the *reply* hashes to its own queue, as F-Stack and Seastar do.
//!
//! # Which key
//!
//! * [`SYMMETRIC_KEY`] for software RSS between two dpwarp hosts: with it a
//!   tuple and its reverse hash alike, so a connection is owned by the queue
//!   of the same index on both ends, in both directions, whoever opened it
//!   (given the same table on both ends). The price is that the hash has 16
//!   bits of entropy instead of 32, which is plenty for a table of at most
//!   512 entries.
//! * [`MICROSOFT_KEY`] where a peer or a tool expects the default of most NIC
//!   drivers, or to check an implementation against the specification.
//!
//! A real NIC uses whatever key the data plane programs into it, so with
//! hardware RSS the key is our choice too: program the NIC with the key and
//! the [`Reta::entries`] given to the stacks, or the stacks will pick ports
//! whose replies land on other cores.

use core::fmt;
use std::net::SocketAddrV4;

/// Octets of an RSS secret key (Microsoft's RSS specification: "The key is
/// 40 bytes (320 bits) long").
pub const KEY_LEN: usize = 40;

/// Octets of the IPv4/TCP hash input: source address, destination address,
/// source port, destination port.
pub const V4_TCP_INPUT_LEN: usize = 12;

/// Entries of a redirection table on most NICs (and the default here).
pub const RETA_ENTRIES_DEFAULT: usize = 128;

/// Most entries of a [`Reta`] (the largest table of common NICs).
pub const RETA_ENTRIES_MAX: usize = 512;

/// The default key of Microsoft's RSS specification, which most NIC drivers
/// use too ("Verifying the RSS Hash Calculation").
pub const MICROSOFT_KEY: [u8; KEY_LEN] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// The symmetric key of Woo and Park, "Scalable TCP Session Monitoring with
/// Symmetric Receive-side Scaling" (2012): `0x6d, 0x5a` twenty times.
///
/// The key repeats every 16 bits, and the addresses (32 bits) and ports (16
/// bits) of an IPv4/TCP input swap at multiples of 16 bits, so
/// `hash(a -> b) == hash(b -> a)`.
pub const SYMMETRIC_KEY: [u8; KEY_LEN] = {
    let mut key = [0; KEY_LEN];
    let mut i = 0;
    while i < KEY_LEN {
        key[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    key
};

/// The Toeplitz hash of Microsoft's RSS specification, bit by bit as its
/// pseudocode in "RSS Hashing Functions" reads: for each bit of `input`, from
/// the most significant bit of `input[0]` on, if the bit is set XOR the
/// left-most 32 bits of the key into the result; then shift the key left by
/// one bit.
///
/// The reference for [`Toeplitz`], which is the one to use per packet.
///
/// # Panics
///
/// If `key` is shorter than `input.len() + 4` octets (the window would run
/// off its end).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    assert!(
        key.len() >= input.len() + 4,
        "a Toeplitz key must be at least 4 octets longer than the input"
    );
    let mut result = 0;
    // The left-most 32 bits of the key, shifted left one bit per input bit.
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    for (i, &octet) in input.iter().enumerate() {
        // The key's octet whose bits enter the window while `octet` is read.
        let next = key[i + 4];
        for bit in (0..8).rev() {
            if (octet >> bit) & 1 == 1 {
                result ^= window;
            }
            window = (window << 1) | u32::from((next >> bit) & 1);
        }
    }
    result
}

/// The Toeplitz hash of one key, precomputed for inputs of up to
/// [`V4_TCP_INPUT_LEN`] octets: a hash is one table lookup and one XOR per
/// input octet, with no allocation.
///
/// The hash is linear over XOR: the hash of an input is the XOR of the hashes
/// of its octets each alone in an otherwise zero input. The table holds those
/// for every position and value (12 × 256 × 4 octets = 12 KiB, on the heap
/// so that configurations holding one stay small to move).
#[derive(Clone)]
pub struct Toeplitz {
    key: [u8; KEY_LEN],
    /// `table[i][v]`: the hash of octet value `v` at input position `i`.
    table: Box<[[u32; 256]; V4_TCP_INPUT_LEN]>,
}

impl Toeplitz {
    /// The tables of `key`.
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        let mut table = Box::new([[0; 256]; V4_TCP_INPUT_LEN]);
        for (position, row) in table.iter_mut().enumerate() {
            // The key window of each bit of the octet, most significant first.
            let windows: [u32; 8] = core::array::from_fn(|bit| window(key, position * 8 + bit));
            for (value, entry) in row.iter_mut().enumerate() {
                *entry = windows
                    .iter()
                    .enumerate()
                    .filter(|&(bit, _)| (value >> (7 - bit)) & 1 == 1)
                    .fold(0, |hash, (_, &w)| hash ^ w);
            }
        }
        Toeplitz { key: *key, table }
    }

    /// The key.
    pub fn key(&self) -> &[u8; KEY_LEN] {
        &self.key
    }

    /// The hash of `input` (IPv4 addresses alone are 8 octets, with TCP
    /// ports 12).
    ///
    /// # Panics
    ///
    /// If `input` is longer than [`V4_TCP_INPUT_LEN`] octets.
    pub fn hash(&self, input: &[u8]) -> u32 {
        assert!(
            input.len() <= V4_TCP_INPUT_LEN,
            "the Toeplitz tables cover at most 12 octets of input"
        );
        input
            .iter()
            .zip(self.table.iter())
            .fold(0, |hash, (&octet, row)| hash ^ row[usize::from(octet)])
    }

    /// The hash of an IPv4/TCP packet from `src` to `dst`, as the receiver
    /// of that packet computes it (Microsoft's RSS specification, hash type
    /// TCP/IPv4: source address, destination address, source port,
    /// destination port, all in network order).
    pub fn hash_v4(&self, src: SocketAddrV4, dst: SocketAddrV4) -> u32 {
        let mut input = [0; V4_TCP_INPUT_LEN];
        input[0..4].copy_from_slice(&src.ip().octets());
        input[4..8].copy_from_slice(&dst.ip().octets());
        input[8..10].copy_from_slice(&src.port().to_be_bytes());
        input[10..12].copy_from_slice(&dst.port().to_be_bytes());
        self.hash(&input)
    }
}

/// The tables are a function of the key: equal keys, equal hashes.
impl PartialEq for Toeplitz {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Toeplitz {}

impl fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Toeplitz { key: ")?;
        for octet in self.key {
            write!(f, "{octet:02x}")?;
        }
        f.write_str(" }")
    }
}

/// The 32 bits of `key` starting at bit `start` (bit 0 is the most
/// significant bit of `key[0]`).
fn window(key: &[u8; KEY_LEN], start: usize) -> u32 {
    let first = start / 8;
    let mut octets = [0; 8];
    octets.copy_from_slice(&key[first..first + 8]);
    (u64::from_be_bytes(octets) << (start % 8) >> 32) as u32
}

/// A redirection table (Microsoft's RSS specification: the indirection
/// table): the low bits of a packet's hash index it, and the entry found
/// there is the queue the packet goes to.
///
/// Its size is a power of two, at most [`RETA_ENTRIES_MAX`]. Program a NIC's
/// table with [`entries`](Reta::entries), so that the NIC and the stacks
/// agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reta {
    entries: Box<[u16]>,
}

impl Reta {
    /// A table of `size` entries spread round-robin over `queues` queues
    /// (entry `i` holds queue `i % queues`), as NIC drivers fill theirs by
    /// default. [`RETA_ENTRIES_DEFAULT`] is the usual `size`.
    pub fn new(size: usize, queues: u16) -> Result<Self, RetaError> {
        check_size(size)?;
        if queues == 0 || usize::from(queues) > size {
            return Err(RetaError(
                "queues must be 1..=size: a queue without an entry receives nothing",
            ));
        }
        let entries = (0..size)
            .map(|i| (i % usize::from(queues)) as u16)
            .collect();
        Ok(Reta { entries })
    }

    /// A table with these entries, e.g. the table read back from a NIC.
    pub fn from_entries(entries: &[u16]) -> Result<Self, RetaError> {
        check_size(entries.len())?;
        Ok(Reta {
            entries: entries.into(),
        })
    }

    /// The entries, in index order.
    pub fn entries(&self) -> &[u16] {
        &self.entries
    }

    /// The queue of a packet whose hash is `hash` (the hash's low bits
    /// index the table).
    pub fn queue(&self, hash: u32) -> u16 {
        // The size is a power of two: the mask keeps the low bits.
        self.entries[hash as usize & (self.entries.len() - 1)]
    }

    /// Whether some entry holds `queue` (otherwise no packet reaches it).
    pub fn contains(&self, queue: u16) -> bool {
        self.entries.contains(&queue)
    }
}

fn check_size(size: usize) -> Result<(), RetaError> {
    if !size.is_power_of_two() || size > RETA_ENTRIES_MAX {
        return Err(RetaError(
            "a redirection table's size must be a power of two, 1..=512",
        ));
    }
    Ok(())
}

/// A redirection table that cannot be built; the message says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetaError(pub &'static str);

impl fmt::Display for RetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid redirection table: {}", self.0)
    }
}

impl std::error::Error for RetaError {}

/// "This stack is queue (and core) `queue` of a port whose received traffic
/// is spread by this key and this redirection table."
///
/// Given to a [`Stack`](crate::Stack) in
/// [`StackConfig::steering`](crate::StackConfig::steering), it makes active
/// opens pick local ports whose reply traffic this queue receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steering {
    toeplitz: Toeplitz,
    reta: Reta,
    queue: u16,
}

impl Steering {
    /// Queue `queue` of a port spread by `toeplitz` and `reta`.
    /// [`StackConfig::validate`](crate::StackConfig::validate) refuses a
    /// queue that no entry of `reta` holds.
    pub fn new(toeplitz: Toeplitz, reta: Reta, queue: u16) -> Self {
        Steering {
            toeplitz,
            reta,
            queue,
        }
    }

    /// The hash.
    pub fn toeplitz(&self) -> &Toeplitz {
        &self.toeplitz
    }

    /// The redirection table.
    pub fn reta(&self) -> &Reta {
        &self.reta
    }

    /// This stack's queue.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// The queue that receives a packet from `src` to `dst`.
    pub fn owner(&self, src: SocketAddrV4, dst: SocketAddrV4) -> u16 {
        self.reta.queue(self.toeplitz.hash_v4(src, dst))
    }

    /// Whether this queue receives the packets of a connection between our
    /// `local` endpoint and `remote` (they come from `remote` to `local`).
    pub fn is_mine(&self, local: SocketAddrV4, remote: SocketAddrV4) -> bool {
        self.owner(remote, local) == self.queue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha8Rng;
    use rand_core::{RngCore, SeedableRng};
    use std::net::Ipv4Addr;

    /// Microsoft's RSS specification, "Verifying the RSS Hash Calculation",
    /// IPv4 with the default key: destination, source, the hash of the
    /// addresses alone, the hash with the TCP ports.
    const VECTORS: [(&str, &str, u32, u32); 5] = [
        (
            "161.142.100.80:1766",
            "66.9.149.187:2794",
            0x323e_8fc2,
            0x51cc_c178,
        ),
        (
            "65.69.140.83:4739",
            "199.92.111.2:14230",
            0xd718_262a,
            0xc626_b0ea,
        ),
        (
            "12.22.207.184:38024",
            "24.19.198.95:12898",
            0xd2d0_a5de,
            0x5c2b_394a,
        ),
        (
            "209.142.163.6:2217",
            "38.27.205.30:48228",
            0x8298_9176,
            0xafc7_327f,
        ),
        (
            "202.188.127.2:1303",
            "153.39.163.191:44251",
            0x5d18_09c5,
            0x10e8_28a2,
        ),
    ];

    /// The 12 octets of input: source address, destination address, source
    /// port, destination port.
    fn input(src: SocketAddrV4, dst: SocketAddrV4) -> [u8; V4_TCP_INPUT_LEN] {
        let mut input = [0; V4_TCP_INPUT_LEN];
        input[0..4].copy_from_slice(&src.ip().octets());
        input[4..8].copy_from_slice(&dst.ip().octets());
        input[8..10].copy_from_slice(&src.port().to_be_bytes());
        input[10..12].copy_from_slice(&dst.port().to_be_bytes());
        input
    }

    fn vectors() -> impl Iterator<Item = (SocketAddrV4, SocketAddrV4, u32, u32)> {
        VECTORS
            .iter()
            .map(|&(dst, src, ipv4, tcp)| (src.parse().unwrap(), dst.parse().unwrap(), ipv4, tcp))
    }

    fn random_endpoint(rng: &mut ChaCha8Rng) -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::from(rng.next_u32()), rng.next_u32() as u16)
    }

    #[test]
    fn bitwise_hash_matches_the_specification_vectors() {
        for (src, dst, ipv4, tcp) in vectors() {
            let input = input(src, dst);
            assert_eq!(
                toeplitz(&MICROSOFT_KEY, &input[..8]),
                ipv4,
                "{src} -> {dst}"
            );
            assert_eq!(toeplitz(&MICROSOFT_KEY, &input), tcp, "{src} -> {dst}");
        }
    }

    #[test]
    fn table_hash_matches_the_specification_vectors() {
        let hasher = Toeplitz::new(&MICROSOFT_KEY);
        for (src, dst, ipv4, tcp) in vectors() {
            assert_eq!(hasher.hash(&input(src, dst)[..8]), ipv4, "{src} -> {dst}");
            assert_eq!(hasher.hash(&input(src, dst)), tcp, "{src} -> {dst}");
            assert_eq!(hasher.hash_v4(src, dst), tcp, "{src} -> {dst}");
        }
    }

    /// Beyond the vectors: any key, any input length up to 12.
    #[test]
    fn table_hash_matches_bitwise_hash_on_random_keys_and_inputs() {
        let mut rng = ChaCha8Rng::seed_from_u64(0x0072_7373);
        for _ in 0..200 {
            let mut key = [0; KEY_LEN];
            rng.fill_bytes(&mut key);
            let hasher = Toeplitz::new(&key);
            for len in 0..=V4_TCP_INPUT_LEN {
                let mut input = [0; V4_TCP_INPUT_LEN];
                rng.fill_bytes(&mut input[..len]);
                assert_eq!(hasher.hash(&input[..len]), toeplitz(&key, &input[..len]));
            }
        }
    }

    #[test]
    fn the_symmetric_key_hashes_both_directions_alike() {
        let symmetric = Toeplitz::new(&SYMMETRIC_KEY);
        let microsoft = Toeplitz::new(&MICROSOFT_KEY);
        let mut rng = ChaCha8Rng::seed_from_u64(2012);
        let mut asymmetric = 0;
        for _ in 0..100_000 {
            let (a, b) = (random_endpoint(&mut rng), random_endpoint(&mut rng));
            let hash = symmetric.hash_v4(a, b);
            assert_eq!(hash, symmetric.hash_v4(b, a), "{a} <-> {b}");
            // The price of a key that repeats every 16 bits: so does the hash.
            assert_eq!(hash >> 16, hash & 0xffff, "{a} -> {b}");
            if microsoft.hash_v4(a, b) != microsoft.hash_v4(b, a) {
                asymmetric += 1;
            }
        }
        // The bitwise reference agrees on one tuple, and the default key is
        // not symmetric (the property is the key's, not the hash's).
        let (a, b) = (random_endpoint(&mut rng), random_endpoint(&mut rng));
        assert_eq!(
            toeplitz(&SYMMETRIC_KEY, &input(a, b)),
            toeplitz(&SYMMETRIC_KEY, &input(b, a))
        );
        assert!(asymmetric > 99_000, "{asymmetric}");
    }

    #[test]
    fn symmetric_key_is_six_d_five_a_twenty_times() {
        assert!(SYMMETRIC_KEY.chunks(2).all(|pair| pair == [0x6d, 0x5a]));
    }

    #[test]
    fn reta_is_round_robin_and_indexed_by_low_bits() {
        let reta = Reta::new(RETA_ENTRIES_DEFAULT, 3).unwrap();
        assert_eq!(reta.entries().len(), 128);
        assert!(reta
            .entries()
            .iter()
            .enumerate()
            .all(|(i, &q)| usize::from(q) == i % 3));
        assert_eq!(reta.queue(0), 0);
        assert_eq!(reta.queue(127), 127 % 3);
        assert_eq!(reta.queue(128 + 5), 5 % 3);
        assert_eq!(reta.queue(0xffff_ff80 | 4), 4 % 3);
        assert!(reta.contains(2) && !reta.contains(3));
        let table = Reta::from_entries(&[3, 1]).unwrap();
        assert_eq!((table.queue(6), table.queue(7)), (3, 1));
    }

    #[test]
    fn reta_refuses_impossible_sizes_and_queue_counts() {
        for size in [0, 3, 100, 1024] {
            assert!(Reta::new(size, 1).is_err(), "{size}");
            assert!(Reta::from_entries(&vec![0; size]).is_err(), "{size}");
        }
        assert!(Reta::new(128, 0).is_err());
        assert!(Reta::new(4, 5).is_err());
        assert!(Reta::new(512, 512).is_ok());
        assert!(Reta::new(1, 1).is_ok());
    }
}
