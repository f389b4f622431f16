//! Metrics in the Prometheus text exposition format (version 0.0.4), served
//! at `GET /metrics` on the configured address by a thread of its own: it
//! reads what the cores published (every `PUBLISH_EVERY`), never a core.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bounded::{Bounded, TurnedAway, Workers};
use crate::daemon::{drops, PerftestShared, RpingGate, Shared};
pub use crate::histogram::{Histogram, SETUP_BUCKETS_US};
use crate::memory::MemoryService;

/// The samples of a service's response times.
fn response_samples(
    name: &str,
    service: &str,
    t: &rnic_engine::qp::ResponseTimes,
    out: &mut String,
) {
    let mut cumulative = 0;
    for (k, n) in t.buckets.iter().enumerate() {
        cumulative += n;
        let le = rnic_engine::qp::ResponseTimes::bound_us(k)
            .map_or("+Inf".to_string(), |b| format!("{}", b as f64 / 1e6));
        let _ = writeln!(
            out,
            "{name}_bucket{{service=\"{service}\",le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "{name}_sum{{service=\"{service}\"}} {}",
        t.sum_us as f64 / 1e6
    );
    let _ = writeln!(out, "{name}_count{{service=\"{service}\"}} {cumulative}");
}

/// The exposition of everything the daemon counts.
pub fn render(shared: &Shared) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, f64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v) in samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{name} {v}");
            } else {
                let _ = writeln!(out, "{name}{{{labels}}} {v}");
            }
        }
    };
    family(
        "dpwarp_up",
        "gauge",
        "1 while the daemon serves, 0 while it drains.",
        &[(
            String::new(),
            f64::from(u8::from(!shared.drain.load(Ordering::SeqCst))),
        )],
    );
    family(
        "dpwarp_metrics_request_cpu_seconds_total",
        "counter",
        "CPU time the metrics endpoint's requests took, each on its own thread (the accept thread's apart).",
        &[(
            String::new(),
            REQUEST_CPU_NS.load(Ordering::Relaxed) as f64 / 1e9,
        )],
    );
    family(
        "dpwarp_operator_turned_away_total",
        "counter",
        "Clients of the metrics endpoint and the control socket turned away because as many requests as each serves at once were being served: answered (503, or the control socket's error), or gone (closed, reset, or reading nothing) before the answer.",
        &turned_away(),
    );
    family(
        "dpwarp_uptime_seconds",
        "gauge",
        "Seconds since the daemon started.",
        &[(String::new(), shared.started.elapsed().as_secs_f64())],
    );
    family(
        "dpwarp_stags",
        "gauge",
        "STags registered now, over every core (the cores' memory, memory grants, perftest sessions' slots).",
        &[(
            String::new(),
            shared.host.registry().stags_in_use() as f64,
        )],
    );
    let (closings, given_up) = dataplane::dpdk::memif_gate_counters();
    family(
        "dpwarp_memif_gate_closings_total",
        "counter",
        "Times memif's control channel was about to act (a link coming or going) and bursts on memif ports waited for it (0 without memif).",
        &[(String::new(), closings as f64)],
    );
    family(
        "dpwarp_memif_gate_waits_given_up_total",
        "counter",
        "Waits for a memif burst to end that gave up after a second and let the driver go on (a core stalled inside a burst).",
        &[(String::new(), given_up as f64)],
    );
    let cores: Vec<_> = shared
        .cores
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let counters = *c.counters.lock().unwrap_or_else(|p| p.into_inner());
            let cpu = c.cpu.map_or("-".to_string(), |c| c.to_string());
            (format!("core=\"{k}\",cpu=\"{cpu}\""), counters)
        })
        .collect();
    let per_core = |f: &dyn Fn(&dataplane::CoreCounters) -> f64| -> Vec<(String, f64)> {
        cores.iter().map(|(l, c)| (l.clone(), f(c))).collect()
    };
    family(
        "dpwarp_core_busy_seconds_total",
        "counter",
        "Time each poll-mode core spent in turns that moved something.",
        &per_core(&|c| c.busy_us as f64 / 1e6),
    );
    family(
        "dpwarp_core_idle_seconds_total",
        "counter",
        "Time each poll-mode core spent polling for nothing.",
        &per_core(&|c| c.idle_us as f64 / 1e6),
    );
    family(
        "dpwarp_core_busy_ratio",
        "gauge",
        "Share of each core's time in busy turns since it started.",
        &per_core(&|c| {
            let all = (c.busy_us + c.idle_us) as f64;
            if all > 0.0 {
                c.busy_us as f64 / all
            } else {
                0.0
            }
        }),
    );
    family(
        "dpwarp_core_turns_total",
        "counter",
        "Turns of each core's loop.",
        &per_core(&|c| c.turns as f64),
    );
    family(
        "dpwarp_core_rx_packets_total",
        "counter",
        "Frames each core's device received.",
        &per_core(&|c| c.device.rx_packets as f64),
    );
    family(
        "dpwarp_core_tx_packets_total",
        "counter",
        "Frames each core's device sent.",
        &per_core(&|c| c.device.tx_packets as f64),
    );
    family(
        "dpwarp_core_rx_bytes_total",
        "counter",
        "Frame octets each core's device received.",
        &per_core(&|c| c.device.rx_octets as f64),
    );
    family(
        "dpwarp_core_tx_bytes_total",
        "counter",
        "Frame octets each core's device sent.",
        &per_core(&|c| c.device.tx_octets as f64),
    );
    family(
        "dpwarp_core_drops_total",
        "counter",
        "Frames each core's device dropped, every cause.",
        &per_core(&|c| drops(c) as f64),
    );
    family(
        "dpwarp_core_rx_handed_out_total",
        "counter",
        "TCP frames each core received for a connection another core owns and \
         handed to it (0 where the port's RSS or the peer steers every frame to \
         its owner).",
        &per_core(&|c| c.device.rx_steered_out as f64),
    );
    family(
        "dpwarp_core_rx_handed_in_total",
        "counter",
        "Frames each core took from the other cores' hands (theirs, and copies of \
         ARP).",
        &per_core(&|c| c.device.rx_steered_in as f64),
    );
    family(
        "dpwarp_core_mbuf_pool_low_water",
        "gauge",
        "Fewest free mbufs seen in each core's pool (0 without DPDK).",
        &per_core(&|c| f64::from(c.device.pool_low_water)),
    );
    family(
        "dpwarp_core_fpdu_tx_bytes_total",
        "counter",
        "FPDU octets each core's engine wrote into TCP.",
        &per_core(&|c| c.tx_fpdu_octets as f64),
    );
    family(
        "dpwarp_core_fpdu_rx_bytes_total",
        "counter",
        "FPDU octets TCP handed each core's engine.",
        &per_core(&|c| c.rx_fpdu_octets as f64),
    );
    family(
        "dpwarp_core_fpdu_rx_direct_bytes_total",
        "counter",
        "Of those, the octets each core's engine took straight from received frames, never in TCP's buffer.",
        &per_core(&|c| c.rx_direct_octets as f64),
    );
    family(
        "dpwarp_core_classes_reflected_total",
        "counter",
        "Accepted connections each core gave the class (DSCP) of their client's SYN ([daemon] reflect_dscp).",
        &per_core(&|c| c.classes_reflected as f64),
    );
    let open: Vec<(String, f64)> = shared
        .cores
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let n = c.open.load(Ordering::Relaxed);
            (format!("core=\"{k}\""), n as f64)
        })
        .collect();
    family(
        "dpwarp_core_connections",
        "gauge",
        "Connections each core serves in Full Operation, every service's.",
        &open,
    );
    let naps: Vec<(String, f64)> = shared
        .cores
        .iter()
        .enumerate()
        .map(|(k, c)| {
            (
                format!("core=\"{k}\""),
                c.naps.load(Ordering::Relaxed) as f64,
            )
        })
        .collect();
    family(
        "dpwarp_core_naps_total",
        "counter",
        "Naps of 50 us each core took between turns with nothing open and nothing moved for 200 us ([daemon] idle = \"nap\"; 0 when it spins).",
        &naps,
    );
    let s = shared.serving.stats();
    let e = &shared.events;
    let svc = "service=\"bench\"".to_string();
    // One family per name, a sample per service (the exposition format
    // allows a name's HELP and TYPE once).
    let rping_on = shared.rping_origin.iter().any(Option::is_some);
    let by_service = |bench: u64,
                      memory: fn(&MemoryService) -> &AtomicU64,
                      rping: fn(&RpingGate) -> &AtomicU64,
                      perftest: fn(&PerftestShared) -> u64| {
        let mut v = vec![(svc.clone(), bench as f64)];
        if let Some(m) = &shared.memory {
            v.push((
                "service=\"memory\"".to_string(),
                memory(m).load(Ordering::Relaxed) as f64,
            ));
        }
        if rping_on {
            v.push((
                "service=\"rping\"".to_string(),
                rping(&shared.rping).load(Ordering::Relaxed) as f64,
            ));
        }
        // Every perftest service's, together.
        if !shared.perftest.is_empty() {
            v.push((
                "service=\"perftest\"".to_string(),
                shared.perftest.iter().map(perftest).sum::<u64>() as f64,
            ));
        }
        v
    };
    family(
        "dpwarp_service_connections_accepted_total",
        "counter",
        "Connections the service accepted.",
        &by_service(
            e.accepted.load(Ordering::Relaxed),
            |m| &m.accepted,
            |r| &r.accepted,
            |p| p.gate.accepted.load(Ordering::Relaxed),
        ),
    );
    family(
        "dpwarp_service_connections_refused_total",
        "counter",
        "Connections the service refused (MPA Reject with the reason).",
        &by_service(
            e.refused.load(Ordering::Relaxed),
            |m| &m.refused,
            |r| &r.refused,
            |p| p.gate.refused.load(Ordering::Relaxed),
        ),
    );
    family(
        "dpwarp_service_connections_closed_total",
        "counter",
        "Connections of the service that ended.",
        &by_service(
            e.closed.load(Ordering::Relaxed),
            |m| &m.closed,
            |r| &r.closed,
            |p| p.closed.load(Ordering::Relaxed),
        ),
    );
    family(
        "dpwarp_service_clients",
        "gauge",
        "Client runs the service serves now.",
        &[(svc.clone(), s.runs as f64)],
    );
    family(
        "dpwarp_service_memory_leased_bytes",
        "gauge",
        "Registered memory leased to clients now.",
        &[(svc.clone(), s.leased as f64)],
    );
    family(
        "dpwarp_service_memory_bytes",
        "gauge",
        "Registered memory the service leases from.",
        &[(svc.clone(), s.memory as f64)],
    );
    let terminates: Vec<(String, f64)> = e
        .terminates
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(&(service, dir, class), &n)| {
            (
                format!(
                    "service=\"{service}\",direction=\"{dir}\",{}",
                    class.labels()
                ),
                n as f64,
            )
        })
        .collect();
    family(
        "dpwarp_service_terminates_total",
        "counter",
        "Terminates sent and received by RFC 5040 layer, type and code: those the IANA RDDP registry (RFC 6580) lists (code \"all\" where it takes every code of the type); each service's others counted as layer, type and code \"other\" (the log has their values).",
        &terminates,
    );
    family(
        "dpwarp_bench_pds",
        "gauge",
        "Protection domains of the bench service's MPA runs now (one each; an ended one's until its QPs are gone).",
        &[(String::new(), shared.serving.pds() as f64)],
    );
    if let Some(m) = &shared.memory {
        family(
            "dpwarp_memory_stags",
            "gauge",
            "STags the memory service has registered for connections now.",
            &[(String::new(), m.grants_live() as f64)],
        );
        family(
            "dpwarp_memory_pds",
            "gauge",
            "Protection domains of the memory service's clients now (one each; an ended one's until its QP is gone).",
            &[(String::new(), m.pds_live() as f64)],
        );
        let regions: Vec<(String, f64)> = m
            .regions()
            .map(|(name, len)| (format!("region=\"{name}\""), len as f64))
            .collect();
        family(
            "dpwarp_memory_region_bytes",
            "gauge",
            "The size of each region the memory service lends.",
            &regions,
        );
    }
    if rping_on {
        let (mut verified, mut failed) = (0, 0);
        for c in &shared.cores {
            let (o, _) = &*c.rping.lock().unwrap_or_else(|p| p.into_inner());
            verified += o.verified;
            failed += o.failed;
        }
        family(
            "dpwarp_rping_iterations_verified_total",
            "counter",
            "rping iterations whose data the rping service verified.",
            &[(String::new(), verified as f64)],
        );
        family(
            "dpwarp_rping_connections_failed_total",
            "counter",
            "rping connections that ended in an error.",
            &[(String::new(), failed as f64)],
        );
    }
    if !shared.perftest.is_empty() {
        let counts: Vec<_> = shared
            .perftest
            .iter()
            .map(|p| {
                let (c, clients) = p.snapshot();
                (p.port, c, clients.len())
            })
            .collect();
        let by_port = |f: fn(&(u16, bench::perftest::service::Counts, usize)) -> f64| {
            counts
                .iter()
                .map(|c| (format!("tcp_port=\"{}\"", c.0), f(c)))
                .collect::<Vec<_>>()
        };
        family(
            "dpwarp_perftest_sessions_completed_total",
            "counter",
            "perftest sessions that completed every exchange and run, per service.",
            &by_port(|c| c.1.done as f64),
        );
        family(
            "dpwarp_perftest_sessions_failed_total",
            "counter",
            "perftest sessions that failed, per service.",
            &by_port(|c| c.1.failed as f64),
        );
        family(
            "dpwarp_perftest_clients",
            "gauge",
            "perftest clients served now, per service.",
            &by_port(|c| c.2 as f64),
        );
        family(
            "dpwarp_perftest_pds",
            "gauge",
            "Protection domains of perftest sessions now, per service (one each; an ended one's until its QPs are gone).",
            &by_port(|c| c.1.pds as f64),
        );
    }
    // Operations and their octets by RDMAP opcode, each way, per service.
    let ops = crate::daemon::ops_by_service(shared);
    let by_op = |octets: bool| {
        let mut v = Vec::new();
        for (service, stats) in &ops {
            for (direction, way) in [("received", &stats.rx), ("sent", &stats.tx)] {
                for (code, c) in way.iter().enumerate() {
                    if c.messages == 0 && c.octets == 0 {
                        continue;
                    }
                    v.push((
                        format!(
                            "service=\"{service}\",direction=\"{direction}\",opcode=\"{}\"",
                            opcode_name(code as u8)
                        ),
                        if octets { c.octets } else { c.messages } as f64,
                    ));
                }
            }
        }
        v
    };
    family(
        "dpwarp_service_operations_total",
        "counter",
        "RDMAP messages by service, direction and opcode (RFC 5040 §4.3, RFC 7306).",
        &by_op(false),
    );
    family(
        "dpwarp_service_operation_bytes_total",
        "counter",
        "Their DDP payload octets.",
        &by_op(true),
    );
    // The responder's service time of inbound Reads and Atomics, per
    // service (the engine's power-of-two buckets).
    let mut responses = String::new();
    for (name, help, pick) in [
        (
            "dpwarp_service_read_response_seconds",
            "From an inbound RDMA Read Request's arrival to its last Read Response segment \
             written (its time in the IRRQ and its transmission), per service.",
            (|s: &rnic_engine::qp::OpStats| s.read_responses)
                as fn(&rnic_engine::qp::OpStats) -> rnic_engine::qp::ResponseTimes,
        ),
        (
            "dpwarp_service_atomic_response_seconds",
            "From an inbound Atomic Request's arrival (RFC 7306) to its Atomic Response written, \
             per service.",
            |s: &rnic_engine::qp::OpStats| s.atomic_responses,
        ),
    ] {
        let _ = writeln!(responses, "# HELP {name} {help}");
        let _ = writeln!(responses, "# TYPE {name} histogram");
        for (service, stats) in &ops {
            response_samples(name, service, &pick(stats), &mut responses);
        }
    }
    let mut setup = String::new();
    let _ = writeln!(
        setup,
        "# HELP dpwarp_service_setup_seconds From the accept decision on the control-plane \
         thread to Full Operation on the connection's core, per service."
    );
    let _ = writeln!(setup, "# TYPE dpwarp_service_setup_seconds histogram");
    for (service, h) in shared.setup.histograms() {
        h.samples(
            "dpwarp_service_setup_seconds",
            &format!("service=\"{service}\""),
            &mut setup,
        );
    }
    let control = shared.host.stats();
    family(
        "dpwarp_control_startups_total",
        "counter",
        "MPA startups the control-plane thread ran, by outcome.",
        &[
            ("outcome=\"established\"".into(), control.established as f64),
            ("outcome=\"rejected\"".into(), control.rejected as f64),
            ("outcome=\"failed\"".into(), control.failed as f64),
            (
                "outcome=\"refused\"".into(),
                control.refused_startups as f64,
            ),
        ],
    );
    if let Some(l) = &shared.sctp {
        // The bench service's DDP over SCTP listener (RFC 5043 over UDP).
        let c = l.counters();
        let port = format!("udp_port=\"{}\"", l.udp_port);
        family(
            "dpwarp_sctp_associations",
            "gauge",
            "SCTP associations the DDP over SCTP listener holds.",
            &[(port.clone(), l.associations() as f64)],
        );
        family(
            "dpwarp_sctp_core_associations",
            "gauge",
            "SCTP associations each core's endpoint of the DDP over SCTP listener holds.",
            &l.cores
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    (
                        format!("{port},core=\"{k}\""),
                        c.associations.load(Ordering::Relaxed) as f64,
                    )
                })
                .collect::<Vec<_>>(),
        );
        family(
            "dpwarp_sctp_streams",
            "gauge",
            "DDP streams open on the DDP over SCTP listener.",
            &[(port.clone(), l.streams() as f64)],
        );
        family(
            "dpwarp_sctp_segments_total",
            "counter",
            "DDP Segment messages (PPID 16) of the DDP over SCTP listener, by direction.",
            &[
                (format!("{port},direction=\"rx\""), c.rx_segments as f64),
                (format!("{port},direction=\"tx\""), c.tx_segments as f64),
            ],
        );
        family(
            "dpwarp_sctp_segment_octets_total",
            "counter",
            "Octets of DDP Segment messages of the DDP over SCTP listener, by direction.",
            &[
                (
                    format!("{port},direction=\"rx\""),
                    c.rx_segment_octets as f64,
                ),
                (
                    format!("{port},direction=\"tx\""),
                    c.tx_segment_octets as f64,
                ),
            ],
        );
    }
    out.push_str(&setup);
    out.push_str(&responses);
    out
}

