use crate::StreamId;
use crate::chunk::chunk_payload_data::{ChunkPayloadData, PayloadProtocolIdentifier};
use crate::error::{Error, Result};
use crate::util::*;

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;
use bytes::{Bytes, BytesMut};
use core::cmp::Ordering;

fn sort_chunks_by_tsn(c: &mut [ChunkPayloadData]) {
    c.sort_by(|a, b| {
        if sna32lt(a.tsn, b.tsn) {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    });
}

fn sort_chunks_by_ssn(c: &mut [Chunks]) {
    c.sort_by(|a, b| {
        if sna16lt(a.ssn, b.ssn) {
            Ordering::Less
        } else {
            Ordering::Greater
        }
    });
}

/// A chunk of data from the stream
#[derive(Debug, PartialEq)]
pub struct Chunk {
    /// The contents of the chunk
    pub bytes: Bytes,
}

/// Chunks is a set of chunks that share the same SSN
#[derive(Default, Debug, Clone)]
pub struct Chunks {
    /// used only with the ordered chunks
    pub(crate) ssn: u16,
    pub ppi: PayloadProtocolIdentifier,
    pub chunks: Vec<ChunkPayloadData>,
    offset: usize,
    index: usize,
}

impl Chunks {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> usize {
        let mut l = 0;
        for c in &self.chunks {
            l += c.user_data.len();
        }
        l
    }

    /// The message's octets: the DATA chunk's own buffer, with no copy,
    /// when the message came in one chunk (a slice of the received packet);
    /// the fragments joined into a new buffer otherwise.
    pub fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [one] => one.user_data.clone(),
            many => {
                let mut joined = BytesMut::with_capacity(self.len());
                for c in many {
                    joined.extend_from_slice(&c.user_data);
                }
                joined.freeze()
            }
        }
    }

    // Concat all fragments into the buffer
    pub fn read(&self, buf: &mut [u8]) -> Result<usize> {
        let mut n_written = 0;
        for c in &self.chunks {
            let to_copy = c.user_data.len();
            let n = core::cmp::min(to_copy, buf.len() - n_written);
            buf[n_written..n_written + n].copy_from_slice(&c.user_data[..n]);
            n_written += n;
            if n < to_copy {
                return Err(Error::ErrShortBuffer);
            }
        }
        Ok(n_written)
    }

    pub fn next(&mut self, max_length: usize) -> Option<Chunk> {
        if self.index >= self.chunks.len() {
            return None;
        }

        let mut buf = BytesMut::with_capacity(max_length);

        let mut n_written = 0;
        while self.index < self.chunks.len() {
            let to_copy = self.chunks[self.index].user_data[self.offset..].len();
            let n = core::cmp::min(to_copy, max_length - n_written);
            buf.extend_from_slice(&self.chunks[self.index].user_data[self.offset..self.offset + n]);
            n_written += n;
            if n < to_copy {
                self.offset += n;
                return Some(Chunk {
                    bytes: buf.freeze(),
                });
            }
            self.index += 1;
            self.offset = 0;
        }

        Some(Chunk {
            bytes: buf.freeze(),
        })
    }

    pub(crate) fn new(
        ssn: u16,
        ppi: PayloadProtocolIdentifier,
        chunks: Vec<ChunkPayloadData>,
    ) -> Self {
        Chunks {
            ssn,
            ppi,
            chunks,
            offset: 0,
            index: 0,
        }
    }

    pub(crate) fn push(&mut self, chunk: ChunkPayloadData) -> bool {
        // check if dup
        for c in &self.chunks {
            if c.tsn == chunk.tsn {
                return false;
            }
        }

        // append and sort
        self.chunks.push(chunk);
        sort_chunks_by_tsn(&mut self.chunks);

        // Check if we now have a complete set
        self.is_complete()
    }

    pub(crate) fn is_complete(&self) -> bool {
        // Condition for complete set
        //   0. Has at least one chunk.
        //   1. Begins with beginningFragment set to true
        //   2. Ends with endingFragment set to true
        //   3. TSN monotinically increase by 1 from beginning to end

        // 0.
        let n_chunks = self.chunks.len();
        if n_chunks == 0 {
            return false;
        }

        // 1.
        if !self.chunks[0].beginning_fragment {
            return false;
        }

        // 2.
        if !self.chunks[n_chunks - 1].ending_fragment {
            return false;
        }

        // 3.
        let mut last_tsn = 0u32;
        for (i, c) in self.chunks.iter().enumerate() {
            if i > 0 {
                // Fragments must have contiguous TSN
                // From RFC 4960 Section 3.3.1:
                //   When a user message is fragmented into multiple chunks, the TSNs are
                //   used by the receiver to reassemble the message.  This means that the
                //   TSNs for each fragment of a fragmented user message MUST be strictly
                //   sequential.
                if c.tsn != last_tsn.wrapping_add(1) {
                    // mid or end fragment is missing
                    return false;
                }
            }

            last_tsn = c.tsn;
        }

        true
    }

    fn is_missing_tsn_at_or_before(&self, cumulative_tsn: u32) -> bool {
        let Some(first) = self.chunks.first() else {
            return false;
        };
        if !first.beginning_fragment && sna32lte(first.tsn.wrapping_sub(1), cumulative_tsn) {
            return true;
        }
        if self.chunks.windows(2).any(|pair| {
            let missing_tsn = pair[0].tsn.wrapping_add(1);
            missing_tsn != pair[1].tsn && sna32lte(missing_tsn, cumulative_tsn)
        }) {
            return true;
        }

        let last = self.chunks.last().expect("a first chunk exists");
        !last.ending_fragment && sna32lte(last.tsn.wrapping_add(1), cumulative_tsn)
    }
}

