//! One perftest session as a state machine: the client's or the server's
//! side of the exchanges and runs that `bench perftest`'s module docs
//! describe, for every test, `-a`, `-D`, `-q` and `-b`. It never blocks: a
//! driver hands it its connections' completions and Terminates, and calls
//! [`Machine::poll`] every turn. `bench perftest` drives one (client, or a
//! server of one client); [`super::service::PerftestService`] drives as
//! many as a core serves at once.
//!
//! The script, after the prologue (versions, cycle buffer, cache line, MTU,
//! a zero handshake, the `-q` data connections, a zero handshake), read
//! from perftest 4.5-0.17 ("6.06"; `N` = `-q`, `HS` = one handshake, `REP`
//! = a report exchange):
//! - write_bw, read_bw: `N` HS (each QP's buffer), `N` HS, HS; then without
//!   `-b` the client runs every size with nothing on the control connection
//!   (the server answers no Write or Read Request with work of its own),
//!   HS, REP (the client's last size), HS. With `-b` both sides run: per
//!   size HS, run, REP, then HS; with `-a` per size HS, run, HS, REP, and a
//!   last HS.
//! - send_bw: `N` HS (each QP's credit word), HS, `N` HS; per size: the
//!   receives posted, HS, run, REP (only `-b` without `-D`), HS; with `-a`
//!   a last HS.
//! - write_lat: four HS; every size's ping-pong back to back; nothing after.
//! - read_lat: four HS; the client's Reads, every size; HS.
//! - send_lat: three HS; per size receives, HS, ping-pong; HS.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::mem::Access;
use rnic_engine::mem::Pd;
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{Mr, QpHandle, RecvWr, Registry, RemoteAddr, SendOp, SendWr, Sge};

use super::{
    bw_report, bw_report_rx, deltas, slot_offset, version_number, BwReport, Dest, Params, Test,
    Verb, CACHE_LINE, CYCLE_BUFFER, CYCLE_MAX, DEPTH_MAX, DEST_LEN, STALL_LIMIT, VERSION,
    VERSION_LEN, VERSION_MIN,
};
use crate::endpoint::Endpoint;
use crate::rping::term_text;
use dataplane::CoreTransport;

/// The most data connections (`-q`) of one session.
pub const QPS_MAX: u16 = 32;
/// perftest's sizes under `-a`: 2 to 2^23 octets.
pub const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;

/// Control receives posted at once.
const CTRL_RECVS: u64 = 4;
/// A control message slot.
const CTRL_SLOT: u64 = 64;
/// Where our control Sends come from.
const SEND_AT: u64 = CTRL_RECVS * CTRL_SLOT;
/// Our receive counts (per QP, 4 octets each): the credit Writes' sources.
const CREDIT_OUT_AT: u64 = SEND_AT + CTRL_SLOT;
/// The credit words the peer writes (per QP, 4 octets each).
const CREDIT_IN_AT: u64 = CREDIT_OUT_AT + 4 * QPS_MAX as u64;
/// How long a server waits for a client's data connections.
const DATA_WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);
/// Once a connection of the peer is gone, how long the session waits for
/// its data connections to end while it reports nothing: a peer that sends
/// a Terminate on a data connection and then closes its control connection
/// may have the close seen first (two sockets, two streams), and the
/// Terminate, read as its data connection ends, is the reason to report.
const GONE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// Octets a session's buffers are filled by at a time.
const FILL_CHUNK: usize = 4096;
/// Octets of a session's buffers filled a poll at most.
const FILL_PER_POLL: u64 = 1 << 20;
/// The data buffers: each QP's local one, then each QP's target.
const DATA_AT: u64 = 4096;

// wr_id kinds (the low octet; the QP's index or the control slot above it).
const WR_CTRL_SEND: u64 = 1;
const WR_CTRL_RECV: u64 = 2;
const WR_DATA: u64 = 3;
const WR_DATA_RECV: u64 = 4;
const WR_CREDIT: u64 = 5;

/// One session's registered memory: its offset in the region and the
/// length of each data buffer.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Where it begins in the registered memory.
    pub origin: u64,
    /// Each data buffer's length (perftest's `BUFF_SIZE` for the largest
    /// cycle buffer we accept).
    pub buff: u64,
    /// Data connections.
    pub qps: u16,
}

impl Layout {
    /// The layout of a session of `p` at `origin`.
    pub fn new(p: &Params, origin: u64) -> Layout {
        Layout {
            origin,
            buff: p.size.max(u64::from(CYCLE_MAX)).next_multiple_of(4096),
            qps: p.qps,
        }
    }
    /// Octets a session of `p` takes.
    pub fn memory(p: &Params) -> usize {
        let l = Layout::new(p, 0);
        (DATA_AT + 2 * u64::from(l.qps) * l.buff) as usize
    }
    /// QP `i`'s source of Writes and Sends, where its Reads land.
    pub fn local(&self, i: usize) -> u64 {
        self.origin + DATA_AT + i as u64 * self.buff
    }
    /// QP `i`'s buffer the peer writes or reads (its `vaddr`), where its
    /// receives land.
    pub fn target(&self, i: usize) -> u64 {
        self.origin + DATA_AT + (u64::from(self.qps) + i as u64) * self.buff
    }
    /// The data buffers, from the first local one to the last target.
    fn data(&self) -> (u64, u64) {
        (self.local(0), 2 * u64::from(self.qps) * self.buff)
    }
}

/// What a session's peer may address: its own slot, under an STag of its
/// own with a new key (RFC 5042 §5; 8 bits, drawn at random), with only
/// the access its test needs. A peer that writes past its buffers (a
/// client's `-s` larger than the server's) draws a Terminate on its own
/// connection (RFC 5041's base or bounds violation) and never reaches the
/// memory beside its slot; one that tries an STag it saw in an earlier
/// session meets an invalid STag, unless the index came back with the same
/// key (1 in 256). It is deregistered when the session fails, or when it
/// is dropped after completing (its connections gone), so nothing it told
/// its peer stays usable.
#[derive(Debug)]
struct Exposed {
    registry: Arc<Registry>,
    mr: Mr,
}

impl Exposed {
    /// Registers the session's slot of `ep`'s memory laid out as `l` for a
    /// test of `p`.
    fn register<T: CoreTransport>(
        ep: &mut Endpoint<T>,
        p: &Params,
        l: &Layout,
        pd: Pd,
    ) -> Result<Exposed, String> {
        let access = match p.test {
            Test::WriteBw | Test::WriteLat | Test::SendBw => Access::REMOTE_WRITE,
            Test::ReadBw | Test::ReadLat => Access::REMOTE_READ,
            Test::SendLat => Access::LOCAL_READ,
        };
        let mr = register_slot(ep, p, l, pd, access)
            .map_err(|e| format!("registering the session's memory: {e}"))?;
        Ok(Exposed {
            registry: ep.rnic().registry().clone(),
            mr,
        })
    }
}

/// The session's slot of `ep`'s memory laid out as `l` for a test of `p`,
/// registered in `pd` with `access`, at the addresses the core's own
/// registration gives it.
fn register_slot<T: CoreTransport>(
    ep: &mut Endpoint<T>,
    p: &Params,
    l: &Layout,
    pd: Pd,
    access: Access,
) -> Result<Mr, String> {
    let base_to = ep.mr.base_to + l.origin;
    let region = ep.region.clone();
    ep.rnic()
        .reg_mr(
            pd,
            region,
            l.origin as usize,
            Layout::memory(p),
            base_to,
            access,
        )
        .map_err(|e| format!("{e:?}"))
}

impl Drop for Exposed {
    fn drop(&mut self) {
        // It was registered here and is deregistered once.
        let _ = self.registry.dereg_mr(self.mr.stag);
    }
}

/// A session's own protection domain (a server's session in the
/// appliance, where several clients are served at once) and its slot
/// registered there for the session's own work requests: its QPs are in
/// that PD, so its local keys must be too, and its [`Exposed`] STag is
/// registered there, where no other session's QP can use it (RFC 5040's
/// check that an STag's PD is the stream's: "STag not associated with the
/// stream"). The PD itself is freed by whoever allocated it, once the
/// session's QPs are gone.
#[derive(Debug)]
struct Own {
    registry: Arc<Registry>,
    pd: Pd,
    mr: Mr,
}

