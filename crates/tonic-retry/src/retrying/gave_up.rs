//! What a retry loop tried before it gave up, carried by the status it returns.
//!
//! "The service is currently unavailable" after ten minutes of retries reads
//! like the first failure, and sends the reader looking in the wrong place.
//! A status the loop gave up on therefore carries a [`GaveUp`] in its
//! `source()` chain: how many attempts were made, how long the loop waited
//! between them, and why it stopped. The status itself is unchanged (code,
//! message, details and metadata are the last attempt's), so code that
//! matches on it keeps working, and the last attempt's own status, with its
//! transport error chain, is [`GaveUp::last_status`] (also next in the chain).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use tonic_retry::retrying::{GaveUp, Retrying};
//!
//! let retrying = Retrying::default().with_seed(1); // on paused tokio time
//! let status = retrying
//!     .call(|| async { Err::<(), _>(tonic::Status::unavailable("down")) })
//!     .await
//!     .unwrap_err();
//! assert_eq!(status.message(), "down"); // the last attempt's status, as before
//! let history = GaveUp::of(&status).expect("the loop gave up");
//! assert_eq!(history.attempts(), 5); // the default: 1 + 4 retries
//! // 100 + 200 + 400 + 800 ms, each times U(0.8, 1.2).
//! assert!((1200..1800).contains(&history.waited().as_millis()));
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

use crate::policy::{GiveUpReason, RetryState};

/// The history of a call a retry loop gave up on; found in the returned
/// status's `source()` chain with [`GaveUp::of`].
#[derive(Clone, thiserror::Error)]
#[error("{}", describe(self))]
pub struct GaveUp {
    attempts: u32,
    waited: Duration,
    reason: GiveUpReason,
    #[source]
    last: Status,
}

/// "gave up after 5 attempts and 1500 ms of waiting".
fn describe(g: &GaveUp) -> String {
    let waited = if g.waited < Duration::from_secs(10) {
        format!("{} ms", g.waited.as_millis())
    } else {
        format!("{:.1} s", g.waited.as_secs_f64())
    };
    let bound = if g.reason == GiveUpReason::RetryNowElapsed {
        " (immediate retries outlasted their time bound)"
    } else {
        ""
    };
    format!(
        "gave up after {} attempts and {waited} of waiting{bound}",
        g.attempts
    )
}

impl GaveUp {
    /// The history of a status a retry loop gave up on, if it is one:
    /// the first [`GaveUp`] in its `source()` chain.
    pub fn of(status: &Status) -> Option<&GaveUp> {
        crate::policy::sources(status).find_map(|err| err.downcast_ref::<GaveUp>())
    }

    /// Attempts made, the first included.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
    /// The total time the loop waited between attempts.
    pub fn waited(&self) -> Duration {
        self.waited
    }
    /// Why the loop stopped: a policy's budget was spent, or immediate
    /// retries outlasted their time bound.
    pub fn reason(&self) -> GiveUpReason {
        self.reason
    }
    /// The last attempt's status, exactly as it failed (its transport error
    /// chain included).
    pub fn last_status(&self) -> &Status {
        &self.last
    }

    /// `status` with this history added to its source chain, or `status`
    /// unchanged when the loop did not give up on a retryable failure.
    pub(crate) fn attach(state: &RetryState, status: Status) -> Status {
        let Some(reason) = state.gave_up() else {
            return status;
        };
        let history = GaveUp {
            attempts: state.retries() + 1,
            waited: state.waited(),
            reason,
            last: status.clone(),
        };
        let mut status = status;
        status.set_source(Arc::new(history));
        status
    }
}

/// Short, and without the status's raw details or metadata.
impl fmt::Debug for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GaveUp")
            .field("attempts", &self.attempts)
            .field("waited", &self.waited)
            .field("reason", &self.reason)
            .field("last_code", &self.last.code())
            .field("last_message", &self.last.message())
            .finish()
    }
}
