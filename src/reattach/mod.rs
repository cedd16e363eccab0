//! reattach
