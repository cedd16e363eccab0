//! [`ProxyStatsHandle`]: the proxy's live counters and cut log, and
//! [`ProxyStats`], a copy of them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::cut::{CutEvent, Direction};

/// A cheap, cloneable handle on a [`FaultProxy`](crate::FaultProxy)'s
/// counters, read as they change; [`snapshot`](Self::snapshot) copies them.
/// Get one from [`FaultProxy::stats_handle`](crate::FaultProxy::stats_handle).
#[derive(Debug, Clone, Default)]
pub struct ProxyStatsHandle {
    pub(super) inner: Arc<StatsInner>,
}

#[derive(Debug, Default)]
pub(super) struct StatsInner {
    pub(super) connections: AtomicU64,
    pub(super) active: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) lost_requests: AtomicU64,
    pub(super) cuts: AtomicU64,
    pub(super) upstream_errors: AtomicU64,
    pub(super) bytes_client_to_server: AtomicU64,
    pub(super) bytes_server_to_client: AtomicU64,
    pub(super) events: Mutex<Vec<CutEvent>>,
    /// Proxied connections so far; indexes [`CutSchedule`](super::cut::CutSchedule)s.
    pub(super) proxied: AtomicU64,
}

/// A point-in-time copy of [`ProxyStatsHandle`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyStats {
    /// Connections accepted, refused ones included.
    pub connections: u64,
    /// Connections open right now.
    pub active: u64,
    /// Connections refused by [`FaultProxyBuilder::refuse_first`](crate::FaultProxyBuilder::refuse_first).
    pub refused: u64,
    /// Connections whose request was dropped by
    /// [`FaultProxyBuilder::lose_first_request`](crate::FaultProxyBuilder::lose_first_request) (0 or 1).
    pub lost_requests: u64,
    /// Cuts made, all reasons together.
    pub cuts: u64,
    /// Connections reset because the upstream could not be reached.
    pub upstream_errors: u64,
    /// Bytes forwarded from clients to the upstream.
    pub bytes_client_to_server: u64,
    /// Bytes forwarded from the upstream to clients.
    pub bytes_server_to_client: u64,
}

impl ProxyStatsHandle {
    /// Copy all counters at once (each is read atomically; the set is not a
    /// single atomic snapshot while connections are live).
    pub fn snapshot(&self) -> ProxyStats {
        let s = &self.inner;
        ProxyStats {
            connections: s.connections.load(Ordering::SeqCst),
            active: s.active.load(Ordering::SeqCst),
            refused: s.refused.load(Ordering::SeqCst),
            lost_requests: s.lost_requests.load(Ordering::SeqCst),
            cuts: s.cuts.load(Ordering::SeqCst),
            upstream_errors: s.upstream_errors.load(Ordering::SeqCst),
            bytes_client_to_server: s.bytes_client_to_server.load(Ordering::SeqCst),
            bytes_server_to_client: s.bytes_server_to_client.load(Ordering::SeqCst),
        }
    }

    /// Connections accepted, refused ones included.
    pub fn connections(&self) -> u64 {
        self.inner.connections.load(Ordering::SeqCst)
    }

    /// Cuts made so far.
    pub fn cuts(&self) -> u64 {
        self.inner.cuts.load(Ordering::SeqCst)
    }

    /// Connections refused so far.
    pub fn refused(&self) -> u64 {
        self.inner.refused.load(Ordering::SeqCst)
    }

    /// Bytes forwarded in `direction` so far.
    pub fn bytes(&self, direction: Direction) -> u64 {
        match direction {
            Direction::ClientToServer => self.inner.bytes_client_to_server.load(Ordering::SeqCst),
            Direction::ServerToClient => self.inner.bytes_server_to_client.load(Ordering::SeqCst),
        }
    }

    /// Every cut so far, in the order they happened.
    pub fn cut_events(&self) -> Vec<CutEvent> {
        self.inner
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(super) fn add_bytes(&self, direction: Direction, n: u64) {
        let counter = match direction {
            Direction::ClientToServer => &self.inner.bytes_client_to_server,
            Direction::ServerToClient => &self.inner.bytes_server_to_client,
        };
        counter.fetch_add(n, Ordering::SeqCst);
    }

    pub(super) fn record(&self, event: CutEvent) {
        self.inner
            .events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }
}

/// Decrements `active` however a connection task ends.
pub(super) struct ActiveGuard(pub(super) ProxyStatsHandle);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.inner.active.fetch_sub(1, Ordering::SeqCst);
    }
}
