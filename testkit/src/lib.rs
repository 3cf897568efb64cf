//! Test infrastructure for consul-elector.

pub mod consul;
