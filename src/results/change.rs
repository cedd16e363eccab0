//! [`ResultChange`]: how a re-executed query's result differed from the
//! rows already delivered.
//!
//! A leaf of its own because both sides name it: the resumption that finds
//! the change (`resume`) and the session's error that reports it
//! ([`SparkError::ResultChanged`](crate::session::SparkError::ResultChanged)).

use std::fmt;

/// How a re-executed query's result differed from the rows delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultChange {
    /// The first rows of the new result are not the rows delivered (their
    /// digests differ: other values, order, columns or types).
    Rows,
    /// The new result ended after this many rows, fewer than delivered.
    Shorter {
        /// Rows in the new result.
        rows: u64,
    },
}

impl fmt::Display for ResultChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResultChange::Rows => f.write_str("its first rows differ from the rows delivered"),
            ResultChange::Shorter { rows } => write!(f, "it has only {rows} rows"),
        }
    }
}
