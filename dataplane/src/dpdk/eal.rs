//! DPDK's Environment Abstraction Layer: started once per process, from an
//! [`EalConfig`], and cleaned up once at the end.
//!
//! EAL can start only once in a process and never again after
//! `rte_eal_cleanup`, so [`Eal::init`] is idempotent for one configuration
//! and refuses a different one; every other call of this module takes the
//! [`Eal`] token it returns, so nothing touches DPDK before EAL runs.
//!
//! EAL pins the thread that starts it to its main lcore. The main lcore is
//! given every CPU the process may use (`--lcores 0@(...)`), so starting EAL
//! pins nothing: poll-mode threads pin themselves (`crate::lcore`) and
//! register with EAL ([`register_thread`]) for an lcore id of their own,
//! which gives them their own mempool caches.

use std::ffi::{c_char, c_int, CStr, CString};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use dpdk_sys as sys;

/// Where EAL's memory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Memory {
    /// `--no-huge --no-shconf`: ordinary pages, no root needed; slower
    /// (a probe here measured net_null 2.5x slower than with hugepages).
    NoHuge {
        /// Memory EAL takes at start (`-m`), in MiB.
        megabytes: u32,
    },
    /// `--in-memory`: 2 MiB hugepages that root reserved beforehand; no
    /// runtime or hugepage files stay behind.
    Huge {
        /// Memory EAL takes at start (`-m`), in MiB.
        megabytes: u32,
        /// A hugetlbfs mount for EAL's pages (`--huge-dir`); `None` lets
        /// EAL find one or use anonymous huge memory.
        dir: Option<PathBuf>,
    },
}

/// How EAL starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalConfig {
    /// Memory.
    pub memory: Memory,
    /// PCI devices to probe (`-a 0000:01:00.0`); empty: no PCI bus scan
    /// (`--no-pci`), so only virtual devices exist.
    pub pci: Vec<String>,
    /// EAL's log levels (`--log-level`, one per comma-separated item),
    /// e.g. `*:warning` or `*:error,pmd.net.tap:critical`.
    pub log_level: String,
}

impl EalConfig {
    /// Ordinary pages, no PCI, warnings and errors logged.
    pub fn no_huge(megabytes: u32) -> EalConfig {
        EalConfig {
            memory: Memory::NoHuge { megabytes },
            pci: Vec::new(),
            log_level: "*:warning".into(),
        }
    }

    /// The arguments `rte_eal_init` gets.
    fn args(&self, cpus: &[usize]) -> Vec<String> {
        let cpu_list: Vec<String> = cpus.iter().map(usize::to_string).collect();
        let mut args = vec![
            "dpwarp".to_string(),
            // Main lcore 0, free to run on every CPU we have: EAL pins nothing.
            format!("--lcores=0@({})", cpu_list.join(",")),
            "--no-telemetry".into(),
            // A runtime directory of this process's own (EAL makes it even
            // in memory-only modes), removed at cleanup.
            format!("--file-prefix={}", file_prefix()),
        ];
        for level in self.log_level.split(',') {
            args.push(format!("--log-level={level}"));
        }
        match &self.memory {
            Memory::NoHuge { megabytes } => {
                args.extend(["--no-huge".into(), "--no-shconf".into()]);
                args.push(format!("-m{megabytes}"));
            }
            Memory::Huge { megabytes, dir } => {
                args.push("--in-memory".into());
                args.push(format!("-m{megabytes}"));
                if let Some(dir) = dir {
                    args.push(format!("--huge-dir={}", dir.display()));
                }
            }
        }
        if self.pci.is_empty() {
            args.push("--no-pci".into());
        }
        for address in &self.pci {
            args.push(format!("-a{address}"));
        }
        args
    }
}

/// Proof that EAL runs in this process: every DPDK call of this module
/// takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eal(());

/// Why EAL did not start, or cannot be cleaned up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EalError(pub String);

impl std::fmt::Display for EalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EalError {}

/// The configuration EAL started with (or the error it failed with).
static STARTED: Mutex<Option<Result<EalConfig, EalError>>> = Mutex::new(None);
/// `rte_eal_cleanup` ran: DPDK may not be used again in this process.
static CLEANED: AtomicBool = AtomicBool::new(false);
/// Pools, ports, queues and registered threads alive: cleanup refuses
/// while there are any. Each is counted ([`counted`]) when made, under
/// [`make`]'s lock or from a live parent, and uncounted ([`released`]) last
/// in its drop, after it let go of everything of DPDK's.
static LIVE_OBJECTS: AtomicUsize = AtomicUsize::new(0);

