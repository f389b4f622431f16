//! The server's side of every workload ([`Responder`]) and the server
//! ([`Server`]), the same in process and in a `bench --server`: it keeps receives posted for Sends and Immediates, and
//! in latency runs answers each ping (perftest's *_lat pong): a Send with a
//! Send, a Write with Immediate with one, and a Write with a Write once the
//! last octet of the client's Write has landed.

use dataplane::CoreTransport;
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::Region;
use rnic_engine::verbs::{Mr, QpHandle, RecvWr, RemoteAddr, SendOp, SendWr};

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, StartupConfig};
use control::runtime::{Decision, StartupResult};
use tcp_lite::Instant;

use crate::endpoint::{now, Endpoint, Host, RnicEnd, QUEUE_DEPTH};
use crate::hello::{self, ClientHello, ServerHello};
use crate::spec::{credit_offset, half, memory_for, slot, Mode, Op};

/// How long a listener may take to come up.
const SETUP_LIMIT: StdDuration = StdDuration::from_secs(10);

/// One served QP and its workload.
#[derive(Debug, Clone, Copy)]
pub struct Served {
    qp: QpHandle,
    op: Op,
    mode: Mode,
    size: usize,
    depth: usize,
    /// Our slot: the client's messages land at `base`, replies leave from
    /// `base + half(size)`.
    base: u64,
    /// The client's slot, where replies land (at `+ half(size)`).
    client: RemoteAddr,
    /// The last Write-latency marker seen.
    marker: u8,
    /// Our credit word (the source of credit Writes).
    credit_source: u64,
    /// The client's credit word.
    credit_sink: RemoteAddr,
    /// Sends (or Immediates) taken, and the count last reported.
    consumed: u64,
    reported: u64,
}

impl Served {
    /// QP `qp` serving the workload of `hello`; `client_memory` is the
    /// client's memory (its first octet).
    pub fn new(qp: QpHandle, hello: &ClientHello, client_memory: RemoteAddr) -> Served {
        let size = hello.size as usize;
        let (qps, qi) = (hello.qps as usize, hello.qi as usize);
        let base = slot(qi, size);
        let credit = credit_offset(qps, qi, size);
        Served {
            qp,
            op: hello.op,
            mode: hello.mode,
            size,
            depth: hello.depth as usize,
            base,
            // From the network: wrapping, never a panic (a TO beyond the
            // client's region is its RNIC's to refuse).
            client: RemoteAddr {
                stag: client_memory.stag,
                to: client_memory.to.wrapping_add(base),
            },
            marker: 0,
            credit_source: credit,
            credit_sink: RemoteAddr {
                stag: client_memory.stag,
                to: client_memory.to.wrapping_add(credit),
            },
            consumed: 0,
            reported: 0,
        }
    }

    /// Bandwidth runs: tells the client how many messages we have taken
    /// (an 8-octet Write of the count to its credit word) every quarter
    /// window, so it never sends into a QP without receives.
    fn report_credit<E: RnicEnd>(&mut self, ep: &mut E) -> Result<(), String> {
        if self.mode != Mode::Bandwidth
            || self.consumed - self.reported < (self.depth as u64 / 4).max(1)
        {
            return Ok(());
        }
        ep.region()
            .write(self.credit_source as usize, &self.consumed.to_be_bytes())
            .map_err(|e| format!("credit word: {e:?}"))?;
        let sgl = [ep.sge(self.credit_source, 8)];
        let wr = SendWr {
            wr_id: u64::MAX,
            op: SendOp::Write(self.credit_sink),
            sgl: &sgl,
            signaled: false,
            solicited: false,
            fence: false,
        };
        ep.rnic()
            .post_send(self.qp, &wr)
            .map_err(|e| format!("posting a credit Write: {e:?}"))?;
        self.reported = self.consumed;
        Ok(())
    }

    fn post_receive<E: RnicEnd>(&self, ep: &mut E, id: u64) -> Result<(), String> {
        let sgl = [ep.sge(self.base + half(self.size) as u64, half(self.size) as u32)];
        ep.rnic()
            .post_recv(
                self.qp,
                &RecvWr {
                    wr_id: id,
                    sgl: &sgl,
                },
            )
            .map_err(|e| format!("posting a receive: {e:?}"))
    }

