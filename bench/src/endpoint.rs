//! One whole RNIC of the benchmark ([`Endpoint`]): a poll-mode core
//! (`dataplane::Core`: its TCP transport, its link to the control plane,
//! its engine), the control-plane thread, and registered memory. One thread
//! turns the core and runs the application's side with it, as one pinned
//! poll-mode core does.

use std::sync::Arc;

use control::runtime::{ControlPlane, Handoff};
use dataplane::{Core, CoreConfig, CoreTransport};
use rnic_engine::cq::Wc;
use rnic_engine::mem::{Access, Region};
use rnic_engine::qp::QpEvent;
use rnic_engine::verbs::{CqHandle, Mr, QpHandle, QpInit, RemoteAddr, Rnic, RnicConfig, Sge};
use tcp_lite::{ConnId, Duration, Instant};

/// Send and receive queue depth of every QP.
pub const QUEUE_DEPTH: usize = 512;
/// Completions per CQ: every work request of the most QPs (64) at the
/// deepest queues (512 sends and 512 receives each) can complete in one
/// step without overflowing it.
const CQ_DEPTH: usize = 64 * QUEUE_DEPTH * 2;
/// Connections one RNIC runs at once (64 QPs of a run, and room for a
/// persistent server's clients).
const CONNECTIONS_MAX: usize = 128;

/// The process's clock as tcp-lite time (the data plane's).
pub fn now() -> Instant {
    dataplane::clock::now()
}

/// One RNIC: a poll-mode core (its transport, its link to the control
/// plane, its engine), its control plane, and registered memory.
pub struct Endpoint<T: CoreTransport> {
    /// The core: TCP, the engine and the QPs of its connections.
    pub core: Core<T>,
    pub(crate) control: ControlPlane,
    /// The CQ of every QP.
    pub cq: CqHandle,
    /// Registered memory, remotely readable, writable and atomic.
    pub region: Arc<Region>,
    /// Its registration.
    pub mr: Mr,
    /// Scratch for draining the CQ.
    wcs: Vec<Wc>,
}

impl<T: CoreTransport> Endpoint<T> {
    /// An RNIC on `transport`, with `memory` octets registered.
    pub fn new(transport: T, emss: usize, seed: u64, memory: usize) -> Endpoint<T> {
        let (control, mut links) = ControlPlane::start(1);
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd().expect("a fresh RNIC has room for a PD");
        let cq = rnic
            .create_cq(CQ_DEPTH)
            .expect("a fresh RNIC has room for a CQ");
        let region = Region::new(memory);
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = rnic
            .reg_region(pd, region.clone(), access)
            .expect("registration");
        let qp_init = QpInit {
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            sq_size: QUEUE_DEPTH,
            rq_size: QUEUE_DEPTH,
        };
        let mut config = CoreConfig::new(emss);
        config.connections_max = CONNECTIONS_MAX;
        Endpoint {
            core: Core::new(config, transport, links.remove(0), rnic, qp_init),
            control,
            cq,
            region,
            mr,
            wcs: vec![Wc::EMPTY; 256],
        }
    }

    /// How long an initiator waits after the MPA Reply before its first
    /// FPDU (0 by default). Linux siw (6.1) sends its Reply before it hands
    /// the socket to its receive path, and an FPDU that lands in between
    /// is not read until another segment arrives: a fast initiator can
    /// stall there (seen with dpwarp, and between siw peers too).
    pub fn set_settle(&mut self, settle: Duration) {
        self.core.config_mut().settle = settle;
    }

    /// The layout of the Terminates our QPs send (RFC 5040's by default).
    pub fn set_terminate_layout(&mut self, layout: rnic_engine::wire::term::Encoding) {
        self.core.config_mut().terminate_layout = layout;
    }

    /// Responder: send FPDUs before the initiator's first one arrived, as
    /// Linux siw does (false by default: RFC 5044 §7.1's MPA fencing). For
    /// ULPs whose passive side sends first (perftest's ib_write_lat) with
    /// an initiator that offers no RFC 6581 RTR.
    pub fn set_unfenced(&mut self, unfenced: bool) {
        self.core.config_mut().unfenced = unfenced;
    }

    /// One turn of the core (see `dataplane::core`). Startups that end
    /// here get their QPs, but those QPs take no octets before the next
    /// turn: the caller sees the handoff first
    /// ([`take_handoffs`](Self::take_handoffs)) and can post receives
    /// before the peer's first message is read.
    pub fn step(&mut self, now: Instant) {
        self.core.turn(now);
    }

    /// The engine.
    pub fn rnic(&mut self) -> &mut Rnic {
        self.core.rnic()
    }

    /// Startups that ended since the last call, each with its QP if it
    /// reached Full Operation.
    pub fn take_handoffs(&mut self) -> Vec<(Handoff, Option<QpHandle>)> {
        std::iter::from_fn(|| self.core.next_handoff()).collect()
    }

    /// Terminates sent and received since the last call, by QP (a QP that
    /// ended in this step is still named).
    pub fn take_events(&mut self) -> Vec<(QpHandle, QpEvent)> {
        std::iter::from_fn(|| self.core.next_event()).collect()
    }

    /// QPs whose connections ended since the last call (already destroyed).
    pub fn take_ended(&mut self) -> Vec<QpHandle> {
        std::iter::from_fn(|| self.core.next_ended()).collect()
    }

    /// Closes QP `qp`'s connection in order (FIN after what is queued).
    pub fn close(&mut self, qp: QpHandle) {
        self.core.close(qp);
    }

    /// Ends QP `qp`'s connection at once (RST): the QP's work flushes and the
    /// QP is destroyed now, so nothing the peer sends later can reach the
    /// memory it used. Reported by [`take_ended`](Self::take_ended).
    pub fn abort(&mut self, qp: QpHandle) {
        self.core.abort(qp);
    }

    /// How the listen on `port` went; `None` until the control plane's
    /// command has reached this core.
    pub fn listen_status(&self, port: u16) -> Option<Result<(), String>> {
        self.core
            .listen_status(port)
            .map(|r| r.map_err(|e| format!("cannot listen on port {port}: {e}")))
    }

    /// Connections in Full Operation or closing.
    pub fn open_connections(&self) -> usize {
        self.core.open_connections()
    }

    /// Whether QP `qp`'s connection is still open (or closing in order).
    pub fn is_live(&self, qp: QpHandle) -> bool {
        self.core.is_live(qp)
    }

    /// Octets QP `qp`'s connection has delivered to the engine (FPDUs of
    /// any kind), while it is live: a measure of the peer's activity that
    /// needs no completion (an RDMA Write or Read Request makes none here).
    pub fn rx_octets(&self, qp: QpHandle) -> Option<u64> {
        self.core.rx_octets(qp)
    }

    /// The TCP connection of QP `qp`.
    pub fn conn_of(&self, qp: QpHandle) -> Option<ConnId> {
        self.core.conn_of(qp)
    }

    /// Completions waiting, into `out`.
    pub fn poll_cq(&mut self, out: &mut Vec<Wc>) {
        loop {
            let n = self.core.poll_cq(self.cq, &mut self.wcs);
            out.extend_from_slice(&self.wcs[..n]);
            if n < self.wcs.len() {
                return;
            }
        }
    }

    /// An SGE of our memory.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
            len,
        }
    }

    /// Our memory as the peer addresses it.
    pub fn remote(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            stag: self.mr.stag,
            to: self.mr.base_to + offset,
        }
    }
}