impl Own {
    fn register<T: CoreTransport>(
        ep: &mut Endpoint<T>,
        p: &Params,
        l: &Layout,
        pd: Pd,
    ) -> Result<Own, String> {
        let mr = register_slot(ep, p, l, pd, Access::LOCAL_WRITE)
            .map_err(|e| format!("registering the session's memory in its PD: {e}"))?;
        Ok(Own {
            registry: ep.rnic().registry().clone(),
            pd,
            mr,
        })
    }
}

impl Drop for Own {
    fn drop(&mut self) {
        let _ = self.registry.dereg_mr(self.mr.stag);
    }
}

/// A control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Msg {
    Version,
    Cycle,
    Line,
    Mtu,
    /// A handshake of zeros (before and after the data connections).
    Zero,
    /// A handshake of QP `i`'s `pingpong_dest` (the peer's is kept from the
    /// first round).
    Dest(u16),
    /// A handshake of QP 0's.
    Dest0,
    /// A report's field.
    Report(u8),
}

/// A step of the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Xchg(Msg),
    /// The data connections.
    Data,
    /// Where each message size begins.
    SizeLoop,
    /// This size's receives, on every QP.
    PostRecvs,
    /// This size's data phase.
    Run,
    /// On to the next size from [`Step::SizeLoop`], if any is left.
    NextSize,
}

/// The script both sides follow (see the module docs).
fn script(p: &Params) -> Vec<Step> {
    use Msg::*;
    use Step::*;
    let n = p.qps;
    let mut s = vec![
        Xchg(Version),
        Xchg(Cycle),
        Xchg(Line),
        Xchg(Mtu),
        Xchg(Zero),
        Data,
        Xchg(Zero),
    ];
    let report = [0u8, 1, 2, 3, 4].map(|k| Xchg(Report(k)));
    let dests = |s: &mut Vec<Step>| s.extend((0..n).map(|i| Xchg(Dest(i))));
    match p.test {
        Test::WriteBw | Test::ReadBw => {
            dests(&mut s);
            dests(&mut s);
            s.push(Xchg(Dest0));
            if !p.duplex {
                if p.client {
                    s.extend([SizeLoop, Run, NextSize]);
                }
                s.push(Xchg(Dest0));
                s.extend(report);
            } else if p.all_sizes {
                s.extend([SizeLoop, Xchg(Dest0), Run, Xchg(Dest0)]);
                s.extend(report);
                s.push(NextSize);
            } else {
                s.extend([Xchg(Dest0), Run]);
                s.extend(report);
            }
            s.push(Xchg(Dest0));
        }
        Test::SendBw => {
            dests(&mut s);
            s.push(Xchg(Dest0));
            dests(&mut s);
            s.push(SizeLoop);
            if !p.client || p.duplex {
                s.push(PostRecvs);
            }
            s.extend([Xchg(Dest0), Run]);
            if p.duplex && p.duration.is_none() {
                s.extend(report);
            }
            s.extend([Xchg(Dest0), NextSize]);
            if p.all_sizes {
                s.push(Xchg(Dest0));
            }
        }
        Test::WriteLat | Test::ReadLat => {
            s.extend([Xchg(Dest(0)), Xchg(Dest0), Xchg(Dest0), Xchg(Dest0)]);
            if p.test == Test::WriteLat || p.client {
                s.extend([SizeLoop, Run, NextSize]);
            }
            if p.test == Test::ReadLat {
                s.push(Xchg(Dest0));
            }
        }
        Test::SendLat => {
            s.extend([Xchg(Dest(0)), Xchg(Dest0), Xchg(Dest0)]);
            s.extend([SizeLoop, PostRecvs, Xchg(Dest0), Run, NextSize, Xchg(Dest0)]);
        }
    }
    s
}

/// One size's results.
#[derive(Debug, Clone, Default)]
pub struct SizeOutcome {
    /// The message size.
    pub size: u64,
    /// Our bandwidth report (the side that measured).
    pub bw: Option<BwReport>,
    /// The peer's report (when it sent one with its numbers).
    pub peer_bw: Option<BwReport>,
    /// Latency samples, microseconds.
    pub lat: Vec<f64>,
}

/// What [`Machine::poll`] says.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    /// Going on.
    Running,
    /// Client: open the data connections now ([`Machine::add_data`] each).
    Connect,
    /// Every exchange and run completed.
    Done,
    /// It failed; the reason.
    Failed(String),
}

/// One control exchange in progress.
#[derive(Debug, Default)]
struct Exchange {
    sent: bool,
    send_done: bool,
    got: Option<Vec<u8>>,
}

/// A size's data phase.
#[derive(Debug)]
struct Run {
    size: u64,
    /// Latency iterations stamped at most: every one of a counted run (`-n`
    /// bounds them), [`LAT_SAMPLES_MAX`] of a `-D` run.
    samples_max: usize,
    begun: Instant,
    /// Duration mode: the sender's end, and the receiver's (from its
    /// first message).
    end: Option<Instant>,
    rx_end: Option<Instant>,
    // Sending (Writes, Reads, Sends): per QP posted and completed.
    scnt: Vec<u64>,
    ccnt: Vec<u64>,
    posted: Vec<Instant>,
    completed: Vec<Instant>,
    // Receiving (Sends): per QP received and receives posted.
    rcnt: Vec<u64>,
    rposted: Vec<u64>,
    arrived: Vec<Instant>,
    /// Received, not yet answered (send_lat).
    unanswered: u64,
    /// The latency ping-pong's phase: 0 wait for the peer, 1 post, 2 wait
    /// for our completion.
    phase: u8,
    /// Messages counted in duration mode.
    count: u64,
}

/// One perftest session (see the module docs).
pub struct Machine {
    p: Params,
    l: Layout,
    script: Vec<Step>,
    at: usize,
    /// Where [`Step::Data`] is in the script.
    data_at: usize,
    /// Where [`Step::SizeLoop`] is, if the script has one.
    loop_at: Option<usize>,
    /// Polls that moved nothing, since the last look at the connections
    /// and the clock.
    idle_polls: u32,
    /// A completion came since that look.
    progressed: bool,
    /// Its buffers were filled.
    prepared: bool,
    /// Octets of the data buffers filled so far (`prepare`).
    filled: u64,
    /// Its slot as its peer addresses it, from its data connections on
    /// until it ends.
    exposed: Option<Exposed>,
    sizes: Vec<u64>,
    size_index: usize,
    ctrl: Option<QpHandle>,
    data: Vec<QpHandle>,
    /// Its connections that ended (their handles may serve others now).
    gone: Vec<QpHandle>,
    rem: Vec<Dest>,
    /// Every peer buffer taken as this one instead of what the peer
    /// offered ([`Machine::aim_at`]).
    aimed: Option<(u32, u64)>,
    /// What the peer offered for QP 0, as it offered it.
    offered: Option<(u32, u64)>,
    cycle: u64,
    line: u64,
    ib_mtu: u8,
    psn: u32,
    ctrl_wcs: VecDeque<Wc>,
    data_wcs: VecDeque<Wc>,
    x: Exchange,
    theirs: [[u8; 8]; 5],
    run: Option<Run>,
    /// Credit Writes not yet completed.
    credits_out: u64,
    results: Vec<SizeOutcome>,
    /// The last progress (a message, a completion, octets from the peer).
    since: Instant,
    heard: u64,
    /// The client was told to connect.
    connecting: bool,
    /// Server: it may answer the handshake after which the client opens
    /// its data connections (see [`Machine::wants_window`]).
    window: bool,
    failed: Option<String>,
    /// A Terminate on one of its connections, not yet reported.
    terminate: Option<QpEvent>,
    /// When a connection of the peer was first seen gone ([`GONE_GRACE`]).
    gone_seen: Option<Instant>,
    done: bool,
    /// Its own PD and its slot registered there ([`Machine::set_pd`]);
    /// declared after `exposed`, so that the exposed STag goes first.
    own: Option<Own>,
}

/// The timestamps a run of `p` keeps: how many per kind, whether of its
/// sends (posted, and completed in bandwidth tests) and whether of its
/// arrivals (a one-way send_bw server's), in iteration mode only.
fn timestamps(p: &Params) -> (usize, bool, bool) {
    let n = if p.duration.is_some() {
        0
    } else {
        (p.iters as usize)
            .saturating_mul(usize::from(p.qps))
            .min(1 << 24)
    };
    let bw = p.test.is_bw();
    let sends = p.client || p.duplex || !bw;
    (n, sends, bw && !sends)
}

