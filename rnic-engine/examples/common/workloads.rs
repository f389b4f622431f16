//! The engine benchmark's workloads, shared by `examples/engine_table.rs`
//! and `benches/engine.rs` (included with `#[path]`): RDMA Write, Read and
//! Send through an `RnicPair` on one core, and the framer alone on the same
//! octets.
#![allow(dead_code)] // Each user takes what it needs.

use rnic_engine::cq::Wc;
use rnic_engine::mem::{Access, Region};
use rnic_engine::mpa::rx::{Deframer, Poll, RxConfig};
use rnic_engine::mpa::tx::{Framer, TxConfig};
use rnic_engine::pair::{Link, PairConfig, RnicPair};
use rnic_engine::verbs::{Mr, RecvWr, RemoteAddr, SendOp, SendWr, Sge};
use rnic_engine::wire::ddp;
use std::sync::Arc;

/// Which operation a workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Write,
    Read,
    Send,
}

/// Messages per call for small sizes, so that one call is long enough to
/// time and the link carries full segments, as a busy QP's would.
pub(crate) fn batch(size: usize) -> usize {
    (16384 / size.max(1)).clamp(1, 64)
}

/// A pair with `batch` messages of `size` octets ready to post.
pub(crate) struct EngineWorkload {
    pair: RnicPair,
    kind: Kind,
    size: usize,
    batch: usize,
    a_mr: Mr,
    b_mr: Mr,
    /// Kept alive for the registrations.
    _regions: (Arc<Region>, Arc<Region>),
    wcs: Vec<Wc>,
}

impl EngineWorkload {
    /// Both RNICs frame jumbo FPDUs in one pass or copy and then fold
    /// (`Rnic::set_one_pass_framing`).
    pub(crate) fn set_one_pass_framing(&mut self, enabled: bool) {
        self.pair.a.rnic.set_one_pass_framing(enabled);
        self.pair.b.rnic.set_one_pass_framing(enabled);
    }

    /// `window`: octets per transfer (0: one segment).
    pub(crate) fn new(kind: Kind, size: usize, emss: usize, window: usize) -> EngineWorkload {
        EngineWorkload::with_link(kind, size, emss, window, Link::Window)
    }

    /// As [`EngineWorkload::new`], FPDUs taken from the sender by `link`
    /// (`Link::Segments`: aligned to the TCP segments the link models).
    pub(crate) fn with_link(
        kind: Kind,
        size: usize,
        emss: usize,
        window: usize,
        link: Link,
    ) -> EngineWorkload {
        let config = PairConfig {
            crc: true,
            markers: false,
            emss,
            window,
            queue_size: 256,
            cq_size: 256,
            link,
            ..PairConfig::default()
        };
        let mut pair = RnicPair::new(config).expect("pair");
        let batch = batch(size);
        let all = Access::LOCAL_WRITE
            .union(Access::REMOTE_WRITE)
            .union(Access::REMOTE_READ);
        let (a_region, a_mr) = pair.a.region(size * batch, all).expect("region");
        let (b_region, b_mr) = pair.b.region(size * batch, all).expect("region");
        let data: Vec<u8> = (0..size * batch)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
            .collect();
        a_region.write(0, &data).expect("fits");
        b_region.write(0, &data).expect("fits");
        let wc = Wc::EMPTY;
        EngineWorkload {
            pair,
            kind,
            size,
            batch,
            a_mr,
            b_mr,
            _regions: (a_region, b_region),
            wcs: vec![wc; 64],
        }
    }

    /// Messages one [`EngineWorkload::call`] moves.
    pub(crate) fn batch(&self) -> usize {
        self.batch
    }

