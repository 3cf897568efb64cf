//! The integration tests, in one binary: the operator against the test cluster, the Consul
//! emulator and a real Consul; the Consul client, sessions and lock watchers; the CRD, the
//! chart and the examples. One binary links the crate and the test kit once, and its tests
//! share one test cluster.
//!
//! Run one file's tests by its module path: `cargo test --test it election_failover::`.
//! Tests that install a process-wide tracing subscriber keep a binary of their own
//! (`tests/init_tracing.rs`, `tests/consul_token_leak.rs`).

mod common;
mod harness;
mod pki;
mod support;

mod chart_install;
mod consul_client;
mod consul_credentials;
mod consul_faults;
mod crd_cel;
mod crd_schema;
mod credentials_rotation;
mod election_basics;
mod election_clusters;
mod election_consul;
mod election_edits;
mod election_failover;
mod election_fencing;
mod election_invariants;
mod election_lifecycle;
mod election_security;
mod election_sessions;
mod election_specs;
mod election_status;
mod election_switchover;
mod examples;
mod kubectl_plugin;
mod locks;
mod operator_ha;
mod operator_installs;
mod operator_pause;
mod sessions;
