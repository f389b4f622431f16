//! A script of one TCP connection as reassembly reports it, and a driver
//! that feeds it to `dpwarp_pcap::decode::Decoder`.
//!
//! # Format
//!
//! ```text
//! flags (1)        bit 0: the server port is named with --port (forced)
//!                  bit 1: --all
//! then records until the input ends:
//! op (1)           op % 10: 0/1 Data client->server / server->client
//!                           2/3 Gap  c->s / s->c
//!                           4/5 Fin  c->s / s->c
//!                           6/7 Rst  c->s / s->c
//!                           8/9 SYN  (client SYN / server SYN-ACK)
//! len (2, BE)      Data: octets that follow (cut short by the input's end)
//!                  Gap: missing octets minus one (a gap is never empty)
//!                  others: ignored
//! data (len)       Data only
//! ```
//!
//! The driver keeps the reassembly contract (`dpwarp_capture::reassembly`):
//! per direction, Data and Gap events are contiguous from stream offset 0,
//! nothing follows a Fin, Rst is reported once, a SYN comes before data.
//! Records that would break it are skipped, so every input is a stream the
//! real pipeline could deliver.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use dpwarp_capture::packet::{TcpSegment, WindowScale};
use dpwarp_capture::reassembly::{ConnId, ConnInfo, Dir, Event};
use dpwarp_pcap::decode::{Decoder, Message, Options, Summary};

/// The server's TCP port in every script (rping's default).
pub const SERVER_PORT: u16 = 7174;
/// The client's TCP port.
pub const CLIENT_PORT: u16 = 50_000;

const FLAG_FORCED: u8 = 0x01;
const FLAG_ALL: u8 = 0x02;
const OPS: u8 = 10;

/// One record of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// The next octets of a direction.
    Data(Dir, &'a [u8]),
    /// Octets of a direction missing from the capture (at least 1).
    Gap(Dir, u64),
    /// A FIN, after all octets of the direction.
    Fin(Dir),
    /// An RST travelling in the direction.
    Rst(Dir),
    /// The client's SYN (`ClientToServer`) or the server's SYN-ACK.
    Syn(Dir),
}

/// A parsed script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Script<'a> {
    /// `--port 7174`: the connection is iWARP even without MPA startup.
    pub forced: bool,
    /// `--all`.
    pub all: bool,
    /// The records, in capture order.
    pub ops: Vec<Op<'a>>,
}

fn dir_of(op: u8) -> Dir {
    if op & 1 == 0 {
        Dir::ClientToServer
    } else {
        Dir::ServerToClient
    }
}

fn dir_bit(dir: Dir) -> u8 {
    match dir {
        Dir::ClientToServer => 0,
        Dir::ServerToClient => 1,
    }
}

fn index(dir: Dir) -> usize {
    usize::from(dir_bit(dir))
}

impl<'a> Script<'a> {
    /// Reads a script; every byte string is one.
    pub fn parse(input: &'a [u8]) -> Script<'a> {
        let Some((&flags, mut rest)) = input.split_first() else {
            return Script::default();
        };
        let mut ops = Vec::new();
        while let Some((&op, tail)) = rest.split_first() {
            let (len, tail) = match tail {
                [a, b, tail @ ..] => (usize::from(u16::from_be_bytes([*a, *b])), tail),
                _ => (0, &[][..]),
            };
            rest = tail;
            let dir = dir_of(op);
            ops.push(match op % OPS {
                0 | 1 => {
                    let (data, tail) = rest.split_at(len.min(rest.len()));
                    rest = tail;
                    Op::Data(dir, data)
                }
                2 | 3 => Op::Gap(dir, len as u64 + 1),
                4 | 5 => Op::Fin(dir),
                6 | 7 => Op::Rst(dir),
                _ => Op::Syn(dir),
            });
        }
        Script {
            forced: flags & FLAG_FORCED != 0,
            all: flags & FLAG_ALL != 0,
            ops,
        }
    }

    /// Writes the script in the format [`Script::parse`] reads. Data longer
    /// than 65535 octets becomes several records; a gap longer than 65536
    /// octets is cut to 65536.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![(u8::from(self.forced) * FLAG_FORCED) | (u8::from(self.all) * FLAG_ALL)];
        let record = |out: &mut Vec<u8>, kind: u8, dir: Dir, len: u16| {
            out.push(kind + dir_bit(dir));
            out.extend_from_slice(&len.to_be_bytes());
        };
        for op in &self.ops {
            match *op {
                Op::Data(dir, []) => record(&mut out, 0, dir, 0),
                Op::Data(dir, bytes) => {
                    for chunk in bytes.chunks(usize::from(u16::MAX)) {
                        record(&mut out, 0, dir, chunk.len() as u16);
                        out.extend_from_slice(chunk);
                    }
                }
                Op::Gap(dir, len) => record(&mut out, 2, dir, (len.clamp(1, 65_536) - 1) as u16),
                Op::Fin(dir) => record(&mut out, 4, dir, 0),
                Op::Rst(dir) => record(&mut out, 6, dir, 0),
                Op::Syn(dir) => record(&mut out, 8, dir, 0),
            }
        }
        out
    }

    /// Whether the script has a Gap record (gaps make the decoder
    /// resynchronise at segment starts, so cutting data differently may
    /// legitimately change the output).
    pub fn has_gap(&self) -> bool {
        self.ops.iter().any(|op| matches!(op, Op::Gap(..)))
    }

