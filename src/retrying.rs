//! retrying
