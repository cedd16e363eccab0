//! The retry layer over real loopback servers (tonic-retry-echo's echo
//! service, and the recording and gated servers of `support`): each file
//! one concern, every wait through a recording sleeper or a virtual clock.

mod support;

mod layer {
    mod attempts;
    mod calls;
    mod deadlines;
    mod events;
    mod hedging;
    mod idempotency;
    mod kinds;
    mod overrides;
    mod streams;
}
