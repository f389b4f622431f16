//! A gate between DPDK 22.11's memif control channel and the cores that
//! burst on memif ports, so that a peer that leaves cannot crash us.
//!
//! When a memif peer goes (its process ends or closes its port), EAL's
//! interrupt thread runs the driver's disconnect: it clears the port's
//! "connected" flag, then unmaps the memory the rings live in. A burst
//! checks that flag once, at its start; one that began before the flag
//! was cleared and is still reading the rings when the memory goes
//! faults (a SIGSEGV in `librte_net_memif`). Nothing in DPDK's API orders
//! the two, and a poller preempted inside a burst (two CPUs shared by
//! many processes, as on CI) makes the window milliseconds wide: dpwarpd,
//! a memif server, died so when a client left.
//!
//! The driver says what its control channel does, in its log (type
//! `pmd.net.memif`), on the thread that does it, before it does it. A
//! connected port's disconnect follows one of: a message received
//! ("Received msg type", the first thing logged of any, a peer's
//! Disconnect among them), the peer's end of file ("Invalid message
//! size"), a failed send ("sendmsg fail"); it ends with "Disconnected"
//! after the memory is gone. A connection ends with "Connected." and
//! "Remote interface ... connected." So this module takes EAL's log
//! stream ([`install`]), raises memif's log level to debug (printing only
//! what the configured level lets through), and:
//!
//! * on one of those lines logged outside a burst, closes the gate and
//!   waits until no guarded burst is running: each memif queue marks itself
//!   inside a burst before it looks at the gate, the gate is closed before
//!   the waiter looks at the marks (both sequentially consistent), so
//!   either the burst sees the gate closed and does not start, or the
//!   waiter sees the mark and waits for that burst to end;
//! * while the gate is closed, bursts on memif queues do nothing (receive
//!   none, send none: back-pressure, the frames stay with the caller);
//! * "Disconnected" or a connection's end opens it again, and so does
//!   time ([`CLOSED_FOR`]): a message that leads to neither (a second
//!   client refused on a socket in use) does not stop the port for good.
//!
//! While connected, a memif control channel is silent, so the gate closes
//! only when a link comes or goes, when the rings carry nothing anyway.
//!
//! What it cannot cover: an interrupt thread held off for longer than
//! [`CLOSED_FOR`] between its log line and the unmapping, with a poller
//! preempted inside a burst at that moment; and a DPDK whose memif logs
//! differently (the gate then never closes: the race is back, nothing
//! else changes). Costs a burst on a memif queue two stores (one an
//! `xchg`) and a load, which did not show: a 64 B Write's round trip
//! over memif 1.17-1.19 us at the median with the gate, 1.15-1.18 without
//! (`bench write --lat -s 64 --transport memif`, three runs each, taken in
//! turn), 64 B Writes at 8.2-8.8 M/s with it, 8.4-8.8 without (five runs
//! each).
//! An open gate is 0, so bursts do not read the clock: a gate left
//! "closed until" a time that had passed made them read it, and cost
//! that round trip 9% (1.18 to 1.29 us).

use std::cell::Cell;
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dpdk_sys as sys;

/// How long a closed gate stays closed at most.
const CLOSED_FOR: Duration = Duration::from_millis(50);

/// How long the log thread waits for a burst to end before it lets the
/// driver go on anyway (a poller stopped inside a burst for this long is
/// not one a wait can help).
const WAIT_MAX: Duration = Duration::from_secs(1);

/// One guarded queue's "inside a burst" mark, on a cache line of its own
/// (its core writes it twice a burst).
#[derive(Debug, Default)]
#[repr(align(64))]
pub(super) struct Mark(AtomicBool);

/// The marks of every memif queue there is.
static MARKS: Mutex<Vec<Weak<Mark>>> = Mutex::new(Vec::new());

/// 0: open. Otherwise closed until this time of [`crate::clock::now`], in
/// microseconds.
static CLOSED_UNTIL: AtomicU64 = AtomicU64::new(0);

