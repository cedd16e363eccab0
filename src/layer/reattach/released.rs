//! The executions a caller has released, for the layer's drivers of the
//! same operations.
//!
//! *Why:* a driver cannot always tell that its caller is gone. A partition
//! drops the caller's `RST_STREAM` as well as its data, so the driver of
//! an abandoned `ExecutePlan` carries on until HTTP/2 keepalive closes the
//! connection. Meanwhile the caller reattaches on a new connection, reads
//! the result and releases it. If the abandoned driver had no response
//! yet, the server's "not found" would then look like a lost `ExecutePlan`,
//! and PySpark's rule would send it again: a new execution that nobody
//! releases. Every `ReleaseExecute` the layer forwards is noted here, and
//! each driver of that operation stops re-sending its `ExecutePlan`
//! ([`crate::reattach::core::ReattachCore::released_by_caller`]).
//!
//! Only operations with a live driver are kept: the map holds weak
//! references, and dead entries are dropped whenever a driver is added.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// An execution's key: its session and operation ids.
type Key = (String, String);

/// The operations of one layer service's live drivers, and which of them
/// their caller released.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallerReleases {
    live: Arc<Mutex<HashMap<Key, Weak<AtomicBool>>>>,
}

/// One driver's view of its operation: set once the caller releases it.
#[derive(Debug, Clone)]
pub(crate) struct Released(Arc<AtomicBool>);

impl Released {
    /// Whether the caller released the operation.
    pub(crate) fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl CallerReleases {
    /// The flag of `operation_id` in `session_id`, shared by every live
    /// driver of that operation.
    pub(crate) fn watch(&self, session_id: &str, operation_id: &str) -> Released {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, flag| flag.strong_count() > 0);
        let key = (session_id.to_owned(), operation_id.to_owned());
        if let Some(flag) = live.get(&key).and_then(Weak::upgrade) {
            return Released(flag);
        }
        let flag = Arc::new(AtomicBool::new(false));
        live.insert(key, Arc::downgrade(&flag));
        Released(flag)
    }

    /// The caller sent a `ReleaseExecute` for `operation_id` in
    /// `session_id`.
    pub(crate) fn release(&self, session_id: &str, operation_id: &str) {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (session_id.to_owned(), operation_id.to_owned());
        if let Some(flag) = live.get(&key).and_then(Weak::upgrade) {
            flag.store(true, Ordering::Release);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_reaches_every_live_driver_of_its_operation_only() {
        let releases = CallerReleases::default();
        let first = releases.watch("s", "op");
        let second = releases.watch("s", "op");
        let other_session = releases.watch("t", "op");
        let other_op = releases.watch("s", "op2");
        releases.release("s", "op");
        assert!(first.get() && second.get());
        assert!(!other_session.get() && !other_op.get());
    }

    #[test]
    fn only_live_drivers_are_kept() {
        let releases = CallerReleases::default();
        let kept = releases.watch("s", "a");
        drop(releases.watch("s", "b"));
        // A release of an operation no driver carries is nobody's.
        releases.release("s", "b");
        let _c = releases.watch("s", "c");
        assert_eq!(releases.len(), 2);
        assert!(!kept.get());
        // A driver added after the release starts unreleased.
        assert!(!releases.watch("s", "b").get());
    }
}
