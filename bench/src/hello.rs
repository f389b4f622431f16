//! What the benchmark's two sides tell each other in MPA private data
//! (RFC 5044 §7.1: up to 512 octets the ULP owns; 508 when RFC 6581's
//! enhanced data takes four): each connection carries one workload, so a
//! server needs no arguments to match its client's.
//!
//! Client's Request (38 octets, big-endian; offsets above the fields):
//!
//! ```text
//!  0      4     5    6     7      8      12      14   16    18     22     30     38
//!  +------+-----+----+-----+------+------+-------+----+-----+------+------+------+
//!  |"DPWB"| ver | op |mode |flags | size | depth | qi | qps | STag |  TO  | run  |
//!  +------+-----+----+-----+------+------+-------+----+-----+------+------+------+
//! ```
//!
//! `qi` is the connection's index among the client's `qps`, which picks its
//! slot of memory on both sides; STag/TO is the client's memory (for the
//! server's replies in latency runs); flag bit 0 marks the client's last
//! size, bit 1 an urgent QP (`--urgent`: the server's core serves it first
//! too); `run` names the client's run (a server serves one run at a time). The server's Reply carries `"DPWB" ver 0 0 0 STag TO` (20
//! octets): its memory. A server that cannot serve the workload rejects with
//! `"DPWB!"` and a line of UTF-8 saying why.

use crate::spec::{Mode, Op, Spec};

const MAGIC: &[u8; 4] = b"DPWB";
const VERSION: u8 = 1;
const REJECT: &[u8; 5] = b"DPWB!";
/// Octets of a client's hello.
pub const CLIENT_LEN: usize = 38;
/// Octets of a server's hello.
pub const SERVER_LEN: usize = 20;

/// One connection's workload, as the client announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientHello {
    /// The operation.
    pub op: Op,
    /// Bandwidth or latency.
    pub mode: Mode,
    /// Message size in octets.
    pub size: u32,
    /// Work requests in flight (receives the server keeps posted).
    pub depth: u16,
    /// This connection's index among the client's QPs.
    pub qi: u16,
    /// The client's QPs in this run.
    pub qps: u16,
    /// The client's last size: it ends after these connections close.
    pub last: bool,
    /// The QP is urgent (`--urgent`): the server's core serves it first.
    pub urgent: bool,
    /// The client's memory: STag.
    pub stag: u32,
    /// The client's memory: tagged offset of its first octet.
    pub to: u64,
    /// The client's run, the same on all its connections.
    pub run: u64,
}

fn op_code(op: Op) -> u8 {
    Op::ALL.iter().position(|&o| o == op).unwrap_or(0) as u8
}

impl ClientHello {
    /// The hello of QP `qi` of `total` running `spec`, the client's memory
    /// at `stag`/`to`; `last`: the client's last size.
    pub fn of(
        spec: &Spec,
        qi: usize,
        total: usize,
        last: bool,
        memory: (u32, u64),
        run: u64,
    ) -> Self {
        ClientHello {
            op: spec.op,
            mode: spec.mode,
            size: spec.size as u32,
            depth: spec.depth as u16,
            qi: qi as u16,
            qps: total as u16,
            last,
            urgent: spec.urgent,
            stag: memory.0,
            to: memory.1,
            run,
        }
    }

    /// Its octets.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(CLIENT_LEN);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(op_code(self.op));
        out.push(match self.mode {
            Mode::Bandwidth => 0,
            Mode::Latency => 1,
        });
        out.push(u8::from(self.last) | u8::from(self.urgent) << 1);
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.depth.to_be_bytes());
        out.extend_from_slice(&self.qi.to_be_bytes());
        out.extend_from_slice(&self.qps.to_be_bytes());
        out.extend_from_slice(&self.stag.to_be_bytes());
        out.extend_from_slice(&self.to.to_be_bytes());
        out.extend_from_slice(&self.run.to_be_bytes());
        out
    }

    /// Reads a client's hello, saying what is wrong with it.
    pub fn decode(pd: &[u8]) -> Result<ClientHello, String> {
        if pd.len() < CLIENT_LEN || &pd[..4] != MAGIC {
            return Err(format!(
                "the client is not a dpwarp bench client ({} octets of private data, \
                 not a {CLIENT_LEN}-octet bench hello)",
                pd.len()
            ));
        }
        if pd[4] != VERSION {
            return Err(format!(
                "the client speaks bench hello version {}, this server {VERSION}",
                pd[4]
            ));
        }
        let op = *Op::ALL
            .get(pd[5] as usize)
            .ok_or_else(|| format!("unknown operation code {}", pd[5]))?;
        let mode = match pd[6] {
            0 => Mode::Bandwidth,
            1 => Mode::Latency,
            m => return Err(format!("unknown mode code {m}")),
        };
        let be16 = |at: usize| u16::from_be_bytes([pd[at], pd[at + 1]]);
        let be32 = |at: usize| u32::from_be_bytes([pd[at], pd[at + 1], pd[at + 2], pd[at + 3]]);
        let be64 = |at: usize| {
            let mut word = [0; 8];
            word.copy_from_slice(&pd[at..at + 8]);
            u64::from_be_bytes(word)
        };
        Ok(ClientHello {
            op,
            mode,
            last: pd[7] & 1 != 0,
            urgent: pd[7] & 2 != 0,
            size: be32(8),
            depth: be16(12),
            qi: be16(14),
            qps: be16(16),
            stag: be32(18),
            to: be64(22),
            run: be64(30),
        })
    }
}

/// The server's memory, in its Reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    /// STag of the server's memory.
    pub stag: u32,
    /// Tagged offset of its first octet.
    pub to: u64,
}

impl ServerHello {
    /// Its octets.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SERVER_LEN);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&[VERSION, 0, 0, 0]);
        out.extend_from_slice(&self.stag.to_be_bytes());
        out.extend_from_slice(&self.to.to_be_bytes());
        out
    }

    /// Reads a server's hello.
    pub fn decode(pd: &[u8]) -> Result<ServerHello, String> {
        if pd.len() < SERVER_LEN || &pd[..4] != MAGIC || pd[4] != VERSION {
            return Err(format!(
                "the server is not a dpwarp bench server of hello version {VERSION} \
                 ({} octets of private data)",
                pd.len()
            ));
        }
        let mut stag = [0; 4];
        stag.copy_from_slice(&pd[8..12]);
        let mut to = [0; 8];
        to.copy_from_slice(&pd[12..20]);
        Ok(ServerHello {
            stag: u32::from_be_bytes(stag),
            to: u64::from_be_bytes(to),
        })
    }
}

/// A server's refusal, as private data.
pub fn encode_reject(why: &str) -> Vec<u8> {
    let mut out = REJECT.to_vec();
    let room = 500 - REJECT.len();
    let mut end = why.len().min(room);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    out.extend_from_slice(&why.as_bytes()[..end]);
    out
}

/// Why a server refused, from its Reject's private data.
pub fn decode_reject(pd: &[u8]) -> String {
    match pd.strip_prefix(REJECT.as_slice()) {
        Some(why) => String::from_utf8_lossy(why).into_owned(),
        None => format!(
            "the server rejected the connection ({} octets of private data, not a bench server's)",
            pd.len()
        ),
    }
}