/// Runs `make`, which creates DPDK objects, each counted with [`counted`]
/// as it is made, unless EAL was cleaned up. Under the lock
/// [`Eal::cleanup`] takes, so a cleanup either sees them counted or
/// happened before and `make` never runs. `make` must not call `make`.
pub(super) fn make<T>(make: impl FnOnce() -> Result<T, EalError>) -> Result<T, EalError> {
    let _started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
    if CLEANED.load(Ordering::SeqCst) {
        return Err(EalError(
            "EAL was cleaned up: DPDK cannot be used again in this process".into(),
        ));
    }
    make()
}

/// One more live object: called inside [`make`], or for an object made
/// from a live one (a queue of a port), before which cleanup cannot run.
pub(super) fn counted() {
    LIVE_OBJECTS.fetch_add(1, Ordering::SeqCst);
}

/// A live object let go of everything of DPDK's (last in its drop).
pub(super) fn released() {
    LIVE_OBJECTS.fetch_sub(1, Ordering::SeqCst);
}

/// A mempool made for a [`Pool`](super::Pool), from its making until EAL
/// frees it. A pool's drop does not free its mempool (see [`pool_dropped`]).
struct PoolEntry {
    mempool: NonNull<sys::rte_mempool>,
    /// Mbufs in the mempool when none is out.
    capacity: u32,
    /// Its name in DPDK, for cleanup's error.
    name: String,
    /// The `Pool` is gone: the mempool is EAL's, freed once provably idle.
    retired: bool,
}

// SAFETY: the pointer is used only under POOLS's lock, by DPDK calls any
// thread may make (mempools are shared by every lcore).
unsafe impl Send for PoolEntry {}

/// Every mempool not yet freed, live or retired. Its lock orders every
/// `rte_mempool_free` after anything done to a mempool under it.
static POOLS: Mutex<Vec<PoolEntry>> = Mutex::new(Vec::new());
/// Mempools freed so far (retired ones whose mbufs were all home).
static POOLS_FREED: AtomicU64 = AtomicU64::new(0);

/// How many pools there are, and what became of the dropped ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    /// Pools whose [`Pool`](super::Pool) handle lives.
    pub live: usize,
    /// Pools dropped whose memory EAL still holds, because an mbuf of theirs
    /// is out or may sit in a thread's mempool cache; freed when their mbufs
    /// are provably home, at the latest by [`Eal::cleanup`].
    pub retired: usize,
    /// Pools whose memory was freed (`rte_mempool_free`), in total.
    pub freed: u64,
}

fn pools() -> MutexGuard<'static, Vec<PoolEntry>> {
    POOLS.lock().unwrap_or_else(|p| p.into_inner())
}

/// A mempool was made for a pool: called inside [`make`], with [`counted`].
pub(super) fn pool_made(mempool: NonNull<sys::rte_mempool>, capacity: u32, name: &str) {
    pools().push(PoolEntry {
        mempool,
        capacity,
        name: name.to_owned(),
        retired: false,
    });
}

/// The pool of `mempool` was dropped: EAL takes its mempool over, and frees
/// it now only if every mbuf is provably home ([`idle`]), else later.
///
/// Freeing it whenever `rte_mempool_avail_count` reached the capacity would
/// not be sound: DPDK 22.11's `rte_mempool_do_generic_put` raises the
/// lcore cache's `len` before it copies the pointer in (`cache->len += n;`
/// then `rte_memcpy(cache_objs, obj_table, ...)`), so a thread freeing the
/// last mbuf may still write into the mempool's cache after the count says
/// every mbuf is back. Mbufs hold no handle of their pool, so a pool may
/// also be dropped with mbufs still out; they stay usable and go home later.
pub(super) fn pool_dropped(mempool: NonNull<sys::rte_mempool>) {
    let mut pools = pools();
    let entry = pools
        .iter_mut()
        .find(|e| e.mempool == mempool)
        .expect("every pool's mempool is listed until it is retired and freed");
    assert!(!entry.retired, "a pool is dropped once");
    entry.retired = true;
    // SAFETY: the mempool is not freed (listed, under the lock); the call
    // touches only the calling thread's own cache, which no other thread
    // uses.
    unsafe { sys::dpw_mempool_cache_flush_own(mempool.as_ptr()) };
    reclaim(&mut pools);
    drop(pools);
    released();
}

