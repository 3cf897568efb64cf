//! The key an election is known by in the controller's queues and maps.

use kube::ResourceExt;

use crate::Error;
use crate::crd::LeaderElection;
use crate::election::config::ElectionKey;

/// The key of an election object.
pub fn election_key(le: &LeaderElection) -> Result<ElectionKey, Error> {
    Ok(ElectionKey {
        namespace: le.namespace().ok_or(Error::MissingMetadata("namespace"))?,
        name: le
            .metadata
            .name
            .clone()
            .ok_or(Error::MissingMetadata("name"))?,
    })
}
