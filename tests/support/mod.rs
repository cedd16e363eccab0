//! What the root's test binaries share: the tracing capture (the
//! workspace's one, from `tonic_retry_echo::capture`), retry settings,
//! drains of result streams, Arrow data, a server behind a fault proxy,
//! and a bounded wait. The paused clock of the stall and deadline tests is
//! the test kit's (`spark_connect_testkit::held_clock`, feature `test-util`).
#![allow(dead_code)] // each test binary uses part of this module

pub mod arrow_data;
pub mod policies;
pub mod proxied;
pub mod streams;

/// Waits until `cond` holds, polling every 10 ms, 500 times at most, for a
/// state another task or a server changes; panics naming `what` after that.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

#[allow(unused_imports)] // each test binary uses part of this module
pub use tonic_retry_echo::capture::{Event, capture, init};
