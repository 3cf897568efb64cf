//! consul-elector: a Kubernetes operator that elects one leader pod per `LeaderElection`
//! through Consul sessions and KV locks.

pub mod consul;
