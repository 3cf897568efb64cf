//! Test infrastructure for consul-elector.

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod consul;
pub mod kube_faults;
pub mod node;
pub mod node_suite;
pub mod pods;
pub mod real_consul;
pub mod recorder;
pub mod sandbox;
pub mod version;