#[derive(Default, Debug)]
pub(crate) struct ReassemblyQueue {
    pub(crate) si: StreamId,
    pub(crate) next_ssn: u16,
    /// expected SSN for next ordered chunk
    pub(crate) ordered: VecDeque<Chunks>,
    pub(crate) unordered: VecDeque<Chunks>,
    /// dpwarp: the fragments of unordered messages not yet complete, by TSN
    /// (a `Vec` sorted again and scanned whole on every push, before).
    pub(crate) unordered_chunks: BTreeMap<u32, ChunkPayloadData>,
    /// dpwarp: the runs of `unordered_chunks` that may make one message (TSNs
    /// in sequence, a beginning fragment only first, an ending one only
    /// last): first TSN to last TSN and octets, and last TSN to first TSN. A
    /// new fragment joins the run ending just before it and the one starting
    /// just after it, so a push looks at its two neighbours only.
    unordered_runs: BTreeMap<u32, (u32, usize)>,
    unordered_run_firsts: BTreeMap<u32, u32>,
    pub(crate) n_bytes: usize,
    pub(crate) max_message_size: u32,
    /// dpwarp: the chunks in `ordered` (see `held_chunks`).
    ordered_chunks: usize,
    /// dpwarp: the chunks of the whole messages in `unordered`, readable
    /// and not read yet (see `window_charge`).
    unordered_ready_chunks: usize,
}

/// dpwarp: the fewest octets of the receive window a queued chunk is
/// charged, whatever its length (`ReassemblyQueue::window_charge`).
pub(crate) const CHUNK_WINDOW_CHARGE: usize = 64;

impl ReassemblyQueue {
    /// From RFC 4960 Sec 6.5:
    ///   The Stream Sequence Number in all the streams MUST start from 0 when
    ///   the association is Established.  Also, when the Stream Sequence
    ///   Number reaches the value 65535 the next Stream Sequence Number MUST
    ///   be set to 0.
    pub(crate) fn new(si: StreamId, max_message_size: u32) -> Self {
        ReassemblyQueue {
            si,
            next_ssn: 0, // From RFC 4960 Sec 6.5:
            ordered: VecDeque::new(),
            unordered: VecDeque::new(),
            unordered_chunks: BTreeMap::new(),
            unordered_runs: BTreeMap::new(),
            unordered_run_firsts: BTreeMap::new(),
            n_bytes: 0,
            max_message_size,
            ordered_chunks: 0,
            unordered_ready_chunks: 0,
        }
    }

