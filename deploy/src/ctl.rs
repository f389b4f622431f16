//! The control socket `dpwarpctl` talks to: a Unix stream socket, made with
//! permissions 0600 (root's, as the daemon's), one request per connection:
//! a command on one line, the answer a JSON document.
//!
//! Commands: `status`, `stats`, `listeners`, `connections`, `drain`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::bounded::{Bounded, TurnedAway, Workers};
use crate::daemon::{drops, SctpShared, Shared};

/// How long a client has to send its command, from its accept.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// How long a client has to take its answer, once its command came.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// Requests served at once; a client beyond them is told to try again.
pub const REQUESTS_AT_ONCE: usize = 8;

/// The longest command line read (a longer one is refused as such, the
/// rest of it read and dropped).
const COMMAND_MAX: u64 = 256;

/// The commands, for help texts.
pub const COMMANDS: &[&str] = &["status", "stats", "listeners", "connections", "drain"];

/// The answer to `command`.
pub fn answer(shared: &Shared, command: &str) -> Value {
    match command.trim() {
        "status" => status(shared),
        "stats" => stats(shared),
        "listeners" => listeners(shared),
        "connections" => connections(shared),
        "drain" => {
            shared.request_drain();
            json!({ "draining": true, "deadline_ms": shared.config.daemon.drain_deadline_ms })
        }
        other => json!({
            "error": format!("unknown command {other:?}: give one of {}", COMMANDS.join(", "))
        }),
    }
}

fn status(shared: &Shared) -> Value {
    let s = shared.serving.stats();
    json!({
        "state": if shared.drain.load(Ordering::SeqCst) { "draining" }
                 else if shared.listening.load(Ordering::SeqCst) { "serving" }
                 else { "starting" },
        "pid": std::process::id(),
        "uptime_s": shared.started.elapsed().as_secs_f64(),
        "config": shared.config_path.display().to_string(),
        "port": *shared.port_describe.lock().unwrap_or_else(|p| p.into_inner()),
        "cores": shared.cores.len(),
        "clients": s.runs,
        "connections": shared.cores.iter()
            .map(|c| c.open.load(Ordering::Relaxed))
            .sum::<u64>()
            + shared.sctp.as_ref().map_or(0, SctpShared::streams),
    })
}

