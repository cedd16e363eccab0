//! layer