/// Heap octets a session of `p` takes for its timestamps at most: what a
/// service must count per session beside its registered memory (16 octets
/// an `Instant`; up to 16 Mi of each kind: 512 MiB for a duplex
/// bandwidth test of 10 million iterations). A latency session keeps the
/// live run's stamps (up to [`LAT_SAMPLES_MAX`] for `-D`), and every
/// size's latencies (8 octets each) twice: its results, and their copy
/// handed out when it finishes (found by a review: `-D` counted nothing,
/// though it keeps up to 96 MiB, and `-a` one size's of 23).
pub fn timestamps_memory(p: &Params) -> usize {
    if !p.test.is_bw() {
        let stamps = if p.duration.is_some() {
            LAT_SAMPLES_MAX
        } else {
            (p.iters as usize).saturating_mul(usize::from(p.qps))
        };
        let sizes = if p.all_sizes { ALL_SIZES.count() } else { 1 };
        let per_stamp = std::mem::size_of::<Instant>() + 2 * sizes * std::mem::size_of::<f64>();
        return stamps.saturating_mul(per_stamp);
    }
    let (n, sends, arrives) = timestamps(p);
    let kinds = usize::from(sends) + usize::from(sends && p.test.is_bw()) + usize::from(arrives);
    n * kinds * std::mem::size_of::<Instant>()
}

impl Machine {
    /// A session of `p` (its `client` says which side) in the registered
    /// memory at `origin` ([`Layout::memory`] octets); `ib_mtu` is the
    /// IB MTU enum we tell the peer.
    pub fn new(p: Params, origin: u64, ib_mtu: u8, seed: u64) -> Machine {
        let sizes = if p.all_sizes {
            ALL_SIZES.map(|e| 1u64 << e).collect()
        } else {
            vec![p.size]
        };
        let script = script(&p);
        Machine {
            l: Layout::new(&p, origin),
            data_at: script
                .iter()
                .position(|s| *s == Step::Data)
                .expect("every script has the data connections"),
            loop_at: script.iter().position(|s| *s == Step::SizeLoop),
            idle_polls: 0,
            progressed: false,
            gone_seen: None,
            prepared: false,
            filled: 0,
            exposed: None,
            script,
            p,
            at: 0,
            sizes,
            size_index: 0,
            ctrl: None,
            data: Vec::new(),
            gone: Vec::new(),
            rem: vec![Dest::default(); usize::from(p.qps)],
            aimed: None,
            offered: None,
            cycle: u64::from(CYCLE_BUFFER),
            line: u64::from(CACHE_LINE),
            ib_mtu,
            psn: (seed as u32) & 0xff_ffff,
            ctrl_wcs: VecDeque::new(),
            data_wcs: VecDeque::new(),
            x: Exchange::default(),
            theirs: [[0; 8]; 5],
            run: None,
            credits_out: 0,
            results: Vec::new(),
            since: Instant::now(),
            heard: 0,
            connecting: false,
            window: p.client,
            failed: None,
            terminate: None,
            done: false,
            own: None,
        }
    }

