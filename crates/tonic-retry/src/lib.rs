#![doc = include_str!("../README.md")]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod headers;
pub mod layer;
pub mod policy;
pub mod request_error;
pub mod retrying;
pub mod sanitize;
pub mod status;
pub mod transport;
