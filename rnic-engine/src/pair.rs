//! Two RNICs back to back: a deterministic harness for tests, benchmarks
//! and the embedded default of the benchmark (STYLE.md §6, after quinn's
//! `Pair`).
//!
//! Each side has one RNIC, one protection domain and one CQ, and a QP (more
//! with [`RnicPair::add_qp`]). The "link" moves what
//! [`Rnic::poll_transmit`] writes, one EMSS-sized segment (or a window of
//! FPDUs) at a time, into the other side's [`Rnic::handle_stream`],
//! optionally cut into pieces of seeded random sizes (any TCP
//! segmentation must work). No TCP, no clock, no threads.

use crate::cq::Wc;
use crate::mem::{Access, Pd, Region};
use crate::verbs::{Connection, CqHandle, Mr, QpHandle, QpInit, Rnic, RnicConfig, VerbError};
use std::sync::Arc;

/// How to build a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairConfig {
    /// MPA CRC.
    pub crc: bool,
    /// MPA markers (both directions).
    pub markers: bool,
    /// TCP effective MSS.
    pub emss: usize,
    /// IRD and ORD of both sides.
    pub ird_ord: u16,
    /// Send and receive queue depth.
    pub queue_size: usize,
    /// Completion queue depth.
    pub cq_size: usize,
    /// Octets one transfer may carry: whole FPDUs of at most an EMSS each,
    /// as many as fit, the way the data plane hands the engine the room of
    /// its TCP send window (0: one EMSS, one segment at a time).
    pub window: usize,
    /// Cut each transfer into random pieces of at most this many octets
    /// (0: deliver transfers whole).
    pub cut_max: usize,
    /// Seed of the cutting and of the STag keys.
    pub seed: u64,
}

impl Default for PairConfig {
    fn default() -> PairConfig {
        PairConfig {
            crc: true,
            markers: false,
            emss: 1448,
            ird_ord: 16,
            queue_size: 256,
            cq_size: 1024,
            window: 0,
            cut_max: 0,
            seed: 1,
        }
    }
}

/// One end of the pair.
#[derive(Debug)]
pub struct Side {
    /// The RNIC.
    pub rnic: Rnic,
    /// Its protection domain.
    pub pd: Pd,
    /// The first QP.
    pub qp: QpHandle,
    /// The CQ of all its queues.
    pub cq: CqHandle,
}

impl Side {
    fn new(config: &PairConfig, seed: u64) -> Result<Side, VerbError> {
        let mut rnic = Rnic::new(RnicConfig {
            stag_seed: seed,
            ..RnicConfig::default()
        });
        let pd = rnic.alloc_pd()?;
        let cq = rnic.create_cq(config.cq_size)?;
        let mut side = Side {
            rnic,
            pd,
            qp: QpHandle(0),
            cq,
        };
        side.qp = side.add_qp(config)?;
        Ok(side)
    }

    fn add_qp(&mut self, config: &PairConfig) -> Result<QpHandle, VerbError> {
        let qp = self.rnic.create_qp(QpInit {
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            sq_size: config.queue_size,
            rq_size: config.queue_size,
        })?;
        self.rnic.connect(qp, connection(config))?;
        Ok(qp)
    }

    /// Registers a new zeroed region of `len` octets with `access`.
    pub fn region(&mut self, len: usize, access: Access) -> Result<(Arc<Region>, Mr), VerbError> {
        let region = Region::new(len);
        let mr = self.rnic.reg_region(self.pd, region.clone(), access)?;
        Ok((region, mr))
    }

    /// Takes every completion waiting.
    pub fn completions(&mut self) -> Vec<Wc> {
        let mut out = Vec::new();
        let mut batch = [Wc {
            wr_id: 0,
            status: crate::cq::WcStatus::Success,
            opcode: crate::cq::WcOpcode::Send,
            qp: self.qp,
            byte_len: 0,
            imm: None,
            invalidated: None,
            solicited: false,
        }; 32];
        loop {
            let n = self.rnic.poll_cq(self.cq, &mut batch).unwrap_or(0);
            out.extend_from_slice(&batch[..n]);
            if n < batch.len() {
                return out;
            }
        }
    }
}