    /// Sends the pong of a latency round from our second half to the
    /// client's second half.
    fn reply<E: RnicEnd>(&self, ep: &mut E, id: u64, len: usize) -> Result<(), String> {
        let sgl = [ep.sge(self.base + half(self.size) as u64, len as u32)];
        let to_client = RemoteAddr {
            stag: self.client.stag,
            to: self.client.to.wrapping_add(half(self.size) as u64),
        };
        let op = match self.op {
            Op::Send => SendOp::Send,
            Op::WriteImm => SendOp::WriteWithImmediate(to_client, id.to_be_bytes()),
            _ => SendOp::Write(to_client),
        };
        let wr = SendWr {
            wr_id: id,
            op,
            sgl: &sgl,
            signaled: true,
            solicited: false,
            fence: false,
        };
        ep.rnic()
            .post_send(self.qp, &wr)
            .map_err(|e| format!("posting the reply: {e:?}"))
    }
}

/// The served QPs of one server RNIC.
#[derive(Default)]
pub struct Responder {
    served: Vec<Served>,
    /// Where each QP is in `served`.
    index: std::collections::HashMap<QpHandle, usize>,
    /// The Write latency QPs, whose memory a step watches (the others cost
    /// a step nothing unless they complete something).
    watched: Vec<QpHandle>,
    wcs: Vec<Wc>,
}

impl Responder {
    /// Starts serving `s`: clears the octets Write latency watches and posts
    /// the receives its workload consumes. Call it before the QP reads its
    /// first octet ([`Endpoint::step`] allows that).
    pub fn add<E: RnicEnd>(&mut self, ep: &mut E, s: Served) {
        if s.op == Op::Write && s.mode == Mode::Latency {
            let h = half(s.size) as u64;
            let _ = ep
                .region()
                .write((s.base + s.size as u64 - 1) as usize, &[0]);
            let _ = ep
                .region()
                .write((s.base + h + s.size as u64 - 1) as usize, &[0]);
        }
        if s.op.needs_receive() {
            let receives = match s.mode {
                Mode::Bandwidth => s.depth,
                Mode::Latency => 1,
            };
            for id in 0..receives {
                if s.post_receive(ep, id as u64).is_err() {
                    break;
                }
            }
        }
        if s.op == Op::Write && s.mode == Mode::Latency {
            self.watched.push(s.qp);
        }
        self.index.insert(s.qp, self.served.len());
        self.served.push(s);
    }

    /// Stops serving `qp`.
    pub fn remove(&mut self, qp: QpHandle) {
        let Some(i) = self.index.remove(&qp) else {
            return;
        };
        self.served.swap_remove(i);
        if let Some(moved) = self.served.get(i) {
            self.index.insert(moved.qp, i);
        }
        self.watched.retain(|&w| w != qp);
    }

    /// QPs served.
    pub fn len(&self) -> usize {
        self.served.len()
    }

    /// Whether no QP is served.
    pub fn is_empty(&self) -> bool {
        self.served.is_empty()
    }

    /// Reaps completions and answers what arrived. A failure names the QP
    /// it ends.
    pub fn step<E: RnicEnd>(&mut self, ep: &mut E) -> Result<(), (QpHandle, String)> {
        self.wcs.clear();
        ep.poll_cq(&mut self.wcs);
        for wc in &self.wcs {
            let Some(s) = self.index.get(&wc.qp).map(|&i| &mut self.served[i]) else {
                continue;
            };
            if wc.status != WcStatus::Success {
                return Err((
                    s.qp,
                    format!("server: work request {} ended {:?}", wc.wr_id, wc.status),
                ));
            }
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvImmediate) {
                s.post_receive(ep, wc.wr_id).map_err(|e| (s.qp, e))?;
                s.consumed += 1;
                s.report_credit(ep).map_err(|e| (s.qp, e))?;
                if s.mode == Mode::Latency {
                    s.reply(ep, wc.wr_id, wc.byte_len as usize)
                        .map_err(|e| (s.qp, e))?;
                }
            }
        }
        for qp in &self.watched {
            let Some(s) = self.index.get(qp).map(|&i| &mut self.served[i]) else {
                continue;
            };
            let mut last = [0];
            let at = (s.base + s.size as u64 - 1) as usize;
            if ep.region().read(at, &mut last).is_err() || last[0] == 0 || last[0] == s.marker {
                continue;
            }
            // The ping landed (its last octet is new): pong with the same
            // marker at the end of ours.
            s.marker = last[0];
            let h = half(s.size) as u64;
            let _ = ep
                .region()
                .write((s.base + h + s.size as u64 - 1) as usize, &last);
            s.reply(ep, u64::from(last[0]), s.size)
                .map_err(|e| (s.qp, e))?;
        }
        Ok(())
    }
}

