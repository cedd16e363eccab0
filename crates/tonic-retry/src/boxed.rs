//! The boxed types every other module names: a boxed error and a boxed future.
//!
//! Why a file of their own: they are vocabulary, not behaviour. Defined
//! beside the code that first needed them (the transport, the loop), they
//! made every file that needed the word depend on that code, and the files
//! closed a circle (metrics → transport → request errors → the loop →
//! the recorder → metrics). Here they depend on nothing of this crate.
//! Their public paths stay [`crate::transport::BoxError`] and
//! [`crate::retrying::BoxFuture`].

use std::future::Future;
use std::pin::Pin;

/// A boxed error, as tonic's transport and tower use (tower's own alias).
pub use tower::BoxError;

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