fn stats(shared: &Shared) -> Value {
    let s = shared.serving.stats();
    let e = &shared.events;
    let cores: Vec<Value> = shared
        .cores
        .iter()
        .enumerate()
        .map(|(k, core)| {
            let c = *core.counters.lock().unwrap_or_else(|p| p.into_inner());
            let all = (c.busy_us + c.idle_us).max(1) as f64;
            json!({
                "core": k,
                "cpu": core.cpu,
                "turns": c.turns,
                "busy_share": c.busy_us as f64 / all,
                "rx_packets": c.device.rx_packets,
                "tx_packets": c.device.tx_packets,
                "drops": drops(&c),
                "mbuf_pool_low_water": c.device.pool_low_water,
                "established": c.established,
                "ended": c.ended,
                "connections": core.open.load(Ordering::Relaxed),
                "urgent_connections": core.urgent.load(Ordering::Relaxed),
                "classes_reflected": c.classes_reflected,
            })
        })
        .collect();
    let control = shared.host.stats();
    let memory = shared.memory.as_ref().map(|m| {
        json!({
            "kind": "memory",
            "accepted": m.accepted.load(Ordering::Relaxed),
            "refused": m.refused.load(Ordering::Relaxed),
            "closed": m.closed.load(Ordering::Relaxed),
            "stags_live": m.grants_live(),
            "pds_live": m.pds_live(),
            "regions": m.regions().map(|(name, len)| json!({ "name": name, "size": len })).collect::<Vec<_>>(),
        })
    });
    let rping = shared.rping_origin.iter().any(Option::is_some).then(|| {
        let (mut verified, mut failed) = (0, 0);
        for c in &shared.cores {
            let (o, _) = &*c.rping.lock().unwrap_or_else(|p| p.into_inner());
            verified += o.verified;
            failed += o.failed;
        }
        json!({
            "kind": "rping",
            "accepted": shared.rping.accepted.load(Ordering::Relaxed),
            "refused": shared.rping.refused.load(Ordering::Relaxed),
            "closed": shared.rping.closed.load(Ordering::Relaxed),
            "verified": verified,
            "failed": failed,
            "clients_per_host": shared.rping.hosts.as_ref().map(|h| h.per_host()),
            // Past the gate in a burst, reset by their core at establishment.
            "reset_over_per_host": shared.rping.hosts.as_ref().map_or(0, |h| h.turned_away()),
        })
    });
    let perftest: Vec<Value> = shared
        .perftest
        .iter()
        .map(|p| {
            let (c, clients) = p.snapshot();
            json!({
                "kind": "perftest",
                "tcp_port": p.port,
                "command": p.config.command.text,
                // The core that serves it (the services take the cores in
                // turn), none for a service spread over every core, and
                // the cores that serve it.
                "core": match p.cores[..] {
                    [core] => Some(core),
                    _ => None,
                },
                "cores": p.cores,
                "slots_taken": p.slots.taken(),
                "clients_per_host": p.slots.per_host(),
                "accepted": p.gate.accepted.load(Ordering::Relaxed),
                "refused": p.gate.refused.load(Ordering::Relaxed),
                "sessions_done": c.done,
                "sessions_failed": c.failed,
                // Its sessions' protection domains (each its own), live or
                // waiting for their QPs to go.
                "pds_live": c.pds,
                "clients": clients.len(),
            })
        })
        .collect();
    let sctp = shared.sctp.as_ref().map(|l| {
        let c = l.counters();
        json!({
            "udp_port": l.udp_port,
            "associations": l.associations(),
            "streams": l.streams(),
            "streams_failed": l.failed(),
            // Each core's endpoint: the associations it holds.
            "cores": l.cores.iter().enumerate().map(|(k, core)| {
                let c = *core.counters.lock().unwrap_or_else(|p| p.into_inner());
                json!({
                    "core": k,
                    "associations": core.associations.load(Ordering::Relaxed),
                    "streams": core.streams.load(Ordering::Relaxed),
                    "streams_up": c.streams_up,
                    "rx_segments": c.rx_segments,
                    "tx_segments": c.tx_segments,
                })
            }).collect::<Vec<_>>(),
            "rx_datagrams": c.rx_datagrams,
            "tx_datagrams": c.tx_datagrams,
            "rx_segments": c.rx_segments,
            "tx_segments": c.tx_segments,
            "rx_segment_octets": c.rx_segment_octets,
            "tx_segment_octets": c.tx_segment_octets,
        })
    });
    json!({
        "memory": memory,
        "rping": rping,
        "perftest": perftest,
        // The bench service's DDP over SCTP listener.
        "sctp": sctp,
        "cores": cores,
        "service": {
            "kind": "bench",
            "accepted": e.accepted.load(Ordering::Relaxed),
            "refused": e.refused.load(Ordering::Relaxed),
            "closed": e.closed.load(Ordering::Relaxed),
            "clients": s.runs,
            "clients_done": s.runs_done,
            "memory_leased": s.leased,
            "memory": s.memory,
            "open": s.open,
            "pds_live": shared.serving.pds(),
        },
        "control": {
            "established": control.established,
            "rejected": control.rejected,
            "failed": control.failed,
            "refused": control.refused_startups,
        },
        // STags registered now, over every core: the cores' own memory,
        // the memory service's grants, each perftest session's slot.
        "stags": shared.host.registry().stags_in_use(),
        // QPs alive: established and not yet ended, over every core, and
        // the DDP over SCTP listener's streams.
        "qps": shared.cores.iter().map(|c| {
            let c = c.counters.lock().unwrap_or_else(|p| p.into_inner());
            c.established.saturating_sub(c.ended)
        }).sum::<u64>()
            + shared.sctp.as_ref().map_or(0, SctpShared::streams),
    })
}

