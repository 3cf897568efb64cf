//! The simulated nodes: names, addresses, the round-robin pool the simulator binds pods
//! with, and the Node objects (created if missing, with a `Ready` condition).
//!
//! The test cluster's kube-controller-manager runs no node lifecycle controller, so the
//! Nodes need no heartbeat to stay Ready.

use std::{
    collections::BTreeSet,
    sync::atomic::{AtomicU32, Ordering},
};

use k8s_openapi::{
    api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{Api, api::PostParams};

use super::retry::{Backoff, api_code};

/// The most nodes a simulator can have (their addresses are `10.99.0.<1..=100>`).
pub(crate) const MAX_NODES: usize = 100;
const NAME_PREFIX: &str = "sim-node-";

/// The name of node `index`: `sim-node-<index>`.
pub(crate) fn node_name(index: usize) -> String {
    format!("{NAME_PREFIX}{index}")
}

/// The index of a simulated node's name, `None` for any other node.
pub(crate) fn node_index(name: &str) -> Option<usize> {
    let digits = name.strip_prefix(NAME_PREFIX)?;
    if digits.len() > 1 && digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().filter(|i| *i < MAX_NODES)
}

/// The node's `InternalIP`, which its pods report as `hostIP`.
pub(crate) fn host_ip(index: usize) -> String {
    format!("10.99.0.{}", index + 1)
}

/// A fresh pod IP on node `index`, `10.<100+index>.<hi>.<lo>`, unique within the process
/// (across simulators) for the first 65,024 pods.
pub(crate) fn allocate_pod_ip(index: usize) -> String {
    static SERIAL: AtomicU32 = AtomicU32::new(0);
    pod_ip(index, SERIAL.fetch_add(1, Ordering::Relaxed))
}

fn pod_ip(index: usize, serial: u32) -> String {
    let hi = (serial / 254) % 256;
    let lo = serial % 254 + 1;
    format!("10.{}.{hi}.{lo}", 100 + index)
}

/// The nodes pods can be bound to: round-robin over the nodes that are not failed.
#[derive(Debug)]
pub(crate) struct NodePool {
    count: usize,
    failed: BTreeSet<usize>,
    next: usize,
}

impl NodePool {
    /// A pool of `count` nodes, clamped to `1..=MAX_NODES`.
    pub(crate) fn new(count: usize) -> Self {
        Self {
            count: count.clamp(1, MAX_NODES),
            failed: BTreeSet::new(),
            next: 0,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The next healthy node in round-robin order, `None` when every node is failed.
    pub(crate) fn pick(&mut self) -> Option<usize> {
        let index = (0..self.count)
            .map(|offset| (self.next + offset) % self.count)
            .find(|i| !self.failed.contains(i))?;
        self.next = (index + 1) % self.count;
        Some(index)
    }

    pub(crate) fn set_failed(&mut self, index: usize, failed: bool) {
        if failed {
            self.failed.insert(index);
        } else {
            self.failed.remove(&index);
        }
    }

    pub(crate) fn is_failed(&self, index: usize) -> bool {
        self.failed.contains(&index)
    }
}

fn ready_condition(now: &Time) -> NodeCondition {
    NodeCondition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: Some("KubeletReady".into()),
        message: Some("testkit pod simulator is posting ready status".into()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The Node object for node `index`, with its hostname label, address and `Ready` status.
fn node_object(index: usize, now: &Time) -> Node {
    let name = node_name(index);
    Node {
        metadata: ObjectMeta {
            labels: Some(
                [
                    ("kubernetes.io/hostname", name.as_str()),
                    ("kubernetes.io/os", "linux"),
                    ("testkit.dev/simulated", "true"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            name: Some(name.clone()),
            ..ObjectMeta::default()
        },
        status: Some(NodeStatus {
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: host_ip(index),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name,
                },
            ]),
            conditions: Some(vec![ready_condition(now)]),
            ..NodeStatus::default()
        }),
        ..Node::default()
    }
}

/// Creates node `index` unless it exists (Nodes are shared by every simulator).
async fn create_node(api: &Api<Node>, index: usize) -> Result<(), kube::Error> {
    let node = node_object(index, &Time(Timestamp::now()));
    match api.create(&PostParams::default(), &node).await {
        Err(error) if api_code(&error) != Some(409) => Err(error),
        _ => Ok(()),
    }
}

/// Creates the missing nodes among the first `count`, retrying with backoff until done;
/// errors are logged.
pub(crate) async fn create_nodes(api: Api<Node>, count: usize) {
    let mut backoff = Backoff::new();
    loop {
        let results = futures::future::join_all((0..count).map(|i| create_node(&api, i))).await;
        match results.into_iter().collect::<Result<(), _>>() {
            Ok(()) => return,
            Err(error) => {
                let delay = backoff.next_delay();
                tracing::warn!(
                    %error,
                    ?delay,
                    "pod simulator: creating the nodes failed; retrying"
                );
                tokio::time::sleep(delay).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_foreign_names_are_rejected() {
        assert_eq!(node_name(2), "sim-node-2");
        assert_eq!(node_index("sim-node-2"), Some(2));
        assert_eq!(node_index("sim-node-99"), Some(99));
        for foreign in [
            "sim-node-100",
            "sim-node-02",
            "sim-node-",
            "node-1",
            "sim-node--1",
        ] {
            assert_eq!(node_index(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn pod_ips_encode_the_node_and_stay_unique() {
        assert_eq!(pod_ip(0, 0), "10.100.0.1");
        assert_eq!(pod_ip(2, 253), "10.102.0.254");
        assert_eq!(pod_ip(2, 254), "10.102.1.1");
        let ips: BTreeSet<_> = (0..65_024).map(|s| pod_ip(1, s)).collect();
        assert_eq!(ips.len(), 65_024);
        assert_ne!(allocate_pod_ip(0), allocate_pod_ip(0));
        assert_eq!(host_ip(0), "10.99.0.1");
    }

    #[test]
    fn pool_round_robins_over_healthy_nodes() {
        let mut pool = NodePool::new(3);
        let picks: Vec<_> = (0..4).map(|_| pool.pick()).collect();
        assert_eq!(picks, [Some(0), Some(1), Some(2), Some(0)]);
        pool.set_failed(1, true);
        assert!(pool.is_failed(1));
        let picks: Vec<_> = (0..3).map(|_| pool.pick()).collect();
        assert_eq!(picks, [Some(2), Some(0), Some(2)]);
        pool.set_failed(0, true);
        pool.set_failed(2, true);
        assert_eq!(pool.pick(), None);
        pool.set_failed(1, false);
        assert_eq!(pool.pick(), Some(1));
    }

    #[test]
    fn pool_size_is_clamped() {
        assert_eq!(NodePool::new(0).count(), 1);
        assert_eq!(NodePool::new(1000).count(), MAX_NODES);
    }

    #[test]
    fn node_object_carries_hostname_label_address_and_ready() {
        let now = Time(Timestamp::UNIX_EPOCH);
        let node = node_object(1, &now);
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels["kubernetes.io/hostname"], "sim-node-1");
        let status = node.status.unwrap_or_default();
        let conditions = status.conditions.unwrap_or_default();
        assert_eq!(
            (conditions[0].type_.as_str(), conditions[0].status.as_str()),
            ("Ready", "True")
        );
        assert_eq!(status.addresses.unwrap_or_default()[0].address, "10.99.0.2");
    }
}
