//! Test infrastructure for consul-elector.

pub mod consul;
pub mod kube_faults;