fn listeners(shared: &Shared) -> Value {
    let config = &shared.config;
    let port = config.port();
    let now = *shared.listeners.lock().unwrap_or_else(|p| p.into_inner());
    // Up once every core has its listeners of the latest configuration.
    let generation = shared.listeners_generation.load(Ordering::SeqCst);
    let applied = shared
        .cores
        .iter()
        .all(|c| c.listeners_applied.load(Ordering::SeqCst) == generation);
    let errors = shared.listen_errors();
    let up = shared.listening.load(Ordering::SeqCst)
        && !shared.drain.load(Ordering::SeqCst)
        && applied
        && errors.is_empty();
    let list: Vec<Value> = [
        ("bench", now.bench),
        ("memory", now.memory),
        ("rping", now.rping),
    ]
    .into_iter()
    .chain(shared.perftest.iter().map(|p| ("perftest", Some(p.port))))
    .filter_map(|(kind, tcp_port)| {
        Some(json!({
            "service": kind,
            "address": port.address.0.to_string(),
            "tcp_port": tcp_port?,
            "port": port.name,
            "driver": port.driver.name(),
            "llp": "mpa",
            "crc": config.rnic.crc.on(),
            "markers": config.rnic.markers.on(),
            "ird_max": config.rnic.ird_max,
            "ord": config.rnic.ord,
            "up": up,
        }))
    })
    .chain(shared.sctp.as_ref().map(|s| {
        json!({
            "service": "bench",
            "address": port.address.0.to_string(),
            "udp_port": s.udp_port,
            "port": port.name,
            "driver": port.driver.name(),
            // RFC 5043 over UDP encapsulation (RFC 6951), sessions by RFC
            // 6581 §7's Enhanced Initiate.
            "llp": "sctp",
            "ird_max": config.rnic.ird_max,
            "ord": config.rnic.ord,
            "up": shared.listening.load(Ordering::SeqCst) && !shared.drain.load(Ordering::SeqCst),
        })
    }))
    .collect();
    json!({ "listeners": list, "errors": errors })
}

fn connections(shared: &Shared) -> Value {
    let mut list = Vec::new();
    for (k, core) in shared.cores.iter().enumerate() {
        for c in core
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            list.push(json!({
                "core": k,
                "qp": c.qp.index(),
                "peer": c.peer.map(|p| p.to_string()),
                "service": "bench",
                "llp": c.llp,
                "state": "rts",
                "run": format!("{:016x}", c.run),
                "op": c.op.name(),
                "size": c.size,
                "enhanced": c.enhanced,
                "crc": c.crc,
                "markers_tx": c.markers_tx,
                "markers_rx": c.markers_rx,
                "ird": c.ird,
                "ord": c.ord,
            }));
        }
    }
    for (k, core) in shared.sctp.iter().flat_map(|s| s.cores.iter().enumerate()) {
        let udp_port = shared.sctp.as_ref().map(|s| s.udp_port);
        for c in core
            .connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            // Core k's thread turns it; its QPs are its own.
            list.push(json!({
                "core": k,
                "qp": c.qp.index(),
                "peer": c.peer.map(|p| p.to_string()),
                "service": "bench",
                "llp": "sctp",
                "udp_port": udp_port,
                "state": "rts",
                "run": format!("{:016x}", c.run),
                "op": c.op.name(),
                "size": c.size,
                "enhanced": c.enhanced,
                "ird": c.ird,
                "ord": c.ord,
            }));
        }
    }
    for (k, core) in shared.cores.iter().enumerate() {
        let (_, clients) = &*core.rping.lock().unwrap_or_else(|p| p.into_inner());
        for (qp, peer) in clients {
            list.push(json!({
                "core": k,
                "qp": qp,
                "peer": peer,
                "service": "rping",
                "state": "rts",
            }));
        }
    }
    for p in &shared.perftest {
        let (_, clients) = p.snapshot();
        for (core, (qp, peer, phase)) in clients {
            list.push(json!({
                "core": core,
                "qp": qp,
                "peer": peer,
                "service": "perftest",
                "tcp_port": p.port,
                "state": "rts",
                "session": phase,
            }));
        }
    }
    if let Some(m) = &shared.memory {
        for l in m.lendings() {
            list.push(json!({
                "core": l.core,
                "qp": l.qp.index(),
                "peer": l.peer.to_string(),
                "service": "memory",
                "state": "rts",
                "region": l.region,
            }));
        }
    }
    json!({ "connections": list })
}

