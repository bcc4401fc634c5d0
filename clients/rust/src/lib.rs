//! placeholder
pub mod proto;