    pub(crate) fn push(&mut self, mut chunk: ChunkPayloadData) -> Result<bool> {
        if chunk.stream_identifier != self.si {
            return Ok(false);
        }

        // dpwarp: a chunk that is a whole message readable at once (unordered,
        // or the next ordered one) keeps its octets where they came, a slice
        // of the received packet (`Chunks::to_bytes`). Any other waits for
        // other chunks, for as long as the peer likes: it is held as a copy
        // of its own octets, or a 1-octet fragment would keep its whole
        // packet alive while the receive window counts one octet.
        let whole = chunk.beginning_fragment && chunk.ending_fragment;
        let readable_at_once =
            whole && (chunk.unordered || chunk.stream_sequence_number == self.next_ssn);

        if chunk.unordered {
            if whole {
                if chunk.user_data.len() > self.max_message_size as usize {
                    return Err(Error::ErrInboundPacketTooLarge);
                }
                self.n_bytes += chunk.user_data.len();
                self.unordered_ready_chunks += 1;
                self.unordered
                    .push_back(Chunks::new(0, chunk.payload_type, vec![chunk]));
                return Ok(true);
            }
            return self.push_unordered_fragment(chunk);
        }

        // Check if adding this chunk would exceed limit for ordered
        let projected_size = self.calculate_ordered_message_size(&chunk);
        if projected_size > self.max_message_size as usize {
            return Err(Error::ErrInboundPacketTooLarge);
        }

        // This is an ordered chunk
        if sna16lt(chunk.stream_sequence_number, self.next_ssn) {
            return Ok(false);
        }

        if !readable_at_once {
            chunk.user_data = Bytes::copy_from_slice(&chunk.user_data);
        }
        self.n_bytes += chunk.user_data.len();

        // Check if a chunkSet with the SSN already exists
        for s in &mut self.ordered {
            if s.ssn == chunk.stream_sequence_number {
                let before = s.chunks.len();
                let complete = s.push(chunk);
                self.ordered_chunks += s.chunks.len() - before;
                return Ok(complete);
            }
        }

        // If not found, create a new chunkSet
        let mut cset = Chunks::new(chunk.stream_sequence_number, chunk.payload_type, vec![]);
        let ok = cset.push(chunk);
        self.ordered_chunks += 1;
        self.ordered.push_back(cset);
        sort_chunks_by_ssn(self.ordered.make_contiguous());

        Ok(ok)
    }