/// Times the gate closed, and times a wait for a burst gave up.
static CLOSINGS: AtomicU64 = AtomicU64::new(0);
static WAITS_GIVEN_UP: AtomicU64 = AtomicU64::new(0);

/// memif's log type, and the level its lines are printed up to (the one
/// EAL was configured with); `u32::MAX` before [`install`].
static MEMIF_TYPE: AtomicU32 = AtomicU32::new(u32::MAX);
static MEMIF_PRINTED: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// Whether this thread is inside a guarded burst (a memif line it logs
    /// then is the burst's own, not the control channel's).
    static IN_BURST: Cell<bool> = const { Cell::new(false) };
    /// A log line's octets until its newline.
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A mark for a new memif queue.
pub(super) fn mark() -> Arc<Mark> {
    let mark = Arc::new(Mark::default());
    let mut marks = MARKS.lock().unwrap_or_else(|p| p.into_inner());
    marks.retain(|m| m.strong_count() > 0);
    marks.push(Arc::downgrade(&mark));
    mark
}

/// Runs `burst` unless the gate is closed (then returns 0).
#[inline]
pub(super) fn guarded(mark: &Mark, burst: impl FnOnce() -> usize) -> usize {
    mark.0.store(true, Ordering::SeqCst);
    if is_closed() {
        mark.0.store(false, Ordering::Release);
        return 0;
    }
    IN_BURST.set(true);
    let n = burst();
    IN_BURST.set(false);
    mark.0.store(false, Ordering::Release);
    n
}

#[inline]
fn is_closed() -> bool {
    let until = CLOSED_UNTIL.load(Ordering::SeqCst);
    if until == 0 {
        return false;
    }
    if (crate::clock::now().total_micros() as u64) < until {
        return true;
    }
    // Run out: open, so that bursts stop reading the clock.
    let _ = CLOSED_UNTIL.compare_exchange(until, 0, Ordering::SeqCst, Ordering::SeqCst);
    false
}

/// Closes the gate and waits until no guarded burst runs.
fn close() {
    let until = crate::clock::now().total_micros() as u64 + CLOSED_FOR.as_micros() as u64;
    CLOSED_UNTIL.fetch_max(until, Ordering::SeqCst);
    CLOSINGS.fetch_add(1, Ordering::Relaxed);
    let marks: Vec<Arc<Mark>> = MARKS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let give_up = crate::clock::now().total_micros() + WAIT_MAX.as_micros() as i64;
    for mark in &marks {
        while mark.0.load(Ordering::SeqCst) {
            if crate::clock::now().total_micros() > give_up {
                WAITS_GIVEN_UP.fetch_add(1, Ordering::Relaxed);
                return;
            }
            std::thread::yield_now();
        }
    }
}

fn open() {
    CLOSED_UNTIL.store(0, Ordering::SeqCst);
}

/// Times the gate closed, and waits for a burst that gave up, since the
/// process started.
pub fn counters() -> (u64, u64) {
    (
        CLOSINGS.load(Ordering::Relaxed),
        WAITS_GIVEN_UP.load(Ordering::Relaxed),
    )
}

/// What a memif log line does to the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Open,
    Close,
    Nothing,
}

fn verdict(line: &str) -> Verdict {
    // Each line is "function(): text".
    let text = line.split_once("(): ").map_or(line, |(_, t)| t);
    if text.starts_with("Received msg type")
        || text.starts_with("Invalid message size")
        || text.starts_with("sendmsg fail")
    {
        Verdict::Close
    } else if text.starts_with("Connected.")
        || text.starts_with("Disconnected")
        || (text.starts_with("Remote interface") && text.trim_end().ends_with("connected."))
    {
        Verdict::Open
    } else {
        Verdict::Nothing
    }
}