/// The connection parameters both sides of a pair negotiated.
pub fn connection(config: &PairConfig) -> Connection {
    Connection {
        crc: config.crc,
        markers_tx: config.markers,
        markers_rx: config.markers,
        emss: config.emss,
        ird: config.ird_ord,
        ord: config.ird_ord,
        ulpdu_max: 65535,
        rtr_send: None,
        rtr_accept: super::qp::RtrSet::NONE,
        fenced: false,
        terminate_layout: crate::wire::term::Encoding::Rfc5040,
    }
}

/// Two connected RNICs.
#[derive(Debug)]
pub struct RnicPair {
    /// The first side.
    pub a: Side,
    /// The second side.
    pub b: Side,
    config: PairConfig,
    /// Connected QPs: `a`'s and `b`'s handle of each.
    links: Vec<(QpHandle, QpHandle)>,
    segment: Vec<u8>,
    rng: u64,
    /// Octets moved from `a` to `b` and back.
    pub moved: [u64; 2],
}

impl RnicPair {
    /// Two sides, connected with the configuration's parameters.
    pub fn new(config: PairConfig) -> Result<RnicPair, VerbError> {
        let a = Side::new(&config, config.seed)?;
        let b = Side::new(&config, config.seed.wrapping_mul(31).wrapping_add(7))?;
        Ok(RnicPair {
            links: vec![(a.qp, b.qp)],
            a,
            b,
            segment: vec![
                0u8;
                if config.window == 0 {
                    config.emss
                } else {
                    config.window.max(config.emss)
                }
            ],
            rng: config.seed | 1,
            config,
            moved: [0, 0],
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PairConfig {
        &self.config
    }

    /// Connects one more QP on each side (same PD and CQ); returns `a`'s
    /// and `b`'s handle.
    pub fn add_qp(&mut self) -> Result<(QpHandle, QpHandle), VerbError> {
        let link = (self.a.add_qp(&self.config)?, self.b.add_qp(&self.config)?);
        self.links.push(link);
        Ok(link)
    }

    /// Joins a QP of `a` and a QP of `b` (created and connected by the
    /// caller, for QPs the pair's defaults do not fit, such as SRQ users).
    pub fn link(&mut self, a: QpHandle, b: QpHandle) {
        self.links.push((a, b));
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// Moves at most one transfer (a segment, or a window) each way on
    /// every connection; returns the octets moved.
    pub fn step(&mut self) -> usize {
        let mut moved = 0;
        for index in 0..self.links.len() {
            for forward in [true, false] {
                moved += self.transfer(index, forward);
            }
        }
        moved
    }

    fn transfer(&mut self, link: usize, forward: bool) -> usize {
        let (qp_a, qp_b) = self.links[link];
        let (from, from_qp, to_qp) = if forward {
            (&mut self.a, qp_a, qp_b)
        } else {
            (&mut self.b, qp_b, qp_a)
        };
        let n = from
            .rnic
            .poll_transmit(from_qp, &mut self.segment)
            .unwrap_or(0);
        if n == 0 {
            return 0;
        }
        let cut_max = self.config.cut_max;
        let mut at = 0;
        while at < n {
            let piece = if cut_max == 0 {
                n - at
            } else {
                (self.next() as usize % cut_max + 1).min(n - at)
            };
            let to = if forward { &mut self.b } else { &mut self.a };
            let _ = to.rnic.handle_stream(to_qp, &self.segment[at..at + piece]);
            at += piece;
        }
        self.moved[usize::from(!forward)] += n as u64;
        n
    }

    /// Steps until nothing moves, at most `steps_max` times; returns the
    /// steps taken.
    pub fn run(&mut self, steps_max: usize) -> usize {
        for step in 0..steps_max {
            if self.step() == 0 {
                return step;
            }
        }
        steps_max
    }
}