    /// dpwarp: an unordered fragment (not a whole message) joins the run of
    /// fragments before it and the one after it, if it continues them; when
    /// the run then goes from a beginning to an ending fragment, it is a
    /// message, moved to `unordered`. The cost is the two neighbours' lookups
    /// and, once, the message's own chunks.
    fn push_unordered_fragment(&mut self, mut chunk: ChunkPayloadData) -> Result<bool> {
        let tsn = chunk.tsn;
        if self.unordered_chunks.contains_key(&tsn) {
            return Ok(false);
        }

        let before = tsn.wrapping_sub(1);
        let left = if chunk.beginning_fragment {
            None
        } else {
            match self.unordered_chunks.get(&before) {
                // The fragment before, with no successor held, ends its run.
                Some(c) if !c.ending_fragment => self.unordered_run_firsts.get(&before).copied(),
                _ => None,
            }
        };
        let after = tsn.wrapping_add(1);
        let right = if chunk.ending_fragment {
            None
        } else {
            match self.unordered_chunks.get(&after) {
                // The fragment after, with no predecessor held, starts its run.
                Some(c) if !c.beginning_fragment => Some(after),
                _ => None,
            }
        };
        let left_run = left.and_then(|first| Some((first, *self.unordered_runs.get(&first)?)));
        let right_run = right.and_then(|first| Some((first, *self.unordered_runs.get(&first)?)));

        // The message this fragment would be part of must not exceed the limit.
        let octets = left_run.map_or(0, |(_, (_, n))| n)
            + chunk.user_data.len()
            + right_run.map_or(0, |(_, (_, n))| n);
        if octets > self.max_message_size as usize {
            return Err(Error::ErrInboundPacketTooLarge);
        }

        let first = match left_run {
            Some((first, (last, _))) => {
                self.unordered_runs.remove(&first);
                self.unordered_run_firsts.remove(&last);
                first
            }
            None => tsn,
        };
        let last = match right_run {
            Some((right_first, (last, _))) => {
                self.unordered_runs.remove(&right_first);
                self.unordered_run_firsts.remove(&last);
                last
            }
            None => tsn,
        };

        chunk.user_data = Bytes::copy_from_slice(&chunk.user_data);
        self.n_bytes += chunk.user_data.len();
        self.unordered_chunks.insert(tsn, chunk);

        let complete = self
            .unordered_chunks
            .get(&first)
            .is_some_and(|c| c.beginning_fragment)
            && self
                .unordered_chunks
                .get(&last)
                .is_some_and(|c| c.ending_fragment);
        if !complete {
            self.unordered_runs.insert(first, (last, octets));
            self.unordered_run_firsts.insert(last, first);
            return Ok(false);
        }

        let mut chunks = Vec::new();
        let mut t = first;
        loop {
            if let Some(c) = self.unordered_chunks.remove(&t) {
                chunks.push(c);
            }
            if t == last {
                break;
            }
            t = t.wrapping_add(1);
        }
        self.unordered_ready_chunks += chunks.len();
        self.unordered
            .push_back(Chunks::new(0, chunks[0].payload_type, chunks));
        Ok(true)
    }

    fn calculate_ordered_message_size(&self, new_chunk: &ChunkPayloadData) -> usize {
        let ssn = new_chunk.stream_sequence_number;
        let existing: usize = self
            .ordered
            .iter()
            .find(|s| s.ssn == ssn)
            .map(|s| s.len())
            .unwrap_or(0);
        existing + new_chunk.user_data.len()
    }

    pub(crate) fn is_readable(&self) -> bool {
        // Check unordered first
        if !self.unordered.is_empty() {
            // The chunk sets in r.unordered should all be complete.
            return true;
        }

        // Check ordered sets
        if !self.ordered.is_empty() {
            let cset = &self.ordered[0];
            if cset.is_complete() && sna16lte(cset.ssn, self.next_ssn) {
                return true;
            }
        }
        false
    }

    pub(crate) fn read(&mut self) -> Option<Chunks> {
        // Check unordered first
        let chunks = if !self.unordered.is_empty() {
            let chunks = self.unordered.pop_front()?;
            self.unordered_ready_chunks = self
                .unordered_ready_chunks
                .saturating_sub(chunks.chunks.len());
            chunks
        } else if !self.ordered.is_empty() {
            // Now, check ordered
            let chunks = &self.ordered[0];
            if !chunks.is_complete() {
                return None;
            }
            if sna16gt(chunks.ssn, self.next_ssn) {
                return None;
            }
            if chunks.ssn == self.next_ssn {
                self.next_ssn = self.next_ssn.wrapping_add(1);
            }
            let chunks = self.ordered.pop_front()?;
            self.ordered_chunks = self.ordered_chunks.saturating_sub(chunks.chunks.len());
            chunks
        } else {
            return None;
        };

        self.subtract_num_bytes(chunks.len());

        Some(chunks)
    }

    /// Use last_ssn to locate a chunkSet then remove it if the set has
    /// not been complete
    pub(crate) fn forward_tsn_for_ordered(&mut self, last_ssn: u16) {
        let num_bytes = self
            .ordered
            .iter()
            .filter(|s| sna16lte(s.ssn, last_ssn) && !s.is_complete())
            .fold(0, |n, s| {
                n + s.chunks.iter().fold(0, |acc, c| acc + c.user_data.len())
            });
        self.subtract_num_bytes(num_bytes);

        self.ordered
            .retain(|s| !sna16lte(s.ssn, last_ssn) || s.is_complete());
        self.count_ordered_chunks();

        // Finally, forward next_ssn
        if sna16lte(self.next_ssn, last_ssn) {
            self.next_ssn = last_ssn.wrapping_add(1);
        }
    }