/// How long a client has to send its request's head, from its accept.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// How long a client has to take its answer, once the request's head came.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// Requests served at once; a client beyond them is answered 503 at once.
pub const REQUESTS_AT_ONCE: usize = 8;

/// CPU time the metrics requests' threads took, in nanoseconds: each adds
/// its own when it is done. Those threads are gone by the time anyone
/// looks (the appliance's benchmark measured the accept thread alone once
/// each request had a thread of its own, and missed the rendering).
static REQUEST_CPU_NS: AtomicU64 = AtomicU64::new(0);

/// CPU time this thread has taken, in nanoseconds (0 if unknown).
fn thread_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64)
    })
}

/// The metrics endpoint: a listener and its thread, each request on a
/// thread of its own within its deadlines ([`crate::bounded`]).
pub struct MetricsServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
}

impl MetricsServer {
    /// Listens on the configured address and serves until dropped.
    pub fn start(shared: Arc<Shared>) -> Result<MetricsServer, String> {
        let at = shared.config.daemon.metrics_listen;
        let listener = TcpListener::bind(at)
            .map_err(|e| format!("metrics_listen {at}: cannot listen there: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("dpwarpd-metrics".into())
            .spawn(move || {
                let mut workers = Workers::new("dpwarpd-metrics-req", REQUESTS_AT_ONCE);
                while !flag.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((stream, _)) if workers.full() => busy(stream),
                        Ok((stream, _)) => {
                            let (shared, stop) = (shared.clone(), flag.clone());
                            let accepted = Instant::now();
                            // No thread for it: dropping the work closes
                            // its connection.
                            let _ = workers.spawn(move || {
                                let _ = answer(stream, || render(&shared), accepted, stop);
                                REQUEST_CPU_NS.fetch_add(thread_cpu_ns(), Ordering::Relaxed);
                            });
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
                // Each request notices the stop within a slice.
                workers.join();
            })
            .map_err(|e| e.to_string())?;
        Ok(MetricsServer {
            stop,
            thread: Some(thread),
            addr,
        })
    }
}

impl Drop for MetricsServer {
    /// Stops it: the requests being served end within
    /// [`crate::bounded::SLICE`], answered or not.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The samples of `dpwarp_operator_turned_away_total`: each endpoint's
/// clients turned away, answered and gone.
fn turned_away() -> Vec<(String, f64)> {
    [&TURNED_AWAY, &crate::ctl::TURNED_AWAY]
        .iter()
        .flat_map(|t| {
            [("answered", &t.answered), ("gone", &t.gone)].map(|(client, n)| {
                (
                    format!("endpoint=\"{}\",client=\"{client}\"", t.endpoint),
                    n.load(Ordering::Relaxed) as f64,
                )
            })
        })
        .collect()
}

/// The metrics endpoint's clients turned away ([`busy`]).
pub static TURNED_AWAY: TurnedAway = TurnedAway::new("metrics");

/// Tells a client beyond [`REQUESTS_AT_ONCE`] to come back (503), if its
/// socket takes it at once, and closes its connection. One that left first
/// is counted as gone ([`crate::bounded::turn_away`]).
fn busy(stream: TcpStream) {
    let body = "dpwarpd serves other scrapes now: try again\n";
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    crate::bounded::turn_away(stream, answer.as_bytes(), &TURNED_AWAY);
}

/// Answers one HTTP/1.x request on `stream` (the metrics `render` makes
/// for `GET /metrics`), then closes it: its head within
/// [`REQUEST_DEADLINE`] of `accepted`, the answer taken within
/// [`ANSWER_DEADLINE`] after; cut off at once when `stop` is set.
fn answer(
    stream: TcpStream,
    render: impl FnOnce() -> String,
    accepted: Instant,
    stop: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let mut stream = Bounded::new(stream, accepted + REQUEST_DEADLINE, stop)?;
    // The request head, at most 8 KiB.
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    stream.set_deadline(Instant::now() + ANSWER_DEADLINE);
    let line = head.split(|&b| b == b'\r').next().unwrap_or(&[]);
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, kind, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "dpwarpd serves /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_string(),
        ),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    // A body, a second request or the rest of a head past 8 KiB is read
    // and dropped, so the client reads the answer, not a reset (found by
    // a review, as on the control socket).
    stream.finish()
}

/// An RDMAP opcode's name in the metrics (RFC 5040 §4.3; RFC 7306 §4).
fn opcode_name(code: u8) -> String {
    match code {
        0x0 => "write".into(),
        0x1 => "read_request".into(),
        0x2 => "read_response".into(),
        0x3 => "send".into(),
        0x4 => "send_invalidate".into(),
        0x5 => "send_se".into(),
        0x6 => "send_se_invalidate".into(),
        0x7 => "terminate".into(),
        0x8 => "immediate".into(),
        0x9 => "immediate_se".into(),
        0xA => "atomic_request".into(),
        0xB => "atomic_response".into(),
        other => format!("0x{other:x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair over loopback TCP: the server's end and the
    /// client's.
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (server, client)
    }

    /// The client's whole answer, or how it ended.
    fn answer_of(mut client: TcpStream) -> std::io::Result<String> {
        client.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut text = String::new();
        client.read_to_string(&mut text)?;
        Ok(text)
    }

    /// A request with more than its head (a body, or a second request) is
    /// answered and the rest read, so the client reads the answer, not a
    /// reset; so is a client beyond the requests served at once (found by
    /// a review: octets left unread reset the connection).
    #[test]
    fn an_answer_ends_without_a_reset_whatever_followed_the_head() {
        let (server, mut client) = pair();
        let body = vec![b'x'; 100_000];
        write!(
            client,
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .unwrap();
        client.write_all(&body).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let t = std::thread::spawn(move || {
            answer(server, String::new, Instant::now(), stop).unwrap();
        });
        let text = answer_of(client).unwrap();
        assert!(text.starts_with("HTTP/1.1 405"), "{text}");
        t.join().unwrap();

        let (server, mut client) = pair();
        write!(client, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        client.write_all(&[b'y'; 20_000]).unwrap();
        // Its octets reach the server's end before it looks.
        std::thread::sleep(Duration::from_millis(50));
        let answered = TURNED_AWAY.answered.load(Ordering::Relaxed);
        busy(server);
        let text = answer_of(client).unwrap();
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        assert!(TURNED_AWAY.answered.load(Ordering::Relaxed) > answered);
    }

    /// A client beyond the scrapes served at once that reset its
    /// connection before the 503 is written: the write fails (EPIPE or
    /// ECONNRESET), which is no error of the daemon's, and the client is
    /// counted as gone in the metrics, not lost unseen (from a review's
    /// suspicion of a race in `busy`).
    #[test]
    fn a_client_that_reset_before_the_busy_answer_is_counted_as_gone() {
        let (server, client) = pair();
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(client);
        // The reset reaches the server's end before it answers.
        std::thread::sleep(Duration::from_millis(50));
        let gone = TURNED_AWAY.gone.load(Ordering::Relaxed);
        busy(server);
        assert_eq!(TURNED_AWAY.gone.load(Ordering::Relaxed), gone + 1);
        let samples = turned_away();
        let label = "endpoint=\"metrics\",client=\"gone\"";
        assert!(
            samples.iter().any(|(l, n)| l == label && *n >= 1.0),
            "{samples:?}"
        );
    }
}
