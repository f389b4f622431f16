//! The server's side of every workload, the same in process and in a
//! `bench --server`: it keeps receives posted for Sends and Immediates, and
//! in latency runs answers each ping (perftest's *_lat pong): a Send with a
//! Send, a Write with Immediate with one, and a Write with a Write once the
//! last octet of the client's Write has landed.

use dataplane::CoreTransport;
use rnic_engine::cq::{Wc, WcOpcode, WcStatus};
use rnic_engine::verbs::{QpHandle, RecvWr, RemoteAddr, SendOp, SendWr};

use crate::hello::ClientHello;
use crate::rig::Endpoint;
use crate::workload::{credit_offset, half, slot, Mode, Op};

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
    fn report_credit<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>) -> Result<(), String> {
        if self.mode != Mode::Bandwidth
            || self.consumed - self.reported < (self.depth as u64 / 4).max(1)
        {
            return Ok(());
        }
        ep.region
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

    fn post_receive<T: CoreTransport>(&self, ep: &mut Endpoint<T>, id: u64) -> Result<(), String> {
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
    fn reply<T: CoreTransport>(
        &self,
        ep: &mut Endpoint<T>,
        id: u64,
        len: usize,
    ) -> Result<(), String> {
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
    wcs: Vec<Wc>,
}

impl Responder {
    /// Starts serving `s`: clears the octets Write latency watches and posts
    /// the receives its workload consumes. Call it before the QP reads its
    /// first octet ([`Endpoint::step`] allows that).
    pub fn add<T: CoreTransport>(&mut self, ep: &mut Endpoint<T>, s: Served) {
        if s.op == Op::Write && s.mode == Mode::Latency {
            let h = half(s.size) as u64;
            let _ = ep.region.write((s.base + s.size as u64 - 1) as usize, &[0]);
            let _ = ep
                .region
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
        self.served.push(s);
    }

    /// Stops serving `qp`.
    pub fn remove(&mut self, qp: QpHandle) {
        self.served.retain(|s| s.qp != qp);
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
    pub fn step<T: CoreTransport>(
        &mut self,
        ep: &mut Endpoint<T>,
    ) -> Result<(), (QpHandle, String)> {
        self.wcs.clear();
        ep.poll_cq(&mut self.wcs);
        for wc in &self.wcs {
            let Some(s) = self.served.iter_mut().find(|s| s.qp == wc.qp) else {
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
        for s in &mut self.served {
            if s.op != Op::Write || s.mode != Mode::Latency {
                continue;
            }
            let mut last = [0];
            let at = (s.base + s.size as u64 - 1) as usize;
            if ep.region.read(at, &mut last).is_err() || last[0] == 0 || last[0] == s.marker {
                continue;
            }
            // The ping landed (its last octet is new): pong with the same
            // marker at the end of ours.
            s.marker = last[0];
            let h = half(s.size) as u64;
            let _ = ep
                .region
                .write((s.base + h + s.size as u64 - 1) as usize, &last);
            s.reply(ep, u64::from(last[0]), s.size)
                .map_err(|e| (s.qp, e))?;
        }
        Ok(())
    }
}