    /// Apply an ordered Forward-TSN retained across a stream reset without
    /// crossing into messages whose TSNs are newer than its cumulative point.
    pub(crate) fn forward_tsn_for_ordered_bounded(
        &mut self,
        last_ssn: u16,
        new_cumulative_tsn: u32,
    ) {
        let first_unaffected_ssn = self
            .ordered
            .iter()
            .filter(|chunks| {
                sna16lte(chunks.ssn, last_ssn)
                    && if chunks.is_complete() {
                        chunks
                            .chunks
                            .iter()
                            .any(|chunk| sna32gt(chunk.tsn, new_cumulative_tsn))
                    } else {
                        !chunks.is_missing_tsn_at_or_before(new_cumulative_tsn)
                    }
            })
            .map(|chunks| chunks.ssn)
            .reduce(|first, candidate| {
                if sna16lt(candidate, first) {
                    candidate
                } else {
                    first
                }
            });

        let is_abandoned_partial = |chunks: &&Chunks| {
            sna16lte(chunks.ssn, last_ssn)
                && !chunks.is_complete()
                && chunks.is_missing_tsn_at_or_before(new_cumulative_tsn)
        };
        let num_bytes = self
            .ordered
            .iter()
            .filter(is_abandoned_partial)
            .flat_map(|chunks| chunks.chunks.iter())
            .map(|chunk| chunk.user_data.len())
            .sum();
        self.subtract_num_bytes(num_bytes);
        self.ordered.retain(|chunks| {
            !sna16lte(chunks.ssn, last_ssn)
                || chunks.is_complete()
                || !chunks.is_missing_tsn_at_or_before(new_cumulative_tsn)
        });
        self.count_ordered_chunks();

        let next_ssn = first_unaffected_ssn.unwrap_or_else(|| last_ssn.wrapping_add(1));
        if sna16lt(self.next_ssn, next_ssn) {
            self.next_ssn = next_ssn;
        }
    }

    /// The highest prefix of an ambiguous deferred ordered skip that has
    /// enough TSN context to advance without overtaking a missing successor.
    pub(crate) fn applicable_forward_tsn_for_ordered_bounded(
        &self,
        last_ssn: u16,
        new_cumulative_tsn: u32,
        peer_last_tsn: u32,
    ) -> Option<u16> {
        if sna16gt(self.next_ssn, last_ssn) {
            return Some(last_ssn);
        }

        let is_covered = |chunks: &Chunks| {
            if chunks.is_complete() {
                chunks
                    .chunks
                    .iter()
                    .all(|chunk| sna32lte(chunk.tsn, new_cumulative_tsn))
            } else {
                chunks.is_missing_tsn_at_or_before(new_cumulative_tsn)
            }
        };
        if self.ordered.iter().any(|chunks| {
            chunks.ssn == last_ssn && (chunks.ssn == self.next_ssn || is_covered(chunks))
        }) {
            return Some(last_ssn);
        }

        let has_resolved_later_tsn = self
            .ordered
            .iter()
            .filter(|chunks| chunks.ssn == last_ssn || sna16gt(chunks.ssn, last_ssn))
            .flat_map(|chunks| chunks.chunks.iter())
            .map(|chunk| chunk.tsn)
            .reduce(|first, candidate| {
                if sna32lt(candidate, first) {
                    candidate
                } else {
                    first
                }
            })
            .is_some_and(|first_tsn| sna32lte(first_tsn, peer_last_tsn));
        if has_resolved_later_tsn {
            return Some(last_ssn);
        }

        self.ordered
            .iter()
            .filter(|chunks| {
                (chunks.ssn == self.next_ssn || sna16gt(chunks.ssn, self.next_ssn))
                    && sna16lt(chunks.ssn, last_ssn)
                    && (is_covered(chunks)
                        || chunks
                            .chunks
                            .first()
                            .is_some_and(|chunk| sna32lte(chunk.tsn, peer_last_tsn)))
            })
            .map(|chunks| chunks.ssn)
            .reduce(|last, candidate| {
                if sna16gt(candidate, last) {
                    candidate
                } else {
                    last
                }
            })
    }

