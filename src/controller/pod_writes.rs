//! An election's pod patches: its role label and annotations, and the handover annotation.
//! On a pod shared with elections of other label keys, what a role patch does with the
//! annotations is [`annotations`]'s answer on what the caches say of the pod. Each patched pod
//! is remembered as written, since the caches may not show it yet.

use std::sync::Arc;

use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::cache::views;
use crate::context::Context;
use crate::election::annotation_owner::{Annotations, SharedPod, annotations};
use crate::election::config::{ElectionKey, LabelConfig};
use crate::k8s::{self, Pod, PodRole};

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

    /// Gives pod `name` (incarnation `uid`; `cached`, the pod as the caches have it) the
    /// `role` under `labels`; returns the pod as the API server now has it.
    pub async fn set_role(
        &self,
        cached: Option<&Pod>,
        name: &str,
        uid: &str,
        labels: &LabelConfig,
        role: PodRole,
    ) -> Result<Arc<Pod>, kube::Error> {
        let annotations = cached.map_or(Annotations::Write, |pod| {
            self.annotations(&labels.key, pod, role)
        });
        let mut patch = k8s::role_patch(uid, labels, self.election, role);
        if let Some(metadata) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
            match annotations {
                Annotations::Write => {}
                Annotations::Keep => {
                    metadata.remove("annotations");
                }
                Annotations::GiveUp => {
                    metadata.insert(
                        "annotations".to_owned(),
                        json!({
                            crate::crd::FENCING_TOKEN_ANNOTATION: null,
                            crate::crd::LEADER_SINCE_ANNOTATION: null,
                            k8s::ELECTION_ANNOTATION: null,
                        }),
                    );
                }
            }
        }
        let mut patched = self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        patched.slim();
        Ok(self.remember(patched))
    }

    /// Sets (`Some`) or removes the pod's `elector.dev/handover` annotation.
    pub async fn set_handover(
        &self,
        name: &str,
        uid: &str,
        value: Option<&str>,
    ) -> Result<Arc<Pod>, kube::Error> {
        let patched = k8s::set_handover(&self.api, name, uid, value).await?;
        Ok(self.remember(patched))
    }

    fn remember(&self, patched: Pod) -> Arc<Pod> {
        let patched = Arc::new(patched);
        let by = self.replans.then_some(self.election);
        self.ctx.caches.written.remember_pod(&patched, by);
        patched
    }

    /// What a patch giving `pod` the `role` under label key `key` does with the annotations.
    fn annotations(&self, key: &str, pod: &Pod, role: PodRole) -> Annotations {
        let (caches, me) = (&self.ctx.caches, self.election);
        let foreign_owner_leads =
            views::foreign_owner(caches, me, pod).map(|owner| views::leads(&owner, pod));
        let to_leader = matches!(role, PodRole::Leader { .. });
        annotations(
            SharedPod {
                foreign_owner_leads,
                owned_by_me: k8s::labelled_by(pod) == Some(me),
                // Only asked when it can matter (an index lookup per label of the pod).
                led_by_another: foreign_owner_leads.is_none()
                    && !to_leader
                    && views::led_by_another(caches, me, key, pod),
            },
            to_leader,
        )
    }
}
