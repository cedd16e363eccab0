//! The error classes of lost handles, spelled once.
//!
//! The reattach core and the table of each server's "not found" wording
//! both need them; a leaf module keeps either from importing the other.

/// `INVALID_HANDLE.OPERATION_NOT_FOUND`: the server has no such execution.
pub const OPERATION_NOT_FOUND: &str = "INVALID_HANDLE.OPERATION_NOT_FOUND";
/// `INVALID_HANDLE.SESSION_NOT_FOUND`: the server has no such session.
pub const SESSION_NOT_FOUND: &str = "INVALID_HANDLE.SESSION_NOT_FOUND";