/// The control socket: its listener's thread, and the socket file removed
/// when dropped.
pub struct CtlServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl CtlServer {
    /// Makes the socket (and its directory) with permissions 0600 and
    /// serves until dropped, each request on a thread of its own within
    /// its deadlines ([`crate::bounded`]). A stale socket from a daemon
    /// that died is replaced; a live one (another daemon answering), or
    /// anything there that is not a socket, is refused.
    pub fn start(shared: Arc<Shared>) -> Result<CtlServer, String> {
        let path = shared.config.daemon.control_socket.clone();
        let listener = bind(&path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dpwarpd-ctl".into())
            .spawn(move || {
                let mut workers = Workers::new("dpwarpd-ctl-req", REQUESTS_AT_ONCE);
                while !flag.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) if workers.full() => busy(stream),
                        Ok((stream, _)) => {
                            let (shared, stop) = (shared.clone(), flag.clone());
                            let accepted = Instant::now();
                            // No thread for it: dropping the work closes
                            // its connection.
                            let _ = workers.spawn(move || {
                                let _ = serve_one(stream, &shared, accepted, stop);
                            });
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
                // Each request notices the stop within a slice.
                workers.join();
            })
            .map_err(|e| e.to_string())?;
        Ok(CtlServer {
            stop,
            thread: Some(thread),
            path,
        })
    }
}

/// The control socket at `path`, listening, non-blocking, 0600, its
/// directory made (0700) if it had none. A stale socket from a daemon that
/// died is replaced; a live one (another daemon answering), or anything
/// there that is not a socket, is refused. When it fails it leaves nothing
/// behind: neither the directories it made nor a socket file it bound
/// (found by a review: a failed bind left the directory, and a failure
/// after the bind the socket).
fn bind(path: &Path) -> Result<UnixListener, String> {
    let shown = path.display();
    // The directories this call makes, the deepest first.
    let mut made = Vec::new();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        made = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
            .map(Path::to_path_buf)
            .collect();
        // Only root's, as systemd's RuntimeDirectoryMode=0700 makes it.
        if let Err(e) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
        {
            remove_dirs(&made);
            return Err(format!(
                "control_socket {shown}: cannot make its directory: {e}"
            ));
        }
    }
    let bound = bind_in_place(path);
    if bound.is_err() {
        remove_dirs(&made);
    }
    bound
}

/// Removes the directories `made` (the deepest first), each only if empty.
fn remove_dirs(made: &[PathBuf]) {
    for dir in made {
        let _ = std::fs::remove_dir(dir);
    }
}