/// EAL's log stream's writes: whole lines are passed on to stderr if their
/// level is one the configuration prints, and memif's steer the gate.
extern "C" fn write(buf: *const c_char, len: usize) -> isize {
    // SAFETY: stdio hands us `len` readable octets at `buf`.
    let octets = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    // Never unwind into C.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: read the calling thread's record of the message rte_log
        // is writing (plain getters).
        let (level, logtype) = unsafe {
            (
                sys::rte_log_cur_msg_loglevel() as u32,
                sys::rte_log_cur_msg_logtype() as u32,
            )
        };
        let memif = logtype == MEMIF_TYPE.load(Ordering::Relaxed);
        let print = !memif || level <= MEMIF_PRINTED.load(Ordering::Relaxed);
        LINE.with_borrow_mut(|line| {
            line.extend_from_slice(octets);
            while let Some(end) = line.iter().position(|&b| b == b'\n') {
                let whole: Vec<u8> = line.drain(..=end).collect();
                if memif && !IN_BURST.get() {
                    match verdict(&String::from_utf8_lossy(&whole)) {
                        Verdict::Open => open(),
                        Verdict::Close => close(),
                        Verdict::Nothing => {}
                    }
                }
                if print {
                    use std::io::Write;
                    let _ = std::io::stderr().write_all(&whole);
                }
            }
            // A line longer than any DPDK writes: print what there is.
            if line.len() > 4096 {
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line);
                line.clear();
            }
        });
    });
    len as isize
}

/// Takes EAL's log stream and raises memif's log level (see the module's
/// text). Called once, after `rte_eal_init`; a failure leaves DPDK's own
/// stream and memif ungated, and says why.
pub(super) fn install() -> Result<(), String> {
    let name = c"pmd.net.memif";
    // SAFETY: EAL runs; rte_log_register returns the type's id, registering
    // it if the driver (a plugin) did not.
    let logtype = unsafe { sys::rte_log_register(name.as_ptr()) };
    if logtype < 0 {
        return Err("memif's log type could not be looked up".into());
    }
    // SAFETY: a valid log type.
    let printed = unsafe { sys::rte_log_get_level(logtype as u32) };
    // SAFETY: the function lives as long as the process; the stream is
    // never closed (EAL keeps it).
    let stream = unsafe { sys::dpw_log_stream(Some(write)) };
    if stream.is_null() {
        return Err("no log stream could be made (fopencookie failed)".into());
    }
    MEMIF_PRINTED.store(printed.max(0) as u32, Ordering::Relaxed);
    MEMIF_TYPE.store(logtype as u32, Ordering::Relaxed);
    // SAFETY: a valid stream, kept for the process's life.
    unsafe { sys::rte_openlog_stream(stream.cast()) };
    // SAFETY: a valid log type and level.
    let rc = unsafe { sys::rte_log_set_level(logtype as u32, sys::RTE_LOG_DEBUG) };
    if rc < 0 {
        return Err("memif's log level could not be raised".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_comes_before_a_disconnect_closes_and_a_link_s_change_opens() {
        for open in [
            "memif_connect(): Connected.\n",
            "memif_msg_receive_connected(): Remote interface dpwarp connected.\n",
            "memif_disconnect(): Disconnected, id: 0, role: server.\n",
        ] {
            assert_eq!(verdict(open), Verdict::Open, "{open}");
        }
        for close in [
            "memif_msg_receive(): Invalid message size = 0\n",
            "memif_msg_receive(): Received msg type: 5.\n",
            "memif_msg_send_from_queue(): sendmsg fail: Broken pipe.\n",
        ] {
            assert_eq!(verdict(close), Verdict::Close, "{close}");
        }
        for nothing in [
            "memif_msg_send_from_queue(): Sent msg type 6.\n",
            "memif_connect_client(): Memif socket: /run/x.sock connected.\n",
            "memif_listener_handler(): /run/x.sock: Connection request accepted.\n",
            "memif_msg_receive_disconnect(): Disconnect received: Device closed\n",
        ] {
            assert_eq!(verdict(nothing), Verdict::Nothing, "{nothing}");
        }
    }
}
