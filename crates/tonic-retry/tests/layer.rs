//! The retry layer over real loopback servers (tonic-retry-echo's echo
//! service): each file one concern, every wait through a recording sleeper.

mod support;

mod layer {
    mod calls;
    mod events;
    mod hedging;
    mod overrides;
    mod streams;
}
