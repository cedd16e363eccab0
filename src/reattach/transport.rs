//! [`Transport`]: how one execution's segments and releases travel, the
//! only part of a reattach driver that differs between the session's typed
//! client and the layer's raw bytes.
//!
//! *Why a trait:* the driver ([`super::driver`]) and the releaser
//! ([`super::release`]) are written once; each carries a transport and
//! calls it for the three things that touch the wire.

use std::future::Future;
use std::time::Duration;

use tonic::Status;

use super::core::Open;
use crate::proto::{ExecutePlanResponse, ReleaseExecuteRequest};
use crate::reconnect::FreshConnection;
use crate::token::service::TokenUsed;

/// How one execution's segments and releases travel: the session's typed
/// client, or the layer's raw bytes under any stub.
pub(crate) trait Transport: Clone + Send + Sync + 'static {
    /// An open segment (`ExecutePlan` or `ReattachExecute` stream).
    type Segment: Send;
    /// What the caller gets for one response.
    type Message: Send;
    /// What the driver keeps of a response until the core emits it.
    type Kept: Send;

    /// Open the segment the core asks for, with `call`'s timeout and marks.
    fn open(
        &mut self,
        open: Open,
        call: Call,
    ) -> impl Future<Output = Result<Self::Segment, Status>> + Send;

    /// The segment's next message (`None` at its clean end): what the core
    /// sees of it, and what the driver keeps to hand on.
    fn read(
        segment: &mut Self::Segment,
    ) -> impl Future<Output = Result<Option<(ExecutePlanResponse, Self::Kept)>, Status>> + Send;

    /// The caller's message, from the core's response and what was kept.
    fn message(response: ExecutePlanResponse, kept: Self::Kept) -> Self::Message;

    /// Whether the caller released this execution by itself, through
    /// another stream ([`super::core::ReattachCore::released_by_caller`]).
    /// Only a transport under a caller that releases can know.
    fn released_by_caller(&self) -> bool {
        false
    }

    /// Send one `ReleaseExecute` attempt, with `call`'s marks.
    fn release(
        &self,
        request: ReleaseExecuteRequest,
        call: Call,
    ) -> impl Future<Output = Result<(), Status>> + Send;
}

/// What every request the driver makes carries besides its message: a
/// timeout, a fresh connection after a stall, the token slot.
#[derive(Debug, Clone, Default)]
pub(crate) struct Call {
    pub(crate) timeout: Option<Duration>,
    pub(crate) fresh: bool,
    pub(crate) token: TokenUsed,
}

impl Call {
    /// `message` as a request with this call's timeout and extensions.
    pub(crate) fn request<T>(self, message: T) -> tonic::Request<T> {
        let mut req = tonic::Request::new(message);
        self.apply(&mut req);
        req
    }

    /// Put this call's timeout and extensions on `req`.
    pub(crate) fn apply<T>(self, req: &mut tonic::Request<T>) {
        if let Some(d) = self.timeout {
            req.set_timeout(d);
        }
        if self.fresh {
            req.extensions_mut().insert(FreshConnection);
        }
        req.extensions_mut().insert(self.token);
    }
}
