//! Packet buffers: [`Pool`] (an `rte_mempool` of mbufs) and [`Mbuf`] (one
//! owned mbuf, freed back to its pool when dropped).

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use dpdk_sys as sys;

use super::eal::{counted, errno, error_text, make, pool_dropped, pool_made, Eal, EalError};

/// Octets DPDK keeps free in front of every packet (`RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: usize = sys::RTE_PKTMBUF_HEADROOM as usize;

/// A pool of mbufs, each with `data_room` octets for one frame after the
/// headroom. Shared by the ports that receive into it and the cores that
/// transmit from it; mbufs are allocated and freed from any thread (with a
/// per-lcore cache on registered threads).
#[derive(Debug)]
pub struct Pool {
    pool: NonNull<sys::rte_mempool>,
    capacity: u32,
    data_room: usize,
    name: String,
}

// SAFETY: an rte_mempool is made for concurrent use: its ring is
// multi-producer/multi-consumer and each lcore has its own cache.
unsafe impl Send for Pool {}
// SAFETY: as above; &Pool only allocates, frees and reads counts.
unsafe impl Sync for Pool {}

impl Pool {
    /// A pool of `mbufs` mbufs with `data_room` octets each (beyond the
    /// headroom) and a per-lcore cache of `cache` mbufs.
    pub fn new(eal: Eal, mbufs: u32, cache: u32, data_room: usize) -> Result<Arc<Pool>, EalError> {
        let _ = eal;
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("dpw_pool{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let room = data_room + HEADROOM;
        let room = u16::try_from(room).map_err(|_| {
            EalError(format!(
                "mbuf data room {data_room} is too large (at most {})",
                u16::MAX as usize - HEADROOM
            ))
        })?;
        let c_name = CString::new(name.as_str()).expect("no NUL in a generated name");
        make(|| {
            // SAFETY: EAL runs (checked under the lock); the name is
            // NUL-terminated and unique in this process; DPDK copies it.
            let pool = unsafe {
                sys::rte_pktmbuf_pool_create(
                    c_name.as_ptr(),
                    mbufs,
                    cache,
                    0,
                    room,
                    sys::SOCKET_ID_ANY,
                )
            };
            let pool = NonNull::new(pool).ok_or_else(|| {
                EalError(format!(
                    "cannot create a pool of {mbufs} mbufs of {room} octets: {} (give EAL more memory, -m)",
                    error_text(errno())
                ))
            })?;
            counted();
            pool_made(pool, mbufs, &name);
            Ok(Arc::new(Pool {
                pool,
                capacity: mbufs,
                data_room,
                name,
            }))
        })
    }

    /// Mbufs in the pool when none is in use.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Octets of frame an mbuf holds (beyond the headroom).
    pub fn data_room(&self) -> usize {
        self.data_room
    }

    /// Mbufs free now (in the pool and in every lcore's cache).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is alive; the call only reads counts.
        unsafe { sys::rte_mempool_avail_count(self.pool.as_ptr()) }
    }

    /// Its name in DPDK.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One mbuf, reset, with an empty frame; `None` when the pool is empty.
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is alive and holds pktmbufs (made by
        // rte_pktmbuf_pool_create).
        NonNull::new(unsafe { sys::dpw_pktmbuf_alloc(self.pool.as_ptr()) }).map(Mbuf)
    }

    /// Fills every slot of `out` with a fresh mbuf, or leaves every slot
    /// empty (and returns false) when the pool has fewer free. Whatever the
    /// slots held before is freed.
    pub fn alloc_bulk(&self, out: &mut [Option<Mbuf>]) -> bool {
        const CHUNK: usize = 32;
        let mut raw = [std::ptr::null_mut::<sys::rte_mbuf>(); CHUNK];
        for at in (0..out.len()).step_by(CHUNK) {
            let n = CHUNK.min(out.len() - at);
            // SAFETY: the pool is alive and holds pktmbufs; `raw` has room
            // for `n` pointers. DPDK writes all `n` on success; on failure
            // it may have written some that still belong to the pool (its
            // per-lcore cache keeps them), so only a success is read.
            let rc = unsafe {
                sys::dpw_pktmbuf_alloc_bulk(self.pool.as_ptr(), raw.as_mut_ptr(), n as u32)
            };
            if rc != 0 {
                // None of them, then: what the chunks before got goes back.
                out.fill_with(|| None);
                return false;
            }
            for (slot, &m) in out[at..at + n].iter_mut().zip(&raw[..n]) {
                *slot = Some(Mbuf(NonNull::new(m).expect("DPDK allocated an mbuf")));
            }
        }
        true
    }