/// What the cores of one benchmark server share: the client run being
/// served (a second client's run is refused meanwhile), each core's open
/// connections and startups, and the runs served to the end. Written by
/// the control-plane thread when it accepts a connection and by each core
/// once a turn (its own slot): nothing per packet.
pub struct Serving {
    /// The run being served (set by the accept callback, cleared when it is
    /// done).
    active: Mutex<Option<u64>>,
    refused: AtomicU64,
    /// A connection of the run's last size was accepted.
    last_seen: AtomicBool,
    /// Each core's connections open or in MPA startup, as of its last turn.
    open: Vec<AtomicUsize>,
    /// Connections each core served to the end.
    served: Vec<AtomicU64>,
    /// Client runs served to the end.
    runs_done: AtomicU64,
}

impl Serving {
    /// The shared state of a server of `cores` cores.
    pub fn new(cores: usize) -> Arc<Serving> {
        Arc::new(Serving {
            active: Mutex::new(None),
            refused: AtomicU64::new(0),
            last_seen: AtomicBool::new(false),
            open: (0..cores).map(|_| AtomicUsize::new(0)).collect(),
            served: (0..cores).map(|_| AtomicU64::new(0)).collect(),
            runs_done: AtomicU64::new(0),
        })
    }

    /// Clients refused so far (workloads that do not fit, a second run).
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections served to the end, on every core.
    pub fn served(&self) -> u64 {
        self.served.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }

    /// Connections core `core` served to the end.
    pub fn served_by(&self, core: usize) -> u64 {
        self.served[core].load(Ordering::Relaxed)
    }

    /// Connections open or starting on every core, as of their last turns.
    pub fn open(&self) -> usize {
        self.open.iter().map(|o| o.load(Ordering::Relaxed)).sum()
    }

    /// Client runs served to the end: their last size's connections were
    /// accepted and every core has since closed all it had.
    pub fn runs_done(&self) -> u64 {
        self.runs_done.load(Ordering::SeqCst)
    }

    /// The accept callback's verdict on `hello` for a server of `len`
    /// octets.
    fn admit(&self, hello: &ClientHello, len: usize) -> Result<(), String> {
        check_fits(hello, len)?;
        let mut run = self.active.lock().unwrap_or_else(|p| p.into_inner());
        match *run {
            Some(r) if r != hello.run => Err(
                "this server is serving another client's run: wait for it, or start another \
                 server on another port (-p)"
                    .to_string(),
            ),
            _ => {
                *run = Some(hello.run);
                if hello.last {
                    self.last_seen.store(true, Ordering::SeqCst);
                }
                Ok(())
            }
        }
    }

