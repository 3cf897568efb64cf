//! Emulator configuration.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::acl::AclConfig;
use super::clock::ClockMode;

/// How to start an [`Emulator`](super::Emulator). `Default` gives the values Consul uses.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Address to listen on; default `127.0.0.1:0` (an ephemeral port).
    pub listen: SocketAddr,
    /// Clock driving TTLs, lock-delays and blocking timeouts; default [`ClockMode::Manual`].
    pub clock: ClockMode,
    /// A TTL session is invalidated `ttl_multiplier × TTL` after its last create, renew
    /// or leader election; default 2 (Consul's `SessionTTLMultiplier`).
    pub ttl_multiplier: u32,
    /// Lower bound for a non-zero session TTL (`session_ttl_min`); default 10 s.
    pub session_ttl_min: Duration,
    /// Largest accepted KV value in bytes (`kv_max_value_size`); default 524288.
    pub max_value_size: usize,
    /// Add a uniform random jitter in `[0, timeout/16)` to blocking-query timeouts; default true.
    pub jitter: bool,
    /// Name of the agent's node (registered with a passing `serfHealth`); default `node1`.
    pub node_name: String,
    /// Datacenter served; any other `?dc=` gets 500 `No path to datacenter`. Default `dc1`.
    pub datacenter: String,
    /// ACL configuration; `None` (the default) disables ACLs.
    pub acl: Option<AclConfig>,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            clock: ClockMode::Manual,
            ttl_multiplier: 2,
            session_ttl_min: Duration::from_secs(10),
            max_value_size: 524_288,
            jitter: true,
            node_name: "node1".to_string(),
            datacenter: "dc1".to_string(),
            acl: None,
        }
    }
}
