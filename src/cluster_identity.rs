//! The identity of the Kubernetes cluster an operator runs in.
//!
//! Two clusters may share one Consul, and the same namespace and election name can exist in
//! both. The cluster name goes into every session name and key value the operator writes, and
//! the operator adopts or releases only sessions that carry its own, so that one cluster never
//! takes over or frees another's lock.

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

use crate::Error;

/// The namespace whose UID names a cluster by default: every cluster has it, it cannot be
/// deleted, and its UID never changes for the life of the cluster.
pub const IDENTITY_NAMESPACE: &str = "kube-system";

/// The cluster name to use: `configured` when the admin set one, else the UID of the
/// `kube-system` namespace.
pub async fn resolve(client: &Client, configured: Option<String>) -> Result<String, Error> {
    if let Some(name) = configured {
        return Ok(name);
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = namespaces
        .get_metadata(IDENTITY_NAMESPACE)
        .await
        .map_err(Error::kube(
            "read the kube-system namespace for the cluster name",
        ))?;
    namespace
        .metadata
        .uid
        .filter(|uid| !uid.is_empty())
        .ok_or(Error::MissingMetadata("kube-system namespace uid"))
}
