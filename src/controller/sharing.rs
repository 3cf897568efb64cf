//! Pods shared by elections with different label keys: the controller's side of
//! [`crate::election::annotation_owner`] (which election writes a pod's annotations), reading the
//! caches for what it needs, and the patch that follows its answer.

use crate::k8s::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::context::Context;
use crate::cache::views;
pub use crate::election::annotation_owner::Annotations;
use crate::election::annotation_owner::{SharedPod, annotations};
use crate::election::config::LabelConfig;
use crate::k8s::{self, PodRole};

/// What a patch giving `pod` the `role` in election `me` (writing label key `key`) does with
/// the annotations ([`annotations`], on what the caches say of the pod).
pub fn annotations_for(
    ctx: &Context,
    me: &str,
    key: &str,
    pod: &Pod,
    role: PodRole,
) -> Annotations {
    let foreign_owner_leads =
        views::foreign_owner(&ctx.caches, me, pod).map(|owner| views::leads(&owner, pod));
    let to_leader = matches!(role, PodRole::Leader { .. });
    annotations(
        SharedPod {
            foreign_owner_leads,
            owned_by_me: k8s::labelled_by(pod) == Some(me),
            // Only asked when it can matter (an index lookup per label of the pod).
            led_by_another: foreign_owner_leads.is_none()
                && !to_leader
                && views::led_by_another(&ctx.caches, me, key, pod),
        },
        to_leader,
    )
}

/// Gives pod `name` (incarnation `uid`) the `role` under `labels` for election `me`, treating
/// the annotations as `annotations` says; returns the pod as the API server now has it.
pub async fn set_role(
    pods: &Api<Pod>,
    name: &str,
    uid: &str,
    labels: &LabelConfig,
    me: &str,
    role: PodRole,
    annotations: Annotations,
) -> Result<Pod, kube::Error> {
    let mut patch = k8s::role_patch(uid, labels, me, role);
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
    let mut pod = pods
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    pod.slim();
    Ok(pod)
}
