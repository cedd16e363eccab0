//! [`TokenBucket`]: the bandwidth limit of one direction of a proxied link.
//!
//! Why here, in user space: loopback has no bandwidth limit, so a benchmark
//! of compressed results (fewer bytes, more CPU) on loopback only shows the
//! CPU. Shaping `lo` with `tc` needs root and slows every other test and
//! build on the machine; pacing inside the proxy shapes only the connections
//! sent through it, unprivileged, and runs under tokio's paused clock.
//!
//! The bucket holds at most [`BURST`] bytes of tokens and refills at the
//! link's rate. It is kept as one instant, the time the link has sent
//! everything taken so far: tokens are the time the link has been idle
//! (capped at the burst), so taking `n` bytes moves that instant `n / rate`
//! later. [`DelayLine`](super::delay_line::DelayLine) stamps each chunk it
//! reads with the instant its last byte leaves (store and forward), then adds
//! the one-way delay: a chunk arrives after `serialisation + propagation`,
//! as on a real link. What waits for its tokens stays in the proxy's queue,
//! whose cap ([`queue_cap`]) stands for the bottleneck's buffer: once it is
//! full the proxy stops reading and TCP pushes back on the sender.

use std::time::Duration;

use tokio::time::Instant;

use super::shared::CHUNK;

/// The bucket's depth: one read's worth of bytes, sent at once after an idle
/// spell (at 100 Mbit/s it takes 5.2 ms to refill).
pub(super) const BURST: usize = CHUNK;

/// How long the bottleneck's buffer holds bytes at full rate, beyond what
/// is on the wire (`rate × one-way delay`).
const BUFFER_TIME: Duration = Duration::from_millis(50);

/// One direction's token bucket; see the module docs.
#[derive(Debug, Clone)]
pub(super) struct TokenBucket {
    bits_per_second: u64,
    /// When the link has sent everything taken so far; a time before now
    /// means idle, the difference being tokens (up to [`BURST`]).
    sent_by: Option<Instant>,
}

impl TokenBucket {
    /// A bucket refilled at `bits_per_second` (more than zero).
    pub(super) fn new(bits_per_second: u64) -> Self {
        TokenBucket {
            bits_per_second: bits_per_second.max(1),
            sent_by: None,
        }
    }

    /// How long the link takes to send `bytes`.
    fn time_for(&self, bytes: usize) -> Duration {
        let nanos = (bytes as u128 * 8 * 1_000_000_000).div_ceil(u128::from(self.bits_per_second));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Takes `bytes` tokens at `now`: returns when the last of them has left
    /// the link (never before `now`).
    pub(super) fn take(&mut self, now: Instant, bytes: usize) -> Instant {
        let full = now.checked_sub(self.time_for(BURST)).unwrap_or(now);
        let start = self.sent_by.map_or(full, |t| t.max(full));
        let done = start + self.time_for(bytes);
        self.sent_by = Some(done);
        done.max(now)
    }

    /// The most bytes a direction may hold (waiting for tokens or for the
    /// delay) before it stops reading: what is on the wire during the
    /// one-way `delay`, plus [`BUFFER_TIME`] at full rate, and at least four
    /// chunks, but never more than `cap` (the line's own cap).
    pub(super) fn queue_cap(&self, delay: Duration, cap: usize) -> usize {
        let bytes_in = |d: Duration| {
            let b = d.as_nanos() * u128::from(self.bits_per_second) / 8 / 1_000_000_000;
            usize::try_from(b).unwrap_or(usize::MAX)
        };
        bytes_in(delay)
            .saturating_add(bytes_in(BUFFER_TIME))
            .max(4 * CHUNK)
            .min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT: u64 = 1_000_000;

    #[test]
    fn back_to_back_chunks_leave_at_the_rate() {
        // 8 Mbit/s is 1 MB/s: after the burst, each 100 kB takes 100 ms.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(8 * MBIT);
        let first = b.take(t0, BURST);
        assert_eq!(first, t0, "a full bucket sends its burst at once");
        let mut last = first;
        for i in 1..=10u64 {
            last = b.take(t0, 100_000);
            assert_eq!(last, t0 + Duration::from_millis(100 * i));
        }
        assert!(last > first);
    }

    #[test]
    fn idle_time_refills_at_most_one_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(8 * MBIT);
        b.take(t0, 1_000_000); // busy until t0 + 1 s (less the burst)
        // A minute of idling saves no more than the burst.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(b.take(later, BURST), later);
        assert_eq!(
            b.take(later, 1_000_000),
            later + Duration::from_secs(1),
            "the burst was spent: a full second for 1 MB"
        );
    }

    #[test]
    fn bytes_sent_never_outrun_rate_times_time_plus_burst() {
        // Chunks of every size taken as fast as possible: by the time each
        // leaves, at most `burst + rate × elapsed` bytes have left.
        let t0 = Instant::now();
        let rate = 100 * MBIT;
        let mut b = TokenBucket::new(rate);
        let mut sent = 0u128;
        for i in 0..2_000usize {
            let n = 1 + (i * 7919) % CHUNK;
            let at = b.take(t0, n);
            sent += n as u128;
            let allowed =
                BURST as u128 + (at - t0).as_nanos() * u128::from(rate) / 8 / 1_000_000_000;
            assert!(sent <= allowed + 1, "chunk {i}: {sent} > {allowed}");
        }
    }

    #[test]
    fn queue_cap_covers_the_wire_and_the_buffer() {
        let b = TokenBucket::new(100 * MBIT);
        // 12.5 MB/s × (10 ms + 50 ms) = 750 kB.
        assert_eq!(b.queue_cap(Duration::from_millis(10), usize::MAX), 750_000);
        assert_eq!(b.queue_cap(Duration::ZERO, 100), 100);
        assert_eq!(
            TokenBucket::new(1).queue_cap(Duration::ZERO, usize::MAX),
            4 * CHUNK
        );
    }
}
