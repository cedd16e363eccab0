//! status
