//! The read side of the operator, in one place: the reflector stores of pods and elections,
//! the indexes over them, the validated specs, the owners' selectors and what this process
//! wrote that the stores may not show yet. Reconciles read it; only the watch streams (the
//! stores, the indexes) and the active replica's reconciles (its own writes) change it.

use std::sync::Arc;

use kube::runtime::reflector::Store;

use super::index::Indexes;
use super::owner_selectors::OwnerSelectors;
use super::validated::Validated;
use super::written::Memory;
use crate::crd::{LeaderElection, LeaderElectionStatus};
use crate::k8s::Pod;

/// What the operator knows of the cluster between two reads.
pub struct Caches {
    /// Cache of pods.
    pub pods: Store<Pod>,
    /// Cache of elections.
    pub elections: Store<LeaderElection>,
    /// Indexes over both caches.
    pub index: Arc<Indexes>,
    /// The elections' validated configurations.
    pub validated: Validated,
    /// The selector keys of the candidate pods' controllers.
    pub owner_selectors: OwnerSelectors,
    /// What this process wrote that the caches may not show yet, and what one decision passes
    /// to the next (shared with the pod events' mapping to elections).
    pub written: Arc<Memory>,
}

impl Caches {
    /// The election's current status: what this process last wrote for it, else the newest
    /// version of it cached (see [`Memory::current_status`]).
    pub fn current_status(&self, le: &LeaderElection) -> LeaderElectionStatus {
        self.written.current_status(le, &self.elections)
    }

    /// Whether the election has a status (see [`Memory::status_exists`]).
    pub fn status_exists(&self, le: &LeaderElection) -> bool {
        self.written.status_exists(le, &self.elections)
    }
}
