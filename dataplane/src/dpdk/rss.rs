//! Receive side scaling on a port that has it (a NIC): the port hashes each
//! IPv4/TCP frame with the Toeplitz function and our key, and the hash's
//! low bits pick an entry of its redirection table, which names the queue.
//! Programmed so that the port's choice is `tcp_lite::rss`'s in software
//! (the choice `dataplane::steer` checks and active opens are steered by),
//! every frame of a connection arrives at the core that owns it and none is
//! handed over.
//!
//! Agreement: the port's table has `N` entries and ours `n`, both powers of
//! two with `n <= N`; entry `i` of the port's is entry `i & (n - 1)` of
//! ours, so for any hash `h` the port's `table[h & (N - 1)]` is our
//! `table[h & (n - 1)]`. `n` is [`RETA_ENTRIES_DEFAULT`] (128) where the
//! port's is at least that long, so a NIC-steered host and a software-
//! steered dpwarp peer with as many queues pick the same owners.
//!
//! The key is 40 octets (Microsoft's RSS specification); a port whose key
//! is longer (52 octets on some NICs) gets ours repeated: the IPv4/TCP hash
//! reads only the first 16 octets (12 of input and 4 more), so the rest
//! changes nothing, and the symmetric key stays symmetric.

use tcp_lite::rss::{Reta, KEY_LEN, RETA_ENTRIES_DEFAULT};

/// What a port's RSS can do (from `rte_eth_dev_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RssCaps {
    /// Entries in its redirection table.
    pub reta_size: u16,
    /// Octets of its hash key (0 when it does not say: 40 then).
    pub key_len: u8,
    /// The frame types it can hash (`RTE_ETH_RSS_*` bits).
    pub hash_types: u64,
}

/// How a started port spreads what it receives over its queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rss {
    /// One queue, or spreading not asked for.
    Off,
    /// The port hashes IPv4/TCP frames with our key into this table
    /// (written and read back): every connection's frames reach the queue
    /// `tcp_lite::rss` picks.
    Hardware {
        /// The key.
        key: [u8; KEY_LEN],
        /// Our table (the port's repeats it).
        reta: Reta,
        /// Entries of the port's table.
        port_entries: u16,
    },
    /// The port cannot be programmed (why, in words): it delivers frames
    /// to queues by its own rule, and the cores hand each other what they
    /// do not own (`dataplane::steer`).
    Software(String),
}

impl Rss {
    /// One line for reports.
    pub fn describe(&self) -> String {
        match self {
            Rss::Off => "one queue: no steering".into(),
            Rss::Hardware {
                reta, port_entries, ..
            } => format!(
                "RSS programmed: Toeplitz with dpwarp's key, a {}-entry table over {} queues \
                 (the port's {} entries repeat it)",
                reta.entries().len(),
                reta.entries().iter().max().map_or(0, |q| q + 1),
                port_entries
            ),
            Rss::Software(why) => format!("steered in software ({why})"),
        }
    }
}

/// Whether a port with `caps` can be programmed for `queues` queues, and
/// our table for it; otherwise why not.
pub(crate) fn plan(caps: Option<RssCaps>, queues: u16, tcp_bit: u64) -> Result<Reta, String> {
    let Some(caps) = caps else {
        return Err("the port has no RSS".into());
    };
    let size = usize::from(caps.reta_size);
    if !size.is_power_of_two() || size < usize::from(queues) {
        return Err(format!(
            "its redirection table of {size} entries cannot be indexed by the hash's low bits \
             over {queues} queues"
        ));
    }
    if caps.hash_types & tcp_bit == 0 {
        return Err("it cannot hash IPv4/TCP frames".into());
    }
    if caps.key_len != 0 && usize::from(caps.key_len) < KEY_LEN {
        return Err(format!(
            "its key is {} octets; the hash needs {KEY_LEN}",
            caps.key_len
        ));
    }
    Reta::new(size.min(RETA_ENTRIES_DEFAULT), queues).map_err(|e| e.to_string())
}

/// Our key at the port's length (ours repeated).
pub(crate) fn port_key(key: &[u8; KEY_LEN], key_len: u8) -> Vec<u8> {
    let len = if key_len == 0 {
        KEY_LEN
    } else {
        usize::from(key_len)
    };
    key.iter().copied().cycle().take(len).collect()
}

/// The port's table of `port_entries` entries, in DPDK's groups of 64
/// (`rte_eth_rss_reta_entry64`: a mask of the entries to write, and the
/// entries): entry `i` is ours at `i & (n - 1)`.
pub(crate) fn port_table(reta: &Reta, port_entries: u16) -> Vec<(u64, [u16; 64])> {
    let ours = reta.entries();
    let size = usize::from(port_entries);
    (0..size.div_ceil(64))
        .map(|g| {
            let mut entries = [0u16; 64];
            for (j, entry) in entries.iter_mut().enumerate() {
                let i = g * 64 + j;
                if i < size {
                    *entry = ours[i & (ours.len() - 1)];
                }
            }
            (group_mask(g, port_entries), entries)
        })
        .collect()
}