    pub(super) fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.pool.as_ptr()
    }
}

impl Drop for Pool {
    /// Hands the mempool over to EAL, which frees it once every mbuf is
    /// provably home, at the latest at [`Eal::cleanup`]: mbufs hold no
    /// handle of their pool, and one may still be out, or being freed on
    /// another thread (see `eal::pool_dropped` for why a count cannot tell).
    fn drop(&mut self) {
        pool_dropped(self.pool);
    }
}

/// One mbuf, owned: freed to its pool when dropped. Only single-segment
/// frames are made here; a received chain is looked at through
/// [`segments`](Mbuf::segments) and [`linearize`](Mbuf::linearize).
#[derive(Debug)]
#[repr(transparent)]
pub struct Mbuf(NonNull<sys::rte_mbuf>);

// SAFETY: an mbuf is plain memory owned by whoever holds the pointer; it
// may be freed from any thread (the pool is thread-safe).
unsafe impl Send for Mbuf {}

impl Mbuf {
    fn raw(&self) -> &sys::rte_mbuf {
        // SAFETY: we own the mbuf; it stays valid until we free it.
        unsafe { self.0.as_ref() }
    }

    fn raw_mut(&mut self) -> &mut sys::rte_mbuf {
        // SAFETY: as above, and `&mut self` makes the access exclusive.
        unsafe { self.0.as_mut() }
    }

    /// The first segment's octets (the whole frame when it is one segment).
    pub fn data(&self) -> &[u8] {
        let m = self.raw();
        let (off, len) = Self::within(m);
        // SAFETY: `within` keeps off + len inside the buffer DPDK gave the
        // mbuf (buf_len octets at buf_addr); we own it.
        unsafe { std::slice::from_raw_parts(m.buf_addr.cast::<u8>().add(off), len) }
    }

