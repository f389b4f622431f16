//! The daemon's signals, taken on a thread of their own and acted on by
//! the main thread at its ticks ([`crate::daemon::serve`] ticks from
//! before the port opens until the cores are done):
//!
//! * SIGTERM or SIGINT drains: no new connection, the running ones until
//!   `drain_deadline_ms`, then the daemon exits (status 0).
//! * A second SIGTERM or SIGINT, while the drain runs, forces the exit:
//!   the connections left are ended at once, the cores leave, the control
//!   socket is removed and the daemon exits with status 1, its log saying
//!   it was forced. Should the cores not have left [`FORCED_EXIT_WAIT`]
//!   later, the process exits without them (the control socket removed
//!   first).
//! * SIGHUP reads the configuration again ([`crate::daemon::reload`]).
//!
//! Each signal is counted as it comes, so that two that come between two
//! ticks (a double Ctrl-C during a long start) are two.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::daemon::Shared;

/// How long a forced exit waits for the cores to leave before the process
/// exits without them.
pub const FORCED_EXIT_WAIT: Duration = Duration::from_secs(2);

/// The signals taken, and what the main thread did about them.
pub struct Signals {
    /// SIGTERMs and SIGINTs that came, in all.
    stops: Arc<AtomicUsize>,
    /// The last of them (its number).
    last: Arc<AtomicUsize>,
    /// A SIGHUP came since the last tick.
    hup: Arc<AtomicBool>,
    handle: signal_hook::iterator::Handle,
    thread: Option<JoinHandle<()>>,
    /// Stops acted on.
    taken: usize,
    /// When a second stop forced the exit.
    forced_at: Option<Instant>,
}

impl Signals {
    /// Takes SIGTERM, SIGINT and SIGHUP from now on (their default
    /// actions, ending or stopping the process, no longer apply).
    pub fn take() -> Result<Signals, String> {
        let mut iterator = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .map_err(|e| format!("cannot take SIGTERM, SIGINT and SIGHUP: {e}"))?;
        let handle = iterator.handle();
        let stops = Arc::new(AtomicUsize::new(0));
        let last = Arc::new(AtomicUsize::new(0));
        let hup = Arc::new(AtomicBool::new(false));
        let (s, l, h) = (stops.clone(), last.clone(), hup.clone());
        let thread = std::thread::Builder::new()
            .name("dpwarpd-signals".into())
            .spawn(move || {
                for signal in iterator.forever() {
                    if signal == SIGHUP {
                        h.store(true, Ordering::SeqCst);
                    } else {
                        l.store(signal as usize, Ordering::SeqCst);
                        s.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
            .map_err(|e| format!("cannot start the signals' thread: {e}"))?;
        Ok(Signals {
            stops,
            last,
            hup,
            handle,
            thread: Some(thread),
            taken: 0,
            forced_at: None,
        })
    }

    /// Whether a SIGTERM or SIGINT came (before the start: the daemon
    /// exits without starting).
    pub fn stop_asked(&self) -> bool {
        self.stops.load(Ordering::SeqCst) > 0
    }

    /// The name of the last SIGTERM or SIGINT.
    fn last_name(&self) -> &'static str {
        match self.last.load(Ordering::SeqCst) as i32 {
            SIGINT => "SIGINT",
            _ => "SIGTERM",
        }
    }

    /// Acts on the signals that came since the last tick: the first stop
    /// drains, a second forces the exit, SIGHUP reloads.
    pub fn tick(&mut self, shared: &Arc<Shared>) {
        let stops = self.stops.load(Ordering::SeqCst);
        if stops > self.taken {
            let signal = self.last_name();
            if self.taken == 0 {
                tracing::info!(signal, "{signal}: draining");
                shared.request_drain();
            }
            if stops >= 2 && self.forced_at.is_none() {
                tracing::warn!(
                    signal,
                    "{signal} again during the drain: forced exit, the connections left are ended now"
                );
                shared.force_stop();
                self.forced_at = Some(Instant::now());
            }
            self.taken = stops;
        }
        if self.hup.swap(false, Ordering::SeqCst) {
            match crate::daemon::reload(shared) {
                Ok(done) => tracing::info!(done, "SIGHUP: configuration reloaded"),
                Err(e) => tracing::error!(
                    error = e,
                    "SIGHUP: the configuration cannot be applied; keeping the running one"
                ),
            }
        }
    }

    /// Whether a second stop forced the exit.
    pub fn forced(&self) -> bool {
        self.forced_at.is_some()
    }

    /// Whether a forced exit has waited [`FORCED_EXIT_WAIT`] for the cores.
    pub fn forced_overdue(&self) -> bool {
        self.forced_at
            .is_some_and(|at| at.elapsed() >= FORCED_EXIT_WAIT)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
