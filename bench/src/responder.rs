//! The server's side of every workload ([`Responder`]) and the server
//! ([`Server`]), the same in process and in a `bench --server`: it keeps receives posted for Sends and Immediates, and
//! in latency runs answers each ping (perftest's *_lat pong): a Send with a
//! Send, a Write with Immediate with one, and a Write with a Write once the
//! last octet of the client's Write has landed.

use dataplane::CoreTransport;
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::{Access, Pd, Region};
use rnic_engine::verbs::{
    Mr, QpHandle, RecvWr, Registry, RemoteAddr, SendOp, SendWr, Sge, VerbError,
};

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use control::mpa::{Accept, StartupConfig};
use control::runtime::{Decision, StartupResult};
use tcp_lite::Instant;

use crate::endpoint::{now, Endpoint, Host, RnicEnd, QUEUE_DEPTH};
use crate::hello::{self, ClientHello, ServerHello};
use crate::lease::Leases;
use crate::spec::{credit_offset, half, memory_for, slot, Mode, Op};

/// Connections accepted for runs with a PD of their own and not yet at
/// a core, at most ([`Serving::pd_for`]): beyond, new ones are refused.
const STARTUPS_MAX: usize = 4096;

/// How long an accepted connection's run PD is kept for it: twice the
/// MPA startup's own limit, after which its startup has failed.
const STARTUP_FORGET: StdDuration = StdDuration::from_secs(20);

/// [`Admission::OneRun`]: a run with no connection accepted for this long
/// and none open is abandoned when another client's arrives (its client
/// was killed between sizes, or its only connection failed its startup):
/// a client moves from one size to the next in milliseconds.
const ONE_RUN_ABANDONED: StdDuration = StdDuration::from_secs(2);

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
    /// Where the QP is in its run's own PD: the run's STag and the offset
    /// of its lease (its Tagged Offset 0), which our own work requests
    /// use; else the endpoint's memory registration.
    local: Option<(u32, u64)>,
}

impl Served {
    /// QP `qp` serving the workload of `hello`; `client_memory` is the
    /// client's memory (its first octet).
    pub fn new(qp: QpHandle, hello: &ClientHello, client_memory: RemoteAddr) -> Served {
        Served::in_lease(qp, hello, client_memory, 0)
    }

    /// [`Served::new`] in the lease at `offset` of the server's memory
    /// (a server of several runs at once): the run's slots and credit
    /// words are laid out in the lease as they are in the client's memory.
    pub fn in_lease(
        qp: QpHandle,
        hello: &ClientHello,
        client_memory: RemoteAddr,
        offset: u64,
    ) -> Served {
        let size = hello.size as usize;
        let (qps, qi) = (hello.qps as usize, hello.qi as usize);
        let slot = slot(qi, size);
        let credit = credit_offset(qps, qi, size);
        Served {
            qp,
            op: hello.op,
            mode: hello.mode,
            size,
            depth: hello.depth as usize,
            base: offset + slot,
            // From the network: wrapping, never a panic (a TO beyond the
            // client's region is its RNIC's to refuse).
            client: RemoteAddr {
                stag: client_memory.stag,
                to: client_memory.to.wrapping_add(slot),
            },
            marker: 0,
            credit_source: offset + credit,
            credit_sink: RemoteAddr {
                stag: client_memory.stag,
                to: client_memory.to.wrapping_add(credit),
            },
            consumed: 0,
            reported: 0,
            local: None,
        }
    }

    /// The QP is in its run's own PD, whose registration of the lease at
    /// `lease` (Tagged Offset 0) is `stag`: our work requests use it.
    pub fn with_local(self, stag: u32, lease: u64) -> Served {
        Served {
            local: Some((stag, lease)),
            ..self
        }
    }

    /// An SGE of `len` octets at `offset` of the server's memory.
    fn sge<E: RnicEnd>(&self, ep: &E, offset: u64, len: u32) -> Sge {
        match self.local {
            Some((stag, lease)) => Sge {
                stag,
                to: offset - lease,
                len,
            },
            None => ep.sge(offset, len),
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
        let sgl = [self.sge(ep, self.credit_source, 8)];
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
        let sgl = [self.sge(
            ep,
            self.base + half(self.size) as u64,
            half(self.size) as u32,
        )];
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
        let sgl = [self.sge(ep, self.base + half(self.size) as u64, len as u32)];
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

/// The QPs a [`Responder`] step found failed, each with why, in the order
/// found (each once).
#[derive(Debug, Default)]
pub struct Failed(pub Vec<(QpHandle, String)>);

impl Failed {
    fn names(&self, qp: QpHandle) -> bool {
        self.0.iter().any(|(q, _)| *q == qp)
    }

    fn push(&mut self, qp: QpHandle, why: String) {
        self.0.push((qp, why));
    }

    /// Every reason, one after the other.
    pub fn reasons(&self) -> String {
        let whys: Vec<&str> = self.0.iter().map(|(_, why)| why.as_str()).collect();
        whys.join("; ")
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

    /// Reaps completions and answers what arrived. Each QP that failed is
    /// named with the reason (the caller ends it); the others' completions
    /// are all served.
    pub fn step<E: RnicEnd>(&mut self, ep: &mut E) -> Result<(), Failed> {
        self.step_spilling(ep, &mut |_| {})
    }

    /// [`step`](Self::step), handing the completions of QPs it does not
    /// serve to `spill` (another service's, on the same CQ).
    pub fn step_spilling<E: RnicEnd>(
        &mut self,
        ep: &mut E,
        spill: &mut dyn FnMut(&Wc),
    ) -> Result<(), Failed> {
        // One QP's failure must not cost the others the rest of the batch
        // (the CQ is the core's: a client's bad Send once left every other
        // client's receives in it unposted and its pongs unsent).
        let mut failed = Failed::default();
        self.wcs.clear();
        ep.poll_cq(&mut self.wcs);
        for wc in &self.wcs {
            let Some(s) = self.index.get(&wc.qp).map(|&i| &mut self.served[i]) else {
                spill(wc);
                continue;
            };
            if failed.names(s.qp) {
                continue;
            }
            if wc.status != WcStatus::Success {
                failed.push(
                    s.qp,
                    format!("server: work request {} ended {:?}", wc.wr_id, wc.status),
                );
                continue;
            }
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvImmediate) {
                let answered = s.post_receive(ep, wc.wr_id).and_then(|()| {
                    s.consumed += 1;
                    s.report_credit(ep)?;
                    if s.mode == Mode::Latency {
                        s.reply(ep, wc.wr_id, wc.byte_len as usize)?;
                    }
                    Ok(())
                });
                if let Err(why) = answered {
                    failed.push(s.qp, why);
                }
            }
        }
        for qp in &self.watched {
            let Some(s) = self.index.get(qp).map(|&i| &mut self.served[i]) else {
                continue;
            };
            if failed.names(s.qp) {
                continue;
            }
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
            if let Err(why) = s.reply(ep, u64::from(last[0]), s.size) {
                failed.push(s.qp, why);
            }
        }
        if failed.0.is_empty() {
            Ok(())
        } else {
            Err(failed)
        }
    }
}

/// How a server admits client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// One client's run at a time, in the whole memory; a second client is
    /// refused until it is done (`bench --server`).
    OneRun,
    /// Up to `runs_max` client runs at once (the appliance), each in a
    /// lease of the memory of its own ([`crate::lease`]); a run with no
    /// connection open for `idle` (its client went away) gives its lease
    /// back.
    Many {
        /// Client runs served at once.
        runs_max: usize,
        /// Of those, how many one client host may have begun (a run's
        /// connections all come from the host that began it; runs whose
        /// host is unknown are not counted).
        runs_per_host: usize,
        /// How long a run may have no connection before it is given up.
        idle: StdDuration,
    },
}

/// One client run a server of [`Admission::Many`] serves.
#[derive(Debug)]
struct Run {
    /// Its lease of the server's memory.
    offset: u64,
    len: u64,
    /// The STag over exactly its lease ([`Exposure`]), and what it lets
    /// the client do.
    stag: Option<u32>,
    access: Access,
    /// The protection domain of its QPs and its STag (a run of a server
    /// with an [`Exposure`]): another run's QP cannot use its STag,
    /// whatever STag it learns or guesses (a client that names the run's
    /// id joins the run: the id is the client's, see `client`). `None`:
    /// the exposure's PD.
    pd: Option<Pd>,
    /// The lower layer of the connection that began it (`"mpa"` or
    /// `"sctp"`; `""` where unknown): its connections all come over it
    /// (an MPA connection's QP joins the run's PD when its core asks by
    /// its address, `Serving::pd_for`; a DDP over SCTP stream's when its
    /// core asks by its session, `Serving::pd_of`).
    llp: &'static str,
    /// The address of the client whose connection began the run: a
    /// connection from another host that names its id is refused.
    client: Option<Ipv4Addr>,
    /// Connections accepted (by the control plane), and handed to a core
    /// with a QP.
    admitted: u64,
    handed: u64,
    /// Connections open on the cores.
    open: usize,
    /// A connection of the run's last size was accepted.
    last_seen: bool,
    /// Since when no connection of it is open.
    quiet_since: Option<StdInstant>,
}

/// A run as a server of [`Admission::Many`] tells runs apart: the client's
/// id and the access its operation needs. A run serves one operation (its
/// STag gives that operation's rights only), so a client that goes on
/// under the same id with another operation (a Write run, then a Read
/// run) starts another run, whether or not the first one's connections
/// are all closed yet (its last close may reach a core after the next
/// run's first connection has reached the control plane).
type RunKey = (u64, Access);

/// The runs a server of [`Admission::Many`] serves, and its memory's
/// leases.
#[derive(Debug)]
struct Runs {
    leases: Leases,
    by_id: HashMap<RunKey, Run>,
    /// Octets [`Serving::reserve`] took for good.
    reserved: u64,
    /// Leases given back whose octets an earlier run may have left: they
    /// are free again once [`Serving::scrub`] has zeroed them.
    dirty: Vec<(u64, u64)>,
    /// Connections accepted for runs with a PD of their own, by the
    /// client's address, until their core asks which PD their QP joins
    /// ([`Serving::pd_for`]), and when they were accepted (one whose
    /// startup failed after its Accept goes after [`STARTUP_FORGET`]).
    by_peer: HashMap<SocketAddrV4, (RunKey, StdInstant)>,
    /// Connections whose QP joined their run's PD, until their core hands
    /// them to the server ([`Serving::handed_local`]).
    joined: HashMap<SocketAddrV4, (RunKey, StdInstant)>,
    /// PDs of ended runs that a QP of theirs still held: freed by
    /// [`Serving::scrub`] once empty.
    retired: Vec<Pd>,
}

/// Where a server of several runs registers each run's lease under an
/// STag of its own, so that a client reaches its lease and nothing else:
/// not another run's, not the memory other services keep beside the
/// leases. The memory's own registration (`Host::register_local`) is for
/// the server's local work requests only. Each registration draws a new
/// key (RFC 5042 §5), and ends with the run.
pub struct Exposure {
    /// The registry of every core's engine.
    pub registry: Arc<Registry>,
    /// The protection domain of the server's QPs.
    pub pd: Pd,
    /// The memory the leases are of.
    pub region: Arc<Region>,
}

/// The remote access a run of `op` needs to its lease: the client Writes
/// into it, Reads from it or runs atomics on it; a Send run's lease takes
/// its messages through receives, and its STag lets the client do
/// nothing.
fn lease_access(op: Op) -> Access {
    match op {
        Op::Write | Op::WriteImm => Access::REMOTE_WRITE | Access::LOCAL_WRITE,
        Op::Read => Access::REMOTE_READ,
        Op::FetchAdd | Op::CmpSwap => Access::REMOTE_ATOMIC | Access::LOCAL_WRITE,
        Op::Send => Access::LOCAL_READ,
    }
}

/// A snapshot of what a server serves, for operators.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServingStats {
    /// Client runs being served.
    pub runs: usize,
    /// Octets of memory leased to them.
    pub leased: u64,
    /// Octets of memory there are for them (what [`Serving::reserve`]
    /// took is not).
    pub memory: u64,
    /// Connections served to the end.
    pub served: u64,
    /// Connections refused.
    pub refused: u64,
    /// Connections open or starting, as of the cores' last turns.
    pub open: usize,
    /// Client runs served to the end (or given up).
    pub runs_done: u64,
}

/// What the cores of one benchmark server share: the client runs being
/// served, each core's open connections and startups, and the runs served
/// to the end. Written by the control-plane thread when it accepts a
/// connection and by each core once a turn (its own slot) or once per
/// connection: nothing per packet.
pub struct Serving {
    admission: Admission,
    /// [`Admission::OneRun`]: the run being served and when it last had
    /// a connection accepted (set by the accept callback, cleared when it
    /// is done, or taken over by another client's once it has been idle
    /// for [`ONE_RUN_ABANDONED`]).
    active: Mutex<Option<(u64, StdInstant)>>,
    /// [`Admission::Many`]: the runs and their leases.
    runs: Mutex<Runs>,
    /// [`Admission::Many`]: each run's lease under an STag of its own.
    exposure: Option<Exposure>,
    /// No new connection is accepted.
    draining: AtomicBool,
    refused: AtomicU64,
    /// A connection of the run's last size was accepted.
    last_seen: AtomicBool,
    /// Connections of the run's last size accepted, and how many the run
    /// has (its hellos' QPs): a client on several cores may close one
    /// core's before another core's have even begun.
    last_admitted: AtomicU64,
    last_total: AtomicU64,
    /// [`Admission::OneRun`]: the active run's connections (MPA or DDP
    /// over SCTP streams) on every core, from their QPs' handing over to
    /// their ends: a run with some is never abandoned.
    one_run_open: AtomicUsize,
    /// Each core's connections open or in MPA startup, as of its last turn.
    open: Vec<AtomicUsize>,
    /// Connections each core served to the end.
    served: Vec<AtomicU64>,
    /// Client runs served to the end.
    runs_done: AtomicU64,
}

impl Serving {
    /// The shared state of a server of `cores` cores serving one client's
    /// run at a time.
    pub fn new(cores: usize) -> Arc<Serving> {
        Serving::with(cores, Admission::OneRun, 0)
    }

