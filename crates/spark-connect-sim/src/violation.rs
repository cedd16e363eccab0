//! A property that did not hold on a run.
//!
//! *Why a file of its own:* every property module ([`crate::properties`],
//! `recovery`) reports in this one type, and none of them may
//! import another for it.

use std::fmt;

/// A property that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which property: `data`, `error`, `recovery`, `hang`, `storm`,
    /// `retry_info`, `leak`, `stats` (checked in this order).
    pub property: &'static str,
    /// What was seen.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.property, self.detail)
    }
}
