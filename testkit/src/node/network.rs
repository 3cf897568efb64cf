//! The node's network: the host address it registers with, the bridge CNI configuration of
//! its pods, and the kernel settings routing to them needs.

use std::net::{Ipv4Addr, UdpSocket};
use std::path::Path;

use crate::cluster::ClusterError;

/// The pods' addresses on every node of this host: node `i` has `10.244.i.0/24`, on a bridge
/// `electori` whose address is `10.244.i.1`. The host routes between the bridges.
pub const CLUSTER_POD_CIDR: &str = "10.244.0.0/16";

/// The pod range of node `index` (the bridge's host-local range).
pub(super) fn pod_cidr(index: u8) -> String {
    format!("10.244.{index}.0/24")
}

/// The bridge the CNI plugin of node `index` creates on the host.
fn bridge(index: u8) -> String {
    format!("elector{index}")
}

/// The host's address on its default route: the one a kubelet registers as the node's
/// InternalIP and pods reach the host at. (A connected UDP socket sends nothing; it only makes
/// the kernel pick the source address.)
pub fn host_address() -> Result<Ipv4Addr, ClusterError> {
    let probe = || -> std::io::Result<Ipv4Addr> {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        // TEST-NET-3: never contacted, only routed.
        socket.connect((Ipv4Addr::new(203, 0, 113, 1), 9))?;
        match socket.local_addr()?.ip() {
            std::net::IpAddr::V4(address) if !address.is_loopback() => Ok(address),
            other => Err(std::io::Error::other(format!(
                "the default route's source address is {other}, not a host address"
            ))),
        }
    };
    probe().map_err(ClusterError::io(
        "finding the host's address on its default route (a real node needs one)",
    ))
}

/// Turns on what kube-proxy's rules and the bridge need: IPv4 forwarding, and iptables seeing
/// bridged traffic (a pod reaching a Service whose endpoint is on the same bridge).
pub(super) fn prepare_host() -> Result<(), ClusterError> {
    for knob in [
        "/proc/sys/net/ipv4/ip_forward",
        "/proc/sys/net/bridge/bridge-nf-call-iptables",
    ] {
        std::fs::write(knob, "1").map_err(ClusterError::io(format!(
            "writing 1 to {knob} (a real node needs root and the br_netfilter module)"
        )))?;
    }
    Ok(())
}

/// Writes the CNI configuration list of node `index`'s pod network into `conf_dir`; the
/// plugins keep their address allocations under `state_dir`.
pub(super) fn write_cni_config(
    index: u8,
    conf_dir: &Path,
    state_dir: &Path,
) -> Result<(), ClusterError> {
    std::fs::create_dir_all(conf_dir)
        .map_err(ClusterError::io(format!("creating {}", conf_dir.display())))?;
    let config = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "elector-pods",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge(index),
                "isGateway": true,
                "ipMasq": true,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": pod_cidr(index)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": state_dir.join("ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ],
    });
    let path = conf_dir.join("10-elector-pods.conflist");
    std::fs::write(&path, config.to_string())
        .map_err(ClusterError::io(format!("writing {}", path.display())))
}
