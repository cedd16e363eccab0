//! [`DelayLine`]: the bytes of one direction between their read and their
//! write, each chunk held until it is due.
//!
//! Why a queue: a link with a 40 ms round trip still carries hundreds of
//! megabytes per second, because many bytes are in flight at once. Holding a
//! single 64 KiB chunk until it is due forwards one chunk per delay
//! (64 KiB / 20 ms is 3.2 MB/s), which measures the proxy, not the protocol.
//! So every chunk is stamped `arrival + delay` when it is read and queued, and
//! the writer sends each chunk once it is due, in order. Throughput is then
//! bounded only by the queue cap (`max_queued / delay`).
//!
//! The same type serves [`latency`](crate::FaultProxyBuilder::latency) (a
//! cap of one chunk: a slow link) and
//! [`one_way_delay`](crate::FaultProxyBuilder::one_way_delay) (a large cap:
//! propagation delay only), and no delay at all.
//!
//! With a bandwidth limit ([`bandwidth`](crate::FaultProxyBuilder::bandwidth))
//! each chunk is first paced by a [`TokenBucket`]: it is due once its last
//! byte has left the link, plus the delay; and the queue is capped at what
//! the link holds ([`TokenBucket::queue_cap`]).
//!
//! Backpressure: when the destination refuses bytes that are due, reading
//! pauses until it takes them, so a slow reader pushes back on the sender
//! through TCP, as on a real path, instead of the queue absorbing everything.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::shared::{CHUNK, MAX_DELAY_QUEUE};
use super::token_bucket::TokenBucket;

/// A chunk waiting for its due time.
#[derive(Debug)]
struct Chunk {
    due: Instant,
    data: Bytes,
}

/// What one read from the source did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadOutcome {
    /// This many bytes were queued.
    Queued(usize),
    /// The source reached end of stream.
    Eof,
    /// Nothing to read right now (spurious readiness).
    WouldBlock,
}

/// One direction's queue of delayed chunks.
#[derive(Debug)]
pub(super) struct DelayLine {
    delay: Duration,
    queue: VecDeque<Chunk>,
    queued: usize,
    /// Read more only while fewer bytes than this are queued; `0`: only
    /// when the queue is empty (one chunk in flight).
    max_queued: usize,
    /// Read buffer; each read is split off it as one chunk.
    buf: BytesMut,
    /// The destination refused due bytes: reading waits until it takes them.
    blocked: bool,
    /// The bandwidth limit, if any.
    pace: Option<TokenBucket>,
}

impl DelayLine {
    /// A line that holds each chunk for `delay` and reads more while fewer
    /// than `max_queued` bytes wait (`0`: one chunk at a time), paced at
    /// `bits_per_second` if given (which may lower the cap, see
    /// [`TokenBucket::queue_cap`]).
    pub(super) fn new(delay: Duration, max_queued: usize, bits_per_second: Option<u64>) -> Self {
        let pace = bits_per_second.map(TokenBucket::new);
        // No delay at all: the cap of `0` only means "nothing configured",
        // and one chunk at a time would cap the rate at a chunk per timer
        // tick; the link's own cap applies.
        let cap = if max_queued == 0 && delay.is_zero() {
            MAX_DELAY_QUEUE
        } else {
            max_queued
        };
        let max_queued = pace
            .as_ref()
            .map_or(max_queued, |p| p.queue_cap(delay, cap));
        DelayLine {
            delay,
            queue: VecDeque::new(),
            queued: 0,
            max_queued,
            buf: BytesMut::new(),
            blocked: false,
            pace,
        }
    }

    /// Whether there is room to read (and queue) more.
    pub(super) fn can_read(&self) -> bool {
        !self.blocked && (self.queue.is_empty() || self.queued < self.max_queued)
    }

    /// Whether any bytes wait to be written.
    pub(super) fn has_data(&self) -> bool {
        !self.queue.is_empty()
    }

    /// When the head chunk must be waited for: `None` when it is due already
    /// (or there is none). An expired tokio timer still waits for the next
    /// timer tick, up to a millisecond, so a due chunk skips the timer.
    pub(super) fn pending_due(&self) -> Option<Instant> {
        self.queue
            .front()
            .map(|c| c.due)
            .filter(|&due| due > Instant::now())
    }

    /// Reads at most `room` bytes (capped at [`CHUNK`]) from `src` and
    /// queues them, due `delay` from now (or from when the bandwidth limit
    /// has let them through).
    pub(super) fn read_from(&mut self, src: &TcpStream, room: usize) -> io::Result<ReadOutcome> {
        let room = room.min(CHUNK);
        if room == 0 {
            return Ok(ReadOutcome::WouldBlock);
        }
        self.buf.reserve(room);
        match src.try_read_buf(&mut (&mut self.buf).limit(room)) {
            Ok(0) => Ok(ReadOutcome::Eof),
            Ok(n) => {
                let data = self.buf.split().freeze();
                let now = Instant::now();
                let sent = self.pace.as_mut().map_or(now, |p| p.take(now, n));
                self.queue.push_back(Chunk {
                    due: sent + self.delay,
                    data,
                });
                self.queued += n;
                Ok(ReadOutcome::Queued(n))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(ReadOutcome::WouldBlock),
            Err(e) => Err(e),
        }
    }

    /// Writes the chunks that are due to `dst`, in order, until the socket
    /// would block or the head chunk is not due yet. Returns the bytes written.
    pub(super) fn write_due(&mut self, dst: &TcpStream) -> io::Result<usize> {
        let now = Instant::now();
        let mut written = 0;
        while let Some(head) = self.queue.front_mut() {
            if head.due > now {
                break;
            }
            match dst.try_write(&head.data) {
                Ok(n) => {
                    head.data.advance(n);
                    written += n;
                    self.queued -= n;
                    if head.data.is_empty() {
                        self.queue.pop_front();
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.blocked = true;
                    return Ok(written);
                }
                Err(e) => return Err(e),
            }
        }
        self.blocked = false;
        Ok(written)
    }
}
