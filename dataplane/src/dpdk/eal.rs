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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

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
    /// must be gone; after it, DPDK cannot be used in this process again
    /// (every constructor says so).
    pub fn cleanup(self) -> Result<(), EalError> {
        let _started = STARTED.lock().unwrap_or_else(|p| p.into_inner());
        let live = LIVE_OBJECTS.load(Ordering::SeqCst);
        if live > 0 {
            return Err(EalError(format!(
                "{live} DPDK pool(s), port(s), queue(s) or thread registration(s) still exist: \
                 drop them before cleanup"
            )));
        }
        if CLEANED.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
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

    /// TSC ticks per second, as EAL measured at start.
    pub fn tsc_hz(self) -> u64 {
        // SAFETY: EAL runs; the call reads a value EAL set at start.
        unsafe { sys::rte_get_tsc_hz() }
    }
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