/// Empties the calling thread's own cache of every mempool into the
/// mempool's ring (called before the thread gives its lcore id back, so no
/// mbuf stays where no thread will flush it), then frees the retired
/// mempools that became idle.
fn flush_own_caches() {
    let mut pools = pools();
    for entry in pools.iter() {
        // SAFETY: as in `pool_dropped`: listed under the lock, so not
        // freed; only this thread's own cache is touched.
        unsafe { sys::dpw_mempool_cache_flush_own(entry.mempool.as_ptr()) };
    }
    reclaim(&mut pools);
}

/// Frees every retired mempool that is [`idle`].
fn reclaim(pools: &mut Vec<PoolEntry>) {
    pools.retain(|entry| {
        if !entry.retired || !idle(entry) {
            return true;
        }
        // SAFETY: the mempool is idle (every mbuf in its ring, so nobody
        // holds one, nobody is putting one back, and no Pool handle exists
        // to take one); it is removed from the list under the lock, so
        // nothing else touches it after this.
        unsafe { sys::rte_mempool_free(entry.mempool.as_ptr()) };
        POOLS_FREED.fetch_add(1, Ordering::Relaxed);
        false
    });
}

/// Every mbuf of a retired mempool is in its ring: none is out, none in an
/// lcore cache, so no thread holds one and no thread is putting one back.
/// The ring counts an object only after it was copied in: a ring enqueue
/// copies the pointers, then publishes them by a release store of
/// `prod.tail` (`__rte_ring_update_tail`), which the count reads with
/// acquire. That store is the putter's last write to the mempool
/// (`rte_mempool_ops_enqueue_bulk` returns right after it, the statistics
/// being off in this build of DPDK: `RTE_LIBRTE_MEMPOOL_STATS` is not set
/// in its `rte_config.h`). A cache is flushed into the ring only by a put
/// (or by [`flush_own_caches`] under POOLS's lock), and a put is of an
/// mbuf its putter holds, which is then not in the ring: the ring is not
/// full while a put is under way.
fn idle(entry: &PoolEntry) -> bool {
    // SAFETY: the mempool is not freed (listed, under the lock); the call
    // reads its driver's name and its ring's two tails.
    let in_ring = unsafe { sys::dpw_mempool_ring_count(entry.mempool.as_ptr()) };
    in_ring >= i64::from(entry.capacity)
}

impl Eal {
    /// Starts EAL with `config`, or returns the running one if it started
    /// with the same configuration. A second, different configuration, a
    /// start after [`cleanup`](Eal::cleanup), or a failed start (which
    /// DPDK cannot retry) is an error saying what to fix.
    pub fn init(config: &EalConfig) -> Result<Eal, EalError> {
        let mut started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        if CLEANED.load(Ordering::SeqCst) {
            return Err(EalError(
                "EAL was cleaned up: DPDK cannot start again in this process".into(),
            ));
        }
        match &*started {
            Some(Ok(running)) if running == config => return Ok(Eal(())),
            Some(Ok(running)) => {
                return Err(EalError(format!(
                    "EAL already runs in this process with {running:?}; it starts once per process"
                )))
            }
            Some(Err(e)) => return Err(e.clone()),
            None => {}
        }
        let result = start(config);
        *started = Some(result.clone().map(|()| config.clone()));
        result.map(|()| Eal(()))
    }

    /// The running EAL, if [`init`](Eal::init) succeeded.
    pub fn running() -> Option<Eal> {
        let started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        match &*started {
            Some(Ok(_)) if !CLEANED.load(Ordering::SeqCst) => Some(Eal(())),
            _ => None,
        }
    }

    /// Releases EAL's resources (`rte_eal_cleanup`: hugepage memory, the
    /// interrupt thread). Every pool, port, queue and thread registration
    /// must be gone, and every mbuf of a dropped pool freed; the memory of
    /// the dropped pools EAL still holds is freed first. Call it on the
    /// thread that started EAL: mbufs that thread freed sit in its own
    /// mempool caches, which only it can send home (another thread's
    /// cleanup is refused while they do). After it, DPDK cannot be used in
    /// this process again (every constructor says so).
    pub fn cleanup(self) -> Result<(), EalError> {
        let _started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        let live = LIVE_OBJECTS.load(Ordering::SeqCst);
        if live > 0 {
            return Err(EalError(format!(
                "{live} DPDK pool(s), port(s), queue(s) or thread registration(s) still exist: \
                 drop them before cleanup"
            )));
        }
        if CLEANED.load(Ordering::SeqCst) {
            return Ok(());
        }
        free_retired_pools()?;
        CLEANED.store(true, Ordering::SeqCst);
        // SAFETY: EAL runs (an `Eal` exists) and nothing of ours uses DPDK
        // any more (no live objects); CLEANED, set under the lock every
        // constructor takes, stops any later use.
        let rc = unsafe { sys::rte_eal_cleanup() };
        if rc < 0 {
            return Err(EalError(format!(
                "rte_eal_cleanup failed: {}",
                error_text(-rc)
            )));
        }
        // The runtime directory EAL made (empty in the modes used here:
        // --no-shconf, --in-memory); only if empty, so nothing else goes.
        for base in runtime_bases() {
            let _ = std::fs::remove_dir(base.join(file_prefix()));
        }
        Ok(())
    }

