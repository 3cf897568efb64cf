//! An election's pod patches ([`PodPatch`], decided in the core), sent as they are. Each
//! patched pod is remembered as written, since the caches may not show it yet.

use std::sync::Arc;

use kube::api::Api;

use crate::context::Context;
use crate::election::config::ElectionKey;
use crate::election::pod_patch::PodPatch;
use crate::k8s::{self, Pod};

/// Patches the pods of one election.
pub struct PodWrites<'a> {
    ctx: &'a Context,
    api: Api<Pod>,
    election: &'a str,
    /// Whether the election plans again on the pods it patched (a reconcile's plan loop); a
    /// withdrawal does not, and lets the patch's own event wake it.
    replans: bool,
}

impl<'a> PodWrites<'a> {
    /// The patches of election `key`.
    pub fn new(ctx: &'a Context, key: &'a ElectionKey, replans: bool) -> Self {
        PodWrites {
            ctx,
            api: Api::namespaced(ctx.client.clone(), &key.namespace),
            election: &key.name,
            replans,
        }
    }

    /// Sends `patch`; returns the pod as the API server now has it.
    pub async fn send(&self, patch: &PodPatch) -> Result<Arc<Pod>, kube::Error> {
        let patched = Arc::new(k8s::patch_pod(&self.api, patch).await?);
        let by = self.replans.then_some(self.election);
        self.ctx.caches.written.remember_pod(&patched, by);
        Ok(patched)
    }
}