    /// Posts one batch, moves it to completion and drains the CQs.
    pub(crate) fn call(&mut self) {
        let (size, a_qp, b_qp) = (self.size, self.pair.a.qp, self.pair.b.qp);
        for i in 0..self.batch {
            let at = (i * size) as u64;
            let local = [Sge {
                stag: self.a_mr.stag,
                to: at,
                len: size as u32,
            }];
            let remote = RemoteAddr {
                stag: self.b_mr.stag,
                to: at,
            };
            let op = match self.kind {
                Kind::Write => SendOp::Write(remote),
                Kind::Read => SendOp::Read(remote),
                Kind::Send => {
                    let sgl = [Sge {
                        stag: self.b_mr.stag,
                        to: at,
                        len: size as u32,
                    }];
                    self.pair
                        .b
                        .rnic
                        .post_recv(
                            b_qp,
                            &RecvWr {
                                wr_id: i as u64,
                                sgl: &sgl,
                            },
                        )
                        .expect("receive");
                    SendOp::Send
                }
            };
            // Signal the last one only, as a throughput test would.
            let signaled = i + 1 == self.batch;
            let wr = SendWr {
                wr_id: i as u64,
                op,
                sgl: &local,
                signaled,
                solicited: false,
                fence: false,
            };
            self.pair.a.rnic.post_send(a_qp, &wr).expect("post");
        }
        while self.pair.step() > 0 {}
        let got = self
            .pair
            .a
            .rnic
            .poll_cq(self.pair.a.cq, &mut self.wcs)
            .expect("cq");
        assert_eq!(got, 1, "the batch completed");
        if self.kind == Kind::Send {
            let got = self
                .pair
                .b
                .rnic
                .poll_cq(self.pair.b.cq, &mut self.wcs)
                .expect("cq");
            assert_eq!(got, self.batch, "every receive completed");
        }
    }

    /// Octets of payload moved per call.
    pub(crate) fn octets(&self) -> usize {
        self.size * self.batch
    }
}

/// The framer alone on the same octets: every message cut into the same
/// tagged segments, framed from a plain buffer into one segment buffer,
/// deframed (CRC checked) and its payload copied to a plain destination:
/// what any receiver of these octets must do, without RDMAP/DDP.
pub(crate) struct FramerWorkload {
    framer: Framer,
    deframer: Deframer,
    source: Vec<u8>,
    sink: Vec<u8>,
    segment: Vec<u8>,
    sink_at: usize,
    size: usize,
    batch: usize,
}

impl FramerWorkload {
    /// `window`: octets per transfer (0: one segment).
    pub(crate) fn new(size: usize, emss: usize, window: usize) -> FramerWorkload {
        let batch = batch(size);
        let framer = Framer::new(TxConfig {
            crc: true,
            markers: false,
            emss,
        })
        .expect("framer");
        let deframer = Deframer::new(RxConfig {
            crc: true,
            markers: false,
            ulpdu_max: 65535,
        });
        let source: Vec<u8> = (0..size * batch)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761) as u8)
            .collect();
        FramerWorkload {
            framer,
            deframer,
            sink: vec![0; size * batch],
            segment: vec![0; if window == 0 { emss } else { window.max(emss) }],
            sink_at: 0,
            source,
            size,
            batch,
        }
    }

    pub(crate) fn call(&mut self) {
        let per_segment = self.framer.mulpdu() - ddp::TAGGED_HEADER_LEN;
        let header = [0x41u8, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut at = 0;
        let mut used = 0;
        for message in 0..self.batch {
            let end = (message + 1) * self.size;
            loop {
                let n = (end - at).min(per_segment);
                let room = self.segment.len() - used;
                if self.framer.wire_len(header.len() + n) > room {
                    self.receive(used);
                    used = 0;
                }
                let source = &self.source;
                let written = self
                    .framer
                    .frame_with(&header, n, &mut self.segment[used..], |offset, dst| {
                        dst.copy_from_slice(&source[at + offset..at + offset + dst.len()])
                    })
                    .expect("fits");
                used += written;
                at += n;
                if at == end {
                    break;
                }
            }
        }
        self.receive(used);
    }

    fn receive(&mut self, len: usize) {
        let mut input = &self.segment[..len];
        while !input.is_empty() {
            let (used, poll) = self.deframer.poll(input);
            input = &input[used..];
            match poll {
                Poll::Ulpdu(ulpdu) => {
                    let payload = &ulpdu[ddp::TAGGED_HEADER_LEN..];
                    // Where DDP would place it: the next octets of the sink.
                    let to = self.sink_at;
                    self.sink_at = (to + payload.len()) % self.sink.len().max(1);
                    let end = (to + payload.len()).min(self.sink.len());
                    self.sink[to..end].copy_from_slice(&payload[..end - to]);
                }
                Poll::NeedMore => break,
                Poll::Error(e) => panic!("deframer: {e:?}"),
            }
        }
    }

    pub(crate) fn octets(&self) -> usize {
        self.size * self.batch
    }
}