    /// The pools there are: live, retired (dropped, their memory kept until
    /// every mbuf is provably home) and freed so far.
    pub fn pools(self) -> PoolCounts {
        let pools = pools();
        let retired = pools.iter().filter(|e| e.retired).count();
        PoolCounts {
            live: pools.len() - retired,
            retired,
            freed: POOLS_FREED.load(Ordering::Relaxed),
        }
    }

    /// TSC ticks per second, as EAL measured at start.
    pub fn tsc_hz(self) -> u64 {
        // SAFETY: EAL runs; the call reads a value EAL set at start.
        unsafe { sys::rte_get_tsc_hz() }
    }
}

/// Frees every retired pool for [`Eal::cleanup`] (every pool is retired
/// then: a live one is a live object), or says which still has mbufs out.
/// Registered threads are gone (they are live objects) and flushed their
/// caches when they left; what the calling thread cached goes home here. So
/// only the main lcore's cache, if another thread is the main lcore, can
/// still hold mbufs, and that thread may be putting one into it: such a
/// pool is not freed, and cleanup is refused.
fn free_retired_pools() -> Result<(), EalError> {
    flush_own_caches();
    let pools = pools();
    let Some(entry) = pools.first() else {
        return Ok(());
    };
    // SAFETY: the mempool is not freed (listed, under the lock); the call
    // only reads counts.
    let free = unsafe { sys::rte_mempool_avail_count(entry.mempool.as_ptr()) };
    // SAFETY: as above; the call reads the driver's name.
    let ring = unsafe { sys::dpw_mempool_ring_count(entry.mempool.as_ptr()) };
    let why = if ring < 0 {
        format!(
            "pool {} has a mempool driver other than ring_mp_mc, whose idleness this \
             wrapper cannot tell: its memory is kept, and EAL not cleaned up",
            entry.name
        )
    } else if free < entry.capacity {
        format!(
            "{} of the {} mbufs of pool {} are still in use: drop them before cleanup",
            entry.capacity - free,
            entry.capacity,
            entry.name
        )
    } else {
        format!(
            "mbufs of pool {} sit in the mempool cache of the thread that started EAL, \
             which may still be freeing one: call cleanup on that thread, which flushes \
             its own cache before cleanup",
            entry.name
        )
    };
    Err(EalError(why))
}

/// This process's EAL file prefix: `dpwarp-PID`.
fn file_prefix() -> String {
    format!("dpwarp-{}", std::process::id())
}

/// Removes this process's EAL runtime directory if it is empty (called at
/// exit).
extern "C" fn remove_runtime_dir() {
    for base in runtime_bases() {
        let _ = std::fs::remove_dir(base.join(file_prefix()));
    }
}

/// Where EAL puts runtime directories: `/var/run/dpdk` for root, else
/// `$XDG_RUNTIME_DIR/dpdk` or `/tmp/dpdk`.
fn runtime_bases() -> Vec<PathBuf> {
    let mut bases = vec![PathBuf::from("/var/run/dpdk"), PathBuf::from("/tmp/dpdk")];
    if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR") {
        bases.push(PathBuf::from(xdg).join("dpdk"));
    }
    bases
}

