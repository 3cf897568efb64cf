//! consul-elector: a Kubernetes operator that elects one leader pod per `LeaderElection`
//! through Consul sessions and KV locks.

pub mod bounded_read;
pub mod cache;
pub mod cli;
pub mod cluster_identity;
pub mod consul;
pub mod consul_access;
pub mod context;
pub mod controller;
pub mod crd;
pub mod election;
pub mod env_names;
pub mod error;
pub mod event_queue;
pub mod http;
pub mod inputs;
pub mod k8s;
pub mod kube_client;
pub mod leadership;
pub mod metrics;
pub mod object_meta;
pub mod observers;
pub mod operator;
pub mod plugin;
pub mod uninstall;
pub mod wall_clock;
pub mod write_gate;

/// Installs rustls's ring provider as the process-wide default crypto provider.
///
/// Call it first thing in `main` (and in tests that use TLS): kube's client and the Consul
/// client build their TLS configurations from the process default. Idempotent: when a provider
/// is already installed (by an earlier call or by another library), that one is kept.
pub fn install_crypto_provider() {
    // `Err` means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub use error::Error;
