//! The boxed types every other module names: a boxed error and a boxed future.
//!
//! Why a file of their own: they are vocabulary, not behaviour. Defined
//! beside the code that first needed them (the transport, the loop), they
//! made every file that needed the word depend on that code, and the files
//! closed a circle (metrics → transport → request errors → the loop →
//! the recorder → metrics). Here they depend on nothing of this crate.
//! `BoxError` is public as [`crate::transport::BoxError`]; `BoxFuture` is
//! `futures_util`'s, written once here.

use std::future::Future;
use std::pin::Pin;

/// A boxed error, as tonic's transport and tower use (tower's own alias).
pub use tower::BoxError;

/// A boxed, sendable future: `futures_util::future::BoxFuture<'static, T>`,
/// the type [`Sleeper`](crate::retrying::Sleeper) returns.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