    /// Serves the session in `pd`, its own (its QPs are made there, by the
    /// core's `PdFor`): its slot is registered there for its own work
    /// requests, and what it exposes to its peer is registered there too.
    /// Before [`Machine::set_ctrl`].
    pub fn set_pd<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>, pd: Pd) -> Result<(), String> {
        self.own = Some(Own::register(ep, &self.p, &self.l, pd)?);
        Ok(())
    }

    /// Its own PD, if it has one ([`Machine::set_pd`]).
    pub fn pd(&self) -> Option<Pd> {
        self.own.as_ref().map(|o| o.pd)
    }

    /// An SGE of its slot at `at` (an offset in `ep`'s memory) under its
    /// own local key, or the core's.
    fn sge<T: CoreTransport>(&self, ep: &Endpoint<T>, at: u64, len: u32) -> Sge {
        match &self.own {
            Some(o) => Sge {
                stag: o.mr.stag,
                to: o.mr.base_to + (at - self.l.origin),
                len,
            },
            None => ep.sge(at, len),
        }
    }

    /// Zeroes its data buffers (write_lat polls their last octets; a
    /// session before may have left anything there) or fills them with a
    /// pattern (something other than zeros to move).
    ///
    /// A session does it when its data connections are due (after the
    /// client proved it speaks perftest, so a connection that says nothing
    /// costs no fill of a slot), in chunks of [`FILL_CHUNK`].
    ///
    /// At most [`FILL_PER_POLL`] octets a call (a poll is a core's turn):
    /// returns whether the buffers are all filled. A session's buffers
    /// (256 MiB for `-a -q 16`) took one turn of about 30 ms, which every
    /// other connection on the core waited out, as often as a client
    /// cared to open a session (found by a review).
    fn prepare<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) -> Result<bool, String> {
        let (at, len) = self.l.data();
        let mut chunk = [0u8; FILL_CHUNK];
        if self.p.test != Test::WriteLat {
            // 251 is prime: the pattern does not repeat within a chunk.
            for (i, o) in chunk.iter_mut().enumerate() {
                *o = (i % 251) as u8;
            }
        }
        let stop = len.min(self.filled + FILL_PER_POLL);
        while self.filled < stop {
            let n = (stop - self.filled).min(FILL_CHUNK as u64) as usize;
            ep.region
                .write((at + self.filled) as usize, &chunk[..n])
                .map_err(|e| format!("the session's buffers: {e:?}"))?;
            self.filled += n as u64;
        }
        Ok(self.filled >= len)
    }

    /// Its control connection: the receives are posted at once (before
    /// the peer's first message can be read).
    pub fn set_ctrl<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        qp: QpHandle,
    ) -> Result<(), String> {
        self.ctrl = Some(qp);
        // The slot's control area held the last session's messages (its
        // QP numbers, STag, addresses, results); a Read test exposes the
        // whole slot to its client: nothing of another session's is left
        // there to read.
        const ZEROS: [u8; DATA_AT as usize] = [0; DATA_AT as usize];
        ep.region
            .write(self.l.origin as usize, &ZEROS)
            .map_err(|e| format!("clearing the session's control area: {e:?}"))?;
        for slot in 0..CTRL_RECVS {
            self.post_ctrl_recv(ep, slot)?;
        }
        self.since = Instant::now();
        Ok(())
    }

    /// Data connections it still waits for (server; 0 before it asked for
    /// them and once all came).
    pub fn wants_data(&self) -> u16 {
        // From our answer to the handshake before them on (it goes out on
        // the next turn; the client connects once it has it).
        let data_at = self.data_at();
        let asking = self.at >= data_at || (self.at + 1 == data_at && self.x.sent);
        if !asking || self.done || self.failed.is_some() {
            return 0;
        }
        self.p.qps.saturating_sub(self.data.len() as u16)
    }

    /// Where the data connections come in the script.
    fn data_at(&self) -> usize {
        self.data_at
    }

    /// Server: it has the client's handshake before the data connections
    /// and waits for leave to answer it. Its client opens them as soon as
    /// it has the answer, and nothing in a data connection says whose it
    /// is: of the sessions from one address, one at a time may have its
    /// data connections coming (the driver's rule).
    pub fn wants_window(&self) -> bool {
        !self.window && self.at + 1 == self.data_at() && self.x.got.is_some()
    }

    /// Server: leave to answer (see [`Machine::wants_window`]).
    pub fn open_window(&mut self) {
        self.window = true;
    }

    /// Server: it had leave and its data connections are not all here.
    pub fn in_window(&self) -> bool {
        self.window
            && !self.p.client
            && !self.done
            && self.failed.is_none()
            && self.at <= self.data_at()
            && self.data.len() < usize::from(self.p.qps)
    }

    /// Its next data connection (in the order they came or were opened).
    pub fn add_data(&mut self, qp: QpHandle) {
        self.data.push(qp);
        self.since = Instant::now();
    }

    /// Whether `qp` is one of its connections (and did not end).
    pub fn owns(&self, qp: QpHandle) -> bool {
        (self.ctrl == Some(qp) || self.data.contains(&qp)) && !self.gone.contains(&qp)
    }

    /// The buffer the peer offered for QP 0 (its STag and address; in
    /// send_bw its credit word), once the handshake told it, whatever
    /// [`Machine::aim_at`] put in its place.
    pub fn peer_buffer(&self) -> Option<(u32, u64)> {
        self.offered
    }

    /// Takes every buffer the peer offers as `(stag, address)` instead: a
    /// client that reads or writes where its server did not point it (a
    /// test of what a server exposes to whom; perftest's own client
    /// cannot).
    pub fn aim_at(&mut self, stag: u32, address: u64) {
        self.aimed = Some((stag, address));
    }

    /// Its connections that did not end, the control one first.
    pub fn qps(&self) -> impl Iterator<Item = QpHandle> + '_ {
        self.ctrl
            .iter()
            .copied()
            .chain(self.data.iter().copied())
            .filter(|q| !self.gone.contains(q))
    }

    /// One of its connections ended (a session that needed it fails on
    /// its next poll).
    pub fn ended(&mut self, qp: QpHandle) {
        if self.owns(qp) {
            self.gone.push(qp);
        }
    }

    /// Fails the session (the driver's reason).
    pub fn fail(&mut self, why: String) {
        if self.failed.is_none() && !self.done {
            self.failed = Some(why);
        }
    }

    /// The data connections.
    pub fn data_qps(&self) -> &[QpHandle] {
        &self.data
    }

    /// Its parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    /// A completion of one of its work requests.
    pub fn completion(&mut self, wc: Wc) {
        if !self.owns(wc.qp) {
        } else if Some(wc.qp) == self.ctrl {
            self.ctrl_wcs.push_back(wc);
        } else {
            self.data_wcs.push_back(wc);
        }
    }

    /// A Terminate went either way on one of its connections: the session
    /// fails on its next poll (with the cause a completion in error names
    /// better, if one came by then).
    pub fn terminated(&mut self, event: QpEvent) {
        if self.terminate.is_none() {
            self.terminate = Some(event);
        }
    }

    /// Why a Terminate ended the session: a completion in error's cause if
    /// one came, else the Terminate's code.
    fn terminate_reason(&self, event: QpEvent) -> String {
        let cause = self
            .data_wcs
            .iter()
            .find(|w| !matches!(w.status, WcStatus::Success | WcStatus::Flushed));
        if let Some(Err(why)) = cause.map(|wc| self.check_wc(wc)) {
            return why;
        }
        let code = match event {
            QpEvent::TerminateSent(t) | QpEvent::TerminateReceived(t) => {
                (t.layer, t.etype, t.ecode)
            }
        };
        // RFC 5041 §7.2: DDP untagged buffer errors 2 (no buffer) and 5
        // (message too long for the buffer).
        let hint = match (self.p.test.verb(), code) {
            (Verb::Send, (1, 2, 2)) => {
                " (a Send with no receive for it: both sides need the same -n, -r and -q)"
            }
            (Verb::Send, (1, 2, 5)) => {
                " (a Send longer than the receive for it: both sides need the same -s or -a)"
            }
            _ => "",
        };
        format!("{}{hint}", term_text(event))
    }

    /// Every size's results so far.
    pub fn results(&self) -> &[SizeOutcome] {
        &self.results
    }

    /// Where it is, for status displays.
    pub fn phase(&self) -> String {
        match self.script.get(self.at) {
            None => "done".into(),
            Some(Step::Run) => format!("running {} octets", self.sizes[self.size_index]),
            Some(step) => format!("{step:?}"),
        }
    }

    /// Advances as far as it can this turn.
    pub fn poll<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) -> Status {
        if let Some(event) = self.terminate.take() {
            if !self.done && self.failed.is_none() {
                self.failed = Some(self.terminate_reason(event));
            }
        }
        if let Some(why) = &self.failed {
            self.exposed = None;
            return Status::Failed(why.clone());
        }
        if self.done {
            return Status::Done;
        }
        match self.advance(ep) {
            Ok(status) => {
                if status == Status::Done {
                    // Its slot stays addressable until the session is
                    // dropped (its connections gone): the peer's last
                    // Writes complete on its side once handed to TCP, and
                    // may still be on the data connections after the last
                    // handshake on the control one.
                    self.done = true;
                }
                status
            }
            Err(why) => {
                self.failed = Some(why.clone());
                self.exposed = None;
                Status::Failed(why)
            }
        }
    }

    fn advance<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) -> Result<Status, String> {
        // A completion is progress (our own Writes' in a one-way run, where
        // the peer sends nothing on the data connections).
        if !self.data_wcs.is_empty() || !self.ctrl_wcs.is_empty() {
            self.progressed = true;
        }
        loop {
            let Some(&step) = self.script.get(self.at) else {
                return Ok(Status::Done);
            };
            let moved = match step {
                Step::Xchg(msg) => self.exchange(ep, msg)?,
                Step::Data => {
                    if !self.prepared {
                        if !self.prepare(ep)? {
                            // The rest at the next polls: our own work,
                            // not a stall.
                            self.progressed = true;
                            return Ok(Status::Running);
                        }
                        let pd = self.own.as_ref().map_or(ep.pd(), |o| o.pd);
                        self.exposed = Some(Exposed::register(ep, &self.p, &self.l, pd)?);
                        self.prepared = true;
                    }
                    if self.data.len() >= usize::from(self.p.qps) {
                        true
                    } else if self.p.client && !self.connecting {
                        self.connecting = true;
                        return Ok(Status::Connect);
                    } else {
                        false
                    }
                }
                Step::SizeLoop => true,
                Step::PostRecvs => {
                    self.post_recvs(ep)?;
                    true
                }
                Step::Run => self.run(ep)?,
                Step::NextSize => {
                    if self.size_index + 1 < self.sizes.len() {
                        self.size_index += 1;
                        self.at = self.loop_at.expect("a script with sizes has a loop");
                    }
                    true
                }
            };
            if !moved {
                // The connections and the clock, every so many polls: a
                // poll is a core's turn.
                self.idle_polls += 1;
                if self.idle_polls >= 64 {
                    self.idle_polls = 0;
                    self.check_alive(ep)?;
                }
                return Ok(Status::Running);
            }
            self.at += 1;
            self.since = Instant::now();
        }
    }

    /// Fails once a connection it needs is gone or nothing happened for
    /// too long.
    fn check_alive<T: CoreTransport>(&mut self, ep: &Endpoint<T>) -> Result<(), String> {
        // Anything from the peer on a data connection is progress: a long
        // run into our memory makes no completion here.
        let heard: u64 = self.data.iter().filter_map(|&q| ep.rx_octets(q)).sum();
        if heard != self.heard || self.progressed {
            self.heard = heard;
            self.progressed = false;
            self.since = Instant::now();
        }
        // Our answer waits for another session from the client's host to
        // open its data connections (one at a time: `wants_window`); that
        // one may take its whole data limit. A client waiting for the
        // answer before its data connections may be waiting for the same.
        let queued = self.wants_window()
            || (self.p.client
                && self.at + 1 == self.data_at()
                && self.x.send_done
                && self.x.got.is_none());
        let waiting_for = || match self.script.get(self.at) {
            Some(Step::Xchg(_)) if queued && !self.p.client => {
                "another session from the client's host to open its data connections \
                 (a host's sessions take turns)"
                    .to_string()
            }
            Some(Step::Xchg(m)) if queued => format!(
                "the server's answer to our {m:?} message (a server may answer a host's \
                 sessions in turn)"
            ),
            Some(Step::Xchg(m)) => format!("the peer's {m:?} message"),
            Some(Step::Data) => "the data connections".into(),
            Some(Step::Run) => format!("the run of {} octets", self.sizes[self.size_index]),
            other => format!("{other:?}"),
        };
        for (qp, name) in self
            .ctrl
            .iter()
            .map(|&q| (q, "control"))
            .chain(self.data.iter().map(|&q| (q, "data")))
        {
            if self.gone.contains(&qp) || !ep.is_live(qp) {
                let data_live = self
                    .data
                    .iter()
                    .any(|&q| !self.gone.contains(&q) && ep.is_live(q));
                let since = *self.gone_seen.get_or_insert_with(Instant::now);
                if data_live && since.elapsed() < GONE_GRACE {
                    return Ok(());
                }
                // perftest's parameters are exchanged, not negotiated: a
                // server whose own command differs (another -n, -s, -q or
                // test) ends the exchange, which is all the client sees.
                let hint = if matches!(self.script.get(self.at), Some(Step::Xchg(_))) {
                    " (a perftest server closes the exchange when its command differs from \
                     the client's: run the same test with the same -s, -n or -D, -q and -a on \
                     both sides)"
                } else {
                    ""
                };
                return Err(format!(
                    "the peer closed a {name} connection while we waited for {}{hint}",
                    waiting_for()
                ));
            }
        }
        // The server's first client message may take its time only if it
        // is the whole run (write_bw's and read_bw's passive server, the
        // client's traffic counted above).
        // The data connections may take longer: perftest's own server waits
        // for them without a limit, and a siw client among five others in
        // a loaded guest took 10.5 s to open its one (CI, net_tap).
        let limit = if queued {
            // Its turn comes once the other's data connections came or its
            // limit passed.
            DATA_WAIT_LIMIT + STALL_LIMIT
        } else if self.script.get(self.at) == Some(&Step::Data) {
            DATA_WAIT_LIMIT
        } else {
            STALL_LIMIT
        };
        if self.since.elapsed() > limit {
            return Err(format!(
                "no progress for {} s waiting for {}",
                limit.as_secs(),
                waiting_for()
            ));
        }
        Ok(())
    }

    // ---- Control exchanges (perftest's `ctx_xchg_data`: the client sends
    // first, the server answers).

    fn exchange<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        msg: Msg,
    ) -> Result<bool, String> {
        let client = self.p.client;
        if client && !self.x.sent {
            let mine = self.message(msg);
            self.ctrl_send(ep, &mine)?;
            self.x.sent = true;
        }
        if client && !self.x.send_done {
            if !self.ctrl_send_done()? {
                return Ok(false);
            }
            self.x.send_done = true;
        }
        if self.x.got.is_none() {
            match self.ctrl_recv(ep)? {
                Some(m) => self.x.got = Some(m),
                None => return Ok(false),
            }
        }
        if !client && !self.x.sent {
            if self.at + 1 == self.data_at() && !self.window {
                return Ok(false);
            }
            // The answer says what we took from the message; a bad one
            // fails before we answer.
            let theirs = self.x.got.clone().unwrap_or_default();
            self.take(msg, &theirs)?;
            let mine = self.message(msg);
            self.ctrl_send(ep, &mine)?;
            self.x.sent = true;
        }
        if !client && !self.x.send_done {
            if !self.ctrl_send_done()? {
                return Ok(false);
            }
            self.x.send_done = true;
        }
        let theirs = std::mem::take(&mut self.x).got.unwrap_or_default();
        if client {
            self.take(msg, &theirs)?;
        }
        Ok(true)
    }

    /// What we send for `msg`.
    fn message(&self, msg: Msg) -> Vec<u8> {
        match msg {
            Msg::Version => {
                let mut v = vec![0u8; VERSION_LEN];
                v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
                v
            }
            Msg::Cycle => CYCLE_BUFFER.to_be_bytes().to_vec(),
            Msg::Line => CACHE_LINE.to_be_bytes().to_vec(),
            Msg::Mtu => vec![b'0' + self.ib_mtu, 0],
            Msg::Zero => vec![0; DEST_LEN],
            Msg::Dest(i) => self.my_dest(usize::from(i)).encode().to_vec(),
            Msg::Dest0 => self.my_dest(0).encode().to_vec(),
            Msg::Report(k) => self.my_report().fields()[usize::from(k)].to_vec(),
        }
    }

    /// Takes the peer's `msg`.
    fn take(&mut self, msg: Msg, theirs: &[u8]) -> Result<(), String> {
        let word = |o: &[u8], what: &str| -> Result<u32, String> {
            <[u8; 4]>::try_from(o)
                .map(u32::from_be_bytes)
                .map_err(|_| format!("the peer's {what} is {} octets, not 4", o.len()))
        };
        match msg {
            Msg::Version => {
                let v = version_number(theirs);
                if v < VERSION_MIN {
                    return Err(format!(
                        "the peer speaks perftest {:?}; perftest and we need {VERSION_MIN:.2} or \
                         newer",
                        String::from_utf8_lossy(theirs).trim_end_matches('\0')
                    ));
                }
            }
            Msg::Cycle => {
                let c = word(theirs, "cycle buffer")?.max(CYCLE_BUFFER);
                if c > CYCLE_MAX || !c.is_power_of_two() {
                    return Err(format!(
                        "the peer's cycle buffer ({c}) is beyond what we work with (a power of \
                         two, at most {CYCLE_MAX})"
                    ));
                }
                self.cycle = u64::from(c);
            }
            Msg::Line => {
                let l = word(theirs, "cache line")?.max(CACHE_LINE);
                if !l.is_power_of_two() || u64::from(l) > self.cycle {
                    return Err(format!(
                        "the peer's cache line ({l}) is beyond what we work with (a power of \
                         two, at most the cycle buffer)"
                    ));
                }
                self.line = u64::from(l);
            }
            Msg::Mtu => {
                if theirs.len() != 2 {
                    return Err(format!("the peer's MTU is {} octets, not 2", theirs.len()));
                }
            }
            Msg::Zero | Msg::Dest0 => {
                Dest::decode(theirs).map_err(|e| format!("a handshake: {e}"))?;
            }
            Msg::Dest(i) => {
                let d = Dest::decode(theirs).map_err(|e| format!("QP {i}'s handshake: {e}"))?;
                // The first round's counts; perftest's second repeats it.
                if self.rem[usize::from(i)] == Dest::default() {
                    self.rem[usize::from(i)] = d;
                    if i == 0 {
                        self.offered = Some((d.rkey, d.vaddr));
                    }
                    if let Some((rkey, vaddr)) = self.aimed {
                        let r = &mut self.rem[usize::from(i)];
                        (r.rkey, r.vaddr) = (rkey, vaddr);
                    }
                }
            }
            Msg::Report(k) => {
                self.theirs[usize::from(k)] = <[u8; 8]>::try_from(theirs)
                    .map_err(|_| format!("a report field of {} octets, not 8", theirs.len()))?;
                if k == 4 {
                    self.took_report()?;
                }
            }
        }
        Ok(())
    }

    /// Our `pingpong_dest` for QP `i`: its buffer, or its credit word in
    /// send_bw.
    fn my_dest(&self, i: usize) -> Dest {
        let at = if self.p.test == Test::SendBw {
            self.l.origin + CREDIT_IN_AT + 4 * i as u64
        } else {
            self.l.target(i)
        };
        // Registered at the data connections, before any of these
        // handshakes; without it the peer is told STag 0, which no access
        // passes.
        let (rkey, vaddr) = self
            .exposed
            .as_ref()
            .map_or((0, 0), |e| (e.mr.stag, e.mr.base_to + (at - self.l.origin)));
        Dest {
            out_reads: u32::from(self.p.out_reads),
            qpn: self.data.get(i).map_or(0, |q| q.index() as u32),
            psn: self.psn,
            rkey,
            vaddr,
            ..Dest::default()
        }
    }

    /// The report we send: this size's numbers (perftest's server of a
    /// one-way write_bw or read_bw sends a report it never filled; ours
    /// names the size and iterations it was told).
    fn my_report(&self) -> BwReport {
        // A one-way server runs no size: its report is of the last.
        let size = if !self.p.client && !self.p.duplex {
            *self.sizes.last().expect("at least one size")
        } else {
            self.sizes[self.size_index]
        };
        self.results
            .iter()
            .rev()
            .find(|r| r.size == size)
            .and_then(|r| r.bw)
            .unwrap_or(BwReport {
                size,
                iters: self.p.iters * u64::from(self.p.qps),
                ..BwReport::default()
            })
    }

    /// The peer's report is whole: kept, and, from a one-way client,
    /// checked against what we were told.
    fn took_report(&mut self) -> Result<(), String> {
        let theirs = BwReport::from_fields(&self.theirs);
        let size = if !self.p.client && !self.p.duplex {
            *self.sizes.last().expect("at least one size")
        } else {
            self.sizes[self.size_index]
        };
        let one_way_client = !self.p.client && !self.p.duplex;
        if one_way_client {
            let last = *self.sizes.last().expect("at least one size");
            if theirs.size != last
                || (self.p.duration.is_none()
                    && theirs.iters != self.p.iters * u64::from(self.p.qps))
            {
                return Err(format!(
                    "the client ran {} iterations of {} octets; we were told {} of {}",
                    theirs.iters,
                    theirs.size,
                    if self.p.duration.is_some() {
                        "-D".to_string()
                    } else {
                        format!("-n {}", self.p.iters)
                    },
                    if self.p.all_sizes {
                        "-a".to_string()
                    } else {
                        format!("-s {last}")
                    }
                ));
            }
        }
        if !self.p.client || self.p.duplex {
            match self.results.iter_mut().rev().find(|r| r.size == size) {
                Some(r) => r.peer_bw = Some(theirs),
                None => self.results.push(SizeOutcome {
                    size,
                    peer_bw: Some(theirs),
                    ..SizeOutcome::default()
                }),
            }
        }
        Ok(())
    }

    fn post_ctrl_recv<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        slot: u64,
    ) -> Result<(), String> {
        let qp = self.ctrl.ok_or("no control connection")?;
        let sgl = [self.sge(ep, self.l.origin + slot * CTRL_SLOT, CTRL_SLOT as u32)];
        ep.rnic()
            .post_recv(
                qp,
                &RecvWr {
                    wr_id: WR_CTRL_RECV | slot << 8,
                    sgl: &sgl,
                },
            )
            .map_err(|e| format!("posting a control receive: {e:?}"))
    }

    fn ctrl_send<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        msg: &[u8],
    ) -> Result<(), String> {
        let qp = self.ctrl.ok_or("no control connection")?;
        let at = self.l.origin + SEND_AT;
        ep.region
            .write(at as usize, msg)
            .map_err(|e| format!("{e:?}"))?;
        let sgl = [self.sge(ep, at, msg.len() as u32)];
        ep.rnic()
            .post_send(
                qp,
                &SendWr {
                    wr_id: WR_CTRL_SEND,
                    op: SendOp::Send,
                    sgl: &sgl,
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .map_err(|e| format!("posting a control Send: {e:?}"))
    }

    /// Whether our control Send completed (as perftest, before anything
    /// else happens, so the one send slot is free again).
    fn ctrl_send_done(&mut self) -> Result<bool, String> {
        let Some(i) = self.ctrl_wcs.iter().position(|w| w.wr_id == WR_CTRL_SEND) else {
            return Ok(false);
        };
        let wc = self.ctrl_wcs.remove(i).expect("found above");
        match wc.status {
            WcStatus::Success => Ok(true),
            status => Err(format!("our control Send ended {status:?}")),
        }
    }

    /// The peer's next control message, if it came.
    fn ctrl_recv<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
    ) -> Result<Option<Vec<u8>>, String> {
        let Some(i) = self
            .ctrl_wcs
            .iter()
            .position(|w| w.wr_id & 0xff == WR_CTRL_RECV)
        else {
            return Ok(None);
        };
        let wc = self.ctrl_wcs.remove(i).expect("found above");
        if wc.status != WcStatus::Success {
            return Err(format!("a control receive ended {:?}", wc.status));
        }
        let slot = wc.wr_id >> 8;
        let mut msg = vec![0; (wc.byte_len as u64).min(CTRL_SLOT) as usize];
        ep.region
            .read((self.l.origin + slot * CTRL_SLOT) as usize, &mut msg)
            .map_err(|e| format!("{e:?}"))?;
        self.post_ctrl_recv(ep, slot)?;
        Ok(Some(msg))
    }

    // ---- The data phase.

    /// A data completion in error, or a received message of the wrong
    /// size, as what to fix.
    fn check_wc(&self, wc: &Wc) -> Result<(), String> {
        let size = self.sizes[self.size_index];
        match wc.status {
            WcStatus::Success => {}
            WcStatus::LocalLength if wc.wr_id & 0xff == WR_DATA_RECV => {
                return Err(format!(
                    "a Send longer than our receives of {size} octets arrived (run both sides \
                     with the same -s or -a)"
                ))
            }
            status => return Err(format!("a data work request ended {status:?}")),
        }
        if wc.wr_id & 0xff == WR_DATA_RECV {
            if !matches!(wc.opcode, WcOpcode::Recv) {
                return Err(format!("an unexpected {:?} completion", wc.opcode));
            }
            if u64::from(wc.byte_len) != size {
                return Err(format!(
                    "a Send of {} octets arrived; the test's are {size} (run both sides with \
                     the same -s or -a)",
                    wc.byte_len
                ));
            }
        }
        Ok(())
    }

    /// Posts receive `n` of QP `i` for this size.
    fn post_recv<T: CoreTransport>(
        &self,
        ep: &mut Endpoint<T>,
        i: usize,
        n: u64,
    ) -> Result<(), String> {
        let size = self.sizes[self.size_index];
        let at = self.l.target(i) + slot_offset(n, size, self.cycle, self.line);
        let sgl = [self.sge(ep, at, size as u32)];
        ep.rnic()
            .post_recv(
                self.data[i],
                &RecvWr {
                    wr_id: WR_DATA_RECV | (i as u64) << 8,
                    sgl: &sgl,
                },
            )
            .map_err(|e| format!("posting a data receive: {e:?}"))
    }

    /// A signaled work request on QP `i`.
    fn post_wr<T: CoreTransport>(
        &self,
        ep: &mut Endpoint<T>,
        i: usize,
        kind: u64,
        op: SendOp,
        local: u64,
        len: u64,
    ) -> Result<(), String> {
        let sgl = [self.sge(ep, local, len as u32)];
        ep.rnic()
            .post_send(
                self.data[i],
                &SendWr {
                    wr_id: kind | (i as u64) << 8,
                    op,
                    sgl: &sgl,
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .map_err(|e| format!("posting a data work request: {e:?}"))
    }

    /// Receives each QP takes this size: `rx_depth`, at most the
    /// iterations (perftest's `ctx_set_recv_wqes`).
    fn recv_window(&self) -> u64 {
        let rx = u64::from(self.p.rx_depth);
        if self.p.duration.is_some() {
            rx
        } else {
            rx.min(self.p.iters)
        }
    }

    fn post_recvs<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) -> Result<(), String> {
        let n = self.recv_window();
        let qps = usize::from(self.p.qps);
        for i in 0..qps {
            for k in 0..n {
                self.post_recv(ep, i, k)?;
            }
        }
        let size = self.sizes[self.size_index];
        let mut run = self.new_run(size);
        run.rposted = vec![n; qps];
        self.run = Some(run);
        self.zero_credits(ep)
    }

    /// A new size starts from no credit (perftest's client zeroes its
    /// credit words after each size's handshake; the peer counts its
    /// receives from zero again).
    fn zero_credits<T: CoreTransport>(&self, ep: &mut Endpoint<T>) -> Result<(), String> {
        if self.p.test != Test::SendBw {
            return Ok(());
        }
        let at = self.l.origin + CREDIT_IN_AT;
        ep.region
            .write(at as usize, &[0; 4 * QPS_MAX as usize])
            .map_err(|e| format!("{e:?}"))
    }

    fn new_run(&self, size: u64) -> Run {
        let qps = usize::from(self.p.qps);
        let (n, sends, arrives) = timestamps(&self.p);
        let bw = self.p.test.is_bw();
        Run {
            size,
            samples_max: if self.p.duration.is_some() {
                LAT_SAMPLES_MAX
            } else {
                usize::MAX
            },
            begun: Instant::now(),
            end: None,
            rx_end: None,
            scnt: vec![0; qps],
            ccnt: vec![0; qps],
            posted: Vec::with_capacity(if sends { n } else { 0 }),
            completed: Vec::with_capacity(if sends && bw { n } else { 0 }),
            rcnt: vec![0; qps],
            rposted: vec![0; qps],
            arrived: Vec::with_capacity(if arrives { n } else { 0 }),
            unanswered: 0,
            phase: 0,
            count: 0,
        }
    }

    /// This size's data phase; true once it is over.
    fn run<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) -> Result<bool, String> {
        let size = self.sizes[self.size_index];
        if self.run.as_ref().is_none_or(|r| r.size != size) {
            self.run = Some(self.new_run(size));
            self.zero_credits(ep)?;
        }
        let mut run = self.run.take().expect("set above");
        if run.end.is_none() {
            if let Some(d) = self.p.duration {
                run.end = Some(run.begun + d);
            }
        }
        let over = match self.p.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw => self.run_bw(ep, &mut run),
            Test::WriteLat => self.run_write_lat(ep, &mut run),
            Test::ReadLat => self.run_read_lat(ep, &mut run),
            Test::SendLat => self.run_send_lat(ep, &mut run),
        };
        let over = match over {
            Ok(o) => o,
            Err(e) => {
                self.run = Some(run);
                return Err(e);
            }
        };
        if over {
            self.finish_run(&run);
        }
        self.run = Some(run);
        Ok(over)
    }

    /// Records a finished run's numbers.
    fn finish_run(&mut self, run: &Run) {
        let size = run.size;
        let mut out = SizeOutcome {
            size,
            ..SizeOutcome::default()
        };
        let qps = usize::from(self.p.qps);
        match self.p.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw => {
                let sends = self.p.client || self.p.duplex;
                out.bw = Some(if self.p.duration.is_some() {
                    let took = run.begun.elapsed().as_secs_f64().max(1e-9);
                    let mb = (1u64 << 20) as f64;
                    BwReport {
                        size,
                        iters: run.count,
                        bw_peak: 0.0,
                        bw_avg: (size * run.count) as f64 / took / mb,
                        msg_rate: run.count as f64 / took / 1e6,
                    }
                } else if sends {
                    bw_report(
                        size,
                        &run.posted,
                        &run.completed,
                        self.p.tx_depth as usize * qps,
                    )
                } else {
                    bw_report_rx(size, &run.arrived, self.p.rx_depth as usize * qps)
                });
                // perftest reports every QP's iterations together
                // (`print_report_bw`: iterations times QPs).
                if let (Some(r), None) = (&mut out.bw, self.p.duration) {
                    r.iters = self.p.iters * qps as u64;
                }
            }
            Test::WriteLat | Test::SendLat => out.lat = deltas(&run.posted, 2.0),
            Test::ReadLat => out.lat = deltas(&run.posted, 1.0),
        }
        self.results.push(out);
    }

    /// Bandwidth: Writes, Reads or Sends (within the peer's credits) on
    /// every QP when we send; receives counted, reposted and credited when
    /// we receive (send_bw). perftest's `run_iter_bw`,
    /// `run_iter_bw_server` and `run_iter_bi`.
    fn run_bw<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        run: &mut Run,
    ) -> Result<bool, String> {
        let verb = self.p.test.verb();
        let sends = self.p.client || self.p.duplex;
        let receives = verb == Verb::Send && (!self.p.client || self.p.duplex);
        let (size, iters) = (run.size, self.p.iters);
        let qps = usize::from(self.p.qps);
        let rx = u64::from(self.p.rx_depth);
        let credit_every = (rx / 3).max(1);
        let duration = self.p.duration.is_some();
        // The clock once a poll, and only when something needs it.
        let mut clock: Option<Instant> = None;
        let mut now = || *clock.get_or_insert_with(Instant::now);
        while let Some(wc) = self.data_wcs.pop_front() {
            let now = now();
            self.check_wc(&wc)?;
            let i = (wc.wr_id >> 8) as usize;
            match wc.wr_id & 0xff {
                WR_DATA if i < qps => {
                    run.ccnt[i] += 1;
                    run.count += 1;
                    if !duration {
                        run.completed.push(now);
                    }
                }
                WR_DATA_RECV if i < qps => {
                    if !receives {
                        continue;
                    }
                    run.rcnt[i] += 1;
                    if !duration {
                        run.arrived.push(now);
                    } else if !sends {
                        run.count += 1;
                    }
                    if run.rx_end.is_none() {
                        run.rx_end = self.p.duration.map(|d| now + d);
                    }
                    let over = run.rx_end.is_some_and(|e| now >= e);
                    if (duration && !over) || run.rposted[i] < iters && !duration {
                        self.post_recv(ep, i, run.rposted[i])?;
                        run.rposted[i] += 1;
                    }
                    if (run.rcnt[i] % rx).is_multiple_of(credit_every) {
                        let out = self.l.origin + CREDIT_OUT_AT + 4 * i as u64;
                        ep.region
                            .write(out as usize, &(run.rcnt[i] as u32).to_le_bytes())
                            .map_err(|e| format!("{e:?}"))?;
                        let remote = RemoteAddr {
                            stag: self.rem[i].rkey,
                            to: self.rem[i].vaddr,
                        };
                        self.post_wr(ep, i, WR_CREDIT, SendOp::Write(remote), out, 4)?;
                        self.credits_out += 1;
                    }
                }
                WR_CREDIT => self.credits_out = self.credits_out.saturating_sub(1),
                _ => return Err(format!("an unexpected {:?} completion", wc.opcode)),
            }
        }
        // The server of a two-way send_bw sends nothing before its first
        // receive (perftest's `before_first_rx`).
        let may_send =
            sends && !(verb == Verb::Send && !self.p.client && run.rcnt.iter().all(|&c| c == 0));
        let send_over = run.end.is_some_and(|e| now() >= e);
        if may_send && !send_over {
            let depth = u64::from(self.p.tx_depth);
            for i in 0..qps {
                let credit = if verb == Verb::Send {
                    let mut word = [0u8; 4];
                    let at = self.l.origin + CREDIT_IN_AT + 4 * i as u64;
                    ep.region
                        .read(at as usize, &mut word)
                        .map_err(|e| format!("{e:?}"))?;
                    Some(u32::from_le_bytes(word))
                } else {
                    None
                };
                // The credit Writes share the send queue (its depth is
                // the most work requests in flight).
                while (duration || run.scnt[i] < iters)
                    && run.scnt[i] - run.ccnt[i] < depth
                    && run.scnt[i] - run.ccnt[i] + self.credits_out < u64::from(DEPTH_MAX)
                    && credit.is_none_or(|c| {
                        (run.scnt[i] as u32).wrapping_add(1).wrapping_sub(c) < rx as u32
                    })
                {
                    let offset = slot_offset(run.scnt[i], size, self.cycle, self.line);
                    let remote = RemoteAddr {
                        stag: self.rem[i].rkey,
                        to: self.rem[i].vaddr.wrapping_add(offset),
                    };
                    let op = match verb {
                        Verb::Read => SendOp::Read(remote),
                        Verb::Write => SendOp::Write(remote),
                        Verb::Send => SendOp::Send,
                    };
                    if !duration {
                        run.posted.push(Instant::now());
                    }
                    self.post_wr(ep, i, WR_DATA, op, self.l.local(i) + offset, size)?;
                    run.scnt[i] += 1;
                }
            }
        }
        let sent = !sends
            || if duration {
                send_over && run.scnt == run.ccnt
            } else {
                run.ccnt.iter().all(|&c| c >= iters)
            };
        let received = !receives
            || (if duration {
                run.rx_end.is_some_and(|e| now() >= e)
            } else {
                run.rcnt.iter().all(|&c| c >= iters)
            } && self.credits_out == 0);
        Ok(sent && received)
    }

    /// RDMA Write ping-pong (perftest's `run_iter_lat_write`): the server
    /// writes first; each side waits for the iteration's number in the last
    /// octet of its buffer, and for its Write's completion.
    fn run_write_lat<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        run: &mut Run,
    ) -> Result<bool, String> {
        while let Some(wc) = self.data_wcs.pop_front() {
            self.check_wc(&wc)?;
            run.ccnt[0] += 1;
        }
        let (size, iters) = (run.size, self.p.iters);
        let remote = RemoteAddr {
            stag: self.rem[0].rkey,
            to: self.rem[0].vaddr,
        };
        let post_at = self.l.local(0) + size - 1;
        let poll_at = self.l.target(0) + size - 1;
        let timed_out = run.end.is_some_and(|e| Instant::now() >= e);
        let more = |c: u64| self.p.duration.is_some() || c < iters;
        loop {
            if timed_out {
                return Ok(true);
            }
            match run.phase {
                0 => {
                    if more(run.rcnt[0]) && (self.p.client || run.scnt[0] >= 1) {
                        let mut b = [0u8];
                        ep.region
                            .read(poll_at as usize, &mut b)
                            .map_err(|e| format!("{e:?}"))?;
                        if b[0] != (run.rcnt[0] + 1) as u8 {
                            return Ok(false);
                        }
                        run.rcnt[0] += 1;
                    }
                    run.phase = 1;
                }
                1 => {
                    if more(run.scnt[0]) {
                        run.scnt[0] += 1;
                        ep.region
                            .write(post_at as usize, &[run.scnt[0] as u8])
                            .map_err(|e| format!("{e:?}"))?;
                        stamp(&mut run.posted, run.samples_max);
                        let local = self.l.local(0);
                        self.post_wr(ep, 0, WR_DATA, SendOp::Write(remote), local, size)?;
                    }
                    run.phase = 2;
                }
                _ => {
                    if run.ccnt[0] < run.scnt[0] {
                        return Ok(false);
                    }
                    run.phase = 0;
                    if !more(run.scnt[0]) && !more(run.rcnt[0]) {
                        return Ok(true);
                    }
                }
            }
        }
    }

    /// One RDMA Read at a time (perftest's `run_iter_lat`, the client's).
    fn run_read_lat<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        run: &mut Run,
    ) -> Result<bool, String> {
        while let Some(wc) = self.data_wcs.pop_front() {
            self.check_wc(&wc)?;
            run.ccnt[0] += 1;
        }
        let timed_out = run.end.is_some_and(|e| Instant::now() >= e);
        if run.ccnt[0] < run.scnt[0] {
            return Ok(false);
        }
        if timed_out || (self.p.duration.is_none() && run.scnt[0] >= self.p.iters) {
            return Ok(true);
        }
        let remote = RemoteAddr {
            stag: self.rem[0].rkey,
            to: self.rem[0].vaddr,
        };
        stamp(&mut run.posted, run.samples_max);
        let local = self.l.local(0);
        self.post_wr(ep, 0, WR_DATA, SendOp::Read(remote), local, run.size)?;
        run.scnt[0] += 1;
        Ok(false)
    }

    /// Send ping-pong (perftest's `run_iter_lat_send`): the client sends
    /// first; every receive is answered with a Send.
    fn run_send_lat<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
        run: &mut Run,
    ) -> Result<bool, String> {
        let iters = self.p.iters;
        let duration = self.p.duration.is_some();
        while let Some(wc) = self.data_wcs.pop_front() {
            self.check_wc(&wc)?;
            if wc.wr_id & 0xff == WR_DATA_RECV {
                run.rcnt[0] += 1;
                run.unanswered += 1;
                if duration || run.rposted[0] < iters {
                    self.post_recv(ep, 0, run.rposted[0])?;
                    run.rposted[0] += 1;
                }
            } else {
                run.ccnt[0] += 1;
            }
        }
        let timed_out = run.end.is_some_and(|e| Instant::now() >= e);
        if timed_out {
            return Ok(true);
        }
        let more = |c: u64| duration || c < iters;
        // Our turn: the client's first Send, then one per message received.
        let turn = if self.p.client && run.scnt[0] == 0 {
            true
        } else if run.unanswered > 0 {
            run.unanswered -= 1;
            true
        } else {
            false
        };
        if turn && more(run.scnt[0]) {
            run.scnt[0] += 1;
            stamp(&mut run.posted, run.samples_max);
            let local = self.l.local(0);
            self.post_wr(ep, 0, WR_DATA, SendOp::Send, local, run.size)?;
        }
        Ok(!more(run.scnt[0]) && !more(run.rcnt[0]) && run.ccnt[0] >= run.scnt[0])
    }
}

