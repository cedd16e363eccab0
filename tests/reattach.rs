//! Reattachable executions against the embedded server and hostile servers:
//! cuts, lost requests, NOT_FOUND answers, stalls, deadlines, releases, and
//! servers that send what no Spark server would.

mod support;

// The theme's tests, one file each: tests/reattach/*.rs.
mod reattach {
    mod embedded;
    mod hostile_server;
    mod not_found;
}
