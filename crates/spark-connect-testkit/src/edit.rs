//! [`ResultEdit`]: a query that gives other rows when it runs again.
//!
//! A client that re-executes a query (to resume it after the server lost
//! the execution) must notice when the new result is not the old one:
//! Spark does not promise the same rows twice (`rand()`, a table written in
//! between). The test server is deterministic, so a test scripts the change.

/// A change to the rows of `range` queries executed from now on
/// ([`TestServer::edit_results`](crate::TestServer::edit_results)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResultEdit {
    /// Add `by` to the `id` (and so to `x = id * 2`) of every row from
    /// `from_row` on: other values.
    Shift {
        /// The first row changed (0-based).
        from_row: u64,
        /// Added to its `id`.
        by: i64,
    },
    /// Keep only the first `rows` rows: a shorter result.
    Truncate {
        /// The rows kept.
        rows: u64,
    },
}

impl ResultEdit {
    /// The edited result's row count, of `rows` unedited.
    pub(crate) fn row_count(self, rows: u64) -> u64 {
        match self {
            ResultEdit::Truncate { rows: keep } => rows.min(keep),
            ResultEdit::Shift { .. } => rows,
        }
    }

    /// `(from_row, by)` of a shift.
    pub(crate) fn shift(self) -> Option<(u64, i64)> {
        match self {
            ResultEdit::Shift { from_row, by } => Some((from_row, by)),
            ResultEdit::Truncate { .. } => None,
        }
    }
}
