//! The async retry loop of [`tonic_retry::retrying`], with PySpark's
//! defaults and wording as constructors.
//!
//! [`Retrying`] is `tonic_retry`'s own type; the extension trait
//! [`PySparkRetrying`] adds the two ways this crate builds it: one PySpark
//! `DefaultPolicy` ([`PySparkPolicy::pyspark`]), and PySpark's give-up
//! warning, [`RETRIES_EXCEEDED`]. The loop's rules are `tonic_retry`'s.
//!
//! ```
//! use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
//!
//! let retrying = Retrying::pyspark();
//! assert_eq!(retrying.policies()[0].name(), "DefaultPolicy");
//! assert!(retrying.give_up_message().starts_with("[RETRIES_EXCEEDED]"));
//! ```

use crate::policy::{PySparkPolicy, RetryPolicy};

pub use tonic_retry::retrying::{AttemptError, GaveUp, Retrying, Sleeper};

/// The warning logged once per give-up, PySpark's exact text.
pub const RETRIES_EXCEEDED: &str =
    "[RETRIES_EXCEEDED] The maximum number of retries has been exceeded.";

/// PySpark's loop as constructors of [`Retrying`]; bring the trait into
/// scope with `use spark_connect_retry::retrying::PySparkRetrying`.
pub trait PySparkRetrying {
    /// One PySpark `DefaultPolicy`, giving up with [`RETRIES_EXCEEDED`].
    fn pyspark() -> Retrying;
    /// A loop over `policies`, in order, that gives up with
    /// [`RETRIES_EXCEEDED`].
    fn pyspark_with(policies: impl Into<Vec<RetryPolicy>>) -> Retrying;
}

impl PySparkRetrying for Retrying {
    fn pyspark() -> Retrying {
        Retrying::pyspark_with(vec![RetryPolicy::pyspark()])
    }
    fn pyspark_with(policies: impl Into<Vec<RetryPolicy>>) -> Retrying {
        Retrying::new(policies).with_give_up_message(RETRIES_EXCEEDED)
    }
}
