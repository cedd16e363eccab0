//! The async retry loop.
//!
//! A policy says whether to retry and how long to wait; something still has to
//! run the attempts, sleep between them, keep one budget per policy, let an
//! attempt ask for an immediate retry, and return the right error when it
//! gives up. Written inline at every call site, that loop drifts in small
//! ways (which policy decides, which error is returned, how many warnings
//! are logged), and a loop that sleeps on the real clock cannot be tested
//! without waiting minutes.
//!
//! [`Retrying`] is that loop, written once: it runs an async operation until
//! it succeeds, an error is not retryable, or the budget runs out:
//!
//! * the first attempt is free, with no sleep before it;
//! * after a failure, the **first** policy (in list order) whose classifier
//!   accepts the error decides; there is no fallback to later policies, and
//!   every policy keeps its own budget within one loop;
//! * an attempt may instead ask for an immediate retry
//!   ([`AttemptError::RetryNow`]): no sleep, no policy, no budget, but
//!   bounded by elapsed time (1 h by default) from the first such request
//!   in the loop; on give-up its cause is returned;
//! * on give-up the last error is returned, after one warning
//!   (`"retries exhausted"` unless [`Retrying::with_give_up_message`]
//!   says otherwise); a status that ran out of retries carries the loop's
//!   history ([`GaveUp`]: attempts, time waited) in its source chain.
//!
//! # Events
//!
//! One event per failed attempt: a `retrying` debug event when a retry
//! follows, the give-up warning when the budget is spent. `attempt` is the
//! attempt that failed, counted from 1 (the tower layer counts the same
//! way), and `wait_ms` the wait actually slept before the next one.
//!
//! Sleeping, the clock and the jitter RNG are injectable, so tests are exact
//! and never wait in real time (the default sleeper and clock are tokio's,
//! so paused tokio time applies; the `test-util` feature adds a
//! `RecordingSleeper` and a `ManualClock`).
//!
//! # The room
//!
//! One concept a file: the configuration ([`Retrying`]), the
//! loop (`run.rs`: [`Retrying::run`], [`Retrying::call`]), the decision a
//! driver takes attempt by attempt (`decide.rs`), [`AttemptError`],
//! [`LoopStats`], [`GaveUp`], and the injectable parts: [`Sleeper`],
//! [`Clock`], `Jitter`.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use tonic_retry::retrying::Retrying;
//!
//! let retrying = Retrying::default().with_seed(7);
//! let calls = AtomicU32::new(0);
//! let start = tokio::time::Instant::now();
//! let answer = retrying
//!     .call(|| async {
//!         if calls.fetch_add(1, Ordering::SeqCst) < 2 {
//!             Err(tonic::Status::unavailable("restarting"))
//!         } else {
//!             Ok(42)
//!         }
//!     })
//!     .await;
//! assert_eq!(answer.unwrap(), 42);
//! // The default policy: 100 ms, then 200 ms, each times U(0.8, 1.2),
//! // slept on paused tokio time.
//! let waited = start.elapsed().as_millis();
//! assert!((240..360).contains(&waited), "{waited}");
//! # }
//! ```

mod attempt_error;
mod clock;
mod config;
mod decide;
mod gave_up;
mod jitter;
mod run;
mod sleeper;
mod stats;

pub use attempt_error::AttemptError;
pub use clock::Clock;
#[cfg(any(test, feature = "test-util"))]
pub use clock::ManualClock;
pub use config::Retrying;
pub use gave_up::GaveUp;
#[cfg(any(test, feature = "test-util"))]
pub use sleeper::RecordingSleeper;
pub use sleeper::Sleeper;
pub use stats::LoopStats;

#[cfg(test)]
mod tests;