    /// The first segment's octets, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        let m = self.raw_mut();
        let (off, len) = Self::within(m);
        // SAFETY: as in `data`, and the access is exclusive.
        unsafe { std::slice::from_raw_parts_mut(m.buf_addr.cast::<u8>().add(off), len) }
    }

    /// The first segment's data offset and length, the length cut to the
    /// buffer: a driver sets `data_len`, and one may set it past the buffer
    /// (found by a review: `net_null` with `size=1024` into 64-octet
    /// buffers gave slices over the next mbufs of the pool, their headers
    /// too). The offset is at most the buffer's length.
    fn within(m: &sys::rte_mbuf) -> (usize, usize) {
        let buf_len = usize::from(m.buf_len);
        let off = usize::from(m.data_off).min(buf_len);
        (off, usize::from(m.data_len).min(buf_len - off))
    }

    /// The frame's length over all segments.
    pub fn pkt_len(&self) -> usize {
        self.raw().pkt_len as usize
    }

    /// Segments in the chain.
    pub fn segments(&self) -> u16 {
        self.raw().nb_segs
    }

    /// Octets this (single-segment) mbuf can hold from its data offset.
    pub fn room(&self) -> usize {
        let m = self.raw();
        usize::from(m.buf_len).saturating_sub(usize::from(m.data_off))
    }

    /// Makes the frame `len` octets long (one segment) and returns it to
    /// be written. `None` if `len` exceeds [`room`](Mbuf::room) or the mbuf
    /// is a chain.
    pub fn set_len(&mut self, len: usize) -> Option<&mut [u8]> {
        if len > self.room() || self.segments() != 1 {
            return None;
        }
        let m = self.raw_mut();
        m.data_len = len as u16;
        m.pkt_len = len as u32;
        Some(self.data_mut())
    }

    /// Copies a chain into its first segment (`rte_pktmbuf_linearize`);
    /// false when the frame does not fit it.
    pub fn linearize(&mut self) -> bool {
        // SAFETY: we own the chain; DPDK frees the segments it copied.
        unsafe { sys::dpw_pktmbuf_linearize(self.0.as_ptr()) == 0 }
    }

    /// The receive offload flags (`ol_flags`).
    pub fn ol_flags(&self) -> u64 {
        self.raw().ol_flags
    }

    /// Asks the port to compute the IPv4 header and TCP checksums of this
    /// frame (`RTE_MBUF_F_TX_IPV4 | IP_CKSUM | TCP_CKSUM`, with the header
    /// lengths the port needs). The TCP checksum field must hold the
    /// pseudo-header sum, as DPDK specifies.
    ///
    /// Refused, with nothing set, unless `l3_len` is an IPv4 header's length
    /// (20 to 60 octets; RFC 791 §3.1, IHL, 4 bits: "Internet Header Length
    /// is the length of the internet header in 32 bit words ... Note that
    /// the minimum value for a correct header is 5.") and the first segment
    /// holds the Ethernet, IPv4 and a minimal TCP header (RFC 9293 §3.1:
    /// the fixed fields, Source Port to Urgent Pointer, are 20 octets). A
    /// driver's prepare step (`rte_net_intel_cksum_prepare`) and the port
    /// read the headers at `l2_len` and `l2_len + l3_len` and write the TCP
    /// checksum field there, trusting these lengths: a shorter frame would
    /// be read and written past its end. `l2_len` must fit `rte_mbuf`'s
    /// 7-bit `l2_len` field (`RTE_MBUF_L2_LEN_BITS`).
    pub fn request_tcp_checksum_offload(
        &mut self,
        l2_len: u8,
        l3_len: u16,
    ) -> Result<(), ChecksumOffloadError> {
        if u32::from(l2_len) >= 1 << sys::RTE_MBUF_L2_LEN_BITS {
            return Err(ChecksumOffloadError::L2TooLong { l2_len });
        }
        if !(IPV4_HEADER_LEN_MIN..=IPV4_HEADER_LEN_MAX).contains(&l3_len) {
            return Err(ChecksumOffloadError::NotAnIpv4Header { l3_len });
        }
        let needed = usize::from(l2_len) + usize::from(l3_len) + TCP_HEADER_LEN_MIN;
        let data_len = self.data().len();
        if needed > data_len {
            return Err(ChecksumOffloadError::FrameTooShort { needed, data_len });
        }
        let m = self.raw_mut();
        m.ol_flags |=
            sys::RTE_MBUF_F_TX_IPV4 | sys::RTE_MBUF_F_TX_IP_CKSUM | sys::RTE_MBUF_F_TX_TCP_CKSUM;
        // SAFETY: the tx_offload bitfields are plain integers in the union;
        // writing them through bindgen's setters touches no other field.
        unsafe {
            let fields = &mut m.__bindgen_anon_3.__bindgen_anon_1;
            fields.set_l2_len(u64::from(l2_len));
            fields.set_l3_len(u64::from(l3_len));
        }
        Ok(())
    }

    /// The raw pointer, lent (ownership stays with `self`).
    pub(super) fn as_ptr(&self) -> *mut sys::rte_mbuf {
        self.0.as_ptr()
    }

    /// Takes ownership of an mbuf DPDK handed over.
    ///
    /// # Safety
    /// `ptr` is a valid mbuf nobody else owns.
    pub(super) unsafe fn from_raw(ptr: NonNull<sys::rte_mbuf>) -> Mbuf {
        Mbuf(ptr)
    }

    /// The raw pointer, handed to DPDK with ownership (the caller forgets
    /// `self` afterwards).
    pub(super) fn into_raw(self) -> *mut sys::rte_mbuf {
        let ptr = self.0.as_ptr();
        std::mem::forget(self);
        ptr
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (chain) and nobody uses it after this.
        unsafe { sys::dpw_pktmbuf_free(self.0.as_ptr()) };
    }
}

/// RFC 791 §3.1: the Internet Header Length is at least 5 32-bit words.
const IPV4_HEADER_LEN_MIN: u16 = 20;
/// RFC 791 §3.1: the Internet Header Length field has 4 bits (15 words).
const IPV4_HEADER_LEN_MAX: u16 = 60;
/// RFC 9293 §3.1: a TCP header's fixed fields (Source Port to Urgent
/// Pointer) take 20 octets; options only add to them.
const TCP_HEADER_LEN_MIN: usize = 20;

