//! An election's pod patches ([`PodPatch`], decided in the core), sent as they are. What a role
//! patch does with the annotations of a pod other elections share is the core's answer on what
//! the caches say of the pod ([`Self::shared`]). Each patched pod is remembered as written,
//! since the caches may not show it yet.

use std::sync::Arc;

use kube::api::Api;

use crate::cache::views;
use crate::context::Context;
use crate::election::annotation_owner::SharedPod;
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

    /// What this election knows of `pod` (as cached) as elections writing other label keys
    /// share it, for a role patch under `key` (making it leader: `to_leader`).
    pub fn shared(&self, key: &str, pod: &Pod, to_leader: bool) -> SharedPod {
        let (caches, me) = (&self.ctx.caches, self.election);
        let foreign_owner_leads =
            views::foreign_owner(caches, me, pod).map(|owner| views::leads(&owner, pod));
        SharedPod {
            foreign_owner_leads,
            owned_by_me: k8s::labelled_by(pod) == Some(me),
            // Only asked when it can matter (an index lookup per label of the pod).
            led_by_another: foreign_owner_leads.is_none()
                && !to_leader
                && views::led_by_another(caches, me, key, pod),
        }
    }
}