    /// Core `core` has `open` connections open or starting: publishes it,
    /// and ends the run if its last size's connections are all gone from
    /// every core. A client opens every connection of a size (each one
    /// counted by its core from the SYN on) before it closes any, so no
    /// core still has one of them to come.
    fn publish(&self, core: usize, open: usize) {
        // Written when it changes, not every turn (a turn of a latency run
        // is a microsecond).
        if self.open[core].load(Ordering::Relaxed) != open {
            self.open[core].store(open, Ordering::SeqCst);
        }
        if open == 0
            && self.last_seen.load(Ordering::SeqCst)
            && self.open() == 0
            && self
                .last_seen
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            *self.active.lock().unwrap_or_else(|p| p.into_inner()) = None;
            self.runs_done.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A benchmark server's core: listens, serves each connection the
/// workload its client announces ([`Responder`]), and closes when the
/// client does. The cores of one server share its [`Serving`] and may
/// share its memory (one registration, [`Server::on_host_sharing`]).
pub struct Server<T: CoreTransport> {
    /// Its RNIC.
    pub endpoint: Endpoint<T>,
    responder: Responder,
    /// Connections this core served to the end.
    pub served: u64,
    /// A client's last connections have all closed (on every core).
    pub client_done: bool,
    port: u16,
    core: usize,
    serving: Arc<Serving>,
    runs_seen: u64,
}

impl<T: CoreTransport> Server<T> {
    /// A server on `transport` with `memory` octets, listening on `port`.
    pub fn new(
        transport: T,
        emss: usize,
        memory: usize,
        port: u16,
        startup: StartupConfig,
    ) -> Server<T> {
        Server::on_host(&Host::new(1, 2), 0, transport, emss, memory, port, startup)
    }

    /// A server alone as core `core` of `host` (its control plane and
    /// registry), with `memory` octets of its own.
    pub fn on_host(
        host: &Arc<Host>,
        core: u16,
        transport: T,
        emss: usize,
        memory: usize,
        port: u16,
        startup: StartupConfig,
    ) -> Server<T> {
        let (region, mr) = host.register(memory);
        let serving = Serving::new(usize::from(core) + 1);
        Server::on_host_sharing(
            host, core, transport, emss, region, mr, &serving, port, startup,
        )
    }

    /// Core `core` of a server of several on `host`: they share `serving`
    /// and the memory `region` registered as `mr` (every client QP, on
    /// whichever core, is told the same STag), and each listens on `port`
    /// of its own transport.
    #[allow(clippy::too_many_arguments)]
    pub fn on_host_sharing(
        host: &Arc<Host>,
        core: u16,
        transport: T,
        emss: usize,
        region: Arc<Region>,
        mr: Mr,
        serving: &Arc<Serving>,
        port: u16,
        startup: StartupConfig,
    ) -> Server<T> {
        let len = region.len();
        let endpoint = Endpoint::on_host_sharing(host, core, transport, emss, region, mr);
        let mine = ServerHello {
            stag: endpoint.mr.stag,
            to: endpoint.mr.base_to,
        };
        let shared = serving.clone();
        endpoint.control.listen(
            port,
            startup,
            Box::new(move |request, peer| {
                let verdict =
                    ClientHello::decode(&request.private_data).and_then(|h| shared.admit(&h, len));
                match verdict {
                    Ok(()) => Decision::Accept(Accept {
                        private_data: mine.encode(),
                        ..Accept::default()
                    }),
                    Err(why) => {
                        eprintln!("bench server: refused the client at {peer}: {why}");
                        shared.refused.fetch_add(1, Ordering::Relaxed);
                        Decision::Reject(hello::encode_reject(&why))
                    }
                }
            }),
        );
        Server {
            endpoint,
            responder: Responder::default(),
            served: 0,
            client_done: false,
            port,
            core: usize::from(core),
            serving: serving.clone(),
            runs_seen: 0,
        }
    }

    /// Clients refused so far, by every core of this server (workloads
    /// that do not fit, a second run).
    pub fn refused(&self) -> u64 {
        self.serving.refused()
    }

    /// Steps until the listener is up (or refused), at most 10 s.
    pub fn wait_listening(&mut self) -> Result<(), String> {
        let start = StdInstant::now();
        loop {
            if let Some(status) = self.endpoint.listen_status(self.port) {
                return status;
            }
            if start.elapsed() > SETUP_LIMIT {
                return Err("the control plane never set up the listener".into());
            }
            self.step(now())?;
        }
    }

    /// One turn: the RNIC, new connections, the workloads' replies.
    pub fn step(&mut self, now: Instant) -> Result<(), String> {
        self.endpoint.step(now);
        // Ends first: a new QP may take an ended one's handle in this step.
        for qp in self.endpoint.take_ended() {
            self.responder.remove(qp);
            self.served += 1;
            self.serving.served[self.core].fetch_add(1, Ordering::Relaxed);
        }
        // A benchmark's QPs do not terminate unless something is wrong; the
        // failures show as completions in error. Keep the queue bounded.
        let _ = self.endpoint.take_events();
        for (handoff, qp) in self.endpoint.take_handoffs() {
            let (StartupResult::Established(e), Some(qp)) = (&handoff.result, qp) else {
                continue;
            };
            // The callback accepted only hellos that decode and fit.
            let Ok(h) = ClientHello::decode(&e.peer_private_data) else {
                self.endpoint.close(qp);
                continue;
            };
            self.responder.add(
                &mut self.endpoint,
                Served::new(
                    qp,
                    &h,
                    RemoteAddr {
                        stag: h.stag,
                        to: h.to,
                    },
                ),
            );
        }
        let open = self.endpoint.open_connections() + self.endpoint.core.in_startup();
        self.serving.publish(self.core, open);
        let runs = self.serving.runs_done();
        if runs != self.runs_seen {
            self.runs_seen = runs;
            self.client_done = true;
        }
        if let Err((qp, why)) = self.responder.step(&mut self.endpoint) {
            // One connection's failure ends that connection only.
            self.responder.remove(qp);
            self.endpoint.close(qp);
            return Err(why);
        }
        Ok(())
    }
}

/// Whether the workload of `h` (from the network) is well formed and fits
/// a server memory of `len` octets, saying why not.
pub fn check_fits(h: &ClientHello, len: usize) -> Result<(), String> {
    let size = h.size as usize;
    if size == 0 || h.qps == 0 || h.qi >= h.qps || h.depth == 0 || h.depth as usize > QUEUE_DEPTH {
        return Err(format!(
            "malformed workload: size {}, QP {} of {}, depth {}",
            h.size, h.qi, h.qps, h.depth
        ));
    }
    let need = memory_for(h.qps as usize, size);
    if h.to.checked_add(need as u64).is_none() {
        return Err(format!(
            "the client's memory at TO {:#x} would wrap past 2^64 octets",
            h.to
        ));
    }
    if need > len {
        return Err(format!(
            "{} QP(s) of {} B messages need {} octets of server memory; this server has {}: \
             start it with a larger -s (or -a) and -q",
            h.qps, h.size, need, len
        ));
    }
    Ok(())
}