/// Why [`Mbuf::request_tcp_checksum_offload`] refused: the lengths it was
/// given would have the port read or write outside the frame's headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumOffloadError {
    /// `l2_len` does not fit `rte_mbuf`'s 7-bit `l2_len` field.
    L2TooLong {
        /// The length asked for.
        l2_len: u8,
    },
    /// `l3_len` is not an IPv4 header's length (20 to 60 octets).
    NotAnIpv4Header {
        /// The length asked for.
        l3_len: u16,
    },
    /// The first segment is shorter than the Ethernet, IPv4 and minimal
    /// (20-octet) TCP headers.
    FrameTooShort {
        /// `l2_len + l3_len + 20`.
        needed: usize,
        /// The first segment's length (`data_len`).
        data_len: usize,
    },
}

impl std::fmt::Display for ChecksumOffloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ChecksumOffloadError::L2TooLong { l2_len } => {
                write!(f, "an L2 header of {l2_len} octets does not fit rte_mbuf's l2_len (at most 127)")
            }
            ChecksumOffloadError::NotAnIpv4Header { l3_len } => {
                write!(f, "an L3 header of {l3_len} octets is not an IPv4 header (20 to 60 octets)")
            }
            ChecksumOffloadError::FrameTooShort { needed, data_len } => write!(
                f,
                "a frame of {data_len} octets is shorter than its headers and a minimal TCP header ({needed} octets)"
            ),
        }
    }
}

impl std::error::Error for ChecksumOffloadError {}

/// bindgen's layout of `struct rte_mbuf` against the C compiler's, for the
/// fields this module reads: `Ok` or the first field that differs.
pub fn check_layout() -> Result<(), String> {
    // SAFETY: the shim only computes sizeof/offsetof.
    let c = unsafe { sys::dpw_mbuf_layout() };
    let rust = [
        ("size", std::mem::size_of::<sys::rte_mbuf>()),
        ("data_off", std::mem::offset_of!(sys::rte_mbuf, data_off)),
        ("nb_segs", std::mem::offset_of!(sys::rte_mbuf, nb_segs)),
        ("ol_flags", std::mem::offset_of!(sys::rte_mbuf, ol_flags)),
        ("pkt_len", std::mem::offset_of!(sys::rte_mbuf, pkt_len)),
        ("data_len", std::mem::offset_of!(sys::rte_mbuf, data_len)),
        ("buf_len", std::mem::offset_of!(sys::rte_mbuf, buf_len)),
        ("pool", std::mem::offset_of!(sys::rte_mbuf, pool)),
        ("next", std::mem::offset_of!(sys::rte_mbuf, next)),
        (
            "tx_offload",
            std::mem::offset_of!(sys::rte_mbuf, __bindgen_anon_3),
        ),
    ];
    let c_values = [
        c.size,
        c.data_off,
        c.nb_segs,
        c.ol_flags,
        c.pkt_len,
        c.data_len,
        c.buf_len,
        c.pool,
        c.next,
        c.tx_offload,
    ];
    for ((name, r), c) in rust.iter().zip(c_values) {
        if *r != c as usize {
            return Err(format!("rte_mbuf.{name}: bindgen says {r}, C says {c}"));
        }
    }
    Ok(())
}

/// Where a received mbuf's flags say what the port found of a checksum:
/// the mask of the field and its values for good and for bad (anything
/// else: the port did not check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChecksumVerdict {
    /// The bits of `ol_flags` that hold the verdict.
    pub mask: u64,
    /// The value meaning "checksum good".
    pub good: u64,
    /// The value meaning "checksum bad".
    pub bad: u64,
}

/// The IPv4 header checksum's verdict bits (`RTE_MBUF_F_RX_IP_CKSUM_*`).
pub const RX_IP_CHECKSUM: ChecksumVerdict = ChecksumVerdict {
    mask: sys::RTE_MBUF_F_RX_IP_CKSUM_MASK as u64,
    good: sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD as u64,
    bad: sys::RTE_MBUF_F_RX_IP_CKSUM_BAD as u64,
};

/// The TCP/UDP checksum's verdict bits (`RTE_MBUF_F_RX_L4_CKSUM_*`).
pub const RX_L4_CHECKSUM: ChecksumVerdict = ChecksumVerdict {
    mask: sys::RTE_MBUF_F_RX_L4_CKSUM_MASK as u64,
    good: sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD as u64,
    bad: sys::RTE_MBUF_F_RX_L4_CKSUM_BAD as u64,
};
