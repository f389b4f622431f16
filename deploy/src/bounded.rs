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
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// Shuts its sending side (as `TcpStream::shutdown(Shutdown::Write)`).
    fn shutdown_write(&self) -> io::Result<()>;
    /// Writes what the socket takes of `buf` with `send(2)`'s
    /// `MSG_NOSIGNAL`: a client that has gone makes it fail with `EPIPE`
    /// and raises no SIGPIPE, whatever the process does with that signal
    /// and whatever the standard library's `write` does (it sends with
    /// `MSG_NOSIGNAL` on a `UnixStream` only since 2025, later than some
    /// toolchains this crate builds with).
    fn send(&self, buf: &[u8]) -> io::Result<usize>;
}

/// [`Timed::send`] for any socket.
fn send_nosignal(socket: &impl AsRawFd, buf: &[u8]) -> io::Result<usize> {
    use nix::sys::socket::{send, MsgFlags};
    send(socket.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL).map_err(io::Error::from)
}

impl Timed for TcpStream {
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        send_nosignal(self, buf)
    }
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl Timed for UnixStream {
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        send_nosignal(self, buf)
    }
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
    fn nonblocking(&self, on: bool) -> io::Result<()> {
        self.set_nonblocking(on)
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// The most octets a client's connection is drained of once answered
/// ([`Bounded::finish`], [`drain_now`]); a client that sends more is reset.
pub const DRAIN_MAX: usize = 64 << 10;

/// How long an answered client's connection is drained at most (within its
/// deadline), waiting for the client to close its end: one that keeps its
/// connection open holds its thread no longer.
pub const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// Reads and drops what the non-blocking `stream` has received, at most
/// `max` octets: until nothing more is there, the client's end, or an
/// error. Waits for nothing.
pub fn drain_now(stream: &mut impl Read, max: usize) {
    let mut buf = [0u8; 4096];
    let mut left = max;
    while left > 0 {
        match stream.read(&mut buf[..left.min(4096)]) {
            Ok(0) => return,
            Ok(n) => left -= n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The clients an endpoint turned away because it served as many requests
/// as it may at once ([`turn_away`]): those that read the answer, and
/// those that had left before it (their connection closed or reset, the
/// write failing with `EPIPE` or `ECONNRESET`), which are no error of the
/// daemon's. The first is logged, the rest only counted (the metrics'
/// `dpwarp_operator_turned_away_total`), so that a client that opens
/// connections in a loop fills no log.
#[derive(Debug)]
pub struct TurnedAway {
    /// The endpoint's name in the log and the metrics.
    pub endpoint: &'static str,
    /// Turned away with the answer written.
    pub answered: AtomicU64,
    /// Turned away without the answer: they had left (closed or reset), or
    /// their socket took none of it at once (a client that reads nothing).
    pub gone: AtomicU64,
    logged: AtomicBool,
}

impl TurnedAway {
    /// None yet.
    pub const fn new(endpoint: &'static str) -> TurnedAway {
        TurnedAway {
            endpoint,
            answered: AtomicU64::new(0),
            gone: AtomicU64::new(0),
            logged: AtomicBool::new(false),
        }
    }
}

/// Tells a client beyond the requests served at once `answer`, if its
/// socket takes it at once, and closes its connection; waits for nothing
/// (the accept thread's). What of the request has come is read first, and
/// again once answered: a socket closed with octets unread resets the
/// connection, and the client may see that instead of the answer
/// ([`Bounded::finish`]; what comes later still resets it). A client that
/// closed first makes the write fail (`EPIPE`): no signal is raised
/// ([`Timed::send`]), the failure is counted in `counts`.
pub fn turn_away<S: Timed>(mut stream: S, answer: &[u8], counts: &TurnedAway) {
    let answered = stream.nonblocking(true).is_ok() && {
        drain_now(&mut stream, DRAIN_MAX);
        let sent = send_all(&stream, answer);
        let _ = stream.shutdown_write();
        drain_now(&mut stream, DRAIN_MAX);
        sent.is_ok()
    };
    let count = if answered {
        &counts.answered
    } else {
        &counts.gone
    };
    count.fetch_add(1, Ordering::Relaxed);
    if !counts.logged.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            endpoint = counts.endpoint,
            answered,
            "a client was turned away: as many requests as the endpoint serves at once were \
             being served (the next are counted in dpwarp_operator_turned_away_total, not logged)"
        );
    }
}

/// Sends all of `buf` through [`Timed::send`], as `write_all` does
/// through `write`.
fn send_all<S: Timed>(stream: &S, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match stream.send(buf) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
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

    /// Ends the answer written: sends it, shuts the sending side (the
    /// client reads the answer's end), then reads and drops what the
    /// client sent beyond its request, until the client closes its end,
    /// [`DRAIN_MAX`] octets, [`DRAIN_WAIT`], the deadline or the stop. A socket closed with
    /// received octets unread resets the connection (RFC 1122 §4.2.2.13:
    /// "its TCP SHOULD send a RST to show that data was lost"; a Unix
    /// socket's peer reads ECONNRESET), and the client may lose the answer
    /// (found by a review: a command line longer than the control socket
    /// reads was answered, then reset).
    pub fn finish(&mut self) -> io::Result<()> {
        self.flush()?;
        self.stream.shutdown_write()?;
        self.deadline = self.deadline.min(Instant::now() + DRAIN_WAIT);
        let mut buf = [0u8; 4096];
        let mut left = DRAIN_MAX;
        while left > 0 {
            match self.read(&mut buf[..left.min(4096)]) {
                Ok(0) | Err(_) => break,
                Ok(n) => left -= n,
            }
        }
        Ok(())
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
            match self.stream.send(buf) {
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

    /// A finished answer leaves nothing of the client's unread, so the
    /// client reads the whole answer and its end, not a reset (found by a
    /// review).
    #[test]
    fn a_finished_answer_ends_without_a_reset() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let mut conn = Bounded::new(ours, Instant::now() + Duration::from_secs(5), stop).unwrap();
        theirs.write_all(&[b'x'; 3000]).unwrap();
        let mut head = [0u8; 256];
        conn.read_exact(&mut head).unwrap();
        let server = std::thread::spawn(move || {
            conn.write_all(b"the answer\n").unwrap();
            conn.finish().unwrap();
        });
        let mut answer = String::new();
        theirs.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "the answer\n");
        drop(theirs);
        server.join().unwrap();
        // Without waiting: what is there is read.
        let (mut ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(&[b'y'; 5000]).unwrap();
        ours.set_nonblocking(true).unwrap();
        drain_now(&mut ours, DRAIN_MAX);
        ours.write_all(b"busy\n").unwrap();
        drop(ours);
        let mut answer = String::new();
        theirs.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "busy\n");
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
