//! The reattach layer under a stub that is not the session's, and the guard
//! between real clients and the embedded server, over loopback sockets.

mod support;

// The theme's tests, one file each: tests/guard/*.rs.
mod guard {
    mod drain;
    mod health;
    mod hostile;
    mod layer;
    mod many;
    #[cfg(feature = "metrics")]
    mod metrics;
    mod proxy;
    mod secure;
}