/// [`bind`] in a directory that exists: a socket file it bound is removed
/// again if it fails after the bind.
fn bind_in_place(path: &Path) -> Result<UnixListener, String> {
    let shown = path.display();
    if let Some(why) = crate::config::not_a_socket(path) {
        return Err(format!("control_socket {why}"));
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(format!(
                "control_socket {shown}: another dpwarpd answers there: stop it first, or \
                 give this one another socket"
            ));
        }
        // A socket no one answers on (`not_a_socket` said it is one).
        std::fs::remove_file(path)
            .map_err(|e| format!("control_socket {shown}: cannot replace it: {e}"))?;
    }
    // 0600 from its first moment (no window between bind and chmod).
    let mask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(mask);
    let listener =
        bound.map_err(|e| format!("control_socket {shown}: cannot listen there: {e}"))?;
    let ready = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("control_socket {shown}: cannot make it 0600: {e}"))
        .and_then(|()| {
            listener
                .set_nonblocking(true)
                .map_err(|e| format!("control_socket {shown}: {e}"))
        });
    match ready {
        Ok(()) => Ok(listener),
        Err(why) => {
            drop(listener);
            let _ = std::fs::remove_file(path);
            Err(why)
        }
    }
}

impl Drop for CtlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The control socket's clients turned away ([`busy`]).
pub static TURNED_AWAY: TurnedAway = TurnedAway::new("control");

/// Tells a client beyond [`REQUESTS_AT_ONCE`] to come back, if its socket
/// takes it at once, and closes its connection; waits for nothing (the
/// accept thread's). One that left first is counted as gone
/// ([`crate::bounded::turn_away`]).
fn busy(stream: UnixStream) {
    let reply = json!({
        "error": format!(
            "dpwarpd answers {REQUESTS_AT_ONCE} other requests now: try again"
        )
    });
    crate::bounded::turn_away(stream, format!("{reply}\n").as_bytes(), &TURNED_AWAY);
}

/// Serves one request: its command line within [`REQUEST_DEADLINE`] of
/// `accepted`, the answer taken within [`ANSWER_DEADLINE`] after; cut off
/// at once when `stop` is set.
fn serve_one(
    stream: UnixStream,
    shared: &Shared,
    accepted: Instant,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let mut stream = Bounded::new(stream, accepted + REQUEST_DEADLINE, stop)?;
    let mut line = Vec::new();
    BufReader::new((&mut stream).take(COMMAND_MAX)).read_until(b'\n', &mut line)?;
    stream.set_deadline(Instant::now() + ANSWER_DEADLINE);
    // A line cut at COMMAND_MAX is no command, and is not echoed (found
    // by a review: its first 256 octets came back as an unknown command).
    let cut = line.len() as u64 == COMMAND_MAX && line.last() != Some(&b'\n');
    let reply = match std::str::from_utf8(&line) {
        _ if cut => json!({
            "error": format!(
                "the command is longer than {COMMAND_MAX} octets: give one of {}",
                COMMANDS.join(", ")
            )
        }),
        Ok(command) => answer(shared, command),
        Err(_) => json!({
            "error": format!(
                "the command is not UTF-8 text: give one of {}",
                COMMANDS.join(", ")
            )
        }),
    };
    writeln!(stream, "{reply}")?;
    // The rest of a long line, or anything after the command, is read and
    // dropped, so the client reads the answer and its end, not a reset
    // (found by a review: ECONNRESET lost dpwarpctl the answer).
    stream.finish()
}

/// How long `dpwarpctl` waits for the daemon's answer.
pub const CLIENT_WAIT: Duration = Duration::from_secs(5);

