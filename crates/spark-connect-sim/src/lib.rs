//! A deterministic simulation of a Spark Connect client, the guard and the
//! embedded server over turmoil's simulated network.
//!
//! Real tonic, hyper, h2 and tower run over simulated TCP; only the
//! network and the clock are simulated. Beside the main client, a third of
//! the seeds run a second one of their own ([`unary`]). Each seed draws a [`Schedule`](schedule::Schedule)
//! (the world's shape and its faults), [`world::run`] plays it, the
//! [`properties`] (reported as [`violation::Violation`]; among them a bound on the time to recover)
//! are checked on what it left, and its [`Trace`](trace::Trace) hashes
//! what happened so that two runs of one seed can be compared. A failing
//! schedule is [shrunk](shrink::shrink) to the fewest faults that still
//! fail. See `docs/simulation.md` at the workspace root.

#![warn(missing_docs, unreachable_pub)]

pub mod client;
pub mod net;
pub mod properties;
pub(crate) mod recovery;
pub mod schedule;
pub mod session;
pub mod shrink;
pub mod trace;
pub mod unary;
pub mod violation;
pub mod world;