    /// Octets of data in the script.
    pub fn data_len(&self) -> usize {
        self.ops
            .iter()
            .map(|op| match op {
                Op::Data(_, d) => d.len(),
                _ => 0,
            })
            .sum()
    }
}

/// The endpoints of the scripted connection.
pub fn endpoints() -> (SocketAddr, SocketAddr) {
    let client = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), CLIENT_PORT);
    let server = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), SERVER_PORT);
    (client, server)
}

/// How [`drive`] cuts each Data record into reassembly events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cutting {
    /// One event per record, as the script says.
    AsScripted,
    /// One event per octet, each carrying its record's frame, time and
    /// sequence number: the same stream, cut everywhere.
    EveryOctet,
}

/// What a decode produced.
#[derive(Debug)]
pub struct Outcome {
    /// Every message, in the order the decoder gave them.
    pub messages: Vec<Message>,
    /// The decoder's counters.
    pub summary: Summary,
    /// For every Fin and Rst the script delivered: its direction, frame and
    /// the stream offset it came at (all octets and gaps before it).
    pub tcp_ends: Vec<(Dir, u64, u64)>,
}

/// Feeds `script` to a fresh decoder and collects everything it says.
pub fn drive(script: &Script<'_>, cutting: Cutting) -> Outcome {
    let (client, server) = endpoints();
    let options = Options {
        ports: if script.forced {
            vec![SERVER_PORT]
        } else {
            Vec::new()
        },
        all: script.all,
    };
    let mut decoder = Decoder::new(options);
    let mut messages = Vec::new();
    let conn = ConnId(0);
    decoder.handle_event(&Event::Open {
        conn,
        info: ConnInfo {
            id: conn,
            client,
            server,
        },
    });
    // Initial sequence numbers: client data starts at 1001, server at 5001.
    let isn = [1000u32, 5000u32];
    let mut offset = [0u64; 2];
    let mut fin = [false; 2];
    let mut rst = [false; 2];
    let mut syn = [false; 2];
    let mut tcp_ends = Vec::new();
    for (i, op) in script.ops.iter().enumerate() {
        let frame = i as u64 + 1;
        let ts_ns = frame * 1_000;
        decoder.begin_record(ts_ns);
        match *op {
            Op::Data(dir, bytes) => {
                let d = index(dir);
                if fin[d] || bytes.is_empty() {
                    continue;
                }
                let mut event = |at: u64, data: &[u8]| {
                    decoder.handle_event(&Event::Data {
                        conn,
                        dir,
                        frame,
                        ts_ns,
                        seq: isn[d].wrapping_add(1).wrapping_add(at as u32),
                        offset: at,
                        data: data.to_vec(),
                    });
                };
                match cutting {
                    Cutting::AsScripted => event(offset[d], bytes),
                    Cutting::EveryOctet => {
                        for (k, octet) in bytes.chunks(1).enumerate() {
                            event(offset[d] + k as u64, octet);
                        }
                    }
                }
                offset[d] += bytes.len() as u64;
            }
            Op::Gap(dir, len) => {
                let d = index(dir);
                if fin[d] {
                    continue;
                }
                decoder.handle_event(&Event::Gap {
                    conn,
                    dir,
                    frame,
                    offset: offset[d],
                    len,
                });
                offset[d] += len;
            }
            Op::Fin(dir) => {
                let d = index(dir);
                if fin[d] {
                    continue;
                }
                fin[d] = true;
                tcp_ends.push((dir, frame, offset[d]));
                decoder.handle_event(&Event::Fin { conn, dir, frame });
            }
            Op::Rst(dir) => {
                let d = index(dir);
                if rst[d] {
                    continue;
                }
                rst[d] = true;
                tcp_ends.push((dir, frame, offset[d]));
                decoder.handle_event(&Event::Rst { conn, dir, frame });
            }
            Op::Syn(dir) => {
                let d = index(dir);
                if syn[d] || offset[d] != 0 || fin[d] {
                    continue;
                }
                syn[d] = true;
                let (src, dst) = match dir {
                    Dir::ClientToServer => (client, server),
                    Dir::ServerToClient => (server, client),
                };
                let segment = TcpSegment {
                    src,
                    dst,
                    seq: isn[d],
                    ack: 0,
                    syn: true,
                    ack_flag: dir == Dir::ServerToClient,
                    fin: false,
                    rst: false,
                    psh: false,
                    window: 65_535,
                    window_scale: WindowScale::Absent,
                    payload: &[],
                    payload_wire_len: 0,
                    payload_truncated: false,
                };
                decoder.handle_segment(frame, ts_ns, &segment);
            }
        }
        messages.extend(decoder.drain());
    }
    decoder.finish();
    messages.extend(decoder.drain());
    Outcome {
        messages,
        summary: decoder.summary(),
        tcp_ends,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_parse_round_trip() {
        let script = Script {
            forced: true,
            all: false,
            ops: vec![
                Op::Syn(Dir::ClientToServer),
                Op::Data(Dir::ClientToServer, b"MPA ID Req Frame"),
                Op::Gap(Dir::ServerToClient, 7),
                Op::Data(Dir::ServerToClient, b""),
                Op::Fin(Dir::ServerToClient),
                Op::Rst(Dir::ClientToServer),
            ],
        };
        assert_eq!(Script::parse(&script.encode()), script);
    }
}
