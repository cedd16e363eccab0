//! Spark's error classes that this crate acts on, spelled once.
//!
//! The reattach core, the table of each server's "not found" wording, the
//! session's stale-session rule and its errors all compare or report these
//! strings; one leaf module keeps their spelling in one place and keeps
//! those modules from importing each other for a constant.

/// `INVALID_HANDLE.OPERATION_NOT_FOUND`: the server has no such execution.
pub(crate) const OPERATION_NOT_FOUND: &str = "INVALID_HANDLE.OPERATION_NOT_FOUND";
/// `INVALID_HANDLE.SESSION_NOT_FOUND`: the server has no such session.
pub(crate) const SESSION_NOT_FOUND: &str = "INVALID_HANDLE.SESSION_NOT_FOUND";
/// `INVALID_HANDLE.SESSION_CHANGED`: the server-side session is not the one
/// the client saw (the server restarted).
pub(crate) const SESSION_CHANGED: &str = "INVALID_HANDLE.SESSION_CHANGED";
/// `INVALID_HANDLE.SESSION_CLOSED`: the session was released.
pub(crate) const SESSION_CLOSED: &str = "INVALID_HANDLE.SESSION_CLOSED";
