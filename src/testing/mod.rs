//! testing