    /// The shared state of a server of `cores` cores admitting runs as
    /// `admission` says, in a memory of `memory` octets.
    pub fn with(cores: usize, admission: Admission, memory: u64) -> Arc<Serving> {
        Serving::build(cores, admission, memory, None)
    }

    /// [`Serving::with`] over the memory of `exposure`, each run told an
    /// STag of its own over its lease (see [`Exposure`]).
    pub fn exposing(cores: usize, admission: Admission, exposure: Exposure) -> Arc<Serving> {
        let memory = exposure.region.len() as u64;
        Serving::build(cores, admission, memory, Some(exposure))
    }

    fn build(
        cores: usize,
        admission: Admission,
        memory: u64,
        exposure: Option<Exposure>,
    ) -> Arc<Serving> {
        Arc::new(Serving {
            admission,
            exposure,
            active: Mutex::new(None),
            runs: Mutex::new(Runs {
                leases: Leases::new(memory),
                by_id: HashMap::new(),
                reserved: 0,
                dirty: Vec::new(),
                by_peer: HashMap::new(),
                joined: HashMap::new(),
                retired: Vec::new(),
            }),
            draining: AtomicBool::new(false),
            refused: AtomicU64::new(0),
            last_seen: AtomicBool::new(false),
            last_admitted: AtomicU64::new(0),
            last_total: AtomicU64::new(0),
            one_run_open: AtomicUsize::new(0),
            open: (0..cores).map(|_| AtomicUsize::new(0)).collect(),
            served: (0..cores).map(|_| AtomicU64::new(0)).collect(),
            runs_done: AtomicU64::new(0),
        })
    }