/// Latency samples a `-D` run keeps at most: it has no iteration count,
/// is as long as its client says, up to a day, and one timestamp per
/// iteration grew without bound; past this many the run goes on and its
/// statistics are those of its first iterations (64 MiB of timestamps). A
/// counted run keeps every iteration's (found by a review: this bound cut
/// a `-n 5000000` run's report to its first 4,194,304).
const LAT_SAMPLES_MAX: usize = 1 << 22;

/// Notes a latency iteration's start, while fewer than `max` are noted.
fn stamp(posted: &mut Vec<Instant>, max: usize) {
    if posted.len() < max {
        posted.push(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use rnic_engine::verbs::QpInit;

    use super::*;

    /// A server's parameters for `test` of `size` octets on `qps` QPs.
    fn server(test: Test, size: u64, qps: u16) -> Params {
        Params {
            test,
            client: false,
            size,
            iters: 100,
            tx_depth: 128,
            rx_depth: 1,
            out_reads: 1,
            all_sizes: false,
            duration: None,
            qps,
            duplex: false,
        }
    }

    /// A session that takes a slot clears its control area first: a Read
    /// test exposes the whole slot to its client, and the last session's
    /// control messages (its QP numbers, STag, addresses) were left there
    /// for the next client to read (found by a review).
    #[test]
    fn a_new_session_leaves_nothing_of_the_last_in_its_slot() {
        let p = server(Test::ReadBw, 65536, 1);
        let mut ep = crate::endpoint::idle_endpoint(Layout::memory(&p));
        ep.region.write(0, &[0xab; DATA_AT as usize]).unwrap();
        let (pd, cq) = (ep.pd(), ep.cq);
        let qp = ep
            .rnic()
            .create_qp(QpInit {
                pd,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                sq_size: 16,
                rq_size: 16,
            })
            .unwrap();
        let mut m = Machine::new(p, 0, 3, 1);
        m.set_ctrl(&mut ep, qp).unwrap();
        let mut area = [0xffu8; DATA_AT as usize];
        ep.region.read(0, &mut area).unwrap();
        assert!(
            area.iter().all(|&o| o == 0),
            "the last session's octets stay"
        );
    }

    /// A session's buffers are filled a bounded piece a poll (a core's
    /// turn), not all in one.
    #[test]
    fn a_sessions_buffers_are_filled_a_piece_a_poll() {
        let p = server(Test::WriteBw, 1 << 20, 4);
        let mut ep = crate::endpoint::idle_endpoint(Layout::memory(&p));
        let mut m = Machine::new(p, 0, 3, 1);
        let (at, len) = m.l.data();
        assert!(len > 2 * FILL_PER_POLL, "{len}");
        let mut polls = 0;
        while !m.prepare(&mut ep).unwrap() {
            polls += 1;
            assert_eq!(m.filled, polls * FILL_PER_POLL);
        }
        assert_eq!(polls + 1, len.div_ceil(FILL_PER_POLL));
        let mut last = [0u8; 1];
        ep.region.read((at + len - 1) as usize, &mut last).unwrap();
        assert_eq!(last[0], ((len - 1) % FILL_CHUNK as u64 % 251) as u8);
    }

    /// What a latency session keeps of its samples is within what
    /// `timestamps_memory` says it takes (the appliance's configuration
    /// check adds that to the memory the machine must have): a `-D` run's
    /// samples (up to `LAT_SAMPLES_MAX` stamps, then as many deltas) and
    /// every size's deltas under `-a` (found by a review).
    #[test]
    fn a_latency_sessions_samples_are_within_its_counted_memory() {
        let mut over = Vec::new();
        for (all_sizes, duration) in [
            (false, Some(std::time::Duration::from_secs(60))),
            (true, None),
        ] {
            let p = Params {
                all_sizes,
                duration,
                iters: 100_000,
                size: if all_sizes { super::super::SIZE_MAX } else { 2 },
                ..server(Test::WriteLat, 2, 1)
            };
            let mut m = Machine::new(p, 0, 3, 1);
            // Every size run to its end, each iteration stamped as
            // `run_write_lat` stamps it (a -D run of a day has more than
            // LAT_SAMPLES_MAX of them).
            let per_run = match duration {
                Some(_) => LAT_SAMPLES_MAX + 1,
                None => p.iters as usize,
            };
            for size in m.sizes.clone() {
                let mut run = m.new_run(size);
                for _ in 0..per_run {
                    stamp(&mut run.posted, run.samples_max);
                }
                m.finish_run(&run);
                m.run = Some(run);
            }
            let results = m
                .results
                .iter()
                .map(|r| r.lat.capacity() * std::mem::size_of::<f64>())
                .sum::<usize>();
            // The results, their copy when the session finishes, and the
            // live run's stamps.
            let kept = 2 * results
                + m.run
                    .as_ref()
                    .map_or(0, |r| r.posted.capacity() * std::mem::size_of::<Instant>());
            if kept > timestamps_memory(&p) {
                over.push(format!(
                    "-a {all_sizes} -D {duration:?}: the session keeps {kept} octets of \
                     samples, counted {}",
                    timestamps_memory(&p)
                ));
            }
        }
        assert!(over.is_empty(), "{over:#?}");
    }

    /// An iteration-mode latency run of more than `LAT_SAMPLES_MAX`
    /// iterations (`-n` allows up to `ITERS_MAX`) reports every iteration,
    /// as perftest does: the bound is for `-D` runs, which have no count
    /// (found by a review).
    #[test]
    fn an_iteration_mode_latency_run_keeps_every_iteration() {
        let p = Params {
            iters: 5_000_000,
            size: 2,
            ..server(Test::WriteLat, 2, 1)
        };
        assert!(p.iters <= super::super::ITERS_MAX);
        let mut m = Machine::new(p, 0, 3, 1);
        let mut run = m.new_run(2);
        // Each ping-pong stamped as `run_write_lat` stamps it.
        for _ in 0..p.iters {
            stamp(&mut run.posted, run.samples_max);
        }
        m.finish_run(&run);
        // `print_results`' #iterations column: the samples and one.
        assert_eq!(m.results[0].lat.len() as u64 + 1, p.iters);
    }

    #[test]
    fn latency_samples_stop_at_their_bound() {
        let mut posted = Vec::new();
        for _ in 0..LAT_SAMPLES_MAX + 10 {
            stamp(&mut posted, LAT_SAMPLES_MAX);
        }
        assert_eq!(posted.len(), LAT_SAMPLES_MAX);
    }
}
