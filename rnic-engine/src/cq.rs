//! Completion queues: fixed rings of work completions, with the
//! solicited-event notification of the verbs API (`ibv_req_notify_cq`).

use crate::verbs::QpHandle;

/// How a work request ended (ibverbs' `ibv_wc_status`, the ones an iWARP
/// RNIC produces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// Done.
    Success,
    /// A receive buffer was too small for the message, or a local length
    /// was wrong.
    LocalLength,
    /// A local STag check failed (a scatter/gather entry outside its
    /// region, without local write access, or invalid).
    LocalProtection,
    /// The QP went to Error before the request completed.
    Flushed,
    /// The QP cannot carry the operation (a Read or atomic on a connection
    /// that negotiated ORD 0).
    LocalQpOperation,
    /// The peer refused a remote access (its Terminate said protection).
    RemoteAccess,
    /// The peer could not carry out the operation (other Terminates).
    RemoteOperation,
    /// The invalidation a Send with Invalidate asked for failed.
    RemoteInvalidate,
    /// The peer's response does not match the request: a Read Response
    /// longer or shorter than the Read asked for (RFC 5040 §5.2.2), or
    /// aimed at another STag or TO (ibverbs' `IBV_WC_BAD_RESP_ERR`; Linux
    /// siw reports these as a general error).
    BadResponse,
}

/// What completed (ibverbs' `ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A Send of any kind.
    Send,
    /// An RDMA Write.
    Write,
    /// An RDMA Write followed by Immediate Data.
    WriteWithImmediate,
    /// Immediate Data (with or without SE).
    Immediate,
    /// An RDMA Read.
    Read,
    /// An atomic FetchAdd.
    FetchAdd,
    /// An atomic CmpSwap.
    CmpSwap,
    /// An atomic Swap.
    Swap,
    /// A local invalidation.
    LocalInvalidate,
    /// A fast registration.
    FastRegister,
    /// A received Send.
    Recv,
    /// Received Immediate Data.
    RecvImmediate,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// The queue pair.
    pub qp: QpHandle,
    /// Octets received (receives) or transferred (Reads).
    pub byte_len: u32,
    /// Immediate Data received.
    pub imm: Option<[u8; 8]>,
    /// The STag a received Send with Invalidate invalidated.
    pub invalidated: Option<u32>,
    /// The message asked for a solicited event.
    pub solicited: bool,
}

impl Wc {
    /// A completion slot's filler, for the arrays `poll_cq` writes into
    /// (it means nothing until overwritten).
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        qp: QpHandle(0),
        byte_len: 0,
        imm: None,
        invalidated: None,
        solicited: false,
    };
}

/// Which completions raise the event ([`Cq::take_event`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// The next completion of any kind.
    Next,
    /// The next receive of a message with Solicited Event (and any error).
    Solicited,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    ring: Box<[Option<Wc>]>,
    head: usize,
    len: usize,
    armed: Option<Notify>,
    event: bool,
    overflowed: bool,
}

impl Cq {
    pub(crate) fn new(capacity: usize) -> Cq {
        Cq {
            ring: vec![None; capacity.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
            armed: None,
            event: false,
            overflowed: false,
        }
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether a completion was lost because the queue was full (an
    /// application error: size CQs for every WR that can complete).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Remembers that a completion read out of this queue was lost before
    /// its consumer took it, as one pushed to a full ring is: for a
    /// consumer-side keeper of completions with a bound of its own (the
    /// data plane's core keeps a CQ's completions across a QP's end).
    pub fn note_overflow(&mut self) {
        self.overflowed = true;
    }

    /// Adds a completion; false (and remembered) when the ring is full.
    pub(crate) fn push(&mut self, wc: Wc) -> bool {
        if self.len == self.ring.len() {
            self.overflowed = true;
            return false;
        }
        let at = (self.head + self.len) % self.ring.len();
        self.ring[at] = Some(wc);
        self.len += 1;
        let fires = match self.armed {
            Some(Notify::Next) => true,
            Some(Notify::Solicited) => wc.solicited || wc.status != WcStatus::Success,
            None => false,
        };
        if fires {
            self.armed = None;
            self.event = true;
        }
        true
    }

    /// Moves up to `out.len()` completions into `out`, oldest first.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let n = out.len().min(self.len);
        for slot in out.iter_mut().take(n) {
            *slot = self.ring[self.head].take().expect("counted");
            self.head = (self.head + 1) % self.ring.len();
            self.len -= 1;
        }
        n
    }

    /// Arms the event for the next completion, or the next solicited one.
    pub fn request_notify(&mut self, mode: Notify) {
        self.armed = Some(mode);
    }

    /// Takes the event, if one fired since it was armed.
    pub fn take_event(&mut self) -> bool {
        std::mem::take(&mut self.event)
    }
}
