//! testing

pub mod proxy;
