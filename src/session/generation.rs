//! The generations of a session: the ids one server-side session is known
//! by, and which generation new calls run on.
//!
//! A session outlives its server-side state when the server restarts; each
//! server-side session it moves to is a generation. These are plain state
//! types, kept apart from the rules that decide when to move
//! (the renewal module), so that the session, its streams and its configs
//! can all hold a generation without depending on those rules.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::options::lock;
use crate::meters::SessionMeters;
use crate::reattach::ids::{SessionIdMismatch, check_session_ids};

/// The ids of one server-side session: the client session id requests
/// carry, and the server-side id its responses pinned.
#[derive(Debug)]
pub(crate) struct Generation {
    session_id: String,
    server_side: Mutex<Option<String>>,
    pub(super) stale: AtomicBool,
    /// Set once the builder's configs were applied to this session.
    pub(super) configured: tokio::sync::OnceCell<()>,
    /// The client's default confs were set (or refused) on this session,
    /// when sent alone (no builder configs).
    pub(super) defaults_set: tokio::sync::OnceCell<()>,
}

impl Generation {
    pub(super) fn new(session_id: String) -> Self {
        Generation {
            session_id,
            server_side: Mutex::new(None),
            stale: AtomicBool::new(false),
            configured: tokio::sync::OnceCell::new(),
            defaults_set: tokio::sync::OnceCell::new(),
        }
    }
    /// The client session id.
    pub(crate) fn session_id(&self) -> &str {
        &self.session_id
    }
    /// The server-side id pinned by the first response that carried one.
    pub(crate) fn observed(&self) -> Option<String> {
        lock(&self.server_side).clone()
    }
    /// Checks a response's ids ([`check_session_ids`]), pinning the first
    /// server-side id.
    pub(super) fn verify(
        &self,
        session_id: &str,
        server_side: &str,
    ) -> Result<(), SessionIdMismatch> {
        let mut pinned = lock(&self.server_side);
        check_session_ids(&self.session_id, &mut pinned, session_id, server_side)
    }
    fn is_stale(&self) -> bool {
        self.stale.load(Ordering::SeqCst)
    }
}

/// The session's current generation and the renewal setting.
#[derive(Debug)]
pub(super) struct Renewal {
    pub(super) enabled: bool,
    current: Mutex<Arc<Generation>>,
    renewals: AtomicU64,
    meters: SessionMeters,
}

impl Renewal {
    pub(super) fn new(session_id: String, enabled: bool) -> Self {
        Renewal {
            enabled,
            current: Mutex::new(Arc::new(Generation::new(session_id))),
            renewals: AtomicU64::new(0),
            meters: SessionMeters::default(),
        }
    }
    /// Count renewals in `meters` too.
    pub(super) fn metered(mut self, meters: SessionMeters) -> Self {
        self.meters = meters;
        self
    }
    pub(super) fn current(&self) -> Arc<Generation> {
        lock(&self.current).clone()
    }
    pub(super) fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::SeqCst)
    }

    /// The generation to use for a new call: `g` itself, or, if it is stale,
    /// its successor (made here by the first caller; later ones find it).
    pub(super) fn successor(&self, g: Arc<Generation>) -> Arc<Generation> {
        if !g.is_stale() {
            return g;
        }
        let mut current = lock(&self.current);
        if Arc::ptr_eq(&current, &g) {
            let fresh = Arc::new(Generation::new(uuid::Uuid::new_v4().to_string()));
            let n = self.renewals.fetch_add(1, Ordering::SeqCst) + 1;
            self.meters.renewed();
            tracing::warn!(
                old_session_id = g.session_id(),
                new_session_id = fresh.session_id(),
                renewals = n,
                "stale Spark Connect session renewed: new calls run on a fresh server-side \
                 session (temporary views and runtime configs of the old one are gone)"
            );
            *current = fresh;
        }
        current.clone()
    }
}