fn start(config: &EalConfig) -> Result<(), EalError> {
    let mut cpus = crate::lcore::cpus();
    if cpus.is_empty() {
        cpus.push(0);
    }
    let args = config.args(&cpus);
    let mut owned: Vec<CString> = Vec::with_capacity(args.len());
    for arg in &args {
        owned.push(
            CString::new(arg.as_str())
                .map_err(|_| EalError(format!("EAL argument {arg:?} contains a NUL octet")))?,
        );
    }
    // EAL keeps pointers into argv (and permutes it): it lives as long as
    // the process does.
    let owned: &'static [CString] = Box::leak(owned.into_boxed_slice());
    let argv: &'static mut [*mut c_char] = Box::leak(
        owned
            .iter()
            .map(|a| a.as_ptr().cast_mut())
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    // SAFETY: argv holds `argc` pointers to NUL-terminated strings that are
    // never freed; EAL has not started in this process (STARTED was empty
    // under its lock).
    let rc = unsafe { sys::rte_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
    // Whether or not the process cleans up (a test binary cannot), its
    // empty runtime directory goes when it exits.
    // SAFETY: registers a plain function with no captured state.
    unsafe { libc::atexit(remove_runtime_dir) };
    if rc < 0 {
        // SAFETY: reads the calling thread's rte_errno.
        let errno = unsafe { sys::dpw_errno() };
        return Err(EalError(explain(config, errno, &args)));
    }
    if let Err(why) = super::memif_gate::install() {
        // Everything works but a memif peer's leaving: say so, go on.
        eprintln!("dpwarp: memif ports are not guarded against a peer that leaves: {why}");
    }
    Ok(())
}

/// One line that says what went wrong and what to fix.
fn explain(config: &EalConfig, errno: c_int, args: &[String]) -> String {
    let text = error_text(errno);
    let hint = match &config.memory {
        Memory::Huge { .. } => {
            " (no 2 MiB hugepages free? as root: echo 1024 > \
             /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages, or run without hugepages)"
        }
        Memory::NoHuge { .. } => "",
    };
    format!(
        "DPDK's EAL did not start: {text}{hint}; arguments: {}",
        args.join(" ")
    )
}

/// DPDK's text for an errno (its own codes above 1000 included).
pub(super) fn error_text(errno: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string for any value.
    let text = unsafe { CStr::from_ptr(sys::rte_strerror(errno)) };
    format!("{} (errno {errno})", text.to_string_lossy())
}

/// The calling thread's `rte_errno`.
pub(super) fn errno() -> c_int {
    // SAFETY: reads a per-thread variable.
    unsafe { sys::dpw_errno() }
}

/// The calling thread's EAL lcore id, if it has one (EAL's main thread, or
/// a registered one).
pub fn current_lcore() -> Option<u32> {
    // SAFETY: reads a per-thread variable.
    let id = unsafe { sys::dpw_lcore_id() };
    (id != u32::MAX).then_some(id)
}

/// An EAL lcore id of a registered thread (see [`register_thread`]).
#[derive(Debug)]
pub struct ThreadRegistration {
    lcore: u32,
    /// Registration belongs to the thread that made it.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl ThreadRegistration {
    /// The lcore id EAL gave the thread.
    pub fn lcore(&self) -> u32 {
        self.lcore
    }
}

impl Drop for ThreadRegistration {
    fn drop(&mut self) {
        // What this lcore's caches hold goes home while it is still this
        // thread's: no thread would flush them after it is given back.
        flush_own_caches();
        // SAFETY: this thread registered (a ThreadRegistration is not Send,
        // so it is dropped by the thread that made it), and EAL still runs
        // (the registration is counted live, so cleanup waits for it).
        unsafe { sys::rte_thread_unregister() };
        released();
    }
}

/// Registers the calling thread with EAL (`rte_thread_register`): it gets
/// an lcore id, and with it its own cache in every mempool, so allocating
/// and freeing mbufs on this thread takes no lock. Unregistered when the
/// returned value drops. A thread that is already an EAL thread (the one
/// that ran [`Eal::init`]) keeps its id.
pub fn register_thread(_eal: Eal) -> Result<ThreadRegistration, EalError> {
    // SAFETY: reads the calling thread's lcore id.
    let current = unsafe { sys::dpw_lcore_id() };
    if current != u32::MAX {
        return Err(EalError(format!(
            "this thread is already EAL lcore {current}: start poll-mode cores on threads of their own"
        )));
    }
    make(|| {
        // SAFETY: EAL runs and is not cleaned up (checked under the lock);
        // the call registers the calling thread only.
        let rc = unsafe { sys::rte_thread_register() };
        if rc < 0 {
            return Err(EalError(format!(
                "EAL gave this thread no lcore id: {}",
                error_text(errno())
            )));
        }
        // SAFETY: as above.
        let lcore = unsafe { sys::dpw_lcore_id() };
        counted();
        Ok(ThreadRegistration {
            lcore,
            _not_send: std::marker::PhantomData,
        })
    })
}