/// `dpwarpctl`'s side: sends `command` to the daemon at `socket` and
/// returns its answer.
pub fn request(socket: &Path, command: &str) -> Result<Value, String> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot reach dpwarpd at {}: {e} (is it running? is this its control_socket?)",
            socket.display()
        )
    })?;
    stream
        .set_read_timeout(Some(CLIENT_WAIT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(CLIENT_WAIT))
        .map_err(|e| e.to_string())?;
    let late = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "dpwarpd did not answer within {} s (at {})",
            CLIENT_WAIT.as_secs(),
            socket.display()
        ),
        _ => format!("no answer from dpwarpd: {e}"),
    };
    writeln!(stream, "{command}").map_err(late)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(late)?;
    serde_json::from_str(&text).map_err(|e| format!("dpwarpd's answer is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that cannot be bound (its path longer than a Unix socket
    /// address takes) leaves behind none of the directories made for it,
    /// and none it did not make is removed (found by a review: the start
    /// failed and left the directory); one that can is bound 0600.
    #[test]
    fn a_socket_that_cannot_be_bound_leaves_no_directory() {
        use std::os::unix::fs::FileTypeExt;
        let dir = std::env::temp_dir().join(format!("dpwarpd-ctl-bind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let deep = dir.join("a").join("d".repeat(110));
        let e = bind(&deep.join("control.sock")).unwrap_err();
        assert!(e.contains("cannot listen there"), "{e}");
        assert!(
            !dir.join("a").exists(),
            "a failed bind left its directories"
        );
        assert!(dir.is_dir(), "a directory that was there stays");
        let path = dir.join("b").join("control.sock");
        let listener = bind(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        drop(listener);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A client beyond the requests served at once is told to come back,
    /// and reads that answer and its end, not a reset, however much of
    /// its command had come (found by a review: octets left unread reset
    /// the connection).
    #[test]
    fn a_busy_answer_ends_without_a_reset() {
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let mut command = vec![b'x'; 3000];
        command.push(b'\n');
        theirs.write_all(&command).unwrap();
        busy(ours);
        let mut answer = String::new();
        theirs.read_to_string(&mut answer).unwrap();
        assert!(answer.contains("other requests now: try again"), "{answer}");
    }

    /// A client beyond the requests served at once that closes its end
    /// before the busy answer is written: the write fails (EPIPE), raises
    /// no SIGPIPE, whatever the process does with that signal, and the
    /// client is counted as gone (from a review's suspicion of a race:
    /// the failure was dropped unseen; a `write(2)`, which the standard
    /// library used on a `UnixStream` before 2025, would raise the signal,
    /// which only Rust's runtime ignoring SIGPIPE keeps from ending the
    /// process: `Timed::send`). SIGPIPE is blocked on the thread that answers,
    /// so that one raised stays pending there for the test to see instead
    /// of being ignored.
    #[test]
    fn a_client_that_left_before_the_busy_answer_is_counted_and_raises_no_sigpipe() {
        use nix::sys::signal::{SigSet, Signal};
        let gone = TURNED_AWAY.gone.load(Ordering::Relaxed);
        let raised = std::thread::spawn(|| {
            let mut pipe = SigSet::empty();
            pipe.add(Signal::SIGPIPE);
            pipe.thread_block().unwrap();
            let (ours, theirs) = UnixStream::pair().unwrap();
            drop(theirs);
            busy(ours);
            // SigPnd: the signals pending for this thread alone, in hex.
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let pending = status
                .lines()
                .find_map(|l| l.strip_prefix("SigPnd:"))
                .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
                .unwrap();
            let raised = pending & (1 << (Signal::SIGPIPE as u64 - 1)) != 0;
            if raised {
                // Taken here, so that it is never delivered.
                pipe.wait().unwrap();
            }
            raised
        })
        .join()
        .unwrap();
        assert!(
            !raised,
            "the busy answer to a client that left raised SIGPIPE"
        );
        assert_eq!(TURNED_AWAY.gone.load(Ordering::Relaxed), gone + 1);
    }

    /// A daemon that takes the connection and never answers: dpwarpctl
    /// says so in words, not as an OS error number (found by a review: it
    /// said "Resource temporarily unavailable (os error 11)").
    #[test]
    fn a_silent_daemon_is_reported_in_words() {
        let dir = std::env::temp_dir().join(format!("dpwarpctl-silent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("silent.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let holder = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            std::thread::sleep(CLIENT_WAIT + Duration::from_secs(1));
            drop(conn);
        });
        let e = request(&path, "status").unwrap_err();
        assert!(
            e.starts_with(&format!(
                "dpwarpd did not answer within {} s",
                CLIENT_WAIT.as_secs()
            )),
            "{e}"
        );
        holder.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
