//! The operator's endpoints (the metrics endpoint, the control socket)
//! serve each request on a thread of its own, a few at once, and within a
//! deadline for the whole request: a client that sends slowly, or never
//! reads its answer, holds its own thread until its deadline and no
//! longer, and neither another client nor the daemon's shutdown waits for
//! it.
//!
//! A read or write waits at most [`SLICE`] at a time, so that the
//! connection notices its deadline and the server's stop between two
//! attempts, however the client trickles its octets.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest one read or write waits before the deadline and the stop
/// are looked at again.
pub const SLICE: Duration = Duration::from_millis(100);

/// A stream whose reads and writes can be given a timeout.
pub trait Timed: Read + Write {
    /// Sets the read timeout (as `TcpStream::set_read_timeout`).
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    /// Sets the write timeout (as `TcpStream::set_write_timeout`).
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
    /// Makes it blocking or not (as `TcpStream::set_nonblocking`).
    fn nonblocking(&self, on: bool) -> io::Result<()>;
}

impl Timed for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

impl Timed for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
}

/// A client's connection, read and written until its deadline or the
/// server's stop, whichever comes first: then every read and write fails
/// (`TimedOut`, or `Other` for the stop).
pub struct Bounded<S: Timed> {
    stream: S,
    deadline: Instant,
    stop: Arc<AtomicBool>,
}

impl<S: Timed> Bounded<S> {
    /// `stream` (made blocking), to be done with by `deadline`, or as soon
    /// as `stop` is set.
    pub fn new(stream: S, deadline: Instant, stop: Arc<AtomicBool>) -> io::Result<Bounded<S>> {
        stream.nonblocking(false)?;
        Ok(Bounded {
            stream,
            deadline,
            stop,
        })
    }

    /// Moves the deadline (e.g. from the request's to the answer's).
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// How long the next attempt may wait, or why there is none.
    fn next_wait(&self) -> io::Result<Duration> {
        // Not `Interrupted`: `read_until` and `write_all` would try again.
        if self.stop.load(Ordering::SeqCst) {
            return Err(io::Error::other("the daemon is stopping"));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client's deadline passed",
            ));
        }
        Ok(left.min(SLICE))
    }
}

/// Whether `e` is a timeout of one attempt (try again).
fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl<S: Timed> Read for Bounded<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let wait = self.next_wait()?;
            self.stream.read_timeout(wait)?;
            match self.stream.read(buf) {
                Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }
}

impl<S: Timed> Write for Bounded<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            let wait = self.next_wait()?;
            self.stream.write_timeout(wait)?;
            match self.stream.write(buf) {
                Err(e) if timed_out(&e) || e.kind() == io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// The requests being served: their threads, at most `max` at once.
pub struct Workers {
    name: &'static str,
    max: usize,
    busy: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Room for `max` requests at once, on threads named `name`.
    pub fn new(name: &'static str, max: usize) -> Workers {
        Workers {
            name,
            max,
            busy: Arc::new(AtomicUsize::new(0)),
            threads: Vec::new(),
        }
    }

    /// Whether `max` requests are being served now (the next is to be
    /// refused).
    pub fn full(&mut self) -> bool {
        self.threads.retain(|t| !t.is_finished());
        self.busy.load(Ordering::SeqCst) >= self.max
    }

    /// Serves a request with `work` on a thread of its own, if fewer than
    /// `max` are being served; otherwise (or if no thread can be made)
    /// gives `work` back, for the caller to refuse.
    pub fn spawn<F: FnOnce() + Send + 'static>(&mut self, work: F) -> Result<(), F> {
        if self.full() {
            return Err(work);
        }
        // Counted until the thread is done, a panic included.
        struct Busy(Arc<AtomicUsize>);
        impl Drop for Busy {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.busy.fetch_add(1, Ordering::SeqCst);
        let busy = Busy(self.busy.clone());
        // The work is handed to the thread through a slot, so that it comes
        // back if no thread can be made.
        let slot = Arc::new(std::sync::Mutex::new(Some(work)));
        let theirs = slot.clone();
        let spawned = std::thread::Builder::new()
            .name(self.name.into())
            .spawn(move || {
                let _busy = busy;
                let work = theirs.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some(work) = work {
                    work();
                }
            });
        match spawned {
            Ok(t) => {
                self.threads.push(t);
                Ok(())
            }
            Err(_) => {
                let work = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
                work.map_or(Ok(()), Err)
            }
        }
    }

    /// Waits for the requests being served (each ends within [`SLICE`] of
    /// the server's stop).
    pub fn join(&mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that sends one octet at a time, more slowly than one read's
    /// timeout but never stopping, is cut off at its deadline (found by a
    /// review: each read's timeout was restarted by every octet, so such a
    /// client held the metrics endpoint for hours).
    #[test]
    fn a_trickling_client_is_cut_off_at_its_deadline() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let trickle = std::thread::spawn(move || {
            for _ in 0..40 {
                if theirs.write_all(b"G").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(60));
            }
        });
        let start = Instant::now();
        let mut conn =
            Bounded::new(ours, start + Duration::from_millis(500), stop.clone()).unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 16];
        let end = loop {
            match conn.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => head.extend_from_slice(&buf[..n]),
                Err(e) => break Err(e),
            }
        };
        let took = start.elapsed();
        assert_eq!(end.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(took < Duration::from_millis(800), "{took:?}");
        assert!(!head.is_empty() && head.len() < 40, "{}", head.len());
        drop(conn);
        trickle.join().unwrap();
    }

    /// The server's stop ends a read that waits on a silent client within
    /// a slice, long before its deadline.
    #[test]
    fn the_stop_ends_a_wait_at_once() {
        let (ours, _theirs) = UnixStream::pair().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let mut conn = Bounded::new(ours, start + Duration::from_secs(60), stop.clone()).unwrap();
        let flag = stop.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            flag.store(true, Ordering::SeqCst);
        });
        // Through `read_until`, which tries again after `Interrupted`.
        let mut line = Vec::new();
        let e = io::BufRead::read_until(&mut io::BufReader::new(&mut conn), b'\n', &mut line)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::Other);
        assert!(start.elapsed() < Duration::from_millis(600));
        stopper.join().unwrap();
    }

    /// No more than `max` requests at once; a finished one gives its place
    /// back.
    #[test]
    fn workers_are_bounded() {
        let mut w = Workers::new("test-worker", 2);
        let gate = Arc::new(AtomicBool::new(false));
        for _ in 0..2 {
            let g = gate.clone();
            assert!(w
                .spawn(move || {
                    while !g.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                })
                .is_ok());
        }
        assert!(w.spawn(|| {}).is_err(), "a third at once");
        gate.store(true, Ordering::SeqCst);
        w.join();
        assert!(w.spawn(|| {}).is_ok());
        w.join();
    }
}