/// The mask of group `g` (entries `64 g ..`) of a `size`-entry table.
pub(crate) fn group_mask(g: usize, size: u16) -> u64 {
    let left = usize::from(size).saturating_sub(g * 64);
    if left >= 64 {
        u64::MAX
    } else {
        (1u64 << left) - 1
    }
}

/// Groups of 64 back to a table of `size` entries.
pub(crate) fn flatten(groups: &[(u64, [u16; 64])], size: u16) -> Vec<u16> {
    groups
        .iter()
        .flat_map(|(_, e)| *e)
        .take(usize::from(size))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddrV4};
    use tcp_lite::rss::{Toeplitz, MICROSOFT_KEY, SYMMETRIC_KEY};

    const TCP: u64 = 1 << 4;

    fn caps(reta_size: u16, key_len: u8) -> Option<RssCaps> {
        Some(RssCaps {
            reta_size,
            key_len,
            hash_types: TCP | (1 << 2),
        })
    }

    /// The port's choice (its table indexed by the hash's low bits) is
    /// ours for every table size and queue count a NIC may have.
    #[test]
    fn the_ports_table_picks_our_queue() {
        let toeplitz = Toeplitz::new(&SYMMETRIC_KEY);
        for port_entries in [8u16, 64, 128, 512, 2048] {
            for queues in 1..=8u16.min(port_entries) {
                let ours = plan(caps(port_entries, 40), queues, TCP).unwrap();
                let table = flatten(&port_table(&ours, port_entries), port_entries);
                assert_eq!(table.len(), usize::from(port_entries));
                for n in 0..2_000u32 {
                    let src = SocketAddrV4::new(Ipv4Addr::from(0x0a00_0001 + n), 1024 + n as u16);
                    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 4791);
                    let h = toeplitz.hash_v4(src, dst);
                    let port_pick = table[h as usize & (usize::from(port_entries) - 1)];
                    assert_eq!(port_pick, ours.queue(h), "N={port_entries} q={queues}");
                    assert!(port_pick < queues);
                }
            }
        }
    }

    /// Where the port's table is at least 128 entries, ours is the one a
    /// software-steered dpwarp peer uses (round-robin over 128), so the two
    /// agree on every owner.
    #[test]
    fn a_long_table_repeats_the_software_default() {
        for port_entries in [128u16, 512] {
            let ours = plan(caps(port_entries, 52), 3, TCP).unwrap();
            assert_eq!(ours, Reta::new(RETA_ENTRIES_DEFAULT, 3).unwrap());
        }
        assert_eq!(plan(caps(64, 40), 3, TCP).unwrap().entries().len(), 64);
    }

    #[test]
    fn masks_cover_exactly_the_ports_entries() {
        let ours = Reta::new(8, 2).unwrap();
        let groups = port_table(&ours, 8);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].0, 0xff);
        assert_eq!(&groups[0].1[..8], &[0, 1, 0, 1, 0, 1, 0, 1]);
        let groups = port_table(&Reta::new(128, 4).unwrap(), 512);
        assert_eq!(groups.len(), 8);
        assert!(groups.iter().all(|(mask, _)| *mask == u64::MAX));
    }

    #[test]
    fn what_cannot_be_programmed_says_why() {
        let no = |c, q| plan(c, q, TCP).unwrap_err();
        assert!(no(None, 2).contains("no RSS"));
        assert!(no(caps(0, 40), 2).contains("0 entries"));
        assert!(no(caps(52, 40), 2).contains("52 entries"));
        assert!(no(caps(4, 40), 8).contains("over 8 queues"));
        assert!(no(caps(128, 16), 2).contains("16 octets"));
        let udp_only = Some(RssCaps {
            reta_size: 128,
            key_len: 40,
            hash_types: 1 << 5,
        });
        assert!(no(udp_only, 2).contains("IPv4/TCP"));
    }

    /// A longer key is ours repeated, and hashes IPv4/TCP alike (the hash
    /// reads its first 16 octets).
    #[test]
    fn a_longer_key_hashes_alike() {
        for key in [SYMMETRIC_KEY, MICROSOFT_KEY] {
            let long = port_key(&key, 52);
            assert_eq!(long.len(), 52);
            assert_eq!(&long[..40], &key[..]);
            assert_eq!(&long[40..], &key[..12]);
            let input = [10, 1, 2, 3, 10, 4, 5, 6, 0x12, 0x34, 0x56, 0x78];
            assert_eq!(
                tcp_lite::rss::toeplitz(&long, &input),
                tcp_lite::rss::toeplitz(&key, &input)
            );
        }
        assert_eq!(port_key(&SYMMETRIC_KEY, 0).len(), 40);
    }
}