    /// Remove all fragments in the unordered sets that contains chunks
    /// equal to or older than `new_cumulative_tsn`.
    /// We know all sets in the r.unordered are complete ones.
    /// Just remove chunks that are equal to or older than new_cumulative_tsn
    /// from the unordered_chunks
    pub(crate) fn forward_tsn_for_unordered(&mut self, new_cumulative_tsn: u32) {
        // dpwarp: `unordered_chunks` is a map by TSN (in u32 order, not
        // serial order), and its runs are cut at the new cumulative TSN.
        let stale: Vec<u32> = self
            .unordered_chunks
            .keys()
            .copied()
            .filter(|&tsn| sna32lte(tsn, new_cumulative_tsn))
            .collect();
        if stale.is_empty() {
            return;
        }
        for tsn in stale {
            if let Some(c) = self.unordered_chunks.remove(&tsn) {
                self.subtract_num_bytes(c.user_data.len());
            }
        }
        let cut: Vec<(u32, u32)> = self
            .unordered_runs
            .iter()
            .filter(|&(&first, _)| sna32lte(first, new_cumulative_tsn))
            .map(|(&first, &(last, _))| (first, last))
            .collect();
        for (first, last) in cut {
            self.unordered_runs.remove(&first);
            self.unordered_run_firsts.remove(&last);
            if sna32gt(last, new_cumulative_tsn) {
                let first = new_cumulative_tsn.wrapping_add(1);
                let mut octets = 0;
                let mut t = first;
                loop {
                    octets += self
                        .unordered_chunks
                        .get(&t)
                        .map_or(0, |c| c.user_data.len());
                    if t == last {
                        break;
                    }
                    t = t.wrapping_add(1);
                }
                self.unordered_runs.insert(first, (last, octets));
                self.unordered_run_firsts.insert(last, first);
            }
        }
    }

    /// dpwarp: chunks held here waiting for others: unordered fragments of
    /// messages not complete yet, and every chunk of the ordered queue (a
    /// message behind a missing one, or its fragments). Each costs a few
    /// hundred octets of bookkeeping beside its own octets, which are all
    /// the receive window counts; the association bounds their number
    /// (`Association::held_chunks_max`).
    pub(crate) fn held_chunks(&self) -> usize {
        self.unordered_chunks.len() + self.ordered_chunks
    }

    /// dpwarp: the octets of the receive window this queue takes: its
    /// octets, but at least [`CHUNK_WINDOW_CHARGE`] for each chunk it holds,
    /// readable or not. A chunk costs a few hundred octets of bookkeeping
    /// beside its own; counted by its octets only, a peer sending messages
    /// of a few octets to a reader that falls behind saw the window open
    /// while the association held as many chunks as it would
    /// (`Association::held_chunks_max`), and had its next DATA dropped.
    /// Charged so, the window closes first, and the peer waits for it (RFC
    /// 9260 §6.1, rule B) instead of sending what will be dropped. (Linux's
    /// TCP likewise counts each received buffer's overhead when it sizes
    /// the window it offers.) Messages of 64 octets or more on average are
    /// charged their octets, as before.
    pub(crate) fn window_charge(&self) -> usize {
        let chunks = self.held_chunks() + self.unordered_ready_chunks;
        self.n_bytes.max(CHUNK_WINDOW_CHARGE * chunks)
    }

    fn count_ordered_chunks(&mut self) {
        self.ordered_chunks = self.ordered.iter().map(|s| s.chunks.len()).sum();
    }

    pub(crate) fn subtract_num_bytes(&mut self, n_bytes: usize) {
        if self.n_bytes >= n_bytes {
            self.n_bytes -= n_bytes;
        } else {
            self.n_bytes = 0;
        }
    }

    pub(crate) fn get_num_bytes(&self) -> usize {
        self.n_bytes
    }
}