    /// Whether it admits many runs at once, each in a lease of its own
    /// ([`Admission::Many`]), rather than one run in the whole memory.
    pub(crate) fn many(&self) -> bool {
        matches!(self.admission, Admission::Many { .. })
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

    /// Core `core` served a connection to the end.
    pub(crate) fn count_served(&self, core: usize) {
        self.served[core].fetch_add(1, Ordering::Relaxed);
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

    /// Takes `len` octets of the memory for good (another service's
    /// buffers beside the runs' leases): their offset, or `None` if there
    /// is not that much free.
    pub fn reserve(&self, len: u64) -> Option<u64> {
        let mut runs = self.runs();
        let (offset, len) = runs.leases.take(len)?;
        runs.reserved += len;
        Some(offset)
    }

    /// Zeroes the leases runs gave back in `region` (what a client left
    /// there is not the next one's to read) and frees them: off the
    /// control-plane thread and the cores (the appliance's main thread
    /// calls it). Returns the octets zeroed.
    pub fn scrub(&self, region: &Region) -> u64 {
        let dirty = std::mem::take(&mut self.runs().dirty);
        let mut octets = 0;
        for &(offset, len) in &dirty {
            clear(region, offset, len);
            octets += len;
        }
        let mut runs = self.runs();
        for (offset, len) in dirty {
            runs.leases.give_back(offset, len);
        }
        // Ended runs' PDs whose last QP has gone since.
        let retired = std::mem::take(&mut runs.retired);
        for pd in retired {
            self.retire(Some(pd), &mut runs.retired);
        }
        octets
    }

    /// Stops accepting: every connection from now on is refused, those
    /// open run on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether [`drain`](Self::drain) was called.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// What it serves now.
    pub fn stats(&self) -> ServingStats {
        let runs = self.runs();
        ServingStats {
            runs: match self.admission {
                Admission::OneRun => usize::from(
                    self.active
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .is_some(),
                ),
                Admission::Many { .. } => runs.by_id.len(),
            },
            leased: runs.leases.used()
                - runs.reserved
                - runs.dirty.iter().map(|&(_, l)| l).sum::<u64>(),
            memory: runs.leases.len() - runs.reserved,
            served: self.served(),
            refused: self.refused(),
            open: self.open(),
            runs_done: self.runs_done(),
        }
    }

    /// The control plane's verdict on a client's hello (`private_data`,
    /// from `peer`) for a server of `len` octets registered as `memory`:
    /// an Accept telling it the STag and TO of its lease (an STag of its
    /// own where this server has an [`Exposure`], else `memory`'s), or a
    /// Reject saying why not. `hook` hears of either. The same for every
    /// lower layer (`llp`): an MPA Request's private data or a DDP
    /// session's Initiate's (RFC 6581 §7).
    pub fn decide(
        &self,
        private_data: &[u8],
        len: usize,
        memory: Mr,
        (llp, peer): (&'static str, std::net::SocketAddrV4),
        hook: Option<&EventHook>,
    ) -> Decision {
        let hello = ClientHello::decode(private_data);
        let verdict = hello.as_ref().map_err(Clone::clone).and_then(|h| {
            self.admit(h, len, Some((llp, peer)))
                .map(|lease| (h, lease))
        });
        match verdict {
            Ok((h, lease)) => {
                if let Some(hook) = hook {
                    hook(ServerEvent::Accepted {
                        llp,
                        peer,
                        run: h.run,
                        op: h.op,
                        size: h.size,
                    });
                }
                let hello = match lease.stag {
                    Some(stag) => ServerHello { stag, to: 0 },
                    None => ServerHello {
                        stag: memory.stag,
                        to: memory.base_to.wrapping_add(lease.offset),
                    },
                };
                Decision::Accept(Accept {
                    private_data: hello.encode(),
                    ..Accept::default()
                })
            }
            Err(why) => {
                match hook {
                    Some(hook) => hook(ServerEvent::Refused {
                        llp,
                        peer,
                        why: why.clone(),
                    }),
                    None => eprintln!("bench server: refused the client at {peer}: {why}"),
                }
                self.refused.fetch_add(1, Ordering::Relaxed);
                Decision::Reject(hello::encode_reject(&why))
            }
        }
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, Runs> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The accept callback's verdict on `hello` for a server of `len`
    /// octets, from `client` (its lower layer and address, where known):
    /// the offset of the run's lease, or why not.
    fn admit(
        &self,
        hello: &ClientHello,
        len: usize,
        client: Option<(&'static str, SocketAddrV4)>,
    ) -> Result<Lease, String> {
        if self.is_draining() {
            return Err("the server is draining: it takes no new connections".into());
        }
        check_fits(hello, len)?;
        let Admission::Many {
            runs_max,
            runs_per_host,
            ..
        } = self.admission
        else {
            return self.admit_one(hello);
        };
        let need = memory_for(hello.qps as usize, hello.size as usize) as u64;
        let access = lease_access(hello.op);
        let key = (hello.run, access);
        let mut runs = self.runs();
        let Runs {
            leases,
            by_id,
            dirty,
            by_peer,
            joined,
            retired,
            reserved,
            ..
        } = &mut *runs;
        // Its QP joins the run's PD when its core asks (`pd_for`); an
        // older entry of the same address (a startup that failed) goes.
        let mut note_peer = |run: &Run| -> Result<(), String> {
            let Some(("mpa", peer)) = client else {
                return Ok(());
            };
            by_peer.remove(&peer);
            joined.remove(&peer);
            if run.pd.is_some() {
                if by_peer.len() >= STARTUPS_MAX {
                    return Err(format!(
                        "this server has {STARTUPS_MAX} connections in startup, its limit: try again later"
                    ));
                }
                by_peer.insert(peer, (key, StdInstant::now()));
            }
            Ok(())
        };
        if let Some(run) = by_id.get_mut(&key) {
            // A run is its client's: another host, or another lower layer
            // than the run's PD was made for, does not join it.
            if let (Some(owner), Some((_, peer))) = (run.client, client) {
                if owner != *peer.ip() {
                    return Err("this run id is another client's: start a run of your own".into());
                }
            }
            // Nor a connection over another lower layer than the run's
            // (its QP would join the run's PD another way).
            match (run.llp, client) {
                ("mpa", Some(("sctp", _))) => {
                    return Err("this run began over MPA: its connections are MPA's".into());
                }
                ("sctp", Some(("mpa", _))) => {
                    return Err(
                        "this run began over DDP over SCTP: its connections are SCTP's".into(),
                    );
                }
                _ => {}
            }
            // The address is noted only for a connection that is admitted:
            // a refused one's entry stayed `STARTUP_FORGET`, so one client
            // refused `STARTUPS_MAX` times within it shut every client out
            // (a review's probe).
            if need > run.len {
                // A larger size (-a): a new lease, if none of the old
                // one's connections can still use it.
                if run.open > 0 || run.admitted != run.handed {
                    return Err(format!(
                        "{} B messages need a larger lease than this run has while its \
                         connections of a smaller size are still open",
                        hello.size
                    ));
                }
                let Some((offset, len)) = leases.take(need) else {
                    return Err(out_of_memory(need, leases, *reserved, dirty));
                };
                let stag = match self.expose(offset, len, run.access, run.pd) {
                    Ok(stag) => stag,
                    Err(why) => {
                        leases.give_back(offset, len);
                        return Err(why);
                    }
                };
                if let Err(why) = note_peer(run) {
                    self.unexpose(stag);
                    leases.give_back(offset, len);
                    return Err(why);
                }
                // No connection of the old size is left to use its STag.
                self.unexpose(run.stag);
                dirty.push((run.offset, run.len));
                (run.offset, run.len, run.stag) = (offset, len, stag);
                run.admitted += 1;
                run.last_seen |= hello.last;
                // Activity: the idle reaper counts from now (it would
                // otherwise give up the run, and the STag just told).
                run.quiet_since = Some(StdInstant::now());
                return Ok(Lease { offset, stag });
            }
            note_peer(run)?;
            run.admitted += 1;
            run.last_seen |= hello.last;
            if run.open == 0 {
                // Activity: the idle reaper counts from now.
                run.quiet_since = Some(StdInstant::now());
            }
            return Ok(Lease {
                offset: run.offset,
                stag: run.stag,
            });
        }
        // One host's share (dpwarpd's `clients_per_host`): a host that
        // began runs under ever new ids, and kept their connections open,
        // held every place, and every other host was refused (found by a
        // review).
        if let Some((_, peer)) = client {
            let ip = *peer.ip();
            let held = by_id.values().filter(|r| r.client == Some(ip)).count();
            if held >= runs_per_host {
                return Err(format!(
                    "{ip} has {held} client runs here at once, as many as one client host may: \
                     try again later"
                ));
            }
        }
        if by_id.len() >= runs_max {
            return Err(format!(
                "this server serves {runs_max} client runs at once, its limit: try again later"
            ));
        }
        // A run of a server that exposes leases gets a PD of its own,
        // over either lower layer.
        let pd = match (&self.exposure, client) {
            (Some(e), Some(_)) => {
                // Ended runs' PDs whose QPs have gone since first.
                let old = std::mem::take(retired);
                for pd in old {
                    self.retire(Some(pd), retired);
                }
                Some(e.registry.alloc_pd().map_err(|err| {
                    format!(
                        "this server has no protection domain left for the run ({err:?}): \
                         try again later"
                    )
                })?)
            }
            _ => None,
        };
        let Some((offset, len)) = leases.take(need) else {
            let why = out_of_memory(need, leases, *reserved, dirty);
            self.retire(pd, retired);
            return Err(why);
        };
        let stag = match self.expose(offset, len, access, pd) {
            Ok(stag) => stag,
            Err(why) => {
                leases.give_back(offset, len);
                self.retire(pd, retired);
                return Err(why);
            }
        };
        let run = Run {
            offset,
            len,
            stag,
            access,
            pd,
            llp: client.map_or("", |(llp, _)| llp),
            client: client.map(|(_, peer)| *peer.ip()),
            admitted: 1,
            handed: 0,
            open: 0,
            last_seen: hello.last,
            quiet_since: Some(StdInstant::now()),
        };
        if let Err(why) = note_peer(&run) {
            leases.give_back(offset, len);
            self.unexpose(stag);
            self.retire(pd, retired);
            return Err(why);
        }
        by_id.insert(key, run);
        Ok(Lease { offset, stag })
    }

    /// [`Admission::Many`]: the connection from `peer` that this server
    /// admitted ended its startup without a QP (the peer reset after its
    /// Request, the Reply could not be sent, its core had no room): its
    /// run no longer waits for it (`admitted` is taken back, so a larger
    /// size can take a new lease), and its address is forgotten.
    pub(crate) fn startup_failed(&self, peer: SocketAddrV4) {
        let mut runs = self.runs();
        let key = runs
            .by_peer
            .remove(&peer)
            .or_else(|| runs.joined.remove(&peer))
            .map(|(key, _)| key);
        if let Some(key) = key {
            self.not_coming(&mut runs, key);
        }
    }

    /// [`Admission::Many`]: a DDP over SCTP stream of `op` of run `run`
    /// that this server admitted (the control plane accepted its Initiate)
    /// ended before it came up on its core (its association ended before
    /// the Accept reached the core: `dataplane::SctpEvent::AcceptedNeverUp`,
    /// told once per stream): its run no longer waits for it, as
    /// [`startup_failed`](Self::startup_failed) for an MPA connection.
    pub(crate) fn stream_never_up(&self, run: u64, op: Op) {
        let key = (run, lease_access(op));
        let mut runs = self.runs();
        // An MPA run's connections are taken back by their address.
        if runs.by_id.get(&key).is_some_and(|r| r.llp == "sctp") {
            self.not_coming(&mut runs, key);
        }
    }

    /// A connection run `key` admitted will not reach a core: `admitted`
    /// is taken back (never below what was handed), and the run ends if
    /// that leaves it nothing: a run that never had a QP and has nothing on
    /// its way (kept, its lease and slot would wait out the idle limit,
    /// shutting others out, and a client that failed its startup again and
    /// again kept them so), or, as [`closed`](Self::closed) ends it, one
    /// whose last size was seen with nothing of it open or on its way (its
    /// last close may have come before this).
    fn not_coming(&self, runs: &mut Runs, key: RunKey) {
        let Some(run) = runs.by_id.get_mut(&key) else {
            return;
        };
        if run.admitted > run.handed {
            run.admitted -= 1;
        }
        let unused = run.admitted == 0 && run.handed == 0;
        let done = run.last_seen && run.admitted == run.handed;
        if run.open == 0 && (unused || done) {
            if let Some(run) = runs.by_id.remove(&key) {
                runs.dirty.push((run.offset, run.len));
                self.end_run(runs, key, run);
                self.runs_done.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The PD a connection from `peer` to the bench service's port joins:
    /// its run's own, for a connection this server accepted for an MPA
    /// run with one (asked once per connection, by its core:
    /// `dataplane::Core::set_pd_for`; the caller asks only for the
    /// service's port); `None` for any other (the core's default PD).
    pub fn pd_for(&self, peer: SocketAddrV4) -> Option<Pd> {
        let mut runs = self.runs();
        let (key, _) = runs.by_peer.remove(&peer)?;
        let pd = runs.by_id.get(&key)?.pd?;
        runs.joined.insert(peer, (key, StdInstant::now()));
        Some(pd)
    }

    /// Frees an ended run's PD, or keeps it in `retired` while a QP of the
    /// run still holds it (its core frees the QP in a later turn).
    fn retire(&self, pd: Option<Pd>, retired: &mut Vec<Pd>) {
        if let (Some(e), Some(pd)) = (&self.exposure, pd) {
            if let Err(VerbError::InUse) = e.registry.dealloc_pd(pd) {
                retired.push(pd);
            }
        }
    }

    /// A run ended: its STag, its PD (now or once empty) and the
    /// addresses of its connections that never reached a core go.
    fn end_run(&self, runs: &mut Runs, key: RunKey, run: Run) {
        self.unexpose(run.stag);
        runs.by_peer.retain(|_, (k, _)| *k != key);
        runs.joined.retain(|_, (k, _)| *k != key);
        self.retire(run.pd, &mut runs.retired);
    }

    /// The PD a DDP over SCTP stream of `op` of run `run` from `peer` joins (asked by
    /// its core once the control plane accepted the stream's Initiate:
    /// `dataplane::SctpUnit::set_pd_for`): its run's own, or `None` for a
    /// run without one (a server that exposes no leases) or one that is
    /// gone.
    /// A run is its client's: a stream from another host gets `None`.
    pub fn pd_of(&self, run: u64, op: Op, peer: Ipv4Addr) -> Option<Pd> {
        let runs = self.runs();
        runs.by_id
            .get(&(run, lease_access(op)))
            .filter(|r| r.llp == "sctp" && r.client.is_none_or(|c| c == peer))?
            .pd
    }

    /// The PD of the STags of runs without one of their own (a server
    /// that exposes leases gives every run one), if this server exposes
    /// leases.
    pub fn exposure_pd(&self) -> Option<Pd> {
        self.exposure.as_ref().map(|e| e.pd)
    }

    /// Protection domains of runs: live, and ended but still holding a QP.
    pub fn pds(&self) -> usize {
        let runs = self.runs();
        runs.by_id.values().filter(|r| r.pd.is_some()).count() + runs.retired.len()
    }

    /// Registers the lease of `len` octets at `offset` for a run whose
    /// client may do `access` there: its STag, `None` if this server does
    /// not expose leases (the client is told the memory's STag).
    /// In the run's own PD `pd` (then its QPs' local work requests use
    /// it too: it has local access as well), else the exposure's.
    fn expose(
        &self,
        offset: u64,
        len: u64,
        access: Access,
        pd: Option<Pd>,
    ) -> Result<Option<u32>, String> {
        let Some(e) = &self.exposure else {
            return Ok(None);
        };
        let access = match pd {
            Some(_) => access | Access::LOCAL_READ | Access::LOCAL_WRITE,
            None => access,
        };
        // Tagged Offsets from 0: the client learns nothing of where its
        // lease lies.
        e.registry
            .reg_mr(
                pd.unwrap_or(e.pd),
                e.region.clone(),
                offset as usize,
                len as usize,
                0,
                access,
            )
            .map(|mr| Some(mr.stag))
            .map_err(|err| {
                format!(
                    "this server has no STag left for the run's memory ({err:?}): try again later"
                )
            })
    }

    /// Deregisters a run's STag: a segment that still carries it draws an
    /// invalid-STag Terminate.
    fn unexpose(&self, stag: Option<u32>) {
        if let (Some(e), Some(stag)) = (&self.exposure, stag) {
            let _ = e.registry.dereg_mr(stag);
        }
    }

    fn admit_one(&self, hello: &ClientHello) -> Result<Lease, String> {
        let mut run = self.active.lock().unwrap_or_else(|p| p.into_inner());
        // Nothing of the active run open on any core, and none of its
        // connections accepted for a while.
        let abandoned = |since: StdInstant| {
            since.elapsed() >= ONE_RUN_ABANDONED && self.one_run_open.load(Ordering::SeqCst) == 0
        };
        match *run {
            Some((r, since)) if r != hello.run && !abandoned(since) => Err(
                "this server is serving another client's run: wait for it, or start another \
                 server on another port (-p)"
                    .to_string(),
            ),
            active => {
                if active.is_some_and(|(r, _)| r != hello.run) {
                    // The abandoned run's sizes are forgotten with it.
                    self.last_seen.store(false, Ordering::SeqCst);
                    self.last_admitted.store(0, Ordering::SeqCst);
                    self.last_total.store(0, Ordering::SeqCst);
                }
                *run = Some((hello.run, StdInstant::now()));
                if hello.last {
                    self.last_total
                        .store(u64::from(hello.qps), Ordering::SeqCst);
                    self.last_admitted.fetch_add(1, Ordering::SeqCst);
                    self.last_seen.store(true, Ordering::SeqCst);
                }
                Ok(Lease {
                    offset: 0,
                    stag: None,
                })
            }
        }
    }

    /// [`Admission::Many`]: a connection of `op` of run `run` reached a
    /// core with a QP (an MPA one from `peer`): the offset of the run's
    /// lease, or `None` if the run is gone; with the STag
    /// its QP's own work requests use where the run has a PD of its own
    /// (the memory's registration, in another PD, is not for it); `None`
    /// also where the run has one but the QP did not join it (it cannot
    /// serve the run: its core made it before the run's PD was asked for).
    pub(crate) fn handed_local(
        &self,
        run: u64,
        op: Op,
        peer: Option<SocketAddrV4>,
    ) -> Option<(u64, Option<u32>)> {
        let key = (run, lease_access(op));
        let mut runs = self.runs();
        let r = runs.by_id.get(&key)?;
        // An MPA connection's QP joined the run's PD if its core asked by
        // its address; a stream's, by its session (`pd_of`), before its
        // core told of it.
        if r.pd.is_some()
            && r.llp == "mpa"
            && peer.and_then(|p| runs.joined.remove(&p)).map(|(k, _)| k) != Some(key)
        {
            return None;
        }
        let r = runs.by_id.get_mut(&key)?;
        r.handed += 1;
        r.open += 1;
        r.quiet_since = None;
        Some((r.offset, r.stag.filter(|_| r.pd.is_some())))
    }

    /// [`Admission::OneRun`]: a connection of the active run was handed to
    /// a core with its QP.
    pub(crate) fn one_run_opened(&self) {
        self.one_run_open.fetch_add(1, Ordering::SeqCst);
    }

    /// [`Admission::OneRun`]: a connection [`one_run_opened`](Self::one_run_opened)
    /// counted ended. The run's last connection restarts its quiet time:
    /// it is given up [`ONE_RUN_ABANDONED`] after that, not after its last
    /// admission (a client between two sizes, the first longer than that,
    /// could be taken over in the moment between them: found by a review).
    pub(crate) fn one_run_closed(&self) {
        let before = self
            .one_run_open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if before == Ok(1) {
            let mut run = self.active.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((_, since)) = run.as_mut() {
                *since = StdInstant::now();
            }
        }
    }

    /// [`Admission::Many`]: a connection of run `run` ended on a core. The
    /// run is done when its last size was seen and nothing of it is open or
    /// on its way.
    pub(crate) fn closed(&self, run: u64, op: Op) {
        let key = (run, lease_access(op));
        let mut runs = self.runs();
        let Some(r) = runs.by_id.get_mut(&key) else {
            return;
        };
        r.open = r.open.saturating_sub(1);
        if r.open == 0 {
            r.quiet_since = Some(StdInstant::now());
            if r.last_seen && r.admitted == r.handed {
                let lease = (r.offset, r.len);
                runs.dirty.push(lease);
                if let Some(r) = runs.by_id.remove(&key) {
                    self.end_run(&mut runs, key, r);
                }
                self.runs_done.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// [`Admission::Many`]: gives up the runs that have had no connection
    /// open for the idle limit (their clients went away, or a connection
    /// accepted for them never reached a core); returns how many.
    pub fn reap(&self) -> usize {
        let Admission::Many { idle, .. } = self.admission else {
            return 0;
        };
        let mut runs = self.runs();
        // Connections whose startup failed after their Accept.
        runs.by_peer
            .retain(|_, (_, at)| at.elapsed() < STARTUP_FORGET);
        runs.joined
            .retain(|_, (_, at)| at.elapsed() < STARTUP_FORGET);
        let gone: Vec<RunKey> = runs
            .by_id
            .iter()
            .filter(|(_, r)| r.open == 0 && r.quiet_since.is_some_and(|t| t.elapsed() >= idle))
            .map(|(&key, _)| key)
            .collect();
        for &key in &gone {
            if let Some(r) = runs.by_id.remove(&key) {
                runs.dirty.push((r.offset, r.len));
                self.end_run(&mut runs, key, r);
                self.runs_done.fetch_add(1, Ordering::SeqCst);
            }
        }
        gone.len()
    }

    /// Core `core` has `open` connections open or starting: publishes it,
    /// and ([`Admission::OneRun`]) ends the run if its last size's
    /// connections, all of them (as many as its hellos say it has), are
    /// gone from every core. A client on one core opens every connection
    /// of a size (each one counted by its core from the SYN on) before it
    /// closes any; one on several cores may close one core's before
    /// another core's are accepted, which the count covers.
    pub(crate) fn publish(&self, core: usize, open: usize) {
        // Written when it changes, not every turn (a turn of a latency run
        // is a microsecond).
        if self.open[core].load(Ordering::Relaxed) != open {
            self.open[core].store(open, Ordering::SeqCst);
        }
        if self.admission == Admission::OneRun
            && open == 0
            && self.last_seen.load(Ordering::SeqCst)
            && self.last_admitted.load(Ordering::SeqCst) >= self.last_total.load(Ordering::SeqCst)
            && self.open() == 0
            && self
                .last_seen
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.last_admitted.store(0, Ordering::SeqCst);
            self.last_total.store(0, Ordering::SeqCst);
            *self.active.lock().unwrap_or_else(|p| p.into_inner()) = None;
            self.runs_done.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The range of the server's memory a run was given, and its STag if it
/// has one of its own.
struct Lease {
    offset: u64,
    stag: Option<u32>,
}

/// Why a run of `need` octets found no lease, with what holds the memory:
/// other clients' runs (wait), the server's other services' reserve and
/// leases being cleared (never the client's), or a run larger than the
/// service's whole share (no wait helps).
fn out_of_memory(need: u64, leases: &Leases, reserved: u64, dirty: &[(u64, u64)]) -> String {
    let clearing: u64 = dirty.iter().map(|&(_, len)| len).sum();
    let share = leases.len().saturating_sub(reserved);
    let others = leases.used().saturating_sub(reserved + clearing);
    if need > share {
        return format!(
            "this server has no room for the run: it needs {need} octets and the service's \
             memory is {share} octets ({reserved} more are reserved for the server's other \
             services): use smaller messages or fewer QPs (-s, -a, -q), or give the server \
             more memory (dpwarpd: [rnic] memory_mib)"
        );
    }
    format!(
        "this server has no room for the run's {need} octets now: {others} of the service's \
         {share} octets are leased to other clients' runs and {clearing} are being cleared \
         after runs that ended; try again later or with smaller messages"
    )
}

/// A connection a server's core serves, for operators (`dpwarpctl
/// connections`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The lower layer under DDP: `"mpa"` (MPA over TCP, RFC 5044) or
    /// `"sctp"` (DDP over SCTP, RFC 5043).
    pub llp: &'static str,
    /// The core's QP.
    pub qp: QpHandle,
    /// The client's address and port.
    pub peer: Option<std::net::SocketAddrV4>,
    /// The client's run.
    pub run: u64,
    /// What it runs.
    pub op: Op,
    /// Bandwidth or latency.
    pub mode: Mode,
    /// Message size.
    pub size: u32,
    /// As negotiated in the MPA startup: RFC 6581 enhanced, CRC, markers
    /// each way, this side's IRD and ORD.
    pub enhanced: bool,
    /// CRC on.
    pub crc: bool,
    /// Markers in what we send.
    pub markers_tx: bool,
    /// Markers in what we receive.
    pub markers_rx: bool,
    /// Our IRD.
    pub ird: u16,
    /// Our ORD.
    pub ord: u16,
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
    /// The connections it serves now.
    connections: HashMap<QpHandle, Connection>,
    /// Bumped whenever `connections` changes.
    generation: u64,
    events: Option<EventHook>,
    /// What belongs to other listeners of this core (another service of
    /// the appliance): established handoffs on other local ports, and the
    /// ends and events of their QPs.
    foreign: Foreign,
}

/// What a [`Server`] step found that belongs to another service on the
/// same core ([`Server::take_foreign`]).
#[derive(Debug, Default)]
pub struct Foreign {
    /// Connections established on another local port: the QP, its
    /// startup's outcome, the local and the peer's address, and the token
    /// of the accept that began it (`Handoff::ulp_token`: which service's
    /// listener accepted it, whatever listens on the port now).
    pub established: Vec<(
        QpHandle,
        control::mpa::Established,
        std::net::SocketAddrV4,
        std::net::SocketAddrV4,
        u64,
    )>,
    /// Startups accepted on another local port that ended without a QP
    /// (they failed, or the core had no room): the local and the peer's
    /// address and the accept's token, so that a service forgets what
    /// that accept prepared (and nothing it prepared for a later
    /// connection with the same addresses).
    pub failed: Vec<(std::net::SocketAddrV4, std::net::SocketAddrV4, u64)>,
    /// Their QPs that ended.
    pub ended: Vec<QpHandle>,
    /// Terminates on their QPs.
    pub events: Vec<(QpHandle, rnic_engine::verbs::QpEvent)>,
    /// Completions of their QPs.
    pub wcs: Vec<Wc>,
    /// QPs handed to another service, until they end.
    owned: std::collections::HashSet<QpHandle>,
}

/// What a server tells its operator, one event per connection: accepted
/// or refused (on the control-plane thread), terminated and closed (on
/// the connection's core).
#[derive(Debug, Clone)]
pub enum ServerEvent {
    /// The control plane accepted a client's connection.
    Accepted {
        /// The lower layer under DDP (see [`Connection::llp`]).
        llp: &'static str,
        /// The client.
        peer: std::net::SocketAddrV4,
        /// Its run and workload.
        run: u64,
        /// The operation.
        op: Op,
        /// Message size.
        size: u32,
    },
    /// The control plane refused one (MPA Reject with the reason).
    Refused {
        /// The lower layer under DDP (see [`Connection::llp`]).
        llp: &'static str,
        /// The client.
        peer: std::net::SocketAddrV4,
        /// Why, as the client is told.
        why: String,
    },
    /// An accepted connection reached Full Operation on a core.
    Established {
        /// The core.
        core: usize,
        /// The connection.
        connection: Connection,
    },
    /// A Terminate was sent or received on a served connection.
    Terminated {
        /// The core.
        core: usize,
        /// The connection.
        connection: Connection,
        /// The Terminate (layer, type, code) and its direction.
        event: rnic_engine::verbs::QpEvent,
    },
    /// A served connection ended.
    Closed {
        /// The core.
        core: usize,
        /// The connection.
        connection: Connection,
    },
}

/// Where a server's events go.
pub type EventHook = Arc<dyn Fn(ServerEvent) + Send + Sync>;

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
        Server::serving(
            host, core, transport, emss, region, mr, &serving, port, startup, None,
        )
    }

    /// Core `core` of a server of several on `host`: they share `serving`
    /// and the memory `region` registered as `mr` (every client QP, on
    /// whichever core, is told the same STag, unless `serving` gives each
    /// run one of its own: [`Serving::exposing`]), and each listens on `port`
    /// of its own transport; `events` hears of every connection (without
    /// it, refusals are printed on stderr).
    #[allow(clippy::too_many_arguments)]
    pub fn serving(
        host: &Arc<Host>,
        core: u16,
        transport: T,
        emss: usize,
        region: Arc<Region>,
        mr: Mr,
        serving: &Arc<Serving>,
        port: u16,
        startup: StartupConfig,
        events: Option<EventHook>,
    ) -> Server<T> {
        let endpoint = Endpoint::on_host_sharing(host, core, transport, emss, region, mr);
        let mut server = Server {
            endpoint,
            responder: Responder::default(),
            served: 0,
            client_done: false,
            port: 0,
            core: usize::from(core),
            serving: serving.clone(),
            runs_seen: 0,
            connections: HashMap::new(),
            generation: 0,
            events,
            foreign: Foreign::default(),
        };
        server.set_port(port, startup);
        server
    }

    /// Listens on `port` from now on, with `startup`: the listener on the
    /// old port (if any) goes, connections it accepted stay. Port 0: no
    /// listener (a core of an appliance whose bench service is off,
    /// serving only its other services' connections).
    pub fn set_port(&mut self, port: u16, startup: StartupConfig) {
        if self.port != 0 {
            self.endpoint.control.unlisten(self.port);
        }
        self.port = port;
        if port != 0 {
            // Its status from now on is the new listen's.
            self.endpoint.core.forget_listen_status(port);
            let on_request = self.on_request();
            self.endpoint.control.listen(port, startup, on_request);
        }
    }

    /// The port it listens on (0: none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The control plane's accept callback: admits the client's run (a
    /// lease of the memory) or says why not.
    fn on_request(&self) -> control::runtime::OnRequest {
        let len = self.endpoint.region.len();
        let memory = self.endpoint.mr;
        let shared = self.serving.clone();
        let hook = self.events.clone();
        Box::new(move |request, peer| {
            shared.decide(
                &request.private_data,
                len,
                memory,
                ("mpa", peer),
                hook.as_ref(),
            )
        })
    }

    /// Clients refused so far, by every core of this server (workloads
    /// that do not fit, a second run).
    pub fn refused(&self) -> u64 {
        self.serving.refused()
    }

    /// The connections this core serves now.
    pub fn connections(&self) -> impl Iterator<Item = &Connection> {
        self.connections.values()
    }

    /// What the last steps found for other services on this core (their
    /// listeners' connections, ends, events and completions), swapped into
    /// `into`, whose (emptied) buffers the server keeps using: the caller
    /// drains it, and no turn allocates.
    pub fn take_foreign(&mut self, into: &mut Foreign) {
        std::mem::swap(&mut self.foreign.established, &mut into.established);
        std::mem::swap(&mut self.foreign.failed, &mut into.failed);
        std::mem::swap(&mut self.foreign.ended, &mut into.ended);
        std::mem::swap(&mut self.foreign.events, &mut into.events);
        std::mem::swap(&mut self.foreign.wcs, &mut into.wcs);
        self.foreign.established.clear();
        self.foreign.failed.clear();
        self.foreign.ended.clear();
        self.foreign.events.clear();
        self.foreign.wcs.clear();
    }

    /// Changes whenever [`connections`](Self::connections) does.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Steps until the listener is up (or refused), at most 10 s.
    pub fn wait_listening(&mut self) -> Result<(), String> {
        let start = StdInstant::now();
        if self.port == 0 {
            return Ok(());
        }
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

    /// Ends every connection at once (RST; their work flushes): a drain's
    /// deadline passed.
    pub fn abort_all(&mut self) {
        let qps: Vec<QpHandle> = self.connections.keys().copied().collect();
        for qp in qps {
            self.endpoint.abort(qp);
        }
    }

    /// One turn: the RNIC, new connections, the workloads' replies.
    pub fn step(&mut self, now: Instant) -> Result<(), String> {
        self.endpoint.step(now);
        let many = matches!(self.serving.admission, Admission::Many { .. });
        // Ends first: a new QP may take an ended one's handle in this step.
        for qp in self.endpoint.take_ended() {
            if self.foreign.owned.remove(&qp) {
                self.foreign.ended.push(qp);
                continue;
            }
            self.responder.remove(qp);
            self.served += 1;
            self.serving.served[self.core].fetch_add(1, Ordering::Relaxed);
            if let Some(c) = self.connections.remove(&qp) {
                self.generation += 1;
                if many {
                    self.serving.closed(c.run, c.op);
                } else {
                    self.serving.one_run_closed();
                }
                if let Some(hook) = &self.events {
                    hook(ServerEvent::Closed {
                        core: self.core,
                        connection: c,
                    });
                }
            }
        }
        // A benchmark's QPs do not terminate unless something is wrong; the
        // failures show as completions in error. Keep the queue bounded.
        for (qp, event) in self.endpoint.take_events() {
            if self.foreign.owned.contains(&qp) {
                self.foreign.events.push((qp, event));
                continue;
            }
            if let (Some(hook), Some(c)) = (&self.events, self.connections.get(&qp)) {
                hook(ServerEvent::Terminated {
                    core: self.core,
                    connection: c.clone(),
                    event,
                });
            }
        }
        for (handoff, qp) in self.endpoint.take_handoffs() {
            let (StartupResult::Established(e), Some(qp)) = (&handoff.result, qp) else {
                match handoff.ends {
                    Some((local, peer)) if qp.is_none() && local.port() != self.port => {
                        self.foreign.failed.push((local, peer, handoff.ulp_token));
                    }
                    // One of ours admitted for a run that will not get it
                    // (a Reject admitted nothing).
                    Some((_, peer))
                        if qp.is_none()
                            && many
                            && !matches!(handoff.result, StartupResult::Rejected(_)) =>
                    {
                        self.serving.startup_failed(peer);
                    }
                    _ => {}
                }
                continue;
            };
            let ends = self
                .endpoint
                .conn_of(qp)
                .and_then(|conn| self.endpoint.core.transport().endpoints(conn).ok());
            if let Some((local, peer)) = ends.filter(|(local, _)| local.port() != self.port) {
                // Another listener's: its service takes it.
                self.foreign.owned.insert(qp);
                self.foreign
                    .established
                    .push((qp, e.clone(), local, peer, handoff.ulp_token));
                continue;
            }
            // The callback accepted only hellos that decode and fit.
            let Ok(h) = ClientHello::decode(&e.peer_private_data) else {
                self.endpoint.close(qp);
                continue;
            };
            let (offset, local) = if many {
                match self
                    .serving
                    .handed_local(h.run, h.op, ends.map(|(_, peer)| peer))
                {
                    Some(lease) => lease,
                    // Given up meanwhile: its lease may be another's.
                    None => {
                        self.endpoint.abort(qp);
                        continue;
                    }
                }
            } else {
                self.serving.one_run_opened();
                (0, None)
            };
            if h.urgent {
                self.endpoint.core.set_urgent(qp, true);
            }
            let peer = ends.map(|(_, peer)| peer);
            self.connections.insert(
                qp,
                Connection {
                    llp: "mpa",
                    qp,
                    peer,
                    run: h.run,
                    op: h.op,
                    mode: h.mode,
                    size: h.size,
                    enhanced: e.enhanced,
                    crc: e.crc,
                    markers_tx: e.markers_tx,
                    markers_rx: e.markers_rx,
                    ird: e.ird,
                    ord: e.ord,
                },
            );
            self.generation += 1;
            if let (Some(hook), Some(c)) = (&self.events, self.connections.get(&qp)) {
                hook(ServerEvent::Established {
                    core: self.core,
                    connection: c.clone(),
                });
            }
            self.responder.add(&mut self.endpoint, {
                let served = Served::in_lease(
                    qp,
                    &h,
                    RemoteAddr {
                        stag: h.stag,
                        to: h.to,
                    },
                    offset,
                );
                match local {
                    Some(stag) => served.with_local(stag, offset),
                    None => served,
                }
            });
        }
        let open = self.endpoint.open_connections() + self.endpoint.core.in_startup();
        self.serving.publish(self.core, open);
        let runs = self.serving.runs_done();
        if runs != self.runs_seen {
            self.runs_seen = runs;
            self.client_done = true;
        }
        let foreign = &mut self.foreign;
        let stepped = self.responder.step_spilling(&mut self.endpoint, &mut |wc| {
            if foreign.owned.contains(&wc.qp) {
                foreign.wcs.push(*wc);
            }
        });
        if let Err(failed) = stepped {
            // One connection's failure ends that connection only.
            for &(qp, _) in &failed.0 {
                self.responder.remove(qp);
                self.endpoint.close(qp);
            }
            return Err(failed.reasons());
        }
        Ok(())
    }
}

/// Zeroes `len` octets of `region` from `offset` (a lease new to a run).
fn clear(region: &Region, offset: u64, len: u64) {
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut at = offset;
    let end = offset.saturating_add(len);
    while at < end {
        let n = (end - at).min(ZEROS.len() as u64) as usize;
        if region.write(at as usize, &ZEROS[..n]).is_err() {
            return;
        }
        at += n as u64;
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

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_engine::verbs::Rnic;

    fn hello(run: u64, size: u32, last: bool) -> ClientHello {
        ClientHello {
            op: Op::Write,
            mode: Mode::Bandwidth,
            size,
            depth: 4,
            qi: 0,
            qps: 1,
            last,
            urgent: false,
            stag: 1,
            to: 0,
            run,
        }
    }

    #[test]
    fn runs_get_leases_of_their_own_zeroed_before_the_next_run_sees_them() {
        let region = Region::new(1 << 20);
        let serving = Serving::with(
            1,
            Admission::Many {
                runs_max: 2,
                runs_per_host: 2,
                idle: StdDuration::from_secs(60),
            },
            1 << 20,
        );
        let len = region.len();
        let a = serving
            .admit(&hello(1, 4096, true), len, None)
            .unwrap()
            .offset;
        let b = serving
            .admit(&hello(2, 4096, true), len, None)
            .unwrap()
            .offset;
        assert_ne!(a, b);
        // A third run at once: the limit, refused with the reason.
        let third = serving
            .admit(&hello(3, 4096, true), len, None)
            .err()
            .unwrap();
        assert!(third.contains("2 client runs at once"), "{third}");
        // Run 1 writes its lease, then its only connection ends.
        region.write(a as usize, &[0xAA; 4096]).unwrap();
        assert_eq!(
            serving.handed_local(1, Op::Write, None).map(|l| l.0),
            Some(a)
        );
        serving.closed(1, Op::Write);
        assert_eq!(serving.stats().runs, 1);
        assert_eq!(serving.stats().runs_done, 1);
        // Not free until scrubbed: the same octets are not lent meanwhile.
        let c = serving
            .admit(&hello(4, 4096, true), len, None)
            .unwrap()
            .offset;
        assert_ne!(c, a);
        assert!(serving.scrub(&region) >= 4096);
        let mut back = [1u8; 4096];
        region.read(a as usize, &mut back).unwrap();
        assert!(
            back.iter().all(|&b| b == 0),
            "the old run's octets are gone"
        );
        // Draining refuses everything new, with the reason.
        serving.drain();
        let late = serving.admit(&hello(5, 64, true), len, None).err().unwrap();
        assert!(late.contains("draining"), "{late}");
    }

    /// One client host has begun at most `runs_per_host` of the runs
    /// served at once: its next run is refused, naming the host, while
    /// another host's is admitted and its own runs take more connections
    /// (found by a review: one host could hold every place).
    #[test]
    fn one_client_host_holds_at_most_runs_per_host_runs() {
        let serving = Serving::with(
            1,
            Admission::Many {
                runs_max: 4,
                runs_per_host: 2,
                idle: StdDuration::from_secs(60),
            },
            1 << 20,
        );
        let len = 1 << 20;
        let from = |host: u8, port| {
            Some((
                "mpa",
                SocketAddrV4::new(Ipv4Addr::new(10, 1, 1, host), port),
            ))
        };
        for run in [1, 2] {
            serving
                .admit(&hello(run, 4096, true), len, from(1, 4000 + run as u16))
                .unwrap();
        }
        let third = serving
            .admit(&hello(3, 4096, true), len, from(1, 4003))
            .err()
            .unwrap();
        assert!(
            third.contains("10.1.1.1 has 2 client runs here at once"),
            "{third}"
        );
        // Its runs' further connections are not new runs.
        serving
            .admit(&hello(1, 4096, true), len, from(1, 4010))
            .unwrap();
        // Another host's run is admitted.
        serving
            .admit(&hello(4, 4096, true), len, from(2, 4000))
            .unwrap();
    }

    /// A server of one core and up to 4 runs at once over 1 MiB that
    /// exposes each run's lease (no idle limit), its registry and memory.
    fn exposing_serving() -> (Arc<Serving>, Arc<Registry>, Arc<Region>) {
        exposing_serving_idle(StdDuration::ZERO)
    }

    /// [`exposing_serving`] with an idle limit of `idle`.
    fn exposing_serving_idle(idle: StdDuration) -> (Arc<Serving>, Arc<Registry>, Arc<Region>) {
        let registry = Registry::new(&rnic_engine::verbs::RnicConfig::default());
        let region = Region::new(1 << 20);
        let serving = Serving::exposing(
            1,
            Admission::Many {
                runs_max: 4,
                runs_per_host: 4,
                idle,
            },
            Exposure {
                registry: registry.clone(),
                pd: registry.alloc_pd().unwrap(),
                region: region.clone(),
            },
        );
        (serving, registry, region)
    }

    #[test]
    fn exposed_runs_get_an_stag_of_their_own_that_ends_with_the_run() {
        let (serving, registry, region) = exposing_serving();
        let len = region.len();
        let base = registry.stags_in_use();
        let a = serving.admit(&hello(1, 4096, false), len, None).unwrap();
        let b = serving.admit(&hello(2, 4096, true), len, None).unwrap();
        let (sa, sb) = (a.stag.unwrap(), b.stag.unwrap());
        assert_ne!(sa, sb, "each run its own STag");
        assert_eq!(registry.stags_in_use(), base + 2);
        // A second connection of run 1 is told the same STag.
        assert_eq!(
            serving
                .admit(&hello(1, 4096, false), len, None)
                .unwrap()
                .stag,
            Some(sa)
        );
        // Run 1's STag lets it Write. Reads under the same id, while its
        // Writes are still open, are a run of their own: a lease and an
        // STag of their own, which end with them and leave the Writes'.
        let mut read = hello(1, 4096, true);
        read.op = Op::Read;
        let r = serving.admit(&read, len, None).unwrap();
        let sr = r.stag.unwrap();
        assert!(sr != sa && sr != sb && r.offset != a.offset && r.offset != b.offset);
        assert_eq!(registry.stags_in_use(), base + 3);
        assert_eq!(serving.stats().runs, 3);
        assert_eq!(
            serving.handed_local(1, Op::Read, None).map(|l| l.0),
            Some(r.offset)
        );
        serving.closed(1, Op::Read);
        assert!(registry.dereg_mr(sr).is_err(), "the Read run's STag went");
        assert_eq!(registry.stags_in_use(), base + 2);
        // Its Write connections come and go; a larger size (-a) gets a new
        // lease under a new STag, and the old one is gone.
        for _ in 0..2 {
            serving
                .handed_local(1, Op::Write, None)
                .map(|l| l.0)
                .unwrap();
        }
        serving.closed(1, Op::Write);
        serving.closed(1, Op::Write);
        let grown = serving.admit(&hello(1, 1 << 16, true), len, None).unwrap();
        let sg = grown.stag.unwrap();
        assert_ne!(grown.offset, a.offset);
        assert!(
            registry.dereg_mr(sa).is_err(),
            "the old size's STag was freed"
        );
        assert_eq!(registry.stags_in_use(), base + 2);
        // Run 1 ends with its last size: its STag goes.
        serving
            .handed_local(1, Op::Write, None)
            .map(|l| l.0)
            .unwrap();
        serving.closed(1, Op::Write);
        assert!(
            registry.dereg_mr(sg).is_err(),
            "a finished run's STag was freed"
        );
        // Run 2's connection never reached a core: the reaper gives it up
        // and frees its STag.
        assert_eq!(serving.reap(), 1);
        assert!(
            registry.dereg_mr(sb).is_err(),
            "a reaped run's STag was freed"
        );
        assert_eq!(registry.stags_in_use(), base);
    }

    /// An MPA run of a server that exposes leases: its STag in a PD of its
    /// own, which each of its connections' QPs joins once (asked by their
    /// address) and which is freed with the run, or once its last QP has
    /// gone; a DDP over SCTP run and a connection of nobody's stay in the
    /// exposure's PD.
    /// A refused connection leaves no address behind (each one's entry
    /// stayed 20 s, so one client refused `STARTUPS_MAX` times shut every
    /// client out; found by a review), and a connection admitted whose
    /// startup then failed is no longer waited for: the run may take a
    /// larger lease once its open ones are done.
    #[test]
    fn refused_and_failed_startups_leave_nothing_that_shuts_others_out() {
        let (serving, _registry, region) = exposing_serving();
        let len = region.len();
        let x = |port| SocketAddrV4::new([10, 0, 0, 9].into(), port);
        serving
            .admit(&hello(1, 4096, false), len, Some(("mpa", x(1))))
            .unwrap();
        assert!(serving.pd_for(x(1)).is_some());
        serving.handed_local(1, Op::Write, Some(x(1))).unwrap();
        // One connection open: a larger size is refused, as often as asked.
        for port in 2..(2 + STARTUPS_MAX as u16) {
            let e = serving.admit(&hello(1, 1 << 16, false), len, Some(("mpa", x(port))));
            assert!(e.err().unwrap().contains("larger lease"));
        }
        assert_eq!(serving.runs().by_peer.len(), 0, "nothing noted");
        assert_eq!(serving.pd_for(x(2)), None, "a refused one gets no PD");
        let other = SocketAddrV4::new([10, 0, 0, 77].into(), 5000);
        serving
            .admit(&hello(42, 4096, true), len, Some(("mpa", other)))
            .expect("another client's run");
        // A second connection of the same size is admitted, then its
        // startup fails (no QP): the run stops waiting for it.
        serving
            .admit(&hello(1, 4096, false), len, Some(("mpa", x(9000))))
            .unwrap();
        serving.startup_failed(x(9000));
        assert_eq!(serving.pd_for(x(9000)), None, "forgotten");
        // Once the open one closes, the larger size takes a new lease.
        serving.closed(1, Op::Write);
        serving
            .admit(&hello(1, 1 << 16, true), len, Some(("mpa", x(9001))))
            .expect("the larger lease");
    }

    /// A new run whose only connection fails its startup ends at once: its
    /// lease, STag and slot go back (they waited for the idle limit, and a
    /// client failing its startup over and over kept nearly all the memory
    /// from others: found by a review).
    #[test]
    fn a_run_whose_only_startup_failed_gives_its_lease_back_at_once() {
        let (serving, registry, region) = exposing_serving_idle(StdDuration::from_secs(3600));
        let len = region.len();
        let (stags, pds) = (registry.stags_in_use(), registry.pds_in_use());
        let greedy = SocketAddrV4::new([10, 0, 0, 66].into(), 1);
        let most = (len / 2 - 4096) as u32;
        for _ in 0..3 {
            serving
                .admit(&hello(7, most, false), len, Some(("mpa", greedy)))
                .unwrap();
            serving.startup_failed(greedy);
            assert_eq!(serving.stats().runs, 0, "the run ended with its startup");
            assert!(serving.scrub(&region) > u64::from(most));
            assert_eq!(serving.stats().leased, 0);
            assert_eq!(
                (registry.stags_in_use(), registry.pds_in_use()),
                (stags, pds)
            );
        }
        let other = SocketAddrV4::new([10, 0, 0, 9].into(), 1);
        serving
            .admit(&hello(8, most, true), len, Some(("mpa", other)))
            .expect("the memory is another client's to have");
        // A run that had a QP keeps waiting for its next size as before.
        serving.pd_for(other).unwrap();
        serving.handed_local(8, Op::Write, Some(other)).unwrap();
        let second = SocketAddrV4::new([10, 0, 0, 9].into(), 2);
        serving
            .admit(&hello(8, most, true), len, Some(("mpa", second)))
            .unwrap();
        serving.startup_failed(second);
        assert_eq!(serving.stats().runs, 1);
    }

    /// A DDP over SCTP stream whose Initiate the control plane accepted but
    /// that never came up on its core (its association ended before the
    /// Accept reached the core) is taken back as an MPA startup that failed
    /// is: a run it was the only stream of ends at once, its lease, STag
    /// and PD back; a run whose other streams were served may take a larger
    /// lease (it was refused one, the stream counted as on its way, until
    /// the idle reaper ended the run), or, at its last size, ends whichever
    /// comes first, its last close or the report.
    #[test]
    fn a_run_whose_only_stream_never_came_up_gives_its_lease_back_at_once() {
        let (serving, registry, region) = exposing_serving_idle(StdDuration::from_secs(3600));
        let len = region.len();
        let (stags, pds) = (registry.stags_in_use(), registry.pds_in_use());
        let client = Some(("sctp", SocketAddrV4::new([10, 0, 0, 66].into(), 9899)));
        let most = (len / 2 - 4096) as u32;
        for _ in 0..3 {
            serving.admit(&hello(7, most, false), len, client).unwrap();
            serving.stream_never_up(7, Op::Write);
            assert_eq!(serving.stats().runs, 0, "the run ended with its stream");
            assert!(serving.scrub(&region) > u64::from(most));
            assert_eq!(serving.stats().leased, 0);
            assert_eq!(
                (registry.stags_in_use(), registry.pds_in_use()),
                (stags, pds)
            );
        }
        // Run 8's first stream came up and closed; its second never came up.
        serving.admit(&hello(8, 4096, false), len, client).unwrap();
        serving.admit(&hello(8, 4096, false), len, client).unwrap();
        serving.handed_local(8, Op::Write, None).unwrap();
        serving.closed(8, Op::Write);
        let early = serving.admit(&hello(8, 1 << 16, true), len, client);
        assert!(early.err().unwrap().contains("larger lease"));
        serving.stream_never_up(8, Op::Write);
        assert_eq!(serving.stats().runs, 1, "between sizes: its client goes on");
        serving
            .admit(&hello(8, 1 << 16, true), len, client)
            .expect("nothing of the smaller size is on its way");
        // At the last size, the report before the last close or after it.
        for report_first in [true, false] {
            serving.admit(&hello(9, 4096, true), len, client).unwrap();
            serving.admit(&hello(9, 4096, true), len, client).unwrap();
            serving.handed_local(9, Op::Write, None).unwrap();
            if report_first {
                serving.stream_never_up(9, Op::Write);
                assert_eq!(serving.stats().runs, 2, "its served stream is open");
                serving.closed(9, Op::Write);
            } else {
                serving.closed(9, Op::Write);
                assert_eq!(serving.stats().runs, 2, "its other stream is on its way");
                serving.stream_never_up(9, Op::Write);
            }
            assert_eq!(serving.stats().runs, 1, "run 9 done");
        }
        // An MPA run's connections are taken back by their address only.
        let mpa = SocketAddrV4::new([10, 0, 0, 9].into(), 1);
        serving
            .admit(&hello(10, 4096, true), len, Some(("mpa", mpa)))
            .unwrap();
        serving.stream_never_up(10, Op::Write);
        assert_eq!(serving.stats().runs, 2, "no stream of run 10 was accepted");
    }

    /// One-run admission: a run whose client vanished (its only connection
    /// failed its startup, or it was killed between sizes) no longer shuts
    /// every later client out once it has been idle [`ONE_RUN_ABANDONED`]
    /// with nothing open (it did for good, with a refusal that blamed a run
    /// no one was serving: found by a review); a run with a connection open
    /// keeps the server.
    #[test]
    fn an_abandoned_run_gives_a_one_run_server_up() {
        let serving = Serving::new(1);
        let len = 1 << 20;
        serving.admit(&hello(7, 4096, false), len, None).unwrap();
        serving.publish(0, 0);
        let busy = serving.admit(&hello(8, 4096, true), len, None);
        assert!(busy.err().unwrap().contains("another client's run"));
        // Run 7's one connection is open (however idle, and whatever the
        // cores last published): it keeps the server.
        serving.one_run_opened();
        std::thread::sleep(ONE_RUN_ABANDONED);
        serving.publish(0, 1);
        let busy = serving.admit(&hello(8, 4096, true), len, None);
        assert!(busy.is_err(), "a connection of run 7 is open");
        serving.one_run_closed();
        // Its last connection just closed: a client between two sizes.
        let busy = serving.admit(&hello(8, 4096, true), len, None);
        assert!(busy.is_err(), "run 7 quiet for a moment only");
        std::thread::sleep(ONE_RUN_ABANDONED);
        serving
            .admit(&hello(8, 4096, true), len, None)
            .expect("run 7 abandoned");
        // Run 8's own sizes count, not run 7's.
        assert!(serving.admit(&hello(7, 4096, true), len, None).is_err());
        serving.publish(0, 0);
        assert_eq!(
            serving.stats().runs,
            0,
            "run 8 done once its last size closed"
        );
    }

    #[test]
    fn every_run_has_a_pd_of_its_own_that_its_qps_join() {
        use rnic_engine::verbs::{QpInit, Rnic, RnicConfig};
        let (serving, registry, region) = exposing_serving();
        let pd = serving.exposure.as_ref().unwrap().pd;
        let len = region.len();
        let baseline = registry.pds_in_use();
        let peer = |port| SocketAddrV4::new([10, 0, 0, 9].into(), port);
        // Two connections of run 1, one of an SCTP run 2.
        let a = serving
            .admit(&hello(1, 4096, true), len, Some(("mpa", peer(1))))
            .unwrap();
        serving
            .admit(&hello(1, 4096, true), len, Some(("mpa", peer(2))))
            .unwrap();
        let b = serving
            .admit(&hello(2, 4096, true), len, Some(("sctp", peer(3))))
            .unwrap();
        assert_eq!((serving.pds(), registry.pds_in_use()), (2, baseline + 2));
        let own = serving.pd_for(peer(1)).expect("run 1's PD");
        assert_ne!(own, pd);
        assert_eq!(serving.pd_for(peer(1)), None, "asked once");
        assert_eq!(
            serving.pd_for(peer(2)),
            Some(own),
            "the run's other connection"
        );
        assert_eq!(
            serving.pd_for(peer(3)),
            None,
            "an SCTP run's stream joins by its session, not its address"
        );
        assert_eq!(serving.pd_for(peer(4)), None, "nobody's");
        // A stream of the SCTP run joins a PD of its own run's, asked by
        // its run and operation; an MPA run's is not for a stream.
        let sctp = serving
            .pd_of(2, Op::Write, *peer(3).ip())
            .expect("run 2's PD");
        assert!(sctp != own && sctp != pd);
        assert_eq!(
            serving.pd_of(1, Op::Write, *peer(1).ip()),
            None,
            "an MPA run"
        );
        assert_eq!(
            serving.pd_of(2, Op::Read, *peer(3).ip()),
            None,
            "another run"
        );
        let stranger = [10, 0, 0, 66].into();
        assert_eq!(serving.pd_of(2, Op::Write, stranger), None, "another host");
        // The run's STag is in its PD: the PD cannot go while it lives.
        assert!(registry.dealloc_pd(own).is_err());
        // Its QPs' own work requests use the run's STag, from its lease; a
        // QP that did not join the run's PD is not handed the run.
        assert_eq!(serving.handed_local(1, Op::Write, Some(peer(9))), None);
        assert_eq!(
            serving.handed_local(1, Op::Write, Some(peer(1))),
            Some((a.offset, a.stag))
        );
        assert_eq!(
            serving.handed_local(2, Op::Write, None),
            Some((b.offset, b.stag)),
            "a stream's own work uses its run's STag"
        );
        // The run is its client's: not another host's, not over SCTP.
        let stranger = SocketAddrV4::new([10, 0, 0, 66].into(), 1);
        let e = serving.admit(&hello(1, 4096, true), len, Some(("mpa", stranger)));
        assert!(e.err().unwrap().contains("another client's"));
        let e = serving.admit(&hello(1, 4096, true), len, Some(("sctp", peer(7))));
        assert!(e.err().unwrap().contains("began over MPA"));
        // Nor an SCTP run an MPA connection.
        let e = serving.admit(&hello(2, 4096, true), len, Some(("mpa", peer(8))));
        assert!(e.err().unwrap().contains("began over DDP over SCTP"));
        // A QP of the run, in its PD, outlives the run: the PD waits for
        // it, and goes at the next scrub after it.
        let mut rnic = Rnic::with_registry(RnicConfig::default(), registry.clone());
        let cq = rnic.create_cq(8).unwrap();
        let qp = rnic
            .create_qp(QpInit {
                pd: own,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                sq_size: 4,
                rq_size: 4,
            })
            .unwrap();
        serving.handed_local(1, Op::Write, Some(peer(2))).unwrap();
        serving.closed(1, Op::Write);
        serving.closed(1, Op::Write);
        assert!(
            registry.dereg_mr(a.stag.unwrap()).is_err(),
            "the run's STag went"
        );
        assert_eq!((serving.pds(), registry.pds_in_use()), (2, baseline + 2));
        serving.scrub(&region);
        assert_eq!(serving.pds(), 2, "its QP still holds it");
        rnic.destroy_qp(qp).unwrap();
        serving.scrub(&region);
        assert_eq!((serving.pds(), registry.pds_in_use()), (1, baseline + 1));
        // A connection accepted for a run that ended before it reached a
        // core joins no PD of a run.
        serving.closed(2, Op::Write);
        assert_eq!(
            serving.pd_of(2, Op::Write, *peer(3).ip()),
            None,
            "run 2 ended"
        );
        assert_eq!((serving.pds(), registry.pds_in_use()), (0, baseline));
        serving
            .admit(&hello(5, 4096, true), len, Some(("mpa", peer(5))))
            .unwrap();
        assert_eq!(serving.pds(), 1);
        assert_eq!(serving.reap(), 1, "run 5, with nothing open");
        assert_eq!(serving.pd_for(peer(5)), None);
        assert_eq!((serving.pds(), registry.pds_in_use()), (0, baseline));
    }

    /// A run that finds no room is told what holds the memory: with
    /// nothing leased, a size past the service's share (the rest reserved
    /// for other services) is told no wait helps, and how to get room;
    /// one behind other clients' runs is told to try again (both were
    /// "leased to other clients; try again later", the reserve counted as
    /// clients': found by a review).
    #[test]
    fn a_run_without_room_is_told_what_holds_the_memory() {
        let serving = Serving::with(
            1,
            Admission::Many {
                runs_max: 4,
                runs_per_host: 4,
                idle: StdDuration::from_secs(60),
            },
            1 << 20,
        );
        serving.reserve(512 << 10).unwrap();
        let len = 1 << 20;
        let too_big = serving
            .admit(&hello(8, 300 << 10, true), len, None)
            .err()
            .unwrap();
        assert!(
            too_big.contains("the service's memory is 524288 octets"),
            "{too_big}"
        );
        assert!(too_big.contains("[rnic] memory_mib"), "{too_big}");
        assert!(!too_big.contains("try again"), "{too_big}");
        serving
            .admit(&hello(1, 200 << 10, true), len, None)
            .unwrap();
        let busy = serving
            .admit(&hello(2, 200 << 10, true), len, None)
            .err()
            .unwrap();
        assert!(busy.contains("leased to other clients' runs"), "{busy}");
        assert!(busy.contains("try again later"), "{busy}");
        assert_eq!(serving.stats().runs, 1);
    }

    /// An RNIC end whose CQ yields what the test queued.
    struct QueuedEnd {
        rnic: Rnic,
        region: Arc<Region>,
        mr: Mr,
        queued: Vec<Wc>,
    }

    impl RnicEnd for QueuedEnd {
        fn rnic(&mut self) -> &mut Rnic {
            &mut self.rnic
        }
        fn sge(&self, offset: u64, len: u32) -> Sge {
            Sge {
                stag: self.mr.stag,
                to: self.mr.base_to + offset,
                len,
            }
        }
        fn region(&self) -> &Arc<Region> {
            &self.region
        }
        fn poll_cq(&mut self, out: &mut Vec<Wc>) {
            out.append(&mut self.queued);
        }
        fn is_live(&self, _qp: QpHandle) -> bool {
            true
        }
    }

    /// One client's failed work request fails its QP only: the other
    /// clients' completions polled in the same batch are all served (they
    /// were dropped with the rest of the batch, their receives never
    /// posted again: found by a review).
    #[test]
    fn one_qps_failure_costs_the_others_none_of_their_completions() {
        let mut rnic = Rnic::new(rnic_engine::verbs::RnicConfig::default());
        let pd = rnic.alloc_pd().unwrap();
        let region = Region::new(1 << 20);
        let mr = rnic
            .reg_region(pd, region.clone(), Access::LOCAL_WRITE)
            .unwrap();
        let cq = rnic.create_cq(4096).unwrap();
        let init = rnic_engine::verbs::QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: 64,
            rq_size: 64,
        };
        let (bad, good, later) = (
            rnic.create_qp(init).unwrap(),
            rnic.create_qp(init).unwrap(),
            rnic.create_qp(init).unwrap(),
        );
        let mut ep = QueuedEnd {
            rnic,
            region,
            mr,
            queued: Vec::new(),
        };
        let mut r = Responder::default();
        let h = ClientHello {
            op: Op::Send,
            depth: 8,
            ..hello(1, 64, false)
        };
        let client = RemoteAddr { stag: 1, to: 0 };
        for qp in [bad, good, later] {
            r.add(&mut ep, Served::new(qp, &h, client));
        }
        let wc = |qp, status| Wc {
            wr_id: 0,
            status,
            opcode: WcOpcode::Recv,
            qp,
            byte_len: 64,
            imm: None,
            invalidated: None,
            solicited: false,
        };
        ep.queued = vec![
            wc(good, WcStatus::Success),
            wc(bad, WcStatus::LocalLength),
            wc(bad, WcStatus::Success),
            wc(later, WcStatus::Success),
            wc(good, WcStatus::Success),
        ];
        let failed = r.step(&mut ep).unwrap_err();
        assert_eq!(failed.0.len(), 1, "{failed:?}");
        assert_eq!(failed.0[0].0, bad);
        assert!(
            failed.reasons().contains("LocalLength"),
            "{}",
            failed.reasons()
        );
        let consumed = |r: &Responder, qp| r.served[r.index[&qp]].consumed;
        assert_eq!((consumed(&r, good), consumed(&r, later)), (2, 1));
        assert_eq!(consumed(&r, bad), 0, "nothing served after its failure");
    }
}
